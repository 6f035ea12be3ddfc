//! Step 1 of PREMem (§3.1): a session becomes memory fragments `(message,
//! key, content, time, category)`.
//!
//! With a model, the prompt of Appendix A (Figure 3) lists the session's
//! messages as `[msg-N] (2023-05-08 Monday) Speaker: text` and asks for
//! `{"Factual_Information": [...], "Experiential_Information": [...],
//! "Subjective_Information": [...]}` of `{key, value, message_id, date}`;
//! the answer is checked strictly (every category present, message ids of
//! the session, dates in one of the four forms) and repaired once.
//!
//! Offline, every sentence that states something (at least
//! `min_content_words` content words, not a question: see [`is_question`])
//! is a fragment:
//! - **content**: the sentence with the speaker's first person replaced by
//!   the speaker's name ("I went" → "Caroline went", "my" →
//!   "Caroline's"); second person and other pronouns stay;
//! - **key**: the sentence's first three content words that are neither
//!   category markers nor time words ("lgbtq support group"); a sentence
//!   that continues the one before it (opens with "and", "but", … or
//!   holds "it", "she", "they", …: see [`continues`]) keeps the key of the
//!   last sentence with content words, questions and the other speaker's
//!   messages included, so "It stands for love" after "What does your
//!   necklace mean?" is filed under the necklace;
//! - **category** by rules: preference, plan and opinion markers (or a
//!   future-tense sentence) count for subjective, past-tense event verbs
//!   (and a past date expression) for experiential, possession and
//!   attribute markers for factual; the highest count wins, ties going to
//!   experiential, then subjective; no marker at all is factual;
//! - **time** in the four forms of §3.1: the first date expression the
//!   normaliser ([`crate::dates`]) resolves; otherwise `Before <date>` for
//!   an experiential fragment, `After <date>` for a subjective one in the
//!   future tense, and the message date for the rest.
//!
//! It is weaker than the model: one fragment per sentence and one
//! category each (a model may split a sentence into a fact and a
//! feeling), keys are words of the sentence (or of the one it continues)
//! rather than a topic name, tense is not rewritten, "you", "he" or "she"
//! stay in the content, and a fact split over two sentences that do not
//! continue each other is two fragments.

use crate::dates::{self, Tense, When};
use crate::llm::{Call, Llm, LlmError, ask_json, schema};
use crate::nemori::episode::{sentence_words, speaker_names};
use crate::store::Message;
use crate::text::words;
use crate::time::human_date;
use serde_json::Value;
use unicode_segmentation::UnicodeSegmentation;

/// The three kinds of personal information of §3.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Category {
    /// States, attributes, possessions, relationships ("what I am/have").
    Factual,
    /// Events and actions ("what I did").
    Experiential,
    /// Preferences, opinions, goals, plans, feelings ("what I like/want").
    Subjective,
}

impl Category {
    /// The item kind fragments of this category are stored under.
    pub fn kind(self) -> &'static str {
        match self {
            Category::Factual => "factual",
            Category::Experiential => "experiential",
            Category::Subjective => "subjective",
        }
    }

    /// The category of an item kind, if it is one.
    pub fn of_kind(kind: &str) -> Option<Category> {
        [Category::Factual, Category::Experiential, Category::Subjective]
            .into_iter()
            .find(|c| c.kind() == kind)
    }

    /// The JSON key of the extraction answer.
    fn json_key(self) -> &'static str {
        match self {
            Category::Factual => "Factual_Information",
            Category::Experiential => "Experiential_Information",
            Category::Subjective => "Subjective_Information",
        }
    }
}

/// The time of a fragment, in the four forms of §3.1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FragmentTime {
    /// An ongoing fact at the message date, or a resolved date (a day, a
    /// week, a month, …) of the event.
    At(When),
    /// A past event of unknown date: before this day (the message date).
    Before(i64),
    /// A plan or intention: after this day (the message date).
    After(i64),
    /// The message has no date.
    Unknown,
}

impl FragmentTime {
    /// How prompts show it: `7 May 2023`, `Before 8 May 2023`, `After 8
    /// May 2023`, `June 2023`; empty when unknown.
    pub fn render(&self) -> String {
        match self {
            FragmentTime::At(w) => w.render(),
            FragmentTime::Before(d) => format!("Before {}", human_date(d * 86_400)),
            FragmentTime::After(d) => format!("After {}", human_date(d * 86_400)),
            FragmentTime::Unknown => String::new(),
        }
    }

    /// Unix seconds of the day it refers to (for chronological order).
    pub fn secs(&self) -> Option<i64> {
        match self {
            FragmentTime::At(w) => Some(w.secs()),
            FragmentTime::Before(d) | FragmentTime::After(d) => Some(d * 86_400),
            FragmentTime::Unknown => None,
        }
    }

    /// Parses the model's `date`: `YYYY-MM-DD`, `Before YYYY-MM-DD` or
    /// `After YYYY-MM-DD`.
    pub fn parse(s: &str) -> Option<FragmentTime> {
        let s = s.trim();
        let day = |d: &str| iso_day(d.trim());
        let lower = s.to_ascii_lowercase();
        if let Some(rest) = lower.strip_prefix("before ") {
            return day(rest).map(FragmentTime::Before);
        }
        if let Some(rest) = lower.strip_prefix("after ") {
            return day(rest).map(FragmentTime::After);
        }
        day(s).map(|d| FragmentTime::At(When::Day(d)))
    }
}

/// Days since 1970-01-01 of an exact `YYYY-MM-DD`.
pub(crate) fn iso_day(s: &str) -> Option<i64> {
    if s.len() != 10 {
        return None;
    }
    crate::time::parse_iso8601(s).map(|t| t.div_euclid(86_400))
}

/// A memory fragment of one session, before it is stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Fragment {
    /// Index of its message in the session.
    pub message: usize,
    /// A short key phrase.
    pub key: String,
    /// The memory content.
    pub content: String,
    /// When it holds or happened.
    pub time: FragmentTime,
    /// Factual, experiential or subjective.
    pub category: Category,
}

impl Fragment {
    /// The stored (and rendered) text: `[time] key: content`.
    pub fn text(&self) -> String {
        let time = self.time.render();
        if time.is_empty() {
            format!("{}: {}", self.key, self.content)
        } else {
            format!("[{time}] {}: {}", self.key, self.content)
        }
    }

    /// What is embedded: key and content (§3.2.1).
    pub fn embed_text(&self) -> String {
        format!("{}: {}", self.key, self.content)
    }
}

/// Splits a stored fragment text `[time] key: content` into its parts
/// (time and key empty when absent).
pub fn split_text(text: &str) -> (&str, &str, &str) {
    let (time, rest) = match text.strip_prefix('[').and_then(|r| r.split_once("] ")) {
        Some((t, r)) => (t, r),
        None => ("", text),
    };
    match rest.split_once(": ") {
        Some((k, c)) if !k.is_empty() && k.len() <= 80 => (time, k, c),
        _ => (time, "", rest),
    }
}

/// Preference, plan, opinion and feeling markers.
const SUBJECTIVE: &[&str] = &[
    "like",
    "likes",
    "love",
    "loves",
    "loved",
    "hate",
    "hates",
    "prefer",
    "prefers",
    "think",
    "thinks",
    "believe",
    "believes",
    "feel",
    "feels",
    "felt",
    "want",
    "wants",
    "wish",
    "hope",
    "hopes",
    "plan",
    "plans",
    "planning",
    "usually",
    "often",
    "always",
    "goal",
    "goals",
    "dream",
    "dreams",
    "enjoy",
    "enjoys",
    "enjoyed",
    "favorite",
    "favourite",
    "passionate",
    "proud",
    "grateful",
    "excited",
    "afraid",
    "worried",
    "scared",
    "opinion",
    "interested",
    "important",
];

/// Past-tense event verbs.
const EXPERIENTIAL: &[&str] = &[
    "went",
    "did",
    "saw",
    "met",
    "visited",
    "attended",
    "bought",
    "tried",
    "took",
    "made",
    "got",
    "ran",
    "joined",
    "moved",
    "started",
    "finished",
    "learned",
    "learnt",
    "won",
    "lost",
    "traveled",
    "travelled",
    "celebrated",
    "adopted",
    "painted",
    "wrote",
    "gave",
    "spent",
    "found",
    "watched",
    "played",
    "came",
    "left",
    "quit",
    "signed",
    "volunteered",
    "received",
    "graduated",
    "read",
    "heard",
    "built",
    "drove",
    "flew",
    "ate",
    "began",
    "became",
    "been",
];

/// Regular verbs ending in -ed that are not past events.
const NOT_PAST: &[&str] = &[
    "need",
    "needed",
    "feed",
    "speed",
    "seed",
    "bed",
    "red",
    "shed",
    "breed",
    "indeed",
    "interested",
    "excited",
    "tired",
    "married",
    "scared",
    "worried",
    "based",
    "used",
    "supposed",
    "related",
    "named",
    "called",
    "limited",
    "talented",
    "dedicated",
    "motivated",
    "inspired",
    "blessed",
    "sacred",
    "hundred",
    "embed",
    "proceed",
    "exceed",
    "succeed",
    "loved",
    "enjoyed",
    "pleased",
    "amazed",
    "surprised",
    "determined",
    "involved",
    "prepared",
];

/// Possession and attribute markers.
const FACTUAL: &[&str] = &[
    "is", "am", "are", "have", "has", "own", "owns", "live", "lives", "work", "works", "know", "knows", "name", "age",
    "job", "sister", "brother", "mother", "father", "mom", "dad", "friend", "friends", "wife", "husband", "kids",
    "children", "son", "daughter", "pet", "pets", "dog", "cat", "family", "partner", "born", "years",
];

/// Verbs among the factual markers, kept out of keys (the nouns, such as
/// "sister", name the topic and stay).
const FACTUAL_VERBS: &[&str] = &[
    "is", "am", "are", "have", "has", "own", "owns", "live", "lives", "work", "works", "know", "knows", "born",
];

/// Words that say little about a topic, kept out of keys.
const KEY_SKIP: &[&str] = &[
    "going", "gonna", "really", "thing", "things", "lot", "lots", "pretty", "kind", "sort", "stuff", "actually",
    "totally", "super", "able", "get", "getting", "gets", "much", "many", "also", "just", "even", "still", "called",
    "named",
];

/// Words about time, kept out of keys (with the names of months and
/// weekdays, [`crate::time::is_calendar_word`]).
const TIME_WORDS: &[&str] = &[
    "yesterday",
    "today",
    "tonight",
    "tomorrow",
    "ago",
    "last",
    "next",
    "week",
    "weeks",
    "weekend",
    "month",
    "months",
    "year",
    "years",
    "day",
    "days",
    "morning",
    "evening",
    "night",
    "recently",
    "lately",
    "mon",
    "tue",
    "tues",
    "wed",
    "thu",
    "thur",
    "thurs",
    "fri",
    "sat",
    "sun",
];

/// Words ending in -ly that are nouns, kept in keys (other -ly words of six
/// letters or more are adverbs: "finally", "really").
const LY_NOUNS: &[&str] = &[
    "family",
    "supply",
    "assembly",
    "butterfly",
    "anomaly",
    "monopoly",
    "italy",
];

fn is_adverb(w: &str) -> bool {
    w.len() >= 6 && w.ends_with("ly") && !LY_NOUNS.contains(&w)
}

fn is_past_verb(w: &str) -> bool {
    EXPERIENTIAL.contains(&w) || (w.len() >= 5 && w.ends_with("ed") && !NOT_PAST.contains(&w))
}

/// The category of a sentence by the rules of the module notes;
/// `past_date` tells whether it holds a date expression in the past.
pub fn categorise(sentence: &str, past_date: bool) -> Category {
    let ws: Vec<String> = words(sentence).collect();
    let future = dates::tense(sentence) == Tense::Future;
    let subjective = ws.iter().filter(|w| SUBJECTIVE.contains(&w.as_str())).count() + 2 * usize::from(future);
    let experiential = ws.iter().filter(|w| is_past_verb(w)).count() + usize::from(past_date);
    let factual = ws.iter().filter(|w| FACTUAL.contains(&w.as_str())).count();
    if experiential == 0 && subjective == 0 && factual == 0 {
        Category::Factual
    } else if experiential >= subjective && experiential >= factual {
        Category::Experiential
    } else if subjective >= factual {
        Category::Subjective
    } else {
        Category::Factual
    }
}

/// The key of a sentence: its first three content words that are not
/// markers, time words, numbers or speaker names (`names`, lower case).
pub fn key_of(sentence: &str, names: &[String]) -> String {
    let content = sentence_words(sentence, names);
    let mut key: Vec<String> = Vec::new();
    for w in words(sentence) {
        let skip = w.chars().count() < 3
            || !content.contains(&w)
            || TIME_WORDS.contains(&w.as_str())
            || crate::time::is_calendar_word(&w)
            || SUBJECTIVE.contains(&w.as_str())
            || FACTUAL_VERBS.contains(&w.as_str())
            || KEY_SKIP.contains(&w.as_str())
            || is_adverb(&w)
            || is_past_verb(&w)
            || w.chars().all(|c| c.is_numeric())
            || key.contains(&w);
        if !skip {
            key.push(w);
            if key.len() == 3 {
                break;
            }
        }
    }
    if key.is_empty() {
        key = words(sentence).filter(|w| content.contains(w)).take(2).collect();
        key.dedup();
    }
    key.join(" ")
}

/// `sentence` with the speaker's first person replaced by `name`: `I` →
/// name, `I'm`/`I am` → `name is`, `I've`/`I have` → `name has`, `I'd` →
/// `name would`, `I'll` → `name will`, `me`/`myself` → name, `my`/`mine`
/// → `name's`.
pub fn third_person(sentence: &str, name: &str) -> String {
    let mut out = String::with_capacity(sentence.len() + 16);
    let chars: Vec<(usize, char)> = sentence.char_indices().collect();
    let word_char = |c: char| c.is_alphanumeric() || c == '\'' || c == '’';
    let mut i = 0;
    while i < chars.len() {
        let (start, c) = chars[i];
        if !word_char(c) {
            out.push(c);
            i += 1;
            continue;
        }
        let mut j = i;
        while j < chars.len() && word_char(chars[j].1) {
            j += 1;
        }
        let end = chars.get(j).map_or(sentence.len(), |&(e, _)| e);
        let word = &sentence[start..end];
        let norm = word.replace('’', "'");
        // The next word, for "I am" / "I have".
        let next_word = {
            let mut k = j;
            while k < chars.len() && chars[k].1 == ' ' {
                k += 1;
            }
            let mut l = k;
            while l < chars.len() && word_char(chars[l].1) {
                l += 1;
            }
            (k < l).then(|| {
                let a = chars[k].0;
                let b = chars.get(l).map_or(sentence.len(), |&(e, _)| e);
                (sentence[a..b].to_lowercase(), l)
            })
        };
        let replaced: Option<(String, usize)> = match norm.as_str() {
            "I" => match next_word.as_ref().map(|(w, l)| (w.as_str(), *l)) {
                Some(("am", l)) => Some((format!("{name} is"), l)),
                Some(("have", l)) => Some((format!("{name} has"), l)),
                _ => Some((name.to_string(), j)),
            },
            "I'm" => Some((format!("{name} is"), j)),
            "I've" => Some((format!("{name} has"), j)),
            "I'd" => Some((format!("{name} would"), j)),
            "I'll" => Some((format!("{name} will"), j)),
            _ => match norm.to_lowercase().as_str() {
                "me" | "myself" => Some((name.to_string(), j)),
                "my" | "mine" => Some((format!("{name}'s"), j)),
                _ => None,
            },
        };
        match replaced {
            Some((text, next)) => {
                out.push_str(&text);
                i = next;
            }
            None => {
                out.push_str(word);
                i = j;
            }
        }
    }
    out
}

/// Pronouns that point back at something said before.
const ANAPHORS: &[&str] = &[
    "it", "it's", "its", "itself", "she", "she's", "her", "he", "he's", "him", "his", "they", "they're", "them",
    "their",
];

/// Words that, opening a sentence, continue the one before.
const CONTINUERS: &[&str] = &["also", "and", "but", "so", "plus", "which"];

/// Whether a sentence continues what was said before: it opens with a
/// continuing word ("and", "but", "so", …) or holds a third-person
/// pronoun ("it", "she", "they", …). The pronoun may point inside the
/// sentence ("I went to a support group and it was great"); then the
/// sentence is filed under the topic before it although it names its own.
/// On `locomo-dev.json` (hashing embedder, hybrid retrieval) this found
/// more gold-answer words at every budget than the stricter rule "a
/// pronoun before any word of its own key" (0.639 against 0.618 at 500
/// tokens).
pub fn continues(sentence: &str) -> bool {
    let mut ws = words(sentence);
    ws.next()
        .is_some_and(|w| CONTINUERS.contains(&w.as_str()) || ANAPHORS.contains(&w.as_str()))
        || ws.any(|w| ANAPHORS.contains(&w.as_str()))
}

/// Words that open a question.
const INTERROGATIVES: &[&str] = &[
    "what", "who", "whom", "whose", "which", "when", "where", "why", "how", "do", "does", "did", "are", "is", "was",
    "were", "have", "has", "had", "can", "could", "would", "will", "should", "shall", "may", "might", "anything",
    "any", "so", "and", "or", "but", "right", "really",
];

/// Whether a sentence asks something: it ends with `?` and opens with a
/// question word ("What did you paint?"). A statement that ends in a
/// rhetorical question ("Spider-Man has always been a favorite of mine —
/// who doesn't love him?") is kept.
pub fn is_question(sentence: &str) -> bool {
    sentence.trim_end().ends_with('?')
        && words(sentence)
            .next()
            .is_some_and(|w| INTERROGATIVES.contains(&w.as_str()))
}

/// The offline fragments of a session (see the module notes), continuing
/// sentences filed under the topic before them ([`continues`]).
pub fn offline(session: &[&Message], min_content_words: usize) -> Vec<Fragment> {
    offline_with(session, min_content_words, true)
}

/// [`offline`], with the continuation rule on or off (off: every sentence
/// is filed under its own key).
pub fn offline_with(session: &[&Message], min_content_words: usize, continuation: bool) -> Vec<Fragment> {
    let names = speaker_names(session);
    let mut out = Vec::new();
    // The key of the last sentence that had one (questions included): what
    // a continuing sentence ("She gave it to me …") is about.
    let mut topic: Option<String> = None;
    for (i, m) in session.iter().enumerate() {
        for s in m.msg.text.unicode_sentences() {
            let s = s.trim();
            if s.is_empty() {
                continue;
            }
            if sentence_words(s, &names).len() < min_content_words.max(1) {
                continue;
            }
            let own = key_of(s, &names);
            let key = match &topic {
                Some(t) if continuation && continues(s) => t.clone(),
                _ => own.clone(),
            };
            if !key.is_empty() {
                topic = Some(key.clone());
            }
            if is_question(s) {
                continue;
            }
            let mentions = m.msg.said_at.map(|t| dates::find(s, t)).unwrap_or_default();
            let day = m.msg.said_at.map(|t| t.div_euclid(86_400));
            let past_date = day.is_some_and(|d| mentions.iter().any(|x| x.relative && x.when.first_day() < d));
            let category = categorise(s, past_date);
            let time = match (mentions.first(), day) {
                (Some(x), _) => FragmentTime::At(x.when),
                (None, None) => FragmentTime::Unknown,
                (None, Some(d)) => match category {
                    Category::Experiential => FragmentTime::Before(d),
                    Category::Subjective if dates::tense(s) == Tense::Future => FragmentTime::After(d),
                    _ => FragmentTime::At(When::Day(d)),
                },
            };
            let key = if key.is_empty() {
                category.kind().to_string()
            } else {
                key
            };
            out.push(Fragment {
                message: i,
                key,
                content: third_person(s, &m.msg.speaker),
                time,
                category,
            });
        }
    }
    out
}

/// One message as the extraction prompt shows it: `[msg-N] (2023-05-08
/// Monday) Speaker: text`.
fn prompt_line(n: usize, m: &Message) -> String {
    let when = m
        .msg
        .said_at
        .map(|t| {
            let day = t.div_euclid(86_400);
            let names = [
                "Monday",
                "Tuesday",
                "Wednesday",
                "Thursday",
                "Friday",
                "Saturday",
                "Sunday",
            ];
            let wd = names[(day + 3).rem_euclid(7) as usize];
            format!(" ({} {wd})", crate::time::date_string(t))
        })
        .unwrap_or_default();
    format!("[msg-{n}]{when} {}: {}", m.msg.speaker, m.msg.text.replace('\n', " "))
}

const EXTRACT_PROMPT: &str = include_str!("../prompts/premem_extract.txt");

/// The fragments of a session written by a model (Appendix A, Figure 3).
pub fn with_llm(llm: &dyn Llm, session: &[&Message]) -> Result<Vec<Fragment>, LlmError> {
    let mut user = String::from("<Conversation>\n");
    for (i, m) in session.iter().enumerate() {
        user.push_str(&prompt_line(i + 1, m));
        user.push('\n');
    }
    let days: Vec<Option<i64>> = session
        .iter()
        .map(|m| m.msg.said_at.map(|t| t.div_euclid(86_400)))
        .collect();
    let n = session.len();
    let fragment = schema::object(
        &[
            ("key", schema::short()),
            ("value", schema::text()),
            ("message_id", schema::integer(1, n)),
            (
                "date",
                schema::matching("^((Before|After) )?[0-9]{4}-[0-9]{2}-[0-9]{2}$"),
            ),
        ],
        &["key", "value", "message_id"],
    );
    // A session's fragments: at most as many per category as it has
    // messages (a bound that also stops a model that repeats itself).
    let list = || schema::array(fragment.clone(), Some(n));
    let schema = schema::object(
        &[
            ("Factual_Information", list()),
            ("Experiential_Information", list()),
            ("Subjective_Information", list()),
        ],
        &[
            "Factual_Information",
            "Experiential_Information",
            "Subjective_Information",
        ],
    );
    ask_json(
        llm,
        &Call::json("premem_extract", &schema),
        EXTRACT_PROMPT,
        &user,
        |v| parse_fragments(v, &days),
    )
}

/// Checks an extraction answer against a session whose messages have the
/// days `days` (see the module notes).
pub(crate) fn parse_fragments(v: &Value, days: &[Option<i64>]) -> Result<Vec<Fragment>, String> {
    let n = days.len();
    let mut out = Vec::new();
    for category in [Category::Factual, Category::Experiential, Category::Subjective] {
        let name = category.json_key();
        let list = v
            .get(name)
            .and_then(Value::as_array)
            .ok_or(format!("`{name}` must be a list (empty when there is nothing)"))?;
        for (i, f) in list.iter().enumerate() {
            let at = format!("{name}[{i}]");
            let text = |k: &str| {
                f.get(k)
                    .and_then(Value::as_str)
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(|s| s.replace('\n', " "))
                    .ok_or(format!("{at}: `{k}` must be a non-empty string"))
            };
            let (key, content) = (text("key")?, text("value")?);
            let id = match f.get("message_id") {
                Some(Value::String(s)) => s.trim().trim_start_matches("msg-").parse::<usize>().ok(),
                Some(Value::Number(x)) => x.as_u64().map(|x| x as usize),
                _ => None,
            }
            .filter(|k| (1..=n).contains(k))
            .ok_or(format!("{at}: `message_id` must name a message msg-1 to msg-{n}"))?;
            let time = match f.get("date") {
                None | Some(Value::Null) => {
                    days[id - 1].map_or(FragmentTime::Unknown, |d| FragmentTime::At(When::Day(d)))
                }
                Some(Value::String(s)) if s.trim().is_empty() => {
                    days[id - 1].map_or(FragmentTime::Unknown, |d| FragmentTime::At(When::Day(d)))
                }
                Some(Value::String(s)) => FragmentTime::parse(s).ok_or(format!(
                    "{at}: `date` `{s}` is not YYYY-MM-DD, Before YYYY-MM-DD or After YYYY-MM-DD"
                ))?,
                Some(_) => return Err(format!("{at}: `date` must be a string")),
            };
            out.push(Fragment {
                message: id - 1,
                key,
                content,
                time,
                category,
            });
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::NewMessage;
    use crate::time::days_from_civil as day_of;
    use serde_json::json;

    fn m(i: i64, speaker: &str, text: &str) -> Message {
        Message {
            id: i,
            user: "u".into(),
            seq: i,
            msg: NewMessage {
                session: "s".into(),
                speaker: speaker.into(),
                text: text.into(),
                // 8 May 2023, a Monday.
                said_at: Some(1_683_554_160),
                source_ref: None,
            },
        }
    }

    #[test]
    fn offline_fragments_have_categories_times_and_keys() {
        let msgs = [
            m(
                1,
                "Caroline",
                "Hey Mel! I went to a LGBTQ support group yesterday and it was so powerful.",
            ),
            m(2, "Melanie", "Wow, that's great! What did you talk about?"),
            m(3, "Melanie", "I love painting sunsets with my kids."),
            m(4, "Caroline", "My sister Clara lives in Lisbon."),
            m(5, "Melanie", "I'm going to visit the museum next Friday."),
            m(6, "Caroline", "I adopted a kitten from the shelter."),
        ];
        let seg: Vec<&Message> = msgs.iter().collect();
        let f = offline(&seg, 2);
        let got: Vec<(usize, &str, Category, String)> = f
            .iter()
            .map(|x| (x.message, x.key.as_str(), x.category, x.time.render()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    0,
                    "lgbtq support group",
                    Category::Experiential,
                    "7 May 2023".to_string()
                ),
                (
                    2,
                    "painting sunsets kids",
                    Category::Subjective,
                    "8 May 2023".to_string()
                ),
                (3, "sister clara lisbon", Category::Factual, "8 May 2023".to_string()),
                (4, "visit museum", Category::Subjective, "12 May 2023".to_string()),
                (
                    5,
                    "kitten shelter",
                    Category::Experiential,
                    "Before 8 May 2023".to_string()
                ),
            ]
        );
        assert_eq!(
            f[0].content,
            "Caroline went to a LGBTQ support group yesterday and it was so powerful."
        );
        assert_eq!(f[1].content, "Melanie love painting sunsets with Melanie's kids.");
        assert_eq!(
            f[0].text(),
            "[7 May 2023] lgbtq support group: Caroline went to a LGBTQ support group yesterday and it was so powerful."
        );
        assert_eq!(
            split_text(&f[0].text()),
            ("7 May 2023", "lgbtq support group", f[0].content.as_str())
        );
        // A plan without a date is "After" the message date.
        let plan = [m(1, "Ann", "I plan to learn the cello someday.")];
        let f = offline(&plan.iter().collect::<Vec<_>>(), 2);
        assert_eq!(
            (f[0].category, f[0].time.render()),
            (Category::Subjective, "After 8 May 2023".into())
        );
        // Deterministic.
        assert_eq!(offline(&seg, 2), offline(&seg, 2));
    }

    #[test]
    fn questions_are_told_from_rhetorical_ones() {
        assert!(is_question("What did you paint?"));
        assert!(is_question("Do you have a favorite superhero?"));
        assert!(!is_question(
            "Spider-Man has always been a favorite of mine - who doesn't love Peter Parker?"
        ));
        assert!(!is_question("That's neat."));
        // A rhetorical question is a fragment; a real one is not.
        let msgs = [m(
            1,
            "Joanna",
            "Spider-Man has always been my favorite, who doesn't love him? Do you have one?",
        )];
        let f = offline(&msgs.iter().collect::<Vec<_>>(), 2);
        assert_eq!(f.len(), 1, "{f:?}");
        assert!(
            f[0].content.starts_with("Spider-Man has always been Joanna's favorite"),
            "{f:?}"
        );
    }

    #[test]
    fn continuing_sentences_keep_the_key_before_them() {
        assert!(continues("She gave it to me when I was young."));
        assert!(continues("And the colours are lovely."));
        assert!(continues("A gift: it stands for love and faith."));
        assert!(continues("I went to a support group and it was great."));
        assert!(!continues("The eagle symbolizes freedom."));
        assert!(!continues("Italy is lovely; I loved Sheffield."));
        let msgs = [
            m(1, "Melanie", "What does your necklace mean to you?"),
            m(2, "Caroline", "It stands for love, faith and strength."),
            m(
                3,
                "Caroline",
                "Thanks! This bracelet is special to me - a gift from my grandma. \
                 She gave it to me when I was young.",
            ),
        ];
        let f = offline(&msgs.iter().collect::<Vec<_>>(), 2);
        let keys: Vec<(usize, &str)> = f.iter().map(|x| (x.message, x.key.as_str())).collect();
        // The question is no fragment, but the answer is filed under it.
        assert_eq!(
            keys,
            [
                (1, "necklace mean"),
                (2, "bracelet special gift"),
                (2, "bracelet special gift")
            ],
            "{f:?}"
        );
        assert_eq!(f[0].content, "It stands for love, faith and strength.");
    }

    #[test]
    fn first_person_becomes_the_speaker() {
        for (s, want) in [
            ("I'm moving to Porto.", "Ann is moving to Porto."),
            ("I am tired but I have a plan.", "Ann is tired but Ann has a plan."),
            ("I’ve been there with my dad.", "Ann has been there with Ann's dad."),
            ("It was mine, give it to me!", "It was Ann's, give it to Ann!"),
            ("I'd go, I'll go.", "Ann would go, Ann will go."),
            ("Imagine Iris in my Ibiza.", "Imagine Iris in Ann's Ibiza."),
        ] {
            assert_eq!(third_person(s, "Ann"), want, "{s}");
        }
    }

    #[test]
    fn model_answers_are_checked() {
        let d = Some(day_of(2024, 5, 17));
        let days = [d, d, None];
        let ok = json!({
            "Factual_Information": [{"key": "residence", "value": "Alex lives in Rome", "message_id": "msg-1", "date": "2024-05-17"}],
            "Experiential_Information": [{"key": "job", "value": "Alex quits job", "message_id": "msg-2", "date": "Before 2024-05-17"}],
            "Subjective_Information": [
                {"key": "career", "value": "Alex considers UX design", "message_id": "msg-2", "date": "after 2024-05-17"},
                {"key": "mood", "value": "Alex feels fine", "message_id": 3, "date": null}
            ]
        });
        let f = parse_fragments(&ok, &days).unwrap();
        assert_eq!(f.len(), 4);
        assert_eq!(
            (f[0].category, f[0].time),
            (Category::Factual, FragmentTime::At(When::Day(day_of(2024, 5, 17))))
        );
        assert_eq!(f[1].time, FragmentTime::Before(day_of(2024, 5, 17)));
        assert_eq!(f[2].time.render(), "After 17 May 2024");
        assert_eq!((f[3].message, f[3].time), (2, FragmentTime::Unknown));
        assert_eq!(f[1].text(), "[Before 17 May 2024] job: Alex quits job");
        let empty = json!({"Factual_Information": [], "Experiential_Information": [], "Subjective_Information": []});
        assert!(parse_fragments(&empty, &days).unwrap().is_empty());
        for (bad, why) in [
            (
                json!({"Factual_Information": [], "Experiential_Information": []}),
                "Subjective_Information",
            ),
            (
                json!({"Factual_Information": [{"key": "k", "value": "v", "message_id": "msg-4", "date": "2024-05-17"}], "Experiential_Information": [], "Subjective_Information": []}),
                "msg-1 to msg-3",
            ),
            (
                json!({"Factual_Information": [{"key": "k", "value": "v", "message_id": "msg-1", "date": "last week"}], "Experiential_Information": [], "Subjective_Information": []}),
                "`date` `last week`",
            ),
            (
                json!({"Factual_Information": [{"key": " ", "value": "v", "message_id": "msg-1"}], "Experiential_Information": [], "Subjective_Information": []}),
                "`key`",
            ),
            (
                json!({"Factual_Information": "none", "Experiential_Information": [], "Subjective_Information": []}),
                "must be a list",
            ),
        ] {
            let e = parse_fragments(&bad, &days).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert_eq!(FragmentTime::parse("2024-02-30"), None);
        assert_eq!(
            FragmentTime::parse("Before 2024-02-29"),
            Some(FragmentTime::Before(day_of(2024, 2, 29)))
        );
    }
}
