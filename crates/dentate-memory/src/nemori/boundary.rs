//! Episode boundary detection (Nemori §3.1.1).
//!
//! For each new message `m` and the buffer `M` of messages since the last
//! boundary, a detector answers `(boundary, confidence)`; the buffer is
//! segmented when `boundary ∧ confidence > σ` or `|M| ≥ β_max` (eq. 2),
//! and `m` starts the next buffer.
//!
//! Three detectors:
//! - **offline** ([`offline_decision`]): a new session or a time gap ends
//!   an episode outright; otherwise the confidence is the drop of the new
//!   message's embedding similarity to the recent buffer below the
//!   buffer's own running similarity, plus a bonus for a discourse marker
//!   that opens a new topic ("by the way", "anyway", "speaking of", …).
//!   It is weaker than the model: it sees words, not intent, so a topic
//!   change without new vocabulary or a marker goes unnoticed, and a long
//!   digression with new words inside one topic can split it.
//! - **per message, with a model** ([`llm_decision`]): the prompt
//!   describes the signals the paper names (contextual coherence, temporal
//!   markers, intent shifts, structure) and asks for
//!   `{"boundary", "confidence", "reason"}`.
//! - **batch, with a model** ([`llm_segments`]): once the buffer holds a
//!   window of messages (20), the model splits it into contiguous
//!   segments; all but the last become episodes and the last stays open.

use crate::llm::{Call, Llm, LlmError, ask_json, schema};
use crate::store::Message;
use crate::time::human_date;
use serde_json::Value;

/// When a buffer is segmented, and how the offline detector decides.
#[derive(Debug, Clone, PartialEq)]
pub struct BoundaryConfig {
    /// How boundaries are found with a model (offline ignores it).
    pub mode: BoundaryMode,
    /// No boundary is looked for before the buffer holds this many
    /// messages (default 2).
    pub min_buffer: usize,
    /// β_max: the buffer is segmented when it holds this many (default 25).
    pub max_buffer: usize,
    /// σ_boundary: a detected boundary segments the buffer only above this
    /// confidence (default 0.7).
    pub confidence: f32,
    /// Offline: a gap of at least this many seconds between two messages
    /// ends an episode (default 1,800).
    pub time_gap_secs: i64,
    /// Offline: messages at the end of the buffer the new message is
    /// compared with (default 4).
    pub window: usize,
    /// Offline: the similarity drop that gives confidence 0.5; twice this
    /// drop gives 1.0 (default 0.15, set for sentence embedders such as
    /// all-MiniLM-L6-v2).
    pub drop_scale: f32,
    /// Offline: confidence added by a topic-opening discourse marker
    /// (default 0.3).
    pub marker_bonus: f32,
}

impl Default for BoundaryConfig {
    fn default() -> Self {
        BoundaryConfig {
            mode: BoundaryMode::PerMessage,
            min_buffer: 2,
            max_buffer: 25,
            confidence: 0.7,
            time_gap_secs: 1800,
            window: 4,
            drop_scale: 0.15,
            marker_bonus: 0.3,
        }
    }
}

/// How a model finds boundaries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BoundaryMode {
    /// One call per new message: is it the start of a new episode?
    PerMessage,
    /// One call per `window` buffered messages (at most 20 in the
    /// reference): split them into segments.
    Batch {
        /// Messages per call.
        window: usize,
    },
}

/// A detector's answer for one new message.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Whether the new message starts a new episode.
    pub boundary: bool,
    /// Confidence in `[0, 1]`.
    pub confidence: f32,
    /// Why (for logs and tests).
    pub reason: String,
}

impl Decision {
    /// Eq. 2 without the size test: `boundary ∧ confidence > σ`.
    pub fn segments(&self, sigma: f32) -> bool {
        self.boundary && self.confidence > sigma
    }
}

/// Phrases that open a new topic when they start a message.
const MARKERS: &[&str] = &[
    "by the way",
    "btw",
    "anyway",
    "anyways",
    "speaking of",
    "on another note",
    "on a different note",
    "on a side note",
    "changing the subject",
    "to change the subject",
    "unrelated",
    "random question",
    "quick question",
    "oh, and",
    "oh and",
    "also,",
    "moving on",
    "switching gears",
    "guess what",
    "you know what",
];

/// The discourse marker `text` opens with, if any.
pub fn opening_marker(text: &str) -> Option<&'static str> {
    let t = text
        .trim_start_matches(|c: char| !c.is_alphanumeric())
        .to_lowercase()
        .replace('’', "'");
    MARKERS.iter().copied().find(|m| {
        t.strip_prefix(m)
            .is_some_and(|rest| rest.is_empty() || !rest.starts_with(|c: char| c.is_alphanumeric()))
    })
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

/// Cosine of `v` with the mean of `rows` (all unit vectors).
fn cos_to_mean(v: &[f32], rows: &[&[f32]]) -> f32 {
    if rows.is_empty() {
        return 0.0;
    }
    let mut mean = vec![0.0f32; v.len()];
    for r in rows {
        for (m, x) in mean.iter_mut().zip(r.iter()) {
            *m += x;
        }
    }
    let norm = dot(&mean, &mean).sqrt();
    if norm == 0.0 { 0.0 } else { dot(v, &mean) / norm }
}

/// The offline time-gap rule: a boundary when `next` comes at least
/// `time_gap_secs` after `last`.
pub fn time_gap(last: &Message, next: &Message, cfg: &BoundaryConfig) -> Option<Decision> {
    let (a, b) = (last.msg.said_at?, next.msg.said_at?);
    (b - a >= cfg.time_gap_secs).then(|| Decision {
        boundary: true,
        confidence: 1.0,
        reason: format!("{} minutes since the last message", (b - a) / 60),
    })
}

/// The offline detector: `buffer` and `next` with their unit embeddings.
pub fn offline_decision(buffer: &[(&Message, &[f32])], next: (&Message, &[f32]), cfg: &BoundaryConfig) -> Decision {
    let Some(&(last, _)) = buffer.last() else {
        return Decision {
            boundary: false,
            confidence: 0.0,
            reason: "empty buffer".into(),
        };
    };
    let (m, v) = next;
    if m.msg.session != last.msg.session {
        return Decision {
            boundary: true,
            confidence: 1.0,
            reason: format!("new session `{}`", m.msg.session),
        };
    }
    if let Some(gap) = time_gap(last, m, cfg) {
        return gap;
    }
    let w = cfg.window.max(1);
    let vecs: Vec<&[f32]> = buffer.iter().map(|(_, v)| *v).collect();
    let recent = &vecs[vecs.len().saturating_sub(w)..];
    let sim = cos_to_mean(v, recent);
    // The buffer's own coherence: each message against the window before
    // it. With fewer than two such pairs there is nothing to compare with.
    let own: Vec<f32> = (1..vecs.len())
        .map(|i| cos_to_mean(vecs[i], &vecs[i.saturating_sub(w)..i]))
        .collect();
    let drop = if own.len() >= 2 {
        own.iter().sum::<f32>() / own.len() as f32 - sim
    } else {
        0.0
    };
    let scale = cfg.drop_scale.max(1e-6);
    let mut confidence = (drop / (2.0 * scale)).clamp(0.0, 1.0);
    let marker = opening_marker(&m.msg.text);
    if marker.is_some() {
        confidence = (confidence + cfg.marker_bonus).min(1.0);
    }
    Decision {
        boundary: confidence >= 0.5,
        confidence,
        reason: match marker {
            Some(mk) => format!("similarity {sim:.2} (drop {drop:.2}), opens with `{mk}`"),
            None => format!("similarity {sim:.2} (drop {drop:.2})"),
        },
    }
}

/// One message as the prompts show it: `[n] (8 May 2023 13:56) speaker: text`.
pub(crate) fn prompt_line(n: usize, m: &Message) -> String {
    let when = m
        .msg
        .said_at
        .map(|t| {
            let hm = t.rem_euclid(86_400);
            format!(" ({} {:02}:{:02})", human_date(t), hm / 3600, hm % 3600 / 60)
        })
        .unwrap_or_default();
    format!("[{n}]{when} {}: {}", m.msg.speaker, m.msg.text)
}

const BOUNDARY_PROMPT: &str = include_str!("../prompts/nemori_boundary.txt");
const BATCH_PROMPT: &str = include_str!("../prompts/nemori_batch.txt");

/// The per-message detector with a model.
pub fn llm_decision(llm: &dyn Llm, buffer: &[&Message], next: &Message) -> Result<Decision, LlmError> {
    let mut user = String::from("Current episode so far:\n");
    for (i, m) in buffer.iter().enumerate() {
        user.push_str(&prompt_line(i + 1, m));
        user.push('\n');
    }
    user.push_str("\nNew message:\n");
    user.push_str(&prompt_line(buffer.len() + 1, next));
    let schema = schema::object(
        &[
            ("boundary", schema::boolean()),
            ("confidence", schema::number(0.0, 1.0)),
            ("reason", schema::text()),
        ],
        &["boundary", "confidence"],
    );
    ask_json(
        llm,
        &Call::json("nemori_boundary", &schema),
        BOUNDARY_PROMPT,
        &user,
        |v| {
            let boundary = v
                .get("boundary")
                .and_then(Value::as_bool)
                .ok_or("`boundary` must be true or false")?;
            let confidence = v
                .get("confidence")
                .and_then(Value::as_f64)
                .filter(|c| (0.0..=1.0).contains(c))
                .ok_or("`confidence` must be a number from 0 to 1")?;
            let reason = v.get("reason").and_then(Value::as_str).unwrap_or("").to_string();
            Ok(Decision {
                boundary,
                confidence: confidence as f32,
                reason,
            })
        },
    )
}

/// The batch detector with a model: splits `window` into contiguous
/// segments, returned as their lengths (summing to `window.len()`).
pub fn llm_segments(llm: &dyn Llm, window: &[&Message]) -> Result<Vec<usize>, LlmError> {
    let n = window.len();
    let mut user = format!("Messages (1 to {n}):\n");
    for (i, m) in window.iter().enumerate() {
        user.push_str(&prompt_line(i + 1, m));
        user.push('\n');
    }
    let segment = schema::object(
        &[
            ("start", schema::integer(1, n)),
            ("end", schema::integer(1, n)),
            ("topic", schema::short()),
        ],
        &["start", "end"],
    );
    let schema = schema::object(&[("segments", schema::array(segment, Some(n)))], &["segments"]);
    ask_json(llm, &Call::json("nemori_segments", &schema), BATCH_PROMPT, &user, |v| {
        parse_segments(v, n)
    })
}

/// Reads a batch answer `{"segments": [{"start", "end"}, …]}` (1-based,
/// inclusive) as the split of `1..=n` its starts make ([`tiling`]).
fn parse_segments(v: &Value, n: usize) -> Result<Vec<usize>, String> {
    let segs = v
        .get("segments")
        .and_then(Value::as_array)
        .ok_or("`segments` must be a list")?;
    Ok(tiling(segs, n, "segment")?.into_iter().map(|(_, len)| len).collect())
}

/// Reads a list of `{"start", "end"}` blocks (1-based, inclusive) that
/// should tile `1..=n` as the split their starts make: blocks in order of
/// their starts (a block written backwards is turned round), the first
/// starting at 1, each running to the next one's start, the last to `n`;
/// a block that starts where an earlier one does adds nothing. A model's
/// blocks that overlap, leave gaps or come out of order (small models
/// write them so) are thus read as the boundaries they mark, rather than
/// refused. Returns, per block of the split, the index of the answer's
/// block it comes from and its length. An answer with no block, or a
/// block without integer `start` and `end` in `1..=n`, is an error; `what`
/// names a block in errors.
pub(crate) fn tiling(segs: &[Value], n: usize, what: &str) -> Result<Vec<(usize, usize)>, String> {
    let mut starts = Vec::with_capacity(segs.len());
    for (i, s) in segs.iter().enumerate() {
        let get = |k: &str| s.get(k).and_then(Value::as_u64);
        let (Some(a), Some(b)) = (get("start"), get("end")) else {
            return Err(format!("{what} {} needs integer `start` and `end`", i + 1));
        };
        let (start, end) = (a.min(b), a.max(b));
        if start < 1 || end > n as u64 {
            return Err(format!("{what} {} is {a}–{b}, outside 1–{n}", i + 1));
        }
        starts.push((start as usize, i));
    }
    starts.sort();
    starts.dedup_by_key(|(start, _)| *start);
    let Some(first) = starts.first_mut() else {
        return Err(format!("no {what}: at least one must cover 1–{n}"));
    };
    first.0 = 1;
    let ends = starts.iter().skip(1).map(|&(s, _)| s).chain([n + 1]);
    Ok(starts.iter().zip(ends).map(|(&(s, i), e)| (i, e - s)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::NewMessage;
    use serde_json::json;

    fn m(session: &str, minute: i64, text: &str) -> Message {
        Message {
            id: minute,
            user: "u".into(),
            seq: minute,
            msg: NewMessage {
                session: session.into(),
                speaker: "Ann".into(),
                text: text.into(),
                said_at: Some(1_683_000_000 + minute * 60),
                source_ref: None,
            },
        }
    }

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = dot(v, v).sqrt();
        v.iter().map(|x| x / n).collect()
    }

    #[test]
    fn markers_open_messages_only() {
        assert_eq!(opening_marker("By the way, did you see it?"), Some("by the way"));
        assert_eq!(opening_marker("  ...anyway I left"), Some("anyway"));
        assert_eq!(opening_marker("Speaking of cats — Pixel!"), Some("speaking of"));
        assert_eq!(opening_marker("I walked anyway."), None);
        assert_eq!(opening_marker("Also, the cello"), Some("also,"));
        assert_eq!(opening_marker("Alsoran"), None);
        assert_eq!(opening_marker("btwx"), None);
    }

    #[test]
    fn sessions_and_gaps_end_episodes() {
        let cfg = BoundaryConfig::default();
        let a = m("s1", 0, "hello");
        let b = m("s2", 1, "hello again");
        let v = unit(&[1.0, 0.0]);
        let d = offline_decision(&[(&a, &v)], (&b, &v), &cfg);
        assert!(d.segments(cfg.confidence), "{d:?}");
        let c = m("s1", 31, "later that day");
        let d = offline_decision(&[(&a, &v)], (&c, &v), &cfg);
        assert!(d.segments(cfg.confidence) && d.reason.contains("31 minutes"), "{d:?}");
        let c = m("s1", 29, "soon after");
        assert!(!offline_decision(&[(&a, &v)], (&c, &v), &cfg).boundary);
    }

    #[test]
    fn a_similarity_drop_is_a_boundary_and_a_marker_lowers_the_bar() {
        let cfg = BoundaryConfig::default();
        let msgs: Vec<Message> = (0..5).map(|i| m("s1", i, "cats")).collect();
        // A coherent buffer around one direction.
        let vs: Vec<Vec<f32>> = [[1.0, 0.1, 0.0], [1.0, 0.0, 0.1], [1.0, 0.12, 0.0], [1.0, 0.0, 0.05]]
            .iter()
            .map(|v| unit(v))
            .collect();
        let buf: Vec<(&Message, &[f32])> = msgs.iter().zip(&vs).map(|(m, v)| (m, v.as_slice())).collect();
        let same = unit(&[1.0, 0.05, 0.05]);
        let d = offline_decision(&buf, (&msgs[4], &same), &cfg);
        assert!(!d.boundary, "{d:?}");
        let off = unit(&[0.0, 1.0, 0.0]);
        let d = offline_decision(&buf, (&msgs[4], &off), &cfg);
        assert!(d.segments(cfg.confidence), "{d:?}");
        // A moderate drop alone stays under σ; with a marker it crosses it.
        let half = unit(&[1.0, 0.75, 0.0]);
        let plain = offline_decision(&buf, (&msgs[4], &half), &cfg);
        let marked = m("s1", 4, "By the way, my sister moved to Lisbon");
        let with = offline_decision(&buf, (&marked, &half), &cfg);
        assert!(!plain.segments(cfg.confidence), "{plain:?}");
        assert!(with.segments(cfg.confidence), "{with:?}");
        assert!((with.confidence - plain.confidence - cfg.marker_bonus).abs() < 1e-6);
    }

    #[test]
    fn batch_answers_are_read_as_the_split_their_starts_make() {
        let seg = |pairs: &[(u64, u64)]| json!({"segments": pairs.iter().map(|(s, e)| json!({"start": s, "end": e})).collect::<Vec<_>>()});
        for (answer, split) in [
            // A clean tiling.
            (seg(&[(1, 3), (4, 5)]), vec![3, 2]),
            // A gap: the earlier segment runs on to the next start.
            (seg(&[(1, 3), (5, 5)]), vec![4, 1]),
            // An overlap: the later segment starts where it says.
            (seg(&[(1, 3), (3, 5)]), vec![2, 3]),
            // Too short, or not from 1: one segment over everything.
            (seg(&[(1, 4)]), vec![5]),
            (seg(&[(2, 5)]), vec![5]),
            // Out of order, backwards, repeated.
            (seg(&[(4, 5), (3, 1), (4, 4)]), vec![3, 2]),
        ] {
            assert_eq!(parse_segments(&answer, 5).unwrap(), split, "{answer}");
        }
        for bad in [
            seg(&[(1, 6)]),
            seg(&[(0, 5)]),
            seg(&[]),
            json!({"segments": "1-5"}),
            json!({"segments": [{"start": "1", "end": 5}]}),
        ] {
            assert!(parse_segments(&bad, 5).is_err(), "{bad}");
        }
    }
}
