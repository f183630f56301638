//! profile: finding nsys / ncu and what their versions can do.
//!
//! Versions are probed (`--version`), never assumed: flags and report names
//! changed across releases (NVIDIA's release notes; docs/internals.md).
use std::fmt;
use std::path::PathBuf;
use std::time::Duration;

use crate::error::{Error, ErrorKind};
use crate::process::{self, Sink, Spawn};

const PROBE_TIMEOUT: Duration = Duration::from_secs(60);

/// The fix for `ERR_NVGPUCTRPERM` (no permission to read GPU performance counters).
pub(crate) const COUNTER_PERMISSION_HINT: &str = "run llmperf as root, or allow all users: echo 'options nvidia NVreg_RestrictProfilingToAdminUsers=0' | sudo tee /etc/modprobe.d/nvidia-profiling.conf, then reboot (https://developer.nvidia.com/ERR_NVGPUCTRPERM)";

/// A `YEAR.MINOR.PATCH` Nsight version.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
pub(crate) struct Version {
    pub(crate) year: u32,
    pub(crate) minor: u32,
    pub(crate) patch: u32,
}

impl Version {
    pub(crate) const fn new(year: u32, minor: u32, patch: u32) -> Self {
        Version { year, minor, patch }
    }

    /// The first `YYYY.M[.P...]` in `text`.
    pub(crate) fn find_in(text: &str) -> Option<Version> {
        let re = regex::Regex::new(r"\b(20\d\d)\.(\d+)(?:\.(\d+))?").expect("valid regex");
        let c = re.captures(text)?;
        let num = |i: usize| c.get(i).map_or(Some(0), |m| m.as_str().parse().ok());
        Some(Version { year: num(1)?, minor: num(2)?, patch: num(3)? })
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}.{}", self.year, self.minor, self.patch)
    }
}

/// How much of a report is searched for the version that wrote it, at most:
/// it is read only after the tool failed on the report.
const WRITER_SCAN: u64 = 1 << 30;

/// The version of the nsys or ncu that wrote a report, from the strings it
/// carries: an `.nsys-rep` names its install
/// path (`nsight-systems-2023.1.2/…`) or its build (`2025.1.1.110-2511354`),
/// an `.ncu-rep` its build (`2025.3.1.0 (build 36398880)`, 80 KiB to 2 MiB
/// into the corpus's reports). The first found counts; None when there is
/// none (a `.qdrep`, a file that is no report) in the first [`WRITER_SCAN`] bytes.
pub(crate) fn report_writer(path: &std::path::Path, kind: Kind) -> Option<Version> {
    use std::io::Read;
    let pattern = match kind {
        Kind::Nsys => r"nsight-systems-(20\d\d)\.(\d+)\.(\d+)|\b(20\d\d)\.(\d+)\.(\d+)\.\d+-\d{7}",
        Kind::Ncu => r"\b(20\d\d)\.(\d+)\.(\d+)\.\d+ \(build \d+\)",
    };
    let re = regex::bytes::Regex::new(pattern).expect("valid regex");
    let mut f = std::fs::File::open(path).ok()?.take(WRITER_SCAN);
    // Chunks that overlap by more than the longest match, so none is cut in two.
    const CHUNK: usize = 1 << 20;
    const OVERLAP: usize = 64;
    let mut buf = vec![0u8; CHUNK + OVERLAP];
    let mut kept = 0;
    loop {
        let n = f.read(&mut buf[kept..]).ok()?;
        if n == 0 {
            return None;
        }
        let filled = kept + n;
        if let Some(c) = re.captures(&buf[..filled]) {
            let nums: Vec<u32> = c
                .iter()
                .skip(1)
                .flatten()
                .filter_map(|m| std::str::from_utf8(m.as_bytes()).ok()?.parse().ok())
                .collect();
            return (nums.len() == 3).then(|| Version::new(nums[0], nums[1], nums[2]));
        }
        kept = OVERLAP.min(filled);
        buf.copy_within(filled - kept..filled, 0);
    }
}

/// A report written by a newer `tool` than this one: the error that says so,
/// with the command that reads it (exit 5, as a failed profiler stage).
pub(crate) fn too_new(path: &std::path::Path, kind: Kind, tool: &Tool) -> Option<Error> {
    let writer = report_writer(path, kind).filter(|v| *v > tool.version)?;
    let (name, render) = match kind {
        Kind::Nsys => ("nsys", format!("nsys export --type sqlite -o R.sqlite {}", path.display())),
        Kind::Ncu => ("ncu", format!("ncu --import {} --csv --page raw --print-units base > R.csv", path.display())),
    };
    Some(
        Error::new(
            ErrorKind::StageFailed,
            format!(
                "{} was written by {name} {writer}; this {name} is {} ({})",
                path.display(),
                tool.version,
                tool.path.display()
            ),
        )
        .with_hint(format!(
            "render it with {name} {writer} or newer: `{render}`, then `llmperf import {name} R.{}`",
            if kind == Kind::Nsys { "sqlite" } else { "csv" }
        )),
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Kind {
    Nsys,
    Ncu,
}

impl Kind {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Nsys => "nsys",
            Kind::Ncu => "ncu",
        }
    }

    pub(crate) fn install_hint(self) -> &'static str {
        match self {
            Kind::Nsys => "install Nsight Systems (scripts/setup.sh does it on Debian hosts without an NVIDIA driver; on GPU hosts use NVIDIA's CUDA toolkit) or set pipeline.nsys.executable, or pass --no-nsys",
            Kind::Ncu => "install Nsight Compute (scripts/setup.sh does it on Debian hosts without an NVIDIA driver; on GPU hosts use NVIDIA's CUDA toolkit) or set pipeline.ncu.executable, or pass --no-ncu",
        }
    }
}

/// The profilers of a run, probed once, before the run is planned, with
/// what the plan asks of them: the plan and env.json read these values, and
/// no stage probes again.
pub(crate) struct Probed {
    pub(crate) nsys: Result<Tool, Error>,
    pub(crate) ncu: Result<Tool, Error>,
    /// nsys has `--cuda-graph-trace` (asked only where the configuration
    /// leaves it to `auto`).
    pub(crate) nsys_graph_trace: bool,
}

impl Probed {
    /// Both at once: each `--version` takes ~20 ms, which a profile run pays
    /// before its workload starts (bench/profile_overhead.sh). With ncu
    /// enabled, its `--help` too: the plan checks the flags against it.
    pub(crate) fn probe(cfg: &crate::config::Config) -> Self {
        std::thread::scope(|s| {
            let ncu = s.spawn(|| {
                let tool = Tool::probe(Kind::Ncu, &cfg.pipeline.ncu.executable)?;
                if cfg.pipeline.ncu.enable {
                    tool.help_text();
                }
                Ok(tool)
            });
            let nsys = Tool::probe(Kind::Nsys, &cfg.pipeline.nsys.executable);
            let auto = cfg.pipeline.nsys.cuda_graph_trace == Some(crate::config::schema::CudaGraphTrace::Auto);
            let nsys_graph_trace = auto && nsys.as_ref().is_ok_and(Tool::has_cuda_graph_trace);
            let ncu =
                ncu.join().unwrap_or_else(|_| Err(Error::new(ErrorKind::Internal, "probing ncu panicked".to_string())));
            Probed { nsys, ncu, nsys_graph_trace }
        })
    }
}

/// A located, version-probed profiler.
#[derive(Debug, Clone)]
pub(crate) struct Tool {
    pub(crate) path: PathBuf,
    pub(crate) version: Version,
    /// The `--version` output, trimmed, for provenance.
    pub(crate) version_text: String,
    /// `--help`, asked once (flag checks, then each pass's pages).
    pub(crate) help: std::sync::OnceLock<Option<String>>,
}

impl Tool {
    /// Locate `executable` (a name looked up on PATH, or a path) and probe its version.
    pub(crate) fn probe(kind: Kind, executable: &str) -> Result<Tool, Error> {
        let path = process::find_executable(executable).ok_or_else(|| {
            let given = std::path::Path::new(executable);
            // A path (not a name looked up on PATH) that is there but cannot be run.
            let why = match std::fs::metadata(given) {
                Ok(m) if executable.contains('/') && m.is_dir() => Some("is a directory"),
                Ok(m) if executable.contains('/') => {
                    use std::os::unix::fs::PermissionsExt;
                    (m.permissions().mode() & 0o111 == 0).then_some("is not executable")
                }
                Err(_) if executable.contains('/') => Some("does not exist"),
                _ => None,
            };
            match why {
                Some(why @ "does not exist") => Error::new(
                    ErrorKind::ProfilerUnavailable,
                    format!("{} not found: `{executable}` {why}", kind.name()),
                )
                .with_hint(kind.install_hint()),
                Some(why) => Error::new(
                    ErrorKind::ProfilerUnavailable,
                    format!("{} not found: `{executable}` {why}", kind.name()),
                )
                .with_hint(format!(
                    "point pipeline.{}.executable at the {} program itself (or a name on PATH)",
                    kind.name(),
                    kind.name()
                )),
                None => Error::new(
                    ErrorKind::ProfilerUnavailable,
                    format!("{} not found: `{executable}` is not on PATH", kind.name()),
                )
                .with_hint(kind.install_hint()),
            }
        })?;
        let spec = Spawn::new([path.as_os_str(), "--version".as_ref()])
            .stdout(Sink::Capture)
            .stderr(Sink::Capture)
            .timeout(Some(PROBE_TIMEOUT));
        let done = process::run(&spec)?;
        let text = String::from_utf8_lossy(&done.stdout).trim().to_string();
        let version = Version::find_in(&text).filter(|_| done.success()).ok_or_else(|| {
            Error::new(
                ErrorKind::ProfilerUnavailable,
                format!("`{} --version` ({}) printed no version: {text:?}", path.display(), done.describe()),
            )
            .with_hint(format!("check that {} is a working {} installation", path.display(), kind.name()))
        })?;
        Ok(Tool { path, version, version_text: text, help: Default::default() })
    }

    /// `<tool> --help`, to check flags against what this installation has;
    /// run once per tool. None when it does not answer (then nothing is
    /// refused up front).
    pub(crate) fn help_text(&self) -> Option<&str> {
        self.help
            .get_or_init(|| {
                let spec = Spawn::new([self.path.as_os_str(), "--help".as_ref()])
                    .stdout(Sink::Capture)
                    .stderr(Sink::Null)
                    .timeout(Some(PROBE_TIMEOUT));
                let done = process::run(&spec).ok()?;
                let text = String::from_utf8_lossy(&done.stdout).into_owned();
                (done.success() && text.contains("--")).then_some(text)
            })
            .as_deref()
    }

    /// nsys `--cuda-graph-trace`: listed by 2022.4's `nsys profile --help`
    /// (the oldest here); an older nsys is asked.
    pub(crate) fn has_cuda_graph_trace(&self) -> bool {
        if self.version >= Version::new(2022, 4, 0) {
            return true;
        }
        let spec = Spawn::new([self.path.as_os_str(), "profile".as_ref(), "--help".as_ref()])
            .stdout(Sink::Capture)
            .stderr(Sink::Null)
            .timeout(Some(PROBE_TIMEOUT));
        process::run(&spec).is_ok_and(|done| String::from_utf8_lossy(&done.stdout).contains("--cuda-graph-trace"))
    }

    /// ncu `--replay-mode range` (2022.1+).
    pub(crate) fn has_range_replay(&self) -> bool {
        self.version >= Version::new(2022, 1, 0)
    }

    /// ncu `--replay-mode app-range` (2023.1+).
    pub(crate) fn has_app_range_replay(&self) -> bool {
        self.version >= Version::new(2023, 1, 0)
    }

    /// ncu `--import ... --page session`, where its `--help` lists that page.
    pub(crate) fn has_session_page(&self) -> bool {
        self.help_text().is_some_and(|h| h.contains("session:"))
    }

    /// ncu `--print-metric-name` (2022.4+).
    pub(crate) fn has_print_metric_name(&self) -> bool {
        self.version >= Version::new(2022, 4, 0)
    }

    /// nsys report names: `cuda_gpu_kern_sum` (2023.1+) or `gpukernsum` (older).
    pub(crate) fn has_new_report_names(&self) -> bool {
        self.version >= Version::new(2023, 1, 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_from_real_banners() {
        // Verbatim `--version` output of the Debian packages installed by setup.sh.
        let nsys = "NVIDIA Nsight Systems version 2022.4.2.1-df9881f";
        let ncu = "NVIDIA (R) Nsight Compute Command Line Profiler\nCopyright (c) 2018-2022 NVIDIA Corporation\nVersion 2022.3.0.0 (build 31729285) (public-release)";
        assert_eq!(Version::find_in(nsys), Some(Version::new(2022, 4, 2)));
        assert_eq!(Version::find_in(ncu), Some(Version::new(2022, 3, 0)));
        assert_eq!(Version::find_in("no version here"), None);
    }

    #[test]
    fn capabilities_follow_versions() {
        let tool = |v| Tool { path: "ncu".into(), version: v, version_text: String::new(), help: Default::default() };
        let old = tool(Version::new(2021, 3, 0));
        let here = tool(Version::new(2022, 3, 0));
        let new = tool(Version::new(2023, 1, 1));
        assert!(!old.has_range_replay() && here.has_range_replay());
        assert!(!here.has_app_range_replay() && new.has_app_range_replay());
        assert!(!here.has_print_metric_name() && new.has_print_metric_name());
        assert!(!here.has_new_report_names() && new.has_new_report_names());
    }

    #[test]
    fn missing_tool_is_profiler_unavailable_with_hint() {
        let err = Tool::probe(Kind::Ncu, "llmperf-no-such-ncu").unwrap_err();
        assert_eq!(err.kind, ErrorKind::ProfilerUnavailable);
        assert!(err.hint.unwrap().contains("--no-ncu"));
    }
}
