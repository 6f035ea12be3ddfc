//! Bounded top-k selection with deterministic tie-breaking.

use std::cmp::Ordering;
use std::collections::BinaryHeap;

/// Most candidates a selector reserves room for up front. A selector for a
/// larger `k` grows as candidates arrive, so its memory follows what it is
/// offered, never the `k` it was asked for (callers clamp `k` to what can
/// exist, but a selector never trusts that: `k = usize::MAX` is safe).
const PREALLOC: usize = 1 << 14;

/// One search result: a caller id and its cosine similarity (or estimate).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Hit {
    /// The id given when the vector was added.
    pub id: u64,
    /// Similarity; higher is closer.
    pub score: f32,
}

/// A scored candidate with its internal row (used between scan and re-rank).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Cand {
    /// Score (higher is better).
    pub score: f32,
    /// Caller id; breaks ties (smaller wins).
    pub id: u64,
    /// Internal row of the vector.
    pub row: u32,
}

impl Cand {
    /// True when `self` ranks strictly before `other`: higher score, or the
    /// same score and a smaller id.
    #[inline]
    pub fn better_than(&self, other: &Cand) -> bool {
        match self.score.total_cmp(&other.score) {
            Ordering::Greater => true,
            Ordering::Less => false,
            Ordering::Equal => self.id < other.id,
        }
    }

    /// The public part.
    pub fn hit(&self) -> Hit {
        Hit {
            id: self.id,
            score: self.score,
        }
    }
}

/// Heap order: the *worst* candidate is the maximum, so it sits on top.
#[derive(Debug, Clone, Copy)]
struct Worst(Cand);

impl PartialEq for Worst {
    fn eq(&self, o: &Self) -> bool {
        self.cmp(o) == Ordering::Equal
    }
}
impl Eq for Worst {}
impl PartialOrd for Worst {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}
impl Ord for Worst {
    fn cmp(&self, o: &Self) -> Ordering {
        // Lower score = "greater" (worse); on equal scores, larger id is worse.
        o.0.score.total_cmp(&self.0.score).then(self.0.id.cmp(&o.0.id))
    }
}

/// Keeps the best `k` candidates seen so far.
#[derive(Debug, Clone)]
pub struct TopK {
    k: usize,
    heap: BinaryHeap<Worst>,
}

impl TopK {
    /// An empty selector for `k` results.
    pub fn new(k: usize) -> Self {
        TopK {
            k,
            heap: BinaryHeap::with_capacity(k.saturating_add(1).min(PREALLOC)),
        }
    }

    /// Scores below this cannot enter (scores equal to it may, on a smaller id).
    #[inline]
    pub fn threshold(&self) -> f32 {
        if self.heap.len() < self.k {
            f32::NEG_INFINITY
        } else {
            self.heap.peek().map_or(f32::NEG_INFINITY, |w| w.0.score)
        }
    }

    /// Offers a candidate.
    #[inline]
    pub fn push(&mut self, c: Cand) {
        if self.k == 0 {
            return;
        }
        if self.heap.len() < self.k {
            self.heap.push(Worst(c));
        } else if let Some(mut top) = self.heap.peek_mut()
            && c.better_than(&top.0)
        {
            *top = Worst(c);
        }
    }

    /// Offers every candidate of another selector.
    pub fn merge(&mut self, other: TopK) {
        for w in other.heap {
            self.push(w.0);
        }
    }

    /// Number held.
    pub fn len(&self) -> usize {
        self.heap.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.heap.is_empty()
    }

    /// The candidates, best first.
    pub fn into_sorted(self) -> Vec<Cand> {
        let mut v: Vec<Cand> = self.heap.into_iter().map(|w| w.0).collect();
        v.sort_by(|a, b| b.score.total_cmp(&a.score).then(a.id.cmp(&b.id)));
        v
    }
}

/// The best `k` candidates, like [`TopK`], with amortised O(1) insertion
/// for scans that offer many candidates: those at or above the threshold go
/// into a buffer; when it holds `2k + 16`, a selection keeps the best `k`
/// and the threshold rises to the `k`-th score. The result is exactly
/// [`TopK`]'s (best `k` by score descending, then id ascending).
#[derive(Debug, Clone)]
pub struct Reservoir {
    k: usize,
    /// Each candidate as one [`pack`]ed integer key.
    buf: Vec<u128>,
    thr: f32,
}

/// A candidate as one integer, ascending = better, that holds it whole:
/// the score's bits mapped so that unsigned order is `f32::total_cmp`
/// order, inverted (higher score first), then the id (smaller first), then
/// the row. Integer selections and sorts are what make a [`Reservoir`]
/// cheap; the key needs no recomputing at each comparison.
#[inline]
fn pack(c: &Cand) -> u128 {
    let b = c.score.to_bits();
    let ordered = if b >> 31 == 1 { !b } else { b | 0x8000_0000 };
    (u128::from(!ordered) << 96) | (u128::from(c.id) << 32) | u128::from(c.row)
}

/// The candidate of a [`pack`]ed key.
#[inline]
fn unpack(key: u128) -> Cand {
    let ordered = !((key >> 96) as u32);
    let bits = if ordered >> 31 == 1 {
        ordered & 0x7fff_ffff
    } else {
        !ordered
    };
    Cand {
        score: f32::from_bits(bits),
        id: (key >> 32) as u64,
        row: key as u32,
    }
}

impl Reservoir {
    /// An empty reservoir for `k` results.
    pub fn new(k: usize) -> Self {
        Reservoir {
            k,
            buf: Vec::with_capacity(Self::cap(k).min(PREALLOC)),
            thr: f32::NEG_INFINITY,
        }
    }

    fn cap(k: usize) -> usize {
        k.saturating_mul(2).saturating_add(16)
    }

    /// Scores below this cannot enter (scores equal to it may, on a smaller id).
    #[inline]
    pub fn threshold(&self) -> f32 {
        self.thr
    }

    /// Offers a candidate.
    #[inline]
    pub fn push(&mut self, c: Cand) {
        if self.k == 0 || c.score < self.thr {
            return;
        }
        self.buf.push(pack(&c));
        if self.buf.len() >= Self::cap(self.k) {
            self.shrink();
        }
    }

    /// Keeps the best `k` and raises the threshold to the `k`-th score.
    fn shrink(&mut self) {
        if self.buf.len() > self.k {
            self.buf.select_nth_unstable(self.k - 1);
            self.buf.truncate(self.k);
            self.thr = unpack(self.buf[self.k - 1]).score;
        }
    }

    /// Offers every candidate of another reservoir.
    pub fn merge(&mut self, other: Reservoir) {
        for c in other.buf {
            self.push(unpack(c));
        }
    }

    /// Number held (up to `2k + 16` before the final cut).
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The candidates, best first.
    pub fn into_sorted(mut self) -> Vec<Cand> {
        self.shrink();
        self.buf.sort_unstable();
        self.buf.into_iter().map(unpack).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservoir_equals_topk() {
        let mut r = crate::rng::Rng::new(8);
        for k in [0usize, 1, 3, 10, 40] {
            let mut a = TopK::new(k);
            let mut b = Reservoir::new(k);
            for i in 0..2000u64 {
                // Few distinct scores: many ties, resolved by id.
                let c = Cand {
                    score: (r.next_u64() % 50) as f32 + (i as f32) * 1e-3 * ((i % 3 == 0) as u32 as f32),
                    id: (i * 7919) % 10_007,
                    row: i as u32,
                };
                a.push(c);
                b.push(c);
                assert!(b.threshold() <= a.threshold() || a.len() < k);
            }
            assert_eq!(a.into_sorted(), b.into_sorted(), "k = {k}");
        }
    }

    #[test]
    fn packed_keys_hold_the_candidate_and_its_order() {
        let scores = [
            f32::NEG_INFINITY,
            -1e30,
            -1.5,
            -0.0,
            0.0,
            1e-40,
            0.25,
            3.0e38,
            f32::INFINITY,
            f32::NAN,
            -f32::NAN,
        ];
        let cands: Vec<Cand> = scores
            .iter()
            .enumerate()
            .flat_map(|(i, &score)| {
                [0u64, 7, u64::MAX].map(|id| Cand {
                    score,
                    id,
                    row: (i as u32).wrapping_mul(0x9e37_79b9),
                })
            })
            .collect();
        for a in &cands {
            let back = unpack(pack(a));
            assert_eq!(
                (back.score.to_bits(), back.id, back.row),
                (a.score.to_bits(), a.id, a.row)
            );
            for b in &cands {
                if a.score.total_cmp(&b.score) != Ordering::Equal || a.id != b.id {
                    assert_eq!(pack(a) < pack(b), a.better_than(b), "{a:?} {b:?}");
                }
            }
        }
    }

    #[test]
    fn huge_k_reserves_little_and_keeps_everything() {
        // `k` far above what is offered: no allocation sized by `k`, and
        // every candidate comes back, best first.
        for k in [usize::MAX, usize::MAX / 2 + 1, 1 << 40] {
            let mut a = TopK::new(k);
            let mut b = Reservoir::new(k);
            for i in 0..100u64 {
                let c = Cand {
                    score: (i % 7) as f32,
                    id: i,
                    row: i as u32,
                };
                a.push(c);
                b.push(c);
            }
            let (a, b) = (a.into_sorted(), b.into_sorted());
            assert_eq!(a.len(), 100);
            assert_eq!(a, b);
            assert!(a.windows(2).all(|w| w[0].better_than(&w[1])));
        }
    }

    #[test]
    fn keeps_best_with_id_tiebreak() {
        let mut t = TopK::new(3);
        for (i, s) in [0.5, 0.9, 0.5, 0.1, 0.9, 0.5].iter().enumerate() {
            t.push(Cand {
                score: *s,
                id: 10 - i as u64,
                row: i as u32,
            });
        }
        let v = t.into_sorted();
        let got: Vec<(f32, u64)> = v.iter().map(|c| (c.score, c.id)).collect();
        // 0.9 ids {9, 6}, then 0.5 ids {10, 8, 5} -> smallest id 5.
        assert_eq!(got, vec![(0.9, 6), (0.9, 9), (0.5, 5)]);
    }

    #[test]
    fn threshold_tracks_kth() {
        let mut t = TopK::new(2);
        assert_eq!(t.threshold(), f32::NEG_INFINITY);
        t.push(Cand {
            score: 1.0,
            id: 1,
            row: 0,
        });
        t.push(Cand {
            score: 2.0,
            id: 2,
            row: 0,
        });
        assert_eq!(t.threshold(), 1.0);
        t.push(Cand {
            score: 3.0,
            id: 3,
            row: 0,
        });
        assert_eq!(t.threshold(), 2.0);
    }
}
