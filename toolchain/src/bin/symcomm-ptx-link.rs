//! The PTX linker as a standalone executable (see `symcomm_build::linker`).
//! `symcomm-build` compiles the same source on demand, so users never build this by hand.

#[path = "../linker.rs"]
mod linker;

fn main() {
    std::process::exit(linker::main());
}
