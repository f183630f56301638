//! aggregate: `roofline.json`, one point per kernel (name and device) from the
//! ncu counters of the run, summed while the region reports read the ncu CSVs
//! (`pipeline::ncu`); a pass's raw page, when it has one, is read for it
//! instead of the details page:
//! - FLOPs, from counts when the launch has any: the tensor-path math ops
//!   (`sm__ops_path_tensor_*.sum`, NVIDIA's counters for FLOPs on tensor
//!   cores), `flop_count_{hp,sp,dp}.sum`, and the SASS counts
//!   `sm(sp)__sass_thread_inst_executed_op_{h,f,d}{fma,add,mul}_pred_on.sum`
//!   (an FMA is 2 FLOPs);
//! - else from the rates of the Speed Of Light roofline section (the raw page of
//!   a profile with `--set roofline` or `full`), as Nsight Compute's own chart
//!   computes them: `(2·ffma + fadd + fmul).per_cycle_elapsed ×
//!   smsp__cycles_elapsed.avg.per_second` (and the h/d variants) FLOP/s, times
//!   the launch's GPU time;
//! - bytes: `dram__bytes_read.sum` + `dram__bytes_write.sum`, else
//!   `dram__bytes.sum`, else `dram__bytes.sum.per_second` × GPU time;
//! - time: the launch's GPU time (`gpu__time_duration.sum` or the SOL Duration).
//!
//! `n/a` values count as absent, never as 0. A kernel without FLOP or DRAM
//! counters has no point; the file says how many launches had them.
use rustc_hash::FxHashMap as HashMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};

use crate::parse::ncu::{LaunchView, MetricRef};

pub(crate) const SCHEMA: &str = "llmperf.roofline/v1";

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Roofline {
    pub(crate) schema: String,
    /// `ncu` when the points come from ncu counters, `none` otherwise.
    pub(crate) source: String,
    /// Launches read, and how many of them had FLOP and DRAM counters.
    pub launches: usize,
    pub launches_with_counters: usize,
    /// The counters summed into `flops`, as found in the files.
    pub flop_metrics: Vec<String>,
    pub points: Vec<Point>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Point {
    pub kernel_name: String,
    pub(crate) device: String,
    pub calls: usize,
    pub gpu_time_ns: f64,
    pub flops: f64,
    pub dram_bytes: f64,
    /// FLOP per DRAM byte.
    pub arithmetic_intensity: f64,
    /// FLOP per second of GPU time (replayed by ncu: clocks locked).
    pub achieved_flop_per_s: f64,
    /// `sm__throughput.avg.pct_of_peak_sustained_elapsed` (or the SOL "Compute
    /// (SM) Throughput"), weighted by GPU time, when collected.
    pub sm_throughput_pct: Option<f64>,
    /// `dram__throughput.avg.pct_of_peak_sustained_elapsed` (`gpu__dram_throughput` in
    /// newer section files, or the SOL "DRAM Throughput"), likewise.
    pub dram_throughput_pct: Option<f64>,
}

/// A metric's finite value in its base unit (`n/a` and `nan` are absent).
fn num(m: &MetricRef) -> Option<f64> {
    m.base().map(|(v, _)| v).filter(|v| v.is_finite())
}

fn metric<'a>(l: &'a LaunchView, name: &str) -> Option<&'a MetricRef<'a>> {
    l.metrics.iter().find(|m| m.name == name)
}

/// FLOPs per instruction of a SASS op: 2 for an FMA, 1 for an add or a multiply.
fn op_weight(op: &str) -> Option<f64> {
    match op {
        "hfma" | "ffma" | "dfma" => Some(2.0),
        "hadd" | "fadd" | "dadd" | "hmul" | "fmul" | "dmul" => Some(1.0),
        _ => None,
    }
}

/// FLOPs per unit of a counted metric: 2 for FMA instruction counts, 1 otherwise.
fn flop_weight(name: &str) -> Option<f64> {
    if name.starts_with("sm__ops_path_tensor_") && name.ends_with(".sum") && !name.contains("_sparsity_") {
        return Some(1.0);
    }
    if matches!(name, "flop_count_hp.sum" | "flop_count_sp.sum" | "flop_count_dp.sum") {
        return Some(1.0);
    }
    let op = name
        .strip_prefix("sm__sass_thread_inst_executed_op_")
        .or_else(|| name.strip_prefix("smsp__sass_thread_inst_executed_op_"))?
        .strip_suffix("_pred_on.sum")?;
    op_weight(op)
}

const DRAM_PCT: &str = "dram__throughput.avg.pct_of_peak_sustained_elapsed";
const RATE_PREFIX: &str = "smsp__sass_thread_inst_executed_op_";
const RATE_SUFFIX: &str = "_pred_on.sum.per_cycle_elapsed";

/// (FLOPs, names summed): counts first; the SOL roofline rates only when there are no counts.
fn flops_of(l: &LaunchView, ns: f64) -> Option<(f64, Vec<String>)> {
    let mut total = None::<f64>;
    let mut names = Vec::new();
    // One launch can carry a count under both sm__ and smsp__ prefixes: count each op once.
    let mut seen = std::collections::HashSet::new();
    for m in l.metrics {
        let Some(w) = flop_weight(&m.name) else { continue };
        let key = m.name.trim_start_matches("smsp__").trim_start_matches("sm__").to_string();
        if let Some(v) = num(m).filter(|_| seen.insert(key)) {
            *total.get_or_insert(0.0) += w * v;
            names.push(m.name.to_string());
        }
    }
    if total.is_some() {
        return total.map(|t| (t, names));
    }
    let hz = metric(l, "smsp__cycles_elapsed.avg.per_second").and_then(num)?;
    let mut per_cycle = None::<f64>;
    for m in l.metrics {
        let weight = m.name.strip_prefix(RATE_PREFIX).and_then(|r| r.strip_suffix(RATE_SUFFIX)).and_then(op_weight);
        if let (Some(w), Some(v)) = (weight, num(m)) {
            *per_cycle.get_or_insert(0.0) += w * v;
            names.push(m.name.to_string());
        }
    }
    let flop_per_s = per_cycle? * hz;
    names.push("smsp__cycles_elapsed.avg.per_second".into());
    Some((flop_per_s * ns * 1e-9, names))
}

fn bytes_of(l: &LaunchView, ns: f64) -> Option<f64> {
    let value = |name: &str| metric(l, name).and_then(num);
    let bytes = match (value("dram__bytes_read.sum"), value("dram__bytes_write.sum")) {
        (Some(r), Some(w)) => Some(r + w),
        _ => value("dram__bytes.sum").or_else(|| value("dram__bytes.sum.per_second").map(|b| b * ns * 1e-9)),
    };
    bytes.filter(|b| *b > 0.0)
}

/// A percentage by one of its metric names, else by its SOL label (details page).
fn pct(l: &LaunchView, names: &[&str], label: &str) -> Option<f64> {
    let m = names
        .iter()
        .find_map(|n| metric(l, n))
        .or_else(|| l.metrics.iter().find(|m| m.name == label && m.section.contains("Speed Of Light")))?;
    num(m)
}

#[derive(Default)]
struct Acc {
    calls: usize,
    ns: f64,
    flops: f64,
    bytes: f64,
    sm: (f64, f64),
    dram: (f64, f64),
}

impl Acc {
    fn merge(&mut self, o: Acc) {
        self.calls += o.calls;
        self.ns += o.ns;
        self.flops += o.flops;
        self.bytes += o.bytes;
        self.sm = (self.sm.0 + o.sm.0, self.sm.1 + o.sm.1);
        self.dram = (self.dram.0 + o.dram.0, self.dram.1 + o.dram.1);
    }
}

fn weighted(sum: (f64, f64)) -> Option<f64> {
    (sum.1 > 0.0).then(|| sum.0 / sum.1)
}

/// The roofline sums of the launches seen so far. The ncu region [`Builder`](crate::aggregate::ncu::Builder)
/// feeds one as it reads each CSV (on every core for big details files), so the
/// roofline costs no second reading of them.
#[derive(Default)]
pub struct RooflineAcc {
    launches: usize,
    counted: usize,
    flop_metrics: BTreeSet<String>,
    /// kernel name → device → sums (kernel names run to thousands of characters:
    /// looked up borrowed, copied once).
    by_kernel: HashMap<String, BTreeMap<String, Acc>>,
}

impl RooflineAcc {
    /// One launch; its (GPU time ns, FLOPs, DRAM bytes) when it had the counters.
    pub fn add(&mut self, l: &LaunchView) -> Option<(f64, f64, f64)> {
        self.launches += 1;
        let ns = l.duration_ns().filter(|v| v.is_finite() && *v > 0.0)?;
        let (Some((flops, names)), Some(bytes)) = (flops_of(l, ns), bytes_of(l, ns)) else { return None };
        self.counted += 1;
        self.flop_metrics.extend(names);
        if !self.by_kernel.contains_key(l.kernel_name) {
            self.by_kernel.insert(l.kernel_name.to_string(), BTreeMap::new());
        }
        let by_device = self.by_kernel.get_mut(l.kernel_name).expect("inserted above");
        let e = by_device.entry(l.device.unwrap_or_default().to_string()).or_default();
        e.calls += 1;
        e.ns += ns;
        e.flops += flops;
        e.bytes += bytes;
        if let Some(v) = pct(l, &["sm__throughput.avg.pct_of_peak_sustained_elapsed"], "Compute (SM) Throughput") {
            e.sm = (e.sm.0 + v * ns, e.sm.1 + ns);
        }
        if let Some(v) =
            pct(l, &[DRAM_PCT, "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"], "DRAM Throughput")
        {
            e.dram = (e.dram.0 + v * ns, e.dram.1 + ns);
        }
        Some((ns, flops, bytes))
    }

    /// Fold in what another accumulator saw (a later block or file).
    pub(crate) fn absorb(&mut self, other: RooflineAcc) {
        self.launches += other.launches;
        self.counted += other.counted;
        self.flop_metrics.extend(other.flop_metrics);
        for (kernel, devices) in other.by_kernel {
            let mine = self.by_kernel.entry(kernel).or_default();
            for (device, acc) in devices {
                mine.entry(device).or_default().merge(acc);
            }
        }
    }

    pub fn finish(self) -> Roofline {
        let mut points: Vec<Point> = self
            .by_kernel
            .into_iter()
            .flat_map(|(kernel_name, devices)| {
                devices.into_iter().map(move |(device, a)| Point {
                    kernel_name: kernel_name.clone(),
                    device,
                    calls: a.calls,
                    gpu_time_ns: a.ns,
                    flops: a.flops,
                    dram_bytes: a.bytes,
                    arithmetic_intensity: a.flops / a.bytes,
                    achieved_flop_per_s: if a.ns > 0.0 { a.flops / (a.ns * 1e-9) } else { 0.0 },
                    sm_throughput_pct: weighted(a.sm),
                    dram_throughput_pct: weighted(a.dram),
                })
            })
            .collect();
        points.sort_by(|a, b| {
            b.gpu_time_ns
                .total_cmp(&a.gpu_time_ns)
                .then_with(|| a.kernel_name.cmp(&b.kernel_name))
                .then_with(|| a.device.cmp(&b.device))
        });
        Roofline {
            schema: SCHEMA.into(),
            source: if self.launches > 0 { "ncu" } else { "none" }.into(),
            launches: self.launches,
            launches_with_counters: self.counted,
            flop_metrics: self.flop_metrics.into_iter().collect(),
            points,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    /// An FMA count is 2 FLOPs; tensor-path ops count once, their sparsity variants
    /// and the `.peak_sustained` ceilings not at all.
    #[test]
    fn flop_weights() {
        assert_eq!(flop_weight("sm__sass_thread_inst_executed_op_ffma_pred_on.sum"), Some(2.0));
        assert_eq!(flop_weight("smsp__sass_thread_inst_executed_op_hadd_pred_on.sum"), Some(1.0));
        assert_eq!(flop_weight("sm__ops_path_tensor_src_bf16_dst_fp32.sum"), Some(1.0));
        assert_eq!(flop_weight("sm__ops_path_tensor_src_bf16_dst_fp32_sparsity_on.sum"), None);
        assert_eq!(flop_weight("sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained"), None);
        assert_eq!(flop_weight("dram__bytes_read.sum"), None);
    }
}
