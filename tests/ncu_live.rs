//! `llmperf profile --replay-mode ...` under the real Nsight Compute 2022.3
//! installed by setup.sh. There is no GPU here: ncu runs the workload, matches
//! its NVTX ranges and reports that nothing was profiled; llmperf must say so
//! and invent nothing.
use crate::common::*;
use assert_cmd::assert::OutputAssertExt;
use predicates::prelude::*;

#[test]
fn range_replay_on_the_regions_workload_reports_the_diagnosis() {
    if gpu_host() {
        // There ncu profiles the ranges' kernels: tests/gpu_fixtures.rs covers that.
        skipped("range_replay_on_the_regions_workload_reports_the_diagnosis", "a GPU is here: ncu profiles the ranges");
        return;
    }
    let (_root, out) = past_ncu_hangs(&this_test!(), |root| {
        llmperf()
            .args(["profile", "--model", "nvtx_regions", "infer.iters=3", "--replay-mode", "range"])
            .args(["--nvtx-include", "A", "--no-nsys", NCU_PASS_DEADLINE, "-o"])
            .arg(root)
            .timeout(std::time::Duration::from_secs(600))
            .output()
            .unwrap()
    });
    let out = out
        .assert()
        .success()
        .stderr(predicate::str::contains("3 matching range(s) held no CUDA work"))
        .get_output()
        .stdout
        .clone();
    let dir = run_dir(&out);
    let manifest = json(&dir.join("manifest.json"));
    let ncu = stage(&manifest, "ncu:p0");
    assert_eq!(ncu["status"], "ok");
    let codes = codes_of(ncu);
    assert_eq!(codes, ["empty_ranges", "no_ranges_profiled"]);
    assert!(ncu["diagnoses"][1]["hint"].as_str().unwrap().contains("app-range"));
    let cmd = std::fs::read_to_string(dir.join("ncu/cmd.txt")).unwrap();
    assert!(cmd.contains("LC_ALL=C") && cmd.contains("--replay-mode range --nvtx --nvtx-include A/"), "{cmd}");
    let plan = json(&dir.join("ncu/plan.json"));
    assert_eq!(plan["regions_from"], "config");
    assert_eq!(plan["passes"][0]["nvtx_include"], serde_json::json!(["A"]));
    // Nothing profiled: no report, no CSVs, and a region report that says so
    // instead of inventing regions.
    assert!(!dir.join("ncu/p0.ncu-rep").exists());
    let regions = stage(&manifest, "ncu_regions");
    assert_eq!(regions["status"], "ok");
    let report = json(&dir.join("ncu/regions/report.json"));
    assert!(report["note"].as_str().unwrap().contains("no region-specific profiling was performed"), "{report}");
    assert_eq!(report["source"]["results"], 0);
    assert!(report["scopes"].as_array().unwrap().iter().all(|s| s["regions"].as_array().unwrap().is_empty()));
    let md = std::fs::read_to_string(dir.join("ncu/regions/report.md")).unwrap();
    assert!(md.contains("no region-specific profiling was performed"));
    // The workload under ncu kept its timings apart.
    assert!(dir.join("workload/timings.ncu.json").is_file());
}

#[test]
fn flags_this_ncu_lacks_are_refused_before_running() {
    let root = tempfile::tempdir().unwrap();
    let out = llmperf()
        .args(["profile", "--no-nsys", "--replay-mode", "kernel", "pipeline.ncu.ncu_cli.graph_profiling=node", "-o"])
        .arg(root.path())
        .args(["--", "true"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("has no --graph-profiling").and(predicate::str::contains("hint:")))
        .get_output()
        .stdout
        .clone();
    let manifest = json(&run_dir(&out).join("manifest.json"));
    assert_eq!(stage(&manifest, "ncu")["status"], "skipped");
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
/// The codes of a stage's diagnoses, in order.
fn codes_of(stage: &serde_json::Value) -> Vec<&str> {
    stage["diagnoses"].as_array().unwrap().iter().map(|d| d["code"].as_str().unwrap()).collect()
}

fn fake_ncu_replaying(dir: &std::path::Path, report: &std::path::Path) -> std::path::PathBuf {
    fake_ncu_replaying_and(dir, report, "")
}

/// [`fake_ncu_replaying`] that first runs `before`, a shell snippet with `$out`
/// (the `--export` base) and `$log` (the `--log-file`) set.
fn fake_ncu_replaying_and(dir: &std::path::Path, report: &std::path::Path, before: &str) -> std::path::PathBuf {
    let script = dir.join("ncu");
    write_executable(
        &script,
        &format!(
            r#"#!/bin/sh
case " $* " in *" --import "*|*" --version "*|*" --help "*) exec ncu "$@";; esac
prev=; for a in "$@"; do [ "$prev" = "--export" ] && out="$a"; [ "$prev" = "--log-file" ] && log="$a"; prev="$a"; done
{before}
cp {report} "$out.ncu-rep"
echo "==PROF== Report: $out.ncu-rep" >> "$log"
"#,
            report = report.display()
        ),
    );
    script
}

/// The first `Connected` and `RecordStatusEmpty` lines of ncu 2022.3's real
/// range-replay log, appended to the pass's log: a matched range without CUDA work.
fn an_empty_range_logged() -> String {
    let real =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ncu/range_replay_no_gpu.ncu2022.3.log");
    format!("head -n 2 '{}' >> \"$log\"", real.display())
}

/// `llmperf profile --no-nsys ARGS -- true` with the fake ncu replaying the
/// recorded nsight-training report (a copy from the corpus); the run
/// directory, or None when the corpus lacks the report (`test` is skipped).
fn profile_with_recorded_report(test: &str, root: &std::path::Path, args: &[&str]) -> Option<std::path::PathBuf> {
    let report = corpus_copy(test, "real/nsight-training/manual_nvtx.ncu-rep", root)?;
    let fake = fake_ncu_replaying(root, &report);
    Some(run_dir(&profile_true_under(root, &fake, args).success().get_output().stdout))
}

/// `llmperf profile --no-nsys ARGS -- true` with `fake` as ncu, into `root/runs`.
fn profile_true_under(root: &std::path::Path, fake: &std::path::Path, args: &[&str]) -> assert_cmd::assert::Assert {
    llmperf()
        .args(["profile", "--no-nsys", "-o"])
        .arg(root.join("runs"))
        .arg(format!("pipeline.ncu.executable={}", fake.display()))
        .args(args)
        .args(["--", "true"])
        .timeout(std::time::Duration::from_secs(600))
        .assert()
}

#[test]
fn a_recorded_real_report_is_rendered_and_read_back() {
    let root = tempfile::tempdir().unwrap();
    let Some(dir) = profile_with_recorded_report(&this_test!(), root.path(), &["--replay-mode", "kernel"]) else {
        return;
    };
    let manifest = json(&dir.join("manifest.json"));
    let ncu = stage(&manifest, "ncu:p0");
    let artifacts: Vec<_> = ncu["artifacts"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    for a in ["ncu/p0.ncu-rep", "ncu/p0.raw.csv", "ncu/p0.details.csv"] {
        assert!(artifacts.contains(&a), "{a} missing from {artifacts:?}");
    }
    assert!(ncu["diagnoses"].as_array().unwrap().is_empty());
    // The rendering by the real ncu 2022.3, read back by llmperf's reader.
    let launches: Vec<_> =
        llmperf::parse::ncu::open(&dir.join("ncu/p0.details.csv")).unwrap().collect::<Result<_, _>>().unwrap();
    assert_eq!(launches.len(), 3);
    let stack: Vec<_> = launches[0].nvtx.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(stack, ["run_test", "init_data"]);
    assert_eq!(launches[0].duration_ns(), Some(84_480.0));
    let raw = std::fs::read_to_string(dir.join("ncu/p0.raw.csv")).unwrap();
    assert!(raw.starts_with("\"ID\",") && raw.contains("gpu__time_duration.sum"), "{}", &raw[..200.min(raw.len())]);
}

/// The regions of the recorded report (`run_test` > `init_data`, `daxpy`,
/// `check_results`) come out of the kernel-replay flow with their files.
#[test]
fn kernel_replay_flow_writes_per_region_reports() {
    let root = tempfile::tempdir().unwrap();
    let Some(dir) = profile_with_recorded_report(
        &this_test!(),
        root.path(),
        &["--replay-mode", "kernel", "pipeline.ncu.ncu_cli.sections=[SpeedOfLight]"],
    ) else {
        return;
    };
    let report = json(&dir.join("ncu/regions/report.json"));
    assert_eq!(report["source"]["attribution"], "nvtx_stack");
    let agg = &report["scopes"][0];
    assert_eq!(agg["scope"], "aggregate");
    let names: Vec<_> = agg["regions"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
    assert_eq!(names, ["run_test", "run_test::check_results", "run_test::daxpy", "run_test::init_data"]);
    assert_eq!(agg["regions"][0]["inclusive"]["calls"], 3);
    for (name, dir_name) in [("run_test", "run_test"), ("run_test::daxpy", "run_test__daxpy")] {
        let region = json(&dir.join(format!("ncu/regions/{dir_name}/region.json")));
        assert_eq!(region["name"], name);
        let sections = std::fs::read_to_string(dir.join(format!("ncu/regions/{dir_name}/sections.txt"))).unwrap();
        assert!(sections.contains("[GPU Speed Of Light Throughput]"), "{sections}");
        assert!(!sections.contains("[Occupancy]"), "only the configured sections: {sections}");
    }
    llmperf().arg("validate").arg(&dir).assert().success().stdout(predicate::str::contains("FAIL").not());
}

/// Range replay of nested regions: an outer and an inner region in passes of
/// their own, each compiled to what ncu matches, each result attributed by
/// its NVTX stack. ncu here cannot make a range-replay report (no GPU), so
/// each pass gets the recorded kernel-replay report (stacks `run_test` >
/// `init_data` / `daxpy` / `check_results`): the flow and the files are
/// exercised on real rows; the range layout itself is tested on the real
/// app-range export (tests/ncu_import.rs).
#[test]
fn range_replay_flow_runs_a_pass_per_level_and_writes_each_region() {
    let root = tempfile::tempdir().unwrap();
    let Some(dir) = profile_with_recorded_report(
        &this_test!(),
        root.path(),
        &[
            "--replay-mode",
            "range",
            "--nvtx-include",
            "run_test",
            "--nvtx-include",
            "run_test::daxpy",
            "--fail-on-empty",
        ],
    ) else {
        return;
    };
    let manifest = json(&dir.join("manifest.json"));
    let argv = |pass: &str| -> Vec<String> {
        let a = stage(&manifest, pass)["argv"].as_array().unwrap().clone();
        a.iter().map(|a| a.as_str().unwrap().to_string()).collect()
    };
    let (p0, p1) = (argv("ncu:p0"), argv("ncu:p1"));
    let includes = |a: &[String]| -> Vec<String> {
        a.windows(2).filter(|w| w[0] == "--nvtx-include").map(|w| w[1].clone()).collect()
    };
    assert_eq!((includes(&p0), includes(&p1)), (vec!["run_test/".to_string()], vec!["daxpy/".to_string()]));
    let report = json(&dir.join("ncu/regions/report.json"));
    assert_eq!(report["source"]["attribution"], "range");
    assert_eq!(report["source"]["results"], 6);
    let regions = report["scopes"][0]["regions"].as_array().unwrap();
    let summary: Vec<_> = regions
        .iter()
        .map(|r| (r["name"].as_str().unwrap(), r["inclusive"]["calls"].as_u64().unwrap(), r["exclusive"].is_null()))
        .collect();
    assert_eq!(
        summary,
        [
            ("run_test", 3, true),
            ("run_test::check_results", 1, true),
            ("run_test::daxpy", 1, true),
            ("run_test::init_data", 1, true)
        ]
    );
    // The outer range holds the inner ones: the totals are its own.
    assert_eq!(report["scopes"][0]["totals"]["calls"], 3);
    assert!(dir.join("ncu/regions/run_test/sections.txt").is_file());
    assert!(dir.join("ncu/regions/run_test__daxpy/region.json").is_file());
    let cmd = std::fs::read_to_string(dir.join("ncu/cmd.txt")).unwrap();
    assert_eq!(cmd.lines().count(), 2, "{cmd}");
    assert_eq!(stage(&manifest, "ncu_matched")["status"], "ok");
}

/// The preflight looks every configured region up in what nsys captured, and
/// stops a misspelled one before ncu starts, with the nearest captured name.
#[test]
fn the_preflight_refuses_a_misspelled_region_before_ncu_runs() {
    let root = tempfile::tempdir().unwrap();
    let _nsys = nsys_lock();
    let out = llmperf()
        .args(["profile", "--model", "nvtx_regions", "infer.iters=1", "--replay-mode", "range"])
        .args(["--nvtx-include", "A::A2", "--nvtx-include", "B"])
        .args(NSYS_HANG)
        .arg("-o")
        .arg(root.path())
        .timeout(std::time::Duration::from_secs(600))
        .assert()
        .code(3)
        .stderr(predicate::str::contains("`A::A2`").and(predicate::str::contains("did you mean `A::A1`?")))
        .get_output()
        .stdout
        .clone();
    let dir = run_dir(&out);
    let manifest = json(&dir.join("manifest.json"));
    assert_eq!(stage(&manifest, "ncu_preflight")["status"], "failed");
    let names: Vec<&str> = manifest["stages"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert!(!names.iter().any(|n| n.starts_with("ncu:")), "ncu must not run: {names:?}");
    let preflight = json(&dir.join("ncu/preflight.json"));
    let checks: Vec<(&str, bool, u64)> = preflight["regions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["selector"].as_str().unwrap(), r["found"].as_bool().unwrap(), r["instances"].as_u64().unwrap()))
        .collect();
    assert_eq!(checks, [("A::A2", false, 0), ("B", true, 1)]);
}

/// Nothing matched: the cause is named (the selector, not CUDA work), the
/// default is a warning, and `--fail-on-empty` makes it exit 7.
#[test]
fn a_selector_that_matches_nothing_is_named_and_fails_on_request() {
    let root = tempfile::tempdir().unwrap();
    let run = |extra: &[&str]| {
        llmperf()
            .args(["profile", "--model", "nvtx_regions", "infer.iters=1", "--no-nsys", "--replay-mode", "range"])
            .args(["--nvtx-include", "A2"])
            .args(extra)
            .arg("-o")
            .arg(root.path())
            .timeout(std::time::Duration::from_secs(600))
            .assert()
    };
    let out = run(&[]).success().get_output().stdout.clone();
    let manifest = json(&run_dir(&out).join("manifest.json"));
    let codes = codes_of(stage(&manifest, "ncu:p0"));
    assert_eq!(codes, ["no_range_matched"]);
    let matched = stage(&manifest, "ncu_matched");
    assert_eq!(matched["status"], "ok");
    assert_eq!(matched["diagnoses"][0]["message"], "ncu profiled nothing: no results for A2");
    assert!(matched["diagnoses"][0]["hint"].as_str().unwrap().starts_with("the selector"), "{matched}");
    let out = run(&["--fail-on-empty"])
        .code(7)
        .stderr(predicate::str::contains("no results for A2").and(predicate::str::contains("hint: the selector")))
        .get_output()
        .stdout
        .clone();
    let manifest = json(&run_dir(&out).join("manifest.json"));
    assert_eq!(
        (manifest["status"].as_str(), stage(&manifest, "ncu_matched")["status"].as_str()),
        (Some("failed"), Some("failed"))
    );
}

/// `--replay-mode auto`: a range pass that profiles nothing is retried one
/// rung down; ncu 2022.3 has no app-range replay, so kernel replay with the
/// same region as an NVTX filter. Each step and ncu's reason are recorded.
#[test]
fn the_replay_ladder_steps_down_and_records_why() {
    let (_root, out) = past_ncu_hangs(&this_test!(), |root| {
        llmperf()
            .args(["profile", "--model", "nvtx_regions", "infer.iters=2", "--no-nsys", "--replay-mode", "auto"])
            .args(["--nvtx-include", "A::A1", "--fail-on-empty", NCU_PASS_DEADLINE, "-o"])
            .arg(root)
            .timeout(std::time::Duration::from_secs(600))
            .output()
            .unwrap()
    });
    let out = out.assert().code(7).get_output().stdout.clone();
    let dir = run_dir(&out);
    let plan = json(&dir.join("ncu/plan.json"));
    let passes: Vec<(&str, &str, &str)> = plan["passes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            (p["name"].as_str().unwrap(), p["replay_mode"].as_str().unwrap(), p["expressions"][0].as_str().unwrap())
        })
        .collect();
    assert_eq!(passes, [("p0", "range", "A1/"), ("p0-kernel", "kernel", "A/A1")]);
    let manifest = json(&dir.join("manifest.json"));
    let ladder =
        stage(&manifest, "ncu:p0")["diagnoses"].as_array().unwrap().iter().find(|d| d["code"] == "replay_ladder");
    let why = ladder.expect("the ladder step is recorded")["message"].as_str().unwrap();
    assert!(
        why.contains("2 matching range(s) held no CUDA work") && why.contains("app-range skipped: ncu 2022.3"),
        "{why}"
    );
    let kernel = stage(&manifest, "ncu:p0-kernel");
    let argv: Vec<&str> = kernel["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    assert!(
        argv.windows(2).any(|w| w == ["--replay-mode", "kernel"])
            && argv.windows(2).any(|w| w == ["--nvtx-include", "A/A1"])
    );
    // Its hint is not the one for a raw name missing its '/': llmperf wrote
    // `A/A1`, the documented filter for a nested range (it said "push/pop
    // ranges need a trailing '/': A/A1/").
    let none = kernel["diagnoses"].as_array().unwrap().iter().find(|d| d["code"] == "no_kernels_profiled");
    let hint = none.expect("the kernel pass profiled nothing here")["hint"].as_str().unwrap();
    assert!(hint.starts_with("no kernel matched"), "{hint}");
    // The last rung ran too and profiled nothing on this host: the run says so.
    assert_eq!(
        stage(&manifest, "ncu_matched")["diagnoses"][0]["message"],
        "ncu profiled nothing: no results for A::A1"
    );
}

/// `auto` steps down only from a range pass that profiled nothing. One whose
/// report holds results, beside a range ncu found empty, keeps them: the
/// kernel rung would count the same regions again (every pass's CSVs feed
/// the region report). It stepped down on the empty range alone.
#[test]
fn a_range_pass_with_results_keeps_them_and_does_not_step_down() {
    let root = tempfile::tempdir().unwrap();
    let Some(report) = corpus_copy(&this_test!(), "real/nsight-training/manual_nvtx.ncu-rep", root.path()) else {
        return;
    };
    let fake = fake_ncu_replaying_and(root.path(), &report, &an_empty_range_logged());
    let auto = ["--replay-mode", "auto", "--nvtx-include", "run_test"];
    let dir = run_dir(&profile_true_under(root.path(), &fake, &auto).success().get_output().stdout);
    let passes: Vec<String> =
        json(&dir.join("ncu/plan.json"))["passes"].as_array().unwrap().iter().map(|p| p["name"].to_string()).collect();
    assert_eq!(passes, ["\"p0\""]);
    let manifest = json(&dir.join("manifest.json"));
    let codes = codes_of(stage(&manifest, "ncu:p0"));
    assert_eq!(codes, ["empty_ranges"]);
    // The recorded report's 3 ranges of run_test, counted once.
    let report = json(&dir.join("ncu/regions/report.json"));
    let source = (report["source"]["attribution"].as_str(), report["source"]["results"].as_u64());
    assert_eq!(source, (Some("range"), Some(3)));
    let run_test = &report["scopes"][0]["regions"][0];
    assert_eq!((run_test["name"].as_str(), run_test["inclusive"]["calls"].as_u64()), (Some("run_test"), Some(3)));
}

/// A pass whose log says "No ranges were profiled" profiled nothing, even
/// beside a report file (should an ncu write one): `auto` steps down.
#[test]
fn a_range_pass_that_says_it_profiled_no_ranges_steps_down_beside_a_report() {
    let root = tempfile::tempdir().unwrap();
    let Some(report) = corpus_copy(&this_test!(), "real/nsight-training/manual_nvtx.ncu-rep", root.path()) else {
        return;
    };
    let real =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/ncu/range_replay_no_gpu.ncu2022.3.log");
    let none = format!("case \" $* \" in *\" --replay-mode range \"*) cat '{}' >> \"$log\";; esac", real.display());
    let fake = fake_ncu_replaying_and(root.path(), &report, &none);
    let auto = ["--replay-mode", "auto", "--nvtx-include", "run_test"];
    let dir = run_dir(&profile_true_under(root.path(), &fake, &auto).success().get_output().stdout);
    let manifest = json(&dir.join("manifest.json"));
    assert_eq!(codes_of(stage(&manifest, "ncu:p0")), ["empty_ranges", "no_ranges_profiled", "replay_ladder"]);
    assert_eq!(stage(&manifest, "ncu:p0-kernel")["status"], "ok");
}

/// A range pass that timed out is the run's failure, whatever its log said
/// before: `auto` does not step down from it (it did, on the empty range the
/// log held, and the kernel rung's success hid the timeout).
#[test]
fn a_range_pass_that_timed_out_fails_the_run_and_does_not_step_down() {
    let root = tempfile::tempdir().unwrap();
    let Some(report) = corpus_copy(&this_test!(), "real/nsight-training/manual_nvtx.ncu-rep", root.path()) else {
        return;
    };
    let hang =
        format!("case \" $* \" in *\" --replay-mode range \"*) {}; exec sleep 60;; esac", an_empty_range_logged());
    let fake = fake_ncu_replaying_and(root.path(), &report, &hang);
    let auto = ["--replay-mode", "auto", "--nvtx-include", "run_test"];
    let deadline = ["pipeline.ncu.timeout_s=2", "pipeline.ncu.stop_timeout_s=1"];
    let out = profile_true_under(root.path(), &fake, &[&auto[..], &deadline].concat())
        .code(5)
        .stderr(predicate::str::is_match("error: ncu timed out after [0-9]+ s and was killed").unwrap())
        .get_output()
        .stdout
        .clone();
    let dir = run_dir(&out);
    let manifest = json(&dir.join("manifest.json"));
    let p0 = stage(&manifest, "ncu:p0");
    assert_eq!((p0["status"].as_str(), p0["exit"]["timed_out"].as_bool()), (Some("failed"), Some(true)), "{p0}");
    let names: Vec<&str> = manifest["stages"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert!(!names.contains(&"ncu:p0-kernel"), "{names:?}");
    assert!(p0["diagnoses"].as_array().unwrap().iter().all(|d| d["code"] != "replay_ladder"), "{p0}");
    // The regions without results are put down to the timeout, not to the
    // empty range the log held before it (it said "no CUDA work").
    let hint = stage(&manifest, "ncu_matched")["diagnoses"][0]["hint"].as_str().unwrap().to_string();
    assert!(hint.starts_with("ncu did not finish: ncu:p0 timed out (pipeline.ncu.timeout_s);"), "{hint}");
}

/// A ladder step repeats its pass's regions: a region without results is
/// named once, in the order they were planned.
#[test]
fn a_ladder_names_each_empty_region_once() {
    let (_root, out) = past_ncu_hangs(&this_test!(), |root| {
        llmperf()
            .args(["profile", "--model", "nvtx_regions", "infer.iters=1", "--no-nsys", "--replay-mode", "auto"])
            .args(["--nvtx-include", "A::A1", "--nvtx-include", "B", NCU_PASS_DEADLINE, "-o"])
            .arg(root)
            .timeout(std::time::Duration::from_secs(600))
            .output()
            .unwrap()
    });
    let out = out.assert().success().get_output().stdout.clone();
    let manifest = json(&run_dir(&out).join("manifest.json"));
    let names: Vec<&str> = manifest["stages"].as_array().unwrap().iter().map(|s| s["name"].as_str().unwrap()).collect();
    assert!(names.contains(&"ncu:p0") && names.contains(&"ncu:p0-kernel"), "{names:?}");
    assert_eq!(
        stage(&manifest, "ncu_matched")["diagnoses"][0]["message"],
        "ncu profiled nothing: no results for B, A::A1"
    );
}

/// ncu without permission for the GPU counters: the stage fails with exit 4,
/// as docs/cli.md promises, and the hint says how to allow it. (A stand-in ncu
/// that logs what ncu logs then; `--version` and `--help` go to the real one.)
#[test]
fn no_counter_permission_exits_4_with_the_fix() {
    let root = tempfile::tempdir().unwrap();
    let fake = root.path().join("ncu");
    write_executable(
        &fake,
        r#"#!/bin/sh
case " $* " in *" --import "*|*" --version "*|*" --help "*) exec ncu "$@";; esac
prev=; for a in "$@"; do [ "$prev" = "--log-file" ] && log="$a"; prev="$a"; done
echo "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on the target device 0." > "$log"
exit 1
"#,
    );
    let out = llmperf()
        .args(["profile", "--no-nsys", "--replay-mode", "kernel", "-o"])
        .arg(root.path().join("runs"))
        .arg(format!("pipeline.ncu.executable={}", fake.display()))
        .args(["--", "true"])
        .assert()
        .code(4)
        .stderr(
            predicate::str::contains("ERR_NVGPUCTRPERM")
                .and(predicate::str::contains("NVreg_RestrictProfilingToAdminUsers=0")),
        )
        .get_output()
        .stdout
        .clone();
    let manifest = json(&run_dir(&out).join("manifest.json"));
    let p0 = stage(&manifest, "ncu:p0");
    assert_eq!(p0["status"], "failed");
    assert_eq!(p0["diagnoses"][0]["code"], "counter_permission");
}
