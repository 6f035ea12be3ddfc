//! `HashingEmbedder`: text to unit vectors with no model.

use crate::convert::{err, strings_from_js};
use dentate_embed::Embedder;
use wasm_bindgen::prelude::*;

/// The zero-download embedder: signed feature hashing of words, word
/// bigrams and character 3/4-grams. Deterministic; finds shared words and
/// spellings, not synonyms.
#[wasm_bindgen]
#[derive(Debug, Clone)]
pub struct HashingEmbedder {
    inner: dentate_embed::HashingEmbedder,
}

#[wasm_bindgen]
impl HashingEmbedder {
    /// An embedder of `dim` dimensions (default 384).
    #[wasm_bindgen(constructor)]
    pub fn new(dim: Option<usize>) -> Result<HashingEmbedder, JsValue> {
        Ok(HashingEmbedder {
            inner: dentate_embed::HashingEmbedder::new(dim.unwrap_or(384)).map_err(err)?,
        })
    }

    /// Embeds an array of strings: `texts.length × dim` floats, each row of
    /// unit length.
    pub fn embed(&self, texts: JsValue) -> Result<Vec<f32>, JsValue> {
        let texts = strings_from_js(&texts, "texts")?;
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        self.inner.embed(&refs).map_err(err)
    }

    /// Output dimension.
    #[wasm_bindgen(getter)]
    pub fn dim(&self) -> usize {
        self.inner.dim()
    }
}
