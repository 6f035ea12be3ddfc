// What wasm/www/check.mjs and wasm/bench/run.mjs share: a static file
// server (cross-origin isolated, so performance.now() has microsecond
// resolution and SharedArrayBuffer is available) and headless Chromium
// driven through ChromeDriver's WebDriver protocol (no npm packages).
import { spawn } from "node:child_process";
import { createServer } from "node:http";
import { readFile } from "node:fs/promises";
import { extname, join, normalize } from "node:path";
import { mkdtempSync } from "node:fs";
import { tmpdir } from "node:os";

const types = { ".html": "text/html", ".js": "text/javascript", ".mjs": "text/javascript",
                ".wasm": "application/wasm", ".json": "application/json", ".css": "text/css" };

// Serves `mounts` ({ "/url/prefix/": "/dir", ... }; the longest prefix
// wins) on a free loopback port; resolves to { port, close }.
export async function serve(mounts) {
  const prefixes = Object.keys(mounts).sort((a, b) => b.length - a.length);
  const server = createServer(async (req, res) => {
    const url = normalize(decodeURIComponent(new URL(req.url, "http://x").pathname)).replace(/^(\.\.[/\\])+/, "");
    const prefix = prefixes.find((p) => url.startsWith(p));
    try {
      if (prefix === undefined) throw new Error("no mount");
      const body = await readFile(join(mounts[prefix], url.slice(prefix.length)));
      res.writeHead(200, {
        "content-type": types[extname(url)] ?? "application/octet-stream",
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
  return { port: server.address().port, close: () => server.close() };
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

// Starts ChromeDriver and a headless Chromium session; resolves to
// { run(script, ...args), waitFor(script, timeoutS), visit(url, timeoutS), close() }.
export async function chromium({ binary = "/usr/bin/chromium", driver = "/usr/bin/chromedriver", webgpu = false } = {}) {
  const port = 9515 + Math.floor(Math.random() * 400);
  const proc = spawn(driver, [`--port=${port}`], { stdio: "ignore" });
  const wd = `http://127.0.0.1:${port}`;
  const call = async (method, path, body) => {
    const r = await fetch(wd + path, {
      method,
      headers: { "content-type": "application/json" },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const j = await r.json();
    if (!r.ok) throw new Error(`${method} ${path}: ${JSON.stringify(j.value ?? j)}`);
    return j.value;
  };
  let session;
  try {
    for (let i = 0; ; i++) {
      try { await call("GET", "/status"); break; } catch (e) { if (i > 50) throw e; await sleep(200); }
    }
    const s = await call("POST", "/session", {
      capabilities: { alwaysMatch: { browserName: "chrome", "goog:chromeOptions": {
        binary,
        args: ["--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
               ...(webgpu ? ["--enable-unsafe-webgpu", "--enable-features=Vulkan", "--use-angle=swiftshader"] : ["--disable-gpu"]),
               "--disable-background-networking", "--disable-component-update", "--disable-sync",
               "--no-first-run", `--user-data-dir=${mkdtempSync(join(tmpdir(), "dentate-chrome-"))}`],
      } } },
    });
    session = s.sessionId;
  } catch (e) {
    proc.kill();
    throw e;
  }
  const run = (script, ...args) => call("POST", `/session/${session}/execute/sync`, { script, args });
  return {
    run,
    // Polls `script` until it returns something other than null; resolves
    // to that, or null after `timeoutS` seconds.
    async waitFor(script, timeoutS) {
      const t0 = Date.now();
      while (Date.now() - t0 < timeoutS * 1000) {
        const v = await run(script);
        if (v !== null && v !== undefined) return v;
        await sleep(500);
      }
      return null;
    },
    // Opens `url` and waits up to `timeoutS` for the page's body[data-status];
    // resolves to { status (null on timeout), out: the JSON the page left in
    // <pre id="results"> }.
    async visit(url, timeoutS) {
      await call("POST", `/session/${session}/url`, { url });
      const status = await this.waitFor("return document.body.dataset.status || null", timeoutS);
      const out = JSON.parse((await run("return document.getElementById('results').textContent || '{}'")) || "{}");
      return { status, out };
    },
    async close() {
      await call("DELETE", `/session/${session}`).catch(() => {});
      proc.kill();
    },
  };
}

// Serves `mounts`, opens `path` in headless Chromium, waits up to
// `timeoutS` for body[data-status], reads the JSON the page left in
// <pre id="results"> and hands it (with the browser, for more questions,
// and the server's origin, for more pages) to `check`, which returns a
// list of problems. Resolves to the exit code:
// 0 when the page said "done" and `check` found nothing.
export async function runPage({ mounts, path, timeoutS, binary, driver, webgpu = false }, check) {
  const server = await serve(mounts);
  let browser;
  let code = 1;
  try {
    browser = await chromium({ binary, driver, webgpu });
    const { status, out } = await browser.visit(`http://127.0.0.1:${server.port}${path}`, timeoutS);
    const problems = status === "done" ? [] : [`page status ${status ?? "timeout"}: ${out.error ?? ""}`];
    problems.push(...(await check(out, browser, `http://127.0.0.1:${server.port}`)));
    if (problems.length) console.error("FAILED: " + problems.join("; "));
    else code = 0;
  } catch (e) {
    console.error(`FAILED: ${e.message}`);
  } finally {
    if (browser) await browser.close();
    server.close();
  }
  return code;
}

// `--key value` pairs of the command line as an object.
export function cliArgs(argv = process.argv.slice(2)) {
  return Object.fromEntries(argv.reduce((acc, a, i, all) => (a.startsWith("--") ? [...acc, [a.slice(2), all[i + 1]]] : acc), []));
}
