//! The multi-threaded build's thread pool (feature `threads`): rayon on Web
//! Workers over the module's shared memory.
//!
//! Browsers forbid blocking the page's main thread (`Atomics.wait` throws
//! there), and a rayon pool blocks while it waits for stolen work. So the
//! threaded module runs inside a dedicated Worker: that Worker loads it,
//! calls [`init_threads`] once, and its training and batch searches then
//! spread over the pool. The calling Worker is itself pool thread 0 (rayon's
//! `use_current_thread`), so `initThreads(n)` starts `n − 1` more Workers.
//! Without `initThreads` the module runs single-threaded, as the default
//! build does.
//!
//! How a pool starts: [`init_threads`] first has `threads.js` start the
//! Workers, handing each the compiled module and the shared memory; each
//! instantiates the module on that memory and waits in
//! `__dentateRunWorker`. Once all wait, rayon's global pool is built with
//! a spawn handler that hands each thread's `ThreadBuilder` to a waiting
//! Worker (a mutex-guarded queue and a condition variable) instead of
//! spawning an OS thread, and each Worker runs rayon's loop on its own.
//! The order matters: rayon's build waits until every thread runs, and a
//! Worker cannot start while the Worker that created it is blocked.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};

use wasm_bindgen::prelude::*;

use crate::convert::err;

/// The most threads `initThreads` accepts (browsers cap Workers well below
/// this; a larger number is a caller's mistake, not a request).
const MAX_THREADS: usize = 256;

/// The pool's size once `initThreads` has started it; 0 before,
/// `STARTING` while it starts, `FAILED` after a start that failed.
static POOL: AtomicUsize = AtomicUsize::new(0);
const STARTING: usize = usize::MAX;
const FAILED: usize = usize::MAX - 1;

/// What the spawn handler hands the waiting Workers.
struct Handoff {
    /// Thread builders, each taken by one Worker.
    queue: VecDeque<rayon::ThreadBuilder>,
    /// Set when the pool could not be built: waiting Workers return.
    abandoned: bool,
}

static HANDOFF: Mutex<Handoff> = Mutex::new(Handoff {
    queue: VecDeque::new(),
    abandoned: false,
});
static ARRIVED: Condvar = Condvar::new();

#[wasm_bindgen(module = "/src/threads.js")]
extern "C" {
    #[wasm_bindgen(js_name = inWorker)]
    fn in_worker() -> bool;
    #[wasm_bindgen(js_name = crossOriginIsolated)]
    fn cross_origin_isolated() -> bool;
    #[wasm_bindgen(js_name = hardwareConcurrency)]
    fn hardware_concurrency() -> usize;
    #[wasm_bindgen(js_name = startWorkers)]
    fn start_workers(module: JsValue, memory: JsValue, count: usize) -> js_sys::Promise;
}

/// Why `initThreads(threads)` cannot start a pool here, if it cannot.
fn refusal(threads: usize) -> Option<String> {
    if !cfg!(target_feature = "atomics") {
        return Some("this module was built without wasm threads: load pkg-threads".into());
    }
    if threads == 0 || threads > MAX_THREADS {
        return Some(format!("threads must be 1..={MAX_THREADS}, got {threads}"));
    }
    if !in_worker() {
        return Some(
            "initThreads runs inside a dedicated Worker: browsers forbid blocking the page's main thread, \
             and the pool blocks while it waits for its threads"
                .into(),
        );
    }
    if !cross_origin_isolated() {
        return Some(
            "the page is not cross-origin isolated (serve it with Cross-Origin-Opener-Policy: same-origin \
             and Cross-Origin-Embedder-Policy: require-corp), so memory cannot be shared with Workers"
                .into(),
        );
    }
    None
}

/// Builds rayon's global pool on the Workers already waiting in
/// [`run_worker`].
fn build_pool(threads: usize) -> Result<(), JsValue> {
    let built = rayon::ThreadPoolBuilder::new()
        .num_threads(threads)
        .use_current_thread()
        .thread_name(|i| format!("dentate-{i}"))
        .spawn_handler(|thread| {
            HANDOFF
                .lock()
                .map_err(|_| std::io::Error::other("thread hand-off poisoned"))?
                .queue
                .push_back(thread);
            ARRIVED.notify_one();
            Ok(())
        })
        .build_global();
    built.map_err(|e| {
        err(format!(
            "cannot start the thread pool (initThreads runs once, before any training or search): {e}"
        ))
    })
}

/// Releases the Workers waiting in [`run_worker`] (they return and
/// close): the pool will not be built.
fn abandon() {
    if let Ok(mut h) = HANDOFF.lock() {
        h.abandoned = true;
    }
    ARRIVED.notify_all();
}

/// Starts a pool of `threads` threads (this Worker and `threads − 1` new
/// Workers; omitted: `navigator.hardwareConcurrency`, at most 256) for
/// training and batch searches; resolves to the pool's size once every
/// Worker runs. Call it once, before anything else that
/// computes (the pool cannot be resized or replaced). Throws on the page's
/// main thread, on a page that is not cross-origin isolated, and in a
/// module built without threads.
#[wasm_bindgen(js_name = initThreads)]
pub fn init_threads(threads: Option<usize>) -> Result<js_sys::Promise, JsValue> {
    let threads = threads.unwrap_or_else(|| hardware_concurrency().clamp(1, MAX_THREADS));
    if let Some(why) = refusal(threads) {
        return Err(err(why));
    }
    match POOL.compare_exchange(0, STARTING, Ordering::AcqRel, Ordering::Acquire) {
        Ok(_) => {}
        Err(FAILED) => {
            return Err(err(
                "an earlier initThreads failed; this module runs single-threaded (start a new Worker to try again)",
            ));
        }
        Err(_) => return Err(err("initThreads runs once: a pool is started or starting")),
    }
    // The Workers first: rayon's build waits until every thread runs, and
    // a Worker can only start once this one returns to its event loop.
    let workers = start_workers(wasm_bindgen::module(), wasm_bindgen::memory(), threads - 1);
    Ok(wasm_bindgen_futures::future_to_promise(async move {
        let started = wasm_bindgen_futures::JsFuture::from(workers).await;
        match started.and_then(|_| build_pool(threads)) {
            Ok(()) => {
                POOL.store(threads, Ordering::Release);
                Ok(JsValue::from(threads))
            }
            Err(e) => {
                // Workers that did start are waiting for a thread: let
                // them go. Without a pool the module stays single-threaded.
                abandon();
                POOL.store(FAILED, Ordering::Release);
                Err(e)
            }
        }
    }))
}

/// The number of threads searches and training use: 1 until
/// `initThreads` has started a pool. (Asking does not start rayon's
/// default pool, so `initThreads` may still follow.)
#[wasm_bindgen]
pub fn threads() -> usize {
    match POOL.load(Ordering::Acquire) {
        STARTING | FAILED | 0 => 1,
        n => n,
    }
}

/// A pool Worker's entry (called by `threads.js`, not by users): waits for
/// its thread, then runs rayon's worker loop on it, never returning while
/// the pool lives. Returns when the pool could not be built.
#[doc(hidden)]
#[wasm_bindgen(js_name = __dentateRunWorker)]
pub fn run_worker() -> Result<(), JsValue> {
    let poisoned = |_| err("thread hand-off poisoned");
    let mut h = HANDOFF.lock().map_err(poisoned)?;
    loop {
        if let Some(thread) = h.queue.pop_front() {
            drop(h);
            thread.run();
            return Ok(());
        }
        if h.abandoned {
            return Ok(());
        }
        h = ARRIVED.wait(h).map_err(poisoned)?;
    }
}
