//! Fast-scan kernels: sums of u8 lookup-table entries over blocks of 32
//! packed 4-bit codes, read with byte shuffles.
//!
//! Inputs (the layout is documented in [`crate::fastscan`]):
//! - `lut`: `m2` tables of 16 `u8` entries (`m2` even), table `j` at
//!   `lut[16·j..16·j + 16]`;
//! - `blocks`: whole blocks of `16·m2` bytes (one block = 32 entries); in
//!   each, group `j` (bytes `16·j..16·j + 16`) holds sub-quantizer `j`'s
//!   codes: byte `i` = code of entry `i` (low nibble) | code of entry
//!   `i + 16` (high nibble).
//!
//! Output per entry: the sum of its `m2` table entries, accumulated in u16
//! lanes and therefore exact modulo 2¹⁶. [`crate::fastscan::QuantizedTables`]
//! bounds the tables so that no sum reaches 2¹⁶; every path wraps the same
//! way when handed tables that break the bound, so they agree regardless.
//!
//! One shuffle serves 16 entries of one sub-quantizer (NEON, simd128), two
//! sub-quantizers (AVX2: one per 128-bit lane) or four (AVX-512BW). The AVX
//! paths add the shuffled bytes as u16 lanes directly, so each u16 holds
//! `even + 256·odd`, and separately the odd bytes shifted down; the even
//! entries are recovered once per block as `acc − (odd << 8)`, exact
//! modulo 2¹⁶ (the trick FAISS's `pq4_fast_scan` uses to avoid widening).

use super::Isa;

/// Entries per block.
pub const BLOCK: usize = 32;

/// Called for each block in which some entry's sum reaches the threshold,
/// with the block's index, a mask of those entries (bit `e` = entry `e`)
/// and the block's 32 sums; returns the new threshold, or `None` to stop.
pub(crate) type OnHits<'a> = dyn FnMut(usize, u32, &[u16; BLOCK]) -> Option<u16> + 'a;

/// Scans every whole block of `blocks` with tables `lut`, calling `on_hits`
/// for blocks with an entry whose sum is at least `thr`. Does nothing when
/// the lengths do not describe whole blocks (`lut.len()` a positive multiple
/// of 32, `blocks.len()` a multiple of `lut.len()`).
pub(crate) fn scan(isa: Isa, lut: &[u8], blocks: &[u8], thr: u16, on_hits: &mut OnHits<'_>) {
    if lut.is_empty() || !lut.len().is_multiple_of(32) || !blocks.len().is_multiple_of(lut.len()) {
        return;
    }
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512`/`Avx2` are only produced after runtime detection
        // of AVX2; AVX-512BW is detected here.
        Isa::Avx512 if std::arch::is_x86_feature_detected!("avx512bw") => unsafe {
            x86::scan_avx512(lut, blocks, thr, on_hits)
        },
        #[cfg(target_arch = "x86_64")]
        Isa::Avx512 | Isa::Avx2 => unsafe { x86::scan_avx2(lut, blocks, thr, on_hits) },
        #[cfg(target_arch = "aarch64")]
        // SAFETY: NEON is part of the aarch64 baseline.
        Isa::Neon => unsafe { arm::scan_neon(lut, blocks, thr, on_hits) },
        #[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
        Isa::Simd128 => wasm::scan_simd128(lut, blocks, thr, on_hits),
        _ => scan_scalar(lut, blocks, thr, on_hits),
    }
}

/// Most tables one [`scan_multi`] call takes.
pub(crate) const MULTI: usize = 4;

/// [`OnHits`] for [`scan_multi`]: called with the slot (the table's place in
/// the call) first, then as [`OnHits`].
pub(crate) type OnHitsMulti<'a> = dyn FnMut(usize, usize, u32, &[u16; BLOCK]) -> Option<u16> + 'a;

/// [`scan`] with up to [`MULTI`] tables (one per query) over the same
/// blocks: the AVX paths load each block's codes and split their nibbles
/// once for every table (FAISS's fast-scan batches queries per list the same
/// way). Slot `s` gets exactly the calls `scan(isa, luts[s], blocks, thrs[s],
/// …)` would make, tagged `s`; `None` ends slot `s` alone, and the scan ends
/// when every slot has. Does nothing when `luts` and `thrs` differ in length,
/// hold none or more than [`MULTI`], the tables differ in length, or the
/// lengths do not describe whole blocks.
pub(crate) fn scan_multi(isa: Isa, luts: &[&[u8]], blocks: &[u8], thrs: &[u16], on_hits: &mut OnHitsMulti<'_>) {
    let Some(first) = luts.first() else {
        return;
    };
    let bb = first.len();
    if luts.len() != thrs.len()
        || luts.len() > MULTI
        || luts.iter().any(|l| l.len() != bb)
        || bb == 0
        || !bb.is_multiple_of(32)
        || !blocks.len().is_multiple_of(bb)
    {
        return;
    }
    match (isa, luts.len()) {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: as in `scan`; the lengths were checked above.
        (Isa::Avx512, n) if n > 1 && std::arch::is_x86_feature_detected!("avx512bw") => unsafe {
            match n {
                2 => x86::scan_avx512_multi::<2>(luts, blocks, thrs, on_hits),
                3 => x86::scan_avx512_multi::<3>(luts, blocks, thrs, on_hits),
                _ => x86::scan_avx512_multi::<4>(luts, blocks, thrs, on_hits),
            }
        },
        // AVX2 has 16 registers: two tables' accumulators fit beside the codes.
        #[cfg(target_arch = "x86_64")]
        (Isa::Avx512 | Isa::Avx2, n) if n > 1 => {
            for (pair, (l, t)) in luts.chunks(2).zip(thrs.chunks(2)).enumerate() {
                let base = 2 * pair;
                let mut tagged = |s: usize, b: usize, mask: u32, sums: &[u16; BLOCK]| on_hits(base + s, b, mask, sums);
                if l.len() == 2 {
                    // SAFETY: as in `scan`; the lengths were checked above.
                    unsafe { x86::scan_avx2_multi::<2>(l, blocks, t, &mut tagged) }
                } else {
                    scan(isa, l[0], blocks, t[0], &mut |b, mask, sums| tagged(0, b, mask, sums));
                }
            }
        }
        _ => {
            for (s, (l, &t)) in luts.iter().zip(thrs).enumerate() {
                scan(isa, l, blocks, t, &mut |b, mask, sums| on_hits(s, b, mask, sums));
            }
        }
    }
}

/// Each 16-entry table's smallest and largest entry (finite tables), into
/// `out` (cleared first).
pub(crate) fn table_ranges(isa: Isa, tables: &[[f32; 16]], out: &mut Vec<(f32, f32)>) {
    out.clear();
    out.reserve(tables.len());
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512` is produced only after runtime detection.
        Isa::Avx512 => unsafe { x86::ranges_avx512(tables, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` is produced only after runtime detection.
        Isa::Avx2 => unsafe { x86::ranges_avx2(tables, out) },
        _ => out.extend(tables.iter().map(range_generic)),
    }
}

/// Smallest and largest entry of a table; compare-and-select.
fn range_generic(t: &[f32; 16]) -> (f32, f32) {
    t.iter().fold((f32::INFINITY, f32::NEG_INFINITY), |(a, b), &x| {
        (if x < a { x } else { a }, if x > b { x } else { b })
    })
}

/// `q = ⌊(x − lo_j)·a + ½⌋` clamped to [0, 255] for every entry of every
/// table `j`, each operation rounded in f32 as written (no fused
/// multiply-add, so every path gives the same bytes); returns the sum of
/// each table's largest `q`.
pub(crate) fn quantize_tables(isa: Isa, tables: &[[f32; 16]], lo: &[f32], a: f32, out: &mut [[u8; 16]]) -> u32 {
    match isa {
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx512` is produced only after runtime detection.
        Isa::Avx512 => unsafe { x86::quantize_avx512(tables, lo, a, out) },
        #[cfg(target_arch = "x86_64")]
        // SAFETY: `Isa::Avx2` is produced only after runtime detection.
        Isa::Avx2 => unsafe { x86::quantize_avx2(tables, lo, a, out) },
        _ => quantize_generic(tables, lo, a, out),
    }
}

fn quantize_generic(tables: &[[f32; 16]], lo: &[f32], a: f32, out: &mut [[u8; 16]]) -> u32 {
    let mut sum = 0u32;
    for ((t, q), &l) in tables.iter().zip(out.iter_mut()).zip(lo) {
        let mut top = 0u8;
        for (v, &x) in q.iter_mut().zip(t) {
            *v = ((x - l) * a + 0.5).clamp(0.0, 255.0) as i32 as u8;
            top = top.max(*v);
        }
        sum += u32::from(top);
    }
    sum
}

/// The 32 sums of one block, portably.
fn block_sums_scalar(lut: &[u8], block: &[u8], out: &mut [u16; BLOCK]) {
    *out = [0; BLOCK];
    for (t, c) in lut.chunks_exact(16).zip(block.chunks_exact(16)) {
        for (i, &b) in c.iter().enumerate() {
            out[i] = out[i].wrapping_add(u16::from(t[usize::from(b & 15)]));
            out[i + 16] = out[i + 16].wrapping_add(u16::from(t[usize::from(b >> 4)]));
        }
    }
}

fn scan_scalar(lut: &[u8], blocks: &[u8], mut thr: u16, on_hits: &mut OnHits<'_>) {
    let mut sums = [0u16; BLOCK];
    for (b, block) in blocks.chunks_exact(lut.len()).enumerate() {
        block_sums_scalar(lut, block, &mut sums);
        let mask = sums
            .iter()
            .enumerate()
            .fold(0u32, |m, (e, &s)| m | (u32::from(s >= thr) << e));
        if mask != 0 {
            match on_hits(b, mask, &sums) {
                Some(t) => thr = t,
                None => return,
            }
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::{BLOCK, OnHits, OnHitsMulti};
    use std::arch::x86_64::*;

    /// Adds one register of codes (two sub-quantizers, one per 128-bit lane)
    /// looked up in the matching two tables to the four accumulators:
    /// `[low-nibble entries as u16, their odd bytes, high-nibble entries, their odd bytes]`.
    #[inline(always)]
    unsafe fn accumulate256(acc: &mut [__m256i; 4], codes: __m256i, tables: __m256i) {
        unsafe {
            let (lo, hi) = nibbles256(codes);
            lookups256(acc, lo, hi, tables);
        }
    }

    /// The low and the high nibbles of a register of codes, as indices.
    #[inline(always)]
    unsafe fn nibbles256(codes: __m256i) -> (__m256i, __m256i) {
        unsafe {
            let nib = _mm256_set1_epi8(0x0f);
            (
                _mm256_and_si256(codes, nib),
                _mm256_and_si256(_mm256_srli_epi16(codes, 4), nib),
            )
        }
    }

    /// [`accumulate256`] from codes already split by [`nibbles256`].
    #[inline(always)]
    unsafe fn lookups256(acc: &mut [__m256i; 4], lo: __m256i, hi: __m256i, tables: __m256i) {
        unsafe {
            let rl = _mm256_shuffle_epi8(tables, lo);
            let rh = _mm256_shuffle_epi8(tables, hi);
            acc[0] = _mm256_add_epi16(acc[0], rl);
            acc[1] = _mm256_add_epi16(acc[1], _mm256_srli_epi16(rl, 8));
            acc[2] = _mm256_add_epi16(acc[2], rh);
            acc[3] = _mm256_add_epi16(acc[3], _mm256_srli_epi16(rh, 8));
        }
    }

    /// [`nibbles256`] for a 512-bit register (four sub-quantizers).
    #[inline(always)]
    unsafe fn nibbles512(codes: __m512i) -> (__m512i, __m512i) {
        unsafe {
            let nib = _mm512_set1_epi8(0x0f);
            (
                _mm512_and_si512(codes, nib),
                _mm512_and_si512(_mm512_srli_epi16(codes, 4), nib),
            )
        }
    }

    /// [`lookups256`] for a 512-bit register.
    #[inline(always)]
    unsafe fn lookups512(w: &mut [__m512i; 4], lo: __m512i, hi: __m512i, tables: __m512i) {
        unsafe {
            let rl = _mm512_shuffle_epi8(tables, lo);
            let rh = _mm512_shuffle_epi8(tables, hi);
            w[0] = _mm512_add_epi16(w[0], rl);
            w[1] = _mm512_add_epi16(w[1], _mm512_srli_epi16(rl, 8));
            w[2] = _mm512_add_epi16(w[2], rh);
            w[3] = _mm512_add_epi16(w[3], _mm512_srli_epi16(rh, 8));
        }
    }

    /// The slots of a multi-table scan: each one's threshold, whether it
    /// still scans, and how many still do.
    struct Slots<const Q: usize> {
        thr: [u16; Q],
        live: [bool; Q],
        left: usize,
    }

    impl<const Q: usize> Slots<Q> {
        fn new(thrs: &[u16]) -> Self {
            Slots {
                thr: std::array::from_fn(|s| thrs[s]),
                live: [true; Q],
                left: Q,
            }
        }

        /// Ends block `b` for slot `s` ([`close_block`], its calls tagged
        /// `s`) unless the slot has stopped; false once every slot has.
        #[inline(always)]
        unsafe fn close(&mut self, s: usize, acc: &[__m256i; 4], b: usize, on_hits: &mut OnHitsMulti<'_>) -> bool {
            if !self.live[s] {
                return true;
            }
            let mut tagged = |b: usize, mask: u32, sums: &[u16; BLOCK]| on_hits(s, b, mask, sums);
            // SAFETY: the caller's target features are close_block's.
            if unsafe { !close_block(acc, b, &mut self.thr[s], &mut tagged) } {
                self.live[s] = false;
                self.left -= 1;
            }
            self.left > 0
        }
    }

    /// Entries 0..16 in order from one accumulator pair: even entries are
    /// `acc − (odd << 8)`; the two lanes (two sub-quantizer sets) are added;
    /// evens and odds are interleaved.
    #[inline(always)]
    unsafe fn entries16(all: __m256i, odd: __m256i) -> __m256i {
        unsafe {
            let even = _mm256_sub_epi16(all, _mm256_slli_epi16(odd, 8));
            // [even.lane0 + even.lane1 | odd.lane0 + odd.lane1] = [E0..E7 | O0..O7]
            let s = _mm256_add_epi16(
                _mm256_permute2x128_si256(even, odd, 0x20),
                _mm256_permute2x128_si256(even, odd, 0x31),
            );
            // [E0..3, O0..3 | E4..7, O4..7], then interleave within lanes.
            let q = _mm256_permute4x64_epi64(s, 0b11_01_10_00);
            let pattern = _mm256_setr_epi8(
                0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14, 15, 0, 1, 8, 9, 2, 3, 10, 11, 4, 5, 12, 13, 6, 7, 14,
                15,
            );
            _mm256_shuffle_epi8(q, pattern)
        }
    }

    /// The block's sums (entries 0..16, 16..32) and the mask of entries ≥ thr.
    #[inline(always)]
    unsafe fn finish(acc: &[__m256i; 4], thr: u16) -> (u32, __m256i, __m256i) {
        unsafe {
            let d0 = entries16(acc[0], acc[1]);
            let d1 = entries16(acc[2], acc[3]);
            let t = _mm256_set1_epi16(thr as i16);
            let ge0 = _mm256_cmpeq_epi16(_mm256_max_epu16(d0, t), d0);
            let ge1 = _mm256_cmpeq_epi16(_mm256_max_epu16(d1, t), d1);
            // packs interleaves 8-entry groups as [0-7, 16-23 | 8-15, 24-31].
            let packed = _mm256_permute4x64_epi64(_mm256_packs_epi16(ge0, ge1), 0b11_01_10_00);
            (_mm256_movemask_epi8(packed) as u32, d0, d1)
        }
    }

    /// Ends block `b`: its mask against `*thr`, and when an entry passes,
    /// its sums to `on_hits`, which may raise `*thr`. False = stop scanning.
    #[inline(always)]
    unsafe fn close_block(acc: &[__m256i; 4], b: usize, thr: &mut u16, on_hits: &mut OnHits<'_>) -> bool {
        unsafe {
            let (mask, d0, d1) = finish(acc, *thr);
            if mask == 0 {
                return true;
            }
            let mut sums = [0u16; BLOCK];
            _mm256_storeu_si256(sums.as_mut_ptr() as *mut __m256i, d0);
            _mm256_storeu_si256(sums.as_mut_ptr().add(16) as *mut __m256i, d1);
            match on_hits(b, mask, &sums) {
                Some(t) => {
                    *thr = t;
                    true
                }
                None => false,
            }
        }
    }

    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn ranges_avx512(tables: &[[f32; 16]], out: &mut Vec<(f32, f32)>) {
        for t in tables {
            // SAFETY: a table is exactly 16 f32s, one zmm.
            let v = unsafe { _mm512_loadu_ps(t.as_ptr()) };
            out.push((_mm512_reduce_min_ps(v), _mm512_reduce_max_ps(v)));
        }
    }

    #[target_feature(enable = "avx512f")]
    pub(super) unsafe fn quantize_avx512(tables: &[[f32; 16]], lo: &[f32], a: f32, out: &mut [[u8; 16]]) -> u32 {
        let (va, half, zero, top) = (
            _mm512_set1_ps(a),
            _mm512_set1_ps(0.5),
            _mm512_setzero_ps(),
            _mm512_set1_ps(255.0),
        );
        let mut sum = 0u32;
        for ((t, q), &l) in tables.iter().zip(out.iter_mut()).zip(lo) {
            // SAFETY: a table is exactly 16 f32s; q is 16 bytes.
            unsafe {
                let v = _mm512_loadu_ps(t.as_ptr());
                // Separate sub, mul and add, as the portable path rounds them.
                let y = _mm512_add_ps(_mm512_mul_ps(_mm512_sub_ps(v, _mm512_set1_ps(l)), va), half);
                let y = _mm512_min_ps(_mm512_max_ps(y, zero), top);
                let i = _mm512_cvttps_epi32(y);
                _mm_storeu_si128(q.as_mut_ptr() as *mut __m128i, _mm512_cvtepi32_epi8(i));
                sum += _mm512_reduce_max_epi32(i) as u32;
            }
        }
        sum
    }

    /// Smallest and largest of 8 lanes, in every lane.
    #[inline(always)]
    unsafe fn min_max8(mn: __m256, mx: __m256) -> (f32, f32) {
        unsafe {
            let mn = _mm_min_ps(_mm256_castps256_ps128(mn), _mm256_extractf128_ps(mn, 1));
            let mx = _mm_max_ps(_mm256_castps256_ps128(mx), _mm256_extractf128_ps(mx, 1));
            let mn = _mm_min_ps(mn, _mm_movehl_ps(mn, mn));
            let mx = _mm_max_ps(mx, _mm_movehl_ps(mx, mx));
            let mn = _mm_min_ss(mn, _mm_shuffle_ps(mn, mn, 1));
            let mx = _mm_max_ss(mx, _mm_shuffle_ps(mx, mx, 1));
            (_mm_cvtss_f32(mn), _mm_cvtss_f32(mx))
        }
    }

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn ranges_avx2(tables: &[[f32; 16]], out: &mut Vec<(f32, f32)>) {
        for t in tables {
            // SAFETY: a table is exactly 16 f32s, two ymm.
            unsafe {
                let a = _mm256_loadu_ps(t.as_ptr());
                let b = _mm256_loadu_ps(t.as_ptr().add(8));
                out.push(min_max8(_mm256_min_ps(a, b), _mm256_max_ps(a, b)));
            }
        }
    }

    /// `⌊(v − l)·a + ½⌋` clamped to [0, 255], as i32 lanes; separate sub,
    /// mul and add, as the portable path rounds them.
    #[inline(always)]
    unsafe fn quantize8(v: __m256, l: __m256, a: __m256, half: __m256, zero: __m256, top: __m256) -> __m256i {
        unsafe {
            let y = _mm256_add_ps(_mm256_mul_ps(_mm256_sub_ps(v, l), a), half);
            _mm256_cvttps_epi32(_mm256_min_ps(_mm256_max_ps(y, zero), top))
        }
    }

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn quantize_avx2(tables: &[[f32; 16]], lo: &[f32], a: f32, out: &mut [[u8; 16]]) -> u32 {
        let (va, half, zero, top) = (
            _mm256_set1_ps(a),
            _mm256_set1_ps(0.5),
            _mm256_setzero_ps(),
            _mm256_set1_ps(255.0),
        );
        let mut sum = 0u32;
        for ((t, q), &l) in tables.iter().zip(out.iter_mut()).zip(lo) {
            // SAFETY: a table is exactly 16 f32s; q is 16 bytes.
            unsafe {
                let vl = _mm256_set1_ps(l);
                let i0 = quantize8(_mm256_loadu_ps(t.as_ptr()), vl, va, half, zero, top);
                let i1 = quantize8(_mm256_loadu_ps(t.as_ptr().add(8)), vl, va, half, zero, top);
                // i32 → i16 (in order after the 64-bit permute) → u8.
                let w = _mm256_permute4x64_epi64(_mm256_packs_epi32(i0, i1), 0b11_01_10_00);
                let b = _mm256_permute4x64_epi64(_mm256_packus_epi16(w, w), 0b00_00_10_00);
                let b = _mm256_castsi256_si128(b);
                _mm_storeu_si128(q.as_mut_ptr() as *mut __m128i, b);
                let m = _mm_max_epu8(b, _mm_srli_si128(b, 8));
                let m = _mm_max_epu8(m, _mm_srli_si128(m, 4));
                let m = _mm_max_epu8(m, _mm_srli_si128(m, 2));
                let m = _mm_max_epu8(m, _mm_srli_si128(m, 1));
                sum += (_mm_cvtsi128_si32(m) & 0xff) as u32;
            }
        }
        sum
    }

    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn scan_avx2(lut: &[u8], blocks: &[u8], mut thr: u16, on_hits: &mut OnHits<'_>) {
        let bb = lut.len();
        let pairs = bb / 32;
        let (tp, cp) = (lut.as_ptr(), blocks.as_ptr());
        for b in 0..blocks.len() / bb {
            let mut acc = [_mm256_setzero_si256(); 4];
            // SAFETY: block b spans bytes b·bb..(b+1)·bb of `blocks`, and
            // pair p bytes 32p..32p+32 of it and of `lut` (bb = 32·pairs).
            unsafe {
                let code = cp.add(b * bb);
                for p in 0..pairs {
                    let c = _mm256_loadu_si256(code.add(32 * p) as *const __m256i);
                    let t = _mm256_loadu_si256(tp.add(32 * p) as *const __m256i);
                    accumulate256(&mut acc, c, t);
                }
                if !close_block(&acc, b, &mut thr, on_hits) {
                    return;
                }
            }
        }
    }

    /// [`scan_avx2`] for `Q` tables at once ([`super::scan_multi`]): each
    /// pair of code groups is loaded and split into nibbles once.
    #[target_feature(enable = "avx2")]
    pub(super) unsafe fn scan_avx2_multi<const Q: usize>(
        luts: &[&[u8]],
        blocks: &[u8],
        thrs: &[u16],
        on_hits: &mut OnHitsMulti<'_>,
    ) {
        let bb = luts[0].len();
        let pairs = bb / 32;
        let tp: [*const u8; Q] = std::array::from_fn(|s| luts[s].as_ptr());
        let mut slots = Slots::<Q>::new(thrs);
        let cp = blocks.as_ptr();
        for b in 0..blocks.len() / bb {
            let mut acc = [[_mm256_setzero_si256(); 4]; Q];
            // SAFETY: as in scan_avx2, for every table (all are bb bytes).
            unsafe {
                let code = cp.add(b * bb);
                for p in 0..pairs {
                    let (lo, hi) = nibbles256(_mm256_loadu_si256(code.add(32 * p) as *const __m256i));
                    for (a, t) in acc.iter_mut().zip(&tp) {
                        lookups256(a, lo, hi, _mm256_loadu_si256(t.add(32 * p) as *const __m256i));
                    }
                }
                for (s, a) in acc.iter().enumerate() {
                    if !slots.close(s, a, b, on_hits) {
                        return;
                    }
                }
            }
        }
    }

    /// [`scan_avx512`] for `Q` tables at once ([`super::scan_multi`]): each
    /// quad of code groups is loaded and split into nibbles once.
    #[target_feature(enable = "avx2,avx512f,avx512bw")]
    pub(super) unsafe fn scan_avx512_multi<const Q: usize>(
        luts: &[&[u8]],
        blocks: &[u8],
        thrs: &[u16],
        on_hits: &mut OnHitsMulti<'_>,
    ) {
        let bb = luts[0].len();
        let pairs = bb / 32;
        let quads = pairs / 2;
        let tp: [*const u8; Q] = std::array::from_fn(|s| luts[s].as_ptr());
        let mut slots = Slots::<Q>::new(thrs);
        let cp = blocks.as_ptr();
        for b in 0..blocks.len() / bb {
            // SAFETY: as in scan_avx512, for every table (all are bb bytes).
            unsafe {
                let code = cp.add(b * bb);
                let mut w = [[_mm512_setzero_si512(); 4]; Q];
                for q in 0..quads {
                    let (lo, hi) = nibbles512(_mm512_loadu_si512(code.add(64 * q) as *const __m512i));
                    for (ws, t) in w.iter_mut().zip(&tp) {
                        lookups512(ws, lo, hi, _mm512_loadu_si512(t.add(64 * q) as *const __m512i));
                    }
                }
                let tail = (pairs % 2 == 1).then(|| _mm256_loadu_si256(code.add(64 * quads) as *const __m256i));
                for (s, ws) in w.iter().enumerate() {
                    let mut acc = [fold(ws[0]), fold(ws[1]), fold(ws[2]), fold(ws[3])];
                    if let Some(c) = tail {
                        let t = _mm256_loadu_si256(tp[s].add(64 * quads) as *const __m256i);
                        accumulate256(&mut acc, c, t);
                    }
                    if !slots.close(s, &acc, b, on_hits) {
                        return;
                    }
                }
            }
        }
    }

    /// Upper 256 bits added to the lower 256, as u16 lanes.
    #[inline(always)]
    unsafe fn fold(x: __m512i) -> __m256i {
        unsafe { _mm256_add_epi16(_mm512_castsi512_si256(x), _mm512_extracti64x4_epi64(x, 1)) }
    }

    #[target_feature(enable = "avx2,avx512f,avx512bw")]
    pub(super) unsafe fn scan_avx512(lut: &[u8], blocks: &[u8], mut thr: u16, on_hits: &mut OnHits<'_>) {
        let bb = lut.len();
        let pairs = bb / 32;
        let quads = pairs / 2;
        let (tp, cp) = (lut.as_ptr(), blocks.as_ptr());
        for b in 0..blocks.len() / bb {
            // SAFETY: as in scan_avx2; quad q covers bytes 64q..64q+64 and the
            // odd pair (if any) bytes 64·quads..64·quads+32, all below bb.
            unsafe {
                let code = cp.add(b * bb);
                let mut w = [_mm512_setzero_si512(); 4];
                for q in 0..quads {
                    let (lo, hi) = nibbles512(_mm512_loadu_si512(code.add(64 * q) as *const __m512i));
                    lookups512(&mut w, lo, hi, _mm512_loadu_si512(tp.add(64 * q) as *const __m512i));
                }
                // Fold the upper 256 bits (pairs 2q+1) onto the lower (2q):
                // the lanes keep their parity of sub-quantizer, and the
                // `even + 256·odd` form is linear, so it survives the add.
                let mut acc = [fold(w[0]), fold(w[1]), fold(w[2]), fold(w[3])];
                if pairs % 2 == 1 {
                    let c = _mm256_loadu_si256(code.add(64 * quads) as *const __m256i);
                    let t = _mm256_loadu_si256(tp.add(64 * quads) as *const __m256i);
                    accumulate256(&mut acc, c, t);
                }
                if !close_block(&acc, b, &mut thr, on_hits) {
                    return;
                }
            }
        }
    }
}

#[cfg(target_arch = "aarch64")]
mod arm {
    use super::{BLOCK, OnHits};
    use std::arch::aarch64::*;

    #[target_feature(enable = "neon")]
    pub(super) unsafe fn scan_neon(lut: &[u8], blocks: &[u8], mut thr: u16, on_hits: &mut OnHits<'_>) {
        let bb = lut.len();
        let m2 = bb / 16;
        let (tp, cp) = (lut.as_ptr(), blocks.as_ptr());
        let bits: [u16; 8] = [1, 2, 4, 8, 16, 32, 64, 128];
        for b in 0..blocks.len() / bb {
            // SAFETY: block b spans bytes b·bb..(b+1)·bb of `blocks`; group j
            // bytes 16j..16j+16 of it and of `lut` (bb = 16·m2).
            unsafe {
                let code = cp.add(b * bb);
                let nib = vdupq_n_u8(15);
                let mut a = [vdupq_n_u16(0); 4];
                for j in 0..m2 {
                    let c = vld1q_u8(code.add(16 * j));
                    let t = vld1q_u8(tp.add(16 * j));
                    let rl = vqtbl1q_u8(t, vandq_u8(c, nib));
                    let rh = vqtbl1q_u8(t, vshrq_n_u8(c, 4));
                    a[0] = vaddw_u8(a[0], vget_low_u8(rl));
                    a[1] = vaddw_high_u8(a[1], rl);
                    a[2] = vaddw_u8(a[2], vget_low_u8(rh));
                    a[3] = vaddw_high_u8(a[3], rh);
                }
                let tv = vdupq_n_u16(thr);
                let bv = vld1q_u16(bits.as_ptr());
                let mut mask = 0u32;
                for (i, acc) in a.iter().enumerate() {
                    let ge = vcgeq_u16(*acc, tv);
                    mask |= u32::from(vaddvq_u16(vandq_u16(ge, bv))) << (8 * i);
                }
                if mask != 0 {
                    let mut sums = [0u16; BLOCK];
                    for (i, acc) in a.iter().enumerate() {
                        vst1q_u16(sums.as_mut_ptr().add(8 * i), *acc);
                    }
                    match on_hits(b, mask, &sums) {
                        Some(t) => thr = t,
                        None => return,
                    }
                }
            }
        }
    }
}

#[cfg(all(target_arch = "wasm32", target_feature = "simd128"))]
mod wasm {
    use super::{BLOCK, OnHits};
    use core::arch::wasm32::*;

    /// Same trick as the AVX paths: the shuffled bytes are added as u16
    /// lanes (each = even entry + 256 · odd entry) and the odd bytes,
    /// shifted down, separately; the even sums come out once per block.
    /// This spares the two widenings per shuffle (and the byte shift, which
    /// wasm engines emulate on x86) that dominate a naive loop.
    pub(super) fn scan_simd128(lut: &[u8], blocks: &[u8], mut thr: u16, on_hits: &mut OnHits<'_>) {
        let bb = lut.len();
        let nib = u8x16_splat(15);
        for (b, block) in blocks.chunks_exact(bb).enumerate() {
            let mut a = [u16x8_splat(0); 4];
            for (c, t) in block.chunks_exact(16).zip(lut.chunks_exact(16)) {
                // SAFETY: both chunks are exactly 16 bytes; wasm loads need no alignment.
                let (c, t) = unsafe {
                    (
                        v128_load(c.as_ptr() as *const v128),
                        v128_load(t.as_ptr() as *const v128),
                    )
                };
                let rl = i8x16_swizzle(t, v128_and(c, nib));
                let rh = i8x16_swizzle(t, v128_and(u16x8_shr(c, 4), nib));
                a[0] = u16x8_add(a[0], rl);
                a[1] = u16x8_add(a[1], u16x8_shr(rl, 8));
                a[2] = u16x8_add(a[2], rh);
                a[3] = u16x8_add(a[3], u16x8_shr(rh, 8));
            }
            // Lane L of odd = entry 2L + 1, of even = entry 2L (entries 0–15
            // from the low nibbles, 16–31 from the high ones).
            let even_l = u16x8_sub(a[0], u16x8_shl(a[1], 8));
            let even_h = u16x8_sub(a[2], u16x8_shl(a[3], 8));
            let s = [
                u16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(even_l, a[1]),
                u16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(even_l, a[1]),
                u16x8_shuffle::<0, 8, 1, 9, 2, 10, 3, 11>(even_h, a[3]),
                u16x8_shuffle::<4, 12, 5, 13, 6, 14, 7, 15>(even_h, a[3]),
            ];
            let tv = u16x8_splat(thr);
            let mut mask = 0u32;
            for (i, acc) in s.iter().enumerate() {
                mask |= u32::from(i16x8_bitmask(u16x8_ge(*acc, tv))) << (8 * i);
            }
            if mask != 0 {
                let mut sums = [0u16; BLOCK];
                for (i, acc) in s.iter().enumerate() {
                    // SAFETY: 8 u16 lanes into sums[8i..8i + 8], i < 4.
                    unsafe { v128_store(sums.as_mut_ptr().add(8 * i) as *mut v128, *acc) };
                }
                match on_hits(b, mask, &sums) {
                    Some(t) => thr = t,
                    None => return,
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Every path's sums against the portable one, with thr = 0 (every block reported).
    fn all_sums(isa: Isa, lut: &[u8], blocks: &[u8]) -> Vec<u16> {
        let mut out = vec![0u16; blocks.len() / lut.len() * BLOCK];
        scan(isa, lut, blocks, 0, &mut |b, mask, sums| {
            assert_eq!(mask, u32::MAX);
            out[b * BLOCK..(b + 1) * BLOCK].copy_from_slice(sums);
            Some(0)
        });
        out
    }

    #[test]
    fn paths_agree_on_random_tables_and_wrap_alike() {
        let mut r = Rng::new(3);
        for m2 in [2usize, 4, 6, 8, 14, 48, 96, 258, 400] {
            let lut: Vec<u8> = (0..16 * m2).map(|_| (r.next_u64() % 256) as u8).collect();
            let blocks: Vec<u8> = (0..16 * m2 * 3).map(|_| (r.next_u64() % 256) as u8).collect();
            let want = all_sums(Isa::Scalar, &lut, &blocks);
            // The portable sums are the modular sums of the table entries.
            for b in 0..3 {
                for e in 0..BLOCK {
                    let mut s = 0u32;
                    for j in 0..m2 {
                        let byte = blocks[b * 16 * m2 + 16 * j + e % 16];
                        let code = if e < 16 { byte & 15 } else { byte >> 4 };
                        s += u32::from(lut[16 * j + usize::from(code)]);
                    }
                    assert_eq!(want[b * BLOCK + e], (s % 65536) as u16, "m2 {m2} block {b} entry {e}");
                }
            }
            for isa in Isa::available() {
                assert_eq!(all_sums(isa, &lut, &blocks), want, "{isa:?} m2 {m2}");
            }
        }
    }

    /// Every call `scan` makes for one table, as (block, mask, sums), with
    /// the threshold raised to the largest sum seen and a stop after `stop`
    /// calls.
    type Calls = Vec<(usize, u32, [u16; BLOCK])>;

    fn respond(calls: &mut Calls, stop: usize, b: usize, mask: u32, sums: &[u16; BLOCK]) -> Option<u16> {
        calls.push((b, mask, *sums));
        let top = sums.iter().copied().max().unwrap_or(0);
        (calls.len() < stop).then_some(top.saturating_sub(40))
    }

    #[test]
    fn multi_table_scans_make_the_calls_of_single_scans() {
        let mut r = Rng::new(11);
        for m2 in [2usize, 4, 6, 14, 48, 96] {
            let blocks: Vec<u8> = (0..16 * m2 * 9).map(|_| (r.next_u64() % 256) as u8).collect();
            let luts: Vec<Vec<u8>> = (0..MULTI)
                .map(|_| (0..16 * m2).map(|_| (r.next_u64() % 256) as u8).collect())
                .collect();
            for n in 1..=MULTI {
                let refs: Vec<&[u8]> = luts[..n].iter().map(Vec::as_slice).collect();
                let thrs: Vec<u16> = (0..n).map(|s| (s as u16) * 3000).collect();
                // Slot s stops after s + 2 calls (slot 0 after 2; the last may never).
                let stops: Vec<usize> = (0..n).map(|s| s + 2).collect();
                for isa in Isa::available() {
                    let mut want: Vec<Calls> = vec![Vec::new(); n];
                    for s in 0..n {
                        scan(isa, refs[s], &blocks, thrs[s], &mut |b, mask, sums| {
                            respond(&mut want[s], stops[s], b, mask, sums)
                        });
                    }
                    let mut got: Vec<Calls> = vec![Vec::new(); n];
                    scan_multi(isa, &refs, &blocks, &thrs, &mut |s, b, mask, sums| {
                        respond(&mut got[s], stops[s], b, mask, sums)
                    });
                    assert_eq!(got, want, "{isa:?} m2 {m2} tables {n}");
                    assert!(want[0].len() == 2, "the first slot stops after two calls");
                }
            }
            // Malformed calls do nothing.
            let refs: Vec<&[u8]> = luts.iter().map(Vec::as_slice).collect();
            let mut calls = 0;
            scan_multi(Isa::active(), &refs, &blocks, &[0; 3], &mut |_, _, _, _| {
                calls += 1;
                Some(0)
            });
            scan_multi(Isa::active(), &[&luts[0][..16]], &blocks, &[0], &mut |_, _, _, _| {
                calls += 1;
                Some(0)
            });
            assert_eq!(calls, 0);
        }
    }

    #[test]
    fn table_quantisation_is_identical_on_every_path() {
        let mut r = Rng::new(6);
        let tables: Vec<[f32; 16]> = (0..97)
            .map(|j| {
                std::array::from_fn(|c| {
                    if j % 7 == 0 {
                        0.25
                    } else {
                        r.normal() * 0.3 + c as f32 * 1e-3
                    }
                })
            })
            .collect();
        let mut want = Vec::new();
        table_ranges(Isa::Scalar, &tables, &mut want);
        let lo: Vec<f32> = want.iter().map(|x| x.0).collect();
        let span = want.iter().map(|x| x.1 - x.0).fold(0f32, f32::max);
        let a = 255.0 / span;
        let mut q0 = vec![[0u8; 16]; tables.len()];
        let s0 = quantize_tables(Isa::Scalar, &tables, &lo, a, &mut q0);
        assert!(q0.iter().flatten().any(|&x| x == 255));
        for isa in Isa::available() {
            let mut got = Vec::new();
            table_ranges(isa, &tables, &mut got);
            assert_eq!(got, want, "{isa:?}");
            let mut q = vec![[0u8; 16]; tables.len()];
            assert_eq!(quantize_tables(isa, &tables, &lo, a, &mut q), s0, "{isa:?}");
            assert_eq!(q, q0, "{isa:?}");
        }
    }

    #[test]
    fn masks_follow_the_threshold_and_stop_is_honoured() {
        let mut r = Rng::new(4);
        let m2 = 10;
        let lut: Vec<u8> = (0..16 * m2).map(|_| (r.next_u64() % 200) as u8).collect();
        let blocks: Vec<u8> = (0..16 * m2 * 4).map(|_| (r.next_u64() % 256) as u8).collect();
        let sums = all_sums(Isa::Scalar, &lut, &blocks);
        let mut sorted = sums.clone();
        sorted.sort_unstable();
        let thr = sorted[sorted.len() / 2];
        for isa in Isa::available() {
            let mut calls = 0;
            scan(isa, &lut, &blocks, thr, &mut |b, mask, s| {
                calls += 1;
                for e in 0..BLOCK {
                    assert_eq!(mask >> e & 1 == 1, s[e] >= thr, "{isa:?}");
                    assert_eq!(s[e], sums[b * BLOCK + e]);
                }
                None
            });
            assert_eq!(calls, 1, "{isa:?}: None stops the scan");
        }
    }
}
