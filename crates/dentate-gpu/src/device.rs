//! The device: adapter choice, limits and features, shader variants and
//! pipelines, buffers, dispatches and read-back.

use crate::error::{GpuError, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use wgpu::util::DeviceExt;

/// The WGSL sources, one file per kernel family (`shaders/` at the root of
/// the repository).
pub(crate) mod wgsl {
    /// Batched scoring with fused top-k, the merge pass, score matrices.
    pub const TOPK: &str = concat!(
        include_str!("../../../shaders/common.wgsl"),
        include_str!("../../../shaders/topk.wgsl")
    );
    /// k-means centroid update, silhouette distance sums.
    pub const CLUSTER: &str = include_str!("../../../shaders/cluster.wgsl");
    /// PQ tables, ADC scan, exact re-ranking.
    pub const PQ: &str = concat!(
        include_str!("../../../shaders/common.wgsl"),
        include_str!("../../../shaders/pq.wgsl")
    );
    /// Salience scores, radix select of the lowest rows.
    pub const SELECT: &str = include_str!("../../../shaders/select.wgsl");
}

/// What an adapter is, as [`crate::adapters`] reports it.
#[derive(Debug, Clone, PartialEq)]
pub struct AdapterReport {
    /// Adapter name (e.g. `NVIDIA H100 80GB HBM3`, `llvmpipe (LLVM 15.0.6, 256 bits)`).
    pub name: String,
    /// Graphics API (`Vulkan`, `Metal`, `Dx12`, `Gl`, `BrowserWebGpu`).
    pub backend: String,
    /// `DiscreteGpu`, `IntegratedGpu`, `VirtualGpu`, `Cpu` or `Other`.
    pub device_type: String,
    /// Driver name and version.
    pub driver: String,
    /// A real GPU (discrete or integrated): chosen automatically. Software
    /// adapters (llvmpipe, SwiftShader, WARP) are used only when forced.
    pub hardware: bool,
    /// `SHADER_F16` is available (f16 lookup tables in workgroup memory).
    pub shader_f16: bool,
    /// Largest storage-buffer binding, bytes (larger data is split into chunks).
    pub max_storage_binding: u64,
    /// Workgroup memory, bytes.
    pub max_workgroup_storage: u32,
    /// Invocations per workgroup.
    pub max_invocations: u32,
    /// The driver's compiled kernels can be kept between runs
    /// (`PIPELINE_CACHE`: Vulkan).
    pub pipeline_cache: bool,
}

impl AdapterReport {
    pub(crate) fn of(adapter: &wgpu::Adapter) -> AdapterReport {
        let info = adapter.get_info();
        let limits = adapter.limits();
        AdapterReport {
            // Browsers may withhold the adapter's name.
            name: if info.name.is_empty() {
                "unnamed adapter".into()
            } else {
                info.name.clone()
            },
            backend: format!("{:?}", info.backend),
            device_type: format!("{:?}", info.device_type),
            driver: format!("{} {}", info.driver, info.driver_info).trim().to_string(),
            hardware: matches!(
                info.device_type,
                wgpu::DeviceType::DiscreteGpu | wgpu::DeviceType::IntegratedGpu
            ),
            shader_f16: adapter.features().contains(wgpu::Features::SHADER_F16),
            max_storage_binding: limits.max_storage_buffer_binding_size.min(limits.max_buffer_size),
            max_workgroup_storage: limits.max_compute_workgroup_storage_size,
            max_invocations: limits.max_compute_invocations_per_workgroup,
            pipeline_cache: adapter.features().contains(wgpu::Features::PIPELINE_CACHE),
        }
    }
}

/// An instance over Vulkan, Metal, DX12 and WebGPU (`WGPU_BACKEND`, e.g.
/// `gl`, chooses others): the APIs where compute is first-class.
pub(crate) fn instance() -> wgpu::Instance {
    let mut desc = wgpu::InstanceDescriptor::new_without_display_handle_from_env();
    desc.backends = wgpu::Backends::from_env().unwrap_or(wgpu::Backends::PRIMARY);
    wgpu::Instance::new(desc)
}

/// Every adapter of every compiled-in graphics API, best first (discrete,
/// integrated, virtual, software). In the browser: the one `navigator.gpu`
/// gives, if any.
pub(crate) async fn enumerate_async() -> Vec<wgpu::Adapter> {
    let mut all = instance().enumerate_adapters(wgpu::Backends::all()).await;
    let rank = |a: &wgpu::Adapter| match a.get_info().device_type {
        wgpu::DeviceType::DiscreteGpu => 0,
        wgpu::DeviceType::IntegratedGpu => 1,
        wgpu::DeviceType::VirtualGpu => 2,
        wgpu::DeviceType::Cpu => 3,
        wgpu::DeviceType::Other => 4,
    };
    // Within a kind, Vulkan/Metal/DX12 before GL (compute is a first-class
    // citizen there).
    let api = |a: &wgpu::Adapter| matches!(a.get_info().backend, wgpu::Backend::Gl) as u8;
    all.sort_by_key(|a| (rank(a), api(a)));
    all
}

/// [`enumerate_async`], blocking (native only).
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn enumerate() -> Vec<wgpu::Adapter> {
    pollster::block_on(enumerate_async())
}

/// A compiled pipeline and the name of its entry point (what device
/// timings are reported under).
pub(crate) struct Kernel {
    pipe: wgpu::ComputePipeline,
    name: String,
}

impl std::ops::Deref for Kernel {
    type Target = wgpu::ComputePipeline;
    fn deref(&self) -> &wgpu::ComputePipeline {
        &self.pipe
    }
}

/// A shader variant: `entry` of `source` with `consts` prepended and
/// `replace`ments made (see [`Gpu::pipeline`]).
struct Variant<'a> {
    source: &'static str,
    entry: &'a str,
    consts: &'a [(&'a str, String)],
    replace: &'a [(&'a str, String)],
    enable_f16: bool,
}

/// Device time of one kernel, from timestamp queries (`Gpu::timings`).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct KernelTime {
    /// Entry point (`gemm`, `segsel`, `merge`, `adc`, …).
    pub kernel: String,
    /// Dispatches timed.
    pub dispatches: u64,
    /// Device time of those dispatches, seconds.
    pub seconds: f64,
}

/// What timestamp queries measured since timing started
/// ([`crate::GpuCompute::start_timing`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DeviceTimes {
    /// Per kernel, in the order each first ran.
    pub kernels: Vec<KernelTime>,
    /// Summed over read-backs: from the first dispatch's start to the last
    /// one's end (device busy or waiting between dispatches), seconds.
    pub span_s: f64,
    /// Dispatches left untimed (more than one read-back's worth of pairs).
    pub untimed: u64,
}

impl DeviceTimes {
    /// Device time of every timed dispatch, seconds.
    pub fn total_s(&self) -> f64 {
        self.kernels.iter().map(|k| k.seconds).sum()
    }
}

/// Device timings: a timestamp pair around every dispatch, resolved at the
/// next read-back.
struct Timer {
    set: wgpu::QuerySet,
    resolve: wgpu::Buffer,
    /// The kernel of each recorded pair, in query order.
    pending: Vec<String>,
    totals: Vec<KernelTime>,
    /// From the first timestamp to the last of each read-back, summed.
    span: f64,
    /// Dispatches left untimed because the query set was full.
    untimed: u64,
}

/// Timestamp pairs one read-back can hold.
const TIMED_PASSES: u32 = 2048;

/// A device and queue with its limits, and the compiled pipelines.
pub(crate) struct Gpu {
    pub device: wgpu::Device,
    pub queue: wgpu::Queue,
    pub report: AdapterReport,
    pub limits: wgpu::Limits,
    pub f16: bool,
    /// A lower cap on the bytes per binding than the adapter's (to exercise
    /// chunking on small data).
    pub binding_cap: Option<u64>,
    /// The k-loop shape of the exact-search GEMM.
    pub gemm: crate::GemmShape,
    pipelines: Mutex<HashMap<String, Arc<Kernel>>>,
    /// Timestamp queries are available (`TIMESTAMP_QUERY`).
    pub timestamps: bool,
    timer: Mutex<Option<Timer>>,
    /// Scratch buffers given back after use ([`Gpu::scratch`]).
    pool: BufferPool,
    /// Read-back buffers whose bytes were read ([`ReadBack::read`]).
    readbacks: BufferPool,
    /// Uniform buffers of the current operation and free ones.
    uniforms: Mutex<UniformPool>,
    /// The driver's pipeline cache and its file, where the platform has
    /// one ([`crate::pipecache`]).
    #[cfg(not(target_arch = "wasm32"))]
    pub pipeline_cache: Option<crate::pipecache::PipelineCacheFile>,
    /// Bytes sent from the host through [`Gpu::storage`], [`Gpu::upload`],
    /// [`Gpu::uniform`] and [`Gpu::write`] since the device was opened.
    uploaded: AtomicU64,
}

impl std::fmt::Debug for Gpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Gpu").field("adapter", &self.report.name).finish()
    }
}

impl Gpu {
    /// Opens `adapter` with its own limits and `SHADER_F16` when it has
    /// it, keeping its pipeline cache in `cache_dir` where the platform has
    /// one (`None`: no cache; ignored in the browser).
    pub async fn open(adapter: &wgpu::Adapter, cache_dir: Option<std::path::PathBuf>) -> Result<Gpu> {
        let report = AdapterReport::of(adapter);
        let f16 = report.shader_f16;
        let limits = adapter.limits();
        let timestamps = adapter.features().contains(wgpu::Features::TIMESTAMP_QUERY);
        let mut features = wgpu::Features::empty();
        if f16 {
            features |= wgpu::Features::SHADER_F16;
        }
        if timestamps {
            features |= wgpu::Features::TIMESTAMP_QUERY;
        }
        #[cfg(not(target_arch = "wasm32"))]
        let cache_dir = cache_dir.filter(|_| adapter.features().contains(wgpu::Features::PIPELINE_CACHE));
        #[cfg(target_arch = "wasm32")]
        let _ = cache_dir;
        #[cfg(not(target_arch = "wasm32"))]
        if cache_dir.is_some() {
            features |= wgpu::Features::PIPELINE_CACHE;
        }
        let (device, queue) = adapter
            .request_device(&wgpu::DeviceDescriptor {
                label: Some("dentate"),
                required_features: features,
                required_limits: limits.clone(),
                ..Default::default()
            })
            .await
            .map_err(|e| GpuError::Device(format!("{}: {e}", report.name)))?;
        // Errors are caught by error scopes around every operation; one that
        // escapes them is logged, never a panic.
        device.on_uncaptured_error(Arc::new(|e: wgpu::Error| log::error!("wgpu: {e}")));
        #[cfg(not(target_arch = "wasm32"))]
        let pipeline_cache =
            cache_dir.and_then(|dir| crate::pipecache::PipelineCacheFile::open(&device, &adapter.get_info(), &dir));
        Ok(Gpu {
            device,
            queue,
            report,
            limits,
            f16,
            binding_cap: None,
            gemm: crate::GemmShape::default(),
            pipelines: Mutex::new(HashMap::new()),
            timestamps,
            timer: Mutex::new(None),
            pool: BufferPool::new(POOL_BYTES),
            readbacks: BufferPool::new(READBACK_BYTES),
            uniforms: Mutex::new(UniformPool::default()),
            #[cfg(not(target_arch = "wasm32"))]
            pipeline_cache,
            uploaded: AtomicU64::new(0),
        })
    }

    /// The pipeline cache new pipelines are compiled into (marked as
    /// changed, to be saved after the call).
    fn cache(&self) -> Option<&wgpu::PipelineCache> {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(c) = &self.pipeline_cache {
            c.touch();
            return Some(&c.cache);
        }
        None
    }

    /// Saves the pipeline cache when a call compiled new pipelines into
    /// it; bytes written (0: nothing new, no cache, or failed and logged).
    pub fn save_pipeline_cache(&self) -> usize {
        #[cfg(not(target_arch = "wasm32"))]
        if let Some(c) = &self.pipeline_cache {
            return c.save();
        }
        0
    }

    /// Bytes sent from the host to the device since it was opened.
    pub fn uploaded(&self) -> u64 {
        self.uploaded.load(Ordering::Relaxed)
    }

    fn count_upload(&self, bytes: usize) {
        self.uploaded.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    /// `queue.write_buffer`, counted in [`Gpu::uploaded`].
    pub fn write(&self, buf: &wgpu::Buffer, offset: u64, bytes: &[u8]) {
        self.count_upload(bytes.len());
        self.queue.write_buffer(buf, offset, bytes);
    }

    /// Starts (or, with `false`, stops) timing every dispatch with
    /// timestamp queries; false when the adapter has none. Starting clears
    /// the totals.
    pub fn set_timing(&self, on: bool) -> Result<bool> {
        let mut timer = self.timer.lock().map_err(|_| GpuError::Poisoned)?;
        if !on || !self.timestamps {
            *timer = None;
            return Ok(on && self.timestamps);
        }
        let set = self.device.create_query_set(&wgpu::QuerySetDescriptor {
            label: Some("dispatch times"),
            ty: wgpu::QueryType::Timestamp,
            count: 2 * TIMED_PASSES,
        });
        let resolve = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("timestamps"),
            size: 16 * u64::from(TIMED_PASSES),
            usage: wgpu::BufferUsages::QUERY_RESOLVE | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        });
        *timer = Some(Timer {
            set,
            resolve,
            pending: Vec::new(),
            totals: Vec::new(),
            span: 0.0,
            untimed: 0,
        });
        Ok(true)
    }

    /// Device time per kernel since timing started, the summed span of the
    /// read-backs (first timestamp to last), and the dispatches left
    /// untimed; `None` when timing is off.
    pub fn timings(&self) -> Option<DeviceTimes> {
        let timer = self.timer.lock().ok()?;
        timer.as_ref().map(|t| DeviceTimes {
            kernels: t.totals.clone(),
            span_s: t.span,
            untimed: t.untimed,
        })
    }

    /// Largest buffer the kernels bind, bytes (a multiple of 256).
    pub fn max_binding(&self) -> u64 {
        let adapter = self
            .limits
            .max_storage_buffer_binding_size
            .min(self.limits.max_buffer_size);
        self.binding_cap.map_or(adapter, |c| c.min(adapter)) & !255
    }

    /// Queries one dispatch may take (one workgroup each) when every query
    /// needs `per_query[i]` bytes in buffer `i`: each buffer stays within
    /// one binding and the workgroups within a dispatch; at least 1.
    pub fn queries_per_batch(&self, per_query: &[u64]) -> usize {
        let maxb = self.max_binding();
        per_query
            .iter()
            .map(|&b| (maxb / b.max(1)) as usize)
            .fold(self.max_groups() as usize, usize::min)
            .max(1)
    }

    /// Workgroups per dispatch dimension.
    pub fn max_groups(&self) -> u32 {
        self.limits.max_compute_workgroups_per_dimension
    }

    /// The pipeline of `entry` in `source`, specialised by `consts`
    /// (prepended as `const NAME = value;`) and textual `replace`ments;
    /// compiled once per variant.
    pub async fn pipeline(
        &self,
        source: &'static str,
        entry: &str,
        consts: &[(&str, String)],
        replace: &[(&str, String)],
        enable_f16: bool,
    ) -> Result<Arc<Kernel>> {
        let variant = Variant {
            source,
            entry,
            consts,
            replace,
            enable_f16,
        };
        self.compile(variant, wgpu::ShaderRuntimeChecks::checked()).await
    }

    /// [`Gpu::pipeline`] compiled without wgpu's loop bounding (a 64-bit
    /// counter it adds to every loop, so that a loop that never ends cannot
    /// hang the driver).
    ///
    /// # Safety
    ///
    /// Every loop of `entry` (and of the functions it calls) must end: its
    /// bound a constant, or a uniform that the host has checked, stepped by
    /// a nonzero constant that cannot wrap past it.
    pub async unsafe fn pipeline_unbounded(
        &self,
        source: &'static str,
        entry: &str,
        consts: &[(&str, String)],
    ) -> Result<Arc<Kernel>> {
        // SAFETY: passed on to the caller.
        unsafe { self.pipeline_trusted(source, entry, consts, true) }.await
    }

    /// [`Gpu::pipeline_unbounded`] compiled without bounds checks too
    /// (naga clamps every index into an array or a storage buffer that it
    /// cannot prove in range).
    ///
    /// # Safety
    ///
    /// As for [`Gpu::pipeline_unbounded`], and every index `entry` takes
    /// into an array or a binding is in range for every dispatch the host
    /// records with it.
    pub async unsafe fn pipeline_unchecked(
        &self,
        source: &'static str,
        entry: &str,
        consts: &[(&str, String)],
    ) -> Result<Arc<Kernel>> {
        // SAFETY: passed on to the caller.
        unsafe { self.pipeline_trusted(source, entry, consts, false) }.await
    }

    /// A pipeline without loop bounding, with or without bounds checks.
    ///
    /// # Safety
    ///
    /// As for [`Gpu::pipeline_unbounded`], or [`Gpu::pipeline_unchecked`]
    /// without `bounds_checks`.
    async unsafe fn pipeline_trusted(
        &self,
        source: &'static str,
        entry: &str,
        consts: &[(&str, String)],
        bounds_checks: bool,
    ) -> Result<Arc<Kernel>> {
        let variant = Variant {
            source,
            entry,
            consts,
            replace: &[],
            enable_f16: false,
        };
        let checks = wgpu::ShaderRuntimeChecks {
            bounds_checks,
            force_loop_bounding: false,
            ..wgpu::ShaderRuntimeChecks::checked()
        };
        self.compile(variant, checks).await
    }

    async fn compile(&self, variant: Variant<'_>, checks: wgpu::ShaderRuntimeChecks) -> Result<Arc<Kernel>> {
        let Variant {
            source,
            entry,
            consts,
            replace,
            enable_f16,
        } = variant;
        let bounded = checks.force_loop_bounding;
        let mut key = format!(
            "{:p}/{entry}/{enable_f16}/{bounded}/{}",
            source.as_ptr(),
            checks.bounds_checks
        );
        for (k, v) in consts.iter().chain(replace) {
            key.push_str(&format!("/{k}={v}"));
        }
        if let Some(p) = self.pipelines.lock().map_err(|_| GpuError::Poisoned)?.get(&key) {
            return Ok(p.clone());
        }
        let mut code = String::new();
        if enable_f16 {
            code.push_str("enable f16;\n");
        }
        for (name, value) in consts {
            code.push_str(&format!("const {name} = {value};\n"));
        }
        let mut body = source.to_string();
        for (from, to) in replace {
            body = body.replace(from, to);
        }
        code.push_str(&body);
        let scope = self.device.push_error_scope(wgpu::ErrorFilter::Validation);
        let desc = wgpu::ShaderModuleDescriptor {
            label: Some(entry),
            source: wgpu::ShaderSource::Wgsl(code.into()),
        };
        let module = if bounded && checks.bounds_checks {
            self.device.create_shader_module(desc)
        } else {
            // SAFETY: the callers of `pipeline_unbounded` and
            // `pipeline_unchecked` promise what the checks they drop guard.
            unsafe { self.device.create_shader_module_trusted(desc, checks) }
        };
        let pipeline = self.device.create_compute_pipeline(&wgpu::ComputePipelineDescriptor {
            label: Some(entry),
            layout: None,
            module: &module,
            entry_point: Some(entry),
            compilation_options: Default::default(),
            cache: self.cache(),
        });
        if let Some(e) = scope.pop().await {
            return Err(GpuError::Shader(format!("{entry}: {e}")));
        }
        let p = Arc::new(Kernel {
            pipe: pipeline,
            name: entry.to_string(),
        });
        self.pipelines
            .lock()
            .map_err(|_| GpuError::Poisoned)?
            .insert(key, p.clone());
        Ok(p)
    }

    /// A storage buffer holding `bytes` (at least 16 bytes; padded to 4).
    pub fn storage(&self, label: &str, bytes: &[u8]) -> wgpu::Buffer {
        let usage = wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC;
        self.count_upload(bytes.len());
        if bytes.len() >= 16 && bytes.len().is_multiple_of(4) {
            return self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some(label),
                contents: bytes,
                usage,
            });
        }
        let mut padded = bytes.to_vec();
        padded.resize(bytes.len().max(16).next_multiple_of(4), 0);
        self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
            label: Some(label),
            contents: &padded,
            usage,
        })
    }

    /// Writes `bytes` into `buf` at `offset` in slices of at most
    /// [`UPLOAD_SLICE`] bytes with a submit after each, waiting (natively)
    /// for the slice before the previous one: at most two slices are
    /// staged at a time, whatever the size of the upload.
    pub fn upload(&self, buf: &wgpu::Buffer, offset: u64, bytes: &[u8]) -> Result<()> {
        if bytes.len() <= UPLOAD_SLICE {
            self.write(buf, offset, bytes);
            return Ok(());
        }
        #[cfg(not(target_arch = "wasm32"))]
        let mut previous: Option<wgpu::SubmissionIndex> = None;
        for (i, slice) in bytes.chunks(UPLOAD_SLICE).enumerate() {
            self.write(buf, offset + (i * UPLOAD_SLICE) as u64, slice);
            let _index = self.queue.submit([]);
            #[cfg(not(target_arch = "wasm32"))]
            {
                if let Some(prev) = previous.replace(_index) {
                    self.wait(Some(prev))?;
                }
            }
        }
        Ok(())
    }

    /// Waits for `submission` (or everything submitted) at most
    /// [`wait_limit`]; a device that takes longer is an error (the caller
    /// falls back to the CPU) rather than a hang.
    #[cfg(not(target_arch = "wasm32"))]
    pub fn wait(&self, submission: Option<wgpu::SubmissionIndex>) -> Result<()> {
        self.device
            .poll(wgpu::PollType::Wait {
                submission_index: submission,
                timeout: Some(wait_limit()),
            })
            .map(|_| ())
            .map_err(|e| GpuError::Device(format!("waiting for the device: {e}")))
    }

    /// A storage buffer of at least `size` bytes whose contents are
    /// undefined (every byte a kernel reads must have been written first):
    /// one given back by [`Gpu::recycle`] when one of between `size` and
    /// twice that (within one binding) is free, else a new one. Large per-call buffers (score
    /// blocks of hundreds of MiB) are then allocated once, not per call.
    pub fn scratch(&self, label: &str, size: u64) -> wgpu::Buffer {
        let size = size.max(16).next_multiple_of(4);
        // Never larger than one binding unless `size` itself is.
        let most = size.saturating_mul(2).min(self.max_binding()).max(size);
        self.pool.take(size, most).unwrap_or_else(|| self.zeroed(label, size))
    }

    /// Gives scratch buffers back once the work that used them has
    /// completed (after the read-back that waited for it). The pool keeps
    /// at most [`POOL_BYTES`], dropping the oldest beyond.
    pub fn recycle(&self, bufs: impl IntoIterator<Item = wgpu::Buffer>) {
        self.pool.keep(bufs);
    }

    /// A zeroed storage buffer of `size` bytes (at least 16).
    pub fn zeroed(&self, label: &str, size: u64) -> wgpu::Buffer {
        self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some(label),
            size: size.max(16).next_multiple_of(4),
            usage: wgpu::BufferUsages::STORAGE | wgpu::BufferUsages::COPY_DST | wgpu::BufferUsages::COPY_SRC,
            mapped_at_creation: false,
        })
    }

    /// A uniform buffer holding `bytes` (a multiple of 16): a free one of
    /// that size when there is one, else a new one. It stays reserved
    /// until [`Gpu::end_operation`]; the write reaches the device before
    /// the next submission, and queue order keeps it after every earlier
    /// one, so a buffer freed by a finished operation is never rewritten
    /// under work that still reads it.
    pub fn uniform(&self, bytes: &[u8]) -> wgpu::Buffer {
        let size = bytes.len() as u64;
        let Ok(mut pool) = self.uniforms.lock() else {
            self.count_upload(bytes.len());
            return self.device.create_buffer_init(&wgpu::util::BufferInitDescriptor {
                label: Some("params"),
                contents: bytes,
                usage: wgpu::BufferUsages::UNIFORM,
            });
        };
        let buf = match pool.free.iter().position(|b| b.size() == size) {
            Some(i) => pool.free.swap_remove(i),
            None => self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("params"),
                size,
                usage: wgpu::BufferUsages::UNIFORM | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            }),
        };
        self.write(&buf, 0, bytes);
        pool.in_use.push(buf.clone());
        buf
    }

    /// Ends an operation: the uniform buffers it took become free for the
    /// next (at most [`FREE_UNIFORMS`] kept), and the pipeline cache is
    /// saved if it compiled a new kernel.
    pub fn end_operation(&self) {
        if let Ok(mut pool) = self.uniforms.lock() {
            let used = std::mem::take(&mut pool.in_use);
            pool.free.extend(used);
            pool.free.truncate(FREE_UNIFORMS);
        }
        self.save_pipeline_cache();
    }

    /// A bind group of `pipeline`'s group 0 with `(binding, buffer)` entries.
    pub fn bind(&self, pipeline: &wgpu::ComputePipeline, entries: &[(u32, &wgpu::Buffer)]) -> wgpu::BindGroup {
        let layout = pipeline.get_bind_group_layout(0);
        let entries: Vec<wgpu::BindGroupEntry<'_>> = entries
            .iter()
            .map(|(binding, buf)| wgpu::BindGroupEntry {
                binding: *binding,
                resource: buf.as_entire_binding(),
            })
            .collect();
        self.device.create_bind_group(&wgpu::BindGroupDescriptor {
            label: None,
            layout: &layout,
            entries: &entries,
        })
    }

    pub fn encoder(&self) -> wgpu::CommandEncoder {
        self.device
            .create_command_encoder(&wgpu::CommandEncoderDescriptor { label: Some("dentate") })
    }

    /// Records one dispatch of `groups` workgroups (timed when timing is on).
    pub fn dispatch(
        &self,
        enc: &mut wgpu::CommandEncoder,
        pipeline: &Kernel,
        bind: &wgpu::BindGroup,
        groups: (u32, u32),
    ) {
        if groups.0 == 0 || groups.1 == 0 {
            return;
        }
        let mut guard = self.timer.lock().ok();
        let timed = guard.as_mut().and_then(|g| g.as_mut()).and_then(|t| {
            if t.pending.len() as u32 >= TIMED_PASSES {
                t.untimed += 1;
                return None;
            }
            let i = t.pending.len() as u32;
            t.pending.push(pipeline.name.clone());
            Some((t, i))
        });
        let writes = timed.as_ref().map(|(t, i)| wgpu::ComputePassTimestampWrites {
            query_set: &t.set,
            beginning_of_pass_write_index: Some(2 * i),
            end_of_pass_write_index: Some(2 * i + 1),
        });
        let mut pass = enc.begin_compute_pass(&wgpu::ComputePassDescriptor {
            label: None,
            timestamp_writes: writes,
        });
        pass.set_pipeline(pipeline);
        pass.set_bind_group(0, bind, &[]);
        pass.dispatch_workgroups(groups.0, groups.1, 1);
    }

    /// Submits `enc`, then copies `size` bytes of `buf` from `offset` back
    /// to the host and waits for them.
    pub async fn submit_and_read(
        &self,
        enc: wgpu::CommandEncoder,
        buf: &wgpu::Buffer,
        offset: u64,
        size: u64,
    ) -> Result<Vec<u8>> {
        self.submit_read(enc, buf, offset, size)?.read(self).await
    }

    /// Submits `enc` with a copy of `size` bytes of `buf` from `offset`
    /// into a read-back buffer, and returns without waiting: the host can
    /// record the next batch while the device runs this one; then
    /// [`ReadBack::read`].
    pub fn submit_read(
        &self,
        mut enc: wgpu::CommandEncoder,
        buf: &wgpu::Buffer,
        offset: u64,
        size: u64,
    ) -> Result<ReadBack> {
        let size4 = size.next_multiple_of(4).max(4);
        let staging = self.readback_buffer(size4);
        enc.copy_buffer_to_buffer(buf, offset, &staging, 0, size4);
        let stamps = self.resolve_timestamps(&mut enc)?;
        let _submission = self.queue.submit([enc.finish()]);
        let rx = map_read(&staging);
        let stamps = stamps.map(|(b, kernels)| {
            let rx = map_read(&b);
            (b, rx, kernels)
        });
        Ok(ReadBack {
            staging,
            rx,
            len: size as usize,
            stamps,
            #[cfg(not(target_arch = "wasm32"))]
            submission: _submission,
        })
    }

    /// A mappable buffer of at least `size` bytes: a read one of between
    /// `size` and twice that when there is one, else a new one.
    fn readback_buffer(&self, size: u64) -> wgpu::Buffer {
        self.readbacks.take(size, 2 * size).unwrap_or_else(|| {
            self.device.create_buffer(&wgpu::BufferDescriptor {
                label: Some("read-back"),
                size,
                usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
                mapped_at_creation: false,
            })
        })
    }

    /// Resolves the pending timestamp pairs into a mappable buffer.
    fn resolve_timestamps(&self, enc: &mut wgpu::CommandEncoder) -> Result<Option<(wgpu::Buffer, Vec<String>)>> {
        let mut guard = self.timer.lock().map_err(|_| GpuError::Poisoned)?;
        let Some(t) = guard.as_mut() else {
            return Ok(None);
        };
        if t.pending.is_empty() {
            return Ok(None);
        }
        let n = t.pending.len() as u32;
        let bytes = 16 * u64::from(n);
        enc.resolve_query_set(&t.set, 0..2 * n, &t.resolve, 0);
        let read = self.device.create_buffer(&wgpu::BufferDescriptor {
            label: Some("timestamps read-back"),
            size: bytes,
            usage: wgpu::BufferUsages::MAP_READ | wgpu::BufferUsages::COPY_DST,
            mapped_at_creation: false,
        });
        enc.copy_buffer_to_buffer(&t.resolve, 0, &read, 0, bytes);
        Ok(Some((read, std::mem::take(&mut t.pending))))
    }

    /// Adds resolved timestamp pairs (`ticks`, two per kernel in
    /// `kernels`) to the totals of their kernels.
    fn add_timestamps(&self, ticks: &[u64], kernels: Vec<String>) -> Result<()> {
        let period = f64::from(self.queue.get_timestamp_period()) * 1e-9;
        let mut guard = self.timer.lock().map_err(|_| GpuError::Poisoned)?;
        let Some(t) = guard.as_mut() else {
            return Ok(());
        };
        let (mut first, mut last) = (u64::MAX, 0u64);
        for (pair, kernel) in ticks.chunks_exact(2).zip(kernels) {
            let (a, b) = (pair[0], pair[1]);
            first = first.min(a);
            last = last.max(b);
            let secs = b.saturating_sub(a) as f64 * period;
            match t.totals.iter_mut().find(|k| k.kernel == kernel) {
                Some(k) => {
                    k.dispatches += 1;
                    k.seconds += secs;
                }
                None => t.totals.push(KernelTime {
                    kernel,
                    dispatches: 1,
                    seconds: secs,
                }),
            }
        }
        if last > first {
            t.span += (last - first) as f64 * period;
        }
        Ok(())
    }

    /// Submits `enc` without reading anything back.
    pub fn submit(&self, enc: wgpu::CommandEncoder) {
        self.queue.submit([enc.finish()]);
    }
}

/// A pending map of a buffer for reading: answers once the device has
/// finished with the buffer.
type Mapped = futures_channel::oneshot::Receiver<std::result::Result<(), wgpu::BufferAsyncError>>;

/// Starts mapping `buf` for reading.
fn map_read(buf: &wgpu::Buffer) -> Mapped {
    let (tx, rx) = futures_channel::oneshot::channel();
    buf.map_async(wgpu::MapMode::Read, .., move |r| {
        let _ = tx.send(r);
    });
    rx
}

/// A read-back in flight ([`Gpu::submit_read`]).
pub(crate) struct ReadBack {
    staging: wgpu::Buffer,
    rx: Mapped,
    len: usize,
    stamps: Option<(wgpu::Buffer, Mapped, Vec<String>)>,
    #[cfg(not(target_arch = "wasm32"))]
    submission: wgpu::SubmissionIndex,
}

impl ReadBack {
    /// Waits for this submission alone (natively: not for later ones, which
    /// keep the device busy) and returns the bytes.
    pub async fn read(self, gpu: &Gpu) -> Result<Vec<u8>> {
        // Natively the callbacks run inside poll (one wait serves both
        // buffers); in the browser the event loop runs them and the awaits
        // below yield to it.
        #[cfg(not(target_arch = "wasm32"))]
        gpu.wait(Some(self.submission))?;
        let out = take_mapped(&self.staging, self.rx, self.len).await?;
        // Read and unmapped: the next call may map it again.
        gpu.readbacks.keep([self.staging]);
        if let Some((b, rx, kernels)) = self.stamps {
            let ticks: Vec<u64> = bytemuck::pod_collect_to_vec(&take_mapped(&b, rx, b.size() as usize).await?);
            gpu.add_timestamps(&ticks, kernels)?;
        }
        Ok(out)
    }
}

/// The first `len` bytes of `buf` once `mapped` answers; unmaps it.
async fn take_mapped(buf: &wgpu::Buffer, mapped: Mapped, len: usize) -> Result<Vec<u8>> {
    mapped
        .await
        .map_err(|_| GpuError::Device("the read-back was dropped".into()))?
        .map_err(|e| GpuError::Device(format!("map: {e}")))?;
    let view = buf
        .get_mapped_range(..)
        .map_err(|e| GpuError::Device(format!("mapped range: {e}")))?;
    let out = view[..len].to_vec();
    drop(view);
    buf.unmap();
    Ok(out)
}

/// Bytes of scratch buffers kept for reuse ([`Gpu::recycle`]).
pub(crate) const POOL_BYTES: u64 = 1 << 30;

/// Bytes of read-back buffers kept for reuse.
const READBACK_BYTES: u64 = 256 << 20;

/// Buffers given back for reuse, at most `max_bytes` of them (the oldest
/// dropped beyond): scratch storage ([`Gpu::scratch`]) and read-back
/// buffers.
struct BufferPool {
    free: Mutex<Vec<wgpu::Buffer>>,
    max_bytes: u64,
}

impl BufferPool {
    fn new(max_bytes: u64) -> Self {
        BufferPool {
            free: Mutex::new(Vec::new()),
            max_bytes,
        }
    }

    /// A free buffer of between `least` and `most` bytes, if there is one.
    fn take(&self, least: u64, most: u64) -> Option<wgpu::Buffer> {
        let mut free = self.free.lock().ok()?;
        let i = free.iter().position(|b| b.size() >= least && b.size() <= most)?;
        Some(free.swap_remove(i))
    }

    /// Gives `bufs` back (once nothing on the device uses them any more).
    fn keep(&self, bufs: impl IntoIterator<Item = wgpu::Buffer>) {
        let Ok(mut free) = self.free.lock() else { return };
        free.extend(bufs);
        let mut total: u64 = free.iter().map(wgpu::Buffer::size).sum();
        while total > self.max_bytes && !free.is_empty() {
            total -= free.remove(0).size();
        }
    }
}

/// Free uniform buffers kept for reuse ([`Gpu::end_operation`]).
const FREE_UNIFORMS: usize = 4096;

/// Uniform buffers: those the current operation took, and free ones.
#[derive(Default)]
struct UniformPool {
    in_use: Vec<wgpu::Buffer>,
    free: Vec<wgpu::Buffer>,
}

/// The best adapter for the unit tests that need a device; `None` (skip)
/// under `DENTATE_GPU_TESTS=skip`; a machine without one fails them, as
/// the conformance suite does.
#[cfg(all(test, not(target_arch = "wasm32")))]
pub(crate) fn test_adapter() -> Option<wgpu::Adapter> {
    if std::env::var("DENTATE_GPU_TESTS").is_ok_and(|v| v == "skip") {
        return None;
    }
    let adapter = enumerate().into_iter().next();
    assert!(
        adapter.is_some(),
        "no GPU adapter (install mesa-vulkan-drivers or set DENTATE_GPU_TESTS=skip)"
    );
    adapter
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    /// A small kernel of its own, compiled into `gpu`'s pipeline cache.
    async fn compile(gpu: &Gpu) -> Result<Arc<Kernel>> {
        const SHADER: &str = "@group(0) @binding(0) var<storage, read_write> v: array<u32>;
@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) id: vec3<u32>) {
    v[id.x] = id.x * 3u;
}
";
        gpu.pipeline(SHADER, "main", &[], &[], false).await
    }

    /// A fresh directory under the system's temporary one.
    fn temp_dir(tag: &str) -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("dentate-plc-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    /// The cache is saved after kernels are compiled, seeds the next
    /// device, and a damaged file is ignored without failing anything.
    #[test]
    fn pipeline_cache_persists_and_survives_damage() {
        let Some(adapter) = test_adapter() else {
            return;
        };
        if !adapter.features().contains(wgpu::Features::PIPELINE_CACHE) {
            eprintln!("{}: no pipeline cache on this platform", adapter.get_info().name);
            return;
        }
        let dir = temp_dir("persist");
        let open = || pollster::block_on(Gpu::open(&adapter, Some(dir.clone()))).expect("device opens");
        let gpu = open();
        let cache = gpu.pipeline_cache.as_ref().expect("Vulkan has a pipeline cache");
        assert_eq!(cache.loaded, 0, "a fresh directory has no cache yet");
        assert_eq!(gpu.save_pipeline_cache(), 0, "nothing compiled, nothing saved");
        pollster::block_on(compile(&gpu)).expect("the kernel compiles");
        let written = gpu.save_pipeline_cache();
        assert!(
            written > crate::pipecache::HEADER,
            "compiling a kernel gives the cache data to save"
        );
        assert_eq!(gpu.save_pipeline_cache(), 0, "saved once per change");
        let path = cache.path().to_path_buf();
        assert_eq!(std::fs::metadata(&path).unwrap().len() as usize, written);
        drop(gpu);

        let again = open();
        assert_eq!(
            again.pipeline_cache.as_ref().unwrap().loaded,
            written - crate::pipecache::HEADER,
            "the next device starts from the saved data"
        );
        pollster::block_on(compile(&again)).expect("the kernel compiles from the cache");
        drop(again);

        let mut bytes = std::fs::read(&path).unwrap();
        let last = bytes.len() - 1;
        bytes[last] ^= 0x55;
        std::fs::write(&path, &bytes).unwrap();
        let damaged = open();
        assert_eq!(
            damaged.pipeline_cache.as_ref().unwrap().loaded,
            0,
            "a damaged file is not used"
        );
        pollster::block_on(compile(&damaged)).expect("still compiles");
        assert!(
            damaged.save_pipeline_cache() > crate::pipecache::HEADER,
            "and is replaced by a whole one"
        );
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An operation's uniform buffers are distinct; the next operation
    /// reuses them, by size.
    #[test]
    fn uniforms_are_reused_after_the_operation() {
        let Some(adapter) = test_adapter() else {
            return;
        };
        let gpu = pollster::block_on(Gpu::open(&adapter, None)).expect("device opens");
        let a = gpu.uniform(&[1u8; 16]);
        let b = gpu.uniform(&[2u8; 16]);
        assert_ne!(a, b, "one operation's parameters never share a buffer");
        gpu.end_operation();
        let c = gpu.uniform(&[3u8; 16]);
        let d = gpu.uniform(&[4u8; 16]);
        let e = gpu.uniform(&[5u8; 32]);
        assert!(
            (c == a || c == b) && (d == a || d == b) && c != d,
            "the next operation reuses them"
        );
        assert!(e != a && e != b && e.size() == 32, "a buffer of another size is new");
    }
}

/// Bytes of one slice of an upload ([`Gpu::upload`]).
pub(crate) const UPLOAD_SLICE: usize = 64 << 20;

/// How long a native call waits for the device before giving up on it:
/// `DENTATE_GPU_TIMEOUT_S` seconds, 600 by default (a software adapter
/// takes minutes on large batches; a real GPU, milliseconds).
#[cfg(not(target_arch = "wasm32"))]
pub(crate) fn wait_limit() -> std::time::Duration {
    let secs = std::env::var("DENTATE_GPU_TIMEOUT_S")
        .ok()
        .and_then(|v| v.trim().parse::<u64>().ok())
        .filter(|&s| s > 0)
        .unwrap_or(600);
    std::time::Duration::from_secs(secs)
}

/// Runs `f` inside validation and out-of-memory error scopes of `device`;
/// an error either scope caught becomes a [`GpuError`].
pub(crate) async fn scoped<T>(device: &wgpu::Device, f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    let oom = device.push_error_scope(wgpu::ErrorFilter::OutOfMemory);
    let validation = device.push_error_scope(wgpu::ErrorFilter::Validation);
    let out = f.await;
    let v = validation.pop().await;
    let o = oom.pop().await;
    if let Some(e) = v {
        return Err(GpuError::Validation(e.to_string()));
    }
    if let Some(e) = o {
        return Err(GpuError::OutOfMemory(e.to_string()));
    }
    out
}

/// Little-endian bytes of 32-bit words (uniform blocks).
pub(crate) fn words(w: &[u32]) -> Vec<u8> {
    bytemuck::cast_slice(w).to_vec()
}
