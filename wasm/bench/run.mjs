// Runs the browser benchmark (wasm/bench/index.html) in headless Chromium
// on a folder of real embeddings and prints its JSON.
//
//   (cd wasm/bench && npm install)          # the pinned peers, once
//   wasm/build --no-memory                  # wasm/pkg-core (the index-only package)
//   node wasm/bench/run.mjs --data DIR [--nq 200] [--qoffset 0] [--peers hnswlib,voy]
//        [--grid '[[32,10],[48,10]]'] [--ef '[32,64]'] [--nlist 256] [--m 96] [--stores f16,sq8] [--timeout 1800]
//
// DIR holds base.fvecs, queries.fvecs and gt.ivecs (exact top-k ids, best
// first), e.g. from `dentate data rustdocs --embedder minilm --out DIR`.
import { dirname, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { cliArgs, runPage } from "../www/browser.mjs";

const args = cliArgs();
if (!args.data) {
  console.error("usage: node wasm/bench/run.mjs --data DIR [--nq N] [--peers hnswlib,voy] [--grid JSON] [--ef JSON]");
  process.exit(2);
}
const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const query = new URLSearchParams();
for (const key of ["nq", "qoffset", "peers", "grid", "ef", "nlist", "m", "stores"]) if (args[key] !== undefined) query.set(key, args[key]);
const code = await runPage({
  mounts: { "/": root, "/bench-data/": resolve(args.data) },
  path: `/bench/index.html?${query}`,
  timeoutS: +(args.timeout ?? 1800),
  binary: args.chromium,
  driver: args.chromedriver,
}, (out) => {
  console.log(JSON.stringify(out, null, 2));
  return [];
});
process.exit(code);
