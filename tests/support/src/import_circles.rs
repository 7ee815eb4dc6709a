//! Counts the import circles of a crate: groups of two or more modules that import each
//! other, directly or around a loop (the strongly connected components of the module
//! graph).
//!
//! The module tree is read from a crate root (`lib.rs`, `main.rs`) by following its `mod`
//! declarations (`#[path]` included); an edge goes from a module to the module a path names,
//! for `use` trees and for paths in code that start with `crate::`, `super::`, `self::` or the
//! name of a child module. Items under `#[cfg(test)]` (unit tests) are left out: they import
//! what they test. A module and its ancestors are in each other's scope by design (a
//! `mod.rs` declares its children and they use its shared items), so edges between them are
//! not counted; circles are between modules neither of which contains the other.
//!
//! It is a small parser, not the compiler: a path through a re-export counts as an import of
//! the module that re-exports, and macros are not expanded.
//!
//! `cargo run -p test-support --bin import_circles -- grl/server/src/lib.rs ...` prints each
//! crate's circles and their total.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// One module of the tree.
#[derive(Debug)]
struct Module {
    /// `crate`-relative path, `""` for the root.
    path: String,
    parent: Option<usize>,
    children: Vec<(String, usize)>,
    /// The names this module's paths name, unresolved: (segments, relative to this module).
    refs: Vec<Vec<String>>,
}

/// The module graph of one crate.
#[derive(Debug)]
pub struct Graph {
    modules: Vec<Module>,
    edges: Vec<BTreeSet<usize>>,
}

#[derive(Debug, Clone, PartialEq)]
enum Tok {
    Ident(String),
    Str(String),
    PathSep,
    Punct(char),
}

fn lex(src: &str) -> Vec<Tok> {
    let b = src.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c.is_ascii_whitespace() {
            i += 1;
        } else if b[i..].starts_with(b"//") {
            while i < b.len() && b[i] != b'\n' {
                i += 1;
            }
        } else if b[i..].starts_with(b"/*") {
            let mut depth = 0;
            while i < b.len() {
                if b[i..].starts_with(b"/*") {
                    depth += 1;
                    i += 2;
                } else if b[i..].starts_with(b"*/") {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if let Some(n) = raw_string(&b[i..]) {
            out.push(Tok::Str(String::new()));
            i += n;
        } else if c == b'"' || (c == b'b' && b.get(i + 1) == Some(&b'"')) {
            if c == b'b' {
                i += 1;
            }
            i += 1;
            let start = i;
            while i < b.len() && b[i] != b'"' {
                if b[i] == b'\\' {
                    i += 1;
                }
                i += 1;
            }
            out.push(Tok::Str(src[start..i.min(b.len())].to_string()));
            i += 1;
        } else if c == b'\'' {
            // A char literal ('a', '\n', '\u{..}') or a lifetime ('a).
            if b.get(i + 1) == Some(&b'\\') {
                i += 2;
                while i < b.len() && b[i] != b'\'' {
                    i += 1;
                }
                i += 1;
            } else if b.get(i + 2) == Some(&b'\'') {
                i += 3;
            } else {
                // A lifetime or a multi-byte char: skip the quote, the name follows.
                let ch_len = src[i + 1..].chars().next().map_or(1, char::len_utf8);
                if b.get(i + 1 + ch_len) == Some(&b'\'') {
                    i += 2 + ch_len;
                } else {
                    i += 1;
                    while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                        i += 1;
                    }
                }
            }
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let start = i;
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                i += 1;
            }
            let word = &src[start..i];
            // Raw identifiers (r#type) are identifiers.
            if word == "r"
                && b.get(i) == Some(&b'#')
                && b.get(i + 1).is_some_and(u8::is_ascii_alphabetic)
            {
                i += 1;
                let s = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_') {
                    i += 1;
                }
                out.push(Tok::Ident(src[s..i].to_string()));
            } else {
                out.push(Tok::Ident(word.to_string()));
            }
        } else if c.is_ascii_digit() {
            while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.') {
                if b[i] == b'.' && !b.get(i + 1).is_some_and(u8::is_ascii_digit) {
                    break;
                }
                i += 1;
            }
        } else if b[i..].starts_with(b"::") {
            out.push(Tok::PathSep);
            i += 2;
        } else if c.is_ascii() {
            out.push(Tok::Punct(c as char));
            i += 1;
        } else {
            i += src[i..].chars().next().map_or(1, char::len_utf8);
        }
    }
    out
}

/// The length of a raw string literal (`r"…"`, `r#"…"#`, `br#"…"#`) at the start of `b`.
fn raw_string(b: &[u8]) -> Option<usize> {
    let mut i = 0;
    if b.first() == Some(&b'b') {
        i += 1;
    }
    if b.get(i) != Some(&b'r') {
        return None;
    }
    i += 1;
    let hashes = b[i..].iter().take_while(|&&c| c == b'#').count();
    i += hashes;
    if b.get(i) != Some(&b'"') {
        return None;
    }
    i += 1;
    while i < b.len() {
        if b[i] == b'"'
            && b[i + 1..]
                .iter()
                .take(hashes)
                .filter(|&&c| c == b'#')
                .count()
                == hashes
        {
            return Some(i + 1 + hashes);
        }
        i += 1;
    }
    Some(b.len())
}

fn ident(t: Option<&Tok>) -> Option<&str> {
    match t {
        Some(Tok::Ident(s)) => Some(s),
        _ => None,
    }
}

/// The end (exclusive) of the group opened at `i` (`{`, `[` or `(`).
fn close(toks: &[Tok], i: usize) -> usize {
    let mut depth = 0usize;
    let mut j = i;
    while j < toks.len() {
        match toks[j] {
            Tok::Punct('{' | '[' | '(') => depth += 1,
            Tok::Punct('}' | ']' | ')') => {
                depth -= 1;
                if depth == 0 {
                    return j + 1;
                }
            }
            _ => {}
        }
        j += 1;
    }
    toks.len()
}

/// The end (exclusive) of the item starting at `i`: its `;` or its closing `}` at depth 0.
fn item_end(toks: &[Tok], mut i: usize) -> usize {
    while i < toks.len() {
        match toks[i] {
            Tok::Punct(';') => return i + 1,
            Tok::Punct('{') => {
                let e = close(toks, i);
                return if toks.get(e) == Some(&Tok::Punct(';')) {
                    e + 1
                } else {
                    e
                };
            }
            Tok::Punct('[' | '(') => i = close(toks, i),
            _ => i += 1,
        }
    }
    toks.len()
}

/// Reads a `use` tree at `i`, adding each full path to `out`; returns the index after it.
fn use_tree(toks: &[Tok], mut i: usize, prefix: &[String], out: &mut Vec<Vec<String>>) -> usize {
    let mut path = prefix.to_vec();
    loop {
        match toks.get(i) {
            Some(Tok::PathSep) => i += 1,
            Some(Tok::Ident(s)) if s == "as" => {
                i += 2;
                out.push(path);
                return i;
            }
            Some(Tok::Ident(s)) if s == "self" && !path.is_empty() => {
                i += 1;
            }
            Some(Tok::Ident(s)) => {
                path.push(s.clone());
                i += 1;
            }
            Some(Tok::Punct('*')) => {
                out.push(path);
                return i + 1;
            }
            Some(Tok::Punct('{')) => {
                i += 1;
                while !matches!(toks.get(i), None | Some(Tok::Punct('}'))) {
                    i = use_tree(toks, i, &path, out);
                    if toks.get(i) == Some(&Tok::Punct(',')) {
                        i += 1;
                    }
                }
                return i + 1;
            }
            _ => {
                out.push(path);
                return i;
            }
        }
    }
}

fn is_cfg_test(attr: &[Tok]) -> bool {
    // #[cfg(test)], and cfg(all(test, …)) or the like.
    attr.windows(3).any(|w| {
        w[0] == Tok::Ident("cfg".into())
            && w[1] == Tok::Punct('(')
            && (w[2] == Tok::Ident("test".into())
                || attr.iter().any(|t| *t == Tok::Ident("test".into()))
                    && !attr.iter().any(|t| *t == Tok::Ident("not".into())))
    })
}

fn path_attr(attr: &[Tok]) -> Option<String> {
    match attr {
        [
            Tok::Punct('#'),
            Tok::Punct('['),
            Tok::Ident(p),
            Tok::Punct('='),
            Tok::Str(s),
            Tok::Punct(']'),
        ] if p == "path" => Some(s.clone()),
        _ => None,
    }
}

struct Builder {
    modules: Vec<Module>,
}

impl Builder {
    fn add(&mut self, path: String, parent: Option<usize>) -> usize {
        self.modules.push(Module {
            path,
            parent,
            children: Vec::new(),
            refs: Vec::new(),
        });
        self.modules.len() - 1
    }

    /// Reads module `m` from `toks`; `dir` is where its `mod x;` files are, `file_dir` the
    /// directory of its file (for `#[path]`).
    fn read(&mut self, m: usize, toks: &[Tok], dir: &Path, file_dir: &Path) -> std::io::Result<()> {
        let mut i = 0;
        let mut attrs: Vec<&[Tok]> = Vec::new();
        while i < toks.len() {
            if toks[i] == Tok::Punct('#') {
                let s = i;
                let mut j = i + 1;
                if toks.get(j) == Some(&Tok::Punct('!')) {
                    j += 1;
                }
                if toks.get(j) == Some(&Tok::Punct('[')) {
                    let e = close(toks, j);
                    if toks.get(i + 1) != Some(&Tok::Punct('!')) {
                        attrs.push(&toks[s..e]);
                    }
                    i = e;
                    continue;
                }
            }
            if attrs.iter().any(|a| is_cfg_test(a)) {
                i = item_end(toks, i);
                attrs.clear();
                continue;
            }
            let mut j = i;
            // Visibility: pub, pub(crate), pub(super), pub(in …).
            if ident(toks.get(j)) == Some("pub") {
                j += 1;
                if toks.get(j) == Some(&Tok::Punct('(')) {
                    j = close(toks, j);
                }
            }
            if ident(toks.get(j)) == Some("mod")
                && let Some(name) = ident(toks.get(j + 1)).map(str::to_string)
            {
                let path = if self.modules[m].path.is_empty() {
                    name.clone()
                } else {
                    format!("{}::{name}", self.modules[m].path)
                };
                let child = self.add(path, Some(m));
                self.modules[m].children.push((name.clone(), child));
                match toks.get(j + 2) {
                    Some(Tok::Punct('{')) => {
                        let e = close(toks, j + 2);
                        let sub = dir.join(&name);
                        self.read(child, &toks[j + 3..e - 1], &sub, &sub)?;
                        i = e;
                    }
                    _ => {
                        let file = match attrs.iter().find_map(|a| path_attr(a)) {
                            Some(p) => file_dir.join(p),
                            None => {
                                let flat = dir.join(format!("{name}.rs"));
                                if flat.exists() {
                                    flat
                                } else {
                                    dir.join(&name).join("mod.rs")
                                }
                            }
                        };
                        self.read_file(child, &file)?;
                        i = j + 3;
                    }
                }
                attrs.clear();
                continue;
            }
            attrs.clear();
            if ident(toks.get(j)) == Some("use") {
                let mut paths = Vec::new();
                let mut k = j + 1;
                if toks.get(k) == Some(&Tok::PathSep) {
                    // `use ::other_crate::…`
                    i = item_end(toks, k);
                    continue;
                }
                k = use_tree(toks, k, &[], &mut paths);
                self.modules[m].refs.extend(paths);
                i = item_end(toks, k.saturating_sub(1).max(j));
                continue;
            }
            // A path in code: ident (:: ident)*, not preceded by `::`.
            if let Tok::Ident(first) = &toks[i]
                && toks.get(i + 1) == Some(&Tok::PathSep)
                && (i == 0 || toks[i - 1] != Tok::PathSep)
            {
                let mut segs = vec![first.clone()];
                let mut k = i + 1;
                while toks.get(k) == Some(&Tok::PathSep) {
                    match ident(toks.get(k + 1)) {
                        Some(s) => segs.push(s.to_string()),
                        None => break,
                    }
                    k += 2;
                }
                self.modules[m].refs.push(segs);
                i = k;
                continue;
            }
            i += 1;
        }
        Ok(())
    }

    fn read_file(&mut self, m: usize, file: &Path) -> std::io::Result<()> {
        let src = std::fs::read_to_string(file)
            .map_err(|e| std::io::Error::new(e.kind(), format!("{}: {e}", file.display())))?;
        let toks = lex(&src);
        let file_dir = file.parent().unwrap_or(Path::new(".")).to_path_buf();
        let stem = file
            .file_stem()
            .and_then(|s| s.to_str())
            .unwrap_or_default();
        let dir = if matches!(stem, "mod" | "lib" | "main") || self.modules[m].parent.is_none() {
            file_dir.clone()
        } else {
            file_dir.join(stem)
        };
        self.read(m, &toks, &dir, &file_dir)
    }
}

impl Graph {
    /// Reads the crate whose root file is `root`.
    pub fn read(root: &Path) -> std::io::Result<Self> {
        let mut b = Builder {
            modules: Vec::new(),
        };
        let r = b.add(String::new(), None);
        b.read_file(r, root)?;
        let modules = b.modules;
        let mut edges = vec![BTreeSet::new(); modules.len()];
        for (m, module) in modules.iter().enumerate() {
            for segs in &module.refs {
                if let Some(t) = resolve(&modules, m, segs)
                    && !nested(&modules, m, t)
                {
                    edges[m].insert(t);
                }
            }
        }
        Ok(Self { modules, edges })
    }

    /// The import circles: each a sorted list of module paths, the list sorted.
    pub fn circles(&self) -> Vec<Vec<String>> {
        let mut out: Vec<Vec<String>> = tarjan(&self.edges)
            .into_iter()
            .filter(|c| c.len() > 1)
            .map(|c| {
                let mut names: Vec<String> =
                    c.iter().map(|&m| self.modules[m].path.clone()).collect();
                names.sort();
                names
            })
            .collect();
        out.sort();
        out
    }

    /// The imports inside one circle, `from -> to`, for a listing.
    pub fn edges_within(&self, circle: &[String]) -> Vec<(String, String)> {
        let mut out = Vec::new();
        for (m, targets) in self.edges.iter().enumerate() {
            if !circle.contains(&self.modules[m].path) {
                continue;
            }
            for &t in targets {
                if circle.contains(&self.modules[t].path) {
                    out.push((self.modules[m].path.clone(), self.modules[t].path.clone()));
                }
            }
        }
        out
    }
}

/// Whether `a` is `b` or one contains the other.
fn nested(modules: &[Module], a: usize, b: usize) -> bool {
    let contains = |outer: usize, mut inner: usize| loop {
        if inner == outer {
            return true;
        }
        match modules[inner].parent {
            Some(p) => inner = p,
            None => return false,
        }
    };
    contains(a, b) || contains(b, a)
}

/// The module a path from module `m` names (the deepest module along it), if it is in this
/// crate.
fn resolve(modules: &[Module], m: usize, segs: &[String]) -> Option<usize> {
    let child = |cur: usize, name: &str| {
        modules[cur]
            .children
            .iter()
            .find(|(n, _)| n == name)
            .map(|&(_, c)| c)
    };
    let mut cur;
    let mut rest = segs;
    match segs.first().map(String::as_str) {
        Some("crate") => {
            cur = 0;
            rest = &segs[1..];
        }
        Some("self") => {
            cur = m;
            rest = &segs[1..];
        }
        Some("super") => {
            cur = m;
            while rest.first().map(String::as_str) == Some("super") {
                cur = modules[cur].parent?;
                rest = &rest[1..];
            }
        }
        Some(name) if child(m, name).is_some() => cur = m,
        _ => return None,
    }
    for s in rest {
        match child(cur, s) {
            Some(c) => cur = c,
            None => break,
        }
    }
    Some(cur)
}

/// Strongly connected components (Tarjan), iteratively.
fn tarjan(edges: &[BTreeSet<usize>]) -> Vec<Vec<usize>> {
    let n = edges.len();
    let mut index = vec![usize::MAX; n];
    let mut low = vec![0; n];
    let mut on_stack = vec![false; n];
    let mut stack = Vec::new();
    let mut next = 0;
    let mut out = Vec::new();
    let succ: Vec<Vec<usize>> = edges.iter().map(|s| s.iter().copied().collect()).collect();
    for start in 0..n {
        if index[start] != usize::MAX {
            continue;
        }
        let mut call: Vec<(usize, usize)> = vec![(start, 0)];
        index[start] = next;
        low[start] = next;
        next += 1;
        stack.push(start);
        on_stack[start] = true;
        while let Some(&mut (v, ref mut k)) = call.last_mut() {
            if *k < succ[v].len() {
                let w = succ[v][*k];
                *k += 1;
                if index[w] == usize::MAX {
                    index[w] = next;
                    low[w] = next;
                    next += 1;
                    stack.push(w);
                    on_stack[w] = true;
                    call.push((w, 0));
                } else if on_stack[w] {
                    low[v] = low[v].min(index[w]);
                }
            } else {
                call.pop();
                if let Some(&(u, _)) = call.last() {
                    low[u] = low[u].min(low[v]);
                }
                if low[v] == index[v] {
                    let mut comp = Vec::new();
                    while let Some(w) = stack.pop() {
                        on_stack[w] = false;
                        comp.push(w);
                        if w == v {
                            break;
                        }
                    }
                    out.push(comp);
                }
            }
        }
    }
    out
}

/// A listing of the circles of the crates at `roots` (crate root files, relative to
/// `base`), and their total.
pub fn report(base: &Path, roots: &[PathBuf]) -> std::io::Result<(String, usize)> {
    let mut text = String::new();
    let mut total = 0;
    for root in roots {
        let g = Graph::read(&base.join(root))?;
        let circles = g.circles();
        total += circles.len();
        let _ = writeln!(text, "{}: {} import circles", root.display(), circles.len());
        for c in &circles {
            let _ = writeln!(text, "  {}", c.join(", "));
            for (from, to) in g.edges_within(c) {
                let _ = writeln!(text, "      {from} -> {to}");
            }
        }
    }
    Ok((text, total))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
    }

    #[test]
    fn finds_a_circle_between_siblings_and_none_with_a_parent() {
        let dir = tempfile::tempdir().unwrap();
        let w = |p: &str, s: &str| {
            let f = dir.path().join(p);
            std::fs::create_dir_all(f.parent().unwrap()).unwrap();
            std::fs::write(f, s).unwrap();
        };
        w(
            "lib.rs",
            "pub mod a; pub mod b; mod c; pub struct Shared;\n",
        );
        w(
            "a.rs",
            "use crate::{b::B, Shared};\npub struct A; // crate::c::C\n",
        );
        w(
            "b.rs",
            "pub struct B(super::a::A);\n#[cfg(test)]\nmod tests { use crate::c::C; }\n",
        );
        w("c/mod.rs", "pub mod d;\nuse d::D;\npub struct C;\n");
        w("c/d.rs", "pub struct D(super::C, crate::Shared);\n");
        let g = Graph::read(&dir.path().join("lib.rs")).unwrap();
        assert_eq!(g.circles(), vec![vec!["a".to_string(), "b".to_string()]]);
    }

    /// No crate of the workspace has an import circle (there were 12 before the server was
    /// layered, the configurator grouped by stage and the client split into its control
    /// plane and its buckets).
    #[test]
    fn no_crate_has_an_import_circle() {
        let roots = [
            "grl/core/src/lib.rs",
            "grl/config/src/lib.rs",
            "grl/client/src/lib.rs",
            "grl/server/src/lib.rs",
            "grl/server/src/main.rs",
            "policies/src/lib.rs",
            "rlc/src/lib.rs",
            "rlc/src/main.rs",
        ];
        for root in roots {
            let circles = Graph::read(&workspace().join(root)).unwrap().circles();
            assert!(circles.is_empty(), "import circles in {root}: {circles:#?}");
        }
    }

    /// The server crate's tiers, engine and network pieces have no import circle (there were
    /// 4 before they were layered into `net`, `tier::engine` and `tier::observe`).
    #[test]
    fn server_tier_and_net_have_no_import_circle() {
        let g = Graph::read(&workspace().join("grl/server/src/lib.rs")).unwrap();
        let inside = |m: &String| {
            m == "tier" || m.starts_with("tier::") || m == "net" || m.starts_with("net::")
        };
        let circles: Vec<_> = g
            .circles()
            .into_iter()
            .filter(|c| c.iter().any(inside))
            .collect();
        assert!(
            circles.is_empty(),
            "import circles in tier/net: {circles:#?}"
        );
    }
}
