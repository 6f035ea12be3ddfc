//! Retrieval metrics of a memory evaluation, pure and independent of how
//! retrieval ran.
//!
//! An evaluator fills one [`QuestionResult`] per question, with one
//! [`CutResult`] per [`Cut`] — the top *k* items, or as many items (in rank
//! order) as fit a *budget* of context tokens — and calls [`aggregate`] to
//! get an [`EvalReport`]: per category and overall, at every cut,
//!
//! - **evidence recall** (mean fraction of the question's evidence turns
//!   whose id the packed items carry in their provenance) and **full
//!   coverage** (fraction of questions with all of them);
//! - **answer recall**: mean fraction of the gold answer's content words
//!   ([`crate::text::content_words`]) present in what the packed items *say*
//!   ([`answer_recall`]): their text and the date resolutions derived from
//!   it, never the date header the renderer adds to every item (a
//!   temporal answer like "7 May 2023" would otherwise be credited to any
//!   item of that session, whatever it says). Unlike evidence recall it
//!   cannot be raised by attaching many source ids to a short summary, so
//!   the two are always reported side by side;
//! - **rendered answer recall**, the figure reported before that
//!   correction, kept as a secondary column so older tables can be
//!   compared: the same fraction over the whole rendered context, headers
//!   included (header-inflated);
//! - mean context tokens and items actually used;
//!
//! - **misses by cause** ([`Misses`]): each evidence turn a cut missed,
//!   as *not retrieved* at [`DIAGNOSTIC_DEPTH`] or *retrieved but not
//!   packed*; each question whose answer words the cut did not all hold, by
//!   the first of those causes that applies to its evidence, else *packed,
//!   answer words absent*;
//!
//! and retrieval latency percentiles over all questions.

use super::locomo::category_name;
use crate::pipeline::Cut;
use serde_json::{Value, json};
use std::collections::{BTreeSet, HashSet};
use std::fmt::Write as _;

/// What one question got at one cut.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct CutResult {
    /// The dialogue ids the packed items cover through their provenance.
    pub retrieved: Vec<String>,
    /// Tokens of the packed context.
    pub context_tokens: usize,
    /// Items packed.
    pub items: usize,
    /// [`answer_recall`] of what the packed items say (headers excluded);
    /// `None` when the question has no gold answer with content words
    /// (category 5, or an answer made only of stop words).
    pub answer_recall: Option<f64>,
    /// [`answer_recall`] of the whole rendered context, headers included
    /// (the older, header-inflated figure); `None` as above.
    pub rendered_answer_recall: Option<f64>,
}

/// What retrieval produced for one question, as input to [`aggregate`].
#[derive(Debug, Clone, PartialEq)]
pub struct QuestionResult {
    /// The question's category (`1..=5`).
    pub category: u8,
    /// The question's evidence dialogue ids (duplicates are counted once).
    pub evidence: Vec<String>,
    /// One entry per cut given to [`aggregate`], same order (missing
    /// trailing entries: not run at those cuts).
    pub cuts: Vec<CutResult>,
    /// Retrieval latency in microseconds.
    pub latency_us: u64,
    /// The dialogue ids the top [`DIAGNOSTIC_DEPTH`] retrieved items cover
    /// (credited as at a cut), for [`Misses`]; `None` when not retrieved.
    pub deep: Option<Vec<String>>,
}

/// How deep a question is retrieved to tell evidence that ranking never
/// found from evidence the budget left out ([`Misses`]).
pub const DIAGNOSTIC_DEPTH: usize = 100;

/// Why a cut missed what it missed, counted over a report row (needs
/// [`QuestionResult::deep`]; all zero without it).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Misses {
    /// Evidence turns (distinct per question) not in the packed items.
    pub evidence_missed: usize,
    /// Of those, turns not among the top [`DIAGNOSTIC_DEPTH`] retrieved.
    pub not_retrieved: usize,
    /// Of those, turns retrieved that deep but not packed.
    pub not_packed: usize,
    /// Questions scored for answer recall whose answer words the packed
    /// items did not all say.
    pub answers_short: usize,
    /// Of those, questions with an evidence turn not retrieved that deep.
    pub answer_not_retrieved: usize,
    /// Of those, questions whose evidence was all retrieved that deep but
    /// not all packed.
    pub answer_not_packed: usize,
    /// Of those, questions whose evidence was all packed (or that have
    /// none): the words are absent from what was packed.
    pub answer_words_absent: usize,
}

impl Misses {
    /// The counts with their names, in the order of the fields.
    pub fn counts(&self) -> [(&'static str, usize); 7] {
        [
            ("evidence_missed", self.evidence_missed),
            ("not_retrieved", self.not_retrieved),
            ("not_packed", self.not_packed),
            ("answers_short", self.answers_short),
            ("answer_not_retrieved", self.answer_not_retrieved),
            ("answer_not_packed", self.answer_not_packed),
            ("answer_words_absent", self.answer_words_absent),
        ]
    }

    /// Adds one question's misses at one cut: `evidence` its distinct
    /// evidence ids, `packed` what the cut covers, `deep` what the
    /// diagnostic retrieval covers, `answer` its answer recall.
    fn add(&mut self, evidence: &BTreeSet<&str>, packed: &HashSet<&str>, deep: &HashSet<&str>, answer: Option<f64>) {
        let mut retrieved_all = true;
        let mut packed_all = true;
        for id in evidence {
            if packed.contains(id) {
                continue;
            }
            packed_all = false;
            self.evidence_missed += 1;
            if deep.contains(id) {
                self.not_packed += 1;
            } else {
                retrieved_all = false;
                self.not_retrieved += 1;
            }
        }
        if answer.is_some_and(|a| a < 1.0) {
            self.answers_short += 1;
            if !retrieved_all {
                self.answer_not_retrieved += 1;
            } else if !packed_all {
                self.answer_not_packed += 1;
            } else {
                self.answer_words_absent += 1;
            }
        }
    }
}

/// Metrics of one report row at one cut.
#[derive(Debug, Clone, PartialEq)]
pub struct CutMetrics {
    /// The cut these metrics are for.
    pub cut: Cut,
    /// Questions scored for evidence: non-empty evidence and a result at this cut.
    pub scored: usize,
    /// Mean over scored questions of the fraction of their distinct evidence ids retrieved; `None` if none scored.
    pub mean_recall: Option<f64>,
    /// Fraction of scored questions with all evidence retrieved; `None` if none scored.
    pub full_coverage: Option<f64>,
    /// Questions with a scorable gold answer and a result at this cut.
    pub answer_scored: usize,
    /// Mean answer recall over them; `None` if there are none.
    pub mean_answer_recall: Option<f64>,
    /// Mean rendered (header-inflated) answer recall over the same
    /// questions; `None` if there are none.
    pub mean_rendered_answer_recall: Option<f64>,
    /// Mean context tokens over every question with a result at this cut.
    pub mean_context_tokens: Option<f64>,
    /// Mean items packed over the same questions.
    pub mean_items: Option<f64>,
    /// Context tokens per evidence turn delivered: the tokens of the
    /// questions scored for evidence, summed, over the evidence turns
    /// their contexts hold together; `None` when they hold none.
    pub tokens_per_evidence_hit: Option<f64>,
    /// What was missed, by cause, over the questions retrieved
    /// [`DIAGNOSTIC_DEPTH`] deep (`None` when none was).
    pub misses: Option<Misses>,
}

/// One row of an [`EvalReport`]: a category, or all questions.
#[derive(Debug, Clone, PartialEq)]
pub struct CategoryReport {
    /// The category, or `None` for the overall row.
    pub category: Option<u8>,
    /// [`category_name`] of the category, or `"overall"`.
    pub name: &'static str,
    /// All questions in the row, scored or not.
    pub questions: usize,
    /// Questions with non-empty evidence.
    pub scored: usize,
    /// Metrics per cut, in the order given to [`aggregate`].
    pub per_cut: Vec<CutMetrics>,
}

/// Aggregated retrieval metrics, produced by [`aggregate`].
#[derive(Debug, Clone, PartialEq)]
pub struct EvalReport {
    /// The cuts, in the order given.
    pub cuts: Vec<Cut>,
    /// One row per category present in the results, ascending by category number.
    pub categories: Vec<CategoryReport>,
    /// All questions together.
    pub overall: CategoryReport,
    /// Median latency over all questions (nearest rank), in microseconds; `None` without questions.
    pub latency_p50_us: Option<u64>,
    /// 95th-percentile latency over all questions (nearest rank), in microseconds; `None` without questions.
    pub latency_p95_us: Option<u64>,
}

/// The fraction of `gold`'s content words present among `context_words`
/// (the [`crate::text::words`] of the packed context); `None` when `gold` has no
/// content words.
pub fn answer_recall(gold: &BTreeSet<String>, context_words: &HashSet<String>) -> Option<f64> {
    if gold.is_empty() {
        return None;
    }
    let found = gold.iter().filter(|w| context_words.contains(*w)).count();
    Some(found as f64 / gold.len() as f64)
}

/// Aggregates per-question results into per-category and overall metrics.
///
/// At cut `i`, a question is scored for evidence when its evidence is
/// non-empty and `cuts[i]` exists; its recall is the fraction of its
/// distinct evidence ids found in `cuts[i].retrieved`, and it is fully
/// covered when that fraction is 1. Answer recall is averaged over the
/// questions whose `answer_recall` is defined; tokens and items over every
/// question with a result at that cut. Latency percentiles use the
/// nearest-rank method over every question.
pub fn aggregate(cuts: &[Cut], results: &[QuestionResult]) -> EvalReport {
    let categories: BTreeSet<u8> = results.iter().map(|r| r.category).collect();
    let rows = categories
        .into_iter()
        .map(|c| {
            let members: Vec<&QuestionResult> = results.iter().filter(|r| r.category == c).collect();
            summarise(Some(c), category_name(c), cuts, &members)
        })
        .collect();
    let all: Vec<&QuestionResult> = results.iter().collect();
    let overall = summarise(None, "overall", cuts, &all);
    let mut latencies: Vec<u64> = results.iter().map(|r| r.latency_us).collect();
    latencies.sort_unstable();
    EvalReport {
        cuts: cuts.to_vec(),
        categories: rows,
        overall,
        latency_p50_us: nearest_rank(&latencies, 50),
        latency_p95_us: nearest_rank(&latencies, 95),
    }
}

/// Nearest-rank percentile of ascending `sorted` values: the value at rank `ceil(p/100 · n)` (at least rank 1).
pub fn nearest_rank(sorted: &[u64], percent: usize) -> Option<u64> {
    let rank = (percent * sorted.len()).div_ceil(100).max(1);
    sorted.get(rank - 1).copied()
}

fn mean(sum: f64, n: usize) -> Option<f64> {
    (n > 0).then(|| sum / n as f64)
}

fn summarise(category: Option<u8>, name: &'static str, cuts: &[Cut], members: &[&QuestionResult]) -> CategoryReport {
    let evidence: Vec<BTreeSet<&str>> = members
        .iter()
        .map(|r| r.evidence.iter().map(String::as_str).collect())
        .collect();
    let per_cut = cuts
        .iter()
        .enumerate()
        .map(|(i, &cut)| {
            let (mut scored, mut recall_sum, mut full) = (0usize, 0.0f64, 0usize);
            let (mut answered, mut answer_sum, mut rendered_sum) = (0usize, 0.0f64, 0.0f64);
            let (mut ran, mut token_sum, mut item_sum) = (0usize, 0.0f64, 0.0f64);
            let (mut scored_tokens, mut hit_sum) = (0.0f64, 0usize);
            let mut misses: Option<Misses> = None;
            for (r, ev) in members.iter().zip(&evidence) {
                let Some(c) = r.cuts.get(i) else { continue };
                if let Some(deep) = &r.deep {
                    let packed: HashSet<&str> = c.retrieved.iter().map(String::as_str).collect();
                    let deep: HashSet<&str> = deep.iter().map(String::as_str).collect();
                    misses.get_or_insert_default().add(ev, &packed, &deep, c.answer_recall);
                }
                ran += 1;
                token_sum += c.context_tokens as f64;
                item_sum += c.items as f64;
                if let Some(a) = c.answer_recall {
                    answered += 1;
                    answer_sum += a;
                    rendered_sum += c.rendered_answer_recall.unwrap_or(a);
                }
                if ev.is_empty() {
                    continue;
                }
                let got: HashSet<&str> = c.retrieved.iter().map(String::as_str).collect();
                let hits = ev.iter().filter(|id| got.contains(*id)).count();
                scored += 1;
                scored_tokens += c.context_tokens as f64;
                hit_sum += hits;
                recall_sum += hits as f64 / ev.len() as f64;
                if hits == ev.len() {
                    full += 1;
                }
            }
            CutMetrics {
                cut,
                scored,
                mean_recall: mean(recall_sum, scored),
                full_coverage: mean(full as f64, scored),
                answer_scored: answered,
                mean_answer_recall: mean(answer_sum, answered),
                mean_rendered_answer_recall: mean(rendered_sum, answered),
                mean_context_tokens: mean(token_sum, ran),
                mean_items: mean(item_sum, ran),
                tokens_per_evidence_hit: mean(scored_tokens, hit_sum),
                misses,
            }
        })
        .collect();
    CategoryReport {
        category,
        name,
        questions: members.len(),
        scored: evidence.iter().filter(|e| !e.is_empty()).count(),
        per_cut,
    }
}

impl CutMetrics {
    fn to_json(&self) -> Value {
        json!({
            "cut": self.cut.kind(),
            "value": self.cut.value(),
            "scored": self.scored,
            "evidence_recall": self.mean_recall,
            "full_coverage": self.full_coverage,
            "answer_scored": self.answer_scored,
            "answer_recall": self.mean_answer_recall,
            "answer_recall_rendered": self.mean_rendered_answer_recall,
            "mean_context_tokens": self.mean_context_tokens,
            "mean_items": self.mean_items,
            "tokens_per_evidence_hit": self.tokens_per_evidence_hit,
            "misses": self.misses.map(|m| {
                m.counts()
                    .iter()
                    .map(|&(k, v)| (k.to_string(), Value::from(v)))
                    .collect::<serde_json::Map<_, _>>()
            }),
        })
    }
}

impl CategoryReport {
    fn to_json(&self) -> Value {
        json!({
            "category": self.category,
            "name": self.name,
            "questions": self.questions,
            "scored": self.scored,
            "per_cut": self.per_cut.iter().map(CutMetrics::to_json).collect::<Vec<_>>(),
        })
    }

    fn label(&self) -> String {
        match self.category {
            Some(c) => format!("{} ({c})", self.name),
            None => self.name.to_string(),
        }
    }
}

/// `v` with `decimals` decimals, or `-` when undefined.
pub(crate) fn fmt_opt(v: Option<f64>, decimals: usize) -> String {
    v.map_or_else(|| "-".to_string(), |v| format!("{v:.decimals$}"))
}

impl EvalReport {
    /// What each cut missed, by cause ([`Misses`]), as a Markdown table: a
    /// row per category and overall; per cut, evidence turns missed as
    /// `missed = not retrieved + not packed`, and questions whose answer
    /// words were not all packed as `short = evidence not retrieved +
    /// evidence not packed + words absent from what was packed`. Empty
    /// when no question was retrieved [`DIAGNOSTIC_DEPTH`] deep.
    pub fn misses_markdown(&self) -> String {
        let rows: Vec<&CategoryReport> = self.categories.iter().chain(std::iter::once(&self.overall)).collect();
        if !rows.iter().any(|r| r.per_cut.iter().any(|m| m.misses.is_some())) {
            return String::new();
        }
        let mut out = format!(
            "\nMisses by cause (evidence turns missed = not retrieved at depth {DIAGNOSTIC_DEPTH} + retrieved, not packed; \
             answers short = evidence not retrieved + evidence not packed + words absent from what was packed):\n\n| category |"
        );
        let mut rule = String::from("|---|");
        for c in &self.cuts {
            let l = c.label();
            let _ = write!(out, " evidence missed{l} | answers short{l} |");
            rule.push_str("---:|---:|");
        }
        out.push('\n');
        out.push_str(&rule);
        out.push('\n');
        for row in rows {
            let _ = write!(out, "| {} |", row.label());
            for m in &row.per_cut {
                match m.misses {
                    Some(x) => {
                        let _ = write!(
                            out,
                            " {} = {} + {} | {} = {} + {} + {} |",
                            x.evidence_missed,
                            x.not_retrieved,
                            x.not_packed,
                            x.answers_short,
                            x.answer_not_retrieved,
                            x.answer_not_packed,
                            x.answer_words_absent
                        );
                    }
                    None => out.push_str(" - | - |"),
                }
            }
            out.push('\n');
        }
        out
    }

    /// The report as JSON: `{cuts: [{cut, value}], latency_us: {p50, p95},
    /// categories: [row], overall: row}` where a row is `{category, name,
    /// questions, scored, per_cut: [{cut, value, scored, evidence_recall,
    /// full_coverage, answer_scored, answer_recall, answer_recall_rendered,
    /// mean_context_tokens, mean_items}]}`; undefined means are `null`.
    /// `answer_recall` counts what the items say; `answer_recall_rendered`
    /// is the older figure over the rendered text, headers included.
    pub fn to_json(&self) -> Value {
        json!({
            "cuts": self.cuts.iter().map(|c| json!({"cut": c.kind(), "value": c.value()})).collect::<Vec<_>>(),
            "latency_us": { "p50": self.latency_p50_us, "p95": self.latency_p95_us },
            "categories": self.categories.iter().map(CategoryReport::to_json).collect::<Vec<_>>(),
            "overall": self.overall.to_json(),
        })
    }

    /// The report as a Markdown table: one row per category, then
    /// `overall`; columns `n` (questions with evidence), then per cut
    /// `ev` (evidence recall), `full` (full coverage), `ans` (answer
    /// recall over what the items say), `ans(r)` (the older rendered,
    /// header-inflated answer recall) and `tok` (mean context tokens); `-`
    /// where undefined.
    /// A latency line follows.
    pub fn to_markdown(&self) -> String {
        let mut out = String::from("| category | n |");
        let mut rule = String::from("|---|---:|");
        for c in &self.cuts {
            let l = c.label();
            let _ = write!(out, " ev{l} | full{l} | ans{l} | ans(r){l} | tok{l} |");
            rule.push_str("---:|---:|---:|---:|---:|");
        }
        out.push('\n');
        out.push_str(&rule);
        out.push('\n');
        for row in self.categories.iter().chain(std::iter::once(&self.overall)) {
            let _ = write!(out, "| {} | {} |", row.label(), row.scored);
            for m in &row.per_cut {
                let _ = write!(
                    out,
                    " {} | {} | {} | {} | {} |",
                    fmt_opt(m.mean_recall, 3),
                    fmt_opt(m.full_coverage, 3),
                    fmt_opt(m.mean_answer_recall, 3),
                    fmt_opt(m.mean_rendered_answer_recall, 3),
                    fmt_opt(m.mean_context_tokens, 0)
                );
            }
            out.push('\n');
        }
        out.push_str(&self.misses_markdown());
        let lat = |v: Option<u64>| v.map_or_else(|| "-".to_string(), |v| v.to_string());
        let _ = writeln!(
            out,
            "\nRetrieval latency over {} questions: p50 {} us, p95 {} us",
            self.overall.questions,
            lat(self.latency_p50_us),
            lat(self.latency_p95_us)
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    /// A result with the given evidence and, per cut, (retrieved ids,
    /// tokens, answer recall); items = number of retrieved ids.
    fn result(
        category: u8,
        evidence: &[&str],
        cuts: &[(&[&str], usize, Option<f64>)],
        latency_us: u64,
    ) -> QuestionResult {
        QuestionResult {
            category,
            evidence: strings(evidence),
            cuts: cuts
                .iter()
                .map(|&(ids, context_tokens, answer_recall)| CutResult {
                    retrieved: strings(ids),
                    context_tokens,
                    items: ids.len(),
                    answer_recall,
                    rendered_answer_recall: answer_recall,
                })
                .collect(),
            latency_us,
            deep: None,
        }
    }

    fn example() -> EvalReport {
        let results = [
            result(
                1,
                &["D1:1", "D1:2"],
                &[(&["D1:1"], 10, Some(0.5)), (&["D1:1", "D1:2", "D2:1"], 30, Some(1.0))],
                100,
            ),
            result(
                1,
                &["D1:3", "D1:3"],
                &[(&[], 12, Some(0.0)), (&["D1:3"], 34, Some(1.0))],
                300,
            ),
            result(
                2,
                &["D2:1", "D2:2", "D2:3", "D2:4"],
                &[(&["D2:1"], 8, None), (&["D2:1", "D2:2", "D2:9"], 20, None)],
                200,
            ),
            result(5, &[], &[(&["D1:1"], 5, None), (&["D1:1"], 15, None)], 50),
            // Only the first cut was run for this one.
            result(2, &["D3:1"], &[(&["D3:1"], 7, Some(1.0))], 1000),
        ];
        aggregate(&[Cut::K(1), Cut::Budget(30)], &results)
    }

    /// (scored, recall, full coverage, answer scored, answer recall, tokens, items).
    type Row = (
        usize,
        Option<f64>,
        Option<f64>,
        usize,
        Option<f64>,
        Option<f64>,
        Option<f64>,
    );

    fn metrics(row: &CategoryReport) -> Vec<Row> {
        row.per_cut
            .iter()
            .map(|m| {
                (
                    m.scored,
                    m.mean_recall,
                    m.full_coverage,
                    m.answer_scored,
                    m.mean_answer_recall,
                    m.mean_context_tokens,
                    m.mean_items,
                )
            })
            .collect()
    }

    #[test]
    fn aggregate_hand_computed() {
        let r = example();
        assert_eq!(r.cuts, [Cut::K(1), Cut::Budget(30)]);
        let cats: Vec<Option<u8>> = r.categories.iter().map(|c| c.category).collect();
        assert_eq!(cats, [Some(1), Some(2), Some(5)]);

        let c1 = &r.categories[0];
        assert_eq!((c1.name, c1.questions, c1.scored), ("multi-hop", 2, 2));
        assert_eq!(
            metrics(c1),
            [
                (2, Some(0.25), Some(0.0), 2, Some(0.25), Some(11.0), Some(0.5)),
                (2, Some(1.0), Some(1.0), 2, Some(1.0), Some(32.0), Some(2.0))
            ]
        );

        let c2 = &r.categories[1];
        assert_eq!((c2.name, c2.questions, c2.scored), ("temporal", 2, 2));
        assert_eq!(
            metrics(c2),
            [
                (2, Some(0.625), Some(0.5), 1, Some(1.0), Some(7.5), Some(1.0)),
                (1, Some(0.5), Some(0.0), 0, None, Some(20.0), Some(3.0))
            ]
        );

        let c5 = &r.categories[2];
        assert_eq!((c5.name, c5.questions, c5.scored), ("adversarial", 1, 0));
        assert_eq!(
            metrics(c5),
            [
                (0, None, None, 0, None, Some(5.0), Some(1.0)),
                (0, None, None, 0, None, Some(15.0), Some(1.0))
            ]
        );

        let o = &r.overall;
        assert_eq!((o.category, o.name, o.questions, o.scored), (None, "overall", 5, 4));
        let m = &o.per_cut;
        assert_eq!(
            (m[0].scored, m[0].mean_recall, m[0].full_coverage),
            (4, Some(0.4375), Some(0.25))
        );
        assert_eq!((m[0].answer_scored, m[0].mean_answer_recall), (3, Some(0.5)));
        assert_eq!((m[0].mean_context_tokens, m[0].mean_items), (Some(8.4), Some(0.8)));
        assert_eq!((m[1].scored, m[1].mean_recall), (3, Some(2.5 / 3.0)));
        assert_eq!(m[1].full_coverage, Some(2.0 / 3.0));
        assert_eq!((m[1].answer_scored, m[1].mean_answer_recall), (2, Some(1.0)));
        assert_eq!((m[1].mean_context_tokens, m[1].mean_items), (Some(24.75), Some(2.0)));
        // Tokens of the questions with evidence over the evidence turns
        // found: (10 + 12 + 8 + 7) / 3 at k = 1, (30 + 34 + 20) / 5 within
        // 30 tokens (the adversarial question has no evidence, the last
        // no second cut); none found, none defined.
        assert_eq!(m[0].tokens_per_evidence_hit, Some(37.0 / 3.0));
        assert_eq!(m[1].tokens_per_evidence_hit, Some(84.0 / 5.0));
        assert_eq!(r.categories[2].per_cut[0].tokens_per_evidence_hit, None);

        // Latencies sorted: 50, 100, 200, 300, 1000 → rank 3 and rank 5.
        assert_eq!((r.latency_p50_us, r.latency_p95_us), (Some(200), Some(1000)));
    }

    #[test]
    fn misses_are_split_by_cause() {
        let cut = |ids: &[&str], answer: Option<f64>| CutResult {
            retrieved: strings(ids),
            answer_recall: answer,
            ..CutResult::default()
        };
        let q = |evidence: &[&str], deep: Option<&[&str]>, cuts: Vec<CutResult>| QuestionResult {
            category: 1,
            evidence: strings(evidence),
            cuts,
            latency_us: 1,
            deep: deep.map(strings),
        };
        let results = [
            // D1 packed at both cuts; D2 found deep, packed only at the
            // larger; D3 never found. Answer short at the first cut only.
            q(
                &["D1", "D2", "D3"],
                Some(&["D1", "D2", "D9"]),
                vec![cut(&["D1"], Some(0.5)), cut(&["D1", "D2"], Some(1.0))],
            ),
            // All evidence packed at both cuts, answer words absent at both.
            q(
                &["E1"],
                Some(&["E1"]),
                vec![cut(&["E1"], Some(0.0)), cut(&["E1"], Some(0.5))],
            ),
            // Evidence found deep, packed only at the larger cut.
            q(&["F1"], Some(&["F1"]), vec![cut(&[], Some(0.0)), cut(&["F1"], None)]),
            // No evidence and no answer: counts nothing.
            q(&[], Some(&[]), vec![cut(&[], None), cut(&[], None)]),
        ];
        let r = aggregate(&[Cut::Budget(10), Cut::Budget(20)], &results);
        let m0 = r.overall.per_cut[0].misses.expect("deep results were given");
        let m1 = r.overall.per_cut[1].misses.expect("deep results were given");
        assert_eq!(
            m0,
            Misses {
                evidence_missed: 3,
                not_retrieved: 1,
                not_packed: 2,
                answers_short: 3,
                answer_not_retrieved: 1,
                answer_not_packed: 1,
                answer_words_absent: 1,
            }
        );
        assert_eq!(
            m1,
            Misses {
                evidence_missed: 1,
                not_retrieved: 1,
                not_packed: 0,
                answers_short: 1,
                answer_not_retrieved: 0,
                answer_not_packed: 0,
                answer_words_absent: 1,
            }
        );
        let md = r.to_markdown();
        assert!(
            md.contains("| overall | 3 = 1 + 2 | 3 = 1 + 1 + 1 | 1 = 1 + 0 | 1 = 0 + 0 + 1 |"),
            "{md}"
        );
        assert_eq!(
            r.to_json()["overall"]["per_cut"][1]["misses"]["not_retrieved"],
            json!(1)
        );
        // Without deep results there is nothing to break down.
        assert!(example().overall.per_cut.iter().all(|m| m.misses.is_none()));
        assert!(!example().to_markdown().contains("Misses by cause"));
    }

    #[test]
    fn nearest_rank_percentiles() {
        assert_eq!(nearest_rank(&[], 50), None);
        assert_eq!(nearest_rank(&[7], 50), Some(7));
        assert_eq!(nearest_rank(&[7], 95), Some(7));
        let v: Vec<u64> = (1..=100).collect();
        assert_eq!((nearest_rank(&v, 50), nearest_rank(&v, 95)), (Some(50), Some(95)));
        let v: Vec<u64> = (1..=20).collect();
        assert_eq!((nearest_rank(&v, 50), nearest_rank(&v, 95)), (Some(10), Some(19)));
        assert_eq!(nearest_rank(&[1, 2], 50), Some(1));
        assert_eq!(nearest_rank(&[1, 2], 95), Some(2));
    }

    #[test]
    fn aggregate_empty() {
        let r = aggregate(&[Cut::K(5)], &[]);
        assert!(r.categories.is_empty());
        assert_eq!((r.overall.questions, r.overall.scored), (0, 0));
        assert_eq!(metrics(&r.overall), [(0, None, None, 0, None, None, None)]);
        assert_eq!((r.latency_p50_us, r.latency_p95_us), (None, None));
        assert!(r.to_markdown().contains("| overall | 0 | - | - | - | - | - |"));
    }

    #[test]
    fn markdown_table() {
        let md = example().to_markdown();
        let lines: Vec<&str> = md.lines().collect();
        assert_eq!(
            lines[0],
            "| category | n | ev@1 | full@1 | ans@1 | ans(r)@1 | tok@1 | ev≤30 | full≤30 | ans≤30 | ans(r)≤30 | tok≤30 |"
        );
        assert_eq!(lines[1], "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        assert_eq!(
            lines[2],
            "| multi-hop (1) | 2 | 0.250 | 0.000 | 0.250 | 0.250 | 11 | 1.000 | 1.000 | 1.000 | 1.000 | 32 |"
        );
        assert_eq!(
            lines[3],
            "| temporal (2) | 2 | 0.625 | 0.500 | 1.000 | 1.000 | 8 | 0.500 | 0.000 | - | - | 20 |"
        );
        assert_eq!(
            lines[4],
            "| adversarial (5) | 0 | - | - | - | - | 5 | - | - | - | - | 15 |"
        );
        assert!(lines[5].starts_with("| overall | 4 | 0.43"), "{}", lines[5]);
        assert!(
            lines[5].ends_with("| 0.833 | 0.667 | 1.000 | 1.000 | 25 |"),
            "{}",
            lines[5]
        );
        assert!(md.contains("over 5 questions: p50 200 us, p95 1000 us"), "{md}");
    }

    #[test]
    fn json_report() {
        let j = example().to_json();
        assert_eq!(
            j["cuts"],
            json!([{"cut": "k", "value": 1}, {"cut": "budget", "value": 30}])
        );
        assert_eq!(j["latency_us"], json!({"p50": 200, "p95": 1000}));
        assert_eq!(j["categories"].as_array().map(Vec::len), Some(3));
        assert_eq!(j["categories"][0]["name"], "multi-hop");
        assert_eq!(j["categories"][0]["category"], 1);
        assert_eq!(j["categories"][0]["per_cut"][0]["evidence_recall"], json!(0.25));
        assert_eq!(j["categories"][2]["per_cut"][1]["evidence_recall"], Value::Null);
        assert_eq!(j["overall"]["category"], Value::Null);
        assert_eq!(j["overall"]["questions"], 5);
        assert_eq!(j["overall"]["scored"], 4);
        assert_eq!(j["overall"]["per_cut"][1]["mean_context_tokens"], json!(24.75));
        assert_eq!(j["overall"]["per_cut"][1]["answer_recall"], json!(1.0));
        assert_eq!(j["overall"]["per_cut"][0]["cut"], "k");
    }

    #[test]
    fn rendered_answer_recall_is_averaged_beside_the_said_one() {
        let cut = |said: Option<f64>, rendered: Option<f64>| CutResult {
            answer_recall: said,
            rendered_answer_recall: rendered,
            ..CutResult::default()
        };
        let q = |said, rendered| QuestionResult {
            category: 2,
            evidence: Vec::new(),
            cuts: vec![cut(said, rendered)],
            latency_us: 1,
            deep: None,
        };
        let r = aggregate(
            &[Cut::K(3)],
            &[q(Some(0.0), Some(1.0)), q(Some(0.5), Some(0.5)), q(None, None)],
        );
        let m = &r.overall.per_cut[0];
        assert_eq!(m.answer_scored, 2);
        assert_eq!(m.mean_answer_recall, Some(0.25));
        assert_eq!(m.mean_rendered_answer_recall, Some(0.75));
        let j = r.to_json();
        assert_eq!(j["overall"]["per_cut"][0]["answer_recall"], json!(0.25));
        assert_eq!(j["overall"]["per_cut"][0]["answer_recall_rendered"], json!(0.75));
    }

    #[test]
    fn answer_recall_counts_content_words_in_the_context() {
        use crate::text::{content_words, words};
        let ctx = |t: &str| words(t).collect::<HashSet<String>>();
        let gold = content_words("the Berlin marathon in September");
        assert_eq!(
            answer_recall(
                &gold,
                &ctx("[2 March 2024] Bob: I am training for the Berlin marathon in September.")
            ),
            Some(1.0)
        );
        // Only the answer's stop words are present: nothing counts.
        assert_eq!(answer_recall(&gold, &ctx("in the")), Some(0.0));
        assert_eq!(answer_recall(&gold, &ctx("Berlin, Germany")), Some(1.0 / 3.0));
        // Whole tokens only: "marathons" is not "marathon".
        assert_eq!(answer_recall(&gold, &ctx("marathons")), Some(0.0));
        // No content words: unscorable.
        assert_eq!(answer_recall(&content_words("It is."), &ctx("it is")), None);
    }
}
