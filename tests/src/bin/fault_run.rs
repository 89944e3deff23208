//! `fault_run`: `symcomm-run` built in this package, so that the fault suite
//! (`tests/tests/faults.rs`) can start it by path (`CARGO_BIN_EXE_fault_run`).

fn main() {
    symcomm::init_logging(); // SYMCOMM_LOG
    std::process::exit(symcomm::launcher::cli(std::env::args_os().skip(1)));
}
