//! The service's own database, `service.db` beside the memory store:
//! tenants' users (the external ids callers use, mapped to the store's
//! internal user names), API keys (hashed) and ingest jobs.
//!
//! The server and `dentate keys` open it at once; every statement runs on
//! a connection with a busy timeout and writes begin `IMMEDIATE`, so a key
//! created or revoked by the CLI is seen by the next request.

use crate::error::{Result, ServeError};
use rusqlite::{Connection, OptionalExtension, TransactionBehavior, params};
use sha2::{Digest, Sha256};
use std::path::Path;
use std::sync::Mutex;
use subtle::ConstantTimeEq;

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS users (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    tenant TEXT NOT NULL,
    external TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    UNIQUE (tenant, external)
);
CREATE TABLE IF NOT EXISTS keys (
    id TEXT PRIMARY KEY,
    tenant TEXT NOT NULL,
    role TEXT NOT NULL,
    hash BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
CREATE TABLE IF NOT EXISTS jobs (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    user_id INTEGER NOT NULL,
    through INTEGER NOT NULL,
    messages INTEGER NOT NULL,
    state TEXT NOT NULL,
    error TEXT,
    created_at INTEGER NOT NULL,
    finished_at INTEGER
);
CREATE INDEX IF NOT EXISTS jobs_by_state ON jobs(state, id);
CREATE INDEX IF NOT EXISTS jobs_by_user ON jobs(user_id, id);
";

/// The tenant of the loopback-only mode (no key exists yet).
pub const DEFAULT_TENANT: &str = "default";

/// What a key may do; each role includes the ones before it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Role {
    /// Search, get, list, context, history.
    Read,
    /// Also append messages, correct, forget, erase sources and users' memories.
    Write,
    /// Also erase users.
    Admin,
}

impl Role {
    /// Parses `read`, `write` or `admin`.
    pub fn parse(s: &str) -> Result<Role> {
        match s {
            "read" => Ok(Role::Read),
            "write" => Ok(Role::Write),
            "admin" => Ok(Role::Admin),
            other => Err(ServeError::BadRequest(format!(
                "role `{other}`: expected read, write or admin"
            ))),
        }
    }

    /// `read`, `write` or `admin`.
    pub fn name(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Write => "write",
            Role::Admin => "admin",
        }
    }
}

/// Who is calling: a tenant and what the caller may do in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Principal {
    /// The tenant whose users the caller sees (and no other).
    pub tenant: String,
    /// The caller's role.
    pub role: Role,
    /// The key's id (`None` in loopback-only mode and over stdio).
    pub key: Option<String>,
}

impl Principal {
    /// Full rights over `tenant` without a key (loopback-only mode, stdio).
    pub fn local(tenant: &str) -> Principal {
        Principal {
            tenant: tenant.to_string(),
            role: Role::Admin,
            key: None,
        }
    }

    /// Fails unless the caller has at least `role`.
    pub fn require(&self, role: Role) -> Result<()> {
        if self.role >= role {
            Ok(())
        } else {
            Err(ServeError::Forbidden(format!(
                "this needs a {} key; the key is {}",
                role.name(),
                self.role.name()
            )))
        }
    }
}

/// A key as listed (never its secret).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyInfo {
    /// The key's public id (the part of the key before its secret).
    pub id: String,
    /// Its tenant.
    pub tenant: String,
    /// Its role.
    pub role: Role,
    /// When it was made (Unix seconds).
    pub created_at: i64,
    /// When it was revoked, if it was.
    pub revoked_at: Option<i64>,
}

/// A user of a tenant as the registry knows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserRef {
    /// Registry id.
    pub id: i64,
    /// The caller's id for the user.
    pub external: String,
    /// The store's name for it (`u<id>`).
    pub internal: String,
    /// When it was made (Unix seconds).
    pub created_at: i64,
}

/// An ingest job: process a user's messages up to `through`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRow {
    /// Job id.
    pub id: i64,
    /// Registry id of the user.
    pub user_id: i64,
    /// The last message id the job covers.
    pub through: i64,
    /// How many messages the append stored.
    pub messages: i64,
    /// `queued`, `running`, `done` or `failed`.
    pub state: String,
    /// Why it failed.
    pub error: Option<String>,
    /// When it was queued (Unix seconds).
    pub created_at: i64,
    /// When it ended.
    pub finished_at: Option<i64>,
}

pub(crate) fn now_secs() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

fn hash(secret: &str) -> [u8; 32] {
    Sha256::digest(secret.as_bytes()).into()
}

fn random_hex(bytes: usize) -> Result<String> {
    let mut b = vec![0u8; bytes];
    getrandom::fill(&mut b).map_err(|e| ServeError::Internal(format!("no randomness: {e}")))?;
    Ok(b.iter().map(|x| format!("{x:02x}")).collect())
}

/// Checks a tenant name: 1–64 characters of `[A-Za-z0-9_.-]`.
pub fn check_tenant(t: &str) -> Result<()> {
    if !t.is_empty() && t.len() <= 64 && t.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
        Ok(())
    } else {
        Err(ServeError::BadRequest(format!(
            "tenant `{t}`: use 1-64 characters of letters, digits, `_`, `.` and `-`"
        )))
    }
}

/// Checks a caller's user id: 1–256 bytes, no control characters, not
/// only spaces.
pub fn check_external(u: &str) -> Result<()> {
    if u.trim().is_empty() || u.len() > 256 || u.chars().any(char::is_control) {
        return Err(ServeError::BadRequest(
            "user_id: 1-256 bytes of printable text, not only spaces".into(),
        ));
    }
    Ok(())
}

/// The service database.
#[derive(Debug)]
pub struct Registry {
    conn: Mutex<Connection>,
}

impl Registry {
    /// Opens (creating) `dir/service.db`.
    pub fn open(dir: &Path) -> Result<Registry> {
        std::fs::create_dir_all(dir).map_err(|e| ServeError::Internal(format!("{}: {e}", dir.display())))?;
        let conn = Connection::open(dir.join("service.db"))?;
        conn.busy_timeout(std::time::Duration::from_secs(10))?;
        conn.pragma_update(None, "journal_mode", "WAL")?;
        // Keys and users are few and rarely written; jobs are written twice
        // per append. NORMAL in WAL mode survives a killed process; after a
        // power cut the last job rows may be gone, and the start-up scan
        // requeues every user whose processing is behind its messages, which
        // are committed in the store with full sync before an append answers.
        conn.pragma_update(None, "synchronous", "NORMAL")?;
        conn.pragma_update(None, "secure_delete", "ON")?;
        conn.execute_batch(SCHEMA)?;
        Ok(Registry { conn: Mutex::new(conn) })
    }

    fn with<T>(&self, f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>) -> Result<T> {
        let mut c = self
            .conn
            .lock()
            .map_err(|_| ServeError::Internal("registry lock poisoned".into()))?;
        Ok(f(&mut c)?)
    }

    /// [`Registry::with`] with a full fsync at commit: keys and users,
    /// whose loss at a power cut would matter (a revocation undone).
    fn with_durable<T>(&self, f: impl FnOnce(&mut Connection) -> rusqlite::Result<T>) -> Result<T> {
        self.with(|c| {
            c.pragma_update(None, "synchronous", "FULL")?;
            let out = f(c);
            c.pragma_update(None, "synchronous", "NORMAL")?;
            out
        })
    }

    // ---- keys ----

    /// Makes a key for `tenant` with `role`; returns what is listed and the
    /// key itself (`dnt_<id>_<secret>`), which is shown once and stored
    /// only as a SHA-256 hash of its secret.
    pub fn create_key(&self, tenant: &str, role: Role) -> Result<(KeyInfo, String)> {
        check_tenant(tenant)?;
        let id = random_hex(6)?;
        let secret = random_hex(24)?;
        let now = now_secs();
        self.with_durable(|c| {
            c.execute(
                "INSERT INTO keys (id, tenant, role, hash, created_at) VALUES (?1, ?2, ?3, ?4, ?5)",
                params![id, tenant, role.name(), hash(&secret).to_vec(), now],
            )
        })?;
        Ok((
            KeyInfo {
                id: id.clone(),
                tenant: tenant.to_string(),
                role,
                created_at: now,
                revoked_at: None,
            },
            format!("dnt_{id}_{secret}"),
        ))
    }

    /// Every key, oldest first.
    pub fn keys(&self) -> Result<Vec<KeyInfo>> {
        let rows: Vec<(String, String, String, i64, Option<i64>)> = self.with(|c| {
            let mut st =
                c.prepare("SELECT id, tenant, role, created_at, revoked_at FROM keys ORDER BY created_at, id")?;
            let rows = st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))?;
            rows.collect()
        })?;
        rows.into_iter()
            .map(|(id, tenant, role, created_at, revoked_at)| {
                Ok(KeyInfo {
                    id,
                    tenant,
                    role: Role::parse(&role)?,
                    created_at,
                    revoked_at,
                })
            })
            .collect()
    }

    /// Revokes a key by id (or by the whole key); returns whether a live
    /// key was revoked.
    pub fn revoke(&self, id: &str) -> Result<bool> {
        let id = id
            .strip_prefix("dnt_")
            .map_or(id, |rest| rest.split('_').next().unwrap_or(rest));
        let n = self.with_durable(|c| {
            c.execute(
                "UPDATE keys SET revoked_at = ?2 WHERE id = ?1 AND revoked_at IS NULL",
                params![id, now_secs()],
            )
        })?;
        Ok(n > 0)
    }

    /// Whether any live key exists (then every request needs one).
    pub fn has_keys(&self) -> Result<bool> {
        self.with(|c| {
            c.query_row("SELECT EXISTS (SELECT 1 FROM keys WHERE revoked_at IS NULL)", [], |r| {
                r.get(0)
            })
        })
    }

    /// The principal of a presented key, or `None` when the key is unknown,
    /// revoked or malformed. The secret's hash is compared in constant
    /// time, and a key whose id is unknown costs the same comparison.
    pub fn authenticate(&self, key: &str) -> Result<Option<Principal>> {
        let (id, secret) = match key.strip_prefix("dnt_").and_then(|r| r.split_once('_')) {
            Some((id, secret)) if id.len() == 12 && !secret.is_empty() && secret.len() <= 128 => (id, secret),
            _ => ("", key),
        };
        let presented = hash(secret);
        let row: Option<(String, String, Vec<u8>)> = self.with(|c| {
            c.query_row(
                "SELECT tenant, role, hash FROM keys WHERE id = ?1 AND revoked_at IS NULL",
                [id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .optional()
        })?;
        let stored = row.as_ref().map_or([0u8; 32].to_vec(), |r| r.2.clone());
        let same: bool = presented.as_slice().ct_eq(stored.as_slice()).into();
        match row {
            Some((tenant, role, _)) if same => Ok(Some(Principal {
                tenant,
                role: Role::parse(&role)?,
                key: Some(id.to_string()),
            })),
            _ => Ok(None),
        }
    }

    // ---- users ----

    fn row_user(r: &rusqlite::Row<'_>) -> rusqlite::Result<UserRef> {
        let id: i64 = r.get(0)?;
        Ok(UserRef {
            id,
            external: r.get(1)?,
            internal: format!("u{id}"),
            created_at: r.get(2)?,
        })
    }

    /// The user `external` of `tenant`, if it exists.
    pub fn user(&self, tenant: &str, external: &str) -> Result<Option<UserRef>> {
        self.with(|c| {
            c.query_row(
                "SELECT id, external, created_at FROM users WHERE tenant = ?1 AND external = ?2",
                params![tenant, external],
                Self::row_user,
            )
            .optional()
        })
    }

    /// The user `external` of `tenant`, made if new; the flag says whether
    /// it was made now.
    pub fn ensure_user(&self, tenant: &str, external: &str) -> Result<(UserRef, bool)> {
        check_external(external)?;
        if let Some(u) = self.user(tenant, external)? {
            return Ok((u, false));
        }
        let now = now_secs();
        let made = self.with_durable(|c| {
            c.execute(
                "INSERT OR IGNORE INTO users (tenant, external, created_at) VALUES (?1, ?2, ?3)",
                params![tenant, external, now],
            )
        })?;
        let u = self
            .user(tenant, external)?
            .ok_or_else(|| ServeError::Internal("a user just made is missing".into()))?;
        Ok((u, made > 0))
    }

    /// The user with registry id `id`, with its tenant.
    pub fn user_by_id(&self, id: i64) -> Result<Option<(String, UserRef)>> {
        self.with(|c| {
            c.query_row(
                "SELECT id, external, created_at, tenant FROM users WHERE id = ?1",
                [id],
                |r| Ok((r.get(3)?, Self::row_user(r)?)),
            )
            .optional()
        })
    }

    /// The user whose store name is `internal` (`u<id>`), with its tenant.
    pub fn user_by_internal(&self, internal: &str) -> Result<Option<(String, UserRef)>> {
        match internal.strip_prefix('u').and_then(|n| n.parse::<i64>().ok()) {
            Some(id) => self.user_by_id(id),
            None => Ok(None),
        }
    }

    /// The users of `tenant`, oldest first, `limit` from `offset`.
    pub fn users(&self, tenant: &str, limit: usize, offset: usize) -> Result<Vec<UserRef>> {
        self.with(|c| {
            let mut st = c.prepare(
                "SELECT id, external, created_at FROM users WHERE tenant = ?1 ORDER BY id LIMIT ?2 OFFSET ?3",
            )?;
            let rows = st.query_map(
                params![tenant, limit as i64, i64::try_from(offset).unwrap_or(i64::MAX)],
                Self::row_user,
            )?;
            rows.collect()
        })
    }

    /// Every user of every tenant (for resuming ingestion).
    pub fn all_users(&self) -> Result<Vec<UserRef>> {
        self.with(|c| {
            let mut st = c.prepare("SELECT id, external, created_at FROM users ORDER BY id")?;
            let rows = st.query_map([], Self::row_user)?;
            rows.collect()
        })
    }

    /// Removes a user and its jobs from the registry.
    pub fn remove_user(&self, id: i64) -> Result<()> {
        self.with_durable(|c| {
            let tx = c.transaction_with_behavior(TransactionBehavior::Immediate)?;
            tx.execute("DELETE FROM jobs WHERE user_id = ?1", [id])?;
            tx.execute("DELETE FROM users WHERE id = ?1", [id])?;
            tx.commit()
        })
    }

    // ---- jobs ----

    fn row_job(r: &rusqlite::Row<'_>) -> rusqlite::Result<JobRow> {
        Ok(JobRow {
            id: r.get(0)?,
            user_id: r.get(1)?,
            through: r.get(2)?,
            messages: r.get(3)?,
            state: r.get(4)?,
            error: r.get(5)?,
            created_at: r.get(6)?,
            finished_at: r.get(7)?,
        })
    }

    /// Queues a job for user `user_id` through message `through`.
    pub fn add_job(&self, user_id: i64, through: i64, messages: i64) -> Result<i64> {
        self.with(|c| {
            c.execute(
                "INSERT INTO jobs (user_id, through, messages, state, created_at) VALUES (?1, ?2, ?3, 'queued', ?4)",
                params![user_id, through, messages, now_secs()],
            )?;
            Ok(c.last_insert_rowid())
        })
    }

    /// A job by id.
    pub fn job(&self, id: i64) -> Result<Option<JobRow>> {
        self.with(|c| {
            c.query_row(
                "SELECT id, user_id, through, messages, state, error, created_at, finished_at FROM jobs WHERE id = ?1",
                [id],
                Self::row_job,
            )
            .optional()
        })
    }

    /// Jobs not finished (queued or running), oldest first: what a restart
    /// resumes.
    pub fn unfinished_jobs(&self) -> Result<Vec<JobRow>> {
        self.with(|c| {
            let mut st = c.prepare(
                "SELECT id, user_id, through, messages, state, error, created_at, finished_at FROM jobs
                 WHERE state IN ('queued', 'running') ORDER BY id",
            )?;
            let rows = st.query_map([], Self::row_job)?;
            rows.collect()
        })
    }

    /// Sets the state of the user's unfinished jobs that cover messages up
    /// to `through` (all of them when `through` is `None`).
    pub fn finish_jobs(&self, user_id: i64, through: Option<i64>, state: &str, error: Option<&str>) -> Result<usize> {
        self.with(|c| {
            c.execute(
                "UPDATE jobs SET state = ?3, error = ?4, finished_at = ?5
                 WHERE user_id = ?1 AND state IN ('queued', 'running') AND (?2 IS NULL OR through <= ?2)",
                params![user_id, through, state, error, now_secs()],
            )
        })
    }

    /// Marks a job running.
    pub fn start_job(&self, id: i64) -> Result<()> {
        self.with(|c| {
            c.execute(
                "UPDATE jobs SET state = 'running' WHERE id = ?1 AND state = 'queued'",
                [id],
            )
        })?;
        Ok(())
    }
}
