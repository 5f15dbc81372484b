//! The memfd through which the traced program's runtime shares its chunk pool and signal table with
//! `record` (`ferrotrace_core::shared`): created and passed here, mapped by the signal relay while the
//! program runs and by the salvage after it died.

use std::os::fd::{FromRawFd, OwnedFd};

use ferrotrace_core::shared::{Area, AreaError};

use crate::LaunchError;

/// Creates the memfd through which the program's runtime shares its chunk pool with us
/// (`ferrotrace_core::shared`) and keeps it open across the program's `exec` (the runtime closes it
/// on the next one); the caller passes its number ([`ferrotrace_core::env::SHARED_FD`]).
pub(crate) fn share(cmd: &mut std::process::Command) -> Result<OwnedFd, LaunchError> {
    inherited_memfd(cmd, ferrotrace_core::shared::MEMFD_NAME)
}

/// A memfd named `name` that the program started by `cmd` inherits across its `exec`.
pub(crate) fn inherited_memfd(
    cmd: &mut std::process::Command,
    name: &str,
) -> Result<OwnedFd, LaunchError> {
    use std::os::unix::process::CommandExt;
    let name = std::ffi::CString::new(name).unwrap_or_default();
    // SAFETY: memfd_create with a valid name; the result is checked and owned below.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(LaunchError::setup("memfd_create"));
    }
    // SAFETY: between fork and exec, only fcntl (async-signal-safe) on a descriptor we own.
    unsafe {
        cmd.pre_exec(move || {
            libc::fcntl(fd, libc::F_SETFD, 0);
            Ok(())
        })
    };
    // SAFETY: a fresh descriptor that we own.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// The whole memfd, mapped read-only.
pub(crate) struct Mapped {
    ptr: *mut libc::c_void,
    len: usize,
}

impl Mapped {
    /// Maps all of `fd` (None when it is empty or cannot be mapped).
    pub(crate) fn new(fd: &OwnedFd) -> Option<Mapped> {
        use std::os::fd::AsRawFd;
        // SAFETY: fstat into a zeroed struct, then a read-only shared mapping of the file's size;
        // both checked.
        unsafe {
            let mut st: libc::stat = core::mem::zeroed();
            if libc::fstat(fd.as_raw_fd(), &mut st) != 0 || st.st_size <= 0 {
                return None;
            }
            let len = st.st_size as usize;
            let ptr = libc::mmap(
                core::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                0,
            );
            (ptr != libc::MAP_FAILED).then_some(Mapped { ptr, len })
        }
    }

    /// The shared area in the mapping, its header checked (no `&[u8]` is ever made of it: the
    /// program may still be writing it).
    pub(crate) fn area(&self) -> Result<Area<'_>, AreaError> {
        // SAFETY: the mapping is `len` readable bytes and lives as long as `self`, which the area
        // borrows. The program's runtime writes the header, signal table and descriptors only through
        // their atomics and otherwise only the chunks' records (ferrotrace::buffers::pool), which is
        // Area::new's contract.
        unsafe { Area::new(self.ptr.cast_const().cast(), self.len) }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: unmapping our own mapping.
        unsafe { libc::munmap(self.ptr, self.len) };
    }
}
