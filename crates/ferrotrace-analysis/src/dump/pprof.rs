//! `dump --format pprof`: the gzipped `profile.proto` of pprof (package `perftools.profiles`,
//! github.com/google/pprof/blob/main/proto/profile.proto), which `go tool pprof`, Pyroscope, Parca,
//! Grafana and the cloud profilers read.
//!
//! What a trace becomes, by what it holds (the first that applies):
//! * **samples** (`ferrotrace profile`, perf or `--bpf`): one pprof sample per address stack,
//!   thread and sampler, with the values `samples/count` and one per sampler: `cpu/nanoseconds`
//!   (cpu-clock), `off_cpu/nanoseconds`, or `EVENT/count` (probe and tracepoint hits); labels
//!   `thread` (its name) and `tid`;
//! * **allocations** (`record --alloc`): one sample per address stack with `alloc_objects/count`,
//!   `alloc_space/bytes` (every allocation, as `mem` counts them: estimates when sampled) and
//!   `inuse_objects/count`, `inuse_space/bytes` (the blocks still live at the end: `mem`'s leaks);
//! * **function calls**: one sample per call path of the calling-context tree with `calls/count`
//!   and `wall/nanoseconds` (the path's self time), so that pprof's flat is a function's self time
//!   and its cum the function's total.
//!
//! Locations are the trace's own: one per distinct (module, address) of its stack table, with a
//! line per frame at that address (inlined functions first, as pprof orders them) named by the one
//! [`Symbolizer`]; for function calls, one per function at its address. Each module is a mapping
//! with its path and GNU build id (hex), marked symbolized, so that pprof shows our names and a
//! fleet can still symbolize centrally by build id. The profile is built in memory (bounded by the
//! distinct stacks) and compressed once.

use std::collections::{HashMap, HashSet};
use std::io::{self, Write};
use std::sync::Arc;

use flate2::write::GzEncoder;

use super::proto::{fbytes, fv, msg, varint};
use super::{stream, Exporter, Options, Samples, Target, Written};
use crate::cct::Cct;
use crate::mem::{self, MemReport};
use crate::progress::Progress;
use crate::reader::Sampler;
use crate::reader::{SamplerKind, Trace, NO_MODULE};
use crate::samples::{each_sample, has_samples, thread_label};
use crate::symbolize::Symbolizer;

/// `--format pprof`.
pub struct Pprof;

impl Exporter for Pprof {
    fn name(&self) -> &'static str {
        "pprof"
    }

    fn about(&self) -> &'static str {
        "pprof profile.proto, gzipped (go tool pprof, Pyroscope, Parca): samples, allocations, or time per call stack"
    }

    /// Samples are read here, by address ([`each_sample`]): a `SampleSet` would name every
    /// stack's frames first, and the profile names each address once itself.
    fn writes_samples(&self) -> Samples {
        Samples::Streamed
    }

    fn write_functions(
        &self,
        trace: &Trace,
        _opts: Options,
        target: Target<'_>,
        progress: &mut Progress,
    ) -> io::Result<Written> {
        let out = stream(target)?;
        let (profile, errors) = if has_samples(trace) {
            (samples(trace).map_err(io::Error::other)?, Vec::new())
        } else if has_allocations(trace) {
            let rep = mem::analyse_totals(trace).map_err(io::Error::other)?;
            (allocations(trace, &rep), Vec::new())
        } else {
            let cct = Cct::build(trace, None, progress).map_err(io::Error::other)?;
            (function_calls(trace, &cct), cct.errors)
        };
        out.write_all(&gzip(&profile)?)?;
        Ok(Written::from(errors))
    }
}

/// The trace recorded allocations (`record --alloc`).
fn has_allocations(trace: &Trace) -> bool {
    trace.session().sources & ferrotrace_core::schema::source::ALLOCATIONS != 0
}

fn gzip(profile: &[u8]) -> io::Result<Vec<u8>> {
    let mut gz = GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(profile)?;
    gz.finish()
}

/// What the locations of a profile stand for.
#[derive(Clone, Copy)]
enum PlaceKind {
    /// Addresses of the trace's stack table.
    Addresses,
    /// Traced functions.
    Functions,
}

/// What a location stands for.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Place {
    /// An address of the trace's stack table (module, module-relative address).
    Address(u32, u64),
    /// A traced function (its id).
    Function(u32),
    /// What a sample without a stack is charged to (as `report` charges it).
    NoStack,
}

/// A profile being built: the encoded body and the tables that intern its strings, functions,
/// mappings and locations (pprof ids start at 1; string 0 is the empty string).
struct Profile<'t> {
    trace: &'t Trace,
    sym: Option<Symbolizer>,
    body: Vec<u8>,
    strings: HashMap<Arc<str>, u64>,
    string_table: Vec<Arc<str>>,
    functions: HashMap<(Arc<str>, Arc<str>), u64>,
    mappings: HashMap<u32, Option<u64>>,
    /// By mapping id - 1: its module, and where its addresses end.
    mapping_ends: Vec<(u32, u64)>,
    locations: HashMap<Place, u64>,
}

impl<'t> Profile<'t> {
    /// An empty profile of `trace` whose values are `types` (type, unit), and whose locations will
    /// be of kind `place`.
    fn new(trace: &'t Trace, types: &[(&str, &str)], place: PlaceKind) -> Profile<'t> {
        let mut p = Profile {
            trace,
            sym: None,
            body: Vec::new(),
            strings: HashMap::new(),
            string_table: Vec::new(),
            functions: HashMap::new(),
            mappings: HashMap::new(),
            mapping_ends: Vec::new(),
            locations: HashMap::new(),
        };
        p.string("");
        for (kind, unit) in types {
            let (kind, unit) = (p.string(kind), p.string(unit));
            msg(&mut p.body, 1, |b| {
                fv(b, 1, kind);
                fv(b, 2, unit);
            });
        }
        // pprof takes the first mapping for the program's: the executable's, when it is known. A
        // trace may list a file twice (its functions' module, with the load bias, and its stack
        // addresses' module): the one the locations will use.
        let used: HashSet<u32> = match place {
            PlaceKind::Addresses => trace.stacks().iter().map(|n| n.module).collect(),
            PlaceKind::Functions => trace.functions().values().map(|f| f.module).collect(),
        };
        let exe = trace
            .modules()
            .iter()
            .find(|m| m.path == trace.session().exe && used.contains(&m.id));
        if let Some(exe) = exe {
            p.mapping(exe.id);
        }
        fv(&mut p.body, 9, trace.session().start_realtime_ns);
        let end = trace.clocks().last().map_or(0, |c| c.mono_ns);
        fv(&mut p.body, 10, end.saturating_sub(trace.start_ns()));
        p
    }

    fn string(&mut self, s: &str) -> u64 {
        if let Some(&id) = self.strings.get(s) {
            return id;
        }
        let s: Arc<str> = s.into();
        let id = self.string_table.len() as u64;
        self.string_table.push(s.clone());
        self.strings.insert(s, id);
        id
    }

    /// The function named `name` in `file`, whose symbol is `system_name` (mangled; empty when
    /// unknown).
    fn function(&mut self, name: &Arc<str>, file: &Arc<str>, system_name: &str) -> u64 {
        if let Some(&id) = self.functions.get(&(name.clone(), file.clone())) {
            return id;
        }
        let id = self.functions.len() as u64 + 1;
        let (n, f, sys) = (
            self.string(name),
            self.string(file),
            self.string(system_name),
        );
        // A system name equal to the name would be "demangled" again by pprof, which shortens
        // names that look demangled (drops `<…>` and `(…)`): ours are demangled already, and
        // pprof shows them as they are when the two differ.
        msg(&mut self.body, 5, |b| {
            fv(b, 1, id);
            fv(b, 2, n);
            fv(b, 3, sys);
            fv(b, 4, f);
        });
        self.functions.insert((name.clone(), file.clone()), id);
        id
    }

    /// The mapping of module `id`, `None` for what is in no known module.
    fn mapping(&mut self, id: u32) -> Option<u64> {
        if let Some(&m) = self.mappings.get(&id) {
            return m;
        }
        let module = self.trace.modules().iter().find(|m| m.id == id);
        let mapping = module.map(|m| {
            self.mapping_ends.push((m.id, m.bias.wrapping_add(m.size)));
            self.mapping_ends.len() as u64
        });
        self.mappings.insert(id, mapping);
        mapping
    }

    /// Writes the mappings: each module's path, GNU build id (hex), load bias, and end (its text's,
    /// or past the last address seen in it, whichever is further).
    fn write_mappings(&mut self) {
        for (i, (module, end)) in std::mem::take(&mut self.mapping_ends)
            .into_iter()
            .enumerate()
        {
            let Some(m) = self.trace.modules().iter().find(|m| m.id == module) else {
                continue;
            };
            let build_id: String = m.build_id.iter().map(|b| format!("{b:02x}")).collect();
            let (file, build_id) = (self.string(&m.path), self.string(&build_id));
            msg(&mut self.body, 3, |b| {
                fv(b, 1, i as u64 + 1);
                fv(b, 2, m.bias);
                fv(b, 3, end);
                fv(b, 5, file);
                fv(b, 6, build_id);
                // Named here: pprof shows these names and does not look for the binaries.
                for field in [7, 8, 9, 10] {
                    fv(b, field, 1);
                }
            });
        }
    }

    /// The location of an address of the trace's stack table (module, module-relative address):
    /// its mapping, runtime address, and a line per frame there, innermost first.
    fn address(&mut self, module: u32, address: u64) -> u64 {
        let place = Place::Address(module, address);
        if let Some(&id) = self.locations.get(&place) {
            return id;
        }
        let trace = self.trace;
        let frames = self
            .sym
            .get_or_insert_with(|| Symbolizer::new(trace))
            .frames(module, address);
        let lines: Vec<(u64, u64)> = frames
            .iter()
            .map(|f| (self.function(&f.function, &f.file, ""), u64::from(f.line)))
            .collect();
        let bias = trace.modules().iter().find(|m| m.id == module);
        let runtime = address.wrapping_add(bias.map_or(0, |m| m.bias));
        self.location(place, module, runtime, &lines)
    }

    /// The location of traced function `id`, named `name`: its module and address.
    fn traced_function(&mut self, id: u32, name: &str) -> u64 {
        let place = Place::Function(id);
        if let Some(&loc) = self.locations.get(&place) {
            return loc;
        }
        let f = self.trace.functions().get(&id);
        let (module, address) = f.map_or((NO_MODULE, 0), |f| (f.module, f.addr));
        let mangled = f.map_or("", |f| f.mangled.as_str());
        let line = (self.function(&name.into(), &"".into(), mangled), 0);
        self.location(place, module, address, &[line])
    }

    /// A new location: its mapping (module), runtime address and lines (function, line number).
    fn location(&mut self, place: Place, module: u32, address: u64, lines: &[(u64, u64)]) -> u64 {
        let mapping = self.mapping(module);
        if let Some(m) = mapping {
            let end = &mut self.mapping_ends[m as usize - 1].1;
            *end = (*end).max(address.saturating_add(1));
        }
        let id = self.locations.len() as u64 + 1;
        msg(&mut self.body, 4, |b| {
            fv(b, 1, id);
            if let Some(m) = mapping {
                fv(b, 2, m);
            }
            fv(b, 3, address);
            for &(function, line) in lines {
                msg(b, 4, |b| {
                    fv(b, 1, function);
                    fv(b, 2, line);
                });
            }
        });
        self.locations.insert(place, id);
        id
    }

    /// The locations of address stack `stack` (an index into the trace's stack table), leaf first;
    /// without a stack, `[no stack]` (pprof leaves out a sample without locations).
    fn address_stack(&mut self, stack: Option<u32>) -> Vec<u64> {
        if stack.is_none() {
            let id = match self.locations.get(&Place::NoStack) {
                Some(&id) => id,
                None => {
                    let line = (self.function(&"[no stack]".into(), &"".into(), ""), 0);
                    self.location(Place::NoStack, 0, 0, &[line])
                }
            };
            return vec![id];
        }
        let mut ids = Vec::new();
        let mut cur = stack;
        while let Some(node) = cur.and_then(|c| self.trace.stacks().get(c as usize)) {
            ids.push(self.address(node.module, node.address));
            // Parents have smaller ids: the walk ends.
            cur = node.parent.filter(|&p| Some(p) < cur);
        }
        ids
    }

    /// One sample: its locations (leaf first), values, and labels (key, text or number).
    fn sample(&mut self, locations: &[u64], values: &[u64], labels: &[(&str, Label<'_>)]) {
        let labels: Vec<(u64, Label<'_>)> =
            labels.iter().map(|(k, v)| (self.string(k), *v)).collect();
        let labels: Vec<(u64, u32, u64)> = labels
            .into_iter()
            .map(|(k, v)| match v {
                Label::Text(s) => (k, 2, self.string(s)),
                Label::Number(n) => (k, 3, n),
            })
            .collect();
        msg(&mut self.body, 2, |b| {
            packed(b, 1, locations);
            packed(b, 2, values);
            for (key, field, value) in labels {
                msg(b, 3, |b| {
                    fv(b, 1, key);
                    fv(b, field, value);
                });
            }
        });
    }

    /// The encoded profile (the string table last: every string is known by then).
    fn finish(mut self) -> Vec<u8> {
        self.write_mappings();
        for s in std::mem::take(&mut self.string_table) {
            fbytes(&mut self.body, 6, s.as_bytes());
        }
        self.body
    }
}

/// A sample label's value.
#[derive(Clone, Copy)]
enum Label<'a> {
    Text(&'a str),
    Number(u64),
}

/// A packed repeated varint field.
fn packed(b: &mut Vec<u8>, field: u32, values: &[u64]) {
    let mut list = Vec::with_capacity(values.len() * 2);
    for &v in values {
        varint(&mut list, v);
    }
    fbytes(b, field, &list);
}

/// A sampler's pprof value type.
fn sample_type(s: &Sampler) -> (&str, &'static str) {
    match s.kind {
        SamplerKind::CpuClock => ("cpu", "nanoseconds"),
        SamplerKind::OffCpu => ("off_cpu", "nanoseconds"),
        SamplerKind::Uprobe | SamplerKind::Tracepoint => (s.spelling.as_str(), "count"),
    }
}

/// The profile of a trace's samples.
fn samples(trace: &Trace) -> Result<Vec<u8>, crate::reader::ReadError> {
    let mut types = vec![("samples", "count")];
    types.extend(trace.samplers().iter().map(sample_type));
    let mut p = Profile::new(trace, &types, PlaceKind::Addresses);
    // Samples and summed weight per (address stack, thread, sampler), in first-seen order.
    let mut totals: HashMap<(Option<u32>, u32, u32), (u64, u64)> = HashMap::new();
    let mut order = Vec::new();
    each_sample(trace, |e, stack| {
        let key = (stack, e.tid, e.fields[0] as u32);
        let t = totals.entry(key).or_insert_with(|| {
            order.push(key);
            (0, 0)
        });
        t.0 += 1;
        t.1 += e.fields[1];
    })?;
    for key @ (stack, tid, sampler) in order {
        let (count, weight) = totals[&key];
        let mut values = vec![0; types.len()];
        values[0] = count;
        if let Some(v) = values.get_mut(sampler as usize + 1) {
            *v = weight;
        }
        let locations = p.address_stack(stack);
        let name = trace.threads().get(&tid).map_or("", |t| t.name.as_str());
        let thread = thread_label(name, tid);
        p.sample(
            &locations,
            &values,
            &[
                ("thread", Label::Text(&thread)),
                ("tid", Label::Number(u64::from(tid))),
            ],
        );
    }
    if let Some(cpu) = trace
        .samplers()
        .iter()
        .position(|s| s.kind == SamplerKind::CpuClock)
    {
        let (kind, unit) = (p.string("cpu"), p.string("nanoseconds"));
        msg(&mut p.body, 11, |b| {
            fv(b, 1, kind);
            fv(b, 2, unit);
        });
        fv(
            &mut p.body,
            12,
            1_000_000_000 / u64::from(trace.sample_frequency().max(1)),
        );
        let default = p.string(types[cpu + 1].0);
        fv(&mut p.body, 14, default);
    }
    Ok(p.finish())
}

/// The profile of a trace's allocations: what `mem` counts, by address stack.
fn allocations(trace: &Trace, rep: &MemReport) -> Vec<u8> {
    let mut p = Profile::new(
        trace,
        &[
            ("alloc_objects", "count"),
            ("alloc_space", "bytes"),
            ("inuse_objects", "count"),
            ("inuse_space", "bytes"),
        ],
        PlaceKind::Addresses,
    );
    let mut values: HashMap<Option<u32>, [u64; 4]> = HashMap::new();
    for g in &rep.by_address_stack {
        let v = values.entry(g.stack).or_default();
        (v[0], v[1]) = (g.blocks, g.bytes);
    }
    for g in &rep.leaks_by_address_stack {
        let v = values.entry(g.stack).or_default();
        (v[2], v[3]) = (g.blocks, g.bytes);
    }
    // Most bytes first (the order of `mem`'s lists), for a stable file.
    let mut stacks: Vec<(Option<u32>, [u64; 4])> = values.into_iter().collect();
    stacks.sort_by(|a, b| (b.1[1], b.1[3], a.0).cmp(&(a.1[1], a.1[3], b.0)));
    for (stack, v) in stacks {
        let locations = p.address_stack(stack);
        p.sample(&locations, &v, &[]);
    }
    // `go tool pprof` shows allocated bytes unless told otherwise (-sample_index=inuse_space).
    let default = p.string("alloc_space");
    fv(&mut p.body, 14, default);
    p.finish()
}

/// The profile of a trace's function calls: calls and self time per call path.
fn function_calls(trace: &Trace, cct: &Cct) -> Vec<u8> {
    let mut p = Profile::new(
        trace,
        &[("calls", "count"), ("wall", "nanoseconds")],
        PlaceKind::Functions,
    );
    cct.walk(|n, path| {
        let node = &cct.nodes[n];
        if node.calls == 0 && node.self_ns == 0 {
            return;
        }
        let locations: Vec<u64> = path
            .iter()
            .rev()
            .map(|&f| p.traced_function(f, &cct.names.get(f)))
            .collect();
        p.sample(&locations, &[node.calls, node.self_ns], &[]);
    });
    let default = p.string("wall");
    fv(&mut p.body, 14, default);
    p.finish()
}
