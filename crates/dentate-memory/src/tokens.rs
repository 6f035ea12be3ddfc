//! Token counting with a real byte-pair-encoding tokenizer: OpenAI's
//! `o200k_base` (the GPT-4o vocabulary HEMA counts its 3,500-token budget
//! in), shipped inside the `tiktoken-rs` crate, so counting needs no
//! download.

use tiktoken_rs::CoreBPE;

fn bpe() -> &'static CoreBPE {
    tiktoken_rs::o200k_base_singleton()
}

/// Tokens in `text` under `o200k_base` (special tokens counted as text).
pub fn count(text: &str) -> usize {
    bpe().encode_ordinary(text).len()
}

/// The longest prefix of `text` with at most `max` tokens, cut at a token
/// boundary that is also a character boundary.
pub fn truncate(text: &str, max: usize) -> String {
    let toks = bpe().encode_ordinary(text);
    if toks.len() <= max {
        return text.to_string();
    }
    // A token may end inside a multi-byte character: back off until the
    // prefix decodes.
    let mut n = max;
    while n > 0 {
        if let Ok(s) = bpe().decode(&toks[..n]) {
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
        let t = "Caroline went to the LGBTQ support group on 7 May 2023 — héllo ünïcödé 🎉 text.";
        for max in 0..count(t) + 2 {
            let p = truncate(t, max);
            assert!(count(&p) <= max, "{max}: {p}");
            assert!(t.starts_with(&p));
        }
        assert_eq!(truncate(t, 1000), t);
    }
}
