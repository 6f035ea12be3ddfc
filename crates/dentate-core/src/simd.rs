//! SIMD kernels, chosen at run time.
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

pub(crate) mod pq4;

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

fn dot_scalar(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 8];
    let chunks = a.len() / 8;
    for c in 0..chunks {
        for l in 0..8 {
            acc[l] += a[c * 8 + l] * b[c * 8 + l];
        }
    }
    let mut s: f32 = acc.iter().sum();
    for i in chunks * 8..a.len() {
        s += a[i] * b[i];
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
        _ => {
            let mut s = 0f32;
            for (x, y) in a.iter().zip(b) {
                s += x.to_f32() * y;
            }
            s
        }
    }
}

/// Squared L2 distance.
pub fn l2_sq(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| (x - y) * (x - y)).sum()
}

// ---------------------------------------------------------------------------
// Panel storage
// ---------------------------------------------------------------------------

/// A buffer of f32 or f16 components (panel layout in [`Panels`], row-major
/// in [`RowMajor`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Floats {
    /// f32 components.
    F32(Vec<f32>),
    /// f16 components.
    F16(Vec<f16>),
}

/// A growable matrix of `len` rows × `dim` columns in panel layout.
#[derive(Debug, Clone, PartialEq)]
pub struct Panels {
    dim: usize,
    len: usize,
    data: Floats,
}

impl Panels {
    /// An empty matrix of the given dimension and precision.
    pub fn new(dim: usize, precision: crate::Precision) -> Self {
        let data = match precision {
            crate::Precision::F32 => Floats::F32(Vec::new()),
            crate::Precision::F16 => Floats::F16(Vec::new()),
        };
        Panels { dim, len: 0, data }
    }

    /// Builds from row-major f32 data.
    pub fn from_rows(rows: &[f32], dim: usize, precision: crate::Precision) -> Self {
        let mut p = Panels::new(dim, precision);
        p.extend(rows);
        p
    }

    /// Rebuilds from raw panel data (used by the file reader).
    pub(crate) fn from_raw(dim: usize, len: usize, data: Floats) -> Option<Self> {
        // `dim` and `len` come from a file: an overflowing product is a
        // mismatch, never a wrapped size that happens to agree.
        let want = len.div_ceil(PANEL).checked_mul(PANEL)?.checked_mul(dim)?;
        let have = match &data {
            Floats::F32(v) => v.len(),
            Floats::F16(v) => v.len(),
        };
        (have == want).then_some(Panels { dim, len, data })
    }

    /// Dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.len
    }
    /// True when there are no rows.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// Number of panels (the last may be partly filled with zeros).
    pub fn panels(&self) -> usize {
        self.len.div_ceil(PANEL)
    }
    /// Storage precision.
    pub fn precision(&self) -> crate::Precision {
        match self.data {
            Floats::F32(_) => crate::Precision::F32,
            Floats::F16(_) => crate::Precision::F16,
        }
    }
    /// The raw panel buffer.
    pub fn data(&self) -> &Floats {
        &self.data
    }
    /// Bytes of vector payload.
    pub fn bytes(&self) -> usize {
        self.panels() * PANEL * self.dim * self.precision().bytes()
    }

    /// Appends row-major rows (`rows.len()` must be a multiple of `dim`).
    pub fn extend(&mut self, rows: &[f32]) {
        let d = self.dim;
        for r in rows.chunks_exact(d) {
            if self.len.is_multiple_of(PANEL) {
                let add = PANEL * d;
                match &mut self.data {
                    Floats::F32(v) => v.resize(v.len() + add, 0.0),
                    Floats::F16(v) => v.resize(v.len() + add, f16::ZERO),
                }
            }
            let base = (self.len / PANEL) * PANEL * d;
            let lane = self.len % PANEL;
            match &mut self.data {
                Floats::F32(v) => {
                    for (j, &x) in r.iter().enumerate() {
                        v[base + j * PANEL + lane] = x;
                    }
                }
                Floats::F16(v) => {
                    for (j, &x) in r.iter().enumerate() {
                        v[base + j * PANEL + lane] = f16::from_f32(x);
                    }
                }
            }
            self.len += 1;
        }
    }

    /// Copies row `i` out as f32 into `out` (`out.len() == dim`).
    pub fn row_into(&self, i: usize, out: &mut [f32]) {
        let d = self.dim;
        let base = (i / PANEL) * PANEL * d;
        let lane = i % PANEL;
        match &self.data {
            Floats::F32(v) => {
                for (j, o) in out.iter_mut().enumerate().take(d) {
                    *o = v[base + j * PANEL + lane];
                }
            }
            Floats::F16(v) => {
                for (j, o) in out.iter_mut().enumerate().take(d) {
                    *o = v[base + j * PANEL + lane].to_f32();
                }
            }
        }
    }

    /// Row `i` as a new f32 vector.
    pub fn row(&self, i: usize) -> Vec<f32> {
        let mut v = vec![0.0; self.dim];
        self.row_into(i, &mut v);
        v
    }

    /// All rows, row-major f32.
    pub fn to_rows(&self) -> Vec<f32> {
        let mut out = vec![0.0; self.len * self.dim];
        for (i, o) in out.chunks_exact_mut(self.dim.max(1)).enumerate() {
            self.row_into(i, o);
        }
        out
    }

    /// Keeps only the rows for which `keep(row)` is true, in order.
    pub fn retain_rows(&mut self, keep: impl Fn(usize) -> bool) {
        let mut next = Panels::new(self.dim, self.precision());
        let mut buf = vec![0.0; self.dim];
        for i in 0..self.len {
            if keep(i) {
                self.row_into(i, &mut buf);
                next.extend(&buf);
            }
        }
        *self = next;
    }

    /// Inner product of row `i` with `q`, exactly as the tile kernel
    /// computes it up to summation order.
    pub fn dot_row(&self, i: usize, q: &[f32]) -> f32 {
        let d = self.dim;
        let base = (i / PANEL) * PANEL * d;
        let lane = i % PANEL;
        let mut s = 0f32;
        match &self.data {
            Floats::F32(v) => {
                for (j, &qj) in q.iter().enumerate().take(d) {
                    s += v[base + j * PANEL + lane] * qj;
                }
            }
            Floats::F16(v) => {
                for (j, &qj) in q.iter().enumerate().take(d) {
                    s += v[base + j * PANEL + lane].to_f32() * qj;
                }
            }
        }
        s
    }
}

/// Row-major vectors in f32 or f16: the layout for random access by row
/// (re-ranking), where panels would touch one cache line per component.
#[derive(Debug, Clone, PartialEq)]
pub struct RowMajor {
    dim: usize,
    data: Floats,
}

impl RowMajor {
    /// An empty store.
    pub fn new(dim: usize, precision: crate::Precision) -> Self {
        let data = match precision {
            crate::Precision::F32 => Floats::F32(Vec::new()),
            crate::Precision::F16 => Floats::F16(Vec::new()),
        };
        RowMajor { dim, data }
    }
    /// Rebuilds from a raw buffer (file reader); `None` when the length is ragged.
    pub(crate) fn from_raw(dim: usize, data: Floats) -> Option<Self> {
        let n = match &data {
            Floats::F32(v) => v.len(),
            Floats::F16(v) => v.len(),
        };
        (dim > 0 && n % dim == 0).then_some(RowMajor { dim, data })
    }
    /// Dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// Number of rows.
    pub fn len(&self) -> usize {
        match &self.data {
            Floats::F32(v) => v.len() / self.dim.max(1),
            Floats::F16(v) => v.len() / self.dim.max(1),
        }
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Storage precision.
    pub fn precision(&self) -> crate::Precision {
        match self.data {
            Floats::F32(_) => crate::Precision::F32,
            Floats::F16(_) => crate::Precision::F16,
        }
    }
    /// The raw buffer.
    pub fn data(&self) -> &Floats {
        &self.data
    }
    /// Bytes of payload.
    pub fn bytes(&self) -> usize {
        self.len() * self.dim * self.precision().bytes()
    }
    /// Appends row-major rows.
    pub fn extend(&mut self, rows: &[f32]) {
        match &mut self.data {
            Floats::F32(v) => v.extend_from_slice(rows),
            Floats::F16(v) => v.extend(rows.iter().map(|&x| f16::from_f32(x))),
        }
    }
    /// Inner product of row `i` with `q` on the active SIMD path.
    #[inline]
    pub fn dot_row(&self, i: usize, q: &[f32]) -> f32 {
        let d = self.dim;
        match &self.data {
            Floats::F32(v) => dot(&v[i * d..(i + 1) * d], q),
            Floats::F16(v) => dot_f16_with(Isa::active(), &v[i * d..(i + 1) * d], q),
        }
    }
    /// Hints the CPU to start loading row `i` (re-ranking visits scattered
    /// rows; fetching the next ones while scoring this one hides the
    /// latency). Does nothing for rows out of range or off x86-64.
    #[inline]
    pub fn prefetch_row(&self, i: usize) {
        let d = self.dim;
        let (ptr, bytes) = match &self.data {
            Floats::F32(v) => match v.get(i * d..(i + 1) * d) {
                Some(r) => (r.as_ptr() as *const u8, std::mem::size_of_val(r)),
                None => return,
            },
            Floats::F16(v) => match v.get(i * d..(i + 1) * d) {
                Some(r) => (r.as_ptr() as *const u8, std::mem::size_of_val(r)),
                None => return,
            },
        };
        #[cfg(target_arch = "x86_64")]
        for off in (0..bytes).step_by(64) {
            // SAFETY: `off < bytes` stays inside the row; prefetching never
            // faults and SSE is part of the x86-64 baseline.
            unsafe { std::arch::x86_64::_mm_prefetch(ptr.add(off) as *const i8, std::arch::x86_64::_MM_HINT_T0) };
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (ptr, bytes);
    }
    /// Row `i` as f32.
    pub fn row(&self, i: usize) -> Vec<f32> {
        let d = self.dim;
        match &self.data {
            Floats::F32(v) => v[i * d..(i + 1) * d].to_vec(),
            Floats::F16(v) => v[i * d..(i + 1) * d].iter().map(|h| h.to_f32()).collect(),
        }
    }
    /// Keeps only the rows for which `keep(row)` is true.
    pub fn retain_rows(&mut self, keep: impl Fn(usize) -> bool) {
        let d = self.dim;
        match &mut self.data {
            Floats::F32(v) => {
                *v = v
                    .chunks_exact(d)
                    .enumerate()
                    .filter(|(i, _)| keep(*i))
                    .flat_map(|(_, r)| r.iter().copied())
                    .collect()
            }
            Floats::F16(v) => {
                *v = v
                    .chunks_exact(d)
                    .enumerate()
                    .filter(|(i, _)| keep(*i))
                    .flat_map(|(_, r)| r.iter().copied())
                    .collect()
            }
        }
    }
}

// ---------------------------------------------------------------------------
// Tile kernel
// ---------------------------------------------------------------------------

/// Computes the inner products of `nq` row-major queries with the rows of
/// panels `p0 .. p0 + np` and writes them to `out` as `nq` rows of
/// `np * PANEL` scores (padding lanes of a partial last panel score 0).
/// `scratch` is reused between calls to avoid allocation.
#[allow(clippy::too_many_arguments)]
pub fn tile_scores(
    isa: Isa,
    queries: &[f32],
    nq: usize,
    panels: &Panels,
    p0: usize,
    np: usize,
    out: &mut [f32],
    scratch: &mut Vec<f32>,
) {
    let d = panels.dim;
    let width = np * PANEL;
    debug_assert!(queries.len() >= nq * d && out.len() >= nq * width);
    debug_assert!(p0 + np <= panels.panels());
    let start = p0 * PANEL * d;
    let end = (p0 + np) * PANEL * d;
    match (&panels.data, isa) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: Avx512/Avx2 are produced only after runtime detection; the
        // slices were bounds-checked above by construction (debug) and by the
        // callers, which derive `nq`, `p0` and `np` from the same buffers.
        (Floats::F32(v), Isa::Avx512) => unsafe {
            x86::tiles_f32_avx512(queries, nq, d, &v[start..end], np, out, width)
        },
        #[cfg(target_arch = "x86_64")]
        (Floats::F16(v), Isa::Avx512) => unsafe {
            x86::tiles_f16_avx512(queries, nq, d, &v[start..end], np, out, width)
        },
        #[cfg(target_arch = "x86_64")]
        (Floats::F32(v), Isa::Avx2) => unsafe { x86::tiles_f32_avx2(queries, nq, d, &v[start..end], np, out, width) },
        #[cfg(target_arch = "x86_64")]
        (Floats::F16(v), Isa::Avx2) => unsafe { x86::tiles_f16_avx2(queries, nq, d, &v[start..end], np, out, width) },
        (Floats::F32(v), isa) => tiles_portable(isa, queries, nq, d, &v[start..end], np, out, width),
        (Floats::F16(v), isa) => {
            scratch.clear();
            scratch.extend(v[start..end].iter().map(|h| h.to_f32()));
            tiles_portable(isa, queries, nq, d, scratch, np, out, width)
        }
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

/// For each query, the row of `panels` with the highest
/// `<q, row> + bias[row]` and that score; ties go to the smaller row.
///
/// This fuses the product with the selection, which is what k-means and PQ
/// assignment want at small dimension, where writing every score out costs
/// more than computing it. Sixteen queries are transposed into one
/// dimension-major block, so each centroid costs `dim` broadcast-FMAs and
/// one compare-and-blend for all sixteen, and the running best never leaves
/// registers.
pub fn argmax_rows(isa: Isa, queries: &[f32], panels: &Panels, bias: Option<&[f32]>) -> (Vec<u32>, Vec<f32>) {
    let d = panels.dim;
    let n = panels.len;
    let nq = queries.len().checked_div(d).unwrap_or(0);
    let centroids = panels.to_rows();
    let zeros;
    let bias = match bias {
        Some(b) => b,
        None => {
            zeros = vec![0f32; n];
            &zeros
        }
    };
    let mut rows = vec![0u32; nq];
    let mut scores = vec![f32::NEG_INFINITY; nq];
    if n == 0 {
        return (rows, scores);
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: produced only after runtime detection.
        Isa::Avx512 => unsafe { x86::argmax_avx512(queries, d, &centroids, bias, &mut rows, &mut scores) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::argmax_avx2(queries, d, &centroids, bias, &mut rows, &mut scores) },
        _ => argmax_generic(queries, d, &centroids, bias, &mut rows, &mut scores),
    }
    (rows, scores)
}

/// Portable body of [`argmax_rows`]; the per-ISA wrappers recompile it with
/// wider vector features so the 16-lane loops become single instructions.
#[inline(always)]
fn argmax_generic(q: &[f32], d: usize, c: &[f32], bias: &[f32], rows: &mut [u32], scores: &mut [f32]) {
    let nq = q.len() / d;
    let mut qt = vec![0f32; d * PANEL];
    for q0 in (0..nq).step_by(PANEL) {
        let m = (nq - q0).min(PANEL);
        for l in 0..PANEL {
            for j in 0..d {
                qt[j * PANEL + l] = if l < m { q[(q0 + l) * d + j] } else { 0.0 };
            }
        }
        let mut best = [f32::NEG_INFINITY; PANEL];
        let mut best_row = [0u32; PANEL];
        for (ci, (cr, &b)) in c.chunks_exact(d).zip(bias).enumerate() {
            let mut acc = [0f32; PANEL];
            for (j, &x) in cr.iter().enumerate() {
                let col = &qt[j * PANEL..(j + 1) * PANEL];
                for l in 0..PANEL {
                    acc[l] += col[l] * x;
                }
            }
            for l in 0..PANEL {
                let s = acc[l] + b;
                // Strictly greater: on equal scores the earlier (smaller) row stays.
                let better = s > best[l];
                best[l] = if better { s } else { best[l] };
                best_row[l] = if better { ci as u32 } else { best_row[l] };
            }
        }
        rows[q0..q0 + m].copy_from_slice(&best_row[..m]);
        scores[q0..q0 + m].copy_from_slice(&best[..m]);
    }
}

/// Inner products of one vector `q` with every row of f32 `panels`, written
/// to `out[..panels.len()]`. The shape of PQ lookup tables: 256 short rows,
/// one query at a time, no selection.
pub fn panel_dots(isa: Isa, q: &[f32], panels: &Panels, out: &mut [f32]) {
    let Floats::F32(p) = &panels.data else {
        for (i, o) in out.iter_mut().enumerate().take(panels.len) {
            *o = panels.dot_row(i, q);
        }
        return;
    };
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: produced only after runtime detection.
        Isa::Avx512 => unsafe { x86::panel_dots_avx512(q, panels.dim, p, panels.len, out) },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx2 => unsafe { x86::panel_dots_avx2(q, panels.dim, p, panels.len, out) },
        _ => panel_dots_generic(q, panels.dim, p, panels.len, out),
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

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{PANEL, QR_MAX};
    use half::f16;
    use std::arch::x86_64::*;

    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn argmax_avx512(
        q: &[f32],
        d: usize,
        c: &[f32],
        bias: &[f32],
        rows: &mut [u32],
        scores: &mut [f32],
    ) {
        super::argmax_generic(q, d, c, bias, rows, scores)
    }

    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn argmax_avx2(
        q: &[f32],
        d: usize,
        c: &[f32],
        bias: &[f32],
        rows: &mut [u32],
        scores: &mut [f32],
    ) {
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
    pub(super) unsafe fn tiles_f32_avx512(
        q: &[f32],
        nq: usize,
        d: usize,
        p: &[f32],
        np: usize,
        out: &mut [f32],
        w: usize,
    ) {
        unsafe { tiles512(q, nq, d, p, np, out, w) }
    }
    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn tiles_f16_avx512(
        q: &[f32],
        nq: usize,
        d: usize,
        p: &[f16],
        np: usize,
        out: &mut [f32],
        w: usize,
    ) {
        unsafe { tiles512(q, nq, d, p, np, out, w) }
    }
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn tiles_f32_avx2(
        q: &[f32],
        nq: usize,
        d: usize,
        p: &[f32],
        np: usize,
        out: &mut [f32],
        w: usize,
    ) {
        unsafe { tiles256(q, nq, d, p, np, out, w) }
    }
    #[target_feature(enable = "avx2,fma,f16c")]
    pub(super) unsafe fn tiles_f16_avx2(
        q: &[f32],
        nq: usize,
        d: usize,
        p: &[f16],
        np: usize,
        out: &mut [f32],
        w: usize,
    ) {
        unsafe { tiles256(q, nq, d, p, np, out, w) }
    }
}

#[cfg(target_arch = "aarch64")]
mod arm {
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
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm {
    use super::PANEL;
    use core::arch::wasm32::*;

    pub(super) fn tiles_f32_simd128(
        q: &[f32],
        nq: usize,
        d: usize,
        p: &[f32],
        np: usize,
        out: &mut [f32],
        width: usize,
    ) {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{Precision, rng::Rng};

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
            }
        }
    }

    #[test]
    fn tiles_match_naive_on_every_path_and_precision() {
        let mut r = Rng::new(9);
        for &(nq, n, d) in &[(1, 1, 1), (7, 37, 5), (13, 64, 24), (6, 100, 384), (11, 33, 17)] {
            let q = rand_vec(&mut r, nq * d);
            let rows = rand_vec(&mut r, n * d);
            for prec in [Precision::F32, Precision::F16] {
                let p = Panels::from_rows(&rows, d, prec);
                assert_eq!(p.len(), n);
                let width = p.panels() * PANEL;
                for isa in Isa::available() {
                    let mut out = vec![f32::NAN; nq * width];
                    let mut scratch = Vec::new();
                    tile_scores(isa, &q, nq, &p, 0, p.panels(), &mut out, &mut scratch);
                    for qi in 0..nq {
                        for i in 0..n {
                            let want = p.dot_row(i, &q[qi * d..(qi + 1) * d]);
                            let got = out[qi * width + i];
                            assert!((got - want).abs() < 1e-3 * (d as f32).sqrt(), "{isa:?} {prec:?}");
                        }
                        for i in n..width {
                            assert_eq!(out[qi * width + i], 0.0);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn argmax_matches_naive_with_ties() {
        let mut r = Rng::new(11);
        for &(nq, n, d) in &[(5, 1, 3), (50, 256, 4), (9, 37, 8), (3, 100, 24)] {
            let q = rand_vec(&mut r, nq * d);
            let mut rows = rand_vec(&mut r, n * d);
            if n > 20 {
                // An exact duplicate of row 3 at row 17: a tie the kernel must
                // resolve to the smaller row.
                let dup = rows[3 * d..4 * d].to_vec();
                rows[17 * d..18 * d].copy_from_slice(&dup);
            }
            let bias: Vec<f32> = (0..n)
                .map(|i| if i == 17 || i == 3 { 0.0 } else { -0.01 * i as f32 })
                .collect();
            let p = Panels::from_rows(&rows, d, Precision::F32);
            for isa in Isa::available() {
                let (got_r, got_s) = argmax_rows(isa, &q, &p, Some(&bias));
                for qi in 0..nq {
                    let qv = &q[qi * d..(qi + 1) * d];
                    let sc = |i: usize| bias[i] + (0..d).map(|j| qv[j] * rows[i * d + j]).sum::<f32>();
                    let want = (0..n).fold(0, |b, i| if sc(i) > sc(b) + 1e-5 { i } else { b });
                    assert!((got_s[qi] - sc(want)).abs() < 1e-4, "{isa:?}");
                    assert!(
                        got_r[qi] as usize == want || (sc(got_r[qi] as usize) - sc(want)).abs() < 1e-5,
                        "{isa:?}"
                    );
                    assert_ne!(got_r[qi], 17, "tie must go to row 3");
                }
            }
        }
    }

    #[test]
    fn panel_dots_match_naive() {
        let mut r = Rng::new(13);
        for &(n, d) in &[(1, 1), (256, 8), (37, 5), (256, 24)] {
            let q = rand_vec(&mut r, d);
            let rows = rand_vec(&mut r, n * d);
            let p = Panels::from_rows(&rows, d, Precision::F32);
            for isa in Isa::available() {
                let mut out = vec![f32::NAN; n];
                panel_dots(isa, &q, &p, &mut out);
                for (i, o) in out.iter().enumerate() {
                    assert!((o - p.dot_row(i, &q)).abs() < 1e-4, "{isa:?}");
                }
            }
        }
    }

    #[test]
    fn panels_roundtrip_and_retain() {
        let mut r = Rng::new(2);
        let rows = rand_vec(&mut r, 40 * 3);
        let mut p = Panels::from_rows(&rows, 3, Precision::F32);
        assert_eq!(p.to_rows(), rows);
        p.retain_rows(|i| i % 2 == 0);
        assert_eq!(p.len(), 20);
        assert_eq!(p.row(1), rows[6..9].to_vec());
    }
}
