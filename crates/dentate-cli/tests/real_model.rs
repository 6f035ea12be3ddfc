//! The CLI against a real model: `dentate memory ingest --llm` and
//! `dentate memory ask --llm` on a local OpenAI-compatible server
//! (llama-cpp-python with SmolLM2-135M-Instruct, started by
//! `scripts/llm.sh`), and `dentate eval locomo --llm` judging answers:
//! the per-role counters (calls, JSON answers valid / repaired / invalid,
//! tokens, latency, calls and tokens per 100 messages) are printed and
//! written as JSON.
//!
//! Ignored by a plain `cargo test` (they need the server); run with it:
//! `source scripts/llm.sh && llm_start && cargo test -p dentate-cli --test
//! real_model -- --ignored`.

mod common;

use common::{dentate, run_ok_with_stderr};
use serde_json::Value;

const FIXTURE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../dentate-memory/tests/fixtures/real_model_conversation.json"
);

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

#[test]
#[ignore = "needs the local model server (scripts/llm.sh)"]
fn memory_ingest_and_ask_report_the_model_cost_per_role() {
    let (url, model) = server();
    let dir = tempfile::tempdir().unwrap();
    let mem = dir.path().join("mem");
    let stats = dir.path().join("stats.json");
    let llm = ["--llm", &url, "--model", &model, "--llm-seed", "0"];
    let (out, err) = run_ok_with_stderr(
        dentate()
            .args([
                "memory",
                "ingest",
                "--user",
                "maya",
                "--pipeline",
                "hema",
                "--input",
                FIXTURE,
            ])
            .arg("--dir")
            .arg(&mem)
            .args(llm)
            .arg("--llm-stats")
            .arg(&stats),
    );
    assert!(out.contains("hema: processed 30 messages"), "{out}");
    // The per-role table, with the cost per 100 messages.
    let row = err
        .lines()
        .find(|l| l.starts_with("hema_update"))
        .unwrap_or_else(|| panic!("no hema_update row:\n{err}"));
    let cols: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(cols[1], "30", "one summary update per message: {row}");
    assert!(err.contains("per 100 messages: 30 calls (100.0/100)"), "{err}");
    let j: Value = serde_json::from_str(&std::fs::read_to_string(&stats).unwrap()).unwrap();
    let role = &j["per_role"]["hema_update"];
    assert_eq!(role["calls"], 30);
    let outcomes = ["json_first_valid", "json_repaired", "json_invalid"].map(|k| role[k].as_u64().unwrap());
    assert_eq!(outcomes.iter().sum::<u64>(), 30, "{role}");
    assert_eq!(role["json_invalid"], 0, "{role}");
    assert!(role["prompt_tokens"].as_u64().unwrap() > 0);
    assert!(role["latency_p95_ms"].as_f64().unwrap() >= role["latency_p50_ms"].as_f64().unwrap());
    assert_eq!(j["messages"], 30);
    assert_eq!(j["per_100_messages"]["calls"], 100.0);
    // llama-cpp-python refuses `json_schema` and takes the schema inside a
    // `json_object`.
    assert_eq!(j["json_mode"], "json_object+schema", "{j}");

    // The model answers from the composed context.
    let (out, err) = run_ok_with_stderr(
        dentate()
            .args([
                "memory",
                "ask",
                "--user",
                "maya",
                "--pipeline",
                "hema",
                "--budget",
                "400",
            ])
            .arg("--dir")
            .arg(&mem)
            .args(llm)
            .arg("When did Maya adopt Pixel?"),
    );
    assert!(out.contains("composed context ("), "{out}");
    let answer = out
        .lines()
        .find_map(|l| l.strip_prefix(&format!("answer ({model}): ")))
        .unwrap_or_else(|| panic!("no answer line:\n{out}"));
    assert!(!answer.trim().is_empty());
    assert!(err.lines().any(|l| l.starts_with("answer ")), "{err}");
}

#[test]
#[ignore = "needs the local model server (scripts/llm.sh)"]
fn eval_locomo_judges_with_the_model_and_reports_its_cost() {
    let (url, model) = server();
    let (out, _) = run_ok_with_stderr(dentate().args([
        "eval",
        "locomo",
        "--data",
        FIXTURE,
        "--pipeline",
        "rag",
        "--k",
        "5",
        "--answer-budget",
        "300",
        "--json",
        "--llm",
        &url,
        "--model",
        &model,
        "--llm-seed",
        "0",
    ]));
    let j: Value = serde_json::from_str(&out).unwrap();
    let roles = &j["llm_stats"]["per_role"];
    // Five questions, each answered and judged once.
    assert_eq!(roles["answer"]["calls"], 5, "{roles}");
    assert_eq!(roles["judge"]["calls"], 5, "{roles}");
    let judged: u64 = ["json_first_valid", "json_repaired"]
        .iter()
        .map(|k| roles["judge"][k].as_u64().unwrap())
        .sum();
    assert_eq!(judged + roles["judge"]["json_invalid"].as_u64().unwrap(), 5);
    assert_eq!(j["llm_stats"]["failures"], 0);
}
