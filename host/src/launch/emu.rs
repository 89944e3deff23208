//! The emulated backend of [`launch`](super): kernels registered on the host by `#[kernel]`
//! (`symcomm_device::emu::registry`), run over the launch's grid by
//! `symcomm_device::emu::Launch`.

use std::ffi::c_void;

use symcomm_device::emu::registry::{self, KernelEntry};

use super::LaunchConfig;
use crate::{Error, Result};

/// The registered kernel `name` (among several of the same name: the one whose parameter
/// sizes are `declared`, the PTX's).
pub(super) fn resolve(name: &str, declared: &[usize]) -> Result<&'static KernelEntry> {
    let found: Vec<&'static KernelEntry> = registry::find(name).collect();
    match found.as_slice() {
        [] => Err(Error::InvalidArgument(format!(
            "kernel {name:?} is in the PTX but not registered on the host: link its \
             kernels crate into this binary to run it on the CPU emulator (include the \
             module symcomm-build generates, which links it, and list the kernels crate in \
             [dependencies]; see the book's Troubleshooting, Building kernels)"
        ))),
        [one] => Ok(*one),
        several => {
            let matching: Vec<_> = several
                .iter()
                .filter(|e| e.param_sizes == declared)
                .collect();
            match matching.as_slice() {
                [one] => Ok(**one),
                _ => {
                    let paths: Vec<_> = several.iter().map(|e| e.module_path).collect();
                    Err(Error::InvalidArgument(format!(
                        "kernel {name:?} is registered {} times on the host ({}): \
                         ambiguous on the CPU emulator",
                        several.len(),
                        paths.join(", ")
                    )))
                }
            }
        }
    }
}

/// Runs `entry` (kernel `name`) over the launch's grid on the CPU emulator and waits for it.
///
/// # Safety
/// As [`Function::launch`](super::Function::launch); the pointers are read by every emulated
/// thread.
pub(super) unsafe fn launch(
    entry: &'static KernelEntry,
    name: &str,
    cfg: LaunchConfig,
    args: &mut [*mut c_void],
) -> Result<()> {
    if args.len() != entry.param_sizes.len() {
        return Err(Error::InvalidArgument(format!(
            "kernel `{name}` takes {} parameters, but the launch passes {}",
            entry.param_sizes.len(),
            args.len()
        )));
    }
    let launch = symcomm_device::emu::Launch::new(cfg.grid, cfg.block)
        .shared(cfg.shared_mem_bytes)
        .cluster(cfg.cluster.max(1));
    let args: *const *mut c_void = args.as_ptr();
    // SAFETY: `args` holds one pointer per parameter to a value of its type (the caller's
    // contract), alive until this synchronous launch returns; the kernel only reads them.
    // Every pointer the kernel dereferences is valid for the whole run (the caller's
    // contract), which ends before `run_unsync` returns.
    unsafe { launch.run_unsync(|| (entry.shim)(args)) }.map_err(|e| Error::Emulation {
        kernel: name.to_owned(),
        detail: e.to_string(),
    })
}
