// Compiles the kernels crate in `kernels/` to PTX with the pinned nightly, and writes
// `OUT_DIR/my_app_kernels.rs` (the PTX and its entry points) for `src/main.rs` to include.
fn main() {
    symcomm_build::Builder::new("kernels").build_or_exit();
}
