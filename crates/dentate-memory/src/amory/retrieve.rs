//! Coherence retrieval (Amory §3.2, "Memory Retrieval"): pick the leaves
//! of the plot → sub-plot tree that a question needs, and the semantic
//! facts about the entities it names.
//!
//! With a model, the coherence prompt of Appendix A shows the question and
//! the tree (story headlines, owners, characters; numbered sub-plot
//! leaves) and asks for at most k leaves and the entities to look up in
//! the graph. Offline, a deterministic stand-in scores every leaf as
//!
//! `w_content · content + w_headline · headline + w_entity · entities`
//!
//! where `content` is the best retrieval score (with the configured
//! retriever, hybrid by default, min–max normalised over the hits) of the
//! leaf's fragments, `headline` the better of its narrative's headline and
//! characters and its sub-plot headline (same retriever, normalised), and
//! `entities` the fraction of the question's entities (capitalised names,
//! and known characters or graph entities it mentions) among the
//! narrative's characters. Facts are the triples one hop from those
//! entities, plus the facts the retriever finds, ranked by retrieval score
//! with a bonus for the hop. Weaker than the model: it matches words and
//! embeddings, not what the question needs ("the month after the
//! adoption"), so a leaf that answers in other words ranks low.

use super::tree::{Leaf, Tree};
use super::*;
use crate::graph::entity_key;
use crate::llm::{Call, Llm, LlmError, ask_json, schema};
use crate::text::words;
use serde_json::Value;
use std::collections::{BTreeSet, HashMap};

/// How the offline stand-in weighs its signals.
#[derive(Debug, Clone, PartialEq)]
pub struct RetrievalConfig {
    /// Weight of the best fragment score of a leaf (default 1.0).
    pub content: f32,
    /// Weight of the headline and characters score (default 0.2: offline
    /// headlines are keywords, a weaker signal than the fragments
    /// themselves; on `locomo-dev.json` with the hashing embedder a weight
    /// of 0.5 lost 2–3 points of evidence recall, see BENCHMARKS.md).
    pub headline: f32,
    /// Weight of the question's entities among the characters (default
    /// 0.1).
    pub entity: f32,
    /// Added to a fact one hop from a question entity (default 0.5).
    pub hop_bonus: f32,
}

impl Default for RetrievalConfig {
    fn default() -> Self {
        RetrievalConfig {
            content: 1.0,
            headline: 0.2,
            entity: 0.1,
            hop_bonus: 0.5,
        }
    }
}

/// Scores of search hits min–max normalised to `[0, 1]` (a single hit, or
/// hits all equal, score 1).
pub fn normalise(hits: &[(i64, f32)]) -> HashMap<i64, f32> {
    let (lo, hi) = hits
        .iter()
        .fold((f32::INFINITY, f32::NEG_INFINITY), |(lo, hi), &(_, s)| {
            (lo.min(s), hi.max(s))
        });
    hits.iter()
        .map(|&(id, s)| (id, if hi > lo { (s - lo) / (hi - lo) } else { 1.0 }))
        .collect()
}

/// The entities a question names: its capitalised names, and every known
/// entity (lower-case keys, e.g. characters and graph subjects) whose
/// words occur in it in order. Lower-case keys, each once.
pub fn question_entities(question: &str, known: &[String]) -> Vec<String> {
    let mut out: Vec<String> = super::binding::names_in(&format!("x {question}"))
        .into_iter()
        .map(|n| entity_key(&n))
        .collect();
    let q: Vec<String> = words(question).collect();
    for k in known {
        let kw: Vec<String> = words(k).collect();
        if kw.is_empty() || out.contains(k) {
            continue;
        }
        if q.windows(kw.len()).any(|w| w == kw.as_slice()) {
            out.push(k.clone());
        }
    }
    out
}

/// Per-leaf scores, in the order of `leaves`.
pub fn score_leaves(
    tree: &Tree,
    leaves: &[Leaf],
    content: &HashMap<i64, f32>,
    narratives: &HashMap<i64, f32>,
    subplots: &HashMap<i64, f32>,
    entities: &[String],
    w: &RetrievalConfig,
) -> Vec<f32> {
    leaves
        .iter()
        .map(|leaf| {
            let nar = &tree.narratives[leaf.narrative];
            let c = leaf
                .fragments
                .iter()
                .filter_map(|f| content.get(f))
                .fold(0.0f32, |a, &b| a.max(b));
            let h = narratives
                .get(&nar.id)
                .copied()
                .unwrap_or(0.0)
                .max(leaf.subplot.and_then(|s| subplots.get(&s).copied()).unwrap_or(0.0));
            let e = if entities.is_empty() {
                0.0
            } else {
                let chars: BTreeSet<String> = nar.head.characters.iter().map(|c| entity_key(c)).collect();
                entities.iter().filter(|e| chars.contains(*e)).count() as f32 / entities.len() as f32
            };
            w.content * c + w.headline * h + w.entity * e
        })
        .collect()
}

const RETRIEVE_PROMPT: &str = include_str!("../prompts/amory_retrieve.txt");

/// The tree as the coherence prompt shows it: each story with its
/// numbered leaves.
fn tree_prompt(tree: &Tree, leaves: &[Leaf]) -> String {
    let mut out = String::new();
    let mut last: Option<usize> = None;
    for (i, leaf) in leaves.iter().enumerate() {
        let nar = &tree.narratives[leaf.narrative];
        if last != Some(leaf.narrative) {
            out.push_str(&format!("Story: {}\n", nar.head.line()));
            last = Some(leaf.narrative);
        }
        let label = match leaf.subplot {
            Some(id) => nar
                .subplots
                .iter()
                .find(|s| s.id == id)
                .map_or_else(String::new, |s| format!("sub-story: {}", s.headline)),
            None => {
                let first = leaf
                    .fragments
                    .first()
                    .and_then(|f| tree.frags.get(f))
                    .map(|f| f.text.split_whitespace().take(12).collect::<Vec<_>>().join(" "))
                    .unwrap_or_default();
                format!("recent items, not yet summarized, starting: {first}")
            }
        };
        out.push_str(&format!("  [{}] {label} ({} items)\n", i + 1, leaf.fragments.len()));
    }
    out
}

/// Coherence retrieval with a model: at most `k` leaf indices (0-based,
/// most useful first) and the entities to look up.
pub fn llm_choose(
    llm: &dyn Llm,
    question: &str,
    tree: &Tree,
    leaves: &[Leaf],
    k: usize,
) -> Result<(Vec<usize>, Vec<String>), LlmError> {
    let system = RETRIEVE_PROMPT.replace("{k}", &k.to_string());
    let user = format!("Question: {question}\n\nStories:\n{}", tree_prompt(tree, leaves));
    let n = leaves.len();
    let schema = schema::object(
        &[
            ("choices", schema::array(schema::integer(1, n), Some(k.max(1)))),
            ("entities", schema::array(schema::short(), Some(8))),
        ],
        &["choices"],
    );
    ask_json(llm, &Call::json("amory_retrieve", &schema), &system, &user, |v| {
        parse(v, n, k)
    })
}

/// Checks `{"choices": [leaf numbers], "entities": [names]}`.
fn parse(v: &Value, n: usize, k: usize) -> Result<(Vec<usize>, Vec<String>), String> {
    let choices = v
        .get("choices")
        .and_then(Value::as_array)
        .ok_or("`choices` must be a list")?;
    if choices.len() > k {
        return Err(format!("{} choices, at most {k} allowed", choices.len()));
    }
    let mut picked = Vec::with_capacity(choices.len());
    for c in choices {
        match c.as_u64() {
            Some(x) if (1..=n as u64).contains(&x) => {
                if !picked.contains(&(x as usize - 1)) {
                    picked.push(x as usize - 1);
                }
            }
            _ => return Err(format!("choice {c} is not a leaf number from 1 to {n}")),
        }
    }
    let entities = match v.get("entities") {
        None | Some(Value::Null) => Vec::new(),
        Some(Value::Array(a)) => a
            .iter()
            .map(|e| {
                e.as_str()
                    .map(entity_key)
                    .filter(|e| !e.is_empty())
                    .ok_or("`entities` must be a list of names".to_string())
            })
            .collect::<Result<_, _>>()?,
        Some(_) => return Err("`entities` must be a list of names".into()),
    };
    Ok((picked, entities))
}

/// Coherence retrieval (step 5): the leaves of the tree ranked for a
/// question.
impl Amory {
    /// The ranked items for `query`: leaves (each under its story and
    /// sub-plot headers, its fragments best first) interleaved one to one
    /// with facts not already said by the fragments above; at most
    /// `leaves` leaves and `facts` facts when given; at most `k` items.
    pub(super) fn rank(
        &mut self,
        env: &mut Env<'_>,
        query: &str,
        k: usize,
        max_leaves: Option<usize>,
        max_facts: Option<usize>,
    ) -> Result<Vec<Retrieved>> {
        if query.trim().is_empty() {
            return Err(MemoryError::Invalid("the query is empty".into()));
        }
        self.load_tree(env)?;
        let window = self.cfg.window.max(1);
        let leaves = self.tree()?.leaves(window);
        let q = query_vector(env, query)?;
        let search = |v: &mut Vectors, env: &Env<'_>, depth: usize| -> Result<HashMap<i64, f32>> {
            let n = v.len(env)?;
            if n == 0 {
                return Ok(HashMap::new());
            }
            Ok(retrieve::normalise(&v.search_with(
                env,
                query,
                q.as_deref(),
                depth.min(n),
            )?))
        };
        let content = search(&mut self.fragments, env, k.saturating_mul(4).max(64))?;
        let narr = search(&mut self.narratives, env, usize::MAX)?;
        let subs = search(&mut self.subplots, env, usize::MAX)?;
        let facts = search(&mut self.facts, env, k.saturating_mul(4).max(32))?;
        // Entities: capitalised names, characters and graph ends named.
        let triples = env.store.triples(env.user, self.name)?;
        let tree = self.tree()?;
        let mut known: Vec<String> = tree
            .narratives
            .iter()
            .flat_map(|n| n.head.characters.iter().map(|c| crate::graph::entity_key(c)))
            .chain(triples.iter().flat_map(|t| t.ends()))
            .collect();
        known.sort();
        known.dedup();
        let mut entities = retrieve::question_entities(query, &known);
        let scores = retrieve::score_leaves(tree, &leaves, &content, &narr, &subs, &entities, &self.cfg.retrieval);
        let mut order: Vec<usize> = (0..leaves.len()).collect();
        order.sort_by(|&a, &b| scores[b].total_cmp(&scores[a]).then(a.cmp(&b)));
        if let Some((chosen, named)) = roles(env.llm).choose(query, tree, &leaves, self.cfg.episodic_k.max(1))? {
            order.retain(|i| !chosen.contains(i));
            order.splice(0..0, chosen);
            for e in named {
                if !entities.contains(&e) {
                    entities.push(e);
                }
            }
        }
        if let Some(m) = max_leaves {
            order.truncate(m);
        }
        // Facts: one hop from the entities, and what the retriever found.
        let mut hop: HashSet<i64> = HashSet::new();
        for t in &triples {
            if t.ends().iter().any(|e| entities.contains(e)) {
                hop.insert(t.item_id);
            }
        }
        // A fact the retriever ranks last (normalised to 0) and no entity
        // reaches is not relevant.
        let mut fact_rank: Vec<(i64, f32)> = hop
            .iter()
            .map(|&id| {
                (
                    id,
                    facts.get(&id).copied().unwrap_or(0.0) + self.cfg.retrieval.hop_bonus,
                )
            })
            .chain(
                facts
                    .iter()
                    .filter(|(id, s)| !hop.contains(id) && **s > 0.0)
                    .map(|(&id, &s)| (id, s)),
            )
            .collect();
        fact_rank.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        if let Some(m) = max_facts {
            // Room for those skipped as redundant below.
            fact_rank.truncate(m.saturating_mul(4));
        }
        let fact_items = resolve(env, &fact_rank)?;
        let mut fact_iter = fact_items.into_iter();
        let tree = self.tree()?;
        let mut out: Vec<(i64, f32)> = Vec::new();
        let mut listed: HashSet<i64> = HashSet::new();
        let mut shown: HashSet<usize> = HashSet::new();
        let mut kept_facts: Vec<Retrieved> = Vec::new();
        let fact_cap = max_facts.unwrap_or(usize::MAX);
        let mut next_fact = |listed: &HashSet<i64>, kept: &mut Vec<Retrieved>| -> Option<(i64, f32)> {
            if kept.len() >= fact_cap {
                return None;
            }
            for f in fact_iter.by_ref() {
                if !f.item.sources.iter().all(|s| listed.contains(s)) {
                    let r = (f.item.id, f.score);
                    kept.push(f);
                    return Some(r);
                }
            }
            None
        };
        for &li in &order {
            if out.len() >= k {
                break;
            }
            let leaf = &leaves[li];
            let score = scores[li];
            if shown.insert(leaf.narrative) {
                out.push((tree.narratives[leaf.narrative].id, score));
            }
            if let Some(s) = leaf.subplot {
                out.push((s, score));
            }
            let mut frags = leaf.fragments.clone();
            frags.sort_by(|a, b| {
                let (sa, sb) = (
                    content.get(a).copied().unwrap_or(0.0),
                    content.get(b).copied().unwrap_or(0.0),
                );
                sb.total_cmp(&sa).then(a.cmp(b))
            });
            for f in frags {
                out.push((f, score));
                if let Some(fr) = tree.frags.get(&f) {
                    listed.extend(fr.sources.iter().copied());
                }
            }
            if let Some(f) = next_fact(&listed, &mut kept_facts) {
                out.push(f);
            }
        }
        while out.len() < k {
            match next_fact(&listed, &mut kept_facts) {
                Some(f) => out.push(f),
                None => break,
            }
        }
        out.truncate(k);
        resolve(env, &out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn questions_name_entities() {
        let known = vec!["pixel".to_string(), "blue bicycle".to_string(), "ann".to_string()];
        assert_eq!(
            question_entities("What did Caroline say about the blue bicycle?", &known),
            ["caroline", "blue bicycle"]
        );
        assert_eq!(question_entities("Ann's cat: is pixel grey?", &known), ["ann", "pixel"]);
        assert!(question_entities("what happened?", &known).is_empty());
    }

    #[test]
    fn normalisation_and_choices() {
        let n = normalise(&[(1, 0.5), (2, 0.25), (3, 0.0)]);
        assert_eq!((n[&1], n[&2], n[&3]), (1.0, 0.5, 0.0));
        assert_eq!(normalise(&[(4, -0.2)])[&4], 1.0);
        assert_eq!(
            parse(&json!({"choices": [2, 1, 2], "entities": ["The Bicycle"]}), 3, 3).unwrap(),
            (vec![1, 0], vec!["bicycle".to_string()])
        );
        assert_eq!(parse(&json!({"choices": []}), 3, 2).unwrap(), (vec![], vec![]));
        for bad in [
            json!({"choices": [1, 2, 3]}),
            json!({"choices": [4]}),
            json!({"choices": ["1"]}),
            json!({"choices": [1], "entities": "Ann"}),
            json!({"leaves": [1]}),
        ] {
            assert!(parse(&bad, 3, 2).is_err(), "{bad}");
        }
    }
}
