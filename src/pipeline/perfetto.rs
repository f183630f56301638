//! pipeline::perfetto: `report.perfetto`, the run written as Perfetto traces
//! in `perfetto/` (stage `perfetto_export`), as `llmperf export perfetto RUN`
//! writes them. It runs after the reports, so that the traces draw the
//! findings: the capture's analysis leaves it here as a value.
use super::stage::{self, Done, StageOutcome};
use crate::error::Error;
use crate::export::Source;
use crate::manifest::ManifestWriter;
use crate::run_dir::{self, RunDir};

/// The export a run asked for: its timeline, the NVTX attribute keys moved
/// to `args` (`report.nvtx_attributes`) and the launch gap (ns) its
/// breakdown was cut with.
pub(crate) struct PerfettoExport {
    pub(crate) source: Source,
    pub(crate) strip: Vec<String>,
    pub(crate) gap: i64,
}

impl PerfettoExport {
    /// A torch run's export, where it asked for one (`report.perfetto`) and
    /// its import wrote torch/capture.json (which names the trace read).
    pub(crate) fn of_torch_run(run: &RunDir, cfg: &crate::config::Config) -> Result<Option<PerfettoExport>, Error> {
        if !cfg.report.perfetto {
            return Ok(None);
        }
        let Some(source) = crate::export::torch_trace(run.path())? else { return Ok(None) };
        let gap = crate::config::schema::launch_gap_ns(cfg.report.launch_gap_us)?;
        Ok(Some(PerfettoExport { source, strip: Vec::new(), gap }))
    }
}

/// The traces, with `findings` drawn on their regions. A failure is the
/// run's: the user asked for the files.
pub(crate) fn export(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    job: &PerfettoExport,
    findings: &[serde_json::Value],
) -> Result<StageOutcome, Error> {
    stage::run(manifest, "perfetto_export", Vec::new(), || {
        let dir = run.join(run_dir::PERFETTO_DIR);
        let summary = match &job.source {
            Source::Nsys(sqlite) => {
                let ranks = crate::export::recorded_ranks(run.path());
                crate::export::perfetto::export(sqlite, &dir, &ranks, &job.strip, findings, job.gap)?
            }
            Source::Torch(trace, rank, read) => {
                crate::export::kineto::export(trace, (&dir, *rank), *read, findings, job.gap)?
            }
        };
        if let Some(why) = &summary.idle_left_out {
            tracing::warn!("perfetto: the idle track is left out: {why}");
        }
        let files = summary.files.iter().map(|f| format!("{}/{}", run_dir::PERFETTO_DIR, f.file)).collect();
        Ok(Done::ok(files))
    })
}
