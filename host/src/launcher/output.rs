//! The ranks' output: every line a rank prints is copied to the launcher's stdout or stderr
//! with a `[rank k] ` prefix, whole lines at a time, by one thread per stream.
//!
//! [`super::supervise`] starts the threads and waits for them once the ranks have exited.

use std::io::{self, BufRead, BufReader, Read, Write};
use std::sync::{Arc, Mutex};
use std::thread;

use crate::{Error, Result};

/// Longest piece of one output line that [`prefix_lines`] holds before writing it.
pub const MAX_LINE_BYTES: usize = 64 << 10;

/// Copies `input` to `out` line by line, each line prefixed with `[rank k] ` and written whole
/// under the lock (a last line without a newline gets one). Bytes need not be UTF-8. A line
/// longer than [`MAX_LINE_BYTES`] is written in pieces of that size, each prefixed and ended
/// like a line, so a rank printing without newlines cannot make the launcher buffer without
/// bound.
pub fn prefix_lines<W: Write>(rank: usize, input: impl Read, out: &Mutex<W>) -> io::Result<()> {
    let prefix = format!("[rank {rank}] ");
    let mut input = BufReader::new(input);
    let mut line = Vec::new();
    loop {
        line.clear();
        let mut piece = (&mut input).take(MAX_LINE_BYTES as u64);
        if piece.read_until(b'\n', &mut line)? == 0 {
            return Ok(());
        }
        let mut buf = Vec::with_capacity(prefix.len() + line.len() + 1);
        buf.extend_from_slice(prefix.as_bytes());
        buf.extend_from_slice(&line);
        if !line.ends_with(b"\n") {
            buf.push(b'\n');
        }
        let mut w = out.lock().unwrap_or_else(|p| p.into_inner());
        w.write_all(&buf)?;
        w.flush()?;
    }
}

/// Starts a thread that copies `input` to `out` with [`prefix_lines`].
pub(crate) fn start_pump<W: Write + Send + 'static>(
    rank: usize,
    input: impl Read + Send + 'static,
    out: &Arc<Mutex<W>>,
) -> Result<thread::JoinHandle<io::Result<()>>> {
    let out = Arc::clone(out);
    thread::Builder::new()
        .name(format!("symcomm-run-out{rank}"))
        .spawn(move || prefix_lines(rank, input, &*out))
        .map_err(|source| Error::Io {
            what: format!("starting the output thread of rank {rank}"),
            source,
        })
}
