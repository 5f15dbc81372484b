//! One in-memory file for every input: the reader opens a path, and a memfd costs no disk.

use std::io::{Seek, Write};
use std::os::fd::{AsRawFd, FromRawFd};
use std::sync::Mutex;

use ferrotrace_analysis::reader::Trace;

static FILE: Mutex<Option<(std::fs::File, String)>> = Mutex::new(None);

/// `data` as an opened trace, if the reader accepts it.
pub fn open(data: &[u8]) -> Option<Trace> {
    let mut guard = FILE.lock().unwrap();
    let (file, path) = guard.get_or_insert_with(|| {
        extern "C" {
            fn memfd_create(name: *const u8, flags: u32) -> i32;
        }
        // SAFETY: a valid NUL-terminated name; the descriptor is new and owned by the File.
        let file = unsafe {
            let fd = memfd_create(b"fuzz-trace\0".as_ptr(), 0);
            assert!(fd >= 0, "memfd_create");
            std::fs::File::from_raw_fd(fd)
        };
        let path = format!("/proc/self/fd/{}", file.as_raw_fd());
        (file, path)
    });
    file.set_len(0).unwrap();
    file.rewind().unwrap();
    file.write_all(data).unwrap();
    Trace::open(&*path).ok()
}
