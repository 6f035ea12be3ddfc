//! The `Index` trait every index implements, and the argument checks all
//! of them share ([`crate::AnyIndex`] opens a file of unknown kind).
//!
//! # Locking model
//!
//! Every index is `Send + Sync`. Methods that take `&self` — `search`,
//! `record_retrieval`, `save`, the accessors — may run from many threads at
//! once; methods that take `&mut self` — `add`, `remove`, `compact`,
//! `prune_lowest`, `set_turn` — need exclusive access. Share an index
//! between threads as `Arc<RwLock<I>>`: searches proceed in parallel under
//! the read lock, writers take the write lock. Retrieval bookkeeping for
//! salience uses atomics, so recording it needs only the read lock.

use crate::error::{Error, Result};
use crate::io::IndexKind;
use crate::salience::SalienceParams;
use crate::topk::Hit;
use std::path::Path;

/// Operations common to every index.
pub trait Index: Send + Sync {
    /// Vector dimension.
    fn dim(&self) -> usize;
    /// Number of live vectors.
    fn len(&self) -> usize;
    /// True when no vector is live.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Adds vectors (row-major, `ids.len() × dim`) under caller ids. Vectors
    /// are L2-normalised; an id already present is replaced.
    fn add(&mut self, ids: &[u64], vectors: &[f32]) -> Result<()>;
    /// Removes ids (tombstones); returns how many were present.
    fn remove(&mut self, ids: &[u64]) -> usize;
    /// True when `id` is live.
    fn contains(&self, id: u64) -> bool;
    /// The `k` most similar live vectors (cosine) of each query, best first,
    /// ties by smaller id.
    ///
    /// **The `k` rule** (every index, every backend, the lexical index and
    /// hybrid search too): `k` is clamped to the live count before anything
    /// is sized by it, so each query gets `min(k, len())` hits and any `k`
    /// — `usize::MAX` included, and re-rank factors whose product with `k`
    /// overflows — is safe; `k = 0` is [`Error::ZeroK`].
    fn search(&self, queries: &[f32], k: usize) -> Result<Vec<Vec<Hit>>>;
    /// Drops tombstoned rows and reclaims their space.
    fn compact(&mut self);
    /// Writes the index to `path` crash-safely.
    fn save(&self, path: &Path) -> Result<()>;
    /// Heap bytes held by the index.
    fn memory_bytes(&self) -> usize;
    /// The current turn (salience clock).
    fn turn(&self) -> u64;
    /// Sets the turn; vectors added afterwards are stamped with it.
    fn set_turn(&mut self, turn: u64);
    /// Records that `ids` were retrieved at `turn` (for salience).
    fn record_retrieval(&self, ids: &[u64], turn: u64);
    /// Removes the `ceil(fraction × len)` live vectors of lowest salience at
    /// the current turn (HEMA §3.4 uses 0.005); returns their ids.
    fn prune_lowest(&mut self, fraction: f64, params: &SalienceParams) -> Result<Vec<u64>>;
    /// The kind of index.
    fn kind(&self) -> IndexKind;
}

/// The argument checks every `search` makes first — `k ≥ 1`, whole
/// `dim`-sized rows, finite non-zero values, a non-empty index (`live`
/// rows) — returning the L2-normalised queries. Public for callers that
/// drive a backend themselves (the browser's asynchronous WebGPU path);
/// they clamp `k` with [`clamp_k`] afterwards, as the indexes do.
pub fn check_search(live: usize, queries: &[f32], dim: usize, k: usize) -> Result<Vec<f32>> {
    let q = crate::vector::check_queries(queries, dim, k)?;
    if live == 0 {
        return Err(Error::EmptyIndex);
    }
    Ok(q)
}

/// `k` as a search uses it: at most the `live` count (the `k` rule of
/// [`Index::search`]). Never zero for a non-empty index when `k ≥ 1`.
pub fn clamp_k(k: usize, live: usize) -> usize {
    k.min(live)
}
