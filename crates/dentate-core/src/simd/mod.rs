//! SIMD kernels, chosen at run time, on raw slices.
//!
//! This module holds the instruction-set choice ([`Isa`]) and the safe
//! dispatchers; the per-architecture bodies live in `x86.rs`, `arm.rs` and
//! `wasm.rs` beside it, and the 4-bit fast-scan kernels (each architecture
//! in one file, as one family) in `pq4.rs`. The storage layouts the kernels
//! read ([`crate::layout`]) call these on their buffers.
//!
//! Three families live here:
//! - vector primitives (`dot`, `dot_f16`) used by re-ranking and training;
//! - the fast-scan shuffle kernels over packed 4-bit codes (`pq4`, see
//!   [`crate::fastscan`] for the layout);
//! - the **panel tile kernel**, the engine's one matrix-product kernel. Base
//!   vectors are stored in *panels* of [`PANEL`] rows laid out
//!   dimension-major (`panel[j * 16 + lane]` is component `j` of row
//!   `lane`), so a register holds the same component of 16 (or 8) base rows
//!   and a tile of up to 6 queries × 32 rows accumulates with broadcast-FMA
//!   and no horizontal reductions, like the micro-kernel of a GEMM whose
//!   right-hand side was packed once, at insert time, instead of per call.
//!
//! The instruction set is detected once: AVX-512F, then AVX2+FMA(+F16C) on
//! x86-64; NEON on aarch64; simd128 on wasm32 when compiled with it; a
//! portable scalar path everywhere. `DENTATE_SIMD=scalar|avx2|avx512|neon|simd128`
//! forces a path no more capable than the machine (for tests and comparisons).

use half::f16;
use std::sync::OnceLock;

#[cfg(target_arch = "aarch64")]
mod arm;
pub(crate) mod pq4;
#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm;
#[cfg(target_arch = "x86_64")]
mod x86;

/// Rows per panel of the blocked layout.
pub const PANEL: usize = 16;
/// Largest number of query rows in one register tile.
#[cfg_attr(not(target_arch = "x86_64"), allow(dead_code))]
pub(crate) const QR_MAX: usize = 6;

/// An instruction-set path for the kernels.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Isa {
    /// Portable Rust; the compiler may auto-vectorise it for the baseline target.
    Scalar,
    /// wasm32 simd128 (compile-time feature).
    Simd128,
    /// aarch64 NEON (always present on aarch64).
    Neon,
    /// x86-64 AVX2 + FMA + F16C.
    Avx2,
    /// x86-64 AVX-512F.
    Avx512,
}

impl Isa {
    /// Human-readable name.
    pub fn name(self) -> &'static str {
        match self {
            Isa::Scalar => "scalar",
            Isa::Simd128 => "simd128",
            Isa::Neon => "neon",
            Isa::Avx2 => "avx2+fma",
            Isa::Avx512 => "avx512f",
        }
    }

    /// Every path this machine can run, the best last.
    pub fn available() -> Vec<Isa> {
        let mut v = vec![Isa::Scalar];
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        v.push(Isa::Simd128);
        #[cfg(target_arch = "aarch64")]
        v.push(Isa::Neon);
        #[cfg(target_arch = "x86_64")]
        {
            if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") && is_x86_feature_detected!("f16c") {
                v.push(Isa::Avx2);
                if is_x86_feature_detected!("avx512f") {
                    v.push(Isa::Avx512);
                }
            }
        }
        v
    }

    /// The path the engine uses: the best available, unless `DENTATE_SIMD`
    /// names a weaker one that is available.
    pub fn active() -> Isa {
        static ACTIVE: OnceLock<Isa> = OnceLock::new();
        *ACTIVE.get_or_init(|| {
            let avail = Isa::available();
            let best = *avail.last().unwrap_or(&Isa::Scalar);
            match std::env::var("DENTATE_SIMD") {
                Ok(want) => avail
                    .iter()
                    .copied()
                    .find(|i| i.name().starts_with(want.trim()))
                    .unwrap_or_else(|| {
                        log::warn!("DENTATE_SIMD={want} is not available here; using {}", best.name());
                        best
                    }),
                Err(_) => best,
            }
        })
    }
}

// ---------------------------------------------------------------------------
// Vector primitives
// ---------------------------------------------------------------------------

/// Inner product of two equal-length f32 slices on the given path.
pub fn dot_with(isa: Isa, a: &[f32], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512`/`Avx2` are only produced after runtime detection.
        Isa::Avx512 => unsafe { x86::dot_avx512(a, b) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::dot_avx2(a, b) },
        #[cfg(target_arch = "aarch64")]
        Isa::Neon => unsafe { arm::dot_neon(a, b) },
        _ => dot_scalar(a, b),
    }
}

/// Inner product on the active path.
#[inline]
pub fn dot(a: &[f32], b: &[f32]) -> f32 {
    dot_with(Isa::active(), a, b)
}

/// The portable inner product of `a` (widened to f32) with `b`: eight
/// independent partial sums the compiler can vectorise, then the tail.
#[inline(always)]
fn dot_scalar<T: Copy + Into<f32>>(a: &[T], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        for l in 0..8 {
            acc[l] += a[c * 8 + l].into() * b[c * 8 + l];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for i in chunks * 8..a.len() {
        s += a[i].into() * b[i];
    }
    s
}

/// Inner product of an f16 slice with an f32 slice on the given path.
pub fn dot_f16_with(isa: Isa, a: &[f16], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: produced only after runtime detection of AVX-512F, and of
        // AVX2+FMA+F16C (which every AVX-512F machine also passes).
        Isa::Avx512 => unsafe { x86::dot_f16_avx512(a, b) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::dot_f16_avx2(a, b) },
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Isa::Simd128 => wasm::dot_f16_simd128(a, b),
        _ => {
            let mut s = 0f32;
            for (x, y) in a.iter().zip(b) {
                s += x.to_f32() * y;
            }
            s
        }
    }
}

/// Inner product of bytes `a` (read as 0–255) with f32 `b` on the given
/// path: the 8-bit re-rank store's kernel ([`crate::store::Sq8Rows`]).
pub fn dot_u8_with(isa: Isa, a: &[u8], b: &[f32]) -> f32 {
    let n = a.len().min(b.len());
    let (a, b) = (&a[..n], &b[..n]);
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: produced only after runtime detection of AVX-512F, and of
        // AVX2+FMA (which every AVX-512F machine also passes).
        Isa::Avx512 => unsafe { x86::dot_u8_avx512(a, b) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::dot_u8_avx2(a, b) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is part of the aarch64 baseline.
        Isa::Neon => unsafe { arm::dot_u8_neon(a, b) },
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Isa::Simd128 => wasm::dot_u8_simd128(a, b),
        _ => dot_scalar(a, b),
    }
}

/// Squared L2 distance.
pub fn l2_sq(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

// ---------------------------------------------------------------------------
// Tile kernel (the layouts' `tile_scores` calls these on its panels)
// ---------------------------------------------------------------------------

/// Inner products of `nq` row-major queries of dimension `d` with the `np`
/// f32 panels `p` (each `PANEL × d`, dimension-major), written to `out` as
/// `nq` rows of `width` scores.
#[allow(clippy::too_many_arguments)]
pub fn tiles_f32(isa: Isa, q: &[f32], nq: usize, d: usize, p: &[f32], np: usize, out: &mut [f32], width: usize) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Avx512/Avx2 are produced only after runtime detection; the
        // callers derive `nq`, `d`, `np` and `width` from the same buffers.
        Isa::Avx512 => unsafe { x86::tiles_f32_avx512(q, nq, d, p, np, out, width) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::tiles_f32_avx2(q, nq, d, p, np, out, width) },
        _ => tiles_portable(isa, q, nq, d, p, np, out, width),
    }
}

/// [`tiles_f32`] over f16 panels; the portable path widens them into
/// `scratch` (reused between calls) first.
#[allow(clippy::too_many_arguments)]
pub fn tiles_f16(
    isa: Isa,
    q: &[f32],
    nq: usize,
    d: usize,
    p: &[f16],
    np: usize,
    out: &mut [f32],
    width: usize,
    scratch: &mut Vec<f32>,
) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `tiles_f32`.
        Isa::Avx512 => unsafe { x86::tiles_f16_avx512(q, nq, d, p, np, out, width) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::tiles_f16_avx2(q, nq, d, p, np, out, width) },
        _ => {
            widen_f16(isa, p, scratch);
            tiles_portable(isa, q, nq, d, scratch, np, out, width)
        }
    }
}

/// `p` as f32 into `out` (replacing its contents).
pub fn widen_f16(isa: Isa, p: &[f16], out: &mut Vec<f32>) {
    out.clear();
    match isa {
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Isa::Simd128 => {
            out.resize(p.len(), 0.0);
            wasm::widen_f16_simd128(p, out);
        }
        _ => out.extend(p.iter().map(|h| h.to_f32())),
    }
}

#[allow(clippy::too_many_arguments)]
fn tiles_portable(isa: Isa, q: &[f32], nq: usize, d: usize, p: &[f32], np: usize, out: &mut [f32], width: usize) {
    #[cfg(target_arch = "aarch64")]
    if isa == Isa::Neon {
        // SAFETY: NEON is part of the aarch64 baseline.
        unsafe { arm::tiles_f32_neon(q, nq, d, p, np, out, width) };
        return;
    }
    #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
    if isa == Isa::Simd128 {
        wasm::tiles_f32_simd128(q, nq, d, p, np, out, width);
        return;
    }
    let _ = isa;
    for q0 in (0..nq).step_by(4) {
        let qr = (nq - q0).min(4);
        for pi in 0..np {
            let panel = &p[pi * PANEL * d..(pi + 1) * PANEL * d];
            let mut acc = [[0f32; PANEL]; 4];
            for j in 0..d {
                let col = &panel[j * PANEL..(j + 1) * PANEL];
                for r in 0..qr {
                    let qv = q[(q0 + r) * d + j];
                    for l in 0..PANEL {
                        acc[r][l] += qv * col[l];
                    }
                }
            }
            for r in 0..qr {
                out[(q0 + r) * width + pi * PANEL..(q0 + r) * width + (pi + 1) * PANEL].copy_from_slice(&acc[r]);
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Fused argmax (nearest centroid at small dimension)
// ---------------------------------------------------------------------------

/// For each of the row-major queries `q` (dimension `d`), the row of the
/// row-major `centroids` with the highest `<q, row> + bias[row]`, written
/// to `rows` and `scores`; ties go to the smaller row. Sixteen queries are
/// transposed into one dimension-major block, so each centroid costs `d`
/// broadcast-FMAs and one compare-and-blend for all sixteen.
pub fn argmax(isa: Isa, q: &[f32], d: usize, centroids: &[f32], bias: &[f32], rows: &mut [u32], scores: &mut [f32]) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: produced only after runtime detection.
        Isa::Avx512 => unsafe { x86::argmax_avx512(q, d, centroids, bias, rows, scores) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::argmax_avx2(q, d, centroids, bias, rows, scores) },
        _ => argmax_generic(q, d, centroids, bias, rows, scores),
    }
}

/// Portable body of [`argmax`]; the per-ISA wrappers recompile it with
/// wider vector features so the 16-lane loops become single instructions.
/// The sub-space dimensions PQ uses (1, 2, 4, 8, 16) get a kernel with the
/// dimension fixed at compile time: the product loop unrolls and the block
/// of queries lives in registers (at dimension 4 the generic loop spent as
/// long on its bounds checks as on the arithmetic).
#[inline(always)]
fn argmax_generic(q: &[f32], d: usize, c: &[f32], bias: &[f32], rows: &mut [u32], scores: &mut [f32]) {
    // Only whole centroids that have a bias take part.
    let Some(n) = c.len().checked_div(d).map(|n| n.min(bias.len())) else {
        return;
    };
    let (c, bias) = (&c[..n * d], &bias[..n]);
    match d {
        1 => argmax_blocks::<1>(q, d, c, bias, rows, scores),
        2 => argmax_blocks::<2>(q, d, c, bias, rows, scores),
        4 => argmax_blocks::<4>(q, d, c, bias, rows, scores),
        8 => argmax_blocks::<8>(q, d, c, bias, rows, scores),
        16 => argmax_blocks::<16>(q, d, c, bias, rows, scores),
        _ => argmax_blocks::<0>(q, d, c, bias, rows, scores),
    }
}

/// [`argmax_generic`] over blocks of sixteen queries; `D > 0` fixes the
/// dimension at compile time (it then equals `d`), `D = 0` leaves it to `d`.
#[inline(always)]
fn argmax_blocks<const D: usize>(q: &[f32], d: usize, c: &[f32], bias: &[f32], rows: &mut [u32], scores: &mut [f32]) {
    let d = if D > 0 { D } else { d };
    let mut qt = vec![[0f32; PANEL]; d];
    for ((block, rows), scores) in q
        .chunks(d * PANEL)
        .zip(rows.chunks_mut(PANEL))
        .zip(scores.chunks_mut(PANEL))
    {
        // Dimension-major block; the lanes past a short last block are zero.
        for (l, point) in block.chunks_exact(d).enumerate().take(PANEL) {
            for (col, &x) in qt.iter_mut().zip(point) {
                col[l] = x;
            }
        }
        let used = block.len() / d;
        if used < PANEL {
            qt.iter_mut().for_each(|col| col[used..].fill(0.0));
        }
        let (best, best_row) = argmax_block(&qt[..d], c, bias);
        let m = rows.len().min(scores.len()).min(PANEL);
        rows[..m].copy_from_slice(&best_row[..m]);
        scores[..m].copy_from_slice(&best[..m]);
    }
}

/// Centroids scored together in [`argmax_block`]: four independent
/// accumulator rows keep the multiply-adds of one dimension in flight
/// while the running best waits on one compare per group, not per centroid.
const ARGMAX_GROUP: usize = 4;

/// The best of the row-major centroids `c` (`bias.len()` rows of
/// `qt.len()` values) for each of the sixteen queries held dimension-major
/// in `qt`; ties go to the earlier centroid.
#[inline(always)]
fn argmax_block(qt: &[[f32; PANEL]], c: &[f32], bias: &[f32]) -> ([f32; PANEL], [u32; PANEL]) {
    const G: usize = ARGMAX_GROUP;
    let d = qt.len();
    let mut best = [f32::NEG_INFINITY; PANEL];
    let mut best_row = [0u32; PANEL];
    // Strictly greater: on equal scores the earlier (smaller) row stays.
    let keep = |best: &mut [f32; PANEL], best_row: &mut [u32; PANEL], s: &[f32; PANEL], row: &[u32; PANEL]| {
        for l in 0..PANEL {
            let better = s[l] > best[l];
            best[l] = if better { s[l] } else { best[l] };
            best_row[l] = if better { row[l] } else { best_row[l] };
        }
    };
    let groups = bias.len() / G;
    for (gi, (cg, bg)) in c.chunks_exact(G * d).zip(bias.chunks_exact(G)).take(groups).enumerate() {
        let mut acc = [[0f32; PANEL]; G];
        for (j, col) in qt.iter().enumerate() {
            for (g, a) in acc.iter_mut().enumerate() {
                let x = cg[g * d + j];
                for l in 0..PANEL {
                    a[l] += col[l] * x;
                }
            }
        }
        for (a, &b) in acc.iter_mut().zip(bg) {
            a.iter_mut().for_each(|v| *v += b);
        }
        // A tree over the group, earlier rows on the left.
        let row0 = (gi * G) as u32;
        let [a0, a1, a2, a3] = acc;
        let (mut s01, mut r01) = (a0, [row0; PANEL]);
        keep(&mut s01, &mut r01, &a1, &[row0 + 1; PANEL]);
        let (mut s23, mut r23) = (a2, [row0 + 2; PANEL]);
        keep(&mut s23, &mut r23, &a3, &[row0 + 3; PANEL]);
        keep(&mut s01, &mut r01, &s23, &r23);
        keep(&mut best, &mut best_row, &s01, &r01);
    }
    for ci in groups * G..bias.len() {
        let cr = &c[ci * d..(ci + 1) * d];
        let mut acc = [0f32; PANEL];
        for (col, &x) in qt.iter().zip(cr) {
            for l in 0..PANEL {
                acc[l] += col[l] * x;
            }
        }
        acc.iter_mut().for_each(|v| *v += bias[ci]);
        keep(&mut best, &mut best_row, &acc, &[ci as u32; PANEL]);
    }
    (best, best_row)
}

/// Inner products of one vector `q` with the `n` rows of the f32 panels
/// `p` (dimension `d`), written to `out[..n]`.
pub fn panel_dots_f32(isa: Isa, q: &[f32], d: usize, p: &[f32], n: usize, out: &mut [f32]) {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: produced only after runtime detection.
        Isa::Avx512 => unsafe { x86::panel_dots_avx512(q, d, p, n, out) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::panel_dots_avx2(q, d, p, n, out) },
        _ => panel_dots_generic(q, d, p, n, out),
    }
}

#[inline(always)]
fn panel_dots_generic(q: &[f32], d: usize, p: &[f32], n: usize, out: &mut [f32]) {
    for (pi, panel) in p.chunks_exact(PANEL * d).enumerate() {
        let mut acc = [0f32; PANEL];
        for (j, &x) in q.iter().enumerate().take(d) {
            let col = &panel[j * PANEL..(j + 1) * PANEL];
            for l in 0..PANEL {
                acc[l] += x * col[l];
            }
        }
        let lo = pi * PANEL;
        let hi = (lo + PANEL).min(n);
        out[lo..hi].copy_from_slice(&acc[..hi - lo]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    fn rand_vec(r: &mut Rng, n: usize) -> Vec<f32> {
        (0..n).map(|_| r.normal()).collect()
    }

    #[test]
    fn dot_paths_agree() {
        let mut r = Rng::new(5);
        for n in [0, 1, 7, 8, 15, 16, 33, 64, 100, 384, 385] {
            let a = rand_vec(&mut r, n);
            let b = rand_vec(&mut r, n);
            let want: f64 = a.iter().zip(&b).map(|(x, y)| *x as f64 * *y as f64).sum();
            for isa in Isa::available() {
                let got = dot_with(isa, &a, &b);
                assert!((got as f64 - want).abs() < 1e-3, "{isa:?} n={n}: {got} vs {want}");
                let ah: Vec<f16> = a.iter().map(|&x| f16::from_f32(x)).collect();
                let wh: f64 = ah.iter().zip(&b).map(|(x, y)| x.to_f64() * *y as f64).sum();
                let gh = dot_f16_with(isa, &ah, &b);
                assert!((gh as f64 - wh).abs() < 1e-3, "{isa:?} f16 n={n}");
                // Bytes over their whole range, against the same in f64.
                let au: Vec<u8> = (0..n).map(|i| (i * 37 % 256) as u8).collect();
                let wu: f64 = au.iter().zip(&b).map(|(&x, y)| f64::from(x) * f64::from(*y)).sum();
                let mag: f64 = au
                    .iter()
                    .zip(&b)
                    .map(|(&x, y)| (f64::from(x) * f64::from(*y)).abs())
                    .sum();
                let gu = dot_u8_with(isa, &au, &b);
                assert!(
                    (f64::from(gu) - wu).abs() < 1e-3 + 1e-6 * mag,
                    "{isa:?} u8 n={n}: {gu} vs {wu}"
                );
            }
        }
    }
}
