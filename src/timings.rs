//! `workload/timings.json`: what a built-in workload measured about itself,
//! and the analytic work it did (FLOPs, bytes) for MFU/MBU. Schema:
//! specs/timings.schema.json (generated from these types).
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use crate::stats::Stats;

pub const SCHEMA: &str = "llmperf.timings/v1";

/// The most samples kept per region (in timings.json and nsys/samples.json).
pub const MAX_SAMPLES: usize = 10_000;

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
