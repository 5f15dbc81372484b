//! Parquet datasets read back: the samples of every part below a directory (each part a directory
//! that `dump --format parquet` wrote, one per trace) as one [`SampleSet`], so that `report` reads
//! a dataset of many runs or hosts as it reads one trace, with every view of samples it has.
//!
//! A part's tables are its `samplers`, `threads`, `stacks` and `samples` (docs/format.md, schema
//! version [`SCHEMA_VERSION`], checked in each file). The stacks table's `frames` names every
//! function at each address, inlined ones included, so the frames read back are the trace's by name
//! (without file and line) and `report` counts a dataset's samples as it counts its traces', with
//! or without `--inline`. Samplers of the same kind and name in several parts are one sampler;
//! threads are told apart by their id alone.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow_array::types::UInt32Type;
use arrow_array::{
    Array, DictionaryArray, Int64Array, ListArray, RecordBatch, StringArray, UInt32Array,
    UInt64Array,
};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;

use crate::dump::parquet::{SCHEMA_VERSION, SCHEMA_VERSION_KEY};
use crate::reader::SamplerKind;
use crate::samples::{EventInfo, Frame, Sample, SampleSet, ThreadInfo};
use crate::stacks::FrameTable;

/// The parts below `root`: the directories holding a `samples.parquet`, in path order (symbolic
/// links are not followed).
pub fn parts(root: &Path) -> io::Result<Vec<PathBuf>> {
    let mut parts = Vec::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        if dir.join("samples.parquet").is_file() {
            parts.push(dir.clone());
        }
        for entry in std::fs::read_dir(&dir).map_err(|e| in_file(&dir, e))? {
            let entry = entry.map_err(|e| in_file(&dir, e))?;
            if entry.file_type().map_err(|e| in_file(&dir, e))?.is_dir() {
                dirs.push(entry.path());
            }
        }
    }
    parts.sort();
    Ok(parts)
}

/// The samples of every part below `root`, and the parts read.
pub fn load_samples(root: &Path) -> io::Result<(SampleSet, Vec<PathBuf>)> {
    let parts = parts(root)?;
    let mut loader = Loader::default();
    for part in &parts {
        loader.part(part)?;
    }
    let mut set = loader.set;
    set.frames = loader.table.frames;
    set.stacks = loader.table.nodes;
    set.complete = true;
    Ok((set, parts))
}

#[derive(Default)]
struct Loader {
    set: SampleSet,
    table: FrameTable,
    events: HashMap<(u32, String), u32>,
    threads: HashMap<u32, usize>,
}

impl Loader {
    fn part(&mut self, dir: &Path) -> io::Result<()> {
        let mut events: HashMap<u32, u32> = HashMap::new();
        for b in read(&dir.join("samplers.parquet"))? {
            let (sampler, kind) = (u32s(&b, "sampler")?, u32s(&b, "kind")?);
            let (name, freq) = (strings(&b, "name")?, u32s(&b, "frequency")?);
            for (i, name) in name.into_iter().enumerate() {
                let kind_id = kind.value(i);
                let Some(k) = SamplerKind::from_u64(u64::from(kind_id)) else {
                    return Err(io::Error::other(format!(
                        "{}: sampler kind {kind_id} unknown",
                        dir.display()
                    )));
                };
                let next = self.set.events.len() as u32;
                let global = *self
                    .events
                    .entry((kind_id, name.clone()))
                    .or_insert_with(|| {
                        self.set.events.push(EventInfo { kind: k, name });
                        next
                    });
                events.insert(sampler.value(i), global);
                self.set.frequency = self.set.frequency.max(freq.value(i));
            }
        }
        for b in read(&dir.join("threads.parquet"))? {
            let (tid, pid, name) = (u32s(&b, "thread")?, u32s(&b, "pid")?, strings(&b, "name")?);
            for (i, name) in name.into_iter().enumerate() {
                let next = self.set.threads.len();
                self.threads.entry(tid.value(i)).or_insert_with(|| {
                    self.set.threads.push(ThreadInfo {
                        tid: tid.value(i),
                        pid: pid.value(i),
                        name,
                    });
                    next
                });
                if self.set.pid == 0 {
                    self.set.pid = pid.value(i);
                }
            }
        }
        // Stack id → frame-level node; parents come before their children (smaller ids).
        let mut rows: Vec<(u32, Option<u32>, Vec<String>)> = Vec::new();
        for b in read(&dir.join("stacks.parquet"))? {
            let (id, parent) = (u32s(&b, "stack_id")?, u32s(&b, "parent")?);
            let frames: &ListArray = column(&b, "frames")?;
            for i in 0..b.num_rows() {
                let names = frames.value(i);
                let names = names
                    .as_any()
                    .downcast_ref::<StringArray>()
                    .ok_or_else(|| io::Error::other("column frames: not strings"))?;
                let names = names.iter().map(|n| n.unwrap_or_default().to_string());
                rows.push((
                    id.value(i),
                    parent.is_valid(i).then(|| parent.value(i)),
                    names.collect(),
                ));
            }
        }
        rows.sort_unstable_by_key(|r| r.0);
        let mut node_of: HashMap<u32, Option<u32>> = HashMap::new();
        for (id, parent, functions) in rows {
            let mut node = match parent {
                None => None,
                Some(p) => *node_of.get(&p).ok_or_else(|| {
                    io::Error::other(format!(
                        "{}: stack {id}'s parent {p} is not before it",
                        dir.join("stacks.parquet").display()
                    ))
                })?,
            };
            // Outermost (the function containing the address) first, then what was inlined into it.
            for (depth, function) in functions.iter().rev().enumerate() {
                let frame = self.table.frame(Frame {
                    function: Arc::from(function.as_str()),
                    file: Arc::from(""),
                    line: 0,
                    inlined: depth > 0,
                    unknown: false,
                    kernel: false,
                });
                node = Some(self.table.node(node, frame));
            }
            node_of.insert(id, node);
        }
        for b in read(&dir.join("samples.parquet"))? {
            let (time, tid, stack) = (
                i64s(&b, "time_ns")?,
                u32s(&b, "thread")?,
                u32s(&b, "stack_id")?,
            );
            let (sampler, weight) = (u32s(&b, "sampler")?, u64s(&b, "weight")?);
            for i in 0..b.num_rows() {
                let event = *events.get(&sampler.value(i)).ok_or_else(|| {
                    io::Error::other(format!(
                        "{}: sampler {} is not in samplers.parquet",
                        dir.display(),
                        sampler.value(i)
                    ))
                })?;
                self.set.samples.push(Sample {
                    time_ns: time.value(i).max(0) as u64,
                    tid: tid.value(i),
                    event,
                    stack: stack
                        .is_valid(i)
                        .then(|| node_of.get(&stack.value(i)).copied().flatten())
                        .flatten(),
                    weight: weight.value(i),
                });
            }
        }
        Ok(())
    }
}

fn in_file(path: &Path, e: impl std::fmt::Display) -> io::Error {
    io::Error::other(format!("{}: {e}", path.display()))
}

/// The record batches of the Parquet file at `path`, after checking its schema version.
fn read(path: &Path) -> io::Result<Vec<RecordBatch>> {
    let file = File::open(path).map_err(|e| in_file(path, e))?;
    let builder = ParquetRecordBatchReaderBuilder::try_new(file).map_err(|e| in_file(path, e))?;
    let version = builder
        .metadata()
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|kv| kv.key == SCHEMA_VERSION_KEY))
        .and_then(|kv| kv.value.clone());
    if version.as_deref() != Some(SCHEMA_VERSION.to_string().as_str()) {
        return Err(in_file(
            path,
            format!(
                "schema version {}, this ferrotrace reads {SCHEMA_VERSION} (dump the trace again)",
                version.as_deref().unwrap_or("missing")
            ),
        ));
    }
    let reader = builder.build().map_err(|e| in_file(path, e))?;
    reader
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| in_file(path, e))
}

fn column<'b, T: 'static>(b: &'b RecordBatch, name: &str) -> io::Result<&'b T> {
    b.column_by_name(name)
        .and_then(|c| c.as_any().downcast_ref::<T>())
        .ok_or_else(|| io::Error::other(format!("no column {name} of the expected type")))
}

fn u32s<'b>(b: &'b RecordBatch, name: &str) -> io::Result<&'b UInt32Array> {
    column(b, name)
}

fn u64s<'b>(b: &'b RecordBatch, name: &str) -> io::Result<&'b UInt64Array> {
    column(b, name)
}

fn i64s<'b>(b: &'b RecordBatch, name: &str) -> io::Result<&'b Int64Array> {
    column(b, name)
}

/// A string column, plain or dictionary-encoded, as strings (null: empty).
fn strings(b: &RecordBatch, name: &str) -> io::Result<Vec<String>> {
    if let Ok(plain) = column::<StringArray>(b, name) {
        return Ok(plain
            .iter()
            .map(|s| s.unwrap_or_default().to_string())
            .collect());
    }
    let dict: &DictionaryArray<UInt32Type> = column(b, name)?;
    let values: &StringArray = dict
        .values()
        .as_any()
        .downcast_ref()
        .ok_or_else(|| io::Error::other(format!("column {name}: not strings")))?;
    Ok(dict
        .keys()
        .iter()
        .map(|k| k.map_or_else(String::new, |k| values.value(k as usize).to_string()))
        .collect())
}
