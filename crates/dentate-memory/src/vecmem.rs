//! Vector memory: the core index behind a pipeline, exact while small and
//! IVF-OPQ-PQ (with exact f16 re-ranking) once large, switched
//! automatically, saved crash-safely beside the store and rebuilt from the
//! store's vectors when the file is missing or disagrees with it.

use crate::error::{MemoryError, Result};
use dentate_core::{AnyIndex, FlatIndex, IvfPqConfig, IvfPqIndex, Precision, SalienceParams};
use std::path::{Path, PathBuf};

/// When the exact index becomes IVF-PQ, and how IVF-PQ is sized.
#[derive(Debug, Clone)]
pub struct VectorMemoryConfig {
    /// Live items at which the exact index is replaced by IVF-OPQ-PQ
    /// (default 10,000: an exact scan of 10,000 × 384 f32 rows takes about
    /// as long as the rest of a retrieval; HEMA's forgetting holds its
    /// memory near 20,000 items, so it must switch below that). An IVF index is retrained from scratch when it
    /// has grown 4× past the size it was trained at.
    pub switch_at: usize,
    /// Learn an OPQ rotation when training IVF-PQ (default on).
    pub opq: bool,
    /// Re-rank factor of IVF-PQ searches (default 8).
    pub rerank: usize,
}

impl Default for VectorMemoryConfig {
    fn default() -> Self {
        VectorMemoryConfig {
            switch_at: 10_000,
            opq: true,
            rerank: 8,
        }
    }
}

/// A stored vector: `(item id, turn it was made at, vector)`.
pub type StoredVector = (i64, i64, Vec<f32>);

/// The searchable vectors of one user's pipeline.
#[derive(Debug)]
pub struct VectorMemory {
    index: AnyIndex,
    dim: usize,
    /// Where the index is cached; `None` for a memory without a directory
    /// (in memory, e.g. in the browser): rebuilt from the store, never saved.
    path: Option<PathBuf>,
    cfg: VectorMemoryConfig,
    trained_at: usize,
    /// Items removed since the last compaction (tombstones still held).
    removed: usize,
}

/// PQ sub-quantizers for `dim`: 8 dimensions each when possible (48 bytes
/// per vector at 384-d), else the nearest divisor.
fn choose_m(dim: usize) -> usize {
    [8, 4, 2, 16, 6, 12, 3, 1]
        .into_iter()
        .find(|s| dim.is_multiple_of(*s) && dim / s >= 1)
        .map_or(1, |s| dim / s)
}

/// Inverted lists for `n` vectors: about 2·√n, a power of two, with at
/// least 39 training points per list.
fn choose_nlist(n: usize) -> usize {
    let target = (2.0 * (n as f64).sqrt()) as usize;
    let mut nlist = target.next_power_of_two().max(16);
    while nlist > 16 && n < 39 * nlist {
        nlist /= 2;
    }
    nlist
}

fn to_u64(id: i64) -> Result<u64> {
    u64::try_from(id).map_err(|_| MemoryError::Invalid(format!("item id {id} is negative")))
}

impl VectorMemory {
    /// Opens the index at `path`, or rebuilds it from `stored` (the store's
    /// live vectors) when the file is missing, unreadable, of another
    /// dimension, or holds a different set of ids. Without a path the index
    /// is built from `stored` and lives in memory only.
    pub fn open(path: Option<&Path>, dim: usize, cfg: VectorMemoryConfig, stored: Vec<StoredVector>) -> Result<Self> {
        if let Some(index) = path.and_then(|p| AnyIndex::load(p).ok()) {
            let i = index.as_index();
            let agrees = i.dim() == dim
                && i.len() == stored.len()
                && stored
                    .iter()
                    .all(|(id, _, _)| u64::try_from(*id).is_ok_and(|id| i.contains(id)));
            if agrees {
                let trained_at = i.len();
                return Ok(VectorMemory {
                    index,
                    dim,
                    path: path.map(Path::to_path_buf),
                    cfg,
                    trained_at,
                    removed: 0,
                });
            }
            log::warn!(
                "{} disagrees with the store; rebuilding it",
                path.map_or_else(String::new, |p| p.display().to_string())
            );
        }
        let mut vm = VectorMemory {
            index: AnyIndex::Flat(FlatIndex::with_precision(dim, Precision::F32)),
            dim,
            path: path.map(Path::to_path_buf),
            cfg,
            trained_at: 0,
            removed: 0,
        };
        vm.rebuild(stored)?;
        Ok(vm)
    }

    /// Replaces the index with one built from `stored`: exact below
    /// `switch_at` live vectors, IVF-OPQ-PQ trained on all of them above.
    pub fn rebuild(&mut self, mut stored: Vec<StoredVector>) -> Result<()> {
        stored.sort_by_key(|(id, turn, _)| (*turn, *id));
        let n = stored.len();
        let mut index = if n >= self.cfg.switch_at {
            let mut data = Vec::with_capacity(n * self.dim);
            for (_, _, v) in &stored {
                data.extend_from_slice(v);
            }
            let mut cfg = IvfPqConfig::new(choose_nlist(n), choose_m(self.dim)).opq(self.cfg.opq);
            cfg.rerank = self.cfg.rerank;
            cfg.nprobe = (cfg.nlist / 8).max(8);
            let mut ivf = IvfPqIndex::new(self.dim, cfg)?;
            ivf.train(&data)?;
            AnyIndex::IvfPq(ivf)
        } else {
            AnyIndex::Flat(FlatIndex::with_precision(self.dim, Precision::F32))
        };
        // Add in turn order so each vector keeps its salience age.
        let idx = index.as_index_mut();
        let mut start = 0;
        while start < n {
            let turn = stored[start].1;
            let end = start + stored[start..].iter().take_while(|s| s.1 == turn).count();
            let ids = stored[start..end]
                .iter()
                .map(|s| to_u64(s.0))
                .collect::<Result<Vec<_>>>()?;
            let mut rows = Vec::with_capacity((end - start) * self.dim);
            for (_, _, v) in &stored[start..end] {
                rows.extend_from_slice(v);
            }
            idx.set_turn(turn.max(0) as u64);
            idx.add(&ids, &rows)?;
            start = end;
        }
        if let Some(last) = stored.last() {
            idx.set_turn(last.1.max(0) as u64);
        }
        self.trained_at = n;
        self.removed = 0;
        self.index = index;
        Ok(())
    }

    /// Whether the index should be rebuilt (exact grown past `switch_at`,
    /// or IVF grown 4× past its training size).
    pub fn needs_rebuild(&self) -> bool {
        let n = self.index.as_index().len();
        match &self.index {
            AnyIndex::Flat(_) => n >= self.cfg.switch_at,
            AnyIndex::IvfPq(_) => n >= 4 * self.trained_at.max(1),
        }
    }

    /// Adds vectors made at `turn` under item ids.
    pub fn add(&mut self, ids: &[i64], turn: i64, vectors: &[f32]) -> Result<()> {
        let ids = ids.iter().map(|&i| to_u64(i)).collect::<Result<Vec<_>>>()?;
        let idx = self.index.as_index_mut();
        idx.set_turn(turn.max(0) as u64);
        idx.add(&ids, vectors)?;
        Ok(())
    }

    /// Removes items; returns how many were present.
    pub fn remove(&mut self, ids: &[i64]) -> usize {
        let ids: Vec<u64> = ids.iter().filter_map(|&i| u64::try_from(i).ok()).collect();
        let n = self.index.as_index_mut().remove(&ids);
        self.note_removed(n);
        n
    }

    /// Counts removed rows and compacts the index once they exceed a
    /// quarter of the live ones, so forgetting frees memory and scan time.
    fn note_removed(&mut self, n: usize) {
        self.removed += n;
        if self.removed > 0 && self.removed * 4 >= self.len().max(64) {
            self.index.as_index_mut().compact();
            self.removed = 0;
        }
    }

    /// The `k` most similar items of one query: `(item id, cosine)`, best
    /// first. An empty memory gives no hits.
    pub fn search(&self, query: &[f32], k: usize) -> Result<Vec<(i64, f32)>> {
        if k == 0 {
            return Err(MemoryError::Invalid("k must be at least 1".into()));
        }
        let idx = self.index.as_index();
        if idx.is_empty() {
            return Ok(Vec::new());
        }
        let hits = idx.search(query, k)?;
        Ok(hits
            .into_iter()
            .next()
            .unwrap_or_default()
            .into_iter()
            .filter_map(|h| i64::try_from(h.id).ok().map(|id| (id, h.score)))
            .collect())
    }

    /// Records that `ids` were retrieved at `turn` (salience bonus).
    pub fn record_retrieval(&self, ids: &[i64], turn: i64) {
        let ids: Vec<u64> = ids.iter().filter_map(|&i| u64::try_from(i).ok()).collect();
        self.index.as_index().record_retrieval(&ids, turn.max(0) as u64);
    }

    /// Applies stored retrieval marks `(item id, turn)` (from
    /// `Store::retrievals`) to the index, as after opening or rebuilding it:
    /// a mark later than the index's own wins, an earlier one changes
    /// nothing.
    pub fn restore_retrievals(&self, marks: &[(i64, i64)]) {
        for &(id, turn) in marks {
            self.record_retrieval(&[id], turn);
        }
    }

    /// The salience clock.
    pub fn turn(&self) -> i64 {
        i64::try_from(self.index.as_index().turn()).unwrap_or(i64::MAX)
    }

    /// Sets the salience clock.
    pub fn set_turn(&mut self, turn: i64) {
        self.index.as_index_mut().set_turn(turn.max(0) as u64);
    }

    /// Removes the lowest-salience `fraction` of live items at the current
    /// turn (through the core's pruning); returns their ids.
    pub fn prune(&mut self, fraction: f64, params: &SalienceParams) -> Result<Vec<i64>> {
        let ids = self.index.as_index_mut().prune_lowest(fraction, params)?;
        self.note_removed(ids.len());
        Ok(ids.into_iter().filter_map(|i| i64::try_from(i).ok()).collect())
    }

    /// Writes the index file crash-safely (nothing for an in-memory index).
    pub fn save(&self) -> Result<()> {
        if let Some((path, bytes)) = self.image() {
            dentate_core::io::write_atomic(&path, &bytes)?;
        }
        Ok(())
    }

    /// The index file's path and image, to write later (none for an
    /// in-memory index).
    pub fn image(&self) -> Option<(std::path::PathBuf, Vec<u8>)> {
        self.path.as_ref().map(|p| (p.clone(), self.index.to_bytes()))
    }

    /// Live items.
    pub fn len(&self) -> usize {
        self.index.as_index().len()
    }

    /// True when no item is searchable.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Heap bytes of the index.
    pub fn memory_bytes(&self) -> usize {
        self.index.as_index().memory_bytes()
    }

    /// `"flat"` or `"ivfpq"`.
    pub fn kind(&self) -> &'static str {
        match self.index {
            AnyIndex::Flat(_) => "flat",
            AnyIndex::IvfPq(_) => "ivfpq",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizing() {
        assert_eq!(choose_m(384), 48);
        assert_eq!(choose_m(100), 25);
        assert_eq!(choose_m(7), 7);
        assert_eq!(choose_nlist(20_000), 512);
        assert!(choose_nlist(50_000) * 39 <= 50_000);
        assert_eq!(choose_nlist(10), 16);
    }
}
