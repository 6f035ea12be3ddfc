//! The file format: round trips, corrupt and truncated files, and the v1
//! compatibility fixtures.

mod common;
use common::*;
use dentate::io::HEADER_LEN;
use dentate::{AnyIndex, Error, FlatIndex, Index, IvfPqConfig, IvfPqIndex, IvfSearchParams, Precision};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// The data and index the fixtures were written from. Changing this
/// function, or the writer, must not change the fixture bytes.
fn fixture_flat() -> FlatIndex {
    let dim = 8;
    let data = synth(64, dim, 4, 2024);
    let mut idx = FlatIndex::with_precision(dim, Precision::F32);
    idx.set_turn(3);
    idx.add(&(100..164).collect::<Vec<_>>(), &data).unwrap();
    idx.remove(&[101, 150]);
    idx.record_retrieval(&[100], 5);
    idx
}

fn fixture_ivf() -> IvfPqIndex {
    let dim = 8;
    let data = synth(300, dim, 6, 2025);
    let mut cfg = IvfPqConfig::new(4, 4).opq(true);
    cfg.opq_config.iterations = 2;
    cfg.kmeans_iterations = 5;
    cfg.pq_iterations = 5;
    let mut idx = IvfPqIndex::new(dim, cfg).unwrap();
    idx.train(&data).unwrap();
    idx.add(&(0..300).collect::<Vec<_>>(), &data).unwrap();
    idx.remove(&[7]);
    idx
}

/// Writes the fixtures when `DENTATE_WRITE_FIXTURES=1` (only when a format
/// version is added on purpose; the old files must stay).
#[test]
fn write_fixtures_on_request() {
    if std::env::var("DENTATE_WRITE_FIXTURES").as_deref() == Ok("1") {
        std::fs::create_dir_all(fixture("")).unwrap();
        fixture_flat().save(&fixture("flat_v1.dnt")).unwrap();
        fixture_ivf().save(&fixture("ivfpq_v1.dnt")).unwrap();
    }
}

#[test]
fn v1_flat_fixture_loads_and_answers() {
    let loaded = FlatIndex::load(&fixture("flat_v1.dnt")).expect("format v1 flat fixture must load");
    assert_eq!(loaded.len(), 62);
    assert_eq!(loaded.turn(), 3);
    assert!(!loaded.contains(101) && loaded.contains(102));
    let fresh = fixture_flat();
    let q = synth(5, 8, 4, 7);
    assert_eq!(
        ids(&loaded.search(&q, 10).unwrap()),
        ids(&fresh.search(&q, 10).unwrap())
    );
    // Re-serialising the loaded index gives the fixture's bytes exactly.
    assert_eq!(loaded.to_bytes(), std::fs::read(fixture("flat_v1.dnt")).unwrap());
}

#[test]
fn v1_ivfpq_fixture_loads_and_answers() {
    let loaded = IvfPqIndex::load(&fixture("ivfpq_v1.dnt")).expect("format v1 ivfpq fixture must load");
    assert_eq!(loaded.len(), 299);
    assert!(loaded.config().opq);
    assert!(!loaded.contains(7));
    let data = synth(300, 8, 6, 2025);
    // Every stored vector finds itself after exact re-ranking.
    let res = loaded
        .search_with(&data[8 * 10..8 * 20], 1, IvfSearchParams { nprobe: 4, rerank: 300 })
        .unwrap();
    for (i, hits) in res.iter().enumerate() {
        assert_eq!(hits[0].id, 10 + i as u64);
    }
    assert_eq!(loaded.to_bytes(), std::fs::read(fixture("ivfpq_v1.dnt")).unwrap());
}

#[test]
fn round_trips_preserve_everything() {
    let dir = tempfile::tempdir().unwrap();
    let flat = fixture_flat();
    let p = dir.path().join("f.dnt");
    flat.save(&p).unwrap();
    let back = FlatIndex::load(&p).unwrap();
    assert_eq!(back.to_bytes(), flat.to_bytes());
    let ivf = fixture_ivf();
    let p2 = dir.path().join("i.dnt");
    ivf.save(&p2).unwrap();
    let any = AnyIndex::load(&p2).unwrap();
    assert!(matches!(any, AnyIndex::IvfPq(_)));
    let q = synth(10, 8, 6, 3);
    assert_eq!(
        ids(&any.as_index().search(&q, 5).unwrap()),
        ids(&ivf.search(&q, 5).unwrap())
    );
    // Loading the wrong kind is a typed error.
    assert!(matches!(FlatIndex::load(&p2), Err(Error::WrongKind { .. })));
    // Saving over an existing file replaces it whole and leaves no temp files.
    flat.save(&p2).unwrap();
    assert!(matches!(AnyIndex::load(&p2).unwrap(), AnyIndex::Flat(_)));
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
}

#[test]
fn corrupt_and_truncated_files_are_errors() {
    let good = fixture_ivf().to_bytes();
    // Every truncation point.
    for cut in (0..good.len()).step_by(97).chain([good.len() - 1, 7, 31, 32]) {
        let r = AnyIndex::from_bytes(&good[..cut]);
        assert!(r.is_err(), "truncated at {cut} loaded");
    }
    assert!(matches!(AnyIndex::from_bytes(&good[..20]), Err(Error::Truncated(_))));
    assert!(matches!(
        AnyIndex::from_bytes(&good[..good.len() - 1]),
        Err(Error::Truncated(_))
    ));
    assert!(matches!(
        AnyIndex::from_bytes(b"not an index at all"),
        Err(Error::BadMagic)
    ));
    // A flipped payload byte fails the checksum.
    let mut bad = good.clone();
    bad[HEADER_LEN + 40] ^= 0x10;
    assert!(matches!(
        AnyIndex::from_bytes(&bad),
        Err(Error::ChecksumMismatch { section: "payload", .. })
    ));
    // A flipped header byte fails the header checksum.
    let mut bad = good.clone();
    bad[17] ^= 1;
    assert!(matches!(
        AnyIndex::from_bytes(&bad),
        Err(Error::ChecksumMismatch { section: "header", .. })
    ));
    // A future version is refused by name (checksum recomputed so only the version is wrong).
    let mut newer = good.clone();
    newer[8..12].copy_from_slice(&2u32.to_le_bytes());
    let h = crc32fast_hash(&newer[..28]);
    newer[28..32].copy_from_slice(&h.to_le_bytes());
    assert!(matches!(
        AnyIndex::from_bytes(&newer),
        Err(Error::UnsupportedVersion { found: 2, .. })
    ));
    // Trailing garbage.
    let mut long = good.clone();
    long.push(0);
    assert!(AnyIndex::from_bytes(&long).is_err());
    // Missing file.
    assert!(matches!(
        AnyIndex::load(std::path::Path::new("/nonexistent/x.dnt")),
        Err(Error::Io { .. })
    ));
}

/// Header + payload with both checksums recomputed, so only structure is wrong.
fn reseal(header: &[u8], payload: &[u8]) -> Vec<u8> {
    let mut bytes = header[..HEADER_LEN].to_vec();
    bytes[16..24].copy_from_slice(&(payload.len() as u64).to_le_bytes());
    bytes[24..28].copy_from_slice(&crc32fast_hash(payload).to_le_bytes());
    let h = crc32fast_hash(&bytes[..28]);
    bytes[28..32].copy_from_slice(&h.to_le_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// Structurally wrong payloads with valid checksums: the parser must catch
/// each as `Corrupt`, never index out of range or allocate wildly.
#[test]
fn consistent_checksums_but_bad_structure_is_corrupt() {
    let corrupt = |bytes: &[u8]| matches!(AnyIndex::from_bytes(bytes), Err(Error::Corrupt(_)));
    // Flat payload: dim u32 @0, precision u8 @4, rows u64 @5, then the vectors.
    let flat = fixture_flat().to_bytes();
    let p = &flat[HEADER_LEN..];
    let mut x = p.to_vec();
    x[5..13].copy_from_slice(&1000u64.to_le_bytes()); // more rows than vectors
    assert!(corrupt(&reseal(&flat, &x)));
    let mut x = p.to_vec();
    x[4] = 9; // unknown precision
    assert!(corrupt(&reseal(&flat, &x)));
    let mut x = p.to_vec();
    x[13..21].copy_from_slice(&u64::MAX.to_le_bytes()); // absurd array length
    assert!(corrupt(&reseal(&flat, &x)));
    let mut x = p.to_vec();
    x[0..4].copy_from_slice(&0u32.to_le_bytes());
    assert!(corrupt(&reseal(&flat, &x)));
    // IVF payload: dim @0, nlist @4, m @8.
    let ivf = fixture_ivf().to_bytes();
    let p = &ivf[HEADER_LEN..];
    let mut x = p.to_vec();
    x[8..12].copy_from_slice(&3u32.to_le_bytes()); // m does not divide dim
    assert!(corrupt(&reseal(&ivf, &x)));
    let mut x = p.to_vec();
    x[4..8].copy_from_slice(&5u32.to_le_bytes()); // one list more than stored
    assert!(corrupt(&reseal(&ivf, &x)));
    let mut x = p.to_vec();
    x[4..8].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(corrupt(&reseal(&ivf, &x)));
    // Dropping the last byte of the payload (and resealing) is structural too.
    assert!(corrupt(&reseal(&ivf, &p[..p.len() - 1])));
}

fn crc32fast_hash(b: &[u8]) -> u32 {
    // CRC-32 (IEEE), bitwise: an independent implementation keeps this test
    // honest about the format rather than reusing the writer's code.
    let mut crc = !0u32;
    for &byte in b {
        crc ^= byte as u32;
        for _ in 0..8 {
            crc = if crc & 1 == 1 {
                (crc >> 1) ^ 0xEDB8_8320
            } else {
                crc >> 1
            };
        }
    }
    !crc
}
