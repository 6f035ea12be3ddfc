//! Batched similarity with top-k on the device (`shaders/topk.wgsl`), the
//! merge passes every top-k kernel shares, and score matrices.

use crate::GpuState;
use crate::device::{Gpu, wgsl, words};
use crate::error::{GpuError, Result};
use crate::resident::ResidentBase;
use dentate_core::BaseRef;
use dentate_core::simd::PANEL;
use dentate_core::topk::Cand;

/// Largest top-k list the kernels keep (k above it runs on the CPU).
pub const MAX_K: usize = 128;
/// Rows a thread scores per pass (the shader's `RPT`).
const RPT: usize = 8;
/// Lists one thread of the merge pass folds into one.
const FAN_IN: usize = 16;
/// Bytes of one candidate (`Cand` in the shaders: score, row, id lo, id hi).
pub(crate) const CAND_BYTES: u64 = 16;
const NONE: u32 = u32::MAX;

/// Slots of the top-k lists for `k`.
pub(crate) fn slots(k: usize) -> Result<usize> {
    if k > MAX_K {
        return Err(GpuError::Unsupported(format!("k = {k} > {MAX_K}")));
    }
    Ok(k.max(1).next_power_of_two())
}

/// Queries per workgroup and threads per query for a batch of `nq`.
fn shape(nq: usize) -> (usize, usize) {
    if nq >= 64 {
        (32, 8)
    } else if nq >= 8 {
        (8, 32)
    } else {
        (1, 256)
    }
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

/// Finishes a batch of `nq` queries whose kernels wrote `lists` sorted
/// lists of `kk` slots each into `partial`: merges them on the device,
/// submits `enc`, reads back the one list per query and decodes its best `k`.
#[allow(clippy::too_many_arguments)]
pub(crate) async fn finish_batch(
    gpu: &Gpu,
    mut enc: wgpu::CommandEncoder,
    partial: wgpu::Buffer,
    nq: usize,
    lists: usize,
    kk: usize,
    k: usize,
) -> Result<Vec<Vec<Cand>>> {
    let merged = merge_to_one(gpu, &mut enc, partial, nq, lists, kk).await?;
    let bytes = gpu
        .submit_and_read(enc, &merged, 0, (nq * kk) as u64 * CAND_BYTES)
        .await?;
    Ok(decode(&bytes, nq, kk, k))
}

/// Records merge passes that fold `lists` sorted lists of `kk` slots per
/// query (in `first`) down to one; returns the buffer holding the result.
pub(crate) async fn merge_to_one(
    gpu: &Gpu,
    enc: &mut wgpu::CommandEncoder,
    first: wgpu::Buffer,
    nq: usize,
    mut lists: usize,
    kk: usize,
) -> Result<wgpu::Buffer> {
    let pipe = gpu
        .pipeline(
            wgsl::TOPK,
            "merge",
            &[
                ("K", format!("{kk}u")),
                ("TQ", "1u".into()),
                ("TS", "64u".into()),
                ("F16", "false".into()),
                ("G", format!("{FAN_IN}u")),
            ],
            &[],
            false,
        )
        .await?;
    let mut cur = first;
    while lists > 1 {
        let out_lists = lists.div_ceil(FAN_IN);
        let out = gpu.zeroed("merged", (nq * out_lists * kk) as u64 * CAND_BYTES);
        let params = gpu.uniform(&words(&[lists as u32, out_lists as u32, nq as u32, 0]));
        let bind = gpu.bind(&pipe, &[(8, &params), (9, &cur), (10, &out)]);
        gpu.dispatch(enc, &pipe, &bind, (out_lists.div_ceil(64) as u32, nq as u32));
        cur = out;
        lists = out_lists;
    }
    Ok(cur)
}

struct Plan {
    tq: usize,
    ts: usize,
    rows_per_slice: usize,
    /// (chunk, first list, slices) per chunk.
    chunks: Vec<(usize, usize, usize)>,
    lists: usize,
}

fn plan(base: &ResidentBase, n: usize, nq: usize, per_query_budget: u64, kk: usize) -> Plan {
    let (tq, ts) = shape(nq);
    let tile = ts * RPT;
    let qtiles = nq.div_ceil(tq).max(1);
    let want = (1024 / qtiles).max(1);
    let mut rows_per_slice = n.div_ceil(want).max(tile).next_multiple_of(tile);
    loop {
        let chunk_rows = base.vecs.chunk_rows();
        let mut chunks = Vec::new();
        let mut lists = 0;
        let mut row0 = 0;
        let mut c = 0;
        while row0 < n {
            let rows = (n - row0).min(chunk_rows);
            let slices = rows.div_ceil(rows_per_slice);
            chunks.push((c, lists, slices));
            lists += slices * ts;
            row0 += rows;
            c += 1;
        }
        if (lists * kk) as u64 * CAND_BYTES <= per_query_budget || rows_per_slice >= n {
            return Plan {
                tq,
                ts,
                rows_per_slice,
                chunks,
                lists,
            };
        }
        rows_per_slice *= 2;
    }
}

impl GpuState {
    /// Top-k of every query against `base` on the device.
    pub(crate) async fn top_k(&mut self, queries: &[f32], base: &BaseRef<'_>, k: usize) -> Result<Vec<Vec<Cand>>> {
        let d = base.panels.dim();
        let nq = queries.len() / d;
        let n = base.panels.len();
        let kk = slots(k)?;
        let gpu = &self.gpu;
        let res = self
            .bases
            .get(base.uid, |r| Ok(r.sync(gpu, base)), || ResidentBase::new(gpu, base))?;
        let maxb = gpu.max_binding();
        let (qpad, dp4) = padded_queries(queries, d);
        let mut out = Vec::with_capacity(nq);
        let mut q0 = 0;
        while q0 < nq {
            let remaining = nq - q0;
            let p = plan(res, n, remaining, maxb, kk);
            let per_query = (p.lists * kk) as u64 * CAND_BYTES;
            let by_bytes = (maxb / per_query.max(1)) as usize;
            let by_queries = (maxb / (dp4 as u64 * 16)) as usize;
            let by_groups = gpu.max_groups() as usize * p.tq;
            let cap = by_bytes.min(by_queries).min(by_groups).clamp(1, 65_535);
            let nb = remaining.min(cap);
            let scan = gpu
                .pipeline(
                    wgsl::TOPK,
                    "scan",
                    &[
                        ("K", format!("{kk}u")),
                        ("TQ", format!("{}u", p.tq)),
                        ("TS", format!("{}u", p.ts)),
                        ("F16", res.f16.to_string()),
                        ("G", format!("{FAN_IN}u")),
                    ],
                    &[],
                    false,
                )
                .await?;
            let qbuf = gpu.storage(
                "queries",
                bytemuck::cast_slice(&qpad[q0 * dp4 * 4..(q0 + nb) * dp4 * 4]),
            );
            let partial = gpu.zeroed("partial", (nb * p.lists * kk) as u64 * CAND_BYTES);
            let dummy = gpu.zeroed("unused", 16);
            let mut enc = gpu.encoder();
            let chunk_rows = res.vecs.chunk_rows();
            for &(c, list0, slices) in &p.chunks {
                let row0 = c * chunk_rows;
                let rows = (n - row0).min(chunk_rows);
                let mut flags = 0u32;
                let ids = match &res.ids {
                    Some(ids) => {
                        flags |= 1;
                        ids.chunk(c)
                    }
                    None => &dummy,
                };
                let alive_buf = base.alive.map(|a| {
                    flags |= 2;
                    let w = a.words();
                    let (lo, hi) = (row0 / 64, (row0 + rows).div_ceil(64).min(w.len()));
                    gpu.storage("alive", bytemuck::cast_slice(&w[lo..hi]))
                });
                let bias_buf = base.bias.map(|b| {
                    flags |= 4;
                    gpu.storage("bias", bytemuck::cast_slice(&b[row0..row0 + rows]))
                });
                let params = gpu.uniform(&words(&[
                    d as u32,
                    dp4 as u32,
                    rows as u32,
                    row0 as u32,
                    nb as u32,
                    p.rows_per_slice as u32,
                    p.lists as u32,
                    list0 as u32,
                    flags,
                    0,
                    0,
                    0,
                ]));
                let bind = gpu.bind(
                    &scan,
                    &[
                        (0, &params),
                        (1, res.vecs.chunk(c)),
                        (2, &qbuf),
                        (3, ids),
                        (4, alive_buf.as_ref().unwrap_or(&dummy)),
                        (5, bias_buf.as_ref().unwrap_or(&dummy)),
                        (6, &partial),
                    ],
                );
                gpu.dispatch(&mut enc, &scan, &bind, (slices as u32, nb.div_ceil(p.tq) as u32));
            }
            out.extend(finish_batch(gpu, enc, partial, nb, p.lists, kk, k).await?);
            q0 += nb;
        }
        Ok(out)
    }

    /// `a · bᵀ` on the device.
    pub(crate) async fn matmul_nt(&mut self, a: &[f32], b: &BaseRef<'_>) -> Result<Vec<f32>> {
        let d = b.panels.dim();
        let nq = a.len() / d;
        let n = b.panels.len();
        let gpu = &self.gpu;
        let res = self
            .bases
            .get(b.uid, |r| Ok(r.sync(gpu, b)), || ResidentBase::new(gpu, b))?;
        let maxb = gpu.max_binding();
        let (qpad, dp4) = padded_queries(a, d);
        let row_bytes = n as u64 * 4;
        if row_bytes > maxb {
            return Err(GpuError::Unsupported(format!(
                "a score row of {n} columns exceeds one binding"
            )));
        }
        let (tq, ts) = shape(nq);
        let tile = ts * RPT;
        let rows_per_slice = n
            .div_ceil((1024 / nq.div_ceil(tq).max(1)).max(1))
            .max(tile)
            .next_multiple_of(tile);
        let mut out = Vec::with_capacity(nq * n);
        let pipe = gpu
            .pipeline(
                wgsl::TOPK,
                "scores",
                &[
                    ("K", "1u".into()),
                    ("TQ", format!("{tq}u")),
                    ("TS", format!("{ts}u")),
                    ("F16", res.f16.to_string()),
                    ("G", format!("{FAN_IN}u")),
                ],
                &[],
                false,
            )
            .await?;
        let chunk_rows = res.vecs.chunk_rows();
        let mut q0 = 0;
        while q0 < nq {
            let nb = (nq - q0)
                .min((maxb / row_bytes.max(4)) as usize)
                .min((maxb / (dp4 as u64 * 16)) as usize)
                .min(gpu.max_groups() as usize * tq)
                .max(1);
            let qbuf = gpu.storage(
                "queries",
                bytemuck::cast_slice(&qpad[q0 * dp4 * 4..(q0 + nb) * dp4 * 4]),
            );
            let mat = gpu.zeroed("scores", nb as u64 * row_bytes);
            let mut enc = gpu.encoder();
            let mut row0 = 0;
            let mut c = 0;
            while row0 < n {
                let rows = (n - row0).min(chunk_rows);
                let params = gpu.uniform(&words(&[
                    d as u32,
                    dp4 as u32,
                    rows as u32,
                    row0 as u32,
                    nb as u32,
                    rows_per_slice as u32,
                    n as u32,
                    0,
                    0,
                    0,
                    0,
                    0,
                ]));
                let bind = gpu.bind(&pipe, &[(0, &params), (1, res.vecs.chunk(c)), (2, &qbuf), (7, &mat)]);
                gpu.dispatch(
                    &mut enc,
                    &pipe,
                    &bind,
                    (rows.div_ceil(rows_per_slice) as u32, nb.div_ceil(tq) as u32),
                );
                row0 += rows;
                c += 1;
            }
            let bytes = gpu.submit_and_read(enc, &mat, 0, nb as u64 * row_bytes).await?;
            out.extend(bytemuck::pod_collect_to_vec::<u8, f32>(&bytes));
            q0 += nb;
        }
        Ok(out)
    }
}

/// Rows of panel layout per chunk are whole panels (checked at compile time).
const _: () = assert!(PANEL == 16);
