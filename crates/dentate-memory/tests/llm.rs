//! The chat client against a scripted server on 127.0.0.1: good, slow,
//! failing and malformed answers, and the JSON repair request.

mod common;

use common::{chat, chat_body};
use dentate_embed::http::testing::{Reply, ScriptedServer};
use dentate_memory::{Call, ChatMessage, Llm, LlmError, ask_json, schema};
use serde_json::Value;
use std::time::Duration;

/// The schema of `{"answer": "..."}`, leaked for the tests' `Call`s.
fn answer_schema() -> &'static Value {
    Box::leak(Box::new(schema::object(&[("answer", schema::text())], &["answer"])))
}

fn call() -> Call<'static> {
    Call::json("test_answer", answer_schema())
}

fn field(v: &serde_json::Value) -> Result<String, String> {
    v.get("answer")
        .and_then(|a| a.as_str())
        .map(str::to_string)
        .ok_or_else(|| "no string `answer`".to_string())
}

#[test]
fn good_answer_is_parsed_and_counted() {
    let s = ScriptedServer::start(4, |_, _| Reply::ok(chat_body("{\"answer\": \"Lisbon\"}"))).unwrap();
    let llm = chat(&s, 2000, 2);
    let a = ask_json(&llm, &call(), "sys", "Where does Clara move?", field).unwrap();
    assert_eq!(a, "Lisbon");
    let req = &s.requests()[0].body;
    assert_eq!(req["model"], "test-model");
    // The answer's schema goes with the request as a structured output.
    assert_eq!(req["response_format"]["type"], "json_schema");
    assert_eq!(req["response_format"]["json_schema"]["name"], "test_answer");
    assert_eq!(
        req["response_format"]["json_schema"]["schema"]["required"],
        serde_json::json!(["answer"])
    );
    assert_eq!(req["messages"][0]["role"], "system");
    assert_eq!(req["messages"][1]["content"], "Where does Clara move?");
    let st = llm.stats();
    assert_eq!((st.calls, st.failures, st.repairs), (1, 0, 0));
    assert_eq!((st.prompt_tokens, st.completion_tokens), (10, 5));
    assert!(st.report().contains("1 calls"));
    assert_eq!(st.json_mode, Some(dentate_memory::JsonMode::Schema));
    let role = &st.roles["test_answer"];
    assert_eq!(
        (role.calls, role.first_valid, role.repaired, role.invalid),
        (1, 1, 0, 0)
    );
}

#[test]
fn code_fenced_json_is_accepted() {
    let s = ScriptedServer::start(2, |_, _| Reply::ok(chat_body("```json\n{\"answer\": \"ok\"}\n```"))).unwrap();
    assert_eq!(ask_json(&chat(&s, 2000, 0), &call(), "s", "u", field).unwrap(), "ok");
}

#[test]
fn malformed_then_repaired() {
    let s = ScriptedServer::start(4, |i, _| {
        Reply::ok(chat_body(if i == 0 {
            "Sure! The answer is Lisbon."
        } else {
            "{\"answer\": \"Lisbon\"}"
        }))
    })
    .unwrap();
    let llm = chat(&s, 2000, 0);
    assert_eq!(ask_json(&llm, &call(), "s", "u", field).unwrap(), "Lisbon");
    let reqs = s.requests();
    assert_eq!(reqs.len(), 2);
    // The repair request quotes the bad answer and says what was wrong.
    let msgs = reqs[1].body["messages"].as_array().unwrap();
    assert_eq!(msgs.len(), 4);
    assert_eq!(msgs[2]["role"], "assistant");
    assert!(msgs[3]["content"].as_str().unwrap().contains("not JSON"));
    assert_eq!(llm.stats().repairs, 1);
}

#[test]
fn malformed_twice_is_a_typed_error() {
    for bad in [
        "not json at all",
        "[1, 2]",
        "{\"other\": 1}",
        "{\"answer\": 5}",
        "```json\n{\"answer\": \"x\"}",
    ] {
        let s = ScriptedServer::start(4, move |_, _| Reply::ok(chat_body(bad))).unwrap();
        let err = ask_json(&chat(&s, 2000, 0), &call(), "s", "u", field).unwrap_err();
        assert!(matches!(err, LlmError::Malformed { .. }), "{bad}: {err}");
        assert_eq!(s.requests().len(), 2, "{bad}: one repair request, no more");
    }
}

#[test]
fn response_that_is_not_a_completion_is_malformed() {
    for body in [
        "{}",
        "<html>",
        "{\"choices\": []}",
        "{\"choices\": [{\"message\": {\"content\": 3}}]}",
    ] {
        let s = ScriptedServer::start(2, move |_, _| Reply::ok(body)).unwrap();
        let err = chat(&s, 2000, 0)
            .chat(&Call::text("answer"), &[ChatMessage::user("x")])
            .unwrap_err();
        assert!(matches!(err, LlmError::Malformed { .. }), "{body}: {err}");
    }
}

#[test]
fn server_errors_are_retried_then_succeed() {
    let s = ScriptedServer::start(8, |i, _| match i {
        0 => Reply::status(503, "busy"),
        1 => Reply::status(429, "slow down").retry_after("0"),
        _ => Reply::ok(chat_body("hello")),
    })
    .unwrap();
    let llm = chat(&s, 2000, 3);
    assert_eq!(
        llm.chat(&Call::text("answer"), &[ChatMessage::user("hi")]).unwrap(),
        "hello"
    );
    assert_eq!(s.requests().len(), 3);
    assert_eq!(llm.stats().calls, 1, "retries are one call");
}

#[test]
fn persistent_errors_and_client_errors() {
    let s = ScriptedServer::start(8, |_, _| Reply::status(500, "{\"error\": \"boom\"}")).unwrap();
    let err = chat(&s, 2000, 2)
        .chat(&Call::text("answer"), &[ChatMessage::user("hi")])
        .unwrap_err();
    assert!(matches!(err, LlmError::Http { status: 500, .. }), "{err}");
    assert_eq!(s.requests().len(), 3, "1 attempt + 2 retries");

    let s = ScriptedServer::start(8, |_, _| Reply::status(401, "bad key")).unwrap();
    let llm = chat(&s, 2000, 2);
    let err = llm.chat(&Call::text("answer"), &[ChatMessage::user("hi")]).unwrap_err();
    assert!(matches!(err, LlmError::Http { status: 401, .. }), "{err}");
    assert_eq!(s.requests().len(), 1, "401 is not retried");
    assert_eq!(llm.stats().failures, 1);
}

#[test]
fn slow_answer_times_out_then_recovers() {
    let s = ScriptedServer::start(4, |i, _| {
        let r = Reply::ok(chat_body("fine"));
        if i == 0 { r.after(Duration::from_millis(800)) } else { r }
    })
    .unwrap();
    let llm = chat(&s, 300, 2);
    assert_eq!(
        llm.chat(&Call::text("answer"), &[ChatMessage::user("hi")]).unwrap(),
        "fine"
    );

    let s = ScriptedServer::start(4, |_, _| Reply::ok(chat_body("late")).after(Duration::from_millis(800))).unwrap();
    let err = chat(&s, 200, 1)
        .chat(&Call::text("answer"), &[ChatMessage::user("hi")])
        .unwrap_err();
    assert!(matches!(err, LlmError::Transport { attempts: 2, .. }), "{err}");
}

#[test]
fn refused_connection_and_bad_settings() {
    // Bind and drop a listener to get a port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut c = dentate_memory::ChatConfig::new(format!("http://127.0.0.1:{port}/v1"), "m");
    c.retry.max_retries = 1;
    c.retry.backoff = Duration::from_millis(1);
    let err = dentate_memory::OpenAiChat::new(c)
        .unwrap()
        .chat(&Call::text("answer"), &[ChatMessage::user("x")])
        .unwrap_err();
    assert!(matches!(err, LlmError::Transport { .. }), "{err}");
    for (url, model) in [("ftp://x", "m"), ("http://x", " ")] {
        let err = dentate_memory::OpenAiChat::new(dentate_memory::ChatConfig::new(url, model)).unwrap_err();
        assert!(matches!(err, LlmError::Config { .. }), "{err}");
    }
}

/// The `response_format` a request carried: its type, plus `+schema`
/// for a `json_object` with a schema, or `none`.
fn format_of(body: &Value) -> String {
    match body.get("response_format") {
        None => "none".into(),
        Some(f) => format!(
            "{}{}",
            f["type"].as_str().unwrap_or("?"),
            if f.get("schema").is_some() { "+schema" } else { "" }
        ),
    }
}

/// A server that refuses `json_schema` (llama-cpp-python answers 500 with
/// its validation error, and is not retried) is asked with the schema in
/// a `json_object`; one that refuses that too, with plain `json_object`;
/// then with none. Each step holds for the rest of the session.
#[test]
fn refused_formats_step_down_once_for_the_session() {
    for (refuses, expect, mode) in [
        (
            vec!["json_schema"],
            vec!["json_schema", "json_object+schema", "json_object+schema"],
            dentate_memory::JsonMode::ObjectWithSchema,
        ),
        (
            vec!["json_schema", "json_object+schema"],
            vec!["json_schema", "json_object+schema", "json_object", "json_object"],
            dentate_memory::JsonMode::Object,
        ),
        (
            vec!["json_schema", "json_object+schema", "json_object"],
            vec!["json_schema", "json_object+schema", "json_object", "none", "none"],
            dentate_memory::JsonMode::Prompt,
        ),
    ] {
        let refused: Vec<String> = refuses.iter().map(|r| r.to_string()).collect();
        let s = ScriptedServer::start(16, move |_, body| {
            if refused.contains(&format_of(body)) {
                Reply::status(
                    500,
                    "{\"error\": {\"message\": \"validation error: ('body', 'response_format', 'type')\"}}",
                )
            } else {
                Reply::ok(chat_body("{\"answer\": \"Lisbon\"}"))
            }
        })
        .unwrap();
        // Retries on: a refusal must not be retried.
        let llm = chat(&s, 2000, 3);
        assert_eq!(ask_json(&llm, &call(), "s", "u", field).unwrap(), "Lisbon");
        assert_eq!(ask_json(&llm, &call(), "s", "u", field).unwrap(), "Lisbon");
        let kinds: Vec<String> = s.requests().iter().map(|r| format_of(&r.body)).collect();
        assert_eq!(kinds, expect);
        let st = llm.stats();
        assert_eq!(st.json_mode, Some(mode));
        // Refused requests are not calls: two answers, two calls.
        assert_eq!((st.calls, st.failures), (2, 0));
    }
}

/// Another 400 (not about the schema) is an error, not a fallback.
#[test]
fn other_client_errors_do_not_switch_schemas_off() {
    let s = ScriptedServer::start(4, |_, _| Reply::status(400, "{\"error\": \"context length exceeded\"}")).unwrap();
    let llm = chat(&s, 2000, 0);
    let err = ask_json(&llm, &call(), "s", "u", field).unwrap_err();
    assert!(matches!(err, LlmError::Http { status: 400, .. }), "{err}");
    assert_eq!(s.requests().len(), 1);
    assert_eq!(llm.stats().json_mode, None);
}

/// First-valid, repaired and invalid answers are counted per role, and
/// `since` isolates what a stretch of work cost.
#[test]
fn json_outcomes_are_counted_per_role() {
    // Valid; invalid then valid; invalid twice.
    let answers = ["{\"answer\": \"a\"}", "nope", "{\"answer\": \"b\"}", "nope", "still no"];
    let s = ScriptedServer::start(8, move |i, _| Reply::ok(chat_body(answers[i.min(4)]))).unwrap();
    let llm = chat(&s, 2000, 0);
    assert!(ask_json(&llm, &call(), "s", "u", field).is_ok());
    let before = llm.stats();
    assert!(ask_json(&llm, &call(), "s", "u", field).is_ok());
    assert!(matches!(
        ask_json(&llm, &call(), "s", "u", field),
        Err(LlmError::Malformed { .. })
    ));
    let st = llm.stats();
    let r = &st.roles["test_answer"];
    assert_eq!((r.calls, r.first_valid, r.repaired, r.invalid), (5, 1, 1, 1));
    assert_eq!(st.repairs, 2);
    let d = st.since(&before);
    assert_eq!(d.calls, 4);
    let r = &d.roles["test_answer"];
    assert_eq!((r.calls, r.first_valid, r.repaired, r.invalid), (4, 0, 1, 1));
    assert_eq!(r.latencies_ms.len(), 4);
    let j = st.to_json(50);
    assert_eq!(j["per_role"]["test_answer"]["json_repaired"], 1);
    assert_eq!(j["per_100_messages"]["calls"], 10.0);
    assert!(st.role_table(50, 100).contains("test_answer"));
}
