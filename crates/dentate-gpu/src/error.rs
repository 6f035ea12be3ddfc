//! Errors of the GPU backend.

/// What can go wrong on the GPU path. [`crate::GpuCompute`] never lets one
/// reach a caller of the compute interface: the operation is run on the CPU
/// instead (and counted, see [`crate::GpuCompute::fallbacks`]). Choosing a
/// backend ([`crate::select_backend`]) reports them.
#[derive(Debug, thiserror::Error)]
pub enum GpuError {
    /// No adapter of the kind asked for.
    #[error("no GPU adapter: {0}")]
    NoAdapter(String),
    /// The adapter refused to open a device, or the device was lost.
    #[error("GPU device: {0}")]
    Device(String),
    /// A shader failed to compile or a pipeline to build.
    #[error("shader: {0}")]
    Shader(String),
    /// wgpu validation rejected an operation.
    #[error("validation: {0}")]
    Validation(String),
    /// The device ran out of memory.
    #[error("out of device memory: {0}")]
    OutOfMemory(String),
    /// The operation is outside what the kernels handle (e.g. k above the
    /// largest top-k list, or data above a binding limit that cannot be
    /// split); the CPU runs it.
    #[error("not on the GPU path: {0}")]
    Unsupported(String),
    /// A lock was poisoned by a panic in another thread.
    #[error("a lock of the GPU backend was poisoned")]
    Poisoned,
    /// `DENTATE_BACKEND` or a backend name is not `auto`, `cpu` or `gpu`.
    #[error("unknown backend `{0}` (expected auto, cpu or gpu)")]
    UnknownBackend(String),
}

/// Result alias of the GPU backend.
pub type Result<T> = std::result::Result<T, GpuError>;
