//! The built-in workloads through the executable (and so the plugin) on CPU:
//! timings.json against its schema and FLOPs formula, stages, TorchScript
//! models exported by the venv's torch. (The models in-process: torch/src/workload/tests.rs.)
use crate::common::*;
use predicates::prelude::*;
use std::path::Path;

fn run_workload(dir: &Path, args: &[&str]) -> std::path::PathBuf {
    let out = llmperf().args(["workload", "-o"]).arg(dir).args(args).assert().success().get_output().stdout.clone();
    run_dir(&out)
}

#[test]
fn timings_json_follows_its_schema_and_flops_formula() {
    let root = tempfile::tempdir().unwrap();
    let dir = run_workload(root.path(), &["--model", "llm_tiny", "infer.iters=2", "infer.max_new_tokens=4"]);
    let timings = json(&dir.join("workload/timings.json"));
    let schema: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("specs/timings.schema.json")).unwrap(),
    )
    .unwrap();
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> =
        validator.iter_errors(&timings).map(|e| format!("{} at {}", e, e.instance_path)).collect();
    assert!(errors.is_empty(), "{errors:?}");

    assert_eq!(timings["stages"]["prefill"]["count"], 2);
    assert_eq!(timings["stages"]["decode_all::decode_step"]["count"], 2 * 3);
    assert!(timings["operators"]["prefill::layer_1::attn"]["count"] == 2);
    let n = timings["model"]["parameters"].as_f64().unwrap();
    // prompt 16, batch 2, L 2, d 64: 2·(2N·16 + 4·2·64·16·17/2)
    let prefill = 2.0 * (2.0 * n * 16.0 + 4.0 * 2.0 * 64.0 * 16.0 * 17.0 / 2.0);
    assert_eq!(timings["flops"]["per_call"]["prefill"].as_f64().unwrap(), prefill);
    let bytes = &timings["decode_bytes"];
    assert_eq!(bytes["weight_bytes"].as_f64().unwrap(), n * 4.0);
    // Steps see 16, 17, 18 past tokens: K and V, 2 layers, batch 2, d 64, 4 bytes.
    let kv_mean = (16.0 + 17.0 + 18.0) / 3.0 * 2.0 * 2.0 * 2.0 * 64.0 * 4.0;
    assert_eq!(bytes["kv_cache_bytes_mean"].as_f64().unwrap(), kv_mean);
    assert!(timings["throughput"]["decode_tokens_per_s"].as_f64().unwrap() > 0.0);
    // The model metadata is part of the run's provenance.
    let inputs: serde_yaml::Value =
        serde_yaml::from_str(&std::fs::read_to_string(dir.join("inputs.yaml")).unwrap()).unwrap();
    let meta = &inputs["model_metadata"];
    assert_eq!(meta["parameters"].as_f64().unwrap(), n);
    assert_eq!(
        (meta["layers"].as_i64(), meta["heads"].as_i64(), meta["vocab_size"].as_i64()),
        (Some(2), Some(4), Some(256))
    );
    assert_eq!(meta["variant"], "llm_tiny");
}

#[test]
fn resnet_and_regions_record_their_stages() {
    let root = tempfile::tempdir().unwrap();
    let dir = run_workload(root.path(), &["infer.iters=3", "infer.batch_size=2", "infer.image_size=16"]);
    let t = json(&dir.join("workload/timings.json"));
    assert_eq!(t["model"]["name"], "dummy_shallow_resnet");
    assert_eq!(t["model"]["input_shapes"][0], serde_json::json!([2, 3, 16, 16]));
    assert_eq!(t["stages"]["forward"]["count"], 3);
    for op in ["forward::stem", "forward::block_0", "forward::block_2", "forward::head"] {
        assert_eq!(t["operators"][op]["count"], 3, "{op}");
    }
    // stem 2·2·3·16·9·256 + 3 blocks × 2 convs 2·2·16·16·9·256 + head 2·2·16·10
    let expected =
        2.0 * 2.0 * 3.0 * 16.0 * 9.0 * 256.0 + 6.0 * 2.0 * 2.0 * 16.0 * 16.0 * 9.0 * 256.0 + 2.0 * 2.0 * 16.0 * 10.0;
    assert_eq!(t["flops"]["per_call"]["forward"].as_f64().unwrap(), expected);

    let dir = run_workload(root.path(), &["--model", "nvtx_regions", "infer.iters=4", "--no-nvtx"]);
    let t = json(&dir.join("workload/timings.json"));
    assert_eq!(t["nvtx"], false);
    for stage in ["A", "A::A1", "B"] {
        assert_eq!(t["stages"][stage]["count"], 4, "{stage}");
    }
    let manifest = json(&dir.join("manifest.json"));
    assert_eq!(stage(&manifest, "workload")["status"], "ok");
}

fn export_torchscript(dir: &Path) -> std::path::PathBuf {
    let path = dir.join("mlp.pt");
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    let script = format!(
        "import torch\nm = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3)).eval()\n\
         torch.jit.trace(m, torch.randn(2, 4)).save({:?})\n",
        path.display().to_string()
    );
    let status = std::process::Command::new(python).args(["-c", &script]).status().unwrap();
    assert!(status.success());
    path
}

#[test]
fn torchscript_module_exported_by_torch_loads_and_runs() {
    let root = tempfile::tempdir().unwrap();
    let model = export_torchscript(root.path());
    let dir = run_workload(
        root.path(),
        &[
            "--model",
            "torchscript",
            &format!("model.path={}", model.display()),
            "model.input_shapes=[[2,4]]",
            "infer.iters=5",
        ],
    );
    let t = json(&dir.join("workload/timings.json"));
    assert_eq!(t["stages"]["forward"]["count"], 5);
    assert_eq!(t["model"]["parameters"], 4 * 8 + 8 + 8 * 3 + 3);
}

#[test]
fn torchscript_errors_are_clear() {
    let root = tempfile::tempdir().unwrap();
    llmperf()
        .args(["workload", "--model", "torchscript", "-o"])
        .arg(root.path())
        .assert()
        .code(3)
        .stderr(predicate::str::contains("model.path is not set"))
        .stderr(predicate::str::contains("hint: export with torch.jit.trace"));
    let garbage = root.path().join("garbage.pt");
    std::fs::write(&garbage, b"not a torchscript archive").unwrap();
    llmperf()
        .args(["workload", "--model", "torchscript", "-o"])
        .arg(root.path())
        .arg(format!("model.path={}", garbage.display()))
        .assert()
        .code(5)
        .stderr(predicate::str::contains("cannot load TorchScript module"))
        .stderr(predicate::str::contains("garbage.pt"));
    // A module fed the wrong input shape fails with a hint, not a panic.
    let model = export_torchscript(root.path());
    llmperf()
        .args(["workload", "--model", "torchscript", "-o"])
        .arg(root.path())
        .args([&format!("model.path={}", model.display()), "model.input_shapes=[[2,5]]"])
        .assert()
        .code(5)
        .stderr(predicate::str::contains("hint:"));
}

#[test]
fn impossible_llm_shapes_are_config_errors() {
    let root = tempfile::tempdir().unwrap();
    llmperf()
        .args(["workload", "--model", "llm_tiny", "infer.prompt_len=120", "infer.max_new_tokens=20", "-o"])
        .arg(root.path())
        .assert()
        .code(3)
        .stderr(predicate::str::contains("max_seq_len 128"));
}

/// `model.extra_b_matmuls`: a known change of work in B alone, for tests of
/// run comparisons. The analytic FLOPs say how much: B does 1 + N matmuls;
/// A and A::A1 are untouched.
#[test]
fn the_regions_demo_adds_known_work_to_b_only() {
    let root = tempfile::tempdir().unwrap();
    let flops = |extra: &str| {
        let dir = run_workload(root.path(), &["--model", "nvtx_regions", "infer.iters=2", extra]);
        let t = json(&dir.join("workload/timings.json"));
        let per_call = |r: &str| t["flops"]["per_call"][r].as_f64().unwrap();
        assert_eq!(t["stages"]["B"]["count"], 2);
        (per_call("A"), per_call("A::A1"), per_call("B"))
    };
    let matmul = |n: f64| 2.0 * n * n * n;
    let plain = flops("model.extra_b_matmuls=0");
    let slowed = flops("model.extra_b_matmuls=3");
    assert_eq!(plain, (matmul(256.0) + matmul(128.0), matmul(128.0), matmul(192.0)));
    assert_eq!(slowed, (plain.0, plain.1, 4.0 * matmul(192.0)));
}

/// `runner.run.repeat`: the measured loop N times in one run, every sample
/// kept, each repeat's median recorded, and the spread shown in the reports.
#[test]
fn repeats_multiply_the_samples_and_the_report_shows_their_spread() {
    let root = tempfile::tempdir().unwrap();
    let dir = run_workload(root.path(), &["--model", "nvtx_regions", "infer.iters=4", "runner.run.repeat=3"]);
    let t = json(&dir.join("workload/timings.json"));
    assert_eq!((t["iters"].as_i64(), t["repeat"].as_i64()), (Some(4), Some(3)));
    for region in ["A", "A::A1", "B"] {
        let samples: Vec<f64> =
            t["samples_ms"][region].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        assert_eq!(samples.len(), 12, "{region}");
        assert_eq!(t["stages"][region]["count"], 12);
        // Each repeat's median is the median of its own four samples, in order.
        let medians: Vec<f64> =
            t["repeat_medians_ms"][region].as_array().unwrap().iter().map(|v| v.as_f64().unwrap()).collect();
        for (i, m) in medians.iter().enumerate() {
            let mut part = samples[i * 4..(i + 1) * 4].to_vec();
            part.sort_by(f64::total_cmp);
            assert!((m - (part[1] + part[2]) / 2.0).abs() < 1e-12, "{region} repeat {i}: {m}");
        }
        assert_eq!(medians.len(), 3);
    }
    llmperf().arg("report").arg(&dir).assert().success();
    let summary = std::fs::read_to_string(dir.join("stakeholder_summary.md")).unwrap();
    let spread = summary.split("### Spread across 3 repeats of the measured loop").nth(1).expect("a spread section");
    let rows: Vec<&str> =
        spread.lines().take_while(|l| !l.starts_with("Spread:")).filter(|l| l.starts_with("| `")).collect();
    assert_eq!(rows.len(), 3, "{summary}");
    let a = &t["repeat_medians_ms"]["A"];
    assert!(rows[0].starts_with(&format!("| `A` | {:.4}, ", a[0].as_f64().unwrap())), "{}", rows[0]);
    // Nothing to repeat in a user's command; a loop must run at least once.
    llmperf()
        .args(["profile", "--no-nsys", "runner.run.repeat=2", "--", "true"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("cannot repeat the loop of `true`"))
        .stderr(predicate::str::contains("hint:"));
    llmperf()
        .args(["workload", "runner.run.repeat=0"])
        .assert()
        .code(3)
        .stderr(predicate::str::contains("runner.run.repeat"))
        .stderr(predicate::str::contains("hint:"));
}
