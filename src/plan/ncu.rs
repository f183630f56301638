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
//!   regions nsys found. Each region is compiled to the expression ncu matches
//!   (profile::ncu::compile_selector), push/pop or start/end as nsys saw it.
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::config::schema::{NcuCli, ReplayMode, RunMode};
use crate::config::Config;
use crate::profile::ncu::{compile_selector, escape_regex, Matching};
use crate::regions::RangeStyle;
use crate::regions::{self, Attribution, Selector};

pub(crate) const PLAN_SCHEMA: &str = "llmperf.ncu-plan/v1";

/// `ncu/plan.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NcuPlan {
    pub(crate) schema: String,
    pub(crate) replay_mode: ReplayMode,
    pub(crate) mode: RunMode,
    /// Where the regions came from: `config`, `nsys` or `none`.
    pub(crate) regions_from: String,
    pub kernel_filter: Option<KernelFilter>,
    pub passes: Vec<Pass>,
    pub(crate) notes: Vec<String>,
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
    /// `p0`, `p1`, ...: the file names under ncu/; `p0-kernel` a ladder step.
    pub(crate) name: String,
    /// The replay mode this pass runs (auto: range first, then the ladder).
    pub(crate) replay_mode: ReplayMode,
    /// Nesting level of the pass's regions (range replay).
    pub(crate) level: Option<usize>,
    /// Regions as reports name them (`A::A1`, `LLM@decode_all`).
    pub(crate) regions: Vec<String>,
    /// Region selectors for `--nvtx-include`, as configured.
    pub(crate) nvtx_include: Vec<String>,
    /// What ncu gets for each of them: `A::A1` → `A1/` in range replay.
    pub(crate) expressions: Vec<String>,
    pub(crate) nvtx_exclude: Vec<String>,
    /// How the pass's results find their regions: `nvtx_stack` or `range`.
    pub(crate) attribution: Attribution,
}

impl Pass {
    /// The configured command line with this pass's NVTX filters and the
    /// plan's kernel filter.
    pub fn cli(&self, configured: &NcuCli, plan: &NcuPlan) -> NcuCli {
        let mut cli = configured.clone();
        cli.replay_mode = self.replay_mode;
        cli.nvtx.include = self.expressions.iter().map(|e| format!("expr:{e}")).collect();
        cli.nvtx.exclude = self.nvtx_exclude.clone();
        if let Some(f) = &plan.kernel_filter {
            cli.kernel_name = Some(f.expression.clone());
        }
        cli
    }

    /// The next rung of the replay ladder for a pass ncu could not replay as
    /// ranges: app-range (when this ncu has it), then kernel replay with the
    /// same regions as an NVTX filter; None after kernel replay.
    pub(crate) fn next_rung(&self, app_range: bool) -> Option<Pass> {
        let (mode, suffix) = match self.replay_mode {
            ReplayMode::Range if app_range => (ReplayMode::AppRange, "app-range"),
            ReplayMode::Range | ReplayMode::AppRange => (ReplayMode::Kernel, "kernel"),
            _ => return None,
        };
        let base = self.name.split('-').next().unwrap_or(&self.name);
        let (matching, attribution) = match mode {
            ReplayMode::Kernel => (Matching::Filter, Attribution::NvtxStack),
            _ => (Matching::Range, Attribution::Range),
        };
        Some(Pass {
            name: format!("{base}-{suffix}"),
            replay_mode: mode,
            expressions: self.nvtx_include.iter().map(|s| compile_selector(s, matching, RangeStyle::PushPop)).collect(),
            attribution,
            ..self.clone()
        })
    }
}

/// A region nsys found: its `::` path, NVTX domain (empty = default) and
/// whether it is a start/end range.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct FoundRegion {
    pub(crate) path: String,
    pub(crate) domain: String,
    pub(crate) style: RangeStyle,
}

impl FoundRegion {
    /// The selector for this region: `A::A1`, or `LLM@decode_all` in a domain.
    pub(crate) fn selector(&self) -> String {
        regions::selector(&self.path, &self.domain)
    }
}

/// What the ncu planner takes from the run besides the configuration.
#[derive(Debug, Clone, PartialEq, Default)]
pub(crate) struct NcuInputs {
    /// ncu runs on some ranks only: its passes come from the configuration
    /// alone, so that the other ranks count them the same way.
    pub(crate) in_step: bool,
    /// Leave NCCL's kernels out of kernel and application replay (a rank of a job).
    pub(crate) leave_out_comm: bool,
    /// ncu runs inside the launcher, on this one rank.
    pub(crate) inside_rank: Option<u32>,
}

/// What nsys saved in this run, when it ran: its top kernels and the regions it found.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Found<'a> {
    pub(crate) top_kernels: Option<&'a [String]>,
    pub(crate) regions: Option<&'a [FoundRegion]>,
}

/// The plan of a profile run's ncu stage: from the configuration, what nsys
/// found, and what the run plan decided of ncu in a job. With ncu on some
/// ranks only (`in_step`), the passes ignore the regions nsys found, as the
/// unprofiled ranks count them ([`passes_in_step`]); a rank of a job leaves
/// NCCL's kernels out of kernel replay unless asked for.
pub(crate) fn plan_for_run(cli: &NcuCli, mode: RunMode, found: Found, inputs: &NcuInputs) -> NcuPlan {
    let regions = if inputs.in_step { None } else { found.regions };
    let mut plan = plan(cli, mode, found.top_kernels, regions);
    if inputs.leave_out_comm {
        leave_out_comm(&mut plan);
    }
    plan
}

/// How many times a rank without ncu runs the application while ncu profiles
/// others (kernel or range replay): once per pass of the plan made from the
/// configuration alone, as the profiled rank makes it.
pub(crate) fn passes_in_step(cfg: &Config) -> usize {
    plan(&cfg.pipeline.ncu.ncu_cli, cfg.runner.run.mode, None, None).passes.len()
}

pub fn plan(cli: &NcuCli, mode: RunMode, top_kernels: Option<&[String]>, found: Option<&[FoundRegion]>) -> NcuPlan {
    let mut notes = Vec::new();
    let range = cli.replay_mode.is_range();
    let (passes, regions_from) = if range {
        range_passes(cli, found, &mut notes)
    } else {
        let from = if cli.nvtx.include.is_empty() { "none" } else { "config" };
        let pass = Pass {
            name: "p0".into(),
            replay_mode: cli.replay_mode,
            level: None,
            regions: Vec::new(),
            expressions: compile(&cli.nvtx.include, Matching::Filter, found),
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
pub(crate) fn imported(
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
    let replay_mode = if range { ReplayMode::Range } else { ReplayMode::Kernel };
    let passes = names.into_iter().map(|name| Pass {
        name,
        replay_mode,
        level: None,
        regions: ranges.clone(),
        nvtx_include: Vec::new(),
        expressions: Vec::new(),
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
            replay_mode,
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
            replay_mode: range_mode(cli.replay_mode),
            level: None,
            regions: Vec::new(),
            nvtx_include: Vec::new(),
            expressions: Vec::new(),
            nvtx_exclude: cli.nvtx.exclude.clone(),
            attribution: Attribution::Range,
        };
        return (vec![pass], "none".into());
    };
    let groups = capture_groups(&selectors, found);
    if groups.len() > 1 {
        notes.push(format!(
            "{} range-replay passes: an outer and an inner range cannot be captured in one pass, and ncu matches a nested region by its last name",
            groups.len()
        ));
    }
    let passes = groups
        .into_iter()
        .enumerate()
        .map(|(i, sels)| Pass {
            name: format!("p{i}"),
            replay_mode: range_mode(cli.replay_mode),
            level: sels.iter().map(|s| level_of(s)).min(),
            regions: sels.iter().filter(|s| !is_raw(s)).cloned().collect(),
            expressions: dedup(compile(&sels, Matching::Range, found)),
            nvtx_include: sels,
            nvtx_exclude: cli.nvtx.exclude.clone(),
            attribution: Attribution::Range,
        })
        .collect();
    (passes, from.into())
}

/// The mode a range pass starts in: auto starts with range replay.
fn range_mode(mode: ReplayMode) -> ReplayMode {
    if mode == ReplayMode::Auto {
        ReplayMode::Range
    } else {
        mode
    }
}

/// The selectors of each range-replay pass. Selectors that compile to one
/// expression (`A::A1` and `B::A1` are both `A1/`) share a pass; two
/// expressions share one unless a range of one can hold a range of the other,
/// in the paths nsys found or the configured ones, or they are in different
/// domains (whose nesting no path records). Outermost first, greedily; a raw
/// `expr:`/`regex:` expression gets a pass of its own.
fn capture_groups(selectors: &[String], found: Option<&[FoundRegion]>) -> Vec<Vec<String>> {
    let mut known: Vec<Selector> = found.unwrap_or_default().iter().map(|f| Selector::of(&f.path, &f.domain)).collect();
    known.extend(selectors.iter().filter(|s| !is_raw(s)).map(|s| Selector::parse(s)));
    // One group per (last name, domain), in the order of its shallowest level.
    let mut ordered: Vec<&String> = selectors.iter().collect();
    ordered.sort_by_key(|s| level_of(s));
    let mut groups: Vec<Group> = Vec::new();
    for sel in ordered {
        let leaf = (!is_raw(sel)).then(|| Leaf::of(&Selector::parse(sel)));
        match groups.iter_mut().find(|g| leaf.is_some() && g.leaf == leaf) {
            Some(g) => g.selectors.push(sel.clone()),
            None => groups.push(Group { leaf, selectors: vec![sel.clone()] }),
        }
    }
    let mut passes: Vec<Vec<Group>> = Vec::new();
    for group in groups {
        let fits = |pass: &Vec<Group>| match &group.leaf {
            None => false,
            Some(k) => pass.iter().all(|other| other.leaf.as_ref().is_some_and(|o| !o.conflicts(k, &known))),
        };
        match passes.iter_mut().find(|p| fits(p)) {
            Some(pass) => pass.push(group),
            None => passes.push(vec![group]),
        }
    }
    passes.into_iter().map(|p| p.into_iter().flat_map(|g| g.selectors).collect()).collect()
}

/// Selectors that compile to one expression; `leaf` is None for a raw one.
struct Group<'a> {
    leaf: Option<Leaf<'a>>,
    selectors: Vec<String>,
}

/// A last name (a glob, maybe) in a domain: what ncu matches in range replay.
#[derive(PartialEq)]
struct Leaf<'a> {
    name: &'a str,
    domain: &'a str,
}

impl<'a> Leaf<'a> {
    fn of(s: &Selector<'a>) -> Leaf<'a> {
        Leaf { name: s.leaf(), domain: s.domain }
    }

    /// Where this leaf is in a path: the indexes of the names it matches.
    fn at(&self, p: &Selector) -> Vec<usize> {
        if p.domain != self.domain {
            return Vec::new();
        }
        p.names.iter().enumerate().filter(|(_, n)| regions::glob_match(self.name, n)).map(|(i, _)| i).collect()
    }

    /// Whether a range of one can hold a range of the other in a known path,
    /// or they are in different domains (ranges of two domains may nest, and
    /// nsys's paths do not say).
    fn conflicts(&self, other: &Leaf, known: &[Selector]) -> bool {
        let holds = |outer: &Leaf, inner: &Leaf| {
            known.iter().any(|p| {
                let (o, i) = (outer.at(p), inner.at(p));
                o.iter().any(|a| i.iter().any(|b| a < b))
            })
        };
        self.domain != other.domain || holds(self, other) || holds(other, self)
    }
}

fn dedup(mut v: Vec<String>) -> Vec<String> {
    let mut seen = std::collections::HashSet::new();
    v.retain(|e| seen.insert(e.clone()));
    v
}

/// Depth of a selector: `A` 0, `A::A1` 1, `LLM@decode_all::decode_step` 1;
/// a raw `expr:`/`regex:` expression counts its `/`-separated names.
fn level_of(selector: &str) -> usize {
    if let Some(raw) = selector.strip_prefix("expr:") {
        return raw.trim_end_matches('/').matches('/').count();
    }
    Selector::parse(selector).names.len() - 1
}

/// Each selector as the expression ncu gets, start/end where nsys saw a
/// start/end range of that name.
fn compile(selectors: &[String], matching: Matching, found: Option<&[FoundRegion]>) -> Vec<String> {
    let style = |s: &str| {
        let start_end = found.is_some_and(|f| f.iter().any(|r| r.style == RangeStyle::StartEnd && r.selector() == s));
        if start_end {
            RangeStyle::StartEnd
        } else {
            RangeStyle::PushPop
        }
    };
    selectors.iter().map(|s| compile_selector(s, matching, style(s))).collect()
}

fn is_raw(selector: &str) -> bool {
    selector.starts_with("expr:") || selector.starts_with("regex:")
}

/// NCCL's kernels out of kernel and application replay (ranges keep them:
/// range replay has no kernel filter): `regex:^(?!nccl)`, in front of the
/// filter there is. A filter naming one kernel exactly is the user's choice
/// and stays.
fn leave_out_comm(plan: &mut NcuPlan) {
    if !matches!(plan.replay_mode, ReplayMode::Kernel | ReplayMode::Application) {
        return;
    }
    const NOT_NCCL: &str = "^(?!nccl)";
    let note = "a rank of a job: NCCL's kernels (nccl*) are left out of ncu's kernel filter (pipeline.ncu.comm_kernels=true keeps them)";
    match &mut plan.kernel_filter {
        None => {
            plan.kernel_filter = Some(KernelFilter {
                source: "no_nccl".into(),
                kernels: Vec::new(),
                expression: format!("regex:{NOT_NCCL}"),
            })
        }
        Some(f) => match f.expression.strip_prefix("regex:") {
            Some(re) => f.expression = format!("regex:{NOT_NCCL}(?:{re})"),
            None => return,
        },
    }
    plan.notes.push(note.into());
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
            // Each name as nsys spells it or as ncu does (namespaces and literal casts optional).
            expression: format!(
                "regex:^(?:{})$",
                names
                    .iter()
                    .map(|n| crate::kernel_names::spelling_regex(n, escape_regex))
                    .collect::<Vec<_>>()
                    .join("|")
            ),
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
        let passes: Vec<(usize, Vec<&str>, Vec<&str>)> = p
            .passes
            .iter()
            .map(|p| {
                let sels = p.nvtx_include.iter().map(String::as_str).collect();
                (p.level.unwrap(), sels, p.expressions.iter().map(String::as_str).collect())
            })
            .collect();
        assert_eq!(
            passes,
            [
                (0, vec!["A", "B"], vec!["A/", "B/"]),
                (1, vec!["A::A1"], vec!["A1/"]),
                (1, vec!["LLM@decode_all::decode_step"], vec!["LLM@decode_step/"])
            ]
        );
        let names: Vec<&str> = p.passes.iter().map(|p| p.name.as_str()).collect();
        assert_eq!(names, ["p0", "p1", "p2"]);
        assert!(p.kernel_filter.is_none(), "no kernel filter on ranges");
    }

    /// Selectors with one last name share a pass (ncu matches `A1/` under any
    /// parent); a name nsys saw nested under another goes apart from it.
    #[test]
    fn passes_follow_the_nesting_nsys_found() {
        let found = |p: &str| FoundRegion { path: p.into(), domain: String::new(), style: RangeStyle::PushPop };
        let found = [found("A"), found("A::A1"), found("B"), found("B::A1"), found("C"), found("C::B")];
        let p = plan(&cli("range", &["A::A1", "B::A1", "C"]), RunMode::Deep, None, Some(&found));
        let passes: Vec<Vec<&str>> =
            p.passes.iter().map(|p| p.expressions.iter().map(String::as_str).collect()).collect();
        assert_eq!(passes, [vec!["C/", "A1/"]]);
        assert_eq!(p.passes[0].regions, ["C", "A::A1", "B::A1"]);
        let p = plan(&cli("range", &["B", "C"]), RunMode::Deep, None, Some(&found));
        let passes: Vec<Vec<&str>> =
            p.passes.iter().map(|p| p.expressions.iter().map(String::as_str).collect()).collect();
        assert_eq!(passes, [vec!["B/"], vec!["C/"]], "C::B: a C range holds a B range");
        // nsys saw a start/end range: no trailing slash.
        let se = [FoundRegion { path: "step:1".into(), domain: String::new(), style: RangeStyle::StartEnd }];
        let p = plan(&cli("range", &["step:1"]), RunMode::Deep, None, Some(&se));
        assert_eq!(p.passes[0].expressions, ["step:1"]);
    }

    #[test]
    fn auto_climbs_from_range_to_app_range_to_kernel() {
        let p = plan(&cli("auto", &["A::A1"]), RunMode::Deep, None, None);
        let first = &p.passes[0];
        assert_eq!((first.replay_mode, first.expressions[0].as_str()), (ReplayMode::Range, "A1/"));
        let app = first.next_rung(true).unwrap();
        assert_eq!(
            (app.name.as_str(), app.replay_mode, app.attribution),
            ("p0-app-range", ReplayMode::AppRange, Attribution::Range)
        );
        let kernel = app.next_rung(true).unwrap();
        assert_eq!((kernel.name.as_str(), kernel.replay_mode), ("p0-kernel", ReplayMode::Kernel));
        assert_eq!((kernel.expressions[0].as_str(), kernel.attribution), ("A/A1", Attribution::NvtxStack));
        assert!(kernel.next_rung(true).is_none());
        // An ncu without app-range goes from range to kernel replay.
        assert_eq!(first.next_rung(false).unwrap().name, "p0-kernel");
    }

    #[test]
    fn range_replay_takes_the_regions_nsys_found() {
        let found = [
            FoundRegion { path: "prefill".into(), domain: "LLM".into(), style: RangeStyle::PushPop },
            FoundRegion { path: "decode_all".into(), domain: "LLM".into(), style: RangeStyle::PushPop },
            FoundRegion { path: "decode_all::decode_step".into(), domain: "LLM".into(), style: RangeStyle::PushPop },
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
    fn a_rank_of_a_job_leaves_nccl_out_of_kernel_replay() {
        let top = ["void gemm<float, 4>(int)".to_string()];
        let mut p = plan(&cli("kernel", &[]), RunMode::Light, None, None);
        leave_out_comm(&mut p);
        let f = p.kernel_filter.clone().unwrap();
        assert_eq!((f.source.as_str(), f.expression.as_str()), ("no_nccl", "regex:^(?!nccl)"));
        assert!(p.notes.last().unwrap().contains("pipeline.ncu.comm_kernels=true"));
        // In front of the deep-mode filter, and of a configured regex.
        let mut p = plan(&cli("kernel", &[]), RunMode::Deep, Some(&top), None);
        leave_out_comm(&mut p);
        assert_eq!(p.kernel_filter.unwrap().expression, r"regex:^(?!nccl)(?:^(?:void gemm<float, 4>\(int\))$)");
        let mut c = cli("application", &[]);
        c.kernel_name = Some("ncclDevKernel_AllReduce".into());
        let mut p = plan(&c, RunMode::Light, None, None);
        leave_out_comm(&mut p);
        assert_eq!(
            p.kernel_filter.unwrap().expression,
            "ncclDevKernel_AllReduce",
            "an exact name is the user's choice"
        );
        // Ranges have no kernel filter.
        let mut p = plan(&cli("range", &["A"]), RunMode::Light, None, None);
        leave_out_comm(&mut p);
        assert!(p.kernel_filter.is_none());
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
