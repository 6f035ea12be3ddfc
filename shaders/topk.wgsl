// Exact batched scoring as a tiled GEMM, the per-segment top-k select that
// follows it, and the merge of its sorted candidate lists.
//
// The host prepends the constants of a variant:
//   TQ   queries per thread of `gemm` (1, 4 or 8): a tile is WG/16·TQ queries × 128 rows
//   WG   threads of a `gemm` workgroup (256, or 128 with BK 16)
//   F16  base stored as f16 pairs in u32 words (unpacked to f32), else f32
//   SEG  scores per `segsel` segment (1,024 to 4,096, by workgroup memory)
//   BK   dimensions per slab of `gemm` (16 or 32)
//   PF   `gemm` loads the next slab while it multiplies this one
//
// `gemm` computes a tile of queries × rows per workgroup. Slabs of BK
// dimensions of both operands are staged in workgroup memory; each of the
// WG threads keeps a register tile of TQ queries × 8 rows, so a step reads
// (TQ + 8) floats from workgroup memory for 8·TQ multiply-adds. Base rows
// are in the core's panel layout (16 rows per panel, dimension-major inside
// a panel): the 16 rows × BK dimensions of a panel's slab are 4·BK
// consecutive vec4s. Exact search hands the queries over transposed
// ([dimension][query], `P.qt`), so four queries of a dimension are one
// vec4 load too; score matrices and k-means pass query rows.
// The scores of a block of rows go to a score buffer (or, for score
// matrices, straight to the output).
//
// `segsel` turns a segment of SEG scores of one query into its sorted best
// `K` (score descending, then id ascending, as the CPU's `TopK`): scores
// below the query's running threshold are dropped at once, the survivors
// are sorted bitonically in workgroup memory, and the segment's K-th best
// raises the threshold (it bounds the final K-th best from below), so after
// a query's first segments almost every score is rejected by one
// comparison. Where more than K survive, a radix select finds the K-th best
// first and only that many are sorted.
//
// After a batch's first block the threshold is already known when the
// scores are computed: `gemm_keep` also appends each score at or above its
// query's threshold to that query's survivors (a handful per block once
// the threshold is set), and `survsel` sorts them into one list per query
// the same way, so `segsel` never reads the block's scores again; only a
// query with more survivors than SEG slots (rows in rising order) has its
// block selected segment by segment.
//
// `merge` folds two sorted lists (with their lengths) into the best K of
// both with a merge path: each output slot finds its split by binary
// search, so a list of any length merges without workgroup memory.
//
// `Cand`, `better`, NONE and NEG come from common.wgsl, which the host puts
// in front.

const BR: u32 = 128u;
const BQ: u32 = (WG / 16u) * TQ;
// Base vec4s of a slab (128 rows × BK dimensions; f16 packs 8 a vec4).
const NB: u32 = select(BK * BR / 4u, BK * BR / 8u, F16);
// Query vec4s of a slab.
const NQV: u32 = BK * BQ / 4u;

struct Params {
    d: u32,
    dp4: u32,
    // rows of the chunk
    n: u32,
    // first chunk-local row of the block
    blk0: u32,
    // rows of the block
    blk_rows: u32,
    nq: u32,
    // first query of the dispatch in the query buffer
    q0: u32,
    // floats per query row of the output
    stride: u32,
    // output column of the block's first row
    col0: u32,
    flags: u32,
    // global row of the chunk's first row
    row0: u32,
    // lists per query in the partial buffer, K
    lists: u32,
    // `best_col`: output slot of the dispatch's first query
    a0: u32,
    k: u32,
    // queries as [dimension][query] with this many floats per dimension (a
    // multiple of the tile's BQ, zero past the dispatch's queries); 0: as
    // rows of dp4 vec4s
    qt: u32,
    _p1: u32,
}

@group(0) @binding(0) var<uniform> P: Params;
@group(0) @binding(1) var<storage, read> base: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read> queries: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> ids: array<u32>;
@group(0) @binding(4) var<storage, read> alive: array<u32>;
@group(0) @binding(5) var<storage, read> bias: array<f32>;
@group(0) @binding(6) var<storage, read_write> out_top: array<Cand>;
@group(0) @binding(7) var<storage, read_write> out_mat: array<f32>;
@group(0) @binding(11) var<storage, read_write> out_len: array<u32>;
@group(0) @binding(12) var<storage, read_write> thr: array<atomic<u32>>;
// Survivors of a block per query (SEG slots: score bits, chunk-local row)
// and how many there were (`gemm_keep` writes, `survsel` reads and zeroes).
@group(0) @binding(18) var<storage, read_write> surv: array<vec2<u32>>;
@group(0) @binding(19) var<storage, read_write> kept: array<atomic<u32>>;

// Slabs: queries as [dim][query / 4] (a thread's TQ queries are one vec4
// when TQ = 4), rows as [dim][row / 4].
var<workgroup> qs: array<vec4<f32>, NQV>;
var<workgroup> bs: array<vec4<f32>, BK * BR / 4u>;

fn is_alive(local: u32) -> bool {
    if (P.flags & 2u) == 0u {
        return true;
    }
    return ((alive[local / 32u] >> (local % 32u)) & 1u) == 1u;
}

// One thread's share of a slab (dimensions k0..k0+BK of the tile's 128
// rows and BQ queries), held in registers from the global loads to the
// store into workgroup memory: NB/WG vec4s of the base in b0..b3 (for an
// f16 base raw vec4<u32>s, bit-cast, unpacked at the store) and NQV/WG of
// the queries in q0..q3.
// Named fields, not an array, so no compiler keeps them in memory.
struct Slab {
    b0: vec4<f32>,
    b1: vec4<f32>,
    b2: vec4<f32>,
    b3: vec4<f32>,
    q0: vec4<f32>,
    q1: vec4<f32>,
    q2: vec4<f32>,
    q3: vec4<f32>,
}

// Panel (of the tile's 8), dimension within the slab and first lane of
// f32 vec4 number `v` of a slab (16 rows × BK dims = 4·BK vec4 per panel).
fn f32_place(v: u32) -> vec3<u32> {
    let w = v % (4u * BK);
    return vec3<u32>(v / (4u * BK), w / 4u, (w % 4u) * 4u);
}

// The same for the f16 base's vec4<u32> number `v` (8 halves each, 2·BK
// per panel).
fn f16_place(v: u32) -> vec3<u32> {
    let w = v % (2u * BK);
    return vec3<u32>(v / (2u * BK), w / 2u, (w % 2u) * 8u);
}

// The base words of vec4 number `v` (zero past the chunk's panels or the
// dimension).
fn load_base(v: u32, k0: u32, p0: u32) -> vec4<f32> {
    let npanels = (P.n + 15u) / 16u;
    var s = f32_place(v);
    var per = 4u;
    if F16 {
        s = f16_place(v);
        per = 8u;
    }
    let j = k0 + s.y;
    if p0 + s.x < npanels && j < P.d {
        return bitcast<vec4<f32>>(base[((p0 + s.x) * 16u * P.d + j * 16u + s.z) / per]);
    }
    return vec4<f32>(0.0);
}

fn store_base(v: u32, x: vec4<f32>) {
    if F16 {
        let s = f16_place(v);
        let u = bitcast<vec4<u32>>(x);
        let o = s.y * (BR / 4u) + s.x * 4u + s.z / 4u;
        bs[o] = vec4<f32>(unpack2x16float(u.x), unpack2x16float(u.y));
        bs[o + 1u] = vec4<f32>(unpack2x16float(u.z), unpack2x16float(u.w));
    } else {
        let s = f32_place(v);
        bs[s.y * (BR / 4u) + s.x * 4u + s.z / 4u] = x;
    }
}

// Queries as [dim][query / 4]: vec4 `v` is dimension v / (BQ/4) of
// queries 4·(v % (BQ/4)).. (from dispatch-local query tq0); one vec4 load
// from a transposed query buffer (P.qt), four scalar ones from rows.
fn load_queries(v: u32, k0: u32, tq0: u32) -> vec4<f32> {
    var x = vec4<f32>(0.0);
    let kk = v / (BQ / 4u);
    let q4 = (v % (BQ / 4u)) * 4u;
    let j = k0 + kk;
    if P.qt != 0u {
        // Transposed: the four queries are one aligned vec4 (P.q0, tq0
        // and q4 are multiples of 4).
        if v < NQV && j < P.d {
            x = queries[(j * P.qt + P.q0 + tq0 + q4) / 4u];
        }
        return x;
    }
    if v < NQV && j < P.d {
        let jv = j / 4u;
        let jc = j % 4u;
        for (var e = 0u; e < 4u; e += 1u) {
            if tq0 + q4 + e < P.nq {
                x[e] = queries[(P.q0 + tq0 + q4 + e) * P.dp4 + jv][jc];
            }
        }
    }
    return x;
}

fn store_queries(v: u32, x: vec4<f32>) {
    if v < NQV {
        qs[v] = x;
    }
}

// Thread li's share of the slab at dimension k0 (rows from panel p0):
// vec4s li, li + WG, … of the base's NB and the queries' NQV.
fn fetch(li: u32, k0: u32, p0: u32, tq0: u32) -> Slab {
    let z = vec4<f32>(0.0);
    var s = Slab(z, z, z, z, z, z, z, z);
    s.b0 = load_base(li, k0, p0);
    if NB > WG {
        s.b1 = load_base(li + WG, k0, p0);
    }
    if NB > 2u * WG {
        s.b2 = load_base(li + 2u * WG, k0, p0);
        s.b3 = load_base(li + 3u * WG, k0, p0);
    }
    s.q0 = load_queries(li, k0, tq0);
    if NQV > WG {
        s.q1 = load_queries(li + WG, k0, tq0);
    }
    if NQV > 2u * WG {
        s.q2 = load_queries(li + 2u * WG, k0, tq0);
        s.q3 = load_queries(li + 3u * WG, k0, tq0);
    }
    return s;
}

// Stores thread li's share of a slab into workgroup memory.
fn put(li: u32, s: Slab) {
    store_base(li, s.b0);
    if NB > WG {
        store_base(li + WG, s.b1);
    }
    if NB > 2u * WG {
        store_base(li + 2u * WG, s.b2);
        store_base(li + 3u * WG, s.b3);
    }
    store_queries(li, s.q0);
    if NQV > WG {
        store_queries(li + WG, s.q1);
    }
    if NQV > 2u * WG {
        store_queries(li + 2u * WG, s.q2);
        store_queries(li + 3u * WG, s.q3);
    }
}

// The score of query `q` (dispatch-local) against chunk-local row `r`
// from its dot product `x`: bias added, dead rows NEG.
fn final_score(r: u32, x: f32) -> f32 {
    var s = x;
    if (P.flags & 4u) != 0u {
        s += bias[r];
    }
    if !is_alive(r) {
        s = NEG;
    }
    return s;
}

// Rows of a block a thread may write: those before the block's end (and
// the chunk's).
fn block_end() -> u32 {
    return min(P.blk0 + P.blk_rows, P.n);
}

// Writes the scores `x` of query `q` (dispatch-local) against chunk-local
// rows r0..r0+4; rows past the block or the chunk left alone.
fn emit(q: u32, r0: u32, x: vec4<f32>) {
    if q >= P.nq {
        return;
    }
    let end = block_end();
    for (var c = 0u; c < 4u; c += 1u) {
        let r = r0 + c;
        if r >= end {
            return;
        }
        out_mat[q * P.stride + P.col0 + (r - P.blk0)] = final_score(r, x[c]);
    }
}

// `emit`, and each live score at or above query `q`'s threshold also
// appended (score bits, chunk-local row) to the query's survivors; past
// SEG of them only the count grows (then `segsel` reads every score).
fn emit_keep(q: u32, r0: u32, x: vec4<f32>) {
    if q >= P.nq {
        return;
    }
    let end = block_end();
    let t = atomicLoad(&thr[q]);
    for (var c = 0u; c < 4u; c += 1u) {
        let r = r0 + c;
        if r >= end {
            return;
        }
        let s = final_score(r, x[c]);
        out_mat[q * P.stride + P.col0 + (r - P.blk0)] = s;
        if s > NEG && key(s) >= t {
            let i = atomicAdd(&kept[q], 1u);
            if i < SEG {
                surv[q * SEG + i] = vec2<u32>(bitcast<u32>(s), r);
            }
        }
    }
}

// A thread's register tile: `c[2i]` holds its query i against rows r..r+4,
// `c[2i+1]` against rows r+64..r+68 (TQ queries, so 2·TQ of the 16 used).
struct Tile {
    c: array<vec4<f32>, 16>,
}

// The tile of queries wg.y·BQ.., rows blk0 + wg.x·128.. (chunk-local).
// Thread (tq, tr) owns queries tq·TQ.. and rows tr·4..+4 and 64+tr·4..+4.
// The accumulators are spelled out (no dynamically indexed arrays, which
// some compilers keep in memory) and only gathered at the end.
fn tile(li: u32, wg: vec3<u32>) -> Tile {
    let tq = li / 16u;
    let tr = li % 16u;
    let tile_r = P.blk0 + wg.x * BR;
    let tq0 = wg.y * BQ;
    var c0 = vec4<f32>(0.0);
    var c1 = vec4<f32>(0.0);
    var c2 = vec4<f32>(0.0);
    var c3 = vec4<f32>(0.0);
    var c4 = vec4<f32>(0.0);
    var c5 = vec4<f32>(0.0);
    var c6 = vec4<f32>(0.0);
    var c7 = vec4<f32>(0.0);
    var c8 = vec4<f32>(0.0);
    var c9 = vec4<f32>(0.0);
    var c10 = vec4<f32>(0.0);
    var c11 = vec4<f32>(0.0);
    var c12 = vec4<f32>(0.0);
    var c13 = vec4<f32>(0.0);
    var c14 = vec4<f32>(0.0);
    var c15 = vec4<f32>(0.0);
    // With PF the next slab's global loads are issued before this slab's
    // multiply-adds, so their latency hides behind them.
    var slab: Slab;
    if PF {
        slab = fetch(li, 0u, tile_r / 16u, tq0);
    }
    for (var k0 = 0u; k0 < P.d; k0 += BK) {
        if !PF {
            slab = fetch(li, k0, tile_r / 16u, tq0);
        }
        put(li, slab);
        workgroupBarrier();
        if PF && k0 + BK < P.d {
            slab = fetch(li, k0 + BK, tile_r / 16u, tq0);
        }
        for (var kk = 0u; kk < BK; kk += 1u) {
            let b0 = bs[kk * (BR / 4u) + tr];
            let b1 = bs[kk * (BR / 4u) + 16u + tr];
            if TQ >= 4u {
                // 8-query tiles: two vec4s of queries, 16 floats read for
                // 64 multiply-adds.
                let a = qs[kk * (BQ / 4u) + (TQ / 4u) * tq];
                c0 += a.x * b0;
                c1 += a.x * b1;
                c2 += a.y * b0;
                c3 += a.y * b1;
                c4 += a.z * b0;
                c5 += a.z * b1;
                c6 += a.w * b0;
                c7 += a.w * b1;
                if TQ == 8u {
                    let e = qs[kk * (BQ / 4u) + 2u * tq + 1u];
                    c8 += e.x * b0;
                    c9 += e.x * b1;
                    c10 += e.y * b0;
                    c11 += e.y * b1;
                    c12 += e.z * b0;
                    c13 += e.z * b1;
                    c14 += e.w * b0;
                    c15 += e.w * b1;
                }
            } else {
                let a = qs[kk * (BQ / 4u) + tq / 4u][tq % 4u];
                c0 += a * b0;
                c1 += a * b1;
            }
        }
        workgroupBarrier();
    }
    return Tile(array<vec4<f32>, 16>(c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, c14, c15));
}

// Scores of a tile into `out_mat` (rows past the block are not written).
// Constant indices only: the tile stays in registers. (`gemm` and
// `gemm_keep` spell their writes out separately: a shared function that
// chose between `emit` and `emit_keep` would make `gemm` statically use
// the survivor bindings, which its bind groups do not have.)
@compute @workgroup_size(WG)
fn gemm(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let t = tile(li, wg);
    let q = wg.y * BQ + (li / 16u) * TQ;
    let r = P.blk0 + wg.x * BR + (li % 16u) * 4u;
    emit(q, r, t.c[0]);
    emit(q, r + 64u, t.c[1]);
    if TQ >= 4u {
        emit(q + 1u, r, t.c[2]);
        emit(q + 1u, r + 64u, t.c[3]);
        emit(q + 2u, r, t.c[4]);
        emit(q + 2u, r + 64u, t.c[5]);
        emit(q + 3u, r, t.c[6]);
        emit(q + 3u, r + 64u, t.c[7]);
    }
    if TQ == 8u {
        emit(q + 4u, r, t.c[8]);
        emit(q + 4u, r + 64u, t.c[9]);
        emit(q + 5u, r, t.c[10]);
        emit(q + 5u, r + 64u, t.c[11]);
        emit(q + 6u, r, t.c[12]);
        emit(q + 6u, r + 64u, t.c[13]);
        emit(q + 7u, r, t.c[14]);
        emit(q + 7u, r + 64u, t.c[15]);
    }
}

// `gemm` for exact search after a batch's first block: the scores, and
// each query's survivors of its threshold compacted for `survsel`.
@compute @workgroup_size(WG)
fn gemm_keep(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let t = tile(li, wg);
    let q = wg.y * BQ + (li / 16u) * TQ;
    let r = P.blk0 + wg.x * BR + (li % 16u) * 4u;
    emit_keep(q, r, t.c[0]);
    emit_keep(q, r + 64u, t.c[1]);
    if TQ >= 4u {
        emit_keep(q + 1u, r, t.c[2]);
        emit_keep(q + 1u, r + 64u, t.c[3]);
        emit_keep(q + 2u, r, t.c[4]);
        emit_keep(q + 2u, r + 64u, t.c[5]);
        emit_keep(q + 3u, r, t.c[6]);
        emit_keep(q + 3u, r + 64u, t.c[7]);
    }
    if TQ == 8u {
        emit_keep(q + 4u, r, t.c[8]);
        emit_keep(q + 4u, r + 64u, t.c[9]);
        emit_keep(q + 5u, r, t.c[10]);
        emit_keep(q + 5u, r + 64u, t.c[11]);
        emit_keep(q + 6u, r, t.c[12]);
        emit_keep(q + 6u, r + 64u, t.c[13]);
        emit_keep(q + 7u, r, t.c[14]);
        emit_keep(q + 7u, r + 64u, t.c[15]);
    }
}

@group(0) @binding(17) var<storage, read_write> assigned: array<vec2<u32>>;
var<workgroup> best_s: array<f32, 64>;
var<workgroup> best_c: array<u32, 64>;

// (s1, c1) beats (s2, c2): higher score, then smaller column; NONE last.
fn col_before(s1: f32, c1: u32, s2: f32, c2: u32) -> bool {
    if c2 == NONE {
        return c1 != NONE;
    }
    if c1 == NONE {
        return false;
    }
    return s1 > s2 || (s1 == s2 && c1 < c2);
}

// k-means assignment: the best column of query wg.x's row of `out_mat`
// (`stride` scores, from `gemm` with the L2 bias where there is one), as
// (column, score bits) in `assigned[a0 + wg.x]`. Ties go to the smaller
// column, as top-1 breaks them by smaller id. 64 threads stride the row
// (coalesced), then fold their bests in workgroup memory.
@compute @workgroup_size(64)
fn best_col(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let q = wg.x;
    var bs = 0.0;
    var bc = NONE;
    if q < P.nq {
        let row = q * P.stride;
        for (var c = li; c < P.stride; c += 64u) {
            let v = out_mat[row + c];
            if bc == NONE || v > bs {
                bs = v;
                bc = c;
            }
        }
    }
    best_s[li] = bs;
    best_c[li] = bc;
    workgroupBarrier();
    for (var w = 32u; w > 0u; w /= 2u) {
        if li < w && col_before(best_s[li + w], best_c[li + w], best_s[li], best_c[li]) {
            best_s[li] = best_s[li + w];
            best_c[li] = best_c[li + w];
        }
        workgroupBarrier();
    }
    if li == 0u && q < P.nq {
        assigned[P.a0 + q] = vec2<u32>(best_c[0], bitcast<u32>(best_s[0]));
    }
}

// Caller id (lo, hi) of a chunk-local row.
fn id_of(local: u32) -> vec2<u32> {
    if (P.flags & 1u) != 0u {
        return vec2<u32>(ids[2u * local], ids[2u * local + 1u]);
    }
    return vec2<u32>(P.row0 + local, 0u);
}

// Order-preserving u32 key of a float (larger float, larger key).
fn key(s: f32) -> u32 {
    let b = bitcast<u32>(s);
    if (b & 0x80000000u) != 0u {
        return ~b;
    }
    return b | 0x80000000u;
}

var<workgroup> sk: array<f32, SEG>;
var<workgroup> sr: array<u32, SEG>;
var<workgroup> count: atomic<u32>;
var<workgroup> count_u: u32;
var<workgroup> hist: array<atomic<u32>, 256>;
var<workgroup> pick: vec2<u32>;

// (s1, r1) ranks before (s2, r2): score descending, then id ascending;
// NONE rows last.
fn slot_before(s1: f32, r1: u32, s2: f32, r2: u32) -> bool {
    if r2 == NONE {
        return r1 != NONE;
    }
    if r1 == NONE {
        return false;
    }
    if s1 != s2 {
        return s1 > s2;
    }
    let x = id_of(r1);
    let y = id_of(r2);
    if x.y != y.y {
        return x.y < y.y;
    }
    return x.x < y.x;
}

// The input of `select_best`: items 0..n, from a segment of a block's
// scores (`segsel`) or from a query's survivors (`survsel`).
var<private> from_surv: bool;
// Index of item 0 in `out_mat` or `surv`.
var<private> src0: u32;
// Chunk-local row of item 0 of a segment.
var<private> row_of0: u32;

fn item_s(i: u32) -> f32 {
    if from_surv {
        return bitcast<f32>(surv[src0 + i].x);
    }
    return out_mat[src0 + i];
}

fn item_r(i: u32) -> u32 {
    if from_surv {
        return surv[src0 + i].y;
    }
    return row_of0 + i;
}

// The best min(K, survivors) of items 0..n of query `q` sorted into list
// `list` of `out_top` (K slots each), their number into `out_len`.
// Survivors are the live scores at or above the query's threshold. When
// more than K survive, a radix select over their keys (four 8-bit passes
// in workgroup memory) finds the K-th best first, so only it and the
// scores above it (ties included) are sorted; K = 1 is a reduction. At K
// or more survivors the K-th best raises the query's threshold.
fn select_best(li: u32, n: u32, q: u32, list: u32) {
    var t = atomicLoad(&thr[q]);
    if P.k == 1u {
        var best_s = NEG;
        var best_r = NONE;
        for (var i = li; i < n; i += 256u) {
            let s = item_s(i);
            if s > NEG && key(s) >= t && slot_before(s, item_r(i), best_s, best_r) {
                best_s = s;
                best_r = item_r(i);
            }
        }
        sk[li] = best_s;
        sr[li] = best_r;
        workgroupBarrier();
        for (var w = 128u; w > 0u; w = w / 2u) {
            if li < w && slot_before(sk[li + w], sr[li + w], sk[li], sr[li]) {
                sk[li] = sk[li + w];
                sr[li] = sr[li + w];
            }
            workgroupBarrier();
        }
        if li == 0u {
            if sr[0] == NONE {
                out_len[list] = 0u;
            } else {
                let id = id_of(sr[0]);
                out_top[list] = Cand(sk[0], P.row0 + sr[0], id.x, id.y);
                out_len[list] = 1u;
                atomicMax(&thr[q], key(sk[0]));
            }
        }
        return;
    }
    if li == 0u {
        atomicStore(&count, 0u);
    }
    workgroupBarrier();
    var mine = 0u;
    for (var i = li; i < n; i += 256u) {
        let s = item_s(i);
        if s > NEG && key(s) >= t {
            mine += 1u;
        }
    }
    atomicAdd(&count, mine);
    workgroupBarrier();
    if li == 0u {
        count_u = atomicLoad(&count);
    }
    let c = workgroupUniformLoad(&count_u);
    if c == 0u {
        if li == 0u {
            out_len[list] = 0u;
        }
        return;
    }
    if c > P.k {
        // Radix select: the key of the K-th best survivor, a byte at a time
        // from the top.
        var prefix = 0u;
        var want = P.k;
        for (var digit = 0u; digit < 4u; digit += 1u) {
            let shift = 24u - 8u * digit;
            var mask = 0u;
            if digit > 0u {
                mask = 0xffffffffu << (shift + 8u);
            }
            atomicStore(&hist[li], 0u);
            workgroupBarrier();
            for (var i = li; i < n; i += 256u) {
                let s = item_s(i);
                if s > NEG {
                    let kk = key(s);
                    if kk >= t && (kk & mask) == prefix {
                        atomicAdd(&hist[(kk >> shift) & 255u], 1u);
                    }
                }
            }
            workgroupBarrier();
            if li == 0u {
                var acc = 0u;
                var b = 255u;
                loop {
                    let h = atomicLoad(&hist[b]);
                    if acc + h >= want || b == 0u {
                        pick = vec2<u32>(b, want - acc);
                        break;
                    }
                    acc += h;
                    b -= 1u;
                }
            }
            let pk = workgroupUniformLoad(&pick);
            prefix = prefix | (pk.x << shift);
            want = pk.y;
        }
        t = max(t, prefix);
    }
    if li == 0u {
        atomicStore(&count, 0u);
    }
    workgroupBarrier();
    for (var i = li; i < n; i += 256u) {
        let s = item_s(i);
        if s > NEG && key(s) >= t {
            let slot = atomicAdd(&count, 1u);
            sk[slot] = s;
            sr[slot] = item_r(i);
        }
    }
    workgroupBarrier();
    if li == 0u {
        count_u = atomicLoad(&count);
    }
    let c2 = workgroupUniformLoad(&count_u);
    var p2 = 1u;
    while p2 < c2 {
        p2 = p2 << 1u;
    }
    for (var i = c2 + li; i < p2; i += 256u) {
        sk[i] = NEG;
        sr[i] = NONE;
    }
    workgroupBarrier();
    // Bitonic sort, best first.
    for (var size = 2u; size <= p2; size = size << 1u) {
        for (var stride = size / 2u; stride > 0u; stride = stride / 2u) {
            for (var i = li; i < p2 / 2u; i += 256u) {
                let lo = 2u * stride * (i / stride) + i % stride;
                let hi = lo + stride;
                var swap = slot_before(sk[hi], sr[hi], sk[lo], sr[lo]);
                if (lo & size) != 0u {
                    swap = slot_before(sk[lo], sr[lo], sk[hi], sr[hi]);
                }
                if swap {
                    let s = sk[lo];
                    let r = sr[lo];
                    sk[lo] = sk[hi];
                    sr[lo] = sr[hi];
                    sk[hi] = s;
                    sr[hi] = r;
                }
            }
            workgroupBarrier();
        }
    }
    let m = min(c2, P.k);
    let o = list * P.k;
    for (var i = li; i < m; i += 256u) {
        let id = id_of(sr[i]);
        out_top[o + i] = Cand(sk[i], P.row0 + sr[i], id.x, id.y);
    }
    if li == 0u {
        out_len[list] = m;
        if c2 >= P.k {
            atomicMax(&thr[q], key(sk[P.k - 1u]));
        }
    }
}

// Query wg.y (dispatch-local), segment wg.x of the block's scores in
// `out_mat` (row stride P.stride), or of its pairs in `surv` (flag 16),
// into list wg.x. With flag 8 (the block came from `gemm_keep`) one
// workgroup takes all of a query's segments (the grid is 1 × queries): a
// query whose survivors all fit in SEG slots is left to `survsel` and its
// segments' lists stay empty, so the common case costs one workgroup a
// query rather than one a segment; only a query with more survivors
// selects its segments, one after another.
@compute @workgroup_size(256)
fn segsel(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let q = wg.y;
    if (P.flags & 8u) == 0u {
        segment(li, q, wg.x);
        return;
    }
    if li == 0u {
        count_u = atomicLoad(&kept[q]);
    }
    let over = workgroupUniformLoad(&count_u) > SEG;
    let segs = (P.blk_rows + SEG - 1u) / SEG;
    for (var g = 0u; g < segs; g += 1u) {
        if over {
            segment(li, q, g);
            // The next segment reuses the workgroup memory.
            workgroupBarrier();
        } else if li == 0u {
            out_len[q * P.lists + g] = 0u;
        }
    }
}

// Segment g of query q's block into list g of the query.
fn segment(li: u32, q: u32, g: u32) {
    let start = g * SEG;
    // Flag 16: the items are (score bits, row) pairs in `surv`, P.stride
    // per query (what the PQ scans and the re-rank scored), else the
    // block's scores.
    from_surv = (P.flags & 16u) != 0u;
    src0 = q * P.stride + start;
    row_of0 = P.blk0 + start;
    select_best(li, min(start + SEG, P.blk_rows) - start, q, q * P.lists + g);
}

// Query wg.x's survivors from `gemm_keep` into its list (one per query),
// when they fit in SEG slots (else `segsel` took the block and the list
// stays empty); the count is zeroed for the next block.
@compute @workgroup_size(256)
fn survsel(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let q = wg.x;
    if li == 0u {
        count_u = atomicLoad(&kept[q]);
    }
    let c = workgroupUniformLoad(&count_u);
    if li == 0u {
        atomicStore(&kept[q], 0u);
    }
    if c > SEG {
        if li == 0u {
            out_len[q] = 0u;
        }
        return;
    }
    from_surv = true;
    src0 = q * SEG;
    select_best(li, c, q, q);
}

struct MergeParams {
    // lists per query in A and in B (the row stride), and how many of them
    // hold data (a list past its count is empty)
    a_stride: u32,
    b_stride: u32,
    a_count: u32,
    b_count: u32,
    // output lists per query; output list i merges A list i·step + a_off
    // with B list i·step + b_off
    out_lists: u32,
    step: u32,
    a_off: u32,
    b_off: u32,
    nq: u32,
    k: u32,
    // bit 0: pad the output to K with NONE rows
    mflags: u32,
    _m0: u32,
}

@group(0) @binding(8) var<uniform> MP: MergeParams;
@group(0) @binding(9) var<storage, read> la: array<Cand>;
@group(0) @binding(10) var<storage, read_write> mout: array<Cand>;
@group(0) @binding(13) var<storage, read> lb: array<Cand>;
@group(0) @binding(14) var<storage, read> alen: array<u32>;
@group(0) @binding(15) var<storage, read> blen: array<u32>;
@group(0) @binding(16) var<storage, read_write> olen: array<u32>;

fn len_of(in_a: bool, list: u32, q: u32) -> u32 {
    if in_a {
        if list >= MP.a_count {
            return 0u;
        }
        return alen[q * MP.a_stride + list];
    }
    if list >= MP.b_count {
        return 0u;
    }
    return blen[q * MP.b_stride + list];
}

// Workgroup (i, q): output list i of query q, each thread some of its slots.
@compute @workgroup_size(64)
fn merge(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let i = wg.x;
    let q = wg.y;
    let al = i * MP.step + MP.a_off;
    let bl = i * MP.step + MP.b_off;
    let na = len_of(true, al, q);
    let nb = len_of(false, bl, q);
    let ao = (q * MP.a_stride + al) * MP.k;
    let bo = (q * MP.b_stride + bl) * MP.k;
    let m = min(MP.k, na + nb);
    let o = (q * MP.out_lists + i) * MP.k;
    for (var p = li; p < m; p += 64u) {
        // j = how many of the first p outputs come from A (A first on ties).
        var lo = select(0u, p - nb, p > nb);
        var hi = min(p, na);
        while lo < hi {
            let mid = (lo + hi) / 2u;
            if !better(lb[bo + p - mid - 1u], la[ao + mid]) {
                lo = mid + 1u;
            } else {
                hi = mid;
            }
        }
        let j = lo;
        var take_a = j < na;
        if take_a && p - j < nb {
            take_a = !better(lb[bo + p - j], la[ao + j]);
        }
        if take_a {
            mout[o + p] = la[ao + j];
        } else {
            mout[o + p] = lb[bo + p - j];
        }
    }
    if (MP.mflags & 1u) != 0u {
        for (var p = m + li; p < MP.k; p += 64u) {
            mout[o + p] = Cand(NEG, NONE, 0u, 0u);
        }
    }
    if li == 0u {
        olen[q * MP.out_lists + i] = m;
    }
}
