#![doc = include_str!("../README.md")]
#![warn(missing_docs)]

pub use dentate_core::*;

/// Embedders: text to vectors (`dentate-embed`).
pub use dentate_embed as embed;
