//! A lexical index: an inverted index with BM25 scoring over the same
//! caller `u64` ids as the vector indexes, for hybrid retrieval.
//!
//! Text is split into Unicode words (`unicode-segmentation`), lower-cased,
//! stripped of English stop words and stemmed with the Snowball English
//! stemmer (`rust-stemmers`); numbers are kept as they are. Scores are
//! Okapi BM25 with Lucene's idf, `ln(1 + (N − df + 0.5) / (df + 0.5))`,
//! over live documents only, summed over the query's distinct terms:
//!
//! `score(d) = Σ idf(t) · tf·(k1 + 1) / (tf + k1·(1 − b + b·|d| / avgdl))`
//!
//! Adds with an existing id replace it; removes tombstone the row (never
//! returned again), `compact` drops tombstoned postings; files use the
//! project's checksummed format (kind `lexical`).

use crate::error::{Error, Result};
use crate::io::{IndexKind, Reader, Writer, open, read_file, write_atomic};
use crate::rows::keep_mapped;
use crate::topk::{Cand, Hit, TopK};
use crate::vector::Bitset;
use rust_stemmers::{Algorithm, Stemmer};
use std::collections::HashMap;
use std::path::Path;
use std::sync::OnceLock;
use unicode_segmentation::UnicodeSegmentation;

/// English stop words (the list of the Snowball project's English stemmer,
/// which pairs with the stemmer used here).
pub const ENGLISH_STOP_WORDS: &[&str] = &[
    "i",
    "me",
    "my",
    "myself",
    "we",
    "our",
    "ours",
    "ourselves",
    "you",
    "your",
    "yours",
    "yourself",
    "yourselves",
    "he",
    "him",
    "his",
    "himself",
    "she",
    "her",
    "hers",
    "herself",
    "it",
    "its",
    "itself",
    "they",
    "them",
    "their",
    "theirs",
    "themselves",
    "what",
    "which",
    "who",
    "whom",
    "this",
    "that",
    "these",
    "those",
    "am",
    "is",
    "are",
    "was",
    "were",
    "be",
    "been",
    "being",
    "have",
    "has",
    "had",
    "having",
    "do",
    "does",
    "did",
    "doing",
    "would",
    "should",
    "could",
    "ought",
    "i'm",
    "you're",
    "he's",
    "she's",
    "it's",
    "we're",
    "they're",
    "i've",
    "you've",
    "we've",
    "they've",
    "i'd",
    "you'd",
    "he'd",
    "she'd",
    "we'd",
    "they'd",
    "i'll",
    "you'll",
    "he'll",
    "she'll",
    "we'll",
    "they'll",
    "isn't",
    "aren't",
    "wasn't",
    "weren't",
    "hasn't",
    "haven't",
    "hadn't",
    "doesn't",
    "don't",
    "didn't",
    "won't",
    "wouldn't",
    "shan't",
    "shouldn't",
    "can't",
    "cannot",
    "couldn't",
    "mustn't",
    "let's",
    "that's",
    "who's",
    "what's",
    "here's",
    "there's",
    "when's",
    "where's",
    "why's",
    "how's",
    "a",
    "an",
    "the",
    "and",
    "but",
    "if",
    "or",
    "because",
    "as",
    "until",
    "while",
    "of",
    "at",
    "by",
    "for",
    "with",
    "about",
    "against",
    "between",
    "into",
    "through",
    "during",
    "before",
    "after",
    "above",
    "below",
    "to",
    "from",
    "up",
    "down",
    "in",
    "out",
    "on",
    "off",
    "over",
    "under",
    "again",
    "further",
    "then",
    "once",
    "here",
    "there",
    "when",
    "where",
    "why",
    "how",
    "all",
    "any",
    "both",
    "each",
    "few",
    "more",
    "most",
    "other",
    "some",
    "such",
    "no",
    "nor",
    "not",
    "only",
    "own",
    "same",
    "so",
    "than",
    "too",
    "very",
];

/// The analysis chain: words → lower case → no stop words → stems.
pub struct Analyzer {
    stemmer: Stemmer,
}

impl std::fmt::Debug for Analyzer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Analyzer(english)")
    }
}

impl Default for Analyzer {
    fn default() -> Self {
        Analyzer {
            stemmer: Stemmer::create(Algorithm::English),
        }
    }
}

impl Analyzer {
    /// The terms of `text`, in order (repeats kept).
    pub fn terms(&self, text: &str) -> Vec<String> {
        text.unicode_words()
            .map(|w| w.to_lowercase().replace('\u{2019}', "'"))
            .filter(|w| !ENGLISH_STOP_WORDS.contains(&w.as_str()))
            .map(|w| {
                let w = w.strip_suffix("'s").unwrap_or(&w).to_string();
                self.stemmer.stem(&w).into_owned()
            })
            .filter(|t| !t.is_empty())
            .collect()
    }
}

/// BM25 parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Bm25Params {
    /// Term-frequency saturation (default 1.2).
    pub k1: f32,
    /// Length normalisation, 0–1 (default 0.75).
    pub b: f32,
}

impl Default for Bm25Params {
    fn default() -> Self {
        Bm25Params { k1: 1.2, b: 0.75 }
    }
}

impl Bm25Params {
    fn check(&self) -> Result<()> {
        if !(self.k1.is_finite() && self.k1 >= 0.0) {
            return Err(Error::param("k1", "must be finite and non-negative"));
        }
        if !(self.b.is_finite() && (0.0..=1.0).contains(&self.b)) {
            return Err(Error::param("b", "must be between 0 and 1"));
        }
        Ok(())
    }
}

/// Pseudo-relevance feedback for [`LexicalIndex::search_expanded`]: the
/// query is run once, the `docs` best documents are taken as relevant,
/// and the `terms` terms that weigh most in them (each term's share of a
/// document's length times its idf, summed over those documents; query
/// terms excluded) are added to the query with weights up to `weight`
/// (the best one's, the others in proportion to their score), for a
/// second, final run. It finds documents that share words with the
/// question's best matches but not with the question (the second hop of
/// a multi-hop question).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Feedback {
    /// Documents of the first run the terms are taken from (≥ 1).
    pub docs: usize,
    /// Terms added to the query (≥ 1).
    pub terms: usize,
    /// Weight of the best added term, a query term weighing 1 (0–10).
    pub weight: f32,
}

impl Feedback {
    /// Most documents or terms a feedback run takes (a larger number is a
    /// mistake, not a request).
    pub const MAX: usize = 1024;

    /// Checks the settings.
    pub fn check(&self) -> Result<()> {
        if !(1..=Self::MAX).contains(&self.docs) {
            return Err(Error::param("docs", format!("must be 1..={}", Self::MAX)));
        }
        if !(1..=Self::MAX).contains(&self.terms) {
            return Err(Error::param("terms", format!("must be 1..={}", Self::MAX)));
        }
        if !(self.weight.is_finite() && self.weight > 0.0 && self.weight <= 10.0) {
            return Err(Error::param("weight", "must be in (0, 10]"));
        }
        Ok(())
    }
}

/// Each row's `(term id, frequency)` pairs, rows in order (the postings
/// turned around), for feedback: built on the first feedback search,
/// extended by `add`, dropped by `compact`.
#[derive(Debug, Default)]
struct Forward {
    /// Row `r`'s pairs are `pairs[start[r]..start[r + 1]]`.
    start: Vec<usize>,
    pairs: Vec<(u32, u32)>,
}

impl Forward {
    fn of(postings: &[Vec<(u32, u32)>], rows: usize) -> Forward {
        let mut count = vec![0usize; rows + 1];
        for list in postings {
            for &(row, _) in list {
                count[row as usize + 1] += 1;
            }
        }
        for r in 0..rows {
            count[r + 1] += count[r];
        }
        let mut fill = count.clone();
        let mut pairs = vec![(0u32, 0u32); count[rows]];
        for (tid, list) in postings.iter().enumerate() {
            for &(row, tf) in list {
                pairs[fill[row as usize]] = (tid as u32, tf);
                fill[row as usize] += 1;
            }
        }
        Forward { start: count, pairs }
    }

    fn row(&self, row: usize) -> &[(u32, u32)] {
        match (self.start.get(row), self.start.get(row + 1)) {
            (Some(&a), Some(&b)) => &self.pairs[a..b],
            _ => &[],
        }
    }
}

/// An inverted index with BM25 scoring. `Send + Sync`; wrap it in an
/// `RwLock` for concurrent writers, as with the vector indexes.
#[derive(Debug)]
pub struct LexicalIndex {
    params: Bm25Params,
    analyzer: Analyzer,
    vocab: HashMap<String, u32>,
    /// Per term: `(row, term frequency)`, rows ascending.
    postings: Vec<Vec<(u32, u32)>>,
    /// Per row: document length in terms.
    doc_len: Vec<u32>,
    ids: Vec<u64>,
    alive: Bitset,
    pos: HashMap<u64, u32>,
    /// Sum of live documents' lengths.
    live_terms: u64,
    /// The rows' terms, for feedback (see [`Forward`]).
    forward: OnceLock<Forward>,
}

impl Default for LexicalIndex {
    fn default() -> Self {
        LexicalIndex {
            params: Bm25Params::default(),
            analyzer: Analyzer::default(),
            vocab: HashMap::new(),
            postings: Vec::new(),
            doc_len: Vec::new(),
            ids: Vec::new(),
            alive: Bitset::new(),
            pos: HashMap::new(),
            live_terms: 0,
            forward: OnceLock::new(),
        }
    }
}

impl LexicalIndex {
    /// An empty index with default parameters (k1 = 1.2, b = 0.75).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty index with `params`.
    pub fn with_params(params: Bm25Params) -> Result<Self> {
        params.check()?;
        Ok(LexicalIndex {
            params,
            ..Self::default()
        })
    }

    /// The parameters.
    pub fn params(&self) -> Bm25Params {
        self.params
    }

    /// Live documents.
    pub fn len(&self) -> usize {
        self.pos.len()
    }

    /// True when no document is live.
    pub fn is_empty(&self) -> bool {
        self.pos.is_empty()
    }

    /// True when `id` is live.
    pub fn contains(&self, id: u64) -> bool {
        self.pos.contains_key(&id)
    }

    /// Removed rows still held (until [`LexicalIndex::compact`]).
    pub fn tombstones(&self) -> usize {
        self.ids.len() - self.pos.len()
    }

    /// Distinct terms seen.
    pub fn vocabulary_len(&self) -> usize {
        self.vocab.len()
    }

    /// The analysis chain used for documents and queries.
    pub fn analyzer(&self) -> &Analyzer {
        &self.analyzer
    }

    /// Adds documents under caller ids (an existing id is replaced).
    pub fn add(&mut self, ids: &[u64], texts: &[&str]) -> Result<()> {
        if ids.len() != texts.len() {
            return Err(Error::IdCountMismatch {
                ids: ids.len(),
                vectors: texts.len(),
            });
        }
        let mut seen = std::collections::HashSet::with_capacity(ids.len());
        if let Some(&dup) = ids.iter().find(|id| !seen.insert(**id)) {
            return Err(Error::DuplicateId(dup));
        }
        for (&id, text) in ids.iter().zip(texts) {
            self.remove_one(id);
            let row = u32::try_from(self.ids.len()).map_err(|_| Error::param("ids", "more than 2^32 rows"))?;
            let terms = self.analyzer.terms(text);
            let mut tf: HashMap<&str, u32> = HashMap::new();
            for t in &terms {
                *tf.entry(t.as_str()).or_insert(0) += 1;
            }
            let mut tf: Vec<(&str, u32)> = tf.into_iter().collect();
            tf.sort_unstable();
            let mut forward = self.forward.get_mut();
            for (t, n) in tf {
                let next = self.postings.len() as u32;
                let tid = *self.vocab.entry(t.to_string()).or_insert(next);
                if tid == next {
                    self.postings.push(Vec::new());
                }
                self.postings[tid as usize].push((row, n));
                if let Some(f) = forward.as_deref_mut() {
                    f.pairs.push((tid, n));
                }
            }
            if let Some(f) = forward {
                f.start.push(f.pairs.len());
            }
            let len = terms.len() as u32;
            self.doc_len.push(len);
            self.live_terms += u64::from(len);
            self.ids.push(id);
            self.alive.push(true);
            self.pos.insert(id, row);
        }
        Ok(())
    }

    fn remove_one(&mut self, id: u64) -> bool {
        match self.pos.remove(&id) {
            Some(row) => {
                self.alive.set(row as usize, false);
                self.live_terms -= u64::from(self.doc_len[row as usize]);
                true
            }
            None => false,
        }
    }

    /// Removes ids (tombstones); returns how many were present.
    pub fn remove(&mut self, ids: &[u64]) -> usize {
        ids.iter().filter(|&&id| self.remove_one(id)).count()
    }

    /// Drops tombstoned rows from every posting list.
    pub fn compact(&mut self) {
        let mut map = vec![u32::MAX; self.ids.len()];
        let mut next = 0u32;
        for (row, m) in map.iter_mut().enumerate() {
            if self.alive.get(row) {
                *m = next;
                next += 1;
            }
        }
        for list in &mut self.postings {
            list.retain(|(r, _)| map[*r as usize] != u32::MAX);
            for p in list.iter_mut() {
                p.0 = map[p.0 as usize];
            }
        }
        self.doc_len = keep_mapped(&self.doc_len, &map);
        self.ids = keep_mapped(&self.ids, &map);
        self.alive = Bitset::new();
        for _ in 0..self.ids.len() {
            self.alive.push(true);
        }
        self.pos = self.ids.iter().enumerate().map(|(r, &id)| (id, r as u32)).collect();
        self.forward = OnceLock::new();
    }

    /// The `k` best live documents for `query` by BM25, best first, ties by
    /// smaller id. A query with no indexed term, or an empty index, gives no
    /// hits; `k = 0` is an error; any larger `k` is clamped to the documents
    /// the query matched (the `k` rule of [`crate::Index::search`]).
    pub fn search(&self, query: &str, k: usize) -> Result<Vec<Hit>> {
        if k == 0 {
            return Err(Error::ZeroK);
        }
        let weighted: Vec<(u32, f32)> = self.query_terms(query).into_iter().map(|t| (t, 1.0)).collect();
        Ok(self.top(&weighted, k))
    }

    /// [`LexicalIndex::search`] with pseudo-relevance feedback
    /// ([`Feedback`]): the query, expanded with the terms that weigh most
    /// in its first run's best documents, run again. The same `k` rule and
    /// ties; a query with no indexed term gives no hits.
    pub fn search_expanded(&self, query: &str, k: usize, feedback: Feedback) -> Result<Vec<Hit>> {
        if k == 0 {
            return Err(Error::ZeroK);
        }
        feedback.check()?;
        let mut weighted: Vec<(u32, f32)> = self.query_terms(query).into_iter().map(|t| (t, 1.0)).collect();
        let mut query: Vec<u32> = weighted.iter().map(|&(t, _)| t).collect();
        query.sort_unstable();
        let first = self.top(&weighted, feedback.docs);
        if first.is_empty() {
            return Ok(first);
        }
        let forward = self.forward.get_or_init(|| Forward::of(&self.postings, self.ids.len()));
        // Each candidate term's share of the first run's best documents
        // (its frequency over the length, summed); its weight is that
        // times its idf, computed once per term.
        let mut share: HashMap<u32, f64> = HashMap::new();
        for hit in &first {
            let Some(&row) = self.pos.get(&hit.id) else { continue };
            let dl = f64::from(self.doc_len[row as usize].max(1));
            for &(tid, tf) in forward.row(row as usize) {
                if query.binary_search(&tid).is_err() {
                    *share.entry(tid).or_insert(0.0) += f64::from(tf) / dl;
                }
            }
        }
        let mut ranked: Vec<(u32, f64)> = share
            .into_iter()
            .map(|(tid, s)| (tid, s * self.idf(tid)))
            .filter(|&(_, w)| w > 0.0)
            .collect();
        // Heaviest first; ties by the smaller term id, so runs agree.
        ranked.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0)));
        ranked.truncate(feedback.terms);
        if let Some(&(_, best)) = ranked.first() {
            weighted.extend(
                ranked
                    .iter()
                    .map(|&(tid, w)| (tid, (f64::from(feedback.weight) * w / best) as f32))
                    .filter(|&(_, w)| w > 0.0),
            );
        }
        Ok(self.top(&weighted, k))
    }

    /// The query's indexed terms: analysed, deduplicated, as term ids in
    /// the order of their text (the order scores are summed in).
    fn query_terms(&self, query: &str) -> Vec<u32> {
        let mut terms = self.analyzer.terms(query);
        terms.sort_unstable();
        terms.dedup();
        terms.iter().filter_map(|t| self.vocab.get(t).copied()).collect()
    }

    /// Live documents containing term `tid`.
    fn doc_freq(&self, tid: u32) -> usize {
        let list = &self.postings[tid as usize];
        if self.tombstones() == 0 {
            list.len()
        } else {
            list.iter().filter(|(r, _)| self.alive.get(*r as usize)).count()
        }
    }

    /// BM25's idf of term `tid` over the live documents (0 for a term no
    /// live document holds).
    fn idf(&self, tid: u32) -> f64 {
        let (n, df) = (self.len() as f64, self.doc_freq(tid) as f64);
        if df == 0.0 {
            return 0.0;
        }
        (1.0 + (n - df + 0.5) / (df + 0.5)).ln()
    }

    /// The `k` best live documents for term ids weighted by positive
    /// weights, best first, ties by smaller id; no more than matched.
    fn top(&self, terms: &[(u32, f32)], k: usize) -> Vec<Hit> {
        let n = self.len();
        if n == 0 || k == 0 {
            return Vec::new();
        }
        let avgdl = (self.live_terms as f64 / n as f64).max(1e-9);
        let (k1, b) = (f64::from(self.params.k1), f64::from(self.params.b));
        // tf·(k1 + 1) / (tf + k1·(1 − b) + k1·b/avgdl · dl), per posting.
        let (c1, c2) = ((k1 * (1.0 - b)) as f32, (k1 * b / avgdl) as f32);
        let clean = self.tombstones() == 0;
        let live = |row: u32| clean || self.alive.get(row as usize);
        // Dense accumulator over rows (zeroed: 4 bytes a row), with the
        // rows touched so the top-k pass visits only those.
        let mut acc = vec![0.0f32; self.ids.len()];
        let mut touched: Vec<u32> = Vec::new();
        for &(tid, weight) in terms {
            let idf = self.idf(tid);
            if idf == 0.0 || weight.is_nan() || weight <= 0.0 {
                continue;
            }
            let w = (idf * (k1 + 1.0) * f64::from(weight)) as f32;
            for &(row, tf) in &self.postings[tid as usize] {
                if !live(row) {
                    continue;
                }
                let tf = tf as f32;
                let dl = self.doc_len[row as usize] as f32;
                let a = &mut acc[row as usize];
                if *a == 0.0 {
                    touched.push(row);
                }
                // Every contribution is > 0, so 0.0 means untouched.
                *a += w * tf / (tf + c1 + c2 * dl);
            }
        }
        // The `k` rule: no more hits than documents matched.
        let mut top = TopK::new(k.min(touched.len()));
        for row in touched {
            top.push(Cand {
                score: acc[row as usize],
                id: self.ids[row as usize],
                row,
            });
        }
        top.into_sorted().into_iter().map(|c| c.hit()).collect()
    }

    /// Heap bytes (approximate).
    pub fn memory_bytes(&self) -> usize {
        let post: usize = self.postings.iter().map(|p| p.capacity() * 8 + 24).sum();
        let vocab: usize = self.vocab.keys().map(|k| k.len() + 40).sum();
        let forward = self
            .forward
            .get()
            .map_or(0, |f| f.start.capacity() * 8 + f.pairs.capacity() * 8);
        post + vocab + self.doc_len.capacity() * 4 + self.ids.capacity() * 8 + self.pos.len() * 16 + forward
    }

    /// Serialises to a file image (vocabulary in term-id order).
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut w = Writer::default();
        w.u32(self.params.k1.to_bits());
        w.u32(self.params.b.to_bits());
        let mut terms: Vec<(&String, &u32)> = self.vocab.iter().collect();
        terms.sort_by_key(|(_, id)| **id);
        w.u64(terms.len() as u64);
        for ((t, _), list) in terms.iter().zip(&self.postings) {
            w.bytes(t.as_bytes());
            let rows: Vec<u32> = list.iter().map(|p| p.0).collect();
            let tfs: Vec<u32> = list.iter().map(|p| p.1).collect();
            w.u32s(&rows);
            w.u32s(&tfs);
        }
        w.u32s(&self.doc_len);
        w.u64s(&self.ids);
        w.u64s(self.alive.words());
        w.finish(IndexKind::Lexical)
    }

    /// Parses a file image, checking every row reference.
    pub fn from_bytes(bytes: &[u8]) -> Result<Self> {
        let (kind, mut r) = open(bytes)?;
        if kind != IndexKind::Lexical {
            return Err(Error::WrongKind {
                found: kind.name().into(),
                expected: "lexical".into(),
            });
        }
        let idx = Self::read(&mut r)?;
        r.finish()?;
        Ok(idx)
    }

    fn read(r: &mut Reader<'_>) -> Result<Self> {
        let params = Bm25Params {
            k1: f32::from_bits(r.u32()?),
            b: f32::from_bits(r.u32()?),
        };
        params
            .check()
            .map_err(|e| Error::Corrupt(format!("BM25 parameters: {e}")))?;
        let nterms = usize::try_from(r.u64()?).map_err(|_| Error::Corrupt("term count overflows".into()))?;
        // Each term needs at least its three 8-byte length prefixes (text,
        // rows, frequencies): bound the count by the bytes left. Nothing is
        // reserved from the count; the maps grow with the terms actually read.
        if nterms > r.remaining() / 24 {
            return Err(Error::Corrupt(format!(
                "{nterms} terms do not fit in the {} bytes left",
                r.remaining()
            )));
        }
        let mut vocab = HashMap::new();
        let mut lists = Vec::new();
        for tid in 0..nterms {
            let t = String::from_utf8(r.bytes()?).map_err(|_| Error::Corrupt("term is not UTF-8".into()))?;
            let rows = r.u32s()?;
            let tfs = r.u32s()?;
            if rows.len() != tfs.len() {
                return Err(Error::Corrupt(format!(
                    "term {tid}: rows and frequencies differ in length"
                )));
            }
            if vocab.insert(t, tid as u32).is_some() {
                return Err(Error::Corrupt(format!("term {tid} appears twice")));
            }
            lists.push(rows.into_iter().zip(tfs).collect::<Vec<_>>());
        }
        let doc_len = r.u32s()?;
        let ids = r.u64s()?;
        let n = ids.len();
        let alive = Bitset::from_words(r.u64s()?, n)
            .ok_or_else(|| Error::Corrupt("alive bitset length does not match row count".into()))?;
        if doc_len.len() != n {
            return Err(Error::Corrupt(format!("{} lengths for {n} rows", doc_len.len())));
        }
        for (tid, list) in lists.iter().enumerate() {
            if list.iter().any(|(row, _)| *row as usize >= n) || list.windows(2).any(|w| w[0].0 >= w[1].0) {
                return Err(Error::Corrupt(format!("term {tid}: row out of range or out of order")));
            }
        }
        let mut pos = HashMap::new();
        let mut live_terms = 0u64;
        for (row, &id) in ids.iter().enumerate() {
            if alive.get(row) {
                if pos.insert(id, row as u32).is_some() {
                    return Err(Error::Corrupt(format!("id {id} is live twice")));
                }
                live_terms += u64::from(doc_len[row]);
            }
        }
        Ok(LexicalIndex {
            params,
            analyzer: Analyzer::default(),
            vocab,
            postings: lists,
            doc_len,
            ids,
            alive,
            pos,
            live_terms,
            forward: OnceLock::new(),
        })
    }

    /// Writes the index to `path` crash-safely.
    pub fn save(&self, path: &Path) -> Result<()> {
        write_atomic(path, &self.to_bytes())
    }

    /// Loads an index saved with [`LexicalIndex::save`].
    pub fn load(path: &Path) -> Result<Self> {
        Self::from_bytes(&read_file(path)?)
    }
}
