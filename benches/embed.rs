//! Embedding speed: sentences per second for short (≤ 20 tokens) and long
//! (≥ 100 tokens) texts, MiniLM and the hashing embedder.
//!
//! `cargo bench --bench embed` (needs `dentate model fetch minilm`).

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use dentate_embed::{Embedder, HashingEmbedder, MiniLm};
use std::hint::black_box;
use std::time::Duration;

/// Deterministic English-like sentences of about `words` words.
fn sentences(n: usize, words: usize) -> Vec<String> {
    const VOCAB: [&str; 24] = [
        "memory",
        "agent",
        "retrieves",
        "the",
        "vector",
        "index",
        "quickly",
        "when",
        "a",
        "user",
        "asks",
        "about",
        "yesterday",
        "meeting",
        "notes",
        "and",
        "summaries",
        "of",
        "long",
        "conversations",
        "with",
        "friends",
        "at",
        "work",
    ];
    let mut x = 12345u64;
    (0..n)
        .map(|_| {
            let mut s = String::new();
            for w in 0..words {
                x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                if w > 0 {
                    s.push(' ');
                }
                s.push_str(VOCAB[(x >> 33) as usize % VOCAB.len()]);
            }
            s.push('.');
            s
        })
        .collect()
}

fn embed_speed(c: &mut Criterion) {
    let minilm = MiniLm::load(&MiniLm::default_dir()).expect("MiniLM model (run `dentate model fetch minilm`)");
    let hash = HashingEmbedder::new(384).unwrap();
    let short = sentences(256, 9);
    let long = sentences(64, 110);
    let short_t = minilm
        .token_counts(&short.iter().map(String::as_str).collect::<Vec<_>>())
        .unwrap();
    let long_t = minilm
        .token_counts(&long.iter().map(String::as_str).collect::<Vec<_>>())
        .unwrap();
    assert!(short_t.iter().all(|&t| t <= 20), "short texts must be ≤ 20 tokens");
    assert!(long_t.iter().all(|&t| t >= 100), "long texts must be ≥ 100 tokens");
    let mut g = c.benchmark_group("embed");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    for (label, texts) in [("short_le20tok", &short), ("long_ge100tok", &long)] {
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        g.throughput(Throughput::Elements(refs.len() as u64));
        g.bench_function(format!("minilm/{label}"), |b| {
            b.iter(|| black_box(minilm.embed(black_box(&refs)).unwrap()))
        });
        g.bench_function(format!("hash/{label}"), |b| {
            b.iter(|| black_box(hash.embed(black_box(&refs)).unwrap()))
        });
    }
    // One short query at a time: what a memory search pays before its index.
    let mut i = 0;
    g.throughput(Throughput::Elements(1));
    g.bench_function("minilm/one_short", |b| {
        b.iter(|| {
            i = (i + 1) % short.len();
            black_box(minilm.embed(black_box(&[short[i].as_str()])).unwrap())
        })
    });
    g.finish();
}

criterion_group!(benches, embed_speed);
criterion_main!(benches);
