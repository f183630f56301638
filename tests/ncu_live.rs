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

/// A stand-in ncu for the profiling run (no GPU here) that writes a recorded
/// real report where llmperf asked for one; `--version` and `--import` go to
/// the real ncu, so the rendering of a real report is exercised for real.
fn fake_ncu_replaying(dir: &std::path::Path, report: &std::path::Path) -> std::path::PathBuf {
    let script = dir.join("ncu");
    write_executable(
        &script,
        &format!(
            r#"#!/bin/sh
case " $* " in *" --import "*|*" --version "*) exec ncu "$@";; esac
prev=; for a in "$@"; do [ "$prev" = "--export" ] && out="$a"; [ "$prev" = "--log-file" ] && log="$a"; prev="$a"; done
cp {report} "$out.ncu-rep"
echo "==PROF== Report: $out.ncu-rep" > "$log"
"#,
            report = report.display()
        ),
    );
    script
}

#[test]
fn a_recorded_real_report_is_rendered_and_read_back() {
    let root = tempfile::tempdir().unwrap();
    let report = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ncu/manual_nvtx.ncu-rep");
    let fake = fake_ncu_replaying(root.path(), &report);
    let out = llmperf()
        .args(["profile", "--no-nsys", "--replay-mode", "kernel", "-o"])
        .arg(root.path().join("runs"))
        .arg(format!("pipeline.ncu.executable={}", fake.display()))
        .args(["--", "true"])
        .timeout(std::time::Duration::from_secs(600))
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let dir = run_dir(&out);
    let manifest = json(&dir.join("manifest.json"));
    let ncu = stage(&manifest, "ncu");
    let artifacts: Vec<_> = ncu["artifacts"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    for a in ["ncu/p0.ncu-rep", "ncu/p0.raw.csv", "ncu/p0.details.csv"] {
        assert!(artifacts.contains(&a), "{a} missing from {artifacts:?}");
    }
    assert!(ncu["diagnoses"].as_array().unwrap().is_empty());
    // The rendering by the real ncu 2022.3, read back by llmperf's reader.
    let launches: Vec<_> =
        llmperf::parse::ncu_csv::open(&dir.join("ncu/p0.details.csv")).unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(launches.len(), 3);
    let stack: Vec<_> = launches[0].nvtx.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(stack, ["run_test", "init_data"]);
    assert_eq!(launches[0].duration_ns(), Some(84_480.0));
    let raw = std::fs::read_to_string(dir.join("ncu/p0.raw.csv")).unwrap();
    assert!(raw.starts_with("\"ID\",") && raw.contains("gpu__time_duration.sum"), "{}", &raw[..200.min(raw.len())]);
}
