//! The layout a newcomer walks: within each crate of the workspace, every module
//! stands above what it uses — no two modules reach each other through `crate::` or
//! `super::` paths, directly or around a circle (`docs/design.md#repository-layout`) —
//! and opens with a header of at most [`HEADER_LINES`] lines (the why is in `docs/`).
#![allow(clippy::unwrap_used, clippy::expect_used)] // test code: a panic is the failure report

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

type Module = Vec<String>;

fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate sits in the workspace root")
        .to_path_buf()
}

/// Every crate's `src` directory under `dir` (build output and dot-directories left out).
fn crate_sources(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name().to_string_lossy().into_owned();
        if !path.is_dir() || name.starts_with('.') || name.starts_with("target") {
            continue;
        }
        if path.join("Cargo.toml").is_file() && path.join("src").is_dir() {
            out.push(path.join("src"));
        }
        crate_sources(&path, out);
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir)
        .expect("readable source directory")
        .flatten()
    {
        let path = entry.path();
        if path.is_dir() {
            if path.file_name().is_some_and(|n| n != "bin") {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// `src/a/b.rs` and `src/a/b/mod.rs` are module `a::b`; `lib.rs`/`main.rs` the root.
fn module_of(src: &Path, file: &Path) -> Module {
    let rel = file.strip_prefix(src).expect("file under src");
    let mut parts: Module = rel
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if parts
        .last()
        .is_some_and(|l| l == "mod" || l == "lib" || l == "main")
    {
        parts.pop();
    }
    parts
}

/// The code of a file without comment lines and without its test module.
fn code(text: &str) -> String {
    let mut kept = Vec::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        if t.starts_with("#[cfg(test)]")
            && lines
                .peek()
                .is_some_and(|next| next.trim_start().starts_with("mod "))
        {
            break;
        }
        if !t.starts_with("//") {
            kept.push(line);
        }
    }
    kept.join("\n")
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The paths a piece of code names through `crate::` and `super::`, each as the module
/// path it starts from plus its segments; `{a::x, b}` groups give one path per item.
fn named_paths(code: &str, here: &Module) -> Vec<Module> {
    let mut out = Vec::new();
    let bytes: Vec<char> = code.chars().collect();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !is_ident(bytes[i - 1]);
        let rest: String = bytes[i..bytes.len().min(i + 7)].iter().collect();
        let (mut base, skip) = if starts_word && rest.starts_with("crate::") {
            (Module::new(), 7)
        } else if starts_word && rest.starts_with("super::") {
            (here[..here.len().saturating_sub(1)].to_vec(), 7)
        } else {
            i += 1;
            continue;
        };
        i += skip;
        while bytes[i..].iter().take(7).collect::<String>() == "super::" {
            base.pop();
            i += 7;
        }
        let (paths, end) = segments(&bytes, i);
        for p in paths {
            let mut full = base.clone();
            full.extend(p);
            out.push(full);
        }
        i = end.max(i + 1);
    }
    out
}

/// The path segments from `i` (`a::b::c`, or a `{…}` group of such), and where they end.
fn segments(bytes: &[char], mut i: usize) -> (Vec<Module>, usize) {
    let mut prefix = Module::new();
    loop {
        if bytes.get(i) == Some(&'{') {
            let mut depth = 0;
            let mut j = i;
            let mut items = Vec::new();
            let mut start = i + 1;
            while j < bytes.len() {
                match bytes[j] {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            items.push(start..j);
                            break;
                        }
                    }
                    ',' if depth == 1 => {
                        items.push(start..j);
                        start = j + 1;
                    }
                    _ => {}
                }
                j += 1;
            }
            let mut out = Vec::new();
            for r in items {
                let mut k = r.start;
                while k < r.end && bytes[k].is_whitespace() {
                    k += 1;
                }
                let (inner, _) = segments(&bytes[..r.end], k);
                for p in inner {
                    let mut full = prefix.clone();
                    full.extend(p);
                    out.push(full);
                }
            }
            return (out, j + 1);
        }
        let start = i;
        while i < bytes.len() && is_ident(bytes[i]) {
            i += 1;
        }
        if i == start {
            return (vec![prefix], i);
        }
        prefix.push(bytes[start..i].iter().collect());
        if bytes[i..].iter().take(2).collect::<String>() == "::" {
            i += 2;
        } else {
            return (vec![prefix], i);
        }
    }
}

/// The module graph of one crate: module → the modules it names (not itself, not its
/// ancestors: a child uses its parent's items by design).
fn graph(src: &Path) -> BTreeMap<Module, BTreeSet<Module>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let modules: BTreeMap<Module, PathBuf> =
        files.into_iter().map(|f| (module_of(src, &f), f)).collect();
    let mut edges = BTreeMap::new();
    for (m, file) in &modules {
        let text = std::fs::read_to_string(file).expect("readable source file");
        let mut deps = BTreeSet::new();
        for path in named_paths(&code(&text), m) {
            let target = (1..=path.len())
                .rev()
                .map(|k| path[..k].to_vec())
                .find(|p| modules.contains_key(p));
            if let Some(t) = target {
                if !m.starts_with(&t) {
                    deps.insert(t);
                }
            }
        }
        edges.insert(m.clone(), deps);
    }
    edges
}

/// The strongly connected components of more than one module (Tarjan).
fn circles(edges: &BTreeMap<Module, BTreeSet<Module>>) -> Vec<Vec<Module>> {
    struct Search<'a> {
        edges: &'a BTreeMap<Module, BTreeSet<Module>>,
        index: BTreeMap<Module, usize>,
        low: BTreeMap<Module, usize>,
        stack: Vec<Module>,
        on_stack: BTreeSet<Module>,
        found: Vec<Vec<Module>>,
    }
    impl Search<'_> {
        fn visit(&mut self, v: &Module) {
            let n = self.index.len();
            self.index.insert(v.clone(), n);
            self.low.insert(v.clone(), n);
            self.stack.push(v.clone());
            self.on_stack.insert(v.clone());
            for w in self.edges.get(v).into_iter().flatten() {
                if !self.index.contains_key(w) {
                    self.visit(w);
                    let lw = self.low[w];
                    let lv = self.low[v].min(lw);
                    self.low.insert(v.clone(), lv);
                } else if self.on_stack.contains(w) {
                    let lv = self.low[v].min(self.index[w]);
                    self.low.insert(v.clone(), lv);
                }
            }
            if self.low[v] == self.index[v] {
                let mut component = Vec::new();
                while let Some(w) = self.stack.pop() {
                    self.on_stack.remove(&w);
                    let last = &w == v;
                    component.push(w);
                    if last {
                        break;
                    }
                }
                if component.len() > 1 {
                    self.found.push(component);
                }
            }
        }
    }
    let mut s = Search {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on_stack: BTreeSet::new(),
        found: Vec::new(),
    };
    for v in edges.keys() {
        if !s.index.contains_key(v) {
            s.visit(v);
        }
    }
    s.found
}

#[test]
fn no_two_modules_of_a_crate_use_each_other() {
    let root = workspace_root();
    let mut sources = Vec::new();
    crate_sources(&root, &mut sources);
    assert!(sources.len() >= 8, "the workspace's crates: {sources:?}");
    let mut found = Vec::new();
    for src in &sources {
        for c in circles(&graph(src)) {
            let names: Vec<String> = c.iter().map(|m| m.join("::")).collect();
            found.push(format!(
                "{}: {}",
                src.strip_prefix(&root).unwrap_or(src).display(),
                names.join(" ⇄ ")
            ));
        }
    }
    assert!(
        found.is_empty(),
        "modules that use each other:\n{}",
        found.join("\n")
    );
}

#[test]
fn a_circle_of_modules_is_found() {
    let dir = std::env::temp_dir().join(format!("layout-circle-{}", std::process::id()));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("b")).unwrap();
    std::fs::write(src.join("lib.rs"), "mod a;\nmod b;\nmod c;\n").unwrap();
    std::fs::write(src.join("a.rs"), "use crate::b::{inner::X, Y};\n").unwrap();
    std::fs::write(src.join("b/mod.rs"), "mod inner;\npub struct Y;\n").unwrap();
    std::fs::write(
        src.join("b/inner.rs"),
        "pub struct X;\nuse super::super::c::Z;\n",
    )
    .unwrap();
    std::fs::write(
        src.join("c.rs"),
        "// use crate::a; in a comment is no use\npub struct Z;\nfn f() { crate::a::g() }\n#[cfg(test)]\nmod tests { use crate::b::Y; }\n",
    )
    .unwrap();
    let g = graph(&src);
    let found = circles(&g);
    std::fs::remove_dir_all(&dir).unwrap();
    let m = |s: &str| s.split("::").map(str::to_owned).collect::<Module>();
    assert_eq!(g[&m("a")], BTreeSet::from([m("b::inner"), m("b")]));
    assert_eq!(
        g[&m("c")],
        BTreeSet::from([m("a")]),
        "comments and tests are not uses"
    );
    assert_eq!(found.len(), 1, "{found:?}");
    let members: BTreeSet<Module> = found[0].iter().cloned().collect();
    assert_eq!(members, BTreeSet::from([m("a"), m("b::inner"), m("c")]));
}

/// The most `//!` lines a module opens with.
const HEADER_LINES: usize = 12;

/// The lines of the `//!` block a file opens with.
fn header_lines(text: &str) -> usize {
    text.lines().take_while(|l| l.starts_with("//!")).count()
}

#[test]
fn every_module_header_is_short() {
    let root = workspace_root();
    let mut sources = Vec::new();
    crate_sources(&root, &mut sources);
    let mut files = Vec::new();
    for src in &sources {
        rust_files(src, &mut files);
    }
    assert!(
        files.len() > 100,
        "the workspace's modules: {}",
        files.len()
    );
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = header_lines(&std::fs::read_to_string(f).ok()?);
            (n > HEADER_LINES).then(|| {
                format!(
                    "{} ({n} lines)",
                    f.strip_prefix(&root).unwrap_or(f).display()
                )
            })
        })
        .collect();
    assert!(
        long.is_empty(),
        "module headers longer than {HEADER_LINES} lines (move the why to docs/):\n{}",
        long.join("\n")
    );
    let thirteen = "//! a\n".repeat(13) + "\n//! not the header\nfn f() {}\n";
    assert_eq!(header_lines(&thirteen), 13);
}
