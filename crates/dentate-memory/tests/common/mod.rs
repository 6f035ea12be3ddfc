//! Shared fixtures of the memory tests.
#![allow(dead_code)]

use dentate_embed::HashingEmbedder;
use dentate_embed::http::testing::{Reply, ScriptedServer};
use dentate_memory::{ChatConfig, NewMessage, OpenAiChat};
use std::sync::Arc;
use std::time::Duration;

/// The zero-download embedder.
pub fn embedder() -> Arc<HashingEmbedder> {
    Arc::new(HashingEmbedder::new(256).unwrap())
}

/// A message of session `s` with caller id `D{s}:{t}`, said `t` minutes
/// into day `s` of May 2023.
pub fn msg(s: u32, t: u32, speaker: &str, text: &str) -> NewMessage {
    NewMessage {
        session: format!("session_{s}"),
        speaker: speaker.into(),
        text: text.into(),
        said_at: Some(1_682_899_200 + i64::from(s) * 86_400 + i64::from(t) * 60),
        source_ref: Some(format!("D{s}:{t}")),
    }
}

/// A short conversation with distinct, retrievable facts.
pub fn conversation() -> Vec<NewMessage> {
    vec![
        msg(
            1,
            1,
            "Ann",
            "I adopted a grey cat called Pixel from the shelter last weekend.",
        ),
        msg(
            1,
            2,
            "Bob",
            "Congratulations! I am training for the Berlin marathon in September.",
        ),
        msg(
            1,
            3,
            "Ann",
            "My sister Clara is moving to Lisbon to work as an architect.",
        ),
        msg(
            2,
            1,
            "Bob",
            "I finally repaired the old blue bicycle my grandfather left me.",
        ),
        msg(
            2,
            2,
            "Ann",
            "I started learning to play the cello at the community music school.",
        ),
        msg(
            2,
            3,
            "Bob",
            "My favourite dish is the spicy lentil soup my mother cooks.",
        ),
    ]
}

/// A chat-completion answer with `content`.
pub fn chat_body(content: &str) -> String {
    serde_json::json!({
        "id": "x", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15}
    })
    .to_string()
}

/// A model client for `server` with fast retries and a short timeout.
pub fn chat(server: &ScriptedServer, timeout_ms: u64, retries: u32) -> OpenAiChat {
    let mut c = ChatConfig::new(&server.url, "test-model");
    c.api_key_env = "DENTATE_TEST_KEY_UNSET".into();
    c.retry.timeout = Duration::from_millis(timeout_ms);
    c.retry.max_retries = retries;
    c.retry.backoff = Duration::from_millis(5);
    OpenAiChat::new(c).unwrap()
}

/// A server that answers every summarizer call with a JSON summary naming
/// the request number.
pub fn summary_server(limit: usize) -> ScriptedServer {
    ScriptedServer::start(limit, |i, _| {
        Reply::ok(chat_body(&format!(
            "{{\"summary\": \"Summary number {i} of the talk.\"}}"
        )))
    })
    .unwrap()
}

/// The stage a model request is for: the name paired with the first
/// needle its system prompt contains, or `"unknown"`.
pub fn stage_by(body: &serde_json::Value, needles: &[(&str, &'static str)]) -> &'static str {
    let system = body["messages"][0]["content"].as_str().unwrap_or("");
    needles
        .iter()
        .find(|(needle, _)| system.contains(needle))
        .map_or("unknown", |(_, name)| name)
}

/// A server whose every answer is `answer(request body)`, as a chat
/// completion.
pub fn answering_server(limit: usize, answer: fn(&serde_json::Value) -> String) -> ScriptedServer {
    ScriptedServer::start(limit, move |_, body| Reply::ok(chat_body(&answer(body)))).unwrap()
}

/// The stage of every request `server` has received, in order.
pub fn stages_of(server: &ScriptedServer, stage: fn(&serde_json::Value) -> &'static str) -> Vec<&'static str> {
    server.requests().iter().map(|r| stage(&r.body)).collect()
}
