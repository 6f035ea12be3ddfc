// The browser benchmark: Dentate's indexes and the peers (hnswlib-wasm,
// voy-search) on the same real embeddings in the same page, one query at a
// time on the main thread (as an agent asks), each engine's queries
// interleaved with nothing else. Writes JSON into <pre id="results"> and
// sets body[data-status] to "done" or "error" (what run.mjs waits for).
//
// Query parameters: data (folder with base.fvecs, queries.fvecs,
// gt.ivecs; default ../bench-data/), nq (queries timed, default 200),
// qoffset (the first of them, default 0),
// peers (comma list of hnswlib, voy; default hnswlib,voy; "" for none),
// nlist, m (fast-scan shape, default 256 and 96), stores (re-rank stores,
// comma list of f16, f32, sq8; default f16), grid (JSON list of
// [nprobe, rerank] pairs), ef (JSON list of hnswlib efSearch values).
import init, { VectorIndex } from "../pkg-core/dentate_wasm.js";
import { fetchVecs } from "../www/vecs.js";

const params = new URLSearchParams(location.search);
const dataUrl = params.get("data") ?? "../bench-data/";
const nqWanted = +(params.get("nq") ?? 200);
// Queries timed start here: choose settings on one range (e.g. 0–199) and
// report on another (qoffset=200), never on the queries they were chosen on.
const qoffset = +(params.get("qoffset") ?? 0);
const peers = (params.get("peers") ?? "hnswlib,voy").split(",").filter(Boolean);
const nlist = +(params.get("nlist") ?? 256);
const m = +(params.get("m") ?? 96);
const grid = JSON.parse(params.get("grid") ?? "[[16,10],[32,10],[48,10],[64,10]]");
// Re-rank stores to build the fast-scan index with (comma list of f16, f32, sq8).
const stores = (params.get("stores") ?? "f16").split(",").filter(Boolean);
const efs = JSON.parse(params.get("ef") ?? "[16,32,48,64,96]");
const K = 10;

const log = (msg) => { document.getElementById("log").textContent += msg + "\n"; };
const tick = () => new Promise((r) => setTimeout(r, 0));

function percentile(sorted, p) {
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1))];
}

// Times `search(query) → ids` over the queries (after a warm-up pass over
// the first 20); recall@10 against the exact top-10.
function timeQueries(search, qs, truth, nq) {
  const d = qs.d;
  for (let q = 0; q < Math.min(nq, 20); q++) search(qs.v.subarray(q * d, (q + 1) * d));
  const lat = [];
  let found = 0;
  for (let q = 0; q < nq; q++) {
    const v = qs.v.subarray(q * d, (q + 1) * d);
    const t0 = performance.now();
    const ids = search(v);
    lat.push(performance.now() - t0);
    const t = new Set(truth[q]);
    for (const id of ids) if (t.has(id)) found++;
  }
  lat.sort((a, b) => a - b);
  return { recall_at_10: found / (nq * K), p50_ms: percentile(lat, 50), p95_ms: percentile(lat, 95) };
}

const median = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[s.length >> 1]; };

async function main() {
  await init();
  const [base, qs, gt] = await Promise.all([fetchVecs(dataUrl + "base.fvecs", Float32Array), fetchVecs(dataUrl + "queries.fvecs", Float32Array), fetchVecs(dataUrl + "gt.ivecs", Int32Array)]);
  if (!(qoffset >= 0 && qoffset < qs.n)) throw new Error(`qoffset ${qoffset} is outside the ${qs.n} queries`);
  const nq = Math.min(nqWanted, qs.n - qoffset);
  const truth = Array.from({ length: nq }, (_, q) => Array.from(gt.v.subarray((q + qoffset) * gt.d, (q + qoffset) * gt.d + K)));
  qs.v = qs.v.subarray(qoffset * qs.d);
  const dim = base.d;
  log(`${base.n} × ${dim} base vectors, ${nq} queries; ${navigator.userAgent}`);
  const rows = [];
  const out = { n: base.n, dim, nq, qoffset, k: K, user_agent: navigator.userAgent, cross_origin_isolated: self.crossOriginIsolated, rows };
  const ids = new Uint32Array(base.n).map((_, i) => i);

  // Dentate: fast-scan (4-bit codes) with each re-rank store, then exact.
  for (const store of stores) {
    const t0 = performance.now();
    const index = VectorIndex.fastScan(dim, nlist, m, { rerank: 10, rerankStore: store });
    index.train(base.v);
    index.add(ids, base.v);
    const build = performance.now() - t0;
    const bytes = index.save().length;
    for (const [nprobe, rerank] of grid) {
      await tick();
      const r = timeQueries((v) => { const res = index.searchWith(v, K, nprobe, rerank); return res.idNumbers; }, qs, truth, nq);
      // Where the time goes: median of each stage over the same queries.
      const st = { plan: [], scan: [], rerank: [], results: [], total: [] };
      for (let q = 0; q < nq; q++) {
        const p = index.profile(qs.v.subarray(q * dim, (q + 1) * dim), K, nprobe, rerank);
        for (const s in st) st[s].push(p[s]);
      }
      const stages_ms = Object.fromEntries(Object.entries(st).map(([s, v]) => [s, +median(v).toFixed(4)]));
      rows.push({ engine: "dentate", index: `fastScan(${dim}, ${nlist}, ${m}), ${store} store`, setting: `nprobe ${nprobe}, rerank ${rerank}`,
                  ...r, build_s: build / 1000, index_bytes: bytes, stages_ms });
      log(JSON.stringify(rows.at(-1)));
    }
    index.free();
  }
  {
    await tick();
    const t1 = performance.now();
    const exact = VectorIndex.exact(dim);
    exact.add(ids, base.v);
    const buildExact = performance.now() - t1;
    const r = timeQueries((v) => exact.search(v, K).idNumbers, qs, truth, nq);
    rows.push({ engine: "dentate", index: `exact(${dim})`, setting: "f32", ...r, build_s: buildExact / 1000, index_bytes: exact.save().length });
    log(JSON.stringify(rows.at(-1)));
    exact.free();
  }

  if (peers.includes("hnswlib")) {
    await tick();
    const { loadHnswlib } = await import("../bench/node_modules/hnswlib-wasm/dist/hnswlib.js");
    const lib = await loadHnswlib();
    const t0 = performance.now();
    const index = new lib.HierarchicalNSW("cosine", dim, "");
    index.initIndex(base.n, 16, 200, 100);
    for (let i = 0; i < base.n; i++) index.addPoint(base.v.subarray(i * dim, (i + 1) * dim), i, false);
    const build = performance.now() - t0;
    // hnswlib's own layout: per element the vector, 2M level-0 links + a
    // count, and the label; upper levels add M links to 1/ln(M) of them.
    const bytes = Math.round(base.n * (dim * 4 + (2 * 16 + 1) * 4 + 8) + (base.n / Math.log(16)) * (16 + 1) * 4);
    for (const ef of efs) {
      await tick();
      index.setEfSearch(ef);
      const r = timeQueries((v) => index.searchKnn(v, K, undefined).neighbors, qs, truth, nq);
      rows.push({ engine: "hnswlib-wasm 0.8.2", index: "HNSW M 16, efConstruction 200", setting: `ef ${ef}`, ...r,
                  build_s: build / 1000, index_bytes: bytes, index_bytes_estimated: true });
      log(JSON.stringify(rows.at(-1)));
    }
  }

  if (peers.includes("voy")) {
    await tick();
    // voy-search ships for bundlers: instantiate its module by hand.
    const glue = await import("../bench/node_modules/voy-search/voy_search_bg.js");
    const { instance } = await WebAssembly.instantiateStreaming(fetch("../bench/node_modules/voy-search/voy_search_bg.wasm"),
      { "./voy_search_bg.js": glue });
    glue.__wbg_set_wasm(instance.exports);
    const t0 = performance.now();
    const embeddings = [];
    for (let i = 0; i < base.n; i++) embeddings.push({ id: String(i), title: "", url: "", embeddings: Array.from(base.v.subarray(i * dim, (i + 1) * dim)) });
    const index = new glue.Voy({ embeddings });
    const build = performance.now() - t0;
    const r = timeQueries((v) => index.search(v, K).neighbors.map((x) => +x.id), qs, truth, Math.min(nq, 50));
    rows.push({ engine: "voy-search 0.6.3", index: "k-d tree", setting: "", ...r, build_s: build / 1000, queries_timed: Math.min(nq, 50) });
    log(JSON.stringify(rows.at(-1)));
  }
  document.getElementById("results").textContent = JSON.stringify(out, null, 2);
  document.body.dataset.status = "done";
}

main().catch((e) => {
  document.getElementById("results").textContent = JSON.stringify({ error: String(e?.stack || e) });
  document.body.dataset.status = "error";
});
