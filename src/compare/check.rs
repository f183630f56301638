//! `llmperf check RUN --baseline BASE [--budgets FILE]`: the diff of BASE →
//! RUN judged per row by budgets (docs/ci.md): pass, regression,
//! inconclusive, missing; the exit status a CI job needs (specs/exit-codes.md).
use std::path::{Path, PathBuf};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::diff::{Diff, Row, Source};
use super::verdict::{Thresholds, Verdict};
use crate::error::{Error, ErrorKind};
use crate::regions::{self, glob_match, Selector};

pub(crate) const CHECK_SCHEMA: &str = "llmperf.check/v1";

/// A budgets file (YAML): defaults, then per-region and per-kernel rules,
/// the first matching rule winning.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Budgets {
    #[serde(default)]
    pub(crate) defaults: Rule,
    /// Region rules: `match` is a region selector (`A::A1`, `LLM@decode_*`), for
    /// the workload's and nsys's rows alike.
    #[serde(default)]
    pub(crate) regions: Vec<Rule>,
    /// Kernel rules: `match` is a glob over the kernel name.
    #[serde(default)]
    pub(crate) kernels: Vec<Rule>,
    /// Serving rules: `match` is a glob over a serving row's name (`ttft`,
    /// `tpot`, `itl`, `e2e`; the step kinds `prefill`, `decode`, `mixed`).
    #[serde(default)]
    pub(crate) serving: Vec<Rule>,
}

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Rule {
    #[serde(default, rename = "match")]
    pub(crate) pattern: Option<String>,
    pub(crate) relative_pct: Option<f64>,
    pub(crate) absolute_ms: Option<f64>,
    pub(crate) min_samples: Option<usize>,
    /// Leave matching rows out of the check.
    #[serde(default)]
    pub(crate) ignore: bool,
}

impl Rule {
    fn over(&self, base: Thresholds) -> Thresholds {
        Thresholds {
            relative_pct: self.relative_pct.unwrap_or(base.relative_pct),
            absolute_ms: self.absolute_ms.unwrap_or(base.absolute_ms),
            min_samples: self.min_samples.unwrap_or(base.min_samples),
        }
    }

    fn matches(&self, source: Source, name: &str) -> bool {
        let Some(p) = &self.pattern else { return false };
        match source {
            Source::Kernel | Source::Request | Source::Step | Source::StepGpu => glob_match(p, name),
            Source::Workload | Source::Nsys | Source::Gpu => {
                let row = Selector::parse(name);
                Selector::parse(p).names_region(&regions::join(&row.names), row.domain)
            }
        }
    }
}

impl Budgets {
    /// Read a budgets file; a mistake names the file and line.
    pub(crate) fn load(path: &Path) -> Result<Budgets, Error> {
        let text = crate::config::bounded::read_yaml(path, "--budgets")?;
        let b: Budgets = serde_yaml::from_str(&text).map_err(|e| {
            let at = e.location().map(|l| format!(":{}", l.line())).unwrap_or_default();
            // YAML reads a number past f64's range (1e400) as text: say what it is.
            let said = e.to_string();
            let number = regex::Regex::new(r#"invalid type: string "([+-]?(?:\d+\.?\d*|\.\d+)[eE][+-]?\d+)""#)
                .ok()
                .and_then(|re| re.captures(&said).map(|c| c[1].to_string()));
            if let Some(n) = number {
                return Error::config(format!("{}{at}: {n} is a number out of the range of a threshold (at most about 1.8e308)", path.display()))
                    .with_hint("relative_pct is a percentage (10 = 10%), absolute_ms milliseconds");
            }
            Error::config(format!("{}{at}: {e}", path.display())).with_hint(
                "keys are defaults, regions and kernels; a rule has match, relative_pct, absolute_ms, min_samples, ignore (docs/ci.md)",
            )
        })?;
        for (kind, rules) in [("regions", &b.regions), ("kernels", &b.kernels), ("serving", &b.serving)] {
            if let Some(i) = rules.iter().position(|r| r.pattern.is_none()) {
                return Err(Error::config(format!("{}: {kind}[{i}] has no `match`", path.display()))
                    .with_hint(format!("give each rule under {kind} a `match:` pattern, e.g. match: \"decode*\"")));
            }
        }
        for r in std::iter::once(&b.defaults).chain(&b.regions).chain(&b.kernels).chain(&b.serving) {
            let bad = [r.relative_pct, r.absolute_ms].into_iter().flatten().find(|v| !v.is_finite() || *v < 0.0);
            if let Some(v) = bad {
                return Err(Error::config(format!("{}: threshold {v} is negative or not a number", path.display()))
                    .with_hint("relative_pct is a percentage (10 = 10%), absolute_ms milliseconds; both at least 0"));
            }
        }
        Ok(b)
    }

    fn rules(&self, source: Source) -> &[Rule] {
        match source {
            Source::Kernel => &self.kernels,
            Source::Request | Source::Step | Source::StepGpu => &self.serving,
            Source::Workload | Source::Nsys | Source::Gpu => &self.regions,
        }
    }

    /// The thresholds of a row, or None when a rule ignores it.
    pub(crate) fn judge(&self, source: Source, name: &str) -> Option<Thresholds> {
        let base = self.defaults.over(Thresholds::default());
        match self.rules(source).iter().find(|r| r.matches(source, name)) {
            Some(r) if r.ignore => None,
            Some(r) => Some(r.over(base)),
            None => Some(base),
        }
    }

    /// Whether a rule names this row (a missing kernel fails only then).
    fn names(&self, source: Source, name: &str) -> bool {
        self.rules(source).iter().any(|r| r.matches(source, name))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Outcome {
    Pass,
    Regression,
    Inconclusive,
    Missing,
}

impl Outcome {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Outcome::Pass => "pass",
            Outcome::Regression => "regression",
            Outcome::Inconclusive => "inconclusive",
            Outcome::Missing => "missing",
        }
    }
}

/// `check/check.json` (specs/check.schema.json).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct CheckReport {
    pub(crate) schema: String,
    pub(crate) run: super::diff::RunRef,
    pub(crate) baseline: super::diff::RunRef,
    pub(crate) budgets: Option<String>,
    pub(crate) strict: bool,
    pub(crate) method: String,
    pub(crate) checks: Vec<Checked>,
    /// Rows in the run only (new regions or kernels): listed, never failing.
    pub(crate) new: Vec<String>,
    /// Per source, how much the whole run moved (the median change of its
    /// rows), and whether that fails the check.
    #[serde(default)]
    pub(crate) shifts: Vec<CheckedShift>,
    pub(crate) notes: Vec<String>,
    /// Two serving runs under loads that differ: why their serving rows have
    /// no comparison (diff.json's `unlike_loads`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) unlike_loads: Option<String>,
    /// Rows the budgets' `ignore` rules left out.
    #[serde(default)]
    pub(crate) ignored: usize,
    /// pass, or fail.
    pub(crate) status: String,
    pub(crate) exit_code: i32,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Checked {
    pub(crate) outcome: Outcome,
    /// Whether this row fails the check.
    pub(crate) fails: bool,
    pub(crate) thresholds: Thresholds,
    pub(crate) row: Row,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct CheckedShift {
    pub(crate) source: Source,
    pub(crate) rows: usize,
    pub(crate) median_change_pct: f64,
    /// The run's time over the baseline's, as the shift says: 2.0 is twice as slow.
    pub(crate) factor: f64,
    /// Past the default relative budget, slower, and not discounted.
    pub(crate) fails: bool,
}

pub(crate) struct CheckArgs<'a> {
    pub(crate) run: &'a Path,
    pub(crate) baseline: &'a Path,
    pub(crate) budgets: Option<PathBuf>,
    pub(crate) strict: bool,
    /// A whole-run shift is the machine's (a known clock or driver change):
    /// rows that moved with it are inconclusive, and the shift does not fail.
    pub(crate) discount_shift: bool,
    /// The first run of a new pipeline: a baseline that is absent or holds
    /// nothing to compare passes, with a note. Never the default.
    pub(crate) allow_empty_baseline: bool,
}

/// Judge RUN against BASE. The report says pass or fail; an error is for a
/// run or baseline that cannot be read, or is no measurement (its own status
/// not ok): a gate fails closed.
pub(crate) fn check(args: &CheckArgs) -> Result<CheckReport, Error> {
    let budgets = match &args.budgets {
        Some(p) => Budgets::load(p)?,
        None => Budgets::default(),
    };
    if args.allow_empty_baseline && !args.baseline.join(crate::run_dir::MANIFEST_JSON).exists() {
        return first_run(args, &budgets);
    }
    // Rows an `ignore` rule leaves out, by name: a check of nothing but those is the budgets' doing.
    let ignored = std::cell::RefCell::new(std::collections::BTreeSet::new());
    // Two serving runs are judged on what the load measured. Their traces'
    // regions are named by each step's batch (`execute_context_1(16)_…`),
    // which differs between two runs of one load, and their operators and
    // kernels run in those steps: `llmperf diff` shows them, the gate does not.
    let serving = [args.run, args.baseline].iter().all(|p| p.join(crate::run_dir::SERVE_REQUESTS).is_file());
    let left_out = std::cell::Cell::new(0usize);
    let judge = |s: Source, n: &str| {
        if serving && !s.serving() {
            left_out.set(left_out.get() + 1);
            return None;
        }
        let j = budgets.judge(s, n);
        if j.is_none() {
            ignored.borrow_mut().insert((s.as_str(), n.to_string()));
        }
        j
    };
    let options = super::diff::Options { top: 0, discount_shift: args.discount_shift };
    let diff: Diff = super::diff::diff(args.baseline, args.run, options, &judge)?;
    for (which, run) in [("run", &diff.b), ("baseline", &diff.a)] {
        if run.status != crate::manifest::Status::Ok {
            return Err(Error::new(
                ErrorKind::StageFailed,
                format!(
                    "the {which} {} ended {} (its manifest.json): its numbers are no measurement to gate on",
                    run.path, run.status
                ),
            )
            .with_hint(
                "check only runs whose status is ok: fix the failed stage its manifest.json names, and profile again",
            ));
        }
    }
    let (mut checks, new) = judged(diff.rows, &budgets, args.strict);
    // Failing rows first, then the rows that did not pass, then the rest, each
    // in the diff's order: stdout, check.md and the JUnit file open with what fails.
    checks.sort_by_key(|c| (!c.fails, c.outcome == Outcome::Pass));
    let limit = budgets.defaults.over(super::verdict::Thresholds::default()).relative_pct;
    let shifts: Vec<CheckedShift> = diff
        .shifts
        .iter()
        .map(|s| CheckedShift {
            source: s.source,
            rows: s.rows,
            median_change_pct: s.median_change_pct,
            factor: 1.0 + s.median_change_pct / 100.0,
            fails: !args.discount_shift && s.median_change_pct > limit,
        })
        .collect();
    let mut notes = diff.notes;
    if left_out.get() > 0 {
        notes.push(format!(
            "serving runs: judged on their requests and step kinds; the {} region and kernel rows of their traces are left out (named by each step's batch, which differs between runs of one load): `llmperf diff` shows them",
            left_out.get()
        ));
    }
    let ignored = ignored.into_inner().len();
    let run_empty = checks.iter().all(|c| c.row.b.is_none()) && new.is_empty();
    let compared = checks.iter().filter(|c| c.row.change.is_some()).count();
    let exit_code = if run_empty && ignored > 0 {
        notes.push(format!("nothing compared: the budgets' ignore rules leave out every row there was ({ignored})"));
        ErrorKind::Empty.exit_code()
    } else if run_empty {
        notes.push(format!(
            "nothing profiled: {} has no samples to check (no workload/timings.json samples, no nsys/samples.json)",
            diff.b.path
        ));
        ErrorKind::Empty.exit_code()
    } else if checks.iter().any(|c| c.fails) || shifts.iter().any(|s| s.fails) {
        ErrorKind::Regression.exit_code()
    } else if compared == 0 && !args.allow_empty_baseline {
        notes.push(format!(
            "nothing compared: no row of {} has a comparison with {} (rows in one run only, or without samples or a comparable load in both: each row's reason says which)",
            diff.b.path, diff.a.path
        ));
        ErrorKind::Empty.exit_code()
    } else {
        if compared == 0 {
            notes.push("nothing compared, and --allow-empty-baseline says that is expected: pass".into());
        }
        0
    };
    Ok(CheckReport {
        schema: CHECK_SCHEMA.into(),
        run: diff.b,
        baseline: diff.a,
        budgets: args.budgets.as_ref().map(|p| p.display().to_string()),
        strict: args.strict,
        method: diff.method,
        checks,
        new,
        shifts,
        notes,
        unlike_loads: diff.unlike_loads,
        ignored,
        status: if exit_code == 0 { "pass".into() } else { "fail".into() },
        exit_code,
    })
}

/// Each row's outcome under the budgets, and whether it fails; rows in the
/// run only are listed apart (they never fail).
fn judged(rows: Vec<Row>, budgets: &Budgets, strict: bool) -> (Vec<Checked>, Vec<String>) {
    let mut checks = Vec::new();
    let mut new = Vec::new();
    for row in rows {
        let thresholds = budgets.judge(row.source, &row.name).unwrap_or_default();
        let outcome = match row.verdict {
            Verdict::Slower => Outcome::Regression,
            Verdict::Faster | Verdict::Unchanged => Outcome::Pass,
            Verdict::Inconclusive => Outcome::Inconclusive,
            Verdict::Missing => Outcome::Missing,
            Verdict::New => {
                new.push(format!("{} {}", row.source.as_str(), row.name));
                continue;
            }
        };
        let fails = match outcome {
            Outcome::Regression => true,
            Outcome::Inconclusive => strict,
            // A kernel leaves the top N when another grows: only a named one must stay.
            Outcome::Missing => row.source != Source::Kernel || budgets.names(row.source, &row.name),
            Outcome::Pass => false,
        };
        checks.push(Checked { outcome, fails, thresholds, row });
    }
    (checks, new)
}

/// `--allow-empty-baseline` with no baseline run yet: the run is read (it
/// must be readable, ok and hold samples), every row is new, and the check passes.
fn first_run(args: &CheckArgs, budgets: &Budgets) -> Result<CheckReport, Error> {
    let judge = |s: Source, n: &str| budgets.judge(s, n);
    let options = super::diff::Options { top: 0, discount_shift: args.discount_shift };
    let diff = super::diff::diff(args.run, args.run, options, &judge)?;
    if diff.b.status != crate::manifest::Status::Ok {
        return Err(Error::new(
            ErrorKind::StageFailed,
            format!("the run {} ended {} (its manifest.json): no baseline to make of it", diff.b.path, diff.b.status),
        )
        .with_hint("profile again; make a baseline only of a run whose status is ok"));
    }
    let new: Vec<String> = diff.rows.iter().map(|r| format!("{} {}", r.source.as_str(), r.name)).collect();
    let exit_code = if new.is_empty() { ErrorKind::Empty.exit_code() } else { 0 };
    let note = format!(
        "no baseline at {} (--allow-empty-baseline): nothing compared; make this run the baseline",
        args.baseline.display()
    );
    Ok(CheckReport {
        schema: CHECK_SCHEMA.into(),
        baseline: super::diff::RunRef {
            path: args.baseline.display().to_string(),
            run_id: String::new(),
            status: crate::manifest::Status::Ok,
        },
        run: diff.b,
        budgets: args.budgets.as_ref().map(|p| p.display().to_string()),
        strict: args.strict,
        method: diff.method,
        checks: Vec::new(),
        new,
        shifts: Vec::new(),
        notes: vec![note],
        unlike_loads: None,
        ignored: 0,
        status: if exit_code == 0 { "pass".into() } else { "fail".into() },
        exit_code,
    })
}

/// JUnit XML: one test suite, one test case per checked row; a regression or
/// a missing row is a failure, an inconclusive one skipped (a failure with --strict).
pub(crate) fn junit(report: &CheckReport) -> Result<String, Error> {
    use quick_junit::{NonSuccessKind, Report, TestCase, TestCaseStatus, TestSuite};
    let mut suite = TestSuite::new("llmperf check");
    for c in &report.checks {
        let mut status = match (c.outcome, c.fails) {
            (_, true) => TestCaseStatus::non_success(NonSuccessKind::Failure),
            (Outcome::Inconclusive, false) | (Outcome::Missing, false) => TestCaseStatus::skipped(),
            _ => TestCaseStatus::success(),
        };
        if c.fails || c.outcome != Outcome::Pass {
            status.set_message(format!("{}: {}", c.outcome.as_str(), c.row.reason));
        }
        let mut case = TestCase::new(format!("{} {}", c.row.source.as_str(), c.row.name), status);
        case.set_classname(format!("llmperf.{}", c.row.source.as_str()));
        suite.add_test_case(case);
    }
    let mut r = Report::new(format!("llmperf check {} vs {}", report.run.run_id, report.baseline.run_id));
    r.add_test_suite(suite);
    r.to_string().map_err(|e| Error::new(ErrorKind::Internal, format!("writing JUnit XML: {e}")))
}

/// The error a failed check exits with (stderr's `error:` and `hint:`), or None when it passed.
pub(crate) fn failure(report: &CheckReport) -> Option<Error> {
    if report.exit_code == ErrorKind::Empty.exit_code() {
        let empty = report.checks.iter().all(|c| c.row.b.is_none()) && report.new.is_empty();
        return Some(if empty && report.ignored > 0 {
            Error::new(
                ErrorKind::Empty,
                format!(
                    "nothing compared: the ignore rules of {} leave out every row of the run and the baseline ({} rows)",
                    report.budgets.as_deref().unwrap_or("the budgets"),
                    report.ignored
                ),
            )
            .with_hint(
                "narrow the budgets' `ignore: true` rules (their `match` patterns) so that some rows are checked",
            )
        } else if empty {
            Error::new(ErrorKind::Empty, format!("nothing profiled: {} holds no samples to check", report.run.path))
                .with_hint(
                    "profile a workload with NVTX ranges (nsys on, or the built-in workload), then check that run",
                )
        } else {
            Error::new(
                ErrorKind::Empty,
                format!(
                    "nothing compared: no row of {} has a comparison with {}{}",
                    report.run.path,
                    report.baseline.path,
                    report.unlike_loads.as_ref().map(|n| format!(": {n}")).unwrap_or_default()
                ),
            )
            .with_hint(
                "compare runs of the same workload under the same load; for the first run of a new pipeline pass --allow-empty-baseline",
            )
        });
    }
    let rows = report.checks.iter().filter(|c| c.fails).map(|c| {
        let change = c.row.change.as_ref().map(|x| format!(" {:+.1}%", x.change_pct)).unwrap_or_default();
        format!("{} {} {}{change}", c.outcome.as_str(), c.row.source.as_str(), c.row.name)
    });
    let shifts = report.shifts.iter().filter(|s| s.fails).map(|s| {
        format!(
            "the whole run moved {:+.1}% ({:.2}x, the median of {} {} rows)",
            s.median_change_pct,
            s.factor,
            s.rows,
            s.source.as_str()
        )
    });
    let failing: Vec<String> = rows.chain(shifts).collect();
    if failing.is_empty() {
        return None;
    }
    Some(
        Error::new(ErrorKind::Regression, format!("check failed: {}", failing.join("; "))).with_hint(
            "see check/check.md in the run; a change you meant: make this run the new baseline (docs/ci.md); a known change of machine or clock: --discount-shift",
        ),
    )
}
