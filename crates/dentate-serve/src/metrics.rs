//! Prometheus metrics in the text exposition format (`GET /metrics`):
//! requests by route, method and status; request latency histograms by
//! route; the ingest queue; ingest jobs and messages; the language
//! model's calls and tokens.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the latency histogram buckets, in seconds.
const BUCKETS: [f64; 14] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0,
];

#[derive(Default)]
struct Hist {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    n: u64,
}

/// The service's counters.
#[derive(Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(String, String, u16), u64>>,
    latency: Mutex<BTreeMap<String, Hist>>,
    queue_depth: AtomicU64,
    jobs: Mutex<BTreeMap<String, u64>>,
    messages: AtomicU64,
    job_seconds: Mutex<Hist>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

fn observe(h: &mut Hist, secs: f64) {
    for (i, b) in BUCKETS.iter().enumerate() {
        if secs <= *b {
            h.counts[i] += 1;
        }
    }
    h.sum += secs;
    h.n += 1;
}

fn escape(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

fn write_hist(out: &mut String, name: &str, labels: &str, h: &Hist) {
    let sep = if labels.is_empty() { "" } else { "," };
    for (i, b) in BUCKETS.iter().enumerate() {
        let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{b}\"}} {}", h.counts[i]);
    }
    let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"+Inf\"}} {}", h.n);
    let braces = if labels.is_empty() {
        String::new()
    } else {
        format!("{{{labels}}}")
    };
    let _ = writeln!(out, "{name}_sum{braces} {}", h.sum);
    let _ = writeln!(out, "{name}_count{braces} {}", h.n);
}

impl Metrics {
    /// Counts one request to `route` (the matched path template).
    pub fn request(&self, route: &str, method: &str, status: u16, took: Duration) {
        if let Ok(mut m) = self.requests.lock() {
            *m.entry((route.to_string(), method.to_string(), status)).or_default() += 1;
        }
        if let Ok(mut m) = self.latency.lock() {
            observe(m.entry(route.to_string()).or_default(), took.as_secs_f64());
        }
    }

    /// Sets the queue depth gauge.
    pub fn set_queue_depth(&self, n: usize) {
        self.queue_depth.store(n as u64, Ordering::Relaxed);
    }

    /// Counts `jobs` jobs ended in `state` by one ingest run that processed
    /// `messages` messages in `took`.
    pub fn job_finished(&self, state: &str, jobs: usize, messages: usize, took: Duration) {
        if let Ok(mut m) = self.jobs.lock() {
            *m.entry(state.to_string()).or_default() += jobs as u64;
        }
        self.messages.fetch_add(messages as u64, Ordering::Relaxed);
        if let Ok(mut h) = self.job_seconds.lock() {
            observe(&mut h, took.as_secs_f64());
        }
    }

    /// The exposition text; `llm` adds the model's counters.
    pub fn render(&self, queue_depth: usize, llm: Option<&dentate_memory::LlmStats>) -> String {
        let mut out = String::new();
        out.push_str("# HELP dentate_http_requests_total HTTP requests by route, method and status.\n");
        out.push_str("# TYPE dentate_http_requests_total counter\n");
        if let Ok(m) = self.requests.lock() {
            for ((route, method, status), n) in m.iter() {
                let _ = writeln!(
                    out,
                    "dentate_http_requests_total{{route=\"{}\",method=\"{}\",status=\"{status}\"}} {n}",
                    escape(route),
                    escape(method)
                );
            }
        }
        out.push_str("# HELP dentate_http_request_duration_seconds Request latency by route.\n");
        out.push_str("# TYPE dentate_http_request_duration_seconds histogram\n");
        if let Ok(m) = self.latency.lock() {
            for (route, h) in m.iter() {
                write_hist(
                    &mut out,
                    "dentate_http_request_duration_seconds",
                    &format!("route=\"{}\"", escape(route)),
                    h,
                );
            }
        }
        out.push_str("# HELP dentate_ingest_queue_depth Ingest jobs waiting.\n");
        out.push_str("# TYPE dentate_ingest_queue_depth gauge\n");
        let _ = writeln!(out, "dentate_ingest_queue_depth {queue_depth}");
        out.push_str("# HELP dentate_ingest_jobs_total Ingest jobs ended, by state.\n");
        out.push_str("# TYPE dentate_ingest_jobs_total counter\n");
        if let Ok(m) = self.jobs.lock() {
            for (state, n) in m.iter() {
                let _ = writeln!(out, "dentate_ingest_jobs_total{{state=\"{}\"}} {n}", escape(state));
            }
        }
        out.push_str("# HELP dentate_ingest_messages_total Messages processed by ingest runs.\n");
        out.push_str("# TYPE dentate_ingest_messages_total counter\n");
        let _ = writeln!(
            out,
            "dentate_ingest_messages_total {}",
            self.messages.load(Ordering::Relaxed)
        );
        out.push_str("# HELP dentate_ingest_run_seconds Duration of ingest runs.\n");
        out.push_str("# TYPE dentate_ingest_run_seconds histogram\n");
        if let Ok(h) = self.job_seconds.lock() {
            write_hist(&mut out, "dentate_ingest_run_seconds", "", &h);
        }
        if let Some(s) = llm {
            out.push_str("# HELP dentate_llm_calls_total Language model calls.\n");
            out.push_str("# TYPE dentate_llm_calls_total counter\n");
            let _ = writeln!(out, "dentate_llm_calls_total {}", s.calls);
            out.push_str("# HELP dentate_llm_failures_total Language model calls that failed.\n");
            out.push_str("# TYPE dentate_llm_failures_total counter\n");
            let _ = writeln!(out, "dentate_llm_failures_total {}", s.failures);
            out.push_str("# HELP dentate_llm_tokens_total Language model tokens, by kind.\n");
            out.push_str("# TYPE dentate_llm_tokens_total counter\n");
            let _ = writeln!(out, "dentate_llm_tokens_total{{kind=\"prompt\"}} {}", s.prompt_tokens);
            let _ = writeln!(
                out,
                "dentate_llm_tokens_total{{kind=\"completion\"}} {}",
                s.completion_tokens
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histograms_are_cumulative_and_counted() {
        let m = Metrics::default();
        m.request("/v1/x", "GET", 200, Duration::from_micros(300));
        m.request("/v1/x", "GET", 200, Duration::from_millis(30));
        m.request("/v1/x", "POST", 400, Duration::from_millis(3));
        let t = m.render(2, None);
        assert!(t.contains("dentate_http_requests_total{route=\"/v1/x\",method=\"GET\",status=\"200\"} 2"));
        assert!(t.contains("dentate_http_requests_total{route=\"/v1/x\",method=\"POST\",status=\"400\"} 1"));
        assert!(t.contains("dentate_http_request_duration_seconds_bucket{route=\"/v1/x\",le=\"0.0005\"} 1"));
        assert!(t.contains("dentate_http_request_duration_seconds_bucket{route=\"/v1/x\",le=\"0.005\"} 2"));
        assert!(t.contains("dentate_http_request_duration_seconds_bucket{route=\"/v1/x\",le=\"+Inf\"} 3"));
        assert!(t.contains("dentate_ingest_queue_depth 2"));
        assert!(!t.contains("dentate_llm_calls_total"));
    }
}
