//! What a launch needs to know from PTX text: every entry point's parameter list, read without
//! the driver (so the emulated backend can check launches too).

use std::collections::HashMap;

/// Reads every `.entry`'s parameter sizes out of PTX text.
///
/// Parameters look like `.param .u64 .ptr .align 1 k_param_0` (scalar: size from the type)
/// or `.param .align 8 .b8 k_param_4[240]` (aggregate: the array length).
pub(super) fn entry_params(ptx: &str) -> HashMap<String, Vec<usize>> {
    let mut out = HashMap::new();
    let mut lines = ptx.lines();
    while let Some(line) = lines.next() {
        let l = line.trim();
        let Some(rest) = l
            .strip_prefix(".visible .entry")
            .or_else(|| l.strip_prefix(".entry"))
        else {
            continue;
        };
        let rest = rest.trim_start();
        let Some(open) = rest.find('(') else { continue };
        let name = rest[..open].trim().to_owned();
        let mut sizes = Vec::new();
        let mut decl = rest[open + 1..].to_owned();
        // The parameter list ends at the first ')' (possibly on a later line).
        while !decl.contains(')') {
            match lines.next() {
                Some(next) => {
                    decl.push(' ');
                    decl.push_str(next.trim());
                }
                None => break,
            }
        }
        let list = decl.split(')').next().unwrap_or("");
        for param in list.split(',') {
            if let Some(size) = param_size(param.trim()) {
                sizes.push(size);
            }
        }
        out.insert(name, sizes);
    }
    out
}

/// The size of one `.param` declaration. Brackets only make an array when a `[` comes before
/// the last `]` (others, e.g. in a trailing comment, are ignored); `None` (the parameter is not
/// counted) when the text declares no size this reader understands, including an array whose
/// byte size overflows.
pub(super) fn param_size(decl: &str) -> Option<usize> {
    let decl = decl.strip_prefix(".param")?.trim();
    if let (Some(open), Some(close)) = (decl.rfind('['), decl.rfind(']'))
        && open < close
    {
        let n: usize = decl[open + 1..close].trim().parse().ok()?;
        let elem = decl.split_whitespace().find_map(scalar_size).unwrap_or(1);
        return n.checked_mul(elem);
    }
    decl.split_whitespace().find_map(scalar_size)
}

fn scalar_size(word: &str) -> Option<usize> {
    match word {
        ".u8" | ".s8" | ".b8" => Some(1),
        ".u16" | ".s16" | ".b16" | ".f16" => Some(2),
        ".u32" | ".s32" | ".b32" | ".f32" => Some(4),
        ".u64" | ".s64" | ".b64" | ".f64" => Some(8),
        _ => None,
    }
}
