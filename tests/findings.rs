//! What to fix first (findings.json): captures made here of workloads built
//! to be slow for one known reason each (scripts/findings_demo.py, on CPU
//! under the real nsys, `--annotate ops`), ranked with that reason first and
//! its evidence equal to the script's own counts; and the findings of real
//! GPU captures of the corpus equal to their time breakdown (tests/breakdown.rs
//! checks that against SQL).
use crate::common::*;
use std::path::Path;
use std::time::Duration;

const STEPS: usize = 5;

fn profile_demo(root: &Path, mode: &str) -> serde_json::Value {
    let _nsys = nsys_lock();
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/findings_demo.py");
    let out = llmperf()
        .arg("profile")
        .args(NSYS_HANG)
        .args(["--no-ncu", "--annotate", "ops", "-o"])
        .arg(root)
        .arg("--")
        .arg(venv)
        .arg(script)
        .args([mode, &STEPS.to_string()])
        .timeout(Duration::from_secs(900))
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let run = run_dir(&out.stdout);
    let summary = std::fs::read_to_string(run.join("stakeholder_summary.md")).unwrap();
    assert!(summary.starts_with("# Stakeholder summary\n\n## What to fix first\n"), "{summary}");
    json(&run.join("findings.json"))
}

fn evidence(f: &serde_json::Value, what: &str) -> f64 {
    f["evidence"].as_array().unwrap().iter().find(|e| e["what"] == what).unwrap_or_else(|| panic!("{what} in {f}"))
        ["value"]
        .as_f64()
        .unwrap()
}

fn kinds(report: &serde_json::Value) -> Vec<String> {
    report["findings"].as_array().unwrap().iter().map(|f| f["kind"].as_str().unwrap().to_string()).collect()
}

#[test]
fn a_workload_of_many_tiny_ops_is_ranked_launch_bound_first() {
    let root = tempfile::tempdir().unwrap();
    let report = profile_demo(root.path(), "launch");
    assert_eq!(report["source"], "nsys ranges");
    let first = &report["findings"][0];
    assert_eq!(first["kind"], "launch_bound", "{report}");
    assert_eq!(first["region"], "Tiny");
    // The script's count: STEPS forwards of 200 ops (100 mul, 100 add).
    assert_eq!(evidence(first, "outermost operator calls"), (STEPS * 200) as f64);
    assert_eq!(evidence(first, "per instance"), 200.0);
    assert!(first["needs"].as_str().unwrap().contains("GPU capture"));
    assert!(!kinds(&report).contains(&"sync_stall".to_string()), "{report}");
}

#[test]
fn a_workload_that_syncs_in_a_loop_is_ranked_sync_stall_first() {
    let root = tempfile::tempdir().unwrap();
    let report = profile_demo(root.path(), "sync");
    let first = &report["findings"][0];
    assert_eq!(first["kind"], "sync_stall", "{report}");
    assert_eq!(first["region"], "Filter");
    // STEPS forwards of 8 nonzero and 8 .item() (aten::_local_scalar_dense inside it is the same sync).
    assert_eq!(evidence(first, "syncing operator calls"), (STEPS * 16) as f64);
    assert!(!kinds(&report).contains(&"launch_bound".to_string()), "{report}");
}

/// Findings of an import, and its breakdown.
fn import(rel: &str, test: &str) -> Option<(serde_json::Value, serde_json::Value)> {
    let dir = tempfile::tempdir().unwrap();
    let db = corpus_copy(test, rel, dir.path())?;
    let out = dir.path().join("run");
    import_nsys(&db, &out, &[]);
    Some((json(&out.join("findings.json")), json(&out.join("nsys/breakdown.json"))))
}

/// Ranked by share (of the device's span), most first.
fn assert_ranked(report: &serde_json::Value) {
    let r: Vec<f64> = report["findings"].as_array().unwrap().iter().map(|f| f["share"].as_f64().unwrap()).collect();
    assert!(r.windows(2).all(|w| w[0] >= w[1]), "{r:?}");
}

#[test]
fn exposed_nccl_of_the_two_process_capture_is_a_finding_with_the_breakdowns_numbers() {
    let Some((report, breakdown)) = import("real/nsys-ai/mfu_2gpu_before.sqlite", &crate::this_test!()) else { return };
    assert_eq!(report["source"], "nsys breakdown");
    assert_ranked(&report);
    for d in breakdown["devices"].as_array().unwrap() {
        // The device's exposed NCCL time, charged to the range that launched the kernels.
        let exposed = d["span"]["communication_exposed_ns"].as_i64().unwrap();
        let f = report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["kind"] == "exposed_communication" && f["region"] == "AllToAll4D" && f["device"] == d["device"])
            .unwrap_or_else(|| panic!("exposed communication of AllToAll4D on device {}: {report}", d["device"]));
        assert_eq!(f["recoverable_ns"].as_i64().unwrap(), exposed);
        assert_eq!(f["process_id"], d["process_id"]);
        assert_eq!(f["attribution"], "issued");
    }
}

#[test]
fn a_capture_without_nvtx_ranks_its_device_span_and_sync_stalls_come_first() {
    let Some((report, breakdown)) = import("real/derived/abacus/report1.nsys2022.4.sqlite", &crate::this_test!())
    else {
        return;
    };
    assert_ranked(&report);
    let first = &report["findings"][0];
    assert_eq!(first["kind"], "sync_stall", "{report}");
    assert_eq!(first["region"], "(device span)");
    assert_eq!(first["recoverable_ns"], breakdown["devices"][0]["span"]["idle_sync_ns"]);
}

/// ncu's own advice: the DeepSeek-OCR details CSVs (corpus) imported; every
/// OPT and WRN rule row the test counts with the csv crate is in
/// ncu/rules.json, and findings.json's advice goes kernel by kernel, most GPU
/// time first (kernels.json), each kernel's headline rule (no estimate)
/// first, then by the estimate; weighted by the kernel's share of GPU time.
#[test]
fn ncu_rule_results_are_kept_and_ranked_by_weighted_speedup() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some(csvs) = crate::common::dsocr_ncu(&test, root.path()) else { return };
    let out = root.path().join("run");
    llmperf().args(["import", "ncu"]).args(&csvs).arg("-o").arg(&out).assert().success();
    let (mut rows, mut pairs) = (0, std::collections::BTreeSet::new());
    for csv in &csvs {
        let mut r = csv::ReaderBuilder::new().flexible(true).from_path(csv).unwrap();
        let h = r.headers().unwrap().clone();
        let col = |n: &str| h.iter().position(|x| x == n).unwrap();
        let (k, name, kind) = (col("Kernel Name"), col("Rule Name"), col("Rule Type"));
        for rec in r.records() {
            let rec = rec.unwrap();
            if matches!(rec.get(kind), Some("OPT") | Some("WRN")) {
                rows += 1;
                pairs.insert((rec[k].to_string(), rec[name].to_string()));
            }
        }
    }
    assert!(rows > 0);
    let rules = json(&out.join("ncu/rules.json"));
    let list = rules["rules"].as_array().unwrap();
    assert_eq!(list.len(), pairs.len());
    assert_eq!(list.iter().map(|r| r["launches"].as_u64().unwrap()).sum::<u64>(), rows as u64);
    let advice = json(&out.join("findings.json"))["ncu_advice"].as_array().unwrap().clone();
    assert!(!advice.is_empty());
    let shares: Vec<f64> = advice.iter().map(|a| a["share_pct"].as_f64().unwrap()).collect();
    assert!(shares.windows(2).all(|w| w[0] >= w[1]), "{shares:?}");
    for a in &advice {
        match a["speedup_pct"].as_f64() {
            Some(s) => {
                let want = s * a["share_pct"].as_f64().unwrap() / 100.0;
                assert!((a["weighted_pct"].as_f64().unwrap() - want).abs() < 1e-9, "{a}");
            }
            None => assert!(a["weighted_pct"].is_null(), "{a}"),
        }
    }
    let kernels = json(&out.join("kernels.json"));
    let top = &kernels["kernels"][0];
    assert_eq!(advice[0]["kernel_name"], top["kernel_name"], "the top kernel's advice first");
    let summary = std::fs::read_to_string(out.join("stakeholder_summary.md")).unwrap();
    assert!(summary.contains("ncu's own advice"), "{summary}");
}

/// A real ncu report of the corpus, in ncu 2022.3's and 2024.1's details
/// CSVs (NVIDIA's nsight-training daxpy lab): its three kernels run at
/// 88–95% of DRAM throughput and 12–37% SM. One memory-bound family, whose
/// GPU time and time-weighted DRAM throughput equal the CSV's own rows read
/// here with the csv crate.
#[test]
fn kernels_at_the_dram_roof_are_one_memory_bound_family() {
    for file in ["manual_nvtx.ncu2022.3.details.csv", "manual_nvtx.ncu2024.1.details.csv"] {
        let test = "kernels_at_the_dram_roof_are_one_memory_bound_family";
        let root = tempfile::tempdir().unwrap();
        let Some(csv) = corpus_copy(test, &format!("real/derived/nsight-training/{file}"), root.path()) else { return };
        // The oracle: per launch, Duration (ns) and DRAM Throughput (%) of the SOL section.
        let mut rows = csv::ReaderBuilder::new().flexible(true).from_path(&csv).unwrap();
        let header = rows.headers().unwrap().clone();
        let col = |n: &str| header.iter().position(|h| h == n).unwrap();
        let (id, name, unit, value) = (col("ID"), col("Metric Name"), col("Metric Unit"), col("Metric Value"));
        let mut by_launch: std::collections::BTreeMap<String, (f64, f64)> = Default::default();
        for r in rows.records() {
            let r = r.unwrap();
            let e = by_launch.entry(r[id].to_string()).or_default();
            let v = || r[value].replace(',', "").parse::<f64>().unwrap();
            // 2022.3 prints SOL labels, 2024.1 metric names (in base units as rendered here).
            match (&r[name], &r[unit]) {
                ("Duration", "usecond") => e.0 = v() * 1e3,
                ("Duration" | "gpu__time_duration.sum", "nsecond") => e.0 = v(),
                ("DRAM Throughput" | "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed", "%") => e.1 = v(),
                _ => {}
            }
        }
        assert_eq!(by_launch.len(), 3);
        let ns: f64 = by_launch.values().map(|l| l.0).sum();
        let dram = by_launch.values().map(|l| l.0 * l.1).sum::<f64>() / ns;

        let run = root.path().join("run");
        llmperf().args(["-q", "import", "ncu"]).arg(&csv).arg("-o").arg(&run).assert().success();
        let report = json(&run.join("findings.json"));
        assert_eq!(report["source"], "ncu counters", "{report}");
        assert_eq!(kinds(&report), ["memory_bound"], "{report}");
        let f = &report["findings"][0];
        assert_eq!(f["region"], "(kernels profiled by ncu)");
        assert_eq!(f["recoverable_ns"].as_f64().unwrap(), ns.round(), "{file}");
        assert!((evidence(f, "DRAM throughput (time-weighted)") - dram).abs() < 1e-9, "{file}: {f}");
        assert_eq!(f["kernels"].as_array().unwrap().len(), 3);
        assert!(f["kernels"][0].as_str().unwrap().starts_with("daxpy_kernel"), "{f}");
        let summary = std::fs::read_to_string(run.join("stakeholder_summary.md")).unwrap();
        let row = summary
            .lines()
            .find(|l| l.starts_with("| 1 | memory-bound kernel family |"))
            .unwrap_or_else(|| panic!("{summary}"));
        assert!(row.contains("| `(kernels profiled by ncu)` |"), "{row}");
    }
}

/// DeepSeek-OCR's ncu details (20 kernels, RTX 5090): bf16 tensor ops are
/// counted (`sm__ops_path_tensor_src_bf16_dst_fp32.sum`), the FLOPs outside
/// the tensor path are `n/a`. The tensor FLOPs per precision equal the CSV's
/// sum; the share of FLOPs is absent with its reason, never 100%; an
/// elementwise kernel's FLOPs are unknown, not 0. Copies of the CSVs edited
/// as ncu would print other runs: a GEMM with 0 tensor ops is a low
/// tensor-core finding naming it (the cuBLAS GEMV beside it is not: it is
/// memory-bound by nature); other FLOPs counted give the share; an
/// elementwise kernel at 85% DRAM throughput is a memory-bound family.
#[test]
fn tensor_core_use_is_counted_by_precision_and_a_gemm_off_the_tensor_cores_is_named() {
    let test = "tensor_core_use_is_counted_by_precision_and_a_gemm_off_the_tensor_cores_is_named";
    let root = tempfile::tempdir().unwrap();
    let Some(csvs) = dsocr_ncu(test, root.path()) else { return };
    let metric_rows = |path: &Path, metric: &str| -> Vec<String> {
        let mut rows = csv::ReaderBuilder::new().flexible(true).from_path(path).unwrap();
        let header = rows.headers().unwrap().clone();
        let (name, value) = (
            header.iter().position(|h| h == "Metric Name").unwrap(),
            header.iter().position(|h| h == "Metric Value").unwrap(),
        );
        rows.records().map(|r| r.unwrap()).filter(|r| &r[name] == metric).map(|r| r[value].to_string()).collect()
    };
    let tensor_metric = "sm__ops_path_tensor_src_bf16_dst_fp32.sum";
    let oracle: f64 = csvs
        .iter()
        .flat_map(|c| metric_rows(c, tensor_metric))
        .map(|v| v.replace(',', "").parse::<f64>().unwrap())
        .sum();
    assert!(oracle > 7e10, "{oracle}");
    let import = |name: &str, files: &[std::path::PathBuf]| {
        let run = root.path().join(name);
        llmperf().args(["-q", "import", "ncu"]).args(files).arg("-o").arg(&run).assert().success();
        run
    };
    let run = import("as-is", &csvs);
    let report = json(&run.join("findings.json"));
    // What an import of CSVs knows of its machine: device indices, not a GPU, not ncu's version.
    let summary = std::fs::read_to_string(run.join("stakeholder_summary.md")).unwrap();
    assert!(summary.contains("| GPU | not recorded: an import, and ncu's results name device 0 only"), "{summary}");
    assert!(summary.contains("| nsys / ncu | not recorded (an import"), "{summary}");
    // sections.txt: the exact bytes and beside them as read (the CSVs' own sum, here in MB).
    let read_mb: f64 = csvs
        .iter()
        .flat_map(|c| {
            let mut rows = csv::ReaderBuilder::new().flexible(true).from_path(c).unwrap();
            let h = rows.headers().unwrap().clone();
            let col = |n: &str| h.iter().position(|x| x == n).unwrap();
            let (name, unit, value) = (col("Metric Name"), col("Metric Unit"), col("Metric Value"));
            rows.records()
                .map(|r| r.unwrap())
                .filter(|r| &r[name] == "dram__bytes_read.sum")
                .map(|r| {
                    let scale = match &r[unit] {
                        "byte" => 1e-6,
                        "Kbyte" => 1e-3,
                        "Mbyte" => 1.0,
                        "Gbyte" => 1e3,
                        u => panic!("{u}"),
                    };
                    r[value].replace(',', "").parse::<f64>().unwrap() * scale
                })
                .collect::<Vec<_>>()
        })
        .sum();
    let sections = std::fs::read_to_string(run.join("ncu/regions/_unattributed_/sections.txt")).unwrap();
    let line = sections.lines().find(|l| l.trim_start().starts_with("dram__bytes_read.sum")).unwrap();
    assert!(line.contains(&format!("= {read_mb:.2} MB")), "{line} vs {read_mb}");
    let rows = report["tensor_cores"].as_array().unwrap();
    assert_eq!(rows.len(), 1, "{report}");
    assert_eq!(rows[0]["ops_by_precision"]["bf16->fp32"].as_f64().unwrap(), oracle);
    assert!(rows[0]["share_pct"].is_null());
    assert!(rows[0]["note"].as_str().unwrap().contains("not counted"), "{report}");
    assert!(!kinds(&report).contains(&"low_tensor_core_share".to_string()), "{report}");
    let roofline = json(&run.join("roofline.json"));
    let point = |name: &str| {
        roofline["points"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["kernel_name"].as_str().unwrap().contains(name))
            .unwrap()
            .clone()
    };
    let add = point("CUDAFunctor_add<BFloat16>>(TensorIteratorBase");
    assert!(add["flops"].is_null() && add["arithmetic_intensity"].is_null(), "{add}");
    let gemm = point("s16816gemm_relu_bf16_128x256");
    assert_eq!(gemm["tensor"]["ops_by_precision"]["bf16->fp32"].as_f64().unwrap(), 45_902_462_976.0);

    // The 128x256 GEMM (kernel 16, 44% of GPU time) with 0 tensor ops.
    let edited = root.path().join("edited");
    std::fs::create_dir_all(&edited).unwrap();
    let copy = |from: &Path, edit: &dyn Fn(String) -> String| {
        let to = edited.join(from.file_name().unwrap());
        std::fs::write(&to, edit(std::fs::read_to_string(from).unwrap())).unwrap();
        to
    };
    let k16 = csvs.iter().find(|c| c.to_string_lossy().contains("kernel_0016")).unwrap();
    let zero = copy(k16, &|t| t.replace("\"45,902,462,976\"", "\"0\""));
    let files: Vec<_> = csvs.iter().map(|c| if c == k16 { zero.clone() } else { c.clone() }).collect();
    let report = json(&import("gemm-off", &files).join("findings.json"));
    let f = report["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "low_tensor_core_share").unwrap();
    assert_eq!(f["kernels"].as_array().unwrap().len(), 1, "{f}");
    assert!(f["kernels"][0].as_str().unwrap().contains("s16816gemm_relu_bf16_128x256"), "{f}");
    assert_eq!(evidence(f, "with 0 tensor ops"), 1.0);
    // No GPU name in the CSVs: no peak ratio bounds it, so the bound is the kernel's time.
    assert_eq!(f["recoverable_ns"].as_i64().unwrap(), 404_700, "{f}");
    assert_eq!(f["confidence"], "low");
    assert!(report["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("GEMVs or memory-bound")));
    // The GPU named (hardware.gpu): the bound is the FP32 → TF32 peak ratio of its row of the table.
    let run = root.path().join("gemm-off-h100");
    llmperf()
        .args(["-q", "import", "ncu"])
        .args(&files)
        .args(["hardware.gpu=NVIDIA H100 80GB HBM3", "-o"])
        .arg(&run)
        .assert()
        .success();
    let report = json(&run.join("findings.json"));
    let f = report["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "low_tensor_core_share").unwrap();
    let table: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/hardware/gpu_peaks.yaml")).unwrap(),
    )
    .unwrap();
    let h100 = table["gpus"].as_sequence().unwrap().iter().find(|g| g["name"] == "H100 SXM5").unwrap();
    let (fp32, tf32) = (h100["fp32"].as_f64().unwrap(), h100["tf32"].as_f64().unwrap());
    assert_eq!(f["recoverable_ns"].as_i64().unwrap(), (404_700.0 * (1.0 - fp32 / tf32)).round() as i64, "{f}");
    assert_eq!(f["confidence"], "medium");
    let summary = std::fs::read_to_string(run.join("stakeholder_summary.md")).unwrap();
    assert!(summary.contains("| GPU | NVIDIA H100 80GB HBM3 (hardware.gpu) |"), "{summary}");

    // Other FLOPs counted (flop_count_hp of the same GEMM made a number): a share.
    let both = copy(k16, &|t| {
        let row = t.lines().find(|l| l.contains("\"flop_count_hp.sum\"")).unwrap().to_string();
        t.replace(&row, &row.replace("\"n/a\"", "\"45,902,462,976\""))
    });
    let report = json(&import("share", &[both]).join("findings.json"));
    assert_eq!(report["tensor_cores"][0]["share_pct"].as_f64(), Some(50.0), "{report}");

    // The elementwise add (kernel 10, 10.4% of GPU time) at 85% of DRAM throughput.
    let k10 = csvs.iter().find(|c| c.to_string_lossy().contains("kernel_0010")).unwrap();
    // Two rows carry it: the `dram__throughput` metric and the SOL section's label.
    let hot = copy(k10, &|t| {
        assert_eq!(t.matches("\"10.29\"").count(), 2);
        t.replace("\"10.29\"", "\"85.00\"")
    });
    let files: Vec<_> = csvs.iter().map(|c| if c == k10 { hot.clone() } else { c.clone() }).collect();
    let report = json(&import("hot", &files).join("findings.json"));
    let f = report["findings"].as_array().unwrap().iter().find(|f| f["kind"] == "memory_bound").unwrap();
    assert_eq!(f["recoverable_ns"].as_i64().unwrap(), 94_910, "{f}");
    assert!(f["bound"].as_str().unwrap().contains("elementwise kernels"), "{f}");
}

/// The SM and DRAM throughput ncu measured are read alike from every
/// rendering of one report in the corpus: details pages of ncu 2022.3 (whose
/// SOL rows are labelled `SM [%]`/`SOL DRAM` for reports of older versions,
/// `Compute (SM) [%]`/`DRAM Throughput` for newer ones), of 2024.1 (metric
/// names), and the raw pages. Before, the older labels were not read: those
/// kernels had no throughput, and no memory-bound finding could see them.
#[test]
fn sol_throughputs_read_alike_from_every_rendering_of_a_report() {
    let test = "sol_throughputs_read_alike_from_every_rendering_of_a_report";
    let Some(corpus) = corpus_dir() else { return skipped(test, "the shared corpus is not there") };
    let derived = corpus.join("real/derived");
    let mut stems: std::collections::BTreeMap<String, Vec<std::path::PathBuf>> = Default::default();
    for dir in std::fs::read_dir(&derived).unwrap().map(|e| e.unwrap().path()) {
        for f in std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().path()) {
            let name = f.file_name().unwrap().to_string_lossy().into_owned();
            if let Some((stem, _)) = name.split_once(".ncu") {
                if name.ends_with(".details.csv") || name.ends_with(".raw.csv") {
                    stems.entry(format!("{}/{stem}", dir.display())).or_default().push(f);
                }
            }
        }
    }
    let root = tempfile::tempdir().unwrap();
    let mut judged = 0;
    for (stem, files) in stems.iter().filter(|(_, f)| f.len() > 1) {
        let mut readings: Vec<(String, Vec<(i64, i64)>)> = Vec::new();
        for (i, f) in files.iter().enumerate() {
            let run = root.path().join(format!("{judged}-{i}"));
            llmperf().args(["-q", "import", "ncu"]).arg(f).arg("-o").arg(&run).assert().success();
            let roofline = json(&run.join("roofline.json"));
            // Per kernel launch group, by GPU time: (SM %, DRAM %) in hundredths, as printed.
            let mut v: Vec<(i64, i64)> = roofline["points"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| {
                    let pct = |k: &str| {
                        (p[k].as_f64().unwrap_or_else(|| panic!("{} {k}: {p}", f.display())) * 100.0).round() as i64
                    };
                    (pct("sm_throughput_pct"), pct("dram_throughput_pct"))
                })
                .collect();
            v.sort();
            readings.push((f.display().to_string(), v));
        }
        let (first, want) = &readings[0];
        assert!(!want.is_empty(), "{stem}");
        for (other, got) in &readings[1..] {
            assert_eq!(got.len(), want.len(), "{first} vs {other}");
            for (a, b) in want.iter().zip(got) {
                // Hundredths as printed; a raw page prints more digits, rounded here.
                assert!((a.0 - b.0).abs() <= 1 && (a.1 - b.1).abs() <= 1, "{first} {a:?} vs {other} {b:?}");
            }
        }
        judged += 1;
    }
    assert!(judged >= 5, "{judged} reports with several renderings");
}
