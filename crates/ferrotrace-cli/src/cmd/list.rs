//! `ferrotrace list`: the tracepoints and traceable functions of a program, read from its file.

use crate::Error;
use std::ffi::OsString;
use std::process::ExitCode;

use clap::Args;
use ferrotrace_analysis::binary::{
    entry_patch_listing, entry_patchable, inspect, listing, Listing,
};

use ferrotrace_launch::program::resolve;

/// Arguments of `ferrotrace list`.
#[derive(Args)]
pub struct ListArgs {
    /// Print one JSON object instead of text. Functions carry `xray_id`, their XRay id in the file
    /// (llvm-xray's numbering), which is not the `id` a trace gives the functions it selected
    #[arg(long)]
    json: bool,
    /// Only tracepoints
    #[arg(long, conflicts_with = "functions")]
    tracepoints: bool,
    /// Only functions
    #[arg(long)]
    functions: bool,
    /// Every function the symbol tables name, and whether `record` can trace it without instrumentation
    /// by patching its entry at run time (else why not), with counts by reason
    #[arg(long, conflicts_with_all = ["tracepoints", "functions"])]
    dynamic: bool,
    /// The program (not run)
    #[arg(value_name = "PROGRAM")]
    program: OsString,
}

/// Prints the listing.
pub fn run(args: ListArgs) -> Result<ExitCode, Error> {
    let path = resolve(&args.program)?;
    if args.dynamic {
        let funcs = entry_patchable(&path).map_err(Error::analysis)?;
        let mut out = super::Output::stdout();
        out.print(&entry_patch_listing(&funcs, args.json))?;
        out.finish()?;
        return Ok(ExitCode::SUCCESS);
    }
    let bin = inspect(&path).map_err(Error::analysis)?;
    let what = Listing {
        json: args.json,
        tracepoints: !args.functions,
        functions: !args.tracepoints,
    };
    let mut out = super::Output::stdout();
    out.print(&listing(&bin, what))?;
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}
