use super::PANEL;
use core::arch::wasm32::*;

pub(super) fn tiles_f32_simd128(q: &[f32], nq: usize, d: usize, p: &[f32], np: usize, out: &mut [f32], width: usize) {
    for pi in 0..np {
        let panel = &p[pi * PANEL * d..(pi + 1) * PANEL * d];
        let mut q0 = 0;
        while q0 < nq {
            let qr = (nq - q0).min(4);
            let mut acc = [[f32x4_splat(0.0); 4]; 4];
            for j in 0..d {
                let c = &panel[j * PANEL..(j + 1) * PANEL];
                let v = [
                    f32x4(c[0], c[1], c[2], c[3]),
                    f32x4(c[4], c[5], c[6], c[7]),
                    f32x4(c[8], c[9], c[10], c[11]),
                    f32x4(c[12], c[13], c[14], c[15]),
                ];
                for r in 0..qr {
                    let qb = f32x4_splat(q[(q0 + r) * d + j]);
                    for h in 0..4 {
                        acc[r][h] = f32x4_add(acc[r][h], f32x4_mul(qb, v[h]));
                    }
                }
            }
            for r in 0..qr {
                let o = &mut out[(q0 + r) * width + pi * PANEL..(q0 + r) * width + (pi + 1) * PANEL];
                for h in 0..4 {
                    let a = acc[r][h];
                    o[4 * h] = f32x4_extract_lane::<0>(a);
                    o[4 * h + 1] = f32x4_extract_lane::<1>(a);
                    o[4 * h + 2] = f32x4_extract_lane::<2>(a);
                    o[4 * h + 3] = f32x4_extract_lane::<3>(a);
                }
            }
            q0 += qr;
        }
    }
}
