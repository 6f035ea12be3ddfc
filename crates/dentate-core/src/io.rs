//! The Dentate file format: a checksummed header and payload, written
//! crash-safely (temporary file, fsync, rename, fsync of the directory).
//!
//! Layout (all integers little-endian):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | magic `DENTATE\0` |
//! | 8 | 4 | format version (currently 1) |
//! | 12 | 4 | index kind (1 = flat, 2 = IVF-PQ, 3 = lexical, 4 = IVF-PQ fast-scan) |
//! | 16 | 8 | payload length in bytes |
//! | 24 | 4 | CRC-32 of the payload |
//! | 28 | 4 | CRC-32 of bytes 0..28 |
//! | 32 | … | payload: the index's fields, each array length-prefixed |
//!
//! The reader checks the magic, both checksums and the exact length before
//! parsing, and every array length against the bytes that remain, so a
//! corrupt or truncated file is an [`Error`], never a panic or a huge
//! allocation.

use crate::error::{Error, Result};
use half::f16;
use std::io::Write;
use std::path::Path;

/// Magic bytes at the start of every Dentate file.
pub const MAGIC: &[u8; 8] = b"DENTATE\0";
/// The newest format version this build writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Header size in bytes.
pub const HEADER_LEN: usize = 32;

/// The kind of index a file holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexKind {
    /// [`crate::FlatIndex`].
    Flat,
    /// [`crate::IvfPqIndex`].
    IvfPq,
    /// [`crate::LexicalIndex`] (BM25).
    Lexical,
    /// [`crate::IvfPqIndex`] with 4-bit fast-scan codes
    /// ([`crate::PqCodes::FastScan4`]): the IVF-PQ payload with packed blocks
    /// as list codes and `m × 16 × dsub` codebooks.
    FastScan,
}

impl IndexKind {
    fn code(self) -> u32 {
        match self {
            IndexKind::Flat => 1,
            IndexKind::IvfPq => 2,
            IndexKind::Lexical => 3,
            IndexKind::FastScan => 4,
        }
    }
    fn from_code(c: u32) -> Result<Self> {
        match c {
            1 => Ok(IndexKind::Flat),
            2 => Ok(IndexKind::IvfPq),
            3 => Ok(IndexKind::Lexical),
            4 => Ok(IndexKind::FastScan),
            _ => Err(Error::Corrupt(format!("unknown index kind {c}"))),
        }
    }
    /// Name as used by the CLI.
    pub fn name(self) -> &'static str {
        match self {
            IndexKind::Flat => "flat",
            IndexKind::IvfPq => "ivfpq",
            IndexKind::Lexical => "lexical",
            IndexKind::FastScan => "fastscan",
        }
    }
}

/// Serialises fields into a payload buffer, behind room for the header
/// (`Writer::finish` fills it in place: the image is built in one buffer).
#[derive(Debug)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Default for Writer {
    fn default() -> Self {
        Writer {
            buf: vec![0; HEADER_LEN],
        }
    }
}

/// Appends `v` to `buf` as little-endian `N`-byte words (resized once and
/// written in place, which the compiler vectorises).
fn put_words<T: Copy, const N: usize>(buf: &mut Vec<u8>, v: &[T], le: impl Fn(T) -> [u8; N]) {
    let start = buf.len();
    buf.resize(start + v.len() * N, 0);
    for (dst, &x) in buf[start..].chunks_exact_mut(N).zip(v) {
        dst.copy_from_slice(&le(x));
    }
}

impl Writer {
    pub(crate) fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub(crate) fn u32(&mut self, v: u32) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    pub(crate) fn u64(&mut self, v: u64) {
        self.buf.extend_from_slice(&v.to_le_bytes());
    }
    fn len_prefix(&mut self, n: usize) {
        self.u64(n as u64);
    }
    pub(crate) fn bytes(&mut self, v: &[u8]) {
        self.len_prefix(v.len());
        self.buf.extend_from_slice(v);
    }
    pub(crate) fn u32s(&mut self, v: &[u32]) {
        self.len_prefix(v.len());
        put_words(&mut self.buf, v, u32::to_le_bytes);
    }
    pub(crate) fn u64s(&mut self, v: &[u64]) {
        self.len_prefix(v.len());
        put_words(&mut self.buf, v, u64::to_le_bytes);
    }
    pub(crate) fn f32s(&mut self, v: &[f32]) {
        self.len_prefix(v.len());
        put_words(&mut self.buf, v, f32::to_le_bytes);
    }
    pub(crate) fn f16s(&mut self, v: &[f16]) {
        self.len_prefix(v.len());
        put_words(&mut self.buf, v, |x: f16| x.to_bits().to_le_bytes());
    }

    /// Header + payload as one buffer.
    pub(crate) fn finish(self, kind: IndexKind) -> Vec<u8> {
        let mut out = self.buf;
        let payload_len = (out.len() - HEADER_LEN) as u64;
        let crc = crc32fast::hash(&out[HEADER_LEN..]);
        let mut h = Vec::with_capacity(HEADER_LEN);
        h.extend_from_slice(MAGIC);
        h.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        h.extend_from_slice(&kind.code().to_le_bytes());
        h.extend_from_slice(&payload_len.to_le_bytes());
        h.extend_from_slice(&crc.to_le_bytes());
        let hcrc = crc32fast::hash(&h[..28]);
        h.extend_from_slice(&hcrc.to_le_bytes());
        out[..HEADER_LEN].copy_from_slice(&h);
        out
    }
}

/// Bounds-checked reader over a payload.
#[derive(Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8]> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| {
                Error::Corrupt(format!(
                    "{what}: needs {n} bytes at offset {}, payload has {}",
                    self.pos,
                    self.buf.len()
                ))
            })?;
        let s = &self.buf[self.pos..end];
        self.pos = end;
        Ok(s)
    }
    pub(crate) fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1, "u8")?[0])
    }
    pub(crate) fn u32(&mut self) -> Result<u32> {
        let b = self.take(4, "u32")?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
    pub(crate) fn u64(&mut self) -> Result<u64> {
        let b = self.take(8, "u64")?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
    /// Reads a length prefix and checks `len × elem` bytes remain.
    fn array(&mut self, elem: usize, what: &str) -> Result<&'a [u8]> {
        let n = self.u64()?;
        let bytes = usize::try_from(n)
            .ok()
            .and_then(|n| n.checked_mul(elem))
            .filter(|&b| b <= self.buf.len() - self.pos)
            .ok_or_else(|| {
                Error::Corrupt(format!(
                    "{what}: length {n} exceeds the {} bytes left",
                    self.buf.len() - self.pos
                ))
            })?;
        self.take(bytes, what)
    }
    pub(crate) fn bytes(&mut self) -> Result<Vec<u8>> {
        Ok(self.array(1, "bytes")?.to_vec())
    }
    pub(crate) fn u32s(&mut self) -> Result<Vec<u32>> {
        Ok(self
            .array(4, "u32 array")?
            .chunks_exact(4)
            .map(|c| u32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
    pub(crate) fn u64s(&mut self) -> Result<Vec<u64>> {
        Ok(self
            .array(8, "u64 array")?
            .chunks_exact(8)
            .map(|c| u64::from_le_bytes([c[0], c[1], c[2], c[3], c[4], c[5], c[6], c[7]]))
            .collect())
    }
    pub(crate) fn f32s(&mut self) -> Result<Vec<f32>> {
        Ok(self
            .array(4, "f32 array")?
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect())
    }
    pub(crate) fn f16s(&mut self) -> Result<Vec<f16>> {
        Ok(self
            .array(2, "f16 array")?
            .chunks_exact(2)
            .map(|c| f16::from_bits(u16::from_le_bytes([c[0], c[1]])))
            .collect())
    }
    /// Bytes not yet read.
    pub(crate) fn remaining(&self) -> usize {
        self.buf.len() - self.pos
    }
    /// Fails unless every byte was consumed.
    pub(crate) fn finish(&self) -> Result<()> {
        if self.pos != self.buf.len() {
            return Err(Error::Corrupt(format!(
                "{} trailing bytes after the last field",
                self.buf.len() - self.pos
            )));
        }
        Ok(())
    }
}

/// Validates a whole file image and returns its kind and a payload reader.
pub fn open(bytes: &[u8]) -> Result<(IndexKind, Reader<'_>)> {
    if bytes.len() < 8 {
        return Err(Error::Truncated(format!(
            "{} bytes, header needs {HEADER_LEN}",
            bytes.len()
        )));
    }
    if &bytes[..8] != MAGIC {
        return Err(Error::BadMagic);
    }
    if bytes.len() < HEADER_LEN {
        return Err(Error::Truncated(format!(
            "{} bytes, header needs {HEADER_LEN}",
            bytes.len()
        )));
    }
    let u32_at = |o: usize| u32::from_le_bytes([bytes[o], bytes[o + 1], bytes[o + 2], bytes[o + 3]]);
    let stored_h = u32_at(28);
    let computed_h = crc32fast::hash(&bytes[..28]);
    if stored_h != computed_h {
        return Err(Error::ChecksumMismatch {
            section: "header",
            stored: stored_h,
            computed: computed_h,
        });
    }
    let version = u32_at(8);
    if version == 0 || version > FORMAT_VERSION {
        return Err(Error::UnsupportedVersion {
            found: version,
            supported: FORMAT_VERSION,
        });
    }
    let kind = IndexKind::from_code(u32_at(12))?;
    let mut l = [0u8; 8];
    l.copy_from_slice(&bytes[16..24]);
    let len = u64::from_le_bytes(l);
    let have = (bytes.len() - HEADER_LEN) as u64;
    if have < len {
        return Err(Error::Truncated(format!("payload has {have} of {len} bytes")));
    }
    if have > len {
        return Err(Error::Corrupt(format!("{} bytes after the payload", have - len)));
    }
    let payload = &bytes[HEADER_LEN..];
    let stored = u32_at(24);
    let computed = crc32fast::hash(payload);
    if stored != computed {
        return Err(Error::ChecksumMismatch {
            section: "payload",
            stored,
            computed,
        });
    }
    Ok((kind, Reader { buf: payload, pos: 0 }))
}

/// Reads the kind of index stored in a file image without parsing it.
pub fn peek_kind(bytes: &[u8]) -> Result<IndexKind> {
    open(bytes).map(|(k, _)| k)
}

/// Writes `bytes` to `path` crash-safely: a temporary file in the same
/// directory, fsync, atomic rename over `path`, fsync of the directory. A
/// crash at any point leaves either the old file or the new one, whole.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> Result<()> {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => std::path::PathBuf::from("."),
    };
    let name = path
        .file_name()
        .ok_or_else(|| Error::param("path", format!("{} has no file name", path.display())))?;
    // wasm32-unknown-unknown has no process ids (asking panics) and no
    // file system (the calls below return errors).
    #[cfg(not(all(target_arch = "wasm32", target_os = "unknown")))]
    let pid = std::process::id();
    #[cfg(all(target_arch = "wasm32", target_os = "unknown"))]
    let pid = 0;
    let tmp = dir.join(format!(
        ".{}.tmp-{}-{}",
        name.to_string_lossy(),
        pid,
        TMP_SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    let result = (|| -> std::io::Result<()> {
        {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(bytes)?;
            f.sync_all()?;
        }
        std::fs::rename(&tmp, path)?;
        #[cfg(unix)]
        std::fs::File::open(&dir)?.sync_all()?;
        Ok(())
    })();
    if let Err(e) = result {
        let _ = std::fs::remove_file(&tmp);
        return Err(Error::io(path, e));
    }
    Ok(())
}

/// Numbers the temporary files of [`write_atomic`] within a process, so
/// that concurrent writers never share one.
static TMP_SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Reads a whole file.
pub fn read_file(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).map_err(|e| Error::io(path, e))
}
