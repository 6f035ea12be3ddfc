//! One conformance suite for every compute backend (as burn does): the same
//! cases run against the CPU backend and the wgpu backend, and each
//! backend's answers are checked against the scalar CPU reference — same
//! ids, scores within 1e-4 (f32) — and, where there is one, a result known
//! independently (the planted clusters, a hand count).
//!
//! The GPU cases need an adapter; `scripts/test.sh` installs Mesa's software
//! Vulkan driver (llvmpipe), and these tests force it. A machine without any
//! adapter fails them, unless `DENTATE_GPU_TESTS=skip` says to skip them.
//! On a machine with a GPU, `DENTATE_GPU_REQUIRE=hardware` makes them fail
//! rather than pass on a software adapter (a missing driver would otherwise
//! leave llvmpipe to answer). Every GPU case also checks that nothing ran
//! on the CPU fallback.

mod common;

use common::synth;
use dentate::Panels;
use dentate::gpu::{GpuCompute, GpuOptions, TablePlacement};
use dentate::rng::Rng;
use dentate::{BaseRef, Compute, CpuCompute};
use dentate::{
    Bitset, Cand, FlatIndex, Index, Isa, IvfPqConfig, IvfPqIndex, IvfSearchParams, KMeans, KMeansConfig, Metric,
    PointsRef, Precision, RerankStore, SalienceParams, StoreFormat, StoreRef, silhouette,
};
use std::sync::{Arc, OnceLock};

/// The reference: the CPU backend on its scalar path.
fn reference() -> CpuCompute {
    CpuCompute::with_isa(Isa::Scalar).expect("the scalar path is always available")
}

fn skip_gpu() -> bool {
    let skip = std::env::var("DENTATE_GPU_TESTS").is_ok_and(|v| v == "skip");
    assert!(
        !(skip && dentate::gpu::hardware_required()),
        "DENTATE_GPU_REQUIRE=hardware and DENTATE_GPU_TESTS=skip contradict each other"
    );
    skip
}

fn open_gpu(options: GpuOptions) -> Option<Arc<GpuCompute>> {
    let _ = env_logger::builder().is_test(true).try_init();
    if skip_gpu() {
        eprintln!("DENTATE_GPU_TESTS=skip: GPU conformance cases skipped");
        return None;
    }
    match GpuCompute::with_options(options) {
        Ok(g) => Some(Arc::new(g)),
        Err(e) => panic!(
            "no GPU adapter for the conformance suite ({e}); install one (Linux: apt-get install mesa-vulkan-drivers) \
             or set DENTATE_GPU_TESTS=skip"
        ),
    }
}

/// The wgpu backend on the best adapter, software included (shared by the
/// cases, so its fallback counter must stay at zero).
fn gpu() -> Option<Arc<GpuCompute>> {
    static GPU: OnceLock<Option<Arc<GpuCompute>>> = OnceLock::new();
    GPU.get_or_init(|| {
        open_gpu(GpuOptions {
            allow_software: true,
            ..GpuOptions::default()
        })
    })
    .clone()
}

/// Same ids in the same order, scores within `tol`; two candidates whose
/// reference scores are within `tol` of each other may trade places (a
/// near-tie that rounding decides), which is checked explicitly.
fn assert_same(got: &[Vec<Cand>], want: &[Vec<Cand>], tol: f32, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: query count");
    for (q, (g, w)) in got.iter().zip(want).enumerate() {
        assert_eq!(g.len(), w.len(), "{what}: query {q}: result count");
        for (i, (a, b)) in g.iter().zip(w).enumerate() {
            assert!(
                (a.score - b.score).abs() <= tol,
                "{what}: query {q} rank {i}: score {} vs {}",
                a.score,
                b.score
            );
            if a.id != b.id {
                // Another id is the same answer where it ties within `tol`:
                // one the reference ranks nearby, or one at the cut (the
                // last places, where a near tie may leave the list).
                let at_cut = w.last().is_some_and(|l| (a.score - l.score).abs() <= tol);
                let near = w.iter().any(|c| c.id == a.id && (c.score - b.score).abs() <= tol) || at_cut;
                assert!(near, "{what}: query {q} rank {i}: id {} vs {}", a.id, b.id);
            }
        }
    }
}

/// Search hits as candidates (row unknown: 0), for [`assert_same`].
fn as_cands(v: Vec<Vec<dentate::Hit>>) -> Vec<Vec<Cand>> {
    v.into_iter()
        .map(|l| {
            l.into_iter()
                .map(|h| Cand {
                    score: h.score,
                    id: h.id,
                    row: 0,
                })
                .collect()
        })
        .collect()
}

/// Ids spread over the whole u64 range (both words matter for ties).
fn wide_ids(n: usize, seed: u64) -> Vec<u64> {
    let mut r = Rng::new(seed);
    let mut ids: Vec<u64> = (0..n as u64).map(|i| (r.next_u64() & !0xffff) | i).collect();
    ids.sort_unstable();
    ids.dedup();
    for i in (1..ids.len()).rev() {
        let j = r.below(i + 1);
        ids.swap(i, j);
    }
    ids
}

mod cases {
    use super::*;

    /// Exact top-k through a flat index: several batch shapes and k, f32
    /// and f16 storage, caller ids, tombstones, duplicated rows (exact
    /// ties), rows appended after the first search (the device copy grows)
    /// and a compaction (it is replaced).
    pub fn exact_top_k(backend: Arc<dyn Compute>) {
        let dim = 48;
        let n = 3_000;
        let mut data = synth(n, dim, 40, 11);
        // Rows 100..110 repeat row 7: equal scores, ordered by id.
        let row7 = data[7 * dim..8 * dim].to_vec();
        for r in 100..110 {
            data[r * dim..(r + 1) * dim].copy_from_slice(&row7);
        }
        let ids = wide_ids(n, 5);
        let queries = synth(100, dim, 40, 12);
        for precision in [Precision::F32, Precision::F16] {
            let tol = if precision == Precision::F32 { 1e-4 } else { 1e-2 };
            let mut want = FlatIndex::with_precision(dim, precision);
            want.set_compute(Arc::new(reference()));
            let mut got = FlatIndex::with_precision(dim, precision);
            got.set_compute(backend.clone());
            for idx in [&mut want, &mut got] {
                idx.add(&ids[..2_000], &data[..2_000 * dim]).unwrap();
                idx.remove(&ids[10..20]);
            }
            let check = |got: &FlatIndex, want: &FlatIndex, stage: &str| {
                for (nq, k) in [
                    (1, 1),
                    (1, 10),
                    (7, 10),
                    (100, 10),
                    (33, 100),
                    (5, 128),
                    (3, 1_024),
                    (60, 300),
                ] {
                    let q = &queries[..nq * dim];
                    let g = backend.top_k(q, got.base(), k);
                    let w = reference().top_k(q, want.base(), k);
                    assert_same(&g, &w, tol, &format!("{precision:?} {stage} nq={nq} k={k}"));
                }
                // The duplicated rows come back in id order.
                let g = backend.top_k(&row7, got.base(), 12);
                let w = reference().top_k(&row7, want.base(), 12);
                assert_eq!(
                    g.iter().flatten().map(|c| c.id).collect::<Vec<_>>(),
                    w.iter().flatten().map(|c| c.id).collect::<Vec<_>>(),
                    "{precision:?} {stage}: ties by id"
                );
            };
            check(&got, &want, "first");
            for idx in [&mut want, &mut got] {
                idx.add(&ids[2_000..], &data[2_000 * dim..]).unwrap();
            }
            check(&got, &want, "appended");
            for idx in [&mut want, &mut got] {
                idx.remove(&ids[500..900]);
                idx.compact();
            }
            check(&got, &want, "compacted");
        }
    }

    /// A base longer than a batch's first block, so later blocks go
    /// through the GPU's survivor path (`gemm_keep` → `survsel`): random
    /// order (few rows beat a query's threshold), and rows whose scores
    /// rise along the base for the first query (every row beats it, so the
    /// survivors overflow and the block is selected segment by segment),
    /// with tombstones and caller ids; 100 and 130 queries take the 4 × 8
    /// register tile (and 130 a partial query tile).
    pub fn exact_top_k_long(backend: Arc<dyn Compute>) {
        let dim = 16;
        let n = 40_000;
        let mut data = synth(n, dim, 30, 21);
        let rising: Vec<f32> = (0..n)
            .flat_map(|i| {
                let a = 0.5 + (1.0 - i as f32 / n as f32);
                let mut v = vec![0.0f32; dim];
                v[0] = a.cos();
                v[1] = a.sin();
                v
            })
            .collect();
        let ids = wide_ids(n, 6);
        let mut queries = synth(130, dim, 30, 22);
        queries[..dim].fill(0.0);
        queries[0] = 1.0;
        for (name, base) in [("random", &mut data), ("rising", &mut rising.clone())] {
            // A few duplicated rows far into the base: ties by id there too.
            let row = base[33_000 * dim..33_001 * dim].to_vec();
            for r in [35_001, 38_500] {
                base[r * dim..(r + 1) * dim].copy_from_slice(&row);
            }
            let mut want = FlatIndex::new(dim);
            want.set_compute(Arc::new(reference()));
            want.add(&ids, base).unwrap();
            want.remove(&ids[20_000..20_050]);
            let mut got = want.clone();
            got.set_compute(backend.clone());
            // The rising base only ranks the first query strictly.
            let shapes: &[(usize, usize)] = if name == "rising" {
                &[(1, 10), (1, 100), (1, 1_024)]
            } else {
                &[(1, 10), (100, 10), (130, 100), (3, 1_024)]
            };
            for &(nq, k) in shapes {
                let q = &queries[..nq * dim];
                let g = backend.top_k(q, got.base(), k);
                let w = reference().top_k(q, want.base(), k);
                assert_same(&g, &w, 1e-4, &format!("{name} nq={nq} k={k}"));
            }
        }
    }

    /// Nearest centroid by L2 (inner product plus −‖c‖²/2 bias) and by
    /// cosine; and the full score matrix.
    pub fn assign_and_matmul(backend: Arc<dyn Compute>) {
        let dim = 20;
        let points = common::gaussian(1_500, dim, 3);
        let centroids = common::gaussian(37, dim, 4);
        let panels = Panels::from_rows(&centroids, dim, Precision::F32);
        for metric in [Metric::L2, Metric::Cosine] {
            let (ga, gs) = backend.assign(&points, &panels, metric);
            let (wa, ws) = reference().assign(&points, &panels, metric);
            let mut differ = 0;
            for i in 0..ga.len() {
                assert!(
                    (gs[i] - ws[i]).abs() <= 1e-3 * ws[i].abs().max(1.0),
                    "{metric:?} score {i}"
                );
                if ga[i] != wa[i] {
                    differ += 1;
                }
            }
            assert_eq!(differ, 0, "{metric:?}: assignments differ");
        }
        let g = backend.matmul_nt(&points[..200 * dim], &panels);
        let w = reference().matmul_nt(&points[..200 * dim], &panels);
        assert_eq!(g.len(), w.len());
        for (a, b) in g.iter().zip(&w) {
            assert!((a - b).abs() <= 1e-4 * b.abs().max(1.0), "{a} vs {b}");
        }
    }

    /// The k-means update step, and k-means end to end on planted clusters.
    pub fn kmeans(backend: Arc<dyn Compute>) {
        let dim = 24;
        let points = common::gaussian(2_000, dim, 8);
        let mut r = Rng::new(9);
        let assign: Vec<u32> = (0..2_000).map(|_| (r.next_u64() % 13) as u32).collect();
        let (gs, gc) = backend.cluster_sums(&points, dim, &assign, 13);
        let (ws, wc) = reference().cluster_sums(&points, dim, &assign, 13);
        assert_eq!(gc, wc, "counts");
        assert_eq!(gc.iter().sum::<u32>(), 2_000);
        for (a, b) in gs.iter().zip(&ws) {
            assert!((a - b).abs() <= 1e-3, "sum {a} vs {b}");
        }
        // Well-separated clusters: both backends find the same partition.
        let data = dentate::data::clustered(&dentate::data::SynthConfig {
            n: 3_000,
            dim,
            clusters: 12,
            spread: 0.05,
            seed: 21,
        })
        .unwrap();
        let cfg = KMeansConfig::new(12).spherical(true).seed(3).max_iter(20);
        let g = KMeans::train(&data, dim, &cfg, backend.as_ref()).unwrap();
        let w = KMeans::train(&data, dim, &cfg, &reference()).unwrap();
        assert_eq!(g.sizes, w.sizes, "cluster sizes");
        for (a, b) in g.centroids.iter().zip(&w.centroids) {
            assert!((a - b).abs() <= 1e-4, "centroid {a} vs {b}");
        }
        assert_eq!(
            g.assign(&data, backend.as_ref()).unwrap(),
            w.assign(&data, &reference()).unwrap()
        );
    }

    /// The fused k-means step against the reference's assign + sums, both
    /// metrics, on a dimension that is no multiple of 4; repeated steps
    /// under one uid (the GPU keeps the points), then other points under a
    /// new uid and the same shape (a kept copy must not answer for them),
    /// and points without an identity.
    pub fn kmeans_step(backend: Arc<dyn Compute>) {
        let dim = 22;
        let first = common::gaussian(1_700, dim, 40);
        let second = common::gaussian(1_700, dim, 41);
        let centroids = common::gaussian(29, dim, 42);
        let panels = Panels::from_rows(&centroids, dim, Precision::F32);
        let uid = dentate::views::new_uid();
        let cases = [
            (&first, uid),
            (&first, uid),
            (&second, dentate::views::new_uid()),
            (&first, 0),
        ];
        for metric in [Metric::L2, Metric::Cosine] {
            for (i, (rows, uid)) in cases.iter().enumerate() {
                let points = PointsRef { rows, dim, uid: *uid };
                let got = backend.kmeans_step(points, &panels, metric);
                let (wa, ws) = reference().assign(rows, &panels, metric);
                let (wsum, wc) = reference().cluster_sums(rows, dim, &wa, 29);
                assert_eq!(got.assign, wa, "{metric:?} case {i}: assignments");
                assert_eq!(got.counts, wc, "{metric:?} case {i}: counts");
                assert_eq!(got.counts.iter().sum::<u32>(), 1_700);
                for (a, b) in got.scores.iter().zip(&ws) {
                    assert!(
                        (a - b).abs() <= 1e-3 * b.abs().max(1.0),
                        "{metric:?} case {i}: score {a} vs {b}"
                    );
                }
                for (a, b) in got.sums.iter().zip(&wsum) {
                    assert!(
                        (a - b).abs() <= 1e-3 * b.abs().max(1.0),
                        "{metric:?} case {i}: sum {a} vs {b}"
                    );
                }
            }
        }
    }

    /// Pairwise distance sums and the silhouette score, both metrics.
    pub fn silhouette_scores(backend: Arc<dyn Compute>) {
        let dim = 16;
        let data = synth(600, dim, 5, 31);
        let mut r = Rng::new(2);
        let labels: Vec<u32> = (0..600).map(|_| (r.next_u64() % 5) as u32).collect();
        let panels = Panels::from_rows(&data, dim, Precision::F32);
        for metric in [Metric::Cosine, Metric::L2] {
            let g = backend.cluster_distance_sums(&panels, &labels, 5, metric);
            let w = reference().cluster_distance_sums(&panels, &labels, 5, metric);
            assert_eq!(g.len(), w.len());
            for (a, b) in g.iter().zip(&w) {
                assert!((a - b).abs() <= 1e-3 * b.abs().max(1.0), "{metric:?} {a} vs {b}");
            }
            let gs = silhouette(&data, dim, &labels, 5, metric, 10_000, 1, backend.as_ref()).unwrap();
            let ws = silhouette(&data, dim, &labels, 5, metric, 10_000, 1, &reference()).unwrap();
            assert!((gs - ws).abs() <= 1e-4, "{metric:?} silhouette {gs} vs {ws}");
        }
    }

    /// IVF-PQ: the ADC scan alone and with exact re-ranking (f16 store), on
    /// an index trained once (so both backends see the same codes), before
    /// and after appends, deletes and a compaction.
    pub fn ivfpq(backend: Arc<dyn Compute>) {
        ivfpq_within(backend, None);
    }

    /// [`ivfpq`]; `rounded_tables`: scores within that tolerance of the
    /// reference (a lookup table kept in f16 rounds each entry), and no
    /// deep re-ranked shortlists (a rounded score moves entries across a
    /// 400-deep shortlist's cut, so a different one is re-ranked).
    pub fn ivfpq_within(backend: Arc<dyn Compute>, rounded_tables: Option<f32>) {
        let tol = rounded_tables.unwrap_or(1e-4);
        let dim = 32;
        let n = 4_000;
        let data = synth(n, dim, 30, 41);
        let ids = wide_ids(n, 6);
        let queries = synth(60, dim, 30, 42);
        let mut cfg = IvfPqConfig::new(32, 8);
        cfg.kmeans_iterations = 8;
        cfg.pq_iterations = 8;
        let mut want = IvfPqIndex::new(dim, cfg).unwrap();
        want.set_compute(Arc::new(reference()));
        want.train(&data[..3_000 * dim]).unwrap();
        want.add(&ids[..3_000], &data[..3_000 * dim]).unwrap();
        let mut got = want.clone();
        got.set_compute(backend.clone());
        let check = |got: &IvfPqIndex, want: &IvfPqIndex, stage: &str| {
            // Deep shortlists too (k × re-rank 1,024, k 300, and a re-rank
            // of k = 200: the GPU's per-thread lists once stopped at 128).
            for (nprobe, rerank, k) in [
                (1, 0, 10),
                (4, 0, 10),
                (8, 4, 10),
                (32, 0, 64),
                (32, 12, 10),
                (3, 8, 1),
                (32, 16, 64),
                (16, 0, 300),
                (32, 2, 200),
            ] {
                if rounded_tables.is_some() && rerank > 0 && k * rerank > 128 {
                    continue;
                }
                let p = IvfSearchParams { nprobe, rerank };
                let g = got.search_with(&queries, k, p).unwrap();
                let w = want.search_with(&queries, k, p).unwrap();
                assert_same(
                    &as_cands(g),
                    &as_cands(w),
                    tol,
                    &format!("{stage} nprobe={nprobe} rerank={rerank} k={k}"),
                );
            }
        };
        check(&got, &want, "trained");
        for idx in [&mut want, &mut got] {
            idx.add(&ids[3_000..], &data[3_000 * dim..]).unwrap();
            idx.remove(&ids[..200]);
        }
        check(&got, &want, "appended");
        for idx in [&mut want, &mut got] {
            idx.compact();
        }
        check(&got, &want, "compacted");
    }

    /// 4-bit fast-scan through IVF and flat fast-scan indexes trained once:
    /// odd and even sub-quantizer counts (the padding group), many k and
    /// re-rank settings, then appends (partial blocks filled in place, lists
    /// outgrowing their device slots), deletes and a compaction. The tables
    /// are the host's, so sums are exact and scores equal to f32 rounding.
    pub fn fastscan(backend: Arc<dyn Compute>) {
        for (dim, nlist, m) in [(32, 24, 16), (30, 16, 15), (24, 1, 12)] {
            let n = 3_000;
            let data = synth(n, dim, 30, 61 + dim as u64);
            let ids = wide_ids(n, 8);
            let queries = synth(40, dim, 30, 62);
            let mut cfg = IvfPqConfig::fastscan(nlist, m);
            cfg.kmeans_iterations = 8;
            cfg.pq_iterations = 8;
            let mut want = IvfPqIndex::new(dim, cfg).unwrap();
            want.set_compute(Arc::new(reference()));
            want.train(&data[..2_000 * dim]).unwrap();
            want.add(&ids[..1_000], &data[..1_000 * dim]).unwrap();
            let mut got = want.clone();
            got.set_compute(backend.clone());
            let check = |got: &IvfPqIndex, want: &IvfPqIndex, stage: &str| {
                for (nprobe, rerank, k) in [
                    (1, 0, 10),
                    (4, 0, 10),
                    (8, 4, 10),
                    (16, 0, 100),
                    (6, 8, 1),
                    (16, 12, 100),
                    (16, 0, 300),
                ] {
                    let p = IvfSearchParams { nprobe, rerank };
                    let g = as_cands(got.search_with(&queries, k, p).unwrap());
                    let w = as_cands(want.search_with(&queries, k, p).unwrap());
                    let what = format!("fast-scan m={m} nlist={nlist} {stage} nprobe={nprobe} rerank={rerank} k={k}");
                    assert_same(&g, &w, 1e-5, &what);
                }
            };
            check(&got, &want, "trained");
            // Appends of 7 rows leave partial blocks to be filled in place;
            // 2,000 more rows outgrow the device slots of every list.
            for (a, b) in [(1_000, 1_007), (1_007, 3_000)] {
                for idx in [&mut want, &mut got] {
                    idx.add(&ids[a..b], &data[a * dim..b * dim]).unwrap();
                }
                check(&got, &want, &format!("{b} rows"));
            }
            for idx in [&mut want, &mut got] {
                idx.remove(&ids[..300]);
            }
            check(&got, &want, "deleted");
            for idx in [&mut want, &mut got] {
                idx.compact();
            }
            check(&got, &want, "compacted");
        }
    }

    /// Re-ranking directly: f32, f16 and 8-bit stores, an odd dimension, duplicate
    /// candidates, candidate lists of different lengths.
    pub fn rerank(backend: Arc<dyn Compute>) {
        let dim = 13;
        let rows = common::gaussian(500, dim, 51);
        let ids = wide_ids(500, 7);
        let queries = common::gaussian(9, dim, 52);
        let mut r = Rng::new(3);
        let cands: Vec<Vec<u32>> = (0..9)
            .map(|q| (0..(20 + 17 * q)).map(|_| (r.next_u64() % 500) as u32).collect())
            .collect();
        for format in [StoreFormat::F32, StoreFormat::F16, StoreFormat::Sq8] {
            let mut store = RerankStore::new(dim, format);
            store.train(&rows).unwrap();
            store.extend(&rows).unwrap();
            let s = StoreRef {
                store: &store,
                uid: dentate::views::new_uid(),
                epoch: 0,
            };
            // f16 and 8-bit scores are the same on both sides up to the
            // order of summation; f16's products are just coarser.
            let tol = match format {
                StoreFormat::F32 | StoreFormat::Sq8 => 1e-4,
                StoreFormat::F16 => 1e-2,
            };
            let precision = format;
            // Above 128 too (the GPU's per-thread lists once stopped there).
            for k in [1, 5, 40, 150, 300] {
                let g = backend.rerank(&queries, s, &ids, &cands, k);
                let w = reference().rerank(&queries, s, &ids, &cands, k);
                // Duplicated candidates score the same: compare as sets of ids.
                let dedup = |v: Vec<Vec<Cand>>| -> Vec<Vec<Cand>> {
                    v.into_iter()
                        .map(|mut l| {
                            l.dedup_by_key(|c| c.id);
                            l
                        })
                        .collect()
                };
                assert_same(&dedup(g), &dedup(w), tol, &format!("{precision:?} k={k}"));
            }
        }
    }

    /// Salience of every row and the lowest fraction, through an index and
    /// directly (ties: rows added the same turn score the same, so ids
    /// decide).
    pub fn salience(backend: Arc<dyn Compute>) {
        let params = SalienceParams::default();
        let mut r = Rng::new(77);
        let n = 5_000;
        let added: Vec<u64> = (0..n).map(|_| r.next_u64() % 50).collect();
        let last: Vec<u64> = (0..n)
            .map(|i| {
                if i % 3 == 0 {
                    dentate::salience::NEVER
                } else {
                    40 + r.next_u64() % 20
                }
            })
            .collect();
        let g = backend.salience(&added, &last, 120, &params);
        let w = reference().salience(&added, &last, 120, &params);
        for (a, b) in g.iter().zip(&w) {
            assert!((a - b).abs() <= 1e-5, "salience {a} vs {b}");
        }
        let ids = wide_ids(n, 9);
        let mut alive = Bitset::new();
        for i in 0..n {
            alive.push(i % 7 != 0);
        }
        for count in [1, 17, 1_000, n] {
            // The reference's own scores, so the selection alone is compared.
            assert_eq!(
                backend.lowest(&w, &ids, &alive, count),
                reference().lowest(&w, &ids, &alive, count),
                "lowest {count}"
            );
        }
        let dim = 8;
        let data = synth(2_000, dim, 10, 3);
        let ids: Vec<u64> = (0..2_000).collect();
        let mut a = FlatIndex::new(dim);
        a.set_compute(backend.clone());
        let mut b = FlatIndex::new(dim);
        b.set_compute(Arc::new(reference()));
        for idx in [&mut a, &mut b] {
            idx.add(&ids[..1_000], &data[..1_000 * dim]).unwrap();
            idx.set_turn(30);
            idx.add(&ids[1_000..], &data[1_000 * dim..]).unwrap();
        }
        let pa = a.prune_lowest(0.1, &params).unwrap();
        let pb = b.prune_lowest(0.1, &params).unwrap();
        assert_eq!(pa, pb, "pruned ids");
        assert_eq!(pa.len(), 200);
        assert!(pa.iter().all(|&id| id < 1_000), "the older rows go first");
    }

    /// The `k` rule on a backend: on an index smaller than the kernels'
    /// largest list, a huge `k` (and `k × rerank` overflowing) is clamped
    /// to the live rows, so it runs on the backend itself (the GPU
    /// suite's fallback counter stays at zero) and answers as `k = live`
    /// does on the reference.
    pub fn huge_k(backend: Arc<dyn Compute>) {
        let dim = 16;
        let data = synth(400, dim, 6, 77);
        let ids = wide_ids(100, 9);
        let queries = synth(8, dim, 6, 78);
        let mut want = FlatIndex::new(dim);
        want.set_compute(Arc::new(reference()));
        want.add(&ids, &data[..100 * dim]).unwrap();
        want.remove(&ids[..5]);
        let mut got = want.clone();
        got.set_compute(backend.clone());
        let w = want.search(&queries, want.len()).unwrap();
        for k in [usize::MAX, 1 << 40] {
            assert_same(
                &as_cands(got.search(&queries, k).unwrap()),
                &as_cands(w.clone()),
                1e-4,
                "flat huge k",
            );
        }
        // The kernel itself, given an unclamped k.
        let direct = backend.top_k(&queries, got.base(), usize::MAX);
        let reference_all = reference().top_k(&queries, want.base(), 100);
        assert_same(&direct, &reference_all, 1e-4, "top_k huge k");
        for cfg in [IvfPqConfig::new(4, 4), IvfPqConfig::fastscan(4, 8)] {
            let mut cfg = cfg;
            cfg.kmeans_iterations = 5;
            cfg.pq_iterations = 5;
            let mut want = IvfPqIndex::new(dim, cfg).unwrap();
            want.set_compute(Arc::new(reference()));
            want.train(&data).unwrap();
            want.add(&ids, &data[..100 * dim]).unwrap();
            want.remove(&ids[..5]);
            let mut got = want.clone();
            got.set_compute(backend.clone());
            for (nprobe, rerank) in [(2, 0), (4, usize::MAX), (usize::MAX, 1 << 40)] {
                let p = IvfSearchParams { nprobe, rerank };
                let w = want.search_with(&queries, want.len(), p).unwrap();
                let g = got.search_with(&queries, usize::MAX, p).unwrap();
                assert_same(
                    &as_cands(g),
                    &as_cands(w),
                    1e-4,
                    &format!("ivf huge k nprobe={nprobe} rerank={rerank}"),
                );
            }
        }
    }
}

macro_rules! conformance {
    ($name:ident, $backend:expr, $after:expr) => {
        mod $name {
            use super::*;
            fn run(case: fn(Arc<dyn Compute>)) {
                let Some(b) = $backend else { return };
                case(b.clone());
                $after(&b);
            }
            #[test]
            fn exact_top_k() {
                run(cases::exact_top_k)
            }
            #[test]
            fn exact_top_k_long() {
                run(cases::exact_top_k_long)
            }
            #[test]
            fn assign_and_matmul() {
                run(cases::assign_and_matmul)
            }
            #[test]
            fn kmeans() {
                run(cases::kmeans)
            }
            #[test]
            fn kmeans_step() {
                run(cases::kmeans_step)
            }
            #[test]
            fn silhouette_scores() {
                run(cases::silhouette_scores)
            }
            #[test]
            fn ivfpq() {
                run(cases::ivfpq)
            }
            #[test]
            fn rerank() {
                run(cases::rerank)
            }
            #[test]
            fn fastscan() {
                run(cases::fastscan)
            }
            #[test]
            fn salience() {
                run(cases::salience)
            }
            #[test]
            fn huge_k() {
                run(cases::huge_k)
            }
        }
    };
}

fn no_check(_: &Arc<dyn Compute>) {}

fn as_dyn(g: Option<Arc<GpuCompute>>) -> Option<Arc<dyn Compute>> {
    g.map(|g| g as Arc<dyn Compute>)
}

/// The shared GPU backend never fell back to the CPU.
fn gpu_ran_everything(_: &Arc<dyn Compute>) {
    if let Some(g) = gpu() {
        assert_eq!(g.fallbacks(), 0, "an operation fell back to the CPU");
    }
}

conformance!(cpu, Some(Arc::new(CpuCompute::default()) as Arc<dyn Compute>), no_check);
conformance!(gpu_vulkan, as_dyn(gpu()), gpu_ran_everything);

/// The chunked paths: a 64 KiB binding limit splits bases, stores, points
/// and query batches into many chunks on small data.
mod gpu_chunked {
    use super::*;
    fn chunked_gpu() -> Option<Arc<GpuCompute>> {
        static G: OnceLock<Option<Arc<GpuCompute>>> = OnceLock::new();
        G.get_or_init(|| {
            open_gpu(GpuOptions {
                allow_software: true,
                binding_limit: Some(64 << 10),
                ..GpuOptions::default()
            })
        })
        .clone()
    }
    fn chunked() -> Option<Arc<dyn Compute>> {
        as_dyn(chunked_gpu())
    }
    #[test]
    fn exact_top_k() {
        if let Some(b) = chunked() {
            cases::exact_top_k(b);
        }
    }
    #[test]
    fn exact_top_k_long() {
        if let Some(b) = chunked() {
            cases::exact_top_k_long(b);
        }
    }
    #[test]
    fn kmeans() {
        if let Some(b) = chunked() {
            cases::kmeans(b);
        }
    }
    /// Points in many chunks, every step on the device (a separate
    /// backend: the other chunked cases may fall back by design).
    #[test]
    fn kmeans_step() {
        let Some(g) = open_gpu(GpuOptions {
            allow_software: true,
            binding_limit: Some(16 << 10),
            ..GpuOptions::default()
        }) else {
            return;
        };
        cases::kmeans_step(g.clone());
        assert_eq!(g.fallbacks(), 0, "a k-means step fell back to the CPU");
    }
    #[test]
    fn rerank() {
        if let Some(b) = chunked() {
            cases::rerank(b);
        }
    }
    #[test]
    fn fastscan() {
        if let Some(b) = chunked() {
            cases::fastscan(b);
        }
    }
}

/// Every placement of the PQ lookup table gives the same answers.
#[test]
fn gpu_table_placements_agree() {
    for table in [
        TablePlacement::Global,
        TablePlacement::SharedF16,
        TablePlacement::Shared,
    ] {
        let Some(g) = open_gpu(GpuOptions {
            allow_software: true,
            table,
            ..GpuOptions::default()
        }) else {
            return;
        };
        // f16 entries: a sum of m = 8 of them is within ~2e-4 at these
        // scores, and 300-deep lists reach such differences.
        let rounded = (table == TablePlacement::SharedF16).then_some(1e-3);
        cases::ivfpq_within(g.clone(), rounded);
        assert_eq!(g.fallbacks(), 0, "{table:?} fell back");
    }
}

/// What the kernels do not cover (k above the largest list) runs on the
/// CPU, gives the CPU's answer, and is counted.
#[test]
fn gpu_falls_back_beyond_its_kernels() {
    let Some(g) = open_gpu(GpuOptions {
        allow_software: true,
        ..GpuOptions::default()
    }) else {
        return;
    };
    let dim = 8;
    let data = synth(dentate::gpu::MAX_EXACT_K + 100, dim, 4, 1);
    let panels = Panels::from_rows(&data, dim, Precision::F32);
    let k = dentate::gpu::MAX_EXACT_K + 1;
    let got = g.top_k(&data[..dim], BaseRef::plain(&panels), k);
    // The fallback is the CPU backend on this machine's own SIMD path.
    let want = CpuCompute::default().top_k(&data[..dim], BaseRef::plain(&panels), k);
    assert_eq!(got, want);
    assert_eq!(g.fallbacks(), 1);
}

/// Many queries against a base shorter than a segment: the survivors'
/// buffer (a segment a query) bounds the batch, so every batch fits a
/// binding and nothing falls back (10,000 queries × 2,048 or 4,096 slots
/// × 8 bytes would be 156 or 312 MiB in one buffer, past llvmpipe's
/// bindings).
#[test]
fn gpu_many_queries_short_base() {
    let Some(g) = open_gpu(GpuOptions {
        allow_software: true,
        ..GpuOptions::default()
    }) else {
        return;
    };
    let (dim, n, nq) = (8, 1_500, 10_000);
    let data = synth(n, dim, 12, 29);
    let queries = synth(nq, dim, 12, 30);
    let panels = Panels::from_rows(&data, dim, Precision::F32);
    let got = g.top_k(&queries, BaseRef::plain(&panels), 10);
    assert_same(
        &got,
        &reference().top_k(&queries, BaseRef::plain(&panels), 10),
        1e-4,
        "short base",
    );
    assert_eq!(g.fallbacks(), 0);
}

/// Tombstones that cover fewer rows than the base (a caller's `BaseRef`)
/// leave the rows past them dead, as on the CPU: the GPU, whose GEMM reads
/// a bit for every row without bounds checks, hands such a search to the
/// CPU instead of reading past the bits.
#[test]
fn gpu_short_tombstones_run_on_the_cpu() {
    let Some(g) = open_gpu(GpuOptions {
        allow_software: true,
        ..GpuOptions::default()
    }) else {
        return;
    };
    let (dim, n) = (16, 3_000);
    let data = synth(n, dim, 12, 23);
    let panels = Panels::from_rows(&data, dim, Precision::F32);
    let mut alive = dentate::Bitset::new();
    for i in 0..1_000 {
        alive.push(i != 7);
    }
    let base = BaseRef {
        alive: Some(&alive),
        ..BaseRef::plain(&panels)
    };
    let q = &data[2_500 * dim..2_502 * dim];
    let got = g.top_k(q, base, 10);
    assert!(got.iter().flatten().all(|c| c.id < 1_000 && c.id != 7), "{got:?}");
    assert_same(&got, &reference().top_k(q, base, 10), 1e-4, "short tombstones");
    assert_eq!(g.fallbacks(), 1);
}

/// The tombstones go to the device once per state of the bits: a repeated
/// search sends none of them, a search after a delete sends them again and
/// no longer finds the deleted row.
#[test]
fn gpu_tombstones_cached_by_generation() {
    let Some(g) = open_gpu(GpuOptions {
        allow_software: true,
        ..GpuOptions::default()
    }) else {
        return;
    };
    let (dim, n) = (8, 64_000);
    let data = synth(n, dim, 16, 21);
    let ids: Vec<u64> = (0..n as u64).collect();
    let mut idx = FlatIndex::with_precision(dim, Precision::F32);
    idx.add(&ids, &data).unwrap();
    idx.remove(&[5]);
    let q = &data[100 * dim..101 * dim];
    let search = |idx: &FlatIndex| {
        let before = g.uploaded_bytes();
        let r = g.top_k(q, idx.base(), 10);
        (r, g.uploaded_bytes() - before)
    };
    let (first, sent_first) = search(&idx);
    let (again, sent_again) = search(&idx);
    let words = (n.div_ceil(64) * 8) as u64;
    assert!(
        sent_first >= (n * dim * 4) as u64 + words,
        "the first search sends base and tombstones"
    );
    assert_eq!(first, again);
    assert!(
        sent_again < words,
        "a repeated search sent {sent_again} bytes, the tombstones alone are {words}"
    );
    let top = first[0][0].id;
    assert_eq!(top, 100, "the query's own row comes first");
    idx.remove(&[top]);
    let (after, sent_after) = search(&idx);
    assert!(
        sent_after >= sent_again + words,
        "after a delete the tombstones are sent again ({sent_after} bytes)"
    );
    assert!(after[0].iter().all(|c| c.id != top), "the deleted row is gone");
    assert_same(&after, &reference().top_k(q, idx.base(), 10), 1e-4, "after the delete");
    assert_eq!(g.fallbacks(), 0);
}

/// Every shape of the exact-search GEMM gives the reference's answers:
/// exact search (short and long, f32 and f16 bases), score matrices and
/// k-means steps.
#[test]
fn gpu_gemm_shapes_agree() {
    for shape in dentate::gpu::GemmShape::ALL {
        let Some(g) = open_gpu(GpuOptions {
            allow_software: true,
            gemm: Some(shape),
            ..GpuOptions::default()
        }) else {
            return;
        };
        eprintln!("GEMM shape {shape}");
        cases::exact_top_k(g.clone());
        cases::exact_top_k_long(g.clone());
        cases::assign_and_matmul(g.clone());
        cases::kmeans_step(g.clone());
        assert_eq!(g.fallbacks(), 0, "shape {shape} fell back");
    }
}
