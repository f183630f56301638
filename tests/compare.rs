//! `llmperf diff` and `llmperf check` on runs made here: the same
//! configuration twice (no regression), the regions demo with extra work in
//! `B` (exactly `B` slower), too few samples (inconclusive), nothing profiled,
//! missing regions, budgets with mistakes, JUnit and the step summary.

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::common::{import_nsys, json, llmperf, nsys_lock, run_dir};

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

/// A copy of `run` at `to` whose workload samples of each region are
/// multiplied by `factor(region)`: our own run, edited as a test needs.
fn scaled_copy(run: &Path, to: &Path, factor: impl Fn(&str) -> f64) -> PathBuf {
    crate::common::copy_dir(run, to);
    let path = to.join("workload/timings.json");
    let mut t: serde_json::Value = json(&path);
    for (region, series) in t["samples_ms"].as_object_mut().unwrap() {
        let f = factor(region);
        for v in series.as_array_mut().unwrap() {
            *v = serde_json::json!(v.as_f64().unwrap() * f);
        }
    }
    std::fs::write(&path, serde_json::to_string_pretty(&t).unwrap()).unwrap();
    to.to_path_buf()
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
        // This 2-core machine is shared: a whole run moves by ±40% at times
        // (docs/ci.md), which the gate rightly calls a finding. The pairs
        // here ask whether rows moving alone raise false alarms.
        let (code, c, stderr) = check(&b, &a, &["--budgets", BUDGETS, "--discount-shift"]);
        let o = outcomes(&c);
        assert_eq!(o.len(), 3, "{o:?}");
        rows += o.len();
        if code != 0 {
            regressions.push(format!("pair {pair}: exit {code}: {stderr}"));
        }
    }
    assert_eq!(rows, 30);
    // On this shared 2-core machine one region of a pair can move 35% by itself (seen once in
    // ten pairs with the Hodges-Lehmann interval, 2026-11-25, at the old 25% budget): at most
    // one pair of ten.
    assert!(regressions.len() <= 1, "{regressions:#?}");
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
        // Two runs on this shared machine: it may move as a whole between them (docs/ci.md).
        .args(["--budgets", BUDGETS, "--discount-shift", "--junit"])
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
    // The top only catches a wrong scale (a unit off by 1000): make test on
    // 2026-11-29, both cores busy, measured +619% (7.2x) for one run.
    let change = row(&c, "workload", "B")["row"]["change"]["change_pct"].as_f64().unwrap();
    assert!((100.0..1500.0).contains(&change), "B changed {change}%");
    assert!(row(&c, "workload", "B")["row"]["change"]["ci_low_pct"].as_f64().unwrap() > 0.0);
    for name in ["A", "A::A1"] {
        assert_ne!(row(&c, "workload", name)["outcome"], "regression", "{name}");
    }
    // JUnit: three cases, one failure, named by source and region.
    let xml = std::fs::read_to_string(&junit).unwrap();
    // A and A::A1 did not change: pass, or (this machine's noise) inconclusive, which JUnit
    // skips; only B fails.
    let suite =
        regex::Regex::new(r#"<testsuite name="llmperf check" tests="3" skipped="[0-2]" errors="0" failures="1">"#)
            .unwrap();
    assert!(suite.is_match(&xml), "{xml}");
    let b_case = xml.split("<testcase").find(|c| c.contains(r#"name="workload B""#)).unwrap();
    assert!(b_case.contains("<failure message=\"regression: "), "{xml}");
    // The step summary: appended to, never replaced.
    let text = std::fs::read_to_string(&summary).unwrap();
    assert!(text.starts_with("earlier step\n# llmperf check: FAIL (exit 8)\n"), "{text}");
    assert!(text.contains("| ❌ regression | workload | `B` |"), "{text}");
    // check.json is what specs/ says.
    llmperf().arg("validate").arg(&slow).assert().success();
}

/// Three calls per region: too few for an interval. Against itself each
/// instance equals its counterpart: unchanged, even with --strict. Against a
/// copy whose B calls took 1.5 times as long and the others did not move: B
/// stands apart from the run's other rows, a regression. With A::A1 0.6 times
/// as long too, the rows disagree among themselves: inconclusive, failing
/// only with --strict.
#[test]
fn too_few_samples_are_inconclusive_and_fail_only_with_strict() {
    let root = tempfile::tempdir().unwrap();
    let a = {
        let _t = timing();
        workload(root.path(), &["infer.iters=3"])
    };
    let (code, c, stderr) = check(&a, &a, &["--strict"]);
    assert_eq!(code, 0, "{stderr}");
    for (_, name, outcome) in outcomes(&c) {
        assert_eq!(outcome, "pass", "{name}");
    }
    let scaled = |dir: &str, factors: &[(&str, f64)]| {
        let f = |region: &str| factors.iter().find(|(r, _)| *r == region).map_or(1.0, |(_, f)| *f);
        scaled_copy(&a, &root.path().join(dir), f)
    };
    let apart = scaled("apart", &[("B", 1.5)]);
    let (code, c, stderr) = check(&apart, &a, &[]);
    assert_eq!(code, 8, "{stderr}");
    assert_eq!(row(&c, "workload", "B")["outcome"], "regression");
    assert!(row(&c, "workload", "B")["row"]["reason"]
        .as_str()
        .unwrap()
        .contains("too few for an interval, but +50.0%"));

    let b = scaled("b", &[("B", 1.5), ("A::A1", 0.6)]);
    let (code, c, _) = check(&b, &a, &[]);
    assert_eq!(code, 0);
    assert_eq!(row(&c, "workload", "B")["outcome"], "inconclusive");
    assert!(row(&c, "workload", "B")["row"]["reason"]
        .as_str()
        .unwrap()
        .starts_with("too few samples: 3 in A, 3 in B, 10 needed"));
    let (code, c, stderr) = check(&b, &a, &["--strict"]);
    assert_eq!(code, 8, "{stderr}");
    assert_eq!(c["checks"].as_array().unwrap().iter().filter(|x| x["fails"] == true).count(), 2);
    assert!(stderr.contains("inconclusive workload B"), "{stderr}");
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
    crate::common::copy_dir(&other, &empty);
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
    // A FIFO no one writes to, or a directory, as the budgets file: refused at once, never waited on.
    let fifo = root.path().join("budgets.fifo");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    for not_a_file in [&fifo, &root.path().to_path_buf()] {
        let out = llmperf()
            .arg("check")
            .arg(&run)
            .arg("--baseline")
            .arg(&run)
            .arg("--budgets")
            .arg(not_a_file)
            .timeout(std::time::Duration::from_secs(60))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("is not a regular file") && stderr.contains("hint:"), "{stderr}");
    }
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
///
/// Finding B is asserted on every capture. That nothing else is called
/// slower is a false-alarm claim about wall time on this shared 2-core
/// machine, where one unchanged region can move by itself beyond the budget
/// (CI, 2026-11-26 and 2026-11-27: `A` of an unchanged run "slower"); such a
/// false alarm gets one fresh set of captures, and a second one fails the
/// test. The false-alarm rate itself is measured by
/// `bench/check_false_alarms.sh`, not here.
#[test]
fn diff_and_check_of_nsys_captures_find_the_slowed_region() {
    let mut alarms = Vec::new();
    for attempt in 1..=2 {
        match captures_find_the_slowed_region() {
            Ok(()) => return,
            Err(alarm) => {
                eprintln!("attempt {attempt}: a false alarm on an unchanged region: {alarm}");
                alarms.push(alarm);
            }
        }
    }
    panic!("false alarms in both sets of captures: {alarms:#?}");
}

/// One set of three captures: panics when B is not found; `Err` names a
/// false alarm on a region that did not change.
fn captures_find_the_slowed_region() -> Result<(), String> {
    let root = tempfile::tempdir().unwrap();
    let profile = |extra: &str| {
        let out = llmperf()
            .args(["profile", "--model", "nvtx_regions", "--no-ncu", "infer.iters=30", extra])
            .args(crate::common::NSYS_HANG)
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

    // Three captures on this shared 2-core machine: the whole run can move by tens of percent
    // between them (docs/ci.md), which diff reports as a shift; the question here is which
    // region moved apart from it. diff's threshold is the shared-CPU budget's 50%, and B with
    // 4 matmuls instead of 1 is several times that.
    let out =
        llmperf().arg("diff").arg(&a).arg(&slow).args(["--discount-shift", "--relative-pct", "50"]).output().unwrap();
    assert_eq!(out.status.code(), Some(0));
    let stdout = String::from_utf8(out.stdout).unwrap();
    assert!(stdout.contains("## Regions: range instances in the timeline (NVTX in nsys/samples.json"), "{stdout}");
    let d = json(&slow.join("diff/diff.json"));
    let verdict = |source: &str, name: &str| {
        d["rows"].as_array().unwrap().iter().find(|r| r["source"] == source && r["name"] == name).unwrap()["verdict"]
            .as_str()
            .unwrap()
            .to_string()
    };
    assert_eq!(verdict("nsys", "B"), "slower");
    assert_eq!(verdict("workload", "B"), "slower");
    let md = std::fs::read_to_string(slow.join("diff/diff.md")).unwrap();
    assert_eq!(md, stdout);
    let html = std::fs::read_to_string(slow.join("diff/diff.html")).unwrap();
    assert!(html.starts_with("<!DOCTYPE html>") && html.contains("<td><code>B</code></td>"), "{html}");
    for source in ["nsys", "workload"] {
        for name in ["A", "A::A1"] {
            if verdict(source, name) == "slower" {
                return Err(format!("diff: {source} {name} slower\n{stdout}"));
            }
        }
    }
    assert_eq!(html.matches("<b>slower</b>").count(), 2, "{html}");

    let (code, c, _) = check(&slow, &a, &["--budgets", BUDGETS, "--discount-shift"]);
    assert_eq!(code, 8);
    let failing: Vec<_> = outcomes(&c).into_iter().filter(|o| o.2 == "regression").map(|o| (o.0, o.1)).collect();
    assert!(failing.contains(&("workload".into(), "B".into())) && failing.contains(&("nsys".into(), "B".into())));
    if failing != [("workload".to_string(), "B".to_string()), ("nsys".into(), "B".into())] {
        return Err(format!("check of the slowed run: {failing:?} failed"));
    }
    let (code, c, stderr) = check(&b, &a, &["--budgets", BUDGETS, "--discount-shift"]);
    assert_eq!(outcomes(&c).len(), 6);
    if code != 0 {
        return Err(format!("check of an unchanged run: exit {code}: {stderr}"));
    }
    Ok(())
}

/// A real two-process capture (torchrun on two H100s, nsys 2026.2; corpus
/// `real/nsys-ai/mfu_2gpu_before.sqlite`) imported twice: its kernel rows
/// hold every launch (counted against plain SQL), and a run compared with
/// itself is never slower or faster.
#[test]
fn a_real_capture_diffed_with_itself_is_unchanged_and_its_kernel_samples_are_every_launch() {
    let test = "a_real_capture_diffed_with_itself_is_unchanged_and_its_kernel_samples_are_every_launch";
    let root = tempfile::tempdir().unwrap();
    let Some(db) = crate::common::corpus_copy(test, "real/nsys-ai/mfu_2gpu_before.sqlite", root.path()) else { return };
    let import = |name: &str| {
        let out = root.path().join(name);
        crate::common::import_nsys(&db, &out, &[]);
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
    let Some(csvs) = crate::common::dsocr_ncu(test, root.path()) else { return };
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

/// The two-process H100 capture of the corpus (`real/nsys-ai/mfu_2gpu_before.sqlite`)
/// and copies of it edited with SQL, each imported: the run `name` whose
/// flash-attention kernels take `factor` times as long (1: unedited).
fn flash_copy(test: &str, root: &Path, name: &str, factor: f64) -> Option<PathBuf> {
    let dir = root.join(format!("{name}.db"));
    std::fs::create_dir_all(&dir).unwrap();
    let db = crate::common::corpus_copy(test, "real/nsys-ai/mfu_2gpu_before.sqlite", &dir)?;
    if factor != 1.0 {
        let conn = rusqlite::Connection::open(&db).unwrap();
        let edited = conn
            .execute(
                "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start + CAST(?1 * (end - start) AS INTEGER) \
                 WHERE demangledName IN (SELECT id FROM StringIds WHERE value LIKE 'void flash::flash_fwd_kernel<%')",
                [factor],
            )
            .unwrap();
        assert_eq!(edited, 68);
    }
    let out = root.join(name);
    let _t = timing();
    crate::common::import_nsys(&db, &out, &[]);
    Some(out)
}

/// Per process, the GPU time of each `FlashAttnFunc` instance by plain SQL:
/// the kernels whose launch call (one runtime row per correlation id and
/// process) began inside the range on its thread. Sorted, as samples.json keeps them.
fn flash_gpu_by_sql(db: &Path) -> std::collections::BTreeMap<i64, Vec<i64>> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT (n.globalTid >> 24) & 16777215, COALESCE((SELECT SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k \
               WHERE k.globalPid >> 24 = n.globalTid >> 24 AND k.correlationId IN (SELECT r.correlationId \
               FROM CUPTI_ACTIVITY_KIND_RUNTIME r WHERE r.globalTid = n.globalTid AND r.start >= n.start AND r.start < n.end)), 0) \
             FROM NVTX_EVENTS n WHERE n.eventType = 59 AND (n.text = 'FlashAttnFunc' OR n.text LIKE 'FlashAttnFunc,%')",
        )
        .unwrap();
    let mut by: std::collections::BTreeMap<i64, Vec<i64>> = Default::default();
    for row in stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?))).unwrap() {
        let (pid, ns) = row.unwrap();
        by.entry(pid).or_default().push(ns);
    }
    by.values_mut().for_each(|v| v.sort());
    by
}

/// Issue 28's capture: every flash-attention kernel twice as long (68
/// launches, +272 ms, half of the GPU time) fails the check, naming the
/// kernel and the region around it by its GPU time; ×1.25 fails too; the
/// unedited copy passes with and without --strict. Each instance's GPU time
/// in samples.json equals plain SQL on the export.
#[test]
fn slower_flash_attention_kernels_fail_the_check_naming_the_kernel_and_its_region() {
    let test = "slower_flash_attention_kernels_fail_the_check_naming_the_kernel_and_its_region";
    let root = tempfile::tempdir().unwrap();
    let Some(base) = flash_copy(test, root.path(), "base", 1.0) else { return };
    let same = flash_copy(test, root.path(), "same", 1.0).unwrap();
    let doubled = flash_copy(test, root.path(), "doubled", 2.0).unwrap();
    let quarter = flash_copy(test, root.path(), "quarter", 1.25).unwrap();

    let oracle = flash_gpu_by_sql(&root.path().join("base.db/mfu_2gpu_before.sqlite"));
    let samples = json(&base.join("nsys/samples.json"));
    let got: std::collections::BTreeMap<i64, Vec<i64>> = samples["regions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["path"] == "FlashAttnFunc")
        .map(|r| {
            let v = r["gpu_samples_ns"].as_array().unwrap().iter().map(|v| v.as_i64().unwrap()).collect();
            (r["process_id"].as_i64().unwrap(), v)
        })
        .collect();
    assert_eq!(got, oracle);
    assert_eq!(got.values().map(Vec::len).sum::<usize>(), 67);

    let kernel = "regression kernel void flash::flash_fwd_kernel<";
    for (run, pct) in [(&doubled, "+100.0%"), (&quarter, "+25.0%")] {
        let (code, c, stderr) = check(run, &base, &[]);
        assert_eq!(code, 8, "{stderr}");
        assert!(stderr.contains(&format!("regression gpu FlashAttnFunc {pct}")), "{stderr}");
        assert!(stderr.contains(kernel), "{stderr}");
        // The region's NVTX wall time did not move (the capture's CPU side is unedited).
        assert_eq!(row(&c, "nsys", "FlashAttnFunc")["outcome"], "pass");
        let md = std::fs::read_to_string(run.join("check/check.md")).unwrap();
        assert!(md.contains("Failing rows by kind: 2 gpu, 1 kernel."), "{md}");
        let failing: Vec<_> = outcomes(&c).into_iter().filter(|o| o.2 != "pass").map(|o| (o.0, o.1)).collect();
        assert_eq!(failing.len(), 3, "{failing:?}");
    }
    for strict in [&[][..], &["--strict"][..]] {
        let (code, c, stderr) = check(&same, &base, strict);
        assert_eq!(code, 0, "{strict:?}: {stderr}");
        assert!(outcomes(&c).iter().all(|o| o.2 == "pass"), "{strict:?}");
        assert!(outcomes(&c).len() > 400);
    }
}

/// The FSDP capture against a copy whose most common cuBLASLt GEMM
/// (`nvjet_tst_192x192…`) takes 1.3 times as long: `aten::linear`'s GPU time
/// changes by the change of its summed GPU time, which SQL gives (each
/// instance's kernels by their launch calls inside it: +11.41 ms), not by its
/// median ratio times its total (+29.3% of it: +16.90 ms, as before); and the
/// failing rows come first in check.json, check.md, stdout and the JUnit file.
#[test]
fn slower_gemms_change_a_region_by_the_change_of_its_summed_gpu_time_failing_rows_first() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some(base) = flash_copy(&test, root.path(), "base", 1.0) else { return };
    let dir = root.path().join("slow.db");
    std::fs::create_dir_all(&dir).unwrap();
    let db = crate::common::corpus_copy(&test, "real/nsys-ai/mfu_2gpu_before.sqlite", &dir).unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    let edited = conn
        .execute(
            "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start + CAST(1.3 * (end - start) AS INTEGER) \
             WHERE shortName IN (SELECT id FROM StringIds WHERE value LIKE 'nvjet_tst_192x192%')",
            [],
        )
        .unwrap();
    assert_eq!(edited, 235);
    drop(conn);
    let slow = root.path().join("slow");
    crate::common::import_nsys(&db, &slow, &[]);
    // SQL: the GPU time of the kernels launched inside every top-level `aten::linear`.
    let linear_gpu = |db: &Path| -> i64 {
        rusqlite::Connection::open(db)
            .unwrap()
            .query_row(
                "WITH calls AS MATERIALIZED (SELECT correlationId AS cid, (globalTid >> 24) & 16777215 AS pid, MIN(globalTid) AS tid, MIN(start) AS t
                                             FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY 1, 2),
                      named AS MATERIALIZED (SELECT rowid AS id, globalTid AS tid, start AS ws, end AS we, text FROM NVTX_EVENTS WHERE eventType = 59),
                      nested AS MATERIALIZED (SELECT *, MAX(we) OVER (PARTITION BY tid ORDER BY ws, we DESC, id ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before FROM named),
                      top AS MATERIALIZED (SELECT * FROM nested WHERE (before IS NULL OR ws >= before) AND (text = 'aten::linear' OR text LIKE 'aten::linear,%'))
                 SELECT SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k
                 JOIN calls c ON c.cid = k.correlationId AND c.pid = (k.globalPid >> 24) & 16777215
                 JOIN top w ON w.tid = c.tid AND w.ws <= c.t AND c.t < w.we",
                [],
                |r| r.get(0),
            )
            .unwrap()
    };
    let want_ms = (linear_gpu(&db) - linear_gpu(&root.path().join("base.db/mfu_2gpu_before.sqlite"))) as f64 / 1e6;
    assert!((11.0..12.0).contains(&want_ms), "{want_ms}");
    let junit = root.path().join("check.xml");
    let out =
        llmperf().arg("check").arg(&slow).arg("--baseline").arg(&base).arg("--junit").arg(&junit).output().unwrap();
    assert_eq!(out.status.code(), Some(8));
    let c = json(&slow.join("check/check.json"));
    let linear = row(&c, "gpu", "aten::linear");
    assert_eq!(linear["outcome"], "regression");
    let delta = linear["row"]["change"]["delta_ms"].as_f64().unwrap();
    assert!((delta - want_ms).abs() < 1e-6, "{delta} vs SQL {want_ms}");
    // Failing rows first, everywhere.
    let fails: Vec<bool> = c["checks"].as_array().unwrap().iter().map(|x| x["fails"].as_bool().unwrap()).collect();
    let n = fails.iter().filter(|f| **f).count();
    assert!(n > 0 && fails[..n].iter().all(|f| *f), "{fails:?}");
    let md = std::fs::read_to_string(slow.join("check/check.md")).unwrap();
    let rows: Vec<&str> =
        md.lines().filter(|l| l.starts_with("| ✅") || l.starts_with("| ❌") || l.starts_with("| ⚠️")).collect();
    assert!(rows[..n].iter().all(|l| l.starts_with("| ❌")), "{md}");
    assert!(rows.iter().any(|l| l.contains(&format!("(+{want_ms:.3} ms)")) && l.contains("`aten::linear`")), "{md}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let first = stdout.lines().find(|l| l.starts_with("| ✅") || l.starts_with("| ❌")).unwrap();
    assert!(first.starts_with("| ❌"), "{stdout}");
    let xml = std::fs::read_to_string(&junit).unwrap();
    let first_case = xml.find("<testcase").unwrap();
    assert!(xml[first_case..].split("</testcase>").next().unwrap().contains("<failure"), "{xml}");
}

/// A gate fails closed: a baseline or run that cannot be read is an error
/// naming the file (exit 6), a run whose own status is failed is no
/// measurement (exit 5), comparing nothing is exit 7 unless
/// --allow-empty-baseline says a first run is expected.
#[test]
fn an_unreadable_or_failed_baseline_never_passes() {
    let test = "an_unreadable_or_failed_baseline_never_passes";
    let root = tempfile::tempdir().unwrap();
    let Some(run) = flash_copy(test, root.path(), "run", 1.0) else { return };
    let samples = std::fs::read_to_string(run.join("nsys/samples.json")).unwrap();
    let first_ns = samples.split("\"samples_ns\": [").nth(1).unwrap().split(',').next().unwrap().trim().to_string();
    type Edit<'a> = Box<dyn Fn(&Path) + 'a>;
    let variants: Vec<(&str, Edit)> = vec![
        ("garbage", Box::new(|p| std::fs::write(p, "garbage").unwrap())),
        ("truncated", Box::new(|p| std::fs::write(p, &samples[..samples.len() / 2]).unwrap())),
        ("empty", Box::new(|p| std::fs::write(p, "").unwrap())),
        ("NaN", Box::new(|p| std::fs::write(p, samples.replacen(&first_ns, "NaN", 1)).unwrap())),
        ("past u64", Box::new(|p| std::fs::write(p, samples.replacen(&first_ns, "99999999999999999999", 1)).unwrap())),
        ("negative", Box::new(|p| std::fs::write(p, samples.replacen(&first_ns, "-5", 1)).unwrap())),
        ("a float", Box::new(|p| std::fs::write(p, samples.replacen(&first_ns, "1.5", 1)).unwrap())),
        (
            "a directory",
            Box::new(|p| {
                std::fs::remove_file(p).unwrap();
                std::fs::create_dir(p).unwrap();
            }),
        ),
    ];
    for (i, (what, edit)) in variants.iter().enumerate() {
        let base = root.path().join(format!("base{i}"));
        crate::common::copy_dir(&run, &base);
        edit(&base.join("nsys/samples.json"));
        for (r, b) in [(&run, &base), (&base, &run)] {
            let out = llmperf().arg("check").arg(r).arg("--baseline").arg(b).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(6), "{what}: {stderr}");
            assert!(stderr.contains(&format!("{}: ", base.join("nsys/samples.json").display())), "{what}: {stderr}");
            assert!(stderr.contains("hint: the run directory is damaged or incomplete"), "{what}: {stderr}");
        }
    }
    // The workload's timings or ncu's region report there but unreadable.
    for file in ["workload/timings.json", "ncu/regions/report.json"] {
        let base = root.path().join(file.replace('/', "_"));
        crate::common::copy_dir(&run, &base);
        std::fs::create_dir_all(base.join(file).parent().unwrap()).unwrap();
        std::fs::write(base.join(file), "{\"schema\": ").unwrap();
        let out = llmperf().arg("check").arg(&run).arg("--baseline").arg(&base).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(6), "{file}: {stderr}");
        assert!(stderr.contains(&format!("{}: EOF while parsing", base.join(file).display())), "{file}: {stderr}");
    }
    // A baseline whose run failed.
    let failed = root.path().join("failed");
    crate::common::copy_dir(&run, &failed);
    let manifest = std::fs::read_to_string(failed.join("manifest.json")).unwrap();
    std::fs::write(failed.join("manifest.json"), manifest.replacen("\"status\": \"ok\"", "\"status\": \"failed\"", 1))
        .unwrap();
    for (r, b, which) in [(&run, &failed, "baseline"), (&failed, &run, "run")] {
        let out = llmperf().arg("check").arg(r).arg("--baseline").arg(b).output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(5), "{stderr}");
        let named = if which == "run" { r } else { b };
        assert!(stderr.contains(&format!("the {which} {} ended failed", named.display())), "{stderr}");
    }
    // A baseline with nothing in common: nothing compared is no pass.
    let other = root.path().join("other");
    crate::common::copy_dir(&run, &other);
    std::fs::remove_file(other.join("nsys/samples.json")).unwrap();
    std::fs::remove_file(other.join("nsys/regions.json")).unwrap();
    let (code, c, stderr) = check(&run, &other, &[]);
    assert_eq!(code, 7, "{stderr}");
    assert_eq!(c["status"], "fail");
    assert!(stderr.contains("error: nothing compared"), "{stderr}");
    assert!(stderr.contains("--allow-empty-baseline"), "{stderr}");
    let (code, c, stderr) = check(&run, &other, &["--allow-empty-baseline"]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(c["status"], "pass");
    // No baseline at all: an error, or with --allow-empty-baseline a pass with a note.
    let none = root.path().join("no-baseline-yet");
    let out = llmperf().arg("check").arg(&run).arg("--baseline").arg(&none).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    let (code, c, stderr) = check(&run, &none, &["--allow-empty-baseline"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(c["notes"][0].as_str().unwrap().contains("no baseline at"), "{c}");
    assert!(c["new"].as_array().unwrap().len() > 400);
}

/// `--junit` names a FIFO (or a link to one, as /dev/stdout is): written in
/// place, the FIFO still a FIFO; one that no one reads is refused, not waited on.
#[test]
fn junit_into_a_fifo_writes_through_it_and_never_replaces_it() {
    use std::os::unix::fs::FileTypeExt;
    let root = tempfile::tempdir().unwrap();
    let run = {
        let _t = timing();
        workload(root.path(), &["infer.iters=12"])
    };
    let fifo = root.path().join("junit.fifo");
    let link = root.path().join("junit.link");
    let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    std::os::unix::fs::symlink(&fifo, &link).unwrap();
    for target in [&fifo, &link] {
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read_to_string(fifo).unwrap())
        };
        let out =
            llmperf().arg("check").arg(&run).arg("--baseline").arg(&run).arg("--junit").arg(target).output().unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
        let xml = reader.join().unwrap();
        assert!(xml.contains("<testsuite name=\"llmperf check\""), "{xml}");
        assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
        assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    }
    let out = llmperf()
        .arg("check")
        .arg(&run)
        .arg("--baseline")
        .arg(&run)
        .arg("--junit")
        .arg(&fifo)
        .timeout(std::time::Duration::from_secs(60))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("is a FIFO that no one reads"), "{stderr}");
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
}

/// A region named by a hostile program (a comment opener, a backtick, a
/// pipe, a newline, a terminal escape): SQL renames `FlashAttnFunc` in a copy
/// of the real capture. Every Markdown line of check and diff (stdout, the
/// files, the step summary) holds it as one code span, no control character
/// reaches the terminal, and each table row keeps its columns.
#[test]
fn hostile_region_names_cannot_break_markdown_or_the_terminal() {
    let test = "hostile_region_names_cannot_break_markdown_or_the_terminal";
    let root = tempfile::tempdir().unwrap();
    let Some(base) = flash_copy(test, root.path(), "base", 1.0) else { return };
    let hostile = "<!-- x`|y\n\u{1b}]0;pwned\u{7}\u{1b}[2J";
    let db = root.path().join("hostile.db/mfu_2gpu_before.sqlite");
    std::fs::create_dir_all(db.parent().unwrap()).unwrap();
    std::fs::copy(root.path().join("base.db/mfu_2gpu_before.sqlite"), &db).unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    let renamed = conn
        .execute(
            "UPDATE NVTX_EVENTS SET text = ?1 WHERE text = 'FlashAttnFunc' OR text LIKE 'FlashAttnFunc,%'",
            [hostile],
        )
        .unwrap();
    assert_eq!(renamed, 67);
    drop(conn);
    let run = root.path().join("hostile");
    crate::common::import_nsys(&db, &run, &[]);
    let summary = root.path().join("summary.md");
    let out = llmperf()
        .arg("check")
        .arg(&run)
        .arg("--baseline")
        .arg(&base)
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(8), "the renamed region is missing from the run");
    let diff = llmperf().arg("diff").arg(&base).arg(&run).output().unwrap();
    let texts = [
        ("check stdout", String::from_utf8(out.stdout).unwrap()),
        ("check.md", std::fs::read_to_string(run.join("check/check.md")).unwrap()),
        ("step summary", std::fs::read_to_string(&summary).unwrap()),
        ("diff stdout", String::from_utf8(diff.stdout).unwrap()),
        ("diff.md", std::fs::read_to_string(run.join("diff/diff.md")).unwrap()),
    ];
    let span = llmperf::markdown::code(hostile);
    // The import's own Markdown (report.md, kernels.md, operators.md, the
    // summary): no control character, no comment opener outside a code span.
    for file in ["report.md", "kernels.md", "operators.md", "stakeholder_summary.md"] {
        let md = std::fs::read_to_string(run.join(file)).unwrap();
        assert!(!md.chars().any(|c| c.is_control() && c != '\n'), "{file}: a control character");
        for line in md.lines() {
            assert!(!crate::common::outside_code_spans(line).contains("<!--"), "{file}: {line}");
        }
    }
    for (what, md) in &texts {
        assert!(!md.chars().any(|c| c.is_control() && c != '\n'), "{what}: a control character");
        assert!(md.contains(&span), "{what}: {md}");
        // Each row has the cells of its own table's header (the first line of the table).
        let mut header = None;
        for line in md.lines() {
            if !line.starts_with('|') {
                header = None;
                continue;
            }
            let cells = line.replace("\\|", "").matches('|').count();
            let want = *header.get_or_insert(cells);
            assert_eq!(cells, want, "{what}: {line}");
        }
        // Outside code spans, the name's text never appears raw.
        for line in md.lines() {
            assert!(!crate::common::outside_code_spans(line).contains("<!--"), "{what}: {line}");
        }
    }
}

/// A kernel with too few launches for an interval of its own (memfusion's
/// TensorRT capture: 36 kernels, the top name launched a handful of times),
/// every launch ×1.25 by SQL on a copy: slower, judged against the capture's
/// other kernel rows, which did not move.
#[test]
fn a_kernel_with_few_launches_slowed_is_found_against_the_other_rows() {
    let test = "a_kernel_with_few_launches_slowed_is_found_against_the_other_rows";
    let root = tempfile::tempdir().unwrap();
    let Some(db) = crate::common::corpus_copy(test, "real/memfusion/report1.sqlite", root.path()) else { return };
    let base = root.path().join("base");
    crate::common::import_nsys(&db, &base, &[]);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let (name, launches): (String, i64) = conn
        .query_row(
            "SELECT s.value, COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.demangledName \
             GROUP BY k.demangledName ORDER BY SUM(k.end - k.start) DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    assert!(launches < 10, "{launches} launches: enough for an interval, not what this test is about");
    conn.execute(
        "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start + CAST(1.25 * (end - start) AS INTEGER) \
         WHERE demangledName = (SELECT id FROM StringIds WHERE value = ?1)",
        [&name],
    )
    .unwrap();
    drop(conn);
    let slow = root.path().join("slow");
    crate::common::import_nsys(&db, &slow, &[]);
    let (code, c, stderr) = check(&slow, &base, &[]);
    assert_eq!(code, 8, "{stderr}");
    let k = row(&c, "kernel", &name);
    assert_eq!(k["outcome"], "regression", "{k}");
    assert!(k["row"]["reason"].as_str().unwrap().contains("too few for an interval, but +25.0%"), "{k}");
    let (code, _, stderr) = check(&base, &base, &["--strict"]);
    assert_eq!(code, 0, "{stderr}");
}

/// Every region about 100 times slower: each row is a regression, and the
/// whole run's shift (the median change of its rows, with its factor) fails by
/// itself. `--discount-shift` is the explicit opt-out: the rows that moved with
/// the run are inconclusive and the check passes.
#[test]
fn a_whole_run_that_got_slower_fails_unless_the_shift_is_discounted() {
    let root = tempfile::tempdir().unwrap();
    let a = {
        let _t = timing();
        workload(root.path(), &["infer.iters=12"])
    };
    let b = scaled_copy(&a, &root.path().join("b"), |_| 100.0);
    let (code, c, stderr) = check(&b, &a, &[]);
    assert_eq!(code, 8, "{stderr}");
    assert!(outcomes(&c).iter().all(|o| o.2 == "regression"), "{:?}", outcomes(&c));
    let shift = &c["shifts"][0];
    assert_eq!((shift["source"].as_str(), shift["fails"].as_bool()), (Some("workload"), Some(true)));
    assert!((shift["factor"].as_f64().unwrap() - 100.0).abs() < 1.0, "{shift}");
    assert!(stderr.contains("the whole run moved +9900.0% (100.00x"), "{stderr}");
    let md = std::fs::read_to_string(b.join("check/check.md")).unwrap();
    assert!(md.contains("❌ The whole run moved +9900.0% (100.00×)"), "{md}");
    let (code, c, stderr) = check(&b, &a, &["--discount-shift"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(outcomes(&c).iter().all(|o| o.2 == "inconclusive"), "{:?}", outcomes(&c));
    assert_eq!(c["shifts"][0]["fails"], false);
}

/// How the time breakdown moved: ICON's capture (corpus) against a copy
/// whose kernels each ran twice as long (SQL on the copy), side by side per
/// region and part, the shares equal to each run's own breakdown.json.
#[test]
fn the_time_breakdown_of_two_runs_is_side_by_side() {
    let root = tempfile::tempdir().unwrap();
    let Some(db) = crate::corpus_copy!("real/isc25-icon/gpu.sqlite", root.path()) else { return };
    let slow = root.path().join("slow.sqlite");
    std::fs::copy(&db, &slow).unwrap();
    let conn = rusqlite::Connection::open(&slow).unwrap();
    conn.execute_batch("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = end + (end - start)").unwrap();
    drop(conn);
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    import_nsys(&db, &a, &[]);
    import_nsys(&slow, &b, &[]);
    llmperf().arg("diff").arg(&a).arg(&b).assert().success();
    let d = json(&b.join("diff/diff.json"));
    let rows = d["breakdown"].as_array().unwrap();
    let region = |run: &Path, name: &str| -> serde_json::Value {
        let bd = json(&run.join("nsys/breakdown.json"));
        bd["devices"][0]["regions"].as_array().unwrap().iter().find(|r| r["name"] == name).unwrap()["parts"].clone()
    };
    let (pa, pb) = (region(&a, "for_each"), region(&b, "for_each"));
    // ICON's ranges are in the STDPAR domain: rows name regions as selectors do.
    let share = |p: &serde_json::Value| 100.0 * p["compute_ns"].as_f64().unwrap() / p["wall_ns"].as_f64().unwrap();
    let row = rows.iter().find(|r| r["region"] == "STDPAR@for_each" && r["part"] == "compute").unwrap();
    assert_eq!(row["device"], "GPU 0");
    assert!((row["a_pct"].as_f64().unwrap() - share(&pa)).abs() < 1e-9, "{row}");
    assert!((row["b_pct"].as_f64().unwrap() - share(&pb)).abs() < 1e-9, "{row}");
    assert!(row["change_pp"].as_f64().unwrap() > 0.0, "{row}");
    // Every part of a row is there in one run at least; none is 0 in both.
    for r in rows {
        assert!(r["a_pct"].as_f64().unwrap_or(0.0) > 0.0 || r["b_pct"].as_f64().unwrap_or(0.0) > 0.0, "{r}");
    }
    assert!(rows.iter().any(|r| r["region"] == "(device span)"));
    let md = std::fs::read_to_string(b.join("diff/diff.md")).unwrap();
    assert!(md.contains("## How the time breakdown moved"), "{md}");
}

/// Two processes on one GPU without launcher ranks (the two-process H100
/// capture, a copy whose activity SQL moved onto device 0): each keeps its
/// own rows in the diff's breakdown, named by GPU and process, instead of
/// one overwriting the other under `GPU 0`.
#[test]
fn two_processes_on_one_gpu_keep_their_own_breakdown_rows() {
    let root = tempfile::tempdir().unwrap();
    let Some(db) = crate::corpus_copy!("real/nsys-ai/mfu_2gpu_before.sqlite", root.path()) else { return };
    let conn = rusqlite::Connection::open(&db).unwrap();
    for t in ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"] {
        conn.execute(&format!("UPDATE {t} SET deviceId = 0"), []).unwrap();
    }
    drop(conn);
    let (a, b) = (root.path().join("a"), root.path().join("b"));
    import_nsys(&db, &a, &[]);
    import_nsys(&db, &b, &[]);
    llmperf().arg("diff").arg(&a).arg(&b).assert().success();
    let bd = json(&a.join("nsys/breakdown.json"));
    let devices = bd["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2);
    let rows = json(&b.join("diff/diff.json"))["breakdown"].as_array().unwrap().clone();
    for d in devices {
        let label = format!("GPU 0, pid {}", d["process_id"]);
        let span = rows
            .iter()
            .find(|r| r["device"] == label.as_str() && r["region"] == "(device span)" && r["part"] == "compute")
            .unwrap_or_else(|| panic!("{label}: {rows:?}"));
        let p = &d["span"];
        let share = 100.0 * p["compute_ns"].as_f64().unwrap() / p["wall_ns"].as_f64().unwrap();
        assert!((span["a_pct"].as_f64().unwrap() - share).abs() < 1e-9, "{span}");
    }
}

/// A serving run of the project's own (tests/fixtures/runs: `llmperf serve`
/// of the tiny Llama, 2 or 8 layers deep, under the same load), copied.
fn serving_copy(name: &str, to: &Path) -> PathBuf {
    crate::common::copy_dir(&Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/runs").join(name), to);
    to.to_path_buf()
}

const SERVE_BUDGETS: &str = "tests/fixtures/serve/budgets-shared-cpu.yaml";

/// The samples of a serving row, counted in the run's own files with plain json.
fn serving_samples(run: &Path, source: &str, name: &str) -> usize {
    let reqs = json(&run.join("serve/requests.json"));
    let ok = reqs["requests"].as_array().unwrap().iter().filter(|r| r["error"].is_null());
    match (source, name) {
        ("request", "itl") => ok.map(|r| r["itl_ns"].as_array().unwrap().len()).sum(),
        ("request", field) => ok.filter(|r| r[format!("{field}_ns")].is_i64()).count(),
        (_, kind) => {
            let steps = json(&run.join("serve/steps.json"));
            let k = steps["kinds"].as_array().unwrap().iter().find(|k| k["kind"] == kind).unwrap();
            k[if source == "step" { "samples_ns" } else { "gpu_samples_ns" }].as_array().map_or(0, Vec::len)
        }
    }
}

#[test]
fn two_serving_runs_are_judged_on_their_requests_and_steps_and_a_deeper_model_fails_on_decode() {
    let root = tempfile::tempdir().unwrap();
    let base = serving_copy("serve_tiny_2layers", &root.path().join("base"));
    let same = serving_copy("serve_tiny_2layers", &root.path().join("same"));
    let deeper = serving_copy("serve_tiny_8layers", &root.path().join("deeper"));

    let (code, c, stderr) = check(&same, &base, &[]);
    assert_eq!(code, 0, "{stderr}");
    let judged = outcomes(&c);
    let names: Vec<String> = judged.iter().map(|o| format!("{}:{}", o.0, o.1)).collect();
    assert_eq!(
        names,
        ["request:e2e", "request:itl", "request:tpot", "request:ttft", "step:decode", "step:mixed", "step:prefill"],
        "{judged:?}"
    );
    assert!(judged.iter().all(|o| o.2 == "pass" || o.2 == "inconclusive"), "{judged:?}");
    // Every sample of the run's own files is a sample of its row (no
    // request failed; the empty steps are no step kind to compare).
    for (source, name, _) in &judged {
        let r = &row(&c, source, name)["row"];
        assert_eq!(r["b"]["samples"].as_u64(), Some(serving_samples(&same, source, name) as u64), "{source}:{name}");
    }
    assert_eq!(row(&c, "request", "ttft")["row"]["b"]["samples"], 16);
    // A chunk may carry more than one token: at most 15 gaps per request of 16 tokens.
    assert!(row(&c, "request", "itl")["row"]["b"]["samples"].as_u64().unwrap() <= 16 * 15);

    // 8 layers instead of 2: the decode steps fail, with the budgets a shared CPU needs too.
    for budgets in [vec![], vec!["--budgets", SERVE_BUDGETS]] {
        let (code, c, stderr) = check(&deeper, &base, &budgets);
        assert_eq!(code, 8, "{budgets:?}: {stderr}");
        let decode = row(&c, "step", "decode");
        assert_eq!((decode["outcome"].as_str(), decode["fails"].as_bool()), (Some("regression"), Some(true)));
        assert!(decode["row"]["change"]["change_pct"].as_f64().unwrap() > 300.0, "{decode}");
        let notes = c["notes"].to_string();
        assert!(
            notes.contains("A served /tmp/llmperf-serve-gate/model, B served /tmp/llmperf-serve-gate/slow"),
            "{notes}"
        );
    }
}

#[test]
fn serving_runs_under_different_loads_are_compared_by_no_row_and_say_which_setting_differs() {
    let root = tempfile::tempdir().unwrap();
    let base = serving_copy("serve_tiny_2layers", &root.path().join("base"));
    let edit = |run: &Path, f: &dyn Fn(&mut serde_json::Value)| {
        let path = run.join("serve/requests.json");
        let mut v = json(&path);
        f(&mut v);
        std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    };
    // The 8-layer run, its load said to be 8 at a time: six times slower, and still no regression.
    let deeper = serving_copy("serve_tiny_8layers", &root.path().join("deeper"));
    edit(&deeper, &|v| v["load"]["concurrency"] = 8.into());
    let (code, c, stderr) = check(&deeper, &base, &[]);
    assert_ne!(code, 0, "{stderr}");
    assert_ne!(code, 8, "{stderr}");
    assert_eq!(code, 7, "{stderr}");
    assert!(
        stderr.contains("nothing compared") && stderr.contains(": the loads differ (concurrency 4 → 8)"),
        "{stderr}"
    );
    assert!(c["unlike_loads"].as_str().unwrap().starts_with("the loads differ (concurrency 4 → 8)"), "{c:#}");
    for (source, name, outcome) in outcomes(&c) {
        let r = &row(&c, &source, &name)["row"];
        assert_eq!(outcome, "inconclusive", "{source}:{name}");
        assert!(r["change"].is_null() && r["a"].is_object() && r["b"].is_object(), "{r}");
        assert!(r["reason"].as_str().unwrap().contains("the loads differ (concurrency 4 → 8)"), "{r}");
    }
    // A requests.json that records no load (an older llmperf): the same.
    let older = serving_copy("serve_tiny_8layers", &root.path().join("older"));
    edit(&older, &|v| {
        v.as_object_mut().unwrap().remove("load");
    });
    let (code, c, stderr) = check(&older, &base, &[]);
    assert_ne!(code, 8, "{stderr}");
    let reason = row(&c, "step", "decode")["row"]["reason"].as_str().unwrap().to_string();
    assert!(reason.contains("B's serve/requests.json records no load"), "{reason}");
    // The seed and the number of requests are no other load.
    let reseeded = serving_copy("serve_tiny_8layers", &root.path().join("reseeded"));
    edit(&reseeded, &|v| {
        v["load"]["seed"] = 7.into();
        v["load"]["requests"] = 64.into();
    });
    assert_eq!(check(&reseeded, &base, &[]).0, 8);
}

/// A load of 16 requests makes a few prefill and mixed steps (4 and 5 in the
/// kept run), too few for a verdict of their own: four times slower there
/// and unchanged in the 60 decode steps is no whole-run shift of the steps
/// (their median would be +300%, past any budget), and the check passes.
#[test]
fn step_kinds_with_too_few_steps_make_no_whole_run_shift() {
    let root = tempfile::tempdir().unwrap();
    let base = serving_copy("serve_tiny_2layers", &root.path().join("base"));
    let run = serving_copy("serve_tiny_2layers", &root.path().join("run"));
    let path = run.join("serve/steps.json");
    let mut steps = json(&path);
    for kind in steps["kinds"].as_array_mut().unwrap() {
        if kind["kind"] == "prefill" || kind["kind"] == "mixed" {
            for v in kind["samples_ns"].as_array_mut().unwrap() {
                *v = (v.as_i64().unwrap() * 4).into();
            }
        }
    }
    std::fs::write(&path, serde_json::to_vec(&steps).unwrap()).unwrap();
    let (code, c, stderr) = check(&run, &base, &["--budgets", SERVE_BUDGETS]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(row(&c, "step", "prefill")["outcome"], "inconclusive");
    assert!((row(&c, "step", "prefill")["row"]["change"]["change_pct"].as_f64().unwrap() - 300.0).abs() < 1.0);
    assert_eq!(row(&c, "step", "decode")["outcome"], "pass");
    assert!(c["shifts"].as_array().unwrap().iter().all(|s| s["source"] != "step"), "{:#}", c["shifts"]);
}

/// A steps.json written before the per-step samples (kinds with `steps` but
/// no `samples_ns`) gives its step rows without a comparison, inconclusive
/// with a note that says why, not rows left out in silence.
#[test]
fn a_steps_file_without_samples_makes_its_steps_inconclusive_and_says_so() {
    let root = tempfile::tempdir().unwrap();
    let base = serving_copy("serve_tiny_2layers", &root.path().join("base"));
    let run = serving_copy("serve_tiny_2layers", &root.path().join("run"));
    let path = base.join("serve/steps.json");
    let mut steps = json(&path);
    for kind in steps["kinds"].as_array_mut().unwrap() {
        let kind = kind.as_object_mut().unwrap();
        kind.remove("samples_ns");
        kind.remove("gpu_samples_ns");
    }
    std::fs::write(&path, serde_json::to_vec(&steps).unwrap()).unwrap();
    let (code, c, stderr) = check(&run, &base, &["--budgets", SERVE_BUDGETS]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(row(&c, "step", "decode")["outcome"], "inconclusive", "{c:#}");
    assert_eq!(row(&c, "request", "ttft")["outcome"], "pass", "{c:#}");
    let notes = c["notes"].as_array().unwrap();
    assert!(
        notes.iter().any(|n| n.as_str().unwrap().contains("serve/steps.json holds no per-step samples")),
        "{notes:#?}"
    );
}

/// The served model's name comes from the server (`/v1/models`): the note
/// that names it is escaped in diff.md, diff.html, check.md and the terminal.
#[test]
fn a_hostile_served_model_name_is_escaped_in_every_output() {
    let root = tempfile::tempdir().unwrap();
    let base = serving_copy("serve_tiny_2layers", &root.path().join("base"));
    let run = serving_copy("serve_tiny_8layers", &root.path().join("run"));
    let path = run.join("serve/requests.json");
    let mut v = json(&path);
    v["load"]["model"] = "<script>alert(1)</script> | `x` \u{1b}[31mred".into();
    std::fs::write(&path, serde_json::to_vec(&v).unwrap()).unwrap();
    let out = llmperf().arg("diff").arg(&base).arg(&run).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let html = std::fs::read_to_string(run.join("diff/diff.html")).unwrap();
    let md = std::fs::read_to_string(run.join("diff/diff.md")).unwrap();
    for (name, text) in [("stdout", &*stdout), ("diff.md", &*md)] {
        let line = text.lines().find(|l| l.contains("B served")).unwrap_or_else(|| panic!("{name}: {text}"));
        assert!(line.contains(r"&lt;script&gt;alert(1)&lt;/script&gt; \| \`x\`"), "{name}: {line}");
        assert!(!line.contains('\u{1b}'), "{name}: {line:?}");
    }
    assert!(html.contains("B served &lt;script&gt;alert(1)&lt;/script&gt;") && !html.contains("<script>"), "{html}");
    let (_, _, stderr) = check(&run, &base, &[]);
    let md = std::fs::read_to_string(run.join("check/check.md")).unwrap();
    assert!(md.contains(r"B served &lt;script&gt;alert(1)&lt;/script&gt; \|"), "{md}");
    assert!(!md.contains('\u{1b}') && !stderr.contains('\u{1b}'), "{stderr:?}");
}
