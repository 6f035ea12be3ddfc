// Product quantization: per-query lookup tables, the ADC scan over the
// probed inverted lists with a per-thread top-k, the 4-bit fast-scan over
// packed blocks, exact re-ranking of candidates from the stored vectors, and
// `fold`, which reduces their per-thread lists (`Cand`, `better`, NONE and
// NEG come from common.wgsl, which the host puts in front).
//
// For k above the per-thread lists (K ≤ 128) the `_wide` variants keep no
// list: they write every scanned entry's (score bits, row) at its place in
// the query's row of `wide` (dead rows and unused places score NEG), and
// topk.wgsl's `segsel` and merges select the best k from there.
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
// The `_wide` variants' output: P.ncand places per query; a probe's
// entries start at its place `probe.w`.
@group(0) @binding(13) var<storage, read_write> wide: array<vec2<u32>>;

fn put_wide(q: u32, at: u32, s: f32, row: u32) {
    wide[q * P.ncand + at] = vec2<u32>(bitcast<u32>(s), row);
}

// Places past query `q`'s probed entries (from its probes' lengths) up to
// P.ncand scored NEG.
fn pad_wide(li: u32, q: u32) {
    var total = 0u;
    for (var p = 0u; p < P.nprobe; p += 1u) {
        total += probes[(P.q0 + q) * P.nprobe + p].y;
    }
    for (var e = total + li; e < P.ncand; e += WG) {
        put_wide(q, e, NEG, NONE);
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

fn adc_score(q: u32, slot: u32, bias: f32) -> f32 {
    var s = bias;
    for (var j = 0u; j < M; j += 1u) {
        s += lut_read(q, j * 256u + code_byte(slot, j));
    }
    return s;
}

// `adc` without lists: every probed entry into `wide`.
@compute @workgroup_size(WG)
fn adc_wide(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
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
            put_wide(q, pr.w + e, select(NEG, adc_score(q, slot, bias), is_alive(row)), row);
        }
    }
    pad_wide(li, q);
}

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
                let s = adc_score(q, slot, bias);
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

// `rerank` without lists: candidate c of query q (of those in this store
// chunk) into place c of `wide`; the first chunk's dispatch also writes the
// unused places (NONE rows), so every place is written once.
@compute @workgroup_size(WG)
fn rerank_wide(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let q = wg.x;
    if q >= P.nq {
        return;
    }
    let qi = P.q0 + q;
    for (var c = li; c < P.ncand; c += WG) {
        let row = cands[qi * P.ncand + c];
        if row == NONE {
            if P.row0 == 0u {
                put_wide(q, c, NEG, NONE);
            }
            continue;
        }
        if row < P.row0 || row - P.row0 >= P.nrows {
            continue;
        }
        put_wide(q, c, store_dot(qi, row - P.row0), row);
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

// `fs_offer` for `fastscan_wide`: the entry into `wide`.
fn fs_put(q: u32, pr: vec4<u32>, e: u32, sum: u32, scale: f32, offset: f32) {
    if e >= pr.y {
        return;
    }
    let row = slot_rows[pr.x + e];
    let s = bitcast<f32>(pr.z) + (offset + scale * f32(sum));
    put_wide(q, pr.w + e, select(NEG, s, is_alive(row)), row);
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
// bounds the sum by 65535); each entry offered to `top`, or with `to_wide`
// put into `wide`.
fn fs_scan(li: u32, q: u32, to_wide: bool, top: ptr<function, array<Slot, K>>) {
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
            if to_wide {
                fs_put(q, pr, b * 32u + i, s0, scale, offset);
                fs_put(q, pr, b * 32u + i + 16u, s1, scale, offset);
            } else {
                fs_offer(top, pr, b * 32u + i, s0, scale, offset);
                fs_offer(top, pr, b * 32u + i + 16u, s1, scale, offset);
            }
        }
    }
}

// One workgroup per query: its tables, then `fs_scan` keeping a per-thread
// top-K, written as one partial list.
@compute @workgroup_size(WG)
fn fastscan(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let q = wg.x;
    var top: array<Slot, K>;
    for (var i = 0u; i < K; i += 1u) {
        top[i] = Slot(NEG, NONE);
    }
    load_flut(li, q);
    workgroupBarrier();
    if q >= P.nq {
        return;
    }
    fs_scan(li, q, false, &top);
    write_list(&top, ((P.q0 + q) * WG + li) * K);
}

// `fastscan` without lists: every probed entry into `wide` (its pipeline
// is built with K = 1; `top` is not used).
@compute @workgroup_size(WG)
fn fastscan_wide(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let q = wg.x;
    var top: array<Slot, K>;
    load_flut(li, q);
    workgroupBarrier();
    if q >= P.nq {
        return;
    }
    fs_scan(li, q, true, &top);
    pad_wide(li, q);
}

// Folding the scans' per-thread lists: workgroup (g, q) merges the FAN_IN
// lists g·FAN_IN .. of query q (each K slots, sorted, NONE rows last) into
// output list g by rank: an entry's place in the merged order is its place
// in its own list plus, for every other list, how many of that list's
// entries rank before it (a binary search, the lists being sorted). The
// order is total (equal candidates by input index), so ranks are distinct;
// an entry ranked below K is written at its rank.
// Every thread works, and only two barriers are needed (the per-thread
// insertion lists this replaced left the last passes to a few threads).
// (Exact search, whose lists carry lengths and have no K bound, merges by
// merge path in topk.wgsl instead.)
const FAN_IN: u32 = 16u;
const FE: u32 = FAN_IN * K;

struct FoldParams {
    in_lists: u32,
    out_lists: u32,
    nq: u32,
    _f: u32,
}

@group(0) @binding(20) var<uniform> FP: FoldParams;
@group(0) @binding(21) var<storage, read> fold_in: array<Cand>;
@group(0) @binding(22) var<storage, read_write> fold_out: array<Cand>;

var<workgroup> fold_s: array<f32, FE>;
var<workgroup> fold_i: array<u32, FE>;
var<workgroup> fold_len: array<u32, FAN_IN>;

// Entry a (score, input index) ranks before entry b: `better`, reading the
// ids from the input only when the scores tie; the same candidate twice (a
// re-rank may list a row twice) by input index, so the order is total.
fn fold_before(sa: f32, ia: u32, sb: f32, ib: u32) -> bool {
    if ib == NONE {
        return ia != NONE;
    }
    if ia == NONE {
        return false;
    }
    if sa != sb {
        return sa > sb;
    }
    let ca = fold_in[ia];
    let cb = fold_in[ib];
    if better(ca, cb) {
        return true;
    }
    if better(cb, ca) {
        return false;
    }
    return ia < ib;
}

@compute @workgroup_size(256)
fn fold(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let g = wg.x;
    let q = wg.y;
    let live = g < FP.out_lists && q < FP.nq;
    let l0 = g * FAN_IN;
    let l_end = min(l0 + FAN_IN, FP.in_lists);
    for (var e = li; e < FE; e += 256u) {
        let l = l0 + e / K;
        var s = NEG;
        var i = NONE;
        if live && l < l_end {
            let at = (q * FP.in_lists + l) * K + e % K;
            let c = fold_in[at];
            if c.row != NONE {
                s = c.s;
                i = at;
            }
        }
        fold_s[e] = s;
        fold_i[e] = i;
    }
    workgroupBarrier();
    // Each list's length: its entries are a prefix.
    if li < FAN_IN {
        var lo = 0u;
        var hi = K;
        while lo < hi {
            let mid = (lo + hi) / 2u;
            if fold_i[li * K + mid] != NONE {
                lo = mid + 1u;
            } else {
                hi = mid;
            }
        }
        fold_len[li] = lo;
    }
    workgroupBarrier();
    if !live {
        return;
    }
    var total = 0u;
    for (var m = 0u; m < FAN_IN; m += 1u) {
        total += fold_len[m];
    }
    let o = (q * FP.out_lists + g) * K;
    for (var e = li; e < FE; e += 256u) {
        let l = e / K;
        let p = e % K;
        if p >= fold_len[l] {
            continue;
        }
        let se = fold_s[e];
        let ie = fold_i[e];
        var rank = p;
        for (var m = 0u; m < FAN_IN && rank < K; m += 1u) {
            if m == l {
                continue;
            }
            // Entries of list m before e: a prefix of it.
            var lo = 0u;
            var hi = fold_len[m];
            while lo < hi {
                let mid = (lo + hi) / 2u;
                let at = m * K + mid;
                if fold_before(fold_s[at], fold_i[at], se, ie) {
                    lo = mid + 1u;
                } else {
                    hi = mid;
                }
            }
            rank += lo;
        }
        if rank < K {
            fold_out[o + rank] = fold_in[ie];
        }
    }
    for (var r = total + li; r < K; r += 256u) {
        fold_out[o + r] = Cand(NEG, NONE, 0u, 0u);
    }
}
