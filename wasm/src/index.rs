//! `VectorIndex`: the exact and IVF-PQ indexes, and `SearchResults`.

use crate::convert::{err, get_bool, get_string, get_usize, ids_from_js, set};
use dentate_core::{AnyIndex, FlatIndex, Hit, Index, IvfPqConfig, IvfPqIndex, IvfSearchParams, Precision, StoreFormat};
use wasm_bindgen::prelude::*;

/// A cosine index over caller-chosen `u64` ids: exact (`VectorIndex.exact`),
/// IVF-PQ (`VectorIndex.ivfPq`) or 4-bit fast-scan (`VectorIndex.fastScan`),
/// both with exact re-ranking. Vectors are
/// L2-normalised on insert, so scores are cosine similarities.
#[wasm_bindgen]
#[derive(Debug)]
pub struct VectorIndex {
    inner: AnyIndex,
}

/// The results of a batched search: `queries × k` slots, row-major, best
/// first, ties by smaller id, where `k` is the one asked for clamped to the
/// live count (the engine's `k` rule: a huge `k` costs what the index
/// holds, never more). A query with fewer than `k` results fills its row
/// up to `counts[q]`; the rest of the row holds id `2^64 − 1` and score
/// `NaN`.
#[wasm_bindgen]
#[derive(Debug, Clone)]
pub struct SearchResults {
    ids: Vec<u64>,
    scores: Vec<f32>,
    counts: Vec<u32>,
    k: usize,
}

impl SearchResults {
    /// The results of `hits` in rows of `min(k, live)` slots (`live`: what
    /// the index holds). Fails, rather than wrapping, when the slots do not
    /// fit the address space (32 bits in wasm32).
    pub(crate) fn from_hits(hits: &[Vec<Hit>], k: usize, live: usize) -> Result<SearchResults, JsValue> {
        let k = dentate_core::index::clamp_k(k, live);
        let slots = hits
            .len()
            .checked_mul(k)
            .filter(|&s| s <= isize::MAX as usize / std::mem::size_of::<u64>())
            .ok_or_else(|| err(format!("{} queries × {k} results do not fit in memory", hits.len())))?;
        let mut ids = vec![u64::MAX; slots];
        let mut scores = vec![f32::NAN; slots];
        let mut counts = Vec::with_capacity(hits.len());
        for (q, row) in hits.iter().enumerate() {
            for (j, h) in row.iter().take(k).enumerate() {
                ids[q * k + j] = h.id;
                scores[q * k + j] = h.score;
            }
            counts.push(row.len().min(k) as u32);
        }
        Ok(SearchResults { ids, scores, counts, k })
    }
}

#[wasm_bindgen]
impl SearchResults {
    /// Ids, `queries × k`, as a `BigUint64Array`.
    #[wasm_bindgen(getter)]
    pub fn ids(&self) -> Vec<u64> {
        self.ids.clone()
    }
    /// Ids as plain numbers (`Float64Array`); exact for ids below 2^53.
    #[wasm_bindgen(getter, js_name = idNumbers)]
    pub fn id_numbers(&self) -> Vec<f64> {
        self.ids
            .iter()
            .map(|&i| if i == u64::MAX { f64::NAN } else { i as f64 })
            .collect()
    }
    /// Cosine scores, `queries × k`, as a `Float32Array`.
    #[wasm_bindgen(getter)]
    pub fn scores(&self) -> Vec<f32> {
        self.scores.clone()
    }
    /// Valid results per query, as a `Uint32Array`.
    #[wasm_bindgen(getter)]
    pub fn counts(&self) -> Vec<u32> {
        self.counts.clone()
    }
    /// Slots per query.
    #[wasm_bindgen(getter)]
    pub fn k(&self) -> usize {
        self.k
    }
    /// Number of queries.
    #[wasm_bindgen(getter)]
    pub fn queries(&self) -> usize {
        self.counts.len()
    }
}

fn check_dim(dim: usize) -> Result<(), JsValue> {
    if dim == 0 {
        return Err(err("dim must be at least 1"));
    }
    Ok(())
}

#[wasm_bindgen]
impl VectorIndex {
    /// An exact index of `dim`-dimensional vectors. `options.f16: true`
    /// stores them as half floats (half the memory, scores within ~1e-3).
    pub fn exact(dim: usize, options: JsValue) -> Result<VectorIndex, JsValue> {
        check_dim(dim)?;
        let precision = if get_bool(&options, "f16")?.unwrap_or(false) {
            Precision::F16
        } else {
            Precision::F32
        };
        Ok(VectorIndex {
            inner: AnyIndex::Flat(FlatIndex::with_precision(dim, precision)),
        })
    }

    /// An IVF-PQ index: `nlist` inverted lists, `m` sub-quantizers (must
    /// divide `dim`) of 8-bit codes, re-ranking from stored vectors.
    /// Options: `rerankStore` (how the vectors are kept for re-ranking:
    /// `"sq8"`, 8-bit scalar-quantized, the browser's default — a quarter
    /// of the f32 bytes and the fastest re-rank in wasm —, `"f16"`, `"f32"`
    /// or `"none"`: no re-ranking), `opq` (learn a rotation first, default false),
    /// `nprobe` (default 16), `rerank` (re-rank factor, default 4),
    /// `iterations` (Lloyd iterations of the coarse and PQ k-means, default
    /// 25). Call `train` before `add`.
    #[wasm_bindgen(js_name = ivfPq)]
    pub fn ivf_pq(dim: usize, nlist: usize, m: usize, options: JsValue) -> Result<VectorIndex, JsValue> {
        VectorIndex::ivf(dim, IvfPqConfig::new(nlist, m), &options)
    }

    /// A 4-bit fast-scan index: `nlist` inverted lists (1 = flat fast-scan,
    /// every query scans every code), `m` sub-quantizers of 16 centroids
    /// (must divide `dim`; `m / 2` bytes per vector), codes in blocks of 32
    /// scanned with `i8x16.swizzle` table lookups, then re-ranking from
    /// stored vectors (8-bit by default). The same options as `ivfPq` (defaults:
    /// `rerank` 10, `iterations` 10). Call `train` before `add`.
    #[wasm_bindgen(js_name = fastScan)]
    pub fn fast_scan(dim: usize, nlist: usize, m: usize, options: JsValue) -> Result<VectorIndex, JsValue> {
        let cfg = if nlist == 1 {
            IvfPqConfig::flat_fastscan(m)
        } else {
            IvfPqConfig::fastscan(nlist, m)
        };
        VectorIndex::ivf(dim, cfg, &options)
    }

    /// Loads an index saved by `save()` or by the native library / CLI.
    /// Corrupt or truncated bytes throw.
    pub fn load(bytes: &[u8]) -> Result<VectorIndex, JsValue> {
        Ok(VectorIndex {
            inner: AnyIndex::from_bytes(bytes).map_err(err)?,
        })
    }

    /// The index in Dentate's file format (checksummed; the same bytes
    /// the native library writes).
    pub fn save(&self) -> Vec<u8> {
        match &self.inner {
            AnyIndex::Flat(i) => i.to_bytes(),
            AnyIndex::IvfPq(i) => i.to_bytes(),
        }
    }

    /// Trains the coarse quantizer, OPQ and PQ on `data` (row-major,
    /// `n × dim`); exact indexes need no training and accept the call.
    pub fn train(&mut self, data: &[f32]) -> Result<(), JsValue> {
        match &mut self.inner {
            AnyIndex::Flat(i) => {
                if !data.len().is_multiple_of(i.dim()) {
                    return Err(err(format!(
                        "{} floats is not a whole number of {}-dimensional vectors",
                        data.len(),
                        i.dim()
                    )));
                }
                Ok(())
            }
            AnyIndex::IvfPq(i) => i.train(data).map_err(err),
        }
    }

    /// Adds vectors (`ids.length × dim` floats, row-major) under `ids`; an
    /// id already present is replaced. NaN/Inf, zero vectors, a wrong
    /// length or duplicate ids throw and add nothing.
    pub fn add(&mut self, ids: JsValue, vectors: &[f32]) -> Result<(), JsValue> {
        let ids = ids_from_js(&ids)?;
        self.inner.as_index_mut().add(&ids, vectors).map_err(err)
    }

    /// Searches `queries` (row-major, `nq × dim`) for the `k` most similar
    /// live vectors each (`k` larger than the index is clamped to its
    /// size). `k = 0`, NaN/Inf or a wrong length throw; an empty index
    /// throws.
    pub fn search(&self, queries: &[f32], k: usize) -> Result<SearchResults, JsValue> {
        let index = self.inner.as_index();
        let hits = index.search(queries, k).map_err(err)?;
        SearchResults::from_hits(&hits, k, index.len())
    }

    /// IVF-PQ search with explicit `nprobe` and re-rank factor (0 = no
    /// re-ranking); on an exact index the same as `search`.
    #[wasm_bindgen(js_name = searchWith)]
    pub fn search_with(
        &self,
        queries: &[f32],
        k: usize,
        nprobe: usize,
        rerank: usize,
    ) -> Result<SearchResults, JsValue> {
        let hits = match &self.inner {
            AnyIndex::Flat(i) => i.search(queries, k),
            AnyIndex::IvfPq(i) => i.search_with(queries, k, IvfSearchParams { nprobe, rerank }),
        }
        .map_err(err)?;
        SearchResults::from_hits(&hits, k, self.inner.as_index().len())
    }

    /// Where a `searchWith` call's time goes, in milliseconds:
    /// `{ plan, scan, rerank, results, total }` — validation, rotation and
    /// the coarse search; lookup tables and the list scans; exact
    /// re-ranking; building the result arrays; and the whole call inside
    /// the module (a caller's own timing minus `total` is the JS ↔ wasm
    /// boundary). An exact index reports its whole search as `scan`.
    pub fn profile(&self, queries: &[f32], k: usize, nprobe: usize, rerank: usize) -> Result<js_sys::Object, JsValue> {
        let t0 = web_time::Instant::now();
        let (hits, stages) = match &self.inner {
            AnyIndex::Flat(i) => {
                let hits = i.search(queries, k).map_err(err)?;
                let scan = t0.elapsed();
                (
                    hits,
                    dentate_core::SearchStages {
                        scan,
                        ..Default::default()
                    },
                )
            }
            AnyIndex::IvfPq(i) => i
                .search_timed(queries, k, IvfSearchParams { nprobe, rerank })
                .map_err(err)?,
        };
        let t_search = t0.elapsed();
        let results = SearchResults::from_hits(&hits, k, self.inner.as_index().len())?;
        drop(results);
        let total = t0.elapsed();
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        let out = js_sys::Object::new();
        set(&out, "plan", ms(stages.plan));
        set(&out, "scan", ms(stages.scan));
        set(&out, "rerank", ms(stages.rerank));
        set(&out, "results", ms(total - t_search));
        set(&out, "total", ms(total));
        Ok(out)
    }

    /// Saves the index (the bytes of `save()`) in the page's storage under
    /// `name`, replacing what was there: the origin private file system,
    /// or IndexedDB where it cannot write. Resolves when the bytes are kept.
    #[wasm_bindgen(js_name = saveTo)]
    pub fn save_to(&self, name: String) -> js_sys::Promise {
        let bytes = self.save();
        wasm_bindgen_futures::future_to_promise(async move {
            crate::persist::put(&name, &bytes).await?;
            Ok(JsValue::UNDEFINED)
        })
    }

    /// The index saved under `name` by `saveTo` (in this page or an earlier
    /// one of the same origin). Throws when nothing is saved there or the
    /// bytes are damaged.
    #[wasm_bindgen(js_name = loadFrom)]
    pub async fn load_from(name: String) -> Result<VectorIndex, JsValue> {
        let bytes = crate::persist::get(&name).await?;
        VectorIndex::load(&bytes)
    }

    /// Removes ids (tombstones); returns how many were present.
    pub fn remove(&mut self, ids: JsValue) -> Result<usize, JsValue> {
        let ids = ids_from_js(&ids)?;
        Ok(self.inner.as_index_mut().remove(&ids))
    }

    /// True when `id` is live.
    pub fn contains(&self, id: JsValue) -> Result<bool, JsValue> {
        let ids = ids_from_js(&js_sys::Array::of1(&id).into())?;
        Ok(ids.first().is_some_and(|&i| self.inner.as_index().contains(i)))
    }

    /// Drops removed rows and reclaims their memory.
    pub fn compact(&mut self) {
        self.inner.as_index_mut().compact();
    }

    /// Vector dimension.
    #[wasm_bindgen(getter)]
    pub fn dim(&self) -> usize {
        self.inner.as_index().dim()
    }

    /// Live vectors.
    #[wasm_bindgen(getter)]
    pub fn size(&self) -> usize {
        self.inner.as_index().len()
    }

    /// `flat`, `ivfpq` or `fastscan`.
    #[wasm_bindgen(getter)]
    pub fn kind(&self) -> String {
        self.inner.as_index().kind().name().to_string()
    }

    /// False for an IVF-PQ index that still needs `train`.
    #[wasm_bindgen(getter, js_name = isTrained)]
    pub fn is_trained(&self) -> bool {
        match &self.inner {
            AnyIndex::Flat(_) => true,
            AnyIndex::IvfPq(i) => i.is_trained(),
        }
    }

    /// Heap bytes held by the index.
    #[wasm_bindgen(getter, js_name = memoryBytes)]
    pub fn memory_bytes(&self) -> usize {
        self.inner.as_index().memory_bytes()
    }

    /// Sets the IVF-PQ defaults used by `search` (ignored by exact indexes).
    #[wasm_bindgen(js_name = setSearchParams)]
    pub fn set_search_params(&mut self, nprobe: usize, rerank: usize) -> Result<(), JsValue> {
        if nprobe == 0 {
            return Err(err("nprobe must be at least 1"));
        }
        if let AnyIndex::IvfPq(i) = &mut self.inner {
            i.set_nprobe(nprobe);
            i.set_rerank(rerank);
        }
        Ok(())
    }
}

impl VectorIndex {
    /// An untrained IVF index of `cfg` with the JS options applied.
    fn ivf(dim: usize, mut cfg: IvfPqConfig, options: &JsValue) -> Result<VectorIndex, JsValue> {
        check_dim(dim)?;
        cfg = cfg.opq(get_bool(options, "opq")?.unwrap_or(false));
        // The browser's store: 8-bit rows re-rank faster than f16 ones in
        // wasm, which has no half-precision conversion, at 0.56× the
        // index bytes (BENCHMARKS.md, "On real sentence embeddings").
        cfg.rerank_store = Some(StoreFormat::Sq8);
        if let Some(n) = get_usize(options, "nprobe")? {
            cfg.nprobe = n;
        }
        if let Some(r) = get_usize(options, "rerank")? {
            cfg.rerank = r;
        }
        if let Some(it) = get_usize(options, "iterations")? {
            if it == 0 {
                return Err(err("iterations must be at least 1"));
            }
            cfg.kmeans_iterations = it;
            cfg.pq_iterations = it;
        }
        if cfg.nprobe == 0 {
            return Err(err("nprobe must be at least 1"));
        }
        if let Some(store) = get_string(options, "rerankStore")? {
            cfg.rerank_store = match store.as_str() {
                "f16" => Some(StoreFormat::F16),
                "f32" => Some(StoreFormat::F32),
                "sq8" => Some(StoreFormat::Sq8),
                "none" => None,
                other => {
                    return Err(err(format!(
                        "rerankStore must be \"f16\", \"f32\", \"sq8\" or \"none\", not {other:?}"
                    )));
                }
            };
            if cfg.rerank_store.is_none() {
                cfg.rerank = 0;
            }
        }
        let idx = IvfPqIndex::new(dim, cfg).map_err(err)?;
        Ok(VectorIndex {
            inner: AnyIndex::IvfPq(idx),
        })
    }

    /// The index as the engine's trait object.
    pub(crate) fn as_index(&self) -> &dyn Index {
        self.inner.as_index()
    }
}

#[cfg(feature = "webgpu")]
#[wasm_bindgen]
impl VectorIndex {
    /// `search` on WebGPU: the same validation and the same results (ids;
    /// scores within float rounding), computed by the compute shaders. The
    /// index data is uploaded to the device on the first call and only
    /// appended rows afterwards. Exact indexes run on the device; IVF-PQ
    /// runs its coarse search on the CPU and its scan and re-ranking on the
    /// device.
    #[wasm_bindgen(js_name = searchGpu)]
    pub async fn search_gpu(
        &self,
        gpu: &crate::gpu::WebGpu,
        queries: Vec<f32>,
        k: usize,
    ) -> Result<SearchResults, JsValue> {
        let (nprobe, rerank) = match &self.inner {
            AnyIndex::IvfPq(i) => (i.config().nprobe, i.config().rerank),
            AnyIndex::Flat(_) => (0, 0),
        };
        self.search_with_gpu(gpu, queries, k, nprobe, rerank).await
    }

    /// `searchWith` on WebGPU (explicit `nprobe` and re-rank factor for
    /// IVF-PQ; ignored by an exact index).
    #[wasm_bindgen(js_name = searchWithGpu)]
    pub async fn search_with_gpu(
        &self,
        gpu: &crate::gpu::WebGpu,
        queries: Vec<f32>,
        k: usize,
        nprobe: usize,
        rerank: usize,
    ) -> Result<SearchResults, JsValue> {
        let hits = match &self.inner {
            AnyIndex::Flat(i) => {
                let q = dentate_core::index::check_search(i.len(), &queries, i.dim(), k).map_err(err)?;
                let k = dentate_core::index::clamp_k(k, i.len());
                let cands = dentate_core::AsyncCompute::top_k_async(gpu.inner.as_ref(), &q, i.base(), k).await;
                dentate_core::IvfPlan::finish(cands, k)
            }
            AnyIndex::IvfPq(i) => crate::gpu::ivf_search(gpu, i, &queries, k, nprobe, rerank)
                .await
                .map_err(err)?,
        };
        SearchResults::from_hits(&hits, k, self.inner.as_index().len())
    }
}
