//! Merging a profile into a function trace after the program ended (`record --sample`): the End
//! chunk cut off, the profile's samplers, modules, stacks and one process's samples appended with ids
//! after the trace's own and times in the trace's ticks, the End chunk written again. The layout is
//! docs/format.md's ("Samples"); what records and when is [`super`]'s.

use std::collections::{HashMap, HashSet};
use std::io::{BufWriter, Seek, SeekFrom};
use std::os::unix::fs::FileExt;
use std::path::Path;

use ferrotrace_core::builder::{encode_events, Event};
use ferrotrace_core::format::{ChunkHeader, ChunkKind, CHUNK_HEADER_LEN, FILE_HEADER_LEN};
use ferrotrace_core::schema::{
    self, Payload, Sampler, SamplerLosses, SamplersHeader, StackNode, StacksHeader,
};
use ferrotrace_core::writer::TraceWriter;
use ferrotrace_reader::reader::{EventKind, Trace};

use super::SampleError;

/// Sample events per Samples chunk, and stack nodes per Stacks chunk.
const PER_CHUNK: usize = 4096;

/// Offset and header of the last chunk of the trace's readable prefix (`valid_len` bytes).
fn last_chunk(file: &std::fs::File, valid_len: u64) -> std::io::Result<Option<(u64, ChunkHeader)>> {
    let mut at = FILE_HEADER_LEN as u64;
    let mut last = None;
    let mut h = [0u8; CHUNK_HEADER_LEN];
    while at < valid_len {
        file.read_exact_at(&mut h, at)?;
        let header = ChunkHeader::decode(&h);
        last = Some((at, header));
        at += (CHUNK_HEADER_LEN as u64) + u64::from(header.len);
    }
    Ok(last)
}

/// Merges the samples of the profile at `samples` that belong to the process of the function trace at
/// `trace` into it (see the module docs); returns how many.
pub fn merge(trace: &Path, samples: &Path) -> Result<u64, SampleError> {
    let t = Trace::open(trace).map_err(SampleError::Read)?;
    let p = Trace::open(samples).map_err(SampleError::Read)?;
    let Some(end) = t.end() else {
        return Err(SampleError::NotMergeable(
            "the trace has no End chunk (the program did not finish it): samples not merged".into(),
        ));
    };
    if !t.samplers().is_empty() || !t.problems().is_empty() || t.truncation().is_some() {
        return Err(SampleError::NotMergeable(
            "the trace holds samples already or is damaged: samples not merged".into(),
        ));
    }
    let io = |e| SampleError::Io(trace.to_path_buf(), e);
    // The file the program's runtime created: never through a link, never someone else's.
    let Some(file) = crate::outcome::open_own_trace(trace).map_err(io)? else {
        return Err(SampleError::NotMergeable(
            "the trace file is not ours to append to".into(),
        ));
    };
    let Some((end_at, end_header)) = last_chunk(&file, t.valid_len()).map_err(io)? else {
        return Err(SampleError::NotMergeable("the trace is empty".into()));
    };
    if ChunkKind::from_u32(end_header.kind) != Some(ChunkKind::End) {
        return Err(SampleError::NotMergeable(
            "the trace does not end with its End chunk".into(),
        ));
    }

    // The profile's modules and stack nodes get ids past the trace's own.
    let first_module = t.modules().iter().map(|m| m.id).max().unwrap_or(0) + 1;
    let module_ids: HashMap<u32, u32> = p
        .modules()
        .iter()
        .enumerate()
        .map(|(i, m)| (m.id, first_module + i as u32))
        .collect();
    let first_node = t.stacks().len() as u32;

    file.set_len(end_at).map_err(io)?;
    let mut file = file;
    file.seek(SeekFrom::End(0)).map_err(io)?;
    let mut w = TraceWriter::resume(BufWriter::new(file), end_at, end_header.seq);
    let head = SamplersHeader {
        call_graph: p.call_graph(),
        frequency: p.sample_frequency(),
        count: p.samplers().len() as u32,
    };
    let list: Vec<Sampler<'_>> = p
        .samplers()
        .iter()
        .map(|s| Sampler {
            kind: s.kind,
            spelling: &s.spelling,
        })
        .collect();
    // The sampler's losses trail the list (the End chunk keeps counting the runtime's alone).
    let mut samplers = Vec::new();
    let _ = head.encode(&mut samplers);
    for s in &list {
        let _ = s.encode(&mut samplers);
    }
    if let Some(end) = p.end() {
        let losses = SamplerLosses {
            lost: end.lost,
            unwind_errors: end.unwind_errors,
        };
        let _ = losses.encode(&mut samplers);
    }
    w.chunk(ChunkKind::Samplers, &samplers).map_err(io)?;
    for m in p.modules() {
        w.write(&schema::Module {
            id: module_ids[&m.id],
            bias: m.bias,
            size: m.size,
            path: &m.path,
            build_id: &m.build_id,
        })
        .map_err(io)?;
    }
    let nodes: Vec<StackNode> = p
        .stacks()
        .iter()
        .map(|n| StackNode {
            parent: n.parent.map(|q| q + first_node),
            module: module_ids.get(&n.module).copied().unwrap_or(0),
            address: n.address,
        })
        .collect();
    for (i, part) in nodes.chunks(PER_CHUNK).enumerate() {
        let head = StacksHeader {
            first_id: first_node + (i * PER_CHUNK) as u32,
            count: part.len() as u32,
        };
        w.write_list(&head, part).map_err(io)?;
    }
    let named: HashSet<u32> = t
        .threads()
        .values()
        .filter(|th| !th.name.is_empty())
        .map(|th| th.tid)
        .collect();
    let mut merged = 0u64;
    let mut buf = Vec::new();
    for th in p.threads().values() {
        if th.pid != t.session().pid {
            // Another process's: its own trace takes them.
            continue;
        }
        if !named.contains(&th.tid) {
            w.write(&schema::Thread {
                tid: th.tid,
                name: &th.name,
                pid: 0,
                registered_ticks: 0,
            })
            .map_err(io)?;
        }
        let mut events = Vec::with_capacity(PER_CHUNK);
        let mut seq = 0u32;
        let mut stream = p.thread_events(th.tid).map_err(SampleError::Read)?;
        while let Some(e) = stream.next_ref() {
            let e = e.map_err(SampleError::Read)?;
            if e.kind != EventKind::Sample {
                continue;
            }
            events.push(Event {
                // The inverse of the conversion readers apply to this trace's ticks.
                ticks: t.ns_to_tsc(e.ts_ns),
                kind: EventKind::Sample,
                id: if e.id == 0 { 0 } else { e.id + first_node },
                payload: Vec::new(),
                fields: e.fields,
            });
            if events.len() == PER_CHUNK {
                write_samples(&mut w, th.tid, seq, &events, &mut buf).map_err(io)?;
                merged += events.len() as u64;
                seq += 1;
                events.clear();
            }
        }
        if !events.is_empty() {
            write_samples(&mut w, th.tid, seq, &events, &mut buf).map_err(io)?;
            merged += events.len() as u64;
        }
    }
    let end = schema::End {
        chunks: w.next_seq(),
        ..end
    };
    w.write(&end).map_err(io)?;
    w.flush().map_err(io)?;
    Ok(merged)
}

fn write_samples(
    w: &mut TraceWriter<BufWriter<std::fs::File>>,
    tid: u32,
    seq: u32,
    events: &[Event],
    buf: &mut Vec<u8>,
) -> std::io::Result<()> {
    buf.clear();
    encode_events(tid, seq, events, buf);
    w.chunk(ChunkKind::Samples, buf)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    use ferrotrace_core::builder::TraceBuilder;
    use ferrotrace_core::schema::{source, Mode, SamplerKind};

    fn write(name: &str, bytes: Vec<u8>) -> PathBuf {
        let path = std::env::temp_dir().join(format!("ft-merge-{}-{name}", std::process::id()));
        std::fs::write(&path, bytes).unwrap();
        path
    }

    /// A function trace with an allocation stack of its own, and a profile of the same thread: the
    /// merge keeps both tables apart, puts each sample at its time among the function events, and
    /// leaves a trace every check of the reader accepts.
    #[test]
    fn merged_samples_take_their_place_and_ids_after_the_trace_s_own() {
        let mut t = TraceBuilder::new(
            Vec::new(),
            "/bin/t",
            source::XRAY | source::ALLOCATIONS,
            Mode::Lossless,
        )
        .unwrap();
        t.module(5, "/bin/t", b"").unwrap();
        t.function(1, 0x1000, 16, "t::f").unwrap();
        t.thread(7, "main").unwrap();
        let alloc_stack = t.stack(None, 5, 0x10);
        t.event(7, 1_000, EventKind::Entry, 1).unwrap();
        t.alloc(7, 2_000, Some(alloc_stack), 64, 0x5000).unwrap();
        t.event(7, 5_000, EventKind::Exit, 1).unwrap();
        let trace = write("trace", t.finish().unwrap());

        let mut p = TraceBuilder::new(Vec::new(), "/bin/t", source::SAMPLES, Mode::Drop).unwrap();
        p.module(1, "/bin/t", b"").unwrap();
        let cpu = p.sampler(SamplerKind::CpuClock, "cpu-clock");
        let outer = p.stack(None, 1, 0x20);
        let inner = p.stack(Some(outer), 1, 0x30);
        p.thread(7, "main").unwrap();
        p.thread(8, "worker").unwrap();
        p.sample(7, 500, Some(inner), cpu, 1_000).unwrap();
        p.sample(7, 3_000, Some(outer), cpu, 1_000).unwrap();
        p.sample(8, 3_500, None, cpu, 1_000).unwrap();
        p.sample(7, 6_000, Some(inner), cpu, 1_000).unwrap();
        // Nine samples the kernel dropped: the profile's End chunk counts them.
        p.event(7, 6_500, EventKind::Lost, 9).unwrap();
        let profile = write("profile", p.finish().unwrap());

        assert_eq!(merge(&trace, &profile).unwrap(), 4);
        let m = Trace::open(&trace).unwrap();
        assert!(m.problems().is_empty(), "{:?}", m.problems());
        assert!(m.truncation().is_none() && m.end().is_some());
        assert_eq!(m.samplers().len(), 1);
        // The sampler's losses are the Samplers chunk's; the End chunk's stay the runtime's.
        let losses = SamplerLosses {
            lost: 9,
            unwind_errors: 0,
        };
        assert_eq!(m.sampler_losses(), Some(losses));
        assert_eq!(m.end().unwrap().lost, 0);
        let main: Vec<(u64, EventKind, u32)> = m
            .thread_events(7)
            .unwrap()
            .map(|e| e.map(|e| (e.ts_ns, e.kind, e.id)).unwrap())
            .collect();
        // The profile's nodes follow the trace's one (the allocation's): ids 1 and 2.
        assert_eq!(
            main,
            [
                (500, EventKind::Sample, 3),
                (1_000, EventKind::Entry, 1),
                (2_000, EventKind::Alloc, alloc_stack + 1),
                (3_000, EventKind::Sample, 2),
                (5_000, EventKind::Exit, 1),
                (6_000, EventKind::Sample, 3),
            ]
        );
        // Each event keeps its own fields through the merge (the reader's side table is rebuilt in
        // the merged order): the allocation's size and address, each sample's weight.
        let fields: Vec<(EventKind, u64, u64)> = m
            .thread_events(7)
            .unwrap()
            .map(|e| e.map(|e| (e.kind, e.fields[0], e.fields[1])).unwrap())
            .filter(|(k, _, _)| matches!(k, EventKind::Alloc | EventKind::Sample))
            .collect();
        assert_eq!(fields[1], (EventKind::Alloc, 64, 0x5000));
        for (i, f) in [0, 2, 3].map(|i| (i, fields[i])) {
            assert_eq!((f.0, f.2), (EventKind::Sample, 1_000), "sample {i}: {f:?}");
        }
        let profile_module = m.stacks()[1].module;
        assert_ne!(profile_module, 5);
        assert_eq!(m.stacks()[0].module, 5);
        assert_eq!(m.stacks()[2].parent, Some(1));
        assert!(m
            .modules()
            .iter()
            .any(|x| x.id == profile_module && x.path == "/bin/t"));
        assert_eq!(m.threads()[&8].events, 1);
        // Once is all: a trace that holds samples takes no more.
        assert!(matches!(
            merge(&trace, &profile),
            Err(SampleError::NotMergeable(_))
        ));
        let _ = std::fs::remove_file(&trace);
        let _ = std::fs::remove_file(&profile);
    }
}
