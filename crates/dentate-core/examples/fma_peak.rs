//! The FP32 multiply-add peak this CPU sustains on each x86 SIMD path, per
//! core and on every core, measured rather than taken from a data sheet
//! (the clock a cloud core runs at is not the one its model name implies).
//!
//! BENCHMARKS.md relates the exact search, the MiniLM encoder and the
//! fast-scan to it ("what share of the peak does a kernel reach"):
//!
//! ```sh
//! cargo run --release -p dentate-core --example fma_peak [SECONDS]
//! ```
//!
//! Each thread runs chains of independent fused multiply-adds (more chains
//! than the FMA latency × the FMA ports, so the ports never wait), and the
//! figure is the multiply-adds × 2 flops a second.

use std::time::Instant;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use std::arch::x86_64::*;

    /// Chains in flight: FMA latency (4–5 cycles) × 2 ports, with room.
    pub const CHAINS: usize = 12;

    /// `iters` rounds of `CHAINS` 16-lane FMAs; returns a value that
    /// depends on every chain, so nothing is optimised away.
    #[target_feature(enable = "avx512f")]
    pub unsafe fn avx512(iters: u64) -> f32 {
        let a = _mm512_set1_ps(0.999_999);
        let b = _mm512_set1_ps(1e-7);
        let mut acc = [_mm512_set1_ps(1.0); CHAINS];
        for _ in 0..iters {
            for c in acc.iter_mut() {
                *c = _mm512_fmadd_ps(*c, a, b);
            }
        }
        let mut s = _mm512_setzero_ps();
        for c in acc {
            s = _mm512_add_ps(s, c);
        }
        _mm512_reduce_add_ps(s)
    }

    /// As [`avx512`] with 8-lane AVX2 FMAs.
    #[target_feature(enable = "avx2,fma")]
    pub unsafe fn avx2(iters: u64) -> f32 {
        let a = _mm256_set1_ps(0.999_999);
        let b = _mm256_set1_ps(1e-7);
        let mut acc = [_mm256_set1_ps(1.0); CHAINS];
        for _ in 0..iters {
            for c in acc.iter_mut() {
                *c = _mm256_fmadd_ps(*c, a, b);
            }
        }
        let mut s = _mm256_setzero_ps();
        for c in acc {
            s = _mm256_add_ps(s, c);
        }
        let mut out = [0f32; 8];
        // SAFETY: `out` has room for the 8 lanes.
        unsafe { _mm256_storeu_ps(out.as_mut_ptr(), s) };
        out.iter().sum()
    }
}

/// A path's kernel: `iters` rounds of its FMA chains.
#[cfg(target_arch = "x86_64")]
type Kernel = unsafe fn(u64) -> f32;

/// GFLOP/s of `threads` threads each running `kernel` for about `secs`.
#[cfg(target_arch = "x86_64")]
fn measure(threads: usize, lanes: usize, secs: f64, kernel: Kernel) -> f64 {
    // Calibrate the rounds to the wanted time on one thread first.
    let mut iters = 1u64 << 20;
    loop {
        let t = Instant::now();
        // SAFETY: the caller checked the CPU has the kernel's features.
        std::hint::black_box(unsafe { kernel(iters) });
        let e = t.elapsed().as_secs_f64();
        if e > 0.05 {
            iters = ((iters as f64) * secs / e).max(1.0) as u64;
            break;
        }
        iters *= 4;
    }
    let t = Instant::now();
    std::thread::scope(|s| {
        for _ in 0..threads {
            // SAFETY: as above.
            s.spawn(|| std::hint::black_box(unsafe { kernel(iters) }));
        }
    });
    let e = t.elapsed().as_secs_f64();
    let flops = 2.0 * (lanes * x86::CHAINS) as f64 * iters as f64 * threads as f64;
    flops / e / 1e9
}

#[cfg(target_arch = "x86_64")]
fn main() {
    let secs: f64 = std::env::args().nth(1).and_then(|s| s.parse().ok()).unwrap_or(1.0);
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let mut paths: Vec<(&str, usize, Kernel)> = Vec::new();
    if is_x86_feature_detected!("avx512f") {
        paths.push(("avx512f", 16, x86::avx512));
    }
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        paths.push(("avx2+fma", 8, x86::avx2));
    }
    if paths.is_empty() {
        println!("no AVX2 or AVX-512 on this CPU: nothing to measure");
        return;
    }
    println!("path       threads  GFLOP/s  per core  FMA lanes per ns per core");
    for (name, lanes, kernel) in paths {
        for threads in [1, cores] {
            let g = measure(threads, lanes, secs, kernel);
            let per_core = g / threads as f64;
            println!(
                "{name:<10} {threads:>7}  {g:>7.1}  {per_core:>8.1}  {:>10.1}",
                per_core / 2.0
            );
            if cores == 1 {
                break;
            }
        }
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn main() {
    println!("fma_peak measures the x86 SIMD paths only");
}
