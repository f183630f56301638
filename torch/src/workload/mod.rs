//! Built-in NVTX-instrumented workloads on libtorch:
//! `dummy_shallow_resnet`, `decoder_llm` (prefill + decode with a KV cache),
//! `torchscript` (a user's module) and `nvtx_regions` (A, A::A1, B).
//! Selected by `model.name` only; see docs/workloads.md.
mod instrument;
pub mod llm;
pub mod resnet;

use std::time::Instant;
use tch::{nn, Device, Kind, Tensor};

pub use instrument::Instrument;
use llmperf::config::schema::{
    Device as DeviceCfg, Dtype, LlmConfig, ModelConfig, RegionsConfig, ResnetConfig, TorchscriptConfig,
};
use llmperf::config::Config;
use llmperf::error::{Error, ErrorKind};
use llmperf::timings::{self, ModelMeta, RunShape, Timings};
use llmperf::{flops, regions};

#[cfg(test)]
mod tests;

/// Run the configured workload and return what it measured.
pub fn run(cfg: &Config, nvtx: bool) -> Result<Timings, Error> {
    let device = resolve_device(cfg.device)?;
    let kind = kind_of(cfg.infer.dtype);
    let mut timings = catch_libtorch(|| match &cfg.model {
        ModelConfig::DummyShallowResnet(m) => run_resnet(cfg, m, device, kind, nvtx),
        ModelConfig::DecoderLlm(m) => run_llm(cfg, m, device, kind, nvtx),
        ModelConfig::Torchscript(m) => run_torchscript(cfg, m, device, kind, nvtx),
        ModelConfig::NvtxRegions(m) => Ok(run_regions(cfg, m, device, kind, nvtx)),
        ModelConfig::Hf(_) => {
            Err(Error::new(ErrorKind::Internal, "model.name=hf runs in Python, not in the libtorch plugin".to_string()))
        }
    })?;
    if device == Device::Cpu {
        timings.calibration = Some(catch_libtorch(|| Ok(calibrate(kind)))?);
    }
    Ok(timings)
}

/// This CPU's reachable peaks, after the measured loop and outside every NVTX
/// range: the best of 5 square matmuls in the workload's dtype, and the best of
/// 3 copies of a 256 MiB tensor (read + write counted).
fn calibrate(kind: Kind) -> timings::Calibration {
    let _grad = tch::no_grad_guard();
    let n = 1024;
    let a = Tensor::randn([n, n], (kind, Device::Cpu));
    let b = Tensor::randn([n, n], (kind, Device::Cpu));
    let best = |runs: usize, f: &dyn Fn()| {
        (0..runs)
            .map(|_| {
                let t = Instant::now();
                f();
                t.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    };
    let matmul_s = best(5, &|| {
        let _ = a.matmul(&b);
    });
    let elems = 64 << 20;
    let src = Tensor::ones([elems], (Kind::Float, Device::Cpu));
    let dst = Tensor::zeros([elems], (Kind::Float, Device::Cpu));
    let copy_s = best(3, &|| {
        dst.shallow_clone().copy_(&src);
    });
    timings::Calibration {
        method: format!("best of 5 {n}x{n} {} matmuls and of 3 copies of 256 MiB, in libtorch", dtype_name(kind)),
        matmul_flops_per_s: 2.0 * (n * n * n) as f64 / matmul_s,
        copy_bytes_per_s: 2.0 * (elems * 4) as f64 / copy_s,
    }
}

pub fn resolve_device(d: DeviceCfg) -> Result<Device, Error> {
    match d {
        DeviceCfg::Cpu => Ok(Device::Cpu),
        DeviceCfg::Auto => Ok(if tch::Cuda::is_available() { Device::Cuda(0) } else { Device::Cpu }),
        DeviceCfg::Cuda(n) => {
            let count = tch::Cuda::device_count();
            if i64::from(n) < count {
                Ok(Device::Cuda(n as usize))
            } else {
                Err(Error::config(format!("device cuda:{n} requested but libtorch sees {count} CUDA device(s)"))
                    .with_hint("use device=cpu or device=auto, and see `llmperf doctor` for why CUDA is unavailable"))
            }
        }
    }
}

fn kind_of(d: Dtype) -> Kind {
    match d {
        Dtype::F32 => Kind::Float,
        Dtype::F16 => Kind::Half,
        Dtype::Bf16 => Kind::BFloat16,
    }
}

fn dtype_name(k: Kind) -> &'static str {
    match k {
        Kind::Half => "f16",
        Kind::BFloat16 => "bf16",
        _ => "f32",
    }
}

fn device_name(d: Device) -> String {
    match d {
        Device::Cuda(i) => format!("cuda:{i}"),
        _ => "cpu".into(),
    }
}

/// tch reports libtorch errors by panicking; turn them into an error that says
/// which dtype/device combination libtorch refused.
fn catch_libtorch<T>(f: impl FnOnce() -> Result<T, Error>) -> Result<T, Error> {
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    std::panic::set_hook(hook);
    out.unwrap_or_else(|payload| {
        let msg = payload
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| payload.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown error".into());
        let first = msg.lines().next().unwrap_or_default().to_string();
        Err(Error::new(ErrorKind::StageFailed, format!("libtorch error in the workload: {first}"))
            .with_hint("f16 and bf16 need a device and libtorch build that support them (try infer.dtype=f32); check model.* shapes"))
    })
}

/// Set up parameters on `device` in `kind`, from the configured seed.
fn var_store(cfg: &Config, device: Device, kind: Kind) -> nn::VarStore {
    tch::manual_seed(cfg.infer.seed as i64);
    let mut vs = nn::VarStore::new(device);
    vs.set_kind(kind);
    vs
}

fn parameters(vs: &nn::VarStore) -> i64 {
    vs.trainable_variables().iter().map(|t| t.numel() as i64).sum()
}

/// Warm-up without ranges, then measured iterations with them.
fn iterate(cfg: &Config, ins: &Instrument, mut body: impl FnMut()) -> f64 {
    let _grad = tch::no_grad_guard();
    ins.set_recording(false);
    for _ in 0..cfg.infer.warmup_iters {
        body();
    }
    ins.set_recording(true);
    let start = Instant::now();
    for _ in 0..cfg.runner.run.repeat {
        ins.begin_repeat();
        for _ in 0..cfg.infer.iters {
            body();
        }
    }
    // A CUDA call outside every range: ncu's range replay ends a range at the
    // first CUDA call outside it, so without one the last range never ends.
    ins.boundary();
    start.elapsed().as_secs_f64() * 1e3
}

/// Where and how a workload ran.
#[derive(Clone, Copy)]
struct Setup<'a> {
    cfg: &'a Config,
    device: Device,
    kind: Kind,
    nvtx: bool,
}

/// What the instrument recorded over `measured_ms`.
fn measured(measured_ms: f64, ins: Instrument) -> timings::Measured {
    let (samples, per_repeat) = ins.into_samples();
    timings::Measured { measured_ms, samples, per_repeat }
}

fn run_shape(setup: Setup) -> RunShape {
    let Setup { cfg, device, kind, nvtx } = setup;
    RunShape {
        device: device_name(device),
        dtype: dtype_name(kind).into(),
        nvtx,
        batch_size: i64::from(cfg.infer.batch_size),
        warmup_iters: cfg.infer.warmup_iters,
        iters: cfg.infer.iters,
        repeat: cfg.runner.run.repeat,
    }
}

/// Split recorded regions into stages (the listed paths) and operators (the rest).
fn assemble(setup: Setup, meta: ModelMeta, m: timings::Measured, stage_paths: &[String]) -> Timings {
    timings::assemble(&run_shape(setup), meta, m, stage_paths)
}

fn run_resnet(cfg: &Config, m: &ResnetConfig, device: Device, kind: Kind, nvtx: bool) -> Result<Timings, Error> {
    let size = i64::from(cfg.infer.image_size.ok_or_else(|| missing("infer.image_size", "dummy_shallow_resnet"))?);
    let batch = i64::from(cfg.infer.batch_size);
    let vs = var_store(cfg, device, kind);
    let model = resnet::ResNet::new(&vs.root(), m);
    let shape = vec![batch, i64::from(m.in_channels), size, size];
    let input = Tensor::randn(shape.as_slice(), (kind, device));
    let ins = Instrument::new(nvtx, None, device).with_cuda_probe(cfg.infer.cuda_probe);
    let measured_ms = iterate(cfg, &ins, || {
        let _ = ins.region(regions::FORWARD, || model.forward(&input, &ins));
    });
    let meta = ModelMeta {
        name: "dummy_shallow_resnet".into(),
        variant: None,
        parameters: parameters(&vs),
        layers: Some(i64::from(m.blocks)),
        hidden_size: Some(i64::from(m.channels)),
        heads: None,
        vocab_size: None,
        dtype: dtype_name(kind).into(),
        input_shapes: vec![shape],
    };
    let mut t =
        assemble(Setup { cfg, device, kind, nvtx }, meta, measured(measured_ms, ins), &[regions::FORWARD.into()]);
    t.flops.formula =
        "2 x multiply-adds of the convolutions and the linear head; batch norm, ReLU, pooling ignored".into();
    t.flops.per_call.insert(regions::FORWARD.into(), model.flops(batch, size));
    Ok(t)
}

fn run_llm(cfg: &Config, m: &LlmConfig, device: Device, kind: Kind, nvtx: bool) -> Result<Timings, Error> {
    let prompt_len = i64::from(cfg.infer.prompt_len.ok_or_else(|| missing("infer.prompt_len", "decoder_llm"))?);
    let new_tokens = i64::from(cfg.infer.max_new_tokens.ok_or_else(|| missing("infer.max_new_tokens", "decoder_llm"))?);
    check_llm_shapes(m, prompt_len, new_tokens)?;
    let batch = i64::from(cfg.infer.batch_size);
    let vs = var_store(cfg, device, kind);
    let model = llm::Llm::new(&vs.root(), m);
    let prompt = llm::prompt(m, batch, prompt_len, device);
    let ins = Instrument::new(nvtx, Some(regions::LLM_DOMAIN), device).with_cuda_probe(cfg.infer.cuda_probe);
    let measured_ms = iterate(cfg, &ins, || {
        let _ = model.generate(&prompt, new_tokens, &ins);
    });
    let params = parameters(&vs);
    let meta = ModelMeta {
        name: "decoder_llm".into(),
        variant: Some(m.variant.clone()),
        parameters: params,
        layers: Some(m.n_layers),
        hidden_size: Some(m.d_model),
        heads: Some(m.n_heads),
        vocab_size: Some(m.vocab_size),
        dtype: dtype_name(kind).into(),
        input_shapes: vec![vec![batch, prompt_len]],
    };
    let step = regions::join([regions::DECODE_ALL, regions::DECODE_STEP]);
    let stage_paths = [regions::PREFILL.to_string(), regions::DECODE_ALL.to_string(), step];
    let setup = Setup { cfg, device, kind, nvtx };
    let mut t = assemble(setup, meta, measured(measured_ms, ins), &stage_paths);
    let elem = kind.elt_size_in_bytes() as i64;
    let work = timings::LlmWork {
        formula: "FLOPs per token at context c = 2*N + 4*L*c*d (N = parameters, L = layers, d = hidden size); prefill sums over prompt positions; decode_step is the mean over the steps".into(),
        bytes_formula: "per decode step: every weight once (N x element size) + K and V of all past tokens (2*L*batch*past*d x element size)".into(),
        flop_params: params,
        weight_bytes: (params * elem) as f64,
        layers: m.n_layers,
        attn_dim: m.d_model,
        kv_dim: m.d_model,
        elem_bytes: elem,
        prompt_len,
        new_tokens,
    };
    timings::add_llm_work(&mut t, &run_shape(setup), &work);
    Ok(t)
}

fn check_llm_shapes(m: &LlmConfig, prompt_len: i64, new_tokens: i64) -> Result<(), Error> {
    if m.d_model % m.n_heads != 0 {
        return Err(Error::config(format!(
            "model.d_model {} is not a multiple of model.n_heads {}",
            m.d_model, m.n_heads
        ))
        .with_hint("pick n_heads that divides d_model"));
    }
    if prompt_len < 1 || new_tokens < 1 || prompt_len + new_tokens > m.max_seq_len {
        return Err(Error::config(format!(
            "infer.prompt_len {prompt_len} + infer.max_new_tokens {new_tokens} must be between 2 and model.max_seq_len {}",
            m.max_seq_len
        ))
        .with_hint("shorten the prompt or the generation"));
    }
    Ok(())
}

fn run_torchscript(
    cfg: &Config,
    m: &TorchscriptConfig,
    device: Device,
    kind: Kind,
    nvtx: bool,
) -> Result<Timings, Error> {
    let path = m.path.as_ref().ok_or_else(|| {
        Error::config("model.path is not set for the torchscript model")
            .with_hint("export with torch.jit.trace(model, example).save('model.pt'), then pass model.path=model.pt")
    })?;
    let module = tch::CModule::load_on_device(path, device).map_err(|e| {
        Error::new(ErrorKind::StageFailed, format!("cannot load TorchScript module {}: {e}", path.display()))
            .with_hint("the file must come from torch.jit.save (torch.jit.trace or torch.jit.script), saved by a PyTorch compatible with libtorch 2.13")
    })?;
    let inputs: Vec<Tensor> = m.input_shapes.iter().map(|s| Tensor::randn(s.as_slice(), (kind, device))).collect();
    let ins = Instrument::new(nvtx, None, device).with_cuda_probe(cfg.infer.cuda_probe);
    let mut failure = None;
    let measured_ms = iterate(cfg, &ins, || {
        if failure.is_none() {
            if let Err(e) = ins.region(regions::FORWARD, || module.forward_ts(&inputs)) {
                failure = Some(e);
            }
        }
    });
    if let Some(e) = failure {
        return Err(Error::new(ErrorKind::StageFailed, format!("TorchScript forward failed: {e}"))
            .with_hint("check model.input_shapes against what the module expects"));
    }
    let meta = ModelMeta {
        name: "torchscript".into(),
        variant: Some(path.display().to_string()),
        parameters: module.named_parameters().map(|p| p.iter().map(|(_, t)| t.numel() as i64).sum()).unwrap_or(0),
        layers: None,
        hidden_size: None,
        heads: None,
        vocab_size: None,
        dtype: dtype_name(kind).into(),
        input_shapes: m.input_shapes.clone(),
    };
    let mut t =
        assemble(Setup { cfg, device, kind, nvtx }, meta, measured(measured_ms, ins), &[regions::FORWARD.into()]);
    t.flops.formula = "no analytic model for a TorchScript module".into();
    Ok(t)
}

fn run_regions(cfg: &Config, m: &RegionsConfig, device: Device, kind: Kind, nvtx: bool) -> Timings {
    tch::manual_seed(cfg.infer.seed as i64);
    let mat = |n: i64| Tensor::randn([n, n], (kind, device));
    let (a, a1, b) = (mat(m.size_a), mat(m.size_a1), mat(m.size_b));
    let ins = Instrument::new(nvtx, None, device).with_cuda_probe(cfg.infer.cuda_probe);
    let measured_ms = iterate(cfg, &ins, || {
        let _ = ins.region(regions::DEMO_A, || {
            let _ = a.matmul(&a);
            ins.region(regions::DEMO_A1, || a1.matmul(&a1))
        });
        let _ = ins.region(regions::DEMO_B, || {
            for _ in 0..m.extra_b_matmuls {
                let _ = b.matmul(&b);
            }
            b.matmul(&b)
        });
    });
    let a1_path = regions::join([regions::DEMO_A, regions::DEMO_A1]);
    let stage_paths = [regions::DEMO_A.to_string(), a1_path.clone(), regions::DEMO_B.to_string()];
    let meta = ModelMeta {
        name: "nvtx_regions".into(),
        variant: None,
        parameters: 0,
        layers: None,
        hidden_size: None,
        heads: None,
        vocab_size: None,
        dtype: dtype_name(kind).into(),
        input_shapes: vec![vec![m.size_a, m.size_a], vec![m.size_a1, m.size_a1], vec![m.size_b, m.size_b]],
    };
    let mut t = assemble(Setup { cfg, device, kind, nvtx }, meta, measured(measured_ms, ins), &stage_paths);
    t.flops.formula = "2*n^3 per n x n matmul; A includes A1; B does 1 + model.extra_b_matmuls".into();
    let (fa, fa1, fb) =
        (flops::square_matmul(m.size_a), flops::square_matmul(m.size_a1), flops::square_matmul(m.size_b));
    t.flops.per_call.insert(regions::DEMO_A.into(), fa + fa1);
    t.flops.per_call.insert(a1_path, fa1);
    t.flops.per_call.insert(regions::DEMO_B.into(), fb * f64::from(1 + m.extra_b_matmuls));
    t
}

fn missing(key: &str, model: &str) -> Error {
    Error::config(format!("{key} is required by the {model} model"))
        .with_hint(format!("add it to the infer preset or pass +{key}=VALUE"))
}
