//! A language model implemented by a JavaScript function, for the memory
//! pipelines that can use one (HEMA's summaries, Nemori, Amory, PREMem).

use dentate_memory::{Call, ChatMessage, JsonOutcome, Llm, LlmCounters, LlmError, LlmStats};
use js_sys::{Array, Function, Object};
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

/// A model behind `(request) => string | {text, promptTokens?,
/// completionTokens?}`, called synchronously with `request` =
/// `{role, schema, messages: [{role, content}]}` (`schema`: the JSON Schema
/// the answer must follow, or `null` for free text). The pipelines run
/// synchronously, so the function must answer at once: a page with an
/// asynchronous model (WebLLM, `fetch`) runs the memory in a Worker and
/// bridges with a synchronous request or `Atomics.wait`.
pub(crate) struct JsLlm {
    f: Function,
    name: String,
    stats: LlmCounters,
}

// SAFETY: this crate is compiled for wasm32 only (see lib.rs), and
// wasm32-unknown-unknown without the `atomics` target feature runs a single
// thread, so the JavaScript function is never touched from two threads.
#[cfg(not(target_feature = "atomics"))]
unsafe impl Send for JsLlm {}
// SAFETY: as above.
#[cfg(not(target_feature = "atomics"))]
unsafe impl Sync for JsLlm {}

impl JsLlm {
    pub(crate) fn new(f: Function, name: String) -> Self {
        JsLlm {
            f,
            name,
            stats: LlmCounters::default(),
        }
    }

    fn ask(&self, call: &Call<'_>, messages: &[ChatMessage]) -> Result<(String, u64, u64), LlmError> {
        let request = Object::new();
        crate::convert::set(&request, "role", call.role);
        let schema = match call.schema {
            Some(s) => js_sys::JSON::parse(&s.to_string()).unwrap_or(JsValue::NULL),
            None => JsValue::NULL,
        };
        crate::convert::set(&request, "schema", schema);
        let msgs: Array = messages
            .iter()
            .map(|m| {
                let o = Object::new();
                crate::convert::set(&o, "role", m.role);
                crate::convert::set(&o, "content", m.content.as_str());
                JsValue::from(o)
            })
            .collect();
        crate::convert::set(&request, "messages", msgs);
        let out = self
            .f
            .call1(&JsValue::NULL, &request)
            .map_err(|e| LlmError::Transport {
                url: format!("javascript:{}", self.name),
                attempts: 1,
                reason: format!("the model function threw: {}", crate::convert::describe(&e)),
            })?;
        let malformed = |reason: &str| LlmError::Malformed {
            model: self.name.clone(),
            reason: format!("the model function {reason}"),
            content: String::new(),
        };
        if let Some(text) = out.as_string() {
            return Ok((text, 0, 0));
        }
        if out.has_type::<js_sys::Promise>() {
            return Err(malformed(
                "returned a Promise; it must answer synchronously (run the memory in a Worker to bridge an asynchronous model)",
            ));
        }
        if out.is_object() {
            let text = crate::convert::get_string(&out, "text")
                .ok()
                .flatten()
                .ok_or_else(|| malformed("returned an object without a string `text`"))?;
            let tokens = |k: &str| {
                crate::convert::get_usize(&out, k)
                    .ok()
                    .flatten()
                    .map_or(0, |n| n as u64)
            };
            return Ok((text, tokens("promptTokens"), tokens("completionTokens")));
        }
        Err(malformed("returned neither a string nor {text}"))
    }
}

impl Llm for JsLlm {
    fn name(&self) -> String {
        self.name.clone()
    }

    fn chat(&self, call: &Call<'_>, messages: &[ChatMessage]) -> Result<String, LlmError> {
        self.stats.count(call.role, || self.ask(call, messages))
    }

    fn stats(&self) -> LlmStats {
        self.stats.snapshot()
    }

    fn note_json(&self, role: &str, outcome: JsonOutcome) {
        self.stats.record(|s| s.note(role, outcome));
    }
}
