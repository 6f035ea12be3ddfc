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
//! Every hot kernel runs through the [`Compute`] trait ([`compute`]), which
//! reads borrowed views of the data ([`views`], [`Codebooks`]);
//! [`CpuCompute`] ([`cpu`]) is the CPU implementation (rayon + SIMD chosen
//! at run time, [`simd`]) over the row layouts of [`layout`].
//!
//! Cosine similarity is computed as an inner product of L2-normalised
//! vectors: indexes normalise on insert and on query.
#![warn(missing_docs)]

mod any_index;
pub mod backend;
pub mod codebook;
pub mod compute;
pub mod cpu;
pub mod data;
pub mod error;
pub mod fastscan;
pub mod flat;
pub mod hybrid;
pub mod index;
pub mod io;
pub mod ivfpq;
pub mod kmeans;
pub mod layout;
pub mod lexical;
pub mod opq;
pub mod pq;
pub mod rng;
mod rows;
pub mod salience;
pub mod simd;
pub mod store;
pub mod topk;
pub mod tune;
pub mod vector;
pub mod views;

pub use any_index::AnyIndex;
pub use backend::{default_compute, set_default_compute};
pub use codebook::{Codebooks, PqCodes};
pub use compute::{AsyncCompute, Compute, KMeansStep, Metric, l2_bias};
pub use cpu::CpuCompute;
pub use error::{Error, Result};
pub use flat::FlatIndex;
pub use hybrid::{DEFAULT_FUSION, Fusion, candidate_depth, fuse, hybrid_search};
pub use index::Index;
pub use io::IndexKind;
pub use ivfpq::{IvfPqConfig, IvfPqIndex, IvfSearchParams, SearchStages};
pub use kmeans::{ChooseK, Init, KMeans, KMeansConfig, choose_k, silhouette};
pub use layout::{Floats, Panels, RowMajor};
pub use lexical::{Bm25Params, Feedback, LexicalIndex};
pub use opq::{OpqConfig, OpqRotation};
pub use pq::{PqTrainConfig, ProductQuantizer};
pub use salience::{BonusForm, SalienceParams};
pub use simd::Isa;
pub use store::{RerankStore, Sq8Rows, StoreFormat};
pub use topk::{Cand, Hit, Reservoir, TopK};
pub use tune::{TuneConfig, TuneOutcome, TuneTrial, split_queries, tune_fastscan, tune_fastscan_from_base};
pub use vector::{Bitset, Precision};
pub use views::{BaseRef, InvList, InvertedRef, IvfParts, IvfPlan, PointsRef, Probe, StoreRef};
