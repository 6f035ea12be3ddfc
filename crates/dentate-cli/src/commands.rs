//! Subcommands other than `bench`, and helpers shared with it.

use crate::shared::{
    Coarse, EmbedderArgs, IndexSpec, Res, build_index, embed_all, load_truth, make_embedder, positive, read_lines,
    read_matrix, timed_best,
};
use clap::{Args, Subcommand};
use dentate_core::data::{Matrix, SynthConfig, clustered, recall_at_k, write_fvecs, write_ivecs};
use dentate_core::{
    AnyIndex, Hit, Index, Isa, IvfPqIndex, IvfSearchParams, LexicalIndex, PqCodes, Precision, StoreFormat,
    hybrid_search,
};
use dentate_memory::Retriever;
use std::path::PathBuf;
use std::time::Instant;

/// Arguments of `dentate quickstart`.
#[derive(Args, Debug)]
pub struct QuickstartArgs {
    /// Base vectors to generate.
    #[arg(long, default_value_t = 50_000)]
    pub n: usize,
    /// Dimension.
    #[arg(long, default_value_t = 128)]
    pub dim: usize,
    /// Queries (held out from the same distribution).
    #[arg(long, default_value_t = 1_000)]
    pub queries: usize,
    /// Seed of the synthetic data.
    #[arg(long, default_value_t = 7)]
    pub seed: u64,
    /// Where to save the index (a temporary directory when absent).
    #[arg(long)]
    pub save: Option<PathBuf>,
}

/// `dentate index …`
#[derive(Subcommand, Debug)]
pub enum IndexCommand {
    /// Build an index from a vector file (or a text file, one document per
    /// line, embedded) and optionally a BM25 index of the texts beside it;
    /// row numbers become ids.
    Build(BuildArgs),
    /// Search an index with a query file, or with a text (hybrid dense +
    /// BM25 by default); prints one JSON line per query.
    Search(SearchArgs),
    /// Describe an index file.
    Info {
        /// Index file.
        #[arg(long)]
        index: PathBuf,
    },
}

/// Arguments of `dentate index build`.
#[derive(Args, Debug)]
pub struct BuildArgs {
    /// Vectors (.fvecs or .npy); without it, --texts are embedded with
    /// --embedder.
    #[arg(long, required_unless_present = "texts")]
    pub input: Option<PathBuf>,
    /// Text file, one document per line (line n ↔ vector n): also build a
    /// BM25 index of it.
    #[arg(long)]
    pub texts: Option<PathBuf>,
    /// Where the BM25 index goes (default: the output with extension .lex).
    #[arg(long)]
    pub lexical: Option<PathBuf>,
    /// Index file to write.
    #[arg(long)]
    pub output: PathBuf,
    /// flat, ivfpq (8-bit codes), fastscan (flat 4-bit fast-scan) or
    /// ivffastscan (IVF + 4-bit fast-scan).
    #[arg(long, default_value = "ivfpq")]
    pub index: String,
    /// Inverted lists (ivfpq, ivffastscan).
    #[arg(long, default_value_t = 1024)]
    pub nlist: usize,
    /// PQ sub-quantizers: bytes per vector for ivfpq, half a byte each for
    /// the fast-scan kinds.
    #[arg(long, default_value_t = 16)]
    pub m: usize,
    /// Learn an OPQ rotation (ivfpq).
    #[arg(long)]
    pub opq: bool,
    /// OPQ outer iterations (default: the index kind's, 50 for ivfpq and
    /// 20 for the fast-scan kinds).
    #[arg(long)]
    pub opq_iterations: Option<usize>,
    /// f32 or f16 (flat vectors / ivfpq re-rank store).
    #[arg(long, default_value = "f16")]
    pub precision: String,
    /// The IVF kinds' re-rank store: f32, f16 or sq8 (8-bit scalar
    /// quantization; half of f16's bytes). Default: --precision.
    #[arg(long)]
    pub rerank_store: Option<String>,
    /// Keep no vectors for re-ranking (ivfpq, fast-scan; smallest index).
    #[arg(long)]
    pub no_rerank_store: bool,
    #[command(flatten)]
    pub embedder: EmbedderArgs,
}

/// Arguments of `dentate index search`.
#[derive(Args, Debug)]
pub struct SearchArgs {
    /// Index file.
    #[arg(long)]
    pub index: PathBuf,
    /// Queries (.fvecs or .npy).
    #[arg(long, required_unless_present = "text", conflicts_with = "text")]
    pub queries: Option<PathBuf>,
    /// A text query (repeatable): embedded with --embedder for the dense
    /// side, analysed for BM25 on the lexical side.
    #[arg(long)]
    pub text: Vec<String>,
    /// With --text: hybrid (default fusion), dense, bm25, rrf[:C] or
    /// weighted:W.
    #[arg(long, default_value = "hybrid")]
    pub retriever: String,
    /// The BM25 index (default: the index with extension .lex).
    #[arg(long)]
    pub lexical: Option<PathBuf>,
    /// Text file the index was built from: print each hit's line.
    #[arg(long)]
    pub texts: Option<PathBuf>,
    /// Neighbours per query.
    #[arg(long, default_value_t = 10)]
    pub k: usize,
    /// Lists probed (ivfpq; default: the index's).
    #[arg(long)]
    pub nprobe: Option<usize>,
    /// Re-rank factor (ivfpq; default: the index's).
    #[arg(long)]
    pub rerank: Option<usize>,
    #[command(flatten)]
    pub embedder: EmbedderArgs,
}

/// `dentate data …`
#[derive(Subcommand, Debug)]
pub enum DataCommand {
    /// Build the real-embedding benchmark set from the Rust documentation:
    /// ≥ 100,000 distinct English sentences, embedded, with exact top-100 truth.
    Rustdocs(crate::embedcmd::RustdocsArgs),
    /// Build a second real-embedding set, from the docstrings of Python's
    /// standard library: distinct English sentences, embedded, with exact
    /// top-100 truth.
    Pydocs(crate::embedcmd::PydocsArgs),
    /// Write a synthetic clustered set: base.fvecs, queries.fvecs, gt.ivecs (exact top-100).
    Synth {
        /// Output directory.
        #[arg(long)]
        out: PathBuf,
        /// Base vectors.
        #[arg(long, default_value_t = 100_000)]
        n: usize,
        /// Dimension.
        #[arg(long, default_value_t = 384)]
        dim: usize,
        /// Queries.
        #[arg(long, default_value_t = 1_000)]
        queries: usize,
        /// Gaussian clusters.
        #[arg(long, default_value_t = 1_000)]
        clusters: usize,
        /// Noise scale (higher = harder).
        #[arg(long, default_value_t = 0.8)]
        spread: f32,
        /// Seed.
        #[arg(long, default_value_t = 1)]
        seed: u64,
    },
}

/// The index half of `dentate quickstart` (`main` runs the memory half,
/// [`crate::memcmd::quickstart_memory`], after it).
pub(crate) fn quickstart(a: &QuickstartArgs) -> Res<()> {
    let dim = a.dim;
    println!(
        "Dentate quickstart: {} clustered {dim}-d vectors, {} held-out queries, cosine, k = 10",
        a.n, a.queries
    );
    println!(
        "SIMD path: {}, threads: {}\n",
        Isa::active().name(),
        rayon::current_num_threads()
    );
    positive(a.n, "n")?;
    positive(a.queries, "queries")?;
    let all = clustered(&SynthConfig {
        n: a.n.checked_add(a.queries).ok_or("--n + --queries overflows")?,
        dim,
        clusters: (a.n / 100).max(8),
        spread: 0.8,
        seed: a.seed,
    })?;
    let base = Matrix {
        data: all[..a.n * dim].to_vec(),
        rows: a.n,
        cols: dim,
    };
    let queries = Matrix {
        data: all[a.n * dim..].to_vec(),
        rows: a.queries,
        cols: dim,
    };
    let k = 10;
    let truth = load_truth(None, &base, &queries, k, true)?;
    println!(
        "{:<34} {:>9} {:>12} {:>10} {:>9}",
        "index", "recall@10", "QPS", "bytes/vec", "build s"
    );
    let report = |name: &str,
                  index: &dyn Index,
                  build: f64,
                  search: &dyn Fn() -> dentate_core::Result<Vec<Vec<Hit>>>|
     -> Res<()> {
        let (secs, res) = timed_best(search)?;
        println!(
            "{:<34} {:>9.4} {:>12.0} {:>10.1} {:>9.2}",
            name,
            recall_at_k(&res, &truth, k),
            queries.rows as f64 / secs,
            index.memory_bytes() as f64 / index.len() as f64,
            build
        );
        Ok(())
    };
    for prec in [Precision::F32, Precision::F16] {
        let spec = IndexSpec {
            kind: "flat".into(),
            nlist: 0,
            m: 0,
            opq: false,
            precision: prec,
            opq_iterations: None,
            coarse: Coarse::default(),
            rerank_store: false,
            store: prec.into(),
        };
        let (idx, build) = build_index(&spec, &base, true)?;
        let name = format!("exact ({})", if prec == Precision::F32 { "f32" } else { "f16" });
        report(&name, idx.as_index(), build, &|| {
            idx.as_index().search(&queries.data, k)
        })?;
    }
    let nlist = ((a.n as f64).sqrt() as usize).next_power_of_two().clamp(16, 4096);
    let m = [32, 16, 8, 4, 2, 1]
        .into_iter()
        .find(|m| dim.is_multiple_of(*m) && dim / m >= 4)
        .unwrap_or(1);
    let spec = IndexSpec {
        kind: "ivfpq".into(),
        nlist,
        m,
        opq: true,
        precision: Precision::F16,
        opq_iterations: Some(8),
        coarse: Coarse::default(),
        rerank_store: true,
        store: StoreFormat::F16,
    };
    let (idx, build) = build_index(&spec, &base, true)?;
    let AnyIndex::IvfPq(ivf) = &idx else {
        return Err("expected an IVF-PQ index".into());
    };
    for (nprobe, rerank) in [(4, 0), (16, 0), (4, 4), (16, 4), (32, 8)] {
        let name = format!("IVF{nlist}-OPQ{m}-PQ{m} np={nprobe} rr={rerank}");
        let p = IvfSearchParams { nprobe, rerank };
        report(&name, ivf, build, &|| ivf.search_with(&queries.data, k, p))?;
    }
    // Save, reload, and check the reloaded index answers identically.
    let tmp;
    let path = match &a.save {
        Some(p) => p.clone(),
        None => {
            tmp = std::env::temp_dir().join(format!("dentate-quickstart-{}", std::process::id()));
            std::fs::create_dir_all(&tmp)?;
            tmp.join("quickstart.dnt")
        }
    };
    ivf.save(&path)?;
    let size = std::fs::metadata(&path)?.len();
    let loaded = IvfPqIndex::load(&path)?;
    let p = IvfSearchParams { nprobe: 16, rerank: 4 };
    let same = ivf.search_with(&queries.data, k, p)? == loaded.search_with(&queries.data, k, p)?;
    println!(
        "\nsaved {} ({:.1} MB), reloaded: {} vectors, results {}",
        path.display(),
        size as f64 / 1e6,
        loaded.len(),
        if same { "identical" } else { "DIFFERENT" }
    );
    if a.save.is_none() {
        let _ = std::fs::remove_file(&path);
        let _ = path.parent().map(std::fs::remove_dir);
    }
    if !same {
        return Err("reloaded index returned different results".into());
    }
    Ok(())
}

fn build_cmd(a: &BuildArgs) -> Res<()> {
    let texts = a.texts.as_deref().map(read_lines).transpose()?;
    let base = match (&a.input, &texts) {
        (Some(p), _) => read_matrix(p)?,
        (None, Some(t)) => {
            let e = make_embedder(&a.embedder)?;
            let refs: Vec<&str> = t.iter().map(String::as_str).collect();
            let (data, rate) = embed_all(e.as_ref(), &refs, "embedding")?;
            eprintln!("embedded {} documents with {} at {rate:.1} texts/s", t.len(), e.name());
            Matrix {
                rows: t.len(),
                cols: e.dim(),
                data,
            }
        }
        (None, None) => return Err("give --input vectors or --texts".into()),
    };
    if let Some(t) = &texts
        && t.len() != base.rows
    {
        return Err(format!(
            "{} texts but {} vectors: line n must be the document of vector n",
            t.len(),
            base.rows
        )
        .into());
    }
    let precision: Precision = a.precision.parse()?;
    let spec = IndexSpec {
        kind: a.index.clone(),
        nlist: a.nlist,
        m: a.m,
        opq: a.opq,
        precision,
        opq_iterations: a.opq_iterations,
        coarse: Coarse::default(),
        rerank_store: !a.no_rerank_store,
        store: match &a.rerank_store {
            Some(s) => StoreFormat::parse(s)?,
            None => precision.into(),
        },
    };
    let (idx, secs) = build_index(&spec, &base, true)?;
    idx.as_index().save(&a.output)?;
    eprintln!(
        "built {} index of {} vectors in {secs:.2} s → {}",
        a.index,
        base.rows,
        a.output.display()
    );
    if let Some(t) = &texts {
        let t0 = Instant::now();
        let mut lex = LexicalIndex::new();
        let ids: Vec<u64> = (0..t.len() as u64).collect();
        let refs: Vec<&str> = t.iter().map(String::as_str).collect();
        lex.add(&ids, &refs)?;
        let path = a.lexical.clone().unwrap_or_else(|| a.output.with_extension("lex"));
        lex.save(&path)?;
        eprintln!(
            "built BM25 index of {} documents ({} terms) in {:.2} s → {}",
            lex.len(),
            lex.vocabulary_len(),
            t0.elapsed().as_secs_f64(),
            path.display()
        );
    }
    Ok(())
}

fn search_cmd(a: &SearchArgs) -> Res<()> {
    let idx = AnyIndex::load(&a.index)?;
    let params = match &idx {
        AnyIndex::IvfPq(ivf) => Some(IvfSearchParams {
            nprobe: a.nprobe.unwrap_or(ivf.config().nprobe),
            rerank: a.rerank.unwrap_or(ivf.config().rerank),
        }),
        AnyIndex::Flat(_) => None,
    };
    let dense = |q: &[f32], k: usize| -> Res<Vec<Vec<Hit>>> {
        Ok(match (&idx, params) {
            (AnyIndex::IvfPq(ivf), Some(p)) => ivf.search_with(q, k, p)?,
            _ => idx.as_index().search(q, k)?,
        })
    };
    let texts = a.texts.as_deref().map(read_lines).transpose()?;
    let print = |i: usize, hits: &[Hit]| {
        let ids: Vec<u64> = hits.iter().map(|h| h.id).collect();
        let scores: Vec<f32> = hits.iter().map(|h| h.score).collect();
        let mut v = serde_json::json!({"query": i, "ids": ids, "scores": scores});
        if let Some(t) = &texts {
            v["texts"] = hits
                .iter()
                .map(|h| usize::try_from(h.id).ok().and_then(|i| t.get(i)).cloned())
                .collect::<Vec<_>>()
                .into();
        }
        println!("{v}");
    };
    if let Some(qp) = &a.queries {
        let q = read_matrix(qp)?;
        for (i, hits) in dense(&q.data, a.k)?.iter().enumerate() {
            print(i, hits);
        }
        return Ok(());
    }
    let retriever = Retriever::parse_for(&a.retriever, &a.embedder.embedder)?;
    let lexical = match retriever {
        Retriever::Dense => None,
        _ => {
            let path = a.lexical.clone().unwrap_or_else(|| a.index.with_extension("lex"));
            if !path.exists() {
                return Err(format!(
                    "no BM25 index at {}: build one with `dentate index build --texts FILE`, or use --retriever dense",
                    path.display()
                )
                .into());
            }
            Some(LexicalIndex::load(&path)?)
        }
    };
    let embedder = match retriever {
        Retriever::Bm25 => None,
        _ => Some(make_embedder(&a.embedder)?),
    };
    for (i, text) in a.text.iter().enumerate() {
        let vector = match &embedder {
            Some(e) => {
                if e.dim() != idx.as_index().dim() {
                    return Err(format!(
                        "embedder {} gives {}-d vectors but the index holds {}-d ones: use the embedder it was built with",
                        e.name(),
                        e.dim(),
                        idx.as_index().dim()
                    )
                    .into());
                }
                e.embed(&[text.as_str()])?
            }
            None => Vec::new(),
        };
        let hits = match (retriever, &lexical) {
            (Retriever::Dense, _) => dense(&vector, a.k)?.remove(0),
            (Retriever::Bm25, Some(lex)) => lex.search(text, a.k)?,
            (Retriever::Hybrid(fusion), Some(lex)) => {
                hybrid_search(idx.as_index(), lex, &vector, text, a.k, fusion, None)?
            }
            (_, None) => return Err("no BM25 index loaded".into()),
        };
        print(i, &hits);
    }
    Ok(())
}

pub(crate) fn index(c: IndexCommand) -> Res<()> {
    match c {
        IndexCommand::Build(a) => build_cmd(&a),
        IndexCommand::Search(a) => search_cmd(&a),
        IndexCommand::Info { index } => {
            let bytes = std::fs::metadata(&index)?.len();
            let idx = AnyIndex::load(&index)?;
            let i = idx.as_index();
            println!("file:          {} ({bytes} bytes)", index.display());
            println!("kind:          {}", i.kind().name());
            println!("dimension:     {}", i.dim());
            println!("live vectors:  {}", i.len());
            println!(
                "memory:        {} bytes ({:.1} per vector)",
                i.memory_bytes(),
                i.memory_bytes() as f64 / i.len().max(1) as f64
            );
            println!("turn:          {}", i.turn());
            match &idx {
                AnyIndex::Flat(f) => {
                    println!("precision:     {:?}", f.precision());
                    println!(
                        "rows:          {} ({} tombstoned)",
                        f.total_rows(),
                        f.total_rows() - f.len()
                    );
                }
                AnyIndex::IvfPq(v) => {
                    let c = v.config();
                    let sizes = v.list_sizes();
                    let nonempty = sizes.iter().filter(|&&s| s > 0).count();
                    println!(
                        "nlist:         {} ({nonempty} non-empty, largest {})",
                        c.nlist,
                        sizes.iter().max().unwrap_or(&0)
                    );
                    match c.codes {
                        PqCodes::Pq8 => println!("m:             {} (8-bit codes, {} bytes per vector)", c.m, c.m),
                        PqCodes::FastScan4 => println!(
                            "m:             {} (4-bit fast-scan codes, {} bytes per vector in blocks of 32)",
                            c.m,
                            dentate_core::fastscan::block_bytes(c.m) / 32
                        ),
                    }
                    println!("opq:           {}", c.opq);
                    println!("re-rank store: {:?}", c.rerank_store);
                    println!("defaults:      nprobe {}, rerank {}", c.nprobe, c.rerank);
                }
            }
            Ok(())
        }
    }
}

pub(crate) fn data(c: DataCommand) -> Res<()> {
    match c {
        DataCommand::Rustdocs(a) => crate::embedcmd::rustdocs(&a),
        DataCommand::Pydocs(a) => crate::embedcmd::pydocs(&a),
        DataCommand::Synth {
            out,
            n,
            dim,
            queries,
            clusters,
            spread,
            seed,
        } => {
            positive(n, "n")?;
            positive(queries, "queries")?;
            positive(clusters, "clusters")?;
            let cfg = SynthConfig {
                n: n.checked_add(queries).ok_or("--n + --queries overflows")?,
                dim,
                clusters,
                spread,
                seed,
            };
            // Refuse a bad configuration before creating anything.
            cfg.check()?;
            std::fs::create_dir_all(&out)?;
            let all = clustered(&cfg)?;
            let (b, q) = all.split_at(n * dim);
            write_fvecs(&out.join("base.fvecs"), b, dim)?;
            write_fvecs(&out.join("queries.fvecs"), q, dim)?;
            let base = Matrix {
                data: b.to_vec(),
                rows: n,
                cols: dim,
            };
            let qm = Matrix {
                data: q.to_vec(),
                rows: queries,
                cols: dim,
            };
            let gk = 100.min(n);
            let truth = load_truth(None, &base, &qm, gk, true)?;
            let flat: Vec<i32> = truth.iter().flat_map(|r| r.iter().map(|&x| x as i32)).collect();
            write_ivecs(&out.join("gt.ivecs"), &flat, gk)?;
            eprintln!(
                "wrote {}/{{base.fvecs, queries.fvecs, gt.ivecs}}: {n} × {dim}, {queries} queries, top-{gk} truth",
                out.display()
            );
            Ok(())
        }
    }
}

pub(crate) fn info() {
    println!("dentate {}", env!("CARGO_PKG_VERSION"));
    let avail: Vec<&str> = Isa::available().iter().map(|i| i.name()).collect();
    println!("SIMD paths available: {}", avail.join(", "));
    println!(
        "SIMD path in use:     {} (override with DENTATE_SIMD)",
        Isa::active().name()
    );
    println!(
        "compute backend:      {} (choose with --backend or DENTATE_BACKEND=auto|cpu|gpu)",
        dentate_core::default_compute().name()
    );
    let adapters = dentate_gpu::adapters();
    if adapters.is_empty() {
        println!("GPU adapters:         none (Linux: install a Vulkan driver, e.g. mesa-vulkan-drivers)");
    }
    for (i, a) in adapters.iter().enumerate() {
        println!(
            "GPU adapter {i}:        {} [{} {}{}] driver {}",
            a.name,
            a.backend,
            a.device_type,
            match (a.hardware, dentate_gpu::hardware_required()) {
                (true, _) => "",
                (false, false) => ", used only when forced",
                (false, true) => ", refused: DENTATE_GPU_REQUIRE=hardware",
            },
            if a.driver.is_empty() { "-" } else { &a.driver }
        );
        println!(
            "                      max storage binding {} MiB, workgroup memory {} KiB, {} invocations, SHADER_F16 {}, pipeline cache {}",
            a.max_storage_binding >> 20,
            a.max_workgroup_storage >> 10,
            a.max_invocations,
            if a.shader_f16 { "yes" } else { "no" },
            if a.pipeline_cache { "yes" } else { "no" }
        );
    }
    let kept = dentate_gpu::pipeline_cache_dir().map_or_else(
        || "off (DENTATE_GPU_PIPELINE_CACHE=off)".to_string(),
        |d| format!("{} (Vulkan adapters; DENTATE_GPU_PIPELINE_CACHE)", d.display()),
    );
    println!("GPU pipeline cache:   {kept}");
    println!("threads:              {}", rayon::current_num_threads());
    println!("cache:                {}", dentate_embed::cache_dir().display());
    println!(
        "MiniLM folder:        {}",
        dentate_embed::MiniLm::default_dir().display()
    );
}
