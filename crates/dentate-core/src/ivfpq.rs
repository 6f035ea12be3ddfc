//! IVF-PQ: a coarse quantizer of `nlist` spherical centroids, residuals
//! product-quantized to `m` codes, optional OPQ rotation in front, optional
//! exact re-ranking from stored f16/f32 vectors.
//!
//! Cosine = inner product on unit vectors, so with residual encoding the
//! score of `x = c + r` is `<q, c> + <q, r̂>`: one lookup table per query
//! (`m × ksub` inner products) serves every probed list, and `<q, c>` comes
//! for free from the coarse search. No per-list tables are needed (those are
//! for L2). Without residual encoding ([`IvfPqConfig::residual_codes`]
//! false, the fast-scan default) the codes quantise `x` itself and a probe
//! adds nothing: the lists only choose which codes are scanned.
//!
//! Two code widths share everything but the scan ([`PqCodes`]): 8-bit codes
//! (256 centroids per sub-quantizer, row-major, float tables) and 4-bit
//! **fast-scan** codes (16 centroids, packed in blocks of 32, u8 tables
//! read with SIMD shuffles; [`crate::fastscan`]). With `nlist = 1` the index
//! is flat PQ: the one centroid is the mean of the training vectors, so the
//! codes quantise each vector's offset from it and every query scans them all.

use crate::backend::default_compute;
use crate::codebook::PqCodes;
use crate::compute::{Compute, Metric};
use crate::error::{Error, Result};
use crate::fastscan::{checked_packed_len, pack_entry, unpack_entry};
use crate::index::{Index, check_search, clamp_k};
use crate::io::{IndexKind, Reader, Writer, open, read_file, write_atomic};
use crate::kmeans::{Init, KMeans, KMeansConfig};
use crate::layout::{Floats, Panels, RowMajor};
use crate::opq::{OpqConfig, OpqRotation};
use crate::pq::{PqTrainConfig, ProductQuantizer, ksub_for};
use crate::rows::RowTable;
use crate::store::{RerankStore, Sq8Rows, StoreFormat};
use crate::topk::{Cand, Hit};
use crate::views::{BaseRef, InvList, InvertedRef, Probe, StoreRef, new_uid};
// The scan's views live in `views` (the compute interface reads them); the
// index hands them out ([`IvfPqIndex::parts`], [`IvfPqIndex::plan`]).
use crate::vector::{Bitset, Precision, batch_len, check_add, normalized};
pub use crate::views::{IvfParts, IvfPlan};
use std::path::Path;
use std::sync::Arc;

/// Largest number of inverted lists an index accepts.
pub const MAX_NLIST: usize = 1 << 22;

/// Build settings of an [`IvfPqIndex`].
#[derive(Debug, Clone)]
pub struct IvfPqConfig {
    /// Inverted lists (coarse centroids); 1 = flat PQ.
    pub nlist: usize,
    /// PQ sub-quantizers (codes per vector); must divide the dimension.
    pub m: usize,
    /// Code width and scan: 8-bit or 4-bit fast-scan.
    pub codes: PqCodes,
    /// Learn an OPQ rotation before IVF and PQ (fitted to PQ codes of this
    /// index's width, whatever `opq_config.pq_bits` says).
    pub opq: bool,
    /// Keep the vectors in this format for re-ranking the PQ shortlist
    /// (f32 or f16: exact; 8-bit scalar-quantized: half of f16's bytes,
    /// [`crate::store`]), or `None`: keep none; re-ranking is then
    /// unavailable.
    pub rerank_store: Option<StoreFormat>,
    /// Default lists probed per query.
    pub nprobe: usize,
    /// Default re-rank factor: the best `k × rerank` PQ candidates are
    /// re-scored exactly (0 = no re-ranking).
    pub rerank: usize,
    /// Lloyd iterations of the coarse quantizer.
    pub kmeans_iterations: usize,
    /// Lloyd iterations of each PQ sub-quantizer.
    pub pq_iterations: usize,
    /// Coarse k-means trains on at most this many points per list (FAISS: 256).
    pub kmeans_points_per_list: usize,
    /// How the coarse k-means starts: k-means++ (one pass over the sample
    /// per list) or `nlist` random sample points (FAISS's IVF).
    pub coarse_init: Init,
    /// Coarse centroids: `true` = spherical k-means (unit centroids, as
    /// FAISS's IVF trains for inner product), `false` = inner-product
    /// k-means (centroids are the means of their vectors), whose shorter
    /// residuals PQ codes more accurately but whose lists are less even
    /// (BENCHMARKS.md, "IVF coverage"); with codes of the vectors
    /// (`residual_codes` false) only the evenness differs.
    pub spherical_coarse: bool,
    /// `true`: PQ codes encode each vector's residual from its list's
    /// centroid, and a probe adds `<q, centroid>` to the codes' score;
    /// `false`: they encode the (rotated) vector itself, the same codebooks
    /// for every list, and a probe adds nothing (FAISS's
    /// `IndexIVFPQFastScan` for inner product: `by_residual` false).
    pub residual_codes: bool,
    /// OPQ training settings.
    pub opq_config: OpqConfig,
    /// Seed of all training randomness.
    pub seed: u64,
}

impl IvfPqConfig {
    /// Defaults for `nlist` lists and `m` 8-bit sub-quantizers: no OPQ, f16
    /// re-rank store, nprobe 16, re-rank factor 4.
    pub fn new(nlist: usize, m: usize) -> Self {
        IvfPqConfig {
            nlist,
            m,
            codes: PqCodes::Pq8,
            opq: false,
            rerank_store: Some(StoreFormat::F16),
            nprobe: 16,
            rerank: 4,
            kmeans_iterations: 25,
            pq_iterations: 25,
            kmeans_points_per_list: 256,
            // k-means++ costs a pass over the sample per list: above 256
            // lists its start costs more than the iterations.
            coarse_init: if nlist > 256 { Init::Random } else { Init::PlusPlus },
            spherical_coarse: true,
            residual_codes: true,
            opq_config: OpqConfig::default(),
            seed: 42,
        }
    }

    /// Defaults for a 4-bit fast-scan index of `nlist` lists and `m`
    /// sub-quantizers (`m/2` code bytes per vector; `m = dim/2` or `dim/4`
    /// are the usual choices): f16 re-rank store, nprobe 16, re-rank factor
    /// 10, 10 coarse k-means iterations on at most 256 points per list
    /// (both as FAISS's IVF; over 20 seeds a 64-point sample covered
    /// 0.2–0.7 point less of the true neighbours at nprobe 8–32 on both
    /// sets, BENCHMARKS.md "The coarse sample"), from random starting
    /// centroids (as FAISS; chosen on the Rust-doc set, where its lists
    /// cover as much as k-means++'s and are more even, and checked on the
    /// Python one, BENCHMARKS.md "A random start"), spherical coarse k-means and codes of
    /// the vectors rather than of residuals (both as FAISS's IVF fast-scan
    /// for inner product; chosen on the Rust-doc set and checked on the
    /// Python one, BENCHMARKS.md "Codes of the vectors"), OPQ (when
    /// enabled) with 20 outer iterations on at most 16,384 vectors.
    pub fn fastscan(nlist: usize, m: usize) -> Self {
        let mut cfg = IvfPqConfig::new(nlist, m);
        cfg.codes = PqCodes::FastScan4;
        cfg.rerank = 10;
        cfg.kmeans_iterations = 10;
        cfg.coarse_init = Init::Random;
        cfg.spherical_coarse = true;
        cfg.residual_codes = false;
        // 16 centroids per sub-space: a quarter of the 8-bit sample fits
        // the rotation as well, at a quarter of the cost per iteration.
        cfg.opq_config.max_train = 16_384;
        // With re-ranking, recall stops moving after ~20 outer iterations.
        cfg.opq_config.iterations = 20;
        cfg
    }

    /// A flat (single-list) 4-bit fast-scan index: every query scans every
    /// code, then re-ranks.
    pub fn flat_fastscan(m: usize) -> Self {
        let mut cfg = IvfPqConfig::fastscan(1, m);
        cfg.nprobe = 1;
        cfg
    }
    /// Enables OPQ.
    pub fn opq(mut self, on: bool) -> Self {
        self.opq = on;
        self
    }
}

/// Per-search settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IvfSearchParams {
    /// Lists probed.
    pub nprobe: usize,
    /// Re-rank factor (0 = off).
    pub rerank: usize,
}

impl IvfParts<'_> {
    /// The scan of a planned search on `compute`: the ADC scan or the
    /// fast-scan, whichever the code width needs; `plan.shortlist`
    /// candidates per query.
    pub fn scan(&self, compute: &dyn Compute, plan: &IvfPlan) -> Result<Vec<Vec<Cand>>> {
        match self.codes {
            PqCodes::Pq8 => Ok(compute.adc_top_k(self, plan)),
            PqCodes::FastScan4 => compute.fastscan_top_k(self, plan),
        }
    }
}

#[derive(Debug, Clone)]
struct Trained {
    opq: Option<OpqRotation>,
    /// `nlist` unit centroids (in the rotated space when OPQ is on).
    coarse: Panels,
    /// Cache identity of `coarse` for the compute backend.
    coarse_uid: u64,
    pq: ProductQuantizer,
}

/// The code layout of an inverted list depends on the index's code width
/// (`rows.len() × m` bytes row-major for 8-bit codes; `packed_len(rows.len(),
/// m)` bytes of blocks for fast-scan).
impl InvList {
    /// Appends a row with its `m` codes in the index's layout.
    fn push(&mut self, row: u32, code: &[u8], codes: PqCodes) {
        match codes {
            PqCodes::Pq8 => self.codes.extend_from_slice(code),
            PqCodes::FastScan4 => pack_entry(&mut self.codes, code.len(), self.rows.len(), code),
        }
        self.rows.push(row);
    }

    /// The `m` codes of entry `i`.
    fn code(&self, i: usize, m: usize, codes: PqCodes) -> Vec<u8> {
        match codes {
            PqCodes::Pq8 => self.codes[i * m..(i + 1) * m].to_vec(),
            PqCodes::FastScan4 => unpack_entry(&self.codes, m, i).unwrap_or_default(),
        }
    }

    /// Bytes of codes `n` entries take.
    /// Bytes of `n` codes of `m` sub-quantizers; `None` when that
    /// overflows (sizes read from a file, on a 32-bit target).
    fn code_len(n: usize, m: usize, codes: PqCodes) -> Option<usize> {
        match codes {
            PqCodes::Pq8 => n.checked_mul(m),
            PqCodes::FastScan4 => checked_packed_len(n, m),
        }
    }
}

/// Where the time of one [`IvfPqIndex::search_timed`] call went.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SearchStages {
    /// Validation, normalisation, the OPQ rotation and the coarse search.
    pub plan: std::time::Duration,
    /// The queries' lookup tables and the scan of their probed lists.
    pub scan: std::time::Duration,
    /// Exact re-ranking of the shortlists (zero without it).
    pub rerank: std::time::Duration,
}

/// Approximate cosine search with IVF + (O)PQ + optional exact re-ranking,
/// with 8-bit codes or 4-bit fast-scan codes ([`PqCodes`]).
///
/// ```
/// use dentate_core::{Index, IvfPqConfig, IvfPqIndex, IvfSearchParams};
/// use dentate_core::data::{clustered, SynthConfig};
/// let data = clustered(&SynthConfig { n: 2_000, dim: 32, clusters: 20, spread: 0.8, seed: 1 })?;
/// // 4-bit fast-scan: 16 lists, 16 sub-quantizers (8 code bytes per vector).
/// let mut index = IvfPqIndex::new(32, IvfPqConfig::fastscan(16, 16))?;
/// index.train(&data)?;
/// index.add(&(0..2_000).collect::<Vec<u64>>(), &data)?;
/// let hits = index.search_with(&data[..32], 5, IvfSearchParams { nprobe: 4, rerank: 10 })?;
/// assert_eq!(hits[0][0].id, 0);
/// # Ok::<(), dentate_core::Error>(())
/// ```
#[derive(Debug, Clone)]
pub struct IvfPqIndex {
    dim: usize,
    cfg: IvfPqConfig,
    trained: Option<Trained>,
    lists: Vec<InvList>,
    raw: Option<RerankStore>,
    rows: RowTable,
    compute: Arc<dyn Compute>,
}

impl IvfPqIndex {
    /// An untrained index. Fails when `m` does not divide `dim` or a
    /// setting is zero.
    pub fn new(dim: usize, cfg: IvfPqConfig) -> Result<Self> {
        if dim == 0 {
            return Err(Error::param("dim", "must be at least 1"));
        }
        if cfg.nlist == 0 || cfg.nlist > MAX_NLIST {
            return Err(Error::param("nlist", format!("must be between 1 and {MAX_NLIST}")));
        }
        if cfg.m == 0 || !dim.is_multiple_of(cfg.m) {
            return Err(Error::param(
                "m",
                format!("{} does not divide the dimension {dim}", cfg.m),
            ));
        }

        if cfg.nprobe == 0 {
            return Err(Error::param("nprobe", "must be at least 1"));
        }
        Ok(IvfPqIndex {
            dim,
            raw: cfg.rerank_store.map(|f| RerankStore::new(dim, f)),
            lists: vec![InvList::default(); cfg.nlist],
            cfg,
            trained: None,
            rows: RowTable::default(),
            compute: default_compute(),
        })
    }

    /// Replaces the compute backend.
    pub fn set_compute(&mut self, compute: Arc<dyn Compute>) {
        self.compute = compute;
    }

    /// The build settings.
    pub fn config(&self) -> &IvfPqConfig {
        &self.cfg
    }

    /// Code width and scan.
    pub fn codes(&self) -> PqCodes {
        self.cfg.codes
    }

    /// True once trained.
    pub fn is_trained(&self) -> bool {
        self.trained.is_some()
    }

    /// Sets the default number of lists probed.
    pub fn set_nprobe(&mut self, nprobe: usize) {
        self.cfg.nprobe = nprobe.max(1);
    }

    /// Sets the default re-rank factor (0 = off).
    pub fn set_rerank(&mut self, rerank: usize) {
        self.cfg.rerank = rerank;
    }

    /// Trains the rotation, coarse quantizer and PQ on row-major `data`.
    pub fn train(&mut self, data: &[f32]) -> Result<()> {
        self.train_with(data, &mut |_| {})
    }

    /// [`train`](Self::train), reporting each stage's name to `stage`.
    pub fn train_with(&mut self, data: &[f32], stage: &mut dyn FnMut(&str)) -> Result<()> {
        let n = batch_len(data, self.dim)?;
        let ksub = ksub_for(self.cfg.codes.bits())?;
        let needed = self.cfg.nlist.max(ksub);
        if n < needed {
            return Err(Error::InsufficientTrainingData { needed, got: n });
        }
        let x = normalized(data, self.dim)?;
        if let Some(raw) = &mut self.raw {
            // The 8-bit store's ranges, from the vectors as stored (normalised, not rotated).
            raw.train(&x)?;
        }
        let c = self.compute.as_ref();
        let t0 = web_time::Instant::now();
        let lap = |what: &str| log::info!("train: {what} done at {:.2} s", t0.elapsed().as_secs_f64());
        let opq = if self.cfg.opq {
            stage("opq");
            // The rotation is fitted to the codes it serves.
            let opq_cfg = OpqConfig {
                pq_bits: self.cfg.codes.bits(),
                ..self.cfg.opq_config
            };
            Some(OpqRotation::train(&x, self.dim, self.cfg.m, &opq_cfg, c)?)
        } else {
            None
        };
        let x = match &opq {
            Some(r) => r.apply(&x, c),
            None => x,
        };
        lap("opq");
        stage("coarse k-means");
        let centroids = if self.cfg.nlist == 1 {
            mean_row(&x, self.dim)
        } else {
            let km_cfg = KMeansConfig {
                max_points_per_centroid: self.cfg.kmeans_points_per_list,
                ..KMeansConfig::new(self.cfg.nlist)
                    .spherical(self.cfg.spherical_coarse)
                    .inner_product(!self.cfg.spherical_coarse)
                    .seed(self.cfg.seed)
                    .max_iter(self.cfg.kmeans_iterations)
                    .init(self.cfg.coarse_init)
            };
            KMeans::train(&x, self.dim, &km_cfg, c)?.centroids
        };
        let coarse = Panels::from_rows(&centroids, self.dim, Precision::F32);
        lap("coarse k-means");
        stage("pq");
        let resid = if self.cfg.residual_codes {
            let (assign, _) = c.assign(&x, &coarse, Metric::Cosine);
            residuals(&x, self.dim, &centroids, &assign)
        } else {
            x
        };
        let pq_cfg = PqTrainConfig {
            iterations: self.cfg.pq_iterations,
            seed: self.cfg.seed.wrapping_add(1),
            bits: self.cfg.codes.bits(),
            // 16 centroids need far fewer samples than 256: 1,024 each.
            max_train: match self.cfg.codes {
                PqCodes::Pq8 => crate::pq::MAX_TRAIN,
                PqCodes::FastScan4 => 1024 * crate::pq::KSUB4,
            },
        };
        let pq = ProductQuantizer::train(&resid, self.dim, self.cfg.m, &pq_cfg, c)?;
        lap("pq");
        self.trained = Some(Trained {
            opq,
            coarse,
            coarse_uid: new_uid(),
            pq,
        });
        // Entries encoded under an earlier training are re-encoded by the
        // caller; backend caches of the lists must not outlive them.
        self.rows.epoch += 1;
        Ok(())
    }

    /// The inverted lists as the compute interface sees them.
    fn inverted(&self) -> InvertedRef<'_> {
        InvertedRef {
            lists: &self.lists,
            m: self.cfg.m,
            uid: self.rows.uid,
            epoch: self.rows.epoch,
        }
    }

    fn trained(&self) -> Result<&Trained> {
        self.trained.as_ref().ok_or(Error::NotTrained)
    }

    /// Searches with explicit settings.
    pub fn search_with(&self, queries: &[f32], k: usize, params: IvfSearchParams) -> Result<Vec<Vec<Hit>>> {
        let (hits, stages) = self.search_timed(queries, k, params)?;
        log::debug!(
            "search: rotate + coarse {:?}, tables + scan {:?}, rerank {:?}",
            stages.plan,
            stages.scan,
            stages.rerank
        );
        Ok(hits)
    }

    /// [`IvfPqIndex::search_with`], also saying where its time went (the
    /// stage profile behind the browser's and the CLI's latency figures).
    pub fn search_timed(
        &self,
        queries: &[f32],
        k: usize,
        params: IvfSearchParams,
    ) -> Result<(Vec<Vec<Hit>>, SearchStages)> {
        let c = self.compute.as_ref();
        let t0 = web_time::Instant::now();
        let plan = self.plan(queries, k, params)?;
        let t_plan = t0.elapsed();
        let parts = self.parts()?;
        let cands = parts.scan(c, &plan)?;
        let t_scan = t0.elapsed();
        let out = match (parts.store, plan.rerank) {
            (Some(store), true) => c.rerank(&plan.queries, store, parts.ids, &IvfPlan::rows(&cands), plan.k),
            _ => cands,
        };
        let stages = SearchStages {
            plan: t_plan,
            scan: t_scan - t_plan,
            rerank: t0.elapsed() - t_scan,
        };
        Ok((IvfPlan::finish(out, plan.k), stages))
    }

    /// The first stage of a search: validation, normalisation, the OPQ
    /// rotation and the coarse search (on this index's backend), giving
    /// what the scan needs. With [`IvfPqIndex::parts`], [`IvfPlan::rows`]
    /// and [`IvfPlan::finish`] it lets a caller run the scan and the
    /// re-ranking on a backend of its own — the browser's asynchronous
    /// WebGPU path — with the same result as [`IvfPqIndex::search_with`].
    pub fn plan(&self, queries: &[f32], k: usize, params: IvfSearchParams) -> Result<IvfPlan> {
        let t = self.trained()?;
        let q = check_search(self.len(), queries, self.dim, k)?;
        if params.nprobe == 0 {
            return Err(Error::param("nprobe", "must be at least 1"));
        }
        if params.rerank > 0 && self.raw.is_none() {
            return Err(Error::param(
                "rerank",
                "this index keeps no vectors to re-rank from (rerank_store = None)",
            ));
        }
        let c = self.compute.as_ref();
        let rotated = match &t.opq {
            Some(r) => r.apply(&q, c),
            None => q.clone(),
        };
        let nprobe = params.nprobe.min(self.cfg.nlist);
        let coarse = c.top_k(
            &rotated,
            BaseRef {
                uid: t.coarse_uid,
                ..BaseRef::plain(&t.coarse)
            },
            nprobe,
        );
        let probes = coarse
            .iter()
            .map(|lists| {
                lists
                    .iter()
                    .map(|cand| Probe {
                        list: cand.row,
                        bias: if self.cfg.residual_codes { cand.score } else { 0.0 },
                    })
                    .collect()
            })
            .collect();
        let rerank = params.rerank > 0;
        // The `k` rule: neither the results nor the shortlist exceed the
        // live count (`k × rerank` may overflow; it saturates first).
        let live = self.len();
        let k = clamp_k(k, live);
        Ok(IvfPlan {
            queries: q,
            rotated,
            probes,
            shortlist: if rerank {
                clamp_k(k.saturating_mul(params.rerank), live)
            } else {
                k
            },
            k,
            rerank,
        })
    }

    /// What the scan and the re-ranking of a search read.
    pub fn parts(&self) -> Result<IvfParts<'_>> {
        let t = self.trained()?;
        Ok(IvfParts {
            codes: self.cfg.codes,
            books: t.pq.books(),
            lists: self.inverted(),
            ids: &self.rows.ids,
            alive: &self.rows.alive,
            store: self.raw.as_ref().map(|raw| StoreRef {
                store: raw,
                uid: self.rows.uid,
                epoch: self.rows.epoch,
            }),
        })
    }

    /// Serialises to a file image.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u32(self.dim as u32);
        w.u32(self.cfg.nlist as u32);
        w.u32(self.cfg.m as u32);
        // The search defaults saturate (a huge nprobe or re-rank factor keeps
        // its meaning — every list, everything re-ranked — where a cast
        // would wrap it to a small or zero value).
        w.u32(u32::try_from(self.cfg.nprobe).unwrap_or(u32::MAX));
        w.u32(u32::try_from(self.cfg.rerank).unwrap_or(u32::MAX));
        // Bit 0: OPQ; bit 1: codes of the vectors, not of residuals (files
        // from before the flag read as residual codes).
        w.u8(self.cfg.opq as u8 | u8::from(!self.cfg.residual_codes) << 1);
        w.u8(self.cfg.rerank_store.map_or(255, |f| f.code()));
        w.u64(self.cfg.seed);
        match &self.trained {
            None => w.u8(0),
            Some(t) => {
                w.u8(1);
                match &t.opq {
                    Some(r) => {
                        w.u8(1);
                        w.f32s(r.matrix());
                    }
                    None => w.u8(0),
                }
                w.f32s(&t.coarse.to_rows());
                w.f32s(t.pq.codebooks());
            }
        }
        for l in &self.lists {
            w.u32s(&l.rows);
            w.bytes(&l.codes);
        }
        match &self.raw {
            Some(RerankStore::Floats(rows)) => match rows.data() {
                Floats::F32(v) => w.f32s(v),
                Floats::F16(v) => w.f16s(v),
            },
            Some(RerankStore::Sq8(s)) => {
                w.f32s(s.lo());
                w.f32s(s.step());
                w.bytes(s.codes());
            }
            None => {}
        }
        self.rows.write(&mut w);
        w.finish(self.cfg.codes.kind())
    }

    /// Parses a file image of either code width ([`IndexKind::IvfPq`] or
    /// [`IndexKind::FastScan`]).
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let (kind, mut r) = open(bytes)?;
        let codes = match kind {
            IndexKind::IvfPq => PqCodes::Pq8,
            IndexKind::FastScan => PqCodes::FastScan4,
            _ => {
                return Err(Error::WrongKind {
                    found: kind.name().into(),
                    expected: "ivfpq or fastscan".into(),
                });
            }
        };
        let idx = Self::read(&mut r, codes)?;
        r.finish()?;
        Ok(idx)
    }

    fn read(r: &mut Reader<'_>, codes: PqCodes) -> Result<Self> {
        let dim = r.u32()? as usize;
        let nlist = r.u32()? as usize;
        let m = r.u32()? as usize;
        let nprobe = r.u32()? as usize;
        let rerank = r.u32()? as usize;
        let flags = r.u8()?;
        if flags > 3 {
            return Err(Error::Corrupt(format!("settings flags {flags}")));
        }
        let (opq, residual_codes) = (flags & 1 != 0, flags & 2 == 0);
        let store = match r.u8()? {
            255 => None,
            c => Some(StoreFormat::from_code(c)?),
        };
        let seed = r.u64()?;
        // Each list needs two 8-byte length prefixes: bound nlist by the
        // bytes left before allocating anything for it.
        if nlist > r.remaining() / 16 {
            return Err(Error::Corrupt(format!(
                "nlist {nlist} does not fit in the {} bytes left",
                r.remaining()
            )));
        }
        let defaults = match codes {
            PqCodes::Pq8 => IvfPqConfig::new(nlist, m),
            PqCodes::FastScan4 => IvfPqConfig::fastscan(nlist, m),
        };
        let cfg = IvfPqConfig {
            nlist,
            m,
            opq,
            rerank_store: store,
            nprobe,
            rerank,
            seed,
            residual_codes,
            ..defaults
        };
        let mut idx = IvfPqIndex::new(dim, cfg).map_err(|e| Error::Corrupt(format!("invalid settings: {e}")))?;
        let bad = |what: &str| Error::Corrupt(format!("{what} has the wrong length"));
        match r.u8()? {
            0 => {}
            1 => {
                let rot = match r.u8()? {
                    0 => None,
                    1 => {
                        let mtx = r.f32s()?;
                        if dim.checked_mul(dim) != Some(mtx.len()) {
                            return Err(bad("OPQ matrix"));
                        }
                        Some(OpqRotation::from_matrix(dim, mtx))
                    }
                    x => return Err(Error::Corrupt(format!("OPQ flag {x}"))),
                };
                if rot.is_some() != opq {
                    return Err(Error::Corrupt("OPQ flag disagrees with the stored rotation".into()));
                }
                let coarse = r.f32s()?;
                if nlist.checked_mul(dim) != Some(coarse.len()) {
                    return Err(bad("coarse centroids"));
                }
                let books = r.f32s()?;
                let ksub = ksub_for(codes.bits())?;
                if m.checked_mul(ksub).and_then(|x| x.checked_mul(dim / m)) != Some(books.len()) {
                    return Err(bad("PQ codebooks"));
                }
                if coarse.iter().chain(&books).any(|x| !x.is_finite()) {
                    return Err(Error::Corrupt("non-finite centroid".into()));
                }
                idx.trained = Some(Trained {
                    opq: rot,
                    coarse: Panels::from_rows(&coarse, dim, Precision::F32),
                    coarse_uid: new_uid(),
                    pq: ProductQuantizer::from_codebooks(dim, m, ksub, books),
                });
            }
            x => return Err(Error::Corrupt(format!("trained flag {x}"))),
        }
        let mut lists = Vec::with_capacity(nlist);
        for _ in 0..nlist {
            let rows = r.u32s()?;
            let bytes = r.bytes()?;
            if InvList::code_len(rows.len(), m, codes) != Some(bytes.len()) {
                return Err(bad("inverted list codes"));
            }
            lists.push(InvList { rows, codes: bytes });
        }
        let raw = match store {
            None => None,
            Some(StoreFormat::F32) => Some(RerankStore::Floats(
                RowMajor::from_raw(dim, Floats::F32(r.f32s()?)).ok_or_else(|| bad("re-rank store"))?,
            )),
            Some(StoreFormat::F16) => Some(RerankStore::Floats(
                RowMajor::from_raw(dim, Floats::F16(r.f16s()?)).ok_or_else(|| bad("re-rank store"))?,
            )),
            Some(StoreFormat::Sq8) => {
                let (lo, step, codes) = (r.f32s()?, r.f32s()?, r.bytes()?);
                Some(RerankStore::Sq8(
                    Sq8Rows::from_raw(dim, lo, step, codes).ok_or_else(|| bad("8-bit re-rank store"))?,
                ))
            }
        };
        let rows = RowTable::read(r)?;
        let total = rows.total();
        if let Some(raw) = &raw
            && raw.len() != total
        {
            return Err(bad("re-rank store"));
        }
        // Every row must sit in exactly one list.
        let mut seen = Bitset::new();
        (0..total).for_each(|_| seen.push(false));
        for l in &lists {
            for &row in &l.rows {
                let row = row as usize;
                if row >= total || seen.get(row) {
                    return Err(Error::Corrupt(format!(
                        "inverted lists reference row {row} out of range or twice"
                    )));
                }
                seen.set(row, true);
            }
        }
        if seen.count_ones() != total {
            return Err(Error::Corrupt("some rows are in no inverted list".into()));
        }
        if total > 0 && idx.trained.is_none() {
            return Err(Error::Corrupt("untrained index holds vectors".into()));
        }
        if let Some(RerankStore::Sq8(s)) = &raw
            && idx.trained.is_some()
            && !s.is_trained()
        {
            return Err(bad("8-bit re-rank store without its ranges"));
        }
        idx.lists = lists;
        idx.raw = raw;
        idx.rows = rows;
        Ok(idx)
    }

    /// Loads an index saved with [`Index::save`].
    pub fn load(path: &Path) -> Result<Self> {
        Self::from_bytes(&read_file(path)?)
    }

    /// Vectors per list (for diagnostics).
    pub fn list_sizes(&self) -> Vec<usize> {
        self.lists.iter().map(|l| l.rows.len()).collect()
    }

    /// IVF coverage at each of `nprobes`: the share of each query's true
    /// nearest ids (the first `k` of its row of `truth`) that lie in the
    /// lists its `nprobe` probes hold, averaged over the queries. It is the
    /// recall ceiling of the coarse stage, whatever the codes and the
    /// re-ranking do (ids not in the index, or deleted, count as missed);
    /// compare it with another engine's partition at equal nprobe. One
    /// coarse search at the largest nprobe serves them all: a query's
    /// probes are its best lists in order, so fewer are a prefix.
    pub fn coverage(&self, queries: &[f32], truth: &[Vec<u64>], k: usize, nprobes: &[usize]) -> Result<Vec<f64>> {
        if nprobes.contains(&0) {
            return Err(Error::param("nprobe", "must be at least 1"));
        }
        let Some(&most) = nprobes.iter().max() else {
            return Ok(Vec::new());
        };
        let plan = self.plan(
            queries,
            k,
            IvfSearchParams {
                nprobe: most,
                rerank: 0,
            },
        )?;
        if truth.len() != plan.probes.len() {
            return Err(Error::param(
                "truth",
                format!("{} rows of truth for {} queries", truth.len(), plan.probes.len()),
            ));
        }
        let mut list_of_row = vec![u32::MAX; self.rows.ids.len()];
        for (l, list) in self.lists.iter().enumerate() {
            for &r in &list.rows {
                if let Some(slot) = list_of_row.get_mut(r as usize) {
                    *slot = l as u32;
                }
            }
        }
        // The list of each live true neighbour (deleted or unknown: none).
        let lists: Vec<Vec<Option<u32>>> = truth
            .iter()
            .map(|want| {
                want.iter()
                    .take(k)
                    .map(|&id| self.rows.row_of(id).and_then(|r| list_of_row.get(r as usize).copied()))
                    .collect()
            })
            .collect();
        Ok(nprobes
            .iter()
            .map(|&nprobe| {
                let sum: f64 = plan
                    .probes
                    .iter()
                    .zip(&lists)
                    .filter(|(_, want)| !want.is_empty())
                    .map(|(probes, want)| {
                        let probed = &probes[..nprobe.min(probes.len())];
                        let found = want
                            .iter()
                            .filter(|l| l.is_some_and(|l| probed.iter().any(|p| p.list == l)))
                            .count();
                        found as f64 / want.len() as f64
                    })
                    .sum();
                sum / truth.len().max(1) as f64
            })
            .collect())
    }
}

/// The mean of row-major rows (the single centroid of a flat index),
/// summed in f64 so the result does not depend on thread count.
fn mean_row(x: &[f32], dim: usize) -> Vec<f32> {
    let mut sum = vec![0f64; dim];
    let mut n = 0usize;
    for row in x.chunks_exact(dim) {
        sum.iter_mut().zip(row).for_each(|(s, &v)| *s += f64::from(v));
        n += 1;
    }
    sum.iter().map(|s| (s / n.max(1) as f64) as f32).collect()
}

fn residuals(x: &[f32], dim: usize, centroids: &[f32], assign: &[u32]) -> Vec<f32> {
    let mut out = x.to_vec();
    for (row, &a) in out.chunks_exact_mut(dim).zip(assign) {
        let c = &centroids[a as usize * dim..(a as usize + 1) * dim];
        row.iter_mut().zip(c).for_each(|(v, c)| *v -= c);
    }
    out
}

impl Index for IvfPqIndex {
    crate::rows::row_table_ops!();
    fn dim(&self) -> usize {
        self.dim
    }
    fn add(&mut self, ids: &[u64], vectors: &[f32]) -> Result<()> {
        let t = self.trained()?;
        let x = check_add(ids, vectors, self.dim)?;
        self.rows.reserve(ids.len())?;
        if ids.is_empty() {
            return Ok(());
        }
        let c = self.compute.as_ref();
        let xr = match &t.opq {
            Some(r) => r.apply(&x, c),
            None => x.clone(),
        };
        let (assign, _) = c.assign(&xr, &t.coarse, Metric::Cosine);
        let codes = if self.cfg.residual_codes {
            let centroids = t.coarse.to_rows();
            t.pq.encode(&residuals(&xr, self.dim, &centroids, &assign), c)?
        } else {
            t.pq.encode(&xr, c)?
        };
        // The store first: the one step that can still fail (an 8-bit
        // store without its ranges) leaves the lists untouched.
        if let Some(raw) = &mut self.raw {
            raw.extend(&x)?;
        }
        let m = self.cfg.m;
        for (i, &id) in ids.iter().enumerate() {
            let row = self.rows.push(id);
            self.lists[assign[i] as usize].push(row, &codes[i * m..(i + 1) * m], self.cfg.codes);
        }
        Ok(())
    }
    fn search(&self, queries: &[f32], k: usize) -> Result<Vec<Vec<Hit>>> {
        let params = IvfSearchParams {
            nprobe: self.cfg.nprobe,
            rerank: if self.raw.is_some() { self.cfg.rerank } else { 0 },
        };
        self.search_with(queries, k, params)
    }
    fn compact(&mut self) {
        if self.rows.live() == self.rows.total() {
            return;
        }
        let alive = self.rows.alive.clone();
        if let Some(raw) = &mut self.raw {
            raw.retain_rows(|r| alive.get(r));
        }
        let map = self.rows.compact();
        let (m, width) = (self.cfg.m, self.cfg.codes);
        for l in &mut self.lists {
            let mut kept = InvList::default();
            for (i, &r) in l.rows.iter().enumerate() {
                let nr = map[r as usize];
                if nr != u32::MAX {
                    kept.push(nr, &l.code(i, m, width), width);
                }
            }
            *l = kept;
        }
    }
    fn save(&self, path: &Path) -> Result<()> {
        write_atomic(path, &self.to_bytes())
    }
    fn memory_bytes(&self) -> usize {
        let lists: usize = self.lists.iter().map(|l| l.rows.len() * 4 + l.codes.len()).sum();
        let model = self.trained.as_ref().map_or(0, |t| {
            t.coarse.bytes() + t.pq.codebooks().len() * 4 + t.opq.as_ref().map_or(0, |r| r.matrix().len() * 4)
        });
        lists + model + self.raw.as_ref().map_or(0, |r| r.bytes()) + self.rows.bytes()
    }
    fn kind(&self) -> IndexKind {
        self.cfg.codes.kind()
    }
}
