//! The memory layer end to end: store, provenance, namespaces, RAG, HEMA,
//! forgetting, prompt budgets, and resuming after a model failure.

mod common;

use common::{chat, conversation, embedder, msg, summary_server};
use dentate_embed::http::testing::{Reply, ScriptedServer};
use dentate_memory::store::SCHEMA_VERSION;
use dentate_memory::{HemaConfig, Llm, Memory, MemoryError, NewMessage, PipelineKind, Store, VectorMemoryConfig};
use std::sync::Arc;

fn open(dir: &std::path::Path, kind: &str) -> Memory {
    Memory::open(dir, PipelineKind::parse(kind).unwrap(), embedder(), None).unwrap()
}

#[test]
fn rag_retrieves_the_right_turn_with_provenance() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), "rag");
    let r = m.ingest("ann", &conversation()).unwrap();
    assert_eq!((r.messages, r.items, r.live), (6, 6, 6));
    let hits = m
        .retrieve("ann", "What is the name of the cat Ann adopted?", 3)
        .unwrap();
    assert_eq!(hits[0].source_refs, vec!["D1:1"]);
    assert!(hits[0].item.text.contains("Pixel"));
    assert_eq!(hits[0].item.kind, "turn");
    assert_eq!(hits[0].item.said_at, Some(1_682_899_200 + 86_400 + 60));
    assert!(hits[0].score > hits[1].score);
    let hits = m.retrieve("ann", "Which city is Clara moving to?", 1).unwrap();
    assert_eq!(hits[0].source_refs, vec!["D1:3"]);
}

/// Ingesting the same messages again stores nothing twice (same caller id
/// and text); a new text under a known id (another conversation's dialogue
/// ids) and messages without ids are stored; the store survives a reopen.
#[test]
fn ingesting_the_same_messages_again_stores_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), "rag");
    let conv = conversation();
    assert_eq!(m.add_messages("ann", &conv).unwrap().len(), conv.len());
    m.process("ann", &mut |_, _| {}).unwrap();
    assert!(m.add_messages("ann", &conv).unwrap().is_empty());
    // Duplicates inside one batch are the same message too.
    let twice = [
        conv[0].clone(),
        msg(9, 1, "Ann", "A new line."),
        msg(9, 1, "Ann", "A new line."),
    ];
    assert_eq!(m.add_messages("ann", &twice).unwrap().len(), 1);
    let mut other = msg(1, 1, "Cy", "Another conversation reuses the id D1:1.");
    assert_eq!(other.source_ref.as_deref(), Some("D1:1"));
    assert_eq!(m.add_messages("ann", std::slice::from_ref(&other)).unwrap().len(), 1);
    other.source_ref = None;
    assert_eq!(m.add_messages("ann", &[other.clone(), other]).unwrap().len(), 2);
    let r = m.process("ann", &mut |_, _| {}).unwrap();
    assert_eq!(r.messages, 4);
    drop(m);
    let mut m = open(dir.path(), "rag");
    assert_eq!(m.store().message_count("ann").unwrap(), conv.len() as i64 + 4);
    assert!(m.add_messages("ann", &conv).unwrap().is_empty(), "after a reopen too");
    // Another user's identical messages are theirs.
    assert_eq!(m.add_messages("bob", &conv).unwrap().len(), conv.len());
}

#[test]
fn users_are_separate_namespaces() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), "rag");
    m.ingest("ann", &conversation()).unwrap();
    m.ingest("zed", &[msg(1, 1, "Zed", "I collect antique typewriters from Prague.")])
        .unwrap();
    let hits = m.retrieve("zed", "cat adopted from the shelter", 5).unwrap();
    assert_eq!(hits.len(), 1, "zed sees only his own memory");
    assert!(hits[0].item.text.contains("typewriters"));
    assert_eq!(m.store().users().unwrap(), vec!["ann", "zed"]);
    for bad in ["", "a/b", "..", &"x".repeat(65)] {
        assert!(
            matches!(m.retrieve(bad, "q", 1), Err(MemoryError::Invalid(_))),
            "{bad:?}"
        );
    }
}

#[test]
fn bad_input_is_refused_with_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), "rag");
    // Retrieval from an empty memory is empty, not an error.
    assert!(m.retrieve("ann", "anything", 5).unwrap().is_empty());
    assert!(matches!(m.retrieve("ann", "q", 0), Err(MemoryError::Invalid(_))));
    assert!(matches!(m.retrieve("ann", "   ", 3), Err(MemoryError::Invalid(_))));
    let mut empty = msg(1, 1, "Ann", " ");
    empty.text = "  ".into();
    assert!(matches!(m.ingest("ann", &[empty]), Err(MemoryError::Invalid(_))));
    assert_eq!(m.store().message_count("ann").unwrap(), 0, "nothing half-stored");
    assert!(matches!(
        m.forget("ann", 999),
        Err(MemoryError::NotFound { id: 999, .. })
    ));
}

#[test]
fn forget_and_correct_by_id() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), "rag");
    m.ingest("ann", &conversation()).unwrap();
    let cat = m.retrieve("ann", "cat called Pixel", 1).unwrap()[0].item.id;
    m.forget("ann", cat).unwrap();
    let hits = m.retrieve("ann", "cat called Pixel", 6).unwrap();
    assert!(hits.iter().all(|h| h.item.id != cat));
    assert_eq!(hits.len(), 5);
    // Another user cannot delete it, and it stays deleted after reopening.
    assert!(matches!(m.forget("zed", cat), Err(MemoryError::NotFound { .. })));
    drop(m);
    let mut m = open(dir.path(), "rag");
    assert!(
        m.retrieve("ann", "cat called Pixel", 6)
            .unwrap()
            .iter()
            .all(|h| h.item.id != cat)
    );

    let soup = m.retrieve("ann", "favourite dish lentil soup", 1).unwrap()[0].clone();
    m.correct("ann", soup.item.id, "Bob: My favourite dish is mushroom risotto.")
        .unwrap();
    let hit = &m.retrieve("ann", "mushroom risotto", 1).unwrap()[0];
    assert_eq!(hit.item.id, soup.item.id, "same id");
    assert_eq!(hit.source_refs, vec!["D2:3"], "provenance kept");
    assert!(hit.item.text.contains("risotto"));
    // Both indexes were updated in place and saved: the old words are gone,
    // also after reopening from the saved files.
    m.set_retriever(dentate_memory::Retriever::Bm25);
    assert!(
        m.retrieve("ann", "lentil soup", 6)
            .unwrap()
            .iter()
            .all(|h| h.item.id != soup.item.id)
    );
    drop(m);
    let mut m = open(dir.path(), "rag");
    m.set_retriever(dentate_memory::Retriever::Bm25);
    assert_eq!(m.retrieve("ann", "risotto", 1).unwrap()[0].item.id, soup.item.id);
    assert!(
        m.retrieve("ann", "lentil soup", 6)
            .unwrap()
            .iter()
            .all(|h| h.item.id != soup.item.id)
    );
}

#[test]
fn index_file_is_rebuilt_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), "rag");
    m.ingest("ann", &conversation()).unwrap();
    let before = m.retrieve("ann", "cello lessons", 3).unwrap();
    drop(m);
    let file = dir.path().join("ann.rag.dnt");
    assert!(file.exists());
    // Corrupt it: the store is the source of truth.
    std::fs::write(&file, b"garbage").unwrap();
    // The store keeps vectors in f16: same items, scores within f16 rounding.
    let same = |a: &[dentate_memory::Retrieved]| {
        assert_eq!(a.len(), before.len());
        for (x, y) in a.iter().zip(&before) {
            assert_eq!((x.item.id, &x.source_refs), (y.item.id, &y.source_refs));
            assert!((x.score - y.score).abs() < 1e-3, "{} vs {}", x.score, y.score);
        }
    };
    let mut m = open(dir.path(), "rag");
    same(&m.retrieve("ann", "cello lessons", 3).unwrap());
    std::fs::remove_file(&file).unwrap();
    let mut m2 = open(dir.path(), "rag");
    same(&m2.retrieve("ann", "cello lessons", 3).unwrap());
    drop(m);
}

/// The index files of `user` in `dir` (vector and BM25, every kind).
fn index_files_of(dir: &std::path::Path, user: &str) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.starts_with(&format!("{user}.")) && (n.ends_with(".dnt") || n.ends_with(".lex")))
        .collect();
    v.sort();
    v
}

/// With deferred saves a change leaves the user's index files absent until
/// `persist`: a crash before then (the handle dropped unsaved) costs a
/// rebuild from the store and the same answers, in every pipeline.
#[test]
fn deferred_saves_never_leave_a_file_that_disagrees() {
    for kind in ["rag", "hema", "nemori", "amory", "premem"] {
        let dir = tempfile::tempdir().unwrap();
        let mut m = open(dir.path(), kind);
        m.defer_saves(true);
        m.ingest("ann", &conversation()).unwrap();
        m.flush("ann").unwrap();
        m.ingest("bo", &conversation()).unwrap();
        assert!(index_files_of(dir.path(), "ann").is_empty(), "{kind}");
        let mut users = m.unsaved_users();
        users.sort();
        assert_eq!(users, ["ann", "bo"], "{kind}");
        let q = "What is the name of the cat Ann adopted?";
        let ids =
            |m: &mut Memory, u: &str| -> Vec<i64> { m.retrieve(u, q, 3).unwrap().iter().map(|r| r.item.id).collect() };
        let (ann, bo) = (ids(&mut m, "ann"), ids(&mut m, "bo"));
        assert!(!ann.is_empty(), "{kind}");
        // Persist one user; "crash" with the other unsaved.
        assert!(m.persist("bo").unwrap(), "{kind}");
        assert!(!m.persist("bo").unwrap(), "{kind}: nothing left to write");
        assert!(!index_files_of(dir.path(), "bo").is_empty(), "{kind}");
        assert!(index_files_of(dir.path(), "ann").is_empty(), "{kind}");
        drop(m);
        let mut m = open(dir.path(), kind);
        assert_eq!(ids(&mut m, "ann"), ann, "{kind}: rebuilt from the store");
        assert_eq!(ids(&mut m, "bo"), bo, "{kind}: loaded from its files");
        // Saving eagerly (the default) writes the files at once.
        m.ingest("ann", &[msg(4, 1, "Ann", "The vet said Pixel is healthy.")])
            .unwrap();
        assert!(!index_files_of(dir.path(), "ann").is_empty(), "{kind}");
        assert!(m.unsaved_users().is_empty(), "{kind}");
    }
}

/// A correction replaces an item's vector under the same id, which an id
/// check cannot see: its files are removed before the store changes, so
/// an interrupted correction never leaves the old vector to be loaded.
#[test]
fn an_interrupted_correction_never_serves_the_old_vector() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), "rag");
    m.set_retriever(dentate_memory::Retriever::Dense);
    m.ingest("ann", &conversation()).unwrap();
    let old = m.retrieve("ann", "cat Pixel adopted", 1).unwrap().remove(0);
    assert!(old.item.text.contains("Pixel"));
    let files = index_files_of(dir.path(), "ann");
    assert_eq!(files.len(), 2, "{files:?}");
    drop(m);
    let mut m = open(dir.path(), "rag");
    m.defer_saves(true);
    let text = "Ann's cat is called Zorblax now";
    m.correct("ann", old.item.id, text).unwrap();
    assert!(index_files_of(dir.path(), "ann").is_empty());
    drop(m); // no persist: the crash
    let mut m = open(dir.path(), "rag");
    m.set_retriever(dentate_memory::Retriever::Dense);
    let hit = m.retrieve("ann", text, 1).unwrap().remove(0);
    assert_eq!(hit.item.id, old.item.id);
    assert_eq!(hit.item.text, text);
    assert!(hit.score > 0.99, "the index holds the corrected vector: {}", hit.score);
}

#[test]
fn store_schema_and_refusals() {
    let dir = tempfile::tempdir().unwrap();
    let s = Store::open(dir.path()).unwrap();
    drop(s);
    assert_eq!(rusqlite_version(dir.path()), SCHEMA_VERSION);
    // A database from a future version is refused.
    set_version(dir.path(), SCHEMA_VERSION + 1);
    assert!(matches!(Store::open(dir.path()), Err(MemoryError::Invalid(_))));
}

fn rusqlite_version(dir: &std::path::Path) -> u32 {
    // Read the header field directly: user_version is the big-endian u32
    // at byte 60 of the database header (the WAL is checkpointed on close).
    let b = std::fs::read(dir.join("memory.db")).unwrap();
    u32::from_be_bytes([b[60], b[61], b[62], b[63]])
}

fn set_version(dir: &std::path::Path, v: u32) {
    let p = dir.join("memory.db");
    let mut b = std::fs::read(&p).unwrap();
    b[60..64].copy_from_slice(&v.to_be_bytes());
    std::fs::write(&p, b).unwrap();
}

#[test]
fn embedder_change_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    open(dir.path(), "rag").ingest("ann", &conversation()).unwrap();
    let other = Arc::new(dentate_embed::HashingEmbedder::new(128).unwrap());
    let mut m = Memory::open(dir.path(), PipelineKind::parse("rag").unwrap(), other, None).unwrap();
    let err = m.ingest("ann", &[msg(3, 1, "Ann", "More text.")]).unwrap_err();
    assert!(err.to_string().contains("embedder"), "{err}");
    // Reading with another embedder is refused the same way, for every
    // pipeline, before any index is opened or rebuilt from the store (it
    // used to fail inside the rebuild, with "got 1 ids for 3 vectors").
    for kind in ["rag", "hema", "nemori", "premem", "amory"] {
        let dir = tempfile::tempdir().unwrap();
        let mut first = open(dir.path(), kind);
        first.ingest("ann", &conversation()).unwrap();
        first.flush("ann").unwrap();
        let other = Arc::new(dentate_embed::HashingEmbedder::new(128).unwrap());
        let mut m = Memory::open(dir.path(), PipelineKind::parse(kind).unwrap(), other, None).unwrap();
        for _ in 0..2 {
            let err = m.retrieve("ann", "where does Ann live?", 3).unwrap_err();
            assert!(
                matches!(err, MemoryError::Invalid(_)) && err.to_string().contains("embedder"),
                "{kind}: {err}"
            );
        }
        assert!(m.compose("ann", "where?", 500).is_err());
        // A user without memories is not refused.
        assert!(m.retrieve("bob", "anything", 3).unwrap().is_empty());
    }
}

/// A long synthetic dialogue: `n` turns cycling through topics, each
/// mentioning a unique token so it can be found again.
fn long_dialogue(n: u32) -> Vec<NewMessage> {
    let topics = [
        "pottery class",
        "marathon training",
        "cello practice",
        "garden tomatoes",
        "Lisbon trip",
    ];
    (0..n)
        .map(|i| {
            let who = if i % 2 == 0 { "Ann" } else { "Bob" };
            let t = topics[(i as usize) % topics.len()];
            msg(
                1 + i / 50,
                1 + i % 50,
                who,
                &format!("Turn {i} about my {t}, note token{i} for later."),
            )
        })
        .collect()
}

#[test]
fn hema_summaries_forgetting_and_budget() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), "hema");
    let r = m.ingest("ann", &long_dialogue(250)).unwrap();
    assert_eq!(r.messages, 250);
    // Two summary-of-summaries items (turns 100 and 200) plus 250 chunks.
    assert_eq!(r.items, 252);
    // Forgetting at turn 100 (101 live → 1 pruned) and 200 (201 → 2 pruned).
    assert_eq!(r.forgotten, 3);
    assert_eq!(r.live, 252 - 3);
    let summaries = m.store().items("ann", "hema", Some("summary")).unwrap();
    assert_eq!(summaries.len(), 2);
    assert_eq!(
        summaries[0].sources.len(),
        100,
        "a block summary cites its 100 messages"
    );
    let st = m.store();
    let compact = st.state("ann", "hema", "compact").unwrap().unwrap();
    assert!(!compact.is_empty());
    assert!(dentate_memory::tokens::count(&compact) <= 60, "{compact}");
    // The oldest turns are the ones forgotten.
    let live: Vec<String> = m
        .store()
        .items("ann", "hema", Some("chunk"))
        .unwrap()
        .into_iter()
        .map(|i| i.text)
        .collect();
    assert!(!live.iter().any(|t| t.contains("Turn 0 ")));
    assert!(live.iter().any(|t| t.contains("Turn 249 ")));

    let c = m.compose("ann", "What did I say in token137?", 3500).unwrap();
    for tag in ["<system>", "<compact>", "<retrieved>", "<dialogue_tail>", "<user>"] {
        assert!(c.prompt.contains(tag), "{tag} missing");
    }
    assert!(c.prompt.contains("token137"), "the matching chunk is retrieved");
    assert_eq!(c.tokens, dentate_memory::tokens::count(&c.prompt));
    assert!(c.tokens <= 3500);
    assert_eq!(c.included.len(), 5);
    assert!(
        c.prompt.contains("Turn 248 ") && c.prompt.contains("Turn 249 "),
        "two tail turns"
    );
    // A tight budget trims the lowest-similarity chunks first.
    let small = m.compose("ann", "What did I say in token137?", c.tokens - 20).unwrap();
    assert!(small.tokens <= c.tokens - 20);
    assert!(small.trimmed >= 1);
    assert_eq!(small.included[0], c.included[0], "the best chunk stays");
    assert!(matches!(m.compose("ann", "q", 5), Err(MemoryError::Invalid(_))));
}

#[test]
fn hema_with_a_model_and_resume_after_failure() {
    let dir = tempfile::tempdir().unwrap();
    let msgs = long_dialogue(12);
    // The server answers 5 summarizer calls, then fails persistently.
    let bad = ScriptedServer::start(64, |i, _| {
        if i < 5 {
            Reply::ok(common::chat_body(&format!(
                "{{\"summary\": \"Summary number {i} of the talk.\"}}"
            )))
        } else {
            Reply::status(503, "down")
        }
    })
    .unwrap();
    let llm: Arc<dyn Llm> = Arc::new(chat(&bad, 2000, 1));
    let mut m = Memory::open(dir.path(), PipelineKind::parse("hema").unwrap(), embedder(), Some(llm)).unwrap();
    let err = m.ingest("ann", &msgs).unwrap_err();
    assert!(matches!(err, MemoryError::Llm(_)), "{err}");
    // Every raw message is stored; the 5 turns that were summarised are
    // committed with their progress mark.
    assert_eq!(m.store().message_count("ann").unwrap(), 12);
    assert_eq!(m.store().items("ann", "hema", None).unwrap().len(), 5);
    let through = m.store().progress("ann", "hema").unwrap();
    assert_eq!(m.store().messages_after("ann", through).unwrap().len(), 7);
    drop(m);

    // The server recovers: processing resumes where it stopped.
    let good = summary_server(64);
    let llm = Arc::new(chat(&good, 2000, 1));
    let mut m = Memory::open(
        dir.path(),
        PipelineKind::parse("hema").unwrap(),
        embedder(),
        Some(llm.clone()),
    )
    .unwrap();
    let r = m.process("ann", &mut |_, _| {}).unwrap();
    assert_eq!(r.messages, 7, "only the unprocessed messages");
    assert_eq!(good.requests().len(), 7, "one summarizer call per remaining turn");
    assert_eq!(llm.stats().calls, 7);
    let items = m.store().items("ann", "hema", None).unwrap();
    assert_eq!(items.len(), 12, "no turn lost, none duplicated");
    let mut refs: Vec<i64> = items.iter().flat_map(|i| i.sources.clone()).collect();
    refs.dedup();
    assert_eq!(refs.len(), 12);
    assert_eq!(
        m.store().state("ann", "hema", "compact").unwrap().unwrap(),
        "Summary number 6 of the talk."
    );
    // The summarizer saw the previous summary and the new turn.
    let last = &good.requests()[6].body["messages"][1]["content"];
    assert!(last.as_str().unwrap().contains("Summary number 5 of the talk."));
    assert!(last.as_str().unwrap().contains("token11"));
}

#[test]
fn large_memory_switches_to_ivf_pq() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = VectorMemoryConfig {
        switch_at: 600,
        opq: false,
        rerank: 8,
    };
    let mut m = Memory::open(dir.path(), PipelineKind::Rag(cfg.clone().into()), embedder(), None).unwrap();
    m.ingest("ann", &long_dialogue(700)).unwrap();
    let hits = m
        .retrieve(
            "ann",
            "Bob: Turn 321 about my marathon training, note token321 for later.",
            3,
        )
        .unwrap();
    assert!(hits[0].item.text.contains("token321 "), "{:?}", hits[0].item.text);
    drop(m);
    // Reopening loads the IVF-PQ file as it is.
    let idx = dentate_core::AnyIndex::load(&dir.path().join("ann.rag.dnt")).unwrap();
    assert!(matches!(idx, dentate_core::AnyIndex::IvfPq(_)));
    let mut m = Memory::open(dir.path(), PipelineKind::Rag(cfg.into()), embedder(), None).unwrap();
    let q = "Ann: Turn 654 about my Lisbon trip, note token654 for later.";
    assert!(m.retrieve("ann", q, 1).unwrap()[0].item.text.contains("token654 "));
}

#[test]
fn hema_config_defaults_match_the_paper() {
    let c = HemaConfig::default();
    assert_eq!((c.k, c.budget, c.tail_turns, c.summary_tokens), (5, 3500, 2, 60));
    assert_eq!((c.sos_every, c.forget_every), (100, 100));
    assert!((c.forget_fraction - 0.005).abs() < 1e-12);
    assert!((c.salience.gamma - 0.002).abs() < 1e-9 && (c.salience.beta - 0.5).abs() < 1e-9);
}

#[test]
fn hema_switches_to_ivf_pq_too() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = HemaConfig {
        vectors: VectorMemoryConfig {
            switch_at: 600,
            opq: false,
            rerank: 8,
        },
        ..Default::default()
    };
    let mut m = Memory::open(dir.path(), PipelineKind::Hema(cfg), embedder(), None).unwrap();
    let r = m.ingest("ann", &long_dialogue(700)).unwrap();
    assert_eq!(r.live, 700 + 7 - r.forgotten);
    let q = "Ann: Turn 654 about my Lisbon trip, note token654 for later.";
    let hits = m.retrieve("ann", q, 3).unwrap();
    assert!(hits[0].item.text.contains("token654 "), "{:?}", hits[0].item.text);
    drop(m);
    let idx = dentate_core::AnyIndex::load(&dir.path().join("ann.hema.dnt")).unwrap();
    assert!(matches!(idx, dentate_core::AnyIndex::IvfPq(_)));
}

/// The default fusion weight follows the embedder, as the tune split of
/// locomo-dev picks it for each: 0.3 dense for the hashing embedder, 0.5
/// for a sentence embedder; `hybrid` means that default, an explicit
/// `weighted:W` is kept whatever the embedder.
#[test]
fn hybrid_default_follows_the_embedder() {
    use dentate_core::Fusion;
    use dentate_embed::Embedder;
    use dentate_memory::{DEFAULT_FUSION, HASHING_FUSION, Retriever};
    /// The hashing embedder under another name, as a sentence embedder.
    struct Named(dentate_embed::HashingEmbedder);
    impl Embedder for Named {
        fn name(&self) -> String {
            "sentence-256".into()
        }
        fn dim(&self) -> usize {
            self.0.dim()
        }
        fn embed(&self, texts: &[&str]) -> dentate_embed::Result<Vec<f32>> {
            self.0.embed(texts)
        }
    }
    assert_eq!(HASHING_FUSION, Fusion::Weighted { dense_weight: 0.3 });
    assert_eq!(DEFAULT_FUSION, Fusion::Weighted { dense_weight: 0.5 });
    let dir = tempfile::tempdir().unwrap();
    let m = open(dir.path(), "rag");
    assert_eq!(m.retriever(), Retriever::Hybrid(HASHING_FUSION));
    drop(m);
    let other = tempfile::tempdir().unwrap();
    let sentence = Arc::new(Named(dentate_embed::HashingEmbedder::new(256).unwrap()));
    let m = Memory::open(other.path(), PipelineKind::parse("rag").unwrap(), sentence, None).unwrap();
    assert_eq!(m.retriever(), Retriever::Hybrid(DEFAULT_FUSION));
    assert_eq!(m.embedder_name(), "sentence-256");
    for (name, embedder, want) in [
        ("hybrid", "hash-384", Retriever::Hybrid(HASHING_FUSION)),
        ("hybrid", "hash", Retriever::Hybrid(HASHING_FUSION)),
        ("hybrid", "minilm-l6-v2", Retriever::Hybrid(DEFAULT_FUSION)),
        (
            "weighted:0.5",
            "hash-384",
            Retriever::Hybrid(Fusion::Weighted { dense_weight: 0.5 }),
        ),
        ("dense", "hash-384", Retriever::Dense),
    ] {
        assert_eq!(
            Retriever::parse_for(name, embedder).unwrap(),
            want,
            "{name} with {embedder}"
        );
    }
    assert!(Retriever::parse_for("weighted:2", "hash-384").is_err());
}

#[test]
fn retrievers_dense_bm25_hybrid() {
    use dentate_memory::Retriever;
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), "rag");
    assert!(matches!(m.retriever(), Retriever::Hybrid(_)), "hybrid by default");
    m.ingest("ann", &conversation()).unwrap();
    for r in ["dense", "bm25", "hybrid", "rrf:10", "weighted:0.3"] {
        m.set_retriever(Retriever::parse(r).unwrap());
        let hits = m.retrieve("ann", "Which city is Clara moving to?", 2).unwrap();
        assert_eq!(hits[0].source_refs, vec!["D1:3"], "{r}");
        assert!(hits.windows(2).all(|w| w[0].score >= w[1].score), "{r}");
    }
    for bad in ["sparse", "weighted", "weighted:2", "rrf:x", "bm25:1"] {
        assert!(Retriever::parse(bad).is_err(), "{bad}");
    }
    // BM25 finds a rare word; a forgotten item is gone from it too.
    m.set_retriever(Retriever::Bm25);
    let cello = m.retrieve("ann", "cello", 1).unwrap()[0].item.id;
    m.forget("ann", cello).unwrap();
    assert!(
        m.retrieve("ann", "cello", 5)
            .unwrap()
            .iter()
            .all(|h| h.item.id != cello)
    );
    drop(m);
    // The BM25 file is a cache too: corrupt it and it is rebuilt from the store.
    let lex = dir.path().join("ann.rag.lex");
    assert!(lex.exists());
    std::fs::write(&lex, b"junk").unwrap();
    let mut m = open(dir.path(), "rag");
    m.set_retriever(Retriever::Bm25);
    assert_eq!(
        m.retrieve("ann", "bicycle grandfather", 1).unwrap()[0].source_refs,
        vec!["D2:1"]
    );
    assert!(
        m.retrieve("ann", "cello", 5)
            .unwrap()
            .iter()
            .all(|h| h.item.id != cello)
    );
    assert!(matches!(m.retrieve("ann", "  ", 3), Err(MemoryError::Invalid(_))));
}

#[test]
fn in_memory_snapshot_round_trips_and_refuses_damage() {
    let mut m = Memory::in_memory(PipelineKind::parse("hema").unwrap(), embedder(), None).unwrap();
    assert!(m.store().dir().is_none());
    m.ingest("ann", &conversation()).unwrap();
    m.flush("ann").unwrap();
    let q = "What is the name of the cat Ann adopted?";
    let before = m.retrieve("ann", q, 3).unwrap();
    assert!(before[0].item.text.contains("Pixel"));
    let bytes = m.to_bytes().unwrap();

    // Restored: same items, same ranking, same provenance; indexes rebuilt.
    let mut back = Memory::from_bytes(&bytes, PipelineKind::parse("hema").unwrap(), embedder(), None).unwrap();
    let after = back.retrieve("ann", q, 3).unwrap();
    let ids =
        |r: &[dentate_memory::Retrieved]| r.iter().map(|h| (h.item.id, h.source_refs.clone())).collect::<Vec<_>>();
    assert_eq!(ids(&before), ids(&after));
    assert_eq!(back.store().message_count("ann").unwrap(), conversation().len() as i64);
    // Still writable after restoring, and a new snapshot holds the new turn.
    back.ingest("ann", &[msg(2, 1, "Ann", "My sister Ines plays the cello in Lisbon.")])
        .unwrap();
    let again = Memory::from_bytes(
        &back.to_bytes().unwrap(),
        PipelineKind::parse("hema").unwrap(),
        embedder(),
        None,
    )
    .unwrap()
    .retrieve("ann", "Who plays the cello?", 1)
    .unwrap();
    assert!(again[0].item.text.contains("cello"));

    // Damage of every kind is a typed error.
    let kind = || PipelineKind::parse("hema").unwrap();
    let refused = |b: &[u8]| {
        matches!(
            Memory::from_bytes(b, kind(), embedder(), None),
            Err(MemoryError::Snapshot(_))
        )
    };
    assert!(refused(&[]));
    assert!(refused(&bytes[..bytes.len() / 2]), "truncated");
    assert!(refused(&bytes[..20]), "header only");
    let mut flipped = bytes.clone();
    let mid = flipped.len() / 2;
    flipped[mid] ^= 0x40;
    assert!(refused(&flipped), "bit flip");
    let mut magic = bytes.clone();
    magic[0] = b'X';
    assert!(refused(&magic), "bad magic");
    let mut grown = bytes.clone();
    grown.push(0);
    assert!(refused(&grown), "trailing byte");
}

#[test]
fn settings_are_changed_by_name_to_recheck_defaults() {
    match PipelineKind::parse("amory")
        .unwrap()
        .set("amory.headline", "0.5")
        .unwrap()
    {
        PipelineKind::Amory(c) => assert_eq!(c.retrieval.headline, 0.5),
        other => panic!("{other:?}"),
    }
    match PipelineKind::parse("amory").unwrap().set("amory.bind", "0.4").unwrap() {
        PipelineKind::Amory(c) => assert_eq!((c.binding.sentence.bind, c.binding.hashing.bind), (0.4, 0.4)),
        other => panic!("{other:?}"),
    }
    match PipelineKind::parse("nemori")
        .unwrap()
        .set("nemori.sigma_s", "0")
        .unwrap()
    {
        PipelineKind::Nemori(c) => assert_eq!(c.semantic.relevant_threshold, 0.0),
        other => panic!("{other:?}"),
    }
    match PipelineKind::parse("premem")
        .unwrap()
        .set("premem.continuation", "false")
        .unwrap()
    {
        PipelineKind::Premem(c) => assert!(!c.continuation),
        other => panic!("{other:?}"),
    }
    // Another pipeline's key leaves a pipeline as it is.
    match PipelineKind::parse("rag")
        .unwrap()
        .set("amory.headline", "0.5")
        .unwrap()
    {
        PipelineKind::Rag(c) => assert!(c.resolve_dates),
        other => panic!("{other:?}"),
    }
    // Unknown keys and bad values are typed errors.
    for (pipeline, k, v) in [
        ("amory", "amory.nope", "1"),
        ("amory", "amory.headline", "x"),
        ("amory", "amory.headline", "NaN"),
        ("premem", "premem.continuation", "1"),
    ] {
        let err = PipelineKind::parse(pipeline).unwrap().set(k, v).unwrap_err();
        assert!(matches!(err, MemoryError::Invalid(_)), "{k}={v}: {err}");
    }
}

/// The `k` rule through the memory layer: `retrieve` with a `k` far above
/// the memory (every pipeline, every retriever) returns what there is —
/// the same as `k = live` — and never sizes anything by `k`.
#[test]
fn huge_k_is_clamped_in_every_pipeline() {
    for kind in ["rag", "hema", "nemori", "amory", "premem"] {
        for retriever in ["dense", "bm25", "hybrid"] {
            let dir = tempfile::tempdir().unwrap();
            let mut m = open(dir.path(), kind);
            m.set_retriever(dentate_memory::Retriever::parse(retriever).unwrap());
            let r = m.ingest("ann", &conversation()).unwrap();
            m.flush("ann").unwrap();
            let q = "Which city is Clara moving to?";
            let live = r.live.max(1);
            for k in [usize::MAX, usize::MAX / 2 + 1, 1 << 40] {
                let all = m
                    .retrieve("ann", q, k)
                    .unwrap_or_else(|e| panic!("{kind}/{retriever} k = {k}: {e}"));
                let want = m.retrieve("ann", q, 64.max(live)).unwrap();
                assert_eq!(
                    all.iter().map(|h| h.item.id).collect::<Vec<_>>(),
                    want.iter().map(|h| h.item.id).collect::<Vec<_>>(),
                    "{kind}/{retriever} k = {k}"
                );
                assert!(!all.is_empty(), "{kind}/{retriever}: something is found");
            }
        }
    }
}

/// A time outside years 0–9999 is refused before anything is stored (date
/// arithmetic on it would overflow later), whatever the pipeline.
#[test]
fn out_of_range_times_are_refused_and_nothing_is_stored() {
    for kind in ["rag", "hema", "nemori", "premem"] {
        let dir = tempfile::tempdir().unwrap();
        let mut m = open(dir.path(), kind);
        for t in [
            i64::MAX,
            i64::MIN,
            dentate_memory::time::MAX_TIME + 1,
            dentate_memory::time::MIN_TIME - 1,
        ] {
            let mut bad = msg(1, 2, "Ann", "Yesterday I went to Porto.");
            bad.said_at = Some(t);
            let batch = [msg(1, 1, "Ann", "Hello there."), bad];
            let e = m.ingest("ann", &batch).unwrap_err();
            assert!(matches!(e, MemoryError::Invalid(_)), "{kind} {t}: {e}");
            assert!(e.to_string().contains("0–9999"), "{e}");
            assert_eq!(m.store().message_count("ann").unwrap(), 0, "{kind}: nothing stored");
        }
        // The edges of the range go through every pipeline's date code.
        let mut edge = msg(1, 1, "Ann", "Yesterday I moved to Porto; next year I go to Oslo.");
        edge.said_at = Some(dentate_memory::time::MAX_TIME);
        let mut first = msg(1, 2, "Ann", "Last week I was in Rome.");
        first.said_at = Some(dentate_memory::time::MIN_TIME);
        m.ingest("ann", &[edge, first]).unwrap();
        m.flush("ann").unwrap();
        assert!(!m.retrieve("ann", "Where did Ann move?", 3).unwrap().is_empty());
    }
}

/// HEMA's "recently retrieved" bonus survives a restart: an old chunk
/// retrieved before the process ends outlives a newer chunk nobody asked
/// about at the next forgetting round, after a reopen.
#[test]
fn hema_retrieval_bonus_survives_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let dialogue = long_dialogue(100);
    {
        let mut m = open(dir.path(), "hema");
        m.set_retriever(dentate_memory::Retriever::Bm25);
        m.ingest("ann", &dialogue[..60]).unwrap();
        // Turn 0 is the oldest chunk: the one forgetting takes first, unless
        // it was retrieved recently.
        let hits = m.retrieve("ann", "token0", 1).unwrap();
        assert!(hits[0].item.text.contains("Turn 0 "), "{:?}", hits[0].item.text);
    }
    let mut m = open(dir.path(), "hema");
    // Turn 100 forgets ceil(0.5% × 101) = 1 item.
    let r = m.ingest("ann", &dialogue[60..]).unwrap();
    assert_eq!(r.forgotten, 1);
    let live: Vec<String> = m
        .store()
        .items("ann", "hema", Some("chunk"))
        .unwrap()
        .into_iter()
        .map(|i| i.text)
        .collect();
    assert!(
        live.iter().any(|t| t.contains("Turn 0 ")),
        "the retrieved chunk is kept"
    );
    assert!(
        !live.iter().any(|t| t.contains("Turn 1 ")),
        "the oldest chunk never retrieved is forgotten instead"
    );
}

/// A store of schema v5 (before retrieval marks, history and the user in
/// provenance rows) opens, migrates to the current version and keeps its
/// items; retrieval marks start empty; the provenance rows get their user
/// (erasing the user then leaves no row behind).
#[test]
fn a_v5_store_migrates_and_keeps_its_items() {
    let dir = tempfile::tempdir().unwrap();
    {
        let mut m = open(dir.path(), "hema");
        m.ingest("ann", &conversation()).unwrap();
    }
    // Make it a v5 store: drop v9's table, undo v8's columns and indexes, drop the v7 table
    // and the v6 column, set the version back.
    {
        let c = rusqlite::Connection::open(dir.path().join("memory.db")).unwrap();
        c.execute_batch(
            "DROP TABLE user_versions;
             DROP INDEX item_sources_by_message; DROP INDEX item_derivations_by_from; DROP INDEX items_by_parent;
             ALTER TABLE item_sources DROP COLUMN user; ALTER TABLE item_derivations DROP COLUMN user;
             DROP TABLE item_changes; ALTER TABLE items DROP COLUMN last_retrieved; PRAGMA user_version = 5;",
        )
        .unwrap();
    }
    assert_eq!(rusqlite_version(dir.path()), 5);
    let mut m = open(dir.path(), "hema");
    assert_eq!(m.store().items("ann", "hema", None).unwrap().len(), 6);
    assert!(m.store().retrievals("ann", "hema", None).unwrap().is_empty());
    let hits = m.retrieve("ann", "Which city is Clara moving to?", 1).unwrap();
    assert_eq!(
        m.store().retrievals("ann", "hema", None).unwrap(),
        vec![(hits[0].item.id, 6)],
        "marked at the current turn"
    );
    let sources = m.store().items("ann", "hema", None).unwrap()[0].sources.clone();
    assert!(!sources.is_empty(), "provenance kept");
    m.erase_user("ann").unwrap();
    drop(m);
    assert_eq!(rusqlite_version(dir.path()), SCHEMA_VERSION);
    let c = rusqlite::Connection::open(dir.path().join("memory.db")).unwrap();
    let left: i64 = c
        .query_row(
            "SELECT (SELECT COUNT(*) FROM item_sources) + (SELECT COUNT(*) FROM items)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(
        left, 0,
        "the migrated provenance rows name their user, so erasure finds them"
    );
}

/// Erasing a source from a pipeline whose state summarises messages
/// (HEMA's compact summary) rebuilds that state from what remains: the
/// erased words are in no item, no state value and no file; RAG keeps its
/// other items untouched (same ids).
#[test]
fn erasing_a_source_rebuilds_summarising_state_and_leaves_no_trace() {
    let dir = tempfile::tempdir().unwrap();
    let mut convo = conversation();
    convo.push(msg(2, 1, "Ann", "My locker combination is Xylofrabble 3391"));
    convo.push(msg(2, 2, "Bob", "Xylofrabble, got it"));
    let mut hema = open(dir.path(), "hema");
    hema.ingest("ann", &convo).unwrap();
    let mut rag = open(dir.path(), "rag");
    rag.process("ann", &mut |_, _| {}).unwrap();
    rag.retrieve("ann", "locker", 3).unwrap();
    let compact = hema
        .store()
        .state("ann", "hema", "compact")
        .unwrap()
        .unwrap_or_default();
    let words = hema.store().state("ann", "hema", "words").unwrap().unwrap_or_default();
    assert!(
        compact.contains("Xylofrabble") || words.contains("xylofrabbl"),
        "{compact}"
    );
    let rag_before: Vec<i64> = rag
        .store()
        .items("ann", "rag", None)
        .unwrap()
        .iter()
        .map(|i| i.id)
        .collect();
    let targets: Vec<i64> = hema
        .store()
        .messages_after("ann", 0)
        .unwrap()
        .iter()
        .filter(|m| m.msg.text.contains("Xylofrabble"))
        .map(|m| m.id)
        .collect();
    assert_eq!(targets.len(), 2);
    for id in &targets {
        let r = hema.erase_source("ann", *id).unwrap();
        assert_eq!(r.messages, vec![*id]);
        assert_eq!(r.rebuilt, vec!["hema".to_string()]);
        let r = rag.rebuild_after_erase("ann").unwrap();
        assert!(r.rebuilt.is_empty());
    }
    // RAG kept every other item with its id.
    let rag_after: Vec<i64> = rag
        .store()
        .items("ann", "rag", None)
        .unwrap()
        .iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(rag_after.len(), rag_before.len() - 2);
    assert!(rag_after.iter().all(|id| rag_before.contains(id)));
    // HEMA's memory was rebuilt from the six remaining messages.
    assert_eq!(
        hema.store().progress("ann", "hema").unwrap(),
        hema.store().last_message_id("ann").unwrap()
    );
    for kind in ["hema", "rag"] {
        for it in hema.store().items("ann", kind, None).unwrap() {
            assert!(!it.text.contains("Xylofrabble"), "{}", it.text);
        }
    }
    let hits = hema.retrieve("ann", "locker combination", 5).unwrap();
    assert!(hits.iter().all(|h| !h.item.text.contains("Xylofrabble")));
    drop((hema, rag));
    for e in std::fs::read_dir(dir.path()).unwrap().flatten() {
        let bytes = std::fs::read(e.path()).unwrap();
        for needle in [&b"Xylofrabble"[..], b"xylofrabbl"] {
            assert!(
                !bytes.windows(needle.len()).any(|w| w == needle),
                "{} still holds {}",
                e.path().display(),
                String::from_utf8_lossy(needle)
            );
        }
    }
}

/// A RAG memory of user `u` holding `turns`, searched by BM25 alone.
fn bm25_rag(turns: &[NewMessage]) -> (tempfile::TempDir, Memory) {
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), "rag");
    m.ingest("u", turns).unwrap();
    m.set_retriever(dentate_memory::Retriever::Bm25);
    (dir, m)
}

/// The source ids of what `m` retrieves for `q` (user `u`), in order.
fn retrieved_refs(m: &mut Memory, q: &str, k: usize) -> Vec<String> {
    m.retrieve("u", q, k)
        .unwrap()
        .into_iter()
        .flat_map(|h| h.source_refs)
        .collect()
}

#[test]
fn feedback_reaches_a_turn_that_shares_no_word_with_the_question() {
    use dentate_memory::ContextConfig;
    let (_dir, mut m) = bm25_rag(&[
        msg(1, 1, "Ann", "Caroline joined the adoption agency last spring."),
        msg(1, 2, "Bob", "I painted a sunrise over the lake."),
        msg(2, 1, "Ann", "The agency interview went well, the agency called back."),
        msg(2, 2, "Bob", "We went camping with the kids."),
        msg(3, 1, "Bob", "My pottery class made a bowl."),
        msg(3, 2, "Bob", "The bowl cracked in the kiln."),
    ]);
    let mut ctx = ContextConfig::off();
    m.set_context_ranking(ctx);
    let refs = |m: &mut Memory| retrieved_refs(m, "What did Caroline join?", 5);
    // The question's words are only in D1:1; the agency turn D2:1 comes
    // with the words D1:1 lends the query, and nothing else does.
    let plain = refs(&mut m);
    assert_eq!(plain, vec!["D1:1"]);
    ctx.set("context.feedback", "1:4:0.5").unwrap();
    m.set_context_ranking(ctx);
    let expanded = refs(&mut m);
    assert_eq!(expanded.first().map(String::as_str), Some("D1:1"), "{expanded:?}");
    assert!(expanded.contains(&"D2:1".to_string()), "{expanded:?}");
    assert!(expanded.iter().all(|r| !r.starts_with("D3")), "{expanded:?}");
}

#[test]
fn expansion_brings_in_the_answer_to_a_question_turn() {
    use dentate_memory::ContextConfig;
    let (_dir, mut m) = bm25_rag(&[
        msg(1, 1, "Ann", "Did you ever give the kitten a name?"),
        msg(1, 2, "Bob", "Yes, Pixel."),
        msg(1, 3, "Ann", "Lovely, the kitten will be happy."),
        msg(2, 1, "Bob", "Yes, we went camping."),
        msg(2, 2, "Ann", "A kitten name contest at the fair!"),
    ]);
    let refs = retrieved_refs;
    let mut ctx = ContextConfig::off();
    ctx.neighbour = 0.5;
    m.set_context_ranking(ctx);
    // BM25 finds the turns with the question's words; the answer, D1:2,
    // shares none of them.
    let plain = refs(&mut m, "kitten name", 2);
    assert!(!plain.contains(&"D1:2".to_string()), "{plain:?}");
    ctx.expand = 1;
    m.set_context_ranking(ctx);
    let got = refs(&mut m, "kitten name", 10);
    // The best hit's neighbours in its own session come in (D1:2 after
    // D1:1, or D1:1 and D1:3 around D1:2's question); D2:1 (in another
    // session, and no hit's neighbour) never does.
    assert!(got.contains(&"D1:2".to_string()), "{got:?}");
    assert!(!got.contains(&"D2:1".to_string()), "{got:?}");
    // Each item once.
    let mut uniq = got.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), got.len(), "{got:?}");
    // Expansion without any weight is off, as the rest of the ranking.
    let mut none = ContextConfig::off();
    none.expand = 3;
    m.set_context_ranking(none);
    assert!(!refs(&mut m, "kitten name", 10).contains(&"D1:2".to_string()));
}
