//! `llmperf profile --annotate modules -- python SCRIPT` under the real nsys:
//! module-path regions from a program that has no NVTX range of its own.
//! The oracle is the script's structure (scripts/module_demo.py): each of its
//! 3 forwards calls every module once.
use crate::common::*;
use std::path::Path;
use std::time::Duration;

fn profile(root: &Path, extra: &[&str]) -> std::process::Output {
    profile_script(root, extra, "scripts/module_demo.py", &["3"])
}

fn profile_script(root: &Path, extra: &[&str], script: &str, args: &[&str]) -> std::process::Output {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    llmperf()
        .arg("profile")
        .args(NSYS_HANG)
        .args(["--no-ncu", "-o"])
        .arg(root)
        .args(extra)
        .arg("--")
        .arg(venv)
        .arg(script)
        .args(args)
        .timeout(Duration::from_secs(900))
        .output()
        .unwrap()
}

/// (path, instances) of the regions in the injected ranges' domain.
fn module_regions(stdout: &[u8]) -> Vec<(String, u64)> {
    regions_of(stdout, "llmperf.modules")
}

fn regions_of(stdout: &[u8], domain: &str) -> Vec<(String, u64)> {
    let regions = json(&run_dir(stdout).join("nsys/regions.json"));
    let mut got: Vec<(String, u64)> = regions["regions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["domain"] == domain)
        .map(|r| (r["path"].as_str().unwrap().to_string(), r["instances"].as_u64().unwrap()))
        .collect();
    got.sort();
    got
}

#[test]
fn every_module_call_is_a_region_named_by_its_path() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let out = profile(root.path(), &["--annotate", "modules"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(!stderr.contains("no range of the llmperf.modules domain"), "{stderr}");
    let mut want: Vec<(String, u64)> = vec![("Net".into(), 3), ("Net::head".into(), 3)];
    for b in ["blocks.0", "blocks.1"] {
        want.push((format!("Net::{b}"), 3));
        want.push((format!("Net::{b}::{b}.attn"), 3));
        want.push((format!("Net::{b}::{b}.mlp"), 3));
        for i in 0..3 {
            // depth 4 (the default): the mlp's Linear, ReLU, Linear are the fourth level.
            want.push((format!("Net::{b}::{b}.mlp::{b}.mlp.{i}"), 3));
        }
    }
    want.sort();
    assert_eq!(module_regions(&out.stdout), want);
    let dir = run_dir(&out.stdout);
    assert!(dir.join("annotate/sitecustomize.py").is_file());
    // SQL on nsys's own export: 14 module calls per forward, 3 forwards, all
    // push/pop ranges (eventType 59) of the domain nsys saw created (75).
    let db = rusqlite::Connection::open(dir.join("nsys/report.sqlite")).unwrap();
    let pushes: i64 = db
        .query_row(
            "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND domainId = \
             (SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'llmperf.modules')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(pushes, 14 * 3);
}

#[test]
fn depth_and_include_bound_the_ranges() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    // Level 1 (Net) and 2 (blocks.N, head) only, and of those only paths with `head` or `mlp`.
    let out = profile(root.path(), &["--annotate", "modules", "annotate.depth=2", "annotate.include=head|mlp"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert_eq!(module_regions(&out.stdout), [("head".to_string(), 3)]);
}

#[test]
fn a_command_that_records_no_module_range_is_said_loudly() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let out = llmperf()
        .arg("profile")
        .args(NSYS_HANG)
        .args(["--no-ncu", "--annotate", "modules", "-o"])
        .arg(root.path())
        .args(["--", "sh", "-c", "true"])
        .timeout(Duration::from_secs(900))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("WARN --annotate modules: the capture holds no range of the llmperf.modules domain"),
        "{stderr}"
    );
}

#[test]
fn annotate_is_refused_for_the_built_in_workload() {
    let root = tempfile::tempdir().unwrap();
    let out = llmperf().args(["profile", "--annotate", "modules", "-o"]).arg(root.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("the libtorch built-in workloads have their own"), "{stderr}");
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0, "no run directory for a refused run");
}

/// The region path of module `path` under `phase`: the phase, the outermost
/// module by class, then every called module whose path is a prefix of it.
fn nested(phase: &str, top: &str, path: &str, called: &serde_json::Map<String, serde_json::Value>) -> Vec<String> {
    let mut chain = vec![phase.to_string(), top.to_string()];
    if path == top {
        return chain;
    }
    let parts: Vec<&str> = path.split('.').collect();
    for n in 1..parts.len() {
        let prefix = parts[..n].join(".");
        if called.contains_key(&prefix) {
            chain.push(prefix);
        }
    }
    chain.push(path.to_string());
    chain
}

#[test]
fn a_hugging_face_generate_splits_into_prefill_and_decode_steps_per_module() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let counts = root.path().join("counts.json");
    let counts_arg = counts.to_str().unwrap();
    // 5 new tokens: one prefill forward and 4 decode forwards.
    let out = profile_script(
        root.path(),
        &["--annotate", "modules"],
        "scripts/hf_module_demo.py",
        &["llama", "5", counts_arg],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let called = json(&counts);
    let called = called.as_object().unwrap();
    assert_eq!(called["LlamaForCausalLM"], 5, "the script's own count of forwards");
    let mut want: Vec<(String, u64)> = Vec::new();
    for (phase, share) in [("prefill", 1), ("decode_step", 4)] {
        want.push((phase.to_string(), share));
        for (path, calls) in called {
            let chain = nested(phase, "LlamaForCausalLM", path, called);
            // Depth 4 (the default): the outermost module is level 1.
            if chain.len() - 1 <= 4 {
                assert_eq!(calls.as_u64().unwrap(), 5, "{path}: every module runs once per forward");
                want.push((chain.join("::"), share));
            }
        }
    }
    want.sort();
    assert_eq!(module_regions(&out.stdout), want);

    // The two layers' MLPs as one group per phase, `model.layers.[0-1].mlp`:
    // its wall time is every such range's, summed by SQL on nsys's export.
    let dir = run_dir(&out.stdout);
    let regions = json(&dir.join("nsys/regions.json"));
    let groups = regions["module_groups"]["groups"].as_array().unwrap();
    let mlp = |phase: &str| {
        let path = format!("{phase}::LlamaForCausalLM::model::model.layers.[0-1]::model.layers.[0-1].mlp");
        groups.iter().find(|g| g["path"] == path.as_str()).unwrap_or_else(|| panic!("{path} in {groups:?}")).clone()
    };
    let (p, d) = (mlp("prefill"), mlp("decode_step"));
    assert_eq!((p["members"].as_u64(), p["instances"].as_u64()), (Some(2), Some(2)));
    assert_eq!((d["members"].as_u64(), d["instances"].as_u64()), (Some(2), Some(8)));
    let db = rusqlite::Connection::open(dir.join("nsys/report.sqlite")).unwrap();
    // ASCII-message ranges: the name is in `text` (no StringIds row).
    let sql_ns: i64 = db
        .query_row(
            "SELECT sum(end - start) FROM NVTX_EVENTS WHERE eventType = 59 AND text GLOB 'model.layers.[0-9]*.mlp'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    let ns = |g: &serde_json::Value| g["inclusive_ns"].as_i64().unwrap();
    assert_eq!(ns(&p) + ns(&d), sql_ns);
    // No kernel on this host: coverage is there, with nothing to cover.
    assert_eq!(regions["module_groups"]["coverage"]["total_gpu_time_ns"], 0);
    // regions.md and report.html show the groups.
    // Past 60 characters a path is cut in the middle (whole in regions.json and the page's tooltip).
    let group = "`decode_step::…::model.layers.[0-1].mlp` | ";
    let md = std::fs::read_to_string(dir.join("regions.md")).unwrap();
    assert!(md.contains("## Repeated modules") && md.contains(group), "{md}");
    let html = std::fs::read_to_string(dir.join("report.html")).unwrap();
    assert!(html.contains("<h2>Repeated modules</h2>"), "report.html has no group table");
    assert!(html.contains("The capture has no kernel: the module ranges' share of GPU time cannot be told."));
    assert!(html.contains(
        "<code title=\"prefill::LlamaForCausalLM::model::model.layers.[0-1]::model.layers.[0-1].mlp\">prefill::…::model.layers.[0-1].mlp</code>"
    ));
    // operators.json: the same call paths joined, 2 layers × 4 decode steps.
    let ops = json(&dir.join("operators.json"));
    let rows = ops["by_module_group"].as_array().unwrap();
    let row = rows
        .iter()
        .find(|r| r["name"] == "decode_step::LlamaForCausalLM::model::model.layers.[0-1]::model.layers.[0-1].mlp")
        .unwrap_or_else(|| panic!("{rows:?}"));
    assert_eq!(row["calls"], 8);
    assert_eq!((row["total_ms"].as_f64().unwrap() * 1e6).round() as i64, ns(&d));
}

#[test]
fn with_ops_the_operators_nest_under_their_modules() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let extra = ["--annotate", "ops", "annotate.depth=2"];
    let out = profile_script(root.path(), &extra, "scripts/hf_module_demo.py", &["llama", "3"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let got = regions_of(&out.stdout, "");
    let find = |path: &str| got.iter().find(|(p, _)| p == path).map(|(_, n)| *n);
    // The LM head is one Linear: one aten::linear per forward, inside it.
    assert_eq!(find("prefill::LlamaForCausalLM::lm_head"), Some(1));
    assert_eq!(find("prefill::LlamaForCausalLM::lm_head::aten::linear"), Some(1));
    assert_eq!(find("decode_step::LlamaForCausalLM::lm_head::aten::linear"), Some(2));
    // ...because with `ops` the module ranges are in the default domain, beside the operators.
    assert_eq!(module_regions(&out.stdout), Vec::<(String, u64)>::new());
    // The operators start at the first forward: the model's initialisation (transformers draws
    // its random weights with normal_) and the prompt's randint are no regions of their own.
    let init: Vec<_> = got.iter().filter(|(p, _)| p == "aten::normal_" || p == "aten::randint").collect();
    assert!(init.is_empty(), "initialisation operators as regions: {init:?}");
}

/// A Python program that marks no NVTX range, profiled without `--annotate`,
/// is told that `--annotate modules` gives ranges without a code change (it
/// was told only to "check that nsys traces nvtx").
#[test]
fn a_python_command_without_ranges_is_told_of_annotate() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let out = llmperf()
        .arg("profile")
        .args(NSYS_HANG)
        .args(["--no-ncu", "-o"])
        .arg(root.path())
        .args(["--", "python3", "-c", "print(sum(range(1000)))"])
        .timeout(Duration::from_secs(900))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("WARN the Python program marked no NVTX range")
            && stderr.contains("`llmperf profile --annotate modules -- CMD` gives a range per nn.Module forward"),
        "{stderr}"
    );
}

/// Repeated modules are members of one class: module_demo.py's two `Block`s
/// are one group, `blocks.[0-1]`, while each block's nn.Sequential(Linear,
/// ReLU, Linear) is not (`mlp.[0-2]` was called a repeated module). The
/// classes come from the bootstrap's `annotate/classes.<pid>.json`; `llmperf
/// report` rebuilds the same groups from it.
#[test]
fn an_nn_sequential_of_different_layers_is_no_repeated_module() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let out = profile_script(root.path(), &["--annotate", "modules"], "scripts/module_demo.py", &[]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let dir = run_dir(&out.stdout);
    let classes: Vec<_> = std::fs::read_dir(dir.join("annotate"))
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("classes."))
        .map(|e| json(&e.path()))
        .collect();
    assert_eq!(classes.len(), 1, "one Python process, one classes file");
    assert_eq!(classes[0]["blocks.0.mlp.1"], serde_json::json!(["ReLU"]));
    assert_eq!(classes[0]["blocks.1"], serde_json::json!(["Block"]));
    let paths = |dir: &Path| -> Vec<String> {
        let regions = json(&dir.join("nsys/regions.json"));
        regions["module_groups"]["groups"]
            .as_array()
            .unwrap()
            .iter()
            .map(|g| g["path"].as_str().unwrap().to_string())
            .collect()
    };
    let groups = paths(&dir);
    assert!(groups.iter().any(|p| p.ends_with("::blocks.[0-1]")), "{groups:?}");
    assert!(!groups.iter().any(|p| p.contains("mlp.[")), "a Sequential of different layers grouped: {groups:?}");
    llmperf().arg("report").arg(&dir).assert().success();
    assert_eq!(paths(&dir), groups, "report rebuilds the same groups");
}
