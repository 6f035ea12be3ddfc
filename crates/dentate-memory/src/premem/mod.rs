//! PREMem (Kim et al. 2025, "Pre-Storage Reasoning for Episodic Memory"):
//! reasoning moves from answer time to storage time.
//!
//! For each conversation session:
//! 1. **Extraction** ([`extract`], §3.1): fragments `(key, content, time,
//!    category)` with the categories factual, experiential and subjective
//!    (stored as those item kinds) and time in four forms (the message
//!    date, a resolved absolute date, `Before <date>`, `After <date>`).
//! 2. **Clustering and linking** ([`cluster`], §3.2.1): the fragments'
//!    key + content embeddings are clustered by k-means with k chosen by
//!    the silhouette; each new cluster links with every cluster of the
//!    persistent pool whose centroid cosine exceeds θ = 0.6; the pool then
//!    drops the linked clusters and takes the new ones.
//! 3. **Pre-storage reasoning** ([`reason`], §3.2.2): each linked pair
//!    yields reasoning fragments in five patterns, derived from every
//!    fragment they came from.
//! 4. **Inference** (§3.3): fragments and reasoning fragments are retrieved
//!    together (hybrid by default), packed by rank into the budget, and
//!    shown in chronological order with key, content and time.
//!
//! Storage: fragments (`factual`, `experiential`, `subjective`) and
//! reasoning fragments (`reasoning`) are searchable items citing their
//! messages; a cluster is an item of kind `cluster` without a vector,
//! derived from its fragments ([`crate::store::Step::derived`]); a
//! reasoning fragment is derived from the fragments of both clusters and
//! has the newer cluster as its parent. The pool (cluster ids) and the
//! reasoning still owed for the last session (`pending`) are pipeline
//! state; centroids are recomputed from the stored fragment vectors
//! (rounded to f16 before clustering, so a restarted process computes the
//! same ones).
//!
//! Sessions: a new session name, a gap of `session_gap_secs` (Nemori's 30
//! minutes) or `max_session_messages` messages end a session; the last
//! session stays open until one of these or [`Pipeline::flush`] (the end of
//! a conversation). Steps: the session's fragments and clusters commit
//! with the progress mark and the links it found; then each linked pair
//! commits its reasoning fragments with the count done; the last commits
//! the new pool. A killed process resumes at the first step not committed
//! (with a model, only the call in flight is repeated).

pub mod cluster;
pub mod extract;
pub mod reason;

use crate::error::{MemoryError, Result};
use crate::llm::Llm;
use crate::nemori::boundary::{BoundaryConfig, time_gap};
use crate::pipeline::{
    Composed, Env, IngestReport, Packer, Parts, Pipeline, Retrieved, Vectors, check_embedder, check_question_fits,
    embed_batch, resolve,
};
use crate::store::{Item, ItemRef, Message, NewItem, Step};
use crate::tokens;
use crate::vecmem::VectorMemoryConfig;
use cluster::ClusterConfig;
use extract::Fragment;
use reason::{Known, ReasonConfig};
use serde_json::{Value, json};
use std::collections::HashMap;
use web_time::Instant;

const NAME: &str = "premem";
/// Item kind of clusters (not searchable).
pub const CLUSTER: &str = "cluster";
/// Item kind of reasoning fragments.
pub const REASONING: &str = "reasoning";
/// Item kinds of fragments, one per category.
pub const FRAGMENT_KINDS: [&str; 3] = ["factual", "experiential", "subjective"];

/// PREMem settings.
#[derive(Debug, Clone)]
pub struct PrememConfig {
    /// Clustering and linking (θ = 0.6, k ≤ 10).
    pub cluster: ClusterConfig,
    /// Reasoning (offline templates; fragments kept per pair).
    pub reason: ReasonConfig,
    /// Offline: content words a sentence needs to be a fragment (default 2).
    pub min_content_words: usize,
    /// A gap of at least this many seconds between two messages ends a
    /// session (default 1,800, as Nemori's episodes).
    pub session_gap_secs: i64,
    /// A session is processed in parts of at most this many messages
    /// (default 64: one extraction prompt each).
    pub max_session_messages: usize,
    /// Offline: file a continuing sentence ("It stands for love…") under
    /// the key of the sentence before it ([`extract::continues`]; default
    /// on).
    pub continuation: bool,
    /// Items a composed prompt draws on, at least (default 30; more when
    /// the budget holds more, one per 16 tokens).
    pub compose_k: usize,
    /// Vector-index settings.
    pub vectors: VectorMemoryConfig,
}

impl Default for PrememConfig {
    fn default() -> Self {
        PrememConfig {
            cluster: ClusterConfig::default(),
            reason: ReasonConfig::default(),
            min_content_words: 2,
            continuation: true,
            session_gap_secs: BoundaryConfig::default().time_gap_secs,
            max_session_messages: 64,
            compose_k: 30,
            vectors: VectorMemoryConfig::default(),
        }
    }
}

/// The reasoning still owed for the last processed session.
#[derive(Debug, Clone, PartialEq)]
struct Pending {
    /// Clusters the session made (the cluster items of turn `turn`).
    clusters: usize,
    /// Its links: (pool cluster id, index of the new cluster).
    links: Vec<(i64, usize)>,
    /// Links whose reasoning is stored.
    done: usize,
    /// The session's pipeline turn.
    turn: i64,
}

impl Pending {
    fn to_json(&self) -> String {
        let links: Vec<Value> = self.links.iter().map(|(p, c)| json!([p, c])).collect();
        json!({"clusters": self.clusters, "links": links, "done": self.done, "turn": self.turn}).to_string()
    }

    fn parse(s: &str) -> Result<Option<Pending>> {
        if s.is_empty() {
            return Ok(None);
        }
        let bad = || MemoryError::Invalid(format!("premem state `pending` is corrupt: {s}"));
        let v: Value = serde_json::from_str(s).map_err(|_| bad())?;
        let num = |k: &str| v.get(k).and_then(Value::as_i64).ok_or_else(bad);
        let links = v
            .get("links")
            .and_then(Value::as_array)
            .ok_or_else(bad)?
            .iter()
            .map(|l| {
                let p = l.get(0).and_then(Value::as_i64);
                let c = l.get(1).and_then(Value::as_u64);
                p.zip(c).map(|(p, c)| (p, c as usize)).ok_or_else(bad)
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(Some(Pending {
            clusters: usize::try_from(num("clusters")?).map_err(|_| bad())?,
            links,
            done: usize::try_from(num("done")?).map_err(|_| bad())?,
            turn: num("turn")?,
        }))
    }
}

/// A stored fragment with what reasoning needs.
struct StoredFragment {
    id: i64,
    sources: Vec<i64>,
    said_at: Option<i64>,
    known: Known,
}

/// The PREMem pipeline.
#[derive(Debug)]
pub struct Premem {
    cfg: PrememConfig,
    vectors: Vectors,
    /// Centroids of pool clusters by item id (recomputed from the store).
    centroids: HashMap<i64, Vec<f32>>,
}

/// Rounds each value to f16 precision, as the store keeps vectors.
fn round_f16(v: &mut [f32]) {
    for x in v {
        *x = half::f16::from_f32(*x).to_f32();
    }
}

impl Premem {
    /// PREMem with `cfg`.
    pub fn new(cfg: PrememConfig) -> Self {
        Premem {
            vectors: Vectors::new(NAME, cfg.vectors.clone()),
            cfg,
            centroids: HashMap::new(),
        }
    }

    /// The settings.
    pub fn config(&self) -> &PrememConfig {
        &self.cfg
    }

    /// The pool: ids of the clusters not yet linked with a later one.
    fn pool(env: &Env<'_>) -> Result<Vec<i64>> {
        match env.store.state(env.user, NAME, "pool")? {
            None => Ok(Vec::new()),
            Some(s) => serde_json::from_str(&s)
                .map_err(|_| MemoryError::Invalid(format!("premem state `pool` is corrupt: {s}"))),
        }
    }

    fn pending(env: &Env<'_>) -> Result<Option<Pending>> {
        Pending::parse(&env.store.state(env.user, NAME, "pending")?.unwrap_or_default())
    }

    /// The stored messages from `msgs` cut into sessions (see the module
    /// notes); the last one is open unless it is full.
    fn sessions<'m>(&self, msgs: &'m [Message]) -> Vec<&'m [Message]> {
        let gap = BoundaryConfig {
            time_gap_secs: self.cfg.session_gap_secs,
            ..BoundaryConfig::default()
        };
        let max = self.cfg.max_session_messages.max(1);
        let mut out = Vec::new();
        let mut start = 0;
        for i in 1..msgs.len() {
            let (a, b) = (&msgs[i - 1], &msgs[i]);
            if a.msg.session != b.msg.session || time_gap(a, b, &gap).is_some() || i - start >= max {
                out.push(&msgs[start..i]);
                start = i;
            }
        }
        if start < msgs.len() {
            out.push(&msgs[start..]);
        }
        out
    }

    /// The centroid of a stored cluster: the mean of its live fragments'
    /// stored vectors; `None` when none is left.
    fn centroid(&mut self, env: &Env<'_>, id: i64) -> Result<Option<Vec<f32>>> {
        if let Some(c) = self.centroids.get(&id) {
            return Ok(Some(c.clone()));
        }
        let mut rows = Vec::new();
        let mut n = 0;
        for f in env.store.derived_from(id)? {
            if let Some(v) = env.store.vector(f)? {
                rows.extend(v);
                n += 1;
            }
        }
        if n == 0 {
            return Ok(None);
        }
        let members: Vec<usize> = (0..n).collect();
        let c = cluster::centroid(&rows, env.embedder.dim(), &members);
        self.centroids.insert(id, c.clone());
        Ok(Some(c))
    }

    /// The live fragments of a stored cluster, in time order.
    fn fragments_of(env: &Env<'_>, cluster: i64) -> Result<Vec<StoredFragment>> {
        let mut out = Vec::new();
        for id in env.store.derived_from(cluster)? {
            let (Some(item), Some(vector)) = (env.store.item(id)?, env.store.vector(id)?) else {
                continue;
            };
            let (time_label, key, content) = extract::split_text(&item.text);
            let speaker = env
                .store
                .messages(&item.sources)?
                .first()
                .map(|m| m.msg.speaker.clone())
                .unwrap_or_default();
            out.push(StoredFragment {
                id,
                known: Known {
                    key: key.to_string(),
                    content: content.to_string(),
                    time_label: time_label.to_string(),
                    time: item.refers_to,
                    speaker,
                    vector,
                    text: item.text.clone(),
                },
                sources: item.sources,
                said_at: item.said_at,
            });
        }
        out.sort_by(|a, b| a.known.time.cmp(&b.known.time).then(a.id.cmp(&b.id)));
        Ok(out)
    }

    /// Step 1 and the clustering of step 2 for one complete session;
    /// then its reasoning. Returns the searchable items made.
    fn process_session(&mut self, env: &mut Env<'_>, roles: &dyn Roles, run: &[Message]) -> Result<usize> {
        let Some(last) = run.last() else { return Ok(0) };
        let seg: Vec<&Message> = run.iter().collect();
        let turn = last.seq + 1;
        let frags = roles.extract(&seg, &self.cfg)?;
        if frags.is_empty() {
            let step = Step {
                processed_through: Some(last.id),
                turn,
                ..Default::default()
            };
            env.store.commit(env.user, NAME, &step)?;
            return Ok(0);
        }
        let dim = env.embedder.dim();
        let texts: Vec<String> = frags.iter().map(Fragment::embed_text).collect();
        let mut vecs = embed_batch(env.embedder, &texts)?;
        round_f16(&mut vecs);
        let t0 = Instant::now();
        let compute = dentate_core::default_compute();
        let groups = cluster::cluster(&vecs, dim, &self.cfg.cluster, compute.as_ref())?;
        let centroids: Vec<Vec<f32>> = groups.iter().map(|g| cluster::centroid(&vecs, dim, g)).collect();
        let cluster_ms = t0.elapsed().as_secs_f64() * 1e3;
        let mut pool = Vec::new();
        for id in Self::pool(env)? {
            if env.store.item(id)?.is_some()
                && let Some(c) = self.centroid(env, id)?
            {
                pool.push((id, c));
            }
        }
        let links = cluster::links(&pool, &centroids, self.cfg.cluster.theta);
        log::info!(
            "premem: {} ({} messages): {} fragments, k = {}, clustered in {cluster_ms:.2} ms ({}), {} links to a pool of {}",
            last.msg.session,
            run.len(),
            frags.len(),
            groups.len(),
            compute.name(),
            links.len(),
            pool.len()
        );
        let mut step = Step::default();
        for (f, v) in frags.iter().zip(vecs.chunks_exact(dim)) {
            let m = seg[f.message];
            step.add.push(NewItem {
                kind: f.category.kind().into(),
                text: f.text(),
                sources: vec![m.id],
                said_at: m.msg.said_at,
                refers_to: f.time.secs().or(m.msg.said_at),
                vector: Some(v.to_vec()),
                parent: None,
            });
        }
        let nf = frags.len();
        for (ci, g) in groups.iter().enumerate() {
            let mut sources: Vec<i64> = g.iter().map(|&i| seg[frags[i].message].id).collect();
            sources.sort_unstable();
            sources.dedup();
            let mut keys: Vec<&str> = Vec::new();
            for &i in g {
                if !keys.contains(&frags[i].key.as_str()) {
                    keys.push(&frags[i].key);
                }
            }
            step.add.push(NewItem {
                kind: CLUSTER.into(),
                text: format!("{} fragments of {}: {}", g.len(), last.msg.session, keys.join("; ")),
                sources,
                said_at: last.msg.said_at,
                refers_to: None,
                vector: None,
                parent: None,
            });
            step.derived
                .push((nf + ci, g.iter().map(|&i| ItemRef::InStep(i)).collect()));
        }
        let pending = Pending {
            clusters: groups.len(),
            links,
            done: 0,
            turn,
        };
        step.state = vec![("pending".into(), pending.to_json())];
        step.processed_through = Some(last.id);
        step.turn = turn;
        let ids = env.store.commit(env.user, NAME, &step)?;
        let texts: Vec<&str> = step.add[..nf].iter().map(|it| it.text.as_str()).collect();
        self.vectors.add(env, &ids[..nf], turn, &vecs, &texts)?;
        for (ci, c) in centroids.into_iter().enumerate() {
            self.centroids.insert(ids[nf + ci], c);
        }
        Ok(nf + self.finish_pending(env, roles)?)
    }

    /// Step 2's reasoning for every link of the last session not done yet,
    /// one committed step per link, then the pool update. Returns the
    /// reasoning fragments made.
    fn finish_pending(&mut self, env: &mut Env<'_>, roles: &dyn Roles) -> Result<usize> {
        let Some(mut p) = Self::pending(env)? else { return Ok(0) };
        let new_ids: Vec<i64> = env
            .store
            .items(env.user, NAME, Some(CLUSTER))?
            .into_iter()
            .filter(|c| c.turn == p.turn)
            .map(|c| c.id)
            .collect();
        if new_ids.len() != p.clusters {
            return Err(MemoryError::Invalid(format!(
                "premem state names {} clusters of turn {}, the store holds {}",
                p.clusters,
                p.turn,
                new_ids.len()
            )));
        }
        let names: Vec<String> = env.store.speakers(env.user)?.iter().map(|s| s.to_lowercase()).collect();
        let pool = Self::pool(env)?;
        let mut made = 0;
        loop {
            let mut step = Step {
                turn: p.turn,
                ..Default::default()
            };
            if let Some(&(pid, ci)) = p.links.get(p.done) {
                let cid = *new_ids.get(ci).ok_or_else(|| {
                    MemoryError::Invalid(format!("premem state links cluster {ci} of {}", new_ids.len()))
                })?;
                self.reason_pair(env, roles, (pid, cid), &names, &mut step)?;
                p.done += 1;
            }
            let finished = p.done >= p.links.len();
            step.state = if finished {
                let next = cluster::update_pool(&pool, &p.links, &new_ids);
                for gone in pool.iter().filter(|id| !next.contains(id)) {
                    self.centroids.remove(gone);
                }
                vec![
                    (
                        "pool".into(),
                        serde_json::to_string(&next).unwrap_or_else(|_| "[]".into()),
                    ),
                    ("pending".into(), String::new()),
                ]
            } else {
                vec![("pending".into(), p.to_json())]
            };
            let ids = env.store.commit(env.user, NAME, &step)?;
            let vecs: Vec<f32> = step.add.iter().filter_map(|it| it.vector.clone()).flatten().collect();
            let texts: Vec<&str> = step.add.iter().map(|it| it.text.as_str()).collect();
            self.vectors.add(env, &ids, p.turn, &vecs, &texts)?;
            made += ids.len();
            if finished {
                return Ok(made);
            }
        }
    }

    /// The reasoning fragments of the linked pair (`older`, `newer`) added
    /// to `step`.
    fn reason_pair(
        &self,
        env: &Env<'_>,
        roles: &dyn Roles,
        (older, newer): (i64, i64),
        names: &[String],
        step: &mut Step,
    ) -> Result<()> {
        let old = Self::fragments_of(env, older)?;
        let new = Self::fragments_of(env, newer)?;
        if old.is_empty() || new.is_empty() {
            return Ok(());
        }
        let ok: Vec<Known> = old.iter().map(|f| f.known.clone()).collect();
        let nk: Vec<Known> = new.iter().map(|f| f.known.clone()).collect();
        let insights = roles.reason(&ok, &nk, &self.cfg, names)?;
        let all: Vec<&StoredFragment> = old.iter().chain(&new).collect();
        let mut seen: Vec<String> = Vec::new();
        let mut kept = Vec::new();
        for ins in insights {
            let text = ins.text();
            if seen.contains(&text) {
                continue;
            }
            seen.push(text);
            kept.push(ins);
        }
        let texts: Vec<String> = kept.iter().map(reason::Insight::embed_text).collect();
        let mut vecs = embed_batch(env.embedder, &texts)?;
        round_f16(&mut vecs);
        let dim = env.embedder.dim();
        for (ins, v) in kept.iter().zip(vecs.chunks_exact(dim)) {
            let from: Vec<&StoredFragment> = ins.from.iter().filter_map(|&k| all.get(k).copied()).collect();
            let mut sources: Vec<i64> = from.iter().flat_map(|f| f.sources.iter().copied()).collect();
            sources.sort_unstable();
            sources.dedup();
            let i = step.add.len();
            step.add.push(NewItem {
                kind: REASONING.into(),
                text: ins.text(),
                sources,
                said_at: from.iter().filter_map(|f| f.said_at).max(),
                refers_to: ins.refers_to.or_else(|| from.iter().filter_map(|f| f.known.time).max()),
                vector: Some(v.to_vec()),
                parent: Some(ItemRef::Stored(newer)),
            });
            step.derived
                .push((i, from.iter().map(|f| ItemRef::Stored(f.id)).collect()));
        }
        Ok(())
    }

    /// Processes every complete session after the progress mark (all of
    /// them when `all`, the open one too).
    fn run(&mut self, env: &mut Env<'_>, all: bool, progress: &mut dyn FnMut(usize, usize)) -> Result<IngestReport> {
        let roles = roles(env.llm);
        let roles = roles.as_ref();
        check_embedder(env, NAME)?;
        let mut report = IngestReport {
            items: self.finish_pending(env, roles)?,
            ..Default::default()
        };
        let through = env.store.progress(env.user, NAME)?;
        let msgs = env.store.messages_after(env.user, through)?;
        let runs = self.sessions(&msgs);
        let open = !all
            && runs
                .last()
                .is_some_and(|r| r.len() < self.cfg.max_session_messages.max(1));
        let complete = &runs[..runs.len() - usize::from(open)];
        for run in complete {
            report.items += self.process_session(env, roles, run)?;
            report.messages += run.len();
            progress(report.messages, msgs.len());
        }
        report.live = self.vectors.len(env)?;
        Ok(report)
    }

    /// What an item says (answer recall): `key: content` without the
    /// `[time]` header, plus the resolution of any relative date the
    /// content holds (`(yesterday = 7 May 2023)`, as
    /// [`crate::dates::annotate`] writes it). A time the item only
    /// inherits from its message's date is a header, not something said.
    fn said(item: &Item) -> String {
        let (_, key, content) = extract::split_text(&item.text);
        let body = if key.is_empty() {
            content.to_string()
        } else {
            format!("{key}: {content}")
        };
        match item.said_at {
            Some(t) => crate::dates::annotate(&body, t),
            None => body,
        }
    }

    /// Items show under the day they refer to (else the day they were
    /// said), in time order (§3.3), as stored (`[time] key: content`)
    /// without the `[time]` when it only repeats that day.
    fn parts(item: &Item) -> Parts {
        let (time, key, content) = extract::split_text(&item.text);
        let day = item.refers_to.or(item.said_at);
        let body = match day {
            Some(t) if time == crate::time::human_date(t) => {
                if key.is_empty() {
                    content.to_string()
                } else {
                    format!("{key}: {content}")
                }
            }
            _ => item.text.clone(),
        };
        Parts {
            time: day,
            body,
            speaker_label: false,
        }
    }
}

/// PREMem's two model roles, with a model ([`WithModel`]) or offline
/// ([`Offline`]); [`roles`] picks one, once per ingest.
pub trait Roles {
    /// Step 1: a session's memory fragments.
    fn extract(&self, session: &[&Message], cfg: &PrememConfig) -> Result<Vec<Fragment>>;
    /// Step 2: what follows from a linked pair of clusters' knowledge
    /// (`names`: the speakers, lower case).
    fn reason(
        &self,
        older: &[Known],
        newer: &[Known],
        cfg: &PrememConfig,
        names: &[String],
    ) -> Result<Vec<reason::Insight>>;
}

/// [`Roles`] with a model ([`extract::with_llm`], [`reason::with_llm`]).
pub struct WithModel<'a>(pub &'a dyn Llm);

impl Roles for WithModel<'_> {
    fn extract(&self, session: &[&Message], _: &PrememConfig) -> Result<Vec<Fragment>> {
        Ok(extract::with_llm(self.0, session)?)
    }
    fn reason(
        &self,
        older: &[Known],
        newer: &[Known],
        cfg: &PrememConfig,
        _: &[String],
    ) -> Result<Vec<reason::Insight>> {
        Ok(reason::with_llm(self.0, older, newer, cfg.reason.max_per_pair)?)
    }
}

/// [`Roles`] offline ([`extract::offline_with`], [`reason::offline`]).
pub struct Offline;

impl Roles for Offline {
    fn extract(&self, session: &[&Message], cfg: &PrememConfig) -> Result<Vec<Fragment>> {
        Ok(extract::offline_with(session, cfg.min_content_words, cfg.continuation))
    }
    fn reason(
        &self,
        older: &[Known],
        newer: &[Known],
        cfg: &PrememConfig,
        names: &[String],
    ) -> Result<Vec<reason::Insight>> {
        Ok(reason::offline(older, newer, &cfg.reason, names))
    }
}

/// The roles for a run: the model when there is one, else offline.
pub fn roles(llm: Option<&dyn Llm>) -> Box<dyn Roles + '_> {
    match llm {
        Some(llm) => Box::new(WithModel(llm)),
        None => Box::new(Offline),
    }
}

impl Pipeline for Premem {
    fn name(&self) -> &'static str {
        NAME
    }

    fn ingest(&mut self, env: &mut Env<'_>, progress: &mut dyn FnMut(usize, usize)) -> Result<IngestReport> {
        self.run(env, false, progress)
    }

    fn flush(&mut self, env: &mut Env<'_>) -> Result<IngestReport> {
        self.run(env, true, &mut |_, _| {})
    }

    fn retrieve(&mut self, env: &mut Env<'_>, query: &str, k: usize) -> Result<Vec<Retrieved>> {
        if query.trim().is_empty() {
            return Err(MemoryError::Invalid("the query is empty".into()));
        }
        if self.vectors.len(env)? == 0 {
            return Ok(Vec::new());
        }
        let hits = self.vectors.search(env, query, k)?;
        resolve(env, &hits)
    }

    fn parts(&self) -> fn(&Item) -> Parts {
        Premem::parts
    }

    fn sayer(&self) -> fn(&Item) -> String {
        Premem::said
    }

    fn compose(&mut self, env: &mut Env<'_>, query: &str, budget: usize) -> Result<Composed> {
        let retrieved = crate::context::retrieve(self, env, query, self.cfg.compose_k.max(budget / 16).max(1))?;
        let head = "<memories>\n";
        let tail = format!("</memories>\n<user> {query} </user>");
        let fixed = tokens::count(head) + tokens::count(&tail);
        check_question_fits(fixed, budget)?;
        let packer = Packer::new(String::new(), self.parts()).for_context(&env.context, query);
        // Chosen by rank, shown in time order (§3.3): the packer groups
        // them by day in the order they were said.
        Ok(packer.compose(&retrieved, head, &tail, budget))
    }

    fn drop_item(&mut self, id: i64) {
        self.vectors.drop_items(&[id]);
        self.centroids.clear();
    }

    fn replace_item(&mut self, env: &Env<'_>, id: i64, turn: i64, vector: &[f32], text: &str) -> Result<()> {
        self.centroids.clear();
        self.vectors.replace(env, id, turn, vector, text)
    }

    fn memory_bytes(&self) -> usize {
        self.vectors.memory_bytes() + self.centroids.values().map(|c| c.len() * 4 + 32).sum::<usize>()
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

#[cfg(test)]
mod tests {
    use super::*;

    fn item(kind: &str, text: &str) -> Item {
        crate::store::Item::sample(NAME, kind, text)
    }

    #[test]
    fn what_an_item_says_drops_the_time_header_and_keeps_resolutions() {
        // A time inherited from the message date is a header: not said.
        let inherited = item("factual", "[8 May 2023] cat: Ann has a grey cat called Pixel.");
        assert_eq!(Premem::said(&inherited), "cat: Ann has a grey cat called Pixel.");
        // A time resolved from the content is said, as annotate writes it.
        let resolved = item("experiential", "[7 May 2023] Pixel: Ann adopted Pixel yesterday.");
        assert_eq!(
            Premem::said(&resolved),
            "Pixel: Ann adopted Pixel yesterday. (yesterday = 7 May 2023)"
        );
        // Reasoning fragments lose their date header too.
        let insight = item(
            REASONING,
            "[Before 8 May 2023] Pixel (accumulation): adopted; learned a trick",
        );
        assert_eq!(Premem::said(&insight), "Pixel (accumulation): adopted; learned a trick");
        // The prompt keeps a header that says more than the day the
        // item is grouped under, and drops one that repeats it.
        assert_eq!(Premem::parts(&resolved).body, resolved.text);
        assert_eq!(Premem::parts(&insight).body, insight.text);
        assert_eq!(Premem::parts(&inherited).body, "cat: Ann has a grey cat called Pixel.");
        assert_eq!(Premem::parts(&inherited).time, inherited.said_at);
    }

    #[test]
    fn pending_round_trips_and_rejects_garbage() {
        let p = Pending {
            clusters: 3,
            links: vec![(12, 0), (15, 2)],
            done: 1,
            turn: 40,
        };
        assert_eq!(Pending::parse(&p.to_json()).unwrap(), Some(p));
        assert_eq!(Pending::parse("").unwrap(), None);
        for bad in [
            "{",
            "{\"clusters\": 1}",
            "{\"clusters\": -1, \"links\": [], \"done\": 0, \"turn\": 1}",
        ] {
            assert!(Pending::parse(bad).is_err(), "{bad}");
        }
    }
}
