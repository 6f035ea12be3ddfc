//! The interface every memory pipeline implements, and what the pipelines
//! share: batched embedding, retrieval through a [`VectorMemory`], and
//! provenance lookup.

use crate::error::{MemoryError, Result};
use crate::llm::Llm;
use crate::store::{Item, Message, Store};
use crate::time::date_string;
use crate::vecmem::{VectorMemory, VectorMemoryConfig};
use dentate_embed::Embedder;

/// What a pipeline works with for one user.
pub struct Env<'a> {
    /// The store (raw messages, items, progress).
    pub store: &'a mut Store,
    /// Text → vectors.
    pub embedder: &'a dyn Embedder,
    /// The language model, when one is configured (offline otherwise).
    pub llm: Option<&'a dyn Llm>,
    /// The user namespace.
    pub user: &'a str,
}

/// A retrieved memory item with its score and provenance.
#[derive(Debug, Clone, PartialEq)]
pub struct Retrieved {
    /// The item (text, source message ids, times).
    pub item: Item,
    /// Cosine similarity to the query.
    pub score: f32,
    /// The caller's ids of the source messages (LoCoMo `dia_id`s), in order.
    pub source_refs: Vec<String>,
}

/// A prompt composed within a token budget.
#[derive(Debug, Clone, PartialEq)]
pub struct Composed {
    /// The prompt text.
    pub prompt: String,
    /// Its length in tokens (o200k_base).
    pub tokens: usize,
    /// The retrieved items the prompt includes, best first.
    pub included: Vec<Retrieved>,
    /// Retrieved items dropped to fit the budget.
    pub trimmed: usize,
}

/// Counters of one ingestion run.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct IngestReport {
    /// Messages processed in this run.
    pub messages: usize,
    /// Items created.
    pub items: usize,
    /// Items removed by forgetting.
    pub forgotten: usize,
    /// Live searchable items after the run.
    pub live: usize,
}

/// A memory pipeline: turns a user's stored messages into memory items,
/// retrieves them for a query, and composes a prompt within a budget.
pub trait Pipeline: Send {
    /// Pipeline name (the store namespace of its items).
    fn name(&self) -> &'static str;
    /// Processes every stored message of the user it has not processed
    /// yet, committing progress step by step; `progress(done, total)` is
    /// called as it goes. After an error, the next call resumes at the
    /// first message whose step was not committed.
    fn ingest(&mut self, env: &mut Env<'_>, progress: &mut dyn FnMut(usize, usize)) -> Result<IngestReport>;
    /// The `k` items most relevant to `query`, best first.
    fn retrieve(&mut self, env: &mut Env<'_>, query: &str, k: usize) -> Result<Vec<Retrieved>>;
    /// A prompt for answering `query` within `budget` tokens.
    fn compose(&mut self, env: &mut Env<'_>, query: &str, budget: usize) -> Result<Composed>;
    /// Removes a forgotten or deleted item from the pipeline's index.
    fn drop_item(&mut self, id: i64);
    /// Heap bytes of the pipeline's index.
    fn memory_bytes(&self) -> usize;
    /// Writes the pipeline's index files.
    fn save(&self) -> Result<()>;
}

/// Checks that the store's vectors for this pipeline were made by the same
/// embedder, recording it on first use.
pub(crate) fn check_embedder(env: &mut Env<'_>, pipeline: &str) -> Result<()> {
    let name = format!("{}/{}", env.embedder.name(), env.embedder.dim());
    match env.store.state(env.user, pipeline, "embedder")? {
        Some(old) if old != name => Err(MemoryError::Invalid(format!(
            "user `{}` pipeline `{pipeline}` was built with embedder {old}, not {name}; use that embedder or a new memory directory",
            env.user
        ))),
        Some(_) => Ok(()),
        None => {
            let step = crate::store::Step {
                state: vec![("embedder".into(), name)],
                ..Default::default()
            };
            env.store.commit(env.user, pipeline, &step)?;
            Ok(())
        }
    }
}

/// The vector memory of one pipeline for one user, opened on first use.
#[derive(Debug)]
pub(crate) struct Vectors {
    pipeline: &'static str,
    cfg: VectorMemoryConfig,
    vm: Option<VectorMemory>,
}

impl Vectors {
    /// Not opened yet.
    pub(crate) fn new(pipeline: &'static str, cfg: VectorMemoryConfig) -> Self {
        Vectors {
            pipeline,
            cfg,
            vm: None,
        }
    }

    /// The vector memory, opened (or rebuilt from the store) on first use.
    pub(crate) fn get(&mut self, env: &Env<'_>) -> Result<&mut VectorMemory> {
        match &mut self.vm {
            Some(vm) => Ok(vm),
            slot => {
                let path = env.store.dir().join(format!("{}.{}.dnt", env.user, self.pipeline));
                let stored = env.store.vectors(env.user, self.pipeline)?;
                let vm = VectorMemory::open(&path, env.embedder.dim(), self.cfg.clone(), stored)?;
                Ok(slot.insert(vm))
            }
        }
    }

    /// Adds vectors made at `turn`, then rebuilds the index from the store
    /// when it has outgrown its kind.
    pub(crate) fn add(&mut self, env: &Env<'_>, ids: &[i64], turn: i64, vectors: &[f32]) -> Result<()> {
        let pipeline = self.pipeline;
        let vm = self.get(env)?;
        if !ids.is_empty() {
            vm.add(ids, turn, vectors)?;
        }
        vm.set_turn(turn);
        if vm.needs_rebuild() {
            vm.rebuild(env.store.vectors(env.user, pipeline)?)?;
        }
        Ok(())
    }

    /// Removes an item from the index, if it is open.
    pub(crate) fn drop_item(&mut self, id: i64) {
        if let Some(vm) = self.vm.as_mut() {
            vm.remove(&[id]);
        }
    }

    /// Heap bytes of the index (0 before it is opened).
    pub(crate) fn memory_bytes(&self) -> usize {
        self.vm.as_ref().map_or(0, VectorMemory::memory_bytes)
    }

    /// Writes the index file, if it is open.
    pub(crate) fn save(&self) -> Result<()> {
        self.vm.as_ref().map_or(Ok(()), VectorMemory::save)
    }
}

/// The embedding of one query.
pub(crate) fn embed_query(env: &Env<'_>, query: &str) -> Result<Vec<f32>> {
    if query.trim().is_empty() {
        return Err(MemoryError::Invalid("the query is empty".into()));
    }
    Ok(env.embedder.embed(&[query])?)
}

/// Search hits resolved to live items with provenance, best first.
pub(crate) fn resolve(env: &Env<'_>, hits: &[(i64, f32)]) -> Result<Vec<Retrieved>> {
    let mut out = Vec::with_capacity(hits.len());
    for &(id, score) in hits {
        let Some(item) = env.store.item(id)? else { continue };
        let source_refs = env
            .store
            .messages(&item.sources)?
            .into_iter()
            .map(|m| m.msg.source_ref.unwrap_or_else(|| format!("#{}", m.id)))
            .collect();
        out.push(Retrieved {
            item,
            score,
            source_refs,
        });
    }
    Ok(out)
}

/// The text a message is embedded and shown as: `speaker: text`.
pub fn message_text(m: &Message) -> String {
    format!("{}: {}", m.msg.speaker, m.msg.text)
}

/// How an item is shown in a prompt: `[date] text`.
pub fn render_item(item: &Item) -> String {
    match item.said_at {
        Some(t) => format!("[{}] {}", date_string(t), item.text),
        None => item.text.clone(),
    }
}

/// Embeds `texts` in batches of 64.
pub(crate) fn embed_batch(embedder: &dyn Embedder, texts: &[String]) -> Result<Vec<f32>> {
    let mut out = Vec::with_capacity(texts.len() * embedder.dim());
    for chunk in texts.chunks(64) {
        let refs: Vec<&str> = chunk.iter().map(String::as_str).collect();
        out.extend(embedder.embed(&refs)?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_render_with_their_date() {
        let it = Item {
            id: 1,
            user: "u".into(),
            pipeline: "rag".into(),
            kind: "turn".into(),
            text: "Ann: hello".into(),
            sources: vec![1],
            said_at: Some(1_683_554_160),
            refers_to: None,
            turn: 1,
        };
        assert_eq!(render_item(&it), "[2023-05-08] Ann: hello");
    }
}
