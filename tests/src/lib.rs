//! Shared helpers of the symcomm integration tests: every PTX module the workspace builds,
//! where the repository root is, and the host references of the test kernels ([`reference`](mod@reference)).

#![warn(missing_docs)]

use std::path::{Path, PathBuf};

/// The test kernels (exercising the device API) as PTX.
pub mod kernels {
    include!(concat!(env!("OUT_DIR"), "/symcomm_test_kernels.rs"));
}

/// The kernels built with `bounds-checks` (the GPU checks' own kernels), as PTX.
pub mod checked_kernels {
    include!(concat!(env!("OUT_DIR"), "/symcomm_checked_kernels.rs"));
}

pub mod gin;
pub mod nodes;
pub mod reference;
pub mod shapes;

/// One PTX module built by the workspace.
#[derive(Debug, Clone, Copy)]
pub struct PtxModule {
    /// Which kernels crate it came from.
    pub name: &'static str,
    /// The PTX text.
    pub ptx: &'static str,
    /// The entry points symcomm-build found in it.
    pub entry_points: &'static [&'static str],
}

/// Every PTX module the workspace builds.
pub fn all_ptx() -> Vec<PtxModule> {
    vec![
        PtxModule {
            name: "symcomm_example_kernels",
            ptx: symcomm_examples::kernels::PTX,
            entry_points: symcomm_examples::kernels::ENTRY_POINTS,
        },
        PtxModule {
            name: "symcomm_gallery_kernels",
            ptx: symcomm_gallery::kernels::PTX,
            entry_points: symcomm_gallery::kernels::ENTRY_POINTS,
        },
        PtxModule {
            name: "symcomm_test_kernels",
            ptx: kernels::PTX,
            entry_points: kernels::ENTRY_POINTS,
        },
        PtxModule {
            name: "symcomm_checked_kernels",
            ptx: checked_kernels::PTX,
            entry_points: checked_kernels::ENTRY_POINTS,
        },
    ]
}

/// The repository root (the workspace directory).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_default()
}
