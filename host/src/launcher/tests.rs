//! Tests of the launcher's pieces: parsing, the ranks' environment, output prefixing, argument
//! checks before anything starts, and exit codes.

use std::ffi::OsString;
use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;
use std::sync::Mutex;
use std::thread;
use std::time::Duration;

use super::args::DEFAULT_GRACE;
use super::output::{MAX_LINE_BYTES, prefix_lines};
use super::supervise::{describe, exit_code};
use super::*;
use crate::Error;
use crate::bootstrap::UniqueId;

fn parse(args: &[&str]) -> std::result::Result<Parsed, String> {
    LaunchArgs::parse(args.iter().map(OsString::from))
}

#[test]
fn command_lines_are_parsed_up_to_the_program() {
    let Ok(Parsed::Run(a)) = parse(&["-n", "4", "--timeout", "2.5", "--", "prog", "-n", "x"])
    else {
        panic!("not parsed")
    };
    assert_eq!(a.nprocs, 4);
    assert_eq!(a.timeout, Some(Duration::from_millis(2500)));
    assert_eq!(a.grace, DEFAULT_GRACE);
    assert_eq!(a.program, "prog");
    assert_eq!(a.args, vec![OsString::from("-n"), OsString::from("x")]);
    let Ok(Parsed::Run(a)) = parse(&["-n8", "--grace", "1", "prog"]) else {
        panic!("not parsed")
    };
    assert_eq!(a.gpus, None);
    let Ok(Parsed::Run(g)) = parse(&["-n", "2", "--gpus", "6,7", "prog"]) else {
        panic!("not parsed")
    };
    assert_eq!(g.gpus, Some(vec![6, 7]));
    assert_eq!(
        (a.nprocs, a.grace, a.args.len()),
        (8, Duration::from_secs(1), 0)
    );
    assert_eq!(parse(&["--help"]), Ok(Parsed::Help));
}

#[test]
fn bad_command_lines_say_what_is_wrong() {
    for (args, says) in [
        (&["prog"][..], "number of ranks"),
        (&["-n", "2"][..], "program"),
        (&["-n", "0", "prog"][..], "-n"),
        (&["-n"][..], "needs a value"),
        (&["--frobnicate", "prog"][..], "unknown option"),
        (&["-n", "2", "--timeout", "0", "prog"][..], "--timeout"),
        (
            &["-n", "3", "--gpus", "0,1", "prog"][..],
            "2 device(s) for 3 ranks",
        ),
        (&["-n", "1", "--gpus", "a", "prog"][..], "--gpus"),
    ] {
        let e = parse(args).unwrap_err();
        assert!(e.contains(says), "{args:?}: {e}");
    }
}

#[test]
fn every_rank_gets_the_launch_variables() {
    let id = UniqueId::new("127.0.0.1:4242".parse().unwrap(), 0xab);
    let env = rank_env(2, 4, &id, Some(Duration::from_millis(1500)));
    let get = |k: &str| {
        env.iter()
            .find(|(n, _)| n == k)
            .map(|(_, v)| v.as_str())
            .unwrap()
    };
    assert_eq!(get("RANK"), "2");
    assert_eq!(get("WORLD_SIZE"), "4");
    assert_eq!(get("LOCAL_RANK"), "2");
    assert_eq!(get("LOCAL_WORLD_SIZE"), "4");
    assert_eq!(get("MASTER_ADDR"), "127.0.0.1");
    assert_eq!(get("MASTER_PORT"), "4242");
    assert_eq!(get("SYMCOMM_UNIQUE_ID"), "00000000000000ab@127.0.0.1:4242");
    assert_eq!(get("SYMCOMM_TIMEOUT"), "1.5");
    // What the launcher sets is what the ranks read back.
    let back = crate::bootstrap::LaunchEnv::from_lookup(|k| {
        env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    })
    .unwrap();
    assert_eq!((back.rank, back.size, back.unique_id), (2, 4, Some(id)));
}

#[test]
fn output_lines_get_the_rank_prefix_whole() {
    let out = Mutex::new(Vec::new());
    prefix_lines(3, &b"one\ntwo\n\xffbinary\nlast"[..], &out).unwrap();
    assert_eq!(
        out.into_inner().unwrap(),
        b"[rank 3] one\n[rank 3] two\n[rank 3] \xffbinary\n[rank 3] last\n"
    );
}

#[test]
fn a_line_without_newlines_is_written_in_bounded_pieces() {
    let mut input = vec![b'a'; 2 * MAX_LINE_BYTES + 10];
    input.extend_from_slice(b"\nnext\n");
    let out = Mutex::new(Vec::new());
    prefix_lines(1, &input[..], &out).unwrap();
    let out = out.into_inner().unwrap();
    let lines: Vec<&[u8]> = out.split_inclusive(|&b| b == b'\n').collect();
    let piece = |n| [&b"[rank 1] "[..], &vec![b'a'; n], b"\n"].concat();
    assert_eq!(lines.len(), 4);
    assert_eq!(lines[0], piece(MAX_LINE_BYTES));
    assert_eq!(lines[1], piece(MAX_LINE_BYTES));
    assert_eq!(lines[2], piece(10));
    assert_eq!(lines[3], b"[rank 1] next\n");
}

#[test]
fn run_refuses_hand_built_arguments_before_starting_any_rank() {
    let marker = std::env::temp_dir().join(format!("symcomm-run-check-{}", std::process::id()));
    let args = LaunchArgs {
        nodes: None,
        nprocs: 3,
        timeout: None,
        gpus: Some(vec![0]),
        grace: DEFAULT_GRACE,
        program: "sh".into(),
        args: vec![
            "-c".into(),
            "touch \"$0.$RANK\"".into(),
            marker.clone().into_os_string(),
        ],
    };
    let e = run(&args).unwrap_err();
    assert!(
        matches!(&e, Error::InvalidArgument(m) if m.contains("1 device(s) for 3")),
        "{e}"
    );
    for bad in [
        LaunchArgs {
            nodes: None,
            nprocs: 0,
            gpus: None,
            ..args.clone()
        },
        LaunchArgs {
            nodes: None,
            gpus: None,
            timeout: Some(Duration::ZERO),
            ..args.clone()
        },
    ] {
        assert!(
            matches!(run(&bad), Err(Error::InvalidArgument(_))),
            "{bad:?}"
        );
    }
    thread::sleep(Duration::from_millis(200));
    for rank in 0..3 {
        let file = format!("{}.{rank}", marker.display());
        let started = std::path::Path::new(&file).exists();
        let _ = std::fs::remove_file(&file);
        assert!(!started, "rank {rank} was started");
    }
}

#[test]
fn exit_codes_follow_the_shell_convention() {
    assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
    assert_eq!(exit_code(ExitStatus::from_raw(7 << 8)), 7);
    assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
    assert_eq!(describe(ExitStatus::from_raw(7 << 8)), "exited with code 7");
    assert_eq!(
        describe(ExitStatus::from_raw(libc::SIGKILL)),
        "was killed by signal 9"
    );
}

#[test]
fn nnodes_node_rank_and_master_make_one_node_of_a_job() {
    let args = |a: &[&str]| LaunchArgs::parse(a.iter().map(OsString::from));
    let Ok(Parsed::Run(a)) = args(&[
        "-n",
        "2",
        "--nnodes",
        "3",
        "--node-rank",
        "1",
        "--master",
        "127.0.0.1:4000",
        "prog",
    ]) else {
        panic!("not parsed")
    };
    let nodes = a.nodes.clone().unwrap();
    assert_eq!(
        (nodes.nnodes, nodes.node_rank, nodes.master.as_str()),
        (3, 1, "127.0.0.1:4000")
    );
    // One node: as before.
    let Ok(Parsed::Run(one)) = args(&["-n", "2", "--nnodes", "1", "prog"]) else {
        panic!("not parsed")
    };
    assert_eq!(one.nodes, None);
    for (bad, says) in [
        (
            &["-n", "1", "--nnodes", "2", "--master", "h:1", "p"][..],
            "--node-rank",
        ),
        (
            &["-n", "1", "--nnodes", "2", "--node-rank", "0", "p"][..],
            "--master",
        ),
        (
            &[
                "-n",
                "1",
                "--nnodes",
                "2",
                "--node-rank",
                "2",
                "--master",
                "h:1",
                "p",
            ][..],
            "below",
        ),
        (&["-n", "1", "--node-rank", "0", "p"][..], "need --nnodes"),
        (
            &[
                "-n",
                "1",
                "--nnodes",
                "2",
                "--node-rank",
                "0",
                "--master",
                "h",
                "p",
            ][..],
            "ADDR:PORT",
        ),
        (
            &[
                "-n",
                "1",
                "--nnodes",
                "0",
                "--node-rank",
                "0",
                "--master",
                "h:1",
                "p",
            ][..],
            "0 nodes",
        ),
    ] {
        let e = args(bad).unwrap_err();
        assert!(e.contains(says), "{bad:?}: {e}");
    }
    // Node 1's second rank is rank 3 of 6, and reads back its node.
    let id = UniqueId::new("127.0.0.1:4000".parse().unwrap(), 0xab);
    let env = super::node_rank_env(1, 2, (1, 3), &id, None);
    let back = crate::bootstrap::LaunchEnv::from_lookup(|k| {
        env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
    })
    .unwrap();
    assert_eq!((back.rank, back.size, back.local_rank), (3, 6, Some(1)));
    assert_eq!((back.node_rank, back.nnodes), (Some(1), Some(3)));
}
