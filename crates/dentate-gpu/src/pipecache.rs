//! The driver's pipeline cache kept on disk between runs (Vulkan), so a
//! process compiles each kernel variant once per driver rather than once
//! per run.
//!
//! Where: `DENTATE_GPU_PIPELINE_CACHE` names a directory (`off` disables
//! the cache); unset, `$XDG_CACHE_HOME/dentate` or `$HOME/.cache/dentate`.
//! One file per adapter (wgpu's `pipeline_cache_key`: backend, vendor,
//! device). The file is framed as `DNTPLC01`, the data's length and its
//! CRC-32, then wgpu's data: a file that is truncated, extended or
//! corrupted is ignored (and replaced at the next save), never handed to
//! the driver. Saving writes a temporary file and renames it over the old
//! one, after any call that compiled a new kernel.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

const MAGIC: &[u8; 8] = b"DNTPLC01";
/// Bytes of the frame before the driver's data.
pub(crate) const HEADER: usize = 8 + 8 + 4;
/// A larger file is not read (a pipeline cache of Dentate's kernels is a
/// few MiB at most).
const MAX_BYTES: u64 = 256 << 20;

/// The directory the cache lives in, by the environment; `None` when
/// disabled or when no cache directory is known.
pub(crate) fn directory() -> Option<PathBuf> {
    match std::env::var_os("DENTATE_GPU_PIPELINE_CACHE") {
        Some(v) if v.eq_ignore_ascii_case("off") || v.is_empty() => None,
        Some(v) => Some(PathBuf::from(v)),
        None => std::env::var_os("XDG_CACHE_HOME")
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
            .or_else(|| {
                std::env::var_os("HOME")
                    .filter(|v| !v.is_empty())
                    .map(|h| Path::new(&h).join(".cache"))
            })
            .map(|d| d.join("dentate")),
    }
}

/// A pipeline cache and the file it is saved to.
pub(crate) struct PipelineCacheFile {
    pub cache: wgpu::PipelineCache,
    path: PathBuf,
    /// Bytes of driver data the cache started from (0: none, or unusable).
    pub loaded: usize,
    /// New pipelines were compiled into it since the last save.
    dirty: AtomicBool,
}

/// The bytes framed in `file` when the frame is whole and its checksum
/// holds.
fn unframe(file: &[u8]) -> Option<&[u8]> {
    if file.len() < HEADER || &file[..8] != MAGIC {
        return None;
    }
    let len = u64::from_le_bytes(file[8..16].try_into().ok()?);
    let crc = u32::from_le_bytes(file[16..20].try_into().ok()?);
    let data = &file[HEADER..];
    (data.len() as u64 == len && crc32fast::hash(data) == crc).then_some(data)
}

fn frame(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + data.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(data.len() as u64).to_le_bytes());
    out.extend_from_slice(&crc32fast::hash(data).to_le_bytes());
    out.extend_from_slice(data);
    out
}

/// Reads `path` when it holds a whole, intact frame no larger than
/// [`MAX_BYTES`].
fn read(path: &Path) -> Option<Vec<u8>> {
    let len = std::fs::metadata(path).ok()?.len();
    if len > MAX_BYTES {
        log::warn!("pipeline cache {}: {len} bytes, ignored", path.display());
        return None;
    }
    let file = std::fs::read(path).ok()?;
    match unframe(&file) {
        Some(data) => Some(data.to_vec()),
        None => {
            log::warn!(
                "pipeline cache {}: not a whole Dentate cache file, ignored",
                path.display()
            );
            None
        }
    }
}

impl PipelineCacheFile {
    /// The cache of `adapter` in `dir`, seeded from its file when there is
    /// a usable one. `device` must have `Features::PIPELINE_CACHE`.
    pub fn open(device: &wgpu::Device, info: &wgpu::AdapterInfo, dir: &Path) -> Option<Self> {
        let key = wgpu::util::pipeline_cache_key(info)?;
        let path = dir.join(format!("{key}.bin"));
        let data = read(&path);
        // SAFETY: the data is what `PipelineCache::get_data` returned to a
        // previous `save` (the frame's length and CRC-32 hold, so it is
        // whole and unaltered by accident); wgpu checks its own header
        // (adapter, driver, wgpu version) and `fallback` makes a mismatch
        // start an empty cache instead of failing.
        let cache = unsafe {
            device.create_pipeline_cache(&wgpu::PipelineCacheDescriptor {
                label: Some("dentate kernels"),
                data: data.as_deref(),
                fallback: true,
            })
        };
        Some(PipelineCacheFile {
            cache,
            path,
            loaded: data.map_or(0, |d| d.len()),
            dirty: AtomicBool::new(false),
        })
    }

    /// The file the cache is saved to.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Marks a pipeline compiled into the cache.
    pub fn touch(&self) {
        self.dirty.store(true, Ordering::Relaxed);
    }

    /// Saves the cache when a pipeline was compiled since the last save;
    /// failures are logged (the cache is an optimisation). Returns the
    /// bytes written, 0 when there was nothing to save.
    pub fn save(&self) -> usize {
        if !self.dirty.swap(false, Ordering::Relaxed) {
            return 0;
        }
        let Some(data) = self.cache.get_data() else {
            return 0;
        };
        let framed = frame(&data);
        let written = std::fs::create_dir_all(self.path.parent().unwrap_or(Path::new(".")))
            .map_err(|e| e.to_string())
            .and_then(|()| dentate_core::io::write_atomic(&self.path, &framed).map_err(|e| e.to_string()));
        match written {
            Ok(()) => framed.len(),
            Err(e) => {
                log::warn!("pipeline cache {}: not saved: {e}", self.path.display());
                0
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_round_trip_and_damage_is_refused() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7) as u8).collect();
        let f = frame(&data);
        assert_eq!(unframe(&f), Some(&data[..]));
        assert_eq!(unframe(&f[..f.len() - 1]), None, "truncated");
        let mut longer = f.clone();
        longer.push(0);
        assert_eq!(unframe(&longer), None, "extended");
        let mut flipped = f.clone();
        flipped[HEADER + 500] ^= 1;
        assert_eq!(unframe(&flipped), None, "a flipped bit");
        let mut magic = f.clone();
        magic[0] = b'X';
        assert_eq!(unframe(&magic), None, "another format");
        assert_eq!(unframe(&f[..5]), None, "shorter than the header");
        assert_eq!(unframe(&frame(&[])), Some(&[][..]));
    }
}
