//! The compute interface: every hot kernel of the engine behind one trait.
//!
//! Indexes and training code call a [`Compute`] and never know which backend
//! runs. [`CpuCompute`] is the reference implementation (rayon across queries
//! and blocks, SIMD chosen at run time); a GPU backend implements the same
//! calls. Results are deterministic: candidates with equal scores are ordered
//! by smaller id, so every backend returns the same ids in the same order.
//!
//! Backends may keep device copies of the data they are given: every
//! [`BaseRef`] carries a `uid`/`epoch` pair that changes when the rows change
//! other than by appending, so a cache keyed on it stays valid while the
//! index only grows.

use crate::error::Result;
use crate::fastscan::{PackedListRef, QuantizedTables, scan_list};
use crate::pq::ProductQuantizer;
use crate::salience::SalienceParams;
use crate::simd::{Isa, PANEL, Panels, RowMajor, tile_scores};
use crate::topk::{Cand, Reservoir, TopK};
use crate::vector::Bitset;
use rayon::prelude::*;
use std::sync::Arc;
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
    #[inline]
    fn id(&self, row: usize) -> u64 {
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
    /// ([`Compute::adc_top_k`]), or `packed_len(rows.len(), m)` bytes of
    /// 32-entry blocks for 4-bit fast-scan codes ([`Compute::fastscan_top_k`],
    /// layout in [`crate::fastscan`]).
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
    /// The vectors, row-major, one per global row.
    pub rows: &'a RowMajor,
    /// Identity of the underlying storage, for backend caches.
    pub uid: u64,
    /// Bumped whenever rows change other than by appending.
    pub epoch: u64,
}

/// Distance used by clustering.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// `1 − <a, b>` on unit vectors (spherical k-means, cosine).
    Cosine,
    /// Euclidean distance.
    L2,
}

/// Every hot kernel of the engine. See the module documentation.
///
/// **`k` is a bound.** Every top-k method returns at most `k` candidates
/// per query and fewer when fewer rows exist; an implementation clamps `k`
/// to the rows it was given before sizing anything by it, so any `k`
/// (`usize::MAX` included) is safe and costs what the rows cost. `k = 0`
/// gives empty lists (the indexes reject it earlier as `Error::ZeroK`).
pub trait Compute: Send + Sync + std::fmt::Debug {
    /// Backend name, e.g. `cpu (avx512f)`.
    fn name(&self) -> String;

    /// For each row-major query (`queries.len() / dim` of them), the `k` live
    /// rows with the highest `<q, row> + bias[row]`, best first, ties by
    /// smaller id. Fewer than `k` when fewer rows are alive.
    fn top_k(&self, queries: &[f32], base: BaseRef<'_>, k: usize) -> Vec<Vec<Cand>>;

    /// Nearest centroid of each point (`metric` decides inner product or L2)
    /// and its score: the cosine similarity, or for L2
    /// `<x, c> − ‖c‖²/2 = (‖x‖² − ‖x − c‖²) / 2`, from which callers recover
    /// the squared distance as `‖x‖² − 2·score`.
    fn assign(&self, points: &[f32], centroids: &Panels, metric: Metric) -> (Vec<u32>, Vec<f32>) {
        assign_by_top_k(self, points, centroids, metric)
    }

    /// Full product `a · bᵀ`: `out[i * b.len() + j] = <a_i, b_j>`.
    fn matmul_nt(&self, a: &[f32], b: &Panels) -> Vec<f32>;

    /// Per-cluster sums of the points and counts (k-means update step).
    fn cluster_sums(&self, points: &[f32], dim: usize, assign: &[u32], k: usize) -> (Vec<f32>, Vec<u32>);

    /// `out[i * k + c]` = sum of distances from point `i` to every point of
    /// cluster `c` (the self-distance is 0): the input of the silhouette score.
    fn cluster_distance_sums(&self, points: &Panels, labels: &[u32], k: usize, metric: Metric) -> Vec<f32>;

    /// ADC scan: for each (rotated) query, its lookup table against `pq`'s
    /// codebooks applied to the codes of its probed lists (`probes[q]`, each
    /// list's scores offset by its bias); the `k` best live candidates, ties
    /// by id. Tables are built per query, never for the whole batch.
    #[allow(clippy::too_many_arguments)]
    fn adc_top_k(
        &self,
        queries: &[f32],
        pq: &ProductQuantizer,
        lists: InvertedRef<'_>,
        probes: &[Vec<Probe>],
        ids: &[u64],
        alive: &Bitset,
        k: usize,
    ) -> Vec<Vec<Cand>>;

    /// Fast-scan of 4-bit codes: for each (rotated) query, its lookup tables
    /// against `pq`'s 16-centroid codebooks quantised to u8 by
    /// [`QuantizedTables`], summed in u16 over the packed blocks of its
    /// probed lists (layout in [`crate::fastscan`]); the `k` best live
    /// candidates, scored `bias + (offset + scale · sum)`, ties by smaller
    /// id. Every backend must return exactly these candidates. Fails when
    /// `pq` does not have 16 centroids per sub-quantizer or a query is not
    /// finite.
    #[allow(clippy::too_many_arguments)]
    fn fastscan_top_k(
        &self,
        queries: &[f32],
        pq: &ProductQuantizer,
        lists: InvertedRef<'_>,
        probes: &[Vec<Probe>],
        ids: &[u64],
        alive: &Bitset,
        k: usize,
    ) -> Result<Vec<Vec<Cand>>>;

    /// Exact re-ranking: each query's candidate rows scored against the stored
    /// vectors; the `k` best, ties by id.
    fn rerank(
        &self,
        queries: &[f32],
        store: StoreRef<'_>,
        ids: &[u64],
        candidates: &[Vec<u32>],
        k: usize,
    ) -> Vec<Vec<Cand>>;

    /// Salience of every row at turn `now`.
    fn salience(&self, added: &[u64], last_retrieved: &[u64], now: u64, params: &SalienceParams) -> Vec<f32>;

    /// The `count` live rows with the lowest score, lowest first (ties by id).
    fn lowest(&self, scores: &[f32], ids: &[u64], alive: &Bitset, count: usize) -> Vec<u32>;
}

/// [`Compute::assign`] through [`Compute::top_k`] with k = 1 (the
/// provided implementation).
fn assign_by_top_k<C: Compute + ?Sized>(
    c: &C,
    points: &[f32],
    centroids: &Panels,
    metric: Metric,
) -> (Vec<u32>, Vec<f32>) {
    let bias = l2_bias(centroids, metric);
    let base = BaseRef {
        bias: bias.as_deref(),
        ..BaseRef::plain(centroids)
    };
    c.top_k(points, base, 1)
        .into_iter()
        .map(|v| v.first().map_or((0, f32::NEG_INFINITY), |c| (c.row, c.score)))
        .unzip()
}

/// The per-centroid bias that turns inner-product argmax into nearest by
/// L2 (`-‖c‖²/2`); `None` for cosine.
fn l2_bias(centroids: &Panels, metric: Metric) -> Option<Vec<f32>> {
    match metric {
        Metric::Cosine => None,
        Metric::L2 => Some(
            centroids
                .to_rows()
                .chunks_exact(centroids.dim().max(1))
                .map(|c| -0.5 * c.iter().map(|x| x * x).sum::<f32>())
                .collect(),
        ),
    }
}

static NEXT_UID: AtomicU64 = AtomicU64::new(1);

/// A fresh storage identity for [`BaseRef::uid`].
pub fn new_uid() -> u64 {
    NEXT_UID.fetch_add(1, Ordering::Relaxed)
}

/// The CPU backend: rayon + runtime-chosen SIMD.
#[derive(Debug, Clone, Copy)]
pub struct CpuCompute {
    isa: Isa,
}

impl Default for CpuCompute {
    fn default() -> Self {
        CpuCompute { isa: Isa::active() }
    }
}

impl CpuCompute {
    /// The CPU backend on a specific SIMD path (must be in [`Isa::available`]).
    pub fn with_isa(isa: Isa) -> Option<Self> {
        Isa::available().contains(&isa).then_some(CpuCompute { isa })
    }
    /// The SIMD path in use.
    pub fn isa(&self) -> Isa {
        self.isa
    }
}

static DEFAULT: std::sync::RwLock<Option<Arc<dyn Compute>>> = std::sync::RwLock::new(None);

/// The default backend shared by indexes that were not given one: the one
/// installed with [`set_default_compute`], else the CPU backend.
pub fn default_compute() -> Arc<dyn Compute> {
    static CPU: std::sync::OnceLock<Arc<dyn Compute>> = std::sync::OnceLock::new();
    if let Some(c) = DEFAULT.read().ok().and_then(|g| g.clone()) {
        return c;
    }
    CPU.get_or_init(|| Arc::new(CpuCompute::default())).clone()
}

/// Installs the backend that [`default_compute`] returns from now on
/// (indexes created earlier keep theirs; `set_compute` changes one). This
/// is how a GPU backend (crate `dentate-gpu`) becomes the default.
pub fn set_default_compute(compute: Arc<dyn Compute>) {
    if let Ok(mut g) = DEFAULT.write() {
        *g = Some(compute);
    }
}

/// Queries per block: a multiple of the kernel's 6-row register tile.
const QB: usize = 48;
/// Panels per block (256 rows): a block of base rows stays in L2 while every
/// query of the block passes over it.
const PB: usize = 16;

impl CpuCompute {
    /// Runs the tile kernel for the `nq` row-major queries `q` over panels
    /// `p_lo..p_hi`, [`PB`] panels at a time, and hands each block to
    /// `visit(row0, valid, tile, width)`: `tile[r * width + c]` is the score
    /// of query `r` with row `row0 + c`, for `c < valid`.
    fn for_each_tile(
        &self,
        q: &[f32],
        nq: usize,
        panels: &Panels,
        p_lo: usize,
        p_hi: usize,
        mut visit: impl FnMut(usize, usize, &mut [f32], usize),
    ) {
        let n = panels.len();
        let mut tile = vec![0f32; nq * PB * PANEL];
        let mut scratch = Vec::new();
        let mut p = p_lo;
        while p < p_hi {
            let np = (p_hi - p).min(PB);
            let width = np * PANEL;
            tile_scores(self.isa, q, nq, panels, p, np, &mut tile, &mut scratch);
            let row0 = p * PANEL;
            visit(row0, (n - row0).min(width), &mut tile, width);
            p += np;
        }
    }

    /// Scans queries `q0..q0+nq` against panels `p_lo..p_hi` into `heaps`.
    #[allow(clippy::too_many_arguments)]
    fn scan_block(
        &self,
        queries: &[f32],
        q0: usize,
        nq: usize,
        base: &BaseRef<'_>,
        p_lo: usize,
        p_hi: usize,
        heaps: &mut [Reservoir],
    ) {
        let d = base.panels.dim();
        let qs = &queries[q0 * d..(q0 + nq) * d];
        self.for_each_tile(qs, nq, base.panels, p_lo, p_hi, |row0, valid, out, width| {
            for (qi, heap) in heaps.iter_mut().enumerate() {
                let scores = &mut out[qi * width..qi * width + valid];
                if let Some(bias) = base.bias {
                    for (s, b) in scores.iter_mut().zip(&bias[row0..row0 + valid]) {
                        *s += b;
                    }
                }
                let mut thr = heap.threshold();
                for (ci, chunk) in scores.chunks(PANEL).enumerate() {
                    // Most chunks hold nothing above the k-th best: one
                    // vectorised test rejects them without per-score branches.
                    if !any_ge(chunk, thr) {
                        continue;
                    }
                    for (c, &s) in chunk.iter().enumerate() {
                        if s >= thr {
                            let row = row0 + ci * PANEL + c;
                            if base.alive.is_none_or(|a| a.get(row)) {
                                heap.push(Cand {
                                    score: s,
                                    id: base.id(row),
                                    row: row as u32,
                                });
                                thr = heap.threshold();
                            }
                        }
                    }
                }
            }
        });
    }
}

impl Compute for CpuCompute {
    fn name(&self) -> String {
        format!("cpu ({})", self.isa.name())
    }

    fn top_k(&self, queries: &[f32], base: BaseRef<'_>, k: usize) -> Vec<Vec<Cand>> {
        let d = base.panels.dim();
        if d == 0 {
            return Vec::new();
        }
        let nq = queries.len() / d;
        let np = base.panels.panels();
        // No query gets more than every row.
        let k = k.min(base.panels.len());
        if nq == 0 {
            return Vec::new();
        }
        if np == 0 || k == 0 {
            return vec![Vec::new(); nq];
        }
        if k == 1 && d <= 32 && base.ids.is_none() && base.alive.is_none() {
            // Nearest-centroid at small dimension (k-means, PQ): fused kernel.
            let chunk = 1024;
            return queries
                .par_chunks(chunk * d)
                .map(|q| crate::simd::argmax_rows(self.isa, q, base.panels, base.bias))
                .collect::<Vec<_>>()
                .into_iter()
                .flat_map(|(r, s)| r.into_iter().zip(s))
                .map(|(row, score)| {
                    vec![Cand {
                        score,
                        id: row as u64,
                        row,
                    }]
                })
                .collect();
        }
        let qblocks = nq.div_ceil(QB);
        let threads = rayon::current_num_threads().max(1);
        // Enough tasks to keep every thread busy: split the base when there
        // are few query blocks (the single-query latency case).
        let splits = if qblocks >= 2 * threads {
            1
        } else {
            (2 * threads).div_ceil(qblocks).min(np.div_ceil(4)).max(1)
        };
        let per_split = np.div_ceil(splits);
        let scan = |qb: usize, s: usize| -> Vec<Reservoir> {
            let q0 = qb * QB;
            let nqb = (nq - q0).min(QB);
            let mut heaps = vec![Reservoir::new(k); nqb];
            let lo = s * per_split;
            let hi = ((s + 1) * per_split).min(np);
            if lo < hi {
                self.scan_block(queries, q0, nqb, &base, lo, hi, &mut heaps);
            }
            heaps
        };
        if splits == 1 {
            // Each task sees the whole base: its lists are final, so they
            // are sorted in the task (in parallel) and nothing is merged.
            let blocks: Vec<Vec<Vec<Cand>>> = (0..qblocks)
                .into_par_iter()
                .map(|qb| scan(qb, 0).into_iter().map(Reservoir::into_sorted).collect())
                .collect();
            return blocks.into_iter().flatten().collect();
        }
        let tasks: Vec<(usize, usize)> = (0..qblocks).flat_map(|qb| (0..splits).map(move |s| (qb, s))).collect();
        let partial: Vec<(usize, Vec<Reservoir>)> = tasks.into_par_iter().map(|(qb, s)| (qb, scan(qb, s))).collect();
        let mut merged: Vec<Reservoir> = vec![Reservoir::new(k); nq];
        for (qb, heaps) in partial {
            for (i, h) in heaps.into_iter().enumerate() {
                merged[qb * QB + i].merge(h);
            }
        }
        merged.into_par_iter().map(Reservoir::into_sorted).collect()
    }

    fn assign(&self, points: &[f32], centroids: &Panels, metric: Metric) -> (Vec<u32>, Vec<f32>) {
        let d = centroids.dim();
        if d == 0 || d > 32 {
            return assign_by_top_k(self, points, centroids, metric);
        }
        // Small dimension (PQ sub-spaces, k-means on them): the fused argmax
        // kernel straight into two flat vectors, with no per-point candidate
        // lists (allocating one per point cost more than the arithmetic for
        // 16-centroid codebooks).
        let bias = l2_bias(centroids, metric);
        let parts: Vec<(Vec<u32>, Vec<f32>)> = points
            .par_chunks(1024 * d)
            .map(|q| crate::simd::argmax_rows(self.isa, q, centroids, bias.as_deref()))
            .collect();
        let mut rows = Vec::with_capacity(points.len() / d);
        let mut scores = Vec::with_capacity(points.len() / d);
        for (r, s) in parts {
            rows.extend(r);
            scores.extend(s);
        }
        (rows, scores)
    }

    fn matmul_nt(&self, a: &[f32], b: &Panels) -> Vec<f32> {
        let d = b.dim();
        let nb = b.len();
        if d == 0 || nb == 0 {
            return Vec::new();
        }
        let mut out = vec![0f32; a.len() / d * nb];
        out.par_chunks_mut(QB * nb).enumerate().for_each(|(blk, chunk)| {
            let q0 = blk * QB;
            let nq = chunk.len() / nb;
            self.for_each_tile(
                &a[q0 * d..(q0 + nq) * d],
                nq,
                b,
                0,
                b.panels(),
                |c0, valid, tile, width| {
                    for r in 0..nq {
                        chunk[r * nb + c0..r * nb + c0 + valid].copy_from_slice(&tile[r * width..r * width + valid]);
                    }
                },
            );
        });
        out
    }

    fn cluster_sums(&self, points: &[f32], dim: usize, assign: &[u32], k: usize) -> (Vec<f32>, Vec<u32>) {
        // Fixed-size chunks summed in parallel, then combined in chunk order:
        // the float summation order never depends on thread scheduling, so
        // training is bit-reproducible (a rayon fold/reduce is not).
        const CHUNK: usize = 16_384;
        let partial: Vec<(Vec<f32>, Vec<u32>)> = points
            .par_chunks(CHUNK * dim)
            .zip(assign.par_chunks(CHUNK))
            .map(|(pts, asg)| {
                let mut sums = vec![0f32; k * dim];
                let mut counts = vec![0u32; k];
                for (x, &c) in pts.chunks_exact(dim).zip(asg) {
                    let c = c as usize;
                    if c < k {
                        counts[c] += 1;
                        for (s, v) in sums[c * dim..(c + 1) * dim].iter_mut().zip(x) {
                            *s += v;
                        }
                    }
                }
                (sums, counts)
            })
            .collect();
        let mut sums = vec![0f32; k * dim];
        let mut counts = vec![0u32; k];
        for (s2, c2) in partial {
            sums.iter_mut().zip(&s2).for_each(|(a, b)| *a += b);
            counts.iter_mut().zip(&c2).for_each(|(a, b)| *a += b);
        }
        (sums, counts)
    }

    fn cluster_distance_sums(&self, points: &Panels, labels: &[u32], k: usize, metric: Metric) -> Vec<f32> {
        let n = points.len();
        let d = points.dim();
        if n == 0 || d == 0 || k == 0 {
            return Vec::new();
        }
        let rows = points.to_rows();
        let norms: Vec<f32> = rows.chunks_exact(d).map(|r| r.iter().map(|x| x * x).sum()).collect();
        let mut out = vec![0f32; n * k];
        out.par_chunks_mut(QB * k).enumerate().for_each(|(blk, chunk)| {
            let q0 = blk * QB;
            let nq = chunk.len() / k;
            self.for_each_tile(
                &rows[q0 * d..(q0 + nq) * d],
                nq,
                points,
                0,
                points.panels(),
                |c0, valid, tile, width| {
                    for r in 0..nq {
                        let i = q0 + r;
                        for c in 0..valid {
                            let j = c0 + c;
                            if i == j {
                                continue;
                            }
                            let ip = tile[r * width + c];
                            let dist = match metric {
                                Metric::Cosine => (1.0 - ip).max(0.0),
                                Metric::L2 => (norms[i] + norms[j] - 2.0 * ip).max(0.0).sqrt(),
                            };
                            let l = labels[j] as usize;
                            if l < k {
                                chunk[r * k + l] += dist;
                            }
                        }
                    }
                },
            );
        });
        out
    }

    fn adc_top_k(
        &self,
        queries: &[f32],
        pq: &ProductQuantizer,
        lists: InvertedRef<'_>,
        probes: &[Vec<Probe>],
        ids: &[u64],
        alive: &Bitset,
        k: usize,
    ) -> Vec<Vec<Cand>> {
        let m = pq.m();
        let ksub = pq.ksub();
        let k = k.min(ids.len());
        probes
            .par_iter()
            .zip(queries.par_chunks_exact(pq.dim()))
            .map_init(
                || vec![0f32; m * ksub],
                |lut, (probes, q)| {
                    pq.table_into(q, lut);
                    let mut heap = Reservoir::new(k);
                    for p in probes {
                        let Some(list) = lists.lists.get(p.list as usize) else {
                            continue;
                        };
                        if ksub == crate::pq::KSUB {
                            adc_scan_list(lut, m, list, p.bias, ids, alive, &mut heap);
                        } else {
                            adc_scan_list_generic(lut, m, ksub, list, p.bias, ids, alive, &mut heap);
                        }
                    }
                    heap.into_sorted()
                },
            )
            .collect()
    }

    fn fastscan_top_k(
        &self,
        queries: &[f32],
        pq: &ProductQuantizer,
        lists: InvertedRef<'_>,
        probes: &[Vec<Probe>],
        ids: &[u64],
        alive: &Bitset,
        k: usize,
    ) -> Result<Vec<Vec<Cand>>> {
        crate::fastscan::check_pq(pq)?;
        let m = pq.m();
        let k = k.min(ids.len());
        probes
            .par_iter()
            .zip(queries.par_chunks_exact(pq.dim()))
            .map_init(
                || (vec![0f32; m * crate::fastscan::KSUB], QuantizedTables::default()),
                |(table, qt), (probes, q)| {
                    pq.table_into(q, table);
                    qt.quantize(table, m)?;
                    let mut heap = Reservoir::new(k);
                    for p in probes {
                        let Some(list) = lists.lists.get(p.list as usize) else {
                            continue;
                        };
                        let list = PackedListRef {
                            blocks: &list.codes,
                            rows: &list.rows,
                            bias: p.bias,
                        };
                        scan_list(self.isa, qt, &list, ids, alive, &mut heap);
                    }
                    Ok(heap.into_sorted())
                },
            )
            .collect()
    }

    fn rerank(
        &self,
        queries: &[f32],
        store: StoreRef<'_>,
        ids: &[u64],
        candidates: &[Vec<u32>],
        k: usize,
    ) -> Vec<Vec<Cand>> {
        let store = store.rows;
        let d = store.dim();
        candidates
            .par_iter()
            .enumerate()
            .map(|(qi, rows)| {
                let q = &queries[qi * d..(qi + 1) * d];
                let mut heap = Reservoir::new(k.min(rows.len()));
                // Candidate rows are scattered: fetch a few rows ahead.
                const AHEAD: usize = 4;
                for &r in rows.iter().take(AHEAD) {
                    store.prefetch_row(r as usize);
                }
                for (i, &r) in rows.iter().enumerate() {
                    if let Some(&next) = rows.get(i + AHEAD) {
                        store.prefetch_row(next as usize);
                    }
                    let r = r as usize;
                    heap.push(Cand {
                        score: store.dot_row(r, q),
                        id: ids[r],
                        row: r as u32,
                    });
                }
                heap.into_sorted()
            })
            .collect()
    }

    fn salience(&self, added: &[u64], last_retrieved: &[u64], now: u64, params: &SalienceParams) -> Vec<f32> {
        added
            .par_iter()
            .zip(last_retrieved.par_iter())
            .map(|(&a, &l)| params.score(now, a, l))
            .collect()
    }

    fn lowest(&self, scores: &[f32], ids: &[u64], alive: &Bitset, count: usize) -> Vec<u32> {
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
}

/// True when some score reaches `thr`. Branch-free, so it vectorises (a
/// `max` fold would be a serial dependency chain).
#[inline]
fn any_ge(chunk: &[f32], thr: f32) -> bool {
    let mut hit = false;
    for &x in chunk {
        hit |= x >= thr;
    }
    hit
}

/// [`adc_scan_list`] for codebooks of any size (`ksub` entries per table).
#[allow(clippy::too_many_arguments)]
fn adc_scan_list_generic(
    lut: &[f32],
    m: usize,
    ksub: usize,
    list: &InvList,
    bias: f32,
    ids: &[u64],
    alive: &Bitset,
    heap: &mut Reservoir,
) {
    for (code, &row) in list.codes.chunks_exact(m).zip(&list.rows) {
        let s: f32 = code
            .iter()
            .enumerate()
            .map(|(j, &c)| lut[j * ksub + usize::from(c) % ksub])
            .sum();
        if alive.get(row as usize) {
            heap.push(Cand {
                score: bias + s,
                id: ids[row as usize],
                row,
            });
        }
    }
}

/// Scans one inverted list with a lookup table, pushing live candidates.
#[inline]
pub(crate) fn adc_scan_list(
    lut: &[f32],
    m: usize,
    list: &InvList,
    bias: f32,
    ids: &[u64],
    alive: &Bitset,
    heap: &mut Reservoir,
) {
    // One 256-entry table per sub-quantizer: indexing an `[f32; 256]` with a
    // `u8` needs no bounds check, and zipping tables with code bytes needs none
    // either, so the loop is pure loads and adds.
    let (tables, _) = lut[..m * 256].as_chunks::<256>();
    let mut thr = heap.threshold();
    for (code, &row) in list.codes.chunks_exact(m).zip(&list.rows) {
        // Four independent partial sums break the add dependency chain.
        let mut acc = [0f32; 4];
        let (quads, rest) = code.as_chunks::<4>();
        let (tquads, trest) = tables.as_chunks::<4>();
        for (c, t) in quads.iter().zip(tquads) {
            acc[0] += t[0][c[0] as usize];
            acc[1] += t[1][c[1] as usize];
            acc[2] += t[2][c[2] as usize];
            acc[3] += t[3][c[3] as usize];
        }
        for (&c, t) in rest.iter().zip(trest) {
            acc[0] += t[c as usize];
        }
        let s = bias + (acc[0] + acc[1]) + (acc[2] + acc[3]);
        if s >= thr && alive.get(row as usize) {
            heap.push(Cand {
                score: s,
                id: ids[row as usize],
                row,
            });
            thr = heap.threshold();
        }
    }
}
