//! `llmperf report RUN_DIR` rebuilds every report from the run's artifacts
//! alone: on a copy of a run directory it gives the same bytes, timestamps aside.
mod common;
use common::*;
use std::path::{Path, PathBuf};

fn fixture(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ncu").join(name)
}

#[test]
fn report_reproduces_an_imported_ncu_run() {
    let root = tempfile::tempdir().unwrap();
    for (name, extra) in
        [("manual_nvtx.ncu2022.3.details.csv", vec![]), ("kernel_0013_ncu.details.csv", vec!["--range", "decode"])]
    {
        let out = root.path().join(name);
        llmperf().args(["import", "ncu"]).arg(fixture(name)).arg("-o").arg(&out).args(&extra).assert().success();
        assert!(out.join("stakeholder_summary.md").is_file() && out.join("report.md").is_file());
        assert_report_reproduces(&out);
    }
}

#[test]
fn report_reproduces_an_imported_nsys_capture_with_its_kernels() {
    let root = tempfile::tempdir().unwrap();
    let out = import_memfusion(root.path());
    let kernels = json(&out.join("kernels.json"));
    assert_eq!(kernels["source"], "nsys");
    let top = json(&out.join("nsys/top_kernels.json"));
    assert_eq!(kernels["kernels"][0]["kernel_name"], top[0]["name"]);
    let summary = std::fs::read_to_string(out.join("stakeholder_summary.md")).unwrap();
    assert!(
        summary.contains("## Top Kernels")
            && summary.contains(&format!("{:.1}%", top[0]["share_pct"].as_f64().unwrap()))
    );
    assert_report_reproduces(&out);
}
