//! `dentate memory …` and `dentate eval locomo`, and the memory part of
//! `dentate quickstart`.

use crate::shared::{EmbedderArgs, Res, make_embedder, parse_list};
use clap::{Args, Subcommand};
use dentate_memory::eval::{self, EvalOptions};
use dentate_memory::{
    ChatConfig, Llm, Memory, NewMessage, OpenAiChat, PipelineKind, Retrieved, Retriever, input, locomo,
};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::{Path, PathBuf};
use std::sync::Arc;

/// A language model behind an OpenAI-compatible endpoint (optional: without
/// it everything runs offline).
#[derive(Args, Debug, Clone)]
pub struct LlmArgs {
    /// Base URL of an OpenAI-compatible server, e.g. http://127.0.0.1:8080/v1.
    #[arg(long = "llm")]
    pub url: Option<String>,
    /// Model name (required with --llm).
    #[arg(long)]
    pub model: Option<String>,
    /// Environment variable holding the API key.
    #[arg(long, default_value = "OPENAI_API_KEY")]
    pub llm_key_env: String,
    /// Sampling seed sent with every request (for servers that sample
    /// reproducibly with one).
    #[arg(long)]
    pub llm_seed: Option<u64>,
    /// Most completion tokens per call.
    #[arg(long, default_value_t = 1024)]
    pub llm_max_tokens: u32,
    /// Seconds before a call times out (then retried, 4 times).
    #[arg(long, default_value_t = 120.0)]
    pub llm_timeout: f64,
    /// Ask for plain JSON only, never with the answer's JSON Schema (by
    /// default the schema is sent, and a server that refuses it is asked
    /// for plain JSON from then on).
    #[arg(long)]
    pub no_structured_outputs: bool,
}

impl LlmArgs {
    fn build(&self) -> Res<Option<Arc<dyn Llm>>> {
        match (&self.url, &self.model) {
            (None, None) => Ok(None),
            (Some(url), Some(model)) => {
                let mut cfg = ChatConfig::new(url, model);
                cfg.api_key_env = self.llm_key_env.clone();
                cfg.seed = self.llm_seed;
                if self.llm_max_tokens == 0 {
                    return Err("--llm-max-tokens must be at least 1".into());
                }
                cfg.max_tokens = self.llm_max_tokens;
                if !(self.llm_timeout.is_finite() && self.llm_timeout > 0.0 && self.llm_timeout <= 86_400.0) {
                    return Err("--llm-timeout must be a number of seconds in (0, 86400]".into());
                }
                cfg.retry.timeout = std::time::Duration::from_secs_f64(self.llm_timeout);
                cfg.structured_outputs = !self.no_structured_outputs;
                Ok(Some(Arc::new(OpenAiChat::new(cfg)?)))
            }
            _ => Err("--llm URL and --model NAME go together".into()),
        }
    }
}

/// Where a memory lives and which pipeline runs it.
#[derive(Args, Debug, Clone)]
pub struct MemoryArgs {
    /// Memory directory (SQLite store and index files; with --store, the
    /// index caches only).
    #[arg(long)]
    pub dir: PathBuf,
    /// Where the store lives when not in --dir: a postgres:// URL (or
    /// sqlite:DIR).
    #[arg(long, env = "DENTATE_STORE")]
    pub store: Option<String>,
    /// User namespace.
    #[arg(long)]
    pub user: String,
    /// Pipeline: hema, rag, nemori, amory (amory-rapid and amory-none are
    /// Amory's consolidation ablations) or premem.
    #[arg(long, default_value = "hema")]
    pub pipeline: String,
    /// RAG, HEMA and Nemori: append the resolution of relative dates
    /// ("yesterday = 7 May 2023") to their items (PREMem always resolves
    /// them).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "true|false")]
    pub resolve_dates: bool,
    /// Retriever: hybrid (dense + BM25, fused), dense, bm25, rrf[:C] or weighted:W.
    #[arg(long, default_value = "hybrid")]
    pub retriever: String,
    #[command(flatten)]
    pub embedder: EmbedderArgs,
    #[command(flatten)]
    pub llm: LlmArgs,
}

impl MemoryArgs {
    /// Where the store is, for messages.
    fn place(&self) -> String {
        match self.store.as_deref().map(dentate_memory::StoreLocation::parse) {
            Some(Ok(loc)) => loc.to_string(),
            _ => self.dir.display().to_string(),
        }
    }

    fn open(&self) -> Res<Memory> {
        Ok(self.open_with_llm()?.0)
    }

    fn open_with_llm(&self) -> Res<(Memory, Option<Arc<dyn Llm>>)> {
        let e: Arc<dyn dentate_embed::Embedder> = Arc::from(make_embedder(&self.embedder)?);
        let llm = self.llm.build()?;
        let kind = PipelineKind::parse(&self.pipeline)?.resolve_dates(self.resolve_dates);
        let retriever = Retriever::parse_for(&self.retriever, &e.name())?;
        let mut mem = match &self.store {
            None => Memory::open(&self.dir, kind, e, llm.clone())?,
            Some(s) => {
                let store = dentate_memory::StoreLocation::parse(s)?.open(Some(&self.dir))?;
                Memory::with_store(store, kind, e, llm.clone())
            }
        };
        mem.set_retriever(retriever);
        Ok((mem, llm))
    }
}

/// `dentate memory …`
#[derive(Subcommand, Debug)]
pub enum MemoryCommand {
    /// Store a conversation (LoCoMo JSON or JSONL messages) and process it.
    Ingest {
        #[command(flatten)]
        m: MemoryArgs,
        /// Conversation file. Without it, only the stored messages not yet
        /// processed are processed (resuming after a crash or a model
        /// failure).
        #[arg(long)]
        input: Option<PathBuf>,
        /// LoCoMo sample to ingest, when the file holds several.
        #[arg(long)]
        sample: Option<String>,
        /// Leave the conversation open: more messages will follow (Nemori
        /// keeps its last episode open, PREMem its last session, instead of
        /// closing it at the end).
        #[arg(long)]
        keep_open: bool,
        /// With --llm: write the model's counters (per role: calls, JSON
        /// answers valid / repaired / invalid, tokens, latency; calls and
        /// tokens per 100 messages) to this file as JSON.
        #[arg(long)]
        llm_stats: Option<PathBuf>,
    },
    /// Retrieve memories for a question and print the composed context;
    /// with --llm, the model answers from it too.
    Ask {
        #[command(flatten)]
        m: MemoryArgs,
        /// Items to retrieve (RAG; HEMA uses its K, default 5).
        #[arg(long, default_value_t = 5)]
        k: usize,
        /// Prompt budget in tokens.
        #[arg(long, default_value_t = 3500)]
        budget: usize,
        /// The question.
        question: String,
    },
    /// Print what the memory holds: Amory's narrative tree (stories,
    /// sub-plots, fragments) and semantic triples; the items of the other
    /// pipelines.
    Show {
        #[command(flatten)]
        m: MemoryArgs,
    },
    /// Delete a memory item by id.
    Forget {
        #[command(flatten)]
        m: MemoryArgs,
        /// Item id (as printed by `ask`).
        #[arg(long)]
        id: i64,
    },
    /// Replace the text of a memory item, keeping its id and provenance.
    Correct {
        #[command(flatten)]
        m: MemoryArgs,
        /// Item id.
        #[arg(long)]
        id: i64,
        /// The corrected text.
        #[arg(long)]
        text: String,
    },
}

/// Reads a conversation file: LoCoMo JSON (one sample, or `sample` of
/// several) or JSONL messages.
fn read_conversation(path: &Path, sample: Option<&str>) -> Res<Vec<NewMessage>> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let head = text.trim_start();
    let looks_locomo = (head.starts_with('[') || head.starts_with('{')) && text.contains("\"conversation\"");
    if !looks_locomo {
        return Ok(input::parse_jsonl(&text)?);
    }
    let ds = locomo::parse(&text)?;
    let ids: Vec<&str> = ds.conversations.iter().map(|c| c.sample_id.as_str()).collect();
    let conv = match sample {
        Some(s) => ds
            .conversations
            .iter()
            .find(|c| c.sample_id == s)
            .ok_or_else(|| format!("no sample `{s}` in {} (samples: {})", path.display(), ids.join(", ")))?,
        None if ds.conversations.len() == 1 => &ds.conversations[0],
        None => {
            return Err(format!(
                "{} holds {} samples; choose one with --sample ({})",
                path.display(),
                ids.len(),
                ids.join(", ")
            )
            .into());
        }
    };
    Ok(eval::conversation_messages(conv))
}

fn print_hit(h: &Retrieved) {
    let date = h
        .item
        .said_at
        .map(|t| format!(" {}", dentate_memory::time::date_string(t)))
        .unwrap_or_default();
    println!(
        "  #{:<6} {:.3} {}{date} from {}: {}",
        h.item.id,
        h.score,
        h.item.kind,
        h.source_refs.join(","),
        h.item.text
    );
}

pub fn memory(c: MemoryCommand) -> Res<()> {
    match c {
        MemoryCommand::Ingest {
            m,
            input,
            sample,
            keep_open,
            llm_stats,
        } => {
            let msgs = match &input {
                Some(input) => read_conversation(input, sample.as_deref())?,
                None => Vec::new(),
            };
            let (mut mem, llm) = m.open_with_llm()?;
            if input.is_some() {
                let ids = mem.add_messages(&m.user, &msgs)?;
                let known = msgs.len().saturating_sub(ids.len());
                let skipped = if known > 0 {
                    format!(" ({known} already stored, skipped)")
                } else {
                    String::new()
                };
                eprintln!(
                    "stored {} messages for `{}` in {}{skipped}",
                    ids.len(),
                    m.user,
                    m.place()
                );
            } else if mem.store().message_count(&m.user)? == 0 {
                return Err(format!(
                    "no messages stored for user `{}` in {}; give --input",
                    m.user,
                    m.place()
                )
                .into());
            }
            let pb = ProgressBar::new(msgs.len() as u64);
            pb.set_style(
                ProgressStyle::with_template("{msg} {bar:40} {pos}/{len} [{elapsed}]")
                    .unwrap_or_else(|_| ProgressStyle::default_bar()),
            );
            pb.set_message(format!("{} processing", mem.pipeline_name()));
            let t0 = std::time::Instant::now();
            let r = mem.process(&m.user, &mut |done, total| {
                pb.set_length(total as u64);
                pb.set_position(done as u64);
            });
            let r = r.and_then(|mut r| {
                if !keep_open {
                    let f = mem.flush(&m.user)?;
                    // PREMem processes its last session only now.
                    r.messages += f.messages;
                    if f.items > 0 {
                        r.items += f.items;
                        r.live = f.live;
                    }
                }
                Ok(r)
            });
            pb.finish_and_clear();
            let r =
                r.map_err(|e| format!("{e}\nthe messages are stored; run the same command without --input to resume"))?;
            println!(
                "{}: processed {} messages in {:.2} s: {} items made, {} forgotten, {} live",
                mem.pipeline_name(),
                r.messages,
                t0.elapsed().as_secs_f64(),
                r.items,
                r.forgotten,
                r.live
            );
            if let Some(l) = llm {
                let st = l.stats();
                eprintln!("model: {}", st.report());
                eprintln!("{}", st.role_table(r.messages, 100));
                if let Some(p) = &llm_stats {
                    let text = serde_json::to_string_pretty(&st.to_json(r.messages))? + "\n";
                    std::fs::write(p, text).map_err(|e| format!("{}: {e}", p.display()))?;
                }
            }
            Ok(())
        }
        MemoryCommand::Ask { m, k, budget, question } => {
            let (mut mem, llm) = m.open_with_llm()?;
            if mem.store().message_count(&m.user)? == 0 {
                return Err(format!("no messages stored for user `{}` in {}", m.user, m.place()).into());
            }
            let hits = mem.retrieve(&m.user, &question, k)?;
            println!(
                "retrieved ({} pipeline, {} retriever):",
                mem.pipeline_name(),
                mem.retriever().name()
            );
            for h in &hits {
                print_hit(h);
            }
            let c = mem.compose(&m.user, &question, budget)?;
            println!(
                "\ncomposed context ({} tokens, {} items trimmed):\n{}",
                c.tokens, c.trimmed, c.prompt
            );
            // With a model: its answer from the composed context (the
            // prompt `dentate eval locomo --llm` judges).
            if let Some(l) = llm {
                let answer = eval::generate_answer(l.as_ref(), &c.prompt, &question)?;
                println!("\nanswer ({}): {answer}", l.name());
                let st = l.stats();
                eprintln!("model: {}", st.report());
                eprintln!("{}", st.role_table(0, 0));
            }
            Ok(())
        }
        MemoryCommand::Show { m } => {
            let mut mem = m.open()?;
            if mem.store().message_count(&m.user)? == 0 {
                return Err(format!("no messages stored for user `{}` in {}", m.user, m.place()).into());
            }
            print!("{}", mem.show(&m.user)?);
            Ok(())
        }
        MemoryCommand::Forget { m, id } => {
            m.open()?.forget(&m.user, id)?;
            println!("forgot item {id} of `{}`", m.user);
            Ok(())
        }
        MemoryCommand::Correct { m, id, text } => {
            m.open()?.correct(&m.user, id, &text)?;
            println!("corrected item {id} of `{}`", m.user);
            Ok(())
        }
    }
}

/// `dentate eval …`
#[derive(Subcommand, Debug)]
pub enum EvalCommand {
    /// Evidence recall, full coverage and answer recall per LoCoMo
    /// category, at numbers of items and at budgets of context tokens, for
    /// every pipeline × retriever in one run (LLM-free); with --llm,
    /// answers judged by the model too.
    Locomo(LocomoArgs),
}

/// Arguments of `dentate eval locomo`.
#[derive(Args, Debug)]
pub struct LocomoArgs {
    /// LoCoMo JSON file.
    #[arg(long)]
    pub data: PathBuf,
    /// Which conversations to run on: `tune` (conv-26, conv-30: where
    /// defaults are chosen), `report` (conv-41, conv-42: held out) or
    /// `all` (in-sample when it holds a tuning conversation). The output
    /// says which it ran on.
    #[arg(long, default_value = "all", conflicts_with = "conversations")]
    pub split: String,
    /// Run on these sample ids instead, comma-separated (e.g.
    /// conv-41,conv-42).
    #[arg(long)]
    pub conversations: Option<String>,
    /// Pipelines to compare, comma-separated: rag, hema, nemori, amory
    /// (amory-rapid, amory-none), premem.
    #[arg(long, default_value = "rag")]
    pub pipeline: String,
    /// RAG, HEMA and Nemori: append the resolution of relative dates to
    /// their items (`false` reproduces the numbers measured before it
    /// existed).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, value_name = "true|false")]
    pub resolve_dates: bool,
    /// Change settings to re-check a default, comma-separated `key=value`
    /// pairs: amory.headline, amory.bind, amory.continuity, amory.split,
    /// nemori.sigma_s, premem.continuation (each applies to its own
    /// pipeline); context.session, context.neighbour, context.speaker,
    /// context.temporal, context.diversity, context.expand, context.pool,
    /// context.snippets, context.feedback (how the context is found, ranked
    /// and packed, every pipeline, on top of the default context; feedback
    /// `off` or DOCS:TERMS:WEIGHT).
    #[arg(long)]
    pub set: Option<String>,
    /// Cut the ranked items at these numbers of items, comma-separated
    /// (default 5,10,20 when no --budget is given).
    #[arg(long)]
    pub k: Option<String>,
    /// Cut them at these budgets of context tokens (o200k_base), packing
    /// items in rank order as the pipeline's prompt renders them,
    /// comma-separated, e.g. 500,1000,1500,2000,3500.
    #[arg(long)]
    pub budget: Option<String>,
    /// Retrievers to compare, comma-separated: dense, bm25, hybrid,
    /// rrf[:C], weighted:W.
    #[arg(long, default_value = "dense")]
    pub retriever: String,
    /// Print JSON instead of Markdown.
    #[arg(long)]
    pub json: bool,
    /// Also write eval.json, eval.md (tables for BENCHMARKS.md) and
    /// eval.svg (recall against budget) into this directory.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Working directory for the per-conversation memories (default: a
    /// temporary one, removed afterwards).
    #[arg(long)]
    pub workdir: Option<PathBuf>,
    /// Prompt budget for generated answers (with --llm).
    #[arg(long, default_value_t = 3500)]
    pub answer_budget: usize,
    /// Also run each pipeline's own model roles (HEMA's summaries, Nemori's
    /// boundaries, episodes and predict–calibrate, Amory's binding,
    /// consolidation, semanticization and coherence retrieval, PREMem's
    /// extraction and reasoning), not only answer and judge.
    #[arg(long)]
    pub llm_pipeline: bool,
    #[command(flatten)]
    pub embedder: EmbedderArgs,
    #[command(flatten)]
    pub llm: LlmArgs,
}

pub fn eval_cmd(c: EvalCommand) -> Res<()> {
    let EvalCommand::Locomo(a) = c;
    let split = match &a.conversations {
        Some(ids) => locomo::Split::Conversations(names(ids).map(str::to_string).collect()),
        None => locomo::Split::parse(&a.split)?,
    };
    let ds = locomo::load(&a.data)?.select(&split)?;
    let budgets = match &a.budget {
        Some(b) => parse_list(b, "budget")?,
        None => Vec::new(),
    };
    let ks = match (&a.k, budgets.is_empty()) {
        (Some(k), _) => parse_list(k, "k")?,
        (None, true) => vec![5, 10, 20],
        (None, false) => Vec::new(),
    };
    let embedder: Arc<dyn dentate_embed::Embedder> = Arc::from(make_embedder(&a.embedder)?);
    let llm = a.llm.build()?;
    let retrievers = names(&a.retriever)
        .map(|r| Retriever::parse_for(r, &embedder.name()))
        .collect::<Result<Vec<_>, _>>()?;
    let settings: Vec<(&str, &str)> = match &a.set {
        Some(s) => names(s)
            .map(|kv| {
                kv.split_once('=')
                    .ok_or_else(|| format!("--set: `{kv}` is not key=value"))
            })
            .collect::<Result<_, _>>()?,
        None => Vec::new(),
    };
    let (context_settings, settings): (Vec<_>, Vec<_>) = settings
        .into_iter()
        .partition(|(k, _)| dentate_memory::pipeline::CONTEXT_KEYS.contains(&k.trim()));
    // Settings of the context apply to every pipeline, on top of the
    // default; without any, each pipeline keeps its own default.
    let context = if context_settings.is_empty() {
        None
    } else {
        let mut c = dentate_memory::ContextConfig::default();
        for (key, value) in &context_settings {
            c.set(key.trim(), value)?;
        }
        Some(c)
    };
    let pipelines = names(&a.pipeline)
        .map(|n| {
            let mut k = PipelineKind::parse(n)?.resolve_dates(a.resolve_dates);
            for (key, value) in &settings {
                k = k.set(key.trim(), value)?;
            }
            Ok(k)
        })
        .collect::<Result<Vec<_>, dentate_memory::MemoryError>>()?;
    if let Some(out) = &a.out {
        std::fs::create_dir_all(out).map_err(|e| format!("--out {}: {e}", out.display()))?;
    }
    let tmp;
    let workdir = match &a.workdir {
        Some(d) => d.clone(),
        None => {
            tmp = TempDir::new()?;
            tmp.0.clone()
        }
    };
    let opts = EvalOptions {
        pipelines,
        retrievers,
        ks,
        budgets,
        embedder: embedder.clone(),
        pipeline_llm: llm.clone().filter(|_| a.llm_pipeline),
        judge_llm: llm.clone(),
        answer_budget: a.answer_budget,
        context,
    };
    let out = eval::run(&ds, &opts, &workdir, &mut |m| eprintln!("{m}"))?;
    eprintln!("{}", out.split_line());
    let mut json = out.to_json();
    json["data"] = a.data.display().to_string().into();
    if let Some(l) = &llm {
        json["llm_stats"] = l.stats().to_json(0);
    }
    let markdown = out.to_markdown();
    if a.json {
        println!("{}", serde_json::to_string_pretty(&json)?);
    } else {
        println!("{markdown}");
        if let Some(l) = &llm {
            let st = l.stats();
            println!("model: {}", st.report());
            println!("{}", st.role_table(0, 0));
        }
    }
    if let Some(dir) = &a.out {
        let write = |name: &str, text: &str| -> Res<()> {
            let p = dir.join(name);
            std::fs::write(&p, text).map_err(|e| format!("{}: {e}", p.display()))?;
            eprintln!("wrote {}", p.display());
            Ok(())
        };
        write("eval.json", &(serde_json::to_string_pretty(&json)? + "\n"))?;
        write("eval.md", &markdown)?;
        write("eval.svg", &crate::evalplot::svg(&out)?)?;
    }
    Ok(())
}

/// The non-empty, trimmed names of a comma-separated list.
fn names(list: &str) -> impl Iterator<Item = &str> {
    list.split(',').map(str::trim).filter(|x| !x.is_empty())
}

/// A directory under the system temp folder, removed on drop.
struct TempDir(PathBuf);

impl TempDir {
    fn new() -> Res<Self> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let p = std::env::temp_dir().join(format!("dentate-{}-{nanos}", std::process::id()));
        std::fs::create_dir_all(&p)?;
        Ok(TempDir(p))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The built-in conversation of the quickstart: two friends over three
/// sessions, with facts to recall later.
const DEMO: &[(u32, &str, &str)] = &[
    (
        1,
        "Maya",
        "I finally signed the lease on a flat in Porto, I move in on the first of June.",
    ),
    (
        1,
        "Leo",
        "That is huge! Is it the one near the river with the yellow tiles?",
    ),
    (
        1,
        "Maya",
        "Yes, third floor, tiny balcony, and the landlord allows cats.",
    ),
    (
        1,
        "Leo",
        "Speaking of cats, my cat Biscuit knocked my coffee onto the keyboard again.",
    ),
    (
        1,
        "Maya",
        "Poor keyboard. Did you get the new job offer from the bakery supply company?",
    ),
    (
        1,
        "Leo",
        "Not yet, the second interview is next Thursday with their head of logistics.",
    ),
    (
        1,
        "Maya",
        "I am also starting Portuguese lessons twice a week with a tutor called Ines.",
    ),
    (1, "Leo", "Good luck with the verbs, they look brutal."),
    (2, "Leo", "Update: I got the logistics job, I start in three weeks."),
    (
        2,
        "Maya",
        "Congratulations! We should celebrate at that ramen place on Cedar Street.",
    ),
    (
        2,
        "Leo",
        "Deal. Biscuit is on a diet now, the vet says he is two kilos too heavy.",
    ),
    (
        2,
        "Maya",
        "My tutor Ines says my pronunciation improved a lot, but my grammar is still weak.",
    ),
    (
        2,
        "Leo",
        "I am training for a half marathon in October, running three times a week.",
    ),
    (
        2,
        "Maya",
        "I can join you for the Sunday runs once I have moved to Porto.",
    ),
    (
        3,
        "Maya",
        "The move went fine, but the movers broke the leg of my grandmother's oak table.",
    ),
    (
        3,
        "Leo",
        "Oh no. There is a furniture restorer near my office who fixed my chair.",
    ),
    (
        3,
        "Maya",
        "Please send me the restorer's number, the table matters a lot to me.",
    ),
    (3, "Leo", "Sure. Also, Biscuit lost half a kilo, the diet is working."),
    (3, "Maya", "I adopted a kitten from the shelter, her name is Pimenta."),
    (3, "Leo", "Pimenta and Biscuit should meet one day."),
];

const DEMO_QUESTIONS: &[&str] = &[
    "Which city did Maya move to, and when?",
    "What is the name of Leo's cat and what did the vet say?",
    "What broke during Maya's move?",
];

/// Ingests the built-in conversation into a temporary HEMA memory
/// (hashing embedder, extractive summarizer: offline) and answers three
/// questions from it, showing the retrieved memories.
pub fn quickstart_memory() -> Res<()> {
    let dir = TempDir::new()?;
    let embedder: Arc<dyn dentate_embed::Embedder> = Arc::new(dentate_embed::HashingEmbedder::new(384)?);
    let mut mem = Memory::open(&dir.0, PipelineKind::parse("hema")?, embedder, None)?;
    let msgs: Vec<NewMessage> = DEMO
        .iter()
        .enumerate()
        .map(|(i, &(s, who, text))| NewMessage {
            session: format!("session_{s}"),
            speaker: who.into(),
            text: text.into(),
            // Sessions a week apart from 1 May 2025, a minute per turn.
            said_at: Some(1_746_057_600 + i64::from(s - 1) * 7 * 86_400 + i as i64 * 60),
            source_ref: Some(format!("S{s}#{}", i + 1)),
        })
        .collect();
    let t0 = std::time::Instant::now();
    let r = mem.ingest("demo", &msgs)?;
    println!(
        "\nMemory: HEMA over a built-in {}-turn conversation (hashing embedder, hybrid dense + BM25 retrieval, extractive summaries, offline): \
         {} items in {:.0} ms",
        msgs.len(),
        r.items,
        t0.elapsed().as_secs_f64() * 1e3
    );
    let compact = mem.store().state("demo", "hema", "compact")?.unwrap_or_default();
    println!("compact memory: {compact}");
    for q in DEMO_QUESTIONS {
        let t = std::time::Instant::now();
        let hits = mem.retrieve("demo", q, 3)?;
        let us = t.elapsed().as_micros();
        println!("\nQ: {q}   ({us} µs)");
        for h in &hits {
            print_hit(h);
        }
    }
    let c = mem.compose("demo", DEMO_QUESTIONS[0], 3500)?;
    println!("\nprompt for the first question: {} tokens (budget 3,500)", c.tokens);
    Ok(())
}
