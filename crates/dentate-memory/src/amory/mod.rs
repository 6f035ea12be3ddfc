//! Amory (Zhou et al. 2025, "Amory: Building Coherent Narrative-Driven
//! Agent Memory through Agentic Reasoning"): a conversation becomes
//! **narratives** (plot → sub-plots → fragments, with characters),
//! narratives are **consolidated** when they go quiet, their peripheral
//! facts move into a **semantic graph** of triples, and retrieval reasons
//! over the tree instead of ranking raw turns.
//!
//! The workflow (the paper's Algorithm 1), one iteration per utterance
//! pair:
//!
//! 1. **Initialisation** ([`binding`]): while the history is under T = 20
//!    turns it is itself the context ([`Pipeline::standing_context`]);
//!    at T turns it is segmented into narratives.
//! 2. **Binding** ([`binding`]): each following pair of messages (never
//!    across a session change) becomes fragments appended to the
//!    narratives they extend, or new narratives.
//! 3. **Consolidation** ([`consolidate`]): after each iteration, every
//!    narrative that turned inactive (by default; see [`Consolidation`])
//!    has its unconsolidated fragments, at most N = 10 at a time, made into
//!    sub-plots, and its headline broadened when needed.
//! 4. **Semanticization** ([`semantic`]): in the same step, peripheral
//!    facts become triples in the store's triple table ([`crate::graph`]).
//! 5. **Coherence retrieval** ([`retrieve`]): leaves of the tree chosen
//!    for the question, each shown under its story and sub-plot headlines,
//!    interleaved with facts one hop from the question's entities.
//!
//! Every role runs with a model (the Appendix A prompts, strict JSON
//! through [`crate::ask_json`]) or offline (each module says how, and
//! where its stand-in is weaker than the model).
//!
//! **Storage.** Everything is items of the pipeline: `narrative` (text:
//! headline, owner and characters, one per line), `subplot` (headline;
//! parent: its narrative), `fragment` (`Speaker: text`; parent: its
//! sub-plot, or its narrative until consolidated; `turn`: the binding
//! iteration) and `fact` (the triple as a sentence; parent: its sub-plot;
//! one row in the triple table). Each has its own vector and BM25 index.
//! The tree is rebuilt from the items ([`tree::Tree::load`]), so nothing
//! else needs storing but the iteration counter, the last session and the
//! progress mark.
//!
//! **Streaming and resuming.** Raw messages are stored first. A binding
//! iteration commits its fragments, new narratives, narrative updates,
//! the iteration number and the progress mark in one step; each
//! consolidation window then commits its sub-plots, facts, triples,
//! re-parented fragments and headline in one step. After a crash, the
//! consolidations the last iteration made due are recomputed from the tree
//! (those already committed have nothing left to do) before binding goes
//! on, so a resumed run equals an uninterrupted one and no committed model
//! call is repeated. A message waiting for the second half of its pair is
//! shown in the standing context. [`Pipeline::flush`] (the end of a
//! conversation) binds what waits and consolidates every narrative.

pub mod binding;
pub mod consolidate;
pub mod retrieve;
pub mod semantic;
pub mod tree;

use crate::error::{MemoryError, Result};
use crate::graph::triple_text;
use crate::pipeline::Cut;
use crate::pipeline::{
    Composed, Env, IngestReport, Packer, Pipeline, Retrieved, Vectors, check_embedder, check_question_fits,
    compact_refs, embed_batch, query_vector, resolve,
};
use crate::store::{Item, ItemRef, ItemUpdate, Message, NewItem, NewTriple, Step, as_stored};
use crate::time::human_date;
use crate::tokens;
use crate::vecmem::VectorMemoryConfig;
use binding::{Binder, BindingConfig, Target};
pub use consolidate::Consolidation;
use retrieve::RetrievalConfig;
use std::collections::{BTreeMap, HashMap, HashSet};
use tree::{Frag, Head, SubPlot, Tree};

/// Item kind of narratives.
pub const NARRATIVE: &str = "narrative";
/// Item kind of sub-plots.
pub const SUBPLOT: &str = "subplot";
/// Item kind of memory fragments.
pub const FRAGMENT: &str = "fragment";
/// Item kind of semantic facts (one triple each).
pub const FACT: &str = "fact";

/// Amory settings (the paper's values where it gives them).
#[derive(Debug, Clone)]
pub struct AmoryConfig {
    /// T: turns held as plain history before the memory is initialised
    /// (default 20).
    pub init_turns: usize,
    /// Messages per binding iteration: the utterance pair (default 2; a
    /// session change closes a pair early).
    pub pair: usize,
    /// When narratives are consolidated (default: when inactive).
    pub consolidation: Consolidation,
    /// N: fragments consolidated at a time, and the most a leaf of
    /// unconsolidated fragments holds (default 10).
    pub window: usize,
    /// Leaves a composed prompt draws on (default 2, the paper's k).
    pub episodic_k: usize,
    /// Facts a composed prompt draws on (default 2, the paper's k).
    pub semantic_k: usize,
    /// Offline binding.
    pub binding: BindingConfig,
    /// Offline coherence retrieval.
    pub retrieval: RetrievalConfig,
    /// Vector-index settings (every index).
    pub vectors: VectorMemoryConfig,
}

impl Default for AmoryConfig {
    fn default() -> Self {
        AmoryConfig {
            init_turns: 20,
            pair: 2,
            consolidation: Consolidation::Inactive,
            window: 10,
            episodic_k: 2,
            semantic_k: 2,
            binding: BindingConfig::default(),
            retrieval: RetrievalConfig::default(),
            vectors: VectorMemoryConfig::default(),
        }
    }
}

impl AmoryConfig {
    /// The pipeline name, which is also its store namespace: `amory`, or
    /// `amory-rapid` / `amory-none` for the consolidation ablations (their
    /// memories differ, so they are kept apart).
    pub fn name(&self) -> &'static str {
        match self.consolidation {
            Consolidation::Inactive => "amory",
            Consolidation::Rapid => "amory-rapid",
            Consolidation::None => "amory-none",
        }
    }
}

/// The Amory pipeline.
#[derive(Debug)]
pub struct Amory {
    cfg: AmoryConfig,
    name: &'static str,
    fragments: Vectors,
    narratives: Vectors,
    subplots: Vectors,
    facts: Vectors,
    tree: Option<Tree>,
    /// Fragment embeddings as stored (f16-rounded), for offline decisions.
    vecs: HashMap<i64, Vec<f32>>,
}

/// Pipeline state keys.
const ITERATION: &str = "iteration";
const SESSION: &str = "session";
const INITIALISED: &str = "initialised";

/// What a binding step decided, before it is stored.
struct Bound {
    /// `(message index, Speaker: text)` per fragment.
    frags: Vec<(usize, String)>,
    /// Each fragment's embedding.
    vecs: Vec<f32>,
    /// Each fragment's narrative.
    targets: Vec<Target>,
    /// Heads of new narratives (`None`: extractive, from their fragments).
    new_heads: Vec<Option<Head>>,
    /// Characters the model added to existing narratives.
    added: Vec<(i64, Vec<String>)>,
}

impl Amory {
    /// Amory with `cfg`.
    pub fn new(cfg: AmoryConfig) -> Self {
        let name = cfg.name();
        let v = |kind| Vectors::of_kind(name, kind, cfg.vectors.clone());
        Amory {
            fragments: v(FRAGMENT),
            narratives: v(NARRATIVE),
            subplots: v(SUBPLOT),
            facts: v(FACT),
            name,
            tree: None,
            vecs: HashMap::new(),
            cfg,
        }
    }

    /// The settings.
    pub fn config(&self) -> &AmoryConfig {
        &self.cfg
    }

    fn state_i64(&self, env: &Env<'_>, key: &str) -> Result<Option<i64>> {
        Ok(env.store.state(env.user, self.name, key)?.and_then(|v| v.parse().ok()))
    }

    fn initialised(&self, env: &Env<'_>) -> Result<bool> {
        Ok(self.state_i64(env, INITIALISED)? == Some(1))
    }

    /// The tree, read from the store on first use.
    fn load_tree(&mut self, env: &Env<'_>) -> Result<()> {
        if self.tree.is_none() {
            self.tree = Some(Tree::load(env.store, env.user, self.name)?);
        }
        Ok(())
    }

    fn tree(&self) -> Result<&Tree> {
        self.tree
            .as_ref()
            .ok_or_else(|| MemoryError::Invalid("the narrative tree is not loaded".into()))
    }

    fn tree_mut(&mut self) -> Result<&mut Tree> {
        self.tree
            .as_mut()
            .ok_or_else(|| MemoryError::Invalid("the narrative tree is not loaded".into()))
    }

    /// A fragment's embedding as stored.
    fn frag_vec(&mut self, env: &Env<'_>, id: i64) -> Result<Vec<f32>> {
        if let Some(v) = self.vecs.get(&id) {
            return Ok(v.clone());
        }
        let v = env
            .store
            .vector(id)?
            .ok_or_else(|| MemoryError::Invalid(format!("fragment {id} has no stored embedding")))?;
        self.vecs.insert(id, v.clone());
        Ok(v)
    }

    /// How many messages the next iteration takes from `msgs`: up to a
    /// pair, cut at a session change; 0 when the pair is not complete yet
    /// and more may come (`closing`: the conversation has ended).
    fn take(&self, msgs: &[Message], closing: bool) -> usize {
        let Some(first) = msgs.first() else { return 0 };
        let p = self.cfg.pair.max(1);
        let mut n = 1;
        while n < p && n < msgs.len() && msgs[n].msg.session == first.msg.session {
            n += 1;
        }
        if n < p && n == msgs.len() && !closing { 0 } else { n }
    }

    /// Decides where the fragments of `msgs` go (initialisation when
    /// `init`).
    fn route(&mut self, env: &Env<'_>, msgs: &[Message], iteration: i64, init: bool) -> Result<Bound> {
        let refs: Vec<&Message> = msgs.iter().collect();
        let dim = env.embedder.dim();
        if let Some(llm) = env.llm {
            let routing = if init {
                binding::llm_init(llm, &refs)?
            } else {
                let first_seq = msgs.first().map_or(0, |m| m.seq);
                let ctx_n = self.cfg.binding.context_turns as i64;
                let context = env
                    .store
                    .messages_in_seq(env.user, (first_seq - ctx_n).max(0), first_seq)?;
                let ctx: Vec<&Message> = context.iter().collect();
                let tree = self.tree()?;
                let stories: Vec<(i64, &Head)> = tree.narratives.iter().map(|n| (n.id, &n.head)).collect();
                binding::llm_bind(llm, &stories, &ctx, &refs)?
            };
            let frags: Vec<(usize, String)> = routing
                .routed
                .iter()
                .map(|r| (r.message, format!("{}: {}", refs[r.message].msg.speaker, r.excerpt)))
                .collect();
            let texts: Vec<String> = frags.iter().map(|f| f.1.clone()).collect();
            return Ok(Bound {
                vecs: embed_batch(env.embedder, &texts)?,
                targets: routing.routed.iter().map(|r| r.target).collect(),
                new_heads: routing.new_heads.into_iter().map(Some).collect(),
                added: routing.added_characters,
                frags,
            });
        }
        let extracted = binding::extract(&refs, &self.cfg.binding);
        let texts: Vec<String> = extracted.iter().map(|f| f.text.clone()).collect();
        let vecs = embed_batch(env.embedder, &texts)?;
        // The binder sees embeddings as they read back from the store.
        let stored = as_stored(&vecs);
        let w = self.cfg.binding.profile_window.max(1);
        let mut existing = Vec::new();
        let narr: Vec<(i64, Vec<i64>, i64)> = self
            .tree()?
            .narratives
            .iter()
            .map(|n| {
                let all: Vec<i64> = n.fragments().collect();
                (n.id, all[all.len().saturating_sub(w)..].to_vec(), n.last_bound)
            })
            .collect();
        let same_session =
            env.store.state(env.user, self.name, SESSION)?.as_deref() == msgs.first().map(|m| m.msg.session.as_str());
        let mut recent = Vec::new();
        for (id, last, last_bound) in narr {
            let mut vs = Vec::with_capacity(last.len());
            for f in last {
                vs.push(self.frag_vec(env, f)?);
            }
            existing.push((id, vs));
            if !init && same_session && last_bound == iteration - 1 {
                recent.push(Target::Existing(id));
            }
        }
        let sim = self.cfg.binding.similarity(&env.embedder.name());
        let mut binder = Binder::new(&self.cfg.binding, sim, existing);
        binder.set_recent(recent);
        // Initialisation binds pair by pair: the previous pair's
        // narratives are the recent ones.
        let pair_of: Vec<usize> = if init {
            let mut out = vec![0; msgs.len()];
            let (mut i, mut p) = (0, 0);
            while i < msgs.len() {
                let n = self.take(&msgs[i..], true).max(1);
                out[i..i + n].fill(p);
                i += n;
                p += 1;
            }
            out
        } else {
            vec![0; msgs.len()]
        };
        let mut targets = Vec::with_capacity(extracted.len());
        let (mut cur_pair, mut cur): (usize, Vec<Target>) = (0, Vec::new());
        for (f, v) in extracted.iter().zip(stored.chunks_exact(dim)) {
            let p = pair_of[f.message];
            if p != cur_pair {
                let prev = std::mem::take(&mut cur);
                let first = pair_of.iter().position(|&x| x == p).unwrap_or(0);
                let continues = first > 0 && msgs[first - 1].msg.session == msgs[first].msg.session;
                binder.set_recent(if continues { prev } else { Vec::new() });
                cur_pair = p;
            }
            let t = binder.bind(v);
            cur.push(t);
            targets.push(t);
        }
        let opened = targets
            .iter()
            .filter_map(|t| if let Target::New(k) = t { Some(*k + 1) } else { None })
            .max()
            .unwrap_or(0);
        Ok(Bound {
            frags: extracted.into_iter().map(|f| (f.message, f.text)).collect(),
            vecs,
            targets,
            new_heads: vec![None; opened],
            added: Vec::new(),
        })
    }

    /// One binding iteration (or the initialisation) over `msgs`,
    /// committed in one step; returns the items made.
    fn bind(&mut self, env: &mut Env<'_>, msgs: &[Message], iteration: i64, init: bool) -> Result<usize> {
        self.load_tree(env)?;
        let Some(last) = msgs.last() else { return Ok(0) };
        let b = self.route(env, msgs, iteration, init)?;
        let dim = env.embedder.dim();
        let tree = self.tree()?;
        // New narratives: their heads and fragments.
        let mut new_heads: Vec<Head> = Vec::with_capacity(b.new_heads.len());
        for (k, h) in b.new_heads.iter().enumerate() {
            let texts: Vec<&str> = b
                .frags
                .iter()
                .zip(&b.targets)
                .filter(|(_, t)| **t == Target::New(k))
                .map(|(f, _)| f.1.as_str())
                .collect();
            new_heads.push(match h {
                Some(h) => h.clone(),
                None => binding::extractive_head(&texts),
            });
        }
        // Existing narratives touched: more sources, maybe more characters.
        let mut touched: BTreeMap<i64, (Vec<i64>, Vec<String>)> = BTreeMap::new();
        for ((msg, text), t) in b.frags.iter().zip(&b.targets) {
            if let Target::Existing(id) = t {
                let e = touched.entry(*id).or_default();
                e.0.push(msgs[*msg].id);
                if env.llm.is_none() {
                    let (speaker, _) = binding::split_speaker(text);
                    e.1.push(speaker.to_string());
                    e.1.extend(binding::names_in(text));
                }
            }
        }
        for (id, names) in &b.added {
            touched.entry(*id).or_default().1.extend(names.iter().cloned());
        }
        let mut changed: Vec<(i64, Head)> = Vec::new();
        for (id, (_, names)) in &touched {
            let Some(n) = tree.position(*id).map(|p| &tree.narratives[p]) else {
                continue;
            };
            let chars = binding::characters(&n.head.characters, names);
            if chars != n.head.characters {
                changed.push((*id, Head::new(&n.head.headline, &n.head.owner, &chars)));
            }
        }
        let head_texts: Vec<String> = new_heads
            .iter()
            .chain(changed.iter().map(|c| &c.1))
            .map(Head::text)
            .collect();
        let head_vecs = embed_batch(env.embedder, &head_texts)?;
        let mut step = Step::default();
        for (k, h) in new_heads.iter().enumerate() {
            let mine: Vec<&Message> = b
                .frags
                .iter()
                .zip(&b.targets)
                .filter(|(_, t)| **t == Target::New(k))
                .map(|(f, _)| &msgs[f.0])
                .collect();
            let mut sources: Vec<i64> = mine.iter().map(|m| m.id).collect();
            sources.dedup();
            let said = mine.first().and_then(|m| m.msg.said_at);
            step.add.push(NewItem {
                kind: NARRATIVE.into(),
                text: h.text(),
                sources,
                said_at: said,
                refers_to: said,
                vector: Some(head_vecs[k * dim..(k + 1) * dim].to_vec()),
                parent: None,
            });
        }
        for (((msg, text), t), v) in b.frags.iter().zip(&b.targets).zip(b.vecs.chunks_exact(dim)) {
            let m = &msgs[*msg];
            step.add.push(NewItem {
                kind: FRAGMENT.into(),
                text: text.clone(),
                sources: vec![m.id],
                said_at: m.msg.said_at,
                refers_to: m.msg.said_at,
                vector: Some(v.to_vec()),
                parent: Some(match t {
                    Target::Existing(id) => ItemRef::Stored(*id),
                    Target::New(k) => ItemRef::InStep(*k),
                }),
            });
        }
        for (id, (sources, _)) in &touched {
            let head = changed.iter().position(|c| c.0 == *id);
            step.update.push(ItemUpdate {
                id: *id,
                text: head.map(|i| changed[i].1.text()),
                vector: head.map(|i| {
                    let j = new_heads.len() + i;
                    head_vecs[j * dim..(j + 1) * dim].to_vec()
                }),
                parent: None,
                add_sources: sources.clone(),
            });
        }
        step.state = vec![
            (ITERATION.into(), iteration.to_string()),
            (SESSION.into(), last.msg.session.clone()),
            (INITIALISED.into(), "1".into()),
        ];
        step.processed_through = Some(last.id);
        step.turn = iteration;
        let ids = env.store.commit(env.user, self.name, &step)?;
        // The tree and the indexes follow the commit.
        let n_new = new_heads.len();
        let tree = self.tree_mut()?;
        let mut new_pos = Vec::with_capacity(n_new);
        for (h, id) in new_heads.iter().zip(&ids) {
            new_pos.push(tree.add_narrative(*id, h.clone()));
        }
        for (id, h) in &changed {
            if let Some(p) = tree.position(*id) {
                tree.narratives[p].head = h.clone();
            }
        }
        for ((it, id), t) in step.add[n_new..].iter().zip(&ids[n_new..]).zip(&b.targets) {
            let pos = match t {
                Target::Existing(nid) => tree.position(*nid),
                Target::New(k) => new_pos.get(*k).copied(),
            };
            if let Some(pos) = pos {
                tree.add_fragment(
                    pos,
                    None,
                    Frag {
                        id: *id,
                        text: it.text.clone(),
                        sources: it.sources.clone(),
                        said_at: it.said_at,
                        turn: iteration,
                    },
                );
            }
        }
        for (id, v) in ids[n_new..].iter().zip(b.vecs.chunks_exact(dim)) {
            self.vecs.insert(*id, as_stored(v));
        }
        let frag_texts: Vec<&str> = step.add[n_new..].iter().map(|it| it.text.as_str()).collect();
        self.fragments
            .add(env, &ids[n_new..], iteration, &b.vecs, &frag_texts)?;
        let narr_texts: Vec<&str> = step.add[..n_new].iter().map(|it| it.text.as_str()).collect();
        self.narratives
            .add(env, &ids[..n_new], iteration, &head_vecs[..n_new * dim], &narr_texts)?;
        for (i, (id, h)) in changed.iter().enumerate() {
            let j = n_new + i;
            self.narratives
                .replace(env, *id, iteration, &head_vecs[j * dim..(j + 1) * dim], &h.text())?;
        }
        Ok(ids.len())
    }

    /// The other speaker around a message (for `you`/`your`).
    fn addressee(env: &Env<'_>, source: i64) -> Result<Option<String>> {
        let Some(m) = env.store.messages(&[source])?.into_iter().next() else {
            return Ok(None);
        };
        let around = env.store.messages_in_seq(env.user, (m.seq - 1).max(0), m.seq + 2)?;
        Ok(around
            .into_iter()
            .filter(|o| o.seq != m.seq && o.msg.speaker != m.msg.speaker)
            .min_by_key(|o| (o.seq - m.seq).abs())
            .map(|o| o.msg.speaker))
    }

    /// Consolidates the first `n` unconsolidated fragments of narrative at
    /// position `pos`, with semanticization, in one step; returns the items
    /// made.
    fn consolidate(&mut self, env: &mut Env<'_>, pos: usize, n: usize, iteration: i64) -> Result<usize> {
        let tree = self.tree()?;
        let nar = tree.narratives[pos].clone();
        let window: Vec<Frag> = nar.tail[..n]
            .iter()
            .filter_map(|id| tree.frags.get(id).cloned())
            .collect();
        if window.len() != n {
            return Err(MemoryError::Invalid(format!(
                "narrative {} lists fragments the store no longer has",
                nar.id
            )));
        }
        let all_texts: Vec<String> = nar
            .fragments()
            .filter_map(|id| tree.frags.get(&id).map(|f| f.text.clone()))
            .collect();
        let existing: Vec<&str> = nar.subplots.iter().map(|s| s.headline.as_str()).collect();
        let frag_refs: Vec<&Frag> = window.iter().collect();
        let (plan, facts) = match env.llm {
            Some(llm) => {
                let plan = consolidate::with_llm(llm, &nar.head, &existing, &frag_refs)?;
                let head = Head {
                    headline: plan.headline.clone().unwrap_or_else(|| nar.head.headline.clone()),
                    ..nar.head.clone()
                };
                let mut subs = existing.clone();
                subs.extend(plan.subplots.iter().map(|(h, _)| h.as_str()));
                let facts = semantic::with_llm(llm, &head, &subs, &frag_refs)?;
                (plan, facts)
            }
            None => {
                let mut vs = Vec::with_capacity(n);
                for f in &window {
                    vs.push(self.frag_vec(env, f.id)?);
                }
                let win: Vec<(&str, &[f32])> = window
                    .iter()
                    .zip(&vs)
                    .map(|(f, v)| (f.text.as_str(), v.as_slice()))
                    .collect();
                let texts: Vec<&str> = all_texts.iter().map(String::as_str).collect();
                let split = self.cfg.binding.similarity(&env.embedder.name()).split;
                let plan = consolidate::offline(&nar.head.headline, &existing, &win, &texts, split);
                let mut addressees = Vec::with_capacity(n);
                for f in &window {
                    addressees.push(match f.sources.first() {
                        Some(&s) => Self::addressee(env, s)?,
                        None => None,
                    });
                }
                let win: Vec<(&str, Option<&str>)> = window
                    .iter()
                    .zip(&addressees)
                    .map(|(f, a)| (f.text.as_str(), a.as_deref()))
                    .collect();
                (plan, semantic::offline(&win, &nar.head.characters))
            }
        };
        // Facts already in the graph are not stored again.
        let mut fresh = Vec::with_capacity(facts.len());
        for f in facts {
            let known = env
                .store
                .triples_about(env.user, self.name, &f.subject)?
                .iter()
                .any(|t| {
                    (
                        crate::graph::entity_key(&t.subject),
                        crate::graph::predicate_key(&t.predicate),
                        crate::graph::entity_key(&t.object),
                    ) == f.keys()
                });
            if !known {
                fresh.push(f);
            }
        }
        // Which sub-plot each fragment of the window falls in.
        let mut block_of = Vec::with_capacity(n);
        for (b, (_, len)) in plan.subplots.iter().enumerate() {
            block_of.extend(std::iter::repeat_n(b, *len));
        }
        let new_head = plan.headline.as_ref().map(|h| Head {
            headline: h.clone(),
            ..nar.head.clone()
        });
        let mut texts: Vec<String> = plan.subplots.iter().map(|(h, _)| h.clone()).collect();
        texts.extend(fresh.iter().map(|f| triple_text(&f.subject, &f.predicate, &f.object)));
        if let Some(h) = &new_head {
            texts.push(h.text());
        }
        let vecs = embed_batch(env.embedder, &texts)?;
        let dim = env.embedder.dim();
        let vec_at = |i: usize| vecs[i * dim..(i + 1) * dim].to_vec();
        let mut step = Step::default();
        let mut start = 0;
        for (b, (headline, len)) in plan.subplots.iter().enumerate() {
            let block = &window[start..start + len];
            let mut sources: Vec<i64> = block.iter().flat_map(|f| f.sources.iter().copied()).collect();
            sources.sort_unstable();
            sources.dedup();
            let said = block.first().and_then(|f| f.said_at);
            step.add.push(NewItem {
                kind: SUBPLOT.into(),
                text: headline.clone(),
                sources,
                said_at: said,
                refers_to: said,
                vector: Some(vec_at(b)),
                parent: Some(ItemRef::Stored(nar.id)),
            });
            start += len;
        }
        let n_sub = plan.subplots.len();
        for (i, f) in fresh.iter().enumerate() {
            let frag = &window[f.item];
            step.add.push(NewItem {
                kind: FACT.into(),
                text: texts[n_sub + i].clone(),
                sources: frag.sources.clone(),
                said_at: frag.said_at,
                refers_to: frag.said_at,
                vector: Some(vec_at(n_sub + i)),
                parent: Some(ItemRef::InStep(block_of[f.item])),
            });
            step.triples.push(NewTriple {
                item: ItemRef::InStep(n_sub + i),
                subject: f.subject.clone(),
                predicate: f.predicate.clone(),
                object: f.object.clone(),
            });
        }
        for (f, &b) in window.iter().zip(&block_of) {
            step.update.push(ItemUpdate {
                id: f.id,
                parent: Some(ItemRef::InStep(b)),
                ..Default::default()
            });
        }
        if let Some(h) = &new_head {
            step.update.push(ItemUpdate {
                id: nar.id,
                text: Some(h.text()),
                vector: Some(vec_at(texts.len() - 1)),
                ..Default::default()
            });
        }
        step.turn = iteration;
        let ids = env.store.commit(env.user, self.name, &step)?;
        // Tree and indexes.
        let tree = self.tree_mut()?;
        let nr = &mut tree.narratives[pos];
        let mut start = 0;
        for ((headline, len), id) in plan.subplots.iter().zip(&ids) {
            nr.subplots.push(SubPlot {
                id: *id,
                headline: headline.clone(),
                fragments: window[start..start + len].iter().map(|f| f.id).collect(),
            });
            start += len;
        }
        nr.tail.drain(..n);
        if let Some(h) = &new_head {
            nr.head = h.clone();
        }
        let sub_texts: Vec<&str> = texts[..n_sub].iter().map(String::as_str).collect();
        self.subplots
            .add(env, &ids[..n_sub], iteration, &vecs[..n_sub * dim], &sub_texts)?;
        let n_fact = fresh.len();
        let fact_texts: Vec<&str> = texts[n_sub..n_sub + n_fact].iter().map(String::as_str).collect();
        self.facts.add(
            env,
            &ids[n_sub..n_sub + n_fact],
            iteration,
            &vecs[n_sub * dim..(n_sub + n_fact) * dim],
            &fact_texts,
        )?;
        if let Some(h) = &new_head {
            self.narratives
                .replace(env, nar.id, iteration, &vec_at(texts.len() - 1), &h.text())?;
        }
        Ok(ids.len())
    }

    /// Consolidates what is due after the last iteration: inactive
    /// narratives (or, `Rapid`, all with new fragments; `all`: every
    /// narrative with new fragments, as when the conversation ends).
    fn settle(&mut self, env: &mut Env<'_>, all: bool) -> Result<usize> {
        if self.cfg.consolidation == Consolidation::None || !self.initialised(env)? {
            return Ok(0);
        }
        self.load_tree(env)?;
        let iteration = self.state_i64(env, ITERATION)?.unwrap_or(0);
        let rapid = self.cfg.consolidation == Consolidation::Rapid;
        let mut made = 0;
        let count = self.tree()?.narratives.len();
        for pos in 0..count {
            loop {
                let nar = &self.tree()?.narratives[pos];
                let due = !nar.tail.is_empty() && (all || rapid || nar.last_bound < iteration);
                if !due {
                    break;
                }
                let n = nar.tail.len().min(self.cfg.window.max(1));
                made += self.consolidate(env, pos, n, iteration)?;
            }
        }
        Ok(made)
    }

    /// Binds the stored messages not processed yet, iteration by
    /// iteration (`closing`: a last incomplete pair is bound too, and an
    /// uninitialised memory is initialised from what there is).
    fn run(
        &mut self,
        env: &mut Env<'_>,
        closing: bool,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<IngestReport> {
        let mut report = IngestReport::default();
        self.load_tree(env)?;
        report.items += self.settle(env, false)?;
        let through = env.store.progress(env.user, self.name)?;
        let pending = env.store.messages_after(env.user, through)?;
        let total = pending.len();
        let mut i = 0;
        if !self.initialised(env)? {
            let t = self.cfg.init_turns.max(1);
            let n = if pending.len() >= t {
                t
            } else if closing {
                pending.len()
            } else {
                0
            };
            if n == 0 {
                return Ok(report);
            }
            report.items += self.bind(env, &pending[..n], 0, true)?;
            report.items += self.settle(env, false)?;
            report.messages += n;
            i = n;
            progress(i, total);
        }
        let mut iteration = self.state_i64(env, ITERATION)?.unwrap_or(0);
        while i < pending.len() {
            let n = self.take(&pending[i..], closing);
            if n == 0 {
                break;
            }
            iteration += 1;
            report.items += self.bind(env, &pending[i..i + n], iteration, false)?;
            report.items += self.settle(env, false)?;
            report.messages += n;
            i += n;
            progress(i, total);
        }
        Ok(report)
    }

    fn live(&mut self, env: &Env<'_>) -> Result<usize> {
        Ok(self.fragments.len(env)? + self.narratives.len(env)? + self.subplots.len(env)? + self.facts.len(env)?)
    }

    /// The ranked items for `query`: leaves (each under its story and
    /// sub-plot headers, its fragments best first) interleaved one to one
    /// with facts not already said by the fragments above; at most
    /// `leaves` leaves and `facts` facts when given; at most `k` items.
    fn rank(
        &mut self,
        env: &mut Env<'_>,
        query: &str,
        k: usize,
        max_leaves: Option<usize>,
        max_facts: Option<usize>,
    ) -> Result<Vec<Retrieved>> {
        if query.trim().is_empty() {
            return Err(MemoryError::Invalid("the query is empty".into()));
        }
        self.load_tree(env)?;
        let window = self.cfg.window.max(1);
        let leaves = self.tree()?.leaves(window);
        let q = query_vector(env, query)?;
        let search = |v: &mut Vectors, env: &Env<'_>, depth: usize| -> Result<HashMap<i64, f32>> {
            let n = v.len(env)?;
            if n == 0 {
                return Ok(HashMap::new());
            }
            Ok(retrieve::normalise(&v.search_with(
                env,
                query,
                q.as_deref(),
                depth.min(n),
            )?))
        };
        let content = search(&mut self.fragments, env, k.saturating_mul(4).max(64))?;
        let narr = search(&mut self.narratives, env, usize::MAX)?;
        let subs = search(&mut self.subplots, env, usize::MAX)?;
        let facts = search(&mut self.facts, env, k.saturating_mul(4).max(32))?;
        // Entities: capitalised names, characters and graph ends named.
        let triples = env.store.triples(env.user, self.name)?;
        let tree = self.tree()?;
        let mut known: Vec<String> = tree
            .narratives
            .iter()
            .flat_map(|n| n.head.characters.iter().map(|c| crate::graph::entity_key(c)))
            .chain(triples.iter().flat_map(|t| t.ends()))
            .collect();
        known.sort();
        known.dedup();
        let mut entities = retrieve::question_entities(query, &known);
        let scores = retrieve::score_leaves(tree, &leaves, &content, &narr, &subs, &entities, &self.cfg.retrieval);
        let mut order: Vec<usize> = (0..leaves.len()).collect();
        order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
        if let (Some(llm), false) = (env.llm, leaves.is_empty()) {
            let (chosen, named) = retrieve::llm_choose(llm, query, tree, &leaves, self.cfg.episodic_k.max(1))?;
            order.retain(|i| !chosen.contains(i));
            order.splice(0..0, chosen);
            for e in named {
                if !entities.contains(&e) {
                    entities.push(e);
                }
            }
        }
        if let Some(m) = max_leaves {
            order.truncate(m);
        }
        // Facts: one hop from the entities, and what the retriever found.
        let mut hop: HashSet<i64> = HashSet::new();
        for t in &triples {
            if t.ends().iter().any(|e| entities.contains(e)) {
                hop.insert(t.item_id);
            }
        }
        // A fact the retriever ranks last (normalised to 0) and no entity
        // reaches is not relevant.
        let mut fact_rank: Vec<(i64, f32)> = hop
            .iter()
            .map(|&id| {
                (
                    id,
                    facts.get(&id).copied().unwrap_or(0.0) + self.cfg.retrieval.hop_bonus,
                )
            })
            .chain(
                facts
                    .iter()
                    .filter(|(id, s)| !hop.contains(id) && **s > 0.0)
                    .map(|(&id, &s)| (id, s)),
            )
            .collect();
        fact_rank.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if let Some(m) = max_facts {
            // Room for those skipped as redundant below.
            fact_rank.truncate(m.saturating_mul(4));
        }
        let fact_items = resolve(env, &fact_rank)?;
        let mut fact_iter = fact_items.into_iter();
        let tree = self.tree()?;
        let mut out: Vec<(i64, f32)> = Vec::new();
        let mut listed: HashSet<i64> = HashSet::new();
        let mut shown: HashSet<usize> = HashSet::new();
        let mut kept_facts: Vec<Retrieved> = Vec::new();
        let fact_cap = max_facts.unwrap_or(usize::MAX);
        let mut next_fact = |listed: &HashSet<i64>, kept: &mut Vec<Retrieved>| -> Option<(i64, f32)> {
            if kept.len() >= fact_cap {
                return None;
            }
            for f in fact_iter.by_ref() {
                if !f.item.sources.iter().all(|s| listed.contains(s)) {
                    let r = (f.item.id, f.score);
                    kept.push(f);
                    return Some(r);
                }
            }
            None
        };
        for &li in &order {
            if out.len() >= k {
                break;
            }
            let leaf = &leaves[li];
            let score = scores[li];
            if shown.insert(leaf.narrative) {
                out.push((tree.narratives[leaf.narrative].id, score));
            }
            if let Some(s) = leaf.subplot {
                out.push((s, score));
            }
            let mut frags = leaf.fragments.clone();
            frags.sort_by(|a, b| {
                let (sa, sb) = (
                    content.get(a).copied().unwrap_or(0.0),
                    content.get(b).copied().unwrap_or(0.0),
                );
                sb.total_cmp(&sa).then(a.cmp(b))
            });
            for f in frags {
                out.push((f, score));
                if let Some(fr) = tree.frags.get(&f) {
                    listed.extend(fr.sources.iter().copied());
                }
            }
            if let Some(f) = next_fact(&listed, &mut kept_facts) {
                out.push(f);
            }
        }
        while out.len() < k {
            match next_fact(&listed, &mut kept_facts) {
                Some(f) => out.push(f),
                None => break,
            }
        }
        out.truncate(k);
        resolve(env, &out)
    }

    /// What an item says (answer recall): a story's headline line, the
    /// text of anything else, without the `Story:`, `Sub-plot (date):`,
    /// `Fact (date):` or `[date]` headers of [`Amory::render`].
    fn said(item: &Item) -> String {
        match item.kind.as_str() {
            NARRATIVE => Head::parse(&item.text).line(),
            _ => item.text.clone(),
        }
    }

    /// How an item shows in a prompt: story and sub-plot headers, dated
    /// fragments, dated facts.
    fn render(item: &Item) -> String {
        let date = item.said_at.map(human_date);
        match item.kind.as_str() {
            NARRATIVE => format!("Story: {}", Head::parse(&item.text).line()),
            SUBPLOT => match date {
                Some(d) => format!("Sub-plot ({d}): {}", item.text),
                None => format!("Sub-plot: {}", item.text),
            },
            FACT => match date {
                Some(d) => format!("Fact ({d}): {}", item.text),
                None => format!("Fact: {}", item.text),
            },
            _ => crate::pipeline::render_item(item),
        }
    }
}

impl Pipeline for Amory {
    fn name(&self) -> &'static str {
        self.name
    }

    fn ingest(&mut self, env: &mut Env<'_>, progress: &mut dyn FnMut(usize, usize)) -> Result<IngestReport> {
        check_embedder(env, self.name)?;
        let mut report = self.run(env, false, progress)?;
        report.live = self.live(env)?;
        if report.messages > 0 || report.items > 0 {
            self.save(env)?;
        }
        Ok(report)
    }

    fn flush(&mut self, env: &mut Env<'_>) -> Result<IngestReport> {
        check_embedder(env, self.name)?;
        let mut report = self.run(env, true, &mut |_, _| {})?;
        report.items += self.settle(env, true)?;
        report.live = self.live(env)?;
        self.save(env)?;
        Ok(report)
    }

    fn retrieve(&mut self, env: &mut Env<'_>, query: &str, k: usize) -> Result<Vec<Retrieved>> {
        self.rank(env, query, k, None, None)
    }

    fn standing_context(&mut self, env: &mut Env<'_>) -> Result<String> {
        let through = env.store.progress(env.user, self.name)?;
        let pending = env.store.messages_after(env.user, through)?;
        if pending.is_empty() {
            return Ok(String::new());
        }
        let mut s = String::from("Recent conversation, not yet in memory:\n");
        for m in &pending {
            if let Some(t) = m.msg.said_at {
                s.push_str(&format!("[{}] ", human_date(t)));
            }
            s.push_str(&crate::pipeline::message_text(m));
            s.push('\n');
        }
        Ok(s)
    }

    fn renderer(&self) -> fn(&Item) -> String {
        Amory::render
    }

    fn sayer(&self) -> fn(&Item) -> String {
        Amory::said
    }

    fn standing_said(&mut self, env: &mut Env<'_>) -> Result<String> {
        let through = env.store.progress(env.user, self.name)?;
        let pending = env.store.messages_after(env.user, through)?;
        Ok(pending
            .iter()
            .map(|m| crate::pipeline::message_text(m) + "\n")
            .collect())
    }

    fn compose(&mut self, env: &mut Env<'_>, query: &str, budget: usize) -> Result<Composed> {
        let retrieved = self.rank(
            env,
            query,
            usize::MAX,
            Some(self.cfg.episodic_k),
            Some(self.cfg.semantic_k),
        )?;
        let head = "<memories>\n";
        let tail = format!("</memories>\n<user> {query} </user>");
        let fixed = tokens::count(head) + tokens::count(&tail);
        check_question_fits(fixed, budget)?;
        let packer = Packer {
            standing: self.standing_context(env)?,
            render: Amory::render,
        };
        let mut room = budget - fixed;
        loop {
            let packed = packer.pack(&retrieved, Cut::Budget(room));
            let prompt = format!("{head}{}{tail}", packed.text);
            let t = tokens::count(&prompt);
            // Joining can merge a token or two across the seams.
            if t <= budget || room == 0 {
                return Ok(Composed {
                    tokens: t,
                    trimmed: retrieved.len() - packed.items,
                    included: retrieved[..packed.items].to_vec(),
                    prompt,
                });
            }
            room -= 1;
        }
    }

    fn show(&mut self, env: &mut Env<'_>) -> Result<String> {
        self.load_tree(env)?;
        let through = env.store.progress(env.user, self.name)?;
        let waiting = env.store.messages_after(env.user, through)?.len();
        let triples = env.store.triples(env.user, self.name)?;
        let tree = self.tree()?;
        let mut out = format!(
            "{} memory of `{}`: {} narratives, {} sub-plots, {} fragments, {} triples; {} messages, {} not yet bound{}\n",
            self.name,
            env.user,
            tree.narratives.len(),
            tree.subplot_count(),
            tree.fragment_count(),
            triples.len(),
            env.store.message_count(env.user)?,
            waiting,
            if self.initialised(env)? {
                String::new()
            } else {
                format!(
                    " (not initialised: the first {} turns are held as history)",
                    self.cfg.init_turns
                )
            }
        );
        let frag_line = |id: &i64| -> Result<Option<String>> {
            let Some(f) = tree.frags.get(id) else { return Ok(None) };
            let date = f.said_at.map(|t| format!("[{}] ", human_date(t))).unwrap_or_default();
            Ok(Some(format!(
                "#{id} {date}{} ({})",
                f.text,
                compact_refs(&env.store.source_refs(&f.sources)?)
            )))
        };
        for nar in &tree.narratives {
            out.push_str(&format!(
                "\n#{} {}, {} fragments\n",
                nar.id,
                nar.head.line(),
                nar.fragments().count()
            ));
            for sp in &nar.subplots {
                out.push_str(&format!("  ├ #{} sub-plot: {}\n", sp.id, sp.headline));
                for f in &sp.fragments {
                    if let Some(l) = frag_line(f)? {
                        out.push_str(&format!("  │   {l}\n"));
                    }
                }
            }
            if !nar.tail.is_empty() {
                out.push_str("  └ not yet consolidated:\n");
                for f in &nar.tail {
                    if let Some(l) = frag_line(f)? {
                        out.push_str(&format!("      {l}\n"));
                    }
                }
            }
        }
        out.push_str(&format!("\nSemantic graph ({} triples):\n", triples.len()));
        for t in &triples {
            out.push_str(&format!(
                "#{} ({} | {} | {}) ({})\n",
                t.item_id,
                t.subject,
                t.predicate,
                t.object,
                compact_refs(&env.store.source_refs(&t.sources)?)
            ));
        }
        Ok(out)
    }

    fn drop_item(&mut self, id: i64) {
        for v in [
            &mut self.fragments,
            &mut self.narratives,
            &mut self.subplots,
            &mut self.facts,
        ] {
            v.drop_items(&[id]);
        }
        self.vecs.remove(&id);
        self.tree = None;
    }

    fn replace_item(&mut self, env: &Env<'_>, id: i64, turn: i64, vector: &[f32], text: &str) -> Result<()> {
        let kind = env.store.item(id)?.map(|it| it.kind);
        self.tree = None;
        self.vecs.remove(&id);
        match kind.as_deref() {
            Some(FRAGMENT) => self.fragments.replace(env, id, turn, vector, text),
            Some(NARRATIVE) => self.narratives.replace(env, id, turn, vector, text),
            Some(SUBPLOT) => self.subplots.replace(env, id, turn, vector, text),
            Some(FACT) => self.facts.replace(env, id, turn, vector, text),
            _ => Err(MemoryError::Invalid(format!("item {id} is not an Amory item"))),
        }
    }

    fn memory_bytes(&self) -> usize {
        self.fragments.memory_bytes()
            + self.narratives.memory_bytes()
            + self.subplots.memory_bytes()
            + self.facts.memory_bytes()
    }

    fn save(&self, env: &Env<'_>) -> Result<()> {
        self.fragments.save(env)?;
        self.narratives.save(env)?;
        self.subplots.save(env)?;
        self.facts.save(env)
    }
}
