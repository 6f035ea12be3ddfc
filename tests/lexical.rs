//! The BM25 lexical index and rank fusion: scores against hand-computed
//! values, deletes, replacement, persistence (with a format fixture),
//! corrupt files, and deterministic fusion.

mod common;
use common::reseal;
use dentate::io::HEADER_LEN;
use dentate::{Bm25Params, Error, Fusion, Hit, LexicalIndex, fuse};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::path::PathBuf;

/// The system allocator, counting the live bytes of each thread and their
/// peak, so a test can bound what one call allocates.
struct Counting;

thread_local! {
    static LIVE: Cell<isize> = const { Cell::new(0) };
    static PEAK: Cell<isize> = const { Cell::new(0) };
}

fn note(delta: isize) {
    let _ = LIVE.try_with(|live| {
        let v = live.get() + delta;
        live.set(v);
        let _ = PEAK.try_with(|p| p.set(p.get().max(v)));
    });
}

// SAFETY: every call forwards to `System` with the caller's arguments; the
// bookkeeping touches only const-initialised thread-locals (no allocation).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            note(layout.size() as isize);
        }
        p
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        note(-(layout.size() as isize));
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            note(new_size as isize - layout.size() as isize);
        }
        p
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// Runs `f` and returns its result with the most bytes this thread held at
/// once during the call, beyond what it held before.
fn peak_during<T>(f: impl FnOnce() -> T) -> (T, usize) {
    let start = LIVE.with(Cell::get);
    PEAK.with(|p| p.set(start));
    let out = f();
    (out, (PEAK.with(Cell::get) - start).max(0) as usize)
}

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

/// A lexical payload written field by field, independently of the writer:
/// k1, b, the terms (text, rows, frequencies), document lengths, ids and
/// the alive bitset's words, each array length-prefixed.
struct Payload<'a> {
    k1: f32,
    b: f32,
    terms: Vec<(&'a [u8], Vec<u32>, Vec<u32>)>,
    doc_len: Vec<u32>,
    ids: Vec<u64>,
    alive: Vec<u64>,
}

impl Payload<'_> {
    /// Two documents (ids 10 and 11, both live) and two terms.
    fn good() -> Self {
        Payload {
            k1: 1.2,
            b: 0.75,
            terms: vec![(b"cat", vec![0, 1], vec![1, 2]), (b"dog", vec![1], vec![1])],
            doc_len: vec![1, 3],
            ids: vec![10, 11],
            alive: vec![0b11],
        }
    }

    fn bytes(&self) -> Vec<u8> {
        let mut p = Vec::new();
        p.extend_from_slice(&self.k1.to_le_bytes());
        p.extend_from_slice(&self.b.to_le_bytes());
        p.extend_from_slice(&(self.terms.len() as u64).to_le_bytes());
        let u32s = |p: &mut Vec<u8>, v: &[u32]| {
            p.extend_from_slice(&(v.len() as u64).to_le_bytes());
            v.iter().for_each(|x| p.extend_from_slice(&x.to_le_bytes()));
        };
        let u64s = |p: &mut Vec<u8>, v: &[u64]| {
            p.extend_from_slice(&(v.len() as u64).to_le_bytes());
            v.iter().for_each(|x| p.extend_from_slice(&x.to_le_bytes()));
        };
        for (t, rows, tfs) in &self.terms {
            p.extend_from_slice(&(t.len() as u64).to_le_bytes());
            p.extend_from_slice(t);
            u32s(&mut p, rows);
            u32s(&mut p, tfs);
        }
        u32s(&mut p, &self.doc_len);
        u64s(&mut p, &self.ids);
        u64s(&mut p, &self.alive);
        p
    }

    /// The payload under a lexical header with both checksums recomputed.
    fn file(&self) -> Vec<u8> {
        reseal(&LexicalIndex::new().to_bytes(), &self.bytes())
    }
}

/// Structurally wrong payloads under valid checksums (resealed, as the
/// vector files' tests do): each is `Corrupt`, never a panic.
#[test]
fn consistent_checksums_but_bad_structure_is_corrupt() {
    let good = Payload::good();
    let idx = LexicalIndex::from_bytes(&good.file()).expect("the hand-written payload is a valid index");
    assert_eq!(idx.len(), 2);
    assert_eq!(ids_of(&idx.search("dog", 5).unwrap()), [11]);
    let corrupt = |p: &Payload, why: &str| {
        let r = LexicalIndex::from_bytes(&p.file());
        assert!(matches!(r, Err(Error::Corrupt(_))), "{why}: {:?}", r.map(|i| i.len()));
    };
    let with = |f: &dyn Fn(&mut Payload)| {
        let mut p = Payload::good();
        f(&mut p);
        p
    };
    corrupt(&with(&|p| p.k1 = f32::NAN), "NaN k1");
    corrupt(&with(&|p| p.b = 2.0), "b above 1");
    corrupt(
        &with(&|p| {
            p.terms[0].2.pop();
        }),
        "rows and frequencies differ",
    );
    corrupt(&with(&|p| p.terms[1].0 = b"cat"), "a term twice");
    corrupt(&with(&|p| p.terms[0].0 = b"\xff\xfe"), "term not UTF-8");
    corrupt(&with(&|p| p.terms[1].1 = vec![2]), "row out of range");
    corrupt(&with(&|p| p.terms[0].1 = vec![1, 0]), "rows out of order");
    corrupt(&with(&|p| p.terms[0].1 = vec![1, 1]), "a row twice in a list");
    corrupt(&with(&|p| p.doc_len = vec![1]), "fewer lengths than rows");
    corrupt(&with(&|p| p.alive = vec![]), "alive bitset too short");
    corrupt(&with(&|p| p.alive = vec![0b11, 0]), "alive bitset too long");
    corrupt(&with(&|p| p.ids = vec![10, 10]), "an id live twice");
    // Counts that promise more than the file holds.
    let mut x = good.bytes();
    x[8..16].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(matches!(
        LexicalIndex::from_bytes(&reseal(&good.file(), &x)),
        Err(Error::Corrupt(_))
    ));
    let mut x = good.bytes();
    x[8..16].copy_from_slice(&3u64.to_le_bytes());
    assert!(matches!(
        LexicalIndex::from_bytes(&reseal(&good.file(), &x)),
        Err(Error::Corrupt(_))
    ));
    let mut x = good.bytes();
    x[16..24].copy_from_slice(&(u64::MAX / 2).to_le_bytes()); // first term's text length
    assert!(matches!(
        LexicalIndex::from_bytes(&reseal(&good.file(), &x)),
        Err(Error::Corrupt(_))
    ));
    // One byte short, one byte over (resealed).
    let x = good.bytes();
    assert!(matches!(
        LexicalIndex::from_bytes(&reseal(&good.file(), &x[..x.len() - 1])),
        Err(Error::Corrupt(_))
    ));
    let mut x = good.bytes();
    x.push(0);
    assert!(matches!(
        LexicalIndex::from_bytes(&reseal(&good.file(), &x)),
        Err(Error::Corrupt(_))
    ));
    // Every truncation of the payload, resealed: an error, never a panic.
    let x = good.bytes();
    for cut in 0..x.len() {
        assert!(
            LexicalIndex::from_bytes(&reseal(&good.file(), &x[..cut])).is_err(),
            "cut {cut}"
        );
    }
}

/// A term count that fits the bytes left (one byte per term) but not 24
/// bytes per term is refused before anything is reserved for it: the load
/// of a 4 MiB file allocates far less than the file, where reserving the
/// maps for 4 million terms would take hundreds of megabytes.
#[test]
fn term_count_is_bounded_and_reserves_nothing() {
    let pad = 4 << 20;
    let mut x = Payload::good().bytes()[..8].to_vec();
    x.extend_from_slice(&(pad as u64).to_le_bytes());
    x.resize(16 + pad, 0);
    let file = reseal(&LexicalIndex::new().to_bytes(), &x);
    let (r, peak) = peak_during(|| LexicalIndex::from_bytes(&file).map(|i| i.len()));
    assert!(matches!(r, Err(Error::Corrupt(_))), "{r:?}");
    assert!(
        peak < 1 << 20,
        "loading a {} byte file allocated {peak} bytes at once",
        file.len()
    );
    // The same count in a payload long enough for it is not refused for size:
    // 65,536 empty-text terms are read until the second is a duplicate.
    let n = 1 << 16;
    let mut x = Payload::good().bytes()[..8].to_vec();
    x.extend_from_slice(&(n as u64).to_le_bytes());
    x.resize(16 + 24 * n, 0);
    let r = LexicalIndex::from_bytes(&reseal(&LexicalIndex::new().to_bytes(), &x));
    assert!(
        matches!(&r, Err(Error::Corrupt(m)) if m.contains("twice")),
        "{:?}",
        r.map(|i| i.len())
    );
}

fn ids_of(hits: &[Hit]) -> Vec<u64> {
    hits.iter().map(|h| h.id).collect()
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

/// A question whose answer shares no word with it, only with the turn the
/// question matches (a second hop), plus unrelated filler.
fn two_hop() -> LexicalIndex {
    let mut idx = LexicalIndex::new();
    let docs = [
        (1, "Caroline joined the adoption agency last spring"),
        (2, "the agency interview went well and the agency called back"),
        (3, "Melanie painted a sunrise over the lake"),
        (4, "we went camping by the lake with the kids"),
        (5, "my pottery class made a bowl"),
        (6, "the bowl cracked in the kiln"),
    ];
    let ids: Vec<u64> = docs.iter().map(|d| d.0).collect();
    let texts: Vec<&str> = docs.iter().map(|d| d.1).collect();
    idx.add(&ids, &texts).unwrap();
    idx
}

fn feedback(docs: usize, terms: usize, weight: f32) -> dentate::Feedback {
    dentate::Feedback { docs, terms, weight }
}

#[test]
fn feedback_finds_the_second_hop() {
    let idx = two_hop();
    let q = "what did Caroline join";
    // Plain BM25 finds only the turn that names Caroline.
    assert_eq!(ids_of(&idx.search(q, 10).unwrap()), vec![1]);
    // Its terms ("adoption", "agency", "last", "spring") bring in the
    // turn about the agency, below the first; three would stop short of
    // "agency", the one with the lowest idf.
    assert_eq!(
        ids_of(&idx.search_expanded(q, 10, feedback(1, 3, 0.5)).unwrap()),
        vec![1]
    );
    let hits = idx.search_expanded(q, 10, feedback(1, 4, 0.5)).unwrap();
    assert_eq!(ids_of(&hits)[..2], [1, 2]);
    assert!(hits[0].score > hits[1].score);
    assert!(!ids_of(&hits).contains(&3) && !ids_of(&hits).contains(&5));
    // A weight scales what the added terms give; the query's own terms
    // still count in full.
    let weak = idx.search_expanded(q, 10, feedback(1, 4, 0.1)).unwrap();
    let strong = idx.search_expanded(q, 10, feedback(1, 4, 1.0)).unwrap();
    assert!(weak[1].score < strong[1].score);
    let plain = idx.search(q, 10).unwrap()[0].score;
    assert!(weak[0].score > plain && weak[0].score < strong[0].score);
}

#[test]
fn feedback_settings_and_edges_are_checked() {
    let idx = two_hop();
    let q = "Caroline";
    for bad in [
        feedback(0, 3, 0.5),
        feedback(3, 0, 0.5),
        feedback(3, 3, 0.0),
        feedback(3, 3, f32::NAN),
        feedback(3, 3, 11.0),
        feedback(dentate::Feedback::MAX + 1, 3, 0.5),
    ] {
        assert!(
            matches!(idx.search_expanded(q, 5, bad), Err(Error::InvalidParameter { .. })),
            "{bad:?}"
        );
    }
    assert!(matches!(
        idx.search_expanded(q, 0, feedback(1, 1, 0.5)),
        Err(Error::ZeroK)
    ));
    // No indexed term, or an empty index: no hits, no error.
    assert!(
        idx.search_expanded("zebra quantum", 5, feedback(2, 2, 0.5))
            .unwrap()
            .is_empty()
    );
    assert!(
        LexicalIndex::new()
            .search_expanded(q, 5, feedback(2, 2, 0.5))
            .unwrap()
            .is_empty()
    );
    // A huge k is clamped to what matched.
    assert!(idx.search_expanded(q, usize::MAX, feedback(1, 3, 0.5)).unwrap().len() <= 6);
}

#[test]
fn feedback_follows_adds_deletes_compaction_and_files() {
    let mut idx = two_hop();
    let q = "what did Caroline join";
    let fb = feedback(1, 4, 0.5);
    let before = idx.search_expanded(q, 10, fb).unwrap();
    // Added after the first feedback search (the terms are extended, not
    // rebuilt): a new turn about the agency is found through it too.
    idx.add(&[7], &["the agency sent the adoption papers"]).unwrap();
    let after = idx.search_expanded(q, 10, fb).unwrap();
    assert!(ids_of(&after).contains(&7) && ids_of(&after).contains(&2));
    // A fresh index of the same documents answers identically.
    let mut fresh = two_hop();
    fresh.add(&[7], &["the agency sent the adoption papers"]).unwrap();
    assert_eq!(fresh.search_expanded(q, 10, fb).unwrap(), after);
    // Deleting the first hop removes what it lent the query.
    idx.remove(&[1]);
    let gone = idx.search_expanded(q, 10, fb).unwrap();
    assert!(gone.is_empty(), "{gone:?}");
    // Compaction and a save/load round trip change nothing.
    idx.add(&[1], &["Caroline joined the adoption agency last spring"])
        .unwrap();
    let live = idx.search_expanded(q, 10, fb).unwrap();
    idx.compact();
    assert_eq!(idx.search_expanded(q, 10, fb).unwrap(), live);
    let back = LexicalIndex::from_bytes(&idx.to_bytes()).unwrap();
    assert_eq!(back.search_expanded(q, 10, fb).unwrap(), live);
    assert_ne!(before, after);
}
