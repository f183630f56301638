//! `--model hf`: Hugging Face architectures built by transformers from the
//! presets of conf/model/hf/, run in the project's venv. The oracles: weights
//! counted by hand per architecture, tied to the parameter count transformers
//! itself reports (so a wrong hand count or a wrong shape fails), and the
//! FLOPs recomputed here from that count; under nsys, SQL on the export.
use crate::common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn python() -> String {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    format!("model.python={}", venv.display())
}

fn workload(dir: &Path, args: &[&str]) -> PathBuf {
    let out = llmperf()
        .args(["workload", "--model", "hf", "-o"])
        .arg(dir)
        .arg(python())
        .args(args)
        .timeout(Duration::from_secs(600))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    run_dir(&out.stdout)
}

/// One small preset (2 layers, hidden 128, 4 query heads of 32, vocab 1000):
/// `flop_params` is P, the matmul weights a token meets, counted by hand;
/// `rest` what else transformers counts (embedding table, norms, biases,
/// the experts a token does not use).
struct Case {
    arch: &'static str,
    flop_params: f64,
    rest: i64,
}

const CASES: [Case; 5] = [
    // Q 128·128, K and V 128·64 each, O 128·128: 49152; SwiGLU 3·128·256 =
    // 98304; ×2 layers = 294912; LM head 128·1000: P = 422912. Rest: the
    // embedding table 128000 and 5 RMSNorms of 128 = 640.
    Case { arch: "llama", flop_params: 422_912.0, rest: 128_000 + 640 },
    Case { arch: "mistral", flop_params: 422_912.0, rest: 128_000 + 640 },
    // Qwen2 adds Q, K and V biases: (128 + 64 + 64) × 2 layers = 512.
    Case { arch: "qwen2", flop_params: 422_912.0, rest: 128_000 + 640 + 512 },
    // 4 experts, top 2: router 128·4 = 512 and 2 experts' MLPs (196608) per
    // layer: 2·(49152 + 512 + 196608) + 128000 = 620544. Rest: embedding,
    // norms and the 2 unused experts of each layer (2·2·98304 = 393216).
    Case { arch: "mixtral", flop_params: 620_544.0, rest: 128_000 + 640 + 393_216 },
    // MHA (K, V as wide as Q): 4·128·128 = 65536; MLP 2·128·512 = 131072; ×2
    // = 393216; LM head (tied to the token embedding, counted once) 128000:
    // P = 521216. Rest: positions 512·128 = 65536, 5 LayerNorms with bias
    // 5·256 = 1280, biases (384 + 128 + 512 + 128) × 2 = 2304.
    Case { arch: "gpt2", flop_params: 521_216.0, rest: 65_536 + 1280 + 2304 },
];

#[test]
fn every_preset_runs_prefill_and_decode_with_hand_counted_flops() {
    let root = tempfile::tempdir().unwrap();
    for case in CASES {
        let dir = workload(root.path(), &[&format!("model.arch={}", case.arch)]);
        let t = json(&dir.join("workload/timings.json"));
        let arch = case.arch;
        assert_eq!(t["model"]["name"], "hf", "{arch}");
        assert_eq!(
            t["model"]["parameters"].as_i64().unwrap(),
            case.flop_params as i64 + case.rest,
            "{arch}: the hand count and transformers' own parameter count disagree"
        );
        // The infer preset: 3 iterations, a 32-token prompt, 8 new tokens (7 decode steps).
        assert_eq!(t["stages"]["prefill"]["count"], 3, "{arch}");
        assert_eq!(t["stages"]["decode_all::decode_step"]["count"], 21, "{arch}");
        // FLOPs: 2·P per token + 4·L·c·H·hd, L = 2, H·hd = 128.
        let p = case.flop_params;
        let attn = |c: f64| 4.0 * 2.0 * c * 128.0;
        let prefill: f64 = (1..=32).map(|c| 2.0 * p + attn(c as f64)).sum();
        // Decode step s attends to 32 + s + 1 tokens, s = 0..6: mean context 36.
        let step = 2.0 * p + attn(36.0);
        let per_call = &t["flops"]["per_call"];
        assert_eq!(per_call["prefill"].as_f64().unwrap(), prefill, "{arch}");
        assert_eq!(per_call["decode_all::decode_step"].as_f64().unwrap(), step, "{arch}");
        assert!(t["throughput"]["decode_tokens_per_s"].as_f64().unwrap() > 0.0, "{arch}");
    }
}

#[test]
fn layers_and_config_fields_override_the_preset() {
    let root = tempfile::tempdir().unwrap();
    let dir = workload(root.path(), &["model.layers=3", "+model.config.num_key_value_heads=1", "infer.iters=1"]);
    let t = json(&dir.join("workload/timings.json"));
    assert_eq!(t["model"]["layers"], 3);
    // One KV head of 32: K and V 128·32 each; attention 2·16384 + 2·4096 =
    // 40960; with SwiGLU 98304, 139264 per layer; ×3 + LM head 128000 =
    // 545792. transformers adds the embedding (128000) and 7 RMSNorms (896).
    assert_eq!(t["model"]["parameters"], 545_792 + 128_000 + 896);
    let p = 545_792.0;
    let prefill: f64 = (1..=32).map(|c| 2.0 * p + 4.0 * 3.0 * c as f64 * 128.0).sum();
    assert_eq!(t["flops"]["per_call"]["prefill"].as_f64().unwrap(), prefill);
}

#[test]
fn an_unknown_arch_and_a_missing_interpreter_are_config_errors() {
    let root = tempfile::tempdir().unwrap();
    let out =
        llmperf().args(["workload", "--model", "hf", "model.arch=falcon", "-o"]).arg(root.path()).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("model.arch=falcon is not a preset of the hf model"), "{stderr}");
    // `profile` refuses it before any profiler starts: no run directory.
    let out = llmperf()
        .args(["profile", "--model", "hf", "model.arch=falcon", "-o"])
        .arg(root.path().join("profiled"))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(3), "{stderr}");
    assert!(!root.path().join("profiled").exists(), "no run directory for a refused run");
    assert!(stderr.contains("model.arch=falcon is not a preset of the hf model"), "{stderr}");
    assert!(stderr.contains("hint: use one of gpt2, llama, mistral, mixtral, qwen2"), "{stderr}");
    let out = llmperf()
        .args(["workload", "--model", "hf", "model.python=/nonexistent/python", "-o"])
        .arg(root.path())
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("model.python `/nonexistent/python` is not an executable"), "{stderr}");
}

#[test]
fn under_nsys_the_hf_model_has_the_decoder_stages_and_its_module_ranges() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let out = llmperf()
        .arg("profile")
        .args(NSYS_HANG)
        .args(["--model", "hf", "--no-ncu", "--annotate", "modules", "annotate.depth=3", "-o"])
        .arg(root.path())
        .arg(python())
        .timeout(Duration::from_secs(900))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let dir = run_dir(&out.stdout);
    let regions = json(&dir.join("nsys/regions.json"));
    let instances = |domain: &str, path: &str| {
        regions["regions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["domain"] == domain && r["path"] == path)
            .map(|r| r["instances"].as_u64().unwrap())
    };
    assert_eq!(instances("LLM", "prefill"), Some(3));
    assert_eq!(instances("LLM", "decode_all::decode_step"), Some(21));
    // The module ranges nest in the workload's own phases (the bootstrap adds
    // none of its own: no `decode_step::decode_step`): 3 measured
    // generations; the warm-up's one (1 prefill, 7 steps) inside `warmup`,
    // apart from the measured phases.
    assert_eq!(instances("llmperf.modules", "prefill::LlamaForCausalLM"), Some(3));
    assert_eq!(instances("llmperf.modules", "decode_all::decode_step::LlamaForCausalLM"), Some(21));
    assert_eq!(instances("LLM", "warmup"), Some(1));
    assert_eq!(instances("llmperf.modules", "warmup::LlamaForCausalLM"), Some(8));
    for r in regions["regions"].as_array().unwrap() {
        let path = r["path"].as_str().unwrap();
        assert!(!path.contains("prefill::prefill") && !path.contains("decode_step::decode_step"), "{path}");
        assert!(!(r["depth"] == 0 && r["domain"] == "llmperf.modules"), "a module range outside every phase: {path}");
    }
    // SQL on nsys's export: the LLM domain's decode_step pushes.
    let db = rusqlite::Connection::open(dir.join("nsys/report.sqlite")).unwrap();
    let steps: i64 = db
        .query_row(
            "SELECT count(*) FROM NVTX_EVENTS WHERE eventType = 59 AND text = 'decode_step' AND domainId = \
             (SELECT domainId FROM NVTX_EVENTS WHERE eventType = 75 AND text = 'LLM')",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(steps, 21);
    // The summary names, per phase, the repeated module with the most time.
    let summary = std::fs::read_to_string(dir.join("stakeholder_summary.md")).unwrap();
    for phase in ["`prefill`", "`decode_all`"] {
        assert!(
            summary.lines().any(|l| l.contains(&format!("In {phase}, the repeated module with the most"))),
            "{phase}: {summary}"
        );
    }
}

/// `--tracer torch`: the same phases and module ranges as under nsys (the
/// test above), as record_function ranges in torch.profiler's trace.
#[test]
fn under_torch_profiler_the_hf_model_has_its_phases_and_module_ranges() {
    let root = tempfile::tempdir().unwrap();
    let out = llmperf()
        .args(["profile", "--tracer", "torch", "--model", "hf", "--annotate", "modules", "annotate.depth=2", "-o"])
        .arg(root.path())
        .arg(python())
        .timeout(Duration::from_secs(600))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let regions = json(&run_dir(&out.stdout).join("torch/regions.json"));
    let instances = |path: &str| {
        regions["regions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["domain"] == "user_annotation" && r["path"] == path)
            .map(|r| r["instances"].as_u64().unwrap())
    };
    assert_eq!(instances("prefill"), Some(3));
    assert_eq!(instances("decode_all::decode_step"), Some(21));
    assert_eq!(instances("prefill::LlamaForCausalLM"), Some(3));
    assert_eq!(instances("decode_all::decode_step::LlamaForCausalLM::model"), Some(21));
    assert_eq!(instances("warmup::LlamaForCausalLM"), Some(8));
    assert!(!stderr.contains("holds no range"), "{stderr}");
}

/// `model.path`: a checkpoint saved by transformers in the test (config.json
/// and safetensors), loaded with its own config; an architecture whose
/// layers llmperf does not know is timed with no FLOPs rather than a guess.
#[test]
fn a_local_checkpoint_loads_and_an_unknown_architecture_gets_no_flops() {
    let root = tempfile::tempdir().unwrap();
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    let save = |model_type: &str, dir: &Path, fields: &str| {
        let code = format!(
            "import torch\nfrom transformers import AutoConfig, AutoModelForCausalLM\ntorch.manual_seed(0)\n\
             c = AutoConfig.for_model('{model_type}', {fields})\n\
             m = AutoModelForCausalLM.from_config(c)\nm.save_pretrained(r'{}')\n\
             print(sum(p.numel() for p in m.parameters()))",
            dir.display()
        );
        let out = std::process::Command::new(&venv).args(["-c", &code]).output().unwrap();
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout).trim().parse::<i64>().unwrap()
    };
    let shape = "num_hidden_layers=2, hidden_size=64, intermediate_size=128, num_attention_heads=4, \
                 num_key_value_heads=2, vocab_size=256, max_position_embeddings=128";
    let llama = root.path().join("llama");
    let params = save("llama", &llama, shape);
    assert!(llama.join("config.json").is_file() && llama.join("model.safetensors").is_file());
    let dir = workload(root.path(), &[&format!("model.path={}", llama.display()), "infer.iters=1"]);
    let t = json(&dir.join("workload/timings.json"));
    assert_eq!(t["model"]["parameters"], params, "the checkpoint's shape, not the preset's");
    assert_eq!(t["model"]["hidden_size"], 64);
    assert!(t["model"]["variant"].as_str().unwrap().starts_with(&llama.display().to_string()));
    // Q, O 64·64, K, V 64·32; SwiGLU 3·64·128: 36864 per layer; ×2 + 64·256.
    let p = 2.0 * 36_864.0 + 16_384.0;
    let prefill: f64 = (1..=32).map(|c| 2.0 * p + 4.0 * 2.0 * c as f64 * 64.0).sum();
    assert_eq!(t["flops"]["per_call"]["prefill"].as_f64().unwrap(), prefill);

    let gemma = root.path().join("gemma");
    save("gemma", &gemma, &format!("{shape}, head_dim=16"));
    let dir = workload(root.path(), &[&format!("model.path={}", gemma.display()), "infer.iters=1"]);
    let t = json(&dir.join("workload/timings.json"));
    assert_eq!(t["stages"]["decode_all::decode_step"]["count"], 7, "timed all the same");
    assert_eq!(t["flops"]["per_call"], serde_json::json!({}));
    assert!(t["flops"]["formula"].as_str().unwrap().contains("does not know the layers of model_type gemma"));
    assert!(t["decode_bytes"].is_null());
}
