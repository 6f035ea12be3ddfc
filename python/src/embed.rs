//! `Embedder` and `embed`: text → float32 rows.

use crate::arrays::matrix;
use crate::errors::embed as embed_err;
use dentate_embed::{Embedder, SpecOptions, from_spec};
use numpy::PyArray2;
use pyo3::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};

/// An embedder named by a spec: `"hash"` / `"hash:DIM"` (the zero-download
/// default), `"minilm"` / `"minilm:DIR"` (all-MiniLM-L6-v2 from the cache
/// `dentate model fetch minilm` fills, or a folder), or `"openai:MODEL"`
/// (any OpenAI-compatible `/v1/embeddings` endpoint at `base_url`, key in
/// the environment variable `api_key_env`). Calls release the GIL.
#[pyclass(frozen, module = "dentate._native", name = "Embedder")]
pub struct PyEmbedder {
    pub(crate) inner: Arc<dyn Embedder>,
}

/// Embedders built by `embed(texts, spec)`, kept per spec (a model loads
/// once per process).
static CACHE: Mutex<Option<HashMap<String, Arc<dyn Embedder>>>> = Mutex::new(None);

fn build(
    py: Python<'_>,
    spec: &str,
    base_url: Option<String>,
    api_key_env: Option<String>,
) -> PyResult<Arc<dyn Embedder>> {
    let opts = SpecOptions { base_url, api_key_env };
    py.detach(|| from_spec(spec, &opts)).map(Arc::from).map_err(embed_err)
}

fn run<'py>(py: Python<'py>, e: &Arc<dyn Embedder>, texts: Vec<String>) -> PyResult<Bound<'py, PyArray2<f32>>> {
    let dim = e.dim();
    let n = texts.len();
    let v = py
        .detach(|| {
            let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
            e.embed(&refs)
        })
        .map_err(embed_err)?;
    matrix(py, v, n, dim)
}

#[pymethods]
impl PyEmbedder {
    /// Builds (loads, or connects to) the embedder `spec` names.
    #[new]
    #[pyo3(signature = (spec="hash", *, base_url=None, api_key_env=None))]
    fn new(py: Python<'_>, spec: &str, base_url: Option<String>, api_key_env: Option<String>) -> PyResult<Self> {
        Ok(PyEmbedder {
            inner: build(py, spec, base_url, api_key_env)?,
        })
    }

    /// `len(texts) × dim` float32 rows, L2-normalised.
    fn __call__<'py>(&self, py: Python<'py>, texts: Vec<String>) -> PyResult<Bound<'py, PyArray2<f32>>> {
        run(py, &self.inner, texts)
    }

    /// The same as calling the embedder.
    fn embed<'py>(&self, py: Python<'py>, texts: Vec<String>) -> PyResult<Bound<'py, PyArray2<f32>>> {
        run(py, &self.inner, texts)
    }

    /// The embedder's name (stored with memories: a memory refuses another).
    #[getter]
    fn name(&self) -> String {
        self.inner.name()
    }

    /// Output dimension.
    #[getter]
    fn dim(&self) -> usize {
        self.inner.dim()
    }

    fn __repr__(&self) -> String {
        format!(
            "<dentate embedder {} ({} dimensions)>",
            self.inner.name(),
            self.inner.dim()
        )
    }
}

/// Embeds `texts` with the embedder `spec` names (built once per process
/// and spec): `len(texts) × dim` float32 rows.
#[pyfunction]
#[pyo3(signature = (texts, spec="hash"))]
pub fn embed<'py>(py: Python<'py>, texts: Vec<String>, spec: &str) -> PyResult<Bound<'py, PyArray2<f32>>> {
    // Looked up and built under the cache's lock, with the GIL released: a
    // model loads once even when threads ask for it together.
    let e = py
        .detach(|| {
            let mut cache = CACHE.lock().unwrap_or_else(PoisonError::into_inner);
            let cache = cache.get_or_insert_with(HashMap::new);
            if let Some(e) = cache.get(spec) {
                return Ok(e.clone());
            }
            let e: Arc<dyn Embedder> = Arc::from(from_spec(spec, &SpecOptions::default())?);
            cache.insert(spec.to_string(), e.clone());
            Ok(e)
        })
        .map_err(embed_err)?;
    run(py, &e, texts)
}
