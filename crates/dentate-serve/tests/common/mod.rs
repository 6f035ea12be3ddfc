//! A real `dentate serve` on a loopback socket, and an HTTP client for it.
#![allow(dead_code)]

use dentate_embed::HashingEmbedder;
use dentate_serve::{Engine, EngineConfig};
use serde_json::Value;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

/// A server running on its own Tokio runtime in a thread.
pub struct Server {
    pub url: String,
    pub engine: Arc<Engine>,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Engine settings for tests: RAG, 3 slots, 2 workers.
pub fn config(dir: &Path) -> EngineConfig {
    let mut c = EngineConfig::new(dir.to_path_buf());
    c.slots = 3;
    c.workers = 2;
    c
}

impl Server {
    /// Starts a server on `dir` (`workers: false` leaves the ingest queue
    /// undrained, for backpressure and restart tests).
    pub fn start(cfg: EngineConfig, workers: bool) -> Server {
        let engine = Engine::open(cfg, Arc::new(HashingEmbedder::new(384).unwrap()), None).unwrap();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let (addr_tx, addr_rx) = std::sync::mpsc::channel();
        let e = engine.clone();
        let thread = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(2)
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
                addr_tx.send(listener.local_addr().unwrap()).unwrap();
                let stop = async move {
                    let _ = rx.await;
                };
                if workers {
                    dentate_serve::serve(e, listener, stop, Duration::from_secs(10))
                        .await
                        .unwrap();
                } else {
                    let app = dentate_serve::http::router(e.clone());
                    axum_serve(app, listener, stop).await;
                    e.shutdown(Duration::from_secs(1)).await;
                }
            });
        });
        let addr = addr_rx.recv().unwrap();
        Server {
            url: format!("http://{addr}"),
            engine,
            stop: Some(tx),
            thread: Some(thread),
        }
    }

    /// Stops the server gracefully and waits for it.
    pub fn stop(mut self) {
        self.halt();
    }

    fn halt(&mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }

    /// `method path` with an optional key and raw body; returns the status,
    /// the body parsed as JSON (`Value::Null` when it is not JSON) and the
    /// raw body.
    pub fn call(&self, method: &str, path: &str, key: Option<&str>, body: Option<&str>) -> Reply {
        call(&format!("{}{path}", self.url), method, key, body)
    }

    /// JSON shortcut.
    pub fn json(&self, method: &str, path: &str, key: Option<&str>, body: Value) -> Reply {
        self.call(method, path, key, Some(&body.to_string()))
    }

    /// Waits until the ingest queue is empty and no run is going.
    pub fn idle(&self) {
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            let h = self.call("GET", "/v1/health", None, None);
            if h.json["queue_depth"] == 0 && !self.engine_busy() {
                return;
            }
            assert!(std::time::Instant::now() < deadline, "ingestion did not finish");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn engine_busy(&self) -> bool {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        !rt.block_on(self.engine.idle(Duration::from_millis(0)))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.halt();
    }
}

async fn axum_serve(
    app: axum::Router,
    listener: tokio::net::TcpListener,
    stop: impl std::future::Future<Output = ()> + Send + 'static,
) {
    axum::serve(
        listener,
        app.into_make_service_with_connect_info::<std::net::SocketAddr>(),
    )
    .with_graceful_shutdown(stop)
    .await
    .unwrap();
}

/// A response.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub json: Value,
    pub text: String,
    pub headers: Vec<(String, String)>,
}

impl Reply {
    /// A header's value.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    /// The error code of an error reply.
    pub fn code(&self) -> &str {
        self.json["error"]["code"].as_str().unwrap_or("")
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(Duration::from_secs(60)))
        .build()
        .into()
}

/// One request to an absolute URL.
pub fn call(url: &str, method: &str, key: Option<&str>, body: Option<&str>) -> Reply {
    let a = agent();
    let auth = key.map(|k| format!("Bearer {k}"));
    macro_rules! with_auth {
        ($r:expr) => {{
            let r = $r;
            match &auth {
                Some(v) => r.header("Authorization", v),
                None => r,
            }
        }};
    }
    let res = match (method, body) {
        ("GET", _) => with_auth!(a.get(url)).call(),
        ("DELETE", _) => with_auth!(a.delete(url)).call(),
        ("POST", b) => with_auth!(a.post(url))
            .content_type("application/json")
            .send(b.unwrap_or("")),
        ("PUT", b) => with_auth!(a.put(url))
            .content_type("application/json")
            .send(b.unwrap_or("")),
        ("PATCH", b) => with_auth!(a.patch(url))
            .content_type("application/json")
            .send(b.unwrap_or("")),
        (m, _) => panic!("method {m}"),
    };
    let mut res = res.unwrap_or_else(|e| panic!("{method} {url}: {e}"));
    let status = res.status().as_u16();
    let headers = res
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_string()))
        .collect();
    let text = res.body_mut().read_to_string().unwrap_or_default();
    let json = serde_json::from_str(&text).unwrap_or(Value::Null);
    Reply {
        status,
        json,
        text,
        headers,
    }
}

/// Every byte of every file under `dir`, by name.
pub fn files(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        if e.path().is_file() {
            out.push((
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            ));
        }
    }
    out
}

/// The files under `dir` that contain `needle`.
pub fn files_containing(dir: &Path, needle: &str) -> Vec<String> {
    files(dir)
        .into_iter()
        .filter(|(_, b)| b.windows(needle.len()).any(|w| w == needle.as_bytes()))
        .map(|(n, _)| n)
        .collect()
}
