//! File helpers shared by [`crate::builder`] and [`crate::toolchain`]: finding a file in the
//! ancestors of a directory, and creating directories and writing files with errors that name
//! the path ([`Error::Io`]), and the content hash of build stamps.

use std::path::{Path, PathBuf};

use crate::Error;

pub(crate) fn find_upwards(start: &Path, file: &str) -> Option<PathBuf> {
    start
        .ancestors()
        .map(|d| d.join(file))
        .find(|p| p.is_file())
}

pub(crate) fn mkdir(dir: &Path) -> Result<(), Error> {
    std::fs::create_dir_all(dir).map_err(|e| Error::Io {
        what: format!("create {}", dir.display()),
        source: e,
    })
}

pub(crate) fn write(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    std::fs::write(path, bytes).map_err(|e| Error::Io {
        what: format!("write {}", path.display()),
        source: e,
    })
}

/// FNV-1a: a content hash for build stamps (not for security).
pub(crate) fn fnv1a(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
