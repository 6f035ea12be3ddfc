//! `dentate tune`: the fastest fast-scan settings that reach a recall
//! target ([`dentate_core::tune_fastscan`]).

use crate::shared::{Res, parse_list, read_matrix, thread_pool};
use clap::Args;
use dentate_core::{Index, IvfPqIndex, TuneConfig, tune_fastscan, tune_fastscan_from_base};
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `dentate tune`.
#[derive(Args, Debug)]
pub struct TuneArgs {
    /// Base vectors (.fvecs or .npy); ids are row numbers.
    #[arg(long)]
    pub base: PathBuf,
    /// Queries (.fvecs or .npy): part tunes, part is held aside to check.
    /// Without them, `--sample` rows of the base serve as queries.
    #[arg(long)]
    pub queries: Option<PathBuf>,
    /// Without `--queries`: how many base rows to draw as queries; they are
    /// left out of every index the search builds, as new queries would be
    /// (`--output` still indexes the whole base).
    #[arg(long, default_value_t = 1000)]
    pub sample: usize,
    /// recall@k to reach.
    #[arg(long, default_value_t = 0.95)]
    pub target_recall: f64,
    /// Neighbours per query.
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// Comma-separated nlist values (default: powers of two from √n/2 to 8√n).
    #[arg(long)]
    pub nlist: Option<String>,
    /// Comma-separated sub-quantizer counts (default: dim/2 and dim/4).
    #[arg(long)]
    pub m: Option<String>,
    /// Comma-separated nprobe values (default: 1, 2, 3, 4, 6, 8, 12, … —
    /// powers of two and 1.5× each — up to nlist).
    #[arg(long)]
    pub nprobe: Option<String>,
    /// Comma-separated re-rank factors (default: 0,2,4,8,16,32).
    #[arg(long)]
    pub rerank: Option<String>,
    /// Learn an OPQ rotation.
    #[arg(long)]
    pub opq: bool,
    /// Fraction of the queries held aside.
    #[arg(long, default_value_t = 0.5)]
    pub holdout: f64,
    /// Seed of the query split and of training.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Worker threads (default: all cores).
    #[arg(long)]
    pub threads: Option<usize>,
    /// Build the chosen index over the base and save it here.
    #[arg(long)]
    pub output: Option<PathBuf>,
    /// One JSON object per timed setting, then the choice, instead of text.
    #[arg(long)]
    pub json: bool,
}

/// Runs the search and prints the choice.
pub fn run(a: &TuneArgs) -> Res<()> {
    let (pool, _) = thread_pool(a.threads)?;
    pool.install(|| run_in_pool(a).map_err(|e| e.to_string()))?;
    Ok(())
}

fn list(s: &Option<String>, what: &str) -> Res<Vec<usize>> {
    s.as_deref().map_or(Ok(Vec::new()), |s| parse_list(s, what))
}

fn run_in_pool(a: &TuneArgs) -> Res<()> {
    let base = read_matrix(&a.base)?;
    let queries = a.queries.as_ref().map(|q| read_matrix(q)).transpose()?;
    if let Some(q) = &queries
        && base.cols != q.cols
    {
        return Err(format!("base has dimension {}, queries {}", base.cols, q.cols).into());
    }
    let cfg = TuneConfig {
        target_recall: a.target_recall,
        k: a.k,
        nlists: list(&a.nlist, "nlist")?,
        ms: list(&a.m, "m")?,
        nprobes: list(&a.nprobe, "nprobe")?,
        reranks: list(&a.rerank, "rerank")?,
        opq: a.opq,
        holdout: a.holdout,
        seed: a.seed,
    };
    let t0 = Instant::now();
    let quiet = a.json;
    let mut progress = |line: &str| {
        if !quiet {
            eprintln!("[{:>6.1} s] {line}", t0.elapsed().as_secs_f64());
        }
    };
    let out = match &queries {
        Some(q) => tune_fastscan(&base.data, base.cols, &q.data, &cfg, &mut progress)?,
        None => tune_fastscan_from_base(&base.data, base.cols, a.sample, &cfg, &mut progress)?,
    };
    let source = if queries.is_some() { "queries" } else { "base rows" };
    let row = |t: &dentate_core::TuneTrial| {
        serde_json::json!({
            "nlist": t.nlist, "m": t.m, "opq": t.opq, "nprobe": t.nprobe, "rerank": t.rerank,
            "recall_at_k": (t.recall * 10000.0).round() / 10000.0,
            "holdout_recall_at_k": (t.holdout_recall * 10000.0).round() / 10000.0,
            "qps": t.qps.round(), "build_s": (t.build_s * 1000.0).round() / 1000.0,
            "bytes_per_vector": (t.bytes_per_vector * 10.0).round() / 10.0,
        })
    };
    if a.json {
        for t in &out.trials {
            println!("{}", row(t));
        }
        println!(
            "{}",
            serde_json::json!({
                "chosen": out.best.as_ref().map(row),
                "holds_out": out.holds_out(),
                "held_aside_miss": out.held_aside_miss.as_ref().map(row),
                "safer": out.safer.iter().map(row).collect::<Vec<_>>(),
                "target_recall": a.target_recall, "k": a.k,
                "threads": rayon::current_num_threads(), "split": [out.split.0, out.split.1],
                "queries_from": source,
            })
        );
    } else {
        println!(
            "{:>6} {:>4} {:>4} {:>7} {:>7} {:>9} {:>9} {:>10} {:>8} {:>9}",
            "nlist", "m", "opq", "nprobe", "rerank", "recall", "held-out", "QPS", "build s", "bytes/vec"
        );
        for t in &out.trials {
            println!(
                "{:>6} {:>4} {:>4} {:>7} {:>7} {:>9.4} {:>9.4} {:>10.0} {:>8.2} {:>9.1}",
                t.nlist,
                t.m,
                if t.opq { "yes" } else { "no" },
                t.nprobe,
                t.rerank,
                t.recall,
                t.holdout_recall,
                t.qps,
                t.build_s,
                t.bytes_per_vector
            );
        }
        for (nlist, m, r) in &out.best_recall {
            if *r < a.target_recall {
                println!("nlist {nlist}, m {m}: best recall {r:.4} < target, no setting timed");
            }
        }
        println!(
            "({} tuning {source}, {} held aside, k = {}, {} threads)",
            out.split.0,
            out.split.1,
            a.k,
            rayon::current_num_threads()
        );
        if let Some(m) = &out.held_aside_miss {
            println!(
                "\nthe fastest on the tuning {source} (nlist {}, m {}, nprobe {}, rerank {}: {:.0} QPS) reached only {:.4} held aside, below the target {}; safer settings of that index:",
                m.nlist, m.m, m.nprobe, m.rerank, m.qps, m.holdout_recall, a.target_recall
            );
            for t in &out.safer {
                println!(
                    "  nprobe {:>4}, rerank {:>2}: recall {:.4} tuning, {:.4} held aside, {:.0} QPS",
                    t.nprobe, t.rerank, t.recall, t.holdout_recall, t.qps
                );
            }
        }
    }
    let Some(best) = &out.best else {
        return Err(format!(
            "no setting reached recall@{} = {} on the tuning queries; widen the grid (--nlist, --m, --rerank)",
            a.k, a.target_recall
        )
        .into());
    };
    if !a.json {
        if out.held_aside_miss.is_some() {
            println!(
                "{}",
                if out.holds_out() {
                    "(the held-aside queries chose this step: its held-aside recall passed a check, it is no longer an unbiased estimate)"
                } else {
                    "WARNING: even the safest setting of the grids misses the target on the held-aside queries; widen the grids (--nprobe, --rerank) or lower the target"
                }
            );
        }
        println!(
            "\nchosen: --index ivffastscan --nlist {} --m {}{} --nprobe {} --rerank {}\n        {:.0} QPS, recall@{} {:.4} on the tuning {source}, {:.4} held aside; build {:.2} s, {:.1} bytes/vector",
            best.nlist,
            best.m,
            if best.opq { " --opq" } else { "" },
            best.nprobe,
            best.rerank,
            best.qps,
            a.k,
            best.recall,
            best.holdout_recall,
            best.build_s,
            best.bytes_per_vector
        );
    }
    if let (Some(path), Some(cfg)) = (&a.output, out.config()) {
        let mut index = IvfPqIndex::new(base.cols, cfg)?;
        index.train(&base.data)?;
        index.add(&(0..base.rows as u64).collect::<Vec<_>>(), &base.data)?;
        index.save(path)?;
        if !a.json {
            println!(
                "saved {} (defaults nprobe {}, rerank {})",
                path.display(),
                best.nprobe,
                best.rerank
            );
        }
    }
    Ok(())
}
