//! `roofline.json`: one point per kernel (name and device) from the ncu
//! counters of the run, re-read from the saved ncu CSVs:
//! - FLOPs: the tensor-path math ops (`sm__ops_path_tensor_*.sum`, NVIDIA's
//!   counters for FLOPs on tensor cores) plus `flop_count_{hp,sp,dp}.sum`;
//!   `n/a` values count as absent, never as 0.
//! - bytes: `dram__bytes_read.sum` + `dram__bytes_write.sum`, else `dram__bytes.sum`.
//! - time: the launch's GPU time (`gpu__time_duration.sum` or the SOL Duration).
//!
//! A kernel without FLOP or DRAM counters has no point; the file says how many.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::error::Error;
use crate::parse::ncu_csv::{self, Launch};
use crate::run_dir::RunDir;

pub const SCHEMA: &str = "llmperf.roofline/v1";

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Roofline {
    pub schema: String,
    /// `ncu` when the points come from ncu counters, `none` otherwise.
    pub source: String,
    /// Launches read, and how many of them had FLOP and DRAM counters.
    pub launches: usize,
    pub launches_with_counters: usize,
    /// The counters summed into `flops`, as found in the files.
    pub flop_metrics: Vec<String>,
    pub points: Vec<Point>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Point {
    pub kernel_name: String,
    pub device: String,
    pub calls: usize,
    pub gpu_time_ns: f64,
    pub flops: f64,
    pub dram_bytes: f64,
    /// FLOP per DRAM byte.
    pub arithmetic_intensity: f64,
    /// FLOP per second of GPU time (replayed by ncu: clocks locked).
    pub achieved_flop_per_s: f64,
}

fn is_flop_metric(name: &str) -> bool {
    (name.starts_with("sm__ops_path_tensor_") && name.ends_with(".sum") && !name.contains("_sparsity_"))
        || matches!(name, "flop_count_hp.sum" | "flop_count_sp.sum" | "flop_count_dp.sum")
}

/// (flops, bytes, names of the FLOP counters) of one launch, when it has both.
fn counters(l: &Launch) -> Option<(f64, f64, Vec<String>)> {
    let value = |name: &str| l.metric(name).and_then(|m| m.base()).map(|(v, _)| v);
    let mut flops = None::<f64>;
    let mut names = Vec::new();
    for m in l.metrics.iter().filter(|m| is_flop_metric(&m.name)) {
        if let Some((v, _)) = m.base() {
            *flops.get_or_insert(0.0) += v;
            names.push(m.name.clone());
        }
    }
    let bytes = match (value("dram__bytes_read.sum"), value("dram__bytes_write.sum")) {
        (Some(r), Some(w)) => Some(r + w),
        _ => value("dram__bytes.sum"),
    };
    Some((flops?, bytes.filter(|b| *b > 0.0)?, names))
}

/// The roofline of the given ncu CSVs (the run's saved passes).
pub fn from_ncu(csvs: &[std::path::PathBuf]) -> Result<Roofline, Error> {
    let mut by_kernel: BTreeMap<(String, String), (usize, f64, f64, f64)> = BTreeMap::new();
    let (mut launches, mut counted) = (0, 0);
    let mut flop_metrics = std::collections::BTreeSet::new();
    for csv in csvs {
        let (_, rows) = ncu_csv::open_any(csv)?;
        for launch in rows {
            let l = launch?;
            launches += 1;
            let (Some((flops, bytes, names)), Some(ns)) = (counters(&l), l.duration_ns()) else {
                continue;
            };
            counted += 1;
            flop_metrics.extend(names);
            let key = (l.kernel_name.clone(), l.device.clone().unwrap_or_default());
            let e = by_kernel.entry(key).or_default();
            *e = (e.0 + 1, e.1 + ns, e.2 + flops, e.3 + bytes);
        }
    }
    let mut points: Vec<Point> = by_kernel
        .into_iter()
        .map(|((kernel_name, device), (calls, ns, flops, bytes))| Point {
            kernel_name,
            device,
            calls,
            gpu_time_ns: ns,
            flops,
            dram_bytes: bytes,
            arithmetic_intensity: flops / bytes,
            achieved_flop_per_s: if ns > 0.0 { flops / (ns * 1e-9) } else { 0.0 },
        })
        .collect();
    points.sort_by(|a, b| b.gpu_time_ns.total_cmp(&a.gpu_time_ns).then_with(|| a.kernel_name.cmp(&b.kernel_name)));
    Ok(Roofline {
        schema: SCHEMA.into(),
        source: if launches > 0 { "ncu" } else { "none" }.into(),
        launches,
        launches_with_counters: counted,
        flop_metrics: flop_metrics.into_iter().collect(),
        points,
    })
}

/// The run's roofline from its saved ncu passes (empty when there are none).
pub fn of_run(run: &RunDir) -> Result<Roofline, Error> {
    let csvs: Vec<_> = crate::ncu_stage::saved_inputs(run).into_iter().map(|i| i.csv).collect();
    from_ncu(&csvs)
}
