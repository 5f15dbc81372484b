//! `dump --format parquet -o DIR`: the trace as a Parquet dataset, one file per table, for DuckDB,
//! DataFusion, Spark or pandas. Every table has a `run` column (the trace's run identifier, see
//! [`run_id`]), so the directories of many traces read as one dataset
//! (`read_parquet('runs/*/calls.parquet')`). The tables and their columns are documented in
//! `docs/format.md` ("Parquet dataset"), whose version ([`SCHEMA_VERSION`]) every file carries in its
//! key-value metadata.
//!
//! Written while streaming the events, with bounded memory: each table buffers at most [`BATCH`]
//! rows before handing them to the Parquet writer, which closes a row group every [`ROW_GROUP`]
//! rows; per thread the call stack; for allocations, the blocks still live (a row is written when
//! its block is freed, or at the end for blocks never freed). Names (functions, modules, threads,
//! the run) are dictionary columns; times are int64 nanoseconds since the trace's start
//! (`metadata.start_ns` gives that start on CLOCK_MONOTONIC), negative for samples `record --sample`
//! took before the runtime started (docs/format.md); columns are Snappy-compressed.
//!
//! Calls carry their durations both in nanoseconds and in TSC ticks: `report` sums ticks and
//! converts the sum (`(ticks * ns_per_tick_q32 + 2^31) >> 32`, `metadata.ns_per_tick_q32`), so a query
//! that does the same gets `report`'s totals to the nanosecond; `outermost` marks the frames
//! `report`'s `total` counts (no frame of the same function below them on the stack).

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::Arc;

use arrow_array::builder::{ListBuilder, StringBuilder};
use arrow_array::types::UInt32Type;
use arrow_array::{
    ArrayRef, BooleanArray, DictionaryArray, Int64Array, RecordBatch, StringArray, UInt32Array,
    UInt64Array,
};
use arrow_schema::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, Encoding};
use parquet::file::metadata::KeyValue;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

use super::{walk_stacks, Exporter, Options, Step, Target, Written};
use crate::callstack::{EndKind, StackEvent};
use crate::names::Names;
use crate::progress::Progress;
use crate::reader::{EventKind, Trace};
use crate::symbolize::Symbolizer;

/// The version of the dataset's schema (its tables, their columns, what each means), stated in
/// `docs/format.md` and written into every file's key-value metadata under [`SCHEMA_VERSION_KEY`].
/// It changes when a column or table is removed or renamed or changes its type or meaning; a new
/// column or table leaves it as it is (readers name the columns they read).
pub const SCHEMA_VERSION: u32 = 1;
/// The key of [`SCHEMA_VERSION`] in each Parquet file's key-value metadata.
pub const SCHEMA_VERSION_KEY: &str = "ferrotrace.schema_version";

/// Rows a table buffers before writing them.
pub const BATCH: usize = 64 << 10;
/// Rows per row group.
pub const ROW_GROUP: usize = 1 << 20;
/// The tables of a dataset, in the order [`write()`] writes them (`NAME.parquet`).
pub const TABLES: [&str; 9] = [
    "functions",
    "threads",
    "samplers",
    "metadata",
    "stacks",
    "calls",
    "samples",
    "allocations",
    "events",
];

/// The run identifier of a trace: `EXE-PID-START` (START: the wall-clock start in nanoseconds since
/// 1970), the same for every dump of one trace and distinct between traces, the periods of one
/// `profile --every` session among them (two of those can begin within one second).
pub fn run_id(trace: &Trace) -> String {
    format!(
        "{}-{}-{}",
        trace.session().exe_name(),
        trace.session().pid,
        trace.session().start_realtime_ns
    )
}

/// A column's type.
#[derive(Clone, Copy)]
enum Ty {
    U32,
    U64,
    I64,
    Bool,
    /// Strings, dictionary-encoded by the caller (keys into a fixed list).
    Dict,
    Str,
    /// A list of strings.
    Strs,
}

/// One value of a row.
#[derive(Clone, Copy)]
enum V<'a> {
    U32(u32),
    U64(u64),
    I64(i64),
    Bool(bool),
    /// A key into the column's dictionary.
    Key(u32),
    Str(&'a str),
    Strs(&'a [String]),
    Null,
}

enum Col {
    U32(Vec<Option<u32>>),
    U64(Vec<Option<u64>>),
    I64(Vec<Option<i64>>),
    Bool(Vec<Option<bool>>),
    Dict(Vec<Option<u32>>, ArrayRef),
    Str(Vec<Option<String>>),
    Strs(ListBuilder<StringBuilder>),
}

/// One table: its file's writer and the rows not yet written.
struct Table {
    writer: ArrowWriter<File>,
    schema: Arc<Schema>,
    cols: Vec<Col>,
    rows: usize,
}

impl Table {
    /// A table `NAME.parquet` in `dir`; `dicts` gives the values of each [`Ty::Dict`] column, in
    /// order.
    fn create(
        dir: &Path,
        name: &str,
        columns: &[(&str, Ty, bool)],
        dicts: &[&ArrayRef],
    ) -> io::Result<Table> {
        debug_assert!(TABLES.contains(&name), "{name} is not in TABLES");
        let mut dicts = dicts.iter();
        let mut cols = Vec::new();
        let fields: Vec<Field> = columns
            .iter()
            .map(|&(n, ty, nullable)| {
                let dt = match ty {
                    Ty::U32 => {
                        cols.push(Col::U32(Vec::new()));
                        DataType::UInt32
                    }
                    Ty::U64 => {
                        cols.push(Col::U64(Vec::new()));
                        DataType::UInt64
                    }
                    Ty::I64 => {
                        cols.push(Col::I64(Vec::new()));
                        DataType::Int64
                    }
                    Ty::Bool => {
                        cols.push(Col::Bool(Vec::new()));
                        DataType::Boolean
                    }
                    Ty::Dict => {
                        let values = dicts.next().expect("a dictionary per Dict column");
                        cols.push(Col::Dict(Vec::new(), Arc::clone(values)));
                        DataType::Dictionary(Box::new(DataType::UInt32), Box::new(DataType::Utf8))
                    }
                    Ty::Str => {
                        cols.push(Col::Str(Vec::new()));
                        DataType::Utf8
                    }
                    Ty::Strs => {
                        cols.push(Col::Strs(ListBuilder::new(StringBuilder::new())));
                        DataType::List(Arc::new(Field::new_list_field(DataType::Utf8, true)))
                    }
                };
                Field::new(n, dt, nullable)
            })
            .collect();
        let schema = Arc::new(Schema::new(fields));
        let path = dir.join(format!("{name}.parquet"));
        let file = ferrotrace_core::output::create_result(&path)
            .map_err(|e| io::Error::other(e.to_string()))?;
        let mut props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_max_row_group_row_count(Some(ROW_GROUP))
            // Statistics per row group, no page index: the writer keeps the page index of the whole
            // file in memory until it closes (about 17 MB at 330 M calls); the footer's row groups
            // alone take about 3 KB per million rows.
            .set_statistics_enabled(EnabledStatistics::Chunk)
            .set_offset_index_disabled(true)
            .set_created_by(format!("ferrotrace {}", env!("CARGO_PKG_VERSION")))
            .set_key_value_metadata(Some(vec![KeyValue::new(
                SCHEMA_VERSION_KEY.to_string(),
                SCHEMA_VERSION.to_string(),
            )]));
        // 64-bit integers (ids, times, durations, addresses) are delta-encoded and bit-packed:
        // consecutive call ids and start times take a few bits each, where a dictionary would
        // give up on their many distinct values.
        for &(n, ty, _) in columns {
            if matches!(ty, Ty::U64 | Ty::I64) {
                let path = ColumnPath::from(n);
                props = props
                    .set_column_dictionary_enabled(path.clone(), false)
                    .set_column_encoding(path, Encoding::DELTA_BINARY_PACKED);
            }
        }
        let props = props.build();
        let writer = ArrowWriter::try_new(file, Arc::clone(&schema), Some(props))
            .map_err(io::Error::other)?;
        Ok(Table {
            writer,
            schema,
            cols,
            rows: 0,
        })
    }

    /// Appends one row (values in column order).
    fn row(&mut self, values: &[V<'_>]) -> io::Result<()> {
        debug_assert_eq!(values.len(), self.cols.len());
        for (c, v) in self.cols.iter_mut().zip(values) {
            match (c, *v) {
                (Col::U32(c), V::U32(x)) => c.push(Some(x)),
                (Col::U64(c), V::U64(x)) => c.push(Some(x)),
                (Col::I64(c), V::I64(x)) => c.push(Some(x)),
                (Col::Bool(c), V::Bool(x)) => c.push(Some(x)),
                (Col::Dict(c, _), V::Key(x)) => c.push(Some(x)),
                (Col::Str(c), V::Str(x)) => c.push(Some(x.to_string())),
                (Col::Strs(c), V::Strs(x)) => {
                    for s in x {
                        c.values().append_value(s);
                    }
                    c.append(true);
                }
                (Col::U32(c), V::Null) | (Col::Dict(c, _), V::Null) => c.push(None),
                (Col::U64(c), V::Null) => c.push(None),
                (Col::I64(c), V::Null) => c.push(None),
                (Col::Bool(c), V::Null) => c.push(None),
                (Col::Str(c), V::Null) => c.push(None),
                (Col::Strs(c), V::Null) => c.append(false),
                _ => return Err(io::Error::other("parquet: a value of the wrong type")),
            }
        }
        self.rows += 1;
        if self.rows >= BATCH {
            self.write()?;
        }
        Ok(())
    }

    /// Hands the buffered rows to the writer.
    fn write(&mut self) -> io::Result<()> {
        if self.rows == 0 {
            return Ok(());
        }
        let arrays: Vec<ArrayRef> = self
            .cols
            .iter_mut()
            .map(|c| -> io::Result<ArrayRef> {
                Ok(match c {
                    Col::U32(v) => Arc::new(UInt32Array::from(std::mem::take(v))),
                    Col::U64(v) => Arc::new(UInt64Array::from(std::mem::take(v))),
                    Col::I64(v) => Arc::new(Int64Array::from(std::mem::take(v))),
                    Col::Bool(v) => Arc::new(BooleanArray::from(std::mem::take(v))),
                    Col::Str(v) => Arc::new(StringArray::from(std::mem::take(v))),
                    Col::Strs(b) => Arc::new(b.finish()),
                    Col::Dict(v, values) => Arc::new(
                        DictionaryArray::<UInt32Type>::try_new(
                            UInt32Array::from(std::mem::take(v)),
                            Arc::clone(values),
                        )
                        .map_err(io::Error::other)?,
                    ),
                })
            })
            .collect::<io::Result<_>>()?;
        let batch =
            RecordBatch::try_new(Arc::clone(&self.schema), arrays).map_err(io::Error::other)?;
        self.writer.write(&batch).map_err(io::Error::other)?;
        self.rows = 0;
        Ok(())
    }

    /// Writes what is buffered and the file's footer.
    fn close(mut self) -> io::Result<()> {
        self.write()?;
        self.writer.close().map_err(io::Error::other)?;
        Ok(())
    }
}

/// A list of strings as a dictionary's values.
fn values<S: AsRef<str>>(v: &[S]) -> ArrayRef {
    Arc::new(StringArray::from_iter_values(v.iter().map(|s| s.as_ref())))
}

/// The `function` column of `calls`.
const FUNCTION_COLUMN: usize = 6;

fn end_kind(how: EndKind) -> u32 {
    match how {
        EndKind::Return => 0,
        EndKind::TailCall => 1,
        EndKind::Unwound => 2,
        EndKind::OpenAtEnd => 3,
    }
}

/// An allocation not yet freed.
struct Live {
    time: i64,
    tid: u32,
    size: u64,
    stack: Option<u32>,
}

/// Per-thread state of the calls table (its call stack is [`walk_stacks`]'s).
struct ThreadCalls {
    /// Call ids of the open frames, outermost first.
    ids: Vec<u64>,
    /// Parallel to `ids`: each open frame's arguments as replay shows them (`record -A`).
    args: Vec<Option<Box<str>>>,
    /// By function slot: frames of that function open on this thread (recursion).
    active: Vec<u32>,
    /// The thread's key in the `thread_name` dictionary.
    name_key: u32,
}

/// What a call's row needs of its function, by function id: found once per id instead of hashed at
/// every call (three or four SipHash lookups per call were a tenth of the export's instructions).
#[derive(Clone, Copy)]
struct FunctionKeys {
    /// Its key in the `function` dictionary.
    slot: u32,
    /// Its representative's slot (recursion counts), if the representative is a known function.
    rep: Option<u32>,
    /// Its module's key in the `module` dictionary.
    module: u32,
}

/// Writes the dataset into `dir` (created if needed); returns the read errors met. Every table is
/// refused before the first is written, and the tables are written in a private directory inside
/// `dir`, then renamed into place: a refusal, a full disk or a damaged trace leaves no half dataset
/// that reads as whole (the staging directory is removed).
pub fn write(trace: &Trace, dir: &Path, progress: &mut Progress) -> io::Result<Vec<String>> {
    match std::fs::create_dir(dir) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => return Err(e),
        _ => {}
    }
    if !std::fs::symlink_metadata(dir)?.is_dir() {
        return Err(io::Error::other("not a directory"));
    }
    let table = |dir: &Path, name: &str| dir.join(format!("{name}.parquet"));
    for name in TABLES {
        ferrotrace_core::output::check_result(&table(dir, name))
            .map_err(|e| io::Error::other(e.to_string()))?;
    }
    let staging = ferrotrace_core::output::PrivateDir::new_in(dir, ".ferrotrace-staging")?;
    let errors = write_tables(trace, staging.path(), progress)?;
    for name in TABLES {
        std::fs::rename(table(staging.path(), name), table(dir, name))?;
    }
    Ok(errors)
}

/// Writes every table of the dataset into `dir`, which exists.
fn write_tables(trace: &Trace, dir: &Path, progress: &mut Progress) -> io::Result<Vec<String>> {
    let names = Names::of(trace);
    let reps = names.representatives();
    let t0 = trace.start_ns();
    let rel = |ns: u64| ns as i64 - t0 as i64;
    let run = values(&[run_id(trace)]);

    // Functions: dictionary slot by id (sorted ids), modules by module id.
    let mut ids: Vec<u32> = trace.functions().keys().copied().collect();
    ids.sort_unstable();
    let slot: HashMap<u32, u32> = ids
        .iter()
        .enumerate()
        .map(|(i, &id)| (id, i as u32))
        .collect();
    let mut function_names: Vec<String> =
        ids.iter().map(|&id| names.get(id).into_owned()).collect();
    let module_paths: Vec<String> = std::iter::once(String::new())
        .chain(trace.modules().iter().map(|m| m.path.clone()))
        .collect();
    let module_slot: HashMap<u32, u32> = trace
        .modules()
        .iter()
        .enumerate()
        .map(|(i, m)| (m.id, i as u32 + 1))
        .collect();
    let module_of = |id: u32| {
        trace
            .functions()
            .get(&id)
            .and_then(|f| module_slot.get(&f.module))
            .copied()
            .unwrap_or(0)
    };
    let modules = values(&module_paths);
    // Each module's build id in hex, in the order (and so with the keys) of `modules`: a fleet's
    // profiles are symbolized later, centrally, by build id.
    let module_build_ids: Vec<String> = std::iter::once(String::new())
        .chain(trace.modules().iter().map(|m| {
            m.build_id
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        }))
        .collect();
    let build_ids = values(&module_build_ids);
    let threads: Vec<String> = trace.threads().values().map(|t| t.name.clone()).collect();
    let thread_names = values(&threads);
    let thread_slot: HashMap<u32, u32> = trace
        .threads()
        .keys()
        .enumerate()
        .map(|(i, &t)| (t, i as u32))
        .collect();

    use Ty::*;
    // functions
    let functions_values = values(&function_names);
    let mut t = Table::create(
        dir,
        "functions",
        &[
            ("run", Dict, false),
            ("function_id", U32, false),
            ("function", Dict, false),
            ("module", Dict, false),
            ("address", U64, false),
            ("size", U64, false),
            ("mangled", Str, false),
        ],
        &[&run, &functions_values, &modules],
    )?;
    for (i, &id) in ids.iter().enumerate() {
        let f = &trace.functions()[&id];
        t.row(&[
            V::Key(0),
            V::U32(id),
            V::Key(i as u32),
            V::Key(module_of(id)),
            V::U64(f.addr),
            V::U64(f.size),
            V::Str(&f.mangled),
        ])?;
    }
    t.close()?;

    // threads
    let mut t = Table::create(
        dir,
        "threads",
        &[
            ("run", Dict, false),
            ("thread", U32, false),
            ("pid", U32, false),
            ("name", Str, false),
            ("events", U64, false),
        ],
        &[&run],
    )?;
    for th in trace.threads().values() {
        t.row(&[
            V::Key(0),
            V::U32(th.tid),
            V::U32(th.pid),
            V::Str(&th.name),
            V::U64(th.events),
        ])?;
    }
    t.close()?;

    // samplers
    let mut t = Table::create(
        dir,
        "samplers",
        &[
            ("run", Dict, false),
            ("sampler", U32, false),
            ("kind", U32, false),
            ("name", Str, false),
            ("weighs_time", Bool, false),
            ("frequency", U32, false),
        ],
        &[&run],
    )?;
    for (i, sampler) in trace.samplers().iter().enumerate() {
        t.row(&[
            V::Key(0),
            V::U32(i as u32),
            V::U32(sampler.kind as u32),
            V::Str(&sampler.spelling),
            V::Bool(sampler.kind.weighs_time()),
            V::U32(trace.sample_frequency()),
        ])?;
    }
    t.close()?;

    // metadata: one row
    let mut t = Table::create(
        dir,
        "metadata",
        &[
            ("run", Dict, false),
            ("trace", Str, false),
            ("exe", Str, false),
            ("command_line", Str, false),
            ("pid", U32, false),
            ("start_ns", U64, false),
            ("start_realtime_ns", U64, false),
            ("duration_ns", U64, false),
            ("mode", Str, false),
            ("ferrotrace_version", Str, false),
            ("tsc_hz", U64, false),
            ("ns_per_tick_q32", U64, false),
            ("events", U64, false),
            ("threads", U64, false),
            ("hostname", Str, false),
            ("boot_id", Str, false),
        ],
        &[&run],
    )?;
    let path = trace.path().display().to_string();
    let cmdline = trace.session().args.join(" ");
    t.row(&[
        V::Key(0),
        V::Str(&path),
        V::Str(&trace.session().exe),
        V::Str(&cmdline),
        V::U32(trace.session().pid),
        V::U64(t0),
        V::U64(trace.session().start_realtime_ns),
        V::U64(trace.duration_ns()),
        V::Str(trace.session().mode_name()),
        V::Str(&trace.session().version),
        V::U64(trace.session().tsc_hz),
        V::U64(trace.ticks_to_ns(1 << 32)),
        V::U64(trace.event_count()),
        V::U64(trace.threads().len() as u64),
        V::Str(&trace.session().host),
        V::Str(&trace.session().boot_id),
    ])?;
    t.close()?;

    // stacks: the trace's address stacks, named.
    let mut sym = Symbolizer::new(trace);
    let mut stack_names: Vec<String> = Vec::new();
    let mut stack_name_slot: HashMap<String, u32> = HashMap::new();
    let mut stack_rows = Vec::with_capacity(trace.stacks().len());
    // Every function at each address, innermost first (the last contains the address).
    let mut stack_frames: Vec<Vec<String>> = Vec::with_capacity(trace.stacks().len());
    for node in trace.stacks() {
        let frames = sym.frames(node.module, node.address);
        stack_frames.push(frames.iter().map(|f| f.function.to_string()).collect());
        let name = frames
            .first()
            .map_or_else(String::new, |f| f.function.to_string());
        let next = stack_names.len() as u32;
        let k = *stack_name_slot.entry(name.clone()).or_insert_with(|| {
            stack_names.push(name);
            next
        });
        stack_rows.push(k);
    }
    let stack_functions = values(&stack_names);
    let mut t = Table::create(
        dir,
        "stacks",
        &[
            ("run", Dict, false),
            ("stack_id", U32, false),
            ("parent", U32, true),
            ("function", Dict, false),
            ("module", Dict, false),
            ("address", U64, false),
            ("frames", Strs, false),
            ("build_id", Dict, false),
        ],
        &[&run, &stack_functions, &modules, &build_ids],
    )?;
    for (i, node) in trace.stacks().iter().enumerate() {
        t.row(&[
            V::Key(0),
            V::U32(i as u32),
            node.parent.map_or(V::Null, V::U32),
            V::Key(stack_rows[i]),
            V::Key(module_slot.get(&node.module).copied().unwrap_or(0)),
            V::U64(node.address),
            V::Strs(&stack_frames[i]),
            V::Key(module_slot.get(&node.module).copied().unwrap_or(0)),
        ])?;
    }
    t.close()?;
    drop(sym);

    // The streamed tables.
    let ends = values(&["return", "tail_call", "unwound", "open_at_end"]);
    // Function ids missing from the function table get `fn#ID` entries after the known ones.
    let mut extra: HashMap<u32, u32> = HashMap::new();
    let mut calls = Table::create(
        dir,
        "calls",
        &[
            ("run", Dict, false),
            ("call_id", U64, false),
            ("parent_call", U64, true),
            ("thread", U32, false),
            ("thread_name", Dict, false),
            ("function_id", U32, false),
            ("function", Dict, false),
            ("module", Dict, false),
            ("start_ns", I64, false),
            ("duration_ns", I64, false),
            ("self_ns", I64, false),
            ("duration_ticks", I64, false),
            ("self_ticks", I64, false),
            ("depth", U32, false),
            ("outermost", Bool, false),
            ("entered", Bool, false),
            ("end", Dict, false),
            ("args", Str, true),
            ("retval", Str, true),
        ],
        &[&run, &thread_names, &functions_values, &modules, &ends],
    )?;
    let mut samples = Table::create(
        dir,
        "samples",
        &[
            ("run", Dict, false),
            ("time_ns", I64, false),
            ("thread", U32, false),
            ("stack_id", U32, true),
            ("sampler", U32, false),
            ("weight", U64, false),
        ],
        &[&run],
    )?;
    let mut allocations = Table::create(
        dir,
        "allocations",
        &[
            ("run", Dict, false),
            ("time_ns", I64, false),
            ("thread", U32, false),
            ("size", U64, false),
            ("address", U64, false),
            ("stack_id", U32, true),
            ("freed_ns", I64, true),
            ("freed_by", U32, true),
        ],
        &[&run],
    )?;
    let kinds = values(&["tracepoint", "lost", "wait", "free_unknown", "other"]);
    let mut events = Table::create(
        dir,
        "events",
        &[
            ("run", Dict, false),
            ("time_ns", I64, false),
            ("thread", U32, false),
            ("kind", Dict, false),
            ("name", Str, false),
            ("fields", Str, false),
        ],
        &[&run, &kinds],
    )?;

    let mut per: Vec<ThreadCalls> = Vec::new();
    let mut index: HashMap<u32, usize> = HashMap::new();
    let mut last: Option<(u32, usize)> = None;
    let mut next_call = 0u64;
    let mut live: HashMap<u64, Live> = HashMap::new();
    // A slot per function id for recursion counts (the representative's).
    let rep_slot = |id: u32| slot.get(&reps.of(id)).copied();
    // The known functions' keys by id, for the ids below 2^20; others take the lookups above.
    let dense = ids.last().map_or(0, |&id| id as usize + 1).min(1 << 20);
    let mut keys: Vec<Option<FunctionKeys>> = vec![None; dense];
    for &id in ids.iter().take_while(|&&id| (id as usize) < dense) {
        keys[id as usize] = Some(FunctionKeys {
            slot: slot[&id],
            rep: rep_slot(id),
            module: module_of(id),
        });
    }
    let keys_of = |id: u32| keys.get(id as usize).copied().flatten();

    let mut emit = |calls: &mut Table,
                    tc: &mut ThreadCalls,
                    tid: u32,
                    se: StackEvent,
                    shown: Option<Box<str>>|
     -> io::Result<()> {
        match se {
            StackEvent::Enter { id, .. } => {
                tc.args.push(shown);
                tc.ids.push(next_call);
                next_call += 1;
                let rep = match keys_of(id) {
                    Some(k) => k.rep,
                    None => rep_slot(id),
                };
                if let Some(s) = rep {
                    let s = s as usize;
                    if tc.active.len() <= s {
                        tc.active.resize(s + 1, 0);
                    }
                    tc.active[s] += 1;
                }
            }
            StackEvent::Leave {
                frame,
                end,
                depth,
                how,
            } => {
                let call = tc.ids.pop().unwrap_or_default();
                let args = tc.args.pop().flatten();
                let known = keys_of(frame.id);
                let rep = match known {
                    Some(k) => k.rep,
                    None => rep_slot(frame.id),
                };
                let outermost = match rep {
                    Some(s) => {
                        let a = &mut tc.active[s as usize];
                        *a = a.saturating_sub(1);
                        *a == 0
                    }
                    None => true,
                };
                let dur = end.saturating_sub(frame.start);
                let self_t = frame.self_time(end);
                let fslot = match known
                    .map(|k| k.slot)
                    .or_else(|| slot.get(&frame.id).copied())
                {
                    Some(s) => s,
                    None => match extra.get(&frame.id) {
                        Some(&s) => s,
                        None => {
                            // The dictionary grows by this name before a row uses it (rare).
                            function_names.push(format!("fn#{}", frame.id));
                            let s = function_names.len() as u32 - 1;
                            extra.insert(frame.id, s);
                            if let Col::Dict(_, v) = &mut calls.cols[FUNCTION_COLUMN] {
                                *v = values(&function_names);
                            }
                            s
                        }
                    },
                };
                calls.row(&[
                    V::Key(0),
                    V::U64(call),
                    tc.ids.last().map_or(V::Null, |&p| V::U64(p)),
                    V::U32(tid),
                    V::Key(tc.name_key),
                    V::U32(frame.id),
                    V::Key(fslot),
                    V::Key(known.map_or_else(|| module_of(frame.id), |k| k.module)),
                    V::I64(rel(trace.tsc_to_ns(frame.start))),
                    V::I64(trace.ticks_to_ns(dur) as i64),
                    V::I64(trace.ticks_to_ns(self_t) as i64),
                    V::I64(dur as i64),
                    V::I64(self_t as i64),
                    V::U32(depth as u32),
                    V::Bool(outermost),
                    V::Bool(frame.entered),
                    V::Key(end_kind(how)),
                    args.as_deref().map_or(V::Null, V::Str),
                    shown.as_deref().map_or(V::Null, V::Str),
                ])?;
            }
            StackEvent::OrphanExit { .. } => {}
        }
        Ok(())
    };
    let mut pending_values = super::PendingValues::default();
    let errors = walk_stacks(trace, progress, |tid, step| {
        let e = match step {
            Step::Stack(se) => {
                let at = match last {
                    Some((t, i)) if t == tid => i,
                    _ => {
                        let i = *index.entry(tid).or_insert_with(|| {
                            per.push(ThreadCalls {
                                ids: Vec::new(),
                                args: Vec::new(),
                                active: Vec::new(),
                                name_key: thread_slot.get(&tid).copied().unwrap_or(0),
                            });
                            per.len() - 1
                        });
                        last = Some((tid, i));
                        i
                    }
                };
                let taken = pending_values.take_for(&se);
                return emit(&mut calls, &mut per[at], tid, se, taken);
            }
            Step::Other(e, _) => e,
            Step::Values(e) => {
                pending_values.set(trace, &e);
                return Ok(());
            }
        };
        let time = rel(e.ts_ns);
        match e.kind {
            EventKind::Sample => samples.row(&[
                V::Key(0),
                V::I64(time),
                V::U32(tid),
                e.id.checked_sub(1).map_or(V::Null, V::U32),
                V::U32(e.fields[0] as u32),
                V::U64(e.fields[1]),
            ])?,
            EventKind::Alloc => {
                let old = live.insert(
                    e.fields[1],
                    Live {
                        time,
                        tid,
                        size: e.fields[0],
                        stack: e.id.checked_sub(1),
                    },
                );
                // An address allocated again without a free seen: the first block's end is unknown.
                if let Some(old) = old {
                    alloc_row(&mut allocations, e.fields[1], &old, None)?;
                }
            }
            EventKind::Free => match live.remove(&e.fields[0]) {
                Some(block) => alloc_row(&mut allocations, e.fields[0], &block, Some((time, tid)))?,
                None => events.row(&[
                    V::Key(0),
                    V::I64(time),
                    V::U32(tid),
                    V::Key(3),
                    V::Str("free"),
                    V::Str(&format!("{{\"address\":{}}}", e.fields[0])),
                ])?,
            },
            kind => {
                let (name, args) = super::instant(
                    Some(trace),
                    &|id| names.get(id).into_owned(),
                    kind,
                    e.id,
                    e.payload,
                    &e.fields,
                );
                let k = match kind {
                    EventKind::Tracepoint => 0,
                    EventKind::Lost => 1,
                    EventKind::Wait => 2,
                    _ => 4,
                };
                let fields = serde_json::Value::Object(
                    args.iter()
                        .map(|(n, v)| (n.to_string(), v.to_json()))
                        .collect(),
                )
                .to_string();
                events.row(&[
                    V::Key(0),
                    V::I64(time),
                    V::U32(tid),
                    V::Key(k),
                    V::Str(&name),
                    V::Str(&fields),
                ])?;
            }
        }
        Ok(())
    })?;
    // Blocks never freed, by address.
    let mut never: Vec<(u64, Live)> = live.into_iter().collect();
    never.sort_unstable_by_key(|(a, b)| (b.time, *a));
    for (address, block) in &never {
        alloc_row(&mut allocations, *address, block, None)?;
    }
    calls.close()?;
    samples.close()?;
    allocations.close()?;
    events.close()?;
    Ok(errors)
}

fn alloc_row(t: &mut Table, address: u64, b: &Live, freed: Option<(i64, u32)>) -> io::Result<()> {
    t.row(&[
        V::Key(0),
        V::I64(b.time),
        V::U32(b.tid),
        V::U64(b.size),
        V::U64(address),
        b.stack.map_or(V::Null, V::U32),
        freed.map_or(V::Null, |(t, _)| V::I64(t)),
        freed.map_or(V::Null, |(_, tid)| V::U32(tid)),
    ])
}

/// `--format parquet`.
pub struct Parquet;

impl Exporter for Parquet {
    fn name(&self) -> &'static str {
        "parquet"
    }

    fn about(&self) -> &'static str {
        "Parquet dataset, a directory of tables (DuckDB, DataFusion, pandas)"
    }

    fn directory(&self) -> Option<&'static str> {
        Some("ferrotrace.parquet")
    }

    fn writes_samples(&self) -> super::Samples {
        super::Samples::Streamed
    }

    fn write_functions(
        &self,
        trace: &Trace,
        _opts: Options,
        target: Target<'_>,
        progress: &mut Progress,
    ) -> io::Result<Written> {
        match target {
            Target::Directory(dir) => write(trace, dir, progress).map(Written::from),
            Target::Stream(_) | Target::Pieces(_) => Err(io::Error::other(
                "a Parquet dataset is a directory: give -o DIR",
            )),
        }
    }
}
