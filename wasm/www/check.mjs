// Loads the demo page in headless Chromium (through ChromeDriver's
// WebDriver protocol; no npm packages needed), waits until it has built its
// indexes, searched and queried the memory, checks what it rendered, and
// prints the measurements as JSON.
//
//   node wasm/www/check.mjs [--n 50000] [--dim 384] [--nq 200] [--min-recall 0.9]
//                           [--chromium /usr/bin/chromium] [--chromedriver /usr/bin/chromedriver]
//                           [--timeout 600] [--webgpu 1]
//
// Needs wasm/pkg (wasm/build). Exits non-zero when the page failed, did not
// reach the recall, or did not render results. With --webgpu 1, Chromium
// gets --enable-unsafe-webgpu (SwiftShader when there is no GPU) and the
// WebGPU searches must run, reach the same recall and fall back never.
import { spawn } from "node:child_process";
import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
import { extname, join, normalize, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";

const args = Object.fromEntries(
  process.argv.slice(2).reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []),
);
const n = +(args.n ?? 50000);
const dim = +(args.dim ?? 384);
const nq = +(args.nq ?? 200);
const minRecall = +(args["min-recall"] ?? 0.9);
const timeoutS = +(args.timeout ?? 600);
const webgpu = args.webgpu === "1";
const chromium = args.chromium ?? "/usr/bin/chromium";
const chromedriver = args.chromedriver ?? "/usr/bin/chromedriver";
const root = join(dirname(fileURLToPath(import.meta.url)), "..");

const types = { ".html": "text/html", ".js": "text/javascript", ".mjs": "text/javascript",
                ".wasm": "application/wasm", ".json": "application/json", ".css": "text/css" };

// Static files under wasm/, cross-origin isolated so performance.now()
// has microsecond resolution.
const server = createServer(async (req, res) => {
  const path = normalize(decodeURIComponent(new URL(req.url, "http://x").pathname)).replace(/^(\.\.[/\\])+/, "");
  try {
    const body = await readFile(join(root, path));
    res.writeHead(200, {
      "content-type": types[extname(path)] ?? "application/octet-stream",
      "cross-origin-opener-policy": "same-origin",
      "cross-origin-embedder-policy": "require-corp",
    });
    res.end(body);
  } catch {
    res.writeHead(404);
    res.end("not found");
  }
});
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const port = server.address().port;

const driverPort = 9515 + Math.floor(Math.random() * 400);
const driver = spawn(chromedriver, [`--port=${driverPort}`], { stdio: "ignore" });
const wd = `http://127.0.0.1:${driverPort}`;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function call(method, path, body) {
  const r = await fetch(wd + path, {
    method,
    headers: { "content-type": "application/json" },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const j = await r.json();
  if (!r.ok) throw new Error(`${method} ${path}: ${JSON.stringify(j.value ?? j)}`);
  return j.value;
}

let session;
let code = 1;
try {
  for (let i = 0; ; i++) {
    try { await call("GET", "/status"); break; } catch (e) { if (i > 50) throw e; await sleep(200); }
  }
  const s = await call("POST", "/session", {
    capabilities: { alwaysMatch: { browserName: "chrome", "goog:chromeOptions": {
      binary: chromium,
      args: ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
             ...(webgpu ? ["--enable-unsafe-webgpu", "--enable-features=Vulkan", "--use-angle=swiftshader"] : ["--disable-gpu"]),
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             "--no-first-run", `--user-data-dir=${mkdtempSync(join(tmpdir(), "dentate-chrome-"))}`],
    } } },
  });
  session = s.sessionId;
  await call("POST", `/session/${session}/url`, { url: `http://127.0.0.1:${port}/www/index.html?auto=1&n=${n}&dim=${dim}&nq=${nq}` });
  const t0 = Date.now();
  let status;
  while (Date.now() - t0 < timeoutS * 1000) {
    status = await call("POST", `/session/${session}/execute/sync`, { script: "return document.body.dataset.status || null", args: [] });
    if (status) break;
    await sleep(500);
  }
  const out = JSON.parse((await call("POST", `/session/${session}/execute/sync`, {
    script: "return document.getElementById('results').textContent || '{}'", args: [] })) || "{}");
  const rendered = await call("POST", `/session/${session}/execute/sync`, {
    script: "return [document.querySelectorAll('#results-table tbody tr').length, document.querySelectorAll('#hits .hit').length, document.getElementById('backend').textContent]", args: [] });
  out.rendered = { table_rows: rendered[0], memory_hits: rendered[1], backend_label: rendered[2] };
  console.log(JSON.stringify(out, null, 2));
  const problems = [];
  if (status !== "done") problems.push(`page status ${status ?? "timeout"}: ${out.error ?? ""}`);
  if (!out.search?.at_recall_0_9 || out.search.at_recall_0_9.recall_at_10 < minRecall) problems.push(`IVF-PQ recall@10 below ${minRecall}`);
  if (!out.search?.fastscan_at_recall_0_9 || out.search.fastscan_at_recall_0_9.recall_at_10 < minRecall) problems.push(`fast-scan recall@10 below ${minRecall}`);
  if (rendered[0] < 2) problems.push("the results table was not rendered");
  if (rendered[1] < 1) problems.push("no memory hits were rendered");
  if (!out.memory?.[0]?.text?.includes("Porto")) problems.push("the memory did not find where Clara is moving");
  if (JSON.stringify(out.memory_restored_top) !== JSON.stringify(out.memory?.[0]?.sources)) problems.push("the restored snapshot answered differently");
  if (webgpu) {
    const g = out.search?.webgpu;
    if (!g?.rows?.length) problems.push(`no WebGPU searches ran: ${g?.unavailable ?? "?"}`);
    else {
      if (g.fallbacks !== 0) problems.push(`${g.fallbacks} WebGPU calls fell back to the CPU`);
      for (const r of g.rows) if (r.recall_at_10 < minRecall) problems.push(`${r.index}: recall@10 ${r.recall_at_10}`);
    }
  }
  if (problems.length) console.error("FAILED: " + problems.join("; "));
  else code = 0;
} catch (e) {
  console.error(`FAILED: ${e.message}`);
} finally {
  if (session) await call("DELETE", `/session/${session}`).catch(() => {});
  driver.kill();
  server.close();
}
process.exit(code);
