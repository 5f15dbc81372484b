//! The environment protocol: every variable through which `ferrotrace record` and `ferrotrace live`
//! configure the runtime inside the program they run, and the symbol by which a program says that it
//! links a runtime of its own. Both sides name them through these constants, never by a string of
//! their own.
//!
//! | constant | variable | set by | read by | meaning |
//! |---|---|---|---|---|
//! | [`RUNTIME`] | `FERROTRACE_RUNTIME` | `record`, `live`; the runtime of `live`'s program, for the programs it starts | the constructors of both runtime copies | which copy may start: [`RUNTIME_PRELOAD`] (the LD_PRELOADed library), [`RUNTIME_LINKED`] (the copy linked into the program, which [`LINKED_RUNTIME_MARKER`] names), [`RUNTIME_OFF`] (none); unset: the preload library starts, the linked copy only if [`TRACE`] is set |
//! | [`OUTPUT`] | `FERROTRACE_OUTPUT` | `record` (`-o`), `live` (a private directory) | runtime | the trace file; default `ferrotrace.data`; processes started by a traced one add `.PID` |
//! | [`FILTER`] | `FERROTRACE_FILTER` | `record`, `live` (`-F`) | runtime | newline-separated regexes: trace only functions whose demangled name matches one; unset or empty: all |
//! | [`NOTRACE`] | `FERROTRACE_NOTRACE` | `record`, `live` (`-N`) | runtime | newline-separated regexes: never trace these |
//! | [`FUNCTIONS`] | `FERROTRACE_FUNCTIONS` | `record` (`--no-functions`: [`FUNCTIONS_NONE`]; removed without it) | runtime | [`FUNCTIONS_NONE`]: trace no function (allocations or tracepoints alone) |
//! | [`TRACE`] | `FERROTRACE_TRACE` | `record`, `live` (`--trace`), or by hand | runtime | tracepoint globs, separated by commas or newlines; set alone, it starts the linked runtime |
//! | [`MODE`] | `FERROTRACE_MODE` | `record` (`--mode`), `live` (`drop`) | runtime | `lossless` (default), `drop` or `flight` ([`crate::schema::Mode::name`]) |
//! | [`BUFFER_SIZE`] | `FERROTRACE_BUFFER_SIZE` | `record` (`--buffer-size`) | runtime | bytes of chunk memory, or of the flight ring; `K`/`M`/`G` suffixes ([`crate::size`]); default 16M |
//! | [`CHUNK_SIZE`] | `FERROTRACE_CHUNK_SIZE` | `record` (`--chunk-size`) | runtime | bytes per chunk, a power of two ≥ 256; default 64K |
//! | [`DEPTH`] | `FERROTRACE_DEPTH` | `record` (`-D`) | runtime | trace mcount/fentry calls only down to this nesting depth; deeper ones are left out, not counted as lost |
//! | [`SHADOW_DEPTH`] | `FERROTRACE_SHADOW_DEPTH` | by hand | runtime | frames of each thread's shadow stack (mcount return hooks), default 16384; deeper calls are not traced and are counted as lost |
//! | [`ALLOC`] | `FERROTRACE_ALLOC` | `record` (`--alloc`: `1`; removed without it) | runtime | record allocations (the malloc family of `libferrotrace_alloc.so`, which `record` preloads with it, or `ferrotrace::Allocator`) |
//! | [`ALLOC_SAMPLE`] | `FERROTRACE_ALLOC_SAMPLE` | `record` (`--alloc-sample`) | runtime | sample allocations: one per this many bytes on average (`512K`); unset or 0: every one |
//! | [`ALLOC_STACK_DEPTH`] | `FERROTRACE_ALLOC_STACK_DEPTH` | `record` (`--alloc-stack-depth`) | runtime | deepest allocation stack to record (0: none); default 64 |
//! | [`USDT`] | `FERROTRACE_USDT` | by hand | linked runtime | [`USDT_OFF`]: no thread watching the tracepoints' SDT semaphores (tracers attaching to a running program see nothing) |
//! | [`LIVE_FD`] | `FERROTRACE_LIVE_FD` | `live` | runtime (removes it) | the descriptor to print events to, live |
//! | [`SHARED_FD`] | `FERROTRACE_SHARED_FD` | `record` | runtime (removes it) | the memfd holding the chunk pool that `record` salvages after a SIGKILL ([`crate::shared`]) |
//! | [`TRACED_PARENT`] | `FERROTRACE_TRACED_PARENT` | runtime (its pid, for the processes it starts); `record` and `live` remove it | runtime | a process started by a traced one writes `FILE.PID`; equal to the reader's own pid after an `exec` of the root process, which keeps `FILE` |
//! | [`PRELOAD`] | `FERROTRACE_PRELOAD` | users, tests, benchmarks | `record`, `live` | the `libferrotrace_preload.so` to inject, instead of the one next to the `ferrotrace` executable (`--alloc` also injects the `libferrotrace_alloc.so` beside it) |
//!
//! A privileged process (setuid, setgid, file capabilities) reads none of them: its environment comes
//! from a user it must not obey.

/// Which runtime copy may start: [`RUNTIME_PRELOAD`], [`RUNTIME_LINKED`] or [`RUNTIME_OFF`].
pub const RUNTIME: &str = "FERROTRACE_RUNTIME";
/// [`RUNTIME`]: the LD_PRELOADed library starts.
pub const RUNTIME_PRELOAD: &str = "preload";
/// [`RUNTIME`]: the copy linked into the program starts.
pub const RUNTIME_LINKED: &str = "linked";
/// [`RUNTIME`]: no runtime starts (`live` sets it for the programs its program starts).
pub const RUNTIME_OFF: &str = "off";
/// The trace file.
pub const OUTPUT: &str = "FERROTRACE_OUTPUT";
/// Functions to trace (`-F`): newline-separated regexes.
pub const FILTER: &str = "FERROTRACE_FILTER";
/// Functions never to trace (`-N`): newline-separated regexes.
pub const NOTRACE: &str = "FERROTRACE_NOTRACE";
/// [`FUNCTIONS_NONE`]: no function is traced (`record --no-functions`).
pub const FUNCTIONS: &str = "FERROTRACE_FUNCTIONS";
/// [`FUNCTIONS`]: no function.
pub const FUNCTIONS_NONE: &str = "none";
/// Tracepoints to record: globs separated by commas or newlines.
pub const TRACE: &str = "FERROTRACE_TRACE";
/// What to do when buffers run out: `lossless`, `drop` or `flight`.
pub const MODE: &str = "FERROTRACE_MODE";
/// Bytes of chunk memory (or of the flight ring).
pub const BUFFER_SIZE: &str = "FERROTRACE_BUFFER_SIZE";
/// Bytes per chunk.
pub const CHUNK_SIZE: &str = "FERROTRACE_CHUNK_SIZE";
/// Nesting depth below which mcount/fentry calls are left out (`-D`).
pub const DEPTH: &str = "FERROTRACE_DEPTH";
/// Frames of each thread's shadow stack.
pub const SHADOW_DEPTH: &str = "FERROTRACE_SHADOW_DEPTH";
/// Record allocations: `1`.
pub const ALLOC: &str = "FERROTRACE_ALLOC";
/// Mean bytes between sampled allocations.
pub const ALLOC_SAMPLE: &str = "FERROTRACE_ALLOC_SAMPLE";
/// Deepest allocation stack to record.
pub const ALLOC_STACK_DEPTH: &str = "FERROTRACE_ALLOC_STACK_DEPTH";
/// [`USDT_OFF`] leaves out the thread that watches the SDT semaphores.
pub const USDT: &str = "FERROTRACE_USDT";
/// [`USDT`]: no watcher thread.
pub const USDT_OFF: &str = "off";
/// The descriptor `ferrotrace live` reads printed events from.
pub const LIVE_FD: &str = "FERROTRACE_LIVE_FD";
/// The descriptor number of the memfd shared with `ferrotrace record`.
pub const SHARED_FD: &str = "FERROTRACE_SHARED_FD";
/// The pid of the traced process that started this one.
pub const TRACED_PARENT: &str = "FERROTRACE_TRACED_PARENT";
/// The preload library `ferrotrace record` and `live` inject.
pub const PRELOAD: &str = "FERROTRACE_PRELOAD";

/// The name of the linked-runtime marker, as a literal: what `#[export_name]` needs, which takes no
/// constant (see [`LINKED_RUNTIME_MARKER`]).
#[doc(hidden)]
#[macro_export]
macro_rules! __linked_runtime_marker {
    () => {
        "FERROTRACE_LINKED_RUNTIME_V1"
    };
}

/// The symbol a program that links the `ferrotrace` runtime defines: `ferrotrace record` looks for it
/// in the program's symbol tables and then sets [`RUNTIME`] to [`RUNTIME_LINKED`] instead of injecting
/// the preload library. The version suffix changes when the protocol does.
pub const LINKED_RUNTIME_MARKER: &str = crate::__linked_runtime_marker!();

#[cfg(test)]
mod tests {
    /// Every variable is spelled `FERROTRACE_` + its constant's name, and no two are the same.
    #[test]
    fn names_are_distinct_and_prefixed() {
        use super::*;
        let vars = [
            ("RUNTIME", RUNTIME),
            ("OUTPUT", OUTPUT),
            ("FILTER", FILTER),
            ("NOTRACE", NOTRACE),
            ("FUNCTIONS", FUNCTIONS),
            ("TRACE", TRACE),
            ("MODE", MODE),
            ("BUFFER_SIZE", BUFFER_SIZE),
            ("CHUNK_SIZE", CHUNK_SIZE),
            ("DEPTH", DEPTH),
            ("SHADOW_DEPTH", SHADOW_DEPTH),
            ("ALLOC", ALLOC),
            ("ALLOC_SAMPLE", ALLOC_SAMPLE),
            ("ALLOC_STACK_DEPTH", ALLOC_STACK_DEPTH),
            ("USDT", USDT),
            ("LIVE_FD", LIVE_FD),
            ("SHARED_FD", SHARED_FD),
            ("TRACED_PARENT", TRACED_PARENT),
            ("PRELOAD", PRELOAD),
        ];
        for (i, (constant, var)) in vars.iter().enumerate() {
            assert_eq!(var.strip_prefix("FERROTRACE_"), Some(*constant));
            assert!(vars[..i].iter().all(|(_, other)| other != var));
        }
    }
}
