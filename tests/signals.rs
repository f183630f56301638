//! Signals and children: Ctrl-C (SIGINT), SIGTERM, SIGHUP and SIGQUIT during a
//! real nsys capture leave an analysed report and no process of the run; a
//! second signal stops llmperf at once; `timeout_s` keeps the capture too;
//! imports stop their children; a signal during native ingestion (no child)
//! ends the run `interrupted`, not `ok`. Every test that starts nsys holds the
//! nsys lock: two nsys sessions at once hang here.
use crate::common::*;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn spawn(args: &[&str], root: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_llmperf"))
        .args(args)
        .arg("-o")
        .arg(root)
        .env_remove("LLMPERF_LOG")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// The built-in regions demo, long enough to be stopped while it runs.
fn long_capture(root: &Path, extra: &[&str]) -> Child {
    let mut args = vec!["profile", "--model", "nvtx_regions", "infer.iters=100000000", "pipeline.nsys.trace=nvtx,osrt"];
    args.extend_from_slice(&NSYS_HANG);
    args.extend_from_slice(extra);
    spawn(&args, root)
}

/// Every process's pid and command line.
fn processes() -> Vec<(u32, String)> {
    std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| {
            let e = e.ok()?;
            let pid = e.file_name().to_str()?.parse().ok()?;
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            Some((pid, String::from_utf8_lossy(&cmdline).replace('\0', " ")))
        })
        .filter(|(_, c)| !c.is_empty())
        .collect()
}

/// Processes whose command line names `needle` (a run directory, a marker).
fn alive(needle: &str) -> Vec<String> {
    processes().into_iter().map(|(_, c)| c).filter(|c| c.contains(needle)).collect()
}

/// The run directory under `root`, once llmperf has made it.
fn the_run(root: &Path) -> PathBuf {
    let started = Instant::now();
    loop {
        if let Some(e) = std::fs::read_dir(root).unwrap().flatten().next() {
            return e.path();
        }
        assert!(started.elapsed() < Duration::from_secs(60), "no run directory");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Wait until the workload has run a while under nsys (its process names the
/// run directory): 4 s of its own CPU time, past loading libtorch and nsys's
/// injection, so ranges have closed even when other tests load the machine
/// (a wall-clock wait of 2 s once signalled a workload that had not begun its
/// loop, and the capture rightly held no range).
fn wait_for_workload(run: &Path) {
    let needle = format!("workload --run-dir {}", run.display());
    let started = Instant::now();
    loop {
        let busy = processes().into_iter().find(|(_, c)| c.contains(&needle) && !c.contains("nsys"));
        if busy.is_some_and(|(pid, _)| cpu_seconds(pid) >= 4.0) {
            return;
        }
        assert!(started.elapsed() < Duration::from_secs(180), "the workload never ran 4 s of CPU time");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// User and system CPU time of a process, from /proc/PID/stat (0 once it is gone).
fn cpu_seconds(pid: u32) -> f64 {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return 0.0 };
    // Fields after the command name, which is in parentheses and may hold spaces.
    let fields: Vec<&str> = stat.rsplit_once(')').map_or("", |(_, rest)| rest).split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok()).unwrap_or(0.0);
    // utime and stime are fields 14 and 15 of stat(5); `fields` starts at field 3.
    // SAFETY: sysconf(3) has no memory-safety preconditions.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    (ticks(11) + ticks(12)) / hz
}

fn signal(child: &Child, sig: i32) {
    assert_eq!(unsafe { libc::kill(child.id() as i32, sig) }, 0);
}

fn finish(mut child: Child, limit: Duration) -> (Option<i32>, String) {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let err = std::io::read_to_string(child.stderr.take().unwrap()).unwrap();
            return (status.code(), err);
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            panic!("llmperf did not stop within {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Region name → instances, from the run's nsys/regions.json.
fn instances(run: &Path) -> std::collections::BTreeMap<String, u64> {
    let regions = json(&run.join("nsys/regions.json"));
    regions["regions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["path"].as_str().unwrap().to_string(), r["instances"].as_u64().unwrap()))
        .collect()
}

fn assert_nothing_left(run: &Path) {
    std::thread::sleep(Duration::from_millis(500));
    let left = alive(&run.display().to_string());
    assert!(left.is_empty(), "still running: {left:?}");
}

/// nsys 2022.4 here sometimes hangs converting a capture (REFERENCE §1, about
/// 1 in 10), and now and then fails on its own before the test's signal or
/// timeout comes (exit 1: "End of file", "Local Endpoint is not available",
/// seen twice in a full `make test` run, never alone): llmperf then says the
/// capture was lost or that nsys wrote none (retrying what it can itself),
/// and the test tries again.
/// A defect of llmperf's still fails: the last attempt is asserted whatever
/// its reason.
const ATTEMPTS: usize = 3;

fn lost_to_the_hang(manifest: &serde_json::Value) -> bool {
    let nsys = stage(manifest, "nsys");
    let reason = nsys["reason"].as_str().unwrap_or_default().to_string();
    let own_failure = reason.starts_with("nsys itself failed") && nsys["exit"]["timed_out"] == false;
    reason.contains("wrote no capture") || reason.contains("no capture was written") || own_failure
}

#[test]
fn every_stop_signal_keeps_an_analysed_capture() {
    let _nsys = nsys_lock();
    for (sig, name) in
        [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM"), (libc::SIGHUP, "SIGHUP"), (libc::SIGQUIT, "SIGQUIT")]
    {
        for attempt in 1..=ATTEMPTS {
            let root = tempfile::tempdir().unwrap();
            let child = long_capture(root.path(), &[]);
            let run = the_run(root.path());
            wait_for_workload(&run);
            signal(&child, sig);
            let (code, err) = finish(child, Duration::from_secs(300));
            assert_eq!(code, Some(130), "{name}: {err}");
            assert!(err.contains(&format!("interrupted by {name}")), "{name}: {err}");
            let manifest = json(&run.join("manifest.json"));
            assert_eq!(manifest["status"], "interrupted", "{name}");
            assert_eq!(stage(&manifest, "nsys")["status"], "interrupted", "{name}: {manifest}");
            assert_nothing_left(&run);
            if lost_to_the_hang(&manifest) && attempt < ATTEMPTS {
                eprintln!("{name}: nsys hung converting the capture (attempt {attempt}); again");
                continue;
            }
            let analysed = manifest["stages"]
                .as_array()
                .unwrap()
                .iter()
                .any(|s| s["name"] == "nsys_regions" && s["status"] == "ok");
            assert!(analysed, "{name}: {manifest}\n{err}");
            assert!(std::fs::metadata(run.join("nsys/report.nsys-rep")).unwrap().len() > 0, "{name}");
            // Analysed: the demo's ranges, each many times over.
            let got = instances(&run);
            for region in ["A", "A::A1", "B"] {
                assert!(got.get(region).is_some_and(|n| *n > 10), "{name}: {region} in {got:?}");
            }
            assert!(run.join("report.md").is_file(), "{name}");
            break;
        }
    }
}

#[test]
fn a_second_signal_stops_at_once() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let child = long_capture(root.path(), &[]);
    let run = the_run(root.path());
    wait_for_workload(&run);
    signal(&child, libc::SIGINT);
    std::thread::sleep(Duration::from_millis(200));
    let second = Instant::now();
    signal(&child, libc::SIGINT);
    let (code, err) = finish(child, Duration::from_secs(60));
    assert_eq!(code, Some(130), "{err}");
    assert!(second.elapsed() < Duration::from_secs(30), "took {:?}", second.elapsed());
    assert!(err.contains("stopped at once by a second signal"), "{err}");
    let manifest = json(&run.join("manifest.json"));
    assert_eq!(manifest["status"], "interrupted");
    assert!(manifest["stages"].as_array().unwrap().iter().all(|s| s["status"] != "running"), "{manifest}");
    assert_nothing_left(&run);
}

#[test]
fn a_timed_out_capture_is_stopped_and_analysed() {
    let _nsys = nsys_lock();
    for attempt in 1..=ATTEMPTS {
        let root = tempfile::tempdir().unwrap();
        let child = long_capture(root.path(), &["pipeline.nsys.timeout_s=8"]);
        let run = the_run(root.path());
        let (code, err) = finish(child, Duration::from_secs(300));
        assert_eq!(code, Some(5), "{err}");
        let manifest = json(&run.join("manifest.json"));
        assert_eq!(manifest["status"], "failed");
        assert_nothing_left(&run);
        if lost_to_the_hang(&manifest) && attempt < ATTEMPTS {
            continue;
        }
        let nsys = stage(&manifest, "nsys");
        assert_eq!(nsys["exit"]["timed_out"], true, "{nsys}");
        let reason = nsys["reason"].as_str().unwrap();
        assert!(
            reason.contains("reached pipeline.nsys.timeout_s (8 s) and was stopped (its capture is analysed)"),
            "{nsys}"
        );
        assert!(instances(&run).get("A").is_some_and(|n| *n > 10));
        break;
    }
}

/// A stand-in profiler that answers `--version` and then hangs: the stage it
/// runs (an export, an `ncu --import`) is running when the signal comes.
fn hanging_tool(dir: &Path, name: &str, version: &str, marker: &str) -> PathBuf {
    let path = dir.join(name);
    write_executable(
        &path,
        &format!("#!/bin/sh\ncase \"$1\" in --version) echo '{version}';; *) exec sleep {marker};; esac\n"),
    );
    path
}

fn wait_for(marker: &str) {
    let started = Instant::now();
    while alive(&format!("sleep {marker}")).is_empty() {
        assert!(started.elapsed() < Duration::from_secs(60), "the stand-in never started");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_signal_during_an_import_stops_its_child() {
    let Some(rep) = corpus!("real/nsight-training/manual_nvtx.ncu-rep") else { return };
    let tools = tempfile::tempdir().unwrap();
    // llmperf gets a copy: nothing may write to the shared corpus.
    let rep = {
        let copy = tools.path().join("manual_nvtx.ncu-rep");
        std::fs::copy(&rep, &copy).unwrap();
        copy
    };
    // A real .nsys-rep (a SQLite renamed .nsys-rep is now read as the SQLite it is, with no export).
    let Some(rep_nsys) = corpus!("real/DD2360-llm.c/report1.nsys-rep") else { return };
    let report = tools.path().join("report.nsys-rep");
    std::fs::copy(&rep_nsys, &report).unwrap();
    let nsys = hanging_tool(tools.path(), "nsys", "NVIDIA Nsight Systems version 2022.4.2.1-df9881f", "613.1");
    let ncu = hanging_tool(
        tools.path(),
        "ncu",
        "NVIDIA (R) Nsight Compute Command Line Profiler\nVersion 2022.3.0.0 (build 31729285) (public-release)",
        "613.2",
    );
    for (what, file, tool, marker, stage_name) in
        [("nsys", report.as_path(), &nsys, "613.1", "nsys_export"), ("ncu", rep.as_path(), &ncu, "613.2", "ncu_import")]
    {
        let root = tempfile::tempdir().unwrap();
        let out = root.path().join("run");
        let executable = format!("pipeline.{what}.executable={}", tool.display());
        let child = Command::new(env!("CARGO_BIN_EXE_llmperf"))
            .args(["import", what])
            .arg(file)
            .arg("-o")
            .arg(&out)
            .arg(&executable)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        wait_for(marker);
        signal(&child, libc::SIGINT);
        let (code, err) = finish(child, Duration::from_secs(60));
        assert_eq!(code, Some(130), "{what}: {err}");
        assert!(alive(&format!("sleep {marker}")).is_empty(), "{what}: the stand-in survived");
        let manifest = json(&out.join("manifest.json"));
        assert_eq!(manifest["status"], "interrupted", "{what}");
        let s = stage(&manifest, stage_name);
        assert_eq!(s["status"], "interrupted", "{what}: {s}");
        assert!(!s.to_string().contains("newer"), "{what}: {s}");
    }
}

/// Native ingestion runs no child: a signal then stops it at its next check.
#[test]
fn a_signal_during_native_ingestion_ends_the_run_interrupted() {
    let generator = Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/bench/gen_nsys_sqlite.py");
    if !generator.is_file() {
        return skipped(
            "a_signal_during_native_ingestion_ends_the_run_interrupted",
            "../shared/bench/gen_nsys_sqlite.py not found",
        );
    }
    let work = tempfile::tempdir().unwrap();
    let db = work.path().join("big.sqlite");
    let made = Command::new("python3")
        .arg(&generator)
        .args(["--ranges", "300000", "--kernels", "300000", "--out"])
        .arg(&db)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", String::from_utf8_lossy(&made.stderr));
    // Try a few times: the signal must land while the stage runs (it takes ~0.2 s).
    for attempt in 0..5 {
        let out = work.path().join(format!("run{attempt}"));
        let child = Command::new(env!("CARGO_BIN_EXE_llmperf"))
            .args(["import", "nsys"])
            .arg(&db)
            .arg("-o")
            .arg(&out)
            .arg("pipeline.nsys.executable=/nonexistent/nsys")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let started = Instant::now();
        let mut sent = false;
        while started.elapsed() < Duration::from_secs(30) {
            let m: Option<serde_json::Value> =
                std::fs::read_to_string(out.join("manifest.json")).ok().and_then(|t| serde_json::from_str(&t).ok());
            let ingesting = m.as_ref().is_some_and(|m| {
                m["stages"].as_array().unwrap().iter().any(|s| s["name"] == "nsys_regions" && s["status"] == "running")
            });
            if ingesting {
                signal(&child, libc::SIGINT);
                sent = true;
                break;
            }
            if m.as_ref().is_some_and(|m| m["status"] != "running") {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let (code, err) = finish(child, Duration::from_secs(60));
        if !sent {
            continue;
        }
        assert_eq!(code, Some(130), "{err}");
        let manifest = json(&out.join("manifest.json"));
        assert_eq!(manifest["status"], "interrupted");
        assert_eq!(stage(&manifest, "nsys_regions")["status"], "interrupted");
        assert!(!manifest["stages"].as_array().unwrap().iter().any(|s| s["name"] == "reports"), "{manifest}");
        return;
    }
    panic!("the signal never landed during ingestion in 5 attempts");
}

/// A stand-in nsys that starts an agent as nsys does (detached, its session
/// named `profile-<app>-<its own pid>`), then does `then`.
fn nsys_leaving_an_agent(dir: &Path, mark: &str, then: &str) -> PathBuf {
    let path = dir.join("nsys");
    let started = dir.join("agent-started").display().to_string();
    write_executable(
        &path,
        &format!(
            r#"#!/bin/bash
case "$1" in --version) echo 'NVIDIA Nsight Systems version 2022.4.2.1-df9881f'; exit 0;; esac
[ "$2" = "--help" ] && exit 0
agent() {{ setsid bash -c "exec -a nsys python3 -c 'import time; time.sleep(600)' --start-agent --session-name=profile-llmperf-$$ --shm-name={mark}" </dev/null >/dev/null 2>&1 & touch '{started}'; }}
{then}
"#
        ),
    );
    path
}

/// The nsys agent llmperf's nsys started is stopped on every path: nsys
/// exits by itself, reaches its timeout, starts the agent only as it is
/// stopped, or llmperf is interrupted. Agents left running at 99% CPU made
/// every later nsys session hang.
#[test]
fn the_agent_of_our_nsys_is_stopped_on_every_path() {
    let _nsys = nsys_lock();
    for (i, (path, then)) in [
        ("exit", "agent; sleep 0.5; exit 3"),
        ("timeout", "agent; exec sleep 600"),
        // SIGINT (llmperf's stop of the application) ignored: the agent starts on the SIGTERM after it.
        ("late", "trap '' INT; trap 'agent; sleep 0.5; exit 1' TERM; sleep 600 & wait"),
        ("signal", "agent; exec sleep 600"),
    ]
    .into_iter()
    .enumerate()
    {
        let tools = tempfile::tempdir().unwrap();
        let mark = format!("llmperf-agent-test-{}-{i}", std::process::id());
        let nsys = nsys_leaving_an_agent(tools.path(), &mark, then);
        let root = tempfile::tempdir().unwrap();
        let executable = format!("pipeline.nsys.executable={}", nsys.display());
        let child = spawn(
            &[
                "profile",
                "--no-ncu",
                &executable,
                "pipeline.nsys.timeout_s=3",
                "pipeline.nsys.hang_retries=0",
                "--",
                "true",
            ],
            root.path(),
        );
        if path == "signal" {
            let started = Instant::now();
            while alive(&format!("--shm-name={mark}")).is_empty() {
                assert!(started.elapsed() < Duration::from_secs(30), "the stand-in's agent never started");
                std::thread::sleep(Duration::from_millis(50));
            }
            signal(&child, libc::SIGINT);
        }
        let (code, err) = finish(child, Duration::from_secs(60));
        assert_ne!(code, Some(0), "{path}: {err}");
        assert!(tools.path().join("agent-started").exists(), "{path}: the stand-in never started its agent: {err}");
        let left = alive(&format!("--shm-name={mark}"));
        if let Some(c) = left.first() {
            let _ = Command::new("pkill").arg("-f").arg(format!("--shm-name={mark}")).status();
            panic!("{path}: the agent outlived llmperf: {c}\n{err}");
        }
    }
}

/// An agent left by an nsys that is gone (a llmperf killed with SIGKILL
/// cannot stop it): stopped, with a warning, before the next nsys starts.
#[test]
fn an_agent_whose_nsys_is_gone_is_stopped_before_nsys_starts() {
    let _nsys = nsys_lock();
    let gone = Command::new("true").spawn().unwrap();
    let gone_pid = gone.id();
    let _ = gone.wait_with_output();
    let mark = format!("llmperf-orphan-test-{}", std::process::id());
    let mut orphan = Command::new("bash")
        .arg("-c")
        .arg(format!(
            "exec -a nsys python3 -c 'import time; time.sleep(600)' --start-agent --session-name=profile-llmperf-{gone_pid} --shm-name={mark}"
        ))
        .process_group(0)
        .spawn()
        .unwrap();
    let tools = tempfile::tempdir().unwrap();
    let nsys = nsys_leaving_an_agent(tools.path(), &format!("{mark}-own"), "exit 3");
    let root = tempfile::tempdir().unwrap();
    let executable = format!("pipeline.nsys.executable={}", nsys.display());
    let child = spawn(&["profile", "--no-ncu", &executable, "--", "true"], root.path());
    let (code, err) = finish(child, Duration::from_secs(60));
    let stopped = orphan.try_wait().unwrap().is_some() || {
        std::thread::sleep(Duration::from_millis(500));
        orphan.try_wait().unwrap().is_some()
    };
    if !stopped {
        let _ = orphan.kill();
    }
    let _ = orphan.wait();
    assert_eq!(code, Some(5), "{err}");
    assert!(stopped, "the orphaned agent outlived the run: {err}");
    assert!(err.contains(&format!("(session profile-llmperf-{gone_pid}): the nsys that started it is gone")), "{err}");
}
