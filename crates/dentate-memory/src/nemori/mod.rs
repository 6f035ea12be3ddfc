//! Nemori (Nan et al. 2025, "Nemori: Self-Organizing Agent Memory Inspired
//! by Cognitive Science"): messages are segmented into **episodes** at
//! topic boundaries ([`boundary`]), each episode is written as a title and
//! a narrative ([`episode`]), and **semantic statements** are learned only
//! from what the existing ones failed to predict ([`semantic`]). Retrieval
//! searches episodes and statements, each with the configured retriever
//! (hybrid by default), and interleaves them one episode to two statements
//! (the paper's k episodes and 2k statements).
//!
//! Streaming: messages are stored before processing; the open buffer is
//! the stored messages from `buffer_start` through the last processed one,
//! so it survives restarts. Each episode commits in one step with its
//! statements and the new buffer position; with a model the position is
//! also committed after every message, so no model call is repeated after
//! a crash except those of an episode whose step had not committed. The
//! buffer stays open after [`Pipeline::ingest`] until a boundary or
//! [`Pipeline::flush`] (the end of a conversation) closes it, so the
//! newest messages are not searchable until then.

pub mod boundary;
pub mod episode;
pub mod semantic;

use crate::error::{MemoryError, Result};
use crate::llm::Llm;
use crate::pipeline::{
    Composed, Env, IngestReport, Packer, Parts, Pipeline, Retrieved, Vectors, check_embedder, check_question_fits,
    embed_batch, resolve,
};
use crate::store::{ItemRef, Message, NewItem, Step};
use crate::tokens;
use crate::vecmem::VectorMemoryConfig;
use boundary::{BoundaryConfig, BoundaryMode, Decision, llm_decision, llm_segments, offline_decision};
use episode::Episode;
use semantic::{SemanticConfig, Statement};

const NAME: &str = "nemori";
/// Item kind of episodes.
pub const EPISODE: &str = "episode";
/// Item kind of semantic statements.
pub const SEMANTIC: &str = "semantic";

/// Nemori settings.
#[derive(Debug, Clone)]
pub struct NemoriConfig {
    /// Boundary detection (buffer 2–25, σ = 0.7, per-message mode).
    pub boundary: BoundaryConfig,
    /// Predict–calibrate (m = 10, σ_s = 0.7).
    pub semantic: SemanticConfig,
    /// Offline: the longest extractive narrative, in tokens (default 400).
    pub narrative_tokens: usize,
    /// Items a composed prompt draws on (default 30: 10 episodes and 20
    /// statements, the paper's k = 10, m = 2k).
    pub compose_k: usize,
    /// Top episodes whose original messages a composed prompt attaches
    /// when they fit (default 2, as the paper); skipped for an episode
    /// whose narrative already quotes every message (offline, uncut).
    pub attach_originals: usize,
    /// Vector-index settings (both indexes).
    pub vectors: VectorMemoryConfig,
    /// Append the resolution of relative dates ("yesterday = 7 May 2023")
    /// to each message an episode is written from, so narratives and
    /// statements carry them ([`crate::dates::annotate`]; default on: it
    /// raised answer recall on `locomo-dev.json` at every budget, see
    /// BENCHMARKS.md).
    pub resolve_dates: bool,
}

impl Default for NemoriConfig {
    fn default() -> Self {
        NemoriConfig {
            boundary: BoundaryConfig::default(),
            semantic: SemanticConfig::default(),
            narrative_tokens: 400,
            compose_k: 30,
            attach_originals: 2,
            vectors: VectorMemoryConfig::default(),
            resolve_dates: true,
        }
    }
}

/// The Nemori pipeline.
#[derive(Debug)]
pub struct Nemori {
    cfg: NemoriConfig,
    episodes: Vectors,
    semantic: Vectors,
}

/// The open buffer: messages since the last boundary, with their unit
/// embeddings (offline only).
pub(crate) struct Buffer {
    msgs: Vec<Message>,
    vecs: Vec<Vec<f32>>,
}

impl Nemori {
    /// Nemori with `cfg`.
    pub fn new(cfg: NemoriConfig) -> Self {
        Nemori {
            episodes: Vectors::of_kind(NAME, EPISODE, cfg.vectors.clone()),
            semantic: Vectors::of_kind(NAME, SEMANTIC, cfg.vectors.clone()),
            cfg,
        }
    }

    /// The settings.
    pub fn config(&self) -> &NemoriConfig {
        &self.cfg
    }

    fn buffer_start(env: &Env<'_>) -> Result<i64> {
        Ok(env
            .store
            .state(env.user, NAME, "buffer_start")?
            .and_then(|v| v.parse().ok())
            .unwrap_or(0))
    }

    /// The buffer position as step state: where the open buffer starts
    /// (0: empty).
    fn position(start: i64) -> Vec<(String, String)> {
        vec![("buffer_start".into(), start.to_string())]
    }

    /// Writes the buffer position alone.
    fn commit_position(env: &mut Env<'_>, buffer: &Buffer, through: i64) -> Result<()> {
        let step = Step {
            state: Self::position(buffer.msgs.first().map_or(0, |m| m.id)),
            processed_through: Some(through),
            ..Default::default()
        };
        env.store.commit(env.user, NAME, &step)?;
        Ok(())
    }

    /// Makes one episode (and its statements) from `segment` and commits
    /// it with the buffer position that follows (the open buffer starts at
    /// message `next_start`, 0 when empty; `through` processed); returns
    /// the items made.
    fn emit(
        &mut self,
        env: &mut Env<'_>,
        roles: &dyn Roles,
        segment: &[Message],
        next_start: i64,
        through: i64,
    ) -> Result<usize> {
        let Some(first) = segment.first() else { return Ok(0) };
        let annotated: Vec<Message>;
        let segment = if self.cfg.resolve_dates {
            annotated = segment
                .iter()
                .map(|m| {
                    let mut m = m.clone();
                    if let Some(t) = m.msg.said_at {
                        m.msg.text = crate::dates::annotate(&m.msg.text, t);
                    }
                    m
                })
                .collect();
            &annotated[..]
        } else {
            segment
        };
        let seg: Vec<&Message> = segment.iter().collect();
        let ep = roles.episode(&seg, self.cfg.narrative_tokens)?;
        let ep_text = ep.text();
        let ep_vec = env.embedder.embed(&[ep_text.as_str()])?;
        // Stage 1: what is already known about this episode.
        let sc = self.cfg.semantic.clone();
        let relevant: Vec<i64> = if self.semantic.len(env)? == 0 {
            Vec::new()
        } else {
            self.semantic
                .get(env)?
                .search(&ep_vec, sc.max_relevant)?
                .into_iter()
                .filter(|&(_, s)| s >= sc.relevant_threshold)
                .map(|(id, _)| id)
                .collect()
        };
        let dim = env.embedder.dim();
        // Stage 2: the prediction gap, as statements with their vectors.
        let (statements, vecs) = roles.statements(env, &ep, &seg, &relevant, &sc)?;
        // Stage 3: integration, without near-duplicates of what is stored
        // or of each other.
        let mut step = Step::default();
        step.add.push(NewItem {
            kind: EPISODE.into(),
            text: ep_text,
            sources: seg.iter().map(|m| m.id).collect(),
            said_at: first.msg.said_at,
            refers_to: ep.refers_to.or(first.msg.said_at),
            vector: Some(ep_vec),
            parent: None,
        });
        let mut kept: Vec<&[f32]> = Vec::new();
        for (s, v) in statements.iter().zip(vecs.chunks_exact(dim)) {
            let dup_stored = self.semantic.len(env)? > 0
                && self
                    .semantic
                    .get(env)?
                    .search(v, 1)?
                    .first()
                    .is_some_and(|&(_, c)| c >= sc.dedupe);
            let dup_new = kept.iter().any(|k| dot(k, v) >= sc.dedupe);
            if dup_stored || dup_new {
                continue;
            }
            kept.push(v);
            let sources: Vec<&Message> = s.sources.iter().filter_map(|&i| seg.get(i).copied()).collect();
            let said = sources.iter().filter_map(|m| m.msg.said_at).max();
            step.add.push(NewItem {
                kind: SEMANTIC.into(),
                text: s.text.clone(),
                sources: sources.iter().map(|m| m.id).collect(),
                said_at: said,
                refers_to: said,
                vector: Some(v.to_vec()),
                parent: Some(ItemRef::InStep(0)),
            });
        }
        step.state = Self::position(next_start);
        step.processed_through = Some(through);
        step.turn = segment.last().map_or(0, |m| m.seq + 1);
        let ids = env.store.commit(env.user, NAME, &step)?;
        for (id, it) in ids.iter().zip(&step.add) {
            let idx = if it.kind == EPISODE {
                &mut self.episodes
            } else {
                &mut self.semantic
            };
            if let Some(v) = &it.vector {
                idx.add(env, &[*id], step.turn, v, &[it.text.as_str()])?;
            }
        }
        Ok(ids.len())
    }

    /// Unit embeddings of `msgs` (offline boundary detection only).
    fn embed_messages(env: &Env<'_>, roles: &dyn Roles, msgs: &[Message]) -> Result<Vec<Vec<f32>>> {
        if roles.calls_model() {
            return Ok(vec![Vec::new(); msgs.len()]);
        }
        let texts: Vec<String> = msgs.iter().map(|m| m.msg.text.clone()).collect();
        let dim = env.embedder.dim();
        Ok(embed_batch(env.embedder, &texts)?
            .chunks_exact(dim)
            .map(<[f32]>::to_vec)
            .collect())
    }

    /// The boundary decision for `m` after `buffer` (`None`: no decision
    /// needed, or batch mode).
    fn decide(&self, roles: &dyn Roles, buffer: &Buffer, m: &Message, v: &[f32]) -> Result<Option<Decision>> {
        let bc = &self.cfg.boundary;
        let Some(last) = buffer.msgs.last() else {
            return Ok(None);
        };
        // A new session always ends an episode (no model call needed).
        if last.msg.session != m.msg.session {
            return Ok(Some(Decision {
                boundary: true,
                confidence: 1.0,
                reason: "new session".into(),
            }));
        }
        roles.decide(buffer, (m, v), bc)
    }

    /// Batch mode: splits `old` with the model and emits every segment
    /// but the last (all of them when `all`), with `tail` (messages after
    /// `old`, already buffered) kept open; returns the items made and the
    /// messages of `old` left open.
    fn emit_batch(
        &mut self,
        env: &mut Env<'_>,
        roles: &dyn Roles,
        mut old: Vec<Message>,
        tail: &[Message],
        through: i64,
        all: bool,
    ) -> Result<(usize, Vec<Message>)> {
        if old.is_empty() {
            return Ok((0, old));
        }
        let refs: Vec<&Message> = old.iter().collect();
        let Some(lens) = roles.segments(&refs)? else {
            return Ok((0, old));
        };
        let n_emit = if !all && lens.len() > 1 {
            lens.len() - 1
        } else {
            lens.len()
        };
        let mut made = 0;
        for &len in &lens[..n_emit] {
            let seg: Vec<Message> = old.drain(..len).collect();
            let next_start = old.first().or(tail.first()).map_or(0, |m| m.id);
            made += self.emit(env, roles, &seg, next_start, through)?;
        }
        Ok((made, old))
    }

    fn parts(item: &crate::store::Item) -> Parts {
        Parts {
            time: item.said_at,
            body: item.text.replacen('\n', ": ", 1),
            speaker_label: false,
        }
    }
}

/// Nemori's model roles — boundary detection, batch segmentation, episode
/// generation and the semantic memory's statements — with a model
/// ([`WithModel`]) or offline ([`Offline`]); [`roles`] picks one, once per
/// ingest.
pub(crate) trait Roles {
    /// Whether a model plays the roles: each decision then costs a call
    /// (the buffer position is committed after every message), and
    /// boundary detection needs no message vectors.
    fn calls_model(&self) -> bool;
    /// The boundary decision for `m` (with its vector; empty with a
    /// model) after the non-empty `buffer` in the same session; `None`
    /// when no decision is needed (or batch mode decides).
    fn decide(&self, buffer: &Buffer, m: (&Message, &[f32]), bc: &BoundaryConfig) -> Result<Option<Decision>>;
    /// Batch mode: `msgs` split into segment lengths; `None` offline
    /// (batch mode needs a model).
    fn segments(&self, msgs: &[&Message]) -> Result<Option<Vec<usize>>>;
    /// The episode of a segment.
    fn episode(&self, seg: &[&Message], narrative_tokens: usize) -> Result<Episode>;
    /// Stage 2 of the semantic memory: the statements the episode adds to
    /// what is known (`relevant`: stored statements near it), with their
    /// vectors.
    fn statements(
        &self,
        env: &Env<'_>,
        ep: &Episode,
        seg: &[&Message],
        relevant: &[i64],
        sc: &SemanticConfig,
    ) -> Result<(Vec<Statement>, Vec<f32>)>;
}

/// [`Roles`] with a model: boundary decisions and batch segmentation by
/// the model, episodes by [`episode::with_llm`], predict–calibrate
/// statements ([`semantic::predict`], [`semantic::distill`]).
pub(crate) struct WithModel<'a>(&'a dyn Llm);

impl Roles for WithModel<'_> {
    fn calls_model(&self) -> bool {
        true
    }
    fn decide(&self, buffer: &Buffer, (m, _): (&Message, &[f32]), bc: &BoundaryConfig) -> Result<Option<Decision>> {
        if matches!(bc.mode, BoundaryMode::Batch { .. }) || buffer.msgs.len() < bc.min_buffer {
            return Ok(None);
        }
        let refs: Vec<&Message> = buffer.msgs.iter().collect();
        Ok(Some(llm_decision(self.0, &refs, m)?))
    }
    fn segments(&self, msgs: &[&Message]) -> Result<Option<Vec<usize>>> {
        Ok(Some(llm_segments(self.0, msgs)?))
    }
    fn episode(&self, seg: &[&Message], _: usize) -> Result<Episode> {
        Ok(episode::with_llm(self.0, seg)?)
    }
    fn statements(
        &self,
        env: &Env<'_>,
        ep: &Episode,
        seg: &[&Message],
        relevant: &[i64],
        sc: &SemanticConfig,
    ) -> Result<(Vec<Statement>, Vec<f32>)> {
        let mut known = Vec::with_capacity(relevant.len());
        for &id in relevant {
            if let Some(it) = env.store.item(id)? {
                known.push(it.text);
            }
        }
        let prediction = semantic::predict(self.0, &ep.title, &known)?;
        let st = semantic::distill(self.0, &prediction, seg, sc)?;
        let texts: Vec<String> = st.iter().map(|s| s.text.clone()).collect();
        let v = embed_batch(env.embedder, &texts)?;
        Ok((st, v))
    }
}

/// [`Roles`] offline: boundaries from time gaps and embedding similarity,
/// extractive episodes, novel sentences as statements.
pub(crate) struct Offline;

impl Roles for Offline {
    fn calls_model(&self) -> bool {
        false
    }
    fn decide(&self, buffer: &Buffer, (m, v): (&Message, &[f32]), bc: &BoundaryConfig) -> Result<Option<Decision>> {
        let Some(last) = buffer.msgs.last() else {
            return Ok(None);
        };
        // Below the smallest buffer only a time gap may end it.
        if buffer.msgs.len() < bc.min_buffer {
            return Ok(boundary::time_gap(last, m, bc));
        }
        let buf: Vec<(&Message, &[f32])> = buffer
            .msgs
            .iter()
            .zip(&buffer.vecs)
            .map(|(m, v)| (m, v.as_slice()))
            .collect();
        Ok(Some(offline_decision(&buf, (m, v), bc)))
    }
    fn segments(&self, _: &[&Message]) -> Result<Option<Vec<usize>>> {
        Ok(None)
    }
    fn episode(&self, seg: &[&Message], narrative_tokens: usize) -> Result<Episode> {
        Ok(episode::extractive(seg, narrative_tokens))
    }
    fn statements(
        &self,
        env: &Env<'_>,
        _: &Episode,
        seg: &[&Message],
        relevant: &[i64],
        sc: &SemanticConfig,
    ) -> Result<(Vec<Statement>, Vec<f32>)> {
        let dim = env.embedder.dim();
        let mut known = Vec::with_capacity(relevant.len());
        for &id in relevant {
            if let Some(v) = env.store.vector(id)? {
                known.push(v);
            }
        }
        let sents = episode::sentences(seg);
        let texts: Vec<String> = sents.iter().map(|s| format!("{}: {}", s.speaker, s.text)).collect();
        let v = embed_batch(env.embedder, &texts)?;
        let novel = semantic::novel_sentences(&sents, &v, dim, &known, sc);
        let mut kept = Vec::with_capacity(novel.len() * dim);
        for (i, _) in &novel {
            kept.extend_from_slice(&v[i * dim..(i + 1) * dim]);
        }
        Ok((novel.into_iter().map(|(_, s)| s).collect(), kept))
    }
}

/// The roles for a run: the model when there is one, else offline.
pub(crate) fn roles(llm: Option<&dyn Llm>) -> Box<dyn Roles + '_> {
    match llm {
        Some(llm) => Box::new(WithModel(llm)),
        None => Box::new(Offline),
    }
}

/// One episode, then two statements, while both lists last; then the
/// rest of the longer one; at most `k` items. A statement whose words an
/// episode placed above it already holds (offline statements are
/// sentences of the episode) is skipped: it would spend the budget twice.
fn interleave(eps: Vec<Retrieved>, sem: Vec<Retrieved>, k: usize) -> Vec<Retrieved> {
    // Never more than both lists hold, whatever `k` was asked for.
    let mut out: Vec<Retrieved> = Vec::with_capacity(k.min(eps.len() + sem.len()));
    let (mut e, mut s) = (eps.into_iter(), sem.into_iter());
    let redundant = |out: &[Retrieved], st: &Retrieved| {
        let text = st.item.text.as_str();
        let body = text
            .split_once(": ")
            .filter(|(speaker, _)| speaker.len() <= 40)
            .map_or(text, |(_, b)| b);
        out.iter()
            .any(|r| r.item.kind == EPISODE && st.item.parent == Some(r.item.id) && r.item.text.contains(body))
    };
    while out.len() < k {
        let mut took = false;
        if let Some(h) = e.next() {
            out.push(h);
            took = true;
        }
        let mut n = 0;
        while n < 2 && out.len() < k {
            let Some(h) = s.next() else { break };
            took = true;
            if !redundant(&out, &h) {
                out.push(h);
                n += 1;
            }
        }
        if !took {
            break;
        }
    }
    out.truncate(k);
    out
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

impl Pipeline for Nemori {
    fn name(&self) -> &'static str {
        NAME
    }

    fn ingest(&mut self, env: &mut Env<'_>, progress: &mut dyn FnMut(usize, usize)) -> Result<IngestReport> {
        check_embedder(env, NAME)?;
        let through = env.store.progress(env.user, NAME)?;
        let start = Self::buffer_start(env)?;
        let from = if start > 0 { (start - 1).min(through) } else { through };
        let all = env.store.messages_after(env.user, from)?;
        let (open, new): (Vec<Message>, Vec<Message>) = all.into_iter().partition(|m| m.id <= through);
        let roles = roles(env.llm);
        let roles = roles.as_ref();
        let mut buffer = Buffer {
            vecs: Self::embed_messages(env, roles, &open)?,
            msgs: open,
        };
        let mut report = IngestReport::default();
        let bc = self.cfg.boundary.clone();
        let with_llm = roles.calls_model();
        let batch = with_llm && matches!(bc.mode, BoundaryMode::Batch { .. });
        let mut since_commit = 0usize;
        for (c, chunk) in new.chunks(64).enumerate() {
            let vecs = Self::embed_messages(env, roles, chunk)?;
            for (m, v) in chunk.iter().zip(vecs) {
                let full = buffer.msgs.len() >= bc.max_buffer;
                let cut = full
                    || self
                        .decide(roles, &buffer, m, &v)?
                        .is_some_and(|d| d.segments(bc.confidence));
                if cut && !buffer.msgs.is_empty() {
                    let seg = std::mem::take(&mut buffer.msgs);
                    buffer.vecs.clear();
                    buffer.msgs.push(m.clone());
                    buffer.vecs.push(v);
                    report.items += if batch {
                        // The model splits what the window had gathered.
                        self.emit_batch(env, roles, seg, &buffer.msgs, m.id, true)?.0
                    } else {
                        self.emit(env, roles, &seg, m.id, m.id)?
                    };
                    since_commit = 0;
                } else {
                    buffer.msgs.push(m.clone());
                    buffer.vecs.push(v);
                    if let BoundaryMode::Batch { window } = bc.mode
                        && batch
                        && buffer.msgs.len() >= window.max(2)
                    {
                        let old = std::mem::take(&mut buffer.msgs);
                        let (made, open) = self.emit_batch(env, roles, old, &[], m.id, false)?;
                        report.items += made;
                        buffer.vecs = vec![Vec::new(); open.len()];
                        buffer.msgs = open;
                    }
                    since_commit += 1;
                    // With a model every decision cost a call: keep it.
                    if with_llm || since_commit >= 64 {
                        Self::commit_position(env, &buffer, m.id)?;
                        since_commit = 0;
                    }
                }
                report.messages += 1;
            }
            progress((c * 64 + chunk.len()).min(new.len()), new.len());
        }
        if since_commit > 0
            && let Some(last) = new.last()
        {
            Self::commit_position(env, &buffer, last.id)?;
        }
        report.live = self.episodes.len(env)? + self.semantic.len(env)?;
        Ok(report)
    }

    fn flush(&mut self, env: &mut Env<'_>) -> Result<IngestReport> {
        let mut report = self.ingest(env, &mut |_, _| {})?;
        let through = env.store.progress(env.user, NAME)?;
        let start = Self::buffer_start(env)?;
        if start == 0 {
            return Ok(report);
        }
        let msgs: Vec<Message> = env
            .store
            .messages_after(env.user, start - 1)?
            .into_iter()
            .take_while(|m| m.id <= through)
            .collect();
        let roles = roles(env.llm);
        let roles = roles.as_ref();
        report.items += match (roles.calls_model(), self.cfg.boundary.mode) {
            (true, BoundaryMode::Batch { .. }) => self.emit_batch(env, roles, msgs, &[], through, true)?.0,
            _ => self.emit(env, roles, &msgs, 0, through)?,
        };
        report.live = self.episodes.len(env)? + self.semantic.len(env)?;
        Ok(report)
    }

    fn retrieve(&mut self, env: &mut Env<'_>, query: &str, k: usize) -> Result<Vec<Retrieved>> {
        if query.trim().is_empty() {
            return Err(MemoryError::Invalid("the query is empty".into()));
        }
        // Deeper than k: statements already said by an episode ranked
        // above them are dropped below.
        let depth = k.saturating_mul(2);
        let eps = if self.episodes.len(env)? > 0 {
            resolve(env, &self.episodes.search(env, query, depth)?)?
        } else {
            Vec::new()
        };
        let sem = if self.semantic.len(env)? > 0 {
            resolve(env, &self.semantic.search(env, query, depth)?)?
        } else {
            Vec::new()
        };
        Ok(interleave(eps, sem, k))
    }

    fn parts(&self) -> fn(&crate::store::Item) -> Parts {
        Nemori::parts
    }

    fn compose(&mut self, env: &mut Env<'_>, query: &str, budget: usize) -> Result<Composed> {
        let retrieved = crate::context::retrieve(self, env, query, self.cfg.compose_k.max(1))?;
        let head = "<memories>\n";
        let tail = format!("</memories>\n<user> {query} </user>");
        let fixed = tokens::count(head) + tokens::count(&tail);
        check_question_fits(fixed, budget)?;
        // The original messages of the top episodes first, within half of
        // the budget; the ranked items fill the rest.
        let mut originals = String::new();
        for r in retrieved
            .iter()
            .filter(|r| r.item.kind == EPISODE)
            .take(self.cfg.attach_originals)
        {
            let msgs = env.store.messages(&r.item.sources)?;
            // An extractive narrative already quotes every message.
            if msgs.iter().all(|m| r.item.text.contains(m.msg.text.trim())) {
                continue;
            }
            let title = r.item.text.lines().next().unwrap_or("");
            let mut block = format!("<original episode=\"{title}\">\n");
            for m in &msgs {
                block.push_str(&crate::pipeline::message_text(m));
                block.push('\n');
            }
            block.push_str("</original>\n");
            if tokens::count(&originals) + tokens::count(&block) <= (budget - fixed) / 2 {
                originals.push_str(&block);
            }
        }
        let packer = Packer::new(String::new(), self.parts()).for_context(&env.context, query);
        let composed = packer.compose(&retrieved, head, &format!("{originals}{tail}"), budget);
        if composed.tokens <= budget {
            return Ok(composed);
        }
        // Even the originals alone overshoot (by the joins): drop them too.
        let prompt = format!("{head}{tail}");
        Ok(Composed {
            tokens: tokens::count(&prompt),
            trimmed: retrieved.len(),
            included: Vec::new(),
            prompt,
        })
    }

    fn drop_item(&mut self, id: i64) {
        self.episodes.drop_items(&[id]);
        self.semantic.drop_items(&[id]);
    }

    fn replace_item(&mut self, env: &Env<'_>, id: i64, turn: i64, vector: &[f32], text: &str) -> Result<()> {
        let kind = env.store.item(id)?.map(|it| it.kind);
        match kind.as_deref() {
            Some(EPISODE) => self.episodes.replace(env, id, turn, vector, text),
            Some(SEMANTIC) => self.semantic.replace(env, id, turn, vector, text),
            _ => Err(MemoryError::Invalid(format!(
                "item {id} is not a Nemori episode or statement"
            ))),
        }
    }

    fn memory_bytes(&self) -> usize {
        self.episodes.memory_bytes() + self.semantic.memory_bytes()
    }

    fn index_files(&self, env: &Env<'_>) -> Vec<std::path::PathBuf> {
        let mut f = self.episodes.files(env);
        f.extend(self.semantic.files(env));
        f
    }

    fn images(&self, env: &Env<'_>) -> Vec<(std::path::PathBuf, Vec<u8>)> {
        let mut out = self.episodes.images(env);
        out.extend(self.semantic.images(env));
        out
    }

    fn load(&mut self, env: &Env<'_>) -> Result<()> {
        self.episodes.load(env)?;
        self.semantic.load(env)
    }
}
