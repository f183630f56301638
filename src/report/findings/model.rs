//! report::findings::model: `findings.json` as types, the fixed vocabulary of
//! kinds with their fixes, and the small helpers every rule shares. No rule
//! and no rendering here.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub(crate) const FINDINGS_SCHEMA: &str = "llmperf.findings/v2";

/// A finding must be worth at least this share of its device's span (or of
/// the profiled GPU time, or of its region's wall time, where there is no span) ...
pub(crate) const MIN_SHARE: f64 = 0.02;
/// ... and this much time (ns).
pub(crate) const MIN_NS: i64 = 100_000;
/// Findings kept in findings.json (the summary shows fewer).
pub(crate) const MAX_FINDINGS: usize = 50;
/// Findings shown in the summary and report.html.
pub(crate) const SHOWN: usize = 8;
/// Regions listed in a finding's `issued_in` and `ran_in`.
pub(crate) const WHERE_ROWS: usize = 3;

/// The kinds of finding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Kind {
    /// The kernel family (category) with the most GPU time on a device: where to look first.
    KernelFamily,
    /// Dtype conversions and layout copies run as kernels.
    CopyCast,
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
            Kind::KernelFamily => "largest kernel family",
            Kind::CopyCast => "dtype and layout copies",
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

    /// Whether the kind is GPU work (charged to the region that issued the
    /// kernels), else host-side (charged to the region whose wall time holds it).
    pub(crate) fn is_gpu_work(self) -> bool {
        matches!(
            self,
            Kind::KernelFamily
                | Kind::CopyCast
                | Kind::ExposedCommunication
                | Kind::ElementwiseFusion
                | Kind::MemoryBound
                | Kind::LowTensorCoreShare
        )
    }

    pub(crate) fn fix(self) -> &'static str {
        match self {
            Kind::KernelFamily => "profile its top kernel with ncu (the command beside): the counters say whether it is compute, memory or latency bound; it is the largest part of the device's time, so any gain there counts most",
            Kind::CopyCast => "keep tensors in one dtype and layout along the way: cast weights and buffers once (model.to(dtype), autocast around the whole step), drop .float()/.to()/.contiguous() round trips inside the loop, and let the op that needs another layout produce it",
            Kind::LaunchBound => "capture the region in a CUDA graph (torch.compile mode=\"reduce-overhead\", CUDA graphs) or fuse its small ops, so the host stops launching one kernel at a time",
            Kind::SyncStall => "remove the host syncs (.item(), .cpu(), .tolist(), printing a tensor, data-dependent shapes such as nonzero, torch.cuda.synchronize): keep values on the GPU, or sync once per step",
            Kind::IdleGpu => "look at what the host does while nothing is queued (data loading, Python, logging); overlap it with GPU work (prefetching, non_blocking copies, a DataLoader with workers)",
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

impl Confidence {
    pub(crate) fn text(self) -> &'static str {
        match self {
            Confidence::High => "high",
            Confidence::Medium => "medium",
            Confidence::Low => "low",
        }
    }
}

/// What a finding's `share` is of.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum ShareOf {
    /// The device's span (first operation to last) of its process.
    DeviceSpan,
    /// The GPU time of the kernels ncu profiled with counters (no nsys timeline).
    ProfiledGpuTime,
    /// The wall time of the region (a capture without GPU work).
    RegionWall,
}

/// Where a finding's region comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum Attribution {
    /// The region whose launches hold the kernels (launch correlation): GPU work.
    Issued,
    /// The region whose wall time holds the time: host-side causes.
    WallWindow,
    /// No region holds it: the device's span, or ncu's profiled kernels.
    None,
}

/// One number behind a finding.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Evidence {
    pub(crate) what: String,
    pub(crate) value: f64,
    /// `ms`, `%`, `count`, `us`, `GB/s`, `MB`.
    pub(crate) unit: String,
}

impl Evidence {
    pub(crate) fn text(&self) -> String {
        match self.unit.as_str() {
            "count" => format!("{} {:.0}", self.what, self.value),
            "%" => format!("{} {:.1}%", self.what, self.value),
            unit => format!("{} {:.3} {unit}", self.what, self.value),
        }
    }
}

/// A region and how much of a finding lies in it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct RegionShare {
    pub(crate) region: String,
    pub(crate) ns: i64,
    /// The finding's kernels it launched (`issued_in`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) kernels: Option<usize>,
}

/// A name (a blocking call, a kernel) with its time.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct NamedNs {
    pub(crate) name: String,
    pub(crate) ns: i64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Finding {
    pub(crate) kind: Kind,
    /// The region it names first: for GPU work the region that issued the
    /// kernels, for host-side causes the one whose wall time holds it;
    /// `(device span)` or `(kernels profiled by ncu)` where none does.
    pub(crate) region: String,
    pub(crate) attribution: Attribution,
    pub(crate) process_id: Option<i64>,
    pub(crate) rank: Option<u32>,
    pub(crate) device: Option<i64>,
    /// At most this much time (ns) comes back if the cause goes: an upper bound.
    pub(crate) recoverable_ns: i64,
    /// `recoverable_ns` over what `share_of` says (0..1).
    pub(crate) share: f64,
    pub(crate) share_of: ShareOf,
    /// How `recoverable_ns` was computed.
    pub(crate) bound: String,
    pub(crate) confidence: Confidence,
    pub(crate) evidence: Vec<Evidence>,
    /// What to try: the rule's own words for what the evidence shows.
    pub(crate) fix: String,
    /// GPU work: the regions whose launches hold the finding's kernels, most first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) issued_in: Vec<RegionShare>,
    /// The regions whose wall time holds the finding's time, most first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) ran_in: Vec<RegionShare>,
    /// A sync stall: the blocking calls that were waiting, most time first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) calls: Vec<NamedNs>,
    /// A sync stall: the kernels whose end left the GPU idle while the host waited, most time first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) waited_for: Vec<NamedNs>,
    /// What this capture could not show (a CPU capture has no GPU timeline), if anything.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) needs: Option<String>,
    /// The kernels of a kernel-family finding, most GPU time first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) kernels: Vec<String>,
    /// The command that profiles the family's top kernel with ncu (argv).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) ncu_command: Vec<String>,
}

/// What the findings came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub(crate) enum Source {
    /// The GPU timeline: nsys/breakdown.json.
    #[serde(rename = "nsys breakdown")]
    NsysBreakdown,
    /// A capture without GPU work: the operator ranges of regions.json.
    #[serde(rename = "nsys ranges")]
    NsysRanges,
    /// Only ncu's kernel families found something.
    #[serde(rename = "ncu counters")]
    NcuCounters,
    #[serde(rename = "none")]
    None,
}

/// `findings.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct FindingsReport {
    pub(crate) schema: String,
    pub(crate) source: Source,
    /// Ranked by `share`, most first (then `recoverable_ns`).
    pub(crate) findings: Vec<Finding>,
    /// What was not checked, and why there are none.
    pub(crate) notes: Vec<String>,
    /// ncu's own advice (ncu/rules.json) on the kernels with the most GPU
    /// time: its rule results, those with an Estimated Speedup weighted by
    /// each kernel's share of GPU time, the others by their kind. Absent
    /// without ncu rule results.
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

impl TensorRow {
    /// The share as a table shows it, or why there is none.
    pub(crate) fn share_text(&self) -> String {
        self.share_pct.map_or_else(|| self.note.clone().unwrap_or_else(|| "–".into()), |s| format!("{s:.1}%"))
    }
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
    /// `OPT` (an optimization ncu estimates) or `WRN` (a warning).
    pub(crate) kind: String,
    /// ncu's Estimated Speedup (%) and over what (`global`: the kernel's
    /// duration; `local`: the part of the kernel the rule looks at); none
    /// for a rule that gives no estimate (ncu's headline `SOLBottleneck`).
    pub(crate) speedup_pct: Option<f64>,
    pub(crate) speedup_type: String,
    /// The estimate times the kernel's share: at most this % of all GPU
    /// time; none without an estimate.
    pub(crate) weighted_pct: Option<f64>,
    pub(crate) description: String,
}

/// A kernel of kernels.json as the rules need it: its full name, its label
/// in the tables, its calls, GPU time (over every device) and share of GPU time.
pub(crate) struct KernelShare<'a> {
    pub(crate) name: &'a str,
    pub(crate) label: &'a str,
    pub(crate) calls: u64,
    pub(crate) total_ms: f64,
    pub(crate) share_pct: f64,
}

pub(crate) fn ms(ns: i64) -> f64 {
    ns as f64 / 1e6
}

pub(crate) fn ev(what: &str, value: f64, unit: &str) -> Evidence {
    Evidence { what: what.to_string(), value, unit: unit.to_string() }
}

pub(crate) fn pct(part: i64, of: i64) -> f64 {
    if of > 0 {
        100.0 * part as f64 / of as f64
    } else {
        0.0
    }
}

/// Whether `ns` of `whole` is worth a finding.
pub(crate) fn worth(ns: i64, whole: i64) -> bool {
    ns >= MIN_NS && (ns as f64) >= MIN_SHARE * whole as f64
}

impl Finding {
    /// A finding of `kind` recovering `ns` (a share `share` of what
    /// `share_of` says), named by nothing yet: no region, process or device.
    pub(crate) fn new(
        kind: Kind,
        ns: i64,
        share: (f64, ShareOf),
        bound: String,
        confidence: Confidence,
        evidence: Vec<Evidence>,
    ) -> Finding {
        Finding {
            kind,
            region: String::new(),
            attribution: Attribution::None,
            process_id: None,
            rank: None,
            device: None,
            recoverable_ns: ns,
            share: share.0,
            share_of: share.1,
            bound,
            confidence,
            evidence,
            fix: kind.fix().to_string(),
            issued_in: Vec::new(),
            ran_in: Vec::new(),
            calls: Vec::new(),
            waited_for: Vec::new(),
            needs: None,
            kernels: Vec::new(),
            ncu_command: Vec::new(),
        }
    }

    /// "rank 1, pid 4242, GPU 0": where the finding is.
    pub(crate) fn where_text(&self) -> String {
        let mut parts = Vec::new();
        if let Some(r) = self.rank {
            parts.push(format!("rank {r}"));
        }
        if let Some(p) = self.process_id {
            parts.push(format!("pid {p}"));
        }
        if let Some(d) = self.device {
            parts.push(format!("GPU {d}"));
        }
        parts.join(", ")
    }

    /// The order of the ranking: share, then time, then kind and region.
    pub(crate) fn rank_order(a: &Finding, b: &Finding) -> std::cmp::Ordering {
        b.share
            .total_cmp(&a.share)
            .then_with(|| b.recoverable_ns.cmp(&a.recoverable_ns))
            .then_with(|| a.kind.cmp(&b.kind))
            .then_with(|| a.region.cmp(&b.region))
            .then_with(|| a.device.cmp(&b.device))
            .then_with(|| a.process_id.cmp(&b.process_id))
    }
}
