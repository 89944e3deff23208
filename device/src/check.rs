//! Runtime checks of what kernels pass to this crate: which builds make them and how a failed
//! one is reported.
//!
//! Checked: peer indices against the LSA team ([`Window`](crate::window::Window) accessors and
//! everything built on them), element indices of typed views ([`crate::view`]), symmetric
//! pointers' alignment and slot range ([`SymPtr`](crate::ptr::SymPtr)), and barrier sessions
//! that end without `finish` ([`LsaBarrier`](crate::barrier::LsaBarrier)).
//!
//! **When**: always on the host, where the CPU emulator runs kernels; on the GPU only in builds
//! with the cargo feature `bounds-checks` (each check costs a compare, some a descriptor load).
//! [`ENABLED`] says which. A release GPU build without the feature has none of this code: the
//! checks are `if ENABLED { … }` on a constant, removed before code generation.
//!
//! **How a failure shows**: the same message everywhere, starting with `symcomm:`. On the host
//! the kernel thread panics with it, so the emulated launch fails with
//! `block (…) thread (…) panicked: symcomm: …`. On the GPU the thread prints it (`vprintf`:
//! it reaches the process's stdout when the host next synchronises) and traps, so the launch
//! fails with an unspecified launch failure (`CUDA_ERROR_LAUNCH_FAILED`) and the context is
//! lost.

/// Whether this build checks (see the module docs): true on the host, and on the GPU with the
/// `bounds-checks` feature.
pub const ENABLED: bool = cfg!(any(feature = "bounds-checks", not(target_arch = "nvptx64")));

/// Prints the GPU message (`format` with up to two 64-bit conversions, for `a` and `b`; extra
/// arguments are ignored) and traps; on the host,
/// panics with the host message (`format!` arguments).
macro_rules! fail {
    ($gpu:literal, $a:expr, $b:expr; $($host:tt)+) => {{
        #[cfg(target_arch = "nvptx64")]
        {
            gpu::print2($gpu, $a as i64, $b as i64);
            crate::arch::trap()
        }
        #[cfg(not(target_arch = "nvptx64"))]
        {
            std::panic!($($host)+)
        }
    }};
}

/// Reports an LSA peer index outside `0..lsa_size` and stops the thread.
#[cold]
#[inline(never)]
pub(crate) fn peer_outside_team(peer: i32, lsa_size: u32) -> ! {
    fail!(
        b"symcomm: LSA peer %lld is not in the window's LSA team of %lld ranks\n\0",
        peer, lsa_size;
        "symcomm: LSA peer {peer} is not in the window's LSA team of {lsa_size} ranks \
         (0..{lsa_size})"
    )
}

/// Reports a team member outside `0..n_ranks` and stops the thread.
#[cold]
#[inline(never)]
pub(crate) fn member_outside_team(peer: i32, n_ranks: i32) -> ! {
    fail!(
        b"symcomm: peer %lld is not a member of the team of %lld ranks\n\0",
        peer, n_ranks;
        "symcomm: peer {peer} is not a member of the team of {n_ranks} ranks (0..{n_ranks})"
    )
}

/// Reports an element index at or past the end of a view of `len` elements.
#[cold]
#[inline(never)]
pub(crate) fn index_out_of_view(index: usize, len: usize) -> ! {
    fail!(
        b"symcomm: element %llu is past the end of a view of %llu elements\n\0",
        index, len;
        "symcomm: element {index} is past the end of a view of {len} elements"
    )
}

/// Reports a range `from..from + len` that does not fit a view of `view_len` elements.
#[cold]
#[inline(never)]
pub(crate) fn range_out_of_view(from: usize, len: usize, view_len: usize) -> ! {
    #[cfg(target_arch = "nvptx64")]
    let _ = len; // only the host message names it
    fail!(
        b"symcomm: a range from element %llu does not fit a view of %llu elements\n\0",
        from, view_len;
        "symcomm: elements {from}..{} are not in a view of {view_len} elements",
        from.saturating_add(len)
    )
}

/// Reports a symmetric pointer whose byte offset is misaligned for its element (`size`
/// bytes) or past the per-rank slot (`slot` bytes).
#[cold]
#[inline(never)]
pub(crate) fn bad_offset(offset: usize, size: usize, slot: u64) -> ! {
    #[cfg(target_arch = "nvptx64")]
    let _ = size; // only the host message names it
    fail!(
        b"symcomm: symmetric pointer offset %llu is misaligned or past the slot of %llu bytes\n\0",
        offset, slot;
        "symcomm: symmetric pointer offset {offset} (element of {size} bytes) is misaligned \
         or past the per-rank slot of {slot} bytes"
    )
}

/// Reports a symmetric pointer without a window (`SymPtr::from_local`) used for another rank's
/// copy or the multicast range.
#[cold]
#[inline(never)]
pub(crate) fn no_window() -> ! {
    fail!(
        b"symcomm: a symmetric pointer without a window (from_local) names no peer\n\0",
        0, 0;
        "symcomm: a symmetric pointer without a window (from_local) has only a local copy: \
         `local()` is its one accessor"
    )
}

/// Reports a GIN context index outside `0..n_contexts` (also a communicator without GIN).
#[cold]
#[inline(never)]
pub(crate) fn gin_context(context: u32, n_contexts: u32) -> ! {
    fail!(
        b"symcomm: GIN context %lld of a device communicator with %lld GIN contexts\n\0",
        context, n_contexts;
        "symcomm: GIN context {context} of a device communicator with {n_contexts} GIN \
         contexts (Requirements::gin_contexts; 0 means the communicator has no GIN)"
    )
}

/// Reports a GIN signal index outside `0..n_signals`.
#[cold]
#[inline(never)]
pub(crate) fn gin_signal(index: u32, n: u32) -> ! {
    fail!(
        b"symcomm: GIN signal %lld of a device communicator with %lld signals\n\0",
        index, n;
        "symcomm: GIN signal {index} of a device communicator with {n} signals \
         (Requirements::gin_signals)"
    )
}

/// Reports a GIN counter index outside `0..n_counters`.
#[cold]
#[inline(never)]
pub(crate) fn gin_counter(index: u32, n: u32) -> ! {
    fail!(
        b"symcomm: GIN counter %lld of a device communicator with %lld counters\n\0",
        index, n;
        "symcomm: GIN counter {index} of a device communicator with {n} counters \
         (Requirements::gin_counters)"
    )
}

/// Reports a GIN peer this rank has no connection to (outside the world, or outside its rail
/// team under rail connectivity).
#[cold]
#[inline(never)]
pub(crate) fn gin_peer(world_peer: i32, n_ranks: i32) -> ! {
    fail!(
        b"symcomm: GIN peer %lld (world rank) is not connected to this rank (world of %lld)\n\0",
        world_peer, n_ranks;
        "symcomm: GIN peer {world_peer} (world rank) is not connected to this rank: a world \
         of {n_ranks} ranks, and under rail connectivity only the rail team is"
    )
}

/// Reports a window that is not registered with the GIN transport (its descriptor's
/// `gin_wins` slot is 0).
#[cold]
#[inline(never)]
pub(crate) fn gin_window(slot: u32) -> ! {
    fail!(
        b"symcomm: window not registered for GIN (gin_wins[%lld] is 0)\n\0",
        slot, 0;
        "symcomm: window not registered for GIN (gin_wins[{slot}] is 0): register it on a \
         communicator that spans nodes"
    )
}

/// Reports a GIN barrier index outside `0..n`.
#[cold]
#[inline(never)]
pub(crate) fn gin_barrier(index: u32, n: u32) -> ! {
    fail!(
        b"symcomm: GIN barrier %lld of a device communicator with %lld such barriers\n\0",
        index, n;
        "symcomm: GIN barrier {index} of a device communicator with {n} such barriers \
         (Requirements::world_gin_barriers / rail_gin_barriers)"
    )
}

/// Reports an inline GIN value of more than 8 bytes.
#[cold]
#[inline(never)]
pub(crate) fn gin_value(size: usize) -> ! {
    fail!(
        b"symcomm: GIN put_value of %lld bytes (at most 8)\n\0",
        size, 0;
        "symcomm: GIN put_value of {size} bytes (at most 8)"
    )
}

/// Reports a barrier session that ended without `finish` (nothing while the thread unwinds
/// for another failure: that one is the report).
#[cold]
#[inline(never)]
#[cfg_attr(
    all(target_arch = "nvptx64", not(feature = "bounds-checks")),
    allow(dead_code) // sessions have no drop there
)]
pub(crate) fn unfinished_session(index: u32) {
    #[cfg(not(target_arch = "nvptx64"))]
    if std::thread::panicking() {
        return;
    }
    fail!(
        b"symcomm: LSA barrier session %lld ended without finish()\n\0",
        index, 0;
        "symcomm: LSA barrier session {index} ended without finish(): its epoch was not saved, \
         so the next launch on barrier {index} would start from a stale one (call \
         `finish(&coop)` on every path, after a failed wait too)"
    )
}

#[cfg(target_arch = "nvptx64")]
mod gpu {
    unsafe extern "C" {
        /// The CUDA device runtime's `printf` back end (resolved by the driver's JIT): a
        /// NUL-terminated format and a buffer of the arguments, each aligned to its size.
        fn vprintf(format: *const u8, args: *const u8) -> i32;
    }

    /// `printf(format, a, b)` for a format with at most two 64-bit conversions.
    #[inline(always)]
    pub(super) fn print2(format: &'static [u8], a: i64, b: i64) {
        let args = [a, b];
        // SAFETY: `format` is NUL-terminated (every caller's literal ends in `\0`) and takes
        // two 64-bit integers, which `args` holds, 8-byte aligned.
        unsafe { vprintf(format.as_ptr(), args.as_ptr().cast()) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(f: fn()) -> std::string::String {
        let e = std::panic::catch_unwind(f).expect_err("the check did not fail");
        e.downcast_ref::<std::string::String>()
            .cloned()
            .unwrap_or_default()
    }

    #[test]
    fn checks_are_on_for_the_host_and_name_the_numbers() {
        const { assert!(ENABLED) };
        let m = message(|| peer_outside_team(4, 4));
        assert_eq!(
            m,
            "symcomm: LSA peer 4 is not in the window's LSA team of 4 ranks (0..4)"
        );
        let m = message(|| member_outside_team(-1, 3));
        assert!(
            m.contains("peer -1 is not a member of the team of 3 ranks"),
            "{m}"
        );
        let m = message(|| index_out_of_view(10, 10));
        assert!(
            m.contains("element 10 is past the end of a view of 10 elements"),
            "{m}"
        );
        let m = message(|| unfinished_session(7));
        assert!(
            m.contains("LSA barrier session 7 ended without finish()"),
            "{m}"
        );
    }
}
