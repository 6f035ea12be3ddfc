//! Every pipeline's LLM path against a real model: a local
//! OpenAI-compatible server (llama-cpp-python with SmolLM2-135M-Instruct,
//! started by `scripts/llm.sh`, which `scripts/test.sh` runs), never a
//! scripted one. Each test ingests a 30-message, 3-session conversation
//! (`fixtures/real_model_conversation.json`, LoCoMo's format) through the
//! model, checks that what the pipeline stored is well-formed and cites
//! messages that exist, that every model role of the pipeline ran, answers
//! the fixture's five questions from the composed context and grades each
//! with the evaluation's LLM judge. Another test makes the model fail (a
//! timeout, answers cut short) and resumes.
//!
//! The tests need the server, so they are ignored by a plain `cargo test`;
//! run them with it:
//!
//! ```text
//! source scripts/llm.sh && llm_start
//! cargo test -p dentate-memory --test real_model -- --ignored --test-threads 1
//! llm_stop
//! ```
//!
//! A 135M model's answers are poor: nothing here asserts that they are
//! right, only that the pipelines take a real model's output, valid or
//! not, without losing anything.

mod common;

use common::embedder;
use dentate_memory::eval::{conversation_messages, generate_answer, judge, judge_gold};
use dentate_memory::locomo;
use dentate_memory::{
    AmoryConfig, ChatConfig, HemaConfig, Llm, LlmError, Memory, MemoryError, NemoriConfig, NewMessage, OpenAiChat,
    PipelineKind, PrememConfig,
};
use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/real_model_conversation.json"
);

/// The server `scripts/llm.sh` started: its base URL and model name.
fn server() -> (String, String) {
    let url = std::env::var("DENTATE_TEST_LLM").unwrap_or_default();
    let model = std::env::var("DENTATE_TEST_LLM_MODEL").unwrap_or_default();
    assert!(
        !url.is_empty() && !model.is_empty(),
        "DENTATE_TEST_LLM and DENTATE_TEST_LLM_MODEL are not set: start the model server first \
         (source scripts/llm.sh && llm_start)"
    );
    (url, model)
}

/// A client of the real server with the default settings (1,024
/// completion tokens, structured outputs on), temperature 0 and seed 0
/// (answers repeat run to run) and a generous timeout (2 CPU cores).
fn client() -> OpenAiChat {
    let (url, model) = server();
    let mut c = ChatConfig::new(url, model);
    c.api_key_env = "DENTATE_TEST_KEY_UNSET".into();
    c.seed = Some(0);
    c.retry.timeout = Duration::from_secs(600);
    c.retry.max_retries = 1;
    OpenAiChat::new(c).unwrap()
}

fn fixture() -> (Vec<NewMessage>, Vec<locomo::Qa>) {
    let ds = locomo::load(std::path::Path::new(FIXTURE)).unwrap();
    let conv = &ds.conversations[0];
    let msgs = conversation_messages(conv);
    assert_eq!(msgs.len(), 30);
    assert_eq!(msgs.iter().map(|m| &m.session).collect::<BTreeSet<_>>().len(), 3);
    assert_eq!(conv.qa.len(), 5);
    (msgs, conv.qa.clone())
}

/// Ingests the fixture with `kind` through the real model, then checks the
/// memory, the roles that ran and the answers.
fn end_to_end(kind: PipelineKind, roles: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let llm = Arc::new(client());
    let (msgs, qa) = fixture();
    let user = "maya-and-tom";
    let mut mem = Memory::open(dir.path(), kind, embedder(), Some(llm.clone() as Arc<dyn Llm>)).unwrap();
    let name = mem.pipeline_name();
    // The conversation is complete: flush closes what a pipeline holds
    // open (PREMem processes its last session only then).
    let report = mem.ingest(user, &msgs).unwrap();
    let closed = mem.flush(user).unwrap();
    assert_eq!(report.messages + closed.messages, 30, "{name}: every message processed");

    // Every stored item is well-formed and cites messages of this user.
    let stored: BTreeSet<i64> = mem
        .store()
        .messages_after(user, 0)
        .unwrap()
        .iter()
        .map(|m| m.id)
        .collect();
    assert_eq!(stored.len(), 30, "{name}: every message is stored");
    let items = mem.store().items(user, name, None).unwrap();
    assert!(!items.is_empty(), "{name}: no items");
    for it in &items {
        assert!(!it.text.trim().is_empty(), "{name}: item {} is empty", it.id);
        assert!(
            it.text.len() < 20_000,
            "{name}: item {} is {} bytes",
            it.id,
            it.text.len()
        );
        assert!(
            !it.sources.is_empty(),
            "{name}: item {} ({}) cites nothing",
            it.id,
            it.kind
        );
        for s in &it.sources {
            assert!(
                stored.contains(s),
                "{name}: item {} cites message {s}, not stored",
                it.id
            );
        }
    }

    // The five questions: the composed context, the model's answer, the
    // judge's grade (the first two are what `dentate memory ask --llm`
    // prints).
    let before = llm.stats();
    let mut graded = 0;
    let mut correct = 0;
    for q in &qa {
        // A small budget: a 2-core machine reads ~200 prompt tokens/s.
        let composed = mem.compose(user, &q.question, 400).unwrap();
        assert!(!composed.prompt.trim().is_empty(), "{name}: empty context");
        let answer = generate_answer(llm.as_ref(), &composed.prompt, &q.question).unwrap();
        assert!(!answer.is_empty(), "{name}: empty answer to {}", q.question);
        let gold = judge_gold(q).unwrap();
        if judge(llm.as_ref(), &q.question, &gold, &answer).unwrap() {
            correct += 1;
        }
        graded += 1;
        eprintln!("{name}: {} -> {answer:?} (gold {gold:?})", q.question);
    }
    assert_eq!(graded, 5);
    let asked = llm.stats().since(&before);
    assert!(asked.roles["answer"].calls >= 5 && asked.roles["judge"].calls >= 5);

    let st = llm.stats();
    eprintln!(
        "{name}: {} items; judged {correct}/{graded} correct\n{}\n{}",
        items.len(),
        st.report(),
        st.role_table(msgs.len(), 100)
    );
    for role in roles {
        let r = st.roles.get(*role);
        assert!(
            r.is_some_and(|r| r.calls > 0),
            "{name}: the model never ran as {role}: {:?}",
            st.roles.keys().collect::<Vec<_>>()
        );
    }
    // Every JSON role sent its schema in a form this server takes.
    assert!(st.json_mode.is_some(), "{name}: no JSON call");
    assert_eq!(st.failures, 0, "{name}: {}", st.report());
}

#[test]
#[ignore = "needs the local model server (scripts/llm.sh)"]
fn hema_with_a_real_model() {
    // A summary-of-summaries step every 10 turns, so that both of the
    // summarizer's roles run in 30 messages.
    let cfg = HemaConfig {
        sos_every: 10,
        ..HemaConfig::default()
    };
    end_to_end(PipelineKind::Hema(cfg), &["hema_update", "hema_merge"]);
}

#[test]
#[ignore = "needs the local model server (scripts/llm.sh)"]
fn nemori_with_a_real_model() {
    end_to_end(
        PipelineKind::Nemori(NemoriConfig::default()),
        &["nemori_boundary", "nemori_episode", "nemori_predict", "nemori_distill"],
    );
}

#[test]
#[ignore = "needs the local model server (scripts/llm.sh)"]
fn amory_with_a_real_model() {
    // Consolidation after every binding iteration (the paper's "rapid"
    // ablation), so that consolidation and semanticization run within 30
    // messages; coherence retrieval runs for each question.
    let cfg = AmoryConfig {
        consolidation: dentate_memory::amory::Consolidation::Rapid,
        ..AmoryConfig::default()
    };
    end_to_end(
        PipelineKind::Amory(cfg),
        &[
            "amory_init",
            "amory_bind",
            "amory_consolidate",
            "amory_semanticize",
            "amory_retrieve",
        ],
    );
}

#[test]
#[ignore = "needs the local model server (scripts/llm.sh)"]
fn premem_with_a_real_model() {
    // Clusters of the hashing embedder's vectors link less readily than
    // MiniLM's: a lower θ makes sure the sessions' clusters link, so that
    // cross-session reasoning runs.
    let mut cfg = PrememConfig::default();
    cfg.cluster.theta = 0.2;
    end_to_end(PipelineKind::Premem(cfg), &["premem_extract", "premem_reason"]);
}

/// A model that fails — a timeout, then answers cut short by a tiny token
/// limit (invalid JSON even after the repair request) — stops ingestion
/// with a typed error and loses nothing; the same memory resumes with a
/// working client and finishes the conversation.
#[test]
#[ignore = "needs the local model server (scripts/llm.sh)"]
fn model_failures_leave_the_messages_stored_and_the_pipeline_resumable() {
    let dir = tempfile::tempdir().unwrap();
    let (msgs, _) = fixture();
    let user = "maya-and-tom";
    let kind = || PipelineKind::Nemori(NemoriConfig::default());
    let (url, model) = server();

    // A timeout: 1 ms is too short for any answer.
    let mut c = ChatConfig::new(&url, &model);
    c.retry.timeout = Duration::from_millis(1);
    c.retry.max_retries = 0;
    let timing_out: Arc<dyn Llm> = Arc::new(OpenAiChat::new(c).unwrap());
    let mut mem = Memory::open(dir.path(), kind(), embedder(), Some(timing_out)).unwrap();
    let err = mem.ingest(user, &msgs).unwrap_err();
    assert!(matches!(err, MemoryError::Llm(LlmError::Transport { .. })), "{err}");
    assert_eq!(mem.store().message_count(user).unwrap(), 30);
    drop(mem);

    // Answers cut at 3 tokens: never a whole JSON object.
    let mut c = ChatConfig::new(&url, &model);
    c.max_tokens = 3;
    c.seed = Some(0);
    let short = Arc::new(OpenAiChat::new(c).unwrap());
    let mut mem = Memory::open(dir.path(), kind(), embedder(), Some(short.clone() as Arc<dyn Llm>)).unwrap();
    let err = mem.process(user, &mut |_, _| {}).unwrap_err();
    assert!(matches!(err, MemoryError::Llm(LlmError::Malformed { .. })), "{err}");
    let st = short.stats();
    let invalid: u64 = st.roles.values().map(|r| r.invalid).sum();
    assert_eq!(invalid, 1, "{}", st.role_table(0, 0));
    assert_eq!(mem.store().message_count(user).unwrap(), 30);
    drop(mem);

    // A working client resumes and finishes the conversation.
    let llm = Arc::new(client());
    let mut mem = Memory::open(dir.path(), kind(), embedder(), Some(llm.clone() as Arc<dyn Llm>)).unwrap();
    mem.process(user, &mut |_, _| {}).unwrap();
    mem.flush(user).unwrap();
    let items = mem.store().items(user, "nemori", None).unwrap();
    assert!(items.iter().any(|i| i.kind == dentate_memory::nemori::EPISODE));
    let covered: BTreeSet<i64> = items
        .iter()
        .filter(|i| i.kind == dentate_memory::nemori::EPISODE)
        .flat_map(|i| i.sources.iter().copied())
        .collect();
    assert_eq!(covered.len(), 30, "every message ends up in an episode");
    assert!(llm.stats().calls > 0);
}
