//! The word splitter of the memory layer: where the evaluation metrics,
//! HEMA's summaries and the pipelines draw word boundaries ([`word_runs`]).
//!
//! Each consumer then normalises apostrophes its own way: [`words`] drops
//! a possessive and splits at apostrophes (`Bob's` → `bob`, as answers are
//! compared); HEMA's extractive summarizer ([`crate::summarize`]) keeps a
//! straight apostrophe inside its word (`don't` is one stop word there)
//! and splits at a curly one, exactly as it always has, so its summaries —
//! and every figure measured on them — are unchanged.
//!
//! The hashing embedder (`dentate-embed`) and BM25 (`dentate-core`'s
//! analyzer) keep analyzers of their own: they live in crates below this
//! one, and their tokens are part of their file and vector formats
//! (changing them would change stored vectors and indexes), where these
//! words are only ever compared within one run.

use std::collections::BTreeSet;

/// The raw tokens of `text`: maximal runs of Unicode letters, digits and
/// apostrophes (`'` and `’`), as written. Every word of the memory layer
/// comes from here.
pub fn word_runs(text: &str) -> impl Iterator<Item = &str> + '_ {
    text.split(|c: char| !c.is_alphanumeric() && c != '\'' && c != '’')
        .filter(|w| !w.is_empty())
}

/// Lower-cased alphanumeric words of `text` ([`word_runs`] split at their
/// apostrophes), with a possessive `'s` dropped.
pub fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    word_runs(text)
        .flat_map(|w| {
            let w = w.strip_suffix("'s").or_else(|| w.strip_suffix("’s")).unwrap_or(w);
            w.split(['\'', '’'])
        })
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
}

/// The content words of a gold answer: its [`words`] minus English stop
/// words ([`dentate_core::lexical::ENGLISH_STOP_WORDS`]); numbers and month
/// names are always kept.
pub fn content_words(answer: &str) -> BTreeSet<String> {
    words(answer)
        .filter(|w| {
            crate::time::is_month(w)
                || w.chars().all(|c| c.is_numeric())
                || !dentate_core::lexical::ENGLISH_STOP_WORDS.contains(&w.as_str())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn set(ws: &[&str]) -> BTreeSet<String> {
        ws.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn content_words_drop_stop_words_and_keep_numbers_and_months() {
        assert_eq!(
            content_words("The Berlin marathon, in May 2024!"),
            set(&["berlin", "marathon", "may", "2024"])
        );
        assert_eq!(content_words("Caroline's mom"), set(&["caroline", "mom"]));
        assert_eq!(content_words("It was the one for her"), set(&["one"]));
        assert_eq!(content_words("it was for her"), set(&[]));
        assert_eq!(content_words("7 May, 2023"), set(&["7", "may", "2023"]));
        assert_eq!(content_words("Café Ünïcode"), set(&["café", "ünïcode"]));
    }
}
