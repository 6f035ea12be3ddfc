//! Row bookkeeping shared by every index: caller ids, the id → row map,
//! tombstones (the alive bitset), salience logs and the turn clock.
//!
//! Rows are append-only between compactions. Removing an id clears its
//! alive bit (O(1)); scans skip dead rows; `compact` drops them and bumps
//! the epoch so backend caches know the rows moved.

use crate::compute::Compute;
use crate::error::{Error, Result};
use crate::io::{Reader, Writer};
use crate::salience::{SalienceLog, SalienceParams};
use crate::vector::Bitset;
use crate::views::new_uid;
use std::collections::HashMap;

/// The entries of `v` whose row survives a compaction (`map[row] !=
/// u32::MAX`), in order.
pub(crate) fn keep_mapped<T: Copy>(v: &[T], map: &[u32]) -> Vec<T> {
    v.iter()
        .zip(map)
        .filter(|(_, m)| **m != u32::MAX)
        .map(|(x, _)| *x)
        .collect()
}

/// Ids, tombstones and salience of an index's rows.
#[derive(Debug)]
pub(crate) struct RowTable {
    pub ids: Vec<u64>,
    pos: HashMap<u64, u32>,
    pub alive: Bitset,
    pub salience: SalienceLog,
    /// The current turn: new rows are stamped with it.
    pub turn: u64,
    pub uid: u64,
    pub epoch: u64,
}

impl Default for RowTable {
    fn default() -> Self {
        RowTable {
            ids: Vec::new(),
            pos: HashMap::new(),
            alive: Bitset::new(),
            salience: SalienceLog::default(),
            turn: 0,
            uid: new_uid(),
            epoch: 0,
        }
    }
}

/// A clone is a new storage: it gets its own `uid`, so a backend cache of
/// the original is never taken for the copy once the two diverge.
impl Clone for RowTable {
    fn clone(&self) -> Self {
        RowTable {
            ids: self.ids.clone(),
            pos: self.pos.clone(),
            alive: self.alive.clone(),
            salience: self.salience.clone(),
            turn: self.turn,
            uid: new_uid(),
            epoch: 0,
        }
    }
}

impl RowTable {
    /// Live rows.
    pub fn live(&self) -> usize {
        self.pos.len()
    }
    /// All rows, dead included.
    pub fn total(&self) -> usize {
        self.ids.len()
    }
    /// Checks that `extra` more rows stay addressable by `u32`.
    pub fn reserve(&self, extra: usize) -> Result<()> {
        if self.ids.len() + extra > u32::MAX as usize {
            return Err(Error::Capacity(format!(
                "{} rows + {extra} exceeds 2^32 - 1; compact or shard the index",
                self.ids.len()
            )));
        }
        Ok(())
    }
    /// Appends a row for `id`, tombstoning the row it had before (update).
    pub fn push(&mut self, id: u64) -> u32 {
        let row = self.ids.len() as u32;
        if let Some(old) = self.pos.insert(id, row) {
            self.alive.set(old as usize, false);
        }
        self.ids.push(id);
        self.alive.push(true);
        self.salience.push(self.turn);
        row
    }
    /// Tombstones `id`; false when it was not present.
    pub fn remove(&mut self, id: u64) -> bool {
        match self.pos.remove(&id) {
            Some(row) => {
                self.alive.set(row as usize, false);
                true
            }
            None => false,
        }
    }
    /// Row of a live id.
    pub fn row_of(&self, id: u64) -> Option<u32> {
        self.pos.get(&id).copied()
    }
    /// Records retrievals of live ids at `turn`.
    pub fn record(&self, ids: &[u64], turn: u64) {
        for id in ids {
            if let Some(&row) = self.pos.get(id) {
                self.salience.record(row as usize, turn);
            }
        }
    }
    /// Removes the `ceil(fraction × live)` least salient live rows; returns their ids.
    pub fn prune_lowest(&mut self, fraction: f64, params: &SalienceParams, compute: &dyn Compute) -> Result<Vec<u64>> {
        if !(0.0..=1.0).contains(&fraction) || fraction.is_nan() {
            return Err(Error::param("fraction", format!("{fraction} is not within [0, 1]")));
        }
        let count = (fraction * self.live() as f64).ceil() as usize;
        if count == 0 {
            return Ok(Vec::new());
        }
        let scores = compute.salience(
            self.salience.added(),
            &self.salience.last_retrieved(),
            self.turn,
            params,
        );
        let rows = compute.lowest(&scores, &self.ids, &self.alive, count);
        let ids: Vec<u64> = rows.iter().map(|&r| self.ids[r as usize]).collect();
        for &id in &ids {
            self.remove(id);
        }
        Ok(ids)
    }
    /// Drops dead rows; returns the old → new row map (`u32::MAX` for dropped).
    pub fn compact(&mut self) -> Vec<u32> {
        let mut map = vec![u32::MAX; self.ids.len()];
        let mut next = 0u32;
        for (row, m) in map.iter_mut().enumerate() {
            if self.alive.get(row) {
                *m = next;
                next += 1;
            }
        }
        let alive = self.alive.clone();
        self.salience.retain_rows(|r| alive.get(r));
        self.ids = keep_mapped(&self.ids, &map);
        self.alive = Bitset::new();
        for _ in 0..self.ids.len() {
            self.alive.push(true);
        }
        self.pos = self.ids.iter().enumerate().map(|(r, &id)| (id, r as u32)).collect();
        self.epoch += 1;
        map
    }
    /// Approximate heap bytes.
    pub fn bytes(&self) -> usize {
        // ids + map entry (key, value, control byte, load-factor slack) + salience.
        self.ids.len() * (8 + 20) + self.pos.len() * 16 + self.alive.words().len() * 8
    }

    pub fn write(&self, w: &mut Writer) {
        w.u64(self.turn);
        w.u64s(&self.ids);
        w.u64s(self.alive.words());
        w.u64s(self.salience.added());
        w.u64s(&self.salience.last_retrieved());
        let counts: Vec<u32> = (0..self.ids.len()).map(|r| self.salience.retrievals(r)).collect();
        w.u32s(&counts);
    }

    pub fn read(r: &mut Reader<'_>) -> Result<Self> {
        let turn = r.u64()?;
        let ids = r.u64s()?;
        let n = ids.len();
        let words = r.u64s()?;
        let alive = Bitset::from_words(words, n)
            .ok_or_else(|| Error::Corrupt("alive bitset length does not match row count".into()))?;
        let added = r.u64s()?;
        let last = r.u64s()?;
        let counts = r.u32s()?;
        if added.len() != n || last.len() != n || counts.len() != n {
            return Err(Error::Corrupt("salience arrays do not match row count".into()));
        }
        let mut salience = SalienceLog::default();
        for i in 0..n {
            salience.push_raw(added[i], last[i], counts[i]);
        }
        let mut pos = HashMap::with_capacity(alive.count_ones());
        for (row, &id) in ids.iter().enumerate() {
            if alive.get(row) && pos.insert(id, row as u32).is_some() {
                return Err(Error::Corrupt(format!("id {id} is live in two rows")));
            }
        }
        Ok(RowTable {
            ids,
            pos,
            alive,
            salience,
            turn,
            uid: new_uid(),
            epoch: 0,
        })
    }
}

/// The `Index` methods that only touch the row table, shared by every index
/// type (each has `rows: RowTable` and `compute: Arc<dyn Compute>` fields).
macro_rules! row_table_ops {
    () => {
        fn len(&self) -> usize {
            self.rows.live()
        }
        fn remove(&mut self, ids: &[u64]) -> usize {
            ids.iter().filter(|&&id| self.rows.remove(id)).count()
        }
        fn contains(&self, id: u64) -> bool {
            self.rows.row_of(id).is_some()
        }
        fn turn(&self) -> u64 {
            self.rows.turn
        }
        fn set_turn(&mut self, turn: u64) {
            self.rows.turn = turn;
        }
        fn record_retrieval(&self, ids: &[u64], turn: u64) {
            self.rows.record(ids, turn);
        }
        fn prune_lowest(
            &mut self,
            fraction: f64,
            params: &crate::salience::SalienceParams,
        ) -> crate::error::Result<Vec<u64>> {
            self.rows.prune_lowest(fraction, params, self.compute.as_ref())
        }
    };
}
pub(crate) use row_table_ops;
