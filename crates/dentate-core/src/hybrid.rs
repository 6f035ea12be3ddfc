//! Fusion of ranked lists (dense and lexical) into one ranking.
//!
//! - [`Fusion::Rrf`]: reciprocal-rank fusion, `Σ 1 / (c + rank)` over the
//!   lists an id appears in (rank from 1; Cormack et al. use c = 60).
//! - [`Fusion::Weighted`]: each list's scores min–max normalised to
//!   `[0, 1]` over its own hits, then `w · dense + (1 − w) · lexical`
//!   (an id missing from a list scores 0 there).
//!
//! Both are deterministic: ties go to the smaller id.
//!
//! [`hybrid_search`] is the one call: dense search on any [`Index`] (exact,
//! IVF-PQ) and BM25 on a [`LexicalIndex`] over the same ids, each
//! [`candidate_depth`] deep, optionally filtered (a namespace, a user), then
//! fused.

use crate::error::{Error, Result};
use crate::index::Index;
use crate::lexical::LexicalIndex;
use crate::topk::Hit;
use std::collections::HashMap;

/// How deep each list is retrieved before fusing for a final `k`:
/// `max(4k, 20)`, so an item ranked low in one list and high in the other
/// still meets the fusion.
pub fn candidate_depth(k: usize) -> usize {
    k.saturating_mul(4).max(20)
}

/// Dense search of `vector` on `index` and BM25 search of `text` on
/// `lexical`, fused into the best `k`. With `filter`, only ids it accepts
/// are kept: each list is searched deeper (doubling) until it holds
/// [`candidate_depth`] accepted hits or the index is exhausted.
///
/// Errors: [`Error::ZeroK`], a wrong-dimension or non-finite `vector`, a
/// fusion parameter out of range. An empty index contributes an empty list.
pub fn hybrid_search(
    index: &dyn Index,
    lexical: &LexicalIndex,
    vector: &[f32],
    text: &str,
    k: usize,
    fusion: Fusion,
    filter: Option<&dyn Fn(u64) -> bool>,
) -> Result<Vec<Hit>> {
    if k == 0 {
        return Err(Error::ZeroK);
    }
    if vector.len() != index.dim() {
        return Err(Error::DimensionMismatch {
            expected: index.dim(),
            got: vector.len(),
        });
    }
    crate::vector::check_queries(vector, index.dim(), k)?;
    let want = candidate_depth(k);
    let keep = |hits: Vec<Hit>| -> Vec<Hit> {
        match filter {
            Some(f) => hits.into_iter().filter(|h| f(h.id)).collect(),
            None => hits,
        }
    };
    // Grows the depth until `want` accepted hits or fewer raw hits than asked.
    let deepen = |search: &dyn Fn(usize) -> Result<Vec<Hit>>, total: usize| -> Result<Vec<Hit>> {
        let mut depth = want;
        loop {
            let raw = search(depth)?;
            let exhausted = raw.len() < depth || depth >= total;
            let kept = keep(raw);
            if kept.len() >= want || exhausted {
                return Ok(kept);
            }
            depth = depth.saturating_mul(2);
        }
    };
    let dense = if index.is_empty() {
        Vec::new()
    } else {
        deepen(
            &|d| Ok(index.search(vector, d)?.into_iter().next().unwrap_or_default()),
            index.len(),
        )?
    };
    let lex = if lexical.is_empty() {
        Vec::new()
    } else {
        deepen(&|d| lexical.search(text, d), lexical.len())?
    };
    fuse(&dense, &lex, fusion, k)
}

/// How to fuse a dense and a lexical ranking.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Fusion {
    /// Reciprocal-rank fusion with constant `c`.
    Rrf {
        /// The rank offset (60 in the original paper).
        c: f32,
    },
    /// Normalised weighted sum; `dense_weight` in `[0, 1]`.
    Weighted {
        /// Weight of the dense list (the lexical one gets `1 − w`).
        dense_weight: f32,
    },
}

/// The default fusion of a dense and a BM25 list: min–max-normalised
/// scores, 0.5 dense + 0.5 BM25. Chosen on the **tune** split of
/// `locomo-dev.json` alone (conv-26 and conv-30; RAG, MiniLM; dense weights
/// 0.1 to 0.7, dense only and BM25 only compared at 500 / 1,500 / 3,500
/// tokens; see BENCHMARKS.md), never on the held-out conversations or on
/// any test data.
pub const DEFAULT_FUSION: Fusion = Fusion::Weighted { dense_weight: 0.5 };

impl Default for Fusion {
    fn default() -> Self {
        DEFAULT_FUSION
    }
}

impl Fusion {
    /// Parses `hybrid` (the [`DEFAULT_FUSION`]), `rrf` (c = 60), `rrf:C`
    /// or `weighted:W` (W = dense weight in `[0, 1]`).
    pub fn parse(s: &str) -> Result<Fusion> {
        let bad = || Error::InvalidParameter {
            name: "fusion",
            reason: format!("`{s}` is not hybrid, rrf, rrf:C (C ≥ 0) or weighted:W (W in [0, 1])"),
        };
        let (name, arg) = s.split_once(':').map_or((s, None), |(a, b)| (a, Some(b)));
        let num = |a: &str| a.trim().parse::<f32>().ok().filter(|x| x.is_finite()).ok_or_else(bad);
        match (name.trim(), arg) {
            ("hybrid", None) => Ok(DEFAULT_FUSION),
            ("rrf", None) => Ok(Fusion::Rrf { c: 60.0 }),
            ("rrf", Some(c)) => Some(num(c)?)
                .filter(|c| *c >= 0.0)
                .map(|c| Fusion::Rrf { c })
                .ok_or_else(bad),
            ("weighted", Some(w)) => Some(num(w)?)
                .filter(|w| (0.0..=1.0).contains(w))
                .map(|dense_weight| Fusion::Weighted { dense_weight })
                .ok_or_else(bad),
            _ => Err(bad()),
        }
    }
}

fn normalised(hits: &[Hit]) -> HashMap<u64, f32> {
    let (lo, hi) = hits.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(l, h), x| {
        (l.min(x.score), h.max(x.score))
    });
    let span = hi - lo;
    hits.iter()
        .map(|h| (h.id, if span > 0.0 { (h.score - lo) / span } else { 1.0 }))
        .collect()
}

/// Fuses `dense` and `lexical` (each best first) and keeps the best `k`.
pub fn fuse(dense: &[Hit], lexical: &[Hit], fusion: Fusion, k: usize) -> Result<Vec<Hit>> {
    if k == 0 {
        return Err(Error::ZeroK);
    }
    let mut acc: HashMap<u64, f32> = HashMap::new();
    match fusion {
        Fusion::Rrf { c } => {
            if !(c.is_finite() && c >= 0.0) {
                return Err(Error::param("c", "must be finite and non-negative"));
            }
            for list in [dense, lexical] {
                for (rank, h) in list.iter().enumerate() {
                    *acc.entry(h.id).or_insert(0.0) += 1.0 / (c + rank as f32 + 1.0);
                }
            }
        }
        Fusion::Weighted { dense_weight: w } => {
            if !(w.is_finite() && (0.0..=1.0).contains(&w)) {
                return Err(Error::param("dense_weight", "must be between 0 and 1"));
            }
            for (id, s) in normalised(dense) {
                *acc.entry(id).or_insert(0.0) += w * s;
            }
            for (id, s) in normalised(lexical) {
                *acc.entry(id).or_insert(0.0) += (1.0 - w) * s;
            }
        }
    }
    let mut out: Vec<Hit> = acc.into_iter().map(|(id, score)| Hit { id, score }).collect();
    out.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
    out.truncate(k);
    Ok(out)
}
