//! JSON-over-HTTP with the retry policy every OpenAI-compatible client
//! here shares (embeddings in this crate, chat completions in
//! `dentate-memory`): a whole-request timeout, retries with exponential
//! backoff on 429, 5xx and transport failures (refused connections,
//! timeouts), `Retry-After` honoured, other statuses returned at once.

use std::time::Duration;

/// Retry and timeout settings.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Whole-request timeout (connect, send, wait, read).
    pub timeout: Duration,
    /// Retries after the first attempt.
    pub max_retries: u32,
    /// First backoff; doubled per retry, capped at 8 s. A `Retry-After`
    /// header (seconds) from the server takes precedence (capped at 60 s).
    pub backoff: Duration,
}

/// Why a request gave no successful answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HttpFailure {
    /// The server answered with a non-2xx status: at once for statuses that
    /// are not retried, after the last retry for 429/5xx.
    Status {
        /// Status code.
        status: u16,
        /// Start of the response body (300 characters).
        body: String,
        /// Attempts made.
        attempts: u32,
    },
    /// No answer (connection refused, timeout, reset) after every retry.
    Transport {
        /// Attempts made.
        attempts: u32,
        /// Last failure.
        reason: String,
    },
}

/// A blocking JSON client with a [`RetryPolicy`].
#[derive(Debug, Clone)]
pub struct JsonClient {
    agent: ureq::Agent,
    policy: RetryPolicy,
}

/// Checks that `url` is an http(s) URL.
pub fn check_url(url: &str) -> Result<(), String> {
    if url.starts_with("http://") || url.starts_with("https://") {
        Ok(())
    } else {
        Err(format!("`{url}` is not an http(s) URL"))
    }
}

/// The API key from the environment variable `var`, if set and not blank.
pub fn api_key(var: &str) -> Option<String> {
    std::env::var(var).ok().filter(|k| !k.trim().is_empty())
}

impl JsonClient {
    /// A client with `policy`.
    pub fn new(policy: RetryPolicy) -> Self {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .timeout_global(Some(policy.timeout))
            .http_status_as_error(false)
            .build()
            .into();
        JsonClient { agent, policy }
    }

    /// The policy in force.
    pub fn policy(&self) -> &RetryPolicy {
        &self.policy
    }

    /// POSTs `body` to `url` (with `Authorization: Bearer` when a key is
    /// given) and returns the 2xx response body, retrying as the policy
    /// says.
    pub fn post(&self, url: &str, body: &serde_json::Value, key: Option<&str>) -> Result<String, HttpFailure> {
        self.post_unless(url, body, key, |_, _| false)
    }

    /// [`JsonClient::post`], except that an error answer for which
    /// `final_answer(status, body)` holds is returned at once, not retried
    /// (a server that says it does not take a request's option, with a
    /// 5xx, is not going to take it on the next try).
    pub fn post_unless(
        &self,
        url: &str,
        body: &serde_json::Value,
        key: Option<&str>,
        final_answer: impl Fn(u16, &str) -> bool,
    ) -> Result<String, HttpFailure> {
        let mut attempt = 0u32;
        loop {
            attempt += 1;
            let mut req = self.agent.post(url).header("Content-Type", "application/json");
            if let Some(k) = key {
                req = req.header("Authorization", &format!("Bearer {k}"));
            }
            // Ok(Some(wait)) or Ok(None): retry (after `wait`, or the
            // backoff); Err(reason): a transport failure, retried too.
            let outcome: Result<Option<Duration>, String> = match req.send_json(body) {
                Ok(mut resp) => {
                    let status = resp.status().as_u16();
                    match resp.body_mut().read_to_string() {
                        Ok(text) if (200..300).contains(&status) => return Ok(text),
                        Ok(text) => {
                            let retryable = (status == 429 || status >= 500) && !final_answer(status, &text);
                            if !retryable || attempt > self.policy.max_retries {
                                return Err(HttpFailure::Status {
                                    status,
                                    body: text.chars().take(300).collect(),
                                    attempts: attempt,
                                });
                            }
                            Ok(resp
                                .headers()
                                .get("retry-after")
                                .and_then(|v| v.to_str().ok())
                                .and_then(|v| v.trim().parse::<f64>().ok())
                                .filter(|s| s.is_finite() && *s >= 0.0)
                                .map(|s| Duration::from_secs_f64(s.min(60.0))))
                        }
                        // The body could not be read (timeout mid-body, reset).
                        Err(err) => Err(err.to_string()),
                    }
                }
                Err(err) => Err(err.to_string()),
            };
            let retry_after = match outcome {
                Ok(wait) => wait,
                Err(reason) if attempt > self.policy.max_retries => {
                    return Err(HttpFailure::Transport {
                        attempts: attempt,
                        reason,
                    });
                }
                Err(_) => None,
            };
            let backoff = self
                .policy
                .backoff
                .saturating_mul(1 << (attempt - 1).min(10))
                .min(Duration::from_secs(8));
            std::thread::sleep(retry_after.unwrap_or(backoff));
        }
    }
}

/// A scripted HTTP server on 127.0.0.1 for testing clients of
/// OpenAI-compatible APIs (feature `testing`): each request gets the reply
/// a handler computes from its index and JSON body, possibly after a delay.
#[cfg(feature = "testing")]
pub mod testing {
    use std::io::{BufRead, BufReader, Read, Write};
    use std::net::{TcpListener, TcpStream};
    use std::sync::{Arc, Mutex};
    use std::time::Duration;

    /// One scripted answer.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Reply {
        /// Status code.
        pub status: u16,
        /// Body (sent as `application/json`).
        pub body: String,
        /// Sleep before answering (to provoke client timeouts).
        pub delay: Duration,
        /// `Retry-After` header value, if any.
        pub retry_after: Option<String>,
    }

    impl Reply {
        /// 200 with `body`.
        pub fn ok(body: impl Into<String>) -> Self {
            Reply::status(200, body)
        }
        /// `status` with `body`.
        pub fn status(status: u16, body: impl Into<String>) -> Self {
            Reply {
                status,
                body: body.into(),
                delay: Duration::ZERO,
                retry_after: None,
            }
        }
        /// The same reply after `delay`.
        pub fn after(mut self, delay: Duration) -> Self {
            self.delay = delay;
            self
        }
        /// The same reply with a `Retry-After` header.
        pub fn retry_after(mut self, v: impl Into<String>) -> Self {
            self.retry_after = Some(v.into());
            self
        }
    }

    /// A request as the server saw it.
    #[derive(Debug, Clone, PartialEq)]
    pub struct Seen {
        /// JSON body (`Null` when it was not JSON).
        pub body: serde_json::Value,
        /// `Authorization` header, if any.
        pub auth: Option<String>,
    }

    /// A running scripted server; it answers at most `limit` requests.
    #[derive(Debug)]
    pub struct ScriptedServer {
        /// Base URL, `http://127.0.0.1:PORT/v1`.
        pub url: String,
        /// Requests received so far, in order.
        pub seen: Arc<Mutex<Vec<Seen>>>,
    }

    impl ScriptedServer {
        /// Starts a server whose `n`-th request (0-based) with body `b` is
        /// answered with `handler(n, &b)`. It stops after `limit` requests.
        pub fn start(
            limit: usize,
            handler: impl Fn(usize, &serde_json::Value) -> Reply + Send + 'static,
        ) -> std::io::Result<ScriptedServer> {
            let listener = TcpListener::bind("127.0.0.1:0")?;
            let url = format!("http://{}/v1", listener.local_addr()?);
            let seen = Arc::new(Mutex::new(Vec::new()));
            let log = seen.clone();
            std::thread::spawn(move || {
                for (i, conn) in listener.incoming().take(limit).enumerate() {
                    let Ok(mut stream) = conn else { break };
                    let req = read_request(&mut stream);
                    let reply = handler(i, &req.body);
                    log.lock().unwrap_or_else(|p| p.into_inner()).push(req);
                    std::thread::sleep(reply.delay);
                    let extra = reply
                        .retry_after
                        .map(|r| format!("Retry-After: {r}\r\n"))
                        .unwrap_or_default();
                    let _ = write!(
                        stream,
                        "HTTP/1.1 {} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{extra}\
                         Connection: close\r\n\r\n{}",
                        reply.status,
                        reply.body.len(),
                        reply.body
                    );
                }
            });
            Ok(ScriptedServer { url, seen })
        }

        /// Requests received so far.
        pub fn requests(&self) -> Vec<Seen> {
            self.seen.lock().unwrap_or_else(|p| p.into_inner()).clone()
        }
    }

    fn read_request(stream: &mut TcpStream) -> Seen {
        let Ok(clone) = stream.try_clone() else {
            return Seen {
                body: serde_json::Value::Null,
                auth: None,
            };
        };
        let mut r = BufReader::new(clone);
        let mut len = 0;
        let mut auth = None;
        loop {
            let mut line = String::new();
            if r.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("content-length:") {
                len = v.trim().parse().unwrap_or(0);
            }
            if lower.starts_with("authorization:") {
                auth = Some(line["authorization:".len()..].trim().to_string());
            }
        }
        let mut body = vec![0; len];
        let _ = r.read_exact(&mut body);
        Seen {
            body: serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null),
            auth,
        }
    }
}
