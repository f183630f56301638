//! pipeline: one stage of a run and how it is recorded. A stage's work returns
//! a [`Done`] (its outcome as a value, with what the manifest keeps); [`run`]
//! records it once. Failure is a value here: only a manifest that cannot be
//! written is an `Err`.
use std::time::Duration;

use crate::error::{Error, ErrorKind};
use crate::manifest::{Diagnosis, ExitInfo, ManifestWriter, Status};
use crate::process::{self, Exit, Finished, Spawn};

/// How a stage ended.
#[derive(Debug)]
pub(crate) enum StageOutcome {
    Ok,
    Failed(Error),
    Interrupted(Error),
    /// Not run: disabled (no error), or a wanted profiler is unavailable.
    Skipped(Option<Error>),
}

impl StageOutcome {
    /// Ok without an error; interrupted or failed by the error's kind.
    pub(crate) fn of(error: Option<Error>) -> StageOutcome {
        match error {
            None => StageOutcome::Ok,
            Some(e) if e.kind == ErrorKind::Interrupted => StageOutcome::Interrupted(e),
            Some(e) => StageOutcome::Failed(e),
        }
    }

    fn status(&self) -> Status {
        match self {
            StageOutcome::Ok => Status::Ok,
            StageOutcome::Failed(_) => Status::Failed,
            StageOutcome::Interrupted(_) => Status::Interrupted,
            StageOutcome::Skipped(_) => Status::Skipped,
        }
    }

    pub(crate) fn error(&self) -> Option<&Error> {
        match self {
            StageOutcome::Ok | StageOutcome::Skipped(None) => None,
            StageOutcome::Failed(e) | StageOutcome::Interrupted(e) | StageOutcome::Skipped(Some(e)) => Some(e),
        }
    }

    fn into_error(self) -> Option<Error> {
        match self {
            StageOutcome::Ok | StageOutcome::Skipped(None) => None,
            StageOutcome::Failed(e) | StageOutcome::Interrupted(e) | StageOutcome::Skipped(Some(e)) => Some(e),
        }
    }
}

/// What a stage did: its outcome and what the manifest keeps of it.
#[derive(Debug)]
pub(crate) struct Done {
    pub(crate) outcome: StageOutcome,
    pub(crate) exit: Option<ExitInfo>,
    pub(crate) artifacts: Vec<String>,
    pub(crate) diagnoses: Vec<Diagnosis>,
    /// For the reader of an ok stage (the manifest's `reason`).
    pub(crate) note: Option<String>,
}

impl Done {
    pub(crate) fn new(outcome: StageOutcome) -> Done {
        Done { outcome, exit: None, artifacts: Vec::new(), diagnoses: Vec::new(), note: None }
    }

    /// Ok with these artifacts.
    pub(crate) fn ok(artifacts: Vec<String>) -> Done {
        Done { artifacts, ..Done::new(StageOutcome::Ok) }
    }

    pub(crate) fn of(error: Option<Error>) -> Done {
        Done::new(StageOutcome::of(error))
    }

    pub(crate) fn artifacts(mut self, artifacts: Vec<String>) -> Done {
        self.artifacts = artifacts;
        self
    }

    pub(crate) fn exit(mut self, exit: ExitInfo) -> Done {
        self.exit = Some(exit);
        self
    }

    pub(crate) fn diagnoses(mut self, diagnoses: Vec<Diagnosis>) -> Done {
        self.diagnoses = diagnoses;
        self
    }
}

/// A stage: `running` in the manifest, the work, then one record of how it
/// ended (status, reason and hint from the outcome's error). An error the
/// work returns is the stage's failure (or interruption), not the caller's.
pub(crate) fn run(
    manifest: &mut ManifestWriter,
    name: &str,
    argv: Vec<String>,
    work: impl FnOnce() -> Result<Done, Error>,
) -> Result<StageOutcome, Error> {
    let i = manifest.begin(name, argv)?;
    let done = work().unwrap_or_else(|e| Done::of(Some(e)));
    record(manifest, i, done)
}

fn record(manifest: &mut ManifestWriter, i: usize, done: Done) -> Result<StageOutcome, Error> {
    let Done { outcome, exit, artifacts, diagnoses, note } = done;
    manifest.finish(i, outcome.status(), |s| {
        s.exit = exit;
        s.artifacts = artifacts;
        s.diagnoses = diagnoses;
        s.reason = outcome.error().map(|e| e.message.clone()).or(note);
        s.hint = outcome.error().and_then(|e| e.hint.clone());
    })?;
    Ok(outcome)
}

/// A stage that does not run, with why and how to make it run.
pub(crate) fn skip(manifest: &mut ManifestWriter, name: &str, reason: &str, hint: &str) -> Result<StageOutcome, Error> {
    manifest.skip(name, reason, hint)?;
    Ok(StageOutcome::Skipped(None))
}

/// A stage that was wanted but cannot run: skipped, and the run's error.
pub(crate) fn unavailable(manifest: &mut ManifestWriter, name: &str, error: Error) -> Result<StageOutcome, Error> {
    manifest.skip(name, &error.message, error.hint.as_deref().unwrap_or_default())?;
    Ok(StageOutcome::Skipped(Some(error)))
}

/// The run so far: the first error decides its status and exit code.
#[derive(Debug, Default)]
pub(crate) struct RunStatus {
    error: Option<Error>,
}

impl RunStatus {
    pub(crate) fn add(&mut self, outcome: StageOutcome) {
        if self.error.is_none() {
            self.error = outcome.into_error();
        }
    }

    /// A signal stopped the run: later profiler stages do not start.
    pub(crate) fn stopped(&self) -> bool {
        self.error.as_ref().is_some_and(|e| e.kind == ErrorKind::Interrupted)
    }

    pub(crate) fn status(&self) -> Status {
        Status::of(self.error.as_ref())
    }

    /// The error that decides the run, if any.
    pub(crate) fn error(&self) -> Option<&Error> {
        self.error.as_ref()
    }

    pub(crate) fn into_error(self) -> Option<Error> {
        self.error
    }
}

/// Run `spec` with a spinner, the stage and elapsed time on a terminal
/// (nothing otherwise); then one line that says how it ended: "nsys finished
/// in 12.3 s", or "nsys stalled after its last phase began and was killed at
/// 310 s" (never "finished" for a child that was stopped).
pub(crate) fn run_with_progress(stage: &str, spec: &Spawn) -> Result<Finished, Error> {
    let bar = indicatif::ProgressBar::new_spinner();
    bar.set_draw_target(indicatif::ProgressDrawTarget::stderr());
    if let Ok(style) = indicatif::ProgressStyle::with_template("{spinner} {msg} {elapsed}") {
        bar.set_style(style);
    }
    bar.set_message(format!("{stage}: running"));
    bar.enable_steady_tick(Duration::from_millis(200));
    let out = process::run(spec);
    bar.finish_and_clear();
    if let Ok(done) = &out {
        let secs = done.elapsed.as_secs_f64();
        match done.exit {
            Exit::Code(0) => tracing::info!("{stage} finished in {secs:.1} s"),
            Exit::Code(_) => tracing::info!("{stage} ended after {secs:.1} s with {}", done.describe()),
            _ => tracing::warn!("{stage} {}", done.describe()),
        }
    }
    out
}

/// A finished (or failed, or interrupted) run: the directory always exists.
pub(crate) struct Outcome {
    pub(crate) run_dir: std::path::PathBuf,
    /// Why the run did not succeed, for the exit code and message.
    pub(crate) error: Option<Error>,
}
