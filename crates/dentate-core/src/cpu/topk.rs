//! Exact top-k and the products behind it (`shaders/topk.wgsl`,
//! `dentate-gpu/src/topk.rs` on the GPU): the panel tile kernel
//! ([`crate::layout::tile_scores`]) with a fused heap per query.

use super::CpuCompute;
use crate::compute::{Metric, assign_by_top_k, l2_bias};
use crate::layout::{Panels, argmax_rows, tile_scores};
use crate::simd::{Isa, PANEL};
use crate::topk::{Cand, Reservoir};
use crate::views::BaseRef;
use rayon::prelude::*;

/// Queries per block: a multiple of the kernel's 6-row register tile.
pub(super) const QB: usize = 48;
/// Panels per block (256 rows): a block of base rows stays in L2 while every
/// query of the block passes over it.
const PB: usize = 16;

/// Multiply-adds below which an exact top-k runs on the calling thread:
/// about 0.1 ms of one core's work. Under it, handing the scan to the
/// pool costs more than it saves (waking workers, a latch, a merge), and
/// in a server, where many small searches run at once on their own
/// threads, it takes cores from the other requests.
const SERIAL_MACS: usize = 2 << 20;

/// Runs the tile kernel for the `nq` row-major queries `q` over panels
/// `p_lo..p_hi`, [`PB`] panels at a time, and hands each block to
/// `visit(row0, valid, tile, width)`: `tile[r * width + c]` is the score
/// of query `r` with row `row0 + c`, for `c < valid`.
pub(super) fn for_each_tile(
    isa: Isa,
    q: &[f32],
    nq: usize,
    panels: &Panels,
    (p_lo, p_hi): (usize, usize),
    mut visit: impl FnMut(usize, usize, &mut [f32], usize),
) {
    let n = panels.len();
    let mut tile = vec![0f32; nq * PB * PANEL];
    let mut scratch = Vec::new();
    let mut p = p_lo;
    while p < p_hi {
        let np = (p_hi - p).min(PB);
        let width = np * PANEL;
        tile_scores(isa, q, nq, panels, p, np, &mut tile, &mut scratch);
        let row0 = p * PANEL;
        visit(row0, (n - row0).min(width), &mut tile, width);
        p += np;
    }
}

/// Scans the `heaps.len()` queries from `q0` against panels `p_lo..p_hi`
/// into `heaps`.
fn scan_block(
    isa: Isa,
    queries: &[f32],
    q0: usize,
    base: &BaseRef<'_>,
    panels: (usize, usize),
    heaps: &mut [Reservoir],
) {
    let d = base.panels.dim();
    let nq = heaps.len();
    let qs = &queries[q0 * d..(q0 + nq) * d];
    for_each_tile(isa, qs, nq, base.panels, panels, |row0, valid, out, width| {
        for (qi, heap) in heaps.iter_mut().enumerate() {
            let scores = &mut out[qi * width..qi * width + valid];
            add_bias(scores, base.bias, row0);
            let mut thr = heap.threshold();
            for (ci, chunk) in scores.chunks(PANEL).enumerate() {
                // Most chunks hold nothing above the k-th best: one
                // vectorised test rejects them without per-score branches.
                if !any_ge(chunk, thr) {
                    continue;
                }
                for (c, &s) in chunk.iter().enumerate() {
                    if s >= thr {
                        let row = row0 + ci * PANEL + c;
                        if base.alive.is_none_or(|a| a.get(row)) {
                            heap.push(Cand {
                                score: s,
                                id: base.id(row),
                                row: row as u32,
                            });
                            thr = heap.threshold();
                        }
                    }
                }
            }
        }
    });
}

/// [`crate::Compute::top_k`].
pub(super) fn top_k(isa: Isa, queries: &[f32], base: BaseRef<'_>, k: usize) -> Vec<Vec<Cand>> {
    let d = base.panels.dim();
    if d == 0 {
        return Vec::new();
    }
    let nq = queries.len() / d;
    let np = base.panels.panels();
    // No query gets more than every row.
    let k = k.min(base.panels.len());
    if nq == 0 {
        return Vec::new();
    }
    if np == 0 || k == 0 {
        return vec![Vec::new(); nq];
    }
    if k == 1 && d <= 32 && base.ids.is_none() && base.alive.is_none() {
        // Nearest-centroid at small dimension (k-means, PQ): fused kernel.
        let chunk = 1024;
        return queries
            .par_chunks(chunk * d)
            .map(|q| argmax_rows(isa, q, base.panels, base.bias))
            .collect::<Vec<_>>()
            .into_iter()
            .flat_map(|(r, s)| r.into_iter().zip(s))
            .map(|(row, score)| {
                vec![Cand {
                    score,
                    id: row as u64,
                    row,
                }]
            })
            .collect();
    }
    let qblocks = nq.div_ceil(QB);
    let serial = nq.saturating_mul(base.panels.len()).saturating_mul(d) < SERIAL_MACS;
    let threads = rayon::current_num_threads().max(1);
    // Enough tasks to keep every thread busy: split the base when there
    // are few query blocks (the single-query latency case).
    let splits = if serial || qblocks >= 2 * threads {
        1
    } else {
        (2 * threads).div_ceil(qblocks).min(np.div_ceil(4)).max(1)
    };
    let per_split = np.div_ceil(splits);
    let scan = |qb: usize, s: usize| -> Vec<Reservoir> {
        let q0 = qb * QB;
        let nqb = (nq - q0).min(QB);
        let mut heaps = vec![Reservoir::new(k); nqb];
        let lo = s * per_split;
        let hi = ((s + 1) * per_split).min(np);
        if lo < hi {
            scan_block(isa, queries, q0, &base, (lo, hi), &mut heaps);
        }
        heaps
    };
    if splits == 1 {
        // Each task sees the whole base: its lists are final, so they
        // are sorted in the task (in parallel, unless small) and nothing
        // is merged.
        let sorted = |qb: usize| -> Vec<Vec<Cand>> { scan(qb, 0).into_iter().map(Reservoir::into_sorted).collect() };
        let blocks: Vec<Vec<Vec<Cand>>> = if serial {
            (0..qblocks).map(sorted).collect()
        } else {
            (0..qblocks).into_par_iter().map(sorted).collect()
        };
        return blocks.into_iter().flatten().collect();
    }
    let tasks: Vec<(usize, usize)> = (0..qblocks).flat_map(|qb| (0..splits).map(move |s| (qb, s))).collect();
    let partial: Vec<(usize, Vec<Reservoir>)> = tasks.into_par_iter().map(|(qb, s)| (qb, scan(qb, s))).collect();
    let mut merged: Vec<Reservoir> = vec![Reservoir::new(k); nq];
    for (qb, heaps) in partial {
        for (i, h) in heaps.into_iter().enumerate() {
            merged[qb * QB + i].merge(h);
        }
    }
    merged.into_par_iter().map(Reservoir::into_sorted).collect()
}

/// Adds the per-row `bias` (if any) to the scores of rows `row0..`.
fn add_bias(scores: &mut [f32], bias: Option<&[f32]>, row0: usize) {
    if let Some(bias) = bias {
        let n = scores.len();
        for (s, b) in scores.iter_mut().zip(&bias[row0..row0 + n]) {
            *s += b;
        }
    }
}

/// Nearest centroid at large dimension (the coarse k-means and IVF
/// assignment): the tile kernel with a running best per point, the same
/// scores and the same winner (the smaller row on equal scores) as a
/// top-1 [`top_k`], without a candidate list per point. Rows and scores
/// per block of points, in order.
fn assign_by_tiles(isa: Isa, points: &[f32], centroids: &Panels, bias: Option<&[f32]>) -> Vec<(Vec<u32>, Vec<f32>)> {
    let d = centroids.dim();
    let nq = points.len() / d;
    let np = centroids.panels();
    let block = |qs: &[f32]| -> (Vec<u32>, Vec<f32>) {
        let nqb = qs.len() / d;
        let mut rows = vec![0u32; nqb];
        let mut best = vec![f32::NEG_INFINITY; nqb];
        for_each_tile(isa, qs, nqb, centroids, (0, np), |row0, valid, out, width| {
            for (qi, (row, top)) in rows.iter_mut().zip(best.iter_mut()).enumerate() {
                let scores = &mut out[qi * width..qi * width + valid];
                add_bias(scores, bias, row0);
                for (c, &s) in scores.iter().enumerate() {
                    // Strictly greater: rows arrive in order, so a tie keeps the smaller.
                    if s > *top {
                        *top = s;
                        *row = (row0 + c) as u32;
                    }
                }
            }
        });
        (rows, best)
    };
    let serial = nq.saturating_mul(centroids.len()).saturating_mul(d) < SERIAL_MACS;
    if serial {
        points.chunks(QB * d).map(block).collect()
    } else {
        points.par_chunks(QB * d).map(block).collect()
    }
}

/// [`crate::Compute::assign`].
pub(super) fn assign(cpu: &CpuCompute, points: &[f32], centroids: &Panels, metric: Metric) -> (Vec<u32>, Vec<f32>) {
    let d = centroids.dim();
    if d == 0 || centroids.is_empty() {
        return assign_by_top_k(cpu, points, centroids, metric);
    }
    let bias = l2_bias(centroids, metric);
    let parts = if d > 32 {
        assign_by_tiles(cpu.isa(), points, centroids, bias.as_deref())
    } else {
        // Small dimension (PQ sub-spaces, k-means on them): the fused
        // argmax kernel straight into two flat vectors, with no per-point
        // candidate lists (allocating one per point cost more than the
        // arithmetic for 16-centroid codebooks).
        points
            .par_chunks(1024 * d)
            .map(|q| argmax_rows(cpu.isa(), q, centroids, bias.as_deref()))
            .collect()
    };
    let mut rows = Vec::with_capacity(points.len() / d);
    let mut scores = Vec::with_capacity(points.len() / d);
    for (r, s) in parts {
        rows.extend(r);
        scores.extend(s);
    }
    (rows, scores)
}

/// [`crate::Compute::matmul_nt`].
pub(super) fn matmul_nt(isa: Isa, a: &[f32], b: &Panels) -> Vec<f32> {
    let d = b.dim();
    let nb = b.len();
    if d == 0 || nb == 0 {
        return Vec::new();
    }
    let mut out = vec![0f32; a.len() / d * nb];
    out.par_chunks_mut(QB * nb).enumerate().for_each(|(blk, chunk)| {
        let q0 = blk * QB;
        let nq = chunk.len() / nb;
        for_each_tile(
            isa,
            &a[q0 * d..(q0 + nq) * d],
            nq,
            b,
            (0, b.panels()),
            |c0, valid, tile, width| {
                for r in 0..nq {
                    chunk[r * nb + c0..r * nb + c0 + valid].copy_from_slice(&tile[r * width..r * width + valid]);
                }
            },
        );
    });
    out
}

/// True when some score reaches `thr`. Branch-free, so it vectorises (a
/// `max` fold would be a serial dependency chain).
#[inline]
fn any_ge(chunk: &[f32], thr: f32) -> bool {
    let mut hit = false;
    for &x in chunk {
        hit |= x >= thr;
    }
    hit
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Precision;
    use crate::compute::Compute;
    use crate::rng::Rng;

    /// The fused assignment at large dimension picks exactly what a top-1
    /// search picks: same rows (the smaller one on a tie), same scores,
    /// serial and parallel, cosine and L2, partial panels and blocks.
    #[test]
    fn tiled_assignment_matches_top_one() {
        let mut r = Rng::new(5);
        for &(nq, n, d) in &[(100, 300, 40), (2_000, 300, 40), (7, 33, 64)] {
            let points: Vec<f32> = (0..nq * d).map(|_| r.normal()).collect();
            let mut rows: Vec<f32> = (0..n * d).map(|_| r.normal()).collect();
            let dup = rows[2 * d..3 * d].to_vec();
            rows[20 * d..21 * d].copy_from_slice(&dup);
            // A point equal to the duplicated centroid: a certain tie.
            let mut points = points;
            points[..d].copy_from_slice(&dup);
            let panels = Panels::from_rows(&rows, d, Precision::F32);
            for isa in Isa::available() {
                let cpu = CpuCompute::with_isa(isa).unwrap();
                for metric in [Metric::Cosine, Metric::L2] {
                    let (got_rows, got_scores) = cpu.assign(&points, &panels, metric);
                    let (want_rows, want_scores) = assign_by_top_k(&cpu, &points, &panels, metric);
                    assert_eq!(got_rows, want_rows, "{isa:?} {metric:?} {nq}x{n}x{d}");
                    assert_eq!(got_scores, want_scores, "{isa:?} {metric:?} {nq}x{n}x{d}");
                    assert_eq!(got_rows[0], 2, "tie must go to the smaller row");
                }
            }
        }
    }
}
