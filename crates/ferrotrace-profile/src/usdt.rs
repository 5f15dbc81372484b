//! USDT probes: finds the sites of a SystemTap SDT probe (`usdt:PATH:PROVIDER:NAME`) in an ELF file's
//! `.note.stapsdt` notes, as file offsets a uprobe can be put on.
//!
//! Each note (owner `stapsdt`, type 3) holds the probe's address, the address of `.stapsdt.base` as
//! linked, the address of its semaphore (0 when none), then the NUL-terminated provider, name and
//! argument description. A file whose `.stapsdt.base` moved after linking (prelink) has its addresses
//! shifted by the same amount. The semaphore is a 16-bit counter the program tests before it
//! computes the probe's arguments; the kernel raises it while a uprobe created with its file offset
//! (`PATH:0xOFF(0xSEMOFF)`, kernel >= 4.20) is attached, in every process that maps the file.
//!
//! What it is not for: the probes' arguments (the profiler records stacks, not values), or creating
//! the uprobes (`probes::UprobeSet`).

use std::fs;
use std::path::Path;

use object::{Object, ObjectSection};

use crate::probes::vaddr_to_file_offset;
use crate::ProfileError;

/// The owner name and type of a SystemTap SDT note.
const OWNER: &[u8] = b"stapsdt";
const NOTE_TYPE: u32 = 3;

/// One site of a USDT probe.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UsdtSite {
    /// The file offset of the probe's instruction (a `nop`).
    pub file_offset: u64,
    /// The file offset of its semaphore, when it has one.
    pub semaphore_offset: Option<u64>,
}

/// The sites of probe `provider:name` in the ELF file at `path` (a probe inlined in several places
/// has several sites), or an error that names the probes the file has.
pub fn find_sites(path: &Path, provider: &str, name: &str) -> Result<Vec<UsdtSite>, ProfileError> {
    let data = fs::read(path).map_err(|e| ProfileError::io(path, e))?;
    let file = object::File::parse(&*data).map_err(|e| {
        ProfileError::BadArgument(format!(
            "{}: not an ELF file ({e}); USDT probes are read from an executable or shared library",
            path.display()
        ))
    })?;
    let base_now = file.section_by_name(".stapsdt.base").map(|s| s.address());
    let notes = all_notes(&file);
    let mut sites = Vec::new();
    for n in notes
        .iter()
        .filter(|n| n.provider == provider && n.name == name)
    {
        // Prelink moves .stapsdt.base and the probes with it, but not the notes' addresses.
        let shift = match base_now {
            Some(b) if n.base != 0 => b.wrapping_sub(n.base),
            _ => 0,
        };
        let at = |vaddr: u64| {
            let vaddr = vaddr.wrapping_add(shift);
            vaddr_to_file_offset(&file, vaddr).ok_or_else(|| {
                ProfileError::BadArgument(format!(
                    "{}: USDT probe {provider}:{name} at {vaddr:#x} is in no loadable segment",
                    path.display()
                ))
            })
        };
        sites.push(UsdtSite {
            file_offset: at(n.pc)?,
            semaphore_offset: match n.semaphore {
                0 => None,
                s => Some(at(s)?),
            },
        });
    }
    if sites.is_empty() {
        let mut known: Vec<String> = notes
            .iter()
            .map(|n| format!("{}:{}", n.provider, n.name))
            .collect();
        known.sort();
        known.dedup();
        let listed = if known.is_empty() {
            "it has no .note.stapsdt notes".to_string()
        } else {
            let more = known.len().saturating_sub(8);
            known.truncate(8);
            format!(
                "it has {}{}",
                known.join(", "),
                if more > 0 {
                    format!(" and {more} more")
                } else {
                    String::new()
                }
            )
        };
        return Err(ProfileError::BadArgument(format!(
            "{}: no USDT probe {provider}:{name} ({listed})",
            path.display()
        )));
    }
    Ok(sites)
}

/// A parsed SDT note.
struct Note {
    pc: u64,
    base: u64,
    semaphore: u64,
    provider: String,
    name: String,
}

/// Every well-formed SDT note of `file` (malformed ones are skipped).
fn all_notes(file: &object::File<'_>) -> Vec<Note> {
    let Some(data) = file
        .section_by_name(".note.stapsdt")
        .and_then(|s| s.data().ok())
    else {
        return Vec::new();
    };
    let u32_at = |p: usize| -> Option<u32> {
        Some(u32::from_le_bytes(data.get(p..p + 4)?.try_into().ok()?))
    };
    let u64_at = |p: usize| -> Option<u64> {
        Some(u64::from_le_bytes(data.get(p..p + 8)?.try_into().ok()?))
    };
    let mut notes = Vec::new();
    let mut p = 0usize;
    while let (Some(namesz), Some(descsz), Some(ty)) = (u32_at(p), u32_at(p + 4), u32_at(p + 8)) {
        let (namesz, descsz) = (namesz as usize, descsz as usize);
        let owner = p + 12;
        let desc = owner + namesz.next_multiple_of(4);
        let next = desc + descsz.next_multiple_of(4);
        if next > data.len() || next <= p {
            break;
        }
        let owner_name = &data[owner..owner + namesz];
        if ty == NOTE_TYPE && owner_name.strip_suffix(&[0]) == Some(OWNER) && descsz > 24 {
            let (Some(pc), Some(base), Some(semaphore)) =
                (u64_at(desc), u64_at(desc + 8), u64_at(desc + 16))
            else {
                break;
            };
            let mut strings = data[desc + 24..desc + descsz]
                .split(|&b| b == 0)
                .map(|s| String::from_utf8_lossy(s).into_owned());
            if let (Some(provider), Some(name)) = (strings.next(), strings.next()) {
                notes.push(Note {
                    pc,
                    base,
                    semaphore,
                    provider,
                    name,
                });
            }
        }
        p = next;
    }
    notes
}
