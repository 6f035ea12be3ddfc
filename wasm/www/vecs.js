// Reads the benchmark file formats the `dentate data` command writes
// (shared by the demo page and wasm/bench): .fvecs / .ivecs, rows of
// (i32 dim, dim × 4-byte values). Resolves to {n, d, v} with `v` a
// Float32Array or Int32Array of n × d values.
export async function fetchVecs(url, Type) {
  const r = await fetch(url);
  if (!r.ok) throw new Error(`${url}: HTTP ${r.status}`);
  const buf = await r.arrayBuffer();
  if (buf.byteLength < 4) throw new Error(`${url} is empty`);
  const dv = new DataView(buf);
  const d = dv.getInt32(0, true);
  const n = buf.byteLength / (4 * (d + 1));
  if (!(d > 0) || !Number.isInteger(n)) throw new Error(`${url} is not whole rows of dimension ${d}`);
  const all = new Type(buf);
  const v = new Type(n * d);
  for (let i = 0; i < n; i++) {
    if (dv.getInt32(4 * i * (d + 1), true) !== d) throw new Error(`${url}: row ${i} has another dimension`);
    v.set(all.subarray(i * (d + 1) + 1, (i + 1) * (d + 1)), i * d);
  }
  return { n, d, v };
}
