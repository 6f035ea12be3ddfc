//! Nemori end to end: offline segmentation, episodes and statements with
//! provenance, determinism, streaming across restarts, and the whole LLM
//! path against a scripted OpenAI-compatible server (per-message and batch
//! boundaries, malformed answers, server failures and resuming).

mod common;

use common::{answering_server, chat, chat_body, embedder, msg, stage_by, stages_of};
use dentate_embed::http::testing::{Reply, ScriptedServer};
use dentate_memory::nemori::boundary::BoundaryMode;
use dentate_memory::nemori::{EPISODE, SEMANTIC};
use dentate_memory::{Item, Llm, Memory, MemoryError, NemoriConfig, NewMessage, PipelineKind, Store};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Two sessions, each with two topics; the second topic of each opens
/// with a discourse marker.
fn talk() -> Vec<NewMessage> {
    vec![
        msg(
            1,
            1,
            "Ann",
            "I adopted a grey cat called Pixel from the shelter last weekend.",
        ),
        msg(1, 2, "Bob", "A cat! How is Pixel settling in at your flat?"),
        msg(
            1,
            3,
            "Ann",
            "Pixel hides under the sofa but loves the tuna treats from the shelter.",
        ),
        msg(1, 4, "Bob", "Shelter cats need time; my cat Luna hid for a week."),
        msg(
            1,
            5,
            "Bob",
            "By the way, I am training for the Berlin marathon in September.",
        ),
        msg(1, 6, "Ann", "The Berlin marathon! How far do you run each week?"),
        msg(
            1,
            7,
            "Bob",
            "Forty kilometres a week, with a long run every Sunday morning.",
        ),
        msg(
            2,
            1,
            "Ann",
            "My sister Clara is moving to Lisbon to work as an architect.",
        ),
        msg(2, 2, "Bob", "Lisbon is lovely; will Clara design houses there?"),
        msg(
            2,
            3,
            "Ann",
            "Clara will design museums for a studio near the Lisbon river.",
        ),
        msg(
            2,
            4,
            "Bob",
            "Anyway, I finally repaired the old blue bicycle my grandfather left me.",
        ),
        msg(2, 5, "Ann", "Was the blue bicycle hard to repair?"),
        msg(2, 6, "Bob", "The bicycle needed new brakes, a chain and two tyres."),
    ]
}

fn nemori(cfg: NemoriConfig) -> PipelineKind {
    PipelineKind::Nemori(cfg)
}

fn open(dir: &std::path::Path, llm: Option<Arc<dyn Llm>>, cfg: NemoriConfig) -> Memory {
    Memory::open(dir, nemori(cfg), embedder(), llm).unwrap()
}

fn items(dir: &std::path::Path, kind: &str) -> Vec<Item> {
    Store::open(dir).unwrap().items("ann", "nemori", Some(kind)).unwrap()
}

/// Every episode's sources, in order: together they must be every message
/// exactly once, each episode a contiguous run within one session.
fn check_partition(dir: &std::path::Path) -> Vec<Vec<i64>> {
    let store = Store::open(dir).unwrap();
    let all: Vec<i64> = store.messages_after("ann", 0).unwrap().iter().map(|m| m.id).collect();
    let eps = items(dir, EPISODE);
    let runs: Vec<Vec<i64>> = eps.iter().map(|e| e.sources.clone()).collect();
    let flat: Vec<i64> = runs.concat();
    assert_eq!(flat, all, "episodes partition the messages in order");
    for r in &runs {
        let msgs = store.messages(r).unwrap();
        let sessions: BTreeSet<&str> = msgs.iter().map(|m| m.msg.session.as_str()).collect();
        assert_eq!(sessions.len(), 1, "an episode stays in one session: {r:?}");
    }
    runs
}

/// Every item's sources are stored messages of the user; statements point
/// at their episode, and their sources lie within it.
fn check_provenance(dir: &std::path::Path) {
    let store = Store::open(dir).unwrap();
    let eps = items(dir, EPISODE);
    for it in eps.iter().chain(&items(dir, SEMANTIC)) {
        assert!(!it.sources.is_empty(), "{it:?}");
        let msgs = store.messages(&it.sources).unwrap();
        assert_eq!(msgs.len(), it.sources.len(), "sources are real messages: {it:?}");
        assert!(msgs.iter().all(|m| m.user == "ann"));
        if it.kind == SEMANTIC {
            let parent = eps
                .iter()
                .find(|e| Some(e.id) == it.parent)
                .unwrap_or_else(|| panic!("statement without its episode: {it:?}"));
            assert!(it.sources.iter().all(|s| parent.sources.contains(s)), "{it:?}");
        }
    }
}

#[test]
fn offline_segments_by_session_and_marker_and_learns_statements() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), None, NemoriConfig::default());
    let r = m.ingest("ann", &talk()).unwrap();
    assert_eq!(r.messages, 13);
    // The last episode is still open until the conversation ends.
    let open_before = items(dir.path(), EPISODE).len();
    let f = m.flush("ann").unwrap();
    assert_eq!(items(dir.path(), EPISODE).len(), open_before + 1);
    assert!(f.items >= 1);
    let runs = check_partition(dir.path());
    // Both sessions, and the marked topic changes, split episodes.
    assert!(runs.len() >= 2, "{runs:?}");
    check_provenance(dir.path());
    let statements = items(dir.path(), SEMANTIC);
    assert!(statements.len() >= 5, "{statements:?}");
    // Questions and fillers are not statements.
    assert!(statements.iter().all(|s| !s.text.ends_with('?')), "{statements:?}");
    // Retrieval finds the cat in an episode and a statement.
    let hits = m.retrieve("ann", "What is the name of Ann's cat?", 6).unwrap();
    assert!(
        hits.iter()
            .any(|h| h.item.kind == EPISODE && h.item.text.contains("Pixel"))
    );
    assert_eq!(hits[0].item.kind, EPISODE, "one episode, then two statements");
    // A statement about the cat exists, but retrieval does not repeat what
    // the episode ranked above it already says.
    let pixel: Vec<&Item> = statements.iter().filter(|s| s.text.contains("Pixel")).collect();
    assert!(!pixel.is_empty());
    assert!(
        hits.iter()
            .filter(|h| h.item.kind == SEMANTIC)
            .all(|h| !pixel.iter().any(|p| p.id == h.item.id)),
        "{hits:?}"
    );
    assert_eq!(hits.len(), 6, "statements from other episodes fill the list");
    let c = m.compose("ann", "Where is Clara moving?", 3500).unwrap();
    assert!(c.prompt.contains("Lisbon") && c.tokens <= 3500);
    let small = m.compose("ann", "Where is Clara moving?", 120).unwrap();
    assert!(small.tokens <= 120 && !small.prompt.contains("<original"));
    // Flushing again, with nothing open, does nothing.
    assert_eq!(m.flush("ann").unwrap().items, 0);
}

#[test]
fn the_buffer_holds_at_most_max_buffer_messages() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = NemoriConfig::default();
    cfg.boundary.max_buffer = 3;
    cfg.boundary.confidence = 1.0; // no boundary by confidence: only the size rule
    let mut m = open(dir.path(), None, cfg);
    let msgs: Vec<NewMessage> = (1..=8)
        .map(|t| {
            msg(
                1,
                t,
                "Ann",
                &format!("Note {t} about the same garden and the same roses."),
            )
        })
        .collect();
    m.ingest("ann", &msgs).unwrap();
    m.flush("ann").unwrap();
    let runs = check_partition(dir.path());
    let lens: Vec<usize> = runs.iter().map(Vec::len).collect();
    assert_eq!(lens, [3, 3, 2]);
}

fn snapshot(dir: &std::path::Path) -> Vec<(String, String, Vec<String>)> {
    let store = Store::open(dir).unwrap();
    let mut out = Vec::new();
    for kind in [EPISODE, SEMANTIC] {
        for it in items(dir, kind) {
            let refs = store.source_refs(&it.sources).unwrap();
            out.push((it.kind, it.text, refs));
        }
    }
    out
}

#[test]
fn offline_is_deterministic_and_streaming_across_restarts_changes_nothing() {
    let one = tempfile::tempdir().unwrap();
    let mut m = open(one.path(), None, NemoriConfig::default());
    m.ingest("ann", &talk()).unwrap();
    m.flush("ann").unwrap();
    let again = tempfile::tempdir().unwrap();
    let mut m = open(again.path(), None, NemoriConfig::default());
    m.ingest("ann", &talk()).unwrap();
    m.flush("ann").unwrap();
    assert_eq!(snapshot(one.path()), snapshot(again.path()));
    // One message at a time, reopening the memory (a new process) each
    // time: the open buffer lives in the store.
    let stream = tempfile::tempdir().unwrap();
    for m in talk() {
        let mut mem = open(stream.path(), None, NemoriConfig::default());
        mem.ingest("ann", &[m]).unwrap();
    }
    let mut mem = open(stream.path(), None, NemoriConfig::default());
    mem.flush("ann").unwrap();
    assert_eq!(snapshot(one.path()), snapshot(stream.path()));
}

/// The stage a request is for, from its system prompt.
fn stage(body: &Value) -> &'static str {
    stage_by(
        body,
        &[
            ("episode boundary detector", "boundary"),
            ("topic segmenter", "batch"),
            ("episodic memory writer", "episode"),
            ("prediction step", "predict"),
            ("calibration step", "distill"),
        ],
    )
}

/// The numbered message lines `[n] (...) speaker: text` of a prompt.
fn lines(body: &Value) -> Vec<(usize, String)> {
    let user = body["messages"][1]["content"].as_str().unwrap_or("");
    user.lines()
        .filter_map(|l| {
            let rest = l.strip_prefix('[')?;
            let (n, text) = rest.split_once(']')?;
            Some((n.parse().ok()?, text.to_string()))
        })
        .collect()
}

/// A model that follows the prompts: a boundary at "By the way" and
/// "Anyway", an episode titled after its first message, and one statement
/// per message that mentions a name.
fn answer(body: &Value) -> String {
    let ls = lines(body);
    let marker = |t: &str| t.contains("By the way") || t.contains("Anyway");
    match stage(body) {
        "boundary" => {
            let new = ls.last().map(|l| l.1.clone()).unwrap_or_default();
            json!({"boundary": marker(&new), "confidence": 0.9, "reason": "scripted"}).to_string()
        }
        "batch" => {
            let mut segs = Vec::new();
            let mut start = 1;
            for (n, t) in &ls {
                if marker(t) && *n > start {
                    segs.push(json!({"start": start, "end": n - 1}));
                    start = *n;
                }
            }
            segs.push(json!({"start": start, "end": ls.len()}));
            json!({ "segments": segs }).to_string()
        }
        "episode" => {
            let first = ls.first().map(|l| l.1.clone()).unwrap_or_default();
            let all: Vec<String> = ls.iter().map(|l| l.1.clone()).collect();
            json!({"title": format!("Episode: {}", &first[first.len().saturating_sub(30)..]),
                   "narrative": format!("A talk of {} messages.", all.len()), "date": "2023-05-02"})
            .to_string()
        }
        "predict" => json!({"prediction": "They probably chat about daily life."}).to_string(),
        "distill" => {
            let st: Vec<Value> = ls
                .iter()
                .filter(|(_, t)| ["Pixel", "Berlin", "Clara", "bicycle"].iter().any(|w| t.contains(w)))
                .map(|(n, t)| json!({"statement": format!("Fact: {}", t.trim()), "sources": [n]}))
                .collect();
            json!({ "statements": st }).to_string()
        }
        other => format!("unexpected stage {other}"),
    }
}

fn model_server(limit: usize) -> ScriptedServer {
    answering_server(limit, answer)
}

fn stages(server: &ScriptedServer) -> Vec<&'static str> {
    stages_of(server, stage)
}

#[test]
fn llm_path_per_message() {
    let server = model_server(200);
    let llm: Arc<dyn Llm> = Arc::new(chat(&server, 5000, 0));
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), Some(llm.clone()), NemoriConfig::default());
    m.ingest("ann", &talk()).unwrap();
    m.flush("ann").unwrap();
    let runs = check_partition(dir.path());
    let refs = |r: &Vec<i64>| r.len();
    // Boundaries: the two markers and the new session.
    assert_eq!(runs.iter().map(refs).collect::<Vec<_>>(), [4, 3, 3, 3]);
    check_provenance(dir.path());
    let eps = items(dir.path(), EPISODE);
    assert!(eps[0].text.starts_with("Episode: "), "{:?}", eps[0]);
    // The model's event date is kept as the time the episode refers to.
    assert_eq!(eps[0].refers_to, Some(1_682_985_600));
    let st = items(dir.path(), SEMANTIC);
    assert!(st.iter().all(|s| s.text.starts_with("Fact: ") && s.sources.len() == 1));
    assert!(st.iter().any(|s| s.text.contains("Pixel")));
    // Calls: one boundary call per message once the buffer holds two
    // (never across the session change), then episode, predict and distill
    // per episode.
    let seen = stages(&server);
    let count = |s: &str| seen.iter().filter(|x| **x == s).count();
    assert_eq!((count("episode"), count("predict"), count("distill")), (4, 4, 4));
    assert_eq!(count("boundary"), 7);
    assert_eq!(count("unknown"), 0);
    assert_eq!(llm.stats().calls as usize, seen.len());
    // The calls carry the messages, with their dates.
    let first_episode = server
        .requests()
        .into_iter()
        .find(|r| stage(&r.body) == "episode")
        .unwrap();
    assert!(first_episode.body.to_string().contains("2 May 2023"));
    let hits = m.retrieve("ann", "Which city is Clara moving to?", 3).unwrap();
    assert!(hits.iter().any(|h| h.item.text.contains("Lisbon")));
    // The model's narratives do not quote the messages, so a prompt
    // attaches the originals of its top episodes while they fit.
    let c = m.compose("ann", "Which city is Clara moving to?", 3500).unwrap();
    assert!(
        c.prompt.contains("<original episode=") && c.prompt.contains("Ann: My sister Clara is moving to Lisbon"),
        "{}",
        c.prompt
    );
    assert_eq!(c.prompt.matches("<original episode=").count(), 2);
    let small = m.compose("ann", "Which city is Clara moving to?", 60).unwrap();
    assert!(
        small.tokens <= 60 && !small.prompt.contains("<original"),
        "{}",
        small.prompt
    );
}

#[test]
fn llm_path_batch() {
    let server = model_server(200);
    let llm: Arc<dyn Llm> = Arc::new(chat(&server, 5000, 0));
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = NemoriConfig::default();
    cfg.boundary.mode = BoundaryMode::Batch { window: 5 };
    let mut m = open(dir.path(), Some(llm), cfg);
    m.ingest("ann", &talk()).unwrap();
    m.flush("ann").unwrap();
    let runs = check_partition(dir.path());
    assert_eq!(runs.iter().map(Vec::len).collect::<Vec<_>>(), [4, 3, 3, 3]);
    check_provenance(dir.path());
    let seen = stages(&server);
    assert!(seen.contains(&"batch") && !seen.contains(&"boundary"), "{seen:?}");
}

#[test]
fn malformed_answers_are_repaired_or_fail_typed_and_resume_loses_nothing() {
    // The first episode answer is prose, then the repair succeeds.
    let server = ScriptedServer::start(200, |i, body| {
        if stage(body) == "episode" && i < 4 {
            Reply::ok(chat_body("Here is the episode: a chat about a cat."))
        } else {
            Reply::ok(chat_body(&answer(body)))
        }
    })
    .unwrap();
    let llm: Arc<dyn Llm> = Arc::new(chat(&server, 5000, 0));
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), Some(llm.clone()), NemoriConfig::default());
    m.ingest("ann", &talk()[..6]).unwrap();
    assert_eq!(llm.stats().repairs, 1);
    assert_eq!(items(dir.path(), EPISODE).len(), 1);

    // Distillation always malformed: a typed error, nothing half-stored.
    let bad = ScriptedServer::start(200, |_, body| {
        if stage(body) == "distill" {
            Reply::ok(chat_body("{\"facts\": []}"))
        } else {
            Reply::ok(chat_body(&answer(body)))
        }
    })
    .unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    let mut m = open(
        dir2.path(),
        Some(Arc::new(chat(&bad, 5000, 0))),
        NemoriConfig::default(),
    );
    let err = m.ingest("ann", &talk()).unwrap_err();
    assert!(matches!(err, MemoryError::Llm(_)), "{err}");
    assert!(err.to_string().contains("statements"), "{err}");
    assert!(items(dir2.path(), EPISODE).is_empty());

    // The server fails outright (HTTP 500) after a while; then a working
    // model resumes, and the result equals an uninterrupted run.
    let failing = ScriptedServer::start(200, |i, body| {
        if i >= 12 {
            Reply::status(500, "{\"error\": \"down\"}")
        } else {
            Reply::ok(chat_body(&answer(body)))
        }
    })
    .unwrap();
    let dir3 = tempfile::tempdir().unwrap();
    let mut m = open(
        dir3.path(),
        Some(Arc::new(chat(&failing, 5000, 0))),
        NemoriConfig::default(),
    );
    let err = m.ingest("ann", &talk()).unwrap_err();
    assert!(matches!(err, MemoryError::Llm(_)), "{err}");
    let done_before = items(dir3.path(), EPISODE).len();
    assert!(done_before >= 1, "progress before the failure is kept");
    let good = model_server(200);
    let mut m = open(
        dir3.path(),
        Some(Arc::new(chat(&good, 5000, 0))),
        NemoriConfig::default(),
    );
    m.process("ann", &mut |_, _| {}).unwrap();
    m.flush("ann").unwrap();
    check_partition(dir3.path());
    let reference = tempfile::tempdir().unwrap();
    let clean = model_server(200);
    let mut m = open(
        reference.path(),
        Some(Arc::new(chat(&clean, 5000, 0))),
        NemoriConfig::default(),
    );
    m.ingest("ann", &talk()).unwrap();
    m.flush("ann").unwrap();
    assert_eq!(snapshot(dir3.path()), snapshot(reference.path()));
    // No decided message was sent to the model again after resuming.
    assert!(good.requests().len() < clean.requests().len());
}
