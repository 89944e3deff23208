//! `symcomm-run -n N [--timeout S] [--grace S] -- prog args`: starts N local ranks of a job.
//! See [`symcomm::launcher`] for what it does and why.

fn main() {
    symcomm::init_logging(); // SYMCOMM_LOG
    std::process::exit(symcomm::launcher::cli(std::env::args_os().skip(1)));
}
