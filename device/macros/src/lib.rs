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
//! Also on the host only, it emits a struct named after the function in `CamelCase`
//! (`fn all_reduce_sum` → `AllReduceSum`; a type, with no value of its own to clash with
//! functions) that implements `symcomm_device::launch::Kernel`: the entry point's name and the
//! parameter types as a tuple. Host code launches through it
//! (`Module::kernel::<AllReduceSum>()`), so a wrong argument type or count is a compile error.
//! `#[kernel(launch_type = Name)]` names it otherwise, for a name already taken in the module;
//! a name that would shadow an item of `symcomm_device::prelude` is refused. At most 16
//! parameters.
//!
//! Kernels return nothing and take their arguments by value: raw pointers, or types that are
//! `bytemuck::Pod` (integers, floats, `DevComm`, `WindowHandle`, `SymPtr<T>`, the user's own
//! `#[repr(C)]` plain-data structs); the macro checks every other parameter for `Pod`. They may
//! not be generic, `async` or `const`.

#![warn(missing_docs)]

use proc_macro::TokenStream;
use quote::{format_ident, quote, quote_spanned};
use syn::spanned::Spanned;
use syn::{FnArg, ItemFn, ReturnType, Type, parse_macro_input};

/// Marks a function as a GPU kernel entry point (see the crate docs).
#[proc_macro_attribute]
pub fn kernel(attr: TokenStream, item: TokenStream) -> TokenStream {
    let mut launch_type: Option<syn::Ident> = None;
    let parser = syn::meta::parser(|meta| {
        if meta.path.is_ident("launch_type") {
            launch_type = Some(meta.value()?.parse()?);
            Ok(())
        } else {
            Err(meta.error("#[kernel] takes only `launch_type = Name`"))
        }
    });
    parse_macro_input!(attr with parser);
    let func = parse_macro_input!(item as ItemFn);
    match expand(func, launch_type) {
        Ok(tokens) => tokens.into(),
        Err(e) => e.to_compile_error().into(),
    }
}

/// The `CamelCase` names of `symcomm_device::prelude`: a launch type of one of these names
/// would shadow the prelude's item in the kernel's module (on the host only).
const PRELUDE_TYPES: &[&str] = &[
    "Dim3",
    "LsaBarrier",
    "DevComm",
    "Coop",
    "Cta",
    "Lanes",
    "Thread",
    "Tile",
    "Warp",
    "WarpSpan",
    "LoadOrder",
    "Ordering",
    "Scope",
    "StoreOrder",
    "SymPtr",
    "Team",
    "PeerSlice",
    "SymSlice",
    "WaitError",
    "Window",
    "WindowHandle",
];

/// Most parameters a kernel may take (the launch tuples of `symcomm_device::launch`).
const MAX_PARAMS: usize = 16;

fn expand(func: ItemFn, launch_type: Option<syn::Ident>) -> syn::Result<proc_macro2::TokenStream> {
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
    let mut params = Vec::new();
    for input in &sig.inputs {
        match input {
            FnArg::Typed(p) => {
                types.push(&*p.ty);
                params.push(tidy(&quote!(#p).to_string()));
            }
            FnArg::Receiver(r) => {
                return Err(syn::Error::new(r.span(), "a kernel cannot take `self`"));
            }
        }
    }
    if types.len() > MAX_PARAMS {
        return Err(syn::Error::new(
            sig.inputs.span(),
            format!(
                "a kernel takes at most {MAX_PARAMS} parameters (this one takes {}): group some \
                 in a #[repr(C)] struct passed by value",
                types.len()
            ),
        ));
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
    let params = params.join(", ");
    let marker = match launch_type {
        Some(named) => named,
        None => {
            let camel = camel_case(&name);
            if PRELUDE_TYPES.contains(&camel.as_str()) {
                return Err(syn::Error::new(
                    ident.span(),
                    format!(
                        "the launch type of kernel `{name}` would be `{camel}`, which shadows \
                         `symcomm_device::prelude::{camel}` in this module on the host: name \
                         it with #[kernel(launch_type = {camel}Kernel)]"
                    ),
                ));
            }
            format_ident!("{}", camel, span = ident.span())
        }
    };
    let marker_doc = format!(
        "The host's launch type of kernel [`{name}`]: `Module::kernel::<{marker}>()` gives a \
         launcher that takes exactly its arguments `({params})`. Emitted by `#[kernel]`, host \
         targets only."
    );
    // By-value parameters must be plain data; raw pointers are passed as addresses.
    let pod_checks = types.iter().filter(|t| !is_raw_pointer(t)).map(|t| {
        quote_spanned! {t.span()=> __symcomm::assert_pod::<#t>(); }
    });
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
        #[doc = #marker_doc]
        #[derive(Debug, Clone, Copy)]
        #vis struct #marker {}

        #[cfg(not(target_arch = "nvptx64"))]
        #(#cfgs)*
        // SAFETY: the kernel registered below under this name takes exactly these types.
        unsafe impl ::symcomm_device::__private::Kernel for #marker {
            const NAME: &'static str = #name;
            type Args = (#(#types,)*);
        }

        #[cfg(not(target_arch = "nvptx64"))]
        #(#cfgs)*
        const _: () = {
            use ::symcomm_device::__private as __symcomm;

            #[allow(dead_code)]
            fn __symcomm_params_are_plain_data() {
                #(#pod_checks)*
            }

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
                params: #params,
                args_type: || __symcomm::TypeId::of::<(#(#types,)*)>(),
                shim: __symcomm_shim,
            };
        };
    })
}

/// Whether `ty` is a raw pointer type, also when a `macro_rules!` fragment wrapped it in an
/// invisible group.
fn is_raw_pointer(ty: &Type) -> bool {
    match ty {
        Type::Ptr(_) => true,
        Type::Group(g) => is_raw_pointer(&g.elem),
        Type::Paren(p) => is_raw_pointer(&p.elem),
        _ => false,
    }
}

/// Token text as people write it: `x : * const f32` → `x: *const f32`.
fn tidy(tokens: &str) -> String {
    let mut s = tokens.to_string();
    for (from, to) in [
        (" : ", ": "),
        ("* const ", "*const "),
        ("* mut ", "*mut "),
        (" < ", "<"),
        (" <", "<"),
        ("< ", "<"),
        (" >", ">"),
        (" ,", ","),
        (" :: ", "::"),
        (":: ", "::"),
        ("& ", "&"),
        ("[ ", "["),
        (" ]", "]"),
        (" ; ", "; "),
    ] {
        s = s.replace(from, to);
    }
    s
}

/// `all_reduce_sum` → `AllReduceSum` (the name of a kernel's host launch type).
fn camel_case(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for part in name.split('_').filter(|p| !p.is_empty()) {
        let mut chars = part.chars();
        if let Some(c) = chars.next() {
            out.extend(c.to_uppercase());
            out.push_str(chars.as_str());
        }
    }
    if out.is_empty() {
        out.push_str("Kernel");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::camel_case;

    #[test]
    fn launch_types_are_the_names_in_camel_case() {
        assert_eq!(
            camel_case("all_reduce_two_shot_f32_sum"),
            "AllReduceTwoShotF32Sum"
        );
        assert_eq!(camel_case("bench_fill"), "BenchFill");
        assert_eq!(camel_case("_x__y_"), "XY");
        assert_eq!(camel_case("k"), "K");
    }

    #[test]
    fn parameter_lists_read_as_written() {
        let p: syn::FnArg = syn::parse_quote!(x: *const SymPtr<f32>);
        assert_eq!(
            super::tidy(&quote::quote!(#p).to_string()),
            "x: *const SymPtr<f32>"
        );
    }
}
