//! report::findings::device: findings from the device down (nsys/breakdown.json).
//!
//! Per device of each process, its span (first operation to last) is cut into
//! parts that never overlap: the busy time charged to each kernel category
//! (compute segments split among the categories running, exposed
//! communication to `communication`), copies (their pageable share apart),
//! memsets, and idle time by cause. Each finding is one of those parts, so the
//! same milliseconds are never in two findings and a device's findings add up
//! to at most its span. Each is ranked by its share of the span and must be
//! worth [`MIN_SHARE`](super::model::MIN_SHARE) of it.
//!
//! Then where: GPU work (kernel families, copies run as kernels, exposed
//! communication) is charged to the region that *issued* the kernels (their
//! launch calls, breakdown.json's `issued`), with the regions whose wall time
//! the time fell in beside it; host-side causes (sync stalls, launch gaps,
//! nothing queued, pageable copies) to the regions whose wall time holds them.
use super::model::{
    ev, ms, pct, worth, Attribution, Confidence, Evidence, Finding, KernelShare, Kind, NamedNs, RegionShare, ShareOf,
    WHERE_ROWS,
};
use super::ncu::{tensor_core_gain, NcuFamily, FAMILY_KERNELS, HIGH_THROUGHPUT_PCT};
use crate::aggregate::categories::{Categories, Category};
use crate::aggregate::nsys::breakdown::{BreakdownReport, DeviceBreakdown, Parts, RegionBreakdown};
use crate::aggregate::nsys::RegionsReport;
use crate::report::peaks::GpuPeak;

/// An elementwise family is a fusion candidate with at least this many
/// kernels, under this mean duration (us) and this share of kernel time (%).
const FUSION_KERNELS: usize = 10;
const FUSION_MEAN_US: f64 = 50.0;
const FUSION_SHARE_PCT: f64 = 20.0;

/// What the device rules read besides the breakdown.
pub(crate) struct DeviceInputs<'a> {
    pub(crate) breakdown: &'a BreakdownReport,
    /// kernels.json's rows (names, calls, time; over every device).
    pub(crate) kernels: &'a [KernelShare<'a>],
    /// The category table the breakdown was made with (for kernels.json's names).
    pub(crate) categories: Option<&'a Categories>,
    /// What ncu's counters say of each family, where ncu ran.
    pub(crate) ncu: &'a [NcuFamily],
    pub(crate) gpu: Option<&'a GpuPeak>,
    /// The profiled command (argv), where known.
    pub(crate) command: &'a [String],
    /// regions.json: which top-level regions launched a kernel, by name.
    pub(crate) regions: Option<&'a RegionsReport>,
}

/// Every device's findings.
pub(crate) fn from_breakdown(x: &DeviceInputs) -> Vec<Finding> {
    x.breakdown.devices.iter().flat_map(|d| Device { d, x }.findings()).collect()
}

/// One device and what the rules read.
struct Device<'a> {
    d: &'a DeviceBreakdown,
    x: &'a DeviceInputs<'a>,
}

impl Device<'_> {
    fn span(&self) -> i64 {
        self.d.span.wall_ns
    }

    fn findings(&self) -> Vec<Finding> {
        if self.span() <= 0 {
            return Vec::new();
        }
        let mut out = self.families();
        out.extend(self.communication());
        out.extend(self.idle());
        out.extend(self.pageable());
        out.retain(|f| worth(f.recoverable_ns, self.span()));
        out
    }

    /// A finding on this device, its share of the span.
    fn finding(&self, kind: Kind, ns: i64, bound: String, confidence: Confidence, evidence: Vec<Evidence>) -> Finding {
        let d = self.d;
        let share = (ns as f64 / self.span() as f64, ShareOf::DeviceSpan);
        Finding {
            region: DEVICE_SPAN.to_string(),
            process_id: Some(d.process_id),
            rank: d.rank,
            device: Some(d.device),
            ..Finding::new(kind, ns, share, bound, confidence, evidence)
        }
    }

    /// Name the finding's regions: GPU work by the regions that issued its
    /// kernels (`issued`: ns per region), host-side causes by the wall windows
    /// (`ran`); the first named is its `region`.
    fn placed(&self, mut f: Finding, issued: Vec<RegionShare>, ran: Vec<RegionShare>) -> Finding {
        f.issued_in = issued;
        f.ran_in = ran;
        if f.kind.is_gpu_work() {
            match (f.issued_in.first(), &self.d.issued_note) {
                (Some(r), _) => (f.region, f.attribution) = (r.region.clone(), Attribution::Issued),
                (None, Some(note)) => f.needs = Some(note.clone()),
                (None, None) => {}
            }
        } else if let Some(r) = f.ran_in.first() {
            (f.region, f.attribution) = (r.region.clone(), Attribution::WallWindow);
        }
        f
    }

    fn charged(&self, c: Category) -> i64 {
        self.d.categories.iter().find(|x| x.category == c).map_or(0, |x| x.charged_ns)
    }

    fn kernel_count(&self, c: Category) -> (usize, i64) {
        self.d.categories.iter().find(|x| x.category == c).map_or((0, 0), |x| (x.kernels, x.ns))
    }

    /// The regions that issued kernels of category `c`, most time first.
    fn issued_by(&self, c: Category) -> Vec<RegionShare> {
        let mut rows: Vec<RegionShare> = self
            .d
            .issued
            .iter()
            .filter_map(|r| {
                let x = r.categories.iter().find(|x| x.category == c)?;
                (x.ns > 0).then(|| RegionShare { region: r.name.clone(), ns: x.ns, kernels: Some(x.kernels) })
            })
            .collect();
        top(&mut rows)
    }

    /// The wall windows by what `part` gives of each.
    fn ran_by(&self, part: impl Fn(&RegionBreakdown) -> i64) -> Vec<RegionShare> {
        let mut rows: Vec<RegionShare> = self
            .d
            .regions
            .iter()
            .map(|r| RegionShare { region: r.name.clone(), ns: part(r), kernels: None })
            .filter(|r| r.ns > 0)
            .collect();
        top(&mut rows)
    }

    fn charged_in(r: &RegionBreakdown, c: Category) -> i64 {
        r.categories.iter().find(|x| x.category == c).map_or(0, |x| x.charged_ns)
    }

    /// kernels.json's rows of category `c`, most time first.
    fn kernel_rows(&self, c: Category) -> Vec<&KernelShare<'_>> {
        let Some(categories) = self.x.categories else { return Vec::new() };
        self.x.kernels.iter().filter(|k| categories.of(k.name) == c).collect()
    }

    /// What ncu says of category `c` on this device.
    fn ncu(&self, c: Category) -> Option<&NcuFamily> {
        self.x.ncu.iter().find(|f| f.category == c && f.device.is_none_or(|d| d == self.d.device))
    }

    /// Kernel families: copies and casts run as kernels; the elementwise
    /// kernels where they are many and small; a family ncu reads as memory
    /// bound or off the tensor cores; and the largest of the rest.
    fn families(&self) -> Vec<Finding> {
        let fusion = self.fusion_candidate();
        let largest = Category::ALL
            .iter()
            .copied()
            .filter(|&c| !matches!(c, Category::Communication | Category::CopyCast))
            .filter(|&c| !(c == Category::Elementwise && fusion))
            .max_by_key(|&c| (self.charged(c), std::cmp::Reverse(c)));
        let mut out = Vec::new();
        for c in Category::ALL.iter().copied().filter(|&c| c != Category::Communication) {
            let ns = self.charged(c);
            if ns <= 0 {
                continue;
            }
            let ncu = self.ncu(c);
            let kind = match c {
                Category::CopyCast => Kind::CopyCast,
                Category::Elementwise if fusion => Kind::ElementwiseFusion,
                _ if ncu.is_some_and(NcuFamily::is_memory_bound) => Kind::MemoryBound,
                _ if ncu.is_some_and(NcuFamily::is_off_tensor_cores) => Kind::LowTensorCoreShare,
                _ if Some(c) == largest => Kind::KernelFamily,
                _ => continue,
            };
            out.push(self.family(kind, c, ns, ncu));
        }
        out
    }

    /// Elementwise kernels many, small and a large share of the kernel time.
    fn fusion_candidate(&self) -> bool {
        let (kernels, ns) = self.kernel_count(Category::Elementwise);
        let all: i64 = self.d.categories.iter().map(|c| c.ns).sum();
        kernels >= FUSION_KERNELS
            && (ns as f64 / kernels as f64 / 1e3) < FUSION_MEAN_US
            && pct(ns, all) >= FUSION_SHARE_PCT
    }

    fn family(&self, kind: Kind, c: Category, charged: i64, ncu: Option<&NcuFamily>) -> Finding {
        let (kernels, summed) = self.kernel_count(c);
        let mut evidence = vec![
            ev("busy time charged to the family", ms(charged), "ms"),
            ev("kernels", kernels as f64, "count"),
            ev("their GPU time, summed", ms(summed), "ms"),
        ];
        if kernels > 0 {
            evidence.push(ev("mean kernel", summed as f64 / kernels as f64 / 1e3, "us"));
        }
        let rows = self.kernel_rows(c);
        if let Some(k) = rows.first() {
            evidence.push(ev(
                &format!("top kernel {} per call (all devices)", k.label),
                k.total_ms / k.calls.max(1) as f64,
                "ms",
            ));
            evidence.push(ev(&format!("top kernel {} calls (all devices)", k.label), k.calls as f64, "count"));
        }
        let family_bound = format!(
            "the device's busy time charged to the {} kernels (where they ran alone all of it; beside kernels of other categories, a share by the number running): were they free, at most this comes back",
            c.name()
        );
        let (recoverable, bound, confidence) = match kind {
            Kind::LowTensorCoreShare => {
                let (gain, how) = tensor_core_gain(self.x.gpu);
                let conf = if self.x.gpu.is_some() { Confidence::Medium } else { Confidence::Low };
                ((charged as f64 * gain).round() as i64, format!("{family_bound}, {how}"), conf)
            }
            Kind::KernelFamily => (charged, family_bound, Confidence::Medium),
            Kind::ElementwiseFusion => (charged, family_bound, Confidence::Low),
            _ => (charged, family_bound, Confidence::High),
        };
        let mut f = self.finding(kind, recoverable, bound, confidence, evidence);
        if let Some(n) = ncu {
            f.evidence.extend(n.evidence());
        }
        f.fix = family_fix(kind, c, ncu);
        f.kernels = rows.iter().take(FAMILY_KERNELS).map(|k| k.name.to_string()).collect();
        if kind == Kind::KernelFamily {
            if let Some(k) = rows.first() {
                f.ncu_command = ncu_command(k, self.x.command);
            }
        }
        let ran = self.ran_by(|r| Self::charged_in(r, c));
        self.placed(f, self.issued_by(c), ran)
    }

    fn communication(&self) -> Option<Finding> {
        let p = &self.d.span;
        let ns = p.communication_exposed_ns;
        let (kernels, summed) = self.kernel_count(Category::Communication);
        let f = self.finding(
            Kind::ExposedCommunication,
            ns,
            "time the communication kernels (NCCL) ran with no compute kernel beside them: perfect overlap would hide it".into(),
            Confidence::High,
            vec![
                ev("exposed communication", ms(ns), "ms"),
                ev(
                    "of communication overlapped",
                    pct(p.communication_overlapped_ns, p.communication_overlapped_ns + ns),
                    "%",
                ),
                ev("communication kernels", kernels as f64, "count"),
                ev("their GPU time, summed", ms(summed), "ms"),
            ],
        );
        let ran = self.ran_by(|r| r.parts.communication_exposed_ns);
        Some(self.placed(f, self.issued_by(Category::Communication), ran))
    }

    /// Idle time by cause: sync stalls, launch gaps, nothing queued.
    fn idle(&self) -> Vec<Finding> {
        let p: &Parts = &self.d.span;
        let idle = ev("GPU idle in all", pct(p.idle_ns, p.wall_ns), "%");
        let gap_us = self.x.breakdown.launch_gap_ns / 1000;
        let (kernels, kernel_ns): (usize, i64) =
            self.d.categories.iter().fold((0, 0), |(k, n), c| (k + c.kernels, n + c.ns));
        let sync = self.finding(
            Kind::SyncStall,
            p.idle_sync_ns,
            "the GPU's idle gaps that began while a blocking call (cudaStreamSynchronize, cudaMemcpy, ...) of the process was waiting: the queue had drained because the host waited".into(),
            Confidence::High,
            vec![ev("sync-stall idle", ms(p.idle_sync_ns), "ms"), idle.clone()],
        );
        let launch = self.finding(
            Kind::LaunchBound,
            p.idle_launch_ns,
            format!("the GPU's idle gaps of at most {gap_us} us between two operations (launch latency): a CUDA graph or fewer, larger kernels remove them"),
            Confidence::Medium,
            vec![
                ev("launch-gap idle", ms(p.idle_launch_ns), "ms"),
                ev("kernels", kernels as f64, "count"),
                ev("mean kernel", if kernels > 0 { kernel_ns as f64 / kernels as f64 / 1e3 } else { 0.0 }, "us"),
                idle.clone(),
            ],
        );
        let nothing = self.finding(
            Kind::IdleGpu,
            p.idle_nothing_queued_ns,
            format!("the GPU's idle gaps longer than {gap_us} us inside the span with no blocking call waiting: nothing was queued"),
            Confidence::Medium,
            vec![ev("nothing-queued idle", ms(p.idle_nothing_queued_ns), "ms"), idle],
        );
        let mut sync = self.placed(sync, self.awaited_by(), self.ran_by(|r| r.parts.idle_sync_ns));
        sync.calls = self.sync_rows(|s| s.call.clone());
        sync.waited_for = self.sync_rows(|s| s.waited_for.clone());
        vec![
            sync,
            self.placed(launch, Vec::new(), self.ran_by(|r| r.parts.idle_launch_ns)),
            self.placed(nothing, Vec::new(), self.ran_by(|r| r.parts.idle_nothing_queued_ns)),
        ]
    }

    /// The sync-stall time by what `key` names of its rows, most first.
    fn sync_rows(&self, key: impl Fn(&crate::aggregate::nsys::breakdown::SyncStall) -> String) -> Vec<NamedNs> {
        let mut by: std::collections::BTreeMap<String, i64> = Default::default();
        for s in &self.d.sync_stalls {
            *by.entry(key(s)).or_default() += s.ns;
        }
        let mut rows: Vec<NamedNs> = by.into_iter().map(|(name, ns)| NamedNs { name, ns }).collect();
        rows.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.name.cmp(&b.name)));
        rows.truncate(WHERE_ROWS);
        rows
    }

    /// The regions that issued the work the sync stalls waited for: the
    /// top-level region of the process whose launches hold the kernel that
    /// ended before the gap (regions.json, by the kernel's name), where
    /// exactly one region launched kernels of that name.
    fn awaited_by(&self) -> Vec<RegionShare> {
        let Some(regions) = self.x.regions else { return Vec::new() };
        let mut by: std::collections::BTreeMap<String, i64> = Default::default();
        for s in &self.d.sync_stalls {
            let issuers: std::collections::BTreeSet<&str> = regions
                .regions
                .iter()
                .filter(|r| r.depth == 0 && r.process_id == self.d.process_id)
                .filter(|r| r.kernels.iter().any(|k| k.name == s.waited_for))
                .map(|r| r.name.as_str())
                .collect();
            if issuers.len() == 1 {
                *by.entry(issuers.into_iter().next().unwrap_or_default().to_string()).or_default() += s.ns;
            }
        }
        let mut rows: Vec<RegionShare> =
            by.into_iter().map(|(region, ns)| RegionShare { region, ns, kernels: None }).collect();
        top(&mut rows)
    }

    fn pageable(&self) -> Option<Finding> {
        let ns = self.d.pageable_copy_exposed_ns;
        let (count, bytes, all_ns) = self
            .d
            .copies
            .iter()
            .fold((0, 0, 0), |(c, b, n), x| (c + x.pageable_count, b + x.pageable_bytes, n + x.pageable_ns));
        let f = self.finding(
            Kind::PageableCopy,
            ns,
            "the copy time (no kernel running) charged to copies from or to pageable host memory (synchronous for the host, and slower): pinned, asynchronous copies can overlap compute entirely; charged to the regions whose wall time holds it, as the host waits for them there".into(),
            Confidence::High,
            vec![
                ev("pageable copy time with no kernel beside", ms(ns), "ms"),
                ev("pageable copies", count as f64, "count"),
                ev("their bytes", bytes as f64 / 1e6, "MB"),
                ev("their time, summed", ms(all_ns), "ms"),
            ],
        );
        Some(self.placed(f, Vec::new(), self.ran_by(|r| r.pageable_copy_exposed_ns)))
    }
}

/// Where a device finding names no region.
pub(crate) const DEVICE_SPAN: &str = "(device span)";

/// The first [`WHERE_ROWS`] by time.
fn top(rows: &mut Vec<RegionShare>) -> Vec<RegionShare> {
    rows.sort_by(|a, b| b.ns.cmp(&a.ns).then_with(|| a.region.cmp(&b.region)));
    rows.truncate(WHERE_ROWS);
    std::mem::take(rows)
}

/// A family's fix, by the rule its evidence meets.
fn family_fix(kind: Kind, c: Category, ncu: Option<&NcuFamily>) -> String {
    match (kind, ncu) {
        (Kind::KernelFamily, Some(n)) => {
            let reading = match (n.sm_pct, n.dram_pct) {
                (Some(sm), Some(dram)) if sm >= HIGH_THROUGHPUT_PCT => format!(
                    "ncu reads its kernels as compute bound (SM {sm:.1}%, DRAM {dram:.1}% of peak): {}",
                    if c == Category::Gemm || c == Category::Attention {
                        "lower precision (bf16/fp8) and tensor-core-friendly shapes are the levers"
                    } else {
                        "less work per element (a cheaper algorithm, work skipped) is the lever; look at which pipe ncu's rules name busiest"
                    }
                ),
                (Some(sm), Some(dram)) if sm < 20.0 && dram < 20.0 => format!(
                    "ncu reads neither unit busy (SM {sm:.1}%, DRAM {dram:.1}% of peak): a grid too small to fill the GPU, low occupancy or launch latency; larger batches or fused kernels help"
                ),
                (Some(sm), Some(dram)) => format!(
                    "ncu reads it latency bound (SM {sm:.1}%, DRAM {dram:.1}% of peak): its occupancy and scheduler statistics say why"
                ),
                _ => "ncu profiled it without the SpeedOfLight throughputs: profile it with --set full (the command beside)".to_string(),
            };
            format!("it is the largest part of the device's time; {reading}")
        }
        (kind, _) => kind.fix().to_string(),
    }
}

/// `ncu` on the family's top kernel, by its full name as either tool spells
/// it (as deep mode's filter): its launches after the first two (warm-up),
/// three of them, every section; around the profiled command where known,
/// else a placeholder for it.
fn ncu_command(k: &KernelShare, command: &[String]) -> Vec<String> {
    let pattern =
        format!("regex:^(?:{})$", crate::kernel_names::spelling_regex(k.name, crate::profile::ncu::escape_regex));
    let base = k.label.split(" ‹").next().unwrap_or(k.label);
    let out: String =
        base.chars().map(|c| if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' }).take(60).collect();
    let mut argv: Vec<String> = [
        "ncu",
        "--target-processes",
        "all",
        "--kernel-name-base",
        "demangled",
        "--kernel-name",
        &pattern,
        "--launch-skip",
        "2",
        "--launch-count",
        "3",
        "--set",
        "full",
        "-o",
        &format!("llmperf-{}", out.trim_matches('_')),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if command.is_empty() {
        argv.push("<the profiled command>".to_string());
    } else {
        argv.extend(command.iter().cloned());
    }
    argv
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::nsys::breakdown::CategoryTime;

    fn report(span: Parts, categories: Vec<CategoryTime>) -> BreakdownReport {
        let json = serde_json::json!({
            "schema": "", "launch_gap_ns": 50_000, "category_tables": [], "notes": [],
            "devices": [{"process_id": 7, "rank": 1, "device": 0, "span": span, "categories": categories,
                         "other_share": null, "copies": [], "regions": []}]
        });
        serde_json::from_value(json).unwrap()
    }

    fn findings(b: &BreakdownReport) -> Vec<(Kind, i64)> {
        let x = DeviceInputs {
            breakdown: b,
            kernels: &[],
            categories: None,
            ncu: &[],
            gpu: None,
            command: &[],
            regions: None,
        };
        let mut f = from_breakdown(&x);
        f.sort_by(Finding::rank_order);
        f.iter().map(|f| (f.kind, f.recoverable_ns)).collect()
    }

    fn charged(category: Category, ns: i64) -> CategoryTime {
        CategoryTime { category, kernels: 10, ns, charged_ns: ns }
    }

    #[test]
    fn the_devices_parts_are_ranked_by_their_share_and_those_under_2_percent_left_out() {
        let span = Parts {
            wall_ns: 100_000_000,
            busy_ns: 90_000_000,
            compute_ns: 85_000_000,
            communication_exposed_ns: 5_000_000,
            idle_ns: 10_000_000,
            idle_sync_ns: 8_500_000,
            // 1.5% of the span: under the threshold.
            idle_launch_ns: 1_500_000,
            ..Parts::default()
        };
        let cats = vec![
            charged(Category::Attention, 50_000_000),
            charged(Category::Gemm, 20_000_000),
            charged(Category::CopyCast, 15_000_000),
            charged(Category::Communication, 5_000_000),
        ];
        let b = report(span, cats);
        assert_eq!(
            findings(&b),
            [
                (Kind::KernelFamily, 50_000_000),
                (Kind::CopyCast, 15_000_000),
                (Kind::SyncStall, 8_500_000),
                (Kind::ExposedCommunication, 5_000_000),
            ]
        );
        let sum: i64 = findings(&b).iter().map(|f| f.1).sum();
        assert!(sum <= span.wall_ns);
    }

    #[test]
    fn a_busy_gpu_of_many_small_families_has_nothing_that_stands_out() {
        let span = Parts {
            wall_ns: 10_000_000,
            busy_ns: 9_900_000,
            compute_ns: 9_900_000,
            idle_ns: 100_000,
            idle_launch_ns: 100_000,
            ..Parts::default()
        };
        // The largest family is 1.5% of the span; the rest is "other" work spread thin.
        let cats = vec![charged(Category::Gemm, 150_000), charged(Category::Reduction, 100_000)];
        assert!(findings(&report(span, cats)).is_empty());
    }
}
