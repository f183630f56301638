//! plan: the Nsight Compute passes of a run, from the configuration and what
//! nsys found (top kernels, regions). Pure.
//!
//! - kernel / application replay: one pass with `--nvtx`, so every kernel row
//!   carries its push/pop stack and is attributed to its full region path; in
//!   deep mode the kernels are narrowed to the nsys top-N (when nsys ran and
//!   the user set no kernel filter);
//! - range / app-range replay: a result is one range, and an outer and an inner
//!   range cannot be captured in the same pass, so one pass per nesting level,
//!   each including that level's regions: the configured ones, else the
//!   push/pop regions nsys found.
use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::schema::{NcuCli, ReplayMode, RunMode};
use crate::regions::{self, Attribution};

pub(crate) const PLAN_SCHEMA: &str = "llmperf.ncu-plan/v1";

/// `ncu/plan.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NcuPlan {
    pub schema: String,
    pub replay_mode: ReplayMode,
    pub mode: RunMode,
    /// Where the regions came from: `config`, `nsys` or `none`.
    pub regions_from: String,
    pub kernel_filter: Option<KernelFilter>,
    pub passes: Vec<Pass>,
    pub notes: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct KernelFilter {
    /// `config` (pipeline.ncu.ncu_cli.kernel_name) or `nsys_top_n`.
    pub source: String,
    pub kernels: Vec<String>,
    /// What is passed to `--kernel-name`.
    pub expression: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Pass {
    /// `p0`, `p1`, ...: the file names under ncu/.
    pub name: String,
    /// Nesting level of the pass's regions (range replay).
    pub level: Option<usize>,
    /// Regions as reports name them (`A::A1`, `LLM@decode_all`).
    pub regions: Vec<String>,
    /// Region selectors for `--nvtx-include` (compiled to ncu expressions when run).
    pub nvtx_include: Vec<String>,
    pub nvtx_exclude: Vec<String>,
    /// How the pass's results find their regions: `nvtx_stack` or `range`.
    pub attribution: Attribution,
}

impl Pass {
    /// The configured command line with this pass's NVTX filters and the
    /// plan's kernel filter.
    pub fn cli(&self, configured: &NcuCli, plan: &NcuPlan) -> NcuCli {
        let mut cli = configured.clone();
        cli.nvtx.include = self.nvtx_include.clone();
        cli.nvtx.exclude = self.nvtx_exclude.clone();
        if let Some(f) = &plan.kernel_filter {
            cli.kernel_name = Some(f.expression.clone());
        }
        cli
    }
}

/// A region nsys found: its `::` path and NVTX domain (empty = default).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FoundRegion {
    pub path: String,
    pub domain: String,
}

impl FoundRegion {
    /// The selector for this region: `A::A1`, or `LLM@decode_all` in a domain.
    pub(crate) fn selector(&self) -> String {
        if self.domain.is_empty() {
            self.path.clone()
        } else {
            format!("{}@{}", self.domain, self.path)
        }
    }
}

pub fn plan(cli: &NcuCli, mode: RunMode, top_kernels: Option<&[String]>, found: Option<&[FoundRegion]>) -> NcuPlan {
    let mut notes = Vec::new();
    let range = matches!(cli.replay_mode, ReplayMode::Range | ReplayMode::AppRange);
    let (passes, regions_from) = if range {
        range_passes(cli, found, &mut notes)
    } else {
        let from = if cli.nvtx.include.is_empty() { "none" } else { "config" };
        let pass = Pass {
            name: "p0".into(),
            level: None,
            regions: Vec::new(),
            nvtx_include: cli.nvtx.include.clone(),
            nvtx_exclude: cli.nvtx.exclude.clone(),
            attribution: Attribution::NvtxStack,
        };
        (vec![pass], from.to_string())
    };
    let kernel_filter = if range { None } else { kernel_filter(cli, mode, top_kernels, &mut notes) };
    NcuPlan {
        schema: PLAN_SCHEMA.into(),
        replay_mode: cli.replay_mode,
        mode,
        regions_from,
        kernel_filter,
        passes,
        notes,
    }
}

/// The plan of `llmperf import ncu`: one pass per file, `import` when there is
/// one file (as before several were allowed), `import01`, `import02`... otherwise
/// (zero-padded so that they sort). An import into a run directory with a plan
/// adds its passes after the earlier ones, under names not taken yet
/// (`import02`, ... after `import`), so no earlier input is replaced.
pub fn imported(
    cfg: &crate::config::Config,
    ranges: Vec<String>,
    files: &[String],
    earlier: Option<&NcuPlan>,
) -> NcuPlan {
    let range = !ranges.is_empty();
    let taken: Vec<&str> = earlier.map(|p| p.passes.iter().map(|p| p.name.as_str()).collect()).unwrap_or_default();
    let width = match taken.is_empty() {
        true => files.len().to_string().len(),
        false => (files.len() + taken.len()).to_string().len().max(2),
    };
    let names: Vec<String> = if taken.is_empty() && files.len() == 1 {
        vec!["import".to_string()]
    } else {
        (1..).map(|i| format!("import{i:0width$}")).filter(|n| !taken.contains(&n.as_str())).take(files.len()).collect()
    };
    let passes = names.into_iter().map(|name| Pass {
        name,
        level: None,
        regions: ranges.clone(),
        nvtx_include: Vec::new(),
        nvtx_exclude: Vec::new(),
        attribution: if range { Attribution::Range } else { Attribution::NvtxStack },
    });
    let notes = files.iter().map(|f| format!("imported from {f}"));
    match earlier {
        Some(plan) => {
            let mut plan = plan.clone();
            plan.passes.extend(passes);
            plan.notes.extend(notes);
            plan
        }
        None => NcuPlan {
            schema: PLAN_SCHEMA.into(),
            replay_mode: if range { ReplayMode::Range } else { ReplayMode::Kernel },
            mode: cfg.runner.run.mode,
            regions_from: if range { "config" } else { "none" }.into(),
            kernel_filter: None,
            passes: passes.collect(),
            notes: notes.collect(),
        },
    }
}

fn range_passes(cli: &NcuCli, found: Option<&[FoundRegion]>, notes: &mut Vec<String>) -> (Vec<Pass>, String) {
    let (selectors, from): (Vec<String>, &str) = if !cli.nvtx.include.is_empty() {
        (cli.nvtx.include.clone(), "config")
    } else if let Some(found) = found.filter(|f| !f.is_empty()) {
        (found.iter().map(FoundRegion::selector).collect(), "nsys")
    } else {
        notes.push(
            "no regions configured (pipeline.ncu.ncu_cli.nvtx.include) and none found by nsys: one pass over the ranges the application marks with cu(da)ProfilerStart/Stop".into(),
        );
        let pass = Pass {
            name: "p0".into(),
            level: None,
            regions: Vec::new(),
            nvtx_include: Vec::new(),
            nvtx_exclude: cli.nvtx.exclude.clone(),
            attribution: Attribution::Range,
        };
        return (vec![pass], "none".into());
    };
    let mut levels: BTreeMap<usize, Vec<String>> = BTreeMap::new();
    for s in selectors {
        levels.entry(level_of(&s)).or_default().push(s);
    }
    if levels.len() > 1 {
        notes.push(format!(
            "{} nesting levels: one range-replay pass per level, since an outer and an inner range cannot be captured together",
            levels.len()
        ));
    }
    let passes = levels
        .into_iter()
        .enumerate()
        .map(|(i, (level, sels))| Pass {
            name: format!("p{i}"),
            level: Some(level),
            regions: sels.iter().filter(|s| !is_raw(s)).cloned().collect(),
            nvtx_include: sels,
            nvtx_exclude: cli.nvtx.exclude.clone(),
            attribution: Attribution::Range,
        })
        .collect();
    (passes, from.into())
}

/// Depth of a selector: `A` 0, `A::A1` 1, `LLM@decode_all::decode_step` 1;
/// a raw `expr:`/`regex:` expression counts its `/`-separated names.
fn level_of(selector: &str) -> usize {
    if let Some(raw) = selector.strip_prefix("expr:") {
        return raw.trim_end_matches('/').matches('/').count();
    }
    let path = selector.split_once('@').map_or(selector, |(_, p)| p);
    path.matches(regions::SEP).count()
}

fn is_raw(selector: &str) -> bool {
    selector.starts_with("expr:") || selector.starts_with("regex:")
}

/// Deep mode narrows kernel replay to the nsys top-N kernels, unless the user
/// chose kernels themselves.
fn kernel_filter(cli: &NcuCli, mode: RunMode, top: Option<&[String]>, notes: &mut Vec<String>) -> Option<KernelFilter> {
    if let Some(k) = &cli.kernel_name {
        return Some(KernelFilter { source: "config".into(), kernels: vec![k.clone()], expression: k.clone() });
    }
    if mode != RunMode::Deep {
        return None;
    }
    match top {
        Some(names) if !names.is_empty() => Some(KernelFilter {
            source: "nsys_top_n".into(),
            kernels: names.to_vec(),
            expression: format!("regex:^(?:{})$", names.iter().map(|n| escape_regex(n)).collect::<Vec<_>>().join("|")),
        }),
        Some(_) => {
            notes.push("deep mode: nsys saw no CUDA kernels, so ncu runs without a kernel filter".into());
            None
        }
        None => {
            notes.push("deep mode without nsys results: ncu runs without a kernel filter".into());
            None
        }
    }
}

/// Escape the characters with a meaning in ncu's (ECMAScript) regular expressions.
fn escape_regex(name: &str) -> String {
    name.chars().fold(String::with_capacity(name.len()), |mut s, c| {
        if r"\^$.|?*+()[]{}".contains(c) {
            s.push('\\');
        }
        s.push(c);
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::schema::NcuCli;

    fn cli(mode: &str, include: &[&str]) -> NcuCli {
        let r = crate::config::load(&crate::config::LoadOptions {
            overrides: vec![
                format!("pipeline.ncu.ncu_cli.replay_mode={mode}"),
                format!("pipeline.ncu.ncu_cli.nvtx.include={}", serde_json::to_string(include).unwrap()),
            ],
            ..Default::default()
        })
        .unwrap();
        r.config.pipeline.ncu.ncu_cli
    }

    #[test]
    fn range_replay_runs_one_pass_per_nesting_level() {
        let p = plan(&cli("range", &["A", "A::A1", "B", "LLM@decode_all::decode_step"]), RunMode::Deep, None, None);
        assert_eq!(p.regions_from, "config");
        let passes: Vec<(usize, Vec<&str>)> =
            p.passes.iter().map(|p| (p.level.unwrap(), p.nvtx_include.iter().map(String::as_str).collect())).collect();
        assert_eq!(passes, [(0, vec!["A", "B"]), (1, vec!["A::A1", "LLM@decode_all::decode_step"])]);
        assert_eq!((p.passes[0].name.as_str(), p.passes[1].name.as_str()), ("p0", "p1"));
        assert!(p.kernel_filter.is_none(), "no kernel filter on ranges");
    }

    #[test]
    fn range_replay_takes_the_regions_nsys_found() {
        let found = [
            FoundRegion { path: "prefill".into(), domain: "LLM".into() },
            FoundRegion { path: "decode_all".into(), domain: "LLM".into() },
            FoundRegion { path: "decode_all::decode_step".into(), domain: "LLM".into() },
        ];
        let p = plan(&cli("range", &[]), RunMode::Deep, None, Some(&found));
        assert_eq!(p.regions_from, "nsys");
        assert_eq!(p.passes.len(), 2);
        assert_eq!(p.passes[0].nvtx_include, ["LLM@prefill", "LLM@decode_all"]);
        assert_eq!(p.passes[1].regions, ["LLM@decode_all::decode_step"]);
        let none = plan(&cli("range", &[]), RunMode::Deep, None, None);
        assert_eq!((none.passes.len(), none.regions_from.as_str()), (1, "none"));
        assert!(none.notes[0].contains("cu(da)ProfilerStart"));
    }

    #[test]
    fn deep_kernel_replay_narrows_to_the_nsys_top_kernels() {
        let top = ["void gemm<float, 4>(int)".to_string(), "k.v2".to_string()];
        let p = plan(&cli("kernel", &["A"]), RunMode::Deep, Some(&top), None);
        assert_eq!(p.passes.len(), 1);
        assert_eq!(p.passes[0].attribution, Attribution::NvtxStack);
        let f = p.kernel_filter.unwrap();
        assert_eq!(f.source, "nsys_top_n");
        assert_eq!(f.expression, r"regex:^(?:void gemm<float, 4>\(int\)|k\.v2)$");
        assert!(plan(&cli("kernel", &[]), RunMode::Light, Some(&top), None).kernel_filter.is_none());
        let p = plan(&cli("kernel", &[]), RunMode::Deep, Some(&[]), None);
        assert!(p.kernel_filter.is_none() && p.notes[0].contains("no CUDA kernels"));
    }

    #[test]
    fn a_configured_kernel_filter_wins_over_top_n() {
        let mut c = cli("kernel", &[]);
        c.kernel_name = Some("regex:gemm".into());
        let top = ["other".to_string()];
        let f = plan(&c, RunMode::Deep, Some(&top), None).kernel_filter.unwrap();
        assert_eq!((f.source.as_str(), f.expression.as_str()), ("config", "regex:gemm"));
    }

    #[test]
    fn levels_of_selectors() {
        assert_eq!(level_of("A"), 0);
        assert_eq!(level_of("A::A1"), 1);
        assert_eq!(level_of("LLM@decode_all::decode_step::layer_0"), 2);
        assert_eq!(level_of("expr:A/A1/"), 1);
    }
}
