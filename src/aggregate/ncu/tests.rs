//! Region attribution and roll-up on real ncu files (the shared corpus).
use super::*;
use crate::parse::ncu as reader;

fn opts() -> Options {
    Options { aggregate: true, ..Options::default() }
}

/// The scopes of a corpus file read whole, or None when the corpus lacks it
/// (the test then returns, recorded as skipped).
fn scopes(file: &str, opts: Options, how: Attribution, regions: &[&str]) -> Option<Vec<ScopeReport>> {
    let path = crate::testdata::corpus(&format!("aggregate::ncu::tests ({file})"), file)?;
    let regions: Vec<String> = regions.iter().map(|r| r.to_string()).collect();
    let mut b = Builder::new(opts);
    let (_, launches) = reader::open_any(&path).unwrap();
    for l in launches {
        b.add_launch(&l.unwrap(), how, &regions);
    }
    Some(b.finish(&Stamp::default()))
}

fn region<'a>(scope: &'a ScopeReport, name: &str) -> &'a RegionEntry {
    scope.regions.iter().find(|r| r.name == name).unwrap_or_else(|| panic!("no region {name}"))
}

fn metric<'a>(r: &'a RegionEntry, name: &str) -> &'a MetricValue {
    r.metrics.iter().find(|m| m.name == name).unwrap_or_else(|| panic!("no metric {name} in {}", r.name))
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-9 * b.abs().max(1.0)
}

const NVTX_DETAILS: &str = "real/derived/nsight-training/manual_nvtx.ncu2022.3.details.csv";
const NO_NVTX_DETAILS: &str = "real/derived/parallel_programming_ex3/profile.ncu2024.1.details.csv";

#[test]
fn nvtx_stacks_nest_and_parents_include_their_children() {
    let Some(all) = scopes(NVTX_DETAILS, opts(), Attribution::NvtxStack, &[]) else { return };
    let agg = &all[0];
    assert_eq!(agg.scope, "aggregate");
    let names: Vec<&str> = agg.regions.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names, ["run_test", "run_test::check_results", "run_test::daxpy", "run_test::init_data"]);
    let top = region(agg, "run_test");
    assert_eq!((top.depth, top.parent.as_deref()), (0, None));
    // Durations in the file: 84.48 + 249.22 + 88.51 usecond.
    assert!(close(top.inclusive.gpu_time_ms, 0.42221), "{}", top.inclusive.gpu_time_ms);
    assert_eq!(top.inclusive.calls, 3);
    assert_eq!(top.exclusive, Some(Totals::default()));
    let daxpy = region(agg, "run_test::daxpy");
    assert_eq!((daxpy.depth, daxpy.parent.as_deref()), (1, Some("run_test")));
    assert!(close(daxpy.inclusive.gpu_time_ms, 0.24922));
    assert_eq!(daxpy.kernels[0].kernel_name, "daxpy_kernel(int, double, double *, double *)");
    // Inclusive parent = children + self, within ±1% (exactly, here).
    let children: f64 = agg.regions.iter().filter(|r| r.depth == 1).map(|r| r.inclusive.gpu_time_ms).sum();
    let own = top.exclusive.as_ref().unwrap().gpu_time_ms;
    assert!(((children + own) - top.inclusive.gpu_time_ms).abs() <= 0.01 * top.inclusive.gpu_time_ms);
    assert_eq!(agg.totals.calls, 3);
}

#[test]
fn metrics_roll_up_by_kind() {
    let Some(all) = scopes(NVTX_DETAILS, opts(), Attribution::NvtxStack, &[]) else { return };
    let top = region(&all[0], "run_test");
    // Counts add: Elapsed Cycles 124056 + 379490 + 122573.
    let cycles = metric(top, "Elapsed Cycles");
    assert_eq!((cycles.rollup, cycles.value), (Rollup::Sum, Some(626119.0)));
    // Percentages are weighted by GPU time: (88.20·84.48 + 90.72·249.22 + 94.74·88.51) / 422.21.
    let dram = metric(top, "DRAM Throughput");
    assert_eq!(dram.rollup, Rollup::WeightedMean);
    assert!(close(dram.value.unwrap(), 38445.8118 / 422.21), "{:?}", dram.value);
    // Launch configuration is weighted too, never summed: registers 16, 16, 32.
    let regs = metric(top, "Registers Per Thread");
    assert!(close(regs.value.unwrap(), 8171.52 / 422.21));
    // Durations add, in nanoseconds.
    let d = metric(top, "Duration");
    assert_eq!((d.unit.as_str(), d.rollup), ("ns", Rollup::Sum));
    assert!(close(d.value.unwrap(), 422210.0));
}

#[test]
fn not_available_stays_not_available() {
    // gpu-ray-tracer: 27 n/a values in the file.
    let Some(all) =
        scopes("real/derived/gpu-ray-tracer/report.ncu2022.3.details.csv", opts(), Attribution::NvtxStack, &[])
    else {
        return;
    };
    let r = region(&all[0], UNATTRIBUTED);
    let na: Vec<&MetricValue> = r.metrics.iter().filter(|m| m.not_available > 0).collect();
    assert!(!na.is_empty());
    for m in na.iter().filter(|m| m.samples == 0) {
        assert_eq!(m.value, None, "{} must stay n/a, not 0", m.name);
    }
}

#[test]
fn raw_and_details_pages_of_one_report_agree() {
    let Some(details) = scopes(NVTX_DETAILS, opts(), Attribution::NvtxStack, &[]) else { return };
    for raw in ["manual_nvtx.ncu2022.3.raw.csv", "manual_nvtx.ncu2024.1.raw.csv"] {
        let Some(raw) = scopes(&format!("real/derived/nsight-training/{raw}"), opts(), Attribution::NvtxStack, &[])
        else {
            return;
        };
        for (d, r) in details[0].regions.iter().zip(&raw[0].regions) {
            assert_eq!(d.name, r.name);
            assert_eq!(d.inclusive.calls, r.inclusive.calls);
            // The details page rounds to 2 decimals (84.48 us); raw keeps every digit.
            let (a, b) = (d.inclusive.gpu_time_ms, r.inclusive.gpu_time_ms);
            assert!((a - b).abs() <= 1e-4 * a, "{}: {a} vs {b}", d.name);
        }
    }
}

#[test]
fn kernel_selection_include_exclude() {
    if crate::testdata::corpus("kernel_selection_include_exclude", NVTX_DETAILS).is_none() {
        return;
    }
    let select = |inc: &[&str], exc: &[&str]| {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        let o = Options { selection: Selection::new(&s(inc), &s(exc)).unwrap(), ..opts() };
        let all = scopes(NVTX_DETAILS, o, Attribution::NvtxStack, &[]).unwrap();
        let top = region(&all[0], "run_test").clone();
        (top.kernels.iter().map(|k| k.kernel_name.split('(').next().unwrap().to_string()).collect::<Vec<_>>(), top)
    };
    let (names, top) = select(&["regex:_kernel"], &[]);
    assert_eq!(names.len(), 3);
    assert_eq!(top.selection.kernels_excluded, 0);
    let (names, top) = select(&["regex:^(daxpy|init)"], &[]);
    assert_eq!(names, ["daxpy_kernel", "init_data_kernel"]);
    assert_eq!((top.selection.kernels_selected, top.selection.kernels_excluded), (2, 1));
    // Exclude wins over include.
    let (names, top) = select(&["regex:^(daxpy|init)"], &["regex:^daxpy"]);
    assert_eq!(names, ["init_data_kernel"]);
    assert_eq!(top.selection.include_patterns, ["regex:^(daxpy|init)"]);
    assert_eq!(top.selection.exclude_patterns, ["regex:^daxpy"]);
    let (names, _) = select(&[], &["check_results_kernel(int, double, double *)"]);
    assert_eq!(names, ["daxpy_kernel", "init_data_kernel"]);
    // Every kernel left out: not measured, and the reason is the selection, not ncu.
    let (names, top) = select(&["regex:^no_such_kernel$"], &[]);
    assert!(names.is_empty());
    assert_eq!(top.inclusive.calls, 0);
    assert_eq!(top.no_result.as_deref(), Some("no result: the kernel selection left out all 3 of its kernels"));
    assert!(Selection::new(&["regex:(".into()], &[]).unwrap_err().hint.is_some());
}

#[test]
fn configured_sections_decide_what_is_kept() {
    if crate::testdata::corpus("configured_sections_decide_what_is_kept", NVTX_DETAILS).is_none() {
        return;
    }
    let with = |sections: &[&str]| {
        let o = Options { sections: sections.iter().map(|s| s.to_string()).collect(), ..opts() };
        let all = scopes(NVTX_DETAILS, o, Attribution::NvtxStack, &[]).unwrap();
        region(&all[0], "run_test").sections.clone()
    };
    assert_eq!(with(&["SpeedOfLight"]), ["GPU Speed Of Light Throughput"]);
    assert_eq!(with(&["Occupancy"]), ["Occupancy"]);
    assert_eq!(with(&["SpeedOfLight", "LaunchStats"]), ["GPU Speed Of Light Throughput", "Launch Statistics"]);
    // Everything present: the `SpeedOfLight` rows are rules only, without metrics.
    assert_eq!(with(&[]), ["GPU Speed Of Light Throughput", "Launch Statistics", "Occupancy", "Source Counters"]);
}

#[test]
fn files_without_nvtx_land_in_unattributed_per_process_and_device() {
    let Some(all) = scopes(NO_NVTX_DETAILS, opts(), Attribution::NvtxStack, &[]) else { return };
    let names: Vec<&str> = all.iter().map(|s| s.scope.as_str()).collect();
    assert_eq!(names[0], "aggregate");
    assert!(names.iter().any(|s| s.starts_with("process:")), "{names:?}");
    assert!(names.contains(&"device:0"), "{names:?}");
    for s in &all {
        assert_eq!(s.regions.len(), 1);
        assert_eq!(s.regions[0].name, UNATTRIBUTED);
        assert_eq!(s.totals.calls, 6, "{}", s.scope);
    }
    // With the launcher's ranks known, a rank scope holds its processes' results.
    let pid = names.iter().find_map(|s| s.strip_prefix("process:")).unwrap().to_string();
    let ranked = Options { ranks: [(pid.clone(), 3)].into_iter().collect(), ..opts() };
    let Some(with_ranks) = scopes(NO_NVTX_DETAILS, ranked, Attribution::NvtxStack, &[]) else { return };
    let names: Vec<&str> = with_ranks.iter().map(|s| s.scope.as_str()).collect();
    assert_eq!(names, ["aggregate".to_string(), format!("process:{pid}"), "rank:3".into(), "device:0".into()]);
    assert_eq!(with_ranks[2].totals.calls, 6);
    assert_eq!(with_ranks[2].regions.len(), 1);
    let Some(no_agg) = scopes(NO_NVTX_DETAILS, Options { aggregate: false, ..opts() }, Attribution::NvtxStack, &[])
    else {
        return;
    };
    assert!(no_agg.iter().all(|s| s.scope != "aggregate"));
}

/// Range results are attributed by their NVTX columns, never by their name:
/// the recorded kernel-replay rows (stacks `run_test` > `init_data` / `daxpy`
/// / `check_results`) read as if they were range results of one pass.
#[test]
fn range_results_are_attributed_by_their_nvtx_stack() {
    // The pass asked for `run_test::daxpy` (ncu matches `daxpy/`): the daxpy
    // row is cut at it; the others keep their own stacks. Nothing is summed up
    // the tree, and the totals add the outermost regions with results.
    let Some(all) = scopes(NVTX_DETAILS, opts(), Attribution::Range, &["run_test::daxpy"]) else { return };
    let agg = &all[0];
    let r = region(agg, "run_test::daxpy");
    assert_eq!((r.inclusive.calls, r.exclusive.as_ref()), (1, None));
    assert!(close(r.inclusive.gpu_time_ms, 0.24922));
    assert_eq!(region(agg, "run_test").inclusive.calls, 0);
    assert_eq!(region(agg, "run_test::init_data").inclusive.calls, 1);
    assert_eq!(agg.totals.calls, 3, "three measured regions, none inside another");
    assert!(close(agg.totals.gpu_time_ms, 0.42221), "{}", agg.totals.gpu_time_ms);
    // Two regions in one pass: each result finds its own.
    let Some(all) = scopes(NVTX_DETAILS, opts(), Attribution::Range, &["run_test::init_data", "run_test::daxpy"])
    else {
        return;
    };
    let calls = |n: &str| region(&all[0], n).inclusive.calls;
    assert_eq!((calls("run_test::init_data"), calls("run_test::daxpy"), calls("run_test::check_results")), (1, 1, 1));
    // An outer region asked for: the stack is cut there, and the outer
    // region's own results are the total (the inner ones are not added).
    let Some(all) = scopes(NVTX_DETAILS, opts(), Attribution::Range, &["run_test"]) else { return };
    assert_eq!(all[0].regions.len(), 1);
    assert_eq!((region(&all[0], "run_test").inclusive.calls, all[0].totals.calls), (3, 3));
}

/// The real ncu 2025.3.1 app-range export: `Kernel Name` is the literal
/// `range`, the region is only in the start/end column, its name holds a `:`,
/// and the time is `gpu__time_duration.avg`. It needs no plan: a result named
/// `range` is a range result whatever the pass said.
#[test]
fn an_app_range_export_lands_in_its_start_end_region() {
    const APP_RANGE: &str = "real/cfregly-ai-perf/ncu_app_range_details.csv";
    for (how, regions) in [(Attribution::NvtxStack, vec![]), (Attribution::Range, vec!["compute_kernel:profile"])] {
        let Some(all) = scopes(APP_RANGE, opts(), how, &regions) else { return };
        let agg = &all[0];
        let names: Vec<&str> = agg.regions.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["compute_kernel:profile"]);
        let r = &agg.regions[0];
        assert_eq!((r.inclusive.calls, r.inclusive.untimed_calls, r.exclusive.as_ref()), (1, 0, None));
        assert!(close(r.inclusive.gpu_time_ms, 123.480704), "{}", r.inclusive.gpu_time_ms);
        assert_eq!(r.domain, "");
        assert!(close(agg.totals.gpu_time_ms, 123.480704));
    }
}

/// A kernel selection selects kernels; a range result is not one, so it is
/// kept, and counted as not selected.
#[test]
fn kernel_selection_does_not_drop_range_results() {
    const APP_RANGE: &str = "real/cfregly-ai-perf/ncu_app_range_details.csv";
    let selection = Selection::new(&["regex:gemm".to_string()], &["range".to_string()]).unwrap();
    let path = match crate::testdata::corpus("kernel_selection_does_not_drop_range_results", APP_RANGE) {
        Some(p) => p,
        None => return,
    };
    let mut b = Builder::new(Options { selection, ..opts() });
    let (_, launches) = reader::open_any(&path).unwrap();
    for l in launches {
        b.add_launch(&l.unwrap(), Attribution::Range, &[]);
    }
    assert_eq!(b.ranges_not_selected(), 1);
    let scope = &b.finish(&Stamp::default())[0];
    assert_eq!(scope.totals.calls, 1);
}

/// Range names may contain `::` themselves (TensorRT names its ranges
/// `ExecutionContext::execute`, seen in the memfusion nsys capture): nesting
/// comes from the stack, not from splitting names.
#[test]
fn range_names_with_double_colons_keep_their_nesting() {
    let Some(path) = crate::testdata::corpus("range_names_with_double_colons_keep_their_nesting", NVTX_DETAILS) else {
        return;
    };
    let (_, launches) = reader::open_any(&path).unwrap();
    let mut launch = launches.into_iter().next().unwrap().unwrap();
    let frame = |name: &str| NvtxFrame { domain: "<default domain>".into(), name: name.into() };
    launch.nvtx = vec![frame("ExecutionContext::execute"), frame("conv1")];
    let mut b = Builder::new(opts());
    b.add_launch(&launch, Attribution::NvtxStack, &[]);
    let scope = &b.finish(&Stamp::default())[0];
    let got: Vec<(&str, usize, Option<&str>)> =
        scope.regions.iter().map(|r| (r.name.as_str(), r.depth, r.parent.as_deref())).collect();
    assert_eq!(
        got,
        [
            ("ExecutionContext::execute", 0, None),
            ("ExecutionContext::execute::conv1", 1, Some("ExecutionContext::execute"))
        ]
    );
    assert_eq!(scope.totals.calls, 1);
}

/// The first-use check: the first range result against the median of the
/// others (odd and even counts), at FIRST_USE_RATIO and not below it.
#[test]
fn a_first_range_result_far_above_the_others_is_a_first_use() {
    let timed = |v: &[f64]| v.iter().map(|&x| Some(x)).collect::<Vec<_>>();
    let f = first_use(&timed(&[84.0e6, 3.1e6, 3.5e6])).unwrap();
    assert_eq!((f.first_ms, f.others, f.others_median_ms), (84.0, 2, 3.3));
    let f = first_use(&timed(&[50.0, 10.0, 1.0, 9.0])).unwrap();
    assert_eq!((f.others, f.others_median_ms), (3, 9.0e-6));
    assert!(first_use(&timed(&[44.0, 10.0, 9.0])).is_none(), "below 5x the median");
    assert!(first_use(&timed(&[84.0, 3.0])).is_none(), "one other is not enough");
    assert!(first_use(&[]).is_none());
    // Untimed results: a first without a duration is no verdict; others without one do not count.
    assert!(first_use(&[None, Some(84.0), Some(3.0), Some(3.0)]).is_none());
    assert!(first_use(&[Some(84.0), None, Some(3.0)]).is_none(), "one timed other is not enough");
}
