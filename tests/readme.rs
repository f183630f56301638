//! The README's examples that can run on this machine (no GPU; no program of
//! the user's), run from a shell whose PATH has no venv: the built binary's
//! directory and the system's. Each line is taken from README.md itself, so
//! an example that changes there is the one tested here.
use std::path::Path;

use crate::common::*;

/// README lines (up to their comment); the files they name that are the
/// user's are real ones of the corpus here: `report1.sqlite` (an nsys export)
/// and `profile.ncu-rep` (an ncu report the local ncu renders).
const EXAMPLES: [&str; 8] = [
    "llmperf doctor",
    "llmperf workload --model nvtx_regions",
    "llmperf profile --model hf model.arch=mixtral",
    "llmperf config show --origin runner=light",
    "llmperf import nsys report1.sqlite -o runs/old && head -20 runs/old/stakeholder_summary.md",
    "llmperf import ncu profile.ncu-rep -o runs/ncu",
    "llmperf validate runs/ncu",
    "llmperf report runs/ncu",
];

#[test]
fn the_readme_examples_run_from_a_shell_without_the_venv() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some(db) = corpus_copy(&test, "real/memfusion/report1.sqlite", root.path()) else { return };
    std::fs::rename(&db, root.path().join("report1.sqlite")).unwrap();
    let Some(rep) = corpus_copy(&test, "real/nsight-training/manual_nvtx.ncu-rep", root.path()) else { return };
    std::fs::rename(&rep, root.path().join("profile.ncu-rep")).unwrap();
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let exe = Path::new(env!("CARGO_BIN_EXE_llmperf"));
    // No .venv/bin on it: the binary's own directory, then the system's.
    let path = format!("{}:/usr/local/bin:/usr/bin:/bin", exe.parent().unwrap().display());
    let _nsys = nsys_lock();
    for example in EXAMPLES {
        assert!(
            readme.lines().any(|l| l.split(" #").next().unwrap().trim_end() == example),
            "not a README example any more: {example}"
        );
        let out = std::process::Command::new("/bin/sh")
            .args(["-c", example])
            .current_dir(root.path())
            .env_clear()
            .env("PATH", &path)
            .env("HOME", root.path())
            .env("LLMPERF_PIPELINE__NSYS__TIMEOUT_S", "300")
            .env("LLMPERF_PIPELINE__NSYS__POSTPROCESS_TIMEOUT_S", "60")
            .env("LLMPERF_PIPELINE__NSYS__HANG_RETRIES", "5")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{example}:\n{stderr}");
    }
    // The hf example ran in the project's venv (model.python=auto), not the system's python3.
    let runs = root.path().join("tmp/profile-output");
    let hf = std::fs::read_dir(&runs)
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .find(|d| std::fs::read_to_string(d.join("config.yaml")).is_ok_and(|c| c.contains("mixtral")))
        .expect("the hf run");
    let timings = json(&hf.join("workload/timings.json"));
    assert!(timings["stages"].as_object().is_some_and(|s| !s.is_empty()), "{timings}");
}
