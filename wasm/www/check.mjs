// Loads the demo page in headless Chromium (through ChromeDriver's
// WebDriver protocol; no npm packages needed), waits until it has built its
// indexes, searched and queried the memory, checks what it rendered, and
// prints the measurements as JSON.
//
//   node wasm/www/check.mjs [--n 50000] [--dim 384] [--nq 200] [--min-recall 0.9]
//                           [--chromium /usr/bin/chromium] [--chromedriver /usr/bin/chromedriver]
//                           [--timeout 600] [--webgpu 1] [--data DIR]
//
// Needs wasm/pkg (wasm/build). Exits non-zero when the page failed, did not
// reach the recall, or did not render results. With --webgpu 1, Chromium
// gets --enable-unsafe-webgpu (SwiftShader when there is no GPU) and the
// WebGPU searches must run, reach the same recall and fall back never.
// With --data DIR (base.fvecs, queries.fvecs, gt.ivecs, e.g. from
// `dentate data rustdocs`), the page measures on those real embeddings,
// and its exact search must agree with the file's native truth.
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { cliArgs, runPage } from "./browser.mjs";

const args = cliArgs();
const n = +(args.n ?? 50000);
const dim = +(args.dim ?? 384);
const nq = +(args.nq ?? 200);
const minRecall = +(args["min-recall"] ?? 0.9);
const timeoutS = +(args.timeout ?? 600);
const webgpu = args.webgpu === "1";
const root = join(dirname(fileURLToPath(import.meta.url)), "..");

const data = args.data ? resolve(args.data) : null;

const code = await runPage({
  mounts: data ? { "/": root, "/data/": data } : { "/": root },
  path: `/www/index.html?auto=1&n=${n}&dim=${dim}&nq=${nq}${data ? "&data=/data/" : ""}`,
  timeoutS,
  binary: args.chromium,
  driver: args.chromedriver,
  webgpu,
}, async (out, browser, origin) => {
  const rendered = await browser.run(
    "return [document.querySelectorAll('#results-table tbody tr').length, document.querySelectorAll('#hits .hit').length, document.getElementById('backend').textContent]");
  out.rendered = { table_rows: rendered[0], memory_hits: rendered[1], backend_label: rendered[2] };
  const problems = [];
  if (data) {
    if (out.search?.source !== "/data/") problems.push(`the page did not measure on the files: ${out.search?.source}`);
    // Ties at the 10th place aside, the page's exact search is the native one's.
    if (!(out.search?.exact_vs_file_truth >= 0.99)) problems.push(`the page's exact search matched the native truth at ${out.search?.exact_vs_file_truth}`);
  }
  if (!out.search?.at_recall_0_9 || out.search.at_recall_0_9.recall_at_10 < minRecall) problems.push(`IVF-PQ recall@10 below ${minRecall}`);
  if (!out.search?.fastscan_at_recall_0_9 || out.search.fastscan_at_recall_0_9.recall_at_10 < minRecall) problems.push(`fast-scan recall@10 below ${minRecall}`);
  if (rendered[0] < 2) problems.push("the results table was not rendered");
  if (rendered[1] < 1) problems.push("no memory hits were rendered");
  if (!out.memory?.[0]?.text?.includes("Porto")) problems.push("the memory did not find where Clara is moving");
  if (JSON.stringify(out.memory_restored_top) !== JSON.stringify(out.memory?.[0]?.sources)) problems.push("the restored snapshot answered differently");
  // Clara's move is message m3; every pipeline must bring back a memory made from it.
  for (const p of ["hema", "nemori", "amory", "premem", "rag"]) {
    const hits = out.pipelines?.[p];
    if (!hits?.length) problems.push(`the ${p} pipeline returned nothing`);
    else if (!hits.some((h) => h.sources.includes("m3"))) problems.push(`the ${p} pipeline missed where Clara is moving: ${JSON.stringify(hits)}`);
  }
  // The reference count is OpenAI's tiktoken (o200k_base); the estimate must be near it.
  const t = out.tokens ?? {};
  if (t.exact_before !== false || t.exact_after !== true || t.compose_exact !== true) problems.push(`token counting did not switch from estimated to exact: ${JSON.stringify(t)}`);
  if (t.count_after !== 16) problems.push(`countTokens gave ${t.count_after} with the vocabulary, not 16`);
  if (!(Math.abs(t.count_before - 16) <= 4)) problems.push(`the token estimate ${t.count_before} is far from 16`);
  if (out.core_package?.top !== 7 || out.core_package?.has_memory !== false) problems.push(`the index-only package (pkg-core) misbehaved: ${JSON.stringify(out.core_package)}`);
  // A new visit to the page finds the memory in storage (OPFS) and answers alike.
  const { status: restoreStatus, out: restored } = await browser.visit(`${origin}/www/index.html?restore=1`, 120);
  out.reload = restored;
  if (restoreStatus !== "done") problems.push(`the reloaded page failed: ${restored.error ?? restoreStatus}`);
  else {
    if (JSON.stringify(restored.restored_top) !== JSON.stringify(out.memory?.[0]?.sources)) problems.push("the memory saved to storage answered differently after a reload");
    if (restored.restored_index?.size !== 3) problems.push("the index saved to storage came back wrong");
    if (restored.storage !== "opfs") problems.push(`storage was ${restored.storage}, not OPFS`);
  }
  if (webgpu) {
    const g = out.search?.webgpu;
    if (!g?.rows?.length) problems.push(`no WebGPU searches ran: ${g?.unavailable ?? "?"}`);
    else {
      if (g.fallbacks !== 0) problems.push(`${g.fallbacks} WebGPU calls fell back to the CPU`);
      for (const r of g.rows) if (r.recall_at_10 < minRecall) problems.push(`${r.index}: recall@10 ${r.recall_at_10}`);
    }
  }
  console.log(JSON.stringify(out, null, 2));
  return problems;
});
process.exit(code);
