//! Predict–calibrate semantic memory (Nemori §3.2).
//!
//! For a new episode: (1) retrieve up to `m` known statements whose
//! cosine to the episode (title ⊕ narrative) is at least σ_s, and predict
//! the episode from its title and them; (2) compare the prediction with
//! the episode's **original messages** and distil what it missed into new
//! statements; (3) integrate them, skipping near-duplicates of what is
//! known.
//!
//! With a model, (1) and (2) are two prompts. Offline the prediction is
//! the retrieved statements themselves, and the gap is measured as
//! **embedding novelty**: a sentence of the original messages that states
//! something (enough content words, not a question) becomes a statement
//! when no retrieved statement, and no statement already taken from this
//! episode, is within the novelty cosine of it. This is weaker than the
//! model: a sentence that rephrases a known fact in new words counts as
//! new, a changed detail in familiar words ("moved to Porto" after "moved
//! to Lisbon") can look known, and the statement is the speaker's own
//! sentence, first person and relative dates included, not a rewritten
//! fact.

use super::boundary::prompt_line;
use super::episode::{Sentence, sentence_words};
use crate::llm::{Call, Llm, LlmError, ask_json, schema};
use crate::store::Message;
use serde_json::Value;

/// Predict–calibrate settings.
#[derive(Debug, Clone, PartialEq)]
pub struct SemanticConfig {
    /// m: known statements retrieved for a prediction (default 10).
    pub max_relevant: usize,
    /// σ_s: the least cosine of a retrieved statement to the episode
    /// (default 0.7; the paper's LoCoMo runs used 0.0).
    pub relevant_threshold: f32,
    /// Offline: a sentence is novel when its cosine to every retrieved or
    /// already taken statement is below this (default 0.75).
    pub novelty: f32,
    /// A new statement whose cosine to a stored one reaches this is a
    /// near-duplicate and is not stored (default 0.92).
    pub dedupe: f32,
    /// Offline: content words a sentence needs to state a fact (default 3).
    pub min_content_words: usize,
    /// Statements kept per episode (default 16).
    pub max_statements: usize,
}

impl Default for SemanticConfig {
    fn default() -> Self {
        SemanticConfig {
            max_relevant: 10,
            relevant_threshold: 0.7,
            novelty: 0.75,
            dedupe: 0.92,
            min_content_words: 3,
            max_statements: 16,
        }
    }
}

/// A distilled statement, before integration.
#[derive(Debug, Clone, PartialEq)]
pub struct Statement {
    /// The knowledge statement.
    pub text: String,
    /// Indices, in the segment, of the messages it comes from.
    pub sources: Vec<usize>,
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Offline calibration: the sentences (with their unit embeddings, `dim`
/// each, in `vecs`) that no `known` vector predicts, as statements, each
/// with the index of its sentence.
pub fn novel_sentences(
    sentences: &[Sentence],
    vecs: &[f32],
    dim: usize,
    known: &[Vec<f32>],
    cfg: &SemanticConfig,
) -> Vec<(usize, Statement)> {
    let mut taken: Vec<&[f32]> = Vec::new();
    let mut out = Vec::new();
    for (i, (s, v)) in sentences.iter().zip(vecs.chunks_exact(dim.max(1))).enumerate() {
        if out.len() >= cfg.max_statements {
            break;
        }
        if s.text.trim_end().ends_with('?') || sentence_words(&s.text, &[]).len() < cfg.min_content_words {
            continue;
        }
        let predicted = known
            .iter()
            .map(Vec::as_slice)
            .chain(taken.iter().copied())
            .any(|k| dot(k, v) >= cfg.novelty);
        if !predicted {
            taken.push(v);
            out.push((
                i,
                Statement {
                    text: format!("{}: {}", s.speaker, s.text),
                    sources: vec![s.message],
                },
            ));
        }
    }
    out
}

const PREDICT_PROMPT: &str = include_str!("../prompts/nemori_predict.txt");
const DISTILL_PROMPT: &str = include_str!("../prompts/nemori_distill.txt");

/// Stage 1 with a model: the episode predicted from its title and the
/// relevant known statements.
pub fn predict(llm: &dyn Llm, title: &str, known: &[String]) -> Result<String, LlmError> {
    let mut user = format!("Episode title: {title}\n\nKnown statements:\n");
    if known.is_empty() {
        user.push_str("(none yet)\n");
    }
    for k in known {
        user.push_str("- ");
        user.push_str(k);
        user.push('\n');
    }
    let schema = schema::object(&[("prediction", schema::long_text())], &["prediction"]);
    ask_json(
        llm,
        &Call::json("nemori_predict", &schema),
        PREDICT_PROMPT,
        &user,
        |v| {
            v.get("prediction")
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(str::to_string)
                .ok_or_else(|| "`prediction` must be a non-empty string".to_string())
        },
    )
}

/// Stage 2 with a model: statements for what `prediction` missed in the
/// original `segment`.
pub fn distill(
    llm: &dyn Llm,
    prediction: &str,
    segment: &[&Message],
    cfg: &SemanticConfig,
) -> Result<Vec<Statement>, LlmError> {
    let mut user = format!("Prediction:\n{prediction}\n\nOriginal messages:\n");
    for (i, m) in segment.iter().enumerate() {
        user.push_str(&prompt_line(i + 1, m));
        user.push('\n');
    }
    let n = segment.len();
    let max = cfg.max_statements;
    let statement = schema::object(
        &[
            ("statement", schema::text()),
            ("sources", schema::array(schema::integer(1, n), Some(n))),
        ],
        &["statement"],
    );
    let schema = schema::object(
        &[("statements", schema::array(statement, Some(max.max(1))))],
        &["statements"],
    );
    ask_json(
        llm,
        &Call::json("nemori_distill", &schema),
        DISTILL_PROMPT,
        &user,
        |v| parse_statements(v, n, max),
    )
}

/// Checks `{"statements": [{"statement", "sources": [1-based]}]}`; a
/// statement without sources is credited to the whole segment.
fn parse_statements(v: &Value, n: usize, max: usize) -> Result<Vec<Statement>, String> {
    let list = v
        .get("statements")
        .and_then(Value::as_array)
        .ok_or("`statements` must be a list")?;
    let mut out = Vec::new();
    for (i, s) in list.iter().enumerate() {
        let text = s
            .get("statement")
            .and_then(Value::as_str)
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or(format!("statement {} needs a non-empty `statement` string", i + 1))?;
        let sources = match s.get("sources") {
            None | Some(Value::Null) => (0..n).collect(),
            Some(Value::Array(a)) => {
                let mut src = Vec::with_capacity(a.len());
                for x in a {
                    match x.as_u64().map(|x| x as usize) {
                        Some(k) if (1..=n).contains(&k) => src.push(k - 1),
                        _ => return Err(format!("statement {} cites {x}, not a message number 1–{n}", i + 1)),
                    }
                }
                src.sort_unstable();
                src.dedup();
                if src.is_empty() { (0..n).collect() } else { src }
            }
            Some(_) => return Err(format!("statement {}: `sources` must be a list of numbers", i + 1)),
        };
        out.push(Statement {
            text: text.replace('\n', " "),
            sources,
        });
    }
    out.truncate(max);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn s(message: usize, text: &str) -> Sentence {
        Sentence {
            message,
            speaker: "Ann".into(),
            text: text.into(),
        }
    }

    #[test]
    fn only_unpredicted_statements_of_fact_are_novel() {
        let sents = [
            s(0, "I adopted a grey cat called Pixel."),
            s(0, "Do you like cats?"),
            s(1, "Thanks so much!"),
            s(1, "My sister Clara moved to Lisbon."),
            s(2, "Clara now lives in Lisbon as an architect."),
        ];
        // Orthogonal directions except the last two sentences, which are close.
        let e = |i: usize| {
            let mut v = vec![0.0f32; 4];
            v[i] = 1.0;
            v
        };
        let mut vecs = Vec::new();
        for v in [e(0), e(1), e(2), e(3)] {
            vecs.extend(v);
        }
        vecs.extend([0.0, 0.0, 0.6, 0.8]);
        let cfg = SemanticConfig::default();
        let out = novel_sentences(&sents, &vecs, 4, &[], &cfg);
        let texts: Vec<&str> = out.iter().map(|(_, s)| s.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "Ann: I adopted a grey cat called Pixel.",
                "Ann: My sister Clara moved to Lisbon."
            ]
        );
        assert_eq!((out[1].0, &out[1].1.sources), (3, &vec![1]));
        // What is known is not learned again.
        let out = novel_sentences(&sents, &vecs, 4, &[e(0)], &cfg);
        assert_eq!(out.len(), 1);
        assert!(out[0].1.text.contains("Lisbon"));
    }

    #[test]
    fn distilled_statements_are_checked() {
        let v = json!({"statements": [
            {"statement": "Ann adopted a cat named Pixel.", "sources": [2, 1, 2]},
            {"statement": "Bob runs marathons."}
        ]});
        let out = parse_statements(&v, 3, 10).unwrap();
        assert_eq!(out[0].sources, vec![0, 1]);
        assert_eq!(out[1].sources, vec![0, 1, 2]);
        assert_eq!(parse_statements(&v, 3, 1).unwrap().len(), 1);
        assert!(parse_statements(&json!({"statements": []}), 3, 10).unwrap().is_empty());
        for bad in [
            json!({"statements": [{"statement": "x", "sources": [4]}]}),
            json!({"statements": [{"statement": "x", "sources": [0]}]}),
            json!({"statements": [{"statement": "  "}]}),
            json!({"statements": [{"text": "x"}]}),
            json!({"statements": "x"}),
            json!({"facts": []}),
        ] {
            assert!(parse_statements(&bad, 3, 10).is_err(), "{bad}");
        }
    }
}
