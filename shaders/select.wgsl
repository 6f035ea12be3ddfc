// Salience scoring (HEMA §3.4) and selection of the `count` lowest rows by
// (score, id): a most-significant-digit radix select over the 96-bit key
// (order-preserving score bits, id hi, id lo), one byte per pass. Each pass
// counts the live rows that share the prefix fixed so far, per value of the
// next byte; the host picks the byte where the count is reached. Keys are
// unique (ids are), so after at most 12 passes exactly `count` rows are
// below or at the threshold, and `collect` gathers them.

struct SalParams {
    now_lo: u32,
    now_hi: u32,
    window_lo: u32,
    window_hi: u32,
    lambda: f32,
    gamma: f32,
    beta: f32,
    literal: u32,
    n: u32,
    _p0: u32,
    _p1: u32,
    _p2: u32,
}

@group(0) @binding(0) var<uniform> SP: SalParams;
@group(0) @binding(1) var<storage, read> added: array<u32>;
@group(0) @binding(2) var<storage, read> last: array<u32>;
@group(0) @binding(3) var<storage, read_write> sal: array<f32>;

const NEVER_LO: u32 = 0xffffffffu;

// a − b on u64 (lo, hi) pairs, saturating at 0.
fn sub_sat(a: vec2<u32>, b: vec2<u32>) -> vec2<u32> {
    if a.y < b.y || (a.y == b.y && a.x < b.x) {
        return vec2<u32>(0u, 0u);
    }
    let lo = a.x - b.x;
    let borrow = select(0u, 1u, a.x < b.x);
    return vec2<u32>(lo, a.y - b.y - borrow);
}

fn le(a: vec2<u32>, b: vec2<u32>) -> bool {
    return a.y < b.y || (a.y == b.y && a.x <= b.x);
}

@compute @workgroup_size(256)
fn salience(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x + gid.y * 65535u * 256u;
    if i >= SP.n {
        return;
    }
    let now = vec2<u32>(SP.now_lo, SP.now_hi);
    let a = vec2<u32>(added[2u * i], added[2u * i + 1u]);
    let l = vec2<u32>(last[2u * i], last[2u * i + 1u]);
    let age_v = sub_sat(now, a);
    let age = f32(age_v.y) * 4294967296.0 + f32(age_v.x);
    let never = l.x == NEVER_LO && l.y == NEVER_LO;
    let recent = !never && le(sub_sat(now, l), vec2<u32>(SP.window_lo, SP.window_hi));
    var delta = recent;
    if SP.literal != 0u {
        delta = !recent;
    }
    var bonus = 0.0;
    if delta {
        bonus = SP.beta;
    }
    sal[i] = SP.lambda * exp(-SP.gamma * age) + bonus;
}

struct SelParams {
    n: u32,
    depth: u32,
    inclusive: u32,
    _p: u32,
    prefix: vec4<u32>,
}

@group(0) @binding(4) var<uniform> XP: SelParams;
@group(0) @binding(5) var<storage, read> scores: array<f32>;
@group(0) @binding(6) var<storage, read> sids: array<u32>;
@group(0) @binding(7) var<storage, read> salive: array<u32>;
@group(0) @binding(8) var<storage, read_write> hist: array<atomic<u32>>;
@group(0) @binding(9) var<storage, read_write> picked: array<u32>;

// Ascending order of floats as unsigned integers.
fn sortable(x: f32) -> u32 {
    // -0 and +0 are one value (the CPU compares them equal).
    var b = bitcast<u32>(x);
    if x == 0.0 {
        b = 0u;
    }
    if (b & 0x80000000u) != 0u {
        return ~b;
    }
    return b | 0x80000000u;
}

fn key(i: u32) -> vec3<u32> {
    return vec3<u32>(sortable(scores[i]), sids[2u * i + 1u], sids[2u * i]);
}

// The first `bytes` bytes of `k`, compared with those of the prefix:
// -1 below, 0 equal, 1 above.
fn cmp_prefix(k: vec3<u32>, bytes: u32) -> i32 {
    for (var w = 0u; w < 3u; w += 1u) {
        if bytes <= 4u * w {
            return 0;
        }
        let nb = min(bytes - 4u * w, 4u);
        var a = k[w];
        var b = XP.prefix[w];
        if nb < 4u {
            a = a >> (32u - 8u * nb);
            b = b >> (32u - 8u * nb);
        }
        if a != b {
            return select(1, -1, a < b);
        }
    }
    return 0;
}

fn row_alive(i: u32) -> bool {
    return ((salive[i / 32u] >> (i % 32u)) & 1u) == 1u;
}

fn row_index(gid: vec3<u32>) -> u32 {
    return gid.x + gid.y * 65535u * 256u;
}

// Histogram of byte `depth` over the live rows whose first `depth` bytes
// equal the prefix.
@compute @workgroup_size(256)
fn histogram(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = row_index(gid);
    if i >= XP.n || !row_alive(i) {
        return;
    }
    let k = key(i);
    if cmp_prefix(k, XP.depth) != 0 {
        return;
    }
    let w = XP.depth / 4u;
    let byte = (k[w] >> (24u - 8u * (XP.depth % 4u))) & 0xffu;
    atomicAdd(&hist[byte], 1u);
}

// Live rows whose first `depth` bytes are below the prefix, or equal to it
// when `inclusive`: hist[256] counts them and `picked` lists them (in no
// particular order; the host sorts the `count` winners).
@compute @workgroup_size(256)
fn collect(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = row_index(gid);
    if i >= XP.n || !row_alive(i) {
        return;
    }
    let c = cmp_prefix(key(i), XP.depth);
    if c < 0 || (c == 0 && XP.inclusive != 0u) {
        let at = atomicAdd(&hist[256], 1u);
        picked[at] = i;
    }
}
