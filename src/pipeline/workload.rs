//! pipeline: the built-in workload outside the profilers: `llmperf workload`
//! (alone, or re-executed by `profile` under a profiler) and the unprofiled
//! baseline run of `runner.run.baseline`.
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::stage::{self, Done, StageOutcome};
use crate::config::Config;
use crate::error::{Error, ErrorKind};
use crate::manifest::{ExitInfo, ManifestWriter, Status};

use crate::process::{Exit, Sink, Spawn};
use crate::provenance;
use crate::run_dir::{self, RunDir};

/// `runner.run.baseline`: the built-in workload once without any profiler,
/// its timings in their own file, for the overhead disclosure.
pub(crate) fn baseline(run: &RunDir, manifest: &mut ManifestWriter, argv: &[OsString]) -> Result<StageOutcome, Error> {
    let spec = Spawn::new(argv.to_vec())
        .stdout(Sink::File(run.join(run_dir::BASELINE_STDOUT)))
        .stderr(Sink::File(run.join(run_dir::BASELINE_STDERR)));
    run.subdir(run_dir::WORKLOAD_DIR)?;
    stage::run(manifest, "baseline", spec.argv_strings(), || {
        let done = stage::run_with_progress("baseline", &spec)?;
        let failure = match done.exit {
            Exit::Code(0) => None,
            Exit::Interrupted => Some(crate::signals::interrupted()),
            _ => Some(
                Error::new(ErrorKind::StageFailed, format!("the unprofiled baseline run {}", done.describe()))
                    .with_hint(format!("see {} in the run directory", run_dir::BASELINE_STDERR)),
            ),
        };
        Ok(Done::of(failure).exit(ExitInfo::from(&done)).artifacts(vec![run_dir::BASELINE_TIMINGS_JSON.into()]))
    })
}

/// A rank that a profiler does not run on, in a job: the application `times`
/// times without it (stage `plain:<profiler>`), so that its collectives meet
/// the profiled ranks'. Output in `workload/plain_<profiler>.std{out,err}.log`.
pub(crate) fn plain(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    profiler: &str,
    app: &[OsString],
    times: usize,
    why: &str,
) -> Result<StageOutcome, Error> {
    run.subdir(run_dir::WORKLOAD_DIR)?;
    let (out, err) = run_dir::plain_logs(profiler);
    let spec = Spawn::new(app.to_vec()).stdout(Sink::File(run.join(&out))).stderr(Sink::File(run.join(&err)));
    let name = format!("plain:{profiler}");
    tracing::info!("{why}");
    stage::run(manifest, &name, spec.argv_strings(), || {
        let mut last = None;
        for _ in 0..times {
            let done = stage::run_with_progress(&name, &spec)?;
            let failed = done.exit != Exit::Code(0);
            last = Some(done);
            if failed {
                break;
            }
        }
        let Some(done) = last else { return Ok(Done::ok(Vec::new())) };
        let failure = match done.exit {
            Exit::Code(0) => None,
            Exit::Interrupted => Some(crate::signals::interrupted()),
            _ => Some(
                Error::new(
                    ErrorKind::StageFailed,
                    format!("the application, run without {profiler}, {}", done.describe()),
                )
                .with_hint(format!("see {err} in the run directory")),
            ),
        };
        let mut d = Done::of(failure).exit(ExitInfo::from(&done)).artifacts(vec![out, err]);
        d.note = Some(format!("{why} ({times} run{})", if times == 1 { "" } else { "s" }));
        Ok(d)
    })
}

/// `llmperf workload`: run the built-in workload without a profiler, into
/// `run_dir` (under `profile`) or a new run directory, and write its timings.
pub(crate) fn workload(
    cfg: &Config,
    run_dir: Option<&Path>,
    nvtx: bool,
    timings: &str,
    argv: Vec<String>,
) -> Result<PathBuf, Error> {
    if let Some(dir) = run_dir {
        let run = RunDir::open(dir)?;
        run_workload(cfg, &run, nvtx, timings)?;
        return Ok(run.path().to_path_buf());
    }
    let run = RunDir::create(&cfg.runner.artifacts.root)?;
    run.write_yaml(run_dir::CONFIG_YAML, cfg)?;
    run.write_yaml(run_dir::INPUTS_YAML, &provenance::inputs(cfg, &[], true))?;
    let mut manifest = ManifestWriter::start(&run, argv.clone())?;
    let outcome = stage::run(&mut manifest, "workload", argv, || {
        run_workload(cfg, &run, nvtx, timings)?;
        Ok(Done::ok(vec![run_dir::TIMINGS_JSON.into()]))
    })?;
    provenance::add_model_metadata(&run, provenance::inputs(cfg, &[], true))?;
    manifest.close(Status::of(outcome.error()), outcome.error())?;
    outcome.error().map_or(Ok(run.path().to_path_buf()), |e| Err(e.clone()))
}

fn run_workload(cfg: &Config, run: &RunDir, nvtx: bool, file: &str) -> Result<(), Error> {
    run.subdir(run_dir::WORKLOAD_DIR)?;
    // The first workload process of a run says what libtorch it loaded (the
    // load is paid here anyway), before any NVTX range and even if the
    // workload then fails; `profile` copies it into env.json. The hf model
    // runs in Python and reports its torch and transformers versions itself.
    let timings = match &cfg.model {
        crate::config::schema::ModelConfig::Hf(m) => super::hf::run(cfg, m, run, nvtx)?,
        _ => {
            if !run.join(run_dir::LIBTORCH_JSON).exists() {
                run.write_json(run_dir::LIBTORCH_JSON, &provenance::libtorch::info())?;
            }
            crate::plugin::run_workload(cfg, nvtx)?
        }
    };
    run.write_json(&rank_file(file, std::env::var(super::launcher::RANK_ENV).ok().as_deref()), &timings)?;
    print_timings(&timings);
    Ok(())
}

/// The timings file of one rank of `profile --launcher`: rank 0 writes the
/// run's own (`timings.json`), rank N `timings.rankN.json` beside it.
fn rank_file(file: &str, rank: Option<&str>) -> String {
    match rank.and_then(|r| r.parse::<u32>().ok()).filter(|&r| r > 0) {
        Some(r) => match file.strip_suffix(".json") {
            Some(stem) => format!("{stem}.rank{r}.json"),
            None => format!("{file}.rank{r}"),
        },
        None => file.to_string(),
    }
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
