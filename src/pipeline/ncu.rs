//! pipeline: the Nsight Compute stages. A profile plans its passes
//! (`ncu/plan.json`), runs each under `LC_ALL=C` with its own log, turns the
//! log into diagnoses and renders each report to raw and details CSV; an
//! import copies its inputs and renders a `.ncu-rep`. Then the `ncu_regions`
//! stage reads every pass's CSV into the region aggregator and writes
//! `ncu/regions/` and `roofline.json`. Every raw file is written before
//! anything parses it and kept on failure.
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::Digest;

use super::stage::{self, Done, RunStatus, StageOutcome};
use crate::aggregate::ncu::{Builder, Options, RegionReportFile, Source, Stamp, REPORT_SCHEMA, UNATTRIBUTED};
use crate::aggregate::nsys::{RegionsReport, TopKernel};
use crate::aggregate::roofline::{Roofline, RooflineAcc};
use crate::aggregate::select::Selection;
use crate::config::schema::{NcuCli, ReplayMode};
use crate::config::Config;
use crate::error::{Error, ErrorKind};
use crate::manifest::{Diagnosis, ExitInfo, ManifestWriter};
use crate::parse::ncu::{self as reader, Layout};
use crate::plan::ncu::{self as ncu_plan, FoundRegion, NcuPlan, Pass};
use crate::plan::preflight::{self, Preflight};
use crate::plan::{NcuInputs, RunPlan};
use crate::process::{self, Exit, Sink, Spawn};
use crate::profile::ncu;
use crate::profile::tools::{Kind, Tool};
use crate::regions::{self, Attribution};
use crate::run_dir::{self, absolute, pass_file, Page, PassFile, RunDir};
use crate::signals;

const RENDER_TIMEOUT: Duration = Duration::from_secs(1800);

/// The ncu stage of a profile the plan profiles, with `tool` found and able
/// to do what the configuration asks (the plan checked): plan the passes,
/// run every pass, then report.
pub(crate) fn profile(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    verdict: &mut RunStatus,
    cfg: &Config,
    tool: &Tool,
    plan: &RunPlan,
    app: &[OsString],
) -> Result<(), Error> {
    let cli = &cfg.pipeline.ncu.ncu_cli;
    run.subdir(run_dir::NCU_DIR)?;
    let inside = plan.ncu_inside();
    let mut plan = plan_from_run(run, cfg, &plan.ncu_inputs);
    run.write_json(run_dir::NCU_PLAN, &plan)?;
    for note in &plan.notes {
        tracing::info!("ncu plan: {note}");
    }
    let mut checked = None;
    if cli.replay_mode.is_range() {
        let selectors: Vec<String> = match cli.nvtx.include.is_empty() {
            true => plan.passes.iter().flat_map(|p| p.nvtx_include.iter().cloned()).collect(),
            false => cli.nvtx.include.clone(),
        };
        let (outcome, report) = preflight(run, manifest, &selectors)?;
        let refused = outcome.error().is_some();
        verdict.add(outcome);
        if refused {
            return Ok(());
        }
        checked = report;
    }
    let preflight = checked.as_ref();
    run_passes(run, manifest, verdict, &PassRun { cfg, tool, cli, app, inside, preflight }, &mut plan)?;
    if let Err(e) = signals::check() {
        verdict.add(StageOutcome::Interrupted(e));
        return Ok(());
    }
    if verdict.stopped() {
        return Ok(());
    }
    let (outcome, report) = regions(run, manifest, cfg)?;
    verdict.add(outcome);
    verdict.add(matched(manifest, cfg, &plan, report.as_ref(), checked.as_ref())?);
    Ok(())
}

/// Every pass of the plan, in order; with `replay_mode: auto`, a pass that
/// profiled nothing is followed by its next rung (the plan grows, and is
/// rewritten, as the ladder climbs).
fn run_passes(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    verdict: &mut RunStatus,
    with: &PassRun,
    plan: &mut NcuPlan,
) -> Result<(), Error> {
    let mut commands = String::new();
    let mut queue: std::collections::VecDeque<Pass> = plan.passes.iter().cloned().collect();
    while let Some(pass) = queue.pop_front() {
        let pass_cli = pass.cli(with.cli, plan);
        let (outcome, ended) = run_pass(run, manifest, &PassRun { cli: &pass_cli, ..*with }, &pass, &mut commands)?;
        if let StageOutcome::Interrupted(_) = outcome {
            verdict.add(outcome);
            break;
        }
        let diagnoses = &ended.diagnoses;
        let next = (with.cli.replay_mode == ReplayMode::Auto && needs_next_rung(&ended))
            .then(|| pass.next_rung(with.tool.has_app_range_replay()))
            .flatten();
        let Some(next) = next else {
            verdict.add(outcome);
            continue;
        };
        // This pass's failure is not the run's: the next rung runs instead.
        let note = ladder_note(&pass, &next, diagnoses, with.tool);
        tracing::warn!("{note}");
        let hint = "set pipeline.ncu.ncu_cli.replay_mode to one mode to run only that one".to_string();
        let step = Diagnosis { code: "replay_ladder".into(), message: note.clone(), hint };
        manifest.diagnose(&format!("ncu:{}", pass.name), step)?;
        plan.notes.push(note);
        plan.passes.push(next.clone());
        run.write_json(run_dir::NCU_PLAN, plan)?;
        queue.push_front(next);
    }
    Ok(())
}

/// One step of the replay ladder, with ncu's reasons, for the manifest and the plan.
fn ladder_note(pass: &Pass, next: &Pass, diagnoses: &[Diagnosis], tool: &Tool) -> String {
    let why = diagnoses.iter().map(|d| d.message.as_str()).collect::<Vec<_>>().join("; ");
    let skipped = match (pass.replay_mode, next.replay_mode) {
        (ReplayMode::Range, ReplayMode::Kernel) => {
            format!(" (app-range skipped: ncu {} has none, 2023.1+)", tool.version)
        }
        _ => String::new(),
    };
    format!(
        "replay ladder: {} ({} replay) profiled nothing: {why}; retried as {} ({} replay){skipped}",
        pass.name,
        pass.replay_mode.as_str(),
        next.name,
        next.replay_mode.as_str()
    )
}

/// How a pass ended, for the replay ladder.
struct PassEnd {
    diagnoses: Vec<Diagnosis>,
    /// ncu ended by itself (an exit status, not a timeout or a signal).
    by_itself: bool,
    /// ncu profiled something: it wrote a report, and did not say that it
    /// profiled no ranges.
    profiled: bool,
}

/// Whether a range pass calls for the next rung of the ladder: ncu ended by
/// itself, profiled nothing, and said why: it matched ranges it
/// could not profile. A pass that profiled some ranges keeps its results
/// (the next rung would count the same regions again, in other units); one
/// that timed out or was killed is a failure of the run, not a reason.
fn needs_next_rung(ended: &PassEnd) -> bool {
    let rungs = [ncu::code::UNSUPPORTED_API, ncu::code::NO_RANGES_PROFILED, ncu::code::EMPTY_RANGES];
    ended.by_itself && !ended.profiled && ended.diagnoses.iter().any(|d| rungs.contains(&d.code.as_str()))
}

/// The `ncu_preflight` stage: every region of the plan looked up in what nsys
/// captured (`ncu/preflight.json`); a region nsys never saw stops the run
/// before ncu starts, with the nearest captured names.
fn preflight(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    selectors: &[String],
) -> Result<(StageOutcome, Option<Preflight>), Error> {
    let mut made = None;
    let outcome = stage::run(manifest, "ncu_preflight", Vec::new(), || {
        let report = match run.read_json::<RegionsReport>(run_dir::NSYS_REGIONS) {
            Some(captured) if !captured.regions.is_empty() => {
                let regions: Vec<preflight::Region> = captured
                    .regions
                    .into_iter()
                    .map(|r| preflight::Region {
                        style: r.style,
                        path: r.path,
                        name: r.name,
                        domain: r.domain,
                        depth: r.depth,
                        instances: r.instances,
                        kernel_count: r.kernel_count,
                        gpu_time_ns: r.gpu_time_ns,
                    })
                    .collect();
                preflight::check(selectors, &regions)
            }
            Some(_) => Preflight::unchecked("nsys captured no NVTX regions in this run"),
            None => Preflight::unchecked("nsys did not run (--no-nsys or pipeline.nsys.enable=false)"),
        };
        run.write_json(run_dir::NCU_PREFLIGHT, &report)?;
        let note = report.not_checked.first().cloned();
        let done = Done { note, ..Done::of(report.missing()).artifacts(vec![run_dir::NCU_PREFLIGHT.to_string()]) };
        made = Some(report);
        Ok(done)
    })?;
    Ok((outcome, made))
}

/// The `ncu_matched` stage: each region the plan asked for, and whether ncu
/// profiled anything in it. A region without results is named with its likely
/// cause; with `pipeline.ncu.fail_on_empty` the run then fails (exit 7).
fn matched(
    manifest: &mut ManifestWriter,
    cfg: &Config,
    plan: &NcuPlan,
    report: Option<&RegionReportFile>,
    preflight: Option<&Preflight>,
) -> Result<StageOutcome, Error> {
    let passes = || manifest.manifest.stages.iter().filter(|s| s.name.starts_with("ncu:"));
    let codes: Vec<String> = passes().flat_map(|s| s.diagnoses.iter().map(|d| d.code.clone())).collect();
    // Passes ncu did not finish: what they had not written is lost, whatever their logs said.
    let unfinished: Vec<String> = passes()
        .filter_map(|s| {
            let exit = s.exit.as_ref()?;
            match (exit.timed_out, exit.signal) {
                (true, _) => Some(format!("{} timed out (pipeline.ncu.timeout_s)", s.name)),
                (false, Some(n)) => Some(format!("{} was killed by signal {n}", s.name)),
                _ => None,
            }
        })
        .collect();
    stage::run(manifest, "ncu_matched", Vec::new(), || {
        let Some(report) = report else { return Ok(Done::ok(Vec::new())) };
        let wanted: Vec<&String> = plan.passes.iter().flat_map(|p| p.regions.iter()).collect();
        let aggregate = report.scopes.iter().find(|s| s.scope == "aggregate").or(report.scopes.first());
        let found = |sel: &str| {
            let sel = regions::Selector::parse(sel);
            aggregate.is_some_and(|s| {
                s.regions.iter().any(|r| r.inclusive.calls > 0 && sel.names_region(&r.name, &r.domain))
            })
        };
        // A ladder step repeats its pass's regions: each is named once.
        let mut named = std::collections::HashSet::new();
        let empty: Vec<String> =
            wanted.iter().filter(|s| named.insert(s.as_str()) && !found(s)).map(|s| s.to_string()).collect();
        let nothing = report.source.results == 0;
        if empty.is_empty() && !nothing {
            return Ok(Done::ok(Vec::new()));
        }
        let message = match (nothing, empty.is_empty()) {
            (true, true) => "ncu profiled nothing".to_string(),
            (true, false) => format!("ncu profiled nothing: no results for {}", empty.join(", ")),
            (false, _) => format!("no ncu results for {}", empty.join(", ")),
        };
        let hint = match unfinished.is_empty() {
            true => empty_cause(&codes, preflight),
            false => format!(
                "ncu did not finish: {}; the results of what it had not written are lost (raise the timeout, or narrow the regions)",
                unfinished.join(", ")
            ),
        };
        let diagnosis = Diagnosis { code: "empty_regions".into(), message: message.clone(), hint: hint.clone() };
        let error = cfg
            .pipeline
            .ncu
            .fail_on_empty
            .then(|| Error::new(ErrorKind::Empty, message.clone()).with_hint(hint.clone()));
        if error.is_none() {
            tracing::warn!("{message} (hint: {hint})");
        }
        Ok(Done { note: Some(message), ..Done::of(error).diagnoses(vec![diagnosis]) })
    })
}

/// Whether nsys saw every configured region, and no kernel launched inside
/// any: (regions, their instances).
fn cpu_only_regions(preflight: Option<&Preflight>) -> Option<(usize, usize)> {
    let p = preflight.filter(|p| p.checked_against.is_some() && !p.regions.is_empty())?;
    p.regions
        .iter()
        .all(|r| r.found && r.kernels == 0)
        .then(|| (p.regions.len(), p.regions.iter().map(|r| r.instances).sum()))
}

/// ncu's "no range matched" is the selector's fault only where the regions ran
/// CUDA work: ncu defines a range by the CUDA calls inside it, so on a CPU run
/// it matches none, whatever the names. With nsys's word that the regions ran
/// and launched no kernel, the diagnosis says that instead.
fn no_cuda_in_ranges(diagnoses: Vec<Diagnosis>, preflight: Option<&Preflight>) -> Vec<Diagnosis> {
    let Some((regions, instances)) = cpu_only_regions(preflight) else { return diagnoses };
    diagnoses
        .into_iter()
        .map(|d| match d.code == ncu::code::NO_RANGE_MATCHED {
            true => Diagnosis {
                code: ncu::code::NO_CUDA_IN_RANGES.into(),
                message: format!(
                    "ncu matched no range, and nsys saw the {regions} region(s) run ({instances} instance(s)) with no kernel launched inside: ncu defines a range by the CUDA calls inside it, and these made none"
                ),
                hint: "no CUDA work inside the regions (the workload ran on the CPU?): profile on a GPU host with device=cuda; the names are right (ncu/preflight.json)".into(),
            },
            false => d,
        })
        .collect()
}

/// The likeliest cause of regions without results, from what ncu's logs and
/// the preflight said, most specific first.
fn empty_cause(codes: &[String], preflight: Option<&Preflight>) -> String {
    let has = |c: &str| codes.iter().any(|x| x == c);
    let no_kernels_in_nsys = cpu_only_regions(preflight).is_some();
    if has(ncu::code::COUNTER_PERMISSION) {
        crate::profile::tools::COUNTER_PERMISSION_HINT.to_string()
    } else if has(ncu::code::NO_CUDA_IN_RANGES) {
        "no CUDA work inside the regions: nsys saw them run with no kernel launched inside (a CPU-only host, or device=cpu?), and ncu defines a range by the CUDA calls inside it".into()
    } else if has(ncu::code::NO_RANGE_MATCHED) {
        "the selector: ncu matched no range; check the names against nsys/regions.json".into()
    } else if has(ncu::code::UNSUPPORTED_API) {
        "range replay cannot capture a call inside the region: --replay-mode auto retries with app-range and kernel replay".into()
    } else if has(ncu::code::EMPTY_RANGES) || no_kernels_in_nsys {
        "no CUDA work: the regions matched but ran no kernels on a GPU (a CPU-only host, or device=cpu?)".into()
    } else {
        "see the ncu stages' diagnoses and ncu/*.log in the run directory".into()
    }
}

/// The plan, with what nsys found in this run (top kernels, regions) if it
/// ran, and what the run plan says of ncu in a job ([`NcuInputs`]).
fn plan_from_run(run: &RunDir, cfg: &Config, inputs: &NcuInputs) -> NcuPlan {
    let found: Option<Vec<FoundRegion>> = run.read_json::<RegionsReport>(run_dir::NSYS_REGIONS).map(|r| {
        let mut v: Vec<FoundRegion> =
            r.regions.into_iter().map(|r| FoundRegion { style: r.style, path: r.path, domain: r.domain }).collect();
        v.sort();
        v.dedup();
        v
    });
    let top = top_kernels(run);
    let found = ncu_plan::Found { top_kernels: top.as_deref(), regions: found.as_deref() };
    ncu_plan::plan_for_run(&cfg.pipeline.ncu.ncu_cli, cfg.runner.run.mode, found, inputs)
}

fn top_kernels(run: &RunDir) -> Option<Vec<String>> {
    run.read_json::<Vec<TopKernel>>(run_dir::NSYS_TOP_KERNELS).map(|t| t.into_iter().map(|k| k.name).collect())
}

/// What a pass's application and tool are run with.
struct PassRun<'a> {
    cfg: &'a Config,
    tool: &'a Tool,
    cli: &'a NcuCli,
    app: &'a [OsString],
    /// ncu on one rank inside the job's launcher.
    inside: Option<(&'a crate::plan::launcher::Launcher, u32)>,
    /// What nsys saw of the regions (range replay with nsys), for the causes.
    preflight: Option<&'a Preflight>,
}

/// One pass: `ncu` under `LC_ALL=C`, its log's diagnoses, its report rendered.
fn run_pass(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    with: &PassRun,
    pass: &Pass,
    commands: &mut String,
) -> Result<(StageOutcome, PassEnd), Error> {
    let (tool, cli, name) = (with.tool, with.cli, pass.name.as_str());
    let spec = pass_spec(run, with, name);
    commands.push_str(&format!("{}\n", spec.display()));
    run.write(run_dir::NCU_CMD, commands.as_bytes())?;
    tracing::info!("ncu {name}: {}", spec.display());
    let stage_name = format!("ncu:{name}");
    let mut ended = PassEnd { diagnoses: Vec::new(), by_itself: false, profiled: false };
    let outcome = stage::run(manifest, &stage_name, spec.argv_strings(), || {
        let done = stage::run_with_progress(&stage_name, &spec)?;
        if done.exit == Exit::Interrupted {
            // What the stopped ncu wrote is rendered and reported; a further signal stops that.
            signals::answer();
        }
        let log = std::fs::read_to_string(run.join(&pass_file(name, PassFile::Log))).unwrap_or_default();
        let diagnoses = no_cuda_in_ranges(ncu::diagnose(&log, cli, &pass.nvtx_include), with.preflight);
        for d in &diagnoses {
            tracing::warn!("ncu {name}: {} (hint: {})", d.message, d.hint);
        }
        let mut artifacts = vec![run_dir::NCU_CMD.to_string()];
        artifacts.extend([PassFile::Log, PassFile::Stdout, PassFile::Stderr].map(|f| pass_file(name, f)));
        let report = run.join(&pass_file(name, PassFile::Report));
        if report.is_file() {
            artifacts.push(pass_file(name, PassFile::Report));
            artifacts.extend(render_csv(run, tool, &report, name)?.made);
        }
        let no_permission = diagnoses.iter().any(|d| d.code == ncu::code::COUNTER_PERMISSION);
        let said_none = diagnoses.iter().any(|d| d.code == ncu::code::NO_RANGES_PROFILED);
        ended = PassEnd {
            diagnoses: diagnoses.clone(),
            by_itself: matches!(done.exit, Exit::Code(_)),
            profiled: report.is_file() && !said_none,
        };
        let failure = match done.exit {
            Exit::Interrupted => Some(signals::interrupted()),
            _ if no_permission => Some(
                Error::new(
                    ErrorKind::ProfilerUnavailable,
                    format!("ncu {name}: no permission to read GPU performance counters (ERR_NVGPUCTRPERM)"),
                )
                .with_hint(crate::profile::tools::COUNTER_PERMISSION_HINT),
            ),
            Exit::Code(0) => None,
            _ => Some(Error::new(ErrorKind::StageFailed, format!("ncu {}", done.describe())).with_hint(format!(
                "see {} and {} in the run directory",
                pass_file(name, PassFile::Log),
                pass_file(name, PassFile::Stderr)
            ))),
        };
        Ok(Done::of(failure).exit(ExitInfo::from(&done)).artifacts(artifacts).diagnoses(diagnoses))
    })?;
    Ok((outcome, ended))
}

fn pass_spec(run: &RunDir, with: &PassRun, name: &str) -> Spawn {
    let ncu_cfg = &with.cfg.pipeline.ncu;
    let base = absolute(&run.join(&pass_file(name, PassFile::Base)));
    let log = absolute(&run.join(&pass_file(name, PassFile::Log)));
    let argv = ncu::profile_argv(&with.tool.path, with.cli, &base, &log, with.app);
    let argv = match with.inside {
        Some((launcher, rank)) => launcher.around(None, Some((rank, argv.len() - with.app.len())), &argv),
        None => argv,
    };
    Spawn::new(argv)
        .env("LC_ALL", "C")
        .stdout(Sink::File(run.join(&pass_file(name, PassFile::Stdout))))
        .stderr(Sink::File(run.join(&pass_file(name, PassFile::Stderr))))
        .timeout((ncu_cfg.timeout_s > 0).then(|| Duration::from_secs(ncu_cfg.timeout_s)))
        .stop_gracefully(Duration::from_secs(ncu_cfg.stop_timeout_s), ncu::application_of)
}

/// `ncu --import` a report to the raw and details CSV layouts, next to it.
fn render_csv(run: &RunDir, tool: &Tool, report: &Path, pass: &str) -> Result<Rendered, Error> {
    let mut rendered = Rendered::default();
    let mut pages = vec![Page::Raw, Page::Details];
    if tool.has_session_page() {
        pages.push(Page::Session);
    }
    for page in pages {
        let rel = pass_file(pass, PassFile::Page(page));
        let spec = Spawn::new(ncu::import_argv(tool, report, page))
            .env("LC_ALL", "C")
            .stdout(Sink::File(run.join(&rel)))
            .stderr(Sink::File(run.join(&pass_file(pass, PassFile::PageStderr(page)))))
            .timeout(Some(RENDER_TIMEOUT));
        let done = process::run(&spec)?;
        if done.exit == Exit::Interrupted {
            return Err(signals::interrupted());
        }
        if done.success() {
            rendered.made.push(rel);
        } else {
            tracing::warn!("could not render {} to the {} page: {}", report.display(), page.name(), spec.display());
            let stderr = run.join(&pass_file(pass, PassFile::PageStderr(page)));
            rendered.failed.push(Failed { page: page.name(), how: done.describe(), stderr });
        }
    }
    Ok(rendered)
}

/// The pages ncu rendered (relative paths) and those it failed on.
#[derive(Default)]
struct Rendered {
    made: Vec<String>,
    failed: Vec<Failed>,
}

/// A page ncu did not render: how it ended and where its stderr is.
struct Failed {
    page: &'static str,
    how: String,
    stderr: PathBuf,
}

/// ncu ended badly rendering a report (a crash, a signal, a time-out; a
/// report it cannot read ends with exit 0 and a message instead): say so, with
/// its last words, rather than guess at the report's version.
fn render_crashed(tool: &Tool, report: &Path, failed: &Failed) -> Error {
    let words = std::fs::read(&failed.stderr).unwrap_or_default();
    let last = String::from_utf8_lossy(&words).lines().rev().find(|l| !l.trim().is_empty()).map(str::to_string);
    let said =
        last.map_or_else(|| "it wrote nothing on stderr".to_string(), |l| format!("its last words: {}", l.trim()));
    Error::new(
        ErrorKind::StageFailed,
        format!(
            "{} {} failed rendering {} to the {} page: {}; {said}",
            tool.path.display(),
            tool.version,
            report.display(),
            failed.page,
            failed.how
        ),
    )
    .with_hint(format!(
        "ncu itself failed (see {}); render the report by hand to see why: `{} --import {} --csv --page raw --print-units base > R.csv`, then `llmperf import ncu R.csv`",
        failed.stderr.display(),
        tool.path.display(),
        report.display()
    ))
}

/// `llmperf import ncu FILE...` into `run`: each file a pass of its own, added
/// after the passes already there; a `.ncu-rep` rendered with the installed ncu.
pub(crate) fn import(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    verdict: &mut RunStatus,
    cfg: &Config,
    files: &[PathBuf],
    ranges: Vec<String>,
) -> Result<(), Error> {
    run.subdir(run_dir::NCU_DIR)?;
    let names: Vec<String> = files.iter().map(|f| f.display().to_string()).collect();
    let earlier = run.read_json::<NcuPlan>(run_dir::NCU_PLAN);
    let plan = ncu_plan::imported(cfg, ranges, &names, earlier.as_ref());
    let added = &plan.passes[plan.passes.len() - files.len()..];
    // CSVs are read where they lie while another thread copies them into the
    // run directory: the copy no longer comes before the parse (0.12 s per
    // 500 MB). Reports are rendered with ncu, which needs the copy first.
    let mut copies = Vec::new();
    if let Some(file) = files.iter().find(|f| compressed_report(f)) {
        return Err(Error::new(
            ErrorKind::StageFailed,
            format!("{} is a zstd-compressed Nsight Compute report (.ncu-repz), which newer ncu versions write; llmperf renders reports with the installed ncu and reads CSVs", file.display()),
        )
        .with_hint(format!(
            "render it with the ncu that wrote it: `ncu --import {} --csv --page raw --print-units base > R.csv`, then `llmperf import ncu R.csv`",
            file.display()
        )));
    }
    for (file, pass) in files.iter().zip(added) {
        let is_report = file.extension().is_some_and(|e| e == "ncu-rep")
            || crate::parse::input::magic(file) == crate::parse::input::Magic::NcuReport;
        let copy = run.join(&pass_file(&pass.name, if is_report { PassFile::Report } else { PassFile::ImportedCsv }));
        if !is_report {
            copies.push((file.clone(), copy, pass.name.clone()));
            continue;
        }
        run_dir::keep_input(file, &copy)?;
        let outcome = render_import(run, manifest, cfg, (file, &copy), &pass.name)?;
        if outcome.error().is_some() {
            verdict.add(outcome);
            return Ok(());
        }
    }
    run.write_json(run_dir::NCU_PLAN, &plan)?;
    // In the plan's order: an imported CSV is read from the user's file.
    let inputs: Vec<Input> = plan
        .passes
        .iter()
        .filter_map(|p| match copies.iter().find(|(_, _, name)| *name == p.name) {
            Some((file, copy, _)) => Some(Input {
                csv: copy.clone(),
                read: file.clone(),
                attribution: p.attribution,
                regions: p.regions.clone(),
            }),
            None => input_of(run, p),
        })
        .collect();
    let copying =
        std::thread::spawn(move || copies.iter().try_for_each(|(file, copy, _)| run_dir::keep_input(file, copy)));
    let outcome = match signals::check() {
        Err(e) => Ok(StageOutcome::Interrupted(e)),
        Ok(()) => regions_of(run, manifest, cfg, &inputs).map(|(outcome, _)| outcome),
    };
    // The copy is finished (or has failed) before anything returns.
    let copied = copying.join().map_err(|_| Error::new(ErrorKind::Internal, "the thread copying the input stopped"));
    copied??;
    verdict.add(outcome?);
    Ok(())
}

/// A rendered page that holds ncu's `==ERROR== Failed to load report file`
/// (ncu exits 0 after it) instead of a CSV.
fn failed_to_load(page: &Path) -> bool {
    use std::io::Read;
    let mut head = Vec::new();
    let read = std::fs::File::open(page).and_then(|f| f.take(4096).read_to_end(&mut head));
    read.is_ok() && String::from_utf8_lossy(&head).contains("Failed to load report file")
}

/// A `.ncu-repz`, by name or by its zstd magic number (28 B5 2F FD).
fn compressed_report(file: &Path) -> bool {
    use std::io::Read;
    let mut magic = [0u8; 4];
    let zstd = std::fs::File::open(file).and_then(|mut f| f.read_exact(&mut magic)).is_ok()
        && magic == [0x28, 0xB5, 0x2F, 0xFD];
    zstd || file.extension().is_some_and(|e| e == "ncu-repz")
}

/// The `ncu_import` stage: render a copied .ncu-rep (`report`; `original`:
/// the user's file, for messages) to CSV with the installed ncu.
fn render_import(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    cfg: &Config,
    (original, report): (&Path, &Path),
    pass: &str,
) -> Result<StageOutcome, Error> {
    let stage_name = if pass == "import" { "ncu_import".to_string() } else { format!("ncu_import:{pass}") };
    let tool = match Tool::probe(Kind::Ncu, &cfg.pipeline.ncu.executable) {
        Ok(t) => t,
        Err(e) => {
            let e = e.with_hint("install Nsight Compute, or pass a CSV made elsewhere with `ncu --import R.ncu-rep --csv --page details`");
            return stage::unavailable(manifest, "ncu_import", e);
        }
    };
    stage::run(manifest, &stage_name, Vec::new(), || {
        let Rendered { made, failed } = render_csv(run, &tool, report, pass)?;
        // ncu fails on a report from a newer ncu with "Failed to load report file", as on a
        // damaged one; the version the report carries tells them apart. (An older ncu reads
        // some newer reports: 2022.3 reads those up to 2023.1, so the version alone decides nothing.)
        if made.is_empty() || made.iter().any(|rel| failed_to_load(&run.join(rel))) {
            if let Some(e) = crate::profile::tools::too_new(original, Kind::Ncu, &tool) {
                return Ok(Done::of(Some(e)));
            }
        }
        // No page to read because ncu crashed: its crash, not the report's age, is the news.
        if run_dir::pass_csv(run, pass).is_none() {
            if let Some(f) = failed.first() {
                return Ok(Done::of(Some(render_crashed(&tool, report, f))).artifacts(made));
            }
        }
        let error = run_dir::pass_csv(run, pass).is_none().then(|| {
            Error::new(ErrorKind::Unparseable, format!("{} {} could not render {}", tool.path.display(), tool.version, report.display()))
                .with_hint("a report newer than this ncu cannot be read: render it with the ncu that wrote it, then import the CSV (see the ncu/*.stderr.log files of the run directory)")
        });
        Ok(Done::of(error).artifacts(made))
    })
}

/// One CSV to read, and how its results find their regions.
#[derive(Debug, Clone)]
pub(crate) struct Input {
    /// The CSV in the run directory: what the report names.
    pub(crate) csv: PathBuf,
    /// Where its bytes are read: `csv` itself, or, during `import ncu`, the
    /// user's file while it is being copied to `csv` on another thread.
    pub(crate) read: PathBuf,
    pub(crate) attribution: Attribution,
    /// The pass's regions (range attribution).
    pub(crate) regions: Vec<String>,
}

/// The CSVs that a run's ncu passes or `import ncu` left (per ncu/plan.json),
/// with how their results find regions: what `llmperf report` reads again.
/// A plan.json that is there and not a plan is an error: its passes' CSVs
/// would be left out in silence.
pub(crate) fn saved_inputs(run: &RunDir) -> Result<Vec<Input>, Error> {
    let Some(plan) = run.read_json_checked::<NcuPlan>(run_dir::NCU_PLAN)? else { return Ok(Vec::new()) };
    Ok(plan.passes.iter().filter_map(|p| input_of(run, p)).collect())
}

fn input_of(run: &RunDir, pass: &Pass) -> Option<Input> {
    let csv = run_dir::pass_csv(run, &pass.name)?;
    Some(Input { read: csv.clone(), csv, attribution: pass.attribution, regions: pass.regions.clone() })
}

/// The `ncu_regions` stage: the run's CSVs → ncu/regions/ and roofline.json,
/// and the region report for the stages after it. A parse failure fails this
/// stage (with the file and line) and leaves every raw file in place.
pub(crate) fn regions(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    cfg: &Config,
) -> Result<(StageOutcome, Option<RegionReportFile>), Error> {
    regions_of(run, manifest, cfg, &saved_inputs(run)?)
}

/// [`regions`] of the given inputs.
fn regions_of(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    cfg: &Config,
    inputs: &[Input],
) -> Result<(StageOutcome, Option<RegionReportFile>), Error> {
    let mut made = None;
    let outcome = stage::run(manifest, "ncu_regions", Vec::new(), || {
        let (report, roofline) = build_for_run(run, cfg, inputs)?;
        if let Some(n) = &report.note {
            tracing::warn!("ncu regions: {n}");
        }
        let mut artifacts = crate::report::write_ncu_regions(run, &report, &roofline)?;
        artifacts.push(run.relative(&run.write_json(run_dir::NCU_RULES_JSON, &rules_of(inputs))?));
        let done = Done { note: report.note.clone(), ..Done::ok(artifacts) };
        made = Some(report);
        Ok(done)
    })?;
    Ok((outcome, made))
}

/// ncu's rule results of the inputs' details CSVs, by kernel. A file that
/// cannot be read for them is a note: its metrics were read already.
fn rules_of(inputs: &[Input]) -> crate::aggregate::rules::RulesReport {
    let (mut rows, mut notes) = (Vec::new(), Vec::new());
    for input in inputs {
        match crate::parse::ncu::rules::read(&input.csv) {
            Ok(r) if r.is_empty() => {}
            Ok(r) => rows.extend(r),
            Err(e) => notes.push(format!(
                "{}: rule results not read: {}",
                input.csv.file_name().map_or(String::new(), |n| n.to_string_lossy().into_owned()),
                e.message
            )),
        }
    }
    if rows.is_empty() {
        notes.push(
            "no OPT or WRN rule results in the ncu CSVs (ncu before 2023 writes none, nor does the raw page)".into(),
        );
    }
    crate::aggregate::rules::by_kernel(rows, notes)
}

/// Report options from the configuration.
fn options(cfg: &Config, run: &RunDir) -> Result<Options, Error> {
    let cli = &cfg.pipeline.ncu.ncu_cli;
    let launched = crate::run_dir::read_launched(&run.join(run_dir::LAUNCHED_NCU_RANKS_DIR));
    Ok(Options {
        selection: Selection::new(&cfg.report.kernels.include, &cfg.report.kernels.exclude)?,
        sections: cli.sections.clone(),
        metrics: cli.metrics.clone(),
        aggregate: cfg.report.aggregate,
        ranks: launched.iter().map(|l| (l.process_id.to_string(), l.rank)).collect(),
    })
}

/// sha256 of the resolved config.yaml, first 16 hex digits.
fn fingerprint(config_yaml: &str) -> String {
    let digest = sha2::Sha256::digest(config_yaml.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The region report and the roofline of a run's CSVs, with the run's
/// configuration and a fresh stamp (config fingerprint from its config.yaml).
pub(crate) fn build_for_run(
    run: &RunDir,
    cfg: &Config,
    inputs: &[Input],
) -> Result<(RegionReportFile, Roofline), Error> {
    let config_yaml = run_dir::read_regular(&run.join(run_dir::CONFIG_YAML)).unwrap_or_default();
    let stamp = Stamp { generated_at: run_dir::utc_now(), config_fingerprint: fingerprint(&config_yaml) };
    crate::memory::set_budget_mib(cfg.runner.run.memory_budget_mib);
    build(inputs, options(cfg, run)?, stamp, run)
}

/// Read every input once into one report and the roofline. A pass's raw page,
/// when it has one, gives its roofline instead (the SOL roofline rates are not
/// on the details page); a raw page that cannot be read leaves the details' sums.
fn build(inputs: &[Input], opts: Options, stamp: Stamp, run: &RunDir) -> Result<(RegionReportFile, Roofline), Error> {
    let sections = opts.sections.clone();
    let metrics = opts.metrics.clone();
    let mut builder = Builder::new(opts);
    let mut layouts = Vec::new();
    let mut roofline = RooflineAcc::default();
    for input in inputs {
        layouts.push(read_into(&mut builder, input)?);
        let read = builder.take_roofline();
        roofline.absorb(match run_dir::raw_page_of(&input.csv).map(|raw| roofline_of(&raw)) {
            Some(Ok(from_raw)) => from_raw,
            Some(Err(e)) => {
                tracing::warn!("roofline from {} instead: {}", input.csv.display(), e.message);
                read
            }
            None => read,
        });
    }
    let source = Source {
        files: inputs.iter().map(|i| run.relative(&i.csv)).collect(),
        layout: match layouts.first() {
            Some(Layout::Raw) => "raw".into(),
            _ => "details".into(),
        },
        attribution: builder.attribution(),
        results: builder.results(),
        ranges_not_selected: builder.ranges_not_selected(),
        profiler_command_lines: inputs
            .iter()
            .filter_map(|i| run_dir::session_page_of(&i.csv))
            .filter_map(|p| std::fs::read_to_string(p).ok())
            .filter_map(|t| ncu::profiler_command_line(&t))
            .collect(),
    };
    let scopes = builder.finish(&stamp);
    let mut roofline = roofline.finish();
    roofline.compute_capability = inputs.iter().find_map(|i| crate::parse::ncu::compute_capability(&i.csv));
    let report = RegionReportFile {
        schema: REPORT_SCHEMA.into(),
        generated_at: stamp.generated_at,
        config_fingerprint: stamp.config_fingerprint,
        note: note(&source),
        source,
        sections,
        metrics,
        scopes,
    };
    Ok((report, roofline))
}

/// A details CSV file on every core (parse::ncu's fast reader); anything else
/// (the raw page, `==PROF==` preambles, unusual column orders) streamed.
fn read_into(builder: &mut Builder, input: &Input) -> Result<Layout, Error> {
    if reader::ingest(&input.read, builder, input.attribution, &input.regions)? {
        return Ok(Layout::Details);
    }
    let (layout, launches) = reader::open_any(&input.read)?;
    for launch in launches {
        builder.add_launch(&launch?, input.attribution, &input.regions);
        crate::memory::check(&input.read)?;
    }
    Ok(layout)
}

/// The roofline sums of one ncu CSV, read on its own: the raw page of a pass,
/// which carries the SOL roofline rates that the details page does not print.
fn roofline_of(csv: &Path) -> Result<RooflineAcc, Error> {
    let mut acc = RooflineAcc::default();
    let (_, rows) = reader::open_any(csv)?;
    for launch in rows {
        reader::with_view(&launch?, |view| acc.add(view));
    }
    Ok(acc)
}

fn note(source: &Source) -> Option<String> {
    match (source.results, source.attribution) {
        (0, _) => Some(
            "ncu profiled nothing: no region-specific profiling was performed (see the ncu stage's diagnoses in manifest.json)"
                .into(),
        ),
        (n, Attribution::None) => Some(format!(
            "the profile holds no NVTX data: no region-specific profiling was performed; all {n} results are in {UNATTRIBUTED}"
        )),
        _ if source.ranges_not_selected > 0 => Some(format!(
            "report.kernels selects kernels: it was not applied to the {} range result(s), which each cover every kernel of their range",
            source.ranges_not_selected
        )),
        _ => None,
    }
}
