//! Load generator for `dentate serve` (the service benchmark).
//!
//! Plain std threads and raw HTTP/1.1 keep-alive connections over
//! `std::net::TcpStream`, so the client adds as little as possible to what
//! it measures.
//!
//! ```text
//! load populate --url http://127.0.0.1:7700 [--users 100] [--messages 2000] [--batch 200] [--connections 4]
//! load run      --url http://127.0.0.1:7700[,http://…] [--users 100] [--seconds 20] [--connections 16] [--rate R]
//!               [--warmup 2] [--append-pct 10] [--k 10] [--label NAME]
//! load inproc   --dir DIR [--users 100] [--queries 20000] [--threads N] [--embedder hash|minilm]
//! ```
//!
//! - `populate` appends synthetic conversations (deterministic: templated
//!   sentences from word lists, a seeded generator, each user its own
//!   topics, names and places; every message has an `id`) to users
//!   `user-000`…, waits until every ingest job is done and prints the
//!   ingestion rate.
//! - `run` sends a 90 % search / 10 % append mix. Without `--rate`: closed
//!   loop, every connection sends its next request when the last one
//!   answered (saturation throughput). With `--rate R`: open loop, request
//!   `i` is due at `start + i / R` and its latency counts from that time,
//!   not from when a connection got free (no coordinated omission). At the
//!   end it checks that no acknowledged message was lost: every user's
//!   message count grew by exactly the appends acknowledged, and every
//!   acknowledged message id is listed.
//! - `inproc` opens the same directory through the library (server
//!   stopped) and runs the same search mix through `Memory::retrieve`,
//!   single-threaded and with one `Memory` per thread, for the service's
//!   overhead.
//!
//! Every mode prints a human-readable report and one `JSON {...}` line.

use dentate_embed::Embedder;
use dentate_memory::{Memory, PipelineKind};
use serde_json::{Value, json};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::io::{self, BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

type Res<T> = Result<T, Box<dyn std::error::Error + Send + Sync>>;

// ---------------------------------------------------------------------------
// Arguments

struct Args {
    mode: String,
    opts: HashMap<String, String>,
}

impl Args {
    fn parse() -> Res<Args> {
        let mut it = std::env::args().skip(1);
        let mode = it.next().ok_or("usage: load populate|run|inproc [--flag value]...")?;
        let mut opts = HashMap::new();
        while let Some(a) = it.next() {
            let key = a
                .strip_prefix("--")
                .ok_or_else(|| format!("unexpected argument `{a}`"))?;
            let val = it.next().ok_or_else(|| format!("--{key} needs a value"))?;
            opts.insert(key.to_string(), val);
        }
        Ok(Args { mode, opts })
    }

    fn str(&self, key: &str, default: &str) -> String {
        self.opts.get(key).cloned().unwrap_or_else(|| default.to_string())
    }

    fn num<T: std::str::FromStr>(&self, key: &str, default: T) -> Res<T> {
        match self.opts.get(key) {
            None => Ok(default),
            Some(v) => v.parse().map_err(|_| format!("--{key} {v}: not a number").into()),
        }
    }

    fn opt_num<T: std::str::FromStr>(&self, key: &str) -> Res<Option<T>> {
        match self.opts.get(key) {
            None => Ok(None),
            Some(v) => v
                .parse()
                .map(Some)
                .map_err(|_| format!("--{key} {v}: not a number").into()),
        }
    }
}

// ---------------------------------------------------------------------------
// A deterministic generator (SplitMix64)

#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x9E37_79B9_7F4A_7C15)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }

    fn chance(&mut self, pct: u64) -> bool {
        self.next_u64() % 100 < pct
    }

    fn pick<'a>(&mut self, xs: &[&'a str]) -> &'a str {
        xs[self.below(xs.len())]
    }
}

// ---------------------------------------------------------------------------
// Synthetic conversations

struct Topic {
    name: &'static str,
    nouns: &'static [&'static str],
    verbs: &'static [&'static str],
}

const TOPICS: &[Topic] = &[
    Topic {
        name: "cooking",
        nouns: &[
            "risotto",
            "sourdough",
            "curry",
            "lasagna",
            "dumplings",
            "paella",
            "ramen",
            "tacos",
        ],
        verbs: &["cooked", "baked", "tasted", "burned", "perfected"],
    },
    Topic {
        name: "hiking",
        nouns: &[
            "trail",
            "summit",
            "ridge",
            "waterfall",
            "canyon",
            "glacier",
            "pine forest",
            "crater lake",
        ],
        verbs: &["hiked", "climbed", "explored", "camped near", "photographed"],
    },
    Topic {
        name: "music",
        nouns: &[
            "guitar",
            "piano",
            "violin",
            "drum kit",
            "concert",
            "vinyl album",
            "playlist",
            "choir",
        ],
        verbs: &["played", "practised", "recorded", "listened to", "tuned"],
    },
    Topic {
        name: "pets",
        nouns: &[
            "puppy", "kitten", "parrot", "hamster", "goldfish", "tortoise", "rabbit", "pony",
        ],
        verbs: &["adopted", "walked", "fed", "groomed", "trained"],
    },
    Topic {
        name: "work",
        nouns: &[
            "deadline",
            "project",
            "meeting",
            "promotion",
            "client",
            "quarterly report",
            "launch",
            "budget",
        ],
        verbs: &["presented", "finished", "postponed", "negotiated", "reviewed"],
    },
    Topic {
        name: "travel",
        nouns: &[
            "flight",
            "hotel",
            "museum",
            "beach",
            "night train",
            "passport",
            "street market",
            "castle",
        ],
        verbs: &["booked", "visited", "missed", "toured", "discovered"],
    },
    Topic {
        name: "fitness",
        nouns: &[
            "marathon",
            "yoga class",
            "swim",
            "cycling race",
            "gym session",
            "sprint",
            "stretching",
            "triathlon",
        ],
        verbs: &["ran", "trained for", "skipped", "completed", "signed up for"],
    },
    Topic {
        name: "reading",
        nouns: &[
            "novel",
            "poetry book",
            "biography",
            "comic",
            "memoir",
            "thriller",
            "essay",
            "atlas",
        ],
        verbs: &["read", "borrowed", "reviewed", "finished", "recommended"],
    },
    Topic {
        name: "gardening",
        nouns: &[
            "tomatoes",
            "roses",
            "orchard",
            "compost",
            "seedlings",
            "tulips",
            "herb bed",
            "greenhouse",
        ],
        verbs: &["planted", "watered", "pruned", "harvested", "repotted"],
    },
    Topic {
        name: "movies",
        nouns: &[
            "documentary",
            "sequel",
            "premiere",
            "cartoon",
            "western",
            "horror film",
            "film festival",
            "trailer",
        ],
        verbs: &["watched", "reviewed", "streamed", "rewatched", "walked out of"],
    },
    Topic {
        name: "family",
        nouns: &[
            "wedding",
            "birthday",
            "reunion",
            "anniversary",
            "graduation",
            "picnic",
            "holiday",
            "baby shower",
        ],
        verbs: &["organised", "celebrated", "attended", "hosted", "missed"],
    },
    Topic {
        name: "tech",
        nouns: &[
            "laptop",
            "home server",
            "robot",
            "drone",
            "keyboard",
            "smartphone",
            "camera",
            "headphones",
        ],
        verbs: &["repaired", "bought", "upgraded", "configured", "returned"],
    },
    Topic {
        name: "art",
        nouns: &[
            "painting",
            "sculpture",
            "sketchbook",
            "mural",
            "pottery",
            "gallery",
            "watercolour",
            "photo print",
        ],
        verbs: &["painted", "framed", "sold", "exhibited", "sketched"],
    },
    Topic {
        name: "finance",
        nouns: &[
            "mortgage",
            "savings account",
            "stocks",
            "taxes",
            "car loan",
            "pension",
            "invoice",
            "allowance",
        ],
        verbs: &["paid", "refinanced", "checked", "filed", "budgeted for"],
    },
    Topic {
        name: "health",
        nouns: &[
            "dentist",
            "checkup",
            "allergy",
            "vitamins",
            "therapy",
            "sleep schedule",
            "diet",
            "vaccine",
        ],
        verbs: &["scheduled", "started", "cancelled", "improved", "talked about"],
    },
    Topic {
        name: "cars",
        nouns: &[
            "engine",
            "winter tires",
            "road trip",
            "garage",
            "motorbike",
            "camper van",
            "driving test",
            "parking",
        ],
        verbs: &["fixed", "washed", "sold", "rented", "drove"],
    },
];

const NAMES: &[&str] = &[
    "Alice", "Bruno", "Chen", "Dalia", "Emeka", "Farah", "Gustav", "Hana", "Ivan", "Jonas", "Kemal", "Lucia", "Mateo",
    "Nadia", "Oskar", "Priya", "Quinn", "Rosa", "Sven", "Tariq", "Uma", "Viktor", "Wen", "Yara",
];

const PLACES: &[&str] = &[
    "Lisbon",
    "Kyoto",
    "Denver",
    "the lake house",
    "Berlin",
    "the old harbour",
    "Nairobi",
    "Oslo",
    "Lima",
    "the community centre",
    "Seoul",
    "grandma's village",
    "Toronto",
    "the city park",
    "Marrakesh",
    "Hobart",
    "the office",
    "Vienna",
    "Cape Town",
    "the mountains",
    "Hanoi",
    "Reykjavik",
    "the farm",
    "Porto",
];

const TIMES: &[&str] = &[
    "yesterday",
    "last week",
    "on Monday",
    "this morning",
    "last summer",
    "two days ago",
    "on the weekend",
    "last night",
    "in March",
    "over the holidays",
];

const ADJS: &[&str] = &[
    "amazing",
    "terrible",
    "quiet",
    "expensive",
    "cozy",
    "exhausting",
    "beautiful",
    "strange",
    "relaxing",
    "chaotic",
];

/// A user's own vocabulary: the topics, people and places they talk about.
struct Profile {
    topics: Vec<usize>,
    names: Vec<&'static str>,
    places: Vec<&'static str>,
}

fn pick_distinct<T: Copy>(rng: &mut Rng, xs: &[T], n: usize) -> Vec<T> {
    let mut idx: Vec<usize> = (0..xs.len()).collect();
    for i in 0..n.min(xs.len()) {
        let j = i + rng.below(xs.len() - i);
        idx.swap(i, j);
    }
    idx[..n.min(xs.len())].iter().map(|&i| xs[i]).collect()
}

impl Profile {
    fn of(user: usize) -> Profile {
        let mut rng = Rng::new(0xD3A7_0000 + user as u64);
        let topic_ids: Vec<usize> = (0..TOPICS.len()).collect();
        Profile {
            topics: pick_distinct(&mut rng, &topic_ids, 4),
            names: pick_distinct(&mut rng, NAMES, 5),
            places: pick_distinct(&mut rng, PLACES, 5),
        }
    }

    /// Mostly the user's own words; now and then anyone's.
    fn words(&self, rng: &mut Rng) -> (&'static Topic, &'static str, &'static str) {
        if rng.chance(10) {
            (&TOPICS[rng.below(TOPICS.len())], rng.pick(NAMES), rng.pick(PLACES))
        } else {
            (
                &TOPICS[self.topics[rng.below(self.topics.len())]],
                rng.pick(&self.names),
                rng.pick(&self.places),
            )
        }
    }

    fn message(&self, rng: &mut Rng, assistant: bool) -> String {
        let (t, name, place) = self.words(rng);
        let noun = rng.pick(t.nouns);
        let verb = rng.pick(t.verbs);
        let time = rng.pick(TIMES);
        let adj = rng.pick(ADJS);
        if assistant {
            match rng.below(4) {
                0 => format!("That sounds {adj}! How did {name} feel about the {noun}?"),
                1 => format!("Noted: you {verb} the {noun} with {name} in {place} {time}."),
                2 => format!("Would you like to plan another {} day, maybe in {place}?", t.name),
                _ => format!("I remember you said the {noun} in {place} was {adj}."),
            }
        } else {
            match rng.below(6) {
                0 => format!("I {verb} the {noun} with {name} {time} in {place}; it was {adj}."),
                1 => format!("{name} and I {verb} a {adj} {noun} {time}."),
                2 => format!("My favourite {} memory is the {noun} in {place} with {name}.", t.name),
                3 => format!("Remind me that {name} wants to see the {noun} in {place} {time}."),
                4 => format!("Honestly the {noun} was {adj}, but {name} {verb} it anyway."),
                _ => format!("{time}, {name} {verb} the {noun} near {place} and called it {adj}."),
            }
        }
    }

    fn query(&self, rng: &mut Rng) -> String {
        let (t, name, place) = self.words(rng);
        let noun = rng.pick(t.nouns);
        let verb = rng.pick(t.verbs);
        match rng.below(6) {
            0 => format!("what did I do with {name} in {place}?"),
            1 => format!("{noun} {place}"),
            2 => format!("when did we {verb} the {noun}?"),
            3 => format!("who was with me at the {noun}?"),
            4 => format!("tell me about my {}", t.name),
            _ => format!("what does {name} think of the {noun}"),
        }
    }
}

fn user_name(u: usize) -> String {
    format!("user-{u:03}")
}

/// Unix seconds as ISO 8601 UTC (Howard Hinnant's civil-from-days).
fn iso(t: i64) -> String {
    let (days, secs) = (t.div_euclid(86_400), t.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        secs / 3600,
        secs % 3600 / 60,
        secs % 60
    )
}

/// Message `seq` of user `u` as the API's JSON.
fn message_json(p: &Profile, u: usize, seq: u64, id: &str, rng: &mut Rng) -> Value {
    let assistant = seq % 2 == 1;
    json!({
        "content": p.message(rng, assistant),
        "role": if assistant { "assistant" } else { "user" },
        "session": format!("s{}", seq / 20),
        "timestamp": iso(1_672_531_200 + seq as i64 * 1800 + u as i64 * 7),
        "id": id,
    })
}

// ---------------------------------------------------------------------------
// A minimal HTTP/1.1 keep-alive client

struct Client {
    addr: String,
    conn: Option<BufReader<TcpStream>>,
    connects: u64,
}

struct Reply {
    status: u16,
    body: Vec<u8>,
}

impl Reply {
    fn ok(&self) -> bool {
        (200..300).contains(&self.status)
    }

    fn json(&self) -> Res<Value> {
        Ok(serde_json::from_slice(&self.body)?)
    }
}

fn host_port(url: &str) -> Res<String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("{url}: only http:// URLs"))?;
    Ok(rest.trim_end_matches('/').to_string())
}

impl Client {
    fn new(url: &str) -> Res<Client> {
        Ok(Client {
            addr: host_port(url)?,
            conn: None,
            connects: 0,
        })
    }

    /// Sends one request; an I/O error drops the connection (the next
    /// request opens a new one) and is returned as is, never retried.
    fn request(&mut self, method: &str, path: &str, body: Option<&[u8]>) -> io::Result<Reply> {
        let r = self.try_request(method, path, body);
        if r.is_err() {
            self.conn = None;
        }
        r
    }

    fn try_request(&mut self, method: &str, path: &str, body: Option<&[u8]>) -> io::Result<Reply> {
        if self.conn.is_none() {
            let s = TcpStream::connect(&self.addr)?;
            s.set_nodelay(true)?;
            s.set_read_timeout(Some(Duration::from_secs(60)))?;
            self.conn = Some(BufReader::with_capacity(64 * 1024, s));
            self.connects += 1;
        }
        let conn = self.conn.as_mut().expect("connected above");
        let mut req = Vec::with_capacity(256 + body.map_or(0, |b| b.len()));
        write!(req, "{method} {path} HTTP/1.1\r\nHost: {}\r\n", self.addr)?;
        if let Some(b) = body {
            write!(req, "Content-Type: application/json\r\nContent-Length: {}\r\n", b.len())?;
        }
        req.extend_from_slice(b"\r\n");
        if let Some(b) = body {
            req.extend_from_slice(b);
        }
        conn.get_mut().write_all(&req)?;

        let bad = |m: &str| io::Error::new(io::ErrorKind::InvalidData, m.to_string());
        let mut line = String::new();
        if conn.read_line(&mut line)? == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed"));
        }
        let status: u16 = line
            .split_whitespace()
            .nth(1)
            .and_then(|s| s.parse().ok())
            .ok_or_else(|| bad("bad status line"))?;
        let (mut len, mut chunked, mut close) = (None, false, false);
        loop {
            line.clear();
            if conn.read_line(&mut line)? == 0 {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "connection closed in headers",
                ));
            }
            let l = line.trim_end();
            if l.is_empty() {
                break;
            }
            if let Some((k, v)) = l.split_once(':') {
                let (k, v) = (k.trim().to_ascii_lowercase(), v.trim());
                match k.as_str() {
                    "content-length" => len = Some(v.parse::<usize>().map_err(|_| bad("bad content-length"))?),
                    "transfer-encoding" => chunked = v.eq_ignore_ascii_case("chunked"),
                    "connection" => close = v.eq_ignore_ascii_case("close"),
                    _ => {}
                }
            }
        }
        let mut body = Vec::new();
        if chunked {
            loop {
                line.clear();
                conn.read_line(&mut line)?;
                let n = usize::from_str_radix(line.trim().split(';').next().unwrap_or(""), 16)
                    .map_err(|_| bad("bad chunk size"))?;
                if n == 0 {
                    // Trailers, then the empty line.
                    loop {
                        line.clear();
                        if conn.read_line(&mut line)? == 0 || line.trim_end().is_empty() {
                            break;
                        }
                    }
                    break;
                }
                let start = body.len();
                body.resize(start + n, 0);
                conn.read_exact(&mut body[start..])?;
                line.clear();
                conn.read_line(&mut line)?;
            }
        } else if let Some(n) = len {
            body.resize(n, 0);
            conn.read_exact(&mut body)?;
        } else if status != 204 && status != 304 && method != "HEAD" {
            conn.read_to_end(&mut body)?;
            close = true;
        }
        if close {
            self.conn = None;
        }
        Ok(Reply { status, body })
    }

    fn get_json(&mut self, path: &str) -> Res<Value> {
        let r = self.request("GET", path, None)?;
        if !r.ok() {
            return Err(format!("GET {path}: {} {}", r.status, String::from_utf8_lossy(&r.body)).into());
        }
        r.json()
    }
}

// ---------------------------------------------------------------------------
// Statistics

#[derive(Default, Clone)]
struct Stats {
    lat_us: Vec<u64>,
    errors: u64,
    statuses: BTreeMap<String, u64>,
}

impl Stats {
    fn merge(&mut self, o: Stats) {
        self.lat_us.extend(o.lat_us);
        self.errors += o.errors;
        for (k, v) in o.statuses {
            *self.statuses.entry(k).or_default() += v;
        }
    }

    fn error(&mut self, what: String) {
        self.errors += 1;
        *self.statuses.entry(what).or_default() += 1;
    }

    fn summary(&mut self, secs: f64) -> Value {
        self.lat_us.sort_unstable();
        let pct = |p: f64| -> f64 {
            if self.lat_us.is_empty() {
                return 0.0;
            }
            let rank = ((p / 100.0) * self.lat_us.len() as f64).ceil() as usize;
            self.lat_us[rank.clamp(1, self.lat_us.len()) - 1] as f64 / 1000.0
        };
        let mean = if self.lat_us.is_empty() {
            0.0
        } else {
            self.lat_us.iter().sum::<u64>() as f64 / self.lat_us.len() as f64 / 1000.0
        };
        json!({
            "count": self.lat_us.len(),
            "throughput": round(self.lat_us.len() as f64 / secs, 1),
            "mean_ms": round(mean, 3),
            "p50_ms": round(pct(50.0), 3),
            "p90_ms": round(pct(90.0), 3),
            "p99_ms": round(pct(99.0), 3),
            "p999_ms": round(pct(99.9), 3),
            "max_ms": round(pct(100.0), 3),
            "errors": self.errors,
            "error_kinds": self.statuses,
        })
    }
}

fn round(x: f64, digits: i32) -> f64 {
    let f = 10f64.powi(digits);
    (x * f).round() / f
}

fn print_stats(name: &str, s: &Value) {
    println!(
        "  {name:<7} count {:>8}  {:>9.1}/s  p50 {:>8.3} ms  p90 {:>8.3} ms  p99 {:>8.3} ms  p99.9 {:>8.3} ms  max {:>9.3} ms  errors {}{}",
        s["count"],
        s["throughput"].as_f64().unwrap_or(0.0),
        s["p50_ms"].as_f64().unwrap_or(0.0),
        s["p90_ms"].as_f64().unwrap_or(0.0),
        s["p99_ms"].as_f64().unwrap_or(0.0),
        s["p999_ms"].as_f64().unwrap_or(0.0),
        s["max_ms"].as_f64().unwrap_or(0.0),
        s["errors"],
        match s["error_kinds"].as_object() {
            Some(m) if !m.is_empty() => format!(" {}", s["error_kinds"]),
            _ => String::new(),
        }
    );
}

// ---------------------------------------------------------------------------
// populate

fn populate(a: &Args) -> Res<()> {
    let url = a.str("url", "http://127.0.0.1:7700");
    let users: usize = a.num("users", 100)?;
    let per_user: usize = a.num("messages", 2000)?;
    let batch: usize = a.num("batch", 200)?;
    let conns: usize = a.num("connections", 4)?;
    if users == 0 || per_user == 0 || batch == 0 || conns == 0 {
        return Err("users, messages, batch and connections must be at least 1".into());
    }
    let batches = per_user.div_ceil(batch);
    println!("populate: {users} users x {per_user} messages in batches of {batch} over {conns} connection(s) to {url}");
    let jobs = Arc::new(Mutex::new(Vec::<i64>::new()));
    let stored = Arc::new(AtomicU64::new(0));
    let retries = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let handles: Vec<_> = (0..conns)
        .map(|t| {
            let (url, jobs, stored, retries) = (url.clone(), jobs.clone(), stored.clone(), retries.clone());
            std::thread::spawn(move || -> Res<()> {
                let mut c = Client::new(&url)?;
                let mine: Vec<usize> = (t..users).step_by(conns).collect();
                let profiles: Vec<Profile> = mine.iter().map(|&u| Profile::of(u)).collect();
                let mut rngs: Vec<Rng> = mine.iter().map(|&u| Rng::new(0x5EED_0000 + u as u64)).collect();
                for b in 0..batches {
                    for (i, &u) in mine.iter().enumerate() {
                        let lo = b * batch;
                        let hi = ((b + 1) * batch).min(per_user);
                        let msgs: Vec<Value> = (lo..hi)
                            .map(|s| {
                                let id = format!("{}-m{s:05}", user_name(u));
                                message_json(&profiles[i], u, s as u64, &id, &mut rngs[i])
                            })
                            .collect();
                        let body = serde_json::to_vec(&json!({ "messages": msgs }))?;
                        let path = format!("/v1/users/{}/messages", user_name(u));
                        let r = loop {
                            let r = c.request("POST", &path, Some(&body))?;
                            if r.status == 429 || r.status == 503 {
                                retries.fetch_add(1, Ordering::Relaxed);
                                std::thread::sleep(Duration::from_millis(500));
                                continue;
                            }
                            break r;
                        };
                        if r.status != 202 {
                            return Err(
                                format!("POST {path}: {} {}", r.status, String::from_utf8_lossy(&r.body)).into(),
                            );
                        }
                        let v = r.json()?;
                        let n = v["message_ids"].as_array().map_or(0, |a| a.len());
                        stored.fetch_add(n as u64, Ordering::Relaxed);
                        if let Some(j) = v["job_id"].as_i64() {
                            jobs.lock().map_err(|_| "poisoned")?.push(j);
                        }
                    }
                }
                Ok(())
            })
        })
        .collect();
    for h in handles {
        h.join().map_err(|_| "a populate thread panicked")??;
    }
    let appended = started.elapsed().as_secs_f64();
    let stored = stored.load(Ordering::Relaxed);
    println!(
        "  appended {stored} messages in {appended:.1} s ({:.0} messages/s accepted); waiting for ingestion...",
        stored as f64 / appended
    );
    let jobs = std::mem::take(&mut *jobs.lock().map_err(|_| "poisoned")?);
    let mut c = Client::new(&url)?;
    let failed = wait_jobs(&mut c, &jobs, Duration::from_secs(3600))?;
    let total = started.elapsed().as_secs_f64();
    println!(
        "  ingested {stored} messages ({} jobs, {failed} failed, {} retries after 429/503) in {total:.1} s: {:.0} messages/s end to end",
        jobs.len(),
        retries.load(Ordering::Relaxed),
        stored as f64 / total
    );
    println!(
        "JSON {}",
        json!({
            "mode": "populate", "users": users, "messages_per_user": per_user, "batch": batch,
            "stored": stored, "jobs": jobs.len(), "failed_jobs": failed,
            "append_secs": round(appended, 2), "total_secs": round(total, 2),
            "accepted_per_s": round(stored as f64 / appended, 1),
            "ingested_per_s": round(stored as f64 / total, 1),
        })
    );
    if failed > 0 {
        return Err(format!("{failed} ingest job(s) failed").into());
    }
    Ok(())
}

/// Waits until the queue is empty and every job in `jobs` has ended;
/// returns how many failed.
fn wait_jobs(c: &mut Client, jobs: &[i64], timeout: Duration) -> Res<usize> {
    let deadline = Instant::now() + timeout;
    loop {
        let h = c.get_json("/v1/health")?;
        if h["queue_depth"].as_u64() == Some(0) {
            break;
        }
        if Instant::now() > deadline {
            return Err("timed out waiting for the ingest queue to drain".into());
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let mut failed = 0;
    for &j in jobs {
        loop {
            let v = c.get_json(&format!("/v1/jobs/{j}"))?;
            match v["state"].as_str() {
                Some("done") => break,
                Some("failed") => {
                    eprintln!("  job {j} failed: {}", v["error"]);
                    failed += 1;
                    break;
                }
                _ if Instant::now() > deadline => return Err(format!("timed out waiting for job {j}").into()),
                _ => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }
    Ok(failed)
}

// ---------------------------------------------------------------------------
// run

#[derive(Default)]
struct ThreadOut {
    search: Stats,
    append: Stats,
    /// (user, message id, job id) of every acknowledged append.
    acked: Vec<(usize, String, Option<i64>)>,
    /// Appends whose outcome is unknown (I/O error after sending).
    unknown: Vec<(usize, String)>,
    connects: u64,
}

struct RunCfg {
    /// Servers to spread connections over (several servers on one store).
    urls: Vec<String>,
    users: usize,
    k: usize,
    append_pct: u64,
    tag: String,
    start: Instant,
    warmup_end: Instant,
    end: Instant,
}

/// Sends operation `i` (search or append, chosen from `i` alone) and
/// records its latency from `t0`.
fn one_op(cfg: &RunCfg, c: &mut Client, out: &mut ThreadOut, i: u64, t0: Instant, profiles: &[Profile]) {
    let mut rng = Rng::new(0xC0FF_EE00_0000 ^ i.wrapping_mul(0x2545_F491_4F6C_DD1D));
    let u = rng.below(cfg.users);
    let append = rng.chance(cfg.append_pct);
    let record = t0 >= cfg.warmup_end;
    if append {
        let id = format!("{}-{}-{i}", user_name(u), cfg.tag);
        // A sequence number far from the populated ones, for its timestamp.
        let seq = 1_000_000 + i;
        let body = serde_json::to_vec(&json!({ "messages": [message_json(&profiles[u], u, seq, &id, &mut rng)] }))
            .expect("JSON");
        let r = c.request("POST", &format!("/v1/users/{}/messages", user_name(u)), Some(&body));
        let lat = t0.elapsed();
        match r {
            Ok(r) if r.ok() => {
                let job = r.json().ok().and_then(|v| v["job_id"].as_i64());
                out.acked.push((u, id, job));
                if record {
                    out.append.lat_us.push(lat.as_micros() as u64);
                }
            }
            Ok(r) => {
                if record {
                    out.append.error(format!("http {}", r.status));
                }
            }
            Err(e) => {
                out.unknown.push((u, id));
                if record {
                    out.append.error(format!("io {:?}", e.kind()));
                }
            }
        }
    } else {
        let q = profiles[u].query(&mut rng);
        let body = serde_json::to_vec(&json!({ "query": q, "k": cfg.k })).expect("JSON");
        let r = c.request("POST", &format!("/v1/users/{}/search", user_name(u)), Some(&body));
        let lat = t0.elapsed();
        if !record {
            return;
        }
        match r {
            Ok(r) if r.ok() => match r.json() {
                Ok(v) if v["results"].is_array() => out.search.lat_us.push(lat.as_micros() as u64),
                _ => out.search.error("bad body".into()),
            },
            Ok(r) => out.search.error(format!("http {}", r.status)),
            Err(e) => out.search.error(format!("io {:?}", e.kind())),
        }
    }
}

fn run(a: &Args) -> Res<()> {
    // Comma-separated: connection `i` goes to server `i % n`; checks use the first.
    let urls: Vec<String> = a
        .str("url", "http://127.0.0.1:7700")
        .split(',')
        .map(|u| u.trim().to_string())
        .filter(|u| !u.is_empty())
        .collect();
    let url = urls.first().cloned().ok_or("--url is empty")?;
    let users: usize = a.num("users", 100)?;
    let seconds: f64 = a.num("seconds", 20.0)?;
    let warmup: f64 = a.num("warmup", 2.0)?;
    let conns: usize = a.num("connections", 16)?;
    let rate: Option<f64> = a.opt_num("rate")?;
    let k: usize = a.num("k", 10)?;
    let append_pct: u64 = a.num("append-pct", 10)?;
    let label = a.str("label", if rate.is_some() { "open" } else { "closed" });
    if users == 0 || conns == 0 || seconds <= 0.0 || rate.is_some_and(|r| r <= 0.0) {
        return Err("users, connections, seconds and rate must be positive".into());
    }
    let mut c = Client::new(&url)?;
    let health = c.get_json("/v1/health")?;
    let before: Vec<i64> = (0..users)
        .map(|u| {
            c.get_json(&format!("/v1/users/{}", user_name(u)))
                .map(|v| v["messages"].as_i64().unwrap_or(-1))
        })
        .collect::<Res<_>>()?;
    let tag = format!(
        "{label}{}",
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis())
    );
    let profiles: Arc<Vec<Profile>> = Arc::new((0..users).map(Profile::of).collect());
    match rate {
        None => println!(
            "run [{label}]: closed loop, {conns} connections, {seconds} s (+{warmup} s warm-up), {}% appends, k={k}, {users} users, embedder {}",
            append_pct, health["embedder"]
        ),
        Some(r) => println!(
            "run [{label}]: open loop at {r} requests/s, {conns} connections, {seconds} s (+{warmup} s warm-up), {}% appends, k={k}, {users} users, embedder {}",
            append_pct, health["embedder"]
        ),
    }
    let start = Instant::now() + Duration::from_millis(50);
    let warmup_end = start + Duration::from_secs_f64(warmup);
    let cfg = Arc::new(RunCfg {
        urls: urls.clone(),
        users,
        k,
        append_pct,
        tag,
        start,
        warmup_end,
        end: warmup_end + Duration::from_secs_f64(seconds),
    });
    let next = Arc::new(AtomicU64::new(0));
    let handles: Vec<_> = (0..conns)
        .map(|ci| {
            let (cfg, next, profiles) = (cfg.clone(), next.clone(), profiles.clone());
            std::thread::spawn(move || -> Res<ThreadOut> {
                let mut c = Client::new(&cfg.urls[ci % cfg.urls.len()])?;
                let mut out = ThreadOut::default();
                // Connect before the clock starts.
                let _ = c.request("GET", "/v1/health", None);
                if let Some(d) = cfg.start.checked_duration_since(Instant::now()) {
                    std::thread::sleep(d);
                }
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    let t0 = match rate {
                        None => {
                            let now = Instant::now();
                            if now >= cfg.end {
                                break;
                            }
                            now
                        }
                        Some(r) => {
                            // Due time on the fixed timetable; the latency counts from it.
                            let due = cfg.start + Duration::from_secs_f64(i as f64 / r);
                            if due >= cfg.end {
                                break;
                            }
                            if let Some(d) = due.checked_duration_since(Instant::now()) {
                                std::thread::sleep(d);
                            }
                            due
                        }
                    };
                    one_op(&cfg, &mut c, &mut out, i, t0, &profiles);
                }
                out.connects = c.connects;
                Ok(out)
            })
        })
        .collect();
    let mut all = ThreadOut::default();
    for h in handles {
        let o = h.join().map_err(|_| "a load thread panicked")??;
        all.search.merge(o.search);
        all.append.merge(o.append);
        all.acked.extend(o.acked);
        all.unknown.extend(o.unknown);
        all.connects += o.connects;
    }
    let ran = Instant::now();
    // Wall time of the measured window: up to the last completion.
    let window = (ran.max(cfg.end) - warmup_end).as_secs_f64();
    let s = all.search.summary(window);
    let ap = all.append.summary(window);
    let total_rate = (all.search.lat_us.len() + all.append.lat_us.len()) as f64 / window;
    println!("  measured window {window:.2} s; completed {total_rate:.1} requests/s in total");
    print_stats("search", &s);
    print_stats("append", &ap);
    if all.connects > conns as u64 {
        println!(
            "  note: {} connection(s) were reopened after an error or close",
            all.connects - conns as u64
        );
    }

    // Zero lost messages: counts, then ids.
    println!(
        "  verifying {} acknowledged append(s) ({} unknown after I/O errors)...",
        all.acked.len(),
        all.unknown.len()
    );
    let jobs: Vec<i64> = all.acked.iter().filter_map(|x| x.2).collect();
    let failed_jobs = wait_jobs(&mut c, &jobs, Duration::from_secs(600))?;
    let mut per_user: Vec<Vec<&str>> = vec![Vec::new(); users];
    for (u, id, _) in &all.acked {
        per_user[*u].push(id);
    }
    let unknown: HashSet<&str> = all.unknown.iter().map(|x| x.1.as_str()).collect();
    let (mut lost, mut count_mismatch, mut unknown_stored) = (0usize, 0i64, 0usize);
    for u in 0..users {
        let after = c
            .get_json(&format!("/v1/users/{}", user_name(u)))?
            .get("messages")
            .and_then(Value::as_i64)
            .unwrap_or(-1);
        let mut listed = HashSet::new();
        let mut offset = before[u].max(0);
        loop {
            let v = c.get_json(&format!(
                "/v1/users/{}/messages?limit=1000&offset={offset}",
                user_name(u)
            ))?;
            let page = v["messages"].as_array().cloned().unwrap_or_default();
            for m in &page {
                if let Some(r) = m["ref_id"].as_str() {
                    listed.insert(r.to_string());
                }
            }
            if page.len() < 1000 {
                break;
            }
            offset += 1000;
        }
        let missing = per_user[u].iter().filter(|id| !listed.contains(**id)).count();
        lost += missing;
        let extra = listed.iter().filter(|id| unknown.contains(id.as_str())).count();
        unknown_stored += extra;
        let expected = before[u] + per_user[u].len() as i64 + extra as i64;
        if after != expected {
            count_mismatch += (after - expected).abs();
            eprintln!(
                "  {}: {after} messages, expected {expected} ({} before + {} acknowledged + {extra} unknown stored)",
                user_name(u),
                before[u],
                per_user[u].len()
            );
        }
    }
    println!(
        "  lost messages: {lost} (acknowledged but not listed); count mismatches: {count_mismatch}; failed ingest jobs: {failed_jobs}; unknown-outcome appends stored: {unknown_stored}/{}",
        all.unknown.len()
    );
    println!(
        "JSON {}",
        json!({
            "mode": "run", "label": label, "loop": if rate.is_some() { "open" } else { "closed" },
            "rate": rate, "connections": conns, "seconds": round(window, 2), "users": users, "k": k,
            "append_pct": append_pct, "embedder": health["embedder"],
            "throughput": round(total_rate, 1),
            "search": s, "append": ap,
            "acknowledged_appends": all.acked.len(), "lost_messages": lost,
            "count_mismatches": count_mismatch, "failed_jobs": failed_jobs,
            "unknown_appends": all.unknown.len(),
        })
    );
    Ok(())
}

// ---------------------------------------------------------------------------
// inproc

fn embedder(spec: &str) -> Res<Arc<dyn Embedder>> {
    Ok(match spec {
        "hash" => Arc::new(dentate_embed::HashingEmbedder::new(384)?),
        "minilm" => Arc::new(dentate_embed::MiniLm::load(&dentate_embed::MiniLm::default_dir())?),
        other => return Err(format!("--embedder {other}: use hash or minilm").into()),
    })
}

/// The store names of `users` external ids of tenant `default`.
fn internal_users(dir: &std::path::Path, users: usize) -> Res<Vec<String>> {
    let db = rusqlite::Connection::open_with_flags(
        dir.join("service.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY | rusqlite::OpenFlags::SQLITE_OPEN_NO_MUTEX,
    )?;
    let mut st = db.prepare("SELECT id FROM service_users WHERE tenant = 'default' AND external = ?1")?;
    (0..users)
        .map(|u| {
            let id: i64 = st
                .query_row([user_name(u)], |r| r.get(0))
                .map_err(|e| format!("{}: {e}", user_name(u)))?;
            Ok(format!("u{id}"))
        })
        .collect()
}

/// A `Memory` on `dir` with every user's index loaded (as the server's
/// slots keep them).
fn open_warm(dir: &std::path::Path, emb: &Arc<dyn Embedder>, internal: &[String], k: usize) -> Res<Memory> {
    let mut m = Memory::open(dir, PipelineKind::parse("rag")?, emb.clone(), None)?;
    for u in internal {
        m.retrieve(u, "warm up", k)?;
    }
    Ok(m)
}

/// Runs the searches `ids` (search `i` drawn as `run` draws request `i`;
/// its append draws become searches too) on `m`; returns per-search
/// latencies and the wall time.
fn searches(
    m: &mut Memory,
    internal: &[String],
    profiles: &[Profile],
    ids: impl Iterator<Item = u64>,
    k: usize,
) -> Res<(Vec<u64>, f64)> {
    let mut lat = Vec::new();
    let started = Instant::now();
    for i in ids {
        let mut rng = Rng::new(0xC0FF_EE00_0000 ^ i.wrapping_mul(0x2545_F491_4F6C_DD1D));
        let u = rng.below(internal.len());
        let _append = rng.chance(10);
        let q = profiles[u].query(&mut rng);
        let t = Instant::now();
        let r = m.retrieve(&internal[u], &q, k)?;
        lat.push(t.elapsed().as_micros() as u64);
        std::hint::black_box(r);
    }
    Ok((lat, started.elapsed().as_secs_f64()))
}

fn inproc(a: &Args) -> Res<()> {
    let dir = PathBuf::from(a.opts.get("dir").ok_or("--dir DIR is required")?);
    let users: usize = a.num("users", 100)?;
    let queries: u64 = a.num("queries", 20_000)?;
    let threads: usize = a.num("threads", std::thread::available_parallelism().map_or(2, |n| n.get()))?;
    let k: usize = a.num("k", 10)?;
    let spec = a.str("embedder", "hash");
    let emb = embedder(&spec)?;
    let internal = Arc::new(internal_users(&dir, users)?);
    let profiles: Arc<Vec<Profile>> = Arc::new((0..users).map(Profile::of).collect());
    println!(
        "inproc: {} on {}, {users} users, {queries} searches (k={k}) through Memory::retrieve, 1 thread then {threads} threads (one Memory each)",
        emb.name(),
        dir.display()
    );

    let mut m = open_warm(&dir, &emb, &internal, k)?;
    let (lat, secs) = searches(&mut m, &internal, &profiles, 0..queries, k)?;
    drop(m);
    let mut single = Stats {
        lat_us: lat,
        ..Stats::default()
    };
    let single = single.summary(secs);
    print_stats("1 thr", &single);

    let barrier = Arc::new(std::sync::Barrier::new(threads));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let (dir, emb, internal, profiles, barrier) = (
                dir.clone(),
                emb.clone(),
                internal.clone(),
                profiles.clone(),
                barrier.clone(),
            );
            std::thread::spawn(move || -> Res<(Vec<u64>, f64)> {
                // Open and warm up first, then start together.
                let m = open_warm(&dir, &emb, &internal, k);
                barrier.wait();
                let mut m = m?;
                searches(&mut m, &internal, &profiles, (t as u64..queries).step_by(threads), k)
            })
        })
        .collect();
    let mut multi = Stats::default();
    let mut wall: f64 = 0.0;
    for h in handles {
        let (lat, secs) = h.join().map_err(|_| "an inproc thread panicked")??;
        multi.lat_us.extend(lat);
        wall = wall.max(secs);
    }
    let multi = multi.summary(wall);
    print_stats(&format!("{threads} thr"), &multi);
    println!(
        "JSON {}",
        json!({
            "mode": "inproc", "embedder": emb.name(), "users": users, "queries": queries, "k": k,
            "single": single, "threads": threads, "multi": multi,
        })
    );
    Ok(())
}

fn main() {
    let r = Args::parse().and_then(|a| match a.mode.as_str() {
        "populate" => populate(&a),
        "run" => run(&a),
        "inproc" => inproc(&a),
        other => Err(format!("unknown mode `{other}` (populate, run, inproc)").into()),
    });
    if let Err(e) = r {
        eprintln!("load: {e}");
        std::process::exit(1);
    }
}
