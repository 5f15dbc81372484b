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
//! records. Depths above 1023 (the record's 10-bit field) are clamped.

use std::collections::BTreeSet;
use std::fs;
use std::io::{self, BufWriter, Write};
use std::path::Path;

use super::{Exporter, Options, Target, Written};
use crate::callstack::{initial_stacks, CallStack, StackEvent};
use crate::names::Names;
use crate::progress::Progress;
use crate::reader::{EventKind, Trace};

const BASE: u64 = 0x40_0000;
const MAGIC: u64 = 5;

fn addr(id: u32) -> u64 {
    BASE + 16 * id as u64
}

fn record(out: &mut impl Write, ts: u64, kind: u64, depth: usize, address: u64) -> io::Result<()> {
    let depth = depth.min(1023) as u64;
    let w = kind | MAGIC << 3 | depth << 6 | (address & 0xffff_ffff_ffff) << 16;
    out.write_all(&ts.to_le_bytes())?;
    out.write_all(&w.to_le_bytes())
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
    let exe = if trace.session.exe.is_empty() {
        "/unknown".to_string()
    } else {
        trace.session.exe.clone()
    };
    let base = exe.rsplit('/').next().unwrap_or("unknown").to_string();
    let pid = trace.session.pid;
    let mut used: BTreeSet<u32> = trace.functions.keys().copied().collect();
    let mut first_ts = u64::MAX;
    let mut tids = Vec::new();
    for th in trace.threads.values() {
        let path = dir.join(format!("{}.dat", th.tid));
        let mut out = BufWriter::with_capacity(1 << 16, fs::File::create(&path)?);
        let mut stack = CallStack::with_initial(initial.get(&th.tid).cloned().unwrap_or_default());
        let mut pending: Vec<StackEvent> = Vec::new();
        let mut ev = trace
            .thread_events(th.tid)
            .map_err(|e| io::Error::other(e.to_string()))?;
        let mut n = 0u64;
        let mut any = false;
        let emit =
            |out: &mut BufWriter<fs::File>, se: StackEvent, used: &mut BTreeSet<u32>| match se {
                StackEvent::Enter {
                    id, time, depth, ..
                } => {
                    used.insert(id);
                    record(out, time, 0, depth, addr(id))
                }
                StackEvent::Leave {
                    frame, end, depth, ..
                } => record(out, end, 1, depth, addr(frame.id)),
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
            stack.touch(e.ts_ns, &mut |se| pending.push(se));
            let is_fn = stack.process(e.kind, e.id, e.ts_ns, &mut |se| pending.push(se));
            for se in pending.drain(..) {
                emit(&mut out, se, &mut used)?;
            }
            if !is_fn && e.kind == EventKind::Lost {
                // uftrace's LOST record: time 0, the address field holds the count.
                record(&mut out, 0, 2, stack.depth(), e.id as u64)?;
            }
        }
        progress.add(n & 0xffff);
        stack.finish(&mut |se| pending.push(se));
        for se in pending.drain(..) {
            emit(&mut out, se, &mut used)?;
        }
        out.flush()?;
        tids.push(th.tid);
    }
    if first_ts == u64::MAX {
        first_ts = trace.clocks.first().map_or(1_000_000_000, |c| c.mono_ns);
    }
    let sess_ts = first_ts.saturating_sub(1000);
    let ts_text = format!("{}.{:09}", sess_ts / 1_000_000_000, sess_ts % 1_000_000_000);
    let sid = format!("{:016x}", 0xf0e7_0000_0000_0000u64 | pid as u64);

    // info: 40-byte header, then the text lines announced by info_mask.
    let mut info = Vec::new();
    info.extend_from_slice(b"Ftrace!\0");
    info.extend_from_slice(&4u32.to_le_bytes());
    info.extend_from_slice(&40u16.to_le_bytes());
    info.push(1); // little-endian
    info.push(2); // 64-bit
    info.extend_from_slice(&0x62u64.to_le_bytes()); // TASK_SESSION | SYM_REL_ADDR | MAX_STACK
    info.extend_from_slice(&0x81u64.to_le_bytes()); // EXE_NAME | TASKINFO
    info.extend_from_slice(&1024u16.to_le_bytes());
    info.extend_from_slice(&[0u8; 6]);
    let tid_list: Vec<String> = tids.iter().map(u32::to_string).collect();
    info.extend_from_slice(
        format!(
            "exename:{exe}\ntaskinfo:lines=2\ntaskinfo:nr_tid={}\ntaskinfo:tids={}\n",
            tids.len(),
            tid_list.join(",")
        )
        .as_bytes(),
    );
    fs::write(dir.join("info"), info)?;

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
