//! After an nsys capture (or for `llmperf import nsys`): export the report to
//! SQLite, save `nsys stats` CSVs next to it, and ingest the SQLite natively
//! into `nsys/regions.json` and `nsys/top_kernels.json` (specs/nsys-outputs.md).
//! Each step is a manifest stage; raw files stay whatever fails.
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::aggregate;
use crate::error::{Error, ErrorKind};
use crate::manifest::{ExitInfo, ManifestWriter, Status};
use crate::parse::nsys_sqlite::NsysDb;
use crate::process::{self, Sink, Spawn};
use crate::profile::nsys;
use crate::run_dir::{self, absolute, RunDir};
use crate::tools::Tool;

const EXPORT_TIMEOUT: Duration = Duration::from_secs(1800);

/// Export (unless `report` is already SQLite), stats, then native ingestion.
/// Returns the first error that should decide the exit code.
pub fn analyze(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    tool: Option<&Tool>,
    report: &Path,
    top_n: usize,
) -> Result<Option<Error>, Error> {
    run.subdir(run_dir::NSYS_DIR)?;
    if report.extension().is_some_and(|e| e.eq_ignore_ascii_case("csv")) {
        let copy = run.join(run_dir::NSYS_KERNEL_SUMMARY);
        run_dir::keep_input(report, &copy)?;
        // Errors name the file the user passed, not the run directory's copy.
        return ingest(run, manifest, |run| {
            write_summary_outputs(run, &copy, top_n).map_err(|e| e.naming(&copy, report))
        });
    }
    let sqlite = if report.extension().is_some_and(|e| e == "sqlite") {
        report.to_path_buf()
    } else {
        let Some(tool) = tool else {
            let e = Error::new(ErrorKind::ProfilerUnavailable, "nsys is needed to export a .nsys-rep/.qdrep to SQLite")
                .with_hint("install Nsight Systems, or pass the .sqlite of `nsys export --type sqlite`");
            manifest.skip("nsys_export", &e.message, e.hint.as_deref().unwrap_or_default())?;
            return Ok(Some(e));
        };
        match export(run, manifest, tool, report)? {
            Ok(path) => path,
            Err(e) => return Ok(Some(e)),
        }
    };
    if let Some(tool) = tool {
        stats(run, manifest, tool, &sqlite)?;
    }
    crate::signals::check()?;
    ingest(run, manifest, |run| write_outputs(run, &sqlite, top_n))
}

fn export(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    tool: &Tool,
    report: &Path,
) -> Result<Result<PathBuf, Error>, Error> {
    let sqlite = absolute(&run.join(run_dir::NSYS_SQLITE));
    let spec = Spawn::new(nsys::export_argv(&tool.path, report, &sqlite))
        .stdout(Sink::File(run.join("nsys/export.log")))
        .stderr(Sink::File(run.join("nsys/export.stderr.log")))
        .timeout(Some(EXPORT_TIMEOUT))
        .companions(nsys::agents_of);
    let i = manifest.begin("nsys_export", spec.argv_strings())?;
    let done = process::run(&spec)?;
    let ok = done.success() && sqlite.is_file() && NsysDb::open(&sqlite).is_ok();
    let error = match (ok, done.exit) {
        (_, process::Exit::Interrupted) => Some(crate::signals::interrupted()),
        (true, _) => None,
        (false, _) => {
            let log = std::fs::read_to_string(run.join("nsys/export.stderr.log")).unwrap_or_default();
            Some(export_failure(&log, report, &done, tool))
        }
    };
    let status = Status::of(error.as_ref());
    manifest.finish(i, status, |s| {
        s.exit = Some(ExitInfo::from(&done));
        s.artifacts = ["nsys/export.log", "nsys/export.stderr.log"].map(String::from).to_vec();
        if ok {
            s.artifacts.push(run_dir::NSYS_SQLITE.into());
        }
        s.reason = error.as_ref().map(|e| e.message.clone());
        s.hint = error.as_ref().and_then(|e| e.hint.clone());
    })?;
    Ok(error.map_or(Ok(sqlite), Err))
}

/// Why an export failed, from nsys's last words: a report from a newer nsys
/// (`Version number is invalid: 2023@4@4@54-...`), or a file nsys cannot read
/// at all (`Section Table Reference magic number mismatch` when cut short,
/// `Version tag does not contain a delimiter` for other bytes).
fn export_failure(log: &str, report: &Path, done: &process::Finished, tool: &Tool) -> Error {
    let why = log.lines().rev().map(str::trim).find(|l| !l.is_empty()).unwrap_or("no SQLite file written");
    let message = format!("nsys export of {} failed ({}): {why}", report.display(), done.describe());
    if log.contains("Version number is invalid") {
        Error::new(ErrorKind::StageFailed, message).with_hint(format!(
            "nsys {} cannot read reports from newer nsys versions; export with the nsys that captured it (nsys export --type sqlite) and run `llmperf import nsys FILE.sqlite`",
            tool.version
        ))
    } else if done.exit == process::Exit::Code(0) || log.contains("Exportation error") {
        Error::new(ErrorKind::Unparseable, message).with_hint(
            "the file is damaged (cut short?) or not an Nsight Systems report: compare its size with the original, or capture again",
        )
    } else {
        Error::new(ErrorKind::StageFailed, message).with_hint("see nsys/export.stderr.log in the run directory")
    }
}

/// `nsys stats` CSVs for people and scripts (the numbers in regions.json come
/// from native ingestion). New report names first, old ones when nsys refuses.
fn stats(run: &RunDir, manifest: &mut ManifestWriter, tool: &Tool, sqlite: &Path) -> Result<(), Error> {
    let base = absolute(&run.join(run_dir::NSYS_STATS_BASE));
    let mut new_names = tool.has_new_report_names();
    let (spec, done) = loop {
        let spec = Spawn::new(nsys::stats_argv(&tool.path, sqlite, &base, new_names))
            .stdout(Sink::File(run.join("nsys/stats.log")))
            .stderr(Sink::Capture)
            .timeout(Some(EXPORT_TIMEOUT));
        let done = process::run(&spec)?;
        if new_names && nsys::unknown_report(&String::from_utf8_lossy(&done.stderr)) {
            new_names = false;
            continue;
        }
        break (spec, done);
    };
    let i = manifest.begin("nsys_stats", spec.argv_strings())?;
    let artifacts: Vec<String> = nsys::STATS_REPORTS
        .iter()
        .map(|(new, old)| format!("{}_{}.csv", run_dir::NSYS_STATS_BASE, if new_names { new } else { old }))
        .filter(|rel| run.join(rel).is_file())
        .collect();
    let status = match done.exit {
        process::Exit::Interrupted => Status::Interrupted,
        _ if done.success() => Status::Ok,
        _ => Status::Failed,
    };
    let stderr = String::from_utf8_lossy(&done.stderr).trim().to_string();
    manifest.finish(i, status, |s| {
        s.exit = Some(ExitInfo::from(&done));
        s.artifacts = artifacts;
        if status == Status::Failed {
            s.reason = Some(format!("nsys stats {}: {}", done.describe(), stderr.lines().last().unwrap_or_default()));
            s.hint =
                Some("the CSVs are a convenience; regions.json and top_kernels.json come from native ingestion".into());
        }
    })?;
    Ok(())
}

/// Native ingestion: `nsys/regions.json` and `nsys/top_kernels.json` from the
/// SQLite export. Returns the region report and the number of kernels.
pub fn write_outputs(run: &RunDir, sqlite: &Path, top_n: usize) -> Result<(aggregate::RegionsReport, usize), Error> {
    let t = std::time::Instant::now();
    let db = NsysDb::open(sqlite)?;
    run.write_json(run_dir::NSYS_CAPTURE, &db.capture_host())?;
    let capture = db.load()?;
    let read = t.elapsed();
    crate::signals::check()?;
    let report = aggregate::build(&capture);
    let built = t.elapsed();
    run.write_json(run_dir::NSYS_REGIONS, &report)?;
    run.write_json(run_dir::NSYS_TOP_KERNELS, &aggregate::top_kernels(&capture, top_n))?;
    tracing::debug!(
        "nsys ingestion: read {read:.2?}, regions {:.2?}, written {:.2?}",
        built - read,
        t.elapsed() - built
    );
    Ok((report, capture.kernels.len()))
}

/// `nsys/regions.json` and `nsys/top_kernels.json` from a kernel summary CSV
/// (parse::nsys_csv): no regions, and every kernel unattributed, with a note.
pub fn write_summary_outputs(
    run: &RunDir,
    csv: &Path,
    top_n: usize,
) -> Result<(aggregate::RegionsReport, usize), Error> {
    let mut kernels = crate::parse::nsys_csv::read_kernel_summary(csv)?;
    let count: usize = kernels.iter().map(|k| k.calls).sum();
    let report = aggregate::RegionsReport {
        schema: aggregate::REGIONS_SCHEMA.into(),
        regions: Vec::new(),
        unattributed: aggregate::Unattributed {
            kernel_count: count,
            gpu_time_ns: kernels.iter().map(|k| k.total_ns).sum(),
        },
        notes: vec![format!(
            "{} is a kernel summary without NVTX ranges: no regions, every kernel is unattributed",
            run.relative(csv)
        )],
    };
    if top_n > 0 {
        kernels.truncate(top_n);
    }
    run.write_json(run_dir::NSYS_REGIONS, &report)?;
    run.write_json(run_dir::NSYS_TOP_KERNELS, &kernels)?;
    Ok((report, count))
}

fn ingest(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    write: impl FnOnce(&RunDir) -> Result<(aggregate::RegionsReport, usize), Error>,
) -> Result<Option<Error>, Error> {
    let i = manifest.begin("nsys_regions", Vec::new())?;
    let result = (|| {
        let (report, kernels) = write(run)?;
        tracing::info!(
            "nsys: {} regions, {} kernels ({} unattributed)",
            report.regions.len(),
            kernels,
            report.unattributed.kernel_count
        );
        Ok::<_, Error>(report.notes)
    })();
    let status = Status::of(result.as_ref().err());
    let error = result.as_ref().err().cloned();
    manifest.finish(i, status, |s| {
        s.artifacts = if error.is_none() {
            vec![run_dir::NSYS_REGIONS.into(), run_dir::NSYS_TOP_KERNELS.into()]
        } else {
            Vec::new()
        };
        s.reason = error.as_ref().map(|e| e.message.clone());
        s.hint = error.as_ref().and_then(|e| e.hint.clone());
        if let Ok(notes) = &result {
            s.diagnoses = notes
                .iter()
                .map(|n| crate::manifest::Diagnosis {
                    code: "nsys_empty".into(),
                    message: n.clone(),
                    hint: "trace cuda and nvtx (pipeline.nsys.trace) and run kernels inside NVTX ranges".into(),
                })
                .collect();
        }
    })?;
    Ok(error)
}
