//! `ferrotrace mem`: where the memory went — totals, the peak and who held it, leaks, top allocation
//! sites, temporary allocations — from the Alloc and Free events of a trace.
//!
//! Streaming: events are read merged in time order across threads (a block freed by another thread
//! than the one that allocated it is matched by address), and memory is bounded by the number of
//! blocks live at once and of distinct stacks, never by the trace's length. The peak takes a second
//! pass: the first finds when the heap was largest, the second stops there and groups the live blocks
//! by stack.
//!
//! Definitions:
//! * **heap**: bytes of the blocks allocated and not yet freed (requested sizes, as the program asked).
//! * **leak**: a block still live when the trace ends.
//! * **temporary** (heaptrack's definition): a block freed by the thread that allocated it before that
//!   thread allocated anything else.
//! * **site**: the function that asked for the memory — the innermost frame of the allocation's stack
//!   that is not allocator plumbing (`malloc` wrappers, Rust's `alloc::`, `__rust_alloc`, the
//!   ferrotrace wrapper), with inlined frames folded into the function they were inlined into (as
//!   perf's report does).
//! * `realloc` is a free of the old block and an allocation of the new one.
//!
//! Sampled traces (`record --alloc-sample N`): an allocation of `s` bytes was recorded with
//! probability `p = 1 - exp(-s/N)` (Poisson sampling of the bytes); each recorded one stands for
//! `1/p` allocations and `s/p` bytes (Horvitz–Thompson weights: their expectation over the sampling is
//! exactly the unsampled count and size, so every total below is unbiased). Its variance for one
//! allocation is `s² (1 - p) / p`, estimated without bias from the recorded ones alone by
//! `s² (1 - p) / p²` (and `(1 - p) / p²` for the count): summed over the recorded blocks of a figure,
//! its square root is the figure's standard error ([`StdErrors`]), which `mem` prints beside it. Frees
//! are weighed like the blocks they free, so that allocations, frees and what is left live agree.
//! Figures of sampled traces are these estimates, rounded. A figure estimated from no recorded block
//! at all (no leak sampled) is 0 with a standard error of 0, which says nothing: the chance that
//! Poisson sampling records none of `L` bytes is `exp(-L/N)`, so `L < N ln 20` with 95 % confidence
//! ([`MemReport::unseen_bound`]). Temporaries
//! are the exception: whether a block was freed before its thread's next allocation needs every
//! allocation, so in a sampled trace the next *recorded* one stands in and the figure is an upper
//! bound.

mod render;

use std::collections::{BTreeMap, HashMap};

use crate::reader::{EventKind, EventRef, ReadError, Trace};
use crate::stacks::{frames_of, Frame, FrameTree, StackNode};

pub use render::{thousands, View};

/// The weights of one recorded allocation: how many allocations and bytes it stands for.
pub fn weights(size: u64, sample_interval: u64) -> (f64, f64) {
    if sample_interval == 0 {
        return (1.0, size as f64);
    }
    let p = -(-(size as f64) / sample_interval as f64).exp_m1();
    if p <= 0.0 {
        // A zero-byte allocation is never sampled by bytes: it can only appear unsampled.
        return (1.0, size as f64);
    }
    (1.0 / p, size as f64 / p)
}

/// The heap size as events go by: what the Perfetto export draws, and the first pass of [`analyse`].
#[derive(Default)]
pub struct HeapTracker {
    sample_interval: u64,
    live: HashMap<u64, f64>,
    bytes: f64,
}

impl HeapTracker {
    /// A tracker for a trace whose allocations were sampled every `sample_interval` bytes (0: all).
    pub fn new(sample_interval: u64) -> HeapTracker {
        HeapTracker {
            sample_interval,
            ..HeapTracker::default()
        }
    }

    /// Takes one event; returns the new heap size (bytes, estimated when sampled) when it changed.
    pub fn on_event(&mut self, e: &EventRef<'_>) -> Option<u64> {
        match e.kind {
            EventKind::Alloc => {
                let (_, bytes) = weights(e.fields[0], self.sample_interval);
                if let Some(old) = self.live.insert(e.fields[1], bytes) {
                    self.bytes -= old;
                }
                self.bytes += bytes;
            }
            EventKind::Free => {
                let old = self.live.remove(&e.fields[0])?;
                self.bytes -= old;
            }
            _ => return None,
        }
        Some(self.bytes.max(0.0).round() as u64)
    }
}

/// Allocations that share a stack.
#[derive(Clone, Debug, PartialEq)]
pub struct StackGroup {
    /// Leaf of the frame-level stack in [`MemReport::stacks`] (in [`MemReport::by_address_stack`]
    /// and [`MemReport::leaks_by_address_stack`]: the address stack, an index into the trace's
    /// stack table), `None` without a stack.
    pub stack: Option<u32>,
    /// Blocks (estimated when sampled).
    pub blocks: u64,
    /// Bytes (estimated when sampled).
    pub bytes: u64,
}

/// One allocation site.
#[derive(Clone, Debug, PartialEq)]
pub struct Site {
    /// The function (see the module docs), `[no stack]` when none was recorded.
    pub function: String,
    /// Allocations made there.
    pub allocations: u64,
    /// Bytes allocated there.
    pub bytes: u64,
    /// Bytes of those still live at the end.
    pub leaked: u64,
    /// Temporary allocations among them.
    pub temporary: u64,
}

/// Everything `ferrotrace mem` says about a trace.
#[derive(Clone, Debug, Default)]
pub struct MemReport {
    /// Sampling interval in bytes (0: every allocation was recorded).
    pub sample_interval: u64,
    /// Alloc events in the trace.
    pub recorded: u64,
    /// Allocations (estimated when sampled).
    pub allocations: u64,
    /// Bytes allocated.
    pub bytes: u64,
    /// Frees (estimated when sampled: each free of a recorded block weighs as that block does).
    pub frees: u64,
    /// Free events of recorded blocks in the trace.
    pub recorded_frees: u64,
    /// Free events of blocks the trace never saw allocated (allocated before recording started: by
    /// the dynamic loader or a constructor before the runtime's start): not in `frees`, nor in the
    /// heap, whose size they would make negative.
    pub unseen_frees: u64,
    /// Standard errors of the estimates (all 0 when every allocation was recorded).
    pub std_errors: StdErrors,
    /// Largest heap.
    pub peak_bytes: u64,
    /// When, ns after the trace's first calibration.
    pub peak_ns: u64,
    /// The blocks live at the peak, by stack, largest first.
    pub peak_stacks: Vec<StackGroup>,
    /// Blocks live at the end of the trace.
    pub leaked_blocks: u64,
    /// Their bytes.
    pub leaked_bytes: u64,
    /// Leaks by stack, largest first.
    pub leaks: Vec<StackGroup>,
    /// Temporary allocations.
    pub temporary: u64,
    /// Temporary allocations by stack, most first.
    pub temporaries: Vec<StackGroup>,
    /// Allocations by stack (every allocation), most bytes first.
    pub by_stack: Vec<StackGroup>,
    /// Allocations by the trace's address stack (`Trace::stacks`), most bytes first: what
    /// `by_stack` groups by named frames, for exporters that keep addresses (pprof).
    pub by_address_stack: Vec<StackGroup>,
    /// Leaks by the trace's address stack, largest first.
    pub leaks_by_address_stack: Vec<StackGroup>,
    /// Sites, most bytes first.
    pub sites: Vec<Site>,
    /// Frame table of the stacks.
    pub frames: Vec<Frame>,
    /// Frame-level stack tree.
    pub stacks: Vec<StackNode>,
    /// The trace is complete (has its End chunk): without it, "leaked" means "live when it stopped".
    pub complete: bool,
    /// Modules that could not be used to name addresses.
    pub unreadable_modules: Vec<String>,
}

/// Functions that are allocator plumbing rather than the code that wanted memory (their frames are
/// skipped when naming an allocation's site).
fn is_plumbing(function: &str) -> bool {
    const PREFIXES: [&str; 12] = [
        "__rust_alloc",
        "__rust_realloc",
        "__rust_dealloc",
        "__rdl_",
        "__rg_",
        "alloc::",
        "<alloc::",
        "std::sys::",
        "<std::alloc::System",
        "std::alloc::",
        "ferrotrace::alloc",
        "<ferrotrace::alloc",
    ];
    PREFIXES.iter().any(|p| function.starts_with(p))
        || matches!(
            function,
            "malloc"
                | "calloc"
                | "realloc"
                | "operator new(unsigned long)"
                | "operator new[](unsigned long)"
        )
}

/// Estimated variances of a block's weights (count, bytes) from the block alone: for a block recorded
/// with probability `p`, `(1 - p) / p²` and `s² (1 - p) / p²`; with `count = 1/p` and `bytes = s/p`
/// that is `count² - count` and `bytes² (1 - 1/count)`. Both 0 for an unsampled trace (`count` 1).
fn variances(count: f64, bytes: f64) -> (f64, f64) {
    if count <= 1.0 {
        return (0.0, 0.0);
    }
    (count * count - count, bytes * bytes * (1.0 - 1.0 / count))
}

#[derive(Default, Clone, Copy)]
struct Totals {
    count: f64,
    bytes: f64,
    var_count: f64,
    var_bytes: f64,
}

impl Totals {
    fn add(&mut self, count: f64, bytes: f64) {
        self.count += count;
        self.bytes += bytes;
        let (vc, vb) = variances(count, bytes);
        self.var_count += vc;
        self.var_bytes += vb;
    }
}

/// Standard errors of a sampled trace's estimates (all 0 when every allocation was recorded): one
/// standard deviation of the estimator, from the Poisson sampling weights (see the module docs).
/// About 95 % of estimates lie within two of the true figure.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct StdErrors {
    /// Of [`MemReport::allocations`].
    pub allocations: f64,
    /// Of [`MemReport::bytes`].
    pub bytes: f64,
    /// Of [`MemReport::frees`].
    pub frees: f64,
    /// Of [`MemReport::peak_bytes`] (the heap at that moment; the moment itself is chosen from the
    /// estimates, so the peak tends to be overestimated by about this much).
    pub peak_bytes: f64,
    /// Of [`MemReport::leaked_bytes`].
    pub leaked_bytes: f64,
    /// Of [`MemReport::leaked_blocks`].
    pub leaked_blocks: f64,
}

struct Block {
    count: f64,
    bytes: f64,
    stack: Option<u32>,
    /// The address stack the frame-level `stack` was named from.
    address_stack: Option<u32>,
}

struct Pass<'t> {
    tree: FrameTree<'t>,
    sample_interval: u64,
    live: HashMap<u64, Block>,
    heap: f64,
    /// The estimated variance of `heap`.
    heap_var: f64,
    /// Frees of blocks never seen allocated.
    unseen_frees: u64,
}

impl Pass<'_> {
    /// Applies one event; returns the allocation's or free's block for the caller's bookkeeping.
    fn apply(&mut self, e: &EventRef<'_>) -> Option<(bool, Block, Option<Block>)> {
        match e.kind {
            EventKind::Alloc => {
                let (count, bytes) = weights(e.fields[0], self.sample_interval);
                let address_stack = e.id.checked_sub(1);
                let stack = address_stack.and_then(|s| self.tree.leaf(s));
                let replaced = self.live.insert(
                    e.fields[1],
                    Block {
                        count,
                        bytes,
                        stack,
                        address_stack,
                    },
                );
                if let Some(old) = &replaced {
                    self.heap -= old.bytes;
                    self.heap_var -= variances(old.count, old.bytes).1;
                }
                self.heap += bytes;
                self.heap_var += variances(count, bytes).1;
                Some((
                    true,
                    Block {
                        count,
                        bytes,
                        stack,
                        address_stack,
                    },
                    replaced,
                ))
            }
            EventKind::Free => {
                let Some(old) = self.live.remove(&e.fields[0]) else {
                    self.unseen_frees += 1;
                    return None;
                };
                self.heap -= old.bytes;
                self.heap_var -= variances(old.count, old.bytes).1;
                Some((false, old, None))
            }
            _ => None,
        }
    }
}

pub(crate) fn round(x: f64) -> u64 {
    x.max(0.0).round() as u64
}

fn groups(m: HashMap<Option<u32>, Totals>) -> Vec<StackGroup> {
    let mut v: Vec<StackGroup> = m
        .into_iter()
        .map(|(stack, t)| StackGroup {
            stack,
            blocks: round(t.count),
            bytes: round(t.bytes),
        })
        .collect();
    v.sort_by(|a, b| (b.bytes, b.blocks, a.stack).cmp(&(a.bytes, a.blocks, b.stack)));
    v
}

/// Reads the allocation events of `trace` (two streaming passes) into a [`MemReport`].
pub fn analyse(trace: &Trace) -> Result<MemReport, ReadError> {
    analyse_passes(trace, true)
}

/// Like [`analyse`] in one pass: everything but what was live at the peak (`peak_stacks` is empty),
/// which needs a second reading up to the peak; for memory flame graphs, which weigh stacks by the
/// totals and leaks alone.
pub fn analyse_totals(trace: &Trace) -> Result<MemReport, ReadError> {
    analyse_passes(trace, false)
}

fn analyse_passes(trace: &Trace, peak_stacks: bool) -> Result<MemReport, ReadError> {
    let sample_interval = trace.session().alloc_sample;
    let start_ns = trace.start_ns();
    // Pass 1: totals, sites, leaks, temporaries; when the heap peaked (as an event index).
    let mut pass = Pass {
        tree: FrameTree::new(trace),
        sample_interval,
        live: HashMap::new(),
        heap: 0.0,
        heap_var: 0.0,
        unseen_frees: 0,
    };
    let mut rep = MemReport {
        sample_interval,
        complete: trace.end().is_some(),
        ..MemReport::default()
    };
    let (mut all, mut temps, mut frees) = (Totals::default(), Totals::default(), Totals::default());
    let mut by_stack: HashMap<Option<u32>, Totals> = HashMap::new();
    let mut by_address_stack: HashMap<Option<u32>, Totals> = HashMap::new();
    let mut temp_stacks: HashMap<Option<u32>, Totals> = HashMap::new();
    let mut last_alloc: HashMap<u32, u64> = HashMap::new();
    let (mut peak, mut peak_index, mut peak_ns, mut index) = (0.0f64, 0u64, 0u64, 0u64);
    let mut peak_var = 0.0f64;
    let mut events = trace.events()?;
    while let Some(e) = events.next_ref() {
        let e = e?;
        let Some((is_alloc, block, _)) = pass.apply(&e) else {
            continue;
        };
        index += 1;
        if is_alloc {
            rep.recorded += 1;
            all.add(block.count, block.bytes);
            by_stack
                .entry(block.stack)
                .or_default()
                .add(block.count, block.bytes);
            by_address_stack
                .entry(block.address_stack)
                .or_default()
                .add(block.count, block.bytes);
            last_alloc.insert(e.tid, e.fields[1]);
            if pass.heap > peak + 0.5 {
                peak = pass.heap;
                peak_var = pass.heap_var;
                peak_index = index;
                peak_ns = e.ts_ns.saturating_sub(start_ns);
            }
        } else {
            rep.recorded_frees += 1;
            frees.add(block.count, block.bytes);
            if last_alloc.get(&e.tid) == Some(&e.fields[0]) {
                last_alloc.remove(&e.tid);
                temps.add(block.count, block.bytes);
                temp_stacks
                    .entry(block.stack)
                    .or_default()
                    .add(block.count, block.bytes);
            }
        }
    }
    drop(events);
    rep.unseen_frees = pass.unseen_frees;
    let mut leaks: HashMap<Option<u32>, Totals> = HashMap::new();
    let mut leaks_by_address_stack: HashMap<Option<u32>, Totals> = HashMap::new();
    let mut leaked = Totals::default();
    for b in pass.live.values() {
        leaks.entry(b.stack).or_default().add(b.count, b.bytes);
        leaks_by_address_stack
            .entry(b.address_stack)
            .or_default()
            .add(b.count, b.bytes);
        leaked.add(b.count, b.bytes);
    }
    // Pass 2: replay up to the peak and group what was live then.
    let mut peak_live: HashMap<Option<u32>, Totals> = HashMap::new();
    if peak_stacks && peak_index > 0 {
        pass.live.clear();
        pass.heap = 0.0;
        pass.heap_var = 0.0;
        let mut events = trace.events()?;
        let mut index = 0u64;
        while let Some(e) = events.next_ref() {
            if pass.apply(&e?).is_some() {
                index += 1;
                if index == peak_index {
                    break;
                }
            }
        }
        for b in pass.live.values() {
            peak_live.entry(b.stack).or_default().add(b.count, b.bytes);
        }
    }
    rep.allocations = round(all.count);
    rep.bytes = round(all.bytes);
    rep.frees = round(frees.count);
    rep.std_errors = StdErrors {
        allocations: all.var_count.max(0.0).sqrt(),
        bytes: all.var_bytes.max(0.0).sqrt(),
        frees: frees.var_count.max(0.0).sqrt(),
        peak_bytes: peak_var.max(0.0).sqrt(),
        leaked_bytes: leaked.var_bytes.max(0.0).sqrt(),
        leaked_blocks: leaked.var_count.max(0.0).sqrt(),
    };
    rep.peak_bytes = round(peak);
    rep.peak_ns = peak_ns;
    rep.temporary = round(temps.count);
    rep.frames = pass.tree.table.frames;
    rep.stacks = pass.tree.table.nodes;
    rep.unreadable_modules = pass.tree.sym.unreadable;
    rep.peak_stacks = groups(peak_live);
    rep.leaks = groups(leaks);
    rep.leaked_blocks = rep.leaks.iter().map(|g| g.blocks).sum();
    rep.leaked_bytes = rep.leaks.iter().map(|g| g.bytes).sum();
    rep.temporaries = groups(temp_stacks);
    rep.by_stack = groups(by_stack);
    rep.by_address_stack = groups(by_address_stack);
    rep.leaks_by_address_stack = groups(leaks_by_address_stack);
    rep.sites = rep.sites_of();
    Ok(rep)
}

impl MemReport {
    /// For a sampled trace, the bytes that can go unseen: with Poisson sampling every `N` bytes, no
    /// block of `L` bytes in all is recorded with probability `exp(-L/N)`, so a figure estimated as 0
    /// (no leak recorded) is below `N ln 20` bytes with 95 % confidence. 0 for an unsampled trace.
    pub fn unseen_bound(&self) -> u64 {
        round(self.sample_interval as f64 * 20f64.ln())
    }

    /// Frames of a frame-level stack, leaf first.
    pub fn stack_frames(&self, stack: Option<u32>) -> Vec<&Frame> {
        frames_of(&self.frames, &self.stacks, stack)
    }

    /// The site of an allocation stack (see the module docs).
    pub fn site(&self, stack: Option<u32>) -> String {
        let frames = self.stack_frames(stack);
        let Some(first) = frames.iter().position(|f| !is_plumbing(&f.function)) else {
            return frames
                .first()
                .map_or_else(|| "[no stack]".to_string(), |f| f.function.to_string());
        };
        frames[first..]
            .iter()
            .find(|f| !f.inlined)
            .unwrap_or(&frames[first])
            .function
            .to_string()
    }

    fn sites_of(&self) -> Vec<Site> {
        let mut sites: BTreeMap<String, Site> = BTreeMap::new();
        let mut add = |stack: Option<u32>, a: u64, b: u64, l: u64, t: u64| {
            let function = self.site(stack);
            let s = sites.entry(function.clone()).or_insert_with(|| Site {
                function,
                allocations: 0,
                bytes: 0,
                leaked: 0,
                temporary: 0,
            });
            s.allocations += a;
            s.bytes += b;
            s.leaked += l;
            s.temporary += t;
        };
        for g in &self.by_stack {
            add(g.stack, g.blocks, g.bytes, 0, 0);
        }
        for g in &self.leaks {
            add(g.stack, 0, 0, g.bytes, 0);
        }
        for g in &self.temporaries {
            add(g.stack, 0, 0, 0, g.blocks);
        }
        let mut v: Vec<Site> = sites.into_values().collect();
        v.sort_by(|a, b| {
            (b.bytes, b.allocations)
                .cmp(&(a.bytes, a.allocations))
                .then(a.function.cmp(&b.function))
        });
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ferrotrace_core::builder::TraceBuilder;
    use ferrotrace_core::schema::{source, Mode};

    fn trace_of(name: &str, sample: u64, build: impl FnOnce(&mut TraceBuilder<Vec<u8>>)) -> Trace {
        let mut b = TraceBuilder::with_alloc_sample(
            Vec::new(),
            "/bin/m",
            source::ALLOCATIONS,
            Mode::Lossless,
            sample,
        )
        .unwrap();
        b.thread(1, "one").unwrap();
        b.thread(2, "two").unwrap();
        build(&mut b);
        let path = std::env::temp_dir().join(format!("ft-mem-{}-{name}.data", std::process::id()));
        std::fs::write(&path, b.finish().unwrap()).unwrap();
        let t = Trace::open(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        t
    }

    #[test]
    fn peak_leaks_and_temporaries_follow_the_definitions() {
        let t = trace_of("defs", 0, |b| {
            b.alloc(1, 10, None, 100, 0xa0).unwrap();
            b.free(2, 20, 0xa0).unwrap(); // another thread: not a temporary
            b.alloc(1, 30, None, 50, 0xb0).unwrap();
            b.free(1, 40, 0xb0).unwrap(); // freed before thread 1 allocates again: temporary
            b.alloc(1, 50, None, 1000, 0xc0).unwrap();
            b.alloc(1, 60, None, 2000, 0xd0).unwrap(); // peak: 3000
            b.free(1, 70, 0xc0).unwrap(); // not the last allocation: not a temporary
            b.alloc(2, 80, None, 10, 0xe0).unwrap();
            b.free(2, 90, 0xf0).unwrap(); // never allocated: counted apart
        });
        let r = analyse(&t).unwrap();
        assert_eq!((r.allocations, r.bytes, r.frees), (5, 3160, 3));
        assert_eq!(r.unseen_frees, 1);
        assert_eq!(r.std_errors, StdErrors::default(), "nothing is estimated");
        assert!(r.text(View::Summary, 10).starts_with(
            "allocations: 5 (3,160 bytes), frees: 3\n  and 1 frees of blocks allocated before recording started (not counted above)\npeak heap: 3,000 bytes at 50 ns\nleaked at exit: 2,010 bytes in 2 blocks\n"
        ));
        assert_eq!((r.peak_bytes, r.peak_ns), (3000, 60 - 10));
        assert_eq!(
            r.peak_stacks,
            vec![StackGroup {
                stack: None,
                blocks: 2,
                bytes: 3000
            }]
        );
        assert_eq!((r.leaked_bytes, r.leaked_blocks), (2010, 2));
        assert_eq!(r.temporary, 1);
        assert_eq!(r.sites[0].function, "[no stack]");
    }

    #[test]
    fn sampled_allocations_weigh_their_inverse_probability() {
        assert_eq!(weights(1000, 0), (1.0, 1000.0));
        let (count, bytes) = weights(1000, 1000);
        let p = 1.0 - (-1.0f64).exp();
        assert!((count - 1.0 / p).abs() < 1e-9 && (bytes - 1000.0 / p).abs() < 1e-6);
        // A block much larger than the interval is (nearly) always sampled and weighs its size.
        let (count, bytes) = weights(1 << 30, 4096);
        assert!((count - 1.0).abs() < 1e-9 && (bytes - (1u64 << 30) as f64).abs() < 1e-3);
        let t = trace_of("sampled", 1000, |b| {
            b.alloc(1, 10, None, 1000, 0xa0).unwrap();
            b.alloc(1, 20, None, 1000, 0xb0).unwrap();
            b.free(1, 30, 0xa0).unwrap();
        });
        let r = analyse(&t).unwrap();
        assert_eq!(r.sample_interval, 1000);
        assert_eq!(
            (r.allocations, r.bytes),
            (3, 3164),
            "1/p = 1.582 allocations, 1582 bytes each"
        );
        // The free weighs as its block did: 1.582 frees, not 1; one block left live.
        assert_eq!((r.frees, r.recorded_frees), (2, 1));
        assert_eq!((r.leaked_blocks, r.leaked_bytes), (2, 1582));
        // Variance of one block's count: (1 - p) / p² = 1/p² - 1/p.
        let one = (1.0 / p / p - 1.0 / p).sqrt();
        let close = |a: f64, b: f64| (a - b).abs() < 1e-9 * b.max(1.0);
        assert!(close(r.std_errors.allocations, one * 2f64.sqrt()));
        assert!(close(r.std_errors.frees, one));
        assert!(close(r.std_errors.leaked_blocks, one));
        assert!(close(r.std_errors.bytes, 1000.0 * one * 2f64.sqrt()));
        assert!(close(r.std_errors.leaked_bytes, 1000.0 * one));
        // The heap peaked with both blocks live.
        assert!(close(r.std_errors.peak_bytes, 1000.0 * one * 2f64.sqrt()));
        assert_eq!(r.unseen_bound(), 2996, "N ln 20");
        let text = r.text(View::Summary, 10);
        assert!(
            text.starts_with(
                "allocations: 3 ± 1 (3,164 ± 1,357 bytes), frees: 2 ± 1\n  estimated from 2 \
                 allocations and 1 frees recorded, sampled every 1,000 bytes on average"
            ),
            "{text}"
        );
        assert!(
            text.contains("leaked at exit: 1,582 ± 960 bytes in 2 ± 1 blocks\n"),
            "{text}"
        );
    }
}
