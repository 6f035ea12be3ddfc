//! Client for OpenAI-compatible `/v1/embeddings` endpoints.

use crate::http::{HttpFailure, JsonClient, RetryPolicy, api_key, check_url};
use crate::{EmbedError, Embedder, Result, normalize_rows};
use std::time::Duration;

/// Settings of [`OpenAiEmbedder`].
#[derive(Debug, Clone)]
pub struct OpenAiConfig {
    /// Base URL up to and including `/v1`, e.g. `https://api.openai.com/v1`
    /// or `http://127.0.0.1:8080/v1`.
    pub base_url: String,
    /// Model name sent with each request.
    pub model: String,
    /// Name of the environment variable holding the API key (none is sent
    /// when unset or empty, as local servers expect).
    pub api_key_env: String,
    /// Output dimension; `None` asks the server once, with a one-text request.
    pub dim: Option<usize>,
    /// Texts per request.
    pub batch_size: usize,
    /// Whole-request timeout.
    pub timeout: Duration,
    /// Retries after the first attempt, on 429, 5xx and transport errors.
    pub max_retries: u32,
    /// First backoff; doubled per retry, capped at 8 s. A `Retry-After`
    /// header (seconds) from the server takes precedence.
    pub backoff: Duration,
}

impl OpenAiConfig {
    /// Defaults for `model` at `base_url`: key from `OPENAI_API_KEY`, 64
    /// texts per request, 60 s timeout, 4 retries from 500 ms.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        OpenAiConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key_env: "OPENAI_API_KEY".into(),
            dim: None,
            batch_size: 64,
            timeout: Duration::from_secs(60),
            max_retries: 4,
            backoff: Duration::from_millis(500),
        }
    }
}

/// Embeds through an OpenAI-compatible server. Output rows are
/// re-normalised (not every server returns unit vectors).
#[derive(Debug)]
pub struct OpenAiEmbedder {
    cfg: OpenAiConfig,
    url: String,
    dim: usize,
    client: JsonClient,
}

impl OpenAiEmbedder {
    /// Connects: validates the settings and, when `dim` is not given, asks
    /// the server for one embedding to learn it.
    pub fn connect(cfg: OpenAiConfig) -> Result<Self> {
        if cfg.batch_size == 0 {
            return Err(EmbedError::Config {
                name: "batch_size",
                reason: "must be at least 1".into(),
            });
        }
        check_url(&cfg.base_url).map_err(|reason| EmbedError::Config {
            name: "base_url",
            reason,
        })?;
        let client = JsonClient::new(RetryPolicy {
            timeout: cfg.timeout,
            max_retries: cfg.max_retries,
            backoff: cfg.backoff,
        });
        let url = format!("{}/embeddings", cfg.base_url.trim_end_matches('/'));
        let mut e = OpenAiEmbedder {
            dim: cfg.dim.unwrap_or(0),
            cfg,
            url,
            client,
        };
        if e.dim == 0 {
            let v = e.request(&["dimension probe"], None)?;
            e.dim = v.len();
        }
        Ok(e)
    }

    /// One request (with retries) for `texts`; returns the raw rows.
    fn request(&self, texts: &[&str], dim: Option<usize>) -> Result<Vec<f32>> {
        let body = serde_json::json!({ "model": self.cfg.model, "input": texts });
        let key = api_key(&self.cfg.api_key_env);
        match self.client.post(&self.url, &body, key.as_deref()) {
            Ok(text) => self.parse(&text, texts.len(), dim),
            Err(HttpFailure::Status { status, body, .. }) => Err(EmbedError::Http {
                status,
                url: self.url.clone(),
                body,
            }),
            Err(HttpFailure::Transport { attempts, reason }) => Err(EmbedError::Transport {
                url: self.url.clone(),
                attempts,
                reason,
            }),
        }
    }

    /// Checks and flattens `{"data": [{"index": i, "embedding": [...]}, ...]}`.
    fn parse(&self, text: &str, n: usize, dim: Option<usize>) -> Result<Vec<f32>> {
        let bad = |reason: String| EmbedError::Malformed {
            url: self.url.clone(),
            reason,
        };
        let v: serde_json::Value = serde_json::from_str(text).map_err(|e| bad(format!("not JSON ({e})")))?;
        let data = v
            .get("data")
            .and_then(|d| d.as_array())
            .ok_or_else(|| bad("no `data` array".into()))?;
        if data.len() != n {
            return Err(bad(format!("{} embeddings for {n} inputs", data.len())));
        }
        let mut rows: Vec<Option<Vec<f32>>> = vec![None; n];
        for (pos, item) in data.iter().enumerate() {
            let idx = match item.get("index") {
                Some(i) => i
                    .as_u64()
                    .map(|i| i as usize)
                    .ok_or_else(|| bad("non-integer `index`".into()))?,
                None => pos,
            };
            let emb = item
                .get("embedding")
                .and_then(|e| e.as_array())
                .ok_or_else(|| bad(format!("item {pos} has no `embedding` array")))?;
            let row: Vec<f32> = emb
                .iter()
                .map(|x| x.as_f64().map(|f| f as f32).filter(|f| f.is_finite()))
                .collect::<Option<_>>()
                .ok_or_else(|| bad(format!("item {pos} has a non-numeric or non-finite component")))?;
            if row.is_empty() {
                return Err(bad(format!("item {pos} is empty")));
            }
            if let Some(d) = dim
                && row.len() != d
            {
                return Err(bad(format!("item {pos} has dimension {}, expected {d}", row.len())));
            }
            let slot = rows
                .get_mut(idx)
                .ok_or_else(|| bad(format!("index {idx} out of range")))?;
            if slot.replace(row).is_some() {
                return Err(bad(format!("index {idx} appears twice")));
            }
        }
        let first = rows.first().and_then(|r| r.as_ref()).map_or(0, |r| r.len());
        let mut out = Vec::with_capacity(n * first);
        for (i, r) in rows.into_iter().enumerate() {
            let r = r.ok_or_else(|| bad(format!("no embedding for input {i}")))?;
            if r.len() != first {
                return Err(bad("rows of different dimensions".into()));
            }
            out.extend(r);
        }
        Ok(out)
    }
}

impl Embedder for OpenAiEmbedder {
    fn name(&self) -> String {
        format!("openai:{}", self.cfg.model)
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<f32>> {
        let mut out = Vec::with_capacity(texts.len() * self.dim);
        for chunk in texts.chunks(self.cfg.batch_size) {
            out.extend(self.request(chunk, Some(self.dim))?);
        }
        let zero = normalize_rows(&mut out, self.dim);
        if let Some(&i) = zero.first() {
            return Err(EmbedError::Malformed {
                url: self.url.clone(),
                reason: format!("embedding {i} has zero norm"),
            });
        }
        Ok(out)
    }
}
