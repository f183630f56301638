//! run dir: the only module that names files inside a run directory
//! (`tmp/profile-output/<run_id>/`), and the only one that writes them: every
//! write goes to a temporary file in the same directory and is renamed into
//! place, so a reader never sees half a file and an interrupted run keeps
//! everything already written. Inputs are kept as copies of their own, and a
//! lock lets processes that rewrite one directory take turns.
use serde::Serialize;
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, ErrorKind};

pub(crate) const ENV_JSON: &str = "env.json";
pub(crate) const CONFIG_YAML: &str = "config.yaml";
pub(crate) const INPUTS_YAML: &str = "inputs.yaml";
pub(crate) const MANIFEST_JSON: &str = "manifest.json";
pub(crate) const NSYS_DIR: &str = "nsys";
pub(crate) const NSYS_CMD: &str = "nsys/cmd.txt";
pub(crate) const NSYS_STDOUT: &str = "nsys/stdout.log";
pub(crate) const NSYS_STDERR: &str = "nsys/stderr.log";
pub(crate) const NSYS_SQLITE: &str = "nsys/report.sqlite";
/// `llmperf export perfetto` / `report.perfetto`: one trace per process.
pub(crate) const PERFETTO_DIR: &str = "perfetto";

/// A process's trace in [`PERFETTO_DIR`]: `pid<PID>.pt.trace.json.gz`.
pub(crate) fn perfetto_trace(pid: i64) -> String {
    format!("pid{pid}.pt.trace.json.gz")
}

/// Whether `name` is a process's trace in [`PERFETTO_DIR`] (what
/// [`perfetto_trace`] writes, and nothing else).
pub(crate) fn is_perfetto_trace(name: &str) -> bool {
    name.strip_prefix("pid")
        .and_then(|n| n.strip_suffix(".pt.trace.json.gz"))
        .is_some_and(|pid| !pid.is_empty() && pid.bytes().all(|b| b.is_ascii_digit()))
}
pub(crate) const NSYS_EXPORT_LOG: &str = "nsys/export.log";
pub(crate) const NSYS_EXPORT_STDERR: &str = "nsys/export.stderr.log";
pub(crate) const NSYS_STATS_LOG: &str = "nsys/stats.log";
/// `nsys stats -o` base: files are `nsys/stats_<report>.csv`.
pub(crate) const NSYS_STATS_BASE: &str = "nsys/stats";

/// `nsys/stats_<report>.csv`, what `nsys stats -o NSYS_STATS_BASE` writes for a report.
pub(crate) fn nsys_stats_csv(report: &str) -> String {
    format!("{NSYS_STATS_BASE}_{report}.csv")
}

/// Where a run's region model came from: an nsys capture, or a PyTorch
/// profiler trace (`llmperf import torch`). Both write the same schemas.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Timeline {
    Nsys,
    Torch,
}

impl Timeline {
    /// nsys's where the run has its files (or neither's), else the trace's.
    pub(crate) fn of(run: &RunDir) -> Timeline {
        Timeline::of_dir(run.path())
    }

    /// [`Timeline::of`] a run directory not opened (a rank's, by `merge`).
    pub(crate) fn of_dir(dir: &Path) -> Timeline {
        if !dir.join(NSYS_REGIONS).exists() && dir.join(TORCH_REGIONS).exists() {
            Timeline::Torch
        } else {
            Timeline::Nsys
        }
    }

    /// Its name in the reports (`kernels.json`'s `source`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Timeline::Nsys => "nsys",
            Timeline::Torch => "torch",
        }
    }

    pub(crate) fn regions_file(self) -> &'static str {
        match self {
            Timeline::Nsys => NSYS_REGIONS,
            Timeline::Torch => TORCH_REGIONS,
        }
    }

    pub(crate) fn samples_file(self) -> &'static str {
        match self {
            Timeline::Nsys => NSYS_SAMPLES,
            Timeline::Torch => TORCH_SAMPLES,
        }
    }

    pub(crate) fn breakdown_file(self) -> &'static str {
        match self {
            Timeline::Nsys => NSYS_BREAKDOWN,
            Timeline::Torch => TORCH_BREAKDOWN,
        }
    }

    pub(crate) fn top_kernels_file(self) -> &'static str {
        match self {
            Timeline::Nsys => NSYS_TOP_KERNELS,
            Timeline::Torch => TORCH_TOP_KERNELS,
        }
    }

    /// What one of its ranges is called.
    pub(crate) fn range(self) -> &'static str {
        match self {
            Timeline::Nsys => "NVTX range",
            Timeline::Torch => "profiler range",
        }
    }
}

/// `nsys/stdout.attempt2.log` for `nsys/stdout.log`: a hung capture's logs, kept.
pub(crate) fn attempt_log(log: &str, attempt: u32) -> String {
    log.replace(".log", &format!(".attempt{attempt}.log"))
}

/// `workload/plain_nsys.stdout.log` and `….stderr.log`: the application's
/// output on a rank that ran it without that profiler (stage `plain:<profiler>`).
pub(crate) fn plain_logs(profiler: &str) -> (String, String) {
    (format!("workload/plain_{profiler}.stdout.log"), format!("workload/plain_{profiler}.stderr.log"))
}

pub(crate) const NSYS_REGIONS: &str = "nsys/regions.json";
/// `llmperf import torch`: the region model of a PyTorch profiler trace, in
/// the schemas of `nsys/`'s files, and what the trace says of its GPU work.
pub(crate) const TORCH_REGIONS: &str = "torch/regions.json";
pub(crate) const TORCH_TOP_KERNELS: &str = "torch/top_kernels.json";
pub(crate) const TORCH_SAMPLES: &str = "torch/samples.json";
pub(crate) const TORCH_CAPTURE: &str = "torch/capture.json";
pub(crate) const TORCH_BREAKDOWN: &str = "torch/breakdown.json";
/// `profile --tracer torch`: the traces torch.profiler wrote, one per process
/// (`trace.<pid>.pt.trace.json`), and the application's output.
pub(crate) const TORCH_TRACE_DIR: &str = "torch/trace";
pub(crate) const TORCH_APP_STDOUT: &str = "torch/app.stdout.log";
pub(crate) const TORCH_APP_STDERR: &str = "torch/app.stderr.log";
/// `llmperf serve`: the server's output, every request of the captured
/// load with its latencies and the load's summary, and the server's
/// Prometheus `/metrics` read before and after the load.
pub(crate) const SERVE_LOG: &str = "serve/server.stderr.log";
pub(crate) const SERVE_STDOUT: &str = "serve/server.stdout.log";
pub(crate) const SERVE_REQUESTS: &str = "serve/requests.json";
/// The engine's steps by kind (prefill, decode, mixed), from its trace's regions.
pub(crate) const SERVE_STEPS: &str = "serve/steps.json";
/// The load and the steps, as tables.
pub(crate) const SERVE_SUMMARY: &str = "serve/summary.md";
pub(crate) const SERVE_METRICS_BEFORE: &str = "serve/metrics.before.txt";
pub(crate) const SERVE_METRICS_AFTER: &str = "serve/metrics.after.txt";
pub(crate) const NSYS_TOP_KERNELS: &str = "nsys/top_kernels.json";
/// Per-instance durations of the regions and top kernels (for diff and check).
pub(crate) const NSYS_SAMPLES: &str = "nsys/samples.json";
/// The machine of the capture, from its SQLite export.
pub(crate) const NSYS_CAPTURE: &str = "nsys/capture.json";
/// Where each top-level region's wall time went per device (aggregate::nsys::breakdown).
pub(crate) const NSYS_BREAKDOWN: &str = "nsys/breakdown.json";
/// An imported `nsys stats` kernel summary CSV (kernels only, no NVTX).
pub(crate) const NSYS_KERNEL_SUMMARY: &str = "nsys/kernel_summary.csv";
/// Where the kernel totals of a run without its SQLite export come from: an
/// imported kernel summary, else the stats CSV of the capture (new name, old name).
pub(crate) const NSYS_KERNEL_SUMMARIES: [&str; 3] =
    [NSYS_KERNEL_SUMMARY, "nsys/stats_cuda_gpu_kern_sum.csv", "nsys/stats_gpukernsum.csv"];

/// The first non-empty file of [`NSYS_KERNEL_SUMMARIES`] in a run.
pub(crate) fn nsys_kernel_summary(run: &RunDir) -> Option<PathBuf> {
    NSYS_KERNEL_SUMMARIES.iter().map(|f| run.join(f)).find(|p| non_empty(p))
}

/// nsys appends `.nsys-rep` (2021.3+) or `.qdrep` (older) to this base.
pub(crate) const NSYS_REPORT_BASE: &str = "nsys/report";

/// The capture nsys wrote: `nsys/report.nsys-rep`, or `.qdrep` from an older nsys.
pub(crate) fn nsys_report(run: &RunDir) -> Option<PathBuf> {
    let base = absolute(&run.join(NSYS_REPORT_BASE));
    ["nsys-rep", "qdrep"].iter().map(|ext| base.with_extension(ext)).find(|p| p.is_file())
}

pub(crate) const NCU_DIR: &str = "ncu";
pub(crate) const KERNELS_JSON: &str = "kernels.json";
pub(crate) const KERNELS_MD: &str = "kernels.md";
pub(crate) const OPERATORS_JSON: &str = "operators.json";
pub(crate) const OPERATORS_MD: &str = "operators.md";
pub(crate) const REGIONS_MD: &str = "regions.md";
pub(crate) const SUMMARY_MD: &str = "stakeholder_summary.md";
/// What to fix first (report::findings).
pub(crate) const FINDINGS_JSON: &str = "findings.json";
/// One self-contained page with charts (no script, no network).
pub(crate) const REPORT_HTML: &str = "report.html";
pub(crate) const ROOFLINE_JSON: &str = "roofline.json";
/// One job's ranks side by side (several processes, or `ranks/<rank>/`).
pub(crate) const RANKS_JSON: &str = "ranks.json";
pub(crate) const RANKS_MD: &str = "ranks.md";
/// A merged job's heat map of ranks × regions.
pub(crate) const RANKS_HTML: &str = "ranks.html";
/// A job directory's per-rank run directories (`--rank-from-env`).
pub(crate) const RANKS_DIR: &str = "ranks";
/// In a rank's run directory: which rank of which job wrote it.
pub(crate) const RANK_JSON: &str = "rank.json";
/// `--annotate`: the bootstrap every Python process of the command imports (plan/annotate.rs).
pub(crate) const ANNOTATE_DIR: &str = "annotate";
pub(crate) const ANNOTATE_BOOTSTRAP: &str = "annotate/sitecustomize.py";
/// The NVTX binding beside each Python file llmperf runs (plan/nvtx_ctypes.py).
pub(crate) const ANNOTATE_NVTX: &str = "annotate/_llmperf_nvtx.py";
/// `--model hf`: the workload script, its NVTX binding and its request.
pub(crate) const HF_SCRIPT: &str = "workload/hf_workload.py";
pub(crate) const HF_NVTX: &str = "workload/_llmperf_nvtx.py";
pub(crate) const HF_REQUEST: &str = "workload/hf_request.json";
/// `profile --launcher torchrun|mpirun`: `<pid>.json` per rank, from its launcher's environment.
pub(crate) const LAUNCHED_RANKS_DIR: &str = "launcher/ranks";
pub(crate) const LAUNCHED_RANK_PATTERN: &str = "launcher/ranks/*";
/// The same, for the ncu stage's launch when ncu wraps the launcher (ncu's `rank:<r>` scopes).
pub(crate) const LAUNCHED_NCU_RANKS_DIR: &str = "launcher/ncu_ranks";
pub(crate) const LAUNCHED_NCU_RANK_PATTERN: &str = "launcher/ncu_ranks/*";
/// nsys and ncu joined per region: coverage, HFU, MBU.
pub(crate) const REGION_JOIN_JSON: &str = "region_join.json";
/// The index of a run: stage statuses, diagnoses, links to every file.
pub(crate) const REPORT_MD: &str = "report.md";
pub(crate) const NCU_CMD: &str = "ncu/cmd.txt";
/// ncu's rule results by kernel (aggregate::rules).
pub(crate) const NCU_RULES_JSON: &str = "ncu/rules.json";
/// `llmperf diff A B` writes into B; `llmperf check RUN` into RUN.
pub(crate) const DIFF_DIR: &str = "diff";
pub(crate) const DIFF_JSON: &str = "diff/diff.json";
pub(crate) const DIFF_MD: &str = "diff/diff.md";
pub(crate) const DIFF_HTML: &str = "diff/diff.html";
pub(crate) const CHECK_DIR: &str = "check";
pub(crate) const CHECK_JSON: &str = "check/check.json";
pub(crate) const CHECK_MD: &str = "check/check.md";
/// The pass plan: which passes ran, with what filters (specs/ncu-outputs.md).
pub(crate) const NCU_PLAN: &str = "ncu/plan.json";
pub(crate) const NCU_PREFLIGHT: &str = "ncu/preflight.json";
pub(crate) const NCU_REGIONS_JSON: &str = "ncu/regions/report.json";
pub(crate) const NCU_REGIONS_MD: &str = "ncu/regions/report.md";

/// The files of one ncu pass (`p0`, `import01`, ...) under `ncu/`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum PassFile {
    /// What `ncu -o` is given; ncu appends `.ncu-rep`.
    Base,
    Report,
    Log,
    Stdout,
    Stderr,
    /// `ncu --import --csv --page raw|details`, and its stderr.
    Page(Page),
    PageStderr(Page),
    /// An imported CSV, kept as it was given.
    ImportedCsv,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Page {
    Raw,
    Details,
    /// `--page session` (newer ncu): the launch settings, with the `Profiler
    /// Command Line` that proves the replay mode from the report itself.
    Session,
}

impl Page {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Page::Raw => "raw",
            Page::Details => "details",
            Page::Session => "session",
        }
    }
}

/// `ncu/<pass>.<suffix>`: `p0.ncu-rep`, `p0.log`, `p0.details.csv`, ...
pub(crate) fn pass_file(pass: &str, file: PassFile) -> String {
    let suffix = match file {
        PassFile::Base => return format!("{NCU_DIR}/{pass}"),
        PassFile::Report => "ncu-rep".to_string(),
        PassFile::Log => "log".to_string(),
        PassFile::Stdout => "stdout.log".to_string(),
        PassFile::Stderr => "stderr.log".to_string(),
        PassFile::Page(p) => format!("{}.csv", p.name()),
        PassFile::PageStderr(p) => format!("{}.stderr.log", p.name()),
        PassFile::ImportedCsv => "csv".to_string(),
    };
    format!("{NCU_DIR}/{pass}.{suffix}")
}

/// The CSV a pass left: its details page when rendered, else the raw page,
/// else an imported CSV (`ncu/<pass>.csv`); none when all are missing or empty.
pub(crate) fn pass_csv(run: &RunDir, pass: &str) -> Option<PathBuf> {
    [PassFile::Page(Page::Details), PassFile::Page(Page::Raw), PassFile::ImportedCsv]
        .into_iter()
        .map(|f| run.join(&pass_file(pass, f)))
        .find(|p| non_empty(p))
}

/// The raw page beside a pass's details page (`ncu/pN.raw.csv` for
/// `ncu/pN.details.csv`), when there is a non-empty one.
pub(crate) fn raw_page_of(details: &Path) -> Option<PathBuf> {
    let name = details.file_name()?.to_str()?.strip_suffix(".details.csv")?;
    let raw = details.with_file_name(format!("{name}.raw.csv"));
    non_empty(&raw).then_some(raw)
}

/// The session page beside a pass's details or raw page (`ncu/pN.session.csv`).
pub(crate) fn session_page_of(csv: &Path) -> Option<PathBuf> {
    let file = csv.file_name()?.to_str()?;
    let name = file.strip_suffix(".details.csv").or_else(|| file.strip_suffix(".raw.csv"))?;
    let session = csv.with_file_name(format!("{name}.session.csv"));
    non_empty(&session).then_some(session)
}

/// A file with something in it (an export killed before writing leaves an empty one).
fn non_empty(p: &Path) -> bool {
    p.metadata().is_ok_and(|m| m.len() > 0)
}

pub(crate) const NCU_REGIONS_DIR: &str = "ncu/regions";
pub(crate) const NCU_REGION_JSON: &str = "region.json";
pub(crate) const NCU_REGION_SECTIONS: &str = "sections.txt";
/// Every region's `region.json` (`*` is one directory name).
pub(crate) const NCU_REGION_JSON_PATTERN: &str = "ncu/regions/*/region.json";

/// `ncu/regions/<dir>/<name>` for a sanitized region directory name.
pub(crate) fn ncu_region_file(dir: &str, name: &str) -> String {
    format!("{NCU_REGIONS_DIR}/{dir}/{name}")
}
pub(crate) const WORKLOAD_DIR: &str = "workload";
pub(crate) const BASELINE_STDOUT: &str = "workload/baseline.stdout.log";
pub(crate) const BASELINE_STDERR: &str = "workload/baseline.stderr.log";
pub(crate) const TIMINGS_JSON: &str = "workload/timings.json";
/// libtorch as the built-in workload's own process saw it; env.json's
/// `libtorch` is completed from it, so `profile` never loads libtorch itself.
pub(crate) const LIBTORCH_JSON: &str = "workload/libtorch.json";
/// The built-in workload's timings when it ran under ncu (slowed by replay).
pub(crate) const NCU_TIMINGS_JSON: &str = "workload/timings.ncu.json";
/// The built-in workload run once without a profiler (`runner.run.baseline`).
pub(crate) const BASELINE_TIMINGS_JSON: &str = "workload/timings.baseline.json";

/// Held by a process that reads and rewrites a run directory's manifest
/// (imports, `report`); see [`RunDir::lock`].
pub(crate) const LOCK_FILE: &str = ".llmperf-lock";

/// Space held for the manifest's last word: written when the manifest is
/// started, removed just before it is closed, so a run that fills the disk
/// can still record that it failed (without it, a full disk left the
/// manifest `running`). See [`RunDir::reserve`].
pub(crate) const RESERVE_FILE: &str = ".llmperf-reserve";
/// Bytes of [`RESERVE_FILE`]: several times a closed manifest with its diagnoses.
const RESERVE_BYTES: usize = 128 << 10;

/// The lock of [`RunDir::lock`]; released when dropped (or when the process ends).
pub(crate) struct Lock {
    _file: std::fs::File,
}

/// Where a new run directory goes: the value a plan holds ([`RunDir::create_planned`]).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum NewRun {
    /// `<root>/<run_id>/`, the id drawn by [`new_run_id`].
    Named { root: PathBuf, run_id: String },
    /// `<root>/<job>/ranks/<rank>/` ([`RunDir::create_rank`]).
    Rank { root: PathBuf, job: String, rank: u32 },
}

impl NewRun {
    /// The directory's path.
    pub(crate) fn path(&self) -> PathBuf {
        match self {
            NewRun::Named { root, run_id } => root.join(run_id),
            NewRun::Rank { root, job, rank } => root.join(job).join(RANKS_DIR).join(rank.to_string()),
        }
    }
}

/// A fresh run id, `20261122T130558Z-a1b2c3`: the time, then 3 random bytes.
pub(crate) fn new_run_id() -> String {
    format!("{}-{}", utc_compact(std::time::SystemTime::now()), random_suffix())
}

#[derive(Debug, Clone)]
pub struct RunDir {
    path: PathBuf,
    run_id: String,
}

impl RunDir {
    /// Create a new, uniquely named run directory under `root`.
    /// Two runs started in the same second get different random suffixes;
    /// `create_dir` fails on a clash and another suffix is drawn.
    pub(crate) fn create(root: &Path) -> Result<Self, Error> {
        for _ in 0..64 {
            match Self::create_new(root, &new_run_id())? {
                Some(run) => return Ok(run),
                None => continue,
            }
        }
        Err(Error::new(ErrorKind::Internal, format!("no free run id under {}", root.display())))
    }

    /// Create `root/run_id`, with an id drawn before (by a profile run's
    /// plan, [`new_run_id`], whose argv already name the directory): a clash
    /// is refused, since the id cannot be drawn again.
    pub(crate) fn create_named(root: &Path, run_id: &str) -> Result<Self, Error> {
        Self::create_new(root, run_id)?.ok_or_else(|| {
            Error::new(
                ErrorKind::Internal,
                format!("{} exists: another run drew the same run id", root.join(run_id).display()),
            )
            .with_hint("run the command again: it draws a new id")
        })
    }

    /// `root/run_id` created; None when it exists.
    fn create_new(root: &Path, run_id: &str) -> Result<Option<Self>, Error> {
        // `-o` of profile and workload is the folder runs are created in;
        // `-o` of import is the run directory itself. A run directory given
        // here is that mix-up: a run inside a run would be found by no one.
        if root.join(MANIFEST_JSON).is_file() {
            let parent = root.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
            return Err(Error::usage(format!(
                "{} is a run directory: -o/--output-root names the folder run directories are created in",
                root.display()
            ))
            .with_hint(format!(
                "pass its parent (-o {}); `import -o DIR` is the one command whose -o is the run directory itself",
                parent.display()
            )));
        }
        std::fs::create_dir_all(root).map_err(|e| io_error(root, "create the artifacts root", &e))?;
        let path = root.join(run_id);
        match std::fs::create_dir(&path) {
            Ok(()) => Ok(Some(RunDir { path, run_id: run_id.to_string() })),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(None),
            Err(e) => Err(io_error(&path, "create the run directory", &e)),
        }
    }

    /// A profile run's directory where its plan put it, with the files the
    /// plan starts it with (a rank's `rank.json`, the Python bootstrap),
    /// written before anything runs in it.
    pub(crate) fn create_planned(at: &NewRun, files: &[(&str, Vec<u8>)]) -> Result<Self, Error> {
        let run = match at {
            NewRun::Named { root, run_id } => Self::create_named(root, run_id)?,
            NewRun::Rank { root, job, rank } => Self::create_rank(root, job, *rank)?,
        };
        for (rel, bytes) in files {
            if let Some(dir) = Path::new(rel).parent().filter(|d| !d.as_os_str().is_empty()) {
                run.subdir(&dir.to_string_lossy())?;
            }
            run.write(rel, bytes)?;
        }
        Ok(run)
    }

    /// Rank `rank`'s run directory of job `job`: `<root>/<job>/ranks/<rank>/`,
    /// claimed with an exclusive `mkdir` (the job's directories are shared by
    /// its ranks, on one filesystem or one per node). A second claim of one
    /// rank is refused: two ranks with one number, or a job id used again.
    pub(crate) fn create_rank(root: &Path, job: &str, rank: u32) -> Result<Self, Error> {
        let ranks = root.join(job).join(RANKS_DIR);
        std::fs::create_dir_all(&ranks).map_err(|e| io_error(&ranks, "create the job's ranks directory", &e))?;
        let path = ranks.join(rank.to_string());
        match std::fs::create_dir(&path) {
            Ok(()) => Ok(RunDir { path, run_id: format!("{job}-rank{rank}") }),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(Error::usage(format!(
                "{} exists: rank {rank} of job {job} already has a run directory",
                path.display()
            ))
            .with_hint("two ranks with one number, or a job id used again: pass --run-id with a new name")),
            Err(e) => Err(io_error(&path, "create the rank's run directory", &e)),
        }
    }

    /// A run directory at a path the user chose (`import -o DIR`): created if
    /// needed, or an existing run directory (an import adds to it), or an empty
    /// directory. Anything else is refused: its files are the user's.
    ///
    /// Two imports that race to create one new directory: the first holds its
    /// lock while it writes the manifest, so a directory with llmperf's lock
    /// file and no manifest yet is waited for (the lock), then looked at again.
    pub(crate) fn create_at(path: &Path) -> Result<Self, Error> {
        let run_id = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        if path.join(LOCK_FILE).is_file() && !path.join(MANIFEST_JSON).is_file() {
            drop(RunDir { path: path.to_path_buf(), run_id: run_id.clone() }.lock()?);
        }
        if path.exists() && !path.join(MANIFEST_JSON).is_file() {
            let entries = std::fs::read_dir(path).map_err(|e| io_error(path, "read", &e))?;
            // Only llmperf's own lock and temporaries: an import that failed before its manifest.
            let theirs =
                entries.flatten().filter(|e| !e.file_name().to_string_lossy().starts_with(".llmperf-")).count();
            if theirs > 0 {
                return Err(Error::usage(format!(
                    "{} exists and is not a run directory (no {MANIFEST_JSON}): llmperf would write over its files",
                    path.display()
                ))
                .with_hint("name a new or empty directory with -o, or a run directory to add to"));
            }
        }
        std::fs::create_dir_all(path).map_err(|e| io_error(path, "create", &e))?;
        Ok(RunDir { path: path.to_path_buf(), run_id })
    }

    /// Hold the run directory against other llmperf processes (an advisory
    /// `flock` on `.llmperf-lock`) until the guard drops: two imports into one
    /// directory take turns, so neither loses the other's manifest stages.
    pub(crate) fn lock(&self) -> Result<Lock, Error> {
        use std::os::fd::AsRawFd;
        let path = self.join(LOCK_FILE);
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| io_error(&path, "open the lock file", &e))?;
        // SAFETY: flock(2) on a descriptor we own.
        let try_lock = || unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0;
        if !try_lock() {
            tracing::info!("waiting for another llmperf using {}", self.path.display());
            // SAFETY: as above; blocks until the other process is done.
            if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX) } != 0 {
                return Err(io_error(&path, "lock", &std::io::Error::last_os_error()));
            }
        }
        self.remove_stale_temporaries();
        Ok(Lock { _file: file })
    }

    /// Temporaries of atomic writes (`.llmperf-*.tmp`) that a killed llmperf
    /// left (a SIGKILLed import left a 6 MB one that every later import kept).
    /// Called with the lock held, so no import writes them now; one written
    /// in the last minute is left alone in case a `profile` (which holds no
    /// lock) is writing it.
    fn remove_stale_temporaries(&self) {
        fn walk(dir: &Path, depth: usize) {
            let Ok(entries) = std::fs::read_dir(dir) else { return };
            for e in entries.flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                let Ok(kind) = e.file_type() else { continue };
                if kind.is_dir() && depth < 4 {
                    walk(&e.path(), depth + 1);
                } else if kind.is_file() && name.starts_with(".llmperf-") && name.ends_with(".tmp") {
                    let old = e
                        .metadata()
                        .and_then(|m| m.modified())
                        .is_ok_and(|t| t.elapsed().is_ok_and(|age| age > std::time::Duration::from_secs(60)));
                    if old && std::fs::remove_file(e.path()).is_ok() {
                        tracing::info!("removed {}, a temporary file a stopped llmperf left", e.path().display());
                    }
                }
            }
        }
        walk(&self.path, 0);
    }

    /// Hold [`RESERVE_BYTES`] of the disk for the manifest's last write. The
    /// bytes are not a run of zeros, which a compressing file system would
    /// not store.
    pub(crate) fn reserve(&self) -> Result<(), Error> {
        let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
        let bytes: Vec<u8> = (0..RESERVE_BYTES)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let path = self.join(RESERVE_FILE);
        std::fs::write(&path, bytes).map_err(|e| {
            let _ = std::fs::remove_file(&path);
            io_error(&path, &format!("reserve {} KiB for the manifest in", RESERVE_BYTES >> 10), &e)
        })
    }

    /// Give the reserved space back (before the manifest's last write).
    pub(crate) fn release_reserve(&self) {
        let _ = std::fs::remove_file(self.join(RESERVE_FILE));
    }

    /// An existing run directory (for `report` and `validate`).
    pub fn open(path: &Path) -> Result<Self, Error> {
        let manifest = path.join(MANIFEST_JSON);
        if let Ok(kind) = std::fs::metadata(&manifest).map(|m| m.file_type()) {
            if !kind.is_file() {
                return Err(damaged(&manifest, &format!("it is {}, not a regular file", kind_name(kind))));
            }
        }
        if !manifest.is_file() {
            return Err(Error::usage(format!("{} is not a run directory (no {MANIFEST_JSON})", path.display()))
                .with_hint("pass a directory created by `llmperf profile`, e.g. tmp/profile-output/<run_id>"));
        }
        let run_id = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        Ok(RunDir { path: path.to_path_buf(), run_id })
    }

    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    pub(crate) fn run_id(&self) -> &str {
        &self.run_id
    }

    pub(crate) fn join(&self, rel: &str) -> PathBuf {
        self.path.join(rel)
    }

    /// `p` relative to the run directory, as manifests record artifacts.
    pub(crate) fn relative(&self, p: &Path) -> String {
        let p = absolute(p);
        p.strip_prefix(absolute(&self.path)).unwrap_or(&p).display().to_string()
    }

    /// Create a sub-directory (`nsys`, `ncu`, ...) and return its path.
    pub(crate) fn subdir(&self, rel: &str) -> Result<PathBuf, Error> {
        let dir = self.join(rel);
        std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, "create", &e))?;
        Ok(dir)
    }

    pub(crate) fn write(&self, rel: &str, bytes: &[u8]) -> Result<PathBuf, Error> {
        let path = self.join(rel);
        write_atomic(&path, bytes)?;
        Ok(path)
    }

    pub(crate) fn write_json<T: Serialize>(&self, rel: &str, value: &T) -> Result<PathBuf, Error> {
        let path = self.join(rel);
        write_json_atomic(&path, value)?;
        Ok(path)
    }

    /// A JSON artifact of the run, if present and readable as `T`.
    pub(crate) fn read_json<T: serde::de::DeserializeOwned>(&self, rel: &str) -> Option<T> {
        read_json_file(&self.join(rel))
    }

    /// A JSON artifact of the run that a comparison needs: None when it is
    /// absent; an error naming the file when it is there but cannot be read
    /// as `T` (a directory in its place, a truncated copy, a number out of
    /// range). A gate that read such a file as "nothing" would pass.
    pub(crate) fn read_json_checked<T: serde::de::DeserializeOwned>(&self, rel: &str) -> Result<Option<T>, Error> {
        let path = self.join(rel);
        let text = match read_regular(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(damaged(&path, &e.to_string())),
        };
        serde_json::from_str(&text).map(Some).map_err(|e| damaged(&path, &e.to_string()))
    }

    /// Every file of the run directory, relative and sorted (temporaries of
    /// atomic writes left out).
    pub fn files(&self) -> Vec<String> {
        fn walk(dir: &Path, run: &RunDir, out: &mut Vec<String>) {
            let Ok(entries) = std::fs::read_dir(dir) else { return };
            for e in entries.flatten() {
                let p = e.path();
                if p.is_dir() {
                    walk(&p, run, out);
                } else if !e.file_name().to_string_lossy().starts_with(".llmperf-") {
                    out.push(run.relative(&p));
                }
            }
        }
        let mut out = Vec::new();
        walk(&self.path, self, &mut out);
        out.sort();
        out
    }

    pub(crate) fn write_yaml<T: Serialize>(&self, rel: &str, value: &T) -> Result<PathBuf, Error> {
        let text = serde_yaml::to_string(value)
            .map_err(|e| Error::new(ErrorKind::Internal, format!("serializing {rel}: {e}")))?;
        self.write(rel, text.as_bytes())
    }
}

/// Directory names for region names, in order: only `[A-Za-z0-9._-]` (`::`
/// becomes `__`, anything else `_`), no leading dot (so never `.` or `..`), at
/// most 80 bytes, and unique without regard to case (`-2`, `-3`, ... on a
/// collision). The original names stay in the JSON.
pub fn sanitize_names<'a>(names: impl IntoIterator<Item = &'a str>) -> Vec<String> {
    let mut taken = std::collections::HashSet::new();
    names
        .into_iter()
        .map(|name| {
            let base = sanitize_one(name);
            let mut candidate = base.clone();
            let mut n = 1;
            while !taken.insert(candidate.to_ascii_lowercase()) {
                n += 1;
                candidate = format!("{base}-{n}");
            }
            candidate
        })
        .collect()
}

fn sanitize_one(name: &str) -> String {
    let mut s: String = name
        .replace("::", "__")
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' })
        .collect();
    while s.starts_with('.') {
        s.replace_range(..1, "_");
    }
    s.truncate(80);
    if s.is_empty() {
        s.push_str("region");
    }
    s
}

/// `p` made absolute (for paths handed to child processes), or `p` as is.
pub(crate) fn absolute(p: &Path) -> PathBuf {
    std::path::absolute(p).unwrap_or_else(|_| p.to_path_buf())
}

/// A JSON file, if present and readable as `T`.
pub(crate) fn read_json_file<T: serde::de::DeserializeOwned>(path: &Path) -> Option<T> {
    serde_json::from_str(&read_regular(path).ok()?).ok()
}

/// A file's text, only if it is a regular file: opened without blocking and
/// checked, so that a FIFO (or a device) left where a run's file belongs is
/// an error naming what it is, never a read that waits for ever.
pub(crate) fn read_regular(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let kind = file.metadata()?.file_type();
    if !kind.is_file() {
        return Err(std::io::Error::other(format!("it is {}, not a regular file", kind_name(kind))));
    }
    let mut text = String::new();
    file.read_to_string(&mut text)?;
    Ok(text)
}

/// What a file that is not a regular file is, in words.
fn kind_name(kind: std::fs::FileType) -> &'static str {
    use std::os::unix::fs::FileTypeExt;
    if kind.is_fifo() {
        "a FIFO"
    } else if kind.is_dir() {
        "a directory"
    } else if kind.is_socket() {
        "a socket"
    } else {
        "a device"
    }
}

/// Write `bytes` to `path` through a temporary sibling and a rename.
pub(crate) fn write_atomic(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    write_atomic_with(path, |out| out.write_all(bytes))
}

/// Write what `fill` writes to `path` through a temporary sibling, synced,
/// and a rename: `path` is whole or untouched.
fn write_atomic_with(path: &Path, fill: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>) -> Result<(), Error> {
    let dir = path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::create_dir_all(dir).map_err(|e| io_error(dir, "create", &e))?;
    let mut tmp = tempfile::Builder::new()
        .prefix(".llmperf-")
        .suffix(".tmp")
        // Artifacts are for sharing: not tempfile's private 0600.
        .permissions(std::os::unix::fs::PermissionsExt::from_mode(0o644))
        .tempfile_in(dir)
        .map_err(|e| io_error(dir, "create a temporary file in", &e))?;
    fill(tmp.as_file_mut()).map_err(|e| io_error(path, "write", &e))?;
    tmp.as_file().sync_all().map_err(|e| io_error(path, "sync", &e))?;
    tmp.persist(path).map_err(|e| io_error(path, "rename into", &e.error))?;
    Ok(())
}

/// A run directory's artifact that is there but unreadable.
pub(crate) fn damaged(path: &Path, why: &str) -> Error {
    Error::new(ErrorKind::Unparseable, format!("{}: {why}", path.display())).with_hint(
        "the run directory is damaged or incomplete (a partial copy?): copy it again, or rebuild its reports with `llmperf report DIR`",
    )
}

/// A run file of a schema this llmperf does not read (`llmperf.x/999`).
pub(crate) fn unknown_schema(path: &Path, found: &str, known: &str) -> Error {
    Error::new(ErrorKind::Unparseable, format!("{}: schema {found:?}, and this llmperf reads {known:?}", path.display()))
        .with_hint("another llmperf version wrote it: rebuild the run's reports with this one (`llmperf report DIR`), or use the llmperf that wrote it")
}

pub(crate) fn io_error(path: &Path, what: &str, e: &std::io::Error) -> Error {
    Error::new(ErrorKind::Internal, format!("cannot {what} {}: {e}", path.display())).with_hint(
        "check that the directory is writable and the disk is not full (-o/--output-root picks another place)",
    )
}

/// A file outside any run directory that the user named (`--junit FILE`).
/// A path that is (or links to) something other than a regular file, such
/// as `/dev/stdout`, `/dev/null`, a terminal or a FIFO, is written in place:
/// renaming over it would replace a device node with a file. A FIFO with no
/// reader is refused, not waited on. A link to a regular file is refused:
/// writing through it would change a file the user did not name, and
/// replacing it would remove their link. Otherwise the text goes to a
/// temporary file beside the path and is renamed over it, so that a reader
/// never sees half a file.
pub(crate) fn write_new_file(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    let link = std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if link && std::fs::metadata(path).is_ok_and(|m| m.is_file()) {
        let target = std::fs::read_link(path).map(|t| t.display().to_string()).unwrap_or_default();
        return Err(Error::usage(format!(
            "{} is a symbolic link to the file {target}: llmperf neither writes through a link nor replaces it",
            path.display()
        ))
        .with_hint("name the file itself, or a new path"));
    }
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() && !m.is_dir() => write_in_place(path, bytes),
        Ok(m) if m.is_dir() => Err(Error::usage(format!("{} is a directory", path.display()))
            .with_hint("name a file to write, e.g. --junit check.xml")),
        _ => write_atomic(path, bytes),
    }
}

/// Write to a device, FIFO or socket that exists, without creating or renaming anything.
fn write_in_place(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let file = std::fs::OpenOptions::new().write(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(|e| {
        if e.raw_os_error() == Some(libc::ENXIO) {
            Error::usage(format!("{} is a FIFO that no one reads", path.display()))
                .with_hint("start the reader first, or name a regular file")
        } else {
            io_error(path, "open", &e)
        }
    })?;
    // Blocking again: a pipe that fills is waited on, not an error.
    // SAFETY: fcntl on a descriptor this function owns.
    unsafe {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&file);
        libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) & !libc::O_NONBLOCK);
    }
    (&file).write_all(bytes).map_err(|e| io_error(path, "write", &e))
}

/// Append to a file a CI system gave us (`$GITHUB_STEP_SUMMARY`): opened
/// without blocking, so that a FIFO nobody reads is an error (as for
/// `--junit`), not a wait for ever.
pub(crate) fn append(path: &Path, bytes: &[u8]) -> Result<(), Error> {
    use std::os::unix::fs::OpenOptionsExt;
    let f = std::fs::OpenOptions::new().append(true).create(true).custom_flags(libc::O_NONBLOCK).open(path).map_err(
        |e| {
            if e.raw_os_error() == Some(libc::ENXIO) {
                Error::usage(format!("{} is a FIFO that no one reads", path.display()))
                    .with_hint("start the reader first, or name a regular file (GITHUB_STEP_SUMMARY)")
            } else {
                io_error(path, "open", &e)
            }
        },
    )?;
    // SAFETY: fcntl on a descriptor this function owns; blocking again: a pipe that fills is waited on.
    unsafe {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&f);
        libc::fcntl(fd, libc::F_SETFL, libc::fcntl(fd, libc::F_GETFL) & !libc::O_NONBLOCK);
    }
    (&f).write_all(bytes).map_err(|e| io_error(path, "append to", &e))
}

/// `value` as pretty JSON with a final newline, written through [`write_atomic`].
pub(crate) fn write_json_atomic<T: Serialize>(path: &Path, value: &T) -> Result<(), Error> {
    // Streamed into the file: a large artifact (samples.json: ~10 MB at 1M
    // ranges) is never held whole in memory. The bytes are to_string_pretty's.
    write_atomic_with(path, |out| {
        let mut out = std::io::BufWriter::with_capacity(1 << 16, out);
        serde_json::to_writer_pretty(&mut out, value).map_err(|e| {
            if e.is_io() {
                std::io::Error::from(e)
            } else {
                std::io::Error::other(format!("serializing: {e}"))
            }
        })?;
        out.write_all(b"\n")?;
        out.flush()
    })
}

/// `20261122T130558Z`: sortable, no characters a shell or a file system dislikes.
pub(crate) fn utc_compact(t: std::time::SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string().replace(['-', ':'], "")
}

/// RFC 3339 UTC with milliseconds, for manifests.
pub(crate) fn utc_now() -> String {
    humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string()
}

fn random_suffix() -> String {
    let mut bytes = [0u8; 3];
    let ok =
        std::fs::File::open("/dev/urandom").and_then(|mut f| std::io::Read::read_exact(&mut f, &mut bytes)).is_ok();
    if !ok {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or_default();
        bytes = (nanos ^ std::process::id()).to_le_bytes()[..3].try_into().expect("3 bytes");
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The input, kept in the run directory as a copy of its own: written under a
/// temporary name and renamed into place, so that nothing in the run directory
/// ever shares an inode with the user's file (a hard link would, and a later
/// write through it would change the user's file). `std::io::copy` between
/// two files uses copy_file_range, which clones the blocks on file systems that
/// can (btrfs, XFS). It writes through the temporary file's own handle: opening
/// it again with O_TRUNC (as `std::fs::copy` does) makes ext4 flush the whole
/// file to disk at close (its `auto_da_alloc`), 0.1 s per 500 MB for nothing.
pub(crate) fn keep_input(file: &Path, to: &Path) -> Result<(), Error> {
    let dir = to.parent().unwrap_or(Path::new("."));
    let failed = |e: std::io::Error| {
        Error::new(ErrorKind::Internal, format!("cannot copy {} to {}: {e}", file.display(), to.display()))
            .with_hint("check that the output directory is writable and has room for the input")
    };
    let mut tmp = tempfile::Builder::new().prefix(".llmperf-").suffix(".tmp").tempfile_in(dir).map_err(failed)?;
    let mut from = std::fs::File::open(file).map_err(failed)?;
    std::io::copy(&mut from, tmp.as_file_mut()).map_err(failed)?;
    std::fs::set_permissions(tmp.path(), std::os::unix::fs::PermissionsExt::from_mode(0o644)).map_err(failed)?;
    tmp.persist(to).map_err(|e| failed(e.error))?;
    Ok(())
}

/// `launcher/ranks/<pid>.json`: one process of a job started by `profile
/// --launcher torchrun|mpirun`, and the rank its launcher gave it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct LaunchedRank {
    pub(crate) rank: u32,
    pub(crate) rank_from: String,
    pub(crate) world_size: Option<u32>,
    pub(crate) process_id: i64,
    pub(crate) host: String,
}

/// The ranks `llmperf launch-rank` recorded in `dir` (`<pid>.json` each), by rank.
pub(crate) fn read_launched(dir: &Path) -> Vec<LaunchedRank> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut v: Vec<LaunchedRank> = entries.flatten().filter_map(|e| read_json_file(&e.path())).collect();
    v.sort_by_key(|r| (r.rank, r.process_id));
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `profile -o RUN` (a run directory, as `import -o` takes): refused, naming the parent.
    #[test]
    fn an_output_root_that_is_a_run_directory_is_refused() {
        let root = tempfile::tempdir().unwrap();
        let run = RunDir::create(root.path()).unwrap();
        std::fs::write(run.join(MANIFEST_JSON), "{}").unwrap();
        let Err(e) = RunDir::create(run.path()) else { panic!("a run directory as -o is refused") };
        assert_eq!(e.kind, ErrorKind::Usage);
        assert!(e.message.contains("is a run directory"), "{}", e.message);
        assert!(e.hint.unwrap().contains(&format!("-o {}", root.path().display())));
        assert_eq!(std::fs::read_dir(run.path()).unwrap().count(), 1, "nothing created inside");
    }

    #[test]
    fn run_ids_are_unique_under_concurrent_creation() {
        let root = tempfile::tempdir().unwrap();
        let root_path = root.path().to_path_buf();
        let handles: Vec<_> = (0..8)
            .map(|_| {
                let root = root_path.clone();
                std::thread::spawn(move || (0..25).map(|_| RunDir::create(&root).unwrap().run_id).collect::<Vec<_>>())
            })
            .collect();
        let mut ids: Vec<String> = handles.into_iter().flat_map(|h| h.join().unwrap()).collect();
        let n = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), n);
        assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), n);
        let id = &ids[0];
        assert!(regex::Regex::new(r"^\d{8}T\d{6}Z-[0-9a-f]{6}$").unwrap().is_match(id), "{id}");
    }

    #[test]
    fn atomic_write_replaces_whole_file_and_leaves_no_temporaries() {
        let root = tempfile::tempdir().unwrap();
        let run = RunDir::create(root.path()).unwrap();
        run.write("a/b.txt", b"first version, longer").unwrap();
        run.write("a/b.txt", b"second").unwrap();
        assert_eq!(std::fs::read(run.join("a/b.txt")).unwrap(), b"second");
        let names: Vec<_> = std::fs::read_dir(run.join("a")).unwrap().map(|e| e.unwrap().file_name()).collect();
        assert_eq!(names, ["b.txt"]);
    }

    #[test]
    fn region_names_become_safe_unique_directory_names() {
        let long = "x".repeat(300);
        let names =
            ["A", "A::A1", "..", "../etc/passwd", "a", "a/b", "a_b", "", "(unattributed)", long.as_str(), "名前"];
        let dirs = sanitize_names(names);
        assert_eq!(dirs[..9], ["A", "A__A1", "_.", "_._etc_passwd", "a-2", "a_b", "a_b-2", "region", "_unattributed_"]);
        assert_eq!(dirs[9].len(), 80);
        assert_eq!(dirs[10], "__");
        for d in &dirs {
            assert!(!d.contains('/') && !d.starts_with('.') && !d.is_empty(), "{d}");
        }
        let unique: std::collections::HashSet<_> = dirs.iter().map(|d| d.to_lowercase()).collect();
        assert_eq!(unique.len(), dirs.len());
    }

    #[test]
    fn open_refuses_a_directory_without_manifest() {
        let dir = tempfile::tempdir().unwrap();
        let err = RunDir::open(dir.path()).unwrap_err();
        assert!(err.message.contains("not a run directory"));
    }
}
