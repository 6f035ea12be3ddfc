//! The memory store: one SQLite database (`memory.db`, WAL mode, full
//! synchronous commits) per memory directory, schema versioned with
//! migrations (`PRAGMA user_version`).
//!
//! The database is the source of truth. Raw messages are committed before
//! any processing; each pipeline step commits its new items, their vectors
//! (f16), their provenance and the pipeline's progress mark in **one**
//! transaction, so a crash or a model failure leaves the store at the last
//! completed step and ingestion resumes from the first unprocessed message.
//! Vector index files beside the database are caches rebuilt from it when
//! missing or stale.
//!
//! Several `Store`s may share one directory (a server keeps one per worker):
//! every write transaction begins `IMMEDIATE`, so writers queue on the
//! database lock (with a busy timeout) instead of failing when another
//! connection committed first.

use crate::error::{MemoryError, Result};
use crate::graph::{self, Triple};
use rusqlite::{Connection, OptionalExtension, Transaction, TransactionBehavior, params};
use std::path::{Path, PathBuf};

/// Schema migrations, in order; `user_version` counts those applied.
const MIGRATIONS: &[&str] = &[
    // v1
    "CREATE TABLE messages (
        id INTEGER PRIMARY KEY,
        user TEXT NOT NULL,
        session TEXT NOT NULL,
        seq INTEGER NOT NULL,
        speaker TEXT NOT NULL,
        text TEXT NOT NULL,
        said_at INTEGER,
        source_ref TEXT,
        ingested_at INTEGER NOT NULL
     );
     CREATE INDEX messages_by_user ON messages(user, id);
     CREATE TABLE items (
        id INTEGER PRIMARY KEY,
        user TEXT NOT NULL,
        pipeline TEXT NOT NULL,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        said_at INTEGER,
        refers_to INTEGER,
        created_at INTEGER NOT NULL,
        turn INTEGER NOT NULL,
        vector BLOB,
        deleted INTEGER NOT NULL DEFAULT 0
     );
     CREATE INDEX items_by_owner ON items(user, pipeline, deleted, id);
     CREATE TABLE item_sources (
        item_id INTEGER NOT NULL REFERENCES items(id),
        message_id INTEGER NOT NULL REFERENCES messages(id),
        PRIMARY KEY (item_id, message_id)
     );
     CREATE TABLE pipeline_state (
        user TEXT NOT NULL,
        pipeline TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY (user, pipeline, key)
     );",
    // v2: an item derived from another item of the same pipeline (Nemori's
    // semantic statements point at the episode they were learned from).
    "ALTER TABLE items ADD COLUMN parent INTEGER REFERENCES items(id);",
    // v3: (subject, predicate, object) triples of a semantic graph (Amory's
    // semantic memory). Each triple is also an item (its text, vector,
    // provenance and deletion live there); the keys are the normalised
    // forms lookups match (`crate::graph`).
    "CREATE TABLE triples (
        item_id INTEGER PRIMARY KEY REFERENCES items(id),
        user TEXT NOT NULL,
        pipeline TEXT NOT NULL,
        subject TEXT NOT NULL,
        predicate TEXT NOT NULL,
        object TEXT NOT NULL,
        subject_key TEXT NOT NULL,
        predicate_key TEXT NOT NULL,
        object_key TEXT NOT NULL
     );
     CREATE INDEX triples_by_subject ON triples(user, pipeline, subject_key);
     CREATE INDEX triples_by_object ON triples(user, pipeline, object_key);
     CREATE INDEX triples_by_predicate ON triples(user, pipeline, predicate_key);",
    // v4: item-to-item provenance with several origins (PREMem's clusters
    // are made of fragments; its reasoning fragments of the fragments of
    // two linked clusters).
    "CREATE TABLE item_derivations (
        item_id INTEGER NOT NULL REFERENCES items(id),
        from_item INTEGER NOT NULL REFERENCES items(id),
        PRIMARY KEY (item_id, from_item)
     );",
    // v5: messages by their caller id (`source_ref`), so that ingesting a
    // message already stored (same id and text) is recognised and skipped.
    "CREATE INDEX messages_by_ref ON messages(user, source_ref);",
    // v6: the turn at which an item was last retrieved (NULL: never), so
    // HEMA's "recently retrieved" salience bonus survives a restart (the
    // index files are caches; this is the source of truth).
    "ALTER TABLE items ADD COLUMN last_retrieved INTEGER;",
    // v7: the history of an item's changes after it was made (corrections
    // and forgetting), for `GET …/history`; erasure removes it with the item.
    "CREATE TABLE item_changes (
        id INTEGER PRIMARY KEY,
        item_id INTEGER NOT NULL,
        user TEXT NOT NULL,
        event TEXT NOT NULL,
        old_text TEXT,
        new_text TEXT,
        at INTEGER NOT NULL
     );
     CREATE INDEX item_changes_by_item ON item_changes(item_id, id);",
];

/// Current schema version.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// A raw message as given to ingestion.
#[derive(Debug, Clone, PartialEq)]
pub struct NewMessage {
    /// Session (conversation) name.
    pub session: String,
    /// Who said it.
    pub speaker: String,
    /// What was said.
    pub text: String,
    /// When it was said (Unix seconds), if known.
    pub said_at: Option<i64>,
    /// The caller's own id for it (LoCoMo `dia_id`), if any.
    pub source_ref: Option<String>,
}

/// A stored raw message.
#[derive(Debug, Clone, PartialEq)]
pub struct Message {
    /// Store id (increasing in ingestion order).
    pub id: i64,
    /// Owner.
    pub user: String,
    /// Position among the user's messages (0-based).
    pub seq: i64,
    /// The message as given.
    pub msg: NewMessage,
}

/// A memory item to store.
#[derive(Debug, Clone, PartialEq)]
pub struct NewItem {
    /// Item kind (`turn`, `chunk`, `summary`, …; pipeline-defined).
    pub kind: String,
    /// Text.
    pub text: String,
    /// Ids of the source messages (provenance).
    pub sources: Vec<i64>,
    /// When the source was said (Unix seconds).
    pub said_at: Option<i64>,
    /// The time the content refers to (Unix seconds), if known.
    pub refers_to: Option<i64>,
    /// Embedding (stored as f16), if the item is searchable.
    pub vector: Option<Vec<f32>>,
    /// The item it was derived from, if any.
    pub parent: Option<ItemRef>,
}

/// A reference to an item from a [`NewItem`]: one already stored, or one
/// added earlier in the same [`Step`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ItemRef {
    /// A stored item id.
    Stored(i64),
    /// The index of an earlier item in the same step's `add`.
    InStep(usize),
}

/// A stored memory item.
#[derive(Debug, Clone, PartialEq)]
pub struct Item {
    /// Store id; also the id in the vector index.
    pub id: i64,
    /// Owner.
    pub user: String,
    /// Pipeline that made it.
    pub pipeline: String,
    /// Kind.
    pub kind: String,
    /// Text.
    pub text: String,
    /// Source message ids.
    pub sources: Vec<i64>,
    /// When the source was said.
    pub said_at: Option<i64>,
    /// The time the content refers to.
    pub refers_to: Option<i64>,
    /// Pipeline turn at which it was made (salience clock).
    pub turn: i64,
    /// The item it was derived from, if any.
    pub parent: Option<i64>,
    /// When it was made (Unix seconds).
    pub created_at: i64,
}

/// A change to a live item of the step's pipeline, applied by
/// [`Store::commit`] after the step's new items are added (so it may name
/// them).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ItemUpdate {
    /// The stored item.
    pub id: i64,
    /// Its new text, if it changes.
    pub text: Option<String>,
    /// Its new embedding, if it changes.
    pub vector: Option<Vec<f32>>,
    /// Its new parent, if it changes.
    pub parent: Option<ItemRef>,
    /// Source messages to add to its provenance.
    pub add_sources: Vec<i64>,
}

/// A triple of the semantic graph ([`crate::graph`]) to store with a
/// [`Step`], for an item of that step or a stored one.
#[derive(Debug, Clone, PartialEq)]
pub struct NewTriple {
    /// The item the triple is (its text is usually [`crate::graph::triple_text`]).
    pub item: ItemRef,
    /// Subject, as written.
    pub subject: String,
    /// Predicate, as written.
    pub predicate: String,
    /// Object, as written.
    pub object: String,
}

/// One pipeline step, committed atomically by [`Store::commit`].
#[derive(Debug, Clone, Default)]
pub struct Step {
    /// Items to add.
    pub add: Vec<NewItem>,
    /// Changes to stored items (applied after `add`).
    pub update: Vec<ItemUpdate>,
    /// Triples of the semantic graph, each naming its item.
    pub triples: Vec<NewTriple>,
    /// Item ids to mark deleted.
    pub delete: Vec<i64>,
    /// Pipeline state to set.
    pub state: Vec<(String, String)>,
    /// The last message id this step has fully processed.
    pub processed_through: Option<i64>,
    /// Pipeline turn stamped on the added items.
    pub turn: i64,
    /// Item-to-item provenance: `(i, from)` records that item `i` of `add`
    /// was derived from the items `from` (see [`Store::derived_from`]).
    pub derived: Vec<(usize, Vec<ItemRef>)>,
}

/// The SQLite store of one memory directory.
#[derive(Debug)]
pub struct Store {
    pub(crate) conn: Connection,
    dir: Option<PathBuf>,
}

const SNAPSHOT_MAGIC: &[u8; 8] = b"DNTMEMDB";
const SNAPSHOT_VERSION: u32 = 1;
/// Magic, version, payload length, CRC-32.
const SNAPSHOT_HEADER: usize = 8 + 4 + 8 + 4;

/// Brings `conn` to the current schema (foreign keys on); `what` names the
/// database in errors. A database from a newer version is refused.
fn migrate(conn: &mut Connection, what: &str) -> Result<()> {
    conn.pragma_update(None, "foreign_keys", "ON")?;
    let version: u32 = conn.pragma_query_value(None, "user_version", |r| r.get(0))?;
    if version > SCHEMA_VERSION {
        return Err(MemoryError::Invalid(format!(
            "{what} has schema version {version}; this build reads up to {SCHEMA_VERSION}"
        )));
    }
    for (i, sql) in MIGRATIONS.iter().enumerate().skip(version as usize) {
        let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as u32)?;
        tx.commit()?;
    }
    Ok(())
}

fn now_secs() -> i64 {
    web_time::SystemTime::now()
        .duration_since(web_time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// Checks a user name: 1–64 characters of `[A-Za-z0-9_.-]` (it names
/// index files).
pub fn check_user(user: &str) -> Result<()> {
    let ok = !user.is_empty()
        && user.len() <= 64
        && user != "."
        && user != ".."
        && user.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    if ok {
        Ok(())
    } else {
        Err(MemoryError::Invalid(format!(
            "user `{user}`: use 1-64 characters of letters, digits, `_`, `.` and `-`"
        )))
    }
}

fn f16_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| half::f16::from_f32(*x).to_le_bytes()).collect()
}

fn blob_f32(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(2)
        .map(|c| half::f16::from_le_bytes([c[0], c[1]]).to_f32())
        .collect()
}

/// `v` as it reads back from the store (rounded through f16), so a
/// decision made on fresh vectors equals one made after a restart.
pub(crate) fn as_stored(v: &[f32]) -> Vec<f32> {
    v.iter().map(|x| half::f16::from_f32(*x).to_f32()).collect()
}

impl Store {
    /// Every live triple of `user` made by `pipeline`, in item order.
    pub fn triples(&self, user: &str, pipeline: &str) -> Result<Vec<Triple>> {
        graph::triples(&self.conn, user, pipeline)
    }

    /// The live triples whose subject or object is `entity` (compared by
    /// [`graph::entity_key`]), in item order.
    pub fn triples_about(&self, user: &str, pipeline: &str, entity: &str) -> Result<Vec<Triple>> {
        graph::triples_about(&self.conn, user, pipeline, entity)
    }

    /// The live triples with `predicate` (compared by
    /// [`graph::predicate_key`]), in item order.
    pub fn triples_with_predicate(&self, user: &str, pipeline: &str, predicate: &str) -> Result<Vec<Triple>> {
        graph::triples_with_predicate(&self.conn, user, pipeline, predicate)
    }

    /// The triples within `hops` (1 or 2) of `entity`, each with its
    /// distance: hop 1 touches `entity`; hop 2 touches an entity at the
    /// other end of a hop-1 triple. Breadth first; within a hop, in item
    /// order; each triple once, at its nearest hop.
    pub fn neighbourhood(&self, user: &str, pipeline: &str, entity: &str, hops: usize) -> Result<Vec<(usize, Triple)>> {
        graph::neighbourhood(&self.conn, user, pipeline, entity, hops)
    }

    /// Opens (creating if needed) the store in `dir` and migrates it to the
    /// current schema. A database from a newer version is refused.
    pub fn open(dir: &Path) -> Result<Store> {
        std::fs::create_dir_all(dir)?;
        let path = dir.join("memory.db");
        let mut conn = Connection::open(&path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        // Freed content is overwritten with zeros, so erased text does not
        // linger in the database file's free pages.
        conn.pragma_update(None, "secure_delete", "ON")?;
        migrate(&mut conn, &path.display().to_string())?;
        Ok(Store {
            conn,
            dir: Some(dir.to_path_buf()),
        })
    }

    /// A store that lives in memory only (no directory, no files): what the
    /// browser build uses. [`Store::to_bytes`] snapshots it and
    /// [`Store::from_bytes`] restores it.
    pub fn open_in_memory() -> Result<Store> {
        let mut conn = Connection::open_in_memory()?;
        migrate(&mut conn, "the in-memory store")?;
        Ok(Store { conn, dir: None })
    }

    /// The whole store as bytes: a checksummed snapshot of the database
    /// (header `DNTMEMDB`, version, length, CRC-32, then SQLite's
    /// serialisation), for keeping a memory in IndexedDB or a file.
    pub fn to_bytes(&mut self) -> Result<Vec<u8>> {
        let data = self.conn.serialize(rusqlite::MAIN_DB)?;
        let db: &[u8] = &data;
        let mut out = Vec::with_capacity(SNAPSHOT_HEADER + db.len());
        out.extend_from_slice(SNAPSHOT_MAGIC);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
        out.extend_from_slice(&(db.len() as u64).to_le_bytes());
        out.extend_from_slice(&crc32fast::hash(db).to_le_bytes());
        out.extend_from_slice(db);
        Ok(out)
    }

    /// Restores a store from [`Store::to_bytes`] into memory (no directory).
    /// Truncated, corrupt or foreign bytes are a [`MemoryError::Snapshot`],
    /// and a snapshot from a newer schema is refused; older schemas are
    /// migrated.
    pub fn from_bytes(bytes: &[u8]) -> Result<Store> {
        let bad = |why: String| MemoryError::Snapshot(why);
        if bytes.len() < SNAPSHOT_HEADER {
            return Err(bad(format!(
                "{} bytes is shorter than the {SNAPSHOT_HEADER}-byte header",
                bytes.len()
            )));
        }
        if &bytes[..8] != SNAPSHOT_MAGIC {
            return Err(bad("not a Dentate memory snapshot (bad magic)".into()));
        }
        let u32_at = |o: usize| u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
        let version = u32_at(8);
        if version != SNAPSHOT_VERSION {
            return Err(bad(format!(
                "snapshot version {version}; this build reads {SNAPSHOT_VERSION}"
            )));
        }
        let mut len = [0u8; 8];
        len.copy_from_slice(&bytes[12..20]);
        let len = u64::from_le_bytes(len);
        let db = &bytes[SNAPSHOT_HEADER..];
        if db.len() as u64 != len {
            return Err(bad(format!("payload is {} bytes, header says {len}", db.len())));
        }
        if crc32fast::hash(db) != u32_at(20) {
            return Err(bad("checksum mismatch".into()));
        }
        let mut conn = Connection::open_in_memory()?;
        conn.deserialize_read_exact(rusqlite::MAIN_DB, db, db.len(), false)?;
        let ok: String = conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .map_err(|e| bad(format!("the database does not read back ({e})")))?;
        if ok != "ok" {
            return Err(bad(format!("the database fails its integrity check: {ok}")));
        }
        migrate(&mut conn, "the snapshot")?;
        Ok(Store { conn, dir: None })
    }

    /// The memory directory; `None` for an in-memory store.
    pub fn dir(&self) -> Option<&Path> {
        self.dir.as_deref()
    }

    /// Appends raw messages for `user` in one transaction (before any
    /// processing); returns the ids of those stored. A message whose caller
    /// id (`source_ref`) and text are already stored for `user` — or earlier
    /// in the same batch — is the same message and is skipped, so ingesting
    /// a file again stores nothing twice (ids alone are not enough: LoCoMo's
    /// dialogue ids repeat across conversations); messages without an id
    /// cannot be recognised and are always appended.
    pub fn append_messages(&mut self, user: &str, msgs: &[NewMessage]) -> Result<Vec<i64>> {
        check_user(user)?;
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let mut seq: i64 = tx.query_row(
            "SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE user = ?1",
            [user],
            |r| r.get(0),
        )?;
        let now = now_secs();
        let mut ids = Vec::with_capacity(msgs.len());
        {
            let mut st = tx.prepare(
                "INSERT INTO messages (user, session, seq, speaker, text, said_at, source_ref, ingested_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )?;
            let mut known =
                tx.prepare("SELECT 1 FROM messages WHERE user = ?1 AND source_ref = ?2 AND text = ?3 LIMIT 1")?;
            for m in msgs {
                if let Some(r) = &m.source_ref
                    && known.exists(params![user, r, m.text])?
                {
                    continue;
                }
                st.execute(params![
                    user,
                    m.session,
                    seq,
                    m.speaker,
                    m.text,
                    m.said_at,
                    m.source_ref,
                    now
                ])?;
                ids.push(tx.last_insert_rowid());
                seq += 1;
            }
        }
        tx.commit()?;
        Ok(ids)
    }

    fn row_message(r: &rusqlite::Row<'_>) -> rusqlite::Result<Message> {
        Ok(Message {
            id: r.get(0)?,
            user: r.get(1)?,
            seq: r.get(3)?,
            msg: NewMessage {
                session: r.get(2)?,
                speaker: r.get(4)?,
                text: r.get(5)?,
                said_at: r.get(6)?,
                source_ref: r.get(7)?,
            },
        })
    }

    /// The user's messages with id greater than `after`, oldest first.
    pub fn messages_after(&self, user: &str, after: i64) -> Result<Vec<Message>> {
        let mut st = self.conn.prepare_cached(
            "SELECT id, user, session, seq, speaker, text, said_at, source_ref FROM messages
             WHERE user = ?1 AND id > ?2 ORDER BY id",
        )?;
        let rows = st.query_map(params![user, after], Self::row_message)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Messages by id (missing ids are skipped), in id order.
    pub fn messages(&self, ids: &[i64]) -> Result<Vec<Message>> {
        let mut st = self.conn.prepare_cached(
            "SELECT id, user, session, seq, speaker, text, said_at, source_ref FROM messages WHERE id = ?1",
        )?;
        let mut out = Vec::with_capacity(ids.len());
        for &id in ids {
            if let Some(m) = st.query_row([id], Self::row_message).optional()? {
                out.push(m);
            }
        }
        out.sort_by_key(|m| m.id);
        Ok(out)
    }

    /// The caller's ids (`source_ref`, e.g. LoCoMo `dia_id`s) of messages,
    /// in id order; `#<store id>` for a message stored without one.
    pub fn source_refs(&self, ids: &[i64]) -> Result<Vec<String>> {
        Ok(self
            .messages(ids)?
            .into_iter()
            .map(|m| m.msg.source_ref.unwrap_or_else(|| format!("#{}", m.id)))
            .collect())
    }

    /// The user's messages with `lo <= seq < hi`, oldest first.
    pub fn messages_in_seq(&self, user: &str, lo: i64, hi: i64) -> Result<Vec<Message>> {
        let mut st = self.conn.prepare_cached(
            "SELECT id, user, session, seq, speaker, text, said_at, source_ref FROM messages
             WHERE user = ?1 AND seq >= ?2 AND seq < ?3 ORDER BY seq",
        )?;
        let rows = st.query_map(params![user, lo, hi], Self::row_message)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The id of the last message `pipeline` has processed for `user` (0
    /// when none).
    pub fn progress(&self, user: &str, pipeline: &str) -> Result<i64> {
        Ok(self
            .state(user, pipeline, "processed_through")?
            .and_then(|v| v.parse().ok())
            .unwrap_or(0))
    }

    /// A pipeline state value.
    pub fn state(&self, user: &str, pipeline: &str, key: &str) -> Result<Option<String>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT value FROM pipeline_state WHERE user = ?1 AND pipeline = ?2 AND key = ?3")?;
        Ok(st.query_row(params![user, pipeline, key], |r| r.get(0)).optional()?)
    }

    /// Commits one pipeline step atomically; returns the new item ids.
    pub fn commit(&mut self, user: &str, pipeline: &str, step: &Step) -> Result<Vec<i64>> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let ids = Self::apply(&tx, user, pipeline, step)?;
        tx.commit()?;
        Ok(ids)
    }

    fn apply(tx: &Transaction<'_>, user: &str, pipeline: &str, step: &Step) -> Result<Vec<i64>> {
        let now = now_secs();
        let mut ids = Vec::with_capacity(step.add.len());
        {
            let mut ins = tx.prepare(
                "INSERT INTO items (user, pipeline, kind, text, said_at, refers_to, created_at, turn, vector, parent)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10)",
            )?;
            let mut src = tx.prepare("INSERT OR IGNORE INTO item_sources (item_id, message_id) VALUES (?1, ?2)")?;
            for (i, it) in step.add.iter().enumerate() {
                let parent = match it.parent {
                    None => None,
                    Some(ItemRef::Stored(id)) => Some(id),
                    Some(ItemRef::InStep(j)) if j < i => Some(ids[j]),
                    Some(ItemRef::InStep(j)) => {
                        return Err(MemoryError::Invalid(format!(
                            "item {i} of a step names item {j} of the same step as its parent; it must come earlier"
                        )));
                    }
                };
                ins.execute(params![
                    user,
                    pipeline,
                    it.kind,
                    it.text,
                    it.said_at,
                    it.refers_to,
                    now,
                    step.turn,
                    it.vector.as_deref().map(f16_blob),
                    parent
                ])?;
                let id = tx.last_insert_rowid();
                for &m in &it.sources {
                    src.execute(params![id, m])?;
                }
                ids.push(id);
            }
            let resolve = |r: ItemRef, what: &str| -> Result<i64> {
                match r {
                    ItemRef::Stored(id) => Ok(id),
                    ItemRef::InStep(j) => ids.get(j).copied().ok_or_else(|| {
                        MemoryError::Invalid(format!("{what} names item {j} of a step that adds {}", ids.len()))
                    }),
                }
            };
            let mut upd = tx.prepare(
                "UPDATE items SET text = COALESCE(?4, text), vector = COALESCE(?5, vector), parent = COALESCE(?6, parent)
                 WHERE id = ?1 AND user = ?2 AND pipeline = ?3 AND deleted = 0",
            )?;
            for u in &step.update {
                let parent = u.parent.map(|p| resolve(p, "an update")).transpose()?;
                let n = upd.execute(params![
                    u.id,
                    user,
                    pipeline,
                    u.text,
                    u.vector.as_deref().map(f16_blob),
                    parent
                ])?;
                if n > 0 {
                    for &m in &u.add_sources {
                        src.execute(params![u.id, m])?;
                    }
                }
            }
            for t in &step.triples {
                let item = resolve(t.item, "a triple")?;
                graph::insert(tx, user, pipeline, item, [&t.subject, &t.predicate, &t.object])?;
            }
            let mut der = tx.prepare("INSERT OR IGNORE INTO item_derivations (item_id, from_item) VALUES (?1, ?2)")?;
            for (i, from) in &step.derived {
                let item = *ids.get(*i).ok_or_else(|| {
                    MemoryError::Invalid(format!("a derivation names item {i} of a step of {}", ids.len()))
                })?;
                for &r in from {
                    // An item of the same step must come before the one it derives.
                    if let ItemRef::InStep(j) = r
                        && j >= *i
                    {
                        return Err(MemoryError::Invalid(format!(
                            "item {i} of a step is derived from item {j} of the same step; it must come earlier"
                        )));
                    }
                    der.execute(params![item, resolve(r, "a derivation")?])?;
                }
            }
            let mut del = tx.prepare("UPDATE items SET deleted = 1 WHERE id = ?1 AND user = ?2 AND pipeline = ?3")?;
            for &id in &step.delete {
                del.execute(params![id, user, pipeline])?;
            }
            let mut set = tx.prepare(
                "INSERT INTO pipeline_state (user, pipeline, key, value) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT (user, pipeline, key) DO UPDATE SET value = excluded.value",
            )?;
            for (k, v) in &step.state {
                set.execute(params![user, pipeline, k, v])?;
            }
            if let Some(p) = step.processed_through {
                set.execute(params![user, pipeline, "processed_through", p.to_string()])?;
            }
        }
        Ok(ids)
    }

    pub(crate) fn sources_of(&self, id: i64) -> Result<Vec<i64>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT message_id FROM item_sources WHERE item_id = ?1 ORDER BY message_id")?;
        let rows = st.query_map([id], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// An item from a row of `id, user, pipeline, kind, text, said_at,
    /// refers_to, turn, parent, created_at` (sources left empty).
    pub(crate) fn row_item(r: &rusqlite::Row<'_>) -> rusqlite::Result<Item> {
        Ok(Item {
            id: r.get(0)?,
            user: r.get(1)?,
            pipeline: r.get(2)?,
            kind: r.get(3)?,
            text: r.get(4)?,
            said_at: r.get(5)?,
            refers_to: r.get(6)?,
            turn: r.get(7)?,
            parent: r.get(8)?,
            created_at: r.get(9)?,
            sources: Vec::new(),
        })
    }

    /// The items `id` was derived from ([`Step::derived`]), live or
    /// deleted, in id order.
    pub fn derived_from(&self, id: i64) -> Result<Vec<i64>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT from_item FROM item_derivations WHERE item_id = ?1 ORDER BY from_item")?;
        let rows = st.query_map([id], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// A live item by id, with its provenance.
    pub fn item(&self, id: i64) -> Result<Option<Item>> {
        let it = self
            .conn
            .prepare_cached(
                "SELECT id, user, pipeline, kind, text, said_at, refers_to, turn, parent, created_at FROM items
                 WHERE id = ?1 AND deleted = 0",
            )?
            .query_row([id], Self::row_item)
            .optional()?;
        match it {
            Some(mut it) => {
                it.sources = self.sources_of(id)?;
                Ok(Some(it))
            }
            None => Ok(None),
        }
    }

    /// Live items of `user` made by `pipeline` (optionally of one kind),
    /// oldest first, with provenance.
    pub fn items(&self, user: &str, pipeline: &str, kind: Option<&str>) -> Result<Vec<Item>> {
        let mut st = self.conn.prepare_cached(
            "SELECT id, user, pipeline, kind, text, said_at, refers_to, turn, parent, created_at FROM items
             WHERE user = ?1 AND pipeline = ?2 AND deleted = 0 AND (?3 IS NULL OR kind = ?3) ORDER BY id",
        )?;
        let rows = st.query_map(params![user, pipeline, kind], Self::row_item)?;
        let mut items: Vec<Item> = rows.collect::<rusqlite::Result<_>>()?;
        for it in &mut items {
            it.sources = self.sources_of(it.id)?;
        }
        Ok(items)
    }

    /// `(id, turn, vector)` of every live searchable item of `user` and
    /// `pipeline` (of one kind, when given), in id order (to rebuild an
    /// index).
    pub fn vectors(&self, user: &str, pipeline: &str, kind: Option<&str>) -> Result<Vec<(i64, i64, Vec<f32>)>> {
        let mut st = self.conn.prepare_cached(
            "SELECT id, turn, vector FROM items
             WHERE user = ?1 AND pipeline = ?2 AND deleted = 0 AND vector IS NOT NULL
               AND (?3 IS NULL OR kind = ?3) ORDER BY id",
        )?;
        let rows = st.query_map(params![user, pipeline, kind], |r| {
            let b: Vec<u8> = r.get(2)?;
            Ok((r.get(0)?, r.get(1)?, blob_f32(&b)))
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Records that the live items `ids` of `user` were retrieved at
    /// `turn` (a later turn replaces an earlier one, never the reverse).
    ///
    /// The marks feed a salience bonus, not the conversation, so they are
    /// committed without waiting for the disk (`synchronous = NORMAL` for
    /// this one transaction, in WAL mode): a killed process keeps them, a
    /// power cut may lose the last few, and a retrieval costs no fsync.
    pub fn record_retrieval(&mut self, user: &str, ids: &[i64], turn: i64) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let durable = self.dir.is_some();
        if durable {
            self.conn.pragma_update(None, "synchronous", "NORMAL")?;
        }
        let res = (|| -> Result<()> {
            let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
            {
                let mut st = tx.prepare_cached(
                    "UPDATE items SET last_retrieved = MAX(COALESCE(last_retrieved, ?3), ?3)
                     WHERE id = ?1 AND user = ?2 AND deleted = 0",
                )?;
                for id in ids {
                    st.execute(params![id, user, turn])?;
                }
            }
            tx.commit()?;
            Ok(())
        })();
        if durable {
            self.conn.pragma_update(None, "synchronous", "FULL")?;
        }
        res
    }

    /// `(id, turn last retrieved)` of every live searchable item of `user`
    /// and `pipeline` (of one kind, when given) that was ever retrieved
    /// ([`Store::record_retrieval`]), in id order.
    pub fn retrievals(&self, user: &str, pipeline: &str, kind: Option<&str>) -> Result<Vec<(i64, i64)>> {
        let mut st = self.conn.prepare_cached(
            "SELECT id, last_retrieved FROM items
             WHERE user = ?1 AND pipeline = ?2 AND deleted = 0 AND vector IS NOT NULL
               AND last_retrieved IS NOT NULL AND (?3 IS NULL OR kind = ?3) ORDER BY id",
        )?;
        let rows = st.query_map(params![user, pipeline, kind], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// `(id, text)` of every live searchable item of `user` and `pipeline`
    /// (of one kind, when given), in id order (to rebuild the BM25 index).
    pub fn texts(&self, user: &str, pipeline: &str, kind: Option<&str>) -> Result<Vec<(i64, String)>> {
        let mut st = self.conn.prepare_cached(
            "SELECT id, text FROM items
             WHERE user = ?1 AND pipeline = ?2 AND deleted = 0 AND vector IS NOT NULL
               AND (?3 IS NULL OR kind = ?3) ORDER BY id",
        )?;
        let rows = st.query_map(params![user, pipeline, kind], |r| Ok((r.get(0)?, r.get(1)?)))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The stored vector of a live item, if it has one.
    pub fn vector(&self, id: i64) -> Result<Option<Vec<f32>>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT vector FROM items WHERE id = ?1 AND deleted = 0 AND vector IS NOT NULL")?;
        let b: Option<Vec<u8>> = st.query_row([id], |r| r.get(0)).optional()?;
        Ok(b.map(|b| blob_f32(&b)))
    }

    /// The text of a live item of `user`, if there is one.
    fn live_text(tx: &Transaction<'_>, user: &str, id: i64) -> Result<Option<String>> {
        Ok(tx
            .query_row(
                "SELECT text FROM items WHERE id = ?1 AND user = ?2 AND deleted = 0",
                params![id, user],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// Marks a live item of `user` deleted (its history records the text it
    /// had); returns whether it existed. [`Store::erase_source`] and
    /// [`Store::erase_user`] remove items for good.
    pub fn delete_item(&mut self, user: &str, id: i64) -> Result<bool> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let Some(old) = Self::live_text(&tx, user, id)? else {
            return Ok(false);
        };
        tx.execute("UPDATE items SET deleted = 1 WHERE id = ?1", [id])?;
        tx.execute(
            "INSERT INTO item_changes (item_id, user, event, old_text, new_text, at) VALUES (?1, ?2, 'forget', ?3, NULL, ?4)",
            params![id, user, old, now_secs()],
        )?;
        tx.commit()?;
        Ok(true)
    }

    /// Replaces the text (and vector) of a live item of `user`, keeping its
    /// id and provenance; returns whether it existed.
    /// An item that is a triple of the semantic graph leaves the graph: its
    /// corrected text is no longer known to be that triple.
    pub fn correct_item(&mut self, user: &str, id: i64, text: &str, vector: Option<&[f32]>) -> Result<bool> {
        let tx = self.conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
        let Some(old) = Self::live_text(&tx, user, id)? else {
            return Ok(false);
        };
        tx.execute(
            "UPDATE items SET text = ?2, vector = COALESCE(?3, vector) WHERE id = ?1",
            params![id, text, vector.map(f16_blob)],
        )?;
        tx.execute("DELETE FROM triples WHERE item_id = ?1", [id])?;
        tx.execute(
            "INSERT INTO item_changes (item_id, user, event, old_text, new_text, at) VALUES (?1, ?2, 'correct', ?3, ?4, ?5)",
            params![id, user, old, text, now_secs()],
        )?;
        tx.commit()?;
        Ok(true)
    }

    /// The users with stored messages, sorted.
    pub fn users(&self) -> Result<Vec<String>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT DISTINCT user FROM messages ORDER BY user")?;
        let rows = st.query_map([], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The distinct speakers of `user`'s messages, sorted.
    pub fn speakers(&self, user: &str) -> Result<Vec<String>> {
        let mut st = self
            .conn
            .prepare_cached("SELECT DISTINCT speaker FROM messages WHERE user = ?1 ORDER BY speaker")?;
        let rows = st.query_map([user], |r| r.get(0))?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Number of messages of `user`.
    pub fn message_count(&self, user: &str) -> Result<i64> {
        Ok(self
            .conn
            .query_row("SELECT COUNT(*) FROM messages WHERE user = ?1", [user], |r| r.get(0))?)
    }
}
