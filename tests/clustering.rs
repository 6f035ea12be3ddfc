//! k-means, silhouette, choose_k, PQ.

mod common;
use common::*;
use dentate::compute::Metric;
use dentate::{Init, KMeans, KMeansConfig, PqTrainConfig, ProductQuantizer, choose_k, default_compute, silhouette};

/// `k` well-separated blobs in `dim` dimensions.
fn blobs(k: usize, per: usize, dim: usize, seed: u64) -> (Vec<f32>, Vec<u32>) {
    let mut r = dentate::rng::Rng::new(seed);
    let centres: Vec<f32> = (0..k * dim).map(|_| r.normal() * 10.0).collect();
    let mut data = Vec::new();
    let mut labels = Vec::new();
    for c in 0..k {
        for _ in 0..per {
            for j in 0..dim {
                data.push(centres[c * dim + j] + r.normal() * 0.3);
            }
            labels.push(c as u32);
        }
    }
    (data, labels)
}

#[test]
fn kmeans_is_reproducible_and_consistent() {
    let c = default_compute();
    let (data, _) = blobs(6, 200, 8, 1);
    for init in [Init::PlusPlus, Init::Random] {
        let cfg = KMeansConfig::new(6).seed(9).init(init);
        let a = KMeans::train(&data, 8, &cfg, c.as_ref()).unwrap();
        let b = KMeans::train(&data, 8, &cfg, c.as_ref()).unwrap();
        assert_eq!(a.centroids, b.centroids, "same seed, same centroids");
        assert_eq!(a.sizes.iter().sum::<u32>(), 1200);
        assert!(a.centroids.iter().all(|x| x.is_finite()));
        assert!(a.iterations >= 1 && a.iterations <= 25);
    }
    // Spherical centroids have unit norm.
    let unit = synth(2000, 16, 10, 2);
    let s = KMeans::train(&unit, 16, &KMeansConfig::new(10).spherical(true), c.as_ref()).unwrap();
    for r in s.centroids.chunks_exact(16) {
        let n: f32 = r.iter().map(|x| x * x).sum();
        assert!((n - 1.0).abs() < 1e-4);
    }
    assert!(s.objective > 0.5, "mean cosine to centroid {}", s.objective);
}

#[test]
fn kmeans_recovers_planted_blobs_and_warns_on_small_samples() {
    let c = default_compute();
    let (data, truth) = blobs(5, 100, 4, 3);
    let km = KMeans::train(&data, 4, &KMeansConfig::new(5).seed(1), c.as_ref()).unwrap();
    let got = km.assign(&data, c.as_ref()).unwrap();
    // Each planted blob maps to one cluster (a permutation).
    for b in 0..5u32 {
        let labels: std::collections::HashSet<u32> = got
            .iter()
            .zip(&truth)
            .filter(|(_, t)| **t == b)
            .map(|(g, _)| *g)
            .collect();
        assert_eq!(labels.len(), 1, "blob {b} split into {labels:?}");
    }
    // 500 points for 5 centroids is over 39 each: no warning; for 20 it is not.
    assert!(km.warnings.is_empty());
    let many = KMeans::train(&data, 4, &KMeansConfig::new(20), c.as_ref()).unwrap();
    assert_eq!(many.warnings.len(), 1);
    // Sample cap: 256 per centroid.
    let big = synth(5000, 8, 5, 4);
    let capped = KMeans::train(&big, 8, &KMeansConfig::new(4), c.as_ref()).unwrap();
    assert_eq!(capped.sizes.iter().sum::<u32>(), 4 * 256);
    assert!(KMeans::train(&data[..8], 4, &KMeansConfig::new(5), c.as_ref()).is_err());
}

#[test]
fn empty_clusters_are_repaired() {
    // 50 identical points and 2 others; k = 4 forces empty clusters.
    let mut data = [1.0f32, 1.0].repeat(50);
    data.extend_from_slice(&[5.0, 5.0, -5.0, 5.0]);
    let km = KMeans::train(
        &data,
        2,
        &KMeansConfig::new(4).init(Init::Random).seed(3),
        default_compute().as_ref(),
    )
    .unwrap();
    assert!(km.centroids.iter().all(|x| x.is_finite()));
    assert_eq!(km.k(), 4);
}

#[test]
fn silhouette_exact_and_sampled_and_choose_k_finds_planted_k() {
    let c = default_compute();
    let (data, labels) = blobs(4, 60, 6, 5);
    let s = silhouette(&data, 6, &labels, 4, Metric::L2, 10_000, 1, c.as_ref()).unwrap();
    assert!(s > 0.8, "well separated blobs: {s}");
    // A hand-checked case: 1-D points {0, 1} and {10, 11}.
    // a = 1, b = mean(10, 11) = 10.5 for point 0 → s = 1 - 1/10.5.
    let tiny = [0.0f32, 1.0, 10.0, 11.0];
    let s2 = silhouette(&tiny, 1, &[0, 0, 1, 1], 2, Metric::L2, 100, 1, c.as_ref()).unwrap();
    let expect = ((1.0 - 1.0 / 10.5) + (1.0 - 1.0 / 9.5) + (1.0 - 1.0 / 9.5) + (1.0 - 1.0 / 10.5)) / 4.0;
    assert!((s2 - expect).abs() < 1e-5, "{s2} vs {expect}");
    // Shuffled labels score near 0.
    let bad: Vec<u32> = (0..labels.len() as u32).map(|i| i % 4).collect();
    assert!(silhouette(&data, 6, &bad, 4, Metric::L2, 10_000, 1, c.as_ref()).unwrap() < 0.1);
    // Sampled silhouette is close to the exact one.
    let sampled = silhouette(&data, 6, &labels, 4, Metric::L2, 120, 2, c.as_ref()).unwrap();
    assert!((sampled - s).abs() < 0.1);
    assert!(silhouette(&data, 6, &labels, 1, Metric::L2, 100, 1, c.as_ref()).is_err());
    let chosen = choose_k(&data, 6, 2..=7, &KMeansConfig::new(2).seed(4), 1000, c.as_ref()).unwrap();
    assert_eq!(chosen.best_k, 4, "scores {:?}", chosen.scores);
    assert_eq!(chosen.scores.len(), 6);
    assert!(choose_k(&data[..6], 6, 2..=3, &KMeansConfig::new(2), 100, c.as_ref()).is_err());
}

#[test]
fn pq_encode_decode_and_adc() {
    let c = default_compute();
    let dim = 16;
    let data = gaussian(3000, dim, 6);
    let pq = ProductQuantizer::train(
        &data,
        dim,
        4,
        &PqTrainConfig {
            iterations: 10,
            ..Default::default()
        },
        c.as_ref(),
    )
    .unwrap();
    let codes = pq.encode(&data, c.as_ref()).unwrap();
    assert_eq!(codes.len(), 3000 * 4);
    let rec = pq.decode(&codes);
    // Reconstruction error well below the data's variance (16 per vector).
    let err: f32 = data.iter().zip(&rec).map(|(a, b)| (a - b) * (a - b)).sum::<f32>() / 3000.0;
    assert!(err < 8.0, "mse per vector {err}");
    // Decoded codes re-encode to themselves (each codeword is its own nearest).
    assert_eq!(pq.encode(&rec, c.as_ref()).unwrap(), codes);
    // ADC equals <q, decode(code)>.
    let q = gaussian(1, dim, 7);
    let t = pq.tables(&q);
    for i in 0..20 {
        let want: f32 = q.iter().zip(&rec[i * dim..(i + 1) * dim]).map(|(a, b)| a * b).sum();
        assert!((pq.adc(&t, &codes[i * 4..(i + 1) * 4]) - want).abs() < 1e-3);
    }
    assert!(ProductQuantizer::train(&data, dim, 3, &PqTrainConfig::default(), c.as_ref()).is_err());
    assert!(ProductQuantizer::train(&data[..dim * 100], dim, 4, &PqTrainConfig::default(), c.as_ref()).is_err());
}
