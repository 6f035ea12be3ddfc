//! Batched similarity with top-k on the device (`shaders/topk.wgsl`: tiled
//! scores, per-segment selection, merge-path merges), score matrices, and
//! the candidate decoding every top-k kernel shares.

use crate::device::{Gpu, Kernel, wgsl, words};
use crate::error::{GpuError, Result};
use crate::resident::{ResidentBase, alive_words};
use crate::{GemmShape, GpuState};
use dentate_core::BaseRef;
use dentate_core::simd::PANEL;
use dentate_core::topk::Cand;
use std::sync::Arc;

/// Largest `k` on the device (exact search, the PQ scans, the re-rank):
/// lists are sorted per segment and merged, with no per-thread list.
pub const MAX_EXACT_K: usize = 4096;
/// Bytes of one candidate (`Cand` in the shaders: score, row, id lo, id hi).
pub(crate) const CAND_BYTES: u64 = 16;
const NONE: u32 = u32::MAX;
/// Rows of one `gemm` tile (the shader's `BR`).
pub(crate) const TILE_ROWS: usize = 128;
/// Bytes of scores, and of partial lists, one batch keeps on the device.
pub(crate) const BATCH_BYTES: u64 = 512 << 20;

/// Scores per `segsel` segment: the largest power of two from 1,024 to
/// 4,096 whose keys and rows (8 bytes each) and histogram fit the
/// adapter's workgroup memory (WebGPU's 16 KiB minimum gives 1,024).
pub(crate) fn seg_len(gpu: &Gpu) -> usize {
    let mem = gpu.limits.max_compute_workgroup_storage_size as usize;
    let mut seg = 4096;
    while seg > 1024 && 8 * seg + 2048 > mem {
        seg /= 2;
    }
    seg
}

/// Queries per thread of `gemm` for a batch of `nq` (a tile is 16 or 8 × that
/// many queries): the shape's register tile (4 or 8 queries × 8 rows) once
/// the batch fills a tile of them, one query per thread below. 8-query
/// tiles only over `transposed` queries (one vec4 load per four queries
/// staged): over query rows, four scalar loads each, they measured slower
/// than 4-query tiles on an H200 (BENCHMARKS.md).
pub(crate) fn queries_per_thread(gpu: &Gpu, nq: usize, transposed: bool) -> usize {
    match gemm_shape(gpu).queries {
        8 if transposed && nq >= 96 => 8,
        _ if nq >= 48 => 4,
        _ => 1,
    }
}

/// Floats per dimension of a transposed batch of `nq` queries staged by
/// tiles of `tile` queries: whole tiles, so no load passes the end.
fn transposed_stride(nq: usize, tile: usize) -> usize {
    nq.next_multiple_of(tile)
}

/// Threads of a `gemm` workgroup: the shape's (256, or 128 where its
/// slabs are 16 dimensions).
fn gemm_threads(gpu: &Gpu) -> usize {
    gemm_shape(gpu).threads as usize
}

/// Queries of a `gemm` tile with `tq` queries a thread (16 threads share
/// a query's 128 rows).
pub(crate) fn tile_queries(gpu: &Gpu, tq: usize) -> usize {
    gemm_threads(gpu) / 16 * tq
}

/// Queries per batch whose transposed copy (`d` × [`transposed_stride`]
/// floats, whatever tile the batch gets) fits one binding of `maxb` bytes;
/// 0 when not even 16 do.
fn transposed_batch(maxb: u64, d: usize) -> usize {
    let fit = (maxb / (d as u64 * 4)) as usize;
    match fit {
        // 8-query tiles (from 96 queries) pad to 128.
        128.. => fit / 128 * 128,
        // Below 48 queries tiles are 16 queries.
        48.. => 47,
        _ => fit / 16 * 16,
    }
}

/// `queries` (rows of `d`) as [dimension][query] with `qt` floats per
/// dimension, zero past the queries: each vec4 `gemm` stages is one aligned
/// load.
fn transposed_queries(queries: &[f32], d: usize, qt: usize) -> Vec<f32> {
    let mut out = vec![0f32; d * qt];
    for (q, row) in queries.chunks_exact(d).enumerate() {
        for (j, &x) in row.iter().enumerate() {
            out[j * qt + q] = x;
        }
    }
    out
}

/// Queries as rows padded to whole vec4s.
fn padded_queries(queries: &[f32], d: usize) -> (Vec<f32>, usize) {
    let dp = d.next_multiple_of(4);
    if dp == d {
        return (queries.to_vec(), dp / 4);
    }
    let mut out = vec![0f32; queries.len() / d * dp];
    for (dst, src) in out.chunks_exact_mut(dp).zip(queries.chunks_exact(d)) {
        dst[..d].copy_from_slice(src);
    }
    (out, dp / 4)
}

/// Candidates from the device layout; sentinels dropped, at most `k`.
pub(crate) fn decode(bytes: &[u8], nq: usize, kk: usize, k: usize) -> Vec<Vec<Cand>> {
    let w: Vec<u32> = bytemuck::pod_collect_to_vec(bytes);
    (0..nq)
        .map(|q| {
            w[q * kk * 4..(q + 1) * kk * 4]
                .chunks_exact(4)
                .filter(|c| c[1] != NONE)
                .take(k)
                .map(|c| Cand {
                    score: f32::from_bits(c[0]),
                    id: (u64::from(c[3]) << 32) | u64::from(c[2]),
                    row: c[1],
                })
                .collect()
        })
        .collect()
}

/// Sorted candidate lists on the device: `stride` lists of K slots per
/// query, the first `count` of them in use, with their lengths in `lens`.
struct Lists {
    cands: wgpu::Buffer,
    lens: wgpu::Buffer,
    stride: usize,
    count: usize,
}

/// Merges of sorted lists of `kk` slots for `nq` queries (`topk.wgsl`
/// `merge`), recorded into an encoder.
struct Merger<'g> {
    gpu: &'g Gpu,
    pipe: Arc<Kernel>,
    nq: usize,
    kk: usize,
}

impl<'g> Merger<'g> {
    async fn new(gpu: &'g Gpu, nq: usize, kk: usize) -> Result<Self> {
        let pipe = exact_pipeline(gpu, "merge", 1, false).await?;
        Ok(Merger { gpu, pipe, nq, kk })
    }

    /// One dispatch: output list i of each query merges list
    /// `i·step + a_off` of `a` with list `i·step + b_off` of `b`; `pad`:
    /// fill the output's slots past its length with NONE rows.
    fn pass(
        &self,
        enc: &mut wgpu::CommandEncoder,
        (a, b, out): (&Lists, &Lists, &Lists),
        (step, a_off, b_off): (usize, usize, usize),
        pad: bool,
    ) {
        let gpu = self.gpu;
        let params = gpu.uniform(&words(&[
            a.stride as u32,
            b.stride as u32,
            a.count as u32,
            b.count as u32,
            out.stride as u32,
            step as u32,
            a_off as u32,
            b_off as u32,
            self.nq as u32,
            self.kk as u32,
            u32::from(pad),
            0,
        ]));
        let bind = gpu.bind(
            &self.pipe,
            &[
                (8, &params),
                (9, &a.cands),
                (10, &out.cands),
                (13, &b.cands),
                (14, &a.lens),
                (15, &b.lens),
                (16, &out.lens),
            ],
        );
        gpu.dispatch(enc, &self.pipe, &bind, (out.count as u32, self.nq as u32));
    }

    /// Passes that fold the lists of `first` (with lengths) down to one per
    /// query, pairwise, each pass halving them; returns where it lies.
    fn fold(&self, enc: &mut wgpu::CommandEncoder, first: Lists) -> Lists {
        let mut cur = first;
        while cur.count > 1 {
            let out_count = cur.count.div_ceil(2);
            let out = Lists {
                cands: self
                    .gpu
                    .zeroed("merged", (self.nq * out_count * self.kk) as u64 * CAND_BYTES),
                lens: self.gpu.zeroed("merged lengths", (self.nq * out_count) as u64 * 4),
                stride: out_count,
                count: out_count,
            };
            self.pass(enc, (&cur, &cur, &out), (2, 0, 1), false);
            cur = out;
        }
        cur
    }
}

/// The best `kk` of each of `nq` queries' `len` (score bits, global row)
/// pairs in `pairs` (`len` per query; NEG scores are no candidates), ids
/// in `ids` (two words per row): `segsel` over segments of the pairs and
/// merges down to one list per query, padded to `kk` with NONE rows;
/// recorded into `enc`. Returns the lists' buffer (`kk` slots per query).
pub(crate) async fn select_pairs(
    gpu: &Gpu,
    enc: &mut wgpu::CommandEncoder,
    (pairs, ids): (&wgpu::Buffer, &wgpu::Buffer),
    nq: usize,
    len: usize,
    kk: usize,
) -> Result<wgpu::Buffer> {
    let seg = seg_len(gpu);
    let segs = len.div_ceil(seg).max(1);
    let sel = exact_pipeline(gpu, "segsel", 1, false).await?;
    let merger = Merger::new(gpu, nq, kk).await?;
    let params = Params {
        d: 0,
        dp4: 0,
        n: len,
        blk0: 0,
        blk_rows: len,
        nq,
        q0: 0,
        stride: len,
        col0: 0,
        flags: 1 | 16,
        row0: 0,
        lists: segs,
        a0: 0,
        k: kk,
        qt: 0,
    }
    .uniform(gpu);
    let partial = Lists {
        cands: gpu.zeroed("segment lists", (nq * segs * kk) as u64 * CAND_BYTES),
        lens: gpu.zeroed("segment lengths", (nq * segs) as u64 * 4),
        stride: segs,
        count: segs,
    };
    let threshold = gpu.zeroed("thresholds", nq as u64 * 4);
    // Bindings `segsel` declares but does not read in this mode.
    let (scores, kept) = (gpu.zeroed("unused", 16), gpu.zeroed("unused", 16));
    let bind = bind_select(gpu, &sel, (&params, ids), &partial, [&scores, &threshold, pairs, &kept]);
    gpu.dispatch(enc, &sel, &bind, (segs as u32, nq as u32));
    let folded = merger.fold(enc, partial);
    let out = Lists {
        cands: gpu.zeroed("best", (nq * kk) as u64 * CAND_BYTES),
        lens: gpu.zeroed("best lengths", nq as u64 * 4),
        stride: 1,
        count: 1,
    };
    let none = Lists {
        cands: scores.clone(),
        lens: scores,
        stride: 1,
        count: 0,
    };
    merger.pass(enc, (&folded, &none, &out), (0, 0, 0), true);
    Ok(out.cands)
}

/// A bind group of `segsel` or `survsel` (the bindings they share):
/// `params` and the ids (`Params`, `ids`), the lists they write (`out`),
/// and `[block scores, thresholds, survivors or scored pairs, survivor
/// counts]`.
fn bind_select(
    gpu: &Gpu,
    pipe: &Kernel,
    (params, ids): (&wgpu::Buffer, &wgpu::Buffer),
    out: &Lists,
    [scores, threshold, pairs, kept]: [&wgpu::Buffer; 4],
) -> wgpu::BindGroup {
    gpu.bind(
        pipe,
        &[
            (0, params),
            (3, ids),
            (6, &out.cands),
            (7, scores),
            (11, &out.lens),
            (12, threshold),
            (18, pairs),
            (19, kept),
        ],
    )
}

/// How a batch of exact search is cut: `nb` queries, blocks of `rows`
/// scores per query (whole segments).
struct Batch {
    nb: usize,
    rows: usize,
}

/// Rows per block that a batch aims for: long blocks mean few merges of
/// the running lists (one per block), which dominate at large `k`.
const BLOCK_ROWS: usize = 1 << 17;

/// A batch of at most `nq` queries: blocks of up to [`BLOCK_ROWS`] rows
/// (whole segments, within a chunk and one dispatch), then as many queries
/// as keep the block's scores, partial lists and survivors (a segment's
/// worth a query) each within [`BATCH_BYTES`] and one binding (at least
/// one query).
fn batch(nq: usize, n: usize, chunk_rows: usize, kk: usize, maxb: u64, max_groups: usize, seg: usize) -> Batch {
    let budget = BATCH_BYTES.min(maxb);
    let rows = n
        .min(chunk_rows)
        .min(max_groups * TILE_ROWS)
        .min(BLOCK_ROWS)
        .next_multiple_of(seg);
    let per_query = (rows as u64 * 4)
        .max((rows / seg * kk) as u64 * CAND_BYTES)
        .max(seg as u64 * 8);
    let nb = nq.min(max_groups).min((budget / per_query) as usize).max(1);
    Batch { nb, rows }
}

impl GpuState {
    /// Top-k of every query against `base` on the device: per batch of
    /// queries and block of rows, `gemm` writes the block's scores, `segsel`
    /// sorts each segment's survivors of the running threshold, and merges
    /// fold the segments' lists into the running best `k` of each query.
    pub(crate) async fn top_k(&mut self, queries: &[f32], base: &BaseRef<'_>, k: usize) -> Result<Vec<Vec<Cand>>> {
        if k > MAX_EXACT_K {
            return Err(GpuError::Unsupported(format!("k = {k} > {MAX_EXACT_K}")));
        }
        let d = base.panels.dim();
        let nq = queries.len() / d;
        let n = base.panels.len();
        let kk = k.max(1);
        let dp4 = d.div_ceil(4);
        let gpu = &self.gpu;
        let res = self
            .bases
            .get(base.uid, |r| r.sync(gpu, base), || ResidentBase::new(gpu, base))?;
        let chunk_rows = res.vecs.chunk_rows();
        let f16 = matches!(base.panels.data(), dentate_core::Floats::F16(_));
        let maxb = gpu.max_binding();
        let by_queries = transposed_batch(maxb, d);
        if by_queries == 0 {
            return Err(GpuError::Unsupported(format!(
                "16 queries of {d} dimensions exceed one storage binding"
            )));
        }
        // The GEMM reads a tombstone bit and a bias for every row (without
        // bounds checks in an `unchecked` shape): both must cover the base.
        if base.alive.is_some_and(|a| a.len() < n) || base.bias.is_some_and(|b| b.len() < n) {
            return Err(GpuError::Unsupported(format!(
                "tombstones or biases cover fewer than the base's {n} rows"
            )));
        }
        let seg = seg_len(gpu);
        let sel = exact_pipeline(gpu, "segsel", 1, false).await?;
        let survsel = exact_pipeline(gpu, "survsel", 1, false).await?;
        let mut out = Vec::with_capacity(nq);
        let mut in_flight = None;
        let mut q0 = 0;
        while q0 < nq {
            let b = batch(
                (nq - q0).min(by_queries),
                n,
                chunk_rows,
                kk,
                maxb,
                gpu.max_groups() as usize,
                seg,
            );
            let nb = b.nb;
            let segs = b.rows / seg;
            let tq = queries_per_thread(gpu, nb, true);
            let qt = transposed_stride(nb, tile_queries(gpu, tq));
            let gemm = exact_pipeline(gpu, "gemm", tq, f16).await?;
            let gemm_keep = exact_pipeline(gpu, "gemm_keep", tq, f16).await?;
            let merger = Merger::new(gpu, nb, kk).await?;
            let dummy = gpu.zeroed("unused", 16);
            let qbuf = gpu.storage(
                "queries",
                bytemuck::cast_slice(&transposed_queries(&queries[q0 * d..(q0 + nb) * d], d, qt)),
            );
            // Scratch: `segsel` reads only scores `gemm` wrote, `merge` only
            // the slots within the lengths `segsel` wrote.
            let scores = gpu.scratch("scores", (nb * b.rows) as u64 * 4);
            let partial_cands = gpu.scratch("segment lists", (nb * segs * kk) as u64 * CAND_BYTES);
            let partial_lens = gpu.zeroed("segment lengths", (nb * segs) as u64 * 4);
            let threshold = gpu.zeroed("thresholds", nb as u64 * 4);
            // After the first block `gemm_keep` compacts each query's scores
            // at or above its threshold (few, once it is set) into `surv`,
            // and `survsel` sorts them into one list per query; `segsel`
            // reads the whole block only for a query with more than a
            // segment's worth. Scratch: `survsel` reads only the slots
            // below the count, which `gemm_keep` wrote.
            let surv = gpu.scratch("survivors", (nb * seg) as u64 * 8);
            let kept = gpu.zeroed("survivor counts", nb as u64 * 4);
            let surv_best = Lists {
                cands: gpu.zeroed("survivor lists", (nb * kk) as u64 * CAND_BYTES),
                lens: gpu.zeroed("survivor list lengths", nb as u64 * 4),
                stride: 1,
                count: 1,
            };
            let running = || Lists {
                cands: gpu.zeroed("best", (nb * kk) as u64 * CAND_BYTES),
                lens: gpu.zeroed("best lengths", nb as u64 * 4),
                stride: 1,
                count: 1,
            };
            let (mut best, mut spare) = (running(), running());
            let mut enc = gpu.encoder();
            for c in 0..res.vecs.chunks() {
                let row0 = c * chunk_rows;
                if row0 >= n {
                    break;
                }
                let rows = (n - row0).min(chunk_rows);
                let mut flags = 0u32;
                let ids = match &res.ids {
                    Some(ids) => {
                        flags |= 1;
                        ids.chunk(c)
                    }
                    None => &dummy,
                };
                let alive_buf = match base.alive {
                    Some(a) => {
                        flags |= 2;
                        let w = a.words().len();
                        let range = ((row0 / 64).min(w), (row0 + rows).div_ceil(64).min(w));
                        Some(alive_words(&mut self.alive, gpu, a, range)?)
                    }
                    None => None,
                };
                let bias_buf = base.bias.map(|b| {
                    flags |= 4;
                    gpu.storage("bias", bytemuck::cast_slice(&b[row0..row0 + rows]))
                });
                let mut blk0 = 0;
                while blk0 < rows {
                    // The batch's first block is two segments: it sets every
                    // query's threshold before a long block's segments all
                    // start from none (each would then radix-select).
                    let first = c == 0 && blk0 == 0;
                    let blk_rows = (rows - blk0).min(if first { 2 * seg } else { b.rows });
                    let keep = !first;
                    let params = Params {
                        d,
                        dp4,
                        n: rows,
                        blk0,
                        blk_rows,
                        nq: nb,
                        q0: 0,
                        stride: b.rows,
                        col0: 0,
                        flags: if keep { flags | 8 } else { flags },
                        row0,
                        lists: segs,
                        a0: 0,
                        k: kk,
                        qt,
                    }
                    .uniform(gpu);
                    let inputs = [
                        res.vecs.chunk(c),
                        &qbuf,
                        alive_buf.as_ref().unwrap_or(&dummy),
                        bias_buf.as_ref().unwrap_or(&dummy),
                    ];
                    let grid = (blk_rows, nb.div_ceil(tile_queries(gpu, tq)));
                    if keep {
                        let sel = [(12, &threshold), (18, &surv), (19, &kept)];
                        record_gemm(gpu, &mut enc, &gemm_keep, &params, inputs, &scores, grid, &sel);
                    } else {
                        record_gemm(gpu, &mut enc, &gemm, &params, inputs, &scores, grid, &[]);
                    }
                    let select = |pipe: &Kernel, out: &Lists| {
                        bind_select(gpu, pipe, (&params, ids), out, [&scores, &threshold, &surv, &kept])
                    };
                    let partial = Lists {
                        cands: partial_cands.clone(),
                        lens: partial_lens.clone(),
                        stride: segs,
                        count: blk_rows.div_ceil(seg),
                    };
                    let bind = select(&sel, &partial);
                    // After the first block one workgroup takes each query's
                    // segments (only an overflowing query has any to select).
                    let per_query = if keep { 1 } else { partial.count as u32 };
                    gpu.dispatch(&mut enc, &sel, &bind, (per_query, nb as u32));
                    if keep {
                        let bind = select(&survsel, &surv_best);
                        gpu.dispatch(&mut enc, &survsel, &bind, (nb as u32, 1));
                    }
                    let block = merger.fold(&mut enc, partial);
                    // The running best, merged with the block's (and its
                    // survivors'), padded to K.
                    merger.pass(&mut enc, (&best, &block, &spare), (0, 0, 0), true);
                    std::mem::swap(&mut best, &mut spare);
                    if keep {
                        merger.pass(&mut enc, (&best, &surv_best, &spare), (0, 0, 0), true);
                        std::mem::swap(&mut best, &mut spare);
                    }
                    blk0 += blk_rows;
                }
            }
            // The next batch is recorded while the device runs this one;
            // its read-back (and the pool's copy of its scratch) waits
            // until then.
            let read = gpu.submit_read(enc, &best.cands, 0, (nb * kk) as u64 * CAND_BYTES)?;
            if let Some((prev, prev_nb, scratch)) = in_flight.replace((read, nb, [scores, partial_cands, surv])) {
                out.extend(decode(&prev.read(gpu).await?, prev_nb, kk, k));
                gpu.recycle(scratch);
            }
            q0 += nb;
        }
        if let Some((last, last_nb, scratch)) = in_flight {
            out.extend(decode(&last.read(gpu).await?, last_nb, kk, k));
            gpu.recycle(scratch);
        }
        Ok(out)
    }

    /// `a · bᵀ` on the device: `gemm` writing each chunk's blocks of
    /// columns straight into the score matrix.
    pub(crate) async fn matmul_nt(&mut self, a: &[f32], b: &BaseRef<'_>) -> Result<Vec<f32>> {
        let d = b.panels.dim();
        let nq = a.len() / d;
        let n = b.panels.len();
        let (qpad, dp4) = padded_queries(a, d);
        let row_bytes = n as u64 * 4;
        let f16 = matches!(b.panels.data(), dentate_core::Floats::F16(_));
        let gpu = &self.gpu;
        let maxb = gpu.max_binding();
        if row_bytes > maxb {
            return Err(GpuError::Unsupported(format!(
                "a score row of {n} columns exceeds one binding"
            )));
        }
        let res = self
            .bases
            .get(b.uid, |r| r.sync(gpu, b), || ResidentBase::new(gpu, b))?;
        let chunk_rows = res.vecs.chunk_rows();
        let max_groups = gpu.max_groups() as usize;
        let mut out = Vec::with_capacity(nq * n);
        let mut q0 = 0;
        while q0 < nq {
            let nb = (nq - q0)
                .min((maxb / row_bytes.max(4)) as usize)
                .min((maxb / (dp4 as u64 * 16)) as usize)
                .min(max_groups)
                .max(1);
            let tq = queries_per_thread(gpu, nb, false);
            let pipe = exact_pipeline(gpu, "gemm", tq, f16).await?;
            let qbuf = gpu.storage(
                "queries",
                bytemuck::cast_slice(&qpad[q0 * dp4 * 4..(q0 + nb) * dp4 * 4]),
            );
            // Scratch: `gemm` writes every column of every row read back.
            let mat = gpu.scratch("scores", nb as u64 * row_bytes);
            let dummy = gpu.zeroed("unused", 16);
            let mut enc = gpu.encoder();
            for c in 0..res.vecs.chunks() {
                let row0 = c * chunk_rows;
                if row0 >= n {
                    break;
                }
                let rows = (n - row0).min(chunk_rows);
                let mut blk0 = 0;
                while blk0 < rows {
                    let blk_rows = (rows - blk0).min(max_groups * TILE_ROWS);
                    let params = Params {
                        d,
                        dp4,
                        n: rows,
                        blk0,
                        blk_rows,
                        nq: nb,
                        q0: 0,
                        stride: n,
                        col0: row0 + blk0,
                        flags: 0,
                        row0,
                        lists: 0,
                        a0: 0,
                        k: 0,
                        qt: 0,
                    }
                    .uniform(gpu);
                    let inputs = [res.vecs.chunk(c), &qbuf, &dummy, &dummy];
                    record_gemm(
                        gpu,
                        &mut enc,
                        &pipe,
                        &params,
                        inputs,
                        &mat,
                        (blk_rows, nb.div_ceil(tile_queries(gpu, tq))),
                        &[],
                    );
                    blk0 += blk_rows;
                }
            }
            let bytes = gpu.submit_and_read(enc, &mat, 0, nb as u64 * row_bytes).await?;
            out.extend(bytemuck::pod_collect_to_vec::<u8, f32>(&bytes));
            gpu.recycle([mat]);
            q0 += nb;
        }
        Ok(out)
    }
}

/// The shape `gemm` runs with on `gpu`: the one asked for, with slabs of
/// 16 dimensions where 32 do not fit the workgroup memory (the slab × the
/// register tile's 16 × queries and 128 rows, f32), 4-query tiles where
/// 8 do not fit with slabs of 16 (16 KiB), and 256 threads with slabs of
/// 32.
pub(crate) fn gemm_shape(gpu: &Gpu) -> GemmShape {
    let mut shape = gpu.gemm;
    let mem = u64::from(gpu.limits.max_compute_workgroup_storage_size);
    let need = |slab: u32, queries: u32| u64::from(slab) * (16 * u64::from(queries) + TILE_ROWS as u64) * 4;
    if shape.slab != 16 && need(shape.slab, shape.queries) > mem {
        shape.slab = 16;
    }
    if shape.queries == 8 && need(shape.slab, 8) > mem {
        shape.queries = 4;
    }
    // 128 threads stage a slab of 32 dimensions in more vec4s than a
    // thread holds.
    if shape.slab != 16 {
        shape.threads = 256;
    }
    shape
}

/// The `gemm` or `segsel` pipeline of a variant.
pub(crate) async fn exact_pipeline(gpu: &Gpu, entry: &str, tq: usize, f16: bool) -> Result<Arc<Kernel>> {
    let shape = gemm_shape(gpu);
    let consts = [
        ("TQ", format!("{tq}u")),
        ("WG", format!("{}u", gemm_threads(gpu))),
        ("F16", f16.to_string()),
        ("SEG", format!("{}u", seg_len(gpu))),
        ("BK", format!("{}u", shape.slab)),
        ("PF", shape.prefetch.to_string()),
    ];
    if shape.unbounded {
        // SAFETY: every loop of topk.wgsl ends. `gemm` and `gemm_keep`
        // (`tile`, `emit`, `emit_keep`): constants (BK, 4) or the dimension
        // P.d stepped by BK, and P.d is at most 2^29 (a row of d floats
        // fits a storage binding of at most 2^31 bytes, which the host
        // checks before any dispatch), so k0 never wraps past it.
        // `best_col`: P.stride (a row of scores within a binding) stepped
        // by 64. `segsel`, `survsel` (`select_best`): items bounded by SEG
        // (`min` with the segment's end; `survsel` returns above SEG)
        // stepped by 256, halvings to 0, four radix digits, a histogram
        // walk that stops at bucket 0, powers of two up to SEG, and the
        // block's segments (a count, stepped by 1). `merge`: slots below
        // K (lists of K candidates within a binding: K < 2^27) stepped by
        // 64, and a binary search whose interval shrinks every step.
        if shape.unchecked && (entry == "gemm" || entry == "gemm_keep") {
            // SAFETY: the loops as above. Indices: workgroup slabs by
            // li (< WG) plus constant multiples of WG below the slab's
            // size, and by kk < BK and tr < 16 in `tile`; the base only
            // below the chunk's panels and dimension (`load_base`), the
            // queries only for dimensions below P.d and query slots the
            // host zero-padded to P.qt (or below P.nq), scores, bias,
            // alive bits and thresholds only for queries below P.nq and
            // rows below the block's end, which the host sizes each
            // binding for; survivors only below SEG a query.
            return unsafe { gpu.pipeline_unchecked(wgsl::TOPK, entry, &consts) }.await;
        }
        return unsafe { gpu.pipeline_unbounded(wgsl::TOPK, entry, &consts) }.await;
    }
    gpu.pipeline(wgsl::TOPK, entry, &consts, &[], false).await
}

/// The `Params` block of `topk.wgsl` (the shader names each field).
pub(crate) struct Params {
    pub d: usize,
    pub dp4: usize,
    pub n: usize,
    pub blk0: usize,
    pub blk_rows: usize,
    pub nq: usize,
    pub q0: usize,
    pub stride: usize,
    pub col0: usize,
    pub flags: u32,
    pub row0: usize,
    pub lists: usize,
    pub a0: usize,
    pub k: usize,
    /// Floats per dimension of a transposed query buffer; 0: query rows.
    pub qt: usize,
}

impl Params {
    pub fn uniform(&self, gpu: &Gpu) -> wgpu::Buffer {
        let w = |v: usize| v as u32;
        gpu.uniform(&words(&[
            w(self.d),
            w(self.dp4),
            w(self.n),
            w(self.blk0),
            w(self.blk_rows),
            w(self.nq),
            w(self.q0),
            w(self.stride),
            w(self.col0),
            self.flags,
            w(self.row0),
            w(self.lists),
            w(self.a0),
            w(self.k),
            w(self.qt),
            0,
        ]))
    }
}

/// Records one `gemm` (or `gemm_keep`) dispatch: `inputs` = (base chunk,
/// queries, alive bits, bias), scores into `out`, `extra` the bindings of
/// the variant (`gemm_keep`: thresholds, survivors, their counts);
/// `(rows, query_tiles)` sizes the grid.
#[allow(clippy::too_many_arguments)]
pub(crate) fn record_gemm(
    gpu: &Gpu,
    enc: &mut wgpu::CommandEncoder,
    pipe: &Kernel,
    params: &wgpu::Buffer,
    inputs: [&wgpu::Buffer; 4],
    out: &wgpu::Buffer,
    (rows, query_tiles): (usize, usize),
    extra: &[(u32, &wgpu::Buffer)],
) {
    let [chunk, queries, alive, bias] = inputs;
    let mut entries = vec![(0, params), (1, chunk), (2, queries), (4, alive), (5, bias), (7, out)];
    entries.extend_from_slice(extra);
    let bind = gpu.bind(pipe, &entries);
    gpu.dispatch(enc, pipe, &bind, (rows.div_ceil(TILE_ROWS) as u32, query_tiles as u32));
}

/// Rows of panel layout per chunk are whole panels (checked at compile time).
const _: () = assert!(PANEL == 16);

#[cfg(test)]
mod tests {
    use super::{CAND_BYTES, batch, transposed_batch, transposed_stride};

    /// Every batch up to the limit, with whichever tile it gets, keeps its
    /// transposed queries within one binding.
    /// Every buffer a batch sizes by its queries fits one binding: the
    /// block's scores, the segments' lists and the survivors (a short
    /// base's block is shorter than the survivors' segment).
    #[test]
    fn batches_fit_a_binding() {
        for maxb in [128u64 << 20, 2047 << 20] {
            for seg in [1_024, 2_048, 4_096] {
                for n in [1, 2_000, 5_000, 100_000, 1_000_000] {
                    for kk in [1, 10, 1_024] {
                        let b = batch(100_000, n, 1 << 20, kk, maxb, 65_535, seg);
                        let nb = b.nb as u64;
                        let segs = (b.rows / seg) as u64;
                        for (what, bytes) in [
                            ("scores", nb * b.rows as u64 * 4),
                            ("lists", nb * segs * kk as u64 * CAND_BYTES),
                            ("survivors", nb * seg as u64 * 8),
                        ] {
                            assert!(bytes <= maxb, "{what}: {bytes} > {maxb} (n {n}, seg {seg}, k {kk})");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn transposed_batches_fit_a_binding() {
        for maxb in [64u64 << 10, 100_000, 1 << 20, 128 << 20, 2047 << 20] {
            for d in [1usize, 7, 48, 384, 520, 1024, 4096] {
                let limit = transposed_batch(maxb, d);
                if limit == 0 {
                    assert!(d as u64 * 16 * 4 > maxb, "16 queries of {d} fit {maxb}");
                    continue;
                }
                for nb in [1, 15, 16, 47, 48, 95, 96, 127, 128, 129, limit - 1, limit] {
                    if nb == 0 || nb > limit {
                        continue;
                    }
                    for tq in [1, 4, 8] {
                        let possible = match tq {
                            8 => nb >= 96,
                            4 => nb >= 48,
                            _ => true,
                        };
                        if possible {
                            // The largest tile a tq has (256 threads).
                            let bytes = (d * transposed_stride(nb, 16 * tq) * 4) as u64;
                            assert!(bytes <= maxb, "{nb} × {d} with tq {tq}: {bytes} > {maxb}");
                        }
                    }
                }
            }
        }
        // The case that overflowed when the batch was sized from query
        // rows: 520 dimensions, a 128 MiB binding.
        assert_eq!(transposed_batch(128 << 20, 520), 64_512);
    }
}
