//! The Nsight Compute stage: plan the passes (ncu/plan.json), run each under
//! `LC_ALL=C` with its own log, turn the log into diagnoses, render each report
//! to raw and details CSV, then build the region reports (ncu/regions/).
//! Every raw file is written before anything parses it and kept on failure.
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use crate::aggregate::{RegionsReport, TopKernel};
use crate::config::Config;
use crate::error::{Error, ErrorKind};
use crate::manifest::{ExitInfo, ManifestWriter, Status};
use crate::ncu_analysis::{self, Input};
use crate::plan::{self, FoundRegion, NcuPlan, Pass};
use crate::process::{self, Exit, Sink, Spawn};
use crate::profile::ncu;
use crate::run_dir::{self, absolute, ncu_pass_file, RunDir};
use crate::tools::Tool;

const RENDER_TIMEOUT: Duration = Duration::from_secs(1800);

/// Plan, run every pass, then report. Returns the error that decides the exit code.
pub fn run(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    cfg: &Config,
    tool: &Tool,
    app: &[OsString],
) -> Result<Option<Error>, Error> {
    run.subdir(run_dir::NCU_DIR)?;
    let plan = plan_from_run(run, cfg);
    run.write_json(run_dir::NCU_PLAN, &plan)?;
    for note in &plan.notes {
        tracing::info!("ncu plan: {note}");
    }
    let mut failure = None;
    let mut inputs = Vec::new();
    let mut commands = String::new();
    for pass in &plan.passes {
        let cli = pass_cli(cfg, &plan, pass);
        let outcome = run_pass(run, manifest, cfg, tool, &cli, pass, app, &mut commands)?;
        if let Some(csv) = ncu_analysis::csv_of(run, &pass.name) {
            inputs.push(Input { csv, attribution: pass.attribution() });
        }
        if let Some(e) = outcome {
            let interrupted = e.kind == ErrorKind::Interrupted;
            failure = failure.or(Some(e));
            if interrupted {
                break;
            }
        }
    }
    crate::signals::check()?;
    let report_error = regions(run, manifest, cfg, &inputs)?;
    Ok(failure.or(report_error))
}

/// The plan, with what nsys found in this run (top kernels, regions) if it ran.
fn plan_from_run(run: &RunDir, cfg: &Config) -> NcuPlan {
    let top: Option<Vec<String>> =
        run.read_json::<Vec<TopKernel>>(run_dir::NSYS_TOP_KERNELS).map(|t| t.into_iter().map(|k| k.name).collect());
    let found: Option<Vec<FoundRegion>> = run.read_json::<RegionsReport>(run_dir::NSYS_REGIONS).map(|r| {
        let mut v: Vec<FoundRegion> = r
            .regions
            .into_iter()
            .filter(|r| r.style == "PushPop")
            .map(|r| FoundRegion { path: r.path, domain: r.domain })
            .collect();
        v.sort();
        v.dedup();
        v
    });
    plan::plan(&cfg.pipeline.ncu.ncu_cli, cfg.runner.run.mode, top.as_deref(), found.as_deref())
}

/// The configured command line with the pass's NVTX filters and the plan's kernel filter.
fn pass_cli(cfg: &Config, plan: &NcuPlan, pass: &Pass) -> crate::config::schema::NcuCli {
    let mut cli = cfg.pipeline.ncu.ncu_cli.clone();
    cli.nvtx.include = pass.nvtx_include.clone();
    cli.nvtx.exclude = pass.nvtx_exclude.clone();
    if let Some(f) = &plan.kernel_filter {
        cli.kernel_name = Some(f.expression.clone());
    }
    cli
}

#[allow(clippy::too_many_arguments)]
fn run_pass(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    cfg: &Config,
    tool: &Tool,
    cli: &crate::config::schema::NcuCli,
    pass: &Pass,
    app: &[OsString],
    commands: &mut String,
) -> Result<Option<Error>, Error> {
    let name = &pass.name;
    let base = absolute(&run.join(&format!("ncu/{name}")));
    let log = run.join(&ncu_pass_file(name, "log"));
    let spec = Spawn::new(ncu::profile_argv(&tool.path, cli, &base, &absolute(&log), app))
        .env("LC_ALL", "C")
        .stdout(Sink::File(run.join(&ncu_pass_file(name, "stdout.log"))))
        .stderr(Sink::File(run.join(&ncu_pass_file(name, "stderr.log"))))
        .timeout((cfg.pipeline.ncu.timeout_s > 0).then(|| Duration::from_secs(cfg.pipeline.ncu.timeout_s)))
        .stop_gracefully(Duration::from_secs(cfg.pipeline.ncu.stop_timeout_s), ncu::application_of);
    commands.push_str(&format!("{}\n", spec.display()));
    run.write(run_dir::NCU_CMD, commands.as_bytes())?;
    tracing::info!("ncu {name}: {}", spec.display());
    let stage = format!("ncu:{name}");
    let i = manifest.begin(&stage, spec.argv_strings())?;
    let done = crate::orchestrate::with_progress(&stage, || process::run(&spec))?;
    if done.exit == Exit::Interrupted {
        // What the stopped ncu wrote is rendered and reported; a further signal stops that.
        crate::signals::answer();
    }
    let diagnoses = ncu::diagnose(&std::fs::read_to_string(&log).unwrap_or_default(), cli);
    for d in &diagnoses {
        tracing::warn!("ncu {name}: {} (hint: {})", d.message, d.hint);
    }
    let mut artifacts = vec![
        run_dir::NCU_CMD.to_string(),
        ncu_pass_file(name, "log"),
        ncu_pass_file(name, "stdout.log"),
        ncu_pass_file(name, "stderr.log"),
    ];
    let report = base.with_extension("ncu-rep");
    if report.is_file() {
        artifacts.push(ncu_pass_file(name, "ncu-rep"));
        artifacts.extend(render_csv(run, tool, &report, name)?);
    }
    let failure = match done.exit {
        Exit::Code(0) => None,
        Exit::Interrupted => Some(crate::signals::interrupted()),
        _ => Some(
            Error::new(ErrorKind::StageFailed, format!("ncu {}", done.describe()))
                .with_hint(format!("see ncu/{name}.log and ncu/{name}.stderr.log in the run directory")),
        ),
    };
    manifest.finish(i, Status::of(failure.as_ref()), |s| {
        s.exit = Some(ExitInfo::from(&done));
        s.artifacts = artifacts;
        s.diagnoses = diagnoses;
        s.reason = failure.as_ref().map(|e| e.message.clone());
        s.hint = failure.as_ref().and_then(|e| e.hint.clone());
    })?;
    Ok(failure)
}

/// The CSVs that a run's ncu passes or `import ncu` left (per ncu/plan.json),
/// with how their results find regions: what `llmperf report` reads again.
pub fn saved_inputs(run: &RunDir) -> Vec<Input> {
    if let Some(plan) = run.read_json::<NcuPlan>(run_dir::NCU_PLAN) {
        return plan
            .passes
            .iter()
            .filter_map(|p| ncu_analysis::csv_of(run, &p.name).map(|csv| Input { csv, attribution: p.attribution() }))
            .collect();
    }
    Vec::new()
}

/// `ncu --import` a report to the raw and details CSV layouts, next to it.
pub fn render_csv(run: &RunDir, tool: &Tool, report: &Path, pass: &str) -> Result<Vec<String>, Error> {
    let mut made = Vec::new();
    for (page, extra) in [
        ("raw", vec!["--print-units", "base"]),
        ("details", if tool.has_print_metric_name() { vec!["--print-metric-name", "name"] } else { vec![] }),
    ] {
        let rel = ncu_pass_file(pass, &format!("{page}.csv"));
        let mut argv: Vec<OsString> = vec![
            tool.path.clone().into(),
            "--import".into(),
            report.into(),
            "--csv".into(),
            "--page".into(),
            page.into(),
        ];
        argv.extend(extra.into_iter().map(OsString::from));
        let spec = Spawn::new(argv)
            .env("LC_ALL", "C")
            .stdout(Sink::File(run.join(&rel)))
            .stderr(Sink::File(run.join(&ncu_pass_file(pass, &format!("{page}.stderr.log")))))
            .timeout(Some(RENDER_TIMEOUT));
        let done = process::run(&spec)?;
        if done.exit == Exit::Interrupted {
            return Err(crate::signals::interrupted());
        }
        if done.success() {
            made.push(rel);
        } else {
            tracing::warn!("could not render {} to the {page} page: {}", report.display(), spec.display());
        }
    }
    Ok(made)
}

/// The `ncu_regions` stage: CSVs → ncu/regions/. A parse failure fails this
/// stage (with the file and line) and leaves every raw file in place.
pub fn regions(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    cfg: &Config,
    inputs: &[Input],
) -> Result<Option<Error>, Error> {
    let i = manifest.begin("ncu_regions", Vec::new())?;
    let built = ncu_analysis::build_for_run(run, cfg, inputs);
    let (status, artifacts, error, note) = match built {
        Ok((report, roofline)) => {
            let note = report.note.clone();
            (Status::Ok, ncu_analysis::write(run, &report, &roofline)?, None, note)
        }
        Err(e) => (Status::Failed, Vec::new(), Some(e), None),
    };
    if let Some(n) = &note {
        tracing::warn!("ncu regions: {n}");
    }
    manifest.finish(i, status, |s| {
        s.artifacts = artifacts;
        s.reason = error.as_ref().map(|e| e.message.clone()).or(note.clone());
        s.hint = error.as_ref().and_then(|e| e.hint.clone());
    })?;
    Ok(error)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::nsys_sqlite::NsysDb;

    /// Deep mode end to end on real kernel names: the top kernels of a real
    /// nsys capture (abacus, PyTorch fp16 ResNet: long templated names) become
    /// an ncu kernel filter that matches exactly those names.
    #[test]
    fn deep_mode_filter_from_a_real_capture_matches_exactly_its_top_kernels() {
        let dir = tempfile::tempdir().unwrap();
        let run = RunDir::create_at(&dir.path().join("run")).unwrap();
        let db = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/nsys/abacus/report1.nsys2022.4.sqlite");
        let capture = NsysDb::open(Path::new(db)).unwrap().load().unwrap();
        let top = crate::aggregate::top_kernels(&capture, 10);
        run.write_json(run_dir::NSYS_TOP_KERNELS, &top).unwrap();
        let cfg = crate::config::load(&crate::config::LoadOptions::default()).unwrap().config;
        let plan = plan_from_run(&run, &cfg);
        let filter = plan.kernel_filter.clone().expect("deep mode narrows to the top kernels");
        assert_eq!(filter.source, "nsys_top_n");
        let names: Vec<&str> = top.iter().map(|k| k.name.as_str()).collect();
        assert_eq!(filter.kernels, names);
        // ncu's regex: is ECMAScript; for these patterns the regex crate agrees.
        let re = regex::Regex::new(filter.expression.strip_prefix("regex:").unwrap()).unwrap();
        for k in &names {
            assert!(re.is_match(k), "{k}");
        }
        let others: Vec<String> =
            crate::aggregate::top_kernels(&capture, 0).into_iter().skip(10).map(|k| k.name).collect();
        assert!(!others.is_empty());
        for k in &others {
            assert!(!re.is_match(k), "{k} is not among the top 10");
        }
        // The argv carries it with the demangled base.
        let cli = pass_cli(&cfg, &plan, &plan.passes[0]);
        let argv = ncu::profile_argv(Path::new("ncu"), &cli, Path::new("p0"), Path::new("p0.log"), &[]);
        let argv: Vec<String> = argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
        assert!(argv.windows(2).any(|w| w[0] == "--kernel-name" && w[1] == filter.expression));
        assert!(argv.windows(2).any(|w| w == ["--kernel-name-base", "demangled"]));
    }
}
