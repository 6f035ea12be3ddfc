// A dedicated Worker that trains and batch-searches with one Dentate
// package, for wasm/www/threads.html. The page posts
//   { pkg: "../pkg-threads/dentate_wasm.js" | "../pkg-core/dentate_wasm.js",
//     threads: T | "cores", base, queries, dim, nlist, m, k, nprobe }
// and gets back timings, the pool's size, and fingerprints of the trained
// index (its saved bytes) and of the batch answers. Unless T is 1 the
// worker starts a pool first (pkg-threads only): initThreads(T), or
// initThreads() for "cores" (navigator.hardwareConcurrency threads); with
// T = 1 it stays single-threaded.
const fnv = (bytes) => {
  let h = 0x811c9dc5;
  for (let i = 0; i < bytes.length; i++) h = Math.imul(h ^ bytes[i], 0x01000193) >>> 0;
  return h.toString(16).padStart(8, "0");
};

self.onmessage = async ({ data: job }) => {
  try {
    const dentate = await import(job.pkg);
    await dentate.default();
    const out = { pkg: job.pkg, requested: job.threads, threads_before: dentate.threads?.() ?? 1 };
    const say = (progress) => postMessage({ progress });
    if (job.late) {
      // A pool asked for after the module has computed cannot start; the
      // Workers it started are let go, and the module goes on alone.
      const first = dentate.VectorIndex.exact(job.dim, {});
      first.add(BigUint64Array.from([1n]), new Float32Array(job.queries, 0, job.dim));
      first.search(new Float32Array(job.queries, 0, job.dim), 1);
      const attempt = async () => { try { await dentate.initThreads(2); return "accepted"; } catch (e) { return e.message; } };
      out.late = { first: await attempt(), second: await attempt(), threads: dentate.threads() };
      postMessage({ ok: out });
      return;
    }
    if (job.threads !== 1) {
      say(`starting ${job.threads} threads`);
      // The machine's cores when the page asks for no number.
      out.pool = await dentate.initThreads(job.threads === "cores" ? undefined : job.threads);
    }
    say("training");
    out.threads = dentate.threads?.() ?? 1;
    // What a second start, or a pool of none, says.
    if (dentate.initThreads) {
      const refused = (n) => { try { dentate.initThreads(n); return "accepted"; } catch (e) { return e.message; } };
      out.refusals = { zero: refused(0), again: job.threads !== 1 ? refused(2) : null };
    }
    const { dim, nlist, m, k, nprobe } = job;
    const base = new Float32Array(job.base);
    const queries = new Float32Array(job.queries);
    const ids = BigUint64Array.from({ length: base.length / dim }, (_, i) => BigInt(i));

    const index = dentate.VectorIndex.fastScan(dim, nlist, m, { iterations: 10 });
    let t = performance.now();
    index.train(base);
    out.train_ms = performance.now() - t;
    say("adding");
    t = performance.now();
    index.add(ids, base);
    out.add_ms = performance.now() - t;
    out.index_fnv = fnv(index.save());

    say("searching");
    index.setSearchParams(nprobe, k);
    index.search(queries.subarray(0, 10 * dim), k); // warm-up
    const reps = 3;
    let res;
    t = performance.now();
    for (let r = 0; r < reps; r++) res = index.search(queries, k);
    out.batch_ms = (performance.now() - t) / reps;
    out.queries = res.queries;
    out.answers_fnv = fnv(new Uint8Array(res.ids.buffer));
    out.scores_fnv = fnv(new Uint8Array(res.scores.buffer));

    const exact = dentate.VectorIndex.exact(dim, {});
    exact.add(ids, base);
    t = performance.now();
    const truth = exact.search(queries, k);
    out.exact_batch_ms = performance.now() - t;
    let found = 0;
    for (let q = 0; q < res.queries; q++) {
      const want = new Set(truth.ids.subarray(q * k, (q + 1) * k));
      for (const id of res.ids.subarray(q * k, (q + 1) * k)) if (want.has(id)) found++;
    }
    out.recall_at_k = found / (res.queries * k);
    out.exact_fnv = fnv(new Uint8Array(truth.ids.buffer));
    postMessage({ ok: out });
  } catch (e) {
    postMessage({ error: String(e?.message ?? e) });
  }
};
