//! k-means clustering (Lloyd), spherical mode for cosine, silhouette score
//! and choosing k by silhouette.

use crate::compute::{Compute, KMeansStep, Metric};
use crate::error::{Error, Result};
use crate::layout::Panels;
use crate::rng::Rng;
use crate::vector::{Precision, batch_len};
use crate::views::{PointsRef, new_uid};

/// How initial centroids are picked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Init {
    /// k-means++ (D² sampling): better starts, `k` passes over the sample.
    #[default]
    PlusPlus,
    /// `k` distinct random points: one pass, what FAISS uses for large `k`.
    Random,
}

/// k-means settings. Defaults follow FAISS: 25 iterations, at most 256
/// training points per centroid, a warning under 39.
#[derive(Debug, Clone, PartialEq)]
pub struct KMeansConfig {
    /// Number of clusters.
    pub k: usize,
    /// Maximum Lloyd iterations.
    pub max_iter: usize,
    /// Stop when the objective improves by less than this fraction.
    pub tol: f64,
    /// Initialisation.
    pub init: Init,
    /// Spherical k-means: cosine assignment, centroids renormalised to unit
    /// length (inputs should be unit vectors).
    pub spherical: bool,
    /// Inner-product k-means (when not spherical): each point goes to the
    /// centroid of largest inner product, and centroids are the plain means
    /// of their points, not renormalised — FAISS's clustering for an
    /// inner-product IVF. Tight clusters keep long centroids, so residuals
    /// `x − c` are shorter than with unit centroids.
    pub inner_product: bool,
    /// Seed of every random choice; same seed and data give the same result.
    pub seed: u64,
    /// Training sample cap per centroid (0 = no cap).
    pub max_points_per_centroid: usize,
    /// Below this many points per centroid a warning is logged.
    pub min_points_per_centroid: usize,
}

impl KMeansConfig {
    /// Defaults for `k` clusters.
    pub fn new(k: usize) -> Self {
        KMeansConfig {
            k,
            max_iter: 25,
            tol: 1e-4,
            init: Init::PlusPlus,
            spherical: false,
            inner_product: false,
            seed: 1234,
            max_points_per_centroid: 256,
            min_points_per_centroid: 39,
        }
    }
    /// Sets spherical mode.
    pub fn spherical(mut self, on: bool) -> Self {
        self.spherical = on;
        self
    }
    /// Sets inner-product mode.
    pub fn inner_product(mut self, on: bool) -> Self {
        self.inner_product = on;
        self
    }
    /// Sets the seed.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }
    /// Sets the iteration cap.
    pub fn max_iter(mut self, n: usize) -> Self {
        self.max_iter = n;
        self
    }
    /// Sets the initialisation.
    pub fn init(mut self, init: Init) -> Self {
        self.init = init;
        self
    }
    fn metric(&self) -> Metric {
        if self.spherical || self.inner_product {
            Metric::Cosine
        } else {
            Metric::L2
        }
    }
}

/// A trained k-means model.
#[derive(Debug, Clone)]
pub struct KMeans {
    /// Centroids, row-major `k × dim`.
    pub centroids: Vec<f32>,
    /// Dimension.
    pub dim: usize,
    /// Lloyd iterations run.
    pub iterations: usize,
    /// Final objective: mean cosine similarity (spherical; the mean inner
    /// product in inner-product mode) or mean squared distance (L2) of
    /// training points to their centroid.
    pub objective: f64,
    /// Points in each cluster at the last assignment.
    pub sizes: Vec<u32>,
    /// Warnings raised during training (also logged).
    pub warnings: Vec<String>,
    metric: Metric,
}

impl KMeans {
    /// Trains on row-major `data` (`n × dim`).
    pub fn train(data: &[f32], dim: usize, cfg: &KMeansConfig, compute: &dyn Compute) -> Result<KMeans> {
        let n = batch_len(data, dim)?;
        if cfg.k == 0 {
            return Err(Error::param("k", "must be at least 1"));
        }
        if let Some((row, col)) = first_non_finite(data, dim) {
            return Err(Error::NonFinite { row, col });
        }
        if n < cfg.k {
            return Err(Error::InsufficientTrainingData { needed: cfg.k, got: n });
        }
        let mut rng = Rng::new(cfg.seed);
        let mut warnings = Vec::new();
        // Sample cap, as FAISS: at most k * max_points_per_centroid points.
        let cap = cfg.k.saturating_mul(cfg.max_points_per_centroid);
        let sample: Vec<f32>;
        let pts: &[f32] = if cfg.max_points_per_centroid > 0 && n > cap {
            let idx = rng.sample_indices(n, cap);
            sample = gather(data, dim, &idx);
            &sample
        } else {
            data
        };
        let n = pts.len() / dim;
        if n < cfg.k * cfg.min_points_per_centroid {
            let w = format!(
                "k-means: {n} training points for {} centroids (fewer than {} per centroid); clusters may be poor",
                cfg.k, cfg.min_points_per_centroid
            );
            log::warn!("{w}");
            warnings.push(w);
        }
        let metric = cfg.metric();
        let mut centroids = match cfg.init {
            Init::Random => gather(pts, dim, &rng.sample_indices(n, cfg.k)),
            Init::PlusPlus => plus_plus(pts, dim, cfg.k, metric, &mut rng),
        };
        if cfg.spherical {
            normalize_rows(&mut centroids, dim);
        }
        let sq_norms: Vec<f32> = pts.chunks_exact(dim).map(|r| r.iter().map(|x| x * x).sum()).collect();
        let mut prev = f64::INFINITY;
        let mut objective = 0.0;
        let mut iterations = 0;
        let mut sizes = vec![0u32; cfg.k];
        // One identity for the whole training: a GPU keeps the points.
        let points = PointsRef {
            rows: pts,
            dim,
            uid: new_uid(),
        };
        for it in 0..cfg.max_iter.max(1) {
            iterations = it + 1;
            let panels = Panels::from_rows(&centroids, dim, Precision::F32);
            let KMeansStep {
                scores, sums, counts, ..
            } = compute.kmeans_step(points, &panels, metric);
            // Objective as a loss (lower is better) for the convergence test.
            let loss: f64 = match metric {
                Metric::Cosine => scores.iter().map(|&s| 1.0 - s as f64).sum(),
                Metric::L2 => scores
                    .iter()
                    .zip(&sq_norms)
                    .map(|(&s, &x2)| (x2 as f64 - 2.0 * s as f64).max(0.0))
                    .sum(),
            };
            objective = match metric {
                Metric::Cosine => 1.0 - loss / n as f64,
                Metric::L2 => loss / n as f64,
            };
            sizes = counts.clone();
            centroids = sums;
            for (c, &cnt) in counts.iter().enumerate() {
                if cnt > 0 {
                    let inv = 1.0 / cnt as f32;
                    centroids[c * dim..(c + 1) * dim].iter_mut().for_each(|x| *x *= inv);
                }
            }
            repair_empty(&mut centroids, dim, &mut sizes, &mut rng);
            if cfg.spherical {
                normalize_rows(&mut centroids, dim);
            }
            let improved = (prev - loss) / prev.abs().max(f64::MIN_POSITIVE);
            if prev.is_finite() && improved.abs() < cfg.tol {
                break;
            }
            prev = loss;
        }
        Ok(KMeans {
            centroids,
            dim,
            iterations,
            objective,
            sizes,
            warnings,
            metric,
        })
    }

    /// Number of clusters.
    pub fn k(&self) -> usize {
        self.centroids.len() / self.dim.max(1)
    }

    /// Nearest centroid of each row-major point.
    pub fn assign(&self, data: &[f32], compute: &dyn Compute) -> Result<Vec<u32>> {
        let n = batch_len(data, self.dim)?;
        if n == 0 {
            return Ok(Vec::new());
        }
        let panels = Panels::from_rows(&self.centroids, self.dim, Precision::F32);
        Ok(compute.assign(data, &panels, self.metric).0)
    }
}

fn first_non_finite(data: &[f32], dim: usize) -> Option<(usize, usize)> {
    data.iter().position(|x| !x.is_finite()).map(|i| (i / dim, i % dim))
}

pub(crate) fn gather(data: &[f32], dim: usize, idx: &[usize]) -> Vec<f32> {
    let mut out = Vec::with_capacity(idx.len() * dim);
    for &i in idx {
        out.extend_from_slice(&data[i * dim..(i + 1) * dim]);
    }
    out
}

pub(crate) fn normalize_rows(v: &mut [f32], dim: usize) {
    for r in v.chunks_exact_mut(dim) {
        let n = r.iter().map(|x| x * x).sum::<f32>().sqrt();
        if n > 0.0 {
            r.iter_mut().for_each(|x| *x /= n);
        }
    }
}

fn dist(metric: Metric, a: &[f32], b: &[f32]) -> f32 {
    match metric {
        Metric::Cosine => (1.0 - crate::simd::dot(a, b)).max(0.0),
        Metric::L2 => crate::simd::l2_sq(a, b),
    }
}

/// k-means++: each next centre drawn with probability ∝ distance to the
/// nearest centre chosen so far.
fn plus_plus(pts: &[f32], dim: usize, k: usize, metric: Metric, rng: &mut Rng) -> Vec<f32> {
    use rayon::prelude::*;
    let n = pts.len() / dim;
    let mut centers = Vec::with_capacity(k * dim);
    let first = rng.below(n);
    centers.extend_from_slice(&pts[first * dim..(first + 1) * dim]);
    let mut best: Vec<f32> = pts
        .par_chunks_exact(dim)
        .map(|p| dist(metric, p, &centers[..dim]))
        .collect();
    for _ in 1..k {
        let total: f64 = best.iter().map(|&x| x as f64).sum();
        let pick = if total <= 0.0 {
            rng.below(n)
        } else {
            let mut target = rng.next_f64() * total;
            let mut chosen = n - 1;
            for (i, &w) in best.iter().enumerate() {
                target -= w as f64;
                if target <= 0.0 {
                    chosen = i;
                    break;
                }
            }
            chosen
        };
        let c = pts[pick * dim..(pick + 1) * dim].to_vec();
        best.par_iter_mut().zip(pts.par_chunks_exact(dim)).for_each(|(b, p)| {
            let d = dist(metric, p, &c);
            if d < *b {
                *b = d;
            }
        });
        centers.extend_from_slice(&c);
    }
    centers
}

/// Gives every empty cluster half of the largest one (FAISS's split): the
/// two copies are nudged apart symmetrically.
fn repair_empty(centroids: &mut [f32], dim: usize, sizes: &mut [u32], rng: &mut Rng) {
    const EPS: f32 = 1.0 / 1024.0;
    for e in 0..sizes.len() {
        if sizes[e] != 0 {
            continue;
        }
        let (big, &cnt) = sizes
            .iter()
            .enumerate()
            .max_by_key(|(i, c)| (**c, std::cmp::Reverse(*i)))
            .unwrap_or((0, &0));
        if cnt < 2 {
            continue;
        }
        for j in 0..dim {
            let v = centroids[big * dim + j];
            let sign = if rng.next_u64() & 1 == 0 { 1.0 } else { -1.0 };
            centroids[e * dim + j] = v * (1.0 + sign * EPS);
            centroids[big * dim + j] = v * (1.0 - sign * EPS);
        }
        sizes[e] = cnt / 2;
        sizes[big] = cnt - cnt / 2;
    }
}

/// Mean silhouette of a clustering, in `[-1, 1]` (higher is better).
///
/// Exact over all points when `n ≤ sample`; otherwise over a seeded random
/// sample of `sample` points (distances among the sample only, as
/// scikit-learn's `sample_size`). Points alone in their cluster score 0.
#[allow(clippy::too_many_arguments)]
pub fn silhouette(
    data: &[f32],
    dim: usize,
    labels: &[u32],
    k: usize,
    metric: Metric,
    sample: usize,
    seed: u64,
    compute: &dyn Compute,
) -> Result<f32> {
    let n = batch_len(data, dim)?;
    if labels.len() != n {
        return Err(Error::param(
            "labels",
            format!("{} labels for {n} points", labels.len()),
        ));
    }
    if k < 2 {
        return Err(Error::param("k", "silhouette needs at least 2 clusters"));
    }
    if let Some(&bad) = labels.iter().find(|&&l| l as usize >= k) {
        return Err(Error::param("labels", format!("label {bad} is not below k = {k}")));
    }
    let (pts, lab): (Vec<f32>, Vec<u32>) = if n > sample.max(2) {
        let idx = Rng::new(seed).sample_indices(n, sample.max(2));
        (gather(data, dim, &idx), idx.iter().map(|&i| labels[i]).collect())
    } else {
        (data.to_vec(), labels.to_vec())
    };
    let m = lab.len();
    let mut sizes = vec![0u32; k];
    for &l in &lab {
        sizes[l as usize] += 1;
    }
    let panels = Panels::from_rows(&pts, dim, Precision::F32);
    let sums = compute.cluster_distance_sums(&panels, &lab, k, metric);
    let mut total = 0f64;
    for i in 0..m {
        let own = lab[i] as usize;
        if sizes[own] <= 1 {
            continue;
        }
        let a = sums[i * k + own] / (sizes[own] - 1) as f32;
        let b = (0..k)
            .filter(|&c| c != own && sizes[c] > 0)
            .map(|c| sums[i * k + c] / sizes[c] as f32)
            .fold(f32::INFINITY, f32::min);
        if b.is_finite() {
            let den = a.max(b);
            if den > 0.0 {
                total += ((b - a) / den) as f64;
            }
        }
    }
    Ok((total / m as f64) as f32)
}

/// The outcome of [`choose_k`].
#[derive(Debug, Clone)]
pub struct ChooseK {
    /// The `k` with the highest silhouette (the smallest such `k` on ties).
    pub best_k: usize,
    /// `(k, silhouette)` for every `k` tried.
    pub scores: Vec<(usize, f32)>,
    /// The model trained with `best_k`.
    pub model: KMeans,
}

/// Trains k-means for every `k` in `range` and keeps the one with the best
/// silhouette (PREMem §3.2.1). `base` supplies every setting except `k`.
/// Values of `k` below 2 or above `n - 1` are skipped.
pub fn choose_k(
    data: &[f32],
    dim: usize,
    range: std::ops::RangeInclusive<usize>,
    base: &KMeansConfig,
    silhouette_sample: usize,
    compute: &dyn Compute,
) -> Result<ChooseK> {
    let n = batch_len(data, dim)?;
    let lo = (*range.start()).max(2);
    let hi = (*range.end()).min(n.saturating_sub(1));
    if lo > hi {
        return Err(Error::param(
            "range",
            format!(
                "no k in {}..={} fits {n} points (need 2 ≤ k < n)",
                range.start(),
                range.end()
            ),
        ));
    }
    let mut best: Option<(usize, f32, KMeans)> = None;
    let mut scores = Vec::new();
    for k in lo..=hi {
        let cfg = KMeansConfig { k, ..base.clone() };
        let model = KMeans::train(data, dim, &cfg, compute)?;
        let labels = model.assign(data, compute)?;
        let s = silhouette(
            data,
            dim,
            &labels,
            k,
            cfg.metric(),
            silhouette_sample,
            base.seed,
            compute,
        )?;
        scores.push((k, s));
        if best.as_ref().is_none_or(|(_, bs, _)| s > *bs) {
            best = Some((k, s, model));
        }
    }
    let (best_k, _, model) = best.ok_or(Error::EmptyIndex)?;
    Ok(ChooseK { best_k, scores, model })
}
