//! cli: subcommands: turn parsed arguments into library calls.
use std::ffi::OsString;
use std::io::Write;

use crate::cli::{
    CheckArgs, Cli, Command, ConfigCommand, DiffArgs, ExportCommand, ImportArgs, ImportCommand, ImportNcuArgs,
    ImportTorchArgs, ProfileArgs, ServeArgs, WorkloadArgs,
};
use crate::config::{self, LoadOptions, Resolved};
use crate::error::{Error, ErrorKind};
use crate::signals::{self, Policy};
use crate::{compare, doctor, pipeline};

/// Run a parsed command line. `Ok` carries the exit code of a command that
/// completed but wants a non-zero status (e.g. doctor not ready).
pub fn run(cli: Cli, argv: Vec<String>) -> anyhow::Result<i32> {
    // Profiles and imports stop their children first and keep what they
    // wrote; the rest have nothing to save and stop at the first signal.
    let graceful = matches!(cli.command, Command::Profile(_) | Command::Import(_) | Command::Serve(_));
    signals::install(if graceful { Policy::Graceful } else { Policy::Immediate });
    match cli.command {
        Command::Profile(args) => profile(cli.config_dir, args, argv),
        Command::Workload(args) => workload(cli.config_dir, args, argv),
        Command::Import(ImportCommand::Nsys(args)) => import_nsys(cli.config_dir, args, argv),
        Command::Import(ImportCommand::Ncu(args)) => import_ncu(cli.config_dir, args, argv),
        Command::Import(ImportCommand::Torch(args)) => import_torch(cli.config_dir, args, argv),
        Command::Serve(args) => serve(cli.config_dir, args, argv),
        Command::Report(args) => {
            // A job directory of per-rank runs (ranks/<rank>/, no manifest of its own): its merge.
            let job = args.run_dir.join(crate::run_dir::RANKS_DIR).is_dir()
                && !args.run_dir.join(crate::run_dir::MANIFEST_JSON).exists();
            let dir = if job {
                pipeline::merge(std::slice::from_ref(&args.run_dir))?
            } else {
                pipeline::report(&args.run_dir)?
            };
            print(&format!("{}\n", dir.display()))?;
            Ok(0)
        }
        Command::LaunchRank(args) => {
            Err(pipeline::launch_rank(args.record.as_deref(), &args.wrap_ranks, args.wrapper_len, &args.argv).into())
        }
        Command::CudaDevices => {
            let (_, rt) = crate::plugin::runtime()?;
            print(&format!("{}\n", rt.cuda_device_count))?;
            Ok(0)
        }
        Command::Merge(args) => {
            let dir = pipeline::merge(&args.job_dirs)?;
            print(&format!("{}\n", dir.display()))?;
            Ok(0)
        }
        Command::Validate(args) => {
            let checks = crate::schemas::validate(&args.run_dir)?;
            let (text, ok) = crate::schemas::render(&checks);
            print(&text)?;
            if ok {
                Ok(0)
            } else {
                Err(crate::schemas::failed(&checks).into())
            }
        }
        Command::Diff(args) => diff(&args),
        Command::Check(args) => check(&args),
        Command::Config(ConfigCommand::Show(args)) => {
            // The flags as `profile` applies them: after the user's overrides.
            let mut overrides = args.overrides.clone();
            let flags = common_overrides(args.device.as_deref(), args.model.as_deref(), None);
            overrides.extend(flags.into_iter().map(OsString::from));
            let resolved = load(cli.config_dir, overrides)?;
            let text = if args.origin { origins(&resolved) } else { resolved.to_yaml() };
            print(&text)?;
            Ok(0)
        }
        Command::Export(ExportCommand::Perfetto(args)) => {
            let (source, dir) = crate::export::perfetto_paths(&args.source, args.out.as_deref())?;
            let findings = crate::export::recorded_findings(&args.source);
            let gap = crate::export::recorded_launch_gap(&args.source)?;
            let summary = match source {
                crate::export::Source::Nsys(sqlite) => {
                    let ranks = crate::export::recorded_ranks(&args.source);
                    let strip = crate::config::schema::pytorch_nvtx_attributes();
                    crate::export::perfetto::export(&sqlite, &dir, &ranks, &strip, &findings, gap)?
                }
                crate::export::Source::Torch(trace, rank, read) => {
                    crate::export::kineto::export(&trace, (&dir, rank), read, &findings, gap)?
                }
            };
            let mut text = crate::export::render(&summary, &dir);
            // Into the run's own perfetto/: its report.html links the traces
            // (a directory that only holds an export has no report to mend).
            if let Some(run) = args.out.is_none().then(|| crate::run_dir::RunDir::open(&args.source).ok()).flatten() {
                if crate::report::rewrite_html(&run)? {
                    let html = args.source.join(crate::run_dir::REPORT_HTML);
                    text.push_str(&format!("{} links them from its timeline\n", html.display()));
                }
            }
            print(&text)?;
            Ok(0)
        }
        Command::Doctor(args) => {
            let resolved = load(cli.config_dir, args.overrides)?;
            let mut checks = doctor::run(&resolved.config);
            if args.require_gpu {
                doctor::require_gpu(&mut checks);
            }
            print(&doctor::render(&checks))?;
            Ok(if doctor::ready(&checks) { 0 } else { ErrorKind::ProfilerUnavailable.exit_code() })
        }
    }
}

fn diff(args: &DiffArgs) -> anyhow::Result<i32> {
    let base = compare::verdict::Thresholds::default();
    let t = compare::verdict::Thresholds {
        relative_pct: args.relative_pct.unwrap_or(base.relative_pct),
        absolute_ms: args.absolute_ms.unwrap_or(base.absolute_ms),
        min_samples: args.min_samples.unwrap_or(base.min_samples),
    };
    if !(t.relative_pct >= 0.0 && t.absolute_ms >= 0.0) {
        return Err(Error::usage("--relative-pct and --absolute-ms must be numbers of at least 0")
            .with_hint("e.g. --relative-pct 5 --absolute-ms 0.05")
            .into());
    }
    let options = compare::Options { top: args.top, discount_shift: args.discount_shift };
    let d = compare::diff(&args.a, &args.b, options, &|_, _| Some(t))?;
    let markdown = compare::render::diff_markdown(&d);
    compare::write_diff(&args.b, &d, &markdown)?;
    print(&markdown)?;
    Ok(0)
}

fn check(args: &CheckArgs) -> anyhow::Result<i32> {
    let report = compare::check::check(&compare::check::CheckArgs {
        run: &args.run,
        baseline: &args.baseline,
        budgets: args.budgets.clone(),
        strict: args.strict,
        discount_shift: args.discount_shift,
        allow_empty_baseline: args.allow_empty_baseline,
    })?;
    let markdown = compare::render::check_markdown(&report);
    compare::write_check(&args.run, &report, &markdown, args.junit.as_deref())?;
    print(&markdown)?;
    match compare::check::failure(&report) {
        Some(e) => Err(e.into()),
        None => Ok(0),
    }
}

fn load(config_dir: Option<std::path::PathBuf>, overrides: Vec<OsString>) -> Result<Resolved, Error> {
    let overrides = overrides.into_iter().map(utf8_override).collect::<Result<_, _>>()?;
    config::load(&LoadOptions::from_process_env(config_dir, overrides))
}

/// Keys and values are text: an override in another encoding is named, not guessed at.
fn utf8_override(arg: OsString) -> Result<String, Error> {
    arg.into_string().map_err(|raw| {
        Error::usage(format!("override `{}` is not valid UTF-8", raw.to_string_lossy())).with_hint(
            "write configuration overrides as UTF-8 text (a file name that is not UTF-8 goes before the overrides)",
        )
    })
}

fn profile(config_dir: Option<std::path::PathBuf>, args: ProfileArgs, argv: Vec<String>) -> anyhow::Result<i32> {
    let mut overrides = args.overrides.clone();
    overrides.extend(flag_overrides(&args).into_iter().map(OsString::from));
    let resolved = load(config_dir, overrides)?;
    use crate::plan::launcher::LauncherKind;
    let kind = args.launcher;
    let srun = kind == Some(LauncherKind::Srun);
    if args.run_id.is_some() && !args.rank_from_env && !srun {
        return Err(Error::usage("--run-id names the job of --rank-from-env or --launcher srun")
            .with_hint("add --rank-from-env (a rank under a launcher) or --launcher srun, or drop --run-id")
            .into());
    }
    let launcher = match kind {
        Some(kind) => Some(pipeline::launcher_of(kind, args.nproc.unwrap_or(1), args.launcher_args.clone())?),
        None => None,
    };
    let outcome = pipeline::profile(pipeline::Request {
        resolved,
        command: args.command,
        no_nvtx: args.no_nvtx,
        llmperf_argv: argv,
        rank_env: args.rank_from_env.then(|| crate::plan::RankEnv::of_process(crate::provenance::host::hostname())),
        launcher,
        run_id: args.run_id,
        raw_argv: std::env::args_os().collect(),
    })?;
    // The run directory is the result, even for a failed or interrupted run.
    print(&format!("{}\n", outcome.run_dir.display()))?;
    match outcome.error {
        Some(e) => Err(e.into()),
        None => Ok(0),
    }
}

fn workload(config_dir: Option<std::path::PathBuf>, args: WorkloadArgs, argv: Vec<String>) -> anyhow::Result<i32> {
    let config = match &args.resolved_config {
        Some(file) => config::load_resolved(file)?,
        None => {
            let mut overrides = args.overrides.clone();
            overrides.extend(
                common_overrides(args.device.as_deref(), args.model.as_deref(), args.output_root.as_deref())
                    .into_iter()
                    .map(OsString::from),
            );
            load(config_dir, overrides)?.config
        }
    };
    let timings = args.timings_file.as_deref().unwrap_or(crate::run_dir::TIMINGS_JSON);
    let run_dir = pipeline::workload(&config, args.run_dir.as_deref(), !args.no_nvtx, timings, argv)?;
    print(&format!("{}\n", run_dir.display()))?;
    Ok(0)
}

fn import_nsys(config_dir: Option<std::path::PathBuf>, args: ImportArgs, argv: Vec<String>) -> anyhow::Result<i32> {
    let (files, overrides) = split_inputs(args.inputs, "nsys")?;
    let resolved = load(config_dir, overrides)?;
    let outcome = match files.as_slice() {
        [file] => pipeline::import_nsys(&resolved, file, args.output.as_deref(), argv)?,
        _ => pipeline::import_nsys_ranks(&resolved, &files, args.output.as_deref(), argv)?,
    };
    print(&format!("{}\n", outcome.run_dir.display()))?;
    match outcome.error {
        Some(e) => Err(e.into()),
        None => Ok(0),
    }
}

fn import_torch(
    config_dir: Option<std::path::PathBuf>,
    args: ImportTorchArgs,
    argv: Vec<String>,
) -> anyhow::Result<i32> {
    let (files, overrides) = split_inputs(args.inputs, "torch")?;
    let files = crate::parse::torch::traces_in(files)?;
    let resolved = load(config_dir, overrides)?;
    let outcome = match files.as_slice() {
        [file] => pipeline::import_torch(&resolved, file, args.output.as_deref(), argv)?,
        _ => pipeline::import_torch_ranks(&resolved, &files, args.output.as_deref(), argv)?,
    };
    print(&format!("{}\n", outcome.run_dir.display()))?;
    match outcome.error {
        Some(e) => Err(e.into()),
        None => Ok(0),
    }
}

fn serve(config_dir: Option<std::path::PathBuf>, args: ServeArgs, argv: Vec<String>) -> anyhow::Result<i32> {
    if args.url.is_none() && args.command.is_empty() {
        return Err(Error::usage(
            "llmperf serve needs the engine's command line after --, or --url of a server running",
        )
        .with_hint("llmperf serve -- vllm serve MODEL   or   llmperf serve --url http://127.0.0.1:8000")
        .into());
    }
    let positive = |v: Option<f64>| v.is_none_or(|r| r > 0.0 && r.is_finite());
    if args.requests == Some(0) || args.concurrency == 0 || !positive(args.rate) || !positive(args.duration) {
        return Err(Error::usage("--requests, --duration, --concurrency and --rate must be above 0")
            .with_hint("e.g. --requests 32 --concurrency 4 --rate 2.5, or --duration 60")
            .into());
    }
    let duration = args.duration.map(std::time::Duration::from_secs_f64);
    let requests = args.requests.unwrap_or(if duration.is_some() { usize::MAX } else { 32 });
    let prompts = match &args.prompts {
        Some(path) => crate::load::read_prompts(path)?,
        None => Vec::new(),
    };
    let resolved = load(config_dir, Vec::new())?;
    let request = pipeline::ServeRequest {
        command: args.command,
        url: args.url,
        load: crate::load::Spec {
            base_url: String::new(),
            endpoint: match args.endpoint {
                crate::cli::ServeEndpoint::Completions => crate::load::Endpoint::Completions,
                crate::cli::ServeEndpoint::Chat => crate::load::Endpoint::Chat,
            },
            model: String::new(),
            requests,
            duration,
            concurrency: args.concurrency,
            rate: args.rate,
            input_len: args.input_len,
            output_len: args.output_len,
            prompts,
            seed: args.seed,
            ignore_eos: args.ignore_eos,
            timeout: std::time::Duration::from_secs(args.request_timeout_s.max(1)),
        },
        model: args.model,
        warmup: args.warmup,
        ready_timeout: std::time::Duration::from_secs(args.ready_timeout_s.max(1)),
        capture: matches!(args.tracer, crate::cli::ServeTracer::Torch),
    };
    let outcome = pipeline::serve(&resolved, &request, args.output.as_deref(), argv)?;
    print(&format!("{}\n", outcome.run_dir.display()))?;
    match outcome.error {
        Some(e) => Err(e.into()),
        None => Ok(0),
    }
}

fn import_ncu(config_dir: Option<std::path::PathBuf>, args: ImportNcuArgs, argv: Vec<String>) -> anyhow::Result<i32> {
    let (files, overrides) = split_inputs(args.inputs, "ncu")?;
    let resolved = load(config_dir, overrides)?;
    let outcome = pipeline::import_ncu(&resolved, &files, args.output.as_deref(), args.ranges, argv)?;
    print(&format!("{}\n", outcome.run_dir.display()))?;
    match outcome.error {
        Some(e) => Err(e.into()),
        None => Ok(0),
    }
}

/// Files, then overrides: an argument is a file when it names one, an override
/// when it holds `=`; anything else is a missing file.
fn split_inputs(inputs: Vec<OsString>, importer: &str) -> Result<(Vec<std::path::PathBuf>, Vec<OsString>), Error> {
    let what = match importer {
        "ncu" => "pass .ncu-rep files, or CSVs from `ncu --import R.ncu-rep --csv --page details` (or --page raw)",
        "torch" => "pass the trace torch.profiler wrote (export_chrome_trace, tensorboard_trace_handler: *.pt.trace.json or .json.gz)",
        _ => "pass .nsys-rep, .qdrep or .sqlite files (nsys export --type sqlite), or an nsys stats kernel summary CSV",
    };
    let (mut files, mut overrides) = (Vec::new(), Vec::new());
    for arg in inputs {
        let path = std::path::PathBuf::from(&arg);
        if path.exists() {
            files.push(path);
        } else if arg.as_encoded_bytes().contains(&b'=') {
            overrides.push(arg);
        } else {
            return Err(Error::usage(format!("{}: no such file", path.display())).with_hint(what));
        }
    }
    if files.is_empty() {
        return Err(
            Error::usage("no report to import").with_hint(format!("llmperf import {importer} FILE... [KEY=VALUE...]"))
        );
    }
    Ok((files, overrides))
}

/// `--device`, `--model`, `-o` as overrides.
fn common_overrides(device: Option<&str>, model: Option<&str>, root: Option<&std::path::Path>) -> Vec<String> {
    let json = |s: &str| serde_json::to_string(s).expect("a string serializes");
    let mut o = Vec::new();
    if let Some(device) = device {
        o.push(format!("device={}", json(device)));
    }
    if let Some(model) = model {
        o.push(format!("model={model}"));
    }
    if let Some(root) = root {
        o.push(format!("runner.artifacts.root={}", json(&root.display().to_string())));
    }
    o
}

/// Convenience flags as configuration overrides (applied after the user's).
fn flag_overrides(args: &ProfileArgs) -> Vec<String> {
    let mut o = common_overrides(args.device.as_deref(), args.model.as_deref(), args.output_root.as_deref());
    if let Some(mode) = args.replay_mode {
        o.push("pipeline.ncu.enable=true".into());
        o.push(format!("pipeline.ncu.ncu_cli.replay_mode={}", mode.as_str()));
    }
    if !args.nvtx_include.is_empty() {
        let list = serde_json::to_string(&args.nvtx_include).expect("strings serialize");
        o.push(format!("pipeline.ncu.ncu_cli.nvtx.include={list}"));
    }
    if args.fail_on_empty {
        o.push("pipeline.ncu.fail_on_empty=true".into());
    }
    if args.no_nsys {
        o.push("pipeline.nsys.enable=false".into());
    }
    match args.tracer {
        Some(crate::cli::Tracer::Torch) => {
            o.push("pipeline.torch.enable=true".into());
            o.push("pipeline.nsys.enable=false".into());
        }
        Some(crate::cli::Tracer::Nsys) => {
            o.push("pipeline.torch.enable=false".into());
            o.push("pipeline.nsys.enable=true".into());
        }
        None => {}
    }
    if args.no_ncu {
        o.push("pipeline.ncu.enable=false".into());
    }
    if let Some(mode) = args.annotate {
        use clap::ValueEnum;
        let name = mode.to_possible_value().map(|v| v.get_name().to_string()).unwrap_or_else(|| "off".into());
        o.push(format!("annotate.mode={name}"));
    }
    o
}

fn origins(resolved: &Resolved) -> String {
    let mut rows = resolved.origins();
    // A value decided when it is used: say what it is here.
    for (_, _, origin) in rows.iter_mut().filter(|(k, v, _)| k == "model.python" && v.trim_matches('"') == "auto") {
        let found = match pipeline::hf::project_venv_python() {
            Some(venv) => format!("the project's venv, {}", venv.display()),
            None => "python3 on PATH (no .venv beside this llmperf)".into(),
        };
        origin.push_str(&format!("; auto = {found}"));
    }
    // Align the comments, but let a long value (a description) push its own comment out.
    let width = rows.iter().map(|(k, v, _)| k.len() + v.len() + 2).max().unwrap_or(0).min(64);
    rows.iter().map(|(k, v, o)| format!("{:<width$}  # {o}\n", format!("{k}: {v}"))).collect()
}

fn print(text: &str) -> anyhow::Result<()> {
    let mut out = std::io::stdout().lock();
    // A closed pipe (`llmperf config show | head`) is not an error.
    match out.write_all(text.as_bytes()).and_then(|_| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        r => Ok(r?),
    }
}
