//! The store's SQL, run unchanged on either engine: the embedded SQLite
//! database or a PostgreSQL server (feature `postgres`).
//!
//! Every statement of the store is written once, in the subset both
//! engines read the same way: `?N` parameters (rewritten to `$N` for
//! PostgreSQL), `"user"` quoted (a reserved word there), `RETURNING id`
//! for new rows, `ON CONFLICT … DO NOTHING / DO UPDATE`, and `CAST(?N AS
//! TEXT)` where a parameter's type is not implied by a column. Values
//! cross as [`Value`]s (integer, text, bytes, null); rows come back as
//! [`Row`]s of them, with typed getters that turn a mismatch into an
//! error rather than a panic.
//!
//! The service's registry (`dentate-serve`) keeps its tables through the
//! same layer, so that it lives on whichever engine the store does.
//!
//! A write transaction ([`Conn::begin`]) excludes other writers of the
//! same user: SQLite's `BEGIN IMMEDIATE` takes the database's one write
//! lock; on PostgreSQL a transaction-scoped advisory lock keyed by the
//! user serialises writers of that user across every connection and
//! process, while other users' writers proceed.

use crate::error::{MemoryError, Result};

/// One SQL value: what a parameter is bound to and a column reads as.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    /// SQL NULL.
    Null,
    /// An integer (any width).
    Int(i64),
    /// Text.
    Text(String),
    /// Bytes (BLOB / BYTEA).
    Blob(Vec<u8>),
}

impl From<i64> for Value {
    fn from(v: i64) -> Value {
        Value::Int(v)
    }
}
impl From<&i64> for Value {
    fn from(v: &i64) -> Value {
        Value::Int(*v)
    }
}
impl From<&str> for Value {
    fn from(v: &str) -> Value {
        Value::Text(v.to_string())
    }
}
impl From<String> for Value {
    fn from(v: String) -> Value {
        Value::Text(v)
    }
}
impl From<&String> for Value {
    fn from(v: &String) -> Value {
        Value::Text(v.clone())
    }
}
impl From<&Value> for Value {
    fn from(v: &Value) -> Value {
        v.clone()
    }
}
impl From<Vec<u8>> for Value {
    fn from(v: Vec<u8>) -> Value {
        Value::Blob(v)
    }
}
impl<T: Into<Value>> From<Option<T>> for Value {
    fn from(v: Option<T>) -> Value {
        v.map_or(Value::Null, Into::into)
    }
}
impl From<&Option<String>> for Value {
    fn from(v: &Option<String>) -> Value {
        v.as_deref().into()
    }
}
impl From<&Option<i64>> for Value {
    fn from(v: &Option<i64>) -> Value {
        (*v).into()
    }
}

/// The parameters of a statement: `sql_args![a, b, …]` converts each with
/// `Value::from` (also `dentate_memory::sql::args!`).
#[macro_export]
macro_rules! sql_args {
    ($($e:expr),* $(,)?) => { &[$($crate::sql::Value::from($e)),*][..] };
}
pub use crate::sql_args as args;

/// One result row.
#[derive(Debug, Clone, PartialEq)]
pub struct Row(pub(crate) Vec<Value>);

impl Row {
    fn at(&self, i: usize) -> Result<&Value> {
        self.0
            .get(i)
            .ok_or_else(|| MemoryError::Invalid(format!("store: a row of {} columns has no column {i}", self.0.len())))
    }

    fn mismatch(&self, i: usize, want: &str) -> MemoryError {
        let got = match self.0.get(i) {
            Some(Value::Null) => "NULL",
            Some(Value::Int(_)) => "an integer",
            Some(Value::Text(_)) => "text",
            Some(Value::Blob(_)) => "bytes",
            None => "nothing",
        };
        MemoryError::Invalid(format!("store: column {i} holds {got}, expected {want}"))
    }

    /// Column `i` as an integer.
    pub fn int(&self, i: usize) -> Result<i64> {
        match self.at(i)? {
            Value::Int(v) => Ok(*v),
            _ => Err(self.mismatch(i, "an integer")),
        }
    }

    /// Column `i` as an integer or NULL.
    pub fn opt_int(&self, i: usize) -> Result<Option<i64>> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Int(v) => Ok(Some(*v)),
            _ => Err(self.mismatch(i, "an integer or NULL")),
        }
    }

    /// Column `i` as text.
    pub fn text(&self, i: usize) -> Result<String> {
        match self.at(i)? {
            Value::Text(v) => Ok(v.clone()),
            _ => Err(self.mismatch(i, "text")),
        }
    }

    /// Column `i` as text or NULL.
    pub fn opt_text(&self, i: usize) -> Result<Option<String>> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Text(v) => Ok(Some(v.clone())),
            _ => Err(self.mismatch(i, "text or NULL")),
        }
    }

    /// Column `i` as bytes or NULL.
    pub fn opt_blob(&self, i: usize) -> Result<Option<&[u8]>> {
        match self.at(i)? {
            Value::Null => Ok(None),
            Value::Blob(v) => Ok(Some(v)),
            _ => Err(self.mismatch(i, "bytes or NULL")),
        }
    }
}

/// Runs statements: a connection or a transaction on it.
pub trait Sql {
    /// Runs `sql` with `args`; the rows it returns when `rows`, else the
    /// number of rows it changed.
    fn run(&self, sql: &str, args: &[Value], rows: bool) -> Result<(Vec<Row>, u64)>;

    /// The rows of a query.
    fn query(&self, sql: &str, args: &[Value]) -> Result<Vec<Row>> {
        Ok(self.run(sql, args, true)?.0)
    }

    /// The first row of a query, if any.
    fn query_opt(&self, sql: &str, args: &[Value]) -> Result<Option<Row>> {
        Ok(self.query(sql, args)?.into_iter().next())
    }

    /// The first column of a one-row query (`COUNT`, `COALESCE(MAX …)`).
    fn int(&self, sql: &str, args: &[Value]) -> Result<i64> {
        self.query_opt(sql, args)?
            .ok_or_else(|| MemoryError::Invalid(format!("store: no row from `{sql}`")))?
            .int(0)
    }

    /// The first column of every row, as integers (ids).
    fn ids(&self, sql: &str, args: &[Value]) -> Result<Vec<i64>> {
        self.query(sql, args)?.iter().map(|r| r.int(0)).collect()
    }

    /// Runs a statement; the number of rows it changed.
    fn execute(&self, sql: &str, args: &[Value]) -> Result<u64> {
        Ok(self.run(sql, args, false)?.1)
    }
}

/// The store's connection to its engine.
pub enum Conn {
    /// The embedded SQLite database.
    Sqlite(rusqlite::Connection),
    /// A PostgreSQL server.
    #[cfg(feature = "postgres")]
    Pg(Box<std::cell::RefCell<pg::PgConn>>),
}

impl std::fmt::Debug for Conn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Conn::Sqlite(_) => f.write_str("Conn::Sqlite"),
            #[cfg(feature = "postgres")]
            Conn::Pg(c) => write!(
                f,
                "Conn::Pg({})",
                c.try_borrow().map_or("busy".into(), |c| c.url.clone())
            ),
        }
    }
}

fn sqlite_value(v: &Value) -> rusqlite::types::ToSqlOutput<'_> {
    use rusqlite::types::{ToSqlOutput, ValueRef};
    match v {
        Value::Null => ToSqlOutput::Borrowed(ValueRef::Null),
        Value::Int(i) => ToSqlOutput::Borrowed(ValueRef::Integer(*i)),
        Value::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
        Value::Blob(b) => ToSqlOutput::Borrowed(ValueRef::Blob(b)),
    }
}

impl rusqlite::ToSql for Value {
    fn to_sql(&self) -> rusqlite::Result<rusqlite::types::ToSqlOutput<'_>> {
        Ok(sqlite_value(self))
    }
}

fn sqlite_run(c: &rusqlite::Connection, sql: &str, args: &[Value], rows: bool) -> Result<(Vec<Row>, u64)> {
    use rusqlite::types::ValueRef;
    let mut st = c.prepare_cached(sql)?;
    let params = rusqlite::params_from_iter(args.iter());
    if !rows {
        return Ok((Vec::new(), st.execute(params)? as u64));
    }
    let n = st.column_count();
    let mut out = Vec::new();
    let mut it = st.query(params)?;
    while let Some(r) = it.next()? {
        let mut row = Vec::with_capacity(n);
        for i in 0..n {
            row.push(match r.get_ref(i)? {
                ValueRef::Null => Value::Null,
                ValueRef::Integer(v) => Value::Int(v),
                ValueRef::Text(t) => Value::Text(String::from_utf8_lossy(t).into_owned()),
                ValueRef::Blob(b) => Value::Blob(b.to_vec()),
                ValueRef::Real(_) => {
                    return Err(MemoryError::Invalid(format!(
                        "store: column {i} of `{sql}` is a floating-point number; the store keeps none"
                    )));
                }
            });
        }
        out.push(Row(row));
    }
    Ok((out, 0))
}

impl Sql for Conn {
    fn run(&self, sql: &str, args: &[Value], rows: bool) -> Result<(Vec<Row>, u64)> {
        match self {
            Conn::Sqlite(c) => sqlite_run(c, sql, args, rows),
            #[cfg(feature = "postgres")]
            Conn::Pg(c) => c
                .try_borrow_mut()
                .map_err(|_| {
                    MemoryError::Invalid("store: the PostgreSQL connection is in use by a transaction".into())
                })?
                .run(sql, args, rows),
        }
    }
}

/// A write transaction: commits with [`Tx::commit`], rolls back when
/// dropped uncommitted.
pub enum Tx<'a> {
    /// SQLite: `BEGIN IMMEDIATE`.
    Sqlite(rusqlite::Transaction<'a>),
    /// PostgreSQL: `BEGIN`, then the user's advisory lock.
    #[cfg(feature = "postgres")]
    Pg(PgTx<'a>),
}

/// A PostgreSQL transaction on a connection it borrows for its life;
/// rolled back when dropped uncommitted.
#[cfg(feature = "postgres")]
pub struct PgTx<'a> {
    conn: &'a std::cell::RefCell<pg::PgConn>,
    done: bool,
}

#[cfg(feature = "postgres")]
impl Drop for PgTx<'_> {
    fn drop(&mut self) {
        if !self.done
            && let Ok(mut c) = self.conn.try_borrow_mut()
        {
            c.rollback();
        }
    }
}

impl Conn {
    /// Begins a write transaction. `user`, when given, names the user
    /// whose data it writes: other writers of that user wait (SQLite:
    /// every writer waits, the database has one write lock).
    pub fn begin(&mut self, user: Option<&str>) -> Result<Tx<'_>> {
        match self {
            Conn::Sqlite(c) => {
                let _ = user;
                Ok(Tx::Sqlite(
                    c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?,
                ))
            }
            #[cfg(feature = "postgres")]
            Conn::Pg(c) => {
                c.get_mut().begin(user)?;
                Ok(Tx::Pg(PgTx { conn: c, done: false }))
            }
        }
    }

    /// The SQLite connection, when this is one (pragmas, snapshots).
    pub fn sqlite(&self) -> Option<&rusqlite::Connection> {
        match self {
            Conn::Sqlite(c) => Some(c),
            #[cfg(feature = "postgres")]
            Conn::Pg(_) => None,
        }
    }

    /// [`Conn::sqlite`], mutable.
    pub fn sqlite_mut(&mut self) -> Option<&mut rusqlite::Connection> {
        match self {
            Conn::Sqlite(c) => Some(c),
            #[cfg(feature = "postgres")]
            Conn::Pg(_) => None,
        }
    }

    /// Connects to a PostgreSQL server (feature `postgres`).
    pub fn connect(url: &str) -> Result<Conn> {
        #[cfg(feature = "postgres")]
        {
            Ok(Conn::Pg(Box::new(std::cell::RefCell::new(pg::PgConn::connect(url)?))))
        }
        #[cfg(not(feature = "postgres"))]
        {
            let _ = url;
            Err(MemoryError::Invalid(
                "this build has no PostgreSQL engine (feature `postgres`)".into(),
            ))
        }
    }

    /// Runs statements without parameters (schema), outside a transaction.
    pub fn batch(&mut self, sql: &str) -> Result<()> {
        match self {
            Conn::Sqlite(c) => Ok(c.execute_batch(sql)?),
            #[cfg(feature = "postgres")]
            Conn::Pg(c) => c.get_mut().batch(sql),
        }
    }

    /// Which engine this is: `sqlite` or `postgres`.
    pub fn engine(&self) -> &'static str {
        match self {
            Conn::Sqlite(_) => "sqlite",
            #[cfg(feature = "postgres")]
            Conn::Pg(_) => "postgres",
        }
    }
}

impl Tx<'_> {
    /// Runs statements without parameters (schema) in the transaction.
    pub fn batch(&self, sql: &str) -> Result<()> {
        match self {
            Tx::Sqlite(t) => Ok(t.execute_batch(sql)?),
            #[cfg(feature = "postgres")]
            Tx::Pg(t) => t.conn.borrow_mut().batch(sql),
        }
    }

    /// Commits.
    pub fn commit(self) -> Result<()> {
        match self {
            Tx::Sqlite(t) => Ok(t.commit()?),
            #[cfg(feature = "postgres")]
            Tx::Pg(mut t) => {
                t.done = true;
                t.conn.borrow_mut().commit()
            }
        }
    }
}

impl Sql for Tx<'_> {
    fn run(&self, sql: &str, args: &[Value], rows: bool) -> Result<(Vec<Row>, u64)> {
        match self {
            Tx::Sqlite(t) => sqlite_run(t, sql, args, rows),
            #[cfg(feature = "postgres")]
            Tx::Pg(t) => t.conn.borrow_mut().run(sql, args, rows),
        }
    }
}

#[cfg(any(feature = "postgres", test))]
/// `sql` with its `?N` parameters written `$N` (outside quoted strings
/// and identifiers), as PostgreSQL reads them.
pub(crate) fn dollar_params(sql: &str) -> String {
    let mut out = String::with_capacity(sql.len() + 8);
    let mut quote: Option<char> = None;
    let mut chars = sql.chars().peekable();
    while let Some(c) = chars.next() {
        match quote {
            Some(q) => {
                if c == q {
                    quote = None;
                }
                out.push(c);
            }
            None if c == '\'' || c == '"' => {
                quote = Some(c);
                out.push(c);
            }
            None if c == '?' && chars.peek().is_some_and(char::is_ascii_digit) => out.push('$'),
            None => out.push(c),
        }
    }
    out
}

#[cfg(any(feature = "postgres", test))]
/// A 64-bit key for a user's advisory lock (FNV-1a of the name): two
/// users whose keys collide only wait for each other.
pub(crate) fn user_lock_key(user: &str) -> i64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in user.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h as i64
}

#[cfg(feature = "postgres")]
pub mod pg {
    //! The PostgreSQL connection: statements prepared once per connection
    //! and kept, values converted by type, transactions by hand (so that a
    //! transaction can share the connection's `RefCell`).

    use super::{Row, Value, dollar_params, user_lock_key};
    use crate::error::{MemoryError, Result};
    use postgres::types::{FromSql, IsNull, ToSql, Type, to_sql_checked};
    use postgres::{Client, NoTls, Statement};
    use std::collections::HashMap;
    use std::error::Error as StdError;

    type BoxErr = Box<dyn StdError + Sync + Send>;

    /// How many prepared statements a connection keeps (the store has
    /// about 80 distinct statements; formatted ones may add more).
    const CACHE: usize = 256;

    /// One connection to the server.
    pub struct PgConn {
        client: Client,
        cache: HashMap<String, Statement>,
        /// The URL it was opened with, password removed (for messages).
        pub(crate) url: String,
        in_tx: bool,
    }

    impl ToSql for Value {
        fn to_sql(&self, ty: &Type, out: &mut bytes::BytesMut) -> std::result::Result<IsNull, BoxErr> {
            match self {
                Value::Null => Ok(IsNull::Yes),
                Value::Int(v) => match *ty {
                    Type::INT8 => v.to_sql(ty, out),
                    Type::INT4 => i32::try_from(*v)?.to_sql(ty, out),
                    Type::INT2 => i16::try_from(*v)?.to_sql(ty, out),
                    Type::BOOL => (*v != 0).to_sql(ty, out),
                    _ => Err(format!("an integer for a parameter of type {ty}").into()),
                },
                Value::Text(s) => match *ty {
                    Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR | Type::UNKNOWN => {
                        s.as_str().to_sql(ty, out)
                    }
                    _ => Err(format!("text for a parameter of type {ty}").into()),
                },
                Value::Blob(b) => match *ty {
                    Type::BYTEA => b.as_slice().to_sql(ty, out),
                    _ => Err(format!("bytes for a parameter of type {ty}").into()),
                },
            }
        }

        fn accepts(_: &Type) -> bool {
            true
        }

        to_sql_checked!();
    }

    /// A column value of any type the store uses.
    struct Cell(Value);

    impl<'a> FromSql<'a> for Cell {
        fn from_sql(ty: &Type, raw: &'a [u8]) -> std::result::Result<Cell, BoxErr> {
            Ok(Cell(match *ty {
                Type::INT8 => Value::Int(i64::from_sql(ty, raw)?),
                Type::INT4 => Value::Int(i32::from_sql(ty, raw)?.into()),
                Type::INT2 => Value::Int(i16::from_sql(ty, raw)?.into()),
                Type::BOOL => Value::Int(bool::from_sql(ty, raw)?.into()),
                Type::TEXT | Type::VARCHAR | Type::NAME | Type::BPCHAR => Value::Text(String::from_sql(ty, raw)?),
                Type::BYTEA => Value::Blob(<Vec<u8>>::from_sql(ty, raw)?),
                Type::VOID => Value::Null,
                _ => return Err(format!("a column of type {ty}; the store reads integers, text and bytes").into()),
            }))
        }

        fn from_sql_null(_: &Type) -> std::result::Result<Cell, BoxErr> {
            Ok(Cell(Value::Null))
        }

        fn accepts(_: &Type) -> bool {
            true
        }
    }

    /// `url` without its password, for messages and `Debug`.
    pub(crate) fn redact(url: &str) -> String {
        match (url.find("://"), url.rfind('@')) {
            (Some(s), Some(at)) if at > s => {
                let auth = &url[s + 3..at];
                match auth.find(':') {
                    Some(c) => format!("{}{}:***{}", &url[..s + 3], &auth[..c], &url[at..]),
                    None => url.to_string(),
                }
            }
            _ => url.to_string(),
        }
    }

    impl PgConn {
        /// Connects (no TLS: a server on loopback, a socket or a private
        /// network; put a TLS proxy in front otherwise).
        pub(crate) fn connect(url: &str) -> Result<PgConn> {
            let client = Client::connect(url, NoTls)?;
            Ok(PgConn {
                client,
                cache: HashMap::new(),
                url: redact(url),
                in_tx: false,
            })
        }

        fn statement(&mut self, sql: &str) -> Result<Statement> {
            if let Some(st) = self.cache.get(sql) {
                return Ok(st.clone());
            }
            let st = self.client.prepare(&dollar_params(sql))?;
            if self.cache.len() >= CACHE {
                self.cache.clear();
            }
            self.cache.insert(sql.to_string(), st.clone());
            Ok(st)
        }

        pub(crate) fn run(&mut self, sql: &str, args: &[Value], rows: bool) -> Result<(Vec<Row>, u64)> {
            let st = self.statement(sql)?;
            let params: Vec<&(dyn ToSql + Sync)> = args.iter().map(|a| a as &(dyn ToSql + Sync)).collect();
            if !rows {
                return Ok((Vec::new(), self.client.execute(&st, &params)?));
            }
            let mut out = Vec::new();
            for r in self.client.query(&st, &params)? {
                let mut row = Vec::with_capacity(r.len());
                for i in 0..r.len() {
                    row.push(r.try_get::<_, Cell>(i)?.0);
                }
                out.push(Row(row));
            }
            Ok((out, 0))
        }

        /// Runs statements without parameters (DDL, `BEGIN`).
        pub(crate) fn batch(&mut self, sql: &str) -> Result<()> {
            Ok(self.client.batch_execute(sql)?)
        }

        pub(crate) fn begin(&mut self, user: Option<&str>) -> Result<()> {
            if self.in_tx {
                return Err(MemoryError::Invalid("store: a transaction is already open".into()));
            }
            self.client.batch_execute("BEGIN")?;
            self.in_tx = true;
            if let Some(u) = user
                && let Err(e) = self.run(
                    "SELECT pg_advisory_xact_lock(?1)",
                    &[Value::Int(user_lock_key(u))],
                    false,
                )
            {
                self.rollback();
                return Err(e);
            }
            Ok(())
        }

        pub(crate) fn commit(&mut self) -> Result<()> {
            self.in_tx = false;
            Ok(self.client.batch_execute("COMMIT")?)
        }

        pub(crate) fn rollback(&mut self) {
            if self.in_tx {
                self.in_tx = false;
                // A broken connection rolls back by itself on the server.
                let _ = self.client.batch_execute("ROLLBACK");
            }
        }
    }

    impl From<postgres::Error> for MemoryError {
        fn from(e: postgres::Error) -> MemoryError {
            MemoryError::Postgres(e.to_string())
        }
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn passwords_are_redacted() {
            assert_eq!(
                super::redact("postgres://ann:secret@db:5432/mem"),
                "postgres://ann:***@db:5432/mem"
            );
            assert_eq!(super::redact("postgres://ann@db/mem"), "postgres://ann@db/mem");
            assert_eq!(super::redact("host=/tmp user=x"), "host=/tmp user=x");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parameters_are_rewritten_outside_quotes() {
        assert_eq!(
            dollar_params("SELECT '?1', \"a?2\" FROM t WHERE x = ?1 AND y = ?12 AND z = ?"),
            "SELECT '?1', \"a?2\" FROM t WHERE x = $1 AND y = $12 AND z = ?"
        );
    }

    #[test]
    fn rows_report_type_mismatches_as_errors() {
        let r = Row(vec![Value::Int(3), Value::Text("a".into()), Value::Null]);
        assert_eq!(r.int(0).unwrap(), 3);
        assert_eq!(r.opt_int(2).unwrap(), None);
        assert_eq!(r.text(1).unwrap(), "a");
        assert!(r.int(1).is_err());
        assert!(r.text(0).is_err());
        assert!(r.int(7).is_err());
        assert!(r.opt_blob(1).is_err());
    }

    #[test]
    fn lock_keys_are_stable() {
        assert_eq!(user_lock_key(""), 0xcbf2_9ce4_8422_2325_u64 as i64);
        assert_ne!(user_lock_key("ann"), user_lock_key("bob"));
    }
}
