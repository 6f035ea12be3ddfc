//! The file format: round trips, corrupt and truncated files, and the v1
//! compatibility fixtures.

mod common;
use common::*;
use dentate::io::HEADER_LEN;
use dentate::{
    AnyIndex, Error, FlatIndex, Index, IndexKind, Init, IvfPqConfig, IvfPqIndex, IvfSearchParams, PqCodes, Precision,
};
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

/// 300 synthetic vectors (seed `seed`) in an IVF index of `cfg`, briefly
/// trained, id 7 removed.
fn small_ivf(dim: usize, mut cfg: IvfPqConfig, seed: u64) -> IvfPqIndex {
    let data = synth(300, dim, 6, seed);
    cfg.opq_config.iterations = 2;
    cfg.kmeans_iterations = 5;
    cfg.pq_iterations = 5;
    let mut idx = IvfPqIndex::new(dim, cfg).unwrap();
    idx.train(&data).unwrap();
    idx.add(&(0..300).collect::<Vec<_>>(), &data).unwrap();
    idx.remove(&[7]);
    idx
}

fn fixture_ivf() -> IvfPqIndex {
    small_ivf(8, IvfPqConfig::new(4, 4).opq(true), 2025)
}

/// 4-bit fast-scan with OPQ and an odd number of sub-quantizers (3 of
/// dimension 4, so blocks carry a padding sub-quantizer), 300 vectors in 4
/// lists (partial last blocks), one removed.
/// Both indexes give the same top-5 ids for `q`, with re-ranking and on
/// the codes' scores alone (nprobe 2).
fn same_answers(a: &IvfPqIndex, b: &IvfPqIndex, q: &[f32]) {
    for rerank in [0, 4] {
        let p = IvfSearchParams { nprobe: 2, rerank };
        assert_eq!(
            ids(&a.search_with(q, 5, p).unwrap()),
            ids(&b.search_with(q, 5, p).unwrap())
        );
    }
}

fn fixture_fastscan() -> IvfPqIndex {
    // The fast-scan defaults of the v1 fixture's day: inner-product coarse
    // k-means on 64 points a list from a k-means++ start, and codes of
    // residuals.
    let mut cfg = IvfPqConfig::fastscan(4, 3).opq(true);
    cfg.spherical_coarse = false;
    cfg.kmeans_points_per_list = 64;
    cfg.coarse_init = Init::PlusPlus;
    cfg.residual_codes = true;
    small_ivf(12, cfg, 2026)
}

/// Writes the fixtures that do not exist yet when
/// `DENTATE_WRITE_FIXTURES=1` (when a format version or an index kind is
/// added on purpose; existing files are never rewritten).
#[test]
fn write_fixtures_on_request() {
    if std::env::var("DENTATE_WRITE_FIXTURES").as_deref() == Ok("1") {
        std::fs::create_dir_all(fixture("")).unwrap();
        let write = |name: &str, index: &dyn Index| {
            if !fixture(name).exists() {
                index.save(&fixture(name)).unwrap();
            }
        };
        write("flat_v1.dnt", &fixture_flat());
        write("ivfpq_v1.dnt", &fixture_ivf());
        write("fastscan_v1.dnt", &fixture_fastscan());
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
fn v1_fastscan_fixture_loads_and_answers() {
    let bytes = std::fs::read(fixture("fastscan_v1.dnt")).unwrap();
    let loaded = IvfPqIndex::load(&fixture("fastscan_v1.dnt")).expect("format v1 fastscan fixture must load");
    assert_eq!(loaded.kind(), IndexKind::FastScan);
    assert_eq!(loaded.codes(), PqCodes::FastScan4);
    assert_eq!(loaded.len(), 299);
    assert!(loaded.config().opq);
    assert_eq!(loaded.config().m, 3);
    assert!(
        loaded.config().residual_codes,
        "files from before the flag hold residual codes"
    );
    assert!(!loaded.contains(7));
    let data = synth(300, 12, 6, 2026);
    // Every stored vector finds itself after exact re-ranking.
    let res = loaded
        .search_with(&data[12 * 10..12 * 30], 1, IvfSearchParams { nprobe: 4, rerank: 300 })
        .unwrap();
    for (i, hits) in res.iter().enumerate() {
        assert_eq!(hits[0].id, 10 + i as u64);
    }
    // Same answers as a freshly built index from the same data and seed,
    // also on the 4-bit scores alone.
    same_answers(&loaded, &fixture_fastscan(), &synth(8, 12, 6, 9));
    assert!(matches!(AnyIndex::from_bytes(&bytes).unwrap(), AnyIndex::IvfPq(i) if i.codes() == PqCodes::FastScan4));
    assert_eq!(loaded.to_bytes(), bytes);
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
    // The fast-scan default (codes of the vectors, not of residuals)
    // survives the file: same flag, same answers, same bytes.
    let fs = small_ivf(12, IvfPqConfig::fastscan(4, 3), 2027);
    assert!(!fs.config().residual_codes);
    let back = IvfPqIndex::from_bytes(&fs.to_bytes()).unwrap();
    assert!(!back.config().residual_codes);
    assert_eq!(back.to_bytes(), fs.to_bytes());
    same_answers(&back, &fs, &synth(10, 12, 6, 4));
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
    // Every truncation point, of both code widths.
    for bytes in [&good, &fixture_fastscan().to_bytes()] {
        for cut in (0..bytes.len()).step_by(97).chain([bytes.len() - 1, 7, 31, 32]) {
            let r = AnyIndex::from_bytes(&bytes[..cut]);
            assert!(r.is_err(), "truncated at {cut} loaded");
        }
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
    // An 8-bit payload under the fast-scan kind: its 256-entry codebooks do
    // not have the 16-entry length.
    let mut as_fastscan = ivf.clone();
    as_fastscan[12..16].copy_from_slice(&4u32.to_le_bytes());
    assert!(corrupt(&reseal(&as_fastscan, p)));
    // Fast-scan payload: dim @0, nlist @4, m @8; list codes must be whole blocks.
    let fs = fixture_fastscan().to_bytes();
    let p = &fs[HEADER_LEN..];
    let mut x = p.to_vec();
    x[8..12].copy_from_slice(&5u32.to_le_bytes()); // m does not divide 12
    assert!(corrupt(&reseal(&fs, &x)));
    let mut x = p.to_vec();
    x[8..12].copy_from_slice(&6u32.to_le_bytes()); // divides, but codebooks are for 3
    assert!(corrupt(&reseal(&fs, &x)));
    // Shorten a list's codes by one block: the length prefix no longer
    // matches its rows. The list is found by its rows' length prefix
    // followed, 4·rows bytes later, by its codes' length prefix.
    let sizes = fixture_fastscan().list_sizes();
    let rows = *sizes.iter().find(|&&s| s > 32).expect("a list longer than one block");
    let rows_len = (rows as u64).to_le_bytes();
    let codes_len = (dentate::fastscan::packed_len(rows, 3) as u64).to_le_bytes();
    let at = (0..p.len() - 8)
        .find(|&i| p[i..i + 8] == rows_len && p.get(i + 8 + 4 * rows..i + 16 + 4 * rows) == Some(&codes_len[..]))
        .expect("list found");
    let mut x = p.to_vec();
    let off = at + 8 + 4 * rows;
    let one_block = dentate::fastscan::block_bytes(3);
    x[off..off + 8].copy_from_slice(&((dentate::fastscan::packed_len(rows, 3) - one_block) as u64).to_le_bytes());
    assert!(corrupt(&reseal(&fs, &x)));
    // Wrong kind for the typed loaders.
    assert!(matches!(FlatIndex::from_bytes(&fs), Err(Error::WrongKind { .. })));
}
