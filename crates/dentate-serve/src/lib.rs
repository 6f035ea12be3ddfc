//! # dentate-serve
//!
//! Dentate's memory pipelines as a service:
//!
//! - a REST API under `/v1` (users, messages ingested in the background
//!   with durable jobs, memories with provenance, search by `k` or token
//!   budget and time range, prompt context, history, erasure with
//!   receipts), documented by the OpenAPI document it serves at
//!   `/openapi.json` ([`http`]);
//! - a mem0-compatible subset under `/mem0` ([`mem0`]);
//! - an MCP server with the same operations as tools, over stdio and over
//!   streamable HTTP at `/mcp` ([`mcp`]);
//! - tenants with API keys (hashed, constant-time compared, roles read,
//!   write and admin; [`registry`]); without keys, loopback clients only;
//! - Prometheus metrics at `/metrics` ([`metrics`]).
//!
//! [`Engine`] is the part every transport shares; `dentate serve` and
//! `dentate mcp` (the CLI) are thin shells over [`serve`] and
//! [`mcp::serve_stdio`].
#![warn(missing_docs)]

pub mod config;
pub mod engine;
pub mod error;
pub mod extract;
pub mod http;
pub mod mcp;
pub mod mem0;
pub mod metrics;
pub mod model;
pub mod queries;
pub mod registry;

pub use config::{FileConfig, LlmConfig};
pub use engine::{Engine, EngineConfig};
pub use error::{Result, ServeError};
pub use registry::{Principal, Registry, Role};

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

/// Serves `engine` on `listener` until `stop` resolves, then shuts down
/// gracefully: new connections stop, appends are refused, requests in
/// flight and running ingests get up to `grace` to finish, and queued
/// ingests stay in the database for the next start.
pub async fn serve(
    engine: Arc<Engine>,
    listener: tokio::net::TcpListener,
    stop: impl Future<Output = ()> + Send + 'static,
    grace: Duration,
) -> Result<()> {
    let workers = engine.start_workers();
    let app = http::router(engine.clone());
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let closer = engine.clone();
    let server = axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).with_graceful_shutdown(
        async move {
            stop.await;
            closer.begin_shutdown();
            let _ = tx.send(());
        },
    );
    let mut server = std::pin::pin!(server.into_future());
    tokio::select! {
        r = &mut server => r.map_err(|e| ServeError::Internal(format!("server: {e}")))?,
        _ = async {
            let _ = rx.await;
            tokio::time::sleep(grace).await;
        } => log::warn!("connections still open after {} s; closing them", grace.as_secs()),
    }
    let finished = engine.shutdown(grace).await;
    if !finished {
        log::warn!("an ingest run was still going after the grace period; it resumes at the next start");
    }
    for w in workers {
        w.abort();
    }
    Ok(())
}

/// Resolves on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => {},
        _ = term => {},
    }
}
