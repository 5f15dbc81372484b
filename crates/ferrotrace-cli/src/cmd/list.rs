//! `ferrotrace list`: the tracepoints and traceable functions of a program, read from its file.

use std::ffi::OsString;
use std::process::ExitCode;

use clap::Args;
use ferrotrace_analysis::binary::inspect;

use crate::elf;

/// Arguments of `ferrotrace list`.
#[derive(Args)]
pub struct ListArgs {
    /// Print one JSON object instead of text
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
pub fn run(args: ListArgs) -> Result<ExitCode, String> {
    let path = elf::resolve_program(&args.program)?;
    let bin = inspect(&path)?;
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
                        "id": f.id,
                        "name": f.name,
                        "mangled": f.mangled,
                        "address": format!("{:#x}", f.address),
                        "sleds": f.sleds,
                    })
                })
                .collect();
            o.insert("functions".into(), fns.into());
        }
        println!("{}", serde_json::Value::Object(o));
        return Ok(ExitCode::SUCCESS);
    }
    if show_tp {
        println!("Tracepoints ({}):", bin.tracepoints.len());
        for t in &bin.tracepoints {
            let args: Vec<String> = t
                .args
                .iter()
                .map(|a| format!("{}: {}", a.name, rust_type(&a.ty)))
                .collect();
            print!(
                "  {}({})  {}:{}  {} site{}",
                t.name,
                args.join(", "),
                t.file,
                t.line,
                t.sites.len(),
                if t.sites.len() == 1 { "" } else { "s" }
            );
            if !t.format.is_empty() {
                print!("  format {:?}", t.format);
            }
            println!();
        }
    }
    if show_fn {
        if show_tp {
            println!();
        }
        println!("XRay-instrumented functions ({}):", bin.functions.len());
        for f in &bin.functions {
            println!("  {}", f.name);
        }
    }
    Ok(ExitCode::SUCCESS)
}
