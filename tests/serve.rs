//! `llmperf serve` against the real vLLM on CPU (`.venv-vllm`, installed by
//! `scripts/setup.sh all`) serving a tiny random Llama that the test makes
//! (`scripts/serve/tiny_llama.py`: one token per word). The oracles share no
//! code with llmperf: the engine's own trace read with Python's json, the
//! engine's own `/metrics` counters, and the lengths the test asked for.
//! After every test no process of the engine is left (found by the model's
//! folder, which only this test's engine has on its command line, and by
//! the names vLLM gives its engine processes).
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::*;

/// One engine at a time: each takes both cores while it starts.
static ENGINE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// .venv-vllm's python, or None with the test recorded as skipped.
fn vllm_python(test: &str) -> Option<PathBuf> {
    let py = root().join(".venv-vllm/bin/python");
    if !py.exists() {
        skipped(test, ".venv-vllm not found: scripts/setup.sh vllm installs it");
        return None;
    }
    Some(py)
}

/// A tiny Llama in `dir/model`, `layers` deep.
fn tiny_model(py: &Path, dir: &Path, layers: u32) -> PathBuf {
    let model = dir.join("model");
    let out = std::process::Command::new(py)
        .arg(root().join("scripts/serve/tiny_llama.py"))
        .arg(&model)
        .args(["--layers", &layers.to_string()])
        .output()
        .unwrap();
    assert!(out.status.success(), "tiny_llama.py: {}", String::from_utf8_lossy(&out.stderr));
    model
}

/// The engine's command line for `model`.
fn engine(py: &Path, model: &Path) -> Vec<String> {
    [py.display().to_string(), root().join("scripts/serve/vllm_cpu.py").display().to_string()]
        .into_iter()
        .chain(["serve".into(), model.display().to_string(), "--enforce-eager".into()])
        .chain(["--max-model-len".into(), "512".into()])
        .collect()
}

/// Processes with `needle` on their command line, and vLLM's own
/// (`VLLM::EngineCore`, `VLLM::Worker`: setproctitle names them, without the
/// model's folder; the tests start one engine at a time).
fn processes_naming(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        if entry.file_name().to_string_lossy().parse::<u32>().is_err() {
            continue;
        }
        let Ok(cmd) = std::fs::read(entry.path().join("cmdline")) else { continue };
        let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
        if cmd.contains(needle) || cmd.starts_with("VLLM::") {
            found.push(format!("{}: {cmd}", entry.file_name().to_string_lossy()));
        }
    }
    found
}

/// No process names `needle` (after a few seconds for the last to go).
fn assert_none_left(needle: &str) {
    let start = Instant::now();
    let mut left = processes_naming(needle);
    while !left.is_empty() && start.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(200));
        left = processes_naming(needle);
    }
    assert!(left.is_empty(), "processes of the engine left: {left:?}");
}

/// The step ranges of the engine's worker trace, counted by Python's json.
fn steps_in_trace(trace_dir: &Path) -> serde_json::Value {
    let script = r#"
import gzip, json, pathlib, re, sys
counts = {}
for f in pathlib.Path(sys.argv[1]).glob("rank*.pt.trace.json*"):
    opener = gzip.open if f.suffix == ".gz" else open
    with opener(f, "rt") as fh:
        doc = json.load(fh)
    for e in doc["traceEvents"]:
        if e.get("ph") == "X" and e.get("cat") == "user_annotation" and re.fullmatch(r"execute_context_\d+\(\d+\)_generation_\d+\(\d+\)", e.get("name", "")):
            counts[e["name"]] = counts.get(e["name"], 0) + 1
print(json.dumps(counts))
"#;
    let out = std::process::Command::new("python3").args(["-c", script]).arg(trace_dir).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// (requests, tokens) of `context` or `generation` in a step name.
fn scheduled(name: &str, part: &str) -> (u64, u64) {
    let rest = &name[name.find(&format!("{part}_")).unwrap() + part.len() + 1..];
    let (n, rest) = rest.split_once('(').unwrap();
    let t = rest.split_once(')').unwrap().0;
    (n.parse().unwrap(), t.parse().unwrap())
}

/// `llmperf serve` of `model` into `run`: `requests` requests of `input`
/// prompt tokens and `output` output tokens, 4 at a time; it must succeed and
/// leave no process of the engine.
fn serve(py: &Path, model: &Path, run: &Path, (requests, input, output): (u64, u64, u64)) {
    let out = llmperf()
        .env("VLLM_CPU_KVCACHE_SPACE", "1")
        .args(["serve", "-o"])
        .arg(run)
        .args(["--requests", &requests.to_string(), "--concurrency", "4", "--ignore-eos"])
        .args(["--input-len", &input.to_string(), "--output-len", &output.to_string(), "--"])
        .args(engine(py, model))
        .timeout(Duration::from_secs(600))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert_none_left(&model.display().to_string());
}

/// `llmperf check RUN --baseline BASE` with the shared-CPU serving budgets:
/// its exit status and check.json.
fn check(run: &Path, base: &Path) -> (i32, serde_json::Value) {
    let out = llmperf()
        .arg("check")
        .arg(run)
        .arg("--baseline")
        .arg(base)
        .arg("--budgets")
        .arg(root().join("tests/fixtures/serve/budgets-shared-cpu.yaml"))
        .output()
        .unwrap();
    (out.status.code().unwrap_or(-1), json(&run.join("check/check.json")))
}

/// (source:name, outcome) of every row a check judged.
fn outcomes(check: &serde_json::Value) -> Vec<(String, String)> {
    let rows = check["checks"].as_array().unwrap().iter();
    rows.map(|c| {
        (
            format!("{}:{}", c["row"]["source"].as_str().unwrap(), c["row"]["name"].as_str().unwrap()),
            c["outcome"].as_str().unwrap().to_string(),
        )
    })
    .collect()
}

#[test]
fn a_served_load_has_the_steps_the_engines_trace_holds_and_the_tokens_the_client_asked_for() {
    let Some(py) = vllm_python("serve::a_served_load_has_the_steps") else { return };
    let _one = ENGINE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(&py, dir.path(), 2);
    let run = dir.path().join("run");
    let (requests, input, output) = (16u64, 16u64, 8u64);
    serve(&py, &model, &run, (requests, input, output));

    // The client: every request answered with the lengths asked for.
    let reqs = json(&run.join("serve/requests.json"));
    assert_eq!(reqs["summary"]["completed"], requests);
    for r in reqs["requests"].as_array().unwrap() {
        assert_eq!((r["prompt_tokens"].as_u64(), r["output_tokens"].as_u64()), (Some(input), Some(output)), "{r}");
        assert!(r["ttft_ns"].as_i64().unwrap() > 0 && r["e2e_ns"].as_i64() > r["ttft_ns"].as_i64(), "{r}");
    }

    // The engine's trace, by Python: the same step names and counts as steps.json.
    let in_trace = steps_in_trace(&run.join("torch/trace"));
    let steps = json(&run.join("serve/steps.json"));
    let ours: serde_json::Map<String, serde_json::Value> = steps["names"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["name"].as_str().unwrap().to_string(), n["steps"].clone()))
        .collect();
    assert_eq!(serde_json::Value::Object(ours), in_trace);
    // Every prompt token was prefilled in a captured step, and every output
    // token but each request's first (which the prefill makes) decoded.
    let (mut context, mut generation) = (0, 0);
    for (name, n) in in_trace.as_object().unwrap() {
        context += scheduled(name, "context").1 * n.as_u64().unwrap();
        generation += scheduled(name, "generation").1 * n.as_u64().unwrap();
    }
    assert_eq!((context, generation), (requests * input, requests * (output - 1)));
    assert_eq!(
        (steps["context_tokens"].as_u64(), steps["generation_tokens"].as_u64()),
        (Some(context), Some(generation))
    );
    let decode = steps["kinds"].as_array().unwrap().iter().find(|k| k["kind"] == "decode").expect("decode steps");
    assert!(decode["steps"].as_u64().unwrap() >= output - 1, "{decode}");

    // The engine's /metrics over the load: the same requests, the same
    // token gaps; the client's TTFT is the server's plus the HTTP round
    // trip, never less.
    let m = &reqs["server_metrics"];
    assert_eq!(m["vllm:time_to_first_token_seconds_count"].as_f64(), Some(requests as f64), "{m}");
    let itl_count: usize =
        reqs["requests"].as_array().unwrap().iter().map(|r| r["itl_ns"].as_array().unwrap().len()).sum();
    // The server counts every token after the first; the client the gaps
    // between chunks, one fewer where a chunk carried two tokens (rare).
    let after_first = requests * (output - 1);
    assert_eq!(m["vllm:inter_token_latency_seconds_count"].as_f64(), Some(after_first as f64), "{m}");
    assert!(itl_count as u64 <= after_first && itl_count as u64 >= after_first * 9 / 10, "{itl_count} chunk gaps");
    let client_ttft: f64 =
        reqs["requests"].as_array().unwrap().iter().map(|r| r["ttft_ns"].as_f64().unwrap() / 1e9).sum();
    let server_ttft = m["vllm:time_to_first_token_seconds_sum"].as_f64().unwrap();
    assert!(
        client_ttft >= server_ttft * 0.99 && client_ttft - server_ttft <= 0.25 * requests as f64,
        "client TTFT sum {client_ttft} s against the server's {server_ttft} s"
    );
    // Every JSON artifact, requests.json and steps.json included, matches its schema.
    llmperf().arg("validate").arg(&run).assert().success();
    let summary = std::fs::read_to_string(run.join("serve/summary.md")).unwrap();
    assert!(summary.contains("| Decode |") && summary.contains("| TTFT | 16 |"), "{summary}");

    // A rerun of the same load passes the check; the same load on a model
    // twelve times as deep fails it, on the decode steps (docs/serving.md has
    // the budgets' reason and bench/serve_gate.sh the rates).
    let rerun = dir.path().join("rerun");
    serve(&py, &model, &rerun, (requests, input, output));
    let (code, report) = check(&rerun, &run);
    let judged = outcomes(&report);
    assert_eq!(code, 0, "{report:#}");
    let names: Vec<&str> = judged.iter().map(|(n, _)| n.as_str()).collect();
    for row in ["request:ttft", "request:tpot", "request:itl", "request:e2e", "step:decode"] {
        assert!(names.contains(&row), "{row} not judged: {names:?}");
    }
    assert!(names.iter().all(|n| n.starts_with("request:") || n.starts_with("step:")), "{names:?}");
    let notes = report["notes"].to_string();
    assert!(notes.contains("region and kernel rows of their traces are left out"), "{notes}");

    let deeper = tiny_model(&py, &dir.path().join("deeper"), 64);
    let slow = dir.path().join("slow");
    serve(&py, &deeper, &slow, (requests, input, output));
    let (code, report) = check(&slow, &run);
    let failing: Vec<String> = report["checks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["fails"] == true)
        .map(|c| format!("{}:{}", c["row"]["source"].as_str().unwrap(), c["row"]["name"].as_str().unwrap()))
        .collect();
    assert_eq!(code, 8, "{report:#}");
    assert!(failing.contains(&"step:decode".to_string()), "{failing:?}");
    let decode = report["checks"].as_array().unwrap().iter().find(|c| c["row"]["name"] == "decode").unwrap();
    assert_eq!(decode["outcome"], "regression", "{decode:#}");
    assert!(report["notes"].to_string().contains(&format!("B served {}", deeper.display())), "{report:#}");
}

#[test]
fn an_engine_that_cannot_start_is_told_with_its_log_and_leaves_nothing() {
    let Some(py) = vllm_python("serve::an_engine_that_cannot_start") else { return };
    let _one = ENGINE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-model");
    let out = llmperf()
        .args(["serve", "-o"])
        .arg(dir.path().join("run"))
        .args(["--requests", "1", "--"])
        .args(engine(&py, &missing))
        .timeout(Duration::from_secs(300))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("the server exited before it was ready; its log ends:"), "{err}");
    assert!(err.contains("no-such-model"), "the log's tail names the model: {err}");
    assert!(err.contains("hint: see serve/server.stderr.log"), "{err}");
    assert_none_left(&missing.display().to_string());
}

#[test]
fn ctrl_c_while_the_engine_starts_stops_it_and_all_it_started() {
    let Some(py) = vllm_python("serve::ctrl_c_while_the_engine_starts") else { return };
    let _one = ENGINE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(&py, dir.path(), 2);
    let needle = model.display().to_string();
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("llmperf"))
        .env("VLLM_CPU_KVCACHE_SPACE", "1")
        .args(["serve", "-o"])
        .arg(dir.path().join("run"))
        .arg("--")
        .args(engine(&py, &model))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Until the engine has started processes of its own (its API server
    // starts the engine core), or 60 s.
    let start = Instant::now();
    while processes_naming(&needle).len() < 2 && start.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(2));
    // SAFETY: kill(2) on our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    let mut err = String::new();
    std::io::Read::read_to_string(child.stderr.as_mut().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert_none_left(&needle);
}

/// A server that is healthy but cannot say what it serves (`/v1/models`
/// answers 404): the `load` stage fails with the URL, and the engine is still
/// stopped and its stage recorded. The engine is a few lines of Python's
/// http.server on the port llmperf gives it (no vLLM needed).
#[test]
fn a_server_that_names_no_model_fails_the_load_and_is_still_stopped_and_recorded() {
    // No vLLM here, but `assert_none_left` counts every `VLLM::` process:
    // another test's engine must not be running meanwhile.
    let _one = ENGINE.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("no_models_engine.py");
    std::fs::write(
        &script,
        r#"import http.server, sys
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200 if self.path == "/health" else 404)
        self.end_headers()
    def log_message(self, *a):
        pass
http.server.HTTPServer(("127.0.0.1", port), H).serve_forever()
"#,
    )
    .unwrap();
    let run = dir.path().join("run");
    let out = llmperf()
        .args(["serve", "-o"])
        .arg(&run)
        .args(["--requests", "1", "--warmup", "0", "--", "python3"])
        .arg(&script)
        .timeout(Duration::from_secs(120))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{err}");
    assert!(err.contains("/v1/models: HTTP 404, no model in it"), "{err}");
    assert!(err.contains("hint: name the model: llmperf serve --model NAME"), "{err}");
    let manifest = json(&run.join("manifest.json"));
    assert_eq!(stage(&manifest, "load")["status"], "failed", "{manifest:#}");
    assert_eq!(stage(&manifest, "server")["status"], "ok", "{manifest:#}");
    assert_none_left(&script.display().to_string());
}
