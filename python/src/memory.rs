//! `Memory`: a memory pipeline over a directory (or in memory), many users.

use crate::arrays::size;
use crate::embed::PyEmbedder;
use crate::errors::{embed as embed_err, invalid, memory as mem_err};
use dentate_embed::{Embedder, SpecOptions, from_spec};
use dentate_memory::{
    ChatConfig, Cut, IngestReport, Llm, Memory, MemoryError, OpenAiChat, PipelineKind, Retrieved, Retriever, input,
};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, PoisonError};

/// Agent memory: messages in, memories with provenance out. One directory
/// (a SQLite store and index files; `dir=None` keeps everything in memory)
/// holds many users; every call names one. Calls release the GIL and run
/// one at a time per `Memory`.
#[pyclass(frozen, module = "dentate._native", name = "Memory")]
pub struct PyMemory {
    inner: Mutex<Memory>,
    pipeline: &'static str,
}

fn report<'py>(py: Python<'py>, r: &IngestReport) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("messages", r.messages)?;
    d.set_item("items", r.items)?;
    d.set_item("forgotten", r.forgotten)?;
    d.set_item("live", r.live)?;
    Ok(d)
}

fn retrieved<'py>(py: Python<'py>, r: &Retrieved) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("id", r.item.id)?;
    d.set_item("kind", &r.item.kind)?;
    d.set_item("text", &r.item.text)?;
    d.set_item("score", r.score)?;
    d.set_item("sources", &r.item.sources)?;
    d.set_item("source_refs", &r.source_refs)?;
    d.set_item("said_at", r.item.said_at)?;
    d.set_item("refers_to", r.item.refers_to)?;
    d.set_item("created_at", r.item.created_at)?;
    Ok(d)
}

fn retrieved_list<'py>(py: Python<'py>, rs: &[Retrieved]) -> PyResult<Bound<'py, PyList>> {
    let l = PyList::empty(py);
    for r in rs {
        l.append(retrieved(py, r)?)?;
    }
    Ok(l)
}

/// The language model a dict names: `{"url": …, "model": …}` with optional
/// `api_key_env`, `temperature`, `max_tokens`.
fn llm_from(d: &Bound<'_, PyDict>) -> PyResult<Arc<dyn Llm>> {
    let get = |k: &str| -> PyResult<Option<Bound<'_, PyAny>>> { d.get_item(k) };
    let need = |k: &str| -> PyResult<String> {
        get(k)?
            .ok_or_else(|| invalid(format!("llm needs `{k}`")))?
            .extract()
            .map_err(|_| invalid(format!("llm `{k}` must be a string")))
    };
    for key in d.keys() {
        let key: String = key.extract()?;
        if !["url", "model", "api_key_env", "temperature", "max_tokens"].contains(&key.as_str()) {
            return Err(invalid(format!(
                "unknown llm setting `{key}` (url, model, api_key_env, temperature, max_tokens)"
            )));
        }
    }
    let mut cfg = ChatConfig::new(need("url")?, need("model")?);
    if let Some(v) = get("api_key_env")? {
        cfg.api_key_env = v.extract().map_err(|_| invalid("llm `api_key_env` must be a string"))?;
    }
    if let Some(v) = get("temperature")? {
        cfg.temperature = v.extract().map_err(|_| invalid("llm `temperature` must be a number"))?;
    }
    if let Some(v) = get("max_tokens")? {
        cfg.max_tokens = v
            .extract()
            .map_err(|_| invalid("llm `max_tokens` must be a positive integer"))?;
    }
    let chat = OpenAiChat::new(cfg).map_err(|e| mem_err(MemoryError::Llm(e)))?;
    Ok(Arc::new(chat))
}

/// Messages as dicts in the JSONL input's shape (`speaker`/`role`,
/// `text`/`content`, optional `timestamp`, `session`, `id`).
fn messages(py: Python<'_>, msgs: &Bound<'_, PyAny>) -> PyResult<Vec<dentate_memory::NewMessage>> {
    let list = msgs
        .cast::<PyList>()
        .map_err(|_| invalid("messages must be a list of dicts"))?;
    let json = py.import("json")?;
    let mut lines = Vec::with_capacity(list.len());
    for (i, m) in list.iter().enumerate() {
        if m.cast::<PyDict>().is_err() {
            return Err(invalid(format!("message {i} is not a dict")));
        }
        let line: String = json
            .call_method1("dumps", (m,))
            .map_err(|e| invalid(format!("message {i} cannot be written as JSON: {e}")))?
            .extract()?;
        lines.push(line);
    }
    let parsed = input::parse_jsonl(&lines.join("\n")).map_err(mem_err)?;
    if parsed.is_empty() {
        return Err(invalid("messages is empty"));
    }
    Ok(parsed)
}

impl PyMemory {
    fn with<T: Send>(
        &self,
        py: Python<'_>,
        f: impl FnOnce(&mut Memory) -> dentate_memory::Result<T> + Send,
    ) -> PyResult<T> {
        py.detach(|| f(&mut self.inner.lock().unwrap_or_else(PoisonError::into_inner)))
            .map_err(mem_err)
    }
}

#[pymethods]
impl PyMemory {
    /// Opens (creating) the memory in `dir`, or one in memory when `dir`
    /// is None. `pipeline`: `hema`, `nemori`, `amory` (`amory-rapid`,
    /// `amory-none`), `premem` or `rag`; `embedder`: a spec (`"hash"`,
    /// `"minilm"`, …) or an `Embedder`; `llm`: None (offline) or
    /// `{"url": "http://…/v1", "model": …}`; `retriever`: `hybrid`,
    /// `dense`, `bm25`, `rrf[:C]` or `weighted:W`; `settings`: pipeline
    /// settings by name (`{"nemori.sigma_s": "0.7"}`).
    #[new]
    #[pyo3(signature = (dir=None, *, pipeline="hema", embedder=None, llm=None, retriever="hybrid", resolve_dates=true, settings=None))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        dir: Option<PathBuf>,
        pipeline: &str,
        embedder: Option<&Bound<'_, PyAny>>,
        llm: Option<&Bound<'_, PyDict>>,
        retriever: &str,
        resolve_dates: bool,
        settings: Option<&Bound<'_, PyDict>>,
    ) -> PyResult<Self> {
        let mut kind = PipelineKind::parse(pipeline)
            .map_err(mem_err)?
            .resolve_dates(resolve_dates);
        if let Some(s) = settings {
            for (k, v) in s.iter() {
                let k: String = k.extract().map_err(|_| invalid("settings keys must be strings"))?;
                let v: String = v.str()?.extract()?;
                kind = kind.set(&k, &v).map_err(mem_err)?;
            }
        }
        let embedder: Arc<dyn Embedder> = match embedder {
            None => py
                .detach(|| from_spec("hash", &SpecOptions::default()))
                .map(Arc::from)
                .map_err(embed_err)?,
            Some(e) => {
                if let Ok(e) = e.cast::<PyEmbedder>() {
                    e.get().inner.clone()
                } else if let Ok(spec) = e.extract::<String>() {
                    py.detach(|| from_spec(&spec, &SpecOptions::default()))
                        .map(Arc::from)
                        .map_err(embed_err)?
                } else {
                    return Err(invalid("embedder must be a spec string or a dentate.Embedder"));
                }
            }
        };
        let llm = llm.map(llm_from).transpose()?;
        let retriever = Retriever::parse_for(retriever, &embedder.name()).map_err(mem_err)?;
        let mut mem = py
            .detach(|| match &dir {
                Some(d) => Memory::open(d, kind, embedder, llm),
                None => Memory::in_memory(kind, embedder, llm),
            })
            .map_err(mem_err)?;
        mem.set_retriever(retriever);
        Ok(PyMemory {
            pipeline: mem.pipeline_name(),
            inner: Mutex::new(mem),
        })
    }

    /// Stores `messages` for `user` without processing them; returns their
    /// store ids. A message whose `id` and text are already stored is
    /// skipped (re-sending a conversation adds nothing).
    fn add(&self, py: Python<'_>, user: &str, messages: &Bound<'_, PyAny>) -> PyResult<Vec<i64>> {
        let msgs = self::messages(py, messages)?;
        self.with(py, |m| m.add_messages(user, &msgs))
    }

    /// Processes the messages of `user` stored and not yet processed (after
    /// `add`, or resuming after a crash or a model failure); returns
    /// `{messages, items, forgotten, live}`.
    fn process<'py>(&self, py: Python<'py>, user: &str) -> PyResult<Bound<'py, PyDict>> {
        let r = self.with(py, |m| m.process(user, &mut |_, _| {}))?;
        report(py, &r)
    }

    /// `add` then `process`.
    fn ingest<'py>(&self, py: Python<'py>, user: &str, messages: &Bound<'py, PyAny>) -> PyResult<Bound<'py, PyDict>> {
        let msgs = self::messages(py, messages)?;
        let r = self.with(py, |m| m.ingest(user, &msgs))?;
        report(py, &r)
    }

    /// Closes what the pipeline holds open for more messages (Nemori's
    /// episode, PREMem's session), as at the end of a conversation.
    fn flush<'py>(&self, py: Python<'py>, user: &str) -> PyResult<Bound<'py, PyDict>> {
        let r = self.with(py, |m| m.flush(user))?;
        report(py, &r)
    }

    /// The memories of `user` for `query`, best first: the top `k`
    /// (default 10), or with `budget` the items in rank order while their
    /// packed context stays within that many tokens. Each is a dict: `id`,
    /// `kind`, `text`, `score`, `sources` (store ids of the messages it came
    /// from), `source_refs` (their `id`s as given), `said_at`, `refers_to`,
    /// `created_at` (Unix seconds or None).
    #[pyo3(signature = (user, query, *, k=None, budget=None))]
    fn search<'py>(
        &self,
        py: Python<'py>,
        user: &str,
        query: &str,
        k: Option<i64>,
        budget: Option<i64>,
    ) -> PyResult<Bound<'py, PyList>> {
        let k = k.map(|k| size(k, "k")).transpose()?;
        let budget = budget.map(|b| size(b, "budget")).transpose()?;
        let cut = match (k, budget) {
            (Some(_), Some(_)) => return Err(invalid("give k or budget, not both")),
            (k, None) => Cut::K(k.unwrap_or(10)),
            (None, Some(b)) => Cut::Budget(b),
        };
        let found = self.with(py, |m| m.search(user, query, cut, None))?;
        retrieved_list(py, &found.results)
    }

    /// The prompt for answering `question` within `budget` tokens:
    /// `{prompt, tokens, trimmed, included}` (`included`: the memories in
    /// it, as `search` returns them).
    #[pyo3(signature = (user, question, budget=3500))]
    fn context<'py>(&self, py: Python<'py>, user: &str, question: &str, budget: i64) -> PyResult<Bound<'py, PyDict>> {
        let budget = size(budget, "budget")?;
        let c = self.with(py, |m| m.compose(user, question, budget))?;
        let d = PyDict::new(py);
        d.set_item("prompt", &c.prompt)?;
        d.set_item("tokens", c.tokens)?;
        d.set_item("trimmed", c.trimmed)?;
        d.set_item("included", retrieved_list(py, &c.included)?)?;
        Ok(d)
    }

    /// Deletes memory `id` of `user` (`NotFoundError` when there is none).
    fn forget(&self, py: Python<'_>, user: &str, id: i64) -> PyResult<()> {
        self.with(py, |m| m.forget(user, id))
    }

    /// Replaces the text of memory `id` (re-embedded; provenance kept).
    fn correct(&self, py: Python<'_>, user: &str, id: i64, text: &str) -> PyResult<()> {
        self.with(py, |m| m.correct(user, id, text))
    }

    /// What the memory of `user` holds, as text (Amory's narrative tree,
    /// HEMA's summary, Nemori's episodes, …).
    fn show(&self, py: Python<'_>, user: &str) -> PyResult<String> {
        self.with(py, |m| m.show(user))
    }

    /// Messages stored for `user`.
    fn message_count(&self, py: Python<'_>, user: &str) -> PyResult<i64> {
        self.with(py, |m| m.store().message_count(user))
    }

    /// The pipeline's name.
    #[getter]
    fn pipeline(&self) -> &'static str {
        self.pipeline
    }

    fn __repr__(&self) -> String {
        format!("<dentate memory: {} pipeline>", self.pipeline)
    }
}
