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

/// One crate and what the checker must say of it: how many cycles, and text each of them
/// must contain (module edges `a -> b`, places `a.rs:1`).
struct Case {
    what: &'static str,
    files: &'static [(&'static str, &'static str)],
    cycles: usize,
    shows: &'static [&'static str],
}

const CASES: &[Case] = &[
    Case {
        what: "a cycle through use items, with the places",
        files: &[
            ("lib.rs", "mod a; mod b;"),
            ("a.rs", "use crate::b::B; pub struct A(B);"),
            ("b.rs", "pub struct B; pub fn f(_: &crate::a::A) {}"),
        ],
        cycles: 1,
        shows: &["a -> b", "b -> a", "a.rs:1", "b.rs:1"],
    },
    Case {
        what: "a three-module cycle",
        files: &[
            ("lib.rs", "mod a; mod b; mod c;"),
            ("a.rs", "pub fn f() { crate::b::f() }"),
            ("b.rs", "pub fn f() { crate::c::f() }"),
            ("c.rs", "pub fn f() { crate::a::f() }"),
        ],
        cycles: 1,
        shows: &["3 modules in a cycle (a, b, c)"],
    },
    Case {
        what: "super:: and a child module's name",
        files: &[
            ("lib.rs", "mod p;"),
            ("p/mod.rs", "mod q; pub struct P; fn f() { q::g() }"),
            ("p/q.rs", "pub fn g() { let _ = super::P; }"),
        ],
        cycles: 1,
        shows: &["p -> p::q"],
    },
    Case {
        what: "crate:: inside a macro invocation",
        files: &[
            ("lib.rs", "mod a; mod b;"),
            ("a.rs", "pub fn f() { m!(crate::b::g()) }"),
            ("b.rs", "pub fn g() { crate::a::f() }"),
        ],
        cycles: 1,
        shows: &["a -> b"],
    },
    Case {
        what: "$crate:: in a macro_rules body",
        files: &[
            ("lib.rs", "mod a; mod b;"),
            (
                "a.rs",
                "macro_rules! m { () => { $crate::b::g() } } pub fn f() {}",
            ),
            ("b.rs", "pub fn g() { crate::a::f() }"),
        ],
        cycles: 1,
        shows: &["a -> b"],
    },
    Case {
        what: "a child name and self:: in macro tokens",
        files: &[
            ("lib.rs", "mod p;"),
            ("p/mod.rs", "mod q; pub struct P; fn f() { m!(q::g()) }"),
            ("p/q.rs", "pub fn g() { m!(self::super::P) }"),
        ],
        cycles: 1,
        shows: &["p -> p::q", "p::q -> p"],
    },
    Case {
        what: "an alias: `use crate::p;` then p::q::g() reaches p::q",
        files: &[
            ("lib.rs", "mod a; mod p;"),
            ("a.rs", "use crate::p; pub fn f() { p::q::g() }"),
            ("p/mod.rs", "pub mod q;"),
            ("p/q.rs", "pub fn g() { crate::a::f() }"),
        ],
        cycles: 1,
        shows: &["a -> p::q"],
    },
    Case {
        what: "a rename",
        files: &[
            ("lib.rs", "mod a; mod b;"),
            ("a.rs", "use crate::b as bee; pub fn f() { bee::g() }"),
            ("b.rs", "pub fn g() { crate::a::f() }"),
        ],
        cycles: 1,
        shows: &["a -> b"],
    },
    Case {
        what: "`use super::*;` then a name of the parent",
        files: &[
            ("lib.rs", "mod p;"),
            ("p/mod.rs", "mod q; pub struct R; fn g() { q::f(R) }"),
            ("p/q.rs", "use super::*; pub fn f(_: R) {}"),
        ],
        cycles: 1,
        shows: &["p::q -> p"],
    },
    Case {
        what: "a local variable named like a module is no reference",
        files: &[
            ("lib.rs", "mod p;"),
            ("p/mod.rs", "mod q; pub struct R; pub fn g() { q::f() }"),
            ("p/q.rs", "pub fn f() { let p = 1; let _ = p; }"),
        ],
        cycles: 0,
        shows: &[],
    },
    Case {
        what: "test code is skipped; the root's re-export is followed",
        files: &[
            ("lib.rs", "mod a; mod b; pub use b::B;"),
            (
                "a.rs",
                "pub struct A(crate::B);\n#[cfg(test)] mod tests { use crate::b::B; }",
            ),
            ("b.rs", "pub struct B;\n#[cfg(test)]\nmod tests;"),
            ("b/tests.rs", "use crate::a::A;"),
        ],
        cycles: 0,
        shows: &[],
    },
    Case {
        what: "a visibility is not a reference",
        files: &[
            ("lib.rs", "mod p;"),
            ("p/mod.rs", "mod q; pub struct P(q::Q);"),
            ("p/q.rs", "pub(super) struct Q; pub(in crate::p) fn f() {}"),
        ],
        cycles: 0,
        shows: &[],
    },
    Case {
        what: "the root's re-export is charged to where the name comes from",
        files: &[
            ("lib.rs", "mod a; mod b; pub use b::B;"),
            ("a.rs", "pub struct A(crate::B);"),
            ("b.rs", "pub struct B; fn f(_: crate::a::A) {}"),
        ],
        cycles: 1,
        shows: &["a -> b"],
    },
    Case {
        what: "a module's re-export too",
        files: &[
            ("lib.rs", "mod a; mod b; mod c;"),
            ("a.rs", "pub use crate::b::B;"),
            ("b.rs", "pub struct B; fn f() { crate::c::g() }"),
            ("c.rs", "pub fn g(_: crate::a::B) {}"),
        ],
        cycles: 1,
        shows: &["c -> b"],
    },
    Case {
        what: "the root's own items count",
        files: &[
            ("lib.rs", "mod a; pub struct Root(a::A);"),
            ("a.rs", "pub struct A; fn f(_: crate::Root) {}"),
        ],
        cycles: 1,
        shows: &["crate -> a", "a -> crate"],
    },
    Case {
        what: "the root's re-exports and prelude do not",
        files: &[
            (
                "lib.rs",
                "mod a; pub use a::A; pub mod prelude { pub use crate::a::A; }",
            ),
            (
                "a.rs",
                "pub struct A; fn f(_: crate::A, _: crate::prelude::A) {}",
            ),
        ],
        cycles: 0,
        shows: &[],
    },
    Case {
        what: "a backend child is part of its parent",
        files: &[
            ("lib.rs", "mod m; mod emu;"),
            (
                "m/mod.rs",
                "mod host; pub struct T; pub fn f() { host::g() }",
            ),
            ("m/host.rs", "pub fn g() { crate::emu::h() }"),
            ("emu.rs", "pub fn h() {}"),
        ],
        cycles: 0,
        shows: &[],
    },
    Case {
        what: "a backend child's reference is its parent's",
        files: &[
            ("lib.rs", "mod m; mod emu;"),
            (
                "m/mod.rs",
                "mod host; pub struct T; pub fn f() { host::g() }",
            ),
            ("m/host.rs", "pub fn g() { crate::emu::h() }"),
            ("emu.rs", "pub fn h(_: crate::m::T) {}"),
        ],
        cycles: 1,
        shows: &["m -> emu", "emu -> m"],
    },
    Case {
        what: "a child that is not one of this crate's backends is a module of its own",
        files: &[
            ("lib.rs", "mod m;"),
            ("m/mod.rs", "mod gpu; pub struct T; fn f() { gpu::g() }"),
            ("m/gpu.rs", "pub fn g(_: super::T) {}"),
        ],
        cycles: 1,
        shows: &["m -> m::gpu"],
    },
    Case {
        what: "inline modules belong to their file",
        files: &[
            ("lib.rs", "mod a; mod b;"),
            (
                "a.rs",
                "pub mod outer { pub mod inner { pub fn f() { crate::b::g() } } }",
            ),
            ("b.rs", "pub fn g() { crate::a::outer::inner::f() }"),
        ],
        cycles: 1,
        shows: &["a -> b"],
    },
    Case {
        what: "#[path] is followed",
        files: &[
            ("lib.rs", "mod a; #[path = \"elsewhere.rs\"] mod b;"),
            ("a.rs", "pub fn f() { crate::b::g() }"),
            ("elsewhere.rs", "pub fn g() { crate::a::f() }"),
        ],
        cycles: 1,
        shows: &["elsewhere.rs:1"],
    },
    Case {
        what: "each bin is a crate of its own",
        files: &[
            ("lib.rs", "pub mod a;"),
            ("a.rs", "pub fn f() {}"),
            ("bin/tool/main.rs", "mod x; mod y;"),
            ("bin/tool/x.rs", "pub fn f() { crate::y::g() }"),
            ("bin/tool/y.rs", "pub fn g() { crate::x::f() }"),
        ],
        cycles: 1,
        shows: &["x -> y"],
    },
];

#[test]
fn the_checker_finds_exactly_the_cycles_of_each_case() {
    for case in CASES {
        let c = cycles(case.files);
        assert_eq!(c.len(), case.cycles, "{}: {c:?}", case.what);
        for text in case.shows {
            assert!(
                c.iter().any(|l| l.contains(text)),
                "{}: no {text:?} in {c:?}",
                case.what
            );
        }
    }
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
