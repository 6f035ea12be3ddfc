// Dentate demo page: builds exact, IVF-PQ and 4-bit fast-scan indexes over synthetic
// clustered vectors, measures single-query latency and recall@10, and runs
// a small HEMA memory with hybrid retrieval.
//
// Query parameters: ?auto=1 runs everything at load and writes the results
// as JSON into <pre id="results"> (what wasm/www/check.mjs reads), and
// saves the memory in the page's storage; ?restore=1 (a later visit) loads
// it back from there and asks it again;
// n, dim, nq override the form's values; data=URL/ measures on the real
// embeddings in URL/{base,queries}.fvecs and URL/gt.ivecs instead of
// synthetic clusters; pkg=cpu loads the lean CPU-only package instead of
// the one with WebGPU.
//
// The page loads ../pkg-webgpu (built by wasm/build) and falls back to
// ../pkg; when navigator.gpu gives an adapter, the same searches also run
// on WebGPU (VectorIndex.searchGpu) and are timed beside the CPU's.
const params = new URLSearchParams(location.search);
const pkgs = params.get("pkg") === "cpu" ? ["../pkg/dentate_wasm.js"]
  : ["../pkg-webgpu/dentate_wasm.js", "../pkg/dentate_wasm.js"];
let dentate;
let pkgUsed;
for (const p of pkgs) {
  try { dentate = await import(p); pkgUsed = p; break; } catch (e) { if (p === pkgs[pkgs.length - 1]) throw e; }
}
const init = dentate.default;
const { fetchVecs } = await import("./vecs.js");

const $ = (id) => document.getElementById(id);
const log = (msg) => {
  const line = document.createElement("div");
  line.textContent = msg;
  $("log").append(line);
  $("log").scrollTop = $("log").scrollHeight;
};
const tick = () => new Promise((r) => setTimeout(r, 0));

function percentile(sorted, p) {
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil((p / 100) * sorted.length) - 1));
  return sorted[i];
}

// Recall@k of `res` against the exact `truth` (both SearchResults rows).
function recallOf(rows, truth, k) {
  let found = 0;
  for (let q = 0; q < rows.length; q++) {
    const t = new Set(truth[q]);
    for (const id of rows[q]) if (t.has(id)) found++;
  }
  return found / (rows.length * k);
}

// Runs every query alone (as an agent does), timing each; returns
// {rows, p50, p95} with latencies in milliseconds. `search` may return a
// promise (the WebGPU path); it is awaited inside the timing.
async function timeQueries(search, queries, dim, k) {
  const nq = queries.length / dim;
  // Warm up caches, the JIT and (WebGPU) the device copies first.
  for (let q = 0; q < Math.min(nq, 10); q++) await search(queries.subarray(q * dim, (q + 1) * dim), k);
  const lat = [];
  const rows = [];
  for (let q = 0; q < nq; q++) {
    const v = queries.subarray(q * dim, (q + 1) * dim);
    const t0 = performance.now();
    const r = await search(v, k);
    lat.push(performance.now() - t0);
    rows.push(Array.from(r.idNumbers.slice(0, r.counts[0])));
  }
  lat.sort((a, b) => a - b);
  return { rows, p50: percentile(lat, 50), p95: percentile(lat, 95) };
}

function addRow(r) {
  const tr = document.createElement("tr");
  const cells = [
    r.index,
    `${(r.build_ms / 1000).toFixed(2)} s`,
    `${r.p50_ms.toFixed(3)} ms`,
    `${r.p95_ms.toFixed(3)} ms`,
    r.recall_at_10.toFixed(3),
    r.bytes_per_vector.toFixed(0),
  ];
  cells.forEach((c, i) => {
    const td = document.createElement("td");
    td.textContent = c;
    if (i > 0) td.className = "num";
    tr.append(td);
  });
  $("results-table").querySelector("tbody").append(tr);
  $("results-table").hidden = false;
}

// The vectors to measure on: the files under ?data= (real embeddings
// written by `dentate data rustdocs`, with their exact top-k), or
// synthetic clusters of the form's size.
async function vectors(n, dim, nq) {
  const data = params.get("data");
  if (!data) {
    log(`generating ${n.toLocaleString()} × ${dim} clustered vectors and ${nq} queries…`);
    await tick();
    const all = dentate.synthetic(n + nq, dim, Math.max(16, Math.round(n / 200)), 1n);
    return { source: "synthetic clusters", n, dim, nq, base: all.subarray(0, n * dim), queries: all.subarray(n * dim) };
  }
  log(`loading real embeddings from ${data}…`);
  const [b, q, gt] = await Promise.all([fetchVecs(data + "base.fvecs", Float32Array),
    fetchVecs(data + "queries.fvecs", Float32Array), fetchVecs(data + "gt.ivecs", Int32Array)]);
  if (b.d !== q.d) throw new Error(`base vectors are ${b.d}-d, queries ${q.d}-d`);
  const m = Math.min(nq, q.n);
  const truth = Array.from({ length: m }, (_, i) => Array.from(gt.v.subarray(i * gt.d, i * gt.d + 10)));
  return { source: data, n: b.n, dim: b.d, nq: m, base: b.v, queries: q.v.subarray(0, m * q.d), truth };
}

async function benchmark(formN, formDim, formNq) {
  const k = 10;
  const { source, n, dim, nq, base, queries, truth: fileTruth } = await vectors(formN, formDim, formNq);
  const ids = new Uint32Array(n).map((_, i) => i);
  const rows = [];

  let t0 = performance.now();
  const exact = dentate.VectorIndex.exact(dim);
  exact.add(ids, base);
  const exactBuild = performance.now() - t0;
  log(`exact index built in ${(exactBuild / 1000).toFixed(2)} s; searching…`);
  await tick();
  const ex = await timeQueries((v, kk) => exact.search(v, kk), queries, dim, k);
  const truth = ex.rows;
  // With files, the page's exact search against the native one's truth.
  const exactRecall = fileTruth ? recallOf(truth, fileTruth, k) : 1;
  rows.push({ index: "exact", build_ms: exactBuild, p50_ms: ex.p50, p95_ms: ex.p95, recall_at_10: exactRecall,
              bytes_per_vector: exact.memoryBytes / n });
  addRow(rows[rows.length - 1]);
  await tick();

  // IVF-PQ: ~2·√n lists, 8 dimensions per sub-quantizer, trained on a
  // sample (k-means in one browser thread is the slow part of building).
  const nlist = Math.min(1024, 2 ** Math.round(Math.log2(2 * Math.sqrt(n))));
  const m = dim % 8 === 0 ? dim / 8 : dim;
  const sample = Math.min(n, Math.max(nlist * 39, 16384));
  log(`IVF-PQ: training nlist=${nlist}, m=${m} on ${sample.toLocaleString()} vectors…`);
  await tick();
  t0 = performance.now();
  const ivf = dentate.VectorIndex.ivfPq(dim, nlist, m, { iterations: 10 });
  ivf.train(base.subarray(0, sample * dim));
  ivf.add(ids, base);
  const ivfBuild = performance.now() - t0;
  log(`IVF-PQ built in ${(ivfBuild / 1000).toFixed(2)} s; sweeping nprobe…`);
  await tick();
  // Re-rank the best k × 12 PQ candidates exactly (f16 vectors): PQ codes
  // of 48 bytes blur near neighbours that differ in the last decimals.
  // (120 candidates also stay within the WebGPU kernels' 128-slot lists.)
  const rerank = 12;
  const chosen = await sweep("ivfpq", ivf, ivfBuild, rerank, nlist, queries, dim, k, truth, n, rows);

  // 4-bit fast-scan at the same code bytes: twice the sub-quantizers
  // (4 dimensions each), 16 centroids, tables read with i8x16.swizzle.
  const mfs = dim % 4 === 0 ? dim / 4 : dim;
  log(`fast-scan: training nlist=${nlist}, m=${mfs} (4-bit) on ${sample.toLocaleString()} vectors…`);
  await tick();
  t0 = performance.now();
  const fs = dentate.VectorIndex.fastScan(dim, nlist, mfs, { iterations: 10 });
  fs.train(base.subarray(0, sample * dim));
  fs.add(ids, base);
  const fsBuild = performance.now() - t0;
  log(`fast-scan built in ${(fsBuild / 1000).toFixed(2)} s; sweeping nprobe…`);
  await tick();
  const fsChosen = await sweep("fastscan", fs, fsBuild, rerank, nlist, queries, dim, k, truth, n, rows);
  const webgpu = await onWebGpu(exact, [[ivf, chosen, ivfBuild], [fs, fsChosen, fsBuild]], queries, dim, k, truth,
                                n, exactBuild);
  return { source, n, dim, queries: nq, rows, exact_vs_file_truth: fileTruth ? exactRecall : null,
           at_recall_0_9: chosen, fastscan_at_recall_0_9: fsChosen, webgpu };
}

// Times `index` at growing nprobe (re-rank factor fixed) until recall@10
// reaches 0.99, adding each row; returns the first row at recall ≥ 0.9.
// (Hashing-embedder vectors of real sentences are far less clustered than
// synthetic ones or a neural model's: they need up to half the lists.)
async function sweep(name, index, buildMs, rerank, nlist, queries, dim, k, truth, n, rows) {
  let chosen = null;
  for (const nprobe of [4, 8, 16, 32, 64, 128]) {
    if (nprobe > nlist) break;
    const r = await timeQueries((v, kk) => index.searchWith(v, kk, nprobe, rerank), queries, dim, k);
    const row = { index: `${name} nprobe=${nprobe} rerank=${rerank}`, build_ms: buildMs, p50_ms: r.p50,
                  p95_ms: r.p95, recall_at_10: recallOf(r.rows, truth, k), bytes_per_vector: index.memoryBytes / n,
                  nprobe, rerank };
    rows.push(row);
    addRow(row);
    await tick();
    if (!chosen && row.recall_at_10 >= 0.9) chosen = row;
    if (row.recall_at_10 >= 0.99) break;
  }
  log(chosen ? `${name}: recall@10 ≥ 0.9 at nprobe=${chosen.nprobe}: p50 ${chosen.p50_ms.toFixed(3)} ms`
             : `${name}: no nprobe reached recall@10 0.9`);
  return chosen;
}

// The same searches on WebGPU, when the package has it and navigator.gpu
// gives an adapter: {adapter, rows} or {unavailable: why}.
async function onWebGpu(exact, ivfs, queries, dim, k, truth, n, exactBuild) {
  if (!dentate.WebGpu) return { unavailable: `the package ${pkgUsed} has no WebGPU path` };
  if (!navigator.gpu) return { unavailable: "navigator.gpu is absent" };
  let gpu;
  try {
    gpu = await dentate.WebGpu.open();
  } catch (e) {
    return { unavailable: e.message };
  }
  log(`WebGPU adapter: ${gpu.adapter}; searching on it…`);
  const rows = [];
  const ex = await timeQueries((v, kk) => exact.searchGpu(gpu, v, kk), queries, dim, k);
  rows.push({ index: `exact (webgpu)`, build_ms: exactBuild, p50_ms: ex.p50, p95_ms: ex.p95,
              recall_at_10: recallOf(ex.rows, truth, k), bytes_per_vector: exact.memoryBytes / n });
  addRow(rows[rows.length - 1]);
  await tick();
  for (const [index, chosen, buildMs] of ivfs) {
    if (!chosen) continue;
    const { nprobe, rerank } = chosen;
    const r = await timeQueries((v, kk) => index.searchWithGpu(gpu, v, kk, nprobe, rerank), queries, dim, k);
    rows.push({ index: `${index.kind} nprobe=${nprobe} rerank=${rerank} (webgpu)`, build_ms: buildMs, p50_ms: r.p50,
                p95_ms: r.p95, recall_at_10: recallOf(r.rows, truth, k), bytes_per_vector: index.memoryBytes / n,
                nprobe, rerank });
    addRow(rows[rows.length - 1]);
    await tick();
  }
  return { adapter: gpu.adapter, name: gpu.name, fallbacks: gpu.fallbacks, rows };
}

const intro = [
  ["Ann", "I adopted a grey cat from the shelter last week and named her Pixel."],
  ["Ben", "Nice! I finally signed up for cello lessons at the music school in Lisbon."],
  ["Ann", "My sister Clara is moving to Porto in June for a job at the aquarium."],
  ["Ben", "I ran my first marathon in Berlin on Sunday, 4 hours 12 minutes."],
  ["Ann", "Pixel knocked my coffee onto the laptop this morning, so I'm using the old one."],
  ["Ben", "Clara should visit the bookshop Lello when she's in Porto."],
];

let memory;
let clock = Math.floor(Date.now() / 1000) - 86400;
const said = [];

function addMessage(speaker, text) {
  clock += 60;
  const m = { speaker, text, timestamp: clock, id: `m${said.length + 1}` };
  said.push(m);
  const report = memory.addMessages("me", [m]);
  const line = document.createElement("div");
  line.textContent = `[${m.id}] ${speaker}: ${text}`;
  $("chat").append(line);
  $("chat").scrollTop = $("chat").scrollHeight;
  return report;
}

// A memory of `pipeline` holding everything said so far.
function memoryOf(pipeline) {
  const m = new dentate.AgentMemory({ pipeline, retriever: "hybrid" });
  if (said.length) m.addMessages("me", said);
  return m;
}

function showHits(question) {
  // Close what the pipeline holds back (Nemori's episode, Amory's and
  // PREMem's session) so the latest messages are searchable.
  memory.flush("me");
  const hits = memory.retrieve("me", question, 3);
  $("hits").replaceChildren(...hits.map((h) => {
    const d = document.createElement("div");
    d.className = "hit";
    d.textContent = h.text;
    const meta = document.createElement("div");
    meta.className = "meta";
    meta.textContent = `${h.kind} · score ${h.score.toFixed(3)} · from ${h.sources.join(", ")}`;
    d.append(meta);
    return d;
  }));
  return hits;
}

// The tokenizer vocabulary, shipped beside the module and loaded on demand.
async function loadVocabulary() {
  if (dentate.tokensExact()) return;
  const r = await fetch(new URL("o200k_base.tiktoken", new URL(pkgUsed, import.meta.url)));
  if (!r.ok) throw new Error(`o200k_base.tiktoken: HTTP ${r.status}`);
  dentate.loadVocabulary(new Uint8Array(await r.arrayBuffer()));
}

async function main() {
  await init();
  $("backend").textContent = `${dentate.backend()}${dentate.WebGpu ? " · WebGPU when the browser offers it" : ""}`;
  memory = memoryOf("hema");
  for (const [s, t] of intro) addMessage(s, t);
  $("pipeline").onchange = () => {
    memory.free();
    memory = memoryOf($("pipeline").value);
    $("hits").replaceChildren();
  };

  $("send").onclick = () => {
    const text = $("message").value.trim();
    if (text) addMessage($("speaker").value || "Ann", text);
    $("message").value = "";
  };
  $("ask").onclick = () => {
    try { showHits($("question").value); } catch (e) { $("hits").textContent = e.message; }
  };
  $("save").onclick = () => {
    const bytes = memory.save();
    $("saved").textContent = `snapshot: ${bytes.length.toLocaleString()} bytes (restorable with AgentMemory.load)`;
  };
  $("build").onclick = async () => {
    $("build").disabled = true;
    try {
      await benchmark(+$("n").value, +$("dim").value, +$("nq").value);
    } catch (e) {
      log(`error: ${e.message}`);
    }
    $("build").disabled = false;
  };

  if (params.get("restore") === "1") {
    // A later visit: the memory saved by the auto run, back from storage.
    const out = { storage: await dentate.storageBackend() };
    try {
      const back = await dentate.AgentMemory.loadFrom("demo-memory", { pipeline: "hema" });
      out.restored_top = back.retrieve("me", "Where is Clara moving to?", 1)[0].sources;
      const index = await dentate.VectorIndex.loadFrom("demo-index");
      out.restored_index = { size: index.size, dim: index.dim };
      document.body.dataset.status = "done";
    } catch (e) {
      out.error = String(e && e.message || e);
      document.body.dataset.status = "error";
    }
    $("results").textContent = JSON.stringify(out, null, 2);
    return;
  }
  if (params.get("auto") === "1") {
    for (const key of ["n", "dim", "nq"]) if (params.has(key)) $(key).value = params.get(key);
    const out = { backend: dentate.backend(), simd: dentate.simd(), package: pkgUsed,
                  crossOriginIsolated: self.crossOriginIsolated };
    try {
      out.search = await benchmark(+$("n").value, +$("dim").value, +$("nq").value);
      $("question").value = "Where is Clara moving to?";
      const hits = showHits($("question").value);
      out.memory = hits.map((h) => ({ text: h.text, sources: h.sources }));
      const snapshot = memory.save();
      const back = dentate.AgentMemory.load(snapshot, { pipeline: "hema" });
      out.memory_restored_top = back.retrieve("me", "Where is Clara moving to?", 1)[0].sources;
      out.snapshot_bytes = snapshot.length;
      // Token counts: estimated until the vocabulary file is loaded, then exact.
      const probe = "Caroline went to the LGBTQ support group on 7 May 2023.";
      out.tokens = { exact_before: dentate.tokensExact(), count_before: dentate.countTokens(probe) };
      await loadVocabulary();
      Object.assign(out.tokens, { exact_after: dentate.tokensExact(), count_after: dentate.countTokens(probe),
                                  compose_exact: memory.compose("me", "Where is Clara moving to?", 200).tokensExact });
      // The index-only entry point: the same indexes, no memory.
      const core = await import("../pkg-core/dentate_wasm.js");
      await core.default();
      const tiny = core.VectorIndex.exact(4);
      tiny.add(new Uint32Array([7, 8]), new Float32Array([1, 0, 0, 0, 0, 1, 0, 0]));
      out.core_package = { top: tiny.search(new Float32Array([0.9, 0.1, 0, 0]), 1).idNumbers[0], has_memory: "AgentMemory" in core };
      // Kept in the page's storage for the next visit (?restore=1).
      await memory.saveTo("demo-memory");
      const small = dentate.VectorIndex.exact(8);
      small.add(new Uint32Array([1, 2, 3]), new Float32Array(24).map((_, i) => Math.sin(i + 1)));
      await small.saveTo("demo-index");
      out.saved_to = await dentate.storageBackend();
      // Every pipeline on the same messages (offline stand-ins).
      out.pipelines = {};
      for (const p of ["hema", "nemori", "amory", "premem", "rag"]) {
        const m = memoryOf(p);
        m.flush("me");
        out.pipelines[p] = m.retrieve("me", "Where is Clara moving to?", 3).map((h) => ({ kind: h.kind, text: h.text, sources: h.sources }));
        m.free();
      }
      document.body.dataset.status = "done";
    } catch (e) {
      out.error = String(e && e.message || e);
      document.body.dataset.status = "error";
    }
    $("results").textContent = JSON.stringify(out, null, 2);
  }
}

main().catch((e) => {
  $("backend").textContent = `failed: ${e.message}`;
  $("results").textContent = JSON.stringify({ error: String(e.message || e) });
  document.body.dataset.status = "error";
});
