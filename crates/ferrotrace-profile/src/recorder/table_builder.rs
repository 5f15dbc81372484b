//! The eBPF backend's unwind tables, built off the sampling loop's thread (issue 37 item 3): reading
//! a module and turning its `.eh_frame` into rows takes from milliseconds to a quarter of a second
//! (a compiler's `cc1`, `libLLVM`), and with `-a` every running process's modules at the start. On the
//! loop's thread that stopped the counts from being read (seconds without a drain, `--duration`
//! overrun). Here two builder threads take them, one the modules under [`LARGE`], the other the larger
//! ones, so that no small module waits behind a `libLLVM` (most processes need only small ones and a
//! few shared libraries); each takes its modules smallest first, except those of a process whose
//! samples are arriving unwound, which are `promote`d ahead (smallest first among them too); the loop
//! places
//! each finished table in the kernel's shared table and hands the waiting processes their mappings
//! again.
//!
//! What it is not for: placing rows in the kernel (the loop's, which owns the BPF maps) or deciding
//! which modules need tables (`bpf_session`).

use std::collections::VecDeque;
use std::sync::mpsc::{self, Receiver, Sender};
use std::sync::{Arc, Condvar, Mutex};

use ferrotrace_bpf::tables::Row;

use super::mapped_file::FileKey;

/// How a job reads its module's bytes (`None`: unreadable).
pub(super) type ReadBytes = Box<dyn FnOnce() -> Option<Vec<u8>> + Send>;

/// A module to build a table for.
struct Job {
    key: FileKey,
    path: String,
    /// The module's size: the queue's order.
    size: u64,
    /// Moved to the front: a sampled process waits for it.
    promoted: bool,
    bytes: ReadBytes,
}

/// A table built (or why not).
pub(super) struct Built {
    pub key: FileKey,
    pub path: String,
    pub rows: Result<Vec<Row>, String>,
}

/// Modules of this size or more are built by the second thread (a compiler's `cc1` is about 30 MB,
/// `libLLVM` 123 MB; a C library 2 MB).
pub(super) const LARGE: u64 = 16 << 20;

/// The jobs not started yet; `None` once the builder is dropped (the thread then ends).
type Queue = Arc<(Mutex<Option<VecDeque<Job>>>, Condvar)>;

/// The builder threads and their queues.
pub(super) struct TableBuilder {
    /// The small modules' queue, then the large ones'.
    queues: [Queue; 2],
    done: Receiver<Built>,
    /// Jobs asked for and not yet received.
    pending: usize,
}

impl TableBuilder {
    /// Starts the builder threads.
    pub fn start() -> std::io::Result<TableBuilder> {
        let queue = || -> Queue { Arc::new((Mutex::new(Some(VecDeque::new())), Condvar::new())) };
        let queues = [queue(), queue()];
        let (sender, done) = mpsc::channel();
        for (lane, q) in queues.iter().enumerate() {
            let (theirs, sender) = (Arc::clone(q), sender.clone());
            std::thread::Builder::new()
                .name(format!("ferrotrace-tables-{lane}"))
                .spawn(move || work(&theirs, &sender))?;
        }
        Ok(TableBuilder {
            queues,
            done,
            pending: 0,
        })
    }

    /// Asks for the table of the module `key` (at `path`, `size` bytes), whose bytes `bytes` reads.
    pub fn ask(&mut self, key: FileKey, path: String, size: u64, bytes: ReadBytes) {
        let (jobs, ready) = &*self.queues[usize::from(size >= LARGE)];
        if let Some(q) = jobs.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
            let at = q
                .iter()
                .position(|j| !j.promoted && j.size > size)
                .unwrap_or(q.len());
            q.insert(
                at,
                Job {
                    key,
                    path,
                    size,
                    promoted: false,
                    bytes,
                },
            );
            self.pending += 1;
            ready.notify_one();
        }
    }

    /// Moves the jobs of `keys` not started yet ahead of every job not promoted.
    pub fn promote(&self, keys: &[FileKey]) {
        for queue in &self.queues {
            let (jobs, _) = &**queue;
            if let Some(q) = jobs.lock().unwrap_or_else(|e| e.into_inner()).as_mut() {
                promote_in(q, keys);
            }
        }
    }

    /// The tables finished since the last call, without waiting.
    pub fn finished(&mut self) -> Vec<Built> {
        let built: Vec<Built> = self.done.try_iter().collect();
        self.pending -= built.len();
        built
    }

    /// The next table to finish, waiting for it (until `deadline`, if given); `None` when none is
    /// pending or the deadline passed.
    pub fn next(&mut self, deadline: Option<std::time::Instant>) -> Option<Built> {
        if self.pending == 0 {
            return None;
        }
        let built = match deadline {
            None => self.done.recv().ok()?,
            Some(d) => self
                .done
                .recv_timeout(d.saturating_duration_since(std::time::Instant::now()))
                .ok()?,
        };
        self.pending -= 1;
        Some(built)
    }
}

impl Drop for TableBuilder {
    fn drop(&mut self) {
        // The threads end after the job they are on (not joined: the session's end need not wait
        // for a table nobody will use).
        for queue in &self.queues {
            let (jobs, ready) = &**queue;
            *jobs.lock().unwrap_or_else(|e| e.into_inner()) = None;
            ready.notify_one();
        }
    }
}

/// Builds the rows of a module from its bytes.
fn build(bytes: Option<Vec<u8>>) -> Result<Vec<Row>, String> {
    let bytes = bytes.ok_or_else(|| "unreadable".to_string())?;
    ferrotrace_bpf::tables::build(&bytes).map_err(|e| e.to_string())
}

/// [`TableBuilder::promote`] in one queue.
fn promote_in(q: &mut VecDeque<Job>, keys: &[FileKey]) {
    for key in keys {
        let Some(at) = q.iter().position(|j| !j.promoted && &j.key == key) else {
            continue;
        };
        if let Some(mut job) = q.remove(at) {
            job.promoted = true;
            // Smallest first among the promoted too: a busy compiler's libLLVM must not hold
            // back every other busy process.
            let to = q
                .iter()
                .position(|j| !j.promoted || j.size > job.size)
                .unwrap_or(q.len());
            q.insert(to, job);
        }
    }
}

/// The builder thread: takes the jobs from the front of the queue until it is gone.
fn work(queue: &Queue, done: &Sender<Built>) {
    let (jobs, ready) = &**queue;
    loop {
        let mut waiting = jobs.lock().unwrap_or_else(|e| e.into_inner());
        let Job {
            key, path, bytes, ..
        } = loop {
            match waiting.as_mut() {
                None => return,
                Some(q) => {
                    if let Some(job) = q.pop_front() {
                        break job;
                    }
                }
            }
            waiting = ready.wait(waiting).unwrap_or_else(|e| e.into_inner());
        };
        drop(waiting);
        let rows = build(bytes());
        if done.send(Built { key, path, rows }).is_err() {
            return;
        }
    }
}
