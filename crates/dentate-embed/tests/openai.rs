//! The OpenAI-compatible client against a scripted server on 127.0.0.1.

#![cfg(feature = "openai")]

use dentate_embed::http::testing::{Reply as Answer, ScriptedServer};
use dentate_embed::{EmbedError, Embedder, OpenAiConfig, OpenAiEmbedder};
use std::time::{Duration, Instant};

/// What the server does with the n-th request it receives.
#[derive(Clone)]
enum Reply {
    /// 200 with one embedding per input: `[len(text), 1, 0, ...]` of `dim`.
    Good(usize),
    /// The given status and body.
    Status(u16, &'static str, Option<&'static str>),
    /// Sleeps, then answers like `Good`.
    Slow(Duration, usize),
    /// 200 with this raw body.
    Raw(&'static str),
}

struct Server {
    url: String,
    inner: ScriptedServer,
}

impl Server {
    fn bodies(&self) -> Vec<serde_json::Value> {
        self.inner.requests().into_iter().map(|r| r.body).collect()
    }
    fn auth(&self) -> Vec<Option<String>> {
        self.inner.requests().into_iter().map(|r| r.auth).collect()
    }
}

/// Embeddings for the inputs of `body`, listed out of order on purpose
/// (the client must use `index`).
fn good(body: &serde_json::Value, dim: usize) -> String {
    let inputs: Vec<String> = body["input"]
        .as_array()
        .map(|a| a.iter().map(|t| t.as_str().unwrap_or("").to_string()).collect())
        .unwrap_or_default();
    let data: Vec<serde_json::Value> = inputs
        .iter()
        .enumerate()
        .rev()
        .map(|(j, t)| {
            let mut v = vec![0.0f64; dim];
            v[0] = t.len() as f64 + 1.0;
            v[1] = 1.0;
            serde_json::json!({"object": "embedding", "index": j, "embedding": v})
        })
        .collect();
    serde_json::json!({"object": "list", "data": data, "model": "m"}).to_string()
}

/// Serves `script` in order (the last entry repeats) for at most
/// `script.len() + 8` requests.
fn serve(script: Vec<Reply>) -> Server {
    let n = script.len();
    let inner = ScriptedServer::start(n + 8, move |i, body| match script[i.min(n - 1)].clone() {
        Reply::Good(d) => Answer::ok(good(body, d)),
        Reply::Status(s, b, r) => {
            let a = Answer::status(s, b);
            match r {
                Some(r) => a.retry_after(r),
                None => a,
            }
        }
        Reply::Slow(t, d) => Answer::ok(good(body, d)).after(t),
        Reply::Raw(b) => Answer::ok(b),
    })
    .unwrap();
    Server {
        url: inner.url.clone(),
        inner,
    }
}

fn cfg(url: &str) -> OpenAiConfig {
    let mut c = OpenAiConfig::new(url, "test-model");
    c.api_key_env = "DENTATE_TEST_KEY_UNSET".into();
    c.backoff = Duration::from_millis(10);
    c.timeout = Duration::from_secs(2);
    c
}

#[test]
fn good_answers_batched_reordered_and_normalised() {
    let s = serve(vec![Reply::Good(4)]);
    let mut c = cfg(&s.url);
    c.batch_size = 2;
    let e = OpenAiEmbedder::connect(c).unwrap();
    assert_eq!(e.dim(), 4, "learned from the probe");
    let v = e.embed(&["a", "bbb", "cc"]).unwrap();
    assert_eq!(v.len(), 12);
    // Row i is [len+1, 1, 0, 0] normalised: order follows `index`, not arrival.
    for (i, t) in ["a", "bbb", "cc"].iter().enumerate() {
        let x = t.len() as f32 + 1.0;
        let n = (x * x + 1.0).sqrt();
        assert!((v[i * 4] - x / n).abs() < 1e-6 && (v[i * 4 + 1] - 1.0 / n).abs() < 1e-6);
    }
    let seen = s.bodies();
    assert_eq!(seen.len(), 3, "probe + two batches of at most 2");
    assert_eq!(seen[1]["model"], "test-model");
    assert_eq!(seen[2]["input"].as_array().unwrap().len(), 1);
    assert!(s.auth().iter().all(|k| k.is_none()), "no key configured, none sent");
}

#[test]
fn api_key_is_sent_as_bearer() {
    let s = serve(vec![Reply::Good(3)]);
    let mut c = cfg(&s.url);
    c.api_key_env = "DENTATE_TEST_EMBED_KEY".into();
    // SAFETY: this test alone reads this variable.
    unsafe { std::env::set_var("DENTATE_TEST_EMBED_KEY", "sk-test") };
    c.dim = Some(3);
    OpenAiEmbedder::connect(c).unwrap().embed(&["x"]).unwrap();
    assert_eq!(s.auth()[0].as_deref(), Some("Bearer sk-test"));
}

#[test]
fn retries_429_and_5xx_then_succeeds() {
    let s = serve(vec![
        Reply::Status(429, "{}", Some("0")),
        Reply::Status(503, "busy", None),
        Reply::Good(2),
    ]);
    let mut c = cfg(&s.url);
    c.dim = Some(2);
    let v = OpenAiEmbedder::connect(c).unwrap().embed(&["hi"]).unwrap();
    assert_eq!(v.len(), 2);
    assert_eq!(s.bodies().len(), 3);
}

#[test]
fn persistent_5xx_is_an_http_error_after_the_retry_budget() {
    let s = serve(vec![Reply::Status(500, "{\"error\": \"boom\"}", None)]);
    let mut c = cfg(&s.url);
    c.dim = Some(2);
    c.max_retries = 2;
    let err = OpenAiEmbedder::connect(c).unwrap().embed(&["hi"]).unwrap_err();
    assert!(matches!(err, EmbedError::Http { status: 500, .. }), "{err}");
    assert!(err.to_string().contains("boom"));
    assert_eq!(s.bodies().len(), 3, "1 attempt + 2 retries");
}

#[test]
fn client_errors_are_not_retried() {
    let s = serve(vec![Reply::Status(401, "bad key", None)]);
    let mut c = cfg(&s.url);
    c.dim = Some(2);
    let err = OpenAiEmbedder::connect(c).unwrap().embed(&["hi"]).unwrap_err();
    assert!(matches!(err, EmbedError::Http { status: 401, .. }));
    assert_eq!(s.bodies().len(), 1);
}

#[test]
fn slow_server_times_out_then_recovers() {
    let s = serve(vec![Reply::Slow(Duration::from_millis(900), 2), Reply::Good(2)]);
    let mut c = cfg(&s.url);
    c.dim = Some(2);
    c.timeout = Duration::from_millis(300);
    let t = Instant::now();
    let v = OpenAiEmbedder::connect(c.clone()).unwrap().embed(&["hi"]).unwrap();
    assert_eq!(v.len(), 2, "the retry after the timeout succeeds");
    assert!(t.elapsed() < Duration::from_secs(3));
    // With no retries left, the timeout is a transport error.
    let s = serve(vec![Reply::Slow(Duration::from_millis(900), 2)]);
    let mut c2 = cfg(&s.url);
    c2.dim = Some(2);
    c2.timeout = Duration::from_millis(200);
    c2.max_retries = 0;
    let err = OpenAiEmbedder::connect(c2).unwrap().embed(&["hi"]).unwrap_err();
    assert!(matches!(err, EmbedError::Transport { attempts: 1, .. }), "{err}");
}

#[test]
fn malformed_answers_are_typed_errors() {
    for (raw, what) in [
        ("not json", "not JSON"),
        ("{\"object\": \"list\"}", "no `data`"),
        ("{\"data\": []}", "0 embeddings for 1"),
        (
            "{\"data\": [{\"index\": 0, \"embedding\": [1.0, \"x\"]}]}",
            "non-numeric",
        ),
        (
            "{\"data\": [{\"index\": 0, \"embedding\": [1.0, 2.0, 3.0]}]}",
            "dimension 3, expected 2",
        ),
        (
            "{\"data\": [{\"index\": 5, \"embedding\": [1.0, 2.0]}]}",
            "out of range",
        ),
        ("{\"data\": [{\"index\": 0, \"embedding\": [0.0, 0.0]}]}", "zero norm"),
    ] {
        let s = serve(vec![Reply::Raw(raw)]);
        let mut c = cfg(&s.url);
        c.dim = Some(2);
        let err = OpenAiEmbedder::connect(c).unwrap().embed(&["hi"]).unwrap_err();
        assert!(matches!(err, EmbedError::Malformed { .. }), "{raw}: {err}");
        assert!(err.to_string().contains(what), "{raw}: {err}");
    }
}

#[test]
fn refused_connection_and_bad_settings() {
    // Bind and drop a listener: nothing listens on that port afterwards.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut c = cfg(&format!("http://127.0.0.1:{port}/v1"));
    c.max_retries = 1;
    let err = OpenAiEmbedder::connect(c).unwrap_err();
    assert!(matches!(err, EmbedError::Transport { attempts: 2, .. }), "{err}");
    let mut c = cfg("ftp://nowhere");
    c.dim = Some(2);
    assert!(matches!(
        OpenAiEmbedder::connect(c),
        Err(EmbedError::Config { name: "base_url", .. })
    ));
    let mut c = cfg("http://127.0.0.1:1/v1");
    c.batch_size = 0;
    assert!(matches!(
        OpenAiEmbedder::connect(c),
        Err(EmbedError::Config { name: "batch_size", .. })
    ));
}
