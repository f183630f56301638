//! cli: command-line types (clap derive). No logic here: see app.rs.
use clap::{Args, Parser, Subcommand};
use std::ffi::OsString;
use std::path::PathBuf;

const EXAMPLES: &str = "\
Examples:
  llmperf doctor                                   check tools, GPU, permissions
  llmperf profile                                  nsys timeline of the built-in workload
  llmperf profile --model llm_tiny                 ... of a small decoder LLM (prefill, decode)
  llmperf profile -- python infer.py               nsys timeline of any command
  llmperf profile --annotate modules -- python infer.py   ... with a range per nn.Module call
  llmperf profile --tracer torch -- python infer.py        ... recorded by torch.profiler, no nsys
  llmperf profile --model hf model.arch=mixtral    a Hugging Face architecture by config
  llmperf profile --replay-mode range -- ./app     add Nsight Compute range replay
  llmperf config show --origin runner=light        resolved config and where each value came from

Run directories are written under tmp/profile-output/<run_id>/; the path is printed on stdout.
Docs: docs/cli.md, docs/configuration.md, docs/artifacts.md.";

#[derive(Debug, Parser)]
#[command(name = "llmperf", version, about = "Profile deep-learning and LLM inference with Nsight Systems and Nsight Compute, per NVTX region", after_help = EXAMPLES)]
pub struct Cli {
    /// More log output on stderr (-v debug: every spawned command; -vv trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    pub verbose: u8,
    /// Only errors on stderr.
    #[arg(short, long, global = true, conflicts_with = "verbose")]
    pub quiet: bool,
    /// A configuration tree layered over the built-in conf/ (same layout).
    #[arg(long, global = true, value_name = "DIR")]
    pub(crate) config_dir: Option<PathBuf>,
    #[command(subcommand)]
    pub(crate) command: Command,
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run a command under nsys (and ncu) and write a run directory.
    #[command(after_help = PROFILE_EXAMPLES)]
    Profile(ProfileArgs),
    /// Run the built-in workload alone (no profiler) and write its timings.
    #[command(after_help = WORKLOAD_EXAMPLES)]
    Workload(WorkloadArgs),
    /// Build llmperf's reports from a profile you already have.
    #[command(subcommand)]
    Import(ImportCommand),
    /// Check every JSON artifact of a run directory against its schema (specs/).
    #[command(
        after_help = "Example:\n  llmperf validate tmp/profile-output/20261122T130558Z-3f2a1c\n\nPrints OK/FAIL/SKIP per JSON file; exit status 6 when a file does not match its schema."
    )]
    Validate(RunDirArgs),
    /// Rebuild every report of a run directory from its raw artifacts.
    #[command(
        after_help = "Example:\n  llmperf report tmp/profile-output/20261122T130558Z-3f2a1c\n\nReads nsys/report.sqlite, the ncu CSVs, workload/timings.json, env.json and config.yaml;\nrewrites nsys/regions.json, nsys/top_kernels.json, ncu/regions/, kernels.*, operators.*,\nstakeholder_summary.md and report.md. The same bytes as the run wrote, but for timestamps."
    )]
    Report(RunDirArgs),
    /// Compare two run directories region by region and kernel by kernel, with a verdict per row.
    #[command(after_help = DIFF_EXAMPLES)]
    Diff(DiffArgs),
    /// Judge a run against a baseline run with budgets; exit 8 on a regression (for CI).
    #[command(after_help = CHECK_EXAMPLES)]
    Check(CheckArgs),
    /// One rank under a launcher: record its rank, then become ARGV (used by `profile --launcher`).
    #[command(hide = true)]
    LaunchRank(LaunchRankArgs),
    /// Print how many CUDA devices libtorch sees (used by `profile --device cuda:N` before any profiler).
    #[command(hide = true)]
    CudaDevices,
    /// Profile a serving engine under load: start it, warm it up, capture a window of load, stop it.
    #[command(after_help = SERVE_EXAMPLES)]
    Serve(ServeArgs),
    /// Cross-rank reports of a job whose ranks each ran `llmperf profile --rank-from-env`.
    #[command(after_help = MERGE_EXAMPLES)]
    Merge(MergeArgs),
    /// Write a run's timeline in another format (Perfetto / Chrome trace events).
    #[command(subcommand)]
    Export(ExportCommand),
    /// Show the resolved configuration.
    #[command(subcommand)]
    Config(ConfigCommand),
    /// Check that profilers, GPU, permissions and libtorch are usable here.
    #[command(
        after_help = "Examples:\n  llmperf doctor\n  llmperf doctor --require-gpu        (a GPU CI runner: GPU, counters, nsys, ncu and CUDA must work)\n\nExit status 0 when the default profile can run (WARN lines are features unavailable here);\n4 when it cannot, or with --require-gpu when a GPU feature is unavailable."
    )]
    Doctor(DoctorArgs),
}

const PROFILE_EXAMPLES: &str = "\
Examples:
  llmperf profile                                  the built-in default workload
  llmperf profile --model llm_tiny --device cuda:0
  llmperf profile -- python infer.py --batch 8
  llmperf profile --no-nsys --replay-mode kernel -- ./my_app
  llmperf profile pipeline.nsys.trace=nvtx,osrt runner.artifacts.root=/data/runs -- ./my_app
  llmperf profile profiling/ncu@pipeline.ncu=ncu.high --replay-mode range -- ./my_app
  llmperf profile --launcher torchrun --nproc 2 -- train.py         one nsys around torchrun: every rank
  llmperf profile --launcher srun -n 16 --no-ncu -- python infer.py nsys per rank, then `llmperf merge`

OVERRIDES use the grammar of docs/configuration.md (key=value, +key=value, ~key, group@package=option).
Convenience flags are applied after OVERRIDES, so they win.";

const WORKLOAD_EXAMPLES: &str = "\
Examples:
  llmperf workload                                       the default model (shallow ResNet)
  llmperf workload --model llm_tiny                      a tiny decoder LLM: prefill + decode with a KV cache
  llmperf workload --model gpt2_small infer.max_new_tokens=64
  llmperf workload --model nvtx_regions infer.iters=100 --no-nvtx
  llmperf workload --model torchscript model.path=model.pt 'model.input_shapes=[[8,3,224,224]]'
  llmperf workload --model hf model.arch=qwen2          a Hugging Face architecture by config (transformers)

Prints a timing table and the run directory; workload/timings.json holds the numbers.";

const MERGE_EXAMPLES: &str = "\
Examples:
  srun -n 16 llmperf profile --rank-from-env -- python infer.py   (each rank: runs/<job>/ranks/<rank>/)
  llmperf merge tmp/profile-output/4711
  llmperf merge /nodeA/runs/4711 /nodeB/runs/4711      per-node filesystems: every node's ranks

Reads each ranks/<rank>/ (nsys/regions.json, rank.json, manifest.json) of the job directories and
writes ranks.json, ranks.md and ranks.html (a ranks x regions heat map) into the first: per rank
its processes, devices, kernels and GPU time; per region its time on every rank, the spread and
the straggler; the ranks that are missing or ran unprofiled, and why. Reads only those small
files, never the captures.";

#[derive(Debug, Args)]
pub(crate) struct LaunchRankArgs {
    /// Write DIR/<pid>.json with this process's rank (from the launcher's environment).
    #[arg(long, value_name = "DIR")]
    pub(crate) record: Option<PathBuf>,
    /// The ranks that run ARGV whole; the others run ARGV without its first --wrapper-len words.
    #[arg(long, value_delimiter = ',', value_name = "RANKS")]
    pub(crate) wrap_ranks: Vec<u32>,
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub(crate) wrapper_len: usize,
    #[arg(last = true, required = true, value_name = "ARGV")]
    pub(crate) argv: Vec<OsString>,
}

#[derive(Debug, Args)]
pub(crate) struct MergeArgs {
    /// Job directories (each holding ranks/<rank>/); the reports go into the first.
    #[arg(required = true, value_name = "JOB_DIR")]
    pub(crate) job_dirs: Vec<PathBuf>,
}

const DIFF_EXAMPLES: &str = "\
Examples:
  llmperf diff tmp/profile-output/RUN_A tmp/profile-output/RUN_B
  llmperf diff base/ new/ --relative-pct 5 --absolute-ms 0.05 --top 20

Prints a Markdown table per source (workload timings, nsys regions, kernels, ncu metrics) and
writes B/diff/diff.json, diff.md and diff.html. Verdicts: faster, slower, unchanged,
inconclusive (too few samples or too much noise), missing (A only), new (B only); docs/ci.md.";

const CHECK_EXAMPLES: &str = "\
Examples:
  llmperf check tmp/profile-output/RUN --baseline baselines/llm_tiny
  llmperf check RUN --baseline BASE --budgets ci/budgets.yaml --junit check.xml --strict

Writes RUN/check/check.json and check.md, prints the Markdown, appends it to $GITHUB_STEP_SUMMARY
when that is set. Exit 0 pass (inconclusive passes unless --strict), 8 a regression or a missing
region, 7 nothing profiled in RUN; specs/exit-codes.md.";

#[derive(Debug, Args)]
pub(crate) struct DiffArgs {
    /// The earlier run (a run directory).
    pub(crate) a: PathBuf,
    /// The later run.
    pub(crate) b: PathBuf,
    /// Kernel rows: each run's first N kernels by GPU time (0: all that nsys/samples.json holds).
    #[arg(long, default_value_t = 10, value_name = "N")]
    pub(crate) top: usize,
    /// A row changes only past this many percent ...
    #[arg(long, value_name = "PCT")]
    pub(crate) relative_pct: Option<f64>,
    /// ... and past this many milliseconds.
    #[arg(long, value_name = "MS")]
    pub(crate) absolute_ms: Option<f64>,
    /// Fewer samples than this in either run: inconclusive.
    #[arg(long, value_name = "N")]
    pub(crate) min_samples: Option<usize>,
    /// A known change of machine or clock: rows that moved with the whole run are inconclusive.
    #[arg(long)]
    pub(crate) discount_shift: bool,
}

#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The run to judge (a run directory).
    pub(crate) run: PathBuf,
    /// The run it is compared with.
    #[arg(long, value_name = "DIR")]
    pub(crate) baseline: PathBuf,
    /// Thresholds per region and kernel (YAML; docs/ci.md). Default: 10% and 0.01 ms, 10 samples.
    #[arg(long, value_name = "FILE")]
    pub(crate) budgets: Option<PathBuf>,
    /// Also write the verdicts as JUnit XML to FILE.
    #[arg(long, value_name = "FILE")]
    pub(crate) junit: Option<PathBuf>,
    /// Fail on inconclusive rows too.
    #[arg(long)]
    pub(crate) strict: bool,
    /// A known change of machine or clock: rows that moved with the whole run
    /// are inconclusive, and the shift itself does not fail.
    #[arg(long)]
    pub(crate) discount_shift: bool,
    /// The first run of a new pipeline: a baseline that does not exist yet,
    /// or holds nothing to compare, passes (with a note).
    #[arg(long)]
    pub(crate) allow_empty_baseline: bool,
}

#[derive(Debug, Args)]
pub(crate) struct WorkloadArgs {
    /// Device: auto, cpu, cuda, cuda:N (device).
    #[arg(long, value_name = "DEVICE")]
    pub(crate) device: Option<String>,
    /// Built-in model: conf/model/<NAME>/ (model=NAME).
    #[arg(long, value_name = "NAME")]
    pub(crate) model: Option<String>,
    /// Emit no NVTX ranges (to measure their overhead).
    #[arg(long)]
    pub(crate) no_nvtx: bool,
    /// Where run directories are created (runner.artifacts.root).
    #[arg(short = 'o', long = "output-root", value_name = "DIR")]
    pub(crate) output_root: Option<PathBuf>,
    /// Write into this existing run directory (used by `profile`).
    #[arg(long, hide = true, value_name = "DIR")]
    pub(crate) run_dir: Option<PathBuf>,
    /// Write timings to this path inside the run directory (used by `profile`).
    #[arg(long, hide = true, value_name = "REL")]
    pub(crate) timings_file: Option<String>,
    /// Use this resolved configuration file as is (used by `profile`).
    #[arg(long, hide = true, value_name = "FILE", conflicts_with = "overrides")]
    pub(crate) resolved_config: Option<PathBuf>,
    /// Configuration overrides.
    #[arg(value_name = "OVERRIDES")]
    pub(crate) overrides: Vec<OsString>,
}

/// `profile --tracer`: the timeline's recorder.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Tracer {
    Nsys,
    Torch,
}

#[derive(Debug, Args)]
pub(crate) struct ProfileArgs {
    /// Enable Nsight Compute with this replay mode (pipeline.ncu.ncu_cli.replay_mode).
    #[arg(long, value_enum, value_name = "MODE")]
    pub(crate) replay_mode: Option<crate::config::schema::ReplayMode>,
    /// Device for built-in workloads: auto, cpu, cuda, cuda:N (device).
    #[arg(long, value_name = "DEVICE")]
    pub(crate) device: Option<String>,
    /// Built-in model: conf/model/<NAME>/ (model=NAME).
    #[arg(long, value_name = "NAME")]
    pub(crate) model: Option<String>,
    /// NVTX region for ncu to include, repeatable (pipeline.ncu.ncu_cli.nvtx.include).
    #[arg(long = "nvtx-include", value_name = "REGION")]
    pub(crate) nvtx_include: Vec<String>,
    /// Exit 7 when a configured NVTX region matched nothing or ncu profiled
    /// nothing (pipeline.ncu.fail_on_empty=true); for CI. Default: a warning.
    #[arg(long)]
    pub(crate) fail_on_empty: bool,
    /// Skip Nsight Systems (pipeline.nsys.enable=false).
    #[arg(long)]
    pub(crate) no_nsys: bool,
    /// What records the timeline: `nsys` (Nsight Systems, the default) or
    /// `torch` (torch.profiler inside a Python command or --model hf, no nsys
    /// needed; pipeline.torch.enable=true, pipeline.nsys.enable=false).
    #[arg(long, value_enum, value_name = "TRACER", conflicts_with = "no_nsys")]
    pub(crate) tracer: Option<Tracer>,
    /// Skip Nsight Compute (pipeline.ncu.enable=false).
    #[arg(long, conflicts_with = "replay_mode")]
    pub(crate) no_ncu: bool,
    /// NVTX ranges injected into a Python command after `--` (or --model
    /// hf), the program unchanged (annotate.mode): `modules`, a range per
    /// nn.Module forward named by its path (`blocks.0.mlp`) in the domain
    /// llmperf.modules, with prefill/decode_step around a KV-cache model's
    /// calls; `ops` adds PyTorch's operator ranges; `auto` is `modules` for a
    /// Python command and off for others.
    #[arg(long, value_enum, value_name = "MODE")]
    pub(crate) annotate: Option<crate::config::schema::AnnotateMode>,
    /// Where run directories are created (runner.artifacts.root).
    #[arg(short = 'o', long = "output-root", value_name = "DIR")]
    pub(crate) output_root: Option<PathBuf>,
    /// One rank of a job under a launcher (srun, mpirun, torchrun): the rank
    /// from RANK, OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID, the run
    /// directory ROOT/<job>/ranks/<rank>/ (job: --run-id, SLURM_JOB_ID,
    /// TORCHELASTIC_RUN_ID or PMIX_NAMESPACE). `llmperf merge ROOT/<job>` after.
    #[arg(long)]
    pub(crate) rank_from_env: bool,
    /// The job's name for --rank-from-env (the same for every rank).
    #[arg(long, value_name = "NAME")]
    pub(crate) run_id: Option<String>,
    /// Start the job's ranks with this launcher: torchrun or mpirun inside
    /// nsys (and ncu) on this node, each process given its rank from the
    /// launcher's environment; srun outside, each rank profiling itself
    /// (--rank-from-env) and the job merged after (`llmperf merge`).
    #[arg(long, value_enum, value_name = "LAUNCHER", conflicts_with = "rank_from_env", requires = "nproc")]
    pub(crate) launcher: Option<crate::config::schema::LauncherKind>,
    /// Number of ranks for --launcher (torchrun --nproc-per-node, mpirun -np, srun -n).
    #[arg(short = 'n', long, visible_alias = "np", value_name = "N", requires = "launcher")]
    pub(crate) nproc: Option<u32>,
    /// An option for the launcher itself, repeatable (--launcher-arg=--oversubscribe).
    #[arg(long = "launcher-arg", value_name = "ARG", allow_hyphen_values = true, requires = "launcher")]
    pub(crate) launcher_args: Vec<String>,
    /// Configuration overrides.
    #[arg(value_name = "OVERRIDES")]
    pub(crate) overrides: Vec<OsString>,
    /// Emit no NVTX ranges from the built-in workload.
    #[arg(long)]
    pub(crate) no_nvtx: bool,
    /// The command to profile, after `--` (default: the built-in workload).
    #[arg(last = true, value_name = "CMD")]
    pub(crate) command: Vec<OsString>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ImportCommand {
    /// An Nsight Systems report (.nsys-rep, .qdrep), its SQLite export, or an `nsys stats` kernel summary CSV.
    #[command(
        after_help = "Examples:\n  llmperf import nsys report1.nsys-rep -o runs/imported\n  llmperf import nsys report1.sqlite\n  llmperf import nsys summary_cuda_gpu_kern_sum.csv   # kernels only, no regions\n  llmperf import nsys report.0.nsys-rep report.1.nsys-rep -o runs/job   # one capture per rank, one job\n\nWrites nsys/regions.json (NVTX region tree with kernel attribution), nsys/top_kernels.json,\nthe SQLite export and nsys stats CSVs into DIR/nsys/; prints DIR. Into an existing run\ndirectory, adds to it. Several files are the ranks of one job (each file's rank: the last\nnumber in its name, as `nsys -o report.%q{RANK}` writes it): each goes to DIR/ranks/<rank>/,\nthen DIR/ranks.json and ranks.md as `llmperf merge` writes them."
    )]
    Nsys(ImportArgs),
    /// Nsight Compute reports (.ncu-rep) or CSVs of their details or raw page, into one run.
    #[command(
        after_help = "Examples:\n  llmperf import ncu profile.ncu-rep -o runs/imported\n  llmperf import ncu details.csv report.kernels.exclude='[\"regex:^elementwise\"]'\n  llmperf import ncu ranges.ncu-rep --range prefill --range decode_all\n  llmperf import ncu kernel_*/ncu.details.csv   # one CSV per kernel, one run\n\nCopies each input into DIR/ncu/, renders a .ncu-rep with `ncu --import` (CSV inputs need no ncu),\nand writes DIR/ncu/regions/ (report.json, report.md, one directory per region); prints DIR."
    )]
    Ncu(ImportNcuArgs),
    /// A PyTorch profiler (Kineto) trace: .json, .json.gz, *.pt.trace.json(.gz).
    #[command(
        after_help = "Examples:\n  llmperf import torch trace.json -o runs/imported\n  llmperf import torch rank-0.pt.trace.json.gz runner.run.top_n_kernels=50\n  llmperf import torch traces/*.pt.trace.json.gz -o runs/job   # the ranks of one job\n\nReads the trace in one streaming pass (gzip or not) and writes torch/regions.json (the region\ntree of user_annotation, cpu_op and python_function ranges with the kernels each launched, joined\nby correlation id), torch/top_kernels.json, torch/samples.json and torch/capture.json (kernels,\ncopies and sets per device and stream, kernels per launch call, graph kernels, kernels without a\nlaunch call), then the reports; prints DIR. Several files are the ranks of one job (rank:\ndistributedInfo.rank, else the last number in the name): each goes to DIR/ranks/<rank>/, then\nDIR/ranks.json and ranks.md as `llmperf merge` writes them."
    )]
    Torch(ImportTorchArgs),
}

#[derive(Debug, Subcommand)]
pub(crate) enum ExportCommand {
    /// An nsys capture as Chrome JSON trace events in torch.profiler's dialect, one gzipped file per process.
    #[command(
        after_help = "Examples:\n  llmperf export perfetto tmp/profile-output/20261122T130558Z-3f2a1c      into RUN/perfetto/\n  llmperf export perfetto report1.sqlite -o traces/\n\nReads the run's nsys/report.sqlite (or an `nsys export --type sqlite` file) and writes one\n<DIR>/pid<PID>.pt.trace.json.gz per process: NVTX ranges as user_annotation slices, CUDA calls,\nkernels, copies and memsets per device and stream, and a flow from each launch to what it\nlaunched. Open a file in https://ui.perfetto.dev or chrome://tracing; Holistic Trace Analysis\nand `llmperf import torch DIR` read the directory. Prints what each file holds."
    )]
    Perfetto(ExportPerfettoArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ExportPerfettoArgs {
    /// A run directory with nsys/report.sqlite, or an nsys SQLite export.
    pub(crate) source: PathBuf,
    /// Where the traces go (created): by default RUN/perfetto/; required for a file.
    #[arg(short = 'o', long = "out", value_name = "DIR")]
    pub(crate) out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ImportNcuArgs {
    /// The reports to read (one or more; each is one pass), then configuration
    /// overrides (KEY=VALUE, e.g. runner.run.top_n_kernels=50).
    #[arg(value_name = "FILE|OVERRIDE", required = true)]
    pub(crate) inputs: Vec<OsString>,
    /// Output directory (default: a new run directory under runner.artifacts.root).
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub(crate) output: Option<PathBuf>,
    /// The report is from range replay of this region (repeat for each): its
    /// results are ranges, not kernels.
    #[arg(long = "range", value_name = "REGION")]
    pub(crate) ranges: Vec<String>,
}

#[derive(Debug, Args)]
pub(crate) struct RunDirArgs {
    /// A run directory.
    pub(crate) run_dir: PathBuf,
}

#[derive(Debug, Args)]
pub(crate) struct ImportArgs {
    /// The reports to read (.nsys-rep, .qdrep, .sqlite, or a kernel summary
    /// .csv; several: one per rank), then configuration overrides (KEY=VALUE).
    #[arg(value_name = "FILE|OVERRIDE", required = true)]
    pub(crate) inputs: Vec<OsString>,
    /// Output directory (default: a new run directory under runner.artifacts.root).
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub(crate) output: Option<PathBuf>,
}

const SERVE_EXAMPLES: &str = "Examples:
  llmperf serve --requests 64 --concurrency 8 -- vllm serve meta-llama/Llama-3.2-1B
  llmperf serve --rate 4 --input-len 128:512 --output-len 64 --ignore-eos -- vllm serve MODEL --enforce-eager
  llmperf serve --url http://127.0.0.1:8000 --requests 16     (a server already running, its profiler on)

llmperf starts the engine (on 127.0.0.1, a free port, torch.profiler writing into the run),
waits for /health, sends --warmup requests, then POST /start_profile, the load, POST /stop_profile,
stops the engine and everything it started, and imports the trace (torch/). Each request's TTFT,
inter-token latency, TPOT and end-to-end time go to serve/requests.json (docs/serving.md).";

/// Output lengths and prompt lengths: `N`, or `LO:HI` (uniform).
fn parse_len(text: &str) -> Result<(usize, usize), String> {
    let (lo, hi) = text.split_once(':').unwrap_or((text, text));
    let n = |t: &str| t.trim().parse::<usize>().map_err(|_| format!("{text}: expected N or LO:HI, whole numbers"));
    let (lo, hi) = (n(lo)?, n(hi)?);
    if lo == 0 || lo > hi {
        return Err(format!("{text}: expected 1 <= LO <= HI"));
    }
    Ok((lo, hi))
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum ServeTracer {
    /// torch.profiler, through the engine's /start_profile and /stop_profile.
    Torch,
    /// No capture: the load and its latencies only.
    None,
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// A server already running on loopback (http://127.0.0.1:PORT): not started or stopped by llmperf.
    #[arg(long, value_name = "URL", conflicts_with = "command")]
    pub(crate) url: Option<String>,
    /// Requests in the captured load (with --duration: the most sent; default then unlimited).
    #[arg(long)]
    pub(crate) requests: Option<usize>,
    /// Send requests for this many seconds (those in flight then finish).
    #[arg(long, value_name = "SECONDS")]
    pub(crate) duration: Option<f64>,
    /// Requests in flight at most.
    #[arg(long, default_value_t = 4)]
    pub(crate) concurrency: usize,
    /// Requests per second, arriving as a Poisson process (default: as fast as --concurrency allows).
    #[arg(long)]
    pub(crate) rate: Option<f64>,
    /// Prompt length in words: N or LO:HI.
    #[arg(long, default_value = "32", value_parser = parse_len)]
    pub(crate) input_len: (usize, usize),
    /// Output tokens asked for: N or LO:HI.
    #[arg(long, default_value = "16", value_parser = parse_len)]
    pub(crate) output_len: (usize, usize),
    /// Prompts from a JSONL file ({"prompt": "..."} per line) instead of made-up ones.
    #[arg(long, value_name = "FILE")]
    pub(crate) prompts: Option<PathBuf>,
    #[arg(long, default_value_t = 0)]
    pub(crate) seed: u64,
    /// Ask for exactly the output length (the engine ignores end-of-sequence).
    #[arg(long)]
    pub(crate) ignore_eos: bool,
    #[arg(long, value_enum, default_value = "completions")]
    pub(crate) endpoint: ServeEndpoint,
    /// The served model's name (default: the first of /v1/models).
    #[arg(long)]
    pub(crate) model: Option<String>,
    /// Requests sent before the capture opens, not captured.
    #[arg(long, default_value_t = 2)]
    pub(crate) warmup: usize,
    /// How long the engine may take to answer /health.
    #[arg(long, default_value_t = 600)]
    pub(crate) ready_timeout_s: u64,
    /// How long one request may take.
    #[arg(long, default_value_t = 300)]
    pub(crate) request_timeout_s: u64,
    #[arg(long, value_enum, default_value = "torch")]
    pub(crate) tracer: ServeTracer,
    /// Output directory (default: a new run directory under runner.artifacts.root).
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub(crate) output: Option<PathBuf>,
    /// The engine's command line, e.g. vllm serve MODEL --enforce-eager.
    #[arg(last = true, value_name = "COMMAND")]
    pub(crate) command: Vec<OsString>,
}

#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub(crate) enum ServeEndpoint {
    Completions,
    Chat,
}

#[derive(Debug, Args)]
pub(crate) struct ImportTorchArgs {
    /// The traces to read (.json, .json.gz; several, or a directory of them:
    /// the ranks of one job),
    /// then configuration overrides (KEY=VALUE).
    #[arg(value_name = "FILE|OVERRIDE", required = true)]
    pub(crate) inputs: Vec<OsString>,
    /// Output directory (default: a new run directory under runner.artifacts.root).
    #[arg(short = 'o', long = "output", value_name = "DIR")]
    pub(crate) output: Option<PathBuf>,
}

#[derive(Debug, Subcommand)]
pub(crate) enum ConfigCommand {
    /// Print the resolved configuration as YAML.
    #[command(
        after_help = "Examples:\n  llmperf config show\n  llmperf config show --model hf model.arch=qwen2\n  llmperf config show --origin pipeline.ncu.ncu_cli.replay_mode=range\n  llmperf --config-dir ./myconf config show profiling/ncu@pipeline.ncu=ncu.mygpu"
    )]
    Show(ShowArgs),
}

#[derive(Debug, Args)]
pub(crate) struct ShowArgs {
    /// Print every key with the layer it came from instead.
    #[arg(long)]
    pub(crate) origin: bool,
    /// The configuration `profile --model NAME` would run (model=NAME).
    #[arg(long, value_name = "NAME")]
    pub(crate) model: Option<String>,
    /// The configuration `profile --device DEVICE` would run (device).
    #[arg(long, value_name = "DEVICE")]
    pub(crate) device: Option<String>,
    /// Configuration overrides.
    #[arg(value_name = "OVERRIDES")]
    pub(crate) overrides: Vec<OsString>,
}

#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    /// Fail (exit 4) unless nsys, ncu, a GPU, its counters and CUDA in
    /// libtorch all work: for CI jobs on GPU runners.
    #[arg(long)]
    pub(crate) require_gpu: bool,
    /// Configuration overrides (e.g. pipeline.nsys.executable=/opt/nsys/bin/nsys).
    #[arg(value_name = "OVERRIDES")]
    pub(crate) overrides: Vec<OsString>,
}
