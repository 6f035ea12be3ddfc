//! PREMem end to end: offline fragments with resolved dates, clusters and
//! the persistent pool across sessions (the paper's update rule on a
//! scripted example), reasoning fragments with provenance, retrieval and
//! chronological composition, determinism, streaming across restarts, and
//! the LLM path against a scripted OpenAI-compatible server (good,
//! malformed then repaired, failing, and resuming).

mod common;

use common::{chat, chat_body, embedder, msg};
use dentate_embed::Embedder;
use dentate_embed::http::testing::{Reply, ScriptedServer};
use dentate_memory::premem::{CLUSTER, FRAGMENT_KINDS, REASONING};
use dentate_memory::{Item, Llm, Memory, MemoryError, NewMessage, PipelineKind, PrememConfig, Store};
use serde_json::{Value, json};
use std::collections::BTreeSet;
use std::sync::Arc;

/// Topic words, one embedding direction each.
const TOPICS: [&str; 4] = ["cat", "marathon", "cello", "paint"];

/// An embedder that puts each text on the direction of the topic word it
/// holds (a fifth direction for none), plus a small text-specific offset:
/// texts of one topic are near-duplicates, topics are orthogonal.
struct TopicEmbedder;

impl Embedder for TopicEmbedder {
    fn name(&self) -> String {
        "topics-8".into()
    }
    fn dim(&self) -> usize {
        8
    }
    fn embed(&self, texts: &[&str]) -> dentate_embed::Result<Vec<f32>> {
        let mut out = Vec::with_capacity(texts.len() * 8);
        for t in texts {
            let lower = t.to_lowercase();
            let mut v = [0.0f32; 8];
            v[TOPICS.iter().position(|k| lower.contains(k)).unwrap_or(4)] = 1.0;
            // FNV-1a of the text spreads it a little over the last dims.
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for b in t.bytes() {
                h = (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3);
            }
            for (d, x) in v.iter_mut().enumerate().skip(4) {
                *x += ((h >> (8 * d)) & 0xff) as f32 / 255.0 * 0.15;
            }
            let n = v.iter().map(|x| x * x).sum::<f32>().sqrt();
            out.extend(v.iter().map(|x| x / n));
        }
        Ok(out)
    }
}

/// Three sessions (2, 3 and 4 May 2023): cat and marathon; cat and cello;
/// marathon and painting.
fn sessions() -> Vec<Vec<NewMessage>> {
    vec![
        vec![
            msg(
                1,
                1,
                "Ann",
                "I adopted a grey cat called Pixel from the shelter yesterday.",
            ),
            msg(1, 2, "Bob", "I am training for the Berlin marathon in September."),
            msg(1, 3, "Ann", "Pixel the cat hides under the sofa all day."),
            msg(1, 4, "Bob", "My marathon training plan has forty kilometres a week."),
        ],
        vec![
            msg(2, 1, "Ann", "Pixel the cat now sleeps on my bed every night."),
            msg(2, 2, "Ann", "I started cello lessons with a teacher named Ines."),
            msg(2, 3, "Ann", "Ines says my cello bowing is improving quickly."),
            msg(2, 4, "Ann", "My cat Pixel loves tuna treats from the market."),
        ],
        vec![
            msg(3, 1, "Bob", "I ran the Berlin marathon last Sunday in four hours."),
            msg(3, 2, "Ann", "I painted a lake with watercolours at the studio."),
            msg(3, 3, "Bob", "My marathon medal from Berlin hangs on the wall now."),
            msg(3, 4, "Ann", "The painting class meets every Tuesday evening."),
        ],
    ]
}

fn talk() -> Vec<NewMessage> {
    sessions().concat()
}

fn open(dir: &std::path::Path, llm: Option<Arc<dyn Llm>>) -> Memory {
    Memory::open(
        dir,
        PipelineKind::Premem(PrememConfig::default()),
        Arc::new(TopicEmbedder),
        llm,
    )
    .unwrap()
}

fn all_items(dir: &std::path::Path) -> Vec<Item> {
    Store::open(dir).unwrap().items("ann", "premem", None).unwrap()
}

fn of_kind<'a>(items: &'a [Item], kinds: &[&str]) -> Vec<&'a Item> {
    items.iter().filter(|i| kinds.contains(&i.kind.as_str())).collect()
}

/// The topic and session of a cluster, from its fragments.
fn cluster_topic(store: &Store, id: i64) -> (String, String) {
    let frags = store.derived_from(id).unwrap();
    let mut topics = BTreeSet::new();
    let mut sessions = BTreeSet::new();
    for f in frags {
        let it = store.item(f).unwrap().unwrap();
        let lower = it.text.to_lowercase();
        topics.insert(TOPICS.iter().find(|k| lower.contains(*k)).copied().unwrap_or("none"));
        for m in store.messages(&it.sources).unwrap() {
            sessions.insert(m.msg.session);
        }
    }
    assert_eq!((topics.len(), sessions.len()), (1, 1), "one topic, one session: {id}");
    (
        topics.into_iter().next().unwrap().to_string(),
        sessions.into_iter().next().unwrap(),
    )
}

fn pool_topics(dir: &std::path::Path) -> BTreeSet<(String, String)> {
    let store = Store::open(dir).unwrap();
    let pool: Vec<i64> = serde_json::from_str(&store.state("ann", "premem", "pool").unwrap().unwrap()).unwrap();
    pool.iter().map(|&id| cluster_topic(&store, id)).collect()
}

fn set(items: &[(&str, &str)]) -> BTreeSet<(String, String)> {
    items.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect()
}

/// Every item cites real messages of the user; clusters are derived from
/// fragments of one session; each reasoning fragment is derived from
/// fragments of exactly two clusters (its parent, the newer, and one older
/// cluster) and cites exactly their messages.
fn check_provenance(dir: &std::path::Path) -> usize {
    let store = Store::open(dir).unwrap();
    let items = all_items(dir);
    let clusters = of_kind(&items, &[CLUSTER]);
    let member_of = |f: i64| -> Vec<i64> {
        clusters
            .iter()
            .filter(|c| store.derived_from(c.id).unwrap().contains(&f))
            .map(|c| c.id)
            .collect()
    };
    for it in &items {
        assert!(!it.sources.is_empty(), "{it:?}");
        let msgs = store.messages(&it.sources).unwrap();
        assert_eq!(msgs.len(), it.sources.len(), "{it:?}");
        assert!(msgs.iter().all(|m| m.user == "ann"));
        if FRAGMENT_KINDS.contains(&it.kind.as_str()) {
            assert_eq!(it.sources.len(), 1, "a fragment comes from one message: {it:?}");
            assert_eq!(member_of(it.id).len(), 1, "a fragment is in one cluster: {it:?}");
        }
    }
    let reasoning = of_kind(&items, &[REASONING]);
    for r in &reasoning {
        let from = store.derived_from(r.id).unwrap();
        assert!(!from.is_empty(), "{r:?}");
        let mut owners: BTreeSet<i64> = BTreeSet::new();
        let mut sources: Vec<i64> = Vec::new();
        for f in &from {
            let frag = store.item(*f).unwrap().unwrap();
            assert!(FRAGMENT_KINDS.contains(&frag.kind.as_str()), "{frag:?}");
            owners.extend(member_of(*f));
            sources.extend(frag.sources);
        }
        sources.sort_unstable();
        sources.dedup();
        assert_eq!(
            r.sources, sources,
            "a reasoning fragment cites the messages of its fragments: {r:?}"
        );
        assert_eq!(owners.len(), 2, "from two linked clusters: {r:?}");
        let parent = r.parent.expect("the newer cluster");
        assert_eq!(owners.iter().max(), Some(&parent), "{r:?}");
    }
    reasoning.len()
}

#[test]
fn the_pool_follows_the_papers_update_rule() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), None);
    let s = sessions();
    m.ingest("ann", &s[0]).unwrap();
    // The session is open until the next one starts or the conversation ends.
    assert!(of_kind(&all_items(dir.path()), &[CLUSTER]).is_empty());
    m.flush("ann").unwrap();
    assert_eq!(
        pool_topics(dir.path()),
        set(&[("cat", "session_1"), ("marathon", "session_1")])
    );
    // Session 2: its cat cluster links with session 1's, which leaves the
    // pool; both new clusters join it.
    m.ingest("ann", &s[1]).unwrap();
    m.flush("ann").unwrap();
    assert_eq!(
        pool_topics(dir.path()),
        set(&[("marathon", "session_1"), ("cat", "session_2"), ("cello", "session_2")])
    );
    // Session 3: the marathon links back to session 1 across session 2.
    m.ingest("ann", &s[2]).unwrap();
    m.flush("ann").unwrap();
    assert_eq!(
        pool_topics(dir.path()),
        set(&[
            ("cat", "session_2"),
            ("cello", "session_2"),
            ("marathon", "session_3"),
            ("paint", "session_3")
        ])
    );
    let items = all_items(dir.path());
    assert_eq!(of_kind(&items, &[CLUSTER]).len(), 6);
    assert_eq!(of_kind(&items, &FRAGMENT_KINDS).len(), 12, "one per sentence");
    assert!(check_provenance(dir.path()) >= 2);
    // Reasoning came from the two linked pairs only: cat 1–2, marathon 1–3.
    let store = Store::open(dir.path()).unwrap();
    let pairs: BTreeSet<(String, String, String)> = of_kind(&items, &[REASONING])
        .iter()
        .map(|r| {
            let (topic, newer) = cluster_topic(&store, r.parent.unwrap());
            let older: BTreeSet<String> = store
                .derived_from(r.id)
                .unwrap()
                .iter()
                .flat_map(|f| store.messages(&store.item(*f).unwrap().unwrap().sources).unwrap())
                .map(|m| m.msg.session)
                .filter(|s| *s != newer)
                .collect();
            (topic, older.into_iter().next().unwrap_or_default(), newer)
        })
        .collect();
    assert_eq!(
        pairs,
        [
            ("cat".to_string(), "session_1".to_string(), "session_2".to_string()),
            ("marathon".to_string(), "session_1".to_string(), "session_3".to_string())
        ]
        .into_iter()
        .collect()
    );
    // The same, in one pass over the whole conversation.
    let one = tempfile::tempdir().unwrap();
    let mut m = open(one.path(), None);
    m.ingest("ann", &talk()).unwrap();
    m.flush("ann").unwrap();
    assert_eq!(snapshot(one.path()), snapshot(dir.path()));
}

#[test]
fn offline_fragments_times_reasoning_and_retrieval() {
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), None);
    m.ingest("ann", &talk()).unwrap();
    let f = m.flush("ann").unwrap();
    assert!(f.items > 0 && f.live > 12, "{f:?}");
    let items = all_items(dir.path());
    let text = |needle: &str| -> &Item {
        items
            .iter()
            .find(|i| i.text.contains(needle))
            .unwrap_or_else(|| panic!("no item with {needle}"))
    };
    // "yesterday" said on 2 May 2023 is 1 May; "last Sunday" said on
    // Thursday 4 May is 30 April; a past event without a date is "Before".
    let adopted = text("adopted a grey cat");
    assert!(adopted.text.starts_with("[1 May 2023] "), "{}", adopted.text);
    assert_eq!(adopted.kind, "experiential");
    assert!(
        adopted.text.contains("Ann adopted"),
        "first person named: {}",
        adopted.text
    );
    let ran = text("ran the Berlin marathon");
    assert!(ran.text.starts_with("[30 April 2023] "), "{}", ran.text);
    assert_eq!(ran.refers_to, Some(1_682_812_800));
    let painted = text("painted a lake");
    assert!(painted.text.starts_with("[Before 4 May 2023] "), "{}", painted.text);
    assert_eq!(text("loves tuna").kind, "subjective");
    // Reasoning: an accumulation of the cat fragments across sessions, and
    // Pixel and Berlin connect the sessions.
    let reasoning = of_kind(&items, &[REASONING]);
    assert!(
        reasoning
            .iter()
            .any(|r| r.text.contains("(accumulation)") && r.text.contains("cat")),
        "{reasoning:?}"
    );
    assert!(
        reasoning
            .iter()
            .any(|r| r.text.contains("(connection/implication)") && r.text.contains("Berlin")),
        "{reasoning:?}"
    );
    check_provenance(dir.path());
    // Retrieval reads fragments and reasoning fragments, with provenance.
    let hits = m.retrieve("ann", "Which marathon did Bob run, and when?", 8).unwrap();
    assert!(
        hits.iter().any(|h| h.item.text.contains("ran the Berlin marathon")),
        "{hits:?}"
    );
    assert!(hits.iter().all(|h| h.item.kind != CLUSTER));
    assert!(hits.iter().all(|h| !h.source_refs.is_empty()));
    // The prompt holds the best items in time order.
    let c = m.compose("ann", "What happened with the marathon?", 400).unwrap();
    assert!(c.tokens <= 400 && !c.included.is_empty(), "{c:?}");
    let times: Vec<i64> = {
        let mut v: Vec<&dentate_memory::Retrieved> = c.included.iter().collect();
        // By the time they refer to, then in the order they were said.
        v.sort_by_key(|r| {
            (
                r.item.refers_to.or(r.item.said_at),
                r.item.sources.first().copied(),
                r.item.id,
            )
        });
        v.iter()
            // Under its day's date line, without a `[time]` that repeats it.
            .map(|r| {
                let content = r.item.text.split_once("] ").map_or(r.item.text.as_str(), |x| x.1);
                c.prompt.find(content).expect("in the prompt") as i64
            })
            .collect()
    };
    assert!(times.windows(2).all(|w| w[0] < w[1]), "chronological: {}", c.prompt);
    let tiny = m.compose("ann", "What happened with the marathon?", 30).unwrap();
    assert!(tiny.tokens <= 30);
    assert!(m.compose("ann", "x", 2).is_err());
    // Forgetting a fragment removes it from retrieval.
    let id = hits[0].item.id;
    m.forget("ann", id).unwrap();
    let again = m.retrieve("ann", "Which marathon did Bob run, and when?", 8).unwrap();
    assert!(again.iter().all(|h| h.item.id != id));
}

/// `(kind, text, source refs, texts of the items it derives from)` of
/// every item, in id order.
fn snapshot(dir: &std::path::Path) -> Vec<(String, String, Vec<String>, Vec<String>)> {
    let store = Store::open(dir).unwrap();
    all_items(dir)
        .into_iter()
        .map(|it| {
            let refs = store.source_refs(&it.sources).unwrap();
            let from = store
                .derived_from(it.id)
                .unwrap()
                .iter()
                .map(|f| store.item(*f).unwrap().map(|i| i.text).unwrap_or_default())
                .collect();
            (it.kind, it.text, refs, from)
        })
        .collect()
}

#[test]
fn offline_is_deterministic_and_streaming_across_restarts_changes_nothing() {
    let one = tempfile::tempdir().unwrap();
    let mut m = Memory::open(one.path(), PipelineKind::parse("premem").unwrap(), embedder(), None).unwrap();
    m.ingest("ann", &talk()).unwrap();
    m.flush("ann").unwrap();
    let again = tempfile::tempdir().unwrap();
    let mut m = Memory::open(again.path(), PipelineKind::parse("premem").unwrap(), embedder(), None).unwrap();
    m.ingest("ann", &talk()).unwrap();
    m.flush("ann").unwrap();
    assert_eq!(snapshot(one.path()), snapshot(again.path()));
    assert!(!snapshot(one.path()).is_empty());
    // One message at a time, a new process each time.
    let stream = tempfile::tempdir().unwrap();
    for msg in talk() {
        let mut mem = Memory::open(stream.path(), PipelineKind::parse("premem").unwrap(), embedder(), None).unwrap();
        mem.ingest("ann", &[msg]).unwrap();
    }
    let mut mem = Memory::open(stream.path(), PipelineKind::parse("premem").unwrap(), embedder(), None).unwrap();
    mem.flush("ann").unwrap();
    assert_eq!(snapshot(one.path()), snapshot(stream.path()));
}

/// The stage a request is for, from its system prompt.
fn stage(body: &Value) -> &'static str {
    let system = body["messages"][0]["content"].as_str().unwrap_or("");
    if system.contains("INFORMATION CATEGORY DEFINITIONS") {
        "extract"
    } else if system.contains("analyzing memory fragments") {
        "reason"
    } else {
        "unknown"
    }
}

/// The user message of a request.
fn user(body: &Value) -> String {
    body["messages"][1]["content"].as_str().unwrap_or("").to_string()
}

/// A model that follows the prompts: one fragment per message, keyed by its
/// topic word, dated with the message date (the day before for
/// "yesterday"); one accumulation insight per linked pair.
fn answer(body: &Value) -> String {
    match stage(body) {
        "extract" => {
            let mut facts = Vec::new();
            let mut events = Vec::new();
            for line in user(body).lines() {
                let Some(rest) = line.strip_prefix("[msg-") else {
                    continue;
                };
                let (n, rest) = rest.split_once("] (").unwrap();
                let (date, rest) = rest.split_once(' ').unwrap();
                let (_, said) = rest.split_once(") ").unwrap();
                let (speaker, text) = said.split_once(": ").unwrap();
                let lower = text.to_lowercase();
                let topic = TOPICS.iter().find(|k| lower.contains(*k)).unwrap_or(&"misc");
                let f = json!({"key": topic, "value": format!("{speaker} says {text}"),
                               "message_id": format!("msg-{n}"), "date": date});
                if lower.contains("yesterday") || lower.contains("ran ") {
                    events.push(json!({"key": topic, "value": format!("{speaker} recounts {text}"),
                                       "message_id": format!("msg-{n}"), "date": format!("Before {date}")}));
                } else {
                    facts.push(f);
                }
            }
            json!({"Factual_Information": facts, "Experiential_Information": events, "Subjective_Information": []})
                .to_string()
        }
        "reason" => {
            let n = user(body).lines().filter(|l| l.starts_with('[')).count();
            json!({"extended_insight": [
                {"inference_type": "Accumulation", "key": "recurring topic", "date": "2023-05-02 to 2023-05-04",
                 "value": format!("The topic comes back across {n} fragments")}
            ]})
            .to_string()
        }
        other => format!("unexpected stage {other}"),
    }
}

fn model_server(limit: usize) -> ScriptedServer {
    ScriptedServer::start(limit, |_, body| Reply::ok(chat_body(&answer(body)))).unwrap()
}

fn stages(server: &ScriptedServer) -> Vec<&'static str> {
    server.requests().iter().map(|r| stage(&r.body)).collect()
}

#[test]
fn llm_path_extracts_links_and_reasons_with_provenance() {
    let server = model_server(100);
    let llm: Arc<dyn Llm> = Arc::new(chat(&server, 5000, 0));
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), Some(llm.clone()));
    m.ingest("ann", &talk()).unwrap();
    m.flush("ann").unwrap();
    // One extraction per session, one reasoning call per linked pair.
    let seen = stages(&server);
    let count = |s: &str| seen.iter().filter(|x| **x == s).count();
    assert_eq!((count("extract"), count("reason"), count("unknown")), (3, 2, 0));
    assert_eq!(llm.stats().calls as usize, seen.len());
    assert_eq!(llm.stats().repairs, 0);
    // The extraction prompt lists the session with dates and weekdays.
    let first = &server.requests()[0];
    assert!(
        user(&first.body).contains("[msg-1] (2023-05-02 Tuesday) Ann: I adopted a grey cat"),
        "{}",
        user(&first.body)
    );
    let items = all_items(dir.path());
    let frags = of_kind(&items, &FRAGMENT_KINDS);
    assert_eq!(frags.len(), 12);
    let adopted = frags.iter().find(|f| f.text.contains("adopted")).unwrap();
    assert_eq!(adopted.kind, "experiential");
    assert!(
        adopted.text.starts_with("[Before 2 May 2023] cat: Ann recounts"),
        "{}",
        adopted.text
    );
    // Each reasoning fragment derives from every fragment of its pair
    // (2 + 2 here), as the prompt listed them.
    let n = check_provenance(dir.path());
    assert_eq!(n, 2);
    let store = Store::open(dir.path()).unwrap();
    for r in of_kind(&items, &[REASONING]) {
        assert_eq!(store.derived_from(r.id).unwrap().len(), 4, "{r:?}");
        assert_eq!(
            r.text,
            "[2 May 2023 to 4 May 2023] recurring topic (accumulation): The topic comes back across 4 fragments"
        );
        assert_eq!(r.refers_to, Some(1_683_158_400));
    }
    let reason_prompts: Vec<String> = server
        .requests()
        .iter()
        .filter(|r| stage(&r.body) == "reason")
        .map(|r| user(&r.body))
        .collect();
    assert!(
        reason_prompts[0].contains("cat: Ann says Pixel the cat hides"),
        "{}",
        reason_prompts[0]
    );
    let hits = m.retrieve("ann", "Where is the cat sleeping?", 3).unwrap();
    assert!(
        hits.iter().any(|h| h.item.text.contains("sleeps on my bed")),
        "{hits:?}"
    );
}

#[test]
fn malformed_answers_are_repaired_or_fail_typed_and_resume_loses_nothing() {
    // The first extraction answer is prose; the repair request succeeds.
    let server = ScriptedServer::start(100, |i, body| {
        if i == 0 {
            Reply::ok(chat_body("Sure! Ann has a cat and Bob runs."))
        } else {
            Reply::ok(chat_body(&answer(body)))
        }
    })
    .unwrap();
    let llm: Arc<dyn Llm> = Arc::new(chat(&server, 5000, 0));
    let dir = tempfile::tempdir().unwrap();
    let mut m = open(dir.path(), Some(llm.clone()));
    m.ingest("ann", &sessions()[0]).unwrap();
    m.flush("ann").unwrap();
    assert_eq!(llm.stats().repairs, 1);
    assert_eq!(of_kind(&all_items(dir.path()), &FRAGMENT_KINDS).len(), 4);
    let repair = &server.requests()[1].body;
    assert!(
        repair["messages"][3]["content"]
            .as_str()
            .unwrap()
            .contains("could not be used"),
        "{repair}"
    );

    let reference = tempfile::tempdir().unwrap();
    let clean = model_server(100);
    let mut m = open(reference.path(), Some(Arc::new(chat(&clean, 5000, 0))));
    m.ingest("ann", &talk()).unwrap();
    m.flush("ann").unwrap();

    // Reasoning answers are always malformed: a typed error after the
    // repair; the session's fragments are kept and the reasoning it owes
    // is done by the next run, with a working model.
    let bad = ScriptedServer::start(100, |_, body| {
        if stage(body) == "reason" {
            Reply::ok(chat_body("{\"insights\": []}"))
        } else {
            Reply::ok(chat_body(&answer(body)))
        }
    })
    .unwrap();
    let dir2 = tempfile::tempdir().unwrap();
    let mut m = open(dir2.path(), Some(Arc::new(chat(&bad, 5000, 0))));
    let err = m.ingest("ann", &talk()).unwrap_err();
    assert!(matches!(err, MemoryError::Llm(_)), "{err}");
    assert!(err.to_string().contains("extended_insight"), "{err}");
    assert_eq!(stages(&bad), ["extract", "extract", "reason", "reason"]);
    let kept = all_items(dir2.path());
    assert_eq!(of_kind(&kept, &FRAGMENT_KINDS).len(), 8, "two sessions extracted");
    assert!(of_kind(&kept, &[REASONING]).is_empty());
    let good = model_server(100);
    let mut m = open(dir2.path(), Some(Arc::new(chat(&good, 5000, 0))));
    m.flush("ann").unwrap();
    // No extraction is repeated: the owed reasoning, then session 3.
    assert_eq!(stages(&good), ["reason", "extract", "reason"]);
    assert_eq!(snapshot(dir2.path()), snapshot(reference.path()));

    // The server fails outright (HTTP 500) from its fourth request; a
    // working model resumes, and the result equals an uninterrupted run.
    let failing = ScriptedServer::start(100, |i, body| {
        if i >= 3 {
            Reply::status(500, "{\"error\": \"down\"}")
        } else {
            Reply::ok(chat_body(&answer(body)))
        }
    })
    .unwrap();
    let dir3 = tempfile::tempdir().unwrap();
    let mut m = open(dir3.path(), Some(Arc::new(chat(&failing, 5000, 0))));
    m.ingest("ann", &talk()).unwrap();
    let err = m.flush("ann").unwrap_err();
    assert!(matches!(err, MemoryError::Llm(_)), "{err}");
    assert!(err.to_string().contains("500"), "{err}");
    let done_before = of_kind(&all_items(dir3.path()), &FRAGMENT_KINDS).len();
    assert_eq!(done_before, 8, "progress before the failure is kept");
    let good = model_server(100);
    let mut m = open(dir3.path(), Some(Arc::new(chat(&good, 5000, 0))));
    m.process("ann", &mut |_, _| {}).unwrap();
    m.flush("ann").unwrap();
    assert_eq!(snapshot(dir3.path()), snapshot(reference.path()));
    assert!(good.requests().len() < clean.requests().len());
}

const LOCOMO: &str = r#"[{
  "sample_id": "dates-1",
  "conversation": {
    "speaker_a": "Ann", "speaker_b": "Bob",
    "session_1_date_time": "1:56 pm on 8 May, 2023",
    "session_1": [
      {"speaker": "Ann", "dia_id": "D1:1", "text": "I adopted a grey cat called Pixel yesterday."},
      {"speaker": "Bob", "dia_id": "D1:2", "text": "That is lovely news about the kitten."},
      {"speaker": "Ann", "dia_id": "D1:3", "text": "She sleeps on the sofa near the window."}
    ],
    "session_2_date_time": "10:00 am on 20 May, 2023",
    "session_2": [
      {"speaker": "Bob", "dia_id": "D2:1", "text": "I ran the Berlin marathon last Sunday."},
      {"speaker": "Ann", "dia_id": "D2:2", "text": "Pixel the cat learned to open the kitchen door."}
    ]
  },
  "qa": [
    {"question": "When did Ann adopt Pixel?", "answer": "7 May 2023", "evidence": ["D1:1"], "category": 2},
    {"question": "When did Bob run the Berlin marathon?", "answer": "14 May 2023", "evidence": ["D2:1"], "category": 2}
  ]
}]"#;

#[test]
fn resolved_dates_carry_the_answers_to_temporal_questions() {
    use dentate_memory::eval::{self, EvalOptions};
    let ds = dentate_memory::locomo::parse(LOCOMO).unwrap();
    let mut o = EvalOptions::new(PipelineKind::parse("rag").unwrap(), embedder());
    o.pipelines = vec![
        PipelineKind::parse("rag").unwrap().resolve_dates(false),
        PipelineKind::parse("premem").unwrap(),
        PipelineKind::parse("hema").unwrap().resolve_dates(false),
        PipelineKind::parse("hema").unwrap(),
        PipelineKind::parse("nemori").unwrap(),
        PipelineKind::parse("rag").unwrap(),
    ];
    o.ks = vec![3];
    let dir = tempfile::tempdir().unwrap();
    let out = eval::run(&ds, &o, dir.path(), &mut |_| {}).unwrap();
    let temporal: Vec<(String, f64, f64, f64)> = out
        .runs
        .iter()
        .map(|r| {
            let c = r.report.categories.iter().find(|c| c.category == Some(2)).unwrap();
            let m = &c.per_cut[0];
            (
                r.pipeline.clone(),
                m.mean_answer_recall.unwrap(),
                m.mean_recall.unwrap(),
                m.mean_rendered_answer_recall.unwrap(),
            )
        })
        .collect();
    // A resolved "yesterday" (7 May) and "last Sunday" (14 May) say the
    // whole answer: PREMem's fragment times, and RAG's, HEMA's and
    // Nemori's annotations (on by default; off for the first and third
    // runs). Without them the items say none of it: the session date
    // ("May 2023", not the day) is only the header the renderer adds,
    // which the older rendered figure credited with 2 of 3 words.
    for (i, t) in temporal.iter().enumerate() {
        let resolved = i != 0 && i != 2;
        let (want, rendered) = if resolved { (1.0, 1.0) } else { (0.0, 2.0 / 3.0) };
        assert!((t.1 - want).abs() < 1e-9, "{i}: {temporal:?}");
        assert!((t.3 - rendered).abs() < 1e-9, "{i}: {temporal:?}");
        assert_eq!(t.2, 1.0, "evidence found: {temporal:?}");
    }
    assert_eq!(temporal[1].0, "premem");
}
