//! Pre-storage reasoning (PREMem §3.2.2): for a linked pair of clusters
//! `(p, c)`, reasoning fragments about how the information evolved, in
//! five patterns.
//!
//! With a model, the prompt of Appendix A (Figure 4) lists the fragments
//! of `p` then those of `c` (each as stored: `[time] key: content`) and
//! asks for `{"extended_insight": [{inference_type, key, date, value}]}`;
//! the answer is checked (a known pattern, non-empty key and value, a
//! string or null date) and repaired once. Each insight derives from every
//! fragment of the pair.
//!
//! Offline there are templates for three patterns, each citing exactly the
//! fragments it uses:
//! - **accumulation** — fragments of the two clusters that say nearly the
//!   same thing (cosine at least `accumulation`, default 0.75) form a
//!   group: "Caroline mentions support group 3 times: on 7 May 2023, 25
//!   May 2023 and 9 June 2023";
//! - **transformation** — a later fragment of the same speaker under the
//!   same key (equal keys, or keys sharing half their words) whose content
//!   changed (content words overlapping less than half, and not an
//!   accumulation): "old content (time) → new content (time)";
//! - **connection** — a name (a capitalised word that is not a speaker, a
//!   month or a weekday) mentioned in both clusters: "Lisbon: earlier
//!   content (time); later content (time)".
//!
//! Extension/generalisation, specification/refinement and implications
//! need understanding a template cannot fake: offline makes none of them.

use crate::llm::{Call, Llm, LlmError, ask_json, schema};
use crate::text::{content_words, words};
use crate::time::{human_date, parse_iso8601};
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};

use super::cluster::cosine;

/// The five evolution patterns.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Pattern {
    /// Expanding specific information to a broader tendency.
    Extension,
    /// Repeated or persistent behaviour.
    Accumulation,
    /// A general notion made more specific.
    Specification,
    /// A change of state, preference or behaviour over time.
    Transformation,
    /// A relation, cause or implication between separate pieces.
    Connection,
}

impl Pattern {
    /// The prompt's name of the pattern.
    pub fn name(self) -> &'static str {
        match self {
            Pattern::Extension => "extension/generalization",
            Pattern::Accumulation => "accumulation",
            Pattern::Specification => "specification/refinement",
            Pattern::Transformation => "transformation",
            Pattern::Connection => "connection/implication",
        }
    }

    /// Reads a pattern name: the full name or either half of it, any case.
    pub fn parse(s: &str) -> Option<Pattern> {
        let s = s.trim().to_lowercase().replace(['_', '-'], " ");
        let all = [
            Pattern::Extension,
            Pattern::Accumulation,
            Pattern::Specification,
            Pattern::Transformation,
            Pattern::Connection,
        ];
        all.into_iter()
            .find(|p| p.name() == s || p.name().split('/').any(|half| half == s))
    }
}

/// A stored fragment as reasoning reads it.
#[derive(Debug, Clone, PartialEq)]
pub struct Known {
    /// Its stored text (`[time] key: content`).
    pub text: String,
    /// Key phrase (empty when the text has none).
    pub key: String,
    /// Content.
    pub content: String,
    /// Its time as shown (`7 May 2023`, `Before 8 May 2023`, …).
    pub time_label: String,
    /// Unix seconds of the time it refers to.
    pub time: Option<i64>,
    /// Who said the message it comes from.
    pub speaker: String,
    /// Its unit embedding.
    pub vector: Vec<f32>,
}

/// A reasoning fragment, before it is stored.
#[derive(Debug, Clone, PartialEq)]
pub struct Insight {
    /// Which pattern.
    pub pattern: Pattern,
    /// Key phrase.
    pub key: String,
    /// Date or date range as shown.
    pub date: String,
    /// The insight.
    pub value: String,
    /// Unix seconds of the (last) date it refers to, when known.
    pub refers_to: Option<i64>,
    /// The fragments it comes from: indices into `older` then `newer`
    /// (`older.len() + j` is `newer[j]`).
    pub from: Vec<usize>,
}

impl Insight {
    /// The stored (and rendered) text: `[date] key (pattern): value`.
    pub fn text(&self) -> String {
        let body = format!("{} ({}): {}", self.key, self.pattern.name(), self.value);
        if self.date.is_empty() {
            body
        } else {
            format!("[{}] {body}", self.date)
        }
    }

    /// What is embedded: key and value, as for fragments.
    pub fn embed_text(&self) -> String {
        format!("{}: {}", self.key, self.value)
    }
}

/// Offline template settings.
#[derive(Debug, Clone, PartialEq)]
pub struct ReasonConfig {
    /// Accumulation: the least cosine of two fragments saying the same
    /// thing (default 0.75).
    pub accumulation: f32,
    /// Reasoning fragments kept per linked pair (default 10).
    pub max_per_pair: usize,
}

impl Default for ReasonConfig {
    fn default() -> Self {
        ReasonConfig {
            accumulation: 0.75,
            max_per_pair: 10,
        }
    }
}

/// `a, b and c`.
fn and_list(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// `first to last`, or one of them when the other is empty or equal.
fn range(first: &str, last: &str) -> String {
    match (first.is_empty(), last.is_empty()) {
        (true, _) => last.to_string(),
        (false, true) => first.to_string(),
        _ if first == last => first.to_string(),
        _ => format!("{first} to {last}"),
    }
}

fn union_find_root(parent: &mut [usize], i: usize) -> usize {
    let mut r = i;
    while parent[r] != r {
        r = parent[r];
    }
    let mut j = i;
    while parent[j] != r {
        let next = parent[j];
        parent[j] = r;
        j = next;
    }
    r
}

/// Words of a key, lower case, without stop words.
fn key_words(key: &str) -> BTreeSet<String> {
    content_words(key)
}

fn jaccard(a: &BTreeSet<String>, b: &BTreeSet<String>) -> f32 {
    let inter = a.intersection(b).count();
    let uni = a.union(b).count();
    if uni == 0 { 0.0 } else { inter as f32 / uni as f32 }
}

/// Names in `text`: runs of capitalised words of three letters or more
/// that are not speakers (`names`, lower case), months, weekdays or stop
/// words.
fn entities(text: &str, names: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut run: Vec<String> = Vec::new();
    let flush = |run: &mut Vec<String>, out: &mut Vec<String>| {
        if !run.is_empty() {
            let e = run.join(" ");
            if !out.contains(&e) {
                out.push(e);
            }
            run.clear();
        }
    };
    for w in text.split(|c: char| !c.is_alphanumeric() && c != '\'' && c != '’') {
        let w = w.strip_suffix("'s").or_else(|| w.strip_suffix("’s")).unwrap_or(w);
        let lower = w.to_lowercase();
        let name = w.chars().count() >= 3
            && w.chars().next().is_some_and(char::is_uppercase)
            && !names.contains(&lower)
            && !crate::time::is_calendar_word(&lower)
            && lower != "before"
            && lower != "after"
            && !dentate_core::lexical::ENGLISH_STOP_WORDS.contains(&lower.as_str());
        if name {
            run.push(w.to_string());
        } else {
            flush(&mut run, &mut out);
        }
    }
    flush(&mut run, &mut out);
    out
}

/// The offline reasoning fragments of a linked pair (see the module
/// notes); `names` are the speakers of the conversation, lower case.
pub fn offline(older: &[Known], newer: &[Known], cfg: &ReasonConfig, names: &[String]) -> Vec<Insight> {
    let all: Vec<&Known> = older.iter().chain(newer).collect();
    let n_old = older.len();
    let by_time = |a: &usize, b: &usize| all[*a].time.cmp(&all[*b].time).then(a.cmp(b));
    let mut out: Vec<Insight> = Vec::new();
    // Accumulation: groups joined by near-duplicates across the clusters.
    let mut parent: Vec<usize> = (0..all.len()).collect();
    let mut similar = vec![vec![false; newer.len()]; n_old];
    for (i, o) in older.iter().enumerate() {
        for (j, n) in newer.iter().enumerate() {
            if cosine(&o.vector, &n.vector) >= cfg.accumulation {
                similar[i][j] = true;
                let (a, b) = (union_find_root(&mut parent, i), union_find_root(&mut parent, n_old + j));
                if a != b {
                    parent[a.max(b)] = a.min(b);
                }
            }
        }
    }
    let mut groups: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for i in 0..all.len() {
        let r = union_find_root(&mut parent, i);
        groups.entry(r).or_default().push(i);
    }
    for members in groups.values().filter(|g| g.len() >= 2) {
        let mut members = members.clone();
        members.sort_by(by_time);
        // The topic: the newest member's key when another member shares
        // it, else the key word most members share (first seen wins), else
        // the newest key.
        let newest = &all[*members.last().unwrap_or(&0)].key;
        let shared = members
            .iter()
            .filter(|&&m| all[m].key.eq_ignore_ascii_case(newest))
            .count();
        let mut count: Vec<(String, usize)> = Vec::new();
        for &m in &members {
            let mut own: Vec<String> = Vec::new();
            for w in words(&all[m].key).filter(|w| !dentate_core::lexical::ENGLISH_STOP_WORDS.contains(&w.as_str())) {
                if own.contains(&w) {
                    continue;
                }
                own.push(w.clone());
                match count.iter_mut().find(|(x, _)| *x == w) {
                    Some(c) => c.1 += 1,
                    None => count.push((w, 1)),
                }
            }
        }
        let best = count.iter().map(|c| c.1).max().unwrap_or(0);
        let topic = if shared >= 2 || best < 2 {
            newest.clone()
        } else {
            count
                .iter()
                .find(|c| c.1 == best)
                .map_or_else(|| newest.clone(), |c| c.0.clone())
        };
        let mut who: Vec<String> = Vec::new();
        let mut dates: Vec<String> = Vec::new();
        for &m in &members {
            if !who.contains(&all[m].speaker) {
                who.push(all[m].speaker.clone());
            }
            if !all[m].time_label.is_empty() && !dates.contains(&all[m].time_label) {
                dates.push(all[m].time_label.clone());
            }
        }
        let when = if dates.is_empty() {
            String::new()
        } else {
            format!(": {}", and_list(&dates))
        };
        let first = dates.first().cloned().unwrap_or_default();
        let last = dates.last().cloned().unwrap_or_default();
        out.push(Insight {
            pattern: Pattern::Accumulation,
            value: format!("{} mentions {topic} {} times{when}", and_list(&who), members.len()),
            key: topic,
            date: range(&first, &last),
            refers_to: members.iter().filter_map(|&m| all[m].time).max(),
            from: members,
        });
    }
    // Transformation: same speaker, same key, changed content.
    for (j, n) in newer.iter().enumerate() {
        let nk = key_words(&n.key);
        let found = older
            .iter()
            .enumerate()
            .filter(|(i, o)| {
                let ok = key_words(&o.key);
                let same_key = !nk.is_empty() && (o.key.eq_ignore_ascii_case(&n.key) || jaccard(&ok, &nk) >= 0.5);
                let strip = |k: &Known| -> BTreeSet<String> {
                    content_words(&k.content)
                        .into_iter()
                        .filter(|w| !nk.contains(w) && !ok.contains(w) && !names.contains(w))
                        .collect()
                };
                o.speaker == n.speaker && same_key && !similar[*i][j] && jaccard(&strip(o), &strip(n)) < 0.5
            })
            .max_by(|a, b| a.1.time.cmp(&b.1.time).then(b.0.cmp(&a.0)));
        if let Some((i, o)) = found {
            out.push(Insight {
                pattern: Pattern::Transformation,
                key: n.key.clone(),
                date: range(&o.time_label, &n.time_label),
                value: format!("{} ({}) → {} ({})", o.content, o.time_label, n.content, n.time_label),
                refers_to: n.time,
                from: vec![i, n_old + j],
            });
        }
    }
    // Connection: a name mentioned in both clusters.
    let mut pairs: Vec<(usize, usize)> = Vec::new();
    let mut seen: Vec<String> = Vec::new();
    let mut newer_order: Vec<usize> = (0..newer.len()).collect();
    newer_order.sort_by(|a, b| newer[*a].time.cmp(&newer[*b].time).then(a.cmp(b)));
    for &j in &newer_order {
        for e in entities(&newer[j].content, names) {
            if seen.contains(&e) {
                continue;
            }
            let lower = e.to_lowercase();
            let found = older
                .iter()
                .enumerate()
                .filter(|(_, o)| entities(&o.content, names).iter().any(|x| x.to_lowercase() == lower))
                .max_by(|a, b| a.1.time.cmp(&b.1.time).then(b.0.cmp(&a.0)));
            if let Some((i, o)) = found
                && !pairs.contains(&(i, j))
            {
                pairs.push((i, j));
                seen.push(e.clone());
                let n = &newer[j];
                out.push(Insight {
                    pattern: Pattern::Connection,
                    date: range(&o.time_label, &n.time_label),
                    value: format!("{} ({}); {} ({})", o.content, o.time_label, n.content, n.time_label),
                    key: e,
                    refers_to: n.time.max(o.time),
                    from: vec![i, n_old + j],
                });
            }
        }
    }
    out.truncate(cfg.max_per_pair);
    out
}

/// `s` with every `YYYY-MM-DD` written as `7 May 2023`.
pub fn humanise_dates(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut i = 0;
    while i < s.len() {
        let window = s.get(i..i + 10);
        let iso = window.filter(|w| {
            let b = w.as_bytes();
            b[4] == b'-'
                && b[7] == b'-'
                && b.iter()
                    .enumerate()
                    .all(|(k, c)| k == 4 || k == 7 || c.is_ascii_digit())
        });
        if let Some(t) = iso.and_then(parse_iso8601) {
            out.push_str(&human_date(t));
            i += 10;
        } else {
            let c = s[i..].chars().next().unwrap_or(' ');
            out.push(c);
            i += c.len_utf8();
        }
    }
    out
}

/// Unix seconds of the last `YYYY-MM-DD` in `s`.
fn last_iso(s: &str) -> Option<i64> {
    (0..s.len().saturating_sub(9))
        .rev()
        .filter_map(|i| s.get(i..i + 10))
        .find_map(super::extract::iso_day)
        .map(|d| d * 86_400)
}

const REASON_PROMPT: &str = include_str!("../prompts/premem_reason.txt");

/// The reasoning fragments of a linked pair written by a model (Appendix
/// A, Figure 4); at most `max` are kept.
pub fn with_llm(llm: &dyn Llm, older: &[Known], newer: &[Known], max: usize) -> Result<Vec<Insight>, LlmError> {
    let mut user = String::from("Below are the memory fragments to analyze:\n\n");
    for k in older.iter().chain(newer) {
        user.push_str(&k.text.replace('\n', " "));
        user.push('\n');
    }
    let n = older.len() + newer.len();
    let insight = schema::object(
        &[
            (
                "inference_type",
                schema::one_of(&[
                    "extension/generalization",
                    "accumulation",
                    "specification/refinement",
                    "transformation",
                    "connection/implication",
                ]),
            ),
            ("key", schema::short()),
            ("date", schema::string_or_null()),
            ("value", schema::text()),
        ],
        &["inference_type", "key", "value"],
    );
    let schema = schema::object(
        &[("extended_insight", schema::array(insight, Some(max.max(1))))],
        &["extended_insight"],
    );
    let mut out = ask_json(llm, &Call::json("premem_reason", &schema), REASON_PROMPT, &user, |v| {
        parse_insights(v, n)
    })?;
    out.truncate(max);
    Ok(out)
}

/// Checks `{"extended_insight": [...]}` for a pair of `n` fragments.
pub(crate) fn parse_insights(v: &Value, n: usize) -> Result<Vec<Insight>, String> {
    let list = v
        .get("extended_insight")
        .and_then(Value::as_array)
        .ok_or("`extended_insight` must be a list")?;
    let mut out = Vec::with_capacity(list.len());
    for (i, x) in list.iter().enumerate() {
        let text = |k: &str| {
            x.get(k)
                .and_then(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(|s| s.replace('\n', " "))
                .ok_or(format!("insight {}: `{k}` must be a non-empty string", i + 1))
        };
        let kind = text("inference_type")?;
        let pattern = Pattern::parse(&kind).ok_or(format!(
            "insight {}: `inference_type` `{kind}` is not one of extension/generalization, accumulation, \
             specification/refinement, transformation, connection/implication",
            i + 1
        ))?;
        let date = match x.get("date") {
            None | Some(Value::Null) => String::new(),
            Some(Value::String(s)) => s.trim().replace('\n', " "),
            Some(_) => return Err(format!("insight {}: `date` must be a string", i + 1)),
        };
        out.push(Insight {
            pattern,
            key: text("key")?,
            value: text("value")?,
            refers_to: last_iso(&date),
            date: humanise_dates(&date),
            from: (0..n).collect(),
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn known(key: &str, content: &str, label: &str, day: i64, speaker: &str, v: &[f32]) -> Known {
        Known {
            text: format!("[{label}] {key}: {content}"),
            key: key.into(),
            content: content.into(),
            time_label: label.into(),
            time: Some(day * 86_400),
            speaker: speaker.into(),
            vector: v.to_vec(),
        }
    }

    #[test]
    fn offline_templates() {
        let names = vec!["caroline".to_string(), "melanie".to_string()];
        let older = [
            known(
                "support group",
                "Caroline went to a support group.",
                "7 May 2023",
                19484,
                "Caroline",
                &[1.0, 0.0, 0.0, 0.0],
            ),
            known(
                "residence",
                "Caroline lives in Boston near the river.",
                "8 May 2023",
                19485,
                "Caroline",
                &[0.0, 1.0, 0.0, 0.0],
            ),
            known(
                "sister",
                "Caroline's sister Clara studies in Lisbon.",
                "8 May 2023",
                19485,
                "Caroline",
                &[0.0, 0.0, 1.0, 0.0],
            ),
        ];
        let newer = [
            known(
                "support group",
                "Caroline went to the support group again.",
                "24 May 2023",
                19501,
                "Caroline",
                &[0.95, 0.0, 0.0, 0.31],
            ),
            known(
                "residence",
                "Caroline moved to Porto with a friend.",
                "Before 25 May 2023",
                19502,
                "Caroline",
                &[0.0, 0.6, 0.0, 0.8],
            ),
            known(
                "trip",
                "Melanie plans a trip to Lisbon.",
                "After 25 May 2023",
                19502,
                "Melanie",
                &[0.0, 0.0, 0.0, 1.0],
            ),
        ];
        let out = offline(&older, &newer, &ReasonConfig::default(), &names);
        let texts: Vec<String> = out.iter().map(Insight::text).collect();
        assert_eq!(
            texts,
            [
                "[7 May 2023 to 24 May 2023] support group (accumulation): Caroline mentions support group 2 times: 7 May 2023 and 24 May 2023",
                "[8 May 2023 to Before 25 May 2023] residence (transformation): Caroline lives in Boston near the river. (8 May 2023) → Caroline moved to Porto with a friend. (Before 25 May 2023)",
                "[8 May 2023 to After 25 May 2023] Lisbon (connection/implication): Caroline's sister Clara studies in Lisbon. (8 May 2023); Melanie plans a trip to Lisbon. (After 25 May 2023)",
            ]
        );
        assert_eq!(out[0].from, vec![0, 3]);
        assert_eq!(out[1].from, vec![1, 4]);
        assert_eq!(out[2].from, vec![2, 5]);
        assert_eq!(out[0].refers_to, Some(19501 * 86_400));
        // The cap.
        let cfg = ReasonConfig {
            max_per_pair: 1,
            ..ReasonConfig::default()
        };
        assert_eq!(offline(&older, &newer, &cfg, &names).len(), 1);
        // Nothing in common: nothing inferred.
        assert!(offline(&older[1..2], &newer[2..], &ReasonConfig::default(), &names).is_empty());
    }

    #[test]
    fn model_answers_are_checked() {
        let v = json!({"extended_insight": [
            {"inference_type": "Accumulation", "key": "art", "date": "2023-03-05 to 2023-03-22", "value": "Jordan made art 4 times"},
            {"inference_type": "connection/implication", "key": "background", "date": null, "value": "Jordan has art experience"},
            {"inference_type": "Specification", "key": "medium", "date": "Before 2023-03-05", "value": "Jordan uses Procreate"}
        ]});
        let out = parse_insights(&v, 3).unwrap();
        assert_eq!(out[0].pattern, Pattern::Accumulation);
        assert_eq!(out[0].date, "5 March 2023 to 22 March 2023");
        assert_eq!(out[0].refers_to, parse_iso8601("2023-03-22"));
        assert_eq!(out[0].from, vec![0, 1, 2]);
        assert_eq!(
            out[1].text(),
            "background (connection/implication): Jordan has art experience"
        );
        assert_eq!(out[2].pattern, Pattern::Specification);
        assert_eq!(
            out[2].text(),
            "[Before 5 March 2023] medium (specification/refinement): Jordan uses Procreate"
        );
        assert!(parse_insights(&json!({"extended_insight": []}), 3).unwrap().is_empty());
        for (bad, why) in [
            (json!({"insights": []}), "`extended_insight`"),
            (
                json!({"extended_insight": [{"inference_type": "deduction", "key": "k", "value": "v"}]}),
                "`deduction`",
            ),
            (
                json!({"extended_insight": [{"inference_type": "accumulation", "key": "k", "value": ""}]}),
                "`value`",
            ),
            (
                json!({"extended_insight": [{"inference_type": "accumulation", "key": "k", "value": "v", "date": 5}]}),
                "`date`",
            ),
        ] {
            let e = parse_insights(&bad, 2).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
        assert_eq!(
            humanise_dates("from 2024-02-29 to 2024-03-01."),
            "from 29 February 2024 to 1 March 2024."
        );
        assert_eq!(humanise_dates("2024-13-01 ünï"), "2024-13-01 ünï");
    }
}
