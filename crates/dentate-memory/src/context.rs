//! Ranking for the context, over any pipeline's retrieved items: a
//! question's evidence is often spread over one conversation session, or
//! sits in the turn next to the one that matches the question (the answer
//! to a question turn, the reply a turn refers to). [`rerank`] scores
//! each session by its best items and each item by its neighbours, and
//! re-orders a deeper list than asked for with those scores added to the
//! pipeline's own ([`ContextConfig`]). [`crate::Memory::retrieve`]
//! applies it to every pipeline, and the pipelines' prompts to what they
//! compose from.

use crate::error::Result;
use crate::pipeline::{ContextConfig, Env, Pipeline, Retrieved};
use std::collections::HashMap;

/// The `k` items `pipeline` retrieves for `query`, ranked for the
/// context: retrieved [`ContextConfig::depth`] deep, then [`rerank`]ed;
/// the items returned are marked as retrieved ([`Pipeline::mark_retrieved`]).
pub fn retrieve<P: Pipeline + ?Sized>(
    pipeline: &mut P,
    env: &mut Env<'_>,
    query: &str,
    k: usize,
) -> Result<Vec<Retrieved>> {
    let cfg = env.context;
    let mut ranked = pipeline.retrieve(env, query, cfg.depth(k))?;
    if cfg.expand > 0 && !cfg.is_off() {
        expand(env, pipeline.name(), &mut ranked, cfg.expand)?;
    }
    let out = rerank(ranked, &cfg, k, query);
    let ids: Vec<i64> = out.iter().map(|r| r.item.id).collect();
    pipeline.mark_retrieved(env, &ids)?;
    Ok(out)
}

/// Appends to `ranked` the items of `pipeline` made from the messages
/// just before and just after those of its first `n` items (in the same
/// session, of the same kind), that `ranked` does not hold yet, with score
/// 0 and in the order of the items they neighbour: the answer to a
/// question turn, the turn a reply answers. [`rerank`] then places them by
/// their session's and their neighbour's scores.
pub fn expand(env: &Env<'_>, pipeline: &str, ranked: &mut Vec<Retrieved>, n: usize) -> Result<()> {
    // The first and last source message of each of the best n, with a
    // session: their neighbours are looked up in one statement.
    let bounds: Vec<(usize, i64, i64)> = ranked
        .iter()
        .take(n)
        .enumerate()
        .filter(|(_, r)| r.session.is_some())
        .filter_map(|(i, r)| Some((i, *r.item.sources.iter().min()?, *r.item.sources.iter().max()?)))
        .collect();
    if bounds.is_empty() {
        return Ok(());
    }
    let ends: Vec<i64> = bounds.iter().flat_map(|&(_, a, b)| [a, b]).collect();
    // Sorted by id: the one just before `first` is the last below it (the
    // true neighbour is among them), the one after `last` the first above.
    let around = env.store.adjacent_messages(env.user, &ends)?;
    let mut wanted: Vec<(usize, i64)> = Vec::new();
    for &(i, first, last) in &bounds {
        let r = &ranked[i];
        let before = around.iter().rev().find(|m| m.id < first);
        let after = around.iter().find(|m| m.id > last);
        for m in before.into_iter().chain(after) {
            if Some(&m.msg.session) == r.session.as_ref() && !r.item.sources.contains(&m.id) {
                wanted.push((i, m.id));
            }
        }
    }
    let messages: Vec<i64> = wanted.iter().map(|&(_, m)| m).collect();
    let made = env.store.items_of_messages(env.user, pipeline, &messages)?;
    let held: std::collections::HashSet<i64> = ranked.iter().map(|r| r.item.id).collect();
    let mut found: Vec<i64> = Vec::new();
    // In the order of the items they neighbour; the same kind only.
    for &(i, message) in &wanted {
        for (_, id, kind) in made.iter().filter(|(m, _, _)| *m == message) {
            if *kind == ranked[i].item.kind && !held.contains(id) && !found.contains(id) {
                found.push(*id);
            }
        }
    }
    let hits: Vec<(i64, f32)> = found.into_iter().map(|id| (id, 0.0)).collect();
    ranked.extend(crate::pipeline::resolve(env, &hits)?);
    Ok(())
}

/// The most items [`rerank`] re-orders: the rest of a longer list (a
/// filtered search deepens it up to [`crate::MAX_SEARCH_DEPTH`]) follows
/// in the pipeline's order, so the work stays bounded (neighbours are
/// compared within a session, at worst every pair of this many).
pub const RERANK_MAX: usize = 2048;

/// The speakers among `speakers` that `query` names: a word of the
/// query equal to one of a speaker's capitalised words (any case, three
/// letters or more), or a capitalised word of three letters or more that
/// begins one ("Mel" for "Melanie"). Speakers named by common words only
/// ("user", "assistant") are never named.
pub fn named_speakers<'a>(query: &str, speakers: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let asked: Vec<&str> = crate::text::word_runs(query)
        .map(|w| w.strip_suffix("'s").or_else(|| w.strip_suffix("’s")).unwrap_or(w))
        .filter(|w| w.chars().count() >= 3)
        .collect();
    let mut out: Vec<&str> = Vec::new();
    for s in speakers {
        let hit = crate::text::word_runs(s).any(|sw| {
            sw.starts_with(char::is_uppercase)
                && asked.iter().any(|&q| {
                    (sw.chars().count() >= 3 && q.eq_ignore_ascii_case(sw))
                        || (q.starts_with(char::is_uppercase) && sw.len() > q.len() && sw.starts_with(q))
                })
        });
        if hit && !out.contains(&s) {
            out.push(s);
        }
    }
    out
}

/// Whether `query` asks when something happened or will: it begins with
/// `when` or holds `when did`/`when is`/…, `what date`, `what day`, `what
/// year`, `what month`, `which year`, `which month`, `which day`, `what
/// time` or `how long ago`.
pub fn asks_when(query: &str) -> bool {
    let w: Vec<String> = crate::text::words(query).collect();
    let at = |i: usize, a: &str| w.get(i).is_some_and(|x| x == a);
    (0..w.len()).any(|i| match w[i].as_str() {
        "when" => {
            i == 0
                || ["did", "was", "is", "were", "does", "do", "will", "has", "had", "are"]
                    .iter()
                    .any(|v| at(i + 1, v))
        }
        "what" | "which" => ["date", "day", "year", "month", "time", "week", "weekend"]
            .iter()
            .any(|u| at(i + 1, u)),
        "how" => at(i + 1, "long") && at(i + 2, "ago"),
        _ => false,
    })
}

/// How much two items' words overlap, in [0, 1]: shared content words
/// over the geometric mean of their counts (0 when either has none).
fn overlap(a: &std::collections::BTreeSet<String>, b: &std::collections::BTreeSet<String>) -> f32 {
    if a.is_empty() || b.is_empty() {
        return 0.0;
    }
    let (small, large) = if a.len() <= b.len() { (a, b) } else { (b, a) };
    let shared = small.iter().filter(|w| large.contains(*w)).count();
    (shared as f64 / ((a.len() * b.len()) as f64).sqrt()) as f32
}

/// `ranked` (best first) re-ordered by [`ContextConfig`] for `query` and
/// cut to `k`: the first [`RERANK_MAX`] items are re-ordered, any after
/// them keep their place. Items without a session ([`Retrieved::session`])
/// get no session or neighbour score, items without speakers no speaker
/// score. Ties keep the pipeline's order.
pub fn rerank(mut ranked: Vec<Retrieved>, cfg: &ContextConfig, k: usize, query: &str) -> Vec<Retrieved> {
    if cfg.is_off() || ranked.len() < 2 {
        ranked.truncate(k);
        return ranked;
    }
    let tail = ranked.split_off(ranked.len().min(RERANK_MAX));
    let top = ranked.iter().map(|r| r.score).fold(0.0f32, f32::max);
    let norm = |s: f32| {
        if top > 0.0 && s.is_finite() {
            (s / top).max(0.0)
        } else {
            0.0
        }
    };
    // Best and second-best normalised score per session.
    let mut best: HashMap<&str, (f32, f32)> = HashMap::new();
    for r in &ranked {
        if let Some(s) = r.session.as_deref() {
            let e = best.entry(s).or_insert((0.0, 0.0));
            let v = norm(r.score);
            if v > e.0 {
                *e = (v, e.0);
            } else if v > e.1 {
                e.1 = v;
            }
        }
    }
    // Items by session: neighbours are looked for within one.
    let mut members: HashMap<&str, Vec<usize>> = HashMap::new();
    for (i, r) in ranked.iter().enumerate() {
        if let Some(s) = r.session.as_deref() {
            members.entry(s).or_default().push(i);
        }
    }
    let adjacent = |a: &Retrieved, b: &Retrieved| match (a.span, b.span) {
        (Some((a0, a1)), Some((b0, b1))) => a0 <= b1 + 1 && b0 <= a1 + 1,
        _ => false,
    };
    // The speakers the question names, unless it names every one of the
    // list's (then the boost would lift every item alike).
    let named: Vec<String> = if cfg.speaker > 0.0 {
        let mut all: Vec<&str> = ranked
            .iter()
            .flat_map(|r| r.speakers.iter().map(String::as_str))
            .collect();
        all.sort_unstable();
        all.dedup();
        let named = named_speakers(query, all.iter().copied());
        if named.len() < all.len() {
            named.into_iter().map(str::to_string).collect()
        } else {
            Vec::new()
        }
    } else {
        Vec::new()
    };
    let speaker_score = |r: &Retrieved| -> f32 {
        if named.is_empty() {
            0.0
        } else if r.speakers.iter().any(|s| named.contains(s)) {
            1.0
        } else if !named_speakers(&r.item.text, named.iter().map(String::as_str)).is_empty() {
            0.5
        } else {
            0.0
        }
    };
    let when = cfg.temporal > 0.0 && asks_when(query);
    let dated = |r: &Retrieved| -> f32 {
        let at = r.item.said_at.unwrap_or(0);
        if when && !crate::dates::find(&r.item.text, at).is_empty() {
            1.0
        } else {
            0.0
        }
    };
    let scored: Vec<f32> = ranked
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let own = norm(r.score);
            let session = r
                .session
                .as_deref()
                .and_then(|s| best.get(s))
                .map_or(0.0, |&(b1, b2)| b1 + 0.5 * b2);
            let same = r.session.as_deref().and_then(|s| members.get(s));
            let neighbour = match same {
                Some(js) if cfg.neighbour > 0.0 => js
                    .iter()
                    .filter(|&&j| j != i && adjacent(r, &ranked[j]))
                    .map(|&j| norm(ranked[j].score))
                    .fold(0.0f32, f32::max),
                _ => 0.0,
            };
            own + cfg.session * session
                + cfg.neighbour * neighbour
                + cfg.speaker * speaker_score(r)
                + cfg.temporal * dated(r)
        })
        .collect();
    let mut order: Vec<usize> = (0..ranked.len()).collect();
    order.sort_by(|&a, &b| scored[b].total_cmp(&scored[a]).then(a.cmp(&b)));
    if cfg.diversity > 0.0 {
        order = diversify(&ranked, &scored, order, cfg.diversity, k);
    }
    let mut slots: Vec<Option<Retrieved>> = ranked.into_iter().map(Some).collect();
    order
        .into_iter()
        .filter_map(|i| slots.get_mut(i).and_then(Option::take))
        .chain(tail)
        .take(k)
        .collect()
}

/// The first `k` of `order` (indexes into `ranked`, best `scored` first)
/// chosen one by one: each time the one whose score less `lambda` × its
/// [`overlap`] with the closest already chosen is highest (ties: earlier
/// in `order`); the rest follow in `order`.
fn diversify(ranked: &[Retrieved], scored: &[f32], order: Vec<usize>, lambda: f32, k: usize) -> Vec<usize> {
    let words: Vec<std::collections::BTreeSet<String>> = ranked
        .iter()
        .map(|r| crate::text::content_words(&r.item.text))
        .collect();
    let mut left = order;
    let mut closest = vec![0.0f32; ranked.len()];
    let mut out = Vec::with_capacity(left.len());
    while !left.is_empty() && out.len() < k {
        let (pos, _) = left
            .iter()
            .enumerate()
            .map(|(p, &i)| (p, scored[i] - lambda * closest[i]))
            .fold((0, f32::NEG_INFINITY), |b, c| if c.1 > b.1 { c } else { b });
        let pick = left.remove(pos);
        for &i in &left {
            closest[i] = closest[i].max(overlap(&words[i], &words[pick]));
        }
        out.push(pick);
    }
    out.extend(left);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::Item;

    fn hit(id: i64, score: f32, session: Option<&str>, seq: i64) -> Retrieved {
        Retrieved {
            item: Item {
                id,
                user: "u".into(),
                pipeline: "rag".into(),
                kind: "turn".into(),
                text: format!("turn {id}"),
                sources: vec![id],
                said_at: None,
                refers_to: None,
                turn: 0,
                parent: None,
                created_at: 0,
            },
            score,
            source_refs: Vec::new(),
            session: session.map(str::to_string),
            span: Some((seq, seq)),
            speakers: Vec::new(),
        }
    }

    fn ids(r: &[Retrieved]) -> Vec<i64> {
        r.iter().map(|r| r.item.id).collect()
    }

    #[test]
    fn off_keeps_the_order_and_cuts() {
        let list = vec![
            hit(1, 0.9, Some("a"), 1),
            hit(2, 0.8, Some("b"), 5),
            hit(3, 0.7, Some("b"), 6),
        ];
        let got = rerank(list, &ContextConfig::off(), 2, "");
        assert_eq!(ids(&got), [1, 2]);
        assert_eq!(ContextConfig::off().depth(10), 10);
        assert_eq!(ContextConfig::default().depth(10), 20);
    }

    #[test]
    fn a_strong_session_lifts_its_items() {
        // Session b holds two good hits; a holds one slightly better.
        let list = vec![
            hit(1, 0.90, Some("a"), 1),
            hit(2, 0.85, Some("b"), 10),
            hit(3, 0.84, Some("b"), 20),
            hit(4, 0.50, Some("c"), 30),
        ];
        let cfg = ContextConfig {
            session: 0.5,
            neighbour: 0.0,
            speaker: 0.0,
            temporal: 0.0,
            diversity: 0.0,
            expand: 0,
            pool: 2.0,
            snippets: None,
            feedback: None,
        };
        assert_eq!(ids(&rerank(list, &cfg, 4, "")), [2, 3, 1, 4]);
        assert_eq!(cfg.depth(10), 20);
    }

    #[test]
    fn a_neighbour_of_a_good_hit_moves_up_and_other_sessions_do_not_count() {
        let list = vec![
            hit(1, 1.0, Some("a"), 10),
            hit(2, 0.6, Some("b"), 40),
            // Adjacent to 1 in session a.
            hit(3, 0.5, Some("a"), 11),
            // Adjacent by position but in another session.
            hit(4, 0.55, Some("c"), 9),
            // No session: never lifted.
            hit(5, 0.52, None, 11),
        ];
        let cfg = ContextConfig {
            session: 0.0,
            neighbour: 0.3,
            speaker: 0.0,
            temporal: 0.0,
            diversity: 0.0,
            expand: 0,
            pool: 1.0,
            snippets: None,
            feedback: None,
        };
        assert_eq!(ids(&rerank(list, &cfg, 3, "")), [1, 3, 2]);
    }

    #[test]
    fn a_long_list_is_re_ordered_only_at_its_head() {
        // One session of consecutive turns, more than RERANK_MAX of them:
        // the head is re-ranked, the rest keeps its order after it.
        let n = RERANK_MAX + 500;
        let list: Vec<Retrieved> = (0..n)
            .map(|i| hit(i as i64, 1.0 - i as f32 / n as f32, Some("s"), ((i * 7919) % n) as i64))
            .collect();
        let cfg = ContextConfig::default();
        let got = rerank(list, &cfg, n, "");
        assert_eq!(got.len(), n);
        let tail: Vec<i64> = got[RERANK_MAX..].iter().map(|r| r.item.id).collect();
        let want: Vec<i64> = (RERANK_MAX as i64..n as i64).collect();
        assert_eq!(tail, want);
        let mut head: Vec<i64> = got[..RERANK_MAX].iter().map(|r| r.item.id).collect();
        head.sort_unstable();
        assert_eq!(head, (0..RERANK_MAX as i64).collect::<Vec<_>>());
    }

    fn only(f: impl FnOnce(&mut ContextConfig)) -> ContextConfig {
        let mut c = ContextConfig::off();
        f(&mut c);
        c
    }

    fn said(mut r: Retrieved, by: &str, text: &str) -> Retrieved {
        r.speakers = vec![by.to_string()];
        r.item.text = text.to_string();
        r
    }

    #[test]
    fn speakers_are_named_by_name_or_capitalised_prefix() {
        let all = ["Caroline", "Melanie", "user", "Jon Smith"];
        assert_eq!(named_speakers("What did Caroline paint?", all), ["Caroline"]);
        assert_eq!(named_speakers("what did caroline's kids like", all), ["Caroline"]);
        assert_eq!(
            named_speakers("How long have Mel and her husband been married?", all),
            ["Melanie"]
        );
        // Lower-case prefixes, short words and common-word speakers are not names.
        assert!(named_speakers("mel went there", all).is_empty());
        assert!(named_speakers("what did the user say", all).is_empty());
        assert!(named_speakers("Is Ca here?", all).is_empty());
        assert_eq!(named_speakers("Where does Smith work?", all), ["Jon Smith"]);
        assert_eq!(
            named_speakers("Did Jon and Melanie meet?", all),
            ["Melanie", "Jon Smith"]
        );
    }

    #[test]
    fn when_questions_are_told_apart() {
        for q in [
            "When did Caroline go to the support group?",
            "In which year did she move?",
            "What date is the concert?",
            "How long ago was her birthday?",
            "So when is the party?",
        ] {
            assert!(asks_when(q), "{q}");
        }
        for q in [
            "What did she say when she left?",
            "How long has she painted?",
            "Which books did she read?",
            "",
        ] {
            assert!(!asks_when(q), "{q}");
        }
    }

    #[test]
    fn a_named_speaker_lifts_what_they_said_then_what_mentions_them() {
        let list = vec![
            said(hit(1, 1.0, Some("a"), 1), "Jon", "Jon: I went to Rome."),
            said(hit(2, 0.9, Some("a"), 5), "Gina", "Gina: Jon told me."),
            said(hit(3, 0.8, Some("a"), 9), "Gina", "Gina: I opened my store."),
            said(hit(4, 0.7, Some("a"), 13), "Jon", "Jon: The studio opens tomorrow."),
        ];
        let cfg = only(|c| c.speaker = 0.4);
        // Gina is named: her turns first, then the turn that mentions her.
        assert_eq!(ids(&rerank(list.clone(), &cfg, 4, "What did Gina open?")), [2, 3, 1, 4]);
        // Both named, or nobody: the order stays.
        assert_eq!(
            ids(&rerank(list.clone(), &cfg, 4, "Did Gina and Jon meet?")),
            [1, 2, 3, 4]
        );
        assert_eq!(ids(&rerank(list.clone(), &cfg, 4, "What opened?")), [1, 2, 3, 4]);
        // Jon named: Gina's turn 2 mentions him and keeps its place (half
        // the lift, 0.9 + 0.125 > 0.7 + 0.25); 4 passes 3.
        let got = rerank(list, &only(|c| c.speaker = 0.25), 4, "Where did Jon travel?");
        assert_eq!(ids(&got), [1, 2, 4, 3]);
    }

    #[test]
    fn a_when_question_lifts_dated_items_only() {
        let mut list = vec![
            said(hit(1, 1.0, Some("a"), 1), "A", "A: I love pottery."),
            said(hit(2, 0.8, Some("a"), 5), "A", "A: I took a pottery class yesterday."),
            said(hit(3, 0.7, Some("a"), 9), "A", "A: Pottery is fun."),
        ];
        for r in &mut list {
            r.item.said_at = Some(1_683_554_160);
        }
        let cfg = only(|c| c.temporal = 0.3);
        assert_eq!(
            ids(&rerank(list.clone(), &cfg, 3, "When did A take a pottery class?")),
            [2, 1, 3]
        );
        assert_eq!(ids(&rerank(list, &cfg, 3, "What does A love?")), [1, 2, 3]);
    }

    #[test]
    fn diversity_passes_over_repeats_of_what_is_chosen() {
        let list = vec![
            said(hit(1, 1.0, None, 1), "A", "camping trip with the kids at the lake"),
            said(
                hit(2, 0.95, None, 2),
                "A",
                "camping trip with the kids at the lake again",
            ),
            said(hit(3, 0.9, None, 3), "A", "pottery class on saturday morning"),
        ];
        assert_eq!(
            ids(&rerank(list.clone(), &only(|c| c.diversity = 0.5), 3, "")),
            [1, 3, 2]
        );
        assert_eq!(ids(&rerank(list.clone(), &only(|c| c.diversity = 0.5), 2, "")), [1, 3]);
        // A small weight does not outweigh the score gap.
        assert_eq!(ids(&rerank(list, &only(|c| c.diversity = 0.01), 3, "")), [1, 2, 3]);
    }

    #[test]
    fn settings_are_checked() {
        let mut c = ContextConfig::default();
        c.set("context.session", "0.25").expect("valid");
        c.set("context.pool", "3").expect("valid");
        assert_eq!((c.session, c.pool), (0.25, 3.0));
        assert!(c.set("context.session", "NaN").is_err());
        assert!(c.set("context.neighbour", "-1").is_err());
        assert!(c.set("context.pool", "0.5").is_err());
        assert!(c.set("context.other", "1").is_err());
        for key in ["context.speaker", "context.temporal", "context.diversity"] {
            c.set(key, "0.5").expect("valid");
            assert!(c.set(key, "-0.1").is_err() && c.set(key, "11").is_err() && c.set(key, "x").is_err());
        }
        assert_eq!((c.speaker, c.temporal, c.diversity), (0.5, 0.5, 0.5));
        c.set("context.expand", "10").expect("valid");
        assert_eq!(c.expand, 10);
        for bad in ["-1", "1001", "1.5", "x"] {
            assert!(c.set("context.expand", bad).is_err(), "{bad}");
        }
        assert!(!only(|c| c.diversity = 0.1).is_off() && ContextConfig::off().is_off());
        c.set("context.snippets", "5").expect("valid");
        assert_eq!(c.snippets, Some(5));
        c.set("context.snippets", "off").expect("valid");
        c.set("context.feedback", "3:10:0.3").expect("valid");
        assert_eq!(
            c.feedback,
            Some(dentate_core::Feedback {
                docs: 3,
                terms: 10,
                weight: 0.3
            })
        );
        for bad in ["3:10", "0:10:0.3", "3:10:0", "3:10:0.3:1", "a:b:c", "3:10:nan"] {
            assert!(c.set("context.feedback", bad).is_err(), "{bad}");
        }
        c.set("context.feedback", "off").expect("valid");
        assert_eq!(c.feedback, None);
        assert_eq!(c.snippets, None);
        assert!(c.set("context.snippets", "-1").is_err());
    }
}
