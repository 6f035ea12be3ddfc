//! No import loops between the modules of one crate; a child may use its parent.
//!
//! Each crate (`crates/*/src`, `wasm/src`) is checked on its own. Every `.rs` file is a module
//! (`lib.rs`/`main.rs` is the root, `a.rs` or `a/mod.rs` is `a`, `a/b.rs` is `a::b`; `src/bin/` is skipped).
//! Module `a` depends on module `b` when `a`'s file names `b` in a path: `use crate::b::X`,
//! `crate::b::f()`, `super::b::X`, a bare `b::X` for a child `b`, or a name imported or re-exported from
//! `b` by another module (`crate::X` after `pub use b::X;` in `lib.rs`). Uses of one's own ancestors
//! (`super::X`) and of the root are ignored; every other dependency must point one way only.
//! Test code (`mod tests { .. }`) counts: it belongs to its file's module.
//!
//! Reading a failure: each loop lists its modules, then each dependency inside it as `a -> b` with the
//! first `file:line` where `a` uses `b`. Break the loop at one of those lines, usually by moving what
//! both sides need into a module that uses neither of them.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::fmt::Write as _;
use std::path::Path;

/// A module path below the crate root: `[]` is the root, `["amory", "binding"]` is `amory::binding`.
type ModPath = Vec<String>;

/// A token with its 1-based line: an identifier or keyword, `::`, or one punctuation char.
struct Tok {
    text: String,
    line: usize,
}

/// Splits Rust source into tokens, dropping comments, whitespace, literals (strings, raw strings,
/// chars, bytes, numbers) and lifetimes, so that only code can create a dependency.
fn tokenize(src: &str) -> Vec<Tok> {
    let c: Vec<char> = src.chars().collect();
    let at = |k: usize| c.get(k).copied().unwrap_or('\0');
    let word = |ch: char| ch.is_alphanumeric() || ch == '_';
    // The first index at or after `k` where `stop` holds, or the end.
    let find = |k: usize, stop: &dyn Fn(char) -> bool| (k..c.len()).find(|&k| stop(c[k])).unwrap_or(c.len());
    // The index just past the `"` (and `hashes` x `#`) that closes a string whose body starts at `k`.
    let str_end = |mut k: usize, hashes: usize, raw: bool| {
        while k < c.len() && !(c[k] == '"' && (1..=hashes).all(|h| at(k + h) == '#')) {
            k += if c[k] == '\\' && !raw { 2 } else { 1 };
        }
        k + 1 + hashes
    };
    let (mut i, mut line, mut out) = (0, 1, Vec::new());
    while i < c.len() {
        let (ch, start) = (c[i], i);
        if ch == '/' && at(i + 1) == '/' {
            i = find(i, &|x| x == '\n');
        } else if ch == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < c.len() {
                let pair = (c[i], at(i + 1));
                let step = i32::from(pair == ('/', '*')) - i32::from(pair == ('*', '/'));
                depth += step;
                i += if step == 0 { 1 } else { 2 };
                if depth == 0 {
                    break;
                }
            }
        } else if ch == '"' {
            i = str_end(i + 1, 0, false);
        } else if ch == '\'' {
            // `'\n'`, `'\''` and `'x'` are chars; anything else (`'a`, `'static`) is a lifetime or label.
            i = match (at(i + 1), at(i + 2)) {
                ('\\', _) => find(i + 3, &|x| x == '\'') + 1,
                (_, '\'') => i + 3,
                _ => find(i + 1, &|x| !word(x)),
            };
        } else if word(ch) {
            i = find(i, &|x| !word(x));
            let text: String = c[start..i].iter().collect();
            let hashes = find(i, &|x| x != '#') - i;
            match text.as_str() {
                "r" | "br" | "cr" if at(i + hashes) == '"' => i = str_end(i + hashes + 1, hashes, true),
                "b" | "c" if at(i) == '"' => i = str_end(i + 1, 0, false),
                "b" if at(i) == '\'' => {}     // a byte: skipped as a char on the next turn
                "r" if hashes == 1 => i += 1,  // raw identifier `r#type`: `type` comes next turn
                _ if ch.is_ascii_digit() => {} // a number
                _ => out.push(Tok { text, line }),
            }
        } else {
            let colons = ch == ':' && at(i + 1) == ':';
            i += 1 + usize::from(colons);
            let text = if colons { "::".to_string() } else { ch.to_string() };
            if !ch.is_whitespace() {
                out.push(Tok { text, line });
            }
        }
        line += c[start..i.min(c.len())].iter().filter(|&&x| x == '\n').count();
    }
    out
}

/// True for identifiers and keywords (the tokens that can be path segments).
fn is_ident(t: &str) -> bool {
    t.starts_with(|ch: char| ch.is_alphabetic() || ch == '_')
}

/// One leaf of a `use` tree: the full path, the name it binds (`*` for a glob, `None` for `as _`), its line.
struct UseLeaf {
    segs: Vec<String>,
    name: Option<String>,
    line: usize,
}

/// Expands the `use` tree at `t[*k]` (just after `use`) below `segs`: `a::{b, c::{self, D as E}, f::*}`.
fn use_tree(t: &[Tok], k: &mut usize, mut segs: Vec<String>, out: &mut Vec<UseLeaf>) {
    let next_is = |k: usize, s: &str| t.get(k).is_some_and(|x| x.text == s);
    while let Some(tok) = t.get(*k) {
        *k += 1;
        let (line, mut name) = (tok.line, Some(tok.text.clone()));
        match tok.text.as_str() {
            "::" if segs.is_empty() => segs.push("::".into()), // `::name`: another crate
            "::" => {}
            "{" => {
                while t.get(*k).is_some_and(|x| x.text != "}") {
                    use_tree(t, k, segs.clone(), out);
                    *k += usize::from(next_is(*k, ","));
                }
                *k += 1;
                return;
            }
            "*" => return out.push(UseLeaf { segs, name, line }),
            id if is_ident(id) && next_is(*k, "::") => segs.push(id.into()),
            id if is_ident(id) => {
                if id == "self" {
                    name = segs.last().cloned();
                } else {
                    segs.push(id.into());
                }
                if next_is(*k, "as") {
                    name = t.get(*k + 1).map(|x| x.text.clone()).filter(|n| n != "_");
                    *k += 2;
                }
                return out.push(UseLeaf { segs, name, line });
            }
            _ => return,
        }
    }
}

/// A path written in a file: its scope, the file's index, and (segments, first line, last line).
struct Site {
    scope: ModPath,
    file: usize,
    path: (Vec<String>, usize, usize),
}

/// The keywords that define an item named by the next token.
const ITEMS: [&str; 8] = ["fn", "struct", "enum", "union", "trait", "type", "const", "static"];

/// What a name means in a scope: a module, a path that a `use` wrote in that scope, or an item of a module.
enum Name {
    Module(ModPath),
    Alias(ModPath, Vec<String>),
    Item(ModPath),
}

/// The modules and `use` bindings of one crate, gathered from all its files before any path is resolved.
#[derive(Default)]
struct Crate {
    /// Modules that are files: the nodes of the graph.
    files: HashSet<ModPath>,
    /// Every scope: the file modules plus inline `mod x { .. }` blocks (which belong to their file).
    scopes: HashSet<ModPath>,
    /// The `use` bindings (pub or not) of each scope: (bound name or `*`, path as written).
    uses: HashMap<ModPath, Vec<(String, Vec<String>)>>,
    /// Items defined in each scope (`fn`, `struct`, ..): a `use m::*` does not shadow them.
    defs: HashSet<(ModPath, String)>,
}

impl Crate {
    /// Resolves `segs`, written in `scope`, to the deepest module it goes through, and whether the whole
    /// path is that module. `None` when it names another crate or a local item (`Vec::new`, `Enum::A`).
    fn resolve(&self, scope: &[String], segs: &[String], depth: usize) -> Option<(ModPath, bool)> {
        let (mut cur, mut i) = (scope.to_vec(), 0);
        match segs.first()?.as_str() {
            "::" => return None,
            "crate" => (cur, i) = (vec![], 1),
            _ => {}
        }
        while let Some(s) = segs.get(i).filter(|s| *s == "self" || *s == "super") {
            i += 1;
            if s == "super" {
                cur.pop();
            }
        }
        let bare = i == 0;
        while let Some(seg) = segs.get(i) {
            match self.lookup(&cur, seg, depth) {
                Some(Name::Module(m)) => cur = m,
                Some(Name::Item(m)) => return Some((m, false)),
                Some(Name::Alias(at, target)) if depth < 16 => {
                    return self.resolve(&at, &[&target, &segs[i + 1..]].concat(), depth + 1);
                }
                _ if bare && i == 0 => return None,
                _ => return Some((cur, false)),
            }
            i += 1;
        }
        Some((cur, true))
    }

    /// The meaning of `name` in `scope`: a child module, a `use` binding, or a name that a `use m::*`
    /// brings in from a module `m` of this crate, or an item that the scope defines (`fn`, `struct`, ..).
    fn lookup(&self, scope: &[String], name: &str, depth: usize) -> Option<Name> {
        let child = [scope, &[name.to_string()]].concat();
        if self.scopes.contains(&child) {
            return Some(Name::Module(child));
        }
        let uses = self.uses.get(scope).map_or(&[][..], Vec::as_slice);
        if let Some((_, target)) = uses.iter().find(|(n, _)| n == name) {
            return Some(Name::Alias(scope.to_vec(), target.clone()));
        }
        if self.defs.contains(&(scope.to_vec(), name.to_string())) {
            return Some(Name::Item(scope.to_vec()));
        }
        // Only globs of this crate's modules are followed (`use super::*`, `use child::*`, `use crate::m::*`).
        let local = |t: &[String]| {
            matches!(t[0].as_str(), "crate" | "super" | "self") || self.scopes.contains(&[scope, &t[..1]].concat())
        };
        let globbed = |(_, target): &(String, Vec<String>)| match self.resolve(scope, target, depth + 1) {
            Some((m, true)) if m != scope => self.lookup(&m, name, depth + 1),
            _ => None,
        };
        uses.iter()
            .filter(|(n, t)| n == "*" && depth < 16 && local(t))
            .find_map(globbed)
    }

    /// Pass 1: reads each file's inline modules, items, `use` bindings and paths (returned as sites).
    /// `files` holds (module, path relative to `src/`, source text).
    fn scan(files: &[(ModPath, &String, &String)]) -> (Crate, Vec<Site>) {
        let mut krate = Crate::default();
        krate.files = files.iter().map(|f| f.0.clone()).collect();
        krate.scopes = krate.files.clone();
        let mut sites = Vec::new();
        for (file, (module, _, src)) in files.iter().enumerate() {
            let t = tokenize(src);
            let text = |k: usize| t.get(k).map_or("", |x| x.text.as_str());
            let starts_path =
                |k: usize| text(k + 1) == "::" && is_ident(text(k + 2)) && (k == 0 || text(k - 1) != "::");
            // `scope` is the module the tokens are in; `inline` holds the brace depths of its inline `mod x {`.
            let (mut k, mut depth, mut inline, mut scope) = (0, 0, Vec::new(), module.clone());
            while k < t.len() {
                let mut paths = Vec::new(); // (segments, first line, last line) of the paths starting here
                match text(k) {
                    "{" => depth += 1,
                    "}" => {
                        if inline.last() == Some(&depth) {
                            inline.pop();
                            scope.pop();
                        }
                        depth -= 1;
                    }
                    "mod" if is_ident(text(k + 1)) && text(k + 2) == "{" => {
                        depth += 1;
                        inline.push(depth);
                        scope.push(text(k + 1).to_string());
                        krate.scopes.insert(scope.clone());
                        k += 2;
                    }
                    w if ITEMS.contains(&w) && is_ident(text(k + 1)) => {
                        krate.defs.insert((scope.clone(), text(k + 1).to_string()));
                    }
                    "use" if text(k + 1) != "<" => {
                        let (first_line, mut leaves, mut end) = (t[k].line, Vec::new(), k + 1);
                        use_tree(&t, &mut end, vec![], &mut leaves);
                        k = end - 1; // the tree's last token
                        for UseLeaf { segs, name, line } in leaves {
                            let uses = krate.uses.entry(scope.clone()).or_default();
                            uses.extend(name.map(|name| (name, segs.clone())));
                            paths.push((segs, first_line, line));
                        }
                    }
                    w if is_ident(w) && starts_path(k) => {
                        let (mut segs, first_line) = (vec![w.to_string()], t[k].line);
                        while text(k + 1) == "::" && is_ident(text(k + 2)) {
                            segs.push(text(k + 2).to_string());
                            k += 2;
                        }
                        paths.push((segs, first_line, t[k].line));
                    }
                    _ => {}
                }
                sites.extend(paths.into_iter().map(|path| Site {
                    scope: scope.clone(),
                    file,
                    path,
                }));
                k += 1;
            }
        }
        (krate, sites)
    }

    /// The graph node of a scope: its longest prefix that is a file module.
    fn node(&self, scope: &[String]) -> ModPath {
        let mut node = scope.to_vec();
        while !self.files.contains(&node) && node.pop().is_some() {}
        node
    }
}

/// One import loop: its modules (sorted), and each dependency between them with where it starts.
struct Loop {
    modules: Vec<String>,
    edges: Vec<String>,
}

/// The module of a file path relative to `src/`; `None` for files that are not modules of the library
/// (`bin/`, and `main.rs` when there is a `lib.rs`: that binary reaches the library by its crate name).
fn module_of(rel: &str, has_lib: bool) -> Option<ModPath> {
    let rel = rel.strip_suffix(".rs")?;
    if rel.starts_with("bin/") || (rel == "main" && has_lib) {
        return None;
    }
    let mut segs: ModPath = rel.split('/').map(String::from).collect();
    if matches!(segs.as_slice(), [one] if one == "lib" || one == "main") || segs.last().is_some_and(|s| s == "mod") {
        segs.pop();
    }
    Some(segs)
}

/// Finds the import loops of the crate in `dir` (shown in messages), given as (path relative to `dir`,
/// source text) pairs.
fn find_loops<'a>(dir: &str, files: &'a [(String, String)]) -> Vec<Loop> {
    let has_lib = files.iter().any(|(rel, _)| rel == "lib.rs");
    let module = |(rel, src): &'a (String, String)| Some((module_of(rel, has_lib)?, rel, src));
    let files: Vec<_> = files.iter().filter_map(module).collect();
    let (krate, sites) = Crate::scan(&files);
    // Pass 2: resolve each path to a module; keep the first site of each edge.
    let mut graph: BTreeMap<ModPath, BTreeMap<ModPath, &Site>> = BTreeMap::new();
    for site in &sites {
        if let Some((target, _)) = krate.resolve(&site.scope, &site.path.0, 0) {
            let (from, to) = (krate.node(&site.scope), krate.node(&target));
            if !from.starts_with(&to) {
                graph.entry(from).or_default().entry(to).or_insert(site);
            }
        }
    }
    // A loop is a strongly connected component of two modules or more: modules that reach each other.
    let reach = |start| {
        let (mut seen, mut todo) = (BTreeSet::new(), vec![start]);
        while let Some(m) = todo.pop() {
            let next = graph.get(m).into_iter().flat_map(|e| e.keys());
            todo.extend(next.filter(|n| seen.insert(*n)));
        }
        (start, seen)
    };
    let reaches: BTreeMap<&ModPath, BTreeSet<&ModPath>> = graph.keys().map(reach).collect();
    let mut loops = Vec::new();
    for (m, r) in &reaches {
        let reaches_back = |n: &&ModPath| reaches.get(*n).is_some_and(|b| b.contains(m));
        let scc: Vec<&ModPath> = r.iter().copied().filter(reaches_back).collect();
        if scc.len() < 2 || scc[0] != *m {
            continue; // not a loop, or already listed from its first module
        }
        let (name, mut edges) = (|m: &ModPath| m.join("::"), Vec::new());
        for from in &scc {
            for (to, site) in graph[*from].iter().filter(|(to, _)| scc.contains(to)) {
                let ((_, rel, src), (_, first, line)) = (&files[site.file], &site.path);
                let code = |n: usize| src.lines().nth(n - 1).unwrap_or("").trim();
                let mut text = code(*first).to_string();
                if line != first {
                    text = format!("{text} ... {}", code(*line)); // a `use` over several lines
                }
                let (from, to) = (name(from), name(to));
                edges.push(format!("{from} -> {to}  ({dir}/{rel}:{line}: {text})"));
            }
        }
        let modules = scc.iter().map(|m| name(m)).collect();
        loops.push(Loop { modules, edges });
    }
    loops
}

/// Collects the `.rs` files below `dir` as (path relative to `src`, text), sorted by path.
fn read_crate(src: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
    let mut entries: Vec<_> = std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().path()).collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            read_crate(src, &path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            let rel = path.strip_prefix(src).unwrap().to_string_lossy().replace('\\', "/");
            out.push((rel, std::fs::read_to_string(&path).expect("read source file")));
        }
    }
}

/// The workspace's crates have no import loops between their modules.
#[test]
fn no_import_loops_between_modules() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let crates = std::fs::read_dir(root.join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path().join("src"));
    let mut dirs: Vec<_> = crates.chain([root.join("wasm/src")]).filter(|d| d.is_dir()).collect();
    dirs.sort();
    assert!(dirs.len() >= 2, "found too few crates under {}", root.display());
    let mut report = String::new();
    for dir in &dirs {
        let mut files = Vec::new();
        read_crate(dir, dir, &mut files);
        let shown = dir.strip_prefix(root).unwrap().display().to_string();
        let has_root = files.iter().any(|(rel, _)| rel == "lib.rs" || rel == "main.rs");
        assert!(has_root, "{shown}: no lib.rs or main.rs");
        for lp in find_loops(&shown, &files) {
            writeln!(report, "\n{shown}: loop between {}", lp.modules.join(", ")).unwrap();
            lp.edges.iter().for_each(|e| writeln!(report, "    {e}").unwrap());
        }
    }
    assert!(
        report.is_empty(),
        "import loops between the modules of a crate (a module may use its ancestors; nothing else may \
         loop back). Each `a -> b` is the first place where `a` uses `b`; break every loop at one of \
         them, e.g. by moving what both sides need into a module that uses neither:\n{report}"
    );
}

/// Checks that the fixture crate has exactly the loops `want` ("a, b; c, d"). In the fixture, `@path`
/// (relative to `src/`) starts a file; its text runs up to the next `@`.
fn check(fixture: &str, want: &str) {
    let mut files = Vec::new();
    for file in fixture.split('@').skip(1) {
        let (path, text) = file.split_once(char::is_whitespace).unwrap_or((file, ""));
        files.push((path.to_string(), text.to_string()));
    }
    let found: Vec<String> = find_loops("src", &files).iter().map(|l| l.modules.join(", ")).collect();
    assert_eq!(found.join("; "), want, "loops found in the fixture:\n{fixture}");
}

/// The checker finds the loops it should, and only those, on small fixture crates.
#[test]
fn finds_loops_in_fixtures() {
    // One fixture per line, then `=>` and the loops it must report.
    let cases = "
        // Plain `crate::` paths, then through a root re-export, in a `use` tree and not.
        @lib.rs mod a; mod b; @a.rs use crate::b::X; pub struct Y; @b.rs use crate::a::Y; => a, b
        @lib.rs pub use a::Y; @a.rs use crate::b::X; pub struct Y; @b.rs fn f(_: crate::Y) {} => a, b
        @lib.rs pub use a::Y; @a.rs use crate::b::X; pub struct Y; @b.rs use crate::{Y, c}; => a, b
        // A chain of re-exports (`crate::Z` is `b::i::Z`); nested `use` trees; globs; `as`.
        @lib.rs pub use b::Z; @b/mod.rs pub use i::Z; @b/i.rs use crate::c::G; @c.rs use crate::Z; => b::i, c
        @lib.rs @b/mod.rs pub use i::*; @b/i.rs use crate::{c::{g, *}}; struct Z; @c.rs use crate::b::Z; => b::i, c
        @lib.rs @m/mod.rs use x::B as P; @m/x.rs use super::{y::{A}, *}; @m/y.rs fn f() { super::P } => m::x, m::y
        // Between siblings through `super::`; from a parent to its child through a bare path.
        @lib.rs @m/mod.rs @m/x.rs use super::y::A; pub struct B; @m/y.rs fn f() -> super::x::B {} => m::x, m::y
        @lib.rs @p/mod.rs fn f() { c::g() } @p/c.rs use crate::q; @q.rs use crate::p::f; => p, p::c, q
        // A child using its parent (`super::`, `crate::`) while the parent uses the child is fine.
        @lib.rs @p/mod.rs fn f() { c::g() } @p/c.rs use super::*; fn g() { crate::p::f() } =>
        // Two loops in a `main.rs` crate; a `main.rs` beside a `lib.rs`, and `bin/`, are other crates.
        @main.rs @a.rs crate::b::f(); @b.rs crate::a::f(); @c.rs crate::d::f(); @d.rs crate::c::f(); => a, b; c, d
        @lib.rs @main.rs use crate::a::f; @a.rs crate::main::f(); crate::bin::x::g(); @bin/x.rs crate::a::g(); =>
    ";
    for case in cases.lines().map(str::trim).filter(|l| l.starts_with('@')) {
        let (fixture, want) = case.rsplit_once("=>").unwrap();
        check(fixture, want.trim());
    }
    // Comments, strings, chars and lifetimes do not create edges, nor hide the code after them.
    let tricky = r###"@lib.rs @b.rs use crate::a::Y; @c.rs fn g(_: crate::a::Y) {}
        @a.rs
        // crate::b::X
        /* crate::b::X /* nested */ crate::b::X */
        /// crate::b::X
        fn f<'a>(s: &'a str) -> (char, &'static str, &[u8]) {
            let _ = ('"', '\'', b'"', "crate::b::X \" crate::b::X", br#"crate::b::X"#, 0x1f_u8, r#type);
            (r##"crate::"#b::X"##, 'x', "")
        }
        use crate::c::Z;"###;
    check(tricky, "a, c");
    // An acyclic crate: layers a -> b -> c, re-exports, parents and children using each other, tests.
    let acyclic = r#"
        @lib.rs mod a; mod b; mod c; pub use c::C;
        @a.rs use crate::{b::B, C}; mod tests { use super::*; use crate::b; }
        @b/mod.rs pub mod inner; pub use inner::B; fn f() -> crate::C { inner::g() }
        @b/inner.rs use super::super::c::C; pub struct B; pub fn g() -> C { super::f() }
        @c.rs pub struct C; mod tests { use super::C; fn t() { let _ = "crate::a::A"; } }"#;
    check(acyclic, "");
}
