//! Every gallery kernel, as ptxas assembles it for sm_90, fits the block size the host API
//! launches it with: registers × threads within the SM's 64 K registers, so no launch fails
//! with "too many resources requested" on the node.

use std::path::Path;

use symcomm_build::ptxas;
use symcomm_gallery::kernels;
use symcomm_gallery_kernels::plan;

/// `(entry, registers)` for every entry function in a `ptxas -v` report.
fn registers(report: &str) -> Vec<(String, u32)> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    for line in report.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            current = rest.split('\'').next().map(str::to_owned);
        } else if let (Some(name), Some(rest)) = (&current, line.split("Used ").nth(1))
            && let Some(n) = rest
                .split(" registers")
                .next()
                .and_then(|n| n.trim().parse().ok())
        {
            out.push((name.clone(), n));
            current = None;
        }
    }
    out
}

#[test]
fn every_gallery_kernel_fits_its_launch_block_in_the_register_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let Some(ptxas) = ptxas::find(&root) else {
        assert!(
            std::env::var_os("CI").is_none(),
            "ptxas not found under CI=true; run scripts/fetch-ptxas"
        );
        eprintln!("skipping: ptxas not found (run scripts/fetch-ptxas)");
        return;
    };
    let dir = root.join("target/ptxas-check");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("symcomm_gallery_kernels_fit.ptx");
    std::fs::write(&file, kernels::PTX).unwrap();
    let out = ptxas::assemble(&ptxas, &file, "sm_90", &dir).unwrap();
    let regs = registers(&out.report);
    assert_eq!(regs.len(), kernels::ENTRY_POINTS.len(), "{}", out.report);
    let threads = plan::THREADS.max(plan::LL_THREADS);
    for (name, n) in regs {
        assert!(
            n * threads <= 65536,
            "{name} uses {n} registers: {threads} threads need {} > 65536",
            n * threads
        );
    }
}
