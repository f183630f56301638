//! compare: `llmperf diff A B`, every region, top kernel and ncu metric of
//! two run directories next to each other with a verdict per row; the rows
//! `check` judges with budgets.
use std::collections::BTreeMap;
use std::path::Path;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::verdict::{self, Change, Side, Thresholds, Verdict};
use crate::aggregate::nsys::Samples;
use crate::error::Error;
use crate::regions;
use crate::run_dir::{self, RunDir};
use crate::timings::Timings;

pub(crate) const DIFF_SCHEMA: &str = "llmperf.diff/v1";

/// Where a row's samples come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Source {
    /// The built-in workload's own wall time per region call (workload/timings.json).
    Workload,
    /// NVTX range instances in the nsys capture (nsys/samples.json).
    Nsys,
    /// GPU time of the kernels launched inside each NVTX range instance, its
    /// nested ranges' included (nsys/samples.json `gpu_samples_ns`).
    Gpu,
    /// GPU time per kernel launch in the nsys capture (nsys/samples.json).
    Kernel,
    /// A serving run's latencies as its client measured them, one sample per
    /// completed request (`ttft`, `tpot`, `e2e`) or per token gap (`itl`)
    /// (serve/requests.json).
    Request,
    /// A serving run's engine steps by kind (`prefill`, `decode`, `mixed`):
    /// each step's wall time (serve/steps.json).
    Step,
    /// The same steps' GPU time (serve/steps.json `gpu_samples_ns`).
    StepGpu,
}

impl Source {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Source::Workload => "workload",
            Source::Nsys => "nsys",
            Source::Gpu => "gpu",
            Source::Kernel => "kernel",
            Source::Request => "request",
            Source::Step => "step",
            Source::StepGpu => "step_gpu",
        }
    }

    /// Rows of a serving run's own files (serve/), not of its timeline.
    pub(crate) fn serving(self) -> bool {
        matches!(self, Source::Request | Source::Step | Source::StepGpu)
    }

    pub(crate) const ALL: [Source; 7] =
        [Source::Workload, Source::Nsys, Source::Gpu, Source::Kernel, Source::Request, Source::Step, Source::StepGpu];
}

/// `diff.json` (specs/diff.schema.json).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Diff {
    pub(crate) schema: String,
    pub(crate) a: RunRef,
    pub(crate) b: RunRef,
    /// The statistics, in words (docs/ci.md says the same at length).
    pub(crate) method: String,
    pub(crate) thresholds: Thresholds,
    pub(crate) rows: Vec<Row>,
    /// Per source, the median change of its rows, when at least
    /// [`SHIFT_MIN_ROWS`] rows were compared: a whole run that moved alike.
    pub(crate) shifts: Vec<Shift>,
    /// ncu metrics of the regions both runs profiled (one value per run: no verdict).
    pub(crate) ncu: Vec<MetricRow>,
    /// How the time breakdown (nsys/breakdown.json) of each top-level region
    /// moved, per device (one value per run: no verdict); parts that are 0 in
    /// both runs left out. Absent in diffs of runs without one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) breakdown: Vec<BreakdownRow>,
    pub(crate) notes: Vec<String>,
    /// Two serving runs under loads that differ (or not known to match):
    /// why their serving rows have no comparison. Also among the notes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) unlike_loads: Option<String>,
}

/// One part of one region's time breakdown in both runs: its share of the
/// region's wall time and its time per instance.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct BreakdownRow {
    /// `rank N` where a launcher said, else `GPU N` (process ids differ between runs).
    pub(crate) device: String,
    /// The top-level region, or `(device span)`.
    pub(crate) region: String,
    /// compute, exposed communication, copy+memset, idle: launch gaps, idle: sync stalls, idle: nothing queued.
    pub(crate) part: String,
    pub(crate) a_pct: Option<f64>,
    pub(crate) b_pct: Option<f64>,
    /// B's share minus A's, in percentage points.
    pub(crate) change_pp: Option<f64>,
    pub(crate) a_ms_per_instance: Option<f64>,
    pub(crate) b_ms_per_instance: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct RunRef {
    pub(crate) path: String,
    pub(crate) run_id: String,
    /// The run's own status, from its manifest.json.
    pub(crate) status: crate::manifest::Status,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Row {
    pub(crate) source: Source,
    /// A region as users write it (`A::A1`, `LLM@decode_all`), or a kernel name.
    pub(crate) name: String,
    pub(crate) a: Option<Side>,
    pub(crate) b: Option<Side>,
    /// Both sides present: the comparison.
    pub(crate) change: Option<Change>,
    pub(crate) verdict: Verdict,
    pub(crate) reason: String,
}

/// A machine-wide shift: every row of a source moved about alike (a busier
/// or slower machine, another clock), measured as the median of their changes.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Shift {
    pub(crate) source: Source,
    pub(crate) rows: usize,
    pub(crate) median_change_pct: f64,
}

/// Rows a source needs before its median change says anything about the whole run.
pub(crate) const SHIFT_MIN_ROWS: usize = 3;

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct MetricRow {
    pub(crate) region: String,
    pub(crate) section: String,
    pub(crate) metric: String,
    pub(crate) unit: String,
    pub(crate) a: f64,
    pub(crate) b: f64,
    pub(crate) change_pct: Option<f64>,
}

/// The samples of one row in one run.
#[derive(Debug, Clone, Default)]
struct Series {
    samples_ms: Vec<f64>,
    /// How many instances the samples stand for (more than there are samples
    /// where the run kept a bounded subset).
    instances: usize,
    repeat_medians_ms: Vec<f64>,
    /// Order of the kernel in top_kernels.json (0 = most GPU time).
    rank: usize,
}

/// What a run holds for comparing.
struct Loaded {
    dir: RunDir,
    /// The run's own status (manifest.json): a failed run is no measurement.
    status: crate::manifest::Status,
    series: BTreeMap<(Source, String), Series>,
    ncu: BTreeMap<(String, String, String), (String, f64)>,
    /// (device, region) → (instances, parts) from nsys/breakdown.json.
    breakdown: BTreeMap<(String, String), (usize, crate::aggregate::nsys::breakdown::Parts)>,
    /// A serving run's load (serve/requests.json): Some(None) where the file
    /// records none (an older llmperf); None for a run that is no serving run.
    load: Option<Option<crate::load::Shape>>,
    notes: Vec<String>,
}

impl Loaded {
    /// Every artifact a comparison reads; one that is there but unreadable,
    /// or holds a duration that is negative or not finite, is an error naming
    /// the file: never read as "nothing to compare".
    fn open(path: &Path) -> Result<Loaded, Error> {
        let dir = RunDir::open(path)?;
        let manifest: crate::manifest::Manifest = dir
            .read_json_checked(run_dir::MANIFEST_JSON)?
            .ok_or_else(|| run_dir::damaged(&dir.join(run_dir::MANIFEST_JSON), "missing"))?;
        let mut l = Loaded {
            series: BTreeMap::new(),
            ncu: BTreeMap::new(),
            breakdown: BTreeMap::new(),
            load: None,
            notes: Vec::new(),
            status: manifest.status,
            dir,
        };
        l.workload()?;
        l.nsys()?;
        l.ncu_metrics()?;
        l.breakdown()?;
        l.serving()?;
        Ok(l)
    }

    fn id(&self) -> &str {
        self.dir.run_id()
    }

    fn workload(&mut self) -> Result<(), Error> {
        let Some(t) = self.dir.read_json_checked::<Timings>(run_dir::TIMINGS_JSON)? else { return Ok(()) };
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
            self.durations(run_dir::TIMINGS_JSON, &name, samples.iter().copied())?;
            let repeat_medians_ms = t.repeat_medians_ms.get(&name).cloned().unwrap_or_default();
            let instances = t.stages.get(&name).or_else(|| t.operators.get(&name)).map_or(0, |s| s.count);
            let series = Series { instances, samples_ms: samples, repeat_medians_ms, rank: 0 };
            self.series.insert((Source::Workload, name), series);
        }
        Ok(())
    }

    /// Durations must be finite and at least 0: anything else is a damaged file.
    fn durations(&self, file: &str, row: &str, values: impl Iterator<Item = f64>) -> Result<(), Error> {
        match values.into_iter().find(|v| !(v.is_finite() && *v >= 0.0)) {
            Some(v) => Err(run_dir::damaged(&self.dir.join(file), &format!("{row}: a duration of {v}"))),
            None => Ok(()),
        }
    }

    fn nsys(&mut self) -> Result<(), Error> {
        // A torch trace's region model has the same files under torch/.
        let timeline = run_dir::Timeline::of(&self.dir);
        let samples_file = timeline.samples_file();
        let Some(s) = self.dir.read_json_checked::<Samples>(samples_file)? else {
            if self.dir.join(timeline.regions_file()).is_file() {
                self.notes.push(format!(
                    "{}: no {} (an older llmperf; `llmperf report {}` writes it): nsys rows left out",
                    self.id(),
                    samples_file,
                    self.dir.path().display()
                ));
            }
            return Ok(());
        };
        if s.schema != crate::aggregate::nsys::SAMPLES_SCHEMA {
            return Err(run_dir::unknown_schema(
                &self.dir.join(samples_file),
                &s.schema,
                crate::aggregate::nsys::SAMPLES_SCHEMA,
            ));
        }
        let mut processes: BTreeMap<String, std::collections::BTreeSet<i64>> = BTreeMap::new();
        let ms = |v: &[i64]| v.iter().map(|ns| *ns as f64 / 1e6).collect::<Vec<f64>>();
        for r in s.regions {
            let name = regions::selector(&r.path, &r.domain);
            let all = r.samples_ns.iter().chain(&r.gpu_samples_ns).map(|ns| *ns as f64);
            self.durations(samples_file, &name, all)?;
            processes.entry(name.clone()).or_default().insert(r.process_id);
            let series = self.series.entry((Source::Nsys, name.clone())).or_default();
            series.samples_ms.extend(ms(&r.samples_ns));
            series.instances += r.instances;
            if !r.gpu_samples_ns.is_empty() {
                let gpu = self.series.entry((Source::Gpu, name)).or_default();
                gpu.samples_ms.extend(ms(&r.gpu_samples_ns));
                gpu.instances += r.instances;
            }
        }
        for (name, pids) in processes.iter().filter(|(_, p)| p.len() > 1) {
            self.notes.push(format!(
                "{}: region {name} ran in {} processes; their instances are pooled into one row",
                self.id(),
                pids.len()
            ));
        }
        for (rank, k) in s.kernels.into_iter().enumerate() {
            self.durations(samples_file, &k.name, k.samples_ns.iter().map(|ns| *ns as f64))?;
            let series =
                Series { samples_ms: ms(&k.samples_ns), instances: k.calls, repeat_medians_ms: Vec::new(), rank };
            self.series.insert((Source::Kernel, k.name), series);
        }
        Ok(())
    }

    fn ncu_metrics(&mut self) -> Result<(), Error> {
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
        let Some(file) = self.dir.read_json_checked::<File>(run_dir::NCU_REGIONS_JSON)? else { return Ok(()) };
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
        Ok(())
    }

    fn breakdown(&mut self) -> Result<(), Error> {
        use crate::aggregate::nsys::breakdown::BreakdownReport;
        let file = run_dir::Timeline::of(&self.dir).breakdown_file();
        let Some(b) = self.dir.read_json_checked::<BreakdownReport>(file)? else { return Ok(()) };
        // Process ids differ between runs: a device is named by its rank, else
        // its GPU; where several processes of the run ran on one GPU without
        // ranks, by GPU and process, so that none overwrites another.
        let label = |d: &crate::aggregate::nsys::breakdown::DeviceBreakdown| {
            d.rank.map_or(format!("GPU {}", d.device), |r| format!("rank {r}"))
        };
        let mut seen: BTreeMap<String, usize> = BTreeMap::new();
        for d in &b.devices {
            *seen.entry(label(d)).or_default() += 1;
        }
        for d in b.devices {
            let device = match label(&d) {
                l if seen[&l] > 1 => format!("{l}, pid {}", d.process_id),
                l => l,
            };
            self.breakdown.insert((device.clone(), "(device span)".into()), (1, d.span));
            for r in d.regions {
                let name = regions::selector(&r.name, &r.domain);
                self.breakdown.insert((device.clone(), name), (r.instances, r.parts));
            }
        }
        Ok(())
    }

    /// A serving run: each completed request's TTFT, TPOT and end-to-end
    /// time, every inter-token gap, and each step kind's step times.
    fn serving(&mut self) -> Result<(), Error> {
        #[derive(Deserialize)]
        struct File {
            schema: String,
            #[serde(default)]
            load: Option<crate::load::Shape>,
            requests: Vec<Request>,
        }
        #[derive(Deserialize)]
        struct Request {
            error: Option<String>,
            ttft_ns: Option<i64>,
            e2e_ns: i64,
            #[serde(default)]
            itl_ns: Vec<i64>,
            tpot_ns: Option<i64>,
        }
        use crate::aggregate::steps::STEPS_SCHEMA;
        use crate::load::REQUESTS_SCHEMA;
        let Some(f) = self.dir.read_json_checked::<File>(run_dir::SERVE_REQUESTS)? else { return Ok(()) };
        if f.schema != REQUESTS_SCHEMA {
            return Err(run_dir::unknown_schema(&self.dir.join(run_dir::SERVE_REQUESTS), &f.schema, REQUESTS_SCHEMA));
        }
        self.load = Some(f.load);
        let ok: Vec<&Request> = f.requests.iter().filter(|r| r.error.is_none()).collect();
        let metrics: [(&str, Vec<i64>); 4] = [
            ("ttft", ok.iter().filter_map(|r| r.ttft_ns).collect()),
            ("tpot", ok.iter().filter_map(|r| r.tpot_ns).collect()),
            ("itl", ok.iter().flat_map(|r| r.itl_ns.iter().copied()).collect()),
            ("e2e", ok.iter().map(|r| r.e2e_ns).collect()),
        ];
        for (name, ns) in metrics {
            self.add_ns(run_dir::SERVE_REQUESTS, Source::Request, name, &ns, ns.len())?;
        }
        let Some(steps) = self.dir.read_json_checked::<crate::aggregate::steps::Steps>(run_dir::SERVE_STEPS)? else {
            return Ok(());
        };
        if steps.schema != STEPS_SCHEMA {
            return Err(run_dir::unknown_schema(&self.dir.join(run_dir::SERVE_STEPS), &steps.schema, STEPS_SCHEMA));
        }
        let kinds = steps.kinds.iter().filter(|k| k.kind != crate::aggregate::steps::Kind::Empty);
        if kinds.clone().any(|k| k.steps > 0 && k.samples_ns.is_empty()) {
            self.notes.push(format!(
                "{}: {} holds no per-step samples (written by an older llmperf): its steps are inconclusive",
                self.id(),
                run_dir::SERVE_STEPS
            ));
            for k in kinds.clone() {
                // GPU rows only where the steps launched kernels.
                let sources: &[Source] =
                    if k.gpu_time_ns > 0 { &[Source::Step, Source::StepGpu] } else { &[Source::Step] };
                for source in sources {
                    let series = Series { instances: k.steps as usize, ..Series::default() };
                    self.series.insert((*source, k.kind.as_str().to_string()), series);
                }
            }
            return Ok(());
        }
        for k in kinds {
            let instances = k.steps as usize;
            self.add_ns(run_dir::SERVE_STEPS, Source::Step, k.kind.as_str(), &k.samples_ns, instances)?;
            self.add_ns(run_dir::SERVE_STEPS, Source::StepGpu, k.kind.as_str(), &k.gpu_samples_ns, instances)?;
        }
        Ok(())
    }

    /// A row of nanosecond samples; none, no row.
    fn add_ns(&mut self, file: &str, source: Source, name: &str, ns: &[i64], instances: usize) -> Result<(), Error> {
        if ns.is_empty() {
            return Ok(());
        }
        self.durations(file, name, ns.iter().map(|v| *v as f64))?;
        let samples_ms = ns.iter().map(|v| *v as f64 / 1e6).collect();
        self.series.insert((source, name.to_string()), Series { samples_ms, instances, ..Series::default() });
        Ok(())
    }

    fn has_samples(&self) -> bool {
        self.series.values().any(|s| !s.samples_ms.is_empty())
    }
}

/// How each row is judged: its thresholds, or None to leave it out.
pub(crate) type Judge<'a> = dyn Fn(Source, &str) -> Option<Thresholds> + 'a;

/// How `diff` and `check` compare two runs.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Options {
    /// Kernel rows: each run's first `top` kernels by GPU time (0: all in top_kernels.json).
    pub(crate) top: usize,
    /// Treat a whole-run shift as the machine's, not the code's: rows that
    /// moved with it become inconclusive (`--discount-shift`; never the default).
    pub(crate) discount_shift: bool,
}

/// Compare run B with run A.
pub(crate) fn diff(a: &Path, b: &Path, options: Options, judge: &Judge) -> Result<Diff, Error> {
    let (a, b) = (Loaded::open(a)?, Loaded::open(b)?);
    Ok(build(&a, &b, options, judge))
}

fn build(a: &Loaded, b: &Loaded, options: Options, judge: &Judge) -> Diff {
    let top = options.top;
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
    let mut judged = Vec::new();
    let mut thresholds = None;
    for key in keys {
        let Some(t) = judge(key.0, &key.1) else { continue };
        thresholds.get_or_insert(t);
        rows.push(row(key, a.series.get(key), b.series.get(key), &t));
        judged.push(t);
    }
    let mut notes: Vec<String> = a.notes.iter().chain(&b.notes).cloned().collect();
    let unlike_loads = unlike_loads(a, b, &mut rows, &mut notes);
    let shifts = shifts(&rows, &judged);
    judge_few(&mut rows, &judged, &shifts);
    if options.discount_shift {
        discount_shifts(&mut rows, &shifts);
    }
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
    let breakdown = breakdown_rows(a, b);
    for (l, which) in [(a, "A"), (b, "B")] {
        if !l.has_samples() {
            notes.push(format!(
                "{which} ({}) holds no samples: no workload timings with samples_ms, no nsys/samples.json",
                l.dir.path().display()
            ));
        }
        if l.status != crate::manifest::Status::Ok {
            notes.push(format!(
                "{which} ({}) ended {}: its numbers may be incomplete",
                l.dir.path().display(),
                l.status
            ));
        }
    }
    Diff {
        schema: DIFF_SCHEMA.into(),
        a: run_ref(a),
        b: run_ref(b),
        method: method(options.discount_shift),
        thresholds: thresholds.unwrap_or_default(),
        rows,
        shifts,
        ncu,
        breakdown,
        notes,
        unlike_loads,
    }
}

/// Two serving runs' latencies and steps compare only under the same load:
/// where the loads differ (or a run does not say what its load was), their
/// rows keep both sides and lose the comparison, inconclusive with the
/// reason, which is returned. The served models may differ: that is said,
/// and compared.
fn unlike_loads(a: &Loaded, b: &Loaded, rows: &mut [Row], notes: &mut Vec<String>) -> Option<String> {
    let (Some(la), Some(lb)) = (&a.load, &b.load) else { return None };
    let why = match (la, lb) {
        (Some(x), Some(y)) => {
            if x.model != y.model {
                notes.push(format!("A served {}, B served {}", x.model, y.model));
            }
            let d = x.differences(y);
            if d.is_empty() {
                return None;
            }
            format!("the loads differ ({}): their latencies and steps are not comparable", d.join(", "))
        }
        _ => {
            let which = if la.is_none() { "A" } else { "B" };
            format!(
                "{which}'s {} records no load (an older llmperf): the loads cannot be known to match",
                run_dir::SERVE_REQUESTS
            )
        }
    };
    notes.push(why.clone());
    for r in rows.iter_mut().filter(|r| r.source.serving() && r.change.is_some()) {
        r.change = None;
        r.verdict = Verdict::Inconclusive;
        r.reason = why.clone();
    }
    Some(why)
}

/// Each part of each (device, region) of either run's breakdown, side by
/// side; parts that are 0 (or absent) in both runs left out.
fn breakdown_rows(a: &Loaded, b: &Loaded) -> Vec<BreakdownRow> {
    let mut keys: Vec<&(String, String)> = a.breakdown.keys().chain(b.breakdown.keys()).collect();
    keys.sort();
    keys.dedup();
    let mut rows = Vec::new();
    for key in keys {
        // (instances, parts, wall) of one run.
        type Parted = (usize, crate::report::findings::tables::BarParts, i64);
        let side = |l: &Loaded| -> Option<Parted> {
            l.breakdown.get(key).map(|(n, p)| (*n, crate::report::findings::tables::bar_parts(p), p.wall_ns))
        };
        let (sa, sb) = (side(a), side(b));
        for part in 0..6 {
            let pct =
                |s: &Option<Parted>| s.as_ref().filter(|s| s.2 > 0).map(|s| 100.0 * s.1[part].1 as f64 / s.2 as f64);
            let per = |s: &Option<Parted>| s.as_ref().map(|s| s.1[part].1 as f64 / 1e6 / s.0.max(1) as f64);
            let (a_pct, b_pct) = (pct(&sa), pct(&sb));
            if a_pct.unwrap_or(0.0) == 0.0 && b_pct.unwrap_or(0.0) == 0.0 {
                continue;
            }
            let label = sa.as_ref().or(sb.as_ref()).map_or("", |s| s.1[part].0);
            rows.push(BreakdownRow {
                device: key.0.clone(),
                region: key.1.clone(),
                part: label.to_string(),
                a_pct,
                b_pct,
                change_pp: a_pct.zip(b_pct).map(|(x, y)| y - x),
                a_ms_per_instance: per(&sa),
                b_ms_per_instance: per(&sb),
            });
        }
    }
    rows
}

/// Per source: the median change of its compared rows, when there are at
/// least [`SHIFT_MIN_ROWS`]: how much the whole run moved.
fn shifts(rows: &[Row], judged: &[Thresholds]) -> Vec<Shift> {
    let mut shifts = Vec::new();
    for source in Source::ALL {
        // A serving source has a few rows, some of very few samples (a load
        // of 16 requests makes 2 to 6 prefill steps): there only rows with
        // samples enough for their own verdict say how the whole run moved.
        let enough = |r: &Row, t: &Thresholds| {
            !source.serving() || [&r.a, &r.b].iter().all(|s| s.as_ref().is_some_and(|s| s.samples >= t.min_samples))
        };
        let changes: Vec<f64> = rows
            .iter()
            .zip(judged)
            .filter(|(r, t)| r.source == source && enough(r, t))
            .filter_map(|(r, _)| Some(r.change.as_ref()?.change_pct))
            .collect();
        let Some(stats) = crate::stats::Stats::of(&changes).filter(|s| s.count >= SHIFT_MIN_ROWS) else { continue };
        shifts.push(Shift { source, rows: stats.count, median_change_pct: stats.median_ms });
    }
    shifts
}

/// Rows with too few samples for an interval of their own (a kernel launched
/// 7 times, a region entered twice), judged against the other rows of their
/// source in the same pair of runs: those say how far a row moves when
/// nothing changed. A few-sample row is slower (faster) when its change is
/// past its budget and apart from its source's shift by more than the
/// budget and by more than 5 robust standard deviations (1.4826 × the median
/// absolute deviation) of the source's row changes. Needs
/// [`SHIFT_MIN_ROWS`] rows with a change; a row that moved with the whole
/// run stays inconclusive (the shift is judged by itself).
fn judge_few(rows: &mut [Row], judged: &[verdict::Thresholds], shifts: &[Shift]) {
    for shift in shifts {
        let changes: Vec<f64> = rows
            .iter()
            .filter(|r| r.source == shift.source)
            .filter_map(|r| Some(r.change.as_ref()?.change_pct))
            .collect();
        let deviations: Vec<f64> = changes.iter().map(|c| (c - shift.median_change_pct).abs()).collect();
        let Some(mad) = crate::stats::Stats::of(&deviations).map(|s| 1.4826 * s.median_ms) else { continue };
        for (r, t) in rows.iter_mut().zip(judged).filter(|(r, _)| r.source == shift.source) {
            let (Some(a), Some(b), Some(c)) = (&r.a, &r.b, r.change.as_mut()) else { continue };
            if c.verdict != Verdict::Inconclusive || a.samples.min(b.samples) >= t.min_samples {
                continue;
            }
            let apart = ((1.0 + c.change_pct / 100.0) / (1.0 + shift.median_change_pct / 100.0) - 1.0) * 100.0;
            let past =
                c.change_pct.abs() > c.threshold_pct && (c.change_pct / 100.0 * a.total_ms).abs() > t.absolute_ms;
            if !(past && apart.abs() > c.threshold_pct.max(5.0 * mad) && apart.signum() == c.change_pct.signum()) {
                continue;
            }
            c.verdict = if c.change_pct > 0.0 { Verdict::Slower } else { Verdict::Faster };
            c.reason = format!(
                "{} samples in A, {} in B: too few for an interval, but {:+.1}% is apart from the other {} {} rows (median {:+.1}%, robust spread ±{mad:.1}%) by more than the budget and 5 spreads",
                a.samples,
                b.samples,
                c.change_pct,
                shift.rows,
                shift.source.as_str(),
                shift.median_change_pct
            );
            (r.verdict, r.reason) = (c.verdict, c.reason.clone());
        }
    }
}

/// `--discount-shift`: where a source's shift is itself past the threshold,
/// a slower or faster row that moved with it (its ratio to the shift within
/// its threshold) becomes inconclusive. For a known change of machine or
/// clock only: by default a whole run that moved is a finding, and fails.
fn discount_shifts(rows: &mut [Row], shifts: &[Shift]) {
    for shift in shifts {
        let (n, median, source) = (shift.rows, shift.median_change_pct, shift.source);
        for r in rows.iter_mut().filter(|r| r.source == source) {
            let Some(c) = r.change.as_mut() else { continue };
            let moved = matches!(c.verdict, Verdict::Slower | Verdict::Faster);
            // Apart from the shift, as a ratio: +300% in a run that moved +100% is +100% apart.
            let apart = ((1.0 + c.change_pct / 100.0) / (1.0 + median / 100.0) - 1.0) * 100.0;
            if moved && median.abs() > c.threshold_pct && apart.abs() <= c.threshold_pct {
                c.verdict = Verdict::Inconclusive;
                c.reason = format!(
                    "discounted (--discount-shift): {:+.1}% here, {median:+.1}% the median of {n} {} rows",
                    c.change_pct,
                    source.as_str()
                );
                r.verdict = c.verdict;
                r.reason = c.reason.clone();
            }
        }
    }
}

fn run_ref(l: &Loaded) -> RunRef {
    RunRef { path: l.dir.path().display().to_string(), run_id: l.id().to_string(), status: l.status }
}

pub(crate) fn method(discount_shift: bool) -> String {
    format!(
        "per row, the Hodges-Lehmann estimate of the ratio of B's instances to A's (the median ratio over every pair of an A and a B instance) with its {:.0}% distribution-free (Moses) interval, at most {} samples per side; slower/faster when the interval excludes 0 and the change is past the relative threshold (widened to the larger between-repeat spread) and, over the run's instances, past the absolute one; unchanged when both ends of the interval stay within the budget; inconclusive otherwise or with too few samples. {}",
        verdict::CONFIDENCE * 100.0,
        verdict::SAMPLE_CAP,
        if discount_shift {
            "--discount-shift: rows that moved with their source's whole-run shift are inconclusive"
        } else {
            "A whole-run shift (the median change of a source's rows) is reported and judged like any row"
        }
    )
}

fn row(key: &(Source, String), a: Option<&Series>, b: Option<&Series>, t: &Thresholds) -> Row {
    let side = |s: Option<&Series>| s.and_then(|s| Side::of(&s.samples_ms, &s.repeat_medians_ms, s.instances));
    let (sa, sb) = (side(a), side(b));
    let (verdict, reason, change) = match (a, b, &sa, &sb) {
        (Some(_), None, _, _) => (Verdict::Missing, "in A only".to_string(), None),
        (None, Some(_), _, _) => (Verdict::New, "in B only".to_string(), None),
        (Some(x), Some(y), Some(p), Some(q)) => {
            let more = match key.0 {
                Source::Request => "more requests: --requests, --duration",
                Source::Step | Source::StepGpu => "more requests or longer outputs: more steps of each kind",
                _ => "infer.iters, runner.run.repeat",
            };
            let c = verdict::compare(&x.samples_ms, &y.samples_ms, p, q, t, more);
            (c.verdict, c.reason.clone(), Some(c))
        }
        _ => (Verdict::Inconclusive, "no samples in one of the runs".to_string(), None),
    };
    Row { source: key.0, name: key.1.clone(), a: sa, b: sb, change, verdict, reason }
}

/// Counts of verdicts, for the summary line.
pub(crate) fn tally(rows: &[Row]) -> BTreeMap<&'static str, usize> {
    let mut t = BTreeMap::new();
    for r in rows {
        *t.entry(r.verdict.as_str()).or_insert(0) += 1;
    }
    t
}
