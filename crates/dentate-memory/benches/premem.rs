//! PREMem's clustering step per session (§3.2.1): k-means for every k in
//! 2..=10 with the silhouette of each, on the CPU backend, for sessions of
//! 20, 44 and 75 fragments of 384-d unit vectors (the smallest, mean and
//! largest session of `locomo-dev.json` embedded with all-MiniLM-L6-v2);
//! and the centroid links against a pool of 36 clusters.
//!
//! `cargo bench -p dentate-memory --bench premem`.

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use dentate_core::data::{SynthConfig, clustered};
use dentate_core::default_compute;
use dentate_memory::premem::cluster::{ClusterConfig, centroid, cluster, links};
use std::hint::black_box;
use std::time::Duration;

fn unit(mut v: Vec<f32>, dim: usize) -> Vec<f32> {
    for r in v.chunks_exact_mut(dim) {
        let n = r.iter().map(|x| x * x).sum::<f32>().sqrt();
        r.iter_mut().for_each(|x| *x /= n);
    }
    v
}

fn session(n: usize, seed: u64) -> Vec<f32> {
    let dim = 384;
    unit(
        clustered(&SynthConfig {
            n,
            dim,
            clusters: 6,
            spread: 1.0,
            seed,
        })
        .expect("valid synthetic data"),
        dim,
    )
}

fn bench(c: &mut Criterion) {
    let compute = default_compute();
    let cfg = ClusterConfig::default();
    let dim = 384;
    let mut g = c.benchmark_group("premem_cluster_session");
    g.measurement_time(Duration::from_secs(5));
    for n in [20usize, 44, 75] {
        let data = session(n, n as u64);
        g.bench_with_input(BenchmarkId::from_parameter(n), &data, |b, d| {
            b.iter(|| cluster(black_box(d), dim, &cfg, compute.as_ref()).expect("clusters"))
        });
    }
    g.finish();
    let data = session(44, 7);
    let groups = cluster(&data, dim, &cfg, compute.as_ref()).expect("clusters");
    let new: Vec<Vec<f32>> = groups.iter().map(|m| centroid(&data, dim, m)).collect();
    let pool_data = session(36, 8);
    let pool: Vec<(i64, Vec<f32>)> = (0..36)
        .map(|i| (i as i64, pool_data[i * dim..(i + 1) * dim].to_vec()))
        .collect();
    c.bench_function("premem_links_pool_36", |b| {
        b.iter(|| links(black_box(&pool), black_box(&new), cfg.theta))
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
