//! `kill -9` in the middle of a write: the CLI is SIGKILLed (`Child::kill`
//! is SIGKILL on Unix) while `index build` saves over an existing index,
//! and while `memory ingest` processes a conversation; the loops retry
//! with other delays until a kill is seen to land inside the write. Then
//! the previous index still loads and answers identically, the store holds
//! no partial rows, and re-running the ingest processes only what was left,
//! with nothing stored or processed twice.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{dentate, run_ok, run_ok_with_stderr};

/// Writes `n` deterministic vectors of dimension `dim` as .fvecs.
fn write_fvecs(path: &Path, n: usize, dim: usize, seed: u64) {
    let mut x = seed | 1;
    let mut out = Vec::with_capacity(n * (4 + 4 * dim));
    for _ in 0..n {
        out.extend_from_slice(&(dim as i32).to_le_bytes());
        for _ in 0..dim {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            out.extend_from_slice(&(((x >> 40) as f32 / (1u64 << 24) as f32) - 0.5).to_le_bytes());
        }
    }
    std::fs::write(path, out).unwrap();
}

/// The temporary files `write_atomic` leaves beside `file` when killed
/// before its rename (`.<name>.tmp-<pid>-<uid>`).
fn temp_files(file: &Path) -> Vec<PathBuf> {
    let prefix = format!(".{}.tmp-", file.file_name().unwrap().to_string_lossy());
    std::fs::read_dir(file.parent().unwrap())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with(&prefix))
        .collect()
}

#[test]
fn kill_during_index_save_leaves_the_previous_index_whole() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b, q) = (
        dir.path().join("a.fvecs"),
        dir.path().join("b.fvecs"),
        dir.path().join("q.fvecs"),
    );
    // 120,000 × 128 f32: a 61 MB index, whose write and fsync take a while.
    write_fvecs(&a, 120_000, 128, 1);
    write_fvecs(&b, 120_000, 128, 2);
    write_fvecs(&q, 5, 128, 3);
    let index = dir.path().join("index.dnt");
    let build = |input: &Path| {
        let mut c = dentate();
        c.args(["index", "build", "--index", "flat", "--precision", "f32", "--input"])
            .arg(input)
            .arg("--output")
            .arg(&index);
        c
    };
    let search = || {
        run_ok(
            dentate()
                .args(["search", "--k", "5", "--index"])
                .arg(&index)
                .arg("--queries")
                .arg(&q),
        )
    };
    run_ok(&mut build(&a));
    let previous = std::fs::read(&index).unwrap();
    let answers = search();
    // Poll for the temporary file, then kill after a varied delay; a kill
    // lands inside the write when the temporary file is still there after
    // it (the rename had not happened).
    let delays_ms = [0u64, 1, 3, 10, 30, 100];
    let mut landed = Vec::new();
    for attempt in 0..40 {
        let delay = Duration::from_millis(delays_ms[attempt % delays_ms.len()]);
        let mut child = build(&b).stdout(Stdio::null()).stderr(Stdio::null()).spawn().unwrap();
        let t0 = Instant::now();
        let mut seen = false;
        while t0.elapsed() < Duration::from_secs(120) {
            if !temp_files(&index).is_empty() {
                seen = true;
                break;
            }
            if child.try_wait().unwrap().is_some() {
                break;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        if seen {
            std::thread::sleep(delay);
        }
        child.kill().unwrap();
        let status = child.wait().unwrap();
        let temps = temp_files(&index);
        if !temps.is_empty() {
            let partial = std::fs::metadata(&temps[0]).unwrap().len();
            landed.push((delay, partial));
            // The previous index is untouched: same bytes, same answers.
            assert_eq!(
                std::fs::read(&index).unwrap(),
                previous,
                "a killed save changed the index"
            );
            assert_eq!(search(), answers);
            temps.iter().for_each(|t| std::fs::remove_file(t).unwrap());
        } else {
            // Before the write, nothing changed; after the rename, the new
            // index is whole and loads (`search` fails otherwise). Put the
            // previous one back for the next attempt.
            if std::fs::read(&index).unwrap() != previous {
                assert!(status.success() || !search().is_empty());
                std::fs::write(&index, &previous).unwrap();
            }
        }
        if landed.len() >= 3 {
            break;
        }
    }
    eprintln!("kills inside the write (delay, bytes of the temporary file): {landed:?}");
    assert!(!landed.is_empty(), "no kill landed inside the write in 40 attempts");
}

/// A conversation of `n` messages with ids (`m0`, `m1`, …), a new session
/// every 50.
fn write_chat(path: &Path, n: usize) {
    let mut out = String::new();
    for i in 0..n {
        out.push_str(
            &serde_json::json!({
                "speaker": if i % 2 == 0 { "Ann" } else { "Bob" },
                "text": format!("message {i}: the grey cat hid under sofa number {}", i % 97),
                "timestamp": 1_700_000_000 + i * 60,
                "session": format!("s{}", i / 50),
                "id": format!("m{i}"),
            })
            .to_string(),
        );
        out.push('\n');
    }
    std::fs::write(path, out).unwrap();
}

fn ingest(mem: &Path, chat: &Path) -> Command {
    let mut c = dentate();
    c.args(["memory", "ingest", "--pipeline", "rag", "--user", "ann", "--dir"])
        .arg(mem)
        .arg("--input")
        .arg(chat);
    c
}

/// `(text, source ids)` of every live RAG item, in id order.
fn items(mem: &Path) -> Vec<(String, Vec<String>)> {
    let store = dentate_memory::Store::open(mem).unwrap();
    store
        .items("ann", "rag", None)
        .unwrap()
        .into_iter()
        .map(|it| {
            let refs = store.source_refs(&it.sources).unwrap();
            (it.text, refs)
        })
        .collect()
}

/// The number in `"<what> <number> messages"` of the CLI's report.
fn count_after(text: &str, what: &str) -> usize {
    let at = text.find(what).unwrap_or_else(|| panic!("no `{what}` in {text}")) + what.len();
    text[at..].trim_start().split(' ').next().unwrap().parse().unwrap()
}

#[test]
fn kill_during_ingest_then_resume_processes_only_what_was_left() {
    let dir = tempfile::tempdir().unwrap();
    let n = 6000;
    let chat = dir.path().join("chat.jsonl");
    write_chat(&chat, n);
    // Uninterrupted, timed.
    let whole = dir.path().join("whole");
    let t0 = Instant::now();
    let out = run_ok(&mut ingest(&whole, &chat));
    let full = t0.elapsed();
    assert_eq!(count_after(&out, "processed"), n);
    let reference = items(&whole);
    assert_eq!(reference.len(), n);
    let mut landed = None;
    for attempt in 0..24 {
        // Delays across the run: from a fifth of it to nine tenths.
        let frac = 0.2 + 0.7 * ((attempt * 7) % 24) as f64 / 23.0;
        let mem = dir.path().join(format!("killed-{attempt}"));
        let mut child = ingest(&mem, &chat)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(full.mul_f64(frac));
        child.kill().unwrap();
        child.wait().unwrap();
        if !mem.join("memory.db").exists() {
            continue;
        }
        let store = dentate_memory::Store::open(&mem).unwrap();
        let stored = store.message_count("ann").unwrap() as usize;
        // The messages are appended in one transaction: all or none.
        assert!(stored == 0 || stored == n, "{stored} of {n} messages stored");
        let done = items(&mem);
        drop(store);
        if stored == n && !done.is_empty() && done.len() < n {
            landed = Some((attempt, mem, done));
            break;
        }
    }
    let (attempt, mem, done) = landed.expect("no kill landed inside the processing in 24 attempts");
    eprintln!(
        "killed on attempt {attempt} with {} of {n} messages processed",
        done.len()
    );
    // Consistent: the processed items are exactly the first messages, each
    // once, as in the uninterrupted run, and the progress mark agrees.
    assert_eq!(done[..], reference[..done.len()]);
    let store = dentate_memory::Store::open(&mem).unwrap();
    let all_ids: Vec<i64> = store.messages_after("ann", 0).unwrap().iter().map(|m| m.id).collect();
    let through = store.progress("ann", "rag").unwrap();
    assert_eq!(all_ids.iter().filter(|&&id| id <= through).count(), done.len());
    drop(store);
    // Re-running the same command stores nothing again and processes only
    // the rest.
    let (out, err) = run_ok_with_stderr(&mut ingest(&mem, &chat));
    assert!(
        err.contains("stored 0 messages") && err.contains(&format!("{n} already stored")),
        "{err}"
    );
    assert_eq!(count_after(&out, "processed"), n - done.len(), "{out}");
    assert_eq!(items(&mem), reference);
    let store = dentate_memory::Store::open(&mem).unwrap();
    assert_eq!(store.message_count("ann").unwrap() as usize, n);
}
