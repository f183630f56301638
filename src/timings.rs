//! `workload/timings.json`: what a built-in workload measured about itself,
//! and the analytic work it did (FLOPs, bytes) for MFU/MBU. Schema:
//! specs/timings.schema.json (generated from these types).
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::stats::Stats;

pub(crate) const SCHEMA: &str = "llmperf.timings/v1";

/// The most samples kept per region (in timings.json and nsys/samples.json).
pub(crate) const MAX_SAMPLES: usize = 10_000;

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Timings {
    pub schema: String,
    pub model: ModelMeta,
    pub device: String,
    pub dtype: String,
    /// Whether NVTX ranges were emitted (false with --no-nvtx).
    pub nvtx: bool,
    pub batch_size: i64,
    pub warmup_iters: u32,
    /// Measured iterations of one repeat of the loop.
    pub iters: u32,
    /// How many times the measured loop ran (`runner.run.repeat`); samples
    /// hold `repeat × iters` iterations.
    #[serde(default = "one")]
    pub repeat: u32,
    /// Wall time of every measured loop (warm-up excluded).
    pub measured_ms: f64,
    /// Per NVTX region (stage), over measured iterations: `prefill`, `decode`,
    /// `decode_step`, `forward`, `A`, `A::A1`, ...
    pub stages: BTreeMap<String, Stats>,
    /// Per operator region (`layer_3::attn`, `block_1`, ...), summed per stage call.
    pub operators: BTreeMap<String, Stats>,
    /// Every region's per-call durations (ms), stages and operators, in the
    /// order they were measured; a region with more than [`MAX_SAMPLES`]
    /// keeps that many, evenly spaced in sorted order. `llmperf diff` and
    /// `llmperf check` compare runs with them.
    #[serde(default)]
    pub samples_ms: BTreeMap<String, Vec<f64>>,
    /// With `repeat` > 1: per region, the median of each repeat, in order.
    /// Their spread is the between-repeat noise that `check` allows for.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub repeat_medians_ms: BTreeMap<String, Vec<f64>>,
    pub throughput: Throughput,
    pub flops: Flops,
    /// Bytes moved by one decode step (LLM only), for memory-bandwidth utilization.
    pub decode_bytes: Option<DecodeBytes>,
    /// On CPU: what this machine reached in a matmul and a copy, the peaks
    /// for MFU/MBU (there is no datasheet table for CPUs).
    pub calibration: Option<Calibration>,
}

/// Peaks measured by the workload itself, outside every NVTX range.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Calibration {
    pub method: String,
    pub matmul_flops_per_s: f64,
    pub copy_bytes_per_s: f64,
}

/// Model metadata, also recorded in the run's provenance.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ModelMeta {
    pub name: String,
    pub variant: Option<String>,
    /// Trainable parameters as libtorch counts them (tied weights once).
    pub parameters: i64,
    pub layers: Option<i64>,
    pub hidden_size: Option<i64>,
    pub heads: Option<i64>,
    pub vocab_size: Option<i64>,
    pub dtype: String,
    pub input_shapes: Vec<Vec<i64>>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Throughput {
    /// Generated tokens per second over the decode stage (batch included).
    pub decode_tokens_per_s: Option<f64>,
    /// Prompt tokens per second over the prefill stage (batch included).
    pub prefill_tokens_per_s: Option<f64>,
    /// Samples (batch elements) per second over whole iterations.
    pub samples_per_s: Option<f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Flops {
    /// How the numbers were computed (documented in docs/workloads.md).
    pub formula: String,
    /// Analytic FLOPs of one call of each stage (one iteration's prefill, one
    /// decode step on average, ...). Absent stages have no analytic model.
    pub per_call: BTreeMap<String, f64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DecodeBytes {
    pub formula: String,
    pub weight_bytes: f64,
    /// K and V read per step, averaged over the steps of one iteration.
    pub kv_cache_bytes_mean: f64,
    pub total_bytes_mean: f64,
}

/// What a workload measured, before it is summarized.
pub struct Measured {
    /// Wall time of every measured loop (warm-up excluded).
    pub measured_ms: f64,
    /// Per region path, every measured duration (ms) in order.
    pub samples: BTreeMap<String, Vec<f64>>,
    /// Per region path, its durations split by repeat of the measured loop.
    pub per_repeat: BTreeMap<String, Vec<Vec<f64>>>,
}

/// How a workload ran: device, dtype, loop sizes.
pub struct RunShape {
    pub device: String,
    pub dtype: String,
    pub nvtx: bool,
    pub batch_size: i64,
    pub warmup_iters: u32,
    pub iters: u32,
    pub repeat: u32,
}

impl RunShape {
    /// Iterations measured in all: `iters` per repeat.
    pub(crate) fn measured_iters(&self) -> i64 {
        i64::from(self.iters) * i64::from(self.repeat)
    }
}

/// Timings from samples: the listed region paths are stages, the rest operators.
pub fn assemble(run: &RunShape, model: ModelMeta, m: Measured, stage_paths: &[String]) -> Timings {
    let (stages, operators): (BTreeMap<_, _>, BTreeMap<_, _>) = m
        .samples
        .iter()
        .filter_map(|(k, v)| Some((k.clone(), Stats::of(v)?)))
        .partition(|(k, _)| stage_paths.contains(k));
    let samples_per_s =
        (m.measured_ms > 0.0).then(|| (run.batch_size * run.measured_iters()) as f64 / (m.measured_ms / 1e3));
    let repeat_medians_ms = m
        .per_repeat
        .iter()
        .map(|(k, parts)| (k.clone(), parts.iter().filter_map(|p| Some(Stats::of(p)?.median_ms)).collect()))
        .collect();
    let samples_ms = m.samples.iter().map(|(k, v)| (k.clone(), crate::stats::bounded(v, MAX_SAMPLES))).collect();
    Timings {
        schema: SCHEMA.into(),
        model,
        device: run.device.clone(),
        dtype: run.dtype.clone(),
        nvtx: run.nvtx,
        batch_size: run.batch_size,
        warmup_iters: run.warmup_iters,
        iters: run.iters,
        repeat: run.repeat,
        measured_ms: m.measured_ms,
        stages,
        operators,
        samples_ms,
        repeat_medians_ms,
        throughput: Throughput { samples_per_s, ..Default::default() },
        flops: Flops { formula: String::new(), per_call: BTreeMap::new() },
        decode_bytes: None,
        calibration: None,
    }
}

/// The analytic work of a decoder LLM's generation, per token at context c:
/// FLOPs(c) = 2·P + 4·L·c·`attn_dim` (crate::flops), and per decode step
/// `weight_bytes` plus K and V of `kv_dim` per past token and layer.
pub struct LlmWork {
    /// What the FLOPs count, for timings.json.
    pub formula: String,
    pub bytes_formula: String,
    /// Weights a token is multiplied by (P).
    pub flop_params: i64,
    /// Bytes of weights one decode step reads.
    pub weight_bytes: f64,
    pub layers: i64,
    /// Query heads × head size: the width of Q·Kᵀ and P·V.
    pub attn_dim: i64,
    /// Key/value heads × head size: one token's K (or V) in one layer.
    pub kv_dim: i64,
    pub elem_bytes: i64,
    pub prompt_len: i64,
    pub new_tokens: i64,
}

/// FLOPs per stage call, decode bytes and tokens/s of a prefill + decode
/// workload whose stages are `prefill`, `decode_all` and `decode_all::decode_step`.
pub fn add_llm_work(t: &mut Timings, run: &RunShape, w: &LlmWork) {
    use crate::{flops, regions};
    let batch = run.batch_size;
    let step = regions::join([regions::DECODE_ALL, regions::DECODE_STEP]);
    let steps = w.new_tokens - 1;
    // Decode step s (0-based) attends to the prompt, the prefill's token and s earlier steps' tokens.
    let step_flops: Vec<f64> = (0..steps)
        .map(|s| flops::llm_decode_step(w.flop_params, w.layers, w.attn_dim, batch, w.prompt_len + s + 1))
        .collect();
    t.flops.formula = w.formula.clone();
    t.flops
        .per_call
        .insert(regions::PREFILL.into(), flops::llm_prefill(w.flop_params, w.layers, w.attn_dim, batch, w.prompt_len));
    t.flops.per_call.insert(regions::DECODE_ALL.into(), step_flops.iter().sum());
    if steps > 0 {
        t.flops.per_call.insert(step, step_flops.iter().sum::<f64>() / steps as f64);
        let kv: Vec<f64> = (0..steps)
            .map(|s| flops::llm_decode_step_bytes(0, w.layers, w.kv_dim, batch, w.prompt_len + s, w.elem_bytes).1)
            .collect();
        let kv_mean = kv.iter().sum::<f64>() / steps as f64;
        t.decode_bytes = Some(DecodeBytes {
            formula: w.bytes_formula.clone(),
            weight_bytes: w.weight_bytes,
            kv_cache_bytes_mean: kv_mean,
            total_bytes_mean: w.weight_bytes + kv_mean,
        });
    }
    add_llm_throughput(t, run, w.prompt_len, w.new_tokens);
}

/// Prompt and generated tokens per second of the `prefill` and `decode_all` stages.
pub(crate) fn add_llm_throughput(t: &mut Timings, run: &RunShape, prompt_len: i64, new_tokens: i64) {
    use crate::regions;
    let (batch, iters) = (run.batch_size, run.measured_iters());
    let secs = |k: &str| t.stages.get(k).map(|s| s.total_ms / 1e3);
    t.throughput.prefill_tokens_per_s = secs(regions::PREFILL).map(|s| (batch * prompt_len * iters) as f64 / s);
    t.throughput.decode_tokens_per_s = secs(regions::DECODE_ALL).map(|s| (batch * (new_tokens - 1) * iters) as f64 / s);
}
