//! pipeline: the commands that make run directories, each a short list of
//! stages (stage.rs records them): `profile` (workload.rs, nsys.rs, ncu.rs),
//! `import nsys`, `import ncu`, and `report`, which starts again from the
//! saved raw outputs. Raw outputs land in the run directory before anything
//! parses them, and the manifest is rewritten after every stage change, so a
//! crash, a parser bug or Ctrl-C never costs the capture.
mod merge;
mod ncu;
mod nsys;
mod stage;
mod workload;

use std::ffi::OsString;
use std::path::{Path, PathBuf};

pub use workload::workload;

use crate::config::Resolved;
use crate::error::Error;
use crate::manifest::ManifestWriter;
use crate::plan::RunPlan;
use crate::profile::tools::{Kind, Tool};
use crate::provenance::{self, Probed};
use crate::run_dir::{self, absolute, RunDir};
use crate::signals;
use stage::{Done, Verdict};

/// What to profile and how llmperf itself was invoked.
pub struct Request {
    pub resolved: Resolved,
    /// The application's argv (after `--`); empty for the built-in workload.
    pub command: Vec<OsString>,
    /// Built-in workload without NVTX ranges.
    pub no_nvtx: bool,
    /// llmperf's own argv, for the manifest.
    pub llmperf_argv: Vec<String>,
    /// One rank of a job (`--rank-from-env`): its run directory is
    /// `<root>/<job>/ranks/<rank>/`, with `rank.json`.
    pub rank: Option<crate::plan::rank::RankId>,
}

/// A finished (or failed, or interrupted) run: the directory always exists.
pub struct Outcome {
    pub run_dir: PathBuf,
    /// Why the run did not succeed, for the exit code and message.
    pub error: Option<Error>,
}

pub use merge::merge;

/// `llmperf profile`: plan → run directory → provenance → the baseline, nsys
/// and ncu stages → reports.
pub fn profile(req: Request) -> Result<Outcome, Error> {
    let cfg = &req.resolved.config;
    let plan = RunPlan::new(cfg, &req.command, req.no_nvtx)?;
    let run = match &req.rank {
        Some(r) => {
            let run = RunDir::create_rank(&cfg.runner.artifacts.root, &r.job, r.rank)?;
            run.write_json(run_dir::RANK_JSON, r)?;
            run
        }
        None => RunDir::create(&cfg.runner.artifacts.root)?,
    };
    tracing::info!("run directory: {}", run.path().display());
    let tools = Probed::probe(cfg);
    let app = plan.app_argv(&run, run_dir::TIMINGS_JSON);
    provenance::write(&run, &req.resolved, &app, plan.builtin(), &tools)?;
    let mut manifest = ManifestWriter::start(&run, req.llmperf_argv.clone())?;
    let mut verdict = Verdict::default();
    let stages = (|| {
        if plan.baseline {
            verdict.add(workload::baseline(&run, &mut manifest, &plan)?);
        }
        if !verdict.stopped() {
            nsys::capture(&run, &mut manifest, &mut verdict, cfg, &tools.nsys, &app)?;
        }
        if !verdict.stopped() {
            let ncu_app = plan.app_argv(&run, run_dir::NCU_TIMINGS_JSON);
            ncu::profile(&run, &mut manifest, &mut verdict, cfg, &tools.ncu, &ncu_app)?;
        }
        if plan.builtin() {
            provenance::add_model_metadata(&run, provenance::inputs(cfg, &app, true))?;
            provenance::add_libtorch(&run)?;
        }
        Ok(())
    })();
    finish(&run, manifest, verdict, stages)
}

/// `llmperf import nsys FILE`: the nsys analysis of an existing report.
pub fn import_nsys(resolved: &Resolved, file: &Path, out: Option<&Path>, argv: Vec<String>) -> Result<Outcome, Error> {
    let cfg = &resolved.config;
    crate::parse::input::check(file)?;
    let run = output_dir(out, cfg)?;
    let _lock = run.lock()?;
    run.write(run_dir::CONFIG_YAML, resolved.to_yaml().as_bytes())?;
    let tool = Tool::probe(Kind::Nsys, &cfg.pipeline.nsys.executable).ok();
    let mut manifest = ManifestWriter::extend(&run, argv)?;
    let mut verdict = Verdict::default();
    let stages =
        nsys::analyze(&run, &mut manifest, &mut verdict, tool.as_ref(), &absolute(file), &nsys::Ingest::of(cfg));
    finish(&run, manifest, verdict, stages)
}

/// `llmperf import ncu FILE...`: region reports from existing ncu reports or
/// CSVs. The inputs are copied into the run directory first, so the run can be
/// rebuilt from it alone; into a run directory, they add to its passes.
pub fn import_ncu(
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
    let mut verdict = Verdict::default();
    let stages = ncu::import(&run, &mut manifest, &mut verdict, cfg, files, ranges);
    finish(&run, manifest, verdict, stages)
}

/// `llmperf report RUN_DIR`: every report rebuilt from the run's raw artifacts
/// (nsys/report.sqlite, the ncu CSVs, timings, env) and its config.yaml, so
/// that a newer llmperf, or another machine, can render an old run again.
pub fn report(dir: &Path) -> Result<PathBuf, Error> {
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
    mut verdict: Verdict,
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
