//! report: what to fix first (`findings.json`, and the section at the top of
//! stakeholder_summary.md and report.html). Each finding names a region, the
//! numbers behind it, the milliseconds that fixing it could recover at most
//! and how that bound was computed, and a confidence; they are ranked by
//! that bound. A short, fixed vocabulary ([`Kind`]; docs/artifacts.md has
//! one paragraph per kind), and no finding without its numbers: "nothing
//! stands out" is a valid answer.
//!
//! From the time breakdown (nsys/breakdown.json) where the GPU ran anything;
//! else, on a capture without GPU work (a CPU run), from the operator ranges
//! in regions.json, with what only a GPU capture can show said in the finding.
//! Kernel families from ncu's counters (roofline.json): memory-bound ones,
//! and GEMMs without tensor cores; with the tensor-core use per ncu region.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::aggregate::categories::Category;
use crate::aggregate::nsys::breakdown::{BreakdownReport, Parts};
use crate::aggregate::nsys::RegionsReport;

pub(crate) const FINDINGS_SCHEMA: &str = "llmperf.findings/v1";

/// A finding must be worth at least this share of its region's wall time ...
const MIN_SHARE: f64 = 0.05;
/// ... and this much time (ns).
const MIN_NS: i64 = 100_000;
/// Findings kept in findings.json (the summary shows fewer).
const MAX_FINDINGS: usize = 50;
/// An operator call whose own host time is under this (ns) is dispatch
/// overhead: a GPU kernel of that op would often be shorter.
const TINY_OP_NS: f64 = 20_000.0;

/// Operators that wait for the GPU's results on the host: a value copied out
/// (`.item()`, `bool(t)`: `aten::_local_scalar_dense`) or an output sized by
/// the data (`nonzero`, `masked_select`, `unique`). On a GPU each drains the
/// queue before the host can go on.
const SYNC_OPS: &[&str] = &[
    "aten::_local_scalar_dense",
    "aten::item",
    "aten::nonzero",
    "aten::masked_select",
    "aten::unique",
    "aten::_unique",
    "aten::_unique2",
    "aten::unique_consecutive",
    "aten::repeat_interleave",
    "aten::is_nonzero",
    "aten::equal",
];

/// The kinds of finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    LaunchBound,
    SyncStall,
    IdleGpu,
    ExposedCommunication,
    PageableCopy,
    ElementwiseFusion,
    MemoryBound,
    LowTensorCoreShare,
}

impl Kind {
    pub(crate) fn title(self) -> &'static str {
        match self {
            Kind::LaunchBound => "launch-bound",
            Kind::SyncStall => "sync stall",
            Kind::IdleGpu => "idle GPU",
            Kind::ExposedCommunication => "exposed communication",
            Kind::PageableCopy => "pageable copy",
            Kind::ElementwiseFusion => "many small elementwise kernels",
            Kind::MemoryBound => "memory-bound kernel family",
            Kind::LowTensorCoreShare => "low tensor-core share",
        }
    }

    fn fix(self) -> &'static str {
        match self {
            Kind::LaunchBound => "capture the region in a CUDA graph (torch.compile mode=\"reduce-overhead\", CUDA graphs) or fuse its small ops, so the host stops launching one kernel at a time",
            Kind::SyncStall => "remove the host syncs inside the region (.item(), .cpu(), .tolist(), printing a tensor, data-dependent shapes such as nonzero, torch.cuda.synchronize): keep values on the GPU, or sync once per step",
            Kind::IdleGpu => "look at what the host does in the region while nothing is queued (data loading, Python, logging); overlap it with GPU work (prefetching, non_blocking copies, a DataLoader with workers)",
            Kind::ExposedCommunication => "overlap the collectives with compute (FSDP/DDP prefetch and bucketing, async collectives on their own stream), or shrink them",
            Kind::PageableCopy => "copy from pinned memory (pin_memory=True, tensor.pin_memory()) with non_blocking=True, so the copy runs asynchronously and at full bandwidth",
            Kind::ElementwiseFusion => "fuse the elementwise kernels (torch.compile, a fused kernel, or fusing them into the GEMM epilogue): each one reads and writes its tensors in full",
            Kind::MemoryBound => "move fewer bytes: fuse these kernels with their neighbours (torch.compile, fused kernels), keep data on chip, or store in lower precision (bf16/fp8 weights, a quantized KV cache); near the DRAM roof a faster kernel alone cannot help",
            Kind::LowTensorCoreShare => "run the matrix multiplies on tensor cores: FP16/BF16 inputs (autocast), or TF32 for FP32 ones (torch.backends.cuda.matmul.allow_tf32 = True, torch.set_float32_matmul_precision(\"high\")), with dimensions that are multiples of 8",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Confidence {
    High,
    Medium,
    Low,
}

/// One number behind a finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Evidence {
    pub(crate) what: String,
    pub(crate) value: f64,
    /// `ms`, `%`, `count`, `us`, `GB/s`.
    pub(crate) unit: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Finding {
    pub(crate) kind: Kind,
    /// The top-level region (its NVTX name), or `(device span)` for a device's whole activity.
    pub(crate) region: String,
    pub(crate) process_id: Option<i64>,
    pub(crate) rank: Option<u32>,
    pub(crate) device: Option<i64>,
    /// At most this much time (ns) comes back if the cause goes: an upper bound.
    pub(crate) recoverable_ns: i64,
    /// `recoverable_ns` over the region's wall time.
    pub(crate) share_of_wall: f64,
    /// How `recoverable_ns` was computed.
    pub(crate) bound: String,
    pub(crate) confidence: Confidence,
    pub(crate) evidence: Vec<Evidence>,
    /// What to try.
    pub(crate) fix: String,
    /// What this capture could not show (a CPU capture has no GPU timeline), if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) needs: Option<String>,
    /// The kernels of a kernel-family finding (ncu's names), most GPU time first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) kernels: Vec<String>,
}

/// `findings.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct FindingsReport {
    pub(crate) schema: String,
    /// `nsys breakdown` (the GPU timeline), `nsys ranges` (a capture without GPU work: operator ranges), or `none`.
    pub(crate) source: String,
    /// Ranked by `recoverable_ns`, most first.
    pub(crate) findings: Vec<Finding>,
    /// What was not checked, and why there are none.
    pub(crate) notes: Vec<String>,
    /// ncu's own advice (ncu/rules.json) on the kernels with the most GPU
    /// time: its rule results with an Estimated Speedup, weighted by each
    /// kernel's share of GPU time. Absent without ncu rule results.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) ncu_advice: Vec<NcuAdvice>,
    /// Tensor-core use per top-level ncu region (ncu/regions/report.json's
    /// aggregate scope). Absent without tensor-path counters.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) tensor_cores: Vec<TensorRow>,
}

/// One region's FLOPs on tensor cores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct TensorRow {
    pub(crate) region: String,
    /// Results of the region with a tensor-path counter.
    pub(crate) launches: usize,
    /// FLOPs on tensor cores by source and accumulate precision (`bf16->fp32`).
    pub(crate) ops_by_precision: std::collections::BTreeMap<String, f64>,
    /// Their share of the region's FLOPs, %, where the FLOPs outside the tensor path were counted.
    pub(crate) share_pct: Option<f64>,
    /// Why there is no share, when there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) note: Option<String>,
}

/// One rule result of ncu on one kernel, with the kernel's weight.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct NcuAdvice {
    /// The kernel as kernels.json names it (its label), and ncu's full name.
    pub(crate) kernel: String,
    pub(crate) kernel_name: String,
    /// The kernel's share of GPU time (kernels.json), %.
    pub(crate) share_pct: f64,
    pub(crate) rule: String,
    pub(crate) kind: String,
    /// ncu's Estimated Speedup (%) and over what (`global`: the kernel's
    /// duration; `local`: the part of the kernel the rule looks at).
    pub(crate) speedup_pct: Option<f64>,
    pub(crate) speedup_type: String,
    /// The estimate times the kernel's share: at most this % of all GPU time.
    pub(crate) weighted_pct: f64,
    pub(crate) description: String,
}

/// ncu advice rows kept.
const ADVICE: usize = 10;

/// A kernel of kernels.json as the advice needs it: its full name, its
/// label in the tables, its share of GPU time (%).
pub(crate) struct KernelShare<'a> {
    pub(crate) name: &'a str,
    pub(crate) label: &'a str,
    pub(crate) share_pct: f64,
}

/// ncu's rule results joined to the kernels they name (kernels.json: by name,
/// else by the spelling both tools agree on), weighted by GPU time.
pub(crate) fn ncu_advice(
    rules: Option<&crate::aggregate::rules::RulesReport>,
    kernels: &[KernelShare],
) -> Vec<NcuAdvice> {
    let Some(rules) = rules else { return Vec::new() };
    let by_key: std::collections::HashMap<String, &KernelShare> =
        kernels.iter().map(|k| (crate::kernel_names::key(k.name), k)).collect();
    let mut out: Vec<NcuAdvice> = rules
        .rules
        .iter()
        .filter_map(|r| {
            let k = kernels
                .iter()
                .find(|k| k.name == r.kernel)
                .or_else(|| by_key.get(&crate::kernel_names::key(&r.kernel)).copied())?;
            let speedup = r.speedup_pct?;
            // `global`: of the kernel's duration; `local`: of the part the rule
            // looks at, so at most that much of the kernel's. Either way, of
            // all GPU time at most that times the kernel's share.
            let weighted = speedup * k.share_pct / 100.0;
            Some(NcuAdvice {
                kernel: if k.label.is_empty() { k.name.to_string() } else { k.label.to_string() },
                kernel_name: r.kernel.clone(),
                share_pct: k.share_pct,
                rule: r.rule.clone(),
                kind: r.kind.clone(),
                speedup_pct: r.speedup_pct,
                speedup_type: r.speedup_type.clone(),
                weighted_pct: weighted,
                description: r.description.clone(),
            })
        })
        .collect();
    out.sort_by(|a, b| b.weighted_pct.total_cmp(&a.weighted_pct).then_with(|| a.kernel.cmp(&b.kernel)));
    out.truncate(ADVICE);
    out
}

/// ncu's DRAM or SM throughput at or above this (% of peak) is high: ncu's own
/// rules call less than 60% of peak a latency issue.
const HIGH_THROUGHPUT_PCT: f64 = 60.0;
/// A GEMM whose tensor ops are below this share of its FLOPs (%) runs mostly off tensor cores.
const LOW_TENSOR_SHARE_PCT: f64 = 50.0;
/// Kernels named in a kernel-family finding.
const FAMILY_KERNELS: usize = 5;
/// Where kernel-family findings live: the kernels ncu profiled, not an NVTX region.
pub(crate) const NCU_KERNELS: &str = "(kernels profiled by ncu)";

/// What the kernel-family findings read: ncu's counters per kernel, its
/// region report, the category table, and the GPU's row of the peak table
/// (None when the GPU is not known).
pub(crate) struct NcuCounters<'a> {
    pub(crate) roofline: &'a crate::aggregate::roofline::Roofline,
    pub(crate) regions: Option<&'a crate::aggregate::ncu::RegionReportFile>,
    pub(crate) categories: &'a crate::aggregate::categories::Categories,
    pub(crate) gpu: Option<&'a super::peaks::GpuPeak>,
}

/// A GEMV (matrix × vector) reads each weight once: memory-bound by nature,
/// and tensor cores do not speed it up.
fn is_gemv(kernel: &str) -> bool {
    let k = kernel.to_ascii_lowercase();
    k.contains("gemv")
}

/// Memory-bound kernel families (per device and category) and GEMMs that ran
/// off the tensor cores, from ncu's counters; the tensor-core use per region.
/// Shares are of the GPU time of the kernels ncu profiled with counters (roofline.json's points).
pub(crate) fn from_ncu(n: &NcuCounters) -> (Vec<Finding>, Vec<TensorRow>, Vec<String>) {
    use crate::aggregate::roofline::Point;
    let mut notes = Vec::new();
    let points = &n.roofline.points;
    let total: f64 = points.iter().map(|p| p.gpu_time_ns).sum();
    let mut out = Vec::new();
    if total <= 0.0 {
        notes.push("memory-bound kernel families and tensor-core use need ncu's DRAM and FLOP counters (roofline.json): none in this run".to_string());
        return (out, Vec::new(), notes);
    }
    let memory_bound = |p: &Point| matches!((p.sm_throughput_pct, p.dram_throughput_pct), (Some(sm), Some(d)) if d >= HIGH_THROUGHPUT_PCT && d >= sm);
    let unjudged = points.iter().filter(|p| p.sm_throughput_pct.is_none() || p.dram_throughput_pct.is_none()).count();
    if unjudged > 0 {
        notes.push(format!("{unjudged} of {} kernels (ncu) without SM and DRAM throughput (the SpeedOfLight section): not judged memory-bound or not", points.len()));
    }
    let device = |p: &Point| p.device.parse::<i64>().ok();
    // Per (device, category): the memory-bound kernels.
    let mut families: std::collections::BTreeMap<(String, Category), Vec<&Point>> = Default::default();
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
        out.push(Finding {
            kind: Kind::MemoryBound,
            region: NCU_KERNELS.to_string(),
            process_id: None,
            rank: None,
            device: device(members[0]),
            recoverable_ns: ns.round() as i64,
            share_of_wall: ns / total,
            bound: format!(
                "the GPU time of the {} kernels whose DRAM throughput is at least {HIGH_THROUGHPUT_PCT:.0}% of peak and above their SM throughput (ncu, replayed): their time falls only with the bytes they move, so at most all of it comes back; share: of the GPU time of the kernels ncu profiled with counters",
                category.name()
            ),
            confidence: Confidence::Medium,
            evidence,
            fix: Kind::MemoryBound.fix().to_string(),
            needs: None,
            kernels: members.iter().take(FAMILY_KERNELS).map(|p| p.kernel_name.clone()).collect(),
        });
    }
    // GEMMs off the tensor cores: tensor counters present, and no (or a small share of) tensor ops.
    let mut gemv = 0;
    let mut off: std::collections::BTreeMap<String, Vec<(&Point, Option<f64>)>> = Default::default();
    for p in points.iter().filter(|p| n.categories.of(&p.kernel_name) == Category::Gemm) {
        let Some(t) = &p.tensor else { continue };
        let tensor: f64 = t.ops_by_precision.values().sum();
        let low = tensor == 0.0 || t.share_pct.is_some_and(|s| s < LOW_TENSOR_SHARE_PCT);
        if !low {
            continue;
        }
        if is_gemv(&p.kernel_name) || memory_bound(p) {
            gemv += 1;
            continue;
        }
        off.entry(p.device.clone()).or_default().push((p, t.share_pct));
    }
    if gemv > 0 {
        notes.push(format!("{gemv} GEMM-category kernel(s) without tensor ops left out of the tensor-core finding: GEMVs or memory-bound (at the DRAM roof, tensor cores do not help)"));
    }
    for (_, members) in off {
        let ns: f64 = members.iter().map(|(p, _)| p.gpu_time_ns).sum();
        if ns < MIN_SHARE * total {
            continue;
        }
        // FP32 math on CUDA cores → TF32 tensor cores, the least change (FP16/BF16
        // where TF32 runs no faster than FP32, as on GeForce cards): at best the
        // peak ratio faster; without the GPU's peaks, all of it.
        let tensor_peak =
            |g: &super::peaks::GpuPeak| if g.tf32 > g.fp32 { (g.tf32, "TF32") } else { (g.fp16_bf16, "FP16/BF16") };
        let (recoverable, bound) = match n.gpu.filter(|g| g.fp32 > 0.0 && tensor_peak(g).0 > g.fp32) {
            Some(g) => {
                let (peak, which) = tensor_peak(g);
                (
                    ns * (1.0 - g.fp32 / peak),
                    format!(
                        "the kernels' GPU time × (1 − FP32/{which} peak) = × (1 − {}/{}) of the {} row of conf/hardware/gpu_peaks.yaml: a compute-bound GEMM moved from CUDA cores to {which} tensor cores runs at most that much faster",
                        g.fp32, peak, g.name
                    ),
                )
            }
            None => (ns, "the kernels' GPU time (the GPU is not known or not in the peak table, so no faster peak bounds it: hardware.gpu=NAME names it): at most all of it".to_string()),
        };
        let first = members[0].0;
        let lowest = members.iter().filter_map(|(_, s)| *s).min_by(f64::total_cmp);
        let mut evidence = vec![
            ev("GEMM kernels off the tensor cores", members.len() as f64, "count"),
            ev(
                "with 0 tensor ops",
                members
                    .iter()
                    .filter(|(p, _)| p.tensor.as_ref().is_some_and(|t| t.ops_by_precision.values().sum::<f64>() == 0.0))
                    .count() as f64,
                "count",
            ),
            ev("their GPU time", ns / 1e6, "ms"),
            ev("of profiled GPU time", 100.0 * ns / total, "%"),
        ];
        if let Some(lowest) = lowest {
            evidence.push(ev("lowest tensor share of FLOPs", lowest, "%"));
        }
        out.push(Finding {
            kind: Kind::LowTensorCoreShare,
            region: NCU_KERNELS.to_string(),
            process_id: None,
            rank: None,
            device: device(first),
            recoverable_ns: recoverable.round() as i64,
            share_of_wall: recoverable / total,
            bound,
            confidence: if n.gpu.is_some() { Confidence::Medium } else { Confidence::Low },
            evidence,
            fix: Kind::LowTensorCoreShare.fix().to_string(),
            needs: None,
            kernels: members.iter().take(FAMILY_KERNELS).map(|(p, _)| p.kernel_name.clone()).collect(),
        });
    }
    (out, tensor_rows(n), notes)
}

/// Tensor-core use of each top-level region of ncu's aggregate scope.
fn tensor_rows(n: &NcuCounters) -> Vec<TensorRow> {
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

fn ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

fn ev(what: &str, value: f64, unit: &str) -> Evidence {
    Evidence { what: what.to_string(), value, unit: unit.to_string() }
}

fn pct(part: i64, of: i64) -> f64 {
    if of > 0 {
        100.0 * part as f64 / of as f64
    } else {
        0.0
    }
}

/// The findings of a run: from the breakdown where a GPU ran anything, else
/// from the operator ranges of regions.json.
pub(crate) fn findings(breakdown: Option<&BreakdownReport>, regions: Option<&RegionsReport>) -> FindingsReport {
    let mut notes = Vec::new();
    let (source, mut found) = match (breakdown, regions) {
        (Some(b), _) if !b.devices.is_empty() => {
            notes.extend(b.notes.iter().cloned());
            ("nsys breakdown", from_breakdown(b))
        }
        // Operator ranges stand in for the GPU timeline only where there was none.
        (_, Some(r)) if !r.regions.is_empty() && gpu_kernels(r) == 0 => {
            notes.push("no GPU work in the capture: findings come from the operator ranges (host time); a GPU capture measures the GPU's idle time itself".to_string());
            ("nsys ranges", from_ranges(r))
        }
        _ => {
            notes.extend(breakdown.iter().flat_map(|b| b.notes.iter().cloned()));
            notes.push(
                "nothing to rank: no nsys timeline of GPU work (an nsys SQLite export gives one: nsys/breakdown.json)"
                    .to_string(),
            );
            ("none", Vec::new())
        }
    };
    found.sort_by(|a, b| {
        b.recoverable_ns.cmp(&a.recoverable_ns).then_with(|| a.kind.cmp(&b.kind)).then_with(|| a.region.cmp(&b.region))
    });
    if found.len() > MAX_FINDINGS {
        notes.push(format!("{} findings below the first {MAX_FINDINGS} left out", found.len() - MAX_FINDINGS));
        found.truncate(MAX_FINDINGS);
    }
    if found.is_empty() && source != "none" {
        notes.push(format!(
            "nothing stands out: no cause is worth {:.0}% of a region's wall time and {:.1} ms",
            MIN_SHARE * 100.0,
            ms(MIN_NS)
        ));
    }
    FindingsReport {
        schema: FINDINGS_SCHEMA.into(),
        source: source.into(),
        findings: found,
        notes,
        ncu_advice: Vec::new(),
        tensor_cores: Vec::new(),
    }
}

impl FindingsReport {
    /// More findings (ncu's kernel families), ranked in; "nothing stands out" goes when one is found.
    pub(crate) fn rank_in(&mut self, more: Vec<Finding>) {
        if more.is_empty() {
            return;
        }
        self.notes.retain(|n| !n.starts_with("nothing stands out") && !n.starts_with("nothing to rank"));
        self.findings.extend(more);
        self.findings.sort_by(|a, b| {
            b.recoverable_ns
                .cmp(&a.recoverable_ns)
                .then_with(|| a.kind.cmp(&b.kind))
                .then_with(|| a.region.cmp(&b.region))
        });
        self.findings.truncate(MAX_FINDINGS);
        if self.source == "none" {
            self.source = "ncu counters".into();
        }
    }
}

/// Kernels of the capture, every process and device.
fn gpu_kernels(r: &RegionsReport) -> usize {
    r.processes.iter().flat_map(|p| &p.devices).map(|d| d.kernel_count).sum()
}

/// Whether `ns` of a region's `wall` is worth a finding.
fn worth(ns: i64, wall: i64) -> bool {
    ns >= MIN_NS && (ns as f64) >= MIN_SHARE * wall as f64
}

/// A stretch to judge: its name, parts, kernels by category (category,
/// kernels, ns) and pageable-copy time.
type Stretch<'a> = (&'a str, &'a Parts, Vec<(Category, usize, i64)>, i64);

/// Per device, each region (or the device's span when it has none).
fn from_breakdown(b: &BreakdownReport) -> Vec<Finding> {
    let mut out = Vec::new();
    for d in &b.devices {
        let spans: Vec<Stretch> = if d.regions.is_empty() {
            let cats = d.categories.iter().map(|c| (c.category, c.kernels, c.ns)).collect();
            let pageable = d.copies.iter().map(|c| c.pageable_ns).sum();
            vec![("(device span)", &d.span, cats, pageable)]
        } else {
            d.regions
                .iter()
                .map(|r| {
                    let cats = r.categories.iter().map(|c| (c.category, c.kernels, c.ns)).collect();
                    (r.name.as_str(), &r.parts, cats, r.pageable_copy_ns)
                })
                .collect()
        };
        for (region, p, cats, pageable_ns) in spans {
            let wall = p.wall_ns;
            let kernels: usize = cats.iter().map(|c| c.1).sum();
            let kernel_ns: i64 = cats.iter().map(|c| c.2).sum();
            let mut add = |kind: Kind, ns: i64, bound: String, confidence: Confidence, evidence: Vec<Evidence>| {
                if worth(ns, wall) {
                    out.push(Finding {
                        kind,
                        region: region.to_string(),
                        process_id: Some(d.process_id),
                        rank: d.rank,
                        device: Some(d.device),
                        recoverable_ns: ns,
                        share_of_wall: ns as f64 / wall.max(1) as f64,
                        bound,
                        confidence,
                        evidence,
                        fix: kind.fix().to_string(),
                        needs: None,
                        kernels: Vec::new(),
                    });
                }
            };
            let idle = ev("GPU idle", pct(p.idle_ns, wall), "%");
            add(
                Kind::SyncStall,
                p.idle_sync_ns,
                "the GPU's idle gaps that began while a blocking call (cudaStreamSynchronize, cudaMemcpy, ...) of the process was waiting: the queue had drained because the host waited".into(),
                Confidence::High,
                vec![ev("sync-stall idle", ms(p.idle_sync_ns), "ms"), idle.clone()],
            );
            let mean_kernel_us = if kernels > 0 { kernel_ns as f64 / kernels as f64 / 1e3 } else { 0.0 };
            add(
                Kind::LaunchBound,
                p.idle_launch_ns,
                format!(
                    "the GPU's idle gaps of at most {} us between two operations (launch latency): a CUDA graph or fewer, larger kernels remove them",
                    b.launch_gap_ns / 1000
                ),
                Confidence::Medium,
                vec![
                    ev("launch-gap idle", ms(p.idle_launch_ns), "ms"),
                    ev("kernels", kernels as f64, "count"),
                    ev("mean kernel time", mean_kernel_us, "us"),
                    idle.clone(),
                ],
            );
            add(
                Kind::IdleGpu,
                p.idle_nothing_queued_ns,
                "the GPU's idle time with nothing queued (gaps longer than the launch gap, before the first and after the last operation), no blocking call waiting".into(),
                Confidence::Medium,
                vec![ev("nothing-queued idle", ms(p.idle_nothing_queued_ns), "ms"), idle],
            );
            add(
                Kind::ExposedCommunication,
                p.communication_exposed_ns,
                "time NCCL kernels ran with no compute kernel beside them: perfect overlap would hide it".into(),
                Confidence::High,
                vec![
                    ev("exposed communication", ms(p.communication_exposed_ns), "ms"),
                    ev(
                        "of communication overlapped",
                        pct(p.communication_overlapped_ns, p.communication_overlapped_ns + p.communication_exposed_ns),
                        "%",
                    ),
                ],
            );
            add(
                Kind::PageableCopy,
                pageable_ns,
                "time of copies from or to pageable host memory (synchronous for the host, and slower): pinned, asynchronous copies can overlap compute entirely".into(),
                Confidence::High,
                vec![ev("pageable copy time", ms(pageable_ns), "ms")],
            );
            let (ew_kernels, ew_ns) = cats.iter().find(|c| c.0 == Category::Elementwise).map_or((0, 0), |c| (c.1, c.2));
            let mean_ew_us = if ew_kernels > 0 { ew_ns as f64 / ew_kernels as f64 / 1e3 } else { 0.0 };
            if ew_kernels >= 10 && mean_ew_us < 50.0 && pct(ew_ns, kernel_ns) >= 20.0 {
                add(
                    Kind::ElementwiseFusion,
                    ew_ns,
                    "the elementwise kernels' time (summed over streams): fusing them into their neighbours saves at most all of it".into(),
                    Confidence::Low,
                    vec![
                        ev("elementwise kernels", ew_kernels as f64, "count"),
                        ev("mean elementwise kernel", mean_ew_us, "us"),
                        ev("of kernel time", pct(ew_ns, kernel_ns), "%"),
                    ],
                );
            }
        }
    }
    out
}

/// A capture without GPU work: per top-level region, its operator ranges
/// (`aten::…`, from `--annotate ops` or emit_nvtx) below it.
fn from_ranges(r: &RegionsReport) -> Vec<Finding> {
    let mut out = Vec::new();
    for top in r.regions.iter().filter(|t| t.depth == 0) {
        let top_names = top.names();
        let inside = r.regions.iter().filter(|x| {
            x.depth > 0
                && x.process_id == top.process_id
                && x.thread_id == top.thread_id
                && x.names().starts_with(&top_names)
        });
        let (mut calls, mut outer_calls, mut tiny_calls, mut tiny_ns, mut op_ns) = (0, 0, 0, 0i64, 0i64);
        let (mut sync_calls, mut sync_ns) = (0, 0i64);
        for x in inside {
            let names = x.names();
            let name = names.last().cloned().unwrap_or_default();
            if !name.starts_with("aten::") {
                continue;
            }
            // `aten::item` calls `aten::_local_scalar_dense`: one sync, counted at the outer.
            let parent = names.len().checked_sub(2).map_or("", |i| names[i].as_str());
            let parent_syncs = SYNC_OPS.contains(&parent);
            calls += x.instances;
            if !parent.starts_with("aten::") {
                outer_calls += x.instances;
            }
            op_ns += x.exclusive_ns;
            if (x.exclusive_ns as f64) < TINY_OP_NS * x.instances as f64 {
                tiny_calls += x.instances;
                tiny_ns += x.exclusive_ns;
            }
            if SYNC_OPS.contains(&name.as_str()) && !parent_syncs {
                sync_calls += x.instances;
                sync_ns += x.inclusive_ns;
            }
        }
        let wall = top.inclusive_ns;
        let per = |n: usize| n as f64 / top.instances.max(1) as f64;
        let mut add = |kind: Kind, ns: i64, bound: &str, evidence: Vec<Evidence>, needs: &str| {
            if worth(ns, wall) {
                out.push(Finding {
                    kind,
                    region: top.path.clone(),
                    process_id: Some(top.process_id),
                    rank: top.rank,
                    device: None,
                    recoverable_ns: ns,
                    share_of_wall: ns as f64 / wall.max(1) as f64,
                    bound: bound.to_string(),
                    confidence: Confidence::Low,
                    evidence,
                    fix: kind.fix().to_string(),
                    needs: Some(needs.to_string()),
                    kernels: Vec::new(),
                });
            }
        };
        if sync_calls > 0 {
            add(
                Kind::SyncStall,
                sync_ns,
                "the host time of the operators that wait for results on the host (.item(), nonzero, masked_select, unique, ...), inclusive",
                vec![
                    ev("syncing operator calls", sync_calls as f64, "count"),
                    ev("per instance", per(sync_calls), "count"),
                    ev("their host time", ms(sync_ns), "ms"),
                ],
                "a GPU capture: there each of these calls drains the GPU's queue, and the stall is measured as idle time",
            );
        }
        if tiny_calls >= 100 && tiny_ns * 2 >= op_ns {
            add(
                Kind::LaunchBound,
                tiny_ns,
                "the host time of operator calls under 20 us each (their own time, nested operators apart): dispatch overhead, which a CUDA graph or fusion removes",
                vec![
                    ev("outermost operator calls", outer_calls as f64, "count"),
                    ev("per instance", per(outer_calls), "count"),
                    ev("operator calls, nested ones included", calls as f64, "count"),
                    ev("under 20 us each", tiny_calls as f64, "count"),
                    ev("mean host time of those", tiny_ns as f64 / tiny_calls.max(1) as f64 / 1e3, "us"),
                ],
                "a GPU capture: there the GPU idles between these ops' short kernels while the host dispatches the next",
            );
        }
    }
    out
}

/// The "What to fix first" section of stakeholder_summary.md: the top findings as a table.
pub(crate) fn markdown(md: &mut String, f: &FindingsReport, breakdown: Option<&BreakdownReport>) {
    use crate::markdown::{code, text};
    md.push_str("## What to fix first\n\n");
    if f.findings.is_empty() {
        for n in &f.notes {
            md.push_str(&format!("- {}\n", text(n)));
        }
        md.push('\n');
    } else {
        md.push_str("Ranked by the time each could recover at most ([findings.json](findings.json) has the evidence and how each bound was computed).\n\n");
        md.push_str("| # | finding | region | where | recoverable ms (of wall) | confidence | evidence | try |\n|---:|---|---|---|---:|---|---|---|\n");
        for (i, x) in f.findings.iter().take(SHOWN).enumerate() {
            let evidence: Vec<String> = x.evidence.iter().map(evidence_text).collect();
            md.push_str(&format!(
                "| {} | {} | {} | {} | {:.3} ({:.0}%) | {} | {} | {} |\n",
                i + 1,
                x.kind.title(),
                code(&x.region),
                text(&where_text(x)),
                ms(x.recoverable_ns),
                100.0 * x.share_of_wall,
                confidence_text(x.confidence),
                text(&evidence.join("; ")),
                text(x.fix.split(':').next().unwrap_or(&x.fix)),
            ));
        }
        md.push('\n');
        for x in f.findings.iter().take(SHOWN).filter(|x| x.needs.is_some()) {
            md.push_str(&format!(
                "- {} in {}: needs {}\n",
                x.kind.title(),
                code(&x.region),
                text(x.needs.as_deref().unwrap_or(""))
            ));
        }
        for (i, x) in f.findings.iter().take(SHOWN).enumerate().filter(|(_, x)| !x.kernels.is_empty()) {
            let names: Vec<String> = x.kernels.iter().map(|k| code(&short_kernel(k))).collect();
            md.push_str(&format!("- #{} {}: {}\n", i + 1, x.kind.title(), names.join(", ")));
        }
        for n in &f.notes {
            md.push_str(&format!("- {}\n", text(n)));
        }
        md.push('\n');
    }
    if !f.tensor_cores.is_empty() {
        md.push_str("FLOPs on tensor cores per region (ncu's `sm__ops_path_tensor_*` counters):\n\n| region | results | tensor FLOPs by precision | share of the region's FLOPs |\n|---|---:|---|---:|\n");
        for t in &f.tensor_cores {
            md.push_str(&format!(
                "| {} | {} | {} | {} |\n",
                code(&t.region),
                t.launches,
                text(&precisions(&t.ops_by_precision)),
                text(&t.share_text()),
            ));
        }
        md.push('\n');
    }
    if !f.ncu_advice.is_empty() {
        md.push_str("ncu's own advice on the kernels with the most GPU time ([ncu/rules.json](ncu/rules.json)), by its Estimated Speedup weighted by each kernel's share of GPU time:\n\n");
        md.push_str("| kernel | share of GPU time | ncu rule | estimated speedup | weighted | ncu says |\n|---|---:|---|---:|---:|---|\n");
        for a in f.ncu_advice.iter().take(SHOWN) {
            let said: String = a.description.chars().take(240).collect();
            md.push_str(&format!(
                "| {} | {:.1}% | {} ({}) | {} | {:.1}% | {} |\n",
                code(&a.kernel),
                a.share_pct,
                text(&a.rule),
                text(&a.kind),
                a.speedup_pct.map_or("–".to_string(), |s| format!("{s:.1}% {}", a.speedup_type)),
                a.weighted_pct,
                text(&said),
            ));
        }
        md.push('\n');
    }
    if let Some(b) = breakdown.filter(|b| !b.devices.is_empty()) {
        breakdown_table(md, b);
    }
}

impl TensorRow {
    /// The share as a table shows it, or why there is none.
    pub(crate) fn share_text(&self) -> String {
        self.share_pct.map_or_else(|| self.note.clone().unwrap_or_else(|| "–".into()), |s| format!("{s:.1}%"))
    }
}

/// A kernel name cut for a table: its first 80 characters.
pub(crate) fn short_kernel(k: &str) -> String {
    let cut: String = k.chars().take(80).collect();
    if cut.len() < k.len() {
        format!("{cut}…")
    } else {
        cut
    }
}

/// Tensor FLOPs by precision: `bf16→fp32 70.24 GFLOP`, largest first.
pub(crate) fn precisions(by: &std::collections::BTreeMap<String, f64>) -> String {
    let mut v: Vec<(&String, &f64)> = by.iter().collect();
    v.sort_by(|a, b| b.1.total_cmp(a.1));
    v.iter().map(|(p, f)| format!("{} {:.2} GFLOP", p.replace("->", "→"), *f / 1e9)).collect::<Vec<_>>().join(", ")
}

/// Findings shown in the summary and report.html.
pub(crate) const SHOWN: usize = 5;
/// Regions per device in the breakdown table.
const BREAKDOWN_ROWS: usize = 8;

fn confidence_text(c: Confidence) -> &'static str {
    match c {
        Confidence::High => "high",
        Confidence::Medium => "medium",
        Confidence::Low => "low",
    }
}

pub(crate) fn evidence_text(e: &Evidence) -> String {
    match e.unit.as_str() {
        "count" => format!("{} {:.0}", e.what, e.value),
        "%" => format!("{} {:.1}%", e.what, e.value),
        unit => format!("{} {:.3} {unit}", e.what, e.value),
    }
}

pub(crate) fn where_text(x: &Finding) -> String {
    let mut parts = Vec::new();
    if let Some(r) = x.rank {
        parts.push(format!("rank {r}"));
    }
    if let Some(p) = x.process_id {
        parts.push(format!("pid {p}"));
    }
    if let Some(d) = x.device {
        parts.push(format!("GPU {d}"));
    }
    parts.join(", ")
}

/// The six parts of a stretch as (label, ns): a partition of its wall time.
pub(crate) type BarParts = [(&'static str, i64); 6];

/// The parts of a stretch as (label, ns), in the order of the stacked bar.
pub(crate) fn bar_parts(p: &Parts) -> BarParts {
    [
        ("compute", p.compute_ns),
        ("exposed communication", p.communication_exposed_ns),
        ("copy+memset", p.copy_ns + p.memset_ns),
        ("idle: launch gaps", p.idle_launch_ns),
        ("idle: sync stalls", p.idle_sync_ns),
        ("idle: nothing queued", p.idle_nothing_queued_ns),
    ]
}

/// Per device, the largest regions' breakdown as shares of wall time, and the category mix.
fn breakdown_table(md: &mut String, b: &BreakdownReport) {
    use crate::markdown::code;
    md.push_str("Where the wall time of each top-level region went ([nsys/breakdown.json](nsys/breakdown.json)), % of wall:\n\n");
    md.push_str("| device | region | wall ms | compute | exposed comm | copy+memset | idle: launch | idle: sync | idle: nothing queued |\n|---|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for d in &b.devices {
        let dev = match d.rank {
            Some(r) => format!("rank {r}, pid {}, GPU {}", d.process_id, d.device),
            None => format!("pid {}, GPU {}", d.process_id, d.device),
        };
        let rows: Vec<(String, &Parts)> = std::iter::once(("(device span)".to_string(), &d.span))
            .chain(d.regions.iter().take(BREAKDOWN_ROWS).map(|r| (r.name.clone(), &r.parts)))
            .collect();
        for (name, p) in rows {
            let w = p.wall_ns;
            md.push_str(&format!(
                "| {dev} | {} | {:.3} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} | {:.1} |\n",
                code(&name),
                ms(w),
                pct(p.compute_ns, w),
                pct(p.communication_exposed_ns, w),
                pct(p.copy_ns + p.memset_ns, w),
                pct(p.idle_launch_ns, w),
                pct(p.idle_sync_ns, w),
                pct(p.idle_nothing_queued_ns, w),
            ));
        }
    }
    md.push_str(
        "\nKernel time by category (all devices):\n\n| category | kernels | ms | share |\n|---|---:|---:|---:|\n",
    );
    for (c, kernels, ns, share) in category_mix(b) {
        md.push_str(&format!("| {} | {kernels} | {:.3} | {:.1}% |\n", c.name(), ms(ns), share));
    }
    md.push('\n');
}

/// Every device's kernels by category, summed: (category, kernels, ns, % of kernel time), largest first.
pub(crate) fn category_mix(b: &BreakdownReport) -> Vec<(Category, usize, i64, f64)> {
    let mut sums = [(0usize, 0i64); 9];
    for d in &b.devices {
        for c in &d.categories {
            let s = &mut sums[c.category.index()];
            (s.0, s.1) = (s.0 + c.kernels, s.1 + c.ns);
        }
    }
    let total: i64 = sums.iter().map(|s| s.1).sum();
    let mut rows: Vec<_> = Category::ALL
        .iter()
        .map(|&c| (c, sums[c.index()].0, sums[c.index()].1, pct(sums[c.index()].1, total)))
        .filter(|r| r.1 > 0)
        .collect();
    rows.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::nsys::breakdown::{DeviceBreakdown, RegionBreakdown};

    fn report(parts: Parts) -> BreakdownReport {
        BreakdownReport {
            schema: String::new(),
            launch_gap_ns: 50_000,
            category_tables: vec![],
            devices: vec![DeviceBreakdown {
                process_id: 7,
                rank: Some(1),
                device: 0,
                span: parts,
                categories: vec![],
                other_share: None,
                copies: vec![],
                regions: vec![RegionBreakdown {
                    name: "step".into(),
                    domain: String::new(),
                    instances: 1,
                    parts,
                    categories: vec![],
                    pageable_copy_ns: 0,
                }],
            }],
            notes: vec![],
        }
    }

    #[test]
    fn causes_are_ranked_by_recoverable_time_and_small_ones_left_out() {
        let p = Parts {
            wall_ns: 10_000_000,
            busy_ns: 6_000_000,
            compute_ns: 5_000_000,
            communication_exposed_ns: 1_000_000,
            idle_ns: 4_000_000,
            idle_sync_ns: 3_000_000,
            // 4% of wall: under the threshold.
            idle_launch_ns: 400_000,
            idle_nothing_queued_ns: 600_000,
            ..Parts::default()
        };
        let f = findings(Some(&report(p)), None);
        let got: Vec<(Kind, i64)> = f.findings.iter().map(|x| (x.kind, x.recoverable_ns)).collect();
        assert_eq!(
            got,
            [(Kind::SyncStall, 3_000_000), (Kind::ExposedCommunication, 1_000_000), (Kind::IdleGpu, 600_000)]
        );
        assert_eq!(f.findings[0].rank, Some(1));
        assert_eq!(f.findings[0].share_of_wall, 0.3);
    }

    #[test]
    fn a_busy_gpu_has_nothing_that_stands_out() {
        let p = Parts {
            wall_ns: 10_000_000,
            busy_ns: 9_900_000,
            compute_ns: 9_900_000,
            idle_ns: 100_000,
            idle_launch_ns: 100_000,
            ..Parts::default()
        };
        let f = findings(Some(&report(p)), None);
        assert!(f.findings.is_empty());
        assert!(f.notes.iter().any(|n| n.starts_with("nothing stands out")), "{:?}", f.notes);
    }
}
