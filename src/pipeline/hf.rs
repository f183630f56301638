//! pipeline: `--model hf`, a Hugging Face causal LM that `transformers` builds
//! from a preset's config (conf/model/hf/) and runs in Python: the script next
//! to this file measures prefill and decode steps in the regions the built-in
//! decoder has; this file sends it the request and says what the measurement
//! means, with FLOPs and bytes from the shape the model really has
//! ([`crate::flops::Decoder`]).
use std::collections::BTreeMap;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::schema::{Dtype, HfConfig, HfSize};
use crate::config::Config;
use crate::error::{Error, ErrorKind};
use crate::flops::{Decoder, Mlp};
use crate::process::{self, Exit, Sink, Spawn};
use crate::regions;
use crate::run_dir::{self, RunDir};
use crate::timings::{self, Calibration, LlmWork, ModelMeta, RunShape, Timings};

/// The workload script, written into the run directory (workload/hf_workload.py).
const SCRIPT: &str = include_str!("hf_workload.py");

/// What the script is asked to run.
#[derive(Debug, Serialize)]
struct Request {
    model_type: String,
    config: BTreeMap<String, serde_json::Value>,
    path: Option<String>,
    device: String,
    dtype: &'static str,
    batch_size: u32,
    prompt_len: u32,
    max_new_tokens: u32,
    warmup_iters: u32,
    iters: u32,
    repeat: u32,
    seed: u64,
    nvtx: bool,
    domain: &'static str,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum Reply {
    Failed { error: String, hint: String },
    Measured(Box<Measured>),
}

#[derive(Debug, Deserialize)]
struct Measured {
    parameters: i64,
    model_class: String,
    model_type: String,
    shape: Shape,
    device: String,
    measured_ms: f64,
    samples: BTreeMap<String, Vec<f64>>,
    per_repeat: BTreeMap<String, Vec<Vec<f64>>>,
    calibration: Option<Calibration>,
    versions: BTreeMap<String, String>,
}

/// The model's shape as transformers built it, in one naming for every architecture.
#[derive(Debug, Clone, Deserialize)]
struct Shape {
    layers: i64,
    hidden_size: i64,
    intermediate_size: i64,
    heads: i64,
    kv_heads: i64,
    head_dim: i64,
    vocab_size: i64,
    experts: i64,
    experts_per_token: i64,
}

/// The MLP of a `model_type` whose layers llmperf knows; None for the rest,
/// whose FLOPs are then left out rather than guessed.
fn mlp_of(model_type: &str) -> Option<Mlp> {
    match model_type {
        "llama" | "mistral" | "qwen2" | "qwen3" | "mixtral" => Some(Mlp::Gated),
        "gpt2" => Some(Mlp::Plain),
        _ => None,
    }
}

fn decoder(model_type: &str, s: &Shape) -> Option<Decoder> {
    Some(Decoder {
        layers: s.layers,
        hidden: s.hidden_size,
        ffn: s.intermediate_size,
        heads: s.heads,
        kv_heads: s.kv_heads,
        head_dim: s.head_dim,
        vocab: s.vocab_size,
        experts: s.experts,
        top_k: s.experts_per_token,
        mlp: mlp_of(model_type)?,
    })
}

/// The request of `model`: the preset's fields for the size (none with
/// `model.path`), then `model.layers`, then `model.config`.
fn request(cfg: &Config, m: &HfConfig, nvtx: bool) -> Result<Request, Error> {
    let preset = m.preset()?;
    // A checkpoint brings its own config: only what the user overrides changes it.
    let mut config = match (&m.path, m.size) {
        (Some(_), _) => BTreeMap::new(),
        (None, HfSize::Small) => preset.small.clone(),
        (None, HfSize::Real) => preset.real.clone(),
    };
    if let Some(layers) = m.layers {
        config.insert("num_hidden_layers".into(), layers.into());
    }
    config.extend(m.config.clone());
    let need = |v: Option<u32>, key: &str| {
        v.ok_or_else(|| {
            Error::config(format!("{key} is required by the hf model"))
                .with_hint(format!("add it to the infer preset or pass +{key}=VALUE"))
        })
    };
    let (prompt_len, max_new_tokens) =
        (need(cfg.infer.prompt_len, "infer.prompt_len")?, need(cfg.infer.max_new_tokens, "infer.max_new_tokens")?);
    if prompt_len < 1 || max_new_tokens < 1 {
        return Err(Error::config("infer.prompt_len and infer.max_new_tokens must be at least 1")
            .with_hint("a generation needs a prompt token and a new one"));
    }
    Ok(Request {
        model_type: preset.model_type.clone(),
        config,
        path: m.path.as_ref().map(|p| run_dir::absolute(p).display().to_string()),
        device: cfg.device.to_string(),
        dtype: match cfg.infer.dtype {
            Dtype::F32 => "f32",
            Dtype::F16 => "f16",
            Dtype::Bf16 => "bf16",
        },
        batch_size: cfg.infer.batch_size,
        prompt_len,
        max_new_tokens,
        warmup_iters: cfg.infer.warmup_iters,
        iters: cfg.infer.iters,
        repeat: cfg.runner.run.repeat,
        seed: cfg.infer.seed,
        nvtx,
        domain: regions::LLM_DOMAIN,
    })
}

/// The interpreter `model.python` names: `auto` is the project's own venv
/// beside this binary (`make` builds into `target/release/` of the checkout
/// whose `.venv` has torch and transformers), so the README's examples work
/// from a shell whose PATH lacks the venv; else `python3` on PATH. Any other
/// value is a path or a name on PATH.
pub(crate) fn interpreter(setting: &str) -> Result<std::path::PathBuf, Error> {
    if setting == "auto" {
        if let Some(venv) = project_venv_python() {
            return Ok(venv);
        }
    }
    let (name, missing) = match setting {
        "auto" => ("python3", "model.python `auto`: no .venv beside this llmperf and no python3 on PATH".to_string()),
        named => (named, format!("model.python `{named}` is not an executable on PATH")),
    };
    process::find_executable(name).ok_or_else(|| {
        Error::new(ErrorKind::ProfilerUnavailable, missing)
            .with_hint("point model.python at the interpreter that has torch and transformers (make setup installs them into .venv)")
    })
}

/// `.venv/bin/python3` of the checkout this binary was built in (up to three
/// directories above it: `target/release/llmperf`), if there is one.
pub(crate) fn project_venv_python() -> Option<std::path::PathBuf> {
    let exe = std::env::current_exe().ok()?;
    exe.ancestors().skip(1).take(3).map(|dir| dir.join(".venv/bin/python3")).find(|p| p.is_file())
}

/// Run the model in `model.python` and return what it measured.
pub(crate) fn run(cfg: &Config, m: &HfConfig, run: &RunDir, nvtx: bool) -> Result<Timings, Error> {
    let req = request(cfg, m, nvtx)?;
    run.write(run_dir::HF_SCRIPT, SCRIPT.as_bytes())?;
    run.write(run_dir::HF_NVTX, crate::plan::annotate::NVTX.as_bytes())?;
    run.write_json(run_dir::HF_REQUEST, &req)?;
    let reply_path = run.join(&rank_reply());
    let _ = std::fs::remove_file(&reply_path);
    let python = interpreter(&m.python)?;
    let spec = Spawn::new([
        python.into_os_string(),
        run.join(run_dir::HF_SCRIPT).into_os_string(),
        run.join(run_dir::HF_REQUEST).into_os_string(),
        reply_path.clone().into_os_string(),
    ])
    .stdout(Sink::Inherit)
    .stderr(Sink::Inherit)
    .timeout(None::<Duration>);
    let done = process::run(&spec)?;
    let reply: Option<Reply> = std::fs::read(&reply_path).ok().and_then(|b| serde_json::from_slice(&b).ok());
    let measured = match (reply, done.exit) {
        (Some(Reply::Measured(m)), Exit::Code(0)) => m,
        (Some(Reply::Failed { error, hint }), _) => {
            return Err(Error::new(ErrorKind::StageFailed, format!("the hf workload: {error}")).with_hint(hint))
        }
        (_, Exit::Interrupted) => return Err(crate::signals::interrupted()),
        _ => {
            return Err(Error::new(
                ErrorKind::StageFailed,
                format!("the hf workload ({}) {} without a readable reply", spec.display(), done.describe()),
            )
            .with_hint("its Python traceback is above; run the same command to reproduce it"))
        }
    };
    Ok(timings_of(cfg, m, &req, *measured))
}

/// `workload/hf_reply.json`, or `hf_reply.rankN.json` for rank N of a launcher.
fn rank_reply() -> String {
    match std::env::var(super::launcher::RANK_ENV).ok().and_then(|r| r.parse::<u32>().ok()).filter(|&r| r > 0) {
        Some(r) => format!("workload/hf_reply.rank{r}.json"),
        None => "workload/hf_reply.json".into(),
    }
}

fn timings_of(cfg: &Config, m: &HfConfig, req: &Request, got: Measured) -> Timings {
    let shape = RunShape {
        device: got.device.clone(),
        dtype: req.dtype.into(),
        nvtx: req.nvtx,
        batch_size: i64::from(req.batch_size),
        warmup_iters: req.warmup_iters,
        iters: req.iters,
        repeat: req.repeat,
    };
    let size = match m.size {
        HfSize::Small => "small",
        HfSize::Real => "real",
    };
    let origin = match &m.path {
        Some(p) => format!("{}", p.display()),
        None => format!("{} {size}", m.arch),
    };
    let versions: Vec<String> = got.versions.iter().map(|(k, v)| format!("{k} {v}")).collect();
    let meta = ModelMeta {
        name: "hf".into(),
        variant: Some(format!("{origin}: {}, {}", got.model_class, versions.join(", "))),
        parameters: got.parameters,
        layers: Some(got.shape.layers),
        hidden_size: Some(got.shape.hidden_size),
        heads: Some(got.shape.heads),
        vocab_size: Some(got.shape.vocab_size),
        dtype: req.dtype.into(),
        input_shapes: vec![vec![i64::from(req.batch_size), i64::from(req.prompt_len)]],
    };
    let step = regions::join([regions::DECODE_ALL, regions::DECODE_STEP]);
    let stages = [regions::PREFILL.to_string(), regions::DECODE_ALL.to_string(), step];
    let measured = timings::Measured { measured_ms: got.measured_ms, samples: got.samples, per_repeat: got.per_repeat };
    let mut t = timings::assemble(&shape, meta, measured, &stages);
    t.calibration = got.calibration;
    let elem = match cfg.infer.dtype {
        Dtype::F32 => 4,
        Dtype::F16 | Dtype::Bf16 => 2,
    };
    match decoder(&got.model_type, &got.shape) {
        Some(d) => {
            let work = LlmWork {
                formula: format!("{} (model_type {})", crate::flops::DECODER_FORMULA, got.model_type),
                bytes_formula: crate::flops::DECODER_BYTES_FORMULA.into(),
                flop_params: d.flop_params(),
                weight_bytes: (d.step_weight_params(shape.batch_size) * elem) as f64,
                layers: d.layers,
                attn_dim: d.attn_dim(),
                kv_dim: d.kv_dim(),
                elem_bytes: elem,
                prompt_len: i64::from(req.prompt_len),
                new_tokens: i64::from(req.max_new_tokens),
            };
            timings::add_llm_work(&mut t, &shape, &work);
        }
        None => {
            t.flops.formula = format!(
                "none: llmperf does not know the layers of model_type {} (known: llama, mistral, qwen2, qwen3, mixtral, gpt2), so it gives no FLOPs rather than a guess",
                got.model_type
            );
            timings::add_llm_throughput(&mut t, &shape, i64::from(req.prompt_len), i64::from(req.max_new_tokens));
        }
    }
    t
}
