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
//!
//! When the winner's held-aside recall misses the target (its tuning
//! recall was luck of the split), the search does not keep it: it moves
//! the same index to the **next-safer** setting — one step up the nprobe
//! grid or the re-rank grid, whichever of the two reaches the target on
//! the held-aside queries faster (or, when neither does, comes closer) —
//! and repeats until the held-aside recall reaches the target or both
//! grids are exhausted. [`TuneOutcome::held_aside_miss`] keeps the setting
//! it moved away from and [`TuneOutcome::safer`] every step measured.
//! Those steps were chosen by looking at the held-aside queries, so their
//! held-aside recall is a check that passed, no longer an unbiased
//! estimate.
//!
//! [`tune_fastscan_from_base`] serves a user with no queries of their own:
//! it draws the queries from the base and leaves them out of every tuning
//! index, as new queries would be.

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
    /// Lists probed; empty: the powers of two and the midpoints 1.5× each
    /// (1, 2, 3, 4, 6, 8, 12, …) up to `nlist`, so that a safer step costs
    /// at most 1.5× the probes.
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
    /// The fastest setting on the tuning queries, when its held-aside
    /// recall missed the target and the search moved on from it.
    pub held_aside_miss: Option<TuneTrial>,
    /// The next-safer settings measured after such a miss, in order; the
    /// last one chosen is [`TuneOutcome::best`].
    pub safer: Vec<TuneTrial>,
    /// The recall target the search was given.
    pub target_recall: f64,
}

impl TuneOutcome {
    /// Whether the chosen setting's held-aside recall reaches the target
    /// (false when nothing was chosen, or when even the safest setting of
    /// the grids missed it on the held-aside queries).
    pub fn holds_out(&self) -> bool {
        self.best
            .as_ref()
            .is_some_and(|b| b.holdout_recall >= self.target_recall)
    }

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
    let (held_rows, tune_rows) = split_queries(nq, cfg);
    let (held_rows, tune_rows) = (&held_rows[..], &tune_rows[..]);
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

    let mut reranks_up = reranks.clone();
    reranks_up.sort_unstable();
    reranks_up.dedup();
    let ctx = Ctx {
        base,
        dim,
        n,
        ids: &ids,
        cfg,
        tq: &tq,
        tt: &tt,
        hq: &hq,
        ht: &ht,
        tuning: tune_rows.len(),
    };
    let mut trials = Vec::new();
    let mut best_recall = Vec::new();
    let mut best: Option<TuneTrial> = None;
    // The winner's index, kept for the safer steps below instead of being
    // built again (at most this one and the one being measured are alive).
    let mut best_index: Option<IvfPqIndex> = None;
    for &nlist in &nlists {
        for &m in &ms {
            if nlist == 0 || nlist > n || m == 0 || !dim.is_multiple_of(m) {
                continue;
            }
            progress(&format!(
                "building nlist {nlist}, m {m}{}",
                if cfg.opq { ", OPQ" } else { "" }
            ));
            let (index, build_s) = ctx.build(nlist, m)?;
            let nprobes = nprobe_grid(cfg, nlist);
            let mut reached = 0f64;
            let mut won_here = false;
            for &rerank in &reranks {
                // The smallest nprobe that reaches the target at this factor.
                let mut found = None;
                for &nprobe in &nprobes {
                    let p = IvfSearchParams { nprobe, rerank };
                    let r = recall(&index.search_with(&tq, cfg.k, p)?, &tt, cfg.k);
                    reached = reached.max(r);
                    if r >= cfg.target_recall {
                        found = Some(nprobe);
                        break;
                    }
                }
                let Some(nprobe) = found else {
                    continue;
                };
                let trial = ctx.measure(&index, build_s, nprobe, rerank)?;
                progress(&format!(
                    "  nprobe {nprobe:>4}, rerank {rerank:>2}: recall {:.4}, {:.0} QPS",
                    trial.recall, trial.qps
                ));
                if best.as_ref().is_none_or(|b| trial.qps > b.qps) {
                    best = Some(trial.clone());
                    won_here = true;
                }
                trials.push(trial);
            }
            best_recall.push((nlist, m, reached));
            if won_here {
                best_index = Some(index);
            }
        }
    }

    // The winner must hold on the held-aside queries too; if it does not,
    // step the same index to the next-safer setting.
    let mut held_aside_miss = None;
    let mut safer = Vec::new();
    if let (Some(b), Some(index)) = (
        best.clone().filter(|b| b.holdout_recall < cfg.target_recall),
        &best_index,
    ) {
        progress(&format!(
            "held-aside recall {:.4} of nlist {}, m {}, nprobe {}, rerank {} misses the target {}: moving to safer settings",
            b.holdout_recall, b.nlist, b.m, b.nprobe, b.rerank, cfg.target_recall
        ));
        let nprobes = nprobe_grid(cfg, b.nlist);
        let mut cur = b.clone();
        // Each step takes one notch of one grid; bounded by the grids' lengths.
        loop {
            let pi = nprobes.iter().position(|&p| p == cur.nprobe);
            let ri = reranks_up.iter().position(|&r| r == cur.rerank);
            let mut steps = Vec::new();
            if let Some(&p) = pi.and_then(|i| nprobes.get(i + 1)) {
                steps.push((p, cur.rerank));
            }
            if let Some(&r) = ri.and_then(|i| reranks_up.get(i + 1)) {
                steps.push((cur.nprobe, r));
            }
            let mut measured = Vec::new();
            for (nprobe, rerank) in steps {
                let t = ctx.measure(index, b.build_s, nprobe, rerank)?;
                progress(&format!(
                    "  safer nprobe {nprobe:>4}, rerank {rerank:>2}: held-aside recall {:.4}, {:.0} QPS",
                    t.holdout_recall, t.qps
                ));
                safer.push(t.clone());
                measured.push(t);
            }
            let reaching = measured
                .iter()
                .filter(|t| t.holdout_recall >= cfg.target_recall)
                .max_by(|a, b| a.qps.total_cmp(&b.qps));
            let next = reaching.or_else(|| {
                measured
                    .iter()
                    .max_by(|a, b| a.holdout_recall.total_cmp(&b.holdout_recall))
            });
            let Some(next) = next.cloned() else {
                break;
            };
            cur = next;
            if cur.holdout_recall >= cfg.target_recall {
                break;
            }
        }
        held_aside_miss = Some(b);
        best = Some(cur);
    }
    Ok(TuneOutcome {
        best,
        trials,
        best_recall,
        split: (tune_rows.len(), held_rows.len()),
        held_aside_miss,
        safer,
        target_recall: cfg.target_recall,
    })
}

/// Which of `nq` query rows [`tune_fastscan`] holds aside and which it
/// tunes on, for `cfg.holdout` and `cfg.seed`: `(held_aside, tuning)`, each
/// in the order the search uses them. At least one row on each side when
/// `nq >= 2`.
pub fn split_queries(nq: usize, cfg: &TuneConfig) -> (Vec<usize>, Vec<usize>) {
    let mut order: Vec<usize> = (0..nq).collect();
    let mut rng = Rng::new(cfg.seed);
    for i in (1..nq).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let held = ((nq as f64 * cfg.holdout).round() as usize)
        .max(1)
        .min(nq.saturating_sub(1));
    let tuning = order.split_off(held);
    (order, tuning)
}

/// Like [`tune_fastscan`] for a user without queries of their own: draws
/// `sample` rows of `base` (seeded by `cfg.seed`) as the queries and leaves
/// them out of every index the search builds, so that they are as new to
/// the index as real queries. Ids in the outcome's settings do not matter;
/// build the chosen index over the whole base
/// ([`TuneOutcome::config`]). `sample` must be at least 2 and at most half
/// the base.
pub fn tune_fastscan_from_base(
    base: &[f32],
    dim: usize,
    sample: usize,
    cfg: &TuneConfig,
    progress: &mut dyn FnMut(&str),
) -> Result<TuneOutcome> {
    let n = batch_len(base, dim)?;
    if sample < 2 || sample > n / 2 {
        return Err(Error::param(
            "sample",
            format!("{sample} queries from {n} rows: need 2 to half the base"),
        ));
    }
    let mut order: Vec<usize> = (0..n).collect();
    let mut rng = Rng::new(cfg.seed ^ 0x005e_ed0f_ba5e);
    for i in (1..n).rev() {
        order.swap(i, rng.below(i + 1));
    }
    let mut drawn = vec![false; n];
    for &r in &order[..sample] {
        drawn[r] = true;
    }
    let mut rest = Vec::with_capacity((n - sample) * dim);
    let mut queries = Vec::with_capacity(sample * dim);
    for (r, row) in base.chunks_exact(dim).enumerate() {
        if drawn[r] {
            queries.extend_from_slice(row);
        } else {
            rest.extend_from_slice(row);
        }
    }
    progress(&format!(
        "{sample} queries drawn from the base and left out of the tuning indexes"
    ));
    tune_fastscan(&rest, dim, &queries, cfg, progress)
}

/// What every build and measurement of one search shares.
struct Ctx<'a> {
    base: &'a [f32],
    dim: usize,
    n: usize,
    ids: &'a [u64],
    cfg: &'a TuneConfig,
    tq: &'a [f32],
    tt: &'a [Vec<u64>],
    hq: &'a [f32],
    ht: &'a [Vec<u64>],
    tuning: usize,
}

impl Ctx<'_> {
    /// Trains and fills one index of the grid (the same seed gives the same
    /// index again); returns it with its build seconds.
    fn build(&self, nlist: usize, m: usize) -> Result<(IvfPqIndex, f64)> {
        let mut icfg = IvfPqConfig::fastscan(nlist, m).opq(self.cfg.opq);
        icfg.seed = self.cfg.seed;
        let t0 = Instant::now();
        let mut index = IvfPqIndex::new(self.dim, icfg)?;
        index.train(self.base)?;
        index.add(self.ids, self.base)?;
        Ok((index, t0.elapsed().as_secs_f64()))
    }

    /// Recall on both query parts and the tuning part's QPS at one setting.
    fn measure(&self, index: &IvfPqIndex, build_s: f64, nprobe: usize, rerank: usize) -> Result<TuneTrial> {
        let k = self.cfg.k;
        let p = IvfSearchParams { nprobe, rerank };
        let (secs, found) = time_best(&mut || index.search_with(self.tq, k, p))?;
        let c = index.config();
        Ok(TuneTrial {
            nlist: c.nlist,
            m: c.m,
            opq: self.cfg.opq,
            nprobe,
            rerank,
            recall: recall(&found, self.tt, k),
            holdout_recall: recall(&index.search_with(self.hq, k, p)?, self.ht, k),
            qps: self.tuning as f64 / secs,
            build_s,
            bytes_per_vector: index.memory_bytes() as f64 / self.n as f64,
        })
    }
}

/// The nprobe values tried for `nlist` lists, ascending.
fn nprobe_grid(cfg: &TuneConfig, nlist: usize) -> Vec<usize> {
    if cfg.nprobes.is_empty() {
        let mut v: Vec<usize> = std::iter::successors(Some(1usize), |p| Some(p * 2))
            .take_while(|&p| p < nlist)
            .flat_map(|p| [p, p + p / 2])
            .filter(|&p| p < nlist)
            .chain([nlist])
            .collect();
        v.dedup();
        v
    } else {
        let mut v: Vec<usize> = cfg.nprobes.iter().map(|&p| p.clamp(1, nlist)).collect();
        v.sort_unstable();
        v.dedup();
        v
    }
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
        let cfg = TuneConfig::new(0.9);
        assert_eq!(nprobe_grid(&cfg, 64), vec![1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64]);
        assert_eq!(nprobe_grid(&cfg, 40), vec![1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 40]);
        assert_eq!(nprobe_grid(&cfg, 1), vec![1]);
        let mut given = cfg.clone();
        given.nprobes = vec![64, 0, 8, 8, 500];
        assert_eq!(nprobe_grid(&given, 100), vec![1, 8, 64, 100]);
    }
}
