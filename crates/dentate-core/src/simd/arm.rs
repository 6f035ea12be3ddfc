use super::PANEL;
use std::arch::aarch64::*;

pub(super) unsafe fn dot_neon(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); 4];
        while i + 16 <= n {
            for (u, a) in acc.iter_mut().enumerate() {
                *a = vfmaq_f32(*a, vld1q_f32(pa.add(i + 4 * u)), vld1q_f32(pb.add(i + 4 * u)));
            }
            i += 16;
        }
        let s = vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]));
        let mut s = vaddvq_f32(s);
        for j in i..n {
            s += a[j] * b[j];
        }
        s
    }
}

pub(super) unsafe fn tiles_f32_neon(
    q: &[f32],
    nq: usize,
    d: usize,
    p: &[f32],
    np: usize,
    out: &mut [f32],
    width: usize,
) {
    for pi in 0..np {
        let mut q0 = 0;
        while q0 < nq {
            let qr = (nq - q0).min(4);
            unsafe {
                let pp = p.as_ptr().add(pi * PANEL * d);
                let mut acc = [[vdupq_n_f32(0.0); 4]; 4];
                for j in 0..d {
                    let c = pp.add(j * PANEL);
                    let v = [
                        vld1q_f32(c),
                        vld1q_f32(c.add(4)),
                        vld1q_f32(c.add(8)),
                        vld1q_f32(c.add(12)),
                    ];
                    for r in 0..qr {
                        let qb = vdupq_n_f32(*q.get_unchecked((q0 + r) * d + j));
                        for h in 0..4 {
                            acc[r][h] = vfmaq_f32(acc[r][h], qb, v[h]);
                        }
                    }
                }
                for r in 0..qr {
                    let o = out.as_mut_ptr().add((q0 + r) * width + pi * PANEL);
                    for h in 0..4 {
                        vst1q_f32(o.add(4 * h), acc[r][h]);
                    }
                }
            }
            q0 += qr;
        }
    }
}

#[target_feature(enable = "neon")]
pub(super) unsafe fn dot_u8_neon(a: &[u8], b: &[f32]) -> f32 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut i = 0;
    unsafe {
        let mut acc = [vdupq_n_f32(0.0); 4];
        while i + 16 <= n {
            let c = vld1q_u8(pa.add(i));
            let lo = vmovl_u8(vget_low_u8(c));
            let hi = vmovl_high_u8(c);
            let x = [
                vcvtq_f32_u32(vmovl_u16(vget_low_u16(lo))),
                vcvtq_f32_u32(vmovl_high_u16(lo)),
                vcvtq_f32_u32(vmovl_u16(vget_low_u16(hi))),
                vcvtq_f32_u32(vmovl_high_u16(hi)),
            ];
            for (u, a) in acc.iter_mut().enumerate() {
                *a = vfmaq_f32(*a, x[u], vld1q_f32(pb.add(i + 4 * u)));
            }
            i += 16;
        }
        let s = vaddq_f32(vaddq_f32(acc[0], acc[1]), vaddq_f32(acc[2], acc[3]));
        let mut s = vaddvq_f32(s);
        for j in i..n {
            s += f32::from(a[j]) * b[j];
        }
        s
    }
}
