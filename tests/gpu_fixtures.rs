//! The project's own GPU captures: what scripts/gpu/validate.sh made of
//! scripts/demo_workload.py on a GPU host (range, app-range and kernel
//! replay), committed under tests/fixtures/gpu/<gpu>-ncu<version>/ with the
//! exact commands. Each run directory is rebuilt here from its raw CSVs
//! (`llmperf report` on a copy) and every demo region must come out with one
//! result per iteration. Until a capture is committed, the test records
//! itself as skipped.
mod common;
use common::*;
use std::path::{Path, PathBuf};

fn captures() -> Vec<PathBuf> {
    let root = own("gpu");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(&root)
        .map(|rd| rd.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.join("commands.txt").is_file()).collect())
        .unwrap_or_default();
    dirs.sort();
    dirs
}

/// `iters: N` from the capture's host.txt.
fn iters(capture: &Path) -> u64 {
    let host = std::fs::read_to_string(capture.join("host.txt")).unwrap();
    host.lines().find_map(|l| l.strip_prefix("iters: ")).unwrap().trim().parse().unwrap()
}

/// (name, domain, calls) of the aggregate scope after `llmperf report` on a copy.
fn rebuilt(run: &Path, scratch: &Path) -> Vec<(String, String, u64)> {
    let copy = scratch.join(run.file_name().unwrap());
    copy_dir(run, &copy);
    llmperf().arg("report").arg(&copy).assert().success();
    ncu_scope_regions(&copy)
        .iter()
        .map(|r| {
            let s = |k: &str| r[k].as_str().unwrap_or_default().to_string();
            (s("name"), s("domain"), r["inclusive"]["calls"].as_u64().unwrap())
        })
        .collect()
}

#[test]
fn every_demo_region_comes_out_of_each_gpu_capture() {
    let found = captures();
    if found.is_empty() {
        skipped(
            "gpu_fixtures::every_demo_region_comes_out_of_each_gpu_capture",
            "no GPU capture committed under tests/fixtures/gpu/ (scripts/gpu/validate.sh on a GPU host)",
        );
        return;
    }
    let scratch = tempfile::tempdir().unwrap();
    for capture in found {
        let n = iters(&capture);
        for (mode, wanted) in [
            ("range", vec![("A", ""), ("A::A1", ""), ("B", ""), ("copy:h2d", ""), ("D", "Demo")]),
            ("app-range", vec![("A", ""), ("A::A1", ""), ("B", ""), ("copy:h2d", ""), ("D", "Demo")]),
            ("kernel", vec![("A", ""), ("A::A1", ""), ("B", ""), ("D", "Demo")]),
        ] {
            let Ok(runs) = std::fs::read_dir(capture.join("runs").join(mode)) else { continue };
            for run in runs.filter_map(|e| e.ok()).map(|e| e.path()).filter(|p| p.join("manifest.json").is_file()) {
                let regions = rebuilt(&run, scratch.path());
                for (name, domain) in &wanted {
                    let r = regions.iter().find(|r| r.0 == *name && r.1 == *domain);
                    let r = r.unwrap_or_else(|| panic!("{}: no region {domain}@{name} in {regions:?}", run.display()));
                    if mode != "kernel" {
                        assert_eq!(r.2, n, "{}: {name}: one range result per iteration", run.display());
                    } else {
                        assert!(r.2 > 0, "{}: {name}: kernels", run.display());
                    }
                }
            }
        }
    }
}
