//! The `k` rule (issue 22): an untrusted `k` never sizes an allocation or a
//! loop. Every search entry point clamps `k` to the live count — so
//! `k = usize::MAX`, and re-rank factors whose product with `k` overflows,
//! return every live vector, best first, exactly as `k = len()` does —
//! and `k = 0` stays `Error::ZeroK`.

mod common;

use common::synth;
use dentate::Panels;
use dentate::{BaseRef, Compute, CpuCompute};
use dentate::{
    Bitset, Error, FlatIndex, Fusion, Index, IvfPqConfig, IvfPqIndex, IvfSearchParams, LexicalIndex, Precision,
    hybrid_search,
};
use std::sync::Arc;

const DIM: usize = 16;
const N: usize = 300;

fn data() -> (Vec<u64>, Vec<f32>) {
    let base = synth(N, DIM, 6, 22);
    let ids: Vec<u64> = (0..N as u64).map(|i| i * 3 + 1).collect();
    (ids, base)
}

/// Searches with `k` equal to the live count, `usize::MAX` and other huge
/// values; all must agree, and hold every live id once.
fn check_huge_k(name: &str, index: &dyn Index, search: &dyn Fn(usize) -> dentate::Result<Vec<Vec<dentate::Hit>>>) {
    let live = index.len();
    let want = search(live).unwrap_or_else(|e| panic!("{name}: k = live: {e}"));
    for k in [usize::MAX, usize::MAX / 2 + 1, 1 << 40, live + 1] {
        let got = search(k).unwrap_or_else(|e| panic!("{name}: k = {k}: {e}"));
        assert_eq!(got, want, "{name}: k = {k} differs from k = live");
        for hits in &got {
            assert!(hits.len() <= live, "{name}: more hits than live vectors");
            let mut ids: Vec<u64> = hits.iter().map(|h| h.id).collect();
            ids.sort_unstable();
            ids.dedup();
            assert_eq!(ids.len(), hits.len(), "{name}: an id twice");
        }
    }
    assert!(matches!(search(0), Err(Error::ZeroK)), "{name}: k = 0");
}

#[test]
fn flat_index_clamps_k() {
    let (ids, base) = data();
    for precision in [Precision::F32, Precision::F16] {
        let mut idx = FlatIndex::with_precision(DIM, precision);
        idx.add(&ids, &base).unwrap();
        idx.remove(&ids[..10]);
        let q = &base[..3 * DIM];
        check_huge_k("flat", &idx, &|k| idx.search(q, k));
        let all = idx.search(q, usize::MAX).unwrap();
        assert!(all.iter().all(|h| h.len() == N - 10), "every live vector, no more");
    }
}

#[test]
fn ivfpq_and_fastscan_clamp_k_and_the_rerank_product() {
    let (ids, base) = data();
    let configs = [
        ("ivfpq", IvfPqConfig::new(8, 4)),
        ("ivfpq-opq", IvfPqConfig::new(8, 4).opq(true)),
        ("fastscan-flat", IvfPqConfig::flat_fastscan(8)),
        ("fastscan-ivf", IvfPqConfig::fastscan(8, 8)),
        ("ivfpq-no-store", {
            let mut c = IvfPqConfig::new(8, 4);
            c.rerank_store = None;
            c.rerank = 0;
            c
        }),
    ];
    for (name, cfg) in configs {
        let has_store = cfg.rerank_store.is_some();
        let mut idx = IvfPqIndex::new(DIM, cfg).unwrap();
        idx.train(&base).unwrap();
        idx.add(&ids, &base).unwrap();
        idx.remove(&ids[..7]);
        let q = &base[..2 * DIM];
        // Default parameters through the trait.
        check_huge_k(name, &idx, &|k| idx.search(q, k));
        // nprobe far above nlist (it probes every list) and re-rank factors
        // whose product with k overflows usize.
        let reranks: &[usize] = if has_store { &[0, 2, usize::MAX, 1 << 33] } else { &[0] };
        for &rerank in reranks {
            for nprobe in [1, 8, 9, usize::MAX] {
                let p = IvfSearchParams { nprobe, rerank };
                let what = format!("{name} nprobe {nprobe} rerank {rerank}");
                check_huge_k(&what, &idx, &|k| idx.search_with(q, k, p));
                let plan = idx.plan(q, usize::MAX, p).unwrap();
                assert_eq!(plan.k, idx.len(), "{what}: plan.k");
                assert!(plan.shortlist <= idx.len(), "{what}: shortlist {}", plan.shortlist);
            }
        }
        // Probing every list with an exact re-rank of everything is exact.
        if has_store {
            let p = IvfSearchParams {
                nprobe: usize::MAX,
                rerank: usize::MAX,
            };
            let got = idx.search_with(q, usize::MAX, p).unwrap();
            assert!(got.iter().all(|h| h.len() == N - 7), "{name}: every live vector");
        }
    }
}

#[test]
fn lexical_and_hybrid_clamp_k() {
    let (ids, base) = data();
    let texts: Vec<String> = (0..N)
        .map(|i| format!("note {i} about topic{} and more", i % 9))
        .collect();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let mut lex = LexicalIndex::new();
    lex.add(&ids, &refs).unwrap();
    let mut flat = FlatIndex::new(DIM);
    flat.add(&ids, &base).unwrap();
    for k in [usize::MAX, usize::MAX / 4 + 3, 1 << 50] {
        let hits = lex.search("topic3 note", k).unwrap();
        assert_eq!(hits, lex.search("topic3 note", N).unwrap(), "bm25 k = {k}");
        assert_eq!(hits.len(), N, "every document matches `note`");
        for fusion in [Fusion::default(), Fusion::Rrf { c: 60.0 }] {
            let all = hybrid_search(&flat, &lex, &base[..DIM], "topic3", k, fusion, None).unwrap();
            assert_eq!(
                all,
                hybrid_search(&flat, &lex, &base[..DIM], "topic3", N, fusion, None).unwrap(),
                "hybrid k = {k}"
            );
            assert_eq!(all.len(), N);
            // A filter that accepts few ids: the doubling depth stops at
            // the index's size instead of wrapping.
            let few = |id: u64| id.is_multiple_of(7);
            let some = hybrid_search(&flat, &lex, &base[..DIM], "topic3", k, fusion, Some(&few)).unwrap();
            assert_eq!(some.len(), ids.iter().filter(|&&i| few(i)).count());
        }
    }
    assert!(matches!(lex.search("note", 0), Err(Error::ZeroK)));
    assert!(matches!(
        hybrid_search(&flat, &lex, &base[..DIM], "note", 0, Fusion::default(), None),
        Err(Error::ZeroK)
    ));
}

/// The compute interface itself: a backend given a huge `k` returns every
/// row (it clamps before sizing anything), for each kernel with a `k`.
#[test]
fn cpu_compute_clamps_k_in_every_kernel() {
    let (ids, base) = data();
    let cpu: Arc<dyn Compute> = Arc::new(CpuCompute::default());
    let panels = Panels::from_rows(&base, DIM, Precision::F32);
    let q = &base[..4 * DIM];
    let all = cpu.top_k(q, BaseRef::plain(&panels), N);
    assert_eq!(cpu.top_k(q, BaseRef::plain(&panels), usize::MAX), all);
    assert!(all.iter().all(|v| v.len() == N));

    // ADC, fast-scan and re-rank through an index's parts.
    for cfg in [IvfPqConfig::new(4, 4), IvfPqConfig::fastscan(4, 8)] {
        let mut idx = IvfPqIndex::new(DIM, cfg).unwrap();
        idx.set_compute(cpu.clone());
        idx.train(&base).unwrap();
        idx.add(&ids, &base).unwrap();
        let p = IvfSearchParams { nprobe: 4, rerank: 1 };
        let mut plan = idx.plan(q, N, p).unwrap();
        let parts = idx.parts().unwrap();
        let want = parts.scan(cpu.as_ref(), &plan).unwrap();
        plan.shortlist = usize::MAX;
        let got = parts.scan(cpu.as_ref(), &plan).unwrap();
        assert_eq!(got, want, "scan with a huge shortlist");
        let rows = dentate::IvfPlan::rows(&got);
        let store = parts.store.unwrap();
        assert_eq!(
            cpu.rerank(&plan.queries, store, parts.ids, &rows, usize::MAX),
            cpu.rerank(&plan.queries, store, parts.ids, &rows, N)
        );
    }

    let scores: Vec<f32> = (0..N).map(|i| (i % 13) as f32).collect();
    let mut alive = Bitset::new();
    for _ in 0..N {
        alive.push(true);
    }
    assert_eq!(
        cpu.lowest(&scores, &ids, &alive, usize::MAX),
        cpu.lowest(&scores, &ids, &alive, N)
    );
}

/// Huge search defaults survive a save: they saturate in the file instead
/// of wrapping (2^32 would have been written as nprobe 0, a file that then
/// refuses every search).
#[test]
fn huge_search_defaults_round_trip_through_a_file() {
    let (ids, base) = data();
    let mut idx = IvfPqIndex::new(DIM, IvfPqConfig::new(8, 4)).unwrap();
    idx.train(&base).unwrap();
    idx.add(&ids, &base).unwrap();
    idx.set_nprobe(1 << 32);
    idx.set_rerank((1 << 32) + 1);
    let back = IvfPqIndex::from_bytes(&idx.to_bytes()).unwrap();
    assert_eq!(back.config().nprobe, u32::MAX as usize);
    assert_eq!(back.config().rerank, u32::MAX as usize);
    let q = &base[..DIM];
    assert_eq!(back.search(q, usize::MAX).unwrap(), idx.search(q, usize::MAX).unwrap());
}
