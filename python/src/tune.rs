//! `tune`: the fastest fast-scan settings that reach a recall target.

use crate::arrays::rows;
use crate::errors::core;
use dentate_core::{TuneConfig, TuneTrial, tune_fastscan};
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
/// here) reaches `target_recall`; the rest of the queries are held aside and
/// only reported (`holdout_recall`). Empty grids are chosen from the data.
/// Returns `{"best": {...} | None, "trials": [...], "best_recall":
/// [(nlist, m, recall)], "split": (tuning, held_aside)}`; build the chosen
/// index with `FastScanIndex(dim, best["nlist"], best["m"],
/// opq=best["opq"], nprobe=best["nprobe"], rerank=best["rerank"])`.
#[pyfunction]
#[pyo3(signature = (base, queries, target_recall, *, k=10, nlists=None, ms=None, nprobes=None, reranks=None, opq=false, holdout=0.5, seed=7))]
#[allow(clippy::too_many_arguments)]
pub fn tune<'py>(
    py: Python<'py>,
    base: &Bound<'py, PyAny>,
    queries: &Bound<'py, PyAny>,
    target_recall: f64,
    k: usize,
    nlists: Option<Vec<usize>>,
    ms: Option<Vec<usize>>,
    nprobes: Option<Vec<usize>>,
    reranks: Option<Vec<usize>>,
    opq: bool,
    holdout: f64,
    seed: u64,
) -> PyResult<Bound<'py, PyDict>> {
    let b = rows(base, None, "base")?;
    let q = rows(queries, Some(b.dim), "queries")?;
    let mut cfg = TuneConfig::new(target_recall);
    cfg.k = k;
    cfg.nlists = nlists.unwrap_or_default();
    cfg.ms = ms.unwrap_or_default();
    cfg.nprobes = nprobes.unwrap_or_default();
    cfg.reranks = reranks.unwrap_or_default();
    cfg.opq = opq;
    cfg.holdout = holdout;
    cfg.seed = seed;
    let (bs, qs, dim) = (b.as_slice()?, q.as_slice()?, b.dim);
    let out = py
        .detach(|| tune_fastscan(bs, dim, qs, &cfg, &mut |_| {}))
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
    Ok(d)
}
