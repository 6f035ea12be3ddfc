//! IVF-PQ on the device (`shaders/pq.wgsl`): lookup tables, the ADC scan of
//! the probed lists, exact re-ranking. Each kernel writes every entry it
//! scores as a (score, row) pair; exact search's selection
//! ([`select_pairs`]) keeps the best `k` of each query on the device.

use crate::GpuState;
use crate::device::{Gpu, wgsl, words};
use crate::error::{GpuError, Result};
use crate::resident::{Layout, ResidentIds, ResidentLists, ResidentStore, alive_words};
use crate::topk::{CAND_BYTES, MAX_EXACT_K, decode, seg_len, select_pairs};
use dentate_core::fastscan::{QuantizedTables, padded_m};
use dentate_core::topk::Cand;
use dentate_core::{Codebooks, IvfParts, IvfPlan, Probe, RerankStore, StoreFormat, StoreRef};

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
fn consts(pq_m: usize, dsub: usize, store: StoreFormat, fw: usize) -> Vec<(&'static str, String)> {
    vec![
        ("M", format!("{pq_m}u")),
        ("DSUB", format!("{dsub}u")),
        ("W", format!("{}u", pq_m.div_ceil(4))),
        ("F16", (store == StoreFormat::F16).to_string()),
        ("SQ8", (store == StoreFormat::Sq8).to_string()),
        ("FW", format!("{fw}u")),
    ]
}

/// A batch's end: the kernels wrote `len` (score, row) pairs per query
/// into `scored`; select the best `kk` of each on the device, submit
/// `enc`, read back and decode the best `k`.
async fn finish(
    gpu: &Gpu,
    mut enc: wgpu::CommandEncoder,
    (scored, ids): (wgpu::Buffer, &wgpu::Buffer),
    (nq, len): (usize, usize),
    kk: usize,
    k: usize,
) -> Result<Vec<Vec<Cand>>> {
    let best = select_pairs(gpu, &mut enc, (&scored, ids), nq, len, kk).await?;
    let bytes = gpu
        .submit_and_read(enc, &best, 0, (nq * kk) as u64 * CAND_BYTES)
        .await?;
    gpu.recycle([scored]);
    Ok(decode(&bytes, nq, kk, k))
}

/// Entries a query's probes cover (the places per query of the scans'
/// output: the most of any query), at least 1.
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

/// Slots of the best-`k` lists (no more than exact search sorts and
/// merges).
fn keep(k: usize) -> Result<usize> {
    if k > MAX_EXACT_K {
        return Err(GpuError::Unsupported(format!("k = {k} > {MAX_EXACT_K}")));
    }
    Ok(k.max(1))
}

/// Bytes per query of a scan's output (`places` pairs) and of its
/// selection's segment lists, for [`Gpu::queries_per_batch`].
fn output_bytes(gpu: &Gpu, places: usize, kk: usize) -> [u64; 2] {
    let segs = places.div_ceil(seg_len(gpu)) as u64;
    [places as u64 * 8, segs * kk as u64 * CAND_BYTES]
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
        let kk = keep(k)?;
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
        let c = consts(m, pq.dsub(), StoreFormat::F32, 1);
        let replace = [("LUT_DECL", decl), ("LUT_FILL", fill)];
        let adc = gpu
            .pipeline(wgsl::PQ, "adc", &c, &replace, table == Table::SharedF16)
            .await?;
        let tables = match table {
            Table::Global => Some(gpu.pipeline(wgsl::PQ, "tables", &c, &replace, false).await?),
            _ => None,
        };
        let nprobe = probes.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let alive_buf = alive_words(&mut self.alive, gpu, alive, (0, alive.words().len()))?;
        let dummy = gpu.zeroed("unused", 16);
        let places = probed_entries(res, probes);
        let table_bytes = (m * 256 * 4) as u64;
        let mut sizes = vec![table_bytes, nprobe as u64 * 16];
        sizes.extend(output_bytes(gpu, places, kk));
        let nb_max = gpu.queries_per_batch(&sizes);
        let mut out = Vec::with_capacity(nq);
        let mut q0 = 0;
        while q0 < nq {
            let nb = (nq - q0).min(nb_max);
            let pr = probe_words(res, &probes[q0..q0 + nb], nprobe);
            let qbuf = gpu.storage("queries", bytemuck::cast_slice(&queries[q0 * d..(q0 + nb) * d]));
            let pbuf = gpu.storage("probes", bytemuck::cast_slice(&pr));
            // Scratch: every place is written.
            let scored = gpu.scratch("scored entries", (nb * places) as u64 * 8);
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
                (13, &scored),
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
            out.extend(finish(gpu, enc, (scored, &ids_buf), (nb, places), kk, k).await?);
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
        let kk = keep(k)?;
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
        let c = consts(m2, 1, StoreFormat::F32, fw);
        let replace = [("LUT_DECL", lut_source(Table::Global).0), ("LUT_FILL", String::new())];
        let pipe = gpu.pipeline(wgsl::PQ, "fastscan", &c, &replace, false).await?;
        let nprobe = probes.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let alive_buf = alive_words(&mut self.alive, gpu, alive, (0, alive.words().len()))?;
        let places = probed_entries(res, probes);
        let mut sizes = vec![(fw + 4) as u64 * 4, nprobe as u64 * 16];
        sizes.extend(output_bytes(gpu, places, kk));
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
            // Scratch: every place is written.
            let scored = gpu.scratch("scored entries", (nb * places) as u64 * 8);
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
            let entries = [
                (0, &params),
                (3, &res.codes),
                (4, &res.rows),
                (5, &pbuf),
                (7, &alive_buf),
                (12, &lbuf),
                (13, &scored),
            ];
            let bind = gpu.bind(&pipe, &entries);
            gpu.dispatch(&mut enc, &pipe, &bind, (nb as u32, 1));
            out.extend(finish(gpu, enc, (scored, &ids_buf), (nb, places), kk, k).await?);
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
        let kk = keep(k)?;
        let d = store.store.dim();
        let nq = candidates.len();
        // An 8-bit store scores `bias + Σ qs_j · c_j`: the device gets `qs`
        // in place of the query and the sum, the bias is added here (a
        // per-query constant: it moves no candidate past another).
        let sq8 = match store.store {
            RerankStore::Sq8(s) => {
                let (mut all, mut biases) = (Vec::with_capacity(queries.len()), Vec::with_capacity(nq));
                for q in queries.chunks_exact(d.max(1)).take(nq) {
                    let (qs, bias) = s.prepare(q);
                    all.extend(qs);
                    biases.push(bias);
                }
                Some((all, biases))
            }
            RerankStore::Floats(_) => None,
        };
        let queries = sq8.as_ref().map_or(queries, |(qs, _)| qs.as_slice());
        let ids_buf = self.ids_buffer(store.uid, store.epoch, ids)?;
        let gpu = &self.gpu;
        let res = self
            .stores
            .get(store.uid, |r| r.sync(gpu, store), || ResidentStore::new(gpu, store))?;
        let chunk_rows = res.vecs.chunk_rows();
        let nchunks = store.store.len().div_ceil(chunk_rows).max(1);
        if nchunks > res.vecs.chunks() && !store.store.is_empty() {
            return Err(GpuError::Device("the re-rank store is not resident".into()));
        }
        let pipe = gpu
            .pipeline(
                wgsl::PQ,
                "rerank",
                &consts(4, 1, res.format, 1),
                &[("LUT_DECL", lut_source(Table::Global).0), ("LUT_FILL", String::new())],
                false,
            )
            .await?;
        let ncand = candidates.iter().map(Vec::len).max().unwrap_or(0).max(1);
        let mut sizes = vec![ncand as u64 * 4, d as u64 * 4];
        sizes.extend(output_bytes(gpu, ncand, kk));
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
            // Scratch: every place is written (the first chunk's dispatch
            // writes the unused ones).
            let scored = gpu.scratch("scored candidates", (nb * ncand) as u64 * 8);
            let mut enc = gpu.encoder();
            for c in 0..nchunks {
                let row0 = c * chunk_rows;
                let nrows = store.store.len().saturating_sub(row0).min(chunk_rows);
                let params = gpu.uniform(&words(&[
                    nb as u32,
                    d as u32,
                    0,
                    0,
                    ncand as u32,
                    row0 as u32,
                    nrows as u32,
                    0,
                    0,
                    res.words as u32,
                    0,
                    0,
                ]));
                let bind = gpu.bind(
                    &pipe,
                    &[
                        (0, &params),
                        (1, &qbuf),
                        (10, res.vecs.chunk(c)),
                        (11, &cbuf),
                        (13, &scored),
                    ],
                );
                gpu.dispatch(&mut enc, &pipe, &bind, (nb as u32, 1));
            }
            out.extend(finish(gpu, enc, (scored, &ids_buf), (nb, ncand), kk, k).await?);
            q0 += nb;
        }
        if let Some((_, biases)) = &sq8 {
            for (cands, &bias) in out.iter_mut().zip(biases) {
                for c in cands {
                    c.score += bias; // bias + dot: f32 addition commutes, as the CPU adds it
                }
            }
        }
        Ok(out)
    }
}
