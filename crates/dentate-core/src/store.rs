//! The re-rank store of an IVF index: the vectors a search scores its PQ
//! shortlist against, kept in full ([`RowMajor`], f32 or f16) or as 8-bit
//! scalar-quantized codes ([`Sq8Rows`]).
//!
//! # 8-bit scalar quantization
//!
//! Trained on the (L2-normalised) training sample: per dimension `j` the
//! smallest value `lo_j` and the step `step_j = (max_j − lo_j) / 255`. A
//! component `x` is stored as the byte `c = round((x − lo_j) / step_j)`,
//! clamped to 0–255 (a value outside the trained range is clamped; a
//! dimension with one value has step 0 and code 0), and read back as
//! `lo_j + step_j · c`. One byte a component — half of f16 — and on the
//! 50,000 MiniLM vectors of BENCHMARKS.md re-ranking a shortlist with it
//! keeps 0.995 of the true top-10 that f16 keeps.
//!
//! A query `q` is scored against row `r` as
//! `bias + Σ_j qs_j · c_rj` with `qs_j = q_j · step_j` and
//! `bias = Σ_j q_j · lo_j` computed once per query ([`Sq8Rows::prepare`]):
//! a dot product of bytes with floats ([`crate::simd::dot_u8_with`]), every
//! backend computing `bias + dot` in that order.

use crate::error::{Error, Result};
use crate::layout::RowMajor;
use crate::simd::{Isa, dot_u8_with};
use crate::vector::Precision;

/// How a re-rank store keeps its vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StoreFormat {
    /// 4 bytes a component; exact.
    F32,
    /// 2 bytes a component (IEEE half).
    F16,
    /// 1 byte a component: 8-bit scalar quantization, per-dimension range.
    Sq8,
}

impl StoreFormat {
    /// Bytes a component.
    pub fn bytes(self) -> usize {
        match self {
            StoreFormat::F32 => 4,
            StoreFormat::F16 => 2,
            StoreFormat::Sq8 => 1,
        }
    }
    /// `f32`, `f16` or `sq8`.
    pub fn name(self) -> &'static str {
        match self {
            StoreFormat::F32 => "f32",
            StoreFormat::F16 => "f16",
            StoreFormat::Sq8 => "sq8",
        }
    }
    /// Parses [`StoreFormat::name`]'s names.
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "f32" => Ok(StoreFormat::F32),
            "f16" => Ok(StoreFormat::F16),
            "sq8" => Ok(StoreFormat::Sq8),
            other => Err(Error::param(
                "rerank_store",
                format!("{other:?} is not f32, f16 or sq8"),
            )),
        }
    }
    /// The file format's code (0 and 1 are [`Precision`]'s).
    pub(crate) fn code(self) -> u8 {
        match self {
            StoreFormat::F32 => 0,
            StoreFormat::F16 => 1,
            StoreFormat::Sq8 => 2,
        }
    }
    pub(crate) fn from_code(c: u8) -> Result<Self> {
        match c {
            0 => Ok(StoreFormat::F32),
            1 => Ok(StoreFormat::F16),
            2 => Ok(StoreFormat::Sq8),
            _ => Err(Error::Corrupt(format!("unknown re-rank store code {c}"))),
        }
    }
}

impl From<Precision> for StoreFormat {
    fn from(p: Precision) -> Self {
        match p {
            Precision::F32 => StoreFormat::F32,
            Precision::F16 => StoreFormat::F16,
        }
    }
}

/// Row-major 8-bit codes with their per-dimension range (module docs).
#[derive(Debug, Clone, PartialEq)]
pub struct Sq8Rows {
    dim: usize,
    lo: Vec<f32>,
    step: Vec<f32>,
    codes: Vec<u8>,
}

impl Sq8Rows {
    /// An empty, untrained store.
    pub fn new(dim: usize) -> Self {
        Sq8Rows {
            dim,
            lo: Vec::new(),
            step: Vec::new(),
            codes: Vec::new(),
        }
    }

    /// Rebuilds from a file's parts; `None` when they do not fit together:
    /// lengths, or a range that is not one of unit vectors' components
    /// (within [−1, 1], allowing for rounding; a wider one could only come
    /// from a damaged file, and would let scores overflow).
    pub(crate) fn from_raw(dim: usize, lo: Vec<f32>, step: Vec<f32>, codes: Vec<u8>) -> Option<Self> {
        let trained = lo.len() == dim && step.len() == dim;
        let untrained = lo.is_empty() && step.is_empty() && codes.is_empty();
        let unit = |x: f32| (-1.001..=1.001).contains(&x);
        let sane = lo
            .iter()
            .zip(&step)
            .all(|(&l, &s)| unit(l) && s >= 0.0 && unit(l + 255.0 * s));
        (dim > 0 && (trained || untrained) && sane && codes.len().is_multiple_of(dim)).then_some(Sq8Rows {
            dim,
            lo,
            step,
            codes,
        })
    }

    /// Learns each dimension's range from row-major `data` (finite; rows of
    /// [`Sq8Rows::dim`]). Rows already stored keep their codes, so this is
    /// only allowed while the store is empty.
    pub fn train(&mut self, data: &[f32]) -> Result<()> {
        if !self.codes.is_empty() {
            return Err(Error::param(
                "rerank_store",
                "the 8-bit store can only be trained while empty",
            ));
        }
        let d = self.dim;
        if data.is_empty() || !data.len().is_multiple_of(d) {
            return Err(Error::param("data", "the 8-bit store trains on whole rows"));
        }
        let mut lo = vec![f32::INFINITY; d];
        let mut hi = vec![f32::NEG_INFINITY; d];
        for row in data.chunks_exact(d) {
            for ((l, h), &x) in lo.iter_mut().zip(hi.iter_mut()).zip(row) {
                *l = l.min(x);
                *h = h.max(x);
            }
        }
        if lo.iter().chain(&hi).any(|x| !x.is_finite()) {
            return Err(Error::param("data", "the 8-bit store trains on finite values"));
        }
        self.step = lo.iter().zip(&hi).map(|(l, h)| (h - l) / 255.0).collect();
        self.lo = lo;
        Ok(())
    }

    /// True once trained.
    pub fn is_trained(&self) -> bool {
        self.lo.len() == self.dim
    }
    /// Dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// Number of rows.
    pub fn len(&self) -> usize {
        self.codes.len() / self.dim.max(1)
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.codes.is_empty()
    }
    /// Each dimension's smallest value (empty until trained).
    pub fn lo(&self) -> &[f32] {
        &self.lo
    }
    /// Each dimension's step (empty until trained).
    pub fn step(&self) -> &[f32] {
        &self.step
    }
    /// The codes, row-major.
    pub fn codes(&self) -> &[u8] {
        &self.codes
    }
    /// Bytes of payload (codes and ranges).
    pub fn bytes(&self) -> usize {
        self.codes.len() + 8 * self.lo.len()
    }

    /// Appends row-major rows, quantized. Fails until trained.
    pub fn extend(&mut self, rows: &[f32]) -> Result<()> {
        if !self.is_trained() {
            return Err(Error::NotTrained);
        }
        self.codes.reserve(rows.len());
        for row in rows.chunks_exact(self.dim) {
            for ((&x, &l), &s) in row.iter().zip(&self.lo).zip(&self.step) {
                let c = if s > 0.0 {
                    ((x - l) / s).round().clamp(0.0, 255.0)
                } else {
                    0.0
                };
                self.codes.push(c as u8);
            }
        }
        Ok(())
    }

    /// Row `i` decoded (`lo + step · c`).
    pub fn decode_row(&self, i: usize) -> Vec<f32> {
        let d = self.dim;
        self.codes[i * d..(i + 1) * d]
            .iter()
            .zip(self.lo.iter().zip(&self.step))
            .map(|(&c, (&l, &s))| l + s * f32::from(c))
            .collect()
    }

    /// What scoring against query `q` needs: `(qs, bias)` with
    /// `qs_j = q_j · step_j` and `bias = Σ_j q_j · lo_j` (module docs).
    pub fn prepare(&self, q: &[f32]) -> (Vec<f32>, f32) {
        let qs = q.iter().zip(&self.step).map(|(a, s)| a * s).collect();
        let bias = q.iter().zip(&self.lo).map(|(a, l)| a * l).sum();
        (qs, bias)
    }

    /// Row `i`'s score for a query prepared by [`Sq8Rows::prepare`], on `isa`.
    #[inline]
    pub fn score(&self, isa: Isa, i: usize, qs: &[f32], bias: f32) -> f32 {
        let d = self.dim;
        bias + dot_u8_with(isa, &self.codes[i * d..(i + 1) * d], qs)
    }

    /// Hints the CPU to start loading row `i` (as
    /// [`RowMajor::prefetch_row`]).
    #[inline]
    pub fn prefetch_row(&self, i: usize) {
        let d = self.dim;
        crate::layout::prefetch(self.codes.get(i * d..(i + 1) * d).unwrap_or_default());
    }

    /// Keeps the rows for which `keep(row)` holds, in order.
    pub fn retain_rows(&mut self, keep: impl Fn(usize) -> bool) {
        let d = self.dim;
        self.codes = self
            .codes
            .chunks_exact(d)
            .enumerate()
            .filter(|(i, _)| keep(*i))
            .flat_map(|(_, r)| r.iter().copied())
            .collect();
    }
}

/// An IVF index's re-rank store: full vectors or 8-bit codes.
#[derive(Debug, Clone, PartialEq)]
pub enum RerankStore {
    /// f32 or f16 vectors.
    Floats(RowMajor),
    /// 8-bit scalar-quantized codes.
    Sq8(Sq8Rows),
}

impl RerankStore {
    /// An empty store of `format`.
    pub fn new(dim: usize, format: StoreFormat) -> Self {
        match format {
            StoreFormat::F32 => RerankStore::Floats(RowMajor::new(dim, Precision::F32)),
            StoreFormat::F16 => RerankStore::Floats(RowMajor::new(dim, Precision::F16)),
            StoreFormat::Sq8 => RerankStore::Sq8(Sq8Rows::new(dim)),
        }
    }
    /// The format.
    pub fn format(&self) -> StoreFormat {
        match self {
            RerankStore::Floats(r) => r.precision().into(),
            RerankStore::Sq8(_) => StoreFormat::Sq8,
        }
    }
    /// Dimension.
    pub fn dim(&self) -> usize {
        match self {
            RerankStore::Floats(r) => r.dim(),
            RerankStore::Sq8(s) => s.dim(),
        }
    }
    /// Number of rows.
    pub fn len(&self) -> usize {
        match self {
            RerankStore::Floats(r) => r.len(),
            RerankStore::Sq8(s) => s.len(),
        }
    }
    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Bytes of payload.
    pub fn bytes(&self) -> usize {
        match self {
            RerankStore::Floats(r) => r.bytes(),
            RerankStore::Sq8(s) => s.bytes(),
        }
    }
    /// Learns what the format needs from the training sample (the 8-bit
    /// ranges; nothing for floats).
    pub fn train(&mut self, data: &[f32]) -> Result<()> {
        match self {
            RerankStore::Floats(_) => Ok(()),
            RerankStore::Sq8(s) if s.is_empty() => s.train(data),
            // Retraining an index that holds rows: they keep their codes
            // and the range they were quantized with.
            RerankStore::Sq8(_) => Ok(()),
        }
    }
    /// Appends row-major rows.
    pub fn extend(&mut self, rows: &[f32]) -> Result<()> {
        match self {
            RerankStore::Floats(r) => {
                r.extend(rows);
                Ok(())
            }
            RerankStore::Sq8(s) => s.extend(rows),
        }
    }
    /// Hints the CPU to start loading row `i` (re-ranking visits scattered
    /// rows).
    #[inline]
    pub fn prefetch_row(&self, i: usize) {
        match self {
            RerankStore::Floats(r) => r.prefetch_row(i),
            RerankStore::Sq8(s) => s.prefetch_row(i),
        }
    }
    /// Keeps the rows for which `keep(row)` holds, in order.
    pub fn retain_rows(&mut self, keep: impl Fn(usize) -> bool) {
        match self {
            RerankStore::Floats(r) => r.retain_rows(keep),
            RerankStore::Sq8(s) => s.retain_rows(keep),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_round_trip_within_half_a_step_and_clamp_outside_the_range() {
        let dim = 3;
        let train = [0.0, -1.0, 0.5, 1.0, 1.0, 0.5, 0.5, 0.0, 0.5];
        let mut s = Sq8Rows::new(dim);
        assert!(matches!(s.extend(&train), Err(Error::NotTrained)));
        s.train(&train).unwrap();
        assert_eq!(s.lo(), &[0.0, -1.0, 0.5]);
        assert_eq!(s.step()[2], 0.0); // one value: step 0, code 0
        s.extend(&train).unwrap();
        for (i, row) in train.chunks_exact(dim).enumerate() {
            for (j, (got, want)) in s.decode_row(i).iter().zip(row).enumerate() {
                assert!((got - want).abs() <= s.step()[j] / 2.0 + 1e-6, "row {i} dim {j}");
            }
        }
        // Outside the trained range: clamped to its ends.
        s.extend(&[2.0, -3.0, 0.7]).unwrap();
        assert_eq!(&s.codes()[9..], &[255, 0, 0]);
        // The prepared score is the decoded row's inner product.
        let q = [0.3, -0.2, 0.9];
        let (qs, bias) = s.prepare(&q);
        for i in 0..s.len() {
            let want: f32 = s.decode_row(i).iter().zip(&q).map(|(a, b)| a * b).sum();
            assert!((s.score(Isa::Scalar, i, &qs, bias) - want).abs() < 1e-5);
        }
        // Training again is refused once rows are stored.
        assert!(s.train(&train).is_err());
        s.retain_rows(|r| r != 1);
        assert_eq!(s.len(), 3);
    }

    #[test]
    fn file_parts_are_checked() {
        let ok = || (vec![-0.5, 1.0], vec![0.004, 0.0], vec![1, 2, 3, 4]);
        let (lo, step, codes) = ok();
        assert!(Sq8Rows::from_raw(2, lo, step, codes).is_some());
        assert!(Sq8Rows::from_raw(2, vec![], vec![], vec![]).is_some()); // untrained, empty
        let (_, step, codes) = ok();
        assert!(Sq8Rows::from_raw(2, vec![f32::NAN, 0.0], step, codes).is_none());
        let (lo, _, codes) = ok();
        assert!(Sq8Rows::from_raw(2, lo, vec![f32::INFINITY, 0.0], codes).is_none());
        let (lo, _, codes) = ok();
        assert!(Sq8Rows::from_raw(2, lo, vec![1e30, 0.0], codes).is_none()); // beyond unit vectors
        let (_, step, codes) = ok();
        assert!(Sq8Rows::from_raw(2, vec![-3.0, 0.0], step, codes).is_none());
        let (lo, _, codes) = ok();
        assert!(Sq8Rows::from_raw(2, lo, vec![-0.1, 0.0], codes).is_none());
        let (lo, step, _) = ok();
        assert!(Sq8Rows::from_raw(2, lo, step, vec![1, 2, 3]).is_none()); // ragged
        let (_, step, codes) = ok();
        assert!(Sq8Rows::from_raw(2, vec![0.0], step, codes).is_none()); // short range
        assert!(Sq8Rows::from_raw(0, vec![], vec![], vec![]).is_none());
        assert!(Sq8Rows::from_raw(2, vec![], vec![], vec![1, 2]).is_none()); // codes without ranges
        assert_eq!(StoreFormat::from_code(2).unwrap(), StoreFormat::Sq8);
        assert!(StoreFormat::from_code(3).is_err());
    }
}
