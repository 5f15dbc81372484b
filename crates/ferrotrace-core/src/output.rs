//! Creating trace files safely (feature `std`): shared by the runtime (which writes `FILE` and the
//! `FILE.<pid>` of the processes it starts), `ferrotrace profile`, and `ferrotrace record`, which checks
//! its output with the same rules before it starts the program.
//!
//! Traces are often written into directories other users can write to (`/tmp`, a shared build tree), by
//! a traced program that may run as root. So:
//!
//! * a trace is created with `O_CREAT | O_EXCL | O_NOFOLLOW` and mode 0600: a new file, never one that
//!   someone placed there, never through a symbolic link;
//! * an existing file is replaced only if it is a ferrotrace trace (it starts with the trace magic),
//!   a regular file (not a link, device or directory) owned by the user who writes the new one. It is
//!   not overwritten but kept as `FILE.old` (like `perf.data.old`), so the previous trace survives a run
//!   that goes wrong; an older `FILE.old` is replaced under the same rules. Anything else is refused
//!   with a message that says why: the user moves it away.

use std::fmt;
use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};

use crate::format::MAGIC;

/// Why a path cannot take a new trace.
#[derive(Debug)]
pub enum OutputError {
    /// Its directory does not exist or is not a directory.
    NoDirectory(PathBuf),
    /// The directory exists but a file cannot be created in it.
    NotWritable(PathBuf, io::Error),
    /// Something that must not be replaced is in the way: the path, and what it is.
    InTheWay(PathBuf, &'static str),
    /// A result (`flame -o`, `dump -o`) would be written over something it must not replace: the
    /// path, and what it is.
    NotAResult(PathBuf, &'static str),
    /// Another error while checking or creating.
    Io(PathBuf, io::Error),
}

impl fmt::Display for OutputError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OutputError::NoDirectory(d) => {
                write!(f, "cannot write a trace into {}: no such directory", d.display())
            }
            OutputError::NotWritable(d, e) => {
                write!(f, "cannot write a trace into {}: {e}", d.display())
            }
            OutputError::InTheWay(p, what) => write!(
                f,
                "{} exists and is {what}: ferrotrace replaces only its own traces (move it away or choose another -o)",
                p.display()
            ),
            OutputError::NotAResult(p, what) => write!(
                f,
                "{} is {what}: ferrotrace writes results only into new files, its own files, or \
                 devices (choose another -o)",
                p.display()
            ),
            OutputError::Io(p, e) => write!(f, "{}: {e}", p.display()),
        }
    }
}

impl std::error::Error for OutputError {}

/// `FILE.old`, where an existing trace is kept when a new one is created at `path`.
pub fn old_path(path: &Path) -> PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".old");
    PathBuf::from(p)
}

fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}

/// What is at `path` now, if anything, and whether a new trace may replace it.
fn existing(path: &Path) -> Result<bool, OutputError> {
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
        Err(e) => return Err(OutputError::Io(path.to_path_buf(), e)),
    };
    let in_the_way = |what| Err(OutputError::InTheWay(path.to_path_buf(), what));
    let ft = meta.file_type();
    if ft.is_symlink() {
        return in_the_way("a symbolic link");
    }
    if ft.is_dir() {
        return in_the_way("a directory");
    }
    if !ft.is_file() {
        return in_the_way("not a regular file");
    }
    // SAFETY: geteuid cannot fail.
    if meta.uid() != unsafe { libc::geteuid() } {
        return in_the_way("owned by another user");
    }
    if is_trace(path) {
        Ok(true)
    } else {
        in_the_way("not a ferrotrace trace")
    }
}

/// Whether the file at `path` starts with the trace magic; read with `O_NOFOLLOW` (the path may have
/// been swapped for a link since it was checked) and `O_NONBLOCK` (never wait on a FIFO).
fn is_trace(path: &Path) -> bool {
    let mut magic = [0u8; 8];
    std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .and_then(|mut f| f.read_exact(&mut magic))
        .is_ok_and(|()| magic == MAGIC)
}

/// Checks, without changing anything, that a new trace can be created at `path` by [`create`]: its
/// directory exists and takes new files, and whatever is at `path` (and at `FILE.old`) may be replaced.
/// `ferrotrace record` calls this before it starts the program, so that a bad `-o` is one line of
/// error rather than a program run untraced.
pub fn check(path: &Path) -> Result<(), OutputError> {
    let dir = directory_of(path);
    if !dir.is_dir() {
        return Err(OutputError::NoDirectory(dir.to_path_buf()));
    }
    if existing(path)? {
        existing(&old_path(path))?;
    }
    // A file created and removed again: the only reliable test that the directory takes new files
    // (permissions, read-only or special file systems such as /proc).
    let probe = dir.join(format!(
        ".{}.ferrotrace-probe-{}",
        path.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        std::process::id()
    ));
    match create_new(&probe) {
        Ok(_) => {
            let _ = std::fs::remove_file(&probe);
            Ok(())
        }
        Err(e) => Err(OutputError::NotWritable(dir.to_path_buf(), e)),
    }
}

fn create_new(path: &Path) -> io::Result<File> {
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .open(path)
}

/// Creates a new, empty trace file at `path`, mode 0600, after moving an existing trace there to
/// `FILE.old`; refuses anything else that is in the way (see the module documentation). Returns the
/// open file and where the previous trace went, if there was one.
pub fn create(path: &Path) -> Result<(File, Option<PathBuf>), OutputError> {
    let mut kept = None;
    if existing(path)? {
        let old = old_path(path);
        existing(&old)?;
        // rename(2) replaces the name, never what a link points to.
        std::fs::rename(path, &old).map_err(|e| OutputError::Io(path.to_path_buf(), e))?;
        kept = Some(old);
    }
    match create_new(path) {
        Ok(f) => Ok((f, kept)),
        // Something appeared at `path` since the check: it is not ours.
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(OutputError::InTheWay(
            path.to_path_buf(),
            "a file created by someone else while ferrotrace was creating its own",
        )),
        Err(e) => Err(OutputError::Io(path.to_path_buf(), e)),
    }
}

/// Opens `path` for a result that is not a trace (an SVG, JSON, a Perfetto file): a new file is
/// created with mode 0600 (results hold the program's data as traces do); an existing regular file of
/// ours is truncated, unless it is a ferrotrace trace (`flame -i t.data -o t.data` would destroy the
/// input); a device or FIFO (`/dev/null`, a pipe) is written as it is. Never through a symbolic link,
/// never over another user's file or a directory.
pub fn create_result(path: &Path) -> Result<File, OutputError> {
    let io = |e| OutputError::Io(path.to_path_buf(), e);
    let Some(meta) = check_result(path)? else {
        return match create_new(path) {
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Err(OutputError::NotAResult(
                path.to_path_buf(),
                "a file created by someone else meanwhile",
            )),
            r => r.map_err(io),
        };
    };
    let mut options = std::fs::OpenOptions::new();
    options
        .write(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC);
    if meta.file_type().is_file() {
        options.truncate(true);
    }
    options.open(path).map_err(io)
}

/// What [`create_result`] would refuse, said before anything is written (an export of several files
/// checks them all first): `None` when `path` does not exist, its metadata when it may be written.
pub fn check_result(path: &Path) -> Result<Option<std::fs::Metadata>, OutputError> {
    let refuse = |what| Err(OutputError::NotAResult(path.to_path_buf(), what));
    let meta = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(OutputError::Io(path.to_path_buf(), e)),
    };
    let ft = meta.file_type();
    if ft.is_symlink() {
        return refuse("a symbolic link");
    }
    if ft.is_dir() {
        return refuse("a directory");
    }
    if ft.is_file() {
        // SAFETY: geteuid cannot fail.
        if meta.uid() != unsafe { libc::geteuid() } {
            return refuse("owned by another user");
        }
        if is_trace(path) {
            return refuse("a ferrotrace trace");
        }
    }
    Ok(Some(meta))
}

/// A directory only its creator can use (mkdtemp: a fresh name, mode 0700) under the system's temporary
/// directory, removed with what it holds when dropped: for traces that nobody else may see or plant
/// files into (`ferrotrace live`, whose trace is thrown away).
pub struct PrivateDir(PathBuf);

impl PrivateDir {
    /// Creates `$TMPDIR/PREFIX-XXXXXX`.
    pub fn new(prefix: &str) -> io::Result<PrivateDir> {
        PrivateDir::new_in(&std::env::temp_dir(), prefix)
    }

    /// Creates `PARENT/PREFIX-XXXXXX`.
    pub fn new_in(parent: &Path, prefix: &str) -> io::Result<PrivateDir> {
        use std::os::unix::ffi::OsStringExt;
        let mut template = parent
            .join(format!("{prefix}-XXXXXX"))
            .into_os_string()
            .into_vec();
        template.push(0);
        // SAFETY: mkdtemp rewrites the six X of the NUL-terminated template in place.
        let made = unsafe { libc::mkdtemp(template.as_mut_ptr().cast()) };
        if made.is_null() {
            return Err(io::Error::last_os_error());
        }
        template.pop();
        Ok(PrivateDir(PathBuf::from(std::ffi::OsString::from_vec(
            template,
        ))))
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("ft-output-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn results_never_replace_traces_links_or_directories() {
        let dir = std::env::temp_dir().join(format!("ft-result-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let trace = dir.join("t.data");
        std::fs::write(&trace, [&MAGIC[..], b"events"].concat()).unwrap();
        assert!(matches!(
            create_result(&trace),
            Err(OutputError::NotAResult(_, "a ferrotrace trace"))
        ));
        assert_eq!(
            std::fs::read(&trace).unwrap().len(),
            14,
            "the trace is untouched"
        );
        let link = dir.join("link.svg");
        std::os::unix::fs::symlink(&trace, &link).unwrap();
        assert!(matches!(
            create_result(&link),
            Err(OutputError::NotAResult(_, "a symbolic link"))
        ));
        assert!(create_result(&dir).is_err());
        // A new file, 0600; an old result of ours is replaced; /dev/null is written as it is.
        let svg = dir.join("f.svg");
        std::io::Write::write_all(&mut create_result(&svg).unwrap(), b"long old content").unwrap();
        assert_eq!(std::fs::metadata(&svg).unwrap().mode() & 0o777, 0o600);
        std::io::Write::write_all(&mut create_result(&svg).unwrap(), b"new").unwrap();
        assert_eq!(std::fs::read(&svg).unwrap(), b"new");
        assert!(create_result(Path::new("/dev/null")).is_ok());
        std::fs::remove_dir_all(dir).unwrap();
    }

    #[test]
    fn a_new_trace_is_private_and_an_old_one_is_kept() {
        let d = dir("keep");
        let p = d.join("t.data");
        let (_, kept) = create(&p).unwrap();
        assert_eq!(kept, None);
        assert_eq!(
            std::fs::metadata(&p).unwrap().permissions().mode() & 0o777,
            0o600
        );
        std::fs::write(&p, [&MAGIC[..], b"first"].concat()).unwrap();
        check(&p).unwrap();
        let (_, kept) = create(&p).unwrap();
        assert_eq!(kept.as_deref(), Some(old_path(&p).as_path()));
        assert!(std::fs::read(old_path(&p)).unwrap().ends_with(b"first"));
        assert_eq!(std::fs::metadata(&p).unwrap().len(), 0, "a new file");
        let _ = std::fs::remove_dir_all(&d);
    }

    #[test]
    fn what_is_not_a_trace_of_ours_is_refused_and_left_alone() {
        let d = dir("refuse");
        let notes = d.join("notes.txt");
        std::fs::write(&notes, b"my notes").unwrap();
        let target = d.join("target");
        std::fs::write(&target, b"precious").unwrap();
        let link = d.join("link.data");
        std::os::unix::fs::symlink(&target, &link).unwrap();
        let sub = d.join("sub");
        std::fs::create_dir(&sub).unwrap();
        for (p, what) in [
            (&notes, "not a ferrotrace trace"),
            (&link, "a symbolic link"),
            (&sub, "a directory"),
        ] {
            for e in [check(p).unwrap_err(), create(p).unwrap_err()] {
                assert!(e.to_string().contains(what), "{}: {e}", p.display());
            }
        }
        assert_eq!(std::fs::read(&notes).unwrap(), b"my notes");
        assert_eq!(std::fs::read(&target).unwrap(), b"precious");
        // A trace whose FILE.old is not a trace: refused too, nothing moved.
        let t = d.join("t.data");
        std::fs::write(&t, MAGIC).unwrap();
        std::fs::write(old_path(&t), b"not mine to replace").unwrap();
        assert!(create(&t).is_err());
        assert_eq!(std::fs::read(&t).unwrap(), MAGIC);
        assert!(matches!(
            check(&d.join("missing/t.data")),
            Err(OutputError::NoDirectory(_))
        ));
        assert!(matches!(
            check(Path::new("/proc/ferrotrace.data")),
            Err(OutputError::NotWritable(..))
        ));
        let _ = std::fs::remove_dir_all(&d);
    }
}
