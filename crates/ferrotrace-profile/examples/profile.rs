//! Drives the profiler end to end until the `ferrotrace` CLI wires it in:
//!
//! ```text
//! cargo run --example profile -- record [-F HZ] [-e EVENT]... [--call-graph fp|dwarf] [-o FILE] -- PROGRAM ARGS
//! cargo run --example profile -- record -p PID [--duration 10s]
//! cargo run --example profile -- report|folded|flame|firefox [FILE] [-o OUT]
//! ```
use std::io::Write;
use std::process::ExitCode;

use ferrotrace_profile::{
    firefox_json, flame_svg, folded, parse_profile_args, profile, read_samples, report,
};

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match run(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ferrotrace: error: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(args: &[String]) -> Result<(), Box<dyn std::error::Error>> {
    let Some((cmd, rest)) = args.split_first() else {
        return Err("usage: profile record|report|folded|flame|firefox ...".into());
    };
    if cmd == "record" {
        let cfg = parse_profile_args(rest)?;
        let s = profile(&cfg)?;
        eprintln!(
            "ferrotrace: {} samples from {} threads, {} lost, {} bytes in {} (symbolized in {:.0?})",
            s.samples,
            s.threads,
            s.lost,
            s.bytes_written,
            s.output.display(),
            s.symbolization_time
        );
        for w in &s.warnings {
            eprintln!("ferrotrace: warning: {w}");
        }
        return Ok(());
    }
    let mut input = "ferrotrace.data".to_string();
    let mut out: Option<String> = None;
    let mut it = rest.iter();
    while let Some(a) = it.next() {
        if a == "-o" {
            out = it.next().cloned();
        } else {
            input = a.clone();
        }
    }
    let set = read_samples(&input)?;
    let bytes = match cmd.as_str() {
        "report" => report(&set).to_string().into_bytes(),
        "folded" => folded(&set).into_bytes(),
        "flame" => flame_svg(&set)?,
        "firefox" => firefox_json(&set)?.into_bytes(),
        _ => return Err(format!("unknown command `{cmd}`").into()),
    };
    match out {
        Some(o) => std::fs::write(&o, bytes)?,
        None => std::io::stdout().write_all(&bytes)?,
    }
    Ok(())
}
