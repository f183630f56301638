//! profile: Nsight Compute: region selectors, the `ncu` command line built from
//! `pipeline.ncu.ncu_cli`, and what its log says happened.
//!
//! ncu 2022.3 takes the application right after its options and refuses `--`.
use std::ffi::OsString;
use std::path::Path;

use super::tools::{Tool, Version};
use crate::config::schema::{
    AppReplayMatch, CacheControl, ClockControl, GraphProfiling, KernelNameBase, NcuCli, ReplayMode, TargetProcesses,
};
use crate::error::Error;
use crate::manifest::Diagnosis;
use crate::regions::{self, RangeStyle};
use crate::run_dir::Page;

/// Characters with a meaning in ncu's push/pop expressions (the `--nvtx-include` grammar of the Nsight Compute CLI documentation).
const QUANTIFIERS: &[char] = &['/', '[', ']', '+', '*', '@', ',', '\\'];

/// How ncu uses an NVTX expression.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Matching {
    /// Range and app-range replay: the expression defines the ranges.
    Range,
    /// Kernel and application replay: the expression filters kernels.
    Filter,
}

impl Matching {
    pub(crate) fn of(mode: ReplayMode) -> Matching {
        match mode.is_range() {
            true => Matching::Range,
            false => Matching::Filter,
        }
    }
}

/// Compile a region as reports name it (`A::A1`, `LLM@decode_all`, `decode*`)
/// into the NVTX expression the installed ncu matches. Measured with ncu
/// 2022.3 in range replay, where each matched range leaves a log line
/// (docs/internals.md, "Region selectors"):
/// - a push/pop range needs a trailing `/` (`A/`); a start/end range has none;
/// - in range replay ncu matches no expression of two names (`A/A1/`, `A/A1`,
///   `A/*/A1`, `A/A1]`: 0 ranges), nor `[`/`]`: a nested region is selected by
///   its last name (`A::A1` → `A1/`), which matches that name under any parent;
///   the results' NVTX columns then say which parent it was;
/// - a domain comes first (`LLM@decode_all/`);
/// - globs become `regex:` expressions, anchored, with `:` `/` `@` `[` `]` as
///   `\xNN` escapes (a `:` in a regex matches every range in ncu 2022.3).
///
/// As a kernel filter (kernel and application replay), the documented forms:
/// `A/` for one name, `A/A1` for a nested one (not verifiable without a GPU).
/// `expr:` and `regex:` pass through unchanged.
pub(crate) fn compile_selector(selector: &str, matching: Matching, style: RangeStyle) -> String {
    if let Some(raw) = selector.strip_prefix("expr:") {
        return raw.to_string();
    }
    if selector.starts_with("regex:") {
        return selector.to_string();
    }
    let parsed = regions::Selector::parse(selector);
    let domain = Some(parsed.domain).filter(|d| !d.is_empty());
    let all = &parsed.names;
    let names: &[&str] = match matching {
        Matching::Range => &all[all.len() - 1..],
        Matching::Filter => all,
    };
    let glob = names.iter().any(|n| n.contains(['*', '?']));
    let (sep, last) = match style {
        RangeStyle::PushPop => ("/", if names.len() == 1 { "/" } else { "" }),
        RangeStyle::StartEnd => (",", ""),
    };
    if glob {
        let body: Vec<String> = names.iter().map(|n| format!("^{}$", glob_regex(n))).collect();
        let domain = domain.map(|d| format!("^{}$@", glob_regex(d))).unwrap_or_default();
        return format!("regex:{domain}{}{last}", body.join(sep));
    }
    let body: Vec<String> = names.iter().map(|n| escape(n)).collect();
    let domain = domain.map(|d| format!("{}@", escape(d))).unwrap_or_default();
    format!("{domain}{}{last}", body.join(sep))
}

fn escape(name: &str) -> String {
    name.chars().fold(String::new(), |mut s, c| {
        if QUANTIFIERS.contains(&c) {
            s.push('\\');
        }
        s.push(c);
        s
    })
}

/// A glob as an ECMAScript regex body: `*` any run, `?` one character; the
/// characters of ncu's own grammar as `\xNN` escapes, regex syntax escaped.
fn glob_regex(glob: &str) -> String {
    glob.chars().fold(String::new(), |mut s, c| {
        match c {
            '*' => s.push_str(".*"),
            '?' => s.push('.'),
            ':' | '/' | '@' | '[' | ']' | ',' => s.push_str(&format!("\\x{:02x}", c as u32)),
            c => push_escaped(&mut s, c),
        }
        s
    })
}

/// Characters with a meaning in ncu's (ECMAScript) regular expressions.
const REGEX_META: &str = r"\^$.|?*+()[]{}";

/// A name as an ncu regular expression that matches it alone (`--kernel-name regex:`).
pub(crate) fn escape_regex(name: &str) -> String {
    name.chars().fold(String::with_capacity(name.len()), |mut s, c| {
        push_escaped(&mut s, c);
        s
    })
}

fn push_escaped(s: &mut String, c: char) {
    if REGEX_META.contains(c) {
        s.push('\\');
    }
    s.push(c);
}

/// Refuse what the installed ncu cannot do, before running it.
/// The application under ncu: what its `TreeLauncherSubreaper` started
/// (`ncu` → `TreeLauncherSubreaper` → the application, ncu 2022.3).
pub(crate) fn application_of(ncu_pid: i32) -> Vec<i32> {
    crate::process::started_by_launcher(ncu_pid, "TreeLauncherSub")
}

pub(crate) fn check_version(cli: &NcuCli, tool: &Tool) -> Result<(), Error> {
    let need = |what: &str, since: Version, fallback: &str| {
        Error::config(format!("{what} needs Nsight Compute {since} or later; the installed ncu is {}", tool.version))
            .with_hint(fallback.to_string())
    };
    match cli.replay_mode {
        ReplayMode::Range | ReplayMode::Auto if !tool.has_range_replay() => Err(need(
            "--replay-mode range",
            Version::new(2022, 1, 0),
            "use --replay-mode kernel (NVTX filters still apply)",
        )),
        ReplayMode::AppRange if !tool.has_app_range_replay() => Err(need(
            "--replay-mode app-range",
            Version::new(2023, 1, 0),
            "use --replay-mode range, or kernel replay with NVTX filters",
        )),
        _ => Ok(()),
    }
}

/// The options llmperf puts on an ncu command line (up to `--export` and its
/// value) that `help` (the installed ncu's `--help`) does not list.
pub(crate) fn unsupported_flags(argv: &[OsString], help: &str) -> Vec<String> {
    let mut flags = Vec::new();
    for a in argv.iter().skip(1).map(|a| a.to_string_lossy()) {
        if a.starts_with("--") {
            flags.push(a.to_string());
        }
        if a == "--export" {
            break;
        }
    }
    flags
        .into_iter()
        .filter(|f| {
            let declared = format!(r"(?m)^\s+(?:-\S+ \[ )?{}(?:\s|$)", regex::escape(f));
            !regex::Regex::new(&declared).is_ok_and(|re| re.is_match(help))
        })
        .collect()
}

/// Refuse options the installed ncu does not have, naming them.
pub(crate) fn check_flags(cli: &NcuCli, tool: &Tool) -> Result<(), Error> {
    let Some(help) = tool.help_text() else { return Ok(()) };
    let argv = profile_argv(&tool.path, cli, Path::new("p0"), Path::new("p0.log"), &[]);
    let missing = unsupported_flags(&argv, help);
    if missing.is_empty() {
        return Ok(());
    }
    Err(Error::config(format!(
        "the installed ncu {} has no {}: it would refuse the command line",
        tool.version,
        missing.join(", ")
    ))
    .with_hint("drop the matching pipeline.ncu.ncu_cli keys (see `ncu --help`), or install a newer Nsight Compute"))
}

/// `ncu ... -o <output_base> <app...>` for one pass.
pub fn profile_argv(ncu: &Path, cli: &NcuCli, output_base: &Path, log: &Path, app: &[OsString]) -> Vec<OsString> {
    let mut a: Vec<String> = Vec::new();
    let target = match cli.target_processes {
        TargetProcesses::All => "all",
        TargetProcesses::ApplicationOnly => "application-only",
    };
    a.extend(["--target-processes".into(), target.into()]);
    a.extend(["--replay-mode".into(), cli.replay_mode.as_str().into()]);
    if let Some(m) = cli.app_replay_match {
        let m = match m {
            AppReplayMatch::Name => "name",
            AppReplayMatch::Grid => "grid",
            AppReplayMatch::All => "all",
        };
        a.extend(["--app-replay-match".into(), m.into()]);
    }
    // Kernel and application replay always record NVTX: each kernel row then
    // carries its push/pop stack, which is how kernels find their regions.
    let per_kernel = matches!(cli.replay_mode, ReplayMode::Kernel | ReplayMode::Application);
    if per_kernel || !cli.nvtx.include.is_empty() || !cli.nvtx.exclude.is_empty() {
        a.push("--nvtx".into());
        let matching = Matching::of(cli.replay_mode);
        for s in &cli.nvtx.include {
            a.extend(["--nvtx-include".into(), compile_selector(s, matching, RangeStyle::PushPop)]);
        }
        // An exclude removes kernels or ranges wherever the name is on the stack.
        for s in &cli.nvtx.exclude {
            a.extend(["--nvtx-exclude".into(), compile_selector(s, Matching::Filter, RangeStyle::PushPop)]);
        }
    }
    if let Some(set) = &cli.set {
        a.extend(["--set".into(), set.clone()]);
    }
    for s in &cli.sections {
        a.extend(["--section".into(), s.clone()]);
    }
    if !cli.metrics.is_empty() {
        a.extend(["--metrics".into(), cli.metrics.join(",")]);
    }
    if let Some(k) = &cli.kernel_name {
        a.extend(["--kernel-name".into(), k.clone()]);
        let base = match cli.kernel_name_base {
            KernelNameBase::Function => "function",
            KernelNameBase::Demangled => "demangled",
            KernelNameBase::Mangled => "mangled",
        };
        a.extend(["--kernel-name-base".into(), base.into()]);
    }
    let mut opt = |flag: &str, v: Option<String>| {
        if let Some(v) = v {
            a.extend([flag.to_string(), v]);
        }
    };
    opt("--kernel-id", cli.kernel_id.clone());
    opt("--launch-skip", cli.launch_skip.map(|n| n.to_string()));
    opt("--launch-count", cli.launch_count.map(|n| n.to_string()));
    opt("--clock-control", cli.clock_control.map(|c| if c == ClockControl::Base { "base" } else { "none" }.into()));
    opt("--cache-control", cli.cache_control.map(|c| if c == CacheControl::All { "all" } else { "none" }.into()));
    opt(
        "--graph-profiling",
        cli.graph_profiling.map(|g| if g == GraphProfiling::Node { "node" } else { "graph" }.into()),
    );
    if cli.force_overwrite {
        a.push("--force-overwrite".into());
    }
    a.extend(["--log-file".into(), log.display().to_string()]);
    a.extend(["--export".into(), output_base.display().to_string()]);
    a.extend(cli.extra_args.iter().cloned());
    let mut argv: Vec<OsString> = vec![ncu.into()];
    argv.extend(a.into_iter().map(OsString::from));
    argv.extend(app.iter().cloned());
    argv
}

/// `ncu --import REPORT --csv --page raw|details`: both pages in base units
/// (the default units round a duration to two decimals, `29.34 usecond` of
/// 29344 ns), the details page with metric names where this ncu can print
/// them (2022.4+).
pub(crate) fn import_argv(tool: &Tool, report: &Path, page: Page) -> Vec<OsString> {
    let mut argv: Vec<OsString> = vec![
        tool.path.clone().into(),
        "--import".into(),
        report.into(),
        "--csv".into(),
        "--page".into(),
        page.name().into(),
    ];
    if page != Page::Session {
        argv.extend(["--print-units", "base"].map(OsString::from));
    }
    if page == Page::Details && tool.has_print_metric_name() {
        argv.extend(["--print-metric-name", "name"].map(OsString::from));
    }
    argv
}

/// The ranges ncu's NVTX filter matched but could not profile, one log line
/// each (`Skipping invalid capture range (RecordStatusEmpty)` on a host
/// without CUDA work, `(RecordStatusUnsupportedApi)` around an unsupported
/// call): on a CPU host, the number of ranges the filter matched.
pub(crate) fn skipped_ranges(log: &str) -> usize {
    log.matches("Skipping invalid capture range").count()
}

/// The `Profiler Command Line` of a `--page session` CSV: how the report was
/// made (`"Profiler Command Line","/opt/.../ncu ... --replay-mode app-range ..."`).
pub(crate) fn profiler_command_line(session_csv: &str) -> Option<String> {
    let line = session_csv.lines().find(|l| l.starts_with("\"Profiler Command Line\","))?;
    let mut rdr = csv::ReaderBuilder::new().has_headers(false).from_reader(line.as_bytes());
    rdr.records().next()?.ok()?.get(1).map(str::to_string)
}

/// The codes of the diagnoses [`diagnose`] finds in an ncu log (manifest
/// `diagnoses[].code`), for the stages that act on them.
pub(crate) mod code {
    /// Ranges matched but held no CUDA work.
    pub(crate) const EMPTY_RANGES: &str = "empty_ranges";
    /// Range replay met a CUDA call it cannot capture.
    pub(crate) const UNSUPPORTED_API: &str = "unsupported_api";
    /// No range matched the expressions: the selector is the cause.
    pub(crate) const NO_RANGE_MATCHED: &str = "no_range_matched";
    /// No range matched, and nsys saw the regions launch no kernel: no CUDA
    /// work for ncu to define a range by (set by the ncu stage, not the log).
    pub(crate) const NO_CUDA_IN_RANGES: &str = "no_cuda_in_ranges";
    pub(crate) const NO_RANGES_PROFILED: &str = "no_ranges_profiled";
    pub(crate) const NO_KERNELS_PROFILED: &str = "no_kernels_profiled";
    /// `ERR_NVGPUCTRPERM`.
    pub(crate) const COUNTER_PERMISSION: &str = "counter_permission";
    pub(crate) const UNKNOWN_SECTION: &str = "unknown_section";
}

/// Known outcomes in an ncu log, each with what to do about it.
/// Driver calls that ncu's range replay refuses and that a program makes when
/// it first uses something: its context, a lazily loaded kernel (CUDA 12.2+
/// loads modules lazily by default), a library. On an H200 with ncu 2025.3.1
/// the demo workload's first range held `cuDevicePrimaryCtxRetain`; after a
/// warm-up of one shape, a new shape's first launch held `cuKernelSetAttribute`
/// (tests/fixtures/gpu/h200-ncu2025.3.1/).
const FIRST_USE_CALLS: [&str; 8] = [
    "cuInit",
    "cuDevicePrimaryCtxRetain",
    "cuCtxCreate",
    "cuKernelSetAttribute",
    "cuFuncSetAttribute",
    "cuModuleLoad",
    "cuLibraryLoad",
    "cuModuleGetFunction",
];

/// ncu's log of one pass as diagnoses: `cli` is the command line it ran
/// (the expressions llmperf compiled), `selectors` the pass's regions as the
/// user or nsys named them.
pub(crate) fn diagnose(log: &str, cli: &NcuCli, selectors: &[String]) -> Vec<Diagnosis> {
    let mut out = Vec::new();
    let mut add = |code: &str, message: String, hint: String| out.push(Diagnosis { code: code.into(), message, hint });
    let empty_ranges = log.matches("Skipping invalid capture range (RecordStatusEmpty)").count();
    if empty_ranges > 0 {
        add(
            code::EMPTY_RANGES,
            format!("{empty_ranges} matching range(s) held no CUDA work"),
            "the region ran no kernels on this device (a CPU-only host or device=cpu?)".into(),
        );
    }
    let mut unsupported: Vec<&str> = log
        .lines()
        .filter_map(|l| l.split_once("Unsupported API during capture (").map(|(_, r)| r.trim_end_matches(')')))
        .collect();
    unsupported.sort();
    unsupported.dedup();
    if !unsupported.is_empty() {
        let first_use = unsupported.iter().any(|c| FIRST_USE_CALLS.iter().any(|f| c.starts_with(f)));
        let hint = match first_use {
            true => "a set-up call (context creation, a kernel's first launch under lazy module loading, a library's first use) falls inside the range: run the region's work once before the profiled ranges (a warm-up outside every range), or use --replay-mode auto (app-range, then kernel replay with the same regions)",
            false => "use --replay-mode auto (app-range, then kernel replay with the same regions), or narrow the region to the kernels",
        };
        add(
            code::UNSUPPORTED_API,
            format!("range replay cannot capture a call inside the range: {}", unsupported.join(", ")),
            hint.into(),
        );
    }
    if log.contains("No ranges were profiled") && skipped_ranges(log) == 0 {
        let expressions: Vec<&str> = cli.nvtx.include.iter().map(|s| s.strip_prefix("expr:").unwrap_or(s)).collect();
        add(
            code::NO_RANGE_MATCHED,
            if expressions.is_empty() {
                "no range was marked: without regions, range replay profiles what cu(da)ProfilerStart/Stop enclose".into()
            } else {
                format!("no NVTX range matched {}", expressions.join(", "))
            },
            "the selector is the cause: check the region names against nsys/regions.json (llmperf checks them before ncu when nsys runs), and write nested regions as A::A1 and named domains as LLM@decode_all".into(),
        );
    } else if log.contains("No ranges were profiled") {
        add(
            code::NO_RANGES_PROFILED,
            "ncu profiled no ranges".into(),
            "in range replay a range must enclose CUDA work and only supported API calls: try --replay-mode auto (app-range on ncu 2023.1+, then kernel replay with the same NVTX filter)".into(),
        );
    }
    if log.contains("No kernels were profiled") {
        let bare = bare_names(selectors);
        let hint = if !bare.is_empty() {
            format!(
                "push/pop ranges need a trailing '/': {} (or write the region without expr:)",
                bare.iter().map(|e| format!("{e}/")).collect::<Vec<_>>().join(", ")
            )
        } else {
            "no kernel matched: check the NVTX filter and kernel name filter, and that the application runs CUDA kernels on this host".into()
        };
        add(code::NO_KERNELS_PROFILED, "ncu profiled no kernels".into(), hint);
    }
    if log.contains("ERR_NVGPUCTRPERM") {
        add(
            code::COUNTER_PERMISSION,
            "no permission to read GPU performance counters (ERR_NVGPUCTRPERM)".into(),
            super::tools::COUNTER_PERMISSION_HINT.into(),
        );
    }
    if let Some(line) = log.lines().find(|l| l.contains("did not match any section")) {
        add(
            code::UNKNOWN_SECTION,
            line.trim_start_matches("==ERROR== ").to_string(),
            "list this ncu's sections with `ncu --list-sections` and fix pipeline.ncu.ncu_cli.sections".into(),
        );
    }
    out
}

/// The user's raw `expr:` selectors of one name without the trailing `/` a
/// push/pop range needs (`decode`, meant as `decode/`: the most common
/// mistake; docs/internals.md, "Region selectors"). Not an expression of
/// several names (`A/A1`, the documented kernel filter for a nested range),
/// of start/end ranges (`A,B`), a regex, nor a region llmperf compiled itself
/// (it knows the range's style).
fn bare_names(selectors: &[String]) -> Vec<&str> {
    selectors
        .iter()
        .filter_map(|s| s.strip_prefix("expr:"))
        .filter(|e| !e.is_empty() && !e.starts_with("regex:") && !has_unescaped(e, &['/', ',']))
        .collect()
}

/// Whether `expr` has one of `chars` not escaped by a `\`.
fn has_unescaped(expr: &str, chars: &[char]) -> bool {
    let mut escaped = false;
    expr.chars().any(|c| {
        let special = !escaped && chars.contains(&c);
        escaped = !escaped && c == '\\';
        special
    })
}

/// `ncu --list-sections` of ncu 2022.3 (tests/fixtures/ncu/list-sections.ncu2022.3.txt,
/// checked against it in tests):
/// the identifier a user configures → the name the CSV prints.
const SECTIONS: &[(&str, &str)] = &[
    ("ComputeWorkloadAnalysis", "Compute Workload Analysis"),
    ("InstructionStats", "Instruction Statistics"),
    ("LaunchStats", "Launch Statistics"),
    ("MemoryWorkloadAnalysis", "Memory Workload Analysis"),
    ("MemoryWorkloadAnalysis_Chart", "Memory Workload Analysis Chart"),
    ("MemoryWorkloadAnalysis_Deprecated", "(Deprecated) Memory Workload Analysis"),
    ("MemoryWorkloadAnalysis_Tables", "Memory Workload Analysis Tables"),
    ("Nvlink", "NVLink"),
    ("Nvlink_Tables", "NVLink Tables"),
    ("Nvlink_Topology", "NVLink Topology"),
    ("Occupancy", "Occupancy"),
    ("SchedulerStats", "Scheduler Statistics"),
    ("SourceCounters", "Source Counters"),
    ("SpeedOfLight", "GPU Speed Of Light Throughput"),
    (
        "SpeedOfLight_HierarchicalDoubleRooflineChart",
        "GPU Speed Of Light Hierarchical Roofline Chart (Double Precision)",
    ),
    ("SpeedOfLight_HierarchicalHalfRooflineChart", "GPU Speed Of Light Hierarchical Roofline Chart (Half Precision)"),
    (
        "SpeedOfLight_HierarchicalSingleRooflineChart",
        "GPU Speed Of Light Hierarchical Roofline Chart (Single Precision)",
    ),
    ("SpeedOfLight_HierarchicalTensorRooflineChart", "GPU Speed Of Light Hierarchical Roofline Chart (Tensor Core)"),
    ("SpeedOfLight_RooflineChart", "GPU Speed Of Light Roofline Chart"),
    ("WarpStateStats", "Warp State Statistics"),
];

/// A section identifier's display name; a display name (or an identifier
/// newer than the table) passes through.
pub(crate) fn section_display_name(id: &str) -> &str {
    SECTIONS.iter().find(|(i, _)| *i == id).map_or(id, |(_, d)| d)
}

#[cfg(test)]
mod tests;
