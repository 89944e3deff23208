//! Every gallery kernel fits the block size the host API launches it with. The host loads the
//! module with `Module::load_for_block(PTX, 512)`, so the driver's JIT keeps registers ×
//! threads within the SM's 64 K registers (no launch fails with "too many resources
//! requested"); this test assembles the PTX under the same bound and checks that it costs
//! (almost) nothing: at most a few bytes of spills per kernel, and no arrays in local memory
//! (a stack frame beyond those spills: what a closure LLVM did not inline leaves behind, its
//! captures and the arrays of packs it indexes; 6 µs on the fused two-shot of 128 rows).

use std::path::Path;

use symcomm_build::ptxas;
use symcomm_gallery::kernels;
use symcomm_gallery_kernels::plan;

/// `(entry, registers, spill store bytes, stack frame bytes)` for every entry function in a
/// `ptxas -v` report.
fn registers(report: &str) -> Vec<(String, u32, u32, u32)> {
    let mut out = Vec::new();
    let mut current: Option<String> = None;
    let (mut spills, mut stack) = (0, 0);
    for line in report.lines() {
        if let Some(rest) = line.split("Compiling entry function '").nth(1) {
            current = rest.split('\'').next().map(str::to_owned);
            (spills, stack) = (0, 0);
        } else if let Some((frame, rest)) = line.split_once("bytes stack frame, ")
            && let Some(n) = rest.split(" bytes spill stores").next()
        {
            spills = n.trim().parse().unwrap_or(u32::MAX);
            stack = frame.trim().parse().unwrap_or(u32::MAX);
        } else if let (Some(name), Some(rest)) = (&current, line.split("Used ").nth(1))
            && let Some(n) = rest
                .split(" registers")
                .next()
                .and_then(|n| n.trim().parse().ok())
        {
            out.push((name.clone(), n, spills, stack));
            current = None;
        }
    }
    out
}

/// Most spill-store bytes a kernel may need under the register bound.
const MAX_SPILL: u32 = 64;

#[test]
fn every_gallery_kernel_fits_its_launch_block_in_the_register_file() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let Some(ptxas) = ptxas::find_for_checks(&root).unwrap_or_else(|e| panic!("{e}")) else {
        eprintln!("skipping: ptxas not found (run scripts/fetch-ptxas)");
        return;
    };
    let dir = root.join("target/ptxas-check");
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("symcomm_gallery_kernels_fit.ptx");
    std::fs::write(&file, kernels::PTX).unwrap();
    let threads = plan::THREADS.max(plan::LL_THREADS);
    let bound = format!("--maxrregcount={}", 65536 / threads);
    let out = ptxas::assemble_with(&ptxas, &file, "sm_90", &dir, &[&bound]).unwrap();
    let regs = registers(&out.report);
    assert_eq!(regs.len(), kernels::ENTRY_POINTS.len(), "{}", out.report);
    for (name, n, spills, stack) in regs {
        assert!(
            n * threads <= 65536,
            "{name} uses {n} registers: {threads} threads need {} > 65536",
            n * threads
        );
        assert!(
            spills <= MAX_SPILL,
            "{name} spills {spills} bytes under {bound} (at most {MAX_SPILL})"
        );
        assert!(
            stack <= MAX_SPILL,
            "{name} has a {stack}-byte stack frame under {bound} (at most {MAX_SPILL}: \
             an array or a closure's captures in local memory?)"
        );
    }
}

/// The first memory instruction of a kernel body that comes before its
/// `griddepcontrol.wait` and reads more than the kernel's parameters; `Err` without a wait.
fn access_before_wait(body: &str) -> Result<Option<String>, ()> {
    let wait = body.find("griddepcontrol.wait").ok_or(())?;
    for line in body[..wait].lines() {
        // The opcode: the first token that is not a predicate guard (`@%p1`, `@!%p1`).
        let op = line
            .split_whitespace()
            .find(|t| !t.starts_with('@'))
            .unwrap_or("");
        let memory = [
            "ld.",
            "st.",
            "atom.",
            "red.",
            "multimem.",
            "cp.",
            "prefetch",
        ]
        .iter()
        .any(|m| op.starts_with(m));
        if memory && !op.starts_with("ld.param") {
            return Ok(Some(line.trim().to_owned()));
        }
    }
    Ok(None)
}

#[test]
fn the_wait_check_finds_accesses_ahead_of_the_wait() {
    let ok = "ld.param.u64 %rd1, [p];\n griddepcontrol.wait;\n ld.global.u32 %r1, [%rd1];";
    assert_eq!(access_before_wait(ok), Ok(None));
    let early = "ld.param.u64 %rd1, [p];\n @%p1 ld.u32 %r1, [%rd1];\n griddepcontrol.wait;";
    assert_eq!(
        access_before_wait(early),
        Ok(Some("@%p1 ld.u32 %r1, [%rd1];".to_owned()))
    );
    assert_eq!(access_before_wait("st.global.u32 [%rd1], %r1;"), Err(()));
}

/// The host launches gallery kernels with programmatic dependent launch (on by default), which
/// keeps the stream order only if every kernel waits for the kernel ahead of it before
/// touching memory: each entry's body must hold `griddepcontrol.wait`, and no load or store
/// other than of its parameters may come before it.
#[test]
fn every_gallery_kernel_waits_for_the_kernel_ahead_before_touching_memory() {
    let mut entries = 0;
    for part in kernels::PTX.split(".entry ").skip(1) {
        let name: String = part
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // The body ends where the next top-level function begins.
        let body = part.split("\n.func").next().unwrap_or(part);
        match access_before_wait(body) {
            Err(()) => panic!("kernel `{name}` never calls grid_dependency_wait"),
            Ok(Some(line)) => panic!("kernel `{name}`: `{line}` before griddepcontrol.wait"),
            Ok(None) => {}
        }
        entries += 1;
    }
    assert!(
        entries > 50,
        "only {entries} entries found in the gallery PTX"
    );
}
