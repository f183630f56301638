//! The project's own GPU captures, committed under
//! tests/fixtures/gpu/<gpu>-ncu<version>[-workload]/ with the exact commands
//! (commands.txt) and the device's own log: what scripts/gpu/session.sh made
//! of scripts/demo_workload.py (range, app-range and kernel replay) and of
//! scripts/gpu/hf_decode.py on a GPU host. The `.ncu-rep` files are left out
//! (ncu 2025.3 embeds each kernel's module: up to 120 MB); their raw, details
//! and session pages, rendered by ncu on the host, are kept.
//!
//! Each run directory is rebuilt here from its pages (`llmperf report` on a
//! copy) and compared with an oracle that shares no code with llmperf: the
//! raw pages read with the csv crate alone, one row per result, its NVTX
//! push/pop stack and `gpu__time_duration.sum` in whole nanoseconds. Every
//! region with results must come out with the oracle's count and nanoseconds;
//! every region without one (a pass ncu refused, a pass cut short) must say so
//! instead of showing a number. Until a capture is committed, the test records
//! itself as skipped.
use crate::common::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn captures() -> Vec<PathBuf> {
    let root = own("gpu");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.join("commands.txt").is_file()).collect())
        .unwrap_or_default();
    dirs.sort();
    dirs
}

/// `iters: N` from the capture's host.txt, where the capture has one.
fn iters(capture: &Path) -> Option<u64> {
    let host = std::fs::read_to_string(capture.join("host.txt")).unwrap();
    host.lines().find_map(|l| l.strip_prefix("iters: ")).map(|n| n.trim().parse().unwrap())
}

/// Every run directory of a capture: (replay mode, directory).
fn runs(capture: &Path) -> Vec<(String, PathBuf)> {
    let mut found = Vec::new();
    for mode in std::fs::read_dir(capture.join("runs")).unwrap().filter_map(|e| e.ok()) {
        for run in std::fs::read_dir(mode.path()).unwrap().filter_map(|e| e.ok()).map(|e| e.path()) {
            if run.join("manifest.json").is_file() {
                found.push((mode.file_name().to_string_lossy().into_owned(), run));
            }
        }
    }
    found.sort();
    found
}

/// (domain, region path) → (results, nanoseconds), from ncu's raw pages alone.
type Oracle = BTreeMap<(String, String), (u64, u64)>;

/// The oracle of one run. A row's NVTX cell holds its thread's push/pop stack,
/// outermost first, each `"domain:name:…"` (`<default domain>` is ""). In
/// kernel replay a launch counts in every region of its stack (inclusive) and
/// one outside every range in `(unattributed)`; in range replay a row is one
/// range: the innermost of its stack, or, for a start/end range (not on the
/// stack), the one region its pass's command asked for.
fn oracle(run: &Path, mode: &str) -> Oracle {
    let quoted = regex::Regex::new(r#""([^"]*)""#).unwrap();
    // domain:name:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg, where a name
    // and a message may hold `:` (CCCL's `cub::DeviceScan::InclusiveScan`).
    let field =
        regex::Regex::new(r"^([^:]*):(.*):[^:]*:[^:]*:[^:]*:[^:]*:(?:none|ASCII|UNICODE|REGISTERED):.*$").unwrap();
    let commands = std::fs::read_to_string(run.join("ncu/cmd.txt")).unwrap_or_default();
    let mut out = Oracle::new();
    let mut pages: Vec<PathBuf> = std::fs::read_dir(run.join("ncu"))
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.path())
        .filter(|p| p.to_string_lossy().ends_with(".raw.csv"))
        .collect();
    pages.sort();
    for page in pages {
        let pass = page.file_name().unwrap().to_string_lossy().trim_end_matches(".raw.csv").to_string();
        let mut rows =
            csv::ReaderBuilder::new().has_headers(false).flexible(true).from_path(&page).unwrap().into_records();
        let header = rows.next().unwrap().unwrap();
        let col = |name: &str| header.iter().position(|h| h.starts_with(name)).unwrap();
        let (nvtx, time) = (col("thread Domain:Push/Pop_Range"), col("gpu__time_duration.sum"));
        let units = rows.next().unwrap().unwrap();
        assert_eq!(&units[time], "ns", "{}: durations in base units", page.display());
        for row in rows {
            let row = row.unwrap();
            let ns: u64 = row[time].parse().unwrap_or_else(|_| panic!("{}: duration {:?}", page.display(), &row[time]));
            let stack: Vec<(String, String)> = quoted
                .captures_iter(&row[nvtx])
                .map(|c| {
                    let f = field.captures(&c[1]).unwrap_or_else(|| panic!("{}: NVTX {:?}", page.display(), &c[1]));
                    (f[1].replace("<default domain>", ""), f[2].to_string())
                })
                .collect();
            let mut count = |domain: &str, path: String| {
                let e = out.entry((domain.to_string(), path)).or_default();
                e.0 += 1;
                e.1 += ns;
            };
            let path = |n: usize| stack[..n].iter().map(|s| s.1.as_str()).collect::<Vec<_>>().join("::");
            match (mode, stack.is_empty()) {
                ("kernel", true) => count("", "(unattributed)".into()),
                ("kernel", false) => (1..=stack.len()).for_each(|n| count(&stack[n - 1].0, path(n))),
                (_, false) => count(&stack.last().unwrap().0, path(stack.len())),
                (_, true) => {
                    // The pass's own command: one --nvtx-include, `[domain@]name/`.
                    let line = commands.lines().find(|l| l.contains(&format!("/{pass} "))).unwrap();
                    let words: Vec<&str> = line.split(' ').collect();
                    let asked: Vec<&str> =
                        words.windows(2).filter(|w| w[0] == "--nvtx-include").map(|w| w[1]).collect();
                    assert_eq!(asked.len(), 1, "{}: a start/end result in a pass of several regions", page.display());
                    let sel = asked[0].trim_end_matches('/');
                    let (domain, name) = sel.split_once('@').unwrap_or(("", sel));
                    count(domain, name.to_string())
                }
            }
        }
    }
    out
}

/// (domain, name) → (calls, nanoseconds, no_result) of the aggregate scope
/// after `llmperf report` on a copy.
fn rebuilt(run: &Path, scratch: &Path) -> BTreeMap<(String, String), (u64, u64, Option<String>)> {
    let copy = scratch.join(run.file_name().unwrap());
    copy_dir(run, &copy);
    llmperf().arg("report").arg(&copy).assert().success();
    ncu_scope_regions(&copy)
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
            let ns = (r["inclusive"]["gpu_time_ms"].as_f64().unwrap() * 1e6).round() as u64;
            let why = r["no_result"].as_str().map(str::to_string);
            ((s("domain"), s("name")), (r["inclusive"]["calls"].as_u64().unwrap(), ns, why))
        })
        .collect()
}

#[test]
fn every_gpu_capture_rebuilds_to_what_ncus_raw_pages_say() {
    let found = captures();
    if found.is_empty() {
        skipped(
            "gpu_fixtures::every_gpu_capture_rebuilds_to_what_ncus_raw_pages_say",
            "no GPU capture committed under tests/fixtures/gpu/ (scripts/gpu/session.sh on a GPU host)",
        );
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    let mut judged = 0;
    for capture in found {
        for (mode, run) in runs(&capture) {
            let truth = oracle(&run, &mode);
            let got = rebuilt(&run, scratch.path());
            for (key, (calls, ns)) in &truth {
                let r = got.get(key).unwrap_or_else(|| panic!("{}: no region {key:?} in {got:?}", run.display()));
                assert_eq!((r.0, r.1), (*calls, *ns), "{}: {key:?}: results and ns as ncu's raw pages", run.display());
                assert!(r.2.is_none(), "{}: {key:?} has results but says {:?}", run.display(), r.2);
                judged += 1;
            }
            // A region of the report without a result of its own (the parent
            // of a measured range, in range replay) shows no number.
            for (key, r) in got.iter().filter(|(k, _)| !truth.contains_key(*k)) {
                assert_eq!((r.0, r.1), (0, 0), "{}: {key:?} is not in ncu's pages", run.display());
                assert!(r.2.is_some(), "{}: {key:?} has no result and must say why", run.display());
            }
        }
    }
    assert!(judged > 0);
}

/// What the demo capture of an H200 (ncu 2025.3.1) holds, pinned: which passes
/// ncu refused or were cut short, and that llmperf says so for each region.
#[test]
fn the_h200_demo_capture_names_every_region_it_could_not_measure() {
    let capture = own("gpu").join("h200-ncu2025.3.1");
    if !capture.is_dir() {
        skipped("gpu_fixtures::the_h200_demo_capture_names_every_region_it_could_not_measure", "no h200 capture");
        return;
    }
    let n = iters(&capture).unwrap();
    let scratch = tempfile::tempdir().unwrap();
    for (mode, run) in runs(&capture) {
        let truth = oracle(&run, &mode);
        let manifest = json(&run.join("manifest.json"));
        let region = |d: &str, p: &str| truth.get(&(d.to_string(), p.to_string())).map(|x| x.0);
        match mode.as_str() {
            "range" => {
                // A and B shared a pass that ncu refused: cuKernelSetAttribute
                // (a kernel's first launch, lazily loaded) inside the range.
                for (d, p) in [("", "A::A1"), ("Demo", "D"), ("", "copy:h2d")] {
                    assert_eq!(region(d, p), Some(n), "{p}");
                }
                assert_eq!((region("", "A"), region("", "B")), (None, None));
                assert_eq!(stage(&manifest, "ncu:p0")["status"], "failed");
                assert!(stage(&manifest, "ncu:p0")["diagnoses"][0]["message"]
                    .as_str()
                    .unwrap()
                    .contains("cuKernelSetAttribute"));
                assert_eq!(stage(&manifest, "ncu_matched")["reason"], "no ncu results for A, B");
                let got = rebuilt(&run, scratch.path());
                let a = &got[&(String::new(), "A".to_string())];
                assert!(a.2.as_deref().unwrap().contains("no range result"), "{a:?}");
                let md = std::fs::read_to_string(
                    scratch.path().join(run.file_name().unwrap()).join("ncu/regions/report.md"),
                )
                .unwrap();
                let row = md.lines().find(|l| l.starts_with("| [A](")).unwrap();
                assert!(!row.contains("0.000"), "region A must show no number: {row}");
            }
            "app-range" => {
                // Interrupted during its third pass (the step's time ran out).
                for (d, p) in [("", "A"), ("", "B"), ("", "copy:h2d")] {
                    assert_eq!(region(d, p), Some(n), "{p}");
                }
                assert_eq!((region("Demo", "D"), region("", "A::A1")), (None, None));
                assert_eq!(manifest["status"], "interrupted");
                // The first A held one-time costs: 84,012,960 ns in ncu's raw page
                // against 3,152,992 and 3,473,952 ns after it. The report says so.
                let copy = scratch.path().join("first-use");
                copy_dir(&run, &copy);
                llmperf().arg("report").arg(&copy).assert().success();
                let regions = ncu_scope_regions(&copy);
                let first = |name: &str| regions.iter().find(|r| r["name"] == name).unwrap()["first_use"].clone();
                assert_eq!(first("A")["first_ms"], 84.01296);
                assert_eq!(first("A")["others"], 2);
                assert_eq!(first("A")["others_median_ms"], 3.313472);
                assert!(first("B").is_null() && first("copy:h2d").is_null());
                let md = std::fs::read_to_string(copy.join("ncu/regions/report.md")).unwrap();
                assert!(md.contains("- A: its first result took 84.013 ms, 25× the median of the 2 after it"), "{md}");
            }
            "kernel" => {
                // 3 iterations: A holds 3 kernels of its own and A1's 2, B 2, D 3.
                assert_eq!(region("", "A"), Some(5 * n));
                assert_eq!(region("", "A::A1"), Some(2 * n));
                assert_eq!(region("", "B"), Some(2 * n));
                assert_eq!(region("Demo", "D"), Some(3 * n));
            }
            other => panic!("unexpected mode {other}"),
        }
    }
}
