//! Native ingestion of nsys SQLite exports against nsys's own reports on the
//! same real files (tests/fixtures/nsys, see PROVENANCE.md).
use llmperf::aggregate::{self, RegionsReport};
use llmperf::error::ErrorKind;
use llmperf::parse::nsys_sqlite::NsysDb;
use std::collections::HashMap;
use std::path::{Path, PathBuf};

fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nsys").join(rel)
}

fn ingest(rel: &str) -> (RegionsReport, Vec<aggregate::TopKernel>, usize) {
    let capture = NsysDb::open(&fixture(rel)).unwrap().load().unwrap();
    let report = aggregate::build(&capture);
    (report, aggregate::top_kernels(&capture, 0), capture.kernels.len())
}

/// Rows of an `nsys stats --format csv` file as header → value maps.
fn stats_csv(rel: &str) -> Vec<HashMap<String, String>> {
    let mut r = csv::Reader::from_path(fixture(rel)).unwrap();
    let header: Vec<String> = r.headers().unwrap().iter().map(str::to_string).collect();
    r.records().map(|rec| header.iter().cloned().zip(rec.unwrap().iter().map(str::to_string)).collect()).collect()
}

fn int(row: &HashMap<String, String>, col: &str) -> i64 {
    row[col].parse().unwrap_or_else(|_| panic!("{col} = {:?}", row[col]))
}

/// Our top kernels equal nsys's gpukernsum, whose 2022.4 rows split by grid/block: added up by name.
fn assert_kernels_equal_gpukernsum(top: &[aggregate::TopKernel], csv: &str) {
    let mut theirs: HashMap<String, (usize, i64)> = HashMap::new();
    for row in stats_csv(csv) {
        let e = theirs.entry(row["Name"].clone()).or_default();
        e.0 += int(&row, "Instances") as usize;
        e.1 += int(&row, "Total Time (ns)");
    }
    assert_eq!(top.len(), theirs.len());
    for k in top {
        assert_eq!((k.calls, k.total_ns), theirs[&k.name], "{}", k.name);
    }
}

#[test]
fn memfusion_regions_equal_nsys_nvtxsum() {
    let (report, _, _) = ingest("memfusion/report1.sqlite");
    // nvtxsum aggregates by `Domain:name`; so do we, over paths and threads.
    let mut ours: HashMap<String, (i64, i64)> = HashMap::new();
    for r in &report.regions {
        let e = ours.entry(format!("{}:{}", r.domain, r.name)).or_default();
        e.0 += r.instances as i64;
        e.1 += r.inclusive_ns;
    }
    let rows = stats_csv("memfusion/report1.nsys2022.4_nvtxsum.csv");
    assert_eq!(rows.len(), 59);
    assert_eq!(ours.len(), rows.len());
    for row in rows {
        let (instances, total) = ours[&row["Range"]];
        assert_eq!(instances, int(&row, "Instances"), "{}", row["Range"]);
        assert_eq!(total, int(&row, "Total Time (ns)"), "{}", row["Range"]);
    }
    let execute = report.regions.iter().find(|r| r.path == "ExecutionContext::execute").unwrap();
    assert_eq!((execute.domain.as_str(), execute.depth, execute.process_id), ("TensorRT", 0, 24129));
    assert!(report.regions.iter().all(|r| r.depth == 0 || r.parent.as_deref() == Some("ExecutionContext::execute")));
}

#[test]
fn memfusion_kernels_equal_nsys_gpukernsum_and_nvtxkernsum() {
    let (report, top, total_kernels) = ingest("memfusion/report1.sqlite");
    assert_kernels_equal_gpukernsum(&top, "memfusion/report1.nsys2022.4_gpukernsum.csv");
    assert_eq!(total_kernels, 36);
    // nvtxkernsum counts each kernel in every range on its launching thread's stack.
    let mut per_range: HashMap<String, (usize, i64)> = HashMap::new();
    let mut outside = (0usize, 0i64);
    for row in stats_csv("memfusion/report1.nsys2022.4_nvtxkernsum.csv") {
        let v = (int(&row, "Kern Inst") as usize, int(&row, "Total Time (ns)"));
        if row["NVTX Range"] == "None" {
            outside = (outside.0 + v.0, outside.1 + v.1);
            continue;
        }
        let e = per_range.entry(row["NVTX Range"].clone()).or_default();
        *e = (e.0 + v.0, e.1 + v.1);
    }
    for r in report.regions.iter().filter(|r| r.kernel_count > 0) {
        assert_eq!(per_range[&format!("{}:{}", r.domain, r.name)], (r.kernel_count, r.gpu_time_ns), "{}", r.path);
    }
    assert_eq!((report.unattributed.kernel_count, report.unattributed.gpu_time_ns), outside);
}

#[test]
fn inclusive_totals_reconcile_with_children_plus_self() {
    let (report, _, total_kernels) = ingest("memfusion/report1.sqlite");
    for r in &report.regions {
        let children: Vec<_> = report.regions.iter().filter(|c| c.parent.as_deref() == Some(r.path.as_str())).collect();
        let kids_time: i64 = children.iter().map(|c| c.inclusive_ns).sum();
        let kids_gpu: i64 = children.iter().map(|c| c.gpu_time_ns).sum();
        let kids_kernels: usize = children.iter().map(|c| c.kernel_count).sum();
        assert_eq!(r.inclusive_ns, r.exclusive_ns + kids_time, "{}", r.path);
        assert_eq!(r.gpu_time_ns, r.gpu_time_exclusive_ns + kids_gpu, "{}", r.path);
        assert_eq!(r.kernel_count, r.kernel_count_exclusive + kids_kernels, "{}", r.path);
        assert!(
            r.gpu_span_ns >= 0 && (r.kernel_count == 0) == (r.gpu_span_ns == 0 && r.gpu_time_ns == 0),
            "{}",
            r.path
        );
    }
    // Every kernel is either in a top-level region or unattributed.
    let top_level: usize = report.regions.iter().filter(|r| r.depth == 0).map(|r| r.kernel_count).sum();
    assert_eq!(top_level + report.unattributed.kernel_count, total_kernels);
}

#[test]
fn abacus_without_nvtx_puts_every_kernel_in_unattributed() {
    let (report, top, total_kernels) = ingest("abacus/report1.nsys2022.4.sqlite");
    assert!(report.regions.is_empty());
    assert_eq!(total_kernels, 23805);
    assert_eq!(report.unattributed.kernel_count, 23805);
    assert!(report.notes.iter().any(|n| n.contains("no NVTX ranges")));
    assert_kernels_equal_gpukernsum(&top, "abacus/report1.nsys2022.4_gpukernsum.csv");
    assert!(top.windows(2).all(|w| w[0].total_ns >= w[1].total_ns));
    let share: f64 = top.iter().map(|k| k.share_pct).sum();
    assert!((share - 100.0).abs() < 1e-6);
}

#[test]
fn uvmtorch_without_kernel_table_is_empty_with_notes() {
    let db = NsysDb::open(&fixture("uvmtorch/report1.sqlite")).unwrap();
    assert!(db.export_version().is_some_and(|v| v.starts_with("2025.3")), "META_DATA_EXPORT read");
    let (report, top, n) = ingest("uvmtorch/report1.sqlite");
    assert_eq!((report.regions.len(), top.len(), n), (0, 0, 0));
    assert!(report.notes.iter().any(|n| n.contains("no CUDA kernels")));
}

#[test]
fn bad_inputs_name_the_file_and_hint() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("report.sqlite");
    let err = NsysDb::open(&missing).err().unwrap();
    assert!(err.message.contains("report.sqlite: no such file"), "{}", err.message);
    assert!(err.hint.unwrap().contains("nsys/stderr.log"));

    let text = dir.path().join("text.sqlite");
    std::fs::write(&text, "Time (%),Total Time (ns)\n").unwrap();
    let err = NsysDb::open(&text).err().unwrap();
    assert_eq!(err.kind, ErrorKind::Unparseable);
    assert!(err.message.contains("text.sqlite"), "{}", err.message);

    let truncated = dir.path().join("truncated.sqlite");
    let bytes = std::fs::read(fixture("memfusion/report1.sqlite")).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 3]).unwrap();
    let err = match NsysDb::open(&truncated) {
        Err(e) => e,
        Ok(db) => db.load().err().unwrap(),
    };
    assert!(err.message.contains("truncated.sqlite"), "{}", err.message);
    assert!(err.hint.is_some());

    let other = dir.path().join("other.sqlite");
    rusqlite::Connection::open(&other).unwrap().execute_batch("CREATE TABLE notes (id INTEGER, body TEXT);").unwrap();
    let err = NsysDb::open(&other).err().unwrap();
    assert!(err.message.contains("not an Nsight Systems export"), "{}", err.message);
}

/// regions.json and top_kernels.json of a real capture follow their published schemas (tests/specs.rs).
#[test]
fn nsys_outputs_follow_their_schemas() {
    let (regions_schema, top_schema) = aggregate::json_schemas();
    let (report, top, _) = ingest("memfusion/report1.sqlite");
    for (schema, value) in
        [(&regions_schema, serde_json::to_value(&report).unwrap()), (&top_schema, serde_json::to_value(&top).unwrap())]
    {
        let validator = jsonschema::validator_for(schema).unwrap();
        let errors: Vec<String> = validator.iter_errors(&value).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:?}");
    }
}
