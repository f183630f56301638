//! schemas: JSON Schemas of the JSON artifacts, generated from the types that write
//! them (published under specs/), and `llmperf validate RUN_DIR`.
use std::path::Path;

use serde_json::Value;

use crate::error::{Error, ErrorKind};
use crate::run_dir;

/// A kind of JSON artifact: where it lives in a run directory (`*` = one
/// path segment), its published schema file, and the schema itself.
pub struct Artifact {
    pub(crate) pattern: &'static str,
    pub spec: &'static str,
    pub schema: fn() -> Value,
}

fn schema_of<T: schemars::JsonSchema>() -> Value {
    serde_json::to_value(schemars::schema_for!(T)).expect("a schema serializes")
}

/// Every JSON artifact, named by run_dir (the one module that names files).
pub const ARTIFACTS: &[Artifact] = &[
    Artifact {
        pattern: run_dir::NSYS_CAPTURE,
        spec: "nsys-capture.schema.json",
        schema: schema_of::<crate::provenance::capture::CaptureHost>,
    },
    Artifact {
        pattern: run_dir::ROOFLINE_JSON,
        spec: "roofline.schema.json",
        schema: schema_of::<crate::aggregate::roofline::Roofline>,
    },
    Artifact {
        pattern: run_dir::MANIFEST_JSON,
        spec: "manifest.schema.json",
        schema: schema_of::<crate::manifest::Manifest>,
    },
    Artifact { pattern: run_dir::ENV_JSON, spec: "env.schema.json", schema: schema_of::<crate::provenance::Env> },
    Artifact {
        pattern: run_dir::LIBTORCH_JSON,
        spec: "libtorch.schema.json",
        schema: schema_of::<crate::provenance::libtorch::Libtorch>,
    },
    Artifact {
        pattern: run_dir::TIMINGS_JSON,
        spec: "timings.schema.json",
        schema: schema_of::<crate::timings::Timings>,
    },
    Artifact {
        pattern: run_dir::BASELINE_TIMINGS_JSON,
        spec: "timings.schema.json",
        schema: schema_of::<crate::timings::Timings>,
    },
    Artifact {
        pattern: run_dir::NCU_TIMINGS_JSON,
        spec: "timings.schema.json",
        schema: schema_of::<crate::timings::Timings>,
    },
    Artifact {
        pattern: run_dir::NSYS_REGIONS,
        spec: "nsys-regions.schema.json",
        schema: schema_of::<crate::aggregate::nsys::RegionsReport>,
    },
    Artifact { pattern: run_dir::DIFF_JSON, spec: "diff.schema.json", schema: schema_of::<crate::compare::Diff> },
    Artifact {
        pattern: run_dir::CHECK_JSON,
        spec: "check.schema.json",
        schema: schema_of::<crate::compare::check::CheckReport>,
    },
    Artifact {
        pattern: run_dir::NCU_RULES_JSON,
        spec: "ncu-rules.schema.json",
        schema: schema_of::<crate::aggregate::rules::RulesReport>,
    },
    Artifact {
        pattern: run_dir::FINDINGS_JSON,
        spec: "findings.schema.json",
        schema: schema_of::<crate::report::findings::FindingsReport>,
    },
    Artifact {
        pattern: run_dir::NSYS_BREAKDOWN,
        spec: "nsys-breakdown.schema.json",
        schema: schema_of::<crate::aggregate::nsys::breakdown::BreakdownReport>,
    },
    Artifact {
        pattern: run_dir::NSYS_SAMPLES,
        spec: "nsys-samples.schema.json",
        schema: schema_of::<crate::aggregate::nsys::Samples>,
    },
    Artifact {
        pattern: run_dir::NSYS_TOP_KERNELS,
        spec: "nsys-top-kernels.schema.json",
        schema: schema_of::<Vec<crate::aggregate::nsys::TopKernel>>,
    },
    Artifact {
        pattern: run_dir::SERVE_REQUESTS,
        spec: "serve-requests.schema.json",
        schema: schema_of::<crate::pipeline::ServeRequests>,
    },
    Artifact {
        pattern: run_dir::SERVE_STEPS,
        spec: "serve-steps.schema.json",
        schema: schema_of::<crate::aggregate::steps::Steps>,
    },
    Artifact {
        pattern: run_dir::TORCH_CAPTURE,
        spec: "torch-capture.schema.json",
        schema: schema_of::<crate::parse::torch::Capture>,
    },
    // `llmperf import torch`: the region model in nsys's schemas.
    Artifact {
        pattern: run_dir::TORCH_REGIONS,
        spec: "nsys-regions.schema.json",
        schema: schema_of::<crate::aggregate::nsys::RegionsReport>,
    },
    Artifact {
        pattern: run_dir::TORCH_BREAKDOWN,
        spec: "nsys-breakdown.schema.json",
        schema: schema_of::<crate::aggregate::nsys::breakdown::BreakdownReport>,
    },
    Artifact {
        pattern: run_dir::TORCH_SAMPLES,
        spec: "nsys-samples.schema.json",
        schema: schema_of::<crate::aggregate::nsys::Samples>,
    },
    Artifact {
        pattern: run_dir::TORCH_TOP_KERNELS,
        spec: "nsys-top-kernels.schema.json",
        schema: schema_of::<Vec<crate::aggregate::nsys::TopKernel>>,
    },
    Artifact { pattern: run_dir::RANK_JSON, spec: "rank.schema.json", schema: schema_of::<crate::plan::rank::RankId> },
    Artifact {
        pattern: run_dir::LAUNCHED_RANK_PATTERN,
        spec: "launched-rank.schema.json",
        schema: schema_of::<crate::run_dir::LaunchedRank>,
    },
    Artifact {
        pattern: run_dir::LAUNCHED_NCU_RANK_PATTERN,
        spec: "launched-rank.schema.json",
        schema: schema_of::<crate::run_dir::LaunchedRank>,
    },
    Artifact {
        pattern: run_dir::RANKS_JSON,
        spec: "ranks.schema.json",
        schema: schema_of::<crate::aggregate::ranks::RanksReport>,
    },
    Artifact {
        pattern: run_dir::REGION_JOIN_JSON,
        spec: "region-join.schema.json",
        schema: schema_of::<crate::report::join::RegionJoin>,
    },
    Artifact {
        pattern: run_dir::KERNELS_JSON,
        spec: "kernels.schema.json",
        schema: schema_of::<crate::report::model::KernelsReport>,
    },
    Artifact {
        pattern: run_dir::OPERATORS_JSON,
        spec: "operators.schema.json",
        schema: schema_of::<crate::report::model::OperatorsReport>,
    },
    Artifact { pattern: run_dir::NCU_PLAN, spec: "ncu-plan.schema.json", schema: schema_of::<crate::plan::NcuPlan> },
    Artifact {
        pattern: run_dir::NCU_PREFLIGHT,
        spec: "ncu-preflight.schema.json",
        schema: schema_of::<crate::plan::preflight::Preflight>,
    },
    Artifact {
        pattern: run_dir::NCU_REGIONS_JSON,
        spec: "ncu-region-report.schema.json",
        schema: schema_of::<crate::aggregate::ncu::RegionReportFile>,
    },
    Artifact {
        pattern: run_dir::NCU_REGION_JSON_PATTERN,
        spec: "ncu-region.schema.json",
        schema: schema_of::<crate::report::ncu_regions::RegionFile>,
    },
];

/// The artifact kind of a path relative to the run directory.
pub fn artifact_of(rel: &str) -> Option<&'static Artifact> {
    ARTIFACTS.iter().find(|a| matches(a.pattern, rel))
}

fn matches(pattern: &str, rel: &str) -> bool {
    let (p, r): (Vec<&str>, Vec<&str>) = (pattern.split('/').collect(), rel.split('/').collect());
    p.len() == r.len() && p.iter().zip(&r).all(|(p, r)| *p == "*" || p == r)
}

/// One JSON file's verdict.
#[derive(Debug)]
pub(crate) struct Check {
    pub(crate) path: String,
    /// None: no schema is known for this file (not an error).
    pub(crate) spec: Option<&'static str>,
    pub(crate) errors: Vec<String>,
}

/// Check every `.json` under `dir` against its schema.
pub(crate) fn validate(dir: &Path) -> Result<Vec<Check>, Error> {
    let run = crate::run_dir::RunDir::open(dir)?;
    Ok(run.files().into_iter().filter(|f| f.ends_with(".json")).map(|rel| check(dir, rel)).collect())
}

fn check(dir: &Path, rel: String) -> Check {
    let Some(artifact) = artifact_of(&rel) else { return Check { path: rel, spec: None, errors: Vec::new() } };
    let errors = match crate::run_dir::read_regular(&dir.join(&rel))
        .map_err(|e| e.to_string())
        .and_then(|t| serde_json::from_str::<Value>(&t).map_err(|e| format!("not JSON: line {}: {e}", e.line())))
    {
        Err(e) => vec![e],
        Ok(instance) => schema_errors(&(artifact.schema)(), &instance),
    };
    Check { path: rel, spec: Some(artifact.spec), errors }
}

/// Every way `instance` breaks `schema`, as `at /pointer: message`.
pub(crate) fn schema_errors(schema: &Value, instance: &Value) -> Vec<String> {
    match jsonschema::validator_for(schema) {
        Err(e) => vec![format!("invalid schema: {e}")],
        Ok(v) => {
            v.iter_errors(instance).map(|e| format!("at {}: {e}", pointer(&e.instance_path.to_string()))).collect()
        }
    }
}

fn pointer(p: &str) -> &str {
    if p.is_empty() {
        "/"
    } else {
        p
    }
}

/// The text `llmperf validate` prints, and whether everything passed.
pub(crate) fn render(checks: &[Check]) -> (String, bool) {
    let mut out = String::new();
    let mut ok = true;
    for c in checks {
        match (c.spec, c.errors.is_empty()) {
            (None, _) => out.push_str(&format!("SKIP  {}  (no schema)\n", c.path)),
            (Some(spec), true) => out.push_str(&format!("OK    {}  ({spec})\n", c.path)),
            (Some(spec), false) => {
                ok = false;
                out.push_str(&format!("FAIL  {}  ({spec})\n", c.path));
                for e in c.errors.iter().take(20) {
                    out.push_str(&format!("      {e}\n"));
                }
            }
        }
    }
    (out, ok)
}

/// The error `llmperf validate` exits with when a file fails.
pub(crate) fn failed(checks: &[Check]) -> Error {
    let bad: Vec<&str> = checks.iter().filter(|c| !c.errors.is_empty()).map(|c| c.path.as_str()).collect();
    Error::new(ErrorKind::Unparseable, format!("{} file(s) do not match their schema: {}", bad.len(), bad.join(", ")))
        .with_hint("the schemas are in specs/; a file written by an older llmperf can be rebuilt from the raw outputs")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_match_one_segment_per_star() {
        assert_eq!(artifact_of("ncu/regions/A__A1/region.json").unwrap().spec, "ncu-region.schema.json");
        assert_eq!(artifact_of("ncu/regions/report.json").unwrap().spec, "ncu-region-report.schema.json");
        assert!(artifact_of("ncu/regions/a/b/region.json").is_none());
        assert!(artifact_of("other.json").is_none());
    }

    #[test]
    fn schema_errors_name_the_place() {
        let schema = (artifact_of("nsys/top_kernels.json").unwrap().schema)();
        let good = serde_json::json!([{"name": "k", "calls": 1, "total_ns": 5, "mean_ns": 5.0, "min_ns": 5, "max_ns": 5, "share_pct": 100.0}]);
        assert!(schema_errors(&schema, &good).is_empty());
        let bad = serde_json::json!([{"name": "k", "calls": "one"}]);
        let errors = schema_errors(&schema, &bad);
        assert!(errors.iter().any(|e| e.starts_with("at /0")), "{errors:?}");
    }
}
