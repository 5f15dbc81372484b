//! Tracepoint events: their descriptors (from the trace's Tracepoints chunk), argument values, and text.
//!
//! Replay, report and the exporters call [`format_tracepoint`] for the text of a Tracepoint event and
//! [`decode`] for its named, typed arguments (Perfetto/Chrome instant-event `args`).
//!
//! ```no_run
//! use ferrotrace_reader::reader::{EventKind, Trace};
//! use ferrotrace_reader::tracepoints::format_tracepoint;
//!
//! let trace = Trace::open("ferrotrace.data")?;
//! for e in trace.events()? {
//!     let e = e?;
//!     if e.kind == EventKind::Tracepoint {
//!         println!("{} {}", e.ts_ns, format_tracepoint(&trace, &e)); // app::vfs_open(path="/etc/hosts", flags=0)
//!     }
//! }
//! # Ok::<(), ferrotrace_reader::reader::ReadError>(())
//! ```

use ferrotrace_core::codec::{DecodeError, FieldReader};
use ferrotrace_core::schema;
use ferrotrace_core::tracepoint::{
    arg_specs, values_with_message, write_call_with_message, write_event,
};
pub use ferrotrace_core::tracepoint::{ArgType, Value as ValueRef};

use crate::reader::{Event, EventKind, Trace};

/// Decoded arguments: names and values, in declaration order.
pub type Args = Vec<(String, Value)>;

/// One argument of a tracepoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ArgDesc {
    /// Argument name.
    pub name: String,
    /// Its type name as declared (`u32`, `str`, `bytes`, …).
    pub ty: String,
}

/// A tracepoint descriptor from the Tracepoints chunk.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TracepointDesc {
    /// Id used by the trace's events.
    pub id: u32,
    /// `crate::name`.
    pub name: String,
    /// The arguments, as `name:type` separated by commas (the raw form).
    pub args_spec: String,
    /// The arguments.
    pub args: Vec<ArgDesc>,
    /// Display format, empty if none.
    pub format: String,
    /// Source file of the declaration.
    pub file: String,
    /// Its line.
    pub line: u32,
    /// The level of a `tracing` event or span (`INFO`, …; see [`from_callsite`]); `None` for a
    /// tracepoint.
    pub level: Option<&'static str>,
    /// A `tracing` event's literal message, recorded once (the trace's CallsiteMessages chunk) and
    /// left out of its events: its field's place in `args` and its text. `None` for the others.
    pub message: Option<(u32, String)>,
}

/// The descriptor of the Tracepoint events of a `tracing` callsite (an event's, or a span's fields):
/// its fields are tagged values (`value`), shown with its level first.
pub fn from_callsite(c: &schema::Callsite<'_>) -> TracepointDesc {
    let args: Vec<ArgDesc> = c
        .site
        .fields
        .split(',')
        .filter(|f| !f.is_empty())
        .map(|f| ArgDesc {
            name: f.to_string(),
            ty: "value".to_string(),
        })
        .collect();
    let args_spec = args
        .iter()
        .map(|a| format!("{}:value", a.name))
        .collect::<Vec<_>>()
        .join(",");
    TracepointDesc {
        id: c.tracepoint_id,
        name: c.site.name.to_string(),
        args_spec,
        args,
        format: String::new(),
        file: c.site.file.to_string(),
        line: c.site.line,
        level: schema::LEVELS.get(c.site.level as usize).copied(),
        message: None,
    }
}

/// An argument value, owned.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    /// Unsigned integer.
    Unsigned(u64),
    /// Signed integer.
    Signed(i64),
    /// Floating point.
    Float(f64),
    /// Boolean.
    Bool(bool),
    /// String (lossily decoded if the recorded bytes were not UTF-8).
    Str(String),
    /// Bytes.
    Bytes(Vec<u8>),
}

impl From<ValueRef<'_>> for Value {
    fn from(v: ValueRef<'_>) -> Value {
        match v {
            ValueRef::Unsigned(v) => Value::Unsigned(v),
            ValueRef::Signed(v) => Value::Signed(v),
            ValueRef::Float(v) => Value::Float(v),
            ValueRef::Bool(v) => Value::Bool(v),
            ValueRef::Str(s) => Value::Str(String::from_utf8_lossy(s).into_owned()),
            ValueRef::Bytes(b) => Value::Bytes(b.to_vec()),
        }
    }
}

impl Value {
    /// As JSON (for trace-event `args`): numbers, booleans, strings; bytes as a hex string.
    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Unsigned(v) => (*v).into(),
            Value::Signed(v) => (*v).into(),
            Value::Float(v) => serde_json::Number::from_f64(*v)
                .map_or_else(|| v.to_string().into(), serde_json::Value::Number),
            Value::Bool(v) => (*v).into(),
            Value::Str(s) => s.clone().into(),
            Value::Bytes(b) => b
                .iter()
                .map(|x| format!("{x:02x}"))
                .collect::<String>()
                .into(),
        }
    }
}

/// Reads a Tracepoints chunk payload: `v count`, then per tracepoint `v id, s name, s args, s format,
/// s file, v line`.
pub fn parse_chunk(f: &mut FieldReader<'_>) -> Result<Vec<TracepointDesc>, DecodeError> {
    let n = f.varint()?;
    let mut out = Vec::new();
    for _ in 0..n {
        let id = f.varint_u32()?;
        let name = f.str()?.to_string();
        let args_spec = f.str()?.to_string();
        let format = f.str()?.to_string();
        let file = f.str()?.to_string();
        let line = f.varint_u32()?;
        let args = arg_specs(&args_spec)
            .map(|(n, t)| ArgDesc {
                name: n.to_string(),
                ty: t.to_string(),
            })
            .collect();
        out.push(TracepointDesc {
            id,
            name,
            args_spec,
            args,
            format,
            file,
            line,
            level: None,
            message: None,
        });
    }
    Ok(out)
}

impl TracepointDesc {
    /// The named values of an event's payload (a `tracing` event's level first, as `level`; its
    /// message, when recorded once, where the event would have held it).
    pub fn decode(&self, payload: &[u8]) -> Result<Args, DecodeError> {
        let level = self
            .level
            .map(|l| Ok(("level".to_string(), Value::Str(l.to_string()))));
        level
            .into_iter()
            .chain(
                values_with_message(&self.args_spec, self.message(), payload)
                    .map(|r| r.map(|(n, v)| (n.to_string(), Value::from(v)))),
            )
            .collect()
    }

    /// [`TracepointDesc::message`] as the decoders take it.
    fn message(&self) -> ferrotrace_core::tracepoint::Message<'_> {
        self.message.as_ref().map(|(i, t)| (*i, t.as_str()))
    }

    /// The event's text: `crate::name(arg=value, …)`, or `crate::name` and the formatted text; a
    /// `tracing` event's level first (`INFO server(message="done", status=200)`).
    pub fn format(&self, payload: &[u8]) -> String {
        let mut s = String::new();
        if let Some(level) = self.level {
            s.push_str(level);
            s.push(' ');
        }
        let _ = match self.message() {
            // Only `tracing` callsites have one, and no format.
            Some(m) => {
                write_call_with_message(&mut s, &self.name, &self.args_spec, Some(m), payload)
            }
            None => write_event(&mut s, &self.name, &self.args_spec, &self.format, payload),
        };
        s
    }
}

/// The descriptor and named argument values of a Tracepoint event; `None` for other events and for ids
/// the trace has no descriptor for.
pub fn decode<'t>(
    trace: &'t Trace,
    event: &Event,
) -> Option<(&'t TracepointDesc, Result<Args, DecodeError>)> {
    if event.kind != EventKind::Tracepoint {
        return None;
    }
    let d = trace.tracepoints().get(&event.id)?;
    Some((d, d.decode(&event.payload)))
}

/// The text of a Tracepoint event (`app::vfs_open(path="/etc/hosts", flags=0)` or the tracepoint's
/// format), `tracepoint#ID(N bytes)` when the trace lacks its descriptor, and the empty string for other
/// kinds of event.
pub fn format_tracepoint(trace: &Trace, event: &Event) -> String {
    if event.kind != EventKind::Tracepoint {
        return String::new();
    }
    format_payload(trace, event.id, &event.payload)
}

/// [`format_tracepoint`] from the id and payload of an event (borrowed events of the fast iterators).
pub fn format_payload(trace: &Trace, id: u32, payload: &[u8]) -> String {
    match trace.tracepoints().get(&id) {
        Some(d) => d.format(payload),
        None => format!("tracepoint#{id}({} bytes)", payload.len()),
    }
}

/// The name (`crate::name`) and named argument values of tracepoint `id`'s event; `tracepoint#ID` and no
/// arguments when the trace lacks its descriptor or the payload does not decode.
pub fn name_and_args(trace: &Trace, id: u32, payload: &[u8]) -> (String, Args) {
    match trace.tracepoints().get(&id) {
        Some(d) => (d.name.clone(), d.decode(payload).unwrap_or_default()),
        None => (format!("tracepoint#{id}"), Args::default()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrotrace_core::codec::{put_str, put_varint};

    #[test]
    fn chunk_round_trip_and_format() {
        let mut p = Vec::new();
        put_varint(&mut p, 1).unwrap();
        put_varint(&mut p, 4).unwrap();
        put_str(&mut p, "app::vfs_open").unwrap();
        put_str(&mut p, "path:str,flags:u32").unwrap();
        put_str(&mut p, "").unwrap();
        put_str(&mut p, "src/main.rs").unwrap();
        put_varint(&mut p, 12).unwrap();
        let d = parse_chunk(&mut FieldReader::new(&p)).unwrap();
        assert_eq!(d.len(), 1);
        assert_eq!(d[0].args[1].ty, "u32");
        let mut payload = vec![2, 0, b'/', b'x'];
        payload.extend_from_slice(&9u32.to_le_bytes());
        payload.resize(16, 0);
        assert_eq!(
            d[0].format(&payload),
            r#"app::vfs_open(path="/x", flags=9)"#
        );
        assert_eq!(
            d[0].decode(&payload).unwrap(),
            vec![
                ("path".to_string(), Value::Str("/x".into())),
                ("flags".to_string(), Value::Unsigned(9))
            ]
        );
    }
}
