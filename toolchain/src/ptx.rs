//! Reading facts out of PTX text: the target, the ISA version and the kernel entry points.
//!
//! These are line-oriented checks over the module header and `.entry` declarations that
//! LLVM's NVPTX printer emits; they do not parse PTX in general.

/// The `.target` of a PTX module (e.g. `sm_90`), if declared.
pub fn target(ptx: &str) -> Option<&str> {
    ptx.lines().find_map(|l| {
        l.trim()
            .strip_prefix(".target")
            .map(|rest| rest.trim().split([',', ' ']).next().unwrap_or("").trim())
    })
}

/// The `.version` of a PTX module as `(major, minor)`, if declared.
pub fn version(ptx: &str) -> Option<(u32, u32)> {
    let v = ptx
        .lines()
        .find_map(|l| l.trim().strip_prefix(".version"))?
        .trim();
    let (major, minor) = v.split_once('.')?;
    Some((major.trim().parse().ok()?, minor.trim().parse().ok()?))
}

/// Names of the externally visible kernels (`.visible .entry NAME(`), in file order.
pub fn entry_points(ptx: &str) -> Vec<String> {
    ptx.lines()
        .filter_map(|l| {
            let rest = l.trim().strip_prefix(".visible")?.trim_start();
            let rest = rest.strip_prefix(".entry")?.trim_start();
            let end = rest.find(|c: char| c == '(' || c.is_whitespace())?;
            Some(rest[..end].to_owned())
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &str = "//\n.version 8.3\n.target sm_90\n.address_size 64\n\n\
        .visible .entry vector_add(\n\t.param .u64 a\n)\n{\n}\n\
        .func helper()\n{\n}\n.visible .entry other_kernel()\n{\n}\n";

    #[test]
    fn reads_target_version_and_entries() {
        assert_eq!(target(SAMPLE), Some("sm_90"));
        assert_eq!(version(SAMPLE), Some((8, 3)));
        assert_eq!(entry_points(SAMPLE), vec!["vector_add", "other_kernel"]);
    }

    #[test]
    fn missing_header_gives_none() {
        assert_eq!(target(".version 8.3\n"), None);
        assert_eq!(version(".target sm_80\n"), None);
        assert!(entry_points(".func f()\n").is_empty());
    }
}
