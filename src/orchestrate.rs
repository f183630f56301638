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
use crate::signals;
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
    let cfg = &req.resolved.config;
    nsys::validate(&cfg.pipeline.nsys)?;
    let builtin = req.command.is_empty();
    if !builtin {
        check_command(&req.command)?;
    }
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
    let stages = |manifest: &mut ManifestWriter| -> Result<Option<Error>, Error> {
        let mut error = None;
        if builtin && cfg.runner.run.baseline {
            error = baseline_stage(&run, manifest, &app(run_dir::BASELINE_TIMINGS_JSON)?)?;
        }
        if !stopped(&error) {
            error = nsys_stage(&run, manifest, &req, &tools.nsys, &nsys_app)?.or(error);
        }
        if !stopped(&error) {
            let ncu_error = ncu_stage(&run, manifest, &req, &tools.ncu, &app(run_dir::NCU_TIMINGS_JSON)?)?;
            error = error.or(ncu_error);
        }
        if builtin {
            provenance::add_model_metadata(&run, provenance::inputs(cfg, &nsys_app, true))?;
        }
        // A stopped profiler's capture was analysed: report it, unless the user asked again.
        if !signals::pending() {
            reports_stage(&run, manifest)?;
        }
        Ok(error.or_else(|| signals::pending().then(signals::interrupted)))
    };
    let error = guarded(&mut manifest, stages);
    let status = Status::of(error.as_ref());
    close(&run, manifest, status)?;
    Ok(Outcome { run_dir: run.path().to_path_buf(), status, error })
}

/// A stage ended the run: later profiler stages do not start.
fn stopped(error: &Option<Error>) -> bool {
    error.as_ref().is_some_and(|e| e.kind == ErrorKind::Interrupted)
}

/// The stages of a run, and the error that ends it. One that escapes a stage
/// (I/O, a checkpoint after a signal) ends the run all the same: the stage it
/// left `running` takes the run's status, and the run directory is still the result.
fn guarded(
    manifest: &mut ManifestWriter,
    stages: impl FnOnce(&mut ManifestWriter) -> Result<Option<Error>, Error>,
) -> Option<Error> {
    stages(manifest).unwrap_or_else(|e| {
        manifest.end_running(&e);
        Some(e)
    })
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
        Exit::Interrupted => Some(signals::interrupted()),
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
    manifest.finish(i, Status::of(result.as_ref().err()), |s| {
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
    crate::parse::input::check(file)?;
    let run = output_dir(out, cfg)?;
    let _lock = run.lock()?;
    run.write(run_dir::CONFIG_YAML, resolved.to_yaml().as_bytes())?;
    let tool = Tool::probe(crate::tools::Kind::Nsys, &cfg.pipeline.nsys.executable).ok();
    let mut manifest = ManifestWriter::extend(&run, argv)?;
    let file = absolute(file);
    let error = guarded(&mut manifest, |manifest| {
        let top_n = cfg.runner.run.top_n_kernels as usize;
        let error = crate::nsys_analysis::analyze(&run, manifest, tool.as_ref(), &file, top_n)?;
        signals::check()?;
        reports_stage(&run, manifest)?;
        Ok(error)
    });
    let status = Status::of(error.as_ref());
    close(&run, manifest, status)?;
    Ok(Outcome { run_dir: run.path().to_path_buf(), status, error })
}

/// The run directory of an import: `-o DIR` (new, empty, or a run directory
/// to add to), else a new one under the artifacts root.
fn output_dir(out: Option<&Path>, cfg: &crate::config::Config) -> Result<RunDir, Error> {
    match out {
        Some(dir) => RunDir::create_at(dir),
        None => RunDir::create(&cfg.runner.artifacts.root),
    }
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
/// rebuilt from it alone. An import into a run directory adds its passes to
/// the ones already there.
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
    let error = guarded(&mut manifest, |manifest| import_ncu_stages(&run, manifest, cfg, files, ranges));
    let status = Status::of(error.as_ref());
    close(&run, manifest, status)?;
    Ok(Outcome { run_dir: run.path().to_path_buf(), status, error })
}

fn import_ncu_stages(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    cfg: &crate::config::Config,
    files: &[PathBuf],
    ranges: Vec<String>,
) -> Result<Option<Error>, Error> {
    run.subdir(run_dir::NCU_DIR)?;
    // The plan of an import: one pass per file, so that `llmperf report` reads them the same way.
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let earlier = run.read_json::<crate::plan::NcuPlan>(run_dir::NCU_PLAN);
    let plan = crate::plan::imported(cfg, ranges, &names, earlier.as_ref());
    let added = &plan.passes[plan.passes.len() - files.len()..];
    let mut labels = Vec::new();
    for (file, pass) in files.iter().zip(added) {
        let is_report = file.extension().is_some_and(|e| e == "ncu-rep");
        let copy = run.join(&run_dir::ncu_pass_file(&pass.name, if is_report { "ncu-rep" } else { "csv" }));
        run_dir::keep_input(file, &copy)?;
        if is_report {
            if let Err(e) = render_import(run, manifest, cfg, &copy, &pass.name)? {
                return Ok(Some(e));
            }
        } else {
            labels.push((copy, file.clone()));
        }
    }
    run.write_json(run_dir::NCU_PLAN, &plan)?;
    let inputs = crate::ncu_stage::saved_inputs(run);
    signals::check()?;
    let error = crate::ncu_stage::regions(run, manifest, cfg, &inputs)?
        .map(|e| labels.iter().fold(e, |e, (copy, file)| e.naming(copy, file)));
    signals::check()?;
    reports_stage(run, manifest)?;
    Ok(error)
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

/// A short table of stage timings on stderr (stdout carries the run directory);
/// a stderr that cannot be written is no reason to fail.
fn print_timings(t: &crate::timings::Timings) {
    use std::fmt::Write;
    let variant = t.model.variant.as_deref().map(|v| format!(" ({v})")).unwrap_or_default();
    let mut text = format!(
        "{}{variant}: {} parameters, {} on {}, batch {}, {} iterations\n",
        t.model.name, t.model.parameters, t.dtype, t.device, t.batch_size, t.iters
    );
    let _ = writeln!(text, "{:<28} {:>6} {:>11} {:>11} {:>11}", "stage", "calls", "mean ms", "median ms", "p90 ms");
    for (name, s) in &t.stages {
        let _ =
            writeln!(text, "{name:<28} {:>6} {:>11.3} {:>11.3} {:>11.3}", s.count, s.mean_ms, s.median_ms, s.p90_ms);
    }
    if let Some(tps) = t.throughput.decode_tokens_per_s {
        let _ = writeln!(text, "decode: {tps:.1} tokens/s");
    }
    let _ = std::io::Write::write_all(&mut std::io::stderr(), text.as_bytes());
}

/// The command after `--` must name a program that can run: checked here,
/// since under nsys a missing program is only "exit code 1" and a log line.
fn check_command(command: &[OsString]) -> Result<(), Error> {
    let Some(first) = command.first() else {
        return Err(Error::usage("no command to profile")
            .with_hint("give one after `--`: llmperf profile -- python infer.py --batch 8"));
    };
    if first.to_string_lossy().starts_with('-') {
        return Err(Error::usage(format!("the command to profile starts with `{}`", first.to_string_lossy()))
            .with_hint("put llmperf's own options before `--` and the program to run right after it"));
    }
    process::find_program(first).map(|_| ())
}

/// The last `n` bytes of a file (a log that may be long), or nothing.
fn tail_of(path: &Path, n: u64) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let Ok(mut f) = std::fs::File::open(path) else { return Vec::new() };
    let len = f.metadata().map(|m| m.len()).unwrap_or(0);
    let mut buf = Vec::new();
    let _ = f.seek(SeekFrom::Start(len.saturating_sub(n))).and_then(|_| f.read_to_end(&mut buf));
    buf
}

/// ": <last line of stderr>" when a child said something there.
fn last_words(stderr: &[u8]) -> String {
    let text = String::from_utf8_lossy(stderr);
    text.lines().rev().map(str::trim).find(|l| !l.is_empty()).map(|l| format!(": {l}")).unwrap_or_default()
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
        .companions(nsys::agents_of)
        .stop_gracefully(Duration::from_secs(cfg.stop_timeout_s), nsys::application_of);
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
    let said = last_words(&tail_of(&run.join(run_dir::NSYS_STDERR), 4096));
    let (status, failure) = judge_nsys(&done, report.is_some(), &said, cfg);
    manifest.finish(i, status, |s| {
        s.exit = Some(ExitInfo::from(&done));
        s.artifacts = artifacts;
        s.reason = failure.as_ref().map(|e| e.message.clone());
        s.hint = failure.as_ref().and_then(|e| e.hint.clone());
        s.diagnoses = diagnoses;
    })?;
    // A failed workload's capture is still worth reading, and so is the
    // capture of an nsys stopped by a signal: the run goes on to analyse it
    // (and ends `interrupted`); a further signal stops that analysis.
    if let Some(report) = report {
        if done.exit == Exit::Interrupted {
            signals::answer();
        }
        let top_n = req.resolved.config.runner.run.top_n_kernels as usize;
        let analysis = crate::nsys_analysis::analyze(run, manifest, Some(tool), &report, top_n)?;
        return Ok(failure.or(analysis));
    }
    Ok(failure)
}

/// nsys exits with the application's status (128+N when a signal killed it)
/// and still writes the report, so a failing workload keeps its capture.
fn judge_nsys(
    done: &Finished,
    have_report: bool,
    said: &str,
    cfg: &crate::config::schema::NsysConfig,
) -> (Status, Option<Error>) {
    let failed = |msg: String, hint: &str| Some(Error::new(ErrorKind::StageFailed, msg).with_hint(hint));
    let see_log = "see nsys/stderr.log and nsys/stdout.log in the run directory";
    let lost = format!(
        "nsys did not write its capture within pipeline.nsys.stop_timeout_s ({} s) of the stop; nsys 2022.4 sometimes hangs converting a capture: run again, or raise that limit for a very large capture",
        cfg.stop_timeout_s
    );
    match done.exit {
        Exit::Interrupted => {
            let e = signals::interrupted();
            let (kept, hint) = match have_report {
                true => ("nsys was stopped and its capture is analysed", e.hint.unwrap_or_default()),
                false => ("nsys wrote no capture", lost),
            };
            (Status::Interrupted, Some(Error::new(e.kind, format!("{}; {kept}", e.message)).with_hint(hint)))
        }
        Exit::TimedOut => (
            Status::Failed,
            failed(
                format!(
                    "nsys reached pipeline.nsys.timeout_s ({} s) and was stopped ({})",
                    cfg.timeout_s,
                    if have_report { "its capture is analysed" } else { "no capture was written" }
                ),
                if have_report { "raise pipeline.nsys.timeout_s, or shorten the workload" } else { &lost },
            ),
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
        Exit::Code(c) => (
            Status::Failed,
            failed(format!("the profiled command exited with code {c} under nsys{said}"), see_log),
        ),
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
