//! Pruning: salience and the lowest-scored rows (`shaders/select.wgsl`,
//! `dentate-gpu/src/select.rs` on the GPU).

use crate::salience::SalienceParams;
use crate::topk::{Cand, TopK};
use crate::vector::Bitset;
use rayon::prelude::*;

/// [`crate::Compute::salience`].
pub(super) fn salience(added: &[u64], last_retrieved: &[u64], now: u64, params: &SalienceParams) -> Vec<f32> {
    added
        .par_iter()
        .zip(last_retrieved.par_iter())
        .map(|(&a, &l)| params.score(now, a, l))
        .collect()
}

/// [`crate::Compute::lowest`].
pub(super) fn lowest(scores: &[f32], ids: &[u64], alive: &Bitset, count: usize) -> Vec<u32> {
    // The lowest `count` = the top `count` of the negated scores.
    let mut heap = TopK::new(count.min(scores.len()));
    for (row, (&s, &id)) in scores.iter().zip(ids).enumerate() {
        if alive.get(row) {
            heap.push(Cand {
                score: -s,
                id,
                row: row as u32,
            });
        }
    }
    heap.into_sorted().into_iter().map(|c| c.row).collect()
}
