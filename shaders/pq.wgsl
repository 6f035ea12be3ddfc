// Product quantization: per-query lookup tables, the ADC scan over the
// probed inverted lists with a per-thread top-k, the 4-bit fast-scan over
// packed blocks, exact re-ranking of candidates from the stored vectors, and
// `fold`, which reduces their per-thread lists (`Cand`, `better`, NONE and
// NEG come from common.wgsl, which the host puts in front).
//
// The host prepends:
//   K     slots per top-k list
//   M     sub-quantizers (code bytes per entry); for `fastscan` the padded
//         count m2 (m rounded up to even)
//   FW    u32 words of one query's u8 fast-scan tables (4·m2; 1 otherwise)
//   DSUB  dimensions per sub-quantizer
//   W     u32 words per stored code (⌈M/4⌉)
//   LUT   0: table in workgroup memory (f32), 1: in workgroup memory as f16
//         (needs SHADER_F16), 2: in a storage buffer written by `tables`
//   F16   re-rank store holds f16 pairs in u32 words, else f32
// and replaces the two placeholder lines below (the table with its
// `lut_read`, and the loop that fills it) with the lines of the chosen
// placement; for LUT = 1 it also prepends `enable f16;`.

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
    list0: u32,
    lists: u32,
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
@group(0) @binding(6) var<storage, read> ids: array<u32>;
@group(0) @binding(7) var<storage, read> alive: array<u32>;
@group(0) @binding(8) var<storage, read_write> out_top: array<Cand>;
@group(0) @binding(9) var<storage, read_write> gtables: array<f32>;
@group(0) @binding(10) var<storage, read> store: array<u32>;
@group(0) @binding(11) var<storage, read> cands: array<u32>;
// Fast-scan: per query (scale, offset, _, _) as f32 bits, then its FW words
// of u8 tables (table j at bytes 16j..16j+16).
@group(0) @binding(12) var<storage, read> qluts: array<u32>;

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

// A slot of a per-thread list: score and global row (8 bytes; ids are
// read only to break exact ties).
struct Slot {
    s: f32,
    r: u32,
}

fn slot_better(s1: f32, r1: u32, b: Slot) -> bool {
    if b.r == NONE {
        return true;
    }
    if s1 != b.s {
        return s1 > b.s;
    }
    let h1 = ids[2u * r1 + 1u];
    let h2 = ids[2u * b.r + 1u];
    if h1 != h2 {
        return h1 < h2;
    }
    return ids[2u * r1] < ids[2u * b.r];
}

fn insert(top: ptr<function, array<Slot, K>>, s: f32, row: u32) {
    if !slot_better(s, row, (*top)[K - 1u]) {
        return;
    }
    var i = K - 1u;
    loop {
        if i == 0u || !slot_better(s, row, (*top)[i - 1u]) {
            break;
        }
        (*top)[i] = (*top)[i - 1u];
        i -= 1u;
    }
    (*top)[i] = Slot(s, row);
}

fn write_list(top: ptr<function, array<Slot, K>>, o: u32) {
    for (var i = 0u; i < K; i += 1u) {
        let t = (*top)[i];
        if t.r == NONE {
            out_top[o + i] = Cand(NEG, NONE, 0u, 0u);
        } else {
            out_top[o + i] = Cand(t.s, t.r, ids[2u * t.r], ids[2u * t.r + 1u]);
        }
    }
}

LUT_DECL

// One workgroup per query: its table (in workgroup memory unless LUT = 2),
// then its 256 threads stride over the entries of every probed list
// (probe = (first slot, length, bias bits, _)), each keeping a top-K that
// it writes as one partial list.
@compute @workgroup_size(WG)
fn adc(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let q = wg.x;
    var top: array<Slot, K>;
    for (var i = 0u; i < K; i += 1u) {
        top[i] = Slot(NEG, NONE);
    }
    LUT_FILL
    workgroupBarrier();
    if q < P.nq {
        for (var p = 0u; p < P.nprobe; p += 1u) {
            let pr = probes[(P.q0 + q) * P.nprobe + p];
            let bias = bitcast<f32>(pr.z);
            for (var e = li; e < pr.y; e += WG) {
                let slot = pr.x + e;
                var s = bias;
                for (var j = 0u; j < M; j += 1u) {
                    s += lut_read(q, j * 256u + code_byte(slot, j));
                }
                if top[K - 1u].r != NONE && s < top[K - 1u].s {
                    continue;
                }
                let row = slot_rows[slot];
                if !is_alive(row) {
                    continue;
                }
                insert(&top, s, row);
            }
        }
        write_list(&top, ((P.q0 + q) * WG + li) * K);
    }
}

fn store_dot(qi: u32, local: u32) -> f32 {
    var s = 0.0;
    let qb = qi * P.d;
    let b = local * P.sw;
    if F16 {
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

// Exact re-ranking: one workgroup per query scores its candidate rows that
// lie in this store chunk (rows row0 .. row0+nrows) and keeps a top-K per
// thread, written as list list0 + thread.
@compute @workgroup_size(WG)
fn rerank(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let q = wg.x;
    if q >= P.nq {
        return;
    }
    let qi = P.q0 + q;
    var top: array<Slot, K>;
    for (var i = 0u; i < K; i += 1u) {
        top[i] = Slot(NEG, NONE);
    }
    for (var c = li; c < P.ncand; c += WG) {
        let row = cands[qi * P.ncand + c];
        if row == NONE || row < P.row0 || row - P.row0 >= P.nrows {
            continue;
        }
        let s = store_dot(qi, row - P.row0);
        insert(&top, s, row);
    }
    write_list(&top, (qi * P.lists + P.list0 + li) * K);
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

// Offers entry `e` of a probed list with table sum `sum`: the score is
// bias + (offset + scale · sum) in f32, as QuantizedTables::score.
fn fs_offer(top: ptr<function, array<Slot, K>>, pr: vec4<u32>, e: u32, sum: u32, scale: f32, offset: f32) {
    if e >= pr.y {
        return;
    }
    let s = bitcast<f32>(pr.z) + (offset + scale * f32(sum));
    if (*top)[K - 1u].r != NONE && s < (*top)[K - 1u].s {
        return;
    }
    let row = slot_rows[pr.x + e];
    if !is_alive(row) {
        return;
    }
    insert(top, s, row);
}

// One workgroup per query: its u8 tables into workgroup memory, then its
// threads stride over (block, byte column) pairs of every probed list —
// one word load per sub-quantizer gives the codes of two entries (i and
// i + 16) — summing table bytes in u32 (exact, the host bounds the sum by
// 65535) and keeping a per-thread top-K, written as one partial list.
@compute @workgroup_size(WG)
fn fastscan(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let q = wg.x;
    var top: array<Slot, K>;
    for (var i = 0u; i < K; i += 1u) {
        top[i] = Slot(NEG, NONE);
    }
    let qb = (P.q0 + q) * (FW + 4u);
    if q < P.nq {
        for (var e = li; e < FW; e += WG) {
            flut[e] = qluts[qb + 4u + e];
        }
    }
    workgroupBarrier();
    if q >= P.nq {
        return;
    }
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
            fs_offer(&top, pr, b * 32u + i, s0, scale, offset);
            fs_offer(&top, pr, b * 32u + i + 16u, s1, scale, offset);
        }
    }
    write_list(&top, ((P.q0 + q) * WG + li) * K);
}

// Folding the scans' per-thread lists: thread (g, q) merges lists
// g·FAN_IN .. g·FAN_IN+FAN_IN of query q (each K slots, sorted, NONE rows
// last) into output list g by insertion into a K-slot list of positions.
// A list is left at its first entry that cannot enter the current top-K.
// (Exact search, whose lists carry lengths and have no K bound, merges by
// merge path in topk.wgsl instead.)
const FAN_IN: u32 = 16u;

struct FoldParams {
    in_lists: u32,
    out_lists: u32,
    nq: u32,
    _f: u32,
}

@group(0) @binding(20) var<uniform> FP: FoldParams;
@group(0) @binding(21) var<storage, read> fold_in: array<Cand>;
@group(0) @binding(22) var<storage, read_write> fold_out: array<Cand>;

// `c` before the input entry at position `at` (NONE: an empty slot).
fn fold_better(c: Cand, at: u32) -> bool {
    if at == NONE {
        return c.row != NONE;
    }
    return better(c, fold_in[at]);
}

@compute @workgroup_size(64)
fn fold(@builtin(global_invocation_id) gid: vec3<u32>) {
    let g = gid.x;
    let q = gid.y;
    if g >= FP.out_lists || q >= FP.nq {
        return;
    }
    var top: array<u32, K>;
    for (var i = 0u; i < K; i += 1u) {
        top[i] = NONE;
    }
    let l_end = min((g + 1u) * FAN_IN, FP.in_lists);
    for (var l = g * FAN_IN; l < l_end; l += 1u) {
        let b = (q * FP.in_lists + l) * K;
        for (var e = 0u; e < K; e += 1u) {
            let c = fold_in[b + e];
            if !fold_better(c, top[K - 1u]) {
                break;
            }
            var i = K - 1u;
            loop {
                if i == 0u || !fold_better(c, top[i - 1u]) {
                    break;
                }
                top[i] = top[i - 1u];
                i -= 1u;
            }
            top[i] = b + e;
        }
    }
    let o = (q * FP.out_lists + g) * K;
    for (var i = 0u; i < K; i += 1u) {
        if top[i] == NONE {
            fold_out[o + i] = Cand(NEG, NONE, 0u, 0u);
        } else {
            fold_out[o + i] = fold_in[top[i]];
        }
    }
}
