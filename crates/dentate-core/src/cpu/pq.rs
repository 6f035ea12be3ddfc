//! The IVF-PQ scans and exact re-ranking (`shaders/pq.wgsl`,
//! `dentate-gpu/src/pq.rs` on the GPU): per query, its lookup table, then
//! each probed list scanned into one candidate heap — float tables over
//! 8-bit codes ([`adc_top_k`]), u8 tables with SIMD byte shuffles over
//! packed 4-bit blocks ([`fastscan_top_k`], layout in [`crate::fastscan`]).

use crate::error::Result;
use crate::fastscan::{BLOCK, KSUB as KSUB4, QuantizedTables, check_books};
use crate::layout::RowMajor;
use crate::pq::KSUB;
use crate::simd::{Isa, pq4};
use crate::store::{RerankStore, Sq8Rows};
use crate::topk::{Cand, Reservoir};
use crate::vector::Bitset;
use crate::views::{InvList, IvfParts, IvfPlan, Probe, StoreRef};
use rayon::prelude::*;

/// What a scan checks before offering a row: is it alive, and its id.
#[derive(Clone, Copy)]
struct Live<'a> {
    ids: &'a [u64],
    alive: &'a Bitset,
}

impl<'a> Live<'a> {
    fn of(parts: &IvfParts<'a>) -> Self {
        Live {
            ids: parts.ids,
            alive: parts.alive,
        }
    }
}

/// The shape both IVF scans share: for every query of `plan` in parallel
/// (with scratch `S` per worker), its tables by `tables(scratch, query)`,
/// then each of its probed lists offered to one heap by
/// `scan(scratch, list, bias, heap)`; the `plan.shortlist` best of each
/// query, best first.
fn each_query<S: Send, E: Send>(
    parts: &IvfParts<'_>,
    plan: &IvfPlan,
    init: impl Fn() -> S + Sync + Send,
    tables: impl Fn(&mut S, &[f32]) -> std::result::Result<(), E> + Sync + Send,
    scan: impl Fn(&S, &InvList, f32, &mut Reservoir) + Sync + Send,
) -> std::result::Result<Vec<Vec<Cand>>, E> {
    let k = plan.shortlist.min(parts.ids.len());
    plan.probes
        .par_iter()
        .zip(plan.rotated.par_chunks_exact(parts.books.dim().max(1)))
        .map_init(init, |scratch, (probes, q)| {
            tables(scratch, q)?;
            let mut heap = Reservoir::new(k);
            for p in probes {
                if let Some(list) = parts.lists.lists.get(p.list as usize) {
                    scan(scratch, list, p.bias, &mut heap);
                }
            }
            Ok(heap.into_sorted())
        })
        .collect()
}

/// [`crate::Compute::adc_top_k`].
pub(super) fn adc_top_k(parts: &IvfParts<'_>, plan: &IvfPlan) -> Vec<Vec<Cand>> {
    let books = parts.books;
    let (m, ksub) = (books.m(), books.ksub());
    let live = Live::of(parts);
    let scanned = each_query(
        parts,
        plan,
        || vec![0f32; m * ksub],
        |lut, q| {
            books.table_into(q, lut);
            Ok::<(), std::convert::Infallible>(())
        },
        |lut, list, bias, heap| {
            if ksub == KSUB {
                adc_scan_list(lut, m, list, bias, live, heap);
            } else {
                adc_scan_list_generic(lut, (m, ksub), list, bias, live, heap);
            }
        },
    );
    match scanned {
        Ok(v) => v,
        Err(never) => match never {},
    }
}

/// [`adc_scan_list`] for codebooks of any size (`ksub` entries per table).
fn adc_scan_list_generic(
    lut: &[f32],
    (m, ksub): (usize, usize),
    list: &InvList,
    bias: f32,
    live: Live<'_>,
    heap: &mut Reservoir,
) {
    for (code, &row) in list.codes.chunks_exact(m).zip(&list.rows) {
        let s: f32 = code
            .iter()
            .enumerate()
            .map(|(j, &c)| lut[j * ksub + usize::from(c) % ksub])
            .sum();
        if live.alive.get(row as usize) {
            heap.push(Cand {
                score: bias + s,
                id: live.ids[row as usize],
                row,
            });
        }
    }
}

/// Scans one inverted list of 8-bit codes with a lookup table, pushing live
/// candidates.
#[inline]
fn adc_scan_list(lut: &[f32], m: usize, list: &InvList, bias: f32, live: Live<'_>, heap: &mut Reservoir) {
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
        if s >= thr && live.alive.get(row as usize) {
            heap.push(Cand {
                score: s,
                id: live.ids[row as usize],
                row,
            });
            thr = heap.threshold();
        }
    }
}

/// Most queries one task of [`fastscan_top_k`] serves: enough that the
/// queries of a batch share lists, few enough that a batch splits into
/// several tasks per thread.
const GROUP: usize = 64;

/// How many queries each task of a `nq`-query batch takes on `threads`
/// workers: one per task while the batch is small (the latency path, one
/// query at a time, probes in order), more as it grows so that the queries
/// probing the same list share its scan, keeping about four tasks per
/// worker for balance.
fn group_size(nq: usize, threads: usize) -> usize {
    nq.div_ceil(4 * threads.max(1)).clamp(1, GROUP)
}

/// [`crate::Compute::fastscan_top_k`]: the queries in groups
/// ([`group_size`]), each group on one worker. A group quantises its
/// queries' tables, then visits each list its queries probe once, scanning
/// it for up to [`pq4::MULTI`] of them per pass ([`pq4::scan_multi`]), lists
/// nearest to some query first so that thresholds rise early. The result is
/// the per-query scan's exactly: each query's heap sees the same candidates
/// (only their order differs, and the heap's result does not depend on it).
pub(super) fn fastscan_top_k(isa: Isa, parts: &IvfParts<'_>, plan: &IvfPlan) -> Result<Vec<Vec<Cand>>> {
    let books = parts.books;
    check_books(books)?;
    let m = books.m();
    let d = books.dim().max(1);
    let k = plan.shortlist.min(parts.ids.len());
    let live = Live::of(parts);
    let g = group_size(plan.probes.len(), rayon::current_num_threads());
    let groups: Vec<Vec<Vec<Cand>>> = plan
        .probes
        .par_chunks(g)
        .zip(plan.rotated.par_chunks(g * d))
        .map_init(
            || {
                (
                    vec![0f32; m * KSUB4],
                    Vec::<QuantizedTables>::new(),
                    GroupScratch::default(),
                )
            },
            |(table, qts, scratch), (probes, queries)| {
                if qts.len() < probes.len() {
                    qts.resize_with(probes.len(), QuantizedTables::default);
                }
                for (qt, q) in qts.iter_mut().zip(queries.chunks_exact(d)) {
                    books.table_into(q, table);
                    qt.quantize(table, m)?;
                }
                let mut heaps: Vec<Reservoir> = probes.iter().map(|_| Reservoir::new(k)).collect();
                // Each query's nearest list first (shared by the queries it
                // is nearest to), then the rest: the heaps start from good
                // thresholds, as in a query-at-a-time scan, before the
                // lists shared widely are scanned.
                scratch.prepare(probes.iter().map(Vec::len).sum());
                let group = Group {
                    isa,
                    qts: &qts[..probes.len()],
                    probes,
                    parts,
                    live,
                };
                group.scan(0..1, scratch, &mut heaps);
                group.scan(1..usize::MAX, scratch, &mut heaps);
                Ok(heaps.into_iter().map(Reservoir::into_sorted).collect())
            },
        )
        .collect::<Result<_>>()?;
    Ok(groups.into_iter().flatten().collect())
}

impl GroupScratch {
    /// Room for `visits` visits in every buffer, so that no band of the
    /// group grows one.
    fn prepare(&mut self, visits: usize) {
        for v in [&mut self.sorted, &mut self.spare] {
            v.clear();
            v.reserve(visits);
        }
        self.runs.clear();
        self.runs.reserve(visits);
    }
}

/// One probe of a group: (list, the probe's rank in its query, the query's
/// place in the group, the list's bias for it).
type Visit = (u32, u32, u32, f32);

/// Reused buffers of [`Group::scan`].
#[derive(Default)]
struct GroupScratch {
    /// The group's visits, by list.
    sorted: Vec<Visit>,
    /// The other buffer of the radix sort.
    spare: Vec<Visit>,
    /// Per visited list: (its best probe rank, start, end in `sorted`).
    runs: Vec<(u32, usize, usize)>,
}

/// The queries of one task of [`fastscan_top_k`]: query `i` probes
/// `probes[i]` with tables `qts[i]`.
struct Group<'g, 'p> {
    isa: Isa,
    qts: &'g [QuantizedTables],
    probes: &'g [Vec<Probe>],
    parts: &'g IvfParts<'p>,
    live: Live<'p>,
}

/// The probes of `ps` whose rank (place in `ps`) is in `ranks`, with it.
fn band(ps: &[Probe], ranks: std::ops::Range<usize>) -> impl Iterator<Item = (usize, &Probe)> {
    ps.iter().enumerate().skip(ranks.start).take(ranks.len())
}

impl Group<'_, '_> {
    /// Scans the lists the group's probes of rank `ranks` name, each once
    /// for all the queries that probe it, into `heaps[i]` (query `i`'s).
    fn scan(&self, ranks: std::ops::Range<usize>, scratch: &mut GroupScratch, heaps: &mut [Reservoir]) {
        let Group {
            isa,
            qts,
            probes,
            parts,
            live,
        } = *self;
        // The band's visits by list, then query: a stable radix sort on the
        // list (8 bits a pass: one pass up to 256 lists, two up to 65,536),
        // linear in the visits whatever the lists, so a single query over
        // thousands of lists pays no pass over all of them. The buffers
        // hold every visit of the group already (`GroupScratch::prepare`):
        // a search allocates the same whatever it probes.
        let GroupScratch { sorted, spare, runs } = scratch;
        sorted.clear();
        for (qi, ps) in probes.iter().enumerate() {
            for (rank, p) in band(ps, ranks.clone()) {
                sorted.push((p.list, rank as u32, qi as u32, p.bias));
            }
        }
        let top = sorted.iter().map(|v| v.0).max().unwrap_or(0);
        let mut shift = 0;
        while shift < 32 && (top >> shift) > 0 {
            let mut at = [0usize; 257];
            for v in sorted.iter() {
                at[((v.0 >> shift) & 255) as usize + 1] += 1;
            }
            for d in 0..256 {
                at[d + 1] += at[d];
            }
            spare.clear();
            spare.resize(sorted.len(), (0, 0, 0, 0.0));
            for v in sorted.iter() {
                let d = ((v.0 >> shift) & 255) as usize;
                spare[at[d]] = *v;
                at[d] += 1;
            }
            std::mem::swap(sorted, spare);
            shift += 8;
        }
        let visits = &*sorted;
        // Each list's run, nearest lists first: a list some query probes first
        // comes before one probed late by all, so thresholds rise early.
        runs.clear();
        let mut start = 0;
        while start < visits.len() {
            let list = visits[start].0;
            let len = visits[start..].iter().take_while(|v| v.0 == list).count();
            let best = visits[start..start + len].iter().map(|v| v.1).min().unwrap_or(0);
            runs.push((best, start, start + len));
            start += len;
        }
        runs.sort_unstable_by_key(|r| (r.0, r.1));
        let lut_len = qts.first().map_or(0, |q| q.lut().len());
        for &(_, start, end) in runs.iter() {
            let Some(list) = parts.lists.lists.get(visits[start].0 as usize) else {
                continue;
            };
            let n = list.rows.len();
            let Some(blocks) = list.codes.get(..n.div_ceil(BLOCK) * lut_len) else {
                continue;
            };
            if n == 0 {
                continue;
            }
            for chunk in visits[start..end].chunks(pq4::MULTI) {
                // The chunk's queries that can still gain from this list.
                let mut slots: [(usize, f32); pq4::MULTI] = [(0, 0.0); pq4::MULTI];
                let mut luts: [&[u8]; pq4::MULTI] = [&[]; pq4::MULTI];
                let mut thrs = [0u16; pq4::MULTI];
                let mut used = 0;
                for &(_, _, qi, bias) in chunk {
                    let qi = qi as usize;
                    if let Some(t0) = qts[qi].min_sum(heaps[qi].threshold(), bias) {
                        slots[used] = (qi, bias);
                        luts[used] = qts[qi].lut();
                        thrs[used] = t0;
                        used += 1;
                    }
                }
                // Each slot's last heap threshold and its `min_sum`: the heap
                // raises its threshold only now and then, so most calls reuse it.
                let mut last: [(f32, Option<u16>); pq4::MULTI] = [(f32::NAN, None); pq4::MULTI];
                pq4::scan_multi(isa, &luts[..used], blocks, &thrs[..used], &mut |s, b, mask, sums| {
                    let (qi, bias) = slots[s];
                    let (qt, heap) = (&qts[qi], &mut heaps[qi]);
                    let mut bits = mask;
                    while bits != 0 {
                        let e = bits.trailing_zeros() as usize;
                        bits &= bits - 1;
                        let entry = b * BLOCK + e;
                        if entry >= n {
                            break; // padding of the last block; later bits are padding too
                        }
                        let row = list.rows[entry];
                        if live.alive.get(row as usize)
                            && let Some(&id) = live.ids.get(row as usize)
                        {
                            heap.push(Cand {
                                score: qt.score(sums[e], bias),
                                id,
                                row,
                            });
                        }
                    }
                    let thr = heap.threshold();
                    if last[s].0.to_bits() != thr.to_bits() {
                        last[s] = (thr, qt.min_sum(thr, bias));
                    }
                    last[s].1
                });
            }
        }
    }
}

/// [`crate::Compute::rerank`].
pub(super) fn rerank(
    isa: Isa,
    queries: &[f32],
    store: StoreRef<'_>,
    ids: &[u64],
    candidates: &[Vec<u32>],
    k: usize,
) -> Vec<Vec<Cand>> {
    let store = store.store;
    let d = store.dim();
    candidates
        .par_iter()
        .enumerate()
        .map(|(qi, rows)| {
            let q = &queries[qi * d..(qi + 1) * d];
            // An 8-bit store scores against the query prepared once.
            enum Scorer<'s> {
                Full(&'s RowMajor),
                Bytes(&'s Sq8Rows, Vec<f32>, f32),
            }
            let scorer = match store {
                RerankStore::Floats(f) => Scorer::Full(f),
                RerankStore::Sq8(s) => {
                    let (qs, bias) = s.prepare(q);
                    Scorer::Bytes(s, qs, bias)
                }
            };
            let score = |r: usize| match &scorer {
                Scorer::Full(f) => f.dot_row(r, q),
                Scorer::Bytes(s, qs, bias) => s.score(isa, r, qs, *bias),
            };
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
                    score: score(r),
                    id: ids[r],
                    row: r as u32,
                });
            }
            heap.into_sorted()
        })
        .collect()
}
