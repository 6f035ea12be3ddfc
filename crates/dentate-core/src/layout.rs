//! The row layouts the kernels read: [`Panels`] (blocks of [`PANEL`] rows
//! stored dimension-major, the right-hand side of the tile kernel, packed
//! once at insert time) and [`RowMajor`] (one row after another, for
//! random access by row when re-ranking), each in f32 or f16 ([`Floats`]).
//!
//! The functions at the end run the SIMD kernels of [`crate::simd`] over a
//! layout: [`tile_scores`] (the engine's one matrix-product kernel),
//! [`argmax_rows`] (fused nearest-centroid) and [`panel_dots`] (PQ tables).

use crate::simd::{self, Isa, PANEL, dot, dot_f16_with};
use half::f16;

/// A buffer of f32 or f16 components (panel layout in [`Panels`], row-major
/// in [`RowMajor`]).
#[derive(Debug, Clone, PartialEq)]
pub enum Floats {
    /// f32 components.
    F32(Vec<f32>),
    /// f16 components.
    F16(Vec<f16>),
}

impl Floats {
    /// An empty buffer of `precision`.
    fn empty(precision: crate::Precision) -> Self {
        match precision {
            crate::Precision::F32 => Floats::F32(Vec::new()),
            crate::Precision::F16 => Floats::F16(Vec::new()),
        }
    }
    /// Components held.
    fn len(&self) -> usize {
        match self {
            Floats::F32(v) => v.len(),
            Floats::F16(v) => v.len(),
        }
    }
    /// The precision of the components.
    fn precision(&self) -> crate::Precision {
        match self {
            Floats::F32(_) => crate::Precision::F32,
            Floats::F16(_) => crate::Precision::F16,
        }
    }
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
        let data = Floats::empty(precision);
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
        let have = data.len();
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
        self.data.precision()
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

/// Hints the CPU to start loading `row` (x86-64: one prefetch a cache
/// line; elsewhere nothing).
#[inline]
pub(crate) fn prefetch<T>(row: &[T]) {
    #[cfg(target_arch = "x86_64")]
    {
        let (ptr, bytes) = (row.as_ptr() as *const u8, std::mem::size_of_val(row));
        for off in (0..bytes).step_by(64) {
            // SAFETY: `off < bytes` stays inside the row; prefetching never
            // faults and SSE is part of the x86-64 baseline.
            unsafe { std::arch::x86_64::_mm_prefetch(ptr.add(off) as *const i8, std::arch::x86_64::_MM_HINT_T0) };
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = row;
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
        let data = Floats::empty(precision);
        RowMajor { dim, data }
    }
    /// Rebuilds from a raw buffer (file reader); `None` when the length is ragged.
    pub(crate) fn from_raw(dim: usize, data: Floats) -> Option<Self> {
        let n = data.len();
        (dim > 0 && n.is_multiple_of(dim)).then_some(RowMajor { dim, data })
    }
    /// Dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.data.len() / self.dim.max(1)
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Storage precision.
    pub fn precision(&self) -> crate::Precision {
        self.data.precision()
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
        match &self.data {
            Floats::F32(v) => prefetch(v.get(i * d..(i + 1) * d).unwrap_or_default()),
            Floats::F16(v) => prefetch(v.get(i * d..(i + 1) * d).unwrap_or_default()),
        }
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
    let (start, end) = (p0 * PANEL * d, (p0 + np) * PANEL * d);
    match &panels.data {
        Floats::F32(v) => simd::tiles_f32(isa, queries, nq, d, &v[start..end], np, out, width),
        Floats::F16(v) => simd::tiles_f16(isa, queries, nq, d, &v[start..end], np, out, width, scratch),
    }
}

/// For each query, the row of `panels` with the highest
/// `<q, row> + bias[row]` and that score; ties go to the smaller row.
///
/// This fuses the product with the selection, which is what k-means and PQ
/// assignment want at small dimension, where writing every score out costs
/// more than computing it ([`simd::argmax`]).
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
    if n > 0 {
        simd::argmax(isa, queries, d, &centroids, bias, &mut rows, &mut scores);
    }
    (rows, scores)
}

/// Inner products of one vector `q` with every row of `panels`, written to
/// `out[..panels.len()]`. The shape of PQ lookup tables: 256 short rows,
/// one query at a time, no selection.
pub fn panel_dots(isa: Isa, q: &[f32], panels: &Panels, out: &mut [f32]) {
    match &panels.data {
        Floats::F32(p) => simd::panel_dots_f32(isa, q, panels.dim, p, panels.len, out),
        Floats::F16(_) => {
            for (i, o) in out.iter_mut().enumerate().take(panels.len) {
                *o = panels.dot_row(i, q);
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
        for &(nq, n, d) in &[
            (5, 1, 3),
            (50, 256, 4),
            (9, 37, 8),
            (3, 100, 24),
            (17, 6, 1),
            (33, 18, 2),
            (20, 19, 16),
        ] {
            let q = rand_vec(&mut r, nq * d);
            let mut rows = rand_vec(&mut r, n * d);
            if n > 20 {
                // An exact duplicate of row 3 at row 17: a tie the kernel must
                // resolve to the smaller row.
                let dup = rows[3 * d..4 * d].to_vec();
                rows[17 * d..18 * d].copy_from_slice(&dup);
            }
            if n > 6 {
                // A tie inside one group of the kernel: rows 5 and 6 are
                // both a long copy of query 0, so they win it together.
                let long: Vec<f32> = q[..d].iter().map(|x| 100.0 * x).collect();
                rows[5 * d..6 * d].copy_from_slice(&long);
                rows[6 * d..7 * d].copy_from_slice(&long);
            }
            let bias: Vec<f32> = (0..n)
                .map(|i| match i {
                    3 | 17 => 0.0,
                    5 | 6 => -0.005,
                    _ => -0.01 * i as f32,
                })
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
                    if n > 6 {
                        assert_ne!(got_r[qi], 6, "tie must go to row 5");
                        if qi == 0 {
                            assert_eq!(got_r[qi], 5, "{isa:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn argmax_takes_only_whole_centroids_with_a_bias() {
        // Three centroids of dimension 2, the best one last; only two biases
        // and a ragged tail: the third centroid must not be considered, and
        // nothing may panic (dimension 0 included).
        let c = [0.0, 1.0, 1.0, 0.0, 5.0, 5.0, 9.0];
        let q = [1.0, 0.0];
        for isa in Isa::available() {
            let (mut rows, mut scores) = (vec![7u32], vec![0f32]);
            simd::argmax(isa, &q, 2, &c, &[0.0, 0.0], &mut rows, &mut scores);
            assert_eq!((rows[0], scores[0]), (1, 1.0), "{isa:?}");
            simd::argmax(isa, &q, 0, &c, &[0.0], &mut rows, &mut scores);
            simd::argmax(isa, &q, 2, &c[..1], &[0.0], &mut rows, &mut scores);
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
