//! Memory consolidation with momentum (Amory §3.2): a narrative's newest
//! fragments (at most N = 10 at a time) are summarised into one or more
//! **sub-plot** headlines, each over a contiguous block of them, and the
//! main headline is **broadened** when it no longer covers every sub-plot.
//!
//! When it runs is [`Consolidation`]: by default when a narrative turns
//! *inactive* (no fragment bound to it in the last iteration), as the
//! paper; its ablations consolidate every narrative with new fragments
//! after every iteration (`Rapid`) or never (`None`).
//!
//! With a model, the consolidation prompt of Appendix A answers the
//! blocks, their headlines and a new main topic (or null). Offline:
//! - **blocks**: a new block starts where a fragment's embedding has a
//!   cosine with the running block's centroid below the split level
//!   ([`super::binding::Similarity`]);
//! - **sub-plot headline**: extractive — the block's four most used
//!   content words (speakers' names excluded), as for a narrative;
//! - **broadening**: the headline covers a sub-plot when they share a
//!   content word; when one is not covered, the headline becomes, for each
//!   sub-plot in turn that is still uncovered, its content word used most
//!   across the narrative's fragments, filled up to four words with the
//!   narrative's most used words (at most six).
//!
//! Weaker than the model: keywords name what a block is about but not
//! what happened in it ("vet, vaccine, checkup" against "Pixel's vaccine
//! checkup went well"), and coverage is word overlap, so a headline that
//! covers a sub-plot in other words ("pets" over "Pixel the cat") is
//! broadened anyway.

use super::binding::{headline_exclusions, headline_words, split_speaker};
use super::tree::{Frag, Head};
use crate::llm::{Llm, LlmError, ask_json};
use crate::nemori::boundary::tiling;
use crate::nemori::episode::top_words;
use crate::text::content_words;
use crate::time::human_date;
use serde_json::Value;

/// When narratives are consolidated.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Consolidation {
    /// When a narrative turns inactive: it has unconsolidated fragments
    /// and received none in the last iteration (the paper's default).
    #[default]
    Inactive,
    /// After every iteration, every narrative with unconsolidated
    /// fragments (the paper's "rapid" ablation).
    Rapid,
    /// Never (the paper's "no consolidation" ablation): no sub-plots, no
    /// headline changes and no semantic memory.
    None,
}

/// What one consolidation decided for a window of fragments.
#[derive(Debug, Clone, PartialEq)]
pub struct Consolidated {
    /// Sub-plots: headline and number of fragments, tiling the window in
    /// order.
    pub subplots: Vec<(String, usize)>,
    /// The new main headline, when it changes.
    pub headline: Option<String>,
}

fn dot(a: &[f32], b: &[f32]) -> f32 {
    a.iter().zip(b).map(|(x, y)| x * y).sum()
}

fn words_of(text: &str) -> std::collections::BTreeSet<String> {
    content_words(split_speaker(text).1)
}

/// Whether `headline` shares a content word with `subplot`.
pub fn covers(headline: &str, subplot: &str) -> bool {
    let h = words_of(headline);
    words_of(subplot).iter().any(|w| h.contains(w))
}

/// The distinct speakers of `Speaker: text` lines, lower case.
fn speakers(texts: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = texts
        .iter()
        .map(|t| split_speaker(t).0.to_lowercase())
        .filter(|s| !s.is_empty())
        .collect();
    out.sort();
    out.dedup();
    out
}

/// Offline consolidation of `window` (fragment texts with their unit
/// embeddings) of a narrative whose current headline is `headline`, whose
/// sub-plots so far are `existing`, and whose fragments (all, this window
/// included) are `all_texts`.
pub fn offline(
    headline: &str,
    existing: &[&str],
    window: &[(&str, &[f32])],
    all_texts: &[&str],
    split_below: f32,
) -> Consolidated {
    // Blocks by similarity to the running centroid.
    let mut blocks: Vec<Vec<usize>> = Vec::new();
    let mut centroid: Vec<f32> = Vec::new();
    for (i, (_, v)) in window.iter().enumerate() {
        let n = dot(&centroid, &centroid).sqrt();
        let sim = if n == 0.0 { 1.0 } else { dot(v, &centroid) / n };
        if blocks.is_empty() || sim < split_below {
            blocks.push(vec![i]);
            centroid = v.to_vec();
        } else {
            if let Some(b) = blocks.last_mut() {
                b.push(i);
            }
            for (c, x) in centroid.iter_mut().zip(v.iter()) {
                *c += x;
            }
        }
    }
    let subplots: Vec<(String, usize)> = blocks
        .iter()
        .map(|b| {
            let texts: Vec<&str> = b.iter().map(|&i| window[i].0).collect();
            (headline_words(&texts, &speakers(&texts)), b.len())
        })
        .collect();
    let mut all_subs: Vec<&str> = existing.to_vec();
    all_subs.extend(subplots.iter().map(|(h, _)| h.as_str()));
    let headline = if all_subs.iter().all(|s| covers(headline, s)) {
        None
    } else {
        Some(broadened(&all_subs, all_texts)).filter(|h| h != headline)
    };
    Consolidated { subplots, headline }
}

/// A headline that covers every sub-plot that has content words: for each
/// uncovered one, its content word most used across `texts`; then the
/// most used words up to four (at most six in all).
pub fn broadened(subplots: &[&str], texts: &[&str]) -> String {
    let speakers = speakers(texts);
    let mut docs: Vec<&str> = texts.iter().map(|t| split_speaker(t).1).collect();
    docs.extend(subplots.iter().map(|s| split_speaker(s).1));
    let ranked = top_words(&docs, &headline_exclusions(&speakers), usize::MAX);
    let mut chosen: Vec<String> = Vec::new();
    for sp in subplots {
        let w = words_of(sp);
        if chosen.iter().any(|c| w.contains(c)) {
            continue;
        }
        if let Some(best) = ranked.iter().find(|r| w.contains(*r))
            && chosen.len() < 6
        {
            chosen.push(best.clone());
        }
    }
    for r in &ranked {
        if chosen.len() >= 4 {
            break;
        }
        if !chosen.contains(r) {
            chosen.push(r.clone());
        }
    }
    if chosen.is_empty() {
        "talk".into()
    } else {
        chosen.join(", ")
    }
}

/// A fragment as prompts show it: `[n] (8 May 2023) Speaker: text`.
pub(crate) fn item_line(n: usize, f: &Frag) -> String {
    let when = f.said_at.map(|t| format!(" ({})", human_date(t))).unwrap_or_default();
    format!("[{n}]{when} {}", f.text)
}

/// The story as the consolidation and semanticization prompts give it.
pub(crate) fn story_prompt(head: &Head, existing: &[&str], window: &[&Frag]) -> String {
    let mut user = format!("Main topic: {}\n\nExisting substories:\n", head.line());
    if existing.is_empty() {
        user.push_str("None yet.\n");
    }
    for s in existing {
        user.push_str(&format!("- {s}\n"));
    }
    user.push_str("\nNew memory items:\n");
    for (i, f) in window.iter().enumerate() {
        user.push_str(&item_line(i + 1, f));
        user.push('\n');
    }
    user
}

const CONSOLIDATE_PROMPT: &str = include_str!("../prompts/amory_consolidate.txt");

/// Consolidation with a model.
pub fn with_llm(llm: &dyn Llm, head: &Head, existing: &[&str], window: &[&Frag]) -> Result<Consolidated, LlmError> {
    let user = story_prompt(head, existing, window);
    let n = window.len();
    ask_json(llm, CONSOLIDATE_PROMPT, &user, |v| parse(v, n, &head.headline))
}

/// Checks `{"substories": [{"sub_topic", "start", "end"}], "new_topic"}`.
fn parse(v: &Value, n: usize, current: &str) -> Result<Consolidated, String> {
    let subs = v
        .get("substories")
        .and_then(Value::as_array)
        .ok_or("`substories` must be a list")?;
    let lens = tiling(subs, n, "substory")?;
    let mut subplots = Vec::with_capacity(subs.len());
    for (i, (s, len)) in subs.iter().zip(lens).enumerate() {
        let topic = s
            .get("sub_topic")
            .and_then(Value::as_str)
            .map(|t| t.split_whitespace().collect::<Vec<_>>().join(" "))
            .filter(|t| !t.is_empty())
            .ok_or(format!("substory {} needs a non-empty `sub_topic`", i + 1))?;
        subplots.push((topic, len));
    }
    let headline = match v.get("new_topic") {
        None | Some(Value::Null) => None,
        Some(Value::String(t)) if !t.trim().is_empty() => {
            Some(t.split_whitespace().collect::<Vec<_>>().join(" ")).filter(|t| t != current)
        }
        Some(_) => return Err("`new_topic` must be a non-empty string or null".into()),
    };
    Ok(Consolidated { subplots, headline })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn unit(v: &[f32]) -> Vec<f32> {
        let n = dot(v, v).sqrt();
        v.iter().map(|x| x / n).collect()
    }

    #[test]
    fn offline_blocks_headlines_and_broadening() {
        let texts = [
            "Ann: I adopted a grey cat called Pixel from the shelter.",
            "Ann: Pixel the cat loves tuna from the shelter.",
            "Bob: The cat hides under the sofa.",
            "Ann: The vet gave Pixel a vaccine and a checkup at the clinic.",
            "Ann: The clinic vet says the vaccine worked.",
        ];
        let vs = [
            unit(&[1.0, 0.1, 0.0]),
            unit(&[1.0, 0.0, 0.1]),
            unit(&[1.0, 0.1, 0.1]),
            unit(&[0.1, 1.0, 0.0]),
            unit(&[0.0, 1.0, 0.1]),
        ];
        let window: Vec<(&str, &[f32])> = texts.iter().zip(&vs).map(|(t, v)| (*t, v.as_slice())).collect();
        let c = offline("cat, shelter, tuna", &[], &window, &texts, 0.2);
        assert_eq!(c.subplots.len(), 2, "{c:?}");
        assert_eq!((c.subplots[0].1, c.subplots[1].1), (3, 2));
        // Each block is named by its most used words.
        assert_eq!(c.subplots[0].0, "cat, pixel, shelter, adopted");
        assert_eq!(c.subplots[1].0, "vet, vaccine, clinic, gave");
        // The vet block shares no word with the headline: it is broadened
        // to cover both blocks.
        let h = c.headline.expect("broadened");
        assert!(covers(&h, &c.subplots[0].0) && covers(&h, &c.subplots[1].0), "{h}");
        // A headline that already covers both is kept.
        let c = offline("cat, vet", &[], &window, &texts, 0.2);
        assert_eq!(c.headline, None);
        // Deterministic.
        assert_eq!(
            offline("x", &[], &window, &texts, 0.2),
            offline("x", &[], &window, &texts, 0.2)
        );
    }

    #[test]
    fn model_answers_must_tile_the_window() {
        let ok = json!({"substories": [{"sub_topic": "Adopting Pixel", "start": 1, "end": 2},
                                       {"sub_topic": "Vet visit", "start": 3, "end": 3}], "new_topic": "Ann's cat"});
        let c = parse(&ok, 3, "Pixel").unwrap();
        assert_eq!(
            c.subplots,
            [("Adopting Pixel".to_string(), 2), ("Vet visit".to_string(), 1)]
        );
        assert_eq!(c.headline.as_deref(), Some("Ann's cat"));
        let same = json!({"substories": [{"sub_topic": "All", "start": 1, "end": 3}], "new_topic": "Pixel"});
        assert_eq!(parse(&same, 3, "Pixel").unwrap().headline, None);
        for bad in [
            json!({"substories": [{"sub_topic": "A", "start": 1, "end": 2}], "new_topic": null}),
            json!({"substories": [{"sub_topic": "A", "start": 2, "end": 3}], "new_topic": null}),
            json!({"substories": [{"sub_topic": " ", "start": 1, "end": 3}], "new_topic": null}),
            json!({"substories": [{"sub_topic": "A", "start": 1, "end": 3}], "new_topic": 5}),
            json!({"substories": [{"sub_topic": "A", "start": 1, "end": 3}], "new_topic": ""}),
            json!({"subplots": []}),
        ] {
            assert!(parse(&bad, 3, "Pixel").is_err(), "{bad}");
        }
    }
}
