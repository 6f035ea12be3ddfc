//! Episode generation (Nemori §3.1.2): a segment of messages becomes
//! `(title, narrative)` with the time its events refer to.
//!
//! With a model the prompt asks for a title, a third-person narrative that
//! keeps every specific detail with absolute dates, and the event date.
//! Offline the episode is **extractive**: the narrative is the segment's
//! sentences that carry content words (greetings and fillers dropped),
//! each under its speaker's name, in order, cut to the most salient
//! sentences when it would exceed a token limit (salience: the sum over a
//! sentence's content words of `ln(1 + messages of the segment that use
//! the word)`, so sentences rich in the segment's recurring words win); the title names the
//! speakers and the segment's most repeated content words; the event time
//! is the first message's. It is weaker than the model's: it keeps first
//! and second person ("I", "you") where the model names people, it does
//! not resolve "yesterday" to a date, and it cannot merge what several
//! messages say about one thing into one sentence.

use super::boundary::prompt_line;
use crate::llm::{Call, Llm, LlmError, ask_json, schema};
use crate::store::Message;
use crate::text::{content_words, words};
use crate::time::parse_iso8601;
use crate::tokens;
use serde_json::Value;
use std::collections::HashMap;
use unicode_segmentation::UnicodeSegmentation;

/// A generated episode.
#[derive(Debug, Clone, PartialEq)]
pub struct Episode {
    /// ξ: a concise title.
    pub title: String,
    /// ζ: the narrative.
    pub narrative: String,
    /// When its events happened (Unix seconds), if known.
    pub refers_to: Option<i64>,
}

impl Episode {
    /// The stored (and embedded) text: the title, a newline, the narrative.
    pub fn text(&self) -> String {
        format!("{}\n{}", self.title, self.narrative)
    }
}

/// A sentence of a message, with its speaker.
#[derive(Debug, Clone, PartialEq)]
pub struct Sentence {
    /// Index of its message in the segment.
    pub message: usize,
    /// Who said it.
    pub speaker: String,
    /// The sentence, trimmed.
    pub text: String,
}

/// The sentences of each message of a segment, in order.
pub fn sentences(segment: &[&Message]) -> Vec<Sentence> {
    let mut out = Vec::new();
    for (i, m) in segment.iter().enumerate() {
        for s in m.msg.text.unicode_sentences() {
            let s = s.trim();
            if !s.is_empty() {
                out.push(Sentence {
                    message: i,
                    speaker: m.msg.speaker.clone(),
                    text: s.to_string(),
                });
            }
        }
    }
    out
}

/// Interjections and small talk that carry no content.
const FILLERS: &[&str] = &[
    "hi",
    "hey",
    "hello",
    "bye",
    "wow",
    "oh",
    "ah",
    "nice",
    "great",
    "cool",
    "awesome",
    "amazing",
    "thanks",
    "thank",
    "yeah",
    "yes",
    "yep",
    "no",
    "ok",
    "okay",
    "haha",
    "lol",
    "sure",
    "glad",
    "good",
    "fantastic",
    "wonderful",
    "congrats",
    "congratulations",
    "totally",
    "really",
    "absolutely",
    "indeed",
    "definitely",
];

/// Content words of a sentence: no stop words, no fillers, no names in
/// `names` (the speakers, lower-case).
pub(crate) fn sentence_words(text: &str, names: &[String]) -> Vec<String> {
    content_words(text)
        .into_iter()
        .filter(|w| !FILLERS.contains(&w.as_str()) && !names.contains(w))
        .collect()
}

/// The distinct speakers of a segment, in order of appearance.
fn speakers<'a>(segment: &[&'a Message]) -> Vec<&'a str> {
    let mut out: Vec<&str> = Vec::new();
    for m in segment {
        if !out.contains(&m.msg.speaker.as_str()) {
            out.push(&m.msg.speaker);
        }
    }
    out
}

/// The lower-case speaker names of a segment.
pub(crate) fn speaker_names(segment: &[&Message]) -> Vec<String> {
    speakers(segment).iter().map(|s| s.to_lowercase()).collect()
}

/// In how many of `texts` each content word occurs.
pub(crate) fn document_frequencies(texts: &[&str]) -> HashMap<String, usize> {
    let mut df: HashMap<String, usize> = HashMap::new();
    for t in texts {
        for w in content_words(t) {
            *df.entry(w).or_insert(0) += 1;
        }
    }
    df
}

/// The `n` words that best say what `texts` are about: content words of at
/// least three letters, not fillers and not in `names` (lower case), by
/// the number of texts using them, ties to the word seen first.
pub(crate) fn top_words(texts: &[&str], names: &[String], n: usize) -> Vec<String> {
    let df = document_frequencies(texts);
    let mut first_seen: HashMap<String, usize> = HashMap::new();
    for t in texts {
        let cw = content_words(t);
        for w in words(t).filter(|w| cw.contains(w)) {
            let k = first_seen.len();
            first_seen.entry(w).or_insert(k);
        }
    }
    let mut top: Vec<(&String, &usize)> = df
        .iter()
        .filter(|(w, _)| w.chars().count() >= 3 && !names.contains(w) && !FILLERS.contains(&w.as_str()))
        .collect();
    let seen = |w: &String| first_seen.get(w).copied().unwrap_or(usize::MAX);
    top.sort_by(|a, b| b.1.cmp(a.1).then(seen(a.0).cmp(&seen(b.0))));
    top.into_iter().take(n).map(|(w, _)| w.clone()).collect()
}

/// The extractive episode of a segment, its narrative at most `max_tokens`
/// (o200k) long.
pub fn extractive(segment: &[&Message], max_tokens: usize) -> Episode {
    let sents = sentences(segment);
    let names = speaker_names(segment);
    let texts: Vec<&str> = segment.iter().map(|m| m.msg.text.as_str()).collect();
    let df = document_frequencies(&texts);
    let content: Vec<(usize, f64)> = sents
        .iter()
        .enumerate()
        .filter_map(|(i, s)| {
            let ws = sentence_words(&s.text, &names);
            (ws.len() >= 2).then(|| {
                let score: f64 = ws
                    .iter()
                    .map(|w| (1.0 + df.get(w).copied().unwrap_or(0) as f64).ln())
                    .sum();
                (i, score)
            })
        })
        .collect();
    // Nothing but fillers: keep every sentence.
    let mut keep: Vec<usize> = if content.is_empty() {
        (0..sents.len()).collect()
    } else {
        content.iter().map(|&(i, _)| i).collect()
    };
    let render = |keep: &[usize]| {
        let mut out = String::new();
        let mut last: Option<usize> = None;
        for &i in keep {
            let s = &sents[i];
            if last != Some(s.message) {
                if !out.is_empty() {
                    out.push(' ');
                }
                out.push_str(&s.speaker);
                out.push(':');
            }
            out.push(' ');
            out.push_str(&s.text);
            last = Some(s.message);
        }
        out
    };
    let mut narrative = render(&keep);
    if tokens::count(&narrative) > max_tokens {
        // Most salient first, then back in order, within the limit.
        let mut ranked = content.clone();
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        keep.clear();
        for (i, _) in ranked {
            keep.push(i);
            keep.sort_unstable();
            if tokens::count(&render(&keep)) > max_tokens {
                keep.retain(|&j| j != i);
            }
        }
        narrative = if keep.is_empty() {
            tokens::truncate(&render(&content.iter().map(|c| c.0).collect::<Vec<_>>()), max_tokens)
        } else {
            render(&keep)
        };
    }
    let speakers = speakers(segment);
    let topics = top_words(&texts, &names, 4);
    let who = match speakers.as_slice() {
        [] => String::new(),
        [one] => (*one).to_string(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    };
    let title = if topics.is_empty() {
        format!("{who} talk")
    } else {
        format!("{who} on {}", topics.join(", "))
    };
    Episode {
        title,
        narrative,
        refers_to: segment.first().and_then(|m| m.msg.said_at),
    }
}

const EPISODE_PROMPT: &str = include_str!("../prompts/nemori_episode.txt");

/// The episode written by a model.
pub fn with_llm(llm: &dyn Llm, segment: &[&Message]) -> Result<Episode, LlmError> {
    let mut user = String::from("Episode messages:\n");
    for (i, m) in segment.iter().enumerate() {
        user.push_str(&prompt_line(i + 1, m));
        user.push('\n');
    }
    let first = segment.first().and_then(|m| m.msg.said_at);
    let schema = schema::object(
        &[
            ("title", schema::short()),
            ("narrative", schema::long_text()),
            ("date", schema::date_or_null()),
        ],
        &["title", "narrative"],
    );
    ask_json(
        llm,
        &Call::json("nemori_episode", &schema),
        EPISODE_PROMPT,
        &user,
        |v| {
            let text = |k: &str| {
                v.get(k)
                    .and_then(Value::as_str)
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .ok_or(format!("`{k}` must be a non-empty string"))
            };
            let refers_to = match v.get("date") {
                None | Some(Value::Null) => first,
                Some(Value::String(d)) => Some(parse_iso8601(d).ok_or(format!("`date` `{d}` is not YYYY-MM-DD"))?),
                Some(_) => return Err("`date` must be a YYYY-MM-DD string or null".into()),
            };
            Ok(Episode {
                title: text("title")?.replace('\n', " "),
                narrative: text("narrative")?,
                refers_to,
            })
        },
    )
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::store::NewMessage;

    /// Message `i` of session `s`, said `i` minutes after 8 May 2023 13:56.
    pub(crate) fn m(i: i64, speaker: &str, text: &str) -> Message {
        Message {
            id: i,
            user: "u".into(),
            seq: i,
            msg: NewMessage {
                session: "s".into(),
                speaker: speaker.into(),
                text: text.into(),
                said_at: Some(1_683_554_160 + i * 60),
                source_ref: None,
            },
        }
    }

    #[test]
    fn fillers_drop_and_speakers_stay() {
        let msgs = [
            m(1, "Ann", "Hi Bob! I adopted a grey cat called Pixel from the shelter."),
            m(2, "Bob", "Wow, nice!"),
            m(3, "Bob", "How old is Pixel? My cat Luna is nine."),
            m(4, "Ann", "Pixel is two. The shelter said she loves tuna."),
        ];
        let seg: Vec<&Message> = msgs.iter().collect();
        let e = extractive(&seg, 200);
        assert_eq!(
            e.narrative,
            "Ann: I adopted a grey cat called Pixel from the shelter. Bob: How old is Pixel? My cat Luna is nine. \
             Ann: Pixel is two. The shelter said she loves tuna."
        );
        assert_eq!(e.title, "Ann and Bob on pixel, cat, shelter, adopted");
        assert_eq!(e.refers_to, Some(1_683_554_160 + 60));
        assert_eq!(e.text(), format!("{}\n{}", e.title, e.narrative));
    }

    #[test]
    fn long_segments_keep_the_salient_sentences_in_order() {
        let mut msgs = vec![m(
            0,
            "Ann",
            "The marathon in Berlin is in September and the marathon training is hard.",
        )];
        // One-off remarks, each on its own words.
        let things = [
            "kettle", "tulip", "harbour", "violin", "pepper", "ladder", "comet", "saddle", "marble",
        ];
        for i in 1..30 {
            let t = things[i as usize % things.len()];
            msgs.push(m(i, "Bob", &format!("{t} {i}.")));
        }
        msgs.push(m(30, "Ann", "My marathon shoes from Berlin arrived."));
        let seg: Vec<&Message> = msgs.iter().collect();
        let e = extractive(&seg, 60);
        assert!(tokens::count(&e.narrative) <= 60, "{}", e.narrative);
        let a = e
            .narrative
            .find("marathon in Berlin")
            .unwrap_or_else(|| panic!("salient first sentence kept: {}", e.narrative));
        let b = e.narrative.find("marathon shoes").expect("salient last sentence kept");
        assert!(a < b);
        // Deterministic.
        assert_eq!(extractive(&seg, 60), e);
    }

    #[test]
    fn only_fillers_still_make_an_episode() {
        let msgs = [m(1, "Ann", "Hi!"), m(2, "Bob", "Hey :)")];
        let seg: Vec<&Message> = msgs.iter().collect();
        let e = extractive(&seg, 50);
        assert_eq!(e.narrative, "Ann: Hi! Bob: Hey :)");
        assert_eq!(e.title, "Ann and Bob talk");
    }
}
