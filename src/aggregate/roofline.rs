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
//! `n/a` values count as absent, never as 0. Tensor-path counts alone are a
//! FLOP count only when they are not 0: a launch whose tensor ops are 0 and
//! whose other FLOP counters are `n/a` (an elementwise kernel profiled with
//! tensor counters only) has an unknown FLOP count, not 0. A kernel has a
//! point when its launches had a GPU time and any of these counters (or the
//! SM and DRAM throughputs); FLOPs, bytes and FLOP/byte are absent where a
//! launch lacked them; `launches_with_counters` counts launches with both.
//!
//! Tensor cores (`tensor` of a point): the tensor-path ops by source and
//! accumulate precision (`bf16->fp32` from `sm__ops_path_tensor_src_bf16_dst_fp32.sum`),
//! and their share of the kernel's FLOPs only where the FLOPs outside the
//! tensor path were counted too; else the share is absent, never 100%.
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
    /// The profiled GPU's compute capability, as ncu's CSV says it (`CC`,
    /// 2024.1 and later), where it does: `12.0`. It names a GPU family, not
    /// one GPU with one set of peaks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub compute_capability: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Point {
    pub kernel_name: String,
    pub(crate) device: String,
    pub calls: usize,
    pub gpu_time_ns: f64,
    /// Absent when a launch of the point had no FLOP count (see the module doc).
    pub flops: Option<f64>,
    /// Absent when a launch of the point had no DRAM byte counters (a
    /// profile with the SpeedOfLight throughputs only).
    pub dram_bytes: Option<f64>,
    /// FLOP per DRAM byte.
    pub arithmetic_intensity: Option<f64>,
    /// FLOP per second of GPU time (replayed by ncu: clocks locked).
    pub achieved_flop_per_s: Option<f64>,
    /// `sm__throughput.avg.pct_of_peak_sustained_elapsed` (or the SOL "Compute
    /// (SM) Throughput"), weighted by GPU time, when collected.
    pub sm_throughput_pct: Option<f64>,
    /// `dram__throughput.avg.pct_of_peak_sustained_elapsed` (`gpu__dram_throughput` in
    /// newer section files, or the SOL "DRAM Throughput"), likewise.
    pub dram_throughput_pct: Option<f64>,
    /// Tensor-core use, where a tensor-path counter had a number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tensor: Option<TensorUse>,
}

/// What a kernel's counters say about its tensor cores.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct TensorUse {
    /// Launches with a tensor-path counter (of the point's `calls`).
    pub launches: usize,
    /// Tensor-path math ops by source and accumulate precision (`bf16->fp32`,
    /// `fp16->fp16`, `tf32->fp32`, `fp64`): FLOPs on tensor cores.
    pub ops_by_precision: BTreeMap<String, f64>,
    /// FLOPs outside the tensor path (FMA/ADD/MUL counts or the SOL rates),
    /// when every launch of the point had them counted.
    pub other_flops: Option<f64>,
    /// Tensor ops over all FLOPs, %: only when `other_flops` is known.
    pub share_pct: Option<f64>,
    /// `sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed`,
    /// weighted by GPU time, when collected.
    pub pipe_active_pct: Option<f64>,
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

/// The precision of a tensor-path op counter (`sm__ops_path_tensor_src_bf16_dst_fp32.sum`
/// → `bf16->fp32`, `…_src_fp64.sum` → `fp64`); its sparsity variants and
/// ceilings are not counts of their own.
fn tensor_precision(name: &str) -> Option<String> {
    let rest = name.strip_prefix("sm__ops_path_tensor_src_")?.strip_suffix(".sum")?;
    if rest.contains("_sparsity_") || rest.contains('.') {
        return None;
    }
    Some(match rest.split_once("_dst_") {
        Some((src, dst)) => format!("{src}->{dst}"),
        None => rest.to_string(),
    })
}

/// FLOPs per unit of a counter outside the tensor path: 2 for FMA
/// instruction counts, 1 otherwise.
fn flop_weight(name: &str) -> Option<f64> {
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
const TENSOR_PIPE_PCT: &str = "sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_elapsed";
const RATE_PREFIX: &str = "smsp__sass_thread_inst_executed_op_";
const RATE_SUFFIX: &str = "_pred_on.sum.per_cycle_elapsed";

/// One launch's FLOPs as its counters give them.
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct Flops {
    /// Tensor-path ops by precision, when a tensor counter had a number.
    pub(crate) tensor: Option<BTreeMap<String, f64>>,
    /// FLOPs outside the tensor path, when counted (counts, else SOL rates).
    pub(crate) other: Option<f64>,
    /// The counters summed.
    names: Vec<String>,
}

impl Flops {
    fn tensor_sum(&self) -> Option<f64> {
        self.tensor.as_ref().map(|t| t.values().sum())
    }

    /// The launch's FLOPs: tensor and other where both were counted; tensor
    /// ops alone only when they are not 0 (0 tensor ops says nothing of the
    /// FMAs and adds a kernel ran); else unknown.
    pub(crate) fn total(&self) -> Option<f64> {
        match (self.tensor_sum(), self.other) {
            (Some(t), Some(o)) => Some(t + o),
            (Some(t), None) if t > 0.0 => Some(t),
            (None, Some(o)) => Some(o),
            _ => None,
        }
    }
}

/// Counts first; the SOL roofline rates only when there are no counts outside the tensor path.
fn flops_of(l: &LaunchView, ns: f64) -> Flops {
    let mut f = Flops::default();
    // One launch can carry a count under both sm__ and smsp__ prefixes: count each op once.
    let mut seen = std::collections::HashSet::new();
    for m in l.metrics {
        if let Some(precision) = tensor_precision(&m.name) {
            if let Some(v) = num(m) {
                *f.tensor.get_or_insert_with(BTreeMap::new).entry(precision).or_default() += v;
                f.names.push(m.name.to_string());
            }
            continue;
        }
        let Some(w) = flop_weight(&m.name) else { continue };
        let key = m.name.trim_start_matches("smsp__").trim_start_matches("sm__").to_string();
        if let Some(v) = num(m).filter(|_| seen.insert(key)) {
            *f.other.get_or_insert(0.0) += w * v;
            f.names.push(m.name.to_string());
        }
    }
    if f.other.is_some() {
        return f;
    }
    let Some(hz) = metric(l, "smsp__cycles_elapsed.avg.per_second").and_then(num) else { return f };
    let mut per_cycle = None::<f64>;
    let mut names = Vec::new();
    for m in l.metrics {
        let weight = m.name.strip_prefix(RATE_PREFIX).and_then(|r| r.strip_suffix(RATE_SUFFIX)).and_then(op_weight);
        if let (Some(w), Some(v)) = (weight, num(m)) {
            *per_cycle.get_or_insert(0.0) += w * v;
            names.push(m.name.to_string());
        }
    }
    if let Some(per_cycle) = per_cycle {
        f.other = Some(per_cycle * hz * ns * 1e-9);
        f.names.extend(names);
        f.names.push("smsp__cycles_elapsed.avg.per_second".into());
    }
    f
}

fn bytes_of(l: &LaunchView, ns: f64) -> Option<f64> {
    let value = |name: &str| metric(l, name).and_then(num);
    let bytes = match (value("dram__bytes_read.sum"), value("dram__bytes_write.sum")) {
        (Some(r), Some(w)) => Some(r + w),
        _ => value("dram__bytes.sum").or_else(|| value("dram__bytes.sum.per_second").map(|b| b * ns * 1e-9)),
    };
    bytes.filter(|b| *b > 0.0)
}

/// The SOL section's labels of SM throughput (% of peak) on details pages,
/// newest first: ncu 2023+, ncu 2022, and the reports of older ncu versions.
pub(crate) const SM_PCT_LABELS: [&str; 3] = ["Compute (SM) Throughput", "Compute (SM) [%]", "SM [%]"];
/// Likewise, DRAM throughput.
pub(crate) const DRAM_PCT_LABELS: [&str; 2] = ["DRAM Throughput", "SOL DRAM"];

/// A percentage by one of its metric names, else by one of its SOL labels.
fn pct(l: &LaunchView, names: &[&str], labels: &[&str]) -> Option<f64> {
    let m = names
        .iter()
        .find_map(|n| metric(l, n))
        .or_else(|| l.metrics.iter().find(|m| labels.contains(&&*m.name) && m.section.contains("Speed Of Light")))?;
    num(m)
}

/// What one launch adds to a region's counters: its GPU time, FLOPs (when
/// known), DRAM bytes and tensor-path counts.
pub struct Counted {
    pub(crate) ns: f64,
    pub(crate) bytes: f64,
    pub(crate) flops: Flops,
    /// The tensor pipe's active %, where collected.
    pub(crate) tensor_pipe_pct: Option<f64>,
}

#[derive(Default)]
struct Acc {
    calls: usize,
    ns: f64,
    /// Launches with a FLOP count, and its sum; with DRAM bytes, and theirs.
    flop_calls: usize,
    flops: f64,
    byte_calls: usize,
    bytes: f64,
    sm: (f64, f64),
    dram: (f64, f64),
    tensor: TensorAcc,
}

impl Acc {
    fn merge(&mut self, o: Acc) {
        self.calls += o.calls;
        self.ns += o.ns;
        self.flop_calls += o.flop_calls;
        self.flops += o.flops;
        self.byte_calls += o.byte_calls;
        self.bytes += o.bytes;
        self.sm = (self.sm.0 + o.sm.0, self.sm.1 + o.sm.1);
        self.dram = (self.dram.0 + o.dram.0, self.dram.1 + o.dram.1);
        self.tensor.merge(o.tensor);
    }
}

/// Tensor-path sums over launches (a kernel's, or a region's).
#[derive(Debug, Default, Clone, PartialEq)]
pub(crate) struct TensorAcc {
    /// Launches seen, and those with a tensor counter.
    pub(crate) launches: usize,
    pub(crate) with_tensor: usize,
    pub(crate) by_precision: BTreeMap<String, f64>,
    /// Launches with both tensor and other FLOPs counted, and the other FLOPs' sum.
    pub(crate) with_both: usize,
    pub(crate) other: f64,
    pub(crate) pipe: (f64, f64),
}

impl TensorAcc {
    pub(crate) fn add(&mut self, f: &Flops, pipe_pct: Option<f64>, ns: f64) {
        self.launches += 1;
        if let Some(t) = &f.tensor {
            self.with_tensor += 1;
            for (p, v) in t {
                *self.by_precision.entry(p.clone()).or_default() += v;
            }
            if let Some(o) = f.other {
                self.with_both += 1;
                self.other += o;
            }
        }
        if let Some(v) = pipe_pct {
            self.pipe = (self.pipe.0 + v * ns, self.pipe.1 + ns);
        }
    }

    pub(crate) fn merge(&mut self, o: TensorAcc) {
        self.launches += o.launches;
        self.with_tensor += o.with_tensor;
        for (p, v) in o.by_precision {
            *self.by_precision.entry(p).or_default() += v;
        }
        self.with_both += o.with_both;
        self.other += o.other;
        self.pipe = (self.pipe.0 + o.pipe.0, self.pipe.1 + o.pipe.1);
    }

    /// None when no launch had a tensor counter; the share only when every
    /// launch had the FLOPs outside the tensor path counted too.
    pub(crate) fn finish(&self) -> Option<TensorUse> {
        if self.with_tensor == 0 {
            return None;
        }
        let complete = self.with_both == self.launches;
        let tensor: f64 = self.by_precision.values().sum();
        let other = complete.then_some(self.other);
        Some(TensorUse {
            launches: self.with_tensor,
            ops_by_precision: self.by_precision.clone(),
            other_flops: other,
            share_pct: other.filter(|o| tensor + o > 0.0).map(|o| 100.0 * tensor / (tensor + o)),
            pipe_active_pct: weighted(self.pipe),
        })
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
    /// One launch; what it adds to a region's counters when it had a GPU
    /// time and DRAM counters. A launch with a GPU time and any of DRAM
    /// bytes, FLOPs or the SM/DRAM throughputs is part of its kernel's point.
    pub fn add(&mut self, l: &LaunchView) -> Option<Counted> {
        self.launches += 1;
        let ns = l.duration_ns().filter(|v| v.is_finite() && *v > 0.0)?;
        let bytes = bytes_of(l, ns);
        let flops = flops_of(l, ns);
        let total = flops.total();
        let sm = pct(l, &["sm__throughput.avg.pct_of_peak_sustained_elapsed"], &SM_PCT_LABELS);
        let dram = pct(l, &[DRAM_PCT, "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"], &DRAM_PCT_LABELS);
        if bytes.is_none() && total.is_none() && sm.is_none() && dram.is_none() && flops.tensor.is_none() {
            return None;
        }
        if total.is_some() && bytes.is_some() {
            self.counted += 1;
            self.flop_metrics.extend(flops.names.iter().cloned());
        }
        if !self.by_kernel.contains_key(l.kernel_name) {
            self.by_kernel.insert(l.kernel_name.to_string(), BTreeMap::new());
        }
        let by_device = self.by_kernel.get_mut(l.kernel_name).expect("inserted above");
        let e = by_device.entry(l.device.unwrap_or_default().to_string()).or_default();
        e.calls += 1;
        e.ns += ns;
        if let Some(t) = total {
            e.flop_calls += 1;
            e.flops += t;
        }
        if let Some(b) = bytes {
            e.byte_calls += 1;
            e.bytes += b;
        }
        if let Some(v) = sm {
            e.sm = (e.sm.0 + v * ns, e.sm.1 + ns);
        }
        if let Some(v) = dram {
            e.dram = (e.dram.0 + v * ns, e.dram.1 + ns);
        }
        let tensor_pipe_pct = metric(l, TENSOR_PIPE_PCT).and_then(num);
        e.tensor.add(&flops, tensor_pipe_pct, ns);
        Some(Counted { ns, bytes: bytes?, flops, tensor_pipe_pct })
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
                devices.into_iter().map(move |(device, a)| {
                    // FLOPs and bytes only when every launch of the point had them.
                    let flops = (a.flop_calls == a.calls).then_some(a.flops);
                    let bytes = (a.byte_calls == a.calls).then_some(a.bytes);
                    Point {
                        kernel_name: kernel_name.clone(),
                        device,
                        calls: a.calls,
                        gpu_time_ns: a.ns,
                        flops,
                        dram_bytes: bytes,
                        arithmetic_intensity: flops.zip(bytes).map(|(f, b)| f / b),
                        achieved_flop_per_s: flops.filter(|_| a.ns > 0.0).map(|f| f / (a.ns * 1e-9)),
                        sm_throughput_pct: weighted(a.sm),
                        dram_throughput_pct: weighted(a.dram),
                        tensor: a.tensor.finish(),
                    }
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
            compute_capability: None,
        }
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    /// An FMA count is 2 FLOPs outside the tensor path; tensor-path counters
    /// are counted by precision, their sparsity variants and the
    /// `.peak_sustained` ceilings not at all.
    #[test]
    fn flop_weights_and_precisions() {
        assert_eq!(flop_weight("sm__sass_thread_inst_executed_op_ffma_pred_on.sum"), Some(2.0));
        assert_eq!(flop_weight("smsp__sass_thread_inst_executed_op_hadd_pred_on.sum"), Some(1.0));
        assert_eq!(flop_weight("sm__ops_path_tensor_src_bf16_dst_fp32.sum"), None);
        assert_eq!(flop_weight("sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained"), None);
        assert_eq!(flop_weight("dram__bytes_read.sum"), None);
        assert_eq!(tensor_precision("sm__ops_path_tensor_src_bf16_dst_fp32.sum").as_deref(), Some("bf16->fp32"));
        assert_eq!(tensor_precision("sm__ops_path_tensor_src_fp64.sum").as_deref(), Some("fp64"));
        assert_eq!(tensor_precision("sm__ops_path_tensor_src_bf16_dst_fp32_sparsity_on.sum"), None);
        assert_eq!(tensor_precision("sm__ops_path_tensor_src_fp16_dst_fp16.sum.peak_sustained"), None);
    }

    /// 0 tensor ops with the other FLOP counters n/a is no FLOP count (an
    /// elementwise kernel is not 0 FLOP/byte); nonzero tensor ops are; a share
    /// needs the other FLOPs.
    #[test]
    fn a_flop_count_needs_more_than_zero_tensor_ops() {
        let t = |v: f64| Some(BTreeMap::from([("bf16->fp32".to_string(), v)]));
        let f = |tensor, other| Flops { tensor, other, names: Vec::new() };
        assert_eq!(f(t(0.0), None).total(), None);
        assert_eq!(f(t(5.0), None).total(), Some(5.0));
        assert_eq!(f(t(0.0), Some(3.0)).total(), Some(3.0));
        assert_eq!(f(None, None).total(), None);
        let mut acc = TensorAcc::default();
        acc.add(&f(t(6.0), None), None, 1.0);
        assert_eq!(acc.finish().unwrap().share_pct, None);
        let mut acc = TensorAcc::default();
        acc.add(&f(t(6.0), Some(2.0)), Some(50.0), 1.0);
        acc.add(&f(t(0.0), Some(2.0)), Some(0.0), 3.0);
        let u = acc.finish().unwrap();
        assert_eq!((u.share_pct, u.pipe_active_pct, u.launches), (Some(60.0), Some(12.5), 2));
        assert_eq!(TensorAcc::default().finish(), None);
    }
}
