//! Assembling PTX with NVIDIA's `ptxas` to verify it.
//!
//! `ptxas` comes from the `nvidia-cuda-nvcc` wheel on PyPI (no CUDA toolkit needed);
//! `scripts/fetch-ptxas` puts it at `.tools/ptxas/ptxas`. It is looked up in this order:
//! `$SYMCOMM_PTXAS`, `<root>/.tools/ptxas/ptxas`, then `ptxas` on `PATH`.

use std::path::{Path, PathBuf};
use std::process::Command;

use crate::Error;

/// Environment variable naming an explicit `ptxas` executable.
pub const PTXAS_ENV: &str = "SYMCOMM_PTXAS";

/// Finds a `ptxas` executable, searching `root/.tools/ptxas/ptxas` after `$SYMCOMM_PTXAS`.
pub fn find(root: &Path) -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(PTXAS_ENV) {
        let p = PathBuf::from(p);
        return p.is_file().then_some(p);
    }
    let local = root.join(".tools/ptxas/ptxas");
    if local.is_file() {
        return Some(local);
    }
    std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("ptxas"))
            .find(|p| p.is_file())
    })
}

/// [`find`] for the checks that verify PTX with `ptxas`: `Ok(None)` (the caller skips its
/// check, saying so) when there is none, except under CI (`CI` set), where every module must
/// be verified and a missing `ptxas` is an error naming the fix.
pub fn find_for_checks(root: &Path) -> Result<Option<PathBuf>, String> {
    match find(root) {
        Some(p) => Ok(Some(p)),
        None if std::env::var_os("CI").is_some() => {
            Err("ptxas not found under CI=true; run scripts/fetch-ptxas".into())
        }
        None => Ok(None),
    }
}

/// The result of assembling one PTX file.
#[derive(Debug, Clone)]
pub struct Assembled {
    /// The cubin written by ptxas.
    pub cubin: PathBuf,
    /// ptxas's `-v` resource report (registers, shared memory, spills per function).
    pub report: String,
}

/// Assembles `ptx` for `arch` (e.g. `sm_90`) into `out_dir`; an error carries ptxas's
/// own messages.
pub fn assemble(ptxas: &Path, ptx: &Path, arch: &str, out_dir: &Path) -> Result<Assembled, Error> {
    assemble_with(ptxas, ptx, arch, out_dir, &[])
}

/// [`assemble`] with extra ptxas options (e.g. `--maxrregcount=128`, what the driver's JIT
/// applies for `CU_JIT_THREADS_PER_BLOCK = 512`).
pub fn assemble_with(
    ptxas: &Path,
    ptx: &Path,
    arch: &str,
    out_dir: &Path,
    extra: &[&str],
) -> Result<Assembled, Error> {
    let stem = ptx
        .file_stem()
        .map(|s| s.to_string_lossy().into_owned())
        .unwrap_or_else(|| "module".to_owned());
    std::fs::create_dir_all(out_dir).map_err(|e| Error::Io {
        what: format!("create {}", out_dir.display()),
        source: e,
    })?;
    let cubin = out_dir.join(format!("{stem}.{arch}.cubin"));
    let out = Command::new(ptxas)
        .arg(format!("-arch={arch}"))
        .arg("-v")
        .args(extra)
        .arg(ptx)
        .arg("-o")
        .arg(&cubin)
        .output()
        .map_err(|e| Error::Io {
            what: format!("run {}", ptxas.display()),
            source: e,
        })?;
    let report =
        String::from_utf8_lossy(&out.stderr).into_owned() + &String::from_utf8_lossy(&out.stdout);
    if out.status.success() {
        Ok(Assembled { cubin, report })
    } else {
        Err(Error::Ptxas {
            ptx: ptx.to_path_buf(),
            arch: arch.to_owned(),
            messages: report,
        })
    }
}
