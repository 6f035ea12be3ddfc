//! # dentate-gpu — the wgpu backend of Dentate
//!
//! [`GpuCompute`] implements the core's compute interface
//! ([`dentate_core::Compute`]) with WGSL compute shaders (the files in
//! `shaders/` at the root of the repository, one per kernel family) through
//! [wgpu](https://wgpu.rs): Vulkan, Metal, DX12 and GL natively, WebGPU in
//! the browser. Indexes and training code call the same trait on either
//! backend and get the same ids (ties broken by id on both) and scores
//! within float rounding.
//!
//! | kernel | CPU (`dentate_core::CpuCompute`) | GPU (this crate) |
//! |---|---|---|
//! | `top_k` | register-tiled panel GEMM + fused heap | `topk.wgsl` `gemm` (tiles staged in workgroup memory) → `segsel` (threshold + bitonic sort per segment) → `merge` (merge path); after the first block `gemm_keep` compacts the scores above each query's threshold and `survsel` sorts them |
//! | `assign`, `kmeans_step` | GEMM + top-1; chunked sums | `gemm` → `best_col` (best centroid per point); then `cluster_sums`, the points kept on the device for the whole training |
//! | `matmul_nt` | panel GEMM tiles | `topk.wgsl` `gemm` writing the matrix |
//! | `cluster_sums` | chunked sums in chunk order | `cluster.wgsl` `cluster_sums` (one owner per sum, point order) |
//! | `cluster_distance_sums` | Gram tiles | `cluster.wgsl` `distance_sums` |
//! | `adc_top_k` | per-query table + unrolled scan | `pq.wgsl` `adc` (table in workgroup memory; every entry's score) → `topk.wgsl` `segsel` → `merge` |
//! | `fastscan_top_k` | u8 tables, SIMD byte shuffles over blocks of 32 | `pq.wgsl` `fastscan` (the host's u8 tables in workgroup memory, the same blocks, exact u32 sums; every entry's score) → `segsel` → `merge` |
//! | `rerank` | f16/f32 dot per candidate | `pq.wgsl` `rerank` → `segsel` → `merge` |
//! | `salience` | per-row formula | `select.wgsl` `salience` |
//! | `lowest` | heap | `select.wgsl` radix select (`histogram`, `collect`) |
//!
//! Data the core marks with a storage identity (`uid`/`epoch` of
//! [`dentate_core::BaseRef`], [`dentate_core::InvertedRef`],
//! [`dentate_core::StoreRef`]) stays on the device between calls and only
//! appended rows are uploaded; data over the adapter's storage-binding limit
//! is split into chunks. Top-k never reads scores back: exact search scores
//! a block of rows into a device buffer, sorts each segment's survivors of
//! a running per-query threshold, and merges the sorted lists on the
//! device; the PQ scans and the re-rank write every score they compute
//! and select from those the same way (no per-thread lists). A k-means training's
//! points stay on the device for all its steps ([`dentate_core::PointsRef`]).
//!
//! [`GpuCompute::start_timing`] times every dispatch with timestamp
//! queries, where the adapter has them: device time per kernel, beside
//! the whole call's wall time (the GPU bench and kit print both).
//! Only `k` candidates per query cross the bus.
//!
//! Nothing on the GPU path reaches a caller as a panic or an error: an
//! operation the kernels do not cover (k > [`MAX_EXACT_K`] in exact search,
//! the PQ scans or the re-rank, after `k` is clamped to the rows there
//! are — the core's `k` rule —, inverted lists above
//! one binding) or one the device fails (validation, out of memory, device
//! lost) runs on the CPU backend instead, and [`GpuCompute::fallbacks`]
//! counts it.
//!
//! ## Choosing a backend
//! [`select_backend`] implements the policy: a real GPU (discrete or
//! integrated) is used automatically; a software adapter (llvmpipe,
//! SwiftShader, WARP) only when forced, because the CPU path is faster
//! there. `DENTATE_BACKEND=cpu|gpu|auto` or a [`BackendChoice`] forces
//! either; forcing `gpu` without any adapter is [`GpuError::NoAdapter`].
//! [`install_backend`] also makes the choice the default of every index
//! created afterwards ([`dentate_core::set_default_compute`]).
#![warn(missing_docs)]

mod cluster;
mod device;
mod error;
#[cfg(not(target_arch = "wasm32"))]
mod pipecache;
mod pq;
mod resident;
mod select;
mod topk;

pub use device::{AdapterReport, DeviceTimes, KernelTime};
pub use error::{GpuError, Result};
pub use topk::MAX_EXACT_K;

use dentate_core::salience::SalienceParams;
use dentate_core::topk::Cand;
use dentate_core::vector::Bitset;
use dentate_core::{
    AsyncCompute, BaseRef, Compute, CpuCompute, IvfParts, IvfPlan, KMeansStep, Metric, Panels, PointsRef, StoreRef,
};
use resident::{Lru, ResidentBase, ResidentIds, ResidentLists, ResidentPoints, ResidentStore};
#[cfg(not(target_arch = "wasm32"))]
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Every adapter wgpu finds on this machine, best first.
#[cfg(not(target_arch = "wasm32"))]
pub fn adapters() -> Vec<AdapterReport> {
    device::enumerate().iter().map(AdapterReport::of).collect()
}

/// Runs `$gpu` (an async call on the locked device state `$s`) inside error
/// scopes; on any error the CPU runs `$cpu` instead (see
/// `GpuCompute::settle`). The lock is held across the awaits on purpose: it
/// serialises use of the device, and the future is driven to completion on
/// one thread (by `pollster` natively, by the browser's event loop in wasm).
macro_rules! on_gpu {
    ($self:ident, $what:literal, |$s:ident| $gpu:expr, |$c:ident| $cpu:expr) => {{
        let out = match $self.state.lock() {
            Ok(mut guard) => {
                let device = guard.gpu.device.clone();
                let $s = &mut *guard;
                let out = device::scoped(&device, $gpu).await;
                guard.gpu.end_operation();
                out
            }
            Err(_) => Err(GpuError::Poisoned),
        };
        $self.settle($what, out, |$c| $cpu)
    }};
}

/// Which backend to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BackendChoice {
    /// A real GPU when there is one, else the CPU.
    #[default]
    Auto,
    /// The CPU backend.
    Cpu,
    /// The GPU backend on the best adapter, software adapters included.
    Gpu,
}

impl BackendChoice {
    /// Parses `auto`, `cpu` or `gpu`.
    pub fn parse(s: &str) -> Result<Self> {
        match s.trim().to_ascii_lowercase().as_str() {
            "auto" | "" => Ok(BackendChoice::Auto),
            "cpu" => Ok(BackendChoice::Cpu),
            "gpu" => Ok(BackendChoice::Gpu),
            _ => Err(GpuError::UnknownBackend(s.to_string())),
        }
    }

    /// `DENTATE_BACKEND`, or `Auto` when it is unset.
    pub fn from_env() -> Result<Self> {
        match std::env::var("DENTATE_BACKEND") {
            Ok(v) => Self::parse(&v),
            Err(_) => Ok(BackendChoice::Auto),
        }
    }
}

/// The backend `choice` asks for: [`BackendChoice::Auto`] opens the first
/// discrete or integrated GPU and otherwise returns the CPU backend;
/// [`BackendChoice::Gpu`] opens the best adapter of any kind, or fails.
#[cfg(not(target_arch = "wasm32"))]
pub fn select_backend(choice: BackendChoice) -> Result<Arc<dyn Compute>> {
    match choice {
        BackendChoice::Cpu => Ok(Arc::new(CpuCompute::default())),
        BackendChoice::Gpu => Ok(Arc::new(GpuCompute::new(true)?)),
        BackendChoice::Auto => match GpuCompute::new(false) {
            Ok(g) => Ok(Arc::new(g)),
            Err(GpuError::NoAdapter(why)) => {
                log::info!("backend: cpu ({why})");
                Ok(Arc::new(CpuCompute::default()))
            }
            Err(e) => {
                log::warn!("backend: cpu (the GPU could not be opened: {e})");
                Ok(Arc::new(CpuCompute::default()))
            }
        },
    }
}

/// [`select_backend`], installed as the default backend of every index
/// created from now on.
#[cfg(not(target_arch = "wasm32"))]
pub fn install_backend(choice: BackendChoice) -> Result<Arc<dyn Compute>> {
    let c = select_backend(choice)?;
    dentate_core::set_default_compute(c.clone());
    Ok(c)
}

/// Where the per-query PQ lookup table lives during the ADC scan.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TablePlacement {
    /// f32 in workgroup memory when it fits the adapter's limit (M ≤ 16 at
    /// WebGPU's 16 KiB), else f16 there when `SHADER_F16` allows, else a
    /// storage buffer.
    #[default]
    Auto,
    /// f32 in workgroup memory (falls back as `Auto` when it does not fit).
    Shared,
    /// f16 in workgroup memory (needs `SHADER_F16`; falls back as `Auto`).
    SharedF16,
    /// f32 in a storage buffer, written by a separate pass.
    Global,
}

/// Settings of [`GpuCompute::with_options`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GpuOptions {
    /// Also take virtual and software adapters (llvmpipe, SwiftShader,
    /// WARP); otherwise only a discrete or integrated GPU.
    pub allow_software: bool,
    /// Placement of the PQ lookup tables.
    pub table: TablePlacement,
    /// Bytes per storage binding, when lower than the adapter's limit
    /// (splits data into more chunks; for testing the chunked paths).
    pub binding_limit: Option<u64>,
    /// The exact-search GEMM's k-loop; `None`: `DENTATE_GPU_GEMM` when set
    /// (for measuring the shapes on a device), else [`GemmShape::default`].
    pub gemm: Option<GemmShape>,
}

/// How the exact-search GEMM (exact search, the coarse stage, k-means
/// assignment) walks the dimensions: every shape gives the same scores;
/// they differ in speed by device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GemmShape {
    /// Dimensions per slab staged in workgroup memory: 16 or 32 (32 needs
    /// 24 KiB of workgroup memory with 4-query tiles and 32 KiB with 8,
    /// else 16 runs).
    pub slab: u32,
    /// Load the next slab from global memory while multiplying this one.
    pub prefetch: bool,
    /// Queries of a thread's register tile (× 8 rows): 4 or 8 (8 needs 16
    /// KiB of workgroup memory, else 4 runs).
    pub queries: u32,
    /// The kernels of exact search (the GEMM, its selection and merges)
    /// compiled without wgpu's loop bounding (a 64-bit counter wgpu adds
    /// to every loop so that none can hang the driver; their loops end by
    /// construction, and without the counter `gemm_keep` ran 1.13× as
    /// fast on an H200).
    pub unbounded: bool,
    /// `unbounded`, and the GEMM (`gemm`, `gemm_keep`) compiled without
    /// bounds checks too (for measuring what they cost; every index it
    /// takes is in range by construction).
    pub unchecked: bool,
    /// Threads of a workgroup: 256 (tiles of 16 × `queries` queries) or
    /// 128 (8 × `queries`; with slabs of 16 dimensions, else 256 run).
    pub threads: u32,
}

/// Slabs of 16 dimensions, no prefetch, 8-query register tiles,
/// 128-thread workgroups, no loop bounding and no bounds checks in the
/// GEMM: the fastest of [`GemmShape::ALL`] on an H200 (BENCHMARKS.md).
impl Default for GemmShape {
    fn default() -> Self {
        GemmShape::new(16, false, 8).threads(128).unchecked()
    }
}

impl GemmShape {
    /// Every shape, for measuring them.
    pub const ALL: [GemmShape; 13] = [
        GemmShape::new(16, false, 4),
        GemmShape::new(16, true, 4),
        GemmShape::new(32, false, 4),
        GemmShape::new(32, true, 4),
        GemmShape::new(16, false, 8),
        GemmShape::new(16, false, 4).unbounded(),
        GemmShape::new(16, false, 8).unbounded(),
        GemmShape::new(32, false, 8).unbounded(),
        GemmShape::new(32, true, 8).unbounded(),
        GemmShape::new(16, false, 8).unchecked(),
        GemmShape::new(32, false, 8).unchecked(),
        GemmShape::new(16, false, 8).threads(128).unbounded(),
        GemmShape::new(16, false, 4).threads(128).unbounded(),
    ];

    const fn new(slab: u32, prefetch: bool, queries: u32) -> Self {
        GemmShape {
            slab,
            prefetch,
            queries,
            unbounded: false,
            unchecked: false,
            threads: 256,
        }
    }

    const fn unbounded(mut self) -> Self {
        self.unbounded = true;
        self
    }

    const fn threads(mut self, threads: u32) -> Self {
        self.threads = threads;
        self
    }

    const fn unchecked(mut self) -> Self {
        self.unbounded = true;
        self.unchecked = true;
        self
    }

    /// Parses a slab (`16` or `32`) followed by any of `prefetch`, `q4`
    /// and `q8` (4- or 8-query register tiles; 4 unless `q8`) and
    /// `t128` (128-thread workgroups), `unbounded` (no loop bounding) or
    /// `unchecked` (no loop bounding, and no bounds checks in the GEMM),
    /// comma-separated: `16`,
    /// `32,prefetch`, `16,q8,t128,unchecked`.
    pub fn parse(s: &str) -> Result<Self> {
        let mut shape = GemmShape::new(16, false, 4);
        for part in s.split(',').map(str::trim) {
            match part {
                "16" => shape.slab = 16,
                "32" => shape.slab = 32,
                "prefetch" => shape.prefetch = true,
                "q4" => shape.queries = 4,
                "q8" => shape.queries = 8,
                "t128" => shape.threads = 128,
                "t256" => shape.threads = 256,
                "unbounded" => shape.unbounded = true,
                "unchecked" => {
                    shape.unbounded = true;
                    shape.unchecked = true;
                }
                _ => {
                    return Err(GpuError::Unsupported(format!(
                        "GEMM shape {s:?}: expected 16 or 32, then optionally \",prefetch\", \",q8\" or \",q4\", \",t128\", \",unbounded\" or \",unchecked\""
                    )));
                }
            }
        }
        Ok(shape)
    }
}

impl std::fmt::Display for GemmShape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}{}{}{}{}",
            self.slab,
            if self.prefetch { ",prefetch" } else { "" },
            if self.queries == 8 { ",q8" } else { "" },
            if self.threads == 128 { ",t128" } else { "" },
            if self.unchecked {
                ",unchecked"
            } else if self.unbounded {
                ",unbounded"
            } else {
                ""
            }
        )
    }
}

/// The directory the driver's pipeline cache is kept in between runs
/// (`DENTATE_GPU_PIPELINE_CACHE`, else `$XDG_CACHE_HOME/dentate`, else
/// `~/.cache/dentate`); `None` when disabled (`off`) or unknown. Used where
/// the adapter has a pipeline cache (Vulkan).
#[cfg(not(target_arch = "wasm32"))]
pub fn pipeline_cache_dir() -> Option<std::path::PathBuf> {
    pipecache::directory()
}

/// `DENTATE_GPU_REQUIRE=hardware`: the backend refuses software adapters
/// (llvmpipe, SwiftShader, WARP) even where they are allowed, so a GPU test
/// or benchmark run on a machine whose GPU driver is missing fails instead
/// of passing on an emulation. Any other value, or none, requires nothing.
pub fn hardware_required() -> bool {
    std::env::var("DENTATE_GPU_REQUIRE").is_ok_and(|v| v.eq_ignore_ascii_case("hardware"))
}

/// Device state: the device, and the data kept on it.
pub(crate) struct GpuState {
    pub gpu: device::Gpu,
    pub table: TablePlacement,
    pub bases: Lru<ResidentBase>,
    pub stores: Lru<ResidentStore>,
    pub ids: Lru<ResidentIds>,
    pub lists: Lru<ResidentLists>,
    /// The points of the k-means training in progress.
    pub points: Lru<ResidentPoints>,
    /// Alive bitsets on the device, by generation.
    pub alive: Lru<resident::AliveCopies>,
    /// The last PQ codebooks uploaded (host copy, to recognise them).
    pub books: Option<(Vec<f32>, wgpu::Buffer)>,
}

/// The wgpu compute backend. See the crate documentation.
pub struct GpuCompute {
    state: Mutex<GpuState>,
    report: AdapterReport,
    cpu: CpuCompute,
    fallbacks: AtomicU64,
}

impl std::fmt::Debug for GpuCompute {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuCompute").field("adapter", &self.report).finish()
    }
}

impl GpuCompute {
    /// Opens the best adapter: only a discrete or integrated GPU unless
    /// `allow_software`, which also takes virtual and software adapters.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn new(allow_software: bool) -> Result<Self> {
        Self::with_options(GpuOptions {
            allow_software,
            ..GpuOptions::default()
        })
    }

    /// Opens the best adapter `options` allow, with its settings.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn with_options(options: GpuOptions) -> Result<Self> {
        pollster::block_on(Self::open(options))
    }

    /// [`GpuCompute::with_options`] without blocking: the way to open the
    /// backend in the browser (WebGPU), where the adapter comes from
    /// `navigator.gpu` and every call is asynchronous.
    pub async fn open(options: GpuOptions) -> Result<Self> {
        let require_hardware = hardware_required();
        let allow_software = options.allow_software && !require_hardware;
        let all = device::enumerate_async().await;
        let found = all.len();
        let adapter = all
            .into_iter()
            .find(|a| allow_software || AdapterReport::of(a).hardware)
            .ok_or_else(|| {
                GpuError::NoAdapter(if found == 0 {
                    "wgpu found no adapter (on Linux: install a Vulkan driver, e.g. mesa-vulkan-drivers; in a browser: WebGPU is off or absent)".into()
                } else if require_hardware {
                    format!("{found} adapter(s), none a discrete or integrated GPU, and DENTATE_GPU_REQUIRE=hardware refuses software ones")
                } else {
                    format!("{found} adapter(s), none a discrete or integrated GPU; force one with DENTATE_BACKEND=gpu")
                })
            })?;
        #[cfg(not(target_arch = "wasm32"))]
        let cache_dir = pipecache::directory();
        #[cfg(target_arch = "wasm32")]
        let cache_dir = None;
        let mut gpu = device::Gpu::open(&adapter, cache_dir).await?;
        gpu.binding_cap = options.binding_limit;
        gpu.gemm = match options.gemm {
            Some(shape) => shape,
            None => match std::env::var("DENTATE_GPU_GEMM") {
                Ok(v) => GemmShape::parse(&v)?,
                Err(_) => GemmShape::default(),
            },
        };
        let report = gpu.report.clone();
        log::info!("backend: gpu ({}, {})", report.name, report.backend);
        Ok(GpuCompute {
            state: Mutex::new(GpuState {
                gpu,
                table: options.table,
                bases: Lru::new(8),
                stores: Lru::new(4),
                ids: Lru::new(4),
                lists: Lru::new(4),
                points: Lru::new(1),
                alive: Lru::new(4),
                books: None,
            }),
            report,
            cpu: CpuCompute::default(),
            fallbacks: AtomicU64::new(0),
        })
    }

    /// The adapter in use.
    pub fn adapter(&self) -> &AdapterReport {
        &self.report
    }

    /// Times every dispatch from now on with timestamp queries (totals
    /// cleared); false, and nothing timed, when the adapter has no
    /// timestamp queries. Timing adds a query pair per dispatch and a small
    /// read-back per call: for measurements, not for production.
    pub fn start_timing(&self) -> bool {
        match self.state.lock() {
            Ok(s) => s.gpu.set_timing(true).unwrap_or(false),
            Err(_) => false,
        }
    }

    /// Stops timing and returns what was measured since
    /// [`GpuCompute::start_timing`] (`None` when timing was off).
    pub fn stop_timing(&self) -> Option<DeviceTimes> {
        let s = self.state.lock().ok()?;
        let t = s.gpu.timings();
        let _ = s.gpu.set_timing(false);
        t
    }

    /// The adapter has timestamp queries (device times can be measured).
    pub fn has_timestamps(&self) -> bool {
        self.state.lock().map(|s| s.gpu.timestamps).unwrap_or(false)
    }

    /// Bytes sent from the host to the device since the backend was opened
    /// (data, queries, tables, tombstones, parameters): what a cached
    /// upload saves shows here.
    pub fn uploaded_bytes(&self) -> u64 {
        self.state.lock().map(|s| s.gpu.uploaded()).unwrap_or(0)
    }

    /// The file the driver's pipeline cache is kept in and the bytes of
    /// driver data it started from (0: none yet, or unusable); `None`
    /// where the platform has no pipeline cache or it is disabled
    /// (`DENTATE_GPU_PIPELINE_CACHE=off`).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn pipeline_cache(&self) -> Option<(std::path::PathBuf, usize)> {
        let s = self.state.lock().ok()?;
        s.gpu
            .pipeline_cache
            .as_ref()
            .map(|c| (c.path().to_path_buf(), c.loaded))
    }

    /// Operations that ran on the CPU instead (not covered by the kernels,
    /// or failed on the device) since this backend was opened.
    pub fn fallbacks(&self) -> u64 {
        self.fallbacks.load(Ordering::Relaxed)
    }

    /// The value of a GPU attempt, or — on any error, logged and counted —
    /// the CPU's answer.
    fn settle<T>(&self, what: &str, out: Result<T>, cpu: impl FnOnce(&CpuCompute) -> T) -> T {
        match out {
            Ok(v) => v,
            Err(e) => {
                match &e {
                    GpuError::Unsupported(_) => log::debug!("{what} on the CPU: {e}"),
                    _ => log::warn!("{what} failed on the GPU, running it on the CPU: {e}"),
                }
                self.fallbacks.fetch_add(1, Ordering::Relaxed);
                cpu(&self.cpu)
            }
        }
    }
}

/// The compute interface without blocking: the kernels themselves (the
/// browser's WebGPU path calls these; natively [`Compute`] blocks on them).
// The methods hold the state's lock across awaits on purpose (see
// `on_gpu!`): it serialises use of the device; nothing else awaits it.
#[allow(clippy::await_holding_lock)]
impl AsyncCompute for GpuCompute {
    /// [`Compute::top_k`] without blocking (the browser's WebGPU path).
    async fn top_k_async(&self, queries: &[f32], base: BaseRef<'_>, k: usize) -> Vec<Vec<Cand>> {
        let d = base.panels.dim();
        if d == 0 || queries.len() < d {
            return Vec::new();
        }
        if base.panels.is_empty() || k == 0 {
            return vec![Vec::new(); queries.len() / d];
        }
        // The `k` rule: no more than every row, so a huge `k` on a small
        // base still runs on the device.
        let k = k.min(base.panels.len());
        on_gpu!(self, "top_k", |s| s.top_k(queries, &base, k), |c| c
            .top_k(queries, base, k))
    }

    /// [`Compute::assign`] without blocking: `gemm` scores against every
    /// centroid, `best_col` keeps each point's best.
    async fn assign_async(&self, points: &[f32], centroids: &Panels, metric: Metric) -> (Vec<u32>, Vec<f32>) {
        let d = centroids.dim();
        if d == 0 || centroids.is_empty() || points.len() < d {
            return self.cpu.assign(points, centroids, metric);
        }
        on_gpu!(self, "assign", |s| s.assign(points, centroids, metric), |c| c
            .assign(points, centroids, metric))
    }

    /// [`Compute::kmeans_step`] without blocking: the points stay on the
    /// device for every step of a training.
    async fn kmeans_step_async(&self, points: PointsRef<'_>, centroids: &Panels, metric: Metric) -> KMeansStep {
        if points.dim == 0 || points.dim != centroids.dim() || centroids.is_empty() || points.is_empty() {
            return self.cpu.kmeans_step(points, centroids, metric);
        }
        on_gpu!(
            self,
            "kmeans_step",
            |s| s.kmeans_step(&points, centroids, metric),
            |c| c.kmeans_step(points, centroids, metric)
        )
    }

    /// [`Compute::matmul_nt`] without blocking.
    async fn matmul_nt_async(&self, a: &[f32], b: &Panels) -> Vec<f32> {
        if b.dim() == 0 || b.is_empty() || a.len() < b.dim() {
            return Vec::new();
        }
        let base = BaseRef::plain(b);
        on_gpu!(self, "matmul_nt", |s| s.matmul_nt(a, &base), |c| c.matmul_nt(a, b))
    }

    /// [`Compute::cluster_sums`] without blocking.
    async fn cluster_sums_async(&self, points: &[f32], dim: usize, assign: &[u32], k: usize) -> (Vec<f32>, Vec<u32>) {
        if dim == 0 || k == 0 {
            return (vec![0.0; k * dim], vec![0; k]);
        }
        on_gpu!(self, "cluster_sums", |s| s.cluster_sums(points, dim, assign, k), |c| c
            .cluster_sums(points, dim, assign, k))
    }

    /// [`Compute::cluster_distance_sums`] without blocking.
    async fn cluster_distance_sums_async(&self, points: &Panels, labels: &[u32], k: usize, metric: Metric) -> Vec<f32> {
        if points.is_empty() || points.dim() == 0 || k == 0 {
            return Vec::new();
        }
        on_gpu!(
            self,
            "cluster_distance_sums",
            |s| s.distance_sums(points, labels, k, metric),
            |c| c.cluster_distance_sums(points, labels, k, metric)
        )
    }

    /// [`Compute::adc_top_k`] without blocking.
    async fn adc_top_k_async(&self, parts: &IvfParts<'_>, plan: &IvfPlan) -> Vec<Vec<Cand>> {
        if plan.probes.is_empty() || plan.shortlist == 0 {
            return vec![Vec::new(); plan.probes.len()];
        }
        let k = plan.shortlist.min(parts.ids.len());
        on_gpu!(self, "adc_top_k", |s| s.adc_top_k(parts, plan, k), |c| c
            .adc_top_k(parts, plan))
    }

    /// [`Compute::fastscan_top_k`] without blocking. The tables are
    /// quantised on the host (the same bytes the CPU sums); errors are the
    /// CPU's (a PQ without 16 centroids, a non-finite query).
    async fn fastscan_top_k_async(&self, parts: &IvfParts<'_>, plan: &IvfPlan) -> dentate_core::Result<Vec<Vec<Cand>>> {
        let tables = dentate_core::fastscan::query_tables(&plan.rotated, parts.books)?;
        if plan.probes.is_empty() || plan.shortlist == 0 {
            return Ok(vec![Vec::new(); plan.probes.len().min(tables.len())]);
        }
        let k = plan.shortlist.min(parts.ids.len());
        on_gpu!(
            self,
            "fastscan_top_k",
            |s| async { s.fastscan_top_k(&tables, parts, plan, k).await.map(Ok) },
            |c| c.fastscan_top_k(parts, plan)
        )
    }

    /// [`Compute::rerank`] without blocking.
    async fn rerank_async(
        &self,
        queries: &[f32],
        store: StoreRef<'_>,
        ids: &[u64],
        candidates: &[Vec<u32>],
        k: usize,
    ) -> Vec<Vec<Cand>> {
        if candidates.is_empty() || k == 0 {
            return vec![Vec::new(); candidates.len()];
        }
        let k = k.min(candidates.iter().map(Vec::len).max().unwrap_or(0)).max(1);
        on_gpu!(self, "rerank", |s| s.rerank(queries, &store, ids, candidates, k), |c| c
            .rerank(queries, store, ids, candidates, k))
    }

    /// [`Compute::salience`] without blocking.
    async fn salience_async(&self, added: &[u64], last: &[u64], now: u64, params: &SalienceParams) -> Vec<f32> {
        if added.is_empty() {
            return Vec::new();
        }
        on_gpu!(self, "salience", |s| s.salience(added, last, now, params), |c| c
            .salience(added, last, now, params))
    }

    /// [`Compute::lowest`] without blocking.
    async fn lowest_async(&self, scores: &[f32], ids: &[u64], alive: &Bitset, count: usize) -> Vec<u32> {
        if count == 0 || scores.is_empty() {
            return Vec::new();
        }
        on_gpu!(self, "lowest", |s| s.lowest(scores, ids, alive, count), |c| c
            .lowest(scores, ids, alive, count))
    }
}

/// The blocking compute interface (native; in the browser use the `_async`
/// methods).
#[cfg(not(target_arch = "wasm32"))]
impl Compute for GpuCompute {
    fn name(&self) -> String {
        format!("gpu ({}, {})", self.report.name, self.report.backend)
    }

    fn top_k(&self, queries: &[f32], base: BaseRef<'_>, k: usize) -> Vec<Vec<Cand>> {
        pollster::block_on(self.top_k_async(queries, base, k))
    }

    fn matmul_nt(&self, a: &[f32], b: &Panels) -> Vec<f32> {
        pollster::block_on(self.matmul_nt_async(a, b))
    }

    fn cluster_sums(&self, points: &[f32], dim: usize, assign: &[u32], k: usize) -> (Vec<f32>, Vec<u32>) {
        pollster::block_on(self.cluster_sums_async(points, dim, assign, k))
    }

    fn cluster_distance_sums(&self, points: &Panels, labels: &[u32], k: usize, metric: Metric) -> Vec<f32> {
        pollster::block_on(self.cluster_distance_sums_async(points, labels, k, metric))
    }

    fn assign(&self, points: &[f32], centroids: &Panels, metric: Metric) -> (Vec<u32>, Vec<f32>) {
        pollster::block_on(self.assign_async(points, centroids, metric))
    }

    fn kmeans_step(&self, points: PointsRef<'_>, centroids: &Panels, metric: Metric) -> KMeansStep {
        pollster::block_on(self.kmeans_step_async(points, centroids, metric))
    }

    fn adc_top_k(&self, parts: &IvfParts<'_>, plan: &IvfPlan) -> Vec<Vec<Cand>> {
        pollster::block_on(self.adc_top_k_async(parts, plan))
    }

    fn fastscan_top_k(&self, parts: &IvfParts<'_>, plan: &IvfPlan) -> dentate_core::Result<Vec<Vec<Cand>>> {
        pollster::block_on(self.fastscan_top_k_async(parts, plan))
    }

    fn rerank(
        &self,
        queries: &[f32],
        store: StoreRef<'_>,
        ids: &[u64],
        candidates: &[Vec<u32>],
        k: usize,
    ) -> Vec<Vec<Cand>> {
        pollster::block_on(self.rerank_async(queries, store, ids, candidates, k))
    }

    fn salience(&self, added: &[u64], last_retrieved: &[u64], now: u64, params: &SalienceParams) -> Vec<f32> {
        pollster::block_on(self.salience_async(added, last_retrieved, now, params))
    }

    fn lowest(&self, scores: &[f32], ids: &[u64], alive: &Bitset, count: usize) -> Vec<u32> {
        pollster::block_on(self.lowest_async(scores, ids, alive, count))
    }
}

#[cfg(test)]
mod tests {
    use super::GemmShape;

    #[test]
    fn gemm_shapes_parse_and_print() {
        for shape in GemmShape::ALL {
            assert_eq!(GemmShape::parse(&shape.to_string()).unwrap(), shape);
        }
        assert_eq!(GemmShape::parse("32, prefetch").unwrap(), GemmShape::ALL[3]);
        assert_eq!(GemmShape::parse("q8,unchecked,t128,16").unwrap(), GemmShape::default());
        assert_eq!(GemmShape::default().to_string(), "16,q8,t128,unchecked");
        assert!(GemmShape::parse("24").is_err());
        assert!(GemmShape::parse("16,q9").is_err());
    }
}
