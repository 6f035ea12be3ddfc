//! Fusion of ranked lists (dense and lexical) into one ranking.
//!
//! - [`Fusion::Rrf`]: reciprocal-rank fusion, `Σ 1 / (c + rank)` over the
//!   lists an id appears in (rank from 1; Cormack et al. use c = 60).
//! - [`Fusion::Weighted`]: each list's scores min–max normalised to
//!   `[0, 1]` over its own hits, then `w · dense + (1 − w) · lexical`
//!   (an id missing from a list scores 0 there).
//!
//! Both are deterministic: ties go to the smaller id.

use crate::error::{Error, Result};
use crate::topk::Hit;
use std::collections::HashMap;

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
