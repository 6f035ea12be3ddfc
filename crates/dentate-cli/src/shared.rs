//! What the command modules share: the error type, argument checks, the
//! worker pool, input files, progress bars, building an index, and the
//! embedder a `--embedder` spec names. Command modules import this one and
//! never each other (`main.rs` alone combines them, as `quickstart` does).

use clap::Args;
use dentate_core::data::{Matrix, read_f32, read_i64};
use dentate_core::{AnyIndex, FlatIndex, Index, Init, IvfPqConfig, IvfPqIndex, Precision, StoreFormat};
use dentate_embed::Embedder;
use indicatif::{ProgressBar, ProgressStyle};
use std::path::Path;
use std::time::{Duration, Instant};

/// The result of a command: any error, printed by `main`.
pub(crate) type Res<T> = Result<T, Box<dyn std::error::Error>>;

/// `--NAME` must be at least 1.
pub(crate) fn positive(v: usize, name: &str) -> Res<()> {
    if v == 0 {
        return Err(format!("--{name} must be at least 1").into());
    }
    Ok(())
}

/// Most worker threads `--threads` accepts.
const MAX_THREADS: usize = 1024;

/// The worker pool of `--threads` (default: all cores), checked: 1 to
/// 1,024 threads, so a typo cannot spawn millions.
pub(crate) fn thread_pool(threads: Option<usize>) -> Res<(rayon::ThreadPool, usize)> {
    let n = threads.unwrap_or_else(rayon::current_num_threads);
    if !(1..=MAX_THREADS).contains(&n) {
        return Err(format!("--threads {n}: use 1 to {MAX_THREADS}").into());
    }
    Ok((rayon::ThreadPoolBuilder::new().num_threads(n).build()?, n))
}

/// A comma-separated list of non-negative integers (`--NAME 1,2,3`).
pub(crate) fn parse_list(s: &str, what: &str) -> Res<Vec<usize>> {
    s.split(',')
        .map(|x| {
            x.trim()
                .parse::<usize>()
                .map_err(|_| format!("--{what}: `{x}` is not a non-negative integer").into())
        })
        .collect()
}

/// The vectors of an `.fvecs`/`.bvecs`/`.npy` file, refusing an empty one.
pub(crate) fn read_matrix(p: &Path) -> Res<Matrix<f32>> {
    let m = read_f32(p)?;
    if m.rows == 0 {
        return Err(format!("{} holds no vectors", p.display()).into());
    }
    Ok(m)
}

/// Ground-truth ids per query: from a file, or exact search.
pub(crate) fn load_truth(
    gt: Option<&Path>,
    base: &Matrix<f32>,
    queries: &Matrix<f32>,
    k: usize,
    progress: bool,
) -> Res<Vec<Vec<u64>>> {
    if let Some(p) = gt {
        let g = read_i64(p)?;
        if g.rows != queries.rows {
            return Err(format!("ground truth has {} rows for {} queries", g.rows, queries.rows).into());
        }
        if g.cols < k {
            return Err(format!("ground truth has {} columns, k = {k}", g.cols).into());
        }
        return Ok(g
            .data
            .chunks_exact(g.cols)
            .map(|r| r[..k].iter().map(|&x| x as u64).collect())
            .collect());
    }
    let pb = spinner(progress, "exact ground truth");
    let mut flat = FlatIndex::new(base.cols);
    let ids: Vec<u64> = (0..base.rows as u64).collect();
    flat.add(&ids, &base.data)?;
    let res = flat.search(&queries.data, k)?;
    pb.finish_and_clear();
    Ok(res.into_iter().map(|v| v.into_iter().map(|h| h.id).collect()).collect())
}

pub(crate) fn spinner(show: bool, msg: &str) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new_spinner();
    pb.set_style(
        ProgressStyle::with_template("{spinner} {msg} [{elapsed}]")
            .unwrap_or_else(|_| ProgressStyle::default_spinner()),
    );
    pb.set_message(msg.to_string());
    pb.enable_steady_tick(Duration::from_millis(120));
    pb
}

pub(crate) fn add_bar(show: bool, n: usize) -> ProgressBar {
    if !show {
        return ProgressBar::hidden();
    }
    let pb = ProgressBar::new(n as u64);
    pb.set_style(
        ProgressStyle::with_template("adding {bar:40} {pos}/{len} [{elapsed}, {per_sec}]")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb
}

/// The index kinds `--index` accepts.
pub(crate) const INDEX_KINDS: &str = "flat, ivfpq, fastscan or ivffastscan";

/// What index to build.
pub(crate) struct IndexSpec {
    pub kind: String,
    pub nlist: usize,
    pub m: usize,
    pub opq: bool,
    pub precision: Precision,
    pub opq_iterations: Option<usize>,
    /// Keep a re-rank store (IVF kinds), in `store`'s format.
    pub rerank_store: bool,
    pub store: StoreFormat,
    pub coarse: Coarse,
}

/// Coarse k-means settings that replace the index kind's defaults (for
/// comparing partitions with another engine's).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Coarse {
    pub points_per_list: Option<usize>,
    pub iterations: Option<usize>,
    pub spherical: Option<bool>,
    /// How the coarse k-means starts.
    pub init: Option<Init>,
    /// PQ codes of residuals (`true`) or of the vectors (`false`).
    pub residual: Option<bool>,
}

/// Builds (trains and fills) an index over `base`, ids = row numbers.
/// Returns it with the build time in seconds.
pub(crate) fn build_index(spec: &IndexSpec, base: &Matrix<f32>, progress: bool) -> Res<(AnyIndex, f64)> {
    let ids: Vec<u64> = (0..base.rows as u64).collect();
    let t0 = Instant::now();
    let mut index = match spec.kind.as_str() {
        "flat" => AnyIndex::Flat(FlatIndex::with_precision(base.cols, spec.precision)),
        "ivfpq" | "fastscan" | "ivffastscan" => {
            let cfg = match spec.kind.as_str() {
                "ivfpq" => IvfPqConfig::new(spec.nlist, spec.m),
                "fastscan" => IvfPqConfig::flat_fastscan(spec.m),
                _ => IvfPqConfig::fastscan(spec.nlist, spec.m),
            };
            let mut cfg = cfg.opq(spec.opq);
            if let Some(it) = spec.opq_iterations {
                cfg.opq_config.iterations = it;
            }
            cfg.rerank_store = spec.rerank_store.then_some(spec.store);
            if let Some(p) = spec.coarse.points_per_list {
                cfg.kmeans_points_per_list = p;
            }
            if let Some(it) = spec.coarse.iterations {
                cfg.kmeans_iterations = it;
            }
            if let Some(s) = spec.coarse.spherical {
                cfg.spherical_coarse = s;
            }
            if let Some(i) = spec.coarse.init {
                cfg.coarse_init = i;
            }
            if let Some(r) = spec.coarse.residual {
                cfg.residual_codes = r;
            }
            let mut ivf = IvfPqIndex::new(base.cols, cfg)?;
            let pb = spinner(progress, "training");
            ivf.train_with(&base.data, &mut |stage| pb.set_message(format!("training: {stage}")))?;
            pb.finish_and_clear();
            AnyIndex::IvfPq(ivf)
        }
        other => return Err(format!("unknown index kind `{other}` ({INDEX_KINDS})").into()),
    };
    let pb = add_bar(progress, base.rows);
    let chunk = 20_000;
    for (i, (idc, vc)) in ids.chunks(chunk).zip(base.data.chunks(chunk * base.cols)).enumerate() {
        index.as_index_mut().add(idc, vc)?;
        pb.set_position(((i + 1) * chunk).min(base.rows) as u64);
    }
    pb.finish_and_clear();
    Ok((index, t0.elapsed().as_secs_f64()))
}

/// Seconds of the fastest of several runs of `f` after a warm-up, and its
/// result ([`dentate_core::tune::time_best`]'s protocol).
pub(crate) fn timed_best<T>(f: &dyn Fn() -> dentate_core::Result<T>) -> Res<(f64, T)> {
    Ok(dentate_core::tune::time_best(&mut || f())?)
}

/// The lines of a text file, one document each; empty lines are refused
/// (line n is the document of vector n).
pub(crate) fn read_lines(p: &Path) -> Res<Vec<String>> {
    let text = std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?;
    let lines: Vec<String> = text.lines().map(str::to_string).collect();
    if let Some(i) = lines.iter().position(|l| l.trim().is_empty()) {
        return Err(format!("{}: line {} is empty (one document per line)", p.display(), i + 1).into());
    }
    if lines.is_empty() {
        return Err(format!("{}: no documents", p.display()).into());
    }
    Ok(lines)
}

/// Which embedder, and how to reach it.
#[derive(Args, Debug, Clone)]
pub struct EmbedderArgs {
    /// hash | hash:DIM | minilm | minilm:DIR | openai:MODEL
    #[arg(long, default_value = "hash")]
    pub embedder: String,
    /// Base URL of an OpenAI-compatible server (openai:MODEL); default
    /// $OPENAI_BASE_URL, else https://api.openai.com/v1.
    #[arg(long)]
    pub base_url: Option<String>,
    /// Environment variable holding the API key (openai:MODEL).
    #[arg(long, default_value = "OPENAI_API_KEY")]
    pub api_key_env: String,
}

/// Builds the embedder a spec names ([`dentate_embed::from_spec`]).
pub fn make_embedder(a: &EmbedderArgs) -> Res<Box<dyn Embedder>> {
    let opts = dentate_embed::SpecOptions {
        base_url: a.base_url.clone(),
        api_key_env: Some(a.api_key_env.clone()),
    };
    Ok(dentate_embed::from_spec(&a.embedder, &opts)?)
}

/// Embeds `texts` in chunks with a progress bar; returns vectors and texts/s.
pub fn embed_all(e: &dyn Embedder, texts: &[&str], label: &str) -> Res<(Vec<f32>, f64)> {
    let pb = ProgressBar::new(texts.len() as u64);
    pb.set_style(
        ProgressStyle::with_template(&format!(
            "{label} {{bar:40}} {{pos}}/{{len}} [{{elapsed}}, {{per_sec}}, eta {{eta}}]"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let t = Instant::now();
    let mut out = Vec::with_capacity(texts.len() * e.dim());
    for chunk in texts.chunks(1024) {
        out.extend(e.embed(chunk)?);
        pb.inc(chunk.len() as u64);
    }
    pb.finish_and_clear();
    Ok((out, texts.len() as f64 / t.elapsed().as_secs_f64().max(1e-9)))
}
