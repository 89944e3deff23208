//! Slurm's launch variables: a process started by `srun` is one task of a job step, and its
//! rank, world size, local rank and node come from the step's variables. The root is the
//! first node of the step's node list (Slurm's compressed host-list syntax, expanded by
//! [`expand_nodelist`]) unless `MASTER_ADDR` names one; its port is `SYMCOMM_PORT`, else
//! `MASTER_PORT`, else one derived from the job and step ids ([`default_port`]), the same on
//! every task.
//!
//! Only a process that `srun` started counts (`SLURM_STEP_ID` set): a batch script's own
//! shell also sees `SLURM_PROCID=0` and `SLURM_NTASKS`, and a program run from it directly is
//! a world of one rank, not rank 0 of a job that never comes together.

use crate::{Error, Result};

/// The variables of one Slurm task, read through a lookup function.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct SlurmTask {
    /// `SLURM_PROCID`.
    pub rank: usize,
    /// `SLURM_STEP_NUM_TASKS`, else `SLURM_NTASKS`.
    pub size: usize,
    /// `SLURM_LOCALID`.
    pub local_rank: Option<usize>,
    /// `SLURM_NODEID`: the task's node among the step's.
    pub node_rank: Option<usize>,
    /// `SLURM_STEP_NUM_NODES`, else `SLURM_NNODES`.
    pub nnodes: Option<usize>,
    /// The first host of `SLURM_STEP_NODELIST` (else `SLURM_JOB_NODELIST`, `SLURM_NODELIST`).
    pub first_node: Option<String>,
    /// `SLURM_JOB_ID` and `SLURM_STEP_ID`, which name the step to every task alike.
    pub step: String,
}

/// The Slurm task this process is, if `srun` started it (`SLURM_STEP_ID` and `SLURM_PROCID`
/// set); errors name the variable.
pub(crate) fn task(get: &impl Fn(&str) -> Option<String>) -> Result<Option<SlurmTask>> {
    let (Some(step_id), Some(_)) = (get("SLURM_STEP_ID"), get("SLURM_PROCID")) else {
        return Ok(None);
    };
    let number = |var: &str| -> Result<Option<usize>> {
        match get(var) {
            None => Ok(None),
            Some(t) => t.trim().parse().map(Some).map_err(|_| Error::Env {
                var: var.into(),
                reason: format!("{t:?} is not a non-negative integer"),
            }),
        }
    };
    let rank = number("SLURM_PROCID")?.unwrap_or(0);
    let size = match number("SLURM_STEP_NUM_TASKS")? {
        Some(n) => n,
        None => number("SLURM_NTASKS")?.ok_or_else(|| Error::Env {
            var: "SLURM_NTASKS".into(),
            reason: "not set (nor SLURM_STEP_NUM_TASKS): the number of tasks is needed".into(),
        })?,
    };
    let nnodes = match number("SLURM_STEP_NUM_NODES")? {
        Some(n) => Some(n),
        None => number("SLURM_NNODES")?,
    };
    let list = [
        "SLURM_STEP_NODELIST",
        "SLURM_JOB_NODELIST",
        "SLURM_NODELIST",
    ]
    .iter()
    .find_map(|v| get(v).map(|l| (*v, l)));
    let first_node = match list {
        Some((var, l)) => {
            let nodes = expand_nodelist(&l).map_err(|reason| Error::Env {
                var: var.into(),
                reason,
            })?;
            nodes.into_iter().next()
        }
        None => None,
    };
    Ok(Some(SlurmTask {
        rank,
        size,
        local_rank: number("SLURM_LOCALID")?,
        node_rank: number("SLURM_NODEID")?,
        nnodes,
        first_node,
        step: format!(
            "{}.{}",
            get("SLURM_JOB_ID").unwrap_or_default(),
            step_id.trim()
        ),
    }))
}

/// The root's port when neither `SYMCOMM_PORT` nor `MASTER_PORT` is set: 20000 plus the
/// job and step ids folded into 0..20000, so that steps running at once on one node pick
/// different ports (as long as their ids differ there).
pub(crate) fn default_port(step: &str) -> u16 {
    let h = crate::bootstrap::fnv1a64(step.as_bytes());
    20000 + (h % 20000) as u16
}

/// Expands a Slurm host list (`gpu[01-03,07],login1`, `rack[1-2]-n[1-2]`): comma-separated
/// names, each with any number of bracketed groups of comma-separated numbers and ranges
/// (`a-b`, `a ≤ b`), zero-padded to the width written (`01-03` gives `01`, `02`, `03`).
/// Names come out in the order written, a name's groups varied rightmost first.
pub fn expand_nodelist(list: &str) -> std::result::Result<Vec<String>, String> {
    let mut out = Vec::new();
    for name in split_top(list)? {
        let name = name.trim();
        if name.is_empty() {
            return Err(format!("{list:?} has an empty host name"));
        }
        expand_name(name, &mut out)?;
        if out.len() > crate::bootstrap::MAX_WORLD_SIZE {
            return Err(format!("{list:?} names more hosts than symcomm takes"));
        }
    }
    Ok(out)
}

/// Splits at the commas outside brackets.
fn split_top(list: &str) -> std::result::Result<Vec<&str>, String> {
    let (mut parts, mut depth, mut start) = (Vec::new(), 0i32, 0);
    for (i, c) in list.char_indices() {
        match c {
            '[' => depth += 1,
            ']' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(&list[start..i]);
                start = i + 1;
            }
            _ => {}
        }
        if !(0..=1).contains(&depth) {
            return Err(format!("{list:?} has unbalanced or nested brackets"));
        }
    }
    if depth != 0 {
        return Err(format!("{list:?} has an unclosed bracket"));
    }
    parts.push(&list[start..]);
    Ok(parts)
}

/// Appends the hosts of one name with bracketed groups.
fn expand_name(name: &str, out: &mut Vec<String>) -> std::result::Result<(), String> {
    let Some(open) = name.find('[') else {
        if name.contains(']') {
            return Err(format!("{name:?} has a ']' without '['"));
        }
        out.push(name.to_string());
        return Ok(());
    };
    let close = open
        + name[open..]
            .find(']')
            .ok_or_else(|| format!("{name:?} has an unclosed bracket"))?;
    let (head, group, tail) = (&name[..open], &name[open + 1..close], &name[close + 1..]);
    for item in group.split(',') {
        if out.len() > crate::bootstrap::MAX_WORLD_SIZE {
            return Err(format!("{name:?} names more hosts than symcomm takes"));
        }
        let item = item.trim();
        let (lo, hi) = item.split_once('-').unwrap_or((item, item));
        let width = lo.len();
        let parse = |t: &str| {
            t.parse::<u64>()
                .map_err(|_| format!("{name:?}: {item:?} is not a number or a range a-b"))
        };
        let (a, b) = (parse(lo)?, parse(hi)?);
        if a > b {
            return Err(format!("{name:?}: the range {item:?} runs backwards"));
        }
        if b - a >= crate::bootstrap::MAX_WORLD_SIZE as u64 {
            return Err(format!("{name:?}: the range {item:?} names too many hosts"));
        }
        for k in a..=b {
            expand_name(&format!("{head}{k:0width$}{tail}"), out)?;
            if out.len() > crate::bootstrap::MAX_WORLD_SIZE {
                return Err(format!("{name:?} names more hosts than symcomm takes"));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn node_lists_expand_as_slurm_writes_them() {
        let table: &[(&str, &[&str])] = &[
            ("gpu01", &["gpu01"]),
            ("gpu[01-03,07]", &["gpu01", "gpu02", "gpu03", "gpu07"]),
            ("gpu[1-2],login", &["gpu1", "gpu2", "login"]),
            ("a[8-10]", &["a8", "a9", "a10"]),
            ("n[098-101]", &["n098", "n099", "n100", "n101"]),
            (
                "rack[1-2]-n[3,5]",
                &["rack1-n3", "rack1-n5", "rack2-n3", "rack2-n5"],
            ),
            ("x[3],y[0-1]z", &["x3", "y0z", "y1z"]),
        ];
        for (list, want) in table {
            assert_eq!(expand_nodelist(list).unwrap(), *want, "{list}");
        }
        for bad in [
            "gpu[01-03",
            "gpu01]",
            "gpu[3-1]",
            "gpu[a-b]",
            "gpu[[1]]",
            "a,,b",
            "g[1-]",
            "a[0-65536]b[0-65536]",
            "a[0-65536]",
        ] {
            assert!(expand_nodelist(bad).is_err(), "{bad}");
        }
    }

    fn task_of(pairs: &[(&str, &str)]) -> Result<Option<SlurmTask>> {
        let m: HashMap<&str, &str> = pairs.iter().copied().collect();
        task(&|k: &str| m.get(k).map(|v| v.to_string()))
    }

    /// What `srun` sets for task 5 of a 2-node, 8-task step (and what a batch shell sees).
    #[test]
    fn srun_tasks_give_rank_size_node_and_first_host() {
        let step = [
            ("SLURM_JOB_ID", "4242"),
            ("SLURM_STEP_ID", "0"),
            ("SLURM_PROCID", "5"),
            ("SLURM_LOCALID", "1"),
            ("SLURM_NODEID", "1"),
            ("SLURM_NTASKS", "16"),
            ("SLURM_STEP_NUM_TASKS", "8"),
            ("SLURM_NNODES", "4"),
            ("SLURM_STEP_NUM_NODES", "2"),
            ("SLURM_JOB_NODELIST", "gpu[01-03,07]"),
            ("SLURM_STEP_NODELIST", "gpu[03,07]"),
        ];
        let t = task_of(&step).unwrap().unwrap();
        assert_eq!((t.rank, t.size, t.local_rank), (5, 8, Some(1)));
        assert_eq!((t.node_rank, t.nnodes), (Some(1), Some(2)));
        assert_eq!(t.first_node.as_deref(), Some("gpu03"));
        assert_eq!(t.step, "4242.0");
        // Without the step variables: the job's.
        let job: Vec<_> = step
            .iter()
            .copied()
            .filter(|(k, _)| !k.starts_with("SLURM_STEP_N"))
            .collect();
        let t = task_of(&job).unwrap().unwrap();
        assert_eq!((t.size, t.nnodes), (16, Some(4)));
        assert_eq!(t.first_node.as_deref(), Some("gpu01"));
        // A batch script's shell (no step): not a task.
        let batch: Vec<_> = step
            .iter()
            .copied()
            .filter(|(k, _)| *k != "SLURM_STEP_ID")
            .collect();
        assert_eq!(task_of(&batch).unwrap(), None);
        // A bad list names its variable.
        let mut bad = step.to_vec();
        bad.retain(|(k, _)| *k != "SLURM_STEP_NODELIST");
        bad.push(("SLURM_STEP_NODELIST", "gpu[1-"));
        match task_of(&bad) {
            Err(Error::Env { var, .. }) => assert_eq!(var, "SLURM_STEP_NODELIST"),
            other => panic!("{other:?}"),
        }
        // The derived port is the same on every task of a step, and in 20000..40000.
        let p = default_port("4242.0");
        assert_eq!(p, default_port("4242.0"));
        assert!((20000..40000).contains(&p));
    }
}
