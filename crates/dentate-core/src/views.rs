//! What the kernels read: borrowed views of an index's data, with the cache
//! identity a backend keys device copies on.
//!
//! Every [`crate::Compute`] method takes these views, never an index: a
//! backend sees rows, lists, codebooks ([`crate::Codebooks`]) and ids, and
//! nothing of how an index manages them. Each view that a backend may keep
//! on its device carries a `uid`/`epoch` pair: `uid` names the storage,
//! `epoch` changes whenever rows change other than by appending, so a cache
//! keyed on both stays valid while the index only grows.

use crate::codebook::{Codebooks, PqCodes};
use crate::layout::Panels;
use crate::store::RerankStore;
use crate::topk::{Cand, Hit};
use crate::vector::Bitset;
use std::sync::atomic::{AtomicU64, Ordering};

/// A base matrix to search, with its ids, tombstones and per-row bias.
#[derive(Debug, Clone, Copy)]
pub struct BaseRef<'a> {
    /// The vectors, in panel layout.
    pub panels: &'a Panels,
    /// Caller id of each row; `None` means the row number is the id.
    pub ids: Option<&'a [u64]>,
    /// Rows that may be returned; `None` means all.
    pub alive: Option<&'a Bitset>,
    /// Added to each row's inner product (e.g. `-‖c‖²/2` turns inner-product
    /// top-1 into nearest-by-L2); `None` means zero.
    pub bias: Option<&'a [f32]>,
    /// Identity of the underlying storage, for backend caches.
    pub uid: u64,
    /// Bumped whenever rows change other than by appending.
    pub epoch: u64,
}

impl<'a> BaseRef<'a> {
    /// A plain base: row numbers as ids, all alive, no bias.
    pub fn plain(panels: &'a Panels) -> Self {
        BaseRef {
            panels,
            ids: None,
            alive: None,
            bias: None,
            uid: 0,
            epoch: 0,
        }
    }
    /// The caller id of `row`.
    #[inline]
    pub fn id(&self, row: usize) -> u64 {
        self.ids.map_or(row as u64, |ids| ids[row])
    }
}

/// One inverted list: the PQ codes of its entries and their global rows.
/// Lists only grow between compactions (entries are appended).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InvList {
    /// Global row of each entry.
    pub rows: Vec<u32>,
    /// The codes: `rows.len() × m` bytes row-major for 8-bit codes
    /// ([`crate::Compute::adc_top_k`]), or `packed_len(rows.len(), m)` bytes
    /// of 32-entry blocks for 4-bit fast-scan codes
    /// ([`crate::Compute::fastscan_top_k`], layout in [`crate::fastscan`]).
    pub codes: Vec<u8>,
}

/// The inverted lists of an IVF index as the compute interface sees them,
/// with the identity a backend cache keys on (like [`BaseRef`]: `epoch`
/// changes whenever entries change other than by appending).
#[derive(Debug, Clone, Copy)]
pub struct InvertedRef<'a> {
    /// Every list; list `l` is `lists[l]`.
    pub lists: &'a [InvList],
    /// Code bytes per entry.
    pub m: usize,
    /// Identity of the underlying storage, for backend caches.
    pub uid: u64,
    /// Bumped whenever entries change other than by appending.
    pub epoch: u64,
}

/// One probed list of one query: which list, and the score added to every
/// entry of it (`<q, centroid>`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Probe {
    /// List number.
    pub list: u32,
    /// Added to every ADC score of the list.
    pub bias: f32,
}

/// The stored vectors exact re-ranking reads, with their cache identity
/// (the same `uid`/`epoch` rules as [`BaseRef`]).
#[derive(Debug, Clone, Copy)]
pub struct StoreRef<'a> {
    /// The vectors (full or 8-bit), row-major, one per global row.
    pub store: &'a RerankStore,
    /// Identity of the underlying storage, for backend caches.
    pub uid: u64,
    /// Bumped whenever rows change other than by appending.
    pub epoch: u64,
}

/// What the scan ([`crate::Compute::adc_top_k`] for 8-bit codes,
/// [`crate::Compute::fastscan_top_k`] for 4-bit ones) and the re-ranking
/// ([`crate::Compute::rerank`]) of an IVF-PQ search read
/// ([`crate::IvfPqIndex::parts`]).
#[derive(Debug, Clone, Copy)]
pub struct IvfParts<'a> {
    /// The code width, which decides the scan and the lists' layout.
    pub codes: PqCodes,
    /// The product quantizer's codebooks (they make the lookup tables).
    pub books: Codebooks<'a>,
    /// The inverted lists.
    pub lists: InvertedRef<'a>,
    /// Caller id of every row.
    pub ids: &'a [u64],
    /// Live rows.
    pub alive: &'a Bitset,
    /// The re-rank store, when the index keeps one.
    pub store: Option<StoreRef<'a>>,
}

/// A search after its first stage ([`crate::IvfPqIndex::plan`]): what the
/// scan reads beside [`IvfParts`].
#[derive(Debug, Clone, PartialEq)]
pub struct IvfPlan {
    /// The L2-normalised queries (re-ranking scores against them).
    pub queries: Vec<f32>,
    /// The queries in the quantizers' space (rotated when OPQ is on).
    pub rotated: Vec<f32>,
    /// Each query's probed lists with their coarse scores.
    pub probes: Vec<Vec<Probe>>,
    /// Candidates the scan keeps per query (`k × rerank`, or `k`; at most
    /// the live count).
    pub shortlist: usize,
    /// Results per query: the `k` asked for, clamped to the live count (the
    /// `k` rule of [`crate::Index::search`]); re-rank and finish with this one.
    pub k: usize,
    /// Whether the shortlist is re-ranked exactly.
    pub rerank: bool,
}

impl IvfPlan {
    /// The rows of each query's scan candidates (the input of re-ranking).
    pub fn rows(cands: &[Vec<Cand>]) -> Vec<Vec<u32>> {
        cands.iter().map(|v| v.iter().map(|c| c.row).collect()).collect()
    }

    /// The final hits: the best `k` candidates of each query.
    pub fn finish(cands: Vec<Vec<Cand>>, k: usize) -> Vec<Vec<Hit>> {
        cands
            .into_iter()
            .map(|v| v.iter().take(k).map(|c| c.hit()).collect())
            .collect()
    }
}

/// The points of one k-means training, with the identity a backend keeps a
/// device copy under for the whole training: every step of one training
/// passes the same `uid` and the same rows, so the points cross the bus
/// once. A `uid` promises its rows never change; a new sample takes a new
/// [`new_uid`] (or 0: no identity, nothing kept).
#[derive(Debug, Clone, Copy)]
pub struct PointsRef<'a> {
    /// Row-major points, `rows.len() / dim` of them.
    pub rows: &'a [f32],
    /// Dimension of each point.
    pub dim: usize,
    /// Identity of these rows for backend caches (0: none).
    pub uid: u64,
}

impl PointsRef<'_> {
    /// Number of points.
    pub fn len(&self) -> usize {
        self.rows.len() / self.dim.max(1)
    }

    /// No points.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// A fresh storage identity for [`BaseRef::uid`] (and the other views').
pub fn new_uid() -> u64 {
    NEXT_UID.fetch_add(1, Ordering::Relaxed)
}
