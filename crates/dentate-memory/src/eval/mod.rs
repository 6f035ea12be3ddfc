//! LoCoMo evaluation of memory pipelines at a number of items or a budget
//! of context tokens.
//!
//! Every combination of pipeline × retriever runs on the same data and
//! embedder in one process: each conversation is ingested once per pipeline
//! into a fresh memory, then every question is retrieved once per retriever
//! and cut. At `k` items the cut is exactly what [`Memory::retrieve`]`(k)`
//! returns to a user (a fused ranking depends on how deep it is retrieved,
//! so the top `k` of a deeper list is not it). At a budget the question is
//! retrieved deep enough to fill the largest budget and the ranked items
//! are packed ([`crate::Packer`]) exactly as the pipeline's prompt holds
//! them — its standing context (HEMA: the compact summary) first, then each
//! item rendered with its date. Each cut is scored for evidence recall
//! through provenance (summary, story, sub-plot and reasoning items, which
//! cite their messages without quoting them, cover none:
//! [`CITES_WITHOUT_QUOTING`]) and for answer recall: the gold answer's
//! content words present in what the packed items say
//! ([`crate::Sayer`]: text and derived date resolutions, not the date
//! headers of the rendering), with the older figure over the rendered
//! text kept beside it; see [`metrics`]. Model calls a pipeline
//! makes at query time (Amory's coherence retrieval) are counted as the
//! run's query cost. With a model, answers are also generated from the
//! composed prompt and judged with the LLM-as-judge prompt of Amory,
//! appendix A.1; an adversarial (category 5) question is judged correct
//! when the answer says the conversations do not hold the information
//! ([`judge_gold`]).
//!
//! With budgets and no pipeline model, every question is also retrieved
//! [`metrics::DIAGNOSTIC_DEPTH`] deep so that
//! each cut's misses are broken down by cause ([`metrics::Misses`]: not
//! retrieved at that depth, retrieved but not packed, packed but the
//! answer words absent).
//!
//! The run says which conversations it covered and whether its figures are
//! in-sample ([`locomo::Split`]).
//!
//! This module sits above the pipelines: it holds the LoCoMo reader
//! ([`locomo`]), the metrics ([`metrics`]) and the evaluation that runs
//! pipelines on the one and scores them with the other; no pipeline
//! imports from here.

pub mod locomo;
pub mod metrics;

use crate::error::{MemoryError, Result};
use crate::llm::{Call, ChatMessage, Llm, ask_json, schema};
use crate::memory::{Memory, PipelineKind};
use crate::pipeline::Cut;
use crate::pipeline::{ContextConfig, Packer, Retrieved, Retriever, Sayer};
use crate::store::NewMessage;
use crate::text::{content_words, words};
use dentate_embed::Embedder;
use locomo::{Conversation, Dataset, Qa, SkipReport, category_name, in_sample, split_name};
use metrics::{CutResult, DIAGNOSTIC_DEPTH, EvalReport, QuestionResult, aggregate, answer_recall, fmt_opt};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use web_time::Instant;

/// The LLM-as-judge prompt (Amory, appendix A.1, verbatim), with
/// `{question}`, `{gold_answer}` and `{generated_answer}` placeholders.
pub const JUDGE_PROMPT: &str = include_str!("../prompts/judge.txt");
/// The answer-generation prompt (Amory, appendix A.1, verbatim), with
/// `{full_stories}`, `{add_trivas}` and `{question}` placeholders.
pub const ANSWER_PROMPT: &str = include_str!("../prompts/qa.txt");

/// Item kinds that cite their source messages without quoting them (HEMA's
/// block summaries, Amory's story and sub-plot headlines, PREMem's reasoning
/// fragments): they cover no evidence.
pub const CITES_WITHOUT_QUOTING: &[&str] = &[
    "summary",
    crate::amory::NARRATIVE,
    crate::amory::SUBPLOT,
    crate::premem::REASONING,
];

/// Settings of an evaluation run.
#[derive(Clone)]
pub struct EvalOptions {
    /// The pipelines to evaluate.
    pub pipelines: Vec<PipelineKind>,
    /// The retrievers to evaluate each pipeline with.
    pub retrievers: Vec<Retriever>,
    /// Cut the ranked list at these numbers of items.
    pub ks: Vec<usize>,
    /// Cut it at these budgets of context tokens.
    pub budgets: Vec<usize>,
    /// Text → vectors.
    pub embedder: Arc<dyn Embedder>,
    /// Model used inside the pipelines (summaries), if any.
    pub pipeline_llm: Option<Arc<dyn Llm>>,
    /// Model that answers and judges (`None`: retrieval metrics only).
    pub judge_llm: Option<Arc<dyn Llm>>,
    /// Prompt budget for answer generation.
    pub answer_budget: usize,
    /// How retrieved items are ranked and packed for the context (`None`:
    /// each pipeline's default, [`PipelineKind::default_context`]).
    pub context: Option<ContextConfig>,
}

impl EvalOptions {
    /// One pipeline, dense retrieval, k = 5, 10, 20, no budgets, no model,
    /// answers composed within 3,500 tokens.
    pub fn new(pipeline: PipelineKind, embedder: Arc<dyn Embedder>) -> Self {
        EvalOptions {
            pipelines: vec![pipeline],
            retrievers: vec![Retriever::Dense],
            ks: vec![5, 10, 20],
            budgets: Vec::new(),
            embedder,
            pipeline_llm: None,
            judge_llm: None,
            answer_budget: 3500,
            context: None,
        }
    }

    /// The cuts to score, k values first, each list ascending and
    /// deduplicated.
    fn cuts(&self) -> Result<Vec<Cut>> {
        if self.ks.contains(&0) || self.budgets.contains(&0) {
            return Err(MemoryError::Invalid("k and budgets must be at least 1".into()));
        }
        if self.pipelines.is_empty() || self.retrievers.is_empty() {
            return Err(MemoryError::Invalid("no pipeline or no retriever given".into()));
        }
        let mut cuts: Vec<Cut> = self.ks.iter().map(|&k| Cut::K(k)).collect();
        cuts.extend(self.budgets.iter().map(|&b| Cut::Budget(b)));
        cuts.sort();
        cuts.dedup();
        if cuts.is_empty() {
            return Err(MemoryError::Invalid("give at least one k or one budget".into()));
        }
        Ok(cuts)
    }
}

/// The gold answer an adversarial (category 5) question is judged against:
/// the conversations do not hold what it asks about.
pub const NOT_MENTIONED: &str = "Not mentioned in the conversation";

/// The gold answer `qa` is judged against, `None` when it has none. For an
/// adversarial question (category 5) it is [`NOT_MENTIONED`] — its
/// `adversarial_answer` is the tempting *wrong* answer, named as such so
/// that falling for the trap is judged WRONG — or, where the data also
/// gives an `answer` (e.g. "No" to a yes/no trap), that answer too.
pub fn judge_gold(qa: &Qa) -> Option<String> {
    if qa.category != 5 {
        return qa.answer.clone();
    }
    let mut gold = format!("{NOT_MENTIONED} (the conversations do not hold this information)");
    if let Some(a) = &qa.answer {
        gold.push_str(&format!(", or: {a}"));
    }
    if let Some(trap) = &qa.adversarial_answer {
        gold.push_str(&format!(". \"{trap}\" is a wrong answer"));
    }
    Some(gold)
}

/// Judge results of one category.
#[derive(Debug, Clone, PartialEq)]
pub struct JudgeRow {
    /// Category (`None`: overall over categories 1–4).
    pub category: Option<u8>,
    /// Questions judged.
    pub judged: usize,
    /// Judged CORRECT.
    pub correct: usize,
}

impl JudgeRow {
    /// J-score: the fraction judged CORRECT.
    pub fn score(&self) -> f64 {
        if self.judged == 0 {
            0.0
        } else {
            self.correct as f64 / self.judged as f64
        }
    }
}

/// What ingesting every conversation cost one pipeline.
#[derive(Debug, Clone, PartialEq)]
pub struct IngestStats {
    /// Pipeline name.
    pub pipeline: String,
    /// Messages ingested.
    pub messages: usize,
    /// Live memory items after ingestion, over all conversations.
    pub items: usize,
    /// Wall time of ingestion, seconds.
    pub seconds: f64,
    /// Model calls made by the pipeline while ingesting.
    pub llm_calls: u64,
    /// Of those, calls that failed.
    pub llm_failures: u64,
    /// Prompt tokens the server reported for them.
    pub llm_prompt_tokens: u64,
    /// Completion tokens the server reported for them.
    pub llm_completion_tokens: u64,
}

/// Model calls a pipeline made at query time (retrieving for scoring and
/// composing answer prompts: Amory's coherence retrieval), outside the
/// answering and judging calls.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct QueryCost {
    /// Model calls.
    pub llm_calls: u64,
    /// Of those, calls that failed.
    pub llm_failures: u64,
    /// Prompt tokens the server reported for them.
    pub llm_prompt_tokens: u64,
    /// Completion tokens the server reported for them.
    pub llm_completion_tokens: u64,
}

impl QueryCost {
    /// Adds what `llm` counted since `before`.
    fn add_since(&mut self, llm: &dyn Llm, before: &crate::llm::LlmStats) {
        let a = llm.stats();
        self.llm_calls += a.calls - before.calls;
        self.llm_failures += a.failures - before.failures;
        self.llm_prompt_tokens += a.prompt_tokens - before.prompt_tokens;
        self.llm_completion_tokens += a.completion_tokens - before.completion_tokens;
    }
}

/// The results of one pipeline with one retriever.
#[derive(Debug, Clone)]
pub struct RunResult {
    /// Pipeline name.
    pub pipeline: String,
    /// Retriever name ([`Retriever::name`]).
    pub retriever: String,
    /// Metrics per category and cut, and retrieval latency.
    pub report: EvalReport,
    /// Answer accuracy per category, when a judge model is configured
    /// (category 5 is judged against [`judge_gold`] and reported
    /// separately, outside the overall row).
    pub judge: Option<Vec<JudgeRow>>,
    /// Model calls the pipeline made at query time.
    pub query_cost: QueryCost,
}

/// Data quirks met and how they were handled, counted over the dataset.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Quirks {
    /// Questions with no evidence left: not scored for evidence recall.
    pub questions_without_evidence: usize,
    /// Evidence strings dropped as malformed (no dialogue id recoverable).
    pub malformed_evidence_dropped: usize,
    /// Evidence ids naming no turn of the conversation, dropped.
    pub unknown_evidence_dropped: usize,
    /// Evidence strings holding several ids, split.
    pub evidence_split: usize,
    /// Numeric answers (e.g. `2022`), scored as their decimal text.
    pub numeric_answers: usize,
    /// Questions of categories 1–4 with no gold answer: not scored for
    /// answer recall.
    pub questions_without_answer: usize,
    /// Gold answers made only of stop words: not scored for answer recall.
    pub answers_without_content_words: usize,
    /// Sessions with no date, or one that does not parse: their items are
    /// rendered without a date.
    pub sessions_without_date: usize,
}

impl Quirks {
    fn of(ds: &Dataset) -> Quirks {
        let sk = &ds.skipped;
        let mut q = Quirks {
            malformed_evidence_dropped: sk.evidence_malformed_dropped,
            unknown_evidence_dropped: sk.evidence_unknown_dropped,
            evidence_split: sk.evidence_split,
            numeric_answers: sk.numeric_answers_converted,
            sessions_without_date: ds
                .conversations
                .iter()
                .flat_map(|c| &c.sessions)
                .filter(|s| s.said_at.is_none())
                .count(),
            ..Quirks::default()
        };
        for qa in ds.conversations.iter().flat_map(|c| &c.qa) {
            q.questions_without_evidence += usize::from(qa.evidence.is_empty());
            if qa.category != 5 {
                match &qa.answer {
                    None => q.questions_without_answer += 1,
                    Some(a) if content_words(a).is_empty() => q.answers_without_content_words += 1,
                    Some(_) => {}
                }
            }
        }
        q
    }

    /// Every counter with its name.
    pub fn counts(&self) -> [(&'static str, usize); 8] {
        [
            ("questions_without_evidence", self.questions_without_evidence),
            ("malformed_evidence_dropped", self.malformed_evidence_dropped),
            ("unknown_evidence_dropped", self.unknown_evidence_dropped),
            ("evidence_split", self.evidence_split),
            ("numeric_answers", self.numeric_answers),
            ("questions_without_answer", self.questions_without_answer),
            ("answers_without_content_words", self.answers_without_content_words),
            ("sessions_without_date", self.sessions_without_date),
        ]
    }
}

/// The outcome of an evaluation run.
#[derive(Debug, Clone)]
pub struct EvalOutcome {
    /// Embedder name.
    pub embedder: String,
    /// The sample ids evaluated, in order.
    pub sample_ids: Vec<String>,
    /// Which split they are ([`locomo::split_name`]: `tune`,
    /// `report`, `all` or `custom`).
    pub split: &'static str,
    /// Whether the figures are in-sample: the conversations include one
    /// that defaults were tuned on ([`locomo::in_sample`]).
    pub in_sample: bool,
    /// Conversations evaluated.
    pub conversations: usize,
    /// Messages per conversation set (ingested once per pipeline).
    pub messages: usize,
    /// Questions evaluated per run.
    pub questions: usize,
    /// Data quirks and their handling.
    pub quirks: Quirks,
    /// Every repair the loader made.
    pub loader: SkipReport,
    /// Ingestion cost per pipeline.
    pub ingest: Vec<IngestStats>,
    /// One result per pipeline × retriever, pipelines in the order given.
    pub runs: Vec<RunResult>,
}

/// Version of the JSON layout written by [`EvalOutcome::to_json`].
pub const JSON_SCHEMA_VERSION: u32 = 5;

impl EvalOutcome {
    /// Everything as JSON: `{schema, embedder, dataset: {conversations,
    /// sample_ids, split, in_sample, messages, questions}, quirks: {…},
    /// loader: {…}, ingest: [{pipeline, messages, items, seconds, llm:
    /// {calls, failures, prompt_tokens, completion_tokens}}], runs:
    /// [{pipeline, retriever, retrieval (see [`EvalReport::to_json`]),
    /// query_llm: {calls, failures, prompt_tokens, completion_tokens},
    /// judge}]}`. Schema 3 added the split, the query-time model cost and
    /// `answer_recall_rendered`, and made `answer_recall` count what items
    /// say rather than their rendered text; schema 4 added each cut's
    /// `misses` by cause (see [`metrics::Misses`]; `null` without budgets);
    /// schema 5 each cut's `tokens_per_evidence_hit`.
    pub fn to_json(&self) -> Value {
        let counts = |c: &[(&str, usize)]| -> Value {
            c.iter()
                .map(|&(k, v)| (k.to_string(), Value::from(v)))
                .collect::<serde_json::Map<_, _>>()
                .into()
        };
        let ingest: Vec<Value> = self
            .ingest
            .iter()
            .map(|i| {
                json!({
                    "pipeline": i.pipeline,
                    "messages": i.messages,
                    "items": i.items,
                    "seconds": i.seconds,
                    "llm": {
                        "calls": i.llm_calls,
                        "failures": i.llm_failures,
                        "prompt_tokens": i.llm_prompt_tokens,
                        "completion_tokens": i.llm_completion_tokens,
                    },
                })
            })
            .collect();
        let runs: Vec<Value> = self
            .runs
            .iter()
            .map(|r| {
                let judge = r.judge.as_ref().map(|rows| {
                    rows.iter()
                        .map(|j| {
                            json!({
                                "category": j.category,
                                "name": j.category.map_or("overall (1-4)", category_name),
                                "judged": j.judged,
                                "correct": j.correct,
                                "j": j.score(),
                            })
                        })
                        .collect::<Vec<_>>()
                });
                let q = &r.query_cost;
                json!({
                    "pipeline": r.pipeline,
                    "retriever": r.retriever,
                    "retrieval": r.report.to_json(),
                    "query_llm": {
                        "calls": q.llm_calls,
                        "failures": q.llm_failures,
                        "prompt_tokens": q.llm_prompt_tokens,
                        "completion_tokens": q.llm_completion_tokens,
                    },
                    "judge": judge,
                })
            })
            .collect();
        json!({
            "schema": JSON_SCHEMA_VERSION,
            "embedder": self.embedder,
            "dataset": {
                "conversations": self.conversations,
                "sample_ids": self.sample_ids,
                "split": self.split,
                "in_sample": self.in_sample,
                "messages": self.messages,
                "questions": self.questions,
            },
            "quirks": counts(&self.quirks.counts()),
            "loader": counts(&self.loader.counts()),
            "ingest": ingest,
            "runs": runs,
        })
    }

    /// Which conversations the run covered and whether its figures are
    /// in-sample, as one line.
    pub fn split_line(&self) -> String {
        format!(
            "split {} ({}): {}",
            self.split,
            self.sample_ids.join(", "),
            if self.in_sample {
                "in-sample (includes conversations defaults were tuned on)"
            } else {
                "held-out (no conversation defaults were tuned on)"
            }
        )
    }

    /// One Markdown table of the overall metrics: a row per pipeline ×
    /// retriever × cut with evidence recall, full coverage, answer recall
    /// (what the items say), the older rendered answer recall (headers
    /// included), mean tokens and items used, tokens per evidence turn
    /// delivered, and retrieval latency.
    pub fn summary_markdown(&self) -> String {
        let mut s = String::from(
            "| pipeline | retriever | cut | evidence recall | full coverage | answer recall | answer recall (rendered, old) | tokens | items | tokens / evidence hit | p50 ms | p95 ms |\n\
             |---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
        );
        let ms = |us: Option<u64>| us.map_or_else(|| "-".into(), |v| format!("{:.2}", v as f64 / 1000.0));
        for r in &self.runs {
            for m in &r.report.overall.per_cut {
                let cut = match m.cut {
                    Cut::K(k) => format!("k = {k}"),
                    Cut::Budget(b) => format!("{b} tokens"),
                };
                s.push_str(&format!(
                    "| {} | {} | {cut} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                    r.pipeline,
                    r.retriever,
                    fmt_opt(m.mean_recall, 3),
                    fmt_opt(m.full_coverage, 3),
                    fmt_opt(m.mean_answer_recall, 3),
                    fmt_opt(m.mean_rendered_answer_recall, 3),
                    fmt_opt(m.mean_context_tokens, 0),
                    fmt_opt(m.mean_items, 1),
                    fmt_opt(m.tokens_per_evidence_hit, 1),
                    ms(r.report.latency_p50_us),
                    ms(r.report.latency_p95_us),
                ));
            }
        }
        s
    }

    /// The full Markdown report: the summary table, ingestion cost, the
    /// per-category table of every run, judge tables, and the data quirks.
    pub fn to_markdown(&self) -> String {
        let mut s = format!(
            "{} conversations, {} messages, {} questions; embedder {}\n{}\n\n",
            self.conversations,
            self.messages,
            self.questions,
            self.embedder,
            self.split_line()
        );
        s.push_str(&self.summary_markdown());
        s.push_str("\n| pipeline | ingest s | messages | items | LLM calls | LLM tokens (prompt + completion) |\n|---|---:|---:|---:|---:|---:|\n");
        for i in &self.ingest {
            s.push_str(&format!(
                "| {} | {:.2} | {} | {} | {} | {} + {} |\n",
                i.pipeline, i.seconds, i.messages, i.items, i.llm_calls, i.llm_prompt_tokens, i.llm_completion_tokens
            ));
        }
        if self.runs.iter().any(|r| r.query_cost.llm_calls > 0) {
            s.push_str("\n| pipeline | retriever | query-time LLM calls | failures | LLM tokens (prompt + completion) |\n|---|---|---:|---:|---:|\n");
            for r in &self.runs {
                let q = &r.query_cost;
                s.push_str(&format!(
                    "| {} | {} | {} | {} | {} + {} |\n",
                    r.pipeline, r.retriever, q.llm_calls, q.llm_failures, q.llm_prompt_tokens, q.llm_completion_tokens
                ));
            }
        }
        for r in &self.runs {
            s.push_str(&format!("\n#### {} · {}\n\n", r.pipeline, r.retriever));
            s.push_str(&r.report.to_markdown());
            if let Some(rows) = &r.judge {
                s.push_str("\n| category | judged | correct | J |\n|---|---|---|---|\n");
                for j in rows {
                    let name = j.category.map_or("overall (1-4)", category_name);
                    s.push_str(&format!(
                        "| {name} | {} | {} | {:.3} |\n",
                        j.judged,
                        j.correct,
                        j.score()
                    ));
                }
            }
        }
        let quirks: Vec<String> = self.quirks.counts().iter().map(|(k, v)| format!("{k}={v}")).collect();
        s.push_str(&format!("\nData quirks: {}\n", quirks.join(", ")));
        s
    }
}

/// The messages of a LoCoMo conversation, in order, with their `dia_id`s
/// and session times as provenance.
pub fn conversation_messages(c: &Conversation) -> Vec<NewMessage> {
    c.sessions
        .iter()
        .flat_map(|s| {
            s.turns.iter().map(move |t| NewMessage {
                session: format!("session_{}", s.index),
                speaker: t.speaker.clone(),
                text: t.text.clone(),
                said_at: s.said_at,
                source_ref: Some(t.dia_id.clone()),
            })
        })
        .collect()
}

/// Parses the judge's answer: the `label` of its JSON object.
fn judge_label(v: &serde_json::Value) -> std::result::Result<bool, String> {
    match v.get("label").and_then(|l| l.as_str()).map(str::trim) {
        Some(l) if l.eq_ignore_ascii_case("CORRECT") => Ok(true),
        Some(l) if l.eq_ignore_ascii_case("WRONG") => Ok(false),
        Some(l) => Err(format!("`label` is `{l}`, not CORRECT or WRONG")),
        None => Err("no string field `label`".into()),
    }
}

/// Answers `question` from `context` with the answer prompt.
pub fn generate_answer(llm: &dyn Llm, context: &str, question: &str) -> Result<String> {
    let prompt = ANSWER_PROMPT
        .replace("{full_stories}", context)
        .replace("{add_trivas}", "(none)")
        .replace("{question}", question);
    Ok(llm
        .chat(&Call::text("answer"), &[ChatMessage::user(prompt)])?
        .trim()
        .to_string())
}

/// Judges `generated` against `gold` with the LLM-as-judge prompt.
pub fn judge(llm: &dyn Llm, question: &str, gold: &str, generated: &str) -> Result<bool> {
    let prompt = JUDGE_PROMPT
        .replace("{question}", question)
        .replace("{gold_answer}", gold)
        .replace("{generated_answer}", generated);
    // The reasoning comes first, as the prompt asks, then the label.
    let schema = schema::object(
        &[
            ("reasoning", schema::text()),
            ("label", schema::one_of(&["CORRECT", "WRONG"])),
        ],
        &["reasoning", "label"],
    );
    Ok(ask_json(
        llm,
        &Call::json("judge", &schema),
        "You grade answers. Reply with a JSON object only.",
        &prompt,
        judge_label,
    )?)
}

/// The caller ids of the messages `used` items quote. A summary, a story
/// or sub-plot headline or a PREMem reasoning fragment
/// ([`CITES_WITHOUT_QUOTING`]) cites its messages without quoting them: it
/// covers no evidence turn. Sorted, deduplicated.
pub fn credited_refs(used: &[Retrieved]) -> Vec<String> {
    let mut ids: Vec<String> = used
        .iter()
        .filter(|h| !CITES_WITHOUT_QUOTING.contains(&h.item.kind.as_str()))
        .flat_map(|h| h.source_refs.iter().cloned())
        .collect();
    ids.sort();
    ids.dedup();
    ids
}

/// One question of `user`'s memory scored at every cut (ascending, as
/// [`metrics::aggregate`] takes them): at `k` items, what
/// [`Memory::retrieve`]`(k)` returns; at a budget, a list retrieved deep
/// enough to fill the largest budget, packed by `packer`. Answer recall
/// counts what `sayer` says the packed items say; the rendered figure,
/// the packed text. The latency is that of the deep retrieval when there
/// are budgets, else that of the largest `k`.
pub fn score_question(
    mem: &mut Memory,
    user: &str,
    packer: &Packer,
    sayer: &Sayer,
    qa: &Qa,
    cuts: &[Cut],
) -> Result<QuestionResult> {
    let bmax = cuts
        .iter()
        .filter_map(|c| if let Cut::Budget(b) = c { Some(*b) } else { None })
        .max();
    let mut latency_us = 0;
    // Deep enough to fill the largest budget (one item per 16 tokens, at
    // least 32, is rarely short): double the depth while everything
    // retrieved fits and more may exist. The pack at the largest budget
    // decides the depth; it is kept for scoring that cut.
    let (deep, mut largest) = match bmax {
        None => (Vec::new(), None),
        Some(b) => {
            let mut depth = b.div_ceil(16).max(32);
            loop {
                let t = Instant::now();
                let hits = mem.retrieve(user, &qa.question, depth)?;
                latency_us = t.elapsed().as_micros() as u64;
                let largest = packer.pack(&hits, Cut::Budget(b));
                if !(hits.len() == depth && largest.exhausted) {
                    break (hits, Some(largest));
                }
                depth *= 2;
            }
        }
    };
    let gold = match (qa.category, &qa.answer) {
        (5, _) | (_, None) => Default::default(),
        (_, Some(a)) => content_words(a),
    };
    let mut out = Vec::with_capacity(cuts.len());
    for &cut in cuts {
        let (hits, packed) = match cut {
            Cut::K(k) => {
                let t = Instant::now();
                let hits = mem.retrieve(user, &qa.question, k)?;
                if bmax.is_none() {
                    latency_us = t.elapsed().as_micros() as u64;
                }
                let packed = packer.pack(&hits, cut);
                (hits, packed)
            }
            Cut::Budget(b) => {
                let packed = match largest.take() {
                    Some(p) if Some(b) == bmax => p,
                    other => {
                        largest = other;
                        packer.pack(&deep, cut)
                    }
                };
                (deep.clone(), packed)
            }
        };
        let used = &packed.chosen(&hits);
        let standing_fits = packed.text.starts_with(&packer.standing);
        let budget = match cut {
            Cut::Budget(b) => Some(b),
            Cut::K(_) => None,
        };
        let said = sayer.said(packer, &packed, &hits, standing_fits, budget);
        let said_words: HashSet<String> = words(&said).collect();
        let rendered_words: HashSet<String> = words(&packed.text).collect();
        out.push(CutResult {
            retrieved: credited_refs(used),
            context_tokens: packed.tokens,
            items: packed.shown.len(),
            answer_recall: answer_recall(&gold, &said_words),
            rendered_answer_recall: answer_recall(&gold, &rendered_words),
        });
    }
    Ok(QuestionResult {
        category: qa.category,
        evidence: qa.evidence.clone(),
        cuts: out,
        latency_us,
        deep: None,
    })
}

/// The dialogue ids the top [`DIAGNOSTIC_DEPTH`] items retrieved for `qa`
/// cover, credited as at a cut ([`credited_refs`]): what ranking found at
/// all, for the breakdown of misses ([`metrics::Misses`]).
pub fn deep_refs(mem: &mut Memory, user: &str, qa: &Qa) -> Result<Vec<String>> {
    Ok(credited_refs(&mem.retrieve(user, &qa.question, DIAGNOSTIC_DEPTH)?))
}

/// Generates an answer from the composed prompt and judges it; `None` when
/// the question has no gold answer.
fn judge_question(
    mem: &mut Memory,
    user: &str,
    llm: &dyn Llm,
    qa: &Qa,
    budget: usize,
    pipeline_llm: Option<&dyn Llm>,
    cost: &mut QueryCost,
) -> Result<Option<bool>> {
    let Some(gold) = judge_gold(qa) else { return Ok(None) };
    let before = pipeline_llm.map(|l| l.stats());
    let composed = mem.compose(user, &qa.question, budget);
    if let (Some(l), Some(b)) = (pipeline_llm, &before) {
        cost.add_since(l, b);
    }
    let composed = composed?;
    let answer = generate_answer(llm, &composed.prompt, &qa.question)?;
    Ok(Some(judge(llm, &qa.question, &gold, &answer)?))
}

/// Judge counts per category → rows, with the overall row over 1–4 last.
fn judge_rows(judged: &BTreeMap<u8, (usize, usize)>) -> Vec<JudgeRow> {
    let mut rows: Vec<JudgeRow> = judged
        .iter()
        .map(|(&c, &(n, ok))| JudgeRow {
            category: Some(c),
            judged: n,
            correct: ok,
        })
        .collect();
    let (n, ok) = judged
        .iter()
        .filter(|(c, _)| **c != 5)
        .fold((0, 0), |a, (_, &(n, ok))| (a.0 + n, a.1 + ok));
    rows.push(JudgeRow {
        category: None,
        judged: n,
        correct: ok,
    });
    rows
}

/// Runs the evaluation over every conversation of `ds`: for each pipeline,
/// each conversation in a fresh memory under `workdir`
/// (`<pipeline>/conv-<i>`), scored with every retriever.
pub fn run(
    ds: &Dataset,
    opts: &EvalOptions,
    workdir: &std::path::Path,
    progress: &mut dyn FnMut(&str),
) -> Result<EvalOutcome> {
    let cuts = opts.cuts()?;
    let user = "eval";
    let mut runs = Vec::new();
    let mut ingest = Vec::new();
    let mut messages = 0;
    for kind in &opts.pipelines {
        let mut results: Vec<Vec<QuestionResult>> = vec![Vec::new(); opts.retrievers.len()];
        let mut judged: Vec<BTreeMap<u8, (usize, usize)>> = vec![BTreeMap::new(); opts.retrievers.len()];
        let mut query_cost = vec![QueryCost::default(); opts.retrievers.len()];
        let mut cost = IngestStats {
            pipeline: kind.name().to_string(),
            messages: 0,
            items: 0,
            seconds: 0.0,
            llm_calls: 0,
            llm_failures: 0,
            llm_prompt_tokens: 0,
            llm_completion_tokens: 0,
        };
        for (ci, conv) in ds.conversations.iter().enumerate() {
            let dir = workdir.join(kind.name()).join(format!("conv-{ci}"));
            if dir.exists() {
                std::fs::remove_dir_all(&dir)?;
            }
            let mut mem = Memory::open(&dir, kind.clone(), opts.embedder.clone(), opts.pipeline_llm.clone())?;
            let context = opts.context.unwrap_or_else(|| kind.default_context());
            mem.set_context_ranking(context);
            let msgs = conversation_messages(conv);
            let before = opts.pipeline_llm.as_ref().map(|l| l.stats());
            let t0 = Instant::now();
            let mut report = mem.ingest(user, &msgs)?;
            // The conversation is complete: close what a pipeline holds open.
            let closed = mem.flush(user)?;
            if closed.items > 0 {
                report.items += closed.items;
                report.live = closed.live;
            }
            cost.seconds += t0.elapsed().as_secs_f64();
            if let (Some(l), Some(b)) = (&opts.pipeline_llm, before) {
                let a = l.stats();
                cost.llm_calls += a.calls - b.calls;
                cost.llm_failures += a.failures - b.failures;
                cost.llm_prompt_tokens += a.prompt_tokens - b.prompt_tokens;
                cost.llm_completion_tokens += a.completion_tokens - b.completion_tokens;
            }
            cost.messages += msgs.len();
            cost.items += report.live;
            progress(&format!(
                "{} · {}: {} messages ingested, {} questions",
                kind.name(),
                conv.sample_id,
                msgs.len(),
                conv.qa.len()
            ));
            let packer = mem.packer(user)?;
            let sayer = mem.sayer(user)?;
            let pipeline_llm = opts.pipeline_llm.as_deref();
            for (ri, &retriever) in opts.retrievers.iter().enumerate() {
                mem.set_retriever(retriever);
                for qa in &conv.qa {
                    let before = pipeline_llm.map(|l| l.stats());
                    let packer = packer.clone().for_context(&context, &qa.question);
                    let scored = score_question(&mut mem, user, &packer, &sayer, qa, &cuts);
                    if let (Some(l), Some(b)) = (pipeline_llm, &before) {
                        query_cost[ri].add_since(l, b);
                    }
                    let mut scored = scored?;
                    // A diagnostic, not what a user's retrieval costs;
                    // left out when retrieving would call the pipeline's
                    // model (Amory's coherence retrieval).
                    if !opts.budgets.is_empty() && opts.pipeline_llm.is_none() {
                        scored.deep = Some(deep_refs(&mut mem, user, qa)?);
                    }
                    results[ri].push(scored);
                    if let Some(llm) = &opts.judge_llm
                        && let Some(ok) = judge_question(
                            &mut mem,
                            user,
                            llm.as_ref(),
                            qa,
                            opts.answer_budget,
                            pipeline_llm,
                            &mut query_cost[ri],
                        )?
                    {
                        let e = judged[ri].entry(qa.category).or_default();
                        e.0 += 1;
                        e.1 += usize::from(ok);
                    }
                }
            }
        }
        messages = cost.messages;
        ingest.push(cost);
        for (ri, retriever) in opts.retrievers.iter().enumerate() {
            runs.push(RunResult {
                pipeline: kind.name().to_string(),
                retriever: retriever.name(),
                report: aggregate(&cuts, &results[ri]),
                judge: opts.judge_llm.as_ref().map(|_| judge_rows(&judged[ri])),
                query_cost: query_cost[ri],
            });
        }
    }
    let sample_ids: Vec<String> = ds.conversations.iter().map(|c| c.sample_id.clone()).collect();
    Ok(EvalOutcome {
        embedder: opts.embedder.name().to_string(),
        split: split_name(&sample_ids),
        in_sample: in_sample(&sample_ids),
        sample_ids,
        conversations: ds.conversations.len(),
        messages,
        questions: ds.conversations.iter().map(|c| c.qa.len()).sum(),
        quirks: Quirks::of(ds),
        loader: ds.skipped,
        ingest,
        runs,
    })
}
