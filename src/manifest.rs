//! run dir: `manifest.json`, what each stage of a run did. Written at the start and
//! rewritten (atomically) after every change, so an interrupted or crashed run
//! still says how far it got. Schema: specs/manifest.md.
use serde::{Deserialize, Serialize};

use std::path::PathBuf;
use std::sync::Mutex;

use crate::error::Error;
use crate::process::{Exit, Finished};
use crate::run_dir::{utc_now, RunDir, MANIFEST_JSON};

/// The manifest of the run in progress, for a forced stop to mark, and the
/// lock every manifest write holds, so that the stop's mark is the last word.
static CURRENT: Mutex<Option<PathBuf>> = Mutex::new(None);

fn watch(path: Option<PathBuf>) {
    if let Ok(mut current) = CURRENT.lock() {
        *current = path;
    }
    crate::signals::on_forced_stop(mark_current_interrupted);
}

/// The forced stop's hook: the run in progress and its running stages become
/// `interrupted`. The lock is kept (forgotten, not released): the process is
/// about to end, and no write may follow this one.
fn mark_current_interrupted() {
    let Ok(current) = CURRENT.lock() else { return };
    if let Some(path) = current.as_deref() {
        mark_interrupted(path);
    }
    std::mem::forget(current);
}

pub(crate) const SCHEMA: &str = "llmperf.manifest/v1";

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Status {
    Pending,
    Running,
    Ok,
    Failed,
    Skipped,
    Interrupted,
}

impl std::fmt::Display for Status {
    /// As manifest.json spells it.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Status::Pending => "pending",
            Status::Running => "running",
            Status::Ok => "ok",
            Status::Failed => "failed",
            Status::Skipped => "skipped",
            Status::Interrupted => "interrupted",
        })
    }
}

impl Status {
    /// A stage's (or run's) status from the error that ended it, if any.
    pub(crate) fn of(failure: Option<&Error>) -> Status {
        match failure {
            None => Status::Ok,
            Some(e) if e.kind == crate::error::ErrorKind::Interrupted => Status::Interrupted,
            Some(_) => Status::Failed,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Diagnosis {
    pub(crate) code: String,
    pub(crate) message: String,
    pub(crate) hint: String,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct ExitInfo {
    pub(crate) code: Option<i32>,
    pub(crate) signal: Option<i32>,
    pub(crate) timed_out: bool,
    pub(crate) interrupted: bool,
    pub(crate) elapsed_s: f64,
}

impl From<&Finished> for ExitInfo {
    fn from(f: &Finished) -> Self {
        let mut info = ExitInfo { elapsed_s: f.elapsed.as_secs_f64(), ..Default::default() };
        match f.exit {
            Exit::Code(c) => info.code = Some(c),
            Exit::Signal(s) => info.signal = Some(s),
            Exit::TimedOut | Exit::Stalled => info.timed_out = true,
            Exit::Interrupted => info.interrupted = true,
            Exit::Stopped => {}
        }
        info
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Stage {
    pub(crate) name: String,
    pub(crate) status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) hint: Option<String>,
    pub(crate) argv: Vec<String>,
    pub(crate) started_at: Option<String>,
    pub(crate) ended_at: Option<String>,
    pub(crate) exit: Option<ExitInfo>,
    /// Paths relative to the run directory.
    pub(crate) artifacts: Vec<String>,
    pub(crate) diagnoses: Vec<Diagnosis>,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Manifest {
    pub(crate) schema: String,
    pub(crate) run_id: String,
    pub(crate) status: Status,
    pub(crate) started_at: String,
    pub(crate) ended_at: Option<String>,
    pub(crate) llmperf_version: String,
    /// llmperf's own command line.
    pub(crate) argv: Vec<String>,
    pub(crate) stages: Vec<Stage>,
}

/// The manifest of a live run: every change is written through.
pub(crate) struct ManifestWriter<'a> {
    run: &'a RunDir,
    pub(crate) manifest: Manifest,
}

impl<'a> ManifestWriter<'a> {
    pub(crate) fn start(run: &'a RunDir, argv: Vec<String>) -> Result<Self, Error> {
        let manifest = Manifest {
            schema: SCHEMA.into(),
            run_id: run.run_id().into(),
            status: Status::Running,
            started_at: utc_now(),
            ended_at: None,
            llmperf_version: env!("CARGO_PKG_VERSION").into(),
            argv,
            stages: Vec::new(),
        };
        // Reserved before the first write: a disk too full for the reserve
        // fails here, before any manifest could be left `running`.
        run.reserve()?;
        let w = ManifestWriter { run, manifest };
        w.save()?;
        watch(Some(run.join(MANIFEST_JSON)));
        Ok(w)
    }

    /// An import into a run directory that already has a manifest adds to it:
    /// its stages stay, the command is recorded as an `import` stage, and the
    /// old `reports` stage goes (the reports are written again). Otherwise [`start`](Self::start).
    pub(crate) fn extend(run: &'a RunDir, argv: Vec<String>) -> Result<Self, Error> {
        let Some(mut manifest) = run.read_json::<Manifest>(MANIFEST_JSON) else {
            return Self::start(run, argv);
        };
        manifest.status = Status::Running;
        manifest.ended_at = None;
        manifest.stages.retain(|s| s.name != "reports");
        run.reserve()?;
        let mut w = ManifestWriter { run, manifest };
        watch(Some(run.join(MANIFEST_JSON)));
        let i = w.begin("import", argv)?;
        w.finish(i, Status::Ok, |_| {})?;
        Ok(w)
    }

    /// Written under the lock a forced stop holds, so that the stop's
    /// `interrupted` is the last word.
    pub(crate) fn save(&self) -> Result<(), Error> {
        let _guard = CURRENT.lock();
        self.run.write_json(MANIFEST_JSON, &self.manifest).map(|_| ())
    }

    /// Add a stage in `running` state and return its index.
    pub(crate) fn begin(&mut self, name: &str, argv: Vec<String>) -> Result<usize, Error> {
        self.manifest.stages.push(Stage {
            name: name.into(),
            status: Status::Running,
            reason: None,
            hint: None,
            argv,
            started_at: Some(utc_now()),
            ended_at: None,
            exit: None,
            artifacts: Vec::new(),
            diagnoses: Vec::new(),
        });
        self.save()?;
        Ok(self.manifest.stages.len() - 1)
    }

    /// Record a stage that did not run, with why and how to make it run.
    pub(crate) fn skip(&mut self, name: &str, reason: &str, hint: &str) -> Result<(), Error> {
        let i = self.begin(name, Vec::new())?;
        self.finish(i, Status::Skipped, |s| {
            s.started_at = None;
            s.reason = Some(reason.into());
            s.hint = Some(hint.into());
        })
    }

    pub(crate) fn finish(&mut self, i: usize, status: Status, edit: impl FnOnce(&mut Stage)) -> Result<(), Error> {
        let stage = &mut self.manifest.stages[i];
        stage.status = status;
        stage.ended_at = Some(utc_now());
        edit(stage);
        self.save()
    }

    /// Add a diagnosis to the last stage of this name (the replay ladder's reason for a step).
    pub(crate) fn diagnose(&mut self, stage: &str, diagnosis: Diagnosis) -> Result<(), Error> {
        if let Some(s) = self.manifest.stages.iter_mut().rev().find(|s| s.name == stage) {
            s.diagnoses.push(diagnosis);
        }
        self.save()
    }

    /// The run's last word. The reserved space is given back first, so that
    /// this write succeeds on a disk the run filled. A stage still `running`
    /// (its end could not be recorded: a failed write) ends with the run's
    /// status and `why`, the run's error.
    pub(crate) fn close(&mut self, status: Status, why: Option<&Error>) -> Result<(), Error> {
        self.run.release_reserve();
        let now = utc_now();
        for s in self.manifest.stages.iter_mut().filter(|s| s.status == Status::Running) {
            s.status = if status == Status::Ok { Status::Failed } else { status };
            s.ended_at = Some(now.clone());
            s.reason = s.reason.take().or_else(|| {
                Some(match why {
                    Some(e) => format!("did not finish: {}", e.message),
                    None => "did not finish".into(),
                })
            });
        }
        self.manifest.status = status;
        self.manifest.ended_at = Some(now);
        self.save()?;
        watch(None);
        Ok(())
    }
}

/// The run and its running stages `interrupted`, written over `path`.
fn mark_interrupted(path: &std::path::Path) {
    if let Some(dir) = path.parent() {
        let _ = std::fs::remove_file(dir.join(crate::run_dir::RESERVE_FILE));
    }
    let Some(mut m) = crate::run_dir::read_regular(path).ok().and_then(|b| serde_json::from_str::<Manifest>(&b).ok())
    else {
        return;
    };
    let now = utc_now();
    for s in m.stages.iter_mut().filter(|s| s.status == Status::Running) {
        s.status = Status::Interrupted;
        s.ended_at = Some(now.clone());
        s.reason = Some("stopped at once by a second signal".into());
    }
    m.status = Status::Interrupted;
    m.ended_at = Some(now);
    let _ = crate::run_dir::write_json_atomic(path, &m);
}
