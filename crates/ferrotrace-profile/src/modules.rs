//! Loaded objects: per-process memory maps, ELF facts needed to turn runtime addresses into stated
//! addresses, and the unwind sections handed to framehop.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use framehop::x86_64::{CacheX86_64, UnwinderX86_64};
use framehop::{ExplicitModuleSectionInfo, Module, Unwinder};
use object::{Object, ObjectSection};

/// Module id of the kernel.
pub(crate) const KERNEL_MODULE: u32 = 1;

/// What we know about one file.
pub(crate) struct ModuleFile {
    pub path: String,
    pub build_id: Vec<u8>,
    loads: Vec<Load>,
    /// Unwind data for framehop, parsed once.
    unwind: Option<ExplicitModuleSectionInfo<Arc<[u8]>>>,
    unwind_tried: bool,
}

/// The name the kernel gives the vDSO's mapping (MMAP2 records, `/proc/PID/maps`).
pub(crate) const VDSO: &str = ferrotrace_core::vdso::PATH;

/// The bytes of the file of module `path` (the vDSO's from memory).
pub(crate) fn module_bytes(path: &str) -> Option<Vec<u8>> {
    if path == VDSO {
        ferrotrace_core::vdso::own_image()
    } else if !path.starts_with('/') {
        // Pseudo-modules (`[truncated]`): no file, whatever the current directory holds.
        None
    } else {
        std::fs::read(path).ok()
    }
}

/// A PT_LOAD segment: (vaddr, file offset, file size, executable).
type Load = (u64, u64, u64, bool);

/// A 64-bit ELF's build id (empty when it has none) and PT_LOAD segments, from `data` read only
/// where the headers and notes are.
fn elf_headers<'a, R: object::ReadRef<'a>>(data: R) -> Option<(Vec<u8>, Vec<Load>)> {
    use object::read::elf::{FileHeader, ProgramHeader};
    let header = object::elf::FileHeader64::<object::Endianness>::parse(data).ok()?;
    let endian = header.endian().ok()?;
    let (mut build_id, mut loads) = (Vec::new(), Vec::new());
    for ph in header.program_headers(endian, data).ok()? {
        match ph.p_type(endian) {
            object::elf::PT_LOAD => loads.push((
                ph.p_vaddr(endian),
                ph.p_offset(endian),
                ph.p_filesz(endian),
                ph.p_flags(endian) & object::elf::PF_X != 0,
            )),
            object::elf::PT_NOTE => {
                let Ok(Some(mut notes)) = ph.notes(endian, data) else {
                    continue;
                };
                while let Ok(Some(note)) = notes.next() {
                    if note.name() == object::elf::ELF_NOTE_GNU
                        && note.n_type(endian) == object::elf::NT_GNU_BUILD_ID
                    {
                        build_id = note.desc().to_vec();
                    }
                }
            }
            _ => {}
        }
    }
    Some((build_id, loads))
}

/// True for a mapping the recorder keeps: a file, or the vDSO.
pub(crate) fn is_code_mapping(name: &[u8]) -> bool {
    name.starts_with(b"/") || name == VDSO.as_bytes()
}

impl ModuleFile {
    /// The module's build id and PT_LOAD segments, read from its ELF and program headers and its
    /// notes alone: a new mapping is handled on the sampling loop's thread, and reading a whole
    /// file there (123 MB for libLLVM) stopped the loop for most of a second.
    fn open(path: &str) -> ModuleFile {
        let mut m = ModuleFile {
            path: path.to_string(),
            build_id: Vec::new(),
            loads: Vec::new(),
            unwind: None,
            unwind_tried: false,
        };
        let headers = if path == VDSO {
            module_bytes(path).and_then(|image| elf_headers(&*image))
        } else if path.starts_with('/') {
            std::fs::File::open(path)
                .ok()
                .and_then(|f| elf_headers(&object::ReadCache::new(f)))
        } else {
            None
        };
        if let Some((build_id, loads)) = headers {
            (m.build_id, m.loads) = (build_id, loads);
        }
        m
    }

    /// The stated address of the first byte of a mapping of `len` bytes at file offset `pgoff`, i.e. the
    /// mapping's start minus its load bias. The mapping is page-aligned, so `pgoff` may lie before the
    /// segment's own offset (rust-lld lays segments out with vaddr != offset): use the segment, preferring
    /// an executable one, whose file range overlaps the mapping.
    pub fn mapping_svma(&self, pgoff: u64, len: u64, exec: bool) -> Option<u64> {
        let overlaps =
            |(_, o, s, _): &&(u64, u64, u64, bool)| pgoff < o + s && *o < pgoff.saturating_add(len);
        let seg = self
            .loads
            .iter()
            .filter(overlaps)
            .find(|l| l.3 == exec)
            .or_else(|| self.loads.iter().find(overlaps))?;
        Some(seg.0.wrapping_add(pgoff).wrapping_sub(seg.1))
    }

    fn unwind_info(&mut self) -> Option<ExplicitModuleSectionInfo<Arc<[u8]>>> {
        if !self.unwind_tried {
            self.unwind_tried = true;
            self.unwind = load_unwind_info(&self.path);
        }
        self.unwind.clone()
    }
}

fn load_unwind_info(path: &str) -> Option<ExplicitModuleSectionInfo<Arc<[u8]>>> {
    let data = module_bytes(path)?;
    let f = object::File::parse(&*data).ok()?;
    let sect = |name: &str| -> (Option<std::ops::Range<u64>>, Option<Arc<[u8]>>) {
        match f.section_by_name(name) {
            Some(s) => {
                let r = s.address()..s.address() + s.size();
                let d = s.data().ok().map(Arc::<[u8]>::from);
                (Some(r), d)
            }
            None => (None, None),
        }
    };
    let (text_svma, text) = sect(".text");
    let (eh_frame_svma, eh_frame) = sect(".eh_frame");
    let (eh_frame_hdr_svma, eh_frame_hdr) = sect(".eh_frame_hdr");
    let (got_svma, _) = sect(".got");
    let (_, debug_frame) = sect(".debug_frame");
    Some(ExplicitModuleSectionInfo {
        base_svma: 0,
        text_svma,
        text,
        got_svma,
        eh_frame_svma,
        eh_frame,
        eh_frame_hdr_svma,
        eh_frame_hdr,
        debug_frame,
        ..Default::default()
    })
}

/// All files seen in a session; ids start at 2 (0 = unknown, 1 = kernel).
pub(crate) struct ModuleTable {
    pub files: Vec<ModuleFile>,
    by_path: HashMap<String, u32>,
}

impl ModuleTable {
    pub fn new() -> ModuleTable {
        let kernel = ModuleFile {
            path: "[kernel.kallsyms]".into(),
            build_id: Vec::new(),
            loads: Vec::new(),
            unwind: None,
            unwind_tried: true,
        };
        ModuleTable {
            files: vec![kernel],
            by_path: HashMap::new(),
        }
    }

    pub fn id_for(&mut self, path: &str) -> u32 {
        if let Some(&id) = self.by_path.get(path) {
            return id;
        }
        self.files.push(ModuleFile::open(path));
        let id = self.files.len() as u32; // ids are index + 1
        self.by_path.insert(path.to_string(), id);
        id
    }

    pub fn get(&self, id: u32) -> Option<&ModuleFile> {
        self.files.get((id as usize).checked_sub(1)?)
    }

    fn get_mut(&mut self, id: u32) -> Option<&mut ModuleFile> {
        self.files.get_mut((id as usize).checked_sub(1)?)
    }
}

/// The file behind a mapping as the kernel named it when it was mapped (MMAP2 records,
/// `/proc/PID/maps`): its device, encoded as `st_dev` is, and its inode.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct FileId {
    pub dev: u64,
    pub ino: u64,
}

impl FileId {
    /// The file of device `major:minor` and inode `ino`; `None` for inode 0 (no file: the vDSO,
    /// or a record that does not say).
    pub fn new(major: u32, minor: u32, ino: u64) -> Option<FileId> {
        (ino != 0).then(|| FileId {
            dev: libc::makedev(major, minor),
            ino,
        })
    }
}

/// One executable mapping of a process.
#[derive(Clone, Debug)]
pub(crate) struct Mapping {
    pub start: u64,
    pub end: u64,
    /// Runtime address minus stated address.
    pub bias: u64,
    pub module: u32,
    /// The mapped file, when the kernel said which (the eBPF backend's tables are per file).
    #[cfg_attr(not(feature = "bpf"), allow(dead_code))]
    pub file: Option<FileId>,
}

/// The address space of one process image (reset on exec, copied on fork).
#[derive(Clone)]
pub(crate) struct Space {
    maps: Vec<Mapping>,
    unwinder: Option<UnwinderX86_64<Arc<[u8]>>>,
}

impl Space {
    pub fn new(dwarf: bool) -> Space {
        Space {
            maps: Vec::new(),
            unwinder: dwarf.then(UnwinderX86_64::new),
        }
    }

    /// Adds an executable file mapping.
    pub fn add_mapping(
        &mut self,
        modules: &mut ModuleTable,
        start: u64,
        len: u64,
        pgoff: u64,
        path: &str,
        file: Option<FileId>,
    ) {
        let module = modules.id_for(path);
        let end = start.saturating_add(len);
        // A new mapping replaces what it overlaps.
        self.maps.retain(|m| m.end <= start || m.start >= end);
        let svma_start = modules
            .get(module)
            .and_then(|m| m.mapping_svma(pgoff, len, true))
            .unwrap_or(pgoff);
        let bias = start.wrapping_sub(svma_start);
        if let Some(unw) = self.unwinder.as_mut() {
            if let Some(info) = modules.get_mut(module).and_then(|m| m.unwind_info()) {
                unw.remove_module(start);
                unw.add_module(Module::new(path.to_string(), start..end, bias, info));
            }
        }
        let pos = self.maps.partition_point(|m| m.start < start);
        self.maps.insert(
            pos,
            Mapping {
                start,
                end,
                bias,
                module,
                file,
            },
        );
    }

    /// The executable mappings, by start address (what the eBPF backend hands the kernel).
    #[cfg(feature = "bpf")]
    pub fn mappings(&self) -> &[Mapping] {
        &self.maps
    }

    /// The module and stated address of runtime address `addr`.
    pub fn resolve(&self, addr: u64) -> Option<(u32, u64)> {
        let i = self.maps.partition_point(|m| m.start <= addr);
        let m = self.maps.get(i.checked_sub(1)?)?;
        if addr >= m.end {
            return None;
        }
        Some((m.module, addr.wrapping_sub(m.bias)))
    }

    /// Unwinds a copied user stack; pushes lookup addresses (return addresses minus one) leaf first.
    /// Returns false when unwinding stopped with an error.
    pub fn unwind(
        &self,
        cache: &mut CacheX86_64,
        regs: (u64, u64, u64),
        stack: &[u8],
        out: &mut Vec<u64>,
    ) -> bool {
        let Some(unw) = &self.unwinder else {
            return false;
        };
        let (ip, sp, bp) = regs;
        let mut read = |addr: u64| -> Result<u64, ()> {
            let off = addr.checked_sub(sp).ok_or(())? as usize;
            let b = stack.get(off..off.checked_add(8).ok_or(())?).ok_or(())?;
            Ok(u64::from_le_bytes(b.try_into().map_err(|_| ())?))
        };
        let mut it = unw.iter_frames(
            ip,
            framehop::x86_64::UnwindRegsX86_64::new(ip, sp, bp),
            cache,
            &mut read,
        );
        let mut n = 0;
        loop {
            match it.next() {
                Ok(Some(f)) => {
                    out.push(f.address_for_lookup());
                    n += 1;
                    if n >= 1024 {
                        return true;
                    }
                }
                Ok(None) => return true,
                Err(_) => return false,
            }
        }
    }
}

/// Reads the executable file mappings of a running process from `/proc/PID/maps`: start, length,
/// file offset, path and file.
pub(crate) fn proc_maps(pid: u32) -> Vec<(u64, u64, u64, String, Option<FileId>)> {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    let mut v = Vec::new();
    for line in text.lines() {
        let mut it = line.split_whitespace();
        let (Some(range), Some(perms), Some(off), Some(dev), Some(ino)) =
            (it.next(), it.next(), it.next(), it.next(), it.next())
        else {
            continue;
        };
        let path: Vec<&str> = it.collect();
        let path = path.join(" ");
        if !perms.contains('x') || !is_code_mapping(path.as_bytes()) {
            continue;
        }
        let Some((a, b)) = range.split_once('-') else {
            continue;
        };
        let (Ok(a), Ok(b), Ok(off)) = (
            u64::from_str_radix(a, 16),
            u64::from_str_radix(b, 16),
            u64::from_str_radix(off, 16),
        ) else {
            continue;
        };
        let file = dev.split_once(':').and_then(|(major, minor)| {
            FileId::new(
                u32::from_str_radix(major, 16).ok()?,
                u32::from_str_radix(minor, 16).ok()?,
                ino.parse().ok()?,
            )
        });
        v.push((a, b - a, off, path, file));
    }
    v
}

/// True/false when the program's `main` does/does not set up a frame pointer; `None` when unknown.
pub(crate) fn main_has_frame_pointer(path: &Path) -> Option<bool> {
    use object::ObjectSymbol;
    let data = std::fs::read(path).ok()?;
    let f = object::File::parse(&*data).ok()?;
    let main = f
        .symbols()
        .find(|s| s.name() == Ok("main") && s.address() != 0)?;
    let off = crate::probes::vaddr_to_file_offset(&f, main.address())? as usize;
    let code = data.get(off..off + 32)?;
    let code = code
        .strip_prefix(&[0xf3, 0x0f, 0x1e, 0xfa][..])
        .unwrap_or(code); // endbr64
    let code = code.get(entry_instrumentation_len(code)..)?;
    // `push rbp`, then `mov rbp, rsp` among the next few instructions (gcc may schedule others
    // between them).
    Some(code.starts_with(&[0x55]) && code[1..16].windows(3).any(|w| w == [0x48, 0x89, 0xe5]))
}

/// The length of the tracing instrumentation a compiler puts before a function's prologue: XRay's
/// entry sled or `-mnop-mcount`'s NOP ([`patched_entry_len`]), or `-pg -mfentry`'s
/// `call __fentry__` (direct, or through the GOT without a PLT); 0 when there is none. The frame
/// pointer is set up after it.
fn entry_instrumentation_len(code: &[u8]) -> usize {
    match code {
        [0xe8, ..] => 5,
        [0xff, 0x15, ..] => 6,
        _ => patched_entry_len(code),
    }
}

/// The length of the bytes at a function's entry (after any `endbr64`) that ferrotrace may patch
/// while the program runs: XRay's entry sled (`jmp +9` over nine bytes) or `-mnop-mcount`'s
/// five-byte NOP; 0 when there are none. A uprobe goes after them: its `int3` on a sled would be
/// overwritten by the patch, or the kernel would step its copy of the unpatched `jmp` and the
/// function's every entry would go unrecorded.
pub(crate) fn patched_entry_len(code: &[u8]) -> usize {
    let endbr = match code {
        [0xf3, 0x0f, 0x1e, 0xfa, ..] => 4,
        _ => 0,
    };
    match &code[endbr..] {
        [0xeb, 0x09, ..] => endbr + 11,
        [0x0f, 0x1f, 0x44, 0x00, 0x00, ..] => endbr + 5,
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use object::ObjectSegment;

    /// The headers read alone give what a whole parse of the file gives: the build id and the
    /// PT_LOAD segments (of this test binary, the C library and the vDSO).
    #[test]
    fn headers_read_alone_match_a_whole_parse() {
        let exe = std::env::current_exe().unwrap();
        let libc = proc_maps(std::process::id())
            .into_iter()
            .map(|m| m.3)
            .find(|p| p.contains("/libc.so"))
            .expect("libc mapped");
        for path in [exe.to_str().unwrap(), &libc, VDSO] {
            let data = module_bytes(path).unwrap();
            let whole = object::File::parse(&*data).unwrap();
            let loads: Vec<Load> = whole
                .segments()
                .map(|s| {
                    let exec = matches!(s.flags(), object::SegmentFlags::Elf { p_flags } if p_flags & object::elf::PF_X != 0);
                    (s.address(), s.file_range().0, s.file_range().1, exec)
                })
                .collect();
            let build_id = whole.build_id().unwrap().unwrap_or_default().to_vec();
            let m = ModuleFile::open(path);
            assert_eq!((&m.build_id, &m.loads), (&build_id, &loads), "{path}");
            assert!(!m.loads.is_empty(), "{path}");
        }
    }
}
