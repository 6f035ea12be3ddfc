//! `dentate serve` (the memory service over HTTP), `dentate mcp` (its
//! tools over stdio) and `dentate keys` (API keys): a shell over
//! `dentate-serve`.

use crate::shared::{EmbedderArgs, Res, make_embedder};
use clap::{Args, Subcommand};
use dentate_memory::{ChatConfig, Llm, OpenAiChat};
use dentate_serve::{Engine, EngineConfig, FileConfig, Principal, Registry, Role};
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Settings shared by `serve` and `mcp`: flags, then `DENTATE_*`
/// environment variables, then the `--config` file, then defaults.
#[derive(Args, Debug, Clone)]
pub struct ServiceArgs {
    /// TOML configuration file (keys: dir, store, bind, pipelines, embedder,
    /// slots, workers, queue, loaded_users, save_after_secs,
    /// shutdown_grace_secs, tenant,
    /// [llm] url/model/key_env).
    #[arg(long, env = "DENTATE_CONFIG")]
    pub config: Option<PathBuf>,
    /// Memory directory (with --store postgres://…: this server's index
    /// caches only).
    #[arg(long, env = "DENTATE_DIR")]
    pub dir: Option<PathBuf>,
    /// Where the store lives: sqlite:DIR (default: the SQLite store in
    /// --dir) or a postgres:// URL that any number of servers share.
    #[arg(long, env = "DENTATE_STORE")]
    pub store: Option<String>,
    /// Pipelines, comma-separated (default rag): rag, hema, nemori, amory, premem.
    #[arg(long, env = "DENTATE_PIPELINES")]
    pub pipelines: Option<String>,
    /// Embedder: hash[:DIM] (default), minilm[:DIR], openai:MODEL.
    #[arg(long, env = "DENTATE_EMBEDDER")]
    pub embedder: Option<String>,
    /// Concurrent operations (default: cores, at least 2).
    #[arg(long, env = "DENTATE_SLOTS")]
    pub slots: Option<usize>,
    /// Ingest workers (default: slots / 2).
    #[arg(long, env = "DENTATE_WORKERS")]
    pub workers: Option<usize>,
    /// Ingest jobs that may wait before appends are refused with 429.
    #[arg(long, env = "DENTATE_QUEUE")]
    pub queue: Option<usize>,
    /// Base URL of an OpenAI-compatible model server (LLM pipelines).
    #[arg(long = "llm", env = "DENTATE_LLM")]
    pub llm: Option<String>,
    /// Model name (with --llm).
    #[arg(long, env = "DENTATE_MODEL")]
    pub model: Option<String>,
}

/// `dentate serve`.
#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    #[command(flatten)]
    pub service: ServiceArgs,
    /// Address to listen on (default 127.0.0.1:7700).
    #[arg(long, env = "DENTATE_BIND")]
    pub bind: Option<String>,
}

/// `dentate mcp`.
#[derive(Args, Debug, Clone)]
pub struct McpArgs {
    #[command(flatten)]
    pub service: ServiceArgs,
    /// The tenant whose users the tools see (default `default`, the
    /// tenant of the server's loopback-only mode).
    #[arg(long, env = "DENTATE_TENANT")]
    pub tenant: Option<String>,
}

/// `dentate keys …`.
#[derive(Subcommand, Debug)]
pub enum KeysCommand {
    /// Make a key; prints it on standard output (shown once, stored hashed).
    Create {
        /// Memory directory of the server.
        #[arg(long, required_unless_present = "store")]
        dir: Option<PathBuf>,
        /// The server's store, when not in --dir (a postgres:// URL).
        #[arg(long, env = "DENTATE_STORE")]
        store: Option<String>,
        /// The tenant the key is scoped to.
        #[arg(long)]
        tenant: String,
        /// read, write or admin.
        #[arg(long, default_value = "write")]
        role: String,
    },
    /// List keys (ids, tenants, roles; never secrets).
    List {
        /// Memory directory of the server.
        #[arg(long, required_unless_present = "store")]
        dir: Option<PathBuf>,
        /// The server's store, when not in --dir (a postgres:// URL).
        #[arg(long, env = "DENTATE_STORE")]
        store: Option<String>,
    },
    /// Revoke a key by id (or by the key itself); takes effect at once.
    Revoke {
        /// Memory directory of the server.
        #[arg(long, required_unless_present = "store")]
        dir: Option<PathBuf>,
        /// The server's store, when not in --dir (a postgres:// URL).
        #[arg(long, env = "DENTATE_STORE")]
        store: Option<String>,
        /// The key's id (as `keys list` shows it) or the key.
        id: String,
    },
}

struct Resolved {
    file: FileConfig,
    engine: EngineConfig,
    embedder: Arc<dyn dentate_embed::Embedder>,
    llm: Option<Arc<dyn Llm>>,
}

fn resolve(a: &ServiceArgs) -> Res<Resolved> {
    let file = match &a.config {
        Some(p) => FileConfig::load(p)?,
        None => FileConfig::default(),
    };
    let dir = a
        .dir
        .clone()
        .or_else(|| file.dir.clone())
        .ok_or("a memory directory is required: --dir DIR, DENTATE_DIR or `dir` in --config")?;
    let mut engine = EngineConfig::new(dir);
    if let Some(loc) = a.store.as_deref().or(file.store.as_deref()) {
        engine.store = Some(dentate_memory::StoreLocation::parse(loc)?);
    }
    if let Some(p) = a.pipelines.as_deref() {
        engine.pipelines = p
            .split(',')
            .map(|s| s.trim().to_string())
            .filter(|s| !s.is_empty())
            .collect();
    } else if let Some(p) = &file.pipelines {
        engine.pipelines = p.clone();
    }
    if let Some(s) = a.slots.or(file.slots) {
        engine.slots = s;
        engine.workers = (s / 2).max(1);
    }
    if let Some(w) = a.workers.or(file.workers) {
        engine.workers = w;
    }
    if let Some(q) = a.queue.or(file.queue) {
        engine.queue = q;
    }
    if let Some(l) = file.loaded_users {
        engine.loaded_users = l;
    }
    if let Some(secs) = file.save_after_secs {
        engine.save_after = Duration::from_secs(secs);
    }
    let spec = a
        .embedder
        .clone()
        .or_else(|| file.embedder.clone())
        .unwrap_or_else(|| "hash".into());
    let embedder: Arc<dyn dentate_embed::Embedder> = Arc::from(make_embedder(&EmbedderArgs {
        embedder: spec,
        base_url: None,
        api_key_env: "OPENAI_API_KEY".into(),
    })?);
    let url = a.llm.clone().or_else(|| file.llm.as_ref().map(|l| l.url.clone()));
    let model = a.model.clone().or_else(|| file.llm.as_ref().map(|l| l.model.clone()));
    let llm: Option<Arc<dyn Llm>> = match (url, model) {
        (None, None) => None,
        (Some(url), Some(model)) => {
            let mut cfg = ChatConfig::new(&url, &model);
            if let Some(k) = file.llm.as_ref().and_then(|l| l.key_env.clone()) {
                cfg.api_key_env = k;
            }
            Some(Arc::new(OpenAiChat::new(cfg)?))
        }
        _ => return Err("--llm URL and --model NAME go together".into()),
    };
    Ok(Resolved {
        file,
        engine,
        embedder,
        llm,
    })
}

fn runtime() -> Res<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}

/// `dentate serve`.
pub fn serve(a: &ServeArgs) -> Res<()> {
    let r = resolve(&a.service)?;
    let bind = a
        .bind
        .clone()
        .or_else(|| r.file.bind.clone())
        .unwrap_or_else(|| "127.0.0.1:7700".into());
    let grace = Duration::from_secs(r.file.shutdown_grace_secs.unwrap_or(30));
    let dir = r.engine.dir.clone();
    let pipelines = r.engine.pipelines.join(", ");
    let engine = Engine::open(r.engine, r.embedder, r.llm)?;
    let rt = runtime()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(&bind)
            .await
            .map_err(|e| format!("cannot listen on {bind}: {e}"))?;
        let addr = listener.local_addr()?;
        eprintln!(
            "dentate serve: http://{addr}  (dir {}, pipelines {pipelines}, embedder {})",
            dir.display(),
            engine.embedder_name()
        );
        if engine.registry.has_keys()? {
            eprintln!("API keys are required (Authorization: Bearer KEY).");
        } else {
            eprintln!(
                "No API key exists: answering loopback clients only, as tenant `default`. Create a key with `dentate keys create --dir {} --tenant NAME --role write`; from then on every request needs one.",
                dir.display()
            );
        }
        eprintln!("REST /v1 (OpenAPI at /openapi.json), mem0 at /mem0, MCP at /mcp, metrics at /metrics");
        dentate_serve::serve(engine, listener, dentate_serve::shutdown_signal(), grace).await?;
        eprintln!("dentate serve: stopped");
        Ok(())
    })
}

/// `dentate mcp`: the tools over stdio (standard output carries only MCP).
pub fn mcp(a: &McpArgs) -> Res<()> {
    let r = resolve(&a.service)?;
    let tenant = a
        .tenant
        .clone()
        .or_else(|| r.file.tenant.clone())
        .unwrap_or_else(|| dentate_serve::registry::DEFAULT_TENANT.into());
    dentate_serve::registry::check_tenant(&tenant)?;
    let engine = Engine::open(r.engine, r.embedder, r.llm)?;
    let rt = runtime()?;
    rt.block_on(async move {
        let workers = engine.start_workers();
        dentate_serve::mcp::serve_stdio(engine.clone(), Principal::local(&tenant)).await?;
        engine.shutdown(Duration::from_secs(30)).await;
        for w in workers {
            w.abort();
        }
        Ok(())
    })
}

/// The registry of `--store`, else of the SQLite store in `--dir`.
fn registry(dir: Option<PathBuf>, store: Option<String>) -> Res<Registry> {
    let loc = match (store, dir) {
        (Some(s), _) => dentate_memory::StoreLocation::parse(&s)?,
        (None, Some(d)) => dentate_memory::StoreLocation::Sqlite(d),
        (None, None) => return Err("--dir DIR or --store LOCATION is required".into()),
    };
    Ok(Registry::at(&loc)?)
}

/// `dentate keys …`.
pub fn keys(c: KeysCommand) -> Res<()> {
    match c {
        KeysCommand::Create {
            dir,
            store,
            tenant,
            role,
        } => {
            let reg = registry(dir, store)?;
            let (info, key) = reg.create_key(&tenant, Role::parse(&role)?)?;
            eprintln!(
                "key {} for tenant `{}` ({}); it is shown once:",
                info.id,
                info.tenant,
                info.role.name()
            );
            println!("{key}");
        }
        KeysCommand::List { dir, store } => {
            let reg = registry(dir, store)?;
            println!("{:<14} {:<20} {:<6} {:<12} revoked", "id", "tenant", "role", "created");
            for k in reg.keys()? {
                println!(
                    "{:<14} {:<20} {:<6} {:<12} {}",
                    k.id,
                    k.tenant,
                    k.role.name(),
                    k.created_at,
                    k.revoked_at.map_or_else(|| "-".to_string(), |t| t.to_string())
                );
            }
        }
        KeysCommand::Revoke { dir, store, id } => {
            let reg = registry(dir, store)?;
            if !reg.revoke(&id)? {
                return Err(format!("no live key `{id}`").into());
            }
            eprintln!("revoked");
        }
    }
    Ok(())
}
