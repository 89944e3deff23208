//! Kernels as the host sees them (host targets only): what `#[kernel]` emits so that a launch
//! with a wrong argument type or count does not compile.
//!
//! For every `#[kernel] fn my_kernel(a: A, b: B)`, the macro also emits, for the host target
//! only (the PTX does not change), a struct (a type only) named after the function in
//! `CamelCase` (`MyKernel`) that implements [`Kernel`]: its PTX entry name and its argument
//! tuple `(A, B)`. The host runtime (`symcomm::launch::Module::kernel::<MyKernel>()`) hands out a
//! launcher that takes exactly that tuple.
//!
//! This lives in the device crate, not the host crate, because kernels crates are `no_std`
//! and must not depend on the host runtime; the host runtime depends on this crate and
//! re-exports these traits.
//!
//! A kernel whose type name is taken, or would shadow an item of the prelude, names it:
//!
//! ```
//! use symcomm_device::launch::Kernel;
//! use symcomm_device::prelude::*;
//!
//! /// Zeroes this rank's copy of a window of `n` u32.
//! #[kernel(launch_type = WindowKernel)]
//! pub unsafe fn window(w: WindowHandle, n: u64) {
//!     let _ = (w, n); // …
//! }
//!
//! assert_eq!(WindowKernel::NAME, "window");
//! ```
//!
//! Without `launch_type`, that kernel is refused: its type would be `Window` and hide the
//! prelude's `Window` in the module.
//!
//! ```compile_fail
//! use symcomm_device::prelude::*;
//!
//! #[kernel]
//! pub unsafe fn window(w: WindowHandle, n: u64) {
//!     let _ = (w, n);
//! }
//! ```
//!
//! What a kernel may take (the macro checks each parameter): raw pointers, and by-value types
//! that are [`bytemuck::Pod`]: integers, floats, [`DevComm`](crate::comm::DevComm),
//! [`WindowHandle`](crate::window::WindowHandle), [`SymPtr`](crate::ptr::SymPtr),
//! [`Team`](crate::team::Team), and the user's own `#[repr(C)]` plain-data structs.

use core::ffi::c_void;

/// A `#[kernel]` function, seen from the host: its entry-point name and its parameters.
/// Implemented by the struct `#[kernel]` emits next to each kernel (see the module docs);
/// not meant to be implemented by hand.
///
/// # Safety
/// `NAME` is the name of a kernel (a PTX entry point and a registered host function) whose
/// parameters are exactly the elements of `Args`, in order.
pub unsafe trait Kernel: 'static {
    /// The PTX entry point's name (the function's name).
    const NAME: &'static str;
    /// The parameter types, as a tuple.
    type Args: KernelArgs;
}

/// A kernel's argument list: a tuple of up to 16 parameter values (`()` for none).
///
/// # Safety
/// [`pointers`](Self::pointers) returns one pointer to each element of `self`, in order, and
/// [`SIZES`](Self::SIZES) their sizes.
pub unsafe trait KernelArgs: Copy + 'static {
    /// The pointer array `cuLaunchKernel` takes.
    type Pointers: AsMut<[*mut c_void]>;
    /// The size of each argument, in order.
    const SIZES: &'static [usize];
    /// Pointers to each argument, in order. They point into `self`.
    fn pointers(&mut self) -> Self::Pointers;
}

macro_rules! kernel_args {
    ($n:literal; $($name:ident : $idx:tt),*) => {
        // SAFETY: one pointer per field, in order, and the fields' sizes.
        unsafe impl<$($name: Copy + 'static),*> KernelArgs for ($($name,)*) {
            type Pointers = [*mut c_void; $n];
            const SIZES: &'static [usize] = &[$(core::mem::size_of::<$name>()),*];
            #[allow(clippy::unused_unit)]
            fn pointers(&mut self) -> Self::Pointers {
                [$((&raw mut self.$idx).cast()),*]
            }
        }
    };
}
kernel_args!(0;);
kernel_args!(1; A: 0);
kernel_args!(2; A: 0, B: 1);
kernel_args!(3; A: 0, B: 1, C: 2);
kernel_args!(4; A: 0, B: 1, C: 2, D: 3);
kernel_args!(5; A: 0, B: 1, C: 2, D: 3, E: 4);
kernel_args!(6; A: 0, B: 1, C: 2, D: 3, E: 4, F: 5);
kernel_args!(7; A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6);
kernel_args!(8; A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7);
kernel_args!(9; A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7, I: 8);
kernel_args!(10; A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7, I: 8, J: 9);
kernel_args!(11; A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7, I: 8, J: 9, K: 10);
kernel_args!(12; A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7, I: 8, J: 9, K: 10, L: 11);
kernel_args!(13; A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7, I: 8, J: 9, K: 10, L: 11,
    M: 12);
kernel_args!(14; A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7, I: 8, J: 9, K: 10, L: 11,
    M: 12, N: 13);
kernel_args!(15; A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7, I: 8, J: 9, K: 10, L: 11,
    M: 12, N: 13, O: 14);
kernel_args!(16; A: 0, B: 1, C: 2, D: 3, E: 4, F: 5, G: 6, H: 7, I: 8, J: 9, K: 10, L: 11,
    M: 12, N: 13, O: 14, P: 15);

/// Compiles only for [`bytemuck::Pod`] types: `#[kernel]` calls it for every by-value
/// parameter (not for raw pointers).
#[doc(hidden)]
pub const fn assert_pod<T: bytemuck::Pod>() {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn argument_tuples_point_at_their_fields_and_know_their_sizes() {
        let mut args = (1u8, 2.5f64, core::ptr::null_mut::<u32>());
        assert_eq!(<(u8, f64, *mut u32)>::SIZES, &[1, 8, 8]);
        let p = args.pointers();
        assert_eq!(p[0], (&raw mut args.0).cast());
        assert_eq!(p[2], (&raw mut args.2).cast());
        assert!(<()>::SIZES.is_empty());
    }
}
