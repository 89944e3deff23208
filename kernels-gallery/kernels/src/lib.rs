//! Device kernels of the gallery collectives, written only against the public device API
//! (`symcomm-device`). Built to PTX by `kernels-gallery/build.rs`; the host API in
//! `symcomm-gallery` plans and launches them.
//!
//! Kernels cannot be generic, so the bodies are generic over the element type and operator
//! (`reduce_ops`, `collectives`, `rmsnorm`) and this file instantiates them as concrete
//! entry points named `<collective>_<algorithm>_<type>_<op>`. All data moves in 16-byte packs
//! (`plan::PACK`) of the destination; sizes and offsets are any whole number of elements: the
//! first and last pack of a range are stored in part, and a source that sits elsewhere in its
//! packs is funnel-shifted into the destination's (`shape`). The multimem kernels alone need
//! 16-byte multiples (the host API runs them only then).
//!
//! Every kernel that waits does so with a bounded wait: a barrier or LL poll that times out
//! (or sees the abort flag) writes its code (1 = timeout, 2 = aborted) to `status`.

#![no_std]
#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx, asm_experimental_arch))]
#![warn(missing_docs)]
// Kernels and their bodies take every operand as a parameter (no host structs to hide them in).
#![allow(clippy::too_many_arguments)]

#[cfg(test)]
extern crate std;

mod collectives;
mod common;
pub mod gin_bench;
mod ll_collectives;
mod ll_path;
pub mod multimem_ops;
pub mod pattern;
mod pipeline;
pub mod plan;
mod reduce_ops;
pub mod rmsnorm;
pub mod rmsnorm_split;
pub mod shape;

use symcomm_device::kernel;
use symcomm_device::mem::Ordering;
use symcomm_device::prelude::DevComm;
use symcomm_device::ptr::SymPtr;
use symcomm_device::reduce::{Bf16, F16, Max, Min, Sum};

use crate::common::Io;
use crate::ll_path::LlLaunch;

/// Defines `#[kernel]` entry points, each documented by the attributes given and ended by
/// `;`, that forward to `$body` (a body in this crate) with the communicator by reference.
/// Every entry point first waits for its predecessor on the stream (`common::enter`). One form
/// per protocol, which fixes the parameters after the operands:
/// - `barriered(EXIT) name [extra] => body`: `(comm, src, dst, bytes, extra…, timeout_ns,
///   status)`; `body(&comm, Io, extra…)` runs between the LSA barriers of
///   `common::bracketed`, whose exit ordering is `EXIT` (`AcqRel` for bodies that store into
///   peers, `Release` for those that only write their own memory);
///   `barriered(EXIT gated)` passes the entry barrier's wait to the body as a last argument
///   (`&mut common::Gate`), which the body opens after its setup;
/// - `ll name [extra] => body`: `(comm, src, dst, bytes, scratch, cap, extra…, timeout_ns,
///   status)`; `body(&ll, Io, extra…)` runs in an LL launch (`LlLaunch::begin`, and
///   `LlLaunch::end` with the result of its waits);
/// - `ll name(operands) => body`: the same with the listed operands in place of `src, dst,
///   bytes`, passed to the body as they are;
/// - `push(KIND) name => body`: `(comm, src, dst, bytes, push, slots, chunk, timeout_ns,
///   status)`, the pipelined push kernels (`pipeline::Kind::KIND`);
/// - `fn name(params) => call`: the parameters as listed, forwarded by `call`.
///
/// `barriered`, `ll` and `push` take `name | name_any`: two entry points, `name` for 16-byte
/// aligned offsets and size, which calls `body(…, false)` (whole packs only: the instructions
/// of the gallery before it took any shape), and `name_any` for any other shape, which calls
/// `body(…, true)`. The host picks one per call; the flag is a constant in each, so neither
/// carries the other's code.
macro_rules! entry {
    (@kernel [$(#[$a:meta])*] $name:ident($($params:tt)*) $body:block) => {
        $(#[$a])*
        #[kernel]
        pub unsafe fn $name($($params)*) {
            common::enter();
            // SAFETY: the contract above.
            unsafe { $body }
        }
    };
    // The two forms of a body that moves `bytes` from `src` to `dst`: `$name` for 16-byte
    // aligned calls (the body's `any = false`: whole packs only) and `$any` for any other shape
    // (`any = true`), each documented by the attributes given plus a line naming its shapes.
    (@both [$(#[$a:meta])*] $form:ident $args:tt $name:ident $any:ident $x:tt
        => $body:expr; $($rest:tt)*) => {
        entry!(@$form [$(#[$a])*
            #[doc = ""]
            #[doc = concat!("For offsets and a size that are multiples of 16 bytes; any other \
                shape: [`", stringify!($any), "`].")]
        ] $args $name $x (false) => $body;);
        entry!(@$form [$(#[$a])*
            #[doc = ""]
            #[doc = concat!("Any element count at any element offset (the form of [`",
                stringify!($name), "`] that stores partial packs and shifts sources).")]
        ] $args $any $x (true) => $body;);
        entry!($($rest)*);
    };
    (@barriered [$(#[$a:meta])*] ($exit:ident) $name:ident [$($x:ident: $xt:ty),*]
        ($($any:expr)?) => $body:expr;) => {
        entry!(@kernel [$(#[$a])*] $name(
            comm: DevComm, src: SymPtr<u8>, dst: SymPtr<u8>, bytes: u64,
            $($x: $xt,)* timeout_ns: u64, status: *mut u32
        ) {
            let io = Io { src, dst, bytes };
            common::bracketed!(&comm, Ordering::$exit, timeout_ns, status, {
                $body(&comm, io $(, $x)* $(, $any)?)
            })
        });
    };
    (@barriered [$(#[$a:meta])*] ($exit:ident gated) $name:ident [$($x:ident: $xt:ty),*]
        ($($any:expr)?) => $body:expr;) => {
        entry!(@kernel [$(#[$a])*] $name(
            comm: DevComm, src: SymPtr<u8>, dst: SymPtr<u8>, bytes: u64,
            $($x: $xt,)* timeout_ns: u64, status: *mut u32
        ) {
            let io = Io { src, dst, bytes };
            common::bracketed!(&comm, Ordering::$exit, timeout_ns, status, |gate| {
                $body(&comm, io $(, $x)* $(, $any)?, gate)
            })
        });
    };
    (@ll [$(#[$a:meta])*] () $name:ident [$($x:ident: $xt:ty),*]
        ($($any:expr)?) => $body:expr;) => {
        entry!(@kernel [$(#[$a])*] $name(
            comm: DevComm, src: SymPtr<u8>, dst: SymPtr<u8>, bytes: u64,
            scratch: SymPtr<u8>, cap: u64, $($x: $xt,)* timeout_ns: u64, status: *mut u32
        ) {
            let ll = LlLaunch::begin(&comm, scratch, cap, timeout_ns);
            let res = $body(&ll, Io { src, dst, bytes } $(, $x)* $(, $any)?);
            ll.end(res, status)
        });
    };
    (@push [$(#[$a:meta])*] ($kind:ident) $name:ident [] ($($any:expr)?) => $body:expr;) => {
        entry!(@kernel [$(#[$a])*] $name(
            comm: DevComm, src: SymPtr<u8>, dst: SymPtr<u8>, bytes: u64,
            push: SymPtr<u8>, slots: u64, chunk: u64, timeout_ns: u64, status: *mut u32
        ) {
            let io = Io { src, dst, bytes };
            $body(
                pipeline::Kind::$kind, &comm, io, push, slots, chunk, timeout_ns, status
                $(, $any)?
            )
        });
    };
    () => {};
    (
        $(#[$a:meta])* barriered($($exit:ident)+) $name:ident | $any:ident
            $([$($x:ident: $xt:ty),*])? => $body:expr; $($rest:tt)*
    ) => {
        entry!(@both [$(#[$a])*] barriered ($($exit)+) $name $any [$($($x: $xt),*)?] => $body;
            $($rest)*);
    };
    (
        $(#[$a:meta])* barriered($($exit:ident)+) $name:ident $([$($x:ident: $xt:ty),*])?
            => $body:expr; $($rest:tt)*
    ) => {
        entry!(@barriered [$(#[$a])*] ($($exit)+) $name [$($($x: $xt),*)?] () => $body;);
        entry!($($rest)*);
    };
    (
        $(#[$a:meta])* ll $name:ident | $any:ident $([$($x:ident: $xt:ty),*])?
            => $body:expr; $($rest:tt)*
    ) => {
        entry!(@both [$(#[$a])*] ll () $name $any [$($($x: $xt),*)?] => $body; $($rest)*);
    };
    ($(#[$a:meta])* ll $name:ident($($p:ident: $t:ty),*) => $body:expr; $($rest:tt)*) => {
        entry!(@kernel [$(#[$a])*] $name(
            comm: DevComm, $($p: $t,)*
            scratch: SymPtr<u8>, cap: u64, timeout_ns: u64, status: *mut u32
        ) {
            let ll = LlLaunch::begin(&comm, scratch, cap, timeout_ns);
            let res = $body(&ll, $($p),*);
            ll.end(res, status)
        });
        entry!($($rest)*);
    };
    ($(#[$a:meta])* push($kind:ident) $name:ident | $any:ident => $body:expr; $($rest:tt)*) => {
        entry!(@both [$(#[$a])*] push ($kind) $name $any [] => $body; $($rest)*);
    };
    ($(#[$a:meta])* fn $name:ident($($p:ident: $t:ty),* $(,)?) => $call:expr; $($rest:tt)*) => {
        entry!(@kernel [$(#[$a])*] $name($($p: $t),*) { $call });
        entry!($($rest)*);
    };
}

/// The reducing entry points of every element type and operator: one row of names per
/// algorithm, the `i`-th name of each row for the `i`-th `(type, operator)` of `types`.
macro_rules! reducing {
    (
        types: $(($t:ty, $op:ty)),*;
        two_shot: $($two:ident | $two_any:ident),*;
        one_shot_ll: $($one:ident | $one_any:ident),*;
        reduce_scatter: $($rs:ident | $rs_any:ident),*;
        two_shot_push: $($push:ident | $push_any:ident),*;
        reduce_scatter_ll: $($rsll:ident | $rsll_any:ident),*;
        two_shot_ll: $($twoll:ident | $twoll_any:ident),*;
        reduce_scatter_push: $($rspush:ident | $rspush_any:ident),*;
    ) => {$(
        entry! {
            #[doc = concat!("Reduce-scatter by stores only, pipelined (", stringify!($t), ", ",
                stringify!($op), "): see `pipeline`.")]
            ///
            /// # Safety
            /// - `src` (window or local pointer) holds `lsa_size × bytes` on this rank,
            ///   `dst` `bytes` (may be this rank's block of `src`);
            /// - `push` is the gallery push scratch with room for the counters and
            ///   `grid × lsa_size × slots` slots of `chunk` packs (`plan::pipe_chunk`), used by
            ///   no other kernel; `slots ≥ 2`, `chunk ≥ 1`;
            /// - barriers, launch shape and `status` as for the two-shot all-reduce.
            push(ReduceScatter) $rspush | $rspush_any => pipeline::push_pipeline::<$t, $op>;

            #[doc = concat!("Two-shot all-reduce on LL lines (", stringify!($t), ", ",
                stringify!($op), "): reduce-scatter and all-gather without a barrier.")]
            ///
            /// # Safety
            /// - `src` and `dst` (windows or local pointers; may be equal) hold `bytes` on this
            ///   rank;
            /// - `scratch`, the LL launch order and `status` as for the one-shot all-reduce, with
            ///   `cap ≥ 2 × ceil(packs / lsa_size)` (`packs`: those of `dst`).
            ll $twoll | $twoll_any => reduce_ops::two_shot_ll::<$t, $op>;

            #[doc = concat!("LL reduce-scatter (", stringify!($t), ", ", stringify!($op),
                "): `dst` (`bytes`) = reduction in rank order of block `rank` of every \
                rank's `src`, no barrier.")]
            ///
            /// # Safety
            /// - `src` (window or local pointer) holds `lsa_size × bytes` on this rank,
            ///   `dst` `bytes` (may be this rank's block of `src`);
            /// - `scratch`, `cap ≥` the packs of a block (`plan::block_packs`), the LL launch
            ///   order and `status` as for the one-shot all-reduce.
            ll $rsll | $rsll_any => ll_collectives::reduce_scatter::<$t, $op>;

            #[doc = concat!("Two-shot all-reduce by stores only, pipelined (", stringify!($t),
                ", ", stringify!($op), "): see `pipeline`.")]
            ///
            /// # Safety
            /// - as the two-shot all-reduce (`src` may be a local pointer here);
            /// - `push` as for the pipelined reduce-scatter.
            push(AllReduce) $push | $push_any => pipeline::push_pipeline::<$t, $op>;

            #[doc = concat!("Two-shot all-reduce (", stringify!($t), ", ", stringify!($op),
                "): `dst` = reduction of every rank's `src`, `bytes` bytes.")]
            ///
            /// # Safety
            /// - `src` and `dst` are windows (may be the same range) holding `bytes`
            ///   from their offsets on every LSA rank;
            /// - `comm` has at least `grid_dim().x` LSA barriers, and every LSA rank launches
            ///   this kernel with the same shape and `bytes`;
            /// - `status` is null or a valid `u32` of this device.
            barriered(AcqRel) $two | $two_any => reduce_ops::two_shot::<$t, $op>;

            #[doc = concat!("One-shot LL all-reduce (", stringify!($t), ", ", stringify!($op),
                "): `dst` = reduction of every rank's `src` in rank order, no barrier.")]
            ///
            /// # Safety
            /// - `src` and `dst` (windows or local pointers; may be equal) hold `bytes` on this
            ///   rank;
            /// - `scratch` is the gallery scratch window (LL region for `cap ≥` the packs of `dst`
            ///   per sender, header zeroed at creation), used only by gallery LL launches, which
            ///   every LSA rank issues in the same order with the same `bytes`, each with at most
            ///   [`plan::LL_COUNTERS`] blocks;
            /// - `status` is null or a valid `u32` of this device.
            ll $one | $one_any => reduce_ops::one_shot_ll::<$t, $op>;

            #[doc = concat!("Reduce-scatter (", stringify!($t), ", ", stringify!($op),
                "): `dst` (`bytes`) = reduction of slice `rank` of every rank's `src`.")]
            ///
            /// # Safety
            /// - `src` is a window of `lsa_size × bytes` on every LSA rank; `dst`
            ///   (window or local pointer) holds `bytes` and does not overlap slices
            ///   of `src` other than this rank's;
            /// - barriers and launch shape as for the two-shot all-reduce; `status` as there.
            barriered(Release gated) $rs | $rs_any => reduce_ops::reduce_scatter::<$t, $op>;
        }
    )*};
}

reducing! {
    types: (f32, Sum), (f32, Min), (f32, Max), (Bf16, Sum), (Bf16, Min), (Bf16, Max), (F16, Sum), (F16, Min), (F16, Max), (i32, Sum), (i32, Min), (i32, Max);
    two_shot: all_reduce_two_shot_f32_sum | all_reduce_two_shot_f32_sum_any, all_reduce_two_shot_f32_min | all_reduce_two_shot_f32_min_any, all_reduce_two_shot_f32_max | all_reduce_two_shot_f32_max_any, all_reduce_two_shot_bf16_sum | all_reduce_two_shot_bf16_sum_any, all_reduce_two_shot_bf16_min | all_reduce_two_shot_bf16_min_any, all_reduce_two_shot_bf16_max | all_reduce_two_shot_bf16_max_any, all_reduce_two_shot_f16_sum | all_reduce_two_shot_f16_sum_any, all_reduce_two_shot_f16_min | all_reduce_two_shot_f16_min_any, all_reduce_two_shot_f16_max | all_reduce_two_shot_f16_max_any, all_reduce_two_shot_i32_sum | all_reduce_two_shot_i32_sum_any, all_reduce_two_shot_i32_min | all_reduce_two_shot_i32_min_any, all_reduce_two_shot_i32_max | all_reduce_two_shot_i32_max_any;
    one_shot_ll: all_reduce_one_shot_f32_sum | all_reduce_one_shot_f32_sum_any, all_reduce_one_shot_f32_min | all_reduce_one_shot_f32_min_any, all_reduce_one_shot_f32_max | all_reduce_one_shot_f32_max_any, all_reduce_one_shot_bf16_sum | all_reduce_one_shot_bf16_sum_any, all_reduce_one_shot_bf16_min | all_reduce_one_shot_bf16_min_any, all_reduce_one_shot_bf16_max | all_reduce_one_shot_bf16_max_any, all_reduce_one_shot_f16_sum | all_reduce_one_shot_f16_sum_any, all_reduce_one_shot_f16_min | all_reduce_one_shot_f16_min_any, all_reduce_one_shot_f16_max | all_reduce_one_shot_f16_max_any, all_reduce_one_shot_i32_sum | all_reduce_one_shot_i32_sum_any, all_reduce_one_shot_i32_min | all_reduce_one_shot_i32_min_any, all_reduce_one_shot_i32_max | all_reduce_one_shot_i32_max_any;
    reduce_scatter: reduce_scatter_f32_sum | reduce_scatter_f32_sum_any, reduce_scatter_f32_min | reduce_scatter_f32_min_any, reduce_scatter_f32_max | reduce_scatter_f32_max_any, reduce_scatter_bf16_sum | reduce_scatter_bf16_sum_any, reduce_scatter_bf16_min | reduce_scatter_bf16_min_any, reduce_scatter_bf16_max | reduce_scatter_bf16_max_any, reduce_scatter_f16_sum | reduce_scatter_f16_sum_any, reduce_scatter_f16_min | reduce_scatter_f16_min_any, reduce_scatter_f16_max | reduce_scatter_f16_max_any, reduce_scatter_i32_sum | reduce_scatter_i32_sum_any, reduce_scatter_i32_min | reduce_scatter_i32_min_any, reduce_scatter_i32_max | reduce_scatter_i32_max_any;
    two_shot_push: all_reduce_two_shot_push_f32_sum | all_reduce_two_shot_push_f32_sum_any, all_reduce_two_shot_push_f32_min | all_reduce_two_shot_push_f32_min_any, all_reduce_two_shot_push_f32_max | all_reduce_two_shot_push_f32_max_any, all_reduce_two_shot_push_bf16_sum | all_reduce_two_shot_push_bf16_sum_any, all_reduce_two_shot_push_bf16_min | all_reduce_two_shot_push_bf16_min_any, all_reduce_two_shot_push_bf16_max | all_reduce_two_shot_push_bf16_max_any, all_reduce_two_shot_push_f16_sum | all_reduce_two_shot_push_f16_sum_any, all_reduce_two_shot_push_f16_min | all_reduce_two_shot_push_f16_min_any, all_reduce_two_shot_push_f16_max | all_reduce_two_shot_push_f16_max_any, all_reduce_two_shot_push_i32_sum | all_reduce_two_shot_push_i32_sum_any, all_reduce_two_shot_push_i32_min | all_reduce_two_shot_push_i32_min_any, all_reduce_two_shot_push_i32_max | all_reduce_two_shot_push_i32_max_any;
    reduce_scatter_ll: reduce_scatter_ll_f32_sum | reduce_scatter_ll_f32_sum_any, reduce_scatter_ll_f32_min | reduce_scatter_ll_f32_min_any, reduce_scatter_ll_f32_max | reduce_scatter_ll_f32_max_any, reduce_scatter_ll_bf16_sum | reduce_scatter_ll_bf16_sum_any, reduce_scatter_ll_bf16_min | reduce_scatter_ll_bf16_min_any, reduce_scatter_ll_bf16_max | reduce_scatter_ll_bf16_max_any, reduce_scatter_ll_f16_sum | reduce_scatter_ll_f16_sum_any, reduce_scatter_ll_f16_min | reduce_scatter_ll_f16_min_any, reduce_scatter_ll_f16_max | reduce_scatter_ll_f16_max_any, reduce_scatter_ll_i32_sum | reduce_scatter_ll_i32_sum_any, reduce_scatter_ll_i32_min | reduce_scatter_ll_i32_min_any, reduce_scatter_ll_i32_max | reduce_scatter_ll_i32_max_any;
    two_shot_ll: all_reduce_two_shot_ll_f32_sum | all_reduce_two_shot_ll_f32_sum_any, all_reduce_two_shot_ll_f32_min | all_reduce_two_shot_ll_f32_min_any, all_reduce_two_shot_ll_f32_max | all_reduce_two_shot_ll_f32_max_any, all_reduce_two_shot_ll_bf16_sum | all_reduce_two_shot_ll_bf16_sum_any, all_reduce_two_shot_ll_bf16_min | all_reduce_two_shot_ll_bf16_min_any, all_reduce_two_shot_ll_bf16_max | all_reduce_two_shot_ll_bf16_max_any, all_reduce_two_shot_ll_f16_sum | all_reduce_two_shot_ll_f16_sum_any, all_reduce_two_shot_ll_f16_min | all_reduce_two_shot_ll_f16_min_any, all_reduce_two_shot_ll_f16_max | all_reduce_two_shot_ll_f16_max_any, all_reduce_two_shot_ll_i32_sum | all_reduce_two_shot_ll_i32_sum_any, all_reduce_two_shot_ll_i32_min | all_reduce_two_shot_ll_i32_min_any, all_reduce_two_shot_ll_i32_max | all_reduce_two_shot_ll_i32_max_any;
    reduce_scatter_push: reduce_scatter_push_f32_sum | reduce_scatter_push_f32_sum_any, reduce_scatter_push_f32_min | reduce_scatter_push_f32_min_any, reduce_scatter_push_f32_max | reduce_scatter_push_f32_max_any, reduce_scatter_push_bf16_sum | reduce_scatter_push_bf16_sum_any, reduce_scatter_push_bf16_min | reduce_scatter_push_bf16_min_any, reduce_scatter_push_bf16_max | reduce_scatter_push_bf16_max_any, reduce_scatter_push_f16_sum | reduce_scatter_push_f16_sum_any, reduce_scatter_push_f16_min | reduce_scatter_push_f16_min_any, reduce_scatter_push_f16_max | reduce_scatter_push_f16_max_any, reduce_scatter_push_i32_sum | reduce_scatter_push_i32_sum_any, reduce_scatter_push_i32_min | reduce_scatter_push_i32_min_any, reduce_scatter_push_i32_max | reduce_scatter_push_i32_max_any;
}

entry! {
    /// All-gather: `bytes` of this rank's `src` land in block `rank` of every rank's `dst`.
    ///
    /// # Safety
    /// - `src` (window or local pointer) holds `bytes`; `dst` is a window of
    ///   `lsa_size × bytes` on every LSA rank (`src` may be this rank's block of it);
    /// - `comm` has at least `grid_dim().x` LSA barriers; every LSA rank launches the kernel with
    ///   the same shape and `bytes`; `status` is null or a valid `u32` of this device.
    barriered(AcqRel gated) all_gather | all_gather_any => collectives::all_gather;

    /// [`all_gather_any`] for exactly two LSA ranks: that body alone, in a kernel of its own
    /// (see `collectives::all_gather_two`).
    ///
    /// # Safety
    /// - as [`all_gather_any`];
    /// - the LSA team has exactly two ranks.
    barriered(AcqRel gated) all_gather_any_2 => collectives::all_gather_two;

    /// All-to-all: block `p` (`bytes`) of this rank's `src` lands in block `rank` of peer
    /// `p`'s `dst`.
    ///
    /// # Safety
    /// - `src` (window or local pointer) holds `lsa_size × bytes`; `dst` is a window of
    ///   that size on every LSA rank, not overlapping `src`;
    /// - barriers, launch shape and `status` as for [`all_gather`].
    barriered(AcqRel gated) all_to_all | all_to_all_any => collectives::all_to_all;

    /// Broadcast: `bytes` of LSA rank `root`'s `src` land in every rank's `dst`.
    ///
    /// # Safety
    /// - `src` and `dst` are windows of `bytes` on every LSA rank (`dst` may equal
    ///   `src`); `root` is an LSA rank;
    /// - barriers, launch shape and `status` as for [`all_gather`].
    barriered(AcqRel) broadcast | broadcast_any [root: i32] => collectives::broadcast;

    /// LL all-gather: `bytes` of this rank's `src` land in block `rank` of every rank's
    /// `dst`, no barrier.
    ///
    /// # Safety
    /// - `src` holds `bytes` and `dst` `lsa_size × bytes` on this rank
    ///   (windows or local pointers; `src` may be this rank's block of `dst`);
    /// - `scratch`, `cap ≥` the packs of a block (`plan::block_packs`), the LL launch order
    ///   and `status` as for the one-shot all-reduce.
    ll all_gather_ll | all_gather_ll_any => ll_collectives::all_gather;

    /// LL all-to-all: block `p` (`bytes`) of this rank's `src` lands in block `rank` of
    /// peer `p`'s `dst`, no barrier.
    ///
    /// # Safety
    /// - `src` and `dst` hold `lsa_size × bytes` on this rank and do not overlap;
    /// - `scratch`, `cap ≥` the packs of a block (`plan::block_packs`), the LL launch order
    ///   and `status` as for the one-shot all-reduce;
    /// - the grid has a nonzero even number of threads (whole warps).
    ll all_to_all_ll | all_to_all_ll_any => ll_collectives::all_to_all;

    /// LL broadcast: `bytes` of LSA rank `root`'s `src` land in every rank's `dst`, no
    /// barrier (the root pushes, the other ranks acknowledge: `ll_collectives::broadcast`).
    ///
    /// # Safety
    /// - `src` (read on the root) and `dst` hold `bytes` on this rank (windows or local
    ///   pointers; `dst` may equal `src`); `root` is an LSA rank;
    /// - `scratch`, `cap ≥` the packs of `dst` (`plan::span_packs`), the LL launch order
    ///   and `status` as for the one-shot all-reduce.
    ll broadcast_ll | broadcast_ll_any [root: i32] => ll_collectives::broadcast;

    /// Fused all-reduce + residual add + RMSNorm, one-shot LL (bf16): see [`rmsnorm`].
    ///
    /// # Safety
    /// - `x` (window or local pointer) holds `tokens × hidden` bf16 on this rank; `a`'s
    ///   pointers are device memory of this GPU of the sizes [`rmsnorm::NormArgs`] gives;
    ///   `hidden` is a multiple of 8 and at most `8 × MAX_PACKS × block size`;
    /// - `scratch` is the gallery scratch window with `cap ≥ tokens × hidden / 8`; every LSA rank
    ///   issues the same sequence of gallery LL launches, each with at most [`plan::LL_COUNTERS`]
    ///   blocks; `status` is null or a valid `u32`;
    /// - with `a.segs > 1`: `segs ≤ rmsnorm_split::MAX_SEGS`, the grid is a multiple of `segs`
    ///   and launched in clusters of `segs` blocks (the blocks of a row, see
    ///   [`rmsnorm_split::split`]), every block resident.
    ll all_reduce_rmsnorm_one_shot_bf16(x: SymPtr<u8>, a: rmsnorm::NormArgs)
        => rmsnorm::fused_one_shot;

    /// Fused all-reduce + residual add + RMSNorm, two-shot on LL lines (bf16): see [`rmsnorm`].
    ///
    /// # Safety
    /// As [`all_reduce_rmsnorm_one_shot_bf16`] with `cap ≥ 2 × ceil(tokens / lsa_size) ×
    /// hidden / 8`; the residual is the same on every rank.
    ll all_reduce_rmsnorm_two_shot_ll_bf16(x: SymPtr<u8>, a: rmsnorm::NormArgs)
        => rmsnorm::fused_two_shot_ll;

    /// Fused all-reduce + residual add + RMSNorm, two-shot (bf16): see [`rmsnorm`].
    ///
    /// # Safety
    /// - `x` is a window of `tokens × hidden` bf16 on every LSA rank; the residual is the same
    ///   on every rank; `a` and `hidden` as for the one-shot kernel;
    /// - `fused` is the fused region of the gallery scratch window (see [`rmsnorm_split`]: room
    ///   for `tokens × hidden` bf16 after the slots), `tokens × segs ≤ rmsnorm_split::MAX_ITEMS`;
    /// - `comm` has `grid_dim().x ≤ plan::LL_COUNTERS` LSA barriers (the fused region's header
    ///   holds one launch counter per block), every block of the grid is resident; every LSA
    ///   rank launches the same shape and arguments, in the same sequence of these launches;
    ///   `status` is null or a valid `u32`.
    fn all_reduce_rmsnorm_two_shot_bf16(
        comm: DevComm, x: SymPtr<u8>, a: rmsnorm::NormArgs, fused: SymPtr<u8>, timeout_ns: u64,
        status: *mut u32,
    ) => rmsnorm::fused_two_shot(&comm, x, a, fused, None, timeout_ns, status);

    /// Fused all-reduce + residual add + RMSNorm, two-shot, writing straight into every rank's
    /// `out` and `residual_out` windows (bf16; `a.out` and `a.residual_out` ignored): see
    /// [`rmsnorm::fused_two_shot`].
    ///
    /// # Safety
    /// As [`all_reduce_rmsnorm_two_shot_bf16`], and `out`, `residual_out` are windows of
    /// `tokens × hidden` bf16 on every LSA rank, each the same on every rank; neither overlaps
    /// the scratch window, and `out` does not overlap `residual_out`; `residual_out` may be the
    /// residual, `out` may be `x`.
    fn all_reduce_rmsnorm_two_shot_direct_bf16(
        comm: DevComm, x: SymPtr<u8>, a: rmsnorm::NormArgs, fused: SymPtr<u8>,
        out: SymPtr<u8>, residual_out: SymPtr<u8>, timeout_ns: u64, status: *mut u32,
    ) => {
        let direct = Some((out, residual_out));
        rmsnorm::fused_two_shot(&comm, x, a, fused, direct, timeout_ns, status)
    };

    /// Residual add + RMSNorm of already all-reduced rows `s` (bf16), one block per row: the
    /// second kernel of the unfused baseline.
    ///
    /// # Safety
    /// `s` and `a`'s pointers are device memory of this GPU of the sizes [`rmsnorm::NormArgs`]
    /// gives; `hidden` as for the fused kernels.
    fn rmsnorm_residual_bf16(s: u64, a: rmsnorm::NormArgs) => rmsnorm::rmsnorm_residual(s, a);

    /// Residual add + RMSNorm of already all-reduced rows `s` (bf16) element by element: rows
    /// of any `hidden` at any element offset, one block per row.
    ///
    /// # Safety
    /// As [`rmsnorm::rmsnorm_residual_elements`].
    fn rmsnorm_residual_elements_bf16(s: u64, a: rmsnorm::NormArgs) =>
        rmsnorm::rmsnorm_residual_elements(s, a);
}

/// Writes `count` elements of the benchmark pattern ([`pattern::value`] of `rank` and
/// `seed`, elements `first..first + count`) to `dst` as type `elem` (0 = f32, 1 = bf16,
/// 2 = f16, 3 = i32). A grid-stride loop over any launch shape.
///
/// # Safety
/// `dst` is device memory of this GPU valid for `count` elements of the type.
#[kernel]
pub unsafe fn bench_fill(dst: *mut u8, count: u64, elem: u32, rank: u32, seed: u32, first: u64) {
    common::enter();
    let (start, stride) = common::grid_stride();
    let mut i = start;
    while i < count {
        let v = pattern::value(seed, rank, first + i);
        // SAFETY: i < count elements (caller's contract).
        unsafe {
            match elem {
                0 => *dst.cast::<f32>().add(i as usize) = v as f32,
                1 => *dst.cast::<u16>().add(i as usize) = Bf16::from_f32(v as f32).0,
                2 => *dst.cast::<u16>().add(i as usize) = F16::from_f32(v as f32).0,
                _ => *dst.cast::<i32>().add(i as usize) = v,
            }
        }
        i += stride;
    }
}

macro_rules! multimem_entries {
    ($($p:ty => $one:ident, $two:ident, $what:literal;)*) => {$(
        entry! {
            #[doc = concat!("Multimem one-shot all-reduce, ", $what,
                " (never launched on our test node: see [`multimem_ops`]).")]
            ///
            /// # Safety
            /// - `src` is a window bound to the LSA multicast object of `comm` (present), holding
            ///   `bytes` on every rank; `dst` (window or local pointer) as many here,
            ///   apart from `src` on every rank; both offsets and `bytes` are multiples of 16
            ///   (whole packs only: a tail would be left out);
            /// - `comm` has `grid_dim().x` LSA barriers; every rank launches the same shape;
            ///   `status` is null or a valid `u32`; sm_90 with NVLink SHARP.
            barriered(Release) $one => multimem_ops::one_shot::<$p>;

            #[doc = concat!("Multimem two-shot all-reduce, ", $what,
                " (never launched on our test node: see [`multimem_ops`]).")]
            ///
            /// # Safety
            /// As the one-shot kernel, with `dst` also a window bound to the multicast object.
            barriered(AcqRel) $two => multimem_ops::two_shot::<$p>;
        }
    )*};
}

multimem_entries! {
    multimem_ops::McF32 => all_reduce_multimem_one_shot_f32_sum,
        all_reduce_multimem_two_shot_f32_sum, "sum of f32";
    multimem_ops::McBf16 => all_reduce_multimem_one_shot_bf16_sum,
        all_reduce_multimem_two_shot_bf16_sum, "sum of bf16";
    multimem_ops::McF16 => all_reduce_multimem_one_shot_f16_sum,
        all_reduce_multimem_two_shot_f16_sum, "sum of f16";
    multimem_ops::McI32 => all_reduce_multimem_one_shot_i32_sum,
        all_reduce_multimem_two_shot_i32_sum, "wrapping sum of i32";
    multimem_ops::McBf16Min => all_reduce_multimem_one_shot_bf16_min,
        all_reduce_multimem_two_shot_bf16_min, "minimum of bf16";
    multimem_ops::McBf16Max => all_reduce_multimem_one_shot_bf16_max,
        all_reduce_multimem_two_shot_bf16_max, "maximum of bf16";
    multimem_ops::McF16Min => all_reduce_multimem_one_shot_f16_min,
        all_reduce_multimem_two_shot_f16_min, "minimum of f16";
    multimem_ops::McF16Max => all_reduce_multimem_one_shot_f16_max,
        all_reduce_multimem_two_shot_f16_max, "maximum of f16";
    multimem_ops::McI32Min => all_reduce_multimem_one_shot_i32_min,
        all_reduce_multimem_two_shot_i32_min, "minimum of i32";
    multimem_ops::McI32Max => all_reduce_multimem_one_shot_i32_max,
        all_reduce_multimem_two_shot_i32_max, "maximum of i32";
}
