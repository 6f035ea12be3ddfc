//! English sentences from the Rust documentation that every toolchain
//! ships (`$(rustc --print sysroot)/share/doc/rust/html`), for a benchmark
//! set of real embeddings that anyone can rebuild without downloads.
//!
//! Three kinds of text are read:
//! - the prose of every page (books, API docs, error index, release
//!   notes), block by block: a sentence never spans two paragraphs, list
//!   items or table cells;
//! - the comments of the library source pages under `src/` (`// SAFETY:
//!   …`, doc comments of private items), comment paragraph by paragraph;
//! - the comments inside code examples (`<pre>` blocks) of the other pages.
//!
//! A sentence ends at `.`, `!` or `?` followed by a space and a capital
//! letter, or at the end of its block, and is kept when it reads as English
//! prose ([`is_prose`]). Extraction is deterministic: files are visited in
//! sorted path order, sentences kept in order of first appearance,
//! duplicates dropped; the benchmark split is a seeded sample of that list.

use rayon::prelude::*;

/// Version of the extraction rules, recorded in a set's `meta.json` so a
/// cached set built under other rules is rebuilt.
pub const EXTRACTOR_VERSION: u32 = 2;
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

/// Tags whose text runs on inside the surrounding block.
fn is_inline(name: &str) -> bool {
    matches!(
        name,
        "a" | "abbr" | "b" | "code" | "em" | "i" | "kbd" | "small" | "span" | "strong" | "sub" | "sup" | "var" | "wbr"
    )
}

/// Elements whose content is never prose.
const SKIPPED: [&str; 6] = ["script", "style", "pre", "nav", "header", "footer"];

/// The name of the tag that starts at `html[i]` (`<`), lower-cased, and
/// the index just past its `>`.
fn tag_at(html: &str, i: usize) -> (String, usize) {
    let end = html[i..].find('>').map_or(html.len(), |j| i + j + 1);
    let name = html[i + 1..end]
        .trim_start_matches('/')
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric())
        .collect::<String>()
        .to_ascii_lowercase();
    (name, end)
}

/// Index just past the `</name>` that closes an element opened before `i`
/// (case-insensitive), or the end of the text.
fn skip_element(html: &str, i: usize, name: &str) -> usize {
    let close = format!("</{name}");
    let mut j = i;
    while let Some(k) = html[j..].find("</") {
        let at = j + k;
        if html.as_bytes()[at..]
            .get(..close.len())
            .is_some_and(|t| t.eq_ignore_ascii_case(close.as_bytes()))
        {
            return html[at..].find('>').map_or(html.len(), |e| at + e + 1);
        }
        j = at + 2;
    }
    html.len()
}

/// Decodes the character references rustdoc and mdBook emit: the named
/// ones for markup characters and typography, and every numeric one.
pub fn decode_entities(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('&') {
        out.push_str(&rest[..i]);
        rest = &rest[i..];
        let semi = rest.as_bytes()[..rest.len().min(12)].iter().position(|&b| b == b';');
        let decoded = semi.and_then(|j| {
            let body = &rest[1..j];
            let c = match body {
                "amp" => Some('&'),
                "lt" => Some('<'),
                "gt" => Some('>'),
                "quot" => Some('"'),
                "apos" => Some('\''),
                "nbsp" => Some(' '),
                "rsquo" | "lsquo" => Some('\''),
                "rdquo" | "ldquo" => Some('"'),
                "mdash" | "ndash" => Some('-'),
                "hellip" => Some('\u{2026}'),
                _ => {
                    let num = body.strip_prefix('#')?;
                    let code = match num.strip_prefix(['x', 'X']) {
                        Some(hex) => u32::from_str_radix(hex, 16).ok()?,
                        None => num.parse().ok()?,
                    };
                    char::from_u32(code)
                }
            }?;
            Some((c, j + 1))
        });
        match decoded {
            Some((c, len)) => {
                out.push(c);
                rest = &rest[len..];
            }
            None => {
                out.push('&');
                rest = &rest[1..];
            }
        }
    }
    out.push_str(rest);
    out
}

/// Typographic punctuation to ASCII (the books use it throughout, so
/// "Rust’s" reads like "Rust's"), whitespace collapsed.
fn normalise(s: &str) -> String {
    let ascii: String = s
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

/// The prose blocks of a page: the visible text between block-level tags
/// (paragraphs, list items, headings, table cells), with inline markup
/// removed, entities decoded and whitespace collapsed. Scripts, styles,
/// code blocks, navigation, headers and footers are dropped.
pub fn prose_blocks(html: &str) -> Vec<String> {
    let mut blocks = Vec::new();
    let mut cur = String::new();
    let mut flush = |cur: &mut String| {
        let b = normalise(&decode_entities(cur));
        if !b.is_empty() {
            blocks.push(b);
        }
        cur.clear();
    };
    let mut i = 0;
    while i < html.len() {
        if html.as_bytes()[i] == b'<' {
            let (name, end) = tag_at(html, i);
            let closing = html[i + 1..].starts_with('/');
            if !closing && SKIPPED.contains(&name.as_str()) {
                flush(&mut cur);
                i = skip_element(html, end, &name);
                continue;
            }
            if !is_inline(&name) {
                flush(&mut cur);
            }
            i = end;
        } else {
            let next = html[i..].find('<').map_or(html.len(), |j| i + j);
            cur.push_str(&html[i..next]);
            i = next;
        }
    }
    flush(&mut cur);
    blocks
}

/// Removes Markdown that comments carry: backticks, emphasis stars and
/// link targets (`[text](url)` and `[text]` become `text`).
fn strip_markdown(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let b: Vec<char> = s.chars().collect();
    let mut i = 0;
    while i < b.len() {
        match b[i] {
            '`' | '*' => i += 1,
            '[' => {
                // `[text](url)` or `[text]`: keep text, drop the target.
                if let Some(close) = b[i + 1..].iter().position(|&c| c == ']') {
                    let close = i + 1 + close;
                    out.push_str(&strip_markdown(&b[i + 1..close].iter().collect::<String>()));
                    i = close + 1;
                    if b.get(i) == Some(&'(')
                        && let Some(p) = b[i..].iter().position(|&c| c == ')')
                    {
                        i += p + 1;
                    }
                } else {
                    out.push('[');
                    i += 1;
                }
            }
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// Groups comment lines (already stripped of `//`) into paragraphs: a
/// blank line, a Markdown heading or a code fence ends a paragraph, and
/// lines inside fences are not prose.
fn comment_paragraphs<'a>(lines: impl Iterator<Item = Option<&'a str>>, out: &mut Vec<String>) {
    let mut cur: Vec<&str> = Vec::new();
    let mut fenced = false;
    let mut flush = |cur: &mut Vec<&str>| {
        if !cur.is_empty() {
            let b = normalise(&strip_markdown(&cur.join(" ")));
            if !b.is_empty() {
                out.push(b);
            }
            cur.clear();
        }
    };
    for line in lines {
        let Some(text) = line.map(str::trim) else {
            flush(&mut cur);
            fenced = false;
            continue;
        };
        if text.starts_with("```") {
            flush(&mut cur);
            fenced = !fenced;
        } else if text.is_empty() || text.starts_with('#') {
            flush(&mut cur);
        } else if !fenced {
            cur.push(text);
        }
    }
    flush(&mut cur);
}

/// Text of a comment line: what follows `//`, `///` or `//!`.
fn after_slashes(line: &str) -> &str {
    line.trim_start().trim_start_matches('/').trim_start_matches('!')
}

/// The comment paragraphs of a rustdoc source page (`src/**.rs.html`),
/// whose comments are `<span class="comment">` / `"doccomment"` elements
/// spanning lines, with line-number anchors inside.
pub fn source_comment_blocks(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = html;
    while let Some(i) = rest.find("<span class=\"") {
        let after = &rest[i + 13..];
        let is_comment = after.starts_with("comment\">") || after.starts_with("doccomment\">");
        let Some(open_end) = after.find('>') else { break };
        let body_start = &after[open_end + 1..];
        if !is_comment {
            rest = body_start;
            continue;
        }
        let end = body_start.find("</span>").unwrap_or(body_start.len());
        let text = decode_entities(&strip_tags(&body_start[..end]));
        comment_paragraphs(text.lines().map(|l| Some(after_slashes(l))), &mut out);
        rest = &body_start[end..];
    }
    out
}

/// Markup removed, text kept (line-number anchors `<a …>12</a>` included).
fn strip_tags(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('<') {
        out.push_str(&rest[..i]);
        // Line-number anchors in source pages: drop their number too.
        let tag_end = rest[i..].find('>').map_or(rest.len(), |j| i + j + 1);
        let tag = &rest[i..tag_end];
        rest = &rest[tag_end..];
        if tag.starts_with("<a ") && tag.contains("data-nosnippet") {
            let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
            rest = &rest[digits..];
        }
    }
    out.push_str(rest);
    out
}

/// The comment paragraphs inside the code examples (`<pre>` blocks) of a
/// documentation or book page: runs of consecutive lines that carry a
/// `//` comment after code or whitespace.
pub fn example_comment_blocks(html: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut i = 0;
    while let Some(k) = html[i..].find("<pre") {
        let start = i + k;
        let (_, open_end) = tag_at(html, start);
        let end = skip_element(html, open_end, "pre");
        let code = decode_entities(&strip_tags(&html[open_end..end]));
        let lines = code.lines().map(|l| {
            // `//` that starts a comment: at line start or after a space
            // (not inside `http://`).
            let at = l.find("//").filter(|&p| p == 0 || l[..p].ends_with([' ', '\t']))?;
            Some(after_slashes(&l[at..]))
        });
        comment_paragraphs(lines, &mut out);
        i = end;
    }
    out
}

/// Splits a block into sentences at `.`, `!` or `?` followed by a space
/// and an upper-case letter, and keeps those that read as English prose.
pub fn sentences(block: &str) -> Vec<String> {
    let mut out = Vec::new();
    let chars: Vec<char> = block.chars().collect();
    let mut start = 0;
    for i in 0..chars.len() {
        let end_here = i + 1 == chars.len()
            || (matches!(chars[i], '.' | '!' | '?')
                && chars[i + 1] == ' '
                && chars.get(i + 2).is_some_and(|c| c.is_ascii_uppercase()));
        if end_here {
            let s: String = chars[start..=i].iter().collect();
            let s = s.trim();
            if is_prose(s) {
                out.push(s.to_string());
            }
            start = i + 1;
        }
    }
    out
}

/// Whether a sentence reads as English prose: 5–60 words, ASCII (which
/// also drops the translated Rust by Example pages), starting with a
/// capital letter, ending with `.`, `!`, `?` or `:`, at least 70% letters,
/// and without statement punctuation (`{};=`…), `..` or URLs.
pub fn is_prose(s: &str) -> bool {
    let words = s.split_whitespace().count();
    if !(5..=60).contains(&words) || !s.is_ascii() || !s.ends_with(['.', '!', '?', ':']) {
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

/// The prose sentences of one page, in page order: source pages (under
/// `<root>/src/`) give their comments, other pages their prose blocks and
/// then the comments of their code examples.
pub fn page_sentences(root: &Path, path: &Path, html: &str) -> Vec<String> {
    let blocks = if path.starts_with(root.join("src")) {
        source_comment_blocks(html)
    } else {
        let mut b = prose_blocks(html);
        b.extend(example_comment_blocks(html));
        b
    };
    blocks.iter().flat_map(|b| sentences(b)).collect()
}

/// Distinct sentences of every page under the `roots`, in first-seen
/// order of the roots and their sorted file lists.
pub fn collect(roots: &[PathBuf], progress: impl Fn(usize, usize) + Sync) -> Vec<String> {
    let files: Vec<(&Path, PathBuf)> = roots
        .iter()
        .flat_map(|r| html_files(r).into_iter().map(move |f| (r.as_path(), f)))
        .collect();
    distinct_sentences(
        &files,
        |(_, f)| f.as_path(),
        |(root, f), html| page_sentences(root, f, html),
        progress,
    )
}

/// The distinct sentences `extract` finds in the text of each of `files`
/// (each read from `path(file)`), in first-seen order (read in parallel; the order does not
/// depend on the thread count; unreadable files give none).
pub fn distinct_sentences<T: Sync>(
    files: &[T],
    path: impl Fn(&T) -> &Path + Sync,
    extract: impl Fn(&T, &str) -> Vec<String> + Sync,
    progress: impl Fn(usize, usize) + Sync,
) -> Vec<String> {
    let done = std::sync::atomic::AtomicUsize::new(0);
    let per_file: Vec<Vec<String>> = files
        .par_iter()
        .map(|f| {
            let s = std::fs::read_to_string(path(f)).map_or_else(|_| Vec::new(), |text| extract(f, &text));
            let n = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
            progress(n, files.len());
            s
        })
        .collect();
    let mut seen = HashSet::new();
    let mut out = Vec::new();
    for s in per_file.into_iter().flatten() {
        if seen.insert(s.clone()) {
            out.push(s);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn all_sentences(html: &str) -> Vec<String> {
        prose_blocks(html).iter().flat_map(|b| sentences(b)).collect()
    }

    #[test]
    fn html_to_sentences() {
        let html = r#"<html><head><style>p { x: y }</style><script>var a = "Not. This.";</script></head>
<body><nav>Menu item one two three four five six seven eight.</nav>
<p>Returns the number of elements in the vector, also referred to
as its <code>length</code>.</p>
<PRE>let v = vec![1, 2, 3]; // This code line. Is not prose at all here.</PRE>
<p>Too short.</p><p>Rust&rsquo;s ownership rules are checked at compile time by the borrow checker.</p><p>Panics if the new capacity exceeds <code>isize::MAX</code> bytes on this platform.</p>
<h2>A heading with five words</h2><p>The next paragraph starts here and ends here.</p>
<p>The iterator yields items in order &amp; stops when the underlying collection is exhausted. Next!</p>
<p>Basic usage of the method looks like this:</p></body></html>"#;
        assert_eq!(
            all_sentences(html),
            vec![
                "Returns the number of elements in the vector, also referred to as its length.",
                "Rust's ownership rules are checked at compile time by the borrow checker.",
                "Panics if the new capacity exceeds isize::MAX bytes on this platform.",
                "The next paragraph starts here and ends here.",
                "The iterator yields items in order & stops when the underlying collection is exhausted.",
                "Basic usage of the method looks like this:",
            ]
        );
    }

    #[test]
    fn sentences_stay_inside_their_block() {
        // Without block boundaries the heading would be glued to the
        // paragraph ("Examples The first ...").
        let html = "<h1>Examples</h1><p>The first example shows how a vector grows.</p><li>item</li>";
        assert_eq!(all_sentences(html), vec!["The first example shows how a vector grows."]);
    }

    #[test]
    fn entities() {
        assert_eq!(
            decode_entities("a &lt;b&gt; &#39;c&#x27; &amp;amp; &bogus; &"),
            "a <b> 'c' &amp; &bogus; &"
        );
        assert_eq!(decode_entities("&#x1F600;"), "\u{1F600}");
    }

    #[test]
    fn source_page_comments() {
        let html = r#"<pre class="rust"><code><a href=#1 id=1 data-nosnippet>1</a><span class="doccomment">/// Creates an empty buffer with room for `n` items.
<a href=#2 id=2 data-nosnippet>2</a>///
<a href=#3 id=3 data-nosnippet>3</a>/// ```
<a href=#4 id=4 data-nosnippet>4</a>/// This line is inside a code fence and is not prose.
<a href=#5 id=5 data-nosnippet>5</a>/// ```
</span><span class="kw">fn </span>f() {
<a href=#6 id=6 data-nosnippet>6</a>    <span class="comment">// SAFETY: the caller guarantees that the pointer
<a href=#7 id=7 data-nosnippet>7</a>    // is valid for reads of [`len`](Self::len) bytes.
</span>}</code></pre>"#;
        let s: Vec<String> = source_comment_blocks(html).iter().flat_map(|b| sentences(b)).collect();
        assert_eq!(
            s,
            vec![
                "Creates an empty buffer with room for n items.",
                "SAFETY: the caller guarantees that the pointer is valid for reads of len bytes.",
            ]
        );
    }

    #[test]
    fn example_comments() {
        let html = "<p>Text.</p><pre class=\"rust\"><code>let x = 1; // The value is copied into the new binding here.\n\
                    let u = \"http://example.org\";\n// This comment spans\n// two lines of the example.\n</code></pre>";
        let s: Vec<String> = example_comment_blocks(html).iter().flat_map(|b| sentences(b)).collect();
        assert_eq!(
            s,
            vec![
                "The value is copied into the new binding here.",
                "This comment spans two lines of the example.",
            ]
        );
    }

    #[test]
    fn hostile_markup_never_panics() {
        // Multi-byte text right after `&`, `<` or `</`, unterminated tags,
        // entities and elements, at every cut of a tricky page.
        let page = "<p>Rust&’s &#xZZ; &#99999999; &amp</p><pre>// a’ <span class=\"comment\">// é\n</span>\
                    </pré><span class=\"doccomment\">/// [x](’ `y</span><a data-nosnippet>１</a><scr’ipt";
        for cut in (0..=page.len()).filter(|&c| page.is_char_boundary(c)) {
            let h = &page[..cut];
            for b in prose_blocks(h)
                .iter()
                .chain(&source_comment_blocks(h))
                .chain(&example_comment_blocks(h))
            {
                let _ = sentences(b);
            }
        }
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
        assert!(!is_prose(
            "Rust는 다양한 기본 자료형에 대한 접근을 제공합니다 샘플은 다음과 같습니다."
        ));
        assert!(!is_prose("A heading without any final punctuation mark"));
    }
}
