//! The compact-memory summarizer of HEMA: `S_t = Summarizer(S_{t-1}, u_t)`,
//! one sentence of at most 60 tokens. With a language model it asks for
//! the updated sentence as JSON; offline it is **extractive**.
//!
//! The extractive summarizer keeps, for the dialogue so far, how many turns
//! mention each content word. A candidate clause (one of the previous
//! summary's clauses, or a sentence of the new turn prefixed with its
//! speaker) scores the sum of `ln(1 + turns mentioning w)` over its
//! distinct content words, divided by the square root of its length, so
//! clauses about the dialogue's recurring topics win. The best clauses,
//! each cut to 24 tokens, are joined with `; ` into one sentence of at most
//! the token limit. It is weaker than an abstractive model: it cannot
//! paraphrase, resolve pronouns or merge facts, and a topic mentioned once
//! fades even when it matters.

use crate::error::Result;
use crate::llm::{Call, Llm, ask_json, schema};
use crate::text::word_runs;
use crate::tokens;
use std::collections::{BTreeSet, HashMap, HashSet};

const STOP: &[&str] = &[
    "the", "and", "for", "are", "but", "not", "you", "your", "yours", "all", "any", "can", "had", "has", "have", "her",
    "hers", "him", "his", "how", "its", "was", "were", "what", "when", "where", "which", "who", "whom", "why", "will",
    "with", "would", "could", "should", "this", "that", "these", "those", "there", "their", "them", "they", "then",
    "than", "from", "into", "onto", "about", "just", "really", "very", "much", "many", "some", "such", "also", "too",
    "yeah", "yes", "well", "like", "get", "got", "going", "been", "being", "our", "ours", "out", "over", "own", "she",
    "did", "does", "doing", "done", "let", "lot", "one", "more", "most", "other", "only", "same", "so", "still",
    "thanks", "thank", "wow", "hey", "hi", "hello", "know", "think", "feel", "felt", "make", "made", "way", "thing",
    "things", "sure", "great", "good", "nice", "awesome", "amazing", "love", "glad", "happy", "it's", "i'm", "that's",
    "you're", "i've", "don't", "can't", "didn't", "what's",
];

/// Content words of a text: its [`crate::text::word_runs`] split at curly
/// apostrophes, straight ones trimmed from the ends (kept inside: `don't`
/// is one stop word), lower-case, at least three letters, no stop words.
fn content_words(text: &str) -> impl Iterator<Item = String> + '_ {
    word_runs(text)
        .flat_map(|w| w.split('’'))
        .map(|w| w.trim_matches('\'').to_lowercase())
        .filter(|w| w.chars().count() >= 3 && !STOP.contains(&w.as_str()))
}

/// How many turns mention each content word (the extractive summarizer's
/// memory), serialisable to the store.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct WordStats {
    turns: HashMap<String, u32>,
}

impl WordStats {
    /// Counts the distinct content words of one turn. Keeps at most 8,192
    /// words, dropping the rarest when over.
    pub fn observe(&mut self, text: &str) {
        let words: HashSet<String> = content_words(text).collect();
        for w in words {
            *self.turns.entry(w).or_insert(0) += 1;
        }
        if self.turns.len() > 8192 {
            let mut v: Vec<(String, u32)> = self.turns.drain().collect();
            v.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
            v.truncate(4096);
            self.turns = v.into_iter().collect();
        }
    }

    fn weight(&self, w: &str) -> f64 {
        (1.0 + f64::from(self.turns.get(w).copied().unwrap_or(0))).ln()
    }

    /// JSON for the store.
    pub fn to_json(&self) -> String {
        let mut v: Vec<(&String, &u32)> = self.turns.iter().collect();
        v.sort();
        serde_json::to_string(&v.into_iter().collect::<std::collections::BTreeMap<_, _>>()).unwrap_or_default()
    }

    /// Parses [`WordStats::to_json`] output (anything else gives empty stats).
    pub fn from_json(s: &str) -> Self {
        WordStats {
            turns: serde_json::from_str(s).unwrap_or_default(),
        }
    }
}

/// Splits text into sentence-like clauses.
fn clauses(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        if matches!(c, '.' | '!' | '?' | ';' | '\n') {
            if !cur.trim().is_empty() {
                out.push(cur.trim().to_string());
            }
            cur.clear();
        } else {
            cur.push(c);
        }
    }
    if !cur.trim().is_empty() {
        out.push(cur.trim().to_string());
    }
    out
}

/// The extractive update: the best clauses of `prev` and of the new turn
/// (`speaker: text`), joined into one sentence of at most `max_tokens`.
pub fn extractive(prev: &str, speaker: &str, text: &str, stats: &WordStats, max_tokens: usize) -> String {
    let mut cands: Vec<(f64, usize, String)> = Vec::new();
    for (i, c) in clauses(prev).into_iter().enumerate() {
        cands.push((0.0, i, c));
    }
    let base = cands.len();
    for (i, c) in clauses(text).into_iter().enumerate() {
        let c = if speaker.is_empty() {
            c
        } else {
            format!("{speaker}: {c}")
        };
        cands.push((0.0, base + i, c));
    }
    for c in &mut cands {
        // Summed in word order: a hash set's order changes per instance,
        // and with it the last bits of the sum, which broke ties between
        // equal clauses differently from run to run.
        let words: BTreeSet<String> = content_words(&c.2).collect();
        let n = c.2.split_whitespace().count().max(1) as f64;
        c.0 = words.iter().map(|w| stats.weight(w)).sum::<f64>() / n.sqrt();
    }
    cands.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut picked: Vec<(usize, String)> = Vec::new();
    let mut seen: HashSet<String> = HashSet::new();
    let mut used = 0;
    for (score, order, c) in cands {
        if score <= 0.0 && !picked.is_empty() {
            break;
        }
        let words: HashSet<String> = content_words(&c).collect();
        // Skip clauses that add no new content word.
        if !picked.is_empty() && words.iter().all(|w| seen.contains(w)) {
            continue;
        }
        let c = tokens::truncate(&c, 24);
        let t = tokens::count(&c) + 1;
        if used + t > max_tokens.saturating_sub(1) {
            continue;
        }
        used += t;
        seen.extend(words);
        picked.push((order, c));
    }
    picked.sort_by_key(|p| p.0);
    let body: Vec<String> = picked.into_iter().map(|p| p.1).collect();
    if body.is_empty() {
        return String::new();
    }
    let s = format!("{}.", body.join("; "));
    tokens::truncate(&s, max_tokens)
}

const UPDATE_SYSTEM: &str = "You maintain the compact memory of a long conversation: ONE sentence, at most 60 tokens, \
that keeps the most important facts said so far (people, events, dates, preferences, plans). Reply with a JSON object \
{\"summary\": \"...\"} and nothing else.";

const MERGE_SYSTEM: &str = "You compress the memory of a long conversation: merge an older summary and a recent \
summary into ONE sentence of at most 60 tokens that keeps the most important facts of both. Reply with a JSON object \
{\"summary\": \"...\"} and nothing else.";

fn summary_field(v: &serde_json::Value) -> std::result::Result<String, String> {
    match v.get("summary").and_then(|s| s.as_str()) {
        Some(s) if !s.trim().is_empty() => Ok(s.trim().to_string()),
        Some(_) => Err("`summary` is empty".into()),
        None => Err("no string field `summary`".into()),
    }
}

/// `{"summary": "..."}`.
fn summary_schema() -> serde_json::Value {
    schema::object(&[("summary", schema::text())], &["summary"])
}

/// `S_t = Summarizer(S_{t-1}, u_t)` with the model.
pub fn llm_update(llm: &dyn Llm, prev: &str, speaker: &str, text: &str, max_tokens: usize) -> Result<String> {
    let user = format!(
        "Previous summary: {}\nNew turn - {speaker}: {text}\nWrite the updated one-sentence summary.",
        if prev.is_empty() { "(none yet)" } else { prev }
    );
    let schema = summary_schema();
    let s = ask_json(
        llm,
        &Call::json("hema_update", &schema),
        UPDATE_SYSTEM,
        &user,
        summary_field,
    )?;
    Ok(tokens::truncate(&s, max_tokens))
}

/// The summary-of-summaries step with the model.
pub fn llm_merge(llm: &dyn Llm, older: &str, recent: &str, max_tokens: usize) -> Result<String> {
    let user = format!(
        "Older summary: {}\nRecent summary: {recent}\nWrite the merged one-sentence summary.",
        if older.is_empty() { "(none)" } else { older }
    );
    let schema = summary_schema();
    let s = ask_json(
        llm,
        &Call::json("hema_merge", &schema),
        MERGE_SYSTEM,
        &user,
        summary_field,
    )?;
    Ok(tokens::truncate(&s, max_tokens))
}

/// HEMA's summarizer role: the compact memory updated turn by turn
/// (`S_t = Summarizer(S_{t-1}, u_t)`) and merged into the level-2 summary
/// at block boundaries, by a model ([`ModelSummarizer`]) or offline
/// ([`Extractive`]); [`summarizer`] picks one, once per ingest.
pub trait Summarizer {
    /// The compact summary after `speaker` said `text`.
    fn update(&self, prev: &str, speaker: &str, text: &str, stats: &WordStats, max_tokens: usize) -> Result<String>;
    /// `older` and `recent` merged into one summary.
    fn merge(&self, older: &str, recent: &str, stats: &WordStats, max_tokens: usize) -> Result<String>;
    /// Whether each call costs a model call (HEMA then commits after every
    /// message, so that no paid call is repeated after a failure, and keeps
    /// no word statistics).
    fn calls_model(&self) -> bool;
}

/// [`Summarizer`] with a model ([`llm_update`], [`llm_merge`]).
pub struct ModelSummarizer<'a>(pub &'a dyn Llm);

impl Summarizer for ModelSummarizer<'_> {
    fn update(&self, prev: &str, speaker: &str, text: &str, _: &WordStats, max_tokens: usize) -> Result<String> {
        llm_update(self.0, prev, speaker, text, max_tokens)
    }
    fn merge(&self, older: &str, recent: &str, _: &WordStats, max_tokens: usize) -> Result<String> {
        llm_merge(self.0, older, recent, max_tokens)
    }
    fn calls_model(&self) -> bool {
        true
    }
}

/// [`Summarizer`] offline: [`extractive`] (a merge is an update by no one).
pub struct Extractive;

impl Summarizer for Extractive {
    fn update(&self, prev: &str, speaker: &str, text: &str, stats: &WordStats, max_tokens: usize) -> Result<String> {
        Ok(extractive(prev, speaker, text, stats, max_tokens))
    }
    fn merge(&self, older: &str, recent: &str, stats: &WordStats, max_tokens: usize) -> Result<String> {
        Ok(extractive(older, "", recent, stats, max_tokens))
    }
    fn calls_model(&self) -> bool {
        false
    }
}

/// The summarizer for a run: the model when there is one, else extractive.
pub fn summarizer(llm: Option<&dyn Llm>) -> Box<dyn Summarizer + '_> {
    match llm {
        Some(llm) => Box::new(ModelSummarizer(llm)),
        None => Box::new(Extractive),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_words_keep_straight_apostrophes_and_split_curly_ones() {
        let got: Vec<String> = content_words("Bob's don't it’s o'clock 'quoted' rock’n’roll the").collect();
        assert_eq!(got, ["bob's", "o'clock", "quoted", "rock", "roll"]);
    }

    #[test]
    fn extractive_is_the_same_in_every_run() {
        // Two clauses with the same content words in another order score
        // the same; the earlier must win every time. A score summed in a
        // hash set's (per-instance random) order differs in its last bits
        // between the two, and then between calls.
        let mut stats = WordStats::default();
        let words = [
            "harbor", "lantern", "violin", "meadow", "copper", "orchard", "glacier", "saffron", "thistle", "marble",
            "falcon", "juniper",
        ];
        for (i, w) in words.iter().enumerate() {
            for _ in 0..=(i * 7 % 11) {
                stats.observe(w);
            }
        }
        let a = words.join(" ");
        let mut rev = words;
        rev.reverse();
        let b = rev.join(" ");
        let text = format!("{a}; {b}");
        let first = extractive("", "Ann", &text, &stats, 60);
        assert!(first.contains(&a[..20]), "{first}");
        for _ in 0..200 {
            assert_eq!(extractive("", "Ann", &text, &stats, 60), first);
        }
    }

    #[test]
    fn extractive_keeps_recurring_topics_within_the_limit() {
        let mut stats = WordStats::default();
        let turns = [
            (
                "Ann",
                "I started pottery classes last week. The pottery studio is near the harbour.",
            ),
            ("Bob", "Nice! My dog Max chewed my shoes again."),
            ("Ann", "My pottery teacher says my bowls are improving."),
            ("Bob", "The weather is cold today."),
            ("Ann", "I will sell my pottery at the market in June."),
        ];
        let mut s = String::new();
        for (who, text) in turns {
            stats.observe(text);
            s = extractive(&s, who, text, &stats, 60);
            assert!(tokens::count(&s) <= 60, "{s}");
            assert!(s.ends_with('.'), "{s}");
        }
        assert!(s.contains("pottery"), "{s}");
        assert!(!s.contains("weather"), "{s}");
    }

    #[test]
    fn stats_round_trip() {
        let mut st = WordStats::default();
        st.observe("Pottery classes and pottery bowls");
        st.observe("pottery again");
        let back = WordStats::from_json(&st.to_json());
        assert_eq!(back, st);
        assert_eq!(back.turns.get("pottery"), Some(&2));
        assert_eq!(WordStats::from_json("garbage"), WordStats::default());
    }

    #[test]
    fn empty_input_gives_empty_summary() {
        assert_eq!(extractive("", "Ann", "", &WordStats::default(), 60), "");
    }
}
