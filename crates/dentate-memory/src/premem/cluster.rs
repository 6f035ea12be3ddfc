//! Clustering and temporal linking (PREMem §3.2.1).
//!
//! The fragments of a session are clustered by k-means on their unit
//! embeddings (spherical, cosine), with k chosen by the silhouette score
//! over `2..=min(n − 1, max_k)` (`dentate_core::choose_k`, run through
//! the core's compute interface, so a GPU backend is used when the core
//! provides one). A session of one or two fragments is one cluster (the
//! silhouette needs two clusters and a point more). A cluster's centroid
//! is the mean of its members' embeddings, `c̄ = (1/|c|) Σ e`.
//!
//! A persistent pool `P` holds the clusters that have not yet met a later
//! cluster. Cluster `c` of the new session links with `p ∈ P_{i−1}` when
//! `cos(p̄, c̄) > θ` (θ = 0.6); then
//! `P_i = P_{i−1} \ {p : ∃c, (p, c) linked} ∪ C_i`.

use dentate_core::{Compute, KMeansConfig, choose_k};

/// Clustering settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterConfig {
    /// θ: clusters link when their centroid cosine exceeds it (0.6).
    pub theta: f32,
    /// The largest k tried (default 10).
    pub max_k: usize,
    /// Seed of k-means.
    pub seed: u64,
    /// Silhouette over at most this many points (default 1,000).
    pub silhouette_sample: usize,
}

impl Default for ClusterConfig {
    fn default() -> Self {
        ClusterConfig {
            theta: 0.6,
            max_k: 10,
            seed: 0x5eed,
            silhouette_sample: 1000,
        }
    }
}

/// Clusters `n` row-major unit vectors of dimension `dim`: the members of
/// each cluster (ascending indices), clusters ordered by their first
/// member. Empty for no vectors.
pub fn cluster(
    vecs: &[f32],
    dim: usize,
    cfg: &ClusterConfig,
    compute: &dyn Compute,
) -> Result<Vec<Vec<usize>>, dentate_core::Error> {
    let n = vecs.len().checked_div(dim).unwrap_or(0);
    if n == 0 {
        return Ok(Vec::new());
    }
    if n < 3 || cfg.max_k < 2 {
        return Ok(vec![(0..n).collect()]);
    }
    let base = KMeansConfig {
        // Sessions are small: no sample cap, no warning about it.
        max_points_per_centroid: 0,
        min_points_per_centroid: 0,
        ..KMeansConfig::new(2).spherical(true).seed(cfg.seed)
    };
    let best = choose_k(
        vecs,
        dim,
        2..=cfg.max_k.min(n - 1),
        &base,
        cfg.silhouette_sample,
        compute,
    )?;
    let labels = best.model.assign(vecs, compute)?;
    let mut groups: Vec<Vec<usize>> = vec![Vec::new(); best.best_k];
    for (i, &l) in labels.iter().enumerate() {
        if let Some(g) = groups.get_mut(l as usize) {
            g.push(i);
        }
    }
    groups.retain(|g| !g.is_empty());
    groups.sort_by_key(|g| g[0]);
    Ok(groups)
}

/// The mean of the rows `members` of `vecs` (summed in the given order).
pub fn centroid(vecs: &[f32], dim: usize, members: &[usize]) -> Vec<f32> {
    let mut c = vec![0.0f32; dim];
    for &i in members {
        for (s, x) in c.iter_mut().zip(&vecs[i * dim..(i + 1) * dim]) {
            *s += x;
        }
    }
    let n = members.len().max(1) as f32;
    c.iter_mut().for_each(|x| *x /= n);
    c
}

/// Cosine similarity; 0 when either vector is zero.
pub fn cosine(a: &[f32], b: &[f32]) -> f32 {
    let (mut ab, mut aa, mut bb) = (0.0f64, 0.0f64, 0.0f64);
    for (x, y) in a.iter().zip(b) {
        ab += f64::from(*x) * f64::from(*y);
        aa += f64::from(*x) * f64::from(*x);
        bb += f64::from(*y) * f64::from(*y);
    }
    if aa == 0.0 || bb == 0.0 {
        0.0
    } else {
        (ab / (aa.sqrt() * bb.sqrt())) as f32
    }
}

/// `CP_i`: every (pool cluster id, new cluster index) whose centroids'
/// cosine exceeds `theta`, pool clusters in the given order, then new
/// clusters in order.
pub fn links(pool: &[(i64, Vec<f32>)], new: &[Vec<f32>], theta: f32) -> Vec<(i64, usize)> {
    let mut out = Vec::new();
    for (p, pc) in pool {
        for (c, cc) in new.iter().enumerate() {
            if cosine(pc, cc) > theta {
                out.push((*p, c));
            }
        }
    }
    out
}

/// `P_i = P_{i−1} \ {p linked} ∪ C_i`: the pool after a session whose new
/// clusters got the ids `new`, sorted and without duplicates.
pub fn update_pool(pool: &[i64], links: &[(i64, usize)], new: &[i64]) -> Vec<i64> {
    let mut out: Vec<i64> = pool
        .iter()
        .copied()
        .filter(|p| !links.iter().any(|(q, _)| q == p))
        .chain(new.iter().copied())
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use dentate_core::data::{SynthConfig, clustered};
    use dentate_core::default_compute;

    fn unit_rows(v: &mut [f32], dim: usize) {
        for r in v.chunks_exact_mut(dim) {
            let n = r.iter().map(|x| x * x).sum::<f32>().sqrt();
            r.iter_mut().for_each(|x| *x /= n);
        }
    }

    #[test]
    fn silhouette_picks_the_planted_k() {
        let compute = default_compute();
        for (k, seed) in [(2, 1), (3, 2), (4, 3), (5, 4), (7, 5)] {
            let dim = 16;
            let n = k * 12;
            let mut data = clustered(&SynthConfig {
                n,
                dim,
                clusters: k,
                spread: 0.05,
                seed,
            })
            .unwrap();
            unit_rows(&mut data, dim);
            let groups = cluster(&data, dim, &ClusterConfig::default(), compute.as_ref()).unwrap();
            assert_eq!(groups.len(), k, "planted {k}: {groups:?}");
            let mut all: Vec<usize> = groups.concat();
            all.sort_unstable();
            assert_eq!(all, (0..n).collect::<Vec<_>>(), "a partition");
            // Deterministic.
            assert_eq!(
                cluster(&data, dim, &ClusterConfig::default(), compute.as_ref()).unwrap(),
                groups
            );
        }
    }

    #[test]
    fn small_sessions_are_one_cluster() {
        let compute = default_compute();
        let cfg = ClusterConfig::default();
        assert!(cluster(&[], 4, &cfg, compute.as_ref()).unwrap().is_empty());
        let two = [1.0, 0.0, 0.0, 1.0];
        assert_eq!(cluster(&two, 2, &cfg, compute.as_ref()).unwrap(), vec![vec![0, 1]]);
    }

    #[test]
    fn centroids_links_and_the_pool() {
        let v = [1.0, 0.0, 0.0, 1.0, 1.0, 1.0];
        assert_eq!(centroid(&v, 2, &[0, 1]), vec![0.5, 0.5]);
        assert!((cosine(&[1.0, 0.0], &[1.0, 1.0]) - std::f32::consts::FRAC_1_SQRT_2).abs() < 1e-6);
        assert_eq!(cosine(&[0.0, 0.0], &[1.0, 1.0]), 0.0);
        let pool = vec![(10, vec![1.0, 0.0]), (11, vec![0.0, 1.0]), (12, vec![-1.0, 0.0])];
        let new = vec![vec![1.0, 0.1], vec![0.5, 0.866], vec![0.0, -1.0]];
        // cos(10, new0) ≈ 0.995, cos(10, new1) = 0.5, cos(11, new1) ≈ 0.87;
        // nothing reaches 12 or new2.
        let l = links(&pool, &new, 0.6);
        assert_eq!(l, vec![(10, 0), (11, 1)]);
        assert_eq!(update_pool(&[10, 11, 12], &l, &[20, 21, 22]), vec![12, 20, 21, 22]);
        assert_eq!(update_pool(&[], &[], &[5]), vec![5]);
    }
}
