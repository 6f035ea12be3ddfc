//! Token counting with a real byte-pair-encoding tokenizer: OpenAI's
//! `o200k_base` (the GPT-4o vocabulary HEMA counts its 3,500-token budget
//! in).
//!
//! With the `bundled-vocabulary` feature (on by default) the vocabulary is
//! the copy inside the `tiktoken-rs` crate, so counting needs no download.
//! Without it (the browser's memory package, where the 3.6 MB table would
//! triple the download) the vocabulary is handed over at run time with
//! [`load_vocabulary`] — the same `o200k_base.tiktoken` file, checked
//! byte for byte — and until then [`count`] and [`truncate`] use
//! [`estimate`], an approximation from the tokenizer's own pre-splitting
//! rule; [`exact`] says which is in force.

use std::sync::OnceLock;
use tiktoken_rs::CoreBPE;

/// CRC-32 of the `o200k_base.tiktoken` file [`load_vocabulary`] accepts.
pub const VOCABULARY_CRC32: u32 = 0x2b33_bbc2;
/// Its length in bytes.
pub const VOCABULARY_BYTES: usize = 3_613_922;

static LOADED: OnceLock<CoreBPE> = OnceLock::new();

fn bpe() -> Option<&'static CoreBPE> {
    #[cfg(feature = "bundled-vocabulary")]
    {
        Some(tiktoken_rs::o200k_base_singleton())
    }
    #[cfg(not(feature = "bundled-vocabulary"))]
    {
        LOADED.get()
    }
}

/// The pre-splitting rule of `o200k_base` (words with their leading
/// space or mark, digit groups of up to three, punctuation runs, spaces).
fn pieces() -> &'static fancy_regex::Regex {
    static RE: OnceLock<fancy_regex::Regex> = OnceLock::new();
    RE.get_or_init(|| fancy_regex::Regex::new(tiktoken_rs::O200K_BASE_PAT_STR).expect("the o200k pattern compiles"))
}

/// Installs the `o200k_base` vocabulary from the bytes of its
/// `o200k_base.tiktoken` file (as shipped with `tiktoken` and
/// `tiktoken-rs`; lines of base64 token and rank). Any other bytes are
/// refused, so counts are exactly the bundled ones. Loading twice is
/// harmless; with the vocabulary bundled this only checks the bytes.
pub fn load_vocabulary(bytes: &[u8]) -> Result<(), String> {
    if bytes.len() != VOCABULARY_BYTES || crc32fast::hash(bytes) != VOCABULARY_CRC32 {
        return Err(format!(
            "not the o200k_base.tiktoken vocabulary ({} bytes, CRC-32 {:08x}; want {VOCABULARY_BYTES} bytes, {VOCABULARY_CRC32:08x})",
            bytes.len(),
            crc32fast::hash(bytes)
        ));
    }
    if LOADED.get().is_some() || cfg!(feature = "bundled-vocabulary") {
        return Ok(());
    }
    use base64::Engine as _;
    let text = std::str::from_utf8(bytes).map_err(|e| format!("vocabulary is not text: {e}"))?;
    let mut encoder = rustc_hash::FxHashMap::default();
    for (i, line) in text.lines().enumerate() {
        let bad = || format!("vocabulary line {} is not `base64 rank`", i + 1);
        let (token, rank) = line.split_once(' ').ok_or_else(bad)?;
        let token = base64::engine::general_purpose::STANDARD
            .decode(token)
            .map_err(|_| bad())?;
        encoder.insert(token, rank.parse().map_err(|_| bad())?);
    }
    let mut special = rustc_hash::FxHashMap::default();
    special.insert(tiktoken_rs::ENDOFTEXT.to_string(), 199_999);
    special.insert(tiktoken_rs::ENDOFPROMPT.to_string(), 200_018);
    let bpe = CoreBPE::new(encoder, special, tiktoken_rs::O200K_BASE_PAT_STR).map_err(|e| e.to_string())?;
    let _ = LOADED.set(bpe);
    Ok(())
}

/// True when [`count`] and [`truncate`] are exact (the vocabulary is
/// bundled or loaded), false while they estimate.
pub fn exact() -> bool {
    bpe().is_some()
}

/// Tokens in `text` under `o200k_base` (special tokens counted as text);
/// [`estimate`] while the vocabulary is absent.
pub fn count(text: &str) -> usize {
    match bpe() {
        Some(b) => b.encode_ordinary(text).len(),
        None => estimate(text),
    }
}

/// Tokens of one pre-split piece, estimated: a word's letters in runs of
/// eight, a digit group or a run of spaces one, punctuation in runs of
/// eight. (Calibrated against the exact counts of 20,000 Rust-doc
/// sentences and two LoCoMo conversations: total 1.03× the exact count;
/// per text 0.91–1.18× for 90 % of them, so a budget is rarely overrun.)
fn piece_estimate(piece: &str) -> usize {
    let letters = piece.chars().filter(|c| c.is_alphabetic()).count();
    if letters > 0 {
        return letters.div_ceil(8);
    }
    let visible = piece.chars().filter(|c| !c.is_whitespace()).count();
    if visible == 0 || piece.chars().all(|c| c.is_numeric() || c == ' ') {
        1
    } else {
        visible.div_ceil(8).max(1)
    }
}

/// An estimate of [`count`] without the vocabulary: `o200k_base`'s own
/// pre-splitting, then a per-piece estimate (letters in runs of eight).
pub fn estimate(text: &str) -> usize {
    pieces()
        .find_iter(text)
        .filter_map(Result::ok)
        .map(|m| piece_estimate(m.as_str()))
        .sum()
}

/// The longest prefix of `text` of whole pieces with at most `max`
/// estimated tokens ([`truncate`] without the vocabulary).
fn estimated_prefix(text: &str, max: usize) -> &str {
    let mut used = 0;
    let mut end = 0;
    for m in pieces().find_iter(text).filter_map(Result::ok) {
        used += piece_estimate(m.as_str());
        if used > max {
            break;
        }
        end = m.end();
    }
    // Pieces of a prefix may split differently at its end: shorten until
    // its own estimate fits.
    let mut prefix = &text[..end];
    while estimate(prefix) > max {
        let cut = prefix.char_indices().last().map_or(0, |(i, _)| i);
        prefix = &prefix[..cut];
    }
    prefix
}

/// The longest prefix of `text` with at most `max` tokens, cut at a token
/// boundary that is also a character boundary (while estimating: at a
/// piece boundary, with at most `max` estimated tokens).
pub fn truncate(text: &str, max: usize) -> String {
    let Some(bpe) = bpe() else {
        return estimated_prefix(text, max).to_string();
    };
    let toks = bpe.encode_ordinary(text);
    if toks.len() <= max {
        return text.to_string();
    }
    // A token may end inside a multi-byte character: back off until the
    // prefix decodes.
    let mut n = max;
    while n > 0 {
        if let Ok(s) = bpe.decode(&toks[..n]) {
            return s;
        }
        n -= 1;
    }
    String::new()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[cfg(feature = "bundled-vocabulary")]
    fn counts_match_tiktoken() {
        // Reference counts from OpenAI's Python tiktoken 0.14 (o200k_base).
        assert_eq!(count("hello world"), 2);
        assert_eq!(count(""), 0);
        assert_eq!(count("tiktoken is great!"), 6);
        assert_eq!(count("Caroline went to the LGBTQ support group on 7 May 2023."), 16);
        assert_eq!(count("héllo ünïcödé 🎉 日本語のテキスト"), 14);
    }

    #[test]
    fn truncation_respects_the_limit_and_characters() {
        // Exact (bundled) or estimated (without the vocabulary): the same rules.
        let t = "Caroline went to the LGBTQ support group on 7 May 2023 — héllo ünïcödé 🎉 text.";
        for max in 0..count(t) + 2 {
            let p = truncate(t, max);
            assert!(count(&p) <= max, "{max}: {p}");
            assert!(t.starts_with(&p));
        }
        assert_eq!(truncate(t, 1000), t);
    }

    #[test]
    fn the_estimate_is_near_the_exact_count_and_truncates_within_it() {
        let texts = [
            "Caroline went to the LGBTQ support group on 7 May 2023.",
            "Melanie: I painted a lake sunrise last year, it's one of my favourites!",
            "Returns an iterator over the elements of the slice, in order, skipping 12345 of them.",
            "héllo ünïcödé 🎉 日本語のテキスト",
        ];
        let (mut e, mut x) = (0, 0);
        for t in texts {
            e += estimate(t);
            x += count(t);
            for max in 0..estimate(t) + 2 {
                // The estimating path of `truncate`, whatever is bundled.
                let p = estimated_prefix(t, max);
                assert!(estimate(p) <= max, "{max}: {t}");
                assert!(t.starts_with(p));
            }
            assert_eq!(estimated_prefix(t, estimate(t)), t);
        }
        assert!(
            e as f64 >= 0.8 * x as f64 && e as f64 <= 1.3 * x as f64,
            "estimate {e} vs exact {x}"
        );
        assert_eq!(estimate(""), 0);
    }

    #[test]
    fn only_the_o200k_file_loads() {
        assert!(load_vocabulary(b"aGVsbG8= 0\n").unwrap_err().contains("o200k_base"));
        let mut fake = vec![b'a'; VOCABULARY_BYTES];
        fake[0] = b'b';
        assert!(load_vocabulary(&fake).unwrap_err().contains("CRC-32"));
    }
}
