//! `ferrotrace list`: the tracepoints and traceable functions of a program, read from its file.

use crate::Error;
use std::ffi::OsString;
use std::io::Write;
use std::process::ExitCode;

use clap::Args;
use ferrotrace_analysis::binary::inspect;

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
    /// The program (not run)
    #[arg(value_name = "PROGRAM")]
    program: OsString,
}

fn rust_type(t: &str) -> &str {
    match t {
        "str" => "&str",
        "bytes" => "&[u8]",
        other => other,
    }
}

/// Prints the listing.
pub fn run(args: ListArgs) -> Result<ExitCode, Error> {
    let path = resolve(&args.program)?;
    let bin = inspect(&path).map_err(Error::analysis)?;
    let show_tp = !args.functions;
    let show_fn = !args.tracepoints;
    if args.json {
        let mut o = serde_json::Map::new();
        if show_tp {
            let tps: Vec<serde_json::Value> = bin
                .tracepoints
                .iter()
                .map(|t| {
                    serde_json::json!({
                        "name": t.name,
                        "args": t.args.iter().map(|a| serde_json::json!({"name": a.name, "type": a.ty})).collect::<Vec<_>>(),
                        "format": t.format,
                        "file": t.file,
                        "line": t.line,
                        "sites": t.sites.iter().map(|s| format!("{s:#x}")).collect::<Vec<_>>(),
                    })
                })
                .collect();
            o.insert("tracepoints".into(), tps.into());
        }
        if show_fn {
            let fns: Vec<serde_json::Value> = bin
                .functions
                .iter()
                .map(|f| {
                    serde_json::json!({
                        "xray_id": f.xray_id,
                        "name": f.name,
                        "mangled": f.mangled,
                        "address": format!("{:#x}", f.address),
                        "sleds": f.sleds,
                    })
                })
                .collect();
            o.insert("functions".into(), fns.into());
        }
        let mut out = super::Output::stdout();
        out.print(&format!("{}\n", serde_json::Value::Object(o)))?;
        out.finish()?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut out = super::Output::stdout();
    if show_tp {
        writeln!(out, "Tracepoints ({}):", bin.tracepoints.len()).map_err(|e| out.error(e))?;
        for t in &bin.tracepoints {
            let args: Vec<String> = t
                .args
                .iter()
                .map(|a| format!("{}: {}", a.name, rust_type(&a.ty)))
                .collect();
            write!(
                out,
                "  {}({})  {}:{}  {} site{}",
                t.name,
                args.join(", "),
                t.file,
                t.line,
                t.sites.len(),
                if t.sites.len() == 1 { "" } else { "s" }
            )
            .map_err(|e| out.error(e))?;
            if !t.format.is_empty() {
                write!(out, "  format {:?}", t.format).map_err(|e| out.error(e))?;
            }
            writeln!(out).map_err(|e| out.error(e))?;
        }
    }
    if show_fn {
        if show_tp {
            writeln!(out).map_err(|e| out.error(e))?;
        }
        writeln!(
            out,
            "XRay-instrumented functions ({}):",
            bin.functions.len()
        )
        .map_err(|e| out.error(e))?;
        for f in &bin.functions {
            writeln!(out, "  {}", f.name).map_err(|e| out.error(e))?;
        }
    }
    out.finish()?;
    Ok(ExitCode::SUCCESS)
}
