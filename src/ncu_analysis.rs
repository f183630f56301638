//! After the ncu passes (or for `llmperf import ncu`): read each pass's CSV,
//! attribute results to NVTX regions and write `ncu/regions/` (report.json,
//! report.md, and per region `<dir>/region.json` + `<dir>/sections.txt`).
use std::path::{Path, PathBuf};

use serde::Serialize;
use sha2::Digest;

use crate::config::Config;
use crate::error::Error;
use crate::ncu_regions::{
    self, Attribution, Builder, Options, RegionEntry, RegionReportFile, Selection, Source, Stamp,
};
use crate::parse::ncu_csv::{self, Layout};
use crate::parse::ncu_fast;
use crate::roofline::{self, Roofline, RooflineAcc};
use crate::run_dir::{self, RunDir};

/// One CSV to read and how its results find their regions.
#[derive(Debug, Clone)]
pub struct Input {
    pub csv: PathBuf,
    pub attribution: Attribution,
}

/// Report options from the configuration.
pub fn options(cfg: &Config) -> Result<Options, Error> {
    let cli = &cfg.pipeline.ncu.ncu_cli;
    Ok(Options {
        selection: Selection::new(&cfg.report.kernels.include, &cfg.report.kernels.exclude)?,
        sections: cli.sections.clone(),
        metrics: cli.metrics.clone(),
        aggregate: cfg.report.aggregate,
    })
}

/// sha256 of the resolved config.yaml, first 16 hex digits.
pub fn fingerprint(config_yaml: &str) -> String {
    let digest = sha2::Sha256::digest(config_yaml.as_bytes());
    digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
}

/// The region report and the roofline of a run's CSVs, with the run's
/// configuration and a fresh stamp (config fingerprint from its config.yaml).
pub fn build_for_run(run: &RunDir, cfg: &Config, inputs: &[Input]) -> Result<(RegionReportFile, Roofline), Error> {
    let config_yaml = std::fs::read_to_string(run.join(run_dir::CONFIG_YAML)).unwrap_or_default();
    let stamp = Stamp { generated_at: run_dir::utc_now(), config_fingerprint: fingerprint(&config_yaml) };
    build(inputs, options(cfg)?, stamp, run)
}

/// Read every input once into one report and the roofline. A pass's raw page,
/// when it has one, gives its roofline instead (the SOL roofline rates are not
/// on the details page); a raw page that cannot be read leaves the details' sums.
pub fn build(
    inputs: &[Input],
    opts: Options,
    stamp: Stamp,
    run: &RunDir,
) -> Result<(RegionReportFile, Roofline), Error> {
    let sections = opts.sections.clone();
    let metrics = opts.metrics.clone();
    let mut builder = Builder::new(opts);
    let mut layouts = Vec::new();
    let mut roofline = RooflineAcc::default();
    for input in inputs {
        layouts.push(read_into(&mut builder, input)?);
        let read = builder.take_roofline();
        roofline.absorb(match roofline::raw_page_of(&input.csv).map(|raw| roofline::read_csv(&raw)) {
            Some(Ok(from_raw)) => from_raw,
            Some(Err(e)) => {
                tracing::warn!("roofline from {} instead: {}", input.csv.display(), e.message);
                read
            }
            None => read,
        });
    }
    let attribution = match (builder.range_mode(), builder.nvtx_seen()) {
        (true, _) => "range",
        (false, true) => "nvtx_stack",
        (false, false) => "none",
    };
    let source = Source {
        files: inputs.iter().map(|i| run.relative(&i.csv)).collect(),
        layout: match layouts.first() {
            Some(Layout::Raw) => "raw".into(),
            _ => "details".into(),
        },
        attribution: attribution.into(),
        results: builder.results(),
    };
    let scopes = builder.finish(&stamp);
    let report = RegionReportFile {
        schema: ncu_regions::REPORT_SCHEMA.into(),
        generated_at: stamp.generated_at,
        config_fingerprint: stamp.config_fingerprint,
        note: note(&source),
        source,
        sections,
        metrics,
        scopes,
    };
    Ok((report, roofline.finish()))
}

/// A details CSV file on every core (parse::ncu_fast); anything else (the
/// raw page, `==PROF==` preambles, unusual column orders) streamed.
fn read_into(builder: &mut Builder, input: &Input) -> Result<Layout, Error> {
    if ncu_fast::ingest(&input.csv, builder, &input.attribution)? {
        return Ok(Layout::Details);
    }
    let (layout, launches) = ncu_csv::open_any(&input.csv)?;
    for launch in launches {
        builder.add(&launch?, &input.attribution);
    }
    Ok(layout)
}

fn note(source: &Source) -> Option<String> {
    match (source.results, source.attribution.as_str()) {
        (0, _) => Some(
            "ncu profiled nothing: no region-specific profiling was performed (see the ncu stage's diagnoses in manifest.json)"
                .into(),
        ),
        (n, "none") => Some(format!(
            "the profile holds no NVTX data: no region-specific profiling was performed; all {n} results are in {}",
            ncu_regions::UNATTRIBUTED
        )),
        _ => None,
    }
}

/// `ncu/regions/<dir>/region.json`: one region's entry in every scope it appears in.
#[derive(Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RegionFile<'a> {
    pub name: &'a str,
    pub domain: &'a str,
    pub dir: &'a str,
    pub scopes: Vec<ScopedEntry<'a>>,
}

#[derive(Serialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScopedEntry<'a> {
    pub scope: &'a str,
    pub region: &'a RegionEntry,
}

/// Write `ncu/regions/`: report.json, report.md, and one directory per region.
pub fn write(run: &RunDir, report: &RegionReportFile, roofline: &Roofline) -> Result<Vec<String>, Error> {
    let mut written = vec![
        run.relative(&run.write_json(run_dir::NCU_REGIONS_JSON, report)?),
        run.relative(&run.write(run_dir::NCU_REGIONS_MD, crate::report::ncu_regions::markdown(report).as_bytes())?),
    ];
    if roofline.source == "ncu" {
        written.push(run.relative(&run.write_json(run_dir::ROOFLINE_JSON, roofline)?));
    }
    let mut by_dir: std::collections::BTreeMap<&str, Vec<(&str, &RegionEntry)>> = Default::default();
    for scope in &report.scopes {
        for region in &scope.regions {
            by_dir.entry(region.dir.as_str()).or_default().push((scope.scope.as_str(), region));
        }
    }
    for (dir, entries) in by_dir {
        let (_, first) = entries[0];
        let file = RegionFile {
            name: &first.name,
            domain: &first.domain,
            dir,
            scopes: entries.iter().map(|(scope, region)| ScopedEntry { scope, region }).collect(),
        };
        let text: Vec<String> =
            entries.iter().map(|(scope, region)| crate::report::ncu_regions::sections_text(region, scope)).collect();
        run.write_json(&run_dir::ncu_region_file(dir, "region.json"), &file)?;
        run.write(&run_dir::ncu_region_file(dir, "sections.txt"), text.join("\n").as_bytes())?;
        written.push(run_dir::ncu_region_file(dir, ""));
    }
    Ok(written)
}

/// `ncu/<pass>.details.csv` when rendered, else the raw page, else an
/// imported `ncu/<pass>.csv`.
pub fn csv_of(run: &RunDir, pass: &str) -> Option<PathBuf> {
    ["details.csv", "raw.csv", "csv"]
        .iter()
        .map(|suffix| run.join(&run_dir::ncu_pass_file(pass, suffix)))
        .find(|p| is_csv(p))
}

fn is_csv(p: &Path) -> bool {
    p.metadata().is_ok_and(|m| m.len() > 0)
}
