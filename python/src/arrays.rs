//! numpy in and out: float32 rows borrowed without a copy when the caller
//! already holds a C-contiguous float32 array, ids checked once, results as
//! fresh arrays that own the engine's buffers.

use crate::errors::{core, invalid};
use dentate_core::Hit;
use numpy::{PyArray1, PyArray2, PyArrayDyn, PyArrayMethods, PyReadonlyArrayDyn, PyUntypedArrayMethods};
use pyo3::prelude::*;

/// A batch of `rows × dim` float32 vectors read through numpy.
pub struct Rows<'py> {
    array: PyReadonlyArrayDyn<'py, f32>,
    /// Vectors in the batch.
    pub rows: usize,
    /// Their dimension.
    pub dim: usize,
}

impl Rows<'_> {
    /// The vectors, row-major.
    pub fn as_slice(&self) -> PyResult<&[f32]> {
        self.array
            .as_slice()
            .map_err(|e| invalid(format!("the vectors cannot be read as one block: {e}")))
    }
}

/// Reads `x` (a 2-D `n × dim` array, or a 1-D array as one vector) as
/// float32 rows. A C-contiguous, aligned float32 array is borrowed as it
/// is; any other array-like is converted once by `numpy.require`. A
/// borrowed array is read with the GIL released: another Python thread that
/// writes into it meanwhile makes the batch a mix of old and new values (as
/// with any library that releases the GIL over caller-owned buffers). With
/// `dim`, a batch of another dimension is a `DimensionMismatchError` (a
/// flat buffer would otherwise be re-cut into rows of the index's width).
pub fn rows<'py>(x: &Bound<'py, PyAny>, dim: Option<usize>, what: &str) -> PyResult<Rows<'py>> {
    let py = x.py();
    let fast = x
        .cast::<PyArrayDyn<f32>>()
        .ok()
        .filter(|a| a.is_c_contiguous() && a.is_aligned())
        .cloned();
    let array = match fast {
        Some(a) => a,
        None => {
            let np = py.import("numpy")?;
            let converted = np
                .call_method1("require", (x, np.getattr("float32")?, ("C", "A")))
                .map_err(|e| invalid(format!("{what} must be an array of numbers: {e}")))?;
            converted
                .cast_into::<PyArrayDyn<f32>>()
                .map_err(|_| invalid(format!("{what} could not be converted to float32")))?
        }
    };
    let (rows, cols) = match array.shape() {
        [n, d] => (*n, *d),
        [d] => (1, *d),
        s => {
            return Err(invalid(format!(
                "{what} must be 2-D (n × dim) or 1-D (one vector); got {} dimensions",
                s.len()
            )));
        }
    };
    if let Some(expected) = dim
        && cols != expected
    {
        return Err(core(dentate_core::Error::DimensionMismatch { expected, got: cols }));
    }
    let array = array
        .try_readonly()
        .map_err(|e| invalid(format!("{what} is being written elsewhere: {e}")))?;
    Ok(Rows { array, rows, dim: cols })
}

/// `(scores, ids)` of a batched search, `queries × k`.
pub type Batch<'py> = (Bound<'py, PyArray2<f32>>, Bound<'py, PyArray2<i64>>);

/// `(scores, ids)` of one ranked list.
pub type Ranked<'py> = (Bound<'py, PyArray1<f32>>, Bound<'py, PyArray1<i64>>);

/// Reads ids: a 1-D array or sequence of non-negative integers (any
/// integer dtype, any strides), or one integer. Ids from 2^63 up are
/// refused (results return ids as int64).
pub fn ids(x: &Bound<'_, PyAny>, what: &str) -> PyResult<Vec<u64>> {
    if let Ok(a) = x.cast::<PyArray1<i64>>()
        && let Ok(v) = a.to_vec()
    {
        return signed(v, what);
    }
    let np = x.py().import("numpy")?;
    let a = np
        .call_method1("asarray", (x,))
        .map_err(|e| invalid(format!("{what} must be integers: {e}")))?;
    let a = np.call_method1("atleast_1d", (a,))?;
    let ndim: usize = a.getattr("ndim")?.extract()?;
    if ndim != 1 {
        return Err(invalid(format!("{what} must be 1-D; got {ndim} dimensions")));
    }
    let kind: String = a.getattr("dtype")?.getattr("kind")?.extract()?;
    let v: Vec<u64> = match kind.as_str() {
        "u" => {
            let a = np.call_method1("ascontiguousarray", (a, np.getattr("uint64")?))?;
            let a = a
                .cast_into::<PyArray1<u64>>()
                .map_err(|_| invalid(format!("{what}: not uint64")))?;
            a.to_vec().map_err(|e| invalid(format!("{what}: {e}")))?
        }
        "i" => {
            let a = np.call_method1("ascontiguousarray", (a, np.getattr("int64")?))?;
            let a = a
                .cast_into::<PyArray1<i64>>()
                .map_err(|_| invalid(format!("{what}: not int64")))?;
            return signed(a.to_vec().map_err(|e| invalid(format!("{what}: {e}")))?, what);
        }
        _ => {
            return Err(invalid(format!(
                "{what} must be integers; got an array of dtype kind `{kind}`"
            )));
        }
    };
    if let Some(big) = v.iter().find(|&&i| i > i64::MAX as u64) {
        return Err(invalid(format!("{what}: {big} is 2^63 or more; ids must fit int64")));
    }
    Ok(v)
}

fn signed(v: Vec<i64>, what: &str) -> PyResult<Vec<u64>> {
    v.into_iter()
        .map(|i| u64::try_from(i).map_err(|_| invalid(format!("{what} must be non-negative; got {i}"))))
        .collect()
}

/// The `(scores, ids)` pair of a batched search: `float32` and `int64`
/// arrays of `queries × min(k, live)`, best first; a query with fewer
/// results pads its row with score NaN and id −1.
pub fn results<'py>(py: Python<'py>, hits: &[Vec<Hit>], k: usize, live: usize) -> PyResult<Batch<'py>> {
    let k = dentate_core::index::clamp_k(k, live);
    let slots = hits
        .len()
        .checked_mul(k)
        .ok_or_else(|| invalid(format!("{} queries × {k} results do not fit in memory", hits.len())))?;
    let mut scores = vec![f32::NAN; slots];
    let mut ids = vec![-1i64; slots];
    for (q, row) in hits.iter().enumerate() {
        for (j, h) in row.iter().take(k).enumerate() {
            scores[q * k + j] = h.score;
            ids[q * k + j] = id_out(h.id)?;
        }
    }
    let shape = [hits.len(), k];
    Ok((
        PyArray1::from_vec(py, scores).reshape(shape)?,
        PyArray1::from_vec(py, ids).reshape(shape)?,
    ))
}

/// The `(scores, ids)` pair of one ranked list, as 1-D arrays.
pub fn ranked<'py>(py: Python<'py>, hits: &[Hit]) -> PyResult<Ranked<'py>> {
    let scores: Vec<f32> = hits.iter().map(|h| h.score).collect();
    let ids = hits.iter().map(|h| id_out(h.id)).collect::<PyResult<Vec<i64>>>()?;
    Ok((PyArray1::from_vec(py, scores), PyArray1::from_vec(py, ids)))
}

/// An id as numpy's int64; ids from 2^63 up (the package refuses to add
/// them; only a file written by Rust code or the CLI can hold them) are
/// refused rather than wrapped.
fn id_out(id: u64) -> PyResult<i64> {
    i64::try_from(id).map_err(|_| {
        invalid(format!(
            "id {id} does not fit int64; ids from 2^63 up cannot be returned"
        ))
    })
}

/// A count or size given from Python: negative values are an
/// `InvalidParameterError` naming `name` (not an `OverflowError`).
pub fn size(v: i64, name: &str) -> PyResult<usize> {
    usize::try_from(v).map_err(|_| crate::errors::param(format!("{name} is {v}; it cannot be negative")))
}

/// Float32 rows `n × dim` as a fresh 2-D array (owning `v`).
pub fn matrix(py: Python<'_>, v: Vec<f32>, n: usize, dim: usize) -> PyResult<Bound<'_, PyArray2<f32>>> {
    PyArray1::from_vec(py, v).reshape([n, dim])
}
