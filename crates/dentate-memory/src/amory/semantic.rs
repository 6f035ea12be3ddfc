//! Semanticization (Amory §3.2): during consolidation, **peripheral**
//! facts of a narrative — facts its headlines do not already imply —
//! become `(subject, predicate, object)` triples of the semantic graph
//! ([`crate::graph`]), each citing the messages of its fragment.
//!
//! With a model, the semanticization prompt of Appendix A, asked for
//! triples instead of free-text facts. Offline, **patterns** over simple
//! copular and possessive sentences, with `I`/`my` resolved to the speaker
//! and `you`/`your` to the other speaker:
//! - `my sister Clara …` → (Ann, `'s sister is`, Clara);
//! - `my favourite dish is lentil soup` → (Bob, `'s favourite dish is`,
//!   lentil soup); `Ines is my teacher` → (Ann, `'s teacher is`, Ines);
//! - `Pixel is two` / `I am a nurse` / `I'm not a fan of jazz` →
//!   (Pixel, is, two) / (Ann, is, a nurse) / (Ann, is not, a fan of jazz);
//! - `I have two kids` / `Clara has a studio` → (Ann, has, two kids) …;
//! - `a grey cat called Pixel` → (Pixel, is, a grey cat).
//!
//! A copula before a verb form (`is moving`, `was born`, `am excited`) and
//! a perfect `have` (`have been`, `had gone`) make no triple; objects end
//! at a clause break (punctuation, `and`, `but`, `because`, …) and must
//! hold a content word that is not a feeling ("happy", "excited").
//! Offline keeps every triple the patterns find (once): they read only
//! attribute and relation sentences, the kind of fact the paper calls
//! peripheral, and judging whether a headline already implies a fact needs
//! the model — offline headlines are keywords and quotations, against
//! which the core facts of a short narrative would all look "implied".
//!
//! Weaker than the model: only these shapes are read, so "Clara moved to
//! Lisbon" (a plain verb) gives nothing; pronouns other than I/my/you/your
//! are not resolved (a `she is …` sentence gives nothing); an object is
//! the speaker's words, relative dates ("last week") included; and no fact
//! is left out for being central to the story.

use super::binding::{names_in, split_speaker};
use super::tree::story_prompt;
use super::tree::{Frag, Head};
use crate::graph::{entity_key, predicate_key};
use crate::llm::{Call, Llm, LlmError, ask_json, schema};
use crate::text::content_words;
use serde_json::Value;
use unicode_segmentation::UnicodeSegmentation;

/// A triple learned from one fragment of a window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fact {
    /// Index of its fragment in the window.
    pub item: usize,
    /// Subject.
    pub subject: String,
    /// Predicate.
    pub predicate: String,
    /// Object.
    pub object: String,
}

impl Fact {
    /// The keys duplicates are compared by.
    pub fn keys(&self) -> (String, String, String) {
        (
            entity_key(&self.subject),
            predicate_key(&self.predicate),
            entity_key(&self.object),
        )
    }
}

const LEAD: &[&str] = &[
    "yeah", "yes", "oh", "well", "so", "and", "but", "also", "actually", "anyway", "honestly", "btw", "wow", "hey",
    "hi", "ok", "okay", "plus", "now", "then", "haha", "lol", "ah", "um", "hmm",
];
const COPULA: &[&str] = &["is", "are", "was", "were", "am"];
const HAVE: &[&str] = &["has", "have", "had"];
const BREAK: &[&str] = &[
    "and", "but", "because", "so", "which", "who", "while", "when", "since", "although", "though", "if", "or", "that",
    "where", "as",
];
const FEELINGS: &[&str] = &[
    "happy",
    "excited",
    "sad",
    "proud",
    "thrilled",
    "grateful",
    "sorry",
    "tired",
    "busy",
    "glad",
    "fine",
    "okay",
    "ok",
    "great",
    "good",
    "amazing",
    "awesome",
    "fun",
    "cool",
    "nice",
    "lucky",
    "blessed",
    "stoked",
    "bummed",
    "sure",
    "right",
    "true",
    "wonderful",
    "beautiful",
    "lovely",
    "hard",
    "tough",
    "crazy",
    "incredible",
    "fantastic",
];
const PARTICIPLES: &[&str] = &[
    "been", "done", "seen", "gone", "made", "taken", "given", "known", "become", "come", "found", "lost", "left",
    "read", "heard", "met", "told", "said", "thought", "bought", "brought", "felt", "kept", "born", "got", "gotten",
    "won", "begun", "written", "driven", "eaten", "run", "sent", "spent", "built", "grown", "to", "just", "always",
    "never", "already", "finally", "also", "really",
];
const DETERMINERS: &[&str] = &["a", "an", "the", "my", "your", "our", "his", "her", "their"];
/// Adverbs skipped between a copula and its complement.
const ADVERBS: &[&str] = &[
    "so",
    "super",
    "really",
    "very",
    "still",
    "just",
    "also",
    "truly",
    "pretty",
    "totally",
    "always",
    "never",
    "already",
    "finally",
    "definitely",
    "actually",
    "quite",
    "kinda",
    "sometimes",
    "usually",
    "now",
];
/// Complements that state a mood, a plan or a place in the talk, not a
/// fact (`I'm off to…`, `I'm proud of…`, `I'm here for you`).
const NOT_FACTS: &[&str] = &[
    "off", "here", "there", "back", "able", "ready", "willing", "about", "up", "out", "such", "all", "proud",
    "grateful", "thankful", "excited", "happy", "glad", "sorry", "lucky", "blessed", "sad", "tired", "thrilled",
    "stoked", "bummed", "sure", "like", "doing", "feeling",
];

/// One word of a sentence: as written, and lower case without punctuation.
#[derive(Debug, Clone)]
struct Tok<'a> {
    raw: &'a str,
    norm: String,
}

impl Tok<'_> {
    /// Whether the word ends a clause (its punctuation).
    fn ends_clause(&self) -> bool {
        self.raw.ends_with([',', ';', '.', '!', '?', ':'])
    }
    fn bare(&self) -> &str {
        self.raw
            .trim_matches(|c: char| !c.is_alphanumeric() && c != '\'' && c != '’' && c != '-')
    }
    fn is_name(&self) -> bool {
        let b = self.bare();
        let b = b.strip_suffix("'s").or_else(|| b.strip_suffix("’s")).unwrap_or(b);
        b.chars().next().is_some_and(char::is_uppercase) && !names_in(&format!("x {b}")).is_empty()
    }
    fn name(&self) -> String {
        let b = self.bare();
        b.strip_suffix("'s")
            .or_else(|| b.strip_suffix("’s"))
            .unwrap_or(b)
            .to_string()
    }
    fn is_lower_word(&self) -> bool {
        let b = self.bare();
        !b.is_empty() && b.chars().all(|c| c.is_lowercase() || c == '-')
    }
}

fn tokens(sentence: &str) -> Vec<Tok<'_>> {
    sentence
        .split_whitespace()
        .map(|raw| Tok {
            raw,
            norm: raw
                .trim_matches(|c: char| !c.is_alphanumeric() && c != '\'' && c != '’')
                .replace('’', "'")
                .to_lowercase(),
        })
        .filter(|t| !t.norm.is_empty())
        .collect()
}

/// Who a pronoun or possessive names: the speaker for I/my, the other
/// speaker for you/your.
fn owner_of<'a>(norm: &str, speaker: &'a str, addressee: Option<&'a str>) -> Option<&'a str> {
    match norm {
        "i" | "my" | "me" | "i'm" => Some(speaker),
        "you" | "your" | "you're" => addressee,
        _ => None,
    }
}

/// Up to three lower-case words from `p` that are not a verb or a clause
/// word: a possessed noun phrase (`favourite dish`).
fn noun_phrase(t: &[Tok<'_>], p: usize) -> usize {
    let mut q = p;
    while q < t.len()
        && q - p < 3
        && t[q].is_lower_word()
        && !COPULA.contains(&t[q].norm.as_str())
        && !HAVE.contains(&t[q].norm.as_str())
        && !dentate_core::lexical::ENGLISH_STOP_WORDS.contains(&t[q].norm.as_str())
    {
        q += 1;
        if t[q - 1].ends_clause() {
            break;
        }
    }
    q
}

/// The possessed noun phrase from `p` ([`noun_phrase`]) and the index
/// after it; `None` when there is none.
fn possessed(t: &[Tok<'_>], p: usize) -> Option<(String, usize)> {
    let q = noun_phrase(t, p);
    (q > p).then(|| (t[p..q].iter().map(Tok::bare).collect::<Vec<_>>().join(" "), q))
}

/// The object from `p`: words to a clause break, at most eight, with
/// I/my/me/you/your resolved. `None` when it holds no content word that
/// is not a feeling.
fn object(t: &[Tok<'_>], p: usize, speaker: &str, addressee: Option<&str>) -> Option<String> {
    let mut words: Vec<String> = Vec::new();
    for tok in t.iter().skip(p).take(8) {
        if !words.is_empty() && BREAK.contains(&tok.norm.as_str()) {
            break;
        }
        let bare = tok.bare();
        let w = match (tok.norm.as_str(), owner_of(&tok.norm, speaker, addressee)) {
            ("my" | "your", Some(o)) => format!("{o}'s"),
            ("me" | "you", Some(o)) => o.to_string(),
            _ => bare.to_string(),
        };
        if !w.is_empty() {
            words.push(w);
        }
        if tok.ends_clause() {
            break;
        }
    }
    let text = words.join(" ");
    let cw: Vec<String> = content_words(&text)
        .into_iter()
        .filter(|w| !FEELINGS.contains(&w.as_str()))
        .collect();
    (!cw.is_empty()).then_some(text)
}

/// Whether the word after a copula or `have` is a verb form (progressive,
/// participle) rather than the start of a complement.
fn verb_form(t: &Tok<'_>) -> bool {
    let w = t.norm.as_str();
    (w.ends_with("ing") && w.len() > 4)
        || (w.ends_with("ed") && w.len() > 4)
        || PARTICIPLES.contains(&w)
        || w == "going"
        || w == "gonna"
}

/// The triples of one sentence said by `speaker` to `addressee`. A name
/// that opens the sentence is a subject only when it is in `known` (the
/// narrative's characters): a capitalised first word is as often a common
/// noun ("Pottery is…", "Change is…").
pub fn extract_triples(
    sentence: &str,
    speaker: &str,
    addressee: Option<&str>,
    known: &[String],
) -> Vec<(String, String, String)> {
    let t = tokens(sentence);
    let mut out: Vec<(String, String, String)> = Vec::new();
    let mut push = |s: &str, p: &str, o: &str| {
        let triple = (s.to_string(), p.to_string(), o.to_string());
        if !s.is_empty() && !o.is_empty() && !out.contains(&triple) {
            out.push(triple);
        }
    };
    // Appositives anywhere: `my sister Clara`, `a cat called Pixel`.
    for i in 0..t.len() {
        if let Some(owner) = ["my", "your"]
            .contains(&t[i].norm.as_str())
            .then(|| owner_of(&t[i].norm, speaker, addressee))
            .flatten()
            && let Some((np, q)) = possessed(&t, i + 1)
            && q < t.len()
            && q - i - 1 <= 2
            && t[q].is_name()
            && !t[q - 1].ends_clause()
        {
            push(owner, &format!("'s {np} is"), &t[q].name());
        }
        if (t[i].norm == "called" || t[i].norm == "named")
            && i + 1 < t.len()
            && t[i + 1].is_name()
            && let Some(d) = (i.saturating_sub(5)..i)
                .rev()
                .find(|&j| DETERMINERS.contains(&t[j].norm.as_str()))
            && d + 1 < i
            && t[d + 1..i].iter().all(|w| {
                w.is_lower_word()
                    && !w.ends_clause()
                    && !COPULA.contains(&w.norm.as_str())
                    && !HAVE.contains(&w.norm.as_str())
            })
        {
            let np: Vec<&str> = t[d + 1..i].iter().map(Tok::bare).collect();
            let name = t[i + 1].name();
            match owner_of(&t[d].norm, speaker, addressee).filter(|_| t[d].norm != "me") {
                Some(owner) => push(owner, &format!("'s {} is", np.join(" ")), &name),
                None => push(&name, "is", &format!("{} {}", t[d].bare().to_lowercase(), np.join(" "))),
            }
        }
    }
    // The main clause: subject, then a copula or `have`.
    let mut p = 0;
    while p < t.len() && LEAD.contains(&t[p].norm.as_str()) {
        p += 1;
    }
    if p >= t.len() {
        return out;
    }
    // A capitalised first word that is not a known name may be a common
    // noun: it only makes the possessive fact `X is my Y`.
    let mut unknown = false;
    // (subject, possessed noun phrase, copula implied by a contraction)
    let (subject, possessed, implied): (String, Option<String>, bool) = match t[p].norm.as_str() {
        "i" => (speaker.to_string(), None, false),
        "i'm" => (speaker.to_string(), None, true),
        "my" | "your" => {
            let Some(owner) = owner_of(&t[p].norm, speaker, addressee) else {
                return out;
            };
            let Some((np, q)) = possessed(&t, p + 1) else {
                return out;
            };
            p = q - 1;
            // `my sister Clara is …`: the clause is about Clara.
            if q < t.len() && t[q].is_name() {
                p = q;
                (t[q].name(), None, false)
            } else {
                (owner.to_string(), Some(np), false)
            }
        }
        _ if t[p].is_name() => {
            let name = t[p].name();
            unknown = !known.iter().any(|k| k.eq_ignore_ascii_case(&name));
            if t[p].norm.ends_with("'s") {
                let Some((np, q)) = possessed(&t, p + 1).filter(|_| !unknown) else {
                    return out;
                };
                p = q - 1;
                (name, Some(np), false)
            } else {
                (name, None, false)
            }
        }
        _ => return out,
    };
    let mut v = p + 1;
    let verb = if implied {
        "is".to_string()
    } else {
        match t.get(v).map(|x| x.norm.as_str()) {
            Some(w) if COPULA.contains(&w) || HAVE.contains(&w) => {
                v += 1;
                // The subject is one person or thing.
                match w {
                    "am" => "is".to_string(),
                    "have" => "has".to_string(),
                    _ => w.to_string(),
                }
            }
            _ => return out,
        }
    };
    let mut negated = false;
    if t.get(v).is_some_and(|x| x.norm == "not") {
        negated = true;
        v += 1;
    }
    let is_have = HAVE.contains(&verb.as_str());
    if is_have && t.get(v).is_some_and(|x| x.norm == "got") {
        v += 1;
    }
    while !is_have && t.get(v).is_some_and(|x| ADVERBS.contains(&x.norm.as_str())) {
        v += 1;
    }
    let Some(next) = t.get(v) else { return out };
    let called = !is_have && (next.norm == "called" || next.norm == "named");
    if !called && (verb_form(next) || (!is_have && NOT_FACTS.contains(&next.norm.as_str()))) {
        return out;
    }
    let obj_start = if called { v + 1 } else { v };
    let Some(obj) = object(&t, obj_start, speaker, addressee) else {
        return out;
    };
    let verb = if negated { format!("{verb} not") } else { verb };
    let verb = if called { format!("{verb} {}", next.norm) } else { verb };
    match possessed {
        Some(np) => push(&subject, &format!("'s {np} {verb}"), &obj),
        None => {
            // `Ines is my teacher (at …)`: the possession is a fact of its
            // own; the whole object stays when it says more.
            let owned = obj.split_once("'s ").filter(|(o, _)| {
                !is_have && !negated && *o != subject && [speaker].iter().chain(addressee.iter()).any(|x| x == o)
            });
            match owned {
                Some((o, rest)) => {
                    let np: Vec<&str> = rest
                        .split_whitespace()
                        .take_while(|w| {
                            w.chars().all(|c| c.is_lowercase() || c == '-')
                                && !dentate_core::lexical::ENGLISH_STOP_WORDS.contains(w)
                        })
                        .take(3)
                        .collect();
                    if np.is_empty() {
                        if !unknown {
                            push(&subject, &verb, &obj);
                        }
                    } else {
                        push(o, &format!("'s {} is", np.join(" ")), &subject);
                        if np.len() < rest.split_whitespace().count() && !unknown {
                            push(&subject, &verb, &obj);
                        }
                    }
                }
                None if !unknown => push(&subject, &verb, &obj),
                None => {}
            }
        }
    }
    out
}

/// Offline semanticization of a window: each fragment (`Speaker: text`,
/// with the other speaker when known) read by [`extract_triples`]
/// sentence by sentence, with the narrative's characters as the known
/// names; each triple kept once.
pub fn offline(window: &[(&str, Option<&str>)], known: &[String]) -> Vec<Fact> {
    let mut out: Vec<Fact> = Vec::new();
    for (i, (text, addressee)) in window.iter().enumerate() {
        let (speaker, body) = split_speaker(text);
        if speaker.is_empty() {
            continue;
        }
        for s in body.unicode_sentences() {
            for (subject, predicate, object) in extract_triples(s, speaker, *addressee, known) {
                let f = Fact {
                    item: i,
                    subject,
                    predicate,
                    object,
                };
                if !out.iter().any(|g| g.keys() == f.keys()) {
                    out.push(f);
                }
            }
        }
    }
    out
}

const SEMANTICIZE_PROMPT: &str = include_str!("../prompts/amory_semanticize.txt");

/// Semanticization with a model, given the narrative's head and every
/// sub-plot headline (this window's included).
pub fn with_llm(llm: &dyn Llm, head: &Head, subplots: &[&str], window: &[&Frag]) -> Result<Vec<Fact>, LlmError> {
    let user = story_prompt(head, subplots, window);
    let n = window.len();
    let fact = schema::object(
        &[
            ("subject", schema::short()),
            ("predicate", schema::short()),
            ("object", schema::text()),
            ("item", schema::integer(1, n)),
        ],
        &["subject", "predicate", "object", "item"],
    );
    let schema = schema::object(&[("facts", schema::array(fact, Some(2 * n)))], &["facts"]);
    ask_json(
        llm,
        &Call::json("amory_semanticize", &schema),
        SEMANTICIZE_PROMPT,
        &user,
        |v| parse(v, n),
    )
}

/// Checks `{"facts": [{"subject", "predicate", "object", "item"}]}`.
fn parse(v: &Value, n: usize) -> Result<Vec<Fact>, String> {
    let facts = v
        .get("facts")
        .and_then(Value::as_array)
        .ok_or("`facts` must be a list")?;
    let mut out = Vec::with_capacity(facts.len());
    for (i, f) in facts.iter().enumerate() {
        let part = |k: &str| {
            f.get(k)
                .and_then(Value::as_str)
                .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
                .filter(|s| !s.is_empty())
                .ok_or(format!("fact {} needs a non-empty string `{k}`", i + 1))
        };
        let item = match f.get("item").and_then(Value::as_u64) {
            Some(x) if (1..=n as u64).contains(&x) => x as usize - 1,
            _ => return Err(format!("fact {} needs `item`, a number from 1 to {n}", i + 1)),
        };
        let fact = Fact {
            item,
            subject: part("subject")?,
            predicate: part("predicate")?,
            object: part("object")?,
        };
        if !out.iter().any(|g: &Fact| g.keys() == fact.keys()) {
            out.push(fact);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn t(s: &str, speaker: &str) -> Vec<String> {
        let known = ["Ann", "Bob", "Clara", "Ines", "Pixel"].map(String::from);
        extract_triples(s, speaker, Some("Bob"), &known)
            .into_iter()
            .map(|(s, p, o)| crate::graph::triple_text(&s, &p, &o))
            .collect()
    }

    #[test]
    fn copular_and_possessive_sentences_become_triples() {
        assert_eq!(
            t("My sister Clara is an architect in Lisbon.", "Ann"),
            ["Ann's sister is Clara", "Clara is an architect in Lisbon"]
        );
        assert_eq!(
            t("My favourite dish is the spicy lentil soup my mother cooks.", "Bob"),
            ["Bob's favourite dish is the spicy lentil soup Bob's mother cooks"]
        );
        assert_eq!(t("Ines is my cello teacher.", "Ann"), ["Ann's cello teacher is Ines"]);
        assert_eq!(t("Pixel is two.", "Ann"), ["Pixel is two"]);
        assert_eq!(t("I am a nurse, and I love it.", "Ann"), ["Ann is a nurse"]);
        assert_eq!(t("Yeah, I'm not a fan of jazz.", "Ann"), ["Ann is not a fan of jazz"]);
        assert_eq!(t("I have two kids and a dog.", "Ann"), ["Ann has two kids"]);
        assert_eq!(
            t("Clara has a studio near the river.", "Ann"),
            ["Clara has a studio near the river"]
        );
        assert_eq!(
            t("I adopted a grey cat called Pixel from the shelter.", "Ann"),
            ["Pixel is a grey cat"]
        );
        assert_eq!(t("My cat is called Pixel.", "Ann"), ["Ann's cat is called Pixel"]);
        assert_eq!(
            t("Your painting is in the gallery now.", "Ann"),
            ["Bob's painting is in the gallery now"]
        );
        // Verb forms, feelings and unresolved pronouns make nothing.
        for none in [
            "Clara is moving to Lisbon.",
            "I was born in Sweden.",
            "I am so excited!",
            "I'm so proud of you for doing that.",
            "I'm off to go swimming with the kids.",
            "I'm still figuring out the details.",
            "She is an architect.",
            "I have been to Lisbon.",
            "I have to go.",
            "It is great.",
            "Clara moved to Lisbon.",
        ] {
            assert!(t(none, "Ann").is_empty(), "{none}: {:?}", t(none, "Ann"));
        }
        // Without a known addressee, `your` is not resolved.
        assert!(extract_triples("Your dog is called Max.", "Ann", None, &[]).is_empty());
        // An unknown capitalised first word is not taken for a name; the
        // possessed phrase stops at a stop word.
        assert!(t("Pottery is a huge part of my life.", "Ann").is_empty());
        assert_eq!(
            extract_triples("Ines is my teacher at the school.", "Ann", None, &[]),
            [("Ann".to_string(), "'s teacher is".to_string(), "Ines".to_string())]
        );
        assert!(t("Can't wait to see your show - the LGBTQ community needs it!", "Ann").is_empty());
    }

    #[test]
    fn window_facts_are_kept_once_with_their_fragment() {
        let window = [
            ("Ann: My sister Clara is an architect.", Some("Bob")),
            ("Bob: My dog is called Max. My dog is called Max!", Some("Ann")),
            ("Ann: Thanks! I have a studio.", Some("Bob")),
            ("no speaker here is a fact", None),
        ];
        let facts = offline(&window, &["Ann".to_string(), "Bob".to_string(), "Clara".to_string()]);
        let texts: Vec<(usize, String)> = facts
            .iter()
            .map(|f| (f.item, crate::graph::triple_text(&f.subject, &f.predicate, &f.object)))
            .collect();
        assert_eq!(
            texts,
            [
                (0, "Ann's sister is Clara".to_string()),
                (0, "Clara is an architect".to_string()),
                (1, "Bob's dog is called Max".to_string()),
                (2, "Ann has a studio".to_string())
            ]
        );
    }

    #[test]
    fn model_facts_are_checked() {
        let ok = json!({"facts": [{"subject": "Ann", "predicate": "has sister", "object": "Clara", "item": 2},
                                  {"subject": "ann", "predicate": "Has sister", "object": "clara.", "item": 1}]});
        let f = parse(&ok, 2).unwrap();
        assert_eq!(f.len(), 1, "duplicates by key are dropped");
        assert_eq!((f[0].item, f[0].object.as_str()), (1, "Clara"));
        assert!(parse(&json!({"facts": []}), 2).unwrap().is_empty());
        for bad in [
            json!({"facts": [{"subject": "Ann", "predicate": "has", "object": "x", "item": 3}]}),
            json!({"facts": [{"subject": "Ann", "predicate": "has", "object": "x", "item": 0}]}),
            json!({"facts": [{"subject": "", "predicate": "has", "object": "x", "item": 1}]}),
            json!({"facts": [{"subject": "Ann", "object": "x", "item": 1}]}),
            json!({"triples": []}),
        ] {
            assert!(parse(&bad, 2).is_err(), "{bad}");
        }
    }
}
