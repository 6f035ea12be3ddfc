//! LoCoMo evaluation of a pipeline: ingest each conversation into a fresh
//! memory, retrieve for every question, map the retrieved items back to
//! `dia_id`s through their provenance (summary items, which cite a whole
//! block without quoting it, cover none), and report evidence recall, full
//! coverage, context tokens and latency per category ([`locomo::aggregate`]).
//! With a model: generate an answer from the composed prompt and score it
//! with the LLM-as-judge prompt of Amory, appendix A.1.

use crate::error::{MemoryError, Result};
use crate::llm::{ChatMessage, Llm, ask_json};
use crate::locomo::{self, Conversation, Dataset, EvalReport, QuestionResult, category_name};
use crate::memory::{Memory, PipelineKind};
use crate::pipeline::{Retriever, render_item};
use crate::store::NewMessage;
use crate::tokens;
use dentate_embed::Embedder;
use std::sync::Arc;
use std::time::Instant;

/// The LLM-as-judge prompt (Amory, appendix A.1, verbatim), with
/// `{question}`, `{gold_answer}` and `{generated_answer}` placeholders.
pub const JUDGE_PROMPT: &str = include_str!("prompts/judge.txt");
/// The answer-generation prompt (Amory, appendix A.1, verbatim), with
/// `{full_stories}`, `{add_trivas}` and `{question}` placeholders.
pub const ANSWER_PROMPT: &str = include_str!("prompts/qa.txt");

/// Settings of an evaluation run.
#[derive(Clone)]
pub struct EvalOptions {
    /// The pipeline to evaluate.
    pub pipeline: PipelineKind,
    /// Retrieval depths to report (the largest is retrieved once).
    pub ks: Vec<usize>,
    /// Text → vectors.
    pub embedder: Arc<dyn Embedder>,
    /// Model used inside the pipeline (summaries), if any.
    pub pipeline_llm: Option<Arc<dyn Llm>>,
    /// Model that answers and judges (`None`: retrieval metrics only).
    pub judge_llm: Option<Arc<dyn Llm>>,
    /// Prompt budget for answer generation.
    pub budget: usize,
    /// How items are found.
    pub retriever: Retriever,
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

/// The outcome of an evaluation run.
#[derive(Debug, Clone)]
pub struct EvalOutcome {
    /// Retrieval metrics per category.
    pub report: EvalReport,
    /// Wall time of ingestion over all conversations, seconds.
    pub ingest_s: f64,
    /// Messages ingested.
    pub messages: usize,
    /// Questions evaluated.
    pub questions: usize,
    /// What the loader skipped or repaired.
    pub skipped: String,
    /// Answer accuracy per category, when a judge model is configured
    /// (category 5 is judged against its adversarial answer and reported
    /// separately, outside the overall row).
    pub judge: Option<Vec<JudgeRow>>,
}

impl EvalOutcome {
    /// Everything as JSON.
    pub fn to_json(&self) -> serde_json::Value {
        let mut v = serde_json::json!({
            "retrieval": self.report.to_json(),
            "ingest_s": self.ingest_s,
            "messages": self.messages,
            "questions": self.questions,
            "skipped": self.skipped,
        });
        if let Some(rows) = &self.judge {
            v["judge"] = rows
                .iter()
                .map(|r| {
                    serde_json::json!({
                        "category": r.category.map_or("overall (1-4)".to_string(), |c| category_name(c).to_string()),
                        "judged": r.judged,
                        "correct": r.correct,
                        "j": r.score(),
                    })
                })
                .collect();
        }
        v
    }

    /// A Markdown report: the retrieval table, ingest time, and the judge
    /// table when there is one.
    pub fn to_markdown(&self) -> String {
        let mut s = self.report.to_markdown();
        s.push_str(&format!(
            "\n{} messages ingested in {:.2} s; {} questions; loader: {}\n",
            self.messages, self.ingest_s, self.questions, self.skipped
        ));
        if let Some(rows) = &self.judge {
            s.push_str("\n| category | judged | correct | J |\n|---|---|---|---|\n");
            for r in rows {
                let name = r.category.map_or("overall (1-4)", category_name);
                s.push_str(&format!(
                    "| {name} | {} | {} | {:.3} |\n",
                    r.judged,
                    r.correct,
                    r.score()
                ));
            }
        }
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
    Ok(llm.chat(&[ChatMessage::user(prompt)], false)?.trim().to_string())
}

/// Judges `generated` against `gold` with the LLM-as-judge prompt.
pub fn judge(llm: &dyn Llm, question: &str, gold: &str, generated: &str) -> Result<bool> {
    let prompt = JUDGE_PROMPT
        .replace("{question}", question)
        .replace("{gold_answer}", gold)
        .replace("{generated_answer}", generated);
    Ok(ask_json(
        llm,
        "You grade answers. Reply with a JSON object only.",
        &prompt,
        judge_label,
    )?)
}

/// Runs the evaluation over every conversation of `ds`, each in a fresh
/// memory under `workdir` (one subdirectory per conversation).
pub fn run(
    ds: &Dataset,
    opts: &EvalOptions,
    workdir: &std::path::Path,
    progress: &mut dyn FnMut(&str),
) -> Result<EvalOutcome> {
    let kmax = *opts
        .ks
        .iter()
        .max()
        .ok_or_else(|| MemoryError::Invalid("no k given".into()))?;
    if opts.ks.contains(&0) {
        return Err(MemoryError::Invalid("k must be at least 1".into()));
    }
    let mut results = Vec::new();
    let mut ingest_s = 0.0;
    let mut messages = 0;
    let mut judged: std::collections::BTreeMap<u8, (usize, usize)> = Default::default();
    for (ci, conv) in ds.conversations.iter().enumerate() {
        let dir = workdir.join(format!("conv-{ci}"));
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        let mut mem = Memory::open(
            &dir,
            opts.pipeline.clone(),
            opts.embedder.clone(),
            opts.pipeline_llm.clone(),
        )?;
        mem.set_retriever(opts.retriever);
        let user = "eval";
        let msgs = conversation_messages(conv);
        let t0 = Instant::now();
        mem.ingest(user, &msgs)?;
        ingest_s += t0.elapsed().as_secs_f64();
        messages += msgs.len();
        let compact_tokens = mem
            .store()
            .state(user, mem.pipeline_name(), "compact")?
            .map_or(0, |c| tokens::count(&c));
        progress(&format!(
            "{}: {} messages ingested, {} questions",
            conv.sample_id,
            msgs.len(),
            conv.qa.len()
        ));
        for qa in &conv.qa {
            let t = Instant::now();
            let hits = mem.retrieve(user, &qa.question, kmax)?;
            let latency_us = t.elapsed().as_micros() as u64;
            let mut retrieved = Vec::with_capacity(opts.ks.len());
            let mut context_tokens = Vec::with_capacity(opts.ks.len());
            for &k in &opts.ks {
                let top = &hits[..k.min(hits.len())];
                // A summary cites its whole block of messages without
                // quoting them: it covers no evidence turn.
                let mut ids: Vec<String> = top
                    .iter()
                    .filter(|h| h.item.kind != "summary")
                    .flat_map(|h| h.source_refs.iter().cloned())
                    .collect();
                ids.sort();
                ids.dedup();
                retrieved.push(ids);
                let text: String = top.iter().map(|h| render_item(&h.item) + "\n").collect();
                context_tokens.push(tokens::count(&text) + compact_tokens);
            }
            results.push(QuestionResult {
                category: qa.category,
                evidence: qa.evidence.clone(),
                retrieved,
                context_tokens,
                latency_us,
            });
            if let Some(llm) = &opts.judge_llm {
                let gold = if qa.category == 5 {
                    qa.adversarial_answer.clone().or_else(|| qa.answer.clone())
                } else {
                    qa.answer.clone()
                };
                if let Some(gold) = gold {
                    let composed = mem.compose(user, &qa.question, opts.budget)?;
                    let answer = generate_answer(llm.as_ref(), &composed.prompt, &qa.question)?;
                    let ok = judge(llm.as_ref(), &qa.question, &gold, &answer)?;
                    let e = judged.entry(qa.category).or_default();
                    e.0 += 1;
                    e.1 += usize::from(ok);
                }
            }
        }
    }
    let judge = opts.judge_llm.as_ref().map(|_| {
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
    });
    Ok(EvalOutcome {
        report: locomo::aggregate(&opts.ks, &results),
        ingest_s,
        messages,
        questions: results.len(),
        skipped: ds.skipped.summary(),
        judge,
    })
}
