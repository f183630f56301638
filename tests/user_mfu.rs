//! MFU for a user's command (issue 16): `workload.flops` gives the FLOPs of
//! one instance per region; nsys gives its wall time; the peak comes from
//! `hardware.*` or the GPU table, by the GPU the run knows of.
mod common;

use common::{json, llmperf, nsys_lock, run_dir};

/// The MFU cell of a region's row in stakeholder_summary.md.
fn mfu_cell(summary: &str, region: &str) -> String {
    let row =
        summary.lines().find(|l| l.starts_with(&format!("| `{region}` |"))).unwrap_or_else(|| panic!("{summary}"));
    row.trim_end_matches('|').rsplit('|').next().unwrap().trim().to_string()
}

/// The expected MFU of a region from regions.json: FLOPs / (wall / instances) / peak.
fn expected(regions: &serde_json::Value, path: &str, domain: &str, flops: f64, peak: f64) -> String {
    let r = regions["regions"].as_array().unwrap().iter().find(|r| r["path"] == path && r["domain"] == domain).unwrap();
    let mean_s = r["inclusive_ns"].as_f64().unwrap() / r["instances"].as_f64().unwrap() / 1e9;
    format!("{:.2}%", 100.0 * flops / mean_s / peak)
}

#[test]
fn a_user_command_with_workload_flops_gets_mfu_per_region() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    // A user's command that emits NVTX ranges: the built-in regions demo, run as `-- CMD`.
    let me = env!("CARGO_BIN_EXE_llmperf");
    let out = llmperf()
        .args(["profile", "--no-ncu", "-o"])
        .arg(root.path())
        .args([
            r#"workload.flops={A: 4.2e7, "A::A1": 4.2e6, B: 1.4e7, nope: 1}"#,
            "hardware.peak_tflops=0.2",
            common::NSYS_HANG[0],
            common::NSYS_HANG[1],
            "--",
            me,
            "workload",
            "--model",
            "nvtx_regions",
            "infer.iters=10",
            "-o",
        ])
        .arg(root.path().join("inner"))
        .timeout(std::time::Duration::from_secs(600))
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let dir = run_dir(&out);
    assert!(!dir.join("workload/timings.json").exists(), "a user command has no workload timings");
    let summary = std::fs::read_to_string(dir.join("stakeholder_summary.md")).unwrap();
    let regions = json(&dir.join("nsys/regions.json"));
    assert!(summary.contains("Peak: 200.000 G FLOP/s, from hardware.peak_tflops"), "{summary}");
    for (region, flops) in [("A", 4.2e7), ("A::A1", 4.2e6), ("B", 1.4e7)] {
        assert_eq!(mfu_cell(&summary, region), expected(&regions, region, "", flops, 0.2e12), "{region}");
    }
    assert!(summary.contains("Not in the capture (no NVTX region of that name): `nope`"), "{summary}");
    assert!(!summary.contains("MFU not computed"), "{summary}");
}

/// An imported capture: the GPU named by its own export (`TARGET_INFO_GPU`,
/// an RTX 3090) picks the table's peak, and the summary says where the name came from.
#[test]
fn an_imported_capture_takes_its_peak_from_the_gpu_it_names() {
    let test = "an_imported_capture_takes_its_peak_from_the_gpu_it_names";
    let root = tempfile::tempdir().unwrap();
    let Some(db) = common::corpus_copy(test, "real/memfusion/report1.sqlite", root.path()) else { return };
    let out = root.path().join("run");
    let region = "TensorRT@ExecutionContext::execute::/fc/Gemm";
    common::import_nsys(&db, &out, &[&format!(r#"workload.flops={{"{region}": 1.0e6}}"#)]);
    let summary = std::fs::read_to_string(out.join("stakeholder_summary.md")).unwrap();
    assert!(
        summary.contains("from RTX 3090, FP16/BF16 tensor, 936 GB/s (conf/hardware/gpu_peaks.yaml) (GPU name from nsys/capture.json)"),
        "{summary}"
    );
    let regions = json(&out.join("nsys/regions.json"));
    assert_eq!(
        mfu_cell(&summary, region),
        expected(&regions, "ExecutionContext::execute::/fc/Gemm", "TensorRT", 1.0e6, 71e12)
    );
    // Without workload.flops: the reason, with the fix.
    let plain = root.path().join("plain");
    common::import_nsys(&db, &plain, &[]);
    let summary = std::fs::read_to_string(plain.join("stakeholder_summary.md")).unwrap();
    assert!(summary.contains("MFU not computed: no analytic FLOP count (a user command, not a built-in workload; hint: give the FLOPs of one instance per region, workload.flops="), "{summary}");
}
