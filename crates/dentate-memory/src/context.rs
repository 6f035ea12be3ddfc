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

/// `ranked` (best first) re-ordered by [`ContextConfig`] and cut to `k`.
/// Items without a session ([`Retrieved::session`]) get no session or
/// neighbour score. Ties keep the pipeline's order.
pub fn rerank(ranked: Vec<Retrieved>, cfg: &ContextConfig, k: usize) -> Vec<Retrieved> {
    if cfg.is_off() || ranked.len() < 2 {
        let mut ranked = ranked;
        ranked.truncate(k);
        return ranked;
    }
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
    let adjacent = |a: &Retrieved, b: &Retrieved| match (a.session.as_deref(), b.session.as_deref(), a.span, b.span) {
        (Some(x), Some(y), Some((a0, a1)), Some((b0, b1))) => x == y && a0 <= b1 + 1 && b0 <= a1 + 1,
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
            let neighbour = if cfg.neighbour > 0.0 {
                ranked
                    .iter()
                    .enumerate()
                    .filter(|&(j, o)| j != i && adjacent(r, o))
                    .map(|(_, o)| norm(o.score))
                    .fold(0.0f32, f32::max)
            } else {
                0.0
            };
            (own + cfg.session * session + cfg.neighbour * neighbour, i)
        })
        .collect();
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(&b.1)));
    let mut slots: Vec<Option<Retrieved>> = ranked.into_iter().map(Some).collect();
    scored
        .into_iter()
        .take(k)
        .filter_map(|(_, i)| slots.get_mut(i).and_then(Option::take))
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
        };
        assert_eq!(ids(&rerank(list, &cfg, 3)), [1, 3, 2]);
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
        assert_eq!(c.snippets, None);
        assert!(c.set("context.snippets", "-1").is_err());
    }
}
