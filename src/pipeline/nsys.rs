//! pipeline: the Nsight Systems stages. `capture` runs the application under
//! `nsys profile` (again when nsys hangs converting, up to hang_retries);
//! `analyze`, after a capture or for `llmperf import nsys`, exports the report
//! to SQLite, saves `nsys stats` CSVs beside it, and ingests the export natively
//! into `nsys/regions.json` and `nsys/top_kernels.json` (specs/nsys-outputs.md).
//! Each step is a manifest stage; raw files stay whatever fails.
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use super::perfetto::PerfettoExport;
use super::stage::{self, Done, RunStatus, StageOutcome};
use crate::aggregate;
use crate::aggregate::nsys::{KernelTotals, Sweep};
use crate::config::schema::{CaptureRange, NsysConfig};
use crate::config::Config;
use crate::error::{Error, ErrorKind};
use crate::export::Source;
use crate::manifest::{Diagnosis, ExitInfo, ManifestWriter};
use crate::parse::nsys::ingest;
use crate::parse::nsys::sqlite::NsysDb;
use crate::process::{self, Exit, Finished, Sink, Spawn};
use crate::profile::nsys;
use crate::profile::tools::Tool;
use crate::run_dir::{self, absolute, RunDir};
use crate::signals;

const EXPORT_TIMEOUT: Duration = Duration::from_secs(1800);

/// What the plan gives a capture: the nsys found, the application's argv
/// and nsys's configuration as the plan resolved it for that nsys.
pub(crate) struct Capture<'p> {
    pub(crate) tool: &'p Tool,
    pub(crate) app: &'p [OsString],
    pub(crate) nsys: &'p NsysConfig,
}

/// Run the application under nsys, then analyse the capture.
pub(crate) fn capture(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    verdict: &mut RunStatus,
    later: &mut Option<PerfettoExport>,
    cfg: &Config,
    Capture { tool, app, nsys: nsys_cfg }: Capture<'_>,
) -> Result<(), Error> {
    run.subdir(run_dir::NSYS_DIR)?;
    let base = absolute(&run.join(run_dir::NSYS_REPORT_BASE));
    stop_orphaned_agents();
    let spec = Spawn::new(nsys::profile_argv(&tool.path, nsys_cfg, &base, app))
        .stdout(Sink::File(run.join(run_dir::NSYS_STDOUT)))
        .stderr(Sink::File(run.join(run_dir::NSYS_STDERR)))
        .timeout((nsys_cfg.timeout_s > 0).then(|| Duration::from_secs(nsys_cfg.timeout_s)))
        .companions(nsys::agents_of)
        .stop_gracefully(Duration::from_secs(nsys_cfg.stop_timeout_s), nsys::application_of)
        .linger_limit(Duration::from_secs(nsys_cfg.postprocess_timeout_s));
    run.write(run_dir::NSYS_CMD, format!("{}\n", spec.display()).as_bytes())?;
    tracing::info!("nsys: {}", spec.display());
    let mut report = None;
    let mut stopped = false;
    let outcome = stage::run(manifest, "nsys", spec.argv_strings(), || {
        let (done, diagnoses, kept_logs) = run_with_retries(run, &spec, nsys_cfg)?;
        report = run_dir::nsys_report(run);
        stopped = done.exit == Exit::Interrupted;
        let mut artifacts =
            vec![run_dir::NSYS_CMD.to_string(), run_dir::NSYS_STDOUT.into(), run_dir::NSYS_STDERR.into()];
        artifacts.extend(kept_logs);
        artifacts.extend(report.as_ref().map(|r| run.relative(r)));
        if run.join(run_dir::TIMINGS_JSON).is_file() {
            artifacts.push(run_dir::TIMINGS_JSON.into());
        }
        let stderr_tail = tail_of(&run.join(run_dir::NSYS_STDERR), 4096);
        let said = last_words(&stderr_tail);
        let own_failure = nsys_exception(&String::from_utf8_lossy(&stderr_tail));
        let rank_failed = super::launcher::first_failed_rank(&String::from_utf8_lossy(&stderr_tail));
        let stdout_tail = String::from_utf8_lossy(&tail_of(&run.join(run_dir::NSYS_STDOUT), 4096)).into_owned();
        // The application's own output passes through nsys's stdout: the range
        // lines can be far from its tail, so the whole log is scanned (with a range only).
        let capture_range = nsys_cfg.capture_range != CaptureRange::None;
        let said_by_nsys = Said {
            last_words: &said,
            agent_failed: agent_failed(&stderr_tail, stdout_tail.as_bytes()),
            range_started: capture_range && log_has_line(&run.join(run_dir::NSYS_STDOUT), RANGE_STARTED),
            range_ended: capture_range && log_has_line(&run.join(run_dir::NSYS_STDOUT), RANGE_ENDED),
        };
        // With a capture range, nsys's default end (`stop-shutdown`) stops the application
        // with SIGINT when the range ends: the capture is whole, the signal is nsys's.
        let range_end = nsys_cfg.capture_range != CaptureRange::None
            && stdout_tail.contains(RANGE_ENDED)
            && report.is_some()
            && matches!(done.exit, Exit::Code(130 | 143));
        let note = range_end.then(|| {
            "nsys stopped the application at the end of its capture range (pipeline.nsys.capture_range_end: nsys's default is stop-shutdown): the capture is complete".to_string()
        });
        let failure = match range_end {
            true => None,
            false => judge(&done, report.is_some(), &said_by_nsys, nsys_cfg).map(|e| match (done.exit, rank_failed) {
                (Exit::Code(_), Some(f)) => name_rank(run, e, &done, f),
                _ => blame_nsys(e, &done, &said, own_failure, report.is_some()),
            }),
        };
        if let Some(n) = &note {
            tracing::info!("{n}");
        }
        Ok(Done { note, ..Done::of(failure).exit(ExitInfo::from(&done)).artifacts(artifacts).diagnoses(diagnoses) })
    })?;
    verdict.add(outcome);
    // A failed workload's capture is still worth reading, and so is the
    // capture of an nsys stopped by a signal: the run goes on to analyse it
    // (and ends `interrupted`); a further signal stops that analysis.
    if let Some(report) = report {
        if stopped {
            signals::answer();
        }
        analyze(run, manifest, (verdict, later), Some(tool), &report, &IngestOptions::of(cfg))?;
    }
    Ok(())
}

/// `nsys profile`, again when an attempt lost its capture (`lost`), keeping
/// each lost attempt's logs; a diagnosis per lost attempt.
fn run_with_retries(
    run: &RunDir,
    spec: &Spawn,
    cfg: &NsysConfig,
) -> Result<(Finished, Vec<Diagnosis>, Vec<String>), Error> {
    let mut diagnoses = Vec::new();
    let mut kept_logs = Vec::new();
    let attempts = 1 + cfg.hang_retries;
    let mut attempt = 1;
    loop {
        let done = stage::run_with_progress("nsys", spec)?;
        let lost = lost(run, &done, cfg);
        if let Some(lost) = &lost {
            diagnoses.push(match lost {
                Lost::Hang => nsys::hang_diagnosis(attempt, cfg.postprocess_timeout_s),
                Lost::Failed(words) => nsys::failure_diagnosis(attempt, &done.describe(), words),
            });
        }
        if lost.is_none() || attempt == attempts {
            return Ok((done, diagnoses, kept_logs));
        }
        kept_logs.extend(keep_attempt_logs(run, attempt));
        set_aside_attempt_classes(run, attempt);
        match lost {
            Some(Lost::Hang) => {
                tracing::warn!("nsys hung converting its capture (attempt {attempt} of {attempts}); capturing again")
            }
            _ => tracing::warn!(
                "nsys ended with {} and wrote no capture (attempt {attempt} of {attempts}); capturing again",
                done.describe()
            ),
        }
        attempt += 1;
    }
}

/// How an attempt lost its capture to nsys itself.
enum Lost {
    /// nsys hung converting the capture after the application exited.
    Hang,
    /// nsys exited with a failing status and wrote no report, with its
    /// stderr's last words. nsys writes its report whenever the application
    /// ran, whatever the application's status (a failing workload keeps its
    /// capture), so no report means nsys failed: nsys 2022.4 here now and then
    /// exits 1 on its own mid-capture ("End of file", "Local Endpoint is not
    /// available", "SystemException"). Not counted: nsys that could not start
    /// its agent, or a temporary directory short of room, which another
    /// attempt would meet again; nor a capture range that never started,
    /// where nsys writes nothing and passes on the application's status.
    Failed(String),
}

fn lost(run: &RunDir, done: &Finished, cfg: &NsysConfig) -> Option<Lost> {
    match done.exit {
        Exit::Stalled => Some(Lost::Hang),
        Exit::Code(c) if c != 0 && run_dir::nsys_report(run).is_none() => {
            let stderr = tail_of(&run.join(run_dir::NSYS_STDERR), 4096);
            let stdout = tail_of(&run.join(run_dir::NSYS_STDOUT), 4096);
            let range_unstarted = cfg.capture_range != CaptureRange::None
                && !log_has_line(&run.join(run_dir::NSYS_STDOUT), RANGE_STARTED);
            let again = !agent_failed(&stderr, &stdout) && !range_unstarted && temp_space_low().is_none();
            again.then(|| Lost::Failed(last_words(&stderr)))
        }
        _ => None,
    }
}

/// Whether nsys's logs say it could not start its agent.
fn agent_failed(stderr_tail: &[u8], stdout_tail: &[u8]) -> bool {
    [stderr_tail, stdout_tail].iter().any(|t| String::from_utf8_lossy(t).contains(AGENT_FAILED))
}

/// Keep a hung attempt's logs as `nsys/stdout.attemptN.log` before the next attempt overwrites them.
fn keep_attempt_logs(run: &RunDir, attempt: u32) -> Vec<String> {
    let mut kept = Vec::new();
    for log in [run_dir::NSYS_STDOUT, run_dir::NSYS_STDERR] {
        let to = run_dir::attempt_log(log, attempt);
        if std::fs::rename(run.join(log), run.join(&to)).is_ok() {
            kept.push(to);
        }
    }
    kept
}

/// Move a hung attempt's `annotate/classes.<pid>.json` into
/// `annotate/attemptN/`: the retry runs the program again, and its processes
/// write their own. Left in place, the module groups would be built from
/// both attempts' files, and a process that the hung attempt ran but the
/// retry did not would add its classes to a capture it is not in.
fn set_aside_attempt_classes(run: &RunDir, attempt: u32) {
    let Ok(entries) = std::fs::read_dir(run.join(run_dir::ANNOTATE_DIR)) else {
        return;
    };
    let aside = run.join(run_dir::ANNOTATE_DIR).join(format!("attempt{attempt}"));
    for e in entries.flatten() {
        let name = e.file_name();
        if !is_classes_file(&name.to_string_lossy()) {
            continue;
        }
        let moved = std::fs::create_dir_all(&aside).and_then(|()| std::fs::rename(e.path(), aside.join(&name)));
        if let Err(why) = moved {
            tracing::warn!("{}: not set aside after the hung attempt ({why})", e.path().display());
        }
    }
}

/// `classes.<pid>.json`, what the `--annotate` bootstrap writes at exit.
fn is_classes_file(name: &str) -> bool {
    name.starts_with("classes.") && name.ends_with(".json")
}

/// Stop the nsys agents of nsys processes that are gone, before starting
/// nsys: an agent still running makes a new nsys 2022.4 session hang, as
/// two sessions at once always do on this project's machines.
fn stop_orphaned_agents() {
    let orphans = nsys::orphaned_agents();
    if orphans.is_empty() {
        return;
    }
    for (pid, session) in &orphans {
        tracing::warn!(
            "stopping nsys agent {pid} (session {session}): the nsys that started it is gone, and nsys hangs beside it"
        );
    }
    process::stop_each(orphans.into_iter().map(|(pid, _)| pid).collect());
}

/// nsys exits with the application's status (128+N when a signal killed it)
/// and still writes the report, so a failing workload keeps its capture.
/// What nsys 2022.4 prints when it cannot start its agent: here, every
/// `nsys profile` after an nsys killed in a hang, until the session registry
/// it left in shared memory (/dev/shm/NSys-*, /dev/shm/quadd-agent-instance-*)
/// is removed.
const AGENT_FAILED: &str = "Agent launcher failed";

/// What nsys prints when a capture range ends and it stops the application.
const RANGE_ENDED: &str = "Capture range ended in the application.";

/// What nsys prints when its capture range starts.
const RANGE_STARTED: &str = "Capture range started in the application.";

/// What nsys's logs said about an attempt.
struct Said<'a> {
    /// The last line of its stderr, as " (…)" or empty.
    last_words: &'a str,
    agent_failed: bool,
    /// nsys's capture range started, ended (its stdout, flushed when it exits).
    range_started: bool,
    range_ended: bool,
}

fn judge(done: &Finished, have_report: bool, said: &Said, cfg: &NsysConfig) -> Option<Error> {
    let failed = |msg: String, hint: &str| Some(Error::new(ErrorKind::StageFailed, msg).with_hint(hint));
    let see_log = format!("see {} and {} in the run directory", run_dir::NSYS_STDERR, run_dir::NSYS_STDOUT);
    let lost = format!(
        "nsys did not write its capture within pipeline.nsys.stop_timeout_s ({} s) of the stop; nsys 2022.4 sometimes hangs converting a capture: run again, or raise that limit for a very large capture",
        cfg.stop_timeout_s
    );
    match done.exit {
        Exit::Interrupted => {
            let e = signals::interrupted();
            let (kept, hint) = match have_report {
                true => ("nsys was stopped and its capture is analysed", e.hint.unwrap_or_default()),
                false => ("nsys wrote no capture", lost),
            };
            Some(Error::new(e.kind, format!("{}; {kept}", e.message)).with_hint(hint))
        }
        Exit::TimedOut if cfg.capture_range != CaptureRange::None && !have_report => {
            let (what, cause) = match (said.range_started, said.range_ended) {
                (false, _) => (
                    "its capture range never started",
                    format!(
                        "either the application never entered the range ({}), or nsys 2022.4 hung in it",
                        match &cfg.nvtx_capture {
                            Some(range) => format!("pipeline.nsys.nvtx_capture={range}, in nsys's RANGE@DOMAIN order"),
                            None => "a cudaProfilerStart() call".into(),
                        }
                    ),
                ),
                (true, true) => (
                    "its capture range started and ended, and nsys neither stopped the application nor wrote its capture",
                    "nsys 2022.4 hung at the range's end".to_string(),
                ),
                (true, false) => (
                    "its capture range started and never ended",
                    "either the application never left the range, or nsys 2022.4 hung in it".to_string(),
                ),
            };
            failed(
                format!(
                    "nsys reached pipeline.nsys.timeout_s ({} s) and was stopped (no capture was written); {what}",
                    cfg.timeout_s
                ),
                &format!(
                    "{cause}, as it did here in 6 of 75 capture-range runs, the application blocked inside nsys in the range's NVTX call (docs/internals.md, \"The nsys capture-range hang\"): run again, or capture without a range and read the region from the report"
                ),
            )
        }
        Exit::TimedOut => failed(
            format!(
                "nsys reached pipeline.nsys.timeout_s ({} s) and was stopped ({})",
                cfg.timeout_s,
                if have_report { "its capture is analysed" } else { "no capture was written" }
            ),
            if have_report { "raise pipeline.nsys.timeout_s, or shorten the workload" } else { &lost },
        ),
        Exit::Stalled | Exit::Stopped => failed(
            "nsys hung converting its capture after the application finished".into(),
            "a known Nsight Systems 2022.4 problem on some hosts: run again, or raise pipeline.nsys.hang_retries (pipeline.nsys.postprocess_timeout_s for very large captures)",
        ),
        Exit::Code(0) if have_report => None,
        // nsys 2022.4 ends with the application and writes nothing when its range never began.
        Exit::Code(0) if cfg.capture_range != CaptureRange::None && !said.range_started => failed(
            "nsys wrote no capture: its capture range never started before the application exited".into(),
            &format!(
                "the application never entered {}: check the name and the domain against a capture without a range; {see_log}",
                match &cfg.nvtx_capture {
                    Some(range) => format!("the range pipeline.nsys.nvtx_capture={range} (nsys's RANGE@DOMAIN order)"),
                    None => "a cudaProfilerStart() call".into(),
                }
            ),
        ),
        Exit::Code(0) => failed(
            "nsys exited 0 but wrote no report".into(),
            &format!("nsys needs its importer (scripts/setup.sh links it; docs/internals.md); {see_log}"),
        ),
        Exit::Code(_) if said.agent_failed && !have_report => failed(
            format!("nsys could not start its agent (\"{AGENT_FAILED}\")"),
            "an nsys killed while it hung can leave its session registry behind: with no nsys running (`pgrep -a nsys`), remove /dev/shm/NSys-* and /dev/shm/quadd-agent-instance-*, then run again",
        ),
        // nsys writes its report whatever the application's status: without
        // one, the status is nsys's, not the application's (`Lost::Failed`);
        // unless a capture range never started, when nsys writes none.
        Exit::Code(c) if !have_report && (cfg.capture_range == CaptureRange::None || said.range_started) => failed(
            format!("nsys exited with code {c} and wrote no capture{}", said.last_words),
            &format!(
                "nsys 2022.4 sometimes fails on its own mid-capture (\"End of file\", \"Local Endpoint is not available\"): run again, or raise pipeline.nsys.hang_retries; {see_log}"
            ),
        ),
        Exit::Code(c) if c > 128 && c - 128 < 32 => failed(
            format!("the profiled command was killed by signal {} ({}) under nsys", c - 128, signals::name(c - 128)),
            &see_log,
        ),
        Exit::Code(c) => failed(format!("the profiled command exited with code {c} under nsys{}", said.last_words), &see_log),
        Exit::Signal(s) => failed(format!("nsys was killed by signal {s} ({})", signals::name(s)), &see_log),
    }
}

/// The last `n` bytes of a file (a log that may be long), or nothing.
/// Whether a line of the log at `path` holds `text` (read line by line; an
/// unreadable log holds nothing).
fn log_has_line(path: &Path, text: &str) -> bool {
    use std::io::BufRead;
    let Ok(file) = std::fs::File::open(path) else { return false };
    std::io::BufReader::new(file).split(b'\n').map_while(Result::ok).any(|l| String::from_utf8_lossy(&l).contains(text))
}

fn tail_of(path: &Path, n: u64) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else { return Vec::new() };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut buf = Vec::new();
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(n))).and_then(|_| f.read_to_end(&mut buf));
    buf
}

/// Under torchrun or mpirun the profiled command is the launcher, whose
/// stderr ends with its report of the first failing rank: the error names
/// that rank, its process (from the launcher, else `launcher/ranks/` when it
/// holds one record of the rank) and
/// how it ended, not the launcher's last banner line.
fn name_rank(run: &RunDir, e: Error, done: &Finished, f: super::launcher::RankFailure) -> Error {
    let recorded = crate::run_dir::read_launched(&run.join(run_dir::LAUNCHED_RANKS_DIR));
    let mine: Vec<_> = recorded.iter().filter(|r| r.rank == f.rank).collect();
    // A capture tried again after an nsys hang leaves the first try's records beside the
    // second's: with several records of the rank, which process failed is not known here.
    let only = (mine.len() == 1).then(|| mine[0]);
    let pid = f.pid.or(only.map(|r| r.process_id));
    let mine = mine.first().copied();
    let host = f.host.clone().or(mine.map(|r| r.host.clone()));
    let at = match (pid, host) {
        (Some(p), Some(h)) => format!(" (process {p} on {h})"),
        (Some(p), None) => format!(" (process {p})"),
        (None, Some(h)) => format!(" (on {h})"),
        (None, None) => String::new(),
    };
    Error::new(
        e.kind,
        format!(
            "rank {}{at} {} under {}, the first rank to fail; {} ended with {}",
            f.rank,
            f.how,
            f.launcher,
            f.launcher,
            done.describe()
        ),
    )
    .with_hint(format!(
        "the ranks' output is in {} and {} (the launcher's report at the end)",
        run_dir::NSYS_STDOUT,
        run_dir::NSYS_STDERR
    ))
}

/// A failure of nsys itself is not the profiled command's: nsys 2022.4 exits
/// 1 with a C++ exception on stderr (`[QuadDCommon::tag_message*] = Failed to
/// write termination status to file`) when it cannot write, e.g. to a full
/// TMPDIR, where it keeps its capture and status files; it says so, and names
/// a temporary directory with little room.
fn blame_nsys(e: Error, done: &Finished, said: &str, exception: Option<String>, have_report: bool) -> Error {
    let Exit::Code(code) = done.exit else { return e };
    let low = temp_space_low();
    let hint = e.hint.clone().unwrap_or_default();
    let message = match (exception, &low) {
        (Some(what), _) => format!("nsys itself failed (exit code {code}): {what}"),
        // Not the profiled command's code for sure: nsys fails in many ways on a full disk.
        (None, Some(_)) if !have_report => format!("nsys exited with code {code} and wrote no capture{said}"),
        (None, _) => return e,
    };
    match low {
        Some(low) => Error::new(e.kind, format!("{message}; {low}"))
            .with_hint(format!("free space in the temporary directory or point TMPDIR at a disk with room; {hint}")),
        None => Error::new(e.kind, message).with_hint(hint),
    }
}

/// The message of a C++ exception nsys printed on stderr: its `tag_message`,
/// else `std::exception::what`, with the file it names.
fn nsys_exception(stderr: &str) -> Option<String> {
    if !stderr.contains("Dynamic exception type:") {
        return None;
    }
    let value = |key: &str| stderr.lines().find_map(|l| l.trim().strip_prefix(key).map(|v| v.trim().to_string()));
    let what = value("[QuadDCommon::tag_message*] =").or_else(|| value("std::exception::what:"))?;
    Some(match value("[boost::errinfo_file_name_*] =") {
        Some(file) => format!("{what} ({file})"),
        None => what,
    })
}

/// "the temporary directory D has N KiB free" when the directory nsys writes
/// its capture to first (TMPDIR, else /tmp) has under 64 MiB left.
fn temp_space_low() -> Option<String> {
    let dir = std::env::temp_dir();
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: statvfs(3) writes into the struct it is given; the path is NUL-terminated.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut st) } != 0 {
        return None;
    }
    let free = st.f_bavail as u64 * st.f_frsize as u64;
    (free < 64 << 20).then(|| format!("the temporary directory {} has {} KiB free", dir.display(), free >> 10))
}

/// ": <last line of stderr>" when a child said something there.
fn last_words(stderr: &[u8]) -> String {
    last_line(&String::from_utf8_lossy(stderr)).map(|l| format!(": {l}")).unwrap_or_default()
}

/// The last line of a log with something on it, trimmed.
fn last_line(log: &str) -> Option<&str> {
    log.lines().rev().map(str::trim).find(|l| !l.is_empty())
}

/// How native ingestion reads a capture: the top N kernels kept, and the
/// PyTorch attributes stripped from NVTX names (`report.nvtx_attributes`).
pub(crate) struct IngestOptions {
    pub(crate) top_n: usize,
    pub(crate) strip: Vec<String>,
    /// The `nsys stats` reports to save (`pipeline.nsys.stats`; none: not run).
    pub(crate) stats: Vec<String>,
    /// `report.kernel_categories`: a user's category table.
    pub(crate) kernel_categories: Option<std::path::PathBuf>,
    /// `report.launch_gap_us`.
    pub(crate) launch_gap_us: f64,
    /// `runner.run.memory_budget_mib`.
    pub(crate) memory_budget_mib: u64,
    /// `report.perfetto`: the capture as Perfetto traces too.
    pub(crate) perfetto: bool,
}

impl IngestOptions {
    pub(crate) fn of(cfg: &crate::config::Config) -> IngestOptions {
        IngestOptions {
            top_n: cfg.runner.run.top_n_kernels as usize,
            strip: cfg.report.nvtx_attributes.clone(),
            stats: cfg.pipeline.nsys.stats.clone(),
            kernel_categories: cfg.report.kernel_categories.clone(),
            launch_gap_us: cfg.report.launch_gap_us,
            memory_budget_mib: cfg.runner.run.memory_budget_mib,
            perfetto: cfg.report.perfetto,
        }
    }
}

/// Export (unless `report` is already SQLite), stats, then native ingestion;
/// for a kernel summary CSV, its ingestion alone. `report.perfetto`'s
/// traces are left to `later`, for after the reports: they draw the findings, which the reports make.
pub(crate) fn analyze(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    (verdict, later): (&mut RunStatus, &mut Option<PerfettoExport>),
    tool: Option<&Tool>,
    report: &Path,
    opts: &IngestOptions,
) -> Result<(), Error> {
    let top_n = opts.top_n;
    run.subdir(run_dir::NSYS_DIR)?;
    if report.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv")) {
        let copy = run.join(run_dir::NSYS_KERNEL_SUMMARY);
        run_dir::keep_input(report, &copy)?;
        // Errors name the file the user passed, not the run directory's copy.
        let outcome =
            ingest(manifest, || write_summary_outputs(run, &copy, top_n).map_err(|e| e.naming(&copy, report)))?;
        verdict.add(outcome);
        return Ok(());
    }
    let magic = crate::parse::input::magic(report);
    // What the file is, by its first bytes, before what its name says.
    let is_sqlite = match magic {
        crate::parse::input::Magic::Sqlite => true,
        crate::parse::input::Magic::NsysReport => false,
        _ => report.extension().is_some_and(|e| e == "sqlite"),
    };
    let sqlite = if is_sqlite {
        report.to_path_buf()
    } else {
        let Some(tool) = tool else {
            let e = Error::new(ErrorKind::ProfilerUnavailable, "nsys is needed to export a .nsys-rep/.qdrep to SQLite")
                .with_hint("install Nsight Systems, or pass the .sqlite of `nsys export --type sqlite`");
            verdict.add(stage::unavailable(manifest, "nsys_export", e)?);
            return Ok(());
        };
        match export(run, manifest, tool, report)? {
            StageOutcome::Ok => absolute(&run.join(run_dir::NSYS_SQLITE)),
            failed => {
                verdict.add(failed);
                return Ok(());
            }
        }
    };
    if let Some(tool) = tool.filter(|_| !opts.stats.is_empty()) {
        // A cross-check: its failure is recorded, not the run's.
        let _ = stats(run, manifest, tool, &sqlite, &opts.stats)?;
    }
    if let Err(e) = signals::check() {
        verdict.add(StageOutcome::Interrupted(e));
        return Ok(());
    }
    verdict.add(ingest(manifest, || write_outputs(run, &sqlite, opts))?);
    if opts.perfetto {
        let gap = launch_gap_ns(opts.launch_gap_us)?;
        *later = Some(PerfettoExport { source: Source::Nsys(sqlite), strip: opts.strip.clone(), gap });
    }
    Ok(())
}

/// `nsys export --type sqlite` into `nsys/report.sqlite`.
fn export(run: &RunDir, manifest: &mut ManifestWriter, tool: &Tool, report: &Path) -> Result<StageOutcome, Error> {
    let sqlite = absolute(&run.join(run_dir::NSYS_SQLITE));
    let spec = Spawn::new(nsys::export_argv(&tool.path, report, &sqlite))
        .stdout(Sink::File(run.join(run_dir::NSYS_EXPORT_LOG)))
        .stderr(Sink::File(run.join(run_dir::NSYS_EXPORT_STDERR)))
        .timeout(Some(EXPORT_TIMEOUT))
        .companions(nsys::agents_of);
    stage::run(manifest, "nsys_export", spec.argv_strings(), || {
        let done = process::run(&spec)?;
        let ok = done.success() && sqlite.is_file() && NsysDb::open(&sqlite).is_ok();
        let error = match (ok, done.exit) {
            (_, Exit::Interrupted) => Some(signals::interrupted()),
            (true, _) => None,
            (false, _) => {
                let log = std::fs::read_to_string(run.join(run_dir::NSYS_EXPORT_STDERR)).unwrap_or_default();
                // A newer nsys's report fails as "Version number is invalid" or as a
                // ProtobufParseException that reads like damage: the version it carries tells.
                let newer = crate::profile::tools::too_new(report, crate::profile::tools::Kind::Nsys, tool);
                Some(newer.unwrap_or_else(|| export_failure(&log, report, &done, tool)))
            }
        };
        let mut artifacts = vec![run_dir::NSYS_EXPORT_LOG.to_string(), run_dir::NSYS_EXPORT_STDERR.into()];
        if ok {
            artifacts.push(run_dir::NSYS_SQLITE.into());
        }
        Ok(Done::of(error).exit(ExitInfo::from(&done)).artifacts(artifacts))
    })
}

/// Why an export failed, from nsys's last words: a report from a newer nsys
/// (`Version number is invalid: 2023@4@4@54-...`), or a file nsys cannot read
/// at all (`Section Table Reference magic number mismatch` when cut short,
/// `Version tag does not contain a delimiter` for other bytes).
fn export_failure(log: &str, report: &Path, done: &Finished, tool: &Tool) -> Error {
    let why = last_line(log).unwrap_or("no SQLite file written");
    let message = format!("nsys export of {} failed ({}): {why}", report.display(), done.describe());
    if log.contains("Version number is invalid") {
        Error::new(ErrorKind::StageFailed, message).with_hint(format!(
            "nsys {} cannot read reports from newer nsys versions; export with the nsys that captured it (nsys export --type sqlite) and run `llmperf import nsys FILE.sqlite`",
            tool.version
        ))
    } else if done.exit == Exit::Code(0) || log.contains("Exportation error") {
        Error::new(ErrorKind::Unparseable, message).with_hint(
            "the file is damaged (cut short?) or not an Nsight Systems report: compare its size with the original, or capture again",
        )
    } else {
        Error::new(ErrorKind::StageFailed, message)
            .with_hint(format!("see {} in the run directory", run_dir::NSYS_EXPORT_STDERR))
    }
}

/// `nsys stats` CSVs for people and scripts (the numbers in regions.json come
/// from native ingestion). New report names first, old ones when nsys refuses.
fn stats(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    tool: &Tool,
    sqlite: &Path,
    reports: &[String],
) -> Result<StageOutcome, Error> {
    let base = absolute(&run.join(run_dir::NSYS_STATS_BASE));
    let mut new_names = tool.has_new_report_names();
    let (spec, done, names) = loop {
        let names = nsys::stats_names(reports, new_names);
        let spec = Spawn::new(nsys::stats_argv(&tool.path, sqlite, &base, &names))
            .stdout(Sink::File(run.join(run_dir::NSYS_STATS_LOG)))
            .stderr(Sink::Capture)
            .timeout(Some(EXPORT_TIMEOUT));
        let done = process::run(&spec)?;
        if new_names && nsys::unknown_report(&String::from_utf8_lossy(&done.stderr)) {
            new_names = false;
            continue;
        }
        break (spec, done, names);
    };
    let artifacts: Vec<String> =
        names.iter().map(|n| run_dir::nsys_stats_csv(n)).filter(|rel| run.join(rel).is_file()).collect();
    let error = match done.exit {
        Exit::Interrupted => Some(signals::interrupted()),
        _ if done.success() => None,
        _ => {
            let stderr = String::from_utf8_lossy(&done.stderr).trim().to_string();
            Some(
                Error::new(
                    ErrorKind::StageFailed,
                    format!("nsys stats {}: {}", done.describe(), stderr.lines().last().unwrap_or_default()),
                )
                .with_hint("the CSVs are a cross-check: pipeline.nsys.stats names the reports ([] skips nsys stats); regions.json and top_kernels.json come from native ingestion"),
            )
        }
    };
    stage::run(manifest, "nsys_stats", spec.argv_strings(), || {
        Ok(Done::of(error).exit(ExitInfo::from(&done)).artifacts(artifacts))
    })
}

/// Native ingestion: `nsys/capture.json`, `nsys/regions.json` and
/// `nsys/top_kernels.json` from the SQLite export. Returns the region report
/// and the number of kernels.
pub(crate) fn write_outputs(
    run: &RunDir,
    sqlite: &Path,
    opts: &IngestOptions,
) -> Result<(aggregate::nsys::RegionsReport, usize), Error> {
    let top_n = opts.top_n;
    let t = std::time::Instant::now();
    crate::memory::set_budget_mib(opts.memory_budget_mib);
    let db = NsysDb::open(sqlite)?;
    run.write_json(run_dir::NSYS_CAPTURE, &db.capture_host())?;
    // The time breakdown reads the GPU's activity beside the pass, cut by the
    // windows the range sweep meets.
    let categories = aggregate::categories::Categories::load(opts.kernel_categories.as_deref())?;
    let gap = launch_gap_ns(opts.launch_gap_us)?;
    let classify = |name: &str| categories.of(name) as u8;
    let beside = ingest::Beside {
        new: || aggregate::nsys::breakdown::Breakdown::new(gap),
        classify: &classify,
        held: crate::parse::nsys::activity::FED_KERNELS_HELD,
    };
    let (pass, breakdown) =
        ingest::ingest_beside(&db, &opts.strip, Sweep::default, KernelTotals::new, beside, None)?.split();
    let mut done = aggregate::nsys::reports(pass, &opts.strip, top_n, &ingest::Threads)?;
    if let Some(note) = db.join_note() {
        done.regions.notes.push(note);
    }
    let read = t.elapsed();
    signals::check()?;
    tracing::debug!("memory held after reading {}: {} KiB", sqlite.display(), crate::memory::in_use() >> 10);
    crate::memory::check(sqlite)?;
    // `profile --launcher`: each process's rank, as its launcher gave it.
    if let Some(classes) = module_classes(run) {
        aggregate::nsys::regroup_modules(&mut done.regions, &classes);
    }
    let launched = crate::run_dir::read_launched(&run.join(run_dir::LAUNCHED_RANKS_DIR));
    if !launched.is_empty() {
        done.regions.tag_ranks(&launched.iter().map(|l| (l.process_id, l.rank)).collect());
    }
    run.write_json(run_dir::NSYS_REGIONS, &done.regions)?;
    run.write_json(run_dir::NSYS_TOP_KERNELS, &done.top)?;
    run.write_json(run_dir::NSYS_SAMPLES, &done.samples)?;
    // The breakdown is an analysis beside the region tree: where it cannot be
    // made (an export this reader does not know), regions.json stands and
    // breakdown.json says why it is empty.
    let mut breakdown = match breakdown {
        Ok((b, source)) => {
            let spell = |n| crate::parse::nsys::activity::spell(&db, &done.names, source, n);
            b.finish(&done.window_names, categories.sources.clone(), &spell)
        }
        Err(e) => {
            tracing::warn!("time breakdown not computed: {}", e.message);
            aggregate::nsys::breakdown::BreakdownReport::not_computed(&e, categories.sources.clone())
        }
    };
    for d in &mut breakdown.devices {
        d.rank = launched.iter().find(|l| l.process_id == d.process_id).map(|l| l.rank);
    }
    aggregate::nsys::issued::add_issued(&mut breakdown, &done.regions, &categories);
    run.write_json(run_dir::NSYS_BREAKDOWN, &breakdown)?;
    tracing::debug!(
        "nsys ingestion: read and built {read:.2?} (the breakdown beside), written {:.2?}",
        t.elapsed() - read
    );
    Ok((done.regions, done.kernels))
}

/// `report.launch_gap_us` in ns, checked.
pub(super) fn launch_gap_ns(us: f64) -> Result<i64, Error> {
    crate::config::schema::launch_gap_ns(us)
}

/// `nsys/regions.json`, `nsys/top_kernels.json` and an empty `nsys/samples.json` from a kernel summary CSV
/// (parse::nsys_csv): no regions, and every kernel unattributed, with a note.
pub(crate) fn write_summary_outputs(
    run: &RunDir,
    csv: &Path,
    top_n: usize,
) -> Result<(aggregate::nsys::RegionsReport, usize), Error> {
    let rows = crate::parse::nsys_csv::read_kernel_summary(csv)?;
    let mut kernels = aggregate::nsys::top_kernel_rows(rows.into_iter().map(|r| (r.name, r.sums)), 0);
    let count: usize = kernels.iter().map(|k| k.calls).sum();
    let note = format!(
        "{} is a kernel summary without NVTX ranges: no regions, every kernel is unattributed",
        run.relative(csv)
    );
    let report = aggregate::nsys::RegionsReport::kernels_only(&kernels, note);
    if top_n > 0 {
        kernels.truncate(top_n);
    }
    run.write_json(run_dir::NSYS_REGIONS, &report)?;
    run.write_json(run_dir::NSYS_TOP_KERNELS, &kernels)?;
    // A summary has totals, not launches: nothing for diff's statistics.
    run.write_json(run_dir::NSYS_SAMPLES, &aggregate::nsys::Samples::new(Vec::new(), Vec::new()))?;
    Ok((report, count))
}

/// The module classes `--annotate`'s bootstrap wrote (`annotate/classes.<pid>.json`,
/// one per Python process), merged; None when it wrote none (no `--annotate`,
/// an import). A file that cannot be read is left out with a warning: the
/// groups then fall back to names for its modules.
pub(super) fn module_classes(run: &RunDir) -> Option<aggregate::nsys::Classes> {
    let entries = std::fs::read_dir(run.join(run_dir::ANNOTATE_DIR)).ok()?;
    let mut merged = aggregate::nsys::Classes::new();
    let mut any = false;
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !is_classes_file(&name) {
            continue;
        }
        let read = run_dir::read_regular(&e.path())
            .map_err(|e| e.to_string())
            .and_then(|text| serde_json::from_str::<aggregate::nsys::Classes>(&text).map_err(|e| e.to_string()));
        match read {
            Ok(classes) => {
                any = true;
                for (range, kinds) in classes {
                    merged.entry(range).or_default().extend(kinds);
                }
            }
            Err(why) => tracing::warn!("{}: not read ({why}); its modules are grouped by name", e.path().display()),
        }
    }
    any.then_some(merged)
}

/// The `nsys_regions` stage around one of the two writers above.
fn ingest(
    manifest: &mut ManifestWriter,
    write: impl FnOnce() -> Result<(aggregate::nsys::RegionsReport, usize), Error>,
) -> Result<StageOutcome, Error> {
    stage::run(manifest, "nsys_regions", Vec::new(), || {
        let (report, kernels) = write()?;
        tracing::info!(
            "nsys: {} regions, {} kernels ({} unattributed)",
            report.regions.len(),
            kernels,
            report.unattributed.kernel_count
        );
        // A capture without any NVTX range gives no per-region answer at all: said
        // loudly, not only in regions.json's notes (the `nvtx` 0.2.17 Python package
        // recorded nothing under nsys 2022.4 while 0.2.10 did).
        if report.notes.iter().any(|n| n.starts_with("no NVTX ranges in the capture")) {
            tracing::warn!(
                "nsys recorded no NVTX range: no per-region report, every kernel is unattributed; if the program emits NVTX, \
                 check that nsys traces nvtx (pipeline.nsys.trace) and that its NVTX library works under this nsys"
            );
        }
        let diagnoses = report
            .notes
            .iter()
            .map(|n| Diagnosis { code: "nsys_empty".into(), message: n.clone(), hint: empty_hint(n) })
            .collect();
        let files = [run_dir::NSYS_REGIONS, run_dir::NSYS_TOP_KERNELS, run_dir::NSYS_SAMPLES];
        Ok(Done::ok(files.map(String::from).to_vec()).diagnoses(diagnoses))
    })
}

/// The hint of a note on an empty capture: a capture without kernels made
/// on a host without an NVIDIA driver is what such a host gives.
fn empty_hint(note: &str) -> String {
    let no_driver = crate::provenance::host::counter_access() == crate::provenance::host::CounterAccess::NoDriver;
    if note.starts_with("no CUDA kernels") && no_driver {
        return "this host has no NVIDIA driver (/proc/driver/nvidia absent): a run here has no CUDA kernels, and regions are timed on the host alone; on a GPU host, trace cuda (pipeline.nsys.trace)".into();
    }
    if note.starts_with("no CUDA kernels") {
        return "trace cuda (pipeline.nsys.trace) and check that the program ran on a GPU (device=cuda:0)".into();
    }
    if note.contains("end before they start") {
        return "the export holds rows with impossible times, left out of every total: export the capture again (nsys export --type sqlite)".into();
    }
    "trace nvtx (pipeline.nsys.trace) and run the work inside NVTX ranges (--annotate modules gives a Python program module ranges with no code change)".into()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn said() -> Said<'static> {
        Said { last_words: "", agent_failed: false, range_started: false, range_ended: false }
    }

    #[test]
    fn the_range_lines_are_found_however_much_the_application_printed_after_them() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("stdout.log");
        let app = "a line of the application's own output\n".repeat(1000);
        std::fs::write(&log, format!("{RANGE_STARTED}\n{app}")).unwrap();
        assert!(
            tail_of(&log, 4096).len() == 4096 && !String::from_utf8_lossy(&tail_of(&log, 4096)).contains(RANGE_STARTED)
        );
        assert!(log_has_line(&log, RANGE_STARTED));
        assert!(!log_has_line(&log, RANGE_ENDED));
        assert!(!log_has_line(&dir.path().join("missing.log"), RANGE_STARTED));
    }

    /// A hung attempt's classes files are not read with the retry's: the
    /// retry's process alone decides the groups.
    #[test]
    fn a_hung_attempts_module_classes_are_set_aside_before_the_retry() {
        let root = tempfile::tempdir().unwrap();
        let run = RunDir::create(root.path()).unwrap();
        run.subdir(run_dir::ANNOTATE_DIR).unwrap();
        run.write("annotate/classes.100.json", br#"{"mlp.0": ["Linear"]}"#).unwrap();
        run.write("annotate/sitecustomize.py", b"").unwrap();
        set_aside_attempt_classes(&run, 1);
        assert_eq!(module_classes(&run), None, "the hung attempt's file is still read");
        assert!(run.join("annotate/attempt1/classes.100.json").is_file());
        assert!(run.join("annotate/sitecustomize.py").is_file(), "the bootstrap the retry needs was moved");
        run.write("annotate/classes.200.json", br#"{"mlp.0": ["ReLU"]}"#).unwrap();
        let read = module_classes(&run).unwrap();
        assert_eq!(read["mlp.0"].iter().collect::<Vec<_>>(), ["ReLU"]);
    }

    fn cfg() -> NsysConfig {
        crate::config::load(&crate::config::LoadOptions::default()).unwrap().config.pipeline.nsys
    }

    #[test]
    fn an_agent_that_cannot_start_is_named_with_the_stale_registry_hint() {
        let done = Finished { exit: Exit::Code(1), elapsed: Duration::ZERO, stdout: Vec::new(), stderr: Vec::new() };
        let e =
            judge(&done, false, &Said { last_words: ": Agent launcher failed.", agent_failed: true, ..said() }, &cfg())
                .unwrap();
        assert_eq!(e.message, "nsys could not start its agent (\"Agent launcher failed\")");
        assert!(e.hint.unwrap().contains("remove /dev/shm/NSys-*"));
    }

    /// A capture range the application never entered ends with it, exit 0 and
    /// no report: the error names the range, not nsys's importer.
    #[test]
    fn a_range_that_never_started_is_named_when_nsys_exits_0() {
        let done = Finished { exit: Exit::Code(0), elapsed: Duration::ZERO, stdout: Vec::new(), stderr: Vec::new() };
        let ranged =
            NsysConfig { capture_range: CaptureRange::Nvtx, nvtx_capture: Some("prefill@LLM".into()), ..cfg() };
        let e = judge(&done, false, &said(), &ranged).unwrap();
        assert_eq!(e.message, "nsys wrote no capture: its capture range never started before the application exited");
        assert!(e.hint.unwrap().contains("pipeline.nsys.nvtx_capture=prefill@LLM"));
        let e = judge(&done, false, &said(), &cfg()).unwrap();
        assert_eq!(e.message, "nsys exited 0 but wrote no report");
    }

    /// nsys writes its capture whatever the application's status: a failing
    /// status with a capture is the application's, without one it is nsys's.
    #[test]
    fn a_failing_status_is_the_applications_only_beside_a_capture() {
        let done =
            |c| Finished { exit: Exit::Code(c), elapsed: Duration::ZERO, stdout: Vec::new(), stderr: Vec::new() };
        let eof = Said { last_words: ": End of file", ..said() };
        let e = judge(&done(1), true, &eof, &cfg()).unwrap();
        assert_eq!(e.message, "the profiled command exited with code 1 under nsys: End of file");
        let e = judge(&done(1), false, &eof, &cfg()).unwrap();
        assert_eq!(e.message, "nsys exited with code 1 and wrote no capture: End of file");
        assert!(e.hint.unwrap().contains("pipeline.nsys.hang_retries"));
        let e = judge(&done(137), true, &eof, &cfg()).unwrap();
        assert_eq!(e.message, "the profiled command was killed by signal 9 (SIGKILL) under nsys");
        let e = judge(&done(137), false, &eof, &cfg()).unwrap();
        assert_eq!(e.message, "nsys exited with code 137 and wrote no capture: End of file");
        // A capture range that never started: nsys writes nothing and passes on the status.
        let ranged = NsysConfig { capture_range: CaptureRange::Nvtx, nvtx_capture: Some("X".into()), ..cfg() };
        let e = judge(&done(3), false, &Said { last_words: ": oops", ..said() }, &ranged).unwrap();
        assert_eq!(e.message, "the profiled command exited with code 3 under nsys: oops");
        let started = Said { range_started: true, ..eof };
        let e = judge(&done(1), false, &started, &ranged).unwrap();
        assert_eq!(e.message, "nsys exited with code 1 and wrote no capture: End of file");
    }
}
