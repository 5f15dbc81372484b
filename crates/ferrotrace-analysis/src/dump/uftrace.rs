//! `dump --format uftrace`: a uftrace data directory that uftrace (0.13 and later) reads with
//! `uftrace replay/report/graph/dump -d DIR`.
//!
//! Written per thread while streaming (one `<TID>.dat` open at a time). Files: `info` (binary header +
//! `exename` and `taskinfo` lines), `task.txt`, `sid-<SID>.map`, `<exe>.sym`, and one `<TID>.dat` per
//! thread of 16-byte records (ns timestamp; type, magic, depth and address).
//!
//! Addresses: uftrace resolves a record's address through the `.map` and `.sym` files. ferrotrace
//! writes a synthetic layout: function `id` lives at `0x400000 + 16 * id` in one module named after
//! the executable, and the `.sym` holds the **demangled** names (uftrace 0.13 cannot demangle Rust
//! v0 symbols), so every function — of any module, or missing from the symbol table (`fn#ID`) —
//! resolves to a readable name. Frames are balanced as uftrace requires: functions already running
//! when tracing began get an entry at the thread's first event; frames unwound by a panic or still
//! open at the end get an exit where ferrotrace's call stack closes them. Lost events become LOST
//! records; buffer waits (lossless mode) two user events, `ferrotrace:buffer-wait` and
//! `ferrotrace:buffer-wait-end` (`events.txt`). Depths above 1023 (the record's 10-bit field) are
//! clamped.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use super::{Exporter, Options, Target, Written};
use ferrotrace_core::argspec::{Spec, Value};

use crate::callstack::{initial_stacks, CallStack, EndKind, StackEvent};
use crate::names::Names;
use crate::progress::Progress;
use crate::reader::{EventKind, Trace};

const BASE: u64 = 0x40_0000;
/// The user-event id (uftrace's `EVENT_ID_USER`, the first) of the start of a buffer wait; the next
/// one is its end.
const WAIT_EVENT: u64 = 1_000_000;
const MAGIC: u64 = 5;

fn addr(id: u32) -> u64 {
    BASE + 16 * id as u64
}

fn record(out: &mut impl Write, ts: u64, kind: u64, depth: usize, address: u64) -> io::Result<()> {
    record_with(out, ts, kind, depth, address, &[])
}

/// A record followed by `values` (its `more` bit set), as [`uftrace_values`] laid them out.
fn record_with(
    out: &mut impl Write,
    ts: u64,
    kind: u64,
    depth: usize,
    address: u64,
    values: &[u8],
) -> io::Result<()> {
    let depth = depth.min(1023) as u64;
    let more = if values.is_empty() { 0 } else { 1 << 2 };
    let w = kind | more | MAGIC << 3 | depth << 6 | (address & 0xffff_ffff_ffff) << 16;
    let mut r = [0u8; 16];
    r[..8].copy_from_slice(&ts.to_le_bytes());
    r[8..].copy_from_slice(&w.to_le_bytes());
    out.write_all(&r)?;
    out.write_all(values)
}

/// The values of `spec` recorded in `payload`, laid out as uftrace's libmcount writes them after a
/// record (and its replay reads them by the same spec): each value in its size rounded up to 4
/// bytes, a string as a 2-byte length and its bytes rounded up likewise (a null pointer: length 4,
/// four 0xff bytes; a pointer that could not be read: the text `<0xADDR>`, as uftrace writes it),
/// the whole rounded up to 8 bytes.
fn uftrace_values(spec: &Spec, payload: &[u8]) -> Vec<u8> {
    let mut v = Vec::new();
    let string = |v: &mut Vec<u8>, s: &[u8]| {
        v.extend_from_slice(&(s.len() as u16).to_le_bytes());
        v.extend_from_slice(s);
        v.resize(v.len().next_multiple_of(4), 0);
    };
    for (item, value) in spec.items().iter().zip(spec.values(payload)) {
        match value {
            Value::Word(w) => {
                let bytes = (item.bytes as usize).next_multiple_of(4);
                v.extend_from_slice(&w.to_le_bytes()[..bytes]);
            }
            Value::Str(s, cut) => {
                let mut s = s.to_vec();
                if cut {
                    s.extend_from_slice(b"...");
                }
                string(&mut v, &s);
            }
            Value::Null => string(&mut v, &[0xff; 4]),
            Value::Unreadable(at) => string(&mut v, format!("<{at:#x}>").as_bytes()),
        }
    }
    v.resize(v.len().next_multiple_of(8), 0);
    v
}

/// uftrace's spelling of the argument patterns of the traced functions with values: `^NAME$@ITEMS`
/// joined by `;`, for the `argspec:` (arguments) or `retspec:` (return values) line of `info`, with
/// the names as the `.sym` file has them. `None` when no function has such values.
fn uftrace_specs(
    trace: &Trace,
    names: &Names,
    used: &BTreeSet<u32>,
    retval: bool,
) -> Option<String> {
    let mut specs = Vec::new();
    for &id in used {
        let Some(s) = trace.arg_specs(id) else {
            continue;
        };
        let spec = if retval { &s.retval } else { &s.args };
        if !spec.is_empty() {
            specs.push(format!("^{}$@{spec}", regex_escaped(&names.get(id))));
        }
    }
    (!specs.is_empty()).then(|| specs.join(";"))
}

/// `name` with the characters of a POSIX extended regex escaped.
fn regex_escaped(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if "\\.^$|?*+()[]{}".contains(c) {
            out.push('\\');
        }
        out.push(c);
    }
    out
}

/// Writes the uftrace directory `dir` (created if needed, in a parent that must exist, as the other
/// formats' output files); returns the read errors met.
pub fn write(trace: &Trace, dir: &Path, progress: &mut Progress) -> io::Result<Vec<String>> {
    match fs::create_dir(dir) {
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => {}
        other => other?,
    }
    let names = Names::of(trace);
    let mut errors = Vec::new();
    let initial = initial_stacks(trace).unwrap_or_else(|e| {
        errors.push(e.to_string());
        Default::default()
    });
    let exe = if trace.session().exe.is_empty() {
        "/unknown".to_string()
    } else {
        trace.session().exe.clone()
    };
    let base = exe.rsplit('/').next().unwrap_or("unknown").to_string();
    let pid = trace.session().pid;
    let mut used: BTreeSet<u32> = trace.functions().keys().copied().collect();
    // `used` by id, for the ids below 2^20: an entry's id is nearly always in it already, and looking
    // it up in the tree at every entry was a tenth of the export's time.
    let dense = used.last().map_or(0, |&id| id as usize + 1).min(1 << 20);
    let mut in_used = vec![false; dense];
    for &id in used.range(..dense as u32) {
        in_used[id as usize] = true;
    }
    let mut first_ts = u64::MAX;
    let mut tids = Vec::new();
    let mut waited = false;
    for th in trace.threads().values() {
        let path = dir.join(format!("{}.dat", th.tid));
        let mut out = BufWriter::with_capacity(1 << 16, fs::File::create(&path)?);
        let mut stack = CallStack::with_initial(initial.get(&th.tid).cloned().unwrap_or_default());
        let mut pending: Vec<StackEvent> = Vec::new();
        let mut ev = trace
            .thread_events(th.tid)
            .map_err(|e| io::Error::other(e.to_string()))?;
        let mut n = 0u64;
        let mut any = false;
        let mut wait: Option<(u64, u64)> = None;
        // The values of the function event being processed (`record -A`, `-R`), laid out for uftrace,
        // for the stack event it makes.
        let mut values: Option<(u32, EventKind, Vec<u8>)> = None;
        let emit = |out: &mut BufWriter<fs::File>,
                    se: StackEvent,
                    used: &mut BTreeSet<u32>,
                    in_used: &[bool],
                    values: &mut Option<(u32, EventKind, Vec<u8>)>| match se {
            StackEvent::Enter {
                id, time, depth, ..
            } => {
                if !in_used.get(id as usize).is_some_and(|&b| b) {
                    used.insert(id);
                }
                let v = match values {
                    Some((of, EventKind::Entry, _)) if *of == id => values.take().map(|v| v.2),
                    _ => None,
                };
                record_with(out, time, 0, depth, addr(id), v.as_deref().unwrap_or(&[]))
            }
            StackEvent::Leave {
                frame,
                end,
                depth,
                how,
            } => {
                let v = match values {
                    Some((of, EventKind::Exit, _)) if *of == frame.id && how == EndKind::Return => {
                        values.take().map(|v| v.2)
                    }
                    _ => None,
                };
                let v = v.as_deref().unwrap_or(&[]);
                record_with(out, end, 1, depth, addr(frame.id), v)
            }
            StackEvent::OrphanExit { .. } => Ok(()),
        };
        loop {
            let e = match ev.next_ref() {
                None => break,
                Some(Ok(e)) => e,
                Some(Err(err)) => {
                    errors.push(err.to_string());
                    break;
                }
            };
            n += 1;
            if n & 0xffff == 0 {
                progress.add(0x10000);
            }
            if !any {
                any = true;
                first_ts = first_ts.min(e.ts_ns);
            }
            if e.kind == EventKind::Wait {
                // Drawn after the event whose slow path waited (see below).
                wait = Some((e.ts_ns, e.id as u64));
                continue;
            }
            if !e.payload.is_empty() && e.kind.is_function() {
                values = trace.arg_specs(e.id).map(|s| {
                    let spec = if e.kind == EventKind::Entry {
                        &s.args
                    } else {
                        &s.retval
                    };
                    (e.id, e.kind, uftrace_values(spec, e.payload))
                });
            }
            stack.touch(e.ts_ns, &mut |se| pending.push(se));
            let is_fn = stack.process(e.kind, e.id, e.ts_ns, &mut |se| pending.push(se));
            for se in pending.drain(..) {
                emit(&mut out, se, &mut used, &in_used, &mut values)?;
            }
            values = None;
            if !is_fn && e.kind == EventKind::Lost {
                // uftrace's LOST record: time 0, the address field holds the count.
                record(&mut out, 0, 2, stack.depth(), e.id as u64)?;
            }
            // A buffer wait (lossless mode): its marker precedes the event whose slow path waited,
            // with that event's time; the wait followed it. Two user events frame it (EVENT
            // records, named in events.txt), as uftrace shows the events it records.
            if let Some((ts, ns)) = wait.take() {
                waited = true;
                record(&mut out, ts, 3, stack.depth(), WAIT_EVENT)?;
                record(&mut out, ts + ns, 3, stack.depth(), WAIT_EVENT + 1)?;
            }
        }
        progress.add(n & 0xffff);
        stack.finish(&mut |se| pending.push(se));
        for se in pending.drain(..) {
            emit(&mut out, se, &mut used, &in_used, &mut values)?;
        }
        out.flush()?;
        tids.push(th.tid);
    }
    if first_ts == u64::MAX {
        first_ts = trace.clocks().first().map_or(1_000_000_000, |c| c.mono_ns);
    }
    let sess_ts = first_ts.saturating_sub(1000);
    let ts_text = format!("{}.{:09}", sess_ts / 1_000_000_000, sess_ts % 1_000_000_000);
    let sid = format!("{:016x}", 0xf0e7_0000_0000_0000u64 | pid as u64);

    // info: 40-byte header, then the text lines announced by info_mask, in the order of its bits.
    let tid_list: Vec<String> = tids.iter().map(u32::to_string).collect();
    let specs = [false, true].map(|retval| uftrace_specs(trace, &names, &used, retval));
    let (mask, lines) = info_lines(trace, &exe, &tid_list, &specs);
    let mut info = Vec::new();
    info.extend_from_slice(b"Ftrace!\0");
    info.extend_from_slice(&4u32.to_le_bytes());
    info.extend_from_slice(&40u16.to_le_bytes());
    info.push(1); // little-endian
    info.push(2); // 64-bit
                  // TASK_SESSION | SYM_REL_ADDR | MAX_STACK, EVENT when there are events (buffer waits),
                  // ARGUMENT and RETVAL when records carry values.
    let mut features: u64 = if waited { 0xe2 } else { 0x62 };
    if specs[0].is_some() {
        features |= 1 << 3;
    }
    if specs[1].is_some() {
        features |= 1 << 4;
    }
    info.extend_from_slice(&features.to_le_bytes());
    info.extend_from_slice(&mask.to_le_bytes());
    info.extend_from_slice(&1024u16.to_le_bytes());
    info.extend_from_slice(&[0u8; 6]);
    info.extend_from_slice(lines.as_bytes());
    fs::write(dir.join("info"), info)?;
    if waited {
        fs::write(
            dir.join("events.txt"),
            format!(
                "EVENT: {WAIT_EVENT} ferrotrace:buffer-wait\nEVENT: {} ferrotrace:buffer-wait-end\n",
                WAIT_EVENT + 1
            ),
        )?;
    }

    let mut task = format!("SESS timestamp={ts_text} pid={pid} sid={sid} exename=\"{exe}\"\n");
    for tid in &tids {
        task.push_str(&format!("TASK timestamp={ts_text} tid={tid} pid={pid}\n"));
    }
    fs::write(dir.join("task.txt"), task)?;

    let last = used.iter().next_back().copied().unwrap_or(0);
    let end = (addr(last) + 32 + 0xfff) & !0xfff;
    fs::write(
        dir.join(format!("sid-{sid}.map")),
        format!(
            "{BASE:08x}-{end:08x} r-xp 00000000 00:00 0                          {exe}\n\
             7ffd00000000-7ffd00021000 rw-p 00000000 00:00 0                          [stack]\n"
        ),
    )?;

    let mut sym = BufWriter::new(fs::File::create(dir.join(format!("{base}.sym")))?);
    writeln!(sym, "# symbols: {}", used.len() + 1)?;
    writeln!(sym, "# path name: {exe}")?;
    for &id in &used {
        // One name per line: newlines in a name would break the file.
        let name = names.get(id).replace('\n', " ");
        writeln!(sym, "{:016x} T {name}", addr(id) - BASE)?;
    }
    writeln!(sym, "{:016x} ? __func_end", addr(last) + 16 - BASE)?;
    sym.flush()?;
    Ok(errors)
}

/// The bits of uftrace's `info_mask` (its `enum uftrace_info_bits`) for the lines written.
mod info_bit {
    pub const EXE_NAME: u64 = 1 << 0;
    pub const EXIT_STATUS: u64 = 1 << 2;
    pub const CMDLINE: u64 = 1 << 3;
    pub const TASKINFO: u64 = 1 << 7;
    pub const USAGEINFO: u64 = 1 << 8;
    pub const ARG_SPEC: u64 = 1 << 10;
    pub const RECORD_DATE: u64 = 1 << 11;
    pub const PATTERN_TYPE: u64 = 1 << 12;
    pub const VERSION: u64 = 1 << 13;
}

/// The text of the `info` file that describes the run, so that `uftrace info -d DIR` does: the
/// program, its exit status (when the trace knows it), its command line, its threads, its CPU time
/// and the rest of its resource usage (when `record` saw it), when it was recorded and how long it
/// ran, and what wrote it. Returns the `info_mask` and the lines, in uftrace's order of its bits.
fn info_lines(
    trace: &Trace,
    exe: &str,
    tids: &[String],
    [argspec, retspec]: &[Option<String>; 2],
) -> (u64, String) {
    use std::fmt::Write as _;
    let mut mask = info_bit::EXE_NAME | info_bit::CMDLINE | info_bit::TASKINFO;
    let mut o = format!("exename:{exe}\n");
    // uftrace reads the status as waitpid gives it.
    let status = trace.end().and_then(|e| match e.reason {
        ferrotrace_core::schema::EndReason::Signal => Some(e.signal as i32 & 0x7f),
        ferrotrace_core::schema::EndReason::Exit => e.exit_code.map(|c| (c & 0xff) << 8),
        ferrotrace_core::schema::EndReason::Stopped => None,
    });
    if let Some(status) = status {
        mask |= info_bit::EXIT_STATUS;
        let _ = writeln!(o, "exit_status:{status}");
    }
    // One line, escaped as uftrace's json_quote does.
    let mut cmdline = String::new();
    for c in trace.session().args.join(" ").chars() {
        match c {
            '"' | '\\' => {
                cmdline.push('\\');
                cmdline.push(c);
            }
            '\n' | '\r' | '\t' => cmdline.push(' '),
            c => cmdline.push(c),
        }
    }
    let _ = writeln!(o, "cmdline:{cmdline}");
    let _ = write!(
        o,
        "taskinfo:lines=2\ntaskinfo:nr_tid={}\ntaskinfo:tids={}\n",
        tids.len(),
        tids.join(",")
    );
    if let Some(u) = trace.end().and_then(|e| e.usage) {
        mask |= info_bit::USAGEINFO;
        let seconds = |us: u64| format!("{}.{:06}", us / 1_000_000, us % 1_000_000);
        let _ = write!(
            o,
            "usageinfo:lines=6\nusageinfo:systime={}\nusageinfo:usrtime={}\n\
             usageinfo:ctxsw={} / {} (voluntary / involuntary)\nusageinfo:maxrss={}\n\
             usageinfo:pagefault={} / {} (major / minor)\nusageinfo:iops={} / {} (read / write)\n",
            seconds(u.system_us),
            seconds(u.user_us),
            u.voluntary_switches,
            u.involuntary_switches,
            u.max_rss_kib,
            u.major_faults,
            u.minor_faults,
            u.blocks_in,
            u.blocks_out
        );
    }
    if argspec.is_some() || retspec.is_some() {
        // The arguments and return values recorded: the specs uftrace's replay reads them by.
        mask |= info_bit::ARG_SPEC;
        let lines = usize::from(argspec.is_some()) + usize::from(retspec.is_some());
        let _ = writeln!(o, "argspec:lines={lines}");
        if let Some(a) = argspec {
            let _ = writeln!(o, "argspec:{a}");
        }
        if let Some(r) = retspec {
            let _ = writeln!(o, "retspec:{r}");
        }
    }
    if let Some(date) = local_date(trace.session().start_realtime_ns / 1_000_000_000) {
        mask |= info_bit::RECORD_DATE;
        let elapsed = trace.duration_ns();
        let _ = write!(
            o,
            "record_date:{date}\nelapsed_time:{}.{:09} sec\n",
            elapsed / 1_000_000_000,
            elapsed % 1_000_000_000
        );
    }
    if argspec.is_some() || retspec.is_some() {
        // The specs' patterns are regexes (uftrace takes them as globs without this line).
        mask |= info_bit::PATTERN_TYPE;
        let _ = writeln!(o, "pattern_type:regex");
    }
    mask |= info_bit::VERSION;
    let _ = writeln!(o, "uftrace_version:ferrotrace {}", trace.session().version);
    (mask, o)
}

/// `secs` since 1970 as `ctime(3)` writes it in local time (`Wed Sep 19 17:30:39 2018`), as uftrace
/// records its date.
fn local_date(secs: u64) -> Option<String> {
    let t = libc::time_t::try_from(secs).ok()?;
    let mut buf = [0 as libc::c_char; 64];
    // SAFETY: ctime_r writes at most 26 bytes (with the NUL) into the 64 of `buf`, and reads `t`.
    let p = unsafe { libc::ctime_r(&t, buf.as_mut_ptr()) };
    if p.is_null() {
        return None;
    }
    // SAFETY: ctime_r returned `buf`, NUL-terminated.
    let text = unsafe { std::ffi::CStr::from_ptr(p) };
    Some(text.to_string_lossy().trim_end().to_string())
}

/// `--format uftrace`.
pub struct Uftrace;

impl Exporter for Uftrace {
    fn name(&self) -> &'static str {
        "uftrace"
    }

    fn about(&self) -> &'static str {
        "A uftrace data directory (uftrace replay/report -d DIR)"
    }

    fn directory(&self) -> Option<&'static str> {
        Some("uftrace.data")
    }

    fn write_functions(
        &self,
        trace: &Trace,
        _opts: Options,
        target: Target<'_>,
        progress: &mut Progress,
    ) -> io::Result<Written> {
        match target {
            Target::Directory(dir) => write(trace, dir, progress).map(Written::from),
            Target::Stream(_) | Target::Pieces(_) => Err(io::Error::other(
                "a uftrace data directory cannot be written to a stream",
            )),
        }
    }
}
