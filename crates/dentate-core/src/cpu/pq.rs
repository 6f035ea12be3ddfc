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
use crate::views::{InvList, IvfParts, IvfPlan, StoreRef};
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

/// [`crate::Compute::fastscan_top_k`].
pub(super) fn fastscan_top_k(isa: Isa, parts: &IvfParts<'_>, plan: &IvfPlan) -> Result<Vec<Vec<Cand>>> {
    let books = parts.books;
    check_books(books)?;
    let m = books.m();
    let live = Live::of(parts);
    each_query(
        parts,
        plan,
        || (vec![0f32; m * KSUB4], QuantizedTables::default()),
        |(table, qt), q| {
            books.table_into(q, table);
            qt.quantize(table, m)
        },
        |(_, qt), list, bias, heap| scan_packed_list(isa, qt, list, bias, live, heap),
    )
}

/// Scans one list of packed 4-bit codes with quantised tables on `isa`,
/// offering live candidates to `heap` (the scan of [`crate::fastscan`]'s
/// documentation). A list whose blocks are shorter than its rows need is
/// skipped.
fn scan_packed_list(isa: Isa, qt: &QuantizedTables, list: &InvList, bias: f32, live: Live<'_>, heap: &mut Reservoir) {
    let n = list.rows.len();
    let bb = qt.lut().len();
    let Some(blocks) = list.codes.get(..n.div_ceil(BLOCK) * bb) else {
        return;
    };
    if n == 0 {
        return;
    }
    let Some(t0) = qt.min_sum(heap.threshold(), bias) else {
        return;
    };
    pq4::scan(isa, qt.lut(), blocks, t0, &mut |b, mask, sums| {
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
        qt.min_sum(heap.threshold(), bias)
    });
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
