// The page of wasm/www/threads.html. Query parameters: n, dim, nq (the
// synthetic set's size), nprobe (default an eighth of the lists), threads (the pool; without it initThreads() picks
// navigator.hardwareConcurrency),
// data=URL/ (real embeddings in URL/{base,queries}.fvecs instead). Writes
// its results as JSON into <pre id="results"> and sets body[data-status]
// ("done" or "error"), which wasm/www/threads.mjs reads.
import { fetchVecs } from "./vecs.js";

const params = new URLSearchParams(location.search);
const log = (msg) => {
  const line = document.createElement("div");
  line.textContent = msg;
  document.getElementById("log").append(line);
};

// Runs one job in a fresh Worker; resolves to what it measured.
function inWorker(job) {
  return new Promise((resolve, reject) => {
    const w = new Worker(new URL("./threads-worker.js", import.meta.url), { type: "module" });
    w.onmessage = ({ data }) => {
      if (data.progress) return log(`  ${data.progress}`);
      w.terminate();
      data.error ? reject(new Error(`${job.pkg} with ${job.threads} threads: ${data.error}`)) : resolve(data.ok);
    };
    w.onerror = (e) => { w.terminate(); reject(new Error(e.message)); };
    w.postMessage(job);
  });
}

const results = { isolated: globalThis.crossOriginIsolated, cores: navigator.hardwareConcurrency };
try {
  const threads = params.get("threads") ? +params.get("threads") : "cores";
  let base, queries, dim, source;
  if (params.get("data")) {
    const url = params.get("data");
    const [b, q] = await Promise.all([fetchVecs(url + "base.fvecs", Float32Array), fetchVecs(url + "queries.fvecs", Float32Array)]);
    ({ d: dim } = b);
    base = b.v;
    queries = q.v;
    source = url;
  } else {
    const core = await import("../pkg-core/dentate_wasm.js");
    await core.default();
    const n = +(params.get("n") ?? 20000), nq = +(params.get("nq") ?? 500);
    dim = +(params.get("dim") ?? 128);
    const all = core.synthetic(n + nq, dim, Math.max(16, Math.round(n / 200)), 7n);
    base = all.slice(0, n * dim);
    queries = all.slice(n * dim);
    source = "synthetic clusters";
  }
  const n = base.length / dim;
  const nlist = Math.max(16, Math.round(Math.sqrt(n)));
  const nprobe = +(params.get("nprobe") ?? Math.max(8, nlist >> 3));
  const job = { dim, nlist, m: dim / 4, k: 10, nprobe, base: base.buffer, queries: queries.buffer };
  Object.assign(results, { source, n, dim, queries: queries.length / dim, nlist, m: job.m, nprobe: job.nprobe });

  // The pool refuses the page's main thread with a typed error.
  const t = await import("../pkg-threads/dentate_wasm.js");
  await t.default();
  try { t.initThreads(2); results.main_thread = "accepted"; } catch (e) { results.main_thread = `${e.name}: ${e.message}`; }

  log(`pkg-core, 1 thread…`);
  results.core = await inWorker({ ...job, pkg: "../pkg-core/dentate_wasm.js", threads: 1 });
  log(`pkg-threads, no pool…`);
  results.single = await inWorker({ ...job, pkg: "../pkg-threads/dentate_wasm.js", threads: 1 });
  log(`pkg-threads, ${threads} threads…`);
  results.pool = await inWorker({ ...job, pkg: "../pkg-threads/dentate_wasm.js", threads });
  log(`pkg-threads, a pool asked for too late…`);
  results.late = (await inWorker({ ...job, pkg: "../pkg-threads/dentate_wasm.js", threads: 1, late: true })).late;
  results.speedup = {
    train: results.single.train_ms / results.pool.train_ms,
    add: results.single.add_ms / results.pool.add_ms,
    batch_search: results.single.batch_ms / results.pool.batch_ms,
    exact_batch: results.single.exact_batch_ms / results.pool.exact_batch_ms,
  };
  document.body.dataset.status = "done";
} catch (e) {
  results.error = String(e?.message ?? e);
  document.body.dataset.status = "error";
}
document.getElementById("results").textContent = JSON.stringify(results, null, 2);
