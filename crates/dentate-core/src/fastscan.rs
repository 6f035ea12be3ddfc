//! 4-bit PQ fast-scan: the packed block layout, u8-quantised lookup tables
//! and the scan that feeds a candidate heap.
//!
//! An [`crate::IvfPqIndex`] built with [`crate::PqCodes::FastScan4`] keeps
//! 16 centroids per sub-quantizer, so one code is a nibble and one
//! sub-quantizer's lookup table is 16 bytes: it fits in a SIMD register and
//! is read with a byte shuffle (`pshufb`, `vqtbl1q_u8`, `i8x16.swizzle`)
//! instead of a memory load per code. This module defines the data every
//! backend shares; the CPU's scan of a list is `cpu::pq`'s, over the shuffle
//! kernels of `simd::pq4`.
//!
//! # Block layout
//!
//! Let `m` be the number of sub-quantizers and `m2 = m` rounded up to even
//! ([`padded_m`]; an odd `m` gets one padding sub-quantizer whose codes and
//! table are all zero). The entries of an inverted list are stored in
//! **blocks of 32**; entry `e` of the list is entry `e % 32` of block
//! `e / 32`, and the last block is padded with zero codes. A block is
//! `16·m2` bytes ([`block_bytes`]):
//!
//! ```text
//! block[16·j + i] = code(entry i, sub-quantizer j)            (low nibble)
//!                 | code(entry i + 16, sub-quantizer j) << 4   (high nibble)
//!                   for j < m2, i < 16
//! ```
//!
//! so the 16 bytes of group `j` hold sub-quantizer `j` for all 32 entries:
//! masking the low nibbles and shifting the high ones gives two index
//! vectors, and one 16-byte shuffle of table `j` looks up 16 entries at
//! once. AVX2 loads two groups (two tables, one per 128-bit lane) per
//! register, AVX-512BW four. A GPU backend uploads the same bytes.
//!
//! # Quantised tables
//!
//! For a query, `T[j][c]` = `<q_j, centroid c of sub-quantizer j>` (f32, by
//! [`crate::Codebooks::table_into`]). [`QuantizedTables::new`] maps
//! them to u8 with one scale `a` for all tables and a per-table minimum:
//!
//! ```text
//! lo_j = min_c T[j][c],   span_j = max_c T[j][c] − lo_j
//! a    = min(255 / max_j span_j, (65535 − m2) / Σ_j span_j)
//! q[j][c] = ⌊(T[j][c] − lo_j) · a + ½⌋                  ∈ [0, 255]
//! ```
//!
//! all in f32 (sums in sub-quantizer order), so a GPU backend without f64
//! reproduces the bytes. The second bound in `a` keeps
//! `Σ_j max_c q[j][c] ≤ 65535` for any `m` (each rounding adds at most ½),
//! so the **u16 accumulation cannot overflow**; for `m ≤ 256` it is never
//! the binding one (255·256 < 65535) and every table gets the full 8 bits,
//! as in FAISS. (Should float rounding ever push the sum of maxima past
//! 65535, `a` is shrunk and the tables requantised; the tests check the
//! bound on adversarial tables.) A code's score is then
//! `bias + (offset + scale · Σ_j q[j][code_j])` with `offset = Σ_j lo_j`,
//! `scale = 1 / a` and `bias` the list's `<q, centroid>`
//! ([`QuantizedTables::score`]), computed in that order in f32 by every
//! backend.
//!
//! # The scan
//!
//! Candidates are kept in a [`crate::Reservoir`] (amortised O(1) insertion).
//! Per probed list, its current threshold (a lower bound on the `k`-th best
//! score) is converted to the smallest u16 sum that can still reach it
//! ([`QuantizedTables::min_sum`]); a list whose best possible sum cannot is
//! skipped whole. The kernel compares all 32 sums of a block against that
//! bound at once and returns only when some entry passes; those entries are
//! scored, checked against the tombstones and offered to the heap, and the
//! bound is raised. The pre-filter only rejects codes whose score is below
//! the threshold at that moment, so the result is exactly the top `k` of
//! all live codes by (score desc, id asc).
//!
//! A batch of queries is scanned in groups (the CPU's `cpu::pq`): each
//! list a group probes is read once for all of its queries that probe it,
//! up to four per pass, the codes loaded and split into nibbles once and
//! shuffled with each query's tables (FAISS batches its fast-scan the same
//! way). Each query's nearest list goes first, then the rest by list. Since
//! the result does not depend on the order lists are scanned in, a batch
//! gets exactly the hits of its queries searched one at a time.

use crate::codebook::Codebooks;
use crate::error::{Error, Result};
use crate::simd::Isa;
use crate::simd::pq4;

/// Entries per block.
pub const BLOCK: usize = pq4::BLOCK;
/// Centroids per sub-quantizer (4-bit codes).
pub const KSUB: usize = crate::pq::KSUB4;

/// Sub-quantizers as stored: `m` rounded up to even.
pub fn padded_m(m: usize) -> usize {
    m + (m & 1)
}

/// Bytes of one block of 32 entries (also the bytes of one query's
/// quantised tables): `16 · padded_m(m)`.
pub fn block_bytes(m: usize) -> usize {
    16 * padded_m(m)
}

/// Bytes of a list of `n` entries: whole blocks.
pub fn packed_len(n: usize, m: usize) -> usize {
    n.div_ceil(BLOCK) * block_bytes(m)
}

/// [`packed_len`] of sizes read from a file: `None` when it overflows.
pub fn checked_packed_len(n: usize, m: usize) -> Option<usize> {
    n.div_ceil(BLOCK).checked_mul(block_bytes(m))
}

/// Writes `code` (`m` codes, one per byte, each below 16; higher bits are
/// ignored) as entry `pos` of a packed list, appending a zeroed block when
/// `pos` is the first entry of a new one. Entries must be written in order
/// (`pos` = the list's current length) or over existing ones.
pub fn pack_entry(blocks: &mut Vec<u8>, m: usize, pos: usize, code: &[u8]) {
    let bb = block_bytes(m);
    let base = pos / BLOCK * bb;
    if blocks.len() < base + bb {
        blocks.resize(base + bb, 0);
    }
    let (i, shift, keep) = if pos % BLOCK < 16 {
        (pos % BLOCK, 0, 0xf0)
    } else {
        (pos % BLOCK - 16, 4, 0x0f)
    };
    for (j, &c) in code.iter().take(m).enumerate() {
        let b = &mut blocks[base + 16 * j + i];
        *b = (*b & keep) | ((c & 15) << shift);
    }
}

/// The `m` codes of entry `pos` of a packed list (`None` past its end).
pub fn unpack_entry(blocks: &[u8], m: usize, pos: usize) -> Option<Vec<u8>> {
    let bb = block_bytes(m);
    let base = pos / BLOCK * bb;
    let block = blocks.get(base..base + bb)?;
    let (i, shift) = if pos % BLOCK < 16 {
        (pos % BLOCK, 0)
    } else {
        (pos % BLOCK - 16, 4)
    };
    Some((0..m).map(|j| (block[16 * j + i] >> shift) & 15).collect())
}

/// Packs `n × m` row-major codes (one per byte) into blocks.
pub fn pack_codes(codes: &[u8], m: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(packed_len(codes.len() / m.max(1), m));
    for (pos, code) in codes.chunks_exact(m.max(1)).enumerate() {
        pack_entry(&mut out, m, pos, code);
    }
    out
}

/// One query's lookup tables quantised to u8 (see the module
/// documentation for the formula and the overflow bound).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct QuantizedTables {
    lut: Vec<u8>,
    scale: f32,
    offset: f32,
    max_sum: u32,
    /// Scratch: each table's minimum.
    lo: Vec<f32>,
    /// Scratch: each table's (minimum, maximum).
    range: Vec<(f32, f32)>,
}

impl QuantizedTables {
    /// Quantises `m` float tables of 16 entries (`tables.len() == 16·m`).
    pub fn new(tables: &[f32], m: usize) -> Result<Self> {
        let mut q = QuantizedTables::default();
        q.quantize(tables, m)?;
        Ok(q)
    }

    /// [`new`](Self::new) into an existing buffer (search reuses one per thread).
    pub fn quantize(&mut self, tables: &[f32], m: usize) -> Result<()> {
        if m == 0 || tables.len() != KSUB * m {
            return Err(Error::param(
                "tables",
                format!("{} entries for {m} sub-quantizers of 16", tables.len()),
            ));
        }
        if !tables.iter().fold(true, |ok, x| ok & x.is_finite()) {
            return Err(Error::param("tables", "non-finite entry"));
        }
        // Fixed-size rows: each table is one AVX-512 register.
        let (rows, _) = tables.as_chunks::<KSUB>();
        let isa = Isa::active();
        let m2 = padded_m(m);
        pq4::table_ranges(isa, rows, &mut self.range);
        let mut span_sum = 0f32;
        let mut span_max = 0f32;
        let mut offset = 0f32;
        self.lo.clear();
        for &(mn, mx) in &self.range {
            self.lo.push(mn);
            offset += mn;
            span_sum += mx - mn;
            span_max = if mx - mn > span_max { mx - mn } else { span_max };
        }
        let mut a = if span_max > 0.0 {
            (255.0 / span_max).min((65535 - m2) as f32 / span_sum)
        } else {
            0.0
        };
        self.lut.clear();
        self.lut.resize(16 * m2, 0);
        loop {
            let (out, _) = self.lut.as_chunks_mut::<KSUB>();
            let max_sum = pq4::quantize_tables(isa, rows, &self.lo, a, out);
            if max_sum <= 65535 {
                self.max_sum = max_sum;
                break;
            }
            a *= 65535.0 / max_sum as f32 * 0.999;
        }
        self.scale = if a > 0.0 { 1.0 / a } else { 0.0 };
        self.offset = offset;
        Ok(())
    }

    /// The `padded_m(m)` tables of 16 entries, table `j` at `16·j`.
    pub fn lut(&self) -> &[u8] {
        &self.lut
    }
    /// Float units per u16 step (`1 / a`).
    pub fn scale(&self) -> f32 {
        self.scale
    }
    /// Sum of the tables' minima, added to every score.
    pub fn offset(&self) -> f32 {
        self.offset
    }
    /// The largest sum any code can reach (`Σ_j max_c q[j][c]`, ≤ 65535).
    pub fn max_sum(&self) -> u32 {
        self.max_sum
    }

    /// The score of a code whose table entries sum to `sum`, in a list
    /// with `bias`: `bias + (offset + scale · sum)` in f32.
    #[inline]
    pub fn score(&self, sum: u16, bias: f32) -> f32 {
        bias + (self.offset + self.scale * f32::from(sum))
    }

    /// The smallest sum whose score reaches `thr` in a list with `bias`
    /// (every smaller sum scores below `thr`, since the score is monotone
    /// in the sum); `None` when no code can reach it.
    pub fn min_sum(&self, thr: f32, bias: f32) -> Option<u16> {
        if thr.is_nan() || thr == f32::NEG_INFINITY {
            return Some(0);
        }
        let top = self.max_sum.min(65535) as u16;
        if self.score(top, bias) < thr {
            return None;
        }
        if self.score(0, bias) >= thr {
            return Some(0);
        }
        // Now score(0) < thr ≤ score(top). Start from the algebraic answer
        // and correct it by a step or two (float rounding); fall back to
        // bisection should the score be flat over a long run of sums.
        let est = ((thr - bias - self.offset) / self.scale).ceil();
        let mut t = if est.is_nan() {
            top
        } else {
            est.clamp(1.0, f32::from(top)) as u16
        };
        for _ in 0..4 {
            if self.score(t - 1, bias) >= thr {
                t -= 1; // t ≥ 2 here: score(0) < thr
            } else if self.score(t, bias) < thr {
                t += 1; // t < top here: score(top) ≥ thr
            } else {
                return Some(t);
            }
        }
        let (mut lo, mut hi) = (0u16, top);
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            if self.score(mid, bias) >= thr {
                hi = mid;
            } else {
                lo = mid + 1;
            }
        }
        Some(lo)
    }
}

/// Fails unless `books` has 16 centroids per sub-quantizer (4-bit codes).
pub fn check_books(books: Codebooks<'_>) -> Result<()> {
    if books.ksub() != KSUB {
        return Err(Error::param(
            "pq",
            format!(
                "fast-scan needs 16 centroids per sub-quantizer, this PQ has {}",
                books.ksub()
            ),
        ));
    }
    Ok(())
}

/// The quantised tables of every row-major query against `books`: what a
/// backend that scans elsewhere (the GPU) uploads, so that it sums the
/// same bytes the CPU does. Fails as [`crate::Compute::fastscan_top_k`]
/// does: codebooks without 16 centroids, a non-finite query.
pub fn query_tables(queries: &[f32], books: Codebooks<'_>) -> Result<Vec<QuantizedTables>> {
    check_books(books)?;
    let mut table = vec![0f32; books.m() * KSUB];
    queries
        .chunks_exact(books.dim().max(1))
        .map(|q| {
            books.table_into(q, &mut table);
            QuantizedTables::new(&table, books.m())
        })
        .collect()
}

/// The raw kernel output on `isa`: the u16 sum of every entry of every
/// whole block in `blocks` under tables `lut` (modulo 2¹⁶), in entry order.
/// For conformance tests of other backends and of the overflow bound.
pub fn block_sums(isa: Isa, lut: &[u8], blocks: &[u8]) -> Result<Vec<u16>> {
    if lut.is_empty() || !lut.len().is_multiple_of(32) || !blocks.len().is_multiple_of(lut.len()) {
        return Err(Error::param(
            "blocks",
            format!(
                "{} table bytes and {} block bytes are not whole tables and blocks",
                lut.len(),
                blocks.len()
            ),
        ));
    }
    let mut out = vec![0u16; blocks.len() / lut.len() * BLOCK];
    pq4::scan(isa, lut, blocks, 0, &mut |b, _, sums| {
        out[b * BLOCK..(b + 1) * BLOCK].copy_from_slice(sums);
        Some(0)
    });
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    #[test]
    fn pack_and_unpack_round_trip_for_odd_and_even_m() {
        let mut r = Rng::new(1);
        for m in [1usize, 2, 3, 7, 8, 48] {
            for n in [1usize, 15, 16, 17, 32, 33, 100] {
                let codes: Vec<u8> = (0..n * m).map(|_| (r.next_u64() % 16) as u8).collect();
                let packed = pack_codes(&codes, m);
                assert_eq!(packed.len(), packed_len(n, m));
                for pos in 0..n {
                    assert_eq!(unpack_entry(&packed, m, pos).unwrap(), &codes[pos * m..(pos + 1) * m]);
                }
                assert!(unpack_entry(&packed, m, n.div_ceil(BLOCK) * BLOCK).is_none());
                // Padding entries and the padding sub-quantizer stay zero.
                for pos in n..n.div_ceil(BLOCK) * BLOCK {
                    assert!(unpack_entry(&packed, m, pos).unwrap().iter().all(|&c| c == 0));
                }
                if m % 2 == 1 {
                    for b in 0..n.div_ceil(BLOCK) {
                        let g = b * block_bytes(m) + 16 * m;
                        assert!(packed[g..g + 16].iter().all(|&x| x == 0));
                    }
                }
            }
        }
    }

    #[test]
    fn quantised_scores_track_the_float_tables() {
        let mut r = Rng::new(2);
        let m = 24;
        let tables: Vec<f32> = (0..16 * m).map(|_| r.normal() * 0.1).collect();
        let q = QuantizedTables::new(&tables, m).unwrap();
        assert_eq!(q.lut().len(), 16 * m);
        // Every table spans [0, ≤255] and the widest spans exactly 255.
        let widest = q.lut().chunks(16).map(|t| *t.iter().max().unwrap()).max().unwrap();
        assert_eq!(widest, 255);
        // Dequantised sums are within m/2 steps of the float sums.
        for _ in 0..100 {
            let code: Vec<usize> = (0..m).map(|_| (r.next_u64() % 16) as usize).collect();
            let exact: f32 = code.iter().enumerate().map(|(j, &c)| tables[16 * j + c]).sum();
            let sum: u32 = code
                .iter()
                .enumerate()
                .map(|(j, &c)| u32::from(q.lut()[16 * j + c]))
                .sum();
            let got = q.score(sum as u16, 0.0);
            assert!(
                (got - exact).abs() <= q.scale() * (m as f32 / 2.0 + 0.01),
                "{got} vs {exact}"
            );
        }
    }

    #[test]
    fn min_sum_is_the_exact_boundary() {
        let mut r = Rng::new(5);
        let tables: Vec<f32> = (0..16 * 9).map(|_| r.normal()).collect();
        let q = QuantizedTables::new(&tables, 9).unwrap();
        let bias = 0.37;
        assert_eq!(q.min_sum(f32::NEG_INFINITY, bias), Some(0));
        assert_eq!(q.min_sum(f32::INFINITY, bias), None);
        for _ in 0..200 {
            let thr = q.score((r.next_u64() % u64::from(q.max_sum() + 1)) as u16, bias) + r.normal() * 0.01;
            match q.min_sum(thr, bias) {
                Some(t) => {
                    assert!(q.score(t, bias) >= thr);
                    assert!(t == 0 || q.score(t - 1, bias) < thr);
                }
                None => assert!(q.score(q.max_sum() as u16, bias) < thr),
            }
        }
    }

    #[test]
    fn bad_tables_are_errors() {
        assert!(QuantizedTables::new(&[0.0; 15], 1).is_err());
        assert!(QuantizedTables::new(&[], 0).is_err());
        let mut t = vec![0.0; 16];
        t[3] = f32::NAN;
        assert!(QuantizedTables::new(&t, 1).is_err());
        // Constant tables quantise to zeros and score the offset.
        let q = QuantizedTables::new(&[0.5; 32], 2).unwrap();
        assert!(q.lut().iter().all(|&x| x == 0));
        assert_eq!(q.score(0, 0.0), 1.0);
        assert!(block_sums(Isa::Scalar, &[0; 31], &[]).is_err());
        assert!(block_sums(Isa::Scalar, &[0; 32], &[0; 33]).is_err());
    }
}
