//! Finding the program as `execvp` will, and what `record`, `live` and `list` need to know about it
//! before running it.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use ferrotrace_core::mcount::{for_each_call, hook_flavor, Flavor};
use ferrotrace_core::schema::source as instrumentation;
use ferrotrace_core::symbols::names_span_recorder;
use object::{Object, ObjectSection, ObjectSymbol};

use crate::LaunchError;

/// Facts about an executable.
pub struct ProgramFacts {
    /// How its functions are instrumented: bits of `ferrotrace_core::schema::source` (0: not at all;
    /// `TRACING` when it records `tracing` spans through ferrotrace-tracing).
    pub instrumentation: u64,
    /// It links the ferrotrace runtime (marker symbol present).
    pub links_runtime: bool,
    /// It is dynamically linked (LD_PRELOAD can work).
    pub dynamic: bool,
    /// It has a `ferrotrace_tp` section (tracepoint descriptors).
    pub has_tracepoints: bool,
    /// It records allocations through `ferrotrace::Allocator` (its recording function is linked in;
    /// looked for only in a program that links the runtime).
    pub has_allocator: bool,
}

/// Reads the facts from the file.
pub fn inspect(path: &Path) -> Result<ProgramFacts, LaunchError> {
    let inspect_error = |reason: String| LaunchError::Inspect {
        path: path.to_path_buf(),
        reason,
    };
    let data = ferrotrace_reader::binary::map(path).map_err(|e| inspect_error(e.to_string()))?;
    let file = object::File::parse(&*data).map_err(|e| inspect_error(e.to_string()))?;
    let mut instr = 0;
    if file.section_by_name("xray_instr_map").is_some() {
        instr |= instrumentation::XRAY;
    }
    let bit = |f: Flavor| match f {
        Flavor::Mcount => instrumentation::MCOUNT,
        Flavor::Fentry => instrumentation::FENTRY,
    };
    // Calls through the PLT or GOT to the C library's hooks (or the preload library's)...
    for s in file.dynamic_symbols().filter(|s| s.is_undefined()) {
        if let Some(f) = s.name().ok().and_then(hook_flavor) {
            instr |= bit(f);
        }
    }
    // One pass over the symbol table (tens of thousands of entries in a big program with debug info;
    // names compared as bytes, since checking them as UTF-8 was the pass's main cost): the program's
    // own mcount/__fentry__ (it links the ferrotrace runtime) and the runtime's marker.
    let mut own: Vec<(u64, Flavor)> = Vec::new();
    let mut links_runtime = false;
    let marker = ferrotrace_core::env::LINKED_RUNTIME_MARKER.as_bytes();
    for s in file.symbols() {
        let Ok(name) = s.name_bytes() else { continue };
        links_runtime |= name == marker;
        if s.is_definition() && matches!(name.first(), Some(b'm' | b'_')) {
            if let Some(f) = std::str::from_utf8(name).ok().and_then(hook_flavor) {
                own.push((s.address(), f));
            }
        }
    }
    links_runtime |= file.dynamic_symbols().any(|s| s.name_bytes() == Ok(marker));
    let has_allocator = links_runtime
        && file.symbols().any(|s| {
            s.name_bytes()
                .is_ok_and(|n| contains(n, b"ferrotrace") && contains(n, b"alloc_from"))
        });
    // Its `tracing` spans are recorded through ferrotrace-tracing (which links the runtime), sleds or
    // not.
    if links_runtime
        && file
            .symbols()
            .any(|s| s.name_bytes().is_ok_and(names_span_recorder))
    {
        instr |= instrumentation::TRACING;
    }
    if let (false, Some(text)) = (own.is_empty(), file.section_by_name(".text")) {
        let targets: Vec<u64> = own.iter().map(|o| o.0).collect();
        if let Ok(code) = text.data() {
            for_each_call(code, text.address(), &targets, &[], |c| {
                instr |= bit(own[c.hook].1)
            });
        }
    }
    for name in ["__mcount_loc", "__patchable_function_entries"] {
        if file.section_by_name(name).is_some_and(|s| s.size() > 0) {
            instr |= instrumentation::PATCHABLE_NOP;
        }
    }
    let dynamic =
        file.section_by_name(".interp").is_some() || file.section_by_name(".dynamic").is_some();
    let has_tracepoints = file.section_by_name("ferrotrace_tp").is_some();
    Ok(ProgramFacts {
        has_allocator,
        has_tracepoints,
        instrumentation: instr,
        links_runtime,
        dynamic,
    })
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The file `execvp(name, …)` will run, so that the file inspected is the file run: `name` itself
/// when it contains a `/`; else the first executable regular file `name` in the directories of
/// `$PATH` (glibc's default `/bin:/usr/bin` when unset; an empty entry is the current directory),
/// skipping entries that are missing or not executable, as `execvp` does. A name found in the
/// current directory but not on `$PATH` is not run, as by a shell. The result always contains a `/`,
/// so that running it searches nothing again.
pub fn resolve(name: &OsStr) -> Result<PathBuf, LaunchError> {
    let given = Path::new(name);
    if name.as_bytes().contains(&b'/') {
        return match std::fs::metadata(given) {
            Ok(_) => Ok(given.to_path_buf()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                Err(LaunchError::NotFound(given.to_path_buf()))
            }
            Err(source) => Err(LaunchError::NotExecutable {
                path: given.to_path_buf(),
                source,
            }),
        };
    }
    if name.is_empty() {
        return Err(LaunchError::NotFound(given.to_path_buf()));
    }
    let path = std::env::var_os("PATH").unwrap_or_else(|| OsString::from("/bin:/usr/bin"));
    let mut denied = None;
    for dir in path.as_bytes().split(|&b| b == b':') {
        let dir = if dir.is_empty() { b"." } else { dir };
        let candidate = Path::new(OsStr::from_bytes(dir)).join(given);
        let Ok(meta) = std::fs::metadata(&candidate) else {
            continue; // missing, or a dangling link: execvp goes on
        };
        if meta.is_file() && executable(&candidate) {
            return Ok(candidate);
        }
        // execvp remembers EACCES and goes on; it reports it if nothing later runs.
        denied.get_or_insert(candidate);
    }
    Err(match denied {
        Some(path) => LaunchError::NotExecutable {
            path,
            source: std::io::Error::from_raw_os_error(libc::EACCES),
        },
        None => LaunchError::NotFound(given.to_path_buf()),
    })
}

/// Whether this process may execute `path` (`access(X_OK)`, which is what `execve` checks).
fn executable(path: &Path) -> bool {
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path.
    unsafe { libc::access(c.as_ptr(), libc::X_OK) == 0 }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// `PATH` is process-wide: the cases run one after another in one test.
    #[test]
    fn resolves_as_execvp_does() {
        let dir = std::env::temp_dir().join(format!("ft-resolve-{}", std::process::id()));
        let (a, b) = (dir.join("a"), dir.join("b"));
        for d in [&a, &b] {
            std::fs::create_dir_all(d).unwrap();
        }
        let write = |p: &Path, mode: u32| {
            std::fs::write(p, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
        };
        write(&a.join("tool"), 0o644); // not executable: execvp skips it
        write(&b.join("tool"), 0o755);
        std::fs::create_dir(a.join("sub")).unwrap(); // a directory is not a program
        write(&b.join("sub"), 0o755);
        let old = std::env::var_os("PATH");
        std::env::set_var("PATH", format!("{}:{}", a.display(), b.display()));
        assert_eq!(resolve(OsStr::new("tool")).unwrap(), b.join("tool"));
        assert_eq!(resolve(OsStr::new("sub")).unwrap(), b.join("sub"));
        assert!(matches!(
            resolve(OsStr::new("nothing-by-this-name")),
            Err(LaunchError::NotFound(_))
        ));
        // Only a non-executable match: EACCES, as execvp says.
        std::env::set_var("PATH", a.display().to_string());
        assert!(matches!(
            resolve(OsStr::new("tool")),
            Err(LaunchError::NotExecutable { .. })
        ));
        // A file of that name in the current directory is not what execvp runs ...
        let cwd = std::env::current_dir().unwrap();
        std::env::set_current_dir(&b).unwrap();
        std::env::set_var("PATH", "/nonexistent");
        assert!(matches!(
            resolve(OsStr::new("tool")),
            Err(LaunchError::NotFound(_))
        ));
        // ... unless $PATH has an empty entry, and then the result still has a slash.
        std::env::set_var("PATH", "/nonexistent::");
        assert_eq!(resolve(OsStr::new("tool")).unwrap(), Path::new("./tool"));
        assert_eq!(resolve(OsStr::new("./tool")).unwrap(), Path::new("./tool"));
        std::env::set_current_dir(cwd).unwrap();
        match old {
            Some(p) => std::env::set_var("PATH", p),
            None => std::env::remove_var("PATH"),
        }
        std::fs::remove_dir_all(dir).unwrap();
    }
}
