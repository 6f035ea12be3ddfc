//! The fuzz targets' code path under plain `cargo test`: the minimised
//! crash inputs in `tests/fixtures/fuzz-regressions/<target>/` (each one a
//! crash the fuzzers found and a loader fix removed) must replay cleanly,
//! and every seed input must be accepted. With `DENTATE_FUZZ_SEEDS=<dir>`
//! the seeds are also written to `<dir>/<target>/`, the starting corpus of
//! `cargo fuzz run` (fuzz/README.md).

#[path = "../fuzz/src/lib.rs"]
mod harness;

use std::path::PathBuf;

fn regressions(target: &str) -> Vec<(PathBuf, Vec<u8>)> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/fuzz-regressions")
        .join(target);
    let Ok(entries) = std::fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut out: Vec<_> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_file())
        .map(|p| {
            let bytes = std::fs::read(&p).unwrap();
            (p, bytes)
        })
        .collect();
    out.sort();
    out
}

#[test]
fn minimised_crash_inputs_replay_cleanly() {
    let mut replayed = 0;
    for target in harness::TARGETS {
        for (path, bytes) in regressions(target) {
            // A panic here is the crash coming back; the input may load or not.
            let r = std::panic::catch_unwind(|| harness::run(target, &bytes));
            assert!(r.is_ok(), "{} ({target}) crashes again", path.display());
            replayed += 1;
        }
    }
    eprintln!("{replayed} fuzz regression inputs replayed");
}

#[test]
fn seeds_are_accepted_and_written_on_request() {
    let out = std::env::var_os("DENTATE_FUZZ_SEEDS").map(PathBuf::from);
    for target in harness::TARGETS {
        let seeds = harness::seeds(target);
        assert!(!seeds.is_empty(), "{target} has no seeds");
        for (i, seed) in seeds.iter().enumerate() {
            assert!(harness::run(target, seed), "{target} seed {i} is not accepted");
            if let Some(dir) = &out {
                let dir = dir.join(target);
                std::fs::create_dir_all(&dir).unwrap();
                std::fs::write(dir.join(format!("seed-{i}")), seed).unwrap();
            }
        }
    }
}
