//! Erasure and history: removing a user, or everything derived from one
//! source message, from the store for good, with a receipt of what went;
//! and the change history of an item.
//!
//! Forgetting ([`Store::delete_item`]) only marks an item deleted, so its
//! history can still be shown. Erasure deletes rows: the messages, every
//! item whose provenance reaches them (through its sources, its parent or
//! its derivations, transitively, live or forgotten), their triples,
//! derivations and history, and — for a user — the pipeline state. The
//! connection runs with `secure_delete`, so freed pages are zeroed, and the
//! write-ahead log is checkpointed and truncated afterwards, so erased text
//! is in no file of the store. The index files beside the store are
//! [`crate::Memory`]'s to remove ([`crate::Memory::erase_user`]).

use crate::error::{MemoryError, Result};
use crate::store::{Item, Store, check_user};
use rusqlite::{OptionalExtension, Transaction, TransactionBehavior, params};
use std::collections::BTreeSet;

/// What an erasure removed: the receipt [`Store::erase_user`],
/// [`Store::erase_source`] and the [`crate::Memory`] methods of the same
/// names return.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Erased {
    /// Raw messages removed, by id.
    pub messages: Vec<i64>,
    /// Memory items removed (live or forgotten), by id.
    pub items: Vec<i64>,
    /// Triples of the semantic graph removed.
    pub triples: usize,
    /// Item-to-item derivation links removed.
    pub derivations: usize,
    /// History entries removed.
    pub history: usize,
    /// Pipeline state entries removed, as `pipeline/key`.
    pub state: Vec<String>,
    /// Index files removed (names, filled in by [`crate::Memory`]).
    pub files: Vec<String>,
    /// Pipelines whose memory of the user was rebuilt from the remaining
    /// messages, because their state summarised the erased one (HEMA's
    /// compact summary, an open Nemori episode, …); their items are
    /// counted in `items` and made anew.
    pub rebuilt: Vec<String>,
}

impl Erased {
    /// Adds what `other` removed to this receipt (item ids kept sorted and
    /// unique: a rebuild may count an item an erasure already named).
    pub fn absorb(&mut self, other: Erased) {
        self.messages.extend(other.messages);
        self.items.extend(other.items);
        self.items.sort_unstable();
        self.items.dedup();
        self.triples += other.triples;
        self.derivations += other.derivations;
        self.history += other.history;
        self.state.extend(other.state);
        self.files.extend(other.files);
        self.rebuilt.extend(other.rebuilt);
    }
}

/// One change in an item's history ([`Store::history`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// `add`, `correct` or `forget`.
    pub event: String,
    /// The text before the change (`None` for `add`).
    pub old_text: Option<String>,
    /// The text after it (`None` for `forget`).
    pub new_text: Option<String>,
    /// When (Unix seconds).
    pub at: i64,
}

/// An item as stored, forgotten or not ([`Store::item_record`]).
#[derive(Debug, Clone, PartialEq)]
pub struct ItemRecord {
    /// The item with its provenance.
    pub item: Item,
    /// Whether it was forgotten.
    pub deleted: bool,
}

/// Pipeline state keys that hold no content of messages: a pipeline
/// whose only state is these keeps its other items when one source is
/// erased; any other key (a summary, a buffer, a tree) means its state
/// summarises messages and the user's memory in it is rebuilt.
const BOOKKEEPING: &[&str] = &["processed_through", "embedder", "turn"];

fn ids_of(tx: &Transaction<'_>, sql: &str, p: impl rusqlite::Params) -> Result<Vec<i64>> {
    let mut st = tx.prepare(sql)?;
    let rows = st.query_map(p, |r| r.get(0))?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

impl Store {
    /// Removes `items` (ids of one user) and everything attached to them;
    /// adds the counts to `receipt`.
    fn remove_items(tx: &Transaction<'_>, items: &BTreeSet<i64>, receipt: &mut Erased) -> Result<()> {
        let mut triples = tx.prepare_cached("DELETE FROM triples WHERE item_id = ?1")?;
        let mut der = tx.prepare_cached("DELETE FROM item_derivations WHERE item_id = ?1 OR from_item = ?1")?;
        let mut hist = tx.prepare_cached("DELETE FROM item_changes WHERE item_id = ?1")?;
        let mut src = tx.prepare_cached("DELETE FROM item_sources WHERE item_id = ?1")?;
        let mut parent = tx.prepare_cached("UPDATE items SET parent = NULL WHERE parent = ?1")?;
        let mut item = tx.prepare_cached("DELETE FROM items WHERE id = ?1")?;
        for &id in items {
            receipt.triples += triples.execute([id])?;
            receipt.derivations += der.execute([id])?;
            receipt.history += hist.execute([id])?;
            src.execute([id])?;
        }
        // Parents last: an item may name another of the set as its parent.
        for &id in items {
            parent.execute([id])?;
        }
        for &id in items {
            item.execute([id])?;
        }
        receipt.items.extend(items.iter().copied());
        Ok(())
    }

    /// Truncates the write-ahead log, so erased pages live in no file;
    /// retried briefly while another connection reads.
    fn checkpoint(&self) -> Result<()> {
        if self.dir().is_none() {
            return Ok(());
        }
        for _ in 0..50 {
            let busy: i64 = self
                .conn
                .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))?;
            if busy == 0 {
                return Ok(());
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        Err(MemoryError::Invalid(
            "the write-ahead log could not be checkpointed (a reader holds it); the erasure is committed".into(),
        ))
    }

    /// Erases `user`: every message, item (all pipelines, live or
    /// forgotten), triple, derivation, history entry and pipeline state
    /// entry. Erasing a user with nothing stored returns an empty receipt.
    pub fn erase_user(&mut self, user: &str) -> Result<Erased> {
        check_user(user)?;
        let mut receipt = Erased::default();
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let items: BTreeSet<i64> = ids_of(&tx, "SELECT id FROM items WHERE user = ?1", [user])?
            .into_iter()
            .collect();
        Self::remove_items(&tx, &items, &mut receipt)?;
        receipt.messages = ids_of(&tx, "SELECT id FROM messages WHERE user = ?1 ORDER BY id", [user])?;
        tx.execute("DELETE FROM messages WHERE user = ?1", [user])?;
        {
            let mut st =
                tx.prepare("SELECT pipeline, key FROM pipeline_state WHERE user = ?1 ORDER BY pipeline, key")?;
            let rows = st.query_map([user], |r| {
                Ok(format!("{}/{}", r.get::<_, String>(0)?, r.get::<_, String>(1)?))
            })?;
            receipt.state = rows.collect::<rusqlite::Result<_>>()?;
        }
        tx.execute("DELETE FROM pipeline_state WHERE user = ?1", [user])?;
        // Changes of items already gone (none today; kept exact for the receipt).
        receipt.history += tx.execute("DELETE FROM item_changes WHERE user = ?1", [user])?;
        tx.commit()?;
        self.checkpoint()?;
        Ok(receipt)
    }

    /// Erases the message `message` of `user` and every item derived from
    /// it (its sources name the message, or its parent or derivations
    /// reach such an item; transitively), for every pipeline, returning the
    /// receipt. Pipelines whose state summarises messages
    /// ([`Store::summarises`]) are the caller's to rebuild
    /// ([`Store::reset_pipeline`]). A message of another user, or none, is
    /// [`MemoryError::NotFound`].
    pub fn erase_source(&mut self, user: &str, message: i64) -> Result<Erased> {
        check_user(user)?;
        let mut receipt = Erased::default();
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let found: Option<i64> = tx
            .query_row(
                "SELECT id FROM messages WHERE id = ?1 AND user = ?2",
                params![message, user],
                |r| r.get(0),
            )
            .optional()?;
        if found.is_none() {
            return Err(MemoryError::NotFound {
                user: user.to_string(),
                id: message,
            });
        }
        let mut items: BTreeSet<i64> = ids_of(
            &tx,
            "SELECT s.item_id FROM item_sources s JOIN items i ON i.id = s.item_id
             WHERE s.message_id = ?1 AND i.user = ?2",
            params![message, user],
        )?
        .into_iter()
        .collect();
        // Close over parents and derivations.
        let mut frontier: Vec<i64> = items.iter().copied().collect();
        while let Some(id) = frontier.pop() {
            let next = ids_of(
                &tx,
                "SELECT id FROM items WHERE parent = ?1 AND user = ?2
                 UNION SELECT d.item_id FROM item_derivations d JOIN items i ON i.id = d.item_id
                 WHERE d.from_item = ?1 AND i.user = ?2",
                params![id, user],
            )?;
            for n in next {
                if items.insert(n) {
                    frontier.push(n);
                }
            }
        }
        Self::remove_items(&tx, &items, &mut receipt)?;
        tx.execute("DELETE FROM item_sources WHERE message_id = ?1", [message])?;
        tx.execute("DELETE FROM messages WHERE id = ?1", [message])?;
        receipt.messages.push(message);
        tx.commit()?;
        self.checkpoint()?;
        Ok(receipt)
    }

    /// Whether `pipeline` keeps state for `user` beyond bookkeeping (a
    /// summary, a buffer, a tree): state that may summarise any message.
    pub fn summarises(&self, user: &str, pipeline: &str) -> Result<bool> {
        let mut st = self
            .conn
            .prepare_cached("SELECT key FROM pipeline_state WHERE user = ?1 AND pipeline = ?2")?;
        let keys = st.query_map(params![user, pipeline], |r| r.get::<_, String>(0))?;
        for k in keys {
            if !BOOKKEEPING.contains(&k?.as_str()) {
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// Removes every item and state entry of `user` made by `pipeline`
    /// (keeping the embedder it was built with), so that processing starts
    /// again from the user's first message; adds what went to `receipt`.
    pub fn reset_pipeline(&mut self, user: &str, pipeline: &str, receipt: &mut Erased) -> Result<()> {
        check_user(user)?;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let items: BTreeSet<i64> = ids_of(
            &tx,
            "SELECT id FROM items WHERE user = ?1 AND pipeline = ?2",
            params![user, pipeline],
        )?
        .into_iter()
        .collect();
        Self::remove_items(&tx, &items, receipt)?;
        {
            let mut st = tx.prepare(
                "SELECT key FROM pipeline_state WHERE user = ?1 AND pipeline = ?2 AND key <> 'embedder' ORDER BY key",
            )?;
            let rows = st.query_map(params![user, pipeline], |r| r.get::<_, String>(0))?;
            for k in rows {
                receipt.state.push(format!("{pipeline}/{}", k?));
            }
        }
        tx.execute(
            "DELETE FROM pipeline_state WHERE user = ?1 AND pipeline = ?2 AND key <> 'embedder'",
            params![user, pipeline],
        )?;
        tx.commit()?;
        self.checkpoint()?;
        Ok(())
    }

    /// An item by id whether or not it was forgotten (erased items are
    /// gone), with provenance.
    pub fn item_record(&self, id: i64) -> Result<Option<ItemRecord>> {
        let row = self
            .conn
            .prepare_cached(
                "SELECT id, user, pipeline, kind, text, said_at, refers_to, turn, parent, created_at, deleted
                 FROM items WHERE id = ?1",
            )?
            .query_row([id], |r| Ok((Store::row_item(r)?, r.get::<_, i64>(10)? != 0)))
            .optional()?;
        let Some((mut item, deleted)) = row else {
            return Ok(None);
        };
        item.sources = self.sources_of(id)?;
        Ok(Some(ItemRecord { item, deleted }))
    }

    /// The history of item `id` of `user`, oldest first: its making (with
    /// the text it was made with), then every correction and the
    /// forgetting. Empty when `user` has no such item.
    pub fn history(&self, user: &str, id: i64) -> Result<Vec<Change>> {
        let Some(rec) = self.item_record(id)? else {
            return Ok(Vec::new());
        };
        if rec.item.user != user {
            return Ok(Vec::new());
        }
        let mut st = self.conn.prepare_cached(
            "SELECT event, old_text, new_text, at FROM item_changes WHERE item_id = ?1 AND user = ?2 ORDER BY id",
        )?;
        let changes: Vec<Change> = st
            .query_map(params![id, user], |r| {
                Ok(Change {
                    event: r.get(0)?,
                    old_text: r.get(1)?,
                    new_text: r.get(2)?,
                    at: r.get(3)?,
                })
            })?
            .collect::<rusqlite::Result<_>>()?;
        let first = changes
            .first()
            .and_then(|c| c.old_text.clone())
            .unwrap_or_else(|| rec.item.text.clone());
        let mut out = vec![Change {
            event: "add".into(),
            old_text: None,
            new_text: Some(first),
            at: rec.item.created_at,
        }];
        out.extend(changes);
        Ok(out)
    }

    /// The live items of `user` (any pipeline) whose sources include one of
    /// `messages`, in id order, with provenance.
    pub fn items_from_messages(&self, user: &str, messages: &[i64]) -> Result<Vec<Item>> {
        let mut st = self.conn.prepare_cached(
            "SELECT DISTINCT s.item_id FROM item_sources s JOIN items i ON i.id = s.item_id
             WHERE s.message_id = ?1 AND i.user = ?2 AND i.deleted = 0",
        )?;
        let mut ids = BTreeSet::new();
        for &m in messages {
            for id in st.query_map(params![m, user], |r| r.get::<_, i64>(0))? {
                ids.insert(id?);
            }
        }
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            if let Some(it) = self.item(id)? {
                out.push(it);
            }
        }
        Ok(out)
    }

    /// `limit` of `user`'s messages from position `offset`, oldest first
    /// (positions count the messages that exist, so erased ones leave no
    /// gap in a page).
    pub fn messages_page(&self, user: &str, limit: usize, offset: usize) -> Result<Vec<crate::store::Message>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT id FROM messages WHERE user = ?1 ORDER BY id LIMIT ?2 OFFSET ?3")?;
        let ids: Vec<i64> = st
            .query_map(
                params![user, limit as i64, i64::try_from(offset).unwrap_or(i64::MAX)],
                |r| r.get(0),
            )?
            .collect::<rusqlite::Result<_>>()?;
        self.messages(&ids)
    }

    /// The id of `user`'s last message (0 when none).
    pub fn last_message_id(&self, user: &str) -> Result<i64> {
        Ok(self.conn.query_row(
            "SELECT COALESCE(MAX(id), 0) FROM messages WHERE user = ?1",
            [user],
            |r| r.get(0),
        )?)
    }

    /// A message by id, if it belongs to `user`.
    pub fn message_of(&self, user: &str, id: i64) -> Result<Option<crate::store::Message>> {
        Ok(self.messages(&[id])?.into_iter().find(|m| m.user == user))
    }

    /// Number of rows in the store's tables that name `user` (messages,
    /// items, pipeline state, history) — 0 after [`Store::erase_user`].
    pub fn rows_of_user(&self, user: &str) -> Result<i64> {
        let mut n = 0;
        for t in ["messages", "items", "pipeline_state", "item_changes", "triples"] {
            n += self
                .conn
                .query_row(&format!("SELECT COUNT(*) FROM {t} WHERE user = ?1"), [user], |r| {
                    r.get::<_, i64>(0)
                })?;
        }
        Ok(n)
    }
}
