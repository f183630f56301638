//! `llmperf diff` and `llmperf check` on runs made here: the same
//! configuration twice (no regression), the regions demo with extra work in
//! `B` (exactly `B` slower), too few samples (inconclusive), nothing profiled,
//! missing regions, budgets with mistakes, JUnit and the step summary.
mod common;

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use common::{json, llmperf, nsys_lock, run_dir};

/// Timed runs of this file take turns: two at once would time each other.
static TIMING: Mutex<()> = Mutex::new(());

fn timing() -> std::sync::MutexGuard<'static, ()> {
    TIMING.lock().unwrap_or_else(|e| e.into_inner())
}

const BUDGETS: &str = "tests/fixtures/compare/budgets-shared-cpu.yaml";

/// `llmperf workload --model nvtx_regions` with overrides: its run directory.
fn workload(root: &Path, overrides: &[&str]) -> PathBuf {
    let out = llmperf()
        .args(["workload", "--model", "nvtx_regions", "-o"])
        .arg(root)
        .args(overrides)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    run_dir(&out)
}

/// `llmperf check RUN --baseline BASE ARGS...`: exit code and check.json.
fn check(run: &Path, base: &Path, args: &[&str]) -> (i32, serde_json::Value, String) {
    let out = llmperf().arg("check").arg(run).arg("--baseline").arg(base).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.code().unwrap(), json(&run.join("check/check.json")), stderr)
}

/// (source, name) → outcome of every checked row.
fn outcomes(c: &serde_json::Value) -> Vec<(String, String, String)> {
    c["checks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| {
            let s = |v: &serde_json::Value| v.as_str().unwrap().to_string();
            (s(&x["row"]["source"]), s(&x["row"]["name"]), s(&x["outcome"]))
        })
        .collect()
}

fn row<'a>(c: &'a serde_json::Value, source: &str, name: &str) -> &'a serde_json::Value {
    c["checks"].as_array().unwrap().iter().find(|x| x["row"]["source"] == source && x["row"]["name"] == name).unwrap()
}

const SAME: [&str; 2] = ["infer.iters=30", "runner.run.repeat=3"];

#[test]
fn the_same_configuration_twice_is_no_regression_in_ten_pairs() {
    let root = tempfile::tempdir().unwrap();
    let mut regressions = Vec::new();
    let mut rows = 0;
    for pair in 0..10 {
        let (a, b) = {
            let _t = timing();
            (workload(root.path(), &SAME), workload(root.path(), &SAME))
        };
        let (code, c, stderr) = check(&b, &a, &["--budgets", BUDGETS]);
        let o = outcomes(&c);
        assert_eq!(o.len(), 3, "{o:?}");
        rows += o.len();
        if code != 0 {
            regressions.push(format!("pair {pair}: exit {code}: {stderr}"));
        }
    }
    assert_eq!(rows, 30);
    // The false-alarm rate measured: 0 of 10 pairs (30 rows).
    assert!(regressions.is_empty(), "{regressions:#?}");
}

#[test]
fn extra_work_in_b_is_found_in_b_only_with_its_sign_and_size() {
    let root = tempfile::tempdir().unwrap();
    let (base, slow) = {
        let _t = timing();
        let base = workload(root.path(), &["infer.iters=30"]);
        (base, workload(root.path(), &["infer.iters=30", "model.extra_b_matmuls=3"]))
    };
    let summary = root.path().join("step_summary.md");
    std::fs::write(&summary, "earlier step\n").unwrap();
    let junit = root.path().join("check.xml");
    let out = llmperf()
        .arg("check")
        .arg(&slow)
        .arg("--baseline")
        .arg(&base)
        .args(["--budgets", BUDGETS, "--junit"])
        .arg(&junit)
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(8), "{stderr}");
    assert!(stderr.contains("error: check failed: regression workload B +"), "{stderr}");
    assert!(stderr.contains("hint: "), "{stderr}");
    let c = json(&slow.join("check/check.json"));
    let failing: Vec<_> = outcomes(&c).into_iter().filter(|o| o.2 == "regression").collect();
    assert_eq!(failing, [("workload".into(), "B".into(), "regression".into())]);
    // B does 4 matmuls instead of 1: about 4x the time, never less than 2x.
    let change = row(&c, "workload", "B")["row"]["change"]["change_pct"].as_f64().unwrap();
    assert!((100.0..600.0).contains(&change), "B changed {change}%");
    assert!(row(&c, "workload", "B")["row"]["change"]["ci_low_pct"].as_f64().unwrap() > 0.0);
    for name in ["A", "A::A1"] {
        assert_ne!(row(&c, "workload", name)["outcome"], "regression", "{name}");
    }
    // JUnit: three cases, one failure, named by source and region.
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains(r#"<testsuite name="llmperf check" tests="3" skipped="0" errors="0" failures="1">"#), "{xml}");
    let b_case = xml.split("<testcase").find(|c| c.contains(r#"name="workload B""#)).unwrap();
    assert!(b_case.contains("<failure message=\"regression: "), "{xml}");
    // The step summary: appended to, never replaced.
    let text = std::fs::read_to_string(&summary).unwrap();
    assert!(text.starts_with("earlier step\n# llmperf check: FAIL (exit 8)\n"), "{text}");
    assert!(text.contains("| ❌ regression | workload | `B` |"), "{text}");
    // check.json is what specs/ says.
    llmperf().arg("validate").arg(&slow).assert().success();
}

#[test]
fn too_few_samples_are_inconclusive_and_fail_only_with_strict() {
    let root = tempfile::tempdir().unwrap();
    let (a, b) = {
        let _t = timing();
        (workload(root.path(), &["infer.iters=3"]), workload(root.path(), &["infer.iters=3"]))
    };
    let (code, c, _) = check(&b, &a, &[]);
    assert_eq!(code, 0);
    for (_, name, outcome) in outcomes(&c) {
        assert_eq!(outcome, "inconclusive", "{name}");
    }
    assert!(row(&c, "workload", "B")["row"]["reason"]
        .as_str()
        .unwrap()
        .starts_with("too few samples: 3 in A, 3 in B, 10 needed"));
    let (code, c, stderr) = check(&b, &a, &["--strict"]);
    assert_eq!(code, 8, "{stderr}");
    assert_eq!(c["checks"].as_array().unwrap().iter().filter(|x| x["fails"] == true).count(), 3);
    assert!(stderr.contains("check failed: inconclusive workload A"), "{stderr}");
}

#[test]
fn a_run_without_samples_is_nothing_profiled_and_a_vanished_region_is_missing() {
    let root = tempfile::tempdir().unwrap();
    let (base, other) = {
        let _t = timing();
        let base = workload(root.path(), &["infer.iters=12"]);
        // The ResNet has other regions: the demo's are missing there.
        let other = llmperf()
            .args(["workload", "--model", "dummy_shallow_resnet", "infer.iters=12", "infer.warmup_iters=1", "-o"])
            .arg(root.path())
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        (base, run_dir(&other))
    };
    let (code, c, stderr) = check(&other, &base, &[]);
    assert_eq!(code, 8, "{stderr}");
    let missing: Vec<_> = outcomes(&c).into_iter().filter(|o| o.2 == "missing").map(|o| o.1).collect();
    assert_eq!(missing, ["A", "A::A1", "B"]);
    assert!(c["new"].as_array().unwrap().iter().any(|n| n == "workload forward"), "{}", c["new"]);
    assert!(stderr.contains("missing workload A"), "{stderr}");
    // No samples at all: exit 7, said on stderr with a hint.
    let empty = root.path().join("empty");
    common::copy_dir(&other, &empty);
    std::fs::remove_file(empty.join("workload/timings.json")).unwrap();
    let (code, c, stderr) = check(&empty, &base, &[]);
    assert_eq!(code, 7, "{stderr}");
    assert_eq!(c["status"], "fail");
    assert!(stderr.contains("error: nothing profiled:"), "{stderr}");
}

#[test]
fn budgets_with_mistakes_name_the_file_and_line() {
    let root = tempfile::tempdir().unwrap();
    let run = {
        let _t = timing();
        workload(root.path(), &["infer.iters=2"])
    };
    let bad = root.path().join("budgets.yaml");
    std::fs::write(&bad, "defaults:\n  relative_pct: 10\nregions:\n  - match: B\n    relative: 5\n").unwrap();
    let out = llmperf().arg("check").arg(&run).arg("--baseline").arg(&run).arg("--budgets").arg(&bad).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains(&format!("{}:5:", bad.display())), "{stderr}");
    assert!(stderr.contains("unknown field `relative`"), "{stderr}");
    assert!(stderr.contains("hint: keys are defaults, regions and kernels"), "{stderr}");
    std::fs::write(&bad, "regions:\n  - relative_pct: 5\n").unwrap();
    let out = llmperf().arg("check").arg(&run).arg("--baseline").arg(&run).arg("--budgets").arg(&bad).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("regions[0] has no `match`"), "{stderr}");
    // A budget that ignores B leaves it out of the check.
    std::fs::write(&bad, "regions:\n  - match: B\n    ignore: true\n").unwrap();
    let (code, c, _) = check(&run, &run, &["--budgets", bad.to_str().unwrap()]);
    assert_eq!(code, 0);
    let names: Vec<_> = outcomes(&c).into_iter().map(|o| o.1).collect();
    assert_eq!(names, ["A", "A::A1"]);
    // Not a run directory: a usage error with a hint.
    llmperf()
        .arg("check")
        .arg(root.path())
        .arg("--baseline")
        .arg(&run)
        .assert()
        .code(2)
        .stderr(predicates::str::contains("is not a run directory"))
        .stderr(predicates::str::contains("hint:"));
}

/// Real nsys captures made here: the regions demo twice, then with extra
/// work in B. nsys's NVTX instances and the workload's timings both find B,
/// and only B; diff writes its three files and they hold the same rows.
#[test]
fn diff_and_check_of_nsys_captures_find_the_slowed_region() {
    let root = tempfile::tempdir().unwrap();
    let profile = |extra: &str| {
        let out = llmperf()
            .args(["profile", "--model", "nvtx_regions", "--no-ncu", "infer.iters=30", extra])
            .args(common::NSYS_HANG)
            .arg("-o")
            .arg(root.path())
            .timeout(std::time::Duration::from_secs(600))
            .assert()
            .success()
            .get_output()
            .stdout
            .clone();
        run_dir(&out)
    };
    let (a, b, slow) = {
        let _n = nsys_lock();
        let _t = timing();
        (profile("model.extra_b_matmuls=0"), profile("model.extra_b_matmuls=0"), profile("model.extra_b_matmuls=3"))
    };
    // nsys/samples.json holds every instance: 30 per region.
    let samples = json(&a.join("nsys/samples.json"));
    let counts: Vec<_> = samples["regions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["path"].as_str().unwrap(), r["samples_ns"].as_array().unwrap().len()))
        .collect();
    assert_eq!(counts, [("A", 30), ("A::A1", 30), ("B", 30)]);

    let out = llmperf().arg("diff").arg(&a).arg(&slow).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("## Regions: NVTX ranges in the nsys capture"), "{stdout}");
    let d = json(&slow.join("diff/diff.json"));
    let verdict = |source: &str, name: &str| {
        d["rows"].as_array().unwrap().iter().find(|r| r["source"] == source && r["name"] == name).unwrap()["verdict"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(verdict("nsys", "B"), "slower");
    assert_eq!(verdict("workload", "B"), "slower");
    for source in ["nsys", "workload"] {
        for name in ["A", "A::A1"] {
            assert_ne!(verdict(source, name), "slower", "{source} {name}");
        }
    }
    let md = std::fs::read_to_string(slow.join("diff/diff.md")).unwrap();
    assert_eq!(md, stdout);
    let html = std::fs::read_to_string(slow.join("diff/diff.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("<td><code>B</code></td>"), "{html}");
    assert_eq!(html.matches("<b>slower</b>").count(), 2, "{html}");

    let (code, c, stderr) = check(&b, &a, &["--budgets", BUDGETS]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(outcomes(&c).len(), 6);
    let (code, c, _) = check(&slow, &a, &["--budgets", BUDGETS]);
    assert_eq!(code, 8);
    let failing: Vec<_> = outcomes(&c).into_iter().filter(|o| o.2 == "regression").map(|o| (o.0, o.1)).collect();
    assert_eq!(failing, [("workload".to_string(), "B".to_string()), ("nsys".into(), "B".into())]);
}

/// A real two-process capture (torchrun on two H100s, nsys 2026.2; corpus
/// `real/nsys-ai/mfu_2gpu_before.sqlite`) imported twice: its kernel rows
/// hold every launch (counted against plain SQL), and a run compared with
/// itself is never slower or faster.
#[test]
fn a_real_capture_diffed_with_itself_is_unchanged_and_its_kernel_samples_are_every_launch() {
    let test = "a_real_capture_diffed_with_itself_is_unchanged_and_its_kernel_samples_are_every_launch";
    let root = tempfile::tempdir().unwrap();
    let Some(db) = common::corpus_copy(test, "real/nsys-ai/mfu_2gpu_before.sqlite", root.path()) else { return };
    let import = |name: &str| {
        let out = root.path().join(name);
        common::import_nsys(&db, &out, &[]);
        out
    };
    // Importing loads both cores: not while another test times a workload.
    let (a, b) = {
        let _t = timing();
        (import("a"), import("b"))
    };
    let samples = json(&a.join("nsys/samples.json"));
    let conn = rusqlite::Connection::open(&db).unwrap();
    for k in samples["kernels"].as_array().unwrap() {
        let name = k["name"].as_str().unwrap();
        let (calls, min, max): (i64, i64, i64) = conn
            .query_row(
                "SELECT COUNT(*), MIN(k.end - k.start), MAX(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k \
                 JOIN StringIds s ON s.id = k.demangledName WHERE s.value = ?1",
                [name],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
            )
            .unwrap();
        let got: Vec<i64> = k["samples_ns"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
        assert_eq!(k["calls"].as_i64(), Some(calls), "{name}");
        assert_eq!(got.len() as i64, calls.min(10_000), "{name}");
        assert_eq!((got[0], *got.last().unwrap()), (min, max), "{name}");
    }
    let out = llmperf().arg("diff").arg(&a).arg(&b).args(["--top", "5"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let d = json(&b.join("diff/diff.json"));
    let rows = d["rows"].as_array().unwrap();
    let kernels = rows.iter().filter(|r| r["source"] == "kernel").count();
    assert_eq!(kernels, 5);
    assert!(rows.iter().any(|r| r["source"] == "nsys"));
    let (mut unchanged, mut judged) = (0, 0);
    for r in rows {
        // The same samples: a change of exactly 0, never slower or faster. A
        // row whose instances are bimodal (a kernel of both prefill and
        // decode: 0.15 ms and 7.9 ms) has an unstable median, and its
        // interval is wide even against itself: inconclusive, not unchanged.
        let v = r["verdict"].as_str().unwrap();
        assert!(v == "unchanged" || v == "inconclusive", "{r}");
        if r["change"].is_object() {
            assert_eq!(r["change"]["change_pct"], 0.0, "{r}");
        }
        // PyTorch names every operator instance apart (`aten::mul, op_id = 317177`):
        // single-instance regions, too few samples for a verdict.
        let enough = r["a"]["samples"].as_u64().unwrap_or(0) >= 10;
        unchanged += usize::from(v == "unchanged");
        judged += usize::from(enough);
    }
    assert!(judged > 0 && unchanged * 2 > judged, "most rows with 10 samples are unchanged: {unchanged} of {judged}");
}

/// ncu metrics of the same regions in two runs, side by side: the
/// DeepSeek-OCR ncu CSVs (corpus) imported into two runs.
#[test]
fn ncu_metrics_of_regions_both_runs_profiled_are_side_by_side() {
    let test = "ncu_metrics_of_regions_both_runs_profiled_are_side_by_side";
    let root = tempfile::tempdir().unwrap();
    let Some(csvs) = common::dsocr_ncu(test, root.path()) else { return };
    let import = |name: &str| {
        let out = root.path().join(name);
        llmperf().args(["import", "ncu"]).args(&csvs).arg("-o").arg(&out).assert().success();
        out
    };
    let (a, b) = {
        let _t = timing();
        (import("a"), import("b"))
    };
    llmperf().arg("diff").arg(&a).arg(&b).assert().success();
    let d = json(&b.join("diff/diff.json"));
    let report = json(&a.join("ncu/regions/report.json"));
    let scope = report["scopes"].as_array().unwrap().iter().find(|s| s["scope"] == "aggregate").unwrap();
    let expected: usize = scope["regions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["metrics"].as_array().unwrap().iter().filter(|m| m["value"].is_number()).count())
        .sum();
    let ncu = d["ncu"].as_array().unwrap();
    assert!(expected > 0);
    assert_eq!(ncu.len(), expected);
    assert!(ncu.iter().all(|m| m["a"] == m["b"] && (m["change_pct"] == 0.0 || m["change_pct"].is_null())), "{ncu:?}");
    let md = std::fs::read_to_string(b.join("diff/diff.md")).unwrap();
    assert!(md.contains("## ncu metrics of regions both runs profiled"), "{md}");
}
