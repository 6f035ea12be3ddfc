// k-means centroid update and the pairwise distances of the silhouette
// score. (Assignment is topk.wgsl's `gemm` against the centroids, with a
// per-centroid bias — zero for cosine, −‖c‖²/2 for L2 — then `best_col`.)

struct SumParams {
    n: u32,
    d: u32,
    k: u32,
    // floats from one point to the next (d, or d padded to whole vec4s)
    stride: u32,
}

@group(0) @binding(0) var<uniform> SP: SumParams;
@group(0) @binding(1) var<storage, read> points: array<f32>;
@group(0) @binding(2) var<storage, read> order: array<u32>;
@group(0) @binding(3) var<storage, read_write> sums: array<f32>;
@group(0) @binding(4) var<storage, read> offsets: array<u32>;

// Thread (j, c): dimension j of cluster c's sum. The host has sorted the
// points by cluster (a stable counting sort: `order` lists cluster c's
// points, in point order, from offsets[c] to offsets[c + 1]), so one
// thread adds its cluster's points in point order: the result does not
// depend on scheduling (bit-reproducible), no float atomics are needed,
// and every (cluster, dimension) runs in parallel. The sums already in
// `sums` are continued, so a point set larger than one storage binding is
// processed chunk after chunk.
@compute @workgroup_size(64)
fn cluster_sums(@builtin(local_invocation_index) li: u32, @builtin(workgroup_id) wg: vec3<u32>) {
    let c = wg.x;
    let j = wg.y * 64u + li;
    if c >= SP.k || j >= SP.d {
        return;
    }
    var s = sums[c * SP.d + j];
    let end = offsets[c + 1u];
    for (var i = offsets[c]; i < end; i += 1u) {
        s += points[order[i] * SP.stride + j];
    }
    sums[c * SP.d + j] = s;
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
