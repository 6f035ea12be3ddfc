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

/// Four f16 values (the low 16 bits of each u32 lane) as f32, exactly:
/// the magnitude's bits moved to an f32's exponent and mantissa and scaled
/// by 2^112 (which rebiases the exponent from 15 to 127 and turns f16
/// subnormals into f32 normals), Inf/NaN given the all-ones exponent, the
/// sign put back: bit for bit what `half::f16::to_f32` gives. wasm has no half-precision conversion instruction, and
/// the `half` crate's portable one is a per-element bit routine.
#[inline(always)]
fn f16x4_to_f32x4(h: v128) -> v128 {
    let em = v128_and(h, u32x4_splat(0x7fff));
    let sign = u32x4_shl(v128_and(h, u32x4_splat(0x8000)), 16);
    let shifted = u32x4_shl(em, 13);
    let finite = f32x4_mul(shifted, f32x4_splat(f32::from_bits(0x7780_0000))); // 2^112
    // NaNs come out quiet, as `half`'s conversion makes them.
    let quiet = v128_and(u32x4_gt(em, u32x4_splat(0x7c00)), u32x4_splat(0x0040_0000));
    let special = v128_or(v128_or(shifted, u32x4_splat(0x7f80_0000)), quiet);
    let is_special = u32x4_ge(em, u32x4_splat(0x7c00));
    v128_or(v128_bitselect(special, finite, is_special), sign)
}

/// Eight f16 values starting at `p` as two f32x4.
///
/// # Safety
/// `p` must point to 8 readable `u16`s.
#[inline(always)]
unsafe fn load_f16x8(p: *const u16) -> (v128, v128) {
    // SAFETY: the caller guarantees 16 readable bytes; wasm loads need no alignment.
    let h = unsafe { v128_load(p as *const v128) };
    (
        f16x4_to_f32x4(u32x4_extend_low_u16x8(h)),
        f16x4_to_f32x4(u32x4_extend_high_u16x8(h)),
    )
}

/// Inner product of f16 `a` with f32 `b` (equal lengths), eight lanes at a time.
pub(super) fn dot_f16_simd128(a: &[half::f16], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let chunks = n / 8;
    let (mut s0, mut s1) = (f32x4_splat(0.0), f32x4_splat(0.0));
    for c in 0..chunks {
        let i = c * 8;
        // SAFETY: i + 8 ≤ n ≤ both lengths; `f16` is a transparent u16.
        unsafe {
            let (lo, hi) = load_f16x8(a.as_ptr().add(i) as *const u16);
            let bp = b.as_ptr().add(i) as *const v128;
            s0 = f32x4_add(s0, f32x4_mul(lo, v128_load(bp)));
            s1 = f32x4_add(s1, f32x4_mul(hi, v128_load(bp.add(1))));
        }
    }
    let s = f32x4_add(s0, s1);
    let mut sum = (f32x4_extract_lane::<0>(s) + f32x4_extract_lane::<1>(s))
        + (f32x4_extract_lane::<2>(s) + f32x4_extract_lane::<3>(s));
    for i in chunks * 8..n {
        sum += a[i].to_f32() * b[i];
    }
    sum
}

/// Widens f16 `src` into f32 `dst` (equal lengths), eight at a time.
pub(super) fn widen_f16_simd128(src: &[half::f16], dst: &mut [f32]) {
    let n = src.len().min(dst.len());
    let chunks = n / 8;
    for c in 0..chunks {
        let i = c * 8;
        // SAFETY: i + 8 ≤ n ≤ both lengths.
        unsafe {
            let (lo, hi) = load_f16x8(src.as_ptr().add(i) as *const u16);
            let dp = dst.as_mut_ptr().add(i) as *mut v128;
            v128_store(dp, lo);
            v128_store(dp.add(1), hi);
        }
    }
    for i in chunks * 8..n {
        dst[i] = src[i].to_f32();
    }
}

/// Inner product of bytes `a` (as 0–255) with f32 `b` (equal lengths),
/// sixteen at a time.
pub(super) fn dot_u8_simd128(a: &[u8], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let chunks = n / 16;
    let mut acc = [f32x4_splat(0.0); 4];
    for c in 0..chunks {
        let i = c * 16;
        // SAFETY: i + 16 ≤ n ≤ both lengths; wasm loads need no alignment.
        unsafe {
            let v = v128_load(a.as_ptr().add(i) as *const v128);
            let (lo, hi) = (u16x8_extend_low_u8x16(v), u16x8_extend_high_u8x16(v));
            let x = [
                f32x4_convert_u32x4(u32x4_extend_low_u16x8(lo)),
                f32x4_convert_u32x4(u32x4_extend_high_u16x8(lo)),
                f32x4_convert_u32x4(u32x4_extend_low_u16x8(hi)),
                f32x4_convert_u32x4(u32x4_extend_high_u16x8(hi)),
            ];
            let bp = b.as_ptr().add(i) as *const v128;
            for (u, s) in acc.iter_mut().enumerate() {
                *s = f32x4_add(*s, f32x4_mul(x[u], v128_load(bp.add(u))));
            }
        }
    }
    let s = f32x4_add(f32x4_add(acc[0], acc[1]), f32x4_add(acc[2], acc[3]));
    let mut sum = (f32x4_extract_lane::<0>(s) + f32x4_extract_lane::<1>(s))
        + (f32x4_extract_lane::<2>(s) + f32x4_extract_lane::<3>(s));
    for i in chunks * 16..n {
        sum += f32::from(a[i]) * b[i];
    }
    sum
}
