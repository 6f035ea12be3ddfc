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

/// A crude English stem for matching a question's words against a
/// sentence's: lower case, one of `ing`, `ed`, `es`, `s`, `ly` removed
/// when at least four letters remain.
pub fn stem(word: &str) -> String {
    let w = word.to_lowercase();
    for suffix in ["ing", "ed", "es", "s", "ly"] {
        if let Some(root) = w.strip_suffix(suffix)
            && root.chars().count() >= 4
        {
            return root.to_string();
        }
    }
    w
}

/// The stems ([`stem`]) of a question's content words ([`content_words`]):
/// what [`focused_snippet`] looks for.
pub fn focus_of(question: &str) -> BTreeSet<String> {
    content_words(question).iter().map(|w| stem(w)).collect()
}

/// The sentences of `text` that hold a word of `focus` (stems, see
/// [`focus_of`]), with what frames them kept: a leading `Label: ` (a
/// speaker, a key) and, of a trailing `(phrase = date; …)` resolution,
/// the parts whose phrase is in a kept sentence. Gaps show as ` … `.
/// `None` when `text` has fewer than two sentences, when no sentence or
/// every sentence matches: the whole text is then the snippet.
pub fn focused_snippet(text: &str, focus: &BTreeSet<String>) -> Option<String> {
    if focus.is_empty() {
        return None;
    }
    let (label, rest) = match text.split_once(": ") {
        Some((l, r)) if !l.is_empty() && l.chars().count() <= 40 && !l.contains(['\n', '.', '!', '?']) => {
            (&text[..l.len() + 2], r)
        }
        _ => ("", text),
    };
    // A trailing resolution `(yesterday = 7 May 2023; …)`.
    let (core, resolutions) = match rest.rfind(" (") {
        Some(i) if rest.ends_with(')') && rest[i..].contains(" = ") => {
            let inner = &rest[i + 2..rest.len() - 1];
            (&rest[..i], inner.split("; ").collect::<Vec<_>>())
        }
        _ => (rest, Vec::new()),
    };
    let mut sentences: Vec<&str> = Vec::new();
    let mut start = 0;
    let bytes = core.as_bytes();
    for (i, c) in core.char_indices() {
        if matches!(c, '.' | '!' | '?') && bytes.get(i + 1).is_some_and(|b| b.is_ascii_whitespace()) {
            sentences.push(core[start..=i].trim());
            start = i + 1;
        }
    }
    if start < core.len() && !core[start..].trim().is_empty() {
        sentences.push(core[start..].trim());
    }
    if sentences.len() < 2 {
        return None;
    }
    let hit = |s: &str| words(s).any(|w| focus.contains(&stem(&w)));
    let keep: Vec<bool> = sentences.iter().map(|s| hit(s)).collect();
    if keep.iter().all(|&k| k) || keep.iter().all(|&k| !k) {
        return None;
    }
    let mut out = String::from(label);
    let mut gap = false;
    let mut kept_text = String::new();
    for (i, s) in sentences.iter().enumerate() {
        if !keep[i] {
            gap = true;
            continue;
        }
        if gap || (i > 0 && out.len() == label.len()) {
            out.push_str(if out.len() == label.len() { "… " } else { " … " });
        } else if out.len() > label.len() {
            out.push(' ');
        }
        gap = false;
        out.push_str(s);
        kept_text.push_str(s);
        kept_text.push(' ');
    }
    if gap {
        out.push_str(" …");
    }
    let kept: Vec<&str> = resolutions
        .into_iter()
        .filter(|r| {
            r.split_once(" = ")
                .is_some_and(|(phrase, _)| kept_text.contains(phrase))
        })
        .collect();
    if !kept.is_empty() {
        out.push_str(&format!(" ({})", kept.join("; ")));
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn snippets_keep_the_matching_sentences_the_label_and_their_resolutions() {
        let focus = focus_of("When did Caroline go to the support group?");
        let text = "Caroline: I had a busy week. I went to a LGBTQ support group yesterday! \
                    It was powerful. See you soon. (yesterday = 7 May 2023; next week = week of 15 May 2023)";
        assert_eq!(
            focused_snippet(text, &focus).as_deref(),
            Some("Caroline: … I went to a LGBTQ support group yesterday! … (yesterday = 7 May 2023)")
        );
        // Stems match: "painting" for "paint", "groups" for "group".
        let f = focus_of("What does Melanie paint?");
        assert_eq!(
            focused_snippet("Melanie: Hi there. I love painting sunsets. Bye.", &f).as_deref(),
            Some("Melanie: … I love painting sunsets. …")
        );
        // One sentence, no match, or every sentence matching: no snippet.
        assert_eq!(focused_snippet("Ann: I went to the group.", &focus), None);
        assert_eq!(focused_snippet("Ann: Hello. Bye.", &focus), None);
        assert_eq!(focused_snippet("Ann: A group. Another group.", &focus), None);
        assert_eq!(focused_snippet("Ann: A group. Bye.", &BTreeSet::new()), None);
        // Without a label; the first sentence kept, the rest cut.
        assert_eq!(
            focused_snippet("The support group met. Then lunch. Then home.", &focus).as_deref(),
            Some("The support group met. …")
        );
    }

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
