//! report: what people read, rebuilt from a run directory's artifacts alone
//! (so `llmperf report RUN_DIR` gives the same bytes as the run did). The
//! typed model and what is derived from it (model.rs), pure renderers
//! (summary.rs, html.rs, ncu_regions.rs, findings.rs, peaks for MFU), and this module, the
//! one writer of report files.
pub(crate) mod findings;
pub(crate) mod html;
pub(crate) mod join;
pub(crate) mod model;
pub(crate) mod narrative;
pub(crate) mod ncu_regions;
pub(crate) mod peaks;
pub(crate) mod regions_md;
pub(crate) mod summary;
pub(crate) mod table;

use std::fmt::Write;

use crate::aggregate::ncu::RegionReportFile;
use crate::aggregate::roofline::Roofline;
use crate::error::Error;
use crate::run_dir::{self, RunDir};
use model::{Derived, Inputs};

/// `ncu/regions/`: report.json, report.md, one directory per region
/// (region.json, sections.txt); and roofline.json when ncu gave counters.
pub(crate) fn write_ncu_regions(
    run: &RunDir,
    report: &RegionReportFile,
    roofline: &Roofline,
) -> Result<Vec<String>, Error> {
    let mut written = vec![
        run.relative(&run.write_json(run_dir::NCU_REGIONS_JSON, report)?),
        run.relative(&run.write(run_dir::NCU_REGIONS_MD, ncu_regions::markdown(report).as_bytes())?),
    ];
    if roofline.source == "ncu" {
        written.push(run.relative(&run.write_json(run_dir::ROOFLINE_JSON, roofline)?));
    }
    for (dir, file, sections) in ncu_regions::per_region(report) {
        run.write_json(&run_dir::ncu_region_file(dir, run_dir::NCU_REGION_JSON), &file)?;
        run.write(&run_dir::ncu_region_file(dir, run_dir::NCU_REGION_SECTIONS), sections.as_bytes())?;
        written.push(run_dir::ncu_region_file(dir, ""));
    }
    Ok(written)
}

/// report.html again, from the run's files as they are now (after `export
/// perfetto` wrote the traces it links); nothing where the run has none.
pub(crate) fn rewrite_html(run: &RunDir) -> Result<bool, Error> {
    if !run.join(run_dir::REPORT_HTML).is_file() {
        return Ok(false);
    }
    let inputs = Inputs::read(run);
    let d = Derived::of(&inputs);
    run.write(run_dir::REPORT_HTML, html::render(&inputs, &d).as_bytes())?;
    Ok(true)
}

/// kernels.json/md, operators.json/md, stakeholder_summary.md and report.html.
pub(crate) fn write_summaries(run: &RunDir) -> Result<Vec<String>, Error> {
    let inputs = Inputs::read(run);
    let d = Derived::of(&inputs);
    run.write_json(run_dir::KERNELS_JSON, &d.kernels)?;
    run.write(run_dir::KERNELS_MD, summary::kernels_md(&d.kernels).as_bytes())?;
    run.write_json(run_dir::OPERATORS_JSON, &d.operators)?;
    run.write_json(run_dir::FINDINGS_JSON, &d.findings)?;
    run.write(run_dir::OPERATORS_MD, summary::operators_md(&d.operators).as_bytes())?;
    run.write(run_dir::SUMMARY_MD, summary::stakeholder_summary(&inputs, &d).as_bytes())?;
    run.write(run_dir::REPORT_HTML, html::render(&inputs, &d).as_bytes())?;
    let mut written = Vec::new();
    let regions = inputs.regions.as_ref();
    let labels = regions.map(|r| model::process_labels(r, d.ranks.as_ref())).unwrap_or_default();
    if let Some(md) = regions.and_then(|r| regions_md::regions_md(inputs.timeline, r, &d.kernels, &labels)) {
        run.write(run_dir::REGIONS_MD, md.as_bytes())?;
        written.push(run_dir::REGIONS_MD.to_string());
    }
    if let Some(j) = &d.join {
        run.write_json(run_dir::REGION_JOIN_JSON, j)?;
        written.push(run_dir::REGION_JOIN_JSON.to_string());
    }
    if let Some(r) = &d.ranks {
        run.write_json(run_dir::RANKS_JSON, r)?;
        written.push(run_dir::RANKS_JSON.to_string());
    }
    written.extend(
        [
            run_dir::FINDINGS_JSON,
            run_dir::KERNELS_JSON,
            run_dir::KERNELS_MD,
            run_dir::OPERATORS_JSON,
            run_dir::OPERATORS_MD,
            run_dir::SUMMARY_MD,
            run_dir::REPORT_HTML,
        ]
        .map(String::from),
    );
    Ok(written)
}

/// The ncu preflight: each configured region as nsys captured it.
fn preflight_section(md: &mut String, p: &crate::plan::preflight::Preflight) {
    md.push_str("\n## ncu preflight\n\n");
    match &p.checked_against {
        Some(f) => {
            let _ = writeln!(md, "Each region ncu was asked for, looked up in [{f}]({f}) before ncu ran.");
        }
        None => md.push_str("Not checked against an nsys capture.\n\n"),
    }
    for n in &p.not_checked {
        let _ = writeln!(md, "- not checked: {n}");
    }
    if p.regions.is_empty() {
        return;
    }
    md.push_str("\n| region | found | style | instances | kernels (nsys) | depth | also matched by ncu's expression |\n|---|---|---|---:|---:|---:|---|\n");
    for c in &p.regions {
        let found =
            if c.found { "yes".to_string() } else { format!("no (did you mean {})", c.did_you_mean.join(", ")) };
        let _ = writeln!(
            md,
            "| {} | {found} | {} | {} | {} | {} | {} |",
            crate::markdown::code(&c.selector),
            c.style.as_deref().unwrap_or("-"),
            c.instances,
            c.kernels,
            c.depth.map_or("-".to_string(), |d| d.to_string()),
            crate::markdown::text(&c.also_matched.join(", "))
        );
    }
}

/// `report.md`: the stages and their diagnoses, then every file of the run.
pub(crate) fn write_index(run: &RunDir) -> Result<(), Error> {
    let manifest = run.read_json::<crate::manifest::Manifest>(run_dir::MANIFEST_JSON);
    // The manifest's run id, not the directory's name: a copied run renders the same.
    let id = manifest.as_ref().map_or("", |m| m.run_id.as_str());
    let status = manifest.as_ref().map_or("unknown".to_string(), |m| m.status.to_string());
    let mut md = format!("# Run {id}\n\nStatus: **{status}**.\n\n");
    md.push_str("| stage | status | reason |\n|---|---|---|\n");
    let stages = manifest.as_ref().map(|m| m.stages.as_slice()).unwrap_or_default();
    for s in stages {
        let reason = crate::markdown::text(s.reason.as_deref().unwrap_or(""));
        let _ = writeln!(md, "| {} | {} | {reason} |", s.name, s.status);
    }
    let diagnoses: Vec<String> = stages
        .iter()
        .flat_map(|s| s.diagnoses.iter().map(move |d| format!("- {}: {} — hint: {}", s.name, d.message, d.hint)))
        .collect();
    if !diagnoses.is_empty() {
        let _ = writeln!(md, "\n## Diagnoses\n\n{}", diagnoses.join("\n"));
    }
    if let Some(p) = run.read_json::<crate::plan::preflight::Preflight>(run_dir::NCU_PREFLIGHT) {
        preflight_section(&mut md, &p);
    }
    if let Some(r) = run.read_json::<crate::aggregate::ranks::RanksReport>(run_dir::RANKS_JSON) {
        md.push('\n');
        summary::ranks_section(&mut md, &r);
    }
    md.push_str("\n## Reports\n\n");
    for (file, what) in [
        (run_dir::FINDINGS_JSON, "what to fix first: findings ranked by recoverable time, with their evidence (the summary's first section)"),
        (run_dir::SUMMARY_MD, "stakeholder summary: what to fix first, environment, aggregates, stages, MFU, top operators and kernels"),
        (run_dir::REPORT_HTML, "charts: time per region, ranks × regions, stages, top kernels, roofline; with the tables"),
        (run_dir::REGIONS_MD, "regions: every top-level NVTX range and the ranges inside, with GPU time, wall time, calls and the kernels inside"),
        (run_dir::KERNELS_MD, "top kernels"),
        (run_dir::OPERATORS_MD, "operators (NVTX ranges other than the workload's stages)"),
        (run_dir::NCU_REGIONS_MD, "Nsight Compute per-region report"),
        (run_dir::ROOFLINE_JSON, "roofline points per kernel from the ncu counters"),
        (run_dir::RANKS_JSON, "ranks side by side: per-rank totals, each region's time per rank, stragglers (the summary's Ranks section, report.html's heat map)"),
        (run_dir::REGION_JOIN_JSON, "nsys and ncu per region: coverage, HFU, MBU"),
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
