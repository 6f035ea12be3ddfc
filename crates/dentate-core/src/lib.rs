//! # dentate-core
//!
//! The core engine of Dentate: cosine vector search for agent memory.
//!
//! - [`FlatIndex`]: exact search, f32 or f16 storage, blocked SIMD kernel.
//! - [`IvfPqIndex`]: IVF + optional OPQ + 8-bit PQ, or 4-bit PQ
//!   **fast-scan** ([`PqCodes::FastScan4`], [`fastscan`]: SIMD shuffle
//!   lookups over blocks of 32 codes), with exact re-ranking.
//! - [`KMeans`], [`silhouette`], [`choose_k`]: clustering.
//! - [`ProductQuantizer`], [`OpqRotation`]: quantizers.
//! - Deletes by tombstone, [`Index::compact`], salience-decay pruning
//!   ([`SalienceParams`], [`Index::prune_lowest`]).
//! - Crash-safe, checksummed files ([`io`]).
//!
//! Every hot kernel runs through the [`Compute`] trait; [`CpuCompute`] is the
//! CPU implementation (rayon + SIMD chosen at run time).
//!
//! Cosine similarity is computed as an inner product of L2-normalised
//! vectors: indexes normalise on insert and on query.
#![warn(missing_docs)]

pub mod compute;
pub mod data;
pub mod error;
pub mod fastscan;
pub mod flat;
pub mod hybrid;
pub mod index;
pub mod io;
pub mod ivfpq;
pub mod kmeans;
pub mod lexical;
pub mod opq;
pub mod pq;
pub mod rng;
mod rows;
pub mod salience;
pub mod simd;
pub mod topk;
pub mod tune;
pub mod vector;

pub use compute::{
    BaseRef, Compute, CpuCompute, InvList, InvertedRef, Metric, Probe, StoreRef, default_compute, set_default_compute,
};
pub use error::{Error, Result};
pub use flat::FlatIndex;
pub use hybrid::{DEFAULT_FUSION, Fusion, candidate_depth, fuse, hybrid_search};
pub use index::{AnyIndex, Index};
pub use io::IndexKind;
pub use ivfpq::{IvfParts, IvfPlan, IvfPqConfig, IvfPqIndex, IvfSearchParams, PqCodes};
pub use kmeans::{ChooseK, Init, KMeans, KMeansConfig, choose_k, silhouette};
pub use lexical::{Bm25Params, LexicalIndex};
pub use opq::{OpqConfig, OpqRotation};
pub use pq::{PqTrainConfig, ProductQuantizer};
pub use salience::{BonusForm, SalienceParams};
pub use simd::Isa;
pub use topk::{Cand, Hit, Reservoir, TopK};
pub use tune::{TuneConfig, TuneOutcome, TuneTrial, tune_fastscan};
pub use vector::{Bitset, Precision};
