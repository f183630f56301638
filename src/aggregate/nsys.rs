//! aggregate: the NVTX region tree of an nsys capture, with GPU kernel
//! attribution, and its top kernels. Pure: a parsed capture in, the
//! `nsys/regions.json` and `nsys/top_kernels.json` models out.
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

use crate::parse::nsys_sqlite::{pid_of, tid_of, Capture, Kernel, Launches, Names, Style};
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
}

/// What the name normalizer did (see [`normalize_names`]).
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
    /// Nested names joined by `::`, outermost first.
    pub path: String,
    pub name: String,
    pub parent: Option<String>,
    pub depth: usize,
    /// NVTX domain; empty for the default domain.
    pub domain: String,
    pub style: String,
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
}

impl RegionsReport {
    /// A report of kernels without NVTX ranges (a kernel summary CSV): no
    /// regions, every kernel unattributed, and the note saying why.
    pub(crate) fn kernels_only(kernel_count: usize, gpu_time_ns: i64, note: String) -> RegionsReport {
        RegionsReport {
            schema: REGIONS_SCHEMA.into(),
            regions: Vec::new(),
            unattributed: Unattributed { kernel_count, gpu_time_ns },
            notes: vec![note],
            normalized: None,
        }
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
pub struct Unattributed {
    pub kernel_count: usize,
    pub gpu_time_ns: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
pub struct TopKernel {
    pub name: String,
    pub calls: usize,
    pub total_ns: i64,
    pub mean_ns: f64,
    pub min_ns: i64,
    pub max_ns: i64,
    /// Share of all kernels' GPU time.
    pub share_pct: f64,
}

/// A region being built: identity plus accumulators.
struct Acc {
    parent: Option<usize>,
    name: String,
    domain: String,
    style: Style,
    global_tid: i64,
    path: String,
    depth: usize,
    durations: Vec<i64>,
    child_ns: i64,
    kernels: usize,
    gpu_ns: i64,
    kernels_excl: usize,
    gpu_excl_ns: i64,
    span_ns: i64,
}

/// One range instance on a thread, with its region and enclosing instance.
struct Instance {
    start: i64,
    end: i64,
    region: usize,
    parent: Option<usize>,
    first_kernel: i64,
    last_kernel: i64,
}

pub fn build(capture: &Capture) -> RegionsReport {
    build_with_samples(capture).0
}

/// The region report and each region's instance durations (nsys/samples.json's `regions`).
pub fn build_with_samples(capture: &Capture) -> (RegionsReport, Vec<RegionSamples>) {
    let (ranges, kernels, names) = (&capture.ranges, &capture.kernels, &capture.names);
    let mut regions: Vec<Acc> = Vec::new();
    let mut ids: HashMap<(i64, Option<usize>, Style, u32, u32), usize> = HashMap::default();
    let mut threads: HashMap<i64, Vec<Instance>> = HashMap::default();
    let mut sorted: Vec<_> = ranges.iter().collect();
    // Outer ranges first when two start together.
    sorted.sort_by_key(|r| (r.global_tid, r.start, std::cmp::Reverse(r.end)));
    let mut stack: Vec<usize> = Vec::new();
    let mut current_tid = None;
    for r in sorted {
        let instances = threads.entry(r.global_tid).or_default();
        if current_tid != Some(r.global_tid) {
            stack.clear();
            current_tid = Some(r.global_tid);
        }
        let parent = if r.style == Style::PushPop {
            while stack.last().is_some_and(|&i| instances[i].end <= r.start) {
                stack.pop();
            }
            stack.last().copied()
        } else {
            None
        };
        let parent_region = parent.map(|i| instances[i].region);
        let key = (r.global_tid, parent_region, r.style, r.domain, r.name);
        let region = *ids.entry(key).or_insert_with(|| {
            let name = names.get(r.name);
            let (path, depth) = match parent_region {
                Some(p) => (regions::join([regions[p].path.as_str(), name]), regions[p].depth + 1),
                None => (name.to_string(), 0),
            };
            regions.push(Acc {
                parent: parent_region,
                name: name.to_string(),
                domain: names.get(r.domain).to_string(),
                style: r.style,
                global_tid: r.global_tid,
                path,
                depth,
                durations: Vec::new(),
                child_ns: 0,
                kernels: 0,
                gpu_ns: 0,
                kernels_excl: 0,
                gpu_excl_ns: 0,
                span_ns: 0,
            });
            regions.len() - 1
        });
        let duration = r.end - r.start;
        regions[region].durations.push(duration);
        if let Some(p) = parent_region {
            regions[p].child_ns = regions[p].child_ns.saturating_add(duration);
        }
        if r.style == Style::PushPop {
            instances.push(Instance {
                start: r.start,
                end: r.end,
                region,
                parent,
                first_kernel: i64::MAX,
                last_kernel: i64::MIN,
            });
            stack.push(instances.len() - 1);
        }
    }
    let unattributed = attribute(kernels, &capture.launches, &mut threads, &mut regions);
    for instances in threads.values() {
        for inst in instances.iter().filter(|i| i.first_kernel <= i.last_kernel) {
            regions[inst.region].span_ns += inst.last_kernel - inst.first_kernel;
        }
    }
    let mut notes = capture.odd.clone();
    if ranges.is_empty() {
        notes.push("no NVTX ranges in the capture (not traced, or the application emitted none)".into());
    }
    if kernels.is_empty() {
        notes.push("no CUDA kernels in the capture (CUDA not traced, or nothing ran on a GPU)".into());
    }
    let (regions, samples) = finish(regions);
    (RegionsReport { schema: REGIONS_SCHEMA.into(), regions, unattributed, notes, normalized: None }, samples)
}

/// Rename ranges that PyTorch named with per-call attributes
/// (`aten::mul, op_id = 317177`) to their operator (`aten::mul`), so that an
/// operator is one region with many instances instead of thousands of
/// one-instance regions. Names without such attributes are untouched; the
/// raw names stay in the SQLite export. `keys` empty: nothing changes.
pub fn normalize_names(capture: &mut Capture, keys: &[String]) -> Option<Normalized> {
    if keys.is_empty() {
        return None;
    }
    let mut renamed: HashMap<u32, u32> = HashMap::default();
    let mut instances = 0;
    for r in &mut capture.ranges {
        let names = &mut capture.names;
        let to = *renamed.entry(r.name).or_insert_with(|| {
            let head = regions::strip_attributes(names.get(r.name), keys).map(|(h, _)| h.to_string());
            head.map_or(r.name, |h| names.intern(&h))
        });
        if to != r.name {
            r.name = to;
            instances += 1;
        }
    }
    let raw: Vec<u32> = renamed.iter().filter(|(from, to)| from != to).map(|(_, to)| *to).collect();
    let operators: std::collections::HashSet<u32> = raw.iter().copied().collect();
    (!raw.is_empty()).then(|| Normalized {
        keys: keys.to_vec(),
        raw_names: raw.len(),
        operators: operators.len(),
        instances,
    })
}

/// Attribute each kernel to the ranges open on its launching thread at launch time.
fn attribute(
    kernels: &[Kernel],
    launches: &Launches,
    threads: &mut HashMap<i64, Vec<Instance>>,
    regions: &mut [Acc],
) -> Unattributed {
    let mut unattributed = Unattributed::default();
    // Per thread, where the previous search ended: kernels come in time
    // order, so the next launch is usually at or just after it.
    let mut cursors: HashMap<i64, usize> = HashMap::default();
    for k in kernels {
        let ns = k.end - k.start;
        let innermost = launches.get(k.correlation_id).and_then(|l| {
            let instances = threads.get(&l.global_tid)?;
            let cursor = cursors.entry(l.global_tid).or_default();
            *cursor = started_by(instances, l.start, *cursor);
            innermost_at(instances, *cursor, l.start).map(|i| (l.global_tid, i))
        });
        let Some((tid, inner)) = innermost else {
            unattributed.kernel_count += 1;
            unattributed.gpu_time_ns = unattributed.gpu_time_ns.saturating_add(ns);
            continue;
        };
        let instances = threads.get_mut(&tid).expect("thread seen above");
        let region = instances[inner].region;
        regions[region].kernels_excl += 1;
        regions[region].gpu_excl_ns = regions[region].gpu_excl_ns.saturating_add(ns);
        let mut at = Some(inner);
        while let Some(i) = at {
            let inst = &mut instances[i];
            regions[inst.region].kernels += 1;
            regions[inst.region].gpu_ns = regions[inst.region].gpu_ns.saturating_add(ns);
            inst.first_kernel = inst.first_kernel.min(k.start);
            inst.last_kernel = inst.last_kernel.max(k.end);
            at = inst.parent;
        }
    }
    unattributed
}

/// How many instances (sorted by start) started at or before `t`, searched
/// outward from `hint` (a galloping search: O(1) when `t` moves forward a
/// little, O(log n) at worst).
fn started_by(instances: &[Instance], t: i64, hint: usize) -> usize {
    let n = instances.len();
    let hint = hint.min(n);
    let before = |i: usize| instances[i].start <= t;
    if hint < n && before(hint) {
        let mut step = 1;
        let mut lo = hint + 1;
        while lo + step <= n && before(lo + step - 1) {
            lo += step;
            step *= 2;
        }
        let hi = (lo + step).min(n);
        lo + instances[lo..hi].partition_point(|i| i.start <= t)
    } else if hint > 0 && !before(hint - 1) {
        instances[..hint].partition_point(|i| i.start <= t)
    } else {
        hint
    }
}

/// The innermost instance containing time `t`, given that `after` instances
/// started by `t`: the last of them, or the nearest of its ancestors that is
/// still open at `t`.
fn innermost_at(instances: &[Instance], after: usize, t: i64) -> Option<usize> {
    let mut at = after.checked_sub(1);
    while let Some(i) = at {
        if instances[i].end > t {
            return Some(i);
        }
        at = instances[i].parent;
    }
    None
}

fn finish(regions: Vec<Acc>) -> (Vec<Region>, Vec<RegionSamples>) {
    let paths: Vec<String> = regions.iter().map(|r| r.path.clone()).collect();
    let mut out: Vec<(Region, Vec<i64>)> = regions
        .into_iter()
        .map(|mut r| {
            r.durations.sort_unstable();
            let n = r.durations.len();
            // Sums saturate: a corrupt export must not wrap around to a negative time.
            let inclusive: i64 = r.durations.iter().fold(0, |a, d| a.saturating_add(*d));
            let region = Region {
                parent: r.parent.map(|p| paths[p].clone()),
                path: r.path,
                name: r.name,
                depth: r.depth,
                domain: r.domain,
                style: if r.style == Style::PushPop { "PushPop".into() } else { "StartEnd".into() },
                process_id: pid_of(r.global_tid),
                thread_id: tid_of(r.global_tid),
                instances: n,
                inclusive_ns: inclusive,
                exclusive_ns: inclusive.saturating_sub(r.child_ns),
                min_ns: r.durations[0],
                median_ns: if n % 2 == 1 {
                    r.durations[n / 2]
                } else {
                    ((i128::from(r.durations[n / 2 - 1]) + i128::from(r.durations[n / 2])) / 2) as i64
                },
                max_ns: r.durations[n - 1],
                kernel_count: r.kernels,
                gpu_time_ns: r.gpu_ns,
                kernel_count_exclusive: r.kernels_excl,
                gpu_time_exclusive_ns: r.gpu_excl_ns,
                gpu_span_ns: r.span_ns,
            };
            (region, crate::stats::bounded(&r.durations, crate::timings::MAX_SAMPLES))
        })
        .collect();
    out.sort_by(|(a, _), (b, _)| {
        (a.process_id, a.thread_id, &a.path, &a.domain).cmp(&(b.process_id, b.thread_id, &b.path, &b.domain))
    });
    out.into_iter()
        .map(|(r, samples_ns)| {
            let s = RegionSamples {
                path: r.path.clone(),
                domain: r.domain.clone(),
                process_id: r.process_id,
                thread_id: r.thread_id,
                instances: r.instances,
                samples_ns,
            };
            (r, s)
        })
        .unzip()
}

/// Each listed kernel's launch durations, bounded like region samples.
pub fn kernel_samples(capture: &Capture, top: &[TopKernel]) -> Vec<KernelSamples> {
    let wanted: HashMap<&str, usize> = top.iter().enumerate().map(|(i, k)| (k.name.as_str(), i)).collect();
    let mut by_id: HashMap<u32, Option<usize>> = HashMap::default();
    let mut durations: Vec<Vec<i64>> = vec![Vec::new(); top.len()];
    for k in &capture.kernels {
        let slot = *by_id.entry(k.name).or_insert_with(|| wanted.get(capture.names.get(k.name)).copied());
        if let Some(i) = slot {
            durations[i].push(k.end - k.start);
        }
    }
    top.iter()
        .zip(durations)
        .map(|(k, mut d)| {
            d.sort_unstable();
            KernelSamples {
                name: k.name.clone(),
                calls: d.len(),
                samples_ns: crate::stats::bounded(&d, crate::timings::MAX_SAMPLES),
            }
        })
        .collect()
}

/// Kernels by total GPU time, most first (ties by name); `n` = 0 keeps all.
pub fn top_kernels(capture: &Capture, n: usize) -> Vec<TopKernel> {
    top_kernels_of(&capture.kernels, &capture.names, n)
}

fn top_kernels_of(kernels: &[Kernel], names: &Names, n: usize) -> Vec<TopKernel> {
    let mut by_name: HashMap<u32, (usize, i64, i64, i64)> = HashMap::default();
    for k in kernels {
        let ns = k.end - k.start;
        let e = by_name.entry(k.name).or_insert((0, 0, i64::MAX, i64::MIN));
        *e = (e.0 + 1, e.1.saturating_add(ns), e.2.min(ns), e.3.max(ns));
    }
    top_kernel_rows(by_name.into_iter().map(|(name, sums)| (names.get(name).to_string(), sums)), n)
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
