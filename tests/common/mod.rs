//! Shared helpers for the integration tests.
#![allow(dead_code)]

use dentate::data::{SynthConfig, clustered};
use dentate::{FlatIndex, Hit, Index, rng::Rng};

/// Clustered unit vectors (deterministic).
pub fn synth(n: usize, dim: usize, clusters: usize, seed: u64) -> Vec<f32> {
    clustered(&SynthConfig {
        n,
        dim,
        clusters,
        spread: 0.8,
        seed,
    })
    .expect("valid synthetic data")
}

/// Gaussian vectors (not normalised).
pub fn gaussian(n: usize, dim: usize, seed: u64) -> Vec<f32> {
    let mut r = Rng::new(seed);
    (0..n * dim).map(|_| r.normal()).collect()
}

/// The obvious exact search: f64 cosine of every pair, sorted by score
/// descending then id ascending.
pub fn naive(base: &[f32], ids: &[u64], queries: &[f32], dim: usize, k: usize) -> Vec<Vec<(u64, f64)>> {
    let norm = |v: &[f32]| v.iter().map(|&x| x as f64 * x as f64).sum::<f64>().sqrt();
    queries
        .chunks_exact(dim)
        .map(|q| {
            let qn = norm(q);
            let mut all: Vec<(u64, f64)> = base
                .chunks_exact(dim)
                .zip(ids)
                .map(|(b, &id)| {
                    let dot: f64 = b.iter().zip(q).map(|(&x, &y)| x as f64 * y as f64).sum();
                    (id, dot / (norm(b) * qn))
                })
                .collect();
            all.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
            all.truncate(k);
            all
        })
        .collect()
}

/// Ids of each result list.
pub fn ids(res: &[Vec<Hit>]) -> Vec<Vec<u64>> {
    res.iter().map(|v| v.iter().map(|h| h.id).collect()).collect()
}

/// An exact f32 index of `base` (row-major, `dim` wide) with ids = row numbers.
pub fn exact_index(base: &[f32], dim: usize) -> FlatIndex {
    let mut flat = FlatIndex::new(dim);
    flat.add(&(0..(base.len() / dim) as u64).collect::<Vec<_>>(), base)
        .unwrap();
    flat
}

/// The exact top-k ids of each query over `base`.
pub fn exact_ids(base: &[f32], dim: usize, queries: &[f32], k: usize) -> Vec<Vec<u64>> {
    ids(&exact_index(base, dim).search(queries, k).unwrap())
}

/// Same ids in the same order, and scores within `tol`.
pub fn assert_same_hits(got: &[Vec<Hit>], want: &[Vec<Hit>], tol: f32) {
    assert_eq!(ids(got), ids(want));
    for (g, w) in got.iter().zip(want) {
        for (a, b) in g.iter().zip(w) {
            assert!((a.score - b.score).abs() < tol, "{} vs {}", a.score, b.score);
        }
    }
}

/// Header + payload with both checksums recomputed, so only structure is wrong.
pub fn reseal(header: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut bytes = header[..dentate::io::HEADER_LEN].to_vec();
    bytes[16..24].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    bytes[24..28].copy_from_slice(&crc32fast_hash(payload).to_le_bytes());
    let h = crc32fast_hash(&bytes[..28]);
    bytes[28..32].copy_from_slice(&h.to_le_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// CRC-32 (IEEE) of `b`, bitwise: an independent implementation keeps the
/// tests honest about the format rather than reusing the writer's code.
pub fn crc32fast_hash(b: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &byte in b {
        crc ^= byte as u32;
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
