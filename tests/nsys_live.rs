//! `llmperf profile` under the real Nsight Systems installed by setup.sh.
//! Every test holds the nsys lock: two nsys sessions at once hang here.
use crate::common::*;
use assert_cmd::assert::OutputAssertExt;
use predicates::prelude::*;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

fn profile_live(root: &Path, args: &[&str]) -> std::process::Output {
    llmperf()
        .arg("profile")
        .args(NSYS_HANG)
        .arg("-o")
        .arg(root)
        .args(args)
        .timeout(Duration::from_secs(900))
        .output()
        .unwrap()
}

fn python() -> String {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    venv.display().to_string()
}

fn demo() -> String {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/demo_workload.py").display().to_string()
}

#[test]
fn profile_captures_a_report_that_nsys_stats_reads() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let out = profile_live(root.path(), &["pipeline.nsys.trace=nvtx,osrt", "--", &python(), &demo(), "3"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let out = out.stdout;
    let dir = run_dir(&out);
    let manifest = json(&dir.join("manifest.json"));
    assert_eq!(manifest["status"], "ok");
    let nsys = stage(&manifest, "nsys");
    assert_eq!(nsys["status"], "ok");
    assert_eq!(nsys["exit"]["code"], 0);
    assert!(nsys["artifacts"].as_array().unwrap().iter().any(|a| a == "nsys/report.nsys-rep"), "{nsys}");
    let cmd = std::fs::read_to_string(dir.join("nsys/cmd.txt")).unwrap();
    assert!(
        cmd.starts_with("/usr/bin/nsys profile --trace=nvtx,osrt") || cmd.contains("nsys profile --trace=nvtx,osrt"),
        "{cmd}"
    );

    // nsys's own summary of our report: the demo's ranges, 3 iterations each.
    let stats = Command::new("timeout")
        .args(["120", "nsys", "stats", "--report", "nvtxsum", "--format", "csv"])
        .arg(dir.join("nsys/report.nsys-rep"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&stats.stdout);
    for range in ["A", "A1", "B"] {
        let row = text.lines().find(|l| l.ends_with(&format!(",PushPop,{range}"))).unwrap_or_else(|| panic!("{text}"));
        assert_eq!(row.split(',').nth(2), Some("3"), "{row}");
    }
}

/// `llmperf profile -o ROOT -- sh -c SCRIPT`, as an assertable output.
fn profile_sh(root: &Path, script: &str) -> assert_cmd::assert::Assert {
    profile_live(root, &["--", "sh", "-c", script]).assert()
}

#[test]
fn failing_command_marks_the_stage_failed_and_keeps_the_report() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let out = profile_sh(root.path(), "exit 3")
        .code(5)
        .stderr(predicate::str::contains("the profiled command exited with code 3 under nsys"))
        .get_output()
        .stdout
        .clone();
    let manifest = json(&run_dir(&out).join("manifest.json"));
    assert_eq!(manifest["status"], "failed");
    let nsys = stage(&manifest, "nsys");
    assert_eq!(nsys["status"], "failed");
    assert_eq!(nsys["exit"]["code"], 3);
    assert!(run_dir(&out).join("nsys/report.nsys-rep").is_file(), "the capture is kept");
}

#[test]
fn command_killed_by_a_signal_is_reported_as_such() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let out = profile_sh(root.path(), "kill -KILL $$").code(5).get_output().stdout.clone();
    let manifest = json(&run_dir(&out).join("manifest.json"));
    let reason = stage(&manifest, "nsys")["reason"].as_str().unwrap().to_string();
    assert_eq!(reason, "the profiled command was killed by signal 9 (SIGKILL) under nsys");
}

/// Ctrl-C: children die (nsys, its agent, the workload), the manifest says
/// `interrupted`, and what was written stays.
#[test]
fn interrupt_kills_children_and_marks_the_manifest() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let marker = "31.4159";
    let mut child = Command::new(env!("CARGO_BIN_EXE_llmperf"))
        .arg("profile")
        .args(NSYS_HANG)
        .arg("-o")
        .arg(root.path())
        .args(["--", "sleep", marker])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while !sleeping(marker) {
        assert!(started.elapsed() < Duration::from_secs(60), "the workload never started");
        std::thread::sleep(Duration::from_millis(100));
    }
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    // After the application stops, nsys converts; when it hangs there (about 1
    // capture in 10 here) llmperf waits pipeline.nsys.postprocess_timeout_s (60 s).
    let status = wait_with_timeout(&mut child, Duration::from_secs(150));
    assert_eq!(status.code(), Some(130));
    let out = std::io::read_to_string(child.stdout.take().unwrap()).unwrap();
    let manifest = json(&run_dir(out.as_bytes()).join("manifest.json"));
    assert_eq!(manifest["status"], "interrupted");
    assert_eq!(stage(&manifest, "nsys")["status"], "interrupted");
    assert!(run_dir(out.as_bytes()).join("env.json").is_file());
    std::thread::sleep(Duration::from_millis(500));
    assert!(!sleeping(marker), "the workload survived the interrupt");
    assert!(!agent_running("sleep"), "an nsys agent survived the interrupt");
}

fn wait_with_timeout(child: &mut std::process::Child, limit: Duration) -> std::process::ExitStatus {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        if start.elapsed() > limit {
            // A second signal stops llmperf at once with its children (nsys's
            // agent too); a SIGKILL would leave the agent spinning, and every
            // later nsys session here hangs beside it.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            std::thread::sleep(Duration::from_secs(10));
            let _ = child.kill();
            panic!("llmperf did not stop within {limit:?} of SIGINT");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn cmdlines() -> Vec<String> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| std::fs::read(e.ok()?.path().join("cmdline")).ok())
        .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
        .collect()
}

/// nsys runs the application by its full path: `/usr/bin/sleep 31.4159`.
fn sleeping(marker: &str) -> bool {
    cmdlines().iter().any(|c| c.trim().ends_with(&format!("sleep {marker}")) && !c.contains("profile"))
}

fn agent_running(session_hint: &str) -> bool {
    cmdlines().iter().any(|c| c.contains("--start-agent") && c.contains(session_hint))
}

/// One NVTX push/pop range instance from nsys's SQLite export.
#[derive(Debug)]
struct Range {
    name: String,
    domain: String,
    tid: i64,
    start: i64,
    end: i64,
}

/// `nsys export --type sqlite`, then NVTX_EVENTS: eventType 59 = push/pop range,
/// 75 = domain create (its text names the domain of ranges with that domainId).
fn nvtx_ranges(report: &Path) -> Vec<Range> {
    let sqlite = report.with_extension("test.sqlite");
    let status = Command::new("timeout")
        .args(["300", "nsys", "export", "--type", "sqlite", "--force-overwrite", "true", "-o"])
        .arg(&sqlite)
        .arg(report)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "nsys export failed");
    let db = rusqlite::Connection::open(&sqlite).unwrap();
    let mut domains = std::collections::HashMap::new();
    let mut q = db.prepare("SELECT domainId, text FROM NVTX_EVENTS WHERE eventType = 75").unwrap();
    for row in q.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?))).unwrap() {
        let (id, name) = row.unwrap();
        domains.insert(id, name);
    }
    let mut q = db
        .prepare(
            "SELECT COALESCE(e.text, s.value), COALESCE(e.domainId, 0), e.globalTid, e.start, e.end \
             FROM NVTX_EVENTS e LEFT JOIN StringIds s ON e.textId = s.id WHERE e.eventType = 59",
        )
        .unwrap();
    q.query_map([], |r| {
        let domain: i64 = r.get(1)?;
        Ok(Range {
            name: r.get(0)?,
            domain: domains.get(&domain).cloned().unwrap_or_default(),
            tid: r.get(2)?,
            start: r.get(3)?,
            end: r.get(4)?,
        })
    })
    .unwrap()
    .map(Result::unwrap)
    .collect()
}

fn count(ranges: &[Range], name: &str) -> usize {
    ranges.iter().filter(|r| r.name == name).count()
}

/// How many instances of `child` lie inside an instance of `parent` on the same thread.
fn count_inside(ranges: &[Range], parent: &str, child: &str) -> usize {
    let parents: Vec<&Range> = ranges.iter().filter(|r| r.name == parent).collect();
    ranges
        .iter()
        .filter(|c| c.name == child)
        .filter(|c| parents.iter().any(|p| p.tid == c.tid && p.start <= c.start && c.end <= p.end))
        .count()
}

/// Every instance of `child` lies inside an instance of `parent` on the same thread.
fn assert_nested(ranges: &[Range], parent: &str, child: &str) {
    assert!(count(ranges, child) > 0, "no {child} ranges");
    assert_eq!(count_inside(ranges, parent, child), count(ranges, child), "{child} outside {parent}");
}

/// `llmperf profile` with no command profiles the built-in workload.
fn profile_builtin(root: &Path, args: &[&str]) -> std::path::PathBuf {
    let mut all = vec!["pipeline.nsys.trace=nvtx,osrt"];
    all.extend_from_slice(args);
    builtin_run(&profile_live(root, &all))
}

/// [`profile_builtin`] with the real ncu's range replay after nsys: each
/// pass has [`NCU_PASS_DEADLINE`], and a run whose pass deadlocked is made
/// again ([`past_ncu_hangs`]).
fn profile_builtin_range(test: &str, args: &[&str]) -> (tempfile::TempDir, std::path::PathBuf) {
    let mut all = vec!["pipeline.nsys.trace=nvtx,osrt", "--replay-mode", "range", NCU_PASS_DEADLINE];
    all.extend_from_slice(args);
    let (root, out) = past_ncu_hangs(test, |root| profile_live(root, &all));
    (root, builtin_run(&out))
}

/// The run directory of a built-in workload's run that succeeded, nsys's stage checked.
fn builtin_run(out: &std::process::Output) -> std::path::PathBuf {
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dir = run_dir(&out.stdout);
    let manifest = json(&dir.join("manifest.json"));
    let nsys = stage(&manifest, "nsys");
    assert_eq!(nsys["status"], "ok", "{nsys}");
    assert!(nsys["artifacts"].as_array().unwrap().iter().any(|a| a == "workload/timings.json"), "{nsys}");
    dir
}

#[test]
fn regions_workload_capture_has_a_a1_b_nested() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let dir = profile_builtin(root.path(), &["--model", "nvtx_regions", "infer.iters=5"]);
    let ranges = nvtx_ranges(&dir.join("nsys/report.nsys-rep"));
    for name in ["A", "A1", "B"] {
        assert_eq!(count(&ranges, name), 5, "{name}: warm-up emits no ranges, 5 measured iterations");
    }
    assert_nested(&ranges, "A", "A1");
    assert!(ranges.iter().all(|r| r.domain.is_empty()), "default domain");
    let inputs = std::fs::read_to_string(dir.join("inputs.yaml")).unwrap();
    assert!(inputs.contains("kind: builtin") && inputs.contains("name: nvtx_regions"), "{inputs}");
}

/// nsys first, then the real ncu in range replay with no configured regions:
/// the planner takes the regions nsys found, one pass per nesting level.
/// Without a GPU each pass matches its ranges and profiles nothing; the
/// region report says so.
#[test]
fn range_replay_plans_its_passes_from_the_regions_nsys_found() {
    let _nsys = nsys_lock();
    let (_root, dir) = profile_builtin_range(&this_test!(), &["--model", "nvtx_regions", "infer.iters=2"]);
    let plan = json(&dir.join("ncu/plan.json"));
    assert_eq!(plan["regions_from"], "nsys", "{plan}");
    let passes: Vec<(u64, Vec<String>)> = plan["passes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["level"].as_u64().unwrap(), serde_json::from_value(p["nvtx_include"].clone()).unwrap()))
        .collect();
    assert_eq!(passes, [(0, vec!["A".to_string(), "B".to_string()]), (1, vec!["A::A1".to_string()])]);
    let manifest = json(&dir.join("manifest.json"));
    for pass in ["ncu:p0", "ncu:p1"] {
        let s = stage(&manifest, pass);
        assert_eq!(s["status"], "ok", "{s}");
        let codes: Vec<_> = s["diagnoses"].as_array().unwrap().iter().map(|d| d["code"].as_str().unwrap()).collect();
        assert!(codes.contains(&"no_ranges_profiled"), "{pass}: {codes:?}");
    }
    let report = json(&dir.join("ncu/regions/report.json"));
    assert!(report["note"].as_str().unwrap().contains("no region-specific profiling"), "{report}");
    // Every JSON artifact of a full run follows its published schema.
    let out = llmperf().arg("validate").arg(&dir).assert().success().get_output().stdout.clone();
    let text = String::from_utf8_lossy(&out);
    for file in [
        "manifest.json",
        "env.json",
        "workload/timings.json",
        "nsys/regions.json",
        "ncu/plan.json",
        "ncu/preflight.json",
    ] {
        assert!(text.contains(&format!("OK    {file}")), "{file}: {text}");
    }
    assert_report_reproduces(&dir);
}

/// The README's `llmperf profile --model llm_tiny --replay-mode range` on this
/// CPU host: the preflight finds every region in the nsys capture, with no
/// kernel launched inside; ncu matches no range, because ncu defines a range
/// by the CUDA calls inside it. The cause named is the missing CUDA work, not
/// the selector (it said "the selector is the cause").
#[test]
fn cpu_range_replay_names_the_missing_cuda_work_not_the_selector() {
    let _nsys = nsys_lock();
    let (_root, dir) =
        profile_builtin_range(&this_test!(), &["--model", "llm_tiny", "infer.iters=1", "infer.max_new_tokens=2"]);
    let preflight = json(&dir.join("ncu/preflight.json"));
    let checks = preflight["regions"].as_array().unwrap();
    assert!(!checks.is_empty() && checks.iter().all(|c| c["found"] == true && c["kernels"] == 0), "{preflight}");
    let manifest = json(&dir.join("manifest.json"));
    let passes: Vec<&serde_json::Value> = manifest["stages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["name"].as_str().unwrap().starts_with("ncu:"))
        .collect();
    assert!(!passes.is_empty());
    for s in &passes {
        let codes: Vec<&str> = s["diagnoses"].as_array().unwrap().iter().map(|d| d["code"].as_str().unwrap()).collect();
        assert!(!codes.contains(&"no_range_matched"), "{s}");
    }
    let cuda: Vec<&serde_json::Value> = passes
        .iter()
        .flat_map(|s| s["diagnoses"].as_array().unwrap())
        .filter(|d| d["code"] == "no_cuda_in_ranges")
        .collect();
    assert!(!cuda.is_empty(), "{manifest}");
    assert!(cuda[0]["message"].as_str().unwrap().contains("no kernel launched inside"), "{}", cuda[0]);
    let matched = stage(&manifest, "ncu_matched");
    let hint = matched["diagnoses"][0]["hint"].as_str().unwrap();
    assert!(hint.starts_with("no CUDA work inside the regions"), "{matched}");
    assert!(!hint.contains("selector"), "{matched}");
}

/// A CPU run of the decoder: the summary's MFU uses the calibration the
/// workload measured on this CPU, labelled as such, and `llmperf report`
/// reproduces every report from the run directory.
#[test]
fn cpu_llm_run_has_a_summary_with_calibrated_mfu_and_reproduces() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let dir = profile_builtin(
        root.path(),
        &["--model", "llm_tiny", "infer.iters=2", "infer.max_new_tokens=4", "runner.run.baseline=true"],
    );
    let summary = std::fs::read_to_string(dir.join("stakeholder_summary.md")).unwrap();
    // The unprofiled baseline ran first, and the summary discloses the overhead against it.
    let manifest = json(&dir.join("manifest.json"));
    assert_eq!(stage(&manifest, "baseline")["status"], "ok");
    let baseline = json(&dir.join("workload/timings.baseline.json"))["measured_ms"].as_f64().unwrap();
    assert!(
        summary.contains(&format!("| measured time without a profiler (baseline) | {baseline:.3} ms |")),
        "{summary}"
    );
    assert!(summary.contains("| profiling overhead (nsys run vs baseline) |"), "{summary}");
    assert!(summary.contains("measured on this CPU by the workload"), "{summary}");
    // libtorch as the workload's own process saw it (the parent never loads
    // it), copied into env.json after the stages.
    let described = json(&dir.join("workload/libtorch.json"));
    assert_eq!(described["linked"], true, "{described}");
    assert!(described["version"].as_str().is_some_and(|v| v.starts_with("2.")), "{described}");
    assert_eq!(json(&dir.join("env.json"))["libtorch"], described);
    let timings = json(&dir.join("workload/timings.json"));
    let step_flops = timings["flops"]["per_call"]["decode_all::decode_step"].as_f64().unwrap();
    // MFU is over the median call (a few slow calls move the mean).
    let step_ms = timings["stages"]["decode_all::decode_step"]["median_ms"].as_f64().unwrap();
    let peak = timings["calibration"]["matmul_flops_per_s"].as_f64().unwrap();
    let mfu = format!("{:.2}%", 100.0 * step_flops / (step_ms / 1e3) / peak);
    let mfu_section = summary.split("## MFU").nth(1).unwrap_or_default();
    let row = mfu_section.lines().find(|l| l.starts_with("| `decode_all::decode_step` |")).unwrap_or_default();
    assert!(row.contains(&mfu), "MFU {mfu} not in the decode step's row: {row}\n{summary}");
    let report = std::fs::read_to_string(dir.join("report.md")).unwrap();
    assert!(report.contains("| reports | ok |") && report.contains("[stakeholder_summary.md]"), "{report}");
    // The roofline's point for the decode step: analytic FLOPs / bytes, and achieved FLOP/s.
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    let bytes = timings["decode_bytes"]["total_bytes_mean"].as_f64().unwrap();
    let re = regex::Regex::new(r#"data-stage="decode_all::decode_step" data-intensity="([^"]+)" data-flops="([^"]+)""#)
        .unwrap();
    let c = re.captures(&html).expect("a roofline point for the decode step");
    let (ai, flops): (f64, f64) = (c[1].parse().unwrap(), c[2].parse().unwrap());
    assert!((ai - step_flops / bytes).abs() <= 1e-5 * ai, "{ai}");
    assert!((flops - step_flops / (step_ms / 1e3)).abs() <= 1e-5 * flops, "{flops}");
    assert_report_reproduces(&dir);
}

#[test]
fn llm_workload_capture_has_prefill_and_decode_steps_in_domain_llm() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let dir = profile_builtin(root.path(), &["--model", "llm_tiny", "infer.iters=2", "infer.max_new_tokens=4"]);
    let ranges = nvtx_ranges(&dir.join("nsys/report.nsys-rep"));
    assert!(ranges.iter().all(|r| r.domain == "LLM"), "every LLM range is in domain LLM");
    // 2 iterations; 4 new tokens = 1 from prefill + 3 decode steps; 2 layers.
    assert_eq!(count(&ranges, "prefill"), 2);
    assert_eq!(count(&ranges, "decode_all"), 2);
    assert_eq!(count(&ranges, "decode_step"), 6);
    assert_eq!(count(&ranges, "layer_0"), 8);
    assert_eq!(count(&ranges, "attn"), 16);
    assert_eq!(count(&ranges, "mlp"), 16);
    assert_eq!(count(&ranges, "lm_head"), 8);
    assert_nested(&ranges, "decode_all", "decode_step");
    // Each layer holds one attn and one mlp per forward: 8 forwards per layer.
    assert_eq!(count_inside(&ranges, "layer_0", "attn"), 8);
    assert_eq!(count_inside(&ranges, "layer_1", "mlp"), 8);
    assert_eq!(count_inside(&ranges, "decode_step", "layer_1"), 6);
    assert_eq!(count_inside(&ranges, "prefill", "layer_1"), 2);
    let timings = json(&dir.join("workload/timings.json"));
    assert_eq!(timings["stages"]["decode_all::decode_step"]["count"], 6);
    let inputs = std::fs::read_to_string(dir.join("inputs.yaml")).unwrap();
    assert!(inputs.contains("model_metadata:") && inputs.contains("parameters: 124672"), "{inputs}");
}

#[test]
fn resnet_workload_capture_has_stem_blocks_head() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let dir = profile_builtin(root.path(), &["infer.iters=3", "infer.image_size=16"]);
    let ranges = nvtx_ranges(&dir.join("nsys/report.nsys-rep"));
    for name in ["forward", "stem", "block_0", "block_1", "block_2", "head"] {
        assert_eq!(count(&ranges, name), 3, "{name}");
    }
    assert_nested(&ranges, "forward", "block_1");
}

#[test]
fn torchscript_workload_capture_has_forward_ranges() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let model = root.path().join("lin.pt");
    let script = format!(
        "import torch\ntorch.jit.trace(torch.nn.Linear(4, 2).eval(), torch.randn(1, 4)).save({:?})\n",
        model.display().to_string()
    );
    assert!(Command::new(python()).args(["-c", &script]).status().unwrap().success());
    let path = format!("model.path={}", model.display());
    let dir =
        profile_builtin(root.path(), &["--model", "torchscript", &path, "model.input_shapes=[[1,4]]", "infer.iters=4"]);
    assert_eq!(count(&nvtx_ranges(&dir.join("nsys/report.nsys-rep")), "forward"), 4);
}

/// Per range name and domain, regions.json's instances and inclusive time
/// summed over its paths equal nsys's own `nvtxsum` of the same run.
fn assert_regions_equal_nvtxsum(dir: &Path) {
    let regions = json(&dir.join("nsys/regions.json"));
    let mut ours: std::collections::HashMap<String, (i64, i64)> = Default::default();
    for r in regions["regions"].as_array().unwrap() {
        let e = ours.entry(format!("{}:{}", r["domain"].as_str().unwrap(), r["name"].as_str().unwrap())).or_default();
        e.0 += r["instances"].as_i64().unwrap();
        e.1 += r["inclusive_ns"].as_i64().unwrap();
    }
    let rows = stats_rows(&dir.join("nsys/stats_nvtxsum.csv"));
    assert!(rows.len() >= 8, "{rows:?}");
    for row in rows {
        let key = &row["Range"];
        assert_eq!(ours[key], (row["Instances"].parse().unwrap(), row["Total Time (ns)"].parse().unwrap()), "{key}");
    }
}

/// Rows of an `nsys stats --format csv` file, keyed by header.
fn stats_rows(path: &Path) -> Vec<std::collections::HashMap<String, String>> {
    let mut r = csv::Reader::from_path(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let header: Vec<String> = r.headers().unwrap().iter().map(str::to_string).collect();
    r.records().map(|rec| header.iter().cloned().zip(rec.unwrap().iter().map(str::to_string)).collect()).collect()
}

/// On a capture made here, llmperf's region totals equal what the real nsys
/// wrote in the same run (nvtxsum, by `Domain:name`).
#[test]
fn live_capture_regions_equal_nsys_nvtxsum_of_the_same_run() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let dir = profile_builtin(root.path(), &["--model", "llm_tiny", "infer.iters=2", "infer.max_new_tokens=3"]);
    let manifest = json(&dir.join("manifest.json"));
    for s in ["nsys_export", "nsys_stats", "nsys_regions"] {
        assert_eq!(stage(&manifest, s)["status"], "ok", "{s}");
    }
    assert_regions_equal_nvtxsum(&dir);
    let regions = json(&dir.join("nsys/regions.json"));
    let step = regions["regions"].as_array().unwrap().iter().find(|r| r["path"] == "decode_all::decode_step").unwrap();
    assert_eq!(
        (step["instances"].as_i64(), step["parent"].as_str(), step["domain"].as_str()),
        (Some(4), Some("decode_all"), Some("LLM"))
    );
    let on_gpu = json(&dir.join("workload/timings.json"))["device"].as_str().unwrap().starts_with("cuda");
    let no_kernels_note =
        regions["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("no CUDA kernels"));
    if on_gpu {
        // The workload ran on a GPU: its kernels are there, inside the ranges.
        assert!(step["kernel_count"].as_i64().unwrap() > 0, "{step}");
        assert!(!no_kernels_note);
    } else {
        // No GPU: no kernels, said in a note rather than an error.
        assert_eq!(regions["unattributed"]["kernel_count"], 0);
        assert!(no_kernels_note);
    }
}

#[test]
fn import_of_a_real_qdrep_exports_and_matches_gpukernsum() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let Some(qdrep) = corpus_copy!("real/abacus/report1.qdrep", root.path()) else { return };
    let out = root.path().join("imported");
    llmperf()
        .args(["import", "nsys"])
        .arg(&qdrep)
        .arg("-o")
        .arg(&out)
        .timeout(Duration::from_secs(600))
        .assert()
        .success();
    let top = json(&out.join("nsys/top_kernels.json"));
    let top = top.as_array().unwrap();
    assert_eq!(top.len(), 30, "runner.run.top_n_kernels");
    let mut theirs: std::collections::HashMap<String, (i64, i64)> = Default::default();
    for row in stats_rows(&out.join("nsys/stats_gpukernsum.csv")) {
        let e = theirs.entry(row["Name"].clone()).or_default();
        e.0 += row["Instances"].parse::<i64>().unwrap();
        e.1 += row["Total Time (ns)"].parse::<i64>().unwrap();
    }
    for k in top {
        let name = k["name"].as_str().unwrap();
        assert_eq!((k["calls"].as_i64().unwrap(), k["total_ns"].as_i64().unwrap()), theirs[name], "{name}");
    }
    assert_eq!(json(&out.join("nsys/regions.json"))["unattributed"]["kernel_count"], 23805);
}

#[test]
fn import_of_a_report_too_new_for_this_nsys_fails_with_a_hint() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let Some(report) = corpus_copy!("real/DD2360-llm.c/report1.nsys-rep", root.path()) else { return };
    let out = root.path().join("imported");
    llmperf()
        .args(["import", "nsys"])
        .arg(&report)
        .arg("-o")
        .arg(&out)
        .timeout(Duration::from_secs(600))
        .assert()
        .code(5)
        .stderr(predicate::str::contains(format!("{} was written by nsys 2023.4.4; this nsys is ", report.display())))
        .stderr(predicate::str::contains("hint: render it with nsys 2023.4.4 or newer: `nsys export --type sqlite"));
    let manifest = json(&out.join("manifest.json"));
    assert_eq!(manifest["status"], "failed");
    assert_eq!(stage(&manifest, "nsys_export")["status"], "failed");
    assert!(out.join("nsys/export.stderr.log").is_file(), "raw output kept");
}

/// `pipeline.nsys.stats` picks the `nsys stats` reports: one report in the
/// other spelling gives exactly that CSV under the local nsys's name, with
/// nsys's own instance counts equal to regions.json's; `[]` runs no `nsys stats`.
#[test]
fn nsys_stats_runs_the_configured_reports_or_none() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let sqlite = crate::common::own("runs/cpu_llm_tiny/nsys/report.sqlite");
    let import = |name: &str, stats: &str| {
        let out = root.path().join(name);
        llmperf()
            .args(["import", "nsys"])
            .arg(&sqlite)
            .arg(format!("pipeline.nsys.stats={stats}"))
            .arg("-o")
            .arg(&out)
            .timeout(Duration::from_secs(300))
            .assert()
            .success();
        let csvs: Vec<String> = std::fs::read_dir(out.join("nsys"))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("stats_") && n.ends_with(".csv"))
            .collect();
        let stages: Vec<String> = json(&out.join("manifest.json"))["stages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect();
        (out, csvs, stages)
    };
    let (out, csvs, stages) = import("one", "[nvtx_sum]");
    assert_eq!(csvs, ["stats_nvtxsum.csv"], "nsys 2022.4 names it nvtxsum");
    assert!(stages.iter().any(|s| s == "nsys_stats"));
    assert_regions_equal_nvtxsum(&out);
    let (_, csvs, stages) = import("none", "[]");
    assert!(csvs.is_empty(), "{csvs:?}");
    assert!(!stages.iter().any(|s| s == "nsys_stats"), "{stages:?}");
}

/// nsys writes its capture and status files to TMPDIR first. With TMPDIR on a
/// full 256 KiB tmpfs (mounted in a user namespace: `unshare -rm`), nsys 2022.4
/// fails with a C++ exception and exit 1. The error blames nsys and the full
/// directory, not the profiled command (it said "the profiled command exited
/// with code 1 under nsys"), and nothing nsys started is left running (its
/// `nsys-launcher` and `nsys-tee` waited on for most of a minute).
#[test]
fn a_full_tmpdir_is_named_and_nsys_leaves_nothing_behind() {
    let test = "a_full_tmpdir_is_named_and_nsys_leaves_nothing_behind";
    let root = tempfile::tempdir().unwrap();
    let small = root.path().join("small");
    std::fs::create_dir(&small).unwrap();
    let probe =
        Command::new("unshare").args(["-rm", "mount", "-t", "tmpfs", "-o", "size=256k", "none"]).arg(&small).status();
    if !probe.is_ok_and(|s| s.success()) {
        return skipped(test, "no tmpfs in an unprivileged user namespace here (unshare -rm mount -t tmpfs)");
    }
    let script = r#"d=$1; shift; mount -t tmpfs -o size=256k none "$d" && head -c 250000 /dev/zero > "$d/fill" && TMPDIR="$d" exec "$@""#;
    let _n = nsys_lock();
    let out = Command::new("unshare")
        .args(["-rm", "sh", "-c", script, "sh"])
        .arg(&small)
        .arg(assert_cmd::cargo::cargo_bin("llmperf"))
        .args(["profile", "--model", "nvtx_regions", "--no-ncu", "infer.iters=3"])
        .args(NSYS_HANG)
        .arg("-o")
        .arg(root.path().join("runs"))
        .env_remove("LLMPERF_LOG")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    let error = stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or_default();
    // nsys fails at one of several places on a full disk: with a C++ exception
    // ("Failed to write termination status to file"), or "Invalid truncate size.".
    assert!(
        error.starts_with("error: nsys itself failed (exit code 1): ")
            || error.starts_with("error: nsys exited with code 1 and wrote no capture"),
        "{stderr}"
    );
    assert!(error.contains(&format!("the temporary directory {} has ", small.display())), "{stderr}");
    assert!(!stderr.contains("the profiled command exited"), "{stderr}");
    assert!(stderr.contains("hint: free space in the temporary directory or point TMPDIR"), "{stderr}");
    let left: Vec<String> =
        cmdlines().into_iter().filter(|c| c.contains("nsys-launcher") || c.starts_with("nsys-tee")).collect();
    assert!(left.is_empty(), "left running: {left:?}");
}

/// docs/cli.md's `pipeline.nsys.capture_range=nvtx` example: nsys captures
/// the first instance of the range, then stops the application with SIGINT
/// (its default `--capture-range-end stop-shutdown`). The capture is what was
/// asked for: the run is ok with a note, not "killed by signal 2" (exit 5).
///
/// nsys 2022.4 here hangs in about 1 run in 12, the application blocked
/// inside nsys in B's NVTX call (docs/internals.md). That failure, named as
/// such by llmperf at a 60 s timeout, is captured again, up to 3 times; any
/// other failure fails the test.
/// nsys 2022.4 ends with an application that never entered its capture
/// range, with exit 0 and no report: the error names the range.
#[test]
fn a_capture_range_the_application_never_entered_is_named() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let args = [
        "--model",
        "nvtx_regions",
        "infer.iters=1",
        "pipeline.nsys.capture_range=nvtx",
        "pipeline.nsys.nvtx_capture=nosuch",
        "--no-ncu",
        "pipeline.nsys.timeout_s=60",
    ];
    let out = profile_live(root.path(), &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    let manifest = json(&run_dir(&out.stdout).join("manifest.json"));
    let nsys = stage(&manifest, "nsys");
    assert_eq!(nsys["exit"]["code"], 0, "{nsys}");
    assert_eq!(nsys["reason"], "nsys wrote no capture: its capture range never started before the application exited");
    assert!(
        stderr.contains("hint: the application never entered the range pipeline.nsys.nvtx_capture=nosuch"),
        "{stderr}"
    );
}

/// With a capture range that never started, nsys 2022.4 writes nothing and
/// exits with the application's status (`sh -c 'exit 3'`: 3, no report):
/// the status is the application's, and the capture is not tried again.
#[test]
fn a_failing_application_that_never_entered_its_range_is_blamed_and_not_retried() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let args = [
        "pipeline.nsys.capture_range=nvtx",
        "pipeline.nsys.nvtx_capture=nosuch",
        "--no-ncu",
        "pipeline.nsys.timeout_s=60",
        "--",
        "sh",
        "-c",
        "echo oops >&2; exit 3",
    ];
    let out = profile_live(root.path(), &args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    let manifest = json(&run_dir(&out.stdout).join("manifest.json"));
    let nsys = stage(&manifest, "nsys");
    assert_eq!(nsys["exit"]["code"], 3, "{nsys}");
    assert_eq!(nsys["reason"], "the profiled command exited with code 3 under nsys: oops");
    let codes: Vec<&str> = nsys["diagnoses"].as_array().unwrap().iter().map(|d| d["code"].as_str().unwrap()).collect();
    assert!(!codes.contains(&"nsys_failed_without_capture"), "{nsys}");
}

#[test]
fn an_nvtx_capture_range_that_stops_the_application_is_a_complete_capture() {
    const HUNG: &str = "and was stopped (no capture was written); its capture range ";
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let args = [
        "--model",
        "nvtx_regions",
        "infer.iters=3",
        "pipeline.nsys.capture_range=nvtx",
        "pipeline.nsys.nvtx_capture=B",
        "--no-ncu",
        "pipeline.nsys.timeout_s=60",
    ];
    let mut out = profile_live(root.path(), &args);
    for _ in 0..3 {
        if !String::from_utf8_lossy(&out.stderr).contains(HUNG) {
            break;
        }
        out = profile_live(root.path(), &args);
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let dir = run_dir(&out.stdout);
    let manifest = json(&dir.join("manifest.json"));
    let nsys = stage(&manifest, "nsys");
    assert_eq!(nsys["status"], "ok", "{nsys}");
    assert!(nsys["reason"].as_str().unwrap().contains("at the end of its capture range"), "{nsys}");
    assert_eq!(nsys["exit"]["code"], 130, "{nsys}");
    let regions = json(&dir.join("nsys/regions.json"));
    let got: Vec<(&str, u64)> = regions["regions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["path"].as_str().unwrap(), r["instances"].as_u64().unwrap()))
        .collect();
    assert_eq!(got, [("B", 1)]);
}
