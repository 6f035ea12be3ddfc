//! Conversation files for ingestion: JSON Lines of messages, one object
//! per line, and LoCoMo JSON ([`crate::eval::locomo`]).
//!
//! A JSONL message has the text under `content` or `text`, the speaker
//! under `speaker`, `role` or `name`, and optionally `timestamp` (Unix
//! seconds, Unix milliseconds, ISO 8601 or LoCoMo's date form), `session`
//! and `id` (kept as the caller's id, for provenance). Blank lines are
//! skipped.

use crate::error::{MemoryError, Result};
use crate::store::NewMessage;
use crate::time::{MAX_TIME, MIN_TIME, parse_time};
use serde_json::Value;

fn first_str<'a>(o: &'a serde_json::Map<String, Value>, keys: &[&str]) -> Option<&'a str> {
    keys.iter().find_map(|k| o.get(*k).and_then(Value::as_str))
}

/// Parses JSON Lines messages; the error names the line and what is wrong.
pub fn parse_jsonl(text: &str) -> Result<Vec<NewMessage>> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let bad = |why: String| MemoryError::Dataset(format!("line {}: {why}", i + 1));
        let v: Value = serde_json::from_str(line).map_err(|e| bad(format!("not JSON ({e})")))?;
        let o = v.as_object().ok_or_else(|| bad("not a JSON object".into()))?;
        let text = first_str(o, &["content", "text"])
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| bad("no non-empty `content` or `text`".into()))?;
        let speaker = first_str(o, &["speaker", "role", "name"]).ok_or_else(|| bad("no `speaker` or `role`".into()))?;
        let said_at = match o.get("timestamp") {
            None | Some(Value::Null) => None,
            Some(Value::Number(n)) => {
                let t = n
                    .as_f64()
                    .filter(|t| t.is_finite())
                    .ok_or_else(|| bad("bad timestamp".into()))?;
                // Milliseconds when it reads as a date after 2286 in seconds.
                let secs = if t.abs() >= 1e10 { t / 1000.0 } else { t };
                if !(MIN_TIME as f64..=MAX_TIME as f64).contains(&secs) {
                    return Err(bad(format!("timestamp {n} is outside years 0–9999")));
                }
                Some(secs as i64)
            }
            Some(Value::String(s)) => Some(parse_time(s).ok_or_else(|| {
                bad(format!(
                    "timestamp `{s}` is not ISO 8601 or a LoCoMo date in years 0–9999"
                ))
            })?),
            Some(_) => return Err(bad("`timestamp` is neither a number nor a string".into())),
        };
        let source_ref = match o.get("id") {
            Some(Value::String(s)) => Some(s.clone()),
            Some(Value::Number(n)) => Some(n.to_string()),
            _ => None,
        };
        out.push(NewMessage {
            session: first_str(o, &["session"]).unwrap_or("default").to_string(),
            speaker: speaker.to_string(),
            text: text.to_string(),
            said_at,
            source_ref,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms_and_errors() {
        let ok = r#"{"role": "user", "content": "Hi, I moved to Oslo.", "timestamp": 1683554160}

{"speaker": "Bob", "text": "Welcome!", "timestamp": "2023-05-08T13:57:00Z", "id": "m2", "session": "s1"}
{"name": "Ann", "text": "Thanks", "timestamp": 1683554220000}
{"speaker": "Ann", "text": "Later", "timestamp": "1:56 pm on 9 May, 2023", "id": 7}"#;
        let m = parse_jsonl(ok).unwrap();
        assert_eq!(m.len(), 4);
        assert_eq!((m[0].speaker.as_str(), m[0].said_at), ("user", Some(1_683_554_160)));
        assert_eq!((m[1].session.as_str(), m[1].source_ref.as_deref()), ("s1", Some("m2")));
        assert_eq!(m[1].said_at, Some(1_683_554_220));
        assert_eq!(m[2].said_at, Some(1_683_554_220));
        assert_eq!(m[3].said_at, Some(1_683_554_160 + 86_400));
        assert_eq!(m[3].source_ref.as_deref(), Some("7"));
        // The ends of the range are accepted: numbers of 1e10 and above are
        // milliseconds, so both ends are written in milliseconds, and the
        // largest number read as seconds is just below 1e10.
        let edges = r#"{"role": "u", "content": "x", "timestamp": 253402300799000}
{"role": "u", "content": "x", "timestamp": -62167219200000}
{"role": "u", "content": "x", "timestamp": 9999999999}"#;
        let m = parse_jsonl(edges).unwrap();
        assert_eq!(
            (m[0].said_at, m[1].said_at, m[2].said_at),
            (Some(MAX_TIME), Some(MIN_TIME), Some(9_999_999_999))
        );
        for (bad, what) in [
            ("{\"role\": \"user\"}", "line 1: no non-empty"),
            ("[1]", "not a JSON object"),
            (
                "{\"role\": \"u\", \"content\": \"x\", \"timestamp\": \"yesterday\"}",
                "timestamp `yesterday`",
            ),
            ("{\"content\": \"x\"}", "no `speaker`"),
            // Out of range: later date arithmetic would overflow.
            (
                "{\"role\": \"u\", \"content\": \"x\", \"timestamp\": 1e300}",
                "outside years 0–9999",
            ),
            (
                "{\"role\": \"u\", \"content\": \"x\", \"timestamp\": -1e300}",
                "outside years 0–9999",
            ),
            (
                "{\"role\": \"u\", \"content\": \"x\", \"timestamp\": 9223372036854775807}",
                "outside years 0–9999",
            ),
            (
                "{\"role\": \"u\", \"content\": \"x\", \"timestamp\": -253402300800000}",
                "outside years 0–9999",
            ),
            (
                "{\"role\": \"u\", \"content\": \"x\", \"timestamp\": \"1:56 pm on 8 May, 99999999999999\"}",
                "in years 0–9999",
            ),
            ("\n{oops", "line 2: not JSON"),
        ] {
            let e = parse_jsonl(bad).unwrap_err().to_string();
            assert!(e.contains(what), "{bad}: {e}");
        }
    }
}
