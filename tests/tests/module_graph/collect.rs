//! Reading a target's modules: follows `mod` declarations from the root file, parses each file
//! with `syn` and records, per module scope (a file or an inline module), what it declares
//! (child modules, items, `use` aliases and globs) and every path it writes.

use std::fs;
use std::path::{Path, PathBuf};

use proc_macro2::{TokenStream, TokenTree};
use syn::visit::Visit;

/// A module path from the crate root (`[]` for the root).
pub type ModPath = Vec<String>;

/// A path written somewhere in a module.
pub struct Ref {
    /// The module scope it was written in (a file's module or an inline module inside it).
    pub scope: ModPath,
    /// The segments as written (`crate`, `super`, `self`, `$crate` included).
    pub path: Vec<String>,
    pub line: usize,
    /// Written in a `use` item (a root's `use` items are its facade and are not counted).
    pub in_use: bool,
}

/// One module file of a target.
pub struct ModFile {
    pub path: ModPath,
    pub file: PathBuf,
    /// Inline modules inside this file, as full paths.
    pub inline: Vec<ModPath>,
    /// `(scope, name)` of every child module declared (file or inline).
    pub children: Vec<(ModPath, String)>,
    /// `(scope, name)` of every item defined at module level (not inside function bodies).
    pub items: Vec<(ModPath, String)>,
    /// `(scope, name, path as written)` of every `use` that names something.
    pub aliases: Vec<(ModPath, String, Vec<String>)>,
    /// `(scope, path as written)` of every `use path::*`.
    pub globs: Vec<(ModPath, Vec<String>)>,
    pub refs: Vec<Ref>,
}

/// Parses `file` (module `path`) and, recursively, the module files it declares;
/// `owns_dir`: the file's children live in its own folder (`lib.rs`, `main.rs`, `mod.rs`).
pub fn collect(
    file: &Path,
    path: ModPath,
    owns_dir: bool,
    out: &mut Vec<ModFile>,
) -> Result<(), String> {
    let text = fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    let ast = syn::parse_file(&text).map_err(|e| format!("{}: {e}", file.display()))?;
    let dir = if owns_dir {
        file.parent().unwrap().to_path_buf()
    } else {
        file.with_extension("")
    };
    let mut v = Collector {
        out: ModFile {
            path: path.clone(),
            file: file.to_path_buf(),
            inline: Vec::new(),
            children: Vec::new(),
            items: Vec::new(),
            aliases: Vec::new(),
            globs: Vec::new(),
            refs: Vec::new(),
        },
        scope: path.clone(),
        decls: Vec::new(),
        in_use: false,
    };
    v.record_items(&ast.items);
    for item in &ast.items {
        v.visit_item(item);
    }
    let Collector {
        out: modfile,
        decls,
        ..
    } = v;
    out.push(modfile);
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

fn item_attrs(i: &syn::Item) -> &[syn::Attribute] {
    match i {
        syn::Item::Const(x) => &x.attrs,
        syn::Item::Enum(x) => &x.attrs,
        syn::Item::ExternCrate(x) => &x.attrs,
        syn::Item::Fn(x) => &x.attrs,
        syn::Item::ForeignMod(x) => &x.attrs,
        syn::Item::Impl(x) => &x.attrs,
        syn::Item::Macro(x) => &x.attrs,
        syn::Item::Mod(x) => &x.attrs,
        syn::Item::Static(x) => &x.attrs,
        syn::Item::Struct(x) => &x.attrs,
        syn::Item::Trait(x) => &x.attrs,
        syn::Item::TraitAlias(x) => &x.attrs,
        syn::Item::Type(x) => &x.attrs,
        syn::Item::Union(x) => &x.attrs,
        syn::Item::Use(x) => &x.attrs,
        _ => &[],
    }
}

struct Collector {
    out: ModFile,
    scope: ModPath,
    /// File modules declared at file level: (name, `#[path]`).
    decls: Vec<(String, Option<String>)>,
    in_use: bool,
}

impl Collector {
    fn push(&mut self, path: Vec<String>, line: usize) {
        if !path.is_empty() {
            self.out.refs.push(Ref {
                scope: self.scope.clone(),
                path,
                line,
                in_use: self.in_use,
            });
        }
    }

    /// The names a module scope defines (not those of function bodies).
    fn record_items(&mut self, items: &[syn::Item]) {
        for i in items {
            if is_cfg_test(item_attrs(i)) {
                continue;
            }
            let name = match i {
                syn::Item::Const(x) => Some(&x.ident),
                syn::Item::Enum(x) => Some(&x.ident),
                syn::Item::Fn(x) => Some(&x.sig.ident),
                syn::Item::Mod(x) => Some(&x.ident),
                syn::Item::Static(x) => Some(&x.ident),
                syn::Item::Struct(x) => Some(&x.ident),
                syn::Item::Trait(x) => Some(&x.ident),
                syn::Item::Type(x) => Some(&x.ident),
                syn::Item::Union(x) => Some(&x.ident),
                syn::Item::Macro(x) => x.ident.as_ref(),
                _ => None,
            };
            if let Some(n) = name {
                self.out.items.push((self.scope.clone(), n.to_string()));
            }
        }
    }

    fn use_tree(&mut self, prefix: &mut Vec<String>, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(p) => {
                prefix.push(p.ident.to_string());
                self.use_tree(prefix, &p.tree);
                prefix.pop();
            }
            syn::UseTree::Name(n) => self.use_name(prefix, &n.ident, &n.ident),
            syn::UseTree::Rename(r) => self.use_name(prefix, &r.ident, &r.rename),
            syn::UseTree::Glob(g) => {
                self.out.globs.push((self.scope.clone(), prefix.clone()));
                self.push(prefix.clone(), g.star_token.span.start().line);
            }
            syn::UseTree::Group(g) => {
                for t in &g.items {
                    self.use_tree(prefix, t);
                }
            }
        }
    }

    /// `use prefix::ident as alias` (`self` names the prefix itself).
    fn use_name(&mut self, prefix: &[String], ident: &syn::Ident, alias: &syn::Ident) {
        let mut p = prefix.to_vec();
        if ident != "self" {
            p.push(ident.to_string());
        }
        let name = if alias == "self" {
            p.last().cloned().unwrap_or_default()
        } else {
            alias.to_string()
        };
        if name != "_" {
            self.out.aliases.push((self.scope.clone(), name, p.clone()));
        }
        self.push(p, ident.span().start().line);
    }

    /// Every `a :: b :: c` (and `$crate :: ..`) inside a macro's tokens, not preceded by `::`.
    fn tokens(&mut self, ts: TokenStream) {
        let toks: Vec<TokenTree> = ts.into_iter().collect();
        let is_colon =
            |t: Option<&TokenTree>| matches!(t, Some(TokenTree::Punct(p)) if p.as_char() == ':');
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
            let TokenTree::Ident(head) = &toks[start] else {
                i += 1;
                continue;
            };
            if !dollar && i > 0 && is_colon(toks.get(i - 1)) {
                i += 1;
                continue;
            }
            let line = head.span().start().line;
            let mut path = vec![if dollar {
                "$crate".to_string()
            } else {
                head.to_string()
            }];
            let mut j = start + 1;
            while is_colon(toks.get(j)) && is_colon(toks.get(j + 1)) {
                let Some(TokenTree::Ident(id)) = toks.get(j + 2) else {
                    break;
                };
                path.push(id.to_string());
                j += 3;
            }
            if path.len() > 1 {
                self.push(path, line);
            }
            i = j.max(i + 1);
        }
    }
}

impl<'ast> Visit<'ast> for Collector {
    fn visit_item(&mut self, i: &'ast syn::Item) {
        if !is_cfg_test(item_attrs(i)) {
            syn::visit::visit_item(self, i);
        }
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        let name = m.ident.to_string();
        self.out.children.push((self.scope.clone(), name.clone()));
        match &m.content {
            None => self.decls.push((name, path_attr(&m.attrs))),
            Some((_, items)) => {
                self.scope.push(name);
                self.out.inline.push(self.scope.clone());
                self.record_items(items);
                for it in items {
                    self.visit_item(it);
                }
                self.scope.pop();
            }
        }
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        if u.leading_colon.is_some() {
            return; // `::extern_crate::..`
        }
        self.in_use = true;
        self.use_tree(&mut Vec::new(), &u.tree);
        self.in_use = false;
    }

    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.leading_colon.is_none() {
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
