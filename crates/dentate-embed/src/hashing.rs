//! The zero-download default embedder: signed feature hashing of words,
//! word bigrams and character n-grams, with sublinear term weighting.
//!
//! What it captures: shared words (after lower-casing), shared word pairs
//! (some word order), shared sub-word pieces (inflections, typos, compounds:
//! "running"/"runs", "colour"/"color"). What it cannot: meaning without
//! shared surface form. "car" and "automobile", "happy" and "glad", a
//! question and its paraphrase with different words all look unrelated;
//! negation ("not happy") barely moves a vector. A neural sentence encoder
//! (MiniLM) handles those; this one needs no model files, no network and no
//! warm-up, is deterministic on every platform, and embeds tens of thousands
//! of sentences per second per core.

use crate::{EmbedError, Embedder, Result, normalize_rows};

/// Feature-hashing embedder. See the module documentation.
#[derive(Debug, Clone)]
pub struct HashingEmbedder {
    dim: usize,
    seed: u64,
}

/// Weights of the feature kinds (chosen so that a shared word counts more
/// than a shared bigram, and a shared bigram more than a shared n-gram).
const W_WORD: f32 = 1.0;
const W_BIGRAM: f32 = 0.7;
const W_CHAR: f32 = 0.35;
/// Character n-gram sizes over `<word>` (with boundary marks).
const NGRAMS: [usize; 2] = [3, 4];

impl HashingEmbedder {
    /// An embedder producing `dim`-dimensional vectors (384 matches MiniLM,
    /// so indexes can switch embedders without changing dimension).
    pub fn new(dim: usize) -> Result<Self> {
        if dim < 2 {
            return Err(EmbedError::Config {
                name: "dim",
                reason: format!("{dim} is too small; use at least 2 (384 is typical)"),
            });
        }
        if dim > crate::MAX_DIM {
            return Err(EmbedError::Config {
                name: "dim",
                reason: format!("{dim} is too large; use at most {} (384 is typical)", crate::MAX_DIM),
            });
        }
        Ok(HashingEmbedder {
            dim,
            seed: 0x5eed_d3a7_a7e0,
        })
    }

    /// The same features hashed with another seed (an independent projection).
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// Lower-cased alphanumeric words of `text` (Unicode-aware).
    pub fn words(text: &str) -> Vec<String> {
        text.split(|c: char| !c.is_alphanumeric())
            .filter(|w| !w.is_empty())
            .map(|w| w.to_lowercase())
            .collect()
    }

    fn embed_one(&self, text: &str, out: &mut [f32]) {
        let words = Self::words(text);
        // Accumulate term counts per hashed feature, then weight sublinearly.
        let mut feats: Vec<(u64, f32)> = Vec::with_capacity(words.len() * 8);
        for w in &words {
            feats.push((self.hash(1, w.as_bytes(), b""), W_WORD));
            let marked: Vec<char> = std::iter::once('<')
                .chain(w.chars())
                .chain(std::iter::once('>'))
                .collect();
            for n in NGRAMS {
                for g in marked.windows(n) {
                    let s: String = g.iter().collect();
                    feats.push((self.hash(2, s.as_bytes(), b""), W_CHAR));
                }
            }
        }
        for pair in words.windows(2) {
            feats.push((self.hash(3, pair[0].as_bytes(), pair[1].as_bytes()), W_BIGRAM));
        }
        if feats.is_empty() {
            // No words at all (empty or punctuation only): a fixed direction,
            // so the output is still a unit vector and identical for all such texts.
            feats.push((self.hash(4, b"<empty>", b""), 1.0));
        }
        feats.sort_unstable_by_key(|f| f.0);
        let mut i = 0;
        while i < feats.len() {
            let (h, w) = feats[i];
            let mut count = 0u32;
            while i < feats.len() && feats[i].0 == h {
                count += 1;
                i += 1;
            }
            // Sublinear term frequency: 1 + ln(tf).
            let weight = w * (1.0 + (count as f32).ln());
            let idx = (h % self.dim as u64) as usize;
            let sign = if (h >> 63) == 1 { -1.0 } else { 1.0 };
            out[idx] += sign * weight;
        }
    }

    /// FNV-1a over (kind, a, 0xff, b) then a SplitMix64 finaliser, seeded.
    fn hash(&self, kind: u8, a: &[u8], b: &[u8]) -> u64 {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325 ^ self.seed;
        for &byte in std::iter::once(&kind).chain(a).chain(std::iter::once(&0xff)).chain(b) {
            h ^= byte as u64;
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        h ^ (h >> 31)
    }
}

impl Embedder for HashingEmbedder {
    fn name(&self) -> String {
        format!("hash-{}", self.dim)
    }
    fn dim(&self) -> usize {
        self.dim
    }
    fn embed(&self, texts: &[&str]) -> Result<Vec<f32>> {
        let mut out = vec![0f32; texts.len() * self.dim];
        for (t, o) in texts.iter().zip(out.chunks_exact_mut(self.dim)) {
            self.embed_one(t, o);
        }
        let zero = normalize_rows(&mut out, self.dim);
        // Signed features can cancel exactly (astronomically rare); fall back
        // to the empty-text direction so every row is a unit vector.
        for i in zero {
            let row = &mut out[i * self.dim..(i + 1) * self.dim];
            row.iter_mut().for_each(|x| *x = 0.0);
            self.embed_one("", row);
            normalize_rows(row, self.dim);
        }
        Ok(out)
    }
}
