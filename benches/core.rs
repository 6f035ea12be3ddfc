//! Criterion benches of the core kernels.
//!
//! `cargo bench --bench core` (add `-- exact` etc. to filter). Data is
//! synthetic and clustered (see `dentate::data::clustered`); the sizes follow
//! the core-engine issue: exact search of 1,000 queries against 100,000
//! 384-d vectors, one k-means iteration, PQ encoding, IVF-PQ search.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dentate::Panels;
use dentate::data::{SynthConfig, clustered};
use dentate::{
    FlatIndex, Index, IvfPqConfig, IvfPqIndex, IvfSearchParams, KMeans, KMeansConfig, Metric, PqTrainConfig, Precision,
    ProductQuantizer, default_compute,
};
use std::hint::black_box;
use std::time::Duration;

const DIM: usize = 384;

fn data(n: usize, seed: u64) -> Vec<f32> {
    clustered(&SynthConfig {
        n,
        dim: DIM,
        clusters: 1000,
        spread: 0.8,
        seed,
    })
    .expect("valid synthetic data")
}

fn exact(c: &mut Criterion) {
    let base = data(100_000, 1);
    let queries = data(1_000, 2);
    let ids: Vec<u64> = (0..100_000).collect();
    let mut g = c.benchmark_group("exact_search");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Elements(1_000));
    for prec in [Precision::F32, Precision::F16] {
        let mut idx = FlatIndex::with_precision(DIM, prec);
        idx.add(&ids, &base).unwrap();
        g.bench_function(BenchmarkId::new("1000x100000x384", format!("{prec:?}")), |b| {
            b.iter(|| black_box(idx.search(black_box(&queries), 10).unwrap()))
        });
    }
    g.finish();
}

fn kmeans_iteration(c: &mut Criterion) {
    let compute = default_compute();
    let points = data(65_536, 3);
    let km = KMeans::train(
        &points,
        DIM,
        &KMeansConfig::new(256).spherical(true).max_iter(1),
        compute.as_ref(),
    )
    .unwrap();
    let centroids = Panels::from_rows(&km.centroids, DIM, Precision::F32);
    let mut g = c.benchmark_group("kmeans");
    g.sample_size(10);
    g.throughput(Throughput::Elements(65_536));
    // One Lloyd iteration = assignment + update.
    g.bench_function("iteration_65536x256x384", |b| {
        b.iter(|| {
            let (assign, _) = compute.assign(black_box(&points), &centroids, Metric::Cosine);
            black_box(compute.cluster_sums(&points, DIM, &assign, 256))
        })
    });
    g.finish();
}

fn pq_encode(c: &mut Criterion) {
    let compute = default_compute();
    let train = data(20_000, 4);
    let pq = ProductQuantizer::train(
        &train,
        DIM,
        48,
        &PqTrainConfig {
            iterations: 5,
            ..Default::default()
        },
        compute.as_ref(),
    )
    .unwrap();
    let x = data(10_000, 5);
    let mut g = c.benchmark_group("pq");
    g.sample_size(10);
    g.throughput(Throughput::Elements(10_000));
    g.bench_function("encode_10000_m48", |b| {
        b.iter(|| black_box(pq.encode(black_box(&x), compute.as_ref()).unwrap()))
    });
    g.finish();
}

fn ivfpq_search(c: &mut Criterion) {
    let base = data(100_000, 6);
    let queries = data(1_000, 7);
    let mut cfg = IvfPqConfig::new(1024, 48);
    cfg.kmeans_iterations = 10;
    cfg.pq_iterations = 10;
    let mut idx = IvfPqIndex::new(DIM, cfg).unwrap();
    idx.train(&base).unwrap();
    idx.add(&(0..100_000).collect::<Vec<_>>(), &base).unwrap();
    let mut g = c.benchmark_group("ivfpq_search");
    g.sample_size(10);
    g.throughput(Throughput::Elements(1_000));
    for (nprobe, rerank) in [(8, 0), (32, 0), (32, 4)] {
        let p = IvfSearchParams { nprobe, rerank };
        g.bench_function(
            BenchmarkId::new("1000q_100k_nlist1024_m48", format!("np{nprobe}_rr{rerank}")),
            |b| b.iter(|| black_box(idx.search_with(black_box(&queries), 10, p).unwrap())),
        );
    }
    g.finish();
}

/// 4-bit fast-scan against the 8-bit scan at the same code bytes (m = 96
/// nibbles vs m = 48 bytes), same lists, same probes, no re-ranking: the
/// scan itself.
fn fastscan_search(c: &mut Criterion) {
    let base = data(100_000, 6);
    let queries = data(1_000, 7);
    let build = |cfg: IvfPqConfig| {
        let mut idx = IvfPqIndex::new(DIM, cfg).unwrap();
        idx.train(&base).unwrap();
        idx.add(&(0..100_000).collect::<Vec<_>>(), &base).unwrap();
        idx
    };
    let mut pq8 = IvfPqConfig::new(1024, 48);
    pq8.kmeans_iterations = 10;
    pq8.pq_iterations = 10;
    let fs = build(IvfPqConfig::fastscan(1024, 96));
    let pq8 = build(pq8);
    let mut g = c.benchmark_group("fastscan_search");
    g.sample_size(10);
    g.throughput(Throughput::Elements(1_000));
    for nprobe in [8, 32] {
        let p = IvfSearchParams { nprobe, rerank: 0 };
        g.bench_function(
            BenchmarkId::new("1000q_100k_nlist1024_4bit_m96", format!("np{nprobe}")),
            |b| b.iter(|| black_box(fs.search_with(black_box(&queries), 10, p).unwrap())),
        );
        g.bench_function(
            BenchmarkId::new("1000q_100k_nlist1024_8bit_m48", format!("np{nprobe}")),
            |b| b.iter(|| black_box(pq8.search_with(black_box(&queries), 10, p).unwrap())),
        );
    }
    g.finish();
}

criterion_group!(
    benches,
    exact,
    kmeans_iteration,
    pq_encode,
    ivfpq_search,
    fastscan_search
);
criterion_main!(benches);
