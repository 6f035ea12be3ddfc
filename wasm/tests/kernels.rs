//! The wasm32 (simd128) kernels against the portable ones, compiled to
//! wasm32 and run under Node by `wasm-bindgen-test-runner`: the f16
//! conversion bit for bit over every half-precision value, the f16 inner
//! product, and a fast-scan index's answers on both paths.
#![cfg(target_arch = "wasm32")]

use dentate_core::data::{SynthConfig, clustered};
use dentate_core::simd::{Isa, dot_f16_with, dot_u8_with, widen_f16};
use dentate_core::{CpuCompute, Index, IvfPqConfig, IvfPqIndex, IvfSearchParams};
use half::f16;
use std::sync::Arc;
use wasm_bindgen_test::*;

#[wasm_bindgen_test]
fn simd128_is_the_active_path() {
    assert_eq!(Isa::active(), Isa::Simd128);
}

#[wasm_bindgen_test]
fn f16_widening_matches_the_portable_conversion_for_every_value() {
    // All 65,536 bit patterns, plus a tail that is not a multiple of 8.
    let all: Vec<f16> = (0..=u16::MAX).chain(0..5).map(f16::from_bits).collect();
    let (mut simd, mut portable) = (Vec::new(), Vec::new());
    widen_f16(Isa::Simd128, &all, &mut simd);
    widen_f16(Isa::Scalar, &all, &mut portable);
    assert_eq!(simd.len(), all.len());
    for (i, (a, b)) in simd.iter().zip(&portable).enumerate() {
        assert_eq!(a.to_bits(), b.to_bits(), "f16 bits {:#06x}", all[i].to_bits());
    }
}

#[wasm_bindgen_test]
fn f16_inner_product_matches_the_portable_one() {
    let mut x = 0x2545_f491_u32;
    let mut next = || {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        (x as f32 / u32::MAX as f32) * 2.0 - 1.0
    };
    for n in [0, 1, 7, 8, 9, 383, 384, 1000] {
        let a: Vec<f16> = (0..n).map(|_| f16::from_f32(next())).collect();
        let b: Vec<f32> = (0..n).map(|_| next()).collect();
        let exact: f64 = a
            .iter()
            .zip(&b)
            .map(|(x, y)| f64::from(x.to_f32()) * f64::from(*y))
            .sum();
        let simd = dot_f16_with(Isa::Simd128, &a, &b);
        let portable = dot_f16_with(Isa::Scalar, &a, &b);
        assert!((f64::from(simd) - exact).abs() < 1e-4, "n={n}: {simd} vs {exact}");
        assert!((f64::from(simd) - f64::from(portable)).abs() < 1e-4, "n={n}");
    }
    // Subnormal halves, and the sign.
    let tiny = [
        f16::from_bits(1),
        f16::from_bits(0x83ff),
        f16::MIN_POSITIVE,
        f16::MAX,
        f16::MIN,
    ];
    let ones = [1.0f32; 5];
    let want: f32 = tiny.iter().map(|h| h.to_f32()).sum();
    assert_eq!(dot_f16_with(Isa::Simd128, &tiny, &ones), want);
}

#[wasm_bindgen_test]
fn byte_inner_product_matches_the_portable_one() {
    for n in [0, 1, 15, 16, 17, 384, 1000] {
        let a: Vec<u8> = (0..n).map(|i| (i * 37 % 256) as u8).collect();
        let b: Vec<f32> = (0..n).map(|i| ((i * 7919) % 1000) as f32 / 500.0 - 1.0).collect();
        let exact: f64 = a.iter().zip(&b).map(|(&x, &y)| f64::from(x) * f64::from(y)).sum();
        let mag: f64 = a
            .iter()
            .zip(&b)
            .map(|(&x, &y)| (f64::from(x) * f64::from(y)).abs())
            .sum();
        let simd = dot_u8_with(Isa::Simd128, &a, &b);
        let portable = dot_u8_with(Isa::Scalar, &a, &b);
        assert!(
            (f64::from(simd) - exact).abs() < 1e-3 + 1e-6 * mag,
            "n={n}: {simd} vs {exact}"
        );
        assert!(
            (f64::from(simd) - f64::from(portable)).abs() < 1e-3 + 1e-6 * mag,
            "n={n}"
        );
    }
}

#[wasm_bindgen_test]
fn fast_scan_answers_the_same_on_simd128_and_the_portable_path() {
    let (n, dim) = (3000, 32);
    let data = clustered(&SynthConfig {
        n,
        dim,
        clusters: 12,
        spread: 0.8,
        seed: 5,
    })
    .expect("valid synthetic data");
    let ids: Vec<u64> = (0..n as u64).map(|i| i * 3 + 1).collect();
    let mut index = IvfPqIndex::new(dim, IvfPqConfig::fastscan(16, 16)).expect("config");
    index.train(&data).expect("train");
    index.add(&ids, &data).expect("add");
    let queries = &data[..40 * dim];
    let on = |isa: Isa, index: &mut IvfPqIndex, params: IvfSearchParams| {
        index.set_compute(Arc::new(CpuCompute::with_isa(isa).expect("available")));
        index.search_with(queries, 10, params).expect("search")
    };
    for params in [
        IvfSearchParams { nprobe: 1, rerank: 0 },
        IvfSearchParams { nprobe: 4, rerank: 0 },
        IvfSearchParams { nprobe: 16, rerank: 0 },
        IvfSearchParams { nprobe: 4, rerank: 8 },
    ] {
        let simd = on(Isa::Simd128, &mut index, params);
        let portable = on(Isa::Scalar, &mut index, params);
        assert_eq!(simd.len(), 40);
        assert!(simd.iter().all(|h| h.len() == 10));
        // Integer sums: the same candidates and scores, bit for bit.
        assert_eq!(simd, portable, "{params:?}");
    }
}
