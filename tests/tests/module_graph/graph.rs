//! The module graph of one target and its cycles: every written path is resolved to the module
//! it names (through `crate`/`self`/`super`, child modules, `use` aliases and globs), charged to
//! that module's node, and the strongly connected components of the edges are the cycles.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet, VecDeque};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

use crate::collect::{ModFile, ModPath, collect};

/// One compilation target: a library or a binary with its module tree.
pub struct Target {
    pub root_file: PathBuf,
    pub name: String,
}

/// `lib.rs`/`main.rs` and every `bin/*.rs` or `bin/*/main.rs` under `src`.
pub fn targets(src: &Path) -> Vec<Target> {
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
            let root_file = if p.extension().is_some_and(|e| e == "rs") {
                p
            } else if p.join("main.rs").exists() {
                p.join("main.rs")
            } else {
                continue;
            };
            out.push(Target {
                root_file,
                name: format!("bin {stem}"),
            });
        }
    }
    out
}

pub struct Graph {
    /// Node name -> the files it covers.
    pub nodes: BTreeMap<String, Vec<PathBuf>>,
    /// (from, to) -> the first place it happens (file:line).
    pub edges: BTreeMap<(String, String), String>,
}

/// What each module scope declares, for resolving paths.
#[derive(Default)]
struct Names {
    modules: BTreeSet<ModPath>,
    children: HashMap<ModPath, HashSet<String>>,
    items: HashMap<ModPath, HashSet<String>>,
    aliases: HashMap<ModPath, HashMap<String, Vec<String>>>,
    globs: HashMap<ModPath, Vec<Vec<String>>>,
}

/// How deep alias and glob chains are followed (`use a::b; use b::*; ...`).
const MAX_DEPTH: usize = 8;

impl Names {
    fn new(files: &[ModFile]) -> Names {
        let mut n = Names::default();
        for f in files {
            n.modules.insert(f.path.clone());
            n.modules.extend(f.inline.iter().cloned());
            for (s, c) in &f.children {
                n.children.entry(s.clone()).or_default().insert(c.clone());
            }
            for (s, i) in &f.items {
                n.items.entry(s.clone()).or_default().insert(i.clone());
            }
            for (s, name, p) in &f.aliases {
                n.aliases
                    .entry(s.clone())
                    .or_default()
                    .entry(name.clone())
                    .or_insert_with(|| p.clone());
            }
            for (s, p) in &f.globs {
                n.globs.entry(s.clone()).or_default().push(p.clone());
            }
        }
        n
    }

    fn has(map: &HashMap<ModPath, HashSet<String>>, scope: &[String], name: &str) -> bool {
        map.get(scope).is_some_and(|s| s.contains(name))
    }

    /// The absolute path (segments from the crate root) that `path`, written in `scope`,
    /// names; `None` when it does not start inside this crate (an extern crate, a local
    /// variable, a type parameter, a prelude name, ...).
    fn resolve(&self, scope: &[String], path: &[String], depth: usize) -> Option<ModPath> {
        let first = path.first()?;
        if depth > MAX_DEPTH {
            return None;
        }
        let abs = match first.as_str() {
            "crate" | "$crate" => path[1..].to_vec(),
            "self" | "super" => {
                let mut base = scope.to_vec();
                let mut rest = path;
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
                base.extend(rest.iter().cloned());
                base
            }
            name => return self.in_scope(scope, name, &path[1..], depth),
        };
        // `crate::X` / `super::X` where X is not a module of that scope: a name the scope
        // imports (an alias or a glob) is followed; anything else stays as it is.
        Some(self.through_imports(abs, depth))
    }

    /// `name::rest` looked up in `scope`'s namespace: a child module, an item, an alias, or a
    /// name one of its globs brings in.
    fn in_scope(
        &self,
        scope: &[String],
        name: &str,
        rest: &[String],
        depth: usize,
    ) -> Option<ModPath> {
        let with_rest = |base: &[String]| {
            let mut p = base.to_vec();
            p.push(name.to_string());
            p.extend(rest.iter().cloned());
            p
        };
        // A one-segment path never names a module (a local variable may share a child
        // module's name); a longer one may.
        let child = !rest.is_empty() && Names::has(&self.children, scope, name);
        if child || Names::has(&self.items, scope, name) {
            return Some(with_rest(scope));
        }
        if let Some(target) = self.aliases.get(scope).and_then(|a| a.get(name)) {
            let mut p = target.clone();
            p.extend(rest.iter().cloned());
            return self.resolve(scope, &p, depth + 1);
        }
        for g in self.globs.get(scope).into_iter().flatten() {
            let Some(m) = self.resolve(scope, g, depth + 1) else {
                continue;
            };
            if self.modules.contains(&m)
                && (Names::has(&self.children, &m, name)
                    || Names::has(&self.items, &m, name)
                    || self.aliases.get(&m).is_some_and(|a| a.contains_key(name)))
            {
                return self.in_scope(&m, name, rest, depth + 1);
            }
        }
        None
    }

    /// Follows the first segment below the longest module prefix of `abs` through that
    /// module's imports when it is not a module or an item there.
    fn through_imports(&self, abs: ModPath, depth: usize) -> ModPath {
        let Some(module) = (0..=abs.len())
            .rev()
            .map(|n| abs[..n].to_vec())
            .find(|p| self.modules.contains(p))
        else {
            return abs;
        };
        let Some(next) = abs.get(module.len()) else {
            return abs;
        };
        if Names::has(&self.items, &module, next) {
            return abs;
        }
        self.in_scope(&module, next, &abs[module.len() + 1..], depth + 1)
            .unwrap_or(abs)
    }
}

impl Graph {
    /// Reads `target`; `backends` are the child-module names merged into their parent.
    pub fn load(target: &Target, backends: &[&str]) -> Result<Graph, String> {
        let mut files = Vec::new();
        collect(&target.root_file, Vec::new(), true, &mut files)?;
        let names = Names::new(&files);

        // Module path -> node: a concept absorbs its backend children and its inline modules.
        let mut node_of: HashMap<ModPath, String> = HashMap::new();
        let mut nodes: BTreeMap<String, Vec<PathBuf>> = BTreeMap::new();
        for f in &files {
            let owner = match f.path.split_last() {
                Some((last, parent))
                    if !parent.is_empty()
                        && (last == "tests" || backends.contains(&last.as_str())) =>
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

        let root = node_name(&[]);
        let mut edges = BTreeMap::new();
        for f in &files {
            let from = &node_of[&f.path];
            for r in &f.refs {
                // The root's `use` items are the crate's facade (re-exports, imports); its own
                // items' paths count.
                if *from == root && r.in_use {
                    continue;
                }
                let Some(abs) = names.resolve(&r.scope, &r.path, 0) else {
                    continue;
                };
                let Some(module) = (0..=abs.len())
                    .rev()
                    .map(|n| abs[..n].to_vec())
                    .find(|p| names.modules.contains(p))
                else {
                    continue;
                };
                // A path into the root counts only when it names an item the root defines.
                if module.is_empty()
                    && !abs
                        .first()
                        .is_some_and(|n| Names::has(&names.items, &[], n))
                {
                    continue;
                }
                let to = &node_of[&module];
                if to != from {
                    edges
                        .entry((from.clone(), to.clone()))
                        .or_insert_with(|| format!("{}:{}", shown(&f.file), r.line));
                }
            }
        }
        Ok(Graph { nodes, edges })
    }

    /// One line per strongly connected component of more than one module, ignoring the
    /// `allowed` edges: a shortest cycle through its first module, each edge with the place
    /// it comes from.
    pub fn cycles(&self, allowed: &[(&str, &str)]) -> Vec<String> {
        let mut adj: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
        for (f, t) in self.edges.keys() {
            if !allowed.contains(&(f.as_str(), t.as_str())) {
                adj.entry(f).or_default().push(t);
            }
        }
        let mut out = Vec::new();
        let nodes: Vec<&str> = self.nodes.keys().map(String::as_str).collect();
        for scc in tarjan(&nodes, &adj) {
            if scc.len() < 2 {
                continue;
            }
            let members: BTreeSet<&str> = scc.iter().copied().collect();
            let start = *members.iter().next().unwrap();
            let mut line = format!(
                "{} modules in a cycle ({}):",
                scc.len(),
                members.iter().copied().collect::<Vec<_>>().join(", ")
            );
            for w in shortest_cycle(start, &adj, &members).windows(2) {
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

fn tarjan<'a>(nodes: &[&'a str], adj: &BTreeMap<&'a str, Vec<&'a str>>) -> Vec<Vec<&'a str>> {
    struct St<'a> {
        index: HashMap<&'a str, usize>,
        low: HashMap<&'a str, usize>,
        on: BTreeSet<&'a str>,
        stack: Vec<&'a str>,
        out: Vec<Vec<&'a str>>,
    }
    fn visit<'a>(v: &'a str, adj: &BTreeMap<&'a str, Vec<&'a str>>, s: &mut St<'a>) {
        let i = s.index.len();
        s.index.insert(v, i);
        s.low.insert(v, i);
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
    let mut queue = VecDeque::from([start]);
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
