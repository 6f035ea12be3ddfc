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
        // Workgroup memory: CB clusters × DC dimensions of f32, plus CB counts.
        let dc = dim.min(1024);
        let smem = gpu.limits.max_compute_workgroup_storage_size as usize / 4;
        let cb = (smem / (dc + 1)).clamp(1, 64);
        let groups_x = k.div_ceil(cb);
        if groups_x > gpu.max_groups() as usize {
            return Err(GpuError::Unsupported(format!("{k} clusters exceed one dispatch")));
        }
        let pipe = gpu
            .pipeline(
                wgsl::CLUSTER,
                "cluster_sums",
                &[("CB", format!("{cb}u")), ("DC", format!("{dc}u"))],
                &[],
                false,
            )
            .await?;
        let sums = gpu.zeroed("sums", (k * dim) as u64 * 4);
        let counts = gpu.zeroed("counts", k as u64 * 4);
        let per_chunk = ((maxb / (dim as u64 * 4)) as usize).max(1);
        let mut enc = gpu.encoder();
        let mut p0 = 0;
        while p0 < n {
            let np = (n - p0).min(per_chunk);
            let pts = gpu.storage("points", bytemuck::cast_slice(&points[p0 * dim..(p0 + np) * dim]));
            let asg = gpu.storage("assign", bytemuck::cast_slice(&assign[p0..p0 + np]));
            let params = gpu.uniform(&words(&[np as u32, dim as u32, k as u32, 0]));
            let bind = gpu.bind(&pipe, &[(0, &params), (1, &pts), (2, &asg), (3, &sums), (4, &counts)]);
            gpu.dispatch(&mut enc, &pipe, &bind, (groups_x as u32, dim.div_ceil(dc) as u32));
            p0 += np;
        }
        gpu.submit(enc);
        let s = gpu
            .submit_and_read(gpu.encoder(), &sums, 0, (k * dim) as u64 * 4)
            .await?;
        let c = gpu.submit_and_read(gpu.encoder(), &counts, 0, k as u64 * 4).await?;
        Ok((bytemuck::pod_collect_to_vec(&s), bytemuck::pod_collect_to_vec(&c)))
    }

    /// `out[i × k + c]`: summed distances from point i to cluster c.
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
