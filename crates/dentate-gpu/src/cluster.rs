//! k-means on the device — assignment (`topk.wgsl` `gemm` + `best_col`),
//! centroid sums (`shaders/cluster.wgsl`), the fused step over points kept
//! for a whole training — and the silhouette's distance sums.

use crate::GpuState;
use crate::device::{Gpu, wgsl, words};
use crate::error::{GpuError, Result};
use crate::resident::{ResidentBase, ResidentPoints};
use crate::topk::{BATCH_BYTES, Params, exact_pipeline, queries_per_thread, record_gemm};
use dentate_core::{BaseRef, KMeansStep, Metric, Panels, PointsRef, l2_bias};

impl GpuState {
    /// Per-cluster sums of the points and counts.
    pub(crate) async fn cluster_sums(
        &mut self,
        points: &[f32],
        dim: usize,
        assign: &[u32],
        k: usize,
    ) -> Result<(Vec<f32>, Vec<u32>)> {
        let gpu = &self.gpu;
        let n = (points.len() / dim).min(assign.len());
        check_sums(gpu, dim, k)?;
        let per_chunk = ((gpu.max_binding() / (dim as u64 * 4)) as usize).max(1);
        let mut chunks = Vec::with_capacity(n.div_ceil(per_chunk));
        let mut p0 = 0;
        while p0 < n {
            let np = (n - p0).min(per_chunk);
            let buf = gpu.zeroed("points", (np * dim) as u64 * 4);
            gpu.upload(&buf, 0, bytemuck::cast_slice(&points[p0 * dim..(p0 + np) * dim]))?;
            chunks.push((buf, np));
            p0 += np;
        }
        sums_on_device(gpu, &chunks, dim, dim, &assign[..n], k).await
    }

    /// Nearest centroid of each point and its score, on the device: the
    /// points uploaded for this call only.
    pub(crate) async fn assign(
        &mut self,
        points: &[f32],
        centroids: &Panels,
        metric: Metric,
    ) -> Result<(Vec<u32>, Vec<f32>)> {
        let pts = PointsRef {
            rows: points,
            dim: centroids.dim(),
            uid: 0,
        };
        check_assign(&self.gpu, pts.len(), centroids)?;
        let res = ResidentPoints::new(&self.gpu, &pts)?;
        assign_on_device(&self.gpu, &res, centroids, metric).await
    }

    /// One k-means step on the device: the points are kept there for as
    /// long as steps pass the same uid (one upload per training); `gemm`
    /// scores each batch of points against the centroids, `best_col` picks
    /// each point's centroid, and after the host's counting sort of the
    /// assignments `cluster_sums` adds each cluster's points in point order.
    pub(crate) async fn kmeans_step(
        &mut self,
        points: &PointsRef<'_>,
        centroids: &Panels,
        metric: Metric,
    ) -> Result<KMeansStep> {
        let gpu = &self.gpu;
        let (d, k) = (points.dim, centroids.len());
        check_assign(gpu, points.len(), centroids)?;
        check_sums(gpu, d, k)?;
        let res = self
            .points
            .get(points.uid, |r| Ok(r.holds(points)), || ResidentPoints::new(gpu, points))?;
        let (assign, scores) = assign_on_device(gpu, res, centroids, metric).await?;
        let (sums, counts) = sums_on_device(gpu, &res.chunks, res.dp4 * 4, d, &assign, k).await?;
        Ok(KMeansStep {
            assign,
            scores,
            sums,
            counts,
        })
    }

    pub(crate) async fn distance_sums(
        &mut self,
        points: &Panels,
        labels: &[u32],
        k: usize,
        metric: Metric,
    ) -> Result<Vec<f32>> {
        let gpu = &self.gpu;
        let n = points.len();
        let d = points.dim();
        let maxb = gpu.max_binding();
        if (n * d) as u64 * 4 > maxb || (n * k) as u64 * 4 > maxb {
            return Err(GpuError::Unsupported(format!(
                "{n} points × {k} clusters exceed one binding"
            )));
        }
        if n.div_ceil(64) > gpu.max_groups() as usize || k > gpu.max_groups() as usize {
            return Err(GpuError::Unsupported(format!(
                "{n} points × {k} clusters exceed one dispatch"
            )));
        }
        let pipe = gpu
            .pipeline(
                wgsl::CLUSTER,
                "distance_sums",
                &[("CB", "1u".into()), ("DC", "1u".into())],
                &[],
                false,
            )
            .await?;
        let rows = points.to_rows();
        let pts = gpu.storage("points", bytemuck::cast_slice(&rows));
        let lab = gpu.storage("labels", bytemuck::cast_slice(&labels[..n]));
        let out = gpu.zeroed("distance sums", (n * k) as u64 * 4);
        let cosine = u32::from(metric == Metric::Cosine);
        let params = gpu.uniform(&words(&[n as u32, d as u32, k as u32, cosine]));
        let bind = gpu.bind(&pipe, &[(5, &params), (6, &pts), (7, &lab), (8, &out)]);
        let mut enc = gpu.encoder();
        gpu.dispatch(&mut enc, &pipe, &bind, (n.div_ceil(64) as u32, k as u32));
        let bytes = gpu.submit_and_read(enc, &out, 0, (n * k) as u64 * 4).await?;
        Ok(bytemuck::pod_collect_to_vec(&bytes))
    }
}

/// The device can sum `k` clusters of `dim` dimensions: the sums within one
/// binding, the clusters within one dispatch.
fn check_sums(gpu: &Gpu, dim: usize, k: usize) -> Result<()> {
    if (k * dim) as u64 * 4 > gpu.max_binding() {
        return Err(GpuError::Unsupported(format!("{k} × {dim} sums exceed one binding")));
    }
    if k > gpu.max_groups() as usize {
        return Err(GpuError::Unsupported(format!("{k} clusters exceed one dispatch")));
    }
    Ok(())
}

/// The device can assign `n` points to `centroids`: the centroids and a
/// row of scores within one binding, the assignments too.
fn check_assign(gpu: &Gpu, n: usize, centroids: &Panels) -> Result<()> {
    let (k, d) = (centroids.len(), centroids.dim());
    let maxb = gpu.max_binding();
    if (k * d) as u64 * 4 > maxb || k > gpu.max_groups() as usize {
        return Err(GpuError::Unsupported(format!(
            "{k} centroids exceed one binding or dispatch"
        )));
    }
    if n as u64 * 8 > maxb {
        return Err(GpuError::Unsupported(format!("{n} assignments exceed one binding")));
    }
    Ok(())
}

/// Assignment of resident points: per batch of points, `gemm` writes their
/// scores against every centroid (plus the L2 bias) and `best_col` keeps
/// each point's best column; one read-back of (centroid, score) pairs.
async fn assign_on_device(
    gpu: &Gpu,
    res: &ResidentPoints,
    centroids: &Panels,
    metric: Metric,
) -> Result<(Vec<u32>, Vec<f32>)> {
    let (k, d) = (centroids.len(), centroids.dim());
    let n: usize = res.chunks.iter().map(|c| c.1).sum();
    if n == 0 || k == 0 {
        return Ok((vec![0; n], vec![f32::NEG_INFINITY; n]));
    }
    let bias = l2_bias(centroids, metric);
    let base = BaseRef {
        bias: bias.as_deref(),
        ..BaseRef::plain(centroids)
    };
    let cent = ResidentBase::new(gpu, &base)?;
    if cent.vecs.chunks() != 1 {
        return Err(GpuError::Unsupported(format!("{k} centroids exceed one binding")));
    }
    let f16 = matches!(centroids.data(), dentate_core::Floats::F16(_));
    let dummy = gpu.zeroed("unused", 16);
    let bias_buf = bias.as_ref().map(|b| gpu.storage("bias", bytemuck::cast_slice(b)));
    let row_bytes = k as u64 * 4;
    let nb_max = (gpu.max_groups() as usize)
        .min((BATCH_BYTES.min(gpu.max_binding()) / row_bytes) as usize)
        .max(1);
    // Scratch: `best_col` reads only the scores `gemm` wrote, and every
    // assignment read back is written.
    let scores = gpu.scratch("scores", nb_max.min(n) as u64 * row_bytes);
    let assigned = gpu.scratch("assignments", n as u64 * 8);
    let best = exact_pipeline(gpu, "best_col", 1, false).await?;
    let mut enc = gpu.encoder();
    for (c, (buf, rows)) in res.chunks.iter().enumerate() {
        let mut q0 = 0;
        while q0 < *rows {
            let nb = (rows - q0).min(nb_max);
            let tq = queries_per_thread(gpu, nb, false);
            let gemm = exact_pipeline(gpu, "gemm", tq, f16).await?;
            let params = Params {
                d,
                dp4: res.dp4,
                n: k,
                blk0: 0,
                blk_rows: k,
                nq: nb,
                q0,
                stride: k,
                col0: 0,
                flags: if bias.is_some() { 4 } else { 0 },
                row0: 0,
                lists: 0,
                a0: c * res.chunk_rows + q0,
                k: 0,
                qt: 0,
            }
            .uniform(gpu);
            let inputs = [cent.vecs.chunk(0), buf, &dummy, bias_buf.as_ref().unwrap_or(&dummy)];
            record_gemm(
                gpu,
                &mut enc,
                &gemm,
                &params,
                inputs,
                &scores,
                (k, nb.div_ceil(crate::topk::tile_queries(gpu, tq))),
                &[],
            );
            let bind = gpu.bind(&best, &[(0, &params), (7, &scores), (17, &assigned)]);
            gpu.dispatch(&mut enc, &best, &bind, (nb as u32, 1));
            q0 += nb;
        }
    }
    let bytes = gpu.submit_and_read(enc, &assigned, 0, n as u64 * 8).await?;
    gpu.recycle([scores, assigned]);
    let w: Vec<u32> = bytemuck::pod_collect_to_vec(&bytes);
    Ok(w.chunks_exact(2).map(|p| (p[0], f32::from_bits(p[1]))).unzip())
}

/// Per-cluster sums and counts of points already on the device (`chunks`:
/// buffer and rows, `stride` floats per point) under `assign`: per chunk, a
/// stable counting sort of its points by cluster on the host, then
/// `cluster_sums` continuing the sums (one thread per cluster and
/// dimension, in point order: bit-reproducible).
async fn sums_on_device(
    gpu: &Gpu,
    chunks: &[(wgpu::Buffer, usize)],
    stride: usize,
    dim: usize,
    assign: &[u32],
    k: usize,
) -> Result<(Vec<f32>, Vec<u32>)> {
    let pipe = gpu.pipeline(wgsl::CLUSTER, "cluster_sums", &[], &[], false).await?;
    let sums = gpu.zeroed("sums", (k * dim) as u64 * 4);
    // The counts are the histogram of the assignments, summed over the
    // chunks' counting sorts (an assignment past k belongs to no cluster).
    let mut counts = vec![0u32; k];
    let mut enc = gpu.encoder();
    let mut p0 = 0;
    for (pts, np) in chunks {
        let np = (*np).min(assign.len().saturating_sub(p0));
        let mut offsets = vec![0u32; k + 1];
        for &c in &assign[p0..p0 + np] {
            if (c as usize) < k {
                offsets[c as usize + 1] += 1;
            }
        }
        for c in 0..k {
            counts[c] += offsets[c + 1];
            offsets[c + 1] += offsets[c];
        }
        let mut next = offsets.clone();
        let mut order = vec![0u32; offsets[k] as usize];
        for (i, &c) in assign[p0..p0 + np].iter().enumerate() {
            if (c as usize) < k {
                let slot = &mut next[c as usize];
                order[*slot as usize] = i as u32;
                *slot += 1;
            }
        }
        let ord = gpu.storage("order", bytemuck::cast_slice(&order));
        let off = gpu.storage("offsets", bytemuck::cast_slice(&offsets));
        let params = gpu.uniform(&words(&[np as u32, dim as u32, k as u32, stride as u32]));
        let bind = gpu.bind(&pipe, &[(0, &params), (1, pts), (2, &ord), (3, &sums), (4, &off)]);
        gpu.dispatch(&mut enc, &pipe, &bind, (k as u32, dim.div_ceil(64) as u32));
        p0 += np;
    }
    let s = gpu.submit_and_read(enc, &sums, 0, (k * dim) as u64 * 4).await?;
    Ok((bytemuck::pod_collect_to_vec(&s), counts))
}
