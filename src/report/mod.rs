//! Reports for people, rebuilt from a run directory's artifacts alone, so that
//! `llmperf report RUN_DIR` gives the same bytes as the run did.
pub mod html;
pub mod ncu_regions;
pub mod summary;

use std::fmt::Write;

use crate::error::Error;
use crate::run_dir::{self, RunDir};
use summary::Inputs;

/// What the reports read, each part if present and readable.
pub fn inputs(run: &RunDir) -> Inputs {
    Inputs {
        config: crate::config::load_resolved(&run.join(run_dir::CONFIG_YAML)).ok(),
        env: run.read_json(run_dir::ENV_JSON),
        manifest: run.read_json(run_dir::MANIFEST_JSON),
        timings: run.read_json(run_dir::TIMINGS_JSON),
        baseline: run.read_json(run_dir::BASELINE_TIMINGS_JSON),
        nsys_regions: run.read_json(run_dir::NSYS_REGIONS),
        nsys_top: run.read_json(run_dir::NSYS_TOP_KERNELS),
        capture: run.read_json(run_dir::NSYS_CAPTURE),
        ncu: run.read_json(run_dir::NCU_REGIONS_JSON),
        roofline: run.read_json(run_dir::ROOFLINE_JSON),
    }
}

/// kernels.json/md, operators.json/md and stakeholder_summary.md.
pub fn write_summaries(run: &RunDir) -> Result<Vec<String>, Error> {
    let inputs = inputs(run);
    let d = summary::Derived::of(&inputs);
    run.write_json(run_dir::KERNELS_JSON, &d.kernels)?;
    run.write(run_dir::KERNELS_MD, summary::kernels_md(&d.kernels).as_bytes())?;
    run.write_json(run_dir::OPERATORS_JSON, &d.operators)?;
    run.write(run_dir::OPERATORS_MD, summary::operators_md(&d.operators).as_bytes())?;
    run.write(run_dir::SUMMARY_MD, summary::stakeholder_summary(&inputs, &d).as_bytes())?;
    run.write(run_dir::REPORT_HTML, html::render(&inputs, &d).as_bytes())?;
    Ok([
        run_dir::KERNELS_JSON,
        run_dir::KERNELS_MD,
        run_dir::OPERATORS_JSON,
        run_dir::OPERATORS_MD,
        run_dir::SUMMARY_MD,
        run_dir::REPORT_HTML,
    ]
    .map(String::from)
    .to_vec())
}

/// `report.md`: the stages and their diagnoses, then every file of the run.
pub fn write_index(run: &RunDir) -> Result<(), Error> {
    let manifest: serde_json::Value = run.read_json(run_dir::MANIFEST_JSON).unwrap_or_default();
    // The manifest's run id, not the directory's name: a copied run renders the same.
    let id = manifest["run_id"].as_str().unwrap_or("");
    let mut md = format!("# Run {id}\n\nStatus: **{}**.\n\n", manifest["status"].as_str().unwrap_or("unknown"));
    md.push_str("| stage | status | reason |\n|---|---|---|\n");
    let stages = manifest["stages"].as_array().cloned().unwrap_or_default();
    for s in &stages {
        let _ = writeln!(
            md,
            "| {} | {} | {} |",
            s["name"].as_str().unwrap_or("?"),
            s["status"].as_str().unwrap_or("?"),
            s["reason"].as_str().unwrap_or("").replace('|', "\\|")
        );
    }
    let diagnoses: Vec<String> = stages
        .iter()
        .flat_map(|s| {
            let stage = s["name"].as_str().unwrap_or("?").to_string();
            s["diagnoses"].as_array().cloned().unwrap_or_default().into_iter().map(move |d| {
                format!(
                    "- {stage}: {} — hint: {}",
                    d["message"].as_str().unwrap_or(""),
                    d["hint"].as_str().unwrap_or("")
                )
            })
        })
        .collect();
    if !diagnoses.is_empty() {
        let _ = writeln!(md, "\n## Diagnoses\n\n{}", diagnoses.join("\n"));
    }
    md.push_str("\n## Reports\n\n");
    for (file, what) in [
        (run_dir::SUMMARY_MD, "stakeholder summary: environment, aggregates, stages, MFU, top operators and kernels"),
        (run_dir::REPORT_HTML, "charts: time per region, stages, top kernels, roofline; with the tables"),
        (run_dir::KERNELS_MD, "top kernels"),
        (run_dir::OPERATORS_MD, "operators (NVTX ranges below the stages)"),
        (run_dir::NCU_REGIONS_MD, "Nsight Compute per-region report"),
        (run_dir::ROOFLINE_JSON, "roofline points per kernel from the ncu counters"),
    ] {
        if run.join(file).is_file() {
            let _ = writeln!(md, "- [{file}]({file}): {what}");
        }
    }
    md.push_str("\n## Files\n\n");
    for f in run.files().into_iter().filter(|f| f != run_dir::REPORT_MD) {
        let _ = writeln!(md, "- [{f}]({f})");
    }
    run.write(run_dir::REPORT_MD, md.as_bytes())?;
    Ok(())
}
