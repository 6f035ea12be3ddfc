//! The CPU backend: [`CpuCompute`], rayon across queries and blocks, SIMD
//! chosen at run time ([`crate::simd`]).
//!
//! One file per kernel family, the same families and names as the GPU
//! backend (`dentate-gpu/src/{topk,cluster,pq,select}.rs`) and its shaders
//! (`shaders/{topk,cluster,pq,select}.wgsl`):
//!
//! | family | kernels ([`crate::Compute`] methods) |
//! |---|---|
//! | `topk` | `top_k`, `assign`, `matmul_nt`: the panel tile kernel with a fused heap |
//! | `cluster` | `cluster_sums`, `cluster_distance_sums`: k-means and silhouette |
//! | `pq` | `adc_top_k`, `fastscan_top_k`, `rerank`: the IVF-PQ scans and exact re-ranking |
//! | `select` | `salience`, `lowest`: pruning |

mod cluster;
mod pq;
mod select;
mod topk;

use crate::compute::{AsyncCompute, Compute, Metric};
use crate::error::Result;
use crate::layout::Panels;
use crate::salience::SalienceParams;
use crate::simd::Isa;
use crate::topk::Cand;
use crate::vector::Bitset;
use crate::views::{BaseRef, IvfParts, IvfPlan, StoreRef};

/// The CPU backend: rayon + runtime-chosen SIMD.
#[derive(Debug, Clone, Copy)]
pub struct CpuCompute {
    isa: Isa,
}

impl Default for CpuCompute {
    fn default() -> Self {
        CpuCompute { isa: Isa::active() }
    }
}

impl CpuCompute {
    /// The CPU backend on a specific SIMD path (must be in [`Isa::available`]).
    pub fn with_isa(isa: Isa) -> Option<Self> {
        Isa::available().contains(&isa).then_some(CpuCompute { isa })
    }
    /// The SIMD path in use.
    pub fn isa(&self) -> Isa {
        self.isa
    }
}

impl Compute for CpuCompute {
    fn name(&self) -> String {
        format!("cpu ({})", self.isa.name())
    }

    fn top_k(&self, queries: &[f32], base: BaseRef<'_>, k: usize) -> Vec<Vec<Cand>> {
        topk::top_k(self.isa, queries, base, k)
    }

    fn assign(&self, points: &[f32], centroids: &Panels, metric: Metric) -> (Vec<u32>, Vec<f32>) {
        topk::assign(self, points, centroids, metric)
    }

    fn matmul_nt(&self, a: &[f32], b: &Panels) -> Vec<f32> {
        topk::matmul_nt(self.isa, a, b)
    }

    fn cluster_sums(&self, points: &[f32], dim: usize, assign: &[u32], k: usize) -> (Vec<f32>, Vec<u32>) {
        cluster::cluster_sums(points, dim, assign, k)
    }

    fn cluster_distance_sums(&self, points: &Panels, labels: &[u32], k: usize, metric: Metric) -> Vec<f32> {
        cluster::cluster_distance_sums(self.isa, points, labels, k, metric)
    }

    fn adc_top_k(&self, parts: &IvfParts<'_>, plan: &IvfPlan) -> Vec<Vec<Cand>> {
        pq::adc_top_k(parts, plan)
    }

    fn fastscan_top_k(&self, parts: &IvfParts<'_>, plan: &IvfPlan) -> Result<Vec<Vec<Cand>>> {
        pq::fastscan_top_k(self.isa, parts, plan)
    }

    fn rerank(
        &self,
        queries: &[f32],
        store: StoreRef<'_>,
        ids: &[u64],
        candidates: &[Vec<u32>],
        k: usize,
    ) -> Vec<Vec<Cand>> {
        pq::rerank(self.isa, queries, store, ids, candidates, k)
    }

    fn salience(&self, added: &[u64], last_retrieved: &[u64], now: u64, params: &SalienceParams) -> Vec<f32> {
        select::salience(added, last_retrieved, now, params)
    }

    fn lowest(&self, scores: &[f32], ids: &[u64], alive: &Bitset, count: usize) -> Vec<u32> {
        select::lowest(scores, ids, alive, count)
    }
}

/// The CPU answers at once: each future is ready when first polled.
impl AsyncCompute for CpuCompute {
    async fn top_k_async(&self, queries: &[f32], base: BaseRef<'_>, k: usize) -> Vec<Vec<Cand>> {
        self.top_k(queries, base, k)
    }
    async fn assign_async(&self, points: &[f32], centroids: &Panels, metric: Metric) -> (Vec<u32>, Vec<f32>) {
        self.assign(points, centroids, metric)
    }
    async fn matmul_nt_async(&self, a: &[f32], b: &Panels) -> Vec<f32> {
        self.matmul_nt(a, b)
    }
    async fn cluster_sums_async(&self, points: &[f32], dim: usize, assign: &[u32], k: usize) -> (Vec<f32>, Vec<u32>) {
        self.cluster_sums(points, dim, assign, k)
    }
    async fn cluster_distance_sums_async(&self, points: &Panels, labels: &[u32], k: usize, metric: Metric) -> Vec<f32> {
        self.cluster_distance_sums(points, labels, k, metric)
    }
    async fn adc_top_k_async(&self, parts: &IvfParts<'_>, plan: &IvfPlan) -> Vec<Vec<Cand>> {
        self.adc_top_k(parts, plan)
    }
    async fn fastscan_top_k_async(&self, parts: &IvfParts<'_>, plan: &IvfPlan) -> Result<Vec<Vec<Cand>>> {
        self.fastscan_top_k(parts, plan)
    }
    async fn rerank_async(
        &self,
        queries: &[f32],
        store: StoreRef<'_>,
        ids: &[u64],
        candidates: &[Vec<u32>],
        k: usize,
    ) -> Vec<Vec<Cand>> {
        self.rerank(queries, store, ids, candidates, k)
    }
    async fn salience_async(
        &self,
        added: &[u64],
        last_retrieved: &[u64],
        now: u64,
        params: &SalienceParams,
    ) -> Vec<f32> {
        self.salience(added, last_retrieved, now, params)
    }
    async fn lowest_async(&self, scores: &[f32], ids: &[u64], alive: &Bitset, count: usize) -> Vec<u32> {
        self.lowest(scores, ids, alive, count)
    }
}
