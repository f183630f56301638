//! `llmperf import ncu` and `llmperf validate` on real recorded ncu outputs
//! (the shared corpus; llmperf is handed copies).
mod common;
use common::*;
use predicates::prelude::*;
use std::path::Path;

const DETAILS: &str = "real/derived/nsight-training/manual_nvtx.ncu2022.3.details.csv";
const RAW: &str = "real/derived/nsight-training/manual_nvtx.ncu2022.3.raw.csv";
const REPORT: &str = "real/nsight-training/manual_nvtx.ncu-rep";
const NO_NVTX: &str = "real/derived/parallel_programming_ex3/profile.ncu2024.1.details.csv";

fn import(file: &Path, out: &Path, extra: &[&str]) -> assert_cmd::assert::Assert {
    llmperf().args(["import", "ncu"]).arg(file).arg("-o").arg(out).args(extra).assert()
}

/// (name, calls, GPU ms) of the aggregate scope.
fn regions(dir: &Path) -> Vec<(String, u64, f64)> {
    ncu_scope_regions(dir)
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_string(),
                r["inclusive"]["calls"].as_u64().unwrap(),
                r["inclusive"]["gpu_time_ms"].as_f64().unwrap(),
            )
        })
        .collect()
}

#[test]
fn details_raw_and_the_report_itself_give_the_same_regions() {
    let root = tempfile::tempdir().unwrap();
    let (Some(details_csv), Some(raw_csv), Some(report)) =
        (corpus_copy!(DETAILS, root.path()), corpus_copy!(RAW, root.path()), corpus_copy!(REPORT, root.path()))
    else {
        return;
    };
    let details = root.path().join("details");
    import(&details_csv, &details, &[]).success();
    let raw = root.path().join("raw");
    import(&raw_csv, &raw, &[]).success();
    let rep = root.path().join("rep");
    import(&report, &rep, &[]).success();
    let want = regions(&details);
    assert_eq!(want.len(), 4);
    assert_eq!((want[0].0.as_str(), want[0].1), ("run_test", 3));
    for other in [regions(&raw), regions(&rep)] {
        for (a, b) in want.iter().zip(&other) {
            assert_eq!((&a.0, a.1), (&b.0, b.1));
            assert!((a.2 - b.2).abs() <= 1e-4 * a.2, "{a:?} vs {b:?}");
        }
    }
    // The input is kept in the run directory (a CSV is copied while it is
    // read: the copy holds its bytes all the same), and every JSON file
    // follows its schema.
    assert_eq!(std::fs::read(details.join("ncu/import.csv")).unwrap(), std::fs::read(&details_csv).unwrap());
    assert_eq!(std::fs::read(rep.join("ncu/import.ncu-rep")).unwrap(), std::fs::read(&report).unwrap());
    for dir in [&details, &raw, &rep] {
        llmperf()
            .arg("validate")
            .arg(dir)
            .assert()
            .success()
            .stdout(predicate::str::contains("OK    ncu/regions/report.json"));
    }
}

#[test]
fn files_without_nvtx_land_in_unattributed_and_say_so() {
    let root = tempfile::tempdir().unwrap();
    let Some(file) = corpus_copy!(NO_NVTX, root.path()) else { return };
    let out = root.path().join("run");
    import(&file, &out, &[]).success();
    let r = regions(&out);
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].0.as_str(), r[0].1), ("(unattributed)", 6));
    let report = json(&out.join("ncu/regions/report.json"));
    assert!(report["note"].as_str().unwrap().contains("no NVTX data"));
    assert!(out.join("ncu/regions/_unattributed_/sections.txt").is_file());
}

#[test]
fn selection_and_range_attribution_from_the_command_line() {
    let root = tempfile::tempdir().unwrap();
    let Some(file) = corpus_copy!(DETAILS, root.path()) else { return };
    let out = root.path().join("sel");
    import(
        &file,
        &out,
        &["report.kernels.include=[\"regex:^(daxpy|init)\"]", "report.kernels.exclude=[\"regex:^init\"]"],
    )
    .success();
    let r = regions(&out);
    assert_eq!(r[0].1, 1, "only daxpy is left in run_test: {r:?}");
    let report = json(&out.join("ncu/regions/report.json"));
    let sel = &report["scopes"][0]["regions"][0]["selection"];
    assert_eq!(sel["include_patterns"][0], "regex:^(daxpy|init)");
    assert_eq!(sel["kernels_excluded"], 2);
    // Range attribution reads the results' NVTX columns: `--range` names the
    // region only of results that carry none. These rows' stacks say
    // run_test > init_data / daxpy / check_results.
    let out = root.path().join("range");
    import(&file, &out, &["--range", "decode_all"]).success();
    let names: Vec<String> = regions(&out).into_iter().map(|r| r.0).collect();
    assert_eq!(names, ["run_test", "run_test::check_results", "run_test::daxpy", "run_test::init_data"]);
}

/// `--range A::A1` alone: the totals add the outermost regions that hold
/// results (they said "0 results, 0.000 ms" when only depth 0 counted), and a
/// kernel pattern does not drop range results.
#[test]
fn range_totals_count_nested_only_regions() {
    let root = tempfile::tempdir().unwrap();
    let Some(file) = corpus_copy!(DETAILS, root.path()) else { return };
    let out = root.path().join("range");
    import(&file, &out, &["--range", "run_test::daxpy"]).success();
    let report = json(&out.join("ncu/regions/report.json"));
    let totals = &report["scopes"][0]["totals"];
    assert_eq!(totals["calls"], 3);
    assert!((totals["gpu_time_ms"].as_f64().unwrap() - 0.42221).abs() < 1e-9, "{totals}");
    let daxpy = regions(&out).into_iter().find(|r| r.0 == "run_test::daxpy").unwrap();
    assert_eq!(daxpy.1, 1);
}

/// The real ncu 2025.3.1 app-range export imports with no plan and no
/// `--range`: its one result is the start/end range `compute_kernel:profile`
/// (a `:` in the name), 123.480704 ms from `gpu__time_duration.avg`; a kernel
/// pattern that would drop a kernel named `range` keeps it, and says so.
#[test]
fn an_app_range_export_needs_no_plan() {
    let root = tempfile::tempdir().unwrap();
    let Some(file) = corpus_copy!("real/cfregly-ai-perf/ncu_app_range_details.csv", root.path()) else { return };
    let out = root.path().join("run");
    import(&file, &out, &["report.kernels.exclude=[range]"]).success();
    let r = regions(&out);
    assert_eq!(r.len(), 1);
    assert_eq!((r[0].0.as_str(), r[0].1), ("compute_kernel:profile", 1));
    assert!((r[0].2 - 123.480704).abs() < 1e-9, "{r:?}");
    let report = json(&out.join("ncu/regions/report.json"));
    assert_eq!(report["source"]["attribution"], "range");
    assert_eq!(report["source"]["ranges_not_selected"], 1);
    assert!(report["note"].as_str().unwrap().contains("not applied to the 1 range result"), "{report}");
    assert_eq!(report["scopes"][0]["totals"]["calls"], 1);
}

#[test]
fn bad_inputs_fail_the_stage_and_keep_the_copy() {
    let root = tempfile::tempdir().unwrap();
    let Some(file) = corpus_copy!(DETAILS, root.path()) else { return };
    let bad = root.path().join("cut.csv");
    let text = std::fs::read(&file).unwrap();
    std::fs::write(&bad, &text[..text.len() / 2]).unwrap();
    let out = root.path().join("run");
    import(&bad, &out, &[])
        .code(6)
        .stderr(predicate::str::contains(format!("{}:", bad.display())).and(predicate::str::contains("hint:")));
    let manifest = json(&out.join("manifest.json"));
    assert_eq!(stage(&manifest, "ncu_regions")["status"], "failed");
    assert_eq!(std::fs::read(out.join("ncu/import.csv")).unwrap(), &text[..text.len() / 2]);
    llmperf()
        .args(["import", "ncu", "/nonexistent.csv"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("no such file").and(predicate::str::contains("hint:")));
    let bad_pattern = root.path().join("pattern");
    import(&file, &bad_pattern, &["report.kernels.include=[\"regex:(\"]"])
        .code(3)
        .stderr(predicate::str::contains("bad kernel pattern"));
}

#[test]
fn validate_names_the_file_and_place_that_break_a_schema() {
    let root = tempfile::tempdir().unwrap();
    let Some(file) = corpus_copy!(DETAILS, root.path()) else { return };
    let out = root.path().join("run");
    import(&file, &out, &[]).success();
    let path = out.join("ncu/regions/run_test__daxpy/region.json");
    let text = std::fs::read_to_string(&path).unwrap().replacen("\"calls\": 1", "\"calls\": \"one\"", 1);
    std::fs::write(&path, text).unwrap();
    llmperf()
        .arg("validate")
        .arg(&out)
        .assert()
        .code(6)
        .stdout(
            predicate::str::contains("FAIL  ncu/regions/run_test__daxpy/region.json")
                .and(predicate::str::contains("/calls")),
        )
        .stderr(predicate::str::contains("do not match their schema"));
    llmperf().arg("validate").arg(root.path()).assert().code(2).stderr(predicate::str::contains("not a run directory"));
}
