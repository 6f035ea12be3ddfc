// Product quantization: per-query lookup tables, the ADC scan over the
// probed inverted lists, the 4-bit fast-scan over packed blocks, and exact
// re-ranking of candidates from the stored vectors (NONE and NEG come from
// common.wgsl, which the host puts in front).
//
// The kernels keep no top-k of their own: each writes every entry it
// scores as (score bits, row) at its place in the query's row of `scored`
// (dead rows and unused places score NEG), and topk.wgsl's `segsel` and
// merges select the best k from there (a sorted list per thread in
// private memory, folded afterwards, cost 4-5x the device time on an
// H200 and bounded k by the lists' slots).
//
// The host prepends:
//   M     sub-quantizers (code bytes per entry); for `fastscan` the padded
//         count m2 (m rounded up to even)
//   FW    u32 words of one query's u8 fast-scan tables (4·m2; 1 otherwise)
//   DSUB  dimensions per sub-quantizer
//   W     u32 words per stored code (⌈M/4⌉)
//   F16   re-rank store holds f16 pairs in u32 words, else f32
//   SQ8   re-rank store holds four 8-bit codes a u32 word (queries: q · step)
// and replaces the two placeholder lines below (the table with its
// `lut_read`, and the loop that fills it) with the lines of the chosen
// placement (workgroup memory as f32, or as f16 — then it also prepends
// `enable f16;` —, or a storage buffer written by `tables`).

const WG: u32 = 256u;

struct Params {
    nq: u32,
    d: u32,
    nprobe: u32,
    q0: u32,
    // Re-rank: candidates per query, and the store chunk's first row/rows.
    ncand: u32,
    row0: u32,
    nrows: u32,
    _p3: u32,
    _p4: u32,
    // Re-rank store: u32 words per row.
    sw: u32,
    _p1: u32,
    _p2: u32,
}

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> queries: array<f32>;
@group(0) @binding(2) var<storage, read> books: array<f32>;
@group(0) @binding(3) var<storage, read> codes: array<u32>;
@group(0) @binding(4) var<storage, read> slot_rows: array<u32>;
@group(0) @binding(5) var<storage, read> probes: array<vec4<u32>>;
@group(0) @binding(7) var<storage, read> alive: array<u32>;
@group(0) @binding(9) var<storage, read_write> gtables: array<f32>;
@group(0) @binding(10) var<storage, read> store: array<u32>;
@group(0) @binding(11) var<storage, read> cands: array<u32>;
// Fast-scan: per query (scale, offset, _, _) as f32 bits, then its FW words
// of u8 tables (table j at bytes 16j..16j+16).
@group(0) @binding(12) var<storage, read> qluts: array<u32>;
// The kernels' output: P.ncand places per query; a probe's entries start
// at its place `probe.w`.
@group(0) @binding(13) var<storage, read_write> scored: array<vec2<u32>>;

fn put_scored(q: u32, at: u32, s: f32, row: u32) {
    scored[q * P.ncand + at] = vec2<u32>(bitcast<u32>(s), row);
}

// Places past query `q`'s probed entries (from its probes' lengths) up to
// P.ncand scored NEG.
fn pad_scored(li: u32, q: u32) {
    var total = 0u;
    for (var p = 0u; p < P.nprobe; p += 1u) {
        total += probes[(P.q0 + q) * P.nprobe + p].y;
    }
    for (var e = total + li; e < P.ncand; e += WG) {
        put_scored(q, e, NEG, NONE);
    }
}

// Table entry (j, c) = <q_j, codebook_j[c]>.
fn table_entry(qi: u32, e: u32) -> f32 {
    let j = e / 256u;
    let qb = qi * P.d + j * DSUB;
    let cb = e * DSUB;
    var s = 0.0;
    for (var t = 0u; t < DSUB; t += 1u) {
        s += queries[qb + t] * books[cb + t];
    }
    return s;
}

// Tables of every query of the dispatch into a storage buffer (LUT = 2:
// tables too large for workgroup memory).
@compute @workgroup_size(WG)
fn tables(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let q = wg.x;
    if q >= P.nq {
        return;
    }
    for (var e = li; e < M * 256u; e += WG) {
        gtables[q * M * 256u + e] = table_entry(P.q0 + q, e);
    }
}

fn is_alive(row: u32) -> bool {
    return ((alive[row / 32u] >> (row % 32u)) & 1u) == 1u;
}

fn code_byte(slot: u32, j: u32) -> u32 {
    return (codes[slot * W + j / 4u] >> (8u * (j % 4u))) & 0xffu;
}

LUT_DECL

fn adc_score(q: u32, slot: u32, bias: f32) -> f32 {
    var s = bias;
    for (var j = 0u; j < M; j += 1u) {
        s += lut_read(q, j * 256u + code_byte(slot, j));
    }
    return s;
}

// One workgroup per query: its table (in workgroup memory unless it lives
// in a storage buffer), then its 256 threads stride over the entries of
// every probed list (probe = (first slot, length, bias bits, place)),
// each entry's score into `scored`.
@compute @workgroup_size(WG)
fn adc(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let q = wg.x;
    LUT_FILL
    workgroupBarrier();
    if q >= P.nq {
        return;
    }
    for (var p = 0u; p < P.nprobe; p += 1u) {
        let pr = probes[(P.q0 + q) * P.nprobe + p];
        let bias = bitcast<f32>(pr.z);
        for (var e = li; e < pr.y; e += WG) {
            let slot = pr.x + e;
            let row = slot_rows[slot];
            put_scored(q, pr.w + e, select(NEG, adc_score(q, slot, bias), is_alive(row)), row);
        }
    }
    pad_scored(li, q);
}

fn store_dot(qi: u32, local: u32) -> f32 {
    var s = 0.0;
    let qb = qi * P.d;
    let b = local * P.sw;
    if SQ8 {
        // Four codes a word; `queries` holds q_j · step_j (the host adds
        // Σ q_j · lo_j afterwards).
        let quads = P.d / 4u;
        for (var t = 0u; t < quads; t += 1u) {
            let w = store[b + t];
            let o = qb + 4u * t;
            s += queries[o] * f32(w & 0xffu) + queries[o + 1u] * f32((w >> 8u) & 0xffu)
                + queries[o + 2u] * f32((w >> 16u) & 0xffu) + queries[o + 3u] * f32(w >> 24u);
        }
        for (var r = 0u; r < P.d % 4u; r += 1u) {
            s += queries[qb + 4u * quads + r] * f32((store[b + quads] >> (8u * r)) & 0xffu);
        }
    } else if F16 {
        let pairs = P.d / 2u;
        for (var t = 0u; t < pairs; t += 1u) {
            let x = unpack2x16float(store[b + t]);
            s += queries[qb + 2u * t] * x.x + queries[qb + 2u * t + 1u] * x.y;
        }
        if P.d % 2u == 1u {
            s += queries[qb + P.d - 1u] * unpack2x16float(store[b + pairs]).x;
        }
    } else {
        for (var t = 0u; t < P.d; t += 1u) {
            s += queries[qb + t] * bitcast<f32>(store[b + t]);
        }
    }
    return s;
}

// Exact re-ranking: one workgroup per query scores its candidates that
// lie in this store chunk (rows row0 .. row0+nrows), candidate c into
// place c of `scored`; the first chunk's dispatch also writes the unused
// places (NONE rows), so every place is written once.
@compute @workgroup_size(WG)
fn rerank(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let q = wg.x;
    if q >= P.nq {
        return;
    }
    let qi = P.q0 + q;
    for (var c = li; c < P.ncand; c += WG) {
        let row = cands[qi * P.ncand + c];
        if row == NONE {
            if P.row0 == 0u {
                put_scored(q, c, NEG, NONE);
            }
            continue;
        }
        if row < P.row0 || row - P.row0 >= P.nrows {
            continue;
        }
        put_scored(q, c, store_dot(qi, row - P.row0), row);
    }
}

// ---- 4-bit fast-scan -------------------------------------------------
//
// Blocks are the core's layout byte for byte (dentate_core::fastscan): a
// block of 32 entries is 16·M bytes = 4·M words; byte 16j + i holds
// sub-quantizer j of entry i (low nibble) and of entry i + 16 (high
// nibble). A probe's first slot is a multiple of 32, so its first block is
// slot / 32.

var<workgroup> flut: array<u32, FW>;

fn flut_read(j: u32, c: u32) -> u32 {
    let e = 16u * j + c;
    return (flut[e / 4u] >> (8u * (e % 4u))) & 0xffu;
}

// Entry `e` of a probed list with table sum `sum` into `scored`: the score
// is bias + (offset + scale · sum) in f32, as QuantizedTables::score.
fn fs_put(q: u32, pr: vec4<u32>, e: u32, sum: u32, scale: f32, offset: f32) {
    if e >= pr.y {
        return;
    }
    let row = slot_rows[pr.x + e];
    let s = bitcast<f32>(pr.z) + (offset + scale * f32(sum));
    put_scored(q, pr.w + e, select(NEG, s, is_alive(row)), row);
}

// Query q's u8 tables into workgroup memory (before a barrier).
fn load_flut(li: u32, q: u32) {
    if q < P.nq {
        let qb = (P.q0 + q) * (FW + 4u);
        for (var e = li; e < FW; e += WG) {
            flut[e] = qluts[qb + 4u + e];
        }
    }
}

// Query q's scan: its threads stride over (block, byte column) pairs of
// every probed list — one word load per sub-quantizer gives the codes of
// two entries (i and i + 16) — summing table bytes in u32 (exact, the host
// bounds the sum by 65535); each entry into `scored`.
fn fs_scan(li: u32, q: u32) {
    let qb = (P.q0 + q) * (FW + 4u);
    let scale = bitcast<f32>(qluts[qb]);
    let offset = bitcast<f32>(qluts[qb + 1u]);
    for (var p = 0u; p < P.nprobe; p += 1u) {
        let pr = probes[(P.q0 + q) * P.nprobe + p];
        let pairs = (pr.y + 31u) / 32u * 16u;
        for (var t = li; t < pairs; t += WG) {
            let b = t / 16u;
            let i = t % 16u;
            let wbase = (pr.x / 32u + b) * (4u * M) + i / 4u;
            let sh = 8u * (i % 4u);
            var s0 = 0u;
            var s1 = 0u;
            for (var j = 0u; j < M; j += 1u) {
                let byte = (codes[wbase + 4u * j] >> sh) & 0xffu;
                s0 += flut_read(j, byte & 15u);
                s1 += flut_read(j, byte >> 4u);
            }
            fs_put(q, pr, b * 32u + i, s0, scale, offset);
            fs_put(q, pr, b * 32u + i + 16u, s1, scale, offset);
        }
    }
}

// One workgroup per query: its tables, then `fs_scan`.
@compute @workgroup_size(WG)
fn fastscan(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let q = wg.x;
    load_flut(li, q);
    workgroupBarrier();
    if q >= P.nq {
        return;
    }
    fs_scan(li, q);
    pad_scored(li, q);
}
