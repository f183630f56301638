//! `llmperf profile` under the real Nsight Systems installed by setup.sh.
//! Every test holds the nsys lock: two nsys sessions at once hang here.
mod common;
use common::*;
use predicates::prelude::*;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

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
    let out = llmperf()
        .args(["profile", "pipeline.nsys.trace=nvtx,osrt", "-o"])
        .arg(root.path())
        .args(["--", &python(), &demo(), "3"])
        .timeout(Duration::from_secs(300))
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
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

/// `llmperf profile -o ROOT -- sh -c SCRIPT` with a generous timeout.
fn profile_sh(root: &Path, script: &str) -> assert_cmd::Command {
    let mut cmd = llmperf();
    cmd.args(["profile", "-o"]).arg(root).args(["--", "sh", "-c", script]).timeout(Duration::from_secs(300));
    cmd
}

#[test]
fn failing_command_marks_the_stage_failed_and_keeps_the_report() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let out = profile_sh(root.path(), "exit 3")
        .assert()
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
    let out = profile_sh(root.path(), "kill -KILL $$").assert().code(5).get_output().stdout.clone();
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
        .args(["profile", "-o"])
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
    let status = wait_with_timeout(&mut child, Duration::from_secs(60));
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
