//! The summary's narrative and advice say only what their numbers say: each
//! rule checked on a real file where it must not fire (and the sentence that
//! stands there instead), and ncu's headline reading of a kernel kept even
//! though it carries no Estimated Speedup.
use crate::common::*;

fn narrative(summary: &str) -> String {
    let at = summary.find("## Narrative").unwrap_or_else(|| panic!("{summary}"));
    summary[at..].to_string()
}

/// A run directory of the project's own (tests/fixtures/runs), reported again.
fn reported(name: &str) -> String {
    let root = tempfile::tempdir().unwrap();
    let run = root.path().join(name);
    copy_dir(&own(&format!("runs/{name}")), &run);
    llmperf().arg("report").arg(&run).assert().success();
    std::fs::read_to_string(run.join("stakeholder_summary.md")).unwrap()
}

/// The built-in ResNet profiled on this CPU-only host: no decode step, so no
/// word of decoding; no GPU, so no advice to trace CUDA, and the narrative
/// says why there are no kernels.
#[test]
fn a_resnet_run_on_a_host_without_a_gpu_is_told_nothing_of_decoding_or_tracing_cuda() {
    let summary = reported("cpu_resnet");
    assert!(!summary.contains("decode"), "{summary}");
    let n = narrative(&summary);
    assert!(n.contains("this host has no NVIDIA GPU"), "{n}");
    assert!(!n.contains("CUDA not traced"), "{n}");
}

/// The tiny decoder on this CPU: 0.78% MFU and 9.5% MBU per decode step.
/// Neither is near its roof: the step is not called memory bound.
#[test]
fn a_tiny_decode_step_far_from_both_roofs_is_not_called_memory_bound() {
    let n = narrative(&reported("cpu_llm_tiny"));
    assert!(!n.contains("memory bound"), "{n}");
    assert!(n.contains("neither compute nor memory is near its peak"), "{n}");
}

/// sglang's random-number kernel (ncu 2024.1 details of a real report): SM
/// at 66% of peak, DRAM at 15%, and ncu's own rule names the integer ALU as
/// the busiest pipeline. It is compute bound, and no matrix multiply: the
/// narrative quotes ncu's pipeline, and says nothing of tensor cores.
#[test]
fn a_compute_bound_random_number_kernel_is_read_by_ncus_busiest_pipe_not_tensor_cores() {
    let root = tempfile::tempdir().unwrap();
    let Some(csv) = corpus_copy!("real/derived/sglang-fork/profile.ncu2024.1.details.csv", root.path()) else { return };
    let run = root.path().join("run");
    llmperf().args(["-q", "import", "ncu"]).arg(&csv).arg("-o").arg(&run).assert().success();
    let n = narrative(&std::fs::read_to_string(run.join("stakeholder_summary.md")).unwrap());
    assert!(n.contains("distribution_elementwise"), "{n}");
    assert!(n.contains("compute bound"), "{n}");
    assert!(!n.contains("tensor cores"), "{n}");
    assert!(n.contains("ALU is the highest-utilized pipeline"), "{n}");
}

/// DeepSeek-OCR's kernel 13 (ncu 2025.1): ncu's headline rule for it,
/// SOLBottleneck ("grid is too small … 0.5 full waves"), gives no Estimated
/// Speedup; it is shown, first among the kernel's rules.
#[test]
fn ncus_headline_rule_without_an_estimate_is_in_the_summary() {
    let root = tempfile::tempdir().unwrap();
    let Some(csv) = corpus_copy!("real/llm-perf-opt/kernel_0013_ncu.details.csv", root.path()) else { return };
    let run = root.path().join("run");
    llmperf().args(["-q", "import", "ncu"]).arg(&csv).arg("-o").arg(&run).assert().success();
    let summary = std::fs::read_to_string(run.join("stakeholder_summary.md")).unwrap();
    let rows: Vec<&str> = summary.lines().filter(|l| l.contains("(OPT)") || l.contains("(WRN)")).collect();
    assert!(rows[0].contains("SOLBottleneck (OPT)") && rows[0].contains("0.5 full waves"), "{summary}");
    assert!(rows[0].contains("– (none given)"), "{}", rows[0]);
    let advice = json(&run.join("findings.json"))["ncu_advice"].clone();
    assert_eq!(advice[0]["rule"], "SOLBottleneck");
    assert!(advice[0]["speedup_pct"].is_null());
}
