//! The settings every rank of a communicator must share, agreed at its creation
//! ([`Bootstrap::agree`](crate::Bootstrap::agree)), and how `SYMCOMM_CHECK` reads.

use crate::{Error, Result};

/// The settings every rank must share, agreed by
/// [`Communicator::init`](super::Communicator::init): the environment variables that shape
/// teams, the flat layout or what the runtime checks, and `node identity` (not a variable:
/// whether the ranks declare their nodes or detect them).
pub const INIT_SETTINGS: &[&str] = &[
    "SYMCOMM_LSA_SIZE",
    "SYMCOMM_WIN_STRIDE",
    "SYMCOMM_CHECK",
    "node identity",
];

/// This rank's values of [`INIT_SETTINGS`]: `SYMCOMM_LSA_SIZE` as the communicator options
/// have it (`lsa_cap`), the node identity as `declared` (the options name the node:
/// `SYMCOMM_NODE_ID`, `CommOptions::node_id`, or a launcher's node number) or `detected`
/// (host and boot id) — every rank must tell nodes apart the same way, or ranks of one
/// machine would split into nodes by accident — and the others as set in the environment
/// (`get`), `unset` when absent.
pub(crate) fn init_settings(
    lsa_cap: Option<usize>,
    node_declared: bool,
    get: impl Fn(&str) -> Option<String>,
) -> Vec<(&'static str, String)> {
    INIT_SETTINGS
        .iter()
        .map(|&name| {
            let value = if name == "SYMCOMM_LSA_SIZE" {
                lsa_cap.map(|k| k.to_string())
            } else if name == "node identity" {
                Some(
                    if node_declared {
                        "declared"
                    } else {
                        "detected"
                    }
                    .to_string(),
                )
            } else {
                get(name).map(|v| v.trim().to_string())
            };
            (name, value.unwrap_or_else(|| "unset".into()))
        })
        .collect()
}

/// Whether `SYMCOMM_CHECK` (agreed at creation) turns on checked mode: `1`, `on` or `true`
/// (any case); unset, empty, `0`, `off` or `false` leave it off; anything else is refused.
pub(crate) fn checked_from(value: Option<&str>) -> Result<bool> {
    match value.map(|v| v.trim().to_ascii_lowercase()).as_deref() {
        None | Some("" | "0" | "off" | "false") => Ok(false),
        Some("1" | "on" | "true") => Ok(true),
        Some(other) => Err(Error::Env {
            var: "SYMCOMM_CHECK".into(),
            reason: format!("{other:?} is not one of 1, on, true, 0, off, false"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn init_settings_read_the_options_and_the_environment() {
        let env = |k: &str| (k == "SYMCOMM_WIN_STRIDE").then(|| " 8G ".to_string());
        assert_eq!(
            init_settings(Some(4), false, env),
            vec![
                ("SYMCOMM_LSA_SIZE", "4".to_string()),
                ("SYMCOMM_WIN_STRIDE", "8G".to_string()),
                ("SYMCOMM_CHECK", "unset".to_string()),
                ("node identity", "detected".to_string()),
            ]
        );
    }

    #[test]
    fn checked_mode_is_on_off_or_refused() {
        for on in ["1", "on", "TRUE"] {
            assert!(checked_from(Some(on)).unwrap());
        }
        for off in [None, Some(""), Some("0"), Some("off"), Some("false")] {
            assert!(!checked_from(off).unwrap());
        }
        let e = checked_from(Some("yes please")).unwrap_err().to_string();
        assert!(
            e.contains("SYMCOMM_CHECK") && e.contains("yes please"),
            "{e}"
        );
    }
}
