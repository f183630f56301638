//! load: the load generator of `llmperf serve`. OpenAI-compatible
//! completions or chat requests, streamed (server-sent events), to a server
//! on the loopback address only; a request count, a concurrency limit and an
//! optional Poisson arrival rate; prompts made of words (each one token to
//! the tokenizer of `scripts/serve/tiny_llama.py`) or read from a JSONL
//! file; a seed. Per request it records what vLLM's `bench serve` and
//! NVIDIA's AIPerf record, defined as they define them (docs/serving.md):
//! time to first token, the gaps between streamed chunks (inter-token
//! latency), time per output token after the first, end-to-end latency, and
//! the token counts the server's `usage` reports.
use std::io::BufRead;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// Which OpenAI-compatible endpoint the requests go to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Endpoint {
    /// `/v1/completions`, the prompt as text.
    Completions,
    /// `/v1/chat/completions`, the prompt as one user message.
    Chat,
}

/// What to send, and how fast.
#[derive(Debug, Clone)]
pub(crate) struct Spec {
    /// `http://127.0.0.1:PORT` (a loopback address: [`check_loopback`]).
    pub(crate) base_url: String,
    pub(crate) endpoint: Endpoint,
    /// The served model's name (`model` of each request).
    pub(crate) model: String,
    pub(crate) requests: usize,
    /// Send no request after this much time from the start (the ones in
    /// flight finish); `requests` is then the most sent.
    pub(crate) duration: Option<Duration>,
    /// Requests in flight at most.
    pub(crate) concurrency: usize,
    /// Requests per second, arriving as a Poisson process; None: each
    /// request as soon as a slot is free.
    pub(crate) rate: Option<f64>,
    /// Prompt words and output tokens, each drawn uniformly from [lo, hi].
    pub(crate) input_len: (usize, usize),
    pub(crate) output_len: (usize, usize),
    /// Prompts to send instead of made-up ones, in turn.
    pub(crate) prompts: Vec<String>,
    pub(crate) seed: u64,
    pub(crate) ignore_eos: bool,
    /// The longest one request may take.
    pub(crate) timeout: Duration,
}

/// `serve/requests.json`'s schema: written by `llmperf serve`, checked by `diff` and `check`.
pub(crate) const REQUESTS_SCHEMA: &str = "llmperf.serve-requests/v1";

/// What a load was, as `serve/requests.json` records it: what two runs'
/// latencies depend on besides the server. `llmperf diff` and `check`
/// compare the latencies of two runs only where these agree ([`Shape::differences`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Shape {
    pub(crate) endpoint: Endpoint,
    /// The served model's name: recorded, not compared (a new model is what
    /// a comparison is often for).
    pub(crate) model: String,
    /// Requests sent at most (None: no limit but the duration), and the
    /// load's time limit (s).
    pub(crate) requests: Option<usize>,
    pub(crate) duration_s: Option<f64>,
    pub(crate) concurrency: usize,
    /// Requests per second (Poisson arrivals); None: as fast as slots free.
    pub(crate) rate: Option<f64>,
    pub(crate) input_len: (usize, usize),
    pub(crate) output_len: (usize, usize),
    /// How many prompts a JSONL gave (0: made-up ones), and an FNV-1a hash of
    /// their text: another prompt file, another load.
    pub(crate) prompts: usize,
    pub(crate) prompts_fnv1a: Option<String>,
    pub(crate) seed: u64,
    pub(crate) ignore_eos: bool,
}

impl Shape {
    /// The settings that make two loads different loads, where they differ:
    /// `concurrency 4 → 8`. The model, the seed and the number of requests
    /// are left out: each request's latency does not depend on them.
    pub(crate) fn differences(&self, b: &Shape) -> Vec<String> {
        let mut out = Vec::new();
        let mut differ = |name: &str, x: String, y: String| {
            if x != y {
                out.push(format!("{name} {x} → {y}"));
            }
        };
        let range = |r: (usize, usize)| if r.0 == r.1 { r.0.to_string() } else { format!("{}..{}", r.0, r.1) };
        let rate = |r: Option<f64>| r.map_or("unlimited".into(), |r| format!("{r}/s"));
        differ("endpoint", format!("{:?}", self.endpoint).to_lowercase(), format!("{:?}", b.endpoint).to_lowercase());
        differ("concurrency", self.concurrency.to_string(), b.concurrency.to_string());
        differ("rate", rate(self.rate), rate(b.rate));
        differ("input length", range(self.input_len), range(b.input_len));
        differ("output length", range(self.output_len), range(b.output_len));
        differ("prompts", prompts(self), prompts(b));
        differ("ignore_eos", self.ignore_eos.to_string(), b.ignore_eos.to_string());
        out
    }
}

fn prompts(s: &Shape) -> String {
    match &s.prompts_fnv1a {
        Some(h) => format!("{} from a file (FNV-1a {h})", s.prompts),
        None => "made up".into(),
    }
}

impl Spec {
    pub(crate) fn shape(&self) -> Shape {
        let fnv = (!self.prompts.is_empty()).then(|| {
            let mut h: u64 = 0xcbf2_9ce4_8422_2325;
            for byte in self.prompts.iter().flat_map(|p| p.bytes().chain([0])) {
                h = (h ^ u64::from(byte)).wrapping_mul(0x0100_0000_01b3);
            }
            format!("{h:016x}")
        });
        Shape {
            endpoint: self.endpoint,
            model: self.model.clone(),
            requests: (self.requests != usize::MAX).then_some(self.requests),
            duration_s: self.duration.map(|d| d.as_secs_f64()),
            concurrency: self.concurrency,
            rate: self.rate,
            input_len: self.input_len,
            output_len: self.output_len,
            prompts: self.prompts.len(),
            prompts_fnv1a: fnv,
            seed: self.seed,
            ignore_eos: self.ignore_eos,
        }
    }
}

/// One request, as the client saw it. Times in ns; `start_ns` from the
/// start of the load.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub(crate) struct Request {
    pub(crate) id: usize,
    pub(crate) start_ns: i64,
    /// The HTTP status (None: no response: refused, reset, timed out).
    pub(crate) status: Option<u16>,
    /// Why it failed (a status other than 200, a broken stream, no token).
    pub(crate) error: Option<String>,
    /// First chunk with text, from the send.
    pub(crate) ttft_ns: Option<i64>,
    /// Send to the last byte.
    pub(crate) e2e_ns: i64,
    /// Gaps between consecutive chunks with text.
    pub(crate) itl_ns: Vec<i64>,
    /// (e2e − ttft) / (output tokens − 1), where more than one token came.
    pub(crate) tpot_ns: Option<i64>,
    /// The server's `usage` counts (None where the stream did not end with them).
    pub(crate) prompt_tokens: Option<u64>,
    pub(crate) output_tokens: Option<u64>,
    /// Output tokens asked for.
    pub(crate) max_tokens: usize,
}

impl Request {
    pub(crate) fn ok(&self) -> bool {
        self.error.is_none()
    }
}

/// A small seeded generator (SplitMix64): the same seed, the same prompts,
/// lengths and arrival times.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in [lo, hi].
    fn between(&mut self, (lo, hi): (usize, usize)) -> usize {
        lo + (self.next() % (hi.saturating_sub(lo) as u64 + 1)) as usize
    }

    /// Uniform in (0, 1].
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) + 1) as f64 / (1u64 << 53) as f64
    }
}

/// Words of made-up prompts.
const WORDS: &[&str] = &[
    "the", "of", "and", "to", "in", "is", "was", "for", "on", "that", "with", "as", "by", "at", "from", "model",
    "token", "layer", "head", "cache", "step", "batch", "prefill", "decode", "kernel", "stream", "device", "memory",
    "request", "server", "engine", "time", "world", "people", "city", "state", "year", "school", "number", "part",
];

/// What each request sends: its prompt and its output length.
struct Planned {
    prompt: String,
    max_tokens: usize,
    /// When it may be sent, from the start of the load.
    at: Duration,
}

/// The requests of a load, made one at a time as the workers ask (a long
/// `--duration` load is not planned ahead): the same seed, the same sequence.
struct Planner<'a> {
    spec: &'a Spec,
    rng: Rng,
    at: Duration,
    made: usize,
}

impl<'a> Planner<'a> {
    fn new(spec: &'a Spec) -> Self {
        Planner { spec, rng: Rng(spec.seed), at: Duration::ZERO, made: 0 }
    }

    /// The next request and its index; None once `requests` are made.
    fn next(&mut self) -> Option<(usize, Planned)> {
        let (spec, rng, i) = (self.spec, &mut self.rng, self.made);
        if i >= spec.requests {
            return None;
        }
        let prompt = if spec.prompts.is_empty() {
            let n = rng.between(spec.input_len).max(1);
            (0..n).map(|_| WORDS[rng.next() as usize % WORDS.len()]).collect::<Vec<_>>().join(" ")
        } else {
            spec.prompts[i % spec.prompts.len()].clone()
        };
        let max_tokens = rng.between(spec.output_len).max(1);
        if let Some(rate) = spec.rate {
            // Exponential gaps: a Poisson process of `rate` per second.
            self.at += Duration::from_secs_f64(-rng.unit().ln() / rate);
        }
        self.made += 1;
        Some((i, Planned { prompt, max_tokens, at: self.at }))
    }
}

#[cfg(test)]
fn plan(spec: &Spec) -> Vec<Planned> {
    let mut p = Planner::new(spec);
    std::iter::from_fn(|| p.next().map(|(_, planned)| planned)).collect()
}

/// Refuse a URL whose host is not a loopback address: the load goes to a
/// server on this machine only.
pub(crate) fn check_loopback(url: &str) -> Result<(), Error> {
    let rest = url.strip_prefix("http://").ok_or_else(|| {
        Error::usage(format!("{url}: not an http:// URL"))
            .with_hint("give the server's loopback address, e.g. http://127.0.0.1:8000")
    })?;
    let authority = rest.split('/').next().unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if !loopback {
        return Err(Error::usage(format!("{url}: {host} is not a loopback address"))
            .with_hint("llmperf sends load only to a server on this machine: 127.0.0.1, ::1 or localhost"));
    }
    Ok(())
}

pub(crate) fn agent(timeout: Duration) -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .timeout_global(Some(timeout))
        .timeout_connect(Some(Duration::from_secs(5)))
        .build()
        .into()
}

/// Send the requests; every one is recorded, failed or not. Stops early
/// (what was sent is kept) when llmperf is interrupted.
pub(crate) fn run(spec: &Spec) -> Vec<Request> {
    let planner = Mutex::new(Planner::new(spec));
    let done = Mutex::new(Vec::new());
    let agent = agent(spec.timeout);
    let start = Instant::now();
    let over = |t: Duration| spec.duration.is_some_and(|d| t >= d);
    std::thread::scope(|s| {
        for _ in 0..spec.concurrency.clamp(1, spec.requests.max(1)) {
            s.spawn(|| loop {
                if over(start.elapsed()) {
                    break;
                }
                let Some((i, p)) = planner.lock().expect("no worker panics holding it").next() else { break };
                if over(p.at) {
                    break;
                }
                let wait = p.at.saturating_sub(start.elapsed());
                if !wait.is_zero() && sleep_unless_interrupted(wait) {
                    break;
                }
                if crate::signals::pending() {
                    break;
                }
                let r = one(&agent, spec, i, &p, start);
                done.lock().expect("no worker panics holding it").push(r);
            });
        }
    });
    let mut done = done.into_inner().expect("no worker panics holding it");
    done.sort_by_key(|r| r.id);
    done
}

/// Sleep `d`, waking early on a signal: true when llmperf was interrupted.
fn sleep_unless_interrupted(d: Duration) -> bool {
    let until = Instant::now() + d;
    while let Some(left) = until.checked_duration_since(Instant::now()).filter(|l| !l.is_zero()) {
        if crate::signals::pending() {
            return true;
        }
        std::thread::sleep(left.min(Duration::from_millis(50)));
    }
    crate::signals::pending()
}

/// The body of request `p`.
fn body(spec: &Spec, p: &Planned) -> serde_json::Value {
    let mut body = serde_json::json!({
        "model": spec.model,
        "max_tokens": p.max_tokens,
        "stream": true,
        "stream_options": {"include_usage": true},
        "temperature": 0.0,
    });
    if spec.ignore_eos {
        body["ignore_eos"] = true.into();
    }
    match spec.endpoint {
        Endpoint::Completions => body["prompt"] = p.prompt.clone().into(),
        Endpoint::Chat => body["messages"] = serde_json::json!([{"role": "user", "content": p.prompt}]),
    }
    body
}

fn url(spec: &Spec) -> String {
    let path = match spec.endpoint {
        Endpoint::Completions => "/v1/completions",
        Endpoint::Chat => "/v1/chat/completions",
    };
    format!("{}{path}", spec.base_url.trim_end_matches('/'))
}

/// One streamed request.
fn one(agent: &ureq::Agent, spec: &Spec, id: usize, p: &Planned, load_start: Instant) -> Request {
    let sent = Instant::now();
    let mut r = Request {
        id,
        start_ns: ns(sent - load_start),
        status: None,
        error: None,
        ttft_ns: None,
        e2e_ns: 0,
        itl_ns: Vec::new(),
        tpot_ns: None,
        prompt_tokens: None,
        output_tokens: None,
        max_tokens: p.max_tokens,
    };
    let response = agent.post(url(spec)).header("content-type", "application/json").send(body(spec, p).to_string());
    let response = match response {
        Ok(resp) => resp,
        Err(e) => {
            r.error = Some(format!("no response: {e}"));
            r.e2e_ns = ns(sent.elapsed());
            return r;
        }
    };
    let status = response.status().as_u16();
    r.status = Some(status);
    let mut reader = std::io::BufReader::new(response.into_body().into_reader());
    if status != 200 {
        let mut text = String::new();
        let _ = std::io::Read::read_to_string(&mut reader, &mut text);
        r.error = Some(format!("HTTP {status}: {}", text.trim().chars().take(300).collect::<String>()));
        r.e2e_ns = ns(sent.elapsed());
        return r;
    }
    let mut last: Option<Instant> = None;
    let mut chunks = 0u64;
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e) => {
                r.error = Some(format!("the stream broke: {e}"));
                break;
            }
        }
        let Some(data) = line.trim_end().strip_prefix("data:") else { continue };
        let data = data.trim();
        if data == "[DONE]" {
            break;
        }
        let Ok(event) = serde_json::from_str::<serde_json::Value>(data) else {
            r.error = Some(format!("an event that is not JSON: {}", data.chars().take(120).collect::<String>()));
            break;
        };
        if let Some(usage) = event.get("usage").filter(|u| u.is_object()) {
            r.prompt_tokens = usage["prompt_tokens"].as_u64();
            r.output_tokens = usage["completion_tokens"].as_u64();
        }
        let choice = &event["choices"][0];
        let text = choice["text"].as_str().or_else(|| choice["delta"]["content"].as_str()).unwrap_or("");
        if text.is_empty() {
            continue;
        }
        let now = Instant::now();
        match last {
            None => r.ttft_ns = Some(ns(now - sent)),
            Some(prev) => r.itl_ns.push(ns(now - prev)),
        }
        last = Some(now);
        chunks += 1;
    }
    r.e2e_ns = ns(sent.elapsed());
    if r.error.is_none() && r.ttft_ns.is_none() {
        r.error = Some("the stream ended without a token".into());
    }
    let output = r.output_tokens.unwrap_or(chunks);
    if let (Some(ttft), true) = (r.ttft_ns, output > 1) {
        r.tpot_ns = Some((r.e2e_ns - ttft) / (output as i64 - 1));
    }
    r
}

fn ns(d: Duration) -> i64 {
    i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)
}

/// Mean, median and tail of one metric over the requests, in ms.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema, PartialEq)]
pub(crate) struct Percentiles {
    pub(crate) count: usize,
    pub(crate) mean_ms: f64,
    pub(crate) median_ms: f64,
    pub(crate) p90_ms: f64,
    pub(crate) p99_ms: f64,
    pub(crate) max_ms: f64,
}

/// Percentiles as numpy's default (linear between the closest ranks), as
/// vLLM's `bench serve` computes them. None for no values.
pub(crate) fn percentiles(values_ns: &[i64]) -> Option<Percentiles> {
    if values_ns.is_empty() {
        return None;
    }
    let mut v: Vec<f64> = values_ns.iter().map(|&x| x as f64 / 1e6).collect();
    v.sort_by(f64::total_cmp);
    let at = |q: f64| {
        let pos = q * (v.len() - 1) as f64;
        let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
        v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
    };
    Some(Percentiles {
        count: v.len(),
        mean_ms: v.iter().sum::<f64>() / v.len() as f64,
        median_ms: at(0.5),
        p90_ms: at(0.9),
        p99_ms: at(0.99),
        max_ms: v[v.len() - 1],
    })
}

/// `serve/requests.json`'s summary of a load.
#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Summary {
    pub(crate) endpoint: Endpoint,
    pub(crate) requests: usize,
    pub(crate) completed: usize,
    pub(crate) failed: usize,
    /// Failed requests by HTTP status (`none`: no response).
    pub(crate) errors_by_status: std::collections::BTreeMap<String, usize>,
    /// First send to last byte, s.
    pub(crate) duration_s: f64,
    pub(crate) request_throughput: f64,
    pub(crate) output_token_throughput: f64,
    pub(crate) total_prompt_tokens: u64,
    pub(crate) total_output_tokens: u64,
    pub(crate) ttft: Option<Percentiles>,
    pub(crate) tpot: Option<Percentiles>,
    pub(crate) itl: Option<Percentiles>,
    pub(crate) e2e: Option<Percentiles>,
}

pub(crate) fn summary(endpoint: Endpoint, requests: &[Request]) -> Summary {
    let ok: Vec<&Request> = requests.iter().filter(|r| r.ok()).collect();
    let first = requests.iter().map(|r| r.start_ns).min().unwrap_or(0);
    let last = requests.iter().map(|r| r.start_ns + r.e2e_ns).max().unwrap_or(0);
    let duration_s = (last - first) as f64 / 1e9;
    let per_s = |n: f64| if duration_s > 0.0 { n / duration_s } else { 0.0 };
    let total_output: u64 = ok.iter().filter_map(|r| r.output_tokens).sum();
    let mut errors_by_status = std::collections::BTreeMap::new();
    for r in requests.iter().filter(|r| !r.ok()) {
        *errors_by_status.entry(r.status.map_or("none".to_string(), |s| s.to_string())).or_insert(0) += 1;
    }
    let of = |f: &dyn Fn(&Request) -> Option<i64>| percentiles(&ok.iter().filter_map(|r| f(r)).collect::<Vec<_>>());
    Summary {
        endpoint,
        requests: requests.len(),
        completed: ok.len(),
        failed: requests.len() - ok.len(),
        errors_by_status,
        duration_s,
        request_throughput: per_s(ok.len() as f64),
        output_token_throughput: per_s(total_output as f64),
        total_prompt_tokens: ok.iter().filter_map(|r| r.prompt_tokens).sum(),
        total_output_tokens: total_output,
        ttft: of(&|r| r.ttft_ns),
        tpot: of(&|r| r.tpot_ns),
        itl: percentiles(&ok.iter().flat_map(|r| r.itl_ns.iter().copied()).collect::<Vec<_>>()),
        e2e: of(&|r| Some(r.e2e_ns)),
    }
}

/// Prompts from a JSONL file: each line an object with `prompt` (or `text`)
/// as a string.
pub(crate) fn read_prompts(path: &std::path::Path) -> Result<Vec<String>, Error> {
    let text = std::fs::read_to_string(path).map_err(|e| crate::run_dir::io_error(path, "read", &e))?;
    let mut prompts = Vec::new();
    for (i, line) in text.lines().enumerate().filter(|(_, l)| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).map_err(|e| {
            Error::usage(format!("{}:{}: not JSON: {e}", path.display(), i + 1))
                .with_hint("one JSON object per line, e.g. {\"prompt\": \"Tell me about GPUs\"}")
        })?;
        let prompt =
            v.get("prompt").or_else(|| v.get("text")).and_then(serde_json::Value::as_str).ok_or_else(|| {
                Error::usage(format!("{}:{}: no \"prompt\" string", path.display(), i + 1))
                    .with_hint("one JSON object per line, e.g. {\"prompt\": \"Tell me about GPUs\"}")
            })?;
        prompts.push(prompt.to_string());
    }
    if prompts.is_empty() {
        return Err(Error::usage(format!("{}: no prompts in it", path.display()))
            .with_hint("one JSON object per line, e.g. {\"prompt\": \"Tell me about GPUs\"}"));
    }
    Ok(prompts)
}

/// GET `url`: the status and the body as text.
pub(crate) fn get(agent: &ureq::Agent, url: &str) -> Result<(u16, String), String> {
    let resp = agent.get(url).call().map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let text = resp.into_body().read_to_string().map_err(|e| e.to_string())?;
    Ok((status, text))
}

/// POST `url` with a JSON body: the status and the body as text.
pub(crate) fn post(agent: &ureq::Agent, url: &str, body: &serde_json::Value) -> Result<(u16, String), String> {
    let resp =
        agent.post(url).header("content-type", "application/json").send(body.to_string()).map_err(|e| e.to_string())?;
    let status = resp.status().as_u16();
    let text = resp.into_body().read_to_string().map_err(|e| e.to_string())?;
    Ok((status, text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_loopback_urls_are_taken() {
        for ok in ["http://127.0.0.1:8000", "http://localhost:1/", "http://[::1]:9000/v1", "http://127.3.4.5"] {
            assert!(check_loopback(ok).is_ok(), "{ok}");
        }
        for bad in ["http://10.0.0.1:8000", "https://127.0.0.1:1", "http://example.com", "127.0.0.1:8000"] {
            assert!(check_loopback(bad).is_err(), "{bad}");
        }
    }

    /// numpy.percentile([1, 2, 3, 4], [50, 90, 99]) = 2.5, 3.7, 3.97.
    #[test]
    fn percentiles_interpolate_as_numpy_does() {
        let p = percentiles(&[4_000_000, 1_000_000, 3_000_000, 2_000_000]).unwrap();
        assert_eq!((p.count, p.mean_ms, p.median_ms, p.max_ms), (4, 2.5, 2.5, 4.0));
        assert!((p.p90_ms - 3.7).abs() < 1e-9 && (p.p99_ms - 3.97).abs() < 1e-9, "{p:?}");
        assert_eq!(percentiles(&[]), None);
    }

    /// The same seed plans the same prompts, lengths and arrivals; the
    /// lengths stay in their ranges, the prompt has that many words; a rate
    /// of 10/s over 2,000 requests arrives in about 200 s.
    #[test]
    fn a_seed_plans_the_same_load_and_lengths_stay_in_range() {
        let spec = Spec {
            base_url: "http://127.0.0.1:1".into(),
            endpoint: Endpoint::Completions,
            model: "m".into(),
            requests: 2000,
            duration: None,
            concurrency: 4,
            rate: Some(10.0),
            input_len: (3, 9),
            output_len: (2, 5),
            prompts: Vec::new(),
            seed: 42,
            ignore_eos: true,
            timeout: Duration::from_secs(1),
        };
        let (a, b) = (plan(&spec), plan(&spec));
        assert!(a.iter().zip(&b).all(|(x, y)| x.prompt == y.prompt && x.max_tokens == y.max_tokens && x.at == y.at));
        assert!(a.iter().all(|p| (3..=9).contains(&p.prompt.split(' ').count()) && (2..=5).contains(&p.max_tokens)));
        let span = a.last().unwrap().at.as_secs_f64();
        assert!((180.0..220.0).contains(&span), "{span}");
        let other = plan(&Spec { seed: 43, ..spec });
        assert!(a.iter().zip(&other).any(|(x, y)| x.prompt != y.prompt));
    }

    /// A 1.5 s load to a port nothing listens on: requests are sent (each
    /// refused at once, recorded with why) until the time is up, then no
    /// more, far below the count allowed.
    #[test]
    fn a_duration_ends_the_load_however_many_requests_are_allowed() {
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let spec = Spec {
            base_url: format!("http://127.0.0.1:{port}"),
            endpoint: Endpoint::Completions,
            model: "m".into(),
            requests: 1_000_000,
            duration: Some(Duration::from_millis(1500)),
            concurrency: 2,
            rate: Some(20.0),
            input_len: (1, 1),
            output_len: (1, 1),
            prompts: Vec::new(),
            seed: 1,
            ignore_eos: false,
            timeout: Duration::from_secs(2),
        };
        let started = Instant::now();
        let done = run(&spec);
        let took = started.elapsed();
        assert!(took >= Duration::from_millis(1400) && took < Duration::from_secs(5), "{took:?}");
        // 20/s for 1.5 s: about 30 arrivals; none after the end.
        assert!((10..=60).contains(&done.len()), "{} requests", done.len());
        assert!(done
            .iter()
            .all(|r| r.status.is_none() && r.error.as_deref().is_some_and(|e| e.starts_with("no response"))));
        assert!(done.iter().all(|r| r.start_ns < 1_500_000_000 + 50_000_000), "a request after the end");
        let summary = summary(Endpoint::Completions, &done);
        assert_eq!((summary.failed, summary.errors_by_status.get("none").copied()), (done.len(), Some(done.len())));
    }
}
