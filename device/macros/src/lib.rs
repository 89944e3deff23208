//! `#[kernel]`: marks a function as a GPU kernel entry point.
//!
//! On `nvptx64` the function becomes `#[unsafe(no_mangle)] extern "ptx-kernel"`, i.e. a
//! `.visible .entry` in the PTX with the function's name. The kernels crate must enable the
//! ABI with `#![cfg_attr(target_arch = "nvptx64", feature(abi_ptx))]`.
//!
//! On every other target the function stays a plain Rust function with the same signature,
//! so the same source builds for the host (the CPU emulator runs it there).
//!
//! Kernels return nothing and take their arguments by value (raw pointers, integers, floats,
//! `#[repr(C)]` structs such as `DevComm`). They may not be generic, `async` or `const`.

#![warn(missing_docs)]

use proc_macro::TokenStream;
use quote::quote;
use syn::spanned::Spanned;
use syn::{ItemFn, ReturnType, parse_macro_input};

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
    let attrs = &func.attrs;
    let vis = &func.vis;
    let unsafety = &sig.unsafety;
    let ident = &sig.ident;
    let inputs = &sig.inputs;
    let body = &func.block;
    Ok(quote! {
        #[cfg(target_arch = "nvptx64")]
        #(#attrs)*
        #[unsafe(no_mangle)]
        #vis #unsafety extern "ptx-kernel" fn #ident(#inputs) #body

        #[cfg(not(target_arch = "nvptx64"))]
        #(#attrs)*
        #vis #unsafety fn #ident(#inputs) #body
    })
}
