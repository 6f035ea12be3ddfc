//! k-means and silhouette sums (`shaders/cluster.wgsl`,
//! `dentate-gpu/src/cluster.rs` on the GPU).

use super::topk::{QB, for_each_tile};
use crate::compute::Metric;
use crate::layout::Panels;
use crate::simd::Isa;
use rayon::prelude::*;

/// [`crate::Compute::cluster_sums`].
pub(super) fn cluster_sums(points: &[f32], dim: usize, assign: &[u32], k: usize) -> (Vec<f32>, Vec<u32>) {
    // Fixed-size chunks summed in parallel, then combined in chunk order:
    // the float summation order never depends on thread scheduling, so
    // training is bit-reproducible (a rayon fold/reduce is not).
    const CHUNK: usize = 16_384;
    let partial: Vec<(Vec<f32>, Vec<u32>)> = points
        .par_chunks(CHUNK * dim)
        .zip(assign.par_chunks(CHUNK))
        .map(|(pts, asg)| {
            let mut sums = vec![0f32; k * dim];
            let mut counts = vec![0u32; k];
            for (x, &c) in pts.chunks_exact(dim).zip(asg) {
                let c = c as usize;
                if c < k {
                    counts[c] += 1;
                    for (s, v) in sums[c * dim..(c + 1) * dim].iter_mut().zip(x) {
                        *s += v;
                    }
                }
            }
            (sums, counts)
        })
        .collect();
    let mut sums = vec![0f32; k * dim];
    let mut counts = vec![0u32; k];
    for (s2, c2) in partial {
        sums.iter_mut().zip(&s2).for_each(|(a, b)| *a += b);
        counts.iter_mut().zip(&c2).for_each(|(a, b)| *a += b);
    }
    (sums, counts)
}

/// [`crate::Compute::cluster_distance_sums`]: Gram tiles of the points
/// against themselves, turned into distances and summed per label.
pub(super) fn cluster_distance_sums(isa: Isa, points: &Panels, labels: &[u32], k: usize, metric: Metric) -> Vec<f32> {
    let n = points.len();
    let d = points.dim();
    if n == 0 || d == 0 || k == 0 {
        return Vec::new();
    }
    let rows = points.to_rows();
    let norms: Vec<f32> = rows.chunks_exact(d).map(|r| r.iter().map(|x| x * x).sum()).collect();
    let mut out = vec![0f32; n * k];
    out.par_chunks_mut(QB * k).enumerate().for_each(|(blk, chunk)| {
        let q0 = blk * QB;
        let nq = chunk.len() / k;
        let qs = &rows[q0 * d..(q0 + nq) * d];
        for_each_tile(isa, qs, nq, points, (0, points.panels()), |c0, valid, tile, width| {
            for r in 0..nq {
                let i = q0 + r;
                for c in 0..valid {
                    let j = c0 + c;
                    if i == j {
                        continue;
                    }
                    let ip = tile[r * width + c];
                    let dist = match metric {
                        Metric::Cosine => (1.0 - ip).max(0.0),
                        Metric::L2 => (norms[i] + norms[j] - 2.0 * ip).max(0.0).sqrt(),
                    };
                    let l = labels[j] as usize;
                    if l < k {
                        chunk[r * k + l] += dist;
                    }
                }
            }
        });
    });
    out
}
