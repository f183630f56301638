//! `llmperf report RUN_DIR` rebuilds every report from the run's artifacts
//! alone: on a copy of a run directory it gives the same bytes, timestamps aside.
use crate::common::*;
use std::path::Path;

const KERNEL_0013: &str =
    "llm-perf-opt/reports/20251107-dsocr/ncu-v2/kernel_0013_178ff748c21ea29399b8568af3cd1f02/ncu.details.csv";

#[test]
fn report_reproduces_an_imported_ncu_run() {
    let root = tempfile::tempdir().unwrap();
    for (i, (rel, extra)) in [
        ("real/derived/nsight-training/manual_nvtx.ncu2022.3.details.csv", vec![]),
        (KERNEL_0013, vec!["--range", "decode"]),
    ]
    .into_iter()
    .enumerate()
    {
        let Some(file) = corpus_copy!(rel, root.path()) else { return };
        let out = root.path().join(format!("run{i}"));
        llmperf().args(["import", "ncu"]).arg(file).arg("-o").arg(&out).args(&extra).assert().success();
        assert!(out.join("stakeholder_summary.md").is_file() && out.join("report.md").is_file());
        assert_report_reproduces(&out);
    }
}

#[test]
fn report_reproduces_an_imported_nsys_capture_with_its_kernels() {
    let root = tempfile::tempdir().unwrap();
    let Some(out) = import_memfusion(&this_test!(), root.path()) else { return };
    let kernels = json(&out.join("kernels.json"));
    assert_eq!(kernels["source"], "nsys");
    let top = json(&out.join("nsys/top_kernels.json"));
    assert_eq!(kernels["kernels"][0]["kernel_name"], top[0]["name"]);
    // The capture's machine, from the export (an import has no env.json of its own).
    let capture = json(&out.join("nsys/capture.json"));
    let gpus = capture["gpus"].as_array().unwrap();
    assert_eq!(gpus.len(), 4);
    assert!(gpus.iter().all(|g| g["name"] == "NVIDIA GeForce RTX 3090" && g["sm_count"] == 82));
    assert_eq!((capture["driver_version"].as_str(), capture["cpu_cores"].as_i64()), (Some("530.30.02"), Some(48)));
    assert_eq!(capture["exported_by"], "2023.1.2.43");
    let summary = std::fs::read_to_string(out.join("stakeholder_summary.md")).unwrap();
    assert!(summary.contains("| GPU | 0: NVIDIA GeForce RTX 3090 (82 SMs, 23.7 GiB), 1: "), "{summary}");
    assert!(summary.contains("| driver / CUDA | 530.30.02 / – |"), "{summary}");
    assert!(
        summary.contains("## Top Kernels")
            && summary.contains(&format!("{:.1}%", top[0]["share_pct"].as_f64().unwrap()))
    );
    assert_report_reproduces(&out);
}

/// The kernel totals of an `nsys stats` kernel summary equal those llmperf
/// computes from the SQLite export of the same report (the summary has one
/// row per kernel name, grid and block; llmperf sums them by name).
#[test]
fn kernel_summary_csv_import_equals_the_sqlite_import() {
    let root = tempfile::tempdir().unwrap();
    let (Some(summary), Some(db)) = (
        corpus_copy!("real/derived/abacus/report1.nsys2022.4_gpukernsum.csv", root.path()),
        corpus_copy!("real/derived/abacus/report1.nsys2022.4.sqlite", root.path()),
    ) else {
        return;
    };
    let import = |file: &Path, out: &str| {
        let out = root.path().join(out);
        llmperf()
            .args(["import", "nsys"])
            .arg(file)
            .arg("-o")
            .arg(&out)
            .args(["pipeline.nsys.executable=/nonexistent", "runner.run.top_n_kernels=0"])
            .assert()
            .success();
        out
    };
    let from_csv = import(&summary, "csv");
    let from_db = import(&db, "db");
    let key = |dir: &Path| -> Vec<(String, u64, u64, u64, u64)> {
        json(&dir.join("nsys/top_kernels.json"))
            .as_array()
            .unwrap()
            .iter()
            .map(|k| {
                let n = |f: &str| k[f].as_u64().unwrap();
                (k["name"].as_str().unwrap().to_string(), n("calls"), n("total_ns"), n("min_ns"), n("max_ns"))
            })
            .collect()
    };
    let (csv, db) = (key(&from_csv), key(&from_db));
    // An older export (nsys 2022.4, from a .qdrep of 2020): fewer GPU columns filled.
    let capture = json(&from_db.join("nsys/capture.json"));
    assert_eq!(capture["gpus"][0]["name"], "TITAN RTX");
    assert_eq!(capture["gpus"][0]["sm_count"], serde_json::Value::Null);
    assert_eq!(capture["driver_version"], "4505105");
    assert_eq!(csv.len(), 53);
    assert_eq!(csv, db);
    let regions = json(&from_csv.join("nsys/regions.json"));
    assert_eq!(regions["regions"].as_array().unwrap().len(), 0);
    assert_eq!(regions["unattributed"]["kernel_count"].as_u64(), Some(csv.iter().map(|k| k.1).sum()));
    assert!(regions["notes"][0].as_str().unwrap().contains("kernel summary without NVTX ranges"));
    assert_report_reproduces(&from_csv);
}

/// The roofline point of the DeepSeek-OCR decode attention kernel (RTX 5090),
/// by hand from its ncu details: 335,544,320 tensor ops (bf16 → fp32), DRAM
/// 4.74 MB read + 0 written, 10.34 µs: 70.79 FLOP/byte and 32.45 TFLOP/s.
/// report.html draws that point with those numbers.
#[test]
fn roofline_point_from_ncu_counters_by_hand() {
    let root = tempfile::tempdir().unwrap();
    let out = root.path().join("run");
    let Some(csv) = corpus_copy!(KERNEL_0013, root.path()) else { return };
    llmperf().args(["import", "ncu"]).arg(&csv).arg("-o").arg(&out).assert().success();
    let r = json(&out.join("roofline.json"));
    assert_eq!((r["launches"].as_u64(), r["launches_with_counters"].as_u64()), (Some(1), Some(1)));
    assert_eq!(r["flop_metrics"], serde_json::json!(["sm__ops_path_tensor_src_bf16_dst_fp32.sum"]));
    let p = &r["points"][0];
    assert!(p["kernel_name"].as_str().unwrap().contains("flash_fwd_splitkv_kernel"));
    assert_eq!(p["flops"].as_f64(), Some(335_544_320.0));
    assert_eq!(p["dram_bytes"].as_f64(), Some(4_740_000.0));
    assert_eq!(p["gpu_time_ns"].as_f64(), Some(10_340.0));
    let ai = p["arithmetic_intensity"].as_f64().unwrap();
    let fps = p["achieved_flop_per_s"].as_f64().unwrap();
    assert!((ai - 335_544_320.0 / 4_740_000.0).abs() < 1e-9 && (ai - 70.79).abs() < 0.01, "{ai}");
    assert!((fps - 3.2451e13).abs() / 3.2451e13 < 1e-4, "{fps}");
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let circle = html.lines().find(|l| l.contains("<circle data-kernel=")).expect("a kernel point in the roofline");
    assert!(circle.contains(&format!("data-intensity=\"{ai:.6e}\"")), "{circle}");
    assert!(circle.contains(&format!("data-flops=\"{fps:.6e}\"")), "{circle}");
    assert!(circle.contains("flash_fwd_splitkv_kernel&lt;Flash_fwd_kernel_traits&lt;128, 64, 128, 4, 0, 0, bfloat16_t"));
    assert!(!html.contains("data-peak-flops"), "no roofs without a peak");

    // The user's peaks give the roofs (an import has no GPU name to look up).
    let with_peaks = root.path().join("peaks");
    llmperf()
        .args(["import", "ncu"])
        .arg(&csv)
        .arg("-o")
        .arg(&with_peaks)
        .args(["hardware.peak_tflops=209.5", "hardware.peak_gbps=1792"])
        .assert()
        .success();
    let html = std::fs::read_to_string(with_peaks.join("report.html")).unwrap();
    assert!(html.contains("data-peak-flops=\"2.095000e14\" data-peak-bytes=\"1.792000e12\""), "{html}");
}

/// Kernel tables show the export's short name where it has one, and the full
/// demangled name with `report.kernel_names=full`; kernels.json keeps both.
#[test]
fn kernel_tables_show_short_names_and_full_ones_on_demand() {
    let root = tempfile::tempdir().unwrap();
    let Some(short) = import_memfusion(&this_test!(), root.path()) else { return };
    let kernels = json(&short.join("kernels.json"));
    let row =
        kernels["kernels"].as_array().unwrap().iter().find(|k| k["short_name"] == "copyVectorizedKernel").unwrap();
    let full = row["kernel_name"].as_str().unwrap();
    assert!(full.starts_with("void genericReformat::copyVectorizedKernel<double, __half"), "{full}");
    let md = std::fs::read_to_string(short.join("kernels.md")).unwrap();
    assert!(md.contains("| `copyVectorizedKernel` | all | 0.020 | 12 |"), "{md}");
    assert!(!md.contains("genericReformat::"), "{md}");
    let db = root.path().join("report1.sqlite");
    let long = root.path().join("full");
    import_nsys(&db, &long, &["report.kernel_names=full"]);
    let md = std::fs::read_to_string(long.join("kernels.md")).unwrap();
    assert!(
        md.contains("| `void genericReformat::copyVectorizedKernel<double, __half, …` | all | 0.020 | 12 |"),
        "{md}"
    );
    assert_eq!(json(&long.join("kernels.json"))["full_names"], true);
}

/// `(process id, instances, ns)` of the push/pop ranges named `name` (PyTorch's
/// `, seq = N, op_id = N` cut) that no other range of their thread encloses:
/// plain SQL on the export.
fn top_level_sql(db: &Path, name: &str) -> Vec<(i64, i64, i64)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let sql = "WITH ev AS (
          SELECT e.rowid id, e.start, e.end, e.globalTid tid, COALESCE(e.text, s.value) raw
          FROM NVTX_EVENTS e LEFT JOIN StringIds s ON s.id = e.textId
          WHERE e.eventType = 59 AND e.end IS NOT NULL),
        named AS (SELECT id, start, end, tid, substr(raw, 1, instr(raw || ',', ',') - 1) name FROM ev)
        SELECT (a.tid >> 24) & 16777215 pid, COUNT(*), SUM(a.end - a.start) FROM named a
        WHERE a.name = ?1 AND NOT EXISTS (
          SELECT 1 FROM named b WHERE b.tid = a.tid AND b.id != a.id AND b.start <= a.start AND b.end >= a.end
            AND NOT (b.start = a.start AND b.end = a.end AND b.id > a.id))
        GROUP BY pid ORDER BY pid";
    let mut stmt = conn.prepare(sql).unwrap();
    stmt.query_map([name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().map(Result::unwrap).collect()
}

/// The two-process nsys-ai capture (PyTorch `emit_nvtx`, flash-attention, no
/// stage ranges): its top-level operators are operators (`aten::mul` was
/// missing), per rank with SQL's counts; everything leads with GPU time,
/// where the summary led with `aten::to` (host syncs, 341 ms of wall time)
/// while flash-attention held half the GPU time. And in memfusion (TensorRT)
/// the narrative names `conv1`, not the range around the whole inference.
#[test]
fn reports_of_real_gpu_captures_lead_with_gpu_time_and_hold_every_operator() {
    let root = tempfile::tempdir().unwrap();
    let Some(db) = corpus_copy!("real/nsys-ai/mfu_2gpu_before.sqlite", root.path()) else { return };
    let run = root.path().join("nsys-ai");
    import_nsys(&db, &run, &[]);
    let ranks = json(&run.join("ranks.json"));
    let rank_of = |pid: i64| {
        let r = ranks["ranks"].as_array().unwrap().iter().find(|r| r["process_ids"][0] == pid).unwrap();
        format!("rank {}", r["rank"])
    };
    let ops = json(&run.join("operators.json"));
    assert_eq!(ops["ranked_by"], "gpu_time");
    let rows = ops["operators"].as_array().unwrap();
    let sql = top_level_sql(&db, "aten::mul");
    assert_eq!(sql.len(), 2, "{sql:?}");
    for (pid, calls, ns) in sql {
        let row = rows.iter().find(|o| o["name"] == "aten::mul" && o["rank"] == rank_of(pid)).expect("aten::mul");
        assert_eq!(row["calls"], calls, "{row}");
        assert_eq!((row["total_ms"].as_f64().unwrap() * 1e6).round() as i64, ns, "{row}");
    }
    // GPU time first, in the JSON and in both tables.
    let gpu: Vec<f64> = rows.iter().map(|o| o["gpu_ms"].as_f64().unwrap_or(-1.0)).collect();
    assert!(gpu.windows(2).all(|w| w[0] >= w[1]), "{gpu:?}");
    let summary = std::fs::read_to_string(run.join("stakeholder_summary.md")).unwrap();
    let first = |md: &str, after: &str| -> String {
        md.split(after)
            .nth(1)
            .unwrap()
            .lines()
            .find(|l| l.starts_with("| rank ") && !l.starts_with("| rank |"))
            .unwrap()
            .to_string()
    };
    assert!(first(&summary, "## Top Operators").contains("| `FlashAttnFunc` |"), "{summary}");
    let narrative = summary.split("## Narrative").nth(1).unwrap();
    assert!(narrative.contains("1. The operator whose own kernels take the most GPU time is `FlashAttnFunc › flash_attn::_flash_attn_forward`"), "{narrative}");
    // The leaf view adds every call path of one operator.
    let leaf = ops["by_leaf"].as_array().unwrap();
    let copies: f64 = leaf.iter().filter(|o| o["name"] == "aten::copy_").map(|o| o["calls"].as_f64().unwrap()).sum();
    let paths: f64 = rows
        .iter()
        .filter(|o| {
            o["name"].as_str().unwrap().ends_with("aten::copy_")
                && !o["name"].as_str().unwrap()[..o["name"].as_str().unwrap().len() - 11].contains("aten::copy_")
        })
        .map(|o| o["calls"].as_f64().unwrap())
        .sum();
    assert!(copies > 0.0 && copies == paths, "{copies} vs {paths}");
    // report.html's region chart: GPU time, largest first.
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    let re = regex::Regex::new(r#"data-region="([^"]*)" data-ms="([^"]*)" x="[^"]*" y="0.0""#).unwrap();
    let top: Vec<(String, f64)> = re.captures_iter(&html).map(|c| (c[1].to_string(), c[2].parse().unwrap())).collect();
    assert_eq!(top[0].0, "FlashAttnFunc", "{top:?}");
    assert!(top.windows(2).all(|w| w[0].1 >= w[1].1), "{top:?}");
    assert!(html.contains("GPU time of the kernels launched inside each NVTX range"));

    let memfusion = root.path().join("memfusion");
    std::fs::create_dir(&memfusion).unwrap();
    // The Ranks section's regions: the most GPU time on one rank first, wall times beside.
    let ranks_md = summary.split("| region | ranks | max GPU ms |").nth(1).expect("a GPU column in the Ranks table");
    let row = ranks_md.lines().nth(2).unwrap();
    assert!(row.starts_with("| `FlashAttnFunc` | 2 | 128.490 |"), "{row}");
    // regions.md: per rank, the region with the most GPU time first, with its kernels.
    let md = std::fs::read_to_string(run.join("regions.md")).unwrap();
    let regions = json(&run.join("nsys/regions.json"));
    for pid in [144, 145] {
        let section = md.split(&format!(", process {pid}\n")).nth(1).unwrap();
        let first = section.lines().find(|l| l.starts_with("| `")).unwrap();
        let mut top: std::collections::BTreeMap<&str, i64> = Default::default();
        for r in regions["regions"].as_array().unwrap().iter().filter(|r| r["depth"] == 0 && r["process_id"] == pid) {
            *top.entry(r["name"].as_str().unwrap()).or_default() += r["gpu_time_ns"].as_i64().unwrap();
        }
        let (name, ns) = top.iter().max_by_key(|(_, ns)| **ns).unwrap();
        assert_eq!(*name, "FlashAttnFunc");
        let want = format!("| `FlashAttnFunc` | {:.3} |", *ns as f64 / 1e6);
        assert!(first.starts_with(&want) && first.contains("`flash_fwd_kernel` "), "{want} in {first}");
    }
    let Some(mf) = import_memfusion(&this_test!(), &memfusion) else { return };
    let summary = std::fs::read_to_string(mf.join("stakeholder_summary.md")).unwrap();
    let narrative = summary.split("## Narrative").nth(1).unwrap();
    assert!(narrative.contains("1. The operator whose own kernels take the most GPU time is `ExecutionContext::execute › /conv1/Conv + /relu/Relu`"), "{narrative}");
}
