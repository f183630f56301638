//! aggregate: Nsight Compute results → per-NVTX-region reports. Pure: launches in, report model out.
//!
//! Attribution (docs/internals.md, "ncu regions"):
//! - kernel replay with `--nvtx`: a kernel belongs to the push/pop ranges on its
//!   row's NVTX stack, exclusively to the innermost and inclusively to every
//!   enclosing one; an empty stack (or no NVTX column) puts it in `(unattributed)`;
//! - range and app-range replay: a result *is* a range. ncu names every such
//!   result `range`, so the name is never the key: the region is read from the
//!   result's NVTX columns ([`range_region`]): a start/end range, or the
//!   push/pop stack cut at the pass's region; without NVTX columns, the pass's
//!   only region; else `(unattributed)`. A range's counters already cover
//!   everything inside it, so nothing is summed up the tree, exclusive values
//!   are absent, and the totals add the outermost regions that hold results.
//!   Kernel selection (`report.kernels`) applies to kernels, not to ranges.
//!
//! Metric roll-up over a region's launches, by kind (`Rollup`): counts, bytes and
//! times add; percentages, rates, ratios and launch configuration are weighted
//! by each launch's GPU time; `.max`/`.min` keep the max/min; `n/a` stays n/a.
use std::collections::{BTreeMap, BTreeSet};

use rustc_hash::FxHashMap as HashMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::roofline::RooflineAcc;
pub(crate) use super::select::Selection;
use crate::parse::ncu::{Launch, LaunchSink, LaunchView, MetricRef, NvtxFrame};
use crate::profile::ncu::section_display_name;
use crate::regions::{self, Attribution};
use crate::units::{Base, Value};

pub(crate) const REPORT_SCHEMA: &str = "llmperf.ncu-regions/v1";
/// The top-level region of kernels outside every NVTX range.
pub(crate) const UNATTRIBUTED: &str = "(unattributed)";
/// ncu's section for `--metrics`.
pub(crate) const COMMAND_LINE_SECTION: &str = "Command line profiler metrics";
const DEFAULT_DOMAIN: &str = "<default domain>";
/// What ncu 2022.1+ prints as the `Kernel Name` of every range-replay result.
pub(crate) const RANGE_RESULT: &str = "range";

/// `ncu/regions/report.json`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RegionReportFile {
    pub(crate) schema: String,
    pub(crate) generated_at: String,
    /// sha256 (first 16 hex digits) of the resolved configuration that produced the run.
    pub(crate) config_fingerprint: String,
    pub(crate) source: Source,
    /// Why the report holds no regions, when it holds none.
    pub(crate) note: Option<String>,
    /// Sections and metrics the report was asked for (empty = everything present).
    pub(crate) sections: Vec<String>,
    pub(crate) metrics: Vec<String>,
    pub(crate) scopes: Vec<ScopeReport>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Source {
    /// The CSV files read, relative to the run directory when inside it.
    pub(crate) files: Vec<String>,
    /// `details` or `raw`.
    pub(crate) layout: String,
    /// `nvtx_stack` (kernel replay), `range` (range replay) or `none` (no NVTX data).
    pub(crate) attribution: Attribution,
    /// Results read (kernel launches, or ranges in range replay).
    pub(crate) results: u64,
    /// Range results that the kernel selection (`report.kernels`) did not
    /// apply to: it selects kernels, and a range is not one.
    #[serde(default, skip_serializing_if = "super::skip::is_zero")]
    pub(crate) ranges_not_selected: u64,
    /// The `Profiler Command Line` of each pass's `--page session` export
    /// (newer ncu): the replay mode and filters, proven from the report itself.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) profiler_command_lines: Vec<String>,
}

/// One scope: `aggregate`, `process:<pid>`, `rank:<r>` (a launcher's rank,
/// its processes) or `device:<id>`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScopeReport {
    pub(crate) scope: String,
    pub(crate) generated_at: String,
    pub(crate) config_fingerprint: String,
    pub(crate) regions: Vec<RegionEntry>,
    /// Over the top-level regions (which include `(unattributed)`); in range
    /// replay, over the outermost regions that hold results of their own.
    pub(crate) totals: Totals,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RegionEntry {
    /// The full nested name (`A::A1`), verbatim: the spelling selectors use.
    pub(crate) name: String,
    /// The nested names, outermost first: unambiguous where a name holds `::`
    /// itself (PyTorch's `aten::to`).
    #[serde(default)]
    pub(crate) path_names: Vec<String>,
    /// The bucket of results outside every NVTX range, named `(unattributed)`
    /// (an application range of that name is a region like any other).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub(crate) unattributed: bool,
    pub(crate) parent: Option<String>,
    pub(crate) depth: usize,
    /// NVTX domain; empty for the default domain.
    pub(crate) domain: String,
    /// Set when every result of the region came from one device / process.
    pub(crate) device: Option<String>,
    pub(crate) process_id: Option<String>,
    /// Directory under `ncu/regions/` with region.json and sections.txt.
    pub(crate) dir: String,
    pub(crate) inclusive: Totals,
    /// Why the region has no result of its own, where it has none: in range
    /// replay, the parent of a measured range (each range is measured on its
    /// own, nothing is summed up the tree). Its totals are then zero and mean
    /// "not measured", never "no GPU time".
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) no_result: Option<String>,
    /// Range results of one process and device whose first took many times
    /// the others: one-time costs (context, module loading, autotuning) in
    /// the first instance, inside the totals.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) first_use: Option<FirstUse>,
    /// Inclusive sums over the results with FLOP and DRAM counters, counted as
    /// roofline.json counts them; what HFU and MBU per region are made of.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) counters: Option<Counters>,
    /// Results whose innermost region is this one; absent in range replay.
    pub(crate) exclusive: Option<Totals>,
    /// Inclusive roll-up of the configured sections' metrics, by section then name.
    pub(crate) metrics: Vec<MetricValue>,
    /// Configured sections that have data in this region.
    pub(crate) sections: Vec<String>,
    /// Inclusive, by total time, longest first.
    pub(crate) kernels: Vec<KernelRecord>,
    pub(crate) selection: SelectionRecord,
}

/// A region's first range result against the others (`RegionEntry::first_use`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct FirstUse {
    pub(crate) first_ms: f64,
    /// The results after the first, and their median.
    pub(crate) others: u64,
    pub(crate) others_median_ms: f64,
}

/// How many times the others' median a first range result must take to be
/// called a first-use cost: the demo's first `A` under app-range replay on
/// an H200 took 25 times the next two (tests/fixtures/gpu/h200-ncu2025.3.1/).
pub(crate) const FIRST_USE_RATIO: f64 = 5.0;

/// The first-use check of one region's range results, in order: the first
/// timed, at least two others timed, and the first at least
/// [`FIRST_USE_RATIO`] times their median. A first result without a duration
/// says nothing either way.
fn first_use(range_ns: &[Option<f64>]) -> Option<FirstUse> {
    let (&first, rest) = range_ns.split_first()?;
    let first = first?;
    let mut sorted: Vec<f64> = rest.iter().flatten().copied().collect();
    if sorted.len() < 2 {
        return None;
    }
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    let median = if n % 2 == 1 { sorted[n / 2] } else { (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0 };
    (median > 0.0 && first >= FIRST_USE_RATIO * median).then(|| FirstUse {
        first_ms: first / 1e6,
        others: n as u64,
        others_median_ms: median / 1e6,
    })
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Totals {
    pub(crate) calls: u64,
    /// GPU time of the results that report one (`gpu__time_duration.sum` / Duration).
    pub(crate) gpu_time_ms: f64,
    /// Results without a duration metric: counted in calls, not in time.
    pub(crate) untimed_calls: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Counters {
    /// Results that had the counters.
    pub(crate) launches: u64,
    /// Their GPU time under ncu (replayed, clocks as ncu set them).
    pub(crate) gpu_time_ms: f64,
    /// Hardware FLOPs (tensor-pipe and FMA/ADD/MUL counts, else the SOL rates × time).
    pub(crate) flops: f64,
    /// DRAM bytes read and written.
    pub(crate) dram_bytes: f64,
    /// Tensor-core use of every result with a GPU time and DRAM counters
    /// (roofline.json's `tensor`, summed over the region): FLOPs on tensor
    /// cores by precision, and their share of the region's FLOPs where the
    /// FLOPs outside the tensor path were counted too.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) tensor: Option<super::roofline::TensorUse>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct KernelRecord {
    pub(crate) kernel_name: String,
    pub(crate) device: String,
    /// GPU time of the launches that report one.
    pub(crate) total_ms: f64,
    pub(crate) calls: u64,
    /// Launches without a duration metric (`n/a`, empty): in `calls`, not in
    /// `total_ms`; when every launch is untimed, the time is unknown, not 0.
    #[serde(default, skip_serializing_if = "super::skip::is_zero")]
    pub(crate) untimed_calls: u64,
    /// Over the timed launches (0 when there are none).
    pub(crate) mean_ms: f64,
}

/// The mean of `timed` launches' `ns`, in ms; 0 when none was timed.
pub(crate) fn mean_ms(ns: f64, timed: u64) -> f64 {
    if timed == 0 {
        0.0
    } else {
        ns / 1e6 / timed as f64
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct SelectionRecord {
    pub(crate) include_patterns: Vec<String>,
    pub(crate) exclude_patterns: Vec<String>,
    pub(crate) kernels_selected: u64,
    pub(crate) kernels_excluded: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Rollup {
    Sum,
    /// Weighted by each result's GPU time (1 when it has none).
    WeightedMean,
    Max,
    Min,
    /// A text value: kept when every result agrees, else "(varies)".
    Text,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MetricValue {
    pub(crate) section: String,
    pub(crate) name: String,
    /// The base unit of `value`: ns, byte, byte/second, hz, %, or the unit as printed.
    pub(crate) unit: String,
    pub(crate) rollup: Rollup,
    /// null when every result said n/a (never 0), or for text.
    pub(crate) value: Option<f64>,
    pub(crate) text: Option<String>,
    /// Results with a value / with n/a.
    pub(crate) samples: u64,
    pub(crate) not_available: u64,
}

/// What to keep, and how to report it.
#[derive(Debug, Clone, Default)]
pub struct Options {
    pub selection: Selection,
    /// Section identifiers (`SpeedOfLight`) or display names; empty = all.
    pub sections: Vec<String>,
    /// Metric names given with `--metrics`.
    pub metrics: Vec<String>,
    pub aggregate: bool,
    /// Process id (as the CSV spells it) → rank, where the launcher's ranks
    /// were recorded (`profile --launcher` with ncu around the launcher):
    /// one `rank:<r>` scope per rank.
    pub ranks: BTreeMap<String, u32>,
}

/// Per (process, device, region): what the region's own results add up to.
#[derive(Debug, Clone, Default)]
struct Acc {
    calls: u64,
    untimed: u64,
    time_ns: f64,
    excluded: u64,
    /// kernel name → (calls, calls without a duration, total ns of the others).
    kernels: BTreeMap<String, (u64, u64, f64)>,
    /// The launches with FLOP and DRAM counters (roofline.json's rule): calls, ns, FLOPs, bytes.
    counted: (u64, f64, f64, f64),
    /// Tensor-path counts of the launches with a GPU time and DRAM counters.
    tensor: super::roofline::TensorAcc,
    /// section → metric name → accumulator (looked up by &str: no allocation per row).
    metrics: HashMap<String, HashMap<String, MetricAcc>>,
    /// Range results only: each result's duration (None without one), in
    /// the order read (the ranges' order), for the first-use check.
    range_ns: Vec<Option<f64>>,
}

#[derive(Debug, Clone)]
struct MetricAcc {
    unit: String,
    rollup: Rollup,
    sum: f64,
    weighted: f64,
    weight: f64,
    max: f64,
    min: f64,
    text: Option<String>,
    samples: u64,
    not_available: u64,
}

impl MetricAcc {
    fn new(unit: String, rollup: Rollup) -> MetricAcc {
        MetricAcc {
            unit,
            rollup,
            sum: 0.0,
            weighted: 0.0,
            weight: 0.0,
            max: f64::NEG_INFINITY,
            min: f64::INFINITY,
            text: None,
            samples: 0,
            not_available: 0,
        }
    }

    fn add(&mut self, value: f64, weight: f64) {
        self.sum += value;
        self.weighted += value * weight;
        self.weight += weight;
        self.max = self.max.max(value);
        self.min = self.min.min(value);
        self.samples += 1;
    }

    fn add_text(&mut self, text: &str) {
        self.text = match self.text.take() {
            None if self.samples == 0 => Some(text.to_string()),
            Some(t) if t == text => Some(t),
            _ => Some("(varies)".to_string()),
        };
        self.samples += 1;
    }

    fn merge(&mut self, o: &MetricAcc) {
        self.sum += o.sum;
        self.weighted += o.weighted;
        self.weight += o.weight;
        self.max = self.max.max(o.max);
        self.min = self.min.min(o.min);
        if let Some(t) = &o.text {
            let samples = self.samples;
            self.add_text(t);
            self.samples = samples + o.samples;
        } else {
            self.samples += o.samples;
        }
        self.not_available += o.not_available;
    }

    fn value(&self) -> Option<f64> {
        if self.rollup == Rollup::Text || self.samples == 0 {
            return None;
        }
        Some(match self.rollup {
            Rollup::Sum => self.sum,
            Rollup::WeightedMean => self.weighted / self.weight,
            Rollup::Max => self.max,
            Rollup::Min => self.min,
            Rollup::Text => unreachable!(),
        })
    }
}

impl Acc {
    fn merge(&mut self, o: &Acc) {
        self.range_ns.extend_from_slice(&o.range_ns);
        self.calls += o.calls;
        self.untimed += o.untimed;
        self.time_ns += o.time_ns;
        self.excluded += o.excluded;
        let (c, m) = (&mut self.counted, o.counted);
        *c = (c.0 + m.0, c.1 + m.1, c.2 + m.2, c.3 + m.3);
        self.tensor.merge(o.tensor.clone());
        for (k, (c, u, t)) in &o.kernels {
            let e = self.kernels.entry(k.clone()).or_default();
            e.0 += c;
            e.1 += u;
            e.2 += t;
        }
        for (section, by_name) in &o.metrics {
            let mine = self.metrics.entry(section.clone()).or_default();
            for (name, m) in by_name {
                match mine.get_mut(name) {
                    Some(acc) => acc.merge(m),
                    None => {
                        mine.insert(name.clone(), m.clone());
                    }
                }
            }
        }
    }
}

/// How a metric adds up over launches: by name suffix first (metric names),
/// then by unit and section (the labels older ncu versions print).
pub(crate) fn rollup_of(metric: &MetricRef, base: Option<Base>) -> Rollup {
    let name: &str = &metric.name;
    let Some(base) = base else { return Rollup::Text };
    if name.ends_with(".max") || name.starts_with("Max ") {
        return Rollup::Max;
    }
    if name.ends_with(".min") || name.starts_with("Min ") {
        return Rollup::Min;
    }
    let per_launch_setting = metric.section == "Launch Statistics"
        || metric.section == "Occupancy"
        || name.starts_with("launch__")
        || name.starts_with("device__")
        || name.contains(" Per ")
        || name.contains("Size");
    let average = [".avg", ".pct", ".ratio", ".per_"].iter().any(|s| name.contains(s));
    if per_launch_setting || average {
        return Rollup::WeightedMean;
    }
    let additive_unit = ["cycle", "inst", "sector", "request", "wavefront", "warp", "thread", "block"];
    match base {
        Base::Nanoseconds | Base::Bytes => Rollup::Sum,
        Base::Percent | Base::BytesPerSecond | Base::Hertz => Rollup::WeightedMean,
        Base::Other if additive_unit.contains(&metric.unit.trim()) || name.ends_with(".sum") => Rollup::Sum,
        Base::Other => Rollup::WeightedMean,
    }
}

fn base_unit_name(base: Base, unit: &str) -> String {
    match base {
        Base::Nanoseconds => "ns".into(),
        Base::Bytes => "byte".into(),
        Base::BytesPerSecond => "byte/second".into(),
        Base::Hertz => "hz".into(),
        Base::Percent => "%".into(),
        Base::Other => unit.trim().to_string(),
    }
}

/// Identity of a region: its names, outermost first, and domain. Kept as a
/// list, not the `::` string: real range names contain `::` themselves
/// (TensorRT's `ExecutionContext::execute`). Ordered, a parent sorts before
/// its children. `outside` marks the bucket of results outside every range,
/// which a range the application itself named `(unattributed)` is not.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct RegionKey {
    names: Vec<String>,
    domain: String,
    outside: bool,
}

impl RegionKey {
    fn path(&self) -> String {
        regions::join(&self.names)
    }

    /// This region and its ancestors, outermost first.
    fn lineage(&self) -> impl Iterator<Item = RegionKey> + '_ {
        (1..=self.names.len()).map(|n| RegionKey {
            names: self.names[..n].to_vec(),
            domain: self.domain.clone(),
            outside: self.outside,
        })
    }
}

/// Streams launches into per-(process, device, region) accumulators.
pub struct Builder {
    opts: Options,
    /// Display names of the configured sections (plus the `--metrics` section).
    wanted_sections: Option<BTreeSet<String>>,
    /// How the results so far found their regions: `range` once any result is
    /// a range, else `nvtx_stack` once any carried a push/pop stack, else `none`.
    seen: Attribution,
    results: u64,
    ranges_not_selected: u64,
    accs: HashMap<(String, String, RegionKey), Acc>,
    /// Every result's roofline counters, selected or not (roofline.json).
    roofline: RooflineAcc,
}

impl Builder {
    pub fn new(opts: Options) -> Builder {
        let wanted_sections = (!opts.sections.is_empty()).then(|| {
            let mut s: BTreeSet<String> = opts.sections.iter().map(|id| section_display_name(id).to_string()).collect();
            s.insert(COMMAND_LINE_SECTION.to_string());
            s
        });
        Builder {
            opts,
            wanted_sections,
            seen: Attribution::None,
            results: 0,
            ranges_not_selected: 0,
            accs: HashMap::default(),
            roofline: RooflineAcc::default(),
        }
    }

    /// A parsed launch (the streaming readers' rows).
    pub fn add_launch(&mut self, launch: &Launch, how: Attribution, regions: &[String]) {
        crate::parse::ncu::with_view(launch, |view| self.add(view, how, regions));
    }

    /// The roofline sums gathered since the last call.
    pub fn take_roofline(&mut self) -> RooflineAcc {
        std::mem::take(&mut self.roofline)
    }

    /// How the results so far found their regions, taken together.
    pub(crate) fn attribution(&self) -> Attribution {
        self.seen
    }

    fn in_range_mode(&self) -> bool {
        self.seen == Attribution::Range
    }
}

/// `range` over `nvtx_stack` over `none`: what a report's results were, taken together.
fn wider(a: Attribution, b: Attribution) -> Attribution {
    match (a, b) {
        (Attribution::Range, _) | (_, Attribution::Range) => Attribution::Range,
        (Attribution::NvtxStack, _) | (_, Attribution::NvtxStack) => Attribution::NvtxStack,
        _ => Attribution::None,
    }
}

impl LaunchSink for Builder {
    /// One launch (or range result) with borrowed metric rows.
    fn add(&mut self, launch: &LaunchView, how: Attribution, regions: &[String]) {
        self.results += 1;
        let counted = self.roofline.add(launch);
        let range = how == Attribution::Range || launch.kernel_name == RANGE_RESULT;
        let (region, found) = match how {
            _ if range => (range_region(launch, regions), Attribution::Range),
            _ if launch.nvtx.is_empty() => (stack_region(launch.nvtx), Attribution::None),
            _ => (stack_region(launch.nvtx), Attribution::NvtxStack),
        };
        self.seen = wider(self.seen, found);
        let key = (launch.process_id.to_string(), launch.device(), region);
        let Builder { opts, wanted_sections, accs, .. } = self;
        let acc = accs.entry(key).or_default();
        if range && opts.selection.is_set() {
            self.ranges_not_selected += 1;
        } else if !opts.selection.keeps(launch.kernel_name) {
            acc.excluded += 1;
            return;
        }
        let duration = launch.duration_ns();
        if let Some(counted) = &counted {
            if let Some(flops) = counted.flops.total() {
                let c = &mut acc.counted;
                *c = (c.0 + 1, c.1 + counted.ns, c.2 + flops, c.3 + counted.bytes);
            }
            acc.tensor.add(&counted.flops, counted.tensor_pipe_pct, counted.ns);
        }
        acc.calls += 1;
        match duration {
            Some(d) => acc.time_ns += d,
            None => acc.untimed += 1,
        }
        if range {
            acc.range_ns.push(duration);
        }
        // Kernel names run to thousands of characters: copied once per region, not per launch.
        if !acc.kernels.contains_key(launch.kernel_name) {
            acc.kernels.insert(launch.kernel_name.to_string(), (0, 0, 0.0));
        }
        let k = acc.kernels.get_mut(launch.kernel_name).expect("inserted above");
        k.0 += 1;
        match duration {
            Some(d) => k.2 += d,
            None => k.1 += 1,
        }
        let weight = duration.filter(|d| *d > 0.0).unwrap_or(1.0);
        for m in launch.metrics {
            if !wants(opts, wanted_sections.as_ref(), m) {
                continue;
            }
            let base = m.base();
            let by_name = match acc.metrics.get_mut(&*m.section) {
                Some(b) => b,
                None => acc.metrics.entry(m.section.to_string()).or_default(),
            };
            let entry = match by_name.get_mut(&*m.name) {
                Some(e) => e,
                None => {
                    let b = base.map(|(_, b)| b);
                    let mut unit = b.map_or_else(|| m.unit.to_string(), |b| base_unit_name(b, &m.unit));
                    // Printed without a unit, taken from the metric's name: said in the unit.
                    if m.unit.trim().is_empty() && b.is_some_and(|b| b != Base::Other) {
                        unit += " (inferred from the metric name)";
                    }
                    by_name.entry(m.name.to_string()).or_insert(MetricAcc::new(unit, rollup_of(m, b)))
                }
            };
            match (&m.value, base) {
                (Value::NotAvailable, _) => entry.not_available += 1,
                (_, Some((v, _))) if entry.rollup != Rollup::Text => entry.add(v, weight),
                (Value::Text(t), _) => entry.add_text(t),
                (Value::Number(v), _) => entry.add_text(&v.to_string()),
            }
        }
    }

    /// Fold another builder's results into this one (the parallel reader's
    /// blocks, in file order).
    fn absorb(&mut self, other: Builder) {
        self.results += other.results;
        self.ranges_not_selected += other.ranges_not_selected;
        self.roofline.absorb(other.roofline);
        self.seen = wider(self.seen, other.seen);
        for (k, acc) in other.accs {
            match self.accs.get_mut(&k) {
                Some(mine) => mine.merge(&acc),
                None => {
                    self.accs.insert(k, acc);
                }
            }
        }
    }

    /// A new, empty builder with the same options.
    fn split(&self) -> Builder {
        Builder::new(self.opts.clone())
    }
}

impl Builder {
    pub fn results(&self) -> u64 {
        self.results
    }

    /// Range results the kernel selection was not applied to.
    pub(crate) fn ranges_not_selected(&self) -> u64 {
        self.ranges_not_selected
    }

    /// The scopes: aggregate (unless turned off), then each process, each
    /// rank (when the ranks are known), then each device.
    pub fn finish(&self, stamp: &Stamp) -> Vec<ScopeReport> {
        let dirs = self.dirs();
        let mut scopes = Vec::new();
        if self.opts.aggregate {
            scopes.push(self.scope("aggregate", |_, _| true, stamp, &dirs));
        }
        let pids: BTreeSet<&String> = self.accs.keys().map(|k| &k.0).collect();
        for pid in &pids {
            scopes.push(self.scope(&format!("process:{pid}"), |p, _| p == *pid, stamp, &dirs));
        }
        let mut by_rank: BTreeMap<u32, BTreeSet<&String>> = BTreeMap::new();
        for pid in pids {
            if let Some(&r) = self.opts.ranks.get(pid) {
                by_rank.entry(r).or_default().insert(pid);
            }
        }
        for (rank, mine) in by_rank {
            scopes.push(self.scope(&format!("rank:{rank}"), |p, _| mine.contains(p), stamp, &dirs));
        }
        let devices: BTreeSet<&String> = self.accs.keys().map(|k| &k.1).collect();
        for dev in devices {
            scopes.push(self.scope(&format!("device:{dev}"), |_, d| d == dev, stamp, &dirs));
        }
        scopes
    }

    /// One directory name per region (and ancestor) over all scopes, so that a
    /// region has the same directory in every scope.
    fn dirs(&self) -> BTreeMap<RegionKey, String> {
        let mut keys = BTreeSet::new();
        for (_, _, key) in self.accs.keys() {
            keys.extend(key.lineage());
        }
        let paths: Vec<String> = keys.iter().map(RegionKey::path).collect();
        let dirs = crate::run_dir::sanitize_names(paths.iter().map(String::as_str));
        keys.into_iter().zip(dirs).collect()
    }

    fn scope(
        &self,
        name: &str,
        keep: impl Fn(&String, &String) -> bool,
        stamp: &Stamp,
        dirs: &BTreeMap<RegionKey, String>,
    ) -> ScopeReport {
        let mut own: BTreeMap<RegionKey, (Acc, BTreeSet<String>, BTreeSet<String>)> = BTreeMap::new();
        // In key order, not the hash map's: float sums then do not depend on how keys hash.
        let mut accs: Vec<_> = self.accs.iter().collect();
        accs.sort_by(|a, b| a.0.cmp(b.0));
        for ((pid, dev, region), acc) in accs {
            if keep(pid, dev) {
                let e = own.entry(region.clone()).or_default();
                e.0.merge(acc);
                e.1.insert(pid.clone());
                e.2.insert(dev.clone());
            }
        }
        let tree = self.inclusive(&own);
        let regions: Vec<RegionEntry> = tree
            .iter()
            .map(|(key, (incl, pids, devs))| {
                let excl = own.get(key).map(|o| &o.0);
                self.entry(key, incl, excl, pids, devs, dirs.get(key).cloned().unwrap_or_default())
            })
            .collect();
        // Tree order (the keys' order), `(unattributed)` last.
        let mut regions = regions;
        regions.sort_by_key(|r| r.unattributed);
        // Range replay measures each region on its own: an inner range's time is
        // inside its outer range's, so only the outermost measured ones add up.
        let measured: BTreeSet<&RegionKey> =
            own.iter().filter(|(_, (acc, _, _))| acc.calls + acc.untimed > 0).map(|(k, _)| k).collect();
        let outermost: BTreeSet<String> = measured
            .iter()
            .filter(|k| !k.lineage().any(|up| up.names.len() < k.names.len() && measured.contains(&up)))
            .map(|k| k.path())
            .collect();
        let counted = |r: &&RegionEntry| if self.in_range_mode() { outermost.contains(&r.name) } else { r.depth == 0 };
        let mut totals = Totals::default();
        for r in regions.iter().filter(counted) {
            totals.calls += r.inclusive.calls;
            totals.gpu_time_ms += r.inclusive.gpu_time_ms;
            totals.untimed_calls += r.inclusive.untimed_calls;
        }
        ScopeReport {
            scope: name.to_string(),
            generated_at: stamp.generated_at.clone(),
            config_fingerprint: stamp.config_fingerprint.clone(),
            regions,
            totals,
        }
    }

    /// Every region and its ancestors, each with the merge of its own results
    /// and (kernel replay) those of every region nested in it.
    #[allow(clippy::type_complexity)]
    fn inclusive(
        &self,
        own: &BTreeMap<RegionKey, (Acc, BTreeSet<String>, BTreeSet<String>)>,
    ) -> BTreeMap<RegionKey, (Acc, BTreeSet<String>, BTreeSet<String>)> {
        let mut tree: BTreeMap<RegionKey, (Acc, BTreeSet<String>, BTreeSet<String>)> = BTreeMap::new();
        for (key, (acc, pids, devs)) in own {
            for ancestor in key.lineage() {
                let is_self = ancestor.names.len() == key.names.len();
                let e = tree.entry(ancestor).or_default();
                if is_self || !self.in_range_mode() {
                    e.0.merge(acc);
                    e.1.extend(pids.iter().cloned());
                    e.2.extend(devs.iter().cloned());
                }
            }
        }
        tree
    }

    /// The `no_result` of a region in the tree without a result of its own;
    /// `excluded`: its results the kernel selection left out.
    fn no_result_reason(&self, excluded: u64) -> String {
        match (self.in_range_mode(), excluded) {
            (true, _) => "no range result: range replay measures each range on its own, and ncu recorded none for this one (only a range nested in it); its pass may have failed (see the ncu stages in manifest.json)".into(),
            (false, 0) => "no result: ncu recorded no kernel in this region".into(),
            (false, n) => format!("no result: the kernel selection left out all {n} of its kernels"),
        }
    }

    fn entry(
        &self,
        key: &RegionKey,
        incl: &Acc,
        excl: Option<&Acc>,
        pids: &BTreeSet<String>,
        devs: &BTreeSet<String>,
        dir: String,
    ) -> RegionEntry {
        let names = &key.names;
        let single = |s: &BTreeSet<String>| (s.len() == 1).then(|| s.iter().next().cloned()).flatten();
        let device = single(devs).unwrap_or_default();
        let mut kernels: Vec<KernelRecord> = incl
            .kernels
            .iter()
            .map(|(name, (calls, untimed, ns))| KernelRecord {
                kernel_name: name.clone(),
                device: device.clone(),
                total_ms: ns / 1e6,
                calls: *calls,
                untimed_calls: *untimed,
                mean_ms: mean_ms(*ns, calls - untimed),
            })
            .collect();
        kernels.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms).then_with(|| a.kernel_name.cmp(&b.kernel_name)));
        let mut metrics: Vec<MetricValue> = incl
            .metrics
            .iter()
            .flat_map(|(section, by_name)| by_name.iter().map(move |(name, m)| metric_value(section, name, m)))
            .collect();
        metrics.sort_by(|a, b| (&a.section, &a.name).cmp(&(&b.section, &b.name)));
        let sections: Vec<String> = metrics
            .iter()
            .map(|m| m.section.clone())
            .filter(|s| !s.is_empty())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        RegionEntry {
            name: key.path(),
            path_names: names.clone(),
            unattributed: key.outside,
            parent: (names.len() > 1).then(|| regions::join(&names[..names.len() - 1])),
            depth: names.len() - 1,
            domain: key.domain.clone(),
            device: single(devs),
            process_id: single(pids),
            dir,
            inclusive: totals_of(incl),
            no_result: (incl.calls + incl.untimed == 0).then(|| self.no_result_reason(incl.excluded)),
            // Only where one process on one device ran the region: the first
            // of results pooled from several is no one's first.
            first_use: (pids.len() == 1 && devs.len() == 1).then(|| first_use(&incl.range_ns)).flatten(),
            counters: (incl.counted.0 > 0).then(|| Counters {
                launches: incl.counted.0,
                gpu_time_ms: incl.counted.1 / 1e6,
                flops: incl.counted.2,
                dram_bytes: incl.counted.3,
                tensor: incl.tensor.finish(),
            }),
            exclusive: (!self.in_range_mode()).then(|| excl.map(totals_of).unwrap_or_default()),
            metrics,
            sections,
            kernels,
            selection: SelectionRecord {
                include_patterns: self.opts.selection.include_patterns.clone(),
                exclude_patterns: self.opts.selection.exclude_patterns.clone(),
                kernels_selected: incl.calls,
                kernels_excluded: incl.excluded,
            },
        }
    }
}

/// A details row of a wanted section, or a raw column among the wanted metrics
/// (the raw page has no sections).
fn wants(opts: &Options, sections: Option<&BTreeSet<String>>, m: &MetricRef) -> bool {
    if m.section.is_empty() {
        return opts.metrics.is_empty()
            || opts.metrics.iter().any(|x| *x == m.name)
            || m.name == "gpu__time_duration.sum"
            || m.name == "gpu__time_duration.avg";
    }
    sections.is_none_or(|s| s.contains(&*m.section))
}

/// Generation stamp shared by every scope.
#[derive(Debug, Clone, Default)]
pub struct Stamp {
    pub(crate) generated_at: String,
    pub(crate) config_fingerprint: String,
}

fn totals_of(a: &Acc) -> Totals {
    Totals { calls: a.calls, gpu_time_ms: a.time_ns / 1e6, untimed_calls: a.untimed }
}

fn metric_value(section: &str, name: &str, m: &MetricAcc) -> MetricValue {
    MetricValue {
        section: section.to_string(),
        name: name.to_string(),
        unit: m.unit.clone(),
        rollup: m.rollup,
        value: m.value(),
        text: m.text.clone(),
        samples: m.samples,
        not_available: m.not_available,
    }
}

fn stack_region(nvtx: &[NvtxFrame]) -> RegionKey {
    match nvtx.last() {
        None => RegionKey { names: vec![UNATTRIBUTED.into()], domain: String::new(), outside: true },
        Some(leaf) => RegionKey {
            names: nvtx.iter().map(|f| f.name.clone()).collect(),
            domain: domain_name(&leaf.domain),
            outside: false,
        },
    }
}

/// The region of a range result, from its NVTX columns (the result's name is
/// always `range`), given the pass's regions (`A::A1`, `LLM@decode_all`):
/// 1. an open start/end range that is one of the regions (by its last name);
/// 2. the push/pop stack, cut after the innermost frame that is a region's
///    last name (ncu matches a region by its last name in range replay, so the
///    stack says which `A1` it was);
/// 3. the start/end range, else the whole push/pop stack;
/// 4. no NVTX columns: the pass's only region, else `(unattributed)`.
fn range_region(launch: &LaunchView, paths: &[String]) -> RegionKey {
    let wanted: Vec<regions::Selector> = paths.iter().map(|p| regions::Selector::parse(p)).collect();
    let is_wanted = |f: &NvtxFrame| {
        let domain = domain_name(&f.domain);
        wanted.iter().any(|w| w.domain == domain && regions::glob_match(w.leaf(), &f.name))
    };
    let frame =
        |f: &NvtxFrame| RegionKey { names: vec![f.name.clone()], domain: domain_name(&f.domain), outside: false };
    if let Some(f) = launch.start_end.iter().rev().find(|f| is_wanted(f)) {
        return frame(f);
    }
    if let Some(cut) = launch.nvtx.iter().rposition(is_wanted) {
        return stack_region(&launch.nvtx[..=cut]);
    }
    match (launch.start_end.last(), launch.nvtx.is_empty(), paths) {
        (Some(f), _, _) => frame(f),
        (None, false, _) => stack_region(launch.nvtx),
        (None, true, [only]) => configured(only),
        (None, true, _) => stack_region(&[]),
    }
}

/// A configured region: `LLM@decode_all::decode_step` is domain `LLM`, names
/// `decode_all`, `decode_step` (`::` separates the names there).
fn configured(selector: &str) -> RegionKey {
    let s = regions::Selector::parse(selector);
    RegionKey { names: s.names.iter().map(|n| n.to_string()).collect(), domain: s.domain.to_string(), outside: false }
}

fn domain_name(ncu: &str) -> String {
    if ncu == DEFAULT_DOMAIN {
        String::new()
    } else {
        ncu.to_string()
    }
}

#[cfg(test)]
mod tests;
