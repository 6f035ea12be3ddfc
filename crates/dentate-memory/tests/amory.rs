//! Amory end to end: offline binding, consolidation triggers (inactive,
//! rapid, none), the triple table and its queries with provenance,
//! coherence retrieval, determinism, streaming across restarts, and every
//! LLM role against a scripted OpenAI-compatible server (good, malformed
//! and failing answers, resuming after a failure).

mod common;

use common::{answering_server, chat, chat_body, embedder, msg, stage_by, stages_of};
use dentate_embed::http::testing::{Reply, ScriptedServer};
use dentate_memory::amory::{Consolidation, FACT, FRAGMENT, NARRATIVE, SUBPLOT};
use dentate_memory::{AmoryConfig, Item, Llm, Memory, MemoryError, NewMessage, PipelineKind, Store};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::path::Path;
use std::sync::Arc;

/// Two sessions, three stories told in turns: Ann's cat, Bob's marathon,
/// Ann's sister; the cat comes back in session 2.
fn talk() -> Vec<NewMessage> {
    vec![
        msg(1, 1, "Ann", "I adopted a grey cat called Pixel from the shelter."),
        msg(1, 2, "Bob", "How is Pixel the grey cat settling in at home?"),
        msg(1, 3, "Ann", "Pixel the grey cat hides under the sofa and loves tuna."),
        msg(1, 4, "Bob", "I am training for the Berlin marathon in September."),
        msg(1, 5, "Ann", "How far do you run for the Berlin marathon each week?"),
        msg(1, 6, "Bob", "I run forty kilometres a week for the Berlin marathon."),
        msg(2, 1, "Ann", "My sister Clara is an architect in Lisbon."),
        msg(2, 2, "Bob", "Does your sister Clara enjoy the architecture of Lisbon?"),
        msg(
            2,
            3,
            "Ann",
            "Pixel the grey cat had a vet checkup for the shelter vaccine.",
        ),
        msg(2, 4, "Bob", "I hope Pixel the grey cat liked the vet."),
        msg(
            2,
            5,
            "Bob",
            "The Berlin marathon is in two weeks, my training peaks now.",
        ),
        msg(2, 6, "Ann", "Good luck with the Berlin marathon training!"),
    ]
}

fn config(consolidation: Consolidation, init_turns: usize) -> AmoryConfig {
    AmoryConfig {
        consolidation,
        init_turns,
        ..AmoryConfig::default()
    }
}

fn open(dir: &Path, llm: Option<Arc<dyn Llm>>, cfg: AmoryConfig) -> Memory {
    Memory::open(dir, PipelineKind::Amory(cfg), embedder(), llm).unwrap()
}

fn items(dir: &Path, pipeline: &str, kind: &str) -> Vec<Item> {
    Store::open(dir).unwrap().items("ann", pipeline, Some(kind)).unwrap()
}

/// Every item's kind, text and source refs, and every triple, in order.
fn snapshot(dir: &Path, pipeline: &str) -> Vec<String> {
    let store = Store::open(dir).unwrap();
    let mut out: Vec<String> = store
        .items("ann", pipeline, None)
        .unwrap()
        .into_iter()
        .map(|it| {
            let refs = store.source_refs(&it.sources).unwrap();
            format!("{} {:?} {:?} {:?} {}", it.kind, it.text, refs, it.parent, it.turn)
        })
        .collect();
    for t in store.triples("ann", pipeline).unwrap() {
        out.push(format!(
            "triple {} | {} | {} {:?}",
            t.subject, t.predicate, t.object, t.sources
        ));
    }
    out
}

/// The tree is well formed: every fragment hangs under a sub-plot or a
/// narrative of the pipeline, every sub-plot under a narrative, every
/// fact under a sub-plot; every source is a real message of the user; a
/// sub-plot cites exactly the messages of its fragments.
fn check_tree(dir: &Path, pipeline: &str) {
    let store = Store::open(dir).unwrap();
    let narr: Vec<Item> = items(dir, pipeline, NARRATIVE);
    let subs: Vec<Item> = items(dir, pipeline, SUBPLOT);
    let frags: Vec<Item> = items(dir, pipeline, FRAGMENT);
    let facts: Vec<Item> = items(dir, pipeline, FACT);
    let is = |set: &[Item], id: Option<i64>| set.iter().any(|x| Some(x.id) == id);
    for it in narr.iter().chain(&subs).chain(&frags).chain(&facts) {
        assert!(!it.sources.is_empty(), "{it:?}");
        let msgs = store.messages(&it.sources).unwrap();
        assert_eq!(msgs.len(), it.sources.len(), "sources are real messages: {it:?}");
        assert!(msgs.iter().all(|m| m.user == "ann"));
    }
    for f in &frags {
        assert!(
            is(&subs, f.parent) || is(&narr, f.parent),
            "fragment without a parent: {f:?}"
        );
        assert_eq!(f.sources.len(), 1, "a fragment cites its one message: {f:?}");
    }
    for s in &subs {
        assert!(is(&narr, s.parent), "{s:?}");
        let mut mine: Vec<i64> = frags
            .iter()
            .filter(|f| f.parent == Some(s.id))
            .flat_map(|f| f.sources.clone())
            .collect();
        mine.sort_unstable();
        mine.dedup();
        assert_eq!(mine, s.sources, "a sub-plot cites its fragments' messages: {s:?}");
    }
    for f in &facts {
        let sub = subs
            .iter()
            .find(|s| Some(s.id) == f.parent)
            .expect("a fact hangs under a sub-plot");
        assert!(f.sources.iter().all(|m| sub.sources.contains(m)), "{f:?}");
    }
    let triples = store.triples("ann", pipeline).unwrap();
    let fact_ids: BTreeSet<i64> = facts.iter().map(|f| f.id).collect();
    let triple_ids: BTreeSet<i64> = triples.iter().map(|t| t.item_id).collect();
    assert_eq!(fact_ids, triple_ids, "one triple per fact item");
}

#[test]
fn offline_binds_consolidates_semanticizes_and_answers() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), None, config(Consolidation::Inactive, 4));
    let r = m.ingest("ann", &talk()).unwrap();
    assert_eq!(r.messages, 12);
    m.flush("ann").unwrap();
    check_tree(dir.path(), "amory");
    let narr = items(dir.path(), "amory", NARRATIVE);
    let frags = items(dir.path(), "amory", FRAGMENT);
    // Three stories: the cat, the marathon, the sister.
    assert_eq!(narr.len(), 3, "{narr:#?}");
    let story_of = |needle: &str| -> i64 {
        let f = frags.iter().find(|f| f.text.contains(needle)).expect(needle);
        let subs = items(dir.path(), "amory", SUBPLOT);
        subs.iter()
            .find(|s| Some(s.id) == f.parent)
            .and_then(|s| s.parent)
            .unwrap()
    };
    let cat = story_of("adopted a grey cat");
    assert_eq!(story_of("vet checkup"), cat, "the cat story continues in session 2");
    assert_eq!(story_of("forty kilometres"), story_of("two weeks"));
    assert_ne!(story_of("Clara is an architect"), cat);
    // Flushing closed every narrative: everything is consolidated.
    let subs = items(dir.path(), "amory", SUBPLOT);
    assert!(frags.iter().all(|f| subs.iter().any(|s| Some(s.id) == f.parent)));
    // The semantic graph holds the possessive and copular facts.
    let store = Store::open(dir.path()).unwrap();
    let clara = store.triples_about("ann", "amory", "Clara").unwrap();
    let texts: Vec<String> = clara.iter().map(|t| t.text()).collect();
    assert!(texts.contains(&"Ann's sister is Clara".to_string()), "{texts:?}");
    // Provenance to the real message.
    let sister = clara.iter().find(|t| t.predicate.contains("sister")).unwrap();
    assert_eq!(store.source_refs(&sister.sources).unwrap(), ["D2:1"]);
    // Retrieval: the sister question finds the story, its fragment and a
    // fact with the right provenance; the story header comes first.
    let hits = m.retrieve("ann", "What does Clara do in Lisbon?", 12).unwrap();
    assert_eq!(hits[0].item.kind, NARRATIVE, "{hits:#?}");
    assert!(
        hits.iter()
            .any(|h| h.item.kind == FRAGMENT && h.source_refs == ["D2:1"] && h.item.text.contains("architect"))
    );
    let c = m.compose("ann", "Which city does Clara live in?", 3500).unwrap();
    assert!(
        c.prompt.contains("Lisbon") && c.prompt.contains("Story: ") && c.tokens <= 3500,
        "{}",
        c.prompt
    );
    assert!(c.prompt.contains("[3 May 2023]"), "fragments are dated: {}", c.prompt);
    // The prompt holds at most two leaves (the paper's k).
    assert!(c.prompt.matches("Sub-plot").count() <= 2, "{}", c.prompt);
    let small = m.compose("ann", "Which city does Clara live in?", 40).unwrap();
    assert!(small.tokens <= 40);
    // Flushing again does nothing.
    assert_eq!(m.flush("ann").unwrap().items, 0);
}

/// Per sub-plot: `(turn it was made, turns of its fragments, turns of
/// every fragment of its narrative)`.
fn consolidations(dir: &Path, pipeline: &str) -> Vec<(i64, Vec<i64>, Vec<i64>)> {
    let frags = items(dir, pipeline, FRAGMENT);
    let subs = items(dir, pipeline, SUBPLOT);
    let narrative_of = |f: &Item| -> Option<i64> {
        subs.iter()
            .find(|s| Some(s.id) == f.parent)
            .map_or(f.parent, |s| s.parent)
    };
    subs.iter()
        .map(|s| {
            let turns: Vec<i64> = frags
                .iter()
                .filter(|f| f.parent == Some(s.id))
                .map(|f| f.turn)
                .collect();
            let all: Vec<i64> = frags
                .iter()
                .filter(|f| narrative_of(f) == s.parent)
                .map(|f| f.turn)
                .collect();
            (s.turn, turns, all)
        })
        .collect()
}

#[test]
fn inactive_rapid_and_no_consolidation_trigger_when_they_should() {
    let run = |c: Consolidation| {
        let dir = tempfile::tempdir().unwrap();
        let mut m = open(dir.path(), None, config(c, 4));
        m.ingest("ann", &talk()).unwrap();
        let before_flush = consolidations(dir.path(), config(c, 4).name());
        m.flush("ann").unwrap();
        check_tree(dir.path(), config(c, 4).name());
        (dir, before_flush)
    };
    // Inactive: a narrative is consolidated in the first iteration that
    // binds nothing to it, never while it is still receiving fragments.
    let (dir, before) = run(Consolidation::Inactive);
    assert!(!before.is_empty(), "narratives went quiet mid-conversation");
    for (made, turns, all) in &before {
        let last = *turns.iter().max().unwrap();
        assert!(*made > last, "consolidated at {made}, after its last binding at {last}");
        assert!(!all.contains(made), "its narrative was active at {made}: {all:?}");
        // …and at the first quiet iteration: it was bound right before.
        assert!(all.contains(&(made - 1)) || *made == 1, "{made} {all:?}");
    }
    let subs = items(dir.path(), "amory", SUBPLOT);
    assert!(subs.len() >= 3, "{subs:#?}");
    // Rapid: every iteration consolidates what it bound, at once.
    let (dir, before) = run(Consolidation::Rapid);
    assert!(!before.is_empty());
    for (made, turns, _) in &before {
        assert!(
            turns.iter().all(|t| t == made),
            "rapid consolidates at binding time: {made} {turns:?}"
        );
    }
    let rapid_subs = items(dir.path(), "amory-rapid", SUBPLOT).len();
    assert!(
        rapid_subs > subs.len(),
        "rapid makes smaller sub-plots: {rapid_subs} vs {}",
        subs.len()
    );
    // None: no sub-plots, no facts, headlines as first written.
    let (dir, before) = run(Consolidation::None);
    assert!(before.is_empty());
    assert!(items(dir.path(), "amory-none", SUBPLOT).is_empty());
    assert!(items(dir.path(), "amory-none", FACT).is_empty());
    let mut m = open(dir.path(), None, config(Consolidation::None, 4));
    let hits = m.retrieve("ann", "What is the name of Ann's cat?", 5).unwrap();
    assert!(hits.iter().any(|h| h.item.text.contains("Pixel")), "{hits:#?}");
}

#[test]
fn triple_queries_return_the_facts_with_provenance() {
    let dir = tempfile::tempdir().unwrap();
    let msgs = vec![
        msg(1, 1, "Ann", "My sister Clara is an architect and she designs museums."),
        msg(1, 2, "Bob", "My favourite dish is the spicy lentil soup."),
        msg(1, 3, "Ann", "Ines is my cello teacher at the music school."),
        msg(1, 4, "Bob", "I have two daughters and a small garden."),
        msg(1, 5, "Ann", "Clara has a studio near the river in Lisbon."),
        msg(1, 6, "Bob", "The museum Clara designs is in Porto."),
    ];
    let mut m = open(dir.path(), None, config(Consolidation::Inactive, 2));
    m.ingest("ann", &msgs).unwrap();
    m.flush("ann").unwrap();
    check_tree(dir.path(), "amory");
    let store = Store::open(dir.path()).unwrap();
    let all: Vec<String> = store
        .triples("ann", "amory")
        .unwrap()
        .iter()
        .map(|t| t.text())
        .collect();
    let refs = |t: &dentate_memory::Triple| store.source_refs(&t.sources).unwrap();
    // By entity: subject or object, any case or article.
    let clara = store.triples_about("ann", "amory", "clara").unwrap();
    let mut about: Vec<(String, Vec<String>)> = clara.iter().map(|t| (t.text(), refs(t))).collect();
    about.sort();
    assert!(
        about.contains(&("Ann's sister is Clara".to_string(), vec!["D1:1".to_string()])),
        "{about:?} of {all:?}"
    );
    assert!(
        about.contains(&(
            "Clara has a studio near the river in Lisbon".to_string(),
            vec!["D1:5".to_string()]
        )),
        "{about:?} of {all:?}"
    );
    // By predicate, through its key.
    let teacher = store.triples_with_predicate("ann", "amory", "cello teacher").unwrap();
    assert_eq!(teacher.len(), 1, "{all:?}");
    assert_eq!(
        (teacher[0].text(), refs(&teacher[0])),
        ("Ann's cello teacher is Ines".into(), vec!["D1:3".into()])
    );
    let dish = store
        .triples_with_predicate("ann", "amory", "'s favourite dish is")
        .unwrap();
    assert_eq!(
        dish.first().map(|t| t.object.as_str()),
        Some("the spicy lentil soup"),
        "{all:?}"
    );
    // One hop from Ann: her sister and her teacher; two hops reach what
    // is known about Clara.
    let hop1 = store.neighbourhood("ann", "amory", "Ann", 1).unwrap();
    let hop2 = store.neighbourhood("ann", "amory", "Ann", 2).unwrap();
    assert!(hop1.iter().all(|(h, _)| *h == 1));
    let texts = |n: &[(usize, dentate_memory::Triple)], hop: usize| -> Vec<String> {
        n.iter().filter(|(h, _)| *h == hop).map(|(_, t)| t.text()).collect()
    };
    assert!(texts(&hop1, 1).contains(&"Ann's sister is Clara".to_string()));
    assert!(texts(&hop1, 1).contains(&"Ann's cello teacher is Ines".to_string()));
    assert!(!texts(&hop1, 1).iter().any(|t| t.contains("studio")));
    assert!(texts(&hop2, 2).contains(&"Clara has a studio near the river in Lisbon".to_string()));
    assert_eq!(texts(&hop2, 1), texts(&hop1, 1), "hop-1 triples stay at hop 1");
    assert!(store.neighbourhood("ann", "amory", "Ann", 3).is_err());
    assert!(store.triples_about("ann", "amory", "Nobody").unwrap().is_empty());
    // Another user sees none of them.
    assert!(store.triples_about("bob", "amory", "Clara").unwrap().is_empty());
    // Retrieval follows the graph one hop from the question's entities.
    let hits = m.retrieve("ann", "Who teaches Ann the cello?", 30).unwrap();
    assert!(
        hits.iter().any(|h| h.item.text.contains("Ines")),
        "{:#?}",
        hits.iter().map(|h| &h.item.text).collect::<Vec<_>>()
    );
    // Forgetting a fact removes it from the graph; correcting one takes it
    // out of the graph but keeps the item.
    let id = teacher[0].item_id;
    m.forget("ann", id).unwrap();
    let store = Store::open(dir.path()).unwrap();
    assert!(
        store
            .triples_with_predicate("ann", "amory", "cello teacher")
            .unwrap()
            .is_empty()
    );
    let dish_id = store.triples_with_predicate("ann", "amory", "favourite dish").unwrap()[0].item_id;
    m.correct("ann", dish_id, "Bob's favourite dish is the mild lentil soup")
        .unwrap();
    let store = Store::open(dir.path()).unwrap();
    assert!(
        store
            .triples_with_predicate("ann", "amory", "favourite dish")
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        store.item(dish_id).unwrap().unwrap().text,
        "Bob's favourite dish is the mild lentil soup"
    );
}

#[test]
fn history_is_the_context_until_t_turns() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), None, AmoryConfig::default());
    let r = m.ingest("ann", &talk()).unwrap();
    assert_eq!(r.messages, 0, "under T = 20 turns nothing is processed");
    assert!(items(dir.path(), "amory", FRAGMENT).is_empty());
    assert!(m.retrieve("ann", "What is the cat called?", 5).unwrap().is_empty());
    let c = m.compose("ann", "What is the cat called?", 3500).unwrap();
    assert!(
        c.prompt.contains("not yet in memory") && c.prompt.contains("Ann: I adopted a grey cat called Pixel"),
        "{}",
        c.prompt
    );
    assert!(m.show("ann").unwrap().contains("not initialised"));
    // The end of the conversation initialises from what there is.
    m.flush("ann").unwrap();
    assert!(!items(dir.path(), "amory", FRAGMENT).is_empty());
    let c = m.compose("ann", "What is the cat called?", 3500).unwrap();
    assert!(
        !c.prompt.contains("not yet in memory") && c.prompt.contains("Pixel"),
        "{}",
        c.prompt
    );
    // A long conversation initialises at T and binds the rest.
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), None, AmoryConfig::default());
    let mut long = talk();
    // The same talk again, under new message ids (the same ids and texts
    // would be recognised as already stored).
    long.extend(talk().into_iter().map(|mut msg| {
        msg.source_ref = msg.source_ref.map(|r| format!("{r}-again"));
        msg
    }));
    m.ingest("ann", &long).unwrap();
    let frags = items(dir.path(), "amory", FRAGMENT);
    assert!(frags.iter().any(|f| f.turn == 0) && frags.iter().any(|f| f.turn > 0));
    let store = Store::open(dir.path()).unwrap();
    assert_eq!(
        store.progress("ann", "amory").unwrap(),
        24,
        "every complete pair is bound"
    );
}

#[test]
fn offline_is_deterministic_and_streaming_across_restarts_changes_nothing() {
    let run_once = || {
        let d = tempfile::tempdir().unwrap();
        let mut m = open(d.path(), None, config(Consolidation::Inactive, 4));
        m.ingest("ann", &talk()).unwrap();
        m.flush("ann").unwrap();
        d
    };
    let one = run_once();
    let two = run_once();
    assert_eq!(snapshot(one.path(), "amory"), snapshot(two.path(), "amory"));
    // One message at a time, reopening the memory (a new process) each
    // time: pending pairs and activity live in the store.
    let stream = tempfile::tempdir().unwrap();
    for m in talk() {
        let mut mem = open(stream.path(), None, config(Consolidation::Inactive, 4));
        mem.ingest("ann", &[m]).unwrap();
    }
    let mut mem = open(stream.path(), None, config(Consolidation::Inactive, 4));
    // A message waiting for its pair is shown as recent conversation.
    mem.flush("ann").unwrap();
    assert_eq!(snapshot(one.path(), "amory"), snapshot(stream.path(), "amory"));
    // A message alone waits for its pair, in the standing context.
    let wait = tempfile::tempdir().unwrap();
    let mut mem = open(wait.path(), None, config(Consolidation::Inactive, 4));
    mem.ingest("ann", &talk()[..5]).unwrap();
    let c = mem.compose("ann", "How far does Bob run?", 3500).unwrap();
    assert!(
        c.prompt.contains("not yet in memory") && c.prompt.contains("How far do you run"),
        "{}",
        c.prompt
    );
}

// ---------------------------------------------------------------- model

/// The stage a request is for, from its system prompt.
fn stage(body: &Value) -> &'static str {
    stage_by(
        body,
        &[
            ("story initializer", "init"),
            ("memory binder", "bind"),
            ("consolidating the structure", "consolidate"),
            ("semanticization step", "semanticize"),
            ("coherence retriever", "retrieve"),
        ],
    )
}

fn user_text(body: &Value) -> String {
    // The last user message (a repair request is appended after it).
    body["messages"]
        .as_array()
        .and_then(|m| m.iter().find(|x| x["role"] == "user"))
        .and_then(|m| m["content"].as_str())
        .unwrap_or("")
        .to_string()
}

/// `(n, speaker, text)` of the numbered lines `[n] (…) Speaker: text`.
fn numbered(text: &str) -> Vec<(usize, String, String)> {
    text.lines()
        .filter_map(|l| {
            let rest = l.trim_start().strip_prefix('[')?;
            let (n, rest) = rest.split_once(']')?;
            let rest = rest.trim_start();
            let rest = if rest.starts_with('(') {
                rest.split_once(") ")?.1
            } else {
                rest
            };
            let (speaker, text) = rest.split_once(": ")?;
            Some((n.parse().ok()?, speaker.to_string(), text.to_string()))
        })
        .collect()
}

/// The story a line belongs to, by keyword.
fn topic(text: &str) -> Option<&'static str> {
    if text.contains("Pixel") || text.contains("cat") {
        Some("Pixel the cat")
    } else if text.contains("marathon") || text.contains("run") {
        Some("Marathon training")
    } else if text.contains("Clara") || text.contains("sister") {
        Some("Clara in Lisbon")
    } else {
        None
    }
}

/// A model that follows the prompts, routing by keyword.
fn answer(body: &Value) -> String {
    let user = user_text(body);
    match stage(body) {
        "init" => {
            let mut stories: Vec<(&str, String, Vec<Value>)> = Vec::new();
            for (n, speaker, text) in numbered(&user) {
                let Some(t) = topic(&text) else { continue };
                let frag = json!({"message": n, "excerpt": text});
                match stories.iter_mut().find(|s| s.0 == t) {
                    Some(s) => s.2.push(frag),
                    None => stories.push((t, speaker, vec![frag])),
                }
            }
            let stories: Vec<Value> = stories
                .into_iter()
                .map(|(t, owner, frags)| json!({"owner": owner, "topic": t, "characters": [owner], "fragments": frags}))
                .collect();
            json!({ "stories": stories }).to_string()
        }
        "bind" => {
            let (existing, turn) = user.split_once("New conversation turn:").unwrap_or((&user, ""));
            let existing = existing.split("Recent dialogue context:").next().unwrap_or("");
            let mut known: Vec<String> = existing
                .lines()
                .filter_map(|l| l.strip_prefix('[')?.split_once("] ").map(|(_, r)| r.to_string()))
                .collect();
            let mut decisions = Vec::new();
            for (n, speaker, text) in numbered(turn) {
                let Some(t) = topic(&text) else { continue };
                match known.iter().position(|k| k.starts_with(t)) {
                    Some(i) => {
                        decisions.push(json!({"message": n, "excerpt": text, "action": "extend_story", "story": i + 1}))
                    }
                    None => {
                        decisions.push(json!({"message": n, "excerpt": text, "action": "create_new_story",
                                              "topic": t, "owner": speaker, "characters": [speaker]}));
                        known.push(t.to_string());
                    }
                }
            }
            json!({ "decisions": decisions }).to_string()
        }
        "consolidate" => {
            let items = numbered(&user);
            let first = items.first().map(|i| i.2.clone()).unwrap_or_default();
            let main = user
                .lines()
                .next()
                .unwrap_or("")
                .trim_start_matches("Main topic: ")
                .to_string();
            let covered = topic(&first).is_some_and(|t| main.starts_with(t));
            json!({"substories": [{"sub_topic": format!("Sub: {}", &first[..first.len().min(24)]),
                                   "start": 1, "end": items.len()}],
                   "new_topic": if covered { Value::Null } else { json!("Broad story") }})
            .to_string()
        }
        "semanticize" => {
            let facts: Vec<Value> = numbered(&user)
                .into_iter()
                .filter_map(|(n, _, text)| {
                    if text.contains("sister Clara") {
                        Some(json!({"subject": "Ann", "predicate": "has sister", "object": "Clara", "item": n}))
                    } else if text.contains("adopted") {
                        Some(json!({"subject": "Ann", "predicate": "adopted", "object": "Pixel", "item": n}))
                    } else {
                        None
                    }
                })
                .collect();
            json!({ "facts": facts }).to_string()
        }
        "retrieve" => {
            let question = user.lines().next().unwrap_or("").to_string();
            let want = topic(&question);
            let mut story = String::new();
            let mut choices = Vec::new();
            for l in user.lines() {
                if let Some(s) = l.strip_prefix("Story: ") {
                    story = s.to_string();
                } else if let Some(rest) = l.trim_start().strip_prefix('[')
                    && let Some((n, _)) = rest.split_once(']')
                    && want.is_some_and(|w| story.starts_with(w))
                    && choices.len() < 2
                {
                    choices.push(n.parse::<u64>().unwrap());
                }
            }
            let entities: Vec<&str> = ["Clara", "Pixel"]
                .into_iter()
                .filter(|e| question.contains(e))
                .collect();
            json!({"choices": choices, "entities": entities}).to_string()
        }
        other => format!("unexpected stage {other}"),
    }
}

fn model_server(limit: usize) -> ScriptedServer {
    answering_server(limit, answer)
}

fn stages(server: &ScriptedServer) -> Vec<&'static str> {
    stages_of(server, stage)
}

#[test]
fn llm_path_drives_every_role_and_consolidates_when_inactive() {
    let server = model_server(200);
    let llm: Arc<dyn Llm> = Arc::new(chat(&server, 5000, 0));
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), Some(llm.clone()), config(Consolidation::Inactive, 4));
    m.ingest("ann", &talk()).unwrap();
    m.flush("ann").unwrap();
    check_tree(dir.path(), "amory");
    // Init over turns 1–4, then pairs (5,6) (7,8) (9,10) (11,12). The cat
    // goes quiet at iteration 1, the marathon at 2, the sister at 3, the
    // cat again at 4; the end of the conversation closes the marathon.
    let cs = ["consolidate", "semanticize"];
    let mut expected = vec!["init", "bind"];
    for _ in 0..3 {
        expected.extend(cs);
        expected.push("bind");
    }
    expected.extend(cs);
    expected.extend(cs);
    assert_eq!(stages(&server), expected);
    assert_eq!(llm.stats().calls as usize, expected.len());
    let narr = items(dir.path(), "amory", NARRATIVE);
    let heads: Vec<&str> = narr.iter().map(|n| n.text.lines().next().unwrap()).collect();
    assert_eq!(heads, ["Pixel the cat", "Marathon training", "Clara in Lisbon"]);
    assert!(
        narr[0].text.contains("Owner: Ann") && narr[1].text.contains("Owner: Bob"),
        "{narr:#?}"
    );
    let subs = items(dir.path(), "amory", SUBPLOT);
    assert_eq!(subs.len(), 5);
    assert!(subs.iter().all(|s| s.text.starts_with("Sub: ")));
    // Fragments are the model's excerpts, with the speaker.
    let frags = items(dir.path(), "amory", FRAGMENT);
    assert!(
        frags
            .iter()
            .any(|f| f.text == "Ann: My sister Clara is an architect in Lisbon.")
    );
    // Triples from the model, with provenance.
    let store = Store::open(dir.path()).unwrap();
    let t = store.triples_with_predicate("ann", "amory", "has sister").unwrap();
    assert_eq!(t.len(), 1);
    assert_eq!(store.source_refs(&t[0].sources).unwrap(), ["D2:1"]);
    assert_eq!(store.triples_about("ann", "amory", "Pixel").unwrap().len(), 1);
    // The consolidation prompt carries the story and the dated items; the
    // binding prompt the existing stories and the recent context.
    let reqs = server.requests();
    let first_cons = reqs.iter().find(|r| stage(&r.body) == "consolidate").unwrap();
    let text = user_text(&first_cons.body);
    assert!(
        text.starts_with("Main topic: Pixel the cat [Ann]") && text.contains("(2 May 2023) Ann: I adopted"),
        "{text}"
    );
    let second_bind = reqs.iter().filter(|r| stage(&r.body) == "bind").nth(1).unwrap();
    let text = user_text(&second_bind.body);
    assert!(
        text.contains("[1] Pixel the cat [Ann]") && text.contains("Recent dialogue context:"),
        "{text}"
    );
    // Coherence retrieval: one call picks the leaves; the graph adds the
    // fact one hop from the entity the model named.
    let before = server.requests().len();
    let hits = m.retrieve("ann", "Where does Ann's sister Clara work?", 8).unwrap();
    assert_eq!(stages(&server)[before..], ["retrieve"]);
    assert_eq!(hits[0].item.text.lines().next(), Some("Clara in Lisbon"), "{hits:#?}");
    assert_eq!(hits[1].item.kind, SUBPLOT);
    assert!(
        hits.iter()
            .any(|h| h.item.kind == FRAGMENT && h.source_refs == ["D2:1"])
    );
    let c = m.compose("ann", "Where does Ann's sister Clara work?", 3500).unwrap();
    assert!(
        c.prompt.contains("Story: Clara in Lisbon [Ann]") && c.prompt.contains("architect"),
        "{}",
        c.prompt
    );
}

#[test]
fn llm_rapid_and_none_consolidation_call_the_model_when_they_should() {
    let count = |c: Consolidation| {
        let server = model_server(200);
        let dir = tempfile::tempdir().unwrap();
        let mut m = open(dir.path(), Some(Arc::new(chat(&server, 5000, 0))), config(c, 4));
        m.ingest("ann", &talk()).unwrap();
        m.flush("ann").unwrap();
        check_tree(dir.path(), config(c, 4).name());
        stages(&server)
    };
    let cs = ["consolidate", "semanticize"];
    // Rapid: after the initialisation both stories, then after every
    // binding the one story it extended.
    let mut rapid = vec!["init"];
    rapid.extend(cs);
    rapid.extend(cs);
    for _ in 0..4 {
        rapid.push("bind");
        rapid.extend(cs);
    }
    assert_eq!(count(Consolidation::Rapid), rapid);
    // None: binding only.
    assert_eq!(count(Consolidation::None), ["init", "bind", "bind", "bind", "bind"]);
}

#[test]
fn malformed_answers_are_repaired_or_fail_typed_and_resume_loses_nothing() {
    // The first binding answer is prose; the repair request gets JSON.
    let server = ScriptedServer::start(200, |_, body| {
        let repair = body["messages"].as_array().is_some_and(|m| m.len() > 2);
        if stage(body) == "bind" && !repair {
            Reply::ok(chat_body("The turn extends the marathon story."))
        } else {
            Reply::ok(chat_body(&answer(body)))
        }
    })
    .unwrap();
    let llm: Arc<dyn Llm> = Arc::new(chat(&server, 5000, 0));
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), Some(llm.clone()), config(Consolidation::Inactive, 4));
    m.ingest("ann", &talk()[..6]).unwrap();
    assert_eq!(llm.stats().repairs, 1);
    assert!(
        items(dir.path(), "amory", FRAGMENT)
            .iter()
            .any(|f| f.text.contains("forty kilometres"))
    );

    // Consolidation always malformed (no block at all; overlapping or
    // out-of-order blocks would be read by their starts): a typed error;
    // the binding before it is kept, nothing of the consolidation is.
    let bad = ScriptedServer::start(200, |_, body| {
        if stage(body) == "consolidate" {
            Reply::ok(chat_body("{\"substories\": [], \"new_topic\": null}"))
        } else {
            Reply::ok(chat_body(&answer(body)))
        }
    })
    .unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    let mut m = open(
        dir2.path(),
        Some(Arc::new(chat(&bad, 5000, 0))),
        config(Consolidation::Inactive, 4),
    );
    let err = m.ingest("ann", &talk()).unwrap_err();
    assert!(matches!(err, MemoryError::Llm(_)), "{err}");
    assert!(err.to_string().contains("substor"), "{err}");
    assert!(items(dir2.path(), "amory", SUBPLOT).is_empty());
    assert!(!items(dir2.path(), "amory", FRAGMENT).is_empty());
    check_tree(dir2.path(), "amory");

    // The server fails outright (HTTP 500) after a while; a working model
    // resumes, and the result equals an uninterrupted run.
    let failing = ScriptedServer::start(200, |i, body| {
        if i >= 5 {
            Reply::status(500, "{\"error\": \"down\"}")
        } else {
            Reply::ok(chat_body(&answer(body)))
        }
    })
    .unwrap();
    let dir3 = tempfile::tempdir().unwrap();
    let mut m = open(
        dir3.path(),
        Some(Arc::new(chat(&failing, 5000, 0))),
        config(Consolidation::Inactive, 4),
    );
    let err = m.ingest("ann", &talk()).unwrap_err();
    assert!(matches!(err, MemoryError::Llm(_)), "{err}");
    assert!(
        !items(dir3.path(), "amory", SUBPLOT).is_empty(),
        "progress before the failure is kept"
    );
    let good = model_server(200);
    let mut m = open(
        dir3.path(),
        Some(Arc::new(chat(&good, 5000, 0))),
        config(Consolidation::Inactive, 4),
    );
    m.process("ann", &mut |_, _| {}).unwrap();
    m.flush("ann").unwrap();
    check_tree(dir3.path(), "amory");
    let reference = tempfile::tempdir().unwrap();
    let clean = model_server(200);
    let mut m = open(
        reference.path(),
        Some(Arc::new(chat(&clean, 5000, 0))),
        config(Consolidation::Inactive, 4),
    );
    m.ingest("ann", &talk()).unwrap();
    m.flush("ann").unwrap();
    assert_eq!(snapshot(dir3.path(), "amory"), snapshot(reference.path(), "amory"));
    // Only the calls after the last committed step are made again.
    assert_eq!(good.requests().len() + 5, clean.requests().len());
    // A failing retrieval call is a typed error too.
    let down = ScriptedServer::start(10, |_, _| Reply::status(500, "{}")).unwrap();
    let mut m = open(
        reference.path(),
        Some(Arc::new(chat(&down, 5000, 0))),
        config(Consolidation::Inactive, 4),
    );
    assert!(matches!(
        m.retrieve("ann", "Where is Clara?", 5),
        Err(MemoryError::Llm(_))
    ));
}

/// [`talk`] as a LoCoMo sample, with two questions.
fn talk_as_locomo() -> String {
    let mut sessions = serde_json::Map::new();
    for s in 1..=2u32 {
        let turns: Vec<Value> = talk()
            .iter()
            .filter(|m| m.session == format!("session_{s}"))
            .map(|m| json!({"speaker": m.speaker, "dia_id": m.source_ref, "text": m.text}))
            .collect();
        sessions.insert(
            format!("session_{s}_date_time"),
            json!(format!("9:00 am on {} May, 2023", s + 1)),
        );
        sessions.insert(format!("session_{s}"), Value::Array(turns));
    }
    sessions.insert("speaker_a".into(), json!("Ann"));
    sessions.insert("speaker_b".into(), json!("Bob"));
    json!([{
        "sample_id": "talk",
        "conversation": sessions,
        "qa": [
            {"question": "Where does Ann's sister Clara work?", "answer": "Lisbon", "evidence": ["D2:1"], "category": 4},
            {"question": "What is Ann's cat called?", "answer": "Pixel", "evidence": ["D1:1"], "category": 4}
        ]
    }])
    .to_string()
}

#[test]
fn query_time_model_calls_count_in_the_evaluation_cost() {
    use dentate_memory::eval::{self, EvalOptions};
    let server = model_server(200);
    let llm: Arc<dyn Llm> = Arc::new(chat(&server, 5000, 0));
    let ds = dentate_memory::locomo::parse(&talk_as_locomo()).unwrap();
    let mut o = EvalOptions::new(PipelineKind::Amory(config(Consolidation::Inactive, 4)), embedder());
    o.ks = vec![2, 5];
    o.budgets = vec![300];
    o.pipeline_llm = Some(llm.clone());
    let dir = tempfile::tempdir().unwrap();
    let out = eval::run(&ds, &o, dir.path(), &mut |_| {}).unwrap();
    let all = stages(&server);
    let retrievals = all.iter().filter(|s| **s == "retrieve").count();
    // Every retrieval asks the coherence retriever once: one per k and one
    // for the budget, for each of the two questions.
    assert_eq!(retrievals, 2 * 3);
    let run = &out.runs[0];
    assert_eq!(run.query_cost.llm_calls as usize, retrievals);
    assert_eq!(out.ingest[0].llm_calls as usize, all.len() - retrievals);
    assert_eq!(llm.stats().calls as usize, all.len());
    let j = out.to_json();
    assert_eq!(j["runs"][0]["query_llm"]["calls"], json!(retrievals));
    assert!(
        out.to_markdown().contains("query-time LLM calls"),
        "{}",
        out.to_markdown()
    );
}
