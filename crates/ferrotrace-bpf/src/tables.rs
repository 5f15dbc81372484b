//! Unwind tables for the in-kernel unwinder: `.eh_frame` CFI of one ELF file turned into a sorted list
//! of rows `(pc, how to find the CFA, how to restore rbp)`, the form the BPF program binary-searches.
//!
//! What it is for: the handful of rule forms that compiled x86_64 code uses (CFA = rsp or rbp plus an
//! offset, rbp saved at CFA plus an offset, the return address at CFA − 8, the PLT's expression) and an
//! explicit end of stack (return address undefined: `_start`, `clone`). Every other form (signal
//! trampolines, DWARF expressions beyond the PLT's) becomes an [`CfaKind::Unsupported`] row, so that
//! the unwinder stops there and says so instead of guessing. Addresses between FDEs get a
//! [`CfaKind::None`] row: the unwinder walks those frames by frame pointer.
//!
//! With the rows goes a *page index* ([`PageIndex`]): for each 256-byte page of the module's text, how
//! many rows start before it, so that the BPF program's search for an address runs over the few rows
//! of its page (at most 9 steps) instead of all the module's (up to 23).
//!
//! What it is not for: `.debug_frame` (not loaded at run time, rarely the only CFI), other
//! architectures, or symbolization.

use gimli::{
    BaseAddresses, CfaRule, CieOrFde, EhFrame, NativeEndian, RegisterRule, UnwindContext,
    UnwindSection, X86_64,
};
use object::{Object, ObjectSection};

/// How a row finds the CFA (the caller's stack pointer). Numbers shared with `profile.bpf.c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum CfaKind {
    /// No CFI covers the address: frame pointers.
    None = 0,
    /// CFA = rsp + offset.
    Rsp = 1,
    /// CFA = rbp + offset.
    Rbp = 2,
    /// A PLT entry: CFA = rsp + 8, plus 8 once `ip & 15` reaches `offset` (its push is done).
    Plt = 3,
    /// The return address is undefined: the outermost frame.
    End = 4,
    /// A rule of another form: the stack ends here, marked truncated.
    Unsupported = 5,
}

/// How a row restores rbp. Numbers shared with `profile.bpf.c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum RbpKind {
    /// Unchanged.
    Same = 0,
    /// rbp = *(CFA + offset).
    AtCfa = 1,
    /// Another form: rbp is unknown from here on.
    Unknown = 2,
}

/// One row, laid out as `struct row` of `profile.bpf.c`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(C)]
pub struct Row {
    /// Stated address (as in the file) from which the row holds.
    pub pc: u64,
    /// The CFA's offset from its register (the PLT's threshold for [`CfaKind::Plt`]).
    pub cfa_offset: i32,
    /// Where rbp is saved, relative to the CFA.
    pub rbp_offset: i16,
    /// A [`CfaKind`].
    pub cfa_kind: u8,
    /// An [`RbpKind`].
    pub rbp_kind: u8,
}

impl Row {
    fn same_rule(&self, other: &Row) -> bool {
        (
            self.cfa_offset,
            self.rbp_offset,
            self.cfa_kind,
            self.rbp_kind,
        ) == (
            other.cfa_offset,
            other.rbp_offset,
            other.cfa_kind,
            other.rbp_kind,
        )
    }
}

/// The PLT entries' CFA expression (binutils, lld): `rsp + 8 + ((rip & 15) >= N) << 3`, with N = 11
/// (`.plt`) or 10 (some `.plt.sec` layouts). The byte at [`PLT_THRESHOLD_AT`] is `DW_OP_lit0 + N`.
const PLT_EXPRESSION: [u8; 11] = [
    0x77, 0x08, // DW_OP_breg7 (rsp) 8
    0x80, 0x00, // DW_OP_breg16 (rip) 0
    0x3f, // DW_OP_lit15
    0x1a, // DW_OP_and
    0x3b, // DW_OP_lit11
    0x2a, // DW_OP_ge
    0x33, // DW_OP_lit3
    0x24, // DW_OP_shl
    0x22, // DW_OP_plus
];
const PLT_THRESHOLD_AT: usize = 6;

/// Why a file has no table.
#[derive(Debug)]
pub enum TableError {
    /// Not an ELF file the parser accepts.
    NotElf(String),
    /// No `.eh_frame` section.
    NoEhFrame,
    /// The CFI could not be parsed.
    BadCfi(gimli::Error),
}

impl std::fmt::Display for TableError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TableError::NotElf(e) => write!(f, "not an ELF file: {e}"),
            TableError::NoEhFrame => write!(f, "no .eh_frame section"),
            TableError::BadCfi(e) => write!(f, "malformed .eh_frame: {e}"),
        }
    }
}

impl std::error::Error for TableError {}

/// The rows of the ELF file `data`, sorted by `pc`, consecutive rows with the same rule merged.
pub fn build(data: &[u8]) -> Result<Vec<Row>, TableError> {
    let file = object::File::parse(data).map_err(|e| TableError::NotElf(e.to_string()))?;
    let section = file
        .section_by_name(".eh_frame")
        .ok_or(TableError::NoEhFrame)?;
    let bytes = section
        .data()
        .map_err(|e| TableError::NotElf(e.to_string()))?;
    let mut eh_frame = EhFrame::new(bytes, NativeEndian);
    eh_frame.set_address_size(8);
    let mut bases = BaseAddresses::default().set_eh_frame(section.address());
    if let Some(text) = file.section_by_name(".text") {
        bases = bases.set_text(text.address());
    }
    if let Some(got) = file.section_by_name(".got") {
        bases = bases.set_got(got.address());
    }
    let mut ctx = Box::new(UnwindContext::new());
    // (row, from an FDE end): a gap row sorts before a real row at the same pc and loses to it.
    let mut raw: Vec<(Row, bool)> = Vec::new();
    let mut entries = eh_frame.entries(&bases);
    while let Some(entry) = entries.next().map_err(TableError::BadCfi)? {
        let CieOrFde::Fde(partial) = entry else {
            continue;
        };
        let fde = partial
            .parse(|section, bases, offset| section.cie_from_offset(bases, offset))
            .map_err(TableError::BadCfi)?;
        let mut table = match fde.rows(&eh_frame, &bases, &mut ctx) {
            Ok(t) => t,
            // One bad FDE costs its function's rows, not the file's.
            Err(_) => continue,
        };
        loop {
            match table.next_row() {
                Ok(Some(r)) => raw.push((convert(&eh_frame, r), false)),
                Ok(None) => break,
                Err(_) => break,
            }
        }
        raw.push((
            Row {
                pc: fde.end_address(),
                cfa_offset: 0,
                rbp_offset: 0,
                cfa_kind: CfaKind::None as u8,
                rbp_kind: RbpKind::Same as u8,
            },
            true,
        ));
    }
    raw.sort_by_key(|(r, gap)| (r.pc, !gap));
    let mut rows: Vec<Row> = Vec::with_capacity(raw.len());
    for (r, _) in raw {
        match rows.last_mut() {
            // At one pc the last one wins: a function's row over the end of the previous one.
            Some(last) if last.pc == r.pc => *last = r,
            _ => rows.push(r),
        }
    }
    rows.dedup_by(|next, kept| next.same_rule(kept));
    Ok(rows)
}

fn convert<R: gimli::Reader>(eh_frame: &EhFrame<R>, row: &gimli::UnwindTableRow<R::Offset>) -> Row {
    let mut out = Row {
        pc: row.start_address(),
        cfa_offset: 0,
        rbp_offset: 0,
        cfa_kind: CfaKind::Unsupported as u8,
        rbp_kind: RbpKind::Same as u8,
    };
    match row.register(X86_64::RA) {
        None | Some(RegisterRule::Offset(-8)) => {}
        Some(RegisterRule::Undefined) => {
            out.cfa_kind = CfaKind::End as u8;
            return out;
        }
        Some(_) => return out,
    }
    match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => {
            let Ok(offset) = i32::try_from(*offset) else {
                return out;
            };
            out.cfa_offset = offset;
            out.cfa_kind = match *register {
                X86_64::RSP => CfaKind::Rsp,
                X86_64::RBP => CfaKind::Rbp,
                _ => CfaKind::Unsupported,
            } as u8;
        }
        CfaRule::Expression(e) => {
            let Ok(expr) = e.get(eh_frame) else {
                return out;
            };
            let Ok(bytes) = expr.0.to_slice() else {
                return out;
            };
            let threshold = bytes.get(PLT_THRESHOLD_AT).map(|b| b.wrapping_sub(0x30));
            let mut expected = PLT_EXPRESSION;
            if let Some(t @ (10 | 11)) = threshold {
                expected[PLT_THRESHOLD_AT] = 0x30 + t;
                if bytes[..] == expected[..] {
                    out.cfa_kind = CfaKind::Plt as u8;
                    out.cfa_offset = i32::from(t);
                }
            }
        }
    }
    match row.register(X86_64::RBP) {
        None | Some(RegisterRule::Undefined) | Some(RegisterRule::SameValue) => {}
        Some(RegisterRule::Offset(off)) => match i16::try_from(off) {
            Ok(off) => {
                out.rbp_kind = RbpKind::AtCfa as u8;
                out.rbp_offset = off;
            }
            Err(_) => out.rbp_kind = RbpKind::Unknown as u8,
        },
        Some(_) => out.rbp_kind = RbpKind::Unknown as u8,
    }
    out
}

/// log2 of the page index's granule (`PAGE_SHIFT` of `profile.bpf.c`): 256 bytes.
pub const PAGE_SHIFT: u32 = 8;

/// The page index of a module's rows: `first[p]` is the number of rows that start before page `p`
/// (stated addresses `base + p << PAGE_SHIFT` on), and one entry more holds all the rows. The row in
/// force at an address of page `p` is the last of rows `..first[p + 1]` that starts at or before it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PageIndex {
    /// Stated address of page 0: the first row's, rounded down to a page.
    pub base: u64,
    /// One entry per page, then the row count.
    pub first: Vec<u32>,
}

impl PageIndex {
    /// The index of `rows` (sorted by `pc`, as [`build`] returns them); `None` for no rows, or rows
    /// spread over more than `max_entries - 1` pages.
    pub fn of(rows: &[Row], max_entries: usize) -> Option<PageIndex> {
        let base = rows.first()?.pc >> PAGE_SHIFT << PAGE_SHIFT;
        let pages = ((rows.last()?.pc - base) >> PAGE_SHIFT) + 1;
        if pages >= max_entries as u64 {
            return None;
        }
        let mut first = Vec::with_capacity(pages as usize + 1);
        let mut before = 0usize;
        for p in 0..pages {
            let page_start = base + (p << PAGE_SHIFT);
            while before < rows.len() && rows[before].pc < page_start {
                before += 1;
            }
            first.push(before as u32);
        }
        first.push(rows.len() as u32);
        Some(PageIndex { base, first })
    }

    /// Pages covered (entries less one).
    pub fn pages(&self) -> usize {
        self.first.len() - 1
    }

    /// The index in `rows` of the row in force at stated address `pc`, found as the BPF program does
    /// (`find_row`): the page's rows only. `None` before the first row.
    pub fn find(&self, rows: &[Row], pc: u64) -> Option<usize> {
        let page = (pc.checked_sub(self.base)? >> PAGE_SHIFT).min(self.pages() as u64 - 1) as usize;
        let (lo, hi) = (self.first[page] as usize, self.first[page + 1] as usize);
        let after = lo + rows[lo..hi].partition_point(|r| r.pc <= pc);
        after.checked_sub(1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This test binary's own table: it has rows, they are sorted, and the function that runs this
    /// test is covered by CFA = rsp/rbp + offset rows (rustc emits CFI for every function).
    #[test]
    fn own_executable_has_sorted_rows_covering_this_function() {
        let exe = std::fs::read("/proc/self/exe").unwrap();
        let rows = build(&exe).unwrap();
        assert!(rows.len() > 1000, "{} rows", rows.len());
        assert!(rows.windows(2).all(|w| w[0].pc < w[1].pc));
        let here =
            own_executable_has_sorted_rows_covering_this_function as *const () as usize as u64;
        // The stated address of this function: runtime minus the load bias of the executable.
        let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
        let exe_path = std::fs::read_link("/proc/self/exe").unwrap();
        let base = maps
            .lines()
            .find(|l| l.ends_with(exe_path.to_str().unwrap()))
            .and_then(|l| u64::from_str_radix(l.split('-').next()?, 16).ok())
            .unwrap();
        let file = object::File::parse(&*exe).unwrap();
        let first_vaddr = object::Object::segments(&file)
            .map(|s| object::ObjectSegment::address(&s))
            .min()
            .unwrap();
        let stated = here - base + (first_vaddr & !0xfff);
        let i = rows.partition_point(|r| r.pc <= stated) - 1;
        let kind = rows[i].cfa_kind;
        assert!(
            kind == CfaKind::Rsp as u8 || kind == CfaKind::Rbp as u8,
            "{:?}",
            rows[i]
        );
    }

    /// glibc: its PLT and `_start`-like outermost frames are recognized, and every row is of a known
    /// kind.
    #[test]
    fn libc_rows_know_plt_and_end_of_stack() {
        let libc = [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/usr/lib/x86_64-linux-gnu/libc.so.6",
        ]
        .iter()
        .find_map(|p| std::fs::read(p).ok())
        .expect("glibc");
        let rows = build(&libc).unwrap();
        let count = |k: CfaKind| rows.iter().filter(|r| r.cfa_kind == k as u8).count();
        assert!(count(CfaKind::Rsp) > 1000);
        assert!(
            count(CfaKind::End) >= 1,
            "clone's child frame ends the stack"
        );
        assert!(count(CfaKind::Plt) >= 1, "libc.so.6 has a PLT");
        assert!(rows
            .iter()
            .all(|r| r.cfa_kind <= CfaKind::Unsupported as u8));
    }

    /// The page index finds, for every address around every row of libc, the row a search of all the
    /// rows finds; no page holds more rows than the BPF search's 9 steps can go through.
    #[test]
    fn page_index_finds_what_a_full_search_finds() {
        let libc = std::fs::read("/lib/x86_64-linux-gnu/libc.so.6")
            .or_else(|_| std::fs::read("/usr/lib/x86_64-linux-gnu/libc.so.6"))
            .expect("glibc");
        let rows = build(&libc).unwrap();
        let index = PageIndex::of(&rows, usize::MAX).unwrap();
        let full = |pc: u64| rows.partition_point(|r| r.pc <= pc).checked_sub(1);
        for r in &rows {
            for pc in [
                r.pc.wrapping_sub(1),
                r.pc,
                r.pc + 1,
                r.pc + 255,
                r.pc + 4096,
            ] {
                assert_eq!(index.find(&rows, pc), full(pc), "at {pc:#x}");
            }
        }
        assert_eq!(index.find(&rows, 0), None);
        let widest = index.first.windows(2).map(|w| w[1] - w[0]).max().unwrap();
        assert!(widest <= 1 << PAGE_SHIFT, "{widest} rows in one page");
        assert!(PageIndex::of(&rows, index.first.len() - 1).is_none());
        assert!(PageIndex::of(&[], usize::MAX).is_none());
    }

    #[test]
    fn not_elf_is_an_error() {
        assert!(matches!(build(b"hello"), Err(TableError::NotElf(_))));
    }
}
