//! compare: two runs side by side. `llmperf diff A B` puts every region,
//! top kernel and ncu metric of two run directories next to each other with
//! a verdict per row ([`verdict`]); `llmperf check RUN --baseline BASE` turns
//! those verdicts into pass/fail with budgets ([`check`]). Both read only
//! what runs write: `workload/timings.json` (`samples_ms`), the timeline's
//! `samples.json` (nsys's or the torch trace's), `ncu/regions/report.json`,
//! and a serving run's `serve/requests.json` and `serve/steps.json`.
pub(crate) mod check;
mod diff;
pub(crate) mod render;
pub(crate) mod verdict;

use std::path::Path;

use crate::error::Error;
use crate::run_dir::{self, RunDir};
pub(crate) use diff::{diff, Diff, Options};

/// `diff/diff.json`, `diff.md`, `diff.html` in run B.
pub(crate) fn write_diff(b: &Path, d: &Diff, markdown: &str) -> Result<(), Error> {
    let run = RunDir::open(b)?;
    let _lock = run.lock()?;
    run.subdir(run_dir::DIFF_DIR)?;
    run.write_json(run_dir::DIFF_JSON, d)?;
    run.write(run_dir::DIFF_MD, markdown.as_bytes())?;
    run.write(run_dir::DIFF_HTML, render::diff_html(d).as_bytes())?;
    Ok(())
}

/// `check/check.json` and `check.md` in the run, the JUnit file when asked
/// for, and the Markdown appended to `$GITHUB_STEP_SUMMARY` when it is set.
pub(crate) fn write_check(
    path: &Path,
    report: &check::CheckReport,
    markdown: &str,
    junit: Option<&Path>,
) -> Result<(), Error> {
    let run = RunDir::open(path)?;
    {
        let _lock = run.lock()?;
        run.subdir(run_dir::CHECK_DIR)?;
        run.write_json(run_dir::CHECK_JSON, report)?;
        run.write(run_dir::CHECK_MD, markdown.as_bytes())?;
    }
    if let Some(file) = junit {
        run_dir::write_new_file(file, check::junit(report)?.as_bytes())?;
    }
    if let Some(summary) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|s| !s.is_empty()) {
        run_dir::append(Path::new(&summary), markdown.as_bytes())?;
    }
    Ok(())
}
