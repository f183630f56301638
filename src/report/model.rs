//! report: the model the reports render, typed, and what is derived from it
//! once for every renderer: the inputs read back from a run directory
//! (config, env.json, manifest.json, timings, the nsys and ncu outputs), the
//! `kernels.json` and `operators.json` models, the peak and the utilization.
use std::collections::{BTreeMap, BTreeSet};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::peaks::{self, Peak};
use crate::aggregate::categories::Categories;
use crate::aggregate::ncu::RegionReportFile;
use crate::aggregate::nsys::{RegionsReport, TopKernel};
use crate::aggregate::roofline::Roofline;
use crate::config::Config;
use crate::manifest::Manifest;
use crate::provenance::capture::CaptureHost;
use crate::provenance::Env;
use crate::run_dir::{self, RunDir};
use crate::timings::Timings;

/// Everything the reports read; each part may be missing.
pub(crate) struct Inputs {
    pub(crate) config: Option<Config>,
    pub(crate) env: Option<Env>,
    pub(crate) manifest: Option<Manifest>,
    pub(crate) timings: Option<Timings>,
    /// The same workload without a profiler (`runner.run.baseline`).
    pub(crate) baseline: Option<Timings>,
    /// The region model (nsys/regions.json, else torch/regions.json) and its
    /// top kernels, and which timeline they came from.
    pub(crate) regions: Option<RegionsReport>,
    pub(crate) top_kernels: Option<Vec<TopKernel>>,
    pub(crate) timeline: run_dir::Timeline,
    /// ncu's rule results by kernel (ncu/rules.json).
    pub(crate) ncu_rules: Option<crate::aggregate::rules::RulesReport>,
    /// Where each top-level region's time went per device (nsys/breakdown.json).
    pub(crate) nsys_breakdown: Option<crate::aggregate::nsys::breakdown::BreakdownReport>,
    /// The capture's machine (nsys/capture.json), for runs without env.json (imports).
    pub(crate) capture: Option<CaptureHost>,
    /// A torch trace's GPUs that ran its GPU work, as (device, name) from its
    /// `deviceProperties` (torch/capture.json).
    pub(crate) trace_gpus: Vec<(i64, String)>,
    pub(crate) ncu: Option<RegionReportFile>,
    /// Per-kernel points from the ncu counters (roofline.json).
    pub(crate) roofline: Option<Roofline>,
    /// `profile --launcher torchrun|mpirun`: each process's rank, from its launcher.
    pub(crate) launched: Vec<crate::run_dir::LaunchedRank>,
    /// The profiled command (inputs.yaml's argv of a user's command), else empty.
    pub(crate) command: Vec<String>,
    /// The run's Perfetto traces (`perfetto/pid*.pt.trace.json.gz`, relative
    /// to the run), by name.
    pub(crate) perfetto_traces: Vec<String>,
}

impl Inputs {
    /// What the reports read, each part if present and readable.
    pub(crate) fn read(run: &RunDir) -> Inputs {
        let timeline = run_dir::Timeline::of(run);
        Inputs {
            config: crate::config::load_resolved(&run.join(run_dir::CONFIG_YAML)).ok(),
            env: run.read_json(run_dir::ENV_JSON),
            manifest: run.read_json(run_dir::MANIFEST_JSON),
            timings: run.read_json(run_dir::TIMINGS_JSON),
            baseline: run.read_json(run_dir::BASELINE_TIMINGS_JSON),
            regions: run.read_json(timeline.regions_file()),
            top_kernels: run.read_json(timeline.top_kernels_file()),
            timeline,
            nsys_breakdown: run.read_json(timeline.breakdown_file()),
            ncu_rules: run.read_json(run_dir::NCU_RULES_JSON),
            capture: run.read_json(run_dir::NSYS_CAPTURE),
            trace_gpus: trace_gpus(run),
            ncu: run.read_json(run_dir::NCU_REGIONS_JSON),
            roofline: run.read_json(run_dir::ROOFLINE_JSON),
            launched: crate::run_dir::read_launched(&run.join(run_dir::LAUNCHED_RANKS_DIR)),
            command: profiled_command(run),
            perfetto_traces: perfetto_traces(run),
        }
    }
}

impl Inputs {
    /// No input at all: what a test starts from.
    #[cfg(test)]
    pub(crate) fn empty() -> Inputs {
        Inputs {
            config: None,
            env: None,
            manifest: None,
            timings: None,
            baseline: None,
            regions: None,
            top_kernels: None,
            timeline: run_dir::Timeline::Nsys,
            nsys_breakdown: None,
            ncu_rules: None,
            capture: None,
            trace_gpus: Vec::new(),
            ncu: None,
            roofline: None,
            launched: Vec::new(),
            command: Vec::new(),
            perfetto_traces: Vec::new(),
        }
    }
}

/// The traces `export perfetto` left in the run, relative to it, by name.
fn perfetto_traces(run: &RunDir) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(run.join(run_dir::PERFETTO_DIR)) else { return Vec::new() };
    let mut names: Vec<String> = entries
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|n| run_dir::is_perfetto_trace(n))
        .map(|n| format!("{}/{n}", run_dir::PERFETTO_DIR))
        .collect();
    names.sort();
    names
}

/// The GPUs a torch trace's kernels, copies and sets ran on, named by its
/// `deviceProperties` (torch/capture.json); empty without a trace or GPU work.
fn trace_gpus(run: &RunDir) -> Vec<(i64, String)> {
    let Some(c) = run.read_json::<serde_json::Value>(run_dir::TORCH_CAPTURE) else { return Vec::new() };
    let used: std::collections::BTreeSet<i64> =
        c["streams"].as_array().into_iter().flatten().filter_map(|s| s["device"].as_i64()).collect();
    let named = |id: i64| {
        c["devices"].as_array()?.iter().find(|d| d["id"].as_i64() == Some(id))?["name"].as_str().map(String::from)
    };
    used.into_iter().filter_map(|id| Some((id, named(id)?))).collect()
}

/// The argv of a user's command, from inputs.yaml (`workload: {kind: command, argv: [...]}`).
fn profiled_command(run: &RunDir) -> Vec<String> {
    let text = run_dir::read_regular(&run.join(run_dir::INPUTS_YAML)).unwrap_or_default();
    let Ok(v) = serde_yaml::from_str::<serde_yaml::Value>(&text) else { return Vec::new() };
    let w = &v["workload"];
    if w["kind"].as_str() != Some("command") {
        return Vec::new();
    }
    w["argv"].as_sequence().map_or(Vec::new(), |a| a.iter().filter_map(|x| x.as_str().map(String::from)).collect())
}

/// `kernels.json`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct KernelsReport {
    /// `nsys` (GPU time from the timeline), `ncu` (replayed, slower than production) or `none`.
    pub(crate) source: String,
    /// The tables show full names (`report.kernel_names=full`), not short ones.
    #[serde(default)]
    pub(crate) full_names: bool,
    pub(crate) note: Option<String>,
    pub(crate) kernels: Vec<KernelRow>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct KernelRow {
    /// The full (demangled) name: the key that joins nsys, ncu and roofline.json.
    pub(crate) kernel_name: String,
    /// The export's short name, where it has one apart from the full name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) short_name: Option<String>,
    /// The name every table shows: the short one (or the full one with
    /// `report.kernel_names=full`) cut to 60 characters, made unique among the
    /// rows (`elementwise_kernel ‹2…MulFunctor›`; `kernel_names::distinct_labels`).
    #[serde(default)]
    pub(crate) label: String,
    pub(crate) device: String,
    /// GPU time of the launches that report one.
    pub(crate) total_ms: f64,
    pub(crate) calls: u64,
    /// ncu launches without a duration (`n/a`): in `calls`, not in `total_ms`;
    /// when every launch is untimed the kernel's time is unknown, not 0.
    #[serde(default, skip_serializing_if = "crate::aggregate::skip::is_zero")]
    pub(crate) untimed_calls: u64,
    /// Over the timed launches.
    pub(crate) mean_ms: f64,
    /// Share of all kernels' GPU time in the source.
    pub(crate) share_pct: f64,
}

/// `operators.json`: the NVTX ranges that are not the built-in workload's
/// stages (`layer_3::attn`, ...; every range of a user's program, top-level
/// ones included: a PyTorch `emit_nvtx` capture's `aten::mul`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OperatorsReport {
    /// `nsys` (timeline, with GPU time) or `timings` (the workload's own clock).
    pub(crate) source: String,
    /// `gpu_time` (the GPU time of the kernels launched inside, where the
    /// capture has any; wall time breaks ties) or `wall_time`.
    #[serde(default)]
    pub(crate) ranked_by: String,
    /// By call path (the nested names).
    pub(crate) operators: Vec<OperatorRow>,
    /// By the innermost name over every call path (`aten::copy_` under
    /// `aten::to` and under `aten::contiguous` together); an instance nested
    /// in one of its own name is counted once, in the outer one.
    #[serde(default)]
    pub(crate) by_leaf: Vec<OperatorRow>,
    /// By call path with module indices collapsed (`…model.layers.[0-31].mlp::aten::linear`):
    /// only the rows that join two call paths or more (regions.json's module_groups).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) by_module_group: Vec<OperatorRow>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct OperatorRow {
    /// The rank (`rank 1`), or the process (`pid 4242`) where no rank is
    /// known, of a capture with several processes: their figures are never
    /// added together. Absent with one process.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rank: Option<String>,
    /// The nested names as reports show them (`regions::display`): `A::A1`,
    /// or `aten::to › aten::_to_copy` when a name holds `::`.
    pub(crate) name: String,
    pub(crate) total_ms: f64,
    pub(crate) calls: u64,
    pub(crate) mean_ms: f64,
    /// GPU time of the kernels launched inside (nsys, kernels attributed).
    pub(crate) gpu_ms: Option<f64>,
    /// Of `gpu_ms`: the kernels launched while this range was the innermost
    /// open one (its own, not the ranges it calls').
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) gpu_self_ms: Option<f64>,
}

impl KernelRow {
    /// The name the tables show: the short one unless `full` (or there is none).
    fn shown(&self, full: bool) -> &str {
        match (&self.short_name, full) {
            (Some(short), false) => short,
            _ => &self.kernel_name,
        }
    }

    /// Total, mean and share as tables show them: `–` where no launch was
    /// timed, and the untimed launches named beside a partial total.
    pub(crate) fn time_cells(&self) -> (String, String, String) {
        let share = format!("{:.1}%", self.share_pct);
        match self.untimed_calls {
            0 => (format!("{:.3}", self.total_ms), format!("{:.4}", self.mean_ms), share),
            u if u >= self.calls => (format!("– ({u} untimed)"), "–".into(), "–".into()),
            u => (format!("{:.3} (+{u} untimed)", self.total_ms), format!("{:.4}", self.mean_ms), share),
        }
    }
}

pub(crate) fn kernels(inputs: &Inputs) -> KernelsReport {
    let full_names =
        inputs.config.as_ref().is_some_and(|c| c.report.kernel_names == crate::config::schema::KernelNames::Full);
    let mut report = KernelsReport { full_names, ..kernel_rows(inputs) };
    let shown: Vec<String> =
        report.kernels.iter().map(|k| super::ncu_regions::short(k.shown(full_names), LABEL_CHARS)).collect();
    let pairs: Vec<(&str, &str)> =
        shown.iter().zip(&report.kernels).map(|(s, k)| (s.as_str(), k.kernel_name.as_str())).collect();
    let labels = crate::kernel_names::distinct_labels(&pairs);
    for (k, label) in report.kernels.iter_mut().zip(labels) {
        k.label = label;
    }
    report
}

/// How much of a kernel's name the tables show before its distinguishing tokens.
const LABEL_CHARS: usize = 60;

fn kernel_rows(inputs: &Inputs) -> KernelsReport {
    if let Some(top) = inputs.top_kernels.as_ref().filter(|t| !t.is_empty()) {
        let rows = top
            .iter()
            .map(|k| KernelRow {
                kernel_name: k.name.clone(),
                short_name: k.short_name.clone(),
                label: String::new(),
                device: "all".into(),
                total_ms: k.total_ns as f64 / 1e6,
                calls: k.calls as u64,
                untimed_calls: 0,
                mean_ms: k.mean_ns / 1e6,
                share_pct: k.share_pct,
            })
            .collect();
        return KernelsReport { source: inputs.timeline.name().into(), full_names: false, note: None, kernels: rows };
    }
    if let Some(scope) = inputs.ncu.as_ref().and_then(|r| r.scopes.first()) {
        let mut by_name: BTreeMap<(String, String), (u64, u64, f64)> = BTreeMap::new();
        for r in scope.regions.iter().filter(|r| r.depth == 0) {
            for k in &r.kernels {
                let e = by_name.entry((k.kernel_name.clone(), k.device.clone())).or_default();
                e.0 += k.calls;
                e.1 += k.untimed_calls;
                e.2 += k.total_ms;
            }
        }
        let all: f64 = by_name.values().map(|v| v.2).sum();
        let mut rows: Vec<KernelRow> = by_name
            .into_iter()
            .map(|((kernel_name, device), (calls, untimed_calls, total_ms))| KernelRow {
                kernel_name,
                short_name: None,
                label: String::new(),
                device,
                total_ms,
                calls,
                untimed_calls,
                mean_ms: crate::aggregate::ncu::mean_ms(total_ms * 1e6, calls - untimed_calls),
                share_pct: if all > 0.0 { 100.0 * total_ms / all } else { 0.0 },
            })
            .collect();
        rows.sort_by(|a, b| b.total_ms.total_cmp(&a.total_ms).then_with(|| a.kernel_name.cmp(&b.kernel_name)));
        let note = Some(
            "from ncu: kernels were replayed (serialized, clocks locked): times are slower than production".into(),
        );
        return KernelsReport { source: "ncu".into(), full_names: false, note, kernels: rows };
    }
    KernelsReport {
        source: "none".into(),
        full_names: false,
        note: Some("no CUDA kernels: nsys saw none (CPU run, or CUDA not traced) and ncu profiled none".into()),
        kernels: Vec::new(),
    }
}

pub(crate) fn operators(inputs: &Inputs, ranks: Option<&crate::aggregate::ranks::RanksReport>) -> OperatorsReport {
    // The built-in workload's stages (`prefill`, `decode_all`) are the per-stage table's.
    let stages: std::collections::BTreeSet<&str> = inputs
        .timings
        .iter()
        .flat_map(|t| t.stages.keys())
        .filter(|k| !k.contains(crate::regions::SEP))
        .map(String::as_str)
        .collect();
    // And their warm-up (`--model hf`): not measured, so no operator of it either.
    let warmup = |r: &crate::aggregate::nsys::Region| {
        !stages.is_empty() && r.names().first().is_some_and(|n| n == crate::regions::WARMUP)
    };
    let is_operator =
        |r: &&crate::aggregate::nsys::Region| (r.depth > 0 || !stages.contains(r.name.as_str())) && !warmup(r);
    if let Some(regions) = inputs.regions.as_ref().filter(|r| r.regions.iter().any(|r| is_operator(&r))) {
        let rank_of = process_labels(regions, ranks);
        // By nested names, not by their `::` spelling: `aten::to` inside
        // `aten::_to_copy` is not `aten` › `to` › `aten` › `_to_copy`.
        let mut by_path: BTreeMap<(Option<String>, Vec<String>), Sums> = BTreeMap::new();
        let mut by_leaf: BTreeMap<(Option<String>, Vec<String>), Sums> = BTreeMap::new();
        let mut by_group: BTreeMap<(Option<String>, Vec<String>), Grouped> = BTreeMap::new();
        for r in regions.regions.iter().filter(is_operator) {
            let names = r.names();
            let rank = rank_of.get(&r.process_id).cloned();
            if let Some((shape, indices)) = crate::aggregate::nsys::shape_of(&names) {
                let e = by_group.entry((rank.clone(), shape)).or_default();
                e.0.add(r);
                e.1.insert(indices);
            }
            by_path.entry((rank.clone(), names.clone())).or_default().add(r);
            let (leaf, callers) = names.split_last().expect("a region has a name");
            if !callers.contains(leaf) {
                by_leaf.entry((rank, vec![leaf.clone()])).or_default().add(r);
            }
        }
        let rows = |m: BTreeMap<(Option<String>, Vec<String>), Sums>| -> Vec<OperatorRow> {
            m.into_iter().map(|((rank, names), s)| s.row(rank, crate::regions::display(&names))).collect()
        };
        let (operators, by_leaf) = (rows(by_path), rows(by_leaf));
        let by_module_group = by_group
            .into_iter()
            .filter(|(_, (_, members))| members.len() > 1)
            .map(|((rank, shape), (s, members))| {
                s.row(rank, crate::regions::display(&crate::aggregate::nsys::shown(&shape, members.iter())))
            })
            .collect();
        let ranked_by = if operators.iter().any(|o| o.gpu_ms.is_some()) { "gpu_time" } else { "wall_time" };
        return OperatorsReport {
            source: inputs.timeline.name().into(),
            ranked_by: ranked_by.into(),
            operators: sorted(operators),
            by_leaf: sorted(by_leaf),
            by_module_group: sorted(by_module_group),
        };
    }
    let rows = inputs
        .timings
        .iter()
        .flat_map(|t| t.operators.iter())
        .map(|(name, s)| OperatorRow {
            rank: None,
            name: name.clone(),
            total_ms: s.total_ms,
            calls: s.count as u64,
            mean_ms: s.mean_ms,
            gpu_ms: None,
            gpu_self_ms: None,
        })
        .collect();
    OperatorsReport {
        source: "timings".into(),
        ranked_by: "wall_time".into(),
        operators: sorted(rows),
        by_leaf: Vec::new(),
        by_module_group: Vec::new(),
    }
}

/// A row of call paths whose module indices were collapsed, and the index tuples it joins.
type Grouped = (Sums, BTreeSet<Vec<u64>>);

/// What one operator row adds up: wall ns, calls, GPU ns, kernels, own GPU ns.
#[derive(Default)]
struct Sums(i64, usize, i64, usize, i64);

impl Sums {
    fn add(&mut self, r: &crate::aggregate::nsys::Region) {
        self.0 += r.inclusive_ns;
        self.1 += r.instances;
        self.2 += r.gpu_time_ns;
        self.3 += r.kernel_count;
        self.4 += r.gpu_time_exclusive_ns;
    }

    fn row(&self, rank: Option<String>, name: String) -> OperatorRow {
        let Sums(ns, calls, gpu, kernels, own) = *self;
        OperatorRow {
            rank,
            name,
            total_ms: ns as f64 / 1e6,
            calls: calls as u64,
            mean_ms: ns as f64 / 1e6 / calls.max(1) as f64,
            gpu_ms: (kernels > 0).then_some(gpu as f64 / 1e6),
            gpu_self_ms: (kernels > 0).then_some(own as f64 / 1e6),
        }
    }
}

/// With several processes in one capture: each one's rank as ranks.json
/// numbers it (`rank 1`: the launcher's variable where it recorded one, else
/// the device order; the Ranks table's own numbers) or, without one, its
/// process id (`pid 4242`); empty for one process.
pub(crate) fn process_labels(
    regions: &crate::aggregate::nsys::RegionsReport,
    ranks: Option<&crate::aggregate::ranks::RanksReport>,
) -> BTreeMap<i64, String> {
    let pids: std::collections::BTreeSet<i64> = regions.regions.iter().map(|r| r.process_id).collect();
    if pids.len() < 2 {
        return BTreeMap::new();
    }
    let mut out: BTreeMap<i64, String> = ranks
        .iter()
        .flat_map(|r| &r.ranks)
        .flat_map(|e| e.process_ids.iter().map(move |&pid| (pid, format!("rank {}", e.rank))))
        .collect();
    for pid in pids {
        out.entry(pid).or_insert_with(|| format!("pid {pid}"));
    }
    out
}

/// GPU time first where rows have it (wall time breaks ties and orders the
/// rest), else wall time.
fn sorted(mut rows: Vec<OperatorRow>) -> Vec<OperatorRow> {
    let gpu = |r: &OperatorRow| r.gpu_ms.unwrap_or(-1.0);
    rows.sort_by(|a, b| {
        gpu(b).total_cmp(&gpu(a)).then_with(|| b.total_ms.total_cmp(&a.total_ms)).then_with(|| a.name.cmp(&b.name))
    });
    rows
}

/// One stage's utilization.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct StageUse {
    pub(crate) stage: String,
    pub(crate) flops_per_call: f64,
    /// The time per call the utilization is over: the median (a few slow
    /// calls, a warm-up or a noisy host, move the mean far from it).
    pub(crate) median_ms: f64,
    /// Beside it, the mean.
    pub(crate) mean_ms: f64,
    pub(crate) achieved_flops: f64,
    pub(crate) mfu_pct: Option<f64>,
    /// Decode only: bytes per step and MBU.
    pub(crate) bytes_per_call: Option<f64>,
    pub(crate) mbu_pct: Option<f64>,
}

/// MFU per stage with an analytic FLOP count, and MBU for the decode step.
pub(crate) fn utilization(t: &Timings, peak: &Peak) -> Vec<StageUse> {
    t.flops
        .per_call
        .iter()
        .filter_map(|(stage, &flops)| {
            let s = t.stages.get(stage)?;
            let achieved = flops / (s.median_ms / 1e3);
            let bytes = t.decode_bytes.as_ref().filter(|_| stage.ends_with("decode_step")).map(|b| b.total_bytes_mean);
            Some(StageUse {
                stage: stage.clone(),
                flops_per_call: flops,
                median_ms: s.median_ms,
                mean_ms: s.mean_ms,
                achieved_flops: achieved,
                mfu_pct: peak.flops.map(|p| 100.0 * achieved / p),
                bytes_per_call: bytes,
                mbu_pct: bytes.zip(peak.bytes_per_s).map(|(b, p)| 100.0 * b / (s.median_ms / 1e3) / p),
            })
        })
        .collect()
}

/// MFU per region of a user's command: `workload.flops` (FLOPs of one
/// instance, by region selector) over nsys's median wall time per instance
/// of the region it names (where it names several, of every process or
/// thread, the median of their medians, weighted by instances, is not a
/// median: their mean is used, and said). Selectors that name no region of
/// the capture are returned apart.
pub(crate) fn region_utilization(
    flops: &std::collections::BTreeMap<String, f64>,
    regions: &RegionsReport,
    peak: &Peak,
) -> (Vec<StageUse>, Vec<String>) {
    let mut uses = Vec::new();
    let mut unmatched = Vec::new();
    for (selector, &per_call) in flops {
        let sel = crate::regions::Selector::parse(selector);
        let hits: Vec<_> = regions.regions.iter().filter(|r| sel.names_path(&r.names(), &r.domain)).collect();
        let instances: usize = hits.iter().map(|r| r.instances).sum();
        let wall_ns: i64 = hits.iter().map(|r| r.inclusive_ns).sum();
        if instances == 0 || wall_ns <= 0 {
            unmatched.push(selector.clone());
            continue;
        }
        let mean_ms = wall_ns as f64 / instances as f64 / 1e6;
        let median_ms = match hits.as_slice() {
            [one] => one.median_ns as f64 / 1e6,
            _ => mean_ms,
        };
        let achieved = per_call / (median_ms / 1e3);
        uses.push(StageUse {
            stage: selector.clone(),
            flops_per_call: per_call,
            median_ms,
            mean_ms,
            achieved_flops: achieved,
            mfu_pct: peak.flops.map(|p| 100.0 * achieved / p),
            bytes_per_call: None,
            mbu_pct: None,
        });
    }
    (uses, unmatched)
}

/// The GPU a user's command ran on, as far as the run knows: `hardware.gpu`,
/// else the first GPU a torch trace's work ran on (its `deviceProperties`),
/// else this machine's first GPU (env.json), else the capture's first GPU
/// (nsys/capture.json).
fn user_gpu(inputs: &Inputs) -> Option<(String, &'static str)> {
    if let Some(gpu) = configured_gpu(inputs) {
        return Some(gpu);
    }
    if let Some((_, name)) = inputs.trace_gpus.first() {
        return Some((name.clone(), run_dir::TORCH_CAPTURE));
    }
    let from_env =
        inputs.env.as_ref().and_then(|e| e.gpus.devices.first()).map(|d| (d.name.clone(), run_dir::ENV_JSON));
    let from_capture = || {
        let c = inputs.capture.as_ref()?;
        c.gpus.iter().find_map(|g| g.name.clone()).map(|n| (n, run_dir::NSYS_CAPTURE))
    };
    from_env.or_else(from_capture)
}

/// The peak for this run: override, GPU table, or the CPU calibration.
pub(crate) fn peak_of(inputs: &Inputs) -> Option<Peak> {
    let cfg = inputs.config.as_ref()?;
    let hw = cfg.hardware.clone();
    let Some(t) = inputs.timings.as_ref() else {
        if !cfg.workload.flops.is_empty() || inputs.ncu.is_some() {
            // A user's command with its FLOPs, or ncu counters (HFU, MBU): the
            // override, else its GPU in the table.
            let dtype = match cfg.workload.dtype {
                crate::config::schema::Dtype::F32 => "f32",
                crate::config::schema::Dtype::F16 => "f16",
                crate::config::schema::Dtype::Bf16 => "bf16",
            };
            let gpu = user_gpu(inputs);
            let mut peak = peaks::choose(&hw, "cuda", gpu.as_ref().map(|g| g.0.as_str()), dtype, None).ok()?;
            if let (None, Some(missing), Some(hint)) = (&gpu, &peak.missing, arch_hint(inputs)) {
                peak.missing = Some(format!("{missing}; {hint}"));
            }
            if let (Some((_, from)), true) = (&gpu, hw.peak_tflops.is_none()) {
                peak.source = format!("{} (GPU name from {from})", peak.source);
            }
            return Some(peak);
        }
        // No workload (an import, a user's command): only the user's own peaks,
        // which give the roofline its roofs.
        return hw.peak_tflops.and_then(|_| peaks::choose(&hw, "", None, "", None).ok());
    };
    let gpu = configured_gpu(inputs).or_else(|| gpu_name(inputs, &t.device).map(|n| (n, run_dir::ENV_JSON)));
    let mut peak =
        peaks::choose(&hw, &t.device, gpu.as_ref().map(|g| g.0.as_str()), &t.dtype, t.calibration.as_ref()).ok()?;
    let from_table = hw.peak_tflops.is_none() && t.device != "cpu" && peak.flops.is_some();
    if let (Some((_, from)), true) = (&gpu, from_table) {
        peak.source = format!("{} (GPU name from {from})", peak.source);
    }
    Some(peak)
}

/// One capture's processes as ranks (a profiler outside the launcher: one
/// nsys around torchrun or mpirun sees every rank); None for one process.
fn ranks_of_capture(
    inputs: &Inputs,
    regions: &crate::aggregate::nsys::RegionsReport,
) -> Option<crate::aggregate::ranks::RanksReport> {
    use crate::aggregate::ranks;
    if !inputs.launched.is_empty() {
        return Some(ranks_of_launch(&inputs.launched, regions));
    }
    let (by_rank, source) = ranks::ranks_of_processes(regions)?;
    let host = inputs
        .env
        .as_ref()
        .map(|e| e.os.hostname.clone())
        .or_else(|| inputs.capture.as_ref().and_then(|c| c.hostname.clone()));
    let each: Vec<ranks::RankInput> = by_rank
        .iter()
        .map(|&(rank, pid)| ranks::RankInput {
            rank,
            host: host.clone(),
            regions,
            processes: Some(vec![pid]),
            status: None,
            failure: None,
        })
        .collect();
    Some(ranks::build(&each, source, Vec::new()))
}

/// The ranks of `profile --launcher`: each process by the rank its launcher
/// gave it (the shim recorded its pid). A capture tried again (an nsys hang)
/// leaves the first try's records too: a rank is those of its processes that
/// the capture holds, and is missing, with its process ids, when it holds none.
fn ranks_of_launch(
    launched: &[crate::run_dir::LaunchedRank],
    regions: &crate::aggregate::nsys::RegionsReport,
) -> crate::aggregate::ranks::RanksReport {
    use crate::aggregate::ranks;
    let seen = |pid: i64| {
        regions.regions.iter().any(|r| r.process_id == pid) || regions.processes.iter().any(|p| p.process_id == pid)
    };
    let mut by_rank: BTreeMap<u32, Vec<&crate::run_dir::LaunchedRank>> = BTreeMap::new();
    for l in launched {
        by_rank.entry(l.rank).or_default().push(l);
    }
    let (mut each, mut missing) = (Vec::new(), Vec::new());
    for (rank, records) in by_rank {
        let pids: Vec<i64> = records.iter().map(|l| l.process_id).filter(|&p| seen(p)).collect();
        if pids.is_empty() {
            let all: Vec<String> = records.iter().map(|l| l.process_id.to_string()).collect();
            missing.push(ranks::MissingRank {
                rank,
                reason: format!("its process ({}) left no NVTX range or kernel in the capture", all.join(", ")),
            });
            continue;
        }
        each.push(ranks::RankInput {
            rank,
            host: Some(records[0].host.clone()),
            regions,
            processes: Some(pids),
            status: None,
            failure: None,
        });
    }
    let source = launched.first().map_or("environment".to_string(), |l| format!("environment ({})", l.rank_from));
    ranks::build(&each, &source, missing)
}

/// What the kernels' names say of the GPU when nothing names it: cuBLAS,
/// cuDNN and CUTLASS kernels carry the architecture they were built for
/// (`sm90_xmma_…`, `…_sm80(…)`). That is a lower bound, not the GPU (the corpus's RTX 3090,
/// sm_86, runs `sm80_` kernels), so it is a hint, never a peak.
pub(crate) fn arch_hint(inputs: &Inputs) -> Option<String> {
    let re =
        regex::Regex::new(r"(?:^|[^A-Za-z0-9])sm_?([1-9][0-9]{1,2})[a-z]?(?:[^A-Za-z0-9]|$)").expect("valid regex");
    let nsys = inputs.top_kernels.iter().flatten().map(|k| k.name.as_str());
    let ncu = inputs.ncu.iter().flat_map(|r| r.scopes.first()).flat_map(|s| &s.regions).flat_map(|r| &r.kernels);
    let names = nsys.chain(ncu.map(|k| k.kernel_name.as_str()));
    let best = names.filter_map(|n| re.captures(n)?.get(1)?.as_str().parse::<u32>().ok()).max()?;
    Some(format!(
        "kernel names carry sm{best}_ (built for compute capability {}.{}): the GPU is of that architecture or newer, which names no peak",
        best / 10,
        best % 10
    ))
}

/// `hardware.gpu`, the user's word for the GPU, with its source.
fn configured_gpu(inputs: &Inputs) -> Option<(String, &'static str)> {
    let gpu = inputs.config.as_ref()?.hardware.gpu.clone()?;
    Some((gpu, "hardware.gpu"))
}

fn gpu_name(inputs: &Inputs, device: &str) -> Option<String> {
    let index: u32 = device.strip_prefix("cuda:")?.parse().ok()?;
    let devices = &inputs.env.as_ref()?.gpus.devices;
    devices.iter().find(|d| d.index == index).map(|d| d.name.clone())
}

/// With `runner.run.repeat` > 1, per stage: the median of each repeat and
/// their spread, as text for the summary and the page.
pub(crate) fn repeat_rows(t: &Timings) -> Vec<(String, String, String)> {
    if t.repeat < 2 {
        return Vec::new();
    }
    t.stages
        .keys()
        .filter_map(|name| {
            let medians = t.repeat_medians_ms.get(name)?;
            let each: Vec<String> = medians.iter().map(|m| format!("{m:.4}")).collect();
            let spread = crate::stats::spread_pct(medians).map_or("—".into(), |p| format!("{p:.1}%"));
            Some((name.clone(), each.join(", "), spread))
        })
        .collect()
}

/// The run's kernel category table (a user's before the shipped one), once
/// per run; or why it could not be read.
fn categories_of(inputs: &Inputs) -> Result<Categories, String> {
    let user = inputs.config.as_ref().and_then(|c| c.report.kernel_categories.as_deref());
    Categories::load(user).map_err(|e| format!("kernel families not read: {}", e.message))
}

/// What to fix first, from every input that has something to say (findings.json).
fn findings_of(
    inputs: &Inputs,
    kernels: &KernelsReport,
    categories: &Result<Categories, String>,
) -> super::findings::FindingsReport {
    use super::findings::{KernelShare, NcuCounters, Sources};
    let notes: Vec<String> = categories.as_ref().err().cloned().into_iter().collect();
    let categories = categories.as_ref().ok();
    let table = peaks::table().unwrap_or_default();
    let gpu = user_gpu(inputs).and_then(|(name, _)| peaks::lookup(&table, &name));
    let shares: Vec<KernelShare> = kernels
        .kernels
        .iter()
        .map(|k| KernelShare {
            name: &k.kernel_name,
            label: &k.label,
            calls: k.calls,
            total_ms: k.total_ms,
            share_pct: k.share_pct,
        })
        .collect();
    let ncu = match (&inputs.roofline, categories) {
        (Some(roofline), Some(categories)) => {
            Some(NcuCounters { roofline, regions: inputs.ncu.as_ref(), categories, gpu })
        }
        _ => None,
    };
    let command = match &inputs.capture {
        Some(c) if inputs.command.is_empty() => c.command.as_slice(),
        _ => inputs.command.as_slice(),
    };
    super::findings::build(Sources {
        breakdown: inputs.nsys_breakdown.as_ref(),
        regions: inputs.regions.as_ref(),
        kernels: &shares,
        rules: inputs.ncu_rules.as_ref(),
        ncu,
        categories,
        gpu,
        command,
        notes,
    })
}

/// What the reports derive from their inputs, computed once for every renderer.
pub(crate) struct Derived {
    pub(crate) kernels: KernelsReport,
    pub(crate) operators: OperatorsReport,
    pub(crate) peak: Option<Peak>,
    pub(crate) uses: Vec<StageUse>,
    /// `workload.flops` selectors that name no region of the capture.
    pub(crate) unmatched_flops: Vec<String>,
    /// nsys and ncu per region (region_join.json), when both have results.
    pub(crate) join: Option<super::join::RegionJoin>,
    /// The ranks of a capture of several processes (ranks.json).
    pub(crate) ranks: Option<crate::aggregate::ranks::RanksReport>,
    /// What to fix first (findings.json).
    pub(crate) findings: super::findings::FindingsReport,
    /// The kernel category table of the run, where it could be read.
    pub(crate) categories: Option<Categories>,
}

impl Derived {
    pub(crate) fn of(inputs: &Inputs) -> Derived {
        let peak = peak_of(inputs);
        let (uses, unmatched_flops) = match (&inputs.timings, &peak, &inputs.regions, &inputs.config) {
            (Some(t), Some(p), _, _) => (utilization(t, p), Vec::new()),
            (None, Some(p), Some(r), Some(c)) => region_utilization(&c.workload.flops, r, p),
            _ => (Vec::new(), Vec::new()),
        };
        let clocks = inputs.config.as_ref().and_then(|c| c.pipeline.ncu.ncu_cli.clock_control);
        let join = match (&inputs.regions, &inputs.ncu) {
            (Some(nsys), Some(ncu)) => super::join::join(nsys, ncu, clocks, peak.as_ref()),
            _ => None,
        };
        let ranks = inputs.regions.as_ref().and_then(|r| ranks_of_capture(inputs, r));
        let operators = operators(inputs, ranks.as_ref());
        let kernels = kernels(inputs);
        let categories = categories_of(inputs);
        let findings = findings_of(inputs, &kernels, &categories);
        let categories = categories.ok();
        Derived { kernels, operators, peak, uses, unmatched_flops, join, ranks, findings, categories }
    }
}
