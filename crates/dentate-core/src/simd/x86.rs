use super::{PANEL, QR_MAX};
use half::f16;
use std::arch::x86_64::*;

#[target_feature(enable = "avx512f")]
pub(super) unsafe fn argmax_avx512(q: &[f32], d: usize, c: &[f32], bias: &[f32], rows: &mut [u32], scores: &mut [f32]) {
    super::argmax_generic(q, d, c, bias, rows, scores)
}

#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn argmax_avx2(q: &[f32], d: usize, c: &[f32], bias: &[f32], rows: &mut [u32], scores: &mut [f32]) {
    super::argmax_generic(q, d, c, bias, rows, scores)
}

#[target_feature(enable = "avx512f")]
pub(super) unsafe fn panel_dots_avx512(q: &[f32], d: usize, p: &[f32], n: usize, out: &mut [f32]) {
    super::panel_dots_generic(q, d, p, n, out)
}

#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn panel_dots_avx2(q: &[f32], d: usize, p: &[f32], n: usize, out: &mut [f32]) {
    super::panel_dots_generic(q, d, p, n, out)
}

#[target_feature(enable = "avx512f")]
pub(super) unsafe fn dot_avx512(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut i = 0;
    unsafe {
        while i + 64 <= n {
            for (u, a) in acc.iter_mut().enumerate() {
                *a = _mm512_fmadd_ps(
                    _mm512_loadu_ps(pa.add(i + 16 * u)),
                    _mm512_loadu_ps(pb.add(i + 16 * u)),
                    *a,
                );
            }
            i += 64;
        }
        while i + 16 <= n {
            acc[0] = _mm512_fmadd_ps(_mm512_loadu_ps(pa.add(i)), _mm512_loadu_ps(pb.add(i)), acc[0]);
            i += 16;
        }
        if i < n {
            let m: __mmask16 = (1u32 << (n - i)) as u16 - 1;
            acc[1] = _mm512_fmadd_ps(
                _mm512_maskz_loadu_ps(m, pa.add(i)),
                _mm512_maskz_loadu_ps(m, pb.add(i)),
                acc[1],
            );
        }
    }
    let s = _mm512_add_ps(_mm512_add_ps(acc[0], acc[1]), _mm512_add_ps(acc[2], acc[3]));
    _mm512_reduce_add_ps(s)
}

#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn dot_avx2(a: &[f32], b: &[f32]) -> f32 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm256_setzero_ps(); 4];
    let mut i = 0;
    unsafe {
        while i + 32 <= n {
            for (u, a) in acc.iter_mut().enumerate() {
                *a = _mm256_fmadd_ps(
                    _mm256_loadu_ps(pa.add(i + 8 * u)),
                    _mm256_loadu_ps(pb.add(i + 8 * u)),
                    *a,
                );
            }
            i += 32;
        }
        while i + 8 <= n {
            acc[0] = _mm256_fmadd_ps(_mm256_loadu_ps(pa.add(i)), _mm256_loadu_ps(pb.add(i)), acc[0]);
            i += 8;
        }
    }
    let s = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
    let mut s = hsum256(s);
    for j in i..n {
        s += a[j] * b[j];
    }
    s
}

#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn dot_f16_avx2(a: &[f16], b: &[f32]) -> f32 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr() as *const u16, b.as_ptr());
    let mut acc0 = _mm256_setzero_ps();
    let mut acc1 = _mm256_setzero_ps();
    let mut i = 0;
    unsafe {
        while i + 16 <= n {
            let x0 = _mm256_cvtph_ps(_mm_loadu_si128(pa.add(i) as *const __m128i));
            let x1 = _mm256_cvtph_ps(_mm_loadu_si128(pa.add(i + 8) as *const __m128i));
            acc0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(pb.add(i)), acc0);
            acc1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(pb.add(i + 8)), acc1);
            i += 16;
        }
    }
    let mut s = hsum256(_mm256_add_ps(acc0, acc1));
    for j in i..n {
        s += a[j].to_f32() * b[j];
    }
    s
}

#[target_feature(enable = "avx512f,avx2,fma,f16c")]
pub(super) unsafe fn dot_f16_avx512(a: &[f16], b: &[f32]) -> f32 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr() as *const u16, b.as_ptr());
    // Four independent sums: the FMA latency, not its throughput, bounds
    // a single chain.
    let mut acc = [_mm512_setzero_ps(); 4];
    let mut i = 0;
    unsafe {
        while i + 64 <= n {
            for (u, a) in acc.iter_mut().enumerate() {
                let x = _mm512_cvtph_ps(_mm256_loadu_si256(pa.add(i + 16 * u) as *const __m256i));
                *a = _mm512_fmadd_ps(x, _mm512_loadu_ps(pb.add(i + 16 * u)), *a);
            }
            i += 64;
        }
        while i + 16 <= n {
            let x = _mm512_cvtph_ps(_mm256_loadu_si256(pa.add(i) as *const __m256i));
            acc[0] = _mm512_fmadd_ps(x, _mm512_loadu_ps(pb.add(i)), acc[0]);
            i += 16;
        }
    }
    let mut s = _mm512_reduce_add_ps(_mm512_add_ps(
        _mm512_add_ps(acc[0], acc[1]),
        _mm512_add_ps(acc[2], acc[3]),
    ));
    for j in i..n {
        s += a[j].to_f32() * b[j];
    }
    s
}

#[target_feature(enable = "avx2")]
fn hsum256(v: __m256) -> f32 {
    let lo = _mm256_castps256_ps128(v);
    let hi = _mm256_extractf128_ps(v, 1);
    let s = _mm_add_ps(lo, hi);
    let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    let s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    _mm_cvtss_f32(s)
}

/// Loads 16 lanes of a panel column as f32.
trait Lanes16 {
    unsafe fn load512(p: *const Self) -> __m512;
    unsafe fn load256(p: *const Self) -> __m256;
}
impl Lanes16 for f32 {
    #[inline(always)]
    unsafe fn load512(p: *const f32) -> __m512 {
        unsafe { _mm512_loadu_ps(p) }
    }
    #[inline(always)]
    unsafe fn load256(p: *const f32) -> __m256 {
        unsafe { _mm256_loadu_ps(p) }
    }
}
impl Lanes16 for f16 {
    #[inline(always)]
    unsafe fn load512(p: *const f16) -> __m512 {
        unsafe { _mm512_cvtph_ps(_mm256_loadu_si256(p as *const __m256i)) }
    }
    #[inline(always)]
    unsafe fn load256(p: *const f16) -> __m256 {
        unsafe { _mm256_cvtph_ps(_mm_loadu_si128(p as *const __m128i)) }
    }
}

/// QR queries × NP panels register tile, AVX-512.
#[inline(always)]
unsafe fn kern512<T: Lanes16, const QR: usize, const NP: usize>(
    q: *const f32,
    d: usize,
    p: *const T,
    out: *mut f32,
    width: usize,
) {
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); NP]; QR];
        for j in 0..d {
            let mut pv = [_mm512_setzero_ps(); NP];
            for (n, v) in pv.iter_mut().enumerate() {
                *v = T::load512(p.add(n * PANEL * d + j * PANEL));
            }
            for (r, row) in acc.iter_mut().enumerate() {
                let qb = _mm512_set1_ps(*q.add(r * d + j));
                for n in 0..NP {
                    row[n] = _mm512_fmadd_ps(qb, pv[n], row[n]);
                }
            }
        }
        for (r, row) in acc.iter().enumerate() {
            for (n, v) in row.iter().enumerate() {
                _mm512_storeu_ps(out.add(r * width + n * PANEL), *v);
            }
        }
    }
}

/// QR queries × one panel (two 8-lane halves), AVX2.
#[inline(always)]
unsafe fn kern256<T: Lanes16, const QR: usize>(q: *const f32, d: usize, p: *const T, out: *mut f32, width: usize) {
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); 2]; QR];
        for j in 0..d {
            let v0 = T::load256(p.add(j * PANEL));
            let v1 = T::load256(p.add(j * PANEL + 8));
            for (r, row) in acc.iter_mut().enumerate() {
                let qb = _mm256_set1_ps(*q.add(r * d + j));
                row[0] = _mm256_fmadd_ps(qb, v0, row[0]);
                row[1] = _mm256_fmadd_ps(qb, v1, row[1]);
            }
        }
        for (r, row) in acc.iter().enumerate() {
            _mm256_storeu_ps(out.add(r * width), row[0]);
            _mm256_storeu_ps(out.add(r * width + 8), row[1]);
        }
    }
}

macro_rules! dispatch_qr {
    ($qr:expr, $f:ident, $($rest:tt)*) => {
        match $qr {
            6 => $f!(6, $($rest)*),
            5 => $f!(5, $($rest)*),
            4 => $f!(4, $($rest)*),
            3 => $f!(3, $($rest)*),
            2 => $f!(2, $($rest)*),
            _ => $f!(1, $($rest)*),
        }
    };
}

#[inline(always)]
unsafe fn tiles512<T: Lanes16>(q: &[f32], nq: usize, d: usize, p: &[T], np: usize, out: &mut [f32], width: usize) {
    const { assert!(QR_MAX == 6) };
    let (qp, pp, op) = (q.as_ptr(), p.as_ptr(), out.as_mut_ptr());
    let mut pi = 0;
    while pi < np {
        let two = np - pi >= 2;
        let mut q0 = 0;
        while q0 < nq {
            let qr = (nq - q0).min(QR_MAX);
            // SAFETY: q0 + qr <= nq rows of d queries; pi (+1) < np panels;
            // out has nq rows of `width`.
            unsafe {
                let (qa, pa, oa) = (qp.add(q0 * d), pp.add(pi * PANEL * d), op.add(q0 * width + pi * PANEL));
                macro_rules! call {
                    ($n:literal, $np:literal) => {
                        kern512::<T, $n, $np>(qa, d, pa, oa, width)
                    };
                }
                if two {
                    dispatch_qr!(qr, call, 2)
                } else {
                    dispatch_qr!(qr, call, 1)
                }
            }
            q0 += qr;
        }
        pi += if two { 2 } else { 1 };
    }
}

#[inline(always)]
unsafe fn tiles256<T: Lanes16>(q: &[f32], nq: usize, d: usize, p: &[T], np: usize, out: &mut [f32], width: usize) {
    let (qp, pp, op) = (q.as_ptr(), p.as_ptr(), out.as_mut_ptr());
    for pi in 0..np {
        let mut q0 = 0;
        while q0 < nq {
            let qr = (nq - q0).min(QR_MAX);
            // SAFETY: as in tiles512.
            unsafe {
                let (qa, pa, oa) = (qp.add(q0 * d), pp.add(pi * PANEL * d), op.add(q0 * width + pi * PANEL));
                macro_rules! call {
                    ($n:literal,) => {
                        kern256::<T, $n>(qa, d, pa, oa, width)
                    };
                }
                dispatch_qr!(qr, call,)
            }
            q0 += qr;
        }
    }
}

#[target_feature(enable = "avx512f")]
pub(super) unsafe fn tiles_f32_avx512(q: &[f32], nq: usize, d: usize, p: &[f32], np: usize, out: &mut [f32], w: usize) {
    unsafe { tiles512(q, nq, d, p, np, out, w) }
}
#[target_feature(enable = "avx512f")]
pub(super) unsafe fn tiles_f16_avx512(q: &[f32], nq: usize, d: usize, p: &[f16], np: usize, out: &mut [f32], w: usize) {
    unsafe { tiles512(q, nq, d, p, np, out, w) }
}
#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn tiles_f32_avx2(q: &[f32], nq: usize, d: usize, p: &[f32], np: usize, out: &mut [f32], w: usize) {
    unsafe { tiles256(q, nq, d, p, np, out, w) }
}
#[target_feature(enable = "avx2,fma,f16c")]
pub(super) unsafe fn tiles_f16_avx2(q: &[f32], nq: usize, d: usize, p: &[f16], np: usize, out: &mut [f32], w: usize) {
    unsafe { tiles256(q, nq, d, p, np, out, w) }
}

#[target_feature(enable = "avx2,fma")]
pub(super) unsafe fn dot_u8_avx2(a: &[u8], b: &[f32]) -> f32 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc0 = _mm256_setzero_ps();
    let mut acc1 = _mm256_setzero_ps();
    let mut i = 0;
    unsafe {
        while i + 16 <= n {
            let c = _mm_loadu_si128(pa.add(i) as *const __m128i);
            let x0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(c));
            let x1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128::<8>(c)));
            acc0 = _mm256_fmadd_ps(x0, _mm256_loadu_ps(pb.add(i)), acc0);
            acc1 = _mm256_fmadd_ps(x1, _mm256_loadu_ps(pb.add(i + 8)), acc1);
            i += 16;
        }
    }
    let mut s = hsum256(_mm256_add_ps(acc0, acc1));
    for j in i..n {
        s += f32::from(a[j]) * b[j];
    }
    s
}

#[target_feature(enable = "avx512f,avx2,fma")]
pub(super) unsafe fn dot_u8_avx512(a: &[u8], b: &[f32]) -> f32 {
    let n = a.len();
    let (pa, pb) = (a.as_ptr(), b.as_ptr());
    let mut acc = [_mm512_setzero_ps(); 2];
    let mut i = 0;
    unsafe {
        while i + 32 <= n {
            for (u, a) in acc.iter_mut().enumerate() {
                let c = _mm_loadu_si128(pa.add(i + 16 * u) as *const __m128i);
                let x = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(c));
                *a = _mm512_fmadd_ps(x, _mm512_loadu_ps(pb.add(i + 16 * u)), *a);
            }
            i += 32;
        }
        while i + 16 <= n {
            let c = _mm_loadu_si128(pa.add(i) as *const __m128i);
            let x = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(c));
            acc[0] = _mm512_fmadd_ps(x, _mm512_loadu_ps(pb.add(i)), acc[0]);
            i += 16;
        }
    }
    let mut s = _mm512_reduce_add_ps(_mm512_add_ps(acc[0], acc[1]));
    for j in i..n {
        s += f32::from(a[j]) * b[j];
    }
    s
}
