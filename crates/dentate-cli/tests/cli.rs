//! The `dentate` binary as a user runs it.

use std::path::Path;
use std::process::Command;

mod common;
use common::{dentate, run_ok};

/// `--base`, `--queries` and `--gt` for the set `synth` wrote into `dir`.
fn synth_files(dir: &Path) -> Vec<std::ffi::OsString> {
    let mut args = Vec::new();
    for (flag, file) in [
        ("--base", "base.fvecs"),
        ("--queries", "queries.fvecs"),
        ("--gt", "gt.ivecs"),
    ] {
        args.push(flag.into());
        args.push(dir.join(file).into_os_string());
    }
    args
}

fn synth(dir: &Path, n: usize, dim: usize) {
    run_ok(
        dentate()
            .args([
                "data",
                "synth",
                "--n",
                &n.to_string(),
                "--dim",
                &dim.to_string(),
                "--queries",
                "50",
                "--clusters",
                "40",
                "--out",
            ])
            .arg(dir),
    );
}

#[test]
fn bench_json_has_the_documented_keys_and_reaches_recall() {
    let dir = tempfile::tempdir().unwrap();
    synth(dir.path(), 8000, 32);
    let p = |f: &str| dir.path().join(f);
    let out = run_ok(
        dentate()
            .args([
                "bench",
                "--index",
                "ivfpq",
                "--nlist",
                "32",
                "--m",
                "8",
                "--nprobe",
                "1,8",
                "--rerank",
                "0,8",
                "--k",
                "10",
                "--threads",
                "2",
                "--json",
            ])
            .args(synth_files(dir.path())),
    );
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(rows.len(), 4, "2 nprobe × 2 rerank");
    for r in &rows {
        for key in [
            "index",
            "nprobe",
            "rerank",
            "recall_at_k",
            "qps",
            "build_s",
            "bytes_per_vector",
        ] {
            assert!(r.get(key).is_some(), "missing {key} in {r}");
        }
        assert!(r["qps"].as_f64().unwrap() > 0.0);
        // The probed lists bound what any re-ranking can find.
        let cover = r["ivf_coverage"].as_f64().expect("IVF coverage");
        assert!(r["recall_at_k"].as_f64().unwrap() <= cover + 1e-4, "{r}");
        assert!(r["imbalance"].as_f64().unwrap() >= 1.0, "{r}");
    }
    let cover = |p: u64| {
        rows.iter().find(|r| r["nprobe"] == p).unwrap()["ivf_coverage"]
            .as_f64()
            .unwrap()
    };
    assert!(cover(1) < cover(8), "more probes cover more");
    let best = rows
        .iter()
        .map(|r| r["recall_at_k"].as_f64().unwrap())
        .fold(0.0, f64::max);
    assert!(best >= 0.95, "best recall {best}");
    // The coarse k-means settings reach the training: one iteration on 40
    // points a list partitions differently from the defaults.
    let out = run_ok(
        dentate()
            .args([
                "bench", "--index", "ivfpq", "--nlist", "32", "--m", "8", "--nprobe", "1", "--json",
            ])
            .args([
                "--kmeans-iterations",
                "1",
                "--kmeans-points-per-list",
                "40",
                "--spherical-coarse",
                "false",
            ])
            .args(synth_files(dir.path())),
    );
    let row: serde_json::Value = serde_json::from_str(out.lines().next().unwrap()).unwrap();
    assert_ne!(row["imbalance"], rows[0]["imbalance"], "{row}");
    // Flat, ground truth computed in-process: recall 1.
    let out = run_ok(
        dentate()
            .args(["bench", "--index", "flat", "--precision", "f32", "--json", "--base"])
            .arg(p("base.fvecs"))
            .arg("--queries")
            .arg(p("queries.fvecs")),
    );
    let r: serde_json::Value = serde_json::from_str(out.trim()).unwrap();
    assert_eq!(r["recall_at_k"].as_f64(), Some(1.0));
    assert!(r["nprobe"].is_null());
}

/// Builds an index with `args` over `dir/base.fvecs`, checks that `index
/// info` shows every line of `expect`, and that the first five base rows,
/// as queries, find themselves first.
fn build_inspect_and_find_self(dir: &Path, dim: usize, args: &[&str], expect: &[&str]) {
    let idx = dir.join("i.dnt");
    run_ok(
        dentate()
            .args(["index", "build"])
            .args(args)
            .arg("--input")
            .arg(dir.join("base.fvecs"))
            .arg("--output")
            .arg(&idx),
    );
    let info = run_ok(dentate().args(["index", "info", "--index"]).arg(&idx));
    assert!(expect.iter().all(|e| info.contains(e)), "{info}");
    let base = dentate_core::data::read_f32(&dir.join("base.fvecs")).unwrap();
    let qpath = dir.join("q.fvecs");
    dentate_core::data::write_fvecs(&qpath, &base.data[..dim * 5], dim).unwrap();
    let out = run_ok(
        dentate()
            .args([
                "index", "search", "--k", "3", "--nprobe", "16", "--rerank", "50", "--index",
            ])
            .arg(&idx)
            .arg("--queries")
            .arg(&qpath),
    );
    for (i, line) in out.lines().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        assert_eq!(v["query"], i);
        assert_eq!(v["ids"][0], i, "{line}");
    }
}

#[test]
fn index_build_search_info_round_trip() {
    let dir = tempfile::tempdir().unwrap();
    synth(dir.path(), 3000, 16);
    build_inspect_and_find_self(
        dir.path(),
        16,
        &[
            "--index",
            "ivfpq",
            "--nlist",
            "16",
            "--m",
            "4",
            "--opq",
            "--opq-iterations",
            "2",
        ],
        &["kind:          ivfpq", "live vectors:  3000", "opq:           true"],
    );
}

/// Fast-scan through the CLI: bench (IVF and flat), index build/info/search,
/// tune and bench-report with its SVG.
#[test]
fn fastscan_bench_index_tune_and_report() {
    let dir = tempfile::tempdir().unwrap();
    synth(dir.path(), 8000, 32);
    let p = |f: &str| dir.path().join(f);
    let files = |c: &mut Command| {
        c.arg("--base")
            .arg(p("base.fvecs"))
            .arg("--queries")
            .arg(p("queries.fvecs"));
    };
    let mut c = dentate();
    c.args([
        "bench",
        "--index",
        "ivffastscan",
        "--nlist",
        "32",
        "--m",
        "16",
        "--nprobe",
        "1,8",
        "--rerank",
        "0,10",
        "--threads",
        "2",
        "--json",
        "--gt",
    ])
    .arg(p("gt.ivecs"));
    files(&mut c);
    let out = run_ok(&mut c);
    let rows: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(rows.len(), 4);
    assert!(
        rows.iter()
            .all(|r| r["index"] == "ivffastscan" && r["nlist"] == 32 && r["m"] == 16)
    );
    let recall = |r: &serde_json::Value| r["recall_at_k"].as_f64().unwrap();
    let best = rows.iter().map(recall).fold(0.0, f64::max);
    assert!(best >= 0.95, "best recall {best}");
    // Re-ranking beats the 4-bit scores alone at the same nprobe.
    assert!(recall(&rows[3]) > recall(&rows[1]), "{rows:?}");
    // Flat fast-scan: one list, nprobe does not apply.
    let mut c = dentate();
    c.args([
        "bench", "--index", "fastscan", "--m", "16", "--nprobe", "1,8", "--rerank", "10", "--json",
    ]);
    files(&mut c);
    let out = run_ok(&mut c);
    let flat: Vec<serde_json::Value> = out.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(flat.len(), 1);
    assert_eq!(flat[0]["nlist"], 1);
    assert!(recall(&flat[0]) >= 0.95, "{}", flat[0]);

    // Build, inspect, search.
    build_inspect_and_find_self(
        dir.path(),
        32,
        &["--index", "ivffastscan", "--nlist", "16", "--m", "8"],
        &["kind:          fastscan", "4-bit fast-scan", "live vectors:  8000"],
    );

    // Tune: the chosen setting reaches the target on the tuning queries and
    // is saved with its nprobe and re-rank factor as defaults.
    let tuned = p("tuned.dnt");
    let mut c = dentate();
    c.args([
        "tune",
        "--target-recall",
        "0.9",
        "--nlist",
        "16,32",
        "--m",
        "16",
        "--rerank",
        "0,8",
        "--json",
        "--output",
    ])
    .arg(&tuned);
    files(&mut c);
    let out = run_ok(&mut c);
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    let chosen = &last["chosen"];
    assert!(chosen["recall_at_k"].as_f64().unwrap() >= 0.9, "{last}");
    assert!(chosen["holdout_recall_at_k"].as_f64().is_some(), "{last}");
    assert_eq!(last["split"], serde_json::json!([25, 25]));
    let info = run_ok(dentate().args(["index", "info", "--index"]).arg(&tuned));
    assert!(
        info.contains(&format!(
            "defaults:      nprobe {}, rerank {}",
            chosen["nprobe"], chosen["rerank"]
        )),
        "{info}\n{chosen}"
    );
    // An unreachable target is an error with exit code 2.
    let mut c = dentate();
    c.args([
        "tune",
        "--target-recall",
        "1.0",
        "--nlist",
        "32",
        "--m",
        "16",
        "--nprobe",
        "1",
        "--rerank",
        "0",
    ]);
    files(&mut c);
    let out = c.output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("no setting reached"));
    // Without queries: base rows drawn as queries, left out of the indexes;
    // the choice then runs on the real queries as a labelled series.
    let out = run_ok(
        dentate()
            .args([
                "tune",
                "--target-recall",
                "0.9",
                "--nlist",
                "32",
                "--m",
                "16",
                "--rerank",
                "4,8",
                "--sample",
                "200",
                "--json",
                "--base",
            ])
            .arg(p("base.fvecs")),
    );
    let last: serde_json::Value = serde_json::from_str(out.lines().last().unwrap()).unwrap();
    assert_eq!(last["queries_from"], "base rows", "{last}");
    assert_eq!(last["split"], serde_json::json!([100, 100]));
    assert_eq!(
        last["holds_out"].as_bool().unwrap(),
        last["chosen"]["holdout_recall_at_k"].as_f64().unwrap() >= 0.9,
        "{last}"
    );
    assert_eq!(
        last["held_aside_miss"].is_null(),
        last["safer"].as_array().unwrap().is_empty()
    );
    let chosen = &last["chosen"];
    let mut c = dentate();
    c.args([
        "bench",
        "--index",
        "ivffastscan",
        "--json",
        "--label",
        "tune 0.9",
        "--gt",
    ])
    .arg(p("gt.ivecs"))
    .args(["--nlist", &chosen["nlist"].to_string(), "--m", &chosen["m"].to_string()])
    .args([
        "--nprobe",
        &chosen["nprobe"].to_string(),
        "--rerank",
        &chosen["rerank"].to_string(),
    ]);
    files(&mut c);
    let tuned_rows: Vec<serde_json::Value> = run_ok(&mut c)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(tuned_rows.len(), 1);
    assert_eq!(tuned_rows[0]["label"], "tune 0.9");
    assert!(tuned_rows[0]["batch"].is_null());
    // One query per call (the latency path) finds the same neighbours as
    // the whole batch in one call (lists shared by its queries).
    c.args(["--batch", "1"]);
    let single: serde_json::Value = serde_json::from_str(run_ok(&mut c).lines().next().unwrap()).unwrap();
    assert_eq!(single["batch"], 1);
    assert_eq!(single["recall_at_k"], tuned_rows[0]["recall_at_k"]);
    let mut zero = dentate();
    zero.args(["bench", "--index", "flat", "--batch", "0"]);
    files(&mut zero);
    assert_eq!(zero.output().unwrap().status.code(), Some(2));
    let rows: Vec<serde_json::Value> = rows.into_iter().chain(tuned_rows).collect();

    // The report: Dentate's rows plus two rows in the FAISS script's format.
    let results = p("results.jsonl");
    let faiss = [
        r#"{"engine": "faiss", "index": "ivfpqfs", "nlist": 32, "m": 16, "opq": false, "nprobe": 8, "rerank": 10, "k": 10, "threads": 2, "recall_at_k": 0.999, "qps": 10.0, "build_s": 1.0, "bytes_per_vector": 136, "n": 8000, "d": 32, "nq": 50}"#,
        r#"{"engine": "faiss", "index": "flat", "nlist": null, "m": null, "opq": false, "nprobe": null, "rerank": null, "k": 10, "threads": 2, "recall_at_k": 1.0, "qps": 5.0, "build_s": 0.1, "bytes_per_vector": 128, "n": 8000, "d": 32, "nq": 50}"#,
    ];
    std::fs::write(
        &results,
        format!(
            "# a comment line\n{out_rows}\n{}\n",
            faiss.join("\n"),
            out_rows = rows.iter().map(|r| r.to_string()).collect::<Vec<_>>().join("\n")
        ),
    )
    .unwrap();
    let svg = p("race.svg");
    let report = run_ok(
        dentate()
            .args(["bench-report", "--targets", "0.9,0.999", "--results"])
            .arg(&results)
            .arg("--svg")
            .arg(&svg),
    );
    assert!(
        report.contains("recall@10 ≥ 0.90") && report.contains("Dentate fast-scan + re-rank"),
        "{report}"
    );
    assert!(
        report.contains("faiss IVF,PQx4fs + RefineFlat") && report.contains("faiss IndexFlatIP"),
        "{report}"
    );
    assert!(report.contains("Best QPS: Dentate"), "{report}");
    assert!(
        report.contains("Dentate fast-scan + re-rank [tune 0.9] (nlist 32, m 16,")
            && report.contains("chosen on these queries"),
        "{report}"
    );
    let svg = std::fs::read_to_string(&svg).unwrap();
    assert!(
        svg.starts_with("<svg") && svg.contains("Dentate fast-scan"),
        "{}",
        &svg[..200.min(svg.len())]
    );
}

#[test]
fn errors_are_messages_with_exit_code_2() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.dnt");
    std::fs::write(&bad, b"DENTATE\0 not really").unwrap();
    let out = dentate().args(["index", "info", "--index"]).arg(&bad).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("error:") && (err.contains("checksum") || err.contains("truncated")),
        "{err}"
    );
    let out = dentate()
        .args([
            "bench",
            "--base",
            "/nonexistent.fvecs",
            "--queries",
            "/nonexistent.fvecs",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent.fvecs"));
}

#[test]
fn embed_writes_one_unit_vector_per_line() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("s.txt");
    std::fs::write(
        &input,
        "Caroline went to the support group.\n\nMelanie painted a sunrise.\n",
    )
    .unwrap();
    let out = dir.path().join("v.fvecs");
    let o = dentate()
        .args(["embed", "--embedder", "hash:64", "--input"])
        .arg(&input)
        .arg("--output")
        .arg(&out)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stderr).contains("sentences/s"));
    let m = dentate_core::data::read_f32(&out).unwrap();
    assert_eq!(
        (m.rows, m.cols),
        (3, 64),
        "empty lines are embedded too, so rows match lines"
    );
    for r in m.data.chunks_exact(64) {
        assert!((r.iter().map(|x| x * x).sum::<f32>() - 1.0).abs() < 1e-5);
    }
    let bad = dentate()
        .args(["embed", "--embedder", "word2vec", "--input"])
        .arg(&input)
        .arg("--output")
        .arg(&out)
        .output()
        .unwrap();
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("unknown embedder"));
}

#[test]
fn memory_ingest_ask_forget_correct() {
    let dir = tempfile::tempdir().unwrap();
    let chat = dir.path().join("chat.jsonl");
    std::fs::write(
        &chat,
        r#"{"speaker": "Ann", "text": "I moved to Porto last spring and love the river.", "timestamp": "2024-04-02T10:00:00Z", "id": "m1"}
{"speaker": "Bob", "text": "My bicycle got stolen outside the library.", "timestamp": "2024-04-02T10:01:00Z", "id": "m2"}
{"speaker": "Ann", "text": "I started cello lessons with a teacher named Ines.", "timestamp": "2024-04-09T18:00:00Z", "id": "m3"}
"#,
    )
    .unwrap();
    let mem = dir.path().join("mem");
    let base = |cmd: &str| {
        let mut c = dentate();
        c.args(["memory", cmd, "--user", "ann", "--dir"]).arg(&mem);
        c
    };
    let out = run_ok(base("ingest").arg("--input").arg(&chat));
    assert!(out.contains("processed 3 messages"), "{out}");
    // The same file again: its messages (same ids and texts) are known.
    let again = base("ingest").arg("--input").arg(&chat).output().unwrap();
    assert!(again.status.success());
    let err = String::from_utf8_lossy(&again.stderr);
    assert!(
        err.contains("stored 0 messages") && err.contains("3 already stored, skipped"),
        "{err}"
    );
    let out = String::from_utf8_lossy(&again.stdout);
    assert!(out.contains("processed 0 messages"), "{out}");
    let out = run_ok(base("ask").arg("Who teaches Ann the cello?"));
    let first = out.lines().nth(1).unwrap();
    assert!(first.contains("from m3") && first.contains("Ines"), "{out}");
    assert!(out.contains("2024-04-09"), "dated: {out}");
    assert!(
        out.contains("<compact>") && out.contains("<user> Who teaches Ann the cello? </user>"),
        "{out}"
    );
    // Forget the cello memory by the id `ask` printed.
    let id: String = first
        .trim_start()
        .trim_start_matches('#')
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    run_ok(base("forget").args(["--id", &id]));
    let out = run_ok(base("ask").arg("Who teaches Ann the cello?"));
    assert!(!out.contains("from m3"), "{out}");
    let out = base("forget").args(["--id", &id]).output().unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no memory item"));
    // A missing or malformed input fails clearly and stores nothing more.
    std::fs::write(&chat, "{\"speaker\": \"Ann\"}\n").unwrap();
    let out = base("ingest").arg("--input").arg(&chat).output().unwrap();
    assert!(!out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("line 1"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn eval_locomo_prints_per_category_tables() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("locomo.json");
    std::fs::write(
        &data,
        r#"[{"sample_id": "f1", "conversation": {"speaker_a": "Ann", "speaker_b": "Bob",
  "session_1_date_time": "9:15 am on 2 March, 2024",
  "session_1": [
    {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a grey cat called Pixel."},
    {"speaker": "Bob", "dia_id": "D1:2", "text": "I am training for the Berlin marathon."},
    {"speaker": "Ann", "dia_id": "D1:3", "text": "My sister Clara moves to Lisbon."}]},
  "qa": [
    {"question": "What is the name of Ann's cat?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4},
    {"question": "Where does Clara move?", "answer": "Lisbon", "evidence": ["D1:3"], "category": 4},
    {"question": "What race is Bob training for?", "answer": "Berlin marathon", "evidence": ["D1:2"], "category": 1}]}]"#,
    )
    .unwrap();
    for pipeline in ["rag", "hema"] {
        let out = run_ok(
            dentate()
                .args(["eval", "locomo", "--pipeline", pipeline, "--k", "1,3", "--data"])
                .arg(&data),
        );
        assert!(
            out.contains("single-hop") && out.contains("multi-hop") && out.contains("overall"),
            "{out}"
        );
        let json = run_ok(
            dentate()
                .args([
                    "eval",
                    "locomo",
                    "--pipeline",
                    pipeline,
                    "--k",
                    "1,3",
                    "--json",
                    "--data",
                ])
                .arg(&data),
        );
        let v: serde_json::Value = serde_json::from_str(&json).unwrap();
        assert_eq!(v["dataset"]["questions"], 3);
        assert_eq!(v["runs"][0]["pipeline"], pipeline);
    }
    // The issue's one command: every pipeline × retriever at a budget,
    // with the table, JSON and plot written to --out.
    let out_dir = dir.path().join("out");
    let table = run_ok(
        dentate()
            .args([
                "eval",
                "locomo",
                "--pipeline",
                "rag,hema",
                "--retriever",
                "dense,bm25,hybrid",
                "--budget",
                "1500",
                "--out",
            ])
            .arg(&out_dir)
            .arg("--data")
            .arg(&data),
    );
    assert!(table.contains("| rag | bm25 | 1500 tokens |"), "{table}");
    assert!(table.contains("| hema | weighted:0.3 | 1500 tokens |"), "{table}");
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(out_dir.join("eval.json")).unwrap()).unwrap();
    assert_eq!(v["runs"].as_array().map(Vec::len), Some(6));
    assert_eq!(v["runs"][0]["retrieval"]["cuts"][0]["value"], 1500);
    let md = std::fs::read_to_string(out_dir.join("eval.md")).unwrap();
    assert!(
        md.starts_with("1 conversations") && md.contains("| pipeline | retriever | cut |"),
        "{md}"
    );
    let svg = std::fs::read_to_string(out_dir.join("eval.svg")).unwrap();
    assert!(svg.starts_with("<svg") && svg.contains("answer recall") && svg.contains("hema · bm25"));
    for bad in [["--budget", "0"], ["--pipeline", "nemo"]] {
        let out = dentate()
            .args(["eval", "locomo"])
            .args(bad)
            .arg("--data")
            .arg(&data)
            .output()
            .unwrap();
        assert!(!out.status.success());
    }
    let out = dentate()
        .args(["eval", "locomo", "--data", "/nonexistent.json"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

#[test]
fn text_index_build_and_hybrid_search() {
    let dir = tempfile::tempdir().unwrap();
    let notes = dir.path().join("notes.txt");
    std::fs::write(
        &notes,
        "Caroline went to the LGBTQ support group on 7 May 2023.\n\
         Melanie painted a sunrise over the lake last year.\n\
         The marathon in Berlin is in September.\n\
         Caroline is researching adoption agencies.\n\
         Melanie's kids love dinosaurs and camping.\n",
    )
    .unwrap();
    let idx = dir.path().join("idx.dnt");
    run_ok(
        dentate()
            .args(["index", "build", "--index", "flat", "--embedder", "hash:128", "--texts"])
            .arg(&notes)
            .arg("--output")
            .arg(&idx),
    );
    assert!(dir.path().join("idx.lex").exists());
    let search = |extra: &[&str]| -> serde_json::Value {
        let out = run_ok(
            dentate()
                .args(["search", "--embedder", "hash:128", "--k", "2", "--index"])
                .arg(&idx)
                .arg("--texts")
                .arg(&notes)
                .args(extra),
        );
        serde_json::from_str(out.lines().next().unwrap()).unwrap()
    };
    for retriever in ["hybrid", "bm25", "dense", "rrf"] {
        let v = search(&["--retriever", retriever, "--text", "Who loves dinosaurs?"]);
        assert_eq!(v["ids"][0], 4, "{retriever}: {v}");
        assert!(v["texts"][0].as_str().unwrap().contains("dinosaurs"));
    }
    // BM25 finds nothing for words absent from every document.
    let v = search(&["--retriever", "bm25", "--text", "quantum chromodynamics"]);
    assert_eq!(v["ids"], serde_json::json!([]));
    // Wrong embedder, missing lexical index, line counts that disagree.
    let out = dentate()
        .args(["search", "--text", "x", "--embedder", "hash:64", "--index"])
        .arg(&idx)
        .output()
        .unwrap();
    assert!(!out.status.success() && String::from_utf8_lossy(&out.stderr).contains("128-d"));
    let out = dentate()
        .args(["search", "--text", "x", "--lexical", "/nonexistent.lex", "--index"])
        .arg(&idx)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("no BM25 index"));
    let vecs = dir.path().join("v.fvecs");
    run_ok(
        dentate()
            .args(["embed", "--embedder", "hash:128", "--input"])
            .arg(&notes)
            .arg("--output")
            .arg(&vecs),
    );
    std::fs::write(dir.path().join("short.txt"), "one line only\n").unwrap();
    let out = dentate()
        .args(["index", "build", "--index", "flat", "--input"])
        .arg(&vecs)
        .arg("--texts")
        .arg(dir.path().join("short.txt"))
        .arg("--output")
        .arg(dir.path().join("bad.dnt"))
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("1 texts but 5 vectors"));
}

/// A conversation of `n` messages: a new session every 30 messages (one a
/// day), and a new topic, opened with "By the way", every 8.
fn long_chat(path: &Path, n: usize) {
    let topics = [
        ("cat", "Pixel the grey cat hides under the sofa and loves tuna"),
        (
            "marathon",
            "the Berlin marathon training plan has forty kilometres a week",
        ),
        ("sister", "Clara designs museums in Lisbon near the river"),
        ("bicycle", "the old blue bicycle needed new brakes and a chain"),
        ("cello", "cello lessons with Ines are on Thursday evenings"),
    ];
    let mut out = String::new();
    for i in 0..n {
        let (topic, fact) = topics[(i / 8) % topics.len()];
        let opener = if i % 8 == 0 { "By the way, " } else { "" };
        let speaker = if i % 2 == 0 { "Ann" } else { "Bob" };
        let day = i / 30;
        let ts = 1_700_000_000 + day * 86_400 + (i % 30) * 60;
        out.push_str(
            &serde_json::json!({
                "speaker": speaker,
                "text": format!("{opener}message {i} about the {topic}: {fact}."),
                "timestamp": ts,
                "session": format!("day-{day}"),
                "id": format!("m{i}"),
            })
            .to_string(),
        );
        out.push('\n');
    }
    std::fs::write(path, out).unwrap();
}

/// Starts `ingest(dir) --input chat`, kills it (SIGKILL) after 700 ms, then
/// runs it again: without `--input` when the messages were stored (the
/// resume path), with it when the kill came before they were.
fn kill_and_resume(ingest: &dyn Fn(&Path) -> Command, dir: &Path, chat: &Path) {
    let mut child = ingest(dir)
        .arg("--input")
        .arg(chat)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(700));
    child.kill().unwrap();
    child.wait().unwrap();
    let stored =
        dir.join("memory.db").exists() && dentate_memory::Store::open(dir).unwrap().message_count("ann").unwrap() > 0;
    if stored {
        run_ok(&mut ingest(dir));
    } else {
        run_ok(ingest(dir).arg("--input").arg(chat));
    }
}

/// `(kind, text, source ids)` of every live Nemori item, in id order.
fn nemori_items(dir: &Path) -> Vec<(String, String, Vec<String>)> {
    pipeline_items(dir, "nemori")
}

/// `(kind, text, source ids)` of every live item of `pipeline`, in id order.
fn pipeline_items(dir: &Path, pipeline: &str) -> Vec<(String, String, Vec<String>)> {
    let store = dentate_memory::Store::open(dir).unwrap();
    let mut out = Vec::new();
    for it in store.items("ann", pipeline, None).unwrap() {
        let refs = store.source_refs(&it.sources).unwrap();
        out.push((it.kind, it.text, refs));
    }
    out
}

#[test]
fn nemori_ingest_ask_stream_and_survive_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let chat = dir.path().join("chat.jsonl");
    long_chat(&chat, 2400);
    let ingest = |mem: &Path| {
        let mut c = dentate();
        c.args(["memory", "ingest", "--pipeline", "nemori", "--user", "ann", "--dir"])
            .arg(mem);
        c
    };
    // Uninterrupted.
    let whole = dir.path().join("whole");
    let out = run_ok(ingest(&whole).arg("--input").arg(&chat));
    assert!(out.contains("nemori: processed 2400 messages"), "{out}");
    let reference = nemori_items(&whole);
    assert!(reference.iter().any(|i| i.0 == "episode") && reference.iter().any(|i| i.0 == "semantic"));
    // Killed mid-ingest (SIGKILL), then resumed without --input.
    let killed = dir.path().join("killed");
    kill_and_resume(&ingest, &killed, &chat);
    assert_eq!(
        nemori_items(&killed),
        reference,
        "a kill loses nothing and changes nothing"
    );
    // `ask` reads the episodes and statements, with provenance.
    let out = run_ok(
        dentate()
            .args(["memory", "ask", "--pipeline", "nemori", "--user", "ann", "--dir"])
            .arg(&whole)
            .arg("Who teaches the cello lessons?"),
    );
    assert!(out.contains("Ines") && out.contains("<memories>"), "{out}");
    // Offline narratives quote every message here: no originals twice.
    assert!(!out.contains("<original episode="), "{out}");
    // Streaming: one message per call keeps the episode open until a
    // boundary; the items equal those of one call per conversation.
    let small = dir.path().join("small.jsonl");
    long_chat(&small, 20);
    let lines: Vec<String> = std::fs::read_to_string(&small)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let streamed = dir.path().join("streamed");
    for (i, l) in lines.iter().enumerate() {
        let one = dir.path().join("one.jsonl");
        std::fs::write(&one, format!("{l}\n")).unwrap();
        let mut c = ingest(&streamed);
        c.arg("--input").arg(&one);
        if i + 1 < lines.len() {
            c.arg("--keep-open");
        }
        run_ok(&mut c);
    }
    let batch = dir.path().join("batch");
    run_ok(ingest(&batch).arg("--input").arg(&small));
    assert_eq!(nemori_items(&streamed), nemori_items(&batch));
}

/// `(kind, text, source ids, parent)` of every live Amory item, then every
/// triple, in id order.
fn amory_items(dir: &Path) -> Vec<String> {
    let store = dentate_memory::Store::open(dir).unwrap();
    let mut out = Vec::new();
    for it in store.items("ann", "amory", None).unwrap() {
        let refs = store.source_refs(&it.sources).unwrap();
        out.push(format!("{} {:?} {refs:?} {:?}", it.kind, it.text, it.parent));
    }
    for t in store.triples("ann", "amory").unwrap() {
        out.push(format!(
            "{} | {} | {} {:?}",
            t.subject, t.predicate, t.object, t.sources
        ));
    }
    out
}

#[test]
fn amory_ingest_show_ask_and_survive_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let chat = dir.path().join("chat.jsonl");
    long_chat(&chat, 2400);
    let memory = |cmd: &str, mem: &Path| {
        let mut c = dentate();
        c.args(["memory", cmd, "--pipeline", "amory", "--user", "ann", "--dir"])
            .arg(mem);
        c
    };
    // Uninterrupted.
    let whole = dir.path().join("whole");
    let out = run_ok(memory("ingest", &whole).arg("--input").arg(&chat));
    assert!(out.contains("amory: processed 2400 messages"), "{out}");
    let reference = amory_items(&whole);
    for kind in ["narrative ", "subplot ", "fragment "] {
        assert!(reference.iter().any(|i| i.starts_with(kind)), "{kind}");
    }
    // Killed mid-ingest (SIGKILL), then resumed without --input.
    let killed = dir.path().join("killed");
    kill_and_resume(&|mem: &Path| memory("ingest", mem), &killed, &chat);
    assert_eq!(
        amory_items(&killed),
        reference,
        "a kill loses nothing and changes nothing"
    );
    // `ask` shows stories, sub-plots and dated fragments with provenance.
    let out = run_ok(memory("ask", &whole).arg("Who teaches the cello lessons?"));
    assert!(
        out.contains("Ines") && out.contains("Story: ") && out.contains("<memories>"),
        "{out}"
    );

    // `show` prints the tree and the triples.
    let small = dir.path().join("small.jsonl");
    std::fs::write(
        &small,
        r#"{"speaker": "Ann", "text": "My sister Clara is an architect in Lisbon.", "timestamp": "2024-04-02T10:00:00Z", "id": "m1"}
{"speaker": "Bob", "text": "Does Clara design museums in Lisbon?", "timestamp": "2024-04-02T10:01:00Z", "id": "m2"}
{"speaker": "Ann", "text": "Clara designs museums near the Lisbon river.", "timestamp": "2024-04-02T10:02:00Z", "id": "m3"}
{"speaker": "Bob", "text": "My favourite dish is the spicy lentil soup.", "timestamp": "2024-04-09T18:00:00Z", "id": "m4"}
"#,
    )
    .unwrap();
    let mem = dir.path().join("show");
    run_ok(memory("ingest", &mem).arg("--input").arg(&small));
    let out = run_ok(&mut memory("show", &mem));
    assert!(out.starts_with("amory memory of `ann`:"), "{out}");
    assert!(
        out.contains("sub-plot: ") && out.contains("[Ann] (characters: Ann"),
        "{out}"
    );
    assert!(
        out.contains("[2 April 2024] Ann: My sister Clara is an architect in Lisbon. (m1)"),
        "{out}"
    );
    assert!(
        out.contains("Semantic graph (") && out.contains("(Ann | 's sister is | Clara) (m1)"),
        "{out}"
    );
    assert!(
        out.contains("(Bob | 's favourite dish is | the spicy lentil soup) (m4)"),
        "{out}"
    );
    // Other pipelines list their items.
    let rag = dir.path().join("rag");
    let mut c = dentate();
    c.args(["memory", "ingest", "--pipeline", "rag", "--user", "ann", "--dir"])
        .arg(&rag)
        .arg("--input")
        .arg(&small);
    run_ok(&mut c);
    let out = run_ok(
        dentate()
            .args(["memory", "show", "--pipeline", "rag", "--user", "ann", "--dir"])
            .arg(&rag),
    );
    assert!(out.starts_with("rag memory of `ann`: 4 items from 4 messages"), "{out}");
    assert!(
        out.contains("turn      [9 April 2024] Bob: My favourite dish is the spicy lentil soup. (m4)"),
        "{out}"
    );
    // An empty memory is an error, not an empty listing.
    let out = dentate()
        .args(["memory", "show", "--pipeline", "amory", "--user", "nobody", "--dir"])
        .arg(&mem)
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("no messages stored"));
}

#[test]
fn premem_ingest_ask_eval_and_survive_a_kill() {
    let dir = tempfile::tempdir().unwrap();
    let chat = dir.path().join("chat.jsonl");
    long_chat(&chat, 2400);
    let ingest = |mem: &Path| {
        let mut c = dentate();
        c.args(["memory", "ingest", "--pipeline", "premem", "--user", "ann", "--dir"])
            .arg(mem);
        c
    };
    let whole = dir.path().join("whole");
    let out = run_ok(ingest(&whole).arg("--input").arg(&chat));
    assert!(out.contains("premem: processed 2400 messages"), "{out}");
    let reference = pipeline_items(&whole, "premem");
    for kind in ["cluster", "reasoning"] {
        assert!(reference.iter().any(|i| i.0 == kind), "{kind}");
    }
    // Killed mid-ingest (SIGKILL), then resumed without --input.
    let killed = dir.path().join("killed");
    kill_and_resume(&ingest, &killed, &chat);
    assert_eq!(
        pipeline_items(&killed, "premem"),
        reference,
        "a kill loses nothing and changes nothing"
    );
    // `ask` reads fragments and reasoning, dated, with provenance.
    let out = run_ok(
        dentate()
            .args(["memory", "ask", "--pipeline", "premem", "--user", "ann", "--dir"])
            .arg(&whole)
            .arg("Who teaches the cello lessons?"),
    );
    assert!(
        out.contains("Ines") && out.contains("<memories>") && out.contains(" from m"),
        "{out}"
    );
    // The evaluation compares it with RAG at a budget.
    let data = dir.path().join("locomo.json");
    std::fs::write(
        &data,
        r#"[{"sample_id": "f1", "conversation": {"speaker_a": "Ann", "speaker_b": "Bob",
  "session_1_date_time": "9:15 am on 2 March, 2024",
  "session_1": [
    {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a grey cat called Pixel yesterday."},
    {"speaker": "Bob", "dia_id": "D1:2", "text": "I am training for the Berlin marathon."}],
  "session_2_date_time": "9:15 am on 9 March, 2024",
  "session_2": [
    {"speaker": "Ann", "dia_id": "D2:1", "text": "Pixel the cat sleeps on my bed."},
    {"speaker": "Bob", "dia_id": "D2:2", "text": "My Berlin marathon plan has five runs a week."}]},
  "qa": [
    {"question": "When did Ann adopt her cat?", "answer": "1 March 2024", "evidence": ["D1:1"], "category": 2},
    {"question": "How often does Bob run?", "answer": "five runs a week", "evidence": ["D2:2"], "category": 4}]}]"#,
    )
    .unwrap();
    let table = run_ok(
        dentate()
            .args([
                "eval",
                "locomo",
                "--pipeline",
                "rag,premem",
                "--retriever",
                "hybrid",
                "--budget",
                "300",
                "--data",
            ])
            .arg(&data),
    );
    assert!(table.contains("| premem | weighted:0.3 | 300 tokens |"), "{table}");
    assert!(table.contains("| rag | weighted:0.3 | 300 tokens |"), "{table}");
}

#[test]
fn backend_choice_is_reported_and_bad_choices_are_errors() {
    // Auto takes a real GPU when one is listed and never a software
    // adapter: with only Mesa's llvmpipe (as in CI) the CPU runs.
    let out = run_ok(dentate().arg("info").env_remove("DENTATE_BACKEND"));
    let hardware = out
        .lines()
        .any(|l| l.starts_with("GPU adapter ") && !l.contains("used only when forced"));
    let want = if hardware {
        "compute backend:      gpu ("
    } else {
        "compute backend:      cpu"
    };
    assert!(out.contains(want), "{out}");
    // Forcing the GPU takes it.
    let out = run_ok(dentate().args(["--backend", "gpu", "info"]));
    assert!(out.contains("compute backend:      gpu ("), "{out}");
    // DENTATE_GPU_REQUIRE=hardware refuses software adapters even when
    // forced: with only llvmpipe the forced GPU is an error, never a
    // software "pass".
    let out = dentate()
        .args(["--backend", "gpu", "info"])
        .env("DENTATE_GPU_REQUIRE", "hardware")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let err = String::from_utf8_lossy(&out.stderr);
    if hardware {
        assert!(out.status.success(), "{err}");
    } else {
        assert_eq!(out.status.code(), Some(2), "{text}{err}");
        assert!(err.contains("DENTATE_GPU_REQUIRE=hardware refuses software"), "{err}");
        let listed = run_ok(dentate().arg("info").env("DENTATE_GPU_REQUIRE", "hardware"));
        assert!(
            listed.contains("refused: DENTATE_GPU_REQUIRE=hardware") || !listed.contains("GPU adapter 0"),
            "{listed}"
        );
    }
    // An unknown backend, and a forced GPU without any Vulkan driver, are
    // clear errors (exit 2), not a silent CPU.
    let out = dentate().arg("info").env("DENTATE_BACKEND", "tpu").output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("unknown backend `tpu`"));
    let out = dentate()
        .args(["--backend", "gpu", "info"])
        .env("VK_ICD_FILENAMES", "/nonexistent/icd.json")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("no GPU adapter"), "{err}");
    assert!(!err.contains("ERROR"), "driver noise reached the user: {err}");
}

/// Runs `dentate` and returns (exit code, stdout, stderr).
fn run_any(cmd: &mut Command) -> (Option<i32>, String, String) {
    let out = cmd.output().expect("run dentate");
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The `k` rule through the CLI: `--k 4000000000000` on a 50-vector index
/// (it used to abort trying to allocate 128 TB) returns the 50 vectors,
/// for every index kind and with a re-rank factor whose product with k
/// overflows.
#[test]
fn index_search_with_a_huge_k_returns_every_vector() {
    let dir = tempfile::tempdir().unwrap();
    synth(dir.path(), 50, 8);
    let q = dir.path().join("queries.fvecs");
    for (kind, extra) in [
        ("flat", &[][..]),
        ("fastscan", &["--m", "4"][..]),
        ("ivffastscan", &["--nlist", "2", "--m", "4"][..]),
    ] {
        let idx = dir.path().join(format!("{kind}.dnt"));
        run_ok(
            dentate()
                .args(["index", "build", "--index", kind])
                .args(extra)
                .arg("--input")
                .arg(dir.path().join("base.fvecs"))
                .arg("--output")
                .arg(&idx),
        );
        for rerank in [None, Some("18446744073709551615")] {
            let mut cmd = dentate();
            cmd.args(["index", "search", "--k", "4000000000000", "--index"])
                .arg(&idx)
                .arg("--queries")
                .arg(&q);
            if let Some(r) = rerank {
                cmd.args(["--rerank", r, "--nprobe", "18446744073709551615"]);
            }
            let out = run_ok(&mut cmd);
            let lines: Vec<&str> = out.lines().collect();
            assert_eq!(lines.len(), 50, "{kind}: one line per query");
            for line in lines {
                let v: serde_json::Value = serde_json::from_str(line).unwrap();
                assert_eq!(v["ids"].as_array().unwrap().len(), 50, "{kind} {rerank:?}: {line}");
            }
        }
    }
    let (code, _, err) = run_any(
        dentate()
            .args(["index", "search", "--k", "0", "--index"])
            .arg(dir.path().join("flat.dnt"))
            .arg("--queries")
            .arg(&q),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("k must be at least 1"), "{err}");
}

/// Zero or absurd sizes are messages with exit code 2, never a panic (101)
/// or an abort: `data synth` and `quickstart` (`--dim 0` used to panic),
/// index building (`--nlist`, `--m`) and searching (`--nprobe 0`).
#[test]
fn zero_and_huge_sizes_are_errors_not_panics() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("synth");
    let huge = "18446744073709551615";
    for args in [
        &["data", "synth", "--dim", "0"][..],
        &["data", "synth", "--n", "0"],
        &["data", "synth", "--queries", "0"],
        &["data", "synth", "--clusters", "0"],
        &["data", "synth", "--n", huge],
        &["data", "synth", "--n", "4000000000000", "--dim", "1000000"],
        &["data", "synth", "--dim", huge],
        &["data", "synth", "--clusters", huge],
    ] {
        let (code, _, err) = run_any(dentate().args(args).arg("--out").arg(&out));
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(
            err.starts_with("error:") && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
    assert!(!out.exists(), "a refused synth creates nothing");
    for args in [
        &["quickstart", "--dim", "0"][..],
        &["quickstart", "--n", "0"],
        &["quickstart", "--queries", "0"],
        &["quickstart", "--n", huge],
        &["quickstart", "--dim", huge],
    ] {
        let (code, _, err) = run_any(dentate().args(args));
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains("error:") && !err.contains("panicked"), "{args:?}: {err}");
    }
    synth(dir.path(), 300, 8);
    let base = dir.path().join("base.fvecs");
    for args in [
        &["--index", "ivfpq", "--nlist", "0"][..],
        &["--index", "ivfpq", "--m", "0"],
        &["--index", "ivfpq", "--nlist", huge],
        &["--index", "ivfpq", "--m", huge],
        &["--index", "ivffastscan", "--nlist", "0"],
        &["--index", "fastscan", "--m", huge],
    ] {
        let (code, _, err) = run_any(
            dentate()
                .args(["index", "build"])
                .args(args)
                .arg("--input")
                .arg(&base)
                .arg("--output")
                .arg(dir.path().join("x.dnt")),
        );
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(
            err.starts_with("error:") && !err.contains("panicked"),
            "{args:?}: {err}"
        );
    }
    let idx = dir.path().join("i.dnt");
    run_ok(
        dentate()
            .args([
                "index", "build", "--index", "ivfpq", "--nlist", "4", "--m", "4", "--input",
            ])
            .arg(&base)
            .arg("--output")
            .arg(&idx),
    );
    let (code, _, err) = run_any(
        dentate()
            .args(["index", "search", "--nprobe", "0", "--index"])
            .arg(&idx)
            .arg("--queries")
            .arg(dir.path().join("queries.fvecs")),
    );
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("nprobe"), "{err}");
    // Worker threads are bounded (a typo must not spawn millions).
    for (cmd, threads) in [("bench", "0"), ("bench", "100000000"), ("tune", "0"), ("tune", huge)] {
        let (code, _, err) = run_any(
            dentate()
                .args([cmd, "--threads", threads, "--base"])
                .arg(&base)
                .arg("--queries")
                .arg(dir.path().join("queries.fvecs")),
        );
        assert_eq!(code, Some(2), "{cmd} --threads {threads}: {err}");
        assert!(err.contains("--threads"), "{err}");
    }
}

/// `model fetch` checks the pinned SHA-256 of the model files: a folder
/// holding other files (a fixture, no network) is refused with both hashes
/// named, and left as it was.
#[test]
fn model_fetch_refuses_files_with_another_hash() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("minilm");
    std::fs::create_dir_all(&m).unwrap();
    for f in ["config.json", "model.safetensors", "tokenizer.json"] {
        std::fs::write(m.join(f), format!("not the real {f}")).unwrap();
    }
    let (code, _, err) = run_any(dentate().args(["model", "fetch", "minilm", "--dir"]).arg(&m));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("SHA-256"), "{err}");
    let (_, expected) = dentate_embed::MINILM_SHA256[0];
    assert!(err.contains(expected), "the expected hash is named: {err}");
    // The found hash: SHA-256 of "not the real config.json".
    assert!(
        err.contains("6e2c7129c99d5a85928e7b2627e723fea62ad6bb46f114783addef177c8bc4b6"),
        "the found hash is named: {err}"
    );
    assert_eq!(
        std::fs::read(m.join("config.json")).unwrap(),
        b"not the real config.json"
    );
}

/// `dentate … | head`: when the reader closes the pipe early the CLI ends
/// as `cat` does (killed by SIGPIPE, nothing on stderr), not with a panic
/// about failing to print.
#[cfg(unix)]
#[test]
fn a_closed_pipe_ends_the_output_quietly() {
    use std::io::Read;
    use std::os::unix::process::ExitStatusExt;
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    synth(dir.path(), 3000, 16);
    let idx = dir.path().join("f.dnt");
    run_ok(
        dentate()
            .args(["index", "build", "--index", "flat", "--input"])
            .arg(dir.path().join("base.fvecs"))
            .arg("--output")
            .arg(&idx),
    );
    // 3,000 queries × 100 hits: far more than a pipe buffer holds.
    let mut child = dentate()
        .args(["index", "search", "--k", "100", "--index"])
        .arg(&idx)
        .arg("--queries")
        .arg(dir.path().join("base.fvecs"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut first = [0u8; 16];
    child.stdout.take().unwrap().read_exact(&mut first).unwrap();
    // The read end is dropped here, as `head` exits.
    let out = child.wait_with_output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked") && !err.contains("failed printing"), "{err}");
    assert_eq!(
        out.status.signal(),
        Some(13),
        "expected SIGPIPE, got {:?}: {err}",
        out.status
    );
}
