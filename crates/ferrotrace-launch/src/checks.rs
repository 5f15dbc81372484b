//! What `record` and `live` refuse before the program runs, so that a mistake is one line and a
//! non-zero exit, never a program run untraced with the runtime's complaint inside its output.

use ferrotrace_core::env::RuntimeSpec;
use ferrotrace_core::pattern::NamePattern;
use ferrotrace_core::size::{self, SizeOption};

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
    check_regexes(spec.filter.iter().chain(&spec.notrace))?;
    check_sizes(spec)
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
        && (!spec.filter.is_empty() || !spec.notrace.is_empty() || spec.depth.is_some())
    {
        return Err(LaunchError::BadOption(
            "--no-functions traces no function, and -F, -N and --depth select functions".into(),
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
    if facts.instrumentation == 0 && !records_tracepoints && spec.alloc.is_none() {
        return Err(LaunchError::NotInstrumented(path.clone()));
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
        return Err(LaunchError::NotInstrumented(program.path.clone()));
    }
    Ok(())
}
