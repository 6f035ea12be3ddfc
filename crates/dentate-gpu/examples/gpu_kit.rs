//! The GPU kit's measurement program (`scripts/gpu-kit` builds it): a
//! preflight — adapter, driver, limits; a software adapter is refused
//! unless `--allow-software` — then exact search, a k-means step, IVF-PQ
//! and fast-scan, each on the GPU backend and on the CPU backend of the
//! same machine in the same run, written as one JSON object.
//!
//! `gpu_kit --out results.json [--n 1000000] [--dim 384] [--ivf-n 200000]
//! [--allow-software] [--exact-only | --kmeans-only | --ivf-only]`
//! (`--kmeans-only`, `--ivf-only`: the k-means step, or IVF-PQ and
//! fast-scan, alone; `--exact-only`: exact search alone,
//! the CPU timed and compared on the first 100 queries only — a quick look
//! at the GPU kernel, not the kit's full comparison; `--gemm-sweep`: 10,000
//! queries, k 10, on a device opened once per `GemmShape` (every one, or
//! those of `--shapes "16,q8;16,q8,fma"`), each checked
//! against the CPU on the first 100 queries, with the time to open the
//! device and compile the exact-search kernels, which the pipeline cache
//! shortens on a second run), and the fastest shape named. Exits 2 when the preflight refuses the adapter and
//! 3 when any GPU call fell back to the CPU (its time would not be a GPU
//! time) or the GPU's exact ids differ from the CPU's.
use dentate_core::data::{SynthConfig, clustered};
use dentate_core::{BaseRef, Compute, CpuCompute, Index, IvfPqConfig, IvfPqIndex, IvfSearchParams};
use dentate_core::{Metric, Panels, PointsRef, Precision};
use dentate_gpu::{GpuCompute, GpuOptions};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

struct Args {
    out: String,
    n: usize,
    dim: usize,
    ivf_n: usize,
    allow_software: bool,
    exact_only: bool,
    kmeans_only: bool,
    ivf_only: bool,
    gemm_sweep: bool,
    shapes: Vec<dentate_gpu::GemmShape>,
}

fn args() -> Args {
    let mut a = Args {
        out: "gpu-kit.json".into(),
        n: 1_000_000,
        dim: 384,
        ivf_n: 200_000,
        allow_software: false,
        exact_only: false,
        kmeans_only: false,
        ivf_only: false,
        gemm_sweep: false,
        shapes: dentate_gpu::GemmShape::ALL.to_vec(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().unwrap_or_else(|| fail(2, &format!("{flag} needs a value")));
        match flag.as_str() {
            "--out" => a.out = value(),
            "--n" => a.n = value().parse().unwrap_or_else(|_| fail(2, "--n: a number")),
            "--dim" => a.dim = value().parse().unwrap_or_else(|_| fail(2, "--dim: a number")),
            "--ivf-n" => a.ivf_n = value().parse().unwrap_or_else(|_| fail(2, "--ivf-n: a number")),
            "--allow-software" => a.allow_software = true,
            "--exact-only" => a.exact_only = true,
            "--kmeans-only" => a.kmeans_only = true,
            "--ivf-only" => a.ivf_only = true,
            "--gemm-sweep" => a.gemm_sweep = true,
            "--shapes" => {
                a.shapes = value()
                    .split(';')
                    .map(|s| dentate_gpu::GemmShape::parse(s).unwrap_or_else(|e| fail(2, &format!("--shapes: {e}"))))
                    .collect()
            }
            other => fail(2, &format!("unknown argument {other}")),
        }
    }
    a
}

fn fail(code: i32, msg: &str) -> ! {
    eprintln!("gpu_kit: {msg}");
    std::process::exit(code)
}

/// Best wall time of `reps` calls of `f`, seconds (after one untimed call).
fn best<T>(reps: usize, mut f: impl FnMut() -> T) -> f64 {
    std::hint::black_box(f());
    (0..reps)
        .map(|_| {
            let t = Instant::now();
            std::hint::black_box(f());
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

/// Device time per call of `reps` calls of `f`, from timestamp queries: a
/// JSON fragment (`"device_s":…,"span_s":…,"kernels":{…}`, per call) and a
/// line for the log; empty where the adapter has no timestamp queries.
fn device<T>(gpu: &GpuCompute, reps: usize, mut f: impl FnMut() -> T) -> (String, String) {
    if !gpu.start_timing() {
        return (String::new(), "device time: no timestamp queries".into());
    }
    for _ in 0..reps {
        std::hint::black_box(f());
    }
    let Some(t) = gpu.stop_timing() else {
        return (String::new(), String::new());
    };
    let per = |s: f64| s / reps as f64;
    let kernels: Vec<String> = t
        .kernels
        .iter()
        .map(|k| format!("{}:{:.6}", json_str(&k.kernel), per(k.seconds)))
        .collect();
    let log: Vec<String> = t
        .kernels
        .iter()
        .map(|k| format!("{} {:.2}", k.kernel, per(k.seconds) * 1e3))
        .collect();
    (
        format!(
            ",\"device_s\":{:.6},\"span_s\":{:.6},\"untimed\":{},\"kernels\":{{{}}}",
            per(t.total_s()),
            per(t.span_s),
            t.untimed,
            kernels.join(",")
        ),
        format!(
            "device {:.2} ms (span {:.2}; {})",
            per(t.total_s()) * 1e3,
            per(t.span_s) * 1e3,
            log.join(", ")
        ),
    )
}

fn json_str(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

/// Share of the CPU's ids the GPU also returned, over all queries.
fn agreement(gpu: &[Vec<dentate_core::topk::Cand>], cpu: &[Vec<dentate_core::topk::Cand>]) -> f64 {
    let (mut same, mut all) = (0usize, 0usize);
    for (g, c) in gpu.iter().zip(cpu) {
        all += c.len();
        same += c.iter().filter(|x| g.iter().any(|y| y.id == x.id)).count();
    }
    same as f64 / all.max(1) as f64
}

fn main() {
    let a = args();
    let gpu = match GpuCompute::with_options(GpuOptions {
        allow_software: a.allow_software,
        ..GpuOptions::default()
    }) {
        Ok(g) => Arc::new(g),
        Err(e) => fail(2, &format!("preflight: {e}")),
    };
    let r = gpu.adapter().clone();
    eprintln!(
        "adapter: {} [{} {}] driver {}; binding {} MiB, workgroup memory {} KiB",
        r.name,
        r.backend,
        r.device_type,
        r.driver,
        r.max_storage_binding >> 20,
        r.max_workgroup_storage >> 10
    );
    if !r.hardware && !a.allow_software {
        fail(2, "preflight: a software adapter; the kit measures GPUs only");
    }
    let cpu = Arc::new(CpuCompute::default());
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut out = String::new();
    let _ = write!(
        out,
        "{{\"adapter\":{{\"name\":{},\"backend\":{},\"type\":{},\"driver\":{},\"hardware\":{},\"max_storage_binding\":{},\"max_workgroup_storage\":{},\"shader_f16\":{}}},\"cpu\":{{\"threads\":{threads},\"simd\":{}}}",
        json_str(&r.name),
        json_str(&r.backend),
        json_str(&r.device_type),
        json_str(&r.driver),
        r.hardware,
        r.max_storage_binding,
        r.max_workgroup_storage,
        r.shader_f16,
        json_str(dentate_core::simd::Isa::active().name())
    );
    let mut bad = Vec::new();

    // Exact search.
    let (n, d) = (a.n, a.dim);
    let t = Instant::now();
    let all = clustered(&SynthConfig {
        n: n + 10_000,
        dim: d,
        clusters: 1_000,
        spread: 0.8,
        seed: 1,
    })
    .unwrap_or_else(|e| fail(2, &format!("data: {e}")));
    let (base, queries) = all.split_at(n * d);
    eprintln!("data: {n} + 10000 rows × {d} in {:.1} s", t.elapsed().as_secs_f64());
    let panels = Panels::from_rows(base, d, Precision::F32);
    let base_ref = BaseRef {
        uid: dentate_core::views::new_uid(),
        ..BaseRef::plain(&panels)
    };
    if a.gemm_sweep {
        drop(gpu);
        let out = gemm_sweep(&a, out, &panels, queries, &mut bad);
        finish(&a.out, out, &bad);
        return;
    }
    let t = Instant::now();
    std::hint::black_box(gpu.top_k(&queries[..d], base_ref, 10));
    eprintln!("upload + first call: {:.2} s", t.elapsed().as_secs_f64());
    out.push_str(",\"exact\":[");
    let mut first = true;
    let counts: &[usize] = if a.kmeans_only || a.ivf_only {
        &[]
    } else {
        &[1, 100, 1_024, 10_000]
    };
    for &nq in counts {
        for k in [10usize, 100] {
            let q = &queries[..nq * d];
            let before = gpu.fallbacks();
            let g_reps = if nq >= 1_024 { 3 } else { 10 };
            let c_reps = if nq >= 1_024 { 1 } else { 3 };
            let tg = best(g_reps, || gpu.top_k(q, base_ref, k));
            let qc = if a.exact_only { &q[..nq.min(100) * d] } else { q };
            let tc = best(c_reps, || cpu.top_k(qc, base_ref, k)) * (nq as f64 / (qc.len() / d) as f64);
            let (dev_json, dev_log) = device(&gpu, g_reps, || gpu.top_k(q, base_ref, k));
            let fell = gpu.fallbacks() - before;
            let agree = agreement(&gpu.top_k(qc, base_ref, k), &cpu.top_k(qc, base_ref, k));
            let flop = 2.0 * nq as f64 * n as f64 * d as f64;
            eprintln!(
                "exact nq={nq} k={k}: gpu {:.2} ms ({:.1} TFLOP/s; {dev_log}), cpu {:.2} ms, cpu/gpu {:.1}, agreement {agree:.4}, fallbacks {fell}",
                tg * 1e3,
                flop / tg / 1e12,
                tc * 1e3,
                tc / tg
            );
            if fell > 0 || agree < 0.999 {
                bad.push(format!("exact nq={nq} k={k}"));
            }
            let _ = write!(
                out,
                "{}{{\"nq\":{nq},\"k\":{k},\"n\":{n},\"dim\":{d},\"gpu_s\":{tg:.6},\"cpu_s\":{tc:.6},\"gpu_tflops\":{:.3},\"cpu_tflops\":{:.3},\"agreement\":{agree:.5},\"fallbacks\":{fell}{dev_json}}}",
                if first { "" } else { "," },
                flop / tg / 1e12,
                flop / tc / 1e12
            );
            first = false;
        }
    }
    out.push(']');
    if a.exact_only {
        finish(&a.out, out, &bad);
        return;
    }

    if !a.ivf_only {
        kmeans(&mut out, &mut bad, (&gpu, &cpu), base, d);
    }
    if a.kmeans_only {
        finish(&a.out, out, &bad);
        return;
    }

    // IVF-PQ and fast-scan: recall@10 against the exact top-10 and time per
    // batch of 1,000 queries, for a sweep of nprobe.
    let ni = a.ivf_n.min(n);
    let nqi = 1_000;
    let qi = &queries[..nqi * d];
    let ivf_panels = Panels::from_rows(&base[..ni * d], d, Precision::F32);
    let truth: Vec<Vec<u64>> = gpu
        .top_k(qi, BaseRef::plain(&ivf_panels), 10)
        .into_iter()
        .map(|c| c.into_iter().map(|c| c.id).collect())
        .collect();
    let ids: Vec<u64> = (0..ni as u64).collect();
    let nlist = (ni / 400).clamp(16, 1_024);
    out.push_str(",\"ivf\":[");
    let mut first = true;
    for (name, mut cfg) in [
        ("ivfpq_m48", IvfPqConfig::new(nlist, 48)),
        ("fastscan_m96", IvfPqConfig::fastscan(nlist, 96)),
    ] {
        cfg.kmeans_iterations = 10;
        cfg.pq_iterations = 10;
        let t = Instant::now();
        let mut idx = IvfPqIndex::new(d, cfg).unwrap_or_else(|e| fail(2, &format!("{name}: {e}")));
        idx.set_compute(cpu.clone());
        idx.train(&base[..ni.min(100_000) * d])
            .unwrap_or_else(|e| fail(2, &format!("{name}: {e}")));
        idx.add(&ids, &base[..ni * d])
            .unwrap_or_else(|e| fail(2, &format!("{name}: {e}")));
        eprintln!(
            "{name}: built {ni} rows, nlist {nlist}, in {:.1} s",
            t.elapsed().as_secs_f64()
        );
        let mut on_gpu = idx.clone();
        on_gpu.set_compute(gpu.clone());
        // Shortlists (k × re-rank) of 40 to 640; recall 0.95 needs the
        // deeper ones.
        for (nprobe, rerank) in [
            (4usize, 4usize),
            (16, 4),
            (64, 4),
            (8, 12),
            (32, 12),
            (16, 32),
            (32, 32),
            (64, 64),
        ] {
            let p = IvfSearchParams { nprobe, rerank };
            let before = gpu.fallbacks();
            let search = |i: &IvfPqIndex| i.search_with(qi, 10, p).unwrap_or_else(|e| fail(2, &format!("{e}")));
            let tg = best(3, || search(&on_gpu));
            let tc = best(3, || search(&idx));
            let (dev_json, dev_log) = device(&gpu, 3, || search(&on_gpu));
            let fell = gpu.fallbacks() - before;
            let rg = dentate_core::data::recall_at_k(&search(&on_gpu), &truth, 10);
            let rc = dentate_core::data::recall_at_k(&search(&idx), &truth, 10);
            eprintln!(
                "{name} nprobe {nprobe} rerank {rerank}: gpu {:.0} QPS (recall {rg:.4}; {dev_log}), cpu {:.0} QPS (recall {rc:.4}), gpu/cpu QPS {:.2}, fallbacks {fell}",
                nqi as f64 / tg,
                nqi as f64 / tc,
                tc / tg
            );
            if fell > 0 {
                bad.push(format!("{name} nprobe={nprobe} rerank={rerank}"));
            }
            let _ = write!(
                out,
                "{}{{\"index\":{},\"n\":{ni},\"nlist\":{nlist},\"nprobe\":{nprobe},\"rerank\":{rerank},\"queries\":{nqi},\"gpu_qps\":{:.1},\"cpu_qps\":{:.1},\"gpu_recall\":{rg:.5},\"cpu_recall\":{rc:.5},\"fallbacks\":{fell}{dev_json}}}",
                if first { "" } else { "," },
                json_str(name),
                nqi as f64 / tg,
                nqi as f64 / tc
            );
            first = false;
        }
    }
    out.push(']');
    finish(&a.out, out, &bad);
}

/// One k-means step (assignment and centroid sums) as a training takes
/// it: the first step of a training uploads its points, the later ones
/// find them on the device. Both are timed; the CPU's steps are all alike.
fn kmeans(out: &mut String, bad: &mut Vec<String>, (gpu, cpu): (&GpuCompute, &CpuCompute), base: &[f32], d: usize) {
    let n = base.len() / d;
    let np = n.min(262_144);
    let kc = 1_024.min(np);
    let points = &base[..np * d];
    let centroids = Panels::from_rows(&points[..kc * d], d, Precision::F32);
    let before = gpu.fallbacks();
    let training = PointsRef {
        rows: points,
        dim: d,
        uid: dentate_core::views::new_uid(),
    };
    let t = Instant::now();
    let first = gpu.kmeans_step(training, &centroids, Metric::Cosine);
    let tfirst = t.elapsed().as_secs_f64();
    let tg = best(3, || gpu.kmeans_step(training, &centroids, Metric::Cosine));
    let tc = best(3, || cpu.kmeans_step(training, &centroids, Metric::Cosine));
    let (dev_json, dev_log) = device(gpu, 3, || gpu.kmeans_step(training, &centroids, Metric::Cosine));
    let fell = gpu.fallbacks() - before;
    let want = cpu.kmeans_step(training, &centroids, Metric::Cosine);
    let same = first.assign.iter().zip(&want.assign).filter(|(a, b)| a == b).count() as f64 / np as f64;
    eprintln!(
        "k-means step {np} × {d}, k = {kc}: gpu {:.1} ms (first step of a training, upload included: {:.1} ms), cpu {:.1} ms, cpu/gpu {:.2}, same assignment {same:.5}, fallbacks {fell}; {dev_log}",
        tg * 1e3,
        tfirst * 1e3,
        tc * 1e3,
        tc / tg
    );
    if fell > 0 {
        bad.push("kmeans".into());
    }
    let _ = write!(
        out,
        ",\"kmeans_step\":{{\"points\":{np},\"dim\":{d},\"k\":{kc},\"gpu_s\":{tg:.6},\"gpu_first_s\":{tfirst:.6},\"cpu_s\":{tc:.6},\"same_assignment\":{same:.6},\"fallbacks\":{fell}{dev_json}}}"
    );
}

/// Exact search of 10,000 queries (k 10) with each GEMM shape on a device
/// of its own, as a JSON array `gemm_sweep` appended to `out`.
fn gemm_sweep(a: &Args, mut out: String, panels: &Panels, queries: &[f32], bad: &mut Vec<String>) -> String {
    use dentate_gpu::GemmShape;
    let (n, d) = (panels.len(), panels.dim());
    let (nq, k) = (10_000usize.min(queries.len() / d), 10);
    let q = &queries[..nq * d];
    let cpu = CpuCompute::default();
    let base_ref = BaseRef {
        uid: dentate_core::views::new_uid(),
        ..BaseRef::plain(panels)
    };
    let want = cpu.top_k(&q[..100.min(nq) * d], base_ref, k);
    // A small base: opening the device and compiling the kernels, not the
    // upload, is what this times.
    let small = Panels::from_rows(&queries[..1_024 * d], d, Precision::F32);
    out.push_str(",\"gemm_sweep\":[");
    let mut fastest: Option<(f64, GemmShape)> = None;
    for (i, &shape) in a.shapes.iter().enumerate() {
        let t = Instant::now();
        let gpu = GpuCompute::with_options(GpuOptions {
            allow_software: a.allow_software,
            gemm: Some(shape),
            ..GpuOptions::default()
        })
        .unwrap_or_else(|e| fail(2, &format!("preflight: {e}")));
        std::hint::black_box(gpu.top_k(&q[..d], BaseRef::plain(&small), k));
        let compile = t.elapsed().as_secs_f64();
        let cache = gpu.pipeline_cache().map_or(0, |(_, bytes)| bytes);
        std::hint::black_box(gpu.top_k(&q[..d], base_ref, k));
        let tg = best(3, || gpu.top_k(q, base_ref, k));
        let (dev_json, dev_log) = device(&gpu, 3, || gpu.top_k(q, base_ref, k));
        let agree = agreement(&gpu.top_k(&q[..want.len() * d], base_ref, k), &want);
        let fell = gpu.fallbacks();
        let flop = 2.0 * nq as f64 * n as f64 * d as f64;
        eprintln!(
            "gemm {shape}: open + compile {compile:.3} s (pipeline cache {cache} bytes), exact nq={nq} k={k}: {:.2} ms ({:.1} TFLOP/s; {dev_log}), agreement {agree:.4}, fallbacks {fell}",
            tg * 1e3,
            flop / tg / 1e12
        );
        if fell > 0 || agree < 0.999 {
            bad.push(format!("gemm {shape}"));
        } else if fastest.is_none_or(|(t, _)| tg < t) {
            fastest = Some((tg, shape));
        }
        let _ = write!(
            out,
            "{}{{\"shape\":{},\"open_compile_s\":{compile:.4},\"pipeline_cache_bytes\":{cache},\"nq\":{nq},\"k\":{k},\"n\":{n},\"dim\":{d},\"gpu_s\":{tg:.6},\"gpu_tflops\":{:.3},\"agreement\":{agree:.5},\"fallbacks\":{fell}{dev_json}}}",
            if i == 0 { "" } else { "," },
            json_str(&shape.to_string()),
            flop / tg / 1e12
        );
    }
    out.push(']');
    if let Some((t, shape)) = fastest {
        eprintln!("fastest GEMM shape: {shape} ({:.2} ms)", t * 1e3);
        let _ = write!(out, ",\"fastest\":{}", json_str(&shape.to_string()));
    }
    out
}

/// Writes the JSON object (closed with the failures) and exits 3 on any.
fn finish(path: &str, mut out: String, bad: &[String]) {
    let _ = write!(
        out,
        ",\"failures\":[{}]}}",
        bad.iter().map(|b| json_str(b)).collect::<Vec<_>>().join(",")
    );
    if let Err(e) = std::fs::write(path, format!("{out}\n")) {
        fail(2, &format!("{path}: {e}"));
    }
    eprintln!("wrote {path}");
    if !bad.is_empty() {
        fail(3, &format!("fell back or disagreed: {}", bad.join(", ")));
    }
}
