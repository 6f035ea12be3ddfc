//! `AgentMemory`: a memory pipeline (HEMA by default) over an in-memory
//! store, snapshotted to bytes.

use crate::convert::{describe, err, get, get_string, get_usize, set};
use crate::llm::JsLlm;
use dentate_embed::{EmbedError, Embedder, HashingEmbedder};
use dentate_memory::{Llm, Memory, PipelineKind, Retrieved, Retriever};
use js_sys::{Array, Float32Array, Function, Object};
use std::sync::Arc;
use wasm_bindgen::JsCast;
use wasm_bindgen::prelude::*;

/// An embedder implemented by a JavaScript function
/// `(texts: string[]) => Float32Array` of `texts.length × dim` floats,
/// called synchronously (an async model must embed ahead of time and look
/// vectors up here).
struct JsEmbedder {
    f: Function,
    dim: usize,
    name: String,
}

// SAFETY: this crate is compiled for wasm32 only (see lib.rs), and
// wasm32-unknown-unknown without the `atomics` target feature runs a single
// thread, so the JavaScript function is never touched from two threads.
#[cfg(not(target_feature = "atomics"))]
unsafe impl Send for JsEmbedder {}
// SAFETY: as above.
#[cfg(not(target_feature = "atomics"))]
unsafe impl Sync for JsEmbedder {}

impl Embedder for JsEmbedder {
    fn name(&self) -> String {
        self.name.clone()
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<f32>, EmbedError> {
        let bad = |reason: String| EmbedError::Model {
            path: self.name.clone(),
            reason: format!("the JavaScript embedder {reason}"),
        };
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let arr: Array = texts.iter().map(|t| JsValue::from_str(t)).collect();
        let out = self
            .f
            .call1(&JsValue::NULL, &arr)
            .map_err(|e| bad(format!("threw: {}", describe(&e))))?;
        let v: Vec<f32> = if let Some(a) = out.dyn_ref::<Float32Array>() {
            a.to_vec()
        } else if Array::is_array(&out) {
            out.unchecked_ref::<Array>()
                .iter()
                .map(|x| x.as_f64().map(|x| x as f32))
                .collect::<Option<Vec<f32>>>()
                .ok_or_else(|| bad("returned an array holding a non-number".into()))?
        } else {
            return Err(bad("did not return a Float32Array".into()));
        };
        if Some(v.len()) != texts.len().checked_mul(self.dim) {
            return Err(bad(format!(
                "returned {} floats for {} texts of dimension {}",
                v.len(),
                texts.len(),
                self.dim
            )));
        }
        let mut v = v;
        for (i, row) in v.chunks_exact_mut(self.dim).enumerate() {
            let n = row.iter().map(|x| f64::from(*x) * f64::from(*x)).sum::<f64>().sqrt();
            if !n.is_finite() || n == 0.0 {
                return Err(bad(format!("returned a zero or non-finite vector for text {i}")));
            }
            row.iter_mut().for_each(|x| *x = (f64::from(*x) / n) as f32);
        }
        Ok(v)
    }
}

/// Agent memory in the page: messages in, relevant memories (with the
/// ids of the messages they came from) out. Options:
/// `pipeline` (`hema` default, `nemori`, `rag`, `amory` — also
/// `amory-rapid`, `amory-none` for its consolidation modes — or `premem`),
/// `llm` (a function `(request) => string` that answers the pipeline's
/// model calls, see below; without it every pipeline runs on its offline
/// stand-ins) + optional `llmName`, `retriever` (`hybrid`
/// default, with the fusion weight chosen for the embedder: 0.3 dense for
/// the hashing embedder, 0.5 for others; `dense`, `bm25`, `rrf[:C]`,
/// `weighted:W`), `dim` (hashing
/// embedder dimension, 2 to 65,536, default 384), or `embed` + `embedDim`
/// (1 to 65,536; + optional `embedName`) to embed with your own
/// synchronous function.
///
/// The `llm` function gets `{role, schema, messages: [{role, content}]}`
/// (`role` names the pipeline step, e.g. `premem_extract`; `schema` is the
/// JSON Schema a JSON answer must follow, or `null` for free text) and
/// returns the model's text (or `{text, promptTokens, completionTokens}`),
/// synchronously: a page with an asynchronous model (WebLLM, a server)
/// runs the memory in a Worker and bridges with a synchronous request or
/// `Atomics.wait`. A malformed JSON answer gets one repair request; a
/// thrown exception or a second malformed answer throws a `DentateError`.
#[wasm_bindgen]
pub struct AgentMemory {
    mem: Memory,
    llm: Option<Arc<JsLlm>>,
}

struct Settings {
    kind: PipelineKind,
    embedder: Arc<dyn Embedder>,
    retriever: Retriever,
    llm: Option<Arc<JsLlm>>,
}

fn settings(options: &JsValue) -> Result<Settings, JsValue> {
    let kind = PipelineKind::parse(&get_string(options, "pipeline")?.unwrap_or_else(|| "hema".into())).map_err(err)?;
    let retriever = get_string(options, "retriever")?;
    let embedder: Arc<dyn Embedder> = match get(options, "embed")? {
        Some(f) => {
            let f: Function = f
                .dyn_into()
                .map_err(|_| err("option `embed` must be a function (texts) => Float32Array"))?;
            let dim = get_usize(options, "embedDim")?
                .filter(|d| *d > 0)
                .ok_or_else(|| err("option `embedDim` (a positive integer) is required with `embed`"))?;
            if dim > dentate_embed::MAX_DIM {
                return Err(err(format!(
                    "option `embedDim` is {dim}, above the largest dimension ({})",
                    dentate_embed::MAX_DIM
                )));
            }
            let name = get_string(options, "embedName")?.unwrap_or_else(|| format!("js-{dim}"));
            Arc::new(JsEmbedder { f, dim, name })
        }
        None => Arc::new(HashingEmbedder::new(get_usize(options, "dim")?.unwrap_or(384)).map_err(err)?),
    };
    // `hybrid` (and no choice) mean the fusion weight for this embedder.
    let retriever = Retriever::parse_for(retriever.as_deref().unwrap_or("hybrid"), &embedder.name()).map_err(err)?;
    let llm = match get(options, "llm")? {
        Some(f) => {
            let f: Function = f
                .dyn_into()
                .map_err(|_| err("option `llm` must be a function (request) => string"))?;
            let name = get_string(options, "llmName")?.unwrap_or_else(|| "js-model".into());
            Some(Arc::new(JsLlm::new(f, name)))
        }
        None => None,
    };
    Ok(Settings {
        kind,
        embedder,
        retriever,
        llm,
    })
}

fn retrieved_to_js(r: &Retrieved) -> JsValue {
    let o = Object::new();
    set(&o, "id", r.item.id as f64);
    set(&o, "kind", r.item.kind.as_str());
    set(&o, "text", r.item.text.as_str());
    set(&o, "score", r.score);
    let sources: Array = r.source_refs.iter().map(|s| JsValue::from_str(s)).collect();
    set(&o, "sources", sources);
    let time = |t: Option<i64>| t.map_or(JsValue::NULL, |t| JsValue::from_f64(t as f64));
    set(&o, "saidAt", time(r.item.said_at));
    set(&o, "refersTo", time(r.item.refers_to));
    o.into()
}

fn report_to_js(r: &dentate_memory::IngestReport) -> JsValue {
    let o = Object::new();
    set(&o, "messages", r.messages as f64);
    set(&o, "items", r.items as f64);
    set(&o, "forgotten", r.forgotten as f64);
    set(&o, "live", r.live as f64);
    o.into()
}

#[wasm_bindgen]
impl AgentMemory {
    /// A new, empty memory (see the type's documentation for `options`).
    #[wasm_bindgen(constructor)]
    pub fn new(options: JsValue) -> Result<AgentMemory, JsValue> {
        let s = settings(&options)?;
        let mut mem = Memory::in_memory(s.kind, s.embedder, s.llm.clone().map(|l| l as Arc<dyn Llm>)).map_err(err)?;
        mem.set_retriever(s.retriever);
        Ok(AgentMemory { mem, llm: s.llm })
    }

    /// Restores a memory from `save()`; `options` must name the same
    /// pipeline and embedder it was built with (a different embedder is
    /// refused on first use). Damaged bytes throw.
    pub fn load(bytes: &[u8], options: JsValue) -> Result<AgentMemory, JsValue> {
        let s = settings(&options)?;
        let llm = s.llm.clone().map(|l| l as Arc<dyn Llm>);
        let mut mem = Memory::from_bytes(bytes, s.kind, s.embedder, llm).map_err(err)?;
        mem.set_retriever(s.retriever);
        Ok(AgentMemory { mem, llm: s.llm })
    }

    /// A checksummed snapshot of everything (messages, memories, vectors,
    /// provenance, pipeline state), e.g. to keep in IndexedDB.
    pub fn save(&mut self) -> Result<Vec<u8>, JsValue> {
        self.mem.to_bytes().map_err(err)
    }

    /// Saves a snapshot (the bytes of `save()`) in the page's storage under
    /// `name`, replacing what was there: the origin private file system, or
    /// IndexedDB where it cannot write. Resolves when the bytes are kept.
    #[wasm_bindgen(js_name = saveTo)]
    pub fn save_to(&mut self, name: String) -> Result<js_sys::Promise, JsValue> {
        let bytes = self.save()?;
        Ok(wasm_bindgen_futures::future_to_promise(async move {
            crate::persist::put(&name, &bytes).await?;
            Ok(JsValue::UNDEFINED)
        }))
    }

    /// The memory saved under `name` by `saveTo`, with `options` as for
    /// `load` (the same pipeline and embedder). Throws when nothing is
    /// saved there or the snapshot is damaged.
    #[wasm_bindgen(js_name = loadFrom)]
    pub async fn load_from(name: String, options: JsValue) -> Result<AgentMemory, JsValue> {
        let bytes = crate::persist::get(&name).await?;
        AgentMemory::load(&bytes, options)
    }

    /// Stores and processes messages for `user`: an array of
    /// `{speaker | role, text | content, timestamp?, session?, id?}`
    /// (timestamp: Unix seconds or milliseconds, or ISO 8601; `id` is kept
    /// for provenance, and a message whose id and text are already stored
    /// is skipped). Returns `{messages, items, forgotten, live}`.
    #[wasm_bindgen(js_name = addMessages)]
    pub fn add_messages(&mut self, user: &str, messages: JsValue) -> Result<JsValue, JsValue> {
        if !Array::is_array(&messages) {
            return Err(err("messages must be an array of objects"));
        }
        let lines: Vec<String> = messages
            .unchecked_ref::<Array>()
            .iter()
            .enumerate()
            .map(|(i, m)| {
                js_sys::JSON::stringify(&m)
                    .ok()
                    .and_then(|s| s.as_string())
                    .ok_or_else(|| err(format!("message {i} cannot be read as JSON")))
            })
            .collect::<Result<_, _>>()?;
        let msgs = dentate_memory::input::parse_jsonl(&lines.join("\n")).map_err(err)?;
        if msgs.is_empty() {
            return Err(err("messages is empty"));
        }
        let r = self.mem.ingest(user, &msgs).map_err(err)?;
        Ok(report_to_js(&r))
    }

    /// Closes what the pipeline holds back for more messages (Nemori's
    /// open episode), as at the end of a conversation.
    pub fn flush(&mut self, user: &str) -> Result<JsValue, JsValue> {
        let r = self.mem.flush(user).map_err(err)?;
        Ok(report_to_js(&r))
    }

    /// The `k` memories most relevant to `query`, best first:
    /// `{id, kind, text, score, sources, saidAt, refersTo}` each, where
    /// `sources` are the ids of the messages they came from.
    pub fn retrieve(&mut self, user: &str, query: &str, k: usize) -> Result<Array, JsValue> {
        let hits = self.mem.retrieve(user, query, k).map_err(err)?;
        Ok(hits.iter().map(retrieved_to_js).collect())
    }

    /// A prompt for answering `query` within `budget` tokens:
    /// `{prompt, tokens, trimmed, included, tokensExact}` (`tokensExact`:
    /// false while the vocabulary is not loaded and counts are estimated).
    pub fn compose(&mut self, user: &str, query: &str, budget: usize) -> Result<JsValue, JsValue> {
        let c = self.mem.compose(user, query, budget).map_err(err)?;
        let o = Object::new();
        set(&o, "prompt", c.prompt.as_str());
        set(&o, "tokens", c.tokens as f64);
        set(&o, "trimmed", c.trimmed as f64);
        set(&o, "tokensExact", dentate_memory::tokens::exact());
        let inc: Array = c.included.iter().map(retrieved_to_js).collect();
        set(&o, "included", inc);
        Ok(o.into())
    }

    /// Deletes a memory item by id.
    pub fn forget(&mut self, user: &str, id: f64) -> Result<(), JsValue> {
        self.mem.forget(user, item_id(id)?).map_err(err)
    }

    /// Replaces a memory item's text (re-embedded), keeping its provenance.
    pub fn correct(&mut self, user: &str, id: f64, text: &str) -> Result<(), JsValue> {
        self.mem.correct(user, item_id(id)?, text).map_err(err)
    }

    /// Chooses how memories are found: `hybrid` (the fusion weight for
    /// this memory's embedder), `dense`, `bm25`, `rrf[:C]` or `weighted:W`.
    #[wasm_bindgen(js_name = setRetriever)]
    pub fn set_retriever(&mut self, name: &str) -> Result<(), JsValue> {
        let retriever = Retriever::parse_for(name, &self.mem.embedder_name()).map_err(err)?;
        self.mem.set_retriever(retriever);
        Ok(())
    }

    /// What the `llm` function was asked so far: `{calls, failures,
    /// repairs, promptTokens, completionTokens, roles: {role: calls}}`, or
    /// `null` without one.
    #[wasm_bindgen(getter, js_name = llmStats)]
    pub fn llm_stats(&self) -> JsValue {
        let Some(llm) = &self.llm else {
            return JsValue::NULL;
        };
        let s = llm.stats();
        let o = Object::new();
        set(&o, "calls", s.calls as f64);
        set(&o, "failures", s.failures as f64);
        set(&o, "repairs", s.repairs as f64);
        set(&o, "promptTokens", s.prompt_tokens as f64);
        set(&o, "completionTokens", s.completion_tokens as f64);
        let roles = Object::new();
        for (role, r) in &s.roles {
            set(&roles, role, r.calls as f64);
        }
        set(&o, "roles", roles);
        o.into()
    }

    /// The pipeline's name (`hema`, `nemori`, `rag`, `amory`, `premem`).
    #[wasm_bindgen(getter)]
    pub fn pipeline(&self) -> String {
        self.mem.pipeline_name().to_string()
    }

    /// Messages stored for `user`.
    #[wasm_bindgen(js_name = messageCount)]
    pub fn message_count(&self, user: &str) -> Result<f64, JsValue> {
        Ok(self.mem.store().message_count(user).map_err(err)? as f64)
    }
}

/// Installs the `o200k_base` tokenizer vocabulary from the bytes of
/// `o200k_base.tiktoken` (shipped beside the module by `wasm/build`), so
/// token counts — HEMA's budget, `compose`'s `tokens` — are exact, as
/// natively. Until then they are estimated (`tokensExact()` is false);
/// other bytes are refused.
#[wasm_bindgen(js_name = loadVocabulary)]
pub fn load_vocabulary(bytes: &[u8]) -> Result<(), JsValue> {
    dentate_memory::tokens::load_vocabulary(bytes).map_err(err)
}

/// Tokens in `text` under `o200k_base` (estimated while the vocabulary is
/// not loaded: see `tokensExact`).
#[wasm_bindgen(js_name = countTokens)]
pub fn count_tokens(text: &str) -> usize {
    dentate_memory::tokens::count(text)
}

/// True when token counts are exact (the vocabulary is loaded), false
/// while they are estimated.
#[wasm_bindgen(js_name = tokensExact)]
pub fn tokens_exact() -> bool {
    dentate_memory::tokens::exact()
}

fn item_id(id: f64) -> Result<i64, JsValue> {
    if id.is_finite() && id >= 0.0 && id.fract() == 0.0 && id <= 9_007_199_254_740_991.0 {
        Ok(id as i64)
    } else {
        Err(err(format!("{id} is not a memory item id")))
    }
}
