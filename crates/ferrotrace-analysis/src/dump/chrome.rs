//! `dump --format chrome`: Chrome trace-event JSON (`chrome://tracing`, Perfetto UI, speedscope),
//! written while streaming. Function frames are `"B"`/`"E"` pairs (balanced per thread, see
//! [`super::walk`]); lost events, waits, tracepoints and allocations are thread-scoped instant
//! events (`"i"`); thread and process names are metadata events (`"M"`). `ts` is CLOCK_MONOTONIC in
//! microseconds with nanosecond decimals.

use std::collections::HashMap;
use std::io::{self, Write};

use super::{walk, Ev};
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

/// Writes the trace as Chrome JSON; returns the read errors met.
pub fn write(
    trace: &Trace,
    out: &mut dyn Write,
    progress: &mut Progress,
) -> io::Result<Vec<String>> {
    let names = Names::of(trace);
    let pid = trace.session.pid;
    let mut quoted: HashMap<u32, String> = HashMap::new();
    out.write_all(b"{\"displayTimeUnit\":\"ns\",\"traceEvents\":[\n")?;
    let exe = trace.session.exe_name();
    write!(
        out,
        "{{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":{pid},\"tid\":{pid},\"args\":{{\"name\":{}}}}}",
        serde_json::Value::from(exe)
    )?;
    for t in trace.threads.values() {
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
                let name = quoted
                    .entry(id)
                    .or_insert_with(|| serde_json::Value::from(names.get(id).as_ref()).to_string());
                push_head(&mut line, "\"B\"", pid, tid, ts);
                line.push_str(",\"name\":");
                line.push_str(name);
                line.push('}');
            }
            Ev::End { tid, ts, how, .. } => {
                push_head(&mut line, "\"E\"", pid, tid, ts);
                let note = how.note();
                if !note.is_empty() {
                    line.push_str(",\"args\":{\"end\":\"");
                    line.push_str(note);
                    line.push_str("\"}");
                }
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
