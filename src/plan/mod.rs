//! plan: what a run will do, decided before anything runs. [`RunPlan::new`]
//! decides the whole `profile` run from its [`Request`]: where its run
//! directory goes, whether the baseline runs, and per profiler whether it is
//! off, runs the application plainly (a rank outside its `ranks`, in step with
//! the others) or profiles it, with the argv each stage runs, wrapped by the
//! launcher; [`job`] holds the per-rank rules, [`ncu`] plans the Nsight
//! Compute passes from the plan's [`NcuInputs`] and what nsys saved. Nothing
//! here writes a file (the pipeline creates the run directory where the plan
//! puts it); the one file read is torchrun's script, for its interpreter. A run decides here once, and again for the ncu passes
//! after nsys; once its directory exists, `RunPlan::argvs` gives every
//! stage's argv as values.
pub(crate) mod annotate;
pub(crate) mod job;
pub(crate) mod launcher;
pub mod ncu;
pub(crate) mod preflight;
pub(crate) mod rank;

use std::ffi::OsString;
use std::path::PathBuf;

pub(crate) use ncu::{NcuInputs, NcuPlan};

use crate::config::{Config, Resolved};
use crate::error::{Error, ErrorKind};
use crate::profile;
use crate::run_dir::{self, absolute, RunDir};
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
    /// One rank of a job (`--rank-from-env`): its run directory is
    /// `<root>/<job>/ranks/<rank>/`, with `rank.json`.
    pub(crate) rank: Option<RankId>,
    /// The profiler outside a launcher (`--launcher torchrun|mpirun`): the
    /// ranks are processes of this run.
    pub(crate) launcher: Option<Launcher>,
}

/// The run: where it goes, its stages and its application.
#[derive(Debug, Clone)]
pub(crate) struct RunPlan {
    pub(crate) app: App,
    /// The built-in workload once without a profiler (`runner.run.baseline`).
    pub(crate) baseline: bool,
    pub(crate) place: Place,
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

/// Where the run directory goes (its name is drawn when it is created).
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Place {
    /// A new `<root>/<run_id>/`.
    Single { root: PathBuf },
    /// `<root>/<job>/ranks/<rank>/`, with `rank.json` (the profilers it ran).
    Rank { root: PathBuf, id: RankId },
}

/// What one profiler's stage does in this run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Use {
    /// Not run: the stage is recorded as skipped with this reason and hint.
    Off { reason: String, hint: String },
    /// The application runs `times` times without the profiler, in step with
    /// the ranks that run it (stage `plain:<profiler>`).
    Plain { times: usize, why: String },
    /// The profiler runs the application.
    Profiled,
}

/// The argv of each stage of a run ([`RunPlan::argvs`]).
#[derive(Debug, Clone)]
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
    /// The plan of `llmperf profile`, or why it cannot run (checked before a
    /// run directory exists: a bad nsys option, a command that cannot run,
    /// ranks that could not stay in step).
    pub(crate) fn new(req: &Request) -> Result<RunPlan, Error> {
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
        let job = match (&req.rank, &req.launcher) {
            (Some(r), _) => Some(Job::of_rank(cfg, r)?),
            (None, Some(l)) => Some(Job::of_launch(cfg, l)?),
            (None, None) => None,
        };
        let (nsys, ncu) = (uses(cfg, job.as_ref(), Profiler::Nsys), uses(cfg, job.as_ref(), Profiler::Ncu));
        let root = cfg.runner.artifacts.root.clone();
        let place = match &req.rank {
            Some(r) => {
                let profiled = [("nsys", &nsys), ("ncu", &ncu)].into_iter().filter(|(_, u)| **u == Use::Profiled);
                let mut profiled: Vec<String> = profiled.map(|(name, _)| name.to_string()).collect();
                if torch.is_some() {
                    profiled.insert(0, "torch".into());
                }
                Place::Rank { root, id: RankId { profiled, ..r.clone() } }
            }
            None => Place::Single { root },
        };
        let ncu_inputs = NcuInputs {
            in_step: job.as_ref().is_some_and(|j| j.ncu_in_step),
            leave_out_comm: job.as_ref().is_some_and(|j| j.exclude_comm),
            inside_rank: job.as_ref().and_then(|j| j.ncu_rank),
        };
        Ok(RunPlan {
            app,
            baseline,
            place,
            launch: req.launcher.clone(),
            nsys,
            ncu,
            ncu_inputs,
            annotate: annotation,
            pythonpath: std::env::var_os("PYTHONPATH"),
            torch,
            python,
        })
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

    /// Every argv the run's stages run, once its directory exists (the
    /// paths in them are the directory's): values the stages take.
    pub(crate) fn argvs(&self, run: &RunDir) -> Argvs {
        Argvs {
            baseline: self.app_argv(run, run_dir::BASELINE_TIMINGS_JSON),
            nsys: self.argv(Profiler::Nsys, run),
            ncu: self.argv(Profiler::Ncu, run),
            torch: self.torch_argv(run),
        }
    }

    /// The application under torch.profiler: behind the bootstrap, which
    /// starts the profiler and writes its traces into `torch/trace/`.
    fn torch_argv(&self, run: &RunDir) -> Vec<OsString> {
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
    fn argv(&self, profiler: Profiler, run: &RunDir) -> Vec<OsString> {
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
    fn app_argv(&self, run: &RunDir, timings: &str) -> Vec<OsString> {
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
fn uses(cfg: &Config, job: Option<&Job>, profiler: Profiler) -> Use {
    let (name, enabled) = match profiler {
        Profiler::Nsys => ("nsys", cfg.pipeline.nsys.enable),
        Profiler::Ncu => ("ncu", cfg.pipeline.ncu.enable),
    };
    if profiler == Profiler::Nsys && cfg.pipeline.torch.enable {
        return Use::Off {
            reason: "the timeline comes from torch.profiler (--tracer torch)".into(),
            hint: "--tracer nsys records it with Nsight Systems".into(),
        };
    }
    if !enabled {
        let hint = match profiler {
            Profiler::Ncu => "enable with --replay-mode MODE or pipeline.ncu.enable=true".to_string(),
            Profiler::Nsys => "enable with pipeline.nsys.enable=true".to_string(),
        };
        return Use::Off { reason: format!("disabled (pipeline.{name}.enable=false)"), hint };
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
            Use::Plain { times, why: j.why_plain(name) }
        }
        _ => Use::Profiled,
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
        let rank = rank.map(|rank| RankId {
            rank,
            rank_from: "RANK".into(),
            world_size: Some(4),
            job: "job1".into(),
            job_from: "--run-id".into(),
            host: "h".into(),
            profiled: Vec::new(),
        });
        let launcher = launcher.map(|(kind, nproc)| Launcher {
            kind,
            nproc,
            extra: Vec::new(),
            as_root: false,
            exe: PathBuf::from("/opt/llmperf"),
            python: None,
        });
        Request { resolved, command: Vec::new(), no_nvtx: false, llmperf_argv: Vec::new(), rank, launcher }
    }

    const NCU_KERNEL: [&str; 2] = ["pipeline.ncu.enable=true", "pipeline.ncu.ncu_cli.replay_mode=kernel"];

    fn plain(times: usize) -> impl Fn(&Use) -> bool {
        move |u| matches!(u, Use::Plain { times: t, .. } if *t == times)
    }

    #[test]
    fn a_single_run_profiles_with_what_is_enabled() {
        let plan = RunPlan::new(&request(&["pipeline.ncu.enable=false"], None, None)).unwrap();
        assert_eq!(plan.place, Place::Single { root: "/nonexistent/runs".into() });
        assert_eq!(plan.nsys, Use::Profiled);
        assert!(matches!(&plan.ncu, Use::Off { reason, .. } if reason == "disabled (pipeline.ncu.enable=false)"));
        assert_eq!(plan.ncu_inputs, NcuInputs::default());
        assert!(!plan.idle());
        let off = ["pipeline.nsys.enable=false", "pipeline.ncu.enable=false", "runner.run.baseline=false"];
        assert!(RunPlan::new(&request(&off, None, None)).unwrap().idle());
    }

    #[test]
    fn a_rank_outside_the_profiled_ranks_runs_plainly_in_step() {
        let mut cfg = vec!["pipeline.nsys.ranks=[0]", "pipeline.ncu.ranks=[0]"];
        cfg.extend(NCU_KERNEL);
        let other = RunPlan::new(&request(&cfg, Some(2), None)).unwrap();
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

        let zero = RunPlan::new(&request(&cfg, Some(0), None)).unwrap();
        assert_eq!((&zero.nsys, &zero.ncu), (&Use::Profiled, &Use::Profiled));
        let Place::Rank { id, .. } = &zero.place else { panic!() };
        assert_eq!(id.profiled, ["nsys", "ncu"]);
        assert_eq!(zero.ncu_inputs, other.ncu_inputs);
    }

    #[test]
    fn every_rank_profiled_needs_no_step_and_keeps_nccl_when_asked() {
        let mut cfg = vec!["pipeline.ncu.comm_kernels=true", "pipeline.ncu.ncu_cli.replay_mode=application"];
        cfg.extend(["pipeline.ncu.enable=true", "pipeline.ncu.ranks=all"]);
        let plan = RunPlan::new(&request(&cfg, Some(3), None)).unwrap();
        assert_eq!((&plan.nsys, &plan.ncu), (&Use::Profiled, &Use::Profiled));
        assert_eq!(plan.ncu_inputs, NcuInputs { in_step: false, leave_out_comm: false, inside_rank: None });
    }

    #[test]
    fn replay_that_runs_the_application_an_unknown_number_of_times_cannot_stay_in_step() {
        for mode in ["application", "app-range", "auto"] {
            let replay = format!("pipeline.ncu.ncu_cli.replay_mode={mode}");
            let cfg = ["pipeline.ncu.enable=true", replay.as_str(), "pipeline.ncu.ranks=[0]"];
            let err = RunPlan::new(&request(&cfg, Some(1), None)).unwrap_err();
            assert!(err.message.contains("cannot run in step with it"), "{mode}: {}", err.message);
            // ncu on one rank inside a launcher: the same rule.
            let err = RunPlan::new(&request(&cfg, None, Some((LauncherKind::Torchrun, 2)))).unwrap_err();
            assert!(err.message.contains("cannot run in step with it"), "{mode}: {}", err.message);
        }
    }

    #[test]
    fn under_a_launcher_nsys_wraps_it_and_ncu_wraps_it_or_runs_on_one_rank() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create(dir.path()).unwrap();
        let torchrun = Some((LauncherKind::Torchrun, 2));
        let all = [NCU_KERNEL[0], NCU_KERNEL[1], "pipeline.ncu.ranks=all"];
        let all = RunPlan::new(&request(&all, None, torchrun)).unwrap();
        assert_eq!(all.place, Place::Single { root: "/nonexistent/runs".into() });
        assert_eq!((&all.nsys, &all.ncu), (&Use::Profiled, &Use::Profiled));
        assert_eq!(all.ncu_inputs, NcuInputs { in_step: false, leave_out_comm: true, inside_rank: None });
        let nsys = all.argv(Profiler::Nsys, &run);
        let text: Vec<String> = nsys.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(text[..4], ["torchrun", "--standalone", "--nproc-per-node", "2"]);
        assert!(text.contains(&run.join(run_dir::LAUNCHED_RANKS_DIR).display().to_string()), "{text:?}");
        assert!(text.contains(&run_dir::TIMINGS_JSON.to_string()), "{text:?}");
        let ncu: Vec<String> = all.argv(Profiler::Ncu, &run).iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert_eq!(ncu[0], "torchrun");
        assert!(ncu.contains(&run.join(run_dir::LAUNCHED_NCU_RANKS_DIR).display().to_string()), "{ncu:?}");
        assert!(ncu.contains(&run_dir::NCU_TIMINGS_JSON.to_string()), "{ncu:?}");
        assert!(all.ncu_inside().is_none());

        let mut one = NCU_KERNEL.to_vec();
        one.push("pipeline.ncu.ranks=[1]");
        let one = RunPlan::new(&request(&one, None, torchrun)).unwrap();
        assert_eq!(one.ncu_inputs.inside_rank, Some(1));
        assert!(!one.ncu_inputs.in_step);
        assert_eq!(one.ncu_inside().map(|(l, r)| (l.kind, r)), Some((LauncherKind::Torchrun, 1)));
        let ncu = one.argv(Profiler::Ncu, &run);
        assert_eq!(ncu[1], "workload", "ncu inside the launcher gets the bare application: {ncu:?}");
        assert_eq!(one.argv(Profiler::Nsys, &run)[0], "torchrun");
    }

    #[test]
    fn a_launcher_refuses_ranks_it_cannot_honour() {
        let mpirun = Some((LauncherKind::Mpirun, 2));
        let err = RunPlan::new(&request(&["pipeline.nsys.ranks=[0]"], None, mpirun)).unwrap_err();
        assert!(
            err.message.starts_with("pipeline.nsys.ranks=[0]: with --launcher mpirun one nsys wraps"),
            "{}",
            err.message
        );
        for ranks in ["[0, 1]", "[2]"] {
            let set = format!("pipeline.ncu.ranks={ranks}");
            let cfg = [NCU_KERNEL[0], NCU_KERNEL[1], set.as_str()];
            let err = RunPlan::new(&request(&cfg, None, mpirun)).unwrap_err();
            assert!(err.message.contains("ncu runs on one rank (below --nproc 2) or on all"), "{}", err.message);
        }
    }
}
