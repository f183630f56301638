//! The binary's command line, configuration output and errors (no profiler runs).
use crate::common::*;
use predicates::prelude::*;

#[test]
fn help_shows_examples_for_every_command() {
    llmperf().arg("--help").assert().success().stdout(predicate::str::contains("Examples:"));
    for sub in [&["profile"][..], &["doctor"][..], &["config", "show"][..], &["import", "ncu"][..], &["validate"][..]] {
        llmperf().args(sub).arg("--help").assert().success().stdout(predicate::str::contains("Example"));
    }
}

#[test]
fn config_show_prints_resolved_yaml_with_overrides() {
    let out = llmperf()
        .args(["config", "show", "pipeline.ncu.ncu_cli.replay_mode=range", "device=cuda:1"])
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let yaml: serde_yaml::Value = serde_yaml::from_slice(&out).unwrap();
    assert_eq!(yaml["pipeline"]["ncu"]["ncu_cli"]["replay_mode"], "range");
    assert_eq!(yaml["device"], "cuda:1");
    assert_eq!(yaml["model"]["name"], "dummy_shallow_resnet");
    assert!(yaml.get("defaults").is_none(), "the defaults list is not configuration");
}

#[test]
fn config_show_origin_names_each_layer() {
    llmperf()
        .args(["config", "show", "--origin", "runner=light", "runner.run.top_n_kernels=3"])
        .env("LLMPERF_PIPELINE__NSYS__TIMEOUT_S", "60")
        .assert()
        .success()
        .stdout(
            predicate::str::is_match(r#"runner\.run\.mode: "light"\s+# conf/runner/light\.yaml \(embedded\)"#).unwrap(),
        )
        .stdout(
            predicate::str::is_match(r"runner\.run\.top_n_kernels: 3\s+# command line `runner\.run\.top_n_kernels=3`")
                .unwrap(),
        )
        .stdout(
            predicate::str::is_match(
                r"pipeline\.nsys\.timeout_s: 60\s+# environment LLMPERF_PIPELINE__NSYS__TIMEOUT_S",
            )
            .unwrap(),
        );
}

#[test]
fn unknown_key_exits_with_config_code_and_hint() {
    llmperf()
        .args(["config", "show", "pipeline.ncu.ncu_cli.replay_mod=range"])
        .assert()
        .code(3)
        .stdout("")
        .stderr(predicate::str::contains("error: unknown key pipeline.ncu.ncu_cli.replay_mod"))
        .stderr(predicate::str::contains("hint: did you mean replay_mode?"));
}

#[test]
fn unknown_group_option_lists_the_available_ones() {
    llmperf()
        .args(["config", "show", "profiling/ncu@pipeline.ncu=ncu.ultra"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("unknown option `ncu.ultra`"))
        .stderr(predicate::str::contains("ncu.default, ncu.high, ncu.light"));
}

#[test]
fn malformed_override_and_wrong_flag_are_usage_errors() {
    llmperf()
        .args(["config", "show", "pipeline.ncu"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("bad override `pipeline.ncu`"))
        .stderr(predicate::str::contains("hint:"));
    llmperf().args(["profile", "--replay-mod", "range"]).assert().code(2);
    llmperf()
        .args(["profile", "--replay-mode", "sideways", "--", "true"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("kernel, application, range, app-range"));
}

#[test]
fn malformed_yaml_in_config_dir_names_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("runner")).unwrap();
    std::fs::write(dir.path().join("runner/default.yaml"), "run:\n  mode: deep\n   top_n_kernels: 3\n").unwrap();
    llmperf()
        .arg("--config-dir")
        .arg(dir.path())
        .args(["config", "show"])
        .assert()
        .code(3)
        .stderr(predicate::str::is_match(r"runner/default\.yaml:3:\d+: malformed YAML").unwrap());
}

#[test]
fn convenience_flags_map_to_keys() {
    let root = tempfile::tempdir().unwrap();
    // --no-nsys and no ncu: nothing runs, and a warning says so, but the run directory is complete.
    let out = llmperf()
        .current_dir(root.path())
        .args(["profile", "--no-nsys", "--device", "cpu", "-o", "runs", "--nvtx-include", "A::A1", "--", "true"])
        .assert()
        .success()
        .stderr(predicate::str::contains("nsys, ncu and torch.profiler are all disabled: the command does not run"))
        .get_output()
        .stdout
        .clone();
    let dir = root.path().join(run_dir(&out));
    assert!(dir.starts_with(root.path().join("runs")), "{}", dir.display());
    let config: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(dir.join("config.yaml")).unwrap()).unwrap();
    assert_eq!(config["device"], "cpu");
    assert_eq!(config["pipeline"]["nsys"]["enable"], false);
    assert_eq!(config["pipeline"]["ncu"]["ncu_cli"]["nvtx"]["include"][0], "A::A1");
    let manifest = json(&dir.join("manifest.json"));
    assert_eq!(manifest["status"], "ok");
    assert_eq!(stage(&manifest, "nsys")["status"], "skipped");
    assert_eq!(stage(&manifest, "nsys")["reason"], "disabled (pipeline.nsys.enable=false)");
}

#[test]
fn missing_profiler_skips_the_stage_and_keeps_provenance() {
    let root = tempfile::tempdir().unwrap();
    let out = llmperf()
        .args(["profile", "pipeline.nsys.executable=/nonexistent/nsys", "-o"])
        .arg(root.path())
        .args(["--", "true"])
        .assert()
        .code(4)
        .stderr(predicate::str::contains("error: nsys not found"))
        .stderr(predicate::str::contains("hint: install Nsight Systems"))
        .get_output()
        .stdout
        .clone();
    let dir = run_dir(&out);
    let manifest = json(&dir.join("manifest.json"));
    assert_eq!(manifest["status"], "failed");
    let nsys = stage(&manifest, "nsys");
    assert_eq!(nsys["status"], "skipped");
    assert!(nsys["reason"].as_str().unwrap().contains("/nonexistent/nsys"), "{nsys}");
    assert!(nsys["hint"].as_str().unwrap().contains("--no-nsys"));
    let env = json(&dir.join("env.json"));
    assert_eq!(env["schema"], "llmperf.env/v1");
    assert!(env["tools"]["nsys"]["error"].as_str().unwrap().contains("not found"));
    assert!(env["cpu"]["logical_cores"].as_u64().unwrap() >= 1);
    // A user's command: llmperf's libtorch is not loaded for it.
    assert_eq!(env["libtorch"]["linked"], false);
    assert_eq!(env["libtorch"]["error"], "not loaded: the workload is a user command");
    let inputs: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(dir.join("inputs.yaml")).unwrap()).unwrap();
    assert_eq!(inputs["workload"]["argv"][0], "true");
}

#[test]
fn profile_command_starting_with_a_dash_is_a_usage_error() {
    // nsys takes the application right after its own options: `-x` would be read as one.
    llmperf()
        .args(["profile", "--no-nsys", "--", "-x"])
        .assert()
        .code(2)
        .stderr(predicate::str::contains("the command to profile starts with `-x`"))
        .stderr(predicate::str::contains("hint:"));
}

#[test]
fn doctor_on_this_machine_warns_without_failing() {
    // Here: nsys and ncu installed by setup.sh, no GPU, libtorch from the venv.
    let out = llmperf().arg("doctor").assert().success().get_output().stdout.clone();
    let text = String::from_utf8(out).unwrap();
    assert!(text.contains("OK    nsys"), "{text}");
    assert!(text.contains("OK    ncu"), "{text}");
    let gpu = text.lines().find(|l| l.contains(" GPU ")).unwrap();
    if !std::path::Path::new("/proc/driver/nvidia").exists() {
        assert!(gpu.starts_with("WARN"), "{text}");
        assert!(text.contains("hint: workloads run on CPU"), "{text}");
    }
    assert!(text.contains("ready: llmperf can run its default profile"), "{text}");
}

#[test]
fn doctor_says_whether_the_torch_tracer_works_with_the_python3_on_path() {
    let venv = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin");
    let path = format!("{}:/usr/bin:/bin", venv.display());
    let out = llmperf().arg("doctor").env("PATH", &path).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains("torch tracer")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.starts_with("OK") && line.contains("torch 2.") && line.contains(".venv/bin/python3"), "{line}");
    // A python3 without torch (an empty folder's stand-in on PATH): a warning that says so.
    let dir = tempfile::tempdir().unwrap();
    write_executable(
        &dir.path().join("python3"),
        "#!/bin/sh\necho \"ModuleNotFoundError: No module named 'torch'\" >&2\nexit 1\n",
    );
    let out = llmperf().arg("doctor").env("PATH", format!("{}:/usr/bin:/bin", dir.path().display())).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().find(|l| l.contains("torch tracer")).unwrap_or_else(|| panic!("{text}"));
    assert!(line.starts_with("WARN") && line.contains("cannot import torch (ModuleNotFoundError"), "{line}");
}

#[test]
fn without_nsys_a_python_program_is_pointed_at_the_torch_tracer() {
    let root = tempfile::tempdir().unwrap();
    let run = |command: &[&str]| {
        let out = llmperf()
            .args(["profile", "--no-ncu", "pipeline.nsys.executable=/nonexistent/nsys", "-o"])
            .arg(root.path())
            .arg("--")
            .args(command)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(4), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let python = run(&["python3", "-c", "pass"]);
    assert!(python.contains("error: nsys not found"), "{python}");
    assert!(
        python.contains(
            "or record this Python program's timeline with torch.profiler instead: llmperf profile --tracer torch"
        ),
        "{python}"
    );
    let shell = run(&["sh", "-c", "true"]);
    assert!(shell.contains("error: nsys not found") && !shell.contains("--tracer torch"), "{shell}");
}

#[test]
fn doctor_fails_when_the_enabled_profiler_is_missing() {
    llmperf()
        .args(["doctor", "pipeline.nsys.executable=/nonexistent/nsys"])
        .assert()
        .code(4)
        .stdout(predicate::str::contains("FAIL  nsys"))
        .stdout(predicate::str::contains("not ready"));
}

/// A stand-in for nsys 2022.4's intermittent hang (seen on these machines): it
/// runs the application (here a short child), then on its first capture hangs
/// on alone as nsys does; the second capture writes a report. Its `export`
/// replays a real export (the project's own CPU capture) and `stats` writes nothing.
fn fake_nsys_hanging_once(dir: &std::path::Path) -> std::path::PathBuf {
    fake_nsys_once(dir, "exec sleep 60")
}

/// A stand-in for nsys 2022.4 failing on its own mid-capture (seen here
/// about once a `make test`: exit 1, "End of file" its last words, no
/// report), `times` captures in a row; the next capture writes a report.
fn fake_nsys_failing(dir: &std::path::Path, times: u32) -> std::path::PathBuf {
    let count = dir.join("failures");
    fake_nsys_once(
        dir,
        &format!(
            "n=$(cat {count} 2>/dev/null || echo 0); if [ $n -lt {times} ]; then echo $((n+1)) > {count}; rm -f {state}; echo 'End of file' >&2; exit 1; fi",
            count = count.display(),
            state = dir.join("hung-once").display()
        ),
    )
}

/// A fake nsys whose first capture runs `first` (its report not yet written).
fn fake_nsys_once(dir: &std::path::Path, first: &str) -> std::path::PathBuf {
    let script = dir.join("nsys");
    let state = dir.join("hung-once");
    let sqlite = own("runs/cpu_llm_tiny/nsys/report.sqlite");
    write_executable(
        &script,
        &format!(
            r#"#!/bin/sh
if [ "$1" = "--version" ]; then echo "NVIDIA Nsight Systems version 2022.4.2.1-df9881f"; exit 0; fi
if [ "$1" = "stats" ]; then exit 0; fi
if [ "$1" = "export" ]; then
  prev=; for a in "$@"; do [ "$prev" = "--output" ] && out="$a"; prev="$a"; done
  cp {sqlite} "$out"; exit 0
fi
for a in "$@"; do case "$a" in --output=*) out="${{a#--output=}}";; esac; done
sleep 0.5
echo "Generating '/tmp/nsys-report-fake.qdstrm'"
if [ ! -e {state} ]; then touch {state}; {first}; fi
touch "$out.nsys-rep"
echo "Generated:"
"#,
            state = state.display(),
            sqlite = sqlite.display()
        ),
    );
    script
}

/// `llmperf profile OVERRIDES -- true` under a stand-in nsys, runs under `dir`.
fn profile_true_under(dir: &std::path::Path, nsys: &std::path::Path, overrides: &[&str]) -> assert_cmd::assert::Assert {
    llmperf()
        .arg("profile")
        .args(overrides)
        .arg("-o")
        .arg(dir.join("runs"))
        .arg(format!("pipeline.nsys.executable={}", nsys.display()))
        .args(["--", "true"])
        .timeout(std::time::Duration::from_secs(50))
        .assert()
}

/// nsys writes its capture whatever the application's status, so an exit
/// status without one is nsys's own failure: the capture is tried again,
/// and the lost attempt is a diagnosis with its logs kept.
#[test]
fn nsys_failing_on_its_own_is_retried_and_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let nsys = fake_nsys_failing(dir.path(), 1);
    let out = profile_true_under(dir.path(), &nsys, &[])
        .success()
        .stderr(predicate::str::contains(
            "nsys ended with exit code 1 and wrote no capture (attempt 1 of 3); capturing again",
        ))
        .get_output()
        .stdout
        .clone();
    let manifest = json(&run_dir(&out).join("manifest.json"));
    let nsys = stage(&manifest, "nsys");
    assert_eq!(nsys["status"], "ok");
    assert_eq!(nsys["diagnoses"].as_array().unwrap().len(), 1, "{nsys}");
    assert_eq!(nsys["diagnoses"][0]["code"], "nsys_failed_without_capture");
    assert_eq!(
        nsys["diagnoses"][0]["message"],
        "attempt 1: nsys ended with exit code 1 and wrote no capture: End of file"
    );
    let kept = std::fs::read_to_string(run_dir(&out).join("nsys/stderr.attempt1.log")).unwrap();
    assert_eq!(kept.trim(), "End of file");
}

/// When every attempt is lost, the error is nsys's, never the application's.
#[test]
fn nsys_failing_on_every_attempt_is_named_as_nsys_not_the_application() {
    let dir = tempfile::tempdir().unwrap();
    let nsys = fake_nsys_failing(dir.path(), 2);
    let out = profile_true_under(dir.path(), &nsys, &["pipeline.nsys.hang_retries=1"])
        .code(5)
        .stderr(predicate::str::contains("error: nsys exited with code 1 and wrote no capture: End of file"))
        .stderr(predicate::str::contains("hint: nsys 2022.4 sometimes fails on its own mid-capture"))
        .get_output()
        .stdout
        .clone();
    let manifest = json(&run_dir(&out).join("manifest.json"));
    let nsys = stage(&manifest, "nsys");
    assert_eq!(nsys["status"], "failed");
    assert_eq!(nsys["reason"], "nsys exited with code 1 and wrote no capture: End of file");
    let codes: Vec<&str> = nsys["diagnoses"].as_array().unwrap().iter().map(|d| d["code"].as_str().unwrap()).collect();
    assert_eq!(codes, ["nsys_failed_without_capture", "nsys_failed_without_capture"]);
}

#[test]
fn nsys_hang_after_the_application_is_retried_and_recorded() {
    let dir = tempfile::tempdir().unwrap();
    let nsys = fake_nsys_hanging_once(dir.path());
    let out = profile_true_under(dir.path(), &nsys, &["pipeline.nsys.postprocess_timeout_s=1"])
        .success()
        .stderr(predicate::str::contains("nsys hung converting its capture (attempt 1 of 3); capturing again"))
        .get_output()
        .clone();
    // The log says how each attempt ended: the hung one was stopped, it never "finished".
    let stderr = String::from_utf8_lossy(&out.stderr);
    let ends: Vec<&str> =
        stderr.lines().filter(|l| l.contains(" nsys finished in ") || l.contains(" nsys stalled ")).collect();
    assert_eq!(ends.len(), 2, "{stderr}");
    assert!(ends[0].contains("nsys stalled after its last phase began and was killed at"), "{stderr}");
    assert!(ends[1].contains("nsys finished in"), "{stderr}");
    let out = out.stdout;
    let manifest = json(&run_dir(&out).join("manifest.json"));
    let nsys = stage(&manifest, "nsys");
    assert_eq!(nsys["status"], "ok");
    assert_eq!(nsys["diagnoses"][0]["code"], "nsys_postprocess_hang");
    assert!(nsys["artifacts"].as_array().unwrap().iter().any(|a| a == "nsys/stdout.attempt1.log"), "{nsys}");
    assert!(run_dir(&out).join("nsys/stdout.attempt1.log").is_file());
}

/// nsys 2022.4 here sometimes deadlocks the application in the NVTX call of
/// its capture range, before it prints "Capture range started" (gdb: the
/// application in nsys's injection, the agent idle). A fake nsys that prints
/// nothing and never ends stands in for it.
#[test]
fn a_capture_range_that_never_started_is_named_at_the_timeout() {
    let dir = tempfile::tempdir().unwrap();
    let nsys = dir.path().join("nsys");
    write_executable(
        &nsys,
        "#!/bin/sh\nif [ \"$1\" = \"--version\" ]; then echo \"NVIDIA Nsight Systems version 2022.4.2.1-df9881f\"; exit 0; fi\nexec sleep 60\n",
    );
    let stderr = llmperf()
        .args(["profile", "pipeline.nsys.timeout_s=1", "pipeline.nsys.stop_timeout_s=1"])
        .args(["pipeline.nsys.capture_range=nvtx", "pipeline.nsys.nvtx_capture=B", "-o"])
        .arg(dir.path().join("runs"))
        .arg(format!("pipeline.nsys.executable={}", nsys.display()))
        .args(["--", "true"])
        .timeout(std::time::Duration::from_secs(40))
        .assert()
        .code(5)
        .get_output()
        .stderr
        .clone();
    let stderr = String::from_utf8_lossy(&stderr);
    assert!(
        stderr.contains("error: nsys reached pipeline.nsys.timeout_s (1 s) and was stopped (no capture was written); its capture range never started"),
        "{stderr}"
    );
    assert!(
        stderr.contains(
            "hint: either the application never entered the range (pipeline.nsys.nvtx_capture=B, in nsys's RANGE@DOMAIN order), or nsys 2022.4 hung in it"
        ),
        "{stderr}"
    );
}

#[test]
fn nsys_hang_without_retries_fails_with_a_hint() {
    let dir = tempfile::tempdir().unwrap();
    let nsys = fake_nsys_hanging_once(dir.path());
    let out = profile_true_under(
        dir.path(),
        &nsys,
        &["pipeline.nsys.postprocess_timeout_s=1", "pipeline.nsys.hang_retries=0"],
    )
    .code(5)
    .stderr(predicate::str::contains("error: nsys hung converting its capture after the application finished"))
    .stderr(predicate::str::contains("hint: a known Nsight Systems 2022.4 problem"))
    .get_output()
    .stdout
    .clone();
    let manifest = json(&run_dir(&out).join("manifest.json"));
    assert_eq!(stage(&manifest, "nsys")["status"], "failed");
    assert_eq!(stage(&manifest, "nsys")["exit"]["timed_out"], true);
}

#[test]
fn import_of_a_sqlite_needs_no_nsys_and_bad_files_are_unparseable() {
    let root = tempfile::tempdir().unwrap();
    let Some(fixture) = corpus_copy!("real/memfusion/report1.sqlite", root.path()) else { return };
    let out = root.path().join("m");
    llmperf()
        .args(["import", "nsys"])
        .arg(&fixture)
        .args(["pipeline.nsys.executable=/nonexistent/nsys", "-o"])
        .arg(&out)
        .assert()
        .success();
    let regions = json(&out.join("nsys/regions.json"));
    assert_eq!(regions["regions"].as_array().unwrap().len(), 59);
    assert_eq!(regions["schema"], "llmperf.nsys-regions/v1");
    let garbage = root.path().join("garbage.sqlite");
    std::fs::write(&garbage, b"\x00\x01not sqlite at all").unwrap();
    let out = root.path().join("g");
    llmperf()
        .args(["import", "nsys"])
        .arg(&garbage)
        .args(["pipeline.nsys.executable=/nonexistent/nsys", "-o"])
        .arg(&out)
        .assert()
        .code(6)
        .stderr(predicate::str::contains("garbage.sqlite"))
        .stderr(predicate::str::contains("hint:"));
    assert_eq!(stage(&json(&out.join("manifest.json")), "nsys_regions")["status"], "failed");
}

#[test]
fn doctor_require_gpu_fails_where_a_gpu_feature_is_missing() {
    let host_has_gpu = std::path::Path::new("/proc/driver/nvidia").exists();
    let out = llmperf().args(["doctor", "--require-gpu"]).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let gpu = text.lines().find(|l| l.contains(" GPU ")).unwrap();
    if host_has_gpu {
        // A GPU host: the verdict follows what doctor found there.
        assert_eq!(out.status.code() == Some(0), !text.contains("FAIL"), "{text}");
    } else {
        // No GPU: the WARN of a plain doctor is a FAIL, and the exit status 4.
        assert!(gpu.starts_with("FAIL"), "{text}");
        assert!(text.lines().any(|l| l.starts_with("FAIL  GPU counter permission")), "{text}");
        assert_eq!(out.status.code(), Some(4), "{text}");
    }
}

/// A log redirected to a file (as here: stderr is a pipe) is plain text: no
/// terminal colour codes around `WARN`/`INFO` (they were there).
#[test]
fn a_redirected_log_has_no_colour_codes() {
    let root = tempfile::tempdir().unwrap();
    let out = llmperf().args(["profile", "--no-nsys", "-o"]).arg(root.path()).args(["--", "true"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains(" WARN ") || stderr.contains("WARN nsys"), "{stderr}");
    assert!(!stderr.contains('\x1b'), "{stderr:?}");
}

/// `--device cuda:0` of the built-in workload on a host where libtorch sees no
/// CUDA device is refused before any profiler runs (it was refused by the
/// workload, after a whole nsys capture): exit 3, and no run directory.
#[test]
fn a_cuda_device_libtorch_does_not_see_is_refused_before_nsys() {
    if gpu_host() {
        return skipped(&this_test!(), "a GPU host: libtorch sees cuda:0");
    }
    let root = tempfile::tempdir().unwrap();
    llmperf()
        .args(["profile", "--model", "nvtx_regions", "--device", "cuda:0", "-o"])
        .arg(root.path())
        .assert()
        .code(3)
        .stderr(predicate::str::contains("error: device cuda:0 requested but libtorch sees 0 CUDA device(s)"))
        .stderr(predicate::str::contains("run directory").not());
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0, "nothing written");
}

/// `config show --model NAME` prints what `profile --model NAME` would run
/// (it was refused as an unknown flag), and `--origin` says what
/// `model.python: auto` comes to: this checkout's venv.
#[test]
fn config_show_takes_profiles_model_and_says_what_auto_python_is() {
    let out = llmperf().args(["config", "show", "--model", "hf", "model.arch=qwen2"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let cfg: serde_yaml::Value = serde_yaml::from_str(&stdout).unwrap();
    assert_eq!(cfg["model"]["name"], "hf", "{stdout}");
    assert_eq!(cfg["model"]["arch"], "qwen2", "{stdout}");
    assert_eq!(cfg["model"]["python"], "auto", "{stdout}");
    let out = llmperf().args(["config", "show", "--origin", "--model", "hf"]).output().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let venv = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python3");
    let line = stdout.lines().find(|l| l.starts_with("model.python: \"auto\"")).unwrap_or_else(|| panic!("{stdout}"));
    assert!(line.ends_with(&format!("; auto = the project's venv, {}", venv.display())), "{line}");
}
