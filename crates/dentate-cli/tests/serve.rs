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
    start_on(dir, None)
}

/// A server with its index caches in `dir` and its store at `store` (a
/// PostgreSQL URL several servers share), or in `dir`.
fn start_on(dir: &Path, store: Option<&str>) -> Running {
    let mut c: Command = dentate();
    if let Some(s) = store {
        c.args(["serve", "--store", s]);
    } else {
        c.arg("serve");
    }
    c.args(["--bind", "127.0.0.1:0", "--slots", "2", "--workers", "1", "--dir"])
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

/// A fresh PostgreSQL database for one test, or `None` (with a note) when
/// the run has no server; `DENTATE_REQUIRE_POSTGRES` makes that a failure.
fn postgres_db(tag: &str) -> Option<String> {
    match std::env::var("DENTATE_TEST_POSTGRES") {
        Ok(admin) if !admin.is_empty() => {
            let name = format!("dentate_serve_{tag}_{}", std::process::id());
            Some(dentate_memory::Store::create_database(&admin, &name).unwrap())
        }
        _ => {
            assert!(
                std::env::var_os("DENTATE_REQUIRE_POSTGRES").is_none(),
                "DENTATE_REQUIRE_POSTGRES is set but DENTATE_TEST_POSTGRES is not"
            );
            eprintln!("{tag}: no PostgreSQL (DENTATE_TEST_POSTGRES); skipped");
            None
        }
    }
}

fn search_ids(url: &str, user: &str, query: &str) -> Vec<i64> {
    let (st, v) = post(
        &format!("{url}/v1/users/{user}/search"),
        &json!({"query": query, "k": 5}),
    );
    assert_eq!(st, 200, "{v}");
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect()
}

/// Two servers on one PostgreSQL database: what is appended on one is
/// searched on the other with the same answers; a correction on one is
/// what the other serves next.
#[test]
fn two_servers_on_one_postgres_database_serve_the_same_users() {
    let Some(db) = postgres_db("two") else { return };
    let (da, db_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = start_on(da.path(), Some(&db));
    let b = start_on(db_dir.path(), Some(&db));
    let (st, v) = post(&format!("{}/v1/users/ann/messages", a.url), &batch(0, 0, 50));
    assert_eq!(st, 202, "{v}");
    wait_idle(&a.url, &[v["job_id"].as_i64().unwrap()]);
    // The job is visible from the other server too.
    assert_eq!(get(&format!("{}/v1/jobs/{}", b.url, v["job_id"])).1["state"], "done");
    let q = "which flat has the kettle that whistles";
    let on_a = search_ids(&a.url, "ann", q);
    assert_eq!(on_a.len(), 5);
    assert_eq!(search_ids(&b.url, "ann", q), on_a, "same answers from both servers");
    // Appends on b, found on a; lists agree.
    let (st, v) = post(
        &format!("{}/v1/users/ann/messages", b.url),
        &json!({"messages": [
            {"content": "The violin teacher moved her lessons to Thursday evenings.", "id": "extra-1"}
        ]}),
    );
    assert_eq!(st, 202, "{v}");
    wait_idle(&b.url, &[v["job_id"].as_i64().unwrap()]);
    let hit = search_ids(&a.url, "ann", "When are the violin lessons?")[0];
    let (_, m) = get(&format!("{}/v1/users/ann/memories/{hit}", a.url));
    assert!(m["text"].as_str().unwrap().contains("violin"), "{m}");
    // A correction on a is what b serves next (b had the user loaded).
    let mut r = agent()
        .put(&format!("{}/v1/users/ann/memories/{hit}", a.url))
        .send_json(json!({"text": "The violin lessons are on Friday mornings now."}))
        .unwrap();
    assert_eq!(r.status().as_u16(), 200, "{:?}", r.body_mut().read_to_string());
    let (_, m) = get(&format!("{}/v1/users/ann/memories/{hit}", b.url));
    assert!(m["text"].as_str().unwrap().contains("Friday"), "{m}");
    check_exactly_once(&b.url, "ann", 51);
    for mut s in [a, b] {
        s.child.kill().unwrap();
        s.child.wait().unwrap();
    }
}

/// `kill -9` of one of two servers on one PostgreSQL database while its
/// jobs are running: the other adopts them and finishes every message
/// exactly once.
#[test]
fn kill_9_of_one_server_the_other_finishes_its_jobs() {
    let Some(db) = postgres_db("kill") else { return };
    let (da, db_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let b = start_on(db_dir.path(), Some(&db));
    let mut appended = [0usize; 3];
    let mut jobs = Vec::new();
    let mut per_batch = 400;
    let mut landed = false;
    for attempt in 0..4 {
        let mut a = start_on(da.path(), Some(&db));
        for k in 0..6 {
            let user = k % 3;
            let (st, v) = post(
                &format!("{}/v1/users/k{user}/messages", a.url),
                &batch(user, attempt * 10 + k, per_batch),
            );
            assert_eq!(st, 202, "{v}");
            appended[user] += per_batch;
            jobs.push(v["job_id"].as_i64().unwrap());
        }
        let unfinished = jobs
            .iter()
            .filter(|j| get(&format!("{}/v1/jobs/{j}", a.url)).1["state"] != "done")
            .count();
        a.child.kill().unwrap(); // SIGKILL
        a.child.wait().unwrap();
        if unfinished > 0 {
            landed = true;
            break;
        }
        per_batch *= 2;
    }
    assert!(landed, "every kill came after ingestion had finished");
    // b never restarted: it adopts what a left.
    wait_idle(&b.url, &jobs);
    for (user, n) in appended.iter().enumerate() {
        check_exactly_once(&b.url, &format!("k{user}"), *n);
    }
    let mut b = b;
    b.child.kill().unwrap();
    b.child.wait().unwrap();
}

/// `dentate store copy` moves a served memory from its SQLite directory
/// to PostgreSQL with its service users and keys: a server on the copy
/// answers the same key with the same memories, and `store export` reads
/// the same rows from both.
#[test]
fn store_copy_moves_a_served_memory_to_postgres() {
    let Some(db) = postgres_db("copy") else { return };
    let (dir, cache) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut s = start(dir.path());
    let (st, v) = post(&format!("{}/v1/users/ann/messages", s.url), &batch(0, 0, 30));
    assert_eq!(st, 202, "{v}");
    wait_idle(&s.url, &[v["job_id"].as_i64().unwrap()]);
    let q = "the kettle in flat 3";
    let before = search_ids(&s.url, "ann", q);
    s.child.kill().unwrap();
    s.child.wait().unwrap();
    let run = |args: &[&str]| {
        let out = dentate().args(args).output().unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        out
    };
    let sqlite = format!("sqlite:{}", dir.path().display());
    let key = String::from_utf8(run(&["keys", "create", "--store", &sqlite, "--tenant", "default"]).stdout).unwrap();
    let out = run(&["store", "copy", "--from", &sqlite, "--to", &db]);
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        said.contains("1 users, 1 keys") && said.contains("30 messages"),
        "{said}"
    );
    // A second copy is refused: nothing is copied twice.
    assert!(
        !dentate()
            .args(["store", "copy", "--from", &sqlite, "--to", &db])
            .status()
            .unwrap()
            .success()
    );
    let mut p = start_on(cache.path(), Some(&db));
    let mut r = agent()
        .post(&format!("{}/v1/users/ann/search", p.url))
        .header("Authorization", &format!("Bearer {}", key.trim()))
        .send_json(json!({"query": q, "k": 5}))
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let body: Value = r.body_mut().read_json().unwrap();
    let after: Vec<i64> = body["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect();
    assert_eq!(after, before, "same memories from the copy");
    p.child.kill().unwrap();
    p.child.wait().unwrap();
    let rows = |loc: &str| {
        let out = run(&[
            "store", "export", "--store", loc, "--user", "ann", "--tenant", "default",
        ]);
        String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .skip(1)
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(rows(&sqlite), rows(&db));
}

/// `dentate memory` on a PostgreSQL store: what one process ingests (with
/// its own cache directory), another asks with the same answer.
#[test]
fn memory_commands_share_a_postgres_store() {
    let Some(db) = postgres_db("memcmd") else { return };
    let (a, b, files) = (
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
        tempfile::tempdir().unwrap(),
    );
    let conv = files.path().join("conv.jsonl");
    std::fs::write(
        &conv,
        "{\"session\":\"s1\",\"speaker\":\"Ann\",\"text\":\"My sister Clara is moving to Lisbon in May.\",\"id\":\"D1:1\"}\n\
         {\"session\":\"s1\",\"speaker\":\"Bob\",\"text\":\"I repaired the old blue bicycle yesterday.\",\"id\":\"D1:2\"}\n",
    )
    .unwrap();
    let run = |dir: &Path, args: &[&str]| {
        let out = dentate()
            .args([
                "memory",
                args[0],
                "--pipeline",
                "rag",
                "--user",
                "ann",
                "--store",
                &db,
                "--dir",
            ])
            .arg(dir)
            .args(&args[1..])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        (
            String::from_utf8(out.stdout).unwrap(),
            String::from_utf8(out.stderr).unwrap(),
        )
    };
    let (_, said) = run(a.path(), &["ingest", "--input", conv.to_str().unwrap()]);
    assert!(
        said.contains("stored 2 messages") && said.contains("postgres://"),
        "{said}"
    );
    let (on_b, _) = run(b.path(), &["ask", "Where is Clara moving?"]);
    assert!(on_b.contains("Lisbon"), "{on_b}");
    let (on_a, _) = run(a.path(), &["ask", "Where is Clara moving?"]);
    assert_eq!(on_a, on_b, "same answer from both cache directories");
    assert!(
        std::fs::read_dir(b.path())
            .unwrap()
            .all(|e| e.unwrap().file_name() != "memory.db")
    );
}
