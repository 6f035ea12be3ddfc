//! Parameter search for fast-scan indexes: the settings with the highest
//! QPS that reach a recall target.
//!
//! [`tune_fastscan`] computes exact ground truth for the queries, splits
//! them (seeded) into a **tuning** part and a **held-aside** part, builds
//! one 4-bit fast-scan index per (`nlist`, `m`) of the grid, and for each
//! re-rank factor finds the smallest `nprobe` whose recall@k on the tuning
//! part reaches the target; each such setting is timed, and the fastest
//! wins. Each timed setting's recall is also measured on the held-aside
//! part, which plays no part in the choice, so the winner's held-aside
//! recall is an honest estimate of the recall new queries will see.

use crate::error::{Error, Result};
use crate::flat::FlatIndex;
use crate::index::Index;
use crate::ivfpq::{IvfPqConfig, IvfPqIndex, IvfSearchParams};
use crate::rng::Rng;
use crate::topk::Hit;
use crate::vector::{Precision, batch_len};
use web_time::Instant;

/// What [`tune_fastscan`] searches over. Empty lists mean "choose from the
/// data" (see each field).
#[derive(Debug, Clone)]
pub struct TuneConfig {
    /// recall@k the chosen settings must reach on the tuning queries.
    pub target_recall: f64,
    /// Neighbours per query.
    pub k: usize,
    /// Inverted-list counts; empty: the powers of two from `√n/2` to `8√n`
    /// that leave at least 39 vectors per list (and 1 — flat — below 20,000 vectors).
    pub nlists: Vec<usize>,
    /// Sub-quantizer counts; empty: `dim/2` and `dim/4` (sub-vectors of 2
    /// and 4 dimensions), those that divide the dimension.
    pub ms: Vec<usize>,
    /// Lists probed; empty: the powers of two up to `nlist`.
    pub nprobes: Vec<usize>,
    /// Re-rank factors (0 = none); empty: 0, 2, 4, 8, 16, 32.
    pub reranks: Vec<usize>,
    /// Learn an OPQ rotation.
    pub opq: bool,
    /// Fraction of the queries held aside for the final check.
    pub holdout: f64,
    /// Seed of the split and of training.
    pub seed: u64,
}

impl TuneConfig {
    /// Defaults for a target: k = 10, grids chosen from the data, no OPQ,
    /// half the queries held aside.
    pub fn new(target_recall: f64) -> Self {
        TuneConfig {
            target_recall,
            k: 10,
            nlists: Vec::new(),
            ms: Vec::new(),
            nprobes: Vec::new(),
            reranks: Vec::new(),
            opq: false,
            holdout: 0.5,
            seed: 7,
        }
    }
}

/// One measured setting.
#[derive(Debug, Clone, PartialEq)]
pub struct TuneTrial {
    /// Inverted lists.
    pub nlist: usize,
    /// Sub-quantizers (4-bit codes).
    pub m: usize,
    /// OPQ on.
    pub opq: bool,
    /// Lists probed.
    pub nprobe: usize,
    /// Re-rank factor.
    pub rerank: usize,
    /// recall@k on the tuning queries (what the choice looks at).
    pub recall: f64,
    /// recall@k on the held-aside queries (reported, never used to choose).
    pub holdout_recall: f64,
    /// Queries per second on the tuning queries (one batch, [`time_best`]).
    pub qps: f64,
    /// Seconds to train and fill this index.
    pub build_s: f64,
    /// Heap bytes of the index per vector.
    pub bytes_per_vector: f64,
}

/// The result of [`tune_fastscan`].
#[derive(Debug, Clone)]
pub struct TuneOutcome {
    /// The fastest setting that reached the target on the tuning queries.
    pub best: Option<TuneTrial>,
    /// Every setting timed: for each index and re-rank factor, the smallest
    /// nprobe that reached the target.
    pub trials: Vec<TuneTrial>,
    /// For each (nlist, m) built, the best recall it reached at all (to
    /// show how far a grid point fell short).
    pub best_recall: Vec<(usize, usize, f64)>,
    /// Queries used for tuning and held aside.
    pub split: (usize, usize),
}

impl TuneOutcome {
    /// Build settings of the chosen index, with its nprobe and re-rank
    /// factor as defaults.
    pub fn config(&self) -> Option<IvfPqConfig> {
        self.best.as_ref().map(|b| {
            let mut cfg = IvfPqConfig::fastscan(b.nlist, b.m).opq(b.opq);
            cfg.nprobe = b.nprobe;
            cfg.rerank = b.rerank;
            cfg
        })
    }
}

/// Runs `f` once to warm up, then until 1 s or 10 runs have passed, and
/// returns the fastest run's seconds with its result (on a shared, noisy
/// machine the best run is the least disturbed one). The protocol of
/// `dentate bench` and of `benches/faiss_compare.py`.
pub fn time_best<T>(f: &mut dyn FnMut() -> Result<T>) -> Result<(f64, T)> {
    let mut out = f()?;
    let mut best = f64::INFINITY;
    let mut spent = 0.0;
    for _ in 0..10 {
        let t = Instant::now();
        out = f()?;
        let s = t.elapsed().as_secs_f64();
        spent += s;
        best = best.min(s);
        if spent > 1.0 {
            break;
        }
    }
    Ok((best.max(1e-9), out))
}

/// recall@k of `found` against `truth` (ids), averaged over queries.
fn recall(found: &[Vec<Hit>], truth: &[Vec<u64>], k: usize) -> f64 {
    crate::data::recall_at_k(found, truth, k)
}

/// Searches the grid of `cfg` for the fastest 4-bit fast-scan settings that
/// reach `cfg.target_recall` (see the module documentation). `base` and
/// `queries` are row-major `dim`-dimensional vectors; ids are row numbers.
/// `progress` receives a line per step.
pub fn tune_fastscan(
    base: &[f32],
    dim: usize,
    queries: &[f32],
    cfg: &TuneConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<TuneOutcome> {
    let n = batch_len(base, dim)?;
    let nq = batch_len(queries, dim)?;
    if !(cfg.target_recall > 0.0 && cfg.target_recall <= 1.0) {
        return Err(Error::param(
            "target_recall",
            format!("{} is not in (0, 1]", cfg.target_recall),
        ));
    }
    if cfg.k == 0 {
        return Err(Error::ZeroK);
    }
    if n < cfg.k.max(16) {
        return Err(Error::InsufficientTrainingData {
            needed: cfg.k.max(16),
            got: n,
        });
    }
    if nq < 2 {
        return Err(Error::param(
            "queries",
            "need at least 2 (some tune, some are held aside)",
        ));
    }
    if !(cfg.holdout > 0.0 && cfg.holdout < 1.0) {
        return Err(Error::param("holdout", format!("{} is not in (0, 1)", cfg.holdout)));
    }
    let nlists = if cfg.nlists.is_empty() {
        default_nlists(n)
    } else {
        cfg.nlists.clone()
    };
    let ms = if cfg.ms.is_empty() {
        default_ms(dim)
    } else {
        cfg.ms.clone()
    };
    if ms.is_empty() {
        return Err(Error::param(
            "m",
            format!("no sub-quantizer count divides the dimension {dim}"),
        ));
    }
    let reranks = if cfg.reranks.is_empty() {
        vec![0, 2, 4, 8, 16, 32]
    } else {
        cfg.reranks.clone()
    };

    // Ground truth and the split.
    progress("exact ground truth");
    let ids: Vec<u64> = (0..n as u64).collect();
    let mut flat = FlatIndex::with_precision(dim, Precision::F32);
    flat.add(&ids, base)?;
    let truth: Vec<Vec<u64>> = flat
        .search(queries, cfg.k)?
        .into_iter()
        .map(|v| v.into_iter().map(|h| h.id).collect())
        .collect();
    drop(flat);
    let mut order: Vec<usize> = (0..nq).collect();
    let mut rng = Rng::new(cfg.seed);
    for i in (1..nq).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let held = ((nq as f64 * cfg.holdout).round() as usize).clamp(1, nq - 1);
    let (held_rows, tune_rows) = order.split_at(held);
    let pick = |rows: &[usize]| -> (Vec<f32>, Vec<Vec<u64>>) {
        let mut q = Vec::with_capacity(rows.len() * dim);
        let mut t = Vec::with_capacity(rows.len());
        for &r in rows {
            q.extend_from_slice(&queries[r * dim..(r + 1) * dim]);
            t.push(truth[r].clone());
        }
        (q, t)
    };
    let (tq, tt) = pick(tune_rows);
    let (hq, ht) = pick(held_rows);

    let mut trials = Vec::new();
    let mut best_recall = Vec::new();
    let mut best: Option<TuneTrial> = None;
    for &nlist in &nlists {
        for &m in &ms {
            if nlist == 0 || nlist > n || m == 0 || !dim.is_multiple_of(m) {
                continue;
            }
            progress(&format!(
                "building nlist {nlist}, m {m}{}",
                if cfg.opq { ", OPQ" } else { "" }
            ));
            let mut icfg = IvfPqConfig::fastscan(nlist, m).opq(cfg.opq);
            icfg.seed = cfg.seed;
            let t0 = Instant::now();
            let mut index = IvfPqIndex::new(dim, icfg)?;
            index.train(base)?;
            index.add(&ids, base)?;
            let build_s = t0.elapsed().as_secs_f64();
            let bpv = index.memory_bytes() as f64 / n as f64;
            let nprobes: Vec<usize> = if cfg.nprobes.is_empty() {
                std::iter::successors(Some(1usize), |p| Some(p * 2))
                    .take_while(|&p| p < nlist)
                    .chain([nlist])
                    .collect()
            } else {
                let mut v: Vec<usize> = cfg.nprobes.iter().map(|&p| p.clamp(1, nlist)).collect();
                v.sort_unstable();
                v.dedup();
                v
            };
            let mut reached = 0f64;
            for &rerank in &reranks {
                // The smallest nprobe that reaches the target at this factor.
                let mut found = None;
                for &nprobe in &nprobes {
                    let p = IvfSearchParams { nprobe, rerank };
                    let r = recall(&index.search_with(&tq, cfg.k, p)?, &tt, cfg.k);
                    reached = reached.max(r);
                    if r >= cfg.target_recall {
                        found = Some((nprobe, r));
                        break;
                    }
                }
                let Some((nprobe, r)) = found else {
                    continue;
                };
                let p = IvfSearchParams { nprobe, rerank };
                let (secs, _) = time_best(&mut || index.search_with(&tq, cfg.k, p))?;
                let holdout_recall = recall(&index.search_with(&hq, cfg.k, p)?, &ht, cfg.k);
                let trial = TuneTrial {
                    nlist,
                    m,
                    opq: cfg.opq,
                    nprobe,
                    rerank,
                    recall: r,
                    holdout_recall,
                    qps: tune_rows.len() as f64 / secs,
                    build_s,
                    bytes_per_vector: bpv,
                };
                progress(&format!(
                    "  nprobe {nprobe:>4}, rerank {rerank:>2}: recall {r:.4}, {:.0} QPS",
                    trial.qps
                ));
                if best.as_ref().is_none_or(|b| trial.qps > b.qps) {
                    best = Some(trial.clone());
                }
                trials.push(trial);
            }
            best_recall.push((nlist, m, reached));
        }
    }
    Ok(TuneOutcome {
        best,
        trials,
        best_recall,
        split: (tune_rows.len(), held_rows.len()),
    })
}

/// Default list counts for `n` vectors (see [`TuneConfig::nlists`]).
fn default_nlists(n: usize) -> Vec<usize> {
    let s = (n as f64).sqrt();
    let mut v: Vec<usize> = std::iter::successors(Some(16usize), |p| Some(p * 2))
        .take_while(|&p| p as f64 <= 8.0 * s)
        .filter(|&p| p as f64 >= s / 2.0 && n / p >= 39)
        .collect();
    if n < 20_000 {
        v.insert(0, 1);
    }
    if v.is_empty() {
        v.push(1);
    }
    v
}

/// Default sub-quantizer counts for `dim` (see [`TuneConfig::ms`]).
fn default_ms(dim: usize) -> Vec<usize> {
    [2, 4]
        .iter()
        .filter(|&&dsub| dim.is_multiple_of(dsub))
        .map(|&dsub| dim / dsub)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_grids() {
        assert_eq!(default_nlists(62_000), vec![128, 256, 512, 1024]);
        assert_eq!(default_nlists(5_000), vec![1, 64, 128]);
        assert_eq!(default_nlists(100), vec![1]);
        assert_eq!(default_ms(384), vec![192, 96]);
        assert_eq!(default_ms(7), Vec::<usize>::new());
    }
}
