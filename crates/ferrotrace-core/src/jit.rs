//! Code in anonymous executable mappings (a JIT's, trampolines; feature `std`): how the profiler
//! records it and where the analysis finds its names. The kernel names such a mapping `//anon` in
//! perf's MMAP records; a JIT that wants its code named writes `/tmp/perf-PID.map` (perf's
//! convention: one `START SIZE NAME` line per function, addresses in hex, as they are at run time).
//! The profiler records the mapping as the module [`perf_map_path`] when the process wrote one, else
//! as the pseudo-module [`ANON_MODULE`]; either way with load bias 0, so that its addresses are the
//! run-time ones the map names.

/// The name the kernel gives an anonymous executable mapping in perf's MMAP records.
pub const ANON_MAPPING: &str = "//anon";

/// The module path of anonymous executable code that no perf map names, and what its frames are
/// called.
pub const ANON_MODULE: &str = "[anon]";

/// The perf map a JIT in process `pid` writes (`/tmp/perf-PID.map`).
pub fn perf_map_path(pid: u32) -> std::string::String {
    std::format!("/tmp/perf-{pid}.map")
}

/// True when `path` names a perf map (`/tmp/perf-PID.map`).
pub fn is_perf_map(path: &str) -> bool {
    path.strip_prefix("/tmp/perf-")
        .and_then(|rest| rest.strip_suffix(".map"))
        .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}

/// The functions a perf map's `text` lists: `(start, size, name)`, in its order; lines that are not
/// `START SIZE NAME` (hex, with or without `0x`) are skipped.
pub fn parse_perf_map(text: &str) -> std::vec::Vec<(u64, u64, &str)> {
    let hex = |s: &str| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok();
    text.lines()
        .filter_map(|line| {
            let mut it = line.splitn(3, ' ');
            let (start, size, name) = (hex(it.next()?)?, hex(it.next()?)?, it.next()?.trim());
            (!name.is_empty()).then_some((start, size, name))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_map_lines_and_paths() {
        let map = parse_perf_map("7f00 10 py::fn [x]\nbad line\n0x8000 0x20 jit_loop\n9000 1\n");
        assert_eq!(
            map,
            [(0x7f00, 0x10, "py::fn [x]"), (0x8000, 0x20, "jit_loop")]
        );
        assert!(is_perf_map(&perf_map_path(42)));
        assert!(!is_perf_map("/tmp/perf-.map") && !is_perf_map("/tmp/perf-1x.map"));
    }
}
