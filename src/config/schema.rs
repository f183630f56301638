//! config: the typed configuration. Every struct denies unknown keys so that a typo in
//! a YAML file or an environment variable is an error, not a silent no-op.
//! Defaults live in conf/ (embedded), not here.
use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;
use std::path::PathBuf;

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub device: Device,
    pub model: ModelConfig,
    pub infer: InferConfig,
    pub pipeline: Pipeline,
    pub runner: Runner,
    pub(crate) hardware: Hardware,
    pub(crate) report: ReportConfig,
    /// What llmperf cannot know of a user's command: its work per region.
    #[serde(default)]
    pub(crate) workload: UserWorkload,
    /// NVTX ranges llmperf injects into a user's Python command.
    #[serde(default)]
    pub(crate) annotate: Annotate,
}

/// `annotate.*`: ranges around a user's PyTorch modules (`--annotate modules`),
/// with the program unchanged (plan/annotate.rs).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct Annotate {
    #[serde(default)]
    pub(crate) mode: AnnotateMode,
    /// Module nesting levels that get a range (the outermost module is level 1).
    #[serde(default = "four")]
    pub(crate) depth: u32,
    /// Only module paths this regular expression finds a match in get a range.
    #[serde(default)]
    pub(crate) include: Option<String>,
}

fn four() -> u32 {
    4
}

impl Default for Annotate {
    fn default() -> Self {
        Annotate { mode: AnnotateMode::Off, depth: four(), include: None }
    }
}

/// What `--annotate` injects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub(crate) enum AnnotateMode {
    /// Nothing: the program's own ranges only.
    #[default]
    Off,
    /// A range per `nn.Module` forward call, named by the module's path.
    Modules,
    /// `modules`, and a range per PyTorch operator (torch's emit_nvtx).
    Ops,
    /// `modules` when the command is Python (or `--model hf`), else off.
    Auto,
}

/// `workload.*`: analytic work of a user's command (`-- CMD`), per NVTX region.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct UserWorkload {
    /// FLOPs of one instance of a region, by region selector
    /// (`prefill`, `LLM@decode_all::decode_step`): MFU per region.
    #[serde(default)]
    pub(crate) flops: std::collections::BTreeMap<String, f64>,
    /// The dtype of that math: picks the peak column (f32, or f16/bf16 tensor).
    #[serde(default = "bf16")]
    pub(crate) dtype: Dtype,
}

fn bf16() -> Dtype {
    Dtype::Bf16
}

impl Default for UserWorkload {
    fn default() -> Self {
        UserWorkload { flops: Default::default(), dtype: bf16() }
    }
}

/// `auto` | `cpu` | `cuda` | `cuda:N`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub enum Device {
    Auto,
    Cpu,
    Cuda(u32),
}

impl TryFrom<String> for Device {
    type Error = String;
    fn try_from(s: String) -> Result<Self, String> {
        match s.as_str() {
            "auto" => Ok(Device::Auto),
            "cpu" => Ok(Device::Cpu),
            "cuda" => Ok(Device::Cuda(0)),
            other => other
                .strip_prefix("cuda:")
                .and_then(|n| n.parse().ok())
                .map(Device::Cuda)
                .ok_or_else(|| format!("`{other}` is not a device: use auto, cpu, cuda or cuda:N")),
        }
    }
}

impl From<Device> for String {
    fn from(d: Device) -> String {
        d.to_string()
    }
}

impl fmt::Display for Device {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Device::Auto => f.write_str("auto"),
            Device::Cpu => f.write_str("cpu"),
            Device::Cuda(n) => write!(f, "cuda:{n}"),
        }
    }
}

/// The model, selected by `name` (conf/model/<name>/arch/*.yaml).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "name", rename_all = "snake_case")]
pub enum ModelConfig {
    DummyShallowResnet(ResnetConfig),
    DecoderLlm(LlmConfig),
    Torchscript(TorchscriptConfig),
    NvtxRegions(RegionsConfig),
    Hf(HfConfig),
}

impl ModelConfig {
    #[cfg(test)]
    pub(crate) fn name(&self) -> &'static str {
        match self {
            ModelConfig::DummyShallowResnet(_) => "dummy_shallow_resnet",
            ModelConfig::DecoderLlm(_) => "decoder_llm",
            ModelConfig::Torchscript(_) => "torchscript",
            ModelConfig::NvtxRegions(_) => "nvtx_regions",
            ModelConfig::Hf(_) => "hf",
        }
    }
}

/// A decoder-only transformer (GPT-2 layout: learned positions, pre-norm
/// blocks, tied LM head), random weights from `infer.seed`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    /// Which configuration this is (e.g. `llm_tiny`, `gpt2_small`), for reports.
    pub variant: String,
    pub vocab_size: i64,
    pub d_model: i64,
    pub n_layers: i64,
    pub n_heads: i64,
    pub d_ff: i64,
    pub max_seq_len: i64,
}

/// A Hugging Face causal LM that `transformers` builds from a config (random
/// weights) or loads from a local checkpoint, run in Python (pipeline/hf.rs).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HfConfig {
    /// A key of `presets` (llama, qwen2, mistral, mixtral, gpt2, or one of your own).
    pub arch: String,
    /// Which shape of the preset: `small` (CPU, tests) or `real` (the released model's).
    pub size: HfSize,
    /// A local checkpoint folder (config.json + safetensors): its config and
    /// weights replace the preset; nothing is fetched from the Hub.
    #[serde(default)]
    pub path: Option<PathBuf>,
    /// The interpreter that has torch and transformers (the project's .venv under `make`).
    pub python: String,
    /// Shortcut for `config.num_hidden_layers`.
    #[serde(default)]
    pub layers: Option<i64>,
    /// Config fields over the preset's, in transformers' names
    /// (`+model.config.num_key_value_heads=1`).
    #[serde(default)]
    pub config: std::collections::BTreeMap<String, serde_json::Value>,
    pub presets: std::collections::BTreeMap<String, HfPreset>,
}

impl HfConfig {
    /// The preset `arch` names, or a config error that lists the known ones.
    pub fn preset(&self) -> Result<&HfPreset, crate::error::Error> {
        self.presets.get(&self.arch).ok_or_else(|| {
            let known: Vec<&str> = self.presets.keys().map(String::as_str).collect();
            crate::error::Error::config(format!("model.arch={} is not a preset of the hf model", self.arch))
                .with_hint(format!("use one of {} or add it under model.presets", known.join(", ")))
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum HfSize {
    Small,
    Real,
}

/// One architecture: transformers' `model_type` and its config fields per size.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HfPreset {
    pub model_type: String,
    /// Where the real shape comes from (a model card), for reports.
    #[serde(default)]
    pub source: Option<String>,
    pub small: std::collections::BTreeMap<String, serde_json::Value>,
    pub real: std::collections::BTreeMap<String, serde_json::Value>,
}

/// A user's exported TorchScript module.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TorchscriptConfig {
    pub path: Option<PathBuf>,
    /// One shape per positional input; the batch dimension comes first.
    pub input_shapes: Vec<Vec<i64>>,
}

/// The regions demonstration: `A` (with `A1` nested) and `B`, each around matmuls.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RegionsConfig {
    /// Square matrix sizes multiplied inside A, A1 and B.
    pub size_a: i64,
    pub size_a1: i64,
    pub size_b: i64,
    /// Matmuls added inside B (a known change: tests of comparisons find
    /// exactly B slower, by this much work, and nothing else).
    #[serde(default)]
    pub extra_b_matmuls: u32,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResnetConfig {
    pub in_channels: u32,
    pub channels: u32,
    pub blocks: u32,
    pub num_classes: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Dtype {
    F32,
    F16,
    Bf16,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InferConfig {
    pub batch_size: u32,
    pub warmup_iters: u32,
    pub iters: u32,
    pub dtype: Dtype,
    pub seed: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_size: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_len: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_new_tokens: Option<u32>,
    /// A CUDA driver call at each NVTX region boundary, so that ncu on a host
    /// without a GPU defines every matched range (tests of the selectors).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cuda_probe: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Pipeline {
    pub(crate) nsys: NsysConfig,
    pub ncu: NcuConfig,
    /// Defaulted (off) for the config.yaml of runs recorded before the key existed.
    #[serde(default)]
    pub(crate) torch: TorchConfig,
}

/// `--tracer torch`: torch.profiler (Kineto) records the timeline of a Python
/// command instead of nsys (plan/annotate.rs starts it in the bootstrap).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct TorchConfig {
    pub(crate) enable: bool,
    /// Seconds before the application is stopped (0 = no limit).
    pub(crate) timeout_s: u64,
    /// torch.profiler's `record_shapes`: input shapes in each operator's args.
    pub(crate) record_shapes: bool,
    /// torch.profiler's `with_stack`: Python stacks (large traces, slow to write).
    pub(crate) with_stack: bool,
    /// torch.profiler's schedule, counted in steps (outermost nn.Module calls):
    /// `wait` steps unrecorded, `warmup` steps recorded and dropped, then
    /// `active` steps kept. `active: 0` records the whole program.
    pub(crate) wait: u32,
    pub(crate) warmup: u32,
    pub(crate) active: u32,
}

impl Default for TorchConfig {
    fn default() -> TorchConfig {
        TorchConfig {
            enable: false,
            timeout_s: 900,
            record_shapes: false,
            with_stack: false,
            wait: 0,
            warmup: 0,
            active: 0,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NsysConfig {
    pub(crate) enable: bool,
    pub(crate) executable: String,
    pub(crate) timeout_s: u64,
    /// A stopped nsys (signal, timeout) gets this long to write its capture.
    /// Defaulted for the config.yaml of runs recorded before the key existed.
    #[serde(default = "stop_timeout_nsys")]
    pub(crate) stop_timeout_s: u64,
    /// Once the application has exited, nsys must finish converting its capture within this.
    pub(crate) postprocess_timeout_s: u64,
    /// Captures to try again when nsys hangs in that conversion, or fails on
    /// its own without writing a capture.
    pub(crate) hang_retries: u32,
    pub(crate) trace: String,
    pub(crate) sample: NsysSample,
    pub(crate) capture_range: CaptureRange,
    pub(crate) capture_range_end: Option<String>,
    pub(crate) nvtx_capture: Option<String>,
    pub(crate) cuda_graph_trace: Option<CudaGraphTrace>,
    pub(crate) force_overwrite: bool,
    #[serde(deserialize_with = "null_as_empty")]
    pub(crate) extra_args: Vec<String>,
    /// `nsys stats` reports saved as CSV beside llmperf's own reports (a
    /// cross-check; empty: `nsys stats` is not run). Defaulted for the
    /// config.yaml of runs recorded before the key existed.
    #[serde(default = "stats_nsys", deserialize_with = "null_as_empty")]
    pub(crate) stats: Vec<String>,
    /// The ranks of a job that run under nsys (`all`, or a list); the others
    /// run the application plainly, in step. Defaulted for older config.yaml.
    #[serde(default)]
    pub(crate) ranks: RankSet,
}

fn stats_nsys() -> Vec<String> {
    ["nvtx_sum", "cuda_gpu_kern_sum", "cuda_api_sum"].map(String::from).to_vec()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum NsysSample {
    None,
    ProcessTree,
    SystemWide,
    Cpu,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum CaptureRange {
    #[serde(rename = "none")]
    None,
    #[serde(rename = "nvtx")]
    Nvtx,
    #[serde(rename = "cudaProfilerApi")]
    CudaProfilerApi,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CudaGraphTrace {
    /// `node` where the installed nsys has `--cuda-graph-trace`, else not passed.
    Auto,
    Graph,
    Node,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NcuConfig {
    #[serde(default)]
    pub(crate) description: Option<String>,
    pub(crate) enable: bool,
    pub(crate) executable: String,
    pub(crate) timeout_s: u64,
    /// A stopped ncu (signal, timeout) gets this long to write its report.
    #[serde(default = "stop_timeout_ncu")]
    pub(crate) stop_timeout_s: u64,
    /// A configured region that matched nothing, or nothing profiled at all,
    /// fails the run (exit 7) instead of a warning.
    #[serde(default)]
    pub(crate) fail_on_empty: bool,
    /// The ranks of a job that run under ncu (default rank 0: ncu serializes
    /// kernel launches across processes, and NCCL collectives then deadlock).
    #[serde(default = "rank_zero")]
    pub(crate) ranks: RankSet,
    /// In a job, NCCL's kernels are profiled too in kernel and application
    /// replay (default: excluded from the kernel filter).
    #[serde(default)]
    pub(crate) comm_kernels: bool,
    pub ncu_cli: NcuCli,
}

fn rank_zero() -> RankSet {
    RankSet::Only(vec![0])
}

/// Which ranks of a job a profiler runs on: `all`, or a list (`[0]`, `[0, 8]`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(crate) enum RankSet {
    #[default]
    All,
    Only(Vec<u32>),
}

impl RankSet {
    pub(crate) fn contains(&self, rank: u32) -> bool {
        match self {
            RankSet::All => true,
            RankSet::Only(v) => v.contains(&rank),
        }
    }

    /// Every rank of a job of `world` ranks (unknown world: only `all`).
    pub(crate) fn covers(&self, world: Option<u32>) -> bool {
        match (self, world) {
            (RankSet::All, _) => true,
            (RankSet::Only(v), Some(n)) => (0..n).all(|r| v.contains(&r)),
            (RankSet::Only(_), None) => false,
        }
    }
}

impl fmt::Display for RankSet {
    fn fmt(&self, f: &mut fmt::Formatter) -> fmt::Result {
        match self {
            RankSet::All => f.write_str("all"),
            RankSet::Only(v) => {
                write!(f, "[{}]", v.iter().map(|r| r.to_string()).collect::<Vec<_>>().join(", "))
            }
        }
    }
}

impl Serialize for RankSet {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            RankSet::All => s.serialize_str("all"),
            RankSet::Only(v) => v.serialize(s),
        }
    }
}

impl<'de> Deserialize<'de> for RankSet {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<RankSet, D::Error> {
        struct V;
        impl<'de> serde::de::Visitor<'de> for V {
            type Value = RankSet;
            fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
                f.write_str("`all` or a list of ranks (numbers from 0), e.g. [0]")
            }
            fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<RankSet, E> {
                match s.trim() {
                    "all" => Ok(RankSet::All),
                    other => other.parse().map(|r| RankSet::Only(vec![r])).map_err(|_| {
                        E::custom(format!("`{other}` is not a rank set: write `all` or a list of ranks, e.g. [0, 1]"))
                    }),
                }
            }
            fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<RankSet, E> {
                u32::try_from(n)
                    .map(|r| RankSet::Only(vec![r]))
                    .map_err(|_| E::custom(format!("rank {n} is too large")))
            }
            fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<RankSet, E> {
                u32::try_from(n).map(|r| RankSet::Only(vec![r])).map_err(|_| E::custom(format!("{n} is not a rank")))
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<RankSet, A::Error> {
                let mut v = Vec::new();
                while let Some(r) = seq.next_element::<u32>()? {
                    v.push(r);
                }
                v.sort_unstable();
                v.dedup();
                Ok(RankSet::Only(v))
            }
        }
        d.deserialize_any(V)
    }
}

/// The conf/ defaults, for a run's config.yaml written before `stop_timeout_s` existed.
fn stop_timeout_nsys() -> u64 {
    120
}

fn stop_timeout_ncu() -> u64 {
    60
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NcuCli {
    pub(crate) target_processes: TargetProcesses,
    pub(crate) replay_mode: ReplayMode,
    pub(crate) app_replay_match: Option<AppReplayMatch>,
    pub(crate) nvtx: NvtxFilter,
    pub(crate) set: Option<String>,
    #[serde(deserialize_with = "null_as_empty")]
    pub(crate) sections: Vec<String>,
    #[serde(deserialize_with = "null_as_empty")]
    pub(crate) metrics: Vec<String>,
    pub(crate) kernel_name: Option<String>,
    pub(crate) kernel_name_base: KernelNameBase,
    pub(crate) kernel_id: Option<String>,
    pub(crate) launch_skip: Option<u64>,
    pub(crate) launch_count: Option<u64>,
    pub(crate) clock_control: Option<ClockControl>,
    pub(crate) cache_control: Option<CacheControl>,
    pub(crate) graph_profiling: Option<GraphProfiling>,
    pub(crate) force_overwrite: bool,
    #[serde(deserialize_with = "null_as_empty")]
    pub(crate) extra_args: Vec<String>,
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct NvtxFilter {
    #[serde(default, deserialize_with = "null_as_empty")]
    pub(crate) include: Vec<String>,
    #[serde(default, deserialize_with = "null_as_empty")]
    pub(crate) exclude: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum TargetProcesses {
    All,
    ApplicationOnly,
}

/// Also `--replay-mode` on the command line, and `replay_mode` in ncu/plan.json.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum, schemars::JsonSchema)]
#[serde(rename_all = "kebab-case")]
pub(crate) enum ReplayMode {
    Kernel,
    Application,
    Range,
    AppRange,
    /// Range replay, and for a pass ncu cannot replay as ranges (unsupported
    /// API inside, nothing profiled) app-range, then kernel replay with the
    /// same NVTX filter: the replay ladder.
    Auto,
}

impl ReplayMode {
    /// Whether ncu replays NVTX ranges (range, app-range, and `auto`, which
    /// starts as range replay): NVTX expressions then name ranges, not
    /// filter kernels.
    pub(crate) fn is_range(self) -> bool {
        matches!(self, ReplayMode::Range | ReplayMode::AppRange | ReplayMode::Auto)
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            ReplayMode::Kernel => "kernel",
            ReplayMode::Application => "application",
            ReplayMode::Range => "range",
            ReplayMode::AppRange => "app-range",
            ReplayMode::Auto => "auto",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum AppReplayMatch {
    Name,
    Grid,
    All,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum KernelNameBase {
    Function,
    Demangled,
    Mangled,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum ClockControl {
    Base,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum CacheControl {
    All,
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum GraphProfiling {
    Node,
    Graph,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Runner {
    pub run: RunSettings,
    pub(crate) artifacts: Artifacts,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunSettings {
    pub mode: RunMode,
    pub(crate) top_n_kernels: u32,
    pub(crate) baseline: bool,
    /// Run a built-in workload's measured loop this many times in one
    /// capture (at least 1), so one run carries enough samples to compare.
    #[serde(default = "one")]
    pub repeat: u32,
    /// What an ingestion may hold (MiB): past it, it stops with an error
    /// naming this key (memory.rs). Defaulted for older config.yaml files.
    #[serde(default = "memory_budget_mib")]
    pub(crate) memory_budget_mib: u64,
}

fn memory_budget_mib() -> u64 {
    crate::memory::DEFAULT_MIB as u64
}

fn one() -> u32 {
    1
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RunMode {
    Deep,
    Light,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Artifacts {
    pub(crate) root: PathBuf,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Hardware {
    pub(crate) peak_tflops: Option<f64>,
    pub(crate) peak_gbps: Option<f64>,
    /// The GPU to look up in the peak table (`H100-SXM`), over the names the
    /// run found (env.json, the capture): for exports that name none.
    #[serde(default)]
    pub(crate) gpu: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ReportConfig {
    pub(crate) aggregate: bool,
    pub(crate) kernels: KernelSelection,
    /// Per-call attributes PyTorch appends to NVTX names (`aten::mul, op_id = 317177`),
    /// stripped so that one operator is one region; empty keeps names whole.
    #[serde(default = "pytorch_nvtx_attributes", deserialize_with = "null_as_empty")]
    pub(crate) nvtx_attributes: Vec<String>,
    /// Which kernel name the tables and charts show (kernels.json keeps both).
    #[serde(default)]
    pub(crate) kernel_names: KernelNames,
    /// A user's kernel category table (conf/analysis/kernel_categories.yaml's
    /// format), tried before the shipped one.
    #[serde(default)]
    pub(crate) kernel_categories: Option<PathBuf>,
    /// The longest GPU idle gap between two operations counted as launch
    /// latency in the time breakdown (µs).
    #[serde(default = "default_launch_gap_us")]
    pub(crate) launch_gap_us: f64,
    /// Write the nsys capture as Perfetto / Kineto traces (`perfetto/`), as
    /// `llmperf export perfetto` does.
    #[serde(default)]
    pub(crate) perfetto: bool,
}

/// 50 µs: launch latency and the host's per-op overhead between two short
/// kernels stay under it; a gap past it means the host was doing something else.
pub(crate) fn default_launch_gap_us() -> f64 {
    50.0
}

/// `report.launch_gap_us` in ns, checked.
pub(crate) fn launch_gap_ns(us: f64) -> Result<i64, crate::error::Error> {
    if !(us.is_finite() && us >= 0.0) {
        return Err(crate::error::Error::config(format!("report.launch_gap_us: {us} is not a duration"))
            .with_hint("give a number of microseconds, 0 or more (50 by default)"));
    }
    Ok((us * 1e3).round() as i64)
}

/// `report.kernel_names`: the export's short name (`shortName`, where it has
/// one) or the full demangled name.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum KernelNames {
    #[default]
    Short,
    Full,
}

/// What `torch.autograd.profiler.emit_nvtx` appends: `seq`, `op_id`, `sizes`, `input_op_ids`.
pub(crate) fn pytorch_nvtx_attributes() -> Vec<String> {
    ["seq", "op_id", "sizes", "input_op_ids", "stashed seq"].map(String::from).to_vec()
}

/// Kernel names (exact, or `regex:<pattern>`) kept in the region reports.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct KernelSelection {
    #[serde(deserialize_with = "null_as_empty")]
    pub(crate) include: Vec<String>,
    #[serde(deserialize_with = "null_as_empty")]
    pub(crate) exclude: Vec<String>,
}

/// YAML `key: null` (or `key:`) for a list means the empty list.
/// A list of strings, written as a list, as one string (`include: decode*` is
/// `[decode*]`), or as null (empty).
fn null_as_empty<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    struct OneOrMany;
    impl<'de> serde::de::Visitor<'de> for OneOrMany {
        type Value = Vec<String>;
        fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
            f.write_str("a string or a list of strings")
        }
        fn visit_str<E: serde::de::Error>(self, s: &str) -> Result<Vec<String>, E> {
            Ok(vec![s.to_string()])
        }
        fn visit_unit<E: serde::de::Error>(self) -> Result<Vec<String>, E> {
            Ok(Vec::new())
        }
        fn visit_none<E: serde::de::Error>(self) -> Result<Vec<String>, E> {
            Ok(Vec::new())
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Vec<String>, D::Error> {
            d.deserialize_any(self)
        }
        fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<String>, A::Error> {
            let mut v = Vec::new();
            while let Some(s) = seq.next_element::<String>()? {
                v.push(s);
            }
            Ok(v)
        }
    }
    d.deserialize_any(OneOrMany)
}

/// `--launcher`: the launchers llmperf knows how to start (plan::launcher
/// says how); the CLI's value enum, as `ReplayMode` is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum LauncherKind {
    Torchrun,
    Mpirun,
    Srun,
}

impl LauncherKind {
    pub(crate) fn program(self) -> &'static str {
        match self {
            LauncherKind::Torchrun => "torchrun",
            LauncherKind::Mpirun => "mpirun",
            LauncherKind::Srun => "srun",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_parse_and_print() {
        for s in ["auto", "cpu", "cuda:0", "cuda:3"] {
            assert_eq!(Device::try_from(s.to_string()).unwrap().to_string(), s);
        }
        assert_eq!(Device::try_from("cuda".to_string()).unwrap(), Device::Cuda(0));
        assert!(Device::try_from("gpu0".to_string()).unwrap_err().contains("gpu0"));
    }
}
