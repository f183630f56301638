//! plan: what a run will do, decided before anything runs. [`RunPlan`] is the
//! whole run (which stages, and the application each profiler runs: the
//! user's command, or this binary re-executed as the built-in workload with a
//! timings file of the stage's own); [`ncu`] plans the Nsight Compute passes.
pub(crate) mod launcher;
pub mod ncu;
pub(crate) mod preflight;
pub(crate) mod rank;

use std::ffi::OsString;
use std::path::PathBuf;

pub(crate) use ncu::NcuPlan;

use crate::config::Config;
use crate::error::{Error, ErrorKind};
use crate::profile;
use crate::run_dir::{self, absolute, RunDir};

/// The run: its stages and its application.
#[derive(Debug, Clone)]
pub(crate) struct RunPlan {
    pub(crate) app: App,
    /// The built-in workload once without a profiler (`runner.run.baseline`).
    pub(crate) baseline: bool,
}

/// What the profilers run.
#[derive(Debug, Clone)]
pub(crate) enum App {
    /// This executable as `llmperf workload`, reading the run's config.yaml,
    /// so the profiled process runs exactly what the run recorded.
    Builtin { exe: PathBuf, no_nvtx: bool },
    /// The user's command after `--`.
    Command(Vec<OsString>),
}

impl RunPlan {
    /// The plan of `llmperf profile`, or why it cannot run (checked before a
    /// run directory exists: a bad nsys option, a command that cannot run).
    pub(crate) fn new(cfg: &Config, command: &[OsString], no_nvtx: bool) -> Result<RunPlan, Error> {
        profile::nsys::validate(&cfg.pipeline.nsys)?;
        let app = if command.is_empty() {
            let exe = std::env::current_exe()
                .map_err(|e| Error::new(ErrorKind::Internal, format!("cannot locate the llmperf executable: {e}")))?;
            App::Builtin { exe, no_nvtx }
        } else {
            check_command(&command[0])?;
            if cfg.runner.run.repeat > 1 {
                return Err(Error::config(format!(
                    "runner.run.repeat={} repeats the built-in workload's measured loop; llmperf cannot repeat the loop of `{}`",
                    cfg.runner.run.repeat,
                    command[0].to_string_lossy()
                ))
                .with_hint("drop runner.run.repeat and run more iterations in your own program (its NVTX ranges give the samples)"));
            }
            App::Command(command.to_vec())
        };
        let baseline = matches!(app, App::Builtin { .. }) && cfg.runner.run.baseline;
        Ok(RunPlan { app, baseline })
    }

    pub(crate) fn builtin(&self) -> bool {
        matches!(self.app, App::Builtin { .. })
    }

    /// The application's argv for a stage whose built-in workload writes its
    /// timings to `timings` (ncu replay slows it down: its timings are kept apart).
    pub(crate) fn app_argv(&self, run: &RunDir, timings: &str) -> Vec<OsString> {
        match &self.app {
            App::Command(argv) => argv.clone(),
            App::Builtin { exe, no_nvtx } => {
                let mut argv: Vec<OsString> = vec![
                    exe.into(),
                    "workload".into(),
                    "--run-dir".into(),
                    absolute(run.path()).into(),
                    "--resolved-config".into(),
                    absolute(&run.join(run_dir::CONFIG_YAML)).into(),
                    "--timings-file".into(),
                    timings.into(),
                ];
                if *no_nvtx {
                    argv.push("--no-nvtx".into());
                }
                argv
            }
        }
    }
}

/// The command after `--` must name a program that can run: checked here,
/// since under nsys a missing program is only "exit code 1" and a log line.
fn check_command(first: &std::ffi::OsStr) -> Result<(), Error> {
    let name = first.to_string_lossy();
    if name.starts_with('-') {
        return Err(Error::usage(format!("the command to profile starts with `{name}`"))
            .with_hint("put llmperf's own options before `--` and the program to run right after it"));
    }
    if crate::process::find_executable(first).is_some() {
        return Ok(());
    }
    if !name.contains('/') {
        return Err(Error::usage(format!("cannot run `{name}`: not found on PATH"))
            .with_hint(format!("install `{name}`, or give its path (./{name} for one in this directory)")));
    }
    let why = match std::path::Path::new(first).metadata() {
        Err(_) => "no such file",
        Ok(m) if m.is_dir() => "a directory",
        Ok(_) => "not executable",
    };
    Err(Error::usage(format!("cannot run `{name}`: {why}"))
        .with_hint("check the path of the program after `--` (chmod +x it if it is a script)"))
}
