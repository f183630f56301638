//! aggregate: the NVTX region tree of an nsys capture, with GPU kernel
//! attribution, and its top kernels: one streaming pass over the SQLite
//! export ([`ingest`]) gives the `nsys/regions.json`, `nsys/top_kernels.json`
//! and `nsys/samples.json` models, in memory that does not grow with the
//! capture (docs/internals.md, "NVTX regions from nsys").
//!
//! - Push/pop ranges nest per thread. A range's parent is the innermost range
//!   still open on its thread when it starts (push/pop ranges are a stack, so
//!   on one thread they nest properly). Regions are named by their path,
//!   outermost first, joined by `::` (`decode_all::decode_step`).
//! - Start/end ranges cannot be put on a thread's stack: each is a depth-0
//!   region of its own name, with times and instances but no kernels.
//! - A kernel belongs to the push/pop ranges open on the thread that launched
//!   it, at the time of the launch call (CUDA runtime row with the kernel's
//!   correlation id): exclusively to the innermost, inclusively to it and all
//!   its ancestors. Kernels launched outside every range (or whose launch call
//!   was not traced) are `unattributed`.
use rustc_hash::FxHashMap as HashMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use std::path::Path;

use super::runs::{self, Runs};
use crate::error::Error;
use crate::parse::batched::{self, Stream};
use crate::parse::nsys_sqlite::{
    odd_note, pid_of, plausible, tid_of, Kernel, KernelOrder, Launched, Names, NsysDb, NvtxRange, Order, Style,
};
use crate::regions;

pub(crate) const REGIONS_SCHEMA: &str = "llmperf.nsys-regions/v1";
const SAMPLES_SCHEMA: &str = "llmperf.nsys-samples/v1";

/// `nsys/samples.json`: the per-instance durations behind regions.json and
/// top_kernels.json, for `llmperf diff` and `llmperf check`. A series with
/// more than [`crate::timings::MAX_SAMPLES`] keeps that many, evenly spaced
/// by rank (minimum and maximum included).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Samples {
    pub schema: String,
    pub max_per_series: usize,
    /// One per region of regions.json, in the same order.
    pub regions: Vec<RegionSamples>,
    /// One per kernel of top_kernels.json, in the same order: each launch's GPU time.
    pub kernels: Vec<KernelSamples>,
}

impl Samples {
    pub fn new(regions: Vec<RegionSamples>, kernels: Vec<KernelSamples>) -> Samples {
        Samples { schema: SAMPLES_SCHEMA.into(), max_per_series: crate::timings::MAX_SAMPLES, regions, kernels }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RegionSamples {
    pub path: String,
    pub domain: String,
    pub process_id: i64,
    pub thread_id: i64,
    pub instances: usize,
    /// Sorted durations of the instances (ns).
    pub samples_ns: Vec<i64>,
    /// Sorted GPU times of the instances (ns): per instance, the kernels
    /// launched while it was open, nested ranges' included (as `gpu_time_ns`
    /// of regions.json, one instance at a time). Push/pop regions that ran
    /// kernels only; empty otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_samples_ns: Vec<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct KernelSamples {
    pub name: String,
    pub calls: usize,
    /// Sorted GPU times of the launches (ns).
    pub samples_ns: Vec<i64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct RegionsReport {
    pub schema: String,
    pub regions: Vec<Region>,
    pub unattributed: Unattributed,
    /// Why something is empty (no NVTX, no CUDA kernels), for the reader.
    pub notes: Vec<String>,
    /// PyTorch's per-call attributes stripped from NVTX names
    /// (`report.nvtx_attributes`), when any name had them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub normalized: Option<Normalized>,
    /// Every kernel (attributed or not) per process and device: what the
    /// ranks of a multi-process capture are told apart by (ranks.json).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub processes: Vec<ProcessKernels>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ProcessKernels {
    /// 0 when the export does not record processes.
    pub process_id: i64,
    pub devices: Vec<DeviceKernels>,
    /// The process's rank, where its launcher said (as `Region::rank`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DeviceKernels {
    /// The CUDA device id; null when not read (a capture of one process:
    /// reading it costs 6% of an ingestion) or not recorded.
    pub device: Option<i64>,
    pub kernel_count: usize,
    pub gpu_time_ns: i64,
    /// Of `gpu_time_ns`: communication kernels (NCCL's, `nccl…`).
    pub comm_gpu_time_ns: i64,
}

/// What the name normalizer did (see `Normalizer`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct Normalized {
    /// The attribute keys stripped (`op_id`, `seq`, ...).
    pub keys: Vec<String>,
    /// Distinct raw names that had them ...
    pub raw_names: usize,
    /// ... and the distinct operators they became.
    pub operators: usize,
    /// Range instances renamed.
    pub instances: usize,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct Region {
    /// Nested names joined by `::`, outermost first: the spelling selectors use.
    pub path: String,
    /// The nested names, outermost first: unambiguous where a name holds `::`
    /// itself (PyTorch's `aten::to` inside `aten::_to_copy` is two names).
    #[serde(default)]
    pub path_names: Vec<String>,
    pub name: String,
    pub parent: Option<String>,
    pub depth: usize,
    /// NVTX domain; empty for the default domain.
    pub domain: String,
    pub style: Style,
    pub process_id: i64,
    pub thread_id: i64,
    pub instances: usize,
    pub inclusive_ns: i64,
    /// Inclusive time minus the time of direct child ranges.
    pub exclusive_ns: i64,
    pub min_ns: i64,
    pub median_ns: i64,
    pub max_ns: i64,
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
    #[serde(default, skip_serializing_if = "super::is_zero")]
    pub graph_kernel_count: usize,
    #[serde(default, skip_serializing_if = "super::is_zero")]
    pub graph_gpu_time_ns: i64,
    /// The kernels behind `kernel_count` and `gpu_time_ns`, by name: longest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub kernels: Vec<RegionKernel>,
    /// The rank of the region's process, where its launcher said
    /// (`profile --launcher`: `launcher/ranks/`); absent otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rank: Option<u32>,
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
fn kernel_rows(by_name: impl IntoIterator<Item = (String, (usize, i64))>) -> Vec<RegionKernel> {
    let mut rows: Vec<RegionKernel> =
        by_name.into_iter().map(|(name, (calls, gpu_time_ns))| RegionKernel { name, calls, gpu_time_ns }).collect();
    rows.sort_by(|a, b| b.gpu_time_ns.cmp(&a.gpu_time_ns).then_with(|| a.name.cmp(&b.name)));
    rows
}

impl RegionsReport {
    /// Each region and process tagged with its rank, from `process id → rank`.
    pub fn tag_ranks(&mut self, rank_of: &std::collections::BTreeMap<i64, u32>) {
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
    pub fn names(&self) -> Vec<String> {
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
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct Unattributed {
    pub kernel_count: usize,
    pub gpu_time_ns: i64,
    /// Of them, CUDA graph nodes whose launch no range held (or was not traced).
    #[serde(default, skip_serializing_if = "super::is_zero")]
    pub graph_kernel_count: usize,
    #[serde(default, skip_serializing_if = "super::is_zero")]
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
    pub mean_ns: f64,
    pub min_ns: i64,
    pub max_ns: i64,
    /// Share of all kernels' GPU time.
    pub share_pct: f64,
}

/// What one pass over an export gives: the three reports, and the number
/// of kernels read.
pub struct Ingested {
    pub regions: RegionsReport,
    pub top: Vec<TopKernel>,
    pub samples: Samples,
    pub kernels: usize,
}

/// Read an export in one streaming pass and build its reports: the region
/// tree with kernel attribution, the top `top_n` kernels (all when 0) and
/// the samples behind both. `strip`: the PyTorch attribute keys stripped from
/// range names (`report.nvtx_attributes`; empty strips nothing).
///
/// Two readers run at once, each on its own connection: the NVTX ranges, and
/// the kernels joined to their launch calls ([`crate::parse::launch_join`];
/// both in time order), which on the way gives every kernel to the per-name
/// totals. This thread sweeps the two in time order, holding per thread only
/// the ranges open at the moment, plus one accumulator per region; instance
/// durations go to sorted runs on disk ([`super::runs`]) for the medians and
/// samples. The first pass assumes what holds in the exports we have seen,
/// and checks it on every row: rows stored in time order, and kernels of one
/// process stored nearly in correlation order. Where either does not hold,
/// the pass starts again with SQLite sorting (`ORDER BY`), or with the
/// kernels' order measured first.
pub fn ingest(db: &NsysDb, strip: &[String], top_n: usize) -> Result<Ingested, Error> {
    let mut names = Names::default();
    let strings = db.string_ids(&mut names)?;
    let path = db.path();
    let mut plan = ReadPlan { order: Order::Stored, kernels: KernelOrder::Assumed };
    let Swept { sweep, names, normalized, kernels } = loop {
        match sweep(path, &names, &strings, strip, plan)? {
            Ok(swept) => break swept,
            Err(next) if next != plan => {
                tracing::debug!("{}: {plan:?} did not hold: sweeping again with {next:?}", path.display());
                plan = next;
            }
            Err(_) => {
                return Err(Error::new(
                    crate::error::ErrorKind::Internal,
                    format!("{}: rows still out of order after SQLite sorted them", path.display()),
                )
                .with_hint("a bug in llmperf: please report it with the export's nsys version"))
            }
        }
    };
    sweep.finish(names, normalized, kernels, top_n)
}

/// How a sweep's readers read: rows as stored or sorted by SQLite, and the
/// kernels' disorder assumed or measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReadPlan {
    order: Order,
    kernels: KernelOrder,
}

/// A process id and a CUDA device (None when not read).
type ProcessDevice = (i64, Option<i64>);

/// The kernel table's per-name (calls, total, min, max) ns and durations.
struct KernelTotals {
    by_name: HashMap<u32, (usize, i64, i64, i64)>,
    /// CUDA graph nodes: count and ns.
    graph: (usize, i64),
    /// Per (process, device): kernels, ns, communication ns; the last one
    /// used first (rows come in runs of one process and device).
    by_process: Vec<(ProcessDevice, usize, i64, i64)>,
    last_process: usize,
    /// Which name ids are communication kernels (NCCL), by id.
    comm: std::sync::Arc<Vec<bool>>,
    /// Each name's short name, as first seen.
    short: HashMap<u32, u32>,
    durations: Runs,
    odd: usize,
    /// The first error of writing `durations` to disk.
    failed: Option<Error>,
}

impl KernelTotals {
    fn new(comm: std::sync::Arc<Vec<bool>>) -> Self {
        KernelTotals {
            by_name: HashMap::default(),
            graph: (0, 0),
            by_process: Vec::new(),
            last_process: 0,
            comm,
            short: HashMap::default(),
            durations: Runs::new(runs::DEFAULT_CAP),
            odd: 0,
            failed: None,
        }
    }

    fn add(&mut self, k: Kernel, strings: &HashMap<i64, u32>) {
        if !plausible(k.start, k.end) {
            self.odd += 1;
            return;
        }
        let ns = k.end - k.start;
        let e = self.by_name.entry(k.name).or_insert((0, 0, i64::MAX, i64::MIN));
        if let (0, Some(short)) = (e.0, k.short_id.and_then(|id| strings.get(&id))) {
            self.short.insert(k.name, *short); // once per name, not per kernel
        }
        *e = (e.0 + 1, e.1.saturating_add(ns), e.2.min(ns), e.3.max(ns));
        if k.graph {
            self.graph = (self.graph.0 + 1, self.graph.1.saturating_add(ns));
        }
        let key = (k.pid, k.device);
        if self.by_process.get(self.last_process).is_none_or(|p| p.0 != key) {
            self.last_process = match self.by_process.iter().position(|p| p.0 == key) {
                Some(i) => i,
                None => {
                    self.by_process.push((key, 0, 0, 0));
                    self.by_process.len() - 1
                }
            };
        }
        let comm = self.comm.get(k.name as usize).copied().unwrap_or(false);
        let p = &mut self.by_process[self.last_process];
        (p.1, p.2) = (p.1 + 1, p.2.saturating_add(ns));
        if comm {
            p.3 = p.3.saturating_add(ns);
        }
        if self.failed.is_none() {
            self.failed = self.durations.push(k.name, ns).err();
        }
    }
}

/// A finished sweep, the names interned by the range reader, what its
/// normalizer did, and the kernel table's totals.
struct Swept {
    sweep: Sweep,
    names: Names,
    normalized: Option<Normalized>,
    kernels: KernelTotals,
}

/// The sweep over ranges and launches read as `plan` says, with the names
/// the range reader interned and what its normalizer did; or, where this one
/// did not hold (rows out of time order, or kernels not as assumed), the plan
/// that would mend it (the same plan when nothing can).
fn sweep(
    path: &Path,
    names: &Names,
    strings: &HashMap<i64, u32>,
    strip: &[String],
    plan: ReadPlan,
) -> Result<Result<Swept, ReadPlan>, Error> {
    // Set when the launch reader gives up, so that the range reader stops too.
    let given_up = std::sync::atomic::AtomicBool::new(false);
    // Each reader opens its own connection. The first plan only scans; the
    // others may have SQLite sort or join.
    let open = || match plan {
        ReadPlan { order: Order::Stored, kernels: KernelOrder::Assumed } => NsysDb::open(path)?.for_stored_scans(),
        _ => NsysDb::open(path),
    };
    std::thread::scope(|s| {
        let given_up = &given_up;
        let (mut range_out, range_in) = batched::channel();
        let (mut launch_out, launch_in) = batched::channel();
        let mut range_names = names.clone();
        // Kernel names are the export's strings, interned before the readers start.
        let comm =
            std::sync::Arc::new(names.all().iter().map(|n| crate::kernel_names::is_comm(n)).collect::<Vec<bool>>());
        let ranges = s.spawn(move || {
            let db = open()?;
            let mut normalizer = Normalizer::new(strip);
            db.each_range(&mut range_names, strings, plan.order, |mut r, names| {
                r.name = normalizer.rename(names, r.name);
                range_out.push(r) && !given_up.load(std::sync::atomic::Ordering::Relaxed)
            })?;
            range_out.flush();
            Ok::<_, Error>((range_names, normalizer.finish()))
        });
        let launches = s.spawn(move || {
            let db = open()?;
            let mut totals = KernelTotals::new(comm);
            let held = db.each_launched(
                plan.order,
                plan.kernels,
                strings,
                |k| totals.add(k, strings),
                |l| launch_out.push(l),
            )?;
            if held {
                launch_out.flush();
            } else {
                given_up.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            totals.failed.take().map_or(Ok((totals, held)), Err)
        });
        let mut sweep = Sweep::default();
        let in_order = sweep.run(range_in, launch_in);
        // The readers end when their streams end or the sweep drops them.
        let (names, normalized) = ranges.join().expect("the range reader does not panic")?;
        let (totals, held) = launches.join().expect("the launch reader does not panic")?;
        let in_order = in_order?;
        if in_order && held {
            return Ok(Ok(Swept { sweep, names, normalized, kernels: totals }));
        }
        Ok(Err(ReadPlan {
            order: if in_order { plan.order } else { Order::Sorted },
            kernels: if held { plan.kernels } else { KernelOrder::Measured },
        }))
    })
}

/// Renames ranges that PyTorch named with per-call attributes
/// (`aten::mul, op_id = 317177`) to their operator (`aten::mul`), so that an
/// operator is one region with many instances instead of thousands of
/// one-instance regions. Names without such attributes are untouched; the
/// raw names stay in the SQLite export. No keys: nothing changes.
struct Normalizer<'a> {
    keys: &'a [String],
    renamed: HashMap<u32, u32>,
    instances: usize,
}

impl<'a> Normalizer<'a> {
    fn new(keys: &'a [String]) -> Self {
        Normalizer { keys, renamed: HashMap::default(), instances: 0 }
    }

    fn rename(&mut self, names: &mut Names, name: u32) -> u32 {
        if self.keys.is_empty() {
            return name;
        }
        let keys = self.keys;
        let to = *self.renamed.entry(name).or_insert_with(|| {
            let head = regions::strip_attributes(names.get(name), keys).map(|(h, _)| h.to_string());
            head.map_or(name, |h| names.intern(&h))
        });
        self.instances += usize::from(to != name);
        to
    }

    fn finish(self) -> Option<Normalized> {
        let raw: Vec<u32> = self.renamed.iter().filter(|(from, to)| from != to).map(|(_, to)| *to).collect();
        let operators: std::collections::HashSet<u32> = raw.iter().copied().collect();
        (!raw.is_empty()).then(|| Normalized {
            keys: self.keys.to_vec(),
            raw_names: raw.len(),
            operators: operators.len(),
            instances: self.instances,
        })
    }
}

/// A region being built: identity plus accumulators (no per-instance data:
/// durations go to the sweep's sorted runs).
struct Acc {
    parent: Option<u32>,
    name: u32,
    domain: u32,
    style: Style,
    global_tid: i64,
    depth: usize,
    instances: usize,
    inclusive_ns: i64,
    min_ns: i64,
    max_ns: i64,
    child_ns: i64,
    kernels: usize,
    gpu_ns: i64,
    kernels_excl: usize,
    gpu_excl_ns: i64,
    span_ns: i64,
    graph_kernels: usize,
    graph_ns: i64,
    /// Kernels launched while this region was the innermost open one, by
    /// name: (name, calls, ns), sorted by name (few per region: a binary
    /// search is cheaper than hashing each launch).
    exclusive_kernels: Vec<(u32, usize, i64)>,
}

/// A push/pop range instance still open on its thread.
struct Open {
    end: i64,
    region: u32,
    first_kernel: i64,
    last_kernel: i64,
    /// GPU time of the kernels launched while this instance was open.
    gpu_ns: i64,
}

/// The time sweep: per thread the stack of open ranges, per region its accumulator.
struct Sweep {
    regions: Vec<Acc>,
    ids: HashMap<(i64, Option<u32>, Style, u32, u32), u32>,
    stacks: HashMap<i64, Vec<Open>>,
    durations: Runs,
    /// Each push/pop instance's GPU time, keyed by region.
    gpu_durations: Runs,
    /// The first error of writing `gpu_durations` to disk.
    failed: Option<Error>,
    ranges: usize,
    odd_ranges: usize,
    attributed: (usize, i64),
    attributed_graph: (usize, i64),
}

impl Default for Sweep {
    fn default() -> Self {
        Sweep {
            regions: Vec::new(),
            ids: HashMap::default(),
            stacks: HashMap::default(),
            durations: Runs::new(runs::DEFAULT_CAP),
            gpu_durations: Runs::new(runs::DEFAULT_CAP),
            failed: None,
            ranges: 0,
            odd_ranges: 0,
            attributed: (0, 0),
            attributed_graph: (0, 0),
        }
    }
}

impl Sweep {
    /// Ranges and launches merged by time (a range before a launch at the
    /// same time: a range contains the calls made from its start). False when
    /// a stream was not in time order.
    fn run(&mut self, mut ranges: Stream<NvtxRange>, mut launches: Stream<Launched>) -> Result<bool, Error> {
        let mut r = ranges.next();
        let mut l = launches.next();
        let (mut last_start, mut last_launch) = (i64::MIN, i64::MIN);
        let mut last_on_thread: HashMap<i64, (i64, i64)> = HashMap::default();
        loop {
            let take_range = match (&r, &l) {
                (None, None) => break,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some(a), Some(b)) => a.start <= b.launch,
            };
            if take_range {
                let range = r.take().expect("a range is next");
                r = ranges.next();
                if !plausible(range.start, range.end) {
                    self.odd_ranges += 1;
                    continue;
                }
                // Starts never decrease; on one thread, the outer range comes
                // first when two start together.
                let on_thread = last_on_thread.entry(range.global_tid).or_insert((i64::MIN, 0));
                if range.start < last_start || (range.start, -range.end) < *on_thread {
                    return Ok(false);
                }
                (last_start, *on_thread) = (range.start, (range.start, -range.end));
                self.range(range)?;
            } else {
                let launched = l.take().expect("a launch is next");
                l = launches.next();
                if launched.launch < last_launch {
                    return Ok(false);
                }
                last_launch = launched.launch;
                if plausible(launched.start, launched.end) {
                    self.launch(launched);
                }
            }
        }
        Ok(true)
    }

    /// Close the ranges of a thread that ended by `t`; each instance's GPU
    /// time goes to `gpu` (the first error of writing it to `failed`).
    fn close(stack: &mut Vec<Open>, regions: &mut [Acc], gpu: &mut Runs, failed: &mut Option<Error>, t: i64) {
        while stack.last().is_some_and(|o| o.end <= t) {
            let o = stack.pop().expect("checked above");
            if o.first_kernel <= o.last_kernel {
                regions[o.region as usize].span_ns += o.last_kernel - o.first_kernel;
            }
            if failed.is_none() {
                *failed = gpu.push(o.region, o.gpu_ns).err();
            }
        }
    }

    fn range(&mut self, r: NvtxRange) -> Result<(), Error> {
        self.ranges += 1;
        let stack = self.stacks.entry(r.global_tid).or_default();
        let parent = if r.style == Style::PushPop {
            Self::close(stack, &mut self.regions, &mut self.gpu_durations, &mut self.failed, r.start);
            stack.last().map(|o| o.region)
        } else {
            // Start/end ranges cannot be put on a thread's stack.
            None
        };
        let key = (r.global_tid, parent, r.style, r.domain, r.name);
        let regions = &mut self.regions;
        let region = *self.ids.entry(key).or_insert_with(|| {
            regions.push(Acc {
                parent,
                name: r.name,
                domain: r.domain,
                style: r.style,
                global_tid: r.global_tid,
                depth: parent.map_or(0, |p| regions[p as usize].depth + 1),
                instances: 0,
                inclusive_ns: 0,
                min_ns: i64::MAX,
                max_ns: i64::MIN,
                child_ns: 0,
                kernels: 0,
                gpu_ns: 0,
                kernels_excl: 0,
                gpu_excl_ns: 0,
                span_ns: 0,
                graph_kernels: 0,
                graph_ns: 0,
                exclusive_kernels: Vec::new(),
            });
            (regions.len() - 1) as u32
        });
        let ns = r.end - r.start;
        let acc = &mut self.regions[region as usize];
        acc.instances += 1;
        // Sums saturate: a corrupt export must not wrap around to a negative time.
        acc.inclusive_ns = acc.inclusive_ns.saturating_add(ns);
        acc.min_ns = acc.min_ns.min(ns);
        acc.max_ns = acc.max_ns.max(ns);
        if let Some(p) = parent {
            let p = &mut self.regions[p as usize];
            p.child_ns = p.child_ns.saturating_add(ns);
        }
        if r.style == Style::PushPop {
            stack.push(Open { end: r.end, region, first_kernel: i64::MAX, last_kernel: i64::MIN, gpu_ns: 0 });
        }
        self.durations.push(region, ns)
    }

    /// A kernel belongs to the ranges open on its launching thread when the launch call began.
    fn launch(&mut self, k: Launched) {
        let Some(stack) = self.stacks.get_mut(&k.global_tid) else { return };
        Self::close(stack, &mut self.regions, &mut self.gpu_durations, &mut self.failed, k.launch);
        let Some(inner) = stack.last() else { return };
        let ns = k.end - k.start;
        let acc = &mut self.regions[inner.region as usize];
        acc.kernels_excl += 1;
        acc.gpu_excl_ns = acc.gpu_excl_ns.saturating_add(ns);
        match acc.exclusive_kernels.binary_search_by_key(&k.name, |e| e.0) {
            Ok(i) => {
                let e = &mut acc.exclusive_kernels[i];
                (e.1, e.2) = (e.1 + 1, e.2.saturating_add(ns));
            }
            Err(i) => acc.exclusive_kernels.insert(i, (k.name, 1, ns)),
        }
        let graph = usize::from(k.graph);
        for o in stack.iter_mut() {
            let acc = &mut self.regions[o.region as usize];
            acc.kernels += 1;
            acc.gpu_ns = acc.gpu_ns.saturating_add(ns);
            acc.graph_kernels += graph;
            acc.graph_ns = acc.graph_ns.saturating_add(ns * graph as i64);
            o.first_kernel = o.first_kernel.min(k.start);
            o.last_kernel = o.last_kernel.max(k.end);
            o.gpu_ns = o.gpu_ns.saturating_add(ns);
        }
        self.attributed = (self.attributed.0 + 1, self.attributed.1.saturating_add(ns));
        if k.graph {
            self.attributed_graph = (self.attributed_graph.0 + 1, self.attributed_graph.1.saturating_add(ns));
        }
    }

    /// The reports, from the accumulators and the sorted runs.
    fn finish(
        mut self,
        names: Names,
        normalized: Option<Normalized>,
        kernels: KernelTotals,
        top_n: usize,
    ) -> Result<Ingested, Error> {
        let regions = &mut self.regions;
        for stack in self.stacks.values_mut() {
            Self::close(stack, regions, &mut self.gpu_durations, &mut self.failed, i64::MAX);
        }
        if let Some(e) = self.failed.take() {
            return Err(e);
        }
        let mut notes = Vec::new();
        for (count, what) in [(self.odd_ranges, "NVTX ranges"), (kernels.odd, "kernels")] {
            if count > 0 {
                let note = odd_note(count, what);
                tracing::warn!("{note}");
                notes.push(note);
            }
        }
        if self.ranges == 0 {
            notes.push("no NVTX ranges in the capture (not traced, or the application emitted none)".into());
        }
        let (count, ns) = kernels.by_name.values().fold((0usize, 0i64), |(c, t), k| (c + k.0, t.saturating_add(k.1)));
        if count == 0 {
            notes.push("no CUDA kernels in the capture (CUDA not traced, or nothing ran on a GPU)".into());
        }
        // Each region's kernels, inclusive: the exclusive ones rolled up the tree;
        // the unattributed ones: each name's total less what the roots hold.
        let mut inclusive: Vec<HashMap<u32, (usize, i64)>> = vec![HashMap::default(); self.regions.len()];
        let mut attributed_by_name: HashMap<u32, (usize, i64)> = HashMap::default();
        let pairs =
            self.regions.iter().enumerate().flat_map(|(r, a)| a.exclusive_kernels.iter().map(move |e| (r as u32, e)));
        for (region, &(name, calls, ns)) in pairs {
            let mut at = Some(region);
            while let Some(r) = at {
                let e = inclusive[r as usize].entry(name).or_insert((0, 0));
                *e = (e.0 + calls, e.1.saturating_add(ns));
                at = self.regions[r as usize].parent;
            }
            let e = attributed_by_name.entry(name).or_insert((0, 0));
            *e = (e.0 + calls, e.1.saturating_add(ns));
        }
        let outside = kernels.by_name.iter().filter_map(|(name, &(calls, ns, _, _))| {
            let (c, t) = attributed_by_name.get(name).copied().unwrap_or((0, 0));
            (calls > c).then(|| (names.get(*name).to_string(), (calls - c, ns.saturating_sub(t))))
        });
        let unattributed = Unattributed {
            kernel_count: count.saturating_sub(self.attributed.0),
            gpu_time_ns: ns.saturating_sub(self.attributed.1),
            graph_kernel_count: kernels.graph.0.saturating_sub(self.attributed_graph.0),
            graph_gpu_time_ns: kernels.graph.1.saturating_sub(self.attributed_graph.1),
            kernels: kernel_rows(outside),
        };
        let mut top =
            top_kernel_rows(kernels.by_name.iter().map(|(id, sums)| (names.get(*id).to_string(), *sums)), top_n);
        // Each listed kernel's place in `top`, by name id.
        let slot: HashMap<u32, usize> = {
            let wanted: HashMap<&str, usize> = top.iter().enumerate().map(|(i, k)| (k.name.as_str(), i)).collect();
            kernels.by_name.keys().filter_map(|id| wanted.get(names.get(*id)).map(|&i| (*id, i))).collect()
        };
        for (id, short) in &kernels.short {
            let (Some(&i), short) = (slot.get(id), names.get(*short)) else { continue };
            if !short.is_empty() && short != top[i].name {
                top[i].short_name = Some(short.to_string());
            }
        }
        // The listed kernels' launch durations, bounded like region samples.
        let mut kernel_samples: Vec<Vec<i64>> = vec![Vec::new(); top.len()];
        // Each region's sorted durations: its median and bounded samples; the
        // kernels' sorted durations at the same time, on another thread.
        let mut medians = vec![0; self.regions.len()];
        let mut region_samples = vec![Vec::new(); self.regions.len()];
        let mut gpu_samples = vec![Vec::new(); self.regions.len()];
        let regions = &self.regions;
        let by_name = &kernels.by_name;
        let (kernel_runs, kernel_samples_out) = (kernels.durations, &mut kernel_samples);
        std::thread::scope(|s| {
            let kernels = s.spawn(move || {
                each_sorted(
                    kernel_runs,
                    |id| by_name[&id].0,
                    |id, _, samples| {
                        if let Some(&i) = slot.get(&id) {
                            kernel_samples_out[i] = samples;
                        }
                    },
                )
            });
            let by_region = each_sorted(
                self.durations,
                |region| regions[region as usize].instances,
                |region, median, samples| {
                    medians[region as usize] = median;
                    region_samples[region as usize] = samples;
                },
            );
            // Every push/pop instance has a GPU time; only those of regions
            // that ran kernels are kept.
            let gpu = each_sorted(
                self.gpu_durations,
                |region| regions[region as usize].instances,
                |region, _, samples| {
                    if regions[region as usize].kernels > 0 {
                        gpu_samples[region as usize] = samples;
                    }
                },
            );
            kernels.join().expect("the kernel runs' merge does not panic").and(by_region).and(gpu)
        })?;
        let path_names = region_names(&self.regions, &names);
        let paths: Vec<String> = path_names.iter().map(regions::join).collect();
        // Each region with its samples: durations, and GPU times per instance.
        type Sampled = (Region, (Vec<i64>, Vec<i64>));
        let mut rows: Vec<Sampled> = self
            .regions
            .iter()
            .zip(region_samples.into_iter().zip(gpu_samples))
            .enumerate()
            .map(|(i, (a, samples))| {
                let region = Region {
                    path: paths[i].clone(),
                    path_names: path_names[i].clone(),
                    name: names.get(a.name).to_string(),
                    parent: a.parent.map(|p| paths[p as usize].clone()),
                    depth: a.depth,
                    domain: names.get(a.domain).to_string(),
                    style: a.style,
                    process_id: pid_of(a.global_tid),
                    thread_id: tid_of(a.global_tid),
                    instances: a.instances,
                    inclusive_ns: a.inclusive_ns,
                    exclusive_ns: a.inclusive_ns.saturating_sub(a.child_ns),
                    min_ns: a.min_ns,
                    median_ns: medians[i],
                    max_ns: a.max_ns,
                    kernel_count: a.kernels,
                    gpu_time_ns: a.gpu_ns,
                    kernel_count_exclusive: a.kernels_excl,
                    gpu_time_exclusive_ns: a.gpu_excl_ns,
                    gpu_span_ns: a.span_ns,
                    graph_kernel_count: a.graph_kernels,
                    graph_gpu_time_ns: a.graph_ns,
                    kernels: kernel_rows(inclusive[i].iter().map(|(n, &v)| (names.get(*n).to_string(), v))),
                    rank: None,
                };
                (region, samples)
            })
            .collect();
        rows.sort_by(|(a, _), (b, _)| {
            (a.process_id, a.thread_id, &a.path, &a.domain).cmp(&(b.process_id, b.thread_id, &b.path, &b.domain))
        });
        let (regions, region_samples): (Vec<Region>, Vec<RegionSamples>) = rows
            .into_iter()
            .map(|(r, (samples_ns, gpu_samples_ns))| {
                let s = RegionSamples {
                    path: r.path.clone(),
                    domain: r.domain.clone(),
                    process_id: r.process_id,
                    thread_id: r.thread_id,
                    instances: r.instances,
                    samples_ns,
                    gpu_samples_ns,
                };
                (r, s)
            })
            .unzip();
        let kernel_samples = top
            .iter()
            .zip(kernel_samples)
            .map(|(k, samples_ns)| KernelSamples { name: k.name.clone(), calls: k.calls, samples_ns })
            .collect();
        let mut processes: Vec<ProcessKernels> = Vec::new();
        let mut by_process = kernels.by_process;
        by_process.sort_by_key(|p| p.0);
        for ((pid, device), kernel_count, gpu_time_ns, comm_gpu_time_ns) in by_process {
            let d = DeviceKernels { device, kernel_count, gpu_time_ns, comm_gpu_time_ns };
            match processes.last_mut().filter(|p| p.process_id == pid) {
                Some(p) => p.devices.push(d),
                None => processes.push(ProcessKernels { process_id: pid, devices: vec![d], rank: None }),
            }
        }
        Ok(Ingested {
            regions: RegionsReport {
                schema: REGIONS_SCHEMA.into(),
                regions,
                unattributed,
                notes,
                normalized,
                processes,
            },
            top,
            samples: Samples::new(region_samples, kernel_samples),
            kernels: count,
        })
    }
}

/// Each region's names, outermost first: its parent's and its own.
fn region_names(regions: &[Acc], names: &Names) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::with_capacity(regions.len());
    // A parent is created before its children: its names are ready.
    for a in regions {
        let mut path = a.parent.map_or_else(Vec::new, |p| out[p as usize].clone());
        path.push(names.get(a.name).to_string());
        out.push(path);
    }
    out
}

/// Walk the sorted (key, value) pairs key by key; `count(key)` says how many
/// each key has. Calls `each(key, median, bounded samples)` per key present.
fn each_sorted(
    runs: Runs,
    count: impl Fn(u32) -> usize,
    mut each: impl FnMut(u32, i64, Vec<i64>),
) -> Result<(), Error> {
    let mut sorted = runs.sorted()?;
    let mut next = sorted.pop()?;
    while let Some((key, _)) = next {
        let n = count(key);
        let (lower, upper) = ((n - 1) / 2, n / 2);
        let mut ranks = runs::bounded_ranks(n, crate::timings::MAX_SAMPLES).peekable();
        let (mut median, mut samples, mut rank) = (0i128, Vec::new(), 0usize);
        while let Some((_, v)) = next.filter(|(k, _)| *k == key) {
            if rank == lower {
                median += i128::from(v);
            }
            if rank == upper {
                median += i128::from(v);
            }
            while ranks.peek() == Some(&rank) {
                samples.push(v);
                ranks.next();
            }
            rank += 1;
            next = sorted.pop()?;
        }
        each(key, (median / 2) as i64, samples);
    }
    Ok(())
}

/// Kernels by name with their (calls, total, min, max) ns → rows sorted by
/// total time (longest first, then by name), with mean and share of all kernels'
/// time; the first `n` (all when 0). Shared by the SQLite and the CSV readers.
pub(crate) fn top_kernel_rows(
    by_name: impl Iterator<Item = (String, (usize, i64, i64, i64))>,
    n: usize,
) -> Vec<TopKernel> {
    let by_name: Vec<_> = by_name.collect();
    let all: i64 = by_name.iter().map(|(_, v)| v.1).sum();
    let mut rows: Vec<TopKernel> = by_name
        .into_iter()
        .map(|(name, (calls, total, min, max))| TopKernel {
            name,
            short_name: None,
            calls,
            total_ns: total,
            mean_ns: if calls > 0 { total as f64 / calls as f64 } else { 0.0 },
            min_ns: min,
            max_ns: max,
            share_pct: if all > 0 { total as f64 * 100.0 / all as f64 } else { 0.0 },
        })
        .collect();
    rows.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.name.cmp(&b.name)));
    if n > 0 {
        rows.truncate(n);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Streams fed from vectors, as the readers would send them.
    fn stream<T: Send>(rows: Vec<T>) -> Stream<T> {
        let (mut out, stream) = batched::channel();
        for row in rows {
            out.push(row);
        }
        out.flush();
        stream
    }

    /// A CUDA graph launched inside `decode::step` runs three kernels under one
    /// launch call: all three belong to `step` and `decode`, counted as graph
    /// time; a graph launched outside every range is unattributed graph time.
    #[test]
    fn graph_kernels_belong_to_the_range_around_the_graph_launch() {
        let mut names = Names::default();
        let (decode, step, g1, g2, k) =
            (names.intern("decode"), names.intern("step"), names.intern("g1"), names.intern("g2"), names.intern("k"));
        let tid = (7 << 24) | 7;
        let range =
            |start, end, name| NvtxRange { start, end, name, domain: 0, style: Style::PushPop, global_tid: tid };
        let launched =
            |launch, start, name, graph| Launched { global_tid: tid, launch, start, end: start + 10, name, graph };
        let launches = vec![
            launched(20, 100, g1, true),
            launched(20, 110, g2, true),
            launched(20, 120, g2, true),
            launched(60, 130, k, false),
            launched(300, 310, g1, true),
        ];
        let mut totals = KernelTotals::new(Default::default());
        for l in &launches {
            let k = Kernel {
                start: l.start,
                end: l.end,
                name: l.name,
                short_id: None,
                graph: l.graph,
                pid: 7,
                device: Some(0),
            };
            totals.add(k, &HashMap::default());
        }
        let mut sweep = Sweep::default();
        assert!(sweep.run(stream(vec![range(0, 100, decode), range(10, 50, step)]), stream(launches)).unwrap());
        let out = sweep.finish(names, None, totals, 0).unwrap();
        let region = |path: &str| out.regions.regions.iter().find(|r| r.path == path).unwrap().clone();
        let (d, s) = (region("decode"), region("decode::step"));
        assert_eq!((s.kernel_count, s.gpu_time_ns, s.graph_kernel_count, s.graph_gpu_time_ns), (3, 30, 3, 30));
        assert_eq!((d.kernel_count, d.gpu_time_ns, d.graph_kernel_count, d.graph_gpu_time_ns), (4, 40, 3, 30));
        let row = |name: &str, calls, gpu_time_ns| RegionKernel { name: name.into(), calls, gpu_time_ns };
        assert_eq!(s.kernels, [row("g2", 2, 20), row("g1", 1, 10)]);
        assert_eq!(d.kernels, [row("g2", 2, 20), row("g1", 1, 10), row("k", 1, 10)]);
        let u = &out.regions.unattributed;
        assert_eq!((u.kernel_count, u.gpu_time_ns, u.graph_kernel_count, u.graph_gpu_time_ns), (1, 10, 1, 10));
        assert_eq!(u.kernels, [row("g1", 1, 10)]);
    }

    #[test]
    fn top_kernel_rows_have_means_and_shares() {
        let rows = top_kernel_rows(
            [("k".to_string(), (4, 1000, 100, 400)), ("j".into(), (1, 1000, 1000, 1000))].into_iter(),
            0,
        );
        let k: Vec<_> = rows.iter().map(|r| (r.name.as_str(), r.mean_ns, r.share_pct)).collect();
        // Ties by name.
        assert_eq!(k, [("j", 1000.0, 50.0), ("k", 250.0, 50.0)]);
        assert_eq!(
            top_kernel_rows(rows.iter().map(|r| (r.name.clone(), (r.calls, r.total_ns, r.min_ns, r.max_ns))), 1).len(),
            1
        );
    }
}
