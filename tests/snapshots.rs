//! Snapshots (insta) of every Markdown and JSON report, for two run
//! directories built from real data only:
//! - DeepSeek-OCR on an RTX 5090 (the shared corpus, llm-perf-opt): the nsys
//!   kernel summary of the whole run and the ncu details of its top 20
//!   kernels, imported into one run directory;
//! - llm_tiny profiled under the real nsys on this project's CPU machine
//!   (tests/fixtures/runs/cpu_llm_tiny: the raw artifacts of that run), its
//!   reports rebuilt by `llmperf report`.
//!
//! A changed report fails here with the diff; accept it with `cargo insta review`
//! (or INSTA_UPDATE=always) after reading it. Timestamps are blanked first.
use crate::common::*;
use std::path::Path;

/// Beyond crate::common::REPORTS (report.html is checked in tests/html.rs, not snapshotted).
const MORE: [&str; 7] = [
    "regions.md",
    "roofline.json",
    "region_join.json",
    "nsys/regions.json",
    "nsys/top_kernels.json",
    "nsys/capture.json",
    "ncu/regions/report.md",
];

const DSOCR_KERNEL_SUMMARY: &str =
    "llm-perf-opt/reports/20251107-dsocr/nsys/all-stage/nsys/summary_cuda_gpu_kern_sum.csv";

/// Snapshot every report the run has, and `extra`; the list of those it has is a snapshot too.
fn snapshot_reports(run: &Path, prefix: &str, extra: &[&str]) {
    let mut present = Vec::new();
    for &rel in REPORTS.iter().filter(|r| **r != "report.html").chain(&MORE).chain(extra) {
        let path = run.join(rel);
        if !path.is_file() {
            continue;
        }
        present.push(rel);
        let name = format!("{prefix}__{}", rel.replace('/', "__"));
        insta::assert_snapshot!(name, without_timestamps(&path));
    }
    insta::assert_snapshot!(format!("{prefix}__present"), present.join("\n"));
}

#[test]
fn deepseek_ocr_rtx5090_reports() {
    let root = tempfile::tempdir().unwrap();
    let run = root.path().join("dsocr");
    let Some(summary) = corpus_copy!(DSOCR_KERNEL_SUMMARY, root.path()) else { return };
    let Some(ncu) = dsocr_ncu(&this_test!(), root.path()) else { return };
    llmperf().args(["import", "nsys"]).arg(&summary).arg("-o").arg(&run).assert().success();
    llmperf().args(["import", "ncu"]).args(&ncu).arg("-o").arg(&run).assert().success();
    // The two imports share one run directory and one manifest.
    let manifest = json(&run.join("manifest.json"));
    let stages: Vec<&str> =
        manifest["stages"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert_eq!(stages, ["nsys_regions", "import", "ncu_regions", "reports"]);
    // ncu/regions/report.json (350 KB) is the ncu-only run's snapshot: the same files, the same bytes.
    snapshot_reports(&run, "dsocr", &[]);
    assert_report_reproduces(&run);
}

/// The same ncu files alone: kernels come from ncu, so the summary's Top
/// Kernels table carries each kernel's intensity and throughputs, and the
/// narrative reads the top kernel's own counters.
#[test]
fn deepseek_ocr_rtx5090_ncu_only_reports() {
    let root = tempfile::tempdir().unwrap();
    let run = root.path().join("dsocr-ncu");
    let Some(ncu) = dsocr_ncu(&this_test!(), root.path()) else { return };
    llmperf().args(["import", "ncu"]).args(&ncu).arg("-o").arg(&run).assert().success();
    let summary = std::fs::read_to_string(run.join("stakeholder_summary.md")).unwrap();
    assert!(summary.contains("| FLOP/byte (ncu) | SM % (ncu) | DRAM % (ncu) |"), "{summary}");
    assert!(summary.contains("takes 44.2% of GPU time") && summary.contains("; ncu: "), "{summary}");
    snapshot_reports(&run, "dsocr_ncu", &["ncu/regions/report.json"]);
}

#[test]
fn cpu_llm_tiny_capture_reports() {
    let root = tempfile::tempdir().unwrap();
    let run = root.path().join("cpu_llm_tiny");
    copy_dir(&own("runs/cpu_llm_tiny"), &run);
    llmperf().arg("report").arg(&run).assert().success();
    snapshot_reports(&run, "cpu_llm_tiny", &[]);
}
