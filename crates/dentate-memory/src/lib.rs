//! # dentate-memory
//!
//! The memory layer over the Dentate engine:
//!
//! - [`Store`]: SQLite (bundled, WAL, migrations) per memory directory;
//!   raw messages are committed before processing, every item keeps its
//!   provenance (source message ids, said-at and refers-to times), users
//!   are namespaces, items can be deleted or corrected by id.
//! - [`Llm`] and [`OpenAiChat`]: any OpenAI-compatible chat endpoint, with
//!   timeouts, retries, strict JSON parsing and one repair request
//!   ([`ask_json`]); calls, tokens and latency are counted.
//! - [`Pipeline`]s: the turn-level [`Rag`] baseline, [`Hema`],
//!   [`Nemori`], [`Amory`] (narratives, consolidation, a semantic graph
//!   of triples in [`graph`]) and [`Premem`]; [`dates`] resolves relative
//!   dates.
//! - [`Memory`]: a directory, a pipeline, many users.
//! - [`locomo`]: the LoCoMo dataset and the LLM-free evidence-recall
//!   evaluation.
#![warn(missing_docs)]

pub mod amory;
pub mod context;
pub mod dates;
pub mod dump;
pub mod erase;
mod error;
pub mod eval;
pub mod graph;
pub mod hema;
pub mod input;
pub mod llm;
mod memory;
pub mod nemori;
pub mod pipeline;
pub mod premem;
pub mod rag;
pub mod sql;
pub mod store;
pub mod summarize;
pub mod text;
pub mod time;
pub mod tokens;
pub mod vecmem;

pub use amory::{Amory, AmoryConfig};
pub use dump::DumpCounts;
pub use erase::{Change, Erased, ItemRecord};
pub use error::{MemoryError, Result};
/// The LoCoMo reader and the evaluation metrics, at the paths they have
/// always had (they live in [`eval`], above the pipelines).
pub use eval::{locomo, metrics};
pub use graph::Triple;
pub use hema::{Hema, HemaConfig};
pub use llm::{
    Call, ChatMessage, JsonMode, JsonOutcome, Llm, LlmCounters, LlmError, LlmStats, RoleStats, ask_json, schema,
};
#[cfg(feature = "http")]
pub use llm::{ChatConfig, OpenAiChat};
pub use memory::{Found, IndexImages, MAX_SEARCH_DEPTH, Memory, PipelineKind};
pub use nemori::{Nemori, NemoriConfig};
pub use pipeline::{
    Composed, ContextConfig, Cut, DEFAULT_CONTEXT, DEFAULT_FUSION, Env, HASHING_FUSION, IngestReport, Packed, Packer,
    Pipeline, Retrieved, Retriever, Sayer, is_hashing_embedder,
};
pub use premem::{Premem, PrememConfig};
pub use rag::{Rag, RagConfig};
pub use store::{Item, ItemRef, ItemUpdate, Message, NewItem, NewMessage, NewTriple, Store, StoreLocation};
pub use vecmem::{VectorMemory, VectorMemoryConfig};
