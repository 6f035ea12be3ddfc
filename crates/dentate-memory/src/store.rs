//! The memory store: one SQLite database (`memory.db`, WAL mode, full
//! synchronous commits) per memory directory by default, or a PostgreSQL
//! database shared by any number of processes ([`Store::connect`],
//! feature `postgres`). Each engine's schema is versioned with migrations
//! (SQLite: `PRAGMA user_version`; PostgreSQL: the `dentate_schema`
//! table), and a database from a newer build is refused. The statements
//! are the same on both engines ([`crate::sql`]).
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
//! connection committed first. On PostgreSQL a write transaction takes an
//! advisory lock keyed by its user, so writers of one user queue and
//! writers of different users do not wait for each other.
//!
//! Every table carries the user first in its key and no statement joins
//! rows of two users, so the PostgreSQL schema can be distributed by user
//! (Citus: [`POSTGRES_DISTRIBUTE`]).

use crate::error::{MemoryError, Result};
use crate::graph::{self, Triple};
use crate::sql::{Conn, Row, Sql, Tx, args};
use rusqlite::Connection;
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
    // v8: the user in every table's rows (provenance and derivations had
    // it only through their item), so that every statement names the user
    // it reads and the PostgreSQL twin of this schema can be distributed
    // by user; indexes for erasure's walks.
    "ALTER TABLE item_sources ADD COLUMN user TEXT NOT NULL DEFAULT '';
     UPDATE item_sources SET user = COALESCE((SELECT i.user FROM items i WHERE i.id = item_sources.item_id), '');
     ALTER TABLE item_derivations ADD COLUMN user TEXT NOT NULL DEFAULT '';
     UPDATE item_derivations SET user = COALESCE((SELECT i.user FROM items i WHERE i.id = item_derivations.item_id), '');
     CREATE INDEX item_sources_by_message ON item_sources(user, message_id);
     CREATE INDEX item_derivations_by_from ON item_derivations(user, from_item);
     CREATE INDEX items_by_parent ON items(user, parent);",
    // v9: a version per user, raised by every write of the user's rows, so
    // that a process holding caches of a user (indexes, pipeline state)
    // sees when another process changed it (`Store::changed_elsewhere`).
    "CREATE TABLE user_versions (
        user TEXT PRIMARY KEY,
        version INTEGER NOT NULL
     );",
];

/// The PostgreSQL schema's migrations, in order (the `dentate_schema`
/// table holds how many were applied). Version 1 is the SQLite schema at
/// its version 8 with every key led by the user (the distribution column
/// of a sharded deployment) and foreign keys that include it.
pub const POSTGRES_MIGRATIONS: &[&str] = &[
    // v1
    r#"CREATE TABLE messages (
        "user" TEXT NOT NULL,
        id BIGINT GENERATED BY DEFAULT AS IDENTITY,
        session TEXT NOT NULL,
        seq BIGINT NOT NULL,
        speaker TEXT NOT NULL,
        text TEXT NOT NULL,
        said_at BIGINT,
        source_ref TEXT,
        ingested_at BIGINT NOT NULL,
        PRIMARY KEY ("user", id)
     );
     CREATE INDEX messages_by_id ON messages (id);
     CREATE INDEX messages_by_ref ON messages ("user", source_ref);
     CREATE TABLE items (
        "user" TEXT NOT NULL,
        id BIGINT GENERATED BY DEFAULT AS IDENTITY,
        pipeline TEXT NOT NULL,
        kind TEXT NOT NULL,
        text TEXT NOT NULL,
        said_at BIGINT,
        refers_to BIGINT,
        created_at BIGINT NOT NULL,
        turn BIGINT NOT NULL,
        vector BYTEA,
        deleted INTEGER NOT NULL DEFAULT 0,
        parent BIGINT,
        last_retrieved BIGINT,
        PRIMARY KEY ("user", id),
        FOREIGN KEY ("user", parent) REFERENCES items ("user", id)
     );
     CREATE INDEX items_by_id ON items (id);
     CREATE INDEX items_by_owner ON items ("user", pipeline, deleted, id);
     CREATE INDEX items_by_parent ON items ("user", parent);
     CREATE TABLE item_sources (
        "user" TEXT NOT NULL,
        item_id BIGINT NOT NULL,
        message_id BIGINT NOT NULL,
        PRIMARY KEY ("user", item_id, message_id),
        FOREIGN KEY ("user", item_id) REFERENCES items ("user", id),
        FOREIGN KEY ("user", message_id) REFERENCES messages ("user", id)
     );
     CREATE INDEX item_sources_by_item ON item_sources (item_id);
     CREATE INDEX item_sources_by_message ON item_sources ("user", message_id);
     CREATE TABLE pipeline_state (
        "user" TEXT NOT NULL,
        pipeline TEXT NOT NULL,
        key TEXT NOT NULL,
        value TEXT NOT NULL,
        PRIMARY KEY ("user", pipeline, key)
     );
     CREATE TABLE triples (
        "user" TEXT NOT NULL,
        item_id BIGINT NOT NULL,
        pipeline TEXT NOT NULL,
        subject TEXT NOT NULL,
        predicate TEXT NOT NULL,
        object TEXT NOT NULL,
        subject_key TEXT NOT NULL,
        predicate_key TEXT NOT NULL,
        object_key TEXT NOT NULL,
        PRIMARY KEY ("user", item_id),
        FOREIGN KEY ("user", item_id) REFERENCES items ("user", id)
     );
     CREATE INDEX triples_by_subject ON triples ("user", pipeline, subject_key);
     CREATE INDEX triples_by_object ON triples ("user", pipeline, object_key);
     CREATE INDEX triples_by_predicate ON triples ("user", pipeline, predicate_key);
     CREATE TABLE item_derivations (
        "user" TEXT NOT NULL,
        item_id BIGINT NOT NULL,
        from_item BIGINT NOT NULL,
        PRIMARY KEY ("user", item_id, from_item),
        FOREIGN KEY ("user", item_id) REFERENCES items ("user", id),
        FOREIGN KEY ("user", from_item) REFERENCES items ("user", id)
     );
     CREATE INDEX item_derivations_by_item ON item_derivations (item_id);
     CREATE INDEX item_derivations_by_from ON item_derivations ("user", from_item);
     CREATE TABLE item_changes (
        "user" TEXT NOT NULL,
        id BIGINT GENERATED BY DEFAULT AS IDENTITY,
        item_id BIGINT NOT NULL,
        event TEXT NOT NULL,
        old_text TEXT,
        new_text TEXT,
        at BIGINT NOT NULL,
        PRIMARY KEY ("user", id)
     );
     CREATE INDEX item_changes_by_item ON item_changes ("user", item_id, id);"#,
    // v2: the version per user (SQLite v9).
    r#"CREATE TABLE user_versions (
        "user" TEXT PRIMARY KEY,
        version BIGINT NOT NULL
     );"#,
];

/// The statements that distribute the PostgreSQL schema by user on a
/// Citus cluster (run once on the coordinator after `dentate store
/// migrate`): every table is sharded by `"user"` and co-located with
/// `messages`, so a user's rows live on one node and every statement of
/// the store, which names one user, is routed to that node.
pub const POSTGRES_DISTRIBUTE: &str = "SELECT create_distributed_table('messages', 'user');
SELECT create_distributed_table('items', 'user', colocate_with => 'messages');
SELECT create_distributed_table('item_sources', 'user', colocate_with => 'messages');
SELECT create_distributed_table('pipeline_state', 'user', colocate_with => 'messages');
SELECT create_distributed_table('triples', 'user', colocate_with => 'messages');
SELECT create_distributed_table('item_derivations', 'user', colocate_with => 'messages');
SELECT create_distributed_table('item_changes', 'user', colocate_with => 'messages');
SELECT create_distributed_table('user_versions', 'user', colocate_with => 'messages');";

/// The PostgreSQL schema version this build writes.
pub const POSTGRES_SCHEMA_VERSION: u32 = POSTGRES_MIGRATIONS.len() as u32;

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

impl Message {
    /// The caller's id of the message (`source_ref`, e.g. a LoCoMo
    /// `dia_id`), or `#<store id>` when it was stored without one.
    pub fn into_ref(self) -> String {
        self.to_ref()
    }

    /// [`Message::into_ref`] of a borrowed message.
    pub fn to_ref(&self) -> String {
        self.msg.source_ref.clone().unwrap_or_else(|| format!("#{}", self.id))
    }
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

#[cfg(test)]
impl Item {
    /// A test item of user `u`: id 1, one source (message 1), said at
    /// 8 May 2023, 13:56 UTC.
    pub(crate) fn sample(pipeline: &str, kind: &str, text: &str) -> Item {
        Item {
            id: 1,
            user: "u".into(),
            pipeline: pipeline.into(),
            kind: kind.into(),
            text: text.into(),
            sources: vec![1],
            said_at: Some(1_683_554_160),
            refers_to: None,
            turn: 1,
            parent: None,
            created_at: 0,
        }
    }
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

/// The store of one memory: the SQLite database of a memory directory,
/// or a PostgreSQL database ([`Store::connect`]).
#[derive(Debug)]
pub struct Store {
    pub(crate) conn: Conn,
    dir: Option<PathBuf>,
    /// Per user, the version this handle's caller has seen
    /// ([`Store::changed_elsewhere`]) and followed with its own writes
    /// only; absent when unknown.
    synced: std::collections::HashMap<String, i64>,
    /// Whether this handle's commits skip waiting for the disk
    /// ([`Store::set_relaxed`]).
    relaxed: bool,
}

/// The store's database file in its directory (SQLite keeps its log
/// beside it, with `-wal` appended).
const DB_FILE: &str = "memory.db";
const SNAPSHOT_MAGIC: &[u8; 8] = b"DNTMEMDB";
/// Pages in SQLite's log before a commit copies it into the database
/// (SQLite's default; [`Store::set_auto_checkpoint`]).
pub const WAL_AUTOCHECKPOINT: i64 = 1000;
const SNAPSHOT_VERSION: u32 = 1;
/// Magic, version, payload length, CRC-32.
const SNAPSHOT_HEADER: usize = 8 + 4 + 8 + 4;

/// How long a SQLite connection waits for another's write lock in total.
const BUSY_WAIT: std::time::Duration = std::time::Duration::from_secs(10);

/// Makes `conn` wait up to 10 s for a lock another connection
/// holds, trying again every 100 µs for the first 2 ms and every 500 µs
/// after. SQLite's own timeout sleeps 1, 2, 5, 10, … ms between tries, so
/// a commit that found another's commit in its fsync (a few ms) used to
/// sleep on long after the lock was free, holding whatever its caller
/// held.
pub fn wait_when_busy(conn: &mut Connection) -> rusqlite::Result<()> {
    fn retry(tries: i32) -> bool {
        const FAST: i32 = 20;
        let (fast, slow) = (
            std::time::Duration::from_micros(100),
            std::time::Duration::from_micros(500),
        );
        let waited = if tries < FAST {
            fast * tries as u32
        } else {
            fast * FAST as u32 + slow * (tries - FAST) as u32
        };
        if waited >= BUSY_WAIT {
            return false;
        }
        std::thread::sleep(if tries < FAST { fast } else { slow });
        true
    }
    conn.busy_handler(Some(retry))
}

/// [`Store::checkpoint`] on any SQLite connection in WAL mode.
pub fn sqlite_checkpoint(c: &Connection, bound: i64) -> rusqlite::Result<(i64, i64)> {
    let run = |mode: &str| {
        c.query_row(&format!("PRAGMA wal_checkpoint({mode})"), [], |r| {
            Ok((r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))
        })
    };
    let (log, copied) = run("PASSIVE")?;
    if log > bound {
        run("TRUNCATE")
    } else {
        Ok((log, copied))
    }
}

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
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        tx.execute_batch(sql)?;
        tx.pragma_update(None, "user_version", (i + 1) as u32)?;
        tx.commit()?;
    }
    Ok(())
}

/// The advisory lock key migrations of a PostgreSQL database hold, so two
/// workers starting at once migrate it once.
#[cfg(feature = "postgres")]
const MIGRATION_LOCK: i64 = 0x44_4e_54_4d_49_47_52; // "DNTMIGR"

/// Brings a PostgreSQL database to the current schema, in one transaction
/// per migration under [`MIGRATION_LOCK`]; refuses a newer one. Returns
/// the version it found.
#[cfg(feature = "postgres")]
fn migrate_pg(c: &mut crate::sql::pg::PgConn, what: &str) -> Result<u32> {
    use crate::sql::Value;
    c.batch("BEGIN")?;
    let r = (|| -> Result<u32> {
        c.run("SELECT pg_advisory_xact_lock(?1)", &[Value::Int(MIGRATION_LOCK)], false)?;
        c.batch("CREATE TABLE IF NOT EXISTS dentate_schema (version INTEGER NOT NULL)")?;
        let rows = c.run("SELECT version FROM dentate_schema", &[], true)?.0;
        let found = match rows.first() {
            Some(r) => {
                u32::try_from(r.int(0)?).map_err(|_| MemoryError::Invalid(format!("{what}: bad schema version")))?
            }
            None => {
                c.run("INSERT INTO dentate_schema (version) VALUES (0)", &[], false)?;
                0
            }
        };
        if found > POSTGRES_SCHEMA_VERSION {
            return Err(MemoryError::Invalid(format!(
                "{what} has schema version {found}; this build reads up to {POSTGRES_SCHEMA_VERSION}"
            )));
        }
        for (i, sql) in POSTGRES_MIGRATIONS.iter().enumerate().skip(found as usize) {
            c.batch(sql)?;
            c.run(
                "UPDATE dentate_schema SET version = ?1",
                &[Value::Int(i as i64 + 1)],
                false,
            )?;
        }
        Ok(found)
    })();
    match r {
        Ok(v) => {
            c.batch("COMMIT")?;
            Ok(v)
        }
        Err(e) => {
            let _ = c.batch("ROLLBACK");
            Err(e)
        }
    }
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

/// Where a store lives, as `--store` and the config file name it:
/// `sqlite:DIR` (or a bare directory) or a `postgres://` / `postgresql://`
/// URL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreLocation {
    /// The embedded SQLite database of a memory directory.
    Sqlite(PathBuf),
    /// A PostgreSQL database (connection URL).
    Postgres(String),
}

impl StoreLocation {
    /// Parses `sqlite:DIR`, `postgres://…`, `postgresql://…`, or a
    /// directory.
    pub fn parse(s: &str) -> Result<StoreLocation> {
        let s = s.trim();
        if s.is_empty() {
            return Err(MemoryError::Invalid("an empty store location".into()));
        }
        if s.starts_with("postgres://") || s.starts_with("postgresql://") {
            return Ok(StoreLocation::Postgres(s.to_string()));
        }
        let dir = s.strip_prefix("sqlite:").unwrap_or(s);
        if dir.is_empty() {
            return Err(MemoryError::Invalid("`sqlite:` needs a directory".into()));
        }
        if dir.contains("://") {
            return Err(MemoryError::Invalid(format!(
                "store `{s}`: use sqlite:DIR or a postgres:// URL"
            )));
        }
        Ok(StoreLocation::Sqlite(PathBuf::from(dir)))
    }

    /// Opens the store: [`Store::open`] or [`Store::connect`] (index caches
    /// in `cache_dir`, when given).
    pub fn open(&self, cache_dir: Option<&Path>) -> Result<Store> {
        match self {
            StoreLocation::Sqlite(d) => Store::open(d),
            StoreLocation::Postgres(url) => Store::connect(url, cache_dir),
        }
    }
}

impl std::fmt::Display for StoreLocation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            StoreLocation::Sqlite(d) => write!(f, "sqlite:{}", d.display()),
            #[cfg(feature = "postgres")]
            StoreLocation::Postgres(u) => f.write_str(&crate::sql::pg::redact(u)),
            #[cfg(not(feature = "postgres"))]
            StoreLocation::Postgres(u) => f.write_str(u),
        }
    }
}

/// The first column of `rows` as text, sorted by bytes.
pub(crate) fn sorted_texts(rows: Vec<Row>) -> Result<Vec<String>> {
    let mut out = rows.iter().map(|r| r.text(0)).collect::<Result<Vec<_>>>()?;
    out.sort_unstable();
    Ok(out)
}

/// `url` (`postgres://…/db?…`) naming database `name` instead of its own.
pub fn with_database(url: &str, name: &str) -> Result<String> {
    let bad = || MemoryError::Invalid(format!("`{url}` is not a postgres:// URL"));
    let scheme = url.find("://").ok_or_else(bad)? + 3;
    let (base, query) = match url[scheme..].find('?') {
        Some(q) => url.split_at(scheme + q),
        None => (url, ""),
    };
    let host_end = base[scheme..].find('/').map_or(base.len(), |i| scheme + i);
    Ok(format!("{}/{name}{query}", &base[..host_end]))
}

const MESSAGE_COLS: &str = r#"SELECT id, "user", session, seq, speaker, text, said_at, source_ref FROM messages"#;
/// The columns [`Store::row_item`] reads, in its order.
pub(crate) const ITEM_FIELDS: &str =
    r#"id, "user", pipeline, kind, text, said_at, refers_to, turn, parent, created_at"#;

/// How many ids one `IN (…)` list of a batched lookup holds (well under
/// SQLite's and PostgreSQL's parameter limits).
pub const IN_LIST: usize = 500;

/// `?1, ?2, …` for `ids`, and their values.
fn in_list(ids: &[i64]) -> (String, Vec<crate::sql::Value>) {
    let list = (1..=ids.len()).map(|i| format!("?{i}")).collect::<Vec<_>>().join(", ");
    (list, ids.iter().map(|&i| crate::sql::Value::from(i)).collect())
}

/// The advisory lock key space of [`Store::lock_user`] (apart from the
/// write transactions' keys).
#[cfg(feature = "postgres")]
const PROCESSING_LOCK: i64 = 0x5052_4f43_4553_5321; // "PROCESS!"

impl Store {
    fn new(conn: Conn, dir: Option<PathBuf>) -> Store {
        Store {
            conn,
            dir,
            synced: std::collections::HashMap::new(),
            relaxed: false,
        }
    }

    /// Makes this handle's commits stop (`on`) or resume waiting for the
    /// disk. On a SQLite store in a directory (WAL mode) relaxed commits
    /// use `synchronous = NORMAL`: each stays atomic and in order, a
    /// killed process keeps every one, and a power cut may lose the last
    /// few, never a later one without an earlier one. For work that can be
    /// redone from what is durable (processing raw messages into items),
    /// not for what a caller was promised. Stores without a directory and
    /// PostgreSQL stores ignore it: their commits keep their usual
    /// durability.
    pub fn set_relaxed(&mut self, on: bool) -> Result<()> {
        if self.dir.is_some()
            && let Some(c) = self.conn.sqlite()
        {
            c.pragma_update(None, "synchronous", if on { "NORMAL" } else { "FULL" })?;
            self.relaxed = on;
        }
        Ok(())
    }

    /// Whether this handle's commits copy SQLite's log into the database
    /// once it holds [`WAL_AUTOCHECKPOINT`] pages (on, SQLite's default).
    /// A checkpoint syncs the log and the database, so a server turns it
    /// off on the handles requests wait for and calls
    /// [`Store::checkpoint`] from one of its own instead; a handle with it
    /// off and nobody checkpointing lets the log grow. PostgreSQL and
    /// in-memory stores ignore it.
    pub fn set_auto_checkpoint(&mut self, on: bool) -> Result<()> {
        if self.dir.is_some()
            && let Some(c) = self.conn.sqlite()
        {
            c.pragma_update(None, "wal_autocheckpoint", if on { WAL_AUTOCHECKPOINT } else { 0 })?;
        }
        Ok(())
    }

    /// Copies what SQLite's log holds into the database as far as readers
    /// allow, without waiting for them (`wal_checkpoint(PASSIVE)`); the
    /// log starts over at a later commit once all of it was copied. When
    /// the log still holds more than `bound` pages (it cannot start over
    /// while commits keep coming), it is copied in full and emptied
    /// (`TRUNCATE`: writers wait for that, up to the busy timeout), so the
    /// file never grows without bound. Returns the log's pages and how
    /// many of them are in the database; `(0, 0)` where there is no log
    /// (PostgreSQL, in memory).
    pub fn checkpoint(&mut self, bound: i64) -> Result<(i64, i64)> {
        match (&self.dir, self.conn.sqlite()) {
            (Some(_), Some(c)) => Ok(sqlite_checkpoint(c, bound)?),
            _ => Ok((0, 0)),
        }
    }

    /// The file whose fsync makes every commit made so far on this store,
    /// relaxed ones included ([`Store::set_relaxed`]), survive a power cut:
    /// SQLite's write-ahead log (when absent, everything is in the
    /// database file and synced). `None` where commits are never relaxed.
    pub fn durability_barrier(&self) -> Option<PathBuf> {
        match (&self.dir, self.conn.sqlite()) {
            (Some(d), Some(_)) => Some(d.join(format!("{DB_FILE}-wal"))),
            _ => None,
        }
    }

    /// Raises `user`'s version inside a write transaction; returns it.
    pub(crate) fn bump(tx: &Tx<'_>, user: &str) -> Result<i64> {
        tx.int(
            r#"INSERT INTO user_versions ("user", version) VALUES (?1, 1)
             ON CONFLICT ("user") DO UPDATE SET version = user_versions.version + 1 RETURNING version"#,
            args![user],
        )
    }

    /// Notes a committed write of `user` that raised its version to `v`:
    /// still in step when the caller had seen `v - 1`, unknown otherwise
    /// (another process wrote in between).
    pub(crate) fn wrote(&mut self, user: &str, v: i64) {
        if self.synced.get(user) == Some(&(v - 1)) {
            self.synced.insert(user.to_string(), v);
        } else {
            self.synced.remove(user);
        }
    }

    /// `user`'s version: raised by every write that changes what caches of
    /// the user hold (steps, corrections, forgetting, erasure, imports; not
    /// appends of raw messages nor retrieval marks), by any process (0
    /// before the first).
    pub fn user_version(&self, user: &str) -> Result<i64> {
        Ok(self
            .conn
            .query_opt(r#"SELECT version FROM user_versions WHERE "user" = ?1"#, args![user])?
            .map(|r| r.int(0))
            .transpose()?
            .unwrap_or(0))
    }

    /// Whether `user` changed other than through this handle since the
    /// last call: the current version when it did (always on the first
    /// call), `None` when this handle is in step. A caller holding caches
    /// of the user refreshes them when it is not. Afterwards the current
    /// version counts as seen.
    pub fn changed_elsewhere(&mut self, user: &str) -> Result<Option<i64>> {
        let v = self.user_version(user)?;
        let same = self.synced.get(user) == Some(&v);
        self.synced.insert(user.to_string(), v);
        Ok((!same).then_some(v))
    }

    /// The version of `user` this handle is in step with, if known
    /// ([`Store::changed_elsewhere`] and this handle's own writes since).
    pub fn seen_version(&self, user: &str) -> Option<i64> {
        self.synced.get(user).copied()
    }

    /// Waits for, then holds, the right to process `user`'s messages: one
    /// holder at a time across every process on a PostgreSQL store
    /// (a session advisory lock, released by [`Store::unlock_user`] or when
    /// the holder's connection ends, e.g. the process is killed). Waits at
    /// most `wait`; `Ok(false)` when it did not get it. On SQLite (one
    /// process per directory serves it) it is always granted.
    pub fn lock_user(&mut self, user: &str, wait: std::time::Duration) -> Result<bool> {
        #[cfg(feature = "postgres")]
        if let Conn::Pg(c) = &self.conn {
            use crate::sql::{Value, user_lock_key};
            let key = user_lock_key(user) ^ PROCESSING_LOCK;
            let deadline = web_time::Instant::now() + wait;
            loop {
                let got = c
                    .borrow_mut()
                    .run("SELECT pg_try_advisory_lock(?1)", &[Value::Int(key)], true)?
                    .0
                    .first()
                    .map(|r| r.int(0))
                    .transpose()?
                    == Some(1);
                if got {
                    return Ok(true);
                }
                if web_time::Instant::now() >= deadline {
                    return Ok(false);
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        let _ = (user, wait);
        Ok(true)
    }

    /// Gives back [`Store::lock_user`].
    pub fn unlock_user(&mut self, user: &str) -> Result<()> {
        #[cfg(feature = "postgres")]
        if let Conn::Pg(c) = &self.conn {
            use crate::sql::{Value, user_lock_key};
            c.borrow_mut().run(
                "SELECT pg_advisory_unlock(?1)",
                &[Value::Int(user_lock_key(user) ^ PROCESSING_LOCK)],
                true,
            )?;
        }
        let _ = user;
        Ok(())
    }

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
        let path = dir.join(DB_FILE);
        let mut conn = Connection::open(&path)?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        conn.pragma_update(None, "synchronous", "FULL")?;
        wait_when_busy(&mut conn)?;
        conn.set_prepared_statement_cache_capacity(64);
        // Reads map the file instead of copying each page through a
        // system call, and 32 MiB of pages stay cached per connection: a
        // search reads its hits' items, sources and messages (tens of
        // pages), which with SQLite's 2 MiB default were read again from
        // the OS on every search once the store outgrew it.
        conn.pragma_update(None, "mmap_size", 1i64 << 30)?;
        conn.pragma_update(None, "cache_size", -32768)?;
        // Freed content is overwritten with zeros, so erased text does not
        // linger in the database file's free pages.
        conn.pragma_update(None, "secure_delete", "ON")?;
        migrate(&mut conn, &path.display().to_string())?;
        Ok(Store::new(Conn::Sqlite(conn), Some(dir.to_path_buf())))
    }

    /// Connects to the PostgreSQL database at `url` (`postgres://user:pw@host:port/db`,
    /// or `postgres:///db?host=/run/postgresql` for a socket) and migrates it
    /// to the current schema; a database from a newer build is refused.
    /// Any number of processes may share one database. `cache_dir`, when
    /// given, is where [`crate::Memory`] keeps its index files (caches of
    /// this store); without it indexes are rebuilt in memory when needed.
    ///
    /// Without the `postgres` feature this is an error.
    pub fn connect(url: &str, cache_dir: Option<&Path>) -> Result<Store> {
        #[cfg(feature = "postgres")]
        {
            let mut c = crate::sql::pg::PgConn::connect(url)?;
            let what = c.url.clone();
            migrate_pg(&mut c, &what)?;
            if let Some(d) = cache_dir {
                std::fs::create_dir_all(d)?;
            }
            Ok(Store::new(
                Conn::Pg(Box::new(std::cell::RefCell::new(c))),
                cache_dir.map(Path::to_path_buf),
            ))
        }
        #[cfg(not(feature = "postgres"))]
        {
            let _ = (url, cache_dir);
            Err(MemoryError::Invalid(
                "this build has no PostgreSQL engine (feature `postgres`)".into(),
            ))
        }
    }

    /// Creates the database `name` (letters, digits and `_`) on the
    /// PostgreSQL server that `admin_url` reaches (a role allowed to
    /// create databases) and returns `admin_url` naming it instead: how
    /// tests and `dentate store` set up a fresh database.
    #[cfg(feature = "postgres")]
    pub fn create_database(admin_url: &str, name: &str) -> Result<String> {
        if name.is_empty() || name.len() > 63 || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
            return Err(MemoryError::Invalid(format!(
                "database name `{name}`: use 1-63 letters, digits and `_`"
            )));
        }
        let mut c = crate::sql::pg::PgConn::connect(admin_url)?;
        c.batch(&format!("CREATE DATABASE \"{name}\""))?;
        with_database(admin_url, name)
    }

    /// Which engine holds the store: `sqlite` or `postgres`.
    pub fn engine(&self) -> &'static str {
        self.conn.engine()
    }

    /// The schema version of the store's engine as stored (after opening:
    /// this build's, [`SCHEMA_VERSION`] or [`POSTGRES_SCHEMA_VERSION`]).
    pub fn schema_version(&self) -> Result<u32> {
        let v = match &self.conn {
            Conn::Sqlite(c) => c.pragma_query_value(None, "user_version", |r| r.get::<_, i64>(0))?,
            #[cfg(feature = "postgres")]
            Conn::Pg(_) => self.conn.int("SELECT version FROM dentate_schema", &[])?,
        };
        u32::try_from(v).map_err(|_| MemoryError::Invalid(format!("schema version {v}")))
    }

    /// A store that lives in memory only (no directory, no files): what the
    /// browser build uses. [`Store::to_bytes`] snapshots it and
    /// [`Store::from_bytes`] restores it.
    pub fn open_in_memory() -> Result<Store> {
        let mut conn = Connection::open_in_memory()?;
        conn.set_prepared_statement_cache_capacity(64);
        migrate(&mut conn, "the in-memory store")?;
        Ok(Store::new(Conn::Sqlite(conn), None))
    }

    /// The whole store as bytes: a checksummed snapshot of the database
    /// (header `DNTMEMDB`, version, length, CRC-32, then SQLite's
    /// serialisation), for keeping a memory in IndexedDB or a file. A
    /// PostgreSQL store has no snapshot (use `dentate store export`).
    pub fn to_bytes(&mut self) -> Result<Vec<u8>> {
        let Some(conn) = self.conn.sqlite_mut() else {
            return Err(MemoryError::Invalid(
                "a PostgreSQL store has no snapshot; export its users (`dentate store export`)".into(),
            ));
        };
        let data = conn.serialize(rusqlite::MAIN_DB)?;
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
        conn.set_prepared_statement_cache_capacity(64);
        conn.deserialize_read_exact(rusqlite::MAIN_DB, db, db.len(), false)?;
        let ok: String = conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .map_err(|e| bad(format!("the database does not read back ({e})")))?;
        if ok != "ok" {
            return Err(bad(format!("the database fails its integrity check: {ok}")));
        }
        migrate(&mut conn, "the snapshot")?;
        Ok(Store::new(Conn::Sqlite(conn), None))
    }

    /// The memory directory (for a PostgreSQL store, the index cache
    /// directory it was connected with); `None` for an in-memory store.
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
    ///
    /// Raw messages change no cache of the user (pipelines read them from
    /// the store when they process), so an append does not raise the
    /// user's version; the step that processes them does.
    ///
    /// A message with empty text, or said outside years 0–9999, refuses
    /// the whole batch ([`MemoryError::Invalid`]).
    pub fn append_messages(&mut self, user: &str, msgs: &[NewMessage]) -> Result<Vec<i64>> {
        check_user(user)?;
        if let Some(i) = msgs.iter().position(|m| m.text.trim().is_empty()) {
            return Err(MemoryError::Invalid(format!("message {i} has empty text")));
        }
        if let Some((i, t)) = msgs
            .iter()
            .enumerate()
            .find_map(|(i, m)| m.said_at.filter(|&t| !crate::time::in_range(t)).map(|t| (i, t)))
        {
            return Err(MemoryError::Invalid(format!(
                "message {i} was said at {t}, outside years 0–9999 (Unix seconds {}..={})",
                crate::time::MIN_TIME,
                crate::time::MAX_TIME
            )));
        }
        let tx = self.conn.begin(Some(user))?;
        let ids = Self::append_in(&tx, user, msgs, now_secs())?;
        tx.commit()?;
        Ok(ids)
    }

    /// [`Store::append_messages`] inside a transaction, every message
    /// stamped `now`.
    fn append_in(tx: &Tx<'_>, user: &str, msgs: &[NewMessage], now: i64) -> Result<Vec<i64>> {
        let mut seq = tx.int(
            r#"SELECT COALESCE(MAX(seq) + 1, 0) FROM messages WHERE "user" = ?1"#,
            args![user],
        )?;
        let mut ids = Vec::with_capacity(msgs.len());
        for m in msgs {
            if let Some(r) = &m.source_ref
                && tx
                    .query_opt(
                        r#"SELECT id FROM messages WHERE "user" = ?1 AND source_ref = ?2 AND text = ?3 LIMIT 1"#,
                        args![user, r, &m.text],
                    )?
                    .is_some()
            {
                continue;
            }
            ids.push(tx.int(
                r#"INSERT INTO messages ("user", session, seq, speaker, text, said_at, source_ref, ingested_at)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8) RETURNING id"#,
                args![
                    user,
                    &m.session,
                    seq,
                    &m.speaker,
                    &m.text,
                    m.said_at,
                    &m.source_ref,
                    now
                ],
            )?);
            seq += 1;
        }
        Ok(ids)
    }

    fn row_message(r: &Row) -> Result<Message> {
        Ok(Message {
            id: r.int(0)?,
            user: r.text(1)?,
            seq: r.int(3)?,
            msg: NewMessage {
                session: r.text(2)?,
                speaker: r.text(4)?,
                text: r.text(5)?,
                said_at: r.opt_int(6)?,
                source_ref: r.opt_text(7)?,
            },
        })
    }

    fn messages_where(&self, cond: &str, args: &[crate::sql::Value]) -> Result<Vec<Message>> {
        self.conn
            .query(&format!("{MESSAGE_COLS} {cond}"), args)?
            .iter()
            .map(Self::row_message)
            .collect()
    }

    /// The user's messages with id greater than `after`, oldest first.
    pub fn messages_after(&self, user: &str, after: i64) -> Result<Vec<Message>> {
        self.messages_where(r#"WHERE "user" = ?1 AND id > ?2 ORDER BY id"#, args![user, after])
    }

    /// Messages by id (missing ids are skipped), in id order, each once.
    pub fn messages(&self, ids: &[i64]) -> Result<Vec<Message>> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(IN_LIST) {
            let (list, vals) = in_list(chunk);
            out.extend(self.messages_where(&format!("WHERE id IN ({list})"), &vals)?);
        }
        out.sort_by_key(|m| m.id);
        out.dedup_by_key(|m| m.id);
        Ok(out)
    }

    /// The caller's ids (`source_ref`, e.g. LoCoMo `dia_id`s) of messages,
    /// in id order; `#<store id>` for a message stored without one.
    pub fn source_refs(&self, ids: &[i64]) -> Result<Vec<String>> {
        Ok(self.messages(ids)?.into_iter().map(Message::into_ref).collect())
    }

    /// The user's messages just before and just after each of `ids` in
    /// the order said (those of another session included: the caller
    /// tells them apart), each once, by id. A user's messages are mostly
    /// stored one after another, so the ids next to each are read first
    /// (one lookup by id for all); only where such an id is missing or
    /// another user's is the neighbour sought (one statement per 64, an
    /// indexed lookup each).
    pub fn adjacent_messages(&self, user: &str, ids: &[i64]) -> Result<Vec<Message>> {
        let mut ids = ids.to_vec();
        ids.sort_unstable();
        ids.dedup();
        let next_to: Vec<i64> = ids
            .iter()
            .flat_map(|&i| [i.saturating_sub(1), i.saturating_add(1)])
            .collect();
        let mut out: Vec<Message> = self
            .messages(&next_to)?
            .into_iter()
            .filter(|m| m.user == user)
            .collect();
        let has = |out: &[Message], id: i64| out.iter().any(|m| m.id == id);
        // (id, whether the neighbour sought is the one before it)
        let missing: Vec<(i64, bool)> = ids
            .iter()
            .flat_map(|&i| [(i, true), (i, false)])
            .filter(|&(i, before)| {
                !has(
                    &out,
                    if before {
                        i.saturating_sub(1)
                    } else {
                        i.saturating_add(1)
                    },
                )
            })
            .collect();
        for chunk in missing.chunks(64) {
            let mut args: Vec<crate::sql::Value> = vec![user.into()];
            let mut parts = Vec::with_capacity(chunk.len());
            for (n, &(id, before)) in chunk.iter().enumerate() {
                args.push(id.into());
                let (at, cmp, order) = (
                    n + 2,
                    if before { "<" } else { ">" },
                    if before { "DESC" } else { "ASC" },
                );
                parts.push(format!(
                    r#"SELECT * FROM ({MESSAGE_COLS} WHERE "user" = ?1 AND id {cmp} ?{at} ORDER BY id {order} LIMIT 1) AS n{n}"#
                ));
            }
            for r in self.conn.query(&parts.join(" UNION ALL "), &args)? {
                out.push(Self::row_message(&r)?);
            }
        }
        out.sort_by_key(|m| m.id);
        out.dedup_by_key(|m| m.id);
        Ok(out)
    }

    /// The live items of `pipeline` for `user` made from any of the
    /// messages `ids`, as (message id, item id, kind), sorted.
    pub fn items_of_messages(&self, user: &str, pipeline: &str, ids: &[i64]) -> Result<Vec<(i64, i64, String)>> {
        let mut out = Vec::new();
        for chunk in ids.chunks(IN_LIST) {
            let (list, mut vals) = in_list(chunk);
            let n = vals.len();
            vals.push(user.into());
            vals.push(pipeline.into());
            for r in self.conn.query(
                &format!(
                    // The sources first (by message, indexed), then each
                    // item by id: SQLite keeps a CROSS JOIN's order.
                    r#"SELECT s.message_id, i.id, i.kind FROM item_sources s CROSS JOIN items i
                       WHERE i.id = s.item_id AND s."user" = ?{} AND s.message_id IN ({list})
                       AND i.pipeline = ?{} AND i.deleted = 0"#,
                    n + 1,
                    n + 2
                ),
                &vals,
            )? {
                out.push((r.int(0)?, r.int(1)?, r.text(2)?));
            }
        }
        out.sort();
        out.dedup();
        Ok(out)
    }

    /// The user's messages with `lo <= seq < hi`, oldest first.
    pub fn messages_in_seq(&self, user: &str, lo: i64, hi: i64) -> Result<Vec<Message>> {
        self.messages_where(
            r#"WHERE "user" = ?1 AND seq >= ?2 AND seq < ?3 ORDER BY seq"#,
            args![user, lo, hi],
        )
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
        self.conn
            .query_opt(
                r#"SELECT value FROM pipeline_state WHERE "user" = ?1 AND pipeline = ?2 AND key = ?3"#,
                args![user, pipeline, key],
            )?
            .map(|r| r.text(0))
            .transpose()
    }

    /// Commits one pipeline step atomically; returns the new item ids.
    pub fn commit(&mut self, user: &str, pipeline: &str, step: &Step) -> Result<Vec<i64>> {
        let tx = self.conn.begin(Some(user))?;
        let ids = Self::apply(&tx, user, pipeline, step)?;
        let v = Self::bump(&tx, user)?;
        tx.commit()?;
        self.wrote(user, v);
        Ok(ids)
    }

    fn add_source(tx: &Tx<'_>, user: &str, item: i64, message: i64) -> Result<()> {
        tx.execute(
            r#"INSERT INTO item_sources ("user", item_id, message_id) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING"#,
            args![user, item, message],
        )?;
        Ok(())
    }

    fn apply(tx: &Tx<'_>, user: &str, pipeline: &str, step: &Step) -> Result<Vec<i64>> {
        let now = now_secs();
        let mut ids = Vec::with_capacity(step.add.len());
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
            let id = tx.int(
                r#"INSERT INTO items ("user", pipeline, kind, text, said_at, refers_to, created_at, turn, vector, parent)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) RETURNING id"#,
                args![
                    user,
                    pipeline,
                    &it.kind,
                    &it.text,
                    it.said_at,
                    it.refers_to,
                    now,
                    step.turn,
                    it.vector.as_deref().map(f16_blob),
                    parent
                ],
            )?;
            for &m in &it.sources {
                Self::add_source(tx, user, id, m)?;
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
        for u in &step.update {
            let parent = u.parent.map(|p| resolve(p, "an update")).transpose()?;
            let n = tx.execute(
                r#"UPDATE items SET text = COALESCE(?4, text), vector = COALESCE(?5, vector), parent = COALESCE(?6, parent)
                 WHERE id = ?1 AND "user" = ?2 AND pipeline = ?3 AND deleted = 0"#,
                args![
                    u.id,
                    user,
                    pipeline,
                    &u.text,
                    u.vector.as_deref().map(f16_blob),
                    parent
                ],
            )?;
            if n > 0 {
                for &m in &u.add_sources {
                    Self::add_source(tx, user, u.id, m)?;
                }
            }
        }
        for t in &step.triples {
            let item = resolve(t.item, "a triple")?;
            graph::insert(tx, user, pipeline, item, [&t.subject, &t.predicate, &t.object])?;
        }
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
                tx.execute(
                    r#"INSERT INTO item_derivations ("user", item_id, from_item) VALUES (?1, ?2, ?3) ON CONFLICT DO NOTHING"#,
                    args![user, item, resolve(r, "a derivation")?],
                )?;
            }
        }
        for &id in &step.delete {
            tx.execute(
                r#"UPDATE items SET deleted = 1 WHERE id = ?1 AND "user" = ?2 AND pipeline = ?3"#,
                args![id, user, pipeline],
            )?;
        }
        let set = |k: &str, v: &str| -> Result<()> {
            tx.execute(
                r#"INSERT INTO pipeline_state ("user", pipeline, key, value) VALUES (?1, ?2, ?3, ?4)
                 ON CONFLICT ("user", pipeline, key) DO UPDATE SET value = excluded.value"#,
                args![user, pipeline, k, v],
            )?;
            Ok(())
        };
        for (k, v) in &step.state {
            set(k, v)?;
        }
        if let Some(p) = step.processed_through {
            set("processed_through", &p.to_string())?;
        }
        Ok(ids)
    }

    pub(crate) fn sources_of(&self, id: i64) -> Result<Vec<i64>> {
        self.conn.ids(
            "SELECT message_id FROM item_sources WHERE item_id = ?1 ORDER BY message_id",
            args![id],
        )
    }

    /// An item from a row of `id, user, pipeline, kind, text, said_at,
    /// refers_to, turn, parent, created_at` ([`ITEM_FIELDS`]; sources left
    /// empty).
    pub(crate) fn row_item(r: &Row) -> Result<Item> {
        Ok(Item {
            id: r.int(0)?,
            user: r.text(1)?,
            pipeline: r.text(2)?,
            kind: r.text(3)?,
            text: r.text(4)?,
            said_at: r.opt_int(5)?,
            refers_to: r.opt_int(6)?,
            turn: r.int(7)?,
            parent: r.opt_int(8)?,
            created_at: r.int(9)?,
            sources: Vec::new(),
        })
    }

    /// The items `id` was derived from ([`Step::derived`]), live or
    /// deleted, in id order.
    pub fn derived_from(&self, id: i64) -> Result<Vec<i64>> {
        self.conn.ids(
            "SELECT from_item FROM item_derivations WHERE item_id = ?1 ORDER BY from_item",
            args![id],
        )
    }

    /// Live items by id, with provenance, in the order of `ids` (missing
    /// and deleted ones skipped): two queries per [`IN_LIST`] ids, where
    /// [`Store::item`] costs two per item.
    pub fn items_by_id(&self, ids: &[i64]) -> Result<Vec<Item>> {
        let mut found: std::collections::HashMap<i64, Item> = std::collections::HashMap::with_capacity(ids.len());
        for chunk in ids.chunks(IN_LIST) {
            let (list, vals) = in_list(chunk);
            for r in self.conn.query(
                &format!("SELECT {ITEM_FIELDS} FROM items WHERE id IN ({list}) AND deleted = 0"),
                &vals,
            )? {
                let it = Self::row_item(&r)?;
                found.insert(it.id, it);
            }
            for r in self.conn.query(
                &format!(
                    "SELECT item_id, message_id FROM item_sources WHERE item_id IN ({list}) ORDER BY item_id, message_id"
                ),
                &vals,
            )? {
                if let Some(it) = found.get_mut(&r.int(0)?) {
                    it.sources.push(r.int(1)?);
                }
            }
        }
        Ok(ids.iter().filter_map(|id| found.get(id).cloned()).collect())
    }

    /// A live item by id, with its provenance.
    pub fn item(&self, id: i64) -> Result<Option<Item>> {
        let Some(r) = self.conn.query_opt(
            &format!("SELECT {ITEM_FIELDS} FROM items WHERE id = ?1 AND deleted = 0"),
            args![id],
        )?
        else {
            return Ok(None);
        };
        let mut it = Self::row_item(&r)?;
        it.sources = self.sources_of(id)?;
        Ok(Some(it))
    }

    /// Live items of `user` made by `pipeline` (optionally of one kind),
    /// oldest first, with provenance.
    pub fn items(&self, user: &str, pipeline: &str, kind: Option<&str>) -> Result<Vec<Item>> {
        let rows = self.conn.query(
            &format!(
                r#"SELECT {ITEM_FIELDS} FROM items WHERE "user" = ?1 AND pipeline = ?2 AND deleted = 0
                 AND (CAST(?3 AS TEXT) IS NULL OR kind = ?3) ORDER BY id"#
            ),
            args![user, pipeline, kind],
        )?;
        let mut items = Vec::with_capacity(rows.len());
        for r in &rows {
            let mut it = Self::row_item(r)?;
            it.sources = self.sources_of(it.id)?;
            items.push(it);
        }
        Ok(items)
    }

    /// `(id, turn, vector)` of every live searchable item of `user` and
    /// `pipeline` (of one kind, when given), in id order (to rebuild an
    /// index).
    pub fn vectors(&self, user: &str, pipeline: &str, kind: Option<&str>) -> Result<Vec<(i64, i64, Vec<f32>)>> {
        self.conn
            .query(
                r#"SELECT id, turn, vector FROM items
                 WHERE "user" = ?1 AND pipeline = ?2 AND deleted = 0 AND vector IS NOT NULL
                   AND (CAST(?3 AS TEXT) IS NULL OR kind = ?3) ORDER BY id"#,
                args![user, pipeline, kind],
            )?
            .iter()
            .map(|r| Ok((r.int(0)?, r.int(1)?, blob_f32(r.opt_blob(2)?.unwrap_or_default()))))
            .collect()
    }

    /// Records that the live items `ids` of `user` were retrieved at
    /// `turn` (a later turn replaces an earlier one, never the reverse).
    ///
    /// The marks feed a salience bonus, not the conversation, so they are
    /// committed without waiting for the disk (SQLite: relaxed for this
    /// one transaction, [`Store::set_relaxed`], in WAL mode; PostgreSQL:
    /// `synchronous_commit = off` for it): a killed process keeps them, a
    /// power cut may lose the last few, and a retrieval costs no fsync.
    /// They do not raise the user's version ([`Store::user_version`]): a
    /// search is not a change other handles must reload for (each reads
    /// the marks from the store when it loads the user's indexes).
    pub fn record_retrieval(&mut self, user: &str, ids: &[i64], turn: i64) -> Result<()> {
        if ids.is_empty() {
            return Ok(());
        }
        let was_relaxed = self.relaxed;
        if !was_relaxed {
            self.set_relaxed(true)?;
        }
        let res = (|| -> Result<()> {
            let tx = self.conn.begin(Some(user))?;
            #[cfg(feature = "postgres")]
            if let Tx::Pg(_) = &tx {
                tx.execute("SET LOCAL synchronous_commit = off", &[])?;
            }
            for &id in ids {
                tx.execute(
                    r#"UPDATE items SET last_retrieved = CASE
                         WHEN last_retrieved IS NULL OR last_retrieved < ?3 THEN ?3 ELSE last_retrieved END
                     WHERE id = ?1 AND "user" = ?2 AND deleted = 0"#,
                    args![id, user, turn],
                )?;
            }
            tx.commit()
        })();
        if !was_relaxed {
            self.set_relaxed(false)?;
        }
        res
    }

    /// `(id, turn last retrieved)` of every live searchable item of `user`
    /// and `pipeline` (of one kind, when given) that was ever retrieved
    /// ([`Store::record_retrieval`]), in id order.
    pub fn retrievals(&self, user: &str, pipeline: &str, kind: Option<&str>) -> Result<Vec<(i64, i64)>> {
        self.conn
            .query(
                r#"SELECT id, last_retrieved FROM items
                 WHERE "user" = ?1 AND pipeline = ?2 AND deleted = 0 AND vector IS NOT NULL
                   AND last_retrieved IS NOT NULL AND (CAST(?3 AS TEXT) IS NULL OR kind = ?3) ORDER BY id"#,
                args![user, pipeline, kind],
            )?
            .iter()
            .map(|r| Ok((r.int(0)?, r.int(1)?)))
            .collect()
    }

    /// `(id, text)` of every live searchable item of `user` and `pipeline`
    /// (of one kind, when given), in id order (to rebuild the BM25 index).
    pub fn texts(&self, user: &str, pipeline: &str, kind: Option<&str>) -> Result<Vec<(i64, String)>> {
        self.conn
            .query(
                r#"SELECT id, text FROM items
                 WHERE "user" = ?1 AND pipeline = ?2 AND deleted = 0 AND vector IS NOT NULL
                   AND (CAST(?3 AS TEXT) IS NULL OR kind = ?3) ORDER BY id"#,
                args![user, pipeline, kind],
            )?
            .iter()
            .map(|r| Ok((r.int(0)?, r.text(1)?)))
            .collect()
    }

    /// The stored vector of a live item, if it has one.
    pub fn vector(&self, id: i64) -> Result<Option<Vec<f32>>> {
        let r = self.conn.query_opt(
            "SELECT vector FROM items WHERE id = ?1 AND deleted = 0 AND vector IS NOT NULL",
            args![id],
        )?;
        Ok(match r {
            Some(r) => r.opt_blob(0)?.map(blob_f32),
            None => None,
        })
    }

    /// The text of a live item of `user`, if there is one.
    fn live_text(tx: &Tx<'_>, user: &str, id: i64) -> Result<Option<String>> {
        tx.query_opt(
            r#"SELECT text FROM items WHERE id = ?1 AND "user" = ?2 AND deleted = 0"#,
            args![id, user],
        )?
        .map(|r| r.text(0))
        .transpose()
    }

    /// Marks a live item of `user` deleted (its history records the text it
    /// had); returns whether it existed. [`Store::erase_source`] and
    /// [`Store::erase_user`] remove items for good.
    pub fn delete_item(&mut self, user: &str, id: i64) -> Result<bool> {
        let tx = self.conn.begin(Some(user))?;
        let Some(old) = Self::live_text(&tx, user, id)? else {
            return Ok(false);
        };
        tx.execute(
            r#"UPDATE items SET deleted = 1 WHERE id = ?1 AND "user" = ?2"#,
            args![id, user],
        )?;
        tx.execute(
            r#"INSERT INTO item_changes (item_id, "user", event, old_text, new_text, at) VALUES (?1, ?2, 'forget', ?3, NULL, ?4)"#,
            args![id, user, old, now_secs()],
        )?;
        let v = Self::bump(&tx, user)?;
        tx.commit()?;
        self.wrote(user, v);
        Ok(true)
    }

    /// Replaces the text (and vector) of a live item of `user`, keeping its
    /// id and provenance; returns whether it existed.
    /// An item that is a triple of the semantic graph leaves the graph: its
    /// corrected text is no longer known to be that triple.
    pub fn correct_item(&mut self, user: &str, id: i64, text: &str, vector: Option<&[f32]>) -> Result<bool> {
        let tx = self.conn.begin(Some(user))?;
        let Some(old) = Self::live_text(&tx, user, id)? else {
            return Ok(false);
        };
        tx.execute(
            r#"UPDATE items SET text = ?2, vector = COALESCE(?3, vector) WHERE id = ?1 AND "user" = ?4"#,
            args![id, text, vector.map(f16_blob), user],
        )?;
        tx.execute(
            r#"DELETE FROM triples WHERE item_id = ?1 AND "user" = ?2"#,
            args![id, user],
        )?;
        tx.execute(
            r#"INSERT INTO item_changes (item_id, "user", event, old_text, new_text, at) VALUES (?1, ?2, 'correct', ?3, ?4, ?5)"#,
            args![id, user, old, text, now_secs()],
        )?;
        let v = Self::bump(&tx, user)?;
        tx.commit()?;
        self.wrote(user, v);
        Ok(true)
    }

    /// The users with stored messages, sorted (by bytes: the engines'
    /// collations differ, so text is sorted here, not in SQL).
    pub fn users(&self) -> Result<Vec<String>> {
        sorted_texts(self.conn.query(r#"SELECT DISTINCT "user" FROM messages"#, &[])?)
    }

    /// The distinct speakers of `user`'s messages, sorted (by bytes).
    pub fn speakers(&self, user: &str) -> Result<Vec<String>> {
        sorted_texts(self.conn.query(
            r#"SELECT DISTINCT speaker FROM messages WHERE "user" = ?1"#,
            args![user],
        )?)
    }

    /// Number of messages of `user`.
    pub fn message_count(&self, user: &str) -> Result<i64> {
        self.conn
            .int(r#"SELECT COUNT(*) FROM messages WHERE "user" = ?1"#, args![user])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The rules a Citus cluster enforces on tables distributed by
    /// `"user"`, checked on the PostgreSQL schema (no Citus package is in
    /// the registries this project builds from, so the DDL cannot be run
    /// against one here): every key and unique constraint includes the
    /// user first, every foreign key pairs the user with the user, and
    /// every table is distributed, co-located with `messages`.
    #[test]
    fn the_postgres_schema_can_be_distributed_by_user() {
        let ddl = POSTGRES_MIGRATIONS.join("\n");
        let mut tables = Vec::new();
        for block in ddl.split("CREATE TABLE ").skip(1) {
            let name = block.split_whitespace().next().unwrap().to_string();
            let body = &block[..block.find(");").unwrap()];
            // The user is the whole key, or leads a table-level key.
            let user_is_key = body.contains("\"user\" TEXT PRIMARY KEY");
            assert!(
                user_is_key || body.contains("\"user\" TEXT NOT NULL"),
                "{name}: no user column"
            );
            if !user_is_key {
                let pk = body
                    .split("PRIMARY KEY")
                    .nth(1)
                    .unwrap_or_else(|| panic!("{name}: no key"));
                let pk_cols = pk.trim_start().trim_start_matches('(');
                assert!(
                    pk_cols.starts_with("\"user\""),
                    "{name}: the key does not lead with the user"
                );
            }
            for fk in body.split("FOREIGN KEY").skip(1) {
                let (cols, refs) = fk.split_once("REFERENCES").unwrap();
                assert!(cols.trim().starts_with("(\"user\""), "{name}: foreign key {cols}");
                let target = refs.split('(').nth(1).unwrap();
                assert!(target.starts_with("\"user\""), "{name}: references {refs}");
            }
            assert!(
                !body.contains("UNIQUE"),
                "{name}: a unique constraint must include the user"
            );
            tables.push(name);
        }
        assert_eq!(tables.len(), 8, "{tables:?}");
        for t in &tables {
            let line = POSTGRES_DISTRIBUTE
                .lines()
                .find(|l| l.contains(&format!("'{t}', 'user'")))
                .unwrap_or_else(|| panic!("{t} is not distributed"));
            assert!(
                t == "messages" || line.contains("colocate_with => 'messages'"),
                "{line}"
            );
        }
    }

    /// Every join of the store's statements pairs the user of both sides
    /// (a distributed cluster routes it to one node; no user sees another's
    /// rows by a join).
    #[test]
    fn joins_pair_the_users_of_both_sides() {
        let sources = [
            include_str!("store.rs"),
            include_str!("erase.rs"),
            include_str!("graph.rs"),
            include_str!("dump.rs"),
        ];
        let mut joins = 0;
        for src in sources {
            // The code, not its tests (this test's own text has a JOIN).
            let code = src.split("#[cfg(test)]").next().unwrap_or(src);
            for (i, _) in code.match_indices(" JOIN ") {
                let clause: String = code[i..].chars().take(120).collect();
                assert!(
                    clause.contains(r#"."user" = "#),
                    "a join without the users paired: {clause}"
                );
                joins += 1;
            }
        }
        assert!(joins >= 2, "found {joins} joins");
    }
}
