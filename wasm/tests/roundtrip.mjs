// Files cross between the browser build and the native library both ways:
// indexes built and saved by the wasm package (wasm/pkg-node, the same
// module the page uses, here under Node) are loaded and searched by the
// native `dentate` CLI, which must return what wasm returned; and an index
// saved by the native CLI loads in wasm and answers the same.
//
//   node wasm/tests/roundtrip.mjs path/to/dentate
import { createRequire } from "node:module";
import { execFileSync } from "node:child_process";
import { mkdtempSync, writeFileSync, readFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import assert from "node:assert/strict";

const cli = process.argv[2];
if (!cli) throw new Error("usage: node wasm/tests/roundtrip.mjs path/to/dentate");
const require = createRequire(import.meta.url);
const pkg = join(dirname(fileURLToPath(import.meta.url)), "..", "pkg-node", "dentate_wasm.js");
const d = require(pkg);
const dir = mkdtempSync(join(tmpdir(), "dentate-roundtrip-"));

const dim = 32, n = 3000, nq = 25, k = 10;
const all = d.synthetic(n + nq, dim, 30, 5n);
const base = all.subarray(0, n * dim);
const queries = all.subarray(n * dim);
const ids = new Uint32Array(n).map((_, i) => i * 3 + 1);

function writeFvecs(path, data, dim) {
  const rows = data.length / dim;
  const buf = Buffer.alloc(rows * (4 + 4 * dim));
  for (let r = 0; r < rows; r++) {
    buf.writeInt32LE(dim, r * (4 + 4 * dim));
    for (let j = 0; j < dim; j++) buf.writeFloatLE(data[r * dim + j], r * (4 + 4 * dim) + 4 + 4 * j);
  }
  writeFileSync(path, buf);
}

function nativeSearch(index, extra = []) {
  const out = execFileSync(cli, ["index", "search", "--index", index, "--queries", join(dir, "q.fvecs"), "--k", String(k), ...extra],
                           { encoding: "utf8" });
  return out.trim().split("\n").map((l) => JSON.parse(l));
}

// Same ids, or where an id differs, a near-tie (scores within 1e-4): the
// native kernels sum in another order than simd128.
function sameRanking(wasmRes, native, what) {
  assert.equal(native.length, nq, `${what}: ${native.length} native rows`);
  for (let q = 0; q < nq; q++) {
    const wIds = Array.from(wasmRes.idNumbers.slice(q * k, (q + 1) * k));
    const wScores = Array.from(wasmRes.scores.slice(q * k, (q + 1) * k));
    assert.equal(native[q].ids.length, k, `${what}: query ${q} returned ${native[q].ids.length}`);
    for (let j = 0; j < k; j++) {
      assert.ok(Math.abs(native[q].scores[j] - wScores[j]) < 1e-4, `${what}: query ${q} rank ${j} score ${native[q].scores[j]} vs ${wScores[j]}`);
      if (native[q].ids[j] !== wIds[j]) {
        const other = wIds.indexOf(native[q].ids[j]);
        assert.ok(other >= 0 && Math.abs(wScores[other] - wScores[j]) < 1e-4, `${what}: query ${q} rank ${j} id ${native[q].ids[j]} vs ${wIds[j]}`);
      }
    }
  }
}

writeFvecs(join(dir, "q.fvecs"), queries, dim);

// wasm → native: exact and IVF-OPQ-PQ.
const exact = d.VectorIndex.exact(dim);
exact.add(ids, base);
writeFileSync(join(dir, "exact.dnt"), exact.save());
sameRanking(exact.search(queries, k), nativeSearch(join(dir, "exact.dnt")), "exact wasm→native");

const ivf = d.VectorIndex.ivfPq(dim, 32, 8, { opq: true, iterations: 8 });
ivf.train(base);
ivf.add(ids, base);
ivf.remove(new Uint32Array([1, 4, 7]));
writeFileSync(join(dir, "ivf.dnt"), ivf.save());
const info = execFileSync(cli, ["index", "info", "--index", join(dir, "ivf.dnt")], { encoding: "utf8" });
assert.match(info, /ivfpq/, info);
assert.match(info, new RegExp(String(n - 3)), info);
sameRanking(ivf.searchWith(queries, k, 32, 8), nativeSearch(join(dir, "ivf.dnt"), ["--nprobe", "32", "--rerank", "8"]), "ivfpq wasm→native");

// native → wasm: the CLI builds an index from the same vectors.
writeFvecs(join(dir, "base.fvecs"), base, dim);
execFileSync(cli, ["index", "build", "--input", join(dir, "base.fvecs"), "--output", join(dir, "native.dnt"), "--index", "flat"], { stdio: "ignore" });
const fromNative = d.VectorIndex.load(readFileSync(join(dir, "native.dnt")));
assert.equal(fromNative.size, n);
// The CLI numbers rows from 0; search it natively and in wasm.
sameRanking(fromNative.search(queries, k), nativeSearch(join(dir, "native.dnt")), "flat native→wasm");

console.log(`roundtrip: exact, ivfpq (wasm→native) and flat (native→wasm) agree on ${nq} queries`);
