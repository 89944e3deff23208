//! Typed kernel arguments: what may be passed to a kernel by value ([`KernelArg`]) and a whole
//! argument list as a tuple ([`KernelArgs`]), whose sizes a launch checks against the PTX.

use std::ffi::c_void;

// ANCHOR: kernel_arg
/// A value that can be a kernel argument: its bytes are copied into the parameter buffer.
///
/// # Safety
/// Implementors are plain data (`Copy`, no padding that matters, no references) whose size and
/// layout equal the kernel parameter they are passed for: scalars, raw device pointers, and
/// `#[repr(C)]` structs shared with the device crate (such as the device communicator).
pub unsafe trait KernelArg: Copy {}
// ANCHOR_END: kernel_arg

macro_rules! kernel_arg {
    ($($t:ty),*) => { $(
        // SAFETY: a primitive scalar is plain data of its own size.
        unsafe impl KernelArg for $t {}
    )* };
}
kernel_arg!(u8, u16, u32, u64, usize, i8, i16, i32, i64, isize, f32, f64);
// SAFETY: the device communicator is `#[repr(C)]` plain data, passed by value (its layout is
// asserted in the device crate).
unsafe impl KernelArg for symcomm_device::comm::DevComm {}
// SAFETY: a symmetric pointer is `#[repr(C)]` `{window pointer, offset}` plain data.
unsafe impl<T> KernelArg for symcomm_device::ptr::SymPtr<T> {}
// SAFETY: raw pointers are 8-byte plain data; what they point to is the launcher's contract.
unsafe impl<T> KernelArg for *const T {}
// SAFETY: as above.
unsafe impl<T> KernelArg for *mut T {}

/// A tuple of [`KernelArg`]s: the whole argument list of a launch.
pub trait KernelArgs {
    /// The pointer array `cuLaunchKernel` takes, one pointer to each field of `self`.
    type Pointers: AsMut<[*mut c_void]>;
    /// Pointers to each argument, in order. They point into `self`.
    fn pointers(&mut self) -> Self::Pointers;
    /// The size of each argument, in order.
    fn sizes() -> Vec<usize>;
}

macro_rules! kernel_args {
    ($n:literal; $($name:ident : $idx:tt),*) => {
        impl<$($name: KernelArg),*> KernelArgs for ($($name,)*) {
            type Pointers = [*mut c_void; $n];
            #[allow(clippy::unused_unit)]
            fn pointers(&mut self) -> Self::Pointers {
                [$((&raw mut self.$idx).cast()),*]
            }
            fn sizes() -> Vec<usize> {
                vec![$(std::mem::size_of::<$name>()),*]
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
