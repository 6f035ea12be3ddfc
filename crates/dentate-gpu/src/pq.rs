//! IVF-PQ on the device (`shaders/pq.wgsl`): lookup tables, the ADC scan of
//! the probed lists, exact re-ranking.

use crate::GpuState;
use crate::device::{Gpu, wgsl, words};
use crate::error::{GpuError, Result};
use crate::resident::{Layout, ResidentIds, ResidentLists, ResidentStore};
use crate::topk::{CAND_BYTES, decode, slots};
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

/// The probes of queries `q0..q0 + nb` as the kernels read them: per probe
/// (first slot, length, bias bits, 0), `nprobe` per query, unused ones empty.
fn probe_words(res: &ResidentLists, probes: &[Vec<Probe>], nprobe: usize) -> Vec<u32> {
    let mut pr = vec![0u32; probes.len() * nprobe * 4];
    for (qi, list) in probes.iter().enumerate() {
        for (j, p) in list.iter().enumerate() {
            let Some(&(off, len, _)) = res.spans.get(p.list as usize) else {
                continue;
            };
            let at = (qi * nprobe + j) * 4;
            pr[at] = off as u32;
            pr[at + 1] = len as u32;
            pr[at + 2] = p.bias.to_bits();
        }
    }
    pr
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
        let kk = slots(k)?;
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
        let c = consts(kk, m, pq.dsub(), false, 1);
        let replace = [("LUT_DECL", decl), ("LUT_FILL", fill)];
        let adc = gpu
            .pipeline(wgsl::PQ, "adc", &c, &replace, table == Table::SharedF16)
            .await?;
        let tables = match table {
            Table::Global => Some(gpu.pipeline(wgsl::PQ, "tables", &c, &replace, false).await?),
            _ => None,
        };
        let nprobe = probes.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let alive_buf = gpu.storage("alive", bytemuck::cast_slice(alive.words()));
        let dummy = gpu.zeroed("unused", 16);
        let per_query = (WG * kk) as u64 * CAND_BYTES;
        let table_bytes = (m * 256 * 4) as u64;
        let nb_max = gpu.queries_per_batch(&[per_query, table_bytes, nprobe as u64 * 16]);
        let mut out = Vec::with_capacity(nq);
        let mut q0 = 0;
        while q0 < nq {
            let nb = (nq - q0).min(nb_max);
            let pr = probe_words(res, &probes[q0..q0 + nb], nprobe);
            let qbuf = gpu.storage("queries", bytemuck::cast_slice(&queries[q0 * d..(q0 + nb) * d]));
            let pbuf = gpu.storage("probes", bytemuck::cast_slice(&pr));
            let partial = gpu.zeroed("partial", nb as u64 * per_query);
            let gtab = match table {
                Table::Global => gpu.zeroed("tables", nb as u64 * table_bytes),
                _ => dummy.clone(),
            };
            let params = gpu.uniform(&words(&[nb as u32, d as u32, nprobe as u32, 0, 0, 0, 0, 0, 0, 0, 0, 0]));
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
                (6, &ids_buf),
                (7, &alive_buf),
                (8, &partial),
            ];
            match table {
                Table::Global => entries.push((9, &gtab)),
                _ => {
                    entries.push((1, &qbuf));
                    entries.push((2, &books));
                }
            }
            let bind = gpu.bind(&adc, &entries);
            gpu.dispatch(&mut enc, &adc, &bind, (nb as u32, 1));
            out.extend(finish_batch(gpu, enc, partial, nb, WG, kk, k).await?);
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
        let kk = slots(k)?;
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
        let c = consts(kk, m2, 1, false, fw);
        let replace = [("LUT_DECL", lut_source(Table::Global).0), ("LUT_FILL", String::new())];
        let pipe = gpu.pipeline(wgsl::PQ, "fastscan", &c, &replace, false).await?;
        let nprobe = probes.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let alive_buf = gpu.storage("alive", bytemuck::cast_slice(alive.words()));
        let per_query = (WG * kk) as u64 * CAND_BYTES;
        let nb_max = gpu.queries_per_batch(&[per_query, (fw + 4) as u64 * 4, nprobe as u64 * 16]);
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
            let partial = gpu.zeroed("partial", nb as u64 * per_query);
            let params = gpu.uniform(&words(&[nb as u32, 0, nprobe as u32, 0, 0, 0, 0, 0, 0, 0, 0, 0]));
            let mut enc = gpu.encoder();
            let bind = gpu.bind(
                &pipe,
                &[
                    (0, &params),
                    (3, &res.codes),
                    (4, &res.rows),
                    (5, &pbuf),
                    (6, &ids_buf),
                    (7, &alive_buf),
                    (8, &partial),
                    (12, &lbuf),
                ],
            );
            gpu.dispatch(&mut enc, &pipe, &bind, (nb as u32, 1));
            out.extend(finish_batch(gpu, enc, partial, nb, WG, kk, k).await?);
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
        let kk = slots(k)?;
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
                "rerank",
                &consts(kk, 4, 1, res.f16, 1),
                &[("LUT_DECL", lut_source(Table::Global).0), ("LUT_FILL", String::new())],
                false,
            )
            .await?;
        let ncand = candidates.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let lists = nchunks * WG;
        let per_query = (lists * kk) as u64 * CAND_BYTES;
        let nb_max = gpu.queries_per_batch(&[per_query, ncand as u64 * 4, d as u64 * 4]);
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
            let partial = gpu.zeroed("partial", nb as u64 * per_query);
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
                let bind = gpu.bind(
                    &pipe,
                    &[
                        (0, &params),
                        (1, &qbuf),
                        (6, &ids_buf),
                        (8, &partial),
                        (10, res.vecs.chunk(c)),
                        (11, &cbuf),
                    ],
                );
                gpu.dispatch(&mut enc, &pipe, &bind, (nb as u32, 1));
            }
            out.extend(finish_batch(gpu, enc, partial, nb, lists, kk, k).await?);
            q0 += nb;
        }
        Ok(out)
    }
}
