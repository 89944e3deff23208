//! `symcomm-run -n N [--timeout S] [--grace S] -- prog args`: starts N local ranks of a job.
//! See [`symcomm::launcher`] for what it does and why.

use symcomm::launcher::{self, LaunchArgs, Parsed, USAGE};

fn main() {
    let code = match LaunchArgs::parse(std::env::args_os().skip(1)) {
        Ok(Parsed::Help) => {
            println!("{USAGE}");
            0
        }
        Ok(Parsed::Run(args)) => match launcher::run(&args) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("symcomm-run: {e}");
                127
            }
        },
        Err(e) => {
            eprintln!("symcomm-run: {e}\n\n{USAGE}");
            2
        }
    };
    std::process::exit(code);
}
