//! The store conformance suite: every check runs unchanged against each
//! engine — the embedded SQLite store and PostgreSQL — as the compute
//! conformance suite does for the CPU and the GPU.
//!
//! PostgreSQL is reached through `DENTATE_TEST_POSTGRES` (a URL whose role
//! may create databases; `scripts/test.sh` starts a throwaway cluster and
//! sets it, with `DENTATE_REQUIRE_POSTGRES=1` so that a missing server is
//! a failure there). Each check gets a database of its own.

mod common;

use common::{conversation, embedder, msg};
use dentate_memory::store::Step;
use dentate_memory::store::{POSTGRES_SCHEMA_VERSION, SCHEMA_VERSION};
use dentate_memory::{
    ItemRef, ItemUpdate, Memory, MemoryError, NewItem, NewMessage, NewTriple, PipelineKind, Store, StoreLocation,
};
use std::sync::atomic::{AtomicUsize, Ordering};

/// One engine under test, with a fresh store location.
struct Engine {
    name: &'static str,
    loc: StoreLocation,
    _dir: tempfile::TempDir,
}

impl Engine {
    fn open(&self) -> Store {
        self.loc.open(Some(&self._dir.path().join("cache"))).unwrap()
    }
}

static DB: AtomicUsize = AtomicUsize::new(0);

/// The PostgreSQL server's admin URL, if the suite should use one.
fn postgres_admin() -> Option<String> {
    match std::env::var("DENTATE_TEST_POSTGRES") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            assert!(
                std::env::var_os("DENTATE_REQUIRE_POSTGRES").is_none(),
                "DENTATE_REQUIRE_POSTGRES is set but DENTATE_TEST_POSTGRES is not"
            );
            None
        }
    }
}

/// A fresh store of every engine available: SQLite always, PostgreSQL
/// when the suite has a server. `tag` names the check (in database names).
fn engines(tag: &str) -> Vec<Engine> {
    let mut out = vec![Engine {
        name: "sqlite",
        loc: StoreLocation::Sqlite(tempfile::tempdir().unwrap().keep()),
        _dir: tempfile::tempdir().unwrap(),
    }];
    match postgres_admin() {
        Some(admin) => {
            let name = format!(
                "dentate_{tag}_{}_{}",
                std::process::id(),
                DB.fetch_add(1, Ordering::Relaxed)
            );
            let url = Store::create_database(&admin, &name).unwrap();
            out.push(Engine {
                name: "postgres",
                loc: StoreLocation::parse(&url).unwrap(),
                _dir: tempfile::tempdir().unwrap(),
            });
        }
        None => eprintln!("{tag}: PostgreSQL not configured (DENTATE_TEST_POSTGRES); SQLite only"),
    }
    out
}

fn item(kind: &str, text: &str, sources: &[i64], vector: Option<Vec<f32>>) -> NewItem {
    NewItem {
        kind: kind.into(),
        text: text.into(),
        sources: sources.to_vec(),
        said_at: Some(1_700_000_000),
        refers_to: None,
        vector,
        parent: None,
    }
}

#[test]
fn messages_append_read_and_dedupe() {
    for e in engines("messages") {
        let mut s = e.open();
        let conv = conversation();
        let ids = s.append_messages("ann", &conv).unwrap();
        assert_eq!(ids.len(), 6, "{}", e.name);
        assert!(ids.windows(2).all(|w| w[0] < w[1]), "{}: ids increase", e.name);
        // The same messages again: nothing stored; a batch with a
        // duplicate inside stores it once; messages without ids always.
        assert!(s.append_messages("ann", &conv).unwrap().is_empty(), "{}", e.name);
        let twice = [msg(9, 1, "Ann", "New."), msg(9, 1, "Ann", "New.")];
        assert_eq!(s.append_messages("ann", &twice).unwrap().len(), 1, "{}", e.name);
        let anon = NewMessage {
            source_ref: None,
            ..msg(9, 2, "Bob", "No id.")
        };
        assert_eq!(
            s.append_messages("ann", &[anon.clone(), anon]).unwrap().len(),
            2,
            "{}",
            e.name
        );
        s.append_messages("bob", &conv[..2]).unwrap();

        let all = s.messages_after("ann", 0).unwrap();
        assert_eq!(all.len(), 9, "{}", e.name);
        assert_eq!(
            all.iter().map(|m| m.seq).collect::<Vec<_>>(),
            (0..9).collect::<Vec<_>>()
        );
        assert_eq!(all[0].msg, conv[0], "{}: stored as given", e.name);
        assert_eq!(s.messages_after("ann", ids[3]).unwrap().len(), 5, "{}", e.name);
        let mid = s.messages_in_seq("ann", 2, 4).unwrap();
        assert_eq!(mid.iter().map(|m| m.id).collect::<Vec<_>>(), vec![ids[2], ids[3]]);
        assert_eq!(
            s.messages(&[ids[4], 999_999, ids[1]]).unwrap().len(),
            2,
            "{}: missing skipped",
            e.name
        );
        assert_eq!(
            s.source_refs(&[ids[0], all[8].id]).unwrap(),
            vec!["D1:1".to_string(), format!("#{}", all[8].id)]
        );
        assert_eq!(s.users().unwrap(), vec!["ann", "bob"], "{}", e.name);
        assert_eq!(s.speakers("ann").unwrap(), vec!["Ann", "Bob"], "{}", e.name);
        assert_eq!(s.message_count("ann").unwrap(), 9, "{}", e.name);
        assert_eq!(s.message_count("bob").unwrap(), 2, "{}", e.name);
        assert_eq!(s.last_message_id("ann").unwrap(), all[8].id, "{}", e.name);
        assert_eq!(s.last_message_id("nobody").unwrap(), 0, "{}", e.name);
        let page = s.messages_page("ann", 3, 7).unwrap();
        assert_eq!(page.iter().map(|m| m.seq).collect::<Vec<_>>(), vec![7, 8], "{}", e.name);
        assert!(
            s.message_of("bob", ids[0]).unwrap().is_none(),
            "{}: another user's",
            e.name
        );
        // Bad input is a typed error and stores nothing.
        assert!(
            matches!(s.append_messages("../x", &conv), Err(MemoryError::Invalid(_))),
            "{}",
            e.name
        );
        assert_eq!(s.message_count("ann").unwrap(), 9, "{}", e.name);
        // A reopened store reads the same.
        drop(s);
        let s = e.open();
        assert_eq!(s.messages_after("ann", 0).unwrap(), all, "{}", e.name);
    }
}

#[test]
fn steps_items_vectors_provenance_and_state() {
    for e in engines("items") {
        let mut s = e.open();
        let m = s.append_messages("ann", &conversation()).unwrap();
        assert_eq!(s.progress("ann", "p").unwrap(), 0);
        let v = |x: f32| Some(vec![x, 0.5, -0.25, 1.0 / 3.0]);
        let mut parent_child = item("episode", "Ann adopted Pixel.", &[m[0]], v(0.1));
        parent_child.refers_to = Some(1_600_000_000);
        let mut child = item("fact", "Pixel is a cat.", &[m[0], m[1]], v(0.2));
        child.parent = Some(ItemRef::InStep(0));
        let step = Step {
            add: vec![parent_child, child, item("note", "no vector", &[m[2]], None)],
            state: vec![("summary".into(), "so far".into())],
            processed_through: Some(m[2]),
            turn: 3,
            derived: vec![(1, vec![ItemRef::InStep(0)])],
            ..Step::default()
        };
        let ids = s.commit("ann", "p", &step).unwrap();
        assert_eq!(ids.len(), 3, "{}", e.name);
        assert_eq!(s.progress("ann", "p").unwrap(), m[2], "{}", e.name);
        assert_eq!(s.state("ann", "p", "summary").unwrap().as_deref(), Some("so far"));
        assert_eq!(
            s.state("ann", "q", "summary").unwrap(),
            None,
            "{}: per pipeline",
            e.name
        );
        let items = s.items("ann", "p", None).unwrap();
        assert_eq!(items.len(), 3, "{}", e.name);
        assert_eq!(items[1].parent, Some(ids[0]), "{}", e.name);
        assert_eq!(items[1].sources, vec![m[0], m[1]], "{}", e.name);
        assert_eq!(items[0].refers_to, Some(1_600_000_000), "{}", e.name);
        assert_eq!(items[0].turn, 3, "{}", e.name);
        assert_eq!(s.items("ann", "p", Some("fact")).unwrap().len(), 1, "{}", e.name);
        assert!(s.items("bob", "p", None).unwrap().is_empty(), "{}", e.name);
        assert_eq!(s.derived_from(ids[1]).unwrap(), vec![ids[0]], "{}", e.name);
        // Vectors come back rounded through f16, the same on both engines.
        let vs = s.vectors("ann", "p", None).unwrap();
        assert_eq!(vs.len(), 2, "{}: only searchable items", e.name);
        assert_eq!(vs[0].0, ids[0]);
        assert_eq!(vs[0].2, vec![0.099975586, 0.5, -0.25, 0.33325195], "{}", e.name);
        assert_eq!(s.vector(ids[1]).unwrap().unwrap()[0], 0.19995117, "{}", e.name);
        assert_eq!(s.vector(ids[2]).unwrap(), None, "{}", e.name);
        assert_eq!(
            s.texts("ann", "p", Some("fact")).unwrap(),
            vec![(ids[1], "Pixel is a cat.".to_string())]
        );

        // An update: text, vector, more sources; a delete; more state.
        let step = Step {
            update: vec![ItemUpdate {
                id: ids[1],
                text: Some("Pixel is a grey cat.".into()),
                vector: v(0.3),
                parent: None,
                add_sources: vec![m[3]],
            }],
            delete: vec![ids[2]],
            state: vec![("summary".into(), "later".into())],
            processed_through: Some(m[5]),
            turn: 4,
            ..Step::default()
        };
        assert!(s.commit("ann", "p", &step).unwrap().is_empty());
        let it = s.item(ids[1]).unwrap().unwrap();
        assert_eq!(it.text, "Pixel is a grey cat.", "{}", e.name);
        assert_eq!(it.sources, vec![m[0], m[1], m[3]], "{}", e.name);
        assert!(s.item(ids[2]).unwrap().is_none(), "{}: deleted", e.name);
        // The batched lookup a search resolves its hits with: the order
        // asked, deleted and unknown ids skipped, each with its sources,
        // the same as one by one.
        let batch = s.items_by_id(&[ids[1], 987_654, ids[2], ids[0]]).unwrap();
        let one_by_one = vec![s.item(ids[1]).unwrap().unwrap(), s.item(ids[0]).unwrap().unwrap()];
        assert_eq!(batch, one_by_one, "{}", e.name);
        assert!(s.items_by_id(&[]).unwrap().is_empty(), "{}", e.name);
        // More ids than one IN list holds.
        let many: Vec<i64> = std::iter::repeat_n(ids[0], dentate_memory::store::IN_LIST + 3).collect();
        assert_eq!(s.items_by_id(&many).unwrap().len(), many.len(), "{}", e.name);
        let msgs = s.messages(&[m[3], m[0], 987_654, m[3]]).unwrap();
        assert_eq!(
            msgs.iter().map(|x| x.id).collect::<Vec<_>>(),
            vec![m[0], m[3]],
            "{}: id order, once each, unknown skipped",
            e.name
        );
        assert_eq!(s.state("ann", "p", "summary").unwrap().as_deref(), Some("later"));
        assert_eq!(s.progress("ann", "p").unwrap(), m[5]);

        // A bad step is refused whole: nothing of it is stored, and the
        // store goes on working.
        let bad = Step {
            add: vec![
                item("x", "first", &[m[0]], v(0.4)),
                NewItem {
                    parent: Some(ItemRef::InStep(5)),
                    ..item("x", "second", &[], None)
                },
            ],
            processed_through: Some(m[0]),
            ..Step::default()
        };
        assert!(
            matches!(s.commit("ann", "p", &bad), Err(MemoryError::Invalid(_))),
            "{}",
            e.name
        );
        assert!(
            s.items("ann", "p", Some("x")).unwrap().is_empty(),
            "{}: rolled back",
            e.name
        );
        assert_eq!(s.progress("ann", "p").unwrap(), m[5], "{}: progress unchanged", e.name);
        // A source that is no message breaks a foreign key: an error, and
        // nothing stored.
        let dangling = Step {
            add: vec![item("x", "dangling", &[987_654], None)],
            ..Step::default()
        };
        assert!(s.commit("ann", "p", &dangling).is_err(), "{}", e.name);
        assert!(s.items("ann", "p", Some("x")).unwrap().is_empty(), "{}", e.name);
        s.commit("ann", "p", &Step::default()).unwrap();
    }
}

#[test]
fn triples_and_neighbourhoods() {
    for e in engines("triples") {
        let mut s = e.open();
        let m = s.append_messages("ann", &conversation()).unwrap();
        let t = |i: usize, spo: [&str; 3]| NewTriple {
            item: ItemRef::InStep(i),
            subject: spo[0].into(),
            predicate: spo[1].into(),
            object: spo[2].into(),
        };
        let step = Step {
            add: (0..3)
                .map(|i| item("triple", &format!("t{i}"), &[m[i]], None))
                .collect(),
            triples: vec![
                t(0, ["Ann", "'s sister is", "Clara"]),
                t(1, ["Clara", "moves to", "Lisbon"]),
                t(2, ["Bob", "likes", "lentil soup"]),
            ],
            ..Step::default()
        };
        let ids = s.commit("ann", "g", &step).unwrap();
        assert_eq!(s.triples("ann", "g").unwrap().len(), 3, "{}", e.name);
        let about = s.triples_about("ann", "g", " the CLARA ").unwrap();
        assert_eq!(
            about.iter().map(|t| t.item_id).collect::<Vec<_>>(),
            vec![ids[0], ids[1]]
        );
        assert_eq!(about[0].sources, vec![m[0]], "{}", e.name);
        assert_eq!(
            s.triples_with_predicate("ann", "g", "Likes").unwrap()[0].object,
            "lentil soup"
        );
        let hood = s.neighbourhood("ann", "g", "Ann", 2).unwrap();
        assert_eq!(
            hood.iter().map(|(h, t)| (*h, t.item_id)).collect::<Vec<_>>(),
            vec![(1, ids[0]), (2, ids[1])],
            "{}",
            e.name
        );
        assert!(s.neighbourhood("ann", "g", "Ann", 3).is_err());
        assert!(s.triples("bob", "g").unwrap().is_empty(), "{}: per user", e.name);
        // A corrected triple leaves the graph; a forgotten one is not live.
        assert!(s.correct_item("ann", ids[1], "Clara moved.", None).unwrap());
        assert!(s.delete_item("ann", ids[2]).unwrap());
        assert_eq!(s.triples("ann", "g").unwrap().len(), 1, "{}", e.name);
    }
}

#[test]
fn corrections_forgetting_history_and_retrieval_marks() {
    for e in engines("history") {
        let mut s = e.open();
        let m = s.append_messages("ann", &conversation()).unwrap();
        let step = Step {
            add: vec![
                item("t", "one", &[m[0]], Some(vec![1.0, 0.0])),
                item("t", "two", &[m[1]], Some(vec![0.0, 1.0])),
            ],
            ..Step::default()
        };
        let ids = s.commit("ann", "p", &step).unwrap();
        assert!(
            !s.correct_item("bob", ids[0], "stolen", None).unwrap(),
            "{}: another user's item",
            e.name
        );
        assert!(s.correct_item("ann", ids[0], "uno", Some(&[0.5, 0.5])).unwrap());
        assert!(s.correct_item("ann", ids[0], "eins", None).unwrap());
        assert_eq!(
            s.vector(ids[0]).unwrap().unwrap(),
            vec![0.5, 0.5],
            "{}: kept when not given",
            e.name
        );
        assert!(s.delete_item("ann", ids[0]).unwrap());
        assert!(!s.delete_item("ann", ids[0]).unwrap(), "{}: already forgotten", e.name);
        let h = s.history("ann", ids[0]).unwrap();
        let events: Vec<_> = h
            .iter()
            .map(|c| (c.event.as_str(), c.old_text.as_deref(), c.new_text.as_deref()))
            .collect();
        assert_eq!(
            events,
            vec![
                ("add", None, Some("one")),
                ("correct", Some("one"), Some("uno")),
                ("correct", Some("uno"), Some("eins")),
                ("forget", Some("eins"), None)
            ],
            "{}",
            e.name
        );
        assert!(s.history("bob", ids[0]).unwrap().is_empty(), "{}", e.name);
        let rec = s.item_record(ids[0]).unwrap().unwrap();
        assert!(rec.deleted && rec.item.text == "eins", "{}", e.name);
        // Retrieval marks only move forward.
        s.record_retrieval("ann", &[ids[1]], 7).unwrap();
        s.record_retrieval("ann", &[ids[1]], 5).unwrap();
        s.record_retrieval("ann", &[ids[0]], 9).unwrap();
        assert_eq!(s.retrievals("ann", "p", None).unwrap(), vec![(ids[1], 7)], "{}", e.name);
        s.record_retrieval("ann", &[ids[1]], 8).unwrap();
        assert_eq!(s.retrievals("ann", "p", None).unwrap(), vec![(ids[1], 8)], "{}", e.name);
        assert_eq!(
            s.items_from_messages("ann", &[m[1], m[0]]).unwrap().len(),
            1,
            "{}",
            e.name
        );
    }
}

#[test]
fn erasure_receipts_are_exact() {
    for e in engines("erase") {
        let mut s = e.open();
        let m = s.append_messages("ann", &conversation()).unwrap();
        s.append_messages("bob", &conversation()[..2]).unwrap();
        // m0 → a; b's parent is a; c derives from b; d is from m1 only.
        let step = Step {
            add: vec![
                item("t", "a", &[m[0]], Some(vec![1.0])),
                NewItem {
                    parent: Some(ItemRef::InStep(0)),
                    ..item("t", "b", &[m[2]], None)
                },
                item("t", "c", &[m[3]], None),
                item("t", "d", &[m[1]], None),
            ],
            derived: vec![(2, vec![ItemRef::InStep(1)])],
            triples: vec![NewTriple {
                item: ItemRef::InStep(1),
                subject: "Ann".into(),
                predicate: "adopted".into(),
                object: "Pixel".into(),
            }],
            state: vec![("turn".into(), "1".into())],
            ..Step::default()
        };
        let ids = s.commit("ann", "p", &step).unwrap();
        s.correct_item("ann", ids[0], "a2", None).unwrap();
        assert!(
            matches!(s.erase_source("bob", m[0]), Err(MemoryError::NotFound { .. })),
            "{}",
            e.name
        );
        let r = s.erase_source("ann", m[0]).unwrap();
        assert_eq!(r.messages, vec![m[0]], "{}", e.name);
        assert_eq!(
            r.items,
            vec![ids[0], ids[1], ids[2]],
            "{}: closed over parent and derivation",
            e.name
        );
        assert_eq!((r.triples, r.derivations, r.history), (1, 1, 1), "{}", e.name);
        assert_eq!(
            s.items("ann", "p", None)
                .unwrap()
                .iter()
                .map(|i| i.id)
                .collect::<Vec<_>>(),
            vec![ids[3]]
        );
        assert!(!s.summarises("ann", "p").unwrap(), "{}: bookkeeping only", e.name);
        let r = s.erase_user("ann").unwrap();
        assert_eq!(r.messages, m[1..].to_vec(), "{}", e.name);
        assert_eq!(r.items, vec![ids[3]], "{}", e.name);
        assert_eq!(r.state, vec!["p/turn"], "{}", e.name);
        assert_eq!(s.rows_of_user("ann").unwrap(), 0, "{}", e.name);
        assert_eq!(
            s.message_count("bob").unwrap(),
            2,
            "{}: the other user untouched",
            e.name
        );
        assert_eq!(
            s.erase_user("ann").unwrap(),
            Default::default(),
            "{}: nothing left",
            e.name
        );
    }
}

/// Two connections writing one user at once (two workers): every message
/// stored once, positions contiguous.
#[test]
fn concurrent_writers_of_one_user_queue() {
    for e in engines("concurrent") {
        e.open();
        std::thread::scope(|sc| {
            for w in 0..2 {
                let e = &e;
                sc.spawn(move || {
                    let mut s = e.open();
                    for i in 0..25 {
                        s.append_messages("ann", &[msg(w + 1, i, "Ann", &format!("w{w} m{i}"))])
                            .unwrap();
                    }
                });
            }
        });
        let s = e.open();
        let all = s.messages_after("ann", 0).unwrap();
        assert_eq!(all.len(), 50, "{}", e.name);
        assert_eq!(
            all.iter().map(|m| m.seq).collect::<Vec<_>>(),
            (0..50).collect::<Vec<_>>(),
            "{}",
            e.name
        );
    }
}

/// A pipeline's stored items (kind, text, sources) and its answers.
type Outcome = (Vec<(String, String, Vec<i64>)>, Vec<Vec<String>>);

/// Every pipeline, offline, gives the same items and the same answers on
/// both engines.
#[test]
fn pipelines_answer_the_same_on_every_engine() {
    let engines = engines("pipelines");
    for kind in ["rag", "hema", "nemori", "amory", "premem"] {
        let mut seen: Option<Outcome> = None;
        for e in &engines {
            let store = e.open();
            let mut mem = Memory::with_store(store, PipelineKind::parse(kind).unwrap(), embedder(), None);
            let user = format!("u_{kind}");
            mem.ingest(&user, &conversation()).unwrap();
            mem.flush(&user).unwrap();
            let pipeline = PipelineKind::parse(kind).unwrap().name().to_string();
            let items: Vec<_> = mem
                .store()
                .items(&user, &pipeline, None)
                .unwrap()
                .into_iter()
                .map(|i| (i.kind, i.text, i.sources))
                .collect();
            assert!(!items.is_empty(), "{kind} on {}", e.name);
            let answers: Vec<Vec<String>> = ["Which city is Clara moving to?", "What did Bob repair?"]
                .iter()
                .map(|q| {
                    mem.retrieve(&user, q, 3)
                        .unwrap()
                        .into_iter()
                        .map(|h| h.item.text)
                        .collect()
                })
                .collect();
            assert!(answers.iter().all(|a| !a.is_empty()), "{kind} on {}", e.name);
            match &seen {
                None => seen = Some((items, answers)),
                Some((i0, a0)) => {
                    assert_eq!(&items, i0, "{kind}: items differ on {}", e.name);
                    assert_eq!(&answers, a0, "{kind}: answers differ on {}", e.name);
                }
            }
        }
    }
}

/// Migrations: a fresh store is at this build's version; a store from a
/// newer build is refused, untouched.
#[test]
fn schema_versions_are_tracked_and_newer_refused() {
    for e in engines("schema") {
        let s = e.open();
        let (want, newer) = match e.name {
            "sqlite" => (SCHEMA_VERSION, "PRAGMA user_version = 999"),
            _ => (POSTGRES_SCHEMA_VERSION, "UPDATE dentate_schema SET version = 999"),
        };
        assert_eq!(s.schema_version().unwrap(), want, "{}", e.name);
        assert_eq!(s.engine(), e.name);
        drop(s);
        match &e.loc {
            StoreLocation::Sqlite(d) => {
                rusqlite::Connection::open(d.join("memory.db"))
                    .unwrap()
                    .execute_batch(newer)
                    .unwrap();
            }
            StoreLocation::Postgres(u) => {
                postgres::Client::connect(u, postgres::NoTls)
                    .unwrap()
                    .batch_execute(newer)
                    .unwrap();
            }
        }
        let err = e.loc.open(None).unwrap_err().to_string();
        assert!(err.contains("schema version 999"), "{}: {err}", e.name);
    }
}

#[test]
fn store_locations_parse() {
    assert_eq!(
        StoreLocation::parse("sqlite:/x/y").unwrap(),
        StoreLocation::Sqlite("/x/y".into())
    );
    assert_eq!(
        StoreLocation::parse("mem").unwrap(),
        StoreLocation::Sqlite("mem".into())
    );
    assert!(matches!(
        StoreLocation::parse("postgresql://a@b/c").unwrap(),
        StoreLocation::Postgres(_)
    ));
    assert!(StoreLocation::parse("sqlite:").is_err());
    assert!(StoreLocation::parse("mysql://x").is_err());
    assert!(StoreLocation::parse(" ").is_err());
    assert_eq!(
        StoreLocation::parse("postgres://ann:pw@db/mem").unwrap().to_string(),
        "postgres://ann:***@db/mem"
    );
    assert_eq!(
        dentate_memory::store::with_database("postgres://a@h:5/postgres?sslmode=disable", "x").unwrap(),
        "postgres://a@h:5/x?sslmode=disable"
    );
    assert_eq!(
        dentate_memory::store::with_database("postgres://a@h", "x").unwrap(),
        "postgres://a@h/x"
    );
}

/// Versions: a handle's own writes keep it in step; another handle's
/// write is seen once.
#[test]
fn user_versions_tell_a_handle_what_changed_elsewhere() {
    for e in engines("versions") {
        let mut a = e.open();
        let mut b = e.open();
        assert_eq!(a.user_version("ann").unwrap(), 0, "{}", e.name);
        assert_eq!(a.changed_elsewhere("ann").unwrap(), Some(0), "{}: first look", e.name);
        assert_eq!(a.changed_elsewhere("ann").unwrap(), None, "{}", e.name);
        let m = a.append_messages("ann", &conversation()).unwrap();
        a.commit("ann", "p", &Step::default()).unwrap();
        assert_eq!(a.changed_elsewhere("ann").unwrap(), None, "{}: own writes", e.name);
        assert_eq!(a.user_version("ann").unwrap(), 1, "{}: appends change no cache", e.name);
        b.append_messages("ann", &[msg(5, 1, "Bob", "More.")]).unwrap();
        assert_eq!(a.changed_elsewhere("ann").unwrap(), None, "{}", e.name);
        b.erase_source("ann", m[0]).unwrap();
        assert_eq!(
            a.changed_elsewhere("ann").unwrap(),
            Some(2),
            "{}: the other's write",
            e.name
        );
        assert_eq!(a.changed_elsewhere("ann").unwrap(), None, "{}", e.name);
        // Another user's writes are not this user's.
        b.append_messages("bob", &conversation()).unwrap();
        assert_eq!(a.changed_elsewhere("ann").unwrap(), None, "{}", e.name);
        // Processing: one holder at a time (PostgreSQL); SQLite grants it.
        assert!(a.lock_user("ann", std::time::Duration::ZERO).unwrap());
        let other = b.lock_user("ann", std::time::Duration::from_millis(50)).unwrap();
        assert_eq!(other, e.name == "sqlite", "{}", e.name);
        a.unlock_user("ann").unwrap();
        assert!(
            b.lock_user("ann", std::time::Duration::from_millis(50)).unwrap(),
            "{}",
            e.name
        );
        drop(b);
        // A dropped connection lets go (a killed worker).
        assert!(
            a.lock_user("ann", std::time::Duration::from_secs(5)).unwrap(),
            "{}",
            e.name
        );
    }
}

/// Two memories on one store (two workers): what one ingests, corrects
/// and forgets, the other answers with at its next request, though it
/// had the user loaded.
#[test]
fn a_second_memory_on_the_same_store_serves_the_same_answers() {
    for e in engines("workers") {
        let open = |cache: &str| {
            let store = match &e.loc {
                StoreLocation::Sqlite(_) => e.open(),
                StoreLocation::Postgres(_) => e.loc.open(Some(&e._dir.path().join(cache))).unwrap(),
            };
            Memory::with_store(store, PipelineKind::parse("rag").unwrap(), embedder(), None)
        };
        let (mut a, mut b) = (open("a"), open("b"));
        a.ingest("ann", &conversation()[..3]).unwrap();
        let q = "Which city is Clara moving to?";
        let hit = b.retrieve("ann", q, 1).unwrap().remove(0);
        assert!(hit.item.text.contains("Lisbon"), "{}", e.name);
        a.ingest("ann", &conversation()[3..]).unwrap();
        let hit2 = b.retrieve("ann", "What did Bob repair?", 1).unwrap().remove(0);
        assert!(
            hit2.item.text.contains("bicycle"),
            "{}: appended on a, found on b",
            e.name
        );
        a.correct("ann", hit.item.id, "My sister Clara is moving to Porto instead.")
            .unwrap();
        let hit3 = b.retrieve("ann", q, 1).unwrap().remove(0);
        assert!(hit3.item.text.contains("Porto"), "{}: {}", e.name, hit3.item.text);
        a.forget("ann", hit3.item.id).unwrap();
        let ids: Vec<i64> = b.retrieve("ann", q, 6).unwrap().iter().map(|h| h.item.id).collect();
        assert!(!ids.contains(&hit3.item.id), "{}: forgotten on a, gone on b", e.name);
        // Same answers from both.
        let a_ids: Vec<i64> = a.retrieve("ann", q, 6).unwrap().iter().map(|h| h.item.id).collect();
        assert_eq!(a_ids, ids, "{}", e.name);
    }
}

/// The rows of an export after its header (which names the engine).
fn rows_of(export: &[u8]) -> Vec<String> {
    String::from_utf8(export.to_vec())
        .unwrap()
        .lines()
        .skip(1)
        .map(str::to_string)
        .collect()
}

/// Export on every engine, import into every engine: the same rows come
/// back with the same ids, and a memory on the copy answers as the
/// original; a second import of the user, and broken input, store nothing.
#[test]
fn exports_import_into_every_engine_with_the_same_rows() {
    let sources = engines("export_src");
    for src in &sources {
        let mut mem = Memory::with_store(src.open(), PipelineKind::parse("amory").unwrap(), embedder(), None);
        mem.ingest("ann", &conversation()).unwrap();
        mem.flush("ann").unwrap();
        let hit = mem
            .retrieve("ann", "Which city is Clara moving to?", 1)
            .unwrap()
            .remove(0);
        mem.correct("ann", hit.item.id, "My sister Clara is moving to Porto.")
            .unwrap();
        let want = mem.retrieve("ann", "Where is Clara going?", 3).unwrap();
        let mut export = Vec::new();
        let n = mem.store().export_user("ann", &mut export).unwrap();
        assert!(
            n.messages == 6 && n.items > 6 && n.sources > 0 && n.state > 0 && n.changes == 1,
            "{n:?}"
        );
        for dst in engines("export_dst") {
            let what = format!("{} -> {}", src.name, dst.name);
            let mut store = dst.open();
            let (user, m) = store.import_user(&mut export.as_slice(), None).unwrap();
            assert_eq!((user.as_str(), m), ("ann", n), "{what}");
            let mut again = Vec::new();
            store.export_user("ann", &mut again).unwrap();
            assert_eq!(rows_of(&again), rows_of(&export), "{what}: same rows, same ids");
            // Refused the second time, and under its own name only.
            let err = store.import_user(&mut export.as_slice(), None).unwrap_err().to_string();
            assert!(err.contains("already has rows"), "{what}: {err}");
            // New writes after an import get fresh ids (sequences moved on).
            let ids = store
                .append_messages("ann", &[msg(7, 1, "Ann", "After the copy.")])
                .unwrap();
            assert!(ids[0] > 6, "{what}: {ids:?}");
            let mut copy = Memory::with_store(store, PipelineKind::parse("amory").unwrap(), embedder(), None);
            let got = copy.retrieve("ann", "Where is Clara going?", 3).unwrap();
            assert_eq!(
                got.iter().map(|h| (h.item.id, h.item.text.clone())).collect::<Vec<_>>(),
                want.iter()
                    .map(|h| (h.item.id, h.item.text.clone()))
                    .collect::<Vec<_>>(),
                "{what}"
            );
        }
        // Broken input: a typed error naming the line, nothing stored.
        for dst in engines("export_broken") {
            let what = format!("{} -> {}", src.name, dst.name);
            let mut s = dst.open();
            let mut broken = export.clone();
            broken.extend_from_slice(b"{\"row\": \"item\", \"id\": \"x\"}\n");
            let err = s.import_user(&mut broken.as_slice(), Some("bob")).unwrap_err();
            assert!(matches!(err, MemoryError::Dataset(_)), "{what}: {err}");
            assert!(
                err.to_string().contains(&format!("line {}", n.total() + 2)),
                "{what}: {err}"
            );
            assert_eq!(s.rows_of_user("bob").unwrap(), 0, "{what}: rolled back");
            for junk in [&b""[..], b"not json\n", b"{\"format\": \"other\"}\n"] {
                assert!(s.import_user(&mut &junk[..], Some("bob")).is_err(), "{what}");
            }
        }
    }
}

#[test]
fn neighbours_of_messages_and_the_items_made_from_them() {
    for e in engines("adjacent") {
        let mut s = e.open();
        let a = s.append_messages("ann", &conversation()).unwrap();
        // Bob's messages interleave with Ann's ids: neighbours are per user.
        let b = s.append_messages("bob", &conversation()[..2]).unwrap();
        let more = s.append_messages("ann", &[msg(9, 1, "Ann", "later")]).unwrap();
        let ids = |ms: Vec<dentate_memory::Message>| ms.iter().map(|m| m.id).collect::<Vec<_>>();
        let around = s.adjacent_messages("ann", &[a[1], a[1], a[3]]).unwrap();
        assert_eq!(ids(around), [a[0], a[2], a[4]], "{}", e.name);
        // The first has nothing before it; the last of the first batch's
        // next is the later message, past Bob's.
        let last = *a.last().unwrap();
        assert_eq!(
            ids(s.adjacent_messages("ann", &[a[0], last]).unwrap()),
            [a[1], a[a.len() - 2], more[0]]
        );
        assert_eq!(ids(s.adjacent_messages("bob", &[b[0]]).unwrap()), [b[1]], "{}", e.name);
        assert!(s.adjacent_messages("ann", &[]).unwrap().is_empty());
        // Many at once (past one statement's 64).
        let all: Vec<i64> = (0..200).map(|i| a[0] + i).collect();
        assert!(s.adjacent_messages("ann", &all).unwrap().len() <= a.len() + 1);
        let step = Step {
            add: vec![
                item("turn", "t1", &[a[1]], None),
                item("turn", "t2", &[a[2]], None),
                item("episode", "e", &[a[1], a[2]], None),
            ],
            ..Step::default()
        };
        let made = s.commit("ann", "p", &step).unwrap();
        let got = s.items_of_messages("ann", "p", &[a[1], a[3]]).unwrap();
        assert_eq!(
            got,
            [
                (a[1], made[0], "turn".to_string()),
                (a[1], made[2], "episode".to_string())
            ],
            "{}",
            e.name
        );
        assert!(s.items_of_messages("ann", "other", &[a[1]]).unwrap().is_empty());
        assert!(s.items_of_messages("bob", "p", &[a[1]]).unwrap().is_empty());
        assert!(s.delete_item("ann", made[0]).unwrap());
        assert_eq!(
            s.items_of_messages("ann", "p", &[a[1]]).unwrap().len(),
            1,
            "{}: deleted",
            e.name
        );
    }
}
