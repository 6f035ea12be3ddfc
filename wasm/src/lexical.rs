//! `LexicalIndex` (BM25) and `hybridSearch`.

use crate::convert::{err, ids_from_js, strings_from_js};
use crate::index::{SearchResults, VectorIndex};
use dentate_core::{Bm25Params, Fusion};
use wasm_bindgen::prelude::*;

/// A BM25 inverted index over the same `u64` ids as a `VectorIndex`
/// (Unicode words, lower case, English stop words removed, Snowball stems).
#[wasm_bindgen]
#[derive(Debug, Default)]
pub struct LexicalIndex {
    inner: dentate_core::LexicalIndex,
}

#[wasm_bindgen]
impl LexicalIndex {
    /// An empty index with BM25 `k1` (default 1.2) and `b` (default 0.75).
    #[wasm_bindgen(constructor)]
    pub fn new(k1: Option<f32>, b: Option<f32>) -> Result<LexicalIndex, JsValue> {
        let d = Bm25Params::default();
        let params = Bm25Params {
            k1: k1.unwrap_or(d.k1),
            b: b.unwrap_or(d.b),
        };
        Ok(LexicalIndex {
            inner: dentate_core::LexicalIndex::with_params(params).map_err(err)?,
        })
    }

    /// Adds documents (`texts[i]` under `ids[i]`); an id already present is
    /// replaced.
    pub fn add(&mut self, ids: JsValue, texts: JsValue) -> Result<(), JsValue> {
        let ids = ids_from_js(&ids)?;
        let texts = strings_from_js(&texts, "texts")?;
        let refs: Vec<&str> = texts.iter().map(String::as_str).collect();
        self.inner.add(&ids, &refs).map_err(err)
    }

    /// Removes ids; returns how many were present.
    pub fn remove(&mut self, ids: JsValue) -> Result<usize, JsValue> {
        Ok(self.inner.remove(&ids_from_js(&ids)?))
    }

    /// Rewrites the posting lists without removed documents.
    pub fn compact(&mut self) {
        self.inner.compact();
    }

    /// The `k` best documents for `text` (one query row; `k` larger than
    /// the index is clamped to its size).
    pub fn search(&self, text: &str, k: usize) -> Result<SearchResults, JsValue> {
        let hits = self.inner.search(text, k).map_err(err)?;
        SearchResults::from_hits(&[hits], k, self.inner.len())
    }

    /// Live documents.
    #[wasm_bindgen(getter)]
    pub fn size(&self) -> usize {
        self.inner.len()
    }

    /// The index in Dentate's file format (kind `lexical`).
    pub fn save(&self) -> Vec<u8> {
        self.inner.to_bytes()
    }

    /// Loads bytes from `save()` or from the native library; corrupt bytes
    /// throw.
    pub fn load(bytes: &[u8]) -> Result<LexicalIndex, JsValue> {
        Ok(LexicalIndex {
            inner: dentate_core::LexicalIndex::from_bytes(bytes).map_err(err)?,
        })
    }
}

/// Dense search of `vector` on `index` and BM25 search of `text` on
/// `lexical`, fused into the best `k` (one query row). `fusion` is `hybrid`
/// (the default: 0.5 dense + 0.5 BM25, min–max normalised), `rrf`, `rrf:C`
/// or `weighted:W`.
#[wasm_bindgen(js_name = hybridSearch)]
pub fn hybrid_search(
    index: &VectorIndex,
    lexical: &LexicalIndex,
    vector: &[f32],
    text: &str,
    k: usize,
    fusion: Option<String>,
) -> Result<SearchResults, JsValue> {
    let fusion = match fusion {
        Some(f) => Fusion::parse(&f).map_err(err)?,
        None => Fusion::default(),
    };
    let hits =
        dentate_core::hybrid_search(index.as_index(), &lexical.inner, vector, text, k, fusion, None).map_err(err)?;
    // Fused hits come from either index: at most the two sizes together.
    let live = index.as_index().len().saturating_add(lexical.inner.len());
    SearchResults::from_hits(&[hits], k, live)
}
