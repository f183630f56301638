//! `llmperf import torch`: PyTorch profiler (Kineto) traces into the region model.
//!
//! The oracle is the corpus's own `real/kineto/expect.py` (Python's standard
//! library only, numbers read as `Decimal`): it shares no code with
//! llmperf. Every trace in `real/kineto/*/` is checked, so a trace dropped
//! there is checked without a new test.
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::*;

/// What expect.py --all printed of one trace.
#[derive(Default, Debug)]
struct Expected {
    /// (device, stream) → (kernels, ns).
    streams: BTreeMap<(i64, i64), (u64, i64)>,
    /// launch call → (kernels, ns).
    launch: BTreeMap<String, (u64, i64)>,
    without_launch: (u64, i64),
    /// Top-level cpu_op name → (instances, kernels, ns).
    top_ops: BTreeMap<String, (u64, u64, i64)>,
    outside_ops: (u64, i64),
    /// user_annotation name → (count, ns).
    annotations: BTreeMap<String, (u64, i64)>,
    /// Graph launch calls with kernels.
    graph_launches: u64,
    kernels: u64,
}

/// µs as expect.py prints them (`9626`, `606519.0`, `468153.602`) in ns, exactly.
fn ns(us: &str) -> i64 {
    let (int, frac) = us.split_once('.').unwrap_or((us, ""));
    assert!(frac.len() <= 3, "{us}: finer than a ns");
    let frac = format!("{frac:0<3}");
    int.parse::<i64>().unwrap() * 1000 + frac.parse::<i64>().unwrap()
}

fn expected(kineto: &Path, trace: &Path) -> Expected {
    let out = std::process::Command::new("python3")
        .current_dir(kineto)
        .arg("expect.py")
        .arg(trace)
        .arg("--all")
        .output()
        .unwrap();
    assert!(out.status.success(), "expect.py {}: {}", trace.display(), String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8(out.stdout).unwrap();
    let mut e = Expected::default();
    let mut section = "";
    let pair = |s: &str| -> (u64, i64) {
        // "N kernels, T us" or "N, T us"
        let (n, t) = s.split_once(", ").unwrap();
        (n.trim_end_matches(" kernels").parse().unwrap(), ns(t.trim_end_matches(" us")))
    };
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("kernels: ") {
            e.kernels = rest.split(',').next().unwrap().parse().unwrap();
            section = "";
        } else if let Some(rest) = line.strip_prefix("  pid ") {
            if section.is_empty() {
                let (head, counts) = rest.split_once(": ").unwrap();
                let (pid, stream) = head.split_once(" stream ").unwrap();
                e.streams.insert((pid.parse().unwrap(), stream.parse().unwrap()), pair(counts));
            }
        } else if let Some(rest) = line.strip_prefix("launch API ") {
            let (api, counts) = rest.split_once(": ").unwrap();
            e.launch.insert(api.to_string(), pair(counts));
        } else if let Some(rest) = line.strip_prefix("kernels with no launch event: ") {
            e.without_launch = pair(rest);
        } else if let Some(rest) = line.strip_prefix("graph launches: ") {
            let with = rest.split(", ").nth(1).unwrap();
            e.graph_launches = with.split(' ').next().unwrap().parse().unwrap();
        } else if line.starts_with("top-level cpu_op:") {
            section = "ops";
            let outside = line.split("kernels launched outside any cpu_op: ").nth(1).unwrap();
            e.outside_ops = pair(outside);
        } else if line.starts_with("user_annotation:") {
            section = "annotations";
        } else if line.starts_with("gpu_user_annotation:") || !line.starts_with("  ") {
            section = "";
        } else if section == "ops" || section == "annotations" {
            let cells: Vec<&str> = line.trim_start().rsplitn(4, " | ").collect();
            if section == "ops" {
                let [dur, kernels, instances, name] = cells[..] else { panic!("{line}") };
                e.top_ops.insert(name.to_string(), (instances.parse().unwrap(), kernels.parse().unwrap(), ns(dur)));
            } else {
                let [dur, count, name] = cells[..3] else { panic!("{line}") };
                let name = if cells.len() == 4 { format!("{} | {name}", cells[3]) } else { name.to_string() };
                e.annotations.insert(name, (count.parse().unwrap(), ns(dur)));
            }
        }
    }
    e
}

/// What llmperf wrote, in expect.py's terms.
fn measured(run: &Path) -> Expected {
    let capture = json(&run.join("torch/capture.json"));
    let regions = json(&run.join("torch/regions.json"));
    let mut m = Expected::default();
    let count = |c: &serde_json::Value| (c["count"].as_u64().unwrap(), c["time_ns"].as_i64().unwrap());
    for s in capture["streams"].as_array().unwrap() {
        let (n, t) = count(&s["kernels"]);
        if n > 0 {
            m.streams.insert((s["device"].as_i64().unwrap(), s["stream"].as_i64().unwrap()), (n, t));
        }
        m.kernels += n;
    }
    for l in capture["launch_calls"].as_array().unwrap() {
        m.launch.insert(l["call"].as_str().unwrap().to_string(), count(&l["kernels"]));
    }
    m.without_launch = count(&capture["kernels_without_launch"]);
    m.graph_launches = capture["graph_launches"].as_u64().unwrap();
    let rows = regions["regions"].as_array().unwrap();
    let by_path: BTreeMap<&str, &serde_json::Value> = rows.iter().map(|r| (r["path"].as_str().unwrap(), r)).collect();
    let under_op = |r: &serde_json::Value| {
        let mut parent = r["parent"].as_str();
        while let Some(p) = parent {
            let row = by_path[p];
            if row["domain"] == "cpu_op" {
                return true;
            }
            parent = row["parent"].as_str();
        }
        false
    };
    let (mut in_ops, mut in_ops_ns) = (0, 0);
    for r in rows {
        let name = r["name"].as_str().unwrap().to_string();
        let (instances, kernels, gpu) =
            (r["instances"].as_u64().unwrap(), r["kernel_count"].as_u64().unwrap(), r["gpu_time_ns"].as_i64().unwrap());
        match r["domain"].as_str().unwrap() {
            "cpu_op" if !under_op(r) => {
                let e = m.top_ops.entry(name).or_default();
                *e = (e.0 + instances, e.1 + kernels, e.2 + gpu);
                (in_ops, in_ops_ns) = (in_ops + kernels, in_ops_ns + gpu);
            }
            "user_annotation" => {
                let e = m.annotations.entry(name).or_default();
                *e = (e.0 + instances, e.1 + r["inclusive_ns"].as_i64().unwrap());
            }
            _ => {}
        }
    }
    // expect.py counts a kernel without a launch call apart, not as outside.
    let total_ns: i64 = m.streams.values().map(|s| s.1).sum();
    m.outside_ops = (m.kernels - in_ops - m.without_launch.0, total_ns - in_ops_ns - m.without_launch.1);
    m
}

fn traces(kineto: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for dir in std::fs::read_dir(kineto).unwrap().flatten().filter(|e| e.path().is_dir()) {
        for f in std::fs::read_dir(dir.path()).unwrap().flatten() {
            let name = f.file_name().to_string_lossy().into_owned();
            if name.ends_with(".json") || name.ends_with(".json.gz") {
                found.push(f.path());
            }
        }
    }
    found.sort();
    found
}

/// Every corpus trace: kernels per device and stream, per launch call,
/// without a launch call, per top-level operator and outside every
/// operator, user annotations, and graph launches, equal to expect.py's.
#[test]
fn every_corpus_trace_gives_what_expect_py_counts() {
    let test = "every_corpus_trace_gives_what_expect_py_counts";
    let Some(kineto) = corpus_dir().map(|d| d.join("real/kineto")).filter(|d| d.join("expect.py").is_file()) else {
        skipped(test, "corpus directory real/kineto with expect.py not found");
        return;
    };
    let found = traces(&kineto);
    assert!(found.len() >= 8, "{found:?}");
    let root = tempfile::tempdir().unwrap();
    for (i, trace) in found.iter().enumerate() {
        let input = root.path().join(format!("{i}-{}", trace.file_name().unwrap().to_string_lossy()));
        std::fs::copy(trace, &input).unwrap();
        let run = root.path().join(format!("run{i}"));
        let out = llmperf().args(["import", "torch"]).arg(&input).arg("-o").arg(&run).output().unwrap();
        assert!(out.status.success(), "{}: {}", trace.display(), String::from_utf8_lossy(&out.stderr));
        let (want, got) = (expected(&kineto, trace), measured(&run));
        let name = trace.strip_prefix(&kineto).unwrap().display();
        assert_eq!(got.kernels, want.kernels, "{name}: kernels");
        assert_eq!(got.streams, want.streams, "{name}: kernels per device and stream");
        assert_eq!(got.launch, want.launch, "{name}: kernels per launch call");
        assert_eq!(got.without_launch, want.without_launch, "{name}: kernels without a launch call");
        assert_eq!(got.graph_launches, want.graph_launches, "{name}: graph launches with kernels");
        assert_eq!(got.top_ops, want.top_ops, "{name}: top-level operators");
        assert_eq!(got.outside_ops, want.outside_ops, "{name}: kernels outside every operator");
        // expect.py prints the ten longest annotations.
        for (a, counts) in &want.annotations {
            assert_eq!(got.annotations.get(a), Some(counts), "{name}: user_annotation {a}");
        }
    }
}
