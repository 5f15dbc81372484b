//! `dump --format chrome`: Chrome trace-event JSON (`chrome://tracing`, Perfetto UI, speedscope),
//! written while streaming. Function frames are `"B"`/`"E"` pairs, both named (balanced per thread,
//! see [`super::walk`]); lost events, waits, tracepoints and allocations are thread-scoped instant
//! events (`"i"`); thread and process names are metadata events (`"M"`). `ts` is CLOCK_MONOTONIC in
//! microseconds with nanosecond decimals.

use std::collections::HashMap;
use std::io::{self, Write};

use super::{stream, walk, Ev, Exporter, Options, Target, Written};
use crate::names::Names;
use crate::progress::Progress;
use crate::reader::{EventKind, Trace};

/// Starts the line of one event: `,\n{"ph":PH,"pid":..,"tid":..,"ts":..` (the caller closes it).
fn push_head(line: &mut String, ph: &str, pid: u32, tid: u32, ts_ns: u64) {
    use std::fmt::Write as _;
    let _ = write!(
        line,
        ",\n{{\"ph\":{ph},\"pid\":{pid},\"tid\":{tid},\"ts\":{}.{:03}",
        ts_ns / 1000,
        ts_ns % 1000
    );
}

/// About how many bytes [`write()`] will write for `trace`: one line per event (the few metadata lines
/// aside) of fixed fields, the digits of pid, tid and timestamp, and the name (taken at the mean length
/// of the trace's function names). Read from the trace's index, before anything is decoded, so that a
/// user can be told before gigabytes are written.
pub fn estimated_bytes(trace: &Trace) -> u64 {
    let digits = |n: u64| n.checked_ilog10().unwrap_or(0) as u64 + 1;
    let names = Names::of(trace);
    let (count, total) = trace.functions().keys().fold((0u64, 0u64), |(c, t), &id| {
        (
            c + 1,
            t + serde_json::Value::from(names.get(id).as_ref())
                .to_string()
                .len() as u64,
        )
    });
    let name = total.checked_div(count).unwrap_or(8);
    let ts_us = trace.clocks().last().map_or(1, |c| c.mono_ns / 1000);
    let tid = trace.threads().keys().last().copied().unwrap_or(1);
    // `,\n{"ph":"B","pid":` … `,"tid":` … `,"ts":` … `.nnn,"name":` … `}`
    let line =
        40 + digits(trace.session().pid.into()) + digits(tid.into()) + digits(ts_us) + 4 + name;
    trace.event_count() * line
}

/// The JSON string of function `id`'s name, quoted once per function.
fn quoted_name<'a>(cache: &'a mut HashMap<u32, String>, names: &Names, id: u32) -> &'a str {
    cache
        .entry(id)
        .or_insert_with(|| serde_json::Value::from(names.get(id).as_ref()).to_string())
}

/// Writes the trace as Chrome JSON; returns the read errors met.
pub fn write(
    trace: &Trace,
    out: &mut dyn Write,
    progress: &mut Progress,
) -> io::Result<Vec<String>> {
    let names = Names::of(trace);
    let pid = trace.session().pid;
    let mut quoted: HashMap<u32, String> = HashMap::new();
    out.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")?;
    let exe = trace.session().exe_name();
    write!(
        out,
        "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"tid\":{pid},\"args\":{{\"name\":{}}}}}",
        serde_json::Value::from(exe)
    )?;
    for t in trace.threads().values() {
        write!(
            out,
            ",\n{{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":{pid},\"tid\":{},\"args\":{{\"name\":{}}}}}",
            t.tid,
            serde_json::Value::from(t.name.as_str())
        )?;
    }
    let mut line = String::with_capacity(256);
    let errors = walk(trace, progress, |ev| {
        line.clear();
        match ev {
            Ev::Begin { tid, id, ts, .. } => {
                push_head(&mut line, "\"B\"", pid, tid, ts);
                line.push_str(",\"name\":");
                line.push_str(quoted_name(&mut quoted, &names, id));
                line.push('}');
            }
            Ev::End {
                tid, id, ts, how, ..
            } => {
                // How an unusual frame ended (unwound, still running at the end) is an instant event
                // just before its end: args on the "E" would make it another frame for speedscope,
                // which pairs ends with begins by name and args.
                let note = how.note();
                if !note.is_empty() {
                    push_head(&mut line, "\"i\",\"s\":\"t\"", pid, tid, ts);
                    line.push_str(",\"name\":");
                    let what = format!("{}: {note}", names.get(id));
                    line.push_str(&serde_json::Value::from(what).to_string());
                    line.push('}');
                }
                // The name on "E" too: the format leaves it optional, but speedscope pairs ends with
                // begins by name and fails on a trace without them.
                push_head(&mut line, "\"E\"", pid, tid, ts);
                line.push_str(",\"name\":");
                line.push_str(quoted_name(&mut quoted, &names, id));
                line.push('}');
            }
            Ev::Instant {
                tid,
                ts,
                kind,
                id,
                payload,
                fields,
                ..
            } => {
                let (name, values) = super::instant(
                    Some(trace),
                    &|id| names.get(id).into_owned(),
                    kind,
                    id,
                    payload,
                    &fields,
                );
                let args = matches!(
                    kind,
                    EventKind::Tracepoint | EventKind::Alloc | EventKind::Free
                )
                .then(|| {
                    let obj: serde_json::Map<String, serde_json::Value> = values
                        .iter()
                        .map(|(k, v)| (k.clone(), v.to_json()))
                        .collect();
                    serde_json::Value::Object(obj)
                });
                push_head(&mut line, "\"i\",\"s\":\"t\"", pid, tid, ts);
                line.push_str(",\"name\":");
                line.push_str(&serde_json::Value::from(name).to_string());
                if let Some(args) = args {
                    line.push_str(",\"args\":");
                    line.push_str(&args.to_string());
                } else if !payload.is_empty() {
                    line.push_str(",\"args\":{\"payload\":\"");
                    for b in payload {
                        line.push_str(&format!("{b:02x}"));
                    }
                    line.push_str("\"}");
                }
                line.push('}');
            }
        }
        out.write_all(line.as_bytes())
    })?;
    out.write_all(b"\n]}\n")?;
    Ok(errors)
}

/// `--format chrome`.
pub struct Chrome;

impl Exporter for Chrome {
    fn name(&self) -> &'static str {
        "chrome"
    }

    fn about(&self) -> &'static str {
        "Chrome trace-event JSON"
    }

    /// ~60 bytes per event: say so before writing gigabytes, and where a smaller form is.
    fn notice(&self, trace: &Trace, _opts: Options) -> Option<String> {
        Some(format!(
            "Chrome JSON of {} events will take about {}; --format perfetto writes them in about 1 \
             byte each",
            trace.event_count(),
            human_bytes(estimated_bytes(trace))
        ))
    }

    fn write_functions(
        &self,
        trace: &Trace,
        _opts: Options,
        target: Target<'_>,
        progress: &mut Progress,
    ) -> io::Result<Written> {
        write(trace, stream(target)?, progress).map(Written::from)
    }
}

/// `1.5 GB`, `320 MB`, `12 kB`: decimal units, as `ls -h --si` and disk sizes.
fn human_bytes(n: u64) -> String {
    let mut v = n as f64;
    for unit in ["bytes", "kB", "MB", "GB"] {
        if v < 1000.0 {
            return if unit == "bytes" {
                format!("{n} bytes")
            } else {
                format!("{v:.1} {unit}")
            };
        }
        v /= 1000.0;
    }
    format!("{v:.1} TB")
}
