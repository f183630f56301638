//! export::kineto: a torch run's trace written again for Perfetto with what
//! llmperf adds to it. The trace opens in Perfetto as it is; the export is
//! for what llmperf found in it: the document is copied value by value (each
//! event's bytes as the file has them, so no time or name changes), and the
//! events the nsys export writes beside its own are appended to
//! `traceEvents`:
//! - per device an idle track (`llmperf_idle` slices on `pid` = the device,
//!   as Kineto draws GPU work): the breakdown's launch gaps, sync stalls and
//!   nothing-queued stretches, cut by its own sweep fed as `import torch`
//!   feeds it, so that they are torch/breakdown.json's;
//! - the run's findings as instant events (`llmperf_finding`) at the first
//!   instance of the region each names, on that instance's thread.
//!
//! Two passes over the file: the trace read as `import torch` reads it (the
//! idle stretches), then the copy.
use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use crate::aggregate::nsys::breakdown::{Breakdown, IDLE_KINDS};
use crate::aggregate::nsys::KernelTotals;
use crate::error::{Error, ErrorKind};
use crate::parse::json_frames::{FrameError, Frames};
use crate::parse::torch;
use crate::run_dir;

use super::perfetto::{json_str, micros, ours, partial_name, FileSummary, Gz, Marks, Summary, IDLE_TID};

/// `trace` (a torch run's, of `rank`) into `dir` as
/// `pid<PID>.pt.trace.json.gz` (PID: the trace's host process), with the idle
/// track and `findings` appended.
/// `was`: the trace as the run read it (its size, its events), where the
/// run says: a file changed since then is refused, not drawn beside another
/// file's findings.
pub(crate) fn export(
    trace: &Path,
    (dir, rank): (&Path, usize),
    was: AsRead,
    findings: &[serde_json::Value],
    launch_gap_ns: i64,
) -> Result<Summary, Error> {
    let bytes = std::fs::metadata(trace).map(|m| m.len()).map_err(|e| run_dir::io_error(trace, "read", &e))?;
    if let Some(n) = was.bytes.filter(|&n| n != bytes) {
        return Err(changed(trace, format!("{bytes} bytes now, {n} when the run read it")));
    }
    let mut read = torch::read(trace)?;
    if let Some(n) = was.events.filter(|&n| n != read.events) {
        return Err(changed(trace, format!("{} events now, {n} when the run read it", read.events)));
    }
    let pid = read.host_pids().first().copied().unwrap_or(0);
    // Idle stretches in the file's own times (before `baseTimeNanoseconds`).
    let base = read.meta.base_time_ns.unwrap_or(0);
    let idle = idle_stretches(&mut read, launch_gap_ns)?;
    drop(read);
    for (name, partial) in ours(dir)? {
        if partial {
            let _ = std::fs::remove_file(dir.join(name));
        }
    }
    std::fs::create_dir_all(dir).map_err(|e| run_dir::io_error(dir, "create the output directory", &e))?;
    let path = dir.join(partial_name(pid));
    let file = std::fs::File::create(&path).map_err(|e| run_dir::io_error(&path, "create", &e))?;
    let mut copy = Copy {
        gz: Gz::create(file),
        path: path.clone(),
        first: true,
        marks: Marks::of(findings, &[pid]),
        idle: &idle,
        base,
        left_out: 0,
        copied: 0,
    };
    let mut frames = Frames::new(torch::open(trace)?);
    let failed = match copy.document(&mut frames) {
        Ok(()) => None,
        Err(Stop::Write(e)) => Some(e),
        Err(Stop::Read(e)) => Some(torch::not_a_trace(trace, &frames, e)),
    };
    if let Some(e) = failed {
        // No half-written trace is left to be taken for one.
        let _ = copy.gz.finish();
        let _ = std::fs::remove_file(&path);
        return Err(e);
    }
    let (left_out, copied) = (copy.left_out, copy.copied);
    copy.gz.finish().map_err(|e| run_dir::io_error(&path, "write", &e))?;
    let summary = FileSummary {
        file: run_dir::perfetto_trace(pid),
        pid,
        rank,
        idle: idle.len() as u64,
        copied: Some(copied),
        ..FileSummary::default()
    };
    let to = dir.join(&summary.file);
    std::fs::rename(&path, &to).map_err(|e| run_dir::io_error(&to, "write", &e))?;
    for (name, _) in ours(dir)? {
        if name != summary.file {
            let stale = dir.join(&name);
            std::fs::remove_file(&stale).map_err(|e| run_dir::io_error(&stale, "remove", &e))?;
        }
    }
    Ok(Summary { files: vec![summary], findings_left_out: left_out, ..Summary::default() })
}

/// The idle stretches of each device's span, (device, process, start, end,
/// kind), as the breakdown's sweep cuts them: fed the trace's GPU work and
/// blocking calls as `import torch` feeds torch/breakdown.json (a row per
/// process and device: GPU work whose launch is missing, in a trace of
/// several host processes, is a row of process 0 beside the launcher's).
fn idle_stretches(trace: &mut torch::Trace, launch_gap_ns: i64) -> Result<Vec<Stretch>, Error> {
    let mut kernels = KernelTotals::new(&trace.names);
    // Which kernel ran makes no idle time: the class is unused.
    let joined = trace.join(&|_| 0, &mut kernels);
    let mut sweep = Breakdown::new(launch_gap_ns).logging_idle();
    if !torch::feed(&mut sweep, Vec::new(), trace.activity(&joined), &trace.blocking) {
        return Err(Error::new(ErrorKind::Internal, "the trace's GPU work was not in time order after sorting")
            .with_hint("a bug in llmperf: please report it with the trace"));
    }
    let mut idle = Vec::new();
    sweep.take_idle(|(pid, device), start, end, kind| idle.push((device, pid, start, end, kind)));
    idle.sort_unstable();
    Ok(idle)
}

/// A trace as a run read it (torch/capture.json's `trace_bytes` and
/// `events`, where it says them): a file that differs now changed since.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct AsRead {
    pub(crate) bytes: Option<u64>,
    pub(crate) events: Option<u64>,
}

/// The refusal of a trace that is not the one the run read.
fn changed(trace: &Path, how: String) -> Error {
    Error::new(ErrorKind::Usage, format!("{}: {how}: the file changed since", trace.display()))
        .with_hint("import the trace again (`llmperf import torch FILE -o DIR`), then export that run")
}

/// An idle stretch: device, process, start, end (ns), kind ([`IDLE_KINDS`]).
type Stretch = (i64, i64, i64, i64, u8);

/// Why the copy stopped: the trace could not be read, or the copy written.
enum Stop {
    Read(FrameError),
    Write(Error),
}

impl From<FrameError> for Stop {
    fn from(e: FrameError) -> Stop {
        Stop::Read(e)
    }
}

/// The trace being copied into the export.
struct Copy<'a> {
    gz: Gz,
    path: std::path::PathBuf,
    /// No event written yet to `traceEvents`.
    first: bool,
    marks: Marks<'a>,
    idle: &'a [Stretch],
    base: i64,
    /// Findings with no instance to be drawn at.
    left_out: usize,
    /// The trace's events copied.
    copied: u64,
}

impl Copy<'_> {
    fn raw(&mut self, bytes: &[u8]) -> Result<(), Stop> {
        self.gz.write_all(bytes).map_err(|e| Stop::Write(run_dir::io_error(&self.path, "write", &e)))
    }

    fn event(&mut self, line: &[u8]) -> Result<(), Stop> {
        if !std::mem::take(&mut self.first) {
            self.raw(b",\n")?;
        }
        self.raw(line)
    }

    /// The document: an object whose members are copied in order, or a bare
    /// array of events.
    fn document<R: Read>(&mut self, f: &mut Frames<R>) -> Result<(), Stop> {
        if f.peek()? == Some(b'[') {
            self.events(f)?;
            self.raw(b"\n")?;
            return Ok(f.end()?);
        }
        f.expect(b'{', "a JSON object with traceEvents")?;
        self.raw(b"{")?;
        let mut members = 0;
        while f.peek()? != Some(b'}') {
            let at = f.offset();
            let key = f.value()?;
            let key: String =
                serde_json::from_slice(f.bytes(key)).map_err(|e| FrameError::Syntax(e.to_string(), at))?;
            f.expect(b':', "':' after a key")?;
            self.raw(if members == 0 { b"\n" } else { b",\n" })?;
            members += 1;
            self.raw(format!("{}: ", json_str(&key)).as_bytes())?;
            if key == "traceEvents" {
                self.events(f)?;
            } else {
                let r = f.value()?;
                let bytes = f.bytes(r).to_vec();
                self.raw(&bytes)?;
            }
            if f.peek()? == Some(b',') {
                f.bump();
            }
        }
        f.bump();
        self.raw(b"\n}\n")?;
        Ok(f.end()?)
    }

    /// `traceEvents`: each event as the file has it, the host ranges seen
    /// for the findings; then llmperf's events.
    fn events<R: Read>(&mut self, f: &mut Frames<R>) -> Result<(), Stop> {
        f.expect(b'[', "traceEvents to be an array")?;
        self.raw(b"[")?;
        while f.peek()? != Some(b']') {
            let r = f.value()?;
            let bytes = f.bytes(r);
            if let Some(r) = torch::host_range(bytes) {
                self.marks.saw(r.pid, &r.name, r.start, || (r.pid_json, r.tid_json));
            }
            let bytes = bytes.to_vec();
            self.event(&bytes)?;
            self.copied += 1;
            if f.peek()? == Some(b',') {
                f.bump();
            }
        }
        f.bump();
        self.added()?;
        self.raw(b"\n]")
    }

    /// The idle track of each device (one per process where the breakdown
    /// has several rows for the device, so that no slice crosses another),
    /// then the findings.
    fn added(&mut self) -> Result<(), Stop> {
        // Sorted by device, process, start: a track is named where it begins.
        let idle = self.idle;
        let mut processes: BTreeMap<i64, Vec<i64>> = BTreeMap::new();
        for &(device, pid, ..) in idle {
            let seen = processes.entry(device).or_default();
            if seen.last() != Some(&pid) {
                seen.push(pid);
            }
        }
        let mut track = None;
        for &(device, pid, start, end, kind) in idle {
            let of_device = &processes[&device];
            let tid = IDLE_TID + of_device.iter().position(|&p| p == pid).unwrap_or(0) as i64;
            if track != Some((device, pid)) {
                track = Some((device, pid));
                let name = match of_device.len() {
                    1 => "idle (llmperf breakdown)".to_string(),
                    _ => format!("idle (llmperf breakdown, process {pid})"),
                };
                let meta = format!(
                    r#"{{"ph":"M","name":"thread_name","pid":{device},"tid":{tid},"args":{{"name":"{name}"}}}}"#
                );
                self.event(meta.as_bytes())?;
            }
            let name = IDLE_KINDS[kind as usize];
            let mut line =
                format!(r#"{{"ph":"X","cat":"llmperf_idle","name":"{name}","pid":{device},"tid":{tid},"ts":"#);
            micros(&mut line, start - self.base);
            line.push_str(",\"dur\":");
            micros(&mut line, end - start);
            line.push_str(&format!(r#","args":{{"device":{device},"kind":"{name}"}}}}"#));
            self.event(line.as_bytes())?;
        }
        let marks = std::mem::replace(&mut self.marks, Marks::of(&[], &[]));
        let mut lines = Vec::new();
        self.left_out = marks
            .write(|_, line| {
                lines.push(line.to_string());
                Ok(())
            })
            .map_err(Stop::Write)?;
        for line in lines {
            self.event(line.as_bytes())?;
        }
        Ok(())
    }
}
