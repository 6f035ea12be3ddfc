//! The `dentate` command-line tool.

mod bench;
mod commands;
mod embedcmd;
mod evalplot;
mod memcmd;
mod report;
mod rustdocs;
mod tune;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

/// Dentate: vector retrieval engine for agent memory.
#[derive(Parser)]
#[command(name = "dentate", version, about, long_about = None)]
struct Cli {
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
    /// Agent memory: ingest conversations, ask, forget, correct.
    #[command(subcommand)]
    Memory(memcmd::MemoryCommand),
    /// Evaluate memory pipelines on benchmarks.
    #[command(subcommand)]
    Eval(memcmd::EvalCommand),
    /// Print the compute backends and SIMD paths of this machine.
    Info,
}

fn main() -> ExitCode {
    env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("warn")).init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Quickstart(a) => commands::quickstart(&a),
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
