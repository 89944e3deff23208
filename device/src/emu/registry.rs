//! The process-wide registry of `#[kernel]` functions (host only), so that host code can
//! launch a kernel **by name** on the emulator exactly as it does on the GPU
//! (`Module::function(name)` in the host runtime).
//!
//! On the host, `#[kernel]` adds one [`KernelEntry`] per kernel to the distributed slice
//! [`KERNELS`] (`linkme`: the linker gathers the entries of every crate linked into the
//! binary; nothing runs at start-up). An entry holds the kernel's name, the module it was
//! defined in, the size of each parameter (`size_of::<T>()` of the declared types) and a
//! type-erased shim that reads each parameter from an argument-pointer array (the layout
//! `cuLaunchKernel` takes) and calls the kernel. Nothing of this exists on `nvptx64`: the PTX
//! is unchanged.

use core::ffi::c_void;

use linkme::distributed_slice;

/// The type-erased entry point of a registered kernel: reads parameter `i` from `args[i]` as
/// the declared type and calls the kernel with them.
///
/// # Safety
/// `args` holds one pointer per parameter, each pointing to a (possibly unaligned) value of
/// exactly the parameter's declared type; the kernel's own contract holds for those values.
pub type KernelShim = unsafe fn(args: *const *mut c_void);

/// One `#[kernel]` function of the binary.
#[derive(Debug)]
pub struct KernelEntry {
    /// The function's name (the PTX entry point's name).
    pub name: &'static str,
    /// `module_path!()` where it was defined (tells apart kernels of the same name).
    pub module_path: &'static str,
    /// `size_of` of each parameter, in order.
    pub param_sizes: &'static [usize],
    /// The parameter list as written (`a: A, b: B`), for error messages.
    pub params: &'static str,
    /// The `TypeId` of the parameter types as a tuple (`(A, B)`): what a typed launch must
    /// pass.
    pub args_type: fn() -> core::any::TypeId,
    /// Calls the kernel with arguments read from a pointer array (see [`KernelShim`]).
    pub shim: KernelShim,
}

/// Every `#[kernel]` of the binary (filled by the macro through `linkme`).
#[distributed_slice]
pub static KERNELS: [KernelEntry];

/// Every registered kernel.
pub fn all() -> &'static [KernelEntry] {
    &KERNELS
}

/// The registered kernels named `name` (usually at most one; several when crates linked into
/// the same binary define kernels of the same name).
pub fn find(name: &str) -> impl Iterator<Item = &'static KernelEntry> + '_ {
    KERNELS.iter().filter(move |e| e.name == name)
}
