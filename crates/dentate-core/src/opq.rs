//! Optimized product quantization: an orthogonal rotation learned so that
//! PQ loses less (Ge et al., non-parametric OPQ).
//!
//! Alternating optimisation, as FAISS's `OPQMatrix`: rotate the sample,
//! train and apply a PQ, then solve the orthogonal Procrustes problem
//! `min ‖X·Rᵀ − Ŷ‖` over rotations, whose answer is `Rᵀ = U·Vᵀ` from the SVD
//! `Xᵀ·Ŷ = U·Σ·Vᵀ`. The start is a random orthogonal matrix.

use crate::compute::Compute;
use crate::error::{Error, Result};
use crate::pq::{PqTrainConfig, ProductQuantizer, check_m, sample_rows};
use crate::rng::Rng;
use crate::simd::Panels;
use crate::vector::{Precision, batch_len};
use faer::{Mat, MatRef};

/// OPQ training settings (defaults as FAISS: 50 outer iterations, 4 PQ
/// iterations per step and 40 in the first, 65,536 training points).
#[derive(Debug, Clone, Copy)]
pub struct OpqConfig {
    /// Outer iterations.
    pub iterations: usize,
    /// k-means iterations of the PQ in each step.
    pub pq_iterations: usize,
    /// k-means iterations of the PQ in the first step.
    pub pq_iterations_first: usize,
    /// Training sample cap.
    pub max_train: usize,
    /// Seed.
    pub seed: u64,
    /// Bits per code of the PQ the rotation is optimised for (8 or 4):
    /// the index's own code width, so the rotation fits the codes it serves.
    pub pq_bits: u32,
}

impl Default for OpqConfig {
    fn default() -> Self {
        OpqConfig {
            iterations: 50,
            pq_iterations: 4,
            pq_iterations_first: 40,
            max_train: 65_536,
            seed: 2468,
            pq_bits: 8,
        }
    }
}

/// A learned rotation `y = R·x`.
#[derive(Debug, Clone)]
pub struct OpqRotation {
    dim: usize,
    /// Row-major `dim × dim`.
    rotation: Vec<f32>,
    panels: Panels,
}

impl OpqRotation {
    /// Learns a rotation for `m` sub-quantizers on row-major `data`.
    pub fn train(data: &[f32], dim: usize, m: usize, cfg: &OpqConfig, compute: &dyn Compute) -> Result<Self> {
        batch_len(data, dim)?;
        check_m(dim, m)?;
        let mut rng = Rng::new(cfg.seed);
        let sample;
        let x = match sample_rows(data, dim, cfg.max_train, &mut rng) {
            Some(s) => {
                sample = s;
                &sample[..]
            }
            None => data,
        };
        let n = x.len() / dim;
        // Random orthogonal start: the orthogonal factor of a Gaussian matrix.
        let g: Vec<f32> = (0..dim * dim).map(|_| rng.normal()).collect();
        let mut rot = Self::from_matrix(dim, orthogonal_factor(&g, dim)?);
        let xm = MatRef::from_row_major_slice(x, n, dim);
        for it in 0..cfg.iterations.max(1) {
            let y = rot.apply(x, compute);
            let pq_cfg = PqTrainConfig {
                iterations: if it == 0 {
                    cfg.pq_iterations_first
                } else {
                    cfg.pq_iterations
                },
                seed: cfg.seed.wrapping_add(it as u64 * 7919),
                max_train: cfg.max_train,
                bits: cfg.pq_bits,
            };
            let pq = ProductQuantizer::train(&y, dim, m, &pq_cfg, compute)?;
            let yhat = pq.decode(&pq.encode(&y, compute)?);
            // Procrustes: Rᵀ = U Vᵀ for Xᵀ Ŷ = U Σ Vᵀ, so R = V Uᵀ.
            let yh = MatRef::from_row_major_slice(&yhat, n, dim);
            let xty: Mat<f32> = xm.transpose() * yh;
            let xty_rm: Vec<f32> = (0..dim)
                .flat_map(|i| (0..dim).map(move |j| (i, j)))
                .map(|(i, j)| xty[(i, j)])
                .collect();
            let rt = orthogonal_factor(&xty_rm, dim)?;
            // rt is Rᵀ row-major; transpose it to R.
            let mut r = vec![0f32; dim * dim];
            for i in 0..dim {
                for j in 0..dim {
                    r[i * dim + j] = rt[j * dim + i];
                }
            }
            rot = Self::from_matrix(dim, r);
        }
        Ok(rot)
    }

    /// Wraps a row-major orthogonal matrix.
    pub(crate) fn from_matrix(dim: usize, rotation: Vec<f32>) -> Self {
        let panels = Panels::from_rows(&rotation, dim, Precision::F32);
        OpqRotation { dim, rotation, panels }
    }

    /// Dimension.
    pub fn dim(&self) -> usize {
        self.dim
    }

    /// The matrix, row-major.
    pub fn matrix(&self) -> &[f32] {
        &self.rotation
    }

    /// Rotates row-major vectors: each output row is `R·x`.
    pub fn apply(&self, data: &[f32], compute: &dyn Compute) -> Vec<f32> {
        compute.matmul_nt(data, &self.panels)
    }
}

/// The orthogonal factor `U·Vᵀ` of the SVD of a square row-major matrix
/// (its nearest orthogonal matrix), computed in f64.
fn orthogonal_factor(a: &[f32], dim: usize) -> Result<Vec<f32>> {
    let m = Mat::<f64>::from_fn(dim, dim, |i, j| a[i * dim + j] as f64);
    let svd = m.svd().map_err(|e| Error::Backend {
        backend: "faer".into(),
        reason: format!("SVD did not converge: {e:?}"),
    })?;
    let q: Mat<f64> = svd.U() * svd.V().transpose();
    Ok((0..dim * dim).map(|k| q[(k / dim, k % dim)] as f32).collect())
}
