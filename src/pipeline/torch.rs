//! pipeline::torch: `llmperf import torch FILE` and `profile --tracer torch`. A PyTorch profiler trace
//! ([`crate::parse::torch`]) becomes the same region model an nsys export
//! does: its ranges and launches go through the nsys region sweep
//! ([`aggregate::nsys::Sweep`]) and its kernels into the same totals, so
//! `torch/regions.json`, `torch/top_kernels.json` and `torch/samples.json`
//! have `nsys/`'s schemas, and the reports read them as they read nsys's.
use std::ffi::OsString;
use std::path::Path;
use std::time::Duration;

use crate::aggregate;
use crate::aggregate::nsys::breakdown::Breakdown;
use crate::aggregate::nsys::{Ends, KernelTotals, Sweep};
use crate::error::{Error, ErrorKind};
use crate::manifest::{ExitInfo, ManifestWriter};
use crate::parse::nsys::activity::Named;
use crate::parse::nsys::batched;
use crate::parse::nsys::beside::Windows;
use crate::parse::nsys::ingest::{Ingest, KernelSink, Timeline};
use crate::parse::torch;
use crate::process::{Exit, Sink, Spawn};
use crate::run_dir::{self, RunDir};

use super::nsys::{launch_gap_ns, IngestOptions};
use super::stage::{self, Done, RunStatus, StageOutcome};

fn thread_panicked() -> Error {
    Error::new(ErrorKind::Internal, "the thread that sorts a trace's ranges stopped unexpectedly")
        .with_hint("a bug in llmperf: please report it with the trace")
}

/// The windows the sweep meets, kept for the breakdown, which is fed once
/// the sweep is done.
struct Collected<W>(Vec<W>);

impl<W> Windows<W> for Collected<W> {
    fn window(&mut self, w: W) {
        self.0.push(w);
    }

    fn upto(&mut self, _: i64) {}
}

/// The `torch_regions` stage: read `trace`, write the region model.
pub(crate) fn analyze(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    trace: &Path,
    opts: &IngestOptions,
) -> Result<StageOutcome, Error> {
    stage::run(manifest, "torch_regions", Vec::new(), || {
        let (regions, kernels) = write_outputs(run, trace, opts)?;
        tracing::info!(
            "torch: {} regions, {} kernels ({} unattributed)",
            regions.regions.len(),
            kernels,
            regions.unattributed.kernel_count
        );
        let files = [
            run_dir::TORCH_REGIONS,
            run_dir::TORCH_TOP_KERNELS,
            run_dir::TORCH_SAMPLES,
            run_dir::TORCH_CAPTURE,
            run_dir::TORCH_BREAKDOWN,
        ];
        Ok(Done::ok(files.map(String::from).to_vec()))
    })
}

/// `profile --tracer torch`: the application behind the bootstrap, which
/// starts torch.profiler when the program imports torch and writes one trace
/// per process into `torch/trace/` at its exit (stage `torch`); then that
/// trace is imported (stage `torch_regions`). A trace written by an
/// application that then failed is still read, as nsys's capture is.
pub(crate) fn capture(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    verdict: &mut RunStatus,
    cfg: &crate::config::Config,
    argv: &[OsString],
) -> Result<(), Error> {
    run.subdir(run_dir::TORCH_TRACE_DIR)?;
    let limit = cfg.pipeline.torch.timeout_s;
    let spec = Spawn::new(argv.to_vec())
        .stdout(Sink::File(run.join(run_dir::TORCH_APP_STDOUT)))
        .stderr(Sink::File(run.join(run_dir::TORCH_APP_STDERR)))
        .timeout((limit > 0).then(|| Duration::from_secs(limit)));
    let outcome = stage::run(manifest, "torch", spec.argv_strings(), || {
        let done = stage::run_with_progress("torch", &spec)?;
        let failure = match done.exit {
            Exit::Code(0) => None,
            Exit::Interrupted => Some(crate::signals::interrupted()),
            _ => Some(
                Error::new(ErrorKind::StageFailed, format!("the application under torch.profiler {}", done.describe()))
                    .with_hint(format!("see {} in the run directory", run_dir::TORCH_APP_STDERR)),
            ),
        };
        let files = [run_dir::TORCH_APP_STDOUT, run_dir::TORCH_APP_STDERR, run_dir::TORCH_TRACE_DIR];
        Ok(Done::of(failure).exit(ExitInfo::from(&done)).artifacts(files.map(String::from).to_vec()))
    })?;
    let interrupted = matches!(outcome, StageOutcome::Interrupted(_));
    verdict.add(outcome);
    if interrupted {
        return Ok(());
    }
    let opts = IngestOptions::of(cfg);
    match written_traces(run)?.as_slice() {
        [one] => verdict.add(analyze(run, manifest, one, &opts)?),
        other => {
            let outcome = stage::run(manifest, "torch_regions", Vec::new(), || Err(not_one_trace(run, other)))?;
            verdict.add(outcome);
        }
    }
    Ok(())
}

/// `llmperf report` of a `--tracer torch` run: the one trace in
/// `torch/trace/`, if the run has it (an import reads the user's file where
/// it lies, and keeps no copy).
pub(crate) fn saved_trace(run: &RunDir) -> Result<Option<std::path::PathBuf>, Error> {
    if !run.join(run_dir::TORCH_TRACE_DIR).is_dir() {
        return Ok(None);
    }
    match written_traces(run)?.as_slice() {
        [one] => Ok(Some(one.clone())),
        _ => Ok(None),
    }
}

/// `torch/` made again from the saved trace.
pub(crate) fn rebuild(run: &RunDir, trace: &Path, opts: &IngestOptions) -> Result<(), Error> {
    write_outputs(run, trace, opts).map(|_| ())
}

/// The traces the bootstrap wrote into `torch/trace/` (finished ones: a
/// process killed while writing leaves only its `.tmp`).
fn written_traces(run: &RunDir) -> Result<Vec<std::path::PathBuf>, Error> {
    let dir = run.join(run_dir::TORCH_TRACE_DIR);
    let entries = std::fs::read_dir(&dir).map_err(|e| run_dir::io_error(&dir, "list", &e))?;
    let mut found: Vec<_> =
        entries.flatten().map(|e| e.path()).filter(|p| p.to_string_lossy().ends_with(".pt.trace.json")).collect();
    found.sort();
    Ok(found)
}

/// No trace, or one per process of several: said with what to do.
fn not_one_trace(run: &RunDir, traces: &[std::path::PathBuf]) -> Error {
    if traces.is_empty() {
        return Error::new(
            ErrorKind::StageFailed,
            format!("torch.profiler wrote no trace into {}", run.join(run_dir::TORCH_TRACE_DIR).display()),
        )
        .with_hint(format!(
            "the program must import torch and exit normally (not os._exit or a kill); with pipeline.torch.active > 0 \
             it must make more than wait + warmup steps (outermost nn.Module calls); see {} for the bootstrap's message",
            run_dir::TORCH_APP_STDERR
        ));
    }
    Error::new(
        ErrorKind::StageFailed,
        format!("{} processes imported torch and each wrote a trace: one run reads one", traces.len()),
    )
    .with_hint(format!(
        "read them as the ranks of one job: llmperf import torch {}",
        run.join(run_dir::TORCH_TRACE_DIR).display()
    ))
}

/// The region model's notes on what in the trace it could not take as written.
fn add_notes(notes: &mut Vec<String>, summary: &torch::Summary, odd_times: u64, path: &Path) {
    if summary.overhanging_ranges > 0 {
        notes.push(format!(
            "{} ranges end after the range open on their thread when they started: that range is not their parent, and \
             ends for the sweep when they start, so the kernels launched in the rest of it go to them",
            summary.overhanging_ranges
        ));
    }
    if summary.repeated_correlation_ids > 0 {
        notes.push(format!(
            "{} correlation ids are held by more than one launch call: each kernel of those ids is charged to the \
             first call read, which may not be the one that launched it",
            summary.repeated_correlation_ids
        ));
    }
    if summary.renumbered_ids > 0 {
        notes.push(format!(
            "{} process or thread ids do not fit in 24 bits: shown numbered down from 16777215, not as the trace has them",
            summary.renumbered_ids
        ));
    }
    if odd_times > 0 {
        let note = format!(
            "{} events of the categories read had a ts or dur that is missing, negative or not a number: left out",
            odd_times
        );
        tracing::warn!("{}: {note}", path.display());
        notes.push(note);
    }
}

/// Read the trace, sweep it, write `torch/`.
fn write_outputs(
    run: &RunDir,
    path: &Path,
    opts: &IngestOptions,
) -> Result<(aggregate::nsys::RegionsReport, usize), Error> {
    let categories = aggregate::categories::Categories::load(opts.kernel_categories.as_deref())?;
    let mut trace = torch::read(path)?;
    crate::signals::check()?;
    let classify = |name: &str| categories.of(name) as u8;
    let ranges = trace.take_ranges();
    let mut kernels = KernelTotals::new(&trace.names);
    let mut joined = trace.join(&classify, &mut kernels);
    let launches = std::mem::take(&mut joined.launches);
    if let Some(e) = kernels.take_error() {
        return Err(e);
    }
    // The ranges come off their sorted runs on a thread of their own while
    // the sweep reads them.
    let mut sweep = Sweep::with_ends(Ends::Inclusive);
    let mut windows = Collected(Vec::new());
    let (in_order, overhanging) = std::thread::scope(|s| {
        let (out, stream) = batched::channel();
        let sender = s.spawn(move || ranges.send(out));
        let in_order = sweep.run(stream, batched::of(launches), Some(&mut windows));
        let sent = sender.join().unwrap_or_else(|_| Err(thread_panicked()));
        Ok::<_, Error>((in_order?, sent?))
    })?;
    let mut breakdown = Breakdown::new(launch_gap_ns(opts.launch_gap_us)?);
    let fed = torch::feed(&mut breakdown, windows.0, trace.activity(&joined), &trace.blocking);
    if !(in_order && fed) {
        return Err(Error::new(
            crate::error::ErrorKind::Internal,
            format!("{}: the sorted ranges and launches were not in time order", path.display()),
        )
        .with_hint("a bug in llmperf: please report it with the trace"));
    }
    let mut summary = std::mem::take(&mut joined.summary);
    summary.overhanging_ranges = overhanging;
    let names = std::mem::take(&mut trace.names);
    let pass = Ingest { timeline: sweep, kernels, names, renamed: None, breakdown: () };
    let mut done = aggregate::nsys::reports(pass, &[], opts.top_n, &crate::parse::nsys::ingest::Threads)?;
    done.regions.notes.retain(|n| !n.starts_with("no NVTX ranges"));
    add_notes(&mut done.regions.notes, &summary, trace.odd_times, path);
    if done.regions.regions.is_empty() {
        done.regions.notes.push(
            "no CPU ranges in the trace (user_annotation, cpu_op, python_function): every kernel is unattributed"
                .into(),
        );
    }
    // `--tracer torch --annotate modules`: the bootstrap's module classes, as for nsys.
    if let Some(classes) = super::nsys::module_classes(run) {
        aggregate::nsys::regroup_modules(&mut done.regions, &classes);
    }
    if let Some(rank) = trace.meta.rank.and_then(|r| u32::try_from(r).ok()) {
        let pids: std::collections::BTreeMap<i64, u32> = done
            .regions
            .processes
            .iter()
            .map(|p| p.process_id)
            .chain(done.regions.regions.iter().map(|r| r.process_id))
            .map(|p| (p, rank))
            .collect();
        done.regions.tag_ranks(&pids);
    }
    let capture = torch::Capture {
        // A trace inside the run (`--tracer torch`) by its place in it, so that a copied run still says it.
        trace: path.strip_prefix(run.path()).unwrap_or(path).display().to_string(),
        trace_bytes: std::fs::metadata(path).ok().map(|m| m.len()),
        schema_version: trace.meta.schema_version,
        rank: trace.meta.rank,
        world_size: trace.meta.world_size,
        devices: std::mem::take(&mut trace.meta.devices),
        events: trace.events,
        skipped_categories: std::mem::take(&mut trace.skipped),
        odd_times: trace.odd_times,
        summary,
    };
    // Kernels are named by their interned ids, and so are the blocking calls.
    let spell = |n| match n {
        Named::Kernel(id) | Named::Call(id) => {
            let name = u32::try_from(id).ok().and_then(|id| done.names.all().get(id as usize));
            crate::parse::nsys::calls::base_name(name.map_or("", String::as_str)).to_string()
        }
    };
    let mut breakdown = breakdown.finish(&done.window_names, categories.sources.clone(), &spell);
    if let Some(rank) = trace.meta.rank.and_then(|r| u32::try_from(r).ok()) {
        for d in &mut breakdown.devices {
            d.rank = Some(rank);
        }
    }
    aggregate::nsys::issued::add_issued(&mut breakdown, &done.regions, &categories);
    run.write_json(run_dir::TORCH_BREAKDOWN, &breakdown)?;
    run.write_json(run_dir::TORCH_CAPTURE, &capture)?;
    run.write_json(run_dir::TORCH_REGIONS, &done.regions)?;
    run.write_json(run_dir::TORCH_TOP_KERNELS, &done.top)?;
    run.write_json(run_dir::TORCH_SAMPLES, &done.samples)?;
    Ok((done.regions, done.kernels))
}
