//! `Bm25Index` and `hybrid_search`.

use crate::arrays::{Ranked, ids, ranked, rows, size};
use crate::errors::{core, invalid};
use crate::index::PyIndex;
use dentate_core::{Bm25Params, Fusion, LexicalIndex};
use pyo3::prelude::*;
use std::path::PathBuf;
use std::sync::{PoisonError, RwLock};

/// A BM25 index over texts (Unicode words, lower-cased, English stemming),
/// under caller-chosen ids. Searches share a lock and release the GIL.
#[pyclass(frozen, module = "dentate._native", name = "Bm25Index")]
pub struct PyBm25 {
    inner: RwLock<LexicalIndex>,
}

impl PyBm25 {
    fn reading<T: Send>(&self, py: Python<'_>, f: impl FnOnce(&LexicalIndex) -> T + Send) -> T {
        py.detach(|| f(&self.inner.read().unwrap_or_else(PoisonError::into_inner)))
    }
    fn writing<T: Send>(&self, py: Python<'_>, f: impl FnOnce(&mut LexicalIndex) -> T + Send) -> T {
        py.detach(|| f(&mut self.inner.write().unwrap_or_else(PoisonError::into_inner)))
    }
}

#[pymethods]
impl PyBm25 {
    /// An empty index with BM25's `k1` (term-frequency saturation) and `b`
    /// (length normalisation, 0–1).
    #[new]
    #[pyo3(signature = (*, k1=1.2, b=0.75))]
    fn new(k1: f32, b: f32) -> PyResult<Self> {
        let inner = LexicalIndex::with_params(Bm25Params { k1, b }).map_err(core)?;
        Ok(PyBm25 {
            inner: RwLock::new(inner),
        })
    }

    /// Loads a file written by `save` (or the command line).
    #[staticmethod]
    fn load(py: Python<'_>, path: PathBuf) -> PyResult<Self> {
        let inner = py.detach(|| LexicalIndex::load(&path)).map_err(core)?;
        Ok(PyBm25 {
            inner: RwLock::new(inner),
        })
    }

    /// Writes the index to `path` (checksummed, atomically replaced).
    fn save(&self, py: Python<'_>, path: PathBuf) -> PyResult<()> {
        self.reading(py, |i| i.save(&path)).map_err(core)
    }

    /// Adds `texts` under `ids` (an id already present is replaced).
    fn add(&self, py: Python<'_>, ids: &Bound<'_, PyAny>, texts: Vec<String>) -> PyResult<()> {
        let ids = self::ids(ids, "ids")?;
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        self.writing(py, |i| i.add(&ids, &refs)).map_err(core)
    }

    /// The `k` best texts for `query`: `(scores, ids)` as 1-D arrays.
    fn search<'py>(&self, py: Python<'py>, query: &str, k: i64) -> PyResult<Ranked<'py>> {
        let k = size(k, "k")?;
        let hits = self.reading(py, |i| i.search(query, k)).map_err(core)?;
        ranked(py, &hits)
    }

    /// Removes `ids`; returns how many were present.
    fn remove(&self, py: Python<'_>, ids: &Bound<'_, PyAny>) -> PyResult<usize> {
        let ids = self::ids(ids, "ids")?;
        Ok(self.writing(py, |i| i.remove(&ids)))
    }

    /// Drops removed documents from the postings.
    fn compact(&self, py: Python<'_>) {
        self.writing(py, |i| i.compact());
    }

    /// Live documents.
    fn __len__(&self, py: Python<'_>) -> usize {
        self.reading(py, |i| i.len())
    }

    /// True when `id` is live.
    fn __contains__(&self, py: Python<'_>, id: i64) -> bool {
        u64::try_from(id).is_ok_and(|id| self.reading(py, |i| i.contains(id)))
    }

    /// Distinct terms indexed.
    #[getter]
    fn vocabulary_len(&self, py: Python<'_>) -> usize {
        self.reading(py, |i| i.vocabulary_len())
    }

    /// Heap bytes held by the index.
    #[getter]
    fn memory_bytes(&self, py: Python<'_>) -> usize {
        self.reading(py, |i| i.memory_bytes())
    }

    fn __repr__(&self, py: Python<'_>) -> String {
        format!("<dentate BM25 index: {} documents>", self.__len__(py))
    }
}

/// Dense search of `index` for `vector` and BM25 search of `bm25` for
/// `text`, fused into the best `k`: `(scores, ids)` as 1-D arrays. `fusion`
/// is `"hybrid"` (the engine's default), `"rrf"`, `"rrf:C"` or
/// `"weighted:W"` (W = dense weight in [0, 1]).
#[pyfunction]
#[pyo3(signature = (index, bm25, vector, text, k, *, fusion="hybrid"))]
pub fn hybrid_search<'py>(
    py: Python<'py>,
    index: &Bound<'py, PyIndex>,
    bm25: &Bound<'py, PyBm25>,
    vector: &Bound<'py, PyAny>,
    text: &str,
    k: i64,
    fusion: &str,
) -> PyResult<Ranked<'py>> {
    let k = size(k, "k")?;
    let fusion = Fusion::parse(fusion).map_err(core)?;
    let index = index.get();
    let v = rows(vector, Some(index.dim_of()), "vector")?;
    if v.rows != 1 {
        return Err(invalid(format!("vector must be one vector; got {} rows", v.rows)));
    }
    let data = v.as_slice()?;
    let lexical = bm25.get();
    let hits = index
        .reading(py, |g| {
            let lex = lexical.inner.read().unwrap_or_else(PoisonError::into_inner);
            dentate_core::hybrid_search(g.as_index(), &lex, data, text, k, fusion, None)
        })
        .map_err(core)?;
    ranked(py, &hits)
}
