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
    let ranked = pipeline.retrieve(env, query, cfg.depth(k))?;
    let out = rerank(ranked, &cfg, k);
    let ids: Vec<i64> = out.iter().map(|r| r.item.id).collect();
    pipeline.mark_retrieved(env, &ids)?;
    Ok(out)
}

/// The most items [`rerank`] re-orders: the rest of a longer list (a
/// filtered search deepens it up to [`crate::MAX_SEARCH_DEPTH`]) follows
/// in the pipeline's order, so the work stays bounded (neighbours are
/// compared within a session, at worst every pair of this many).
pub const RERANK_MAX: usize = 2048;

/// `ranked` (best first) re-ordered by [`ContextConfig`] and cut to `k`:
/// the first [`RERANK_MAX`] items are re-ordered, any after them keep
/// their place. Items without a session ([`Retrieved::session`]) get no
/// session or neighbour score. Ties keep the pipeline's order.
pub fn rerank(mut ranked: Vec<Retrieved>, cfg: &ContextConfig, k: usize) -> Vec<Retrieved> {
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
    let mut scored: Vec<(f32, usize)> = ranked
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
            (own + cfg.session * session + cfg.neighbour * neighbour, i)
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut slots: Vec<Option<Retrieved>> = ranked.into_iter().map(Some).collect();
    scored
        .into_iter()
        .filter_map(|(_, i)| slots.get_mut(i).and_then(Option::take))
        .chain(tail)
        .take(k)
        .collect()
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
        let got = rerank(list, &ContextConfig::off(), 2);
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
            pool: 2.0,
            snippets: None,
            feedback: None,
        };
        assert_eq!(ids(&rerank(list, &cfg, 4)), [2, 3, 1, 4]);
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
            pool: 1.0,
            snippets: None,
            feedback: None,
        };
        assert_eq!(ids(&rerank(list, &cfg, 3)), [1, 3, 2]);
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
        let got = rerank(list, &cfg, n);
        assert_eq!(got.len(), n);
        let tail: Vec<i64> = got[RERANK_MAX..].iter().map(|r| r.item.id).collect();
        let want: Vec<i64> = (RERANK_MAX as i64..n as i64).collect();
        assert_eq!(tail, want);
        let mut head: Vec<i64> = got[..RERANK_MAX].iter().map(|r| r.item.id).collect();
        head.sort_unstable();
        assert_eq!(head, (0..RERANK_MAX as i64).collect::<Vec<_>>());
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
