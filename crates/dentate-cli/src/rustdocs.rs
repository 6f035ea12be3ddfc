//! English sentences from the Rust documentation that every toolchain
//! ships (`$(rustc --print sysroot)/share/doc/rust/html`), for a benchmark
//! set of real embeddings that anyone can rebuild without downloads.
//!
//! Extraction is deterministic: files are visited in sorted path order,
//! sentences kept in order of first appearance, duplicates dropped; the
//! benchmark split is a seeded shuffle of that list.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// The documentation root of the active toolchain.
pub fn docs_root() -> Result<PathBuf, String> {
    let out = std::process::Command::new("rustc")
        .args(["--print", "sysroot"])
        .output()
        .map_err(|e| format!("cannot run rustc: {e}"))?;
    let root = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()).join("share/doc/rust/html");
    if !root.is_dir() {
        return Err(format!(
            "{} does not exist (install the rust-docs component: rustup component add rust-docs)",
            root.display()
        ));
    }
    Ok(root)
}

/// Every `.html` file under `root`, sorted.
pub fn html_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(rd) = std::fs::read_dir(&d) else { continue };
        for e in rd.flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if p.extension().is_some_and(|x| x == "html") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Visible text of an HTML page: scripts, styles and code blocks dropped,
/// tags removed (block tags become spaces), common entities decoded,
/// whitespace collapsed.
pub fn html_text(html: &str) -> String {
    let lower = html.to_ascii_lowercase();
    let mut out = String::with_capacity(html.len() / 2);
    let mut i = 0;
    let b = html.as_bytes();
    while i < b.len() {
        if b[i] == b'<' {
            // Skip whole elements whose content is not prose.
            let mut skipped = false;
            for tag in ["script", "style", "pre", "nav", "header", "footer"] {
                if lower[i + 1..].starts_with(tag) {
                    let close = format!("</{tag}>");
                    match lower[i..].find(&close) {
                        Some(j) => i += j + close.len(),
                        None => i = b.len(),
                    }
                    out.push(' ');
                    skipped = true;
                    break;
                }
            }
            if skipped {
                continue;
            }
            let end = html[i..].find('>').map_or(b.len(), |j| i + j + 1);
            let tag = &lower[i + 1..end.saturating_sub(1).max(i + 1)];
            let name: String = tag
                .trim_start_matches('/')
                .chars()
                .take_while(|c| c.is_ascii_alphanumeric())
                .collect();
            let inline = matches!(
                name.as_str(),
                "a" | "code" | "em" | "strong" | "span" | "i" | "b" | "sup" | "sub" | "wbr"
            );
            if !inline {
                out.push(' ');
            }
            i = end;
        } else {
            let next = html[i..].find('<').map_or(b.len(), |j| i + j);
            out.push_str(&html[i..next]);
            i = next;
        }
    }
    let decoded = out
        .replace("&nbsp;", " ")
        .replace("&lt;", "<")
        .replace("&gt;", ">")
        .replace("&quot;", "\"")
        .replace("&#39;", "'")
        .replace("&#x27;", "'")
        .replace("&rsquo;", "'")
        .replace("&lsquo;", "'")
        .replace("&ldquo;", "\"")
        .replace("&rdquo;", "\"")
        .replace("&mdash;", "-")
        .replace("&ndash;", "-")
        .replace("&amp;", "&");
    // Typographic punctuation (the books use it throughout) to ASCII, so
    // "Rust’s" is an English sentence like "Rust's".
    let ascii: String = decoded
        .chars()
        .map(|c| match c {
            '\u{2018}' | '\u{2019}' | '\u{2032}' => '\'',
            '\u{201C}' | '\u{201D}' => '"',
            '\u{2013}' | '\u{2014}' | '\u{2212}' => '-',
            '\u{00A0}' | '\u{2009}' | '\u{202F}' => ' ',
            other => other,
        })
        .collect();
    ascii
        .replace('\u{2026}', "...")
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
}

/// Splits text into sentences at `.`, `!` or `?` followed by a space and an
/// upper-case letter, and keeps those that read as English prose: 5–60
/// words, ASCII, starting with a capital letter, ending with `.`, `!` or
/// `?`, at least 70% letters, without statement punctuation (`{};=`…).
pub fn sentences(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = text.chars().collect();
    let mut start = 0;
    for i in 0..chars.len() {
        let end_here = matches!(chars[i], '.' | '!' | '?')
            && (i + 1 == chars.len()
                || (chars[i + 1] == ' ' && chars.get(i + 2).is_some_and(|c| c.is_ascii_uppercase())));
        if end_here {
            let s: String = chars[start..=i].iter().collect();
            let s = s.trim().to_string();
            if is_prose(&s) {
                out.push(s);
            }
            start = i + 1;
        }
    }
    out
}

fn is_prose(s: &str) -> bool {
    let words = s.split_whitespace().count();
    if !(5..=60).contains(&words) || !s.is_ascii() || !s.ends_with(['.', '!', '?']) {
        return false;
    }
    if !s.chars().next().is_some_and(|c| c.is_ascii_uppercase()) {
        return false;
    }
    // Identifiers, paths and generics (`Vec::new`, `Option<T>`) are part of
    // English sentences in these docs; statement punctuation is not.
    if s.contains("http") || s.contains("..") || s.chars().any(|c| "{};=\\$#@^~|".contains(c)) {
        return false;
    }
    let non_space = s.chars().filter(|c| !c.is_whitespace()).count();
    let letters = s.chars().filter(|c| c.is_ascii_alphabetic()).count();
    letters * 100 >= non_space * 70
}

/// Distinct sentences of every page under `root`, in first-seen order.
pub fn collect(root: &Path, mut progress: impl FnMut(usize, usize)) -> Vec<String> {
    let files = html_files(root);
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for (i, f) in files.iter().enumerate() {
        if let Ok(html) = std::fs::read_to_string(f) {
            for s in sentences(&html_text(&html)) {
                if seen.insert(s.clone()) {
                    out.push(s);
                }
            }
        }
        progress(i + 1, files.len());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_to_sentences() {
        let html = r#"<html><head><style>p { x: y }</style><script>var a = "Not. This.";</script></head>
<body><nav>Menu item one two three four five six seven eight.</nav>
<p>Returns the number of elements in the vector, also referred to as its <code>length</code>.</p>
<pre>let v = vec![1, 2, 3]; // This code line. Is not prose at all here.</pre>
<p>Too short.</p><p>Rust’s ownership rules are checked at compile time by the borrow checker.</p><p>Panics if the new capacity exceeds <code>isize::MAX</code> bytes on this platform.</p>
<p>The iterator yields items in order &amp; stops when the underlying collection is exhausted. Next!</p></body></html>"#;
        let s = sentences(&html_text(html));
        assert_eq!(
            s,
            vec![
                "Returns the number of elements in the vector, also referred to as its length.".to_string(),
                "Rust's ownership rules are checked at compile time by the borrow checker.".to_string(),
                "Panics if the new capacity exceeds isize::MAX bytes on this platform.".to_string(),
                "The iterator yields items in order & stops when the underlying collection is exhausted.".to_string(),
            ]
        );
    }

    #[test]
    fn prose_filter() {
        assert!(is_prose("A slice is a view into a contiguous sequence of elements."));
        assert!(!is_prose("Too short."));
        assert!(is_prose(
            "Calls Vec::new and then pushes every element of the slice into it."
        ));
        assert!(!is_prose(
            "See https://example.org for the full list of supported targets."
        ));
        assert!(!is_prose(
            "lowercase start means this is probably a fragment of something else."
        ));
        assert!(!is_prose(
            "The value of x = 5 is assigned before the loop body starts running here."
        ));
    }
}
