//! `dentate embed`, `dentate model fetch`, `dentate data rustdocs|pydocs`.

use crate::shared::{EmbedderArgs, Res, embed_all, load_truth, make_embedder};
use clap::{Args, Subcommand};
use dentate_core::data::{Matrix, write_fvecs, write_ivecs};
use dentate_core::rng::Rng;
use dentate_embed::{Embedder, MiniLm, cache_dir, fetch_minilm};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Arguments of `dentate embed`.
#[derive(Args, Debug)]
pub struct EmbedArgs {
    /// Text file, one text per line.
    #[arg(long)]
    pub input: PathBuf,
    /// Output vectors (.fvecs), one per input line.
    #[arg(long)]
    pub output: PathBuf,
    #[command(flatten)]
    pub embedder: EmbedderArgs,
    /// Texts per embedder call (default: up to 1,024). Given, every call is
    /// timed and the per-call latency (p50, p90) is printed too: `--batch 1`
    /// is what a memory search pays per query.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=65_536))]
    pub batch: Option<u32>,
    /// Passes over the input (timing only: the output holds the first
    /// pass). Needs --batch.
    #[arg(long, default_value_t = 1, requires = "batch", value_parser = clap::value_parser!(u32).range(1..=1_000))]
    pub passes: u32,
}

/// `dentate model …`
#[derive(Subcommand, Debug)]
pub enum ModelCommand {
    /// Download a model into the cache (or --dir). Only `minilm` exists.
    Fetch {
        /// Model name: minilm (sentence-transformers/all-MiniLM-L6-v2).
        name: String,
        /// Target folder (default: the cache, see `dentate info`).
        #[arg(long)]
        dir: Option<PathBuf>,
    },
}

pub fn embed(a: &EmbedArgs) -> Res<()> {
    let text = std::fs::read_to_string(&a.input).map_err(|e| format!("{}: {e}", a.input.display()))?;
    let lines: Vec<&str> = text.lines().collect();
    if lines.is_empty() {
        return Err(format!("{} has no lines", a.input.display()).into());
    }
    let e = make_embedder(&a.embedder)?;
    let Some(batch) = a.batch else {
        let (v, rate) = embed_all(e.as_ref(), &lines, "embedding")?;
        write_fvecs(&a.output, &v, e.dim())?;
        eprintln!(
            "embedded {} texts with {} ({}-d) at {rate:.1} sentences/s → {}",
            lines.len(),
            e.name(),
            e.dim(),
            a.output.display()
        );
        return Ok(());
    };
    let mut v = Vec::with_capacity(lines.len() * e.dim());
    let mut ms = Vec::new();
    let start = Instant::now();
    for pass in 0..a.passes {
        for chunk in lines.chunks(batch as usize) {
            let t = Instant::now();
            let rows = e.embed(chunk)?;
            ms.push(t.elapsed().as_secs_f64() * 1e3);
            if pass == 0 {
                v.extend(rows);
            }
        }
    }
    let rate = (lines.len() as f64 * a.passes as f64) / start.elapsed().as_secs_f64().max(1e-9);
    write_fvecs(&a.output, &v, e.dim())?;
    ms.sort_by(f64::total_cmp);
    let pct = |p: f64| ms[((ms.len() - 1) as f64 * p).round() as usize];
    eprintln!(
        "embedded {} texts × {} pass(es) with {} ({}-d) in calls of {batch}: {rate:.1} sentences/s, \
         {:.2} ms p50 / {:.2} ms p90 a call ({} calls, {} threads) → {}",
        lines.len(),
        a.passes,
        e.name(),
        e.dim(),
        pct(0.5),
        pct(0.9),
        ms.len(),
        rayon::current_num_threads(),
        a.output.display()
    );
    Ok(())
}

pub fn model(c: ModelCommand) -> Res<()> {
    match c {
        ModelCommand::Fetch { name, dir } => {
            if name != "minilm" {
                return Err(format!("unknown model `{name}` (available: minilm)").into());
            }
            let dir = dir.unwrap_or_else(MiniLm::default_dir);
            let dir = fetch_minilm(&dir)?;
            // Prove the files load before saying so.
            let m = MiniLm::load(&dir)?;
            eprintln!("all-MiniLM-L6-v2 ({}-d) ready in {}", m.dim(), dir.display());
            Ok(())
        }
    }
}

/// What every real-embedding set takes besides its source folders.
#[derive(Args, Debug)]
pub struct SetArgs {
    /// Output folder (default: <cache>/bench/<source>-<embedder>).
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Base sentences (default: every distinct sentence not drawn as a query).
    #[arg(long)]
    pub n: Option<usize>,
    /// Query sentences (disjoint from the base).
    #[arg(long, default_value_t = 1_000)]
    pub queries: usize,
    /// Seed of the base/query split.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    #[command(flatten)]
    pub embedder: EmbedderArgs,
}

/// Arguments of `dentate data rustdocs`.
#[derive(Args, Debug)]
pub struct RustdocsArgs {
    /// Documentation folders to read, in order (repeatable; default: the
    /// active toolchain's `share/doc/rust/html`).
    #[arg(long = "docs")]
    pub docs: Vec<PathBuf>,
    #[command(flatten)]
    pub set: SetArgs,
}

pub fn rustdocs(a: &RustdocsArgs) -> Res<()> {
    let roots = if a.docs.is_empty() {
        vec![crate::rustdocs::docs_root()?]
    } else {
        a.docs.clone()
    };
    let source = SetSource {
        name: "rustdocs",
        what: "docs",
        extractor: crate::rustdocs::EXTRACTOR_VERSION,
        roots_arg: &a.docs,
        roots,
        collect: |roots, progress| crate::rustdocs::collect(roots, progress),
    };
    build_set(&source, &a.set)
}

/// Arguments of `dentate data pydocs`.
#[derive(Args, Debug)]
pub struct PydocsArgs {
    /// Source folders to read, in order (repeatable; default: the standard
    /// library of the `python3` on the PATH).
    #[arg(long = "src")]
    pub src: Vec<PathBuf>,
    #[command(flatten)]
    pub set: SetArgs,
}

pub fn pydocs(a: &PydocsArgs) -> Res<()> {
    let roots = if a.src.is_empty() {
        vec![crate::pydocs::stdlib_root()?]
    } else {
        a.src.clone()
    };
    let source = SetSource {
        name: "pydocs",
        what: "sources",
        extractor: crate::pydocs::EXTRACTOR_VERSION,
        roots_arg: &a.src,
        roots,
        collect: |roots, progress| crate::pydocs::collect(roots, progress),
    };
    build_set(&source, &a.set)
}

/// Where a real-embedding set's sentences come from.
struct SetSource<'a> {
    /// The set's name (`<cache>/bench/<name>-<embedder>`).
    name: &'a str,
    /// What the roots hold, for messages.
    what: &'a str,
    /// The extractor's version, recorded in `meta.json`.
    extractor: u32,
    /// The roots as given on the command line (recorded; empty: default).
    roots_arg: &'a [PathBuf],
    /// The folders read.
    roots: Vec<PathBuf>,
    /// Distinct sentences under the roots, in a deterministic order.
    collect: Collect,
}

/// Distinct sentences under some roots, with a progress callback (files
/// read, files in all).
type Collect = fn(&[PathBuf], &(dyn Fn(usize, usize) + Sync)) -> Vec<String>;

/// Builds a set in `set.out` (or the cache): a seeded split of the source's
/// distinct sentences into `set.n` base and `set.queries` query sentences, both
/// embedded, with the exact top-100 of every query; an up-to-date set
/// (same `meta.json` inputs) is left alone.
fn build_set(src: &SetSource<'_>, set: &SetArgs) -> Res<()> {
    let SetArgs {
        out,
        n,
        queries,
        seed,
        embedder,
    } = set;
    let (n, queries, seed) = (*n, *queries, *seed);
    let e = make_embedder(embedder)?;
    let out = out
        .clone()
        .unwrap_or_else(|| cache_dir().join("bench").join(format!("{}-{}", src.name, e.name())));
    let meta_path = out.join("meta.json");
    let want = serde_json::json!({"source": src.name, "extractor": src.extractor, "n_requested": n, src.what: src.roots_arg, "queries": queries, "seed": seed, "embedder": e.name(), "dim": e.dim(), "gt_k": 100});
    if let Ok(old) = std::fs::read_to_string(&meta_path)
        && let Ok(old) = serde_json::from_str::<serde_json::Value>(&old)
        && want
            .as_object()
            .is_some_and(|w| w.iter().all(|(k, v)| old.get(k) == Some(v)))
    {
        eprintln!("{} is up to date ({}); delete it to rebuild", out.display(), want);
        println!("{}", out.display());
        return Ok(());
    }
    std::fs::create_dir_all(&out)?;
    if let Some(missing) = src.roots.iter().find(|r| !r.is_dir()) {
        return Err(format!("{} is not a folder", missing.display()).into());
    }
    let pb = ProgressBar::new(0);
    pb.set_style(
        ProgressStyle::with_template(&format!(
            "reading {} {{bar:40}} {{pos}}/{{len}} files [{{elapsed}}]",
            src.what
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let all = (src.collect)(&src.roots, &|i, total| {
        pb.set_length(total as u64);
        pb.set_position(i as u64);
    });
    pb.finish_and_clear();
    let n = n.unwrap_or(all.len().saturating_sub(queries));
    let need = n + queries;
    if all.len() < need || n == 0 || queries == 0 {
        return Err(format!(
            "{} distinct sentences under {}, need {n} base + {queries} queries (both > 0)",
            all.len(),
            src.roots
                .iter()
                .map(|r| r.display().to_string())
                .collect::<Vec<_>>()
                .join(", "),
        )
        .into());
    }
    let mut order = Rng::new(seed).sample_indices(all.len(), need);
    let qidx = order.split_off(n);
    let base: Vec<&str> = order.iter().map(|&i| all[i].as_str()).collect();
    let query_text: Vec<&str> = qidx.iter().map(|&i| all[i].as_str()).collect();
    write_lines(&out.join("sentences.txt"), &base)?;
    write_lines(&out.join("queries.txt"), &query_text)?;
    let (bv, rate) = embed_all(e.as_ref(), &base, "embedding base")?;
    let (qv, _) = embed_all(e.as_ref(), &query_text, "embedding queries")?;
    let d = e.dim();
    write_fvecs(&out.join("base.fvecs"), &bv, d)?;
    write_fvecs(&out.join("queries.fvecs"), &qv, d)?;
    let bm = Matrix {
        data: bv,
        rows: n,
        cols: d,
    };
    let qm = Matrix {
        data: qv,
        rows: queries,
        cols: d,
    };
    let truth = load_truth(None, &bm, &qm, 100.min(n), true)?;
    let flat: Vec<i32> = truth.iter().flat_map(|r| r.iter().map(|&x| x as i32)).collect();
    write_ivecs(&out.join("gt.ivecs"), &flat, 100.min(n))?;
    let mut meta = want;
    meta["n"] = n.into();
    meta["distinct_sentences"] = all.len().into();
    meta[format!("{}_roots", src.what)] = src
        .roots
        .iter()
        .map(|r| r.display().to_string())
        .collect::<Vec<_>>()
        .into();
    meta["sentences_per_s"] = ((rate * 10.0).round() / 10.0).into();
    dentate_core::io::write_atomic(&meta_path, serde_json::to_string_pretty(&meta)?.as_bytes())?;
    eprintln!(
        "{} distinct sentences; wrote {} base + {} queries ({d}-d, {}) at {rate:.1} sentences/s",
        all.len(),
        n,
        queries,
        e.name()
    );
    println!("{}", out.display());
    Ok(())
}

fn write_lines(path: &Path, lines: &[&str]) -> Res<()> {
    let mut s = lines.join("\n");
    s.push('\n');
    dentate_core::io::write_atomic(path, s.as_bytes())?;
    Ok(())
}
