//! `roofline.json`: one point per kernel (name and device) from the ncu
//! counters of the run, re-read from the saved ncu CSVs:
//! - FLOPs, from counts when the launch has any: the tensor-path math ops
//!   (`sm__ops_path_tensor_*.sum`, NVIDIA's counters for FLOPs on tensor
//!   cores), `flop_count_{hp,sp,dp}.sum`, and the SASS counts
//!   `sm(sp)__sass_thread_inst_executed_op_{h,f,d}{fma,add,mul}_pred_on.sum`
//!   (an FMA is 2 FLOPs);
//! - else from the rates of the Speed Of Light roofline section (the raw page of
//!   a profile with `--set roofline` or `full`), as Nsight Compute's own chart
//!   computes them: `(2·ffma + fadd + fmul).per_cycle_elapsed ×
//!   smsp__cycles_elapsed.avg.per_second` (and the h/d variants) FLOP/s, times
//!   the launch's GPU time;
//! - bytes: `dram__bytes_read.sum` + `dram__bytes_write.sum`, else
//!   `dram__bytes.sum`, else `dram__bytes.sum.per_second` × GPU time;
//! - time: the launch's GPU time (`gpu__time_duration.sum` or the SOL Duration).
//!
//! `n/a` values count as absent, never as 0. A kernel without FLOP or DRAM
//! counters has no point; the file says how many launches had them.
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
    /// `sm__throughput.avg.pct_of_peak_sustained_elapsed` (or the SOL "Compute
    /// (SM) Throughput"), weighted by GPU time, when collected.
    pub sm_throughput_pct: Option<f64>,
    /// `dram__throughput.avg.pct_of_peak_sustained_elapsed` (`gpu__dram_throughput` in
    /// newer section files, or the SOL "DRAM Throughput"), likewise.
    pub dram_throughput_pct: Option<f64>,
}

/// A metric's finite value in its base unit (`n/a` and `nan` are absent).
fn num(m: &crate::parse::ncu_csv::Metric) -> Option<f64> {
    m.base().map(|(v, _)| v).filter(|v| v.is_finite())
}

/// FLOPs per unit of a counted metric: 2 for FMA instruction counts, 1 otherwise.
fn flop_weight(name: &str) -> Option<f64> {
    if name.starts_with("sm__ops_path_tensor_") && name.ends_with(".sum") && !name.contains("_sparsity_") {
        return Some(1.0);
    }
    if matches!(name, "flop_count_hp.sum" | "flop_count_sp.sum" | "flop_count_dp.sum") {
        return Some(1.0);
    }
    let op = name
        .strip_prefix("sm__sass_thread_inst_executed_op_")
        .or_else(|| name.strip_prefix("smsp__sass_thread_inst_executed_op_"))?
        .strip_suffix("_pred_on.sum")?;
    match op {
        "hfma" | "ffma" | "dfma" => Some(2.0),
        "hadd" | "fadd" | "dadd" | "hmul" | "fmul" | "dmul" => Some(1.0),
        _ => None,
    }
}

const DRAM_PCT: &str = "dram__throughput.avg.pct_of_peak_sustained_elapsed";
const RATE_PREFIX: &str = "smsp__sass_thread_inst_executed_op_";
const RATE_SUFFIX: &str = "_pred_on.sum.per_cycle_elapsed";

/// (FLOPs, names summed): counts first; the SOL roofline rates only when there are no counts.
fn flops_of(l: &Launch, ns: f64) -> Option<(f64, Vec<String>)> {
    let mut total = None::<f64>;
    let mut names = Vec::new();
    // One launch can carry a count under both sm__ and smsp__ prefixes: count each op once.
    let mut seen = std::collections::HashSet::new();
    for m in &l.metrics {
        let Some(w) = flop_weight(&m.name) else { continue };
        let key = m.name.trim_start_matches("smsp__").trim_start_matches("sm__").to_string();
        if let Some(v) = num(m).filter(|_| seen.insert(key)) {
            *total.get_or_insert(0.0) += w * v;
            names.push(m.name.clone());
        }
    }
    if total.is_some() {
        return total.map(|t| (t, names));
    }
    let hz = l.metric("smsp__cycles_elapsed.avg.per_second").and_then(num)?;
    let mut per_cycle = None::<f64>;
    for m in &l.metrics {
        let Some(op) = m.name.strip_prefix(RATE_PREFIX).and_then(|r| r.strip_suffix(RATE_SUFFIX)) else {
            continue;
        };
        let w = match op {
            "hfma" | "ffma" | "dfma" => 2.0,
            "hadd" | "fadd" | "dadd" | "hmul" | "fmul" | "dmul" => 1.0,
            _ => continue,
        };
        if let Some(v) = num(m) {
            *per_cycle.get_or_insert(0.0) += w * v;
            names.push(m.name.clone());
        }
    }
    let flop_per_s = per_cycle? * hz;
    names.push("smsp__cycles_elapsed.avg.per_second".into());
    Some((flop_per_s * ns * 1e-9, names))
}

fn bytes_of(l: &Launch, ns: f64) -> Option<f64> {
    let value = |name: &str| l.metric(name).and_then(num);
    let bytes = match (value("dram__bytes_read.sum"), value("dram__bytes_write.sum")) {
        (Some(r), Some(w)) => Some(r + w),
        _ => value("dram__bytes.sum").or_else(|| value("dram__bytes.sum.per_second").map(|b| b * ns * 1e-9)),
    };
    bytes.filter(|b| *b > 0.0)
}

/// A percentage by one of its metric names, else by its SOL label (details page).
fn pct(l: &Launch, names: &[&str], label: &str) -> Option<f64> {
    let m = names
        .iter()
        .find_map(|n| l.metric(n))
        .or_else(|| l.metrics.iter().find(|m| m.name == label && m.section.contains("Speed Of Light")))?;
    num(m)
}

#[derive(Default)]
struct Acc {
    calls: usize,
    ns: f64,
    flops: f64,
    bytes: f64,
    sm: (f64, f64),
    dram: (f64, f64),
}

impl Acc {
    fn weighted(sum: (f64, f64)) -> Option<f64> {
        (sum.1 > 0.0).then(|| sum.0 / sum.1)
    }
}

/// The roofline of the given ncu CSVs (the run's saved passes).
pub fn from_ncu(csvs: &[std::path::PathBuf]) -> Result<Roofline, Error> {
    let mut by_kernel: BTreeMap<(String, String), Acc> = BTreeMap::new();
    let (mut launches, mut counted) = (0, 0);
    let mut flop_metrics = std::collections::BTreeSet::new();
    for csv in csvs {
        let (_, rows) = ncu_csv::open_any(csv)?;
        for launch in rows {
            let l = launch?;
            launches += 1;
            let Some(ns) = l.duration_ns().filter(|v| v.is_finite() && *v > 0.0) else { continue };
            let (Some((flops, names)), Some(bytes)) = (flops_of(&l, ns), bytes_of(&l, ns)) else {
                continue;
            };
            counted += 1;
            flop_metrics.extend(names);
            let e = by_kernel.entry((l.kernel_name.clone(), l.device.clone().unwrap_or_default())).or_default();
            e.calls += 1;
            e.ns += ns;
            e.flops += flops;
            e.bytes += bytes;
            if let Some(v) = pct(&l, &["sm__throughput.avg.pct_of_peak_sustained_elapsed"], "Compute (SM) Throughput") {
                e.sm = (e.sm.0 + v * ns, e.sm.1 + ns);
            }
            if let Some(v) =
                pct(&l, &[DRAM_PCT, "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed"], "DRAM Throughput")
            {
                e.dram = (e.dram.0 + v * ns, e.dram.1 + ns);
            }
        }
    }
    let mut points: Vec<Point> = by_kernel
        .into_iter()
        .map(|((kernel_name, device), a)| Point {
            kernel_name,
            device,
            calls: a.calls,
            gpu_time_ns: a.ns,
            flops: a.flops,
            dram_bytes: a.bytes,
            arithmetic_intensity: a.flops / a.bytes,
            achieved_flop_per_s: if a.ns > 0.0 { a.flops / (a.ns * 1e-9) } else { 0.0 },
            sm_throughput_pct: Acc::weighted(a.sm),
            dram_throughput_pct: Acc::weighted(a.dram),
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

/// The run's roofline from its saved ncu passes: the raw page of each pass when
/// it has one (every collected metric, the SOL roofline rates included), else
/// the file the region reports read.
pub fn of_run(run: &RunDir) -> Result<Roofline, Error> {
    let Some(plan) = run.read_json::<crate::plan::NcuPlan>(crate::run_dir::NCU_PLAN) else {
        return from_ncu(&[]);
    };
    let csvs: Vec<_> = plan
        .passes
        .iter()
        .filter_map(|p| {
            let raw = run.join(&crate::run_dir::ncu_pass_file(&p.name, "raw.csv"));
            if raw.metadata().is_ok_and(|m| m.len() > 0) {
                Some(raw)
            } else {
                crate::ncu_analysis::csv_of(run, &p.name)
            }
        })
        .collect();
    from_ncu(&csvs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn fixture(name: &str) -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(name)
    }

    /// The raw page of a `--set full` profile (H800, ncu 2023.3, rendered by
    /// 2024.1) has no FLOP counts, only the SOL roofline rates. By hand, over the
    /// 4 launches of `distribution_elementwise_grid_stride_kernel`:
    /// Σ (2·ffma + fadd + fmul + 2·dfma + dadd + dmul).per_cycle_elapsed ×
    /// smsp__cycles_elapsed.avg.per_second × gpu__time_duration = 556,332,500.9
    /// FLOPs in 87,136 ns; DRAM read + write = 42,597,632 bytes. The fifth
    /// launch (flash_fwd_kernel) reads `nan` everywhere and has no point.
    #[test]
    fn sol_rates_of_a_raw_page_give_the_hand_computed_point() {
        let r = from_ncu(&[fixture("ncu/sglang.ncu2024.1.raw.csv")]).unwrap();
        assert_eq!((r.launches, r.launches_with_counters, r.points.len()), (5, 4, 1));
        assert!(r.flop_metrics.contains(&"smsp__cycles_elapsed.avg.per_second".to_string()));
        let p = &r.points[0];
        assert!(p.kernel_name.contains("distribution_elementwise_grid_stride_kernel"), "{}", p.kernel_name);
        assert_eq!((p.calls, p.gpu_time_ns, p.dram_bytes), (4, 87_136.0, 42_597_632.0));
        assert!((p.flops - 556_332_500.89).abs() < 1.0, "{}", p.flops);
        assert!((p.arithmetic_intensity - 13.06017).abs() < 1e-4, "{}", p.arithmetic_intensity);
        assert!((p.achieved_flop_per_s - 6.384646e12).abs() / 6.384646e12 < 1e-6, "{}", p.achieved_flop_per_s);
        assert!(p.sm_throughput_pct.is_some() && p.dram_throughput_pct.is_some());
    }

    /// Counts win over rates, an FMA is 2 FLOPs, and sm__/smsp__ copies of one count are summed once.
    #[test]
    fn flop_weights() {
        assert_eq!(flop_weight("sm__sass_thread_inst_executed_op_ffma_pred_on.sum"), Some(2.0));
        assert_eq!(flop_weight("smsp__sass_thread_inst_executed_op_hadd_pred_on.sum"), Some(1.0));
        assert_eq!(flop_weight("sm__ops_path_tensor_src_bf16_dst_fp32.sum"), Some(1.0));
        assert_eq!(flop_weight("sm__ops_path_tensor_src_bf16_dst_fp32_sparsity_on.sum"), None);
        assert_eq!(flop_weight("sm__sass_thread_inst_executed_op_ffma_pred_on.sum.peak_sustained"), None);
        assert_eq!(flop_weight("dram__bytes_read.sum"), None);
    }
}
