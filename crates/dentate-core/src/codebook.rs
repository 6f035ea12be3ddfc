//! What a scan reads of a product quantizer: its shape and codebooks
//! ([`Codebooks`], a borrowed view of [`crate::ProductQuantizer`]), and the
//! code width that decides which scan runs ([`PqCodes`]).
//!
//! The compute interface takes this view rather than the quantizer, so a
//! backend depends on the numbers it reads and not on how they were trained.

use crate::io::IndexKind;
use crate::layout::{Panels, panel_dots};
use crate::simd::Isa;

/// How residuals are coded and scanned.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum PqCodes {
    /// 8-bit codes (256 centroids per sub-quantizer, `m` bytes per vector),
    /// scanned with float lookup tables.
    #[default]
    Pq8,
    /// 4-bit codes (16 centroids per sub-quantizer, `m/2` bytes per vector)
    /// packed in blocks of 32 and scanned with u8 tables held in SIMD
    /// registers (fast-scan, [`crate::fastscan`]); meant to be followed by
    /// exact re-ranking. Files of this width are [`IndexKind::FastScan`].
    FastScan4,
}

impl PqCodes {
    /// Bits per code.
    pub fn bits(self) -> u32 {
        match self {
            PqCodes::Pq8 => 8,
            PqCodes::FastScan4 => 4,
        }
    }
    /// The file kind an index of this width is saved as.
    pub fn kind(self) -> IndexKind {
        match self {
            PqCodes::Pq8 => IndexKind::IvfPq,
            PqCodes::FastScan4 => IndexKind::FastScan,
        }
    }
}

/// The codebooks of a product quantizer: `m` sub-quantizers of `ksub`
/// centroids of `dim / m` components ([`crate::ProductQuantizer::books`]).
#[derive(Debug, Clone, Copy)]
pub struct Codebooks<'a> {
    pub(crate) dim: usize,
    pub(crate) m: usize,
    pub(crate) ksub: usize,
    /// `m × ksub × dsub`, row-major.
    pub(crate) flat: &'a [f32],
    /// One panel matrix per sub-quantizer (`ksub` rows of `dsub`).
    pub(crate) panels: &'a [Panels],
}

impl Codebooks<'_> {
    /// Dimension of the vectors coded.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// Number of sub-quantizers (codes per vector).
    pub fn m(&self) -> usize {
        self.m
    }
    /// Sub-vector dimension.
    pub fn dsub(&self) -> usize {
        self.dim / self.m.max(1)
    }
    /// Centroids per sub-quantizer (256 or 16).
    pub fn ksub(&self) -> usize {
        self.ksub
    }
    /// The codebooks, `m × ksub × dsub` row-major (what a device uploads).
    pub fn flat(&self) -> &[f32] {
        self.flat
    }

    /// The lookup table of one query, written into `table` (`m × ksub`
    /// inner products of each query sub-vector with each codeword).
    pub fn table_into(&self, query: &[f32], table: &mut [f32]) {
        let isa = Isa::active();
        for (j, (tj, qj)) in table
            .chunks_exact_mut(self.ksub)
            .zip(query.chunks_exact(self.dsub()))
            .enumerate()
        {
            panel_dots(isa, qj, &self.panels[j], tj);
        }
    }
}
