//! Chat-completion models: the [`Llm`] trait, a client for any
//! OpenAI-compatible `/v1/chat/completions` endpoint (OpenAI, vLLM,
//! llama.cpp server, Ollama), and [`ask_json`], which asks for a JSON
//! object, parses it strictly, and retries once with a repair request
//! before giving up with a typed error.

#[cfg(feature = "http")]
use dentate_embed::http::{HttpFailure, JsonClient, RetryPolicy, api_key, check_url};
use serde_json::Value;
#[cfg(feature = "http")]
use serde_json::json;
#[cfg(feature = "http")]
use std::sync::Mutex;
#[cfg(feature = "http")]
use std::time::Duration;
#[cfg(feature = "http")]
use web_time::Instant;

/// Errors of a language-model call.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    /// A setting is invalid.
    #[error("invalid LLM setting `{name}`: {reason}")]
    Config {
        /// Setting name.
        name: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// The server answered with an error status (after retries for 429/5xx).
    #[error("HTTP {status} from {url}: {body}")]
    Http {
        /// Status code.
        status: u16,
        /// Endpoint.
        url: String,
        /// Start of the response body.
        body: String,
    },
    /// No answer (refused, timed out) after every retry.
    #[error("request to {url} failed after {attempts} attempt(s): {reason}")]
    Transport {
        /// Endpoint.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// Last failure.
        reason: String,
    },
    /// The response is not a chat completion, or its content is not the
    /// JSON the prompt asked for (after the repair retry).
    #[error("malformed answer from {model}: {reason}")]
    Malformed {
        /// Model name.
        model: String,
        /// What is wrong.
        reason: String,
        /// Start of the offending content.
        content: String,
    },
}

/// One chat message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChatMessage {
    /// `system`, `user` or `assistant`.
    pub role: &'static str,
    /// Text.
    pub content: String,
}

impl ChatMessage {
    /// A system message.
    pub fn system(content: impl Into<String>) -> Self {
        ChatMessage {
            role: "system",
            content: content.into(),
        }
    }
    /// A user message.
    pub fn user(content: impl Into<String>) -> Self {
        ChatMessage {
            role: "user",
            content: content.into(),
        }
    }
    /// An assistant message.
    pub fn assistant(content: impl Into<String>) -> Self {
        ChatMessage {
            role: "assistant",
            content: content.into(),
        }
    }
}

/// Call counters of a model client.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct LlmStats {
    /// Completed calls (each retry of one call is not counted again).
    pub calls: u64,
    /// Calls that ended in an error.
    pub failures: u64,
    /// Repair requests sent after malformed JSON.
    pub repairs: u64,
    /// Prompt tokens as reported by the server's `usage`.
    pub prompt_tokens: u64,
    /// Completion tokens as reported by the server's `usage`.
    pub completion_tokens: u64,
    /// Wall time per call, in milliseconds, in call order.
    pub latencies_ms: Vec<f64>,
}

impl LlmStats {
    /// Latency at quantile `q` in `[0, 1]` (nearest rank), or 0 without calls.
    pub fn latency_ms(&self, q: f64) -> f64 {
        let mut v = self.latencies_ms.clone();
        if v.is_empty() {
            return 0.0;
        }
        v.sort_by(f64::total_cmp);
        let rank = ((q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize).clamp(1, v.len());
        v[rank - 1]
    }

    /// A one-line report: calls, failures, repairs, tokens, p50/p95 latency.
    pub fn report(&self) -> String {
        format!(
            "{} calls ({} failed, {} repairs), {} prompt + {} completion tokens, latency p50 {:.0} ms p95 {:.0} ms",
            self.calls,
            self.failures,
            self.repairs,
            self.prompt_tokens,
            self.completion_tokens,
            self.latency_ms(0.5),
            self.latency_ms(0.95)
        )
    }
}

/// A chat-completion model.
pub trait Llm: Send + Sync {
    /// Model name, for reports and errors.
    fn name(&self) -> String;
    /// Completes a conversation; with `json`, asks the server for a JSON
    /// object (`response_format`). Returns the assistant's text.
    fn chat(&self, messages: &[ChatMessage], json: bool) -> Result<String, LlmError>;
    /// Counters so far.
    fn stats(&self) -> LlmStats;
    /// Counts a repair request (called by [`ask_json`]).
    fn note_repair(&self) {}
}

/// The JSON object in a model's answer: the whole text, the body of a
/// single Markdown code fence around it, or, when the model wrote prose
/// around it (as the LLM-as-judge prompt invites), the one balanced
/// `{...}` span of the text that parses as an object. Anything else —
/// no object, or several — is an error.
pub fn extract_json_object(content: &str) -> Result<Value, String> {
    let t = content.trim();
    let body = match t.strip_prefix("```") {
        Some(rest) => {
            let rest = rest.strip_prefix("json").unwrap_or(rest);
            rest.strip_suffix("```").ok_or("unterminated code fence")?.trim()
        }
        None => t,
    };
    match serde_json::from_str::<Value>(body) {
        Ok(v) if v.is_object() => Ok(v),
        Ok(_) => Err("the JSON is not an object".into()),
        Err(e) => {
            let spans: Vec<Value> = object_spans(body)
                .into_iter()
                .filter_map(|s| serde_json::from_str::<Value>(s).ok())
                .filter(Value::is_object)
                .collect();
            match spans.len() {
                1 => Ok(spans.into_iter().next().unwrap_or_default()),
                0 => Err(format!("not JSON ({e})")),
                n => Err(format!("{n} JSON objects in the answer, expected one")),
            }
        }
    }
}

/// Top-level balanced `{...}` spans of `s` (braces inside JSON strings
/// are skipped).
fn object_spans(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let (mut depth, mut start, mut in_str, mut escaped) = (0usize, 0usize, false, false);
    for (i, c) in s.char_indices() {
        if in_str {
            match (escaped, c) {
                (true, _) => escaped = false,
                (false, '\\') => escaped = true,
                (false, '"') => in_str = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' if depth > 0 => in_str = true,
            '{' => {
                if depth == 0 {
                    start = i;
                }
                depth += 1;
            }
            '}' if depth > 0 => {
                depth -= 1;
                if depth == 0 {
                    out.push(&s[start..=i]);
                }
            }
            _ => {}
        }
    }
    out
}

/// Asks `llm` for a JSON object and checks it with `validate` (which
/// returns the typed value or says what is wrong). On malformed output it
/// sends one repair request quoting the problem; a second failure is
/// [`LlmError::Malformed`].
pub fn ask_json<T>(
    llm: &dyn Llm,
    system: &str,
    user: &str,
    validate: impl Fn(&Value) -> Result<T, String>,
) -> Result<T, LlmError> {
    let mut messages = vec![ChatMessage::system(system), ChatMessage::user(user)];
    let first = llm.chat(&messages, true)?;
    let reason = match extract_json_object(&first).and_then(|v| validate(&v)) {
        Ok(t) => return Ok(t),
        Err(reason) => reason,
    };
    llm.note_repair();
    messages.push(ChatMessage::assistant(first));
    messages.push(ChatMessage::user(format!(
        "Your reply could not be used: {reason}. Reply again with only the JSON object the instructions ask for, \
         and nothing else."
    )));
    let second = llm.chat(&messages, true)?;
    extract_json_object(&second)
        .and_then(|v| validate(&v))
        .map_err(|reason| LlmError::Malformed {
            model: llm.name(),
            reason,
            content: second.chars().take(300).collect(),
        })
}

/// Settings of [`OpenAiChat`].
#[cfg(feature = "http")]
#[derive(Debug, Clone)]
pub struct ChatConfig {
    /// Base URL up to and including `/v1`.
    pub base_url: String,
    /// Model name.
    pub model: String,
    /// Environment variable holding the API key (none sent when unset).
    pub api_key_env: String,
    /// Sampling temperature (0 for reproducible memory building).
    pub temperature: f32,
    /// Maximum completion tokens per call.
    pub max_tokens: u32,
    /// Timeout and retries.
    pub retry: RetryPolicy,
}

#[cfg(feature = "http")]
impl ChatConfig {
    /// Defaults for `model` at `base_url`: key from `OPENAI_API_KEY`,
    /// temperature 0, 1,024 completion tokens, 120 s timeout, 4 retries
    /// from 1 s.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> Self {
        ChatConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key_env: "OPENAI_API_KEY".into(),
            temperature: 0.0,
            max_tokens: 1024,
            retry: RetryPolicy {
                timeout: Duration::from_secs(120),
                max_retries: 4,
                backoff: Duration::from_secs(1),
            },
        }
    }
}

/// Client for an OpenAI-compatible `/v1/chat/completions` endpoint
/// (feature `http`, on by default).
#[cfg(feature = "http")]
#[derive(Debug)]
pub struct OpenAiChat {
    cfg: ChatConfig,
    url: String,
    client: JsonClient,
    stats: Mutex<LlmStats>,
}

#[cfg(feature = "http")]
impl OpenAiChat {
    /// Validates the settings (no request is made).
    pub fn new(cfg: ChatConfig) -> Result<Self, LlmError> {
        check_url(&cfg.base_url).map_err(|reason| LlmError::Config {
            name: "base_url",
            reason,
        })?;
        if cfg.model.trim().is_empty() {
            return Err(LlmError::Config {
                name: "model",
                reason: "is empty".into(),
            });
        }
        if !cfg.temperature.is_finite() || cfg.temperature < 0.0 {
            return Err(LlmError::Config {
                name: "temperature",
                reason: format!("{} is not a finite non-negative number", cfg.temperature),
            });
        }
        let url = format!("{}/chat/completions", cfg.base_url.trim_end_matches('/'));
        Ok(OpenAiChat {
            client: JsonClient::new(cfg.retry.clone()),
            cfg,
            url,
            stats: Mutex::new(LlmStats::default()),
        })
    }

    fn record(&self, f: impl FnOnce(&mut LlmStats)) {
        let mut s = self.stats.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut s);
    }

    fn parse(&self, text: &str) -> Result<(String, u64, u64), LlmError> {
        let bad = |reason: String| LlmError::Malformed {
            model: self.cfg.model.clone(),
            reason,
            content: text.chars().take(300).collect(),
        };
        let v: Value = serde_json::from_str(text).map_err(|e| bad(format!("response is not JSON ({e})")))?;
        let content = v
            .pointer("/choices/0/message/content")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("no `choices[0].message.content` string".into()))?;
        let usage = |k: &str| v.pointer(&format!("/usage/{k}")).and_then(Value::as_u64).unwrap_or(0);
        Ok((content.to_string(), usage("prompt_tokens"), usage("completion_tokens")))
    }
}

#[cfg(feature = "http")]
impl Llm for OpenAiChat {
    fn name(&self) -> String {
        self.cfg.model.clone()
    }

    fn chat(&self, messages: &[ChatMessage], json: bool) -> Result<String, LlmError> {
        let msgs: Vec<Value> = messages
            .iter()
            .map(|m| json!({"role": m.role, "content": m.content}))
            .collect();
        let mut body = json!({
            "model": self.cfg.model,
            "messages": msgs,
            "temperature": self.cfg.temperature,
            "max_tokens": self.cfg.max_tokens,
        });
        if json {
            body["response_format"] = json!({"type": "json_object"});
        }
        let key = api_key(&self.cfg.api_key_env);
        let t0 = Instant::now();
        let res = match self.client.post(&self.url, &body, key.as_deref()) {
            Ok(text) => self.parse(&text),
            Err(HttpFailure::Status { status, body, .. }) => Err(LlmError::Http {
                status,
                url: self.url.clone(),
                body,
            }),
            Err(HttpFailure::Transport { attempts, reason }) => Err(LlmError::Transport {
                url: self.url.clone(),
                attempts,
                reason,
            }),
        };
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        self.record(|s| {
            s.calls += 1;
            s.latencies_ms.push(ms);
            match &res {
                Ok((_, p, c)) => {
                    s.prompt_tokens += p;
                    s.completion_tokens += c;
                }
                Err(_) => s.failures += 1,
            }
        });
        res.map(|(content, _, _)| content)
    }

    fn stats(&self) -> LlmStats {
        self.stats.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    fn note_repair(&self) {
        self.record(|s| s.repairs += 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_extraction() {
        assert_eq!(extract_json_object(" {\"a\": 1} ").unwrap()["a"], 1);
        assert_eq!(extract_json_object("```json\n{\"a\": 2}\n```").unwrap()["a"], 2);
        let v = extract_json_object("It matches. {\"label\": \"CORRECT\", \"why\": \"a } in a string\"}").unwrap();
        assert_eq!(v["label"], "CORRECT");
        assert!(extract_json_object("no object here").is_err());
        assert!(extract_json_object("[1]").is_err());
        assert!(
            extract_json_object("{\"a\": 1} and {\"b\": 2}")
                .unwrap_err()
                .contains("2 JSON objects")
        );
        assert!(extract_json_object("{broken").is_err());
    }
}
