//! aggregate::nsys::model: the files one nsys pass writes (`nsys/regions.json`,
//! `nsys/top_kernels.json`, `nsys/samples.json`), as serde models with their
//! schemas (specs/).
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::regions;
use crate::regions::RangeStyle;

pub(crate) const REGIONS_SCHEMA: &str = "llmperf.nsys-regions/v1";
pub(crate) const SAMPLES_SCHEMA: &str = "llmperf.nsys-samples/v1";

/// `nsys/samples.json`: the per-instance durations behind regions.json and
/// top_kernels.json, for `llmperf diff` and `llmperf check`. A series with
/// more than [`crate::timings::MAX_SAMPLES`] keeps that many, evenly spaced
/// by rank (minimum and maximum included).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Samples {
    pub(crate) schema: String,
    pub(crate) max_per_series: usize,
    /// One per region of regions.json, in the same order.
    pub(crate) regions: Vec<RegionSamples>,
    /// One per kernel of top_kernels.json, in the same order: each launch's GPU time.
    pub(crate) kernels: Vec<KernelSamples>,
}

impl Samples {
    pub(crate) fn new(regions: Vec<RegionSamples>, kernels: Vec<KernelSamples>) -> Samples {
        Samples { schema: SAMPLES_SCHEMA.into(), max_per_series: crate::timings::MAX_SAMPLES, regions, kernels }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct RegionSamples {
    pub(crate) path: String,
    pub(crate) domain: String,
    pub(crate) process_id: i64,
    pub(crate) thread_id: i64,
    pub(crate) instances: usize,
    /// Sorted durations of the instances (ns).
    pub(crate) samples_ns: Vec<i64>,
    /// Sorted GPU times of the instances (ns): per instance, the kernels
    /// launched while it was open, nested ranges' included (as `gpu_time_ns`
    /// of regions.json, one instance at a time). Push/pop regions that ran
    /// kernels only; empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) gpu_samples_ns: Vec<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub(crate) struct KernelSamples {
    pub(crate) name: String,
    pub(crate) calls: usize,
    /// Sorted GPU times of the launches (ns).
    pub(crate) samples_ns: Vec<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RegionsReport {
    pub(crate) schema: String,
    pub regions: Vec<Region>,
    pub unattributed: Unattributed,
    /// Why something is empty (no NVTX, no CUDA kernels), for the reader.
    pub notes: Vec<String>,
    /// PyTorch's per-call attributes stripped from NVTX names
    /// (`report.nvtx_attributes`), when any name had them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) normalized: Option<Normalized>,
    /// Every kernel (attributed or not) per process and device: what the
    /// ranks of a multi-process capture are told apart by (ranks.json).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) processes: Vec<ProcessKernels>,
    /// Regions whose module paths differ only in an index, grouped
    /// (`model.layers.[0-31].mlp`), and the module ranges' GPU-time coverage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) module_groups: Option<ModuleGroups>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ProcessKernels {
    /// 0 when the export does not record processes.
    pub(crate) process_id: i64,
    pub(crate) devices: Vec<DeviceKernels>,
    /// The process's rank, where its launcher said (as `Region::rank`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rank: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct DeviceKernels {
    /// The CUDA device id; null when not read (a capture of one process:
    /// reading it costs 6% of an ingestion) or not recorded.
    pub(crate) device: Option<i64>,
    pub(crate) kernel_count: usize,
    pub(crate) gpu_time_ns: i64,
    /// Of `gpu_time_ns`: communication kernels (NCCL's, `nccl…`).
    pub(crate) comm_gpu_time_ns: i64,
}

/// What the name normalizer did (see `Normalizer`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub(crate) struct Normalized {
    /// The attribute keys stripped (`op_id`, `seq`, ...).
    pub(crate) keys: Vec<String>,
    /// Distinct raw names that had them ...
    pub(crate) raw_names: usize,
    /// ... and the distinct operators they became.
    pub(crate) operators: usize,
    /// Range instances renamed.
    pub(crate) instances: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Region {
    /// Nested names joined by `::`, outermost first: the spelling selectors use.
    pub path: String,
    /// The nested names, outermost first: unambiguous where a name holds `::`
    /// itself (PyTorch's `aten::to` inside `aten::_to_copy` is two names).
    #[serde(default)]
    pub(crate) path_names: Vec<String>,
    pub name: String,
    pub parent: Option<String>,
    pub depth: usize,
    /// NVTX domain; empty for the default domain.
    pub domain: String,
    pub(crate) style: RangeStyle,
    pub process_id: i64,
    pub(crate) thread_id: i64,
    pub instances: usize,
    pub inclusive_ns: i64,
    /// Inclusive time minus the time of direct child ranges.
    pub exclusive_ns: i64,
    pub(crate) min_ns: i64,
    pub(crate) median_ns: i64,
    pub(crate) max_ns: i64,
    /// Kernels launched inside the region or any region nested in it.
    pub kernel_count: usize,
    pub gpu_time_ns: i64,
    /// Kernels launched while this region was the innermost open one.
    pub kernel_count_exclusive: usize,
    pub gpu_time_exclusive_ns: i64,
    /// Sum over instances of first kernel start to last kernel end.
    pub gpu_span_ns: i64,
    /// Of `kernel_count` and `gpu_time_ns`: the kernels a CUDA graph ran
    /// (graph nodes, attributed through the graph's launch call); absent when none.
    #[serde(default, skip_serializing_if = "crate::aggregate::skip::is_zero")]
    pub graph_kernel_count: usize,
    #[serde(default, skip_serializing_if = "crate::aggregate::skip::is_zero")]
    pub graph_gpu_time_ns: i64,
    /// The kernels behind `kernel_count` and `gpu_time_ns`, by name: longest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<RegionKernel>,
    /// The rank of the region's process, where its launcher said
    /// (`profile --launcher`: `launcher/ranks/`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rank: Option<u32>,
}

/// One kernel's launches inside a region (inclusive), or outside every region.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegionKernel {
    /// The demangled name, as in top_kernels.json.
    pub name: String,
    pub calls: usize,
    pub gpu_time_ns: i64,
}

/// (name, calls, ns) per kernel name, as [`RegionKernel`]s, longest first.
pub(super) fn kernel_rows(by_name: impl IntoIterator<Item = (String, (usize, i64))>) -> Vec<RegionKernel> {
    let mut rows: Vec<RegionKernel> =
        by_name.into_iter().map(|(name, (calls, gpu_time_ns))| RegionKernel { name, calls, gpu_time_ns }).collect();
    rows.sort_by(|a, b| b.gpu_time_ns.cmp(&a.gpu_time_ns).then_with(|| a.name.cmp(&b.name)));
    rows
}

impl RegionsReport {
    /// Each region and process tagged with its rank, from `process id → rank`.
    pub(crate) fn tag_ranks(&mut self, rank_of: &std::collections::BTreeMap<i64, u32>) {
        for r in &mut self.regions {
            r.rank = rank_of.get(&r.process_id).copied();
        }
        for p in &mut self.processes {
            p.rank = rank_of.get(&p.process_id).copied();
        }
    }
}

impl Region {
    /// The nested names: `path_names`, else (a regions.json written before it
    /// existed) the path split at `::`.
    pub(crate) fn names(&self) -> Vec<String> {
        if self.path_names.is_empty() {
            self.path.split(regions::SEP).map(String::from).collect()
        } else {
            self.path_names.clone()
        }
    }
}

impl RegionsReport {
    /// A report of kernels without NVTX ranges (a kernel summary CSV): no
    /// regions, every kernel unattributed, and the note saying why.
    pub(crate) fn kernels_only(kernels: &[TopKernel], note: String) -> RegionsReport {
        let kernel_count = kernels.iter().map(|k| k.calls).sum();
        let gpu_time_ns = kernels.iter().map(|k| k.total_ns).sum();
        let rows = kernel_rows(kernels.iter().map(|k| (k.name.clone(), (k.calls, k.total_ns))));
        RegionsReport {
            schema: REGIONS_SCHEMA.into(),
            regions: Vec::new(),
            unattributed: Unattributed {
                kernel_count,
                gpu_time_ns,
                graph_kernel_count: 0,
                graph_gpu_time_ns: 0,
                kernels: rows,
            },
            notes: vec![note],
            normalized: None,
            processes: Vec::new(),
            module_groups: None,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct Unattributed {
    pub kernel_count: usize,
    pub gpu_time_ns: i64,
    /// Of them, CUDA graph nodes whose launch no range held (or was not traced).
    #[serde(default, skip_serializing_if = "crate::aggregate::skip::is_zero")]
    pub graph_kernel_count: usize,
    #[serde(default, skip_serializing_if = "crate::aggregate::skip::is_zero")]
    pub graph_gpu_time_ns: i64,
    /// By name, longest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<RegionKernel>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TopKernel {
    /// The demangled name (the key everywhere, and what ncu's filter matches).
    pub name: String,
    /// The export's short name (`shortName`) when it has one apart from `name`:
    /// the function without namespace, template arguments and parameters.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub short_name: Option<String>,
    pub calls: usize,
    pub total_ns: i64,
    pub(crate) mean_ns: f64,
    pub(crate) min_ns: i64,
    pub(crate) max_ns: i64,
    /// Share of all kernels' GPU time.
    pub share_pct: f64,
}

/// regions.json `module_groups`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ModuleGroups {
    /// GPU time of the kernels launched inside the outermost ranges of the
    /// `llmperf.modules` domain, and of every kernel of the capture; absent
    /// without such ranges.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) coverage: Option<Coverage>,
    /// Largest total first (GPU time, else wall time).
    pub(crate) groups: Vec<ModuleGroup>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct Coverage {
    pub(crate) module_gpu_time_ns: i64,
    pub(crate) total_gpu_time_ns: i64,
}

/// Regions of one process and domain whose paths differ only in their indices.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct ModuleGroup {
    /// The path with each index replaced by the indices seen there:
    /// `prefill::M::model.layers.[0-31]::model.layers.[0-31].mlp`.
    pub(crate) path: String,
    pub(crate) domain: String,
    pub(crate) process_id: i64,
    /// Distinct index tuples (layers, experts, …) in the group.
    pub(crate) members: usize,
    pub(crate) instances: usize,
    pub(crate) inclusive_ns: i64,
    pub(crate) gpu_time_ns: i64,
    /// Per member, its total (GPU time when the group launched kernels, else
    /// wall time): the smallest, the median (lower middle) and the largest.
    pub(crate) member_min_ns: i64,
    pub(crate) member_median_ns: i64,
    pub(crate) member_max_ns: i64,
    /// What the spread is of: `gpu` or `wall`.
    pub(crate) member_time: String,
    /// The path of the member with the largest total.
    pub(crate) slowest: String,
}
