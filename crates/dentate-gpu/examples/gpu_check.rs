//! Runs every kernel of the GPU backend against the CPU backend on random
//! data and prints where they differ and what fell back to the CPU (a quick
//! check of a new adapter or driver: `cargo run --release -p dentate-gpu
//! --example gpu_check`).
use dentate_core::rng::Rng;
use dentate_core::{BaseRef, Compute, CpuCompute};
use dentate_core::{
    Bitset, Index, IvfPqConfig, IvfPqIndex, IvfSearchParams, Metric, Precision, SalienceParams, StoreRef,
};
use dentate_core::{Panels, RerankStore, RowMajor};
use dentate_gpu::{GpuCompute, GpuOptions};
use std::sync::Arc;

fn main() {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("dentate_gpu=debug")).init();
    let g = Arc::new(
        GpuCompute::with_options(GpuOptions {
            allow_software: true,
            ..Default::default()
        })
        .expect("adapter"),
    );
    println!("{}", g.name());
    let cpu = CpuCompute::default();
    let dim = 48;
    let mut r = Rng::new(1);
    let data: Vec<f32> = (0..3000 * dim).map(|_| r.normal()).collect();
    let panels = Panels::from_rows(&data, dim, Precision::F32);
    let mut bad = 0;
    let mut report = |what: &str, diff: usize| {
        println!("{what}: {diff} differ, fallbacks so far {}", g.fallbacks());
        bad += diff;
    };
    for (nq, k) in [(1, 1), (5, 16), (5, 128), (100, 128), (100, 64)] {
        let q = &data[..nq * dim];
        let a = g.top_k(q, BaseRef::plain(&panels), k);
        let b = cpu.top_k(q, BaseRef::plain(&panels), k);
        report(
            &format!("top_k nq={nq} k={k}"),
            a.iter()
                .zip(&b)
                .map(|(x, y)| x.iter().zip(y).filter(|(c, d)| c.id != d.id).count())
                .sum(),
        );
    }
    let assign: Vec<u32> = (0..3000).map(|i| (i % 7) as u32).collect();
    let (s1, c1) = g.cluster_sums(&data, dim, &assign, 7);
    let (s2, c2) = cpu.cluster_sums(&data, dim, &assign, 7);
    report(
        "cluster_sums",
        usize::from(c1 != c2) + s1.iter().zip(&s2).filter(|(a, b)| (*a - *b).abs() > 1e-3).count(),
    );
    let small = Panels::from_rows(&data[..300 * dim], dim, Precision::F32);
    let a = g.cluster_distance_sums(&small, &assign[..300], 7, Metric::Cosine);
    let b = cpu.cluster_distance_sums(&small, &assign[..300], 7, Metric::Cosine);
    report(
        "distance_sums",
        usize::from(a.len() != b.len()) + a.iter().zip(&b).filter(|(x, y)| (*x - *y).abs() > 1e-2).count(),
    );
    let m = g.matmul_nt(&data[..10 * dim], &small);
    let m2 = cpu.matmul_nt(&data[..10 * dim], &small);
    report(
        "matmul_nt",
        usize::from(m.len() != m2.len()) + m.iter().zip(&m2).filter(|(x, y)| (*x - *y).abs() > 1e-3).count(),
    );
    let store = RerankStore::Floats({
        let mut rows = RowMajor::new(dim, Precision::F16);
        rows.extend(&data);
        rows
    });
    let ids: Vec<u64> = (0..3000).collect();
    let cands: Vec<Vec<u32>> = (0..5)
        .map(|q| (0..50).map(|i| (q * 97 + i * 13) as u32 % 3000).collect())
        .collect();
    let sref = StoreRef {
        store: &store,
        uid: 77,
        epoch: 0,
    };
    let a = g.rerank(&data[..5 * dim], sref, &ids, &cands, 10);
    let b = cpu.rerank(&data[..5 * dim], sref, &ids, &cands, 10);
    report(
        "rerank",
        a.iter()
            .zip(&b)
            .map(|(x, y)| x.iter().zip(y).filter(|(c, d)| c.id != d.id).count())
            .sum(),
    );
    let p = SalienceParams::default();
    let added: Vec<u64> = (0..3000).map(|i| i % 40).collect();
    let last: Vec<u64> = (0..3000).map(|i| if i % 3 == 0 { u64::MAX } else { 30 }).collect();
    let a = g.salience(&added, &last, 100, &p);
    let b = cpu.salience(&added, &last, 100, &p);
    report(
        "salience",
        a.iter().zip(&b).filter(|(x, y)| (*x - *y).abs() > 1e-5).count(),
    );
    let mut alive = Bitset::new();
    for i in 0..3000 {
        alive.push(i % 5 != 0);
    }
    let a = g.lowest(&b, &ids, &alive, 100);
    let c = cpu.lowest(&b, &ids, &alive, 100);
    report("lowest", usize::from(a != c));
    let mut cfg = IvfPqConfig::new(16, 8);
    cfg.kmeans_iterations = 5;
    cfg.pq_iterations = 5;
    let mut idx = IvfPqIndex::new(dim, cfg).expect("config");
    idx.set_compute(Arc::new(cpu));
    idx.train(&data).expect("train");
    idx.add(&ids, &data).expect("add");
    let mut gi = idx.clone();
    gi.set_compute(g.clone());
    for (nprobe, rerank) in [(2, 0), (4, 4)] {
        let p = IvfSearchParams { nprobe, rerank };
        let a = gi.search_with(&data[..20 * dim], 10, p).expect("search");
        let b = idx.search_with(&data[..20 * dim], 10, p).expect("search");
        report(
            &format!("ivfpq nprobe={nprobe} rerank={rerank}"),
            a.iter()
                .zip(&b)
                .map(|(x, y)| x.iter().zip(y).filter(|(c, d)| c.id != d.id).count())
                .sum(),
        );
    }
    println!("fallbacks: {}", g.fallbacks());
    std::process::exit(i32::from(bad > 0 || g.fallbacks() > 0));
}
