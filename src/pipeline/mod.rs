//! pipeline: the commands that make run directories, each a short list of
//! stages (stage.rs records them): `profile` (workload.rs, nsys.rs, ncu.rs),
//! `import nsys`, `import ncu`, and `report`, which starts again from the
//! saved raw outputs. Raw outputs land in the run directory before anything
//! parses them, and the manifest is rewritten after every stage change, so a
//! crash, a parser bug or Ctrl-C never costs the capture.
mod launcher;
mod merge;
mod ncu;
mod nsys;
mod stage;
mod workload;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub(crate) use workload::workload;

use crate::config::Resolved;
use crate::error::{Error, ErrorKind};
use crate::manifest::ManifestWriter;
use crate::plan::rank::RankId;
use crate::plan::RunPlan;
use crate::profile::tools::{Kind, Tool};
use crate::provenance::{self, Probed};
use crate::run_dir::{self, absolute, RunDir};
use crate::signals;
use stage::{Done, RunStatus};

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
    pub(crate) rank: Option<crate::plan::rank::RankId>,
    /// The profiler outside a launcher (`--launcher torchrun|mpirun`): the
    /// ranks are processes of this run.
    pub(crate) launcher: Option<crate::plan::launcher::Launcher>,
}

/// A run that is (part of) a job of several ranks: which profilers run on
/// this rank, and whether the ranks must run the application in step.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub(crate) rank: Option<u32>,
    /// nsys, ncu run on this rank (enabled, and this rank in their `ranks`).
    pub(crate) nsys: bool,
    pub(crate) ncu: bool,
    /// ncu runs on some ranks only: the others run the application once per
    /// ncu pass, plainly, so every pass is one run of the application whose
    /// count is known before it starts.
    pub(crate) ncu_in_step: bool,
    /// Leave NCCL's kernels out of kernel and application replay.
    pub(crate) exclude_comm: bool,
    /// `--launcher torchrun|mpirun`: the launcher the profilers wrap, and the
    /// one rank ncu runs on inside it (None: ncu wraps the launcher, all ranks).
    pub(crate) launch: Option<crate::plan::launcher::Launcher>,
    pub(crate) ncu_rank: Option<u32>,
}

impl Job {
    /// One rank of a job (`--rank-from-env`): its profilers from
    /// `pipeline.{nsys,ncu}.ranks`. Refused before anything runs when the
    /// ranks could not stay in step.
    pub(crate) fn of_rank(cfg: &crate::config::Config, r: &crate::plan::rank::RankId) -> Result<Job, Error> {
        let ncu = &cfg.pipeline.ncu;
        let ncu_in_step = ncu.enable && !ncu.ranks.covers(r.world_size);
        if ncu_in_step {
            check_in_step(cfg)?;
        }
        Ok(Job {
            rank: Some(r.rank),
            nsys: cfg.pipeline.nsys.enable && cfg.pipeline.nsys.ranks.contains(r.rank),
            ncu: ncu.enable && ncu.ranks.contains(r.rank),
            ncu_in_step,
            exclude_comm: !ncu.comm_kernels,
            launch: None,
            ncu_rank: None,
        })
    }

    /// The profiler outside the launcher (`--launcher torchrun|mpirun`): nsys
    /// wraps it and sees every rank; ncu wraps it (`pipeline.ncu.ranks=all`)
    /// or runs inside it on one rank while the others run plainly.
    pub(crate) fn of_launch(cfg: &crate::config::Config, l: &crate::plan::launcher::Launcher) -> Result<Job, Error> {
        use crate::config::schema::RankSet;
        let (nsys, ncu) = (&cfg.pipeline.nsys, &cfg.pipeline.ncu);
        let program = l.kind.program();
        if nsys.enable && nsys.ranks != RankSet::All {
            return Err(Error::usage(format!(
                "pipeline.nsys.ranks={}: with --launcher {program} one nsys wraps the launcher and sees every rank",
                nsys.ranks
            ))
            .with_hint("drop pipeline.nsys.ranks, or run each rank under its own nsys: --launcher srun, or --rank-from-env under the launcher"));
        }
        let ncu_rank = match &ncu.ranks {
            _ if !ncu.enable => None,
            RankSet::All => None,
            RankSet::Only(v) if v.len() == 1 && v[0] < l.nproc => {
                check_in_step(cfg)?;
                Some(v[0])
            }
            RankSet::Only(_) => {
                return Err(Error::usage(format!(
                "pipeline.ncu.ranks={}: with --launcher {program}, ncu runs on one rank (below --nproc {}) or on all",
                ncu.ranks, l.nproc
            ))
                .with_hint("set pipeline.ncu.ranks=[0] (or another single rank), or pipeline.ncu.ranks=all"))
            }
        };
        Ok(Job {
            rank: None,
            nsys: nsys.enable,
            ncu: ncu.enable,
            ncu_in_step: false,
            exclude_comm: !ncu.comm_kernels,
            launch: Some(l.clone()),
            ncu_rank,
        })
    }

    fn why_plain(&self, profiler: &str) -> String {
        let rank = self.rank.map(|r| format!("rank {r}")).unwrap_or_else(|| "this rank".into());
        format!(
            "{rank} is not in pipeline.{profiler}.ranks: it ran the application without {profiler}, in step with the ranks that did"
        )
    }
}

/// With ncu on some ranks only, every rank must run the application the same
/// number of times: replay modes that run it again and again (application,
/// app-range) or climb a ladder (auto) cannot be matched by the other ranks.
pub(crate) fn check_in_step(cfg: &crate::config::Config) -> Result<(), Error> {
    use crate::config::schema::ReplayMode;
    let ncu = &cfg.pipeline.ncu;
    let mode = ncu.ncu_cli.replay_mode;
    if matches!(mode, ReplayMode::Kernel | ReplayMode::Range) {
        return Ok(());
    }
    Err(Error::usage(format!(
        "pipeline.ncu.ranks={} profiles some ranks of the job with ncu, and replay mode {} runs the application a number of times only ncu knows, so the other ranks cannot run in step with it",
        ncu.ranks,
        mode.as_str()
    ))
    .with_hint("use --replay-mode kernel or --replay-mode range (one run per pass), or pipeline.ncu.ranks=all"))
}

/// A finished (or failed, or interrupted) run: the directory always exists.
pub(crate) struct Outcome {
    pub(crate) run_dir: PathBuf,
    /// Why the run did not succeed, for the exit code and message.
    pub(crate) error: Option<Error>,
}

pub(crate) use launcher::{launch_rank, launcher_of, srun, RANK_ENV};
pub(crate) use merge::merge;

/// `llmperf profile`: plan → run directory → provenance → the baseline, nsys
/// and ncu stages → reports.
pub(crate) fn profile(req: Request) -> Result<Outcome, Error> {
    let cfg = &req.resolved.config;
    let command = match &req.launcher {
        Some(l) => l.command(req.command.clone()),
        None => req.command.clone(),
    };
    let plan = RunPlan::new(cfg, &command, req.no_nvtx)?;
    if let (true, crate::config::schema::Device::Cuda(n)) = (plan.builtin(), cfg.device) {
        check_cuda_device(n)?;
    }
    if !cfg.pipeline.nsys.enable && !cfg.pipeline.ncu.enable && !plan.baseline {
        tracing::warn!(
            "nsys and ncu are both disabled: the command does not run and nothing is profiled (hint: drop --no-nsys, or pass --replay-mode MODE for ncu)"
        );
    }
    let job = match (&req.rank, &req.launcher) {
        (Some(r), _) => Some(Job::of_rank(cfg, r)?),
        (None, Some(l)) => Some(Job::of_launch(cfg, l)?),
        (None, None) => None,
    };
    let run = match (&req.rank, &job) {
        (Some(r), Some(j)) => {
            let run = RunDir::create_rank(&cfg.runner.artifacts.root, &r.job, r.rank)?;
            let profiled = [("nsys", j.nsys), ("ncu", j.ncu)].into_iter().filter(|p| p.1).map(|p| p.0.to_string());
            run.write_json(run_dir::RANK_JSON, &RankId { profiled: profiled.collect(), ..r.clone() })?;
            run
        }
        _ => RunDir::create(&cfg.runner.artifacts.root)?,
    };
    tracing::info!("run directory: {}", run.path().display());
    let tools = Probed::probe(cfg);
    let inner = plan.app_argv(&run, run_dir::TIMINGS_JSON);
    let launch = job.as_ref().and_then(|j| j.launch.as_ref());
    let app = match launch {
        Some(l) => l.around(Some(&launcher::record_dir(&run)), None, &inner),
        None => inner,
    };
    provenance::write(&run, &req.resolved, &app, plan.builtin(), &tools)?;
    let mut manifest = ManifestWriter::start(&run, req.llmperf_argv.clone())?;
    let mut verdict = RunStatus::default();
    let stages = (|| {
        if plan.baseline {
            verdict.add(workload::baseline(&run, &mut manifest, &plan)?);
        }
        let job = job.as_ref();
        if !verdict.stopped() {
            match job.filter(|j| !j.nsys && cfg.pipeline.nsys.enable) {
                Some(j) => verdict.add(workload::plain(&run, &mut manifest, "nsys", &app, 1, &j.why_plain("nsys"))?),
                None => nsys::capture(&run, &mut manifest, &mut verdict, cfg, &tools.nsys, &app)?,
            }
        }
        if !verdict.stopped() {
            let mut ncu_app = plan.app_argv(&run, run_dir::NCU_TIMINGS_JSON);
            if let Some(l) = launch.filter(|_| job.is_some_and(|j| j.ncu_rank.is_none())) {
                ncu_app = l.around(Some(&run.join(run_dir::LAUNCHED_NCU_RANKS_DIR)), None, &ncu_app);
            }
            match job.filter(|j| !j.ncu && cfg.pipeline.ncu.enable) {
                Some(j) => {
                    let times = ncu::passes_in_step(cfg);
                    verdict.add(workload::plain(&run, &mut manifest, "ncu", &ncu_app, times, &j.why_plain("ncu"))?)
                }
                None => ncu::profile(&run, &mut manifest, &mut verdict, cfg, &tools.ncu, &ncu_app, job)?,
            }
        }
        if plan.builtin() {
            provenance::add_model_metadata(&run, provenance::inputs(cfg, &app, true))?;
            provenance::add_libtorch(&run)?;
        }
        Ok(())
    })();
    finish(&run, manifest, verdict, stages)
}

/// `--device cuda:N` of the built-in workload, checked before any profiler
/// runs: the workload would refuse it only after a whole nsys capture. The
/// parent never loads libtorch, so a child of this binary asks it
/// (`llmperf cuda-devices`).
fn check_cuda_device(n: u32) -> Result<(), Error> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::new(ErrorKind::Internal, format!("cannot locate the llmperf executable: {e}")))?;
    let spec = crate::process::Spawn::new([exe.into_os_string(), "cuda-devices".into()])
        .stdout(crate::process::Sink::Capture)
        .stderr(crate::process::Sink::Capture)
        .timeout(Some(std::time::Duration::from_secs(120)));
    let done = crate::process::run(&spec)?;
    let said = String::from_utf8_lossy(&done.stdout).trim().to_string();
    let count: i64 = match (done.success(), said.parse()) {
        (true, Ok(c)) => c,
        // The probe itself failed (no plugin, say): the workload will say why, as before.
        _ => return Ok(()),
    };
    if i64::from(n) < count {
        return Ok(());
    }
    Err(Error::config(format!("device cuda:{n} requested but libtorch sees {count} CUDA device(s)")).with_hint(
        "use device=cpu or device=auto, and see `llmperf doctor` for why CUDA is unavailable; nothing was profiled",
    ))
}

/// `llmperf import nsys FILE`: the nsys analysis of an existing report.
pub(crate) fn import_nsys(
    resolved: &Resolved,
    file: &Path,
    out: Option<&Path>,
    argv: Vec<String>,
) -> Result<Outcome, Error> {
    let cfg = &resolved.config;
    crate::parse::input::check(file)?;
    let run = output_dir(out, cfg)?;
    let _lock = run.lock()?;
    run.write(run_dir::CONFIG_YAML, resolved.to_yaml().as_bytes())?;
    let tool = Tool::probe(Kind::Nsys, &cfg.pipeline.nsys.executable).ok();
    let mut manifest = ManifestWriter::extend(&run, argv)?;
    let mut verdict = RunStatus::default();
    let stages =
        nsys::analyze(&run, &mut manifest, &mut verdict, tool.as_ref(), &absolute(file), &nsys::Ingest::of(cfg));
    finish(&run, manifest, verdict, stages)
}

/// `llmperf import nsys FILE FILE…`: one capture per rank of a job (`nsys
/// -o report.%q{RANK}`), each imported into `<job>/ranks/<rank>/` (its rank:
/// the last number in its file name) with a `rank.json`, then merged as
/// `llmperf merge` does. A file that fails is reported by the merge; the
/// others are kept.
pub(crate) fn import_nsys_ranks(
    resolved: &Resolved,
    files: &[PathBuf],
    out: Option<&Path>,
    argv: Vec<String>,
) -> Result<Outcome, Error> {
    let ranked = crate::plan::rank::ranks_of_files(files)?;
    for (_, file) in &ranked {
        crate::parse::input::check(file)?;
    }
    let job = match out {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| run_dir::io_error(dir, "create the job directory", &e))?;
            dir.to_path_buf()
        }
        None => RunDir::create(&resolved.config.runner.artifacts.root)?.path().to_path_buf(),
    };
    let name = job.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut error = None;
    for (rank, file) in ranked {
        let dir = job.join(run_dir::RANKS_DIR).join(rank.to_string());
        let outcome = import_nsys(resolved, &file, Some(&dir), argv.clone())?;
        let run = RunDir::open(&dir)?;
        let host =
            run.read_json::<crate::provenance::capture::CaptureHost>(run_dir::NSYS_CAPTURE).and_then(|c| c.hostname);
        let id = crate::plan::rank::RankId {
            rank,
            rank_from: format!("file name ({})", file.file_name().unwrap_or_default().to_string_lossy()),
            world_size: None,
            job: name.clone(),
            job_from: "llmperf import nsys".into(),
            host: host.unwrap_or_default(),
            profiled: vec!["nsys".into()],
        };
        run.write_json(run_dir::RANK_JSON, &id)?;
        error = error.or(outcome.error);
    }
    merge(std::slice::from_ref(&job))?;
    Ok(Outcome { run_dir: job, error })
}

/// `llmperf import ncu FILE...`: region reports from existing ncu reports or
/// CSVs. The inputs are copied into the run directory (a CSV while it is read,
/// a report before ncu renders the copy), so the run can be rebuilt from it
/// alone; into a run directory, they add to its passes.
pub(crate) fn import_ncu(
    resolved: &Resolved,
    files: &[PathBuf],
    out: Option<&Path>,
    ranges: Vec<String>,
    argv: Vec<String>,
) -> Result<Outcome, Error> {
    for file in files {
        crate::parse::input::check(file)?;
    }
    let cfg = &resolved.config;
    let run = output_dir(out, cfg)?;
    let _lock = run.lock()?;
    run.write(run_dir::CONFIG_YAML, resolved.to_yaml().as_bytes())?;
    let mut manifest = ManifestWriter::extend(&run, argv)?;
    let mut verdict = RunStatus::default();
    let stages = ncu::import(&run, &mut manifest, &mut verdict, cfg, files, ranges);
    finish(&run, manifest, verdict, stages)
}

/// `llmperf report RUN_DIR`: every report rebuilt from the run's raw artifacts
/// (nsys/report.sqlite, the ncu CSVs, timings, env) and its config.yaml, so
/// that a newer llmperf, or another machine, can render an old run again.
pub(crate) fn report(dir: &Path) -> Result<PathBuf, Error> {
    let run = RunDir::open(dir)?;
    let _lock = run.lock()?;
    let cfg = crate::config::load_resolved(&run.join(run_dir::CONFIG_YAML))?;
    let top_n = cfg.runner.run.top_n_kernels as usize;
    if run.join(run_dir::NSYS_SQLITE).is_file() {
        nsys::write_outputs(&run, &run.join(run_dir::NSYS_SQLITE), &nsys::Ingest::of(&cfg))?;
    } else if let Some(csv) = run_dir::nsys_kernel_summary(&run) {
        nsys::write_summary_outputs(&run, &csv, top_n)?;
    }
    let inputs = ncu::saved_inputs(&run);
    if !inputs.is_empty() || run.join(run_dir::NCU_PLAN).is_file() {
        let (report, roofline) = ncu::build_for_run(&run, &cfg, &inputs)?;
        crate::report::write_ncu_regions(&run, &report, &roofline)?;
    }
    crate::report::write_summaries(&run)?;
    crate::report::write_index(&run)?;
    Ok(run.path().to_path_buf())
}

/// The run directory of an import: `-o DIR` (new, empty, or a run directory
/// to add to), else a new one under the artifacts root.
fn output_dir(out: Option<&Path>, cfg: &crate::config::Config) -> Result<RunDir, Error> {
    match out {
        Some(dir) => RunDir::create_at(dir),
        None => RunDir::create(&cfg.runner.artifacts.root),
    }
}

/// The reports (unless a signal is pending: a stopped profiler's capture was
/// analysed and is reported, but a signal during that stops here too), the
/// manifest's final status, then `report.md`, which shows it. An error that
/// ended the stages early (I/O between stages) ends the run like a failed stage.
fn finish(
    run: &RunDir,
    mut manifest: ManifestWriter,
    mut verdict: RunStatus,
    stages: Result<(), Error>,
) -> Result<Outcome, Error> {
    if let Err(e) = stages {
        verdict.add(stage::StageOutcome::of(Some(e)));
    }
    if signals::pending() {
        verdict.add(stage::StageOutcome::Interrupted(signals::interrupted()));
    } else {
        // A failure here fails the stage, not the run.
        let _ =
            stage::run(&mut manifest, "reports", Vec::new(), || Ok(Done::ok(crate::report::write_summaries(run)?)))?;
    }
    let status = verdict.status();
    manifest.close(status)?;
    crate::report::write_index(run)?;
    Ok(Outcome { run_dir: run.path().to_path_buf(), error: verdict.into_error() })
}
