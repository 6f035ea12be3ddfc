//! `Index` and its three kinds: `FlatIndex`, `IvfPqIndex`, `FastScanIndex`.

use crate::arrays::{Batch, ids, results, rows, size};
use crate::errors::{core, invalid, param};
use dentate_core::{
    AnyIndex, FlatIndex, Index, IndexKind, IvfPqConfig, IvfPqIndex, IvfSearchParams, Precision, StoreFormat,
};
use pyo3::prelude::*;
use pyo3::types::{PyBytes, PyDict, PyType};
use std::path::PathBuf;
use std::sync::{Mutex, PoisonError, RwLock};

/// A cosine index over non-negative integer ids. Searches take a shared
/// lock and release the GIL, so Python threads searching one index run in
/// parallel; `train`, `add`, `remove` and `compact` take it exclusively.
#[pyclass(subclass, frozen, module = "dentate._native", name = "Index")]
pub struct PyIndex {
    inner: RwLock<AnyIndex>,
    /// Fixed at creation: checked without the lock.
    dim: usize,
    /// The smallest id `add(x)` without ids may hand out next.
    next_auto: Mutex<u64>,
}

impl PyIndex {
    fn wrap(inner: AnyIndex) -> PyIndex {
        let next = inner.as_index().len() as u64;
        PyIndex {
            dim: inner.as_index().dim(),
            inner: RwLock::new(inner),
            next_auto: Mutex::new(next),
        }
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, AnyIndex> {
        // A panic inside the engine is a bug, never input; the index it
        // interrupted is still memory-safe to read.
        self.inner.read().unwrap_or_else(PoisonError::into_inner)
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, AnyIndex> {
        self.inner.write().unwrap_or_else(PoisonError::into_inner)
    }

    /// The vector dimension (fixed at creation).
    pub(crate) fn dim_of(&self) -> usize {
        self.dim
    }

    /// Runs `f` on the index under the shared lock with the GIL released.
    /// The lock is only ever waited for without the GIL: a thread holding
    /// the GIL while it waits would deadlock with one that holds the lock
    /// and waits for the GIL.
    pub(crate) fn reading<T: Send>(&self, py: Python<'_>, f: impl FnOnce(&AnyIndex) -> T + Send) -> T {
        py.detach(|| f(&self.read()))
    }

    /// [`PyIndex::reading`] under the exclusive lock.
    fn writing<T: Send>(&self, py: Python<'_>, f: impl FnOnce(&mut AnyIndex) -> T + Send) -> T {
        py.detach(|| f(&mut self.write()))
    }

    /// An instance of the Python class that matches the index's kind.
    fn into_py_kind(py: Python<'_>, inner: AnyIndex) -> PyResult<Bound<'_, PyIndex>> {
        let kind = inner.as_index().kind();
        let init = PyClassInitializer::from(PyIndex::wrap(inner));
        Ok(match kind {
            IndexKind::Flat => Bound::new(py, init.add_subclass(PyFlatIndex))?.into_super(),
            IndexKind::IvfPq => Bound::new(py, init.add_subclass(PyIvfPqIndex))?.into_super(),
            IndexKind::FastScan => Bound::new(py, init.add_subclass(PyFastScanIndex))?.into_super(),
            IndexKind::Lexical => return Err(invalid("a lexical index is not a vector index")),
        })
    }

    /// Ids for `n` vectors added without ids: the next `n` not live, from
    /// the index's size at load (or 0) up.
    /// Returns them with the counter's value after them, which the caller
    /// stores only once the vectors were added (a refused batch uses no ids).
    fn auto_ids(&self, index: &dyn Index, n: usize) -> PyResult<(Vec<u64>, u64)> {
        let mut next = *self.next_auto.lock().unwrap_or_else(PoisonError::into_inner);
        let mut out = Vec::with_capacity(n.min(1 << 24));
        while out.len() < n {
            if next > i64::MAX as u64 {
                return Err(invalid("no automatic ids left below 2^63"));
            }
            if !index.contains(next) {
                out.push(next);
            }
            next += 1;
        }
        Ok((out, next))
    }
}

/// `dim` must be at least 1.
fn check_dim(dim: i64) -> PyResult<usize> {
    match size(dim, "dim")? {
        0 => Err(param("dim must be at least 1")),
        d => Ok(d),
    }
}

/// The IVF index both IVF constructors build: the Python arguments checked
/// (negative sizes refused), `config(nlist, m)` the kind's base settings,
/// then the options.
#[allow(clippy::too_many_arguments)]
fn ivf_index(
    dim: i64,
    nlist: i64,
    m: i64,
    config: fn(usize, usize) -> IvfPqConfig,
    opq: bool,
    nprobe: Option<i64>,
    rerank: Option<i64>,
    iterations: Option<i64>,
    seed: Option<u64>,
    rerank_store: &str,
) -> PyResult<PyClassInitializer<PyIndex>> {
    let dim = check_dim(dim)?;
    let mut cfg = config(size(nlist, "nlist")?, size(m, "m")?).opq(opq);
    cfg.rerank_store = match rerank_store {
        "none" => None,
        s => Some(StoreFormat::parse(s).map_err(core)?),
    };
    if cfg.rerank_store.is_none() {
        cfg.rerank = 0;
    }
    let opt = |v: Option<i64>, name: &str| v.map(|v| size(v, name)).transpose();
    if let Some(n) = opt(nprobe, "nprobe")? {
        cfg.nprobe = n;
    }
    if let Some(r) = opt(rerank, "rerank")? {
        cfg.rerank = r;
    }
    if let Some(it) = opt(iterations, "iterations")? {
        cfg.kmeans_iterations = it;
        cfg.pq_iterations = it;
    }
    if let Some(s) = seed {
        cfg.seed = s;
    }
    let i = IvfPqIndex::new(dim, cfg).map_err(core)?;
    Ok(PyClassInitializer::from(PyIndex::wrap(AnyIndex::IvfPq(i))))
}

#[pymethods]
impl PyIndex {
    /// Loads an index file written by `save`, the command line or the
    /// browser build, as the class of its kind.
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<Bound<'_, PyIndex>> {
        let inner = py.detach(|| AnyIndex::load(&path)).map_err(core)?;
        PyIndex::into_py_kind(py, inner)
    }

    /// Parses the bytes of an index file (`to_bytes`).
    #[staticmethod]
    fn from_bytes<'py>(py: Python<'py>, data: &[u8]) -> PyResult<Bound<'py, PyIndex>> {
        let inner = py.detach(|| AnyIndex::from_bytes(data)).map_err(core)?;
        PyIndex::into_py_kind(py, inner)
    }

    /// Writes the index to `path` (checksummed, atomically replaced).
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        self.reading(py, |g| g.as_index().save(&path)).map_err(core)
    }

    /// The bytes of the index file `save` writes.
    fn to_bytes<'py>(&self, py: Python<'py>) -> Bound<'py, PyBytes> {
        let b = self.reading(py, |g| g.to_bytes());
        PyBytes::new(py, &b)
    }

    /// Pickling goes through the file format.
    fn __reduce__<'py>(slf: &Bound<'py, Self>) -> PyResult<(Bound<'py, PyAny>, (Bound<'py, PyBytes>,))> {
        let py = slf.py();
        let ctor = py.import("dentate")?.getattr("Index")?.getattr("from_bytes")?;
        Ok((ctor, (slf.get().to_bytes(py),)))
    }

    /// Trains the quantizers on `x` (`n × dim`); an exact index needs no
    /// training and only checks the shape.
    fn train(&self, py: Python<'_>, x: &Bound<'_, PyAny>) -> PyResult<()> {
        let x = rows(x, Some(self.dim), "x")?;
        let data = x.as_slice()?;
        self.writing(py, |g| match g {
            AnyIndex::Flat(_) => Ok(()),
            AnyIndex::IvfPq(i) => i.train(data),
        })
        .map_err(core)
    }

    /// Adds `x` (`n × dim`) under `ids` (non-negative, below 2^63; an id
    /// already present is replaced). Without `ids`, the next `n` ids not
    /// in use are chosen, counting from the size at creation or load; they
    /// are returned. NaN/Inf, zero vectors, duplicate ids or a count
    /// mismatch raise and add nothing.
    #[pyo3(signature = (x, ids=None))]
    fn add<'py>(
        &self,
        py: Python<'py>,
        x: &Bound<'py, PyAny>,
        ids: Option<&Bound<'py, PyAny>>,
    ) -> PyResult<Bound<'py, numpy::PyArray1<i64>>> {
        let x = rows(x, Some(self.dim), "x")?;
        let data = x.as_slice()?;
        let given = ids.map(|i| self::ids(i, "ids")).transpose()?;
        let n = x.rows;
        let ids = self.writing(py, |g| -> PyResult<Vec<u64>> {
            let (ids, next) = match given {
                Some(v) => (v, None),
                None => {
                    let (v, next) = self.auto_ids(g.as_index(), n)?;
                    (v, Some(next))
                }
            };
            g.as_index_mut().add(&ids, data).map_err(core)?;
            if let Some(next) = next {
                *self.next_auto.lock().unwrap_or_else(PoisonError::into_inner) = next;
            }
            Ok(ids)
        })?;
        Ok(numpy::PyArray1::from_vec(
            py,
            ids.into_iter().map(|i| i as i64).collect(),
        ))
    }

    /// The `k` most similar live vectors to each query row of `q`:
    /// `(scores, ids)`, `float32` and `int64` arrays of
    /// `len(q) × min(k, len(index))`, best first (ties by smaller id). A
    /// row with fewer results pads with score NaN and id −1. IVF indexes
    /// probe `nprobe` lists and re-rank `rerank × k` candidates exactly
    /// (defaults: the index's own); an exact index ignores both.
    #[pyo3(signature = (q, k, *, nprobe=None, rerank=None))]
    fn search<'py>(
        &self,
        py: Python<'py>,
        q: &Bound<'py, PyAny>,
        k: i64,
        nprobe: Option<i64>,
        rerank: Option<i64>,
    ) -> PyResult<Batch<'py>> {
        let k = size(k, "k")?;
        let nprobe = nprobe.map(|n| size(n, "nprobe")).transpose()?;
        let rerank = rerank.map(|r| size(r, "rerank")).transpose()?;
        if nprobe == Some(0) {
            return Err(param("nprobe must be at least 1"));
        }
        let q = rows(q, Some(self.dim), "q")?;
        let data = q.as_slice()?;
        let (hits, live) = self
            .reading(py, |g| {
                let hits = match g {
                    AnyIndex::Flat(i) => i.search(data, k),
                    AnyIndex::IvfPq(i) => {
                        let cfg = i.config();
                        let params = IvfSearchParams {
                            nprobe: nprobe.unwrap_or(cfg.nprobe),
                            rerank: rerank.unwrap_or(cfg.rerank),
                        };
                        i.search_with(data, k, params)
                    }
                };
                hits.map(|h| (h, g.as_index().len()))
            })
            .map_err(core)?;
        results(py, &hits, k, live)
    }

    /// Removes `ids` (tombstones until `compact`); returns how many were live.
    fn remove(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<usize> {
        let ids = self::ids(ids, "ids")?;
        Ok(self.writing(py, |g| g.as_index_mut().remove(&ids)))
    }

    /// Drops removed rows and reclaims their memory.
    fn compact(&self, py: Python<'_>) {
        self.writing(py, |g| g.as_index_mut().compact());
    }

    /// Live vectors.
    fn __len__(&self, py: Python<'_>) -> usize {
        self.reading(py, |g| g.as_index().len())
    }

    /// True when `id` is live.
    fn __contains__(&self, py: Python<'_>, id: i64) -> bool {
        u64::try_from(id).is_ok_and(|id| self.reading(py, |g| g.as_index().contains(id)))
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        self.reading(py, |g| {
            let i = g.as_index();
            format!(
                "<dentate {} index: dim {}, {} vectors>",
                i.kind().name(),
                i.dim(),
                i.len()
            )
        })
    }

    /// Vector dimension.
    #[getter]
    fn dim(&self) -> usize {
        self.dim
    }

    /// `"flat"`, `"ivfpq"` or `"fastscan"`.
    #[getter]
    fn kind(&self, py: Python<'_>) -> &'static str {
        self.reading(py, |g| g.as_index().kind().name())
    }

    /// False for an IVF index that still needs `train`.
    #[getter]
    fn is_trained(&self, py: Python<'_>) -> bool {
        self.reading(py, |g| match g {
            AnyIndex::Flat(_) => true,
            AnyIndex::IvfPq(i) => i.is_trained(),
        })
    }

    /// Heap bytes held by the index.
    #[getter]
    fn memory_bytes(&self, py: Python<'_>) -> usize {
        self.reading(py, |g| g.as_index().memory_bytes())
    }

    /// Lists probed by default (IVF indexes; `None` for an exact one).
    #[getter]
    fn get_nprobe(&self, py: Python<'_>) -> Option<usize> {
        self.reading(py, |g| match g {
            AnyIndex::Flat(_) => None,
            AnyIndex::IvfPq(i) => Some(i.config().nprobe),
        })
    }

    #[setter]
    fn set_nprobe(&self, py: Python<'_>, n: i64) -> PyResult<()> {
        let n = size(n, "nprobe")?;
        if n == 0 {
            return Err(param("nprobe must be at least 1"));
        }
        self.writing(py, |g| match g {
            AnyIndex::Flat(_) => Err(param("an exact index has no nprobe")),
            AnyIndex::IvfPq(i) => {
                i.set_nprobe(n);
                Ok(())
            }
        })
    }

    /// Default re-rank factor (IVF indexes; `None` for an exact one).
    #[getter]
    fn get_rerank(&self, py: Python<'_>) -> Option<usize> {
        self.reading(py, |g| match g {
            AnyIndex::Flat(_) => None,
            AnyIndex::IvfPq(i) => Some(i.config().rerank),
        })
    }

    #[setter]
    fn set_rerank(&self, py: Python<'_>, r: i64) -> PyResult<()> {
        let r = size(r, "rerank")?;
        self.writing(py, |g| match g {
            AnyIndex::Flat(_) => Err(param("an exact index has no re-rank factor")),
            AnyIndex::IvfPq(i) => {
                i.set_rerank(r);
                Ok(())
            }
        })
    }

    /// The build settings as a dict (`nlist`, `m`, `opq`, `codes`, …).
    fn config<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let (kind, f16, ivf) = self.reading(py, |g| match g {
            AnyIndex::Flat(i) => ("flat", Some(i.precision() == Precision::F16), None),
            AnyIndex::IvfPq(i) => (i.kind().name(), None, Some(i.config().clone())),
        });
        let d = PyDict::new(py);
        d.set_item("kind", kind)?;
        d.set_item("dim", self.dim)?;
        if let Some(f16) = f16 {
            d.set_item("f16", f16)?;
        }
        if let Some(c) = ivf {
            d.set_item("nlist", c.nlist)?;
            d.set_item("m", c.m)?;
            d.set_item("opq", c.opq)?;
            d.set_item("nprobe", c.nprobe)?;
            d.set_item("rerank", c.rerank)?;
            d.set_item("seed", c.seed)?;
            d.set_item("rerank_store", c.rerank_store.map_or("none", |f| f.name()))?;
        }
        Ok(d)
    }
}

/// Exact cosine search (a blocked SIMD kernel over every vector).
#[pyclass(extends = PyIndex, frozen, module = "dentate._native", name = "FlatIndex")]
pub struct PyFlatIndex;

#[pymethods]
impl PyFlatIndex {
    /// An empty exact index of `dim`-dimensional vectors; `f16=True` stores
    /// half floats (half the memory, scores within ~1e-3).
    #[new]
    #[pyo3(signature = (dim, *, f16=false))]
    fn new(dim: i64, f16: bool) -> PyResult<PyClassInitializer<Self>> {
        let dim = check_dim(dim)?;
        let p = if f16 { Precision::F16 } else { Precision::F32 };
        Ok(
            PyClassInitializer::from(PyIndex::wrap(AnyIndex::Flat(FlatIndex::with_precision(dim, p))))
                .add_subclass(PyFlatIndex),
        )
    }

    /// Loads a file that must hold an exact index.
    #[classmethod]
    fn load<'py>(cls: &Bound<'py, PyType>, path: PathBuf) -> PyResult<Bound<'py, PyIndex>> {
        load_kind(cls, path, &[IndexKind::Flat])
    }
}

/// IVF + optional OPQ + 8-bit PQ, with exact re-ranking.
#[pyclass(extends = PyIndex, frozen, module = "dentate._native", name = "IvfPqIndex")]
pub struct PyIvfPqIndex;

#[pymethods]
impl PyIvfPqIndex {
    /// `nlist` inverted lists, `m` sub-quantizers of 8-bit codes (`m` must
    /// divide `dim`), `opq` to learn a rotation first; `nprobe` and
    /// `rerank` are the search defaults, `iterations` the k-means Lloyd
    /// iterations, `seed` the training seed, `rerank_store` how vectors are
    /// kept for re-ranking (`"f16"`, `"f32"`, `"sq8"`: 8-bit, half of f16's
    /// bytes; `"none"`: no re-ranking). Call `train` before `add`.
    #[new]
    #[pyo3(signature = (dim, nlist, m, *, opq=false, nprobe=None, rerank=None, iterations=None, seed=None, rerank_store="f16"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        dim: i64,
        nlist: i64,
        m: i64,
        opq: bool,
        nprobe: Option<i64>,
        rerank: Option<i64>,
        iterations: Option<i64>,
        seed: Option<u64>,
        rerank_store: &str,
    ) -> PyResult<PyClassInitializer<Self>> {
        let base = ivf_index(
            dim,
            nlist,
            m,
            IvfPqConfig::new,
            opq,
            nprobe,
            rerank,
            iterations,
            seed,
            rerank_store,
        )?;
        Ok(base.add_subclass(PyIvfPqIndex))
    }

    /// Loads a file that must hold an 8-bit IVF-PQ index.
    #[classmethod]
    fn load<'py>(cls: &Bound<'py, PyType>, path: PathBuf) -> PyResult<Bound<'py, PyIndex>> {
        load_kind(cls, path, &[IndexKind::IvfPq])
    }
}

/// 4-bit PQ fast-scan (SIMD table lookups over blocks of 32 codes) over IVF
/// lists, with exact re-ranking; `nlist=1` scans every code.
#[pyclass(extends = PyIndex, frozen, module = "dentate._native", name = "FastScanIndex")]
pub struct PyFastScanIndex;

#[pymethods]
impl PyFastScanIndex {
    /// `nlist` inverted lists (1 = flat fast-scan), `m` sub-quantizers of
    /// 16 centroids (`m` must divide `dim`; `m / 2` bytes per vector), and
    /// the options of `IvfPqIndex`. Call `train` before `add`.
    #[new]
    #[pyo3(signature = (dim, nlist, m, *, opq=false, nprobe=None, rerank=None, iterations=None, seed=None, rerank_store="f16"))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        dim: i64,
        nlist: i64,
        m: i64,
        opq: bool,
        nprobe: Option<i64>,
        rerank: Option<i64>,
        iterations: Option<i64>,
        seed: Option<u64>,
        rerank_store: &str,
    ) -> PyResult<PyClassInitializer<Self>> {
        // nlist 1: one list, every code scanned.
        let config = |nlist, m| match nlist {
            1 => IvfPqConfig::flat_fastscan(m),
            _ => IvfPqConfig::fastscan(nlist, m),
        };
        let base = ivf_index(
            dim,
            nlist,
            m,
            config,
            opq,
            nprobe,
            rerank,
            iterations,
            seed,
            rerank_store,
        )?;
        Ok(base.add_subclass(PyFastScanIndex))
    }

    /// Loads a file that must hold a fast-scan index.
    #[classmethod]
    fn load<'py>(cls: &Bound<'py, PyType>, path: PathBuf) -> PyResult<Bound<'py, PyIndex>> {
        load_kind(cls, path, &[IndexKind::FastScan])
    }
}

fn load_kind<'py>(cls: &Bound<'py, PyType>, path: PathBuf, kinds: &[IndexKind]) -> PyResult<Bound<'py, PyIndex>> {
    let py = cls.py();
    let inner = py.detach(|| AnyIndex::load(&path)).map_err(core)?;
    let found = inner.as_index().kind();
    if !kinds.contains(&found) {
        return Err(core(dentate_core::Error::WrongKind {
            found: found.name().into(),
            expected: kinds[0].name().into(),
        }));
    }
    PyIndex::into_py_kind(py, inner)
}
