//! `dentate bench`: recall@k, QPS, build time and bytes per vector.

use crate::shared::{Coarse, IndexSpec, build_index, load_truth, parse_list, read_matrix, thread_pool, timed_best};
use clap::Args;
use dentate_core::data::recall_at_k;
use dentate_core::{Index, Init, IvfSearchParams, Precision, StoreFormat};
use std::path::PathBuf;

/// What a search returns.
type Hits = dentate_core::Result<Vec<Vec<dentate_core::Hit>>>;

/// Arguments of `dentate bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Base vectors (.fvecs or .npy, float32).
    #[arg(long)]
    pub base: PathBuf,
    /// Query vectors (.fvecs or .npy, float32).
    #[arg(long)]
    pub queries: PathBuf,
    /// Ground truth (.ivecs or .npy): row numbers of each query's nearest
    /// base vectors. Computed exactly when absent.
    #[arg(long)]
    pub gt: Option<PathBuf>,
    /// Index kind: flat, ivfpq (8-bit codes), fastscan (flat 4-bit
    /// fast-scan) or ivffastscan (IVF + 4-bit fast-scan).
    #[arg(long, default_value = "ivfpq")]
    pub index: String,
    /// Inverted lists (ivfpq, ivffastscan).
    #[arg(long, default_value_t = 1024)]
    pub nlist: usize,
    /// PQ sub-quantizers (ivfpq: bytes per vector; fast-scan: half a byte each).
    #[arg(long, default_value_t = 16)]
    pub m: usize,
    /// Learn an OPQ rotation (ivfpq, fast-scan).
    #[arg(long)]
    pub opq: bool,
    /// Comma-separated nprobe values to sweep (ivfpq, ivffastscan).
    #[arg(long, default_value = "1,4,16,64")]
    pub nprobe: String,
    /// Comma-separated re-rank factors to sweep (0 = off).
    #[arg(long, default_value = "0")]
    pub rerank: String,
    /// Neighbours per query.
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Queries per search call (default: all in one call). `--batch 1`
    /// searches one query at a time, the latency path; a large batch lets
    /// the fast-scan kinds scan each list once for the queries probing it.
    #[arg(long, value_parser = clap::value_parser!(u64).range(1..))]
    pub batch: Option<u64>,
    /// Storage precision of flat vectors / the re-rank store: f32 or f16.
    #[arg(long, default_value = "f16")]
    pub precision: String,
    /// The IVF kinds' re-rank store: f32, f16 or sq8 (8-bit scalar
    /// quantization; half of f16's bytes). Default: --precision.
    #[arg(long)]
    pub rerank_store: Option<String>,
    /// OPQ outer iterations (default: the index kind's, 50 for ivfpq and
    /// 20 for the fast-scan kinds).
    #[arg(long)]
    pub opq_iterations: Option<usize>,
    /// Coarse k-means: training points per list (default 256 for every
    /// kind, as FAISS).
    #[arg(long)]
    pub kmeans_points_per_list: Option<usize>,
    /// Coarse k-means: Lloyd iterations (default: the index kind's, 25 for
    /// ivfpq, 10 for the fast-scan kinds; FAISS's IVF: 10).
    #[arg(long)]
    pub kmeans_iterations: Option<usize>,
    /// Coarse k-means: `true` = spherical (unit centroids), `false` =
    /// inner-product k-means with mean centroids as FAISS's IVF (default:
    /// the index kind's: true for both).
    #[arg(long)]
    pub spherical_coarse: Option<bool>,
    /// Coarse k-means start: `random` (`nlist` sample points, as FAISS) or
    /// `plus-plus` (k-means++) (default: the index kind's: random for the
    /// fast-scan kinds, k-means++ for ivfpq up to 256 lists).
    #[arg(long, value_parser = ["random", "plus-plus"])]
    pub coarse_init: Option<String>,
    /// PQ codes: `true` = of each vector's residual from its list's
    /// centroid, `false` = of the vector itself, as FAISS's IVF fast-scan
    /// for inner product (default: the index kind's).
    #[arg(long)]
    pub residual_codes: Option<bool>,
    /// One JSON object per line instead of a table.
    #[arg(long)]
    pub json: bool,
    /// A name carried in every JSON row (`label`), e.g. who chose the
    /// settings; `dentate bench-report` draws labelled rows as their own
    /// series.
    #[arg(long)]
    pub label: Option<String>,
    /// Search this saved index (`dentate index build --output`) instead of
    /// building one; its build time is then not known (reported as 0).
    #[arg(long)]
    pub load: Option<PathBuf>,
}

/// Runs the benchmark.
pub fn run(a: &BenchArgs) -> Result<(), Box<dyn std::error::Error>> {
    let (pool, threads) = thread_pool(a.threads)?;
    pool.install(|| run_in_pool(a, threads).map_err(|e| e.to_string()))?;
    Ok(())
}

fn run_in_pool(a: &BenchArgs, threads: usize) -> Result<(), Box<dyn std::error::Error>> {
    let base = read_matrix(&a.base)?;
    let queries = read_matrix(&a.queries)?;
    if base.cols != queries.cols {
        return Err(format!("base has dimension {}, queries {}", base.cols, queries.cols).into());
    }
    if a.k == 0 || a.k > base.rows {
        return Err(format!("k = {} must be between 1 and the base size {}", a.k, base.rows).into());
    }
    let precision: Precision = a.precision.parse()?;
    let truth = load_truth(a.gt.as_deref(), &base, &queries, a.k, !a.json)?;
    // A flat fast-scan index has one list: nprobe does not apply.
    let nprobes = if a.index == "fastscan" {
        vec![1]
    } else {
        parse_list(&a.nprobe, "nprobe")?
    };
    let reranks = parse_list(&a.rerank, "rerank")?;
    let spec = IndexSpec {
        kind: a.index.clone(),
        nlist: a.nlist,
        m: a.m,
        opq: a.opq,
        precision,
        opq_iterations: a.opq_iterations,
        rerank_store: reranks.iter().any(|&r| r > 0),
        store: match &a.rerank_store {
            Some(s) => StoreFormat::parse(s)?,
            None => precision.into(),
        },
        coarse: Coarse {
            points_per_list: a.kmeans_points_per_list,
            iterations: a.kmeans_iterations,
            spherical: a.spherical_coarse,
            init: a.coarse_init.as_deref().map(|i| match i {
                "random" => Init::Random,
                _ => Init::PlusPlus,
            }),
            residual: a.residual_codes,
        },
    };
    let (index, build_s) = match &a.load {
        Some(path) => {
            let index = dentate_core::AnyIndex::load(path)?;
            if index.as_index().dim() != base.cols {
                return Err(format!(
                    "{} holds {}-d vectors, the base {}-d",
                    path.display(),
                    index.as_index().dim(),
                    base.cols
                )
                .into());
            }
            (index, 0.0)
        }
        None => build_index(&spec, &base, !a.json)?,
    };
    let bpv = index.as_index().memory_bytes() as f64 / base.rows as f64;
    let backend = dentate_core::default_compute().name();
    // What the rows report: the loaded index's own settings, else the arguments.
    let (kind, nlist, m, opq) = match &index {
        dentate_core::AnyIndex::IvfPq(ivf) if a.load.is_some() => {
            let c = ivf.config();
            let kind = match (c.codes, c.nlist) {
                (dentate_core::PqCodes::Pq8, _) => "ivfpq",
                (dentate_core::PqCodes::FastScan4, 1) => "fastscan",
                (dentate_core::PqCodes::FastScan4, _) => "ivffastscan",
            };
            (kind.to_string(), Some(c.nlist), Some(c.m), c.opq)
        }
        dentate_core::AnyIndex::Flat(_) => ("flat".to_string(), None, None, false),
        _ => (
            a.index.clone(),
            Some(if a.index == "fastscan" { 1 } else { a.nlist }),
            Some(a.m),
            a.opq,
        ),
    };
    // The coarse partition's quality, engine against engine: how unequal
    // the lists are (faiss's imbalance factor: 1 when all are equal) and,
    // per nprobe, the share of the true top-k its probed lists hold.
    let imbalance = match &index {
        dentate_core::AnyIndex::IvfPq(ivf) => {
            let sizes = ivf.list_sizes();
            let total: f64 = sizes.iter().map(|&s| s as f64).sum();
            let squares: f64 = sizes.iter().map(|&s| (s as f64).powi(2)).sum();
            (total > 0.0).then(|| sizes.len() as f64 * squares / (total * total))
        }
        dentate_core::AnyIndex::Flat(_) => None,
    };
    let coverage: std::collections::HashMap<usize, f64> = match &index {
        dentate_core::AnyIndex::IvfPq(ivf) => nprobes
            .iter()
            .copied()
            .zip(ivf.coverage(&queries.data, &truth, a.k, &nprobes)?)
            .collect(),
        dentate_core::AnyIndex::Flat(_) => Default::default(),
    };
    // The queries in calls of `--batch` (all at once without it).
    let per_call = a
        .batch
        .map_or(queries.rows.max(1), |b| usize::try_from(b).unwrap_or(usize::MAX));
    let batched = |search: &dyn Fn(&[f32]) -> Hits| {
        let mut all = Vec::with_capacity(queries.rows);
        for chunk in queries.data.chunks(per_call.saturating_mul(queries.cols.max(1))) {
            all.extend(search(chunk)?);
        }
        Ok(all)
    };
    let mut rows = Vec::new();
    let mut emit = |nprobe: Option<usize>,
                    rerank: Option<usize>,
                    search: &dyn Fn() -> Hits|
     -> Result<(), Box<dyn std::error::Error>> {
        let (secs, res) = timed_best(search)?;
        let recall = recall_at_k(&res, &truth, a.k);
        let cover = nprobe
            .and_then(|p| coverage.get(&p))
            .map(|c| (c * 10000.0).round() / 10000.0);
        let row = serde_json::json!({
            "engine": "dentate",
            "index": kind,
            "nlist": nlist,
            "m": m,
            "opq": opq,
            "nprobe": nprobe,
            "rerank": rerank,
            "k": a.k,
            "threads": threads,
            "recall_at_k": (recall * 10000.0).round() / 10000.0,
            "ivf_coverage": cover,
            "imbalance": imbalance.map(|v| (v * 1000.0).round() / 1000.0),
            "qps": (queries.rows as f64 / secs * 10.0).round() / 10.0,
            "build_s": (build_s * 1000.0).round() / 1000.0,
            "bytes_per_vector": (bpv * 10.0).round() / 10.0,
            "n": base.rows,
            "d": base.cols,
            "nq": queries.rows,
            "precision": a.precision,
            "backend": backend,
            "label": a.label,
            "batch": a.batch,
        });
        if a.json {
            println!("{row}");
        }
        rows.push(row);
        Ok(())
    };
    match &index {
        dentate_core::AnyIndex::Flat(f) => emit(None, None, &|| batched(&|q| f.search(q, a.k)))?,
        dentate_core::AnyIndex::IvfPq(ivf) => {
            for &rerank in &reranks {
                for &nprobe in &nprobes {
                    let params = IvfSearchParams { nprobe, rerank };
                    emit(Some(nprobe), Some(rerank), &|| {
                        batched(&|q| ivf.search_with(q, a.k, params))
                    })?;
                }
            }
        }
    }
    if !a.json {
        println!(
            "{:<11} {:>6} {:>4} {:>4} {:>7} {:>7} {:>10} {:>8} {:>11} {:>9} {:>10}",
            "index", "nlist", "m", "opq", "nprobe", "rerank", "recall@k", "IVF cov", "QPS", "build s", "bytes/vec"
        );
        let dash = |v: &serde_json::Value| {
            if v.is_null() { "-".to_string() } else { v.to_string() }
        };
        for r in &rows {
            println!(
                "{:<11} {:>6} {:>4} {:>4} {:>7} {:>7} {:>10.4} {:>8} {:>11.1} {:>9.3} {:>10.1}",
                r["index"].as_str().unwrap_or(""),
                dash(&r["nlist"]),
                dash(&r["m"]),
                if r["opq"].as_bool().unwrap_or(false) {
                    "yes"
                } else {
                    "no"
                },
                dash(&r["nprobe"]),
                dash(&r["rerank"]),
                r["recall_at_k"].as_f64().unwrap_or(0.0),
                r["ivf_coverage"]
                    .as_f64()
                    .map_or("-".to_string(), |c| format!("{c:.4}")),
                r["qps"].as_f64().unwrap_or(0.0),
                r["build_s"].as_f64().unwrap_or(0.0),
                r["bytes_per_vector"].as_f64().unwrap_or(0.0),
            );
        }
        println!(
            "(n = {}, d = {}, {} queries, k = {}, {threads} threads, backend {backend}{}; IVF cov: share of the true top-k in the probed lists)",
            base.rows,
            base.cols,
            queries.rows,
            a.k,
            imbalance.map_or(String::new(), |v| format!(", list imbalance {v:.3}"))
        );
    }
    Ok(())
}
