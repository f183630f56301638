//! nsys and ncu joined per region (region_join.json) on the real DeepSeek-OCR
//! files (RTX 5090; the shared corpus, llm-perf-opt), where the two tools
//! spell every kernel differently: nsys's kernel summary of the whole run
//! (`void flash::flash_fwd_splitkv_kernel<…(int)128…(bool)0…>(flash::…)`) and
//! ncu's details of 20 of its kernels (`void flash_fwd_splitkv_kernel<…128…0…>(…)`).
use crate::common::*;
use std::collections::HashMap;
use std::path::Path;

const KERNEL_SUMMARY: &str = "llm-perf-opt/reports/20251107-dsocr/nsys/all-stage/nsys/summary_cuda_gpu_kern_sum.csv";

/// The nsys kernel summary's rows: name → (instances, total ns).
type Rows = HashMap<String, (u64, i64)>;

fn nsys_rows(csv: &Path) -> Rows {
    let mut r = csv::Reader::from_path(csv).unwrap();
    let h = r.headers().unwrap().clone();
    let col = |name: &str| h.iter().position(|c| c == name).unwrap();
    let (name, n, total) = (col("Name"), col("Instances"), col("Total Time (ns)"));
    r.records()
        .map(|rec| {
            let rec = rec.unwrap();
            (rec[name].to_string(), (rec[n].parse().unwrap(), rec[total].parse().unwrap()))
        })
        .collect()
}

/// A run directory with both imports; its region_join.json and the nsys rows.
fn imported(test: &str, root: &Path) -> Option<(serde_json::Value, Rows)> {
    let summary = corpus_copy(test, KERNEL_SUMMARY, root)?;
    let ncu = dsocr_ncu(test, root)?;
    let run = root.join("run");
    llmperf().args(["import", "nsys"]).arg(&summary).arg("-o").arg(&run).assert().success();
    llmperf().args(["import", "ncu"]).args(&ncu).arg("-o").arg(&run).assert().success();
    Some((json(&run.join("region_join.json")), nsys_rows(&summary)))
}

/// Every one of ncu's 20 kernel names finds its nsys name through the
/// documented normalization, each a different one; the two-spelling pairs
/// the issue names are among them; the coverage of the one region (every
/// kernel is outside NVTX ranges here) is the joined kernels' share of the
/// nsys GPU time, summed from the CSV itself.
#[test]
fn deepseek_ocr_two_spellings_join_and_coverage_is_their_nsys_share() {
    let root = tempfile::tempdir().unwrap();
    let Some((join, rows)) = imported(&this_test!(), root.path()) else { return };
    let kernels = join["kernels"].as_array().unwrap();
    assert_eq!(kernels.len(), 20);
    let mut joined: Vec<&str> = Vec::new();
    for k in kernels {
        assert_eq!(k["matched"], "normalized", "{}", k["ncu_name"]);
        let nsys = k["nsys_name"].as_str().unwrap();
        assert!(rows.contains_key(nsys), "{nsys} is a row of the nsys summary");
        joined.push(nsys);
    }
    let pair = |ncu: &str| kernels.iter().find(|k| k["ncu_name"] == ncu).and_then(|k| k["nsys_name"].as_str());
    // The flash-attention split-KV kernel of the ncu bundle (kernel 0013), and
    // of the two nsys rows that differ only in a template flag, the right one.
    let flash_ncu = "void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, 0, 0, bfloat16_t, Flash_kernel_traits<128, 64, 128, 4, bfloat16_t>>, 0, 0, 0, 0, 1, 0, 1, 0>(Flash_fwd_params)";
    let flash_nsys = "void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<(int)128, (int)64, (int)128, (int)4, (bool)0, (bool)0, cutlass::bfloat16_t, Flash_kernel_traits<(int)128, (int)64, (int)128, (int)4, cutlass::bfloat16_t>>, (bool)0, (bool)0, (bool)0, (bool)0, (bool)1, (bool)0, (bool)1, (bool)0>(flash::Flash_fwd_params)";
    assert_eq!(pair(flash_ncu), Some(flash_nsys));
    assert_eq!(rows[flash_nsys], (15360, 85089296));
    // The cuBLAS GEMV the issue quotes (nsys `internal::gemvx::kernel<…(bool)0…>`).
    let gemv =
        kernels.iter().find(|k| k["ncu_name"].as_str().unwrap().starts_with("enable_if<!T7, void>::type kernel<"));
    let gemv_nsys = gemv.and_then(|k| k["nsys_name"].as_str()).unwrap();
    assert!(gemv_nsys.starts_with("std::enable_if<!T7, void>::type internal::gemvx::kernel<int, int, __nv_bfloat16"));
    let mut distinct = joined.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 20, "no two ncu kernels joined the same nsys kernel");
    // Coverage: the oracle sums the CSV's own totals.
    let all: i64 = rows.values().map(|r| r.1).sum();
    let covered: i64 = distinct.iter().map(|n| rows[*n].1).sum();
    let regions = join["regions"].as_array().unwrap();
    assert_eq!(regions.len(), 1);
    let r = &regions[0];
    assert_eq!(r["path"], "(unattributed)");
    assert_eq!(r["nsys"]["gpu_time_ns"], all);
    assert_eq!(r["covered_gpu_time_ns"], covered);
    let pct = r["coverage_pct"].as_f64().unwrap();
    assert!((pct - 100.0 * covered as f64 / all as f64).abs() < 1e-9, "{pct}");
    assert!(pct > 50.0 && pct < 100.0, "{pct}");
    assert_eq!(r["ncu"]["kernels_joined"], 20);
}

/// Deep mode's ncu filter is built from nsys's names; ncu matches it against
/// its own spelling (`--kernel-name-base demangled`). Built from the top 10
/// nsys kernels, it selects exactly the ncu spellings of those kernels among
/// the 20 that ncu profiled.
#[test]
fn deep_mode_filter_from_nsys_names_selects_ncu_spellings_of_exactly_those_kernels() {
    let root = tempfile::tempdir().unwrap();
    let Some((join, rows)) = imported(&this_test!(), root.path()) else { return };
    let mut ranked: Vec<(&String, &(u64, i64))> = rows.iter().collect();
    ranked.sort_by(|a, b| b.1 .1.cmp(&a.1 .1).then_with(|| a.0.cmp(b.0)));
    let top: Vec<String> = ranked.iter().take(10).map(|(n, _)| n.to_string()).collect();
    let cfg = llmperf::config::load(&llmperf::config::LoadOptions::default()).unwrap().config;
    let plan = llmperf::plan::ncu::plan(&cfg.pipeline.ncu.ncu_cli, cfg.runner.run.mode, Some(&top), None);
    let filter = plan.kernel_filter.expect("deep mode narrows to the top kernels");
    let re = regex::Regex::new(filter.expression.strip_prefix("regex:").unwrap()).unwrap();
    let (mut selected, mut others) = (0, 0);
    for k in join["kernels"].as_array().unwrap() {
        let (ncu, nsys) = (k["ncu_name"].as_str().unwrap(), k["nsys_name"].as_str().unwrap());
        let wanted = top.iter().any(|t| t == nsys);
        assert_eq!(re.is_match(ncu), wanted, "{ncu}");
        assert!(re.is_match(nsys) == wanted, "{nsys}");
        if wanted {
            selected += 1;
        } else {
            others += 1;
        }
    }
    assert!(selected >= 5 && others >= 5, "{selected} of the top 10 among ncu's kernels, {others} others");
}

/// HFU and MBU of the one region from its ncu counters, over the peaks the
/// import was given: the counters are the roofline's (every point's FLOPs
/// and bytes, every launch with counters), over their replayed GPU time.
#[test]
fn hfu_and_mbu_come_from_the_regions_counters_over_the_given_peaks() {
    let root = tempfile::tempdir().unwrap();
    let Some(summary) = corpus_copy(&this_test!(), KERNEL_SUMMARY, root.path()) else { return };
    let Some(ncu) = dsocr_ncu(&this_test!(), root.path()) else { return };
    let run = root.path().join("run");
    llmperf().args(["import", "nsys"]).arg(&summary).arg("-o").arg(&run).assert().success();
    llmperf()
        .args(["import", "ncu"])
        .args(&ncu)
        .args(["hardware.peak_tflops=100", "hardware.peak_gbps=1000", "-o"])
        .arg(&run)
        .assert()
        .success();
    let join = json(&run.join("region_join.json"));
    assert_eq!(join["peak"], "hardware.peak_tflops / hardware.peak_gbps (user override)");
    let roofline = json(&run.join("roofline.json"));
    // The region's counters are the launches with FLOPs and bytes: the points with both.
    let points: Vec<_> = roofline["points"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|p| p["flops"].is_f64() && p["dram_bytes"].is_f64())
        .collect();
    let sum = |key: &str| points.iter().map(|p| p[key].as_f64().unwrap()).sum::<f64>();
    let (flops, bytes, ns) = (sum("flops"), sum("dram_bytes"), sum("gpu_time_ns"));
    let r = &join["regions"][0];
    assert_eq!(r["ncu"]["launches_with_counters"], roofline["launches_with_counters"]);
    let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1.0);
    let hfu = flops / (ns * 1e-9) / 100e12 * 100.0;
    let mbu = bytes / (ns * 1e-9) / 1000e9 * 100.0;
    assert!(close(r["hfu_pct"].as_f64().unwrap(), hfu), "{} vs {hfu}", r["hfu_pct"]);
    assert!(close(r["mbu_pct"].as_f64().unwrap(), mbu), "{} vs {mbu}", r["mbu_pct"]);
    assert!(hfu > 1.0 && mbu > 1.0, "{hfu} {mbu}");
}
