//! The module graph of every workspace crate must be acyclic.
//!
//! NCCL's rule for `nccl_device/` (types acyclic, functions may call across) applied to symcomm:
//! this test parses each crate's modules (following `mod` declarations from `lib.rs`/`main.rs`
//! and every `src/bin` target, skipping `#[cfg(test)]` code), collects every reference from one
//! module to another (`use` items and paths anywhere in the code, `crate::`, `super::`,
//! `self::`, a child module's name, and `crate::`/`$crate::` paths inside macro bodies), and
//! fails with the cycle and the lines that form it when the references of a crate form a cycle.
//!
//! - A path is charged to the longest module prefix it names; inline modules (`mod backend
//!   { .. }`) count as part of their file. Paths through the crate root follow the root's
//!   re-exports (`crate::Error` is charged to `error`); the root itself is the crate's facade
//!   and its own edges are not counted.
//! - A concept's backend files count as part of it: a child module named `nvptx` or `host`
//!   (device crates: inline PTX / emulation), `gpu` or `emu` (host crates: driver / memfd
//!   resources) or `tests` is merged into its parent (`mem/nvptx.rs` is `mem`). Other files of
//!   a folder are modules of their own.
//! - [`ALLOWED`] lists edges that may close a cycle, each with the reason NCCL's rule is met.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// Edges allowed to close a cycle: (crate, from module, to module, why NCCL's rule holds).
/// Empty: no cycle needs an exception today.
const ALLOWED: &[(&str, &str, &str, &str)] = &[];

/// The crates checked: (name, source folder relative to the workspace root).
const CRATES: &[(&str, &str)] = &[
    ("symcomm", "host/src"),
    ("symcomm-device", "device/src"),
    ("symcomm-macros", "device/macros/src"),
    ("symcomm-build", "toolchain/src"),
    ("symcomm-gallery", "kernels-gallery/src"),
    ("symcomm-gallery-kernels", "kernels-gallery/kernels/src"),
    ("symcomm-examples", "examples/src"),
    ("symcomm-example-kernels", "examples/kernels/src"),
    ("symcomm-tests", "tests/src"),
    ("symcomm-test-kernels", "tests/kernels/src"),
];

/// Child modules that are one backend (or the tests) of their parent's concept: merged into it.
const BACKEND_CHILDREN: &[&str] = &["nvptx", "host", "gpu", "emu", "tests"];

#[test]
fn no_crate_has_a_module_cycle() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut report = String::new();
    let mut summary = String::new();
    for (name, src) in CRATES {
        for target in targets(&root.join(src)) {
            let graph = Graph::load(&target).unwrap_or_else(|e| panic!("{name}: {e}"));
            let label = format!("{name} ({})", target.display_name());
            writeln!(
                summary,
                "{label}: {} modules, {} edges",
                graph.nodes.len(),
                graph.edge_count()
            )
            .unwrap();
            for cycle in graph.cycles(name) {
                writeln!(report, "{label}: {cycle}").unwrap();
            }
        }
    }
    println!("{summary}");
    assert!(
        report.is_empty(),
        "module cycles (break them, or allow-list one edge with the reason):\n{report}"
    );
}

#[test]
fn every_allowed_edge_names_a_crate_checked_here_and_a_reason() {
    for (krate, from, to, why) in ALLOWED {
        assert!(
            CRATES.iter().any(|(n, _)| n == krate),
            "{krate} is not checked"
        );
        assert!(
            !from.is_empty() && !to.is_empty() && why.len() > 20,
            "{krate}: {from} -> {to}"
        );
    }
}

// ---- the checker's own tests: each builds a small crate in a temporary folder ----

fn fixture(files: &[(&str, &str)]) -> (tempdir::Dir, Vec<String>) {
    let dir = tempdir::Dir::new();
    for (path, text) in files {
        let p = dir.path().join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }
    let mut cycles = Vec::new();
    for t in targets(dir.path()) {
        cycles.extend(Graph::load(&t).unwrap().cycles("fixture"));
    }
    (dir, cycles)
}

#[test]
fn checker_finds_a_cycle_through_use_items() {
    let (_d, c) = fixture(&[
        ("lib.rs", "mod a; mod b;"),
        ("a.rs", "use crate::b::B; pub struct A(B);"),
        ("b.rs", "pub struct B; pub fn f(_: &crate::a::A) {}"),
    ]);
    assert_eq!(c.len(), 1, "{c:?}");
    assert!(c[0].contains("a -> b") && c[0].contains("b -> a"), "{c:?}");
    assert!(c[0].contains("a.rs:1") && c[0].contains("b.rs:1"), "{c:?}");
}

#[test]
fn checker_finds_cycles_through_super_child_names_and_macro_bodies() {
    let (_d, c) = fixture(&[
        ("lib.rs", "mod p;"),
        ("p/mod.rs", "mod q; pub struct P; fn f() { q::g() }"),
        ("p/q.rs", "pub fn g() { let _ = super::P; }"),
    ]);
    assert_eq!(c.len(), 1, "{c:?}");
    let (_d, c) = fixture(&[
        ("lib.rs", "mod a; mod b;"),
        ("a.rs", "pub fn f() { m!(crate::b::g()) }"),
        ("b.rs", "pub fn g() { crate::a::f() }"),
    ]);
    assert_eq!(c.len(), 1, "{c:?}");
}

#[test]
fn checker_follows_root_reexports_and_skips_test_code() {
    let (_d, c) = fixture(&[
        ("lib.rs", "mod a; mod b; pub use b::B;"),
        (
            "a.rs",
            "pub struct A(crate::B);\n#[cfg(test)] mod tests { use crate::b::B; }",
        ),
        ("b.rs", "pub struct B;\n#[cfg(test)]\nmod tests;"),
        ("b/tests.rs", "use crate::a::A;"),
    ]);
    assert!(c.is_empty(), "{c:?}");
    let (_d, c) = fixture(&[
        ("lib.rs", "mod p;"),
        ("p/mod.rs", "mod q; pub struct P(q::Q);"),
        ("p/q.rs", "pub(super) struct Q; pub(in crate::p) fn f() {}"),
    ]);
    assert!(c.is_empty(), "a visibility is not a reference: {c:?}");
    let (_d, c) = fixture(&[
        ("lib.rs", "mod a; mod b; pub use b::B;"),
        ("a.rs", "pub struct A(crate::B);"),
        ("b.rs", "pub struct B; fn f(_: crate::a::A) {}"),
    ]);
    assert_eq!(c.len(), 1, "the root's re-export is charged to b: {c:?}");
}

#[test]
fn checker_treats_a_backend_folder_as_one_module() {
    let files = [
        ("lib.rs", "mod m; mod emu;"),
        (
            "m/mod.rs",
            "mod host; pub struct T; pub fn f() { host::g() }",
        ),
        ("m/host.rs", "pub fn g() { crate::emu::h() }"),
        ("emu.rs", "pub fn h() {}"),
    ];
    let (_d, c) = fixture(&files);
    assert!(c.is_empty(), "{c:?}");
    let (_d, c) = fixture(&[
        files[0],
        files[1],
        files[2],
        ("emu.rs", "pub fn h(_: crate::m::T) {}"),
    ]);
    assert_eq!(c.len(), 1, "m (with m::host) <-> emu: {c:?}");
    assert!(
        c[0].contains("m -> emu") && c[0].contains("emu -> m"),
        "{c:?}"
    );
    // A sibling that is not a backend is a module of its own: m <-> m::args is a cycle.
    let (_d, c) = fixture(&[
        ("lib.rs", "mod m;"),
        (
            "m/mod.rs",
            "mod gpu; mod args; pub struct T; pub use args::A;",
        ),
        ("m/gpu.rs", "pub fn g(_: super::T) {}"),
        ("m/args.rs", "pub struct A; fn f(_: super::T) {}"),
    ]);
    assert_eq!(c.len(), 1, "{c:?}");
    assert!(
        c[0].contains("m -> m::args") && c[0].contains("m::args -> m"),
        "{c:?}"
    );
}

#[test]
fn checker_treats_each_bin_as_its_own_crate() {
    let (_d, c) = fixture(&[
        ("lib.rs", "pub mod a;"),
        ("a.rs", "pub fn f() {}"),
        ("bin/tool/main.rs", "mod x; mod y;"),
        ("bin/tool/x.rs", "pub fn f() { crate::y::g() }"),
        ("bin/tool/y.rs", "pub fn g() { crate::x::f() }"),
    ]);
    assert_eq!(c.len(), 1, "{c:?}");
    assert!(c[0].contains("x -> y"), "{c:?}");
}

// ---- the checker ----

/// One compilation target: a library or a binary with its module tree.
struct Target {
    root_file: PathBuf,
    name: String,
}

impl Target {
    fn display_name(&self) -> &str {
        &self.name
    }
}

/// `lib.rs`/`main.rs` and every `bin/*.rs` or `bin/*/main.rs` under `src`.
fn targets(src: &Path) -> Vec<Target> {
    let mut out = Vec::new();
    for (file, name) in [("lib.rs", "lib"), ("main.rs", "main")] {
        if src.join(file).exists() {
            out.push(Target {
                root_file: src.join(file),
                name: name.into(),
            });
        }
    }
    if let Ok(rd) = fs::read_dir(src.join("bin")) {
        let mut bins: Vec<_> = rd.filter_map(Result::ok).map(|e| e.path()).collect();
        bins.sort();
        for p in bins {
            let stem = p.file_stem().unwrap().to_string_lossy().into_owned();
            if p.extension().is_some_and(|e| e == "rs") {
                out.push(Target {
                    root_file: p,
                    name: format!("bin {stem}"),
                });
            } else if p.join("main.rs").exists() {
                out.push(Target {
                    root_file: p.join("main.rs"),
                    name: format!("bin {stem}"),
                });
            }
        }
    }
    out
}

/// A reference from one place in a module to a module path.
struct Ref {
    path: Vec<String>,
    line: usize,
}

/// A module file of a target.
struct ModFile {
    /// Module path from the crate root (`[]` for the root).
    path: Vec<String>,
    file: PathBuf,
    /// Inline modules inside this file, as full paths.
    inline: Vec<Vec<String>>,
    /// Names of child modules declared in it (file or inline), per containing module path.
    children: Vec<(Vec<String>, String)>,
    /// References, each with the module path (file or inline) it was written in.
    refs: Vec<(Vec<String>, Ref)>,
    /// `pub use` re-exports of the root: name -> target path (root only).
    reexports: Vec<(String, Vec<String>)>,
}

struct Graph {
    /// Node name -> the files it covers.
    nodes: BTreeMap<String, Vec<PathBuf>>,
    /// (from, to) -> first place it happens (file:line).
    edges: BTreeMap<(String, String), String>,
}

impl Graph {
    fn load(target: &Target) -> Result<Graph, String> {
        let mut files = Vec::new();
        collect(&target.root_file, Vec::new(), true, &mut files)?;

        // Module path -> node: a concept absorbs its backend children.
        let modules: BTreeSet<Vec<String>> = files
            .iter()
            .flat_map(|f| std::iter::once(f.path.clone()).chain(f.inline.iter().cloned()))
            .collect();
        let mut node_of: HashMap<Vec<String>, String> = HashMap::new();
        let mut nodes: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        for f in &files {
            let owner = match f.path.split_last() {
                Some((last, parent))
                    if !parent.is_empty() && BACKEND_CHILDREN.contains(&last.as_str()) =>
                {
                    parent
                }
                _ => &f.path[..],
            };
            let name = node_name(owner);
            nodes.entry(name.clone()).or_default().push(f.file.clone());
            node_of.insert(f.path.clone(), name.clone());
            for m in &f.inline {
                node_of.insert(m.clone(), name.clone());
            }
        }
        let root = files.iter().find(|f| f.path.is_empty()).ok_or("no root")?;
        let reexports: HashMap<&str, &Vec<String>> = root
            .reexports
            .iter()
            .map(|(n, p)| (n.as_str(), p))
            .collect();

        let mut edges = BTreeMap::new();
        for f in &files {
            let from = node_of[&f.path].clone();
            if from == node_name(&[]) {
                continue;
            }
            for (scope, r) in &f.refs {
                let Some(abs) = absolute(scope, &r.path, &f.children, &modules) else {
                    continue;
                };
                let abs = follow_root(abs, &reexports);
                // The longest module prefix.
                let Some(target) = (0..=abs.len())
                    .rev()
                    .map(|n| abs[..n].to_vec())
                    .find(|p| modules.contains(p))
                else {
                    continue;
                };
                let to = node_of[&target].clone();
                if to != from && to != node_name(&[]) {
                    edges
                        .entry((from.clone(), to))
                        .or_insert_with(|| format!("{}:{}", shown(&f.file), r.line));
                }
            }
        }
        Ok(Graph { nodes, edges })
    }

    fn edge_count(&self) -> usize {
        self.edges.len()
    }

    /// One line per strongly connected component of more than one module: a shortest cycle
    /// through its first module, each edge with the place it comes from.
    fn cycles(&self, krate: &str) -> Vec<String> {
        let allowed: BTreeSet<(&str, &str)> = ALLOWED
            .iter()
            .filter(|(k, ..)| *k == krate)
            .map(|(_, f, t, _)| (*f, *t))
            .collect();
        let mut adj: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (f, t) in self.edges.keys() {
            if !allowed.contains(&(f.as_str(), t.as_str())) {
                adj.entry(f).or_default().push(t);
            }
        }
        let mut out = Vec::new();
        for scc in tarjan(
            &self.nodes.keys().map(String::as_str).collect::<Vec<_>>(),
            &adj,
        ) {
            if scc.len() < 2 {
                continue;
            }
            let members: BTreeSet<&str> = scc.iter().copied().collect();
            let start = *members.iter().next().unwrap();
            let cycle = shortest_cycle(start, &adj, &members);
            let mut line = format!(
                "{} modules in a cycle ({}):",
                scc.len(),
                members.iter().copied().collect::<Vec<_>>().join(", ")
            );
            for w in cycle.windows(2) {
                let at = &self.edges[&(w[0].to_string(), w[1].to_string())];
                write!(line, " {} -> {} ({at});", w[0], w[1]).unwrap();
            }
            out.push(line);
        }
        out
    }
}

/// `file` relative to the workspace root (or as it is, for fixtures elsewhere).
fn shown(file: &Path) -> String {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let file = file.strip_prefix(root.join("tests/..")).unwrap_or(file);
    file.display().to_string()
}

fn node_name(path: &[String]) -> String {
    if path.is_empty() {
        "crate".into()
    } else {
        path.join("::")
    }
}

/// A path written in module `scope` as an absolute module path, or `None` when it does not
/// start inside this crate (an extern crate, a local item, a type parameter, ...).
fn absolute(
    scope: &[String],
    path: &[String],
    children: &[(Vec<String>, String)],
    modules: &BTreeSet<Vec<String>>,
) -> Option<Vec<String>> {
    let first = path.first()?;
    let mut base: Vec<String>;
    let mut rest = path;
    match first.as_str() {
        "crate" | "$crate" => {
            base = Vec::new();
            rest = &path[1..];
        }
        "self" | "super" => {
            base = scope.to_vec();
            while let Some(s) = rest.first() {
                match s.as_str() {
                    "self" => {}
                    "super" => {
                        base.pop()?;
                    }
                    _ => break,
                }
                rest = &rest[1..];
            }
        }
        name => {
            // A child module of the scope named without a prefix.
            if !children.iter().any(|(m, c)| m == scope && c == name) {
                return None;
            }
            base = scope.to_vec();
        }
    }
    base.extend(rest.iter().cloned());
    let _ = modules;
    Some(base)
}

/// `crate::X` for an `X` the root re-exports is charged to where it comes from.
fn follow_root(abs: Vec<String>, reexports: &HashMap<&str, &Vec<String>>) -> Vec<String> {
    if let Some(first) = abs.first()
        && let Some(target) = reexports.get(first.as_str())
    {
        let mut p = (*target).clone();
        p.extend(abs[1..].iter().cloned());
        return p;
    }
    abs
}

fn tarjan<'a>(nodes: &[&'a str], adj: &BTreeMap<&'a str, Vec<&'a str>>) -> Vec<Vec<&'a str>> {
    struct St<'a> {
        index: HashMap<&'a str, usize>,
        low: HashMap<&'a str, usize>,
        on: BTreeSet<&'a str>,
        stack: Vec<&'a str>,
        next: usize,
        out: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(v: &'a str, adj: &BTreeMap<&'a str, Vec<&'a str>>, s: &mut St<'a>) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on.insert(v);
        for &w in adj.get(v).map(Vec::as_slice).unwrap_or(&[]) {
            if !s.index.contains_key(w) {
                visit(w, adj, s);
                let l = s.low[w].min(s.low[v]);
                s.low.insert(v, l);
            } else if s.on.contains(w) {
                let l = s.index[w].min(s.low[v]);
                s.low.insert(v, l);
            }
        }
        if s.low[v] == s.index[v] {
            let mut scc = Vec::new();
            loop {
                let w = s.stack.pop().unwrap();
                s.on.remove(w);
                scc.push(w);
                if w == v {
                    break;
                }
            }
            s.out.push(scc);
        }
    }
    let mut s = St {
        index: HashMap::new(),
        low: HashMap::new(),
        on: BTreeSet::new(),
        stack: Vec::new(),
        next: 0,
        out: Vec::new(),
    };
    for &n in nodes {
        if !s.index.contains_key(n) {
            visit(n, adj, &mut s);
        }
    }
    s.out
}

/// The shortest path `start -> .. -> start` inside `members` (breadth first).
fn shortest_cycle<'a>(
    start: &'a str,
    adj: &BTreeMap<&'a str, Vec<&'a str>>,
    members: &BTreeSet<&'a str>,
) -> Vec<&'a str> {
    let mut prev: HashMap<&str, &str> = HashMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    while let Some(v) = queue.pop_front() {
        for &w in adj.get(v).map(Vec::as_slice).unwrap_or(&[]) {
            if w == start {
                // start -> .. -> v, then back to start.
                let mut path = vec![v];
                let mut x = v;
                while x != start {
                    x = prev[x];
                    path.push(x);
                }
                path.reverse();
                path.push(start);
                return path;
            }
            if members.contains(w) && !prev.contains_key(w) {
                prev.insert(w, v);
                queue.push_back(w);
            }
        }
    }
    unreachable!("{start} is in a strongly connected component of more than one module")
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

fn path_attr(attrs: &[syn::Attribute]) -> Option<String> {
    attrs
        .iter()
        .find(|a| a.path().is_ident("path"))
        .and_then(|a| match &a.meta {
            syn::Meta::NameValue(nv) => match &nv.value {
                syn::Expr::Lit(syn::ExprLit {
                    lit: syn::Lit::Str(s),
                    ..
                }) => Some(s.value()),
                _ => None,
            },
            _ => None,
        })
}

/// Parses `file` (module `path`) and, recursively, the module files it declares.
fn collect(
    file: &Path,
    path: Vec<String>,
    owns_dir: bool,
    out: &mut Vec<ModFile>,
) -> Result<(), String> {
    let text = fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let ast = syn::parse_file(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    // The folder that holds this module's child files.
    let dir = if owns_dir {
        file.parent().unwrap().to_path_buf()
    } else {
        file.with_extension("")
    };
    let mut v = Collector {
        scope: path.clone(),
        inline: Vec::new(),
        children: Vec::new(),
        refs: Vec::new(),
        decls: Vec::new(),
        reexports: Vec::new(),
        is_root: path.is_empty(),
    };
    v.visit_file(&ast);
    let Collector {
        inline,
        children,
        refs,
        decls,
        reexports,
        ..
    } = v;
    out.push(ModFile {
        path: path.clone(),
        file: file.to_path_buf(),
        inline,
        children,
        refs,
        reexports,
    });
    for (name, custom) in decls {
        let mut child = path.clone();
        child.push(name.clone());
        let (f, owns) = match custom {
            Some(p) => {
                let f = file.parent().unwrap().join(p);
                let owns = f.file_name().is_some_and(|n| n == "mod.rs");
                (f, owns)
            }
            None if dir.join(format!("{name}.rs")).exists() => {
                (dir.join(format!("{name}.rs")), false)
            }
            None => (dir.join(&name).join("mod.rs"), true),
        };
        collect(&f, child, owns, out)?;
    }
    Ok(())
}

struct Collector {
    scope: Vec<String>,
    inline: Vec<Vec<String>>,
    children: Vec<(Vec<String>, String)>,
    refs: Vec<(Vec<String>, Ref)>,
    /// File modules declared at file level: (name, `#[path]`).
    decls: Vec<(String, Option<String>)>,
    reexports: Vec<(String, Vec<String>)>,
    is_root: bool,
}

impl Collector {
    fn push(&mut self, path: Vec<String>, line: usize) {
        if !path.is_empty() {
            self.refs.push((self.scope.clone(), Ref { path, line }));
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree, public_root: bool) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree, public_root);
                prefix.pop();
            }
            syn::UseTree::Name(n) => {
                let mut p = prefix.clone();
                if n.ident != "self" {
                    p.push(n.ident.to_string());
                }
                if public_root {
                    self.reexport(&n.ident.to_string(), &p);
                }
                self.push(p, n.ident.span().start().line);
            }
            syn::UseTree::Rename(r) => {
                let mut p = prefix.clone();
                if r.ident != "self" {
                    p.push(r.ident.to_string());
                }
                if public_root {
                    self.reexport(&r.rename.to_string(), &p);
                }
                self.push(p, r.ident.span().start().line);
            }
            syn::UseTree::Glob(g) => {
                self.push(prefix.clone(), g.star_token.span.start().line);
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t, public_root);
                }
            }
        }
    }

    /// A root re-export: `pub use a::b::C` makes `crate::C` mean `crate::a::b::C`.
    fn reexport(&mut self, name: &str, p: &[String]) {
        let abs: Vec<String> = match p.first().map(String::as_str) {
            Some("crate") | Some("self") => p[1..].to_vec(),
            _ => p.to_vec(),
        };
        self.reexports.push((name.to_string(), abs));
    }

    /// `crate :: a :: b`, `$crate :: a`, `super :: x` sequences inside a macro's tokens.
    fn tokens(&mut self, ts: TokenStream) {
        let toks: Vec<TokenTree> = ts.into_iter().collect();
        let mut i = 0;
        while i < toks.len() {
            if let TokenTree::Group(g) = &toks[i] {
                self.tokens(g.stream());
                i += 1;
                continue;
            }
            let dollar = matches!(&toks[i], TokenTree::Punct(p) if p.as_char() == '$')
                && matches!(toks.get(i + 1), Some(TokenTree::Ident(id)) if id == "crate");
            let start = if dollar { i + 1 } else { i };
            let is_head = matches!(&toks[start], TokenTree::Ident(id) if id == "crate" || id == "super")
                && (dollar
                    || !matches!(i.checked_sub(1).map(|j| &toks[j]), Some(TokenTree::Punct(p)) if p.as_char() == ':'));
            if !is_head {
                i += 1;
                continue;
            }
            let line = toks[start].span().start().line;
            let mut path = vec![toks[start].to_string()];
            let mut j = start + 1;
            while let (
                Some(TokenTree::Punct(a)),
                Some(TokenTree::Punct(b)),
                Some(TokenTree::Ident(id)),
            ) = (toks.get(j), toks.get(j + 1), toks.get(j + 2))
            {
                if a.as_char() != ':' || b.as_char() != ':' {
                    break;
                }
                path.push(id.to_string());
                j += 3;
            }
            if path.len() > 1 {
                self.push(path, line);
            }
            i = j;
        }
    }
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if is_cfg_test(&m.attrs) {
            return;
        }
        let name = m.ident.to_string();
        self.children.push((self.scope.clone(), name.clone()));
        match &m.content {
            None => {
                // Only file-level declarations name files here (inline-nested files are not used).
                self.decls.push((name, path_attr(&m.attrs)));
            }
            Some((_, items)) => {
                self.scope.push(name);
                self.inline.push(self.scope.clone());
                let was_root = std::mem::replace(&mut self.is_root, false);
                for it in items {
                    self.visit_item(it);
                }
                self.is_root = was_root;
                self.scope.pop();
            }
        }
    }

    fn visit_item(&mut self, i: &'ast syn::Item) {
        let attrs = match i {
            syn::Item::Fn(x) => &x.attrs,
            syn::Item::Impl(x) => &x.attrs,
            syn::Item::Use(x) => &x.attrs,
            syn::Item::Const(x) => &x.attrs,
            syn::Item::Static(x) => &x.attrs,
            syn::Item::Struct(x) => &x.attrs,
            syn::Item::Enum(x) => &x.attrs,
            syn::Item::Trait(x) => &x.attrs,
            syn::Item::Macro(x) => &x.attrs,
            _ => {
                syn::visit::visit_item(self, i);
                return;
            }
        };
        if !is_cfg_test(attrs) {
            syn::visit::visit_item(self, i);
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let public_root = self.is_root && matches!(u.vis, syn::Visibility::Public(_));
        let mut prefix = Vec::new();
        if u.leading_colon.is_some() {
            return; // `::extern_crate::..`
        }
        self.use_tree(&mut prefix, &u.tree, public_root);
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        // A one-segment path is a local name unless it is `self`/`super`/`crate` (a child
        // module is only named through a longer path or a `use`).
        if p.leading_colon.is_none() && (p.segments.len() > 1 || p.is_ident("super")) {
            let segs: Vec<String> = p.segments.iter().map(|s| s.ident.to_string()).collect();
            let line = p
                .segments
                .first()
                .map(|s| s.ident.span().start().line)
                .unwrap_or(0);
            self.push(segs, line);
        }
        syn::visit::visit_path(self, p);
    }

    /// `pub(super)`, `pub(in crate::x)`: who may see an item, not a reference.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_macro(&mut self, m: &'ast syn::Macro) {
        self.visit_path(&m.path);
        self.tokens(m.tokens.clone());
    }
}

/// A temporary folder removed on drop (no extra dependency for the checker's own tests).
mod tempdir {
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU32, Ordering};

    pub struct Dir(PathBuf);

    impl Dir {
        pub fn new() -> Dir {
            static N: AtomicU32 = AtomicU32::new(0);
            let p = std::env::temp_dir().join(format!(
                "symcomm-modgraph-{}-{}",
                std::process::id(),
                N.fetch_add(1, Ordering::Relaxed)
            ));
            std::fs::create_dir_all(&p).unwrap();
            Dir(p)
        }
        pub fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
