fn main() {
    symcomm_build::Builder::new("kernels").build_or_exit();
    // The same device API with `bounds-checks` (the crate turns the feature on): the GPU runs
    // of the checks (src/bin/gpu_checks.rs).
    symcomm_build::Builder::new("checked-kernels").build_or_exit();
}
