//! Static tracepoints: declaration, the disabled-site NOP, the enabled out-of-line path, descriptors.
//!
//! [`tracepoint!`](crate::tracepoint!) declares a tracepoint once; a site fires it, either by calling the
//! function the declaration defines (`vfs_open(path, flags)`, arguments evaluated by the caller) or with
//! [`trace!`](crate::trace!) (`ferrotrace::trace!(vfs_open(path, flags))`, arguments evaluated only when
//! the tracepoint is enabled).
//!
//! A site is an `asm goto`: a 5-byte NOP (`0f 1f 44 00 00`) and a 24-byte entry in the retained
//! `ferrotrace_sites` section (`"awR"`): `i64 site - &field, i64 target - &field, i64 descriptor -
//! &field`, every field PC-relative so that the file needs no dynamic relocation and `ferrotrace list` reads
//! it without running the program. Enabling patches the NOP into `jmp rel32` to `target`, the out-of-line
//! block that calls the tracepoint's `#[cold] #[inline(never)]` function; that function writes one
//! Tracepoint record (TSC, tracepoint id) and the arguments as payload slots into the calling thread's
//! chunk, through the same `HOT` cursor as the XRay trampolines.
//!
//! Descriptors are statics in the `ferrotrace_tp` section: a 16-byte [`Header`] (magic, size, runtime id,
//! enabled flag) then `u16 len + name (crate::name) | u16 len + args (name:type,…) | u16 len + format |
//! u16 len + file | u32 line`, zero padded to 8 bytes.
//!
//! Each site's out-of-line path also carries a SystemTap SDT probe (`.note.stapsdt`, provider = crate
//! name, probe = tracepoint name, with a semaphore): when bpftrace or perf attach, the kernel raises the
//! semaphore and the probe gets the arguments (integers as 64-bit values, strings and byte slices as a
//! pointer to a NUL-terminated copy of at most 256 bytes).
//!
pub mod control;
#[cfg(not(feature = "preload"))]
pub mod usdt;

use core::sync::atomic::{AtomicU16, AtomicU32, Ordering};

use ferrotrace_core::record::{EventKind, Record};

use crate::buffers::hot::Hot;
use crate::lifecycle::runtime::Recorder;

/// The tracepoint recorder's hooks (`recorders::ALL`): at start, the tracepoints the environment asks
/// for (`FERROTRACE_TRACE`, `record --trace`) are enabled.
pub const RECORDER: Recorder = Recorder {
    start: |program| {
        control::enable_requested(program);
        true
    },
    ..Recorder::NONE
};

pub use ferrotrace_core::tracepoint::{
    DESCRIPTOR_HEADER_LEN as HEADER_LEN, DESCRIPTOR_MAGIC as MAGIC,
};

/// The fixed part of a tracepoint descriptor.
#[derive(Debug)]
#[repr(C)]
pub struct Header {
    /// [`MAGIC`].
    pub magic: u32,
    /// Size of the whole descriptor in bytes (a multiple of 8).
    pub size: u32,
    /// Tracepoint id in the trace, assigned when the runtime starts (0: none yet).
    pub id: AtomicU32,
    /// 1 while ferrotrace records the tracepoint (its sites are patched to fire then, and also while a
    /// tracer is attached to its SDT probe).
    pub enabled: AtomicU32,
}

/// A tracepoint descriptor: header and encoded strings. Made by [`tracepoint!`](crate::tracepoint!).
#[repr(C, align(8))]
pub struct Descriptor<const N: usize> {
    /// The fixed part.
    pub header: Header,
    /// Name, arguments, format, file and line.
    pub data: [u8; N],
}

impl<const N: usize> Descriptor<N> {
    /// A descriptor around encoded `data` (see [`encode`]).
    pub const fn new(data: [u8; N]) -> Self {
        Descriptor {
            header: Header {
                magic: MAGIC,
                size: core::mem::size_of::<Self>() as u32,
                id: AtomicU32::new(0),
                enabled: AtomicU32::new(0),
            },
            data,
        }
    }
}

// ---- descriptor encoding (const) -------------------------------------------------------------------

const fn crate_len(module_path: &str) -> usize {
    let b = module_path.as_bytes();
    let mut i = 0;
    while i + 1 < b.len() {
        if b[i] == b':' && b[i + 1] == b':' {
            return i;
        }
        i += 1;
    }
    b.len()
}

const fn args_len(args: &[(&str, &str)]) -> usize {
    let mut n = 0;
    let mut i = 0;
    while i < args.len() {
        if i > 0 {
            n += 1;
        }
        n += args[i].0.len() + 1 + args[i].1.len();
        i += 1;
    }
    n
}

/// Length of the encoded descriptor data for these strings, padded to 8 bytes.
pub const fn encoded_len(
    module_path: &str,
    name: &str,
    args: &[(&str, &str)],
    format: &str,
    file: &str,
) -> usize {
    let n = 2
        + crate_len(module_path)
        + 2
        + name.len()
        + 2
        + args_len(args)
        + 2
        + format.len()
        + 2
        + file.len()
        + 4;
    (n + 7) & !7
}

struct W<const N: usize> {
    buf: [u8; N],
    pos: usize,
}

impl<const N: usize> W<N> {
    const fn byte(mut self, b: u8) -> Self {
        self.buf[self.pos] = b;
        self.pos += 1;
        self
    }
    const fn bytes(mut self, s: &[u8]) -> Self {
        let mut i = 0;
        while i < s.len() {
            self = self.byte(s[i]);
            i += 1;
        }
        self
    }
    const fn u16(self, v: usize) -> Self {
        assert!(v <= u16::MAX as usize, "tracepoint string too long");
        self.byte(v as u8).byte((v >> 8) as u8)
    }
}

/// Encodes a descriptor's data: `u16 len + crate::name`, `u16 len + args`, `u16 len + format`,
/// `u16 len + file`, `u32 line`, zero padding. `N` must be [`encoded_len`] of the same strings.
pub const fn encode<const N: usize>(
    module_path: &str,
    name: &str,
    args: &[(&str, &str)],
    format: &str,
    file: &str,
    line: u32,
) -> [u8; N] {
    let mut w = W {
        buf: [0u8; N],
        pos: 0,
    };
    let cl = crate_len(module_path);
    let mp = module_path.as_bytes();
    w = w.u16(cl + 2 + name.len());
    let mut i = 0;
    while i < cl {
        w = w.byte(mp[i]);
        i += 1;
    }
    w = w.bytes(b"::").bytes(name.as_bytes());
    w = w.u16(args_len(args));
    let mut i = 0;
    while i < args.len() {
        if i > 0 {
            w = w.byte(b',');
        }
        w = w
            .bytes(args[i].0.as_bytes())
            .byte(b':')
            .bytes(args[i].1.as_bytes());
        i += 1;
    }
    w = w.u16(format.len()).bytes(format.as_bytes());
    w = w.u16(file.len()).bytes(file.as_bytes());
    w = w.bytes(&line.to_le_bytes());
    w.buf
}

// ---- the enabled path ------------------------------------------------------------------------------

/// Writes one Tracepoint record and `len` payload bytes (written by `write`) into the calling thread's
/// chunk: directly when there is room for the record and its slots, else through
/// the thread's slow path (`thread::record_slow`). Never allocates or locks.
#[inline(always)]
pub fn emit(header: &Header, len: usize, write: impl FnOnce(*mut u8)) {
    let slots = len.div_ceil(16);
    if slots > 255 {
        return;
    }
    let tsc = crate::buffers::clock::rdtsc();
    let mut rec = Record::with_payload(
        tsc,
        EventKind::Tracepoint,
        header.id.load(Ordering::Relaxed),
        slots as u8,
    );
    rec.word |= crate::arch::thread::cpu_bits();
    // The payload's last slot is zeroed first, so that the bytes `write` leaves unwritten are defined.
    let fill = move |payload: *mut Record| {
        // SAFETY: there is room for `slots` records at `payload` (in the chunk, or the slow path's
        // buffer).
        unsafe {
            if slots > 0 {
                payload.add(slots - 1).write(Record::default());
            }
        }
        write(payload as *mut u8);
    };
    if let Err(fill) = Hot::current().append(rec, slots, fill) {
        slow(rec, slots, fill);
    }
}

/// Out of line: the enabled path's common case is the direct write above.
#[cold]
#[inline(never)]
fn slow(rec: Record, slots: usize, fill: impl FnOnce(*mut Record)) {
    let mut buf = core::mem::MaybeUninit::<[Record; 255]>::uninit();
    let p = buf.as_mut_ptr() as *mut Record;
    // SAFETY: `slots` <= 255 records of the buffer are zeroed, then `fill` writes at most `slots`
    // records' bytes of them (the payload length it was sized for).
    let payload = unsafe {
        core::ptr::write_bytes(p, 0, slots);
        fill(p);
        core::slice::from_raw_parts(p, slots)
    };
    crate::buffers::thread::record_slow(rec, payload);
}

// ---- finding descriptors and sites -----------------------------------------------------------------

/// A tracepoint found in this process.
#[derive(Clone, Copy, Debug)]
pub struct Info {
    /// Its descriptor header (id and enabled flag live there).
    pub header: &'static Header,
    /// `crate::name`.
    pub name: &'static str,
    /// `name:type,…`.
    pub args: &'static str,
    /// Display format, empty if none.
    pub format: &'static str,
    /// Source file of the declaration.
    pub file: &'static str,
    /// Line of the declaration.
    pub line: u32,
}

/// Parses the data after a descriptor header: `(name, args, format, file, line)`.
pub fn parse_data(d: &[u8]) -> Option<(&str, &str, &str, &str, u32)> {
    let ([name, args, format, file], line) = ferrotrace_core::tracepoint::descriptor_fields(d)?;
    let s = |b| core::str::from_utf8(b).ok();
    Some((s(name)?, s(args)?, s(format)?, s(file)?, line))
}

/// A site in the `ferrotrace_sites` table, with absolute addresses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site {
    /// Address of the 5-byte NOP.
    pub addr: usize,
    /// Address of the out-of-line block the enabled site jumps to.
    pub target: usize,
    /// Address of the tracepoint's descriptor.
    pub desc: usize,
}

// Outside `crate::state`: the linker's bounds of the tracepoint sections.
extern "C" {
    static __start_ferrotrace_tp: u8;
    static __stop_ferrotrace_tp: u8;
    static __start_ferrotrace_sites: u8;
    static __stop_ferrotrace_sites: u8;
    static __start_ferrotrace_usdt: u8;
    static __stop_ferrotrace_usdt: u8;
}

// Outside `crate::state`: an entry of a section, not state.
// Keeps the three sections (and so their start/stop symbols) present in every program that links this crate,
// even one without tracepoints. Walkers skip these zero entries.
#[used]
#[link_section = "ferrotrace_tp"]
static SENTINEL: Descriptor<0> = Descriptor {
    header: Header {
        magic: 0,
        size: 0,
        id: AtomicU32::new(0),
        enabled: AtomicU32::new(0),
    },
    data: [],
};

core::arch::global_asm!(
    ".pushsection ferrotrace_sites,\"awR\",@progbits",
    ".balign 8",
    ".quad 0, 0, 0",
    ".popsection",
    ".pushsection ferrotrace_usdt,\"awR\",@progbits",
    ".balign 8",
    ".quad 0, 0",
    ".popsection",
);

/// Every tracepoint linked into this program (the executable's own `ferrotrace_tp` section).
pub fn all() -> Vec<Info> {
    let _ = &SENTINEL;
    // SAFETY: linker-defined bounds of our own section.
    let (start, stop) = unsafe {
        (
            &__start_ferrotrace_tp as *const u8 as usize,
            &__stop_ferrotrace_tp as *const u8 as usize,
        )
    };
    let mut out = Vec::new();
    let mut p = start;
    while p + HEADER_LEN <= stop {
        // SAFETY: inside the section; descriptors are 8-aligned.
        let h = unsafe { &*(p as *const Header) };
        if h.magic != MAGIC || (h.size as usize) < HEADER_LEN || p + h.size as usize > stop {
            p += 8;
            continue;
        }
        // SAFETY: the descriptor's bytes lie inside the section.
        let data = unsafe {
            core::slice::from_raw_parts((p + HEADER_LEN) as *const u8, h.size as usize - HEADER_LEN)
        };
        if let Some((name, args, format, file, line)) = parse_data(data) {
            out.push(Info {
                header: h,
                name,
                args,
                format,
                file,
                line,
            });
        }
        p += (h.size as usize + 7) & !7;
    }
    out
}

/// Every site in this program.
pub fn sites() -> Vec<Site> {
    // SAFETY: linker-defined bounds of our own section, whose entries are three PC-relative fields.
    let entries = unsafe {
        pc_relative_table::<3>(
            &__start_ferrotrace_sites as *const u8 as usize,
            &__stop_ferrotrace_sites as *const u8 as usize,
        )
    };
    entries
        .map(|[addr, target, desc]| Site { addr, target, desc })
        .collect()
}

/// The SDT probe of a tracepoint, from the `ferrotrace_usdt` table.
#[derive(Clone, Copy, Debug)]
pub struct Probe {
    /// Its semaphore: non-zero while a tracer is attached.
    pub semaphore: &'static Semaphore,
    /// Address of the tracepoint's descriptor.
    pub desc: usize,
}

/// The SDT probe of every tracepoint in this program.
pub fn probes() -> Vec<Probe> {
    // SAFETY: linker-defined bounds of our own section, whose entries are two PC-relative fields.
    let entries = unsafe {
        pc_relative_table::<2>(
            &__start_ferrotrace_usdt as *const u8 as usize,
            &__stop_ferrotrace_usdt as *const u8 as usize,
        )
    };
    entries
        .map(|[sema, desc]| Probe {
            // SAFETY: the entry points at a tracepoint's `SEMA` static (see `tracepoint!`).
            semaphore: unsafe { &*(sema as *const Semaphore) },
            desc,
        })
        .collect()
}

/// The entries of a table of `N` PC-relative `i64` fields per entry (each field holds `target - &field`)
/// between `start` and `stop`, as absolute addresses; entries with a zero field (the sentinels) are
/// skipped.
///
/// # Safety
/// `start..stop` is such a table, 8-aligned and mapped.
unsafe fn pc_relative_table<const N: usize>(
    start: usize,
    stop: usize,
) -> impl Iterator<Item = [usize; N]> {
    (start..stop).step_by(8 * N).filter_map(move |p| {
        if p + 8 * N > stop {
            return None;
        }
        let mut fields = [0usize; N];
        for (i, f) in fields.iter_mut().enumerate() {
            let at = p + 8 * i;
            // SAFETY: inside the table (the caller's contract), 8-aligned.
            let rel = unsafe { (at as *const i64).read() };
            if rel == 0 {
                return None;
            }
            *f = (at as i64).wrapping_add(rel) as usize;
        }
        Some(fields)
    })
}

/// Semaphore type of SDT probes (incremented by the kernel while a tracer is attached).
#[doc(hidden)]
pub type Semaphore = AtomicU16;

/// Declares a static tracepoint.
///
/// ```text
/// tracepoint!([VIS] NAME, ARG: TYPE, … [, "FORMAT"]);
/// ```
///
/// Types: `u8`–`u64`, `usize`, `i8`–`i64`, `isize`, `f32`, `f64`, `bool`, `&str`, `&[u8]` (strings and
/// slices are cut to 256 bytes in the trace), at most 8 arguments. The optional format names arguments
/// in braces (`"conn={conn} bytes={bytes}"`) and is checked at compile time. The tracepoint is called
/// `crate::NAME` in listings and globs; names are unique per crate.
///
/// The declaration defines a function `NAME(ARG…)` that fires the tracepoint (its arguments are evaluated
/// by the caller, as for any call), and a hidden module `NAME` with its descriptor and out-of-line path
/// (plumbing, not an API). To fire without evaluating the arguments while the tracepoint is disabled, use
/// [`trace!`](crate::trace!).
///
/// Disabled, a site is one 5-byte NOP. Enable tracepoints with `ferrotrace record --trace GLOB`,
/// `FERROTRACE_TRACE=GLOB`, or [`crate::tracepoints::enable`]. On targets other than x86_64 Linux the
/// declaration compiles to a function that does nothing.
///
/// ```
/// ferrotrace::tracepoint!(vfs_open, path: &str, flags: u32);
/// ferrotrace::tracepoint!(pub net_recv, conn: u64, bytes: usize, "conn={conn} bytes={bytes}");
///
/// fn open(path: &str) {
///     vfs_open(path, 0o644);
///     ferrotrace::trace!(net_recv(7, path.len()));
/// }
/// open("/etc/hosts");
/// ```
#[macro_export]
macro_rules! tracepoint {
    ($vis:vis $name:ident $(, $arg:ident : $ty:ty)* $(,)?) => {
        $crate::__tracepoint_impl!($vis $name [$($arg : $ty),*] "");
    };
    ($vis:vis $name:ident $(, $arg:ident : $ty:ty)*, $fmt:literal $(,)?) => {
        $crate::__tracepoint_impl!($vis $name [$($arg : $ty),*] $fmt);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __tracepoint_impl {
    ($vis:vis $name:ident [$($arg:ident : $ty:ty),*] $fmt:literal) => {
        #[allow(non_snake_case, dead_code)]
        #[doc(hidden)]
        $vis mod $name {
            #[allow(unused_imports)]
            use super::*;

            const __ARGS: &[(&str, &str)] = &[$((stringify!($arg), <$ty as $crate::__macro_support::Arg>::TYPE)),*];
            const __LEN: usize = $crate::__macro_support::encoded_len(
                module_path!(), stringify!($name), __ARGS, $fmt, file!());

            /// The descriptor.
            #[used]
            #[link_section = "ferrotrace_tp"]
            pub static DESC: $crate::__macro_support::Descriptor<__LEN> = $crate::__macro_support::Descriptor::new(
                $crate::__macro_support::encode::<__LEN>(
                    module_path!(), stringify!($name), __ARGS, $fmt, file!(), line!()));

            /// SDT semaphore: non-zero while bpftrace or perf is attached to this tracepoint's probe.
            #[used]
            #[link_section = ".probes"]
            pub static SEMA: $crate::__macro_support::Semaphore = $crate::__macro_support::Semaphore::new(0);

            /// Records the event (the target of enabled sites). In the tracer's own section, so that the
            /// runtime never traces it as the program's function.
            #[cold]
            #[inline(never)]
            #[link_section = "ferrotrace_text"]
            pub fn __ferrotrace_tp_fire($($arg: $ty),*) {
                if false {
                    let _ = format_args!($fmt);
                }
                // The sites jump here while ferrotrace records the tracepoint, or while a tracer is
                // attached to its SDT probe (it raised the semaphore), or both.
                if SEMA.load(::core::sync::atomic::Ordering::Relaxed) != 0 {
                    $crate::__usdt_probe!($name [$($arg : $ty),*]);
                }
                if DESC.header.enabled.load(::core::sync::atomic::Ordering::Relaxed) != 0 {
                    let len = 0usize $(+ $crate::__macro_support::Arg::encoded_len(&$arg))*;
                    $crate::__macro_support::emit(&DESC.header, len, |p: *mut u8| {
                        $(
                            // SAFETY: emit hands over `len` writable bytes.
                            let p = unsafe { $crate::__macro_support::Arg::encode(&$arg, p) };
                        )*
                        let _ = p;
                    });
                }
            }

            // The semaphore of this tracepoint's SDT probe, for the runtime (`usdt`): a 16-byte entry
            // `i64 semaphore - &field, i64 descriptor - &field` in the retained `ferrotrace_usdt` section.
            ::core::arch::global_asm!(
                ".pushsection ferrotrace_usdt,\"awR\",@progbits",
                ".balign 8",
                ".quad {sema} - .",
                ".quad {desc} - .",
                ".popsection",
                sema = sym SEMA,
                desc = sym DESC,
            );
        }

        #[doc = concat!("Fires the tracepoint `", stringify!($name), "` (a 5-byte NOP while it is disabled).")]
        #[inline(always)]
        #[allow(dead_code, clippy::too_many_arguments)]
        $vis fn $name($($arg: $ty),*) {
            $crate::trace!($name($($arg),*));
        }
    };
}

/// Fires a tracepoint declared with [`tracepoint!`](crate::tracepoint!), evaluating the arguments only
/// when it is enabled.
///
/// While the tracepoint is disabled the site is a single 5-byte NOP: the argument expressions are not
/// evaluated and nothing is moved or spilled.
///
/// ```
/// ferrotrace::tracepoint!(cache_miss, key: u64, size: usize);
///
/// fn expensive() -> usize { 42 }
/// // `expensive()` runs only when cache_miss is enabled.
/// ferrotrace::trace!(cache_miss(17, expensive()));
/// ```
#[macro_export]
macro_rules! trace {
    ($($tp:ident)::+ ( $($arg:expr),* $(,)? )) => {
        #[allow(unused_unsafe)]
        // SAFETY: a NOP and a table entry; the label block is ordinary Rust code.
        unsafe {
            ::core::arch::asm!(
                "2: .byte 0x0f, 0x1f, 0x44, 0x00, 0x00",
                ".pushsection ferrotrace_sites,\"awR\",@progbits",
                ".balign 8",
                ".quad 2b - .",
                ".quad {target} - .",
                ".quad {desc} - .",
                ".popsection",
                desc = sym $($tp)::+::DESC,
                target = label {
                    $($tp)::+::__ferrotrace_tp_fire($($arg),*);
                    // Keeps the call a call (not a tail jump), so the enclosing function's exit follows it.
                    #[allow(unused_unsafe)]
                    // SAFETY: an empty asm statement.
                    unsafe { ::core::arch::asm!("", options(nomem, nostack, preserves_flags)) };
                },
                options(nomem, nostack, preserves_flags),
            );
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __usdt_spec {
    ($arg:ident) => {
        "\n.if .Lferrotrace_sdt_sep\n.ascii \" \"\n.endif\n.set .Lferrotrace_sdt_sep, 1\n.ascii \"{}@{}\""
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __usdt_probe {
    ($name:ident [$($arg:ident : $ty:ty),*]) => {
        // SAFETY: a `nop` and an ELF note describing where its arguments are.
        unsafe {
            ::core::arch::asm!(
                "990: nop",
                ".pushsection .note.stapsdt,\"\",\"note\"",
                ".balign 4",
                ".4byte 992f-991f, 994f-993f, 3",
                "991: .asciz \"stapsdt\"",
                "992: .balign 4",
                "993: .8byte 990b",
                ".8byte _.stapsdt.base",
                ".8byte {sema}",
                concat!(".asciz \"", env!("CARGO_CRATE_NAME"), "\""),
                concat!(".asciz \"", stringify!($name), "\""),
                concat!(".set .Lferrotrace_sdt_sep, 0" $(, $crate::__usdt_spec!($arg))*),
                ".byte 0",
                "994: .balign 4",
                ".popsection",
                ".ifndef _.stapsdt.base",
                ".pushsection .stapsdt.base,\"aG\",\"progbits\",.stapsdt.base,comdat",
                ".weak _.stapsdt.base",
                ".hidden _.stapsdt.base",
                "_.stapsdt.base: .space 1",
                ".size _.stapsdt.base, 1",
                ".popsection",
                ".endif",
                $(
                    const <$ty as $crate::__macro_support::Arg>::USDT_SIZE,
                    in(reg) $crate::__macro_support::Arg::usdt_word(&$arg, &mut $crate::__macro_support::usdt_buf()),
                )*
                sema = sym SEMA,
                options(att_syntax, nostack, readonly, preserves_flags),
            );
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    crate::tracepoint!(pub parsed, bytes: usize, ok: bool, "parsed {bytes} bytes, ok={ok}");

    #[test]
    fn a_declaration_has_a_descriptor_and_a_site() {
        parsed(512, true); // a NOP until enabled
        let tp = all()
            .into_iter()
            .find(|t| t.name.ends_with("::parsed"))
            .unwrap();
        assert_eq!(tp.args, "bytes:usize,ok:bool");
        assert_eq!(tp.format, "parsed {bytes} bytes, ok={ok}");
        let desc = tp.header as *const _ as usize;
        assert!(sites().iter().any(|s| s.desc == desc));
    }
}
