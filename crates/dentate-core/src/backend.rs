//! The default backend: the one installed with [`set_default_compute`]
//! (a GPU backend, for instance), else the CPU's.

use crate::compute::Compute;
use crate::cpu::CpuCompute;
use std::sync::{Arc, OnceLock, RwLock};

static DEFAULT: RwLock<Option<Arc<dyn Compute>>> = RwLock::new(None);

/// The default backend shared by indexes that were not given one: the one
/// installed with [`set_default_compute`], else the CPU backend.
pub fn default_compute() -> Arc<dyn Compute> {
    static CPU: OnceLock<Arc<dyn Compute>> = OnceLock::new();
    if let Some(c) = DEFAULT.read().ok().and_then(|g| g.clone()) {
        return c;
    }
    CPU.get_or_init(|| Arc::new(CpuCompute::default())).clone()
}

/// Installs the backend that [`default_compute`] returns from now on
/// (indexes created earlier keep theirs; `set_compute` changes one). This
/// is how a GPU backend (crate `dentate-gpu`) becomes the default.
pub fn set_default_compute(compute: Arc<dyn Compute>) {
    if let Ok(mut g) = DEFAULT.write() {
        *g = Some(compute);
    }
}
