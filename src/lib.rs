#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub use dentate_core::*;

/// Embedders: text to vectors (`dentate-embed`).
pub use dentate_embed as embed;

/// The memory layer: store, LLM client, HEMA and RAG pipelines, LoCoMo
/// evaluation (`dentate-memory`).
pub use dentate_memory as memory;

/// The wgpu compute backend (`dentate-gpu`, feature `gpu`): the same
/// kernels as WGSL compute shaders, and the choice of backend
/// (`DENTATE_BACKEND=cpu|gpu|auto`, [`gpu::install_backend`]).
#[cfg(feature = "gpu")]
pub use dentate_gpu as gpu;
