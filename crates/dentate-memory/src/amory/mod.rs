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
//! Each phase's driver (`impl Amory`) lives in its phase's file beside the
//! phase's own types: `route`/`bind` in [`binding`], `consolidate`/`settle`
//! in [`consolidate`], `rank` in [`retrieve`]; this file holds the
//! pipeline's state, its loop and the [`Pipeline`] implementation.
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
use crate::llm::Llm;
use crate::pipeline::{
    Composed, Env, IngestReport, Packer, Parts, Pipeline, Retrieved, Vectors, check_embedder, check_question_fits,
    compact_refs, embed_batch, query_vector, resolve,
};
use crate::store::{Item, ItemRef, ItemUpdate, Message, NewItem, NewTriple, Step, as_stored};
use crate::time::human_date;
use crate::tokens;
use crate::vecmem::VectorMemoryConfig;
use binding::{BindingConfig, Target};
use consolidate::Consolidated;
pub use consolidate::Consolidation;
use retrieve::RetrievalConfig;
use semantic::Fact;
use std::collections::{BTreeMap, HashMap, HashSet};
use tree::{Frag, Head, Leaf, SubPlot, Tree};

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
    /// Show and say fragments and facts with the resolution of their
    /// relative dates appended ([`crate::dates::annotate`]), as RAG, HEMA
    /// and Nemori store theirs (default on; the stored texts stay as said).
    pub resolve_dates: bool,
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
            resolve_dates: true,
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

/// A consolidation window: the narrative, its oldest unconsolidated
/// fragments, its sub-plots' headlines and every fragment's text.
struct Window<'a> {
    nar: &'a tree::Narrative,
    frags: &'a [Frag],
    existing: &'a [&'a str],
    all_texts: &'a [String],
}

/// Amory's model roles — routing messages to narratives (binding and
/// initialisation), consolidation with semanticization, and the leaf
/// choice of coherence retrieval — with a model ([`WithModel`]) or offline
/// ([`Offline`]); [`roles`] picks one, once per ingest or retrieval. The
/// offline bodies need the pipeline's caches, so both forms call methods
/// of [`Amory`] in the phase files.
trait Roles {
    /// Whether a model plays the roles (offline binding also reads
    /// characters from the fragments' text).
    fn calls_model(&self) -> bool;
    /// Where the fragments of `msgs` go (initialisation when `init`).
    fn route(&self, amory: &mut Amory, env: &Env<'_>, msgs: &[Message], iteration: i64, init: bool) -> Result<Bound>;
    /// A window's sub-plots (and new headline) and its facts.
    fn consolidate(&self, amory: &mut Amory, env: &Env<'_>, w: &Window<'_>) -> Result<(Consolidated, Vec<Fact>)>;
    /// The leaves the model puts first for `question` and the entities it
    /// names; `None` offline (the scored order stands).
    fn choose(
        &self,
        question: &str,
        tree: &Tree,
        leaves: &[Leaf],
        k: usize,
    ) -> Result<Option<(Vec<usize>, Vec<String>)>>;
}

/// [`Roles`] with a model (the Appendix A prompts).
struct WithModel<'a>(&'a dyn Llm);

impl Roles for WithModel<'_> {
    fn calls_model(&self) -> bool {
        true
    }
    fn route(&self, amory: &mut Amory, env: &Env<'_>, msgs: &[Message], _: i64, init: bool) -> Result<Bound> {
        amory.route_with_model(self.0, env, msgs, init)
    }
    fn consolidate(&self, _: &mut Amory, _: &Env<'_>, w: &Window<'_>) -> Result<(Consolidated, Vec<Fact>)> {
        Amory::plan_with_model(self.0, w)
    }
    fn choose(
        &self,
        question: &str,
        tree: &Tree,
        leaves: &[Leaf],
        k: usize,
    ) -> Result<Option<(Vec<usize>, Vec<String>)>> {
        if leaves.is_empty() {
            return Ok(None);
        }
        Ok(Some(retrieve::llm_choose(self.0, question, tree, leaves, k)?))
    }
}

/// [`Roles`] offline (each phase file says how, and where it is weaker).
struct Offline;

impl Roles for Offline {
    fn calls_model(&self) -> bool {
        false
    }
    fn route(&self, amory: &mut Amory, env: &Env<'_>, msgs: &[Message], iteration: i64, init: bool) -> Result<Bound> {
        amory.route_offline(env, msgs, iteration, init)
    }
    fn consolidate(&self, amory: &mut Amory, env: &Env<'_>, w: &Window<'_>) -> Result<(Consolidated, Vec<Fact>)> {
        amory.plan_offline(env, w)
    }
    fn choose(&self, _: &str, _: &Tree, _: &[Leaf], _: usize) -> Result<Option<(Vec<usize>, Vec<String>)>> {
        Ok(None)
    }
}

/// The roles for a run: the model when there is one, else offline.
fn roles(llm: Option<&dyn Llm>) -> Box<dyn Roles + '_> {
    match llm {
        Some(llm) => Box::new(WithModel(llm)),
        None => Box::new(Offline),
    }
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
        let roles = roles(env.llm);
        let roles = roles.as_ref();
        self.load_tree(env)?;
        report.items += self.settle(env, roles, false)?;
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
            report.items += self.bind(env, roles, &pending[..n], 0, true)?;
            report.items += self.settle(env, roles, false)?;
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
            report.items += self.bind(env, roles, &pending[i..i + n], iteration, false)?;
            report.items += self.settle(env, roles, false)?;
            report.messages += n;
            i += n;
            progress(i, total);
        }
        Ok(report)
    }

    fn live(&mut self, env: &Env<'_>) -> Result<usize> {
        Ok(self.fragments.len(env)? + self.narratives.len(env)? + self.subplots.len(env)? + self.facts.len(env)?)
    }

    /// What an item says (answer recall): a story's headline line, the
    /// text of anything else, without the `Story:`, `Sub-plot:` or
    /// `Fact:` of [`Amory::parts`] or the date line it is shown under.
    fn said(item: &Item) -> String {
        match item.kind.as_str() {
            NARRATIVE => Head::parse(&item.text).line(),
            _ => item.text.clone(),
        }
    }

    /// [`Amory::said`] with the relative dates of fragments and facts
    /// resolved ([`AmoryConfig::resolve_dates`]).
    fn said_resolved(item: &Item) -> String {
        Self::resolved(item, Self::said(item))
    }

    /// `text` of `item` with its relative dates resolved, for a fragment
    /// or a fact with a time.
    fn resolved(item: &Item, text: String) -> String {
        match (item.kind.as_str(), item.said_at) {
            (FRAGMENT | FACT, Some(t)) => crate::dates::annotate(&text, t),
            _ => text,
        }
    }

    /// [`Amory::parts`] with the relative dates of fragments and facts
    /// resolved ([`AmoryConfig::resolve_dates`]).
    fn parts_resolved(item: &Item) -> Parts {
        let p = Self::parts(item);
        Parts {
            body: Self::resolved(item, p.body),
            ..p
        }
    }

    /// How an item shows in a prompt: story headers undated, sub-plots,
    /// facts and fragments under their day.
    fn parts(item: &Item) -> Parts {
        let time = item.said_at;
        match item.kind.as_str() {
            NARRATIVE => Parts {
                time: None,
                body: format!("Story: {}", Head::parse(&item.text).line()),
                speaker_label: false,
            },
            SUBPLOT => Parts {
                time,
                body: format!("Sub-plot: {}", item.text),
                speaker_label: false,
            },
            FACT => Parts {
                time,
                body: format!("Fact: {}", item.text),
                speaker_label: false,
            },
            _ => crate::pipeline::item_parts(item),
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
        Ok(report)
    }

    fn flush(&mut self, env: &mut Env<'_>) -> Result<IngestReport> {
        check_embedder(env, self.name)?;
        let mut report = self.run(env, true, &mut |_, _| {})?;
        report.items += self.settle(env, roles(env.llm).as_ref(), true)?;
        report.live = self.live(env)?;
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

    fn parts(&self) -> fn(&Item) -> Parts {
        if self.cfg.resolve_dates {
            Amory::parts_resolved
        } else {
            Amory::parts
        }
    }

    fn sayer(&self) -> fn(&Item) -> String {
        if self.cfg.resolve_dates {
            Amory::said_resolved
        } else {
            Amory::said
        }
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
        let packer = Packer::new(self.standing_context(env)?, self.parts()).for_context(&env.context, query);
        Ok(packer.compose(&retrieved, head, &tail, budget))
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

    fn index_files(&self, env: &Env<'_>) -> Vec<std::path::PathBuf> {
        [&self.fragments, &self.narratives, &self.subplots, &self.facts]
            .into_iter()
            .flat_map(|v| v.files(env))
            .collect()
    }

    fn images(&self, env: &Env<'_>) -> Vec<(std::path::PathBuf, Vec<u8>)> {
        [&self.fragments, &self.narratives, &self.subplots, &self.facts]
            .into_iter()
            .flat_map(|v| v.images(env))
            .collect()
    }

    fn load(&mut self, env: &Env<'_>) -> Result<()> {
        for v in [
            &mut self.fragments,
            &mut self.narratives,
            &mut self.subplots,
            &mut self.facts,
        ] {
            v.load(env)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(kind: &str, text: &str) -> Item {
        crate::store::Item::sample("amory", kind, text)
    }

    #[test]
    fn fragments_and_facts_show_and_say_their_resolved_dates() {
        let frag = item(FRAGMENT, "Ann: I adopted a cat yesterday.");
        assert_eq!(
            Amory::said_resolved(&frag),
            "Ann: I adopted a cat yesterday. (yesterday = 7 May 2023)"
        );
        assert_eq!(Amory::parts_resolved(&frag).body, Amory::said_resolved(&frag));
        assert_eq!(Amory::parts_resolved(&frag).time, frag.said_at);
        let fact = item(FACT, "Ann adopted a cat last week.");
        assert!(
            Amory::parts_resolved(&fact)
                .body
                .starts_with("Fact: Ann adopted a cat last week. (last week = ")
        );
        // Stored as said; without resolution nothing is appended.
        assert_eq!(Amory::said(&frag), frag.text);
        assert_eq!(Amory::parts(&frag).body, frag.text);
        // Story and sub-plot headers are not annotated.
        let sub = item(SUBPLOT, "Ann's cat, adopted yesterday");
        assert_eq!(
            Amory::parts_resolved(&sub).body,
            "Sub-plot: Ann's cat, adopted yesterday"
        );
    }
}
