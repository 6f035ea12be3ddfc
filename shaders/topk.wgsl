// Batched inner-product scoring with fused top-k, the merge pass that
// reduces partial top-k lists, and plain score matrices (a · bᵀ).
//
// The host prepends the constants of a variant:
//   K    slots per top-k list (a power of two ≥ the k asked for)
//   TQ   queries per workgroup
//   TS   threads per query (TQ × TS = workgroup size)
//   F16  base stored as f16 pairs in u32 words (unpacked to f32), else f32
//   G    lists merged by one thread of the merge pass
//
// Base rows are in the core's panel layout: 16 rows per panel,
// dimension-major inside a panel, so the 8 rows a thread scores for one
// dimension are 8 consecutive elements (two vec4 loads in f32, one in f16).
// Every comparison orders by score descending, then id ascending (ids are
// u64 as lo/hi words), so the device and the CPU return the same ids.
// `Cand`, `better`, NONE and NEG come from common.wgsl, which the host
// puts in front.

const RPT: u32 = 8u;

struct Params {
    d: u32,
    dp4: u32,
    n: u32,
    row0: u32,
    nq: u32,
    rows_per_slice: u32,
    lists: u32,
    list0: u32,
    flags: u32,
    q0: u32,
    _p1: u32,
    _p2: u32,
}

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> base: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> queries: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> ids: array<u32>;
@group(0) @binding(4) var<storage, read> alive: array<u32>;
@group(0) @binding(5) var<storage, read> bias: array<f32>;
@group(0) @binding(6) var<storage, read_write> out_top: array<Cand>;
@group(0) @binding(7) var<storage, read_write> out_mat: array<f32>;

struct Row8 {
    a: vec4<f32>,
    b: vec4<f32>,
}

// Rows `lane..lane+8` of panel `p`, dimension `j` (chunk-local).
fn load8(p: u32, j: u32, lane: u32) -> Row8 {
    let e = p * 16u * P.d + j * 16u + lane;
    if F16 {
        let w = base[e / 8u];
        return Row8(
            vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)),
            vec4<f32>(unpack2x16float(w.z), unpack2x16float(w.w)),
        );
    }
    let i = e / 4u;
    return Row8(bitcast<vec4<f32>>(base[i]), bitcast<vec4<f32>>(base[i + 1u]));
}

// Inner products of query `q` (dispatch-local) with rows `r0..r0+8`.
fn dot8(q: u32, r0: u32) -> Row8 {
    let p = r0 / 16u;
    let lane = r0 % 16u;
    var a = vec4<f32>(0.0);
    var b = vec4<f32>(0.0);
    let qb = (P.q0 + q) * P.dp4;
    let full = P.d / 4u;
    for (var j4 = 0u; j4 < full; j4 += 1u) {
        let qv = queries[qb + j4];
        let j = 4u * j4;
        let x0 = load8(p, j, lane);
        a += qv.x * x0.a;
        b += qv.x * x0.b;
        let x1 = load8(p, j + 1u, lane);
        a += qv.y * x1.a;
        b += qv.y * x1.b;
        let x2 = load8(p, j + 2u, lane);
        a += qv.z * x2.a;
        b += qv.z * x2.b;
        let x3 = load8(p, j + 3u, lane);
        a += qv.w * x3.a;
        b += qv.w * x3.b;
    }
    for (var j = 4u * full; j < P.d; j += 1u) {
        let qv = queries[qb + j / 4u][j % 4u];
        let x = load8(p, j, lane);
        a += qv * x.a;
        b += qv * x.b;
    }
    return Row8(a, b);
}

fn is_alive(local: u32) -> bool {
    if (P.flags & 2u) == 0u {
        return true;
    }
    return ((alive[local / 32u] >> (local % 32u)) & 1u) == 1u;
}

// Caller id (lo, hi) of a chunk-local row.
fn id_of(local: u32) -> vec2<u32> {
    if (P.flags & 1u) != 0u {
        return vec2<u32>(ids[2u * local], ids[2u * local + 1u]);
    }
    return vec2<u32>(P.row0 + local, 0u);
}

// A slot of a per-thread list: score and chunk-local row (8 bytes, so a
// list of 256 stays within what software rasterizers give an invocation;
// ids are read only to break exact ties).
struct Slot {
    s: f32,
    r: u32,
}

fn slot_better(s1: f32, r1: u32, b: Slot) -> bool {
    if b.r == NONE {
        return r1 != NONE;
    }
    if r1 == NONE {
        return false;
    }
    if s1 != b.s {
        return s1 > b.s;
    }
    let x = id_of(r1);
    let y = id_of(b.r);
    if x.y != y.y {
        return x.y < y.y;
    }
    return x.x < y.x;
}

// One workgroup scores TQ queries against one slice of the chunk's rows;
// each thread keeps a sorted top-K of the rows it scored and writes it as
// one partial list (list = list0 + slice × TS + thread-in-query).
@compute @workgroup_size(TQ * TS)
fn scan(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let qs = li / TS;
    let seg = li % TS;
    let q = wg.y * TQ + qs;
    let slice = wg.x;
    var top: array<Slot, K>;
    for (var i = 0u; i < K; i += 1u) {
        top[i] = Slot(NEG, NONE);
    }
    if q >= P.nq {
        return;
    }
    let start = slice * P.rows_per_slice;
    let end = min(start + P.rows_per_slice, P.n);
    for (var r0 = start + seg * RPT; r0 < end; r0 += TS * RPT) {
        let x = dot8(q, r0);
        for (var t = 0u; t < RPT; t += 1u) {
            let local = r0 + t;
            if local >= end {
                break;
            }
            var s: f32;
            if t < 4u {
                s = x.a[t];
            } else {
                s = x.b[t - 4u];
            }
            if (P.flags & 4u) != 0u {
                s += bias[local];
            }
            // Most scores lose to the current K-th best: reject them before
            // touching ids or the alive bits.
            if top[K - 1u].r != NONE && s < top[K - 1u].s {
                continue;
            }
            if !is_alive(local) || !slot_better(s, local, top[K - 1u]) {
                continue;
            }
            var i = K - 1u;
            loop {
                if i == 0u || !slot_better(s, local, top[i - 1u]) {
                    break;
                }
                top[i] = top[i - 1u];
                i -= 1u;
            }
            top[i] = Slot(s, local);
        }
    }
    let list = P.list0 + slice * TS + seg;
    let o = ((P.q0 + q) * P.lists + list) * K;
    for (var i = 0u; i < K; i += 1u) {
        let t = top[i];
        if t.r == NONE {
            out_top[o + i] = Cand(NEG, NONE, 0u, 0u);
        } else {
            let id = id_of(t.r);
            out_top[o + i] = Cand(t.s, P.row0 + t.r, id.x, id.y);
        }
    }
}

// Score matrix: out_mat[q × lists + row0 + row] = <query q, row> for every
// row of the chunk (`lists` is the total row count here).
@compute @workgroup_size(TQ * TS)
fn scores(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let qs = li / TS;
    let seg = li % TS;
    let q = wg.y * TQ + qs;
    if q >= P.nq {
        return;
    }
    let start = wg.x * P.rows_per_slice;
    let end = min(start + P.rows_per_slice, P.n);
    for (var r0 = start + seg * RPT; r0 < end; r0 += TS * RPT) {
        let x = dot8(q, r0);
        let o = q * P.lists + P.row0 + r0;
        for (var t = 0u; t < RPT; t += 1u) {
            if r0 + t >= end {
                break;
            }
            if t < 4u {
                out_mat[o + t] = x.a[t];
            } else {
                out_mat[o + t] = x.b[t - 4u];
            }
        }
    }
}

struct MergeParams {
    in_lists: u32,
    out_lists: u32,
    nq: u32,
    q0: u32,
}

@group(0) @binding(8) var<uniform> MP: MergeParams;
@group(0) @binding(9) var<storage, read> min_: array<Cand>;
@group(0) @binding(10) var<storage, read_write> mout: array<Cand>;

// Thread (group g, query q) merges lists g·G .. g·G+G of query q into
// output list g. Input lists are sorted, so a list is left at its first
// entry that cannot enter the current top-K. The thread's list holds
// positions in the input (8-byte slots, as in `scan`).
@compute @workgroup_size(64)
fn merge(@builtin(global_invocation_id) gid: vec3<u32>) {
    let g = gid.x;
    let q = MP.q0 + gid.y;
    if g >= MP.out_lists || gid.y >= MP.nq {
        return;
    }
    var top: array<u32, K>;
    for (var i = 0u; i < K; i += 1u) {
        top[i] = NONE;
    }
    let l_end = min((g + 1u) * G, MP.in_lists);
    for (var l = g * G; l < l_end; l += 1u) {
        let b = (q * MP.in_lists + l) * K;
        for (var e = 0u; e < K; e += 1u) {
            let c = min_[b + e];
            if !merge_better(c, top[K - 1u]) {
                break;
            }
            var i = K - 1u;
            loop {
                if i == 0u || !merge_better(c, top[i - 1u]) {
                    break;
                }
                top[i] = top[i - 1u];
                i -= 1u;
            }
            top[i] = b + e;
        }
    }
    let o = (q * MP.out_lists + g) * K;
    for (var i = 0u; i < K; i += 1u) {
        if top[i] == NONE {
            mout[o + i] = Cand(NEG, NONE, 0u, 0u);
        } else {
            mout[o + i] = min_[top[i]];
        }
    }
}

// `c` before the input entry at position `at` (NONE: an empty slot).
fn merge_better(c: Cand, at: u32) -> bool {
    if at == NONE {
        return c.row != NONE;
    }
    return better(c, min_[at]);
}
