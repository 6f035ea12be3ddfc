//! The semantic graph: `(subject, predicate, object)` triples in the
//! store's `triples` table (schema v3), one per item, queryable by entity,
//! by predicate, and as one- or two-hop neighbourhoods.
//!
//! A triple is an item like any other (its text, vector, provenance and
//! deletion live in `items` and `item_sources`); the table adds its three
//! parts and their **keys**, the normalised forms lookups match: lower
//! case, inner whitespace collapsed, surrounding punctuation and a leading
//! article (`a`, `an`, `the`) dropped; a predicate key also drops a
//! possessive `'s` in front and a trailing copula (`'s sister is` →
//! `sister`). Entity lookups use the indexes on subject and object keys.
//! Forgotten (deleted) items drop out of every query; a corrected item
//! leaves the graph (see [`crate::Store::correct_item`]).
//!
//! This module owns the table's SQL; the store calls it (its `commit`
//! writes a step's [`crate::NewTriple`]s through `insert`, and its graph
//! queries — [`crate::Store::triples`] and the others — read through the
//! functions here), and nothing here knows the store.

use crate::error::{MemoryError, Result};
use crate::sql::{Sql, Value, args};
use std::collections::{BTreeMap, BTreeSet};

/// A stored triple with its provenance.
#[derive(Debug, Clone, PartialEq)]
pub struct Triple {
    /// The item it is.
    pub item_id: i64,
    /// Subject.
    pub subject: String,
    /// Predicate.
    pub predicate: String,
    /// Object.
    pub object: String,
    /// Source message ids, in order.
    pub sources: Vec<i64>,
    /// When its source was said (Unix seconds), if known.
    pub said_at: Option<i64>,
}

impl Triple {
    /// The triple as a sentence ([`triple_text`]).
    pub fn text(&self) -> String {
        triple_text(&self.subject, &self.predicate, &self.object)
    }

    /// The normalised subject and object ([`entity_key`]).
    pub fn ends(&self) -> [String; 2] {
        [entity_key(&self.subject), entity_key(&self.object)]
    }
}

/// A triple as one sentence: the parts joined by spaces, except that a
/// predicate opening with an apostrophe (`'s sister is`) joins its subject
/// directly (`Ann's sister is Clara`).
pub fn triple_text(subject: &str, predicate: &str, object: &str) -> String {
    if predicate.starts_with('\'') || predicate.starts_with('’') {
        format!("{subject}{predicate} {object}")
    } else {
        format!("{subject} {predicate} {object}")
    }
}

const ARTICLES: &[&str] = &["a", "an", "the"];
const COPULAS: &[&str] = &["is", "are", "was", "were", "am"];

/// Lower-case words of `s` with surrounding punctuation trimmed.
fn key_words(s: &str) -> Vec<String> {
    s.split_whitespace()
        .map(|w| {
            w.trim_matches(|c: char| !c.is_alphanumeric() && c != '\'' && c != '’')
                .replace('’', "'")
                .to_lowercase()
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// The lookup key of an entity: lower case, punctuation trimmed, a leading
/// article dropped (`The Blue Bicycle.` → `blue bicycle`).
pub fn entity_key(s: &str) -> String {
    let mut w = key_words(s);
    if w.len() > 1 && ARTICLES.contains(&w[0].as_str()) {
        w.remove(0);
    }
    w.join(" ")
}

/// The lookup key of a predicate: lower case, a leading possessive `'s`
/// and a trailing copula dropped (`'s favourite dish is` → `favourite
/// dish`; `is` stays `is`).
pub fn predicate_key(s: &str) -> String {
    let mut w = key_words(s);
    if w.first().is_some_and(|f| f == "'s" || f == "s") {
        w.remove(0);
    }
    if w.len() > 1 && w.last().is_some_and(|l| COPULAS.contains(&l.as_str())) {
        w.pop();
    }
    w.join(" ")
}

/// Inserts one triple row, `[subject, predicate, object]`, for `item`
/// (inside a step's transaction).
pub(crate) fn insert(tx: &impl Sql, user: &str, pipeline: &str, item: i64, spo: [&str; 3]) -> Result<()> {
    let [subject, predicate, object] = spo;
    if spo.iter().any(|p| p.trim().is_empty()) {
        return Err(MemoryError::Invalid(format!(
            "a triple needs a subject, a predicate and an object: ({subject:?}, {predicate:?}, {object:?})"
        )));
    }
    tx.execute(
        r#"INSERT INTO triples (item_id, "user", pipeline, subject, predicate, object, subject_key, predicate_key, object_key)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"#,
        args![
            item,
            user,
            pipeline,
            subject.trim(),
            predicate.trim(),
            object.trim(),
            entity_key(subject),
            predicate_key(predicate),
            entity_key(object)
        ],
    )?;
    Ok(())
}

const SELECT: &str = r#"SELECT t.item_id, t.subject, t.predicate, t.object, i.said_at FROM triples t
     JOIN items i ON i."user" = t."user" AND i.id = t.item_id AND i.deleted = 0
     WHERE t."user" = ?1 AND t.pipeline = ?2"#;

fn query_triples(conn: &impl Sql, sql: &str, args: &[Value]) -> Result<Vec<Triple>> {
    let mut out = Vec::new();
    for r in conn.query(sql, args)? {
        let item_id = r.int(0)?;
        out.push(Triple {
            item_id,
            subject: r.text(1)?,
            predicate: r.text(2)?,
            object: r.text(3)?,
            said_at: r.opt_int(4)?,
            sources: conn.ids(
                r#"SELECT message_id FROM item_sources WHERE "user" = ?1 AND item_id = ?2 ORDER BY message_id"#,
                args![&args[0], item_id],
            )?,
        });
    }
    Ok(out)
}

/// Every live triple of `user` made by `pipeline`, in item order.
pub(crate) fn triples(conn: &impl Sql, user: &str, pipeline: &str) -> Result<Vec<Triple>> {
    query_triples(conn, &format!("{SELECT} ORDER BY t.item_id"), args![user, pipeline])
}

/// The live triples whose subject or object is `entity` (compared by
/// [`entity_key`]), in item order.
pub(crate) fn triples_about(conn: &impl Sql, user: &str, pipeline: &str, entity: &str) -> Result<Vec<Triple>> {
    let key = entity_key(entity);
    query_triples(
        conn,
        &format!("{SELECT} AND (t.subject_key = ?3 OR t.object_key = ?3) ORDER BY t.item_id"),
        args![user, pipeline, key],
    )
}

/// The live triples with `predicate` (compared by [`predicate_key`]),
/// in item order.
pub(crate) fn triples_with_predicate(
    conn: &impl Sql,
    user: &str,
    pipeline: &str,
    predicate: &str,
) -> Result<Vec<Triple>> {
    let key = predicate_key(predicate);
    query_triples(
        conn,
        &format!("{SELECT} AND t.predicate_key = ?3 ORDER BY t.item_id"),
        args![user, pipeline, key],
    )
}

/// The triples within `hops` (1 or 2) of `entity`, each with its
/// distance: hop 1 touches `entity`; hop 2 touches an entity at the
/// other end of a hop-1 triple. Breadth first; within a hop, in item
/// order; each triple once, at its nearest hop.
pub(crate) fn neighbourhood(
    conn: &impl Sql,
    user: &str,
    pipeline: &str,
    entity: &str,
    hops: usize,
) -> Result<Vec<(usize, Triple)>> {
    if !(1..=2).contains(&hops) {
        return Err(MemoryError::Invalid(format!(
            "a neighbourhood is 1 or 2 hops, not {hops}"
        )));
    }
    let mut seen_entities: BTreeSet<String> = BTreeSet::from([entity_key(entity)]);
    let mut frontier: Vec<String> = seen_entities.iter().cloned().collect();
    let mut found: BTreeMap<i64, (usize, Triple)> = BTreeMap::new();
    for hop in 1..=hops {
        let mut next = Vec::new();
        for e in &frontier {
            for t in triples_about(conn, user, pipeline, e)? {
                for end in t.ends() {
                    if seen_entities.insert(end.clone()) {
                        next.push(end);
                    }
                }
                found.entry(t.item_id).or_insert((hop, t));
            }
        }
        frontier = next;
    }
    let mut out: Vec<(usize, Triple)> = found.into_values().collect();
    out.sort_by_key(|(hop, t)| (*hop, t.item_id));
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_normalise_what_lookups_compare() {
        assert_eq!(entity_key("  The Blue  Bicycle. "), "blue bicycle");
        assert_eq!(entity_key("Ann"), "ann");
        assert_eq!(entity_key("the"), "the");
        assert_eq!(entity_key("Caroline’s"), "caroline's");
        assert_eq!(predicate_key("'s favourite dish is"), "favourite dish");
        assert_eq!(predicate_key("’s sister is"), "sister");
        assert_eq!(predicate_key("is"), "is");
        assert_eq!(predicate_key("Has"), "has");
        assert_eq!(triple_text("Ann", "'s sister is", "Clara"), "Ann's sister is Clara");
        assert_eq!(triple_text("Pixel", "is", "a grey cat"), "Pixel is a grey cat");
    }
}
