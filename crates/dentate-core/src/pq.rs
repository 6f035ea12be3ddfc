//! Product quantization: `m` sub-quantizers of 256 centroids (8-bit codes)
//! or 16 centroids (4-bit codes, scanned by [`crate::fastscan`]).

use crate::codebook::Codebooks;
use crate::compute::{Compute, Metric};
use crate::error::{Error, Result};
use crate::kmeans::{KMeans, KMeansConfig, gather};
use crate::layout::Panels;
use crate::rng::Rng;
use crate::vector::{Precision, batch_len};
use rayon::prelude::*;

/// Centroids per sub-quantizer of 8-bit codes.
pub const KSUB: usize = 256;
/// Centroids per sub-quantizer of 4-bit codes.
pub const KSUB4: usize = 16;
/// Most training vectors used (FAISS's default for 8-bit codes).
pub const MAX_TRAIN: usize = 65_536;

/// A trained product quantizer.
#[derive(Debug, Clone)]
pub struct ProductQuantizer {
    dim: usize,
    m: usize,
    /// Centroids per sub-quantizer: 256 (8-bit codes) or 16 (4-bit).
    ksub: usize,
    /// `m × ksub × dsub` codebooks.
    codebooks: Vec<f32>,
    /// One panel matrix per sub-quantizer (`ksub` rows of `dsub`), for tables.
    panels: Vec<Panels>,
}

/// Training settings for [`ProductQuantizer::train`].
#[derive(Debug, Clone, Copy)]
pub struct PqTrainConfig {
    /// Lloyd iterations per sub-quantizer.
    pub iterations: usize,
    /// Seed.
    pub seed: u64,
    /// Training sample cap.
    pub max_train: usize,
    /// Bits per code: 8 (256 centroids per sub-quantizer) or 4 (16).
    pub bits: u32,
}

impl Default for PqTrainConfig {
    fn default() -> Self {
        PqTrainConfig {
            iterations: 25,
            seed: 4321,
            max_train: MAX_TRAIN,
            bits: 8,
        }
    }
}

/// Centroids per sub-quantizer for `bits`-bit codes (4 or 8).
pub(crate) fn ksub_for(bits: u32) -> Result<usize> {
    match bits {
        4 => Ok(KSUB4),
        8 => Ok(KSUB),
        _ => Err(Error::param(
            "bits",
            format!("{bits}-bit codes: only 4 and 8 are supported"),
        )),
    }
}

impl ProductQuantizer {
    /// Trains on row-major `data`. `dim` must be divisible by `m`, and there
    /// must be at least as many training vectors as centroids per
    /// sub-quantizer (256 for 8-bit codes, 16 for 4-bit).
    pub fn train(data: &[f32], dim: usize, m: usize, cfg: &PqTrainConfig, compute: &dyn Compute) -> Result<Self> {
        let n = batch_len(data, dim)?;
        check_m(dim, m)?;
        let ksub = ksub_for(cfg.bits)?;
        if n < ksub {
            return Err(Error::InsufficientTrainingData { needed: ksub, got: n });
        }
        let sample;
        let data = match sample_rows(data, dim, cfg.max_train, &mut Rng::new(cfg.seed)) {
            Some(s) => {
                sample = s;
                &sample[..]
            }
            None => data,
        };
        let dsub = dim / m;
        // Sub-quantizers are independent: train them in parallel (each
        // k-means also parallelises inside; rayon balances the two levels).
        let books: Vec<Vec<f32>> = (0..m)
            .into_par_iter()
            .map(|j| {
                let sub = sub_vectors(data, dim, dsub, j);
                // Random init, as FAISS: k-means++ costs 256 passes per
                // sub-space and buys little once 25 Lloyd iterations follow.
                let km_cfg = KMeansConfig {
                    max_points_per_centroid: 0,
                    min_points_per_centroid: 1,
                    ..KMeansConfig::new(ksub)
                        .seed(cfg.seed.wrapping_add(j as u64))
                        .max_iter(cfg.iterations)
                        .init(crate::kmeans::Init::Random)
                };
                KMeans::train(&sub, dsub, &km_cfg, compute).map(|km| km.centroids)
            })
            .collect::<Result<_>>()?;
        let codebooks = books.concat();
        Ok(Self::from_codebooks(dim, m, ksub, codebooks))
    }

    /// Builds from raw codebooks (`m × ksub × dim/m`; the caller checked the length).
    pub(crate) fn from_codebooks(dim: usize, m: usize, ksub: usize, codebooks: Vec<f32>) -> Self {
        let dsub = dim / m;
        let panels = (0..m)
            .map(|j| Panels::from_rows(&codebooks[j * ksub * dsub..(j + 1) * ksub * dsub], dsub, Precision::F32))
            .collect();
        ProductQuantizer {
            dim,
            m,
            ksub,
            codebooks,
            panels,
        }
    }

    /// Dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }
    /// Number of sub-quantizers (bytes per code).
    pub fn m(&self) -> usize {
        self.m
    }
    /// Sub-vector dimension.
    pub fn dsub(&self) -> usize {
        self.dim / self.m
    }
    /// Centroids per sub-quantizer (256 or 16).
    pub fn ksub(&self) -> usize {
        self.ksub
    }
    /// Bits per code (8 or 4).
    pub fn bits(&self) -> u32 {
        self.ksub.trailing_zeros()
    }
    /// The codebooks, `m × ksub × dsub`.
    pub fn codebooks(&self) -> &[f32] {
        &self.codebooks
    }

    /// Encodes row-major vectors to `n × m` codes (one byte per code, also
    /// for 4-bit codes).
    pub fn encode(&self, data: &[f32], compute: &dyn Compute) -> Result<Vec<u8>> {
        let n = batch_len(data, self.dim)?;
        let dsub = self.dsub();
        let mut codes = vec![0u8; n * self.m];
        for j in 0..self.m {
            let sub = sub_vectors(data, self.dim, dsub, j);
            let (assign, _) = compute.assign(&sub, &self.panels[j], Metric::L2);
            for (i, a) in assign.into_iter().enumerate() {
                codes[i * self.m + j] = a as u8;
            }
        }
        Ok(codes)
    }

    /// Reconstructs vectors from `n × m` codes.
    pub fn decode(&self, codes: &[u8]) -> Vec<f32> {
        let dsub = self.dsub();
        let mut out = Vec::with_capacity(codes.len() / self.m.max(1) * self.dim);
        for code in codes.chunks_exact(self.m) {
            for (j, &c) in code.iter().enumerate() {
                let off = (j * self.ksub + c as usize % self.ksub) * dsub;
                out.extend_from_slice(&self.codebooks[off..off + dsub]);
            }
        }
        out
    }

    /// Lookup tables for a batch of queries: `nq × m × ksub` inner products
    /// of each query sub-vector with each codeword.
    pub fn tables(&self, queries: &[f32]) -> Vec<f32> {
        let mut out = vec![0f32; queries.len() / self.dim * self.m * self.ksub];
        out.par_chunks_mut(self.m * self.ksub)
            .zip(queries.par_chunks_exact(self.dim))
            .for_each(|(t, q)| self.table_into(q, t));
        out
    }

    /// The lookup table of one query, written into `table` (`m × ksub`).
    /// Search builds it per query in a reused buffer that stays in cache.
    pub fn table_into(&self, query: &[f32], table: &mut [f32]) {
        self.books().table_into(query, table)
    }

    /// The codebooks as the compute interface reads them.
    pub fn books(&self) -> Codebooks<'_> {
        Codebooks {
            dim: self.dim,
            m: self.m,
            ksub: self.ksub,
            flat: &self.codebooks,
            panels: &self.panels,
        }
    }

    /// Approximate inner product of a query (through its table) with a code.
    pub fn adc(&self, table: &[f32], code: &[u8]) -> f32 {
        code.iter()
            .enumerate()
            .map(|(j, &c)| table[j * self.ksub + c as usize % self.ksub])
            .sum()
    }
}

/// Fails unless `m ≥ 1` sub-quantizers split `dim` evenly.
pub(crate) fn check_m(dim: usize, m: usize) -> Result<()> {
    if m == 0 || !dim.is_multiple_of(m) {
        return Err(Error::param("m", format!("{m} does not divide the dimension {dim}")));
    }
    Ok(())
}

/// A random sample of `max` rows when there are more, else `None`.
pub(crate) fn sample_rows(data: &[f32], dim: usize, max: usize, rng: &mut Rng) -> Option<Vec<f32>> {
    let n = data.len() / dim;
    (n > max).then(|| gather(data, dim, &rng.sample_indices(n, max)))
}

/// Sub-vector `j` (columns `j*dsub .. (j+1)*dsub`) of every row, contiguous.
fn sub_vectors(data: &[f32], dim: usize, dsub: usize, j: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(data.len() / dim * dsub);
    for r in data.chunks_exact(dim) {
        out.extend_from_slice(&r[j * dsub..(j + 1) * dsub]);
    }
    out
}
