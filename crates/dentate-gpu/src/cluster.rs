//! k-means centroid update and silhouette distance sums on the device
//! (`shaders/cluster.wgsl`).

use crate::GpuState;
use crate::device::{wgsl, words};
use crate::error::{GpuError, Result};
use dentate_core::Metric;
use dentate_core::Panels;

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
        let maxb = gpu.max_binding();
        if (k * dim) as u64 * 4 > maxb {
            return Err(GpuError::Unsupported(format!("{k} × {dim} sums exceed one binding")));
        }
        if k > gpu.max_groups() as usize {
            return Err(GpuError::Unsupported(format!("{k} clusters exceed one dispatch")));
        }
        let pipe = gpu.pipeline(wgsl::CLUSTER, "cluster_sums", &[], &[], false).await?;
        let sums = gpu.zeroed("sums", (k * dim) as u64 * 4);
        // The counts are the histogram of the assignments, summed over the
        // chunks' counting sorts (an assignment past k belongs to no cluster).
        let mut counts = vec![0u32; k];
        let per_chunk = ((maxb / (dim as u64 * 4)) as usize).max(1);
        let mut enc = gpu.encoder();
        let mut p0 = 0;
        while p0 < n {
            let np = (n - p0).min(per_chunk);
            // Stable counting sort of this chunk's points by cluster.
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
            let pts = gpu.storage("points", bytemuck::cast_slice(&points[p0 * dim..(p0 + np) * dim]));
            let ord = gpu.storage("order", bytemuck::cast_slice(&order));
            let off = gpu.storage("offsets", bytemuck::cast_slice(&offsets));
            let params = gpu.uniform(&words(&[np as u32, dim as u32, k as u32, 0]));
            let bind = gpu.bind(&pipe, &[(0, &params), (1, &pts), (2, &ord), (3, &sums), (4, &off)]);
            gpu.dispatch(&mut enc, &pipe, &bind, (k as u32, dim.div_ceil(64) as u32));
            p0 += np;
        }
        let s = gpu.submit_and_read(enc, &sums, 0, (k * dim) as u64 * 4).await?;
        Ok((bytemuck::pod_collect_to_vec(&s), counts))
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
