//! profile: Nsight Systems command lines (`nsys profile` from `pipeline.nsys`,
//! `nsys export`, `nsys stats`), where its application and agent run, and
//! what a hang looks like.
//!
//! nsys 2022.4 takes the application right after its options and refuses a
//! `--` separator ("option is ambiguous"), so the application must not start
//! with `-`.
use std::ffi::OsString;
use std::path::Path;

use crate::config::schema::{CaptureRange, CudaGraphTrace, NsysConfig, NsysSample};
use crate::error::Error;

/// The manifest's diagnosis of a capture nsys hung converting.
pub(crate) fn hang_diagnosis(attempt: u32, grace_s: u64) -> crate::manifest::Diagnosis {
    crate::manifest::Diagnosis {
        code: "nsys_postprocess_hang".into(),
        message: format!(
            "attempt {attempt}: the application exited but nsys did not finish within {grace_s} s; nsys and its agent were killed"
        ),
        hint: "a known Nsight Systems 2022.4 problem on some hosts (docs/internals.md, \"The nsys conversion hang\"); the capture is retried up to pipeline.nsys.hang_retries times".into(),
    }
}

/// The manifest's diagnosis of a capture nsys lost by failing on its own
/// (an exit status and no report); `words` is its stderr's last line, as ": …".
pub(crate) fn failure_diagnosis(attempt: u32, ended: &str, words: &str) -> crate::manifest::Diagnosis {
    crate::manifest::Diagnosis {
        code: "nsys_failed_without_capture".into(),
        message: format!("attempt {attempt}: nsys ended with {ended} and wrote no capture{words}"),
        hint: "nsys writes its capture whatever the application's status, so this failure is nsys's own: nsys 2022.4 sometimes fails mid-capture (docs/internals.md, \"The nsys conversion hang\"); the capture is retried up to pipeline.nsys.hang_retries times".into(),
    }
}

/// Makes nsys match NVTX ranges by any string, not only registered ones.
pub(crate) const REGISTER_ONLY_ENV: &str = "--env-var=NSYS_NVTX_PROFILER_REGISTER_ONLY=0";

/// Reject combinations nsys would refuse (or silently ignore).
pub(crate) fn validate(cfg: &NsysConfig) -> Result<(), Error> {
    let key = |k: &str| format!("pipeline.nsys.{k}");
    if cfg.nvtx_capture.is_some() && cfg.capture_range != CaptureRange::Nvtx {
        return Err(Error::config(format!("{} is set but {} is not nvtx", key("nvtx_capture"), key("capture_range")))
            .with_hint("add pipeline.nsys.capture_range=nvtx, or drop nvtx_capture"));
    }
    if cfg.capture_range == CaptureRange::Nvtx && cfg.nvtx_capture.is_none() {
        return Err(Error::config(format!("{}=nvtx needs {}", key("capture_range"), key("nvtx_capture")))
            .with_hint("name the range, nsys order RANGE@DOMAIN: pipeline.nsys.nvtx_capture=prefill@LLM"));
    }
    if cfg.capture_range_end.is_some() && cfg.capture_range == CaptureRange::None {
        return Err(Error::config(format!("{} is set without a capture range", key("capture_range_end")))
            .with_hint("set pipeline.nsys.capture_range=nvtx or cudaProfilerApi, or drop capture_range_end"));
    }
    if cfg.trace.split(',').any(|t| t.trim().is_empty()) {
        return Err(Error::config(format!("{} `{}` has an empty entry", key("trace"), cfg.trace))
            .with_hint("a comma-separated list such as cuda,nvtx,osrt"));
    }
    Ok(())
}

/// `auto` made concrete for this nsys: `node` (each graph node's kernel
/// traced, so that it can be attributed to the range around the graph's
/// launch) where the installed nsys has `--cuda-graph-trace`, else nothing.
pub(crate) fn resolve_graph_trace(cfg: &NsysConfig, has_option: impl FnOnce() -> bool) -> Option<CudaGraphTrace> {
    match cfg.cuda_graph_trace {
        Some(CudaGraphTrace::Auto) => has_option().then_some(CudaGraphTrace::Node),
        other => other,
    }
}

/// `nsys profile ... <app...>`, writing `<output_base>.nsys-rep`.
pub(crate) fn profile_argv(nsys: &Path, cfg: &NsysConfig, output_base: &Path, app: &[OsString]) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec![nsys.into(), "profile".into()];
    let mut opt = |s: String| argv.push(s.into());
    opt(format!("--trace={}", cfg.trace));
    opt(format!("--sample={}", sample_name(cfg.sample)));
    match cfg.capture_range {
        CaptureRange::None => {}
        CaptureRange::Nvtx => opt("--capture-range=nvtx".into()),
        CaptureRange::CudaProfilerApi => opt("--capture-range=cudaProfilerApi".into()),
    }
    if let Some(end) = &cfg.capture_range_end {
        opt(format!("--capture-range-end={end}"));
    }
    if let Some(range) = &cfg.nvtx_capture {
        opt(format!("--nvtx-capture={range}"));
        opt(REGISTER_ONLY_ENV.into());
    }
    match cfg.cuda_graph_trace {
        Some(CudaGraphTrace::Graph) => opt("--cuda-graph-trace=graph".into()),
        Some(CudaGraphTrace::Node) => opt("--cuda-graph-trace=node".into()),
        // Resolved by the caller (`resolve_graph_trace`); unresolved, nothing is passed.
        Some(CudaGraphTrace::Auto) | None => {}
    }
    opt(format!("--output={}", output_base.display()));
    opt(format!("--force-overwrite={}", cfg.force_overwrite));
    for extra in &cfg.extra_args {
        opt(extra.clone());
    }
    argv.extend(app.iter().cloned());
    argv
}

/// The agent of the `nsys profile` process `nsys_pid`. It is reparented to
/// init, so it is no descendant; its session is named `profile-<app>-<nsys pid>`:
/// `nsys --start-agent --session-name=profile-sleep-14580 --shm-name=...`
pub(crate) fn agents_of(nsys_pid: i32) -> Vec<i32> {
    let suffix = format!("-{nsys_pid}");
    crate::process::find_processes(|cmd| {
        cmd.contains("--start-agent")
            && cmd.split_whitespace().any(|a| a.strip_prefix("--session-name=").is_some_and(|n| n.ends_with(&suffix)))
    })
}

/// nsys agents whose `nsys profile` is gone (a llmperf or an nsys killed
/// with SIGKILL cannot stop its agent): (pid, session name). Such an agent
/// spins and makes every later nsys session on the machine hang; no nsys can
/// use it, since its session is named after an nsys that no longer runs.
pub(crate) fn orphaned_agents() -> Vec<(i32, String)> {
    let session = |cmd: &str| -> Option<(String, i32)> {
        let name = cmd.split_whitespace().find_map(|a| a.strip_prefix("--session-name="))?;
        let pid = name.strip_prefix("profile-")?.rsplit('-').next()?.parse().ok()?;
        Some((name.to_string(), pid))
    };
    let mut out = Vec::new();
    for pid in crate::process::find_processes(|cmd| cmd.contains("--start-agent") && session(cmd).is_some()) {
        let Ok(raw) = std::fs::read(format!("/proc/{pid}/cmdline")) else { continue };
        let cmd = String::from_utf8_lossy(&raw).replace('\0', " ");
        if let Some((name, owner)) = session(&cmd) {
            if !crate::process::alive(owner) && crate::process::owned_by_us(pid) {
                out.push((pid, name));
            }
        }
    }
    out
}

/// The application under `nsys profile`: what `nsys-launcher` started
/// (`nsys profile` → `nsys-launcher` → the application, beside `nsys-tee`).
pub(crate) fn application_of(nsys_pid: i32) -> Vec<i32> {
    crate::process::started_by_launcher(nsys_pid, "nsys-launcher")
}

/// `nsys export --type sqlite` of `report` into `sqlite`.
pub(crate) fn export_argv(nsys: &Path, report: &Path, sqlite: &Path) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec![nsys.into()];
    argv.extend(["export", "--type", "sqlite", "--force-overwrite", "true", "--output"].map(OsString::from));
    argv.push(sqlite.into());
    argv.push(report.into());
    argv
}

/// `nsys stats` reports renamed in 2023.1: (name since 2023.1, name before).
pub(crate) const STATS_REPORTS: [(&str, &str); 3] =
    [("nvtx_sum", "nvtxsum"), ("cuda_gpu_kern_sum", "gpukernsum"), ("cuda_api_sum", "cudaapisum")];

/// The configured reports (`pipeline.nsys.stats`, either spelling) as the
/// nsys at hand names them; reports not renamed pass as they are.
pub(crate) fn stats_names(reports: &[String], new_names: bool) -> Vec<String> {
    reports
        .iter()
        .map(|r| match STATS_REPORTS.iter().find(|(new, old)| r == new || r == old) {
            Some((new, old)) => (if new_names { new } else { old }).to_string(),
            None => r.clone(),
        })
        .collect()
}

/// `nsys stats --format csv -o <base>` writes `<base>_<report>.csv` per report.
pub(crate) fn stats_argv(nsys: &Path, sqlite: &Path, out_base: &Path, names: &[String]) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec![nsys.into(), "stats".into(), "--report".into(), names.join(",").into()];
    argv.extend(["--format", "csv", "--force-overwrite", "true", "--output"].map(OsString::from));
    argv.push(out_base.into());
    argv.push(sqlite.into());
    argv
}

/// nsys's answer to a report name it does not know (2022.4 for the 2023.1 names).
pub(crate) fn unknown_report(stderr: &str) -> bool {
    stderr.contains("could not be found")
}

fn sample_name(s: NsysSample) -> &'static str {
    match s {
        NsysSample::None => "none",
        NsysSample::ProcessTree => "process-tree",
        NsysSample::SystemWide => "system-wide",
        NsysSample::Cpu => "cpu",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{load, LoadOptions};

    fn cfg(overrides: &[&str]) -> NsysConfig {
        let opts = LoadOptions { overrides: overrides.iter().map(|s| s.to_string()).collect(), ..Default::default() };
        load(&opts).unwrap().config.pipeline.nsys
    }

    fn argv(c: &NsysConfig) -> Vec<String> {
        profile_argv(Path::new("nsys"), c, Path::new("run/nsys/report"), &["app".into(), "--flag".into()])
            .into_iter()
            .map(|s| s.into_string().unwrap())
            .collect()
    }

    #[test]
    fn default_command_line() {
        assert_eq!(
            argv(&cfg(&[])),
            [
                "nsys",
                "profile",
                "--trace=cuda,nvtx,osrt",
                "--sample=none",
                "--output=run/nsys/report",
                "--force-overwrite=true",
                "app",
                "--flag"
            ]
        );
    }

    #[test]
    fn graph_trace_auto_is_node_where_nsys_has_it() {
        let auto = cfg(&[]);
        assert_eq!(auto.cuda_graph_trace, Some(CudaGraphTrace::Auto));
        let mut resolved = auto.clone();
        resolved.cuda_graph_trace = resolve_graph_trace(&auto, || true);
        assert!(argv(&resolved).contains(&"--cuda-graph-trace=node".to_string()));
        resolved.cuda_graph_trace = resolve_graph_trace(&auto, || false);
        assert!(!argv(&resolved).iter().any(|a| a.starts_with("--cuda-graph-trace")));
        // An explicit choice is kept, and the probe is not asked.
        let graph = cfg(&["pipeline.nsys.cuda_graph_trace=graph"]);
        assert_eq!(resolve_graph_trace(&graph, || unreachable!()), Some(CudaGraphTrace::Graph));
        let none = cfg(&["pipeline.nsys.cuda_graph_trace=null"]);
        assert_eq!(resolve_graph_trace(&none, || unreachable!()), None);
    }

    #[test]
    fn each_option_maps_to_its_flag() {
        let cases: &[(&[&str], &str)] = &[
            (&["pipeline.nsys.trace=nvtx,osrt"], "--trace=nvtx,osrt"),
            (&["pipeline.nsys.sample=process-tree"], "--sample=process-tree"),
            (&["pipeline.nsys.capture_range=cudaProfilerApi"], "--capture-range=cudaProfilerApi"),
            (
                &["pipeline.nsys.capture_range=cudaProfilerApi", "pipeline.nsys.capture_range_end=stop"],
                "--capture-range-end=stop",
            ),
            (
                &["pipeline.nsys.capture_range=nvtx", "pipeline.nsys.nvtx_capture=prefill@LLM"],
                "--nvtx-capture=prefill@LLM",
            ),
            (&["pipeline.nsys.capture_range=nvtx", "pipeline.nsys.nvtx_capture=prefill@LLM"], "--capture-range=nvtx"),
            (&["pipeline.nsys.capture_range=nvtx", "pipeline.nsys.nvtx_capture=prefill@*"], REGISTER_ONLY_ENV),
            (&["pipeline.nsys.cuda_graph_trace=node"], "--cuda-graph-trace=node"),
            (&["pipeline.nsys.force_overwrite=false"], "--force-overwrite=false"),
            (&["pipeline.nsys.extra_args=[--stats=false]"], "--stats=false"),
        ];
        for (overrides, flag) in cases {
            let c = cfg(overrides);
            validate(&c).unwrap();
            let a = argv(&c);
            assert!(a.contains(&flag.to_string()), "{overrides:?} -> {a:?}");
            // Options come before the application.
            assert_eq!(&a[a.len() - 2..], ["app", "--flag"]);
        }
    }

    #[test]
    fn finds_the_agent_by_its_session_name() {
        // A stand-in whose command line has the agent's shape, for nsys pid 4242.
        // It waits in the shell's own `read` (on a pipe we hold): a command
        // such as `sleep` is forked, and the child carries the same command
        // line until it execs, so the scan could find two.
        let mut agent = std::process::Command::new("sh")
            .args(["-c", "read -r _", "nsys", "--start-agent", "--session-name=profile-python-4242", "--shm-name=x"])
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Right after spawn, /proc/<pid>/cmdline may still be the parent's (before exec).
        let start = std::time::Instant::now();
        while agents_of(4242).is_empty() && start.elapsed() < std::time::Duration::from_secs(5) {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        let found = agents_of(4242);
        let other = agents_of(424);
        agent.kill().unwrap();
        agent.wait().unwrap();
        assert_eq!(found, [agent.id() as i32]);
        assert!(other.is_empty(), "{other:?}");
    }

    #[test]
    fn export_and_stats_command_lines() {
        let strs = |v: Vec<OsString>| v.into_iter().map(|s| s.into_string().unwrap()).collect::<Vec<_>>();
        assert_eq!(
            strs(export_argv(Path::new("nsys"), Path::new("r.nsys-rep"), Path::new("r.sqlite"))),
            ["nsys", "export", "--type", "sqlite", "--force-overwrite", "true", "--output", "r.sqlite", "r.nsys-rep"]
        );
        let configured: Vec<String> = ["nvtx_sum", "gpukernsum", "osrt_sum"].map(String::from).to_vec();
        let stats = |new_names| {
            strs(stats_argv(
                Path::new("nsys"),
                Path::new("r.sqlite"),
                Path::new("stats"),
                &stats_names(&configured, new_names),
            ))
        };
        // Either spelling becomes the one the nsys at hand knows; other reports pass as written.
        assert_eq!(stats(false)[3], "nvtxsum,gpukernsum,osrt_sum");
        let new = stats(true);
        assert_eq!(new[3], "nvtx_sum,cuda_gpu_kern_sum,osrt_sum");
        assert_eq!(&new[new.len() - 3..], ["--output", "stats", "r.sqlite"]);
        // Verbatim from nsys 2022.4 given a 2023 name.
        assert!(unknown_report("ERROR: Report 'cuda_gpu_kern_sum' could not be found."));
    }

    #[test]
    fn register_only_env_only_with_nvtx_capture() {
        assert!(!argv(&cfg(&[])).contains(&REGISTER_ONLY_ENV.to_string()));
    }

    #[test]
    fn inconsistent_capture_options_are_refused() {
        for overrides in [
            &["pipeline.nsys.nvtx_capture=prefill"][..],
            &["pipeline.nsys.capture_range=nvtx"][..],
            &["pipeline.nsys.capture_range_end=stop"][..],
            &["pipeline.nsys.trace=cuda,,nvtx"][..],
        ] {
            let err = validate(&cfg(overrides)).unwrap_err();
            assert!(err.hint.is_some(), "{overrides:?}");
        }
    }
}
