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
use crate::sql::{Sql, Tx, args};
use crate::store::{ITEM_FIELDS, Item, Store, check_user, sorted_texts};
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

impl Store {
    /// Removes `items` (ids of `user`) and everything attached to them;
    /// adds the counts to `receipt`.
    fn remove_items(tx: &Tx<'_>, user: &str, items: &BTreeSet<i64>, receipt: &mut Erased) -> Result<()> {
        let n = |v: u64| usize::try_from(v).unwrap_or(usize::MAX);
        for &id in items {
            receipt.triples += n(tx.execute(
                r#"DELETE FROM triples WHERE "user" = ?1 AND item_id = ?2"#,
                args![user, id],
            )?);
            receipt.derivations += n(tx.execute(
                r#"DELETE FROM item_derivations WHERE "user" = ?1 AND (item_id = ?2 OR from_item = ?2)"#,
                args![user, id],
            )?);
            receipt.history += n(tx.execute(
                r#"DELETE FROM item_changes WHERE "user" = ?1 AND item_id = ?2"#,
                args![user, id],
            )?);
            tx.execute(
                r#"DELETE FROM item_sources WHERE "user" = ?1 AND item_id = ?2"#,
                args![user, id],
            )?;
        }
        // Parents last: an item may name another of the set as its parent.
        for &id in items {
            tx.execute(
                r#"UPDATE items SET parent = NULL WHERE "user" = ?1 AND parent = ?2"#,
                args![user, id],
            )?;
        }
        for &id in items {
            tx.execute(r#"DELETE FROM items WHERE "user" = ?1 AND id = ?2"#, args![user, id])?;
        }
        receipt.items.extend(items.iter().copied());
        Ok(())
    }

    /// SQLite: truncates the write-ahead log, so erased pages live in no
    /// file; retried briefly while another connection reads. PostgreSQL
    /// keeps deleted rows' bytes until its vacuum reclaims them (the
    /// server's autovacuum, or `VACUUM` by the operator).
    fn truncate_log(&self) -> Result<()> {
        let Some(c) = self.conn.sqlite() else {
            return Ok(());
        };
        if self.dir().is_none() {
            return Ok(());
        }
        for _ in 0..50 {
            let busy: i64 = c.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| r.get(0))?;
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
        let tx = self.conn.begin(Some(user))?;
        let items: BTreeSet<i64> = tx
            .ids(r#"SELECT id FROM items WHERE "user" = ?1"#, args![user])?
            .into_iter()
            .collect();
        Self::remove_items(&tx, user, &items, &mut receipt)?;
        receipt.messages = tx.ids(r#"SELECT id FROM messages WHERE "user" = ?1 ORDER BY id"#, args![user])?;
        tx.execute(r#"DELETE FROM messages WHERE "user" = ?1"#, args![user])?;
        let mut state = Vec::new();
        for r in tx.query(
            r#"SELECT pipeline, key FROM pipeline_state WHERE "user" = ?1"#,
            args![user],
        )? {
            state.push((r.text(0)?, r.text(1)?));
        }
        state.sort_unstable();
        receipt.state = state.into_iter().map(|(p, k)| format!("{p}/{k}")).collect();
        tx.execute(r#"DELETE FROM pipeline_state WHERE "user" = ?1"#, args![user])?;
        // Changes of items already gone (none today; kept exact for the receipt).
        receipt.history += usize::try_from(tx.execute(r#"DELETE FROM item_changes WHERE "user" = ?1"#, args![user])?)
            .unwrap_or(usize::MAX);
        let v = Self::bump(&tx, user)?;
        tx.commit()?;
        self.wrote(user, v);
        self.truncate_log()?;
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
        let tx = self.conn.begin(Some(user))?;
        let found = tx.query_opt(
            r#"SELECT id FROM messages WHERE id = ?1 AND "user" = ?2"#,
            args![message, user],
        )?;
        if found.is_none() {
            return Err(MemoryError::NotFound {
                user: user.to_string(),
                id: message,
            });
        }
        let mut items: BTreeSet<i64> = tx
            .ids(
                r#"SELECT item_id FROM item_sources WHERE "user" = ?2 AND message_id = ?1"#,
                args![message, user],
            )?
            .into_iter()
            .collect();
        // Close over parents and derivations.
        let mut frontier: Vec<i64> = items.iter().copied().collect();
        while let Some(id) = frontier.pop() {
            let next = tx.ids(
                r#"SELECT id FROM items WHERE "user" = ?2 AND parent = ?1
                 UNION SELECT item_id FROM item_derivations WHERE "user" = ?2 AND from_item = ?1"#,
                args![id, user],
            )?;
            for n in next {
                if items.insert(n) {
                    frontier.push(n);
                }
            }
        }
        Self::remove_items(&tx, user, &items, &mut receipt)?;
        tx.execute(
            r#"DELETE FROM item_sources WHERE "user" = ?1 AND message_id = ?2"#,
            args![user, message],
        )?;
        tx.execute(
            r#"DELETE FROM messages WHERE "user" = ?1 AND id = ?2"#,
            args![user, message],
        )?;
        receipt.messages.push(message);
        let v = Self::bump(&tx, user)?;
        tx.commit()?;
        self.wrote(user, v);
        self.truncate_log()?;
        Ok(receipt)
    }

    /// Whether `pipeline` keeps state for `user` beyond bookkeeping (a
    /// summary, a buffer, a tree): state that may summarise any message.
    pub fn summarises(&self, user: &str, pipeline: &str) -> Result<bool> {
        let keys = self.conn.query(
            r#"SELECT key FROM pipeline_state WHERE "user" = ?1 AND pipeline = ?2"#,
            args![user, pipeline],
        )?;
        for k in keys {
            if !BOOKKEEPING.contains(&k.text(0)?.as_str()) {
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
        let tx = self.conn.begin(Some(user))?;
        let items: BTreeSet<i64> = tx
            .ids(
                r#"SELECT id FROM items WHERE "user" = ?1 AND pipeline = ?2"#,
                args![user, pipeline],
            )?
            .into_iter()
            .collect();
        Self::remove_items(&tx, user, &items, receipt)?;
        let keys = sorted_texts(tx.query(
            r#"SELECT key FROM pipeline_state WHERE "user" = ?1 AND pipeline = ?2 AND key <> 'embedder'"#,
            args![user, pipeline],
        )?)?;
        receipt
            .state
            .extend(keys.into_iter().map(|k| format!("{pipeline}/{k}")));
        tx.execute(
            r#"DELETE FROM pipeline_state WHERE "user" = ?1 AND pipeline = ?2 AND key <> 'embedder'"#,
            args![user, pipeline],
        )?;
        let v = Self::bump(&tx, user)?;
        tx.commit()?;
        self.wrote(user, v);
        self.truncate_log()?;
        Ok(())
    }

    /// An item by id whether or not it was forgotten (erased items are
    /// gone), with provenance.
    pub fn item_record(&self, id: i64) -> Result<Option<ItemRecord>> {
        let Some(r) = self.conn.query_opt(
            &format!("SELECT {ITEM_FIELDS}, deleted FROM items WHERE id = ?1"),
            args![id],
        )?
        else {
            return Ok(None);
        };
        let mut item = Store::row_item(&r)?;
        let deleted = r.int(10)? != 0;
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
        let changes = self
            .conn
            .query(
                r#"SELECT event, old_text, new_text, at FROM item_changes WHERE "user" = ?2 AND item_id = ?1 ORDER BY id"#,
                args![id, user],
            )?
            .iter()
            .map(|r| {
                Ok(Change {
                    event: r.text(0)?,
                    old_text: r.opt_text(1)?,
                    new_text: r.opt_text(2)?,
                    at: r.int(3)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
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
        let mut ids = BTreeSet::new();
        for &m in messages {
            ids.extend(self.conn.ids(
                r#"SELECT s.item_id FROM item_sources s
                 JOIN items i ON i."user" = s."user" AND i.id = s.item_id
                 WHERE s."user" = ?2 AND s.message_id = ?1 AND i.deleted = 0"#,
                args![m, user],
            )?);
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
        let big = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        let ids = self.conn.ids(
            r#"SELECT id FROM messages WHERE "user" = ?1 ORDER BY id LIMIT ?2 OFFSET ?3"#,
            args![user, big(limit), big(offset)],
        )?;
        self.messages(&ids)
    }

    /// The id of `user`'s last message (0 when none).
    pub fn last_message_id(&self, user: &str) -> Result<i64> {
        self.conn.int(
            r#"SELECT COALESCE(MAX(id), 0) FROM messages WHERE "user" = ?1"#,
            args![user],
        )
    }

    /// A message by id, if it belongs to `user`.
    pub fn message_of(&self, user: &str, id: i64) -> Result<Option<crate::store::Message>> {
        Ok(self.messages(&[id])?.into_iter().find(|m| m.user == user))
    }

    /// Number of rows in the store's tables that name `user` (messages,
    /// items, provenance, derivations, pipeline state, history, triples)
    /// — 0 after [`Store::erase_user`].
    pub fn rows_of_user(&self, user: &str) -> Result<i64> {
        let mut n = 0;
        for t in [
            "messages",
            "items",
            "item_sources",
            "item_derivations",
            "pipeline_state",
            "item_changes",
            "triples",
        ] {
            n += self
                .conn
                .int(&format!(r#"SELECT COUNT(*) FROM {t} WHERE "user" = ?1"#), args![user])?;
        }
        Ok(n)
    }
}
