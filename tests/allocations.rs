//! A search allocates a fixed number of times, whatever it scans: the count
//! of heap allocations of one single-query IVF-PQ search (8-bit and 4-bit
//! fast-scan, f16 and 8-bit re-rank stores) does not grow with the lists
//! probed, the re-rank depth or the index's size, so nothing in the scan or
//! the re-ranking allocates per list or per candidate. Counted by a global
//! allocator, so this binary holds this one test (other tests' threads
//! would be counted too).

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

mod common;
use common::gaussian;
use dentate::{Index, IvfPqConfig, IvfPqIndex, IvfSearchParams, PqCodes, StoreFormat};

/// Counts allocations (and reallocations) on the way to the system's.
struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

// SAFETY: every call forwards to `System` with the caller's arguments.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, size) }
    }
}

#[global_allocator]
static COUNTING: Counting = Counting;

/// Allocations of one search of `query` (after one uncounted warm-up).
fn allocations(index: &IvfPqIndex, query: &[f32], k: usize, params: IvfSearchParams) -> usize {
    index.search_with(query, k, params).unwrap();
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    let hits = index.search_with(query, k, params).unwrap();
    let n = ALLOCATIONS.load(Ordering::Relaxed) - before;
    assert_eq!(hits[0].len(), k);
    n
}

#[test]
fn a_search_allocates_a_fixed_number_of_times() {
    let dim = 64;
    let data = gaussian(20_000, dim, 3);
    let query = &gaussian(1, dim, 99)[..];
    for codes in [PqCodes::Pq8, PqCodes::FastScan4] {
        for store in [StoreFormat::F16, StoreFormat::Sq8] {
            let build = |n: usize| {
                let mut cfg = match codes {
                    PqCodes::Pq8 => IvfPqConfig::new(128, 16),
                    PqCodes::FastScan4 => IvfPqConfig::fastscan(128, 16),
                };
                cfg.rerank_store = Some(store);
                cfg.kmeans_iterations = 3;
                cfg.pq_iterations = 3;
                let mut index = IvfPqIndex::new(dim, cfg).unwrap();
                index.train(&data[..n * dim]).unwrap();
                index.add(&(0..n as u64).collect::<Vec<_>>(), &data[..n * dim]).unwrap();
                index
            };
            let (small, large) = (build(5_000), build(20_000));
            let p = |nprobe, rerank| IvfSearchParams { nprobe, rerank };
            let base = allocations(&large, query, 10, p(8, 10));
            let case = format!("{codes:?}, {store:?} store");
            assert_eq!(
                allocations(&large, query, 10, p(128, 10)),
                base,
                "{case}: 16× the lists probed"
            );
            assert_eq!(
                allocations(&large, query, 10, p(8, 40)),
                base,
                "{case}: 4× the re-rank depth"
            );
            assert_eq!(
                allocations(&small, query, 10, p(8, 10)),
                base,
                "{case}: a quarter of the vectors"
            );
            assert_eq!(allocations(&large, query, 100, p(8, 10)), base, "{case}: 10× k");
            // Validation, rotation, the coarse search, the tables, the
            // shortlist, the re-ranking and the results: a few dozen at most.
            assert!(base <= 40, "{case}: {base} allocations for one query");
            println!("{case}: {base} allocations a query");
        }
    }
}
