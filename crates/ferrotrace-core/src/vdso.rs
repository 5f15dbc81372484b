//! The vDSO, the kernel's own small library in every process (feature `std`): its mapping's name, and
//! this process's image of it. The kernel maps the same image into every 64-bit process, so on the
//! machine that recorded a trace this process's image stands for the traced program's: the profiler
//! records its build-id and unwinds through its `.eh_frame`, the analysis names its functions
//! (`__vdso_clock_gettime`) when the build-ids agree.

/// The name the kernel gives the vDSO's mapping (`/proc/PID/maps`, perf's MMAP2 records).
pub const PATH: &str = "[vdso]";

/// This process's vDSO image, read from `/proc/self/mem` at its `[vdso]` mapping.
pub fn own_image() -> Option<std::vec::Vec<u8>> {
    use std::io::{Read, Seek, SeekFrom};
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    let (a, b) = maps
        .lines()
        .find(|l| l.ends_with(PATH))?
        .split(' ')
        .next()?
        .split_once('-')?;
    let (a, b) = (
        u64::from_str_radix(a, 16).ok()?,
        u64::from_str_radix(b, 16).ok()?,
    );
    let mut mem = std::fs::File::open("/proc/self/mem").ok()?;
    mem.seek(SeekFrom::Start(a)).ok()?;
    let mut image = std::vec![0; usize::try_from(b.checked_sub(a)?).ok()?];
    mem.read_exact(&mut image).ok()?;
    Some(image)
}

#[cfg(test)]
mod tests {
    /// The image is an ELF object (x86_64 Linux always maps one).
    #[test]
    fn reads_its_own_vdso() {
        let image = super::own_image().expect("a [vdso] mapping");
        assert_eq!(&image[..4], b"\x7fELF");
    }
}
