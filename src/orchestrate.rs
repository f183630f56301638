//! `llmperf profile`: plan → run directory → provenance → profiler stages.
//!
//! Raw outputs land in the run directory before anything parses them, and the
//! manifest is rewritten after every stage change, so a crash, a parser bug or
//! Ctrl-C never costs the capture.
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config::Resolved;
use crate::error::{Error, ErrorKind};
use crate::manifest::{ExitInfo, ManifestWriter, Status};
use crate::process::{self, Exit, Finished, Sink, Spawn};
use crate::profile::{ncu, nsys};
use crate::provenance::{self, Probed};
use crate::run_dir::{self, absolute, RunDir};
use crate::tools::Tool;

/// What to profile and how llmperf itself was invoked.
pub struct Request {
    pub resolved: Resolved,
    /// The application's argv (after `--`); empty for the built-in workload.
    pub command: Vec<OsString>,
    /// Built-in workload without NVTX ranges.
    pub no_nvtx: bool,
    /// llmperf's own argv, for the manifest.
    pub llmperf_argv: Vec<String>,
}

/// A finished (or failed, or interrupted) run: the directory always exists.
pub struct Outcome {
    pub run_dir: PathBuf,
    pub status: Status,
    /// Why the run did not succeed, for the exit code and message.
    pub error: Option<Error>,
}

pub fn profile(req: Request) -> Result<Outcome, Error> {
    let cfg = &req.resolved.config.clone();
    nsys::validate(&cfg.pipeline.nsys)?;
    let builtin = req.command.is_empty();
    if !builtin {
        check_command(&req.command)?;
    }
    process::install_interrupt_handler();
    let run = RunDir::create(&cfg.runner.artifacts.root)?;
    tracing::info!("run directory: {}", run.path().display());
    run.write(run_dir::CONFIG_YAML, req.resolved.to_yaml().as_bytes())?;
    // The application of each stage: the user's command, or this binary
    // re-executed as the built-in workload, writing its timings to a file of
    // the stage's own (ncu replay slows it down: its timings are kept apart).
    let app = |timings: &str| match builtin {
        true => self_command(&run, req.no_nvtx, timings),
        false => Ok(req.command.clone()),
    };
    let nsys_app = app(run_dir::TIMINGS_JSON)?;
    run.write_yaml(run_dir::INPUTS_YAML, &provenance::inputs(cfg, &nsys_app, builtin))?;
    let tools = Probed::probe(cfg);
    run.write_json(run_dir::ENV_JSON, &provenance::collect_env(&tools, builtin))?;
    let mut manifest = ManifestWriter::start(&run, req.llmperf_argv.clone())?;

    let mut error = None;
    if builtin && cfg.runner.run.baseline {
        error = baseline_stage(&run, &mut manifest, &app(run_dir::BASELINE_TIMINGS_JSON)?)?;
    }
    if error.as_ref().is_none_or(|e| e.kind != ErrorKind::Interrupted) {
        error = nsys_stage(&run, &mut manifest, &req, &tools.nsys, &nsys_app)?.or(error);
    }
    if error.as_ref().is_none_or(|e| e.kind != ErrorKind::Interrupted) {
        let ncu_error = ncu_stage(&run, &mut manifest, &req, &tools.ncu, &app(run_dir::NCU_TIMINGS_JSON)?)?;
        error = error.or(ncu_error);
    }
    let status = Status::of(error.as_ref());
    if builtin {
        provenance::add_model_metadata(&run, provenance::inputs(cfg, &nsys_app, true))?;
    }
    if status != Status::Interrupted {
        reports_stage(&run, &mut manifest)?;
    }
    close(&run, manifest, status)?;
    Ok(Outcome { run_dir: run.path().to_path_buf(), status, error })
}

/// `runner.run.baseline`: the built-in workload once without any profiler,
/// its timings in their own file, for the overhead disclosure.
fn baseline_stage(run: &RunDir, manifest: &mut ManifestWriter, app: &[OsString]) -> Result<Option<Error>, Error> {
    let spec = Spawn::new(app.to_vec())
        .stdout(Sink::File(run.join("workload/baseline.stdout.log")))
        .stderr(Sink::File(run.join("workload/baseline.stderr.log")));
    run.subdir(run_dir::WORKLOAD_DIR)?;
    let i = manifest.begin("baseline", spec.argv_strings())?;
    let done = with_progress("baseline", || process::run(&spec))?;
    let failure = match done.exit {
        Exit::Code(0) => None,
        Exit::Interrupted => Some(Error::new(ErrorKind::Interrupted, "interrupted during the unprofiled baseline run")),
        _ => Some(
            Error::new(ErrorKind::StageFailed, format!("the unprofiled baseline run {}", done.describe()))
                .with_hint("see workload/baseline.stderr.log in the run directory"),
        ),
    };
    let status = Status::of(failure.as_ref());
    manifest.finish(i, status, |s| {
        s.exit = Some(ExitInfo::from(&done));
        s.artifacts = vec![run_dir::BASELINE_TIMINGS_JSON.into()];
        s.reason = failure.as_ref().map(|e| e.message.clone());
        s.hint = failure.as_ref().and_then(|e| e.hint.clone());
    })?;
    Ok(failure)
}

/// The `reports` stage: kernels, operators and the stakeholder summary, from
/// the artifacts written so far. A failure here fails the stage, not the run.
fn reports_stage(run: &RunDir, manifest: &mut ManifestWriter) -> Result<(), Error> {
    let i = manifest.begin("reports", Vec::new())?;
    let result = crate::report::write_summaries(run);
    manifest.finish(i, if result.is_ok() { Status::Ok } else { Status::Failed }, |s| {
        s.artifacts = result.as_ref().cloned().unwrap_or_default();
        s.reason = result.as_ref().err().map(|e| e.message.clone());
        s.hint = result.as_ref().err().and_then(|e| e.hint.clone());
    })
}

/// The manifest's final status, then `report.md`, which shows it.
fn close(run: &RunDir, mut manifest: ManifestWriter, status: Status) -> Result<(), Error> {
    manifest.close(status)?;
    crate::report::write_index(run)
}

/// `llmperf import nsys FILE`: the nsys analysis of an existing report.
pub fn import_nsys(resolved: &Resolved, file: &Path, out: Option<&Path>, argv: Vec<String>) -> Result<Outcome, Error> {
    let cfg = &resolved.config;
    if !file.is_file() {
        return Err(Error::usage(format!("{}: no such file", file.display()))
            .with_hint("pass a .nsys-rep, .qdrep, the .sqlite of `nsys export --type sqlite`, or the CSV of `nsys stats --report cuda_gpu_kern_sum`"));
    }
    let run = match out {
        Some(dir) => RunDir::create_at(dir)?,
        None => RunDir::create(&cfg.runner.artifacts.root)?,
    };
    run.write(run_dir::CONFIG_YAML, resolved.to_yaml().as_bytes())?;
    let tool = Tool::probe(crate::tools::Kind::Nsys, &cfg.pipeline.nsys.executable).ok();
    let mut manifest = ManifestWriter::extend(&run, argv)?;
    let file = absolute(file);
    let error = crate::nsys_analysis::analyze(
        &run,
        &mut manifest,
        tool.as_ref(),
        &file,
        cfg.runner.run.top_n_kernels as usize,
    )?;
    let status = if error.is_some() { Status::Failed } else { Status::Ok };
    reports_stage(&run, &mut manifest)?;
    close(&run, manifest, status)?;
    Ok(Outcome { run_dir: run.path().to_path_buf(), status, error })
}

/// `llmperf report RUN_DIR`: every report rebuilt from the run's raw artifacts
/// (nsys/report.sqlite, the ncu CSVs, timings, env) and its config.yaml, so
/// that a newer llmperf, or another machine, can render an old run again.
pub fn report(dir: &Path) -> Result<PathBuf, Error> {
    let run = RunDir::open(dir)?;
    let cfg = crate::config::load_resolved(&run.join(run_dir::CONFIG_YAML))?;
    let top_n = cfg.runner.run.top_n_kernels as usize;
    if run.join(run_dir::NSYS_SQLITE).is_file() {
        crate::nsys_analysis::write_outputs(&run, &run.join(run_dir::NSYS_SQLITE), top_n)?;
    } else if let Some(csv) =
        run_dir::NSYS_KERNEL_SUMMARIES.iter().map(|f| run.join(f)).find(|p| p.metadata().is_ok_and(|m| m.len() > 0))
    {
        crate::nsys_analysis::write_summary_outputs(&run, &csv, top_n)?;
    }
    let inputs = crate::ncu_stage::saved_inputs(&run);
    if !inputs.is_empty() || run.join(run_dir::NCU_PLAN).is_file() {
        let (report, roofline) = crate::ncu_analysis::build_for_run(&run, &cfg, &inputs)?;
        crate::ncu_analysis::write(&run, &report, &roofline)?;
    }
    crate::report::write_summaries(&run)?;
    crate::report::write_index(&run)?;
    Ok(run.path().to_path_buf())
}

/// `llmperf import ncu FILE`: region reports from an existing ncu report or CSV.
/// The input is copied into the run directory first, so the run can be
/// rebuilt from it alone.
pub fn import_ncu(
    resolved: &Resolved,
    files: &[PathBuf],
    out: Option<&Path>,
    ranges: Vec<String>,
    argv: Vec<String>,
) -> Result<Outcome, Error> {
    if let Some(file) = files.iter().find(|f| !f.is_file()) {
        return Err(Error::usage(format!("{}: no such file", file.display())).with_hint(
            "pass a .ncu-rep, or a CSV from `ncu --import R.ncu-rep --csv --page details` (or --page raw)",
        ));
    }
    let cfg = &resolved.config;
    let run = match out {
        Some(dir) => RunDir::create_at(dir)?,
        None => RunDir::create(&cfg.runner.artifacts.root)?,
    };
    run.write(run_dir::CONFIG_YAML, resolved.to_yaml().as_bytes())?;
    let mut manifest = ManifestWriter::extend(&run, argv)?;
    run.subdir(run_dir::NCU_DIR)?;
    // The plan of an import: one pass per file, so that `llmperf report` reads them the same way.
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let plan = crate::plan::imported(cfg, ranges, &names);
    let mut inputs = Vec::new();
    for (file, pass) in files.iter().zip(&plan.passes) {
        let is_report = file.extension().is_some_and(|e| e == "ncu-rep");
        let copy = run.join(&run_dir::ncu_pass_file(&pass.name, if is_report { "ncu-rep" } else { "csv" }));
        run_dir::keep_input(file, &copy)?;
        let csv = if is_report {
            match render_import(&run, &mut manifest, cfg, &copy, &pass.name)? {
                Ok(csv) => csv,
                Err(e) => {
                    manifest.close(Status::Failed)?;
                    return Ok(Outcome { run_dir: run.path().to_path_buf(), status: Status::Failed, error: Some(e) });
                }
            }
        } else {
            copy
        };
        inputs.push(crate::ncu_analysis::Input { csv, attribution: pass.attribution() });
    }
    run.write_json(run_dir::NCU_PLAN, &plan)?;
    let error = crate::ncu_stage::regions(&run, &mut manifest, cfg, &inputs)?;
    let status = if error.is_some() { Status::Failed } else { Status::Ok };
    reports_stage(&run, &mut manifest)?;
    close(&run, manifest, status)?;
    Ok(Outcome { run_dir: run.path().to_path_buf(), status, error })
}

/// The `ncu_import` stage: render a copied .ncu-rep to CSV with the installed ncu.
fn render_import(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    cfg: &crate::config::Config,
    report: &Path,
    pass: &str,
) -> Result<Result<PathBuf, Error>, Error> {
    let tool = match Tool::probe(crate::tools::Kind::Ncu, &cfg.pipeline.ncu.executable) {
        Ok(t) => t,
        Err(e) => {
            let e = e.with_hint("install Nsight Compute, or pass a CSV made elsewhere with `ncu --import R.ncu-rep --csv --page details`");
            manifest.skip("ncu_import", &e.message, e.hint.as_deref().unwrap_or_default())?;
            return Ok(Err(e));
        }
    };
    let stage = if pass == "import" { "ncu_import".to_string() } else { format!("ncu_import:{pass}") };
    let i = manifest.begin(&stage, Vec::new())?;
    let made = crate::ncu_stage::render_csv(run, &tool, report, pass)?;
    let csv = crate::ncu_analysis::csv_of(run, pass);
    let error = csv.is_none().then(|| {
        Error::new(ErrorKind::Unparseable, format!("{} {} could not render {}", tool.path.display(), tool.version, report.display()))
            .with_hint("a report newer than this ncu cannot be read: render it with the ncu that wrote it, then import the CSV (see ncu/import.*.stderr.log)")
    });
    manifest.finish(i, if error.is_some() { Status::Failed } else { Status::Ok }, |s| {
        s.artifacts = made;
        s.reason = error.as_ref().map(|e| e.message.clone());
        s.hint = error.as_ref().and_then(|e| e.hint.clone());
    })?;
    Ok(csv.ok_or_else(|| error.expect("set when there is no CSV")))
}

/// The built-in workload: this binary re-executed with the run's resolved
/// configuration, so the profiled process runs exactly what config.yaml says.
fn self_command(run: &RunDir, no_nvtx: bool, timings: &str) -> Result<Vec<OsString>, Error> {
    let exe = std::env::current_exe()
        .map_err(|e| Error::new(ErrorKind::Internal, format!("cannot locate the llmperf executable: {e}")))?;
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
    if no_nvtx {
        argv.push("--no-nvtx".into());
    }
    Ok(argv)
}

/// `llmperf workload`: run the built-in workload without a profiler, into
/// `run_dir` (under `profile`) or a new run directory, and write its timings.
pub fn workload(
    cfg: &crate::config::Config,
    run_dir: Option<&Path>,
    nvtx: bool,
    timings: &str,
    argv: Vec<String>,
) -> Result<PathBuf, Error> {
    let Some(dir) = run_dir else {
        let run = RunDir::create(&cfg.runner.artifacts.root)?;
        run.write_yaml(run_dir::CONFIG_YAML, cfg)?;
        run.write_yaml(run_dir::INPUTS_YAML, &provenance::inputs(cfg, &[], true))?;
        let mut manifest = ManifestWriter::start(&run, argv.clone())?;
        let i = manifest.begin("workload", argv)?;
        let result = run_workload(cfg, &run, nvtx, timings);
        provenance::add_model_metadata(&run, provenance::inputs(cfg, &[], true))?;
        let status = if result.is_ok() { Status::Ok } else { Status::Failed };
        manifest.finish(i, status, |s| {
            s.artifacts = result.iter().map(|_| run_dir::TIMINGS_JSON.to_string()).collect();
            s.reason = result.as_ref().err().map(|e| e.message.clone());
            s.hint = result.as_ref().err().and_then(|e| e.hint.clone());
        })?;
        manifest.close(status)?;
        return result.map(|_| run.path().to_path_buf());
    };
    let run = RunDir::open(dir)?;
    run_workload(cfg, &run, nvtx, timings)?;
    Ok(run.path().to_path_buf())
}

fn run_workload(cfg: &crate::config::Config, run: &RunDir, nvtx: bool, file: &str) -> Result<(), Error> {
    let timings = crate::plugin::run_workload(cfg, nvtx)?;
    run.subdir(run_dir::WORKLOAD_DIR)?;
    run.write_json(file, &timings)?;
    print_timings(&timings);
    Ok(())
}

/// A short table of stage timings on stderr (stdout carries the run directory).
fn print_timings(t: &crate::timings::Timings) {
    let variant = t.model.variant.as_deref().map(|v| format!(" ({v})")).unwrap_or_default();
    eprintln!(
        "{}{variant}: {} parameters, {} on {}, batch {}, {} iterations",
        t.model.name, t.model.parameters, t.dtype, t.device, t.batch_size, t.iters
    );
    eprintln!("{:<28} {:>6} {:>11} {:>11} {:>11}", "stage", "calls", "mean ms", "median ms", "p90 ms");
    for (name, s) in &t.stages {
        eprintln!("{name:<28} {:>6} {:>11.3} {:>11.3} {:>11.3}", s.count, s.mean_ms, s.median_ms, s.p90_ms);
    }
    if let Some(tps) = t.throughput.decode_tokens_per_s {
        eprintln!("decode: {tps:.1} tokens/s");
    }
}

fn check_command(command: &[OsString]) -> Result<(), Error> {
    let Some(first) = command.first() else {
        return Err(Error::usage("no command to profile")
            .with_hint("give one after `--`: llmperf profile -- python infer.py --batch 8"));
    };
    if first.to_string_lossy().starts_with('-') {
        return Err(Error::usage(format!("the command to profile starts with `{}`", first.to_string_lossy()))
            .with_hint("put llmperf's own options before `--` and the program to run right after it"));
    }
    Ok(())
}

/// Run the application under nsys. A missing nsys skips the stage (with a
/// hint) rather than failing the run before provenance is written.
fn nsys_stage(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    req: &Request,
    probe: &Result<Tool, Error>,
    app: &[OsString],
) -> Result<Option<Error>, Error> {
    let cfg = &req.resolved.config.pipeline.nsys;
    let tool = match gate(manifest, "nsys", cfg.enable, probe)? {
        Gate::Run(t) => t,
        Gate::Skipped(error) => return Ok(error),
    };
    run.subdir(run_dir::NSYS_DIR)?;
    let base = absolute(&run.join(run_dir::NSYS_REPORT_BASE));
    let spec = Spawn::new(nsys::profile_argv(&tool.path, cfg, &base, app))
        .stdout(Sink::File(run.join(run_dir::NSYS_STDOUT)))
        .stderr(Sink::File(run.join(run_dir::NSYS_STDERR)))
        .timeout((cfg.timeout_s > 0).then(|| Duration::from_secs(cfg.timeout_s)))
        .companions(nsys::agents_of);
    let spec = spec.linger_limit(Duration::from_secs(cfg.postprocess_timeout_s));
    run.write(run_dir::NSYS_CMD, format!("{}\n", spec.display()).as_bytes())?;
    tracing::info!("nsys: {}", spec.display());
    let i = manifest.begin("nsys", spec.argv_strings())?;
    let mut diagnoses = Vec::new();
    let mut kept_logs = Vec::new();
    let attempts = 1 + cfg.hang_retries;
    let mut attempt = 1;
    let done = loop {
        let done = with_progress("nsys", || process::run(&spec))?;
        if done.exit != Exit::Stalled || attempt == attempts {
            break done;
        }
        diagnoses.push(nsys::hang_diagnosis(attempt, cfg.postprocess_timeout_s));
        kept_logs.extend(keep_attempt_logs(run, attempt));
        tracing::warn!("nsys hung converting its capture (attempt {attempt} of {attempts}); capturing again");
        attempt += 1;
    };
    if done.exit == Exit::Stalled {
        diagnoses.push(nsys::hang_diagnosis(attempt, cfg.postprocess_timeout_s));
    }
    let report = find_report(&base);
    let mut artifacts = vec![run_dir::NSYS_CMD.to_string(), run_dir::NSYS_STDOUT.into(), run_dir::NSYS_STDERR.into()];
    artifacts.extend(kept_logs);
    artifacts.extend(report.as_ref().map(|r| run.relative(r)));
    if run.join(run_dir::TIMINGS_JSON).is_file() {
        artifacts.push(run_dir::TIMINGS_JSON.into());
    }
    let (status, failure) = judge_nsys(&done, report.is_some());
    manifest.finish(i, status, |s| {
        s.exit = Some(ExitInfo::from(&done));
        s.artifacts = artifacts;
        s.reason = failure.as_ref().map(|e| e.message.clone());
        s.hint = failure.as_ref().and_then(|e| e.hint.clone());
        s.diagnoses = diagnoses;
    })?;
    // A failed workload's capture is still worth reading.
    if let (Some(report), false) = (report, done.exit == Exit::Interrupted) {
        let top_n = req.resolved.config.runner.run.top_n_kernels as usize;
        let analysis = crate::nsys_analysis::analyze(run, manifest, Some(tool), &report, top_n)?;
        return Ok(failure.or(analysis));
    }
    Ok(failure)
}

/// nsys exits with the application's status (128+N when a signal killed it)
/// and still writes the report, so a failing workload keeps its capture.
fn judge_nsys(done: &Finished, have_report: bool) -> (Status, Option<Error>) {
    let failed = |msg: String, hint: &str| Some(Error::new(ErrorKind::StageFailed, msg).with_hint(hint));
    let see_log = "see nsys/stderr.log and nsys/stdout.log in the run directory";
    match done.exit {
        Exit::Interrupted => (
            Status::Interrupted,
            Some(
                Error::new(ErrorKind::Interrupted, "interrupted; nsys and the workload were stopped")
                    .with_hint("everything written so far is kept in the run directory"),
            ),
        ),
        Exit::TimedOut => (
            Status::Failed,
            failed(format!("nsys {}", done.describe()), "raise pipeline.nsys.timeout_s, or shorten the workload"),
        ),
        Exit::Stalled => (
            Status::Failed,
            failed(
                "nsys hung converting its capture after the application finished".into(),
                "a known Nsight Systems 2022.4 problem on some hosts: run again, or raise pipeline.nsys.hang_retries (pipeline.nsys.postprocess_timeout_s for very large captures)",
            ),
        ),
        Exit::Code(0) if have_report => (Status::Ok, None),
        Exit::Code(0) => (
            Status::Failed,
            failed(
                "nsys exited 0 but wrote no report".into(),
                "nsys needs its importer (see scripts/setup.sh and REFERENCE §1); see nsys/stderr.log",
            ),
        ),
        Exit::Code(c) if c > 128 && c - 128 < 32 => (
            Status::Failed,
            failed(
                format!(
                    "the profiled command was killed by signal {} ({}) under nsys",
                    c - 128,
                    process::signal_name(c - 128)
                ),
                see_log,
            ),
        ),
        Exit::Code(c) => {
            (Status::Failed, failed(format!("the profiled command exited with code {c} under nsys"), see_log))
        }
        Exit::Signal(s) => {
            (Status::Failed, failed(format!("nsys was killed by signal {s} ({})", process::signal_name(s)), see_log))
        }
    }
}

/// The Nsight Compute stage (src/ncu_stage.rs), when enabled, found, and able
/// to do what the configuration asks of this ncu version.
fn ncu_stage(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    req: &Request,
    probe: &Result<Tool, Error>,
    app: &[OsString],
) -> Result<Option<Error>, Error> {
    let cfg = &req.resolved.config;
    let tool = match gate(manifest, "ncu", cfg.pipeline.ncu.enable, probe)? {
        Gate::Run(t) => t,
        Gate::Skipped(error) => return Ok(error),
    };
    let cli = &cfg.pipeline.ncu.ncu_cli;
    if let Err(e) = ncu::check_version(cli, tool).and_then(|_| ncu::check_flags(cli, tool)) {
        manifest.skip("ncu", &e.message, e.hint.as_deref().unwrap_or_default())?;
        return Ok(Some(e));
    }
    crate::ncu_stage::run(run, manifest, cfg, tool, app)
}

enum Gate<'t> {
    Run(&'t Tool),
    /// Recorded as skipped; the error is set when the profiler was wanted but is missing.
    Skipped(Option<Error>),
}

/// A profiler stage runs when it is enabled and its tool was found; otherwise
/// it is recorded as skipped, with the reason and a hint.
fn gate<'t>(
    manifest: &mut ManifestWriter,
    stage: &str,
    enabled: bool,
    probe: &'t Result<Tool, Error>,
) -> Result<Gate<'t>, Error> {
    if !enabled {
        let reason = format!("disabled (pipeline.{stage}.enable=false)");
        let hint = match stage {
            "ncu" => "enable with --replay-mode MODE or pipeline.ncu.enable=true".to_string(),
            _ => format!("enable with pipeline.{stage}.enable=true"),
        };
        manifest.skip(stage, &reason, &hint)?;
        return Ok(Gate::Skipped(None));
    }
    match probe {
        Ok(t) => Ok(Gate::Run(t)),
        Err(e) => {
            manifest.skip(stage, &e.message, e.hint.as_deref().unwrap_or_default())?;
            Ok(Gate::Skipped(Some(e.clone())))
        }
    }
}

/// Keep a hung attempt's logs as `nsys/stdout.attemptN.log` before the next attempt overwrites them.
fn keep_attempt_logs(run: &RunDir, attempt: u32) -> Vec<String> {
    let mut kept = Vec::new();
    for log in [run_dir::NSYS_STDOUT, run_dir::NSYS_STDERR] {
        let to = log.replace(".log", &format!(".attempt{attempt}.log"));
        if std::fs::rename(run.join(log), run.join(&to)).is_ok() {
            kept.push(to);
        }
    }
    kept
}

/// `<base>.nsys-rep` (nsys 2021.3+) or `<base>.qdrep` (older).
fn find_report(base: &Path) -> Option<PathBuf> {
    ["nsys-rep", "qdrep"].iter().map(|ext| base.with_extension(ext)).find(|p| p.is_file())
}

/// A spinner with the stage and elapsed time on a terminal; nothing otherwise
/// (the stage's start and end are logged either way).
pub(crate) fn with_progress<T>(stage: &str, f: impl FnOnce() -> T) -> T {
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg} {elapsed}") {
        bar.set_style(style);
    }
    bar.set_message(format!("{stage}: running"));
    bar.enable_steady_tick(Duration::from_millis(200));
    let start = std::time::Instant::now();
    let out = f();
    bar.finish_and_clear();
    tracing::info!("{stage} finished in {:.1} s", start.elapsed().as_secs_f64());
    out
}
