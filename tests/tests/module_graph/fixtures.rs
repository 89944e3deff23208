//! The checker's own tests: each builds a small crate in a temporary folder and asserts which
//! cycles the checker finds in it.

use std::fs;

use crate::graph::{Graph, targets};

/// The cycles of every target of a crate made of `files`, with `allowed` edges and the device
/// crates' backend names.
fn cycles_with(files: &[(&str, &str)], allowed: &[(&str, &str)]) -> Vec<String> {
    let dir = tempdir::Dir::new();
    for (path, text) in files {
        let p = dir.path().join(path);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    }
    let mut cycles = Vec::new();
    for t in targets(dir.path()) {
        cycles.extend(Graph::load(&t, &["nvptx", "host"]).unwrap().cycles(allowed));
    }
    cycles
}

fn cycles(files: &[(&str, &str)]) -> Vec<String> {
    cycles_with(files, &[])
}

#[test]
fn checker_finds_a_cycle_through_use_items() {
    let c = cycles(&[
        ("lib.rs", "mod a; mod b;"),
        ("a.rs", "use crate::b::B; pub struct A(B);"),
        ("b.rs", "pub struct B; pub fn f(_: &crate::a::A) {}"),
    ]);
    assert_eq!(c.len(), 1, "{c:?}");
    assert!(c[0].contains("a -> b") && c[0].contains("b -> a"), "{c:?}");
    assert!(c[0].contains("a.rs:1") && c[0].contains("b.rs:1"), "{c:?}");
}

#[test]
fn checker_finds_a_three_module_cycle() {
    let c = cycles(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", "pub fn f() { crate::b::f() }"),
        ("b.rs", "pub fn f() { crate::c::f() }"),
        ("c.rs", "pub fn f() { crate::a::f() }"),
    ]);
    assert_eq!(c.len(), 1, "{c:?}");
    assert!(c[0].starts_with("3 modules in a cycle (a, b, c)"), "{c:?}");
}

#[test]
fn checker_finds_cycles_through_super_child_names_and_macro_bodies() {
    let c = cycles(&[
        ("lib.rs", "mod p;"),
        ("p/mod.rs", "mod q; pub struct P; fn f() { q::g() }"),
        ("p/q.rs", "pub fn g() { let _ = super::P; }"),
    ]);
    assert_eq!(c.len(), 1, "{c:?}");
    let c = cycles(&[
        ("lib.rs", "mod a; mod b;"),
        ("a.rs", "pub fn f() { m!(crate::b::g()) }"),
        ("b.rs", "pub fn g() { crate::a::f() }"),
    ]);
    assert_eq!(c.len(), 1, "{c:?}");
    // `$crate::` in a macro_rules body, `self::` and a child name inside macro tokens.
    let c = cycles(&[
        ("lib.rs", "mod a; mod b;"),
        (
            "a.rs",
            "macro_rules! m { () => { $crate::b::g() } } pub fn f() {}",
        ),
        ("b.rs", "pub fn g() { crate::a::f() }"),
    ]);
    assert_eq!(c.len(), 1, "$crate: {c:?}");
    let c = cycles(&[
        ("lib.rs", "mod p;"),
        ("p/mod.rs", "mod q; pub struct P; fn f() { m!(q::g()) }"),
        ("p/q.rs", "pub fn g() { m!(self::super::P) }"),
    ]);
    assert_eq!(c.len(), 1, "child name and self:: in macro tokens: {c:?}");
}

#[test]
fn checker_follows_aliases_renames_and_globs() {
    // `use crate::p;` then `p::q::g()`: the edge goes to p::q, not only to p.
    let c = cycles(&[
        ("lib.rs", "mod a; mod p;"),
        ("a.rs", "use crate::p; pub fn f() { p::q::g() }"),
        ("p/mod.rs", "pub mod q;"),
        ("p/q.rs", "pub fn g() { crate::a::f() }"),
    ]);
    assert_eq!(c.len(), 1, "alias: {c:?}");
    assert!(c[0].contains("a -> p::q"), "{c:?}");
    let c = cycles(&[
        ("lib.rs", "mod a; mod b;"),
        ("a.rs", "use crate::b as bee; pub fn f() { bee::g() }"),
        ("b.rs", "pub fn g() { crate::a::f() }"),
    ]);
    assert_eq!(c.len(), 1, "rename: {c:?}");
    // `use super::*;` then a name of the parent.
    let c = cycles(&[
        ("lib.rs", "mod p;"),
        ("p/mod.rs", "mod q; pub struct R; fn g() { q::f(R) }"),
        ("p/q.rs", "use super::*; pub fn f(_: R) {}"),
    ]);
    assert_eq!(c.len(), 1, "glob: {c:?}");
    // A local variable that shares a child module's name is not the module.
    let c = cycles(&[
        ("lib.rs", "mod p;"),
        ("p/mod.rs", "mod q; pub struct R; pub fn g() { q::f() }"),
        ("p/q.rs", "pub fn f() { let p = 1; let _ = p; }"),
    ]);
    assert!(c.is_empty(), "{c:?}");
}

#[test]
fn checker_follows_reexports_and_skips_test_code() {
    let c = cycles(&[
        ("lib.rs", "mod a; mod b; pub use b::B;"),
        (
            "a.rs",
            "pub struct A(crate::B);\n#[cfg(test)] mod tests { use crate::b::B; }",
        ),
        ("b.rs", "pub struct B;\n#[cfg(test)]\nmod tests;"),
        ("b/tests.rs", "use crate::a::A;"),
    ]);
    assert!(c.is_empty(), "{c:?}");
    let c = cycles(&[
        ("lib.rs", "mod p;"),
        ("p/mod.rs", "mod q; pub struct P(q::Q);"),
        ("p/q.rs", "pub(super) struct Q; pub(in crate::p) fn f() {}"),
    ]);
    assert!(c.is_empty(), "a visibility is not a reference: {c:?}");
    let c = cycles(&[
        ("lib.rs", "mod a; mod b; pub use b::B;"),
        ("a.rs", "pub struct A(crate::B);"),
        ("b.rs", "pub struct B; fn f(_: crate::a::A) {}"),
    ]);
    assert_eq!(c.len(), 1, "the root's re-export is charged to b: {c:?}");
    // A module's re-export too: c uses b's B through a's re-export.
    let c = cycles(&[
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", "pub use crate::b::B;"),
        ("b.rs", "pub struct B; fn f() { crate::c::g() }"),
        ("c.rs", "pub fn g(_: crate::a::B) {}"),
    ]);
    assert_eq!(c.len(), 1, "{c:?}");
    assert!(c[0].contains("c -> b"), "{c:?}");
}

#[test]
fn checker_counts_the_roots_own_items_but_not_its_reexports() {
    let c = cycles(&[
        ("lib.rs", "mod a; pub struct Root(a::A);"),
        ("a.rs", "pub struct A; fn f(_: crate::Root) {}"),
    ]);
    assert_eq!(c.len(), 1, "{c:?}");
    assert!(
        c[0].contains("crate -> a") && c[0].contains("a -> crate"),
        "{c:?}"
    );
    let c = cycles(&[
        (
            "lib.rs",
            "mod a; pub use a::A; pub mod prelude { pub use crate::a::A; }",
        ),
        (
            "a.rs",
            "pub struct A; fn f(_: crate::A, _: crate::prelude::A) {}",
        ),
    ]);
    assert!(c.is_empty(), "{c:?}");
}

#[test]
fn checker_treats_backend_children_as_part_of_their_parent() {
    let files = [
        ("lib.rs", "mod m; mod emu;"),
        (
            "m/mod.rs",
            "mod host; pub struct T; pub fn f() { host::g() }",
        ),
        ("m/host.rs", "pub fn g() { crate::emu::h() }"),
        ("emu.rs", "pub fn h() {}"),
    ];
    let c = cycles(&files);
    assert!(c.is_empty(), "{c:?}");
    let c = cycles(&[
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
    // A sibling that is not a backend of this crate is a module of its own.
    let c = cycles(&[
        ("lib.rs", "mod m;"),
        ("m/mod.rs", "mod gpu; pub struct T; fn f() { gpu::g() }"),
        ("m/gpu.rs", "pub fn g(_: super::T) {}"),
    ]);
    assert_eq!(c.len(), 1, "gpu is not a device-crate backend: {c:?}");
    assert!(c[0].contains("m -> m::gpu"), "{c:?}");
}

#[test]
fn checker_reads_inline_modules_path_attributes_and_bins() {
    let c = cycles(&[
        ("lib.rs", "mod a; mod b;"),
        (
            "a.rs",
            "pub mod outer { pub mod inner { pub fn f() { crate::b::g() } } }",
        ),
        ("b.rs", "pub fn g() { crate::a::outer::inner::f() }"),
    ]);
    assert_eq!(c.len(), 1, "inline modules belong to their file: {c:?}");
    let c = cycles(&[
        ("lib.rs", "mod a; #[path = \"elsewhere.rs\"] mod b;"),
        ("a.rs", "pub fn f() { crate::b::g() }"),
        ("elsewhere.rs", "pub fn g() { crate::a::f() }"),
    ]);
    assert_eq!(c.len(), 1, "#[path]: {c:?}");
    let c = cycles(&[
        ("lib.rs", "pub mod a;"),
        ("a.rs", "pub fn f() {}"),
        ("bin/tool/main.rs", "mod x; mod y;"),
        ("bin/tool/x.rs", "pub fn f() { crate::y::g() }"),
        ("bin/tool/y.rs", "pub fn g() { crate::x::f() }"),
    ]);
    assert_eq!(c.len(), 1, "{c:?}");
    assert!(c[0].contains("x -> y"), "{c:?}");
}

#[test]
fn an_allowed_edge_breaks_its_cycle_and_only_that_one() {
    let files = [
        ("lib.rs", "mod a; mod b; mod c;"),
        ("a.rs", "pub fn f() { crate::b::g(); crate::c::h() }"),
        ("b.rs", "pub fn g() { crate::a::f() }"),
        ("c.rs", "pub fn h() { crate::a::f() }"),
    ];
    assert_eq!(cycles(&files).len(), 1, "a, b, c are one component");
    let c = cycles_with(&files, &[("b", "a")]);
    assert_eq!(c.len(), 1, "a <-> c remains: {c:?}");
    assert!(c[0].contains("a -> c") && !c[0].contains(" b"), "{c:?}");
    assert!(cycles_with(&files, &[("b", "a"), ("c", "a")]).is_empty());
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
