// What the top-k kernels share (the host puts this file in front of
// topk.wgsl and pq.wgsl): a candidate of a partial top-k list, and the one
// order every list keeps — score descending, then caller id ascending (u64
// as lo/hi words), as the CPU's `TopK` does.

const NONE: u32 = 0xffffffffu;
const NEG: f32 = -3.0e38;

struct Cand {
    s: f32,
    row: u32,
    lo: u32,
    hi: u32,
}

// `a` ranks before `b`; an empty slot (row NONE) ranks after everything.
fn better(a: Cand, b: Cand) -> bool {
    if b.row == NONE {
        return a.row != NONE;
    }
    if a.row == NONE {
        return false;
    }
    if a.s != b.s {
        return a.s > b.s;
    }
    if a.hi != b.hi {
        return a.hi < b.hi;
    }
    return a.lo < b.lo;
}
