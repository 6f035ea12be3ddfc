//! The JavaScript API end to end, compiled to wasm32 and run by
//! `wasm-bindgen-test-runner` under Node and in headless Chromium
//! (`scripts/test.sh` runs this file in both).
#![cfg(target_arch = "wasm32")]

use dentate_core::data::{SynthConfig, clustered};
use dentate_core::{FlatIndex, Index, Precision};
use dentate_wasm::*;
use js_sys::{Array, BigUint64Array, Float64Array, Reflect, Uint32Array};
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_test::*;

fn synth(n: usize, dim: usize, clusters: usize, seed: u64) -> Vec<f32> {
    clustered(&SynthConfig {
        n,
        dim,
        clusters,
        spread: 0.8,
        seed,
    })
    .expect("valid synthetic data")
}

fn ids(range: std::ops::Range<u32>) -> JsValue {
    Uint32Array::from(&range.collect::<Vec<u32>>()[..]).into()
}

fn message(e: JsValue) -> String {
    let err: js_sys::Error = e.dyn_into().expect("errors are JavaScript Errors");
    assert_eq!(String::from(err.name()), "DentateError");
    String::from(err.message())
}

fn row(r: &SearchResults, q: usize) -> Vec<u64> {
    let n = r.counts()[q] as usize;
    r.ids()[q * r.k()..q * r.k() + n].to_vec()
}

#[wasm_bindgen_test]
fn simd128_is_the_cpu_path() {
    assert_eq!(simd(), "simd128");
    assert!(backend().contains("simd128"), "{}", backend());
}

#[wasm_bindgen_test]
fn exact_search_matches_the_engine() {
    let dim = 16;
    let data = synth(500, dim, 8, 1);
    let mut idx = VectorIndex::exact(dim, JsValue::UNDEFINED).unwrap();
    idx.add(ids(0..500), &data).unwrap();
    assert_eq!((idx.size(), idx.dim(), idx.kind()), (500, dim, "flat".to_string()));
    let q = &data[..dim * 4];
    let res = idx.search(q, 5).unwrap();
    assert_eq!((res.queries(), res.k()), (4, 5));
    let mut reference = FlatIndex::with_precision(dim, Precision::F32);
    reference.add(&(0..500).collect::<Vec<u64>>(), &data).unwrap();
    let want = reference.search(q, 5).unwrap();
    for (i, hits) in want.iter().enumerate() {
        assert_eq!(row(&res, i), hits.iter().map(|h| h.id).collect::<Vec<_>>());
        assert_eq!(row(&res, i)[0], i as u64, "each vector finds itself");
        assert!((res.scores()[i * 5] - 1.0).abs() < 1e-5);
    }
    // Deletes are never returned; a k above the live count is clamped to
    // it (the engine's k rule), so the rows are 2 slots wide.
    assert_eq!(idx.remove(ids(0..498)).unwrap(), 498);
    let res = idx.search(q, 5).unwrap();
    assert_eq!((res.queries(), res.k()), (4, 2));
    assert_eq!(res.counts().to_vec(), vec![2, 2, 2, 2]);
    assert_eq!(res.ids().len(), 8);
    assert!(res.ids().iter().all(|&i| i >= 498));
    idx.compact();
    assert_eq!(idx.size(), 2);
}

#[wasm_bindgen_test]
fn ids_come_in_every_javascript_shape() {
    let dim = 4;
    let v = [1.0, 0.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0];
    let shapes: Vec<JsValue> = vec![
        BigUint64Array::from(&[7u64, u64::MAX - 1][..]).into(),
        Float64Array::from(&[7.0, 9_007_199_254_740_991.0][..]).into(),
        Array::of2(&JsValue::from(7), &js_sys::BigInt::from(u64::MAX - 1).into()).into(),
    ];
    for s in shapes {
        let mut idx = VectorIndex::exact(dim, JsValue::UNDEFINED).unwrap();
        idx.add(s, &v).unwrap();
        assert_eq!(row(&idx.search(&v[..4], 1).unwrap(), 0), vec![7]);
    }
    for bad in [
        Float64Array::from(&[1.5, 2.0][..]).into(),
        Float64Array::from(&[-1.0, 2.0][..]).into(),
        Array::of2(&JsValue::from("a"), &JsValue::from(1)).into(),
        JsValue::from("12"),
    ] {
        let mut idx = VectorIndex::exact(dim, JsValue::UNDEFINED).unwrap();
        let m = message(idx.add(bad, &v).unwrap_err());
        assert!(m.contains("id"), "{m}");
        assert_eq!(idx.size(), 0, "nothing added");
    }
}

#[wasm_bindgen_test]
fn bad_input_throws_clear_errors_and_changes_nothing() {
    let mut idx = VectorIndex::exact(4, JsValue::UNDEFINED).unwrap();
    assert!(message(idx.search(&[1.0, 0.0, 0.0, 0.0], 1).unwrap_err()).contains("empty"));
    idx.add(ids(0..1), &[1.0, 0.0, 0.0, 0.0]).unwrap();
    let m = message(idx.add(ids(1..2), &[f32::NAN, 0.0, 0.0, 0.0]).unwrap_err());
    assert!(m.contains("non-finite"), "{m}");
    let m = message(idx.add(ids(1..2), &[1.0, 0.0, 0.0]).unwrap_err());
    assert!(m.contains("dimension") || m.contains("whole number"), "{m}");
    let m = message(idx.add(ids(1..3), &[0.0; 8]).unwrap_err());
    assert!(m.contains("zero norm"), "{m}");
    assert!(message(idx.search(&[1.0, 0.0, 0.0, 0.0], 0).unwrap_err()).contains("k must be"));
    assert!(message(idx.search(&[1.0, 0.0], 1).unwrap_err()).contains("dimension"));
    assert_eq!(idx.size(), 1);
    assert!(message(VectorIndex::exact(0, JsValue::UNDEFINED).unwrap_err()).contains("dim"));
    assert!(message(VectorIndex::ivf_pq(8, 4, 3, JsValue::UNDEFINED).unwrap_err()).contains("m"));
    let mut ivf = VectorIndex::ivf_pq(8, 4, 4, JsValue::UNDEFINED).unwrap();
    let m = message(ivf.add(ids(0..1), &[1.0; 8]).unwrap_err());
    assert!(m.contains("not trained"), "{m}");
    let opts = js_sys::Object::new();
    Reflect::set(&opts, &"opq".into(), &"yes".into()).unwrap();
    assert!(message(VectorIndex::ivf_pq(8, 4, 4, opts.into()).unwrap_err()).contains("opq"));
    // Damaged files.
    let bytes = idx.save();
    assert!(message(VectorIndex::load(&bytes[..bytes.len() - 3]).unwrap_err()).contains("truncated"));
    let mut flipped = bytes.clone();
    let last = flipped.len() - 1;
    flipped[last] ^= 1;
    assert!(message(VectorIndex::load(&flipped).unwrap_err()).contains("checksum"));
    let m = message(VectorIndex::load(b"not an index").unwrap_err());
    assert!(m.contains("truncated") || m.contains("magic"), "{m}");
    let m = message(VectorIndex::load(&[b'x'; 64]).unwrap_err());
    assert!(m.contains("magic"), "{m}");
}

#[wasm_bindgen_test]
fn ivf_pq_trains_searches_and_round_trips() {
    let dim = 32;
    let data = synth(4_000, dim, 40, 3);
    let opts = js_sys::Object::new();
    Reflect::set(&opts, &"opq".into(), &true.into()).unwrap();
    let mut idx = VectorIndex::ivf_pq(dim, 32, 8, opts.into()).unwrap();
    assert!(!idx.is_trained());
    idx.train(&data).unwrap();
    idx.add(ids(0..4_000), &data).unwrap();
    let q = &data[..dim * 50];
    let exact = {
        let mut f = VectorIndex::exact(dim, JsValue::UNDEFINED).unwrap();
        f.add(ids(0..4_000), &data).unwrap();
        f.search(q, 10).unwrap()
    };
    let approx = idx.search_with(q, 10, 32, 8).unwrap();
    let mut found = 0;
    for i in 0..50 {
        let truth = row(&exact, i);
        found += row(&approx, i).iter().filter(|x| truth.contains(x)).count();
    }
    let recall = found as f64 / 500.0;
    assert!(recall > 0.9, "recall@10 {recall}");
    let back = VectorIndex::load(&idx.save()).unwrap();
    assert_eq!(back.kind(), "ivfpq");
    assert_eq!(back.search_with(q, 10, 32, 8).unwrap().ids(), approx.ids());
}

/// 4-bit fast-scan (IVF and flat) in wasm: the simd128 shuffle path finds
/// the neighbours, saves and loads, and refuses what the native library
/// refuses.
#[wasm_bindgen_test]
fn fast_scan_trains_searches_and_round_trips() {
    let dim = 32;
    let data = synth(4_000, dim, 40, 4);
    let q = &data[..dim * 50];
    let exact = {
        let mut f = VectorIndex::exact(dim, JsValue::UNDEFINED).unwrap();
        f.add(ids(0..4_000), &data).unwrap();
        f.search(q, 10).unwrap()
    };
    for nlist in [32, 1] {
        let mut idx = VectorIndex::fast_scan(dim, nlist, 16, JsValue::UNDEFINED).unwrap();
        assert_eq!(idx.kind(), "fastscan");
        assert!(idx.add(ids(0..1), &data[..dim]).is_err(), "add before train");
        idx.train(&data).unwrap();
        idx.add(ids(0..4_000), &data).unwrap();
        let approx = idx.search_with(q, 10, 8, 10).unwrap();
        let mut found = 0;
        for i in 0..50 {
            let truth = row(&exact, i);
            found += row(&approx, i).iter().filter(|x| truth.contains(x)).count();
        }
        let recall = found as f64 / 500.0;
        assert!(recall > 0.9, "nlist {nlist}: recall@10 {recall}");
        // 16 sub-quantizers of 4 bits: 8 code bytes per vector, far below
        // the 8-bit index's 16 (the f16 re-rank store dominates both).
        let back = VectorIndex::load(&idx.save()).unwrap();
        assert_eq!(back.kind(), "fastscan");
        assert_eq!(back.search_with(q, 10, 8, 10).unwrap().ids(), approx.ids());
    }
    assert!(message(VectorIndex::fast_scan(32, 8, 5, JsValue::UNDEFINED).unwrap_err()).contains("m"));
    let fixture = include_bytes!("../../tests/fixtures/fastscan_v1.dnt");
    let loaded = VectorIndex::load(fixture).unwrap();
    assert_eq!((loaded.size(), loaded.kind()), (299, "fastscan".to_string()));
    assert_eq!(loaded.save(), fixture.to_vec());
}

/// Files written by the native library (the format fixtures of the native
/// tests) load in wasm, answer like an index built here from the same data,
/// and re-serialise to the same bytes.
#[wasm_bindgen_test]
fn natively_saved_indexes_load() {
    let flat_bytes = include_bytes!("../../tests/fixtures/flat_v1.dnt");
    let flat = VectorIndex::load(flat_bytes).unwrap();
    assert_eq!(flat.size(), 62);
    let data = synth(64, 8, 4, 2024);
    let mut fresh = VectorIndex::exact(8, JsValue::UNDEFINED).unwrap();
    fresh.add(ids(100..164), &data).unwrap();
    fresh.remove(ids(101..102)).unwrap();
    fresh.remove(ids(150..151)).unwrap();
    let q = synth(5, 8, 4, 7);
    assert_eq!(flat.search(&q, 10).unwrap().ids(), fresh.search(&q, 10).unwrap().ids());
    assert_eq!(flat.save(), flat_bytes.to_vec());

    let ivf_bytes = include_bytes!("../../tests/fixtures/ivfpq_v1.dnt");
    let ivf = VectorIndex::load(ivf_bytes).unwrap();
    assert_eq!((ivf.size(), ivf.kind()), (299, "ivfpq".to_string()));
    let data = synth(300, 8, 6, 2025);
    let res = ivf.search_with(&data[8 * 10..8 * 20], 1, 4, 300).unwrap();
    assert_eq!(res.ids().to_vec(), (10..20).collect::<Vec<u64>>());
    assert_eq!(ivf.save(), ivf_bytes.to_vec());

    let lex_bytes = include_bytes!("../../tests/fixtures/lexical_v1.dnt");
    let lex = LexicalIndex::load(lex_bytes).unwrap();
    assert_eq!(lex.save(), lex_bytes.to_vec());
}

fn strings(v: &[&str]) -> JsValue {
    v.iter().map(|s| JsValue::from_str(s)).collect::<Array>().into()
}

#[wasm_bindgen_test]
fn lexical_and_hybrid_search() {
    let docs = [
        "Caroline went to the LGBTQ support group on Tuesday.",
        "Melanie painted a sunrise over the lake.",
        "The support group meets every week in the library.",
        "Caroline is researching adoption agencies.",
    ];
    let mut lex = LexicalIndex::new(None, None).unwrap();
    lex.add(ids(0..4), strings(&docs)).unwrap();
    let r = lex
        .search("When did Caroline go to the LGBTQ support group?", 4)
        .unwrap();
    assert_eq!(row(&r, 0)[0], 0);
    assert_eq!(lex.remove(ids(0..1)).unwrap(), 1);
    assert!(!row(&lex.search("LGBTQ support group", 4).unwrap(), 0).contains(&0));
    let back = LexicalIndex::load(&lex.save()).unwrap();
    assert_eq!(back.size(), 3);
    assert!(message(LexicalIndex::new(Some(-1.0), None).unwrap_err()).contains("k1"));
    assert!(message(lex.add(ids(5..6), JsValue::from(3)).unwrap_err()).contains("array of strings"));

    let emb = HashingEmbedder::new(Some(128)).unwrap();
    let vecs = emb.embed(strings(&docs)).unwrap();
    assert_eq!(vecs.len(), 4 * 128);
    let mut idx = VectorIndex::exact(128, JsValue::UNDEFINED).unwrap();
    idx.add(ids(0..4), &vecs).unwrap();
    let mut lex = LexicalIndex::new(None, None).unwrap();
    lex.add(ids(0..4), strings(&docs)).unwrap();
    let question = "Which adoption agencies is Caroline looking at?";
    let qv = emb.embed(strings(&[question])).unwrap();
    for fusion in [None, Some("rrf".to_string()), Some("weighted:0.5".to_string())] {
        let r = hybrid_search(&idx, &lex, &qv, question, 2, fusion.clone()).unwrap();
        assert_eq!(row(&r, 0)[0], 3, "{fusion:?}");
    }
    let m = message(hybrid_search(&idx, &lex, &qv, question, 2, Some("weighted:7".into())).unwrap_err());
    assert!(m.contains("fusion"), "{m}");
}

#[cfg(feature = "memory")]
fn msg(speaker: &str, text: &str, id: &str, ts: f64) -> JsValue {
    let o = js_sys::Object::new();
    Reflect::set(&o, &"speaker".into(), &speaker.into()).unwrap();
    Reflect::set(&o, &"text".into(), &text.into()).unwrap();
    Reflect::set(&o, &"id".into(), &id.into()).unwrap();
    Reflect::set(&o, &"timestamp".into(), &ts.into()).unwrap();
    o.into()
}

#[cfg(feature = "memory")]
fn chat() -> JsValue {
    let t0 = 1_700_000_000.0;
    [
        msg(
            "Ann",
            "I adopted a grey cat from the shelter and named her Pixel.",
            "m1",
            t0,
        ),
        msg(
            "Ben",
            "Lovely! I started learning the cello in Lisbon last month.",
            "m2",
            t0 + 60.0,
        ),
        msg("Ann", "My sister Clara is moving to Porto in June.", "m3", t0 + 120.0),
        msg("Ben", "I ran my first marathon in Berlin on Sunday.", "m4", t0 + 180.0),
    ]
    .into_iter()
    .collect::<Array>()
    .into()
}

#[cfg(feature = "memory")]
fn get(v: &JsValue, k: &str) -> JsValue {
    Reflect::get(v, &k.into()).unwrap()
}

#[cfg(feature = "memory")]
#[wasm_bindgen_test]
fn hema_memory_in_the_page_with_provenance_and_snapshots() {
    let mut mem = AgentMemory::new(JsValue::UNDEFINED).unwrap();
    assert_eq!(mem.pipeline(), "hema");
    let rep = mem.add_messages("ann", chat()).unwrap();
    assert_eq!(get(&rep, "messages").as_f64(), Some(4.0));
    let hits = mem.retrieve("ann", "Where is Clara moving?", 2).unwrap();
    let top = hits.get(0);
    assert!(get(&top, "text").as_string().unwrap().contains("Porto"));
    let sources: Array = get(&top, "sources").dyn_into().unwrap();
    assert_eq!(sources.get(0).as_string().as_deref(), Some("m3"));
    let c = mem.compose("ann", "What instrument is Ben learning?", 400).unwrap();
    assert!(get(&c, "prompt").as_string().unwrap().contains("cello"));
    assert!(get(&c, "tokens").as_f64().unwrap() <= 400.0);

    // Snapshot → restore answers the same; new messages land in the copy.
    let bytes = mem.save().unwrap();
    let mut back = AgentMemory::load(&bytes, JsValue::UNDEFINED).unwrap();
    let again = back.retrieve("ann", "Where is Clara moving?", 2).unwrap();
    assert_eq!(get(&again.get(0), "id").as_f64(), get(&top, "id").as_f64());
    assert_eq!(back.message_count("ann").unwrap(), 4.0);
    let id = get(&again.get(0), "id").as_f64().unwrap();
    back.forget("ann", id).unwrap();
    let after = back.retrieve("ann", "Where is Clara moving?", 4).unwrap();
    assert!(after.iter().all(|h| get(&h, "id").as_f64() != Some(id)));

    // Errors are typed and lose nothing.
    assert!(message(mem.retrieve("ann", "q", 0).unwrap_err()).contains("k must be"));
    assert!(message(mem.add_messages("ann", JsValue::from(1)).unwrap_err()).contains("array"));
    let mut broken = bytes.clone();
    broken.truncate(bytes.len() / 2);
    assert!(message(AgentMemory::load(&broken, JsValue::UNDEFINED).map(|_| ()).unwrap_err()).contains("snapshot"));
    let opts = js_sys::Object::new();
    Reflect::set(&opts, &"pipeline".into(), &"zettelkasten".into()).unwrap();
    assert!(message(AgentMemory::new(opts.into()).map(|_| ()).unwrap_err()).contains("pipeline"));
}

#[cfg(feature = "memory")]
#[wasm_bindgen_test]
fn a_javascript_embedder_drives_the_memory() {
    // An embedder written in JavaScript: counts vowels per position class.
    let f = js_sys::Function::new_with_args(
        "texts",
        "const out = new Float32Array(texts.length * 8);
         texts.forEach((t, i) => { for (const ch of t.toLowerCase()) {
             const c = ch.charCodeAt(0); out[i * 8 + (c % 8)] += 1; } out[i * 8] += 0.5; });
         return out;",
    );
    let opts = js_sys::Object::new();
    Reflect::set(&opts, &"embed".into(), &f).unwrap();
    Reflect::set(&opts, &"embedDim".into(), &8.into()).unwrap();
    Reflect::set(&opts, &"pipeline".into(), &"rag".into()).unwrap();
    Reflect::set(&opts, &"retriever".into(), &"dense".into()).unwrap();
    let mut mem = AgentMemory::new(opts.clone().into()).unwrap();
    mem.add_messages("u", chat()).unwrap();
    let hits = mem
        .retrieve("u", "I adopted a grey cat from the shelter and named her Pixel.", 1)
        .unwrap();
    assert!(get(&hits.get(0), "text").as_string().unwrap().contains("Pixel"));
    // A function that returns the wrong length is a clear error.
    let bad = js_sys::Function::new_with_args("texts", "return new Float32Array(3);");
    Reflect::set(&opts, &"embed".into(), &bad).unwrap();
    let mut mem = AgentMemory::new(opts.into()).unwrap();
    let m = message(mem.add_messages("u", chat()).unwrap_err());
    assert!(m.contains("returned 3 floats"), "{m}");
    assert_eq!(mem.message_count("u").unwrap(), 4.0, "raw messages are kept");
}

/// The `k` rule through every method that takes a `k`: a `k` far above the
/// index (here `usize::MAX`, 2^32 − 1 in wasm32, whose product with the
/// query count wraps) returns every live result in rows of `size` slots,
/// and never allocates by `k`.
#[wasm_bindgen_test]
fn huge_k_is_clamped_to_the_index_size() {
    let dim = 8;
    let data = synth(300, dim, 4, 5);
    let q = &data[..dim * 3];
    let mut exact = VectorIndex::exact(dim, JsValue::UNDEFINED).unwrap();
    let mut ivf = VectorIndex::ivf_pq(dim, 4, 4, JsValue::UNDEFINED).unwrap();
    let mut fast = VectorIndex::fast_scan(dim, 1, 4, JsValue::UNDEFINED).unwrap();
    ivf.train(&data).unwrap();
    fast.train(&data).unwrap();
    for idx in [&mut exact, &mut ivf, &mut fast] {
        idx.add(ids(0..50), &data[..50 * dim]).unwrap();
        let kind = idx.kind();
        let want = idx.search(q, 50).unwrap();
        for r in [
            idx.search(q, usize::MAX).unwrap(),
            idx.search(q, usize::MAX / 3).unwrap(),
            idx.search_with(q, usize::MAX, 4, usize::MAX).unwrap(),
        ] {
            assert_eq!((r.queries(), r.k()), (3, 50), "{kind}");
            assert_eq!(r.counts().to_vec(), vec![50, 50, 50], "{kind}");
            for i in 0..3 {
                assert_eq!(row(&r, i), row(&want, i), "{kind} query {i}");
            }
        }
        assert!(message(idx.search(q, 0).unwrap_err()).contains("k must be"));
    }

    let docs = ["red apples", "green apples", "red cars", "blue sky"];
    let mut lex = LexicalIndex::new(None, None).unwrap();
    lex.add(ids(0..4), strings(&docs)).unwrap();
    let r = lex.search("red apples", usize::MAX).unwrap();
    assert_eq!((r.k(), r.counts().to_vec()), (4, vec![3]));
    let emb = HashingEmbedder::new(Some(16)).unwrap();
    let mut small = VectorIndex::exact(16, JsValue::UNDEFINED).unwrap();
    small.add(ids(0..4), &emb.embed(strings(&docs)).unwrap()).unwrap();
    let qv = emb.embed(strings(&["red apples"])).unwrap();
    let r = hybrid_search(&small, &lex, &qv, "red apples", usize::MAX, None).unwrap();
    assert_eq!(r.counts().to_vec(), vec![4], "every document, once");
}

#[cfg(feature = "memory")]
#[wasm_bindgen_test]
fn memory_retrieve_clamps_k() {
    let mut mem = AgentMemory::new(JsValue::UNDEFINED).unwrap();
    mem.add_messages("ann", chat()).unwrap();
    let all = mem.retrieve("ann", "Where is Clara moving?", usize::MAX).unwrap();
    assert_eq!(all.length(), 4, "every memory, no more");
}

/// `dim` and `embedDim` are bounded: a huge one is a clear error at
/// construction, never an allocation sized by it.
#[cfg(feature = "memory")]
#[wasm_bindgen_test]
fn memory_dimensions_are_bounded() {
    for (key, value) in [
        ("dim", 65_537.0),
        ("dim", 4e9),
        ("dim", 9_007_199_254_740_991.0),
        ("dim", 1.0),
    ] {
        let opts = js_sys::Object::new();
        Reflect::set(&opts, &key.into(), &value.into()).unwrap();
        let m = message(AgentMemory::new(opts.into()).map(|_| ()).unwrap_err());
        assert!(m.contains("dim"), "{key} = {value}: {m}");
    }
    let f = js_sys::Function::new_with_args("texts", "return new Float32Array(texts.length * 4);");
    for big in [65_537.0, 4e9] {
        let opts = js_sys::Object::new();
        Reflect::set(&opts, &"embed".into(), &f).unwrap();
        Reflect::set(&opts, &"embedDim".into(), &big.into()).unwrap();
        let m = message(AgentMemory::new(opts.into()).map(|_| ()).unwrap_err());
        assert!(m.contains("embedDim"), "{m}");
    }
    let opts = js_sys::Object::new();
    Reflect::set(&opts, &"dim".into(), &65_536.0.into()).unwrap();
    let mut mem = AgentMemory::new(opts.into()).unwrap();
    mem.add_messages("ann", chat()).unwrap();
    assert!(HashingEmbedder::new(Some(65_537)).is_err());
}

#[wasm_bindgen_test]
fn rerank_store_option_and_stage_profile() {
    let (n, dim) = (2000, 32);
    let data = synth(n, dim, 10, 21);
    let store = |s: &str| {
        let opts = js_sys::Object::new();
        Reflect::set(&opts, &"rerankStore".into(), &s.into()).unwrap();
        opts.into()
    };
    let mut f16 = VectorIndex::fast_scan(dim, 8, 8, store("f16")).unwrap();
    let mut f32s = VectorIndex::fast_scan(dim, 8, 8, store("f32")).unwrap();
    let mut none = VectorIndex::fast_scan(dim, 8, 8, store("none")).unwrap();
    let mut sq8 = VectorIndex::fast_scan(dim, 8, 8, store("sq8")).unwrap();
    let mut default = VectorIndex::fast_scan(dim, 8, 8, JsValue::UNDEFINED).unwrap();
    for idx in [&mut f16, &mut f32s, &mut none, &mut sq8, &mut default] {
        idx.train(&data).unwrap();
        idx.add(ids(0..n as u32), &data).unwrap();
    }
    // The f32 store keeps twice the bytes of the f16 one and the same
    // answers on well-separated data; without a store there is nothing
    // to re-rank from, said plainly.
    assert!(f32s.save().len() > f16.save().len() + n * dim);
    let q = &data[..dim];
    assert_eq!(
        f16.search_with(q, 5, 8, 4).unwrap().ids(),
        f32s.search_with(q, 5, 8, 4).unwrap().ids()
    );
    assert!(message(none.search_with(q, 5, 8, 4).unwrap_err()).contains("re-rank"));
    // The 8-bit store: half of f16's bytes, the same nearest neighbour.
    assert!(sq8.save().len() + n * dim / 2 < f16.save().len());
    assert_eq!(
        sq8.search_with(q, 1, 8, 4).unwrap().ids(),
        f16.search_with(q, 1, 8, 4).unwrap().ids()
    );
    assert_eq!(none.search(q, 5).unwrap().counts().to_vec(), vec![5]);
    // The browser's default store is the 8-bit one, byte for byte.
    assert_eq!(default.save(), sq8.save());
    assert!(message(VectorIndex::fast_scan(dim, 8, 8, store("f8")).unwrap_err()).contains("rerankStore"));

    // The profile names each stage in milliseconds; the stages fit in the total.
    let p = f16.profile(q, 5, 8, 4).unwrap();
    let get = |k: &str| Reflect::get(&p, &k.into()).unwrap().as_f64().expect(k);
    for k in ["plan", "scan", "rerank", "results", "total"] {
        assert!(get(k) >= 0.0, "{k}");
    }
    // (A page that is not cross-origin isolated sees 0.1 ms clock steps,
    // so a fast search may well report 0: only the order is checked.)
    assert!(get("plan") + get("scan") + get("rerank") + get("results") <= get("total") + 1e-9);
    let exact = VectorIndex::exact(dim, JsValue::UNDEFINED).unwrap();
    assert!(message(exact.profile(q, 0, 1, 0).unwrap_err()).contains("k"));
}

#[cfg(feature = "memory")]
fn options(pairs: &[(&str, JsValue)]) -> JsValue {
    let o = js_sys::Object::new();
    for (k, v) in pairs {
        Reflect::set(&o, &(*k).into(), v).unwrap();
    }
    o.into()
}

#[cfg(feature = "memory")]
fn sources_of(hits: &Array) -> Vec<String> {
    hits.iter()
        .flat_map(|h| {
            get(&h, "sources")
                .dyn_into::<Array>()
                .unwrap()
                .iter()
                .collect::<Vec<_>>()
        })
        .filter_map(|s| s.as_string())
        .collect()
}

#[cfg(feature = "memory")]
#[wasm_bindgen_test]
fn amory_and_premem_run_on_their_offline_stand_ins() {
    for pipeline in ["amory", "amory-rapid", "premem"] {
        let mut mem = AgentMemory::new(options(&[("pipeline", pipeline.into())])).unwrap();
        assert_eq!(mem.pipeline(), pipeline);
        mem.add_messages("ann", chat()).unwrap();
        mem.flush("ann").unwrap();
        let hits = mem.retrieve("ann", "What is the name of Ann's cat?", 3).unwrap();
        assert!(hits.length() > 0, "{pipeline}");
        assert!(
            sources_of(&hits).contains(&"m1".to_string()),
            "{pipeline}: {:?}",
            sources_of(&hits)
        );
        assert!(mem.llm_stats().is_null());
        // Snapshots restore the same pipeline's answers.
        let bytes = mem.save().unwrap();
        let mut back = AgentMemory::load(&bytes, options(&[("pipeline", pipeline.into())])).unwrap();
        let again = back.retrieve("ann", "What is the name of Ann's cat?", 3).unwrap();
        assert_eq!(sources_of(&again), sources_of(&hits), "{pipeline}");
    }
}

#[cfg(feature = "memory")]
#[wasm_bindgen_test]
fn a_javascript_model_answers_the_pipelines_calls() {
    // A scripted model: PREMem's extraction gets one fragment the offline
    // stand-in would never write; its reasoning step gets no insight.
    let model = js_sys::Function::new_with_args(
        "req",
        r#"globalThis.dentateRoles = (globalThis.dentateRoles || []).concat([req.role]);
        if (!Array.isArray(req.messages) || typeof req.messages.at(-1).content !== "string") throw new Error("bad request");
        if (req.role === "premem_extract") {
          if (req.schema.type !== "object") throw new Error("no schema");
          const text = JSON.stringify({ Factual_Information: [{ key: "pet", value: "Per the model, Ann's cat Pixel is grey", message_id: 1 }],
                                        Experiential_Information: [], Subjective_Information: [] });
          return { text, promptTokens: 7, completionTokens: 3 };
        }
        if (req.role === "premem_reason") return '{"extended_insight": []}';
        return "not json";"#,
    );
    let mut mem = AgentMemory::new(options(&[
        ("pipeline", "premem".into()),
        ("llm", model.into()),
        ("llmName", "scripted".into()),
    ]))
    .unwrap();
    mem.add_messages("ann", chat()).unwrap();
    mem.flush("ann").unwrap();
    let hits = mem.retrieve("ann", "What colour is Ann's cat?", 3).unwrap();
    let texts: Vec<String> = hits.iter().map(|h| get(&h, "text").as_string().unwrap()).collect();
    assert!(texts.iter().any(|t| t.contains("Per the model")), "{texts:?}");
    assert!(sources_of(&hits).contains(&"m1".to_string()));
    let stats = mem.llm_stats();
    assert!(get(&stats, "calls").as_f64().unwrap() >= 1.0);
    assert_eq!(get(&stats, "failures").as_f64(), Some(0.0));
    assert_eq!(get(&get(&stats, "roles"), "premem_extract").as_f64(), Some(1.0));
    assert_eq!(get(&stats, "promptTokens").as_f64(), Some(7.0));
    assert_eq!(get(&stats, "completionTokens").as_f64(), Some(3.0));

    // Every pipeline reaches the function (Amory's first step here), and a
    // model that keeps answering prose is an error after one repair.
    for (pipeline, role) in [
        ("amory", "amory_init"),
        ("nemori", "nemori_boundary"),
        ("hema", "hema_update"),
    ] {
        let f = js_sys::Function::new_with_args("req", "globalThis.lastRole = req.role; return 'not json';");
        let mut mem = AgentMemory::new(options(&[("pipeline", pipeline.into()), ("llm", f.into())])).unwrap();
        // Amory binds a session when it closes (flush), the others as messages arrive.
        let e = message(
            mem.add_messages("ann", chat())
                .and_then(|_| mem.flush("ann"))
                .unwrap_err(),
        );
        assert!(e.contains("malformed"), "{pipeline}: {e}");
        assert_eq!(
            Reflect::get(&js_sys::global(), &"lastRole".into())
                .unwrap()
                .as_string()
                .as_deref(),
            Some(role)
        );
        assert_eq!(get(&mem.llm_stats(), "repairs").as_f64(), Some(1.0), "{pipeline}");
    }
    // A function that throws, one that answers asynchronously, and a
    // non-function are refused with what is wrong.
    let throws = js_sys::Function::new_with_args("req", "throw new Error('model offline')");
    let mut mem = AgentMemory::new(options(&[("pipeline", "premem".into()), ("llm", throws.into())])).unwrap();
    assert!(
        message(
            mem.add_messages("ann", chat())
                .and_then(|_| mem.flush("ann"))
                .unwrap_err()
        )
        .contains("model offline")
    );
    let asynchronous = js_sys::Function::new_with_args("req", "return Promise.resolve('{}')");
    let mut mem = AgentMemory::new(options(&[("pipeline", "premem".into()), ("llm", asynchronous.into())])).unwrap();
    assert!(
        message(
            mem.add_messages("ann", chat())
                .and_then(|_| mem.flush("ann"))
                .unwrap_err()
        )
        .contains("synchronously")
    );
    assert!(message(AgentMemory::new(options(&[("llm", 5.into())])).err().unwrap()).contains("function"));
}

#[wasm_bindgen_test]
async fn indexes_and_memories_persist_in_the_pages_storage() {
    use wasm_bindgen_futures::JsFuture;
    let dim = 16;
    let data = synth(300, dim, 4, 9);
    let mut idx = VectorIndex::exact(dim, JsValue::UNDEFINED).unwrap();
    idx.add(ids(0..300), &data).unwrap();
    let in_page = Reflect::has(&js_sys::global(), &"document".into()).unwrap();
    if storage_backend().await.is_null() {
        // Node: no browser storage, said plainly, and nothing else changes.
        assert!(!in_page, "a page without OPFS or IndexedDB");
        assert!(message(JsFuture::from(idx.save_to("t".into())).await.unwrap_err()).contains("no browser storage"));
        assert!(message(VectorIndex::load_from("t".into()).await.unwrap_err()).contains("no browser storage"));
        return;
    }
    let q = &data[5 * dim..6 * dim];
    let want = idx.search(q, 5).unwrap().ids();
    for kind in ["opfs", "indexeddb", "auto"] {
        use_storage(kind.into()).await.unwrap();
        let name = format!("test-index-{kind}");
        JsFuture::from(idx.save_to(name.clone())).await.unwrap();
        let back = VectorIndex::load_from(name.clone()).await.unwrap();
        assert_eq!(back.search(q, 5).unwrap().ids(), want, "{kind}");
        let names: Vec<String> = list_saved()
            .await
            .unwrap()
            .iter()
            .filter_map(|v| v.as_string())
            .collect();
        assert!(names.contains(&name), "{kind}: {names:?}");
        // Saving again replaces; removing twice says whether there was anything.
        JsFuture::from(idx.save_to(name.clone())).await.unwrap();
        assert!(remove_saved(name.clone()).await.unwrap());
        assert!(!remove_saved(name.clone()).await.unwrap());
        assert!(message(VectorIndex::load_from(name.clone()).await.unwrap_err()).contains("nothing is saved"));
    }
    // OPFS is what Chromium gives a page by default.
    assert_eq!(storage_backend().await.as_string().as_deref(), Some("opfs"));
    for bad in ["", "a/b", "..", "x\0y", &"x".repeat(5000)] {
        let e = message(VectorIndex::load_from(bad.to_string()).await.unwrap_err());
        assert!(e.contains("storage name") && e.len() < 300, "{e}");
    }
    assert!(message(use_storage("floppy".into()).await.unwrap_err()).contains("opfs"));

    #[cfg(feature = "memory")]
    {
        let mut mem = AgentMemory::new(JsValue::UNDEFINED).unwrap();
        mem.add_messages("ann", chat()).unwrap();
        JsFuture::from(mem.save_to("test-memory".into()).unwrap())
            .await
            .unwrap();
        let mut back = AgentMemory::load_from("test-memory".into(), JsValue::UNDEFINED)
            .await
            .unwrap();
        let hits = back.retrieve("ann", "Where is Clara moving?", 1).unwrap();
        assert_eq!(sources_of(&hits), vec!["m3".to_string()]);
        // A memory snapshot is not an index: refused, not misread.
        JsFuture::from(mem.save_to("test-index-auto".into()).unwrap())
            .await
            .unwrap();
        let e = message(VectorIndex::load_from("test-index-auto".into()).await.unwrap_err());
        assert!(!e.is_empty());
        assert!(remove_saved("test-memory".into()).await.unwrap());
        assert!(remove_saved("test-index-auto".into()).await.unwrap());
    }
}

#[cfg(feature = "memory")]
#[wasm_bindgen_test]
fn token_counts_are_estimated_until_the_vocabulary_is_loaded() {
    // The package does not carry the 3.6 MB vocabulary; nothing here loads
    // it (the demo check loads the real file and checks exact counts).
    assert!(!tokens_exact());
    let probe = "Caroline went to the LGBTQ support group on 7 May 2023.";
    let n = count_tokens(probe);
    assert!((12..=20).contains(&n), "estimate {n} for a 16-token sentence");
    assert_eq!(count_tokens(""), 0);
    assert!(message(load_vocabulary(b"aGVsbG8= 0\n").unwrap_err()).contains("o200k_base"));
    assert!(!tokens_exact());
    let mut mem = AgentMemory::new(JsValue::UNDEFINED).unwrap();
    mem.add_messages("ann", chat()).unwrap();
    let c = mem.compose("ann", "Where is Clara moving?", 400).unwrap();
    assert_eq!(get(&c, "tokensExact").as_bool(), Some(false));
    assert!(get(&c, "tokens").as_f64().unwrap() <= 400.0);
    assert!(get(&c, "prompt").as_string().unwrap().contains("Porto"));
}
