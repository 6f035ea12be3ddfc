//! Criterion benches of the compute backends side by side: every case runs
//! on the CPU backend and on the wgpu backend in the same run, so the ratio
//! is what counts on a shared machine.
//!
//! `cargo bench --bench gpu`. The GPU is the best adapter wgpu finds,
//! software adapters included (on a machine with only Mesa's llvmpipe the
//! "GPU" is an emulation on the same CPU cores: the numbers then measure
//! the backend's overhead, not a GPU). Without any adapter the GPU cases
//! are left out and the reason is printed. Sizes scale with
//! `DENTATE_GPU_BENCH_N` (base rows; default 100,000 under `cargo bench`,
//! 5,000 for the single smoke pass `cargo test --all-targets` makes).
//!
//! After each GPU case, five more calls (one in the smoke pass) run with every dispatch timed by
//! timestamp queries (where the adapter has them): the device time per
//! call, per kernel, is printed beside the whole call's wall time, so what
//! the device spends and what the host adds (uploads, waits, read-back)
//! are told apart.
//!
//! A GPU case that ran any call on the CPU fallback is not a GPU number:
//! each group asserts that the GPU backend's `fallbacks()` stayed at zero
//! (after the warm-up call, before timing, and after timing), and the run
//! fails otherwise.

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use dentate::Panels;
use dentate::data::{SynthConfig, clustered};
use dentate::gpu::{GpuCompute, GpuOptions};
use dentate::{BaseRef, Compute, CpuCompute, PointsRef};
use dentate::{Index, IvfPqConfig, IvfPqIndex, IvfSearchParams, Metric, Precision};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

const DIM: usize = 384;

fn n() -> usize {
    std::env::var("DENTATE_GPU_BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(if std::env::args().any(|a| a == "--bench") {
            100_000
        } else {
            5_000
        })
}

/// `group` passes the command line's filter (criterion's, read here as
/// `|`-separated substrings), or there is none.
fn selected(group: &str) -> bool {
    let filters: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with('-')).collect();
    filters.is_empty() || filters.iter().any(|f| f.split('|').any(|p| group.contains(p)))
}

/// Timed calls per device-time measurement: 5 under `cargo bench`, 1 in
/// the smoke pass.
fn reps() -> usize {
    if std::env::args().any(|a| a == "--bench") { 5 } else { 1 }
}

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

/// One backend of a group: its name, the compute interface, and for the
/// GPU the backend itself (for its fallback counter).
struct Backend {
    name: String,
    compute: Arc<dyn Compute>,
    gpu: Option<Arc<GpuCompute>>,
}

impl Backend {
    /// Panics when any call of this group ran on the CPU fallback: its
    /// timing would be a CPU number under the GPU's name.
    fn assert_no_fallback(&self, group: &str) {
        if let Some(g) = &self.gpu {
            let n = g.fallbacks();
            assert_eq!(
                n, 0,
                "{group}: {n} call(s) of the GPU case fell back to the CPU; its timing is not a GPU number"
            );
        }
    }
}

impl Backend {
    /// For the GPU, after a group's criterion run: `reps` more calls with
    /// every dispatch timed by timestamp queries, printed as device time
    /// per call (per kernel, and the span from first dispatch to last)
    /// beside the whole call's wall time. Nothing for the CPU, or where the
    /// adapter has no timestamp queries (said so).
    fn device_time<T>(&self, group: &str, reps: usize, mut call: impl FnMut() -> T) {
        let Some(g) = &self.gpu else { return };
        if !selected(group) {
            return;
        }
        if !g.start_timing() {
            eprintln!("{group}: device time not measured (the adapter has no timestamp queries)");
            return;
        }
        let t = std::time::Instant::now();
        for _ in 0..reps {
            black_box(call());
        }
        let wall = t.elapsed().as_secs_f64() / reps as f64;
        let Some(times) = g.stop_timing() else { return };
        let per = |s: f64| s / reps as f64 * 1e3;
        let kernels: Vec<String> = times
            .kernels
            .iter()
            .map(|k| {
                format!(
                    "{} {:.3} ms ({} dispatches)",
                    k.kernel,
                    per(k.seconds),
                    k.dispatches / reps as u64
                )
            })
            .collect();
        eprintln!(
            "{group}: device time per call {:.3} ms (span {:.3} ms; {}), whole call {:.3} ms, untimed dispatches {}",
            per(times.total_s()),
            per(times.span_s),
            kernels.join(", "),
            wall * 1e3,
            times.untimed
        );
        self.assert_no_fallback(group);
    }
}

/// The CPU backend, and a fresh GPU backend (fallback counter at zero) for
/// each group, when an adapter exists.
fn backends() -> Vec<Backend> {
    let mut out = vec![Backend {
        name: "cpu".into(),
        compute: Arc::new(CpuCompute::default()),
        gpu: None,
    }];
    match GpuCompute::with_options(GpuOptions {
        allow_software: true,
        ..GpuOptions::default()
    }) {
        Ok(g) => {
            eprintln!("gpu backend: {}", g.name());
            let g = Arc::new(g);
            out.push(Backend {
                name: "gpu".into(),
                compute: g.clone(),
                gpu: Some(g),
            });
        }
        Err(e) => eprintln!("gpu cases left out: {e}"),
    }
    out
}

fn exact(c: &mut Criterion) {
    let n = n();
    let base = data(n, 1);
    let queries = data(1_024, 2);
    let panels = Panels::from_rows(&base, DIM, Precision::F32);
    let mut g = c.benchmark_group("backend_exact_top10");
    g.sample_size(10).measurement_time(Duration::from_secs(10));
    g.throughput(Throughput::Elements(1_024));
    for be in backends() {
        let b = &be.compute;
        // The device copy of the base is made on the first call, as an index
        // would keep it; the timed calls upload queries only.
        let base_ref = BaseRef {
            uid: dentate::views::new_uid(),
            ..BaseRef::plain(&panels)
        };
        black_box(b.top_k(&queries[..DIM], base_ref, 10));
        be.assert_no_fallback("backend_exact_top10 (warm-up)");
        g.bench_function(BenchmarkId::new(format!("1024x{n}x384"), &be.name), |bench| {
            bench.iter(|| black_box(b.top_k(black_box(&queries), base_ref, 10)))
        });
        be.assert_no_fallback("backend_exact_top10");
        be.device_time("backend_exact_top10", reps(), || b.top_k(&queries, base_ref, 10));
    }
    g.finish();
}

fn kmeans_step(c: &mut Criterion) {
    let points = data(n().min(65_536), 3);
    let np = points.len() / DIM;
    let k = (np / 8).clamp(2, 1_024);
    let centroids = Panels::from_rows(&points[..k * DIM], DIM, Precision::F32);
    let mut g = c.benchmark_group("backend_kmeans_step");
    g.sample_size(10);
    g.throughput(Throughput::Elements(np as u64));
    for be in backends() {
        let b = &be.compute;
        // One training's points: the warm-up step puts them on the device,
        // the timed steps are a training's later iterations.
        let pts = PointsRef {
            rows: &points,
            dim: DIM,
            uid: dentate::views::new_uid(),
        };
        black_box(b.kmeans_step(pts, &centroids, Metric::Cosine));
        be.assert_no_fallback("backend_kmeans_step (warm-up)");
        g.bench_function(BenchmarkId::new(format!("{np}x384_k{k}"), &be.name), |bench| {
            bench.iter(|| black_box(b.kmeans_step(black_box(pts), &centroids, Metric::Cosine)))
        });
        be.assert_no_fallback("backend_kmeans_step");
        be.device_time("backend_kmeans_step", reps(), || {
            b.kmeans_step(pts, &centroids, Metric::Cosine)
        });
    }
    g.finish();
}

/// IVF search with 8-bit codes (ADC scan) and 4-bit fast-scan codes at the
/// same code bytes (48 per vector), re-ranked from f16 vectors.
fn ivf(c: &mut Criterion) {
    let n = n().min(100_000);
    let base = data(n, 4);
    let queries = data(1_000, 5);
    let ids: Vec<u64> = (0..n as u64).collect();
    let nlist = (n / 400).clamp(16, 256);
    for (group, mut cfg) in [
        ("backend_ivfpq_nprobe16_rerank4", IvfPqConfig::new(nlist, 48)),
        ("backend_fastscan_nprobe16_rerank4", IvfPqConfig::fastscan(nlist, 96)),
    ] {
        cfg.kmeans_iterations = 10;
        cfg.pq_iterations = 10;
        let mut idx = IvfPqIndex::new(DIM, cfg).expect("config");
        idx.set_compute(Arc::new(CpuCompute::default()));
        idx.train(&base[..n.min(50_000) * DIM]).expect("train");
        idx.add(&ids, &base).expect("add");
        let mut g = c.benchmark_group(group);
        g.sample_size(10);
        g.throughput(Throughput::Elements(1_000));
        for be in backends() {
            let mut i = idx.clone();
            i.set_compute(be.compute.clone());
            let p = IvfSearchParams { nprobe: 16, rerank: 4 };
            black_box(i.search_with(&queries[..DIM], 10, p).expect("search"));
            be.assert_no_fallback(&format!("{group} (warm-up)"));
            g.bench_function(BenchmarkId::new(format!("1000x{n}x384"), &be.name), |bench| {
                bench.iter(|| black_box(i.search_with(black_box(&queries), 10, p).expect("search")))
            });
            be.assert_no_fallback(group);
            be.device_time(group, reps(), || i.search_with(&queries, 10, p).expect("search"));
        }
        g.finish();
    }
}

criterion_group!(benches, exact, kmeans_step, ivf);
criterion_main!(benches);
