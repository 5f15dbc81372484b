//! `dump --format chrome`: Chrome trace-event JSON (`chrome://tracing`, Perfetto UI, speedscope),
//! written while streaming. Function frames are `"B"`/`"E"` pairs, both named (balanced per thread,
//! see [`super::walk`]); lost events, waits, tracepoints and allocations are thread-scoped instant
//! events (`"i"`); thread and process names are metadata events (`"M"`). `ts` is CLOCK_MONOTONIC in
//! microseconds with nanosecond decimals.

use std::collections::HashMap;
use std::io::{self, Write};

use super::{stream, walk, Ev, Exporter, Options, Target, Written};
use crate::decimal::push_u64;
use crate::names::Names;
use crate::progress::Progress;
use crate::reader::{EventKind, Trace};

/// Output is handed to the writer in pieces of about this size: one call through `dyn Write` per
/// piece, not per event.
const FLUSH_AT: usize = 1 << 16;

/// Ids below this get their quoted names in a dense table (no hashing per event).
const DENSE_IDS: u32 = 1 << 20;

/// Starts the line of one event: `,\n{"ph":PH,"pid":..,"tid":..,"ts":..` (the caller closes it),
/// with `pid_tid` the thread's `,"pid":..,"tid":..`. Written by hand: through `fmt` this line was
/// most of the export's time.
#[inline]
fn push_head(line: &mut Vec<u8>, ph: &[u8], pid_tid: &[u8], ts_ns: u64) {
    line.extend_from_slice(b",\n{\"ph\":");
    line.extend_from_slice(ph);
    line.extend_from_slice(pid_tid);
    line.extend_from_slice(b",\"ts\":");
    push_u64(line, ts_ns / 1000, 0);
    let ns = ts_ns % 1000;
    line.extend_from_slice(&[
        b'.',
        b'0' + (ns / 100) as u8,
        b'0' + (ns / 10 % 10) as u8,
        b'0' + (ns % 10) as u8,
    ]);
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

/// The JSON strings of functions' names, quoted once per function.
struct Quoted<'a> {
    names: &'a Names,
    dense: Vec<Option<Box<[u8]>>>,
    sparse: HashMap<u32, Box<[u8]>>,
}

impl Quoted<'_> {
    fn quote(&self, id: u32) -> Box<[u8]> {
        serde_json::Value::from(self.names.get(id).as_ref())
            .to_string()
            .into_bytes()
            .into_boxed_slice()
    }

    #[inline]
    fn get(&mut self, id: u32) -> &[u8] {
        if id >= DENSE_IDS {
            if !self.sparse.contains_key(&id) {
                let q = self.quote(id);
                self.sparse.insert(id, q);
            }
            return &self.sparse[&id];
        }
        let i = id as usize;
        if self.dense.get(i).is_none_or(Option::is_none) {
            let q = self.quote(id);
            if self.dense.len() <= i {
                self.dense.resize_with(i + 1, || None);
            }
            self.dense[i] = Some(q);
        }
        self.dense[i].as_deref().expect("filled above")
    }
}

/// Writes the trace as Chrome JSON; returns the read errors met.
pub fn write(
    trace: &Trace,
    out: &mut dyn Write,
    progress: &mut Progress,
) -> io::Result<Vec<String>> {
    let names = Names::of(trace);
    let pid = trace.session().pid;
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
    let mut quoted = Quoted {
        names: &names,
        dense: Vec::new(),
        sparse: HashMap::new(),
    };
    let mut line: Vec<u8> = Vec::with_capacity(FLUSH_AT + 4096);
    // `,"pid":..,"tid":..` of the last event's thread: events come in runs of one thread.
    let mut pid_tid: (Option<u32>, Vec<u8>) = (None, Vec::new());
    let errors = walk(trace, progress, |ev| {
        let tid = match ev {
            Ev::Begin { tid, .. } | Ev::End { tid, .. } | Ev::Instant { tid, .. } => tid,
        };
        if pid_tid.0 != Some(tid) {
            let p = &mut pid_tid.1;
            p.clear();
            p.extend_from_slice(b",\"pid\":");
            push_u64(p, pid.into(), 0);
            p.extend_from_slice(b",\"tid\":");
            push_u64(p, tid.into(), 0);
            pid_tid.0 = Some(tid);
        }
        let pt = &pid_tid.1;
        match ev {
            Ev::Begin { id, ts, .. } => {
                push_head(&mut line, b"\"B\"", pt, ts);
                line.extend_from_slice(b",\"name\":");
                line.extend_from_slice(quoted.get(id));
                line.push(b'}');
            }
            Ev::End { id, ts, how, .. } => {
                // How an unusual frame ended (unwound, still running at the end) is an instant event
                // just before its end: args on the "E" would make it another frame for speedscope,
                // which pairs ends with begins by name and args.
                let note = how.note();
                if !note.is_empty() {
                    push_head(&mut line, b"\"i\",\"s\":\"t\"", pt, ts);
                    line.extend_from_slice(b",\"name\":");
                    let what = format!("{}: {note}", names.get(id));
                    line.extend_from_slice(serde_json::Value::from(what).to_string().as_bytes());
                    line.push(b'}');
                }
                // The name on "E" too: the format leaves it optional, but speedscope pairs ends with
                // begins by name and fails on a trace without them.
                push_head(&mut line, b"\"E\"", pt, ts);
                line.extend_from_slice(b",\"name\":");
                line.extend_from_slice(quoted.get(id));
                line.push(b'}');
            }
            Ev::Instant {
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
                push_head(&mut line, b"\"i\",\"s\":\"t\"", pt, ts);
                line.extend_from_slice(b",\"name\":");
                line.extend_from_slice(serde_json::Value::from(name).to_string().as_bytes());
                if let Some(args) = args {
                    line.extend_from_slice(b",\"args\":");
                    line.extend_from_slice(args.to_string().as_bytes());
                } else if !payload.is_empty() {
                    line.extend_from_slice(b",\"args\":{\"payload\":\"");
                    for b in payload {
                        line.extend_from_slice(format!("{b:02x}").as_bytes());
                    }
                    line.extend_from_slice(b"\"}");
                }
                line.push(b'}');
            }
        }
        if line.len() >= FLUSH_AT {
            out.write_all(&line)?;
            line.clear();
        }
        Ok(())
    })?;
    out.write_all(&line)?;
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
