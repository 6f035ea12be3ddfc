// k-means centroid update and the pairwise distances of the silhouette
// score. (Assignment is the top-1 search of topk.wgsl with a per-centroid
// bias: zero for cosine, −‖c‖²/2 for L2.)
//
// The host prepends:
//   CB  clusters per workgroup of the centroid update
//   DC  dimensions per workgroup of the centroid update (CB × DC floats of
//       workgroup memory)

struct SumParams {
    n: u32,
    d: u32,
    k: u32,
    _p: u32,
}

@group(0) @binding(0) var<uniform> SP: SumParams;
@group(0) @binding(1) var<storage, read> points: array<f32>;
@group(0) @binding(2) var<storage, read> assign: array<u32>;
@group(0) @binding(3) var<storage, read_write> sums: array<f32>;
@group(0) @binding(4) var<storage, read_write> counts: array<u32>;

var<workgroup> acc: array<f32, CB * DC>;
var<workgroup> cnt: array<u32, CB>;

// Workgroup (x, y) owns clusters x·CB .. x·CB+CB and dimensions y·DC ..
// y·DC+DC. It walks the points in order and adds each point of its clusters
// into workgroup memory; thread t owns dimensions t, t+256, …, so every sum
// is accumulated by one thread in point order: the result does not depend
// on scheduling (bit-reproducible), and no float atomics are needed. The
// sums already in `sums`/`counts` are continued, so a point set larger than
// one storage binding is processed chunk after chunk.
@compute @workgroup_size(256)
fn cluster_sums(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let c0 = wg.x * CB;
    let dc0 = wg.y * DC;
    let nc = min(CB, SP.k - c0);
    let dn = min(DC, SP.d - dc0);
    for (var i = li; i < CB * DC; i += 256u) {
        let c = i / DC;
        let dd = i % DC;
        var v = 0.0;
        if c < nc && dd < dn {
            v = sums[(c0 + c) * SP.d + dc0 + dd];
        }
        acc[i] = v;
    }
    if li < CB {
        var v = 0u;
        if li < nc {
            v = counts[c0 + li];
        }
        cnt[li] = v;
    }
    workgroupBarrier();
    for (var p = 0u; p < SP.n; p += 1u) {
        let c = assign[p];
        if c >= c0 && c < c0 + nc {
            let cl = c - c0;
            let src = p * SP.d + dc0;
            for (var dd = li; dd < dn; dd += 256u) {
                acc[cl * DC + dd] += points[src + dd];
            }
            if li == 0u {
                cnt[cl] += 1u;
            }
        }
    }
    workgroupBarrier();
    for (var i = li; i < CB * DC; i += 256u) {
        let c = i / DC;
        let dd = i % DC;
        if c < nc && dd < dn {
            sums[(c0 + c) * SP.d + dc0 + dd] = acc[i];
        }
    }
    if li < nc && wg.y == 0u {
        counts[c0 + li] = cnt[li];
    }
}

struct DistParams {
    n: u32,
    d: u32,
    k: u32,
    cosine: u32,
}

@group(0) @binding(5) var<uniform> DP: DistParams;
@group(0) @binding(6) var<storage, read> dpoints: array<f32>;
@group(0) @binding(7) var<storage, read> labels: array<u32>;
@group(0) @binding(8) var<storage, read_write> dsums: array<f32>;

// Thread (i, c): the sum of distances from point i to every other point of
// cluster c, in point order (cosine: 1 − <a, b>; L2: ‖a − b‖ from norms and
// the inner product, as the CPU computes it). The 64 threads of a
// workgroup share c, so the label test is uniform across them.
@compute @workgroup_size(64)
fn distance_sums(@builtin(global_invocation_id) gid: vec3<u32>) {
    let i = gid.x;
    let c = gid.y;
    if i >= DP.n {
        return;
    }
    let bi = i * DP.d;
    var ni = 0.0;
    for (var t = 0u; t < DP.d; t += 1u) {
        ni += dpoints[bi + t] * dpoints[bi + t];
    }
    var total = 0.0;
    for (var j = 0u; j < DP.n; j += 1u) {
        if labels[j] != c || j == i {
            continue;
        }
        let bj = j * DP.d;
        var ip = 0.0;
        var nj = 0.0;
        for (var t = 0u; t < DP.d; t += 1u) {
            let y = dpoints[bj + t];
            ip += dpoints[bi + t] * y;
            nj += y * y;
        }
        if DP.cosine != 0u {
            total += max(1.0 - ip, 0.0);
        } else {
            total += sqrt(max(ni + nj - 2.0 * ip, 0.0));
        }
    }
    dsums[i * DP.k + c] = total;
}
