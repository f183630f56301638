//! pipeline: the commands that make run directories, each a short list of
//! stages (stage.rs records them): `profile` (workload.rs, nsys.rs, ncu.rs),
//! `import nsys`, `import ncu`, and `report`, which starts again from the
//! saved raw outputs. Raw outputs land in the run directory before anything
//! parses them, and the manifest is rewritten after every stage change, so a
//! crash, a parser bug or Ctrl-C never costs the capture.
pub(crate) mod hf;
mod launcher;
mod merge;
mod ncu;
mod nsys;
mod perfetto;
mod serve;
mod stage;
mod torch;
mod workload;

use std::path::{Path, PathBuf};

pub(crate) use crate::plan::Request;
pub(crate) use workload::workload;

use crate::config::Resolved;
use crate::error::{Error, ErrorKind};
use crate::manifest::ManifestWriter;
use crate::plan::{Plan, Profiler, Use};
use crate::profile::tools::Probed;
use crate::profile::tools::{Kind, Tool};
use crate::provenance;
use crate::run_dir::{self, absolute, RunDir};
use crate::signals;
pub(crate) use stage::Outcome;
use stage::{Done, RunStatus};

pub(crate) use launcher::{launch_rank, launcher_of};
pub(crate) use merge::merge;

/// `llmperf profile`: the tools probed, the plan, the run directory and
/// provenance, then the baseline, nsys and ncu stages as the plan has them,
/// then the reports. Under `--launcher srun`, srun's job instead.
pub(crate) fn profile(req: Request) -> Result<Outcome, Error> {
    let cfg = &req.resolved.config;
    let tools = Probed::probe(cfg);
    let plan = match crate::plan::plan(&req, &tools)? {
        Plan::Run(plan) => plan,
        Plan::Srun(job) => return launcher::srun(&job),
    };
    if let (true, crate::config::schema::Device::Cuda(n)) = (plan.builtin(), cfg.device) {
        check_cuda_device(n)?;
    }
    if plan.idle() {
        tracing::warn!(
            "nsys, ncu and torch.profiler are all disabled: the command does not run and nothing is profiled (hint: drop --no-nsys, pass --tracer torch, or --replay-mode MODE for ncu)"
        );
    }
    let run = RunDir::create_planned(&plan.new_run(), &plan.files)?;
    tracing::info!("run directory: {}", run.path().display());
    let argvs = &plan.argvs;
    let app = &argvs.nsys;
    provenance::write(&run, &req.resolved, app, plan.builtin(), &tools)?;
    let mut manifest = ManifestWriter::start(&run, req.llmperf_argv.clone())?;
    let mut verdict = RunStatus::default();
    let mut perfetto = None;
    let stages = (|| {
        if plan.baseline {
            verdict.add(workload::baseline(&run, &mut manifest, &argvs.baseline)?);
        }
        if plan.torch.is_some() && !verdict.stopped() {
            torch::capture(&run, &mut manifest, &mut verdict, cfg, &argvs.torch)?;
            // A new run directory: torch/capture.json is this capture's.
            perfetto = perfetto::PerfettoExport::of_torch_run(&run, cfg)?;
        }
        // Each profiler's stage as the plan has it: skipped, the application
        // run plainly, unavailable, or profiled.
        for (profiler, stage) in [(Profiler::Nsys, "nsys"), (Profiler::Ncu, "ncu")] {
            if verdict.stopped() {
                break;
            }
            let (uses, app) = match profiler {
                Profiler::Nsys => (&plan.nsys, &argvs.nsys),
                Profiler::Ncu => (&plan.ncu, &argvs.ncu),
            };
            match (uses, profiler) {
                (Use::Off { reason, hint }, _) => verdict.add(stage::skip(&mut manifest, stage, reason, hint)?),
                (Use::Plain { times, why }, _) => {
                    verdict.add(workload::plain(&run, &mut manifest, stage, app, *times, why)?)
                }
                (Use::Unavailable(e), _) => verdict.add(stage::unavailable(&mut manifest, stage, e.clone())?),
                (Use::Profiled(tool), Profiler::Nsys) => {
                    let with = nsys::Capture { tool, app, nsys: &plan.nsys_config };
                    nsys::capture(&run, &mut manifest, &mut verdict, &mut perfetto, cfg, with)?
                }
                (Use::Profiled(tool), Profiler::Ncu) => {
                    ncu::profile(&run, &mut manifest, &mut verdict, cfg, tool, &plan, app)?
                }
            }
        }
        if plan.builtin() {
            provenance::add_model_metadata(&run, provenance::inputs(cfg, app, true))?;
            provenance::add_libtorch(&run)?;
        }
        if plan.annotates() {
            warn_without_module_ranges(&run, plan.annotate.mode);
        } else if plan.python && !plan.builtin() {
            warn_python_without_ranges(&run);
        }
        Ok(())
    })();
    finish(&run, manifest, verdict, stages, perfetto)
}

/// A Python command, profiled without `--annotate`, whose capture holds no
/// NVTX range: the generic "check that nsys traces nvtx" does not tell such a
/// user that llmperf can put the ranges in without a code change.
fn warn_python_without_ranges(run: &RunDir) {
    let timeline = run_dir::Timeline::of(run);
    let Some(regions) = run.read_json::<crate::aggregate::nsys::RegionsReport>(timeline.regions_file()) else {
        return;
    };
    // A torch trace always has its operators: what it may lack is ranges of the program's own.
    let marked = regions.regions.iter().any(|r| r.domain != "cpu_op");
    if timeline == run_dir::Timeline::Torch && !marked {
        tracing::warn!(
            "the Python program marked no range of its own, so its regions are its operators only (hint: `llmperf profile --tracer torch --annotate modules -- CMD` adds a range per nn.Module forward, with no change to the program)"
        );
    } else if !marked {
        tracing::warn!(
            "the Python program marked no NVTX range, so nothing is reported per region (hint: `llmperf profile --annotate modules -- CMD` gives a range per nn.Module forward, `--annotate ops` one per PyTorch operator, with no change to the program; annotate.mode)"
        );
    }
}

/// `--annotate modules` whose capture holds no range of its domain: a
/// command that is not Python, never imports torch, or calls no module; or an
/// NVTX library the profiler does not see. Said loudly: the reports would
/// otherwise look like a program without modules.
fn warn_without_module_ranges(run: &RunDir, mode: crate::config::schema::AnnotateMode) {
    let timeline = run_dir::Timeline::of(run);
    let Some(regions) = run.read_json::<crate::aggregate::nsys::RegionsReport>(timeline.regions_file()) else {
        return;
    };
    let (domain, found) = match timeline {
        // Under torch.profiler the module ranges are record_function ranges,
        // known by the names the bootstrap wrote down.
        run_dir::Timeline::Torch => {
            let names = nsys::module_classes(run).unwrap_or_default();
            (
                "user_annotation",
                regions.regions.iter().any(|r| r.domain == "user_annotation" && names.contains_key(&r.name)),
            )
        }
        run_dir::Timeline::Nsys => {
            let domain = crate::plan::annotate::domain_of(mode);
            (if domain.is_empty() { "default" } else { domain }, regions.regions.iter().any(|r| r.domain == domain))
        }
    };
    if !found {
        tracing::warn!(
            "--annotate modules: the capture holds no range of the {domain} domain (hint: the command must be a Python program that imports torch and calls nn.Module forwards; see {} in the run directory and the application's stderr for the bootstrap's own message)",
            run_dir::ANNOTATE_BOOTSTRAP
        );
    }
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
    crate::parse::input::check_kind(file, "nsys")?;
    let (run, _lock) = open_run(resolved, out)?;
    let tool = Tool::probe(Kind::Nsys, &cfg.pipeline.nsys.executable).ok();
    let mut manifest = ManifestWriter::extend(&run, argv)?;
    let mut verdict = RunStatus::default();
    let mut perfetto = None;
    let opts = nsys::IngestOptions::of(cfg);
    let stages =
        nsys::analyze(&run, &mut manifest, (&mut verdict, &mut perfetto), tool.as_ref(), &absolute(file), &opts);
    finish(&run, manifest, verdict, stages, perfetto)
}

pub(crate) use serve::{Request as ServeRequest, Requests as ServeRequests};

/// `llmperf serve`: a serving engine under load (see [`serve`]).
pub(crate) fn serve(
    resolved: &Resolved,
    request: &ServeRequest,
    out: Option<&Path>,
    argv: Vec<String>,
) -> Result<Outcome, Error> {
    let cfg = &resolved.config;
    let (run, _lock) = open_run(resolved, out)?;
    let mut manifest = ManifestWriter::extend(&run, argv)?;
    let mut verdict = RunStatus::default();
    let opts = nsys::IngestOptions::of(cfg);
    let stages = serve::run(&run, &mut manifest, &mut verdict, request, &opts);
    finish(&run, manifest, verdict, stages, None)
}

/// `llmperf import torch FILE`: the region model of a PyTorch profiler trace.
pub(crate) fn import_torch(
    resolved: &Resolved,
    file: &Path,
    out: Option<&Path>,
    argv: Vec<String>,
) -> Result<Outcome, Error> {
    let cfg = &resolved.config;
    if file.is_dir() {
        return Err(Error::usage(format!("{} is a directory: one trace file is read here", file.display()))
            .with_hint("`llmperf import torch DIR` reads the traces in it as the ranks of one job"));
    }
    crate::parse::input::check_kind(file, "torch")?;
    let (run, _lock) = open_run(resolved, out)?;
    let mut manifest = ManifestWriter::extend(&run, argv)?;
    let mut verdict = RunStatus::default();
    let opts = nsys::IngestOptions::of(cfg);
    let mut perfetto = None;
    let stages = torch::analyze(&run, &mut manifest, &absolute(file), &opts).and_then(|o| {
        // Only where this import wrote torch/capture.json: the directory may hold an earlier one.
        if matches!(o, stage::StageOutcome::Ok) {
            perfetto = perfetto::PerfettoExport::of_torch_run(&run, cfg)?;
        }
        verdict.add(o);
        Ok(())
    });
    finish(&run, manifest, verdict, stages, perfetto)
}

/// `llmperf import torch FILE FILE…`: the traces of one job's ranks, each
/// imported into `<job>/ranks/<rank>/` with a `rank.json` (its rank: the
/// trace's `distributedInfo.rank`, else the last number in its file name),
/// then merged as `llmperf merge` does.
pub(crate) fn import_torch_ranks(
    resolved: &Resolved,
    files: &[PathBuf],
    out: Option<&Path>,
    argv: Vec<String>,
) -> Result<Outcome, Error> {
    let mut ranked: Vec<(u32, PathBuf, String)> = Vec::new();
    for file in files {
        crate::parse::input::check_kind(file, "torch")?;
        let (rank, from) = match crate::parse::torch::peek_rank(file).and_then(|r| u32::try_from(r).ok()) {
            Some(r) => (r, "distributedInfo.rank".to_string()),
            None => {
                let [(r, _)] = crate::plan::rank::ranks_of_files(std::slice::from_ref(file))?[..] else {
                    unreachable!("one file, one rank")
                };
                (r, format!("file name ({})", file.file_name().unwrap_or_default().to_string_lossy()))
            }
        };
        if let Some((_, other, _)) = ranked.iter().find(|(r, _, _)| *r == rank) {
            return Err(Error::usage(format!("{} and {} are both rank {rank}", other.display(), file.display()))
                .with_hint(
                    "pass each rank's trace once (its rank: distributedInfo.rank, else the last number in its name)",
                ));
        }
        ranked.push((rank, file.clone(), from));
    }
    ranked.sort_by_key(|(r, _, _)| *r);
    let job = job_dir(out, resolved)?;
    let name = job.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let mut error = None;
    for (rank, file, rank_from) in ranked {
        let dir = job.join(run_dir::RANKS_DIR).join(rank.to_string());
        let outcome = import_torch(resolved, &file, Some(&dir), argv.clone())?;
        let run = RunDir::open(&dir)?;
        let world_size = run
            .read_json::<serde_json::Value>(run_dir::TORCH_CAPTURE)
            .and_then(|c| c["world_size"].as_u64())
            .and_then(|w| u32::try_from(w).ok());
        let id = crate::plan::rank::RankId {
            rank,
            rank_from,
            world_size,
            job: name.clone(),
            job_from: "llmperf import torch".into(),
            host: String::new(),
            profiled: vec!["torch".into()],
        };
        run.write_json(run_dir::RANK_JSON, &id)?;
        error = error.or(outcome.error);
    }
    merge(std::slice::from_ref(&job))?;
    Ok(Outcome { run_dir: job, error })
}

/// The job directory of an import of several ranks: `-o DIR`, else a new
/// directory under the artifacts root.
fn job_dir(out: Option<&Path>, resolved: &Resolved) -> Result<PathBuf, Error> {
    match out {
        Some(dir) => {
            std::fs::create_dir_all(dir).map_err(|e| run_dir::io_error(dir, "create the job directory", &e))?;
            Ok(dir.to_path_buf())
        }
        None => Ok(RunDir::create(&resolved.config.runner.artifacts.root)?.path().to_path_buf()),
    }
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
        crate::parse::input::check_kind(file, "nsys")?;
    }
    let job = job_dir(out, resolved)?;
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
        crate::parse::input::check_kind(file, "ncu")?;
    }
    let cfg = &resolved.config;
    let (run, _lock) = open_run(resolved, out)?;
    let mut manifest = ManifestWriter::extend(&run, argv)?;
    let mut verdict = RunStatus::default();
    let stages = ncu::import(&run, &mut manifest, &mut verdict, cfg, files, ranges);
    finish(&run, manifest, verdict, stages, None)
}

/// `llmperf report RUN_DIR`: every report rebuilt from the run's raw artifacts
/// (nsys/report.sqlite, the ncu CSVs, timings, env) and its config.yaml, so
/// that a newer llmperf, or another machine, can render an old run again.
pub(crate) fn report(dir: &Path) -> Result<PathBuf, Error> {
    let run = RunDir::open(dir)?;
    let _lock = run.lock()?;
    let config = run.join(run_dir::CONFIG_YAML);
    if !config.exists() {
        return Err(run_dir::damaged(
            &config,
            "missing: the run's resolved configuration, which `report` rebuilds from",
        ));
    }
    let cfg = crate::config::load_resolved(&config)?;
    let top_n = cfg.runner.run.top_n_kernels as usize;
    if run.join(run_dir::NSYS_SQLITE).is_file() {
        nsys::write_outputs(&run, &run.join(run_dir::NSYS_SQLITE), &nsys::IngestOptions::of(&cfg))?;
    } else if let Some(trace) = torch::saved_trace(&run)? {
        // `profile --tracer torch`: the trace torch.profiler wrote into the run.
        torch::rebuild(&run, &trace, &nsys::IngestOptions::of(&cfg))?;
    } else if let Some(csv) = run_dir::nsys_kernel_summary(&run) {
        nsys::write_summary_outputs(&run, &csv, top_n)?;
    } else if nsys_reports_were_made(&run) && !run.join(run_dir::NSYS_REGIONS).exists() {
        // An import of a .sqlite reads the user's file where it lies: nothing here rebuilds them.
        return Err(Error::new(
            crate::error::ErrorKind::Unparseable,
            format!(
                "{}: missing, and the run holds no {} to rebuild it from",
                run.join(run_dir::NSYS_REGIONS).display(),
                run_dir::NSYS_SQLITE
            ),
        )
        .with_hint(
            "import the capture again (`llmperf import nsys FILE -o DIR`), or copy the run with its nsys/ files",
        ));
    }
    let inputs = ncu::saved_inputs(&run)?;
    if !inputs.is_empty() || run.join(run_dir::NCU_PLAN).is_file() {
        let (report, roofline) = ncu::build_for_run(&run, &cfg, &inputs)?;
        crate::report::write_ncu_regions(&run, &report, &roofline)?;
    }
    crate::report::write_summaries(&run)?;
    crate::report::write_index(&run)?;
    Ok(run.path().to_path_buf())
}

/// Whether the run's manifest says its nsys reports were written.
fn nsys_reports_were_made(run: &RunDir) -> bool {
    run.read_json::<crate::manifest::Manifest>(run_dir::MANIFEST_JSON)
        .is_some_and(|m| m.stages.iter().any(|s| s.name == "nsys_regions" && s.status == crate::manifest::Status::Ok))
}

/// The run directory of an import: `-o DIR` (new, empty, or a run directory
/// to add to), else a new one under the artifacts root.
/// The run directory of an import or a serving run: created (or taken, as
/// `-o` names it), locked, its configuration written.
fn open_run(resolved: &Resolved, out: Option<&Path>) -> Result<(RunDir, run_dir::Lock), Error> {
    let run = output_dir(out, &resolved.config)?;
    let lock = run.lock()?;
    run.write(run_dir::CONFIG_YAML, resolved.to_yaml().as_bytes())?;
    Ok((run, lock))
}

fn output_dir(out: Option<&Path>, cfg: &crate::config::Config) -> Result<RunDir, Error> {
    match out {
        Some(dir) => RunDir::create_at(dir),
        None => RunDir::create(&cfg.runner.artifacts.root),
    }
}

/// The reports (unless a signal is pending: a stopped profiler's capture was
/// analysed and is reported, but a signal during that stops here too) and
/// `perfetto`'s traces, which draw the findings, the manifest's final status,
/// then `report.md`, which shows it. An error that
/// ended the stages early (I/O between stages) ends the run like a failed stage.
fn finish(
    run: &RunDir,
    mut manifest: ManifestWriter,
    mut verdict: RunStatus,
    stages: Result<(), Error>,
    perfetto: Option<perfetto::PerfettoExport>,
) -> Result<Outcome, Error> {
    if let Err(e) = stages {
        verdict.add(stage::StageOutcome::of(Some(e)));
    }
    if signals::pending() {
        verdict.add(stage::StageOutcome::Interrupted(signals::interrupted()));
    } else {
        // Reports that could not be written fail the run: a run without its
        // report.html (a full disk) is not a success. A manifest that could
        // not be written ends the run the same way, and `close` records it.
        let reports =
            stage::run(&mut manifest, "reports", Vec::new(), || Ok(Done::ok(crate::report::write_summaries(run)?)));
        let reports = reports.unwrap_or_else(|e| stage::StageOutcome::of(Some(e)));
        let written = matches!(reports, stage::StageOutcome::Ok);
        verdict.add(reports);
        // `report.perfetto`: after the reports, so that the traces draw the findings.
        if let Some(job) = &perfetto {
            // Findings only where this run's reports wrote them: a findings.json
            // left from before in the directory is not this capture's.
            let findings = if written { crate::export::recorded_findings(run.path()) } else { Vec::new() };
            let outcome = perfetto::export(run, &mut manifest, job, &findings)
                .unwrap_or_else(|e| stage::StageOutcome::of(Some(e)));
            if matches!(outcome, stage::StageOutcome::Ok) && written {
                // report.html's Timeline links the traces now there.
                if let Err(e) = crate::report::rewrite_html(run) {
                    verdict.add(stage::StageOutcome::of(Some(e)));
                }
            }
            verdict.add(outcome);
        }
    }
    let status = verdict.status();
    manifest.close(status, verdict.error())?;
    crate::report::write_index(run)?;
    Ok(Outcome { run_dir: run.path().to_path_buf(), error: verdict.into_error() })
}
