//! A user's store rows as portable JSON Lines: what `dentate store export`
//! writes and `import` reads, the same on both engines, and how `store
//! copy` moves users between them.
//!
//! The first line is a header (`{"format":"dentate-export","version":1,
//! "user":…}`); every other line is one row, tagged by `"row"`: `message`,
//! `item` (its vector as the hex of its stored f16 bytes), `source`,
//! `derivation`, `triple`, `state` and `change`. Ids are kept, so that
//! provenance, parents, pipeline state that names ids, and index files
//! stay valid: an import into a store that already holds the user, or
//! whose ids collide, is refused and stores nothing (one transaction).

use crate::error::{MemoryError, Result};
use crate::sql::{Row, Sql, Tx, Value, args};
use crate::store::{Store, check_user};
use serde_json::{Value as Json, json};
use std::io::{BufRead, Read, Write};

/// The export format's name and version in the header.
pub const FORMAT: &str = "dentate-export";
/// The version this build writes and reads.
pub const VERSION: i64 = 1;
/// Longest line an import reads (a message or item is at most a few
/// hundred KiB); longer is an error, not an allocation.
pub const MAX_LINE: usize = 16 << 20;

/// How many rows of each kind an export wrote or an import stored.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DumpCounts {
    /// Raw messages.
    pub messages: usize,
    /// Memory items (live or forgotten).
    pub items: usize,
    /// Provenance links (item → message).
    pub sources: usize,
    /// Derivation links (item → item).
    pub derivations: usize,
    /// Triples of the semantic graph.
    pub triples: usize,
    /// Pipeline state entries.
    pub state: usize,
    /// History entries.
    pub changes: usize,
}

impl DumpCounts {
    /// All rows.
    pub fn total(&self) -> usize {
        self.messages + self.items + self.sources + self.derivations + self.triples + self.state + self.changes
    }
}

impl std::fmt::Display for DumpCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} messages, {} items, {} sources, {} derivations, {} triples, {} state entries, {} history entries",
            self.messages, self.items, self.sources, self.derivations, self.triples, self.state, self.changes
        )
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn unhex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) || !s.is_ascii() {
        return None;
    }
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).ok())
        .collect()
}

fn opt_int(r: &Row, i: usize) -> Result<Json> {
    Ok(r.opt_int(i)?.map_or(Json::Null, Json::from))
}

fn opt_text(r: &Row, i: usize) -> Result<Json> {
    Ok(r.opt_text(i)?.map_or(Json::Null, Json::from))
}

impl Store {
    /// Writes every row of `user` as JSON Lines (header first), oldest
    /// first; returns the counts.
    pub fn export_user(&self, user: &str, out: &mut dyn Write) -> Result<DumpCounts> {
        check_user(user)?;
        let c = &self.conn;
        let mut n = DumpCounts::default();
        let mut line = |v: Json| -> Result<()> {
            serde_json::to_writer(&mut *out, &v).map_err(|e| MemoryError::Io(e.into()))?;
            out.write_all(b"\n")?;
            Ok(())
        };
        line(json!({"format": FORMAT, "version": VERSION, "user": user, "engine": self.engine()}))?;
        for r in c.query(
            r#"SELECT id, session, seq, speaker, text, said_at, source_ref, ingested_at FROM messages
             WHERE "user" = ?1 ORDER BY id"#,
            args![user],
        )? {
            line(
                json!({"row": "message", "id": r.int(0)?, "session": r.text(1)?, "seq": r.int(2)?,
                "speaker": r.text(3)?, "text": r.text(4)?, "said_at": opt_int(&r, 5)?,
                "source_ref": opt_text(&r, 6)?, "ingested_at": r.int(7)?}),
            )?;
            n.messages += 1;
        }
        for r in c.query(
            r#"SELECT id, pipeline, kind, text, said_at, refers_to, created_at, turn, vector, deleted, parent,
                    last_retrieved FROM items WHERE "user" = ?1 ORDER BY id"#,
            args![user],
        )? {
            line(
                json!({"row": "item", "id": r.int(0)?, "pipeline": r.text(1)?, "kind": r.text(2)?,
                "text": r.text(3)?, "said_at": opt_int(&r, 4)?, "refers_to": opt_int(&r, 5)?,
                "created_at": r.int(6)?, "turn": r.int(7)?,
                "vector": r.opt_blob(8)?.map_or(Json::Null, |b| Json::from(hex(b))),
                "deleted": r.int(9)? != 0, "parent": opt_int(&r, 10)?, "last_retrieved": opt_int(&r, 11)?}),
            )?;
            n.items += 1;
        }
        for r in c.query(
            r#"SELECT item_id, message_id FROM item_sources WHERE "user" = ?1 ORDER BY item_id, message_id"#,
            args![user],
        )? {
            line(json!({"row": "source", "item": r.int(0)?, "message": r.int(1)?}))?;
            n.sources += 1;
        }
        for r in c.query(
            r#"SELECT item_id, from_item FROM item_derivations WHERE "user" = ?1 ORDER BY item_id, from_item"#,
            args![user],
        )? {
            line(json!({"row": "derivation", "item": r.int(0)?, "from": r.int(1)?}))?;
            n.derivations += 1;
        }
        for r in c.query(
            r#"SELECT item_id, pipeline, subject, predicate, object, subject_key, predicate_key, object_key
             FROM triples WHERE "user" = ?1 ORDER BY item_id"#,
            args![user],
        )? {
            line(
                json!({"row": "triple", "item": r.int(0)?, "pipeline": r.text(1)?, "subject": r.text(2)?,
                "predicate": r.text(3)?, "object": r.text(4)?, "subject_key": r.text(5)?,
                "predicate_key": r.text(6)?, "object_key": r.text(7)?}),
            )?;
            n.triples += 1;
        }
        let mut state = Vec::new();
        for r in c.query(
            r#"SELECT pipeline, key, value FROM pipeline_state WHERE "user" = ?1"#,
            args![user],
        )? {
            state.push((r.text(0)?, r.text(1)?, r.text(2)?));
        }
        state.sort();
        for (pipeline, key, value) in state {
            line(json!({"row": "state", "pipeline": pipeline, "key": key, "value": value}))?;
            n.state += 1;
        }
        for r in c.query(
            r#"SELECT id, item_id, event, old_text, new_text, at FROM item_changes WHERE "user" = ?1 ORDER BY id"#,
            args![user],
        )? {
            line(
                json!({"row": "change", "id": r.int(0)?, "item": r.int(1)?, "event": r.text(2)?,
                "old_text": opt_text(&r, 3)?, "new_text": opt_text(&r, 4)?, "at": r.int(5)?}),
            )?;
            n.changes += 1;
        }
        out.flush()?;
        Ok(n)
    }

    /// Reads an export ([`Store::export_user`]) and stores its rows under
    /// their ids, in one transaction, for its user (or `as_user`). Refused
    /// when the user already has rows here; a malformed line names its
    /// number; on any error nothing is stored.
    pub fn import_user(&mut self, input: &mut dyn BufRead, as_user: Option<&str>) -> Result<(String, DumpCounts)> {
        let bad = |line: usize, why: &str| MemoryError::Dataset(format!("export line {line}: {why}"));
        let mut buf = Vec::new();
        let mut read = |buf: &mut Vec<u8>| -> Result<bool> {
            buf.clear();
            let got = (&mut *input).take(MAX_LINE as u64 + 1).read_until(b'\n', buf)?;
            if buf.len() > MAX_LINE {
                return Err(MemoryError::Dataset(format!(
                    "an export line is longer than {MAX_LINE} bytes"
                )));
            }
            Ok(got > 0)
        };
        if !read(&mut buf)? {
            return Err(bad(1, "empty input"));
        }
        let head: Json = serde_json::from_slice(&buf).map_err(|e| bad(1, &format!("not JSON ({e})")))?;
        if head["format"] != FORMAT {
            return Err(bad(1, "not a Dentate export (no \"format\": \"dentate-export\")"));
        }
        if head["version"] != VERSION {
            return Err(bad(
                1,
                &format!("export version {}; this build reads {VERSION}", head["version"]),
            ));
        }
        let user = match as_user {
            Some(u) => u.to_string(),
            None => head["user"].as_str().ok_or_else(|| bad(1, "no user"))?.to_string(),
        };
        check_user(&user)?;
        let engine = self.engine();
        let tx = self.conn.begin(Some(&user))?;
        if tx.int(r#"SELECT COUNT(*) FROM messages WHERE "user" = ?1"#, args![&user])? > 0
            || tx.int(r#"SELECT COUNT(*) FROM items WHERE "user" = ?1"#, args![&user])? > 0
        {
            return Err(MemoryError::Invalid(format!(
                "user `{user}` already has rows in this store; erase it first or import under another name"
            )));
        }
        let mut n = DumpCounts::default();
        let mut parents: Vec<(i64, i64)> = Vec::new();
        let mut no = 1;
        while read(&mut buf)? {
            no += 1;
            if buf.iter().all(u8::is_ascii_whitespace) {
                continue;
            }
            let v: Json = serde_json::from_slice(&buf).map_err(|e| bad(no, &format!("not JSON ({e})")))?;
            import_row(&tx, &user, &v, &mut n, &mut parents).map_err(|e| match e {
                MemoryError::Dataset(why) => bad(no, &why),
                other => other,
            })?;
        }
        for (id, parent) in parents {
            tx.execute(
                r#"UPDATE items SET parent = ?3 WHERE "user" = ?1 AND id = ?2"#,
                args![&user, id, parent],
            )?;
        }
        if engine == "postgres" {
            // Explicit ids leave the identity sequences behind.
            for t in ["messages", "items", "item_changes"] {
                tx.batch(&format!(
                    "SELECT setval(pg_get_serial_sequence('{t}', 'id'), GREATEST((SELECT COALESCE(MAX(id), 0) FROM {t}), 1))"
                ))?;
            }
        }
        let v = Self::bump(&tx, &user)?;
        tx.commit()?;
        self.wrote(&user, v);
        Ok((user, n))
    }
}

fn field<'a>(v: &'a Json, k: &str) -> Result<&'a Json> {
    v.get(k)
        .ok_or_else(|| MemoryError::Dataset(format!("a {} row has no \"{k}\"", v["row"])))
}

fn int(v: &Json, k: &str) -> Result<i64> {
    field(v, k)?
        .as_i64()
        .ok_or_else(|| MemoryError::Dataset(format!("\"{k}\" is not an integer")))
}

fn opt_i(v: &Json, k: &str) -> Result<Option<i64>> {
    match v.get(k) {
        None | Some(Json::Null) => Ok(None),
        Some(x) => x
            .as_i64()
            .map(Some)
            .ok_or_else(|| MemoryError::Dataset(format!("\"{k}\" is not an integer or null"))),
    }
}

fn text(v: &Json, k: &str) -> Result<String> {
    field(v, k)?
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| MemoryError::Dataset(format!("\"{k}\" is not a string")))
}

fn opt_s(v: &Json, k: &str) -> Result<Option<String>> {
    match v.get(k) {
        None | Some(Json::Null) => Ok(None),
        Some(x) => x
            .as_str()
            .map(|s| Some(s.to_string()))
            .ok_or_else(|| MemoryError::Dataset(format!("\"{k}\" is not a string or null"))),
    }
}

fn import_row(tx: &Tx<'_>, user: &str, v: &Json, n: &mut DumpCounts, parents: &mut Vec<(i64, i64)>) -> Result<()> {
    match v.get("row").and_then(Json::as_str) {
        Some("message") => {
            tx.execute(
                r#"INSERT INTO messages (id, "user", session, seq, speaker, text, said_at, source_ref, ingested_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"#,
                args![
                    int(v, "id")?,
                    user,
                    text(v, "session")?,
                    int(v, "seq")?,
                    text(v, "speaker")?,
                    text(v, "text")?,
                    opt_i(v, "said_at")?,
                    opt_s(v, "source_ref")?,
                    int(v, "ingested_at")?
                ],
            )?;
            n.messages += 1;
        }
        Some("item") => {
            let vector = match opt_s(v, "vector")? {
                None => Value::Null,
                Some(h) => Value::Blob(
                    unhex(&h)
                        .filter(|b| b.len().is_multiple_of(2))
                        .ok_or_else(|| MemoryError::Dataset("\"vector\" is not hex of f16 values".into()))?,
                ),
            };
            let deleted = match field(v, "deleted")? {
                Json::Bool(b) => i64::from(*b),
                _ => return Err(MemoryError::Dataset("\"deleted\" is not true or false".into())),
            };
            let id = int(v, "id")?;
            tx.execute(
                r#"INSERT INTO items (id, "user", pipeline, kind, text, said_at, refers_to, created_at, turn, vector,
                                    deleted, last_retrieved)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12)"#,
                args![
                    id,
                    user,
                    text(v, "pipeline")?,
                    text(v, "kind")?,
                    text(v, "text")?,
                    opt_i(v, "said_at")?,
                    opt_i(v, "refers_to")?,
                    int(v, "created_at")?,
                    int(v, "turn")?,
                    vector,
                    deleted,
                    opt_i(v, "last_retrieved")?
                ],
            )?;
            if let Some(p) = opt_i(v, "parent")? {
                parents.push((id, p));
            }
            n.items += 1;
        }
        Some("source") => {
            tx.execute(
                r#"INSERT INTO item_sources ("user", item_id, message_id) VALUES (?1, ?2, ?3)"#,
                args![user, int(v, "item")?, int(v, "message")?],
            )?;
            n.sources += 1;
        }
        Some("derivation") => {
            tx.execute(
                r#"INSERT INTO item_derivations ("user", item_id, from_item) VALUES (?1, ?2, ?3)"#,
                args![user, int(v, "item")?, int(v, "from")?],
            )?;
            n.derivations += 1;
        }
        Some("triple") => {
            tx.execute(
                r#"INSERT INTO triples (item_id, "user", pipeline, subject, predicate, object, subject_key,
                                      predicate_key, object_key)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"#,
                args![
                    int(v, "item")?,
                    user,
                    text(v, "pipeline")?,
                    text(v, "subject")?,
                    text(v, "predicate")?,
                    text(v, "object")?,
                    text(v, "subject_key")?,
                    text(v, "predicate_key")?,
                    text(v, "object_key")?
                ],
            )?;
            n.triples += 1;
        }
        Some("state") => {
            tx.execute(
                r#"INSERT INTO pipeline_state ("user", pipeline, key, value) VALUES (?1, ?2, ?3, ?4)"#,
                args![user, text(v, "pipeline")?, text(v, "key")?, text(v, "value")?],
            )?;
            n.state += 1;
        }
        Some("change") => {
            tx.execute(
                r#"INSERT INTO item_changes (id, item_id, "user", event, old_text, new_text, at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)"#,
                args![
                    int(v, "id")?,
                    int(v, "item")?,
                    user,
                    text(v, "event")?,
                    opt_s(v, "old_text")?,
                    opt_s(v, "new_text")?,
                    int(v, "at")?
                ],
            )?;
            n.changes += 1;
        }
        Some(other) => return Err(MemoryError::Dataset(format!("unknown row kind `{other}`"))),
        None => return Err(MemoryError::Dataset("no \"row\" kind".into())),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    #[test]
    fn hex_round_trips_and_refuses_junk() {
        let b = vec![0u8, 1, 0xab, 0xff];
        assert_eq!(super::unhex(&super::hex(&b)).unwrap(), b);
        assert!(super::unhex("abc").is_none());
        assert!(super::unhex("zz").is_none());
        assert!(super::unhex("é1").is_none());
    }
}
