//! `dentate store …`: schema migrations, a user's rows as portable JSON
//! Lines, and copies between engines (SQLite ⇄ PostgreSQL).

use crate::shared::Res;
use clap::Subcommand;
use dentate_memory::{Store, StoreLocation};
use dentate_serve::Registry;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::PathBuf;

/// `dentate store …`.
#[derive(Subcommand, Debug)]
pub enum StoreCommand {
    /// Bring a store (and the service's tables beside it) to this build's
    /// schema; a store from a newer build is refused.
    Migrate {
        /// The store: sqlite:DIR, a directory, or a postgres:// URL.
        #[arg(long, env = "DENTATE_STORE")]
        store: String,
    },
    /// Print the PostgreSQL schema this build writes, and with --citus the
    /// statements that distribute it by user on a Citus coordinator.
    Schema {
        /// Also the distribution statements (run after `store migrate`).
        #[arg(long)]
        citus: bool,
    },
    /// Write one user's messages, items, provenance, triples, state and
    /// history as JSON Lines (the same for both engines).
    Export {
        /// The store.
        #[arg(long, env = "DENTATE_STORE")]
        store: String,
        /// The user: the store's name for it, or with --tenant the
        /// service's user id.
        #[arg(long)]
        user: String,
        /// Resolve --user as a user of this service tenant.
        #[arg(long)]
        tenant: Option<String>,
        /// Output file (default: standard output).
        #[arg(long)]
        out: Option<PathBuf>,
    },
    /// Read an export into a store, keeping its ids; refused (nothing
    /// stored) when the user already has rows there.
    Import {
        /// The store.
        #[arg(long, env = "DENTATE_STORE")]
        store: String,
        /// Store the rows under this user name instead of the export's.
        #[arg(long = "as")]
        as_user: Option<String>,
        /// The export file (`-`: standard input).
        file: PathBuf,
    },
    /// Copy every user (or those named) from one store to another, with the
    /// service's users and keys when the source has any.
    Copy {
        /// Source store.
        #[arg(long)]
        from: String,
        /// Target store (its users must not exist there yet).
        #[arg(long)]
        to: String,
        /// Copy only these users (store names); repeatable.
        #[arg(long = "user")]
        users: Vec<String>,
    },
}

fn open(loc: &str) -> Res<(StoreLocation, Store)> {
    let loc = StoreLocation::parse(loc)?;
    let store = loc.open(None)?;
    Ok((loc, store))
}

/// Whether `loc` holds a service registry worth copying (opening one in a
/// SQLite directory would create `service.db`).
fn registry_of(loc: &StoreLocation) -> Res<Option<Registry>> {
    if let StoreLocation::Sqlite(dir) = loc
        && !dir.join("service.db").exists()
    {
        return Ok(None);
    }
    Ok(Some(Registry::at(loc)?))
}

/// `dentate store …`.
pub fn store(c: StoreCommand) -> Res<()> {
    match c {
        StoreCommand::Schema { citus } => {
            for (i, m) in dentate_memory::store::POSTGRES_MIGRATIONS.iter().enumerate() {
                println!("-- version {}\n{m}\n", i + 1);
            }
            if citus {
                println!(
                    "-- Citus: distribute every table by user, co-located\n{}",
                    dentate_memory::store::POSTGRES_DISTRIBUTE
                );
            }
        }
        StoreCommand::Migrate { store } => {
            let (loc, s) = open(&store)?;
            if let Some(r) = registry_of(&loc)? {
                drop(r);
            }
            println!("{loc}: {} store at schema version {}", s.engine(), s.schema_version()?);
        }
        StoreCommand::Export {
            store,
            user,
            tenant,
            out,
        } => {
            let (loc, s) = open(&store)?;
            let name = match tenant {
                None => user,
                Some(t) => {
                    let reg = registry_of(&loc)?.ok_or("this store has no service users")?;
                    reg.user(&t, &user)?
                        .ok_or_else(|| format!("no user `{user}` in tenant `{t}`"))?
                        .internal
                }
            };
            let n = match out {
                Some(p) => {
                    let mut w = BufWriter::new(std::fs::File::create(&p)?);
                    let n = s.export_user(&name, &mut w)?;
                    w.into_inner().map_err(|e| e.into_error())?.sync_all()?;
                    n
                }
                None => s.export_user(&name, &mut std::io::stdout().lock())?,
            };
            if n.total() == 0 {
                return Err(format!("user `{name}` has nothing in {loc}").into());
            }
            eprintln!("exported `{name}`: {n}");
        }
        StoreCommand::Import { store, as_user, file } => {
            let (_, mut s) = open(&store)?;
            let mut input: Box<dyn BufRead> = if file.as_os_str() == "-" {
                Box::new(std::io::stdin().lock())
            } else {
                Box::new(BufReader::new(std::fs::File::open(&file)?))
            };
            let (user, n) = s.import_user(&mut input, as_user.as_deref())?;
            eprintln!("imported `{user}`: {n}");
        }
        StoreCommand::Copy { from, to, users } => {
            let (from_loc, src) = open(&from)?;
            let (to_loc, mut dst) = open(&to)?;
            if from_loc == to_loc {
                return Err("--from and --to name the same store".into());
            }
            let users = if users.is_empty() { src.users()? } else { users };
            // Service users and keys first: a copy refused there stores nothing.
            if let Some(reg) = registry_of(&from_loc)? {
                let rows = reg.rows()?;
                if !rows.users.is_empty() || !rows.keys.is_empty() {
                    Registry::at(&to_loc)?.load_rows(&rows)?;
                    eprintln!("service: {} users, {} keys", rows.users.len(), rows.keys.len());
                }
            }
            let mut total = dentate_memory::DumpCounts::default();
            for u in &users {
                let mut buf = Vec::new();
                src.export_user(u, &mut buf)?;
                let (_, n) = dst.import_user(&mut buf.as_slice(), None)?;
                total.messages += n.messages;
                total.items += n.items;
                total.sources += n.sources;
                total.derivations += n.derivations;
                total.triples += n.triples;
                total.state += n.state;
                total.changes += n.changes;
            }
            let mut out = std::io::stderr().lock();
            writeln!(out, "copied {} users from {from_loc} to {to_loc}: {total}", users.len())?;
        }
    }
    Ok(())
}
