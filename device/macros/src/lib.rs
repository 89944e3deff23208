//! `#[kernel]`: marks a function as a GPU kernel entry point.
//!
//! On `nvptx64` the function becomes `#[unsafe(no_mangle)] extern "ptx-kernel"`, i.e. a
//! `.visible .entry` in the PTX with the function's name. The kernels crate must enable the
//! ABI with `#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]`.
//!
//! On every other target the function stays a plain Rust function with the same signature,
//! so the same source builds for the host (the CPU emulator runs it there). There it is also
//! registered in `symcomm_device::emu::registry` (name, parameter sizes and a type-erased
//! shim), so that host code can launch it by name on the emulator as it does on the GPU; the
//! registration is not compiled for `nvptx64`, so the PTX does not change.
//!
//! Kernels return nothing and take their arguments by value (raw pointers, integers, floats,
//! `#[repr(C)]` structs such as `DevComm`). They may not be generic, `async` or `const`.

#![warn(missing_docs)]

use proc_macro::TokenStream;
use quote::quote;
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, ReturnType, parse_macro_input};

/// Marks a function as a GPU kernel entry point (see the crate docs).
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    if !attr.is_empty() {
        let attr = proc_macro2::TokenStream::from(attr);
        return syn::Error::new(attr.span(), "#[kernel] takes no arguments")
            .to_compile_error()
            .into();
    }
    let func = parse_macro_input!(item as ItemFn);
    match expand(func) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

fn expand(func: ItemFn) -> syn::Result<proc_macro2::TokenStream> {
    let sig = &func.sig;
    if !sig.generics.params.is_empty() || sig.generics.where_clause.is_some() {
        return Err(syn::Error::new(
            sig.generics.span(),
            "a kernel cannot be generic: the PTX entry point needs one concrete signature",
        ));
    }
    if let Some(a) = &sig.asyncness {
        return Err(syn::Error::new(a.span(), "a kernel cannot be async"));
    }
    if let Some(c) = &sig.constness {
        return Err(syn::Error::new(c.span(), "a kernel cannot be const"));
    }
    if let Some(abi) = &sig.abi {
        return Err(syn::Error::new(
            abi.span(),
            "#[kernel] sets the ABI itself; remove the `extern` qualifier",
        ));
    }
    if let ReturnType::Type(_, ty) = &sig.output {
        return Err(syn::Error::new(ty.span(), "a kernel returns nothing"));
    }
    if let Some(v) = &sig.variadic {
        return Err(syn::Error::new(v.span(), "a kernel cannot be variadic"));
    }
    let mut types = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Typed(p) => types.push(&*p.ty),
            FnArg::Receiver(r) => {
                return Err(syn::Error::new(r.span(), "a kernel cannot take `self`"));
            }
        }
    }
    let attrs = &func.attrs;
    let vis = &func.vis;
    let unsafety = &sig.unsafety;
    let ident = &sig.ident;
    let inputs = &sig.inputs;
    let body = &func.block;
    // The registration is compiled under the same `cfg`s as the function.
    let cfgs: Vec<_> = attrs.iter().filter(|a| a.path().is_ident("cfg")).collect();
    let name = ident.to_string();
    let index = 0..types.len();
    // A kernel's parameters are its launch arguments, flat as the driver passes them: a long
    // list is normal (NCCL's kernels take a dozen), so clippy's argument count is not applied.
    Ok(quote! {
        #[cfg(target_arch = "nvptx64")]
        #(#attrs)*
        #[unsafe(no_mangle)]
        #[allow(clippy::too_many_arguments)]
        #vis #unsafety extern "ptx-kernel" fn #ident(#inputs) #body

        #[cfg(not(target_arch = "nvptx64"))]
        #(#attrs)*
        #[allow(clippy::too_many_arguments)]
        #vis #unsafety fn #ident(#inputs) #body

        // On the host: register the kernel for launches by name on the CPU emulator.
        #[cfg(not(target_arch = "nvptx64"))]
        #(#cfgs)*
        const _: () = {
            use ::symcomm_device::__private as __symcomm;

            /// Reads each argument as its declared type and calls the kernel.
            ///
            /// # Safety
            /// `args` holds one pointer per parameter, each to a value of its declared type;
            /// the kernel's contract holds for them.
            #[allow(unused_unsafe, unused_variables, clippy::missing_safety_doc)]
            unsafe fn __symcomm_shim(args: *const *mut __symcomm::c_void) {
                // SAFETY: the caller's contract: `args[i]` points to a value of the type of
                // parameter `i` (possibly unaligned), and the kernel's contract holds.
                unsafe {
                    #ident(#(
                        __symcomm::read_unaligned(*args.add(#index) as *const #types)
                    ),*)
                }
            }

            #[__symcomm::linkme::distributed_slice(__symcomm::KERNELS)]
            #[linkme(crate = ::symcomm_device::__private::linkme)]
            static __SYMCOMM_KERNEL: __symcomm::KernelEntry = __symcomm::KernelEntry {
                name: #name,
                module_path: ::core::module_path!(),
                param_sizes: &[#(__symcomm::size_of::<#types>()),*],
                shim: __symcomm_shim,
            };
        };
    })
}
