use super::*;
use crate::config::{load, LoadOptions};

fn cli(overrides: &[&str]) -> NcuCli {
    let opts = LoadOptions { overrides: overrides.iter().map(|s| s.to_string()).collect(), ..Default::default() };
    load(&opts).unwrap().config.pipeline.ncu.ncu_cli
}

fn argv(c: &NcuCli) -> Vec<String> {
    profile_argv(
        Path::new("ncu"),
        c,
        Path::new("run/ncu/p0"),
        Path::new("run/ncu/p0.log"),
        &["app".into(), "-x".into()],
    )
    .into_iter()
    .map(|s| s.into_string().unwrap())
    .collect()
}

fn has_pair(a: &[String], flag: &str, value: &str) -> bool {
    a.windows(2).any(|w| w[0] == flag && w[1] == value)
}

const RANGE: Matching = Matching::Range;
const FILTER: Matching = Matching::Filter;
const PUSH_POP: RangeStyle = RangeStyle::PushPop;
const START_END: RangeStyle = RangeStyle::StartEnd;

/// Range replay: what ncu 2022.3 matched here (tests/ncu_matching.rs counts it).
#[test]
fn range_selectors_compile_to_the_last_name() {
    let c = |s: &str| compile_selector(s, RANGE, PUSH_POP);
    assert_eq!(c("A"), "A/");
    assert_eq!(c("A::A1"), "A1/");
    assert_eq!(c("LLM@decode_all"), "LLM@decode_all/");
    assert_eq!(c("LLM@decode_all::decode_step"), "LLM@decode_step/");
    assert_eq!(compile_selector("compute_kernel:profile", RANGE, START_END), "compute_kernel:profile");
    // Quantifier characters inside names are escaped.
    assert_eq!(c("conv[1]/relu"), r"conv\[1\]\/relu/");
    assert_eq!(c("a+b,c@"), r"a\+b\,c\@/");
}

#[test]
fn globs_compile_to_anchored_regexes() {
    assert_eq!(compile_selector("decode*", RANGE, PUSH_POP), "regex:^decode.*$/");
    assert_eq!(compile_selector("*", RANGE, PUSH_POP), "regex:^.*$/");
    assert_eq!(compile_selector("LLM@decode_all::layer_?", RANGE, PUSH_POP), "regex:^LLM$@^layer_.$/");
    // A `:` in an ncu 2022.3 regex matched every range here: written as \x3a.
    assert_eq!(compile_selector("se:r*", RANGE, START_END), r"regex:^se\x3ar.*$");
    assert_eq!(compile_selector("a.b(c)*", RANGE, PUSH_POP), r"regex:^a\.b\(c\).*$/");
}

/// Kernel and application replay: the documented filter forms (unverifiable
/// without kernels).
#[test]
fn filter_selectors_keep_the_whole_path() {
    assert_eq!(compile_selector("A", FILTER, PUSH_POP), "A/");
    assert_eq!(compile_selector("A::A1", FILTER, PUSH_POP), "A/A1");
    assert_eq!(compile_selector("LLM@decode_all::decode_step", FILTER, PUSH_POP), "LLM@decode_all/decode_step");
    assert_eq!(compile_selector("A::decode*", FILTER, PUSH_POP), "regex:^A$/^decode.*$");
}

#[test]
fn raw_expressions_pass_through() {
    // Expression examples of the Nsight Compute CLI documentation, given raw.
    for raw in ["A/", "[A", "B]", "A/+/C", "A/*/C", "Domain@A/", "A,B", "A"] {
        for m in [RANGE, FILTER] {
            assert_eq!(compile_selector(&format!("expr:{raw}"), m, PUSH_POP), raw);
        }
    }
    assert_eq!(compile_selector("regex:Domain[A-Z]@Range[0-9]/", RANGE, PUSH_POP), "regex:Domain[A-Z]@Range[0-9]/");
}

/// The real `--page session` export of an ncu 2025.3.1 app-range report.
#[test]
fn the_session_page_proves_the_replay_mode() {
    let Some(path) = crate::testdata::corpus(
        "the_session_page_proves_the_replay_mode",
        "real/cfregly-ai-perf/ncu_app_range_session.csv",
    ) else {
        return;
    };
    let cmd = profiler_command_line(&std::fs::read_to_string(path).unwrap()).unwrap();
    assert!(cmd.starts_with("/opt/nvidia/nsight-compute/2025.3.1/ncu --force-overwrite"), "{cmd}");
    assert!(cmd.contains("--replay-mode app-range") && cmd.contains("--nvtx-include compute_kernel:profile"), "{cmd}");
    assert_eq!(profiler_command_line("\"Launch Attribute\",\"Value\"\n"), None);
}

#[test]
fn default_command_line() {
    let a = argv(&cli(&[]));
    assert_eq!(&a[..5], ["ncu", "--target-processes", "all", "--replay-mode", "kernel"]);
    assert!(has_pair(&a, "--set", "roofline"));
    assert!(has_pair(&a, "--section", "SpeedOfLight") && has_pair(&a, "--section", "Occupancy"));
    assert!(has_pair(&a, "--metrics", "gpu__time_duration.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed,dram__throughput.avg.pct_of_peak_sustained_elapsed"));
    assert!(has_pair(&a, "--export", "run/ncu/p0") && has_pair(&a, "--log-file", "run/ncu/p0.log"));
    assert!(a.contains(&"--nvtx".to_string()), "kernel rows carry their NVTX stacks");
    let range = argv(&cli(&["pipeline.ncu.ncu_cli.replay_mode=range"]));
    assert!(!range.contains(&"--nvtx".to_string()), "range replay without filters: cudaProfilerStart/Stop ranges");
    assert_eq!(&a[a.len() - 2..], ["app", "-x"]);
}

#[test]
fn each_option_maps_to_its_flag() {
    let cases: &[(&[&str], &str, &str)] = &[
        (&["pipeline.ncu.ncu_cli.replay_mode=range"], "--replay-mode", "range"),
        (&["pipeline.ncu.ncu_cli.replay_mode=app-range"], "--replay-mode", "app-range"),
        (
            &["pipeline.ncu.ncu_cli.replay_mode=application", "pipeline.ncu.ncu_cli.app_replay_match=name"],
            "--app-replay-match",
            "name",
        ),
        (&["pipeline.ncu.ncu_cli.target_processes=application-only"], "--target-processes", "application-only"),
        (&["pipeline.ncu.ncu_cli.nvtx.include=[A::A1]"], "--nvtx-include", "A/A1"),
        (&["pipeline.ncu.ncu_cli.nvtx.exclude=[B]"], "--nvtx-exclude", "B/"),
        (&["pipeline.ncu.ncu_cli.set=full"], "--set", "full"),
        (&["pipeline.ncu.ncu_cli.sections=[LaunchStats]"], "--section", "LaunchStats"),
        (&["pipeline.ncu.ncu_cli.metrics=[a.sum,b.max]"], "--metrics", "a.sum,b.max"),
        (&["pipeline.ncu.ncu_cli.kernel_name=\"regex:gemm\""], "--kernel-name", "regex:gemm"),
        (
            &["pipeline.ncu.ncu_cli.kernel_name=k", "pipeline.ncu.ncu_cli.kernel_name_base=function"],
            "--kernel-name-base",
            "function",
        ),
        (&["pipeline.ncu.ncu_cli.kernel_id=\"::regex:gemm:2\""], "--kernel-id", "::regex:gemm:2"),
        (&["pipeline.ncu.ncu_cli.launch_skip=5"], "--launch-skip", "5"),
        (&["pipeline.ncu.ncu_cli.launch_count=1"], "--launch-count", "1"),
        (&["pipeline.ncu.ncu_cli.clock_control=none"], "--clock-control", "none"),
        (&["pipeline.ncu.ncu_cli.cache_control=none"], "--cache-control", "none"),
        (&["pipeline.ncu.ncu_cli.graph_profiling=graph"], "--graph-profiling", "graph"),
    ];
    for (overrides, flag, value) in cases {
        let a = argv(&cli(overrides));
        assert!(has_pair(&a, flag, value), "{overrides:?} -> {a:?}");
    }
    let a = argv(&cli(&[
        "pipeline.ncu.ncu_cli.nvtx.include=[A, LLM@prefill]",
        "pipeline.ncu.ncu_cli.set=null",
        "pipeline.ncu.ncu_cli.sections=[]",
        "pipeline.ncu.ncu_cli.force_overwrite=false",
    ]));
    assert_eq!(a.iter().filter(|x| *x == "--nvtx").count(), 1);
    assert!(has_pair(&a, "--nvtx-include", "A/") && has_pair(&a, "--nvtx-include", "LLM@prefill/"));
    assert!(
        !a.contains(&"--set".to_string())
            && !a.contains(&"--section".to_string())
            && !a.contains(&"--force-overwrite".to_string())
    );
}

#[test]
fn versions_without_the_replay_mode_are_refused() {
    let tool = |v| Tool { path: "ncu".into(), version: v, version_text: String::new(), help: Default::default() };
    let here = tool(Version::new(2022, 3, 0));
    assert!(check_version(&cli(&["pipeline.ncu.ncu_cli.replay_mode=range"]), &here).is_ok());
    let err = check_version(&cli(&["pipeline.ncu.ncu_cli.replay_mode=app-range"]), &here).unwrap_err();
    assert_eq!(
        err.message,
        "--replay-mode app-range needs Nsight Compute 2023.1.0 or later; the installed ncu is 2022.3.0"
    );
    assert!(err.hint.is_some());
    let old = tool(Version::new(2021, 3, 0));
    assert!(check_version(&cli(&["pipeline.ncu.ncu_cli.replay_mode=range"]), &old).is_err());
}

#[test]
fn real_logs_become_diagnoses() {
    // Captured here with ncu 2022.3 (tests/fixtures/ncu/PROVENANCE.md).
    let range = include_str!("../../../tests/fixtures/ncu/range_replay_no_gpu.ncu2022.3.log");
    let d = diagnose(range, &cli(&[]), &[]);
    let codes: Vec<_> = d.iter().map(|d| d.code.as_str()).collect();
    assert_eq!(codes, ["empty_ranges", "no_ranges_profiled"]);
    assert_eq!(d[0].message, "5 matching range(s) held no CUDA work");
    let kernel = include_str!("../../../tests/fixtures/ncu/kernel_replay_no_kernels.ncu2022.3.log");
    assert_eq!(diagnose(kernel, &cli(&[]), &[])[0].code, "no_kernels_profiled");
    let perm =
        "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters";
    assert!(diagnose(perm, &cli(&[]), &[])[0].hint.contains("NVreg_RestrictProfilingToAdminUsers"));
}

/// A raw push/pop name without its trailing '/' (the most common mistake) is
/// named with the fix; an expression that needs none is not: one of several
/// names (`A/A1`, what the ladder's kernel pass compiles `A::A1` to, which
/// drew "push/pop ranges need a trailing '/': A/A1/"), a start/end pair, a
/// regex, or a region llmperf compiled from the user's or nsys's name.
#[test]
fn only_a_raw_single_name_is_told_to_add_the_slash() {
    let kernel = include_str!("../../../tests/fixtures/ncu/kernel_replay_no_kernels.ncu2022.3.log");
    let hint = |selectors: &[&str]| {
        let selectors: Vec<String> = selectors.iter().map(|s| s.to_string()).collect();
        let d = diagnose(kernel, &cli(&["pipeline.ncu.ncu_cli.nvtx.include=[\"expr:A/A1\"]"]), &selectors);
        assert_eq!(d[0].code, "no_kernels_profiled");
        d[0].hint.clone()
    };
    let told = |h: &str| h.starts_with("push/pop ranges need a trailing '/'");
    assert_eq!(
        hint(&["expr:decode"]),
        "push/pop ranges need a trailing '/': decode/ (or write the region without expr:)"
    );
    assert!(hint(&["expr:LLM@decode", "expr:B/"]).contains(": LLM@decode/ (or"));
    assert!(hint(&[r"expr:a\/b"]).contains(r": a\/b/ (or"), "an escaped '/' is part of the name");
    for fine in [&["A::A1"][..], &["expr:A/A1"], &["expr:A/"], &["expr:A,B"], &["expr:regex:^A$"], &["B"], &[]] {
        let h = hint(fine);
        assert!(!told(&h) && h.starts_with("no kernel matched"), "{fine:?}: {h}");
    }
}

/// ncu 2025.3.1 on an H200 refused the demo's first range: the first launch
/// of a kernel (lazily loaded) inside it. The hint says to warm up.
#[test]
fn a_refused_first_launch_asks_for_a_warm_up() {
    let log =
        include_str!("../../../tests/fixtures/gpu/h200-ncu2025.3.1/runs/range/20261126T033401Z-f9ddb5/ncu/p0.log");
    let d = diagnose(log, &cli(&["pipeline.ncu.ncu_cli.replay_mode=range"]), &[]);
    let refused = d.iter().find(|d| d.code == code::UNSUPPORTED_API).unwrap();
    assert_eq!(refused.message, "range replay cannot capture a call inside the range: cuKernelSetAttribute");
    assert!(refused.hint.contains("warm-up outside every range"), "{}", refused.hint);
    let other = log.replace("cuKernelSetAttribute", "cuStreamBeginCapture");
    let d = diagnose(&other, &cli(&["pipeline.ncu.ncu_cli.replay_mode=range"]), &[]);
    let refused = d.iter().find(|d| d.code == code::UNSUPPORTED_API).unwrap();
    assert!(!refused.hint.contains("warm-up"), "{}", refused.hint);
}

/// An "ncu CSV" of llm-perf-opt (ncu 2025.1) that holds only the log lines.
#[test]
fn a_real_error_only_log_names_the_unknown_section() {
    let Some(path) = crate::testdata::corpus("a_real_error_only_log_names_the_unknown_section", ERROR_ONLY) else {
        return;
    };
    let error_only = std::fs::read_to_string(path).unwrap();
    assert_eq!(diagnose(&error_only, &cli(&[]), &[])[0].code, "unknown_section");
}

const ERROR_ONLY: &str = "llm-perf-opt/outputs/2025-10-30/05-23-00/ncu/raw.csv";

/// `ncu --list-sections` of ncu 2022.3, captured on this project's machine.
#[test]
fn section_table_matches_the_recorded_listing() {
    let listing = std::fs::read_to_string(crate::testdata::own("ncu/list-sections.ncu2022.3.txt")).unwrap();
    let rows: Vec<&str> = listing.lines().skip(3).filter(|l| !l.starts_with('-')).collect();
    assert_eq!(rows.len(), SECTIONS.len());
    for (id, display) in SECTIONS {
        let row = rows.iter().find(|l| l.split_whitespace().next() == Some(id)).unwrap();
        assert!(row.contains(display), "{row}");
        assert_eq!(section_display_name(id), *display);
    }
    assert_eq!(section_display_name("GPU Speed Of Light Throughput"), "GPU Speed Of Light Throughput");
}

#[test]
fn flags_missing_from_the_installed_ncu_are_named() {
    let help =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/ncu/help.ncu2022.3.txt")).unwrap();
    let all = cli(&[
        "pipeline.ncu.ncu_cli.graph_profiling=node",
        "pipeline.ncu.ncu_cli.kernel_name=regex:gemm",
        "pipeline.ncu.ncu_cli.clock_control=none",
        "pipeline.ncu.ncu_cli.launch_count=3",
        "pipeline.ncu.ncu_cli.nvtx.include=[A]",
    ]);
    let a: Vec<std::ffi::OsString> = argv(&all).into_iter().map(Into::into).collect();
    // ncu 2022.3 has every flag but --graph-profiling (a later addition).
    assert_eq!(unsupported_flags(&a, &help), ["--graph-profiling"]);
    let a: Vec<std::ffi::OsString> = argv(&cli(&[])).into_iter().map(Into::into).collect();
    assert!(unsupported_flags(&a, &help).is_empty());
}
