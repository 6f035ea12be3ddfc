#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub use dentate_core::*;

/// Embedders: text to vectors (`dentate-embed`).
pub use dentate_embed as embed;

/// The memory layer: store, LLM client, HEMA and RAG pipelines, LoCoMo
/// evaluation (`dentate-memory`).
pub use dentate_memory as memory;
