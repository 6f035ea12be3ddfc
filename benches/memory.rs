//! Memory-layer retrieval at 50,000 stored items: latency per turn (query
//! embedding with the hashing embedder + dense vector search + provenance
//! lookup in SQLite) for the RAG and HEMA pipelines, with the automatic
//! IVF-OPQ-PQ index against the exact index in the same run; and index
//! memory per item (printed). The RAG memory is also searched with the BM25
//! and hybrid retrievers, and with hybrid plus the context ranking (the
//! default `Memory::retrieve`: a list twice as deep re-ordered by session
//! and neighbour scores, `DEFAULT_CONTEXT`; every other case runs with the
//! ranking off, so it measures the index), and a bare `LexicalIndex` over
//! the same turns measures BM25 search alone (build time and bytes per
//! document printed).
//!
//! `cargo bench --bench memory` (HEMA reports 14–22 ms per turn and 1.2 GB
//! for 50K vectors, with a sentence-transformer on an A100);
//! `RAYON_NUM_THREADS=1` for one core. `DENTATE_BENCH_EMBEDDER=minilm`
//! embeds turns and queries with all-MiniLM-L6-v2 instead (fetched with
//! `dentate model fetch minilm`; the exact-index baselines are skipped, as
//! ingesting with MiniLM is slow), and `DENTATE_BENCH_TURNS=N` sets the
//! number of turns. The query embedding alone is measured too
//! (`embed_query`), so each retrieval figure can be split into embedding
//! and search + lookup.

use criterion::{Criterion, criterion_group, criterion_main};
use dentate_core::LexicalIndex;
use dentate_embed::{Embedder, HashingEmbedder, MiniLm};
use dentate_memory::{
    ContextConfig, DEFAULT_CONTEXT, DEFAULT_FUSION, HemaConfig, Memory, NewMessage, PipelineKind, Retriever,
    VectorMemoryConfig,
};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Duration;

/// Turns ingested: `DENTATE_BENCH_TURNS` if set, else 50,000 under `cargo
/// bench`; 12,000 (still past the IVF switch) when `cargo test --benches`
/// runs each benchmark once.
fn n_turns() -> usize {
    if let Some(n) = std::env::var("DENTATE_BENCH_TURNS").ok().and_then(|v| v.parse().ok()) {
        n
    } else if std::env::args().any(|a| a == "--bench") {
        50_000
    } else {
        12_000
    }
}

/// `n` synthetic chat turns from a seeded generator: varied, distinct.
fn turns(n: usize) -> Vec<NewMessage> {
    const WHO: [&str; 4] = ["Ann", "Bob", "Caro", "Dev"];
    const VERB: [&str; 8] = [
        "visited", "bought", "painted", "repaired", "cooked", "found", "sold", "planned",
    ];
    const ADJ: [&str; 8] = ["old", "blue", "tiny", "noisy", "wooden", "shiny", "rare", "broken"];
    const NOUN: [&str; 12] = [
        "bicycle", "garden", "cello", "lamp", "boat", "novel", "kettle", "camera", "tent", "piano", "map", "clock",
    ];
    const PLACE: [&str; 10] = [
        "Lisbon", "Oslo", "Porto", "Kyoto", "Lima", "Dakar", "Quebec", "Hanoi", "Cork", "Riga",
    ];
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = |m: usize| {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        (x % m as u64) as usize
    };
    (0..n)
        .map(|i| NewMessage {
            session: format!("s{}", i / 20),
            speaker: WHO[i % 4].into(),
            text: format!(
                "I {} the {} {} in {} on day {} with friend number {}.",
                VERB[next(8)],
                ADJ[next(8)],
                NOUN[next(12)],
                PLACE[next(10)],
                next(365),
                next(1000)
            ),
            said_at: Some(1_700_000_000 + i as i64 * 60),
            source_ref: Some(format!("T{i}")),
        })
        .collect()
}

/// Whether `DENTATE_BENCH_EMBEDDER=minilm` asks for MiniLM.
fn minilm() -> bool {
    std::env::var("DENTATE_BENCH_EMBEDDER").is_ok_and(|v| v == "minilm")
}

/// The embedder of the run: the hashing embedder (384-d), or MiniLM.
fn embedder() -> Arc<dyn Embedder> {
    if minilm() {
        Arc::new(MiniLm::load(&MiniLm::default_dir()).expect("MiniLM: run `dentate model fetch minilm` first"))
    } else {
        Arc::new(HashingEmbedder::new(384).expect("dimension"))
    }
}

/// A memory holding `n` ingested turns, and its live item count.
fn build(kind: PipelineKind, dir: &std::path::Path, n: usize, e: Arc<dyn Embedder>) -> (Memory, usize) {
    let mut m = Memory::open(dir, kind, e, None).expect("open");
    // Dense retrieval without the context ranking: the vector index is
    // what this bench measures (the ranking has a case of its own).
    m.set_retriever(Retriever::Dense);
    m.set_context_ranking(ContextConfig::off());
    let r = m.ingest("u", &turns(n)).expect("ingest");
    (m, r.live)
}

fn bench(c: &mut Criterion) {
    let queries: Vec<String> = (0..64)
        .map(|i| format!("When did I repair the wooden clock in Riga, day {}?", i * 5))
        .collect();
    let exact = VectorMemoryConfig {
        switch_at: usize::MAX,
        ..Default::default()
    };
    let hema_exact = HemaConfig {
        vectors: exact.clone(),
        ..Default::default()
    };
    let mut setups = vec![
        ("rag/ivfpq", PipelineKind::Rag(VectorMemoryConfig::default().into())),
        ("rag/exact", PipelineKind::Rag(exact.into())),
        ("hema/ivfpq", PipelineKind::Hema(HemaConfig::default())),
        ("hema/exact", PipelineKind::Hema(hema_exact)),
    ];
    if minilm() {
        setups.retain(|(name, _)| name.ends_with("ivfpq"));
    }
    let e = embedder();
    let group = match minilm() {
        true => format!("memory_retrieve_minilm_{}k", n_turns() / 1000),
        false => format!("memory_retrieve_{}k", n_turns() / 1000),
    };
    let mut g = c.benchmark_group(group);
    g.sample_size(30).measurement_time(Duration::from_secs(4));
    // The query embedding alone: the part of every retrieval below that is
    // not search or lookup.
    let mut i = 0;
    g.bench_function(format!("embed_query/{}", e.name()), |b| {
        b.iter(|| {
            i = (i + 1) % queries.len();
            black_box(e.embed(&[queries[i].as_str()]).expect("embed"))
        })
    });
    for (name, kind) in setups {
        let dir = tempfile::tempdir().expect("tempdir");
        let t = std::time::Instant::now();
        let n = n_turns();
        let (mut m, live) = build(kind, dir.path(), n, e.clone());
        let bytes = m.memory_bytes("u");
        eprintln!(
            "{name}: {n} turns ingested in {:.1} s, {live} live items; index {:.1} MB = {:.0} bytes/live item; \
             store {:.1} MB on disk",
            t.elapsed().as_secs_f64(),
            bytes as f64 / 1e6,
            bytes as f64 / live.max(1) as f64,
            std::fs::metadata(dir.path().join("memory.db")).map_or(0, |m| m.len()) as f64 / 1e6
        );
        let off = ContextConfig::off();
        let retrievers: &[(&str, Retriever, ContextConfig)] = if name == "rag/ivfpq" {
            &[
                ("", Retriever::Dense, off),
                ("/bm25", Retriever::Bm25, off),
                ("/hybrid", Retriever::Hybrid(DEFAULT_FUSION), off),
                ("/hybrid+context", Retriever::Hybrid(DEFAULT_FUSION), DEFAULT_CONTEXT),
                // The same without the neighbour expansion: what its store
                // lookups cost.
                (
                    "/hybrid+context-noexpand",
                    Retriever::Hybrid(DEFAULT_FUSION),
                    ContextConfig {
                        expand: 0,
                        ..DEFAULT_CONTEXT
                    },
                ),
            ]
        } else {
            &[("", Retriever::Dense, off)]
        };
        for &(suffix, retriever, context) in retrievers {
            m.set_retriever(retriever);
            m.set_context_ranking(context);
            let mut i = 0;
            g.bench_function(format!("{name}{suffix}"), |b| {
                b.iter(|| {
                    i = (i + 1) % queries.len();
                    black_box(m.retrieve("u", &queries[i], 5).expect("retrieve"))
                })
            });
        }
    }
    g.finish();

    // BM25 alone over the same turn texts.
    let n = n_turns();
    let docs: Vec<String> = turns(n)
        .into_iter()
        .map(|t| format!("{}: {}", t.speaker, t.text))
        .collect();
    let refs: Vec<&str> = docs.iter().map(String::as_str).collect();
    let ids: Vec<u64> = (0..n as u64).collect();
    let t = std::time::Instant::now();
    let mut lex = LexicalIndex::new();
    lex.add(&ids, &refs).expect("lexical add");
    let build_s = t.elapsed().as_secs_f64();
    let file = lex.to_bytes().len();
    eprintln!(
        "lexical: {n} turns indexed in {build_s:.2} s ({:.0} docs/s), {} terms; {:.0} heap bytes/doc, {:.0} file bytes/doc",
        n as f64 / build_s,
        lex.vocabulary_len(),
        lex.memory_bytes() as f64 / n as f64,
        file as f64 / n as f64
    );
    let mut g = c.benchmark_group(format!("lexical_{}k", n / 1000));
    g.sample_size(50).measurement_time(Duration::from_secs(3));
    let mut i = 0;
    g.bench_function("bm25_top5", |b| {
        b.iter(|| {
            i = (i + 1) % queries.len();
            black_box(lex.search(&queries[i], 5).expect("search"))
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
