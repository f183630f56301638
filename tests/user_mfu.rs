//! MFU for a user's command (issue 16): `workload.flops` gives the FLOPs of
//! one instance per region; nsys gives its wall time; the peak comes from
//! `hardware.*` or the GPU table, by the GPU the run knows of.

use crate::common::{json, llmperf, nsys_lock, run_dir};

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

/// The expected MFU of a region from plain SQL on the run's own export, in
/// percent, not rounded: FLOPs / the median of the durations of the NVTX
/// ranges of that text (the mean of the middle two for an even count), and
/// that median in ns.
fn expected_by_sql(db: &std::path::Path, text: &str, flops: f64, peak: f64) -> (f64, f64) {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut st = conn
        .prepare(
            "SELECT e.\"end\" - e.start FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId \
             WHERE COALESCE(e.text, s.value) = ?1 AND e.\"end\" IS NOT NULL ORDER BY 1",
        )
        .unwrap();
    let walls: Vec<i64> = st.query_map([text], |r| r.get(0)).unwrap().map(Result::unwrap).collect();
    assert!(!walls.is_empty(), "no range {text}");
    let n = walls.len();
    let median_ns = (walls[(n - 1) / 2] + walls[n / 2]) as f64 / 2.0;
    (100.0 * flops / (median_ns / 1e9) / peak, median_ns)
}

/// A cell shows `exact` rounded to two decimals: within half a unit of the
/// last place, widened by what the median's whole nanoseconds move it
/// (regions.json keeps a median of an even count as the mean of the middle
/// two rounded down to whole ns: half a ns off `median_ns` at most), and a
/// hair of float error.
fn assert_shows(cell: &str, (exact, median_ns): (f64, f64), what: &str) {
    let shown: f64 = cell.trim_end_matches('%').parse().unwrap_or_else(|_| panic!("{what}: {cell}"));
    let whole_ns = exact * 0.5 / (median_ns - 0.5);
    assert!(
        (shown - exact).abs() <= 0.005 + whole_ns + 1e-9,
        "{what}: shows {cell}, SQL gives {exact}% (median {median_ns} ns)"
    );
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
            crate::common::NSYS_HANG[0],
            crate::common::NSYS_HANG[1],
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
    let db = dir.join("nsys/report.sqlite");
    for (region, text, flops) in [("A", "A", 4.2e7), ("A::A1", "A1", 4.2e6), ("B", "B", 1.4e7)] {
        assert!(regions["regions"].as_array().unwrap().iter().any(|r| r["path"] == region), "{region}");
        assert_shows(&mfu_cell(&summary, region), expected_by_sql(&db, text, flops, 0.2e12), region);
    }
    assert!(summary.contains("Not in the capture (no NVTX range of that name): `nope`"), "{summary}");
    assert!(!summary.contains("MFU not computed"), "{summary}");
}

/// An imported capture: the GPU named by its own export (`TARGET_INFO_GPU`,
/// an RTX 3090) picks the table's peak, and the summary says where the name came from.
#[test]
fn an_imported_capture_takes_its_peak_from_the_gpu_it_names() {
    let test = "an_imported_capture_takes_its_peak_from_the_gpu_it_names";
    let root = tempfile::tempdir().unwrap();
    let Some(db) = crate::common::corpus_copy(test, "real/memfusion/report1.sqlite", root.path()) else { return };
    let out = root.path().join("run");
    let region = "TensorRT@ExecutionContext::execute::/fc/Gemm";
    crate::common::import_nsys(&db, &out, &[&format!(r#"workload.flops={{"{region}": 1.0e6}}"#)]);
    let summary = std::fs::read_to_string(out.join("stakeholder_summary.md")).unwrap();
    assert!(
        summary.contains("from RTX 3090, FP16/BF16 tensor, FP32 accumulate, dense, 936 GB/s (conf/hardware/gpu_peaks.yaml) (GPU name from nsys/capture.json)"),
        "{summary}"
    );
    let regions = json(&out.join("nsys/regions.json"));
    assert_eq!(
        mfu_cell(&summary, region),
        expected(&regions, "ExecutionContext::execute::/fc/Gemm", "TensorRT", 1.0e6, 71e12)
    );
    // Without workload.flops: the reason, with the fix.
    let plain = root.path().join("plain");
    crate::common::import_nsys(&db, &plain, &[]);
    let summary = std::fs::read_to_string(plain.join("stakeholder_summary.md")).unwrap();
    assert!(summary.contains("MFU not computed: no analytic FLOP count (a user command, not a built-in workload; hint: give the FLOPs of one instance per region, workload.flops="), "{summary}");
}

/// An export that names no GPU (nsys 2026.2 writes no `TARGET_INFO_GPU`):
/// the summary says so with the fix, and `hardware.gpu` names it, which
/// picks the table's peak and is named as the source.
#[test]
fn an_export_without_a_gpu_name_takes_the_one_hardware_gpu_gives() {
    let test = "an_export_without_a_gpu_name_takes_the_one_hardware_gpu_gives";
    let root = tempfile::tempdir().unwrap();
    let Some(db) = crate::common::corpus_copy(test, "real/nsys-ai/mfu_2gpu_before.sqlite", root.path()) else { return };
    let flops = r#"workload.flops={"FlashAttnFunc": 1.0e9}"#;
    let unnamed = root.path().join("unnamed");
    crate::common::import_nsys(&db, &unnamed, &[flops]);
    let summary = std::fs::read_to_string(unnamed.join("stakeholder_summary.md")).unwrap();
    assert!(summary.contains("| GPU | none recorded |"), "{summary}");
    assert!(
        summary
            .contains("MFU not computed: no GPU name known for this run's GPU (hint: name it, hardware.gpu=H100-SXM,"),
        "{summary}"
    );
    let named = root.path().join("named");
    crate::common::import_nsys(&db, &named, &[flops, "hardware.gpu=H100-SXM"]);
    let summary = std::fs::read_to_string(named.join("stakeholder_summary.md")).unwrap();
    assert!(
        summary.contains(
            "from H100 SXM5, FP16/BF16 tensor, FP32 accumulate, dense, 3350 GB/s (conf/hardware/gpu_peaks.yaml) (GPU name from hardware.gpu)"
        ),
        "{summary}"
    );
    // Both ranks' instances pooled, as the summary says.
    let regions = json(&named.join("nsys/regions.json"));
    let (ns, n) = regions["regions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["path"] == "FlashAttnFunc")
        .fold((0.0, 0.0), |(ns, n), r| {
            (ns + r["inclusive_ns"].as_f64().unwrap(), n + r["instances"].as_f64().unwrap())
        });
    assert_eq!(mfu_cell(&summary, "FlashAttnFunc"), format!("{:.2}%", 100.0 * 1.0e9 / (ns / n / 1e9) / 989e12));
}
