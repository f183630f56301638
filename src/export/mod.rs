//! export: a run's timeline written for other tools. `llmperf export
//! perfetto` ([`perfetto`]): an nsys capture as Chrome JSON trace events in
//! torch.profiler's dialect.
pub(crate) mod kineto;
pub(crate) mod perfetto;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind};
use crate::run_dir;
use kineto::AsRead;

/// What an export reads: an nsys capture's SQLite export, or a torch run's
/// trace (which opens in Perfetto itself; the export adds llmperf's tracks).
pub(crate) enum Source {
    Nsys(PathBuf),
    /// The trace, its rank (`distributedInfo`, else 0) and the trace as the
    /// run read it.
    Torch(PathBuf, usize, AsRead),
}

/// The export to read and the directory to write, from `SOURCE [-o DIR]`: a
/// run directory's nsys/report.sqlite or torch trace (into RUN/perfetto/
/// unless told), or an SQLite export (`-o` required: nothing is written
/// beside the user's file).
pub(crate) fn perfetto_paths(source: &Path, out: Option<&Path>) -> Result<(Source, PathBuf), Error> {
    if source.is_dir() {
        let dir = out.map_or_else(|| source.join(run_dir::PERFETTO_DIR), Path::to_path_buf);
        let sqlite = source.join(run_dir::NSYS_SQLITE);
        if sqlite.is_file() {
            return Ok((Source::Nsys(sqlite), dir));
        }
        if let Some(torch) = torch_trace(source)? {
            return Ok((torch, dir));
        }
        return Err(Error::new(
            ErrorKind::Usage,
            format!("{} holds no {} and no torch trace: nothing to export", source.display(), run_dir::NSYS_SQLITE),
        )
        .with_hint(
            "an `llmperf import nsys FILE.sqlite` run reads the file in place: pass that file with -o DIR; a job of several ranks: export each rank's run (JOB/ranks/N)",
        ));
    }
    let is_sqlite = source.extension().is_some_and(|e| e == "sqlite");
    if !source.is_file() || !is_sqlite {
        let what = if source.exists() { "is not an SQLite export" } else { "does not exist" };
        return Err(Error::new(ErrorKind::Usage, format!("{} {what}", source.display())).with_hint(
            "pass a run directory, or the .sqlite of `nsys export --type sqlite REPORT.nsys-rep` (`llmperf import nsys REPORT.nsys-rep -o RUN` makes RUN/nsys/report.sqlite)",
        ));
    }
    let Some(dir) = out else {
        return Err(Error::new(ErrorKind::Usage, format!("where should the traces of {} go?", source.display()))
            .with_hint(format!("llmperf export perfetto {} -o DIR", source.display())));
    };
    Ok((Source::Nsys(source.to_path_buf()), dir.to_path_buf()))
}

/// A torch run's trace, as torch/capture.json names it (in the run for
/// `profile --tracer torch`, where the user's file lay for `import torch`);
/// none for a run without one, an error where the trace is gone.
pub(crate) fn torch_trace(run: &Path) -> Result<Option<Source>, Error> {
    let capture = run.join(run_dir::TORCH_CAPTURE);
    let Ok(text) = std::fs::read(&capture) else { return Ok(None) };
    let v: serde_json::Value =
        serde_json::from_slice(&text).map_err(|e| run_dir::damaged(&capture, &format!("not JSON: {e}")))?;
    let Some(named) = v["trace"].as_str() else {
        return Err(run_dir::damaged(&capture, "names no trace"));
    };
    let trace = run.join(named);
    if !trace.is_file() {
        return Err(Error::new(
            ErrorKind::Usage,
            format!("{}: the trace this run read, {}, is not there any more", run.display(), trace.display()),
        )
        .with_hint("`llmperf import torch` reads the trace where it lies: import it again from where it is now"));
    }
    let rank = v["rank"].as_u64().and_then(|r| usize::try_from(r).ok()).unwrap_or(0);
    let read = AsRead { bytes: v["trace_bytes"].as_u64(), events: v["events"].as_u64() };
    Ok(Some(Source::Torch(trace, rank, read)))
}

/// Each process's rank, where the run recorded ranks (`rank` on the
/// processes of nsys/regions.json, a `--launcher` capture); empty otherwise.
pub(crate) fn recorded_ranks(source: &Path) -> BTreeMap<i64, usize> {
    let mut ranks = BTreeMap::new();
    if !source.is_dir() {
        return ranks;
    }
    let Ok(text) = std::fs::read(source.join(run_dir::NSYS_REGIONS)) else { return ranks };
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(&text) else { return ranks };
    for p in v["processes"].as_array().into_iter().flatten() {
        if let (Some(pid), Some(rank)) = (p["process_id"].as_i64(), p["rank"].as_u64()) {
            ranks.insert(pid, rank as usize);
        }
    }
    ranks
}

/// The launch gap (ns) of a run directory's configuration (`report.launch_gap_us`,
/// what its breakdown.json was cut with), so that the idle track is its
/// stretches; the default for a file. Not breakdown.json's `launch_gap_ns`:
/// a breakdown that could not be made records 0 there.
pub(crate) fn recorded_launch_gap(source: &Path) -> Result<i64, Error> {
    let configured = source.is_dir().then(|| crate::config::load_resolved(&source.join(run_dir::CONFIG_YAML)).ok());
    let us = configured.flatten().map_or_else(crate::config::schema::default_launch_gap_us, |c| c.report.launch_gap_us);
    crate::config::schema::launch_gap_ns(us)
}

/// The findings of a run directory's findings.json (none for a file, or
/// a run without one).
pub(crate) fn recorded_findings(source: &Path) -> Vec<serde_json::Value> {
    if !source.is_dir() {
        return Vec::new();
    }
    std::fs::read(source.join(run_dir::FINDINGS_JSON))
        .ok()
        .and_then(|t| serde_json::from_slice::<serde_json::Value>(&t).ok())
        .and_then(|v| v["findings"].as_array().cloned())
        .unwrap_or_default()
}

/// What the terminal shows after an export: each file, its process and
/// what it holds, and where to open it.
pub(crate) fn render(summary: &perfetto::Summary, dir: &Path) -> String {
    let mut s = String::new();
    for f in &summary.files {
        if let Some(copied) = f.copied {
            let _ = writeln!(
                s,
                "{}  rank {} (pid {}): the trace's {copied} events, copied as the file holds them, and {} idle stretches",
                dir.join(&f.file).display(),
                f.rank,
                f.pid,
                f.idle
            );
            continue;
        }
        let _ = writeln!(
            s,
            "{}  rank {} (pid {}): {} NVTX ranges, {} CUDA calls, {} kernels, {} copies, {} memsets, {} flows, {} idle stretches",
            dir.join(&f.file).display(),
            f.rank,
            f.pid,
            f.ranges,
            f.calls,
            f.kernels,
            f.memcpys,
            f.memsets,
            f.flows,
            f.idle
        );
        if f.overlapping > 0 {
            let _ = writeln!(
                s,
                "  {} GPU operation{} overlapped an earlier one on its stream: drawn on the stream's overlap tracks{}",
                f.overlapping,
                if f.overlapping == 1 { "" } else { "s" },
                if f.crossing > 0 {
                    format!(" ({} found no free track and cross a slice)", f.crossing)
                } else {
                    String::new()
                }
            );
        }
    }
    if summary.findings_left_out > 0 {
        let _ = writeln!(
            s,
            "left out: {} findings whose region has no instance in their process (a device span, ncu's kernels)",
            summary.findings_left_out
        );
    }
    if let Some(why) = &summary.idle_left_out {
        let _ =
            writeln!(s, "left out: the idle track (the breakdown's launch gaps, sync stalls, nothing queued): {why}");
    }
    if summary.odd_spans > 0 {
        let _ = writeln!(s, "left out: {} GPU operations whose end is before their start", summary.odd_spans);
    }
    if summary.unended_ranges > 0 {
        let _ = writeln!(s, "left out: {} NVTX ranges still open when the capture stopped", summary.unended_ranges);
    }
    let _ = writeln!(s, "open a file in https://ui.perfetto.dev (Open trace file) or chrome://tracing");
    s
}
