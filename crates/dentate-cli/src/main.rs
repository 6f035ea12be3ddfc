//! The `dentate` command-line tool.

mod bench;
mod commands;
mod embedcmd;
mod evalplot;
mod memcmd;
mod pydocs;
mod report;
mod rustdocs;
mod servecmd;
mod shared;
mod storecmd;
mod tune;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Dentate: vector retrieval engine for agent memory.
#[derive(Parser)]
#[command(name = "dentate", version, about, long_about = None)]
struct Cli {
    /// Compute backend: `auto` (a real GPU when there is one, else the
    /// CPU), `cpu` or `gpu` (any adapter, software ones included). Default:
    /// $DENTATE_BACKEND, else auto.
    #[arg(long, global = true)]
    backend: Option<String>,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Build a synthetic clustered set, train exact and IVF-OPQ-PQ indexes,
    /// print recall/QPS/bytes, save and reload. No downloads; under a minute.
    Quickstart(commands::QuickstartArgs),
    /// Measure recall@k, QPS, build time and bytes per vector on vector files.
    Bench(bench::BenchArgs),
    /// Summarise `bench --json` and `benches/faiss_compare.py --json` rows:
    /// QPS at recall targets with same-run ratios, and a recall–QPS SVG.
    BenchReport(report::ReportArgs),
    /// Search nlist / m / nprobe / re-rank of a fast-scan index for the
    /// highest QPS that reaches a recall target (checked on held-aside queries).
    Tune(tune::TuneArgs),
    /// Build, search and inspect index files.
    #[command(subcommand)]
    Index(commands::IndexCommand),
    /// Search an index (same as `dentate index search`): with --text, hybrid
    /// dense + BM25 over an index built with --texts.
    Search(commands::SearchArgs),
    /// Generate data files.
    #[command(subcommand)]
    Data(commands::DataCommand),
    /// Embed a text file (one text per line) into .fvecs.
    Embed(embedcmd::EmbedArgs),
    /// Fetch models into the cache.
    #[command(subcommand)]
    Model(embedcmd::ModelCommand),
    /// Agent memory: ingest conversations, ask, show, forget, correct.
    #[command(subcommand)]
    Memory(memcmd::MemoryCommand),
    /// Evaluate memory pipelines on benchmarks.
    #[command(subcommand)]
    Eval(memcmd::EvalCommand),
    /// Run the memory service: REST API (/v1, OpenAPI at /openapi.json),
    /// mem0-compatible routes (/mem0), MCP (/mcp), metrics (/metrics).
    Serve(servecmd::ServeArgs),
    /// Serve the memory tools over MCP on stdin/stdout.
    Mcp(servecmd::McpArgs),
    /// API keys of a memory service.
    #[command(subcommand)]
    Keys(servecmd::KeysCommand),
    /// The memory store: migrate, export and import a user, copy between
    /// SQLite and PostgreSQL.
    #[command(subcommand)]
    Store(storecmd::StoreCommand),
    /// Print the compute backends and SIMD paths of this machine.
    Info,
}

/// Mesa's Vulkan drivers print "error: XDG_RUNTIME_DIR is invalid or not
/// set" when a Vulkan instance is created in a session without that
/// directory (a server, a container, CI). The CLI looks for adapters on
/// every run, so it gives the drivers a private one instead of alarming the
/// user; a directory that is already set is left alone.
fn quiet_vulkan_loader() {
    #[cfg(target_os = "linux")]
    if std::env::var_os("XDG_RUNTIME_DIR").is_none() {
        use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
        let user = std::env::var("USER").unwrap_or_else(|_| "user".into());
        let dir = std::env::temp_dir().join(format!("dentate-runtime-{user}"));
        let _ = std::fs::DirBuilder::new().mode(0o700).create(&dir);
        let private = std::fs::metadata(&dir).is_ok_and(|m| m.is_dir() && m.permissions().mode() & 0o777 == 0o700);
        if private {
            // SAFETY: called first thing in `main`, before any thread exists,
            // so nothing reads the environment concurrently.
            unsafe { std::env::set_var("XDG_RUNTIME_DIR", &dir) };
        }
    }
}

/// Rust ignores SIGPIPE, so `println!` into a closed pipe (`dentate bench
/// … | head`) panics with "failed printing to stdout". A command-line tool
/// should end quietly there, as `cat` does: the default action is restored.
fn default_sigpipe() {
    #[cfg(unix)]
    // SAFETY: called first thing in `main`, before any other thread exists;
    // SIG_DFL is a valid disposition for SIGPIPE.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
}

fn main() -> ExitCode {
    default_sigpipe();
    quiet_vulkan_loader();
    // wgpu's HAL logs a missing Vulkan driver as errors while `auto` merely
    // looks for a GPU; RUST_LOG still turns it on.
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn,wgpu_hal=off")).init();
    let cli = Cli::parse();
    let choice = match cli.backend.as_deref() {
        Some(b) => dentate_gpu::BackendChoice::parse(b),
        None => dentate_gpu::BackendChoice::from_env(),
    };
    // The backend every index of this run uses (fetching a model needs none).
    if !matches!(cli.command, Command::Model(_) | Command::Keys(_) | Command::Store(_))
        && let Err(e) = choice.and_then(dentate_gpu::install_backend)
    {
        eprintln!("error: {e}");
        return ExitCode::from(2);
    }
    let result = match cli.command {
        Command::Quickstart(a) => {
            let t = std::time::Instant::now();
            commands::quickstart(&a)
                .and_then(|()| memcmd::quickstart_memory())
                .map(|()| {
                    println!("\ndone in {:.1} s", t.elapsed().as_secs_f64());
                })
        }
        Command::Bench(a) => bench::run(&a),
        Command::BenchReport(a) => report::run(&a),
        Command::Tune(a) => tune::run(&a),
        Command::Index(c) => commands::index(c),
        Command::Search(a) => commands::index(commands::IndexCommand::Search(a)),
        Command::Data(c) => commands::data(c),
        Command::Embed(a) => embedcmd::embed(&a),
        Command::Model(c) => embedcmd::model(c),
        Command::Memory(c) => memcmd::memory(c),
        Command::Eval(c) => memcmd::eval_cmd(c),
        Command::Serve(a) => servecmd::serve(&a),
        Command::Mcp(a) => servecmd::mcp(&a),
        Command::Keys(c) => servecmd::keys(c),
        Command::Store(c) => storecmd::store(c),
        Command::Info => {
            commands::info();
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("error: {e}");
            ExitCode::from(2)
        }
    }
}
