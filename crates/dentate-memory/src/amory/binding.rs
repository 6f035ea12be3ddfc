//! Memory initialisation and memory binding (Amory §3.2).
//!
//! Each new utterance pair becomes **memory fragments** — a multi-intent
//! utterance split into separate fragments, filler dropped — and each
//! fragment is **bound**: appended to the narrative it extends, or made
//! the first fragment of a new narrative with a headline, an owner and
//! characters. Initialisation does the same for the first T turns at once.
//!
//! With a model, the binding prompt (Appendix A "Memory Binding") sees the
//! existing story headlines, a few turns of recent context and the new
//! turn, and answers routing decisions with the excerpt of each fragment;
//! the initialisation prompt ("Story Initialization") segments the first T
//! turns into stories.
//!
//! Offline:
//! - **fragments**: the sentences of a message with at least two content
//!   words (after stop words, fillers and the speakers' names) are kept;
//!   consecutive kept sentences form one fragment, and a sentence that
//!   opens with a topic-changing discourse marker ("by the way", "anyway",
//!   "also,", …) starts a new one. Weaker than the model: intents are split
//!   only where a marker says so, and a short factual answer ("Yes, in
//!   May.") is dropped as filler.
//! - **binding**: a fragment goes to the narrative whose *profile* (its
//!   last `profile_window` fragment embeddings) it is most similar to (mean
//!   cosine), plus a continuity bonus for the narratives bound in the
//!   previous iteration of the same session and earlier in this one
//!   (conversational momentum), when that score reaches the binding level
//!   ([`Similarity`]: 0.5 for sentence embedders, 0.25 for the hashing
//!   one); otherwise it opens a new narrative. Weaker than the model: it sees
//!   word overlap (hashing) or sentence similarity (MiniLM), not whether a
//!   turn *continues a story*, so a reply without shared vocabulary leans
//!   on the continuity bonus, and two stories told in similar words merge.
//! - **headline**: extractive — the narrative's four most used content
//!   words (speakers' names and generic chat words such as "like", "got",
//!   "time" excluded); **characters**: the speakers of its fragments
//!   and the capitalised names they mention (not sentence-initial, months
//!   and weekdays excluded). Weaker than the model: no paraphrase, no
//!   sense of which entity drives the story.
//! - **initialisation**: the offline binder run pair by pair over the
//!   first T turns, with no consolidation in between.

use super::tree::Head;
use super::*;
use crate::llm::{Call, Llm, LlmError, ask_json, schema};
use crate::nemori::boundary::{opening_marker, prompt_line};
use crate::nemori::episode::{sentence_words, sentences, top_words};
use crate::store::Message;
use serde_json::Value;
use std::collections::HashSet;

/// The similarity levels of the offline decisions, which depend on the
/// embedder: cosines of the hashing embedder run at about half those of a
/// sentence embedder (on LoCoMo, adjacent turns of a session: median 0.23
/// against 0.55 for all-MiniLM-L6-v2; turns sessions apart: 0.17 against
/// 0.33).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Similarity {
    /// A fragment joins the best narrative when its score (mean cosine to
    /// the narrative's profile, plus any continuity bonus) reaches this.
    pub bind: f32,
    /// Added to the score of the narratives bound in the previous
    /// iteration of the same session or earlier in this one.
    pub continuity: f32,
    /// Consolidation: a fragment whose cosine to the running block's
    /// centroid is below this starts a new sub-plot.
    pub split: f32,
}

/// Offline binding settings.
#[derive(Debug, Clone, PartialEq)]
pub struct BindingConfig {
    /// Levels for sentence embedders (MiniLM, OpenAI): bind 0.5,
    /// continuity 0.1, split 0.35.
    pub sentence: Similarity,
    /// Levels for the hashing embedder (its name starts with `hash`):
    /// bind 0.25, continuity 0.05, split 0.12.
    pub hashing: Similarity,
    /// Fragments whose embeddings make a narrative's profile (default 10).
    pub profile_window: usize,
    /// Content words a sentence needs to be kept in a fragment (default 2).
    pub min_content_words: usize,
    /// Turns of recent dialogue shown to the model with a new turn
    /// (default 4).
    pub context_turns: usize,
}

impl BindingConfig {
    /// The levels for the embedder called `embedder`.
    pub fn similarity(&self, embedder: &str) -> Similarity {
        if crate::pipeline::is_hashing_embedder(embedder) {
            self.hashing
        } else {
            self.sentence
        }
    }
}

impl Default for BindingConfig {
    fn default() -> Self {
        BindingConfig {
            sentence: Similarity {
                bind: 0.5,
                continuity: 0.1,
                split: 0.35,
            },
            hashing: Similarity {
                bind: 0.25,
                continuity: 0.05,
                split: 0.12,
            },
            profile_window: 10,
            min_content_words: 2,
            context_turns: 4,
        }
    }
}

/// A memory fragment before it is stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Fragment {
    /// Index of its message in the batch it was made from.
    pub message: usize,
    /// `Speaker: text`.
    pub text: String,
}

/// The offline fragments of `msgs`, in order.
pub fn extract(msgs: &[&Message], cfg: &BindingConfig) -> Vec<Fragment> {
    let names: Vec<String> = msgs.iter().map(|m| m.msg.speaker.to_lowercase()).collect();
    let mut out: Vec<Fragment> = Vec::new();
    let mut open: Option<usize> = None;
    for s in sentences(msgs) {
        let keep = sentence_words(&s.text, &names).len() >= cfg.min_content_words;
        if !keep {
            continue;
        }
        let extends = open.is_some_and(|i| out[i].message == s.message) && opening_marker(&s.text).is_none();
        if extends && let Some(i) = open {
            out[i].text.push(' ');
            out[i].text.push_str(&s.text);
        } else {
            out.push(Fragment {
                message: s.message,
                text: format!("{}: {}", s.speaker, s.text),
            });
            open = Some(out.len() - 1);
        }
    }
    out
}

/// Splits `Speaker: text` into its parts (`("", text)` without a prefix).
pub fn split_speaker(text: &str) -> (&str, &str) {
    match text.split_once(": ") {
        Some((s, t)) if !s.is_empty() && s.len() <= 40 && !s.contains('\n') => (s, t),
        _ => ("", text),
    }
}

/// Capitalised words that are not names (nor are months and weekdays, see
/// [`crate::time::is_calendar_word`]).
const NOT_NAMES: &[&str] = &["i", "i'm", "i've", "i'll", "i'd", "ok", "okay", "omg", "lol"];

/// Capitalised names a text mentions, in order, each once: words that
/// start with a capital letter, are not the first word of a sentence, and
/// are not stop words, months, weekdays or "I" (`'s` dropped).
pub fn names_in(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut sentence_start = true;
    for raw in text.split_whitespace() {
        let word = raw.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'' && c != '’');
        let word = word
            .strip_suffix("'s")
            .or_else(|| word.strip_suffix("’s"))
            .unwrap_or(word);
        let is_name = !sentence_start
            && word.chars().count() >= 2
            && word.chars().next().is_some_and(char::is_uppercase)
            && word.chars().all(|c| c.is_alphanumeric() || c == '-')
            && !NOT_NAMES.contains(&word.to_lowercase().as_str())
            && !crate::time::is_calendar_word(word)
            && !dentate_core::lexical::ENGLISH_STOP_WORDS.contains(&word.to_lowercase().as_str());
        if is_name && !out.iter().any(|o| o == word) {
            out.push(word.to_string());
        }
        // The speaker prefix `Ann:` and sentence ends start a sentence.
        sentence_start = raw.ends_with(['.', '!', '?', ':']);
    }
    out
}

/// The offline head of a narrative made of `texts` (`Speaker: text`):
/// its four most used content words, its owner (the first speaker) and
/// its characters (speakers, then names mentioned, by first appearance).
pub fn extractive_head(texts: &[&str]) -> Head {
    let mut speakers: Vec<String> = Vec::new();
    let mut mentioned: Vec<String> = Vec::new();
    for t in texts {
        let (speaker, _) = split_speaker(t);
        if !speaker.is_empty() && !speakers.iter().any(|s| s == speaker) {
            speakers.push(speaker.to_string());
        }
        for n in names_in(t) {
            if !mentioned.contains(&n) {
                mentioned.push(n);
            }
        }
    }
    let owner = speakers.first().cloned().unwrap_or_default();
    Head::new(
        &headline_words(texts, &speakers),
        &owner,
        &characters(&speakers, &mentioned),
    )
}

/// Speakers then mentioned names, each once, at most eight.
pub fn characters(speakers: &[String], mentioned: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for c in speakers.iter().chain(mentioned) {
        if !out.iter().any(|o| o.eq_ignore_ascii_case(c)) {
            out.push(c.clone());
        }
    }
    out.truncate(8);
    out
}

/// Words too general to name what a story is about (chat verbs and
/// hedges the stop-word list keeps).
const GENERIC: &[&str] = &[
    "can",
    "like",
    "just",
    "still",
    "around",
    "lot",
    "lots",
    "much",
    "way",
    "get",
    "got",
    "make",
    "made",
    "take",
    "took",
    "looks",
    "look",
    "sounds",
    "sound",
    "anything",
    "something",
    "everything",
    "guess",
    "know",
    "think",
    "feel",
    "feels",
    "want",
    "need",
    "see",
    "say",
    "said",
    "going",
    "gonna",
    "also",
    "always",
    "one",
    "things",
    "thing",
    "time",
    "really",
    "love",
    "glad",
    "hope",
    "sure",
    "kinda",
    "pretty",
    "stuff",
    "since",
    "last",
    "new",
];

/// What a headline leaves out: `speakers`' names (lower case) and
/// [`GENERIC`] words.
pub(crate) fn headline_exclusions(speakers: &[String]) -> Vec<String> {
    speakers
        .iter()
        .map(|s| s.to_lowercase())
        .chain(GENERIC.iter().map(|g| g.to_string()))
        .collect()
}

/// The extractive headline of `texts` (`Speaker: text`): their four most
/// used content words, `speakers`' names and generic chat words
/// excluded, joined by commas (`"talk"` when there are none).
pub fn headline_words(texts: &[&str], speakers: &[String]) -> String {
    let bodies: Vec<&str> = texts.iter().map(|t| split_speaker(t).1).collect();
    let top = top_words(&bodies, &headline_exclusions(speakers), 4);
    if top.is_empty() { "talk".into() } else { top.join(", ") }
}

/// Where a fragment goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Target {
    /// A stored narrative (item id).
    Existing(i64),
    /// The n-th narrative opened in this step.
    New(usize),
}

/// One narrative's profile for offline binding: its last
/// `profile_window` fragment embeddings.
#[derive(Debug, Clone)]
struct Profile {
    target: Target,
    recent: std::collections::VecDeque<Vec<f32>>,
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

impl Profile {
    /// The mean cosine of `v` to the profile. (The cosine to the
    /// centroid would favour large, diverse narratives, whose centroid is
    /// near everything.)
    fn score(&self, v: &[f32]) -> f32 {
        if self.recent.is_empty() {
            return 0.0;
        }
        self.recent.iter().map(|r| dot(v, r)).sum::<f32>() / self.recent.len() as f32
    }
}

/// The offline binder: narratives' profiles and which ones are recent.
#[derive(Debug, Clone)]
pub struct Binder {
    window: usize,
    sim: Similarity,
    profiles: Vec<Profile>,
    recent: HashSet<Target>,
    opened: usize,
}

impl Binder {
    /// A binder at similarity levels `sim` over existing narratives:
    /// `(item id, their last fragment embeddings, oldest first)`, in tree
    /// order.
    pub fn new(cfg: &BindingConfig, sim: Similarity, narratives: Vec<(i64, Vec<Vec<f32>>)>) -> Binder {
        let w = cfg.profile_window.max(1);
        Binder {
            profiles: narratives
                .into_iter()
                .map(|(id, vecs)| {
                    let skip = vecs.len().saturating_sub(w);
                    Profile {
                        target: Target::Existing(id),
                        recent: vecs.into_iter().skip(skip).collect(),
                    }
                })
                .collect(),
            window: w,
            sim,
            recent: HashSet::new(),
            opened: 0,
        }
    }

    /// Marks narratives as recent (momentum): they get the continuity bonus.
    pub fn set_recent(&mut self, recent: impl IntoIterator<Item = Target>) {
        self.recent = recent.into_iter().collect();
    }

    /// Binds one fragment (unit embedding `v`): the best-scoring narrative
    /// at or above the threshold, else a new one. Ties go to the older
    /// narrative. The chosen narrative becomes recent.
    pub fn bind(&mut self, v: &[f32]) -> Target {
        let mut best: Option<(usize, f32)> = None;
        for (i, p) in self.profiles.iter().enumerate() {
            let bonus = if self.recent.contains(&p.target) {
                self.sim.continuity
            } else {
                0.0
            };
            let s = p.score(v) + bonus;
            if best.is_none_or(|(_, b)| s > b) {
                best = Some((i, s));
            }
        }
        let i = match best {
            Some((i, s)) if s >= self.sim.bind => i,
            _ => {
                self.profiles.push(Profile {
                    target: Target::New(self.opened),
                    recent: Default::default(),
                });
                self.opened += 1;
                self.profiles.len() - 1
            }
        };
        let p = &mut self.profiles[i];
        p.recent.push_back(v.to_vec());
        if p.recent.len() > self.window {
            p.recent.pop_front();
        }
        self.recent.insert(p.target);
        p.target
    }
}

/// One routing decision of the model: a fragment and where it goes.
#[derive(Debug, Clone, PartialEq)]
pub struct Routed {
    /// Index of its message in the turn given.
    pub message: usize,
    /// The excerpt (without a speaker prefix).
    pub excerpt: String,
    /// Its narrative.
    pub target: Target,
}

/// What the model made of a turn (or of the first T turns).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Routing {
    /// Fragments in the order given.
    pub routed: Vec<Routed>,
    /// Heads of the narratives opened, by [`Target::New`] index.
    pub new_heads: Vec<Head>,
    /// Characters the model added to existing narratives: `(item id, names)`.
    pub added_characters: Vec<(i64, Vec<String>)>,
}

const INIT_PROMPT: &str = include_str!("../prompts/amory_init.txt");
const BIND_PROMPT: &str = include_str!("../prompts/amory_bind.txt");

/// A non-empty string field, on one line.
fn field(v: &Value, k: &str, what: &str) -> Result<String, String> {
    v.get(k)
        .and_then(Value::as_str)
        .map(|s| s.split_whitespace().collect::<Vec<_>>().join(" "))
        .filter(|s| !s.is_empty())
        .ok_or(format!("{what} needs a non-empty string `{k}`"))
}

/// An optional list of names.
fn names_field(v: &Value, what: &str) -> Result<Vec<String>, String> {
    match v.get("characters") {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::Array(a)) => a
            .iter()
            .map(|x| {
                x.as_str()
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .ok_or(format!("{what}: `characters` must be a list of names"))
            })
            .collect(),
        Some(_) => Err(format!("{what}: `characters` must be a list of names")),
    }
}

/// A 1-based number field within `1..=n`, as a 0-based index.
fn number(v: &Value, k: &str, n: usize, what: &str) -> Result<usize, String> {
    match v.get(k).and_then(Value::as_u64) {
        Some(x) if (1..=n as u64).contains(&x) => Ok(x as usize - 1),
        _ => Err(format!("{what} needs `{k}`, a number from 1 to {n}")),
    }
}

/// The excerpt of a fragment, without a `Speaker:` prefix the model may
/// have copied.
fn excerpt(v: &Value, speaker: &str, what: &str) -> Result<String, String> {
    let e = field(v, "excerpt", what)?;
    let prefix = format!("{speaker}:");
    Ok(e.strip_prefix(&prefix).map_or(e.clone(), |r| r.trim().to_string())).and_then(|e| {
        if e.is_empty() {
            Err(format!("{what} has an empty excerpt"))
        } else {
            Ok(e)
        }
    })
}

/// Memory initialisation with a model: the first T turns segmented into
/// stories, each with its fragments.
pub fn llm_init(llm: &dyn Llm, msgs: &[&Message]) -> Result<Routing, LlmError> {
    let mut user = String::from("The conversation:\n");
    for (i, m) in msgs.iter().enumerate() {
        user.push_str(&prompt_line(i + 1, m));
        user.push('\n');
    }
    let n = msgs.len();
    let fragment = schema::object(
        &[("message", schema::integer(1, n)), ("excerpt", schema::text())],
        &["message", "excerpt"],
    );
    let story = schema::object(
        &[
            ("owner", schema::short()),
            ("topic", schema::short()),
            ("characters", schema::array(schema::short(), None)),
            ("fragments", schema::array(fragment, Some(2 * n))),
        ],
        &["owner", "topic", "fragments"],
    );
    let schema = schema::object(&[("stories", schema::array(story, Some(n)))], &["stories"]);
    ask_json(llm, &Call::json("amory_init", &schema), INIT_PROMPT, &user, |v| {
        let stories = v
            .get("stories")
            .and_then(Value::as_array)
            .ok_or("`stories` must be a list")?;
        let mut r = Routing::default();
        for (si, s) in stories.iter().enumerate() {
            let what = format!("story {}", si + 1);
            let owner = field(s, "owner", &what)?;
            let topic = field(s, "topic", &what)?;
            let chars = names_field(s, &what)?;
            let frags = s
                .get("fragments")
                .and_then(Value::as_array)
                .ok_or(format!("{what} needs a list `fragments`"))?;
            let mut routed = Vec::new();
            for (fi, f) in frags.iter().enumerate() {
                let fw = format!("{what}, fragment {}", fi + 1);
                let message = number(f, "message", n, &fw)?;
                routed.push(Routed {
                    message,
                    excerpt: excerpt(f, &msgs[message].msg.speaker, &fw)?,
                    target: Target::New(r.new_heads.len()),
                });
            }
            if routed.is_empty() {
                continue;
            }
            r.new_heads.push(Head::new(&topic, &owner, &chars));
            r.routed.extend(routed);
        }
        // Fragments in conversation order (stable within a message).
        r.routed.sort_by_key(|f| f.message);
        Ok(r)
    })
}

/// Memory binding with a model: the new turn's fragments routed to the
/// `stories` (`(item id, head)`, numbered from 1 in the prompt) or to new
/// ones (numbered after them, in the order they are created).
pub fn llm_bind(
    llm: &dyn Llm,
    stories: &[(i64, &Head)],
    context: &[&Message],
    turn: &[&Message],
) -> Result<Routing, LlmError> {
    let mut user = String::from("Existing stories:\n");
    if stories.is_empty() {
        user.push_str("(none yet)\n");
    }
    for (i, (_, h)) in stories.iter().enumerate() {
        user.push_str(&format!("[{}] {}\n", i + 1, h.line()));
    }
    user.push_str("\nRecent dialogue context:\n");
    if context.is_empty() {
        user.push_str("(none)\n");
    }
    for m in context {
        user.push_str(&prompt_line(0, m).replacen("[0]", "-", 1));
        user.push('\n');
    }
    user.push_str("\nNew conversation turn:\n");
    for (i, m) in turn.iter().enumerate() {
        user.push_str(&prompt_line(i + 1, m));
        user.push('\n');
    }
    let n = turn.len();
    let existing = stories.len();
    // A decision extends a story (by number) or creates one (with its
    // topic and owner); with no story yet, it can only create one.
    let create = schema::object(
        &[
            ("message", schema::integer(1, n)),
            ("excerpt", schema::text()),
            ("action", schema::one_of(&["create_new_story"])),
            ("topic", schema::short()),
            ("owner", schema::short()),
            ("characters", schema::array(schema::short(), Some(8))),
        ],
        &["message", "excerpt", "action", "topic", "owner"],
    );
    let decision = if existing == 0 {
        create
    } else {
        let extend = schema::object(
            &[
                ("message", schema::integer(1, n)),
                ("excerpt", schema::text()),
                ("action", schema::one_of(&["extend_story"])),
                ("story", schema::integer(1, existing)),
                ("characters", schema::array(schema::short(), Some(8))),
            ],
            &["message", "excerpt", "action", "story"],
        );
        schema::any_of(&[extend, create])
    };
    let schema = schema::object(&[("decisions", schema::array(decision, Some(2 * n)))], &["decisions"]);
    ask_json(llm, &Call::json("amory_bind", &schema), BIND_PROMPT, &user, |v| {
        let decisions = v
            .get("decisions")
            .and_then(Value::as_array)
            .ok_or("`decisions` must be a list")?;
        let mut r = Routing::default();
        for (di, d) in decisions.iter().enumerate() {
            let what = format!("decision {}", di + 1);
            let message = number(d, "message", n, &what)?;
            let excerpt = excerpt(d, &turn[message].msg.speaker, &what)?;
            let chars = names_field(d, &what)?;
            let target = match d.get("action").and_then(Value::as_str) {
                Some("extend_story") => {
                    let k = number(d, "story", existing + r.new_heads.len(), &what)?;
                    if k < existing {
                        let id = stories[k].0;
                        if !chars.is_empty() {
                            r.added_characters.push((id, chars));
                        }
                        Target::Existing(id)
                    } else {
                        Target::New(k - existing)
                    }
                }
                Some("create_new_story") => {
                    let topic = field(d, "topic", &what)?;
                    let owner = field(d, "owner", &what)?;
                    r.new_heads.push(Head::new(&topic, &owner, &chars));
                    Target::New(r.new_heads.len() - 1)
                }
                _ => {
                    return Err(format!(
                        "{what}: `action` must be \"extend_story\" or \"create_new_story\""
                    ));
                }
            };
            r.routed.push(Routed {
                message,
                excerpt,
                target,
            });
        }
        Ok(r)
    })
}

/// Binding (the paper's Algorithm 1, steps 1–2): routing each pair of
/// messages to the narratives it extends, or new ones, and committing the
/// fragments.
impl Amory {
    /// How many messages the next iteration takes from `msgs`: up to a
    /// pair, cut at a session change; 0 when the pair is not complete yet
    /// and more may come (`closing`: the conversation has ended).
    pub(super) fn take(&self, msgs: &[Message], closing: bool) -> usize {
        let Some(first) = msgs.first() else { return 0 };
        let p = self.cfg.pair.max(1);
        let mut n = 1;
        while n < p && n < msgs.len() && msgs[n].msg.session == first.msg.session {
            n += 1;
        }
        if n < p && n == msgs.len() && !closing { 0 } else { n }
    }

    /// Where the fragments of `msgs` go, decided by the model
    /// (initialisation when `init`).
    pub(super) fn route_with_model(&self, llm: &dyn Llm, env: &Env<'_>, msgs: &[Message], init: bool) -> Result<Bound> {
        let refs: Vec<&Message> = msgs.iter().collect();
        let routing = if init {
            binding::llm_init(llm, &refs)?
        } else {
            let first_seq = msgs.first().map_or(0, |m| m.seq);
            let ctx_n = self.cfg.binding.context_turns as i64;
            let context = env
                .store
                .messages_in_seq(env.user, (first_seq - ctx_n).max(0), first_seq)?;
            let ctx: Vec<&Message> = context.iter().collect();
            let tree = self.tree()?;
            let stories: Vec<(i64, &Head)> = tree.narratives.iter().map(|n| (n.id, &n.head)).collect();
            binding::llm_bind(llm, &stories, &ctx, &refs)?
        };
        let frags: Vec<(usize, String)> = routing
            .routed
            .iter()
            .map(|r| (r.message, format!("{}: {}", refs[r.message].msg.speaker, r.excerpt)))
            .collect();
        let texts: Vec<String> = frags.iter().map(|f| f.1.clone()).collect();
        Ok(Bound {
            vecs: embed_batch(env.embedder, &texts)?,
            targets: routing.routed.iter().map(|r| r.target).collect(),
            new_heads: routing.new_heads.into_iter().map(Some).collect(),
            added: routing.added_characters,
            frags,
        })
    }

    /// Where the fragments of `msgs` go, decided offline: extracted
    /// fragments bound by embedding similarity (initialisation when
    /// `init`).
    pub(super) fn route_offline(
        &mut self,
        env: &Env<'_>,
        msgs: &[Message],
        iteration: i64,
        init: bool,
    ) -> Result<Bound> {
        let refs: Vec<&Message> = msgs.iter().collect();
        let dim = env.embedder.dim();
        let extracted = binding::extract(&refs, &self.cfg.binding);
        let texts: Vec<String> = extracted.iter().map(|f| f.text.clone()).collect();
        let vecs = embed_batch(env.embedder, &texts)?;
        // The binder sees embeddings as they read back from the store.
        let stored = as_stored(&vecs);
        let w = self.cfg.binding.profile_window.max(1);
        let mut existing = Vec::new();
        let narr: Vec<(i64, Vec<i64>, i64)> = self
            .tree()?
            .narratives
            .iter()
            .map(|n| {
                let all: Vec<i64> = n.fragments().collect();
                (n.id, all[all.len().saturating_sub(w)..].to_vec(), n.last_bound)
            })
            .collect();
        let same_session =
            env.store.state(env.user, self.name, SESSION)?.as_deref() == msgs.first().map(|m| m.msg.session.as_str());
        let mut recent = Vec::new();
        for (id, last, last_bound) in narr {
            let mut vs = Vec::with_capacity(last.len());
            for f in last {
                vs.push(self.frag_vec(env, f)?);
            }
            existing.push((id, vs));
            if !init && same_session && last_bound == iteration - 1 {
                recent.push(Target::Existing(id));
            }
        }
        let sim = self.cfg.binding.similarity(&env.embedder.name());
        let mut binder = Binder::new(&self.cfg.binding, sim, existing);
        binder.set_recent(recent);
        // Initialisation binds pair by pair: the previous pair's
        // narratives are the recent ones.
        let pair_of: Vec<usize> = if init {
            let mut out = vec![0; msgs.len()];
            let (mut i, mut p) = (0, 0);
            while i < msgs.len() {
                let n = self.take(&msgs[i..], true).max(1);
                out[i..i + n].fill(p);
                i += n;
                p += 1;
            }
            out
        } else {
            vec![0; msgs.len()]
        };
        let mut targets = Vec::with_capacity(extracted.len());
        let (mut cur_pair, mut cur): (usize, Vec<Target>) = (0, Vec::new());
        for (f, v) in extracted.iter().zip(stored.chunks_exact(dim)) {
            let p = pair_of[f.message];
            if p != cur_pair {
                let prev = std::mem::take(&mut cur);
                let first = pair_of.iter().position(|&x| x == p).unwrap_or(0);
                let continues = first > 0 && msgs[first - 1].msg.session == msgs[first].msg.session;
                binder.set_recent(if continues { prev } else { Vec::new() });
                cur_pair = p;
            }
            let t = binder.bind(v);
            cur.push(t);
            targets.push(t);
        }
        let opened = targets
            .iter()
            .filter_map(|t| if let Target::New(k) = t { Some(*k + 1) } else { None })
            .max()
            .unwrap_or(0);
        Ok(Bound {
            frags: extracted.into_iter().map(|f| (f.message, f.text)).collect(),
            vecs,
            targets,
            new_heads: vec![None; opened],
            added: Vec::new(),
        })
    }

    /// One binding iteration (or the initialisation) over `msgs`,
    /// committed in one step; returns the items made.
    pub(super) fn bind(
        &mut self,
        env: &mut Env<'_>,
        roles: &dyn Roles,
        msgs: &[Message],
        iteration: i64,
        init: bool,
    ) -> Result<usize> {
        self.load_tree(env)?;
        let Some(last) = msgs.last() else { return Ok(0) };
        let b = roles.route(self, env, msgs, iteration, init)?;
        let dim = env.embedder.dim();
        let tree = self.tree()?;
        // New narratives: their heads and fragments.
        let mut new_heads: Vec<Head> = Vec::with_capacity(b.new_heads.len());
        for (k, h) in b.new_heads.iter().enumerate() {
            let texts: Vec<&str> = b
                .frags
                .iter()
                .zip(&b.targets)
                .filter(|(_, t)| **t == Target::New(k))
                .map(|(f, _)| f.1.as_str())
                .collect();
            new_heads.push(match h {
                Some(h) => h.clone(),
                None => binding::extractive_head(&texts),
            });
        }
        // Existing narratives touched: more sources, maybe more characters.
        let mut touched: BTreeMap<i64, (Vec<i64>, Vec<String>)> = BTreeMap::new();
        for ((msg, text), t) in b.frags.iter().zip(&b.targets) {
            if let Target::Existing(id) = t {
                let e = touched.entry(*id).or_default();
                e.0.push(msgs[*msg].id);
                if !roles.calls_model() {
                    let (speaker, _) = binding::split_speaker(text);
                    e.1.push(speaker.to_string());
                    e.1.extend(binding::names_in(text));
                }
            }
        }
        for (id, names) in &b.added {
            touched.entry(*id).or_default().1.extend(names.iter().cloned());
        }
        let mut changed: Vec<(i64, Head)> = Vec::new();
        for (id, (_, names)) in &touched {
            let Some(n) = tree.position(*id).map(|p| &tree.narratives[p]) else {
                continue;
            };
            let chars = binding::characters(&n.head.characters, names);
            if chars != n.head.characters {
                changed.push((*id, Head::new(&n.head.headline, &n.head.owner, &chars)));
            }
        }
        let head_texts: Vec<String> = new_heads
            .iter()
            .chain(changed.iter().map(|c| &c.1))
            .map(Head::text)
            .collect();
        let head_vecs = embed_batch(env.embedder, &head_texts)?;
        let mut step = Step::default();
        for (k, h) in new_heads.iter().enumerate() {
            let mine: Vec<&Message> = b
                .frags
                .iter()
                .zip(&b.targets)
                .filter(|(_, t)| **t == Target::New(k))
                .map(|(f, _)| &msgs[f.0])
                .collect();
            let mut sources: Vec<i64> = mine.iter().map(|m| m.id).collect();
            sources.dedup();
            let said = mine.first().and_then(|m| m.msg.said_at);
            step.add.push(NewItem {
                kind: NARRATIVE.into(),
                text: h.text(),
                sources,
                said_at: said,
                refers_to: said,
                vector: Some(head_vecs[k * dim..(k + 1) * dim].to_vec()),
                parent: None,
            });
        }
        for (((msg, text), t), v) in b.frags.iter().zip(&b.targets).zip(b.vecs.chunks_exact(dim)) {
            let m = &msgs[*msg];
            step.add.push(NewItem {
                kind: FRAGMENT.into(),
                text: text.clone(),
                sources: vec![m.id],
                said_at: m.msg.said_at,
                refers_to: m.msg.said_at,
                vector: Some(v.to_vec()),
                parent: Some(match t {
                    Target::Existing(id) => ItemRef::Stored(*id),
                    Target::New(k) => ItemRef::InStep(*k),
                }),
            });
        }
        for (id, (sources, _)) in &touched {
            let head = changed.iter().position(|c| c.0 == *id);
            step.update.push(ItemUpdate {
                id: *id,
                text: head.map(|i| changed[i].1.text()),
                vector: head.map(|i| {
                    let j = new_heads.len() + i;
                    head_vecs[j * dim..(j + 1) * dim].to_vec()
                }),
                parent: None,
                add_sources: sources.clone(),
            });
        }
        step.state = vec![
            (ITERATION.into(), iteration.to_string()),
            (SESSION.into(), last.msg.session.clone()),
            (INITIALISED.into(), "1".into()),
        ];
        step.processed_through = Some(last.id);
        step.turn = iteration;
        let ids = env.store.commit(env.user, self.name, &step)?;
        // The tree and the indexes follow the commit.
        let n_new = new_heads.len();
        let tree = self.tree_mut()?;
        let mut new_pos = Vec::with_capacity(n_new);
        for (h, id) in new_heads.iter().zip(&ids) {
            new_pos.push(tree.add_narrative(*id, h.clone()));
        }
        for (id, h) in &changed {
            if let Some(p) = tree.position(*id) {
                tree.narratives[p].head = h.clone();
            }
        }
        for ((it, id), t) in step.add[n_new..].iter().zip(&ids[n_new..]).zip(&b.targets) {
            let pos = match t {
                Target::Existing(nid) => tree.position(*nid),
                Target::New(k) => new_pos.get(*k).copied(),
            };
            if let Some(pos) = pos {
                tree.add_fragment(
                    pos,
                    None,
                    Frag {
                        id: *id,
                        text: it.text.clone(),
                        sources: it.sources.clone(),
                        said_at: it.said_at,
                        turn: iteration,
                    },
                );
            }
        }
        for (id, v) in ids[n_new..].iter().zip(b.vecs.chunks_exact(dim)) {
            self.vecs.insert(*id, as_stored(v));
        }
        let frag_texts: Vec<&str> = step.add[n_new..].iter().map(|it| it.text.as_str()).collect();
        self.fragments
            .add(env, &ids[n_new..], iteration, &b.vecs, &frag_texts)?;
        let narr_texts: Vec<&str> = step.add[..n_new].iter().map(|it| it.text.as_str()).collect();
        self.narratives
            .add(env, &ids[..n_new], iteration, &head_vecs[..n_new * dim], &narr_texts)?;
        for (i, (id, h)) in changed.iter().enumerate() {
            let j = n_new + i;
            self.narratives
                .replace(env, *id, iteration, &head_vecs[j * dim..(j + 1) * dim], &h.text())?;
        }
        Ok(ids.len())
    }

    /// The other speaker around a message (for `you`/`your`).
    pub(super) fn addressee(env: &Env<'_>, source: i64) -> Result<Option<String>> {
        let Some(m) = env.store.messages(&[source])?.into_iter().next() else {
            return Ok(None);
        };
        let around = env.store.messages_in_seq(env.user, (m.seq - 1).max(0), m.seq + 2)?;
        Ok(around
            .into_iter()
            .filter(|o| o.seq != m.seq && o.msg.speaker != m.msg.speaker)
            .min_by_key(|o| (o.seq - m.seq).abs())
            .map(|o| o.msg.speaker))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nemori::episode::tests::m;
    use serde_json::json;

    #[test]
    fn fragments_drop_filler_and_split_at_markers() {
        let msgs = [
            m(
                1,
                "Ann",
                "Hi Bob! I adopted a grey cat called Pixel. She loves tuna treats.",
            ),
            m(2, "Bob", "Wow, nice!"),
            m(
                3,
                "Bob",
                "My cat Luna is nine. By the way, the Berlin marathon is in September.",
            ),
        ];
        let refs: Vec<&Message> = msgs.iter().collect();
        let f = extract(&refs, &BindingConfig::default());
        let texts: Vec<&str> = f.iter().map(|f| f.text.as_str()).collect();
        assert_eq!(
            texts,
            [
                "Ann: I adopted a grey cat called Pixel. She loves tuna treats.",
                "Bob: My cat Luna is nine.",
                "Bob: By the way, the Berlin marathon is in September."
            ]
        );
        assert_eq!(f.iter().map(|f| f.message).collect::<Vec<_>>(), [0, 2, 2]);
    }

    #[test]
    fn names_skip_sentence_starts_months_and_stop_words() {
        assert_eq!(
            names_in("Ann: My sister Clara moved to Lisbon in May. Pixel is two. I told Bob's mum."),
            ["Clara", "Lisbon", "Bob"]
        );
        let h = extractive_head(&[
            "Ann: I adopted a grey cat called Pixel from the shelter.",
            "Bob: The shelter cat Pixel hides under the sofa.",
        ]);
        assert_eq!(h.owner, "Ann");
        assert_eq!(h.characters, ["Ann", "Bob", "Pixel"]);
        assert_eq!(h.headline, "cat, pixel, shelter, adopted");
    }

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = dot(v, v).sqrt();
        v.iter().map(|x| x / n).collect()
    }

    #[test]
    fn the_binder_joins_similar_fragments_and_momentum_lowers_the_bar() {
        let cfg = BindingConfig::default();
        let sim = cfg.similarity("minilm-l6-v2");
        assert_eq!(sim, cfg.sentence);
        assert_eq!(cfg.similarity("hash-256"), cfg.hashing);
        let cat = unit(&[1.0, 0.1, 0.0]);
        let run = unit(&[0.0, 1.0, 0.1]);
        let mut b = Binder::new(&cfg, sim, vec![(7, vec![cat.clone()])]);
        assert_eq!(b.bind(&unit(&[1.0, 0.2, 0.0])), Target::Existing(7));
        assert_eq!(b.bind(&run), Target::New(0));
        assert_eq!(b.bind(&unit(&[0.1, 1.0, 0.0])), Target::New(0));
        // A weakly related reply (cosine 0.45 with the running story) binds
        // only with the continuity bonus.
        let weak = unit(&[0.45, 0.0, (1.0f32 - 0.2025).sqrt()]);
        let mut cold = Binder::new(&cfg, sim, vec![(7, vec![cat.clone()])]);
        assert_eq!(cold.bind(&weak), Target::New(0));
        let mut warm = Binder::new(&cfg, sim, vec![(7, vec![cat])]);
        warm.set_recent([Target::Existing(7)]);
        assert_eq!(warm.bind(&weak), Target::Existing(7));
    }

    #[test]
    fn routing_answers_are_checked() {
        let msgs = [m(1, "Ann", "I adopted a cat."), m(2, "Bob", "I run marathons.")];
        let turn: Vec<&Message> = msgs.iter().collect();
        let head = Head::new("Ann's cat", "Ann", &[]);
        let stories = [(42, &head)];
        let check = |v: Value| -> Result<Routing, String> {
            // The validator of llm_bind, through a model that answers `v`.
            struct One(String);
            impl Llm for One {
                fn name(&self) -> String {
                    "one".into()
                }
                fn chat(&self, _: &crate::llm::Call<'_>, _: &[crate::llm::ChatMessage]) -> Result<String, LlmError> {
                    Ok(self.0.clone())
                }
                fn stats(&self) -> crate::llm::LlmStats {
                    Default::default()
                }
            }
            llm_bind(&One(v.to_string()), &stories, &[], &turn).map_err(|e| e.to_string())
        };
        let ok = check(json!({"decisions": [
            {"message": 1, "excerpt": "Ann: I adopted a cat.", "action": "extend_story", "story": 1, "characters": ["Pixel"]},
            {"message": 2, "excerpt": "I run marathons.", "action": "create_new_story", "topic": "Bob's running", "owner": "Bob"},
            {"message": 2, "excerpt": "Marathons, again.", "action": "extend_story", "story": 2}
        ]}))
        .unwrap();
        assert_eq!(ok.routed[0].excerpt, "I adopted a cat.");
        assert_eq!(ok.routed[0].target, Target::Existing(42));
        assert_eq!(ok.routed[1].target, Target::New(0));
        assert_eq!(ok.routed[2].target, Target::New(0));
        assert_eq!(ok.added_characters, [(42, vec!["Pixel".to_string()])]);
        assert_eq!(ok.new_heads[0].owner, "Bob");
        for bad in [
            json!({"decisions": [{"message": 3, "excerpt": "x", "action": "extend_story", "story": 1}]}),
            json!({"decisions": [{"message": 1, "excerpt": "x", "action": "extend_story", "story": 2}]}),
            json!({"decisions": [{"message": 1, "excerpt": " ", "action": "extend_story", "story": 1}]}),
            json!({"decisions": [{"message": 1, "excerpt": "x", "action": "merge"}]}),
            json!({"decisions": [{"message": 1, "excerpt": "x", "action": "create_new_story", "owner": "Ann"}]}),
            json!({"routing": []}),
        ] {
            assert!(check(bad.clone()).is_err(), "{bad}");
        }
        assert!(check(json!({"decisions": []})).unwrap().routed.is_empty());
    }
}
