//! Several nodes on one machine (issue "Across nodes 1"): the checks every rank of a job of
//! `nodes` nodes runs, whether its ranks are threads that declare their nodes
//! (`CommOptions::node_id`) or processes of several `symcomm-run --nnodes` invocations (whose
//! node numbers become part of the node identity).
//!
//! [`check_job`] checks, on every rank:
//! - the teams: `node_count`, the LSA team (the ranks of one node), the rail team (one rank per
//!   node, stride = ranks per node) and the world team;
//! - `Communicator::split` by node, by parity (key: minus the rank, so child ranks run
//!   backwards) and with a rank that passes no color (it gets no communicator), each child's
//!   size, rank and node count;
//! - windows in every child: the `hello_window` example kernel (every rank writes its pattern
//!   into every LSA peer's copy of a registered window, then an LSA barrier) with every
//!   element checked;
//! - that the gallery's collectives refuse a communicator that spans nodes, and run in the
//!   per-node child (an all-gather, every element checked).

use symcomm::launch::{LaunchConfig, Module};
use symcomm::{Communicator, DevComm, Device, Error, Requirements, Result, SymmetricMemory};
use symcomm_example_kernels::{HelloWindow, hello_pattern};
use symcomm_gallery::{Buf, Collectives, DataType, Tuning};

const BLOCKS: u32 = 2;
const THREADS: u32 = 64;
const TIMEOUT_NS: u64 = 20_000_000_000;

fn fail(what: String) -> Error {
    Error::InvalidArgument(what)
}

fn expect<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Result<()> {
    if got == want {
        Ok(())
    } else {
        Err(fail(format!("{what}: got {got:?}, want {want:?}")))
    }
}

/// Runs every check of the module docs on this rank of a job of `nodes` nodes with the same
/// number of ranks each, ranks numbered node by node. Returns a line for the log.
pub fn check_job(comm: &Communicator, nodes: usize) -> Result<String> {
    let (n, r) = (comm.size(), comm.rank());
    // Held to the end: the checks below take the device again for each child, and the last
    // holder's drop would destroy the context under the next child's module (on a GPU).
    let _dev = Device::for_rank(comm)?;
    let per = n / nodes;
    expect("ranks per node", per * nodes, n)?;
    expect("nodes", comm.node_count(), nodes)?;
    expect("LSA size", comm.lsa_size(), per)?;
    expect("LSA rank", comm.lsa_rank(), r % per)?;
    let rail = comm.rail_team();
    expect(
        "rail team",
        (rail.n_ranks, rail.rank, rail.stride),
        (nodes as i32, (r / per) as i32, per as i32),
    )?;
    let world = comm.world_team();
    expect(
        "world team",
        (world.n_ranks, world.rank, world.stride),
        (n as i32, r as i32, 1),
    )?;

    // By node: the node's ranks, in order.
    let node = comm
        .split(Some((r / per) as u32), r as i32)?
        .ok_or_else(|| fail("split by node gave no communicator".into()))?;
    expect(
        "by node: size, rank, nodes",
        (node.size(), node.rank(), node.node_count()),
        (per, r % per, 1),
    )?;
    hello(&node)?;
    gallery(comm, &node)?;

    // By parity, backwards.
    let parity = comm
        .split(Some((r % 2) as u32), -(r as i32))?
        .ok_or_else(|| fail("split by parity gave no communicator".into()))?;
    let mates: Vec<usize> = (0..n).filter(|q| q % 2 == r % 2).collect();
    let mut mate_nodes: Vec<usize> = mates.iter().map(|q| q / per).collect();
    mate_nodes.dedup();
    let back = mates.iter().filter(|&&q| q > r).count();
    expect(
        "by parity: size, rank, nodes",
        (parity.size(), parity.rank(), parity.node_count()),
        (mates.len(), back, mate_nodes.len()),
    )?;
    hello(&parity)?;

    // The last rank passes no color.
    let color = (r + 1 != n).then_some(7);
    let rest = comm.split(color, 0)?;
    match (&rest, color) {
        (None, None) => {}
        (Some(c), Some(_)) => {
            expect(
                "without the last rank: size, rank",
                (c.size(), c.rank()),
                (n - 1, r),
            )?;
            hello(c)?;
        }
        _ => {
            return Err(fail(format!(
                "no-color split: rank {r} got {:?}",
                rest.is_some()
            )));
        }
    }
    Ok(format!(
        "nodes: rank {r} of {n}: {nodes} nodes × {per}, teams, splits by node, parity and \
         without rank {} checked, windows used in every child",
        n - 1
    ))
}

/// The `hello_window` example on `comm`'s LSA team: every element of this rank's window
/// checked.
fn hello(comm: &Communicator) -> Result<()> {
    let n = 256usize;
    let dev = Device::for_rank(comm)?;
    let lsa = comm.lsa_size();
    let mem = SymmetricMemory::alloc(comm, lsa * n * 4)?;
    let status = dev.alloc(BLOCKS as usize * 4)?;
    let module = Module::load(symcomm_examples::kernels::PTX)?;
    let kernel = module.kernel::<HelloWindow>()?;
    let stream = dev.stream()?;
    stream.fill_bytes(&mem, 0xff)?;
    stream.fill_bytes(&status, 0xff)?;
    stream.synchronize()?;
    let win = comm.register_window(&mem)?;
    let devcomm = DevComm::create(comm, Requirements::new().lsa_barriers(BLOCKS))?;
    let args = (
        devcomm.raw(),
        win.handle(),
        n as u64,
        TIMEOUT_NS,
        status.as_mut_ptr::<u32>(),
    );
    // SAFETY: the kernel's contract: `devcomm` has `BLOCKS` LSA barriers, the window holds
    // `lsa × n` u32, `status` `BLOCKS` u32, and every LSA rank launches the same grid.
    unsafe { kernel.launch(LaunchConfig::linear(BLOCKS, THREADS), &stream, args)? };
    stream.synchronize()?;
    let mut codes = vec![0u32; BLOCKS as usize];
    stream.copy_to_host(&status, 0, &mut codes)?;
    expect(
        "hello_window barrier codes",
        codes,
        vec![0; BLOCKS as usize],
    )?;
    let mut got = vec![0u32; lsa * n];
    stream.copy_to_host(&mem, 0, &mut got)?;
    let first = comm.rank() - comm.lsa_rank();
    let wrong = (0..lsa * n)
        .filter(|&k| got[k] != hello_pattern((first + k / n) as u32, (k % n) as u64))
        .count();
    expect("hello_window wrong values", wrong, 0)?;
    comm.bootstrap().barrier()
}

/// The gallery refuses `world` when it spans nodes, and runs an all-gather in `node`.
fn gallery(world: &Communicator, node: &Communicator) -> Result<()> {
    if world.node_count() > 1 {
        match Collectives::new(world, Tuning::default()) {
            Err(Error::Unsupported { what, .. }) if what.contains("nodes") => {}
            Err(e) => {
                return Err(fail(format!(
                    "gallery on {} nodes: {e}",
                    world.node_count()
                )));
            }
            Ok(_) => {
                return Err(fail(
                    "the gallery took a communicator that spans nodes".into(),
                ));
            }
        }
    }
    let (n, r) = (node.size(), node.rank());
    let g = Collectives::new(node, Tuning::default())?;
    let count = 33;
    let dev = Device::for_rank(node)?;
    let stream = dev.stream()?;
    let (a, b) = (
        SymmetricMemory::alloc(node, 4096)?,
        SymmetricMemory::alloc(node, 4096)?,
    );
    let mine: Vec<f32> = (0..count).map(|i| (r * 1000 + i) as f32).collect();
    stream.copy_to_device(&a, 0, &mine)?;
    stream.fill_bytes(&b, 0x7f)?;
    stream.synchronize()?;
    let (wa, wb) = (node.register_window(&a)?, node.register_window(&b)?);
    g.all_gather(
        Buf::new(&wa, 0),
        Buf::new(&wb, 0),
        count,
        DataType::F32,
        &stream,
    )?;
    stream.synchronize()?;
    g.check_status()?;
    let mut got = vec![0f32; n * count];
    stream.copy_to_host(&b, 0, &mut got)?;
    let wrong = (0..n * count)
        .filter(|&k| got[k] != ((k / count) * 1000 + k % count) as f32)
        .count();
    expect(
        "all-gather in the node's communicator: wrong values",
        wrong,
        0,
    )?;
    node.bootstrap().barrier()
}
