//! The command line: [`Opts`] and [`parse_args`] (the options are listed in the crate docs),
//! with the CPU emulator's smaller defaults.

use symcomm_gallery::{Algo, DataType, RedOp};

use crate::coll::Coll;

/// The usage line printed on a bad argument or `--help`.
pub const USAGE: &str = "usage: symcomm-bench [--threads N] [--coll LIST|all] \
                         [--types f32,bf16,f16,i32] [--ops sum,min,max] [--min 4K] [--max 1G] \
                         [--sizes LIST] \
                         [--iters 20] [--replays 20] [--warmup 5] [--inplace] [--no-nccl] \
                         [--vs-aligned] \
                         [--algos auto,one_shot,two_shot_ll,two_shot,two_shot_push,\
                         multimem_one_shot,multimem_two_shot]";

/// Largest `--max` (1 TiB: more than any GPU holds).
const MAX_BYTES: usize = 1 << 40;

/// Largest `--iters`, `--replays` and `--warmup`.
const MAX_COUNT: u32 = 1_000_000;

#[derive(Debug, Clone)]
pub struct Opts {
    pub threads: Option<usize>,
    pub colls: Vec<Coll>,
    pub types: Vec<DataType>,
    pub ops: Vec<RedOp>,
    pub min: usize,
    pub max: usize,
    /// `--sizes`: these byte counts instead of the doubling `min..=max`.
    pub sizes: Option<Vec<usize>>,
    pub iters: u32,
    pub replays: u32,
    pub warmup: u32,
    pub inplace: bool,
    pub eager: bool,
    pub nccl: bool,
    pub algos: Vec<Option<Algo>>,
    pub fused_windows: bool,
    /// `--vs-aligned`: each size that is not whole 16-byte packs per rank block is timed
    /// against the next size that is, their graph replays interleaved.
    pub vs_aligned: bool,
}

/// Parses the arguments after the program name; `small`: the defaults of a device that runs
/// only small grids (`symcomm::launch::limits`: the CPU emulator), small sizes and few
/// launches. `Err("help")` for `-h` / `--help`.
pub fn parse_args(mut args: Vec<String>, small: bool) -> Result<Opts, String> {
    let mut o = Opts {
        threads: None,
        colls: vec![Coll::AllReduce],
        types: vec![DataType::F32, DataType::Bf16],
        ops: vec![RedOp::Sum],
        min: 4 << 10,
        max: if small { 64 << 10 } else { 1 << 30 },
        sizes: None,
        iters: if small { 1 } else { 20 },
        replays: if small { 3 } else { 20 },
        warmup: if small { 1 } else { 5 },
        inplace: false,
        eager: false,
        nccl: true,
        algos: vec![None],
        fused_windows: false,
        vs_aligned: false,
    };
    args.reverse();
    while let Some(a) = args.pop() {
        let mut value = || args.pop().ok_or_else(|| format!("{a} needs a value"));
        match a.as_str() {
            "--threads" => {
                o.threads = Some(value()?.parse().map_err(|_| "--threads: not a number")?)
            }
            "--coll" => {
                let v = value()?;
                o.colls = if v == "all" {
                    Coll::ALL.to_vec()
                } else {
                    parse_list(&v, |x| Coll::ALL.into_iter().find(|c| c.name() == x))?
                }
            }
            "--types" => o.types = parse_list(&value()?, DataType::parse)?,
            "--ops" => o.ops = parse_list(&value()?, RedOp::parse)?,
            "--min" => o.min = parse_bytes(&value()?).ok_or("--min: not a size")?,
            "--max" => o.max = parse_bytes(&value()?).ok_or("--max: not a size")?,
            "--sizes" => {
                o.sizes =
                    Some(parse_list(&value()?, parse_bytes).map_err(|e| format!("--sizes: {e}"))?)
            }
            "--iters" => o.iters = value()?.parse().map_err(|_| "--iters: not a number")?,
            "--replays" => o.replays = value()?.parse().map_err(|_| "--replays: not a number")?,
            "--warmup" => o.warmup = value()?.parse().map_err(|_| "--warmup: not a number")?,
            "--inplace" => o.inplace = true,
            "--eager" => o.eager = true,
            "--no-nccl" => o.nccl = false,
            "--fused-windows" => o.fused_windows = true,
            "--vs-aligned" => o.vs_aligned = true,
            "--algos" => {
                o.algos = parse_list(&value()?, |x| {
                    if x == "auto" {
                        Some(None)
                    } else {
                        Algo::parse(x).map(Some)
                    }
                })?
            }
            "-h" | "--help" => return Err("help".into()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    // A size list sets the range the buffers are sized for.
    if let Some(list) = &o.sizes {
        if list.contains(&0) {
            return Err("--sizes: every size must be positive".into());
        }
        o.min = list.iter().copied().min().unwrap_or(1);
        o.max = list.iter().copied().max().unwrap_or(1);
    }
    if o.vs_aligned {
        if o.eager {
            return Err("--vs-aligned interleaves graph replays: not with --eager".into());
        }
        // Room for the aligned partner of the largest size (16 bytes × up to 256 ranks).
        o.max = o.max.next_multiple_of(4096);
    }
    if o.threads == Some(0) || o.iters == 0 || o.replays == 0 || o.min == 0 || o.min > o.max {
        return Err("--threads, --iters, --replays must be positive and --min ≤ --max".into());
    }
    // Bounds that keep the size loop and the buffer sizes far from overflowing.
    if o.max > MAX_BYTES || o.iters.max(o.replays).max(o.warmup) > MAX_COUNT {
        return Err(format!(
            "--max is at most {MAX_BYTES} bytes and --iters, --replays, --warmup at most \
             {MAX_COUNT}"
        ));
    }
    Ok(o)
}

impl Opts {
    /// The byte counts to run: the `--sizes` list in its order, else `min`, `2·min`, … up to
    /// `max`.
    pub fn byte_sizes(&self) -> Vec<usize> {
        if let Some(list) = &self.sizes {
            return list.clone();
        }
        std::iter::successors(Some(self.min), |&b| b.checked_mul(2))
            .take_while(|&b| b <= self.max)
            .collect()
    }
}

/// `4096`, `4K`, `16M`, `1G` (binary units, either case).
pub fn parse_bytes(s: &str) -> Option<usize> {
    let (num, mul) = match s.as_bytes().last()? {
        b'K' | b'k' => (&s[..s.len() - 1], 1usize << 10),
        b'M' | b'm' => (&s[..s.len() - 1], 1 << 20),
        b'G' | b'g' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<usize>().ok()?.checked_mul(mul)
}

fn parse_list<T>(s: &str, f: impl Fn(&str) -> Option<T>) -> Result<Vec<T>, String> {
    s.split(',')
        .map(|x| f(x).ok_or_else(|| format!("unknown value {x:?}")))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(s: &str) -> Vec<String> {
        s.split_whitespace().map(String::from).collect()
    }

    #[test]
    fn sizes_and_counts_are_bounded() {
        let o = parse_args(args("--min 4K --max 1G --iters 20"), false).unwrap();
        assert_eq!((o.min, o.max, o.iters), (4 << 10, 1 << 30, 20));
        assert!(parse_args(args("--max 1024G"), false).is_ok());
        assert!(!o.eager && parse_args(args("--eager"), false).unwrap().eager);
        assert_eq!(o.byte_sizes().len(), 19); // 4K, 8K, … 1G
        let l = parse_args(args("--sizes 1M,4100,64M,4K"), false).unwrap();
        assert_eq!(l.byte_sizes(), [1 << 20, 4100, 64 << 20, 4 << 10]);
        assert_eq!((l.min, l.max), (4 << 10, 64 << 20));
        for bad in [
            "--max 1025G",
            "--max 18446744073709551615",
            "--iters 4294967295",
            "--warmup 2000000",
            "--iters 0",
            "--min 8K --max 4K",
            "--sizes 4K,,8K",
            "--sizes 0",
        ] {
            let e = parse_args(args(bad), false).unwrap_err();
            assert!(e.contains("--"), "{bad}: {e}");
        }
    }
}
