//! The device API's runtime checks through `gpu_checks` on the CPU emulator (the same binary
//! the GPU suite runs): an LSA peer index equal to the team size and an unfinished barrier
//! session each fail the launch with the check's message, after a control launch that passes.

use std::process::Command;

#[test]
fn a_peer_outside_the_team_and_an_unfinished_session_are_reported_on_the_emulator() {
    let out = Command::new(env!("CARGO_BIN_EXE_gpu_checks"))
        .env("SYMCOMM_BACKEND", "emu")
        .output()
        .expect("run gpu_checks");
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{text}");
    let peer = "peer: PASS: rank 0: launch failed as it should: ";
    let line = text
        .lines()
        .find(|l| l.starts_with(peer))
        .unwrap_or_default();
    assert!(
        line.contains("symcomm: LSA peer 2 is not in the window's LSA team of 2 ranks (0..2)"),
        "{text}"
    );
    assert!(text.contains("session: PASS: "), "{text}");
    assert!(
        text.contains("LSA barrier session 0 ended without finish()"),
        "{text}"
    );
}
