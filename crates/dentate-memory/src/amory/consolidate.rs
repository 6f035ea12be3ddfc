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
use super::tree::{Frag, Head, story_prompt};
use super::*;
use crate::llm::{Call, Llm, LlmError, ask_json, schema};
use crate::nemori::boundary::tiling;
use crate::nemori::episode::top_words;
use crate::text::content_words;
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

const CONSOLIDATE_PROMPT: &str = include_str!("../prompts/amory_consolidate.txt");

/// Consolidation with a model.
pub fn with_llm(llm: &dyn Llm, head: &Head, existing: &[&str], window: &[&Frag]) -> Result<Consolidated, LlmError> {
    let user = story_prompt(head, existing, window);
    let n = window.len();
    let sub = schema::object(
        &[
            ("sub_topic", schema::short()),
            ("start", schema::integer(1, n)),
            ("end", schema::integer(1, n)),
        ],
        &["sub_topic", "start", "end"],
    );
    let schema = schema::object(
        &[
            ("substories", schema::array(sub, Some(n))),
            ("new_topic", schema::string_or_null()),
        ],
        &["substories"],
    );
    ask_json(
        llm,
        &Call::json("amory_consolidate", &schema),
        CONSOLIDATE_PROMPT,
        &user,
        |v| parse(v, n, &head.headline),
    )
}

/// Checks `{"substories": [{"sub_topic", "start", "end"}], "new_topic"}`.
fn parse(v: &Value, n: usize, current: &str) -> Result<Consolidated, String> {
    let subs = v
        .get("substories")
        .and_then(Value::as_array)
        .ok_or("`substories` must be a list")?;
    let mut subplots = Vec::with_capacity(subs.len());
    for (i, len) in tiling(subs, n, "substory")? {
        let topic = subs[i]
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

/// Consolidation and semanticization (steps 3–4): a quiet narrative's
/// fragments made into sub-plots and its peripheral facts into triples.
impl Amory {
    /// A window's sub-plots (and new headline) and its facts, by the model.
    pub(super) fn plan_with_model(llm: &dyn Llm, w: &Window<'_>) -> Result<(Consolidated, Vec<Fact>)> {
        let frag_refs: Vec<&Frag> = w.frags.iter().collect();
        let plan = consolidate::with_llm(llm, &w.nar.head, w.existing, &frag_refs)?;
        let head = Head {
            headline: plan.headline.clone().unwrap_or_else(|| w.nar.head.headline.clone()),
            ..w.nar.head.clone()
        };
        let mut subs = w.existing.to_vec();
        subs.extend(plan.subplots.iter().map(|(h, _)| h.as_str()));
        let facts = semantic::with_llm(llm, &head, &subs, &frag_refs)?;
        Ok((plan, facts))
    }

    /// A window's sub-plots (and new headline) and its facts, offline:
    /// split where the fragments' embeddings part, facts from patterns.
    pub(super) fn plan_offline(&mut self, env: &Env<'_>, w: &Window<'_>) -> Result<(Consolidated, Vec<Fact>)> {
        let n = w.frags.len();
        let mut vs = Vec::with_capacity(n);
        for f in w.frags {
            vs.push(self.frag_vec(env, f.id)?);
        }
        let win: Vec<(&str, &[f32])> = w
            .frags
            .iter()
            .zip(&vs)
            .map(|(f, v)| (f.text.as_str(), v.as_slice()))
            .collect();
        let texts: Vec<&str> = w.all_texts.iter().map(String::as_str).collect();
        let split = self.cfg.binding.similarity(&env.embedder.name()).split;
        let plan = consolidate::offline(&w.nar.head.headline, w.existing, &win, &texts, split);
        let mut addressees = Vec::with_capacity(n);
        for f in w.frags {
            addressees.push(match f.sources.first() {
                Some(&s) => Self::addressee(env, s)?,
                None => None,
            });
        }
        let win: Vec<(&str, Option<&str>)> = w
            .frags
            .iter()
            .zip(&addressees)
            .map(|(f, a)| (f.text.as_str(), a.as_deref()))
            .collect();
        Ok((plan, semantic::offline(&win, &w.nar.head.characters)))
    }

    /// Consolidates the first `n` unconsolidated fragments of narrative at
    /// position `pos`, with semanticization, in one step; returns the items
    /// made.
    pub(super) fn consolidate(
        &mut self,
        env: &mut Env<'_>,
        roles: &dyn Roles,
        pos: usize,
        n: usize,
        iteration: i64,
    ) -> Result<usize> {
        let tree = self.tree()?;
        let nar = tree.narratives[pos].clone();
        let window: Vec<Frag> = nar.tail[..n]
            .iter()
            .filter_map(|id| tree.frags.get(id).cloned())
            .collect();
        if window.len() != n {
            return Err(MemoryError::Invalid(format!(
                "narrative {} lists fragments the store no longer has",
                nar.id
            )));
        }
        let all_texts: Vec<String> = nar
            .fragments()
            .filter_map(|id| tree.frags.get(&id).map(|f| f.text.clone()))
            .collect();
        let existing: Vec<&str> = nar.subplots.iter().map(|s| s.headline.as_str()).collect();
        let (plan, facts) = roles.consolidate(
            self,
            env,
            &Window {
                nar: &nar,
                frags: &window,
                existing: &existing,
                all_texts: &all_texts,
            },
        )?;
        // Facts already in the graph are not stored again.
        let mut fresh = Vec::with_capacity(facts.len());
        for f in facts {
            let known = env
                .store
                .triples_about(env.user, self.name, &f.subject)?
                .iter()
                .any(|t| {
                    (
                        crate::graph::entity_key(&t.subject),
                        crate::graph::predicate_key(&t.predicate),
                        crate::graph::entity_key(&t.object),
                    ) == f.keys()
                });
            if !known {
                fresh.push(f);
            }
        }
        // Which sub-plot each fragment of the window falls in.
        let mut block_of = Vec::with_capacity(n);
        for (b, (_, len)) in plan.subplots.iter().enumerate() {
            block_of.extend(std::iter::repeat_n(b, *len));
        }
        let new_head = plan.headline.as_ref().map(|h| Head {
            headline: h.clone(),
            ..nar.head.clone()
        });
        let mut texts: Vec<String> = plan.subplots.iter().map(|(h, _)| h.clone()).collect();
        texts.extend(fresh.iter().map(|f| triple_text(&f.subject, &f.predicate, &f.object)));
        if let Some(h) = &new_head {
            texts.push(h.text());
        }
        let vecs = embed_batch(env.embedder, &texts)?;
        let dim = env.embedder.dim();
        let vec_at = |i: usize| vecs[i * dim..(i + 1) * dim].to_vec();
        let mut step = Step::default();
        let mut start = 0;
        for (b, (headline, len)) in plan.subplots.iter().enumerate() {
            let block = &window[start..start + len];
            let mut sources: Vec<i64> = block.iter().flat_map(|f| f.sources.iter().copied()).collect();
            sources.sort_unstable();
            sources.dedup();
            let said = block.first().and_then(|f| f.said_at);
            step.add.push(NewItem {
                kind: SUBPLOT.into(),
                text: headline.clone(),
                sources,
                said_at: said,
                refers_to: said,
                vector: Some(vec_at(b)),
                parent: Some(ItemRef::Stored(nar.id)),
            });
            start += len;
        }
        let n_sub = plan.subplots.len();
        for (i, f) in fresh.iter().enumerate() {
            let frag = &window[f.item];
            step.add.push(NewItem {
                kind: FACT.into(),
                text: texts[n_sub + i].clone(),
                sources: frag.sources.clone(),
                said_at: frag.said_at,
                refers_to: frag.said_at,
                vector: Some(vec_at(n_sub + i)),
                parent: Some(ItemRef::InStep(block_of[f.item])),
            });
            step.triples.push(NewTriple {
                item: ItemRef::InStep(n_sub + i),
                subject: f.subject.clone(),
                predicate: f.predicate.clone(),
                object: f.object.clone(),
            });
        }
        for (f, &b) in window.iter().zip(&block_of) {
            step.update.push(ItemUpdate {
                id: f.id,
                parent: Some(ItemRef::InStep(b)),
                ..Default::default()
            });
        }
        if let Some(h) = &new_head {
            step.update.push(ItemUpdate {
                id: nar.id,
                text: Some(h.text()),
                vector: Some(vec_at(texts.len() - 1)),
                ..Default::default()
            });
        }
        step.turn = iteration;
        let ids = env.store.commit(env.user, self.name, &step)?;
        // Tree and indexes.
        let tree = self.tree_mut()?;
        let nr = &mut tree.narratives[pos];
        let mut start = 0;
        for ((headline, len), id) in plan.subplots.iter().zip(&ids) {
            nr.subplots.push(SubPlot {
                id: *id,
                headline: headline.clone(),
                fragments: window[start..start + len].iter().map(|f| f.id).collect(),
            });
            start += len;
        }
        nr.tail.drain(..n);
        if let Some(h) = &new_head {
            nr.head = h.clone();
        }
        let sub_texts: Vec<&str> = texts[..n_sub].iter().map(String::as_str).collect();
        self.subplots
            .add(env, &ids[..n_sub], iteration, &vecs[..n_sub * dim], &sub_texts)?;
        let n_fact = fresh.len();
        let fact_texts: Vec<&str> = texts[n_sub..n_sub + n_fact].iter().map(String::as_str).collect();
        self.facts.add(
            env,
            &ids[n_sub..n_sub + n_fact],
            iteration,
            &vecs[n_sub * dim..(n_sub + n_fact) * dim],
            &fact_texts,
        )?;
        if let Some(h) = &new_head {
            self.narratives
                .replace(env, nar.id, iteration, &vec_at(texts.len() - 1), &h.text())?;
        }
        Ok(ids.len())
    }

    /// Consolidates what is due after the last iteration: inactive
    /// narratives (or, `Rapid`, all with new fragments; `all`: every
    /// narrative with new fragments, as when the conversation ends).
    pub(super) fn settle(&mut self, env: &mut Env<'_>, roles: &dyn Roles, all: bool) -> Result<usize> {
        if self.cfg.consolidation == Consolidation::None || !self.initialised(env)? {
            return Ok(0);
        }
        self.load_tree(env)?;
        let iteration = self.state_i64(env, ITERATION)?.unwrap_or(0);
        let rapid = self.cfg.consolidation == Consolidation::Rapid;
        let mut made = 0;
        let count = self.tree()?.narratives.len();
        for pos in 0..count {
            loop {
                let nar = &self.tree()?.narratives[pos];
                let due = !nar.tail.is_empty() && (all || rapid || nar.last_bound < iteration);
                if !due {
                    break;
                }
                let n = nar.tail.len().min(self.cfg.window.max(1));
                made += self.consolidate(env, roles, pos, n, iteration)?;
            }
        }
        Ok(made)
    }
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
    fn model_answers_are_read_as_the_split_their_starts_make() {
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
        // Blocks out of order and overlapping are read by their starts.
        let sloppy = json!({"substories": [{"sub_topic": "Vet visit", "start": 3, "end": 2},
                                           {"sub_topic": "Adopting Pixel", "start": 1, "end": 3}], "new_topic": null});
        assert_eq!(
            parse(&sloppy, 3, "Pixel").unwrap().subplots,
            [("Adopting Pixel".to_string(), 1), ("Vet visit".to_string(), 2)]
        );
        for bad in [
            json!({"substories": [], "new_topic": null}),
            json!({"substories": [{"sub_topic": "A", "start": 1, "end": 4}], "new_topic": null}),
            json!({"substories": [{"sub_topic": " ", "start": 1, "end": 3}], "new_topic": null}),
            json!({"substories": [{"sub_topic": "A", "start": 1, "end": 3}], "new_topic": 5}),
            json!({"substories": [{"sub_topic": "A", "start": 1, "end": 3}], "new_topic": ""}),
            json!({"subplots": []}),
        ] {
            assert!(parse(&bad, 3, "Pixel").is_err(), "{bad}");
        }
    }
}
