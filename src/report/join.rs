//! join: one region key for nsys and ncu (`region_join.json`).
//!
//! A region is its nested names and its NVTX domain, in both tools (ncu's
//! `(unattributed)` bucket is nsys's unattributed kernels). Per region:
//! nsys's wall and GPU time (every process and thread pooled) beside ncu's
//! results, and the **coverage**: the nsys GPU time of the region's kernels
//! that ncu profiled there (kernel identity: [`crate::kernel_names`]) over
//! all the nsys GPU time of the region. From the ncu counters: **HFU**
//! (hardware FLOPs over the profiled kernels' GPU time, over the peak) and
//! **MBU** (DRAM bytes over the same time, over the peak bandwidth).
use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::peaks::Peak;
use crate::aggregate::ncu::{RegionEntry, RegionReportFile};
use crate::aggregate::nsys::{Region, RegionsReport};
use crate::kernel_names::{self, Matched};
use crate::regions;

pub(crate) const SCHEMA: &str = "llmperf.region-join/v1";

/// `region_join.json`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RegionJoin {
    pub(crate) schema: String,
    /// `kernel` (ncu profiled kernels one by one: coverage by kernel) or
    /// `range` (ncu measured each range as one result).
    pub(crate) ncu_results: String,
    /// The peak HFU and MBU are over, with its source; null when unknown.
    pub(crate) peak: Option<String>,
    /// Why HFU and MBU are absent, with a hint, when the peak is unknown.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) peak_missing: Option<String>,
    /// The clocks of ncu's replays, which HFU and MBU are measured under.
    pub(crate) clocks: String,
    pub(crate) regions: Vec<JoinedRegion>,
    /// Every kernel name ncu reported, and the nsys name it joined.
    pub(crate) kernels: Vec<KernelJoin>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct JoinedRegion {
    /// `A::A1`, as selectors spell it; `(unattributed)` for kernels outside every range.
    pub(crate) path: String,
    /// The nested names, outermost first.
    pub(crate) path_names: Vec<String>,
    pub(crate) domain: String,
    pub(crate) nsys: Option<NsysSide>,
    pub(crate) ncu: Option<NcuSide>,
    /// `covered_gpu_time_ns` / nsys `gpu_time_ns`, in percent; null in range
    /// replay (the range is one result) or without nsys GPU time there.
    pub(crate) coverage_pct: Option<f64>,
    /// The nsys GPU time of the region's kernels that ncu profiled in it.
    pub(crate) covered_gpu_time_ns: i64,
    /// Hardware FLOP/s and DRAM bytes/s of the results with counters, and
    /// their share of the peak.
    pub(crate) achieved_tflops: Option<f64>,
    pub(crate) achieved_gbps: Option<f64>,
    pub(crate) hfu_pct: Option<f64>,
    pub(crate) mbu_pct: Option<f64>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NsysSide {
    pub(crate) instances: usize,
    pub(crate) wall_ns: i64,
    pub(crate) gpu_time_ns: i64,
    pub(crate) kernel_count: usize,
    /// Of `gpu_time_ns`: run by CUDA graphs.
    pub(crate) graph_gpu_time_ns: i64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct NcuSide {
    pub(crate) calls: u64,
    /// Replayed: slower than the nsys time.
    pub(crate) gpu_time_ms: f64,
    /// Distinct kernel names ncu profiled here, and how many joined an nsys kernel of the region.
    pub(crate) kernels: usize,
    pub(crate) kernels_joined: usize,
    /// Results with FLOP and DRAM counters.
    pub(crate) launches_with_counters: u64,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct KernelJoin {
    pub(crate) ncu_name: String,
    pub(crate) nsys_name: Option<String>,
    pub(crate) matched: Matched,
}

/// The nsys regions of one key, pooled over processes and threads.
#[derive(Default)]
struct Pooled {
    side: NsysSide,
    kernels: BTreeMap<String, i64>,
}

impl Pooled {
    fn add(&mut self, r: &Region) {
        let s = &mut self.side;
        s.instances += r.instances;
        s.wall_ns = s.wall_ns.saturating_add(r.inclusive_ns);
        s.gpu_time_ns = s.gpu_time_ns.saturating_add(r.gpu_time_ns);
        s.kernel_count += r.kernel_count;
        s.graph_gpu_time_ns = s.graph_gpu_time_ns.saturating_add(r.graph_gpu_time_ns);
        for k in &r.kernels {
            *self.kernels.entry(k.name.clone()).or_default() += k.gpu_time_ns;
        }
    }
}

type Key = (Vec<String>, String);

/// The join of nsys's regions and ncu's; `configured`: the run's
/// `pipeline.ncu.ncu_cli.clock_control`, for the clocks' note.
pub(crate) fn join(
    nsys: &RegionsReport,
    ncu: &RegionReportFile,
    configured: Option<crate::config::schema::ClockControl>,
    peak: Option<&Peak>,
) -> Option<RegionJoin> {
    let scope = ncu.scopes.first()?;
    let range = ncu.source.attribution == crate::regions::Attribution::Range;
    let (pooled, outside) = pool(nsys);
    let mut all_nsys: Vec<&str> = pooled.values().flat_map(|p| p.kernels.keys()).map(String::as_str).collect();
    all_nsys.extend(outside.kernels.keys().map(String::as_str));
    let everywhere = kernel_names::Index::new(all_nsys);
    // Each ncu name once: its key, and its nsys name anywhere.
    let mut kernels: BTreeMap<&str, (String, KernelJoin)> = BTreeMap::new();
    for k in scope.regions.iter().flat_map(|e| &e.kernels) {
        kernels.entry(&k.kernel_name).or_insert_with(|| {
            let (found, matched) = everywhere.find(&k.kernel_name);
            let join = KernelJoin { ncu_name: k.kernel_name.clone(), nsys_name: found.map(String::from), matched };
            (kernel_names::key(&k.kernel_name), join)
        });
    }
    let ncu_keys: BTreeMap<&str, &str> = kernels.iter().map(|(n, (k, _))| (*n, k.as_str())).collect();
    let mut rows = Vec::new();
    let mut seen: std::collections::BTreeSet<Key> = Default::default();
    for e in &scope.regions {
        let names = if e.path_names.is_empty() { vec![e.name.clone()] } else { e.path_names.clone() };
        let key = (names.clone(), e.domain.clone());
        let side = if e.unattributed { Some(&outside) } else { pooled.get(&key) };
        seen.insert(key);
        rows.push(joined(e, names, side, (&everywhere, &ncu_keys), range, peak));
    }
    // Regions only nsys saw: ncu profiled nothing there.
    for (key, p) in &pooled {
        if !seen.contains(key) && p.side.gpu_time_ns > 0 {
            rows.push(nsys_only(key, p));
        }
    }
    if !seen.iter().any(|(n, _)| n.len() == 1 && n[0] == UNATTRIBUTED) && outside.side.gpu_time_ns > 0 && !range {
        rows.push(nsys_only(&(vec![UNATTRIBUTED.into()], String::new()), &outside));
    }
    Some(RegionJoin {
        schema: SCHEMA.into(),
        ncu_results: if range { "range" } else { "kernel" }.into(),
        peak: peak.filter(|p| p.flops.is_some() || p.bytes_per_s.is_some()).map(|p| p.source.clone()),
        peak_missing: peak.and_then(|p| p.missing.as_ref()).map(|m| m.replace("MFU not computed", "HFU and MBU not computed")).or_else(|| {
            peak.is_none().then(|| {
                "HFU and MBU not computed: no peak known (hint: name the GPU, hardware.gpu=H100-SXM, or set hardware.peak_tflops and hardware.peak_gbps)".into()
            })
        }),
        clocks: clocks(ncu, configured),
        regions: rows,
        kernels: kernels.into_values().map(|(_, j)| j).collect(),
    })
}

const UNATTRIBUTED: &str = "(unattributed)";

/// nsys regions by (names, domain), and the unattributed kernels.
fn pool(nsys: &RegionsReport) -> (BTreeMap<Key, Pooled>, Pooled) {
    let mut pooled: BTreeMap<Key, Pooled> = BTreeMap::new();
    for r in &nsys.regions {
        pooled.entry((r.names(), r.domain.clone())).or_default().add(r);
    }
    let u = &nsys.unattributed;
    let outside = Pooled {
        side: NsysSide {
            instances: 0,
            wall_ns: 0,
            gpu_time_ns: u.gpu_time_ns,
            kernel_count: u.kernel_count,
            graph_gpu_time_ns: u.graph_gpu_time_ns,
        },
        kernels: u.kernels.iter().map(|k| (k.name.clone(), k.gpu_time_ns)).collect(),
    };
    (pooled, outside)
}

/// The nsys names indexed, and each ncu name's key.
type Names<'a> = (&'a kernel_names::Index<'a>, &'a BTreeMap<&'a str, &'a str>);

fn joined(
    e: &RegionEntry,
    names: Vec<String>,
    side: Option<&Pooled>,
    (index, ncu_keys): Names,
    range: bool,
    peak: Option<&Peak>,
) -> JoinedRegion {
    // Coverage: the region's nsys kernels that one of ncu's kernels here names.
    let (mut covered, mut kernels_joined) = (0i64, 0usize);
    if let Some(p) = side.filter(|_| !range) {
        let mut hit = std::collections::BTreeSet::new();
        for k in &e.kernels {
            let here = p.kernels.keys().map(String::as_str);
            if let Some(name) = index.find_among(here, &k.kernel_name, ncu_keys[k.kernel_name.as_str()]) {
                kernels_joined += 1;
                hit.insert(name);
            }
        }
        covered = hit.iter().map(|n| p.kernels[*n]).sum();
    }
    let nsys = side.map(|p| p.side.clone());
    let gpu = nsys.as_ref().map_or(0, |n| n.gpu_time_ns);
    let c = e.counters.as_ref().filter(|c| c.gpu_time_ms > 0.0);
    let flop_rate = c.map(|c| c.flops / (c.gpu_time_ms / 1e3));
    let byte_rate = c.map(|c| c.dram_bytes / (c.gpu_time_ms / 1e3));
    let of = |rate: Option<f64>, peak: Option<f64>| rate.zip(peak.filter(|p| *p > 0.0)).map(|(r, p)| 100.0 * r / p);
    JoinedRegion {
        path: if e.unattributed { UNATTRIBUTED.into() } else { regions::join(&names) },
        path_names: names,
        domain: e.domain.clone(),
        nsys,
        ncu: Some(NcuSide {
            calls: e.inclusive.calls,
            gpu_time_ms: e.inclusive.gpu_time_ms,
            kernels: e.kernels.len(),
            kernels_joined,
            launches_with_counters: c.map_or(0, |c| c.launches),
        }),
        coverage_pct: (!range && gpu > 0).then(|| 100.0 * covered as f64 / gpu as f64),
        covered_gpu_time_ns: covered,
        achieved_tflops: flop_rate.map(|r| r / 1e12),
        achieved_gbps: byte_rate.map(|r| r / 1e9),
        hfu_pct: of(flop_rate, peak.and_then(|p| p.flops)),
        mbu_pct: of(byte_rate, peak.and_then(|p| p.bytes_per_s)),
    }
}

fn nsys_only(key: &Key, p: &Pooled) -> JoinedRegion {
    JoinedRegion {
        path: regions::join(&key.0),
        path_names: key.0.clone(),
        domain: key.1.clone(),
        nsys: Some(p.side.clone()),
        ncu: None,
        coverage_pct: Some(0.0),
        covered_gpu_time_ns: 0,
        achieved_tflops: None,
        achieved_gbps: None,
        hfu_pct: None,
        mbu_pct: None,
    }
}

/// ncu's clock control, as its command lines or the configuration say.
fn clocks(ncu: &RegionReportFile, configured: Option<crate::config::schema::ClockControl>) -> String {
    let lines = &ncu.source.profiler_command_lines;
    let said = lines.iter().find_map(|l| {
        let mut words = l.split_whitespace();
        words.find(|w| w.starts_with("--clock-control")).map(|w| match w.split_once('=') {
            Some((_, v)) => v.to_string(),
            None => words.next().unwrap_or_default().to_string(),
        })
    });
    match said.as_deref() {
        Some("none") => "not locked (--clock-control none): boost clocks, as in production".into(),
        Some(v) => format!("locked by ncu (--clock-control {v})"),
        None if !lines.is_empty() => "locked to base by ncu (its default --clock-control base)".into(),
        None => match configured {
            Some(c) => {
                let c = serde_json::to_string(&c).unwrap_or_default();
                format!("as configured: pipeline.ncu.ncu_cli.clock_control={}", c.trim_matches('"'))
            }
            None => {
                "locked to base by ncu unless its command line said otherwise (its default --clock-control base)".into()
            }
        },
    }
}

/// The ncu counters of an nsys kernel: roofline.json's point under the same
/// name, else under the ncu name that joined it (region_join.json).
pub(crate) fn point_of<'a>(
    roofline: Option<&'a crate::aggregate::roofline::Roofline>,
    join: Option<&RegionJoin>,
    kernel: &str,
) -> Option<&'a crate::aggregate::roofline::Point> {
    let points = &roofline?.points;
    points.iter().find(|p| p.kernel_name == kernel).or_else(|| {
        let ncu = join?.kernels.iter().find(|k| k.nsys_name.as_deref() == Some(kernel))?;
        points.iter().find(|p| p.kernel_name == ncu.ncu_name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::aggregate::ncu::{Counters, RegionReportFile, ScopeReport, SelectionRecord, Source, Totals};
    use crate::aggregate::nsys::{RegionKernel, Unattributed};

    const GEMM_NSYS: &str = "void cutlass::gemm<(int)128, (bool)1>(cutlass::Params)";
    const GEMM_NCU: &str = "void gemm<128, 1>(Params)";

    fn nsys_region(names: &[&str], pid: i64, kernels: &[(&str, i64)]) -> Region {
        let gpu: i64 = kernels.iter().map(|k| k.1).sum();
        Region {
            path: regions::join(names),
            path_names: names.iter().map(|n| n.to_string()).collect(),
            name: names.last().unwrap().to_string(),
            parent: None,
            depth: names.len() - 1,
            domain: String::new(),
            style: crate::regions::RangeStyle::PushPop,
            process_id: pid,
            thread_id: pid,
            instances: 2,
            inclusive_ns: 5000,
            exclusive_ns: 5000,
            min_ns: 2500,
            median_ns: 2500,
            max_ns: 2500,
            kernel_count: kernels.len(),
            gpu_time_ns: gpu,
            kernel_count_exclusive: kernels.len(),
            gpu_time_exclusive_ns: gpu,
            gpu_span_ns: gpu,
            graph_kernel_count: 0,
            graph_gpu_time_ns: 0,
            kernels: kernels
                .iter()
                .map(|(n, ns)| RegionKernel { name: n.to_string(), calls: 1, gpu_time_ns: *ns })
                .collect(),
            rank: None,
        }
    }

    fn ncu_entry(names: &[&str], kernels: &[&str], counters: Option<Counters>) -> RegionEntry {
        RegionEntry {
            name: regions::join(names),
            path_names: names.iter().map(|n| n.to_string()).collect(),
            unattributed: false,
            parent: None,
            depth: names.len() - 1,
            domain: String::new(),
            device: Some("0".into()),
            process_id: None,
            dir: "r".into(),
            no_result: None,
            first_use: None,
            inclusive: Totals { calls: kernels.len() as u64, gpu_time_ms: 2.0, untimed_calls: 0 },
            counters,
            exclusive: None,
            metrics: Vec::new(),
            sections: Vec::new(),
            kernels: kernels
                .iter()
                .map(|k| crate::aggregate::ncu::KernelRecord {
                    kernel_name: k.to_string(),
                    device: "0".into(),
                    total_ms: 1.0,
                    calls: 1,
                    untimed_calls: 0,
                    mean_ms: 1.0,
                })
                .collect(),
            selection: SelectionRecord {
                include_patterns: Vec::new(),
                exclude_patterns: Vec::new(),
                kernels_selected: 0,
                kernels_excluded: 0,
            },
        }
    }

    fn inputs(
        nsys: Vec<Region>,
        ncu: Vec<RegionEntry>,
        attribution: regions::Attribution,
    ) -> (RegionsReport, RegionReportFile) {
        let scope = ScopeReport {
            scope: "aggregate".into(),
            generated_at: String::new(),
            config_fingerprint: String::new(),
            regions: ncu,
            totals: Totals::default(),
        };
        (
            RegionsReport {
                schema: String::new(),
                regions: nsys,
                unattributed: Unattributed::default(),
                notes: Vec::new(),
                normalized: None,
                processes: Vec::new(),
                module_groups: None,
            },
            RegionReportFile {
                schema: String::new(),
                generated_at: String::new(),
                config_fingerprint: String::new(),
                source: Source {
                    files: Vec::new(),
                    layout: "details".into(),
                    attribution,
                    results: 1,
                    ranges_not_selected: 0,
                    profiler_command_lines: vec!["ncu --clock-control none -o x app".into()],
                },
                note: None,
                sections: Vec::new(),
                metrics: Vec::new(),
                scopes: vec![scope],
            },
        )
    }

    /// Two processes ran `aten::linear › aten::matmul` (names that hold
    /// `::`); ncu profiled its GEMM (spelled its own way), not its
    /// elementwise kernel: coverage is the GEMM's nsys share, 60%. HFU and
    /// MBU come from the region's counters over the peak.
    #[test]
    fn coverage_per_region_is_the_nsys_share_of_the_kernels_ncu_profiled() {
        let op = ["aten::linear", "aten::matmul"];
        let kernels = [(GEMM_NSYS, 600), ("elementwise", 400)];
        let nsys = vec![
            nsys_region(&op, 1, &kernels),
            nsys_region(&op, 2, &kernels),
            // Four names that join to the same `::` spelling: another region.
            nsys_region(&["aten", "linear", "aten", "matmul"], 1, &[("other", 1000)]),
            nsys_region(&["decode"], 1, &[("elementwise", 50)]),
        ];
        let counters = Counters { launches: 1, gpu_time_ms: 2.0, flops: 1e12, dram_bytes: 1e9, tensor: None };
        let ncu = vec![ncu_entry(&op, &[GEMM_NCU], Some(counters))];
        let peak = Peak { flops: Some(1e15), bytes_per_s: Some(1e12), source: "test peak".into(), missing: None };
        let (nsys, ncu) = inputs(nsys, ncu, regions::Attribution::NvtxStack);
        let j = join(&nsys, &ncu, None, Some(&peak)).unwrap();
        let r = &j.regions[0];
        assert_eq!(r.path_names, op);
        assert_eq!(r.nsys.as_ref().map(|n| (n.instances, n.gpu_time_ns)), Some((4, 2000)));
        assert_eq!(r.covered_gpu_time_ns, 1200);
        assert_eq!(r.coverage_pct, Some(60.0));
        assert_eq!((r.hfu_pct, r.mbu_pct), (Some(50.0), Some(50.0)));
        assert_eq!(r.ncu.as_ref().map(|n| (n.kernels, n.kernels_joined)), Some((1, 1)));
        assert_eq!(j.kernels[0].nsys_name.as_deref(), Some(GEMM_NSYS));
        assert_eq!(j.kernels[0].matched, Matched::Normalized);
        // What only nsys saw is listed at 0% coverage.
        let rest: Vec<_> = j.regions[1..].iter().map(|r| (r.path_names.len(), r.coverage_pct)).collect();
        assert_eq!(rest, [(4, Some(0.0)), (1, Some(0.0))]);
        assert_eq!(j.clocks, "not locked (--clock-control none): boost clocks, as in production");
        assert_eq!(j.peak.as_deref(), Some("test peak"));
    }

    /// Range replay measures each range as one result: no kernel coverage.
    #[test]
    fn range_replay_has_no_kernel_coverage() {
        let nsys = vec![nsys_region(&["decode"], 1, &[(GEMM_NSYS, 600)])];
        let ncu = vec![ncu_entry(&["decode"], &[], None)];
        let (nsys, ncu) = inputs(nsys, ncu, regions::Attribution::Range);
        let j = join(&nsys, &ncu, None, None).unwrap();
        assert_eq!(j.ncu_results, "range");
        assert_eq!((j.regions[0].coverage_pct, j.regions[0].hfu_pct), (None, None));
        assert!(j.peak_missing.as_deref().unwrap().starts_with("HFU and MBU not computed"));
    }
}
