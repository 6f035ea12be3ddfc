//! [`Memory`]: one memory directory, one pipeline, many users.

use crate::amory::{Amory, AmoryConfig, Consolidation};
use crate::erase::{Change, Erased};
use crate::error::{MemoryError, Result};
use crate::hema::{Hema, HemaConfig};
use crate::llm::Llm;
use crate::nemori::{Nemori, NemoriConfig};
use crate::pipeline::{
    Composed, ContextConfig, Cut, Env, IngestReport, Packer, Pipeline, Retrieved, Retriever, Sayer, check_embedder,
    embedder_matches,
};
use crate::premem::{Premem, PrememConfig};
use crate::rag::{Rag, RagConfig};
use crate::store::{NewMessage, Store, check_user};
use dentate_embed::Embedder;
use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::Arc;

/// How long [`Memory::process`] waits for another process that is
/// processing the same user.
const PROCESS_WAIT: std::time::Duration = std::time::Duration::from_secs(600);

/// Index files serialised by [`Memory::take_unsaved`], to write.
#[derive(Debug)]
pub struct IndexImages {
    files: Vec<(std::path::PathBuf, Vec<u8>)>,
    /// Synced before any file is written when the images may reflect
    /// relaxed commits ([`Memory::relax_processing`]): files that vouch for
    /// a store state must never outlive that state at a power cut.
    barrier: Option<std::path::PathBuf>,
}

impl IndexImages {
    /// Writes each file crash-safely (temporary file, fsync, rename, fsync
    /// of the directory), after making the store state they reflect
    /// durable where processing was relaxed. On an error the files not yet
    /// written stay absent, which the next load repairs from the store.
    pub fn write(self) -> Result<()> {
        if let Some(wal) = &self.barrier {
            match std::fs::File::open(wal) {
                Ok(f) => f.sync_all()?,
                // No log: every commit is in the database file, synced.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(e.into()),
            }
        }
        for (path, bytes) in self.files {
            dentate_core::io::write_atomic(&path, &bytes)?;
        }
        Ok(())
    }
}

/// Which pipeline a [`Memory`] runs.
#[derive(Debug, Clone)]
pub enum PipelineKind {
    /// Turn-level RAG baseline.
    Rag(RagConfig),
    /// HEMA.
    Hema(HemaConfig),
    /// Nemori.
    Nemori(NemoriConfig),
    /// Amory.
    Amory(AmoryConfig),
    /// PREMem.
    Premem(PrememConfig),
}

impl PipelineKind {
    /// The pipeline's name (`rag`, `hema`, `nemori`).
    pub fn name(&self) -> &'static str {
        match self {
            PipelineKind::Rag(_) => "rag",
            PipelineKind::Hema(_) => "hema",
            PipelineKind::Nemori(_) => "nemori",
            PipelineKind::Amory(c) => c.name(),
            PipelineKind::Premem(_) => "premem",
        }
    }

    /// Parses `rag`, `hema`, `nemori`, `amory` or `premem` (default
    /// settings; Amory's consolidation ablations are `amory-rapid` and
    /// `amory-none`).
    pub fn parse(name: &str) -> Result<Self> {
        match name {
            "rag" => Ok(PipelineKind::Rag(RagConfig::default())),
            "hema" => Ok(PipelineKind::Hema(HemaConfig::default())),
            "nemori" => Ok(PipelineKind::Nemori(NemoriConfig::default())),
            "amory" | "amory-rapid" | "amory-none" => {
                let consolidation = match name {
                    "amory-rapid" => Consolidation::Rapid,
                    "amory-none" => Consolidation::None,
                    _ => Consolidation::Inactive,
                };
                Ok(PipelineKind::Amory(AmoryConfig {
                    consolidation,
                    ..AmoryConfig::default()
                }))
            }
            "premem" => Ok(PipelineKind::Premem(PrememConfig::default())),
            other => Err(MemoryError::Invalid(format!(
                "unknown pipeline `{other}` (expected rag, hema, nemori, amory, amory-rapid, amory-none or premem)"
            ))),
        }
    }

    /// Turns the relative-date annotation of RAG's, HEMA's and Nemori's
    /// items ([`crate::dates::annotate`], on by default) on or off, and
    /// Amory's (its texts are stored as said; fragments and facts show
    /// and say the annotation); PREMem always resolves dates into its
    /// fragments' times.
    pub fn resolve_dates(mut self, on: bool) -> Self {
        match &mut self {
            PipelineKind::Rag(c) => c.resolve_dates = on,
            PipelineKind::Hema(c) => c.resolve_dates = on,
            PipelineKind::Nemori(c) => c.resolve_dates = on,
            PipelineKind::Amory(c) => c.resolve_dates = on,
            PipelineKind::Premem(_) => {}
        }
        self
    }

    /// Sets one named setting, for re-checking a default (`dentate eval
    /// locomo --set`): `amory.headline` (weight of the headline score),
    /// `amory.bind`, `amory.continuity`, `amory.split` (offline binding
    /// levels, for sentence and hashing embedders alike),
    /// `nemori.sigma_s` (σ_s of predict–calibrate), `premem.continuation`
    /// (`true`/`false`). A key of another pipeline leaves this one as it
    /// is; an unknown key or a bad value is an error.
    pub fn set(mut self, key: &str, value: &str) -> Result<Self> {
        let bad = || MemoryError::Invalid(format!("bad value `{value}` for `{key}`"));
        let num = || -> Result<f32> {
            value
                .trim()
                .parse::<f32>()
                .ok()
                .filter(|v| v.is_finite())
                .ok_or_else(bad)
        };
        match (key, &mut self) {
            ("amory.headline", PipelineKind::Amory(c)) => c.retrieval.headline = num()?,
            ("amory.bind", PipelineKind::Amory(c)) => {
                let v = num()?;
                (c.binding.sentence.bind, c.binding.hashing.bind) = (v, v);
            }
            ("amory.continuity", PipelineKind::Amory(c)) => {
                let v = num()?;
                (c.binding.sentence.continuity, c.binding.hashing.continuity) = (v, v);
            }
            ("amory.split", PipelineKind::Amory(c)) => {
                let v = num()?;
                (c.binding.sentence.split, c.binding.hashing.split) = (v, v);
            }
            ("nemori.sigma_s", PipelineKind::Nemori(c)) => c.semantic.relevant_threshold = num()?,
            ("premem.continuation", PipelineKind::Premem(c)) => {
                c.continuation = value.trim().parse::<bool>().map_err(|_| bad())?;
            }
            (
                "amory.headline"
                | "amory.bind"
                | "amory.continuity"
                | "amory.split"
                | "nemori.sigma_s"
                | "premem.continuation",
                _,
            ) => {}
            _ => {
                return Err(MemoryError::Invalid(format!(
                    "unknown setting `{key}` (amory.headline, amory.bind, amory.continuity, amory.split, nemori.sigma_s, premem.continuation)"
                )));
            }
        }
        Ok(self)
    }

    /// The context ranking a memory of this pipeline starts with: the
    /// default ([`crate::DEFAULT_CONTEXT`]) except for Nemori, whose
    /// multi-turn episodes it ranks worse on the tune split (off there;
    /// see BENCHMARKS.md).
    pub fn default_context(&self) -> ContextConfig {
        match self {
            PipelineKind::Nemori(_) => ContextConfig::off(),
            _ => ContextConfig::default(),
        }
    }

    fn build(&self) -> Box<dyn Pipeline> {
        match self {
            PipelineKind::Rag(c) => Box::new(Rag::new(c.clone())),
            PipelineKind::Hema(c) => Box::new(Hema::new(c.clone())),
            PipelineKind::Nemori(c) => Box::new(Nemori::new(c.clone())),
            PipelineKind::Amory(c) => Box::new(Amory::new(c.clone())),
            PipelineKind::Premem(c) => Box::new(Premem::new(c.clone())),
        }
    }
}

/// The deepest [`Memory::search`] looks for memories its filter keeps.
pub const MAX_SEARCH_DEPTH: usize = 65_536;

/// What [`Memory::search`] found.
#[derive(Debug, Clone)]
pub struct Found {
    /// The memories kept, best first.
    pub results: Vec<Retrieved>,
    /// For a budget cut, the tokens the packed results take.
    pub tokens: Option<usize>,
}

/// A memory directory: the store plus one pipeline instance per user.
///
/// Ingestion writes raw messages first ([`Memory::add_messages`]), then
/// processes them ([`Memory::process`]); [`Memory::ingest`] does both. A
/// failed `process` (model server down, crash) loses nothing: the next
/// call resumes at the first message whose step was not committed.
///
/// The index files beside the store are caches of it. Before a user's
/// indexes change, they are opened and their files removed; after the
/// change the files are written again, at once by default or, with
/// [`Memory::defer_saves`], when [`Memory::persist`] is called. A file on
/// disk therefore always agrees with the store, whatever is interrupted
/// where; a missing one is rebuilt from the store on next use.
pub struct Memory {
    store: Store,
    embedder: Arc<dyn Embedder>,
    llm: Option<Arc<dyn Llm>>,
    kind: PipelineKind,
    retriever: Retriever,
    pipelines: HashMap<String, Box<dyn Pipeline>>,
    /// Users whose open indexes are ahead of their (removed) files.
    unsaved: HashSet<String>,
    defer_saves: bool,
    relax_processing: bool,
    context: ContextConfig,
}

impl std::fmt::Debug for Memory {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Memory")
            .field("dir", &self.store.dir())
            .field("embedder", &self.embedder.name())
            .field("llm", &self.llm.as_ref().map(|l| l.name()))
            .field("kind", &self.kind)
            .finish()
    }
}

impl Memory {
    /// Opens (creating) the memory in `dir`.
    pub fn open(
        dir: &Path,
        kind: PipelineKind,
        embedder: Arc<dyn Embedder>,
        llm: Option<Arc<dyn Llm>>,
    ) -> Result<Memory> {
        Ok(Memory::with_store(Store::open(dir)?, kind, embedder, llm))
    }

    /// A memory without a directory: the store lives in memory and the
    /// indexes are rebuilt from it when needed (the browser build).
    /// [`Memory::to_bytes`] snapshots everything that cannot be rebuilt.
    pub fn in_memory(kind: PipelineKind, embedder: Arc<dyn Embedder>, llm: Option<Arc<dyn Llm>>) -> Result<Memory> {
        Ok(Memory::with_store(Store::open_in_memory()?, kind, embedder, llm))
    }

    /// Restores an in-memory memory from [`Memory::to_bytes`]; the
    /// pipeline's indexes are rebuilt from the restored store on first use.
    /// The embedder must be the one the memory was built with (checked on
    /// first use, as for a directory).
    pub fn from_bytes(
        bytes: &[u8],
        kind: PipelineKind,
        embedder: Arc<dyn Embedder>,
        llm: Option<Arc<dyn Llm>>,
    ) -> Result<Memory> {
        Ok(Memory::with_store(Store::from_bytes(bytes)?, kind, embedder, llm))
    }

    /// A checksummed snapshot of the store: raw messages, items, vectors,
    /// provenance and pipeline state (see [`Store::to_bytes`]).
    pub fn to_bytes(&mut self) -> Result<Vec<u8>> {
        self.store.to_bytes()
    }

    /// A memory on an opened store ([`Store::open`], [`Store::connect`]);
    /// its index files go to the store's directory ([`Store::dir`]), or
    /// live in memory when it has none.
    pub fn with_store(
        store: Store,
        kind: PipelineKind,
        embedder: Arc<dyn Embedder>,
        llm: Option<Arc<dyn Llm>>,
    ) -> Memory {
        let context = kind.default_context();
        Memory {
            store,
            retriever: Retriever::default_for(&embedder.name()),
            embedder,
            llm,
            kind,
            pipelines: HashMap::new(),
            unsaved: HashSet::new(),
            defer_saves: false,
            relax_processing: false,
            context,
        }
    }

    /// Lets [`Memory::process`] and [`Memory::try_process`] commit without
    /// waiting for the disk ([`Store::set_relaxed`]; SQLite stores only).
    /// What processing writes is derived from raw messages, which stay
    /// fully durable, and a power cut that loses the last steps leaves
    /// those messages unprocessed, so the next `process` redoes them. Index
    /// files are written only after the log they reflect is synced
    /// ([`IndexImages::write`]). A server uses it so that a run holds its
    /// user's lock and its slot for the work, not for an fsync. Off by
    /// default.
    pub fn relax_processing(&mut self, on: bool) {
        self.relax_processing = on;
    }

    /// Defers writing index files after a change until [`Memory::persist`]
    /// (a server with many small writes: rewriting a user's indexes after
    /// each would cost more than the write). Until then the changed users'
    /// files are absent, so a crash costs a rebuild from the store, never
    /// an index that disagrees with it. Off by default.
    pub fn defer_saves(&mut self, on: bool) {
        self.defer_saves = on;
    }

    /// Writes the index files of `user` if a change left them unwritten
    /// (see [`Memory::defer_saves`]); returns whether it wrote them.
    pub fn persist(&mut self, user: &str) -> Result<bool> {
        match self.take_unsaved(user)? {
            Some(images) => images.write().map(|()| true),
            None => Ok(false),
        }
    }

    /// The images of the index files of `user` a change left unwritten,
    /// for the caller to write ([`IndexImages::write`]) without holding
    /// this handle; the user counts as saved from now on. The caller must
    /// write them before the user's next change (by any handle on the
    /// directory), or a change could be overwritten by older files; a
    /// server holds the user's read lock until they are written.
    pub fn take_unsaved(&mut self, user: &str) -> Result<Option<IndexImages>> {
        if !self.unsaved.contains(user) {
            return Ok(None);
        }
        let mut images = self.with(user, |p, env| Ok(p.images(env)))?;
        // The version the images reflect goes last, so a stamp on disk
        // never vouches for files not yet written.
        if let (Some(path), Some(v)) = (self.stamp_path(user), self.store.seen_version(user)) {
            images.push((path, v.to_string().into_bytes()));
        }
        self.unsaved.remove(user);
        Ok(Some(IndexImages {
            files: images,
            barrier: if self.relax_processing {
                self.store.durability_barrier()
            } else {
                None
            },
        }))
    }

    /// The users whose index files a change left unwritten.
    pub fn unsaved_users(&self) -> Vec<String> {
        self.unsaved.iter().cloned().collect()
    }

    /// Whether a change left `user`'s index files unwritten.
    pub fn is_unsaved(&self, user: &str) -> bool {
        self.unsaved.contains(user)
    }

    /// Chooses how items are found (default: hybrid, dense + BM25 fused
    /// with the weight for this memory's embedder, [`Retriever::default_for`]).
    pub fn set_retriever(&mut self, retriever: Retriever) {
        self.retriever = retriever;
    }

    /// The name of this memory's embedder (`Embedder::name`).
    pub fn embedder_name(&self) -> String {
        self.embedder.name()
    }

    /// The retriever in use.
    pub fn retriever(&self) -> Retriever {
        self.retriever
    }

    /// The store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The pipeline name.
    pub fn pipeline_name(&self) -> &'static str {
        self.kind.name()
    }

    /// The file beside `user`'s index files that holds the user's version
    /// they were written at ([`Store::user_version`]).
    fn stamp_path(&self, user: &str) -> Option<std::path::PathBuf> {
        self.store
            .dir()
            .map(|d| d.join(format!("{user}.{}.version", self.kind.name())))
    }

    /// Drops what this handle holds of `user` when the store moved on
    /// without it (another process, e.g. a second server on the same
    /// PostgreSQL database, changed the user): the loaded pipeline and the
    /// index files, unless the files' version stamp says they are current.
    fn refresh(&mut self, user: &str) -> Result<()> {
        let Some(v) = self.store.changed_elsewhere(user)? else {
            return Ok(());
        };
        self.pipelines.remove(user);
        // Files another handle wrote at this version are current; any
        // others may predate the change.
        let current = self.stamp_path(user).is_some_and(|p| {
            std::fs::read_to_string(p)
                .ok()
                .and_then(|t| t.trim().parse::<i64>().ok())
                == Some(v)
        });
        if !current && self.store.dir().is_some() {
            self.remove_index_files(user)?;
        }
        Ok(())
    }

    fn with<T>(&mut self, user: &str, f: impl FnOnce(&mut dyn Pipeline, &mut Env<'_>) -> Result<T>) -> Result<T> {
        check_user(user)?;
        self.refresh(user)?;
        let first = !self.pipelines.contains_key(user);
        let p = self
            .pipelines
            .entry(user.to_string())
            .or_insert_with(|| self.kind.build());
        let mut env = Env {
            store: &mut self.store,
            embedder: self.embedder.as_ref(),
            llm: self.llm.as_deref(),
            user,
            retriever: self.retriever,
            context: self.context,
        };
        // A user's indexes are opened (or rebuilt from the store) on first
        // use: vectors of another embedder must never reach them.
        if first && let Err(e) = embedder_matches(&env, p.name()) {
            self.pipelines.remove(user);
            return Err(e);
        }
        f(p.as_mut(), &mut env)
    }

    /// Runs a change of `user`'s indexes (see the type's docs): opens them
    /// and removes their files first (once until the next save), then
    /// saves them unless saves are deferred. A failed change unloads the
    /// user, since what is open may be half-changed; the next use rebuilds
    /// it from the store.
    fn change<T>(&mut self, user: &str, f: impl FnOnce(&mut dyn Pipeline, &mut Env<'_>) -> Result<T>) -> Result<T> {
        check_user(user)?;
        let out = (|| {
            if !self.unsaved.contains(user) {
                // A memory built with another embedder is refused before
                // its indexes are opened with this one's dimension.
                self.with(user, |p, env| {
                    check_embedder(env, p.name())?;
                    p.load(env)
                })?;
                self.remove_index_files(user)?;
                self.unsaved.insert(user.to_string());
            }
            let v = self.with(user, f)?;
            if !self.defer_saves {
                self.persist(user)?;
            }
            Ok(v)
        })();
        if out.is_err() {
            self.unload(user);
        }
        out
    }

    /// Stores raw messages for `user` (committed before any processing) and
    /// returns the ids of those stored: a message already stored (same
    /// caller id and text, see [`crate::store::Store::append_messages`]) is
    /// skipped. Empty texts and times outside years 0–9999
    /// ([`crate::time::in_range`]) are refused, and then nothing is stored.
    pub fn add_messages(&mut self, user: &str, msgs: &[NewMessage]) -> Result<Vec<i64>> {
        self.store.append_messages(user, msgs)
    }

    /// Processes the user's unprocessed messages. On a store several
    /// processes share (PostgreSQL), one processes a user at a time: this
    /// waits up to 10 minutes for another holder ([`MemoryError::Busy`]
    /// after that).
    pub fn process(&mut self, user: &str, progress: &mut dyn FnMut(usize, usize)) -> Result<IngestReport> {
        self.run_processing(user, PROCESS_WAIT, progress)?
            .ok_or_else(|| MemoryError::Busy(user.to_string()))
    }

    /// [`Memory::process`] unless another process is processing `user`
    /// right now (`Ok(None)`, without waiting): how a server picks up
    /// work another worker left.
    pub fn try_process(&mut self, user: &str, progress: &mut dyn FnMut(usize, usize)) -> Result<Option<IngestReport>> {
        self.run_processing(user, std::time::Duration::ZERO, progress)
    }

    /// Processes `user`'s messages holding the right to ([`Memory::holding`]),
    /// with relaxed commits when [`Memory::relax_processing`] is on.
    fn run_processing(
        &mut self,
        user: &str,
        wait: std::time::Duration,
        progress: &mut dyn FnMut(usize, usize),
    ) -> Result<Option<IngestReport>> {
        let relaxed = self.relax_processing;
        if relaxed {
            self.store.set_relaxed(true)?;
        }
        let out = self.holding(user, wait, |m| m.change(user, |p, env| p.ingest(env, progress)));
        if relaxed {
            let restored = self.store.set_relaxed(false);
            let out = out?;
            restored?;
            return Ok(out);
        }
        out
    }

    /// Runs `f` holding the right to process `user` ([`Store::lock_user`]),
    /// waiting up to `wait` for it; `None` when it was not granted.
    fn holding<T>(
        &mut self,
        user: &str,
        wait: std::time::Duration,
        f: impl FnOnce(&mut Memory) -> Result<T>,
    ) -> Result<Option<T>> {
        check_user(user)?;
        if !self.store.lock_user(user, wait)? {
            return Ok(None);
        }
        let out = f(self);
        let unlocked = self.store.unlock_user(user);
        let out = out?;
        unlocked?;
        Ok(Some(out))
    }

    /// Processes what the pipeline holds back for more messages (Nemori's
    /// open episode), as when the conversation has ended. Call it after
    /// the last message of a conversation; streaming callers that expect
    /// more messages do not.
    pub fn flush(&mut self, user: &str) -> Result<IngestReport> {
        self.holding(user, PROCESS_WAIT, |m| m.change(user, |p, env| p.flush(env)))?
            .ok_or_else(|| MemoryError::Busy(user.to_string()))
    }

    /// [`Memory::add_messages`] then [`Memory::process`].
    pub fn ingest(&mut self, user: &str, msgs: &[NewMessage]) -> Result<IngestReport> {
        self.add_messages(user, msgs)?;
        self.process(user, &mut |_, _| {})
    }

    /// The `k` items most relevant to `query`, with provenance: the
    /// pipeline's ranking, re-ordered by the context ranking
    /// ([`Memory::set_context_ranking`]).
    pub fn retrieve(&mut self, user: &str, query: &str, k: usize) -> Result<Vec<Retrieved>> {
        if k == 0 {
            return Err(MemoryError::Invalid("k must be at least 1".into()));
        }
        self.with(user, |p, env| crate::context::retrieve(p, env, query, k))
    }

    /// Sets how retrieved items are ranked and packed for the context
    /// (sessions, neighbours, snippets; [`ContextConfig`]; by default
    /// [`PipelineKind::default_context`]).
    pub fn set_context_ranking(&mut self, cfg: ContextConfig) {
        self.context = cfg;
    }

    /// The context ranking in use.
    pub fn context_ranking(&self) -> ContextConfig {
        self.context
    }

    /// The memories of `user` for `query`, best first, cut at `cut`: the
    /// top `k`, or items in rank order while their packed context stays
    /// within the budget (then [`Found::tokens`] says how many it takes).
    /// With `keep`, only the memories it accepts count, and the ranked list
    /// is deepened (×4 each time) until the cut is met or the memory is
    /// exhausted. The memory service's search and the Python package's
    /// `Memory.search` are this.
    ///
    /// Errors: `k` or budget 0 ([`MemoryError::Invalid`]), and those of
    /// [`Memory::retrieve`].
    pub fn search(
        &mut self,
        user: &str,
        query: &str,
        cut: Cut,
        keep: Option<&dyn Fn(&Retrieved) -> bool>,
    ) -> Result<Found> {
        let want = match cut {
            Cut::K(0) => return Err(MemoryError::Invalid("k must be at least 1".into())),
            Cut::Budget(0) => return Err(MemoryError::Invalid("budget must be at least 1 token".into())),
            Cut::K(k) => k,
            // Deep enough for most budgets in one retrieval.
            Cut::Budget(_) => 64,
        };
        let mut depth = if keep.is_some() { want.saturating_mul(4) } else { want };
        let ranked = loop {
            let got = self.retrieve(user, query, depth)?;
            let exhausted = got.len() < depth;
            let kept: Vec<Retrieved> = match keep {
                Some(f) => got.into_iter().filter(|r| f(r)).collect(),
                None => got,
            };
            let enough = match cut {
                Cut::K(k) => kept.len() >= k,
                Cut::Budget(_) => !self.packer(user)?.pack(&kept, cut).exhausted,
            };
            if enough || exhausted || depth >= MAX_SEARCH_DEPTH {
                break kept;
            }
            depth = depth.saturating_mul(4).min(MAX_SEARCH_DEPTH);
        };
        Ok(match cut {
            Cut::K(k) => Found {
                results: ranked.into_iter().take(k).collect(),
                tokens: None,
            },
            Cut::Budget(_) => {
                let packed = self.packer(user)?.pack(&ranked, cut);
                Found {
                    results: packed.chosen(&ranked),
                    tokens: Some(packed.tokens),
                }
            }
        })
    }

    /// How the pipeline packs retrieved items into its prompt for `user`:
    /// its standing context (HEMA: the compact summary) and item renderer.
    pub fn packer(&mut self, user: &str) -> Result<Packer> {
        self.with(user, |p, env| Ok(Packer::new(p.standing_context(env)?, p.parts())))
    }

    /// What packed items and the standing context of `user` say, for
    /// answer recall (see [`Sayer`]).
    pub fn sayer(&mut self, user: &str) -> Result<Sayer> {
        self.with(user, |p, env| {
            Ok(Sayer {
                standing: p.standing_said(env)?,
                say: p.sayer(),
            })
        })
    }

    /// A prompt for `query` within `budget` tokens.
    pub fn compose(&mut self, user: &str, query: &str, budget: usize) -> Result<Composed> {
        self.with(user, |p, env| p.compose(env, query, budget))
    }

    /// Deletes a memory item of `user` by id.
    pub fn forget(&mut self, user: &str, id: i64) -> Result<()> {
        self.change(user, |p, env| {
            if !env.store.delete_item(user, id)? {
                return Err(MemoryError::NotFound {
                    user: user.to_string(),
                    id,
                });
            }
            p.drop_item(id);
            Ok(())
        })
    }

    /// Replaces the text of a memory item of `user` (re-embedding it),
    /// keeping its id and provenance.
    pub fn correct(&mut self, user: &str, id: i64, text: &str) -> Result<()> {
        if text.trim().is_empty() {
            return Err(MemoryError::Invalid("the corrected text is empty".into()));
        }
        let v = self.embedder.embed(&[text])?;
        let missing = || MemoryError::NotFound {
            user: user.to_string(),
            id,
        };
        // Update both indexes in place (no rebuild, no retraining).
        self.change(user, |p, env| {
            if !env.store.correct_item(user, id, text, Some(&v))? {
                return Err(missing());
            }
            let turn = env.store.item(id)?.ok_or_else(missing)?.turn;
            p.replace_item(env, id, turn, &v, text)
        })
    }

    /// A readable listing of what the pipeline holds for `user` (Amory: its
    /// narrative tree and triples; others: their items).
    pub fn show(&mut self, user: &str) -> Result<String> {
        self.with(user, |p, env| p.show(env))
    }

    /// Drops what this `Memory` holds in memory for `user` (its pipeline
    /// and indexes), so the next call reloads them from the store and the
    /// index files: what a process sharing the directory with another
    /// writer does after that writer changed the user.
    ///
    /// Changes not yet persisted (see [`Memory::defer_saves`]) are dropped
    /// with it; their files are absent, so the next use rebuilds the
    /// indexes from the store. Call [`Memory::persist`] first to keep them.
    pub fn unload(&mut self, user: &str) {
        self.pipelines.remove(user);
        self.unsaved.remove(user);
    }

    /// Removes the index files of `user` beside the store (and any
    /// temporary file of an interrupted write of them), durably (the
    /// directory is synced), and returns their names.
    fn remove_index_files(&mut self, user: &str) -> Result<Vec<String>> {
        let mut removed = Vec::new();
        let files = {
            let p = self.kind.build();
            let env = Env {
                store: &mut self.store,
                embedder: self.embedder.as_ref(),
                llm: self.llm.as_deref(),
                user,
                retriever: self.retriever,
                context: self.context,
            };
            let mut files = p.index_files(&env);
            // The version stamp first: files without one are never trusted.
            files.splice(0..0, self.stamp_path(user));
            files
        };
        for path in files {
            let (Some(dir), Some(name)) = (path.parent(), path.file_name().and_then(|n| n.to_str())) else {
                continue;
            };
            let tmp_prefix = format!(".{name}.tmp-");
            let mut doomed = vec![path.clone()];
            if let Ok(entries) = std::fs::read_dir(dir) {
                for e in entries.flatten() {
                    if e.file_name().to_str().is_some_and(|n| n.starts_with(&tmp_prefix)) {
                        doomed.push(e.path());
                    }
                }
            }
            for f in doomed {
                match std::fs::remove_file(&f) {
                    Ok(()) => removed.push(
                        f.file_name()
                            .map(|n| n.to_string_lossy().into_owned())
                            .unwrap_or_default(),
                    ),
                    Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        #[cfg(unix)]
        if !removed.is_empty()
            && let Some(dir) = self.store.dir()
        {
            std::fs::File::open(dir)?.sync_all()?;
        }
        Ok(removed)
    }

    /// Erases `user` for good: messages, items of every pipeline, triples,
    /// history, pipeline state and this pipeline's index files (see
    /// [`Store::erase_user`]). Returns the receipt.
    pub fn erase_user(&mut self, user: &str) -> Result<Erased> {
        let mut receipt = self.store.erase_user(user)?;
        self.unload(user);
        receipt.files.extend(self.remove_index_files(user)?);
        Ok(receipt)
    }

    /// Erases the message `message` of `user` and every item derived from
    /// it ([`Store::erase_source`]), and rebuilds the user's index files
    /// from what remains. When the pipeline's state summarises messages
    /// (HEMA's compact summary, an open Nemori episode, Amory's tree,
    /// PREMem's pools), the user's memory in it is rebuilt from the
    /// remaining messages ([`Erased::rebuilt`]), since no part of a summary
    /// can be traced to one message.
    pub fn erase_source(&mut self, user: &str, message: i64) -> Result<Erased> {
        let mut receipt = self.store.erase_source(user, message)?;
        receipt.absorb(self.rebuild_after_erase(user)?);
        Ok(receipt)
    }

    /// After rows of `user` were erased from the store (by this handle or
    /// another on the same directory): removes this pipeline's index files
    /// for the user (they are rebuilt from the store on next use) and, when
    /// its state summarises messages, rebuilds its memory of the user from
    /// the remaining messages. Returns what that removed.
    pub fn rebuild_after_erase(&mut self, user: &str) -> Result<Erased> {
        self.unload(user);
        let mut receipt = Erased {
            files: self.remove_index_files(user)?,
            ..Erased::default()
        };
        let name = self.kind.name();
        if self.store.summarises(user, name)? {
            self.store.reset_pipeline(user, name, &mut receipt)?;
            self.process(user, &mut |_, _| {})?;
            receipt.rebuilt.push(name.to_string());
        }
        Ok(receipt)
    }

    /// The history of item `id` of `user` ([`Store::history`]); an item
    /// that `user` never had is [`MemoryError::NotFound`].
    pub fn history(&self, user: &str, id: i64) -> Result<Vec<Change>> {
        let h = self.store.history(user, id)?;
        if h.is_empty() {
            return Err(MemoryError::NotFound {
                user: user.to_string(),
                id,
            });
        }
        Ok(h)
    }

    /// Heap bytes of the user's index (0 before it is loaded).
    pub fn memory_bytes(&self, user: &str) -> usize {
        self.pipelines.get(user).map_or(0, |p| p.memory_bytes())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `PRAGMA synchronous` of the handle's connection: 1 NORMAL, 2 FULL.
    fn sync_mode(m: &Memory) -> i64 {
        let c = m.store.conn.sqlite().expect("a SQLite store");
        c.pragma_query_value(None, "synchronous", |r| r.get(0)).unwrap()
    }

    fn autocheckpoint(m: &Memory) -> i64 {
        let c = m.store.conn.sqlite().expect("a SQLite store");
        c.pragma_query_value(None, "wal_autocheckpoint", |r| r.get(0)).unwrap()
    }

    fn said(text: &str, t: i64) -> NewMessage {
        NewMessage {
            session: "session_1".into(),
            speaker: "Ann".into(),
            text: text.into(),
            said_at: Some(1_682_899_200 + t * 60),
            source_ref: Some(format!("D1:{t}")),
        }
    }

    /// Relaxed processing leaves the handle's other commits (appends,
    /// corrections, retrieval marks included) fully synced, and its index
    /// images sync the store's log before any file is written.
    #[test]
    fn relaxed_processing_is_scoped_and_its_images_carry_a_barrier() {
        let dir = tempfile::tempdir().unwrap();
        let embedder = Arc::new(dentate_embed::HashingEmbedder::new(64).unwrap());
        let mut m = Memory::open(dir.path(), PipelineKind::parse("rag").unwrap(), embedder, None).unwrap();
        assert_eq!(sync_mode(&m), 2, "full sync by default");
        assert_eq!(autocheckpoint(&m), 1000);
        m.store.set_relaxed(true).unwrap();
        assert_eq!(sync_mode(&m), 1);
        // A retrieval mark restores the handle's own mode, not FULL.
        m.add_messages("ann", &[said("Ann adopted a cat called Pixel.", 1)])
            .unwrap();
        m.process("ann", &mut |_, _| {}).unwrap();
        let ids: Vec<i64> = m.retrieve("ann", "cat", 1).unwrap().iter().map(|r| r.item.id).collect();
        m.store.record_retrieval("ann", &ids, 1).unwrap();
        assert_eq!(sync_mode(&m), 1);
        m.store.set_relaxed(false).unwrap();
        assert_eq!(sync_mode(&m), 2);

        m.defer_saves(true);
        m.relax_processing(true);
        m.add_messages("ann", &[said("Ann's cat Pixel likes the garden.", 2)])
            .unwrap();
        let r = m.process("ann", &mut |_, _| {}).unwrap();
        assert_eq!(r.messages, 1);
        assert_eq!(sync_mode(&m), 2, "appends after processing wait for the disk again");
        let images = m.take_unsaved("ann").unwrap().expect("a change to save");
        assert_eq!(
            images.barrier.as_deref(),
            Some(dir.path().join("memory.db-wal").as_path())
        );
        assert!(
            images.barrier.as_ref().is_some_and(|p| p.exists()),
            "the log is where SQLite keeps it"
        );
        images.write().unwrap();
        let stamp = dir.path().join("ann.rag.version");
        assert!(stamp.exists(), "written after the barrier");

        // Checkpoints can be left to another handle.
        m.store.set_auto_checkpoint(false).unwrap();
        assert_eq!(autocheckpoint(&m), 0);
        let (log, copied) = m.store.checkpoint(1 << 20).unwrap();
        assert!(log > 0 && copied == log, "{log} pages, {copied} copied");
        assert!(dir.path().join("memory.db-wal").metadata().unwrap().len() > 0);
        assert_eq!(m.store.checkpoint(0).unwrap(), (0, 0), "over the bound: emptied");
        assert_eq!(dir.path().join("memory.db-wal").metadata().unwrap().len(), 0);
        m.store.set_auto_checkpoint(true).unwrap();
        assert_eq!(autocheckpoint(&m), 1000);

        // Without relaxed processing there is nothing to sync first.
        m.relax_processing(false);
        m.add_messages("ann", &[said("Ann fed Pixel at noon.", 3)]).unwrap();
        m.process("ann", &mut |_, _| {}).unwrap();
        assert!(m.take_unsaved("ann").unwrap().unwrap().barrier.is_none());

        // A missing log (everything checkpointed) is no error.
        let gone = IndexImages {
            files: vec![(dir.path().join("x.bin"), vec![1, 2, 3])],
            barrier: Some(dir.path().join("no-such.db-wal")),
        };
        gone.write().unwrap();
        assert_eq!(std::fs::read(dir.path().join("x.bin")).unwrap(), [1, 2, 3]);
    }

    /// In-memory stores have no log to sync and ignore relaxing.
    #[test]
    fn stores_without_a_directory_ignore_relaxing() {
        let embedder = Arc::new(dentate_embed::HashingEmbedder::new(64).unwrap());
        let mut m = Memory::in_memory(PipelineKind::parse("rag").unwrap(), embedder, None).unwrap();
        m.relax_processing(true);
        let before = sync_mode(&m);
        m.store.set_relaxed(true).unwrap();
        assert_eq!(sync_mode(&m), before, "nothing to relax");
        assert_eq!(m.store.checkpoint(0).unwrap(), (0, 0), "no log");
        assert!(m.store.durability_barrier().is_none());
        m.add_messages("ann", &[said("Ann adopted a cat called Pixel.", 1)])
            .unwrap();
        assert_eq!(m.process("ann", &mut |_, _| {}).unwrap().messages, 1);
    }
}
