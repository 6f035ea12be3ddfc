//! Property tests: codes, k-means invariants, tiles vs naive, the file format.

mod common;
use common::*;
use dentate::{AnyIndex, FlatIndex, Index, KMeans, KMeansConfig, default_compute};
use proptest::prelude::*;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    #[test]
    fn flat_matches_naive(n in 1usize..120, dim in 1usize..40, nq in 1usize..8, k in 1usize..20, seed in 0u64..1000) {
        let base = gaussian(n, dim, seed);
        let q = gaussian(nq, dim, seed + 1);
        prop_assume!(base.chunks_exact(dim).all(|v| v.iter().any(|&x| x != 0.0)));
        let ids: Vec<u64> = (0..n as u64).rev().collect();
        let mut idx = FlatIndex::new(dim);
        idx.add(&ids, &base).unwrap();
        let got = idx.search(&q, k).unwrap();
        let want = naive(&base, &ids, &q, dim, k);
        for (g, w) in got.iter().zip(&want) {
            prop_assert_eq!(g.len(), w.len());
            for (h, (id, s)) in g.iter().zip(w) {
                // Ids agree unless two true scores are within float noise.
                prop_assert!((h.score as f64 - s).abs() < 1e-4);
                if h.id != *id {
                    let other = w.iter().find(|x| x.0 == h.id).map(|x| x.1).unwrap_or(f64::NAN);
                    prop_assert!((other - s).abs() < 1e-5, "id {} vs {}", h.id, id);
                }
            }
        }
    }

    #[test]
    fn kmeans_invariants(n in 20usize..300, dim in 1usize..12, k in 1usize..10, seed in 0u64..100, spherical in any::<bool>()) {
        prop_assume!(n >= k);
        let mut data = gaussian(n, dim, seed);
        if spherical {
            data = dentate::vector::normalized(&data, dim).unwrap();
        }
        let cfg = KMeansConfig::new(k).seed(seed).spherical(spherical).max_iter(8);
        let c = default_compute();
        let km = KMeans::train(&data, dim, &cfg, c.as_ref()).unwrap();
        prop_assert_eq!(km.k(), k);
        // Sizes count the training sample: at most 256 points per centroid.
        prop_assert_eq!(km.sizes.iter().sum::<u32>() as usize, n.min(256 * k));
        prop_assert!(km.centroids.iter().all(|x| x.is_finite()));
        let a = km.assign(&data, c.as_ref()).unwrap();
        prop_assert!(a.iter().all(|&x| (x as usize) < k));
        // Assignment picks the nearest centroid.
        for (i, &ai) in a.iter().enumerate().take(30) {
            let p = &data[i * dim..(i + 1) * dim];
            let score = |ci: usize| -> f32 {
                let cen = &km.centroids[ci * dim..(ci + 1) * dim];
                if spherical { p.iter().zip(cen).map(|(x, y)| x * y).sum() } else { -p.iter().zip(cen).map(|(x, y)| (x - y) * (x - y)).sum::<f32>() }
            };
            let best = (0..k).map(score).fold(f32::NEG_INFINITY, f32::max);
            prop_assert!(score(ai as usize) >= best - 1e-4);
        }
    }

    #[test]
    fn file_roundtrip_and_mutation_never_panics(n in 1usize..60, dim in 1usize..10, dels in proptest::collection::vec(0u64..60, 0..20), flip in any::<prop::sample::Index>(), bit in 0u8..8) {
        let data = gaussian(n, dim, n as u64 * 31 + dim as u64);
        prop_assume!(data.chunks_exact(dim).all(|v| v.iter().any(|&x| x != 0.0)));
        let mut idx = FlatIndex::new(dim);
        idx.add(&(0..n as u64).collect::<Vec<_>>(), &data).unwrap();
        idx.remove(&dels);
        let bytes = idx.to_bytes();
        let back = FlatIndex::from_bytes(&bytes).unwrap();
        prop_assert_eq!(back.len(), idx.len());
        prop_assert_eq!(back.to_bytes(), bytes.clone());
        // Any single bit flip is detected (CRC-32 catches all 1-bit errors).
        let mut bad = bytes.clone();
        let i = flip.index(bad.len());
        bad[i] ^= 1 << bit;
        prop_assert!(AnyIndex::from_bytes(&bad).is_err());
    }
}

/// One small trained PQ shared by the code properties.
fn small_pq() -> &'static (dentate::ProductQuantizer, usize) {
    static PQ: std::sync::OnceLock<(dentate::ProductQuantizer, usize)> = std::sync::OnceLock::new();
    PQ.get_or_init(|| {
        let dim = 12;
        let data = gaussian(2000, dim, 77);
        let cfg = dentate::PqTrainConfig {
            iterations: 6,
            ..Default::default()
        };
        (
            dentate::ProductQuantizer::train(&data, dim, 3, &cfg, default_compute().as_ref()).unwrap(),
            dim,
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any code decodes to codewords that encode back to the same code, and
    /// ADC of a code equals the inner product with its decoding.
    #[test]
    fn pq_codes_round_trip(code in proptest::collection::vec(any::<u8>(), 3), q in proptest::collection::vec(-1.0f32..1.0, 12)) {
        let (pq, dim) = small_pq();
        let c = default_compute();
        let dec = pq.decode(&code);
        prop_assert_eq!(dec.len(), *dim);
        let re = pq.encode(&dec, c.as_ref()).unwrap();
        // Equal unless two codewords of a sub-space coincide (then either is nearest).
        let dec2 = pq.decode(&re);
        prop_assert_eq!(&dec, &dec2);
        let t = pq.tables(&q);
        let want: f32 = q.iter().zip(&dec).map(|(a, b)| a * b).sum();
        prop_assert!((pq.adc(&t, &code) - want).abs() < 1e-4);
    }
}
