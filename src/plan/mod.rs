//! plan: what a run will do, decided before anything runs. [`plan`]
//! decides the whole `profile` command from its [`Request`] and the tools
//! probed before it ([`Probed`]): a job under srun ([`SrunJob`]), or one
//! [`RunPlan`]: its run directory (the id drawn here) and the files it starts
//! with, whether the baseline runs, per profiler whether it is off, runs the
//! application plainly (a rank outside its `ranks`, in step with the others),
//! is wanted but unavailable (not found, or unable to do what the
//! configuration asks), or profiles it, with the tool and every stage's argv
//! as values; [`job`] holds the per-rank rules, [`ncu`] plans the Nsight
//! Compute passes from the plan's [`NcuInputs`] and what nsys saved. Nothing
//! here writes or reads a file or starts a process: the facts it needs (the
//! tools, the launcher on PATH and torchrun's Python, the environment of a
//! rank) are gathered before it. It looks up the command on PATH, to refuse
//! one that cannot run. A run decides here once, and again for the ncu
//! passes after nsys (their selectors come from nsys's regions).
pub(crate) mod annotate;
pub(crate) mod job;
pub(crate) mod launcher;
pub mod ncu;
pub(crate) mod preflight;
pub(crate) mod rank;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub(crate) use ncu::{NcuInputs, NcuPlan};

use crate::config::schema::NsysConfig;
use crate::config::{Config, Resolved};
use crate::error::{Error, ErrorKind};
use crate::profile;
use crate::profile::tools::{Probed, Tool};
use crate::run_dir::{self, absolute, NewRun};
use job::Job;
use launcher::Launcher;
use rank::RankId;

/// What to profile and how llmperf itself was invoked.
pub(crate) struct Request {
    pub(crate) resolved: Resolved,
    /// The application's argv (after `--`); empty for the built-in workload.
    pub(crate) command: Vec<OsString>,
    /// Built-in workload without NVTX ranges.
    pub(crate) no_nvtx: bool,
    /// llmperf's own argv, for the manifest.
    pub(crate) llmperf_argv: Vec<String>,
    /// One rank of a job (`--rank-from-env`): the environment its rank and
    /// job are read from; its run directory is `<root>/<job>/ranks/<rank>/`,
    /// with `rank.json`.
    pub(crate) rank_env: Option<RankEnv>,
    /// The profiler outside a launcher (`--launcher torchrun|mpirun`): the
    /// ranks are processes of this run; or (`--launcher srun`) the launcher
    /// outside llmperf: each rank runs `llmperf profile` itself.
    pub(crate) launcher: Option<Launcher>,
    /// `--run-id`: the job of `--rank-from-env` or `--launcher srun`.
    pub(crate) run_id: Option<String>,
    /// llmperf's own argv as given, each rank's under srun.
    pub(crate) raw_argv: Vec<OsString>,
}

/// `--rank-from-env`: the variables of this process's environment (those
/// that are text) and this host's name, taken before the plan reads them.
#[derive(Debug, Clone, Default)]
pub(crate) struct RankEnv {
    pub(crate) vars: std::collections::HashMap<String, String>,
    pub(crate) host: String,
}

impl RankEnv {
    /// This process's.
    pub(crate) fn of_process(host: String) -> RankEnv {
        let vars = std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
        RankEnv { vars: vars.collect(), host }
    }
}

/// What `llmperf profile` does.
#[derive(Debug, Clone)]
pub(crate) enum Plan {
    /// One run of this process.
    Run(Box<RunPlan>),
    /// `--launcher srun`: srun starts every rank's `llmperf profile`.
    Srun(SrunJob),
}

/// `--launcher srun`: the job directory, and the command srun runs.
#[derive(Debug, Clone)]
pub(crate) struct SrunJob {
    /// The job directory is `<root>/<job>/`.
    pub(crate) root: PathBuf,
    pub(crate) job: String,
    /// `--run-id` named the job: its directory may exist (the job's earlier
    /// step). Else the job is a new directory with an id drawn here.
    pub(crate) named: bool,
    /// `srun -n N … llmperf profile --rank-from-env --run-id JOB …`.
    pub(crate) argv: Vec<OsString>,
}

/// The plan of `llmperf profile`, or why it cannot run (checked before a run
/// directory exists: a bad nsys option, a command that cannot run, ranks
/// that could not stay in step, a bad job id).
pub(crate) fn plan(req: &Request, tools: &Probed) -> Result<Plan, Error> {
    match &req.launcher {
        Some(l) if l.kind == launcher::LauncherKind::Srun => {
            let root = req.resolved.config.runner.artifacts.root.clone();
            let (job, named) = match &req.run_id {
                // Before srun starts any rank: `--run-id ..` would write beside the root.
                Some(id) => (rank::job_name(id, "--launcher srun --run-id")?, true),
                None => (run_dir::new_run_id(), false),
            };
            let mut argv = l.head();
            argv.push(l.exe.clone().into_os_string());
            argv.extend(launcher::rank_argv(&req.raw_argv, &job));
            Ok(Plan::Srun(SrunJob { root, job, named, argv }))
        }
        _ => Ok(Plan::Run(Box::new(RunPlan::new(req, tools)?))),
    }
}

/// The run: where it goes, its stages and its application.
#[derive(Debug, Clone)]
pub(crate) struct RunPlan {
    pub(crate) app: App,
    /// The built-in workload once without a profiler (`runner.run.baseline`).
    pub(crate) baseline: bool,
    pub(crate) place: Place,
    /// The files the run directory starts with: a rank's `rank.json`, the
    /// Python bootstrap (`--annotate`, `--tracer torch`).
    pub(crate) files: Vec<(&'static str, Vec<u8>)>,
    /// Every stage's argv (the paths in them are the run directory's).
    pub(crate) argvs: Argvs,
    /// nsys's configuration, `cuda_graph_trace: auto` made concrete for the
    /// installed nsys.
    pub(crate) nsys_config: NsysConfig,
    /// `--launcher torchrun|mpirun`: the launcher the profilers wrap.
    pub(crate) launch: Option<Launcher>,
    pub(crate) nsys: Use,
    pub(crate) ncu: Use,
    pub(crate) ncu_inputs: NcuInputs,
    /// `--annotate`: ranges injected into the user's command (plan/annotate.rs),
    /// with the PYTHONPATH llmperf was started with.
    pub(crate) annotate: crate::config::schema::Annotate,
    pythonpath: Option<OsString>,
    /// `--tracer torch`: torch.profiler records the timeline (nsys is off).
    pub(crate) torch: Option<crate::config::schema::TorchConfig>,
    /// The application is a Python program (or `--model hf`): `--tracer torch` can trace it.
    pub(crate) python: bool,
}

/// Where the run directory goes.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Place {
    /// A new `<root>/<run_id>/`, the id drawn by the plan.
    Single { root: PathBuf, run_id: String },
    /// `<root>/<job>/ranks/<rank>/`, with `rank.json` (the profilers it ran).
    Rank { root: PathBuf, id: RankId },
}

/// What one profiler's stage does in this run.
#[derive(Debug, Clone)]
pub(crate) enum Use {
    /// Not run: the stage is recorded as skipped with this reason and hint.
    Off { reason: String, hint: String },
    /// The application runs `times` times without the profiler, in step with
    /// the ranks that run it (stage `plain:<profiler>`).
    Plain { times: usize, why: String },
    /// Wanted, but the tool was not found or cannot do what the
    /// configuration asks: the stage is recorded unavailable with this error.
    Unavailable(Error),
    /// The profiler, found, runs the application.
    Profiled(Tool),
}

/// The argv of each stage of a run ([`RunPlan::argvs`]).
#[derive(Debug, Clone, Default)]
pub(crate) struct Argvs {
    /// The unprofiled baseline: the application alone.
    pub(crate) baseline: Vec<OsString>,
    /// What nsys runs (or its plain stage), and what ncu runs.
    pub(crate) nsys: Vec<OsString>,
    pub(crate) ncu: Vec<OsString>,
    /// What runs under torch.profiler (`--tracer torch`): the application
    /// behind the bootstrap; empty without it.
    pub(crate) torch: Vec<OsString>,
}

/// The two profilers, for [`RunPlan::argv`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Profiler {
    Nsys,
    Ncu,
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
    /// The plan of one run (not srun's: [`plan`]), or why it cannot run.
    fn new(req: &Request, tools: &Probed) -> Result<RunPlan, Error> {
        let cfg = &req.resolved.config;
        let command = match &req.launcher {
            Some(l) => l.command(req.command.clone()),
            None => req.command.clone(),
        };
        let app = App::of(cfg, &command, req.no_nvtx)?;
        let hf = match &cfg.model {
            crate::config::schema::ModelConfig::Hf(m) => m.preset().map(|_| true)?,
            _ => false,
        };
        let annotation = match &app {
            App::Command(_) => annotate::resolve(&cfg.annotate, annotate::is_python(&req.command)),
            App::Builtin { .. } => annotate::resolve(&cfg.annotate, hf),
        };
        annotate::check(&annotation, matches!(app, App::Builtin { .. }) && !hf)?;
        if let App::Command(argv) = &app {
            annotate::check_program(&annotation, argv)?;
        }
        let python = match &app {
            App::Command(_) => annotate::is_python(&req.command),
            App::Builtin { .. } => hf,
        };
        annotate::check_tracer(&cfg.pipeline.torch, python, cfg.pipeline.nsys.enable, req.launcher.is_some())?;
        let torch = cfg.pipeline.torch.enable.then(|| cfg.pipeline.torch.clone());
        let baseline = matches!(app, App::Builtin { .. }) && cfg.runner.run.baseline;
        let rank = match &req.rank_env {
            Some(env) => Some(rank::from_env(|k| env.vars.get(k).cloned(), req.run_id.as_deref(), &env.host)?),
            None => None,
        };
        let job = match (&rank, &req.launcher) {
            (Some(r), _) => Some(Job::of_rank(cfg, r)?),
            (None, Some(l)) => Some(Job::of_launch(cfg, l)?),
            (None, None) => None,
        };
        let (nsys, ncu) = (uses(cfg, job.as_ref(), Profiler::Nsys), uses(cfg, job.as_ref(), Profiler::Ncu));
        let place = place_of(&cfg.runner.artifacts.root, rank, (&nsys, &ncu), torch.is_some());
        let ncu_inputs = NcuInputs {
            in_step: job.as_ref().is_some_and(|j| j.ncu_in_step),
            leave_out_comm: job.as_ref().is_some_and(|j| j.exclude_comm),
            inside_rank: job.as_ref().and_then(|j| j.ncu_rank),
        };
        let mut nsys_config = cfg.pipeline.nsys.clone();
        nsys_config.cuda_graph_trace = profile::nsys::resolve_graph_trace(&nsys_config, || tools.nsys_graph_trace);
        let mut plan = RunPlan {
            app,
            baseline,
            place,
            files: Vec::new(),
            argvs: Argvs::default(),
            nsys_config,
            launch: req.launcher.clone(),
            nsys: with_tool(nsys, &tools.nsys, |_| Ok(())),
            ncu: with_tool(ncu, &tools.ncu, |tool| {
                let cli = &cfg.pipeline.ncu.ncu_cli;
                profile::ncu::check_version(cli, tool).and_then(|_| profile::ncu::check_flags(cli, tool))
            }),
            ncu_inputs,
            annotate: annotation,
            pythonpath: std::env::var_os("PYTHONPATH"),
            torch,
            python,
        };
        if let (true, Use::Unavailable(e)) = (plan.python, &mut plan.nsys) {
            // A Python program can still get its timeline, without nsys.
            let fix = e.hint.take().map(|h| format!("{h}; or ")).unwrap_or_default();
            e.hint = Some(format!(
                "{fix}record this Python program's timeline with torch.profiler instead: llmperf profile --tracer torch …"
            ));
        }
        plan.files = plan.first_files()?;
        plan.argvs = plan.argvs_in(&plan.new_run().path());
        Ok(plan)
    }

    /// Where the run directory is created.
    pub(crate) fn new_run(&self) -> NewRun {
        match &self.place {
            Place::Single { root, run_id } => NewRun::Named { root: root.clone(), run_id: run_id.clone() },
            Place::Rank { root, id } => NewRun::Rank { root: root.clone(), job: id.job.clone(), rank: id.rank },
        }
    }

    /// The files the run directory starts with.
    fn first_files(&self) -> Result<Vec<(&'static str, Vec<u8>)>, Error> {
        let mut files = Vec::new();
        if let Place::Rank { id, .. } = &self.place {
            let mut text = serde_json::to_string_pretty(id)
                .map_err(|e| Error::new(ErrorKind::Internal, format!("serializing rank.json: {e}")))?;
            text.push('\n');
            files.push((run_dir::RANK_JSON, text.into_bytes()));
        }
        if self.bootstraps() {
            files.push((run_dir::ANNOTATE_BOOTSTRAP, annotate::BOOTSTRAP.as_bytes().to_vec()));
            files.push((run_dir::ANNOTATE_NVTX, annotate::NVTX.as_bytes().to_vec()));
        }
        Ok(files)
    }

    /// Whether llmperf injects ranges into the command (`--annotate`).
    pub(crate) fn annotates(&self) -> bool {
        self.annotate.mode != crate::config::schema::AnnotateMode::Off
    }

    /// Whether the run directory gets the Python bootstrap (`--annotate`, `--tracer torch`).
    pub(crate) fn bootstraps(&self) -> bool {
        self.annotates() || self.torch.is_some()
    }

    /// Whether no stage runs the application (nothing profiled, no baseline).
    pub(crate) fn idle(&self) -> bool {
        matches!(self.nsys, Use::Off { .. })
            && matches!(self.ncu, Use::Off { .. })
            && !self.baseline
            && self.torch.is_none()
    }

    /// Every argv the run's stages run in the run directory `run`.
    fn argvs_in(&self, run: &Path) -> Argvs {
        Argvs {
            baseline: self.app_argv(run, run_dir::BASELINE_TIMINGS_JSON),
            nsys: self.argv(Profiler::Nsys, run),
            ncu: self.argv(Profiler::Ncu, run),
            torch: self.torch_argv(run),
        }
    }

    /// The application under torch.profiler: behind the bootstrap, which
    /// starts the profiler and writes its traces into `torch/trace/`.
    fn torch_argv(&self, run: &Path) -> Vec<OsString> {
        let Some(config) = &self.torch else { return Vec::new() };
        let inner = self.app_argv(run, run_dir::TIMINGS_JSON);
        let dir = absolute(&run.join(run_dir::ANNOTATE_DIR));
        let tracer = annotate::Tracer { dir: absolute(&run.join(run_dir::TORCH_TRACE_DIR)), config: config.clone() };
        let own_phases = matches!(self.app, App::Builtin { .. });
        annotate::wrap(&self.annotate, &dir, self.pythonpath.as_ref(), inner, own_phases, Some(&tracer))
    }

    /// The argv a profiler's stage runs (profiled or plain): the application,
    /// inside the launcher when the profiler wraps it. ncu on one rank inside
    /// the launcher gets the bare application (each pass wraps it itself).
    fn argv(&self, profiler: Profiler, run: &Path) -> Vec<OsString> {
        let (timings, record) = match profiler {
            Profiler::Nsys => (run_dir::TIMINGS_JSON, run_dir::LAUNCHED_RANKS_DIR),
            Profiler::Ncu => (run_dir::NCU_TIMINGS_JSON, run_dir::LAUNCHED_NCU_RANKS_DIR),
        };
        let inner = self.app_argv(run, timings);
        let dir = absolute(&run.join(run_dir::ANNOTATE_DIR));
        // The built-in workload that annotates (`--model hf`) marks its own phases.
        let own_phases = matches!(self.app, App::Builtin { .. });
        let inner = annotate::wrap(&self.annotate, &dir, self.pythonpath.as_ref(), inner, own_phases, None);
        match &self.launch {
            Some(_) if profiler == Profiler::Ncu && self.ncu_inputs.inside_rank.is_some() => inner,
            Some(l) => l.around(Some(&run.join(record)), None, &inner),
            None => inner,
        }
    }

    /// ncu on one rank inside the launcher: the launcher and that rank.
    pub(crate) fn ncu_inside(&self) -> Option<(&Launcher, u32)> {
        Some((self.launch.as_ref()?, self.ncu_inputs.inside_rank?))
    }

    pub(crate) fn builtin(&self) -> bool {
        matches!(self.app, App::Builtin { .. })
    }

    /// The application's argv for a stage whose built-in workload writes its
    /// timings to `timings` (ncu replay slows it down: its timings are kept apart).
    fn app_argv(&self, run: &Path, timings: &str) -> Vec<OsString> {
        match &self.app {
            App::Command(argv) => argv.clone(),
            App::Builtin { exe, no_nvtx } => {
                let mut argv: Vec<OsString> = vec![
                    exe.into(),
                    "workload".into(),
                    "--run-dir".into(),
                    absolute(run).into(),
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

impl App {
    /// The built-in workload (no command), or the user's command, which must
    /// be able to run.
    fn of(cfg: &Config, command: &[OsString], no_nvtx: bool) -> Result<App, Error> {
        profile::nsys::validate(&cfg.pipeline.nsys)?;
        if command.is_empty() {
            let exe = std::env::current_exe()
                .map_err(|e| Error::new(ErrorKind::Internal, format!("cannot locate the llmperf executable: {e}")))?;
            return Ok(App::Builtin { exe, no_nvtx });
        }
        check_command(&command[0])?;
        if cfg.runner.run.repeat > 1 {
            return Err(Error::config(format!(
                "runner.run.repeat={} repeats the built-in workload's measured loop; llmperf cannot repeat the loop of `{}`",
                cfg.runner.run.repeat,
                command[0].to_string_lossy()
            ))
            .with_hint("drop runner.run.repeat and run more iterations in your own program (its NVTX ranges give the samples)"));
        }
        Ok(App::Command(command.to_vec()))
    }
}

/// What a profiler's stage does: off when disabled; in a job, plain on a rank
/// outside its `ranks` (ncu: once per pass of the plan made from the
/// configuration alone, as the profiled rank makes it).
fn uses(cfg: &Config, job: Option<&Job>, profiler: Profiler) -> Want {
    let (name, enabled) = match profiler {
        Profiler::Nsys => ("nsys", cfg.pipeline.nsys.enable),
        Profiler::Ncu => ("ncu", cfg.pipeline.ncu.enable),
    };
    if profiler == Profiler::Nsys && cfg.pipeline.torch.enable {
        return Want::Not(Use::Off {
            reason: "the timeline comes from torch.profiler (--tracer torch)".into(),
            hint: "--tracer nsys records it with Nsight Systems".into(),
        });
    }
    if !enabled {
        let hint = match profiler {
            Profiler::Ncu => "enable with --replay-mode MODE or pipeline.ncu.enable=true".to_string(),
            Profiler::Nsys => "enable with pipeline.nsys.enable=true".to_string(),
        };
        return Want::Not(Use::Off { reason: format!("disabled (pipeline.{name}.enable=false)"), hint });
    }
    let on_this_rank = match profiler {
        Profiler::Nsys => job.is_none_or(|j| j.nsys),
        Profiler::Ncu => job.is_none_or(|j| j.ncu),
    };
    match (on_this_rank, job) {
        (false, Some(j)) => {
            let times = match profiler {
                Profiler::Nsys => 1,
                Profiler::Ncu => ncu::passes_in_step(cfg),
            };
            Want::Not(Use::Plain { times, why: j.why_plain(name) })
        }
        _ => Want::Profiled,
    }
}

/// What the configuration and the job want of a profiler, before its tool.
enum Want {
    /// Off or plain.
    Not(Use),
    Profiled,
}

/// A profiled stage with its probed tool, or unavailable where the tool was
/// not found or `check` refuses it.
fn with_tool(wanted: Want, probe: &Result<Tool, Error>, check: impl FnOnce(&Tool) -> Result<(), Error>) -> Use {
    match wanted {
        Want::Profiled => match probe.as_ref().map_err(Clone::clone).and_then(|t| check(t).map(|_| t)) {
            Ok(tool) => Use::Profiled(tool.clone()),
            Err(e) => Use::Unavailable(e),
        },
        Want::Not(other) => other,
    }
}

/// Where the run directory goes: a rank's (with the profilers wanted of it,
/// for `rank.json`), or a new one with a drawn id.
fn place_of(root: &Path, rank: Option<RankId>, (nsys, ncu): (&Want, &Want), torch: bool) -> Place {
    let root = root.to_path_buf();
    match rank {
        Some(r) => {
            let profiled = [("nsys", nsys), ("ncu", ncu)].into_iter().filter(|(_, u)| matches!(u, Want::Profiled));
            let mut profiled: Vec<String> = profiled.map(|(name, _)| name.to_string()).collect();
            if torch {
                profiled.insert(0, "torch".into());
            }
            Place::Rank { root, id: RankId { profiled, ..r } }
        }
        None => Place::Single { root, run_id: run_dir::new_run_id() },
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

#[cfg(test)]
mod tests {
    use super::*;
    use launcher::LauncherKind;

    fn request(overrides: &[&str], rank: Option<u32>, launcher: Option<(LauncherKind, u32)>) -> Request {
        let mut overrides: Vec<String> = overrides.iter().map(|o| o.to_string()).collect();
        overrides.push("runner.artifacts.root=/nonexistent/runs".into());
        let resolved = crate::config::load(&crate::config::LoadOptions { overrides, ..Default::default() }).unwrap();
        // A rank as torchrun gives it; the job named by --run-id.
        let rank_env = rank.map(|rank| {
            let vars = [("RANK", rank.to_string()), ("WORLD_SIZE", "4".to_string())];
            RankEnv { vars: vars.into_iter().map(|(k, v)| (k.to_string(), v)).collect(), host: "h".into() }
        });
        let launcher = launcher.map(|(kind, nproc)| Launcher {
            kind,
            nproc,
            extra: Vec::new(),
            as_root: false,
            exe: PathBuf::from("/opt/llmperf"),
            python: None,
        });
        let (run_id, raw_argv) = (rank_env.as_ref().map(|_| "job1".to_string()), Vec::new());
        Request {
            resolved,
            command: Vec::new(),
            no_nvtx: false,
            llmperf_argv: Vec::new(),
            rank_env,
            launcher,
            run_id,
            raw_argv,
        }
    }

    /// A tool as probed, without asking a process (its `--help` says nothing).
    fn tool(name: &str, version: profile::tools::Version) -> Tool {
        let help = std::sync::OnceLock::from(None);
        Tool { path: PathBuf::from(format!("/opt/{name}")), version, version_text: String::new(), help }
    }

    fn found() -> Probed {
        let v = profile::tools::Version::new(2025, 3, 1);
        Probed { nsys: Ok(tool("nsys", v)), ncu: Ok(tool("ncu", v)), nsys_graph_trace: true }
    }

    fn plan_of(req: &Request) -> Result<RunPlan, Error> {
        RunPlan::new(req, &found())
    }

    fn profiled(u: &Use) -> bool {
        matches!(u, Use::Profiled(_))
    }

    const NCU_KERNEL: [&str; 2] = ["pipeline.ncu.enable=true", "pipeline.ncu.ncu_cli.replay_mode=kernel"];

    fn plain(times: usize) -> impl Fn(&Use) -> bool {
        move |u| matches!(u, Use::Plain { times: t, .. } if *t == times)
    }

    #[test]
    fn a_single_run_profiles_with_what_is_enabled() {
        let plan = plan_of(&request(&["pipeline.ncu.enable=false"], None, None)).unwrap();
        let Place::Single { root, run_id } = &plan.place else { panic!("{:?}", plan.place) };
        assert_eq!(root, Path::new("/nonexistent/runs"));
        // The id is drawn here: every argv names the directory it will be.
        let dir = Path::new("/nonexistent/runs").join(run_id);
        assert_eq!(plan.new_run().path(), dir);
        assert!(plan.argvs.nsys.contains(&dir.clone().into_os_string()), "{:?}", plan.argvs.nsys);
        assert!(plan.argvs.baseline.contains(&dir.into_os_string()), "{:?}", plan.argvs.baseline);
        assert!(plan.files.is_empty());
        assert!(matches!(&plan.nsys, Use::Profiled(t) if t.path == Path::new("/opt/nsys")));
        assert!(matches!(&plan.ncu, Use::Off { reason, .. } if reason == "disabled (pipeline.ncu.enable=false)"));
        assert_eq!(plan.ncu_inputs, NcuInputs::default());
        assert!(!plan.idle());
        let off = ["pipeline.nsys.enable=false", "pipeline.ncu.enable=false", "runner.run.baseline=false"];
        assert!(plan_of(&request(&off, None, None)).unwrap().idle());
    }

    #[test]
    fn a_rank_outside_the_profiled_ranks_runs_plainly_in_step() {
        let mut cfg = vec!["pipeline.nsys.ranks=[0]", "pipeline.ncu.ranks=[0]"];
        cfg.extend(NCU_KERNEL);
        let other = plan_of(&request(&cfg, Some(2), None)).unwrap();
        let passes = ncu::passes_in_step(&request(&cfg, None, None).resolved.config);
        assert!(passes >= 1);
        assert!(plain(1)(&other.nsys), "{:?}", other.nsys);
        assert!(plain(passes)(&other.ncu), "{:?}", other.ncu);
        match &other.nsys {
            Use::Plain { why, .. } => assert!(why.starts_with("rank 2 is not in pipeline.nsys.ranks"), "{why}"),
            u => panic!("{u:?}"),
        }
        let Place::Rank { id, root } = &other.place else { panic!("{:?}", other.place) };
        assert_eq!((id.rank, id.job.as_str(), root.to_str().unwrap()), (2, "job1", "/nonexistent/runs"));
        assert!(id.profiled.is_empty());
        assert_eq!(other.ncu_inputs, NcuInputs { in_step: true, leave_out_comm: true, inside_rank: None });

        let zero = plan_of(&request(&cfg, Some(0), None)).unwrap();
        assert!(profiled(&zero.nsys) && profiled(&zero.ncu));
        let Place::Rank { id, .. } = &zero.place else { panic!() };
        assert_eq!(id.profiled, ["nsys", "ncu"]);
        // The rank's directory starts with its rank.json.
        assert_eq!(zero.new_run().path(), Path::new("/nonexistent/runs/job1/ranks/0"));
        let [(name, bytes)] = zero.files.as_slice() else { panic!("{:?}", zero.files) };
        assert_eq!(*name, run_dir::RANK_JSON);
        let written: RankId = serde_json::from_slice(bytes).unwrap();
        assert_eq!((written.rank, written.profiled), (0, vec!["nsys".to_string(), "ncu".to_string()]));
        assert_eq!(zero.ncu_inputs, other.ncu_inputs);
    }

    #[test]
    fn every_rank_profiled_needs_no_step_and_keeps_nccl_when_asked() {
        let mut cfg = vec!["pipeline.ncu.comm_kernels=true", "pipeline.ncu.ncu_cli.replay_mode=application"];
        cfg.extend(["pipeline.ncu.enable=true", "pipeline.ncu.ranks=all"]);
        let plan = plan_of(&request(&cfg, Some(3), None)).unwrap();
        assert!(profiled(&plan.nsys) && profiled(&plan.ncu));
        assert_eq!(plan.ncu_inputs, NcuInputs { in_step: false, leave_out_comm: false, inside_rank: None });
    }

    #[test]
    fn replay_that_runs_the_application_an_unknown_number_of_times_cannot_stay_in_step() {
        for mode in ["application", "app-range", "auto"] {
            let replay = format!("pipeline.ncu.ncu_cli.replay_mode={mode}");
            let cfg = ["pipeline.ncu.enable=true", replay.as_str(), "pipeline.ncu.ranks=[0]"];
            let err = plan_of(&request(&cfg, Some(1), None)).unwrap_err();
            assert!(err.message.contains("cannot run in step with it"), "{mode}: {}", err.message);
            // ncu on one rank inside a launcher: the same rule.
            let err = plan_of(&request(&cfg, None, Some((LauncherKind::Torchrun, 2)))).unwrap_err();
            assert!(err.message.contains("cannot run in step with it"), "{mode}: {}", err.message);
        }
    }

    #[test]
    fn under_a_launcher_nsys_wraps_it_and_ncu_wraps_it_or_runs_on_one_rank() {
        let run = Path::new("/nonexistent/runs/r1");
        let torchrun = Some((LauncherKind::Torchrun, 2));
        let all = [NCU_KERNEL[0], NCU_KERNEL[1], "pipeline.ncu.ranks=all"];
        let all = plan_of(&request(&all, None, torchrun)).unwrap();
        assert!(matches!(&all.place, Place::Single { .. }));
        assert!(profiled(&all.nsys) && profiled(&all.ncu));
        assert_eq!(all.ncu_inputs, NcuInputs { in_step: false, leave_out_comm: true, inside_rank: None });
        let nsys = all.argv(Profiler::Nsys, run);
        let text: Vec<String> = nsys.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(text[..4], ["torchrun", "--standalone", "--nproc-per-node", "2"]);
        assert!(text.contains(&run.join(run_dir::LAUNCHED_RANKS_DIR).display().to_string()), "{text:?}");
        assert!(text.contains(&run_dir::TIMINGS_JSON.to_string()), "{text:?}");
        let ncu: Vec<String> = all.argv(Profiler::Ncu, run).iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(ncu[0], "torchrun");
        assert!(ncu.contains(&run.join(run_dir::LAUNCHED_NCU_RANKS_DIR).display().to_string()), "{ncu:?}");
        assert!(ncu.contains(&run_dir::NCU_TIMINGS_JSON.to_string()), "{ncu:?}");
        assert!(all.ncu_inside().is_none());

        let mut one = NCU_KERNEL.to_vec();
        one.push("pipeline.ncu.ranks=[1]");
        let one = plan_of(&request(&one, None, torchrun)).unwrap();
        assert_eq!(one.ncu_inputs.inside_rank, Some(1));
        assert!(!one.ncu_inputs.in_step);
        assert_eq!(one.ncu_inside().map(|(l, r)| (l.kind, r)), Some((LauncherKind::Torchrun, 1)));
        let ncu = one.argv(Profiler::Ncu, run);
        assert_eq!(ncu[1], "workload", "ncu inside the launcher gets the bare application: {ncu:?}");
        assert_eq!(one.argv(Profiler::Nsys, run)[0], "torchrun");
    }

    #[test]
    fn a_launcher_refuses_ranks_it_cannot_honour() {
        let mpirun = Some((LauncherKind::Mpirun, 2));
        let err = plan_of(&request(&["pipeline.nsys.ranks=[0]"], None, mpirun)).unwrap_err();
        assert!(
            err.message.starts_with("pipeline.nsys.ranks=[0]: with --launcher mpirun one nsys wraps"),
            "{}",
            err.message
        );
        for ranks in ["[0, 1]", "[2]"] {
            let set = format!("pipeline.ncu.ranks={ranks}");
            let cfg = [NCU_KERNEL[0], NCU_KERNEL[1], set.as_str()];
            let err = plan_of(&request(&cfg, None, mpirun)).unwrap_err();
            assert!(err.message.contains("ncu runs on one rank (below --nproc 2) or on all"), "{}", err.message);
        }
    }

    #[test]
    fn a_profiler_wanted_but_missing_or_unable_is_unavailable_in_the_plan() {
        let v2022 = profile::tools::Version::new(2022, 3, 0);
        let missing = Error::new(ErrorKind::ProfilerUnavailable, "nsys not found").with_hint("install it");
        let tools = Probed { nsys: Err(missing), ncu: Ok(tool("ncu", v2022)), nsys_graph_trace: false };
        let cfg = ["pipeline.ncu.enable=true", "pipeline.ncu.ncu_cli.replay_mode=app-range", "pipeline.ncu.ranks=all"];
        let plan = RunPlan::new(&request(&cfg, Some(0), None), &tools).unwrap();
        assert!(matches!(&plan.nsys, Use::Unavailable(e) if e.message == "nsys not found"), "{:?}", plan.nsys);
        // ncu 2022.3 has no app-range replay: refused before anything runs.
        let Use::Unavailable(e) = &plan.ncu else { panic!("{:?}", plan.ncu) };
        assert!(e.message.starts_with("--replay-mode app-range needs Nsight Compute 2023.1.0"), "{}", e.message);
        // Wanted of this rank all the same (rank.json says what it should have profiled).
        let Place::Rank { id, .. } = &plan.place else { panic!() };
        assert_eq!(id.profiled, ["nsys", "ncu"]);
    }

    #[test]
    fn a_ranks_place_is_read_from_its_environment_in_the_plan() {
        let mut req = request(&[], Some(1), None);
        req.run_id = None;
        let env = req.rank_env.as_mut().unwrap();
        env.vars.insert("SLURM_JOB_ID".into(), "4242".into());
        let plan = plan_of(&req).unwrap();
        let Place::Rank { id, .. } = &plan.place else { panic!("{:?}", plan.place) };
        assert_eq!((id.rank, id.world_size, id.rank_from.as_str()), (1, Some(4), "RANK"));
        assert_eq!((id.job.as_str(), id.job_from.as_str(), id.host.as_str()), ("4242", "SLURM_JOB_ID", "h"));
        assert_eq!(plan.new_run().path(), Path::new("/nonexistent/runs/4242/ranks/1"));
        req.rank_env.as_mut().unwrap().vars.clear();
        let err = plan_of(&req).unwrap_err();
        assert!(err.message.starts_with("--rank-from-env: none of RANK,"), "{}", err.message);
    }

    #[test]
    fn graph_trace_auto_is_made_concrete_for_the_probed_nsys() {
        let auto = ["pipeline.nsys.cuda_graph_trace=auto"];
        let plan = plan_of(&request(&auto, None, None)).unwrap();
        assert_eq!(plan.nsys_config.cuda_graph_trace, Some(crate::config::schema::CudaGraphTrace::Node));
        let without = Probed { nsys_graph_trace: false, ..found() };
        let plan = RunPlan::new(&request(&auto, None, None), &without).unwrap();
        assert_eq!(plan.nsys_config.cuda_graph_trace, None);
    }

    #[test]
    fn srun_is_planned_as_a_job_whose_ranks_plan_themselves() {
        let mut req = request(&[], None, Some((LauncherKind::Srun, 4)));
        req.raw_argv =
            ["llmperf", "profile", "--launcher", "srun", "-n", "4", "--", "./app"].map(OsString::from).into();
        let Plan::Srun(job) = plan(&req, &found()).unwrap() else { panic!("not a job") };
        assert!(!job.named);
        assert_eq!(job.root, Path::new("/nonexistent/runs"));
        let words: Vec<String> = job.argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        let rank = ["/opt/llmperf", "profile", "--rank-from-env", "--run-id", job.job.as_str(), "--", "./app"];
        assert_eq!(words, [&["srun", "-n", "4"][..], &rank[..]].concat());
        req.run_id = Some("..".into());
        let err = plan(&req, &found()).unwrap_err();
        assert!(err.message.contains("names no directory of its own"), "{}", err.message);
        req.run_id = Some("job 7".into());
        let Plan::Srun(job) = plan(&req, &found()).unwrap() else { panic!() };
        assert!(job.named);
    }
}
