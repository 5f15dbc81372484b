//! Native frames for the Firefox Profiler: the libraries, each frame's address in its library, and
//! each function's file and each frame's line, added to the profile [`crate::samples::firefox_json`]
//! writes (whose frames are names only: the sample view keeps names, not addresses).
//!
//! The thread tables are rebuilt from the trace's address stacks: one frame per (module, address,
//! inline depth) with the library-relative address (`frameTable.address`), `inlineDepth` for
//! functions inlined at that address, and the line (`frameTable.line`); one function per name,
//! library and file (`funcTable.resource`, `funcTable.fileName`); `resourceTable` entries of type
//! library pointing into the profile's `libs` (name, path, breakpadId and codeId from the build-id).
//! The processed-profile format is the Firefox Profiler's (`preprocessedProfileVersion` as written by
//! `fxprof-processed-profile`); kernel frames keep no address (theirs do not fit a JavaScript number).

use std::collections::HashMap;

use serde_json::{json, Value};

use crate::reader::{EventKind, ReadError, Trace};
use crate::symbolize::{Symbolizer, KERNEL_MODULE_PATH};

/// Adds libraries, addresses and source lines to `profile` (the JSON of
/// [`crate::samples::firefox_json`] for `trace`). A thread whose samples do not match the trace's
/// (which cannot happen for that JSON) keeps its named frames.
pub fn add_native_frames(trace: &Trace, profile: &str) -> Result<String, ReadError> {
    let Ok(mut p) = serde_json::from_str::<Value>(profile) else {
        return Ok(profile.to_string());
    };
    let multi = trace.samplers().len() > 1;
    let category = |name: &str| {
        p["meta"]["categories"]
            .as_array()
            .and_then(|c| c.iter().position(|c| c["name"] == name))
            .unwrap_or(0)
    };
    let (user, kernel) = (category("User"), category("Kernel"));
    let mut sym = Symbolizer::new(trace);
    let mut libs: Vec<Value> = Vec::new();
    let mut lib_of_module: HashMap<u32, Option<usize>> = HashMap::new();
    let threads = p["threads"].as_array().map_or(0, Vec::len);
    for ti in 0..threads {
        let Some(tid) = p["threads"][ti]["tid"]
            .as_u64()
            .or_else(|| p["threads"][ti]["tid"].as_str()?.parse().ok())
        else {
            continue;
        };
        // The thread's samples in the order firefox_json added them: read order, then by time.
        let mut samples: Vec<(u64, Option<u32>, u32)> = Vec::new();
        if trace.threads().contains_key(&(tid as u32)) {
            let mut events = trace.thread_events(tid as u32)?;
            while let Some(e) = events.next_ref() {
                let e = e?;
                if e.kind == EventKind::Sample {
                    samples.push((e.ts_ns, e.id.checked_sub(1), e.fields[0] as u32));
                }
            }
        }
        samples.sort_by_key(|s| s.0);
        let thread = &mut p["threads"][ti];
        if thread["samples"]["stack"].as_array().map(Vec::len) != Some(samples.len()) {
            continue;
        }
        let mut t = Tables::new(
            thread["stringArray"]
                .as_array()
                .cloned()
                .unwrap_or_default(),
        );
        let mut stack_of: HashMap<(Option<u32>, u32), Option<usize>> = HashMap::new();
        let mut new_stacks = Vec::with_capacity(samples.len());
        for &(_, stack, sampler) in &samples {
            if let Some(&s) = stack_of.get(&(stack, sampler)) {
                new_stacks.push(s.map_or(Value::Null, Value::from));
                continue;
            }
            // Address nodes, outermost first.
            let mut chain = Vec::new();
            let mut cur = stack;
            while let Some(node) = cur.and_then(|c| trace.stacks().get(c as usize)) {
                chain.push(*node);
                cur = node.parent.filter(|&p| Some(p) < cur);
            }
            let mut prefix: Option<usize> = None;
            if multi {
                let name = trace
                    .samplers()
                    .get(sampler as usize)
                    .map_or("?", |s| s.spelling.as_str());
                let func = t.func(name, None, None, None);
                let frame = t.frame((0, u64::MAX, sampler), -1, 0, user, func, None);
                prefix = Some(t.stack(prefix, frame));
            }
            for node in chain.iter().rev() {
                let path = trace
                    .modules()
                    .iter()
                    .find(|m| m.id == node.module)
                    .map(|m| (m.path.as_str(), m.build_id.as_slice()));
                let lib = *lib_of_module.entry(node.module).or_insert_with(|| {
                    let (path, build_id) = path.filter(|(p, _)| *p != KERNEL_MODULE_PATH)?;
                    libs.push(lib_json(path, build_id));
                    Some(libs.len() - 1)
                });
                let resource = lib.map(|l| t.resource(l, &libs[l]["name"]));
                let frames = sym.frames(node.module, node.address);
                // Outermost (the function containing the address) first: inline depth 0.
                for (depth, f) in frames.iter().rev().enumerate() {
                    let file = (!f.file.is_empty()).then_some(&*f.file);
                    // The function's own first line: that of its symbol's first address (known for
                    // the function containing the address; an inlined one's is not).
                    let mut start_line = || {
                        let (start, _, _) = sym.function_symbol(node.module, node.address)?;
                        let first = sym.frames(node.module, start);
                        let outer = first.last().filter(|o| o.function == f.function)?;
                        (outer.line != 0 && outer.file == f.file).then_some(outer.line)
                    };
                    let first_line = if depth == 0 && lib.is_some() {
                        start_line()
                    } else {
                        None
                    };
                    let func = t.func(&f.function, resource, file, first_line);
                    let address = match lib {
                        Some(_) if node.address < 1 << 52 => node.address as i64,
                        _ => -1,
                    };
                    let line = (f.line != 0).then_some(f.line);
                    let category = if f.kernel { kernel } else { user };
                    let key = (node.module, node.address, depth as u32);
                    let frame = t.frame(key, address, depth, category, func, line);
                    prefix = Some(t.stack(prefix, frame));
                }
            }
            stack_of.insert((stack, sampler), prefix);
            new_stacks.push(prefix.map_or(Value::Null, Value::from));
        }
        t.write(thread);
        thread["samples"]["stack"] = Value::Array(new_stacks);
    }
    p["libs"] = Value::Array(libs);
    Ok(serde_json::to_string(&p).unwrap_or_else(|_| profile.to_string()))
}

/// A `libs` entry: the Firefox Profiler's library description (breakpadId and codeId from the GNU
/// build-id, as samply writes them for ELF files).
fn lib_json(path: &str, build_id: &[u8]) -> Value {
    let name = path.rsplit('/').next().unwrap_or(path);
    let mut guid = [0u8; 16];
    for (g, b) in guid.iter_mut().zip(build_id) {
        *g = *b;
    }
    // The first three GUID fields are little-endian in the breakpad id.
    guid[..4].reverse();
    guid[4..6].reverse();
    guid[6..8].reverse();
    let hex = |b: &[u8]| b.iter().map(|b| format!("{b:02x}")).collect::<String>();
    json!({
        "name": name,
        "path": path,
        "debugName": name,
        "debugPath": path,
        "breakpadId": if build_id.is_empty() { String::new() } else { format!("{}0", hex(&guid).to_uppercase()) },
        "codeId": if build_id.is_empty() { Value::Null } else { Value::from(hex(build_id)) },
        "arch": "x86_64",
    })
}

/// A function: its name's string, resource, file name's string and first line.
type Func = (usize, Option<usize>, Option<usize>, Option<u32>);

/// One thread's tables, built anew.
struct Tables {
    strings: Vec<Value>,
    string_ids: HashMap<String, usize>,
    resources: Vec<(usize, usize)>,
    resource_ids: HashMap<usize, usize>,
    /// (name, resource, file name, first line).
    funcs: Vec<Func>,
    func_ids: HashMap<(String, Option<usize>, Option<String>), usize>,
    frames: Vec<(i64, usize, usize, usize, Option<u32>)>,
    frame_ids: HashMap<(u32, u64, u32), usize>,
    stacks: Vec<(Option<usize>, usize)>,
    stack_ids: HashMap<(Option<usize>, usize), usize>,
}

impl Tables {
    fn new(strings: Vec<Value>) -> Tables {
        let string_ids = strings
            .iter()
            .enumerate()
            .filter_map(|(i, s)| Some((s.as_str()?.to_string(), i)))
            .collect();
        Tables {
            strings,
            string_ids,
            resources: Vec::new(),
            resource_ids: HashMap::new(),
            funcs: Vec::new(),
            func_ids: HashMap::new(),
            frames: Vec::new(),
            frame_ids: HashMap::new(),
            stacks: Vec::new(),
            stack_ids: HashMap::new(),
        }
    }

    fn string(&mut self, s: &str) -> usize {
        if let Some(&i) = self.string_ids.get(s) {
            return i;
        }
        self.strings.push(Value::from(s));
        self.string_ids
            .insert(s.to_string(), self.strings.len() - 1);
        self.strings.len() - 1
    }

    fn resource(&mut self, lib: usize, name: &Value) -> usize {
        if let Some(&r) = self.resource_ids.get(&lib) {
            return r;
        }
        let name = self.string(name.as_str().unwrap_or(""));
        self.resources.push((lib, name));
        self.resource_ids.insert(lib, self.resources.len() - 1);
        self.resources.len() - 1
    }

    fn func(
        &mut self,
        name: &str,
        resource: Option<usize>,
        file: Option<&str>,
        first_line: Option<u32>,
    ) -> usize {
        let key = (name.to_string(), resource, file.map(str::to_string));
        if let Some(&f) = self.func_ids.get(&key) {
            if self.funcs[f].3.is_none() {
                self.funcs[f].3 = first_line;
            }
            return f;
        }
        let name = self.string(name);
        let file = file.map(|f| self.string(f));
        self.funcs.push((name, resource, file, first_line));
        self.func_ids.insert(key, self.funcs.len() - 1);
        self.funcs.len() - 1
    }

    fn frame(
        &mut self,
        key: (u32, u64, u32),
        address: i64,
        depth: usize,
        category: usize,
        func: usize,
        line: Option<u32>,
    ) -> usize {
        if let Some(&f) = self.frame_ids.get(&key) {
            return f;
        }
        self.frames.push((address, depth, category, func, line));
        self.frame_ids.insert(key, self.frames.len() - 1);
        self.frames.len() - 1
    }

    fn stack(&mut self, prefix: Option<usize>, frame: usize) -> usize {
        if let Some(&s) = self.stack_ids.get(&(prefix, frame)) {
            return s;
        }
        self.stacks.push((prefix, frame));
        self.stack_ids
            .insert((prefix, frame), self.stacks.len() - 1);
        self.stacks.len() - 1
    }

    /// Replaces the thread's tables with these.
    fn write(self, thread: &mut Value) {
        let opt = |v: Option<usize>| v.map_or(Value::Null, Value::from);
        let n = self.frames.len();
        thread["frameTable"] = json!({
            "length": n,
            "address": self.frames.iter().map(|f| f.0).collect::<Vec<_>>(),
            "inlineDepth": self.frames.iter().map(|f| f.1).collect::<Vec<_>>(),
            "category": self.frames.iter().map(|f| f.2).collect::<Vec<_>>(),
            "subcategory": vec![0; n],
            "func": self.frames.iter().map(|f| f.3).collect::<Vec<_>>(),
            "nativeSymbol": vec![Value::Null; n],
            "innerWindowID": vec![0; n],
            "line": self.frames.iter().map(|f| f.4.map_or(Value::Null, Value::from)).collect::<Vec<_>>(),
            "column": vec![Value::Null; n],
        });
        let n = self.funcs.len();
        thread["funcTable"] = json!({
            "length": n,
            "name": self.funcs.iter().map(|f| f.0).collect::<Vec<_>>(),
            "isJS": vec![false; n],
            "relevantForJS": vec![false; n],
            "resource": self.funcs.iter().map(|f| f.1.map_or(-1, |r| r as i64)).collect::<Vec<_>>(),
            "fileName": self.funcs.iter().map(|f| opt(f.2)).collect::<Vec<_>>(),
            "lineNumber": self.funcs.iter().map(|f| f.3.map_or(Value::Null, Value::from)).collect::<Vec<_>>(),
            "columnNumber": vec![Value::Null; n],
        });
        let n = self.resources.len();
        thread["resourceTable"] = json!({
            "length": n,
            "lib": self.resources.iter().map(|r| r.0).collect::<Vec<_>>(),
            "name": self.resources.iter().map(|r| r.1).collect::<Vec<_>>(),
            "host": vec![Value::Null; n],
            // 1: a library.
            "type": vec![1; n],
        });
        thread["stackTable"] = json!({
            "length": self.stacks.len(),
            "prefix": self.stacks.iter().map(|s| opt(s.0)).collect::<Vec<_>>(),
            "frame": self.stacks.iter().map(|s| s.1).collect::<Vec<_>>(),
        });
        thread["stringArray"] = Value::Array(self.strings);
    }
}
