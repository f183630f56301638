//! parse::torch: a PyTorch profiler (Kineto) chrome trace, as
//! `torch.profiler` writes it (`export_chrome_trace`, `tensorboard_trace_handler`,
//! the serving engines' `/start_profile`): plain or gzip-compressed JSON,
//! read in one streaming pass. The document is never built: each event of
//! `traceEvents` is read, kept in a compact form when it is one llmperf uses,
//! and dropped.
//!
//! What is kept (complete events, `ph: "X"`):
//! - CPU ranges: `user_annotation` (record_function, `ProfilerStep#N`),
//!   `cpu_op` (operators), `python_function` (with_stack), per process and
//!   thread. The 2021 schema's `Operator` is `cpu_op`.
//! - GPU-side ranges: `gpu_user_annotation` (the projection of a
//!   record_function onto a stream), kept apart from the CPU's.
//! - Launch calls: `cuda_runtime` and `cuda_driver` events with an
//!   `args.correlation` (2021: `Runtime`).
//! - GPU activity: `kernel`, `gpu_memcpy`, `gpu_memset` (2021: `Kernel`,
//!   `Memcpy`, `Memset`), with their device, stream and correlation id.
//!
//! Times are exact: `ts` and `dur` are read as the decimal text the file
//! holds (integer µs in older traces, µs with three decimals, so ns, in
//! newer ones) and turned into integer nanoseconds without a float;
//! `baseTimeNanoseconds` (relative timestamps) is added where present.
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;

use serde::de::{self, Deserializer, IgnoredAny, MapAccess, Visitor};
use serde::Deserialize;
use serde_json::value::RawValue;

use rustc_hash::FxHashMap as HashMap;

use crate::error::{Error, ErrorKind};
use crate::parse::json_frames::{FrameError, Frames};
use crate::parse::nsys::activity::{Activity, ActivitySink, Direction, What};
use crate::parse::nsys::batched::Batcher;
use crate::parse::nsys::ingest::KernelSink;
use crate::parse::nsys::sqlite::{Kernel, Launched, Names, NvtxRange};
use crate::parse::spill::{Record, Spill};
use crate::regions::RangeStyle;

/// A CPU or GPU-side range's kind: its category, as the file spells it today.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(crate) enum RangeKind {
    UserAnnotation,
    CpuOp,
    PythonFunction,
    GpuUserAnnotation,
}

impl RangeKind {
    /// The category's name, which becomes the region's domain.
    pub(crate) fn category(self) -> &'static str {
        match self {
            RangeKind::UserAnnotation => "user_annotation",
            RangeKind::CpuOp => "cpu_op",
            RangeKind::PythonFunction => "python_function",
            RangeKind::GpuUserAnnotation => "gpu_user_annotation",
        }
    }
}

/// What runs on the GPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GpuKind {
    Kernel,
    Memcpy,
    Memset,
}

impl RangeKind {
    const ALL: [RangeKind; 4] =
        [RangeKind::UserAnnotation, RangeKind::CpuOp, RangeKind::PythonFunction, RangeKind::GpuUserAnnotation];
}

/// A range: `[start, end)` in ns on a thread (a GPU-side range: the device
/// and stream), its process and thread as one [`Threads::global`] id, and
/// its place in the file. Ordered as the sweep reads ranges: by start, the
/// longer first, then [`nesting_rank`], then as the file has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Range {
    pub(crate) start: i64,
    pub(crate) end: i64,
    pub(crate) global_tid: i64,
    pub(crate) seq: u64,
    pub(crate) name: u32,
    pub(crate) kind: RangeKind,
}

impl Range {
    fn key(&self) -> (i64, std::cmp::Reverse<i64>, u8, u64) {
        (self.start, std::cmp::Reverse(self.end), nesting_rank(self.kind), self.seq)
    }
}

impl Ord for Range {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.key().cmp(&other.key())
    }
}

impl PartialOrd for Range {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Record for Range {
    const BYTES: usize = 37;

    fn put(&self, out: &mut [u8]) {
        out[0..8].copy_from_slice(&self.start.to_le_bytes());
        out[8..16].copy_from_slice(&self.end.to_le_bytes());
        out[16..24].copy_from_slice(&self.global_tid.to_le_bytes());
        out[24..32].copy_from_slice(&self.seq.to_le_bytes());
        out[32..36].copy_from_slice(&self.name.to_le_bytes());
        out[36] = self.kind as u8;
    }

    fn get(b: &[u8]) -> Self {
        let i64_at = |i: usize| i64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        Range {
            start: i64_at(0),
            end: i64_at(8),
            global_tid: i64_at(16),
            seq: i64_at(24) as u64,
            name: u32::from_le_bytes(b[32..36].try_into().expect("4 bytes")),
            kind: RangeKind::ALL[usize::from(b[36]) % RangeKind::ALL.len()],
        }
    }
}

/// Bytes of ranges held in memory before a sorted run of them goes to disk.
const RANGES_HELD: usize = 8 << 20;

/// A CUDA runtime or driver call with a correlation id, which may have
/// launched work: held compactly (24 bytes; a trace has millions), its thread
/// an index into [`Trace::call_threads`].
#[derive(Debug, Clone, Copy)]
pub(crate) struct Launch {
    pub(crate) start: i64,
    pub(crate) correlation: i64,
    pub(crate) name: u32,
    pub(crate) thread: u32,
}

/// A CUDA runtime or driver call that waits for the GPU.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Call {
    pub(crate) start: i64,
    pub(crate) end: i64,
    pub(crate) name: u32,
    pub(crate) pid: i64,
}

/// A kernel, copy or set on the GPU.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GpuOp {
    pub(crate) start: i64,
    pub(crate) end: i64,
    pub(crate) name: u32,
    pub(crate) kind: GpuKind,
    pub(crate) device: i64,
    pub(crate) stream: i64,
    /// Its `args.correlation`, until [`Trace::join`] finds its launch call.
    pub(crate) link: Link,
    /// A copy's or set's `args.bytes` (0 where absent).
    pub(crate) bytes: i64,
}

/// What a kernel, copy or set is known by on the host side.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Link {
    /// The event's `args.correlation`, as read.
    Correlation(i64),
    /// The launch call found for it: the call's thread, an index into
    /// [`Trace::call_threads`].
    Thread(u32),
    /// No correlation id, or no call holds it.
    None,
}

/// A GPU of `deviceProperties`.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema, PartialEq)]
pub(crate) struct Device {
    pub(crate) id: i64,
    pub(crate) name: String,
}

/// What the trace says of itself beside its events.
#[derive(Debug, Clone, Default)]
pub(crate) struct Meta {
    pub(crate) schema_version: Option<i64>,
    /// `distributedInfo`: rank, world size, backend.
    pub(crate) rank: Option<i64>,
    pub(crate) world_size: Option<i64>,
    pub(crate) devices: Vec<Device>,
    pub(crate) base_time_ns: Option<i64>,
}

/// A trace, read: the events llmperf uses, compact, with their names
/// interned; and what was left out, counted.
pub(crate) struct Trace {
    /// The CPU and GPU-side ranges, sorted in bounded memory: a trace's
    /// largest table.
    ranges: Spill<Range>,
    /// The least start and greatest end of the ranges (to check
    /// `baseTimeNanoseconds` against), and the base to add to them.
    range_bounds: (i64, i64),
    range_shift: i64,
    /// The processes of the CPU ranges.
    host_pids: std::collections::BTreeSet<i64>,
    threads: Threads,
    /// The first error of writing ranges to disk.
    failed: Option<Error>,
    pub(crate) calls: Vec<Launch>,
    /// The (pid, tid) of each thread that made a call with a correlation id.
    pub(crate) call_threads: Vec<(i64, i64)>,
    call_thread_ids: HashMap<(i64, i64), u32>,
    /// The runtime and driver calls that wait for the GPU
    /// ([`crate::parse::nsys::calls::BLOCKING`]), correlation id or not.
    pub(crate) blocking: Vec<Call>,
    pub(crate) gpu: Vec<GpuOp>,
    pub(crate) names: Names,
    pub(crate) meta: Meta,
    /// Events read.
    pub(crate) events: u64,
    /// Complete events of categories llmperf does not read (`cuda_sync`,
    /// `Trace`, …), by category.
    pub(crate) skipped: BTreeMap<String, u64>,
    /// Complete events whose `ts` or `dur` is missing, negative or not a
    /// number: left out.
    pub(crate) odd_times: u64,
}

impl Trace {
    /// The processes of the CPU ranges.
    pub(crate) fn host_pids(&self) -> &std::collections::BTreeSet<i64> {
        &self.host_pids
    }

    fn new(ranges_held: usize) -> Trace {
        Trace {
            ranges: Spill::new(ranges_held),
            range_bounds: (i64::MAX, i64::MIN),
            range_shift: 0,
            host_pids: Default::default(),
            threads: Threads::default(),
            failed: None,
            calls: Vec::new(),
            call_threads: Vec::new(),
            call_thread_ids: HashMap::default(),
            blocking: Vec::new(),
            gpu: Vec::new(),
            names: Names::default(),
            meta: Meta::default(),
            events: 0,
            skipped: BTreeMap::new(),
            odd_times: 0,
        }
    }
}

#[derive(Deserialize, Default)]
struct Args {
    correlation: Option<i64>,
    bytes: Option<i64>,
    stream: Option<i64>,
    device: Option<i64>,
}

/// One event, as much of it as llmperf reads, borrowed from the buffer
/// where it can be (a string without escapes, a number's text).
#[derive(Deserialize)]
struct Event<'a> {
    #[serde(borrow)]
    ph: Option<Cow<'a, str>>,
    #[serde(borrow)]
    cat: Option<Cow<'a, str>>,
    #[serde(borrow)]
    name: Option<Cow<'a, str>>,
    #[serde(borrow)]
    pid: Option<&'a RawValue>,
    #[serde(borrow)]
    tid: Option<&'a RawValue>,
    #[serde(borrow)]
    ts: Option<&'a RawValue>,
    #[serde(borrow)]
    dur: Option<&'a RawValue>,
    #[serde(default, deserialize_with = "lenient_args")]
    args: Args,
}

/// A host range event of a trace, as [`host_range`] reads it.
pub(crate) struct HostRange {
    pub(crate) name: String,
    pub(crate) pid: i64,
    /// Its start (ns), as the file has it: before `baseTimeNanoseconds`.
    pub(crate) start: i64,
    /// Its `pid` and `tid` as the file writes them (JSON: a number, or a
    /// string in older traces).
    pub(crate) pid_json: String,
    pub(crate) tid_json: String,
}

/// A host range of the trace (`user_annotation`, `cpu_op`,
/// `python_function`), from the event's JSON; None for any other event, or
/// one without a name, pid, tid or start.
pub(crate) fn host_range(event: &[u8]) -> Option<HostRange> {
    let e: Event<'_> = serde_json::from_slice(event).ok()?;
    if e.ph.as_deref() != Some("X") {
        return None;
    }
    match category(e.cat.as_deref()?)? {
        Category::Range(RangeKind::GpuUserAnnotation) | Category::Call | Category::Gpu(_) => None,
        Category::Range(_) => {
            let (pid, tid) = (e.pid?, e.tid?);
            id_of(tid)?;
            Some(HostRange {
                name: e.name?.into_owned(),
                pid: id_of(pid)?,
                start: micros_to_ns(e.ts?.get())?,
                pid_json: pid.get().to_string(),
                tid_json: tid.get().to_string(),
            })
        }
    }
}

/// A pid or tid: a number, or a string (the 2021 schema's `"25738"`, a
/// stream's `"stream 7"`) read as the number it ends with.
fn id_of(raw: &RawValue) -> Option<i64> {
    let text = raw.get();
    if !text.starts_with('"') {
        return text.parse().ok();
    }
    let s: String = serde_json::from_str(text).ok()?;
    s.trim().rsplit(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// `args` where it is an object; anything else (absent, null) reads as none.
fn lenient_args<'de, D: Deserializer<'de>>(d: D) -> Result<Args, D::Error> {
    Ok(Option::<Args>::deserialize(d)?.unwrap_or_default())
}

/// What a category is to llmperf.
enum Category {
    Range(RangeKind),
    Call,
    Gpu(GpuKind),
}

fn category(cat: &str) -> Option<Category> {
    Some(match cat {
        "user_annotation" => Category::Range(RangeKind::UserAnnotation),
        "cpu_op" | "Operator" => Category::Range(RangeKind::CpuOp),
        "python_function" => Category::Range(RangeKind::PythonFunction),
        "gpu_user_annotation" => Category::Range(RangeKind::GpuUserAnnotation),
        "cuda_runtime" | "cuda_driver" | "Runtime" => Category::Call,
        "kernel" | "Kernel" => Category::Gpu(GpuKind::Kernel),
        "gpu_memcpy" | "Memcpy" => Category::Gpu(GpuKind::Memcpy),
        "gpu_memset" | "Memset" => Category::Gpu(GpuKind::Memset),
        _ => return None,
    })
}

/// Microseconds written as JSON number text (`1712195495519695.8`,
/// `63.813`, `10.0`, `1e3`) in integer nanoseconds, exactly where the text
/// has at most three decimals, else rounded to the nearest ns; None for
/// text that is not a number or does not fit.
pub(crate) fn micros_to_ns(text: &str) -> Option<i64> {
    let (negative, body) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (mantissa, exponent) = match body.find(['e', 'E']) {
        Some(i) => (&body[..i], body[i + 1..].parse::<i32>().ok()?),
        None => (body, 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    if int.is_empty() || !int.bytes().all(|b| b.is_ascii_digit()) || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // digits × 10^(shift) ns, where the digits are int and frac run together.
    let shift = exponent.checked_add(3)?.checked_sub(i32::try_from(frac.len()).ok()?)?;
    let mut value: i128 = 0;
    for b in int.bytes().chain(frac.bytes()) {
        value = value.checked_mul(10)?.checked_add(i128::from(b - b'0'))?;
    }
    if value == 0 {
        return Some(0);
    }
    let ns = if shift >= 0 {
        value.checked_mul(10i128.checked_pow(u32::try_from(shift).ok()?)?)?
    } else {
        let down = 10i128.checked_pow(u32::try_from(-shift).ok()?).unwrap_or(i128::MAX);
        let (q, r) = (value / down, value % down);
        q + i128::from(r * 2 >= down)
    };
    let ns = i64::try_from(ns).ok()?;
    Some(if negative { -ns } else { ns })
}

impl Trace {
    fn add(&mut self, e: Event<'_>) {
        self.events += 1;
        if e.ph.as_deref() != Some("X") {
            return;
        }
        let cat = e.cat.as_deref().unwrap_or("");
        let Some(kind) = category(cat) else {
            *self.skipped.entry(cat.to_string()).or_default() += 1;
            return;
        };
        let base = self.meta.base_time_ns.unwrap_or(0);
        let times = (e.ts.and_then(|t| micros_to_ns(t.get())), e.dur.and_then(|d| micros_to_ns(d.get())));
        let (Some(ts), Some(dur)) = times else {
            self.odd_times += 1;
            return;
        };
        let (Some(start), true) = (ts.checked_add(base), dur >= 0) else {
            self.odd_times += 1;
            return;
        };
        let Some(end) = start.checked_add(dur) else {
            self.odd_times += 1;
            return;
        };
        let name = self.names.intern(e.name.as_deref().unwrap_or(""));
        let pid = e.pid.and_then(id_of).unwrap_or(0);
        let tid = e.tid.and_then(id_of).unwrap_or(0);
        match kind {
            Category::Range(kind) => {
                if kind != RangeKind::GpuUserAnnotation {
                    self.host_pids.insert(pid);
                }
                self.range_bounds = (self.range_bounds.0.min(start), self.range_bounds.1.max(end));
                let range =
                    Range { start, end, global_tid: self.threads.global(pid, tid), seq: self.ranges.len(), name, kind };
                if let (Err(e), None) = (self.ranges.push(range), &self.failed) {
                    self.failed = Some(e);
                }
            }
            Category::Call => {
                let correlation = e.args.correlation;
                if crate::parse::nsys::calls::is_blocking(self.names.get(name)) {
                    self.blocking.push(Call { start, end, name, pid });
                }
                if let Some(correlation) = correlation {
                    let next = self.call_threads.len() as u32;
                    let thread = *self.call_thread_ids.entry((pid, tid)).or_insert(next);
                    if thread == next {
                        self.call_threads.push((pid, tid));
                    }
                    self.calls.push(Launch { start, correlation, name, thread });
                }
            }
            Category::Gpu(kind) => self.gpu.push(GpuOp {
                start,
                end,
                name,
                kind,
                device: e.args.device.unwrap_or(pid),
                stream: e.args.stream.unwrap_or(tid),
                link: e.args.correlation.map_or(Link::None, Link::Correlation),
                bytes: e.args.bytes.unwrap_or(0),
            }),
        }
    }
}

/// The trace's bytes, through gzip where it starts with gzip's magic
/// (whatever its name).
pub(crate) fn open(path: &Path) -> Result<Box<dyn Read>, Error> {
    let file = crate::parse::input::open(path)?;
    let mut reader = BufReader::with_capacity(1 << 16, file);
    let gzip = reader.fill_buf().map(|b| b.starts_with(&[0x1f, 0x8b])).unwrap_or(false);
    Ok(if gzip {
        Box::new(BufReader::with_capacity(1 << 16, flate2::bufread::MultiGzDecoder::new(reader)))
    } else {
        Box::new(reader)
    })
}

/// Read the trace at `path` (gzip-compressed where it starts with gzip's
/// magic, whatever its name).
pub(crate) fn read(path: &Path) -> Result<Trace, Error> {
    read_holding(path, RANGES_HELD)
}

/// [`read`], holding at most `ranges_held` bytes of ranges in memory.
fn read_holding(path: &Path, ranges_held: usize) -> Result<Trace, Error> {
    let mut frames = Frames::new(open(path)?);
    let mut trace = Trace::new(ranges_held);
    read_frames(&mut frames, &mut trace).map_err(|e| not_a_trace(path, &frames, e))?;
    if let Some(e) = trace.failed.take() {
        return Err(e);
    }
    if trace.ranges.len() == 0 && trace.calls.is_empty() && trace.gpu.is_empty() {
        return Err(nothing_kept(path, &trace));
    }
    // The tables are held until the sweep: without the growth's spare room,
    // and the ranges, where they did not fit, without their buffer.
    trace.ranges.release()?;
    trace.calls.shrink_to_fit();
    trace.gpu.shrink_to_fit();
    Ok(trace)
}

/// The traces to read: the files given, a directory standing for the
/// traces in it (`*.json`, `*.json.gz`, by name: the ranks of one job).
pub(crate) fn traces_in(inputs: Vec<std::path::PathBuf>) -> Result<Vec<std::path::PathBuf>, Error> {
    let mut files = Vec::new();
    for input in inputs {
        if !input.is_dir() {
            files.push(input);
            continue;
        }
        let entries = std::fs::read_dir(&input).map_err(|e| crate::run_dir::io_error(&input, "list", &e))?;
        let mut found: Vec<std::path::PathBuf> = entries
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.is_file())
            .filter(|p| {
                let name = p.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
                name.ends_with(".json") || name.ends_with(".json.gz")
            })
            .collect();
        if found.is_empty() {
            return Err(Error::usage(format!("{}: a directory with no trace in it (*.json, *.json.gz)", input.display()))
                .with_hint("pass the traces torch.profiler wrote (tensorboard_trace_handler writes *.pt.trace.json), or the directory that holds them"));
        }
        found.sort();
        files.extend(found);
    }
    Ok(files)
}

/// The rank the trace's `distributedInfo` gives, read from the keys before
/// `traceEvents` only (Kineto writes it first): None where it is not there
/// or comes later, or where the file cannot be read.
pub(crate) fn peek_rank(path: &Path) -> Option<i64> {
    let input = open(path).ok()?;
    // The visitor stops at the first key it needs no further than (an error
    // to serde_json, which would read the rest of the map otherwise); what
    // it found is set aside first.
    struct Head<'a>(&'a mut Option<i64>);
    impl<'de> Visitor<'de> for Head<'_> {
        type Value = ();
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str("a trace object")
        }
        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
            while let Some(key) = map.next_key::<String>()? {
                match key.as_str() {
                    "distributedInfo" => {
                        let info: serde_json::Value = map.next_value()?;
                        *self.0 = info.get("rank").and_then(serde_json::Value::as_i64);
                        return Err(de::Error::custom("read enough"));
                    }
                    "traceEvents" => return Err(de::Error::custom("read enough")),
                    _ => {
                        map.next_value::<IgnoredAny>()?;
                    }
                }
            }
            Ok(())
        }
    }
    let mut rank = None;
    let _ = serde_json::Deserializer::from_reader(input).deserialize_map(Head(&mut rank));
    rank
}

/// A document with trace events, none of which llmperf reads.
fn nothing_kept(path: &Path, trace: &Trace) -> Error {
    let seen: Vec<String> = trace.skipped.iter().take(8).map(|(cat, n)| format!("{cat} ({n})")).collect();
    let why = if trace.odd_times > 0 {
        format!("the {} complete events of the categories it reads have no usable ts or dur", trace.odd_times)
    } else if seen.is_empty() {
        format!("none of its {} events is a complete event (ph \"X\")", trace.events)
    } else {
        format!("its complete events are of other categories: {}", seen.join(", "))
    };
    Error::new(ErrorKind::Unparseable, format!("{}: nothing to read as a PyTorch profiler trace: {why}", path.display()))
        .with_hint("llmperf import torch reads the cpu_op, user_annotation, kernel and cuda_runtime events that torch.profiler writes (export_chrome_trace, tensorboard_trace_handler)")
}

pub(crate) fn not_a_trace<R: Read>(path: &Path, frames: &Frames<R>, e: FrameError) -> Error {
    let (what, at, why) = match e {
        FrameError::Io(e) => ("could not be read to its end", String::new(), e.to_string()),
        FrameError::Syntax(why, offset) => {
            let (line, column) = frames.line_column(offset);
            ("is not a PyTorch profiler trace", format!(" (line {line}, column {column})"), why)
        }
    };
    let io = at.is_empty();
    Error::new(ErrorKind::Unparseable, format!("{}{at} {what}: {why}", path.display())).with_hint(if io {
        "a gzip file cut short, or unreadable: write the trace again, or check the copy"
    } else {
        "pass the JSON that torch.profiler wrote (export_chrome_trace, tensorboard_trace_handler: *.pt.trace.json or .json.gz)"
    })
}

/// The document: an object with `traceEvents` (or, as some tools write, a
/// bare array of events), cut into values by [`Frames`]; each event parsed
/// by serde_json from its own bytes.
fn read_frames<R: Read>(f: &mut Frames<R>, trace: &mut Trace) -> Result<(), FrameError> {
    match f.peek()? {
        Some(b'[') => {
            events(f, trace)?;
            return f.end();
        }
        Some(b'{') => f.bump(),
        Some(_) => return Err(FrameError::Syntax("expected a JSON object with traceEvents".into(), f.offset())),
        None => return Err(FrameError::Syntax("EOF while parsing the document: it is empty".into(), f.offset())),
    }
    let mut saw_events = false;
    // Events read before baseTimeNanoseconds (written last by Kineto) are
    // moved by it afterwards.
    let mut read_before_base = None;
    if f.peek()? == Some(b'}') {
        f.bump();
    } else {
        loop {
            let key: String = parsed(f)?;
            f.expect(b':', "':' after a key")?;
            match key.as_str() {
                "traceEvents" => {
                    events(f, trace)?;
                    saw_events = true;
                    read_before_base = Some(trace.meta.base_time_ns.is_none());
                }
                "schemaVersion" => trace.meta.schema_version = parsed::<_, serde_json::Value>(f)?.as_i64(),
                "baseTimeNanoseconds" => trace.meta.base_time_ns = parsed::<_, serde_json::Value>(f)?.as_i64(),
                "distributedInfo" => {
                    let info: serde_json::Value = parsed(f)?;
                    trace.meta.rank = info.get("rank").and_then(serde_json::Value::as_i64);
                    trace.meta.world_size = info.get("world_size").and_then(serde_json::Value::as_i64);
                }
                "deviceProperties" => trace.meta.devices = devices(&parsed(f)?),
                _ => {
                    f.value()?;
                }
            }
            match f.peek()? {
                Some(b',') => f.bump(),
                Some(b'}') => {
                    f.bump();
                    break;
                }
                Some(_) => return Err(FrameError::Syntax("expected ',' or '}' in the document".into(), f.offset())),
                None => return Err(FrameError::Syntax("EOF while parsing the document".into(), f.offset())),
            }
        }
    }
    f.end()?;
    if !saw_events {
        return Err(FrameError::Syntax("no traceEvents in the document".into(), f.offset()));
    }
    if let (Some(true), Some(base)) = (read_before_base, trace.meta.base_time_ns) {
        shift(trace, base)
            .ok_or_else(|| FrameError::Syntax("baseTimeNanoseconds moves a time past 2^63 ns".into(), f.offset()))?;
    }
    Ok(())
}

/// The next value, parsed by serde_json; an error is placed at the value.
fn parsed<R: Read, T: serde::de::DeserializeOwned>(f: &mut Frames<R>) -> Result<T, FrameError> {
    let at = f.offset();
    let r = f.value()?;
    serde_json::from_slice(f.bytes(r)).map_err(|e| FrameError::Syntax(e.to_string(), at))
}

/// `traceEvents`: an array of events, each handed to the trace.
fn events<R: Read>(f: &mut Frames<R>, trace: &mut Trace) -> Result<(), FrameError> {
    f.expect(b'[', "traceEvents to be an array")?;
    if f.peek()? == Some(b']') {
        f.bump();
        return Ok(());
    }
    loop {
        let at = f.offset();
        let r = f.value()?;
        let event: Event<'_> = serde_json::from_slice(f.bytes(r)).map_err(|e| {
            let why = e.to_string();
            let why = why.rsplit_once(" at line ").map_or(why.as_str(), |(msg, _)| msg).to_string();
            FrameError::Syntax(format!("an event: {why}"), at)
        })?;
        trace.add(event);
        match f.peek()? {
            Some(b',') => f.bump(),
            Some(b']') => {
                f.bump();
                return Ok(());
            }
            Some(_) => return Err(FrameError::Syntax("expected ',' or ']' between events".into(), f.offset())),
            None => {
                return Err(FrameError::Syntax("EOF while parsing the document: in traceEvents".into(), f.offset()))
            }
        }
    }
}

/// Add `base` to every time read before it was known.
fn shift(trace: &mut Trace, base: i64) -> Option<()> {
    // The ranges, partly on disk already, are moved as they are read back.
    if trace.ranges.len() > 0 {
        trace.range_bounds.0.checked_add(base)?;
        trace.range_bounds.1.checked_add(base)?;
        trace.range_shift = base;
    }
    for c in &mut trace.calls {
        c.start = c.start.checked_add(base)?;
    }
    for c in &mut trace.blocking {
        (c.start, c.end) = (c.start.checked_add(base)?, c.end.checked_add(base)?);
    }
    for g in &mut trace.gpu {
        (g.start, g.end) = (g.start.checked_add(base)?, g.end.checked_add(base)?);
    }
    Some(())
}

fn devices(props: &serde_json::Value) -> Vec<Device> {
    let Some(list) = props.as_array() else { return Vec::new() };
    list.iter()
        .enumerate()
        .filter_map(|(i, d)| {
            let name = d.get("name")?.as_str()?.to_string();
            let id = d.get("id").and_then(serde_json::Value::as_i64).unwrap_or(i as i64);
            Some(Device { id, name })
        })
        .collect()
}

/// `torch/capture.json`: the trace's own account of itself and of its GPU
/// work, beside the region model.
#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub(crate) struct Capture {
    /// The file read.
    pub(crate) trace: String,
    /// Its size when read: `llmperf export perfetto` of the run refuses a
    /// file of another size (changed since).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) trace_bytes: Option<u64>,
    pub(crate) schema_version: Option<i64>,
    /// `distributedInfo`'s rank and world size.
    pub(crate) rank: Option<i64>,
    pub(crate) world_size: Option<i64>,
    /// `deviceProperties`.
    pub(crate) devices: Vec<Device>,
    /// Events read.
    pub(crate) events: u64,
    /// Complete events of categories llmperf does not read, by category.
    pub(crate) skipped_categories: BTreeMap<String, u64>,
    /// Complete events left out because their `ts` or `dur` was missing or negative.
    pub(crate) odd_times: u64,
    #[serde(flatten)]
    pub(crate) summary: Summary,
}

/// GPU work counted by where it ran and what launched it (`torch/capture.json`).
#[derive(Debug, Clone, Default, serde::Serialize, schemars::JsonSchema)]
pub(crate) struct Summary {
    /// Per device and stream: kernels, copies and sets.
    pub(crate) streams: Vec<StreamRow>,
    /// Per launch call name (`cudaLaunchKernel`, `cuLaunchKernel`,
    /// `cudaGraphLaunch`, …): the kernels it launched.
    pub(crate) launch_calls: Vec<LaunchRow>,
    /// Kernels whose correlation id no runtime or driver call of the trace has.
    pub(crate) kernels_without_launch: Count,
    /// Kernels that CUDA graph launches ran, and the graph launches.
    pub(crate) graph_kernels: Count,
    pub(crate) graph_launches: u64,
    /// Correlation ids that more than one call holds: each kernel goes to the first call read.
    pub(crate) repeated_correlation_ids: u64,
    /// Process or thread ids past 2^24, which the region model cannot hold:
    /// each is numbered down from 2^24 − 1 instead.
    pub(crate) renumbered_ids: u64,
    /// Ranges that end after the range open on their thread when they
    /// started: not its children (it ends for the sweep when they start).
    pub(crate) overhanging_ranges: u64,
}

#[derive(Debug, Clone, Copy, Default, serde::Serialize, schemars::JsonSchema, PartialEq, Eq)]
pub(crate) struct Count {
    pub(crate) count: u64,
    pub(crate) time_ns: i64,
}

impl Count {
    fn add(&mut self, ns: i64) {
        self.count += 1;
        self.time_ns = self.time_ns.saturating_add(ns);
    }
}

#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub(crate) struct StreamRow {
    pub(crate) device: i64,
    pub(crate) stream: i64,
    pub(crate) kernels: Count,
    pub(crate) memcpy: Count,
    pub(crate) memset: Count,
}

#[derive(Debug, Clone, serde::Serialize, schemars::JsonSchema)]
pub(crate) struct LaunchRow {
    pub(crate) call: String,
    pub(crate) kernels: Count,
}

/// The process and thread of a range or call as one nsys-style global
/// thread id (process in bits 24–47, thread in 0–23); ids that do not fit in
/// 24 bits are numbered in the order met, and counted.
#[derive(Default)]
struct Threads {
    big: HashMap<i64, i64>,
    renumbered: u64,
}

impl Threads {
    fn small(&mut self, id: i64) -> i64 {
        if (0..1 << 24).contains(&id) {
            return id;
        }
        let next = (1 << 24) - 1 - self.big.len() as i64;
        *self.big.entry(id).or_insert_with(|| {
            self.renumbered += 1;
            next
        })
    }

    fn global(&mut self, pid: i64, tid: i64) -> i64 {
        (self.small(pid) << 24) | self.small(tid)
    }
}

/// Order of ranges that start and end together on one thread: the
/// annotation outside, then the Python function, then the operator.
fn nesting_rank(kind: RangeKind) -> u8 {
    match kind {
        RangeKind::UserAnnotation => 0,
        RangeKind::PythonFunction => 1,
        RangeKind::CpuOp => 2,
        RangeKind::GpuUserAnnotation => 3,
    }
}

/// The ranges taken out of a trace, to be sent in the sweep's order.
pub(crate) struct SortedRanges {
    ranges: Spill<Range>,
    shift: i64,
    /// The interned category names, by [`RangeKind`].
    domains: [u32; 4],
}

impl SortedRanges {
    /// Send every range, as the sweep reads it and in its order, to `out`
    /// (until its stream is gone); return how many overhang the range open
    /// on their thread when they start ([`Summary::overhanging_ranges`]).
    pub(crate) fn send(self, mut out: Batcher<NvtxRange>) -> Result<u64, Error> {
        let (shift, domains) = (self.shift, self.domains);
        let mut sorted = self.ranges.sorted()?;
        let mut overhang = Overhang::default();
        while let Some(r) = sorted.pop()? {
            overhang.see(&r);
            let range = NvtxRange {
                start: r.start + shift,
                end: r.end + shift,
                name: r.name,
                domain: domains[r.kind as usize],
                style: if r.kind == RangeKind::GpuUserAnnotation { RangeStyle::StartEnd } else { RangeStyle::PushPop },
                ended: true,
                global_tid: r.global_tid,
            };
            if !out.push(range) {
                break;
            }
        }
        out.flush();
        Ok(overhang.n)
    }
}

/// The trace's GPU work joined to its launch calls ([`Trace::join`]).
pub(crate) struct Joined {
    /// Every kernel with a launch call, in launch order, for the sweep.
    pub(crate) launches: Vec<Launched>,
    pub(crate) summary: Summary,
    /// Each kernel name's class.
    classes: HashMap<u32, u8>,
    /// The one process of the host side, where there is one: the process of
    /// the GPU work no call explains.
    lone_pid: i64,
}

impl Trace {
    /// The ranges, taken out of the trace (it holds none after).
    pub(crate) fn take_ranges(&mut self) -> SortedRanges {
        let domains = RangeKind::ALL.map(|k| self.names.intern(k.category()));
        SortedRanges { ranges: std::mem::replace(&mut self.ranges, Spill::new(0)), shift: self.range_shift, domains }
    }

    /// Join each kernel, copy and set to the call that launched it (by
    /// correlation id): every kernel goes to `kernels` in file order, and
    /// the kernels with a launch call come back in launch order for the
    /// sweep. After it the GPU work is in start order for [`Trace::activity`].
    pub(crate) fn join<K: KernelSink>(&mut self, classify: &dyn Fn(&str) -> u8, kernels: &mut K) -> Joined {
        let mut summary = Summary::default();
        // Sorted by correlation id for [`call_of`]: stable, so that of several
        // calls holding one id the first read comes first (the others are
        // counted). A sort in place, not a map beside them.
        self.calls.sort_by_key(|c| c.correlation);
        summary.repeated_correlation_ids =
            self.calls.windows(2).filter(|w| w[0].correlation == w[1].correlation).count() as u64;
        let mut host_pids = std::mem::take(&mut self.host_pids);
        host_pids.extend(self.call_threads.iter().map(|&(pid, _)| pid));
        let lone_pid = if host_pids.len() == 1 { host_pids.first().copied().unwrap_or(0) } else { 0 };
        let devices: std::collections::BTreeSet<i64> = self.gpu.iter().map(|g| g.device).collect();
        let mut streams: BTreeMap<(i64, i64), StreamRow> = BTreeMap::new();
        let mut launch_calls: BTreeMap<u32, Count> = BTreeMap::new();
        let mut graphs: std::collections::HashSet<usize> = std::collections::HashSet::new();
        let kernel_count = self.gpu.iter().filter(|g| g.kind == GpuKind::Kernel).count();
        let mut launches = Vec::with_capacity(kernel_count);
        let mut classes: HashMap<u32, u8> = HashMap::default();
        let strings = HashMap::default();
        let Trace { gpu, calls, call_threads, names, threads, .. } = self;
        for g in gpu.iter_mut() {
            let ns = g.end - g.start;
            let call = match g.link {
                Link::Correlation(c) => call_of(calls, c).map(|i| (i, &calls[i])),
                _ => None,
            };
            g.link = call.map_or(Link::None, |(_, c)| Link::Thread(c.thread));
            let row = streams.entry((g.device, g.stream)).or_insert_with(|| StreamRow {
                device: g.device,
                stream: g.stream,
                kernels: Count::default(),
                memcpy: Count::default(),
                memset: Count::default(),
            });
            match g.kind {
                GpuKind::Memcpy => row.memcpy.add(ns),
                GpuKind::Memset => row.memset.add(ns),
                GpuKind::Kernel => row.kernels.add(ns),
            }
            if g.kind != GpuKind::Kernel {
                continue;
            }
            classes.entry(g.name).or_insert_with(|| classify(names.get(g.name)));
            let graph = call.is_some_and(|(_, c)| names.get(c.name).contains("GraphLaunch"));
            let pid = match call {
                Some((i, c)) => {
                    launch_calls.entry(c.name).or_default().add(ns);
                    if graph {
                        summary.graph_kernels.add(ns);
                        graphs.insert(i);
                    }
                    let (pid, tid) = call_threads[c.thread as usize];
                    launches.push(Launched {
                        global_tid: threads.global(pid, tid),
                        launch: c.start,
                        start: g.start,
                        end: g.end,
                        name: g.name,
                        graph,
                    });
                    pid
                }
                None => {
                    summary.kernels_without_launch.add(ns);
                    lone_pid
                }
            };
            let kernel = Kernel {
                start: g.start,
                end: g.end,
                name: g.name,
                short_id: None,
                graph,
                pid,
                device: (devices.len() > 1).then_some(g.device),
                gpu: g.device,
            };
            kernels.add(kernel, &strings, names);
        }
        // Each GPU operation holds its launch call's thread now: the calls are done with.
        *calls = Vec::new();
        launches.sort_by_key(|l| l.launch);
        // Stable: work starting together stays in file order.
        self.gpu.sort_by_key(|g| g.start);
        self.blocking.sort_by_key(|c| c.start);
        summary.graph_launches = graphs.len() as u64;
        summary.streams = streams.into_values().collect();
        summary.renumbered_ids = self.threads.renumbered;
        summary.launch_calls = launch_calls
            .into_iter()
            .map(|(name, kernels)| LaunchRow { call: self.names.get(name).to_string(), kernels })
            .collect();
        Joined { launches, summary, classes, lone_pid }
    }

    /// Every kernel, copy and set for the time breakdown, in start order
    /// (after [`Trace::join`]), each on the process that launched it; a
    /// kernel's name is its interned id, its class `classify`'s.
    pub(crate) fn activity<'a>(&'a self, joined: &'a Joined) -> impl Iterator<Item = Activity> + 'a {
        self.gpu.iter().map(move |g| {
            let pid = match g.link {
                Link::Thread(t) => self.call_threads[t as usize].0,
                _ => joined.lone_pid,
            };
            let what = match g.kind {
                GpuKind::Kernel => What::Kernel(joined.classes.get(&g.name).copied().unwrap_or_default()),
                GpuKind::Memcpy => {
                    let (direction, pageable) = copy_kind(self.names.get(g.name));
                    What::Copy { direction, bytes: g.bytes, pageable }
                }
                GpuKind::Memset => What::Memset { bytes: g.bytes },
            };
            Activity {
                pid,
                device: g.device,
                start: g.start,
                end: g.end,
                what,
                name: if g.kind == GpuKind::Kernel { i64::from(g.name) } else { 0 },
            }
        })
    }
}

/// The first call holding `correlation` in calls sorted by it.
fn call_of(calls: &[Launch], correlation: i64) -> Option<usize> {
    let i = calls.partition_point(|c| c.correlation < correlation);
    (calls.get(i)?.correlation == correlation).then_some(i)
}

/// A copy's direction, and whether host memory on its side is pageable (the
/// copy is then synchronous for the host), from Kineto's name:
/// `Memcpy HtoD (Pageable -> Device)`, `Memcpy DtoD (Device -> Device)`.
fn copy_kind(name: &str) -> (Direction, bool) {
    let kind = name.split_whitespace().nth(1).unwrap_or("");
    let direction = match kind {
        "HtoD" => Direction::HostToDevice,
        "DtoH" => Direction::DeviceToHost,
        "DtoD" => Direction::DeviceToDevice,
        "PtoP" => Direction::PeerToPeer,
        _ => Direction::Other,
    };
    let pageable = match direction {
        Direction::HostToDevice => name.contains("(Pageable ->"),
        Direction::DeviceToHost => name.contains("-> Pageable)"),
        _ => false,
    };
    (direction, pageable)
}

/// The time breakdown's feed, in the order an [`ActivitySink`] takes it:
/// before each operation, every window and every blocking call starting at
/// or before it; then what is left. False when the sink found an operation
/// out of order (it cannot be: the activity is sorted).
pub(crate) fn feed<S: ActivitySink>(
    sink: &mut S,
    windows: Vec<S::Window>,
    activity: impl Iterator<Item = Activity>,
    blocking: &[Call],
) -> bool {
    let mut windows = windows.into_iter().peekable();
    let mut calls = blocking.iter().peekable();
    let mut in_order = true;
    for a in activity {
        while let Some(w) = windows.next_if(|w| S::start_of(w) <= a.start) {
            sink.window(w);
        }
        while let Some(c) = calls.next_if(|c| c.start <= a.start) {
            sink.blocking(c.pid, c.start, c.end, i64::from(c.name), a.start);
        }
        in_order &= sink.add(a);
    }
    for w in windows {
        sink.window(w);
    }
    for c in calls {
        sink.blocking(c.pid, c.start, c.end, i64::from(c.name), c.start);
    }
    in_order
}

/// Ranges, met in the sweep's order (by start, the longer first), that end
/// after the innermost range open on their thread when they start.
#[derive(Default)]
struct Overhang {
    /// The ends of the ranges open, per thread and side (CPU or GPU).
    open: HashMap<(i64, bool), Vec<i64>>,
    n: u64,
}

impl Overhang {
    fn see(&mut self, r: &Range) {
        let stack = self.open.entry((r.global_tid, r.kind == RangeKind::GpuUserAnnotation)).or_default();
        while stack.last().is_some_and(|&end| end < r.start) {
            stack.pop();
        }
        if stack.last().is_some_and(|&end| end < r.end && end > r.start) {
            self.n += 1;
        }
        while stack.last().is_some_and(|&end| end < r.end) {
            stack.pop();
        }
        stack.push(r.end);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A range as the sweep gets it: start, end, name, domain, thread.
    type Sent = (i64, i64, String, String, i64);

    /// The ranges as the sweep gets them, and the overhanging count.
    fn sent(trace: &mut Trace) -> (Vec<Sent>, u64) {
        let ranges = trace.take_ranges();
        let (out, stream) = crate::parse::nsys::batched::channel();
        let (got, overhang) = std::thread::scope(|s| {
            let sender = s.spawn(move || ranges.send(out));
            let got: Vec<NvtxRange> = stream.collect();
            (got, sender.join().unwrap().unwrap())
        });
        let rows = got
            .iter()
            .map(|r| {
                let name = |id: u32| trace.names.get(id).to_string();
                (r.start, r.end, name(r.name), name(r.domain), r.global_tid)
            })
            .collect();
        (rows, overhang)
    }

    /// Ranges sorted through many runs on disk come out as those sorted in
    /// memory (ties in file order), and `baseTimeNanoseconds`, which Kineto
    /// writes after the events, moves them all, on disk or not, by exactly
    /// its value. The traces are the corpus's, one edited to carry the key.
    #[test]
    fn ranges_sorted_on_disk_are_those_sorted_in_memory_and_the_base_moves_them() {
        let files = [
            "real/kineto/hta-ns-resolution/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz",
            "real/kineto/deepseek-profile-data/train.json",
        ];
        for rel in files {
            let Some(path) = crate::testdata::corpus("ranges_sorted_on_disk", rel) else { return };
            let mut held = read(&path).unwrap();
            assert_eq!(held.ranges.spilled(), 0, "{rel}: fits in memory");
            let mut spilled = read_holding(&path, 64 * std::mem::size_of::<Range>()).unwrap();
            assert!(spilled.ranges.spilled() > 10, "{rel}: {} runs", spilled.ranges.spilled());
            let (want, want_overhang) = sent(&mut held);
            assert!(want.len() > 1000, "{rel}: {} ranges", want.len());
            assert!(want.windows(2).all(|w| w[0].0 <= w[1].0), "{rel}: by start");
            assert_eq!(sent(&mut spilled), (want.clone(), want_overhang), "{rel}");

            // The same trace, with a base.
            let mut text = String::new();
            open(&path).unwrap().read_to_string(&mut text).unwrap();
            let end = text.trim_end().strip_suffix('}').expect("an object");
            const BASE: i64 = 1_000_000_007;
            let dir = tempfile::tempdir().unwrap();
            let based = dir.path().join("based.json");
            std::fs::write(&based, format!("{end}, \"baseTimeNanoseconds\": {BASE}}}")).unwrap();
            let mut moved = read_holding(&based, 64 * std::mem::size_of::<Range>()).unwrap();
            assert_eq!(moved.meta.base_time_ns, Some(BASE));
            let moved_want: Vec<_> =
                want.iter().map(|r| (r.0 + BASE, r.1 + BASE, r.2.clone(), r.3.clone(), r.4)).collect();
            assert_eq!(sent(&mut moved), (moved_want, want_overhang), "{rel} with a base");
        }
    }

    #[test]
    fn microseconds_become_exact_nanoseconds() {
        for (text, ns) in [
            ("1712195495519695.8", 1_712_195_495_519_695_800),
            ("63.813", 63_813),
            ("10.0", 10_000),
            ("1740461679479712", 1_740_461_679_479_712_000),
            ("0", 0),
            ("1e3", 1_000_000),
            ("1.5E-3", 2),
            ("0.0004", 0),
            ("0.0005", 1),
            ("-2.5", -2_500),
        ] {
            assert_eq!(micros_to_ns(text), Some(ns), "{text}");
        }
        for text in ["", "x", "1.2.3", "1e", "99999999999999999999999", ".5", "1e999"] {
            assert_eq!(micros_to_ns(text), None, "{text}");
        }
    }

    #[test]
    fn ids_are_numbers_or_end_with_one() {
        let id = |text: &str| id_of(&RawValue::from_string(text.to_string()).unwrap());
        assert_eq!(id("\"stream 7\""), Some(7));
        assert_eq!(id("\"25738\""), Some(25738));
        assert_eq!(id("\"Spans\""), None);
        assert_eq!(id("3"), Some(3));
    }
}
