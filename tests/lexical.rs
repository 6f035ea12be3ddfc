//! The BM25 lexical index and rank fusion: scores against hand-computed
//! values, deletes, replacement, persistence (with a format fixture),
//! corrupt files, and deterministic fusion.

use dentate::io::HEADER_LEN;
use dentate::{Bm25Params, Error, Fusion, Hit, LexicalIndex, fuse};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Four documents whose analysed terms are
/// 1: cat sat mat · 2: dog chase cat · 3: dog cat friend ·
/// 4: cat cat cat mous mous mous (avgdl = 3.75).
fn corpus() -> LexicalIndex {
    let mut idx = LexicalIndex::new();
    idx.add(
        &[1, 2, 3, 4],
        &[
            "The cat sat on the mat.",
            "The dog chased the cat!",
            "Dogs and cats are friends",
            "Cat, cat, cat: mouse, mouse... No, mouses.",
        ],
    )
    .unwrap();
    idx
}

fn approx(hits: &[Hit], want: &[(u64, f64)]) {
    assert_eq!(hits.len(), want.len(), "{hits:?}");
    for (h, (id, s)) in hits.iter().zip(want) {
        assert_eq!(h.id, *id, "{hits:?}");
        assert!((f64::from(h.score) - s).abs() < 1e-5, "{} vs {s}", h.score);
    }
}

#[test]
fn analysis_stems_and_drops_stop_words() {
    let idx = LexicalIndex::new();
    let t = idx.analyzer().terms("The Dogs were chasing Caroline's cats in 2023!");
    assert_eq!(t, vec!["dog", "chase", "carolin", "cat", "2023"]);
}

#[test]
fn scores_equal_hand_computed_bm25() {
    let idx = corpus();
    // Computed by hand with k1 = 1.2, b = 0.75, idf = ln(1 + (N - df + .5) / (df + .5)):
    // "cat" is in all 4 docs: idf = ln(1 + .5/4.5); doc 4 has tf 3 but is long.
    approx(
        &idx.search("cats", 10).unwrap(),
        &[(4, 0.146_704_5), (1, 0.114_749_1), (2, 0.114_749_1), (3, 0.114_749_1)],
    );
    approx(
        &idx.search("dog chased", 10).unwrap(),
        &[(2, 2.066_170_3), (3, 0.754_912_8)],
    );
    approx(
        &idx.search("mouse friends", 10).unwrap(),
        &[(4, 1.676_417_8), (3, 1.311_257_5)],
    );
    // Only the top k, and a query without indexed terms finds nothing.
    assert_eq!(idx.search("cats", 2).unwrap().len(), 2);
    assert!(idx.search("the and of", 5).unwrap().is_empty());
    assert!(idx.search("zebra", 5).unwrap().is_empty());
    assert!(matches!(idx.search("cat", 0), Err(Error::ZeroK)));
    assert!(LexicalIndex::new().search("cat", 3).unwrap().is_empty());
}

#[test]
fn parameters_change_scores_and_are_checked() {
    let mut flat = LexicalIndex::with_params(Bm25Params { k1: 1.2, b: 0.0 }).unwrap();
    flat.add(&[1, 4], &["cat sat", "cat cat cat mouse mouse mouse"])
        .unwrap();
    // Without length normalisation the doc with tf 3 wins by more.
    let h = flat.search("cat", 2).unwrap();
    assert_eq!(h[0].id, 4);
    assert!(h[0].score > h[1].score * 1.5);
    for bad in [
        Bm25Params { k1: -1.0, b: 0.5 },
        Bm25Params { k1: 1.0, b: 1.5 },
        Bm25Params { k1: f32::NAN, b: 0.5 },
    ] {
        assert!(LexicalIndex::with_params(bad).is_err());
    }
}

#[test]
fn deletes_replacements_and_compaction() {
    let mut idx = corpus();
    assert_eq!(idx.remove(&[2, 99]), 1);
    assert!(!idx.contains(2));
    assert!(idx.search("dog chased", 10).unwrap().iter().all(|h| h.id != 2));
    // Statistics follow the live set: "chase" now matches nothing.
    assert!(idx.search("chased", 10).unwrap().is_empty());
    // Replacing an id replaces its text.
    idx.add(&[1], &["A red kite over the hill"]).unwrap();
    assert_eq!(idx.len(), 3);
    assert_eq!(idx.search("kite", 5).unwrap()[0].id, 1);
    assert!(idx.search("mat", 5).unwrap().is_empty());
    let before = idx.search("cat kite dog mouse", 10).unwrap();
    idx.compact();
    assert_eq!(idx.search("cat kite dog mouse", 10).unwrap(), before);
    assert!(matches!(idx.add(&[7, 7], &["a", "b"]), Err(Error::DuplicateId(7))));
    assert!(idx.add(&[8], &["a", "b"]).is_err());
}

/// Written once with `DENTATE_WRITE_FIXTURES=1`; must keep loading.
#[test]
fn format_fixture_and_round_trip() {
    let mut idx = corpus();
    idx.remove(&[3]);
    if std::env::var("DENTATE_WRITE_FIXTURES").as_deref() == Ok("1") {
        idx.save(&fixture("lexical_v1.dnt")).unwrap();
    }
    let loaded = LexicalIndex::load(&fixture("lexical_v1.dnt")).expect("format v1 lexical fixture must load");
    assert_eq!(loaded.len(), 3);
    assert!(!loaded.contains(3));
    assert_eq!(
        loaded.search("dog mouse cat", 10).unwrap(),
        idx.search("dog mouse cat", 10).unwrap()
    );
    assert_eq!(loaded.to_bytes(), std::fs::read(fixture("lexical_v1.dnt")).unwrap());
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("x.lex");
    idx.save(&p).unwrap();
    assert_eq!(LexicalIndex::load(&p).unwrap().to_bytes(), idx.to_bytes());
}

#[test]
fn corrupt_files_are_typed_errors() {
    let good = corpus().to_bytes();
    for cut in (0..good.len()).step_by(7) {
        assert!(LexicalIndex::from_bytes(&good[..cut]).is_err(), "cut {cut}");
    }
    let mut bad = good.clone();
    bad[HEADER_LEN + 10] ^= 0x40;
    assert!(matches!(
        LexicalIndex::from_bytes(&bad),
        Err(Error::ChecksumMismatch { .. })
    ));
    // A vector index file is the wrong kind, and vice versa.
    let flat = dentate::FlatIndex::new(4).to_bytes();
    assert!(matches!(LexicalIndex::from_bytes(&flat), Err(Error::WrongKind { .. })));
    assert!(matches!(
        dentate::AnyIndex::from_bytes(&good),
        Err(Error::WrongKind { .. })
    ));
}

#[test]
fn fusion_is_deterministic_and_documented() {
    let h = |id, score| Hit { id, score };
    let dense = [h(10, 0.9), h(11, 0.8), h(12, 0.1)];
    let lex = [h(12, 7.0), h(13, 3.0), h(10, 1.0)];
    // RRF, c = 60: 10 → 1/61 + 1/63, 12 → 1/63 + 1/61 (tie: smaller id first), 11 → 1/62, 13 → 1/62.
    let r = fuse(&dense, &lex, Fusion::Rrf { c: 60.0 }, 4).unwrap();
    assert_eq!(r.iter().map(|x| x.id).collect::<Vec<_>>(), vec![10, 12, 11, 13]);
    assert!((r[0].score - (1.0 / 61.0 + 1.0 / 63.0)).abs() < 1e-7);
    // Weighted: dense normalised (0.9→1, 0.8→0.875, 0.1→0), lexical (7→1, 3→1/3, 1→0).
    let w = fuse(&dense, &lex, Fusion::Weighted { dense_weight: 0.5 }, 4).unwrap();
    let got: Vec<(u64, f32)> = w.iter().map(|x| (x.id, x.score)).collect();
    let want = [(10, 0.5), (12, 0.5), (11, 0.4375), (13, 1.0 / 6.0)];
    for ((gi, gs), (wi, ws)) in got.iter().zip(want) {
        assert_eq!(*gi, wi);
        assert!((gs - ws).abs() < 1e-6, "{gs} vs {ws}");
    }
    // Pure weights reproduce one list's order.
    let d = fuse(&dense, &lex, Fusion::Weighted { dense_weight: 1.0 }, 3).unwrap();
    assert_eq!(d.iter().map(|x| x.id).collect::<Vec<_>>(), vec![10, 11, 12]);
    assert!(fuse(&dense, &lex, Fusion::Weighted { dense_weight: 1.5 }, 3).is_err());
    assert!(matches!(
        fuse(&dense, &lex, Fusion::Rrf { c: 60.0 }, 0),
        Err(Error::ZeroK)
    ));
    assert_eq!(fuse(&[], &[], Fusion::Rrf { c: 60.0 }, 3).unwrap(), vec![]);
}

/// A flat, an IVF-PQ and a fast-scan index over the same ids as a lexical index: the one
/// hybrid call fuses both lists, filters by namespace, and rejects bad input.
#[test]
fn hybrid_search_over_exact_ivfpq_and_fastscan_indexes() {
    use dentate::{FlatIndex, Index, IvfPqConfig, IvfPqIndex, hybrid_search};
    let dim = 16;
    let n = 600u64;
    let texts: Vec<String> = (0..n)
        .map(|i| format!("note {i} about topic{} and colour{}", i % 7, i % 11))
        .collect();
    let mut lex = LexicalIndex::new();
    let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
    let ids: Vec<u64> = (0..n).collect();
    lex.add(&ids, &refs).unwrap();
    // Vector i points mostly along axis i % dim.
    let mut vectors = vec![0.01f32; n as usize * dim];
    for i in 0..n as usize {
        vectors[i * dim + i % dim] = 1.0;
        vectors[i * dim + (i / dim) % dim] += 0.3;
    }
    let mut flat = FlatIndex::new(dim);
    flat.add(&ids, &vectors).unwrap();
    let mut cfg = IvfPqConfig::new(8, 4);
    cfg.nprobe = 8;
    cfg.rerank = 8;
    let mut ivf = IvfPqIndex::new(dim, cfg).unwrap();
    ivf.train(&vectors).unwrap();
    ivf.add(&ids, &vectors).unwrap();
    let mut cfg = IvfPqConfig::fastscan(8, 8);
    cfg.nprobe = 8;
    cfg.rerank = 8;
    let mut fast = IvfPqIndex::new(dim, cfg).unwrap();
    fast.train(&vectors).unwrap();
    fast.add(&ids, &vectors).unwrap();
    let mut q = vec![0.0f32; dim];
    q[3] = 1.0;
    let fusion = Fusion::Rrf { c: 60.0 };
    for index in [&flat as &dyn Index, &ivf as &dyn Index, &fast as &dyn Index] {
        let hits = hybrid_search(index, &lex, &q, "topic3 colour5", 10, fusion, None).unwrap();
        assert_eq!(hits.len(), 10);
        // Equal to fusing the two lists by hand, each candidate_depth deep.
        let dense = index.search(&q, dentate::candidate_depth(10)).unwrap().remove(0);
        let lexical = lex.search("topic3 colour5", dentate::candidate_depth(10)).unwrap();
        assert_eq!(hits, fuse(&dense, &lexical, fusion, 10).unwrap());
        // The best hit matches both words and points along axis 3.
        let best = hits[0].id as usize;
        assert!(best % 7 == 3 && best % 11 == 5 && best % dim == 3, "{hits:?}");
        // Namespace filter: only even ids, still 10 of them.
        let even = |id: u64| id.is_multiple_of(2);
        let f = hybrid_search(index, &lex, &q, "topic3 colour5", 10, fusion, Some(&even)).unwrap();
        assert_eq!(f.len(), 10);
        assert!(f.iter().all(|h| h.id.is_multiple_of(2)));
        // A filter that keeps almost nothing searches to the end.
        let one = |id: u64| id == 599;
        let f = hybrid_search(index, &lex, &q, "topic3", 5, fusion, Some(&one)).unwrap();
        assert_eq!(f.iter().map(|h| h.id).collect::<Vec<_>>(), [599]);
        // Bad input is typed.
        assert!(matches!(
            hybrid_search(index, &lex, &q[..3], "x", 5, fusion, None),
            Err(Error::DimensionMismatch { expected: 16, got: 3 })
        ));
        assert!(matches!(
            hybrid_search(index, &lex, &q, "x", 0, fusion, None),
            Err(Error::ZeroK)
        ));
        let mut nan = q.clone();
        nan[0] = f32::NAN;
        assert!(hybrid_search(index, &lex, &nan, "x", 5, fusion, None).is_err());
    }
    // An empty vector index leaves the lexical list.
    let empty = FlatIndex::new(dim);
    let hits = hybrid_search(&empty, &lex, &q, "topic3 colour5", 3, fusion, None).unwrap();
    assert_eq!(hits.len(), 3);
}
