//! What to fix first (findings.json): captures made here of workloads built
//! to be slow for one known reason each (scripts/findings_demo.py, on CPU
//! under the real nsys, `--annotate ops`), ranked with that reason first and
//! its evidence equal to the script's own counts; and the findings of real
//! GPU captures of the corpus equal to their time breakdown (tests/breakdown.rs
//! checks that against SQL).
use crate::common::*;
use std::path::Path;
use std::time::Duration;

const STEPS: usize = 5;

fn profile_demo(root: &Path, mode: &str) -> serde_json::Value {
    let _nsys = nsys_lock();
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/findings_demo.py");
    let out = llmperf()
        .arg("profile")
        .args(NSYS_HANG)
        .args(["--no-ncu", "--annotate", "ops", "-o"])
        .arg(root)
        .arg("--")
        .arg(venv)
        .arg(script)
        .args([mode, &STEPS.to_string()])
        .timeout(Duration::from_secs(900))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let run = run_dir(&out.stdout);
    let summary = std::fs::read_to_string(run.join("stakeholder_summary.md")).unwrap();
    assert!(summary.starts_with("# Stakeholder summary\n\n## What to fix first\n"), "{summary}");
    json(&run.join("findings.json"))
}

fn evidence(f: &serde_json::Value, what: &str) -> f64 {
    f["evidence"].as_array().unwrap().iter().find(|e| e["what"] == what).unwrap_or_else(|| panic!("{what} in {f}"))
        ["value"]
        .as_f64()
        .unwrap()
}

fn kinds(report: &serde_json::Value) -> Vec<String> {
    report["findings"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap().to_string()).collect()
}

#[test]
fn a_workload_of_many_tiny_ops_is_ranked_launch_bound_first() {
    let root = tempfile::tempdir().unwrap();
    let report = profile_demo(root.path(), "launch");
    assert_eq!(report["source"], "nsys ranges");
    let first = &report["findings"][0];
    assert_eq!(first["kind"], "launch_bound", "{report}");
    assert_eq!(first["region"], "Tiny");
    // The script's count: STEPS forwards of 200 ops (100 mul, 100 add).
    assert_eq!(evidence(first, "outermost operator calls"), (STEPS * 200) as f64);
    assert_eq!(evidence(first, "per instance"), 200.0);
    assert!(first["needs"].as_str().unwrap().contains("GPU capture"));
    assert!(!kinds(&report).contains(&"sync_stall".to_string()), "{report}");
}

#[test]
fn a_workload_that_syncs_in_a_loop_is_ranked_sync_stall_first() {
    let root = tempfile::tempdir().unwrap();
    let report = profile_demo(root.path(), "sync");
    let first = &report["findings"][0];
    assert_eq!(first["kind"], "sync_stall", "{report}");
    assert_eq!(first["region"], "Filter");
    // STEPS forwards of 8 nonzero and 8 .item() (aten::_local_scalar_dense inside it is the same sync).
    assert_eq!(evidence(first, "syncing operator calls"), (STEPS * 16) as f64);
    assert!(!kinds(&report).contains(&"launch_bound".to_string()), "{report}");
}

/// Findings of an import, and its breakdown.
fn import(rel: &str, test: &str) -> Option<(serde_json::Value, serde_json::Value)> {
    let dir = tempfile::tempdir().unwrap();
    let db = corpus_copy(test, rel, dir.path())?;
    let out = dir.path().join("run");
    import_nsys(&db, &out, &[]);
    Some((json(&out.join("findings.json")), json(&out.join("nsys/breakdown.json"))))
}

fn assert_ranked(report: &serde_json::Value) {
    let r: Vec<i64> =
        report["findings"].as_array().unwrap().iter().map(|f| f["recoverable_ns"].as_i64().unwrap()).collect();
    assert!(r.windows(2).all(|w| w[0] >= w[1]), "{r:?}");
}

#[test]
fn exposed_nccl_of_the_two_process_capture_is_a_finding_with_the_breakdowns_numbers() {
    let Some((report, breakdown)) = import("real/nsys-ai/mfu_2gpu_before.sqlite", &crate::this_test!()) else { return };
    assert_eq!(report["source"], "nsys breakdown");
    assert_ranked(&report);
    for d in breakdown["devices"].as_array().unwrap() {
        let region = d["regions"].as_array().unwrap().iter().find(|r| r["name"] == "AllToAll4D").unwrap();
        let exposed = region["parts"]["communication_exposed_ns"].as_i64().unwrap();
        let f = report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["kind"] == "exposed_communication" && f["region"] == "AllToAll4D" && f["device"] == d["device"])
            .unwrap_or_else(|| panic!("exposed communication of AllToAll4D on device {}: {report}", d["device"]));
        assert_eq!(f["recoverable_ns"].as_i64().unwrap(), exposed);
        assert_eq!(f["process_id"], d["process_id"]);
    }
}

#[test]
fn a_capture_without_nvtx_ranks_its_device_span_and_sync_stalls_come_first() {
    let Some((report, breakdown)) = import("real/derived/abacus/report1.nsys2022.4.sqlite", &crate::this_test!())
    else {
        return;
    };
    assert_ranked(&report);
    let first = &report["findings"][0];
    assert_eq!(first["kind"], "sync_stall", "{report}");
    assert_eq!(first["region"], "(device span)");
    assert_eq!(first["recoverable_ns"], breakdown["devices"][0]["span"]["idle_sync_ns"]);
}

/// ncu's own advice: the DeepSeek-OCR details CSVs (corpus) imported; every
/// OPT and WRN rule row the test counts with the csv crate is in
/// ncu/rules.json, and findings.json's advice is ranked by the estimate times
/// the kernel's share of GPU time (kernels.json).
#[test]
fn ncu_rule_results_are_kept_and_ranked_by_weighted_speedup() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some(csvs) = crate::common::dsocr_ncu(&test, root.path()) else { return };
    let out = root.path().join("run");
    llmperf().args(["import", "ncu"]).args(&csvs).arg("-o").arg(&out).assert().success();
    let (mut rows, mut pairs) = (0, std::collections::BTreeSet::new());
    for csv in &csvs {
        let mut r = csv::ReaderBuilder::new().flexible(true).from_path(csv).unwrap();
        let h = r.headers().unwrap().clone();
        let col = |n: &str| h.iter().position(|x| x == n).unwrap();
        let (k, name, kind) = (col("Kernel Name"), col("Rule Name"), col("Rule Type"));
        for rec in r.records() {
            let rec = rec.unwrap();
            if matches!(rec.get(kind), Some("OPT") | Some("WRN")) {
                rows += 1;
                pairs.insert((rec[k].to_string(), rec[name].to_string()));
            }
        }
    }
    assert!(rows > 0);
    let rules = json(&out.join("ncu/rules.json"));
    let list = rules["rules"].as_array().unwrap();
    assert_eq!(list.len(), pairs.len());
    assert_eq!(list.iter().map(|r| r["launches"].as_u64().unwrap()).sum::<u64>(), rows as u64);
    let advice = json(&out.join("findings.json"))["ncu_advice"].as_array().unwrap().clone();
    assert!(!advice.is_empty());
    let weighted: Vec<f64> = advice.iter().map(|a| a["weighted_pct"].as_f64().unwrap()).collect();
    assert!(weighted.windows(2).all(|w| w[0] >= w[1]), "{weighted:?}");
    let first = &advice[0];
    let want = first["speedup_pct"].as_f64().unwrap() * first["share_pct"].as_f64().unwrap() / 100.0;
    assert!((first["weighted_pct"].as_f64().unwrap() - want).abs() < 1e-9);
    let kernels = json(&out.join("kernels.json"));
    let top = &kernels["kernels"][0];
    assert_eq!(first["kernel_name"], top["kernel_name"], "the top kernel's advice first");
    let summary = std::fs::read_to_string(out.join("stakeholder_summary.md")).unwrap();
    assert!(summary.contains("ncu's own advice"), "{summary}");
}
