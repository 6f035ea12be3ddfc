//! The memory service driven over real HTTP on a loopback socket: every
//! endpoint, every error path, tenant isolation, erasure with receipts and
//! no trace left, backpressure, and restart after shutdown.

mod common;

use common::{Server, config, files_containing};
use dentate_serve::{Registry, Role};
use serde_json::{Value, json};
use std::time::Duration;

fn msgs(texts: &[&str]) -> Value {
    json!({"messages": texts.iter().enumerate().map(|(i, t)| json!({
        "content": t, "role": if i % 2 == 0 { "user" } else { "assistant" },
        "session": "s1", "timestamp": format!("2023-05-{:02}T10:00:00Z", i + 1), "id": format!("m{i}")
    })).collect::<Vec<_>>()})
}

fn ids(v: &Value) -> Vec<i64> {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_i64().unwrap())
        .collect()
}

#[test]
fn every_endpoint_answers_as_documented() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(config(dir.path()), true);

    let h = s.call("GET", "/v1/health", None, None);
    assert_eq!((h.status, h.json["status"].as_str()), (200, Some("ok")));
    assert_eq!(h.json["pipelines"], json!(["rag"]));

    // Users.
    let r = s.json("POST", "/v1/users", None, json!({"user_id": "alice@example.com"}));
    assert_eq!(r.status, 201, "{}", r.text);
    let r = s.json("POST", "/v1/users", None, json!({"user_id": "alice@example.com"}));
    assert_eq!(r.status, 200);
    let r = s.call("GET", "/v1/users", None, None);
    assert_eq!(r.json["users"][0]["user_id"], "alice@example.com");

    // Messages: durable at 202, processed in the background.
    let texts = [
        "I adopted a greyhound named Biscuit",
        "That is lovely, how old is Biscuit?",
        "My sister Ana plays the cello in Porto",
        "Does she perform often?",
    ];
    let r = s.json("POST", "/v1/users/alice%40example.com/messages", None, msgs(&texts));
    assert_eq!(r.status, 202, "{}", r.text);
    let job = r.json["job_id"].as_i64().unwrap();
    assert_eq!(r.json["message_ids"].as_array().unwrap().len(), 4);
    // The same batch again stores nothing twice (same ids and texts).
    let again = s.json("POST", "/v1/users/alice@example.com/messages", None, msgs(&texts));
    assert_eq!(
        (again.json["skipped"].as_u64(), again.json.get("job_id")),
        (Some(4), None)
    );
    s.idle();
    let j = s.call("GET", &format!("/v1/jobs/{job}"), None, None);
    assert_eq!((j.status, j.json["state"].as_str()), (200, Some("done")), "{}", j.text);
    assert_eq!(j.json["user_id"], "alice@example.com");
    let u = s.call("GET", "/v1/users/alice@example.com", None, None);
    assert_eq!(u.json["messages"], 4);
    let m = s.call(
        "GET",
        "/v1/users/alice@example.com/messages?limit=2&offset=2",
        None,
        None,
    );
    assert_eq!(m.json["messages"][0]["content"], texts[2]);
    assert_eq!(m.json["messages"][0]["ref_id"], "m2");

    // Search by k, by budget, within a time range.
    let r = s.json(
        "POST",
        "/v1/users/alice@example.com/search",
        None,
        json!({"query": "greyhound Biscuit", "k": 2}),
    );
    assert_eq!(r.status, 200, "{}", r.text);
    let top = &r.json["results"][0];
    assert!(top["text"].as_str().unwrap().contains("greyhound"), "{}", r.text);
    assert!(top["score"].as_f64().unwrap() > 0.0);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let made = top["created_at"].as_i64().expect("created_at in search results");
    assert!((now - 600..=now + 5).contains(&made), "{}", r.text);
    assert_eq!(r.json["results"].as_array().unwrap().len(), 2);
    let biscuit = top["id"].as_i64().unwrap();
    let b = s.json(
        "POST",
        "/v1/users/alice@example.com/search",
        None,
        json!({"query": "cello", "budget": 30}),
    );
    assert_eq!(b.status, 200, "{}", b.text);
    let t = b.json["tokens"].as_u64().unwrap();
    assert!(t > 0 && t <= 30, "{}", b.text);
    assert!(!b.json["results"].as_array().unwrap().is_empty());
    let ranged = s.json(
        "POST",
        "/v1/users/alice@example.com/search",
        None,
        json!({"query": "greyhound", "k": 10, "from": "2023-05-03", "to": "2023-05-04T23:00:00Z"}),
    );
    let said: Vec<&str> = ranged.json["results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["said_at"].as_str().unwrap())
        .collect();
    assert_eq!(said.len(), 2, "{}", ranged.text);
    assert!(
        said.iter()
            .all(|d| d.starts_with("2023-05-03") || d.starts_with("2023-05-04"))
    );

    // Get with provenance; list.
    let g = s.call(
        "GET",
        &format!("/v1/users/alice@example.com/memories/{biscuit}"),
        None,
        None,
    );
    assert_eq!(g.status, 200);
    assert_eq!(g.json["sources"][0]["content"], texts[0]);
    assert_eq!(g.json["forgotten"], false);
    let l = s.call("GET", "/v1/users/alice@example.com/memories?limit=10", None, None);
    assert_eq!(l.json["results"].as_array().unwrap().len(), 4);

    // Correct, then history.
    let c = s.json(
        "PUT",
        &format!("/v1/users/alice@example.com/memories/{biscuit}"),
        None,
        json!({"text": "Alice adopted a whippet named Biscuit"}),
    );
    assert_eq!(
        (c.status, c.json["text"].as_str()),
        (200, Some("Alice adopted a whippet named Biscuit"))
    );
    let r = s.json(
        "POST",
        "/v1/users/alice@example.com/search",
        None,
        json!({"query": "whippet", "k": 1}),
    );
    assert_eq!(ids(&r.json), vec![biscuit]);

    // Context.
    let ctx = s.json(
        "POST",
        "/v1/users/alice@example.com/context",
        None,
        json!({"question": "What instrument does Ana play?", "budget": 400}),
    );
    assert_eq!(ctx.status, 200, "{}", ctx.text);
    assert!(ctx.json["prompt"].as_str().unwrap().contains("cello"));
    assert!(ctx.json["tokens"].as_u64().unwrap() <= 400);

    // Forget: out of search and lists, history kept.
    let f = s.call(
        "DELETE",
        &format!("/v1/users/alice@example.com/memories/{biscuit}"),
        None,
        None,
    );
    assert_eq!(f.status, 204);
    let r = s.json(
        "POST",
        "/v1/users/alice@example.com/search",
        None,
        json!({"query": "whippet Biscuit", "k": 10}),
    );
    assert!(!ids(&r.json).contains(&biscuit));
    let g = s.call(
        "GET",
        &format!("/v1/users/alice@example.com/memories/{biscuit}"),
        None,
        None,
    );
    assert_eq!(g.json["forgotten"], true);
    let h = s.call(
        "GET",
        &format!("/v1/users/alice@example.com/memories/{biscuit}/history"),
        None,
        None,
    );
    let events: Vec<&str> = h.json["history"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(events, ["add", "correct", "forget"]);
    assert_eq!(h.json["history"][0]["new_text"], format!("user: {}", texts[0]));
    assert_eq!(
        s.call(
            "DELETE",
            &format!("/v1/users/alice@example.com/memories/{biscuit}"),
            None,
            None
        )
        .status,
        404
    );

    // Erase one source message: its memory goes, the others stay.
    let cello_msg = m.json["messages"][0]["id"].as_i64().unwrap();
    let e = s.call(
        "DELETE",
        &format!("/v1/users/alice@example.com/messages/{cello_msg}"),
        None,
        None,
    );
    assert_eq!(e.status, 200, "{}", e.text);
    assert_eq!(e.json["messages"], json!([cello_msg]));
    assert_eq!(e.json["memories"].as_array().unwrap().len(), 1);
    let l = s.call("GET", "/v1/users/alice@example.com/memories", None, None);
    assert_eq!(l.json["results"].as_array().unwrap().len(), 2);

    // Erase the memories, keep the user; then erase the user.
    let e = s.call("DELETE", "/v1/users/alice@example.com/memories", None, None);
    assert_eq!(e.status, 200);
    assert_eq!(e.json["messages"].as_array().unwrap().len(), 3);
    assert_eq!(
        s.call("GET", "/v1/users/alice@example.com", None, None).json["messages"],
        0
    );
    let e = s.call("DELETE", "/v1/users/alice@example.com", None, None);
    assert_eq!(e.status, 200);
    assert_eq!(s.call("GET", "/v1/users/alice@example.com", None, None).status, 404);

    // The OpenAPI document names every route; metrics count requests.
    let doc = s.call("GET", "/openapi.json", None, None);
    for p in [
        "/v1/health",
        "/v1/users",
        "/v1/users/{user_id}",
        "/v1/users/{user_id}/messages",
        "/v1/users/{user_id}/messages/{message_id}",
        "/v1/jobs/{job_id}",
        "/v1/users/{user_id}/search",
        "/v1/users/{user_id}/memories",
        "/v1/users/{user_id}/memories/{memory_id}",
        "/v1/users/{user_id}/memories/{memory_id}/history",
        "/v1/users/{user_id}/context",
        "/mem0/memories",
        "/mem0/memories/{memory_id}",
        "/mem0/memories/{memory_id}/history",
        "/mem0/search",
    ] {
        assert!(
            doc.json["paths"].get(p).is_some(),
            "{p} missing from the OpenAPI document"
        );
    }
    let met = s.call("GET", "/metrics", None, None);
    assert!(
        met.text.contains(
            "dentate_http_requests_total{route=\"/v1/users/{user_id}/search\",method=\"POST\",status=\"200\"}"
        )
    );
    assert!(met.text.contains("dentate_ingest_jobs_total{state=\"done\"}"));
    assert!(met.text.contains("dentate_ingest_queue_depth 0"));
}

#[test]
fn the_mem0_shapes_work_end_to_end() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(config(dir.path()), true);
    let add = s.json(
        "POST",
        "/mem0/memories",
        None,
        json!({"messages": [{"role": "user", "content": "I am vegetarian and allergic to nuts"}], "user_id": "u1", "metadata": {"src": "chat"}}),
    );
    assert_eq!(add.status, 200, "{}", add.text);
    assert_eq!(add.json["results"][0]["event"], "ADD");
    let id = add.json["results"][0]["id"].as_str().unwrap().to_string();
    let found = s.json(
        "POST",
        "/mem0/search",
        None,
        json!({"query": "nuts allergy", "user_id": "u1"}),
    );
    assert_eq!(found.json["results"][0]["id"], id.as_str());
    assert!(found.json["results"][0]["score"].as_f64().is_some());
    assert!(
        found.json["results"][0]["created_at"]
            .as_str()
            .is_some_and(|t| t.starts_with("20")),
        "{}",
        found.text
    );
    assert_eq!(found.json["results"][0]["user_id"], "u1");
    // filters name the user too.
    let f = s.json(
        "POST",
        "/mem0/search",
        None,
        json!({"query": "nuts", "filters": {"user_id": "u1"}, "top_k": 1}),
    );
    assert_eq!(f.json["results"].as_array().unwrap().len(), 1);
    let all = s.call("GET", "/mem0/memories?user_id=u1", None, None);
    assert_eq!(
        all.json["results"][0]["memory"],
        "user: I am vegetarian and allergic to nuts"
    );
    let one = s.call("GET", &format!("/mem0/memories/{id}"), None, None);
    assert_eq!((one.status, one.json["id"].as_str()), (200, Some(id.as_str())));
    let up = s.json(
        "PUT",
        &format!("/mem0/memories/{id}"),
        None,
        json!({"text": "Vegan, allergic to nuts"}),
    );
    assert_eq!(up.json["message"], "Memory updated successfully!");
    let hist = s.call("GET", &format!("/mem0/memories/{id}/history"), None, None);
    let ev: Vec<&str> = hist
        .json
        .as_array()
        .unwrap()
        .iter()
        .map(|h| h["event"].as_str().unwrap())
        .collect();
    assert_eq!(ev, ["ADD", "UPDATE"]);
    assert_eq!(hist.json[1]["new_memory"], "Vegan, allergic to nuts");
    let del = s.call("DELETE", &format!("/mem0/memories/{id}"), None, None);
    assert_eq!(del.json["message"], "Memory deleted successfully");
    assert_eq!(s.call("GET", &format!("/mem0/memories/{id}"), None, None).status, 404);
    assert_eq!(s.call("GET", "/mem0/memories/not-an-id", None, None).status, 404);
    let add2 = s.json(
        "POST",
        "/mem0/memories",
        None,
        json!({"messages": [{"role": "user", "content": "I live in Oslo"}], "agent_id": "u1"}),
    );
    assert_eq!(add2.status, 200);
    let gone = s.call("DELETE", "/mem0/memories?user_id=u1", None, None);
    assert_eq!(gone.json["message"], "All relevant memories deleted");
    assert!(
        s.call("GET", "/mem0/memories?user_id=u1", None, None).json["results"]
            .as_array()
            .unwrap()
            .is_empty()
    );
    let missing = s.json(
        "POST",
        "/mem0/memories",
        None,
        json!({"messages": [{"role": "user", "content": "x"}]}),
    );
    assert_eq!((missing.status, missing.code()), (400, "bad_request"));
    // mem0's `Token KEY` scheme is accepted once keys exist.
    let (_, key) = Registry::open(dir.path())
        .unwrap()
        .create_key("default", Role::Write)
        .unwrap();
    let r = common::call(&format!("{}/mem0/memories?user_id=u1", s.url), "GET", None, None);
    assert_eq!(r.status, 401);
    let a: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let ok = a
        .get(format!("{}/mem0/memories?user_id=u1", s.url))
        .header("Authorization", format!("Token {key}"))
        .call()
        .unwrap();
    assert_eq!(ok.status().as_u16(), 200);
}

#[test]
fn bad_input_is_a_4xx_that_names_the_problem() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(config(dir.path()), true);
    let r = s.json("POST", "/v1/users/u/messages", None, msgs(&["hello there", "hi"]));
    assert_eq!(r.status, 202);
    s.idle();
    let long_query = "q".repeat(9000);
    let many: Vec<Value> = (0..1001).map(|i| json!({"content": format!("m{i}")})).collect();
    let cases: Vec<(&str, String, Option<String>, u16, &str)> = vec![
        ("POST", "/v1/users/u/search".into(), Some("{bad".into()), 400, "JSON"),
        (
            "POST",
            "/v1/users/u/search".into(),
            Some(r#"{"query":"x","kk":3}"#.into()),
            400,
            "unknown field",
        ),
        (
            "POST",
            "/v1/users/u/search".into(),
            Some(r#"{"query":"x","k":0}"#.into()),
            400,
            "k is 0",
        ),
        (
            "POST",
            "/v1/users/u/search".into(),
            Some(r#"{"query":"x","k":18446744073709551615}"#.into()),
            400,
            "k is",
        ),
        (
            "POST",
            "/v1/users/u/search".into(),
            Some(r#"{"query":"x","k":-1}"#.into()),
            400,
            "",
        ),
        (
            "POST",
            "/v1/users/u/search".into(),
            Some(r#"{"query":"x","k":2,"budget":9}"#.into()),
            400,
            "not both",
        ),
        (
            "POST",
            "/v1/users/u/search".into(),
            Some(r#"{"query":"   "}"#.into()),
            400,
            "empty",
        ),
        (
            "POST",
            "/v1/users/u/search".into(),
            Some(json!({"query": long_query}).to_string()),
            400,
            "limit",
        ),
        (
            "POST",
            "/v1/users/u/search".into(),
            Some(r#"{"query":"x","from":"yesterday"}"#.into()),
            400,
            "ISO 8601",
        ),
        (
            "POST",
            "/v1/users/u/search".into(),
            Some(r#"{"query":"x","from":"2024-01-02","to":"2024-01-01"}"#.into()),
            400,
            "after",
        ),
        (
            "POST",
            "/v1/users/u/search".into(),
            Some(r#"{"query":"x","pipeline":"nope"}"#.into()),
            400,
            "not served",
        ),
        (
            "POST",
            "/v1/users/nobody/search".into(),
            Some(r#"{"query":"x"}"#.into()),
            404,
            "no user",
        ),
        (
            "POST",
            "/v1/users/u/messages".into(),
            Some(r#"{"messages":[]}"#.into()),
            400,
            "1 to 1000",
        ),
        (
            "POST",
            "/v1/users/u/messages".into(),
            Some(json!({"messages": many}).to_string()),
            400,
            "1 to 1000",
        ),
        (
            "POST",
            "/v1/users/u/messages".into(),
            Some(r#"{"messages":[{"content":""}]}"#.into()),
            400,
            "empty",
        ),
        (
            "POST",
            "/v1/users/u/messages".into(),
            Some(r#"{"messages":[{"content":"x","timestamp":"99999-01-01"}]}"#.into()),
            400,
            "timestamp",
        ),
        (
            "POST",
            "/v1/users/u/messages".into(),
            Some(r#"{"messages":[{"content":"x","role":""}]}"#.into()),
            400,
            "role",
        ),
        (
            "POST",
            "/v1/users".into(),
            Some(r#"{"user_id":"a\u0000b"}"#.into()),
            400,
            "printable",
        ),
        (
            "POST",
            "/v1/users".into(),
            Some(json!({"user_id": "x".repeat(300)}).to_string()),
            400,
            "1-256",
        ),
        ("GET", "/v1/users/u/memories/abc".into(), None, 400, ""),
        ("GET", "/v1/users/u/memories/-5".into(), None, 404, "no memory"),
        ("GET", "/v1/users/u/memories/99999999".into(), None, 404, "no memory"),
        ("GET", "/v1/users/u/memories?limit=0".into(), None, 400, "limit"),
        ("GET", "/v1/users/u/memories?limit=x".into(), None, 400, ""),
        ("GET", "/v1/users/u/memories?bogus=1".into(), None, 400, "unknown field"),
        (
            "PUT",
            "/v1/users/u/memories/1".into(),
            Some(r#"{"text":" "}"#.into()),
            400,
            "empty",
        ),
        (
            "POST",
            "/v1/users/u/context".into(),
            Some(r#"{"question":"why","budget":10}"#.into()),
            400,
            "budget",
        ),
        ("GET", "/v1/jobs/777".into(), None, 404, "no job"),
        ("DELETE", "/v1/users/u/messages/424242".into(), None, 404, "no message"),
        ("GET", "/v1/nowhere".into(), None, 404, "no such route"),
        ("PATCH", "/v1/users".into(), Some("{}".into()), 405, ""),
    ];
    for (method, path, body, status, reason) in cases {
        let r = s.call(method, &path, None, body.as_deref());
        assert_eq!(r.status, status, "{method} {path}: {}", r.text);
        assert!(
            r.json["error"]["code"].is_string(),
            "{method} {path}: not the error shape: {}",
            r.text
        );
        let msg = r.json["error"]["message"].as_str().unwrap();
        assert!(msg.contains(reason), "{method} {path}: `{msg}` does not say `{reason}`");
    }
    // A body over the 4 MiB cap is refused with 413 in the error shape.
    // The server answers as soon as it knows (from Content-Length, or
    // once a chunked body passes the cap) and stops reading, so a client
    // still writing may see its socket closed: speak raw TCP, write the
    // body from another thread, and read the answer regardless.
    for chunked in [false, true] {
        let r = over_limit(&s.url, "/v1/users/u/messages", 5 * 1024 * 1024, chunked);
        assert!(r.starts_with("HTTP/1.1 413"), "chunked={chunked}: {r}");
        assert!(r.contains("\"code\""), "chunked={chunked}: not the error shape: {r}");
    }
    // A body that is not JSON at all, with the wrong content type.
    let a: ureq::Agent = ureq::Agent::config_builder().http_status_as_error(false).build().into();
    let r = a
        .post(format!("{}/v1/users/u/search", s.url))
        .content_type("text/plain")
        .send("query")
        .unwrap();
    assert_eq!(r.status().as_u16(), 400);
}

/// Index files (`.dnt`, `.lex`) in `dir`.
fn index_files(dir: &std::path::Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str().map(str::to_string))
        .filter(|n| n.ends_with(".dnt") || n.ends_with(".lex"))
        .collect();
    v.sort();
    v
}

/// The server writes a user's index files only once the user's changes
/// are `save_after` old, and at shutdown; until then they are absent (a
/// crash rebuilds them from the store) and answers are the same.
#[test]
fn index_files_are_written_late_and_at_shutdown() {
    let search = |s: &Server| {
        let r = s.json(
            "POST",
            "/v1/users/u/search",
            None,
            json!({"query": "pottery kiln", "k": 3}),
        );
        assert_eq!(r.status, 200, "{}", r.text);
        ids(&r.json)
    };
    // A long delay: nothing is written until the server stops.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.save_after = Duration::from_secs(3600);
    let s = Server::start(cfg.clone(), true);
    let r = s.json(
        "POST",
        "/v1/users/u/messages",
        None,
        msgs(&["I fired a pottery kiln today", "the glaze cracked", "next week: raku"]),
    );
    assert_eq!(r.status, 202);
    s.idle();
    let before = search(&s);
    assert!(!before.is_empty());
    assert!(index_files(dir.path()).is_empty(), "{:?}", index_files(dir.path()));
    s.stop();
    let written = index_files(dir.path());
    assert_eq!(written.len(), 2, "{written:?}");
    let s = Server::start(cfg, true);
    assert_eq!(search(&s), before);
    s.stop();
    // A short delay: the persister writes them while the server runs.
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.save_after = Duration::from_millis(100);
    let s = Server::start(cfg, true);
    let r = s.json("POST", "/v1/users/u/messages", None, msgs(&["the pottery kiln is hot"]));
    assert_eq!(r.status, 202);
    s.idle();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while index_files(dir.path()).len() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the persister never wrote the files"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(search(&s).len(), 1);
}

/// Requests' store handles never checkpoint (a checkpoint syncs the log
/// and the database): the server's checkpointer copies the log into
/// `memory.db` while it runs, so the database file grows with what was
/// ingested (with nobody checkpointing, it would stay at its first pages
/// and the log would grow without end).
#[test]
fn the_checkpointer_copies_the_log_while_the_server_runs() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(config(dir.path()), true);
    let db = dir.path().join("memory.db");
    let start = std::fs::metadata(&db).unwrap().len();
    for b in 0..16 {
        let texts: Vec<String> = (0..25)
            .map(|i| format!("batch {b} message {i} about the pottery kiln, the glaze and the raku firing"))
            .collect();
        let texts: Vec<&str> = texts.iter().map(String::as_str).collect();
        let r = s.json("POST", "/v1/users/u/messages", None, msgs(&texts));
        assert_eq!(r.status, 202, "{}", r.text);
    }
    s.idle();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    loop {
        let len = std::fs::metadata(&db).unwrap().len();
        if len >= start + 256 * 1024 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "memory.db stayed at {len} bytes (from {start}): nothing checkpointed"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    s.stop();
}

/// POST `len` bytes of a JSON body to `path` over a raw socket, by
/// Content-Length or chunked, and return what the server answered.
fn over_limit(url: &str, path: &str, len: usize, chunked: bool) -> String {
    use std::io::{Read, Write};
    let addr = url.trim_start_matches("http://");
    let mut sock = std::net::TcpStream::connect(addr).unwrap();
    sock.set_read_timeout(Some(std::time::Duration::from_secs(30))).unwrap();
    let framing = if chunked {
        "Transfer-Encoding: chunked".to_string()
    } else {
        format!("Content-Length: {len}")
    };
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\n{framing}\r\nConnection: close\r\n\r\n"
    );
    sock.write_all(head.as_bytes()).unwrap();
    let mut writer = sock.try_clone().unwrap();
    let feed = std::thread::spawn(move || {
        // Errors are expected once the server has answered and closed.
        let body = format!("{{\"messages\":[{{\"content\":\"{}\"}}]}}", "x".repeat(len));
        for part in body.as_bytes().chunks(64 * 1024) {
            let sent = if chunked {
                writer
                    .write_all(format!("{:x}\r\n", part.len()).as_bytes())
                    .and_then(|_| writer.write_all(part))
                    .and_then(|_| writer.write_all(b"\r\n"))
            } else {
                writer.write_all(part)
            };
            if sent.is_err() {
                return;
            }
        }
        if chunked {
            let _ = writer.write_all(b"0\r\n\r\n");
        }
    });
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    // Read until the server closes (Connection: close) or resets.
    while let Ok(n) = sock.read(&mut buf) {
        if n == 0 {
            break;
        }
        answer.extend_from_slice(&buf[..n]);
    }
    let _ = sock.shutdown(std::net::Shutdown::Both);
    feed.join().unwrap();
    String::from_utf8_lossy(&answer).into_owned()
}

/// Keys of tenant B against every route with tenant A's ids: never
/// anything but "not found" (or a role refusal), never A's text.
#[test]
fn tenants_cannot_see_or_touch_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let reg = Registry::open(dir.path()).unwrap();
    let (_, a_write) = reg.create_key("tenant-a", Role::Write).unwrap();
    let (_, a_admin) = reg.create_key("tenant-a", Role::Admin).unwrap();
    let (_, b_admin) = reg.create_key("tenant-b", Role::Admin).unwrap();
    let (b_read_info, b_read) = reg.create_key("tenant-b", Role::Read).unwrap();
    let s = Server::start(config(dir.path()), true);

    // Without a key, or with a bad one: 401 everywhere (health aside).
    assert_eq!(s.call("GET", "/v1/users", None, None).status, 401);
    assert_eq!(
        s.call("GET", "/v1/users", Some("dnt_000000000000_nope"), None).status,
        401
    );
    assert_eq!(s.call("GET", "/v1/users", Some("garbage"), None).status, 401);
    assert_eq!(s.call("GET", "/metrics", None, None).status, 401);
    assert_eq!(s.call("GET", "/v1/health", None, None).status, 200);

    // Tenant A stores secrets for users that tenant B also names.
    let mut a_memories = Vec::new();
    let mut a_messages = Vec::new();
    let mut jobs = Vec::new();
    for user in ["shared-name", "alice"] {
        let r = s.json(
            "POST",
            &format!("/v1/users/{user}/messages"),
            Some(&a_write),
            msgs(&[&format!("SECRET-{user} the vault code is 4471"), "noted"]),
        );
        assert_eq!(r.status, 202, "{}", r.text);
        jobs.push(r.json["job_id"].as_i64().unwrap());
        a_messages.extend(
            r.json["message_ids"]
                .as_array()
                .unwrap()
                .iter()
                .map(|v| v.as_i64().unwrap()),
        );
    }
    s.idle();
    for user in ["shared-name", "alice"] {
        let l = s.call("GET", &format!("/v1/users/{user}/memories"), Some(&a_write), None);
        a_memories.extend(ids(&l.json));
    }
    assert_eq!(a_memories.len(), 4);
    // Tenant B has its own user of the same name.
    let r = s.json(
        "POST",
        "/v1/users/shared-name/messages",
        Some(&b_admin),
        msgs(&["B's own note"]),
    );
    assert_eq!(r.status, 202);
    s.idle();

    // Randomised: B's keys × A's ids × every route.
    let mut rng = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = |n: usize| {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        (rng % n as u64) as usize
    };
    for round in 0..120 {
        let key = if next(2) == 0 { &b_admin } else { &b_read };
        let mem = a_memories[next(a_memories.len())];
        let msg = a_messages[next(a_messages.len())];
        let job = jobs[next(jobs.len())];
        let user = ["alice", "shared-name"][next(2)];
        let (method, path, body): (&str, String, Option<String>) = match round % 14 {
            0 => ("GET", format!("/v1/users/{user}/memories/{mem}"), None),
            1 => (
                "PUT",
                format!("/v1/users/{user}/memories/{mem}"),
                Some(r#"{"text":"pwned"}"#.into()),
            ),
            2 => ("DELETE", format!("/v1/users/{user}/memories/{mem}"), None),
            3 => ("GET", format!("/v1/users/{user}/memories/{mem}/history"), None),
            4 => (
                "POST",
                format!("/v1/users/{user}/search"),
                Some(r#"{"query":"SECRET vault code","k":50}"#.into()),
            ),
            5 => ("GET", format!("/v1/users/{user}/memories"), None),
            6 => ("GET", format!("/v1/users/{user}/messages"), None),
            7 => ("DELETE", format!("/v1/users/{user}/messages/{msg}"), None),
            8 => ("GET", format!("/v1/jobs/{job}"), None),
            9 => ("GET", format!("/mem0/memories/{mem}"), None),
            10 => (
                "PUT",
                format!("/mem0/memories/{mem}"),
                Some(r#"{"text":"pwned"}"#.into()),
            ),
            11 => ("DELETE", format!("/mem0/memories/{mem}"), None),
            12 => ("GET", format!("/mem0/memories/{mem}/history"), None),
            _ => (
                "POST",
                format!("/v1/users/{user}/context"),
                Some(r#"{"question":"what is the vault code?"}"#.into()),
            ),
        };
        let r = s.call(method, &path, Some(key), body.as_deref());
        assert!(!r.text.contains("SECRET"), "{method} {path} leaked: {}", r.text);
        assert!(!r.text.contains("4471"), "{method} {path} leaked: {}", r.text);
        let allowed: &[u16] = if user == "shared-name" && matches!(round % 14, 4 | 5 | 6 | 13) {
            // B's own user of that name: B sees B's data only.
            &[200]
        } else if key == &b_read && matches!(method, "PUT" | "DELETE") {
            &[403, 404]
        } else {
            &[404]
        };
        assert!(
            allowed.contains(&r.status),
            "{method} {path} with B's key: {} {}",
            r.status,
            r.text
        );
    }
    // B's listing names only B's users.
    let users = s.call("GET", "/v1/users", Some(&b_admin), None);
    assert_eq!(users.json["users"].as_array().unwrap().len(), 1);
    // A's data is intact.
    let l = s.call("GET", "/v1/users/alice/memories", Some(&a_write), None);
    assert_eq!(ids(&l.json).len(), 2);
    assert!(l.text.contains("SECRET-alice"));

    // Roles: read cannot write; write cannot erase a user; admin can.
    let r = s.json("POST", "/v1/users/shared-name/messages", Some(&b_read), msgs(&["x"]));
    assert_eq!((r.status, r.code()), (403, "forbidden"));
    assert_eq!(s.call("DELETE", "/v1/users/alice", Some(&a_write), None).status, 403);
    assert_eq!(s.call("DELETE", "/v1/users/alice", Some(&b_admin), None).status, 404);
    assert_eq!(s.call("DELETE", "/v1/users/alice", Some(&a_admin), None).status, 200);

    // A key revoked while the server runs stops working at once.
    assert_eq!(s.call("GET", "/v1/users", Some(&b_read), None).status, 200);
    assert!(reg.revoke(&b_read_info.id).unwrap());
    assert_eq!(s.call("GET", "/v1/users", Some(&b_read), None).status, 401);
}

/// Erasing a source or a user leaves no trace: not in search, get or
/// lists, not in the store's tables, not in any file of the directory.
#[test]
fn erasure_leaves_no_trace_in_answers_tables_or_files() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(config(dir.path()), true);
    let r = s.json(
        "POST",
        "/v1/users/carol/messages",
        None,
        msgs(&[
            "My passport number is ZQXJ8812 keep it safe",
            "I will remember ZQXJ8812",
            "Carol likes hiking in the Dolomites",
        ]),
    );
    let m = r.json["message_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_i64().unwrap())
        .collect::<Vec<_>>();
    let r2 = s.json(
        "POST",
        "/v1/users/dave/messages",
        None,
        msgs(&["Dave's token is WVKP5521 in the drawer"]),
    );
    assert_eq!(r2.status, 202);
    s.idle();
    // A search first, so the indexes are loaded and saved.
    let found = s.json(
        "POST",
        "/v1/users/carol/search",
        None,
        json!({"query": "passport ZQXJ8812", "k": 5}),
    );
    assert!(found.text.contains("ZQXJ8812"));
    assert!(!files_containing(dir.path(), "ZQXJ8812").is_empty());

    // Erase the two messages that carry the token.
    let mut erased = Vec::new();
    for id in &m[..2] {
        let e = s.call("DELETE", &format!("/v1/users/carol/messages/{id}"), None, None);
        assert_eq!(e.status, 200, "{}", e.text);
        assert_eq!(e.json["messages"], json!([id]));
        erased.extend(ids(&json!({"results": e.json["memories"].as_array().unwrap().iter().map(|i| json!({"id": i})).collect::<Vec<_>>()})));
    }
    assert_eq!(erased.len(), 2);
    let after = s.json(
        "POST",
        "/v1/users/carol/search",
        None,
        json!({"query": "passport ZQXJ8812", "k": 50}),
    );
    assert!(!after.text.contains("ZQXJ8812"), "{}", after.text);
    for id in &erased {
        assert_eq!(
            s.call("GET", &format!("/v1/users/carol/memories/{id}"), None, None)
                .status,
            404
        );
        assert_eq!(
            s.call("GET", &format!("/v1/users/carol/memories/{id}/history"), None, None)
                .status,
            404
        );
    }
    assert!(
        !s.call("GET", "/v1/users/carol/messages", None, None)
            .text
            .contains("ZQXJ8812")
    );
    assert!(
        s.call("GET", "/v1/users/carol/memories", None, None)
            .text
            .contains("Dolomites")
    );
    let hit = files_containing(dir.path(), "ZQXJ8812");
    assert!(hit.is_empty(), "the erased token is still in {hit:?}");

    // Erase a whole user.
    let e = s.call("DELETE", "/v1/users/dave", None, None);
    assert_eq!(e.status, 200, "{}", e.text);
    assert_eq!(e.json["messages"].as_array().unwrap().len(), 1);
    assert_eq!(e.json["memories"].as_array().unwrap().len(), 1);
    assert!(
        e.json["state"]
            .as_array()
            .unwrap()
            .iter()
            .any(|k| k.as_str().unwrap().ends_with("processed_through"))
    );
    assert_eq!(s.call("GET", "/v1/users/dave", None, None).status, 404);
    let hit = files_containing(dir.path(), "WVKP5521");
    assert!(hit.is_empty(), "the erased user's token is still in {hit:?}");
    // The store has no row of the erased user's internal name.
    let store = dentate_memory::Store::open(dir.path()).unwrap();
    let internal: Vec<String> = store.users().unwrap();
    assert_eq!(internal.len(), 1, "{internal:?}");
    assert_eq!(store.rows_of_user("u2").unwrap(), 0);
}

#[test]
fn a_full_queue_answers_429_with_retry_after_and_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut cfg = config(dir.path());
    cfg.queue = 2;
    {
        // No workers: the queue fills and stays full.
        let s = Server::start(cfg.clone(), false);
        for i in 0..2 {
            let r = s.json(
                "POST",
                "/v1/users/q/messages",
                None,
                msgs(&[&format!("queued message {i}")]),
            );
            assert_eq!(r.status, 202, "{}", r.text);
        }
        let r = s.json("POST", "/v1/users/q/messages", None, msgs(&["one too many"]));
        assert_eq!((r.status, r.code()), (429, "queue_full"));
        let wait: u64 = r.header("retry-after").unwrap().parse().unwrap();
        assert!((1..=60).contains(&wait));
        assert_eq!(s.call("GET", "/v1/users/q", None, None).json["messages"], 2);
        let j = s.call("GET", "/v1/jobs/1", None, None);
        assert_eq!(j.json["state"], "queued");
        s.stop();
    }
    // A restart resumes the parked jobs.
    let s = Server::start(cfg, true);
    s.idle();
    assert_eq!(s.call("GET", "/v1/jobs/1", None, None).json["state"], "done");
    assert_eq!(s.call("GET", "/v1/jobs/2", None, None).json["state"], "done");
    let l = s.call("GET", "/v1/users/q/memories", None, None);
    assert_eq!(ids(&l.json).len(), 2);
    let r = s.json("POST", "/v1/users/q/messages", None, msgs(&["now there is room"]));
    assert_eq!(r.status, 202);
}

#[test]
fn concurrent_clients_of_many_users_lose_and_duplicate_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(config(dir.path()), true);
    let url = s.url.clone();
    let threads: Vec<_> = (0..6)
        .map(|t| {
            let url = url.clone();
            std::thread::spawn(move || {
                for b in 0..8 {
                    let user = format!("user{}", (t + b) % 4);
                    let body = json!({"messages": (0..5).map(|i| json!({"content": format!("t{t} b{b} i{i} note"), "id": format!("{t}-{b}-{i}")})).collect::<Vec<_>>()});
                    let r = common::call(&format!("{url}/v1/users/{user}/messages"), "POST", None, Some(&body.to_string()));
                    assert_eq!(r.status, 202, "{}", r.text);
                    let q = common::call(
                        &format!("{url}/v1/users/{user}/search"),
                        "POST",
                        None,
                        Some(&json!({"query": format!("t{t} b{b}"), "k": 3}).to_string()),
                    );
                    assert_eq!(q.status, 200, "{}", q.text);
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    s.idle();
    let mut total = 0;
    for u in 0..4 {
        let l = s.call("GET", &format!("/v1/users/user{u}/memories?limit=1000"), None, None);
        let texts: Vec<&str> = l.json["results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["text"].as_str().unwrap())
            .collect();
        let mut dedup = texts.clone();
        dedup.sort_unstable();
        dedup.dedup();
        assert_eq!(dedup.len(), texts.len(), "user{u} has a memory twice");
        total += texts.len();
    }
    assert_eq!(total, 6 * 8 * 5);
}
