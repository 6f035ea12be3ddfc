//! The compute interface: every hot kernel of the engine behind one trait.
//!
//! Indexes and training code call a [`Compute`] and never know which backend
//! runs. [`crate::CpuCompute`] ([`crate::cpu`]) is the reference
//! implementation; the wgpu backend (crate `dentate-gpu`) implements the
//! same calls, and [`AsyncCompute`] is the same interface without blocking
//! (the browser's WebGPU path). Results are deterministic: candidates with
//! equal scores are ordered by smaller id, so every backend returns the same
//! ids in the same order.
//!
//! The arguments are views ([`crate::views`], [`crate::Codebooks`]) that
//! carry a cache identity, so a backend may keep device copies of the data
//! between calls.

use crate::error::Result;
use crate::layout::Panels;
use crate::salience::SalienceParams;
use crate::topk::Cand;
use crate::vector::Bitset;
use crate::views::{BaseRef, IvfParts, IvfPlan, PointsRef, StoreRef};

/// Distance used by clustering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// `1 − <a, b>` on unit vectors (spherical k-means, cosine).
    Cosine,
    /// Euclidean distance.
    L2,
}

/// One k-means step: every point's nearest centroid and its score (as
/// [`Compute::assign`]), and the per-cluster sums and counts of the points
/// under that assignment (as [`Compute::cluster_sums`]).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct KMeansStep {
    /// Nearest centroid of each point.
    pub assign: Vec<u32>,
    /// Its score (cosine similarity, or for L2 `<x, c> − ‖c‖²/2`).
    pub scores: Vec<f32>,
    /// Per-cluster sums of the points, `k × dim` row-major.
    pub sums: Vec<f32>,
    /// Points per cluster.
    pub counts: Vec<u32>,
}

/// Every hot kernel of the engine. See the module documentation.
///
/// **`k` is a bound.** Every top-k method returns at most `k` candidates
/// per query and fewer when fewer rows exist; an implementation clamps `k`
/// to the rows it was given before sizing anything by it, so any `k`
/// (`usize::MAX` included) is safe and costs what the rows cost. `k = 0`
/// gives empty lists (the indexes reject it earlier as `Error::ZeroK`).
pub trait Compute: Send + Sync + std::fmt::Debug {
    /// Backend name, e.g. `cpu (avx512f)`.
    fn name(&self) -> String;

    /// For each row-major query (`queries.len() / dim` of them), the `k` live
    /// rows with the highest `<q, row> + bias[row]`, best first, ties by
    /// smaller id. Fewer than `k` when fewer rows are alive.
    fn top_k(&self, queries: &[f32], base: BaseRef<'_>, k: usize) -> Vec<Vec<Cand>>;

    /// Nearest centroid of each point (`metric` decides inner product or L2)
    /// and its score: the cosine similarity, or for L2
    /// `<x, c> − ‖c‖²/2 = (‖x‖² − ‖x − c‖²) / 2`, from which callers recover
    /// the squared distance as `‖x‖² − 2·score`.
    fn assign(&self, points: &[f32], centroids: &Panels, metric: Metric) -> (Vec<u32>, Vec<f32>) {
        assign_by_top_k(self, points, centroids, metric)
    }

    /// Full product `a · bᵀ`: `out[i * b.len() + j] = <a_i, b_j>`.
    fn matmul_nt(&self, a: &[f32], b: &Panels) -> Vec<f32>;

    /// Per-cluster sums of the points and counts (k-means update step).
    fn cluster_sums(&self, points: &[f32], dim: usize, assign: &[u32], k: usize) -> (Vec<f32>, Vec<u32>);

    /// One k-means step over `points` against `centroids` (`k` = their
    /// number): the assignment and the sums under it. Training calls this
    /// once per iteration with the same `points.uid`, so a backend may keep
    /// the points on its device for the whole training (the GPU does);
    /// provided as [`Compute::assign`] then [`Compute::cluster_sums`].
    fn kmeans_step(&self, points: PointsRef<'_>, centroids: &Panels, metric: Metric) -> KMeansStep {
        let (assign, scores) = self.assign(points.rows, centroids, metric);
        let (sums, counts) = self.cluster_sums(points.rows, points.dim, &assign, centroids.len());
        KMeansStep {
            assign,
            scores,
            sums,
            counts,
        }
    }

    /// `out[i * k + c]` = sum of distances from point `i` to every point of
    /// cluster `c` (the self-distance is 0): the input of the silhouette score.
    fn cluster_distance_sums(&self, points: &Panels, labels: &[u32], k: usize, metric: Metric) -> Vec<f32>;

    /// ADC scan of 8-bit codes: for each query of `plan.rotated`, its lookup
    /// table against `parts.books` applied to the codes of its probed lists
    /// (`plan.probes[q]`, each list's scores offset by its bias); the
    /// `plan.shortlist` best live candidates, ties by id. Tables are built
    /// per query, never for the whole batch.
    fn adc_top_k(&self, parts: &IvfParts<'_>, plan: &IvfPlan) -> Vec<Vec<Cand>>;

    /// Fast-scan of 4-bit codes: for each query of `plan.rotated`, its
    /// lookup tables against the 16-centroid codebooks quantised to u8 by
    /// [`crate::fastscan::QuantizedTables`], summed in u16 over the packed
    /// blocks of its probed lists (layout in [`crate::fastscan`]); the
    /// `plan.shortlist` best live candidates, scored
    /// `bias + (offset + scale · sum)`, ties by smaller id. Every backend
    /// must return exactly these candidates. Fails when the codebooks do not
    /// have 16 centroids per sub-quantizer or a query is not finite.
    fn fastscan_top_k(&self, parts: &IvfParts<'_>, plan: &IvfPlan) -> Result<Vec<Vec<Cand>>>;

    /// Exact re-ranking: each query's candidate rows scored against the stored
    /// vectors; the `k` best, ties by id.
    fn rerank(
        &self,
        queries: &[f32],
        store: StoreRef<'_>,
        ids: &[u64],
        candidates: &[Vec<u32>],
        k: usize,
    ) -> Vec<Vec<Cand>>;

    /// Salience of every row at turn `now`.
    fn salience(&self, added: &[u64], last_retrieved: &[u64], now: u64, params: &SalienceParams) -> Vec<f32>;

    /// The `count` live rows with the lowest score, lowest first (ties by id).
    fn lowest(&self, scores: &[f32], ids: &[u64], alive: &Bitset, count: usize) -> Vec<u32>;
}

/// [`Compute`] without blocking, method for method (each `*_async` method
/// is the [`Compute`] method of the same name and the same contract): the
/// form a backend whose device answers asynchronously implements natively
/// (WebGPU in the browser), and which [`crate::CpuCompute`] implements with
/// futures that are ready at once. Both backends implement both traits, so
/// a method added to either (without a default) does not compile until
/// both backends have it.
// The futures are not `Send` on purpose: the browser's are not, and a GPU
// backend holds its device lock across awaits.
#[allow(async_fn_in_trait)]
pub trait AsyncCompute {
    /// [`Compute::top_k`].
    async fn top_k_async(&self, queries: &[f32], base: BaseRef<'_>, k: usize) -> Vec<Vec<Cand>>;
    /// [`Compute::assign`] (provided: through [`AsyncCompute::top_k_async`]
    /// with k = 1, as [`Compute::assign`]'s provided implementation).
    async fn assign_async(&self, points: &[f32], centroids: &Panels, metric: Metric) -> (Vec<u32>, Vec<f32>) {
        let bias = l2_bias(centroids, metric);
        let base = BaseRef {
            bias: bias.as_deref(),
            ..BaseRef::plain(centroids)
        };
        best_of_each(self.top_k_async(points, base, 1).await)
    }
    /// [`Compute::kmeans_step`] (provided: [`AsyncCompute::assign_async`]
    /// then [`AsyncCompute::cluster_sums_async`]).
    async fn kmeans_step_async(&self, points: PointsRef<'_>, centroids: &Panels, metric: Metric) -> KMeansStep {
        let (assign, scores) = self.assign_async(points.rows, centroids, metric).await;
        let (sums, counts) = self
            .cluster_sums_async(points.rows, points.dim, &assign, centroids.len())
            .await;
        KMeansStep {
            assign,
            scores,
            sums,
            counts,
        }
    }
    /// [`Compute::matmul_nt`].
    async fn matmul_nt_async(&self, a: &[f32], b: &Panels) -> Vec<f32>;
    /// [`Compute::cluster_sums`].
    async fn cluster_sums_async(&self, points: &[f32], dim: usize, assign: &[u32], k: usize) -> (Vec<f32>, Vec<u32>);
    /// [`Compute::cluster_distance_sums`].
    async fn cluster_distance_sums_async(&self, points: &Panels, labels: &[u32], k: usize, metric: Metric) -> Vec<f32>;
    /// [`Compute::adc_top_k`].
    async fn adc_top_k_async(&self, parts: &IvfParts<'_>, plan: &IvfPlan) -> Vec<Vec<Cand>>;
    /// [`Compute::fastscan_top_k`].
    async fn fastscan_top_k_async(&self, parts: &IvfParts<'_>, plan: &IvfPlan) -> Result<Vec<Vec<Cand>>>;
    /// [`Compute::rerank`].
    async fn rerank_async(
        &self,
        queries: &[f32],
        store: StoreRef<'_>,
        ids: &[u64],
        candidates: &[Vec<u32>],
        k: usize,
    ) -> Vec<Vec<Cand>>;
    /// [`Compute::salience`].
    async fn salience_async(
        &self,
        added: &[u64],
        last_retrieved: &[u64],
        now: u64,
        params: &SalienceParams,
    ) -> Vec<f32>;
    /// [`Compute::lowest`].
    async fn lowest_async(&self, scores: &[f32], ids: &[u64], alive: &Bitset, count: usize) -> Vec<u32>;
}

/// [`Compute::assign`] through [`Compute::top_k`] with k = 1 (the
/// provided implementation).
pub(crate) fn assign_by_top_k<C: Compute + ?Sized>(
    c: &C,
    points: &[f32],
    centroids: &Panels,
    metric: Metric,
) -> (Vec<u32>, Vec<f32>) {
    let bias = l2_bias(centroids, metric);
    let base = BaseRef {
        bias: bias.as_deref(),
        ..BaseRef::plain(centroids)
    };
    best_of_each(c.top_k(points, base, 1))
}

/// The row and score of each list's first candidate (`(0, -inf)` for an
/// empty list): top-1 lists as an assignment.
fn best_of_each(lists: Vec<Vec<Cand>>) -> (Vec<u32>, Vec<f32>) {
    lists
        .into_iter()
        .map(|v| v.first().map_or((0, f32::NEG_INFINITY), |c| (c.row, c.score)))
        .unzip()
}

/// The per-centroid bias that turns inner-product argmax into nearest by
/// L2 (`-‖c‖²/2`); `None` for cosine. Every backend's assignment adds
/// exactly these values.
pub fn l2_bias(centroids: &Panels, metric: Metric) -> Option<Vec<f32>> {
    match metric {
        Metric::Cosine => None,
        Metric::L2 => Some(
            centroids
                .to_rows()
                .chunks_exact(centroids.dim().max(1))
                .map(|c| -0.5 * c.iter().map(|x| x * x).sum::<f32>())
                .collect(),
        ),
    }
}
