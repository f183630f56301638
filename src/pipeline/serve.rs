//! pipeline::serve: `llmperf serve -- vllm serve MODEL …`. The engine is
//! started in its own process group with torch.profiler configured to write
//! into the run directory, waited for (`/health`), warmed up with requests
//! that are not captured, then `/start_profile`, the load, `/stop_profile`;
//! the engine and everything it started are stopped on every path (a guard
//! does it on an early return, `process` on a signal). The trace it wrote
//! goes through `import torch`; the requests' latencies to
//! `serve/requests.json`; `/metrics` before and after the load beside them.
//! With `--url` the server is one already running on loopback, which
//! llmperf neither starts nor stops.
use std::ffi::OsString;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::aggregate::steps;
use crate::error::{Error, ErrorKind};
use crate::load;
use crate::manifest::{ExitInfo, ManifestWriter};
use crate::process::{Finished, Sink, Spawn};
use crate::run_dir::{self, RunDir};

use super::stage::{self, Done, RunStatus};

/// What `llmperf serve` was asked.
#[derive(Debug, Clone)]
pub(crate) struct Request {
    /// The engine's command line (empty with `url`).
    pub(crate) command: Vec<OsString>,
    pub(crate) url: Option<String>,
    pub(crate) load: load::Spec,
    /// The served model's name; None: the first of `/v1/models`.
    pub(crate) model: Option<String>,
    pub(crate) warmup: usize,
    pub(crate) ready_timeout: Duration,
    /// Whether `/start_profile` and `/stop_profile` open and close a capture.
    pub(crate) capture: bool,
}

/// The engine llmperf started, stopped when this is dropped.
struct Server {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Result<Finished, Error>>>,
}

impl Server {
    fn start(spec: Spawn) -> Server {
        let stop = Arc::new(AtomicBool::new(false));
        let spec = spec.stop_when(stop.clone());
        let thread = std::thread::spawn(move || crate::process::run(&spec));
        Server { stop, thread: Some(thread) }
    }

    fn exited(&self) -> bool {
        self.thread.as_ref().is_none_or(|t| t.is_finished())
    }

    /// Stop the engine (if still running) and say how it ended.
    fn stop(&mut self) -> Option<Result<Finished, Error>> {
        self.stop.store(true, Ordering::SeqCst);
        let thread = self.thread.take()?;
        Some(thread.join().unwrap_or_else(|_| Err(Error::new(ErrorKind::Internal, "the server's watcher panicked"))))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.stop();
    }
}

/// The last `lines` lines of the server's log, for an error.
fn log_tail(run: &RunDir, lines: usize) -> String {
    let text = std::fs::read(run.join(run_dir::SERVE_LOG)).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}

/// A free TCP port on 127.0.0.1 (bound, read, released).
fn free_port() -> Result<u16, Error> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")
        .map_err(|e| Error::new(ErrorKind::Internal, format!("no free port on 127.0.0.1: {e}")))?;
    l.local_addr().map(|a| a.port()).map_err(|e| Error::new(ErrorKind::Internal, format!("a free port: {e}")))
}

/// The value after `flag` in `argv` (`--port 8000` or `--port=8000`).
fn flag_value(argv: &[OsString], flag: &str) -> Option<String> {
    let args: Vec<String> = argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    args.iter().enumerate().find_map(|(i, a)| {
        if a == flag {
            args.get(i + 1).cloned()
        } else {
            a.strip_prefix(&format!("{flag}=")).map(String::from)
        }
    })
}

/// The engine's command line, with the loopback address, a port and the
/// profiler llmperf needs added where the user did not give them.
fn engine_argv(command: &[OsString], trace_dir: &Path, capture: bool) -> Result<(Vec<OsString>, String), Error> {
    let mut argv = command.to_vec();
    if let Some(host) = flag_value(command, "--host") {
        load::check_loopback(&format!("http://{host}"))?;
    } else {
        argv.extend(["--host".into(), "127.0.0.1".into()]);
    }
    let port = match flag_value(command, "--port") {
        Some(p) => p
            .parse::<u16>()
            .map_err(|_| Error::usage(format!("--port {p}: not a port")).with_hint("give the engine --port N"))?,
        None => {
            let p = free_port()?;
            argv.extend(["--port".into(), p.to_string().into()]);
            p
        }
    };
    if capture {
        let config = profiler_config(command, trace_dir)?;
        argv = without_flag(&argv, "--profiler-config");
        argv.extend(["--profiler-config".into(), config.to_string().into()]);
    }
    Ok((argv, format!("http://127.0.0.1:{port}")))
}

/// The engine's `--profiler-config`: the user's JSON object where the
/// command has one (`detailed_trace_annotation`, `torch_profiler_record_shapes`,
/// …), with the torch profiler and the run's trace folder set; stacks off
/// unless the user asked (with them `/stop_profile` takes minutes).
fn profiler_config(command: &[OsString], trace_dir: &Path) -> Result<serde_json::Value, Error> {
    let mut config = match flag_value(command, "--profiler-config") {
        None => serde_json::json!({}),
        Some(text) => {
            serde_json::from_str::<serde_json::Value>(&text).ok().filter(|v| v.is_object()).ok_or_else(|| {
                Error::usage(format!("the engine's --profiler-config {text}: not a JSON object"))
                    .with_hint(r#"e.g. --profiler-config '{"detailed_trace_annotation": true}'"#)
            })?
        }
    };
    let dir = trace_dir.display().to_string();
    for (key, ours) in [("profiler", "torch"), ("torch_profiler_dir", dir.as_str())] {
        match config.get(key) {
            Some(v) if v != ours => {
                return Err(Error::usage(format!(
                    "the engine's --profiler-config sets {key} to {v}: llmperf captures with the torch profiler into the run"
                ))
                .with_hint(format!("leave {key} out of --profiler-config (llmperf sets it), or pass --tracer none to profile nothing")));
            }
            _ => config[key] = ours.into(),
        }
    }
    if config.get("torch_profiler_with_stack").is_none() {
        config["torch_profiler_with_stack"] = false.into();
    }
    Ok(config)
}

/// `argv` without `flag VALUE` and `flag=VALUE`.
fn without_flag(argv: &[OsString], flag: &str) -> Vec<OsString> {
    let mut out = Vec::with_capacity(argv.len());
    let mut skip = false;
    for a in argv {
        let text = a.to_string_lossy();
        if std::mem::take(&mut skip) {
            continue;
        }
        if text == flag {
            skip = true;
        } else if !text.starts_with(&format!("{flag}=")) {
            out.push(a.clone());
        }
    }
    out
}

/// Wait until `GET /health` answers 200.
fn wait_ready(run: &RunDir, base: &str, server: Option<&Server>, limit: Duration) -> Result<Duration, Error> {
    let agent = load::agent(Duration::from_secs(5));
    let started = Instant::now();
    loop {
        crate::signals::check()?;
        if server.is_some_and(Server::exited) {
            return Err(Error::new(
                ErrorKind::StageFailed,
                format!("the server exited before it was ready; its log ends:\n{}", log_tail(run, 15)),
            )
            .with_hint(format!("see {} in the run directory", run_dir::SERVE_LOG)));
        }
        if let Ok((200, _)) = load::get(&agent, &format!("{base}/health")) {
            return Ok(started.elapsed());
        }
        if started.elapsed() >= limit {
            let tail = if server.is_some() { format!("; its log ends:\n{}", log_tail(run, 15)) } else { String::new() };
            return Err(Error::new(
                ErrorKind::StageFailed,
                format!("{base}/health did not answer 200 within {} s{tail}", limit.as_secs()),
            )
            .with_hint("a large model takes longer to load: raise --ready-timeout-s"));
        }
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// The served model's name: the first of `/v1/models`.
fn served_model(base: &str) -> Result<String, Error> {
    let agent = load::agent(Duration::from_secs(10));
    let url = format!("{base}/v1/models");
    let (status, text) =
        load::get(&agent, &url).map_err(|e| Error::new(ErrorKind::StageFailed, format!("GET {url}: {e}")))?;
    let v: serde_json::Value = serde_json::from_str(&text).unwrap_or_default();
    match (status, v["data"][0]["id"].as_str()) {
        (200, Some(id)) => Ok(id.to_string()),
        _ => Err(Error::new(ErrorKind::StageFailed, format!("GET {url}: HTTP {status}, no model in it"))
            .with_hint("name the model: llmperf serve --model NAME")),
    }
}

/// POST `path` (the profiler's start or stop), which must answer 200.
fn post_ok(base: &str, path: &str, timeout: Duration) -> Result<(), Error> {
    let agent = load::agent(timeout);
    let url = format!("{base}{path}");
    match load::post(&agent, &url, &serde_json::json!({})) {
        Ok((200, _)) => Ok(()),
        Ok((status, text)) => Err(Error::new(
            ErrorKind::StageFailed,
            format!("POST {url}: HTTP {status}: {}", text.chars().take(300).collect::<String>()),
        )
        .with_hint(
            "the engine's profiler is not on: start it with --profiler-config (llmperf does when it starts the engine)",
        )),
        Err(e) => Err(Error::new(ErrorKind::StageFailed, format!("POST {url}: {e}"))),
    }
}

/// `serve/requests.json`.
#[derive(Debug, serde::Serialize, schemars::JsonSchema)]
pub(crate) struct Requests {
    pub(crate) schema: String,
    pub(crate) summary: load::Summary,
    /// What the load was: two runs' latencies compare only where it agrees.
    pub(crate) load: load::Shape,
    pub(crate) warmup_requests: usize,
    /// The server's own counters over the load: each `vllm:` counter and
    /// histogram `_count`/`_sum` of `/metrics`, after minus before, summed
    /// over its label sets. Empty where the server has no `/metrics`.
    pub(crate) server_metrics: std::collections::BTreeMap<String, f64>,
    pub(crate) requests: Vec<load::Request>,
}

/// Prometheus text: each `vllm:` series ending `_count`, `_sum` or
/// `_total`, summed over its label sets.
fn counters(text: &str) -> std::collections::BTreeMap<String, f64> {
    let mut out = std::collections::BTreeMap::new();
    for line in text.lines().filter(|l| l.starts_with("vllm:")) {
        let Some((series, value)) = line.rsplit_once(' ') else { continue };
        let name = series.split('{').next().unwrap_or(series);
        if !(name.ends_with("_count") || name.ends_with("_sum") || name.ends_with("_total")) {
            continue;
        }
        if let Ok(v) = value.parse::<f64>() {
            *out.entry(name.to_string()).or_insert(0.0) += v;
        }
    }
    out
}

/// After minus before, per counter.
fn delta(
    before: &std::collections::BTreeMap<String, f64>,
    after: &std::collections::BTreeMap<String, f64>,
) -> std::collections::BTreeMap<String, f64> {
    after.iter().map(|(k, v)| (k.clone(), v - before.get(k).copied().unwrap_or(0.0))).collect()
}

/// The whole `llmperf serve` run into `run`.
pub(crate) fn run(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    verdict: &mut RunStatus,
    req: &Request,
    opts: &super::nsys::IngestOptions,
) -> Result<(), Error> {
    run.subdir("serve")?;
    let trace_dir = run.subdir(run_dir::TORCH_TRACE_DIR)?;
    let (mut server, base) = match &req.url {
        Some(url) => {
            load::check_loopback(url)?;
            (None, url.trim_end_matches('/').to_string())
        }
        None => {
            let (argv, base) = engine_argv(&req.command, &trace_dir, req.capture)?;
            let spec = Spawn::new(argv)
                .stdout(Sink::File(run.join(run_dir::SERVE_STDOUT)))
                .stderr(Sink::File(run.join(run_dir::SERVE_LOG)));
            tracing::info!("starting the engine: {}", spec.display());
            (Some(Server::start(spec)), base)
        }
    };
    let ready = stage::run(manifest, "server_ready", Vec::new(), || {
        let took = wait_ready(run, &base, server.as_ref(), req.ready_timeout)?;
        tracing::info!("{base} ready after {:.1} s", took.as_secs_f64());
        Ok(Done::ok(Vec::new()))
    })?;
    let failed = !matches!(ready, stage::StageOutcome::Ok);
    verdict.add(ready);
    if failed {
        stop(manifest, verdict, server.as_mut())?;
        return Ok(());
    }
    // The served model is asked inside the stage: a server that cannot say
    // fails `load`, and the engine is still stopped and recorded below.
    let outcome = stage::run(manifest, "load", Vec::new(), || {
        let model = match &req.model {
            Some(m) => m.clone(),
            None => served_model(&base)?,
        };
        load_stage(run, req, &base, &load::Spec { base_url: base.clone(), model, ..req.load.clone() })
    })?;
    verdict.add(outcome);
    stop(manifest, verdict, server.as_mut())?;
    if !req.capture || crate::signals::pending() {
        return Ok(());
    }
    if req.url.is_some() {
        stage::skip(
            manifest,
            "torch_regions",
            "the server llmperf did not start writes its trace where its own --profiler-config says",
            "import it: llmperf import torch <the server's torch_profiler_dir>",
        )?;
        return Ok(());
    }
    import_trace(run, manifest, verdict, &trace_dir, opts)
}

/// Stages `torch_regions` and `steps`: the engine's worker trace imported,
/// its steps tabled.
fn import_trace(
    run: &RunDir,
    manifest: &mut ManifestWriter,
    verdict: &mut RunStatus,
    trace_dir: &Path,
    opts: &super::nsys::IngestOptions,
) -> Result<(), Error> {
    let traces = crate::parse::torch::traces_in(vec![trace_dir.to_path_buf()]);
    // vLLM writes a trace per worker (`rank<N>.…`) and one of its API
    // server (`….async_llm.…`, which holds no step): the workers' are read.
    let traces =
        traces.map(|all| all.into_iter().filter(|p| !p.to_string_lossy().contains(".async_llm.")).collect::<Vec<_>>());
    match traces.as_deref() {
        Ok([one]) => {
            let outcome = super::torch::analyze(run, manifest, one, opts)?;
            let ok = matches!(outcome, stage::StageOutcome::Ok);
            verdict.add(outcome);
            if ok {
                verdict.add(stage::run(manifest, "steps", Vec::new(), || {
                    write_steps(run)?;
                    Ok(Done::ok(vec![run_dir::SERVE_STEPS.into(), run_dir::SERVE_SUMMARY.into()]))
                })?);
            }
        }
        Ok(many) if many.len() > 1 => {
            let outcome = stage::run(manifest, "torch_regions", Vec::new(), || {
                Err(Error::new(
                    ErrorKind::StageFailed,
                    format!(
                        "{}: the engine wrote {} worker traces; one is read per run",
                        trace_dir.display(),
                        many.len()
                    ),
                )
                .with_hint(format!("read them as the ranks of one job: llmperf import torch {}", trace_dir.display())))
            })?;
            verdict.add(outcome);
        }
        _ => {
            let outcome = stage::run(manifest, "torch_regions", Vec::new(), || {
                Err(Error::new(
                    ErrorKind::StageFailed,
                    format!("{}: the engine wrote no trace of its workers", trace_dir.display()),
                )
                .with_hint(format!(
                    "the engine's /stop_profile answered, but wrote nothing here: see {} in the run directory",
                    run_dir::SERVE_LOG
                )))
            })?;
            verdict.add(outcome);
        }
    }
    Ok(())
}

/// Stage `load`: the warm-up, `/metrics`, the capture window around the
/// load, `/metrics` again; `serve/requests.json`.
fn load_stage(run: &RunDir, req: &Request, base: &str, spec: &load::Spec) -> Result<Done, Error> {
    if req.warmup > 0 {
        let warm = load::Spec {
            requests: req.warmup,
            seed: spec.seed.wrapping_add(1),
            rate: None,
            duration: None,
            ..spec.clone()
        };
        let done = load::run(&warm);
        if let Some(bad) = done.iter().find(|r| !r.ok()) {
            return Err(Error::new(
                ErrorKind::StageFailed,
                format!("a warm-up request failed: {}", bad.error.as_deref().unwrap_or("")),
            )
            .with_hint(format!("see {} in the run directory", run_dir::SERVE_LOG)));
        }
    }
    crate::signals::check()?;
    let agent = load::agent(Duration::from_secs(10));
    let mut before = None;
    if let Ok((200, text)) = load::get(&agent, &format!("{base}/metrics")) {
        run.write(run_dir::SERVE_METRICS_BEFORE, text.as_bytes())?;
        before = Some(counters(&text));
    }
    if req.capture {
        post_ok(base, "/start_profile", Duration::from_secs(120))?;
    }
    let requests = load::run(spec);
    if req.capture {
        post_ok(base, "/stop_profile", Duration::from_secs(600))?;
    }
    let mut server_metrics = Default::default();
    if let Ok((200, text)) = load::get(&agent, &format!("{base}/metrics")) {
        run.write(run_dir::SERVE_METRICS_AFTER, text.as_bytes())?;
        if let Some(before) = &before {
            server_metrics = delta(before, &counters(&text));
        }
    }
    let summary = load::summary(spec.endpoint, &requests);
    tracing::info!(
        "{} of {} requests completed; TTFT median {:.1} ms, ITL median {:.2} ms",
        summary.completed,
        summary.requests,
        summary.ttft.as_ref().map_or(f64::NAN, |p| p.median_ms),
        summary.itl.as_ref().map_or(f64::NAN, |p| p.median_ms)
    );
    let (failed, sent) = (summary.failed, summary.requests);
    let requests = Requests {
        schema: load::REQUESTS_SCHEMA.into(),
        summary,
        load: spec.shape(),
        warmup_requests: req.warmup,
        server_metrics,
        requests,
    };
    run.write_json(run_dir::SERVE_REQUESTS, &requests)?;
    run.write(run_dir::SERVE_SUMMARY, summary_md(&requests.summary, None).as_bytes())?;
    let error = (failed > 0).then(|| {
        Error::new(ErrorKind::StageFailed, format!("{failed} of {sent} requests failed"))
            .with_hint(format!("see each request's error in {}", run_dir::SERVE_REQUESTS))
    });
    crate::signals::check()?;
    Ok(Done::of(error).artifacts(vec![run_dir::SERVE_REQUESTS.into()]))
}

/// Stage `server`: the engine stopped, and how it ended.
fn stop(manifest: &mut ManifestWriter, verdict: &mut RunStatus, server: Option<&mut Server>) -> Result<(), Error> {
    let Some(server) = server else { return Ok(()) };
    let outcome = stage::run(manifest, "server", Vec::new(), || match server.stop() {
        Some(Ok(done)) => {
            let error = match done.exit {
                crate::process::Exit::Stopped => None,
                crate::process::Exit::Interrupted => Some(crate::signals::interrupted()),
                _ => Some(
                    Error::new(ErrorKind::StageFailed, format!("the engine {}", done.describe()))
                        .with_hint(format!("see {} in the run directory", run_dir::SERVE_LOG)),
                ),
            };
            Ok(Done::of(error)
                .exit(ExitInfo::from(&done))
                .artifacts(vec![run_dir::SERVE_STDOUT.into(), run_dir::SERVE_LOG.into()]))
        }
        Some(Err(e)) => Err(e),
        None => Ok(Done::ok(Vec::new())),
    })?;
    verdict.add(outcome);
    Ok(())
}

/// `serve/steps.json` from the trace's regions, and the summary again with the steps.
fn write_steps(run: &RunDir) -> Result<(), Error> {
    let needed = |rel: &str| {
        Error::new(ErrorKind::Internal, format!("{rel} is missing though the stage that writes it passed"))
            .with_hint("a bug in llmperf: please report it")
    };
    let regions: serde_json::Value =
        run.read_json_checked(run_dir::TORCH_REGIONS)?.ok_or_else(|| needed(run_dir::TORCH_REGIONS))?;
    let samples: serde_json::Value =
        run.read_json_checked(run_dir::TORCH_SAMPLES)?.ok_or_else(|| needed(run_dir::TORCH_SAMPLES))?;
    type Sampled = (Vec<i64>, Vec<i64>);
    let mut by_path: std::collections::HashMap<(&str, i64), Sampled> = std::collections::HashMap::new();
    let ns =
        |v: &serde_json::Value| -> Vec<i64> { v.as_array().into_iter().flatten().filter_map(|v| v.as_i64()).collect() };
    for s in samples["regions"].as_array().into_iter().flatten() {
        let key = (s["path"].as_str().unwrap_or(""), s["thread_id"].as_i64().unwrap_or(0));
        by_path.insert(key, (ns(&s["samples_ns"]), ns(&s["gpu_samples_ns"])));
    }
    let empty = (Vec::new(), Vec::new());
    let rows: Vec<steps::Region<'_>> = regions["regions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|r| r["domain"] == steps::STEP_DOMAIN)
        .map(|r| {
            let sampled = by_path
                .get(&(r["path"].as_str().unwrap_or(""), r["thread_id"].as_i64().unwrap_or(0)))
                .unwrap_or(&empty);
            steps::Region {
                name: r["name"].as_str().unwrap_or(""),
                instances: r["instances"].as_u64().unwrap_or(0),
                inclusive_ns: r["inclusive_ns"].as_i64().unwrap_or(0),
                gpu_time_ns: r["gpu_time_ns"].as_i64().unwrap_or(0),
                kernel_count: r["kernel_count"].as_u64().unwrap_or(0),
                samples_ns: &sampled.0,
                gpu_samples_ns: &sampled.1,
            }
        })
        .collect();
    let steps = steps::steps(&rows);
    for note in &steps.notes {
        tracing::warn!("{}: {}", run_dir::SERVE_STEPS, crate::error::printable(note));
    }
    run.write_json(run_dir::SERVE_STEPS, &steps)?;
    #[derive(serde::Deserialize)]
    struct Head {
        summary: load::Summary,
    }
    let head: Head = run.read_json_checked(run_dir::SERVE_REQUESTS)?.ok_or_else(|| needed(run_dir::SERVE_REQUESTS))?;
    run.write(run_dir::SERVE_SUMMARY, summary_md(&head.summary, Some(&steps)).as_bytes())?;
    Ok(())
}

/// `serve/summary.md`: the load's latencies, and the steps by kind.
fn summary_md(s: &load::Summary, steps: Option<&steps::Steps>) -> String {
    use std::fmt::Write;
    let mut md = String::from("# Serving run\n\n");
    let _ = writeln!(
        md,
        "{} requests to `/v1/{}`: {} completed, {} failed, in {:.2} s ({:.2} requests/s, {:.1} output tokens/s; {} prompt and {} output tokens).\n",
        s.requests,
        match s.endpoint {
            load::Endpoint::Completions => "completions",
            load::Endpoint::Chat => "chat/completions",
        },
        s.completed,
        s.failed,
        s.duration_s,
        s.request_throughput,
        s.output_token_throughput,
        s.total_prompt_tokens,
        s.total_output_tokens
    );
    if !s.errors_by_status.is_empty() {
        let errors: Vec<String> = s.errors_by_status.iter().map(|(k, n)| format!("{n} × HTTP {k}")).collect();
        let _ = writeln!(md, "Failed: {}.\n", errors.join(", "));
    }
    md.push_str(
        "| metric | count | mean ms | median ms | p90 ms | p99 ms | max ms |\n|---|---:|---:|---:|---:|---:|---:|\n",
    );
    for (name, p) in [("TTFT", &s.ttft), ("TPOT", &s.tpot), ("ITL", &s.itl), ("end-to-end", &s.e2e)] {
        match p {
            Some(p) => {
                let _ = writeln!(
                    md,
                    "| {name} | {} | {:.2} | {:.2} | {:.2} | {:.2} | {:.2} |",
                    p.count, p.mean_ms, p.median_ms, p.p90_ms, p.p99_ms, p.max_ms
                );
            }
            None => {
                let _ = writeln!(md, "| {name} | 0 | – | – | – | – | – |");
            }
        }
    }
    if let Some(steps) = steps {
        md.push_str("\n## Engine steps (from the engine's trace)\n\n");
        for note in &steps.notes {
            let _ = writeln!(md, "{}\n", crate::markdown::text(note));
        }
        if !steps.kinds.is_empty() {
            md.push_str("| kind | steps | time ms | mean ms | median ms | p90 ms | requests/step | prompt tokens | decoded tokens | GPU ms | kernels |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n");
            for k in &steps.kinds {
                let d = |f: fn(&load::Percentiles) -> f64| {
                    k.duration.as_ref().map_or("–".into(), |p| format!("{:.2}", f(p)))
                };
                let _ = writeln!(
                    md,
                    "| {:?} | {} | {:.2} | {} | {} | {} | {:.2} | {} | {} | {:.2} | {} |",
                    k.kind,
                    k.steps,
                    k.time_ns as f64 / 1e6,
                    d(|p| p.mean_ms),
                    d(|p| p.median_ms),
                    d(|p| p.p90_ms),
                    k.requests_per_step,
                    k.context_tokens,
                    k.generation_tokens,
                    k.gpu_time_ns as f64 / 1e6,
                    k.kernel_count
                );
            }
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_users_profiler_config_is_kept_with_the_torch_profiler_and_the_runs_folder_set() {
        let dir = Path::new("/run/torch/trace");
        let ours = profiler_config(&argv(&["vllm", "serve", "m"]), dir).unwrap();
        assert_eq!(
            ours,
            serde_json::json!({"profiler": "torch", "torch_profiler_dir": "/run/torch/trace", "torch_profiler_with_stack": false})
        );
        let theirs = argv(&[
            "vllm",
            "serve",
            "m",
            "--profiler-config",
            r#"{"detailed_trace_annotation": true, "torch_profiler_with_stack": true}"#,
        ]);
        let merged = profiler_config(&theirs, dir).unwrap();
        assert_eq!(merged["detailed_trace_annotation"], true);
        assert_eq!(
            (merged["profiler"].as_str(), merged["torch_profiler_with_stack"].as_bool()),
            (Some("torch"), Some(true))
        );
        let (engine, _) = engine_argv(&theirs, dir, true).unwrap();
        let configs: Vec<&OsString> =
            engine.iter().filter(|a| a.to_string_lossy().contains("detailed_trace_annotation")).collect();
        assert_eq!(configs.len(), 1, "{engine:?}");
        assert_eq!(engine.iter().filter(|a| *a == "--profiler-config").count(), 1, "{engine:?}");

        let cuda = argv(&["vllm", "serve", "m", r#"--profiler-config={"profiler": "cuda"}"#]);
        let err = profiler_config(&cuda, dir).unwrap_err();
        assert!(err.message.contains("sets profiler to \"cuda\""), "{}", err.message);
        let other_dir = argv(&["vllm", "--profiler-config", r#"{"torch_profiler_dir": "/elsewhere"}"#]);
        assert!(profiler_config(&other_dir, dir).unwrap_err().message.contains("torch_profiler_dir"));
        let not_json = argv(&["vllm", "--profiler-config", "torch"]);
        assert!(profiler_config(&not_json, dir).unwrap_err().message.contains("not a JSON object"));
        assert_eq!(
            without_flag(&argv(&["a", "--x", "1", "b", "--x=2", "--xy", "3"]), "--x"),
            argv(&["a", "b", "--xy", "3"])
        );
    }
}
