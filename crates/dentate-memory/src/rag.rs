//! Turn-level RAG: every message is embedded alone and retrieved by
//! cosine, top-k. The yardstick every other pipeline is compared with.

use crate::error::Result;
use crate::metrics::Cut;
use crate::pipeline::{
    Composed, Env, IngestReport, Packer, Pipeline, Retrieved, Vectors, check_embedder, embed_batch, message_text,
    resolve,
};
use crate::store::{NewItem, Step};
use crate::tokens;
use crate::vecmem::VectorMemoryConfig;

/// Messages embedded and committed per step.
const BATCH: usize = 64;

/// The turn-level RAG baseline.
#[derive(Debug)]
pub struct Rag {
    vectors: Vectors,
}

impl Rag {
    /// A RAG pipeline with the given vector-memory settings.
    pub fn new(cfg: VectorMemoryConfig) -> Self {
        Rag {
            vectors: Vectors::new("rag", cfg),
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
            let texts: Vec<String> = batch.iter().map(message_text).collect();
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
        if report.messages > 0 {
            self.vectors.save(env)?;
        }
        Ok(report)
    }

    fn retrieve(&mut self, env: &mut Env<'_>, query: &str, k: usize) -> Result<Vec<Retrieved>> {
        let hits = self.vectors.search(env, query, k)?;
        resolve(env, &hits)
    }

    fn compose(&mut self, env: &mut Env<'_>, query: &str, budget: usize) -> Result<Composed> {
        let retrieved = self.retrieve(env, query, 20)?;
        let head = "<retrieved>\n";
        let tail = format!("</retrieved>\n<user> {query} </user>");
        let fixed = tokens::count(head) + tokens::count(&tail);
        let packer = Packer {
            standing: String::new(),
            render: self.renderer(),
        };
        let packed = packer.pack(&retrieved, Cut::Budget(budget.saturating_sub(fixed)));
        let prompt = format!("{head}{}{tail}", packed.text);
        Ok(Composed {
            tokens: tokens::count(&prompt),
            trimmed: retrieved.len() - packed.items,
            prompt,
            included: retrieved[..packed.items].to_vec(),
        })
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

    fn save(&self, env: &Env<'_>) -> Result<()> {
        self.vectors.save(env)
    }
}
