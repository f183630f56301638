//! `llmperf report RUN_DIR` rebuilds every report from the run's artifacts
//! alone: on a copy of a run directory it gives the same bytes, timestamps aside.
mod common;
use common::*;
use std::path::Path;

const KERNEL_0013: &str =
    "llm-perf-opt/reports/20251107-dsocr/ncu-v2/kernel_0013_178ff748c21ea29399b8568af3cd1f02/ncu.details.csv";

#[test]
fn report_reproduces_an_imported_ncu_run() {
    let root = tempfile::tempdir().unwrap();
    for (i, (rel, extra)) in [
        ("real/derived/nsight-training/manual_nvtx.ncu2022.3.details.csv", vec![]),
        (KERNEL_0013, vec!["--range", "decode"]),
    ]
    .into_iter()
    .enumerate()
    {
        let Some(file) = corpus_copy!(rel, root.path()) else { return };
        let out = root.path().join(format!("run{i}"));
        llmperf().args(["import", "ncu"]).arg(file).arg("-o").arg(&out).args(&extra).assert().success();
        assert!(out.join("stakeholder_summary.md").is_file() && out.join("report.md").is_file());
        assert_report_reproduces(&out);
    }
}

#[test]
fn report_reproduces_an_imported_nsys_capture_with_its_kernels() {
    let root = tempfile::tempdir().unwrap();
    let Some(out) = import_memfusion(&this_test!(), root.path()) else { return };
    let kernels = json(&out.join("kernels.json"));
    assert_eq!(kernels["source"], "nsys");
    let top = json(&out.join("nsys/top_kernels.json"));
    assert_eq!(kernels["kernels"][0]["kernel_name"], top[0]["name"]);
    // The capture's machine, from the export (an import has no env.json of its own).
    let capture = json(&out.join("nsys/capture.json"));
    let gpus = capture["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 4);
    assert!(gpus.iter().all(|g| g["name"] == "NVIDIA GeForce RTX 3090" && g["sm_count"] == 82));
    assert_eq!((capture["driver_version"].as_str(), capture["cpu_cores"].as_i64()), (Some("530.30.02"), Some(48)));
    assert_eq!(capture["exported_by"], "2023.1.2.43");
    let summary = std::fs::read_to_string(out.join("stakeholder_summary.md")).unwrap();
    assert!(summary.contains("| GPU | 0: NVIDIA GeForce RTX 3090 (82 SMs, 23.7 GiB), 1: "), "{summary}");
    assert!(summary.contains("| driver / CUDA | 530.30.02 / – |"), "{summary}");
    assert!(
        summary.contains("## Top Kernels")
            && summary.contains(&format!("{:.1}%", top[0]["share_pct"].as_f64().unwrap()))
    );
    assert_report_reproduces(&out);
}

/// The kernel totals of an `nsys stats` kernel summary equal those llmperf
/// computes from the SQLite export of the same report (the summary has one
/// row per kernel name, grid and block; llmperf sums them by name).
#[test]
fn kernel_summary_csv_import_equals_the_sqlite_import() {
    let root = tempfile::tempdir().unwrap();
    let (Some(summary), Some(db)) = (
        corpus_copy!("real/derived/abacus/report1.nsys2022.4_gpukernsum.csv", root.path()),
        corpus_copy!("real/derived/abacus/report1.nsys2022.4.sqlite", root.path()),
    ) else {
        return;
    };
    let import = |file: &Path, out: &str| {
        let out = root.path().join(out);
        llmperf()
            .args(["import", "nsys"])
            .arg(file)
            .arg("-o")
            .arg(&out)
            .args(["pipeline.nsys.executable=/nonexistent", "runner.run.top_n_kernels=0"])
            .assert()
            .success();
        out
    };
    let from_csv = import(&summary, "csv");
    let from_db = import(&db, "db");
    let key = |dir: &Path| -> Vec<(String, u64, u64, u64, u64)> {
        json(&dir.join("nsys/top_kernels.json"))
            .as_array()
            .unwrap()
            .iter()
            .map(|k| {
                let n = |f: &str| k[f].as_u64().unwrap();
                (k["name"].as_str().unwrap().to_string(), n("calls"), n("total_ns"), n("min_ns"), n("max_ns"))
            })
            .collect()
    };
    let (csv, db) = (key(&from_csv), key(&from_db));
    // An older export (nsys 2022.4, from a .qdrep of 2020): fewer GPU columns filled.
    let capture = json(&from_db.join("nsys/capture.json"));
    assert_eq!(capture["gpus"][0]["name"], "TITAN RTX");
    assert_eq!(capture["gpus"][0]["sm_count"], serde_json::Value::Null);
    assert_eq!(capture["driver_version"], "4505105");
    assert_eq!(csv.len(), 53);
    assert_eq!(csv, db);
    let regions = json(&from_csv.join("nsys/regions.json"));
    assert_eq!(regions["regions"].as_array().unwrap().len(), 0);
    assert_eq!(regions["unattributed"]["kernel_count"].as_u64(), Some(csv.iter().map(|k| k.1).sum()));
    assert!(regions["notes"][0].as_str().unwrap().contains("kernel summary without NVTX ranges"));
    assert_report_reproduces(&from_csv);
}

/// The roofline point of the DeepSeek-OCR decode attention kernel (RTX 5090),
/// by hand from its ncu details: 335,544,320 tensor ops (bf16 → fp32), DRAM
/// 4.74 MB read + 0 written, 10.34 µs: 70.79 FLOP/byte and 32.45 TFLOP/s.
/// report.html draws that point with those numbers.
#[test]
fn roofline_point_from_ncu_counters_by_hand() {
    let root = tempfile::tempdir().unwrap();
    let out = root.path().join("run");
    let Some(csv) = corpus_copy!(KERNEL_0013, root.path()) else { return };
    llmperf().args(["import", "ncu"]).arg(&csv).arg("-o").arg(&out).assert().success();
    let r = json(&out.join("roofline.json"));
    assert_eq!((r["launches"].as_u64(), r["launches_with_counters"].as_u64()), (Some(1), Some(1)));
    assert_eq!(r["flop_metrics"], serde_json::json!(["sm__ops_path_tensor_src_bf16_dst_fp32.sum"]));
    let p = &r["points"][0];
    assert!(p["kernel_name"].as_str().unwrap().contains("flash_fwd_splitkv_kernel"));
    assert_eq!(p["flops"].as_f64(), Some(335_544_320.0));
    assert_eq!(p["dram_bytes"].as_f64(), Some(4_740_000.0));
    assert_eq!(p["gpu_time_ns"].as_f64(), Some(10_340.0));
    let ai = p["arithmetic_intensity"].as_f64().unwrap();
    let fps = p["achieved_flop_per_s"].as_f64().unwrap();
    assert!((ai - 335_544_320.0 / 4_740_000.0).abs() < 1e-9 && (ai - 70.79).abs() < 0.01, "{ai}");
    assert!((fps - 3.2451e13).abs() / 3.2451e13 < 1e-4, "{fps}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let circle = html.lines().find(|l| l.contains("<circle data-kernel=")).expect("a kernel point in the roofline");
    assert!(circle.contains(&format!("data-intensity=\"{ai:.6e}\"")), "{circle}");
    assert!(circle.contains(&format!("data-flops=\"{fps:.6e}\"")), "{circle}");
    assert!(circle.contains("flash_fwd_splitkv_kernel&lt;Flash_fwd_kernel_traits&lt;128, 64, 128, 4, 0, 0, bfloat16_t"));
    assert!(!html.contains("data-peak-flops"), "no roofs without a peak");

    // The user's peaks give the roofs (an import has no GPU name to look up).
    let with_peaks = root.path().join("peaks");
    llmperf()
        .args(["import", "ncu"])
        .arg(&csv)
        .arg("-o")
        .arg(&with_peaks)
        .args(["hardware.peak_tflops=209.5", "hardware.peak_gbps=1792"])
        .assert()
        .success();
    let html = std::fs::read_to_string(with_peaks.join("report.html")).unwrap();
    assert!(html.contains("data-peak-flops=\"2.095000e14\" data-peak-bytes=\"1.792000e12\""), "{html}");
}

/// Kernel tables show the export's short name where it has one, and the full
/// demangled name with `report.kernel_names=full`; kernels.json keeps both.
#[test]
fn kernel_tables_show_short_names_and_full_ones_on_demand() {
    let root = tempfile::tempdir().unwrap();
    let Some(short) = import_memfusion(&this_test!(), root.path()) else { return };
    let kernels = json(&short.join("kernels.json"));
    let row =
        kernels["kernels"].as_array().unwrap().iter().find(|k| k["short_name"] == "copyVectorizedKernel").unwrap();
    let full = row["kernel_name"].as_str().unwrap();
    assert!(full.starts_with("void genericReformat::copyVectorizedKernel<double, __half"), "{full}");
    let md = std::fs::read_to_string(short.join("kernels.md")).unwrap();
    assert!(md.contains("| `copyVectorizedKernel` | all | 0.020 | 12 |"), "{md}");
    assert!(!md.contains("genericReformat::"), "{md}");
    let db = root.path().join("report1.sqlite");
    let long = root.path().join("full");
    import_nsys(&db, &long, &["report.kernel_names=full"]);
    let md = std::fs::read_to_string(long.join("kernels.md")).unwrap();
    assert!(
        md.contains("| `void genericReformat::copyVectorizedKernel<double, __half, …` | all | 0.020 | 12 |"),
        "{md}"
    );
    assert_eq!(json(&long.join("kernels.json"))["full_names"], true);
}
