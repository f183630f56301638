//! export::perfetto: an Nsight Systems export (SQLite) written as Chrome
//! JSON trace events in the dialect torch.profiler (Kineto) writes, one
//! gzipped file per process, so that ui.perfetto.dev and `chrome://tracing`
//! open it and the PyTorch-trace tools (Holistic Trace Analysis, llmperf's own
//! `import torch`) read it as if torch.profiler had written it.
//!
//! What each file holds, for its process (Kineto's names):
//! - `user_annotation` slices: the NVTX push/pop ranges of each host thread
//!   (`pid` the process, `tid` the thread), nested as they were; start/end
//!   ranges, which need not nest, as async slices (`b`/`e`) of their own;
//! - `cuda_runtime` / `cuda_driver` slices: the CUDA API calls, with the
//!   `correlation` that ties a launch to what it launched;
//! - `kernel`, `gpu_memcpy`, `gpu_memset` slices on a track per device
//!   (`pid` the device, `tid` the stream), with `device`, `stream`,
//!   `correlation` and the launch configuration in `args`;
//! - `ac2g` flows (`s` on the call, `f` on the GPU operation) for each
//!   correlation whose call and operation are both in the export;
//! - per device an idle track (`llmperf_idle` slices): the breakdown's
//!   launch gaps, sync stalls and nothing-queued stretches, cut by its own
//!   sweep ([`Idle`]);
//! - findings (a run's findings.json, where the command is given a run) as
//!   instant events (`llmperf_finding`) at the first instance of the region
//!   each names, the finding whole in `args`;
//! - `process_name` / `thread_name` metadata, `deviceProperties` from the
//!   export's `TARGET_INFO_GPU`, and `distributedInfo` (rank: as the run's
//!   launcher gave it, else the process's place in pid order; `rank_from`
//!   says which).
//!
//! NVTX names that carry PyTorch's per-call attributes (`aten::mm, seq = 3,
//! op_id = 5`) are named by their operator, with the attributes in `args`,
//! as `llmperf import nsys` names them (`report.nvtx_attributes`).
//!
//! Times are the export's nanoseconds written as microseconds with three
//! decimals (`ts`, `dur`): exact, as Kineto writes them since 2023. The
//! writer streams: each table is read once in stored order and each row is
//! written as it is read; memory holds the names and the open ranges.
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Write;
use std::path::{Path, PathBuf};

use flate2::write::GzEncoder;
use flate2::Compression;
use rustc_hash::FxHashMap as HashMap;
use serde::Serialize;

use crate::aggregate::nsys::breakdown::{Breakdown, IDLE_KINDS};
use crate::error::{Error, ErrorKind};
use crate::parse::nsys::activity::{Activity, ActivitySink, Direction, What};
use crate::parse::nsys::sqlite::{pid_of, tid_of, Names, NsysDb, Order};
use crate::parse::nsys::sqlite_rows::Rows;
use crate::regions::RangeStyle;
use crate::run_dir;

/// A file being written: `.pid<PID>.pt.trace.json.gz.partial`.
pub(super) fn partial_name(pid: i64) -> String {
    format!(".{}.partial", run_dir::perfetto_trace(pid))
}

/// The entries of `dir` an export writes (traces, and partial ones), each
/// with whether it is partial; an error naming the first entry that is not
/// one: the directory holds someone else's files, which are not touched.
pub(super) fn ours(dir: &Path) -> Result<Vec<(String, bool)>, Error> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else { return Ok(found) };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        match name.strip_prefix('.').and_then(|n| n.strip_suffix(".partial")) {
            Some(inner) if run_dir::is_perfetto_trace(inner) => found.push((name, true)),
            _ if run_dir::is_perfetto_trace(&name) => found.push((name, false)),
            _ => {
                return Err(Error::new(
                    ErrorKind::Usage,
                    format!(
                        "{} holds {name}, which an export did not write: its traces would mix with it",
                        dir.display()
                    ),
                )
                .with_hint("export into a new or empty directory (-o DIR)"))
            }
        }
    }
    Ok(found)
}

/// What an export wrote: per file, its process and counts of each kind.
#[derive(Debug, Default, Serialize)]
pub(crate) struct Summary {
    pub(crate) files: Vec<FileSummary>,
    /// NVTX ranges left out: still open when the capture stopped.
    pub(crate) unended_ranges: u64,
    /// Findings not drawn: no instance of their region in their process.
    pub(crate) findings_left_out: usize,
    /// GPU operations left out: their end is before their start.
    pub(crate) odd_spans: u64,
    /// Why the idle track was left out, where it was.
    pub(crate) idle_left_out: Option<String>,
}

#[derive(Debug, Default, Clone, Serialize)]
pub(crate) struct FileSummary {
    pub(crate) file: String,
    pub(crate) pid: i64,
    pub(crate) rank: usize,
    pub(crate) ranges: u64,
    pub(crate) calls: u64,
    pub(crate) kernels: u64,
    pub(crate) memcpys: u64,
    pub(crate) memsets: u64,
    pub(crate) flows: u64,
    /// Idle stretches of the devices' spans (the idle track).
    pub(crate) idle: u64,
    /// GPU operations that started before the last one on their stream
    /// ended, put on an overlap track of the stream.
    pub(crate) overlapping: u64,
    /// Of those, the ones no overlap track could take: they cross a slice.
    pub(crate) crossing: u64,
    /// A torch trace's events, copied as the file has them (none for an
    /// nsys capture, whose events are counted above).
    pub(crate) copied: Option<u64>,
}

/// Tracks per stream: its own and the overlap tracks.
const MAX_LANES: usize = 16;

/// ns as µs with three decimals: `1234567` → `1234.567`.
pub(super) fn micros(out: &mut String, ns: i64) {
    let sign = if ns < 0 { "-" } else { "" };
    let a = ns.unsigned_abs();
    let _ = write!(out, "{sign}{}.{:03}", a / 1000, a % 1000);
}

/// A file gzipped on a thread of its own: writes fill a chunk, and each
/// full chunk goes to the thread (two in flight at most), so that
/// formatting and compressing take a core each. (Chunks, not events, reach
/// the encoder: flate2 zero-fills its 32 KiB output buffer on every write,
/// a third of an export's time when it was handed one event per write.)
pub(super) struct Gz {
    chunk: Vec<u8>,
    to: Option<std::sync::mpsc::SyncSender<Vec<u8>>>,
    thread: Option<std::thread::JoinHandle<std::io::Result<()>>>,
}

const CHUNK: usize = 256 << 10;

impl Gz {
    pub(super) fn create(file: std::fs::File) -> Gz {
        let (to, from) = std::sync::mpsc::sync_channel::<Vec<u8>>(2);
        let thread = std::thread::spawn(move || {
            let mut gz = GzEncoder::new(file, Compression::fast());
            for chunk in from {
                gz.write_all(&chunk)?;
            }
            gz.finish()?.flush()
        });
        Gz { chunk: Vec::with_capacity(CHUNK), to: Some(to), thread: Some(thread) }
    }

    pub(super) fn write_all(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.chunk.extend_from_slice(bytes);
        if self.chunk.len() >= CHUNK {
            self.send()?;
        }
        Ok(())
    }

    fn send(&mut self) -> std::io::Result<()> {
        let chunk = std::mem::replace(&mut self.chunk, Vec::with_capacity(CHUNK));
        if self.to.as_ref().is_some_and(|to| to.send(chunk).is_ok()) {
            return Ok(());
        }
        // The thread stopped: its error says why.
        self.finish().and(Err(std::io::Error::other("the compressing thread stopped")))
    }

    /// The rest written, the stream ended and the file closed.
    pub(super) fn finish(&mut self) -> std::io::Result<()> {
        if !self.chunk.is_empty() {
            let chunk = std::mem::take(&mut self.chunk);
            if let Some(to) = &self.to {
                let _ = to.send(chunk);
            }
        }
        self.to = None;
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(std::io::Error::other("the compressing thread panicked")),
            None => Ok(()),
        }
    }
}

/// One process's file: gzip stream, and whether an event was written yet.
struct Out {
    gz: Gz,
    path: PathBuf,
    first: bool,
    summary: FileSummary,
    /// GPU tracks (device, tid) named so far.
    tracks: std::collections::BTreeSet<(i64, i64)>,
    /// Per (device, stream), each track's latest end: lane 0 is the stream's
    /// own track, the others hold operations that overlap it.
    lanes: HashMap<(i64, i64), Vec<i64>>,
    /// Host threads named so far.
    threads: std::collections::BTreeSet<i64>,
}

impl Out {
    fn event(&mut self, line: &str) -> Result<(), Error> {
        let sep: &[u8] = if self.first { b"\n" } else { b",\n" };
        self.first = false;
        self.gz
            .write_all(sep)
            .and_then(|()| self.gz.write_all(line.as_bytes()))
            .map_err(|e| crate::run_dir::io_error(&self.path, "write", &e))
    }
}

/// A JSON string, escaped.
pub(super) fn json_str(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"\"".into())
}

/// The writer of every process's file.
struct Writer {
    dir: PathBuf,
    files: BTreeMap<i64, Out>,
    ranks: BTreeMap<i64, usize>,
    thread_names: HashMap<i64, String>,
    process_names: HashMap<i64, String>,
    line: String,
    /// The process of GPU operations whose row names none (a table without
    /// `globalPid`, or a NULL in it): the capture's only process.
    unplaced_pid: i64,
}

impl Writer {
    fn out(&mut self, pid: i64) -> Result<&mut Out, Error> {
        let Some(rank) = self.ranks.get(&pid).copied() else {
            return Err(Error::new(ErrorKind::Internal, format!("process {pid} was not among the export's processes")));
        };
        if !self.files.contains_key(&pid) {
            let path = self.dir.join(partial_name(pid));
            let file = std::fs::File::create(&path).map_err(|e| crate::run_dir::io_error(&path, "create", &e))?;
            let mut out = Out {
                gz: Gz::create(file),
                path: path.clone(),
                first: true,
                summary: FileSummary { file: run_dir::perfetto_trace(pid), pid, rank, ..FileSummary::default() },
                tracks: Default::default(),
                lanes: HashMap::default(),
                threads: Default::default(),
            };
            out.gz
                .write_all(b"{\"schemaVersion\": 1, \"traceEvents\": [")
                .map_err(|e| crate::run_dir::io_error(&path, "write", &e))?;
            let name = self.process_names.get(&pid).cloned().unwrap_or_else(|| format!("process {pid}"));
            let meta = format!(
                r#"{{"ph":"M","name":"process_name","pid":{pid},"tid":0,"args":{{"name":{}}}}}"#,
                json_str(&format!("{name} (pid {pid}, rank {rank})"))
            );
            out.event(&meta)?;
            self.files.insert(pid, out);
        }
        Ok(self.files.get_mut(&pid).expect("inserted above"))
    }

    /// Names host thread `tid` of `pid` the first time it is written to.
    fn thread(&mut self, pid: i64, global_tid: i64) -> Result<(), Error> {
        let tid = tid_of(global_tid);
        if self.out(pid)?.threads.contains(&tid) {
            return Ok(());
        }
        let name = self.thread_names.get(&global_tid).cloned();
        let out = self.out(pid)?;
        if out.threads.insert(tid) {
            let name = name.unwrap_or_else(|| format!("thread {tid}"));
            out.event(&format!(
                r#"{{"ph":"M","name":"thread_name","pid":{pid},"tid":{tid},"args":{{"name":{}}}}}"#,
                json_str(&name)
            ))?;
        }
        Ok(())
    }

    /// The track (tid) of an operation `span` on `stream` of `device` in
    /// `pid`'s file, named the first time: the stream's own (tid = stream),
    /// or where the operation starts before the last one there ended (CUDA
    /// lets kernels of one stream overlap: programmatic dependent launch),
    /// the first of its overlap tracks (tid = stream + k << 32) it fits, so
    /// that no slice crosses another on a track. None fits among
    /// [`MAX_LANES`]: the last, and it is counted.
    fn track(&mut self, pid: i64, device: i64, stream: i64, span: (i64, i64)) -> Result<i64, Error> {
        let out = self.out(pid)?;
        let lanes = out.lanes.entry((device, stream)).or_default();
        let lane = match lanes.iter().position(|&end| end <= span.0) {
            Some(k) => k,
            None if lanes.len() < MAX_LANES => {
                lanes.push(i64::MIN);
                lanes.len() - 1
            }
            None => {
                out.summary.crossing += 1;
                MAX_LANES - 1
            }
        };
        lanes[lane] = lanes[lane].max(span.1);
        if lane > 0 {
            out.summary.overlapping += 1;
        }
        let tid = stream + ((lane as i64) << 32);
        if out.tracks.insert((device, tid)) {
            if !out.tracks.iter().any(|&(d, t)| d == device && t != tid) {
                out.event(&format!(
                    r#"{{"ph":"M","name":"process_name","pid":{device},"tid":0,"args":{{"name":"GPU {device}"}}}}"#
                ))?;
            }
            let name =
                if lane == 0 { format!("stream {stream}") } else { format!("stream {stream} (overlapping {lane})") };
            out.event(&format!(
                r#"{{"ph":"M","name":"thread_name","pid":{device},"tid":{tid},"args":{{"name":"{name}"}}}}"#
            ))?;
        }
        Ok(tid)
    }

    /// Names the idle track of `device` in `pid`'s file the first time.
    fn idle_track(&mut self, pid: i64, device: i64) -> Result<(), Error> {
        let out = self.out(pid)?;
        if out.tracks.insert((device, IDLE_TID)) {
            if !out.tracks.iter().any(|&(d, t)| d == device && t != IDLE_TID) {
                out.event(&format!(
                    r#"{{"ph":"M","name":"process_name","pid":{device},"tid":0,"args":{{"name":"GPU {device}"}}}}"#
                ))?;
            }
            out.event(&format!(
                r#"{{"ph":"M","name":"thread_name","pid":{device},"tid":{IDLE_TID},"args":{{"name":"idle (llmperf breakdown)"}}}}"#
            ))?;
        }
        Ok(())
    }

    /// A complete slice of `span` (ns) in `pid`'s file, on `track` (pid, tid).
    fn slice(
        &mut self,
        pid: i64,
        track: (i64, i64),
        cat: &str,
        name: &str,
        span: (i64, i64),
        args: &str,
    ) -> Result<(), Error> {
        let (start, end) = span;
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        let _ = write!(
            line,
            r#"{{"ph":"X","cat":"{cat}","name":{},"pid":{},"tid":{},"ts":"#,
            json_str(name),
            track.0,
            track.1
        );
        micros(&mut line, start);
        line.push_str(",\"dur\":");
        micros(&mut line, end - start);
        let _ = write!(line, r#","args":{{{args}}}}}"#);
        let r = self.out(pid)?.event(&line);
        self.line = line;
        r
    }

    fn finish(mut self, meta: &Meta) -> Result<Vec<FileSummary>, Error> {
        let world = self.ranks.values().collect::<std::collections::BTreeSet<_>>().len();
        let mut summaries = Vec::new();
        // A process with no event still gets its file: its rank is in the job.
        let pids: Vec<i64> = self.ranks.keys().copied().collect();
        for pid in pids {
            self.out(pid)?;
        }
        for (_, mut out) in std::mem::take(&mut self.files) {
            let rank = out.summary.rank;
            let tail = format!(
                "\n], \"deviceProperties\": {}, \"distributedInfo\": {{\"rank\": {rank}, \"world_size\": {world}, \"rank_from\": {}}}, \"displayTimeUnit\": \"ms\", \"traceName\": {}}}\n",
                meta.devices,
                json_str(meta.rank_from),
                json_str(&out.summary.file)
            );
            let path = out.path.clone();
            out.gz.write_all(tail.as_bytes()).map_err(|e| crate::run_dir::io_error(&path, "write", &e))?;
            out.gz.finish().map_err(|e| crate::run_dir::io_error(&path, "write", &e))?;
            summaries.push(out.summary);
        }
        // Whole files only, and this export's only: each takes its name once
        // complete, and a trace of an earlier export's process is removed.
        for s in &summaries {
            let (from, to) = (self.dir.join(partial_name(s.pid)), self.dir.join(&s.file));
            std::fs::rename(&from, &to).map_err(|e| crate::run_dir::io_error(&to, "write", &e))?;
        }
        for (name, _) in ours(&self.dir)? {
            if !summaries.iter().any(|s| s.file == name) {
                let stale = self.dir.join(&name);
                std::fs::remove_file(&stale).map_err(|e| crate::run_dir::io_error(&stale, "remove", &e))?;
            }
        }
        Ok(summaries)
    }
}

/// What every file repeats: the devices, and where the ranks came from.
struct Meta {
    devices: String,
    rank_from: &'static str,
}

/// `deviceProperties` from `TARGET_INFO_GPU` (Kineto's keys); `[]` where the
/// export has none (nsys 2026 exports); `id` null where it has no `cuDevice`.
fn devices(db: &NsysDb) -> String {
    if !db.has_table("TARGET_INFO_GPU") {
        return "[]".into();
    }
    let cols = db.columns("TARGET_INFO_GPU");
    let col = |c: &str| if cols.contains(c) { c.to_string() } else { "NULL".to_string() };
    // The CUDA ordinal, as Kineto's `id` is; nsys's own GPU id need not be it.
    let id = if cols.contains("cuDevice") { "cuDevice" } else { "NULL" };
    let sql = format!(
        "SELECT {id}, name, {}, {}, {}, {} FROM TARGET_INFO_GPU",
        col("totalMemory"),
        col("computeMajor"),
        col("computeMinor"),
        col("smCount")
    );
    let Ok(mut stmt) = db.conn().prepare(&sql) else { return "[]".into() };
    let rows = stmt.query_map([], |r| {
        Ok(serde_json::json!({
            "id": r.get::<_, Option<i64>>(0)?,
            "name": r.get::<_, Option<String>>(1)?,
            "totalGlobalMem": r.get::<_, Option<i64>>(2)?,
            "computeMajor": r.get::<_, Option<i64>>(3)?,
            "computeMinor": r.get::<_, Option<i64>>(4)?,
            "numSms": r.get::<_, Option<i64>>(5)?,
        }))
    });
    let list: Vec<serde_json::Value> = match rows {
        Ok(rows) => rows.filter_map(Result::ok).collect(),
        Err(_) => Vec::new(),
    };
    serde_json::to_string(&list).unwrap_or_else(|_| "[]".into())
}

/// Every process the export has activity of, in pid order (its place is its
/// rank), and the first GPU table with operations that name no process.
fn processes(db: &NsysDb) -> Result<(Vec<i64>, Option<&'static str>), Error> {
    let mut pids = std::collections::BTreeSet::new();
    let mut add = |sql: &str, what: &str| -> Result<(), Error> {
        let mut stmt = db.conn().prepare(sql).map_err(|e| db.sql_error(what, e))?;
        let rows = stmt.query_map([], |r| r.get::<_, i64>(0)).map_err(|e| db.sql_error(what, e))?;
        for gid in rows {
            pids.insert(pid_of(gid.map_err(|e| db.sql_error(what, e))?));
        }
        Ok(())
    };
    for table in ["NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_DRIVER"] {
        if db.has_table(table) && db.columns(table).contains("globalTid") {
            add(&format!("SELECT DISTINCT globalTid FROM {table} WHERE globalTid IS NOT NULL"), table)?;
        }
    }
    let mut unplaced = None;
    for table in GPU_TABLES.iter().map(|(t, _)| *t).filter(|t| db.has_table(t)) {
        let with_pid = db.columns(table).contains("globalPid");
        if with_pid {
            add(&format!("SELECT DISTINCT globalPid FROM {table} WHERE globalPid IS NOT NULL"), table)?;
        }
        let none = if with_pid { "WHERE globalPid IS NULL" } else { "" };
        let found =
            db.conn().query_row(&format!("SELECT EXISTS (SELECT 1 FROM {table} {none})"), [], |r| r.get::<_, bool>(0));
        if found.map_err(|e| db.sql_error(table, e))? {
            unplaced = unplaced.or(Some(table));
        }
    }
    Ok((pids.into_iter().collect(), unplaced))
}

/// The tables of GPU work and the category Kineto gives each.
const GPU_TABLES: [(&str, &str); 3] = [
    ("CUPTI_ACTIVITY_KIND_KERNEL", "kernel"),
    ("CUPTI_ACTIVITY_KIND_MEMCPY", "gpu_memcpy"),
    ("CUPTI_ACTIVITY_KIND_MEMSET", "gpu_memset"),
];

fn names_of(db: &NsysDb, sql: &str, what: &str) -> HashMap<i64, String> {
    let Ok(mut stmt) = db.conn().prepare(sql) else { return HashMap::default() };
    let Ok(rows) = stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, Option<String>>(1)?))) else {
        tracing::debug!("{what}: not read");
        return HashMap::default();
    };
    rows.filter_map(Result::ok).map(|(id, name)| (id, name.unwrap_or_default())).collect()
}

/// Write `sqlite`'s export as one trace per process into `dir` (created).
/// `ranks`: each process's rank where the run recorded it (a `--launcher`
/// capture's regions.json); else a process's rank is its place in pid order.
/// `strip`: the PyTorch attribute keys moved from range names to args
/// (`report.nvtx_attributes`).
/// `findings`: findings.json's findings, each drawn as an instant event at
/// the first instance of the region it names in its process.
pub(crate) fn export(
    sqlite: &Path,
    dir: &Path,
    ranks: &BTreeMap<i64, usize>,
    strip: &[String],
    findings: &[serde_json::Value],
    launch_gap_ns: i64,
) -> Result<Summary, Error> {
    let db = NsysDb::open(sqlite)?;
    // Another export's traces are replaced; anything else in the directory
    // stops the export before it writes.
    for (name, partial) in ours(dir)? {
        if partial {
            let _ = std::fs::remove_file(dir.join(name));
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| crate::run_dir::io_error(dir, "create the output directory", &e))?;
    let (mut pids, unplaced) = processes(&db)?;
    // GPU work with no process: the capture's only one ran it; with several,
    // which one did is not in the export.
    let unplaced_pid = match (unplaced, pids.as_slice()) {
        (None, _) => 0,
        (Some(_), []) => {
            pids.push(0);
            0
        }
        (Some(_), [one]) => *one,
        (Some(table), many) => {
            let list = many.iter().map(i64::to_string).collect::<Vec<_>>().join(", ");
            return Err(Error::new(
                ErrorKind::Unparseable,
                format!(
                    "{}: {table} has GPU operations that name no process (no globalPid) and the capture holds {} processes ({list}): which one ran them is not in the export",
                    sqlite.display(),
                    many.len()
                ),
            )
            .with_hint("export the .nsys-rep again with a newer nsys (`nsys export --type sqlite`), whose GPU tables carry globalPid"));
        }
    };
    if pids.is_empty() {
        return Err(Error::new(
            ErrorKind::Unparseable,
            format!("{}: no NVTX range, CUDA call or GPU operation to export", sqlite.display()),
        )
        .with_hint("capture with `-t cuda,nvtx` (llmperf profile does) so that the export holds a timeline"));
    }
    let known = !ranks.is_empty() && pids.iter().all(|p| ranks.contains_key(p));
    let thread_names = if db.has_table("ThreadNames") {
        names_of(
            &db,
            "SELECT t.globalTid, s.value FROM ThreadNames t JOIN StringIds s ON s.id = t.nameId",
            "ThreadNames",
        )
    } else {
        HashMap::default()
    };
    let process_names = if db.has_table("PROCESSES") {
        names_of(&db, "SELECT pid, name FROM PROCESSES", "PROCESSES")
    } else {
        HashMap::default()
    };
    let mut w = Writer {
        dir: dir.to_path_buf(),
        files: BTreeMap::new(),
        ranks: if known { ranks.clone() } else { pids.iter().enumerate().map(|(rank, pid)| (*pid, rank)).collect() },
        thread_names,
        process_names,
        line: String::new(),
        unplaced_pid,
    };
    let mut summary = Summary::default();
    let mut strings = Names::default();
    let ids = db.string_ids(&mut strings)?;
    let mut marks = Marks::of(findings, &pids);
    ranges(&db, &mut w, &mut strings, &ids, strip, &mut marks, &mut summary)?;
    let launched = calls(&db, &mut w, &ids, &strings)?;
    let mut idle = Idle::new(&db, launch_gap_ns)?;
    gpu(&db, &mut w, &ids, &strings, &launched, &mut summary.odd_spans, &mut idle)?;
    summary.idle_left_out = idle.left_out;
    summary.findings_left_out = marks.write(|pid, line| w.out(pid)?.event(line))?;
    let rank_from = if known { "the run's launcher" } else { "process order (pid)" };
    summary.files = w.finish(&Meta { devices: devices(&db), rank_from })?;
    Ok(summary)
}

/// The NVTX ranges: push/pop as slices, start/end as async slices.
fn ranges(
    db: &NsysDb,
    w: &mut Writer,
    strings: &mut Names,
    ids: &HashMap<i64, u32>,
    keys: &[String],
    marks: &mut Marks,
    summary: &mut Summary,
) -> Result<(), Error> {
    let mut failed = None;
    let mut async_id = 0u64;
    db.each_range(strings, ids, Order::Stored, |r, names| {
        if !r.ended {
            summary.unended_ranges += 1;
            return true;
        }
        let pid = pid_of(r.global_tid);
        let domain = names.get(r.domain);
        let mut args = String::new();
        if !domain.is_empty() {
            let _ = write!(args, r#""domain":{}"#, json_str(domain));
        }
        // PyTorch's per-call attributes go to args; the name is the operator's.
        let raw = names.get(r.name);
        let name = match crate::regions::strip_attributes(raw, keys) {
            Some((op, attrs)) => {
                for (k, v) in attrs {
                    let sep = if args.is_empty() { "" } else { "," };
                    let _ = write!(args, "{sep}{}:{}", json_str(k), json_str(v));
                }
                op.to_string()
            }
            None => raw.to_string(),
        };
        marks.saw(pid, &name, r.start, || (pid.to_string(), tid_of(r.global_tid).to_string()));
        let result = (|| -> Result<(), Error> {
            w.thread(pid, r.global_tid)?;
            match r.style {
                RangeStyle::PushPop => {
                    w.slice(pid, (pid, tid_of(r.global_tid)), "user_annotation", &name, (r.start, r.end), &args)?
                }
                RangeStyle::StartEnd => {
                    async_id += 1;
                    let name = json_str(&name);
                    let tid = tid_of(r.global_tid);
                    for (ph, t) in [("b", r.start), ("e", r.end)] {
                        let mut line = format!(
                            r#"{{"ph":"{ph}","cat":"user_annotation","name":{name},"id":{async_id},"pid":{pid},"tid":{tid},"ts":"#
                        );
                        micros(&mut line, t);
                        let _ = write!(line, r#","args":{{{args}}}}}"#);
                        w.out(pid)?.event(&line)?;
                    }
                }
            }
            w.out(pid)?.summary.ranges += 1;
            Ok(())
        })();
        match result {
            Ok(()) => true,
            Err(e) => {
                failed = Some(e);
                false
            }
        }
    })?;
    failed.map_or(Ok(()), Err)
}

/// Where each finding is drawn: the first instance (by start) of the region
/// it names, in its process (the only one, where it names none).
pub(super) struct Marks<'f> {
    findings: Vec<(i64, &'f serde_json::Value)>,
    /// (process, region name) → the earliest instance's start, and its
    /// process and thread as JSON (as the trace writes them: a torch trace
    /// may write ids as strings).
    first: HashMap<(i64, String), Option<Spot>>,
    left_out: usize,
}

/// Where a finding is drawn: a start (ns) on a thread, its process and
/// thread as JSON.
struct Spot {
    start: i64,
    pid: String,
    tid: String,
}

impl<'f> Marks<'f> {
    pub(super) fn of(findings: &'f [serde_json::Value], pids: &[i64]) -> Marks<'f> {
        let mut marks = Marks { findings: Vec::new(), first: HashMap::default(), left_out: 0 };
        for f in findings {
            let pid = match (f["process_id"].as_i64(), pids) {
                (Some(pid), _) => pid,
                (None, [only]) => *only,
                (None, _) => {
                    marks.left_out += 1;
                    continue;
                }
            };
            let region = f["region"].as_str().unwrap_or_default().to_string();
            marks.first.insert((pid, region), None);
            marks.findings.push((pid, f));
        }
        marks
    }

    /// A range instance: the earliest of its name so far? `ids`: its
    /// process and thread as the trace writes them (JSON).
    pub(super) fn saw(&mut self, pid: i64, name: &str, start: i64, ids: impl FnOnce() -> (String, String)) {
        if self.first.is_empty() {
            return;
        }
        if let Some(at) = self.first.get_mut(&(pid, name.to_string())) {
            if at.as_ref().is_none_or(|s| start < s.start) {
                let (pid, tid) = ids();
                *at = Some(Spot { start, pid, tid });
            }
        }
    }

    /// Each finding as a thread-scoped instant event (`cat`
    /// `llmperf_finding`) with the finding whole in `args`, handed to `emit`
    /// with its process; how many had no instance to be drawn at.
    pub(super) fn write(self, mut emit: impl FnMut(i64, &str) -> Result<(), Error>) -> Result<usize, Error> {
        let mut left_out = self.left_out;
        for (pid, f) in self.findings {
            let region = f["region"].as_str().unwrap_or_default();
            let Some(Some(spot)) = self.first.get(&(pid, region.to_string())) else {
                left_out += 1;
                continue;
            };
            let kind = f["kind"].as_str().unwrap_or("finding");
            let share = f["share"].as_f64().map_or(String::new(), |s| format!(" ({:.1}%)", s * 100.0));
            let name = json_str(&format!("{kind}{share}: {region}"));
            let mut line = format!(
                r#"{{"ph":"i","s":"t","cat":"llmperf_finding","name":{name},"pid":{},"tid":{},"ts":"#,
                spot.pid, spot.tid
            );
            micros(&mut line, spot.start);
            let _ = write!(line, r#","args":{}}}"#, serde_json::to_string(f).unwrap_or_else(|_| "{}".into()));
            emit(pid, &line)?;
        }
        Ok(left_out)
    }
}

/// A set of (process, correlation id). CUPTI numbers each process's calls
/// from 1, so the ids are dense: a bit per id (10M ids: 1.2 MiB, where a
/// hash set held 70 MiB); an id past 2^28 or below 0 goes to a hash set.
#[derive(Default)]
struct Launches {
    bits: HashMap<i64, Vec<u64>>,
    sparse: std::collections::HashSet<(i64, i64)>,
}

impl Launches {
    const DENSE: i64 = 1 << 28;

    /// Adds the pair; false where it was there already.
    fn insert(&mut self, (pid, id): (i64, i64)) -> bool {
        if !(0..Self::DENSE).contains(&id) {
            return self.sparse.insert((pid, id));
        }
        let bits = self.bits.entry(pid).or_default();
        let (word, bit) = ((id / 64) as usize, 1u64 << (id % 64));
        if bits.len() <= word {
            bits.resize(word + 1, 0);
        }
        let new = bits[word] & bit == 0;
        bits[word] |= bit;
        new
    }

    fn contains(&self, &(pid, id): &(i64, i64)) -> bool {
        if !(0..Self::DENSE).contains(&id) {
            return self.sparse.contains(&(pid, id));
        }
        let (word, bit) = ((id / 64) as usize, 1u64 << (id % 64));
        self.bits.get(&pid).and_then(|b| b.get(word)).is_some_and(|w| w & bit != 0)
    }
}

/// The CUDA runtime and driver calls, and the correlations of those that
/// launched GPU work in the export (the flows' starts).
fn calls(db: &NsysDb, w: &mut Writer, ids: &HashMap<i64, u32>, strings: &Names) -> Result<Launches, Error> {
    let gpu_ids = gpu_correlations(db, w.unplaced_pid)?;
    let mut launched = Launches::default();
    for (table, cat) in [("CUPTI_ACTIVITY_KIND_RUNTIME", "cuda_runtime"), ("CUPTI_ACTIVITY_KIND_DRIVER", "cuda_driver")]
    {
        if !db.has_table(table) {
            continue;
        }
        let cols = db.columns(table);
        let correlation = if cols.contains("correlationId") { "correlationId" } else { "NULL" };
        let sql = format!("SELECT start, end, globalTid, nameId, {correlation} FROM {table}");
        let mut rows = Rows::query(db.conn(), &sql).map_err(|e| db.sql_error(table, e))?;
        while rows.step().map_err(|e| db.sql_error(table, e))? {
            let (start, end, gtid) = (rows.int(0), rows.int(1), rows.int(2));
            let name = ids.get(&rows.int(3)).map_or("", |&n| strings.get(n));
            let pid = pid_of(gtid);
            let tid = tid_of(gtid);
            let correlation = rows.opt_int(4);
            let mut args = String::new();
            if let Some(c) = correlation {
                let _ = write!(args, r#""correlation":{c}"#);
            }
            w.thread(pid, gtid)?;
            w.slice(pid, (pid, tid), cat, name, (start, end), &args)?;
            w.out(pid)?.summary.calls += 1;
            if let Some(c) = correlation.filter(|c| gpu_ids.contains(&(pid, *c))) {
                if launched.insert((pid, c)) {
                    let mut line =
                        format!(r#"{{"ph":"s","cat":"ac2g","name":"ac2g","id":{c},"pid":{pid},"tid":{tid},"ts":"#);
                    micros(&mut line, start);
                    line.push('}');
                    let out = w.out(pid)?;
                    out.event(&line)?;
                }
            }
        }
    }
    Ok(launched)
}

/// The track (tid) of a device's idle stretches in each file: above every
/// stream's overlap tracks.
pub(super) const IDLE_TID: i64 = 1 << 40;

/// The breakdown's idle stretches of each device's span (launch gaps, sync
/// stalls, nothing queued), cut by the breakdown's own sweep
/// ([`Breakdown::logging_idle`]), fed as ingestion feeds it: the runtime's
/// blocking calls up to each GPU operation's start, then the operation; so
/// they are the stretches breakdown.json sums, and memory stays flat. The
/// stretch before an operation is written when the operation is. Made only
/// where every GPU table is stored in start order (the sweep follows time;
/// `import nsys` reads other tables sorted), so the track is whole or left
/// out, with the reason.
struct Idle<'c> {
    sweep: Option<Breakdown>,
    /// The blocking calls (process, start, end, function), in start order,
    /// and the next one not yet fed.
    calls: Option<Rows<'c>>,
    next_call: Option<(i64, i64, i64, i64)>,
    left_out: Option<String>,
    line: String,
}

/// Whether column `col` of `sql`'s rows never decreases (one scan).
fn in_order(db: &NsysDb, sql: &str, col: i32, table: &str) -> Result<bool, Error> {
    let mut rows = Rows::query(db.conn(), sql).map_err(|e| db.sql_error(table, e))?;
    let mut last = i64::MIN;
    while rows.step().map_err(|e| db.sql_error(table, e))? {
        let start = rows.int(col);
        if start < last {
            return Ok(false);
        }
        last = start;
    }
    Ok(true)
}

impl<'c> Idle<'c> {
    fn new(db: &'c NsysDb, launch_gap_ns: i64) -> Result<Idle<'c>, Error> {
        let mut idle = Idle { sweep: None, calls: None, next_call: None, left_out: None, line: String::new() };
        for (table, _) in GPU_TABLES.iter().filter(|(t, _)| db.has_table(t)) {
            if !in_order(db, &format!("SELECT start FROM {table}"), 0, table)? {
                idle.left_out = Some(format!(
                    "{table} is not stored in time order (`llmperf import nsys` reads it sorted for breakdown.json)"
                ));
                return Ok(idle);
            }
        }
        // The blocking calls as stored where they are in start order, else sorted.
        const RUNTIME: &str = "CUPTI_ACTIVITY_KIND_RUNTIME";
        if let Some(stored) = db.blocking_query(Order::Stored)? {
            let query = if in_order(db, &stored, 1, RUNTIME)? {
                stored
            } else {
                db.blocking_query(Order::Sorted)?.unwrap_or(stored)
            };
            idle.calls = Some(Rows::query(db.conn(), &query).map_err(|e| db.sql_error(RUNTIME, e))?);
        }
        idle.sweep = Some(Breakdown::new(launch_gap_ns).logging_idle());
        Ok(idle)
    }

    /// Every blocking call starting at or before `now` into the sweep.
    fn calls_up_to(&mut self, db: &NsysDb, now: i64) -> Result<(), Error> {
        let Some(sweep) = &mut self.sweep else { return Ok(()) };
        loop {
            if let Some((pid, start, end, name)) = self.next_call {
                if start > now {
                    return Ok(());
                }
                sweep.blocking(pid, start, end, name, now);
                self.next_call = None;
            }
            let Some(rows) = &mut self.calls else { return Ok(()) };
            if !rows.step().map_err(|e| db.sql_error("CUPTI_ACTIVITY_KIND_RUNTIME", e))? {
                self.calls = None;
                return Ok(());
            }
            self.next_call = Some((rows.int(0), rows.int(1), rows.int(2), rows.int(3)));
        }
    }

    /// One GPU operation of `pid` (table 0 kernel, 1 copy, 2 memset), in
    /// start order: the idle stretch before it, if any, into the file.
    fn add(&mut self, db: &NsysDb, w: &mut Writer, pid: i64, op: &Op) -> Result<(), Error> {
        self.calls_up_to(db, op.start)?;
        let Some(sweep) = &mut self.sweep else { return Ok(()) };
        let what = match op.table {
            // Which kernel ran makes no idle time: the class is unused.
            0 => What::Kernel(0),
            1 => What::Copy { direction: Direction::Other, bytes: 0, pageable: false },
            _ => What::Memset { bytes: 0 },
        };
        let a = Activity { pid, device: op.device, start: op.start, end: op.end, what, name: 0 };
        if !sweep.add(a) {
            // Not met with tables in start order; said rather than hidden.
            self.sweep = None;
            self.left_out = Some(format!(
                "an operation at {} ns came before the one read earlier on its device: the track ends there",
                op.start
            ));
            return Ok(());
        }
        let mut stretches = Vec::new();
        sweep.take_idle(|key, start, end, kind| stretches.push((key, start, end, kind)));
        for ((pid, device), start, end, kind) in stretches {
            w.idle_track(pid, device)?;
            let name = IDLE_KINDS[kind as usize];
            let line = &mut self.line;
            line.clear();
            let _ = write!(
                line,
                r#"{{"ph":"X","cat":"llmperf_idle","name":"{name}","pid":{device},"tid":{IDLE_TID},"ts":"#
            );
            micros(line, start);
            line.push_str(",\"dur\":");
            micros(line, end - start);
            let _ = write!(line, r#","args":{{"device":{device},"kind":"{name}"}}}}"#);
            let out = w.out(pid)?;
            out.event(line)?;
            out.summary.idle += 1;
        }
        Ok(())
    }
}

/// Every (process, correlation) of GPU work in the export (`unplaced`: the
/// process of rows that name none).
fn gpu_correlations(db: &NsysDb, unplaced: i64) -> Result<Launches, Error> {
    let mut all = Launches::default();
    for (table, _) in GPU_TABLES {
        let cols = db.columns(table);
        if !db.has_table(table) || !cols.contains("correlationId") {
            continue;
        }
        let pid = if cols.contains("globalPid") { "globalPid" } else { "NULL" };
        let mut rows = Rows::query(db.conn(), &format!("SELECT {pid}, correlationId FROM {table}"))
            .map_err(|e| db.sql_error(table, e))?;
        while rows.step().map_err(|e| db.sql_error(table, e))? {
            all.insert((rows.opt_int(0).map_or(unplaced, pid_of), rows.int(1)));
        }
    }
    Ok(all)
}

/// One GPU operation, read.
struct Op {
    start: i64,
    end: i64,
    device: i64,
    stream: i64,
    correlation: Option<i64>,
    /// None where the export does not say ([`Writer::unplaced_pid`]).
    pid: Option<i64>,
    /// 0 kernel, 1 copy, 2 memset (the index in [`GPU_TABLES`]).
    table: usize,
    name: String,
    /// The `args` after device, stream and correlation.
    args: String,
}

/// One GPU table read in stored order, one row ahead.
struct Cursor<'c> {
    rows: Rows<'c>,
    table: usize,
    head: Option<Op>,
}

impl<'c> Cursor<'c> {
    fn open(db: &'c NsysDb, table: usize) -> Result<Option<Cursor<'c>>, Error> {
        let (name, _) = GPU_TABLES[table];
        if !db.has_table(name) {
            return Ok(None);
        }
        let cols = db.columns(name);
        let col = |c: &str| if cols.contains(c) { c.to_string() } else { "NULL".to_string() };
        let pid_col = if cols.contains("globalPid") { "globalPid" } else { "NULL" };
        let extra = match table {
            0 => {
                let kernel_name = if cols.contains("demangledName") { "demangledName" } else { "shortName" };
                let rest = ["gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ", "registersPerThread"]
                    .into_iter()
                    .chain(["staticSharedMemory", "dynamicSharedMemory"])
                    .map(col)
                    .collect::<Vec<_>>()
                    .join(", ");
                format!("{kernel_name}, {rest}")
            }
            1 => format!("{}, {}, {}, {}", col("bytes"), col("copyKind"), col("srcKind"), col("dstKind")),
            _ => col("bytes"),
        };
        let sql = format!(
            "SELECT start, end, {}, {}, {}, {pid_col}, {extra} FROM {name}",
            // A missing column reads as device (stream) 0, as ingestion
            // reads it; a NULL or a value of another type in one is refused
            // with its row (`Rows::int`).
            if cols.contains("deviceId") { "deviceId" } else { "0" },
            if cols.contains("streamId") { "streamId" } else { "0" },
            col("correlationId")
        );
        let rows = Rows::query(db.conn(), &sql).map_err(|e| db.sql_error(name, e))?;
        Ok(Some(Cursor { rows, table, head: None }))
    }

    /// The next row, or None at the end.
    fn next(&mut self, db: &NsysDb, ids: &HashMap<i64, u32>, strings: &Names) -> Result<Option<Op>, Error> {
        let rows = &mut self.rows;
        if !rows.step().map_err(|e| db.sql_error(GPU_TABLES[self.table].0, e))? {
            return Ok(None);
        }
        let mut args = String::new();
        let name = match self.table {
            0 => {
                let dims =
                    |from: i32| (from..from + 3).map(|k| rows.opt_int(k).unwrap_or(0).to_string()).collect::<Vec<_>>();
                let _ = write!(
                    args,
                    r#","grid":[{}],"block":[{}],"registers per thread":{},"shared memory":{}"#,
                    dims(7).join(","),
                    dims(10).join(","),
                    rows.opt_int(13).unwrap_or(0),
                    rows.opt_int(14).unwrap_or(0) + rows.opt_int(15).unwrap_or(0)
                );
                ids.get(&rows.int(6)).map_or("", |&n| strings.get(n)).to_string()
            }
            1 => {
                let _ = write!(args, r#","bytes":{}"#, rows.opt_int(6).unwrap_or(0));
                let kind = copy_kind(rows.opt_int(7));
                format!("Memcpy {kind} ({} -> {})", memory_kind(rows.opt_int(8)), memory_kind(rows.opt_int(9)))
            }
            _ => {
                let _ = write!(args, r#","bytes":{}"#, rows.opt_int(6).unwrap_or(0));
                "Memset (Device)".to_string()
            }
        };
        Ok(Some(Op {
            start: rows.int(0),
            end: rows.int(1),
            device: rows.int(2),
            stream: rows.int(3),
            correlation: rows.opt_int(4),
            pid: rows.opt_int(5).map(pid_of),
            table: self.table,
            name,
            args,
        }))
    }
}

/// Kernels, copies and memsets: slices on each device's stream tracks, and
/// the flow's end where the call that launched each was written. The three
/// tables are read at once and merged by start, so that each stream's
/// operations meet its tracks in time order (as each table stores them).
fn gpu(
    db: &NsysDb,
    w: &mut Writer,
    ids: &HashMap<i64, u32>,
    strings: &Names,
    launched: &Launches,
    odd: &mut u64,
    idle: &mut Idle<'_>,
) -> Result<(), Error> {
    let mut cursors = Vec::new();
    for table in 0..GPU_TABLES.len() {
        if let Some(mut c) = Cursor::open(db, table)? {
            c.head = c.next(db, ids, strings)?;
            cursors.push(c);
        }
    }
    let mut args = String::new();
    loop {
        let Some(i) = (0..cursors.len())
            .filter(|&i| cursors[i].head.is_some())
            .min_by_key(|&i| cursors[i].head.as_ref().map(|o| o.start))
        else {
            return Ok(());
        };
        let next = cursors[i].next(db, ids, strings)?;
        let op = std::mem::replace(&mut cursors[i].head, next).expect("a head");
        // An end before the start (a corrupt or edited export): left out and
        // counted, as ingestion does.
        if !crate::parse::nsys::sqlite::plausible(op.start, op.end) {
            *odd += 1;
            continue;
        }
        args.clear();
        let _ = write!(args, r#""device":{},"stream":{}"#, op.device, op.stream);
        if let Some(c) = op.correlation {
            let _ = write!(args, r#","correlation":{c}"#);
        }
        args.push_str(&op.args);
        let (pid, device, cat) = (op.pid.unwrap_or(w.unplaced_pid), op.device, GPU_TABLES[op.table].1);
        idle.add(db, w, pid, &op)?;
        let tid = w.track(pid, device, op.stream, (op.start, op.end))?;
        w.slice(pid, (device, tid), cat, &op.name, (op.start, op.end), &args)?;
        let out = w.out(pid)?;
        match op.table {
            0 => out.summary.kernels += 1,
            1 => out.summary.memcpys += 1,
            _ => out.summary.memsets += 1,
        }
        if let Some(c) = op.correlation.filter(|c| launched.contains(&(pid, *c))) {
            let mut line =
                format!(r#"{{"ph":"f","cat":"ac2g","name":"ac2g","id":{c},"pid":{device},"tid":{tid},"ts":"#);
            micros(&mut line, op.start);
            line.push_str(r#","bp":"e"}"#);
            out.event(&line)?;
            out.summary.flows += 1;
        }
    }
}

/// CUPTI's copy kinds (`CUpti_ActivityMemcpyKind`), as Kineto names them.
fn copy_kind(kind: Option<i64>) -> &'static str {
    match kind {
        Some(1) => "HtoD",
        Some(2) => "DtoH",
        Some(3) => "HtoA",
        Some(4) => "AtoH",
        Some(5) => "AtoA",
        Some(6) => "AtoD",
        Some(7) => "DtoA",
        Some(8) => "DtoD",
        Some(9) => "HtoH",
        Some(10) => "PtoP",
        _ => "Unknown",
    }
}

/// CUPTI's memory kinds (`CUpti_ActivityMemoryKind`), as Kineto names them.
fn memory_kind(kind: Option<i64>) -> &'static str {
    match kind {
        Some(1) => "Pageable",
        Some(2) => "Pinned",
        Some(3) => "Device",
        Some(4) => "Array",
        Some(5) => "Managed",
        Some(6) => "Device Static",
        Some(7) => "Managed Static",
        _ => "Unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::micros;

    #[test]
    fn nanoseconds_are_microseconds_with_three_decimals() {
        for (ns, text) in [(0, "0.000"), (1, "0.001"), (1_234_567, "1234.567"), (-1500, "-1.500"), (999, "0.999")] {
            let mut s = String::new();
            micros(&mut s, ns);
            assert_eq!(s, text);
        }
    }
}
