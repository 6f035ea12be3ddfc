//! Optimized product quantization: an orthogonal rotation learned so that
//! PQ loses less (Ge et al., non-parametric OPQ).
//!
//! Alternating optimisation, as FAISS's `OPQMatrix`: rotate the sample,
//! train and apply a PQ, then solve the orthogonal Procrustes problem
//! `min ‖X·Rᵀ − Ŷ‖` over rotations, whose answer is `Rᵀ = U·Vᵀ` from the SVD
//! `Xᵀ·Ŷ = U·Σ·Vᵀ`. The start is a random orthogonal matrix.

use crate::compute::Compute;
use crate::error::{Error, Result};
use crate::layout::Panels;
use crate::pq::{PqTrainConfig, ProductQuantizer, check_m, sample_rows};
use crate::rng::Rng;
use crate::vector::{Precision, batch_len};
use faer::Mat;

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
        // Xᵀ·Ŷ is a product over the n samples: with Xᵀ as row-major rows and
        // Ŷᵀ as panels it is one `matmul_nt` on the compute backend (the
        // same tile kernel as search, no second thread pool spinning).
        let xt = transpose(x, n, dim);
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
            let yt = Panels::from_rows(&transpose(&yhat, n, dim), n, Precision::F32);
            let xty_rm = compute.matmul_nt(&xt, &yt);
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

/// The transpose of a row-major `rows × cols` matrix, in 32 × 32 tiles
/// so that both sides stay in cache.
fn transpose(a: &[f32], rows: usize, cols: usize) -> Vec<f32> {
    const T: usize = 32;
    let mut t = vec![0f32; rows * cols];
    for i0 in (0..rows).step_by(T) {
        for j0 in (0..cols).step_by(T) {
            for i in i0..(i0 + T).min(rows) {
                for j in j0..(j0 + T).min(cols) {
                    t[j * rows + i] = a[i * cols + j];
                }
            }
        }
    }
    t
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
