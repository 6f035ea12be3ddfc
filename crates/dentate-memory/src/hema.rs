//! HEMA (Ahn 2025, "Hippocampus-inspired Extended Memory Architecture"):
//! a one-sentence **compact memory** updated every turn, a **vector
//! memory** of dialogue chunks, a **summary-of-summaries** every 100 turns,
//! **semantic forgetting** of the lowest-salience 0.5% every 100 turns, and
//! **prompt composition** in the paper's template within a token budget.
//!
//! Choices the paper leaves open, made here: one chunk per message
//! (`speaker: text`, dated in prompts); the query is the question alone;
//! K = 5; two tail turns; at each 100-turn boundary the compact summary of
//! the block is stored as a searchable `summary` item (provenance: the
//! block's messages), merged into the level-2 summary, and the compact
//! memory restarts from that merge. Salience uses the core's β·δ form
//! (the bonus goes to recently retrieved vectors; see
//! `dentate_core::BonusForm`); the turn each item was last retrieved is
//! saved with the item after every retrieval (`Store::record_retrieval`,
//! schema v6), so the bonus survives a restart.

use crate::error::{MemoryError, Result};
use crate::pipeline::{
    Composed, Env, IngestReport, Parts, Pipeline, Retrieved, Vectors, check_embedder, embed_batch, message_text,
    render_grouped, resolve,
};
use crate::store::{Item, Message, NewItem, Step};
use crate::summarize::{Summarizer, WordStats, summarizer};
use crate::tokens;
use crate::vecmem::VectorMemoryConfig;
use dentate_core::SalienceParams;

/// HEMA settings (defaults from the paper where it gives them).
#[derive(Debug, Clone)]
pub struct HemaConfig {
    /// Chunks retrieved per query (default 5).
    pub k: usize,
    /// Prompt budget in tokens (default 3,500).
    pub budget: usize,
    /// Previous turns in `<dialogue_tail>` (default 2).
    pub tail_turns: usize,
    /// Compact-summary limit in tokens (default 60).
    pub summary_tokens: usize,
    /// Turns between summary-of-summaries steps (default 100).
    pub sos_every: i64,
    /// Turns between forgetting rounds (default 100).
    pub forget_every: i64,
    /// Fraction pruned per round (default 0.005).
    pub forget_fraction: f64,
    /// Salience parameters (λ = 1, γ = 0.002, β = 0.5, window 100).
    pub salience: SalienceParams,
    /// Vector-memory settings.
    pub vectors: VectorMemoryConfig,
    /// Text of the `<system>` block.
    pub system: String,
    /// Append the resolution of relative dates ("yesterday = 7 May 2023")
    /// to each chunk ([`crate::dates::annotate`]; default on: it raised
    /// answer recall on `locomo-dev.json` at every budget, see
    /// BENCHMARKS.md).
    pub resolve_dates: bool,
}

impl Default for HemaConfig {
    fn default() -> Self {
        HemaConfig {
            k: 5,
            budget: 3500,
            tail_turns: 2,
            summary_tokens: 60,
            sos_every: 100,
            forget_every: 100,
            forget_fraction: 0.005,
            salience: SalienceParams::default(),
            vectors: VectorMemoryConfig::default(),
            system: "You are a helpful assistant with long-term memory of this conversation. Use the compact \
                     summary and the retrieved excerpts (dated) to answer; say so when they do not contain the answer."
                .into(),
            resolve_dates: true,
        }
    }
}

/// The HEMA pipeline.
#[derive(Debug)]
pub struct Hema {
    cfg: HemaConfig,
    vectors: Vectors,
}

/// Pipeline state kept in the store between steps.
struct State {
    turn: i64,
    compact: String,
    level2: String,
    words: WordStats,
}

impl Hema {
    /// HEMA with `cfg`.
    pub fn new(cfg: HemaConfig) -> Self {
        Hema {
            vectors: Vectors::new("hema", cfg.vectors.clone()),
            cfg,
        }
    }

    /// The settings.
    pub fn config(&self) -> &HemaConfig {
        &self.cfg
    }

    fn load_state(env: &Env<'_>) -> Result<State> {
        let get = |k: &str| env.store.state(env.user, "hema", k);
        Ok(State {
            turn: get("turn")?.and_then(|t| t.parse().ok()).unwrap_or(0),
            compact: get("compact")?.unwrap_or_default(),
            level2: get("level2")?.unwrap_or_default(),
            words: get("words")?.map(|w| WordStats::from_json(&w)).unwrap_or_default(),
        })
    }

    fn state_pairs(st: &State, offline: bool) -> Vec<(String, String)> {
        let mut v = vec![
            ("turn".to_string(), st.turn.to_string()),
            ("compact".to_string(), st.compact.clone()),
            ("level2".to_string(), st.level2.clone()),
        ];
        if offline {
            v.push(("words".to_string(), st.words.to_json()));
        }
        v
    }

    /// Commits `step` with the state, then adds its vectors to the index.
    fn flush(&mut self, env: &mut Env<'_>, step: &mut Step, st: &State, offline: bool) -> Result<usize> {
        step.state = Self::state_pairs(st, offline);
        step.turn = st.turn;
        let ids = env.store.commit(env.user, "hema", step)?;
        let mut rows = Vec::new();
        let mut row_ids = Vec::new();
        let mut texts = Vec::new();
        for (id, it) in ids.iter().zip(&step.add) {
            if let Some(v) = &it.vector {
                rows.extend_from_slice(v);
                row_ids.push(*id);
                texts.push(it.text.as_str());
            }
        }
        self.vectors.add(env, &row_ids, st.turn, &rows, &texts)?;
        let n = step.add.len();
        *step = Step::default();
        Ok(n)
    }

    /// One summary-of-summaries step at a block boundary: stores the
    /// block's compact summary as an item, merges it into level 2, and
    /// restarts the compact memory from the merge.
    fn summary_of_summaries(
        &self,
        env: &mut Env<'_>,
        summ: &dyn Summarizer,
        st: &mut State,
        step: &mut Step,
    ) -> Result<()> {
        if st.compact.is_empty() {
            return Ok(());
        }
        let block = env
            .store
            .messages_in_seq(env.user, st.turn - self.cfg.sos_every, st.turn)?;
        let vector = env.embedder.embed(&[st.compact.as_str()])?;
        step.add.push(NewItem {
            kind: "summary".into(),
            text: st.compact.clone(),
            sources: block.iter().map(|m| m.id).collect(),
            said_at: block.last().and_then(|m| m.msg.said_at),
            refers_to: block.first().and_then(|m| m.msg.said_at),
            vector: Some(vector),
            parent: None,
        });
        st.level2 = summ.merge(&st.level2, &st.compact, &st.words, self.cfg.summary_tokens)?;
        st.compact = st.level2.clone();
        Ok(())
    }

    fn tail(env: &Env<'_>, turn: i64, n: usize) -> Result<Vec<Message>> {
        env.store.messages_in_seq(env.user, (turn - n as i64).max(0), turn)
    }
}

impl Pipeline for Hema {
    fn name(&self) -> &'static str {
        "hema"
    }

    fn ingest(&mut self, env: &mut Env<'_>, progress: &mut dyn FnMut(usize, usize)) -> Result<IngestReport> {
        check_embedder(env, "hema")?;
        let after = env.store.progress(env.user, "hema")?;
        let msgs = env.store.messages_after(env.user, after)?;
        let mut st = Self::load_state(env)?;
        let mut report = IngestReport::default();
        let mut step = Step::default();
        let dim = env.embedder.dim();
        // Offline, commit every 32 messages; with a model, after every
        // message (each costs a call that should not be repeated).
        let summ = summarizer(env.llm);
        let offline = !summ.calls_model();
        let group = if offline { 32 } else { 1 };
        for (g, batch) in msgs.chunks(32).enumerate() {
            let texts: Vec<String> = batch
                .iter()
                .map(|m| match m.msg.said_at {
                    Some(t) if self.cfg.resolve_dates => crate::dates::annotate(&message_text(m), t),
                    _ => message_text(m),
                })
                .collect();
            let vecs = embed_batch(env.embedder, &texts)?;
            for (i, (m, text)) in batch.iter().zip(texts).enumerate() {
                st.turn += 1;
                st.words.observe(&m.msg.text);
                st.compact = summ.update(
                    &st.compact,
                    &m.msg.speaker,
                    &m.msg.text,
                    &st.words,
                    self.cfg.summary_tokens,
                )?;
                step.add.push(NewItem {
                    kind: "chunk".into(),
                    text,
                    sources: vec![m.id],
                    said_at: m.msg.said_at,
                    refers_to: m.msg.said_at,
                    vector: Some(vecs[i * dim..(i + 1) * dim].to_vec()),
                    parent: None,
                });
                step.processed_through = Some(m.id);
                let sos = self.cfg.sos_every > 0 && st.turn % self.cfg.sos_every == 0;
                let forget = self.cfg.forget_every > 0 && st.turn % self.cfg.forget_every == 0;
                if sos {
                    self.summary_of_summaries(env, summ.as_ref(), &mut st, &mut step)?;
                }
                if sos || forget || step.add.len() >= group || i + 1 == batch.len() {
                    report.items += self.flush(env, &mut step, &st, offline)?;
                }
                if forget {
                    let fraction = self.cfg.forget_fraction;
                    let params = self.cfg.salience;
                    let gone = self.vectors.prune(env, fraction, &params)?;
                    if !gone.is_empty() {
                        let del = Step {
                            delete: gone.clone(),
                            ..Default::default()
                        };
                        env.store.commit(env.user, "hema", &del)?;
                        report.forgotten += gone.len();
                    }
                }
                report.messages += 1;
            }
            progress((g * 32 + batch.len()).min(msgs.len()), msgs.len());
        }
        report.live = self.vectors.get(env)?.len();
        Ok(report)
    }

    fn retrieve(&mut self, env: &mut Env<'_>, query: &str, k: usize) -> Result<Vec<Retrieved>> {
        let hits = self.vectors.search(env, query, k)?;
        resolve(env, &hits)
    }

    fn mark_retrieved(&mut self, env: &mut Env<'_>, ids: &[i64]) -> Result<()> {
        let turn = env
            .store
            .state(env.user, "hema", "turn")?
            .and_then(|t| t.parse().ok())
            .unwrap_or(0);
        self.vectors.get(env)?.record_retrieval(ids, turn);
        // Saved with the items, so the bonus survives a restart.
        env.store.record_retrieval(env.user, ids, turn)
    }

    fn standing_context(&mut self, env: &mut Env<'_>) -> Result<String> {
        let st = Self::load_state(env)?;
        Ok(if st.compact.is_empty() {
            String::new()
        } else {
            compact_block(&st.compact)
        })
    }

    fn compose(&mut self, env: &mut Env<'_>, query: &str, budget: usize) -> Result<Composed> {
        let st = Self::load_state(env)?;
        let retrieved = crate::context::retrieve(self, env, query, self.cfg.k)?;
        let tail = Self::tail(env, st.turn, self.cfg.tail_turns)?;
        let system = format!("<system> {} </system>\n", self.cfg.system);
        let user = format!("<user> {query} </user>");
        let fixed = tokens::count(&system) + tokens::count(&user);
        if fixed > budget {
            return Err(MemoryError::Invalid(format!(
                "the system text and the question take {fixed} tokens, over the budget of {budget}"
            )));
        }
        let render = |compact: &str, chunks: &[Retrieved], tail: &[Message]| {
            let mut p = system.clone();
            p.push_str(&compact_block(compact));
            p.push_str("<retrieved>\n");
            let parts = self.parts();
            let lines: Vec<(&Item, Parts)> = chunks.iter().map(|r| (&r.item, parts(&r.item))).collect();
            p.push_str(&render_grouped(&lines));
            p.push_str("</retrieved>\n<dialogue_tail>\n");
            for m in tail {
                p.push_str(&message_text(m));
                p.push('\n');
            }
            p.push_str("</dialogue_tail>\n");
            p.push_str(&user);
            p
        };
        // Retrieved chunks are best first: drop from the end (lowest
        // similarity) first, then the oldest tail turns, then shorten the
        // compact summary.
        let mut chunks = retrieved.clone();
        let mut tail = tail;
        let mut compact = st.compact.clone();
        loop {
            let p = render(&compact, &chunks, &tail);
            let t = tokens::count(&p);
            if t <= budget {
                return Ok(Composed {
                    prompt: p,
                    tokens: t,
                    trimmed: retrieved.len() - chunks.len(),
                    included: chunks,
                });
            }
            if chunks.pop().is_some() {
                continue;
            }
            if !tail.is_empty() {
                tail.remove(0);
                continue;
            }
            let over = t - budget;
            let keep = tokens::count(&compact).saturating_sub(over);
            if compact.is_empty() {
                // Only the fixed parts remain and they fit (checked above).
                return Err(MemoryError::Invalid(format!(
                    "cannot fit the prompt in {budget} tokens"
                )));
            }
            compact = tokens::truncate(&compact, keep);
        }
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

/// The compact summary as the prompt holds it.
fn compact_block(compact: &str) -> String {
    format!("<compact> {compact} </compact>\n")
}
