//! compare: two runs side by side. `llmperf diff A B` puts every region,
//! top kernel and ncu metric of two run directories next to each other with
//! a verdict per row ([`verdict`]); `llmperf check RUN --baseline BASE` turns
//! those verdicts into pass/fail with budgets ([`check`]). Both read only
//! what runs write: `workload/timings.json` (`samples_ms`),
//! `nsys/samples.json` and `ncu/regions/report.json`.
pub mod check;
pub mod render;
pub mod verdict;

use std::collections::BTreeMap;
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::aggregate::nsys::Samples;
use crate::error::Error;
use crate::regions;
use crate::run_dir::{self, RunDir};
use crate::timings::Timings;
use verdict::{Change, Side, Thresholds, Verdict};

pub(crate) const DIFF_SCHEMA: &str = "llmperf.diff/v1";

/// Where a row's samples come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The built-in workload's own wall time per region call (workload/timings.json).
    Workload,
    /// NVTX range instances in the nsys capture (nsys/samples.json).
    Nsys,
    /// GPU time per kernel launch in the nsys capture (nsys/samples.json).
    Kernel,
}

impl Source {
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Workload => "workload",
            Source::Nsys => "nsys",
            Source::Kernel => "kernel",
        }
    }
}

/// `diff.json` (specs/diff.schema.json).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Diff {
    pub schema: String,
    pub a: RunRef,
    pub b: RunRef,
    /// The statistics, in words (docs/ci.md says the same at length).
    pub method: String,
    pub thresholds: Thresholds,
    pub rows: Vec<Row>,
    /// Per source, the median change of its rows, when at least
    /// [`SHIFT_MIN_ROWS`] rows were compared: a whole run that moved alike.
    pub shifts: Vec<Shift>,
    /// ncu metrics of the regions both runs profiled (one value per run: no verdict).
    pub ncu: Vec<MetricRow>,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RunRef {
    pub path: String,
    pub run_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Row {
    pub source: Source,
    /// A region as users write it (`A::A1`, `LLM@decode_all`), or a kernel name.
    pub name: String,
    pub a: Option<Side>,
    pub b: Option<Side>,
    /// Both sides present: the comparison.
    pub change: Option<Change>,
    pub verdict: Verdict,
    pub reason: String,
}

/// A machine-wide shift: every row of a source moved about alike (a busier
/// or slower machine, another clock), measured as the median of their changes.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Shift {
    pub source: Source,
    pub rows: usize,
    pub median_change_pct: f64,
}

/// Rows a source needs before its median change says anything about the whole run.
pub const SHIFT_MIN_ROWS: usize = 3;

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct MetricRow {
    pub region: String,
    pub section: String,
    pub metric: String,
    pub unit: String,
    pub a: f64,
    pub b: f64,
    pub change_pct: Option<f64>,
}

/// The samples of one row in one run.
#[derive(Debug, Clone, Default)]
struct Series {
    samples_ms: Vec<f64>,
    repeat_medians_ms: Vec<f64>,
    /// Order of the kernel in top_kernels.json (0 = most GPU time).
    rank: usize,
}

/// What a run holds for comparing.
struct Loaded {
    dir: RunDir,
    series: BTreeMap<(Source, String), Series>,
    ncu: BTreeMap<(String, String, String), (String, f64)>,
    notes: Vec<String>,
}

impl Loaded {
    fn open(path: &Path) -> Result<Loaded, Error> {
        let dir = RunDir::open(path)?;
        let mut l = Loaded { series: BTreeMap::new(), ncu: BTreeMap::new(), notes: Vec::new(), dir };
        l.workload();
        l.nsys();
        l.ncu_metrics();
        Ok(l)
    }

    fn id(&self) -> &str {
        self.dir.run_id()
    }

    fn workload(&mut self) {
        let Some(t) = self.dir.read_json::<Timings>(run_dir::TIMINGS_JSON) else { return };
        if t.samples_ms.is_empty() && !t.stages.is_empty() {
            self.notes.push(format!(
                "{}: {} holds no per-call samples (written by an older llmperf): its regions are inconclusive",
                self.id(),
                run_dir::TIMINGS_JSON
            ));
            for name in t.stages.keys().chain(t.operators.keys()) {
                self.series.insert((Source::Workload, name.clone()), Series::default());
            }
        }
        for (name, samples) in t.samples_ms {
            let repeat_medians_ms = t.repeat_medians_ms.get(&name).cloned().unwrap_or_default();
            self.series.insert((Source::Workload, name), Series { samples_ms: samples, repeat_medians_ms, rank: 0 });
        }
    }

    fn nsys(&mut self) {
        let Some(s) = self.dir.read_json::<Samples>(run_dir::NSYS_SAMPLES) else {
            if self.dir.join(run_dir::NSYS_REGIONS).is_file() {
                self.notes.push(format!(
                    "{}: no {} (an older llmperf; `llmperf report {}` writes it): nsys rows left out",
                    self.id(),
                    run_dir::NSYS_SAMPLES,
                    self.dir.path().display()
                ));
            }
            return;
        };
        let mut processes: BTreeMap<String, std::collections::BTreeSet<i64>> = BTreeMap::new();
        for r in s.regions {
            let name = regions::selector(&r.path, &r.domain);
            processes.entry(name.clone()).or_default().insert(r.process_id);
            let series = self.series.entry((Source::Nsys, name)).or_default();
            series.samples_ms.extend(r.samples_ns.iter().map(|ns| *ns as f64 / 1e6));
        }
        for (name, pids) in processes.iter().filter(|(_, p)| p.len() > 1) {
            self.notes.push(format!(
                "{}: region {name} ran in {} processes; their instances are pooled into one row",
                self.id(),
                pids.len()
            ));
        }
        for (rank, k) in s.kernels.into_iter().enumerate() {
            let samples_ms = k.samples_ns.iter().map(|ns| *ns as f64 / 1e6).collect();
            self.series.insert((Source::Kernel, k.name), Series { samples_ms, repeat_medians_ms: Vec::new(), rank });
        }
    }

    fn ncu_metrics(&mut self) {
        #[derive(Deserialize)]
        struct File {
            scopes: Vec<Scope>,
        }
        #[derive(Deserialize)]
        struct Scope {
            scope: String,
            regions: Vec<Region>,
        }
        #[derive(Deserialize)]
        struct Region {
            name: String,
            domain: String,
            metrics: Vec<Metric>,
        }
        #[derive(Deserialize)]
        struct Metric {
            section: String,
            name: String,
            unit: String,
            value: Option<f64>,
        }
        let Some(file) = self.dir.read_json::<File>(run_dir::NCU_REGIONS_JSON) else { return };
        // The aggregate scope when there is one (every process and device), else the only one.
        let scope = file.scopes.iter().find(|s| s.scope == "aggregate").or_else(|| file.scopes.first());
        for r in scope.map(|s| s.regions.as_slice()).unwrap_or_default() {
            for m in &r.metrics {
                if let Some(v) = m.value {
                    let key = (regions::selector(&r.name, &r.domain), m.section.clone(), m.name.clone());
                    self.ncu.insert(key, (m.unit.clone(), v));
                }
            }
        }
    }

    fn has_samples(&self) -> bool {
        self.series.values().any(|s| !s.samples_ms.is_empty())
    }
}

/// How each row is judged: its thresholds, or None to leave it out.
pub type Judge<'a> = dyn Fn(Source, &str) -> Option<Thresholds> + 'a;

/// Compare run B with run A. `top` limits kernel rows to each run's first `top`
/// kernels by GPU time (0: all in top_kernels.json).
pub fn diff(a: &Path, b: &Path, top: usize, judge: &Judge) -> Result<Diff, Error> {
    let (a, b) = (Loaded::open(a)?, Loaded::open(b)?);
    Ok(build(&a, &b, top, judge))
}

fn build(a: &Loaded, b: &Loaded, top: usize, judge: &Judge) -> Diff {
    let mut keys: Vec<&(Source, String)> = a.series.keys().chain(b.series.keys()).collect();
    keys.sort();
    keys.dedup();
    let rank = |k: &(Source, String)| {
        let r = |l: &Loaded| l.series.get(k).map_or(usize::MAX, |s| s.rank);
        r(a).min(r(b))
    };
    keys.retain(|k| k.0 != Source::Kernel || top == 0 || rank(k) < top);
    keys.sort_by_key(|k| (k.0, if k.0 == Source::Kernel { rank(k) } else { 0 }, k.1.clone()));
    let mut rows = Vec::new();
    let mut thresholds = None;
    for key in keys {
        let Some(t) = judge(key.0, &key.1) else { continue };
        thresholds.get_or_insert(t);
        rows.push(row(key, a.series.get(key), b.series.get(key), &t));
    }
    let shifts = discount_shifts(&mut rows);
    let ncu = a
        .ncu
        .iter()
        .filter_map(|(k, (unit, va))| {
            let (_, vb) = b.ncu.get(k)?;
            Some(MetricRow {
                region: k.0.clone(),
                section: k.1.clone(),
                metric: k.2.clone(),
                unit: unit.clone(),
                a: *va,
                b: *vb,
                change_pct: (*va != 0.0).then(|| (vb / va - 1.0) * 100.0),
            })
        })
        .collect();
    let mut notes: Vec<String> = a.notes.iter().chain(&b.notes).cloned().collect();
    for (l, which) in [(a, "A"), (b, "B")] {
        if !l.has_samples() {
            notes.push(format!(
                "{which} ({}) holds no samples: no workload timings with samples_ms, no nsys/samples.json",
                l.dir.path().display()
            ));
        }
    }
    Diff {
        schema: DIFF_SCHEMA.into(),
        a: run_ref(a),
        b: run_ref(b),
        method: method(),
        thresholds: thresholds.unwrap_or_default(),
        rows,
        shifts,
        ncu,
        notes,
    }
}

/// Per source: the median change of its compared rows. Where that median is
/// itself past the threshold, a row that moved with it (its ratio to the
/// shift within its threshold) is inconclusive, not slower or faster: the whole
/// run moved, and one run pair cannot tell a slower machine from slower code.
/// A row that moved apart from the rest keeps its verdict.
fn discount_shifts(rows: &mut [Row]) -> Vec<Shift> {
    let mut shifts = Vec::new();
    for source in [Source::Workload, Source::Nsys, Source::Kernel] {
        let changes: Vec<f64> =
            rows.iter().filter(|r| r.source == source).filter_map(|r| Some(r.change.as_ref()?.change_pct)).collect();
        let Some(stats) = crate::stats::Stats::of(&changes).filter(|s| s.count >= SHIFT_MIN_ROWS) else { continue };
        let (n, median) = (stats.count, stats.median_ms);
        shifts.push(Shift { source, rows: n, median_change_pct: median });
        for r in rows.iter_mut().filter(|r| r.source == source) {
            let Some(c) = r.change.as_mut() else { continue };
            let moved = matches!(c.verdict, Verdict::Slower | Verdict::Faster);
            // Apart from the shift, as a ratio: +300% in a run that moved +100% is +100% apart.
            let apart = ((1.0 + c.change_pct / 100.0) / (1.0 + median / 100.0) - 1.0) * 100.0;
            if moved && median.abs() > c.threshold_pct && apart.abs() <= c.threshold_pct {
                c.verdict = Verdict::Inconclusive;
                c.reason = format!(
                    "the whole run moved: {:+.1}% here, {median:+.1}% the median of {n} {} rows (a busier or slower machine looks the same); rerun both",
                    c.change_pct,
                    source.as_str()
                );
                r.verdict = c.verdict;
                r.reason = c.reason.clone();
            }
        }
    }
    shifts
}

fn run_ref(l: &Loaded) -> RunRef {
    RunRef { path: l.dir.path().display().to_string(), run_id: l.id().to_string() }
}

pub fn method() -> String {
    format!(
        "medians of per-instance samples; a {:.0}% percentile-bootstrap interval ({} resamples of each run, at most {} samples each) of the change in medians; slower/faster when the interval excludes 0 and the median moved past both the relative (widened to the larger between-repeat spread) and the absolute threshold; unchanged when the whole interval stays within one of them; inconclusive otherwise, with too few samples, or when the row moved with the whole run (the median change of at least {} rows of its source past the threshold)",
        verdict::CONFIDENCE * 100.0,
        verdict::RESAMPLES,
        verdict::BOOTSTRAP_CAP,
        SHIFT_MIN_ROWS
    )
}

fn row(key: &(Source, String), a: Option<&Series>, b: Option<&Series>, t: &Thresholds) -> Row {
    let side = |s: Option<&Series>| s.and_then(|s| Side::of(&s.samples_ms, &s.repeat_medians_ms));
    let (sa, sb) = (side(a), side(b));
    let (verdict, reason, change) = match (a, b, &sa, &sb) {
        (Some(_), None, _, _) => (Verdict::Missing, "in A only".to_string(), None),
        (None, Some(_), _, _) => (Verdict::New, "in B only".to_string(), None),
        (Some(x), Some(y), Some(p), Some(q)) => {
            let seed = verdict::seed_of(&format!("{}:{}", key.0.as_str(), key.1));
            let c = verdict::compare(&x.samples_ms, &y.samples_ms, p, q, t, seed);
            (c.verdict, c.reason.clone(), Some(c))
        }
        _ => (Verdict::Inconclusive, "no samples in one of the runs".to_string(), None),
    };
    Row { source: key.0, name: key.1.clone(), a: sa, b: sb, change, verdict, reason }
}

/// Counts of verdicts, for the summary line.
pub fn tally(rows: &[Row]) -> BTreeMap<&'static str, usize> {
    let mut t = BTreeMap::new();
    for r in rows {
        *t.entry(r.verdict.as_str()).or_insert(0) += 1;
    }
    t
}

/// `diff/diff.json`, `diff.md`, `diff.html` in run B.
pub fn write_diff(b: &Path, d: &Diff, markdown: &str) -> Result<(), Error> {
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
pub fn write_check(
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
