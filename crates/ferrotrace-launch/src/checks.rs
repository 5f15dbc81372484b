//! What `record` and `live` refuse before the program runs, so that a mistake is one line and a
//! non-zero exit, never a program run untraced with the runtime's complaint inside its output; and,
//! after the run, the `-F` patterns that selected nothing and why ([`unmatched_filters`]).

use std::path::Path;

use ferrotrace_core::env::RuntimeSpec;
use ferrotrace_core::pattern::NamePattern;
use ferrotrace_core::size::{self, SizeOption};
use ferrotrace_reader::reader::Trace;

use crate::start::Program;
use crate::LaunchError;

/// Checks `-F`/`-N` patterns (the runtime would only warn from inside the program).
pub fn check_regexes<'a>(
    patterns: impl IntoIterator<Item = &'a String>,
) -> Result<(), LaunchError> {
    for re in patterns {
        NamePattern::new(re)
            .map_err(|e| LaunchError::BadOption(format!("invalid regex '{re}': {e}")))?;
    }
    Ok(())
}

/// Checks `--buffer-size`, `--chunk-size` and `--alloc-sample` as the runtime will
/// ([`ferrotrace_core::size`]).
fn check_sizes(spec: &RuntimeSpec) -> Result<(), LaunchError> {
    let (buffer, chunk) = (spec.buffer_size.as_deref(), spec.chunk_size.as_deref());
    size::check_sizes(buffer, chunk).map_err(|(which, e)| {
        LaunchError::BadOption(match which {
            SizeOption::Chunk => format!("--chunk-size {}: {e}", chunk.unwrap_or_default()),
            SizeOption::Buffer => format!("--buffer-size {}: {e}", buffer.unwrap_or_default()),
        })
    })?;
    if let Some(s) = spec.alloc.as_ref().and_then(|a| a.sample.as_deref()) {
        size::parse_size(s)
            .map_err(|e| LaunchError::BadOption(format!("--alloc-sample {s}: {e}")))?;
    }
    Ok(())
}

/// What `record` checks in its options alone, before it looks at the program.
pub fn check_record_options(spec: &RuntimeSpec) -> Result<(), LaunchError> {
    check_regexes(spec.filter.iter().chain(&spec.notrace).chain(&spec.patch))?;
    check_triggers(&spec.trigger)?;
    check_args(&spec.args)?;
    check_sizes(spec)
}

/// Checks `-A` and `-R` options: their items ([`ferrotrace_core::argspec`]) and patterns.
fn check_args(written: &[String]) -> Result<(), LaunchError> {
    for w in written {
        let o = ferrotrace_core::argspec::ArgOption::parse(w)
            .and_then(|o| o.is_retval().map(|r| (o, r)))
            .map_err(|e| LaunchError::BadOption(format!("'{w}': {e}")))?;
        check_regexes([&o.0.pattern.to_string()])?;
    }
    Ok(())
}

/// Checks `-T` triggers: their actions ([`ferrotrace_core::trigger`]) and patterns.
fn check_triggers(written: &[String]) -> Result<(), LaunchError> {
    let max = ferrotrace_core::trigger::MAX_TRIGGERS;
    if written.len() > max {
        return Err(LaunchError::BadOption(format!(
            "-T: at most {max} triggers"
        )));
    }
    for w in written {
        let t: ferrotrace_core::trigger::Trigger = w
            .parse()
            .map_err(|e| LaunchError::BadOption(format!("-T: {e}")))?;
        check_regexes([&t.pattern])?;
    }
    Ok(())
}

/// What `record` checks of `program` before it runs it with `spec` (after
/// [`check_record_options`]). Returns the warnings to print (the run goes on).
pub fn check_record(program: &Program, spec: &RuntimeSpec) -> Result<Vec<String>, LaunchError> {
    let facts = &program.facts;
    let path = &program.path;
    if !spec.trace.is_empty() && !facts.has_tracepoints {
        return Err(LaunchError::NoTracepoints(path.clone()));
    }
    let records_tracepoints = facts.has_tracepoints && !spec.trace.is_empty();
    if spec.no_functions
        && (!spec.filter.is_empty()
            || !spec.notrace.is_empty()
            || !spec.patch.is_empty()
            || !spec.trigger.is_empty()
            || !spec.args.is_empty()
            || spec.time_filter_ns.is_some()
            || spec.depth.is_some())
    {
        return Err(LaunchError::BadOption(
            "--no-functions traces no function, and -F, -N, -P, -T, -A, -R, -t and --depth \
             select functions"
                .into(),
        ));
    }
    if spec.no_functions && !records_tracepoints && spec.alloc.is_none() {
        return Err(LaunchError::BadOption(
            "--no-functions leaves nothing to record: add --alloc (allocations) or --trace \
             (tracepoints)"
                .into(),
        ));
    }
    let mut warnings = Vec::new();
    if spec.alloc.is_some() && facts.links_runtime && !facts.has_allocator {
        warnings.push(format!(
            "{} links the ferrotrace runtime, which records allocations only through \
             ferrotrace::Allocator (#[global_allocator]); its malloc calls are not interposed",
            path.display()
        ));
    }
    // Allocations alone (`--alloc` naming no function with -P) patch no entry: heaptrack's view.
    if facts.instrumentation == 0
        && !spec.no_functions
        && (spec.alloc.is_none() || !spec.patch.is_empty())
    {
        match dynamic_line(path, !spec.patch.is_empty()) {
            Some(line) => warnings.push(line),
            None if !records_tracepoints && spec.alloc.is_none() => {
                return Err(LaunchError::NotInstrumented(path.clone()))
            }
            None => {}
        }
    }
    if let Some(d) = spec.depth.filter(|&d| !size::depth_is_valid(d as usize)) {
        return Err(LaunchError::BadOption(format!(
            "--depth {d}: the depth is a number of frames from 1 to {}",
            size::MAX_DEPTH
        )));
    }
    Ok(warnings)
}

/// Everything `live` checks before it runs `program` with `spec`.
pub fn check_live(program: &Program, spec: &RuntimeSpec) -> Result<(), LaunchError> {
    check_regexes(spec.filter.iter().chain(&spec.notrace))?;
    if spec.trace.is_empty() && spec.filter.is_empty() {
        return Err(LaunchError::BadOption(
            "nothing to print: select tracepoints with --trace GLOB and/or functions with -F REGEX"
                .into(),
        ));
    }
    if !spec.trace.is_empty() && !program.facts.has_tracepoints {
        return Err(LaunchError::NoTracepoints(program.path.clone()));
    }
    if !spec.filter.is_empty() && program.facts.instrumentation == 0 {
        match dynamic_line(&program.path, !spec.patch.is_empty()) {
            Some(line) => eprintln!("ferrotrace: {line}"),
            None => return Err(LaunchError::NotInstrumented(program.path.clone())),
        }
    }
    Ok(())
}

/// For an uninstrumented program, the line that says its functions will be traced by patching their
/// entries at run time (the runtime does so when the executable has no instrumentation), or `None`
/// when that traces nothing: none of the executable's functions can be patched and `-P` names no
/// library function (`libraries`: -P was given).
pub(crate) fn dynamic_line(path: &Path, libraries: bool) -> Option<String> {
    let funcs = ferrotrace_reader::binary::entry_patchable(path).unwrap_or_default();
    let traceable = funcs.iter().filter(|f| f.verdict.is_ok()).count();
    if traceable == 0 && !libraries {
        return None;
    }
    Some(format!(
        "{} has no instrumentation: tracing its functions by patching their entries at run time \
         ({traceable} of its {} functions can be; `ferrotrace list --dynamic` says why not the \
         others; -P REGEX selects library functions)",
        path.display(),
        funcs.len()
    ))
}

/// After the run: the `-F` patterns that matched no function of the trace, each with why when the
/// program's debug info tells (a function inlined into its callers has no sled).
pub fn unmatched_filters(trace: &Trace, filters: &[String], program: &Path) -> Vec<String> {
    let mut warnings = Vec::new();
    for pattern in filters {
        let Ok(re) = NamePattern::new(pattern) else {
            continue; // checked before the run
        };
        if trace
            .functions()
            .keys()
            .filter_map(|&id| trace.filter_name(id))
            .any(|(name, addr)| re.matches_function(name, addr))
        {
            continue;
        }
        let why = match ferrotrace_reader::srcline::inlined_functions(program, |n| re.is_match(n)) {
            Ok(mut inlined) if !inlined.is_empty() => {
                let count = inlined.len();
                format!(
                ": {} {} inlined into {} callers (no sled): mark {} #[inline(never)], or build with \
                 -Cllvm-args=-inline-threshold=0",
                {
                    // The shortest names first: the function itself before the generic code that
                    // mentions it in its arguments.
                    inlined.sort_by_key(|n| (n.len(), n.clone()));
                    let more = inlined.len().saturating_sub(2);
                    inlined.truncate(2);
                    let mut names = inlined.join(", ");
                    if more > 0 {
                        names.push_str(&format!(" (and {more} more)"));
                    }
                    names
                },
                if count == 1 { "was" } else { "were" },
                if count == 1 { "its" } else { "their" },
                if count == 1 { "it" } else { "them" },
            )
            }
            // The runtime said already that the pattern selects nothing; only the reason is new.
            Ok(_) => continue,
            Err(e) => format!(" ({e}: cannot tell whether it was inlined)"),
        };
        warnings.push(format!("-F '{pattern}' matched no traced function{why}"));
    }
    warnings
}
