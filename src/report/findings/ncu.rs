//! report::findings::ncu: what ncu's counters and rules say, as findings
//! where there is no nsys timeline (kernel families over the profiled GPU
//! time), as readings of a device's kernel families where there is one, the
//! tensor-core use per region, and ncu's own advice.
use std::collections::BTreeMap;

use super::model::{ev, Confidence, Evidence, Finding, KernelShare, Kind, NcuAdvice, ShareOf, TensorRow, MIN_SHARE};
use crate::aggregate::categories::{Categories, Category};
use crate::aggregate::roofline::{Point, Roofline};
use crate::aggregate::rules::RulesReport;
use crate::report::peaks::GpuPeak;

/// ncu's DRAM or SM throughput at or above this (% of peak) is high: ncu's own
/// rules call less than 60% of peak a latency issue.
pub(crate) const HIGH_THROUGHPUT_PCT: f64 = 60.0;
/// A GEMM whose tensor ops are below this share of its FLOPs (%) runs mostly off tensor cores.
const LOW_TENSOR_SHARE_PCT: f64 = 50.0;
/// Kernels named in a kernel-family finding.
pub(crate) const FAMILY_KERNELS: usize = 5;
/// Where kernel-family findings of ncu alone live: the kernels ncu profiled, not an NVTX region.
pub(crate) const NCU_KERNELS: &str = "(kernels profiled by ncu)";
/// ncu advice rows kept, and per kernel.
const ADVICE: usize = 10;
const ADVICE_PER_KERNEL: usize = 3;

/// What the kernel-family readings read: ncu's counters per kernel, its
/// region report, the category table, and the GPU's row of the peak table
/// (None when the GPU is not known).
pub(crate) struct NcuCounters<'a> {
    pub(crate) roofline: &'a Roofline,
    pub(crate) regions: Option<&'a crate::aggregate::ncu::RegionReportFile>,
    pub(crate) categories: &'a Categories,
    pub(crate) gpu: Option<&'a GpuPeak>,
}

/// A kernel is memory bound by ncu's counters: DRAM throughput high and above the SM's.
pub(crate) fn memory_bound(p: &Point) -> bool {
    matches!((p.sm_throughput_pct, p.dram_throughput_pct), (Some(sm), Some(d)) if d >= HIGH_THROUGHPUT_PCT && d >= sm)
}

/// A GEMV (matrix × vector) reads each weight once: memory-bound by nature,
/// and tensor cores do not speed it up.
fn is_gemv(kernel: &str) -> bool {
    kernel.to_ascii_lowercase().contains("gemv")
}

/// Tensor counters that say the kernel ran (mostly) off the tensor cores.
fn low_tensor(p: &Point) -> bool {
    p.tensor.as_ref().is_some_and(|t| {
        t.ops_by_precision.values().sum::<f64>() == 0.0 || t.share_pct.is_some_and(|s| s < LOW_TENSOR_SHARE_PCT)
    })
}

/// A GEMM-category kernel that ran (mostly) off the tensor cores, where its
/// tensor counters say so (with its tensor share, where known): None without
/// them, or for a GEMV or a memory-bound one.
fn off_tensor_cores(p: &Point) -> Option<Option<f64>> {
    (low_tensor(p) && !is_gemv(&p.kernel_name) && !memory_bound(p)).then(|| p.tensor.as_ref().and_then(|t| t.share_pct))
}

/// What ncu says of one kernel family (a category on a device): the reading a
/// device's family finding takes its kind and fix from.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct NcuFamily {
    pub(crate) device: Option<i64>,
    pub(crate) category: Category,
    pub(crate) kernels: usize,
    /// The family's replayed GPU time (ns), and of it the memory-bound kernels'.
    pub(crate) ns: f64,
    pub(crate) memory_bound_ns: f64,
    /// Time-weighted over the kernels that have them.
    pub(crate) dram_pct: Option<f64>,
    pub(crate) sm_pct: Option<f64>,
    /// GEMMs off the tensor cores: their time, and the lowest tensor share where known.
    pub(crate) off_tensor_ns: f64,
    pub(crate) lowest_tensor_share: Option<f64>,
    /// The kernels, most replayed time first.
    pub(crate) names: Vec<String>,
}

impl NcuFamily {
    /// Most of the family's replayed time is in memory-bound kernels.
    pub(crate) fn is_memory_bound(&self) -> bool {
        self.memory_bound_ns * 2.0 > self.ns
    }

    /// Most of a GEMM family's replayed time is off the tensor cores.
    pub(crate) fn is_off_tensor_cores(&self) -> bool {
        self.category == Category::Gemm && self.off_tensor_ns * 2.0 > self.ns
    }

    pub(crate) fn evidence(&self) -> Vec<Evidence> {
        let mut e = vec![ev("kernels ncu profiled", self.kernels as f64, "count")];
        if let Some(d) = self.dram_pct {
            e.push(ev("ncu DRAM throughput (time-weighted)", d, "%"));
        }
        if let Some(s) = self.sm_pct {
            e.push(ev("ncu SM throughput (time-weighted)", s, "%"));
        }
        if self.memory_bound_ns > 0.0 {
            e.push(ev("of ncu time memory-bound", 100.0 * self.memory_bound_ns / self.ns.max(1.0), "%"));
        }
        if self.off_tensor_ns > 0.0 {
            e.push(ev("of ncu time off the tensor cores", 100.0 * self.off_tensor_ns / self.ns.max(1.0), "%"));
        }
        if let Some(s) = self.lowest_tensor_share {
            e.push(ev("lowest tensor share of FLOPs", s, "%"));
        }
        e
    }
}

/// Every (device, category) of ncu's points with counters, most time first.
pub(crate) fn families(n: &NcuCounters) -> Vec<NcuFamily> {
    let mut by: BTreeMap<(Option<i64>, Category), Vec<&Point>> = BTreeMap::new();
    for p in &n.roofline.points {
        by.entry((p.device.parse::<i64>().ok(), n.categories.of(&p.kernel_name))).or_default().push(p);
    }
    let mut out: Vec<NcuFamily> = by
        .into_iter()
        .map(|((device, category), mut points)| {
            points.sort_by(|a, b| b.gpu_time_ns.total_cmp(&a.gpu_time_ns));
            let ns: f64 = points.iter().map(|p| p.gpu_time_ns).sum();
            let weighted = |f: fn(&Point) -> Option<f64>| {
                let with: Vec<(f64, f64)> = points.iter().filter_map(|p| Some((f(p)?, p.gpu_time_ns))).collect();
                let t: f64 = with.iter().map(|w| w.1).sum();
                (t > 0.0).then(|| with.iter().map(|(v, w)| v * w).sum::<f64>() / t)
            };
            let off: Vec<(&&Point, Option<f64>)> = points
                .iter()
                .filter(|_| category == Category::Gemm)
                .filter_map(|p| Some((p, off_tensor_cores(p)?)))
                .collect();
            NcuFamily {
                device,
                category,
                kernels: points.len(),
                ns,
                memory_bound_ns: points.iter().filter(|p| memory_bound(p)).map(|p| p.gpu_time_ns).sum(),
                dram_pct: weighted(|p| p.dram_throughput_pct),
                sm_pct: weighted(|p| p.sm_throughput_pct),
                off_tensor_ns: off.iter().map(|(p, _)| p.gpu_time_ns).sum(),
                lowest_tensor_share: off.iter().filter_map(|(_, s)| *s).min_by(f64::total_cmp),
                names: points.iter().map(|p| p.kernel_name.clone()).collect(),
            }
        })
        .collect();
    out.sort_by(|a, b| b.ns.total_cmp(&a.ns));
    out
}

/// A GEMM family moved from CUDA cores to tensor cores runs at most the peak
/// ratio faster: the share of its time that could come back, and how that
/// bound was computed (all of it without the GPU's peaks).
pub(crate) fn tensor_core_gain(gpu: Option<&GpuPeak>) -> (f64, String) {
    // FP32 math on CUDA cores → TF32 tensor cores, the least change (FP16/BF16
    // where TF32 runs no faster than FP32, as on GeForce cards).
    let tensor_peak = |g: &GpuPeak| if g.tf32 > g.fp32 { (g.tf32, "TF32") } else { (g.fp16_bf16, "FP16/BF16") };
    match gpu.filter(|g| g.fp32 > 0.0 && tensor_peak(g).0 > g.fp32) {
        Some(g) => {
            let (peak, which) = tensor_peak(g);
            (
                1.0 - g.fp32 / peak,
                format!(
                    "× (1 − FP32/{which} peak) = × (1 − {}/{}) of the {} row of conf/hardware/gpu_peaks.yaml: a compute-bound GEMM moved from CUDA cores to {which} tensor cores runs at most that much faster",
                    g.fp32, peak, g.name
                ),
            )
        }
        None => (1.0, "(the GPU is not known or not in the peak table, so no faster peak bounds it: hardware.gpu=NAME names it): at most all of it".to_string()),
    }
}

/// Without an nsys timeline: memory-bound kernel families (per device and
/// category) and GEMMs that ran off the tensor cores, from ncu's counters;
/// shares are of the GPU time of the kernels ncu profiled with counters.
/// With the tensor-core use per region, and notes.
pub(crate) fn from_ncu(n: &NcuCounters) -> (Vec<Finding>, Vec<TensorRow>, Vec<String>) {
    let mut notes = Vec::new();
    let points = &n.roofline.points;
    let total: f64 = points.iter().map(|p| p.gpu_time_ns).sum();
    if total <= 0.0 {
        notes.push("memory-bound kernel families and tensor-core use need ncu's DRAM and FLOP counters (roofline.json): none in this run".to_string());
        return (Vec::new(), Vec::new(), notes);
    }
    notes.extend(unjudged(n));
    let device = |p: &Point| p.device.parse::<i64>().ok();
    let finding =
        |kind: Kind, members: &[&Point], ns: f64, bound: String, confidence: Confidence, evidence: Vec<Evidence>| {
            Finding {
        region: NCU_KERNELS.to_string(),
        device: device(members[0]),
        needs: Some(
            "an nsys capture of the same run: the family's share of the device's time, and the region that issued it"
                .to_string(),
        ),
        kernels: members.iter().take(FAMILY_KERNELS).map(|p| p.kernel_name.clone()).collect(),
        ..Finding::new(kind, ns.round() as i64, (ns / total, ShareOf::ProfiledGpuTime), bound, confidence, evidence)
    }
        };
    let mut out = Vec::new();
    // Per (device, category): the memory-bound kernels.
    let mut families: BTreeMap<(String, Category), Vec<&Point>> = BTreeMap::new();
    for p in points.iter().filter(|p| memory_bound(p)) {
        families.entry((p.device.clone(), n.categories.of(&p.kernel_name))).or_default().push(p);
    }
    for ((_, category), members) in families {
        let ns: f64 = members.iter().map(|p| p.gpu_time_ns).sum();
        if ns < MIN_SHARE * total {
            continue;
        }
        let weighted = |f: fn(&Point) -> Option<f64>| {
            members.iter().map(|p| f(p).unwrap_or(0.0) * p.gpu_time_ns).sum::<f64>() / ns
        };
        let bytes: Option<f64> = members.iter().map(|p| p.dram_bytes).sum();
        let mut evidence = vec![
            ev("kernels", members.len() as f64, "count"),
            ev("their GPU time", ns / 1e6, "ms"),
            ev("of profiled GPU time", 100.0 * ns / total, "%"),
            ev("DRAM throughput (time-weighted)", weighted(|p| p.dram_throughput_pct), "%"),
            ev("SM throughput (time-weighted)", weighted(|p| p.sm_throughput_pct), "%"),
        ];
        if let Some(b) = bytes {
            evidence.push(ev("DRAM bytes", b / 1e6, "MB"));
        }
        let bound = format!(
            "the GPU time of the {} kernels whose DRAM throughput is at least {HIGH_THROUGHPUT_PCT:.0}% of peak and above their SM throughput (ncu, replayed): their time falls only with the bytes they move, so at most all of it comes back; share: of the GPU time of the kernels ncu profiled with counters",
            category.name()
        );
        out.push(finding(Kind::MemoryBound, &members, ns, bound, Confidence::Medium, evidence));
    }
    // GEMMs off the tensor cores: tensor counters present, and no (or a small share of) tensor ops.
    let mut skipped = 0;
    let mut off: BTreeMap<String, Vec<(&Point, Option<f64>)>> = BTreeMap::new();
    for p in points.iter().filter(|p| n.categories.of(&p.kernel_name) == Category::Gemm && p.tensor.is_some()) {
        match off_tensor_cores(p) {
            Some(share) => off.entry(p.device.clone()).or_default().push((p, share)),
            None if low_tensor(p) => skipped += 1,
            None => {}
        }
    }
    if skipped > 0 {
        notes.push(format!("{skipped} GEMM-category kernel(s) without tensor ops left out of the tensor-core finding: GEMVs or memory-bound (at the DRAM roof, tensor cores do not help)"));
    }
    let (gain, how) = tensor_core_gain(n.gpu);
    for (_, members) in off {
        let ns: f64 = members.iter().map(|(p, _)| p.gpu_time_ns).sum();
        if ns < MIN_SHARE * total {
            continue;
        }
        let zero = members
            .iter()
            .filter(|(p, _)| p.tensor.as_ref().is_some_and(|t| t.ops_by_precision.values().sum::<f64>() == 0.0))
            .count();
        let mut evidence = vec![
            ev("GEMM kernels off the tensor cores", members.len() as f64, "count"),
            ev("with 0 tensor ops", zero as f64, "count"),
            ev("their GPU time", ns / 1e6, "ms"),
            ev("of profiled GPU time", 100.0 * ns / total, "%"),
        ];
        if let Some(lowest) = members.iter().filter_map(|(_, s)| *s).min_by(f64::total_cmp) {
            evidence.push(ev("lowest tensor share of FLOPs", lowest, "%"));
        }
        let confidence = if n.gpu.is_some() { Confidence::Medium } else { Confidence::Low };
        let points: Vec<&Point> = members.iter().map(|(p, _)| *p).collect();
        out.push(finding(
            Kind::LowTensorCoreShare,
            &points,
            ns * gain,
            format!("the kernels' GPU time {how}"),
            confidence,
            evidence,
        ));
    }
    (out, tensor_rows(n), notes)
}

/// The note for kernels without the throughputs a reading needs.
pub(crate) fn unjudged(n: &NcuCounters) -> Option<String> {
    let points = &n.roofline.points;
    let unjudged = points.iter().filter(|p| p.sm_throughput_pct.is_none() || p.dram_throughput_pct.is_none()).count();
    (unjudged > 0).then(|| format!("{unjudged} of {} kernels (ncu) without SM and DRAM throughput (the SpeedOfLight section): not judged memory-bound or not", points.len()))
}

/// Tensor-core use of each top-level region of ncu's aggregate scope.
pub(crate) fn tensor_rows(n: &NcuCounters) -> Vec<TensorRow> {
    let Some(scope) = n.regions.and_then(|r| r.scopes.iter().find(|s| s.scope == "aggregate")) else {
        return Vec::new();
    };
    scope
        .regions
        .iter()
        .filter(|r| r.depth == 0)
        .filter_map(|r| {
            let t = r.counters.as_ref()?.tensor.as_ref()?;
            let note = t.share_pct.is_none().then(|| {
                "no share: the FLOPs outside the tensor path were not counted for every result (collect flop_count_hp/sp/dp or the SASS FMA/ADD/MUL counters, or the SpeedOfLight roofline section)".to_string()
            });
            Some(TensorRow {
                region: r.name.clone(),
                launches: t.launches,
                ops_by_precision: t.ops_by_precision.clone(),
                share_pct: t.share_pct,
                note,
            })
        })
        .collect()
}

/// ncu's rule results joined to the kernels they name (kernels.json: by name,
/// else by the spelling both tools agree on). Kernels by their share of GPU
/// time; per kernel first the rules without an estimate (ncu's headline
/// reading of the kernel, `SOLBottleneck`), warnings before optimizations,
/// then the others by their Estimated Speedup; at most [`ADVICE_PER_KERNEL`]
/// per kernel and [`ADVICE`] in all.
pub(crate) fn ncu_advice(rules: Option<&RulesReport>, kernels: &[KernelShare]) -> Vec<NcuAdvice> {
    let Some(rules) = rules else { return Vec::new() };
    let by_key: std::collections::HashMap<String, &KernelShare> =
        kernels.iter().map(|k| (crate::kernel_names::key(k.name), k)).collect();
    let mut out: Vec<NcuAdvice> = rules
        .rules
        .iter()
        .filter(|r| r.kind != "INF")
        .filter_map(|r| {
            let k = kernels
                .iter()
                .find(|k| k.name == r.kernel)
                .or_else(|| by_key.get(&crate::kernel_names::key(&r.kernel)).copied())?;
            // `global`: of the kernel's duration; `local`: of the part the rule
            // looks at, so at most that much of the kernel's. Either way, of
            // all GPU time at most that times the kernel's share.
            Some(NcuAdvice {
                kernel: if k.label.is_empty() { k.name.to_string() } else { k.label.to_string() },
                kernel_name: r.kernel.clone(),
                share_pct: k.share_pct,
                rule: r.rule.clone(),
                kind: r.kind.clone(),
                speedup_pct: r.speedup_pct,
                speedup_type: r.speedup_type.clone(),
                weighted_pct: r.speedup_pct.map(|s| s * k.share_pct / 100.0),
                description: r.description.clone(),
            })
        })
        .collect();
    let severity = |a: &NcuAdvice| (a.speedup_pct.is_some(), a.kind != "WRN");
    out.sort_by(|a, b| {
        b.share_pct
            .total_cmp(&a.share_pct)
            .then_with(|| a.kernel_name.cmp(&b.kernel_name))
            .then_with(|| severity(a).cmp(&severity(b)))
            .then_with(|| b.speedup_pct.unwrap_or(0.0).total_cmp(&a.speedup_pct.unwrap_or(0.0)))
            .then_with(|| a.rule.cmp(&b.rule))
    });
    let mut per_kernel: std::collections::HashMap<String, usize> = Default::default();
    out.retain(|a| {
        let n = per_kernel.entry(a.kernel_name.clone()).or_default();
        *n += 1;
        *n <= ADVICE_PER_KERNEL
    });
    out.truncate(ADVICE);
    out
}
