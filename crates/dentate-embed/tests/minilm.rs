//! all-MiniLM-L6-v2 through candle. Needs the model folder
//! (`dentate model fetch minilm`, which `scripts/test.sh` runs first); a
//! missing model fails these tests, it never skips them.

#![cfg(feature = "minilm")]

use dentate_embed::{Embedder, MiniLm};
use std::sync::OnceLock;

fn model() -> &'static MiniLm {
    static M: OnceLock<MiniLm> = OnceLock::new();
    M.get_or_init(|| {
        let dir = MiniLm::default_dir();
        MiniLm::load(&dir).unwrap_or_else(|e| {
            panic!(
                "MiniLM model not loadable from {} ({e}); run `dentate model fetch minilm`",
                dir.display()
            )
        })
    })
}

fn cos(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Values from an independent float64 numpy implementation of the same
/// model (BERT forward from the safetensors file, HF tokenizer, mean
/// pooling, L2), written for this test and not derived from this crate.
#[test]
fn matches_an_independent_reference_implementation() {
    let cases: [(&str, usize, [f32; 8], f32); 3] = [
        (
            "A man is playing a guitar.",
            9,
            [
                0.021664, -0.004864, -0.009649, -0.063401, -0.167494, 0.004676, 0.0806, -0.024142,
            ],
            0.040264,
        ),
        (
            "Ünïcödé text: 東京で寿司を食べた。",
            15,
            [
                0.012257, 0.059817, 0.071184, -0.016019, -0.133798, -0.008862, 0.065041, 0.009862,
            ],
            -0.055116,
        ),
        (
            "",
            2,
            [
                -0.118838, 0.048299, -0.002548, -0.011011, 0.051951, 0.010292, 0.115433, 0.000701,
            ],
            0.629072,
        ),
    ];
    let m = model();
    let texts: Vec<&str> = cases.iter().map(|c| c.0).collect();
    let v = m.embed(&texts).unwrap();
    let counts = m.token_counts(&texts).unwrap();
    for (i, (text, tokens, first8, sum)) in cases.iter().enumerate() {
        let row = &v[i * 384..(i + 1) * 384];
        assert_eq!(counts[i], *tokens, "{text}");
        for (a, b) in row.iter().zip(first8) {
            assert!((a - b).abs() < 2e-4, "{text}: {a} vs {b}");
        }
        assert!((row.iter().sum::<f32>() - sum).abs() < 2e-3, "{text}");
    }
}

#[test]
fn paraphrases_score_far_above_unrelated_pairs() {
    let v = model()
        .embed(&[
            "How do I reset my password?",
            "What are the steps to change my login password?",
            "The volcano erupted and covered the village in ash.",
            "A cat is sleeping on the sofa.",
            "A kitten naps on the couch.",
        ])
        .unwrap();
    let r = |i: usize| &v[i * 384..(i + 1) * 384];
    let para = cos(r(0), r(1));
    let unrelated = cos(r(0), r(2));
    assert!(
        para > 0.6 && unrelated < 0.2 && para - unrelated > 0.5,
        "{para} vs {unrelated}"
    );
    // No shared words at all, yet close: what the hashing embedder cannot do.
    assert!(cos(r(3), r(4)) > 0.6);
}

#[test]
fn batching_and_bucketing_do_not_change_results() {
    let m = model();
    let texts = [
        "short one",
        "A considerably longer sentence that will land in a different length bucket than the short one does.",
        "mid length sentence here",
        "",
        "naïve façade — coöperate",
    ];
    let batch = m.embed(&texts).unwrap();
    for (i, t) in texts.iter().enumerate() {
        let single = m.embed(&[t]).unwrap();
        for (a, b) in single.iter().zip(&batch[i * 384..(i + 1) * 384]) {
            assert!((a - b).abs() < 1e-5, "text {i}: {a} vs {b}");
        }
    }
    assert_eq!(batch, m.embed(&texts).unwrap(), "deterministic");
    for row in batch.chunks_exact(384) {
        let n: f32 = row.iter().map(|x| x * x).sum();
        assert!((n - 1.0).abs() < 1e-5);
    }
    assert!(m.embed(&[]).unwrap().is_empty());
}

#[test]
fn over_long_inputs_are_truncated_at_256_tokens() {
    let m = model();
    let long = "memory ".repeat(2000);
    assert_eq!(m.token_counts(&[&long]).unwrap(), vec![256]);
    // Past 256 tokens nothing counts: 2,000 words embed exactly like their
    // first 254 (plus [CLS] and [SEP]), and unlike 100 of them.
    let prefix = "memory ".repeat(254);
    let shorter = "memory ".repeat(100);
    let v = m.embed(&[&long, &prefix, &shorter]).unwrap();
    assert!(v.iter().all(|x| x.is_finite()));
    for (a, b) in v[..384].iter().zip(&v[384..768]) {
        assert!((a - b).abs() < 1e-5);
    }
    assert!(v[..384].iter().zip(&v[768..]).any(|(a, b)| (a - b).abs() > 1e-3));
}

#[test]
fn a_missing_folder_is_a_clear_error() {
    let err = MiniLm::load(std::path::Path::new("/nonexistent/minilm")).unwrap_err();
    let msg = err.to_string();
    assert!(
        msg.contains("config.json is missing") && msg.contains("dentate model fetch minilm"),
        "{msg}"
    );
}
