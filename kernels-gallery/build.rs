fn main() {
    symcomm_build::Builder::new("kernels").build_or_exit();
}
