//! WebGPU (feature `webgpu`): the wgpu backend of `dentate-gpu` through
//! `navigator.gpu`. WebGPU reads results back asynchronously, so searches
//! on it return promises (`VectorIndex.searchGpu`); the CPU path stays
//! synchronous.

use crate::convert::err;
use dentate_core::{AsyncCompute, Hit, IvfPlan, IvfPqIndex, IvfSearchParams, PqCodes};
use dentate_gpu::{GpuCompute, GpuOptions};
use std::rc::Rc;
use wasm_bindgen::prelude::*;

/// A WebGPU device running Dentate's compute shaders.
#[wasm_bindgen]
#[derive(Debug, Clone)]
pub struct WebGpu {
    pub(crate) inner: Rc<GpuCompute>,
}

#[wasm_bindgen]
impl WebGpu {
    /// Opens the adapter `navigator.gpu` offers (the browser chooses it; a
    /// software one such as SwiftShader included). Rejects with a
    /// `DentateError` when WebGPU is absent or disabled; callers then stay
    /// on the CPU path.
    pub async fn open() -> Result<WebGpu, JsValue> {
        let g = GpuCompute::open(GpuOptions {
            allow_software: true,
            ..GpuOptions::default()
        })
        .await
        .map_err(err)?;
        Ok(WebGpu { inner: Rc::new(g) })
    }

    /// What runs: `gpu (<adapter>, BrowserWebGpu)`.
    #[wasm_bindgen(getter)]
    pub fn name(&self) -> String {
        let a = self.inner.adapter();
        format!("gpu ({}, {})", a.name, a.backend)
    }

    /// The adapter's name.
    #[wasm_bindgen(getter)]
    pub fn adapter(&self) -> String {
        self.inner.adapter().name.clone()
    }

    /// Whether the adapter has `shader-f16` (SwiftShader has not).
    #[wasm_bindgen(getter, js_name = shaderF16)]
    pub fn shader_f16(&self) -> bool {
        self.inner.adapter().shader_f16
    }

    /// Calls that ran on the CPU instead (not covered by the kernels, or
    /// failed on the device).
    #[wasm_bindgen(getter)]
    pub fn fallbacks(&self) -> f64 {
        self.inner.fallbacks() as f64
    }
}

/// An IVF-PQ search with the scan and the re-ranking on the device: the
/// core's own stages ([`IvfPqIndex::plan`], [`IvfPqIndex::parts`],
/// [`IvfPlan::finish`]) around the asynchronous kernels, so the result is
/// that of `searchWith` on the CPU.
pub(crate) async fn ivf_search(
    gpu: &WebGpu,
    index: &IvfPqIndex,
    queries: &[f32],
    k: usize,
    nprobe: usize,
    rerank: usize,
) -> dentate_core::Result<Vec<Vec<Hit>>> {
    let plan = index.plan(queries, k, IvfSearchParams { nprobe, rerank })?;
    let parts = index.parts()?;
    let g = &gpu.inner;
    let cands = match parts.codes {
        PqCodes::Pq8 => g.adc_top_k_async(&parts, &plan).await,
        PqCodes::FastScan4 => g.fastscan_top_k_async(&parts, &plan).await?,
    };
    // `plan.k` is `k` clamped to the live count (the engine's `k` rule).
    let out = match (parts.store, plan.rerank) {
        (Some(store), true) => {
            g.rerank_async(&plan.queries, store, parts.ids, &IvfPlan::rows(&cands), plan.k)
                .await
        }
        _ => cands,
    };
    Ok(IvfPlan::finish(out, plan.k))
}
