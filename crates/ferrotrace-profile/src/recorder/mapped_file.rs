//! The file behind an executable mapping of a followed process, named by what it is — its device and
//! inode — rather than by its path, for the eBPF backend's unwind tables: a library reached by two
//! paths (hard links, a bind mount, a container's view of the host's file) gets one table, two files
//! that once had the same path (a library replaced on disk after it was mapped) get one each, and a
//! table is built from the bytes actually mapped.
//!
//! The file is opened through `/proc/PID/map_files/START-END`, the kernel's handle on the mapped file
//! itself (it still reads the old file after a replacement, even a deleted one); when that is gone
//! (the process exited) or not allowed, through the path, as it is now — and then only if it is still
//! the file the kernel said was mapped (its device and inode), never another file put at that path.
//!
//! What it is not for: the modules of the trace and their symbols, which stay per path.

use std::fs::File;
use std::io::Read;
use std::os::unix::fs::MetadataExt;

use crate::modules::FileId;

/// What a table is cached under.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum FileKey {
    /// A file: its device and inode.
    File(FileId),
    /// A mapping without a file (the vDSO): its name.
    Name(String),
}

/// An opened mapped file and its key.
pub(crate) struct MappedFile {
    pub key: FileKey,
    /// Its size in bytes.
    pub size: u64,
    file: File,
}

impl MappedFile {
    /// The file mapped at `[start, end)` in process `pid` from `path` (a path as the kernel reported
    /// it, `mapped` the file it said it was), or why not: neither the mapping's handle nor the path
    /// opens, or the path now holds another file than `mapped`.
    pub fn open(
        pid: u32,
        start: u64,
        end: u64,
        path: &str,
        mapped: Option<FileId>,
    ) -> Result<MappedFile, &'static str> {
        let (file, by_path) = match File::open(format!("/proc/{pid}/map_files/{start:x}-{end:x}")) {
            Ok(f) => (f, false),
            Err(_) => (File::open(path).map_err(|_| "unreadable")?, true),
        };
        let meta = file.metadata().map_err(|_| "unreadable")?;
        let opened = FileId {
            dev: meta.dev(),
            ino: meta.ino(),
        };
        if by_path && mapped.is_some_and(|m| m != opened) {
            return Err("replaced on disk since it was mapped");
        }
        Ok(MappedFile {
            key: FileKey::File(opened),
            size: meta.len(),
            file,
        })
    }

    /// The file's bytes.
    pub fn read(mut self) -> Option<Vec<u8>> {
        let mut bytes = Vec::new();
        self.file.read_to_end(&mut bytes).ok()?;
        Some(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Maps `path` read-only and executable into this process (map_files lists every file mapping,
    /// `proc_maps` the executable ones); returns its range.
    fn map(path: &std::path::Path) -> (u64, u64) {
        let f = File::open(path).unwrap();
        let len = f.metadata().unwrap().len() as usize;
        // SAFETY: a fresh private read-only mapping of an open file, never run nor unmapped (the test
        // ends).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_EXEC,
                libc::MAP_PRIVATE,
                std::os::fd::AsRawFd::as_raw_fd(&f),
                0,
            )
        };
        assert_ne!(p, libc::MAP_FAILED);
        let start = p as u64;
        (start, start + (len as u64).next_multiple_of(4096))
    }

    #[test]
    fn one_key_per_file_whatever_its_path_and_the_old_file_after_a_replacement() {
        let dir = std::env::temp_dir().join(format!("ft-mapped-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (a, link, copy) = (dir.join("a.so"), dir.join("b.so"), dir.join("c.so"));
        std::fs::write(&a, vec![1u8; 5000]).unwrap();
        std::fs::hard_link(&a, &link).unwrap();
        std::fs::copy(&a, &copy).unwrap();
        let pid = std::process::id();
        let key = |p: &std::path::Path| {
            let (s, e) = map(p);
            MappedFile::open(pid, s, e, p.to_str().unwrap(), None).unwrap()
        };
        let (ka, kb, kc) = (key(&a), key(&link), key(&copy));
        assert_eq!(ka.key, kb.key, "a hard link is the same file");
        assert_ne!(ka.key, kc.key, "a copy is another file");

        // `a` replaced on disk (a new file renamed over it, as package managers do) after it was
        // mapped: the mapping still names, and reads, the old file.
        let (s, e) = map(&a);
        let new = dir.join("a.so.new");
        std::fs::write(&new, vec![2u8; 5000]).unwrap();
        std::fs::rename(&new, &a).unwrap();
        let old = MappedFile::open(pid, s, e, a.to_str().unwrap(), None).unwrap();
        assert_eq!(old.key, ka.key);
        assert_eq!(old.read().unwrap(), vec![1u8; 5000]);
        // Through the path (no such mapping), the new file; refused when the kernel said the
        // mapping was of the old file (as /proc/PID/maps still says), taken when of the new one.
        let by_path = MappedFile::open(pid, 1, 2, a.to_str().unwrap(), None).unwrap();
        assert_ne!(by_path.key, ka.key);
        let line = crate::modules::proc_maps(pid)
            .into_iter()
            .find(|m| m.0 == s)
            .expect("the mapping of the old file in /proc/self/maps");
        let old_file = line.4.expect("its device and inode");
        assert_eq!(
            FileKey::File(old_file),
            ka.key,
            "the maps line names the old file"
        );
        assert_eq!(
            MappedFile::open(pid, 1, 2, a.to_str().unwrap(), Some(old_file)).err(),
            Some("replaced on disk since it was mapped")
        );
        let FileKey::File(new_file) = by_path.key else {
            panic!("{:?}", by_path.key)
        };
        assert!(MappedFile::open(pid, 1, 2, a.to_str().unwrap(), Some(new_file)).is_ok());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
