//! The ncu CSV readers on real files (the shared corpus, see its PROVENANCE.md):
//! numbers equal the file's values after unit normalization.
use llmperf::error::ErrorKind;
use llmperf::parse::ncu::{self as ncu_csv, Launch};
use llmperf::units::{Base, Value};
use std::path::Path;

const KERNEL_0013: &str =
    "llm-perf-opt/reports/20251107-dsocr/ncu-v2/kernel_0013_178ff748c21ea29399b8568af3cd1f02/ncu.details.csv";

fn launches(path: &Path) -> Vec<Launch> {
    ncu_csv::open(path).unwrap().collect::<Result<_, _>>().unwrap()
}

fn base(l: &Launch, metric: &str) -> Option<(f64, Base)> {
    l.metric(metric).unwrap_or_else(|| panic!("{metric} missing")).base()
}

#[test]
fn ncu_2025_rtx5090_details() {
    let Some(path) = corpus!(KERNEL_0013) else { return };
    let all = launches(&path);
    assert_eq!(all.len(), 1);
    let l = &all[0];
    assert!(l
        .kernel_name
        .starts_with("void flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4, 0, 0, bfloat16_t"));
    assert_eq!(
        (l.device.as_deref(), l.block_size.as_deref(), l.grid_size.as_deref()),
        (Some("0"), Some("(128, 1, 1)"), Some("(1, 8, 10)"))
    );
    assert_eq!((l.metrics.len(), l.rules.len()), (44, 4));
    // "dram__bytes_read.sum","Mbyte","4.74"
    assert_eq!(base(l, "dram__bytes_read.sum"), Some((4.74e6, Base::Bytes)));
    // "gpu__time_duration.sum","us","10.34"
    assert_eq!(l.duration_ns(), Some(10_340.0));
    // "dram__throughput.avg.pct_of_peak_sustained_elapsed","%","26.00"
    assert_eq!(base(l, "dram__throughput.avg.pct_of_peak_sustained_elapsed"), Some((26.0, Base::Percent)));
    // "flop_count_hp.sum","","n/a": not available, never 0
    assert_eq!(l.metric("flop_count_hp.sum").unwrap().value, Value::NotAvailable);
    assert_eq!(base(l, "flop_count_hp.sum"), None);
}

#[test]
fn ncu_2022_3_export_with_nvtx_stacks() {
    let Some(path) = corpus!("real/derived/nsight-training/manual_nvtx.ncu2022.3.details.csv") else { return };
    let all = launches(&path);
    assert_eq!(all.len(), 3);
    let names: Vec<_> = all.iter().map(|l| l.kernel_name.as_str()).collect();
    assert_eq!(names[0], "init_data_kernel(int, double *)");
    assert_eq!(names[1], "daxpy_kernel(int, double, double *, double *)");
    let stack: Vec<_> = all[0].nvtx.iter().map(|f| f.name.as_str()).collect();
    assert_eq!(stack, ["run_test", "init_data"]);
    assert!(all[0].nvtx.iter().all(|f| f.domain == "<default domain>"));
    // "Duration","usecond","84.48" (labels, not metric names, in this export)
    assert_eq!(all[0].duration_ns(), Some(84_480.0));
    assert_eq!(all[1].duration_ns(), Some(249_220.0));
    // "DRAM Frequency","cycle/nsecond","6.68"
    assert_eq!(base(&all[0], "DRAM Frequency"), Some((6.68e9, Base::Hertz)));
    assert_eq!(all.iter().map(|l| l.metrics.len() + l.rules.len()).sum::<usize>(), 102);
}

#[test]
fn ncu_2021_report_with_na_and_multiline_rules() {
    let Some(path) = corpus!("real/derived/gpu-ray-tracer/report.ncu2022.3.details.csv") else { return };
    let all = launches(&path);
    assert_eq!(all.len(), 3);
    // "GPU Speed Of Light","Duration","usecond","29.34" (a 2020-era section name)
    assert_eq!(all[0].duration_ns(), Some(29_340.0));
    // "Duration","","n/a" for the third kernel: no duration, not zero.
    assert_eq!(all[2].kernel_name, "rtracer::trace(renv::Scene*)");
    assert_eq!(all[2].duration_ns(), None);
    let na = all.iter().flat_map(|l| &l.metrics).filter(|m| m.value == Value::NotAvailable).count();
    assert_eq!(na, 27);
}

#[test]
fn ncu_2024_1_base_units_and_metric_names() {
    let Some(path) = corpus!("real/derived/parallel_programming_ex3/profile.ncu2024.1.details.csv") else { return };
    let all = launches(&path);
    assert_eq!(all.len(), 6);
    // gpu__time_duration.sum in nsecond: 105216, 817634848, ...
    let durations: Vec<_> = all.iter().map(|l| l.duration_ns().unwrap()).collect();
    assert_eq!(&durations[..3], [105_216.0, 817_634_848.0, 4_048_512.0]);
    assert!(all.iter().all(|l| l.device.as_deref() == Some("0")));
}

#[test]
fn error_only_file_reports_ncus_own_message() {
    // A file of llm-perf-opt meant to be a CSV that holds only ncu's `==ERROR==` lines.
    let Some(path) = corpus!("llm-perf-opt/outputs/2025-10-30/05-23-00/ncu/raw.csv") else { return };
    let err = ncu_csv::open(&path).err().unwrap();
    assert_eq!(err.kind, ErrorKind::Unparseable);
    assert!(err.message.contains("ncu/raw.csv: no CSV header"), "{}", err.message);
    assert!(err.message.contains("did not match any section"), "{}", err.message);
    assert!(err.hint.unwrap().contains("ncu --list-sections"));
}

#[test]
fn bad_inputs_are_errors_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, bytes: &[u8]| {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        p
    };
    // Empty file.
    let err = ncu_csv::open(&write("empty.csv", b"")).err().unwrap();
    assert!(err.message.contains("empty.csv: empty"), "{}", err.message);
    // The raw layout given to the details reader.
    let raw = write(
        "raw.csv",
        b"\"ID\",\"Process ID\",\"Kernel Name\",\"gpu__time_duration.sum\"\n\"\",\"\",\"\",\"nsecond\"\n",
    );
    let err = ncu_csv::open(&raw).err().unwrap();
    assert!(err.message.contains("raw.csv:1: not an ncu details CSV"), "{}", err.message);
    assert!(err.hint.unwrap().contains("raw layout"));
    // A file cut in the middle of a quoted field (a killed export).
    let Some(source) = corpus!(KERNEL_0013) else { return };
    let text = std::fs::read(source).unwrap();
    let cut = write("cut.csv", &text[..text.len() / 2 + 7]);
    let result: Result<Vec<_>, _> = ncu_csv::open(&cut).unwrap().collect();
    match result {
        Err(e) => assert!(e.message.contains("cut.csv"), "{}", e.message),
        Ok(all) => assert_eq!(all.len(), 1, "a cut file yields what it holds"),
    }
    // Binary garbage and non-UTF-8 bytes: an error or nothing, never a panic.
    let garbage = write("garbage.csv", &[0xff, 0xfe, 0x00, b'"', b'I', b'D', b'"', b'\n', 0xc3, 0x28, b',', b'\n']);
    if let Ok(reader) = ncu_csv::open(&garbage) {
        for item in reader {
            let _ = item;
        }
    }
}

/// A per-section export (ncu 2025, `--print-details all`): a `Body Item Label`
/// column sits between Section Name and Metric Name. Keyed by names, the reader
/// does not care; the parallel reader declines the unusual order.
#[test]
fn ncu_2025_section_export_with_body_item_label() {
    let Some(path) = corpus!(
        "llm-perf-opt/reports/20251107-dsocr/ncu-v2/kernel_0013_178ff748c21ea29399b8568af3cd1f02/ncu.section_SpeedOfLight_RooflineChart.csv"
    ) else {
        return;
    };
    let (_, all) = ncu_csv::open_any(&path).unwrap();
    let all: Vec<Launch> = all.collect::<Result<_, _>>().unwrap();
    assert_eq!(all.len(), 1);
    let l = &all[0];
    // 23 rows: 22 metrics and one rule row (SOLFPRoofline) without a metric name.
    assert_eq!(l.metrics.len(), 22);
    assert_eq!(l.rules, [("SOLFPRoofline".to_string(), "SpeedOfLight_RooflineChart".to_string())]);
    // Verbatim rows: "...","Theoretical Predicated-On FFMA Thread Instructions Executed","inst/cycle","21,760",
    let m = l.metric("Theoretical Predicated-On FFMA Thread Instructions Executed").unwrap();
    assert_eq!((m.section.as_str(), m.unit.as_str()), ("GPU Speed Of Light Roofline Chart", "inst/cycle"));
    assert_eq!(base(l, "Theoretical Predicated-On FFMA Thread Instructions Executed"), Some((21760.0, Base::Other)));
    assert_eq!(base(l, "Theoretical Predicated-On DFMA Thread Instructions Executed"), Some((340.0, Base::Other)));
    let mut b = llmperf::aggregate::ncu::Builder::new(Default::default());
    assert!(!ncu_csv::ingest(&path, &mut b, llmperf::regions::Attribution::NvtxStack, &[]).unwrap());
}

/// The raw page of a `--set full` profile (H800, ncu 2023.3, rendered by
/// 2024.1) has no FLOP counts, only the SOL roofline rates. By hand, over the
/// 4 launches of `distribution_elementwise_grid_stride_kernel`:
/// Σ (2·ffma + fadd + fmul + 2·dfma + dadd + dmul).per_cycle_elapsed ×
/// smsp__cycles_elapsed.avg.per_second × gpu__time_duration = 556,332,500.9
/// FLOPs in 87,136 ns; DRAM read + write = 42,597,632 bytes. The fifth
/// launch (flash_fwd_kernel) reads `nan` everywhere and has no point.
#[test]
fn sol_rates_of_a_raw_page_give_the_hand_computed_roofline_point() {
    let Some(path) = corpus!("real/derived/sglang-fork/profile.ncu2024.1.raw.csv") else { return };
    let mut acc = llmperf::aggregate::roofline::RooflineAcc::default();
    let (_, rows) = ncu_csv::open_any(&path).unwrap();
    for launch in rows {
        ncu_csv::with_view(&launch.unwrap(), |view| acc.add(view));
    }
    let r = acc.finish();
    assert_eq!((r.launches, r.launches_with_counters, r.points.len()), (5, 4, 1));
    assert!(r.flop_metrics.contains(&"smsp__cycles_elapsed.avg.per_second".to_string()));
    let p = &r.points[0];
    assert!(p.kernel_name.contains("distribution_elementwise_grid_stride_kernel"), "{}", p.kernel_name);
    assert_eq!((p.calls, p.gpu_time_ns, p.dram_bytes), (4, 87_136.0, Some(42_597_632.0)));
    let (flops, ai, rate) = (p.flops.unwrap(), p.arithmetic_intensity.unwrap(), p.achieved_flop_per_s.unwrap());
    assert!((flops - 556_332_500.89).abs() < 1.0, "{flops}");
    assert!((ai - 13.06017).abs() < 1e-4, "{ai}");
    assert!((rate - 6.384646e12).abs() / 6.384646e12 < 1e-6, "{rate}");
    assert!(p.sm_throughput_pct.is_some() && p.dram_throughput_pct.is_some());
}
