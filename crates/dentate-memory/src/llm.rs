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
use std::collections::BTreeMap;
use std::sync::Mutex;
#[cfg(feature = "http")]
use std::time::Duration;
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

/// What one call asks for: the role it plays (for the per-role counters,
/// and the schema's name) and, for a role whose answer is a JSON object,
/// that object's JSON Schema.
///
/// A client that can sends the schema as a structured-output request
/// (`response_format` of type `json_schema`, which OpenAI, vLLM and
/// llama.cpp's servers accept); the answer is validated all the same.
#[derive(Debug, Clone, Copy)]
pub struct Call<'a> {
    /// The role, e.g. `nemori_episode` (`[A-Za-z0-9_-]`, at most 64).
    pub role: &'a str,
    /// The JSON Schema of the answer, or `None` for free text.
    pub schema: Option<&'a Value>,
}

impl<'a> Call<'a> {
    /// A call whose answer is free text.
    pub fn text(role: &'a str) -> Self {
        Call { role, schema: None }
    }
    /// A call whose answer is a JSON object that `schema` describes.
    pub fn json(role: &'a str, schema: &'a Value) -> Self {
        Call {
            role,
            schema: Some(schema),
        }
    }
}

/// How a JSON answer turned out ([`ask_json`] reports it to the client).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonOutcome {
    /// The first answer was valid.
    FirstValid,
    /// The first answer was not; the answer to the repair request was.
    Repaired,
    /// Neither answer was valid.
    Invalid,
}

/// Counters of one role (or of all of them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RoleStats {
    /// Completed calls (each retry of one call is not counted again).
    pub calls: u64,
    /// Calls that ended in an error.
    pub failures: u64,
    /// Prompt tokens as reported by the server's `usage`.
    pub prompt_tokens: u64,
    /// Completion tokens as reported by the server's `usage`.
    pub completion_tokens: u64,
    /// JSON answers valid at the first try.
    pub first_valid: u64,
    /// JSON answers valid after the repair request.
    pub repaired: u64,
    /// JSON answers still invalid after the repair request.
    pub invalid: u64,
    /// Wall time per call, in milliseconds, in call order.
    pub latencies_ms: Vec<f64>,
}

impl RoleStats {
    /// Latency at quantile `q` in `[0, 1]` (nearest rank), or 0 without calls.
    pub fn latency_ms(&self, q: f64) -> f64 {
        quantile(&self.latencies_ms, q)
    }

    /// What was counted since `before` (an earlier copy of these counters).
    pub fn since(&self, before: &RoleStats) -> RoleStats {
        RoleStats {
            calls: self.calls.saturating_sub(before.calls),
            failures: self.failures.saturating_sub(before.failures),
            prompt_tokens: self.prompt_tokens.saturating_sub(before.prompt_tokens),
            completion_tokens: self.completion_tokens.saturating_sub(before.completion_tokens),
            first_valid: self.first_valid.saturating_sub(before.first_valid),
            repaired: self.repaired.saturating_sub(before.repaired),
            invalid: self.invalid.saturating_sub(before.invalid),
            latencies_ms: self
                .latencies_ms
                .get(before.latencies_ms.len()..)
                .unwrap_or(&[])
                .to_vec(),
        }
    }

    /// These counters as JSON (latency quantiles, not every latency).
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "calls": self.calls,
            "failures": self.failures,
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "json_first_valid": self.first_valid,
            "json_repaired": self.repaired,
            "json_invalid": self.invalid,
            "latency_p50_ms": round1(self.latency_ms(0.5)),
            "latency_p95_ms": round1(self.latency_ms(0.95)),
        })
    }

    fn count(&mut self, ms: f64, tokens: Option<(u64, u64)>) {
        self.calls += 1;
        self.latencies_ms.push(ms);
        match tokens {
            Some((p, c)) => {
                self.prompt_tokens += p;
                self.completion_tokens += c;
            }
            None => self.failures += 1,
        }
    }

    fn note(&mut self, outcome: JsonOutcome) {
        match outcome {
            JsonOutcome::FirstValid => self.first_valid += 1,
            JsonOutcome::Repaired => self.repaired += 1,
            JsonOutcome::Invalid => self.invalid += 1,
        }
    }
}

fn round1(x: f64) -> f64 {
    (x * 10.0).round() / 10.0
}

/// Nearest-rank quantile of `v`, or 0 for an empty `v`.
fn quantile(v: &[f64], q: f64) -> f64 {
    if v.is_empty() {
        return 0.0;
    }
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    let rank = ((q.clamp(0.0, 1.0) * v.len() as f64).ceil() as usize).clamp(1, v.len());
    v[rank - 1]
}

/// Call counters of a model client: the totals, and the same per role.
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
    /// The same counters per role, with how the JSON answers turned out.
    pub roles: BTreeMap<String, RoleStats>,
    /// How JSON answers are asked for now: `None` before the first JSON
    /// call; otherwise the first of [`JsonMode`]'s ways the server took.
    pub json_mode: Option<JsonMode>,
}

/// How a client asks for a JSON answer, from the most to the least
/// constrained (every answer is validated all the same). A client starts with [`JsonMode::Schema`] and moves down,
/// for the rest of the session, when a server refuses one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum JsonMode {
    /// `response_format: {"type": "json_schema", "json_schema": {...}}`
    /// (OpenAI, vLLM, llama.cpp's `llama-server`).
    Schema,
    /// `response_format: {"type": "json_object", "schema": {...}}`
    /// (llama-cpp-python's server, which constrains decoding with it).
    ObjectWithSchema,
    /// `response_format: {"type": "json_object"}`: valid JSON, any shape;
    /// the prompt and the validator do the rest.
    Object,
    /// No `response_format` (a server that takes none of the above): the
    /// prompt asks for JSON, the validator checks it.
    Prompt,
}

impl JsonMode {
    /// The name used in reports: `json_schema`, `json_object+schema`,
    /// `json_object`.
    pub fn name(self) -> &'static str {
        match self {
            JsonMode::Schema => "json_schema",
            JsonMode::ObjectWithSchema => "json_object+schema",
            JsonMode::Object => "json_object",
            JsonMode::Prompt => "prompt",
        }
    }

    /// The next, less constrained mode.
    #[cfg(feature = "http")]
    fn next(self) -> Option<JsonMode> {
        match self {
            JsonMode::Schema => Some(JsonMode::ObjectWithSchema),
            JsonMode::ObjectWithSchema => Some(JsonMode::Object),
            JsonMode::Object => Some(JsonMode::Prompt),
            JsonMode::Prompt => None,
        }
    }

    /// The `response_format` of a call of `role` with `schema` (`None`:
    /// none is sent).
    #[cfg(feature = "http")]
    fn format(self, role: &str, schema: &Value) -> Option<Value> {
        match self {
            JsonMode::Schema => Some(serde_json::json!({
                "type": "json_schema",
                "json_schema": {"name": role, "schema": schema},
            })),
            JsonMode::ObjectWithSchema => Some(serde_json::json!({"type": "json_object", "schema": schema})),
            JsonMode::Object => Some(serde_json::json!({"type": "json_object"})),
            JsonMode::Prompt => None,
        }
    }
}

impl LlmStats {
    /// Latency at quantile `q` in `[0, 1]` (nearest rank), or 0 without calls.
    pub fn latency_ms(&self, q: f64) -> f64 {
        quantile(&self.latencies_ms, q)
    }

    /// What was counted since `before` (an earlier copy of these counters).
    pub fn since(&self, before: &LlmStats) -> LlmStats {
        let empty = RoleStats::default();
        LlmStats {
            calls: self.calls.saturating_sub(before.calls),
            failures: self.failures.saturating_sub(before.failures),
            repairs: self.repairs.saturating_sub(before.repairs),
            prompt_tokens: self.prompt_tokens.saturating_sub(before.prompt_tokens),
            completion_tokens: self.completion_tokens.saturating_sub(before.completion_tokens),
            latencies_ms: self
                .latencies_ms
                .get(before.latencies_ms.len()..)
                .unwrap_or(&[])
                .to_vec(),
            roles: self
                .roles
                .iter()
                .map(|(k, r)| (k.clone(), r.since(before.roles.get(k).unwrap_or(&empty))))
                .filter(|(_, r)| r.calls > 0 || r.first_valid + r.repaired + r.invalid > 0)
                .collect(),
            json_mode: self.json_mode,
        }
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

    /// A table with one line per role: calls, failures, JSON answers valid
    /// at once / repaired / invalid, tokens, p50/p95 latency; `per` > 0
    /// adds calls and tokens per `per` messages of `messages`.
    pub fn role_table(&self, messages: usize, per: usize) -> String {
        let mut out = format!(
            "{:<20} {:>6} {:>6} {:>6} {:>8} {:>7} {:>9} {:>9} {:>8} {:>8}",
            "role", "calls", "failed", "valid", "repaired", "invalid", "prompt", "complete", "p50 ms", "p95 ms"
        );
        let scale = |x: u64| {
            if per > 0 && messages > 0 {
                format!(" ({:.1}/{per})", x as f64 * per as f64 / messages as f64)
            } else {
                String::new()
            }
        };
        for (role, r) in &self.roles {
            out.push_str(&format!(
                "\n{:<20} {:>6} {:>6} {:>6} {:>8} {:>7} {:>9} {:>9} {:>8.0} {:>8.0}",
                role,
                r.calls,
                r.failures,
                r.first_valid,
                r.repaired,
                r.invalid,
                r.prompt_tokens,
                r.completion_tokens,
                r.latency_ms(0.5),
                r.latency_ms(0.95)
            ));
        }
        out.push_str(&format!(
            "\n{:<20} {:>6} {:>6} {:>6} {:>8} {:>7} {:>9} {:>9} {:>8.0} {:>8.0}",
            "all",
            self.calls,
            self.failures,
            self.roles.values().map(|r| r.first_valid).sum::<u64>(),
            self.roles.values().map(|r| r.repaired).sum::<u64>(),
            self.roles.values().map(|r| r.invalid).sum::<u64>(),
            self.prompt_tokens,
            self.completion_tokens,
            self.latency_ms(0.5),
            self.latency_ms(0.95)
        ));
        if per > 0 && messages > 0 {
            out.push_str(&format!(
                "\nper {per} messages: {} calls{}, {} prompt tokens{}, {} completion tokens{}",
                self.calls,
                scale(self.calls),
                self.prompt_tokens,
                scale(self.prompt_tokens),
                self.completion_tokens,
                scale(self.completion_tokens)
            ));
        }
        out
    }

    /// These counters as JSON: the totals, `per_role`, and, with
    /// `messages` > 0, calls and tokens per 100 messages.
    pub fn to_json(&self, messages: usize) -> Value {
        let all = RoleStats {
            calls: self.calls,
            failures: self.failures,
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            first_valid: self.roles.values().map(|r| r.first_valid).sum(),
            repaired: self.roles.values().map(|r| r.repaired).sum(),
            invalid: self.roles.values().map(|r| r.invalid).sum(),
            latencies_ms: self.latencies_ms.clone(),
        };
        let mut v = all.to_json();
        v["repairs"] = self.repairs.into();
        v["json_mode"] = self.json_mode.map_or(Value::Null, |m| m.name().into());
        v["per_role"] = self.roles.iter().map(|(k, r)| (k.clone(), r.to_json())).collect();
        if messages > 0 {
            let per = |x: u64| round1(x as f64 * 100.0 / messages as f64);
            v["messages"] = messages.into();
            v["per_100_messages"] = serde_json::json!({
                "calls": per(self.calls),
                "prompt_tokens": per(self.prompt_tokens),
                "completion_tokens": per(self.completion_tokens),
            });
        }
        v
    }

    /// Counts one finished call of `role` (`tokens`: prompt and
    /// completion tokens of a call that succeeded, `None` for a failure).
    pub fn count(&mut self, role: &str, ms: f64, tokens: Option<(u64, u64)>) {
        self.calls += 1;
        self.latencies_ms.push(ms);
        match tokens {
            Some((p, c)) => {
                self.prompt_tokens += p;
                self.completion_tokens += c;
            }
            None => self.failures += 1,
        }
        self.roles.entry(role.to_string()).or_default().count(ms, tokens);
    }

    /// Counts how a JSON answer of `role` turned out.
    pub fn note(&mut self, role: &str, outcome: JsonOutcome) {
        if outcome != JsonOutcome::FirstValid {
            self.repairs += 1;
        }
        self.roles.entry(role.to_string()).or_default().note(outcome);
    }
}

/// A chat-completion model.
pub trait Llm: Send + Sync {
    /// Model name, for reports and errors.
    fn name(&self) -> String;
    /// Completes a conversation for `call`; a JSON call asks the server
    /// for an object of the call's schema (`response_format`). Returns
    /// the assistant's text.
    fn chat(&self, call: &Call<'_>, messages: &[ChatMessage]) -> Result<String, LlmError>;
    /// Counters so far.
    fn stats(&self) -> LlmStats;
    /// Counts how a JSON answer turned out (called by [`ask_json`]).
    fn note_json(&self, _role: &str, _outcome: JsonOutcome) {}
}

/// The counters a client keeps for [`Llm::stats`] and [`Llm::note_json`]:
/// [`LlmStats`] behind one lock, so every client (the HTTP one, the
/// browser's JavaScript one) counts its calls the same way.
#[derive(Debug, Default)]
pub struct LlmCounters(Mutex<LlmStats>);

impl LlmCounters {
    /// Changes the counters.
    pub fn record(&self, f: impl FnOnce(&mut LlmStats)) {
        f(&mut self.0.lock().unwrap_or_else(|p| p.into_inner()));
    }

    /// Reads the counters.
    pub fn read<T>(&self, f: impl FnOnce(&LlmStats) -> T) -> T {
        f(&self.0.lock().unwrap_or_else(|p| p.into_inner()))
    }

    /// A copy of the counters ([`Llm::stats`]).
    pub fn snapshot(&self) -> LlmStats {
        self.read(LlmStats::clone)
    }

    /// Runs one call of `role`, timed and counted: `call` gives the answer
    /// with its prompt and completion tokens, or the error (a failure).
    pub fn count<T>(&self, role: &str, call: impl FnOnce() -> Result<(T, u64, u64), LlmError>) -> Result<T, LlmError> {
        let t0 = Instant::now();
        let res = call();
        let ms = t0.elapsed().as_secs_f64() * 1e3;
        self.record(|s| s.count(role, ms, res.as_ref().ok().map(|(_, p, c)| (*p, *c))));
        res.map(|(answer, _, _)| answer)
    }
}

/// The JSON object in a model's answer: the whole text, the body of a
/// single Markdown code fence around it, or, when the model wrote prose
/// around it (as the LLM-as-judge prompt invites), the one balanced
/// `{...}` span of the text that parses as an object. Raw control
/// characters inside strings (a line break a model wrote as is, which
/// JSON forbids and some grammar-constrained servers let through) are
/// escaped first. Anything else — no object, or several — is an error.
pub fn extract_json_object(content: &str) -> Result<Value, String> {
    let t = content.trim();
    let body = match t.strip_prefix("```") {
        Some(rest) => {
            let rest = rest.strip_prefix("json").unwrap_or(rest);
            rest.strip_suffix("```").ok_or("unterminated code fence")?.trim()
        }
        None => t,
    };
    match (object_in(body), escape_raw_controls(body)) {
        (Err(_), Some(fixed)) => object_in(&fixed),
        (res, _) => res,
    }
}

/// `s` with the control characters inside its JSON strings escaped, or
/// `None` when there are none.
fn escape_raw_controls(s: &str) -> Option<String> {
    let (mut in_str, mut escaped, mut changed) = (false, false, false);
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if in_str && !escaped && (c as u32) < 0x20 {
            changed = true;
            match c {
                '\n' => out.push_str("\\n"),
                '\r' => out.push_str("\\r"),
                '\t' => out.push_str("\\t"),
                c => out.push_str(&format!("\\u{:04x}", c as u32)),
            }
            continue;
        }
        match (in_str, escaped, c) {
            (true, true, _) => escaped = false,
            (true, false, '\\') => escaped = true,
            (_, false, '"') => in_str = !in_str,
            _ => {}
        }
        out.push(c);
    }
    changed.then_some(out)
}

/// The object `body` is, or the one object span in it.
fn object_in(body: &str) -> Result<Value, String> {
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

/// Asks `llm` for the JSON object of `call` (its role and schema) and
/// checks it with `validate` (which returns the typed value or says what
/// is wrong). On malformed output it sends one repair request quoting the
/// problem; a second failure is [`LlmError::Malformed`]. How the answer
/// turned out is counted per role ([`Llm::note_json`]).
pub fn ask_json<T>(
    llm: &dyn Llm,
    call: &Call<'_>,
    system: &str,
    user: &str,
    validate: impl Fn(&Value) -> Result<T, String>,
) -> Result<T, LlmError> {
    let mut messages = vec![ChatMessage::system(system), ChatMessage::user(user)];
    let first = llm.chat(call, &messages)?;
    let reason = match extract_json_object(&first).and_then(|v| validate(&v)) {
        Ok(t) => {
            llm.note_json(call.role, JsonOutcome::FirstValid);
            return Ok(t);
        }
        Err(reason) => reason,
    };
    messages.push(ChatMessage::assistant(first));
    messages.push(ChatMessage::user(format!(
        "Your reply could not be used: {reason}. Reply again with only the JSON object the instructions ask for, \
         and nothing else."
    )));
    let second = llm.chat(call, &messages);
    let checked = second.map(|second| {
        extract_json_object(&second)
            .and_then(|v| validate(&v))
            .map_err(|reason| LlmError::Malformed {
                model: llm.name(),
                reason,
                content: second.chars().take(300).collect(),
            })
    });
    match checked {
        Ok(Ok(t)) => {
            llm.note_json(call.role, JsonOutcome::Repaired);
            Ok(t)
        }
        Ok(Err(e)) => {
            llm.note_json(call.role, JsonOutcome::Invalid);
            Err(e)
        }
        Err(e) => Err(e),
    }
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
    /// Sampling seed sent with every request (`seed`), for servers that
    /// sample reproducibly with one; `None` sends none.
    pub seed: Option<u64>,
    /// Send each JSON role's schema with the request ([`JsonMode`]: as
    /// `json_schema`, or in a `json_object` for servers that take it
    /// there); a server that refuses a mode is asked in the next one for
    /// the rest of the session. Off: plain JSON (`json_object`) always.
    pub structured_outputs: bool,
}

#[cfg(feature = "http")]
impl ChatConfig {
    /// Defaults for `model` at `base_url`: key from `OPENAI_API_KEY`,
    /// temperature 0, 1,024 completion tokens, 120 s timeout, 4 retries
    /// from 1 s, no seed, structured outputs on.
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
            seed: None,
            structured_outputs: true,
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
    stats: LlmCounters,
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
            stats: LlmCounters::default(),
        })
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
impl OpenAiChat {
    /// One request with `response_format` set as `format` says (`None`:
    /// not set); the content and the prompt and completion tokens. An
    /// error answer that says the server does not take `response_format`
    /// is returned at once, not retried.
    fn send(&self, msgs: &[Value], format: Option<Value>) -> Result<(String, u64, u64), LlmError> {
        let mut body = json!({
            "model": self.cfg.model,
            "messages": msgs,
            "temperature": self.cfg.temperature,
            "max_tokens": self.cfg.max_tokens,
        });
        if let Some(seed) = self.cfg.seed {
            body["seed"] = seed.into();
        }
        let asked = format.is_some();
        if let Some(f) = format {
            body["response_format"] = f;
        }
        let key = api_key(&self.cfg.api_key_env);
        let refusal = |status: u16, text: &str| asked && format_refused(status, text);
        match self.client.post_unless(&self.url, &body, key.as_deref(), refusal) {
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
        }
    }

    /// A JSON call: in the session's [`JsonMode`], moving down a mode
    /// (for the rest of the session) each time the server refuses one.
    fn send_json(&self, msgs: &[Value], role: &str, schema: &Value) -> Result<(String, u64, u64), LlmError> {
        let mut mode = if self.cfg.structured_outputs {
            self.stats.read(|s| s.json_mode).unwrap_or(JsonMode::Schema)
        } else {
            JsonMode::Object
        };
        loop {
            match (self.send(msgs, mode.format(role, schema)), mode.next()) {
                (Err(LlmError::Http { status, body, .. }), Some(next)) if format_refused(status, &body) => {
                    mode = next;
                    self.stats.record(|s| s.json_mode = Some(mode));
                }
                (res, _) => {
                    if res.is_ok() {
                        self.stats.record(|s| {
                            s.json_mode.get_or_insert(mode);
                        });
                    }
                    return res;
                }
            }
        }
    }
}

/// Whether an error answer says the server does not take the request's
/// `response_format` (a 4xx other than 429, or a 5xx as llama-cpp-python
/// answers, whose body names `response_format` or `json_schema`), rather
/// than that the request failed for another reason.
#[cfg(feature = "http")]
fn format_refused(status: u16, body: &str) -> bool {
    let b = body.to_ascii_lowercase();
    status >= 400 && status != 429 && (b.contains("response_format") || b.contains("json_schema"))
}

#[cfg(feature = "http")]
impl Llm for OpenAiChat {
    fn name(&self) -> String {
        self.cfg.model.clone()
    }

    fn chat(&self, call: &Call<'_>, messages: &[ChatMessage]) -> Result<String, LlmError> {
        let msgs: Vec<Value> = messages
            .iter()
            .map(|m| json!({"role": m.role, "content": m.content}))
            .collect();
        self.stats.count(call.role, || match call.schema {
            Some(schema) => self.send_json(&msgs, call.role, schema),
            None => self.send(&msgs, None),
        })
    }

    fn stats(&self) -> LlmStats {
        self.stats.snapshot()
    }

    fn note_json(&self, role: &str, outcome: JsonOutcome) {
        self.stats.record(|s| s.note(role, outcome));
    }
}

/// Builders of the small JSON Schemas the roles' answers follow (the
/// subset that OpenAI's, vLLM's and llama.cpp's structured outputs all
/// take: objects, arrays, strings, integers with bounds, numbers with
/// bounds, booleans, enumerations, `null` alternatives).
pub mod schema {
    use serde_json::{Value, json};

    /// An object with `props` (name, schema) of which `required` must be
    /// present; no other properties.
    pub fn object(props: &[(&str, Value)], required: &[&str]) -> Value {
        let properties: serde_json::Map<String, Value> =
            props.iter().map(|(k, v)| ((*k).to_string(), v.clone())).collect();
        json!({
            "type": "object",
            "properties": properties,
            "required": required,
            "additionalProperties": false,
        })
    }

    /// Most characters of a name, a topic, a key ([`short`]).
    pub const SHORT: usize = 120;
    /// Most characters of a sentence-sized answer ([`text`]).
    pub const TEXT: usize = 400;
    /// Most characters of a paragraph-sized answer ([`long_text`]).
    pub const LONG: usize = 900;

    /// A non-empty string of at most `max` characters (`max` < 1,000:
    /// llama.cpp's schema-to-grammar conversions nest one rule per
    /// character of the bound, and a longer bound overflows the server's
    /// grammar parser). The bound also stops a model that repeats itself
    /// inside a string until its token limit cuts the JSON short.
    pub fn string(max: usize) -> Value {
        json!({"type": "string", "minLength": 1, "maxLength": max.clamp(1, 999)})
    }

    /// A name, a topic or a key: [`string`]`(`[`SHORT`]`)`.
    pub fn short() -> Value {
        string(SHORT)
    }

    /// A sentence or two: [`string`]`(`[`TEXT`]`)`.
    pub fn text() -> Value {
        string(TEXT)
    }

    /// A paragraph: [`string`]`(`[`LONG`]`)`.
    pub fn long_text() -> Value {
        string(LONG)
    }

    /// A string (any length, unbounded) or `null`.
    pub fn string_or_null() -> Value {
        json!({"type": ["string", "null"]})
    }

    /// A string equal to one of `values`.
    pub fn one_of(values: &[&str]) -> Value {
        json!({"type": "string", "enum": values})
    }

    /// An integer in `lo..=hi`: as an enumeration of the values when
    /// there are at most 256 of them (servers that turn a schema into a
    /// grammar honour enumerations, not every one honours bounds), as
    /// bounds otherwise.
    pub fn integer(lo: usize, hi: usize) -> Value {
        let hi = hi.max(lo);
        if hi - lo < 256 {
            json!({"type": "integer", "enum": (lo..=hi).collect::<Vec<_>>()})
        } else {
            json!({"type": "integer", "minimum": lo, "maximum": hi})
        }
    }

    /// A `YYYY-MM-DD` date string.
    pub fn date() -> Value {
        json!({"type": "string", "format": "date"})
    }

    /// A `YYYY-MM-DD` date string or `null`.
    pub fn date_or_null() -> Value {
        json!({"anyOf": [date(), {"type": "null"}]})
    }

    /// A string matching the regular expression `re` (anchored).
    pub fn matching(re: &str) -> Value {
        json!({"type": "string", "pattern": re})
    }

    /// A number in `lo..=hi`.
    pub fn number(lo: f64, hi: f64) -> Value {
        json!({"type": "number", "minimum": lo, "maximum": hi})
    }

    /// `true` or `false`.
    pub fn boolean() -> Value {
        json!({"type": "boolean"})
    }

    /// A value that matches one of `schemas`.
    pub fn any_of(schemas: &[Value]) -> Value {
        json!({"anyOf": schemas})
    }

    /// A list of `items`, at most `max` of them (`None`: no bound).
    pub fn array(items: Value, max: Option<usize>) -> Value {
        match max {
            Some(m) => json!({"type": "array", "items": items, "maxItems": m}),
            None => json!({"type": "array", "items": items}),
        }
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
        // A line break written as is inside a string is escaped; one
        // between tokens is whitespace, as JSON allows.
        let v = extract_json_object("{\"a\": \"one\ntwo\ttab\",\n \"b\": \"q\\\"\n\"}").unwrap();
        assert_eq!(v["a"], "one\ntwo\ttab");
        assert_eq!(v["b"], "q\"\n");
        assert_eq!(escape_raw_controls("{\"a\": 1}\n"), None);
    }
}
