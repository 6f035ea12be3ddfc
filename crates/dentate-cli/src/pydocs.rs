//! English sentences from the docstrings and comments of Python's standard library (the
//! `.py` files every CPython installation ships), for a second benchmark
//! set of real embeddings whose text has another source than the Rust
//! documentation of [`crate::rustdocs`], again rebuilt without downloads.
//!
//! A docstring here is a triple-quoted string that stands as a statement
//! of its own (first thing on its line, optionally with a string prefix
//! such as `r`), as module, class and function docstrings do; strings
//! assigned or passed as arguments are not read. Each docstring is split
//! into paragraphs at blank lines; doctest lines (`>>>`, `...`) are
//! dropped, and the lines of a paragraph are joined. Sentences then follow
//! the rules of [`crate::rustdocs::sentences`]. The standard library's
//! own tests are read (their comments are prose too); installed packages
//! (`site-packages`, `dist-packages`) and caches are not, so the set is
//! the same on every installation of one Python version.
//! Extraction is deterministic: files in sorted path order, sentences in
//! order of first appearance, duplicates dropped.

use std::path::{Path, PathBuf};

/// Version of the extraction rules, recorded in a set's `meta.json`.
pub const EXTRACTOR_VERSION: u32 = 2;

/// The standard library folder of the `python3` on the `PATH`.
pub fn stdlib_root() -> Result<PathBuf, String> {
    let out = std::process::Command::new("python3")
        .args(["-c", "import sysconfig; print(sysconfig.get_paths()['stdlib'])"])
        .output()
        .map_err(|e| format!("cannot run python3 to find its standard library ({e}); pass --src DIR"))?;
    if !out.status.success() {
        return Err("python3 could not name its standard library; pass --src DIR".into());
    }
    let root = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    if !root.is_dir() {
        return Err(format!("{} is not a folder; pass --src DIR", root.display()));
    }
    Ok(root)
}

/// Folders whose files are not read.
fn skipped(name: &str) -> bool {
    matches!(name, "site-packages" | "dist-packages" | "__pycache__") || name.starts_with('.')
}

/// Every `.py` file under `root`, sorted, outside the skipped folders
/// (symbolic links are not followed).
pub fn py_files(root: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.flatten() {
            let Ok(kind) = e.file_type() else { continue };
            let path = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if kind.is_dir() {
                if !skipped(&name) {
                    stack.push(path);
                }
            } else if kind.is_file() && name.ends_with(".py") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// The paragraphs of every docstring and comment block of a Python
/// source, in file order, each with its words joined by single spaces.
pub fn docstring_paragraphs(src: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut comment = String::new();
    let mut rest = src;
    let mut at_line_start = true;
    while !rest.is_empty() {
        let line_end = rest.find('\n').map_or(rest.len(), |i| i + 1);
        let line = &rest[..line_end];
        let body = line.trim_start();
        let prefix_len = body
            .char_indices()
            .take_while(|&(i, c)| i < 2 && matches!(c, 'r' | 'R' | 'u' | 'U'))
            .count();
        let after = &body[prefix_len..];
        let quote = ["\"\"\"", "'''"].into_iter().find(|q| after.starts_with(q));
        match quote {
            Some(q) if at_line_start => {
                flush(&mut comment, &mut out);
                let start = line.len() - body.len() + prefix_len + 3;
                let Some(len) = rest[start..].find(q) else {
                    break;
                };
                paragraphs(&rest[start..start + len], &mut out);
                let end = start + len + 3;
                rest = &rest[end..];
                // What follows the closing quotes is not the start of a line.
                at_line_start = false;
            }
            _ => {
                // A triple-quoted string that is not a statement of its own
                // (an assignment, an argument) is skipped whole, so its
                // lines are never taken for docstrings.
                let open = ["\"\"\"", "'''"]
                    .into_iter()
                    .filter_map(|q| line.find(q).map(|i| (i, q)))
                    .min_by_key(|&(i, _)| i);
                match open {
                    Some((i, q)) if !line[..i].contains('#') => match rest[i + 3..].find(q) {
                        Some(len) => {
                            rest = &rest[i + 3 + len + 3..];
                            at_line_start = false;
                        }
                        None => break,
                    },
                    _ => {
                        // A line that is a comment alone continues the
                        // comment paragraph; an empty comment line, a
                        // directive (`#!`, `# -*-`, `# noqa`, `# type:`,
                        // `# pragma`) or any other line ends it.
                        let text = body.trim_start_matches('#').trim();
                        let directive = body.starts_with("#!")
                            || ["-*-", "noqa", "type:", "pragma"].iter().any(|d| text.contains(d));
                        if at_line_start && body.starts_with('#') && !text.is_empty() && !directive {
                            comment.push(' ');
                            comment.push_str(text);
                        } else {
                            flush(&mut comment, &mut out);
                        }
                        rest = &rest[line_end..];
                        at_line_start = true;
                    }
                }
            }
        }
    }
    flush(&mut comment, &mut out);
    out
}

/// Ends a paragraph: its words joined by single spaces, if any.
fn flush(par: &mut String, out: &mut Vec<String>) {
    let words = par.split_whitespace().collect::<Vec<_>>().join(" ");
    par.clear();
    if !words.is_empty() {
        out.push(words);
    }
}

/// Splits a docstring into paragraphs at blank lines, without doctest
/// lines, each joined into one line.
fn paragraphs(doc: &str, out: &mut Vec<String>) {
    let mut cur = String::new();
    for line in doc.lines().map(str::trim) {
        if line.is_empty() || line.starts_with(">>>") || line.starts_with("...") {
            flush(&mut cur, out);
            continue;
        }
        cur.push(' ');
        cur.push_str(line);
    }
    flush(&mut cur, out);
}

/// The prose sentences of one source file, in file order.
pub fn file_sentences(src: &str) -> Vec<String> {
    docstring_paragraphs(src)
        .iter()
        .flat_map(|p| crate::rustdocs::sentences(p))
        .collect()
}

/// Distinct sentences of every file under the `roots`, in first-seen
/// order of the roots and their sorted file lists.
pub fn collect(roots: &[PathBuf], progress: impl Fn(usize, usize) + Sync) -> Vec<String> {
    let files: Vec<PathBuf> = roots.iter().flat_map(|r| py_files(r)).collect();
    crate::rustdocs::distinct_sentences(&files, |f| f.as_path(), |_, src| file_sentences(src), progress)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SRC: &str = r#"#!/usr/bin/env python3
# -*- coding: utf-8 -*-
"""Tools for reading configuration files.

The parser keeps every section in the order it was read.  It never
reorders them at all.
>>> parse("a = 1")
{'a': 1}
"""
import os  # noqa: F401

# Sections are kept in a list rather than a mapping, since
# the same name may appear twice in one file.
#
# A second comment paragraph follows the empty comment line.
TEMPLATE = """This template text is assigned to a name and is never read.
It spans two lines of a long string literal."""

class Reader:
    r'''Reads one configuration file and remembers where each key came from.

    Keys are compared without regard to case, as the format requires.
    '''

    def read(self, path):
        """Return the sections of the file at the given path."""
        log("""An argument string that is not a docstring at all here.""")
        # A comment that mentions """ is not the start of a string here.
        return self._sections  # a trailing comment is not read
"#;

    #[test]
    fn docstrings_only() {
        assert_eq!(
            docstring_paragraphs(SRC),
            vec![
                "Tools for reading configuration files.",
                "The parser keeps every section in the order it was read. It never reorders them at all.",
                "{'a': 1}",
                "Sections are kept in a list rather than a mapping, since the same name may appear twice in one file.",
                "A second comment paragraph follows the empty comment line.",
                "Reads one configuration file and remembers where each key came from.",
                "Keys are compared without regard to case, as the format requires.",
                "Return the sections of the file at the given path.",
                "A comment that mentions \"\"\" is not the start of a string here.",
            ]
        );
        assert_eq!(
            file_sentences(SRC),
            vec![
                "Tools for reading configuration files.",
                "The parser keeps every section in the order it was read.",
                "It never reorders them at all.",
                "Sections are kept in a list rather than a mapping, since the same name may appear twice in one file.",
                "A second comment paragraph follows the empty comment line.",
                "Reads one configuration file and remembers where each key came from.",
                "Keys are compared without regard to case, as the format requires.",
                "Return the sections of the file at the given path.",
                "A comment that mentions \"\"\" is not the start of a string here.",
            ]
        );
    }

    #[test]
    fn unclosed_strings_end_the_file() {
        assert!(docstring_paragraphs("\"\"\"Never closed. The rest of the file").is_empty());
        assert!(docstring_paragraphs("x = '''never closed").is_empty());
        assert_eq!(docstring_paragraphs("\n\n"), Vec::<String>::new());
    }

    /// Any mix of quotes, prefixes, comments, newlines and multi-byte
    /// characters parses without a panic, and every paragraph comes from
    /// the source.
    #[test]
    fn hostile_sources_never_panic() {
        let pieces = [
            "\"",
            "'",
            "\"\"\"",
            "'''",
            "\n",
            "#",
            "r",
            "u",
            " ",
            "é",
            "Text. More text here now.",
            "x = ",
        ];
        let mut r = dentate_core::rng::Rng::new(7);
        for _ in 0..3_000 {
            let len = (r.next_u64() % 40) as usize;
            let src: String = (0..len)
                .map(|_| pieces[(r.next_u64() % pieces.len() as u64) as usize])
                .collect();
            for p in docstring_paragraphs(&src) {
                assert!(p.split(' ').all(|w| src.contains(w)), "{p:?} from {src:?}");
            }
        }
    }

    #[test]
    fn files_and_folders() {
        let dir = std::env::temp_dir().join(format!("dentate-pydocs-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        for sub in ["pkg", "site-packages/numpy", "__pycache__", "json"] {
            std::fs::create_dir_all(dir.join(sub)).unwrap();
        }
        let doc = |s: &str| format!("\"\"\"{s}\"\"\"\n");
        std::fs::write(
            dir.join("pkg/b.py"),
            doc("The second module of the package reads files."),
        )
        .unwrap();
        std::fs::write(
            dir.join("pkg/a.py"),
            doc("The first module of the package writes files."),
        )
        .unwrap();
        std::fs::write(
            dir.join("site-packages/numpy/t.py"),
            doc("An installed package that should never be read."),
        )
        .unwrap();
        std::fs::write(
            dir.join("__pycache__/c.py"),
            doc("A cached module that should never be read."),
        )
        .unwrap();
        std::fs::write(dir.join("json/x.txt"), doc("Not a Python file, so it is never read.")).unwrap();
        std::fs::write(
            dir.join("json/d.py"),
            doc("The first module of the package writes files."),
        )
        .unwrap();
        let got = collect(std::slice::from_ref(&dir), |_, _| {});
        assert_eq!(
            got,
            vec![
                "The first module of the package writes files.",
                "The second module of the package reads files.",
            ]
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
