//! # dentate-wasm
//!
//! Dentate in the browser (and Node), through `wasm-bindgen`:
//!
//! - [`VectorIndex`]: exact and IVF-OPQ-PQ cosine indexes with batched
//!   search over `Float32Array`s, tombstone deletes, and `save()` /
//!   `VectorIndex.load()` in the native file format (a file written by the
//!   `dentate` CLI loads here and back).
//! - [`LexicalIndex`] and [`hybrid_search`]: BM25 beside the vectors, fused
//!   with the dense ranking.
//! - [`HashingEmbedder`]: the zero-download text embedder.
//! - `WebGpu` (feature `webgpu`): the compute shaders on `navigator.gpu`;
//!   `VectorIndex.searchGpu` runs exact and IVF-PQ searches there.
//! - `AgentMemory` (feature `memory`): HEMA, Nemori, Amory, PREMem or the RAG baseline
//!   over an in-memory SQLite store, snapshotted to a `Uint8Array` (for
//!   IndexedDB) and restored from one.
//! - `saveTo(name)` / `loadFrom(name)` on both, [`list_saved`],
//!   [`remove_saved`]: the page's own storage (OPFS, or IndexedDB where
//!   OPFS cannot write), kept across reloads.
//! - `initThreads` (feature `threads`, the `pkg-threads` build with wasm
//!   threads): a rayon pool on Web Workers for training and batch search,
//!   started from inside a dedicated Worker.
//!
//! Errors are thrown as JavaScript `Error`s named `DentateError` whose
//! message says what is wrong. The CPU kernels use wasm `simd128` when the
//! module is built with it (`wasm/build` does).
//!
//! Everything here is compiled for `wasm32` only; on other targets the
//! crate is empty.
#![warn(missing_docs)]
#![cfg(target_arch = "wasm32")]

mod convert;
mod embed;
#[cfg(feature = "webgpu")]
mod gpu;
mod index;
mod lexical;
#[cfg(feature = "memory")]
mod llm;
#[cfg(feature = "memory")]
mod memory;
mod persist;
#[cfg(feature = "threads")]
mod threads;

pub use embed::HashingEmbedder;
#[cfg(feature = "webgpu")]
pub use gpu::WebGpu;
pub use index::{SearchResults, VectorIndex};
pub use lexical::{LexicalIndex, hybrid_search};
#[cfg(feature = "memory")]
pub use memory::{AgentMemory, count_tokens, load_vocabulary, tokens_exact};
pub use persist::{list_saved, remove_saved, storage_backend, use_storage};
#[cfg(feature = "threads")]
pub use threads::{init_threads, threads};

use wasm_bindgen::prelude::*;

/// The crate version (`0.1.0`).
#[wasm_bindgen]
pub fn version() -> String {
    env!("CARGO_PKG_VERSION").to_string()
}

/// The SIMD path of the CPU kernels: `simd128` when the module was built
/// with it, `scalar` otherwise.
#[wasm_bindgen]
pub fn simd() -> String {
    dentate_core::Isa::active().name().to_string()
}

/// The compute backend searches run on, e.g. `cpu (simd128)`.
#[wasm_bindgen]
pub fn backend() -> String {
    dentate_core::default_compute().name()
}

/// `n` unit vectors of dimension `dim` drawn around `clusters` random
/// centres (the engine's seeded synthetic set: the same seed gives the same
/// floats here and natively), row-major in a `Float32Array`.
#[wasm_bindgen]
pub fn synthetic(n: usize, dim: usize, clusters: usize, seed: u64) -> Result<Vec<f32>, JsValue> {
    if n == 0 || dim == 0 || clusters == 0 {
        return Err(convert::err("n, dim and clusters must be at least 1"));
    }
    if n.checked_mul(dim).is_none_or(|x| x > (1 << 28)) {
        return Err(convert::err("n × dim is larger than 2^28 floats"));
    }
    if clusters.checked_mul(dim).is_none_or(|x| x > (1 << 28)) {
        return Err(convert::err("clusters × dim is larger than 2^28 floats"));
    }
    dentate_core::data::clustered(&dentate_core::data::SynthConfig {
        n,
        dim,
        clusters,
        spread: 0.8,
        seed,
    })
    .map_err(convert::err)
}
