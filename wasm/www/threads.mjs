// Checks the multi-threaded build (wasm/pkg-threads) in headless Chromium:
// wasm/www/threads.html trains and batch-searches in Workers with pkg-core,
// with pkg-threads alone and with pkg-threads on a pool of --threads
// Workers (without --threads: initThreads() with no number, which takes
// navigator.hardwareConcurrency). Fails unless the page is cross-origin isolated, the pool has the
// size asked for, initThreads refuses the page's main thread (and, after
// the module has computed, starts nothing and says so), and all three
// runs train the same index (byte for byte) and give the same answers.
// Prints what the page measured (times, and speed-ups of the pool over one
// thread) as JSON.
//
//   node wasm/www/threads.mjs [--threads N] [--n 20000] [--dim 128] [--nq 500]
//                             [--data DIR] [--nprobe N] [--min-recall 0.8] [--timeout 600]
//
// Needs wasm/pkg-core and wasm/pkg-threads (wasm/build).
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { cliArgs, runPage } from "./browser.mjs";

const args = cliArgs();
const threads = args.threads === undefined ? null : +args.threads;
const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const data = args.data ? resolve(args.data) : null;
const query = new URLSearchParams({ n: args.n ?? 20000, dim: args.dim ?? 128, nq: args.nq ?? 500 });
if (threads !== null) query.set("threads", threads);
if (data) query.set("data", "/data/");
if (args.nprobe) query.set("nprobe", args.nprobe);
const minRecall = +(args["min-recall"] ?? 0.8);

const code = await runPage({
  mounts: data ? { "/": root, "/data/": data } : { "/": root },
  path: `/www/threads.html?${query}`,
  timeoutS: +(args.timeout ?? 600),
  binary: args.chromium,
  driver: args.chromedriver,
}, async (out) => {
  const problems = [];
  if (out.isolated !== true) problems.push("the page was not cross-origin isolated");
  if (!/inside a dedicated Worker/.test(out.main_thread ?? "")) problems.push(`initThreads on the main thread: ${out.main_thread}`);
  const { core, single, pool } = out;
  if (core && single && pool) {
    if (core.threads !== 1 || single.threads !== 1) problems.push(`single-threaded runs had ${core.threads} and ${single.threads} threads`);
    const want = threads ?? out.cores;
    if (pool.threads_before !== 1 || pool.pool !== want || pool.threads !== want) problems.push(`the pool: before ${pool.threads_before}, started ${pool.pool}, running ${pool.threads}; asked for ${threads ?? "the cores"} (${want})`);
    for (const key of ["index_fnv", "answers_fnv", "scores_fnv", "exact_fnv"]) {
      if (new Set([core[key], single[key], pool[key]]).size !== 1) problems.push(`${key} differs: core ${core[key]}, one thread ${single[key]}, pool ${pool[key]}`);
    }
    if (!/threads must be 1\.\.=/.test(single.refusals?.zero)) problems.push(`initThreads(0): ${single.refusals?.zero}`);
    if (!/runs once/.test(pool.refusals?.again)) problems.push(`a second initThreads: ${pool.refusals?.again}`);
    const late = out.late ?? {};
    if (!/before any training or search/.test(late.first) || !/earlier initThreads failed/.test(late.second) || late.threads !== 1) problems.push(`a pool asked for after computing: ${JSON.stringify(late)}`);
    if (!(pool.recall_at_k >= minRecall)) problems.push(`recall@10 ${pool.recall_at_k} below ${minRecall} at nprobe ${out.nprobe}`);
  }
  console.log(JSON.stringify(out, null, 2));
  return problems;
});
process.exit(code);
