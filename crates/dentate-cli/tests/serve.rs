//! `dentate serve` as a process: SIGKILLed while ingestion is under way,
//! then restarted on the same directory, it resumes every unfinished job
//! and ends with every message processed exactly once; SIGTERM shuts it
//! down gracefully, parking queued work for the next start.

use serde_json::{Value, json};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::dentate;

struct Running {
    child: Child,
    url: String,
}

fn start(dir: &Path) -> Running {
    let mut c: Command = dentate();
    c.args([
        "serve",
        "--bind",
        "127.0.0.1:0",
        "--slots",
        "2",
        "--workers",
        "1",
        "--dir",
    ])
    .arg(dir)
    .stdout(Stdio::null())
    .stderr(Stdio::piped());
    let mut child = c.spawn().unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let first = lines.next().unwrap().unwrap();
    let url = first
        .split_whitespace()
        .find(|w| w.starts_with("http://"))
        .unwrap_or_else(|| panic!("no address in `{first}`"))
        .to_string();
    // Keep draining stderr so the server never blocks on it.
    std::thread::spawn(move || for _ in lines {});
    Running { child, url }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(120)))
        .build()
        .into()
}

fn get(url: &str) -> (u16, Value) {
    let mut r = agent().get(url).call().unwrap();
    (r.status().as_u16(), r.body_mut().read_json().unwrap_or(Value::Null))
}

fn post(url: &str, body: &Value) -> (u16, Value) {
    let mut r = agent().post(url).send_json(body).unwrap();
    (r.status().as_u16(), r.body_mut().read_json().unwrap_or(Value::Null))
}

fn batch(user: usize, b: usize, n: usize) -> Value {
    json!({"messages": (0..n).map(|i| json!({
        "content": format!("user {user} batch {b} line {i}: the kettle in flat {} whistles at {} past", i % 17, (i * 7) % 60),
        "id": format!("{user}-{b}-{i}"),
    })).collect::<Vec<_>>()})
}

fn wait_idle(url: &str, jobs: &[i64]) {
    let deadline = Instant::now() + Duration::from_secs(600);
    loop {
        let pending = jobs
            .iter()
            .filter(|j| {
                let (_, v) = get(&format!("{url}/v1/jobs/{j}"));
                v["state"] != "done"
            })
            .count();
        if pending == 0 {
            return;
        }
        assert!(Instant::now() < deadline, "{pending} jobs never finished");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Every message of `user` has exactly one memory, and every memory one
/// message: nothing lost, nothing processed twice.
fn check_exactly_once(url: &str, user: &str, expected: usize) {
    let (_, u) = get(&format!("{url}/v1/users/{user}"));
    assert_eq!(u["messages"].as_u64(), Some(expected as u64), "{user}: {u}");
    let mut sources = Vec::new();
    let mut offset = 0;
    loop {
        let (s, page) = get(&format!("{url}/v1/users/{user}/memories?limit=1000&offset={offset}"));
        assert_eq!(s, 200);
        let rows = page["results"].as_array().unwrap();
        for r in rows {
            let ids = r["source_ids"].as_array().unwrap();
            assert_eq!(ids.len(), 1, "{r}");
            sources.push(ids[0].as_i64().unwrap());
        }
        if rows.len() < 1000 {
            break;
        }
        offset += rows.len();
    }
    let n = sources.len();
    sources.sort_unstable();
    sources.dedup();
    assert_eq!(sources.len(), n, "{user}: a message was processed twice");
    assert_eq!(n, expected, "{user}: {} of {expected} messages have a memory", n);
}

#[test]
fn kill_9_mid_ingest_then_restart_loses_and_duplicates_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut appended = [0usize; 3];
    let mut jobs = Vec::new();
    // Grow the load until the kill lands while jobs are still unfinished.
    let mut per_batch = 400;
    let mut landed = false;
    for attempt in 0..4 {
        let mut s = start(dir.path());
        for b in 0..6 {
            let user = b % 3;
            let (st, v) = post(
                &format!("{}/v1/users/k{user}/messages", s.url),
                &batch(user, attempt * 10 + b, per_batch),
            );
            assert_eq!(st, 202, "{v}");
            appended[user] += per_batch;
            jobs.push(v["job_id"].as_i64().unwrap());
        }
        let unfinished = jobs
            .iter()
            .filter(|j| get(&format!("{}/v1/jobs/{j}", s.url)).1["state"] != "done")
            .count();
        s.child.kill().unwrap(); // SIGKILL
        s.child.wait().unwrap();
        if unfinished > 0 {
            landed = true;
            break;
        }
        per_batch *= 2;
    }
    assert!(landed, "every kill came after ingestion had finished");
    let s = start(dir.path());
    wait_idle(&s.url, &jobs);
    for (user, n) in appended.iter().enumerate() {
        check_exactly_once(&s.url, &format!("k{user}"), *n);
    }
    // Searching still works on the resumed memory.
    let (st, v) = post(
        &format!("{}/v1/users/k1/search", s.url),
        &json!({"query": "kettle whistles", "k": 3}),
    );
    assert_eq!((st, v["results"].as_array().map(Vec::len)), (200, Some(3)));
    let mut child = s.child;
    child.kill().unwrap();
    child.wait().unwrap();
}

#[cfg(unix)]
#[test]
fn sigterm_shuts_down_gracefully_and_a_restart_finishes_the_queue() {
    let dir = tempfile::tempdir().unwrap();
    let s = start(dir.path());
    let mut jobs = Vec::new();
    for b in 0..8 {
        let (st, v) = post(&format!("{}/v1/users/t/messages", s.url), &batch(0, b, 500));
        assert_eq!(st, 202, "{v}");
        jobs.push(v["job_id"].as_i64().unwrap());
    }
    let mut child = s.child;
    // SAFETY: sending SIGTERM to our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(status.success(), "the server exited with {status}");
    let s = start(dir.path());
    wait_idle(&s.url, &jobs);
    check_exactly_once(&s.url, "t", 8 * 500);
    let mut child = s.child;
    child.kill().unwrap();
    child.wait().unwrap();
}
