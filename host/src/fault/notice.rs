//! Launcher notices: see [the module documentation](super).
//!
//! `symcomm-run` sets [`LAUNCHER_FD_ENV`] to `<fd>:<launcher pid>:<job>` (the job as the unique
//! id's magic in hex) and writes lines `dead <rank> <what happened>` (e.g. `dead 2 was killed by
//! signal 9`) to the pipe. The pipe is only trusted when it is one (a FIFO) and this process's
//! parent is that launcher: a program a rank starts inherits the variable but not the pipe, and
//! the fd number may name anything there.
//!
//! Nothing reads the pipe in the background: [`launcher_notice`] drains it (non-blocking) when
//! asked, so an answer reflects every line the launcher wrote before the call. Notices are only
//! for the job they name: a bootstrap of another job in the same process never sees them.

use std::fs::File;
use std::io::{ErrorKind, Read};
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::{Mutex, OnceLock};

/// The variable through which `symcomm-run` passes the notice pipe (see the module docs).
pub const LAUNCHER_FD_ENV: &str = "SYMCOMM_LAUNCHER_FD";
/// Longest notice line kept; longer lines are cut there.
const MAX_LINE: usize = 512;
/// Most notices kept (one per rank of a job is the most a launcher writes).
const MAX_NOTICES: usize = 1 << 16;

struct Notices {
    job: u64,
    /// The pipe (non-blocking), the bytes of a line not complete yet, and whether it ended.
    pipe: Mutex<(File, Vec<u8>, bool)>,
    /// Every rank reported so far, in the launcher's order.
    reported: Mutex<Vec<(usize, String)>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The process's notice pipe; `None` when the process was not started by `symcomm-run` (or
/// the variable does not name its pipe).
fn notices() -> Option<&'static Notices> {
    static NOTICES: OnceLock<Option<Notices>> = OnceLock::new();
    NOTICES
        .get_or_init(|| {
            let v = std::env::var(LAUNCHER_FD_ENV).ok()?;
            let (fd, job) = parse_env(&v)?;
            Some(Notices {
                job,
                pipe: Mutex::new((File::from(open_pipe(fd)?), Vec::new(), false)),
                reported: Mutex::new(Vec::new()),
            })
        })
        .as_ref()
}

/// `<fd>:<launcher pid>:<job hex>` → (fd, job), if the launcher is this process's parent.
fn parse_env(v: &str) -> Option<(i32, u64)> {
    let mut parts = v.trim().split(':');
    let fd: i32 = parts.next()?.parse().ok().filter(|&fd| fd > 2)?;
    let pid: i32 = parts.next()?.parse().ok()?;
    let job = u64::from_str_radix(parts.next()?, 16).ok()?;
    // SAFETY: getppid has no preconditions.
    (parts.next().is_none() && unsafe { libc::getppid() } == pid).then_some((fd, job))
}

/// Takes ownership of `fd` if it is an open FIFO, and makes it non-blocking and close-on-exec.
fn open_pipe(fd: i32) -> Option<OwnedFd> {
    // SAFETY: an all-zero `stat` is a valid value for fstat to overwrite.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable stat buffer; fstat only queries the descriptor.
    if unsafe { libc::fstat(fd, &mut st) } != 0 || st.st_mode & libc::S_IFMT != libc::S_IFIFO {
        tracing::warn!("{LAUNCHER_FD_ENV}: fd {fd} is not the launcher's pipe; ignored");
        return None;
    }
    // SAFETY: flags of a descriptor we checked is open; no memory is passed. Close-on-exec
    // keeps it from this process's own children; non-blocking lets a caller drain it.
    unsafe {
        libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
        libc::fcntl(fd, libc::F_SETFL, libc::O_NONBLOCK);
    }
    // SAFETY: the launcher (our parent, checked) handed this pipe to this process for this
    // purpose, nothing else in the runtime uses it, and the OnceLock above makes this the only
    // owner.
    Some(unsafe { OwnedFd::from_raw_fd(fd) })
}

impl Notices {
    /// Reads every complete line waiting in the pipe and records it.
    fn drain(&self) {
        let mut pipe = lock(&self.pipe);
        let (file, partial, eof) = &mut *pipe;
        let mut chunk = [0u8; 1024];
        while !*eof {
            match file.read(&mut chunk) {
                Ok(0) => *eof = true,
                Ok(k) => partial.extend_from_slice(&chunk[..k]),
                Err(e) if e.kind() == ErrorKind::Interrupted => {}
                Err(e) if e.kind() == ErrorKind::WouldBlock => break,
                Err(_) => *eof = true, // not readable any more: nothing more will come
            }
        }
        while let Some(end) = partial.iter().position(|&b| b == b'\n') {
            let line: Vec<u8> = partial.drain(..=end).collect();
            let text = String::from_utf8_lossy(&line[..line.len().min(MAX_LINE)]);
            match parse(text.trim_end()) {
                Some((rank, what)) => {
                    tracing::debug!("symcomm-run reports that rank {rank} {what}");
                    let mut reported = lock(&self.reported);
                    if reported.len() < MAX_NOTICES {
                        reported.push((rank, what));
                    }
                }
                None => tracing::warn!("ignoring a malformed notice from symcomm-run: {text:?}"),
            }
        }
        if partial.len() > MAX_LINE {
            partial.clear(); // a runaway line: drop it rather than grow
        }
    }
}

/// `dead <rank> <what>` → `(rank, "<what> (seen by symcomm-run)")`.
fn parse(line: &str) -> Option<(usize, String)> {
    let rest = line.strip_prefix("dead ")?;
    let (rank, what) = rest.split_once(' ')?;
    let what = what.trim();
    if what.is_empty() {
        return None;
    }
    Some((rank.parse().ok()?, format!("{what} (seen by symcomm-run)")))
}

/// What `symcomm-run` has reported about job `job` so far: every failed rank with what
/// happened to it, in the launcher's order (the first is most likely the cause of the others).
/// `None` without a launcher pipe, or for another job.
pub(crate) fn launcher_notices(job: u64) -> Option<Vec<(usize, String)>> {
    match notices() {
        Some(n) if n.job == job => {
            n.drain();
            Some(lock(&n.reported).clone())
        }
        _ => None,
    }
}

/// The first rank `symcomm-run` reported failed in job `job`, with what happened to it.
pub(crate) fn launcher_notice(job: u64) -> Option<(usize, String)> {
    launcher_notices(job)?.into_iter().next()
}

#[cfg(test)]
mod tests {
    use super::{parse, parse_env};

    #[test]
    fn notices_name_a_rank_and_what_happened() {
        assert_eq!(
            parse("dead 2 was killed by signal 9"),
            Some((2, "was killed by signal 9 (seen by symcomm-run)".into()))
        );
        for bad in [
            "",
            "dead",
            "dead x died",
            "dead 2",
            "dead 2 ",
            "alive 2 fine",
        ] {
            assert_eq!(parse(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn the_pipe_is_only_taken_from_the_parent_launcher() {
        // SAFETY: getppid has no preconditions.
        let parent = unsafe { libc::getppid() };
        assert_eq!(parse_env(&format!("7:{parent}:ff")), Some((7, 255)));
        for bad in [
            format!("7:{}:ff", parent + 1), // another process's pipe
            format!("2:{parent}:ff"),       // a standard stream
            format!("7:{parent}"),
            format!("7:{parent}:zz"),
            format!("7:{parent}:ff:1"),
            "".into(),
        ] {
            assert_eq!(parse_env(&bad), None, "{bad:?}");
        }
    }
}
