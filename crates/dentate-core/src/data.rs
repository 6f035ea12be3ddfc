//! Vector data files (`.fvecs`, `.ivecs`, `.npy`), a synthetic clustered
//! generator, and recall.

use crate::error::{Error, Result};
use crate::rng::Rng;
use crate::topk::Hit;
use std::path::Path;

/// A row-major matrix read from a file.
#[derive(Debug, Clone, PartialEq)]
pub struct Matrix<T> {
    /// Row-major values.
    pub data: Vec<T>,
    /// Number of rows.
    pub rows: usize,
    /// Number of columns.
    pub cols: usize,
}

fn perr(path: &Path, reason: impl Into<String>) -> Error {
    Error::Parse {
        path: path.display().to_string(),
        reason: reason.into(),
    }
}

fn read_vecs(path: &Path, bytes: &[u8]) -> Result<(Vec<[u8; 4]>, usize, usize)> {
    if bytes.is_empty() {
        return Err(perr(path, "empty file"));
    }
    if bytes.len() < 4 {
        return Err(perr(path, "truncated record header"));
    }
    let d = i32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    if d <= 0 || d > 1 << 20 {
        return Err(perr(path, format!("implausible dimension {d}")));
    }
    let d = d as usize;
    let rec = 4 + 4 * d;
    if !bytes.len().is_multiple_of(rec) {
        return Err(perr(
            path,
            format!("size {} is not a multiple of the {rec}-byte record", bytes.len()),
        ));
    }
    let n = bytes.len() / rec;
    let mut out = Vec::with_capacity(n * d);
    for (i, r) in bytes.chunks_exact(rec).enumerate() {
        let di = i32::from_le_bytes([r[0], r[1], r[2], r[3]]);
        if di as usize != d {
            return Err(perr(path, format!("record {i} has dimension {di}, expected {d}")));
        }
        out.extend(r[4..].chunks_exact(4).map(|c| [c[0], c[1], c[2], c[3]]));
    }
    Ok((out, n, d))
}

/// Reads a float32 matrix from `.fvecs` or `.npy` (by extension).
pub fn read_f32(path: &Path) -> Result<Matrix<f32>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    match ext(path).as_str() {
        "fvecs" => {
            let (raw, rows, cols) = read_vecs(path, &bytes)?;
            Ok(Matrix {
                data: raw.into_iter().map(f32::from_le_bytes).collect(),
                rows,
                cols,
            })
        }
        "npy" => {
            let (dtype, rows, cols, body) = parse_npy(path, &bytes)?;
            if dtype != "<f4" {
                return Err(perr(path, format!("dtype {dtype}; expected float32 (<f4)")));
            }
            Ok(Matrix {
                data: body
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
                    .collect(),
                rows,
                cols,
            })
        }
        e => Err(perr(path, format!("unknown extension `{e}` (expected .fvecs or .npy)"))),
    }
}

/// Reads an integer matrix (ground truth) from `.ivecs` or `.npy` (int32/int64).
pub fn read_i64(path: &Path) -> Result<Matrix<i64>> {
    let bytes = std::fs::read(path).map_err(|e| Error::io(path, e))?;
    match ext(path).as_str() {
        "ivecs" => {
            let (raw, rows, cols) = read_vecs(path, &bytes)?;
            Ok(Matrix {
                data: raw.into_iter().map(|b| i32::from_le_bytes(b) as i64).collect(),
                rows,
                cols,
            })
        }
        "npy" => {
            let (dtype, rows, cols, body) = parse_npy(path, &bytes)?;
            let data = match dtype.as_str() {
                "<i4" => body
                    .chunks_exact(4)
                    .map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as i64)
                    .collect(),
                "<i8" => body
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
                    .collect(),
                _ => {
                    return Err(perr(path, format!("dtype {dtype}; expected int32 or int64")));
                }
            };
            Ok(Matrix { data, rows, cols })
        }
        e => Err(perr(path, format!("unknown extension `{e}` (expected .ivecs or .npy)"))),
    }
}

fn ext(path: &Path) -> String {
    path.extension()
        .map(|e| e.to_string_lossy().to_lowercase())
        .unwrap_or_default()
}

/// Parses a version 1/2/3 `.npy` header: (dtype, rows, cols, body).
fn parse_npy<'a>(path: &Path, b: &'a [u8]) -> Result<(String, usize, usize, &'a [u8])> {
    if b.len() < 10 || &b[..6] != b"\x93NUMPY" {
        return Err(perr(path, "not an .npy file"));
    }
    let (hlen, start): (usize, usize) = match b[6] {
        1 => (u16::from_le_bytes([b[8], b[9]]) as usize, 10),
        2 | 3 if b.len() >= 12 => (u32::from_le_bytes([b[8], b[9], b[10], b[11]]) as usize, 12),
        v => return Err(perr(path, format!("unsupported .npy version {v}"))),
    };
    let end = start
        .checked_add(hlen)
        .filter(|&e| e <= b.len())
        .ok_or_else(|| perr(path, "truncated header"))?;
    let header = std::str::from_utf8(&b[start..end]).map_err(|_| perr(path, "header is not UTF-8"))?;
    let field = |key: &str| -> Option<&str> {
        let i = header.find(&format!("'{key}'"))?;
        let rest = &header[i + key.len() + 2..];
        Some(rest[rest.find(':')? + 1..].trim_start())
    };
    let descr = field("descr")
        .and_then(|s| s.strip_prefix('\''))
        .and_then(|s| s.split('\'').next())
        .ok_or_else(|| perr(path, "no descr"))?;
    if field("fortran_order").is_some_and(|s| s.starts_with("True")) {
        return Err(perr(
            path,
            "Fortran-ordered arrays are not supported; save with C order",
        ));
    }
    let shape = field("shape")
        .and_then(|s| s.strip_prefix('('))
        .and_then(|s| s.split(')').next())
        .ok_or_else(|| perr(path, "no shape"))?;
    let dims: Vec<usize> = shape
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            s.parse::<usize>()
                .map_err(|_| perr(path, format!("bad shape `{shape}`")))
        })
        .collect::<Result<_>>()?;
    if dims.len() != 2 {
        return Err(perr(path, format!("expected a 2-D array, shape is ({shape})")));
    }
    let elem = match descr {
        "<f4" | "<i4" => 4,
        "<i8" => 8,
        d => return Err(perr(path, format!("unsupported dtype {d}"))),
    };
    let body = &b[end..];
    let want = dims[0]
        .checked_mul(dims[1])
        .and_then(|x| x.checked_mul(elem))
        .ok_or_else(|| perr(path, "shape overflows"))?;
    if body.len() != want {
        return Err(perr(path, format!("body has {} bytes, shape needs {want}", body.len())));
    }
    Ok((descr.to_string(), dims[0], dims[1], body))
}

/// Writes `rows × cols` floats as `.fvecs`.
pub fn write_fvecs(path: &Path, data: &[f32], cols: usize) -> Result<()> {
    write_vecs(path, data, cols, |x| x.to_le_bytes())
}

/// Writes `rows × cols` integers as `.ivecs`.
pub fn write_ivecs(path: &Path, data: &[i32], cols: usize) -> Result<()> {
    write_vecs(path, data, cols, |x| x.to_le_bytes())
}

/// The `*vecs` layout: each row is its length (i32) and then its values.
fn write_vecs<T: Copy>(path: &Path, data: &[T], cols: usize, le: impl Fn(T) -> [u8; 4]) -> Result<()> {
    if cols == 0 {
        return Err(Error::param("cols", "must be at least 1"));
    }
    let mut out = Vec::with_capacity(data.len() * 4 + data.len() / cols * 4);
    for r in data.chunks_exact(cols) {
        out.extend_from_slice(&(cols as i32).to_le_bytes());
        r.iter().for_each(|&x| out.extend_from_slice(&le(x)));
    }
    crate::io::write_atomic(path, &out)
}

/// Settings of [`clustered`].
#[derive(Debug, Clone, Copy)]
pub struct SynthConfig {
    /// Number of vectors.
    pub n: usize,
    /// Dimension.
    pub dim: usize,
    /// Number of Gaussian clusters.
    pub clusters: usize,
    /// Noise standard deviation relative to the unit-norm centres, per
    /// component, scaled by `1/sqrt(dim)`.
    pub spread: f32,
    /// Seed.
    pub seed: u64,
}

impl SynthConfig {
    /// The checks [`clustered`] makes: `dim ≥ 1`, a finite `spread`, and `n × dim` and `clusters × dim` floats that fit the
    /// address space (whether they fit in memory is asked of the allocator).
    pub fn check(&self) -> Result<()> {
        if self.dim == 0 {
            return Err(Error::param("dim", "must be at least 1"));
        }
        if !self.spread.is_finite() {
            return Err(Error::param(
                "spread",
                format!("{} is not a finite number", self.spread),
            ));
        }
        floats(self.n, self.dim, "n")?;
        floats(self.clusters.max(1), self.dim, "clusters")?;
        Ok(())
    }
}

/// `rows × dim` as a float count that fits the address space.
fn floats(rows: usize, dim: usize, name: &'static str) -> Result<usize> {
    rows.checked_mul(dim)
        .filter(|&f| f <= isize::MAX as usize / std::mem::size_of::<f32>())
        .ok_or_else(|| Error::param(name, format!("{rows} × {dim} floats do not fit in memory")))
}

/// A zeroed buffer of `len` floats, or [`Error::Capacity`] when the
/// allocator refuses it (instead of aborting the process).
fn zeroed(len: usize) -> Result<Vec<f32>> {
    let mut v = Vec::new();
    v.try_reserve_exact(len)
        .map_err(|_| Error::Capacity(format!("cannot allocate {len} floats")))?;
    v.resize(len, 0.0);
    Ok(v)
}

/// Unit vectors drawn around `clusters` random unit centres: data with the
/// structure real embeddings have (dense neighbourhoods, uneven clusters).
/// Cluster sizes follow a mild power law so lists are imbalanced as in
/// real data. Same seed, same data, on every platform.
///
/// Errors: a configuration [`SynthConfig::check`] refuses
/// ([`Error::InvalidParameter`]), or more floats than the allocator gives
/// ([`Error::Capacity`]).
pub fn clustered(cfg: &SynthConfig) -> Result<Vec<f32>> {
    cfg.check()?;
    let mut rng = Rng::new(cfg.seed);
    let d = cfg.dim;
    let k = cfg.clusters.max(1);
    let mut centres = zeroed(floats(k, d, "clusters")?)?;
    for c in centres.chunks_exact_mut(d) {
        c.iter_mut().for_each(|x| *x = rng.normal());
        let n = c.iter().map(|x| x * x).sum::<f32>().sqrt().max(f32::MIN_POSITIVE);
        c.iter_mut().for_each(|x| *x /= n);
    }
    // Zipf-like weights 1/(i+1)^0.5.
    let weights: Vec<f64> = (0..k).map(|i| 1.0 / ((i + 1) as f64).sqrt()).collect();
    let total: f64 = weights.iter().sum();
    let cdf: Vec<f64> = weights
        .iter()
        .scan(0.0, |s, w| {
            *s += w / total;
            Some(*s)
        })
        .collect();
    let sigma = cfg.spread / (d as f32).sqrt();
    let mut out = zeroed(floats(cfg.n, d, "n")?)?;
    for v in out.chunks_exact_mut(d) {
        let u = rng.next_f64();
        let c = cdf.partition_point(|&x| x < u).min(k - 1);
        let centre = &centres[c * d..(c + 1) * d];
        for (x, m) in v.iter_mut().zip(centre) {
            *x = m + sigma * rng.normal();
        }
        let n = v.iter().map(|x| x * x).sum::<f32>().sqrt().max(f32::MIN_POSITIVE);
        v.iter_mut().for_each(|x| *x /= n);
    }
    Ok(out)
}

/// Mean recall@k: the fraction of each query's true top-`k` ids (`truth`
/// rows, at least `k` wide) found in its returned top-`k`.
pub fn recall_at_k(results: &[Vec<Hit>], truth: &[Vec<u64>], k: usize) -> f64 {
    if results.is_empty() || k == 0 {
        return 0.0;
    }
    let mut total = 0.0;
    for (res, gt) in results.iter().zip(truth) {
        let want: std::collections::HashSet<u64> = gt.iter().take(k).copied().collect();
        let found = res.iter().take(k).filter(|h| want.contains(&h.id)).count();
        total += found as f64 / k.min(want.len()).max(1) as f64;
    }
    total / results.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fvecs_ivecs_roundtrip_and_errors() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("a.fvecs");
        let data: Vec<f32> = (0..12).map(|i| i as f32 * 0.5).collect();
        write_fvecs(&p, &data, 4).unwrap();
        let m = read_f32(&p).unwrap();
        assert_eq!((m.rows, m.cols), (3, 4));
        assert_eq!(m.data, data);
        let g = dir.path().join("g.ivecs");
        write_ivecs(&g, &[1, 2, 3, 4], 2).unwrap();
        let m = read_i64(&g).unwrap();
        assert_eq!((m.rows, m.cols, m.data), (2, 2, vec![1, 2, 3, 4]));
        // Truncated record.
        let bytes = std::fs::read(&p).unwrap();
        std::fs::write(&p, &bytes[..bytes.len() - 3]).unwrap();
        assert!(matches!(read_f32(&p), Err(Error::Parse { .. })));
        std::fs::write(&p, b"").unwrap();
        assert!(matches!(read_f32(&p), Err(Error::Parse { .. })));
        assert!(matches!(
            read_f32(&dir.path().join("missing.fvecs")),
            Err(Error::Io { .. })
        ));
    }

    #[test]
    fn npy_float_and_int() {
        let dir = tempfile::tempdir().unwrap();
        let mk = |descr: &str, shape: &str, body: &[u8]| {
            let mut h = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}");
            while (10 + h.len() + 1) % 64 != 0 {
                h.push(' ');
            }
            h.push('\n');
            let mut b = b"\x93NUMPY\x01\x00".to_vec();
            b.extend_from_slice(&(h.len() as u16).to_le_bytes());
            b.extend_from_slice(h.as_bytes());
            b.extend_from_slice(body);
            b
        };
        let body: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0, 5.0, 6.0]
            .iter()
            .flat_map(|x| x.to_le_bytes())
            .collect();
        let p = dir.path().join("x.npy");
        std::fs::write(&p, mk("<f4", "(2, 3)", &body)).unwrap();
        let m = read_f32(&p).unwrap();
        assert_eq!((m.rows, m.cols), (2, 3));
        assert_eq!(m.data[5], 6.0);
        let ib: Vec<u8> = [7i64, 8].iter().flat_map(|x| x.to_le_bytes()).collect();
        let q = dir.path().join("g.npy");
        std::fs::write(&q, mk("<i8", "(1, 2)", &ib)).unwrap();
        assert_eq!(read_i64(&q).unwrap().data, vec![7, 8]);
        std::fs::write(&p, mk("<f4", "(3,)", &body[..12])).unwrap();
        assert!(read_f32(&p).is_err());
        std::fs::write(&p, mk("<f4", "(2, 4)", &body)).unwrap();
        assert!(read_f32(&p).is_err());
    }

    #[test]
    fn clustered_is_deterministic_unit_norm() {
        let cfg = SynthConfig {
            n: 100,
            dim: 16,
            clusters: 5,
            spread: 0.5,
            seed: 3,
        };
        let a = clustered(&cfg).unwrap();
        assert_eq!(a, clustered(&cfg).unwrap());
        for v in a.chunks_exact(16) {
            let n: f32 = v.iter().map(|x| x * x).sum();
            assert!((n - 1.0).abs() < 1e-5);
        }
    }

    #[test]
    fn clustered_refuses_what_cannot_exist() {
        let ok = SynthConfig {
            n: 10,
            dim: 4,
            clusters: 2,
            spread: 0.5,
            seed: 1,
        };
        let param = |cfg: SynthConfig| match clustered(&cfg) {
            Err(Error::InvalidParameter { name, .. }) => name,
            other => panic!("{other:?}"),
        };
        assert_eq!(param(SynthConfig { dim: 0, ..ok }), "dim");
        assert_eq!(param(SynthConfig { n: usize::MAX, ..ok }), "n");
        assert_eq!(
            param(SynthConfig {
                n: usize::MAX / 4 + 1,
                ..ok
            }),
            "n"
        );
        assert_eq!(
            param(SynthConfig {
                clusters: usize::MAX,
                ..ok
            }),
            "clusters"
        );
        assert_eq!(param(SynthConfig { spread: f32::NAN, ..ok }), "spread");
        // Representable but far beyond any memory: the allocator says no,
        // and that is an error, not an abort.
        let huge = SynthConfig {
            n: 1 << 44,
            dim: 1 << 10,
            ..ok
        };
        assert!(
            matches!(clustered(&huge), Err(Error::Capacity(_))),
            "{:?}",
            clustered(&huge).map(|v| v.len())
        );
        // Zero vectors or zero clusters are fine (no vectors; one cluster).
        assert!(clustered(&SynthConfig { n: 0, ..ok }).unwrap().is_empty());
        assert_eq!(clustered(&SynthConfig { clusters: 0, ..ok }).unwrap().len(), 40);
    }
}
