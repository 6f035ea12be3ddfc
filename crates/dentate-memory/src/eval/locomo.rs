//! LoCoMo benchmark loading and retrieval-evaluation helpers.
//!
//! [LoCoMo](https://snap-research.github.io/locomo/) is a long-term conversational memory benchmark. Its data file
//! is a JSON array of *samples*; each sample holds one two-person conversation split into numbered sessions plus a
//! list of questions whose `evidence` field names the dialogue turns (`"D<session>:<turn>"`) that support the answer.
//!
//! ```text
//! [{ "sample_id": "conv-x",
//!    "conversation": { "speaker_a": "A", "speaker_b": "B",
//!                      "session_1_date_time": "1:56 pm on 8 May, 2023",
//!                      "session_1": [{ "speaker": "A", "dia_id": "D1:1", "text": "...",
//!                                      "blip_caption": "optional photo caption" }, ...], ... },
//!    "qa": [{ "question": "...", "answer": "..." | 2022, "adversarial_answer": "...",
//!             "evidence": ["D1:1", ...], "category": 1..=5 }, ...],
//!    ... other keys (observations, summaries) are ignored ... }]
//! ```
//!
//! The published data has a handful of defects. [`parse`] repairs what can be repaired, drops what cannot, and
//! counts every intervention in a [`SkipReport`] so an evaluation can state exactly what it ran on:
//!
//! * evidence strings holding several ids (`"D8:6; D9:17"`) are split; stray whitespace, lowercase `d`, a colon
//!   after the `D` (`"D:11:26"`), a trailing colon and leading zeros are normalised to the canonical `"D11:26"`;
//!   unrecoverable strings (e.g. a bare `"D"`) are dropped;
//! * evidence ids that name no turn of the conversation are dropped, duplicates are removed, and questions left with
//!   no evidence are kept (so answer-level scoring still sees them) but counted; evidence recall does not score
//!   them;
//! * questions with no question text or with a category outside `1..=5` are skipped;
//! * numeric answers (e.g. `2022`) are converted to strings;
//! * `session_N_date_time` keys without a matching `session_N` create no session.
//!
//! Turns that carry a photo (`blip_caption`) get ` [shares a photo: <caption>]` appended to their text, because in
//! the benchmark the caption is the only textual trace of the photo and questions are asked about it.
//!
//! The metrics computed over it live in [`super::metrics`]; the evaluation that runs pipelines on it in
//! [`crate::eval`].

use crate::time::parse_digits;
pub use crate::time::parse_locomo_date;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use serde_json::{Map, Value};

/// Errors returned by [`parse`] and [`load`].
#[derive(Debug, thiserror::Error)]
pub enum LocomoError {
    /// The file could not be read.
    #[error("cannot read LoCoMo file {}: {source}", path.display())]
    Io {
        /// The path that was being read.
        path: PathBuf,
        /// The underlying I/O error.
        #[source]
        source: std::io::Error,
    },
    /// The input is not valid JSON.
    #[error("LoCoMo data is not valid JSON: {0}")]
    Json(#[from] serde_json::Error),
    /// The JSON is valid but not shaped like LoCoMo data (a missing or mistyped structural field).
    #[error("unexpected LoCoMo structure in sample {sample}: {reason}")]
    Shape {
        /// The sample's `sample_id`, or `#<index>` when the id itself is unusable, or `<top level>`.
        sample: String,
        /// What was wrong.
        reason: String,
    },
    /// A conversation selection ([`Split`]) names a sample the file does not hold, or selects nothing.
    #[error("conversation selection: {0}")]
    Selection(String),
}

/// A parsed LoCoMo file.
#[derive(Debug, Clone, PartialEq)]
pub struct Dataset {
    /// The conversations (samples), in file order.
    pub conversations: Vec<Conversation>,
    /// What was repaired, dropped or skipped while parsing.
    pub skipped: SkipReport,
}

/// One LoCoMo sample: a two-person conversation and the questions asked about it.
#[derive(Debug, Clone, PartialEq)]
pub struct Conversation {
    /// The sample id, e.g. `"conv-26"`.
    pub sample_id: String,
    /// Name of the first speaker.
    pub speaker_a: String,
    /// Name of the second speaker.
    pub speaker_b: String,
    /// Sessions in ascending session number.
    pub sessions: Vec<Session>,
    /// Usable questions, in file order.
    pub qa: Vec<Qa>,
}

/// One session (a sitting) of a conversation.
#[derive(Debug, Clone, PartialEq)]
pub struct Session {
    /// The session number `N` from the `session_N` key.
    pub index: u32,
    /// The raw `session_N_date_time` string (trimmed), if present and non-empty.
    pub date_time: Option<String>,
    /// [`Session::date_time`] parsed with [`parse_locomo_date`]: Unix seconds, reading the time as UTC.
    pub said_at: Option<i64>,
    /// The turns, in file order.
    pub turns: Vec<Turn>,
}

/// One dialogue turn.
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// Canonical dialogue id, `"D<session>:<turn>"`.
    pub dia_id: String,
    /// Who spoke.
    pub speaker: String,
    /// What was said. When the turn shares a photo (`blip_caption` present and non-empty), the text is followed by
    /// ` [shares a photo: <caption>]` (or is just `[shares a photo: <caption>]` when the turn has no text).
    pub text: String,
}

/// One benchmark question.
#[derive(Debug, Clone, PartialEq)]
pub struct Qa {
    /// The question text.
    pub question: String,
    /// The gold answer; numeric answers are converted to their decimal string. Absent for most adversarial
    /// (category 5) questions.
    pub answer: Option<String>,
    /// For adversarial questions: the tempting but wrong answer.
    pub adversarial_answer: Option<String>,
    /// Canonical, de-duplicated evidence dialogue ids (`"D1:3"`) that exist in the conversation.
    pub evidence: Vec<String>,
    /// Question category, `1..=5`; see [`category_name`].
    pub category: u8,
}

/// Counts of every repair, drop and skip [`parse`] performed. All counts are over the whole file.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SkipReport {
    /// `session_N_date_time` keys with no `session_N`; no session is created for them.
    pub date_times_without_session: usize,
    /// Sessions with no (or an empty) `session_N_date_time`.
    pub sessions_without_date: usize,
    /// Sessions whose date string [`parse_locomo_date`] could not parse (`said_at` is `None`).
    pub unparseable_dates: usize,
    /// Sessions with no turns (kept).
    pub empty_sessions: usize,
    /// Turns skipped because they are not objects or lack a string `dia_id`, `speaker` or `text`.
    pub malformed_turns_skipped: usize,
    /// Turn `dia_id`s rewritten to canonical form.
    pub turn_ids_normalised: usize,
    /// Turn `dia_id`s that are not of the form `D<n>:<m>` (kept verbatim, trimmed).
    pub unparseable_turn_ids: usize,
    /// Turns whose `dia_id` repeats an earlier turn of the same conversation (kept).
    pub duplicate_turn_ids: usize,
    /// Turns whose photo caption was appended to the text.
    pub photo_captions_appended: usize,
    /// Evidence strings that held several ids and were split (`"D8:6; D9:17"`).
    pub evidence_split: usize,
    /// Evidence ids rewritten to canonical form (whitespace, case, stray colons, leading zeros).
    pub evidence_normalised: usize,
    /// Evidence entries dropped because no dialogue id could be recovered from them (e.g. `"D"`).
    pub evidence_malformed_dropped: usize,
    /// Evidence ids dropped because the conversation has no such turn.
    pub evidence_unknown_dropped: usize,
    /// Evidence ids dropped because they repeat an earlier id of the same question.
    pub evidence_duplicates_dropped: usize,
    /// Questions kept with no evidence left (the evaluator does not score their recall).
    pub empty_evidence_questions: usize,
    /// Questions skipped because the category is missing or outside `1..=5`.
    pub invalid_category_skipped: usize,
    /// Questions skipped because the question text is missing, empty or not a string (or the entry is not an object).
    pub missing_question_skipped: usize,
    /// Numeric `answer`/`adversarial_answer` values converted to strings.
    pub numeric_answers_converted: usize,
    /// `answer`/`adversarial_answer` values of another type (bool, array, object) that were dropped.
    pub unusable_answers: usize,
}

impl SkipReport {
    /// Every counter with its field name, in declaration order.
    pub fn counts(&self) -> [(&'static str, usize); 19] {
        [
            ("date_times_without_session", self.date_times_without_session),
            ("sessions_without_date", self.sessions_without_date),
            ("unparseable_dates", self.unparseable_dates),
            ("empty_sessions", self.empty_sessions),
            ("malformed_turns_skipped", self.malformed_turns_skipped),
            ("turn_ids_normalised", self.turn_ids_normalised),
            ("unparseable_turn_ids", self.unparseable_turn_ids),
            ("duplicate_turn_ids", self.duplicate_turn_ids),
            ("photo_captions_appended", self.photo_captions_appended),
            ("evidence_split", self.evidence_split),
            ("evidence_normalised", self.evidence_normalised),
            ("evidence_malformed_dropped", self.evidence_malformed_dropped),
            ("evidence_unknown_dropped", self.evidence_unknown_dropped),
            ("evidence_duplicates_dropped", self.evidence_duplicates_dropped),
            ("empty_evidence_questions", self.empty_evidence_questions),
            ("invalid_category_skipped", self.invalid_category_skipped),
            ("missing_question_skipped", self.missing_question_skipped),
            ("numeric_answers_converted", self.numeric_answers_converted),
            ("unusable_answers", self.unusable_answers),
        ]
    }

    /// The nonzero counters as `name=count` pairs separated by `", "`, or `"none"` when every counter is zero.
    pub fn summary(&self) -> String {
        let parts: Vec<String> = self
            .counts()
            .iter()
            .filter(|(_, n)| *n > 0)
            .map(|(name, n)| format!("{name}={n}"))
            .collect();
        if parts.is_empty() {
            "none".to_string()
        } else {
            parts.join(", ")
        }
    }
}

/// Reads and parses a LoCoMo JSON file; see [`parse`].
pub fn load(path: &Path) -> Result<Dataset, LocomoError> {
    let text = std::fs::read_to_string(path).map_err(|source| LocomoError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse(&text)
}

/// Parses LoCoMo JSON: a top-level array of samples, or a single sample object.
///
/// Structural problems (a sample without a `conversation` object, speakers or `sample_id`, a `session_N` or `qa`
/// that is not an array) are errors; data defects are repaired or skipped and counted in [`Dataset::skipped`] (see
/// the module documentation).
pub fn parse(json: &str) -> Result<Dataset, LocomoError> {
    let value: Value = serde_json::from_str(json)?;
    let samples: Vec<&Value> = match &value {
        Value::Array(items) => items.iter().collect(),
        Value::Object(_) => vec![&value],
        _ => {
            return Err(LocomoError::Shape {
                sample: "<top level>".to_string(),
                reason: "expected an array of samples or a single sample object".to_string(),
            });
        }
    };
    let mut skipped = SkipReport::default();
    let mut conversations = Vec::with_capacity(samples.len());
    for (i, sample) in samples.into_iter().enumerate() {
        conversations.push(parse_sample(i, sample, &mut skipped)?);
    }
    Ok(Dataset { conversations, skipped })
}

fn shape(sample: &str, reason: impl Into<String>) -> LocomoError {
    LocomoError::Shape {
        sample: sample.to_string(),
        reason: reason.into(),
    }
}

fn required_str<'a>(obj: &'a Map<String, Value>, key: &str, sample: &str) -> Result<&'a str, LocomoError> {
    match obj.get(key) {
        Some(Value::String(s)) if !s.trim().is_empty() => Ok(s.trim()),
        Some(_) => Err(shape(sample, format!("`{key}` is not a non-empty string"))),
        None => Err(shape(sample, format!("missing `{key}`"))),
    }
}

/// The raw JSON pieces of one session number.
#[derive(Default)]
struct SessionParts<'a> {
    turns: Option<&'a Value>,
    date_time: Option<&'a Value>,
}

/// Splits a conversation key into its session number and whether it is the date key. Only canonical decimal numbers
/// (no sign, no leading zero) are accepted so that two keys can never name the same session.
fn session_key(key: &str) -> Option<(u32, bool)> {
    let rest = key.strip_prefix("session_")?;
    let (num, is_date) = match rest.strip_suffix("_date_time") {
        Some(num) => (num, true),
        None => (rest, false),
    };
    if num.len() > 1 && num.starts_with('0') {
        return None;
    }
    Some((parse_digits(num)?, is_date))
}

fn parse_sample(i: usize, value: &Value, skipped: &mut SkipReport) -> Result<Conversation, LocomoError> {
    let index_name = format!("#{i}");
    let obj = value
        .as_object()
        .ok_or_else(|| shape(&index_name, "sample is not a JSON object"))?;
    let sample_id = required_str(obj, "sample_id", &index_name)?.to_string();
    let sid = sample_id.as_str();
    let conv = match obj.get("conversation") {
        Some(Value::Object(conv)) => conv,
        Some(_) => return Err(shape(sid, "`conversation` is not an object")),
        None => return Err(shape(sid, "missing `conversation`")),
    };
    let speaker_a = required_str(conv, "speaker_a", sid)?.to_string();
    let speaker_b = required_str(conv, "speaker_b", sid)?.to_string();

    let mut parts: BTreeMap<u32, SessionParts<'_>> = BTreeMap::new();
    for (key, v) in conv {
        if let Some((n, is_date)) = session_key(key) {
            let entry = parts.entry(n).or_default();
            if is_date {
                entry.date_time = Some(v);
            } else {
                entry.turns = Some(v);
            }
        }
    }

    let mut sessions = Vec::new();
    // A B-tree, not a hash set: the reader's work (and its fuzz coverage) never depends on a random hasher seed.
    let mut seen_ids: BTreeSet<String> = BTreeSet::new();
    for (index, part) in parts {
        let Some(turns_value) = part.turns else {
            skipped.date_times_without_session += 1;
            continue;
        };
        let turns_json = turns_value
            .as_array()
            .ok_or_else(|| shape(sid, format!("`session_{index}` is not an array")))?;
        let date_time = match part.date_time {
            Some(Value::String(s)) if !s.trim().is_empty() => Some(s.trim().to_string()),
            _ => None,
        };
        let said_at = date_time.as_deref().and_then(parse_locomo_date);
        if date_time.is_none() {
            skipped.sessions_without_date += 1;
        } else if said_at.is_none() {
            skipped.unparseable_dates += 1;
        }
        let mut turns = Vec::with_capacity(turns_json.len());
        for t in turns_json {
            if let Some(turn) = parse_turn(t, skipped) {
                if !seen_ids.insert(turn.dia_id.clone()) {
                    skipped.duplicate_turn_ids += 1;
                }
                turns.push(turn);
            }
        }
        if turns.is_empty() {
            skipped.empty_sessions += 1;
        }
        sessions.push(Session {
            index,
            date_time,
            said_at,
            turns,
        });
    }

    let qa_json: &[Value] = match obj.get("qa") {
        None | Some(Value::Null) => &[],
        Some(Value::Array(items)) => items,
        Some(_) => return Err(shape(sid, "`qa` is not an array")),
    };
    let mut qa = Vec::with_capacity(qa_json.len());
    for q in qa_json {
        if let Some(q) = parse_qa(q, &seen_ids, skipped) {
            qa.push(q);
        }
    }
    Ok(Conversation {
        sample_id,
        speaker_a,
        speaker_b,
        sessions,
        qa,
    })
}

fn parse_turn(value: &Value, skipped: &mut SkipReport) -> Option<Turn> {
    let fields = value.as_object().and_then(|obj| {
        let dia_id = obj.get("dia_id")?.as_str()?;
        let speaker = obj.get("speaker")?.as_str()?;
        let text = obj.get("text")?.as_str()?;
        Some((obj, dia_id, speaker, text))
    });
    let Some((obj, raw_id, speaker, text)) = fields else {
        skipped.malformed_turns_skipped += 1;
        return None;
    };
    let compact: String = raw_id.chars().filter(|c| !c.is_whitespace()).collect();
    let dia_id = match canonical_dia_id(&compact) {
        Some(id) => {
            if id != raw_id {
                skipped.turn_ids_normalised += 1;
            }
            id
        }
        None => {
            skipped.unparseable_turn_ids += 1;
            raw_id.trim().to_string()
        }
    };
    let mut text = text.to_string();
    if let Some(caption) = obj
        .get("blip_caption")
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|c| !c.is_empty())
    {
        if !text.is_empty() {
            text.push(' ');
        }
        // `write!` into a `String` cannot fail.
        let _ = write!(text, "[shares a photo: {caption}]");
        skipped.photo_captions_appended += 1;
    }
    Some(Turn {
        dia_id,
        speaker: speaker.to_string(),
        text,
    })
}

fn parse_answer(value: Option<&Value>, skipped: &mut SkipReport) -> Option<String> {
    match value? {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => {
            skipped.numeric_answers_converted += 1;
            Some(n.to_string())
        }
        Value::Null => None,
        _ => {
            skipped.unusable_answers += 1;
            None
        }
    }
}

fn parse_qa(value: &Value, known_ids: &BTreeSet<String>, skipped: &mut SkipReport) -> Option<Qa> {
    let question = value
        .as_object()
        .and_then(|obj| obj.get("question"))
        .and_then(Value::as_str)
        .map(str::trim)
        .filter(|q| !q.is_empty());
    let (Some(obj), Some(question)) = (value.as_object(), question) else {
        skipped.missing_question_skipped += 1;
        return None;
    };
    let category = match obj.get("category").and_then(Value::as_u64) {
        Some(c @ 1..=5) => c as u8,
        _ => {
            skipped.invalid_category_skipped += 1;
            return None;
        }
    };
    let answer = parse_answer(obj.get("answer"), skipped);
    let adversarial_answer = parse_answer(obj.get("adversarial_answer"), skipped);

    let raw_evidence: Vec<&Value> = match obj.get("evidence") {
        Some(Value::Array(items)) => items.iter().collect(),
        Some(v @ Value::String(_)) => vec![v],
        _ => Vec::new(),
    };
    let mut evidence: Vec<String> = Vec::new();
    for raw in raw_evidence {
        let Some(raw) = raw.as_str() else {
            skipped.evidence_malformed_dropped += 1;
            continue;
        };
        // A turn whose own id is not canonical is matched verbatim.
        if canonical_dia_id(raw.trim()).is_none() && known_ids.contains(raw.trim()) {
            if evidence.iter().any(|e| e == raw.trim()) {
                skipped.evidence_duplicates_dropped += 1;
            } else {
                evidence.push(raw.trim().to_string());
            }
            continue;
        }
        let parsed = normalise_evidence(raw);
        skipped.evidence_malformed_dropped += parsed.malformed;
        skipped.evidence_normalised += parsed.normalised;
        if parsed.split {
            skipped.evidence_split += 1;
        }
        for id in parsed.ids {
            if !known_ids.contains(&id) {
                skipped.evidence_unknown_dropped += 1;
            } else if evidence.contains(&id) {
                skipped.evidence_duplicates_dropped += 1;
            } else {
                evidence.push(id);
            }
        }
    }
    if evidence.is_empty() {
        skipped.empty_evidence_questions += 1;
    }
    Some(Qa {
        question: question.to_string(),
        answer,
        adversarial_answer,
        evidence,
        category,
    })
}

/// Outcome of normalising one raw evidence string.
#[derive(Debug, Default, PartialEq)]
struct EvidenceParse {
    /// Canonical ids recovered, in order.
    ids: Vec<String>,
    /// Pieces from which no id could be recovered.
    malformed: usize,
    /// Whether the string held several ids.
    split: bool,
    /// Ids whose canonical form differs from the text they came from.
    normalised: usize,
}

/// Normalises one raw evidence string into canonical dialogue ids.
fn normalise_evidence(raw: &str) -> EvidenceParse {
    // (original text, whitespace-free text) of each candidate id.
    let mut pieces: Vec<(String, String)> = Vec::new();
    for part in raw.split([';', ',']) {
        let compact: String = part.chars().filter(|c| !c.is_whitespace()).collect();
        if compact.is_empty() {
            continue;
        }
        let chunks = split_before_d(&compact);
        if chunks.len() == 1 {
            pieces.push((part.trim().to_string(), compact));
        } else {
            pieces.extend(chunks.into_iter().map(|c| (c.to_string(), c.to_string())));
        }
    }
    let mut out = EvidenceParse::default();
    if pieces.is_empty() {
        out.malformed = 1;
        return out;
    }
    out.split = pieces.len() > 1;
    for (original, compact) in &pieces {
        match canonical_dia_id(compact) {
            Some(id) => {
                if out.split && id != *original {
                    out.normalised += 1;
                }
                out.ids.push(id);
            }
            None => out.malformed += 1,
        }
    }
    if !out.split && out.ids.len() == 1 && out.ids.first().is_some_and(|id| id != raw) {
        out.normalised = 1;
    }
    out
}

/// Splits a whitespace-free string before every `D`/`d` except the first character (`"D1:2D3:4"` → two chunks).
fn split_before_d(s: &str) -> Vec<&str> {
    let mut chunks = Vec::new();
    let mut start = 0;
    for (i, c) in s.char_indices() {
        if i > 0 && (c == 'D' || c == 'd') {
            chunks.push(&s[start..i]);
            start = i;
        }
    }
    chunks.push(&s[start..]);
    chunks
}

/// Canonical `"D<s>:<t>"` from a whitespace-free id, tolerating lowercase `d`, a colon after the `D`, one trailing
/// colon or period, and leading zeros.
fn canonical_dia_id(compact: &str) -> Option<String> {
    let rest = compact.strip_prefix(['D', 'd'])?;
    let rest = rest.strip_prefix(':').unwrap_or(rest);
    let rest = rest.strip_suffix([':', '.']).unwrap_or(rest);
    let (session, turn) = rest.split_once(':')?;
    Some(format!("D{}:{}", parse_digits(session)?, parse_digits(turn)?))
}

/// The conversations of `locomo-dev.json` that defaults may be tuned on.
pub const TUNE_CONVERSATIONS: &[&str] = &["conv-26", "conv-30"];
/// The conversations of `locomo-dev.json` that results are reported on: never used to choose a default.
pub const REPORT_CONVERSATIONS: &[&str] = &["conv-41", "conv-42"];

/// Which conversations an evaluation runs on. The dev file is split once, here: defaults are chosen on
/// [`TUNE_CONVERSATIONS`] and results reported on [`REPORT_CONVERSATIONS`]; a figure measured on conversations
/// that include a tuning one is in-sample.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Split {
    /// [`TUNE_CONVERSATIONS`]: for choosing defaults.
    Tune,
    /// [`REPORT_CONVERSATIONS`]: held out from tuning.
    Report,
    /// Every conversation of the file (in-sample when it holds a tuning conversation).
    All,
    /// These sample ids.
    Conversations(Vec<String>),
}

impl Split {
    /// Parses `tune`, `report` or `all`.
    pub fn parse(s: &str) -> Result<Split, LocomoError> {
        match s.trim() {
            "tune" => Ok(Split::Tune),
            "report" => Ok(Split::Report),
            "all" => Ok(Split::All),
            other => Err(LocomoError::Selection(format!(
                "unknown split `{other}` (expected tune, report or all)"
            ))),
        }
    }

    /// The sample ids it selects (`None`: all of them).
    pub fn sample_ids(&self) -> Option<Vec<String>> {
        let owned = |ids: &[&str]| ids.iter().map(|s| s.to_string()).collect();
        match self {
            Split::Tune => Some(owned(TUNE_CONVERSATIONS)),
            Split::Report => Some(owned(REPORT_CONVERSATIONS)),
            Split::All => None,
            Split::Conversations(ids) => Some(ids.clone()),
        }
    }
}

impl Dataset {
    /// The conversations `split` selects, in file order (the loader's [`SkipReport`] stays that of the whole
    /// file). Fails when a named sample id is not in the file or nothing is selected.
    pub fn select(&self, split: &Split) -> Result<Dataset, LocomoError> {
        let Some(ids) = split.sample_ids() else {
            return Ok(self.clone());
        };
        if let Some(missing) = ids
            .iter()
            .find(|id| !self.conversations.iter().any(|c| &c.sample_id == *id))
        {
            let have: Vec<&str> = self.conversations.iter().map(|c| c.sample_id.as_str()).collect();
            return Err(LocomoError::Selection(format!(
                "no conversation `{missing}` in the file (it holds {})",
                have.join(", ")
            )));
        }
        let conversations: Vec<Conversation> = self
            .conversations
            .iter()
            .filter(|c| ids.contains(&c.sample_id))
            .cloned()
            .collect();
        if conversations.is_empty() {
            return Err(LocomoError::Selection("no conversation selected".into()));
        }
        Ok(Dataset {
            conversations,
            skipped: self.skipped,
        })
    }
}

/// The name of the split a set of sample ids is: `tune`, `report`, `all` (the four dev conversations) or
/// `custom`.
pub fn split_name(ids: &[String]) -> &'static str {
    let is = |set: &[&str]| ids.len() == set.len() && set.iter().all(|s| ids.iter().any(|i| i == s));
    let all: Vec<&str> = TUNE_CONVERSATIONS.iter().chain(REPORT_CONVERSATIONS).copied().collect();
    if is(TUNE_CONVERSATIONS) {
        "tune"
    } else if is(REPORT_CONVERSATIONS) {
        "report"
    } else if is(&all) {
        "all"
    } else {
        "custom"
    }
}

/// Whether figures measured on these sample ids are in-sample: they include a conversation defaults were tuned
/// on ([`TUNE_CONVERSATIONS`]).
pub fn in_sample(ids: &[String]) -> bool {
    ids.iter().any(|i| TUNE_CONVERSATIONS.contains(&i.as_str()))
}

/// Human-readable name of a LoCoMo question category: 1 multi-hop, 2 temporal, 3 open-domain, 4 single-hop,
/// 5 adversarial; anything else is `"unknown"`.
pub fn category_name(c: u8) -> &'static str {
    match c {
        1 => "multi-hop",
        2 => "temporal",
        3 => "open-domain",
        4 => "single-hop",
        5 => "adversarial",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A hand-written two-sample fixture in LoCoMo format exercising every quirk.
    const FIXTURE: &str = r#"[
      {
        "sample_id": "fx-1",
        "conversation": {
          "speaker_a": "Ada",
          "speaker_b": "Bo",
          "session_2_date_time": "9:05 am on 3 March, 2021",
          "session_2": [
            {"speaker": "Bo", "dia_id": "D2:1", "text": "Second session opener."},
            {"speaker": "Ada", "dia_id": "D2:2", "text": "Look at this.", "blip_caption": "a photo of a red kite",
             "img_url": ["http://example.invalid/x.jpg"], "query": "kite"}
          ],
          "session_1_date_time": "12:30 pm on 1 March, 2021",
          "session_1": [
            {"speaker": "Ada", "dia_id": "D1:1", "text": "Hello Bo."},
            {"speaker": "Bo", "dia_id": "D1:2", "text": "Hi Ada."},
            {"speaker": "Ada", "dia_id": "D1:3", "text": "", "blip_caption": "a cat on a sofa"},
            {"speaker": "Bo", "dia_id": "D1:4", "text": "Nice cat."}
          ],
          "session_3": [
            {"speaker": "Bo", "dia_id": "D3:1", "text": "No date on this one."}
          ],
          "session_4_date_time": "sometime in spring",
          "session_4": [],
          "session_5_date_time": "1:00 pm on 9 April, 2021"
        },
        "qa": [
          {"question": "Plain?", "answer": "yes", "evidence": ["D1:1"], "category": 4},
          {"question": "Split?", "answer": "x", "evidence": ["D1:2; D2:1"], "category": 1},
          {"question": "Spaces?", "answer": "x", "evidence": ["D1: 3", " d2:2 ", "D:1:4", "D2:1:", "D01:01"],
           "category": 1},
          {"question": "Broken?", "answer": "x", "evidence": ["D1:1", "D", ""], "category": 2},
          {"question": "Unknown id?", "answer": "x", "evidence": ["D9:9", "D1:2"], "category": 3},
          {"question": "No evidence?", "answer": "x", "evidence": [], "category": 3},
          {"question": "Only bad evidence?", "answer": "x", "evidence": ["D7:1"], "category": 3},
          {"question": "Duplicate?", "answer": "x", "evidence": ["D1:1", "D1:1", "d1:1"], "category": 4},
          {"question": "Year?", "answer": 2021, "evidence": ["D1:1"], "category": 2},
          {"question": "Adversarial?", "adversarial_answer": "no", "evidence": ["D2:2"], "category": 5},
          {"question": "Bad category", "answer": "x", "evidence": ["D1:1"], "category": 6},
          {"question": "Zero category", "answer": "x", "evidence": ["D1:1"], "category": 0},
          {"question": "No category", "answer": "x", "evidence": ["D1:1"]},
          {"answer": "x", "evidence": ["D1:1"], "category": 1},
          {"question": "   ", "answer": "x", "evidence": ["D1:1"], "category": 1},
          "not an object"
        ]
      },
      {
        "sample_id": "fx-2",
        "conversation": {
          "speaker_a": "Cy",
          "speaker_b": "Di",
          "session_1_date_time": "11:59 pm on 31 December, 2020",
          "session_1": [{"speaker": "Cy", "dia_id": "D1:1", "text": "Late night."}]
        },
        "qa": [{"question": "Same id, other conversation?", "answer": "x", "evidence": ["D1:1"], "category": 4}]
      }
    ]"#;

    fn dataset() -> Dataset {
        match parse(FIXTURE) {
            Ok(d) => d,
            Err(e) => panic!("fixture must parse: {e}"),
        }
    }

    fn find<'a>(conv: &'a Conversation, question: &str) -> &'a Qa {
        match conv.qa.iter().find(|q| q.question == question) {
            Some(q) => q,
            None => panic!("question {question:?} missing"),
        }
    }

    #[test]
    fn parses_conversations_and_speakers() {
        let d = dataset();
        assert_eq!(d.conversations.len(), 2);
        let c = &d.conversations[0];
        assert_eq!(c.sample_id, "fx-1");
        assert_eq!((c.speaker_a.as_str(), c.speaker_b.as_str()), ("Ada", "Bo"));
        assert_eq!(d.conversations[1].sample_id, "fx-2");
    }

    #[test]
    fn sessions_are_ordered_and_dated() {
        let d = dataset();
        let c = &d.conversations[0];
        let idx: Vec<u32> = c.sessions.iter().map(|s| s.index).collect();
        // session_5 has only a date: no session.
        assert_eq!(idx, vec![1, 2, 3, 4]);
        let s1 = &c.sessions[0];
        assert_eq!(s1.date_time.as_deref(), Some("12:30 pm on 1 March, 2021"));
        // 2021-03-01 12:30 UTC
        assert_eq!(s1.said_at, Some(1_614_601_800));
        assert_eq!(s1.turns.len(), 4);
        assert_eq!(
            s1.turns[0],
            Turn {
                dia_id: "D1:1".into(),
                speaker: "Ada".into(),
                text: "Hello Bo.".into()
            }
        );
        assert_eq!(c.sessions[1].said_at, Some(1_614_762_300)); // 2021-03-03 09:05
        assert!(c.sessions[1].said_at > s1.said_at);
        let s3 = &c.sessions[2];
        assert_eq!((s3.date_time.as_deref(), s3.said_at), (None, None));
        let s4 = &c.sessions[3];
        assert_eq!(
            (s4.date_time.as_deref(), s4.said_at),
            (Some("sometime in spring"), None)
        );
        assert!(s4.turns.is_empty());
        assert_eq!(d.conversations[1].sessions[0].said_at, Some(1_609_459_140)); // 2020-12-31 23:59
    }

    #[test]
    fn photo_captions_are_appended() {
        let d = dataset();
        let c = &d.conversations[0];
        assert_eq!(
            c.sessions[1].turns[1].text,
            "Look at this. [shares a photo: a photo of a red kite]"
        );
        assert_eq!(c.sessions[0].turns[2].text, "[shares a photo: a cat on a sofa]");
        assert_eq!(d.skipped.photo_captions_appended, 2);
    }

    #[test]
    fn evidence_quirks_are_repaired_or_dropped() {
        let d = dataset();
        let c = &d.conversations[0];
        assert_eq!(find(c, "Plain?").evidence, ["D1:1"]);
        assert_eq!(find(c, "Split?").evidence, ["D1:2", "D2:1"]);
        assert_eq!(find(c, "Spaces?").evidence, ["D1:3", "D2:2", "D1:4", "D2:1", "D1:1"]);
        assert_eq!(find(c, "Broken?").evidence, ["D1:1"]);
        assert_eq!(find(c, "Unknown id?").evidence, ["D1:2"]);
        assert!(find(c, "No evidence?").evidence.is_empty());
        assert!(find(c, "Only bad evidence?").evidence.is_empty());
        assert_eq!(find(c, "Duplicate?").evidence, ["D1:1"]);
        // Ids are checked against the question's own conversation.
        assert_eq!(d.conversations[1].qa[0].evidence, ["D1:1"]);
        let s = &d.skipped;
        assert_eq!(s.evidence_split, 1);
        // "D1: 3", " d2:2 ", "D:1:4", "D2:1:", "D01:01" and the "d1:1" duplicate.
        assert_eq!(s.evidence_normalised, 6);
        assert_eq!(s.evidence_malformed_dropped, 2); // "D" and ""
        assert_eq!(s.evidence_unknown_dropped, 2); // D9:9, D7:1
        assert_eq!(s.evidence_duplicates_dropped, 2);
        assert_eq!(s.empty_evidence_questions, 2);
    }

    #[test]
    fn questions_are_filtered_and_answers_converted() {
        let d = dataset();
        let c = &d.conversations[0];
        assert_eq!(c.qa.len(), 10);
        assert!(c.qa.iter().all(|q| (1..=5).contains(&q.category)));
        assert_eq!(find(c, "Year?").answer.as_deref(), Some("2021"));
        let adv = find(c, "Adversarial?");
        assert_eq!(
            (adv.answer.as_deref(), adv.adversarial_answer.as_deref()),
            (None, Some("no"))
        );
        assert_eq!(adv.category, 5);
        let s = &d.skipped;
        assert_eq!(s.invalid_category_skipped, 3);
        assert_eq!(s.missing_question_skipped, 3);
        assert_eq!(s.numeric_answers_converted, 1);
        assert_eq!(s.unusable_answers, 0);
    }

    #[test]
    fn session_quirks_are_counted() {
        let s = dataset().skipped;
        assert_eq!(s.date_times_without_session, 1);
        assert_eq!(s.sessions_without_date, 1);
        assert_eq!(s.unparseable_dates, 1);
        assert_eq!(s.empty_sessions, 1);
        assert_eq!(s.malformed_turns_skipped, 0);
        assert_eq!(s.duplicate_turn_ids, 0);
    }

    #[test]
    fn summary_lists_only_nonzero_counts() {
        let s = dataset().skipped;
        let summary = s.summary();
        assert!(summary.contains("evidence_split=1"), "{summary}");
        assert!(summary.contains("date_times_without_session=1"), "{summary}");
        assert!(summary.contains("missing_question_skipped=3"), "{summary}");
        assert!(!summary.contains("unusable_answers"), "{summary}");
        assert!(!summary.contains("malformed_turns_skipped"), "{summary}");
        assert_eq!(SkipReport::default().summary(), "none");
        let total: usize = s.counts().iter().map(|(_, n)| n).sum();
        assert_eq!(
            summary.split(", ").count(),
            s.counts().iter().filter(|(_, n)| *n > 0).count()
        );
        assert!(total > 0);
    }

    #[test]
    fn single_object_sample_is_accepted() {
        let json = r#"{"sample_id": "one", "conversation": {"speaker_a": "A", "speaker_b": "B",
            "session_1": [{"speaker": "A", "dia_id": "D1:1", "text": "hi"}]},
            "qa": [{"question": "q", "answer": 3.5, "evidence": "D1:1", "category": 2}]}"#;
        let d = match parse(json) {
            Ok(d) => d,
            Err(e) => panic!("{e}"),
        };
        assert_eq!(d.conversations.len(), 1);
        assert_eq!(d.conversations[0].qa[0].answer.as_deref(), Some("3.5"));
        assert_eq!(d.conversations[0].qa[0].evidence, ["D1:1"]);
        assert_eq!(d.skipped.sessions_without_date, 1);
    }

    #[test]
    fn turn_quirks() {
        let json = r#"[{"sample_id": "t", "conversation": {"speaker_a": "A", "speaker_b": "B",
            "session_1": [
              {"speaker": "A", "dia_id": "d1:1 ", "text": "lower"},
              {"speaker": "B", "dia_id": "D1:1", "text": "dup"},
              {"speaker": "A", "dia_id": "X-7", "text": "odd id"},
              {"speaker": "B", "text": "no id"},
              {"speaker": "A", "dia_id": "D1:4", "text": 5},
              42
            ]},
            "qa": [{"question": "q", "answer": true, "evidence": ["D1:1", "X-7", 7], "category": 1}]}]"#;
        let d = match parse(json) {
            Ok(d) => d,
            Err(e) => panic!("{e}"),
        };
        let turns = &d.conversations[0].sessions[0].turns;
        let ids: Vec<&str> = turns.iter().map(|t| t.dia_id.as_str()).collect();
        assert_eq!(ids, ["D1:1", "D1:1", "X-7"]);
        let s = &d.skipped;
        assert_eq!(s.turn_ids_normalised, 1);
        assert_eq!(s.duplicate_turn_ids, 1);
        assert_eq!(s.unparseable_turn_ids, 1);
        assert_eq!(s.malformed_turns_skipped, 3);
        assert_eq!(s.unusable_answers, 1);
        // "X-7" matches the verbatim turn id; a number is not an id.
        assert_eq!(d.conversations[0].qa[0].evidence, ["D1:1", "X-7"]);
        assert_eq!(s.evidence_malformed_dropped, 1);
        assert_eq!(d.conversations[0].qa[0].answer, None);
    }

    #[test]
    fn structural_errors() {
        let shape_reason = |json: &str| match parse(json) {
            Err(LocomoError::Shape { sample, reason }) => format!("{sample}: {reason}"),
            other => panic!("expected a shape error, got {other:?}"),
        };
        assert!(shape_reason("42").starts_with("<top level>"));
        assert!(shape_reason("[1]").starts_with("#0"));
        assert!(shape_reason(r#"[{"conversation": {}}]"#).contains("sample_id"));
        assert!(shape_reason(r#"[{"sample_id": "s"}]"#).contains("conversation"));
        assert!(shape_reason(r#"[{"sample_id": "s", "conversation": {"speaker_a": "A"}}]"#).contains("speaker_b"));
        let bad_session =
            r#"[{"sample_id": "s", "conversation": {"speaker_a": "A", "speaker_b": "B", "session_1": {}}}]"#;
        assert!(shape_reason(bad_session).contains("session_1"));
        let bad_qa = r#"[{"sample_id": "s", "conversation": {"speaker_a": "A", "speaker_b": "B"}, "qa": {}}]"#;
        assert!(shape_reason(bad_qa).starts_with("s: "));
        assert!(matches!(parse("[{"), Err(LocomoError::Json(_))));
        assert!(matches!(
            load(Path::new("/nonexistent/locomo.json")),
            Err(LocomoError::Io { .. })
        ));
        // Missing qa is fine; non-canonical session keys are ignored.
        let ok = r#"[{"sample_id": "s", "conversation": {"speaker_a": "A", "speaker_b": "B", "session_01": 3,
            "session_x": 1}}]"#;
        assert!(
            matches!(parse(ok), Ok(d) if d.conversations[0].sessions.is_empty() && d.conversations[0].qa.is_empty())
        );
        assert_eq!(parse("[]").map(|d| d.conversations.len()).ok(), Some(0));
    }

    #[test]
    fn load_reads_a_file() {
        let path = std::env::temp_dir().join(format!("locomo-test-{}.json", std::process::id()));
        if let Err(e) = std::fs::write(&path, FIXTURE) {
            panic!("{e}");
        }
        let loaded = load(&path);
        let _ = std::fs::remove_file(&path);
        assert_eq!(loaded.ok(), Some(dataset()));
    }

    #[test]
    fn normalise_evidence_forms() {
        let ids = |raw: &str| normalise_evidence(raw).ids;
        assert_eq!(ids("D1:3"), ["D1:3"]);
        assert_eq!(ids("D8:6; D9:17"), ["D8:6", "D9:17"]);
        assert_eq!(ids("D8:6,D9:17"), ["D8:6", "D9:17"]);
        assert_eq!(ids("D21:18 D21:22"), ["D21:18", "D21:22"]);
        assert_eq!(ids("D1: 3"), ["D1:3"]);
        assert_eq!(ids("d1:3"), ["D1:3"]);
        assert_eq!(ids("D:11:26"), ["D11:26"]);
        assert_eq!(ids("D11:26:"), ["D11:26"]);
        assert_eq!(ids("D11:26;"), ["D11:26"]);
        assert_eq!(ids("D007:010"), ["D7:10"]);
        for bad in [
            "D",
            "",
            "  ",
            "11:26",
            "D11",
            "D11:26:3",
            "Dx:1",
            "D1:+2",
            "D99999999999:1",
        ] {
            let p = normalise_evidence(bad);
            assert!(p.ids.is_empty(), "{bad:?} gave {:?}", p.ids);
            assert_eq!(p.malformed, 1, "{bad:?}");
        }
        let p = normalise_evidence("D8:6; D9:17");
        assert_eq!((p.split, p.normalised, p.malformed), (true, 0, 0));
        let p = normalise_evidence("D8:6; d9:17; D");
        assert_eq!((p.split, p.normalised, p.malformed), (true, 1, 1));
        let p = normalise_evidence("D1:3");
        assert_eq!((p.split, p.normalised), (false, 0));
        let p = normalise_evidence("D1: 3");
        assert_eq!((p.split, p.normalised), (false, 1));
    }

    #[test]
    fn category_names() {
        let names: Vec<&str> = (0..=6).map(category_name).collect();
        assert_eq!(
            names,
            [
                "unknown",
                "multi-hop",
                "temporal",
                "open-domain",
                "single-hop",
                "adversarial",
                "unknown"
            ]
        );
    }

    fn four() -> Dataset {
        let sample = |id: &str| {
            format!(
                r#"{{"sample_id": "{id}", "conversation": {{"speaker_a": "A", "speaker_b": "B",
                "session_1": [{{"speaker": "A", "dia_id": "D1:1", "text": "hi"}}]}},
                "qa": [{{"question": "q", "answer": "a", "evidence": ["D1:1"], "category": 4}}]}}"#
            )
        };
        let ids = ["conv-26", "conv-30", "conv-41", "conv-42"];
        parse(&format!("[{}]", ids.map(sample).join(","))).unwrap()
    }

    fn ids(d: &Dataset) -> Vec<String> {
        d.conversations.iter().map(|c| c.sample_id.clone()).collect()
    }

    #[test]
    fn splits_select_their_conversations_and_say_what_they_are() {
        let d = four();
        let tune = d.select(&Split::parse("tune").unwrap()).unwrap();
        assert_eq!(ids(&tune), ["conv-26", "conv-30"]);
        assert_eq!((split_name(&ids(&tune)), in_sample(&ids(&tune))), ("tune", true));
        let report = d.select(&Split::parse("report").unwrap()).unwrap();
        assert_eq!(ids(&report), ["conv-41", "conv-42"]);
        assert_eq!((split_name(&ids(&report)), in_sample(&ids(&report))), ("report", false));
        let all = d.select(&Split::parse("all").unwrap()).unwrap();
        assert_eq!((split_name(&ids(&all)), in_sample(&ids(&all))), ("all", true));
        assert_eq!(all, d);
        // Named ids, in file order whatever order they are given in.
        let one = d
            .select(&Split::Conversations(vec!["conv-42".into(), "conv-30".into()]))
            .unwrap();
        assert_eq!(ids(&one), ["conv-30", "conv-42"]);
        assert_eq!((split_name(&ids(&one)), in_sample(&ids(&one))), ("custom", true));
        // Bad selections fail typed and name the problem.
        let err = d.select(&Split::Conversations(vec!["conv-99".into()])).unwrap_err();
        assert!(
            matches!(err, LocomoError::Selection(_)) && err.to_string().contains("conv-99"),
            "{err}"
        );
        let err = d.select(&Split::Conversations(Vec::new())).unwrap_err();
        assert!(matches!(err, LocomoError::Selection(_)), "{err}");
        let err = Split::parse("test").unwrap_err();
        assert!(err.to_string().contains("tune, report or all"), "{err}");
        // The tune and report splits are disjoint and cover the dev file.
        assert!(TUNE_CONVERSATIONS.iter().all(|t| !REPORT_CONVERSATIONS.contains(t)));
    }
}
