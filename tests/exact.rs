//! Exact search equals a naive loop; bad input gives typed errors; deletes,
//! updates and compaction behave.

mod common;
use common::*;
use dentate::{Error, FlatIndex, Index, Precision};

#[test]
fn exact_equals_naive_loop_including_ties() {
    let dim = 24;
    let mut base = gaussian(700, dim, 1);
    // Exact duplicates under different ids: their scores tie exactly, and the
    // smaller id must come first.
    for (dst, src) in [(650, 10), (651, 10), (699, 3)] {
        let v = base[src * dim..(src + 1) * dim].to_vec();
        base[dst * dim..(dst + 1) * dim].copy_from_slice(&v);
    }
    // Ids out of row order so that "smaller id" differs from "earlier row".
    let id_list: Vec<u64> = (0..700u64).map(|i| 10_000 - i * 7).collect();
    let ids_ = &id_list;
    let mut queries = gaussian(37, dim, 2);
    queries[..dim].copy_from_slice(&base[10 * dim..11 * dim]);
    let k = 15;
    let mut index = FlatIndex::new(dim);
    index.add(ids_, &base).unwrap();
    let got = index.search(&queries, k).unwrap();
    let want = naive(&base, ids_, &queries, dim, k);
    for (g, w) in got.iter().zip(&want) {
        assert_eq!(g.len(), k);
        let gi: Vec<u64> = g.iter().map(|h| h.id).collect();
        let wi: Vec<u64> = w.iter().map(|x| x.0).collect();
        assert_eq!(gi, wi);
        for (h, (_, s)) in g.iter().zip(w) {
            assert!((h.score as f64 - s).abs() < 1e-5, "{} vs {s}", h.score);
        }
    }
    // Query 0 is row 10 itself: rows 10, 650, 651 tie at 1.0, ids ascending.
    let top3: Vec<u64> = got[0][..3].iter().map(|h| h.id).collect();
    let mut tied = vec![ids_[10], ids_[650], ids_[651]];
    tied.sort();
    assert_eq!(top3, tied);
}

/// A small search runs on the calling thread, a large one split over the
/// pool (by queries, or by rows for one query): each equals the naive loop.
#[test]
fn serial_and_split_scans_equal_the_naive_loop() {
    let dim = 24;
    // 1 × 700 × 24 multiply-adds: serial; 1 × 90,000 × 24 (over 2 M): the
    // rows split; 200 queries × 90,000: split by query blocks.
    for (rows, nq) in [(700, 1), (90_000, 1), (90_000, 200)] {
        let base = gaussian(rows, dim, 11);
        let ids: Vec<u64> = (0..rows as u64).map(|i| i * 3 + 1).collect();
        let queries = gaussian(nq, dim, 12);
        let mut index = FlatIndex::new(dim);
        index.add(&ids, &base).unwrap();
        let got = index.search(&queries, 10).unwrap();
        let want = naive(&base, &ids, &queries, dim, 10);
        assert_eq!(got.len(), nq);
        for (g, w) in got.iter().zip(&want) {
            let gi: Vec<u64> = g.iter().map(|h| h.id).collect();
            let wi: Vec<u64> = w.iter().map(|x| x.0).collect();
            assert_eq!(gi, wi, "{rows} rows, {nq} queries");
        }
    }
}

#[test]
fn every_simd_path_gives_the_same_ids() {
    use dentate::{BaseRef, Compute, CpuCompute};
    use dentate::{Isa, Panels};
    let dim = 96;
    let base = synth(2000, dim, 20, 3);
    let queries = synth(50, dim, 20, 4);
    let panels = Panels::from_rows(&base, dim, Precision::F32);
    let reference = CpuCompute::with_isa(Isa::Scalar)
        .unwrap()
        .top_k(&queries, BaseRef::plain(&panels), 10);
    for isa in Isa::available() {
        let got = CpuCompute::with_isa(isa)
            .unwrap()
            .top_k(&queries, BaseRef::plain(&panels), 10);
        for (g, r) in got.iter().zip(&reference) {
            let gi: Vec<u32> = g.iter().map(|c| c.row).collect();
            let ri: Vec<u32> = r.iter().map(|c| c.row).collect();
            assert_eq!(gi, ri, "{isa:?}");
            for (a, b) in g.iter().zip(r) {
                assert!((a.score - b.score).abs() < 1e-4);
            }
        }
    }
}

#[test]
fn f16_storage_is_close_to_f32() {
    let dim = 64;
    let base = synth(3000, dim, 30, 5);
    let queries = synth(100, dim, 30, 6);
    let all_ids: Vec<u64> = (0..3000).collect();
    let mut a = FlatIndex::with_precision(dim, Precision::F32);
    let mut b = FlatIndex::with_precision(dim, Precision::F16);
    a.add(&all_ids, &base).unwrap();
    b.add(&all_ids, &base).unwrap();
    let ra = a.search(&queries, 10).unwrap();
    let rb = b.search(&queries, 10).unwrap();
    let truth = ids_of(&ra);
    let recall = dentate::data::recall_at_k(&rb, &truth, 10);
    assert!(recall > 0.98, "f16 recall {recall}");
    assert!(b.memory_bytes() < a.memory_bytes() * 6 / 10);
}

fn ids_of(r: &[Vec<dentate::Hit>]) -> Vec<Vec<u64>> {
    ids(r)
}

#[test]
fn bad_input_is_a_typed_error_and_changes_nothing() {
    let mut index = FlatIndex::new(3);
    assert!(matches!(index.search(&[1.0, 0.0, 0.0], 1), Err(Error::EmptyIndex)));
    index.add(&[1], &[1.0, 0.0, 0.0]).unwrap();
    assert!(matches!(
        index.add(&[2], &[f32::NAN, 0.0, 0.0]),
        Err(Error::NonFinite { row: 0, col: 0 })
    ));
    assert!(matches!(
        index.add(&[2, 3], &[1.0, 1.0, 1.0, 0.0, f32::INFINITY, 0.0]),
        Err(Error::NonFinite { row: 1, col: 1 })
    ));
    assert!(matches!(
        index.add(&[2], &[0.0, 0.0, 0.0]),
        Err(Error::ZeroVector { row: 0 })
    ));
    assert!(matches!(
        index.add(&[2], &[1.0, 0.0]),
        Err(Error::DimensionMismatch { expected: 3, got: 2 })
    ));
    assert!(matches!(
        index.add(&[2, 3], &[1.0, 0.0, 0.0]),
        Err(Error::IdCountMismatch { .. })
    ));
    assert!(matches!(
        index.add(&[4, 4], &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0]),
        Err(Error::DuplicateId(4))
    ));
    // None of the failed adds changed the index.
    assert_eq!(index.len(), 1);
    assert!(!index.contains(2) && !index.contains(4));
    assert!(matches!(index.search(&[1.0, 0.0, 0.0], 0), Err(Error::ZeroK)));
    assert!(matches!(
        index.search(&[1.0, 0.0], 1),
        Err(Error::DimensionMismatch { .. })
    ));
    assert!(matches!(
        index.search(&[f32::NAN, 0.0, 0.0], 1),
        Err(Error::NonFinite { .. })
    ));
    assert!(matches!(
        index.search(&[0.0, 0.0, 0.0], 1),
        Err(Error::ZeroVector { .. })
    ));
    // k larger than the index returns what there is.
    assert_eq!(index.search(&[1.0, 0.0, 0.0], 50).unwrap()[0].len(), 1);
    let mut zero = FlatIndex::new(0);
    assert!(zero.add(&[1], &[]).is_err());
}

#[test]
fn deletes_updates_and_compaction() {
    let dim = 16;
    let base = synth(500, dim, 10, 7);
    let all_ids: Vec<u64> = (0..500).collect();
    let mut index = FlatIndex::new(dim);
    index.add(&all_ids, &base).unwrap();
    let removed: Vec<u64> = (0..500).filter(|i| i % 3 == 0).collect();
    assert_eq!(index.remove(&removed), removed.len());
    assert_eq!(index.remove(&removed), 0, "second removal finds nothing");
    assert_eq!(index.len(), 500 - removed.len());
    let queries = synth(40, dim, 10, 8);
    let res = index.search(&queries, 20).unwrap();
    for hits in &res {
        assert!(hits.iter().all(|h| h.id % 3 != 0), "a removed id came back");
    }
    // Results equal those of an index built from the survivors only.
    let keep: Vec<u64> = (0..500).filter(|i| i % 3 != 0).collect();
    let keep_vecs: Vec<f32> = keep
        .iter()
        .flat_map(|&i| base[i as usize * dim..(i as usize + 1) * dim].to_vec())
        .collect();
    let mut fresh = FlatIndex::new(dim);
    fresh.add(&keep, &keep_vecs).unwrap();
    assert_eq!(ids(&res), ids(&fresh.search(&queries, 20).unwrap()));
    // Compaction reclaims rows and keeps answers.
    let before = index.memory_bytes();
    index.compact();
    assert_eq!(index.total_rows(), keep.len());
    assert!(index.memory_bytes() < before);
    assert_eq!(ids(&res), ids(&index.search(&queries, 20).unwrap()));
    // Adding an existing id replaces its vector.
    let target = queries[..dim].to_vec();
    index.add(&[1], &target).unwrap();
    assert_eq!(index.len(), keep.len());
    let top = index.search(&target, 1).unwrap();
    assert_eq!(top[0][0].id, 1);
    assert!((top[0][0].score - 1.0).abs() < 1e-5);
    let v = index.get(1).unwrap();
    let n: f32 = target.iter().map(|x| x * x).sum::<f32>().sqrt();
    assert!(v.iter().zip(&target).all(|(a, b)| (a - b / n).abs() < 1e-6));
}
