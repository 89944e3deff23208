//! The module graph of every workspace crate must be acyclic.
//!
//! NCCL's rule for `nccl_device/` (types acyclic, functions may call across) applied to symcomm:
//! this test parses each crate's modules (following `mod` declarations from `lib.rs`/`main.rs`
//! and every `src/bin` target, skipping `#[cfg(test)]` code), resolves every path a module
//! writes to the module it names, and fails with the cycle and the lines that form it when the
//! references of a crate form a cycle.
//!
//! What is a reference (`collect.rs`, `graph.rs`):
//! - every path in `use` items and in the code, and every `a::b` or `$crate::b` inside a macro
//!   invocation's tokens (a `macro_rules!` body's `$crate::` paths are charged to the module
//!   that defines the macro, where it is written);
//! - paths start at `crate`/`$crate`, `self`, `super`, a child module, an item of the scope, a
//!   `use` alias (renames included) or a name a `use …::*` glob brings in; a path that
//!   arrives at a name a module imports (a re-export) is followed to where it comes from;
//! - a path is charged to the longest module prefix it names; inline modules count as part of
//!   their file;
//! - not a reference: method calls and field accesses (they name no module), visibilities
//!   (`pub(super)`), macros invoked by their bare name, and `::extern` paths;
//! - the crate root is the crate's facade: its `use` items (re-exports) are not counted, the
//!   paths in its own items are, and a path into the root counts when it names an item the
//!   root defines.
//!
//! A concept's backend files count as part of it: a child module named after one of the
//! crate's backends (device crates: `nvptx`, `host`; the host crate: `gpu`, `emu`) or `tests`
//! is merged into its parent (`mem/nvptx.rs` is `mem`). Other files of a folder are modules of
//! their own. [`ALLOWED`] lists edges that may close a cycle, each with the reason NCCL's rule
//! is met.

mod collect;
mod fixtures;
mod graph;

use std::fmt::Write as _;
use std::path::Path;

use graph::{Graph, targets};

/// Edges allowed to close a cycle: (crate, from module, to module, why NCCL's rule holds).
/// Empty: no cycle needs an exception today.
const ALLOWED: &[(&str, &str, &str, &str)] = &[];

/// Backends of the device crates: inline PTX and emulation.
const DEVICE: &[&str] = &["nvptx", "host"];
/// Backends of the host crate's resources: the driver and memfd emulation.
const HOST: &[&str] = &["gpu", "emu"];

/// The crates checked: (name, source folder relative to the workspace root, backend names).
const CRATES: &[(&str, &str, &[&str])] = &[
    ("symcomm", "host/src", HOST),
    ("symcomm-device", "device/src", DEVICE),
    ("symcomm-macros", "device/macros/src", &[]),
    ("symcomm-build", "toolchain/src", &[]),
    ("symcomm-gallery", "kernels-gallery/src", &[]),
    (
        "symcomm-gallery-kernels",
        "kernels-gallery/kernels/src",
        DEVICE,
    ),
    ("symcomm-examples", "examples/src", &[]),
    ("symcomm-example-kernels", "examples/kernels/src", DEVICE),
    ("symcomm-tests", "tests/src", &[]),
    ("symcomm-test-kernels", "tests/kernels/src", DEVICE),
    (
        "symcomm-checked-kernels",
        "tests/checked-kernels/src",
        DEVICE,
    ),
];

fn workspace_root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap()
}

/// The allow-listed edges of `krate`, as `cycles` takes them.
fn allowed(krate: &str) -> Vec<(&'static str, &'static str)> {
    ALLOWED
        .iter()
        .filter(|(k, ..)| *k == krate)
        .map(|(_, f, t, _)| (*f, *t))
        .collect()
}

#[test]
fn no_crate_has_a_module_cycle() {
    let mut report = String::new();
    let mut summary = String::new();
    for (name, src, backends) in CRATES {
        for target in targets(&workspace_root().join(src)) {
            let graph = Graph::load(&target, backends).unwrap_or_else(|e| panic!("{name}: {e}"));
            let label = format!("{name} ({})", target.name);
            let (n, e) = (graph.nodes.len(), graph.edges.len());
            writeln!(summary, "{label}: {n} modules, {e} edges").unwrap();
            for cycle in graph.cycles(&allowed(name)) {
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
fn every_allowed_edge_exists_and_gives_a_reason() {
    for (krate, from, to, why) in ALLOWED {
        let (_, src, backends) = CRATES
            .iter()
            .find(|(n, ..)| n == krate)
            .unwrap_or_else(|| panic!("{krate} is not checked"));
        assert!(why.len() > 20, "{krate}: {from} -> {to} needs a reason");
        let used = targets(&workspace_root().join(src)).iter().any(|t| {
            Graph::load(t, backends)
                .unwrap()
                .edges
                .contains_key(&(from.to_string(), to.to_string()))
        });
        assert!(
            used,
            "{krate}: the allowed edge {from} -> {to} no longer exists"
        );
    }
}

/// A crate added to the workspace is checked too.
#[test]
fn every_workspace_member_is_checked() {
    let manifest = std::fs::read_to_string(workspace_root().join("Cargo.toml")).unwrap();
    let members = manifest
        .split("members = [")
        .nth(1)
        .and_then(|s| s.split(']').next())
        .expect("a [workspace] members list");
    let members: Vec<&str> = members
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .collect();
    assert!(members.len() >= 10, "{members:?}");
    for m in &members {
        let src = format!("{m}/src");
        assert!(
            CRATES.iter().any(|(_, s, _)| *s == src),
            "workspace member {m} is not in CRATES"
        );
    }
    assert_eq!(members.len(), CRATES.len(), "{members:?}");
}
