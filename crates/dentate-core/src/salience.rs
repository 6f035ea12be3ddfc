//! Salience-decay scoring for semantic forgetting (HEMA §3.4).
//!
//! HEMA prints the weight of vector *i* at turn *t* as
//! `w = λ·e^{−γ(t − added)} + β(1 − δᵢ)` where `δᵢ = 1` when the vector was
//! retrieved within the last `window` turns, and calls β a *"bonus for recent
//! retrievals"*. The printed form gives the bonus to vectors that were **not**
//! retrieved, contradicting its own description. Dentate defaults to the
//! stated meaning, [`BonusForm::Retrieved`] (`β·δᵢ`), and keeps the literal
//! formula as [`BonusForm::Literal`].

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Which vectors get the β bonus.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum BonusForm {
    /// `β·δᵢ`: recently retrieved vectors are kept (the paper's stated intent).
    #[default]
    Retrieved,
    /// `β·(1 − δᵢ)`: the formula exactly as printed in the paper.
    Literal,
}

/// Parameters of the salience weight.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SalienceParams {
    /// λ, freshness weight (default 1.0).
    pub lambda: f32,
    /// γ, decay rate per turn (default 0.002).
    pub gamma: f32,
    /// β, retrieval bonus (default 0.5).
    pub beta: f32,
    /// Turns within which a retrieval counts as recent (default 100).
    pub window: u64,
    /// Which vectors get the bonus.
    pub bonus: BonusForm,
}

impl Default for SalienceParams {
    fn default() -> Self {
        SalienceParams {
            lambda: 1.0,
            gamma: 0.002,
            beta: 0.5,
            window: 100,
            bonus: BonusForm::Retrieved,
        }
    }
}

/// Sentinel for "never retrieved".
pub const NEVER: u64 = u64::MAX;

impl SalienceParams {
    /// The salience of one vector at turn `now`.
    #[inline]
    pub fn score(&self, now: u64, added: u64, last_retrieved: u64) -> f32 {
        let age = now.saturating_sub(added) as f32;
        let recent = last_retrieved != NEVER && now.saturating_sub(last_retrieved) <= self.window;
        let delta = match self.bonus {
            BonusForm::Retrieved => recent,
            BonusForm::Literal => !recent,
        };
        self.lambda * (-self.gamma * age).exp() + if delta { self.beta } else { 0.0 }
    }
}

/// Per-row bookkeeping: the turn each row was added and its retrievals.
///
/// Retrievals are recorded through `&self` with atomics, so concurrent
/// searches can record while holding only a read lock.
#[derive(Debug, Default)]
pub struct SalienceLog {
    added: Vec<u64>,
    last: Vec<AtomicU64>,
    count: Vec<AtomicU32>,
}

impl Clone for SalienceLog {
    fn clone(&self) -> Self {
        SalienceLog {
            added: self.added.clone(),
            last: self
                .last
                .iter()
                .map(|a| AtomicU64::new(a.load(Ordering::Relaxed)))
                .collect(),
            count: self
                .count
                .iter()
                .map(|a| AtomicU32::new(a.load(Ordering::Relaxed)))
                .collect(),
        }
    }
}

impl SalienceLog {
    /// Appends a row added at `turn`.
    pub fn push(&mut self, turn: u64) {
        self.added.push(turn);
        self.last.push(AtomicU64::new(NEVER));
        self.count.push(AtomicU32::new(0));
    }
    /// Restores a row (file reader).
    pub(crate) fn push_raw(&mut self, added: u64, last: u64, count: u32) {
        self.added.push(added);
        self.last.push(AtomicU64::new(last));
        self.count.push(AtomicU32::new(count));
    }
    /// Records that `row` was retrieved at `turn`.
    pub fn record(&self, row: usize, turn: u64) {
        if let (Some(l), Some(c)) = (self.last.get(row), self.count.get(row)) {
            // NEVER is u64::MAX, which `fetch_max` alone would never leave:
            // the first retrieval replaces it, later ones keep the maximum.
            let _ = l.compare_exchange(NEVER, turn, Ordering::Relaxed, Ordering::Relaxed);
            l.fetch_max(turn, Ordering::Relaxed);
            c.fetch_add(1, Ordering::Relaxed);
        }
    }
    /// Turn each row was added.
    pub fn added(&self) -> &[u64] {
        &self.added
    }
    /// Last retrieval turn of each row ([`NEVER`] if none).
    pub fn last_retrieved(&self) -> Vec<u64> {
        self.last.iter().map(|a| a.load(Ordering::Relaxed)).collect()
    }
    /// Retrieval count of `row`.
    pub fn retrievals(&self, row: usize) -> u32 {
        self.count.get(row).map_or(0, |c| c.load(Ordering::Relaxed))
    }
    /// Keeps only rows for which `keep(row)` holds.
    pub fn retain_rows(&mut self, keep: impl Fn(usize) -> bool) {
        let mut next = SalienceLog::default();
        for i in 0..self.added.len() {
            if keep(i) {
                next.push_raw(
                    self.added[i],
                    self.last[i].load(Ordering::Relaxed),
                    self.count[i].load(Ordering::Relaxed),
                );
            }
        }
        *self = next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bonus_forms() {
        let p = SalienceParams::default();
        // Added at 0, now 100: decay e^{-0.2}.
        let fresh = (-0.2f32).exp();
        assert!((p.score(100, 0, NEVER) - fresh).abs() < 1e-6);
        assert!((p.score(100, 0, 50) - (fresh + 0.5)).abs() < 1e-6);
        // Retrieval older than the window gives no bonus.
        assert!((p.score(300, 0, 150) - (-0.6f32).exp()).abs() < 1e-6);
        let lit = SalienceParams {
            bonus: BonusForm::Literal,
            ..p
        };
        assert!((lit.score(100, 0, NEVER) - (fresh + 0.5)).abs() < 1e-6);
        assert!((lit.score(100, 0, 50) - fresh).abs() < 1e-6);
    }

    #[test]
    fn record_keeps_latest_turn() {
        let mut log = SalienceLog::default();
        log.push(0);
        log.push(1);
        log.record(0, 7);
        log.record(0, 3);
        log.record(0, 9);
        assert_eq!(log.last_retrieved(), vec![9, NEVER]);
        assert_eq!(log.retrievals(0), 3);
        log.record(5, 1); // out of range: ignored
    }
}
