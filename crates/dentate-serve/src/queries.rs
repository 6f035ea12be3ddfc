//! Query embeddings made before a search takes its slot.
//!
//! A search holds a slot (and, with routing, its user's slot) while it
//! runs; with a model embedder most of that time is the query's embedding,
//! which needs no slot. [`QueryEmbedder`] wraps the engine's embedder: a
//! search first [`prepares`](QueryEmbedder::prepare) its query (at most
//! `slots` at once, in a blocking thread), and the pipeline's own call for
//! that text inside the slot gets the prepared vector. Embedders cheaper
//! than [`WORTH_PREPARING`] per query are called in the slot as before.

use dentate_embed::{Embedder, Result};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Queries whose embedding takes less (on average) are not prepared.
pub const WORTH_PREPARING: Duration = Duration::from_micros(200);
/// Most prepared queries held at once (beyond it, searches embed in their slot).
const MAX_READY: usize = 4096;

/// An embedder that hands out vectors of prepared queries (see the module
/// docs); every other call goes to the wrapped embedder.
pub struct QueryEmbedder {
    inner: Arc<dyn Embedder>,
    /// Query text → (vector, searches holding it).
    ready: Mutex<HashMap<String, (Vec<f32>, usize)>>,
    /// Mean seconds of one single-text embedding, in nanoseconds (0: unknown).
    mean_nanos: AtomicU64,
    gate: tokio::sync::Semaphore,
}

impl QueryEmbedder {
    /// Wraps `inner`; at most `parallel` queries are embedded at once.
    pub fn new(inner: Arc<dyn Embedder>, parallel: usize) -> QueryEmbedder {
        QueryEmbedder {
            inner,
            ready: Mutex::new(HashMap::new()),
            mean_nanos: AtomicU64::new(0),
            gate: tokio::sync::Semaphore::new(parallel.max(1)),
        }
    }

    fn timed(&self, texts: &[&str]) -> Result<Vec<f32>> {
        let t = Instant::now();
        let v = self.inner.embed(texts);
        if texts.len() == 1 {
            let now = t.elapsed().as_nanos().min(u64::MAX as u128) as u64;
            let prev = self.mean_nanos.load(Ordering::Relaxed);
            let next = if prev == 0 { now } else { (prev * 7 + now) / 8 };
            self.mean_nanos.store(next.max(1), Ordering::Relaxed);
        }
        v
    }

    /// Embeds `query` ahead of its search, unless the embedder is cheap or
    /// too many are held; the returned guard keeps the vector until the
    /// search is done. An embedding error is left for the search to meet
    /// (and report) in its slot.
    pub async fn prepare(self: &Arc<Self>, query: &str) -> Option<PreparedQuery> {
        let mean = self.mean_nanos.load(Ordering::Relaxed);
        if mean != 0 && mean < WORTH_PREPARING.as_nanos() as u64 {
            return None;
        }
        {
            let mut ready = self.ready.lock().ok()?;
            if let Some((_, holders)) = ready.get_mut(query) {
                *holders += 1;
                return Some(self.guard(query));
            }
            if ready.len() >= MAX_READY {
                return None;
            }
        }
        let _permit = self.gate.acquire().await.ok()?;
        let this = self.clone();
        let text = query.to_string();
        let v = tokio::task::spawn_blocking(move || this.timed(&[&text]))
            .await
            .ok()?
            .ok()?;
        let mut ready = self.ready.lock().ok()?;
        ready.entry(query.to_string()).or_insert((v, 0)).1 += 1;
        Some(self.guard(query))
    }

    fn guard(self: &Arc<Self>, query: &str) -> PreparedQuery {
        PreparedQuery {
            owner: self.clone(),
            text: query.to_string(),
        }
    }

    /// Queries held now.
    #[cfg(test)]
    fn held(&self) -> usize {
        self.ready.lock().map_or(0, |r| r.len())
    }
}

/// Keeps a prepared query's vector until dropped.
pub struct PreparedQuery {
    owner: Arc<QueryEmbedder>,
    text: String,
}

impl Drop for PreparedQuery {
    fn drop(&mut self) {
        if let Ok(mut ready) = self.owner.ready.lock()
            && let Some((_, holders)) = ready.get_mut(&self.text)
        {
            *holders -= 1;
            if *holders == 0 {
                ready.remove(&self.text);
            }
        }
    }
}

impl Embedder for QueryEmbedder {
    fn name(&self) -> String {
        self.inner.name()
    }

    fn dim(&self) -> usize {
        self.inner.dim()
    }

    fn embed(&self, texts: &[&str]) -> Result<Vec<f32>> {
        if let [one] = texts
            && let Ok(ready) = self.ready.lock()
            && let Some((v, _)) = ready.get(*one)
        {
            return Ok(v.clone());
        }
        self.timed(texts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Counts the texts it embeds; slow enough to be worth preparing.
    struct Counting(AtomicU64);

    impl Embedder for Counting {
        fn name(&self) -> String {
            "counting".into()
        }
        fn dim(&self) -> usize {
            2
        }
        fn embed(&self, texts: &[&str]) -> Result<Vec<f32>> {
            std::thread::sleep(Duration::from_millis(1));
            self.0.fetch_add(texts.len() as u64, Ordering::SeqCst);
            Ok(texts.iter().flat_map(|t| [t.len() as f32, 1.0]).collect())
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_prepared_query_is_embedded_once_and_released_after_its_search() {
        let inner = Arc::new(Counting(AtomicU64::new(0)));
        let q = Arc::new(QueryEmbedder::new(inner.clone(), 2));
        let a = q.prepare("where is my cat").await.expect("worth preparing at first");
        let b = q.prepare("where is my cat").await.expect("shared");
        assert_eq!(inner.0.load(Ordering::SeqCst), 1);
        // The search's own call gets the prepared vector.
        assert_eq!(q.embed(&["where is my cat"]).unwrap(), vec![15.0, 1.0]);
        assert_eq!(inner.0.load(Ordering::SeqCst), 1);
        // Other calls (batches, other texts) go through.
        assert_eq!(q.embed(&["a", "bb"]).unwrap(), vec![1.0, 1.0, 2.0, 1.0]);
        assert_eq!(inner.0.load(Ordering::SeqCst), 3);
        drop(a);
        assert_eq!(q.held(), 1);
        drop(b);
        assert_eq!(q.held(), 0);
        q.embed(&["where is my cat"]).unwrap();
        assert_eq!(inner.0.load(Ordering::SeqCst), 4);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cheap_embedders_are_not_prepared() {
        let q = Arc::new(QueryEmbedder::new(
            Arc::new(dentate_embed::HashingEmbedder::new(64).unwrap()),
            2,
        ));
        for _ in 0..16 {
            q.embed(&["warm up the mean"]).unwrap();
        }
        assert!(q.prepare("anything").await.is_none());
        assert_eq!(q.held(), 0);
    }
}
