//! Range replay selects what ncu really matches. On this machine (no GPU) the
//! real ncu 2022.3 still logs one `Skipping invalid capture range` line per
//! range its NVTX filter matched; the built-in workloads with
//! `infer.cuda_probe=true` make a CUDA driver call where a GPU run would
//! synchronize, so every matched range, named domains included, is defined
//! and logged. Each test counts those lines per pass and asserts the exact
//! number: the instances nsys captured of the regions the pass selects.
//! A compiler that writes `A::A1` as `A/A1/` (what ncu matches 0 times)
//! fails here.
use crate::common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// The LLM as small as its four-deep nesting allows: one iteration, a prefill
/// and two decode steps (25 matched ranges over the four passes, not 130).
const SMALL_LLM: [&str; 2] = ["infer.iters=1", "infer.max_new_tokens=3"];

/// `llmperf profile --model MODEL --replay-mode range` with nsys (which finds
/// the regions) and ncu: the run directory in its own temporary root. None on
/// a host with a GPU, where ncu profiles the matched ranges instead of logging
/// them as skipped and this oracle does not apply (tests/gpu_fixtures.rs
/// covers GPU captures); the test is then recorded as skipped.
///
/// The range-replay deadlock of ncu 2022.3 here ([`NCU_PASS_DEADLINE`]) grows
/// with the ranges matched: with both cores busy (bench: two spinning shells)
/// 4 of 6 runs of the 64-range attn/mlp pass hung, 0 of 8 runs of a 2-range
/// pass. So the LLM tests run a small workload ([`SMALL_LLM`], 25 ranges in
/// all) besides the deadline and the new attempts.
fn range_run(test: &str, model: &str, extra: &[&str]) -> Option<(tempfile::TempDir, std::path::PathBuf)> {
    if gpu_host() {
        skipped(test, "a GPU is here: ncu profiles the matched ranges instead of logging them as skipped");
        return None;
    }
    let _nsys = nsys_lock();
    let (root, out) = past_ncu_hangs(&format!("{test} ({model})"), |root| {
        llmperf()
            .args(["profile", "--model", model, "infer.iters=2", "infer.cuda_probe=true", "--replay-mode", "range"])
            .args(NSYS_HANG)
            .arg(NCU_PASS_DEADLINE)
            .args(extra)
            .arg("-o")
            .arg(root)
            .timeout(Duration::from_secs(900))
            .output()
            .unwrap()
    });
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let dir = run_dir(&out.stdout);
    Some((root, dir))
}

/// Per pass: (its expressions, the ranges ncu's log says it matched).
fn matched(dir: &Path) -> Vec<(String, Vec<String>, usize)> {
    let plan = json(&dir.join("ncu/plan.json"));
    plan["passes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let name = p["name"].as_str().unwrap().to_string();
            let exprs = p["expressions"].as_array().unwrap().iter().map(|e| e.as_str().unwrap().to_string()).collect();
            let log = std::fs::read_to_string(dir.join(format!("ncu/{name}.log"))).unwrap();
            (name, exprs, log.matches("Skipping invalid capture range").count())
        })
        .collect()
}

/// The instances nsys captured of the regions each pass selects (its
/// `regions`, matched by full path and domain): the independent oracle.
fn nsys_instances(dir: &Path) -> BTreeMap<String, u64> {
    let plan = json(&dir.join("ncu/plan.json"));
    let regions = json(&dir.join("nsys/regions.json"));
    let mut out = BTreeMap::new();
    for p in plan["passes"].as_array().unwrap() {
        let mut n = 0;
        for sel in p["regions"].as_array().unwrap().iter().map(|s| s.as_str().unwrap()) {
            let (domain, path) = sel.split_once('@').unwrap_or(("", sel));
            n += regions["regions"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| glob(path).is_match(r["path"].as_str().unwrap()) && r["domain"] == domain)
                .map(|r| r["instances"].as_u64().unwrap())
                .sum::<u64>();
        }
        out.insert(p["name"].as_str().unwrap().to_string(), n);
    }
    out
}

/// A region glob (`decode*`) as an anchored regex; `*` stays within one name.
fn glob(path: &str) -> regex::Regex {
    regex::Regex::new(&format!("^{}$", regex::escape(path).replace(r"\*", "[^:]*"))).unwrap()
}

fn check(dir: &Path, expected: &[(&str, &[&str], usize)]) {
    let got = matched(dir);
    let got_ref: Vec<(&str, Vec<&str>, usize)> =
        got.iter().map(|(n, e, c)| (n.as_str(), e.iter().map(String::as_str).collect(), *c)).collect();
    let want: Vec<(&str, Vec<&str>, usize)> = expected.iter().map(|(n, e, c)| (*n, e.to_vec(), *c)).collect();
    assert_eq!(got_ref, want, "passes: (name, expressions, ranges ncu matched)");
    let oracle = nsys_instances(dir);
    for (name, _, count) in &got {
        assert_eq!(oracle[name], *count as u64, "{name}: nsys captured {} instances of its regions", oracle[name]);
    }
}

#[test]
fn every_pass_of_the_regions_demo_matches_its_ranges() {
    let Some((_root, dir)) = range_run(&this_test!(), "nvtx_regions", &[]) else { return };
    check(&dir, &[("p0", &["A/", "B/"], 4), ("p1", &["A1/"], 2)]);
}

#[test]
fn every_pass_of_the_resnet_matches_its_ranges() {
    let Some((_root, dir)) = range_run(&this_test!(), "dummy_shallow_resnet", &[]) else { return };
    check(&dir, &[("p0", &["forward/"], 2), ("p1", &["block_0/", "block_1/", "block_2/", "head/", "stem/"], 10)]);
}

/// The LLM's ranges are in the `LLM` domain, nested four deep: prefill and
/// decode_all, decode_step, the layers and lm_head, attn and mlp.
#[test]
fn every_pass_of_the_llm_matches_its_ranges_in_the_llm_domain() {
    let Some((_root, dir)) = range_run(&this_test!(), "llm_tiny", &SMALL_LLM) else { return };
    check(
        &dir,
        &[
            ("p0", &["LLM@decode_all/", "LLM@prefill/"], 2),
            ("p1", &["LLM@decode_step/"], 2),
            ("p2", &["LLM@layer_0/", "LLM@layer_1/", "LLM@lm_head/"], 9),
            ("p3", &["LLM@attn/", "LLM@mlp/"], 12),
        ],
    );
    // The preflight saw each region in nsys's capture, with its style and count.
    let preflight = json(&dir.join("ncu/preflight.json"));
    let step = preflight["regions"].as_array().unwrap().iter().find(|r| r["selector"] == "LLM@decode_all::decode_step");
    let step = step.expect("decode_step checked");
    assert_eq!(
        (step["found"].as_bool(), step["style"].as_str(), step["instances"].as_u64()),
        (Some(true), Some("push_pop"), Some(2))
    );
}

/// Configured regions, as users write them: a nested one alone, a glob, and
/// a scalar where a list is expected.
#[test]
fn configured_nested_and_glob_selectors_match() {
    let Some((_root, dir)) = range_run(
        &this_test!(),
        "llm_tiny",
        &[&SMALL_LLM[..], &["pipeline.ncu.ncu_cli.nvtx.include=LLM@decode_all::decode_step"]].concat(),
    ) else {
        return;
    };
    check(&dir, &[("p0", &["LLM@decode_step/"], 2)]);
    let glob = [&SMALL_LLM[..], &["pipeline.ncu.ncu_cli.nvtx.include=[LLM@decode*]"]].concat();
    let Some((_root, dir)) = range_run(&this_test!(), "llm_tiny", &glob) else { return };
    // `decode*` at the top level is decode_all; ncu's leaf expression also
    // matches decode_step, which lies inside it: one range per decode_all.
    check(&dir, &[("p0", &["regex:^LLM$@^decode.*$/"], 1)]);
}
