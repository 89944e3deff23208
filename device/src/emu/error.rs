//! Why an emulated launch failed ([`EmuError`]).

use core::fmt;
use std::string::String;
use std::time::Duration;

use crate::geometry::Dim3;

/// Why an emulated launch failed.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EmuError {
    /// The launch configuration is not one a GPU accepts (or it was made from a kernel).
    InvalidLaunch(String),
    /// The emulator could not create its threads or shared memory.
    Spawn(String),
    /// The launch's resident blocks need more OS threads or memory maps than the process may
    /// still create (`vm.max_map_count`, `kernel.threads-max`, `RLIMIT_NPROC`, counting what
    /// is in use and what concurrent emulated launches reserved): refused before any of its
    /// threads started. The message names the limit, the numbers and what to shrink.
    HostLimit(String),
    /// A kernel thread panicked.
    Panic {
        /// `%ctaid` of the thread.
        block: Dim3,
        /// `%tid` of the thread.
        thread: Dim3,
        /// The panic message.
        message: String,
    },
    /// A kernel thread called `trap()`.
    Trap {
        /// `%ctaid` of the thread.
        block: Dim3,
        /// `%tid` of the thread.
        thread: Dim3,
    },
    /// A block barrier or warp collective was used in a way that is undefined on the GPU.
    Misuse {
        /// `%ctaid` of the thread.
        block: Dim3,
        /// `%tid` of the thread.
        thread: Dim3,
        /// What went wrong.
        detail: String,
    },
    /// Every live thread of a block waits in barriers or collectives that cannot complete.
    Deadlock {
        /// `%ctaid` of the block.
        block: Dim3,
        /// Who waits where.
        detail: String,
    },
    /// The launch ran past its watchdog.
    Timeout {
        /// The watchdog's limit.
        after: Duration,
        /// How many threads were still running.
        detail: String,
    },
}

struct D(Dim3);

impl fmt::Display for D {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "({}, {}, {})", self.0.x, self.0.y, self.0.z)
    }
}

impl fmt::Display for EmuError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EmuError::InvalidLaunch(s) => write!(f, "invalid emulated launch: {s}"),
            EmuError::Spawn(s) => write!(f, "emulator could not start the launch: {s}"),
            EmuError::HostLimit(s) => write!(f, "beyond the host's limits: {s}"),
            EmuError::Panic {
                block,
                thread,
                message,
            } => write!(
                f,
                "block {} thread {} panicked: {message}",
                D(*block),
                D(*thread)
            ),
            EmuError::Trap { block, thread } => {
                write!(f, "block {} thread {} trapped", D(*block), D(*thread))
            }
            EmuError::Misuse {
                block,
                thread,
                detail,
            } => write!(f, "block {} thread {}: {detail}", D(*block), D(*thread)),
            EmuError::Deadlock { block, detail } => {
                write!(f, "block {} deadlocked: {detail}", D(*block))
            }
            EmuError::Timeout { after, detail } => {
                write!(f, "launch still running after {after:?}: {detail}")
            }
        }
    }
}

impl std::error::Error for EmuError {}
