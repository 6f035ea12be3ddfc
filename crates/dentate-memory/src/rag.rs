//! Turn-level RAG: every message is embedded alone and retrieved by
//! cosine, top-k. The yardstick every other pipeline is compared with.
//!
//! Like HEMA's chunks and Nemori's episodes, a turn carries the
//! resolution of its relative dates ([`crate::dates::annotate`]: `… went
//! yesterday. (yesterday = 7 May 2023)`) unless
//! [`RagConfig::resolve_dates`] is off, so that temporal comparisons with
//! the pipelines are even.

use crate::error::Result;
use crate::pipeline::{
    Composed, Env, IngestReport, Packer, Pipeline, Retrieved, Vectors, check_embedder, embed_batch, message_text,
    resolve,
};
use crate::store::{NewItem, Step};
use crate::vecmem::VectorMemoryConfig;

/// Messages embedded and committed per step.
const BATCH: usize = 64;

/// Settings of the RAG baseline.
#[derive(Debug, Clone)]
pub struct RagConfig {
    /// The vector memory.
    pub vectors: VectorMemoryConfig,
    /// Append the resolution of relative dates to each turn, as HEMA and
    /// Nemori do (default on).
    pub resolve_dates: bool,
}

impl Default for RagConfig {
    fn default() -> Self {
        RagConfig {
            vectors: VectorMemoryConfig::default(),
            resolve_dates: true,
        }
    }
}

impl From<VectorMemoryConfig> for RagConfig {
    /// These vector-memory settings, dates resolved.
    fn from(vectors: VectorMemoryConfig) -> Self {
        RagConfig {
            vectors,
            ..RagConfig::default()
        }
    }
}

/// The turn-level RAG baseline.
#[derive(Debug)]
pub struct Rag {
    vectors: Vectors,
    resolve_dates: bool,
}

impl Rag {
    /// A RAG pipeline with the given settings.
    pub fn new(cfg: RagConfig) -> Self {
        Rag {
            vectors: Vectors::new("rag", cfg.vectors),
            resolve_dates: cfg.resolve_dates,
        }
    }
}

impl Pipeline for Rag {
    fn name(&self) -> &'static str {
        "rag"
    }

    fn ingest(&mut self, env: &mut Env<'_>, progress: &mut dyn FnMut(usize, usize)) -> Result<IngestReport> {
        check_embedder(env, "rag")?;
        let after = env.store.progress(env.user, "rag")?;
        let msgs = env.store.messages_after(env.user, after)?;
        let mut report = IngestReport::default();
        for (b, batch) in msgs.chunks(BATCH).enumerate() {
            let texts: Vec<String> = batch
                .iter()
                .map(|m| match m.msg.said_at {
                    Some(t) if self.resolve_dates => crate::dates::annotate(&message_text(m), t),
                    _ => message_text(m),
                })
                .collect();
            let vecs = embed_batch(env.embedder, &texts)?;
            let dim = env.embedder.dim();
            let turn = batch.last().map_or(0, |m| m.seq + 1);
            let step = Step {
                add: batch
                    .iter()
                    .zip(texts)
                    .zip(vecs.chunks_exact(dim))
                    .map(|((m, text), v)| NewItem {
                        kind: "turn".into(),
                        text,
                        sources: vec![m.id],
                        said_at: m.msg.said_at,
                        refers_to: m.msg.said_at,
                        vector: Some(v.to_vec()),
                        parent: None,
                    })
                    .collect(),
                processed_through: batch.last().map(|m| m.id),
                turn,
                ..Default::default()
            };
            let ids = env.store.commit(env.user, "rag", &step)?;
            let texts: Vec<&str> = step.add.iter().map(|it| it.text.as_str()).collect();
            self.vectors.add(env, &ids, turn, &vecs, &texts)?;
            report.messages += batch.len();
            report.items += ids.len();
            progress((b * BATCH + batch.len()).min(msgs.len()), msgs.len());
        }
        report.live = self.vectors.get(env)?.len();
        Ok(report)
    }

    fn retrieve(&mut self, env: &mut Env<'_>, query: &str, k: usize) -> Result<Vec<Retrieved>> {
        let hits = self.vectors.search(env, query, k)?;
        resolve(env, &hits)
    }

    fn compose(&mut self, env: &mut Env<'_>, query: &str, budget: usize) -> Result<Composed> {
        let retrieved = crate::context::retrieve(self, env, query, 20)?;
        let packer = Packer::new(String::new(), self.parts()).for_context(&env.context, query);
        let tail = format!("</retrieved>\n<user> {query} </user>");
        Ok(packer.compose(&retrieved, "<retrieved>\n", &tail, budget))
    }

    fn drop_item(&mut self, id: i64) {
        self.vectors.drop_items(&[id]);
    }

    fn replace_item(&mut self, env: &Env<'_>, id: i64, turn: i64, vector: &[f32], text: &str) -> Result<()> {
        self.vectors.replace(env, id, turn, vector, text)
    }

    fn memory_bytes(&self) -> usize {
        self.vectors.memory_bytes()
    }

    fn index_files(&self, env: &Env<'_>) -> Vec<std::path::PathBuf> {
        self.vectors.files(env)
    }

    fn images(&self, env: &Env<'_>) -> Vec<(std::path::PathBuf, Vec<u8>)> {
        self.vectors.images(env)
    }

    fn load(&mut self, env: &Env<'_>) -> Result<()> {
        self.vectors.load(env)
    }
}
