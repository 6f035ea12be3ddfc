//! 4-bit PQ fast-scan: the SIMD scan equals a plain scalar implementation
//! of the same quantised arithmetic, every SIMD path equals the portable
//! one, u16 sums cannot overflow, full probe + full re-rank is exact
//! search, deletes/updates/compaction/pruning, typed errors, tuning.

mod common;
use common::*;
use dentate::data::recall_at_k;
use dentate::fastscan::{QuantizedTables, block_sums, pack_codes, padded_m};
use dentate::{
    Bitset, Cand, Compute, CpuCompute, Error, Index, IndexKind, InvList, InvertedRef, Isa, IvfParts, IvfPlan,
    IvfPqConfig, IvfPqIndex, IvfSearchParams, PqCodes, PqTrainConfig, Probe, ProductQuantizer, SalienceParams,
    StoreFormat, TuneConfig, default_compute, split_queries, tune_fastscan, tune_fastscan_from_base,
};
use proptest::prelude::*;

/// A trained 4-bit PQ on Gaussian data.
fn pq4(dim: usize, m: usize, seed: u64) -> ProductQuantizer {
    let data = gaussian(400, dim, seed);
    let cfg = PqTrainConfig {
        iterations: 4,
        bits: 4,
        seed,
        ..Default::default()
    };
    ProductQuantizer::train(&data, dim, m, &cfg, default_compute().as_ref()).unwrap()
}

/// What the fast-scan kernel reads of an index, for lists built by hand.
fn parts4<'a>(pq: &'a ProductQuantizer, lists: InvertedRef<'a>, ids: &'a [u64], alive: &'a Bitset) -> IvfParts<'a> {
    IvfParts {
        codes: PqCodes::FastScan4,
        books: pq.books(),
        lists,
        ids,
        alive,
        store: None,
    }
}

/// A planned scan of `queries` (already in the quantizer's space) over
/// `probes`, keeping `k` candidates each.
fn plan(queries: &[f32], probes: &[Vec<Probe>], k: usize) -> IvfPlan {
    IvfPlan {
        queries: queries.to_vec(),
        rotated: queries.to_vec(),
        probes: probes.to_vec(),
        shortlist: k,
        k,
        rerank: false,
    }
}

/// The obvious implementation: quantise the query's tables, add up each
/// live code's table entries one by one, score, sort, cut.
fn reference(
    pq: &ProductQuantizer,
    q: &[f32],
    lists: &[(Vec<u8>, Vec<u32>, f32)],
    ids: &[u64],
    alive: &Bitset,
    k: usize,
) -> Vec<Cand> {
    let m = pq.m();
    let qt = QuantizedTables::new(&pq.tables(q), m).unwrap();
    let mut all = Vec::new();
    for (codes, rows, bias) in lists {
        for (code, &row) in codes.chunks_exact(m).zip(rows) {
            if !alive.get(row as usize) {
                continue;
            }
            let mut sum = 0u32;
            for (j, &c) in code.iter().enumerate() {
                sum += u32::from(qt.lut()[16 * j + usize::from(c)]);
            }
            assert!(sum <= 65535);
            all.push(Cand {
                score: qt.score(sum as u16, *bias),
                id: ids[row as usize],
                row,
            });
        }
    }
    all.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
    all.truncate(k);
    all
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Same candidates, same scores, same order, on every SIMD path.
    #[test]
    fn scan_equals_scalar_reference(
        dsub in 1usize..4,
        m in 1usize..20,
        sizes in proptest::collection::vec(0usize..90, 1..5),
        nq in 1usize..40,
        k in 1usize..40,
        dead in proptest::collection::vec(any::<bool>(), 0..400),
        seed in 0u64..1000,
    ) {
        let dim = m * dsub;
        let pq = pq4(dim, m, seed);
        let total: usize = sizes.iter().sum();
        let mut r = dentate::rng::Rng::new(seed);
        // Ids out of row order and far apart, so id ties are exercised by order.
        let ids: Vec<u64> = (0..total as u64).map(|i| (i * 7919) % 100_003).collect();
        let mut alive = Bitset::new();
        for i in 0..total {
            alive.push(!dead.get(i).copied().unwrap_or(false));
        }
        let mut lists = Vec::new();
        let mut row = 0u32;
        for &n in &sizes {
            // Few distinct codes so that equal scores (ties) occur.
            let codes: Vec<u8> = (0..n * m).map(|_| (r.next_u64() % 3) as u8 * 5).collect();
            let rows: Vec<u32> = (row..row + n as u32).collect();
            row += n as u32;
            lists.push((codes, rows, r.normal() * 0.1));
        }
        let packed: Vec<Vec<u8>> = lists.iter().map(|(c, _, _)| pack_codes(c, m)).collect();
        let queries = gaussian(nq, dim, seed + 1);
        // Each query probes its own subset of the lists, in its own order
        // (and its own bias), so the chunked scan groups partly shared lists
        // (up to 40 queries: groups of several, lists shared by up to 4 per pass).
        let picks: Vec<Vec<usize>> = (0..nq)
            .map(|_| {
                let mut p: Vec<usize> = (0..lists.len()).filter(|_| !r.next_u64().is_multiple_of(4)).collect();
                for i in (1..p.len()).rev() {
                    p.swap(i, r.below(i + 1));
                }
                p
            })
            .collect();
        let biases: Vec<Vec<f32>> = picks.iter().map(|p| p.iter().map(|&l| lists[l].2 + 0.01 * (l % 3) as f32).collect()).collect();
        let inv: Vec<InvList> = packed
            .iter()
            .zip(&lists)
            .map(|(p, l)| InvList { rows: l.1.clone(), codes: p.clone() })
            .collect();
        let inverted = InvertedRef { lists: &inv, m, uid: 1, epoch: 0 };
        let probes: Vec<Vec<Probe>> = picks
            .iter()
            .zip(&biases)
            .map(|(p, b)| p.iter().zip(b).map(|(&l, &bias)| Probe { list: l as u32, bias }).collect())
            .collect();
        for isa in Isa::available() {
            let c = CpuCompute::with_isa(isa).unwrap();
            let got = c.fastscan_top_k(&parts4(&pq, inverted, &ids, &alive), &plan(&queries, &probes, k)).unwrap();
            prop_assert_eq!(got.len(), nq);
            for (qi, g) in got.iter().enumerate() {
                let own: Vec<(Vec<u8>, Vec<u32>, f32)> = picks[qi]
                    .iter()
                    .zip(&biases[qi])
                    .map(|(&l, &bias)| (lists[l].0.clone(), lists[l].1.clone(), bias))
                    .collect();
                let want = reference(&pq, &queries[qi * dim..(qi + 1) * dim], &own, &ids, &alive, k);
                prop_assert_eq!(g, &want, "{:?} query {}", isa, qi);
            }
        }
    }

    /// The raw kernel output of every path equals the portable path's, and
    /// both equal the modular sum of the table entries.
    #[test]
    fn simd_paths_agree_on_random_blocks(
        m2half in 1usize..70,
        nb in 1usize..5,
        seed in 0u64..10_000,
    ) {
        let m2 = 2 * m2half;
        let mut r = dentate::rng::Rng::new(seed);
        let lut: Vec<u8> = (0..16 * m2).map(|_| (r.next_u64() % 256) as u8).collect();
        let blocks: Vec<u8> = (0..16 * m2 * nb).map(|_| (r.next_u64() % 256) as u8).collect();
        let want = block_sums(Isa::Scalar, &lut, &blocks).unwrap();
        for (e, &got) in want.iter().enumerate() {
            let (b, i) = (e / 32, e % 32);
            let sum: u32 = (0..m2)
                .map(|j| {
                    let byte = blocks[b * 16 * m2 + 16 * j + i % 16];
                    u32::from(lut[16 * j + usize::from(if i < 16 { byte & 15 } else { byte >> 4 })])
                })
                .sum();
            prop_assert_eq!(u32::from(got), sum % 65536);
        }
        for isa in Isa::available() {
            prop_assert_eq!(&block_sums(isa, &lut, &blocks).unwrap(), &want, "{:?}", isa);
        }
    }
}

/// Tables built to stress the u16 bound: many sub-quantizers with equal
/// spans, one huge span among tiny ones, constant tables. The quantised
/// maxima never sum past 65535, and the codes that pick every table's
/// maximum sum to exactly that (no wrap) on every path.
#[test]
fn u16_sums_cannot_overflow() {
    let mut r = dentate::rng::Rng::new(9);
    for m in [1usize, 2, 255, 256, 257, 258, 300, 511, 1000, 2047] {
        let cases: Vec<Vec<f32>> = vec![
            (0..16 * m).map(|i| (i % 16) as f32).collect(),
            (0..16 * m)
                .map(|i| if i < 16 { 1e6 * i as f32 } else { (i % 16) as f32 * 1e-3 })
                .collect(),
            (0..16 * m).map(|_| r.normal()).collect(),
            vec![3.5; 16 * m],
        ];
        for tables in cases {
            let qt = QuantizedTables::new(&tables, m).unwrap();
            let exact: u32 = qt.lut().chunks(16).map(|t| u32::from(*t.iter().max().unwrap())).sum();
            assert_eq!(qt.max_sum(), exact);
            assert!(exact <= 65535, "m = {m}: {exact}");
            if m == 256 && tables[1] == 1.0 && tables[16] == 0.0 {
                // Equal spans at m ≤ 256: full 8-bit resolution, sum 255·m.
                assert_eq!(exact, 255 * 256);
            }
            // A block whose entry 5 picks every table's maximum, entry 21 every minimum.
            let m2 = padded_m(m);
            let mut blocks = vec![0u8; 16 * m2];
            for j in 0..m {
                let t = &qt.lut()[16 * j..16 * j + 16];
                let argmax = (0..16).max_by_key(|&c| t[c]).unwrap() as u8;
                let argmin = (0..16).min_by_key(|&c| t[c]).unwrap() as u8;
                blocks[16 * j + 5] = argmax | (argmin << 4);
            }
            for isa in Isa::available() {
                let sums = block_sums(isa, qt.lut(), &blocks).unwrap();
                assert_eq!(u32::from(sums[5]), exact, "{isa:?} m = {m}");
                assert_eq!(sums[21], 0, "{isa:?} m = {m}");
            }
        }
    }
    // Handed raw tables that break the bound, every path wraps identically
    // (300 tables of 255 sum to 76,500 = 10,964 mod 65,536).
    let lut = vec![255u8; 16 * 300];
    let blocks = vec![0u8; 16 * 300];
    for isa in Isa::available() {
        assert!(
            block_sums(isa, &lut, &blocks).unwrap().iter().all(|&s| s == 10_964),
            "{isa:?}"
        );
    }
}

fn fastscan(base: &[f32], dim: usize, cfg: IvfPqConfig) -> IvfPqIndex {
    let mut idx = IvfPqIndex::new(dim, cfg).unwrap();
    idx.train(base).unwrap();
    let ids: Vec<u64> = (0..(base.len() / dim) as u64).collect();
    idx.add(&ids, base).unwrap();
    idx
}

/// With every list probed and every vector re-ranked from an f32 store,
/// fast-scan is exact search — IVF, flat, and an odd number of
/// sub-quantizers (a padding sub-quantizer) alike.
#[test]
fn full_probe_and_full_rerank_equals_exact_search() {
    for (dim, cfg) in [
        (32, IvfPqConfig::fastscan(8, 16)),
        (30, IvfPqConfig::fastscan(5, 15).opq(true)),
        (24, IvfPqConfig::flat_fastscan(6)),
    ] {
        let n = 1200;
        let base = synth(n, dim, 12, 31);
        let queries = synth(40, dim, 12, 32);
        let nlist = cfg.nlist;
        let mut cfg = cfg;
        cfg.rerank_store = Some(StoreFormat::F32);
        cfg.opq_config.iterations = 3;
        let idx = fastscan(&base, dim, cfg);
        assert_eq!(idx.kind(), IndexKind::FastScan);
        let k = 10;
        let got = idx
            .search_with(
                &queries,
                k,
                IvfSearchParams {
                    nprobe: nlist,
                    rerank: n,
                },
            )
            .unwrap();
        let want = exact_index(&base, dim).search(&queries, k).unwrap();
        assert_same_hits(&got, &want, 1e-5);
    }
}

/// 20,000 clustered 64-d vectors: fast-scan with 32 sub-quantizers (16
/// bytes of codes) and a 10× re-rank from f16 reaches recall@10 ≥ 0.95;
/// without re-ranking the 4-bit scores alone are clearly worse.
#[test]
fn recall_with_rerank_reaches_095() {
    let dim = 64;
    let n = 20_000;
    let all = synth(n + 200, dim, 200, 33);
    let (base, queries) = all.split_at(n * dim);
    let idx = fastscan(base, dim, IvfPqConfig::fastscan(64, 32));
    let truth = exact_ids(base, dim, queries, 10);
    let r = recall_at_k(
        &idx.search_with(queries, 10, IvfSearchParams { nprobe: 16, rerank: 10 })
            .unwrap(),
        &truth,
        10,
    );
    assert!(r >= 0.95, "recall@10 = {r}");
    let raw = recall_at_k(
        &idx.search_with(queries, 10, IvfSearchParams { nprobe: 16, rerank: 0 })
            .unwrap(),
        &truth,
        10,
    );
    assert!(raw < r - 0.05, "4-bit scores alone {raw} vs re-ranked {r}");
    // The default search uses the configured nprobe 16 and re-rank 10.
    assert_eq!(
        ids(&idx.search(queries, 10).unwrap()),
        ids(&idx
            .search_with(queries, 10, IvfSearchParams { nprobe: 16, rerank: 10 })
            .unwrap())
    );
}

/// A batch scans each list once for the queries that probe it; the hits
/// are those of searching the queries one at a time, deletes included.
#[test]
fn batched_search_equals_one_query_at_a_time() {
    let dim = 32;
    let base = synth(4000, dim, 24, 35);
    let queries = synth(150, dim, 24, 36);
    let mut idx = fastscan(&base, dim, IvfPqConfig::fastscan(32, 16));
    let removed: Vec<u64> = (0..4000).filter(|i| i % 5 == 0).collect();
    assert_eq!(idx.remove(&removed), 800);
    for params in [
        IvfSearchParams { nprobe: 1, rerank: 0 },
        // One query probing few of the 32 lists, and a batch probing all.
        IvfSearchParams { nprobe: 3, rerank: 0 },
        IvfSearchParams { nprobe: 6, rerank: 0 },
        IvfSearchParams { nprobe: 12, rerank: 4 },
    ] {
        let batch = idx.search_with(&queries, 10, params).unwrap();
        let single: Vec<_> = queries
            .chunks_exact(dim)
            .flat_map(|q| idx.search_with(q, 10, params).unwrap())
            .collect();
        assert_eq!(batch.len(), 150);
        assert_eq!(ids(&batch), ids(&single), "{params:?}");
        for (b, s) in batch.iter().flatten().zip(single.iter().flatten()) {
            assert_eq!(b.score.to_bits(), s.score.to_bits());
        }
    }
}

/// Tombstones, replace-on-existing-id, compaction and salience pruning go
/// through the same machinery as the 8-bit index.
#[test]
fn deletes_updates_compaction_and_pruning() {
    let dim = 16;
    let base = synth(3000, dim, 20, 34);
    let mut idx = fastscan(&base, dim, IvfPqConfig::fastscan(16, 8));
    let params = IvfSearchParams { nprobe: 16, rerank: 50 };
    let removed: Vec<u64> = (0..3000).filter(|i| i % 3 == 0).collect();
    assert_eq!(idx.remove(&removed), 1000);
    assert_eq!(idx.remove(&removed), 0);
    assert_eq!(idx.len(), 2000);
    let q = &base[..dim * 60];
    let res = idx.search_with(q, 10, params).unwrap();
    assert!(res.iter().flatten().all(|h| h.id % 3 != 0));
    // Re-adding id 1 with the vector of id 2 replaces it: id 1 now answers
    // id 2's query with the same score.
    idx.add(&[1], &base[2 * dim..3 * dim]).unwrap();
    assert_eq!(idx.len(), 2000);
    let hits = idx.search_with(&base[2 * dim..3 * dim], 2, params).unwrap();
    let top: Vec<u64> = hits[0].iter().map(|h| h.id).collect();
    assert!(top.contains(&1) && top.contains(&2), "{top:?}");
    let before = idx.search_with(q, 10, params).unwrap();
    idx.compact();
    assert_eq!(idx.list_sizes().iter().sum::<usize>(), 2000);
    assert_eq!(ids(&idx.search_with(q, 10, params).unwrap()), ids(&before));
    // Pruning removes the least salient live vectors through the same path.
    idx.set_turn(500);
    idx.record_retrieval(&[1, 2], 499);
    let pruned = idx.prune_lowest(0.01, &SalienceParams::default()).unwrap();
    assert_eq!(pruned.len(), 20);
    assert!(!pruned.contains(&1) && !pruned.contains(&2));
    assert_eq!(idx.len(), 1980);
    assert!(pruned.iter().all(|&id| !idx.contains(id)));
    // A compacted, pruned index survives a file round trip unchanged.
    let back = IvfPqIndex::from_bytes(&idx.to_bytes()).unwrap();
    assert_eq!(back.codes(), PqCodes::FastScan4);
    assert_eq!(back.to_bytes(), idx.to_bytes());
    assert_eq!(
        ids(&back.search_with(q, 10, params).unwrap()),
        ids(&idx.search_with(q, 10, params).unwrap())
    );
}

#[test]
fn bad_input_is_a_typed_error() {
    let dim = 16;
    let base = synth(500, dim, 5, 35);
    let mut untrained = IvfPqIndex::new(dim, IvfPqConfig::fastscan(4, 8)).unwrap();
    assert!(matches!(untrained.add(&[1], &base[..dim]), Err(Error::NotTrained)));
    assert!(matches!(untrained.search(&base[..dim], 1), Err(Error::NotTrained)));
    // 16 centroids per sub-quantizer: 15 vectors are too few.
    assert!(matches!(
        IvfPqIndex::new(dim, IvfPqConfig::flat_fastscan(8))
            .unwrap()
            .train(&base[..dim * 15]),
        Err(Error::InsufficientTrainingData { needed: 16, got: 15 })
    ));
    assert!(matches!(
        IvfPqIndex::new(dim, IvfPqConfig::fastscan(4, 5)),
        Err(Error::InvalidParameter { name: "m", .. })
    ));
    untrained.train(&base).unwrap();
    // Trained but empty.
    assert!(matches!(untrained.search(&base[..dim], 1), Err(Error::EmptyIndex)));
    let idx = fastscan(&base, dim, IvfPqConfig::fastscan(4, 8));
    let mut nan = base[..dim].to_vec();
    nan[3] = f32::NAN;
    assert!(matches!(idx.search(&nan, 1), Err(Error::NonFinite { row: 0, col: 3 })));
    assert!(matches!(
        idx.search(&base[..dim - 1], 1),
        Err(Error::DimensionMismatch { expected: 16, got: 15 })
    ));
    assert!(matches!(idx.search(&base[..dim], 0), Err(Error::ZeroK)));
    assert!(matches!(
        idx.search(&vec![0.0; dim], 1),
        Err(Error::ZeroVector { row: 0 })
    ));
    assert!(matches!(
        idx.search_with(&base[..dim], 1, IvfSearchParams { nprobe: 0, rerank: 1 }),
        Err(Error::InvalidParameter { name: "nprobe", .. })
    ));
    let mut inf = base[..dim].to_vec();
    inf[0] = f32::INFINITY;
    let mut fresh = idx.clone();
    assert!(matches!(fresh.add(&[9999], &inf), Err(Error::NonFinite { .. })));
    assert_eq!(fresh.len(), 500, "a failed add loses nothing");
    // The compute method refuses 8-bit codebooks.
    let pq8 = ProductQuantizer::train(
        &gaussian(300, 8, 1),
        8,
        2,
        &PqTrainConfig::default(),
        default_compute().as_ref(),
    )
    .unwrap();
    let empty = Bitset::new();
    let none = InvertedRef {
        lists: &[],
        m: 2,
        uid: 2,
        epoch: 0,
    };
    assert!(matches!(
        default_compute().fastscan_top_k(&parts4(&pq8, none, &[], &empty), &plan(&[1.0; 8], &[vec![]], 1)),
        Err(Error::InvalidParameter { name: "pq", .. })
    ));
    // A list whose blocks are shorter than its rows is skipped, not read past.
    let pq = pq4(8, 4, 2);
    let short = [InvList {
        rows: vec![0, 1, 2],
        codes: vec![0u8; 10],
    }];
    let short = InvertedRef {
        lists: &short,
        m: 4,
        uid: 3,
        epoch: 0,
    };
    let mut alive = Bitset::new();
    (0..3).for_each(|_| alive.push(true));
    let probe = vec![vec![Probe { list: 0, bias: 0.0 }]];
    let res = default_compute()
        .fastscan_top_k(&parts4(&pq, short, &[1, 2, 3], &alive), &plan(&[1.0; 8], &probe, 5))
        .unwrap();
    assert!(res[0].is_empty());
}

/// Tuning finds settings that reach the target, reports the held-aside
/// recall, and refuses impossible requests.
#[test]
fn tune_finds_settings_that_reach_the_target() {
    let dim = 32;
    let n = 4000;
    let all = synth(n + 200, dim, 40, 36);
    let (base, queries) = all.split_at(n * dim);
    let mut cfg = TuneConfig::new(0.9);
    cfg.nlists = vec![16, 64];
    cfg.ms = vec![16];
    cfg.reranks = vec![0, 4, 16];
    let mut lines = 0;
    let out = tune_fastscan(base, dim, queries, &cfg, &mut |_| lines += 1).unwrap();
    assert!(lines >= 3);
    assert_eq!(out.split, (100, 100));
    let best = out.best.clone().expect("a setting reaches 0.9");
    assert!(best.recall >= 0.9);
    // The fastest trial is the first choice; when its held-aside recall
    // missed, the search moved to safer settings, one of whose measured
    // steps is `best`. Which trial times fastest is up to the machine.
    let fastest = out.held_aside_miss.as_ref().unwrap_or(&best);
    assert!(out.trials.iter().all(|t| t.recall >= 0.9 && t.qps <= fastest.qps));
    let key = |t: &dentate::TuneTrial| (t.nlist, t.m, t.nprobe, t.rerank);
    if out.held_aside_miss.is_some() {
        assert!(out.safer.iter().any(|t| key(t) == key(&best)));
    }
    assert!(best.holdout_recall > 0.8, "held-aside recall {}", best.holdout_recall);
    // The chosen configuration rebuilds to the same recall on the tuning side.
    let c = out.config().unwrap();
    assert_eq!(
        (c.nlist, c.m, c.nprobe, c.rerank),
        (best.nlist, best.m, best.nprobe, best.rerank)
    );
    // Nothing reaches recall 1.0 without re-ranking at 1 probe.
    let mut hard = cfg.clone();
    hard.target_recall = 1.0;
    hard.reranks = vec![0];
    hard.nprobes = vec![1];
    assert!(
        tune_fastscan(base, dim, queries, &hard, &mut |_| {})
            .unwrap()
            .best
            .is_none()
    );
    assert_eq!(out.held_aside_miss.is_some(), !out.safer.is_empty());
    assert_eq!(out.holds_out(), best.holdout_recall >= 0.9);
    for bad in [0.0, 1.5, f64::NAN] {
        let mut b = cfg.clone();
        b.target_recall = bad;
        assert!(matches!(
            tune_fastscan(base, dim, queries, &b, &mut |_| {}),
            Err(Error::InvalidParameter { .. })
        ));
    }
    assert!(matches!(
        tune_fastscan(base, dim, &queries[..dim], &cfg, &mut |_| {}),
        Err(Error::InvalidParameter { name: "queries", .. })
    ));
}

/// When the fastest setting on the tuning queries misses the target on the
/// held-aside ones, tuning says so and steps the same index up one notch
/// of nprobe or re-rank at a time until the held-aside recall reaches it.
/// The held-aside rows are made hard (random directions) and the tuning
/// rows easy (copies of base rows), so the first choice must miss.
#[test]
fn tune_moves_to_safer_settings_when_the_held_aside_recall_misses() {
    let dim = 32;
    let n = 4000;
    let base = synth(n, dim, 40, 37);
    let hard = gaussian(200, dim, 38);
    let mut cfg = TuneConfig::new(0.9);
    cfg.nlists = vec![64];
    cfg.ms = vec![16];
    cfg.nprobes = vec![1, 2, 4, 8, 16, 32, 64];
    cfg.reranks = vec![0, 4, 16];
    let (held, tuning) = split_queries(200, &cfg);
    assert_eq!((held.len(), tuning.len()), (100, 100));
    let mut queries = vec![0f32; 200 * dim];
    for &r in &held {
        queries[r * dim..(r + 1) * dim].copy_from_slice(&hard[r * dim..(r + 1) * dim]);
    }
    for &r in &tuning {
        let row = r * 17 % n;
        queries[r * dim..(r + 1) * dim].copy_from_slice(&base[row * dim..(row + 1) * dim]);
    }
    let mut lines = Vec::new();
    let out = tune_fastscan(&base, dim, &queries, &cfg, &mut |l| lines.push(l.to_string())).unwrap();
    let miss = out
        .held_aside_miss
        .clone()
        .expect("easy tuning queries, hard held-aside ones");
    assert!(miss.recall >= 0.9 && miss.holdout_recall < 0.9, "{miss:?}");
    assert!(
        out.trials.iter().all(|t| t.qps <= miss.qps),
        "the miss was the tuning winner"
    );
    assert!(lines.iter().any(|l| l.contains("misses the target")), "{lines:?}");
    let best = out.best.clone().unwrap();
    assert!(!out.safer.is_empty());
    assert!(out.safer.contains(&best));
    assert!(best.nprobe >= miss.nprobe && best.rerank >= miss.rerank);
    assert!((best.nprobe, best.rerank) != (miss.nprobe, miss.rerank));
    // Every step is one notch of one grid away from the setting before it.
    let notch = |g: &[usize], a: usize, b: usize| {
        g.iter().position(|&x| x == a).map(|i| i + 1) == g.iter().position(|&x| x == b)
    };
    for s in &out.safer {
        assert_eq!((s.nlist, s.m), (miss.nlist, miss.m));
    }
    let exhausted = best.nprobe == 64 && best.rerank == 16;
    assert!(out.holds_out() || exhausted, "{best:?}");
    assert_eq!(out.holds_out(), best.holdout_recall >= 0.9);
    assert!(
        out.safer.iter().any(
            |s| notch(&cfg.nprobes, miss.nprobe, s.nprobe) && s.rerank == miss.rerank
                || notch(&cfg.reranks, miss.rerank, s.rerank) && s.nprobe == miss.nprobe
        ),
        "the first step is one notch from the miss"
    );
}

/// Without queries of one's own, tuning draws them from the base and leaves
/// them out of the indexes it builds.
#[test]
fn tune_from_base_rows() {
    let dim = 32;
    let n = 3000;
    let base = synth(n, dim, 30, 39);
    let mut cfg = TuneConfig::new(0.9);
    cfg.nlists = vec![32];
    cfg.ms = vec![16];
    cfg.reranks = vec![4, 16];
    let out = tune_fastscan_from_base(&base, dim, 200, &cfg, &mut |_| {}).unwrap();
    assert_eq!(out.split, (100, 100));
    let best = out.best.expect("a setting reaches 0.9");
    assert!(best.recall >= 0.9);
    for bad in [0, 1, n / 2 + 1] {
        assert!(matches!(
            tune_fastscan_from_base(&base, dim, bad, &cfg, &mut |_| {}),
            Err(Error::InvalidParameter { name: "sample", .. })
        ));
    }
}
