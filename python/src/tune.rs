//! `tune`: the fastest fast-scan settings that reach a recall target.

use crate::arrays::rows;
use crate::errors::core;
use dentate_core::{TuneConfig, TuneTrial, tune_fastscan, tune_fastscan_from_base};
use pyo3::prelude::*;
use pyo3::types::{PyDict, PyList};

fn trial<'py>(py: Python<'py>, t: &TuneTrial) -> PyResult<Bound<'py, PyDict>> {
    let d = PyDict::new(py);
    d.set_item("nlist", t.nlist)?;
    d.set_item("m", t.m)?;
    d.set_item("opq", t.opq)?;
    d.set_item("nprobe", t.nprobe)?;
    d.set_item("rerank", t.rerank)?;
    d.set_item("recall", t.recall)?;
    d.set_item("holdout_recall", t.holdout_recall)?;
    d.set_item("qps", t.qps)?;
    d.set_item("build_s", t.build_s)?;
    d.set_item("bytes_per_vector", t.bytes_per_vector)?;
    Ok(d)
}

/// Builds fast-scan indexes of `base` over a grid and returns the fastest
/// setting whose recall@k on part of `queries` (exact neighbours computed
/// here) reaches `target_recall`; the rest of the queries are held aside
/// (`holdout_recall`). When the winner misses the target on the held-aside
/// queries, the same index steps to safer settings (`held_aside_miss`,
/// `safer`; `holds_out` says whether the final choice reaches it there).
/// `queries=None` draws `sample` base rows as queries and leaves them out
/// of the tuning indexes. Empty grids are chosen from the data.
/// Returns `{"best": {...} | None, "trials": [...], "best_recall":
/// [(nlist, m, recall)], "split": (tuning, held_aside), "held_aside_miss":
/// {...} | None, "safer": [...], "holds_out": bool}`; build the chosen
/// index with `FastScanIndex(dim, best["nlist"], best["m"],
/// opq=best["opq"], nprobe=best["nprobe"], rerank=best["rerank"])`.
#[pyfunction]
#[pyo3(signature = (base, queries, target_recall, *, k=10, nlists=None, ms=None, nprobes=None, reranks=None, opq=false, holdout=0.5, seed=7, sample=1000))]
#[allow(clippy::too_many_arguments)]
pub fn tune<'py>(
    py: Python<'py>,
    base: &Bound<'py, PyAny>,
    queries: Option<&Bound<'py, PyAny>>,
    target_recall: f64,
    k: usize,
    nlists: Option<Vec<usize>>,
    ms: Option<Vec<usize>>,
    nprobes: Option<Vec<usize>>,
    reranks: Option<Vec<usize>>,
    opq: bool,
    holdout: f64,
    seed: u64,
    sample: usize,
) -> PyResult<Bound<'py, PyDict>> {
    let b = rows(base, None, "base")?;
    let q = queries.map(|q| rows(q, Some(b.dim), "queries")).transpose()?;
    let mut cfg = TuneConfig::new(target_recall);
    cfg.k = k;
    cfg.nlists = nlists.unwrap_or_default();
    cfg.ms = ms.unwrap_or_default();
    cfg.nprobes = nprobes.unwrap_or_default();
    cfg.reranks = reranks.unwrap_or_default();
    cfg.opq = opq;
    cfg.holdout = holdout;
    cfg.seed = seed;
    let (bs, dim) = (b.as_slice()?, b.dim);
    let qs = q.as_ref().map(|q| q.as_slice()).transpose()?;
    let out = py
        .detach(|| match qs {
            Some(qs) => tune_fastscan(bs, dim, qs, &cfg, &mut |_| {}),
            None => tune_fastscan_from_base(bs, dim, sample, &cfg, &mut |_| {}),
        })
        .map_err(core)?;
    let d = PyDict::new(py);
    d.set_item("best", out.best.as_ref().map(|t| trial(py, t)).transpose()?)?;
    let trials = PyList::empty(py);
    for t in &out.trials {
        trials.append(trial(py, t)?)?;
    }
    d.set_item("trials", trials)?;
    d.set_item("best_recall", out.best_recall.clone())?;
    d.set_item("split", out.split)?;
    d.set_item(
        "held_aside_miss",
        out.held_aside_miss.as_ref().map(|t| trial(py, t)).transpose()?,
    )?;
    let safer = PyList::empty(py);
    for t in &out.safer {
        safer.append(trial(py, t)?)?;
    }
    d.set_item("safer", safer)?;
    d.set_item("holds_out", out.holds_out())?;
    Ok(d)
}
