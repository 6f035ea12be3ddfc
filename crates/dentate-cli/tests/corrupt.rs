//! Corrupted index files end to end: every index kind the CLI writes
//! (flat, IVF-PQ, fast-scan, IVF fast-scan, BM25), truncated and
//! byte-flipped, each copy loaded by a fresh `dentate search` process with
//! a time limit. Every copy must be a clean typed error (exit code 2 and an
//! `error:` line): never a panic, a signal, a hang or a silent load.
//! `benches/corrupt.sh` runs the same experiment at a larger scale beside
//! FAISS, hnswlib and usearch.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

mod common;
use common::{dentate, run_ok};

/// How one load of a corrupted copy ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Outcome {
    /// Exit code 2 with an `error:` message: what every copy must give.
    CleanError,
    /// Exit code 101 or a panic message.
    Panic,
    /// Killed by a signal (abort, segfault, out of memory).
    Signal,
    /// Still running at the time limit (then killed).
    Hang,
    /// Exit code 0: the corrupted file loaded and was searched.
    SilentLoad,
    /// Any other exit code.
    Other,
}

/// Runs `cmd` with a time limit and classifies how it ended.
fn classify(cmd: &mut Command, limit: Duration) -> (Outcome, String) {
    let dir = tempfile::tempdir().unwrap();
    let err_path = dir.path().join("stderr");
    let mut child = cmd
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&err_path).unwrap())
        .spawn()
        .expect("spawn dentate");
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if t0.elapsed() > limit {
            child.kill().unwrap();
            child.wait().unwrap();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let err = std::fs::read_to_string(&err_path).unwrap_or_default();
    let outcome = match status {
        None => Outcome::Hang,
        Some(s) if err.contains("panicked") || s.code() == Some(101) => Outcome::Panic,
        Some(s) if s.code() == Some(2) && err.contains("error:") => Outcome::CleanError,
        Some(s) if s.success() => Outcome::SilentLoad,
        Some(s) if s.code().is_none() => Outcome::Signal,
        Some(_) => Outcome::Other,
    };
    (outcome, err)
}

/// xorshift64*: deterministic corruption sites.
struct Rng(u64);
impl Rng {
    fn below(&mut self, n: usize) -> usize {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n.max(1)
    }
}

/// `n` truncated and `n` byte-flipped copies of `good`, with how each was made.
fn corruptions(good: &[u8], n: usize, seed: u64) -> Vec<(String, Vec<u8>)> {
    let mut rng = Rng(seed | 1);
    let mut out = Vec::new();
    // Truncations: the empty file, the header's edges, then random cuts.
    for i in 0..n {
        let cut = match i {
            0 => 0,
            1 => 31,
            2 => 32,
            3 => good.len() - 1,
            _ => rng.below(good.len()),
        };
        out.push((format!("truncated to {cut} bytes"), good[..cut].to_vec()));
    }
    // Flips of one to three bytes, anywhere (header, payload, last byte).
    for i in 0..n {
        let mut bad = good.to_vec();
        let flips = 1 + i % 3;
        let mut sites = Vec::new();
        for _ in 0..flips {
            let at = if i == 0 { good.len() - 1 } else { rng.below(good.len()) };
            bad[at] ^= 1 + rng.below(255) as u8;
            sites.push(at);
        }
        out.push((format!("bytes flipped at {sites:?}"), bad));
    }
    out
}

/// One line of text per document: 400 documents (enough for 8-bit PQ).
fn write_texts(path: &Path) {
    let words = [
        "cat", "dog", "river", "cello", "marathon", "bicycle", "museum", "tuna", "brakes", "lesson",
    ];
    let lines: Vec<String> = (0..400)
        .map(|i| {
            format!(
                "note {i}: the {} and the {} on day {}",
                words[i % 10],
                words[(i / 10) % 10],
                i / 7
            )
        })
        .collect();
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

/// Builds every kind with the CLI into `dir`: `(name, file, is_lexical)`.
fn build_all(dir: &Path) -> Vec<(&'static str, PathBuf)> {
    let texts = dir.join("notes.txt");
    write_texts(&texts);
    let mut out = Vec::new();
    for (kind, extra) in [
        ("flat", &["--precision", "f32"][..]),
        ("ivfpq", &["--nlist", "8", "--m", "8", "--opq"][..]),
        ("fastscan", &["--m", "8"][..]),
        ("ivffastscan", &["--nlist", "8", "--m", "8"][..]),
    ] {
        let file = dir.join(format!("{kind}.dnt"));
        run_ok(
            dentate()
                .args(["index", "build", "--embedder", "hash:32", "--index", kind])
                .args(extra)
                .arg("--texts")
                .arg(&texts)
                .arg("--output")
                .arg(&file),
        );
        out.push((kind, file));
    }
    out.push(("lexical", dir.join("flat.lex")));
    out
}

/// The `dentate search` of one query that loads `file` as `kind`.
fn search(dir: &Path, kind: &str, file: &Path) -> Command {
    let mut c = dentate();
    c.args([
        "search",
        "--embedder",
        "hash:32",
        "--k",
        "3",
        "--text",
        "the cat and the cello",
    ]);
    if kind == "lexical" {
        c.arg("--index").arg(dir.join("flat.dnt")).arg("--lexical").arg(file);
        c.args(["--retriever", "bm25"]);
    } else {
        c.arg("--index").arg(file).args(["--retriever", "dense"]);
    }
    c
}

#[test]
fn corrupted_copies_of_every_kind_are_clean_errors_in_fresh_processes() {
    let dir = tempfile::tempdir().unwrap();
    let files = build_all(dir.path());
    let limit = Duration::from_secs(30);
    let per_kind = 12;
    let mut tally = std::collections::BTreeMap::<(&str, Outcome), usize>::new();
    let mut failures = Vec::new();
    for (seed, (kind, file)) in files.iter().enumerate() {
        // The intact file loads and answers.
        let (ok, err) = classify(&mut search(dir.path(), kind, file), limit);
        assert_eq!(ok, Outcome::SilentLoad, "intact {kind} does not load: {err}");
        let good = std::fs::read(file).unwrap();
        let ext = if *kind == "lexical" { "lex" } else { "dnt" };
        let copy = dir.path().join(format!("corrupt.{ext}"));
        for (how, bytes) in corruptions(&good, per_kind, 0x5EED + seed as u64) {
            std::fs::write(&copy, &bytes).unwrap();
            let (outcome, err) = classify(&mut search(dir.path(), kind, &copy), limit);
            *tally.entry((kind, outcome)).or_default() += 1;
            if outcome != Outcome::CleanError {
                failures.push(format!("{kind} {how}: {outcome:?}: {err}"));
            }
        }
    }
    eprintln!("{tally:?}");
    assert_eq!(tally.values().sum::<usize>(), files.len() * 2 * per_kind);
    assert!(failures.is_empty(), "{failures:#?}");
}
