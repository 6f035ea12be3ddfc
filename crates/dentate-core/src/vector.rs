//! Vector validation, normalisation, storage precision and the alive bitset.

use crate::error::{Error, Result};

/// Precision in which an index keeps full vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// 4 bytes per component; exact.
    #[default]
    F32,
    /// 2 bytes per component (IEEE half); about 3 decimal digits, halves memory.
    F16,
}

impl Precision {
    /// Bytes per component.
    pub fn bytes(self) -> usize {
        match self {
            Precision::F32 => 4,
            Precision::F16 => 2,
        }
    }

    pub(crate) fn code(self) -> u8 {
        match self {
            Precision::F32 => 0,
            Precision::F16 => 1,
        }
    }

    pub(crate) fn from_code(c: u8) -> Result<Self> {
        match c {
            0 => Ok(Precision::F32),
            1 => Ok(Precision::F16),
            _ => Err(Error::Corrupt(format!("unknown precision code {c}"))),
        }
    }
}

impl std::str::FromStr for Precision {
    type Err = Error;
    fn from_str(s: &str) -> Result<Self> {
        match s {
            "f32" => Ok(Precision::F32),
            "f16" => Ok(Precision::F16),
            _ => Err(Error::param("precision", format!("`{s}` is not f32 or f16"))),
        }
    }
}

/// Checks that `data` is a whole number of `dim`-dimensional vectors and
/// returns how many.
pub fn batch_len(data: &[f32], dim: usize) -> Result<usize> {
    if dim == 0 {
        return Err(Error::param("dim", "must be at least 1"));
    }
    if !data.len().is_multiple_of(dim) {
        return Err(Error::RaggedBatch { len: data.len(), dim });
    }
    Ok(data.len() / dim)
}

/// Validates a batch (finite components, non-zero norm) and returns an
/// L2-normalised copy. Cosine similarity is then a plain inner product.
/// Large batches are split over the rayon pool; the error names the first
/// bad row either way.
pub fn normalized(data: &[f32], dim: usize) -> Result<Vec<f32>> {
    batch_len(data, dim)?;
    let mut out = data.to_vec();
    // Rows in parallel only where the batch is worth a fork.
    const PAR_FLOATS: usize = 1 << 16;
    let results: Vec<Result<()>> = if out.len() >= PAR_FLOATS {
        use rayon::prelude::*;
        out.par_chunks_mut(dim)
            .enumerate()
            .map(|(row, v)| normalize_row(row, v))
            .collect()
    } else {
        out.chunks_mut(dim)
            .enumerate()
            .map(|(row, v)| normalize_row(row, v))
            .collect()
    };
    results.into_iter().collect::<Result<Vec<()>>>()?;
    Ok(out)
}

/// Checks and normalises row `row` in place.
fn normalize_row(row: usize, v: &mut [f32]) -> Result<()> {
    // One branch-free pass (vectorises); the position only on failure.
    if !v.iter().fold(true, |ok, x| ok & x.is_finite()) {
        let col = v.iter().position(|x| !x.is_finite()).unwrap_or(0);
        return Err(Error::NonFinite { row, col });
    }
    // Accumulate in f64 (f32 squares of large finite components can
    // overflow to infinity; f64 holds each square exactly), in eight
    // independent sums so the loop is not one dependency chain.
    let mut acc = [0f64; 8];
    let (chunks, rest) = v.as_chunks::<8>();
    for c in chunks {
        for (a, &x) in acc.iter_mut().zip(c) {
            *a += f64::from(x) * f64::from(x);
        }
    }
    let tail: f64 = rest.iter().map(|&x| f64::from(x) * f64::from(x)).sum();
    let norm = (acc.iter().sum::<f64>() + tail).sqrt();
    if norm == 0.0 || !norm.is_finite() {
        return Err(Error::ZeroVector { row });
    }
    let inv = 1.0 / norm;
    for x in v.iter_mut() {
        *x = (f64::from(*x) * inv) as f32;
    }
    Ok(())
}

/// Checks a batch of queries against an index dimension and `k`.
pub(crate) fn check_queries(queries: &[f32], dim: usize, k: usize) -> Result<Vec<f32>> {
    if k == 0 {
        return Err(Error::ZeroK);
    }
    if !queries.len().is_multiple_of(dim) {
        // A single vector of the wrong size is the common mistake: name it.
        if queries.len() < dim || queries.len() < 2 * dim {
            return Err(Error::DimensionMismatch {
                expected: dim,
                got: queries.len(),
            });
        }
        return Err(Error::RaggedBatch {
            len: queries.len(),
            dim,
        });
    }
    normalized(queries, dim)
}

/// Checks an `add` batch: dimension, id count, duplicate ids within the batch.
pub(crate) fn check_add(ids: &[u64], vectors: &[f32], dim: usize) -> Result<Vec<f32>> {
    if !vectors.len().is_multiple_of(dim) {
        if ids.len() <= 1 {
            return Err(Error::DimensionMismatch {
                expected: dim,
                got: vectors.len(),
            });
        }
        return Err(Error::RaggedBatch {
            len: vectors.len(),
            dim,
        });
    }
    let n = vectors.len() / dim;
    if n != ids.len() {
        return Err(Error::IdCountMismatch {
            ids: ids.len(),
            vectors: n,
        });
    }
    let mut seen = std::collections::HashSet::with_capacity(ids.len());
    for &id in ids {
        if !seen.insert(id) {
            return Err(Error::DuplicateId(id));
        }
    }
    normalized(vectors, dim)
}

/// A growable bitset; the engine uses it as the "alive" mask (tombstones).
///
/// Each state of its bits has a [`Bitset::generation`]: a number no other
/// state of any bitset in the process shares (a clone shares it until
/// either changes), so a backend can keep a device copy keyed on it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Bitset {
    words: Vec<u64>,
    len: usize,
    generation: Generation,
}

/// Generations handed out so far (0 means "none yet").
static NEXT_GENERATION: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);

/// The generation of a [`Bitset`]'s bits: 0 until asked for after a change,
/// then a fresh process-wide number. Ignored by equality.
#[derive(Debug, Default)]
struct Generation(std::sync::atomic::AtomicU64);

impl Generation {
    fn reset(&mut self) {
        *self.0.get_mut() = 0;
    }
}

impl Clone for Generation {
    fn clone(&self) -> Self {
        Generation(std::sync::atomic::AtomicU64::new(
            self.0.load(std::sync::atomic::Ordering::Relaxed),
        ))
    }
}

impl PartialEq for Generation {
    fn eq(&self, _: &Self) -> bool {
        true
    }
}

impl Eq for Generation {}

impl Bitset {
    /// An empty bitset.
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of bits.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when it has no bits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends one bit.
    pub fn push(&mut self, bit: bool) {
        self.generation.reset();
        if self.len.is_multiple_of(64) {
            self.words.push(0);
        }
        if bit {
            self.words[self.len / 64] |= 1 << (self.len % 64);
        }
        self.len += 1;
    }

    /// Reads bit `i` (false when out of range).
    #[inline]
    pub fn get(&self, i: usize) -> bool {
        i < self.len && (self.words[i / 64] >> (i % 64)) & 1 == 1
    }

    /// Sets bit `i` (ignored when out of range).
    pub fn set(&mut self, i: usize, bit: bool) {
        if i < self.len {
            self.generation.reset();
            if bit {
                self.words[i / 64] |= 1 << (i % 64);
            } else {
                self.words[i / 64] &= !(1 << (i % 64));
            }
        }
    }

    /// Number of set bits.
    pub fn count_ones(&self) -> usize {
        self.words.iter().map(|w| w.count_ones() as usize).sum()
    }

    /// The raw 64-bit words (bit `i` is bit `i % 64` of word `i / 64`).
    pub fn words(&self) -> &[u64] {
        &self.words
    }

    /// Rebuilds a bitset from words; bits past `len` are cleared.
    pub fn from_words(mut words: Vec<u64>, len: usize) -> Option<Self> {
        if words.len() != len.div_ceil(64) {
            return None;
        }
        if !len.is_multiple_of(64)
            && let Some(last) = words.last_mut()
        {
            *last &= (1u64 << (len % 64)) - 1;
        }
        Some(Bitset {
            words,
            len,
            generation: Generation::default(),
        })
    }

    /// The generation of the bits as they are now: equal for two calls
    /// exactly when no change came between (or for a clone of an unchanged
    /// bitset); never 0, never shared with another state of any bitset.
    pub fn generation(&self) -> u64 {
        use std::sync::atomic::Ordering::Relaxed;
        let g = self.generation.0.load(Relaxed);
        if g != 0 {
            return g;
        }
        let fresh = NEXT_GENERATION.fetch_add(1, Relaxed);
        match self.generation.0.compare_exchange(0, fresh, Relaxed, Relaxed) {
            Ok(_) => fresh,
            Err(other) => other,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalization_and_errors() {
        let v = normalized(&[3.0, 4.0, 0.0, 2.0], 2).unwrap();
        assert!((v[0] - 0.6).abs() < 1e-7 && (v[1] - 0.8).abs() < 1e-7);
        assert_eq!(v[2], 0.0);
        assert_eq!(v[3], 1.0);
        assert!(matches!(
            normalized(&[1.0, f32::NAN], 2),
            Err(Error::NonFinite { row: 0, col: 1 })
        ));
        assert!(matches!(
            normalized(&[1.0, 1.0, f32::INFINITY, 0.0], 2),
            Err(Error::NonFinite { row: 1, col: 0 })
        ));
        assert!(matches!(normalized(&[0.0, 0.0], 2), Err(Error::ZeroVector { row: 0 })));
        assert!(matches!(
            normalized(&[1.0, 2.0, 3.0], 2),
            Err(Error::RaggedBatch { .. })
        ));
        // Huge but finite components normalise without overflow.
        let big = normalized(&[f32::MAX, f32::MAX], 2).unwrap();
        assert!((big[0] - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
    }

    #[test]
    fn check_add_rejects_duplicates_and_count_mismatch() {
        assert!(matches!(
            check_add(&[1, 1], &[1.0, 0.0, 0.0, 1.0], 2),
            Err(Error::DuplicateId(1))
        ));
        assert!(matches!(
            check_add(&[1], &[1.0, 0.0, 0.0, 1.0], 2),
            Err(Error::IdCountMismatch { ids: 1, vectors: 2 })
        ));
        assert!(matches!(
            check_add(&[1], &[1.0, 0.0, 0.0], 2),
            Err(Error::DimensionMismatch { expected: 2, got: 3 })
        ));
    }

    #[test]
    fn bitset_roundtrip() {
        let mut b = Bitset::new();
        for i in 0..130 {
            b.push(i % 3 == 0);
        }
        assert_eq!(b.count_ones(), (0..130).filter(|i| i % 3 == 0).count());
        b.set(3, false);
        assert!(!b.get(3) && b.get(6) && !b.get(1000));
        let c = Bitset::from_words(b.words().to_vec(), b.len()).unwrap();
        assert_eq!(b, c);
        assert!(Bitset::from_words(vec![0; 5], 130).is_none());
    }

    #[test]
    fn bitset_generation_changes_with_the_bits() {
        let mut b = Bitset::new();
        b.push(true);
        let g = b.generation();
        assert_ne!(g, 0);
        assert_eq!(b.generation(), g, "no change, same generation");
        let c = b.clone();
        assert_eq!(c.generation(), g, "an unchanged clone shares it");
        b.set(0, false);
        let g2 = b.generation();
        assert_ne!(g2, g);
        b.push(true);
        assert_ne!(b.generation(), g2);
        assert_eq!(c.generation(), g, "the clone keeps its own");
        let mut d = c.clone();
        d.set(0, true);
        assert_ne!(d.generation(), g, "any set is a change, even of an equal bit");
        let e = Bitset::from_words(c.words().to_vec(), c.len()).unwrap();
        assert_ne!(e.generation(), g, "a rebuilt bitset is a new storage");
        assert_ne!(e.generation(), d.generation());
    }
}
