//! # dentate-py
//!
//! The extension module `dentate._native` behind the Python package
//! `dentate` (`python/dentate/`): the indexes ([`index`]), BM25 and hybrid
//! search ([`lexical`]), embedders ([`embed`]), fast-scan tuning
//! ([`tune`]) and agent memory ([`memory`]), with numpy arrays in and out
//! ([`arrays`]) and the exceptions of `dentate.errors` ([`errors`]).
//!
//! Every call that does real work releases the GIL; locks are only waited
//! for with the GIL released. No panic crosses into Python: PyO3 turns one
//! into `PanicException`, and the engine returns errors for bad input.
#![warn(missing_docs)]

pub mod arrays;
pub mod embed;
pub mod errors;
pub mod index;
pub mod lexical;
pub mod memory;
pub mod tune;

use pyo3::prelude::*;

/// The address of the float32 block the engine reads for `x`: equal to
/// `x.ctypes.data` when `x` is used without a copy (the tests check this).
#[pyfunction]
fn _input_address(x: &Bound<'_, PyAny>) -> PyResult<usize> {
    Ok(arrays::rows(x, None, "x")?.as_slice()?.as_ptr() as usize)
}

/// The SIMD path the CPU kernels run (`avx512f`, `avx2+fma`, `neon`, `simd128`, `scalar`).
#[pyfunction]
fn simd_path() -> String {
    dentate_core::Isa::active().name().to_string()
}

/// The extension module.
#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add("__version__", env!("CARGO_PKG_VERSION"))?;
    m.add_class::<index::PyIndex>()?;
    m.add_class::<index::PyFlatIndex>()?;
    m.add_class::<index::PyIvfPqIndex>()?;
    m.add_class::<index::PyFastScanIndex>()?;
    m.add_class::<lexical::PyBm25>()?;
    m.add_class::<embed::PyEmbedder>()?;
    m.add_class::<memory::PyMemory>()?;
    m.add_function(wrap_pyfunction!(lexical::hybrid_search, m)?)?;
    m.add_function(wrap_pyfunction!(embed::embed, m)?)?;
    m.add_function(wrap_pyfunction!(tune::tune, m)?)?;
    m.add_function(wrap_pyfunction!(_input_address, m)?)?;
    m.add_function(wrap_pyfunction!(simd_path, m)?)?;
    Ok(())
}
