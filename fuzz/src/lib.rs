//! What each fuzz target does with one input, and the valid inputs its
//! corpus starts from.
//!
//! The `cargo fuzz` targets in `fuzz_targets/` call [`run`], and the main
//! workspace's `tests/fuzz_regressions.rs` includes this file and replays
//! the minimised crash inputs of `tests/fixtures/fuzz-regressions/` through
//! the same function, so a fixed crash stays fixed under plain `cargo test`.
//!
//! A loader target treats its input as a payload and seals it under a valid
//! header (kind, length and both CRC-32s computed over the fuzzed bytes), so
//! the input reaches the parser instead of stopping at the checksum. An
//! input that starts with the file's magic is taken as a whole file instead,
//! which fuzzes the header checks too. Whatever loads is then used: searched
//! once, as the CLI does after a load, and written back and read again,
//! which must succeed (a loader must only accept what the writer can
//! round-trip).

use dentate_core::io::{HEADER_LEN, MAGIC};
use dentate_core::{FlatIndex, Index, IvfPqConfig, IvfPqIndex, LexicalIndex, Precision, StoreFormat};
use dentate_memory::store::{NewMessage, Store};

/// The fuzz targets, by name (`cargo fuzz run <name>`).
pub const TARGETS: &[&str] = &[
    "flat", "ivfpq", "fastscan", "lexical", "snapshot", "locomo", "jsonl", "llm_json",
];

/// Runs target `target` on `data` and says whether the input was accepted
/// (loaded or parsed). Panics only where the code under test misbehaves (a
/// panic inside it, or a loaded file that does not write back and load
/// again); every rejection must be an ordinary error.
pub fn run(target: &str, data: &[u8]) -> bool {
    let text = || String::from_utf8_lossy(data);
    match target {
        "flat" => flat(data),
        "ivfpq" => ivf(data, 2),
        "fastscan" => ivf(data, 4),
        "lexical" => lexical(data),
        "snapshot" => snapshot(data),
        "locomo" => dentate_memory::locomo::parse(&text()).is_ok(),
        "jsonl" => dentate_memory::input::parse_jsonl(&text()).is_ok(),
        "llm_json" => dentate_memory::llm::extract_json_object(&text()).is_ok(),
        other => panic!("unknown fuzz target {other}"),
    }
}

/// `payload` under a valid index header of kind code `kind` (or `payload`
/// itself when it already starts with the magic).
pub fn seal(kind: u32, payload: &[u8]) -> Vec<u8> {
    if payload.starts_with(MAGIC) {
        return payload.to_vec();
    }
    let mut out = Vec::with_capacity(HEADER_LEN + payload.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&1u32.to_le_bytes());
    out.extend_from_slice(&kind.to_le_bytes());
    out.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(payload).to_le_bytes());
    let h = crc32fast::hash(&out[..28]);
    out.extend_from_slice(&h.to_le_bytes());
    out.extend_from_slice(payload);
    out
}

/// The memory snapshot's magic (see `Store::to_bytes`).
const SNAPSHOT_MAGIC: &[u8; 8] = b"DNTMEMDB";
/// The memory snapshot's header length: magic, version, length, CRC-32.
const SNAPSHOT_HEADER: usize = 24;

/// `db` under a valid memory-snapshot header (or `db` itself when it
/// already starts with the magic). The version is the one this build
/// writes, read from a fresh snapshot.
pub fn seal_snapshot(db: &[u8]) -> Vec<u8> {
    if db.starts_with(SNAPSHOT_MAGIC) {
        return db.to_vec();
    }
    let fresh = Store::open_in_memory()
        .and_then(|mut s| s.to_bytes())
        .expect("an empty in-memory store snapshots");
    let mut out = fresh[..12].to_vec();
    out.extend_from_slice(&(db.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(db).to_le_bytes());
    out.extend_from_slice(db);
    out
}

/// One search of a loaded vector index with a fixed query (skipped for an
/// absurd dimension, which only an empty index can have loaded with).
fn search_once(idx: &dyn Index) {
    let dim = idx.dim();
    if dim <= 1 << 16 {
        let q: Vec<f32> = (0..dim).map(|i| ((i % 7) as f32 - 3.0) / 3.0).collect();
        let _ = idx.search(&q, 5);
    }
}

fn flat(data: &[u8]) -> bool {
    let Ok(idx) = FlatIndex::from_bytes(&seal(1, data)) else {
        return false;
    };
    search_once(&idx);
    FlatIndex::from_bytes(&idx.to_bytes()).expect("a loaded flat index writes back and loads again");
    true
}

fn ivf(data: &[u8], kind: u32) -> bool {
    let Ok(idx) = IvfPqIndex::from_bytes(&seal(kind, data)) else {
        return false;
    };
    search_once(&idx);
    IvfPqIndex::from_bytes(&idx.to_bytes()).expect("a loaded IVF index writes back and loads again");
    true
}

fn lexical(data: &[u8]) -> bool {
    let Ok(idx) = LexicalIndex::from_bytes(&seal(3, data)) else {
        return false;
    };
    let _ = idx.search("cat dog mouse", 5);
    LexicalIndex::from_bytes(&idx.to_bytes()).expect("a loaded lexical index writes back and loads again");
    true
}

fn snapshot(data: &[u8]) -> bool {
    let Ok(mut store) = Store::from_bytes(&seal_snapshot(data)) else {
        return false;
    };
    if let Ok(users) = store.users() {
        for u in users.iter().take(4) {
            let _ = store.message_count(u);
            let _ = store.messages_after(u, -1);
            let _ = store.speakers(u);
        }
    }
    let bytes = store.to_bytes().expect("a loaded snapshot writes back");
    Store::from_bytes(&bytes).expect("a written-back snapshot loads again");
    true
}

/// Valid inputs for `target`, the start of its corpus: payloads (header
/// stripped) for the loaders, whole files for the text readers.
pub fn seeds(target: &str) -> Vec<Vec<u8>> {
    let payload = |file: Vec<u8>| file[HEADER_LEN..].to_vec();
    match target {
        "flat" => [Precision::F32, Precision::F16]
            .into_iter()
            .map(|p| {
                let mut idx = FlatIndex::with_precision(4, p);
                idx.add(&[1, 2, 3, 9], &vectors(4, 4, 1)).expect("seed vectors");
                idx.remove(&[2]);
                payload(idx.to_bytes())
            })
            .collect(),
        "ivfpq" => vec![
            payload(ivf_seed(IvfPqConfig::new(2, 2), None)),
            payload(ivf_seed(IvfPqConfig::new(2, 2).opq(true), Some(StoreFormat::F16))),
            payload(ivf_seed(IvfPqConfig::new(2, 2), Some(StoreFormat::Sq8))),
            payload(IvfPqIndex::new(4, IvfPqConfig::new(2, 2)).expect("untrained").to_bytes()),
        ],
        "fastscan" => vec![
            payload(ivf_seed(IvfPqConfig::fastscan(2, 2), Some(StoreFormat::F32))),
            payload(ivf_seed(IvfPqConfig::fastscan(2, 2), Some(StoreFormat::Sq8))),
            payload(ivf_seed(IvfPqConfig::fastscan(2, 4).opq(true), None)),
        ],
        "lexical" => {
            let mut idx = LexicalIndex::new();
            idx.add(&[1, 2, 3], &["The cat sat on the mat.", "The dog chased the cat!", "mouse, mice"])
                .expect("seed documents");
            idx.remove(&[2]);
            vec![payload(idx.to_bytes()), payload(LexicalIndex::new().to_bytes())]
        }
        "snapshot" => {
            let mut store = Store::open_in_memory().expect("in-memory store");
            let msg = |i: usize| NewMessage {
                session: format!("s{}", i / 2),
                speaker: ["Ann", "Bob"][i % 2].into(),
                text: format!("message {i} about cats"),
                said_at: Some(1_683_554_160 + i as i64),
                source_ref: Some(format!("D1:{i}")),
            };
            store
                .append_messages("u", &(0..5).map(msg).collect::<Vec<_>>())
                .expect("seed messages");
            vec![store.to_bytes().expect("snapshot")[SNAPSHOT_HEADER..].to_vec()]
        }
        "locomo" => vec![
            br#"[{"sample_id":"c1","conversation":{"speaker_a":"Ann","speaker_b":"Bob","session_1_date_time":"1:56 pm on 8 May, 2023","session_1":[{"speaker":"Ann","dia_id":"D1:1","text":"I moved to Oslo."},{"speaker":"Bob","dia_id":"D1:2","text":"When?","img_url":["x"],"blip_caption":"a photo"}],"session_2_date_time":"9 June, 2023"},"qa":[{"question":"Where did Ann move?","answer":"Oslo","evidence":["D1:1"],"category":4},{"question":"Did Bob move?","adversarial_answer":"yes","evidence":["D1:2"],"category":5}]}]"#.to_vec(),
        ],
        "jsonl" => vec![
            br#"{"role":"user","content":"Hi, I moved to Oslo.","timestamp":1683554160}
{"speaker":"Bob","text":"Welcome!","timestamp":"2023-05-08T13:57:00Z","id":"m2","session":"s1"}
{"name":"Ann","text":"Thanks","timestamp":1683554220000}
{"speaker":"Ann","text":"Later","timestamp":"1:56 pm on 9 May, 2023","id":7}"#
                .to_vec(),
        ],
        "llm_json" => vec![
            br#"{"label": "CORRECT"}"#.to_vec(),
            b"```json\n{\"facts\": [\"a\", \"b\"]}\n```".to_vec(),
            br#"The answer is {"label": "WRONG", "why": "a \"quoted\" } brace"} as asked."#.to_vec(),
        ],
        other => panic!("unknown fuzz target {other}"),
    }
}

/// `n` deterministic vectors of dimension `dim`.
fn vectors(n: usize, dim: usize, seed: u32) -> Vec<f32> {
    let mut x = seed.wrapping_mul(2_654_435_761) | 1;
    (0..n * dim)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            (x % 2001) as f32 / 1000.0 - 1.0
        })
        .collect()
}

/// A small trained IVF index of dimension 8 (the fewest vectors its codes
/// train on: 256 for 8-bit, 40 for 4-bit; one removed).
fn ivf_seed(mut cfg: IvfPqConfig, store: Option<StoreFormat>) -> Vec<u8> {
    let n = if cfg.codes == dentate_core::PqCodes::Pq8 {
        256
    } else {
        40
    };
    cfg.rerank_store = store;
    cfg.kmeans_iterations = 3;
    cfg.pq_iterations = 3;
    cfg.opq_config.iterations = 1;
    let data = vectors(n, 8, 7);
    let mut idx = IvfPqIndex::new(8, cfg).expect("seed settings");
    idx.train(&data).expect("seed training");
    idx.add(&(0..n as u64).collect::<Vec<_>>(), &data)
        .expect("seed vectors");
    idx.remove(&[5]);
    idx.to_bytes()
}
