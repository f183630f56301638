//! `llmperf profile --replay-mode ...` under the real Nsight Compute 2022.3
//! installed by setup.sh. There is no GPU here: ncu runs the workload, matches
//! its NVTX ranges and reports that nothing was profiled; llmperf must say so
//! and invent nothing.
#![cfg(feature = "torch")]
mod common;
use common::*;
use predicates::prelude::*;

#[test]
fn range_replay_on_the_regions_workload_reports_the_diagnosis() {
    let root = tempfile::tempdir().unwrap();
    let out = llmperf()
        .args([
            "profile",
            "--model",
            "nvtx_regions",
            "infer.iters=3",
            "--replay-mode",
            "range",
            "--nvtx-include",
            "A",
            "--no-nsys",
            "-o",
        ])
        .arg(root.path())
        .timeout(std::time::Duration::from_secs(600))
        .assert()
        .success()
        .stderr(predicate::str::contains("3 matching range(s) held no CUDA work"))
        .get_output()
        .stdout
        .clone();
    let dir = run_dir(&out);
    let manifest = json(&dir.join("manifest.json"));
    let ncu = stage(&manifest, "ncu");
    assert_eq!(ncu["status"], "ok");
    let codes: Vec<_> = ncu["diagnoses"].as_array().unwrap().iter().map(|d| d["code"].as_str().unwrap()).collect();
    assert_eq!(codes, ["empty_ranges", "no_ranges_profiled"]);
    assert!(ncu["diagnoses"][1]["hint"].as_str().unwrap().contains("app-range"));
    let cmd = std::fs::read_to_string(dir.join("ncu/cmd.txt")).unwrap();
    assert!(cmd.contains("LC_ALL=C") && cmd.contains("--replay-mode range --nvtx --nvtx-include A/"), "{cmd}");
    // Nothing profiled: no report, no CSVs, no invented regions.
    assert!(!dir.join("ncu/p0.ncu-rep").exists());
    assert!(!dir.join("ncu/regions").exists());
    // The workload under ncu kept its timings apart.
    assert!(dir.join("workload/timings.ncu.json").is_file());
}

#[test]
fn app_range_replay_is_refused_by_ncu_2022_3() {
    let root = tempfile::tempdir().unwrap();
    let out = llmperf()
        .args(["profile", "--model", "nvtx_regions", "--replay-mode", "app-range", "--no-nsys", "-o"])
        .arg(root.path())
        .assert()
        .code(3)
        .stderr(predicate::str::contains("--replay-mode app-range needs Nsight Compute 2023.1.0 or later"))
        .get_output()
        .stdout
        .clone();
    let manifest = json(&run_dir(&out).join("manifest.json"));
    assert_eq!(stage(&manifest, "ncu")["status"], "skipped");
}
