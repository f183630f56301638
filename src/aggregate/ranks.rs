//! ranks: one job's processes side by side (`ranks.json`).
//!
//! Input: per rank, the nsys regions of its processes and their kernels per
//! device. They come from one capture of several processes (a profiler
//! outside the launcher: each process is given its rank, by the CUDA device
//! its kernels ran on) or from one run directory per rank (`ranks/<rank>/`,
//! a profiler per rank; `llmperf merge`). Same-named ranges of different
//! ranks are parallel: a region's time is given per rank, never summed.
use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::nsys::{Region, RegionsReport};
use crate::kernel_names::is_comm;

pub(crate) const SCHEMA: &str = "llmperf.ranks/v1";

/// `ranks.json`.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RanksReport {
    pub(crate) schema: String,
    /// How each process got its rank: `cuda_device` (the device its kernels
    /// ran on, ranks numbered by device), `process` (no kernels: ranks
    /// numbered by process id), `environment (RANK)` (one capture of
    /// `profile --launcher torchrun|mpirun`: each process's rank from the
    /// variable its launcher set, recorded before it became the application)
    /// or `run_directory` (`ranks/<rank>/`, written by each rank from its
    /// RANK, OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID).
    pub(crate) rank_source: String,
    pub(crate) ranks: Vec<RankEntry>,
    /// Ranks expected but without data (failed, killed, or no capture).
    pub(crate) missing: Vec<MissingRank>,
    /// Ranks that ran the application without nsys (`pipeline.nsys.ranks`),
    /// with how their run ended.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) not_profiled: Vec<MissingRank>,
    pub(crate) regions: Vec<RankedRegion>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RankEntry {
    pub(crate) rank: u32,
    pub(crate) host: Option<String>,
    pub(crate) process_ids: Vec<i64>,
    pub(crate) devices: Vec<i64>,
    pub(crate) kernels: usize,
    pub(crate) gpu_time_ns: i64,
    /// Of `gpu_time_ns`: communication kernels (names starting `nccl`).
    pub(crate) comm_gpu_time_ns: i64,
    /// Time inside the rank's outermost ranges (its depth-0 push/pop regions:
    /// NVTX ranges, or a torch trace's annotations and operators).
    pub(crate) wall_ns: i64,
    /// With one run directory per rank: its run's status (`ok`, `failed`,
    /// `interrupted`), and what failed, with its exit status.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) status: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) failure: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct MissingRank {
    pub(crate) rank: u32,
    /// Why: its exit status, or that it wrote no capture.
    pub(crate) reason: String,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RankedRegion {
    /// `A::A1`, as selectors spell it.
    pub(crate) path: String,
    pub(crate) path_names: Vec<String>,
    pub(crate) domain: String,
    /// Inclusive wall time per rank (every thread of the rank's processes).
    pub(crate) per_rank: BTreeMap<u32, i64>,
    /// Communication and compute kernel GPU time per rank.
    pub(crate) comm_ns: BTreeMap<u32, i64>,
    pub(crate) compute_ns: BTreeMap<u32, i64>,
    pub(crate) min_ns: i64,
    pub(crate) median_ns: i64,
    pub(crate) max_ns: i64,
    /// (max − min) / median, in percent: how far the slowest rank trails.
    pub(crate) skew_pct: Option<f64>,
    /// The rank with the most time here, when ranks differ.
    pub(crate) straggler_rank: Option<u32>,
}

/// One rank's data.
pub(crate) struct RankInput<'a> {
    pub(crate) rank: u32,
    pub(crate) host: Option<String>,
    pub(crate) regions: &'a RegionsReport,
    /// Only these processes of `regions` (None: all).
    pub(crate) processes: Option<Vec<i64>>,
    /// The run's status and failure, with one run directory per rank.
    pub(crate) status: Option<String>,
    pub(crate) failure: Option<String>,
}

fn mine(input: &RankInput, pid: i64) -> bool {
    input.processes.as_ref().is_none_or(|p| p.contains(&pid))
}

/// The cross-rank report of `inputs` (one per rank).
pub(crate) fn build(inputs: &[RankInput], rank_source: &str, missing: Vec<MissingRank>) -> RanksReport {
    let mut b = Builder::default();
    for input in inputs {
        b.add(input);
    }
    b.finish(rank_source, missing)
}

/// The report built one rank at a time: a rank's regions can be dropped
/// once added, so merging many ranks holds only the report itself.
#[derive(Default)]
pub(crate) struct Builder {
    ranks: Vec<RankEntry>,
    regions: BTreeMap<(Vec<String>, String), RankedRegion>,
}

impl Builder {
    pub(crate) fn add(&mut self, input: &RankInput) {
        let r = input.regions;
        let procs: Vec<_> = r.processes.iter().filter(|p| mine(input, p.process_id)).collect();
        let mut devices: Vec<i64> = procs.iter().flat_map(|p| p.devices.iter().filter_map(|d| d.device)).collect();
        devices.sort_unstable();
        devices.dedup();
        let mut process_ids: Vec<i64> = procs.iter().map(|p| p.process_id).collect();
        let own: Vec<&Region> = r.regions.iter().filter(|x| mine(input, x.process_id)).collect();
        process_ids.extend(own.iter().map(|x| x.process_id));
        process_ids.sort_unstable();
        process_ids.dedup();
        let devs = procs.iter().flat_map(|p| &p.devices);
        let (kernels, gpu, comm) = devs.fold((0, 0i64, 0i64), |(n, ns, c), d| {
            (n + d.kernel_count, ns.saturating_add(d.gpu_time_ns), c.saturating_add(d.comm_gpu_time_ns))
        });
        let wall = own
            .iter()
            .filter(|x| x.depth == 0 && x.style == crate::regions::RangeStyle::PushPop)
            .map(|x| x.inclusive_ns)
            .sum();
        self.ranks.push(RankEntry {
            rank: input.rank,
            host: input.host.clone(),
            process_ids,
            devices,
            kernels,
            gpu_time_ns: gpu,
            comm_gpu_time_ns: comm,
            wall_ns: wall,
            status: input.status.clone(),
            failure: input.failure.clone(),
        });
        for x in own {
            let e = self.regions.entry((x.names(), x.domain.clone())).or_insert_with(|| RankedRegion {
                path: x.path.clone(),
                path_names: x.names(),
                domain: x.domain.clone(),
                per_rank: BTreeMap::new(),
                comm_ns: BTreeMap::new(),
                compute_ns: BTreeMap::new(),
                min_ns: 0,
                median_ns: 0,
                max_ns: 0,
                skew_pct: None,
                straggler_rank: None,
            });
            *e.per_rank.entry(input.rank).or_default() += x.inclusive_ns;
            let comm: i64 = x.kernels.iter().filter(|k| is_comm(&k.name)).map(|k| k.gpu_time_ns).sum();
            *e.comm_ns.entry(input.rank).or_default() += comm;
            *e.compute_ns.entry(input.rank).or_default() += x.gpu_time_ns - comm;
        }
    }

    pub(crate) fn finish(mut self, rank_source: &str, missing: Vec<MissingRank>) -> RanksReport {
        self.ranks.sort_by_key(|r| r.rank);
        let regions = self.regions.into_values().map(spread).collect();
        RanksReport {
            schema: SCHEMA.into(),
            rank_source: rank_source.into(),
            ranks: self.ranks,
            missing,
            not_profiled: Vec::new(),
            regions,
        }
    }
}

/// Minimum, median, maximum, skew and straggler over the ranks that ran the region.
fn spread(mut r: RankedRegion) -> RankedRegion {
    let mut v: Vec<i64> = r.per_rank.values().copied().collect();
    v.sort_unstable();
    let n = v.len();
    if n == 0 {
        return r;
    }
    let median = if n % 2 == 1 { v[n / 2] } else { ((i128::from(v[n / 2 - 1]) + i128::from(v[n / 2])) / 2) as i64 };
    (r.min_ns, r.median_ns, r.max_ns) = (v[0], median, v[n - 1]);
    r.skew_pct = (n > 1 && median > 0).then(|| 100.0 * (v[n - 1] - v[0]) as f64 / median as f64);
    r.straggler_rank = (n > 1 && v[n - 1] > v[0])
        .then(|| r.per_rank.iter().max_by_key(|(rank, ns)| (**ns, std::cmp::Reverse(**rank))).map(|(rank, _)| *rank))
        .flatten();
    r
}

/// Ranks of one capture's processes, by the CUDA device their kernels ran on
/// (the device with most of their GPU time), numbered in device order; with
/// no kernels, by process id. None when it holds one process or none.
pub(crate) fn ranks_of_processes(r: &RegionsReport) -> Option<(Vec<(u32, i64)>, &'static str)> {
    let mut pids: Vec<i64> = r.processes.iter().map(|p| p.process_id).collect();
    pids.extend(r.regions.iter().map(|x| x.process_id));
    pids.sort_unstable();
    pids.dedup();
    if pids.len() < 2 {
        return None;
    }
    let device_of = |pid: i64| {
        let p = r.processes.iter().find(|p| p.process_id == pid)?;
        p.devices.iter().max_by_key(|d| d.gpu_time_ns).and_then(|d| d.device)
    };
    let with_device: Vec<(i64, i64)> = pids.iter().filter_map(|&p| device_of(p).map(|d| (d, p))).collect();
    let mut devices: Vec<i64> = with_device.iter().map(|x| x.0).collect();
    devices.sort_unstable();
    devices.dedup();
    if with_device.len() == pids.len() && devices.len() == pids.len() {
        let mut by_device = with_device;
        by_device.sort_unstable();
        return Some((by_device.iter().enumerate().map(|(i, &(_, p))| (i as u32, p)).collect(), "cuda_device"));
    }
    Some((pids.iter().enumerate().map(|(i, &p)| (i as u32, p)).collect(), "process"))
}
