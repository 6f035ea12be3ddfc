//! The TOML configuration file of `dentate serve` and `dentate mcp`.
//!
//! Every key is optional; flags override environment variables, which
//! override the file, which overrides the defaults:
//!
//! ```toml
//! dir = "/var/lib/dentate"     # memory directory (DENTATE_DIR)
//! bind = "127.0.0.1:7700"      # address (DENTATE_BIND)
//! pipelines = ["rag"]          # rag, hema, nemori, amory, premem (DENTATE_PIPELINES, comma-separated)
//! embedder = "hash"            # hash[:DIM], minilm[:DIR], openai:MODEL (DENTATE_EMBEDDER)
//! slots = 4                    # concurrent operations
//! workers = 2                  # ingest workers
//! queue = 1024                 # ingest jobs that may wait before appends get 429
//! loaded_users = 256           # users whose indexes one slot keeps in memory
//! save_after_secs = 30         # how long changed index files may stay unwritten
//! shutdown_grace_secs = 30     # how long shutdown waits for running ingests
//! tenant = "default"           # the tenant `dentate mcp` (stdio) acts for
//!
//! [llm]                        # an OpenAI-compatible model for LLM pipelines
//! url = "http://127.0.0.1:8080/v1"
//! model = "qwen2.5-1.5b-instruct"
//! key_env = "OPENAI_API_KEY"
//! ```

use crate::error::{Result, ServeError};
use serde::Deserialize;
use std::path::{Path, PathBuf};

/// A language model for the pipelines that use one.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    /// Base URL of an OpenAI-compatible server.
    pub url: String,
    /// Model name.
    pub model: String,
    /// Environment variable holding the API key.
    #[serde(default)]
    pub key_env: Option<String>,
}

/// The configuration file's contents (see the module docs).
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    /// Memory directory.
    pub dir: Option<PathBuf>,
    /// Store location (`sqlite:DIR` or a `postgres://` URL).
    pub store: Option<String>,
    /// Address to listen on.
    pub bind: Option<String>,
    /// Pipelines.
    pub pipelines: Option<Vec<String>>,
    /// Embedder spec.
    pub embedder: Option<String>,
    /// Concurrent operations.
    pub slots: Option<usize>,
    /// Ingest workers.
    pub workers: Option<usize>,
    /// Ingest queue length.
    pub queue: Option<usize>,
    /// Users kept loaded per slot.
    pub loaded_users: Option<usize>,
    /// Seconds a user's changed index files may stay unwritten.
    pub save_after_secs: Option<u64>,
    /// Shutdown grace, seconds.
    pub shutdown_grace_secs: Option<u64>,
    /// The tenant of `dentate mcp`.
    pub tenant: Option<String>,
    /// Language model.
    pub llm: Option<LlmConfig>,
}

impl FileConfig {
    /// Reads and parses a TOML file; unknown keys are errors.
    pub fn load(path: &Path) -> Result<FileConfig> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| ServeError::BadRequest(format!("config {}: {e}", path.display())))?;
        FileConfig::parse(&text).map_err(|e| ServeError::BadRequest(format!("config {}: {e}", path.display())))
    }

    /// Parses TOML text.
    pub fn parse(text: &str) -> Result<FileConfig> {
        toml::from_str(text).map_err(|e| ServeError::BadRequest(e.to_string()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_documented_file_parses_and_typos_are_errors() {
        let doc = include_str!("config.rs");
        let toml: String = doc
            .lines()
            .skip_while(|l| !l.starts_with("//! ```toml"))
            .skip(1)
            .take_while(|l| !l.starts_with("//! ```"))
            .map(|l| l.trim_start_matches("//!").trim_start().to_string() + "\n")
            .collect();
        let c = FileConfig::parse(&toml).unwrap();
        assert_eq!(c.bind.as_deref(), Some("127.0.0.1:7700"));
        assert_eq!(c.pipelines, Some(vec!["rag".to_string()]));
        assert_eq!(c.llm.unwrap().model, "qwen2.5-1.5b-instruct");
        assert!(FileConfig::parse("bnid = \"x\"").is_err());
        assert!(FileConfig::parse("slots = \"four\"").is_err());
    }
}
