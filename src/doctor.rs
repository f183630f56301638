//! `llmperf doctor`: can this machine run llmperf, and what is missing.
//! FAIL means the default profile cannot run; WARN means a feature is
//! unavailable here (e.g. no GPU) and says how to get it.
use std::fmt::Write;

use crate::config::Config;
use crate::profile::tools::{Kind, Tool, COUNTER_PERMISSION_HINT};
use crate::provenance::host::{self, CounterAccess};
use crate::provenance::libtorch;

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum Level {
    Ok,
    Warn,
    Fail,
}

#[derive(Debug, Clone)]
pub(crate) struct Check {
    pub(crate) name: &'static str,
    pub(crate) level: Level,
    pub(crate) detail: String,
    pub(crate) hint: Option<String>,
}

fn check(name: &'static str, level: Level, detail: impl Into<String>, hint: Option<String>) -> Check {
    Check { name, level, detail: detail.into(), hint }
}

pub(crate) fn run(cfg: &Config) -> Vec<Check> {
    let mut checks = Vec::new();
    let nsys = Tool::probe(Kind::Nsys, &cfg.pipeline.nsys.executable);
    checks.push(tool_check("nsys", &nsys, cfg.pipeline.nsys.enable));
    if let Ok(t) = &nsys {
        let names = if t.has_new_report_names() {
            "new (cuda_gpu_kern_sum, nvtx_sum)"
        } else {
            "pre-2023 (gpukernsum, nvtxsum)"
        };
        checks.push(check("nsys report names", Level::Ok, names, None));
    }
    let ncu = Tool::probe(Kind::Ncu, &cfg.pipeline.ncu.executable);
    checks.push(tool_check("ncu", &ncu, cfg.pipeline.ncu.enable));
    if let Ok(t) = &ncu {
        checks.extend(ncu_capabilities(t));
    }
    checks.push(gpu_check());
    checks.push(counter_check());
    checks.extend(libtorch_checks());
    checks.push(torch_tracer_check(nsys.is_ok()));
    checks
}

/// `--tracer torch`: whether `python3` on PATH imports torch, and whether its
/// profiler would record CUDA as well as CPU activity. A WARN: nsys is the
/// default tracer; without nsys it is the only one, and said so.
fn torch_tracer_check(nsys: bool) -> Check {
    const NAME: &str = "torch tracer";
    // Not from the working directory: a folder named `torch` there (this
    // repository's plugin crate) would import as an empty namespace package.
    let probe = "import sys; sys.path = [p for p in sys.path if p not in ('', '.')]\n\
                 import torch, torch.profiler; print(torch.__version__, int(torch.cuda.is_available()))";
    let Some(python) = crate::process::find_executable("python3") else {
        return check(
            NAME,
            Level::Warn,
            "no python3 on PATH",
            Some("--tracer torch runs a Python program that imports torch".into()),
        );
    };
    let spec = crate::process::Spawn::new([python.as_os_str(), "-c".as_ref(), probe.as_ref()])
        .stdout(crate::process::Sink::Capture)
        .stderr(crate::process::Sink::Capture)
        .timeout(Some(std::time::Duration::from_secs(120)));
    let install = if nsys {
        "install PyTorch into the Python that runs your program to profile it with --tracer torch".to_string()
    } else {
        "without nsys, --tracer torch is the timeline tracer here: install PyTorch into the Python that runs your program".to_string()
    };
    let done = match crate::process::run(&spec) {
        Ok(done) => done,
        Err(e) => {
            return check(NAME, Level::Warn, format!("{} did not run: {}", python.display(), e.message), Some(install))
        }
    };
    let said = String::from_utf8_lossy(&done.stdout).trim().to_string();
    match (done.success(), said.split_once(' ')) {
        (true, Some((version, cuda))) => {
            let activities =
                if cuda == "1" { "CPU and CUDA activity" } else { "CPU activity only (torch sees no CUDA device)" };
            let hint = (!nsys).then(|| "nsys is missing: profile a Python program with --tracer torch".to_string());
            check(NAME, Level::Ok, format!("torch {version} in {}: {activities}", python.display()), hint)
        }
        _ => {
            let stderr = String::from_utf8_lossy(&done.stderr);
            let why = stderr.lines().rev().find(|l| !l.trim().is_empty()).unwrap_or("no output").trim().to_string();
            check(NAME, Level::Warn, format!("{} cannot import torch ({why})", python.display()), Some(install))
        }
    }
}

fn tool_check(name: &'static str, tool: &Result<Tool, crate::error::Error>, enabled: bool) -> Check {
    match tool {
        Ok(t) => check(name, Level::Ok, format!("{} ({})", t.version, t.path.display()), None),
        Err(e) => {
            let level = if enabled { Level::Fail } else { Level::Warn };
            let disabled = if enabled { "" } else { " (disabled by default)" };
            check(name, level, format!("{}{disabled}", e.message), e.hint.clone())
        }
    }
}

fn ncu_capabilities(t: &Tool) -> Vec<Check> {
    let cap = |name, ok: bool, since: &str, fallback: &str| {
        if ok {
            check(name, Level::Ok, format!("available in {}", t.version), None)
        } else {
            check(name, Level::Warn, format!("not in ncu {} (needs {since})", t.version), Some(fallback.to_string()))
        }
    };
    vec![
        cap(
            "ncu range replay",
            t.has_range_replay(),
            "2022.1",
            "use --replay-mode kernel with NVTX filters, or install a newer Nsight Compute",
        ),
        cap(
            "ncu app-range replay",
            t.has_app_range_replay(),
            "2023.1",
            "use --replay-mode range or kernel, or install Nsight Compute 2023.1+",
        ),
        cap(
            "ncu --print-metric-name",
            t.has_print_metric_name(),
            "2022.4",
            "metrics are matched by their labels instead; nothing to do",
        ),
    ]
}

fn gpu_check() -> Check {
    let gpus = host::gpus();
    if gpus.devices.is_empty() {
        let note = gpus.note.unwrap_or_else(|| "no devices".into());
        return check(
            "GPU",
            Level::Warn,
            format!("no NVIDIA GPU: {note}"),
            Some("workloads run on CPU; CUDA kernels and ncu counters need an NVIDIA GPU and driver".into()),
        );
    }
    let names: Vec<String> = gpus.devices.iter().map(|g| format!("{}: {}", g.index, g.name)).collect();
    let driver = &gpus.devices[0].driver_version;
    let cuda = gpus.driver_cuda_version.as_deref().unwrap_or("?");
    check("GPU", Level::Ok, format!("{} (driver {driver}, CUDA {cuda})", names.join(", ")), None)
}

fn counter_check() -> Check {
    match host::counter_access() {
        CounterAccess::NoDriver => check(
            "GPU counter permission",
            Level::Warn,
            "no NVIDIA kernel driver loaded (/proc/driver/nvidia absent)",
            Some("only matters for ncu on a GPU host".into()),
        ),
        CounterAccess::Everyone => check("GPU counter permission", Level::Ok, "all users may profile", None),
        CounterAccess::AdminOnly { is_root: true } => {
            check("GPU counter permission", Level::Ok, "restricted to admins; running as root", None)
        }
        CounterAccess::AdminOnly { is_root: false } => check(
            "GPU counter permission",
            Level::Warn,
            "RmProfilingAdminOnly=1: ncu will fail with ERR_NVGPUCTRPERM",
            Some(COUNTER_PERMISSION_HINT.into()),
        ),
    }
}

fn libtorch_checks() -> Vec<Check> {
    let lt = libtorch::info();
    if !lt.linked {
        let why = lt.error.clone().unwrap_or_else(|| "the workload plugin did not load".into());
        return vec![check(
            "libtorch",
            Level::Fail,
            format!("no built-in workloads: {why}"),
            libtorch::Libtorch::hint(),
        )];
    }
    let version = lt.version.clone().unwrap_or_else(|| "unknown version".into());
    let build = lt.cuda_build.as_deref().map_or("CPU-only build".to_string(), |c| format!("CUDA {c} build"));
    let dir = lt.lib_dir.clone().unwrap_or_default();
    let mut checks = vec![check("libtorch", Level::Ok, format!("{version}, {build} ({dir})"), None)];
    checks.push(match lt.cuda_available {
        Some(true) => check("CUDA in libtorch", Level::Ok, format!("{} device(s)", lt.cuda_device_count.unwrap_or(0)), None),
        _ => check(
            "CUDA in libtorch",
            Level::Warn,
            "libtorch sees no CUDA device",
            Some(match &lt.cuda_build {
                Some(c) => format!("on a GPU host, the driver must support CUDA {c} (torch 2.13 wheels need the 580 series or later), or set LIBTORCH to a libtorch built for your CUDA and rebuild"),
                None => "this libtorch is CPU-only: set LIBTORCH to a CUDA build and rebuild".into(),
            }),
        ),
    });
    checks
}

/// What a GPU runner needs working (`llmperf doctor --require-gpu`).
pub(crate) const GPU_RUNNER_CHECKS: [&str; 5] = ["nsys", "ncu", "GPU", "GPU counter permission", "CUDA in libtorch"];

/// `--require-gpu`: a WARN of [`GPU_RUNNER_CHECKS`] fails, so a CI job on a
/// GPU runner stops before it profiles a CPU by mistake.
pub(crate) fn require_gpu(checks: &mut [Check]) {
    for c in checks.iter_mut().filter(|c| GPU_RUNNER_CHECKS.contains(&c.name) && c.level == Level::Warn) {
        c.level = Level::Fail;
    }
}

/// The default profile can run when nothing FAILed.
pub(crate) fn ready(checks: &[Check]) -> bool {
    checks.iter().all(|c| c.level != Level::Fail)
}

pub(crate) fn render(checks: &[Check]) -> String {
    let width = checks.iter().map(|c| c.name.len()).max().unwrap_or(0);
    let mut out = String::new();
    for c in checks {
        let level = match c.level {
            Level::Ok => "OK",
            Level::Warn => "WARN",
            Level::Fail => "FAIL",
        };
        let _ = writeln!(out, "{level:<4}  {:<width$}  {}", c.name, c.detail);
        if let Some(h) = &c.hint {
            let _ = writeln!(out, "      {:<width$}  hint: {h}", "");
        }
    }
    let verdict = if ready(checks) {
        "ready: llmperf can run its default profile"
    } else {
        "not ready: fix the FAIL lines above"
    };
    let _ = writeln!(out, "\n{verdict}");
    out
}
