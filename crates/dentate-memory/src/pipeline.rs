//! The interface every memory pipeline implements, and what the pipelines
//! share: batched embedding, retrieval through a [`VectorMemory`], and
//! provenance lookup.

use crate::error::{MemoryError, Result};
use crate::llm::Llm;
use crate::store::{Item, Message, Store};
use crate::time::human_date;
use crate::tokens;
use crate::vecmem::{VectorMemory, VectorMemoryConfig};
use dentate_core::{Feedback, Fusion, LexicalIndex, SalienceParams, fuse};
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
    /// How items are found for a query.
    pub retriever: Retriever,
    /// How retrieved items are ranked and packed for a prompt.
    pub context: ContextConfig,
}

/// How a pipeline finds items for a query: by embedding similarity, by
/// BM25 over the items' words, or both fused.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Retriever {
    /// Cosine similarity of embeddings.
    Dense,
    /// BM25 over the items' text (`dentate_core::LexicalIndex`).
    Bm25,
    /// Both, fused (each list retrieved `max(4k, 20)` deep).
    Hybrid(Fusion),
}

/// The retriever for a sentence embedder: hybrid with [`DEFAULT_FUSION`].
/// A memory picks its default by embedder instead
/// ([`Retriever::default_for`]).
impl Default for Retriever {
    fn default() -> Self {
        Retriever::Hybrid(DEFAULT_FUSION)
    }
}

/// The default fusion of dense and BM25 lists for sentence embedders (see
/// [`dentate_core::DEFAULT_FUSION`]: 0.5 dense + 0.5 BM25, chosen on the
/// tune split of `locomo-dev.json` with MiniLM, never on held-out or test
/// data).
pub const DEFAULT_FUSION: Fusion = dentate_core::DEFAULT_FUSION;

/// The default fusion for the hashing embedder: 0.3 dense + 0.7 BM25. Its
/// dense list is weaker than a sentence embedder's, and on the tune split
/// of `locomo-dev.json` (RAG, dense weights 0.1 to 0.7) it picks 0.3 where
/// MiniLM picks 0.5 (see BENCHMARKS.md).
pub const HASHING_FUSION: Fusion = Fusion::Weighted { dense_weight: 0.3 };

/// Whether an embedder name (`Embedder::name`, e.g. `hash-384`, or the
/// CLI's `hash` / `hash:N`) is the hashing embedder, whose defaults differ.
pub fn is_hashing_embedder(name: &str) -> bool {
    name.starts_with("hash")
}

impl Retriever {
    /// Parses `dense`, `bm25`, `hybrid` ([`DEFAULT_FUSION`], whatever the
    /// embedder: [`Retriever::parse_for`] resolves it for one), `rrf[:C]` or
    /// `weighted:W` (W = dense weight in `[0, 1]`).
    pub fn parse(s: &str) -> Result<Self> {
        match s {
            "dense" => Ok(Retriever::Dense),
            "bm25" => Ok(Retriever::Bm25),
            _ => Fusion::parse(s).map(Retriever::Hybrid).map_err(|_| {
                MemoryError::Invalid(format!(
                    "unknown retriever `{s}` (dense, bm25, hybrid, rrf[:C], weighted:W)"
                ))
            }),
        }
    }

    /// The default retriever for the embedder called `embedder`: hybrid
    /// with [`HASHING_FUSION`] for the hashing embedder, with
    /// [`DEFAULT_FUSION`] for any other (the weights the tune split picks
    /// for each).
    pub fn default_for(embedder: &str) -> Self {
        if is_hashing_embedder(embedder) {
            Retriever::Hybrid(HASHING_FUSION)
        } else {
            Retriever::Hybrid(DEFAULT_FUSION)
        }
    }

    /// Parses like [`Retriever::parse`], with `hybrid` meaning the default
    /// for the embedder called `embedder` ([`Retriever::default_for`]).
    pub fn parse_for(s: &str, embedder: &str) -> Result<Self> {
        if s.trim() == "hybrid" {
            Ok(Retriever::default_for(embedder))
        } else {
            Retriever::parse(s)
        }
    }

    /// A short name (`dense`, `bm25`, `rrf:60`, `weighted:0.5`).
    pub fn name(&self) -> String {
        match self {
            Retriever::Dense => "dense".into(),
            Retriever::Bm25 => "bm25".into(),
            Retriever::Hybrid(Fusion::Rrf { c }) => format!("rrf:{c}"),
            Retriever::Hybrid(Fusion::Weighted { dense_weight }) => format!("weighted:{dense_weight}"),
        }
    }
}

/// Weights of the context ranking. Scores are the pipeline's own, divided
/// by the best one's (negative ones count as 0); an item's new score is
/// its own plus `session` × its session's score (the best item's plus
/// half the second best's) plus `neighbour` × the best score of an item
/// adjacent to it (the messages just before or after its own, in the same
/// session) plus `speaker` when a person the question names said it (half
/// when its text only mentions them) plus `temporal` when the question
/// asks when and its text carries a date. With `diversity` > 0 the
/// items are then chosen one by one, each time the best new score less
/// `diversity` × its word overlap with the closest item already chosen
/// (maximal marginal relevance).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ContextConfig {
    /// Weight of the session's score.
    pub session: f32,
    /// Weight of the best adjacent item's score.
    pub neighbour: f32,
    /// Weight of being said by (1) or mentioning (½) a speaker the
    /// question names ([`crate::context::named_speakers`]).
    pub speaker: f32,
    /// Weight of carrying a date ([`crate::dates::find`]) when the
    /// question asks when ([`crate::context::asks_when`]).
    pub temporal: f32,
    /// Weight of the overlap penalty in the one-by-one choice (0: none).
    pub diversity: f32,
    /// How many of the best items bring in the items made from the
    /// messages just before and after theirs in the same session, when
    /// the search did not find them (score 0: ranked by their session
    /// and neighbour scores; [`crate::context::expand`]); 0: none.
    pub expand: usize,
    /// How many times deeper than asked the pipeline's list is retrieved
    /// to re-rank (at least 1).
    pub pool: f32,
    /// Within a budget, items packed past the first this many show only
    /// their sentences about the question ([`Packer::focused`]);
    /// `None`: every item whole.
    pub snippets: Option<usize>,
    /// Pseudo-relevance feedback for the BM25 side of the BM25 and hybrid
    /// retrievers ([`LexicalIndex::search_expanded`]); `None`: the query
    /// as asked.
    pub feedback: Option<Feedback>,
}

/// The context ranking's defaults: chosen on the tune split of
/// `locomo-dev.json` (conv-26, conv-30) with MiniLM, never on the
/// held-out conversations (see BENCHMARKS.md): session 0.4, neighbour
/// 0.2, temporal 0.3, the neighbours of the best 5 brought in; the
/// speaker boost, diversity, snippets and feedback were measured and left
/// off.
pub const DEFAULT_CONTEXT: ContextConfig = ContextConfig {
    session: 0.4,
    neighbour: 0.2,
    speaker: 0.0,
    temporal: 0.3,
    diversity: 0.0,
    expand: 5,
    pool: 2.0,
    snippets: None,
    feedback: None,
};

impl Default for ContextConfig {
    fn default() -> Self {
        DEFAULT_CONTEXT
    }
}

/// The keys [`ContextConfig::set`] takes.
pub const CONTEXT_KEYS: &[&str] = &[
    "context.session",
    "context.neighbour",
    "context.speaker",
    "context.temporal",
    "context.diversity",
    "context.expand",
    "context.pool",
    "context.snippets",
    "context.feedback",
];

impl ContextConfig {
    /// No re-ranking, no snippets, no feedback.
    pub fn off() -> Self {
        ContextConfig {
            session: 0.0,
            neighbour: 0.0,
            speaker: 0.0,
            temporal: 0.0,
            diversity: 0.0,
            expand: 0,
            pool: 1.0,
            snippets: None,
            feedback: None,
        }
    }

    /// No re-ranking: every weight 0.
    pub fn is_off(&self) -> bool {
        [
            self.session,
            self.neighbour,
            self.speaker,
            self.temporal,
            self.diversity,
        ]
        .iter()
        .all(|&w| w == 0.0)
    }

    /// Sets one of [`CONTEXT_KEYS`] (`context.session=0.3`); a weight must
    /// be finite and in `[0, 10]`, the pool in `[1, 16]`; snippets `off`
    /// or the number of items kept whole (up to 10,000); feedback `off` or
    /// `DOCS:TERMS:WEIGHT` ([`Feedback`], e.g. `3:10:0.3`).
    pub fn set(&mut self, key: &str, value: &str) -> Result<()> {
        if key == "context.feedback" {
            self.feedback = match value.trim() {
                "off" => None,
                v => Some(parse_feedback(v).ok_or_else(|| {
                    MemoryError::Invalid(format!(
                        "bad value `{value}` for `{key}` (off, or DOCS:TERMS:WEIGHT such as 3:10:0.3)"
                    ))
                })?),
            };
            return Ok(());
        }
        if key == "context.expand" {
            self.expand = value
                .trim()
                .parse::<usize>()
                .ok()
                .filter(|&n| n <= 1_000)
                .ok_or_else(|| {
                    MemoryError::Invalid(format!(
                        "bad value `{value}` for `{key}` (a number of items, 0 to 1000)"
                    ))
                })?;
            return Ok(());
        }
        if key == "context.snippets" {
            self.snippets = match value.trim() {
                "off" => None,
                v => Some(v.parse::<usize>().ok().filter(|&n| n <= 10_000).ok_or_else(|| {
                    MemoryError::Invalid(format!("bad value `{value}` for `{key}` (off or a number of items)"))
                })?),
            };
            return Ok(());
        }
        let v = value
            .trim()
            .parse::<f32>()
            .ok()
            .filter(|v| v.is_finite())
            .ok_or_else(|| MemoryError::Invalid(format!("bad value `{value}` for `{key}`")))?;
        let range = |lo: f32, hi: f32| -> Result<f32> {
            if (lo..=hi).contains(&v) {
                Ok(v)
            } else {
                Err(MemoryError::Invalid(format!(
                    "`{key}` must be between {lo} and {hi}, not {v}"
                )))
            }
        };
        match key {
            "context.session" => self.session = range(0.0, 10.0)?,
            "context.neighbour" => self.neighbour = range(0.0, 10.0)?,
            "context.speaker" => self.speaker = range(0.0, 10.0)?,
            "context.temporal" => self.temporal = range(0.0, 10.0)?,
            "context.diversity" => self.diversity = range(0.0, 10.0)?,
            "context.pool" => self.pool = range(1.0, 16.0)?,
            _ => {
                return Err(MemoryError::Invalid(format!(
                    "unknown setting `{key}` ({})",
                    CONTEXT_KEYS.join(", ")
                )));
            }
        }
        Ok(())
    }

    /// How deep to retrieve for `k` items.
    pub fn depth(&self, k: usize) -> usize {
        if self.is_off() {
            return k;
        }
        ((k as f64 * f64::from(self.pool)).ceil() as usize).max(k)
    }
}

/// `DOCS:TERMS:WEIGHT` as a checked [`Feedback`].
fn parse_feedback(v: &str) -> Option<Feedback> {
    let mut parts = v.split(':');
    let fb = Feedback {
        docs: parts.next()?.trim().parse().ok()?,
        terms: parts.next()?.trim().parse().ok()?,
        weight: parts.next()?.trim().parse().ok()?,
    };
    (parts.next().is_none() && fb.check().is_ok()).then_some(fb)
}

/// A retrieved memory item with its score and provenance.
#[derive(Debug, Clone, PartialEq)]
pub struct Retrieved {
    /// The item (text, source message ids, times).
    pub item: Item,
    /// The retriever's score for the query (cosine similarity with dense
    /// retrieval, the fused or BM25 score otherwise); 0 for an item the
    /// search did not find that the context ranking brought in beside a
    /// better one ([`crate::context::expand`]).
    pub score: f32,
    /// The caller's ids of the source messages (LoCoMo `dia_id`s), in order.
    pub source_refs: Vec<String>,
    /// The conversation session of its first source message, if known.
    pub session: Option<String>,
    /// The first and last position ([`Message::seq`]) of its source
    /// messages in that session, if known.
    pub span: Option<(i64, i64)>,
    /// Who said its source messages, each once, in the order said.
    pub speakers: Vec<String>,
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

/// Fails when the question and the frame around the memories (`fixed`
/// tokens) do not fit the `budget` on their own.
pub(crate) fn check_question_fits(fixed: usize, budget: usize) -> Result<()> {
    if fixed > budget {
        return Err(MemoryError::Invalid(format!(
            "the question takes {fixed} tokens, over the budget of {budget}"
        )));
    }
    Ok(())
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
    /// Processes what [`Pipeline::ingest`] holds back waiting for more
    /// messages (Nemori: the open episode buffer), as when a conversation
    /// has ended. Pipelines that hold nothing back do nothing.
    fn flush(&mut self, _env: &mut Env<'_>) -> Result<IngestReport> {
        Ok(IngestReport::default())
    }
    /// The `k` items most relevant to `query`, best first (candidates:
    /// what is returned to a caller is marked by
    /// [`Pipeline::mark_retrieved`]).
    fn retrieve(&mut self, env: &mut Env<'_>, query: &str, k: usize) -> Result<Vec<Retrieved>>;
    /// Notes that the items `ids` were returned for a query (HEMA: the
    /// retrieval bonus of salience decay). Pipelines that keep no such
    /// marks do nothing.
    fn mark_retrieved(&mut self, _env: &mut Env<'_>, _ids: &[i64]) -> Result<()> {
        Ok(())
    }
    /// A prompt for answering `query` within `budget` tokens.
    fn compose(&mut self, env: &mut Env<'_>, query: &str, budget: usize) -> Result<Composed>;
    /// What the prompt always carries before the retrieved items (HEMA:
    /// its compact summary), rendered as [`Pipeline::compose`] renders it;
    /// empty when there is nothing.
    fn standing_context(&mut self, _env: &mut Env<'_>) -> Result<String> {
        Ok(String::new())
    }
    /// How [`Pipeline::compose`] places one retrieved item in the prompt:
    /// the time it is grouped under and its line there (text plus title,
    /// kind or key, no date; [`Packer`]).
    fn parts(&self) -> fn(&Item) -> Parts {
        item_parts
    }
    /// What one item *says*, for answer recall: its text and any date
    /// resolution derived from it (`(yesterday = 7 May 2023)`), without the
    /// date line, title or kind [`Pipeline::parts`] shows around it.
    fn sayer(&self) -> fn(&Item) -> String {
        said_item
    }
    /// What [`Pipeline::standing_context`] says, without headers its
    /// rendering adds (by default the standing context itself).
    fn standing_said(&mut self, env: &mut Env<'_>) -> Result<String> {
        self.standing_context(env)
    }
    /// A readable listing of what the pipeline holds for the user (`dentate
    /// memory show`): by default every live item with its id, kind, date
    /// and source message ids; pipelines with structure print it.
    fn show(&mut self, env: &mut Env<'_>) -> Result<String> {
        list_items(env, self.name())
    }
    /// Removes a forgotten or deleted item from the pipeline's indexes.
    fn drop_item(&mut self, id: i64);
    /// Replaces a corrected item (made at `turn`) in the pipeline's indexes.
    fn replace_item(&mut self, env: &Env<'_>, id: i64, turn: i64, vector: &[f32], text: &str) -> Result<()>;
    /// Heap bytes of the pipeline's index.
    fn memory_bytes(&self) -> usize;
    /// The images of the pipeline's index files (the indexes that are
    /// open), with their paths. [`crate::Memory`] writes them after a
    /// change (or, with deferred saves, when asked to); pipelines never
    /// write their files themselves.
    fn images(&self, env: &Env<'_>) -> Vec<(std::path::PathBuf, Vec<u8>)>;
    /// Opens every index of the pipeline for the user (from its file, or
    /// rebuilt from the store when the file is missing or disagrees), as
    /// the store stands now. [`crate::Memory`] calls it before a change, so
    /// the files can then be removed: an index file on disk always agrees
    /// with the store.
    fn load(&mut self, env: &Env<'_>) -> Result<()>;
    /// The paths of the index files the pipeline keeps for the user, beside
    /// the store (whether or not they exist yet); none for an in-memory
    /// store. Erasure removes them.
    fn index_files(&self, env: &Env<'_>) -> Vec<std::path::PathBuf>;
}

/// Whether the store's vectors of `pipeline` for the user were made by this
/// embedder: `Ok(true)` when they were, `Ok(false)` when none is recorded
/// yet, an error naming both when another one made them. Reads only.
pub(crate) fn embedder_matches(env: &Env<'_>, pipeline: &str) -> Result<bool> {
    let name = format!("{}/{}", env.embedder.name(), env.embedder.dim());
    match env.store.state(env.user, pipeline, "embedder")? {
        Some(old) if old != name => Err(MemoryError::Invalid(format!(
            "user `{}` pipeline `{pipeline}` was built with embedder {old}, not {name}; use that embedder or a new memory directory",
            env.user
        ))),
        Some(_) => Ok(true),
        None => Ok(false),
    }
}

/// Checks that the store's vectors for this pipeline were made by the same
/// embedder, recording it on first use.
pub(crate) fn check_embedder(env: &mut Env<'_>, pipeline: &str) -> Result<()> {
    match embedder_matches(env, pipeline)? {
        true => Ok(()),
        false => {
            let step = crate::store::Step {
                state: vec![(
                    "embedder".into(),
                    format!("{}/{}", env.embedder.name(), env.embedder.dim()),
                )],
                ..Default::default()
            };
            env.store.commit(env.user, pipeline, &step)?;
            Ok(())
        }
    }
}

/// The vector memory and the BM25 index of one pipeline for one user,
/// opened on first use (both rebuilt from the store when their files
/// disagree with it).
#[derive(Debug)]
pub(crate) struct Vectors {
    pipeline: &'static str,
    kind: Option<&'static str>,
    cfg: VectorMemoryConfig,
    vm: Option<VectorMemory>,
    lexical: Option<LexicalIndex>,
}

impl Vectors {
    /// Not opened yet.
    pub(crate) fn new(pipeline: &'static str, cfg: VectorMemoryConfig) -> Self {
        Vectors {
            pipeline,
            kind: None,
            cfg,
            vm: None,
            lexical: None,
        }
    }

    /// Not opened yet; indexes only the pipeline's items of `kind` (a
    /// pipeline with several searchable kinds keeps one `Vectors` each).
    pub(crate) fn of_kind(pipeline: &'static str, kind: &'static str, cfg: VectorMemoryConfig) -> Self {
        Vectors {
            kind: Some(kind),
            ..Vectors::new(pipeline, cfg)
        }
    }

    /// `user.pipeline[.kind].ext` beside the store; `None` for a store
    /// without a directory (its indexes live in memory and are rebuilt
    /// from the store when it is reopened).
    fn path(&self, env: &Env<'_>, ext: &str) -> Option<std::path::PathBuf> {
        let name = match self.kind {
            Some(kind) => format!("{}.{}.{kind}.{ext}", env.user, self.pipeline),
            None => format!("{}.{}.{ext}", env.user, self.pipeline),
        };
        env.store.dir().map(|d| d.join(name))
    }

    fn lexical_path(&self, env: &Env<'_>) -> Option<std::path::PathBuf> {
        self.path(env, "lex")
    }

    /// Number of live items in the vector index.
    pub(crate) fn len(&mut self, env: &Env<'_>) -> Result<usize> {
        Ok(self.get(env)?.len())
    }

    /// The BM25 index, loaded (or rebuilt from the store's item texts) on
    /// first use.
    pub(crate) fn lexical(&mut self, env: &Env<'_>) -> Result<&mut LexicalIndex> {
        self.lexical_without(env, &[])
    }

    /// [`Vectors::lexical`], opened as the store stood before the items
    /// `fresh` were committed (they are about to be added): the file saved
    /// before then agrees with that, and is not rebuilt for nothing.
    fn lexical_without(&mut self, env: &Env<'_>, fresh: &[i64]) -> Result<&mut LexicalIndex> {
        if self.lexical.is_none() {
            let path = self.lexical_path(env);
            let mut texts = env.store.texts(env.user, self.pipeline, self.kind)?;
            if !fresh.is_empty() {
                let fresh: std::collections::HashSet<i64> = fresh.iter().copied().collect();
                texts.retain(|(id, _)| !fresh.contains(id));
            }
            let loaded = path.and_then(|p| LexicalIndex::load(&p).ok()).filter(|l| {
                l.len() == texts.len()
                    && texts
                        .iter()
                        .all(|(id, _)| u64::try_from(*id).is_ok_and(|id| l.contains(id)))
            });
            let idx = match loaded {
                Some(l) => l,
                None => {
                    let mut l = LexicalIndex::new();
                    let ids: Vec<u64> = texts.iter().filter_map(|(id, _)| u64::try_from(*id).ok()).collect();
                    let t: Vec<&str> = texts.iter().map(|(_, t)| t.as_str()).collect();
                    l.add(&ids, &t)?;
                    l
                }
            };
            self.lexical = Some(idx);
        }
        self.lexical
            .as_mut()
            .ok_or_else(|| MemoryError::Invalid("lexical index unavailable".into()))
    }

    /// The `k` best items for `query` with `env.retriever`: `(item id, score)`.
    pub(crate) fn search(&mut self, env: &Env<'_>, query: &str, k: usize) -> Result<Vec<(i64, f32)>> {
        let q = query_vector(env, query)?;
        self.search_with(env, query, q.as_deref(), k)
    }

    /// [`Vectors::search`] with the query's embedding already made by
    /// [`query_vector`] (a pipeline searching several indexes embeds it
    /// once).
    pub(crate) fn search_with(
        &mut self,
        env: &Env<'_>,
        query: &str,
        q: Option<&[f32]>,
        k: usize,
    ) -> Result<Vec<(i64, f32)>> {
        let q = match (env.retriever, q) {
            (Retriever::Bm25, _) => Vec::new(),
            (_, Some(q)) => q.to_vec(),
            (_, None) => embed_query(env, query)?,
        };
        let to_pairs = |hits: Vec<dentate_core::Hit>| -> Vec<(i64, f32)> {
            hits.into_iter()
                .filter_map(|h| i64::try_from(h.id).ok().map(|id| (id, h.score)))
                .collect()
        };
        let as_hits = |pairs: &[(i64, f32)]| -> Vec<dentate_core::Hit> {
            pairs
                .iter()
                .filter_map(|&(id, score)| u64::try_from(id).ok().map(|id| dentate_core::Hit { id, score }))
                .collect()
        };
        let feedback = env.context.feedback;
        let bm25 = |l: &LexicalIndex, k: usize| match feedback {
            Some(fb) => l.search_expanded(query, k, fb),
            None => l.search(query, k),
        };
        match env.retriever {
            Retriever::Dense => self.get(env)?.search(&q, k),
            Retriever::Bm25 => {
                embed_query_check(query)?;
                Ok(to_pairs(bm25(self.lexical(env)?, k)?))
            }
            Retriever::Hybrid(fusion) => {
                let depth = dentate_core::candidate_depth(k);
                let dense = as_hits(&self.get(env)?.search(&q, depth)?);
                let lexical = bm25(self.lexical(env)?, depth)?;
                Ok(to_pairs(fuse(&dense, &lexical, fusion, k)?))
            }
        }
    }

    /// The vector memory, opened (or rebuilt from the store) on first use.
    pub(crate) fn get(&mut self, env: &Env<'_>) -> Result<&mut VectorMemory> {
        self.get_without(env, &[])
    }

    /// [`Vectors::get`], opened as the store stood before the items `fresh`
    /// were committed (see [`Vectors::lexical_without`]).
    fn get_without(&mut self, env: &Env<'_>, fresh: &[i64]) -> Result<&mut VectorMemory> {
        if self.vm.is_none() {
            let path = self.path(env, "dnt");
            let mut stored = env.store.vectors(env.user, self.pipeline, self.kind)?;
            if !fresh.is_empty() {
                let fresh: std::collections::HashSet<i64> = fresh.iter().copied().collect();
                stored.retain(|(id, _, _)| !fresh.contains(id));
            }
            let vm = VectorMemory::open(path.as_deref(), env.embedder.dim(), self.cfg.clone(), stored)?;
            // The store's retrieval marks are the truth; the index file may
            // predate the last retrievals (it is saved after ingestion).
            vm.restore_retrievals(&env.store.retrievals(env.user, self.pipeline, self.kind)?);
            self.vm = Some(vm);
        }
        self.vm
            .as_mut()
            .ok_or_else(|| MemoryError::Invalid("vector index unavailable".into()))
    }

    /// Adds items made at `turn` (vectors and texts), then rebuilds the
    /// vector index from the store when it has outgrown its kind.
    pub(crate) fn add(&mut self, env: &Env<'_>, ids: &[i64], turn: i64, vectors: &[f32], texts: &[&str]) -> Result<()> {
        let lex_ids: Vec<u64> = ids.iter().filter_map(|&i| u64::try_from(i).ok()).collect();
        self.lexical_without(env, ids)?.add(&lex_ids, texts)?;
        let (pipeline, kind) = (self.pipeline, self.kind);
        let vm = self.get_without(env, ids)?;
        if !ids.is_empty() {
            vm.add(ids, turn, vectors)?;
        }
        vm.set_turn(turn);
        if vm.needs_rebuild() {
            vm.rebuild(env.store.vectors(env.user, pipeline, kind)?)?;
            vm.restore_retrievals(&env.store.retrievals(env.user, pipeline, kind)?);
        }
        Ok(())
    }

    /// Replaces one item's vector and text in both indexes, keeping the
    /// turn it was made at (its salience age) and the index clock.
    pub(crate) fn replace(&mut self, env: &Env<'_>, id: i64, turn: i64, vector: &[f32], text: &str) -> Result<()> {
        let lex_id = u64::try_from(id).map_err(|_| MemoryError::Invalid(format!("item id {id} is negative")))?;
        self.lexical(env)?.add(&[lex_id], &[text])?;
        let vm = self.get(env)?;
        let now = vm.turn();
        vm.add(&[id], turn, vector)?;
        vm.set_turn(now);
        Ok(())
    }

    /// Removes items from both indexes, if they are open.
    pub(crate) fn drop_items(&mut self, ids: &[i64]) {
        if let Some(vm) = self.vm.as_mut() {
            vm.remove(ids);
        }
        if let Some(l) = self.lexical.as_mut() {
            let ids: Vec<u64> = ids.iter().filter_map(|&i| u64::try_from(i).ok()).collect();
            l.remove(&ids);
            compact_if_sparse(l);
        }
    }

    /// Forgetting: prunes the vector index's lowest-salience items and
    /// drops them from the BM25 index too; returns their ids.
    pub(crate) fn prune(&mut self, env: &Env<'_>, fraction: f64, params: &SalienceParams) -> Result<Vec<i64>> {
        let gone = self.get(env)?.prune(fraction, params)?;
        let ids: Vec<u64> = gone.iter().filter_map(|&i| u64::try_from(i).ok()).collect();
        let l = self.lexical(env)?;
        l.remove(&ids);
        compact_if_sparse(l);
        Ok(gone)
    }

    /// Heap bytes of both indexes (0 before they are opened).
    pub(crate) fn memory_bytes(&self) -> usize {
        self.vm.as_ref().map_or(0, VectorMemory::memory_bytes)
            + self.lexical.as_ref().map_or(0, LexicalIndex::memory_bytes)
    }

    /// The paths of both index files (vector and BM25).
    pub(crate) fn files(&self, env: &Env<'_>) -> Vec<std::path::PathBuf> {
        [self.path(env, "dnt"), self.lexical_path(env)]
            .into_iter()
            .flatten()
            .collect()
    }

    /// Opens both indexes (see [`Pipeline::load`]).
    pub(crate) fn load(&mut self, env: &Env<'_>) -> Result<()> {
        self.get(env)?;
        self.lexical(env)?;
        Ok(())
    }

    /// The images of the index files that are open, with their paths.
    pub(crate) fn images(&self, env: &Env<'_>) -> Vec<(std::path::PathBuf, Vec<u8>)> {
        let mut out: Vec<_> = self.vm.as_ref().and_then(VectorMemory::image).into_iter().collect();
        if let (Some(l), Some(path)) = (&self.lexical, self.lexical_path(env)) {
            out.push((path, l.to_bytes()));
        }
        out
    }
}

/// Compacts a BM25 index once removed rows reach a quarter of the live ones.
fn compact_if_sparse(l: &mut LexicalIndex) {
    if l.tombstones() > 0 && l.tombstones() * 4 >= l.len().max(64) {
        l.compact();
    }
}

/// Refuses an empty query.
fn embed_query_check(query: &str) -> Result<()> {
    if query.trim().is_empty() {
        return Err(MemoryError::Invalid("the query is empty".into()));
    }
    Ok(())
}

/// The embedding of a query when `env.retriever` needs one (`None` for
/// BM25 alone).
pub(crate) fn query_vector(env: &Env<'_>, query: &str) -> Result<Option<Vec<f32>>> {
    match env.retriever {
        Retriever::Bm25 => {
            embed_query_check(query)?;
            Ok(None)
        }
        _ => embed_query(env, query).map(Some),
    }
}

/// The embedding of one query.
pub(crate) fn embed_query(env: &Env<'_>, query: &str) -> Result<Vec<f32>> {
    embed_query_check(query)?;
    Ok(env.embedder.embed(&[query])?)
}

/// Search hits resolved to live items with provenance, best first.
pub(crate) fn resolve(env: &Env<'_>, hits: &[(i64, f32)]) -> Result<Vec<Retrieved>> {
    let ids: Vec<i64> = hits.iter().map(|h| h.0).collect();
    let mut items: std::collections::HashMap<i64, Item> =
        env.store.items_by_id(&ids)?.into_iter().map(|it| (it.id, it)).collect();
    // Every hit's sources in one lookup.
    let mut sources: Vec<i64> = items.values().flat_map(|it| it.sources.iter().copied()).collect();
    sources.sort_unstable();
    sources.dedup();
    let msgs: std::collections::HashMap<i64, Message> =
        env.store.messages(&sources)?.into_iter().map(|m| (m.id, m)).collect();
    let mut out = Vec::with_capacity(hits.len());
    for &(id, score) in hits {
        let Some(item) = items.remove(&id) else { continue };
        let of_item: Vec<&Message> = item.sources.iter().filter_map(|s| msgs.get(s)).collect();
        let source_refs = of_item.iter().map(|m| m.to_ref()).collect();
        let session = of_item.first().map(|m| m.msg.session.clone());
        let in_session = of_item.iter().filter(|m| Some(&m.msg.session) == session.as_ref());
        let span = in_session
            .map(|m| (m.seq, m.seq))
            .reduce(|a, b| (a.0.min(b.0), a.1.max(b.1)));
        let mut speakers: Vec<String> = Vec::new();
        for m in &of_item {
            if !speakers.contains(&m.msg.speaker) {
                speakers.push(m.msg.speaker.clone());
            }
        }
        out.push(Retrieved {
            item,
            score,
            source_refs,
            session,
            span,
            speakers,
        });
    }
    Ok(out)
}

/// Every live item of `pipeline` for the user, one per line:
/// `#id kind [date] (sources) text`, after a count.
pub(crate) fn list_items(env: &Env<'_>, pipeline: &str) -> Result<String> {
    let items = env.store.items(env.user, pipeline, None)?;
    let mut out = format!(
        "{pipeline} memory of `{}`: {} items from {} messages\n",
        env.user,
        items.len(),
        env.store.message_count(env.user)?
    );
    for it in &items {
        out.push_str(&format!("#{:<6} {:<9} ", it.id, it.kind));
        out.push_str(&show_line(env, it)?);
        out.push('\n');
    }
    Ok(out)
}

/// One item as `memory show` prints it: `[date] text (sources)`, the text
/// on one line.
pub(crate) fn show_line(env: &Env<'_>, it: &Item) -> Result<String> {
    let refs = env.store.source_refs(&it.sources)?;
    let date = it.said_at.map(|t| format!("[{}] ", human_date(t))).unwrap_or_default();
    Ok(format!(
        "{date}{} ({})",
        it.text.replace('\n', " / "),
        compact_refs(&refs)
    ))
}

/// Source ids for display: all of them up to 4, else the first two, a
/// count and the last.
pub(crate) fn compact_refs(refs: &[String]) -> String {
    match refs {
        [] => "no sources".into(),
        r if r.len() <= 4 => r.join(", "),
        [a, b, .., z] => format!("{a}, {b}, … {z}; {} messages", refs.len()),
        r => r.join(", "),
    }
}

/// The text a message is embedded and shown as: `speaker: text`.
pub fn message_text(m: &Message) -> String {
    format!("{}: {}", m.msg.speaker, m.msg.text)
}

/// Where an item goes in a packed context ([`Packer`]): the time it is
/// grouped under (one date line per day) and the line it shows as there.
#[derive(Debug, Clone, PartialEq)]
pub struct Parts {
    /// When it was said; `None`: shown before every dated group, undated.
    pub time: Option<i64>,
    /// Its line under the date: text plus title, kind or key, no date.
    pub body: String,
    /// Whether the line begins with who said it (`Ann: …`), so that the
    /// name can show once per run of lines of that speaker
    /// ([`render_grouped`]); kind or key labels (`Fact: …`) always show.
    pub speaker_label: bool,
}

/// The default [`Parts`] of an item: its time and its text, which begins
/// with its speaker when it is a message ([`message_text`]).
pub fn item_parts(item: &Item) -> Parts {
    Parts {
        time: item.said_at,
        body: item.text.clone(),
        speaker_label: true,
    }
}

/// The day (UTC) a time falls on, as the date lines group it.
fn day(t: i64) -> i64 {
    t.div_euclid(86_400)
}

/// The line a day's items are shown under: `[8 May 2023]`.
fn date_line(t: i64) -> String {
    format!("[{}]\n", human_date(t))
}

/// Where an item's line goes: its group (day, `None` for undated lines,
/// which come first), then the order said (time, first source message,
/// id).
type LineKey = (Option<i64>, Option<i64>, Option<i64>, i64);

/// The groups [`Packer::pack`] has filled so far: each group's lines in
/// order, and its tokens as rendered.
type Groups = std::collections::HashMap<Option<i64>, (Vec<(LineKey, Parts)>, usize)>;

fn line_key(item: &Item, p: &Parts) -> LineKey {
    (p.time.map(day), p.time, item.sources.first().copied(), item.id)
}

/// The label a line begins with, as in `Caroline: I went…` or `Ann's
/// hobby: pottery`: its text before the first `": "`, when the line is one
/// line and the label one to four words, at most 40 bytes, without
/// sentence punctuation, brackets or quotes.
pub fn label_of(body: &str) -> Option<&str> {
    if body.contains('\n') {
        return None;
    }
    let at = body.find(": ")?;
    let label = &body[..at];
    let words = label.split_whitespace().count();
    let plain = !label.contains(['.', '!', '?', ';', ':', '"', '(', ')', '[', ']', '<', '>', '“', '”']);
    (at <= 40 && (1..=4).contains(&words) && plain && label.trim() == label).then_some(label)
}

/// One group's lines (in order, without its date line), each speaker's
/// name shown once per run: a line with [`Parts::speaker_label`] and the
/// same [`label_of`] as the line just before it shows without it (`Ann:
/// one` / `two` for two lines of Ann's).
fn push_lines<'a>(out: &mut String, lines: impl Iterator<Item = &'a Parts>) {
    let mut prev: Option<&str> = None;
    for p in lines {
        let label = if p.speaker_label { label_of(&p.body) } else { None };
        match (label, prev) {
            (Some(l), Some(q)) if l == q => out.push_str(&p.body[l.len() + 2..]),
            _ => out.push_str(&p.body),
        }
        out.push('\n');
        prev = label;
    }
}

/// One group as [`render_grouped`] shows it: its date line, if dated, then
/// its lines (given in order).
fn render_group<'a>(time: Option<i64>, lines: impl Iterator<Item = &'a Parts>) -> String {
    let mut out = time.map(date_line).unwrap_or_default();
    push_lines(&mut out, lines);
    out
}

/// Items rendered compactly, as every prompt holds them: undated lines
/// first, then one `[8 May 2023]` line per day in time order, with the
/// lines of that day's items under it in the order they were said (time,
/// then first source message, then id); within a group a speaker's name
/// shows once per run of their lines ([`Parts::speaker_label`]).
pub fn render_grouped(items: &[(&Item, Parts)]) -> String {
    let mut order: Vec<usize> = (0..items.len()).collect();
    order.sort_by_key(|&i| line_key(items[i].0, &items[i].1));
    let mut out = String::new();
    let mut start = 0;
    while start < order.len() {
        let group = items[order[start]].1.time.map(day);
        let end = start
            + order[start..]
                .iter()
                .take_while(|&&i| items[i].1.time.map(day) == group)
                .count();
        let time = items[order[start]].1.time;
        out.push_str(&render_group(time, order[start..end].iter().map(|&i| &items[i].1)));
        start = end;
    }
    out
}

/// What an item says by default: its stored text (which carries the date
/// resolutions a pipeline derived from it), without the date line
/// [`render_grouped`] shows it under.
pub fn said_item(item: &Item) -> String {
    item.text.clone()
}

/// What packed items say, for answer recall ([`Pipeline::sayer`]): the
/// words of the context a gold answer may be credited from, where the date
/// headers the renderer adds do not count.
#[derive(Debug, Clone)]
pub struct Sayer {
    /// [`Pipeline::standing_said`].
    pub standing: String,
    /// [`Pipeline::sayer`].
    pub say: fn(&Item) -> String,
}

impl Sayer {
    /// What the items `packed` holds of `ranked` and the standing context
    /// say, one item per line (a snippet says only its sentences:
    /// [`Packed::said_items`] with `packer`'s focus); `standing_fits` is
    /// whether the pack holds the whole standing context (when a budget
    /// cut it, its saying is cut to `budget` tokens too).
    pub fn said(
        &self,
        packer: &Packer,
        packed: &Packed,
        ranked: &[Retrieved],
        standing_fits: bool,
        budget: Option<usize>,
    ) -> String {
        let mut out = match (standing_fits, budget) {
            (false, Some(b)) => tokens::truncate(&self.standing, b),
            _ => self.standing.clone(),
        };
        for line in packed.said_items(ranked, self.say, packer.focus.as_ref()) {
            out.push_str(&line);
            out.push('\n');
        }
        out
    }
}

/// Where the retrieved list is cut before scoring.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Cut {
    /// The top `k` items.
    K(usize),
    /// Items in rank order while the packed context stays within this many
    /// tokens.
    Budget(usize),
}

impl Cut {
    /// `"k"` or `"budget"`.
    pub fn kind(&self) -> &'static str {
        match self {
            Cut::K(_) => "k",
            Cut::Budget(_) => "budget",
        }
    }

    /// The k or the budget.
    pub fn value(&self) -> usize {
        match *self {
            Cut::K(v) | Cut::Budget(v) => v,
        }
    }

    /// A short column label: `@5` for k = 5, `≤1500` for a 1,500-token budget.
    pub fn label(&self) -> String {
        match self {
            Cut::K(k) => format!("@{k}"),
            Cut::Budget(b) => format!("≤{b}"),
        }
    }
}

/// Packs ranked items into a context the way a pipeline's prompt holds
/// them: its standing context first, then the chosen items rendered by
/// [`render_grouped`] (one date line per day, not one per item); within a
/// budget, near-duplicates of items already chosen are left out
/// ([`NEAR_DUPLICATE`]).
#[derive(Debug, Clone)]
pub struct Packer {
    /// [`Pipeline::standing_context`].
    pub standing: String,
    /// [`Pipeline::parts`].
    pub parts: fn(&Item) -> Parts,
    /// Within a budget, items past the first `whole` packed show only the
    /// sentences about the question ([`crate::text::focused_snippet`]);
    /// `None`: every item whole.
    pub focus: Option<Focus>,
}

/// What a [`Packer`] cuts items down to: the question's stems
/// ([`crate::text::focus_of`]) and how many packed items stay whole first.
#[derive(Debug, Clone, PartialEq)]
pub struct Focus {
    /// The question's stems.
    pub stems: std::collections::BTreeSet<String>,
    /// Items packed whole before snippets begin.
    pub whole: usize,
}

/// A context packed from ranked items by [`Packer::pack`].
#[derive(Debug, Clone, PartialEq)]
pub struct Packed {
    /// The standing context followed by the packed items.
    pub text: String,
    /// Tokens of `text` (o200k_base, as the prompt composer counts).
    pub tokens: usize,
    /// The positions in the ranked list of the items packed, ascending.
    pub shown: Vec<usize>,
    /// Which of them show as a snippet (same order as `shown`).
    pub snipped: Vec<bool>,
    /// How many of the ranked items packing went through (a prefix: each
    /// was packed or left out as a near-duplicate).
    pub reach: usize,
    /// Whether packing went through every given item (a deeper list might
    /// pack more).
    pub exhausted: bool,
}

impl Packed {
    /// The packed items of `ranked` (the list given to [`Packer::pack`]),
    /// best first.
    pub fn chosen(&self, ranked: &[Retrieved]) -> Vec<Retrieved> {
        self.shown.iter().filter_map(|&i| ranked.get(i).cloned()).collect()
    }

    /// What each packed item of `ranked` says ([`Sayer::say`]), cut to the
    /// same sentences where it shows as a snippet of `focus`.
    pub fn said_items(&self, ranked: &[Retrieved], say: fn(&Item) -> String, focus: Option<&Focus>) -> Vec<String> {
        self.shown
            .iter()
            .zip(&self.snipped)
            .filter_map(|(&i, &cut)| {
                let said = say(&ranked.get(i)?.item);
                Some(match (cut, focus) {
                    (true, Some(f)) => crate::text::focused_snippet(&said, &f.stems).unwrap_or(said),
                    _ => said,
                })
            })
            .collect()
    }
}

/// An item whose line's content words are at least this share of another
/// chosen item's is a near-duplicate and is not packed (lines of fewer
/// than [`NEAR_DUPLICATE_MIN_WORDS`] content words never are).
pub const NEAR_DUPLICATE: f64 = 0.9;
/// See [`NEAR_DUPLICATE`].
pub const NEAR_DUPLICATE_MIN_WORDS: usize = 4;

/// Whether `words` are a near-duplicate of one of `chosen`.
fn near_duplicate(words: &std::collections::BTreeSet<String>, chosen: &[std::collections::BTreeSet<String>]) -> bool {
    words.len() >= NEAR_DUPLICATE_MIN_WORDS
        && chosen.iter().any(|c| {
            let shared = words.iter().filter(|w| c.contains(*w)).count();
            shared as f64 >= NEAR_DUPLICATE * words.len() as f64
        })
}

impl Packer {
    /// A packer of `parts` after a `standing` context, items whole.
    pub fn new(standing: String, parts: fn(&Item) -> Parts) -> Packer {
        Packer {
            standing,
            parts,
            focus: None,
        }
    }

    /// This packer with `context`'s snippets for `question`, if it has any
    /// ([`ContextConfig::snippets`]).
    pub fn for_context(self, context: &ContextConfig, question: &str) -> Packer {
        match context.snippets {
            Some(whole) => self.focused(question, whole),
            None => self,
        }
    }

    /// This packer cutting items past the first `whole` to the sentences
    /// about `question` (see [`Packer::focus`]).
    pub fn focused(mut self, question: &str, whole: usize) -> Packer {
        self.focus = Some(Focus {
            stems: crate::text::focus_of(question),
            whole,
        });
        self
    }

    /// Packs `ranked` in rank order up to `cut`: the top `k` items, or
    /// items while the whole text stays within the budget, stopping at the
    /// first that does not fit and passing over near-duplicates of items
    /// already chosen. An
    /// item costs what it adds to its day's group as rendered: its line
    /// plus, when it opens a day, that day's date line, less a label it
    /// repeats from the line before (more when it breaks a run). The token count is that of the whole packed text, never more
    /// than a budget: a standing context longer than the budget is
    /// truncated to it. Packing is monotone: a larger budget packs the
    /// same items or more.
    pub fn pack(&self, ranked: &[Retrieved], cut: Cut) -> Packed {
        // The top k are what retrieve(k) returns; only a budget is spared
        // near-duplicates.
        let dedup = matches!(cut, Cut::Budget(_));
        let (standing, limit, k) = match cut {
            Cut::K(k) => (self.standing.clone(), usize::MAX, k),
            Cut::Budget(budget) => {
                let mut standing = self.standing.clone();
                let mut max = budget;
                while tokens::count(&standing) > budget {
                    standing = tokens::truncate(&self.standing, max);
                    max = max.saturating_sub(1);
                }
                (standing, budget, usize::MAX)
            }
        };
        // Sum of per-line counts first (cheap); the exact count of the
        // joined text is checked below.
        let mut used = tokens::count(&standing);
        // (position in `ranked`, parts shown, whether cut to a snippet)
        let mut chosen: Vec<(usize, Parts, bool)> = Vec::new();
        let mut words: Vec<std::collections::BTreeSet<String>> = Vec::new();
        // Each group's lines so far (in order) and its tokens as rendered.
        let mut groups = Groups::new();
        let mut reach = 0;
        for (i, r) in ranked.iter().enumerate() {
            if chosen.len() == k {
                break;
            }
            let mut p = (self.parts)(&r.item);
            let mut cut_down = false;
            if let Some(f) = &self.focus
                && dedup
                && chosen.len() >= f.whole
                && let Some(s) = crate::text::focused_snippet(&p.body, &f.stems)
            {
                p.body = s;
                cut_down = true;
            }
            let w = if dedup {
                crate::text::content_words(&p.body)
            } else {
                Default::default()
            };
            if dedup && near_duplicate(&w, &words) {
                reach = i + 1;
                continue;
            }
            // What the item adds: its group rendered with it, less without
            // it (its line, a date line for a new day, and a label it
            // repeats or makes the next line show).
            let key = line_key(&r.item, &p);
            let (lines, before) = groups.get(&key.0).map_or((&[][..], 0), |(l, t)| (l.as_slice(), *t));
            let at = lines.partition_point(|(k, _)| *k < key);
            let with = lines[..at]
                .iter()
                .map(|(_, q)| q)
                .chain(std::iter::once(&p))
                .chain(lines[at..].iter().map(|(_, q)| q));
            let after = tokens::count(&render_group(p.time, with));
            let t = after.saturating_sub(before);
            if used + t > limit {
                break;
            }
            used += t;
            let group = groups.entry(key.0).or_default();
            group.0.insert(at, (key, p.clone()));
            group.1 = after;
            words.push(w);
            chosen.push((i, p, cut_down));
            reach = i + 1;
        }
        // Drop items while the joined text is over the limit (BPE merges
        // across line ends can make it a token or two longer than the sum).
        loop {
            let lines: Vec<(&Item, Parts)> = chosen.iter().map(|(i, p, _)| (&ranked[*i].item, p.clone())).collect();
            let text = standing.clone() + &render_grouped(&lines);
            let tokens = tokens::count(&text);
            if tokens <= limit || chosen.is_empty() {
                return Packed {
                    text,
                    tokens,
                    exhausted: reach == ranked.len(),
                    shown: chosen.iter().map(|(i, _, _)| *i).collect(),
                    snipped: chosen.iter().map(|(_, _, cut)| *cut).collect(),
                    reach,
                };
            }
            if let Some((i, _, _)) = chosen.pop() {
                reach = i;
            }
        }
    }

    /// The prompt `head`, packed items, `tail` within `budget` tokens
    /// (the room for the items shrinks while the joined prompt is over
    /// it); [`Composed::included`] holds the packed items, best first.
    pub(crate) fn compose(&self, ranked: &[Retrieved], head: &str, tail: &str, budget: usize) -> Composed {
        let fixed = tokens::count(head) + tokens::count(tail);
        let mut room = budget.saturating_sub(fixed);
        loop {
            let packed = self.pack(ranked, Cut::Budget(room));
            let prompt = format!("{head}{}{tail}", packed.text);
            let t = tokens::count(&prompt);
            if t <= budget || room == 0 {
                return Composed {
                    tokens: t,
                    trimmed: ranked.len() - packed.shown.len(),
                    included: packed.chosen(ranked),
                    prompt,
                };
            }
            room -= 1;
        }
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

    const MAY_8: i64 = 1_683_554_160;

    fn ranked(texts: &[&str]) -> Vec<Retrieved> {
        texts
            .iter()
            .enumerate()
            .map(|(i, t)| Retrieved {
                item: Item {
                    id: i as i64,
                    user: "u".into(),
                    pipeline: "rag".into(),
                    kind: "turn".into(),
                    text: t.to_string(),
                    sources: vec![i as i64],
                    said_at: (i % 2 == 0).then_some(MAY_8 + 86_400 * i as i64),
                    refers_to: None,
                    turn: i as i64,
                    parent: None,
                    created_at: 0,
                },
                score: 1.0 - i as f32 / 100.0,
                source_refs: vec![format!("D1:{i}")],
                session: None,
                span: None,
                speakers: Vec::new(),
            })
            .collect()
    }

    fn packer(standing: &str) -> Packer {
        Packer::new(standing.to_string(), item_parts)
    }

    #[test]
    fn items_are_grouped_under_one_date_line_per_day_in_the_order_said() {
        // Ranked: a late turn of 8 May, an undated one, a turn of 10 May,
        // an early turn of 8 May (same session time, earlier message).
        let mut items = ranked(&["Ann: later", "Bob: undated", "Ann: tenth", "Bob: earlier"]);
        items[3].item.said_at = Some(MAY_8);
        items[3].item.sources = vec![-1];
        items[2].item.said_at = Some(MAY_8 + 2 * 86_400);
        let p = packer("").pack(&items, Cut::K(4));
        assert_eq!(
            p.text,
            "Bob: undated\n[8 May 2023]\nBob: earlier\nAnn: later\n[10 May 2023]\nAnn: tenth\n"
        );
        assert_eq!((p.shown, p.reach, p.exhausted), (vec![0, 1, 2, 3], 4, true));
        // A date line is paid once per day: a budget that holds one dated
        // turn with its date line holds a second turn of that day with one
        // more line's worth of tokens only.
        let mut same = ranked(&["Ann: one", "Ann: two"]);
        same[1].item.said_at = Some(MAY_8 + 3_600);
        let one = packer("").pack(&same, Cut::K(1));
        // Ann's label shows once for her run of two lines, and the second
        // costs only what it adds.
        let both = packer("").pack(&same, Cut::Budget(one.tokens + tokens::count("two\n")));
        assert_eq!(both.text, "[8 May 2023]\nAnn: one\ntwo\n");
    }

    #[test]
    fn labels_show_once_per_run_within_a_day() {
        for (body, label) in [
            ("Ann: hi", Some("Ann")),
            ("Jon Smith: hi: there", Some("Jon Smith")),
            ("Ann's hobby: pottery", Some("Ann's hobby")),
            ("no label here", None),
            ("Well. Then: more", None),
            ("a b c d e: five words", None),
            ("Ann: two\nlines", None),
            (": empty", None),
        ] {
            assert_eq!(label_of(body), label, "{body}");
        }
        // Ann, Ann, Bob, Bob on 8 May (in the order said), Ann on 9 May:
        // the run breaks at Bob and at the new day.
        let mut items = ranked(&[
            "Ann: a",
            "Ann: b",
            "Bob: c",
            "Bob: d",
            "Ann: e",
            "Bob: multi\nline",
            "Bob: f",
        ]);
        for (i, r) in items.iter_mut().enumerate() {
            r.item.said_at = Some(MAY_8 + if i == 4 { 86_400 } else { i as i64 });
        }
        let p = packer("").pack(&items, Cut::K(7));
        assert_eq!(
            p.text,
            "[8 May 2023]\nAnn: a\nb\nBob: c\nd\nBob: multi\nline\nBob: f\n[9 May 2023]\nAnn: e\n"
        );
        // A budget packs the same when it holds exactly that text, and the
        // estimate of a line that breaks a run charges the label it makes
        // the next line show.
        let b = packer("").pack(&items, Cut::Budget(p.tokens));
        assert_eq!(b.shown.len(), 7, "{b:?}");
        let mut ordered = ranked(&["Ann: a", "Ann: c", "Bob: b"]);
        for (i, r) in ordered.iter_mut().enumerate() {
            r.item.said_at = Some(MAY_8);
            r.item.sources = vec![[0, 2, 1][i]];
        }
        let all = packer("").pack(&ordered, Cut::K(3));
        assert_eq!(all.text, "[8 May 2023]\nAnn: a\nBob: b\nAnn: c\n");
        let fit = packer("").pack(&ordered, Cut::Budget(all.tokens));
        assert_eq!(fit.shown.len(), 3);
        let short = packer("").pack(&ordered, Cut::Budget(all.tokens - 1));
        assert_eq!(short.shown, [0, 1], "{short:?}");
        // Kind or key labels are not speakers: they show on every line.
        fn kinds(item: &Item) -> Parts {
            Parts {
                speaker_label: false,
                ..item_parts(item)
            }
        }
        let facts = ranked(&["Fact: a", "Fact: b"]);
        let p = Packer::new(String::new(), kinds).pack(&facts, Cut::K(2));
        assert_eq!(p.text, "Fact: b\n[8 May 2023]\nFact: a\n");
        let mut same_day = facts.clone();
        same_day[1].item.said_at = Some(MAY_8 + 1);
        let p = Packer::new(String::new(), kinds).pack(&same_day, Cut::K(2));
        assert_eq!(p.text, "[8 May 2023]\nFact: a\nFact: b\n");
    }

    #[test]
    fn near_duplicates_are_passed_over_and_not_credited() {
        let items = ranked(&[
            "Ann: I adopted a grey cat called Pixel last week",
            "Ann: adopted a grey cat called Pixel last week!",
            "Bob: my grey cat is called Pixel too",
            "Ann: ok ok ok",
            "Ann: ok ok ok",
        ]);
        assert_eq!(packer("").pack(&items, Cut::K(10)).shown.len(), 5, "k keeps them");
        let p = packer("").pack(&items, Cut::Budget(1000));
        // The second repeats the first; short lines are never dropped.
        assert_eq!(p.shown, [0, 2, 3, 4]);
        assert_eq!(p.reach, 5);
        let chosen = p.chosen(&items);
        assert_eq!(chosen.len(), 4);
        assert!(chosen.iter().all(|r| r.item.id != 1));
        assert!(!p.text.contains("adopted a grey cat called Pixel last week!"));
    }

    #[test]
    fn packing_never_exceeds_the_budget_and_is_monotone() {
        let texts = [
            "Ann: I adopted a grey cat called Pixel.",
            "Bob: 1234567 — numbers, numbers… and émigré café naïveté.",
            "Ann: 東京で寿司を食べました。",
            "Bob: ok",
            "Ann: a much longer message that goes on and on about the marathon, the training plan, the shoes, \
             the weather in Berlin in September and the five runs a week it now takes",
            "Bob: 🙂🙂🙂 emoji and\ttabs\n and a newline",
        ];
        let items = ranked(&texts);
        for standing in ["", "<compact> Ann has a cat; Bob runs marathons. </compact>\n"] {
            let packer = packer(standing);
            let mut last: Vec<usize> = Vec::new();
            for budget in 1..=160 {
                let p = packer.pack(&items, Cut::Budget(budget));
                assert!(p.tokens <= budget, "{p:?} over {budget}");
                assert_eq!(p.tokens, tokens::count(&p.text));
                assert!(
                    p.shown.starts_with(&last),
                    "budget {budget}: {:?} after {last:?}",
                    p.shown
                );
                last = p.shown.clone();
                assert!(p.text.starts_with(&tokens::truncate(standing, budget)));
                // Greedy in rank order: the next item would not have fitted.
                if p.reach < items.len() {
                    let mut more = p.chosen(&items);
                    more.push(items[p.reach].clone());
                    let lines: Vec<(&Item, Parts)> = more.iter().map(|r| (&r.item, item_parts(&r.item))).collect();
                    let next = tokens::truncate(standing, budget) + &render_grouped(&lines);
                    assert!(tokens::count(&next) > budget, "budget {budget}: {next}");
                }
            }
            assert_eq!(last.len(), items.len(), "everything fits in 160 tokens");
            // A standing context longer than the budget is cut to it.
            if !standing.is_empty() {
                let p = packer.pack(&items, Cut::Budget(3));
                assert_eq!((p.shown.len(), p.tokens <= 3), (0, true));
            }
        }
    }

    #[test]
    fn a_sayer_leaves_out_the_date_lines_of_the_rendering() {
        let items = ranked(&["Ann: one", "Bob: two (yesterday = 8 May 2023)"]);
        let packer = packer("<compact> Ann counts. </compact>\n");
        let sayer = Sayer {
            standing: packer.standing.clone(),
            say: said_item,
        };
        let p = packer.pack(&items, Cut::K(2));
        assert_eq!(
            p.text,
            "<compact> Ann counts. </compact>\nBob: two (yesterday = 8 May 2023)\n[8 May 2023]\nAnn: one\n"
        );
        let said = sayer.said(&packer, &p, &items, true, None);
        assert_eq!(
            said,
            "<compact> Ann counts. </compact>\nAnn: one\nBob: two (yesterday = 8 May 2023)\n"
        );
        // A standing context cut by a budget is cut in what it says too.
        let none = packer.pack(&[], Cut::K(1));
        assert_eq!(
            sayer.said(&packer, &none, &[], false, Some(3)),
            tokens::truncate(&sayer.standing, 3)
        );
    }

    #[test]
    fn packing_by_k_takes_the_top_k() {
        let items = ranked(&["Ann: one", "Bob: two", "Ann: three"]);
        let packer = packer("");
        let p = packer.pack(&items, Cut::K(2));
        assert_eq!(p.shown, [0, 1]);
        assert!(!p.exhausted);
        assert_eq!(p.text, "Bob: two\n[8 May 2023]\nAnn: one\n");
        let p = packer.pack(&items, Cut::K(10));
        assert_eq!((p.shown.len(), p.exhausted), (3, true));
        assert!(packer.pack(&[], Cut::Budget(100)).shown.is_empty());
    }

    #[test]
    fn a_composed_prompt_fits_its_budget_and_holds_what_it_packed() {
        let items = ranked(&["Ann: one", "Bob: two", "Ann: three", "Bob: four"]);
        for budget in 1..60 {
            let c = packer("").compose(&items, "<m>\n", "</m>\n<user> q </user>", budget);
            let fixed = tokens::count("<m>\n") + tokens::count("</m>\n<user> q </user>");
            if budget >= fixed {
                assert!(c.tokens <= budget, "{budget}: {c:?}");
            }
            assert_eq!(c.tokens, tokens::count(&c.prompt));
            assert_eq!(c.trimmed + c.included.len(), items.len());
            for r in &c.included {
                // Bob's two undated lines are one run: the label shows once.
                let (_, said) = r.item.text.split_once(": ").expect("labelled");
                assert!(c.prompt.contains(&format!("{said}\n")), "{c:?}");
            }
            if c.included.iter().filter(|r| r.item.text.starts_with("Bob")).count() == 2 {
                assert!(c.prompt.contains("Bob: two\nfour\n"), "{}", c.prompt);
            }
        }
    }
}
