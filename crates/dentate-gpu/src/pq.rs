//! IVF-PQ on the device (`shaders/pq.wgsl`): lookup tables, the ADC scan of
//! the probed lists, exact re-ranking.

use crate::GpuState;
use crate::device::{Gpu, wgsl, words};
use crate::error::{GpuError, Result};
use crate::resident::{Layout, ResidentIds, ResidentLists, ResidentStore};
use crate::topk::{CAND_BYTES, Keep, decode, select_pairs};
use dentate_core::fastscan::{QuantizedTables, padded_m};
use dentate_core::topk::Cand;
use dentate_core::{Codebooks, IvfParts, IvfPlan, Probe, StoreRef};

/// Threads per workgroup of the ADC and re-rank kernels (one list each).
const WG: usize = 256;

/// Where the lookup table lives.
pub(crate) type Table = crate::TablePlacement;

/// The placement for `m` sub-quantizers: the one asked for when the
/// adapter allows it, else the fastest that fits its workgroup memory.
fn table_placement(gpu: &Gpu, asked: Table, m: usize) -> Table {
    let limit = gpu.limits.max_compute_workgroup_storage_size as usize;
    let f32_fits = m * 256 * 4 <= limit;
    let f16_fits = gpu.f16 && m * 256 * 2 <= limit;
    match asked {
        Table::Global => Table::Global,
        Table::SharedF16 if f16_fits => Table::SharedF16,
        Table::Shared if f32_fits => Table::Shared,
        _ if f32_fits => Table::Shared,
        _ if f16_fits => Table::SharedF16,
        _ => Table::Global,
    }
}

fn lut_source(t: Table) -> (String, String) {
    match t {
        Table::Auto | Table::Shared => (
            "var<workgroup> lut: array<f32, M * 256u>;\nfn lut_read(q: u32, e: u32) -> f32 { return lut[e]; }".into(),
            "if q < P.nq { for (var e = li; e < M * 256u; e += WG) { lut[e] = table_entry(P.q0 + q, e); } }".into(),
        ),
        Table::SharedF16 => (
            "var<workgroup> lut: array<f16, M * 256u>;\nfn lut_read(q: u32, e: u32) -> f32 { return f32(lut[e]); }"
                .into(),
            "if q < P.nq { for (var e = li; e < M * 256u; e += WG) { lut[e] = f16(table_entry(P.q0 + q, e)); } }"
                .into(),
        ),
        Table::Global => (
            "fn lut_read(q: u32, e: u32) -> f32 { return gtables[q * M * 256u + e]; }".into(),
            String::new(),
        ),
    }
}

/// The constants the host prepends to `pq.wgsl` (see its header); `fw`
/// is 1 for every kernel but `fastscan`.
fn consts(kk: usize, pq_m: usize, dsub: usize, f16_store: bool, fw: usize) -> Vec<(&'static str, String)> {
    vec![
        ("K", format!("{kk}u")),
        ("M", format!("{pq_m}u")),
        ("DSUB", format!("{dsub}u")),
        ("W", format!("{}u", pq_m.div_ceil(4))),
        ("F16", f16_store.to_string()),
        ("FW", format!("{fw}u")),
    ]
}

/// Finishes a batch of `nq` queries whose scan wrote `lists` sorted lists
/// of `kk` slots each (NONE rows last) into `partial`: `fold` passes sort
/// 16 lists into one (a workgroup each) until one is left per query, then `enc` is submitted
/// and the one list per query read back and decoded to its best `k`.
async fn finish_batch(
    gpu: &Gpu,
    mut enc: wgpu::CommandEncoder,
    partial: wgpu::Buffer,
    nq: usize,
    mut lists: usize,
    kk: usize,
    k: usize,
) -> Result<Vec<Vec<Cand>>> {
    const FAN_IN: usize = 16;
    let pipe = gpu
        .pipeline(
            wgsl::PQ,
            "fold",
            &consts(kk, 4, 1, false, 1),
            &[("LUT_DECL", lut_source(Table::Global).0), ("LUT_FILL", String::new())],
            false,
        )
        .await?;
    let mut cur = partial;
    while lists > 1 {
        let out_lists = lists.div_ceil(FAN_IN);
        let out = gpu.zeroed("folded", (nq * out_lists * kk) as u64 * CAND_BYTES);
        let params = gpu.uniform(&words(&[lists as u32, out_lists as u32, nq as u32, 0]));
        let bind = gpu.bind(&pipe, &[(20, &params), (21, &cur), (22, &out)]);
        gpu.dispatch(&mut enc, &pipe, &bind, (out_lists as u32, nq as u32));
        cur = out;
        lists = out_lists;
    }
    let bytes = gpu.submit_and_read(enc, &cur, 0, (nq * kk) as u64 * CAND_BYTES).await?;
    Ok(decode(&bytes, nq, kk, k))
}

/// The wide path's finish (k above the per-thread lists): the scans wrote
/// `len` (score, row) pairs per query into `wide`; select the best `kk`
/// of each on the device, submit `enc`, read back and decode the best `k`.
async fn finish_wide(
    gpu: &Gpu,
    mut enc: wgpu::CommandEncoder,
    (wide, ids): (wgpu::Buffer, &wgpu::Buffer),
    (nq, len): (usize, usize),
    kk: usize,
    k: usize,
) -> Result<Vec<Vec<Cand>>> {
    let best = select_pairs(gpu, &mut enc, (&wide, ids), nq, len, kk).await?;
    let bytes = gpu
        .submit_and_read(enc, &best, 0, (nq * kk) as u64 * CAND_BYTES)
        .await?;
    gpu.recycle([wide]);
    Ok(decode(&bytes, nq, kk, k))
}

/// Entries a query's probes cover (the wide path's places per query: the
/// most of any query), at least 1.
fn probed_entries(res: &ResidentLists, probes: &[Vec<Probe>]) -> usize {
    probes
        .iter()
        .map(|list| {
            list.iter()
                .filter_map(|p| res.spans.get(p.list as usize))
                .map(|&(_, len, _)| len)
                .sum::<usize>()
        })
        .max()
        .unwrap_or(0)
        .max(1)
}

/// The probes of queries `q0..q0 + nb` as the kernels read them: per probe
/// (first slot, length, bias bits, place of its first entry among the
/// query's probed entries), `nprobe` per query, unused ones empty.
fn probe_words(res: &ResidentLists, probes: &[Vec<Probe>], nprobe: usize) -> Vec<u32> {
    let mut pr = vec![0u32; probes.len() * nprobe * 4];
    for (qi, list) in probes.iter().enumerate() {
        let mut place = 0u32;
        for (j, p) in list.iter().enumerate() {
            let Some(&(off, len, _)) = res.spans.get(p.list as usize) else {
                continue;
            };
            let at = (qi * nprobe + j) * 4;
            pr[at] = off as u32;
            pr[at + 1] = len as u32;
            pr[at + 2] = p.bias.to_bits();
            pr[at + 3] = place;
            place += len as u32;
        }
    }
    pr
}

/// Bytes per query of a scan's output (wide: `places` pairs and the
/// selection's segment lists; lists: `lists` per-thread lists), for
/// [`Gpu::queries_per_batch`].
fn wide_or_lists(keep: Keep, places: usize, lists: usize, gpu: &Gpu) -> Vec<u64> {
    match keep {
        Keep::Wide(kk) => {
            let segs = places.div_ceil(crate::topk::seg_len(gpu)) as u64;
            vec![places as u64 * 8, segs * kk as u64 * CAND_BYTES]
        }
        Keep::Lists(kk) => vec![(lists * kk) as u64 * CAND_BYTES],
    }
}

/// A scan's output buffer for `nq` queries: `places` pairs each (wide;
/// scratch, every place is written) or `lists` lists of K slots each.
fn scan_output(gpu: &Gpu, keep: Keep, nq: usize, places: usize, lists: usize) -> wgpu::Buffer {
    match keep {
        Keep::Wide(_) => gpu.scratch("scan pairs", (nq * places) as u64 * 8),
        Keep::Lists(kk) => gpu.zeroed("partial", (nq * lists * kk) as u64 * CAND_BYTES),
    }
}

/// The bindings of a scan's output: `wide` (pq.wgsl binding 13), or
/// `out_top` (8) and the ids its lists read to break ties (6).
fn outputs<'a>(keep: Keep, out: &'a wgpu::Buffer, ids: &'a wgpu::Buffer) -> Vec<(u32, &'a wgpu::Buffer)> {
    if keep.wide() {
        vec![(13, out)]
    } else {
        vec![(8, out), (6, ids)]
    }
}

/// A batch's end: the wide selection ([`finish_wide`]) or the fold of the
/// per-thread lists ([`finish_batch`]); `(nq, places, lists)`.
async fn finish_scan(
    gpu: &Gpu,
    enc: wgpu::CommandEncoder,
    keep: Keep,
    (out, ids): (wgpu::Buffer, &wgpu::Buffer),
    (nq, places, lists): (usize, usize, usize),
    k: usize,
) -> Result<Vec<Vec<Cand>>> {
    match keep {
        Keep::Wide(kk) => finish_wide(gpu, enc, (out, ids), (nq, places), kk, k).await,
        Keep::Lists(kk) => finish_batch(gpu, enc, out, nq, lists, kk, k).await,
    }
}

impl GpuState {
    /// The device copy of `ids` (kept with the storage identity they share
    /// with the lists and the re-rank store).
    fn ids_buffer(&mut self, uid: u64, epoch: u64, ids: &[u64]) -> Result<wgpu::Buffer> {
        let gpu = &self.gpu;
        let r = self.ids.get(
            uid,
            |r| r.sync(gpu, uid, epoch, ids),
            || ResidentIds::new(gpu, uid, epoch, ids),
        )?;
        Ok(r.buffer().cloned().unwrap_or_else(|| gpu.zeroed("ids", 16)))
    }

    fn codebooks(&mut self, books: Codebooks<'_>) -> wgpu::Buffer {
        let books = books.flat();
        if let Some((host, buf)) = &self.books
            && host.as_slice() == books
        {
            return buf.clone();
        }
        let buf = self.gpu.storage("codebooks", bytemuck::cast_slice(books));
        self.books = Some((books.to_vec(), buf.clone()));
        buf
    }

    /// The ADC scan with per-query tables and a device top-k of `k` (the
    /// plan's shortlist, clamped by the caller).
    pub(crate) async fn adc_top_k(&mut self, parts: &IvfParts<'_>, plan: &IvfPlan, k: usize) -> Result<Vec<Vec<Cand>>> {
        let (queries, probes, lists, ids, alive) = (&plan.rotated, &plan.probes, &parts.lists, parts.ids, parts.alive);
        let pq = parts.books;
        let keep = Keep::of(k)?;
        let (m, d) = (pq.m(), pq.dim());
        let nq = probes.len();
        // Ids are keyed like the lists (one row table serves both).
        let ids_buf = self.ids_buffer(lists.uid, lists.epoch, ids)?;
        let books = self.codebooks(pq);
        let gpu = &self.gpu;
        let res = self.lists.get(
            lists.uid,
            |r| Ok(r.sync(gpu, lists, Layout::Rows)),
            || ResidentLists::new(gpu, lists, Layout::Rows),
        )?;
        let table = table_placement(gpu, self.table, m);
        let (decl, fill) = lut_source(table);
        let c = consts(keep.kernel_k(), m, pq.dsub(), false, 1);
        let replace = [("LUT_DECL", decl), ("LUT_FILL", fill)];
        let entry = if keep.wide() { "adc_wide" } else { "adc" };
        let adc = gpu
            .pipeline(wgsl::PQ, entry, &c, &replace, table == Table::SharedF16)
            .await?;
        let tables = match table {
            Table::Global => Some(gpu.pipeline(wgsl::PQ, "tables", &c, &replace, false).await?),
            _ => None,
        };
        let nprobe = probes.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let alive_buf = gpu.storage("alive", bytemuck::cast_slice(alive.words()));
        let dummy = gpu.zeroed("unused", 16);
        let places = if keep.wide() { probed_entries(res, probes) } else { 0 };
        let per_query = wide_or_lists(keep, places, WG, gpu);
        let table_bytes = (m * 256 * 4) as u64;
        let mut sizes = vec![table_bytes, nprobe as u64 * 16];
        sizes.extend(per_query);
        let nb_max = gpu.queries_per_batch(&sizes);
        let mut out = Vec::with_capacity(nq);
        let mut q0 = 0;
        while q0 < nq {
            let nb = (nq - q0).min(nb_max);
            let pr = probe_words(res, &probes[q0..q0 + nb], nprobe);
            let qbuf = gpu.storage("queries", bytemuck::cast_slice(&queries[q0 * d..(q0 + nb) * d]));
            let pbuf = gpu.storage("probes", bytemuck::cast_slice(&pr));
            let out_buf = scan_output(gpu, keep, nb, places, WG);
            let gtab = match table {
                Table::Global => gpu.zeroed("tables", nb as u64 * table_bytes),
                _ => dummy.clone(),
            };
            let params = gpu.uniform(&words(&[
                nb as u32,
                d as u32,
                nprobe as u32,
                0,
                places as u32,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
            ]));
            let mut enc = gpu.encoder();
            if let Some(tp) = &tables {
                let bind = gpu.bind(tp, &[(0, &params), (1, &qbuf), (2, &books), (9, &gtab)]);
                gpu.dispatch(&mut enc, tp, &bind, (nb as u32, 1));
            }
            let mut entries = vec![
                (0, &params),
                (3, &res.codes),
                (4, &res.rows),
                (5, &pbuf),
                (7, &alive_buf),
            ];
            entries.extend(outputs(keep, &out_buf, &ids_buf));
            match table {
                Table::Global => entries.push((9, &gtab)),
                _ => {
                    entries.push((1, &qbuf));
                    entries.push((2, &books));
                }
            }
            let bind = gpu.bind(&adc, &entries);
            gpu.dispatch(&mut enc, &adc, &bind, (nb as u32, 1));
            out.extend(finish_scan(gpu, enc, keep, (out_buf, &ids_buf), (nb, places, WG), k).await?);
            q0 += nb;
        }
        Ok(out)
    }

    /// The 4-bit fast-scan with the host's quantised tables (`tables[q]`
    /// for query `q`, from `dentate_core::fastscan::query_tables`) and a
    /// device top-k of `k` (the plan's shortlist, clamped by the caller).
    pub(crate) async fn fastscan_top_k(
        &mut self,
        tables: &[QuantizedTables],
        parts: &IvfParts<'_>,
        plan: &IvfPlan,
        k: usize,
    ) -> Result<Vec<Vec<Cand>>> {
        let (probes, lists, ids, alive) = (&plan.probes, &parts.lists, parts.ids, parts.alive);
        let m = parts.books.m();
        let keep = Keep::of(k)?;
        let m2 = padded_m(m);
        let fw = 4 * m2;
        let nq = probes.len().min(tables.len());
        let gpu = &self.gpu;
        if (fw * 4) as u64 > u64::from(gpu.limits.max_compute_workgroup_storage_size) {
            return Err(GpuError::Unsupported(format!(
                "fast-scan tables of {m} sub-quantizers exceed the workgroup memory"
            )));
        }
        let ids_buf = self.ids_buffer(lists.uid, lists.epoch, ids)?;
        let gpu = &self.gpu;
        let res = self.lists.get(
            lists.uid,
            |r| Ok(r.sync(gpu, lists, Layout::Packed)),
            || ResidentLists::new(gpu, lists, Layout::Packed),
        )?;
        let c = consts(keep.kernel_k(), m2, 1, false, fw);
        let replace = [("LUT_DECL", lut_source(Table::Global).0), ("LUT_FILL", String::new())];
        let entry = if keep.wide() { "fastscan_wide" } else { "fastscan" };
        let pipe = gpu.pipeline(wgsl::PQ, entry, &c, &replace, false).await?;
        let nprobe = probes.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let alive_buf = gpu.storage("alive", bytemuck::cast_slice(alive.words()));
        let unused = gpu.zeroed("unused", 16);
        let places = if keep.wide() { probed_entries(res, probes) } else { 0 };
        let mut sizes = vec![(fw + 4) as u64 * 4, nprobe as u64 * 16];
        sizes.extend(wide_or_lists(keep, places, WG, gpu));
        let nb_max = gpu.queries_per_batch(&sizes);
        let mut out = Vec::with_capacity(nq);
        let mut q0 = 0;
        while q0 < nq {
            let nb = (nq - q0).min(nb_max);
            let pr = probe_words(res, &probes[q0..q0 + nb], nprobe);
            let mut luts = Vec::with_capacity(nb * (fw + 4));
            for t in &tables[q0..q0 + nb] {
                luts.extend([t.scale().to_bits(), t.offset().to_bits(), 0, 0]);
                luts.extend(
                    t.lut()
                        .chunks_exact(4)
                        .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
                );
            }
            let lbuf = gpu.storage("fast-scan tables", bytemuck::cast_slice(&luts));
            let pbuf = gpu.storage("probes", bytemuck::cast_slice(&pr));
            let out_buf = scan_output(gpu, keep, nb, places, WG);
            let params = gpu.uniform(&words(&[
                nb as u32,
                0,
                nprobe as u32,
                0,
                places as u32,
                0,
                0,
                0,
                0,
                0,
                0,
                0,
            ]));
            let mut enc = gpu.encoder();
            let mut entries = vec![
                (0, &params),
                (3, &res.codes),
                (4, &res.rows),
                (5, &pbuf),
                (7, &alive_buf),
                (12, &lbuf),
            ];
            entries.extend(outputs(keep, &out_buf, &ids_buf));
            // Both variants share `fs_scan`, which names the other's
            // bindings too (ids for the lists' ties, `wide`).
            if keep.wide() {
                entries.push((6, &ids_buf));
            } else {
                entries.push((13, &unused));
            }
            let bind = gpu.bind(&pipe, &entries);
            gpu.dispatch(&mut enc, &pipe, &bind, (nb as u32, 1));
            out.extend(finish_scan(gpu, enc, keep, (out_buf, &ids_buf), (nb, places, WG), k).await?);
            q0 += nb;
        }
        Ok(out)
    }

    /// Exact re-ranking of candidate rows against the stored vectors.
    pub(crate) async fn rerank(
        &mut self,
        queries: &[f32],
        store: &StoreRef<'_>,
        ids: &[u64],
        candidates: &[Vec<u32>],
        k: usize,
    ) -> Result<Vec<Vec<Cand>>> {
        let keep = Keep::of(k)?;
        let d = store.rows.dim();
        let nq = candidates.len();
        let ids_buf = self.ids_buffer(store.uid, store.epoch, ids)?;
        let gpu = &self.gpu;
        let res = self
            .stores
            .get(store.uid, |r| r.sync(gpu, store), || ResidentStore::new(gpu, store))?;
        let chunk_rows = res.vecs.chunk_rows();
        let nchunks = store.rows.len().div_ceil(chunk_rows).max(1);
        if nchunks > res.vecs.chunks() && !store.rows.is_empty() {
            return Err(GpuError::Device("the re-rank store is not resident".into()));
        }
        let pipe = gpu
            .pipeline(
                wgsl::PQ,
                if keep.wide() { "rerank_wide" } else { "rerank" },
                &consts(keep.kernel_k(), 4, 1, res.f16, 1),
                &[("LUT_DECL", lut_source(Table::Global).0), ("LUT_FILL", String::new())],
                false,
            )
            .await?;
        let ncand = candidates.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let lists = nchunks * WG;
        let mut sizes = vec![ncand as u64 * 4, d as u64 * 4];
        sizes.extend(wide_or_lists(keep, ncand, lists, gpu));
        let nb_max = gpu.queries_per_batch(&sizes);
        let mut out = Vec::with_capacity(nq);
        let mut q0 = 0;
        while q0 < nq {
            let nb = (nq - q0).min(nb_max);
            let mut cands = vec![u32::MAX; nb * ncand];
            for (qi, rows) in candidates[q0..q0 + nb].iter().enumerate() {
                cands[qi * ncand..qi * ncand + rows.len()].copy_from_slice(rows);
            }
            let qbuf = gpu.storage("queries", bytemuck::cast_slice(&queries[q0 * d..(q0 + nb) * d]));
            let cbuf = gpu.storage("candidates", bytemuck::cast_slice(&cands));
            let out_buf = scan_output(gpu, keep, nb, ncand, lists);
            let mut enc = gpu.encoder();
            for c in 0..nchunks {
                let row0 = c * chunk_rows;
                let nrows = store.rows.len().saturating_sub(row0).min(chunk_rows);
                let params = gpu.uniform(&words(&[
                    nb as u32,
                    d as u32,
                    0,
                    0,
                    ncand as u32,
                    row0 as u32,
                    nrows as u32,
                    (c * WG) as u32,
                    lists as u32,
                    res.words as u32,
                    0,
                    0,
                ]));
                let mut entries = vec![(0, &params), (1, &qbuf), (10, res.vecs.chunk(c)), (11, &cbuf)];
                entries.extend(outputs(keep, &out_buf, &ids_buf));
                let bind = gpu.bind(&pipe, &entries);
                gpu.dispatch(&mut enc, &pipe, &bind, (nb as u32, 1));
            }
            out.extend(finish_scan(gpu, enc, keep, (out_buf, &ids_buf), (nb, ncand, lists), k).await?);
            q0 += nb;
        }
        Ok(out)
    }
}
