//! The hashing embedder.

use dentate_embed::{Embedder, HashingEmbedder};

fn cos(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

#[test]
fn unit_norm_deterministic_and_batch_independent() {
    let e = HashingEmbedder::new(384).unwrap();
    let texts = [
        "The cat sat on the mat.",
        "",
        "!!!",
        "naïve café — 東京 の 夜",
        &"word ".repeat(5000),
    ];
    let v = e.embed(&texts).unwrap();
    assert_eq!(v.len(), texts.len() * 384);
    for row in v.chunks_exact(384) {
        let n: f32 = row.iter().map(|x| x * x).sum();
        assert!((n - 1.0).abs() < 1e-5, "norm² {n}");
        assert!(row.iter().all(|x| x.is_finite()));
    }
    assert_eq!(v, e.embed(&texts).unwrap(), "deterministic");
    // Each text's vector does not depend on its batch.
    for (i, t) in texts.iter().enumerate() {
        assert_eq!(e.embed(&[t]).unwrap(), v[i * 384..(i + 1) * 384].to_vec());
    }
    // Texts with no words share the fixed "empty" direction.
    assert_eq!(v[384..768], v[768..1152]);
    assert!(e.embed(&[]).unwrap().is_empty());
    assert!(HashingEmbedder::new(1).is_err());
    assert_eq!(e.name(), "hash-384");
}

/// A dimension is bounded above too: an embedding is never sized by an
/// unchecked number (`texts × dim` floats per batch).
#[test]
fn dimension_is_bounded() {
    for dim in [dentate_embed::MAX_DIM + 1, usize::MAX / 2, usize::MAX] {
        match HashingEmbedder::new(dim) {
            Err(dentate_embed::EmbedError::Config { name: "dim", reason }) => {
                assert!(reason.contains("too large"), "{reason}")
            }
            other => panic!("dim {dim}: {other:?}"),
        }
    }
    let e = HashingEmbedder::new(dentate_embed::MAX_DIM).unwrap();
    assert_eq!(e.embed(&["the largest allowed"]).unwrap().len(), dentate_embed::MAX_DIM);
}

#[test]
fn shared_words_score_above_unrelated_text() {
    let e = HashingEmbedder::new(384).unwrap();
    let v = e
        .embed(&[
            "Caroline went to the LGBTQ support group on Tuesday.",
            "On Tuesday Caroline attended an LGBTQ support group.",
            "The quarterly revenue of the steel company fell sharply.",
            "Melanie is running a charity race next month.",
            "Melanie runs charity races.",
        ])
        .unwrap();
    let r = |i: usize| &v[i * 384..(i + 1) * 384];
    let related = cos(r(0), r(1));
    let unrelated = cos(r(0), r(2));
    assert!(related > 0.5, "related {related}");
    assert!(unrelated < 0.15, "unrelated {unrelated}");
    // Character n-grams connect inflections ("running"/"runs", "race"/"races").
    assert!(cos(r(3), r(4)) > cos(r(3), r(2)) + 0.2);
    // Case does not matter.
    let a = e.embed(&["HELLO World"]).unwrap();
    let b = e.embed(&["hello world"]).unwrap();
    assert_eq!(a, b);
}

#[test]
fn seeds_give_independent_projections() {
    let a = HashingEmbedder::new(64).unwrap();
    let b = HashingEmbedder::new(64).unwrap().with_seed(99);
    let t = ["a sentence about vectors"];
    let (va, vb) = (a.embed(&t).unwrap(), b.embed(&t).unwrap());
    assert!(cos(&va, &vb).abs() < 0.6);
}
