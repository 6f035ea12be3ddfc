//! The WebGPU path (feature `webgpu`) in headless Chromium started with
//! `--enable-unsafe-webgpu` (SwiftShader, no f16): `scripts/test.sh` runs
//! it with `wasm/tests/webdriver-webgpu.json`. Every search on the device
//! must return the CPU's ids, and nothing may fall back to the CPU.
#![cfg(all(target_arch = "wasm32", feature = "webgpu"))]

use dentate_core::data::{SynthConfig, clustered};
use dentate_wasm::*;
use js_sys::Uint32Array;
use wasm_bindgen::JsValue;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

fn synth(n: usize, dim: usize, seed: u64) -> Vec<f32> {
    clustered(&SynthConfig {
        n,
        dim,
        clusters: 20,
        spread: 0.8,
        seed,
    })
    .expect("valid synthetic data")
}

fn ids(n: u32) -> JsValue {
    Uint32Array::from(&(0..n).collect::<Vec<u32>>()[..]).into()
}

/// Same ids, scores within 1e-4, query by query.
fn assert_same(gpu: &SearchResults, cpu: &SearchResults) {
    assert_eq!(gpu.counts(), cpu.counts());
    let (gs, cs) = (gpu.scores(), cpu.scores());
    for (a, b) in gs.iter().zip(&cs) {
        assert!(a.is_nan() && b.is_nan() || (a - b).abs() <= 1e-4, "score {a} vs {b}");
    }
    let (gi, ci) = (gpu.ids(), cpu.ids());
    let swapped = gi
        .iter()
        .zip(&ci)
        .enumerate()
        .filter(|(j, (a, b))| a != b && (gs[*j] - cs[*j]).abs() > 1e-4)
        .count();
    assert_eq!(swapped, 0, "ids differ beyond near-ties");
}

#[wasm_bindgen_test]
async fn webgpu_searches_give_the_cpu_results() {
    let gpu = WebGpu::open()
        .await
        .expect("navigator.gpu gives an adapter (start Chromium with --enable-unsafe-webgpu)");
    assert!(gpu.name().contains("BrowserWebGpu"), "{}", gpu.name());
    let dim = 64;
    let base = synth(3_000, dim, 1);
    let queries = synth(20, dim, 2);

    let mut exact = VectorIndex::exact(dim, JsValue::UNDEFINED).unwrap();
    exact.add(ids(3_000), &base).unwrap();
    let cpu = exact.search(&queries, 10).unwrap();
    let dev = exact.search_gpu(&gpu, queries.clone(), 10).await.unwrap();
    assert_same(&dev, &cpu);

    // Appended rows reach the device copy.
    exact
        .add(Uint32Array::from(&[5_000u32, 5_001][..]).into(), &queries[..2 * dim])
        .unwrap();
    let dev = exact.search_gpu(&gpu, queries[..2 * dim].to_vec(), 1).await.unwrap();
    assert_eq!(dev.ids(), vec![5_000, 5_001]);

    let opts = js_sys::Object::new();
    js_sys::Reflect::set(&opts, &"iterations".into(), &8.into()).unwrap();
    js_sys::Reflect::set(&opts, &"nprobe".into(), &8.into()).unwrap();
    let mut ivf = VectorIndex::ivf_pq(dim, 32, 16, opts.into()).unwrap();
    ivf.train(&base).unwrap();
    ivf.add(ids(3_000), &base).unwrap();
    let cpu = ivf.search(&queries, 10).unwrap();
    let dev = ivf.search_gpu(&gpu, queries.clone(), 10).await.unwrap();
    assert_same(&dev, &cpu);

    // 4-bit fast-scan: the host's u8 tables, the same blocks on the device;
    // with and without re-ranking, and after appends fill partial blocks.
    let mut fs = VectorIndex::fast_scan(dim, 16, 32, JsValue::UNDEFINED).unwrap();
    fs.train(&base).unwrap();
    fs.add(ids(2_990), &base[..2_990 * dim]).unwrap();
    for rerank in [0, 10] {
        let cpu = fs.search_with(&queries, 10, 4, rerank).unwrap();
        let dev = fs.search_with_gpu(&gpu, queries.clone(), 10, 4, rerank).await.unwrap();
        assert_same(&dev, &cpu);
    }
    fs.add(
        Uint32Array::from(&(2_990u32..3_000).collect::<Vec<u32>>()[..]).into(),
        &base[2_990 * dim..],
    )
    .unwrap();
    let cpu = fs.search_with(&queries, 10, 16, 0).unwrap();
    let dev = fs.search_with_gpu(&gpu, queries.clone(), 10, 16, 0).await.unwrap();
    assert_same(&dev, &cpu);

    assert_eq!(gpu.fallbacks(), 0.0, "a call fell back to the CPU");
}

#[wasm_bindgen_test]
async fn webgpu_search_errors_are_typed() {
    let gpu = WebGpu::open().await.unwrap();
    let index = VectorIndex::exact(8, JsValue::UNDEFINED).unwrap();
    let e = index.search_gpu(&gpu, vec![0.5; 8], 3).await.unwrap_err();
    let e: js_sys::Error = wasm_bindgen::JsCast::dyn_into(e).unwrap();
    assert_eq!(String::from(e.name()), "DentateError");
}
