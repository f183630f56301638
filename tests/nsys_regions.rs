//! Native ingestion of nsys SQLite exports against nsys's own reports on the
//! same real files (the shared corpus: real/ and real/derived/, see its PROVENANCE.md).
use llmperf::aggregate::nsys::{self as aggregate, RegionsReport};
use llmperf::error::ErrorKind;
use llmperf::parse::nsys::sqlite::NsysDb;
use std::collections::HashMap;
use std::path::Path;

const MEMFUSION: &str = "real/memfusion/report1.sqlite";
const ABACUS: &str = "real/derived/abacus/report1.nsys2022.4.sqlite";

/// One pass over an export into its reports, as the pipeline makes them.
fn pass(db: &NsysDb, top_n: usize) -> Result<aggregate::Ingested, llmperf::error::Error> {
    let read = llmperf::parse::nsys::ingest::ingest(db, &[], aggregate::KernelTotals::new)?;
    aggregate::reports(read, &[], top_n, &llmperf::parse::nsys::ingest::Threads)
}

fn ingest(path: &Path) -> (RegionsReport, Vec<aggregate::TopKernel>, usize) {
    let done = pass(&NsysDb::open(path).unwrap(), 0).unwrap();
    (done.regions, done.top, done.kernels)
}

/// Rows of an `nsys stats --format csv` file of the corpus as header → value maps.
fn stats_csv(rel: &str) -> Vec<HashMap<String, String>> {
    let path = crate::common::corpus_dir().expect("the corpus, checked by the caller").join(rel);
    let mut r = csv::Reader::from_path(path).unwrap();
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
    let Some(db) = corpus!(MEMFUSION) else { return };
    let (report, _, _) = ingest(&db);
    // nvtxsum aggregates by `Domain:name`; so do we, over paths and threads.
    let mut ours: HashMap<String, (i64, i64)> = HashMap::new();
    for r in &report.regions {
        let e = ours.entry(format!("{}:{}", r.domain, r.name)).or_default();
        e.0 += r.instances as i64;
        e.1 += r.inclusive_ns;
    }
    let rows = stats_csv("real/derived/memfusion/report1.nsys2022.4_nvtxsum.csv");
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
    let Some(db) = corpus!(MEMFUSION) else { return };
    let (report, top, total_kernels) = ingest(&db);
    assert_kernels_equal_gpukernsum(&top, "real/derived/memfusion/report1.nsys2022.4_gpukernsum.csv");
    assert_eq!(total_kernels, 36);
    // nvtxkernsum counts each kernel in every range on its launching thread's stack.
    let mut per_range: HashMap<String, (usize, i64)> = HashMap::new();
    let mut outside = (0usize, 0i64);
    for row in stats_csv("real/derived/memfusion/report1.nsys2022.4_nvtxkernsum.csv") {
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
    let Some(db) = corpus!(MEMFUSION) else { return };
    let (report, _, total_kernels) = ingest(&db);
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
    let Some(db) = corpus!(ABACUS) else { return };
    let (report, top, total_kernels) = ingest(&db);
    assert!(report.regions.is_empty());
    assert_eq!(total_kernels, 23805);
    assert_eq!(report.unattributed.kernel_count, 23805);
    assert!(report.notes.iter().any(|n| n.contains("no NVTX ranges")));
    assert_kernels_equal_gpukernsum(&top, "real/derived/abacus/report1.nsys2022.4_gpukernsum.csv");
    assert!(top.windows(2).all(|w| w[0].total_ns >= w[1].total_ns));
    let share: f64 = top.iter().map(|k| k.share_pct).sum();
    assert!((share - 100.0).abs() < 1e-6);
}

#[test]
fn uvmtorch_without_kernel_table_is_empty_with_notes() {
    let Some(path) = corpus!("real/uvmtorch/report1.sqlite") else { return };
    let db = NsysDb::open(&path).unwrap();
    assert!(db.export_version().is_some_and(|v| v.starts_with("2025.3")), "META_DATA_EXPORT read");
    let (report, top, n) = ingest(&path);
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
    // A copy of the project's own capture, cut.
    let bytes = std::fs::read(crate::common::own("runs/cpu_llm_tiny/nsys/report.sqlite")).unwrap();
    std::fs::write(&truncated, &bytes[..bytes.len() / 3]).unwrap();
    let err = match NsysDb::open(&truncated) {
        Err(e) => e,
        Ok(db) => pass(&db, 0).err().unwrap(),
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
    let Some(db) = corpus!(MEMFUSION) else { return };
    let schema = |rel: &str| (llmperf::schemas::artifact_of(rel).unwrap().schema)();
    let (regions_schema, top_schema) = (schema("nsys/regions.json"), schema("nsys/top_kernels.json"));
    let (report, top, _) = ingest(&db);
    for (schema, value) in
        [(&regions_schema, serde_json::to_value(&report).unwrap()), (&top_schema, serde_json::to_value(&top).unwrap())]
    {
        let validator = jsonschema::validator_for(schema).unwrap();
        let errors: Vec<String> = validator.iter_errors(&value).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{errors:?}");
    }
}

/// Deep mode end to end on real kernel names: the top kernels of a real nsys
/// capture (abacus, PyTorch fp16 ResNet: long templated names) become an ncu
/// kernel filter that matches exactly those names, on the ncu command line.
#[test]
fn deep_mode_filter_from_a_real_capture_matches_exactly_its_top_kernels() {
    let Some(db) = corpus!(ABACUS) else { return };
    let all = pass(&NsysDb::open(&db).unwrap(), 0).unwrap().top;
    let top = all[..10].to_vec();
    let names: Vec<String> = top.iter().map(|k| k.name.clone()).collect();
    let cfg = llmperf::config::load(&llmperf::config::LoadOptions::default()).unwrap().config;
    let cli = &cfg.pipeline.ncu.ncu_cli;
    let plan = llmperf::plan::ncu::plan(cli, cfg.runner.run.mode, Some(&names), None);
    let filter = plan.kernel_filter.clone().expect("deep mode narrows to the top kernels");
    assert_eq!(filter.source, "nsys_top_n");
    assert_eq!(filter.kernels, names);
    // ncu's regex: is ECMAScript; for these patterns the regex crate agrees.
    let re = regex::Regex::new(filter.expression.strip_prefix("regex:").unwrap()).unwrap();
    for k in &names {
        assert!(re.is_match(k), "{k}");
    }
    let others: Vec<String> = all.into_iter().skip(10).map(|k| k.name).collect();
    assert!(!others.is_empty());
    for k in &others {
        assert!(!re.is_match(k), "{k} is not among the top 10");
    }
    // The argv carries it with the demangled base.
    let pass_cli = plan.passes[0].cli(cli, &plan);
    let argv =
        llmperf::profile::ncu::profile_argv(Path::new("ncu"), &pass_cli, Path::new("p0"), Path::new("p0.log"), &[]);
    let argv: Vec<String> = argv.iter().map(|a| a.to_string_lossy().into_owned()).collect();
    assert!(argv.windows(2).any(|w| w[0] == "--kernel-name" && w[1] == filter.expression));
    assert!(argv.windows(2).any(|w| w == ["--kernel-name-base", "demangled"]));
}

/// Correlation ids count the CUDA calls of one process, so the two processes
/// of a torchrun capture reuse them (264 ids here): a kernel is attributed
/// through the launch call of its own process. The oracle is plain SQL: the
/// kernels whose same-process launch call began inside a push/pop range of
/// the launching thread.
#[test]
fn kernels_of_two_processes_are_attributed_through_their_own_launch_calls() {
    let Some(db) = corpus!("real/nsys-ai/mfu_2gpu_before.sqlite") else { return };
    let conn = rusqlite::Connection::open(&db).unwrap();
    let reused: i64 = conn
        .query_row(
            "SELECT count(*) FROM (SELECT correlationId FROM CUPTI_ACTIVITY_KIND_RUNTIME \
             GROUP BY correlationId HAVING count(DISTINCT globalTid >> 24) > 1)",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(reused, 264, "the capture reuses correlation ids across its processes");
    let sql = |inside: &str| -> (usize, i64) {
        conn.query_row(
            &format!(
                "SELECT count(*), sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k \
                 LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId \
                 AND (k.globalPid >> 24) = (r.globalTid >> 24) WHERE {inside} EXISTS (SELECT 1 FROM NVTX_EVENTS n \
                 WHERE n.eventType = 59 AND n.globalTid = r.globalTid AND n.start <= r.start AND n.end > r.start)"
            ),
            [],
            |r| Ok((r.get::<_, i64>(0)? as usize, r.get(1)?)),
        )
        .unwrap()
    };
    let (report, _, kernels) = ingest(&db);
    let top: Vec<_> = report.regions.iter().filter(|r| r.depth == 0).collect();
    let attributed = (top.iter().map(|r| r.kernel_count).sum(), top.iter().map(|r| r.gpu_time_ns).sum());
    assert_eq!(attributed, sql(""));
    assert_eq!((report.unattributed.kernel_count, report.unattributed.gpu_time_ns), sql("NOT"));
    assert_eq!(kernels, 4010);
}

/// Each region's kernels by name add up to its totals, and the kernels outside
/// every range, by name, are what SQL finds launched outside every range; the
/// capture has no CUDA graph nodes, and no region says it has.
#[test]
fn per_region_kernels_by_name_equal_sql_sums() {
    let Some(db) = corpus!("real/nsys-ai/mfu_2gpu_before.sqlite") else { return };
    let (report, _, _) = ingest(&db);
    for r in &report.regions {
        let calls: usize = r.kernels.iter().map(|k| k.calls).sum();
        let ns: i64 = r.kernels.iter().map(|k| k.gpu_time_ns).sum();
        assert_eq!((calls, ns), (r.kernel_count, r.gpu_time_ns), "{}", r.path);
        assert_eq!((r.graph_kernel_count, r.graph_gpu_time_ns), (0, 0));
    }
    assert!(report.regions.iter().any(|r| r.kernels.len() > 1), "regions with several kernels");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let graph_nodes: i64 =
        conn.query_row("SELECT count(graphNodeId) FROM CUPTI_ACTIVITY_KIND_KERNEL", [], |r| r.get(0)).unwrap();
    assert_eq!(graph_nodes, 0);
    let mut stmt = conn
        .prepare(
            "SELECT s.value, count(*), sum(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k \
             JOIN StringIds s ON s.id = k.demangledName \
             LEFT JOIN CUPTI_ACTIVITY_KIND_RUNTIME r ON r.correlationId = k.correlationId \
             AND (k.globalPid >> 24) = (r.globalTid >> 24) WHERE NOT EXISTS (SELECT 1 FROM NVTX_EVENTS n \
             WHERE n.eventType = 59 AND n.globalTid = r.globalTid AND n.start <= r.start AND n.end > r.start) \
             GROUP BY s.value",
        )
        .unwrap();
    let sql: HashMap<String, (usize, i64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, (r.get::<_, i64>(1)? as usize, r.get(2)?))))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let ours: HashMap<String, (usize, i64)> =
        report.unattributed.kernels.iter().map(|k| (k.name.clone(), (k.calls, k.gpu_time_ns))).collect();
    assert!(!sql.is_empty());
    assert_eq!(ours, sql);
}

/// The graph columns are read only when the export names a graph launch
/// call. A copy of a capture whose kernels are all marked as graph nodes
/// counts every kernel as graph time, in every region and outside; without a
/// graph launch among its strings, none.
#[test]
fn graph_nodes_are_counted_where_the_export_names_a_graph_launch() {
    let Some(db) = corpus!(MEMFUSION) else { return };
    let (_dir, copy, conn) = writable_copy(&db);
    conn.execute_batch("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET graphNodeId = rowid;").unwrap();
    let (without, _, _) = ingest(&copy);
    assert!(without.regions.iter().all(|r| r.graph_kernel_count == 0));
    conn.execute_batch(
        "INSERT INTO StringIds (id, value) VALUES ((SELECT max(id) + 1 FROM StringIds), 'cudaGraphLaunch_v10000');",
    )
    .unwrap();
    drop(conn);
    let (with, _, _) = ingest(&copy);
    assert!(with.regions.iter().any(|r| r.kernel_count > 0));
    for r in &with.regions {
        assert_eq!((r.graph_kernel_count, r.graph_gpu_time_ns), (r.kernel_count, r.gpu_time_ns), "{}", r.path);
    }
    let u = &with.unattributed;
    assert_eq!((u.graph_kernel_count, u.graph_gpu_time_ns), (u.kernel_count, u.gpu_time_ns));
}

/// A copy of a corpus export to rewrite, in a directory dropped with the test.
fn writable_copy(db: &Path) -> (tempfile::TempDir, std::path::PathBuf, rusqlite::Connection) {
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.sqlite");
    std::fs::copy(db, &copy).unwrap();
    let conn = rusqlite::Connection::open(&copy).unwrap();
    (dir, copy, conn)
}

/// The same regions and top kernels from an export and its rewritten copy,
/// on a capture with attributed kernels.
fn assert_same_reports(db: &Path, copy: &Path) {
    let (a, b) = (ingest(db), ingest(copy));
    assert!(a.0.regions.iter().any(|r| r.kernel_count > 0), "a capture with attributed kernels");
    assert_eq!(serde_json::to_value(&a.0).unwrap(), serde_json::to_value(&b.0).unwrap());
    assert_eq!(serde_json::to_value(&a.1).unwrap(), serde_json::to_value(&b.1).unwrap());
}

/// Rows stored out of time order (newer exports promise no order) give the
/// same reports as rows in order: ingestion sees the disorder and lets SQLite
/// sort. The copy stores its NVTX, runtime and kernel rows newest first (the
/// launch join then reads every kernel ahead before the first launch call).
#[test]
fn rows_stored_out_of_time_order_give_the_same_reports() {
    let Some(db) = corpus!(MEMFUSION) else { return };
    let (_dir, copy, conn) = writable_copy(&db);
    for table in ["NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL"] {
        conn.execute_batch(&format!(
            "CREATE TABLE t AS SELECT * FROM {table} ORDER BY start DESC; DELETE FROM {table}; \
             INSERT INTO {table} SELECT * FROM t; DROP TABLE t;"
        ))
        .unwrap();
    }
    let first: i64 =
        conn.query_row("SELECT start FROM NVTX_EVENTS WHERE eventType = 59 LIMIT 1", [], |r| r.get(0)).unwrap();
    let last: i64 =
        conn.query_row("SELECT max(start) FROM NVTX_EVENTS WHERE eventType = 59", [], |r| r.get(0)).unwrap();
    assert_eq!(first, last, "the copy stores its newest range first");
    drop(conn);
    assert_same_reports(&db, &copy);
}

/// A start stored as text (it sorts after every number and SQLite reads it
/// as 0) ends the ingestion with an error naming the file, table, column and
/// value, not a report of the rows before it. (It was once caught later, as
/// rows still out of order after SQLite sorted them.)
#[test]
fn rows_out_of_order_after_sorting_are_an_error_not_a_partial_report() {
    let Some(db) = corpus!(MEMFUSION) else { return };
    let (_dir, copy, conn) = writable_copy(&db);
    conn.execute_batch(
        "UPDATE NVTX_EVENTS SET start = 'late' WHERE rowid = \
         (SELECT rowid FROM NVTX_EVENTS WHERE eventType = 59 ORDER BY start LIMIT 1 OFFSET 3);",
    )
    .unwrap();
    drop(conn);
    let err = pass(&NsysDb::open(&copy).unwrap(), 0).err().expect("an error, not a report");
    assert_eq!(err.kind, ErrorKind::Unparseable);
    assert!(err.message.contains("copy.sqlite: reading NVTX_EVENTS"), "{}", err.message);
    assert!(err.message.contains("table NVTX_EVENTS, column start, row "), "{}", err.message);
    assert!(err.message.contains("text \"late\" where an integer belongs"), "{}", err.message);
}

/// The range reader names domains from their create events as it meets them
/// (a domain is created before its ranges). A copy that stores the create
/// event after every range still names them, from a query of all the domains,
/// with the same reports.
#[test]
fn a_domain_created_after_its_ranges_in_stored_order_still_names_them() {
    let Some(db) = corpus!(MEMFUSION) else { return };
    let (_dir, copy, conn) = writable_copy(&db);
    conn.execute_batch(
        "CREATE TABLE t AS SELECT * FROM NVTX_EVENTS WHERE eventType = 75; \
         DELETE FROM NVTX_EVENTS WHERE eventType = 75; INSERT INTO NVTX_EVENTS SELECT * FROM t; DROP TABLE t;",
    )
    .unwrap();
    let last: (i64, String) = conn
        .query_row("SELECT eventType, text FROM NVTX_EVENTS ORDER BY rowid DESC LIMIT 1", [], |r| {
            Ok((r.get(0)?, r.get(1)?))
        })
        .unwrap();
    assert_eq!(last, (75, "TensorRT".to_string()), "the copy stores the domain's create event last");
    drop(conn);
    let (regions, _, _) = ingest(&copy);
    assert!(regions.regions.iter().any(|r| r.domain == "TensorRT"), "ranges named with their domain");
    assert_same_reports(&db, &copy);
}

/// A copy of the memfusion export whose correlation ids (kernels and launch
/// calls alike) are multiplied by `factor` and whose kernels are stored newest
/// first; with how far the kernels' ids fall in that order.
fn kernels_out_of_id_order(db: &Path, factor: i64) -> (tempfile::TempDir, std::path::PathBuf, i64) {
    let (dir, copy, conn) = writable_copy(db);
    conn.execute_batch(&format!(
        "UPDATE CUPTI_ACTIVITY_KIND_RUNTIME SET correlationId = correlationId * {factor}; \
         UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET correlationId = correlationId * {factor}; \
         CREATE TABLE t AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start DESC; \
         DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL; INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM t; DROP TABLE t;"
    ))
    .unwrap();
    let spread: i64 = conn
        .query_row("SELECT max(correlationId) - min(correlationId) FROM CUPTI_ACTIVITY_KIND_KERNEL", [], |r| r.get(0))
        .unwrap();
    (dir, copy, spread)
}

/// A kernel table further out of correlation-id order than the launch join
/// first assumes ([`ASSUMED_DISORDER`] ids), but not past what it reads ahead
/// once measured ([`MAX_DISORDER`]): the first pass gives up where a kernel
/// breaks the bound, the second measures it, and the reports are the same.
/// Ids 100 apart.
#[test]
fn kernels_out_of_id_order_past_the_assumed_bound_give_the_same_reports() {
    use llmperf::parse::nsys::launch_join::{ASSUMED_DISORDER, MAX_DISORDER};
    let Some(db) = corpus!(MEMFUSION) else { return };
    let (_dir, copy, spread) = kernels_out_of_id_order(&db, 100);
    assert!(
        spread > ASSUMED_DISORDER && spread <= MAX_DISORDER,
        "newest first, the ids fall by {spread}: past the assumed bound, within the measured one"
    );
    assert_same_reports(&db, &copy);
}

/// A kernel table further out of correlation-id order than the streaming
/// launch join reads ahead ([`MAX_DISORDER`] ids) is joined by SQLite instead,
/// with the same reports. Ids 1,000 apart.
#[test]
fn kernels_far_out_of_id_order_are_joined_by_sqlite_with_the_same_reports() {
    use llmperf::parse::nsys::launch_join::MAX_DISORDER;
    let Some(db) = corpus!(MEMFUSION) else { return };
    let (_dir, copy, spread) = kernels_out_of_id_order(&db, 1000);
    assert!(spread > MAX_DISORDER, "newest first, the ids fall by {spread}: past what the join reads ahead");
    assert_same_reports(&db, &copy);
}

/// Where the export has `shortName`, each top kernel carries it: the short
/// name SQLite joins to that demangled name, never the demangled one again.
#[test]
fn top_kernels_carry_the_exports_short_names() {
    let Some(db) = corpus!(MEMFUSION) else { return };
    let (_, top, _) = ingest(&db);
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mut sql = conn
        .prepare(
            "SELECT DISTINCT d.value, s.value FROM CUPTI_ACTIVITY_KIND_KERNEL k \
             JOIN StringIds d ON d.id = k.demangledName JOIN StringIds s ON s.id = k.shortName",
        )
        .unwrap();
    let shorts: HashMap<String, String> =
        sql.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap().map(Result::unwrap).collect();
    assert_eq!(top.len(), shorts.len(), "one short name per demangled name here");
    let mut with_short = 0;
    for k in &top {
        let want = Some(&shorts[&k.name]).filter(|s| **s != k.name);
        assert_eq!(k.short_name.as_ref(), want, "{}", k.name);
        with_short += usize::from(k.short_name.is_some());
    }
    assert!(with_short > 0, "memfusion has kernels whose short name differs");
}

/// What plain SQL and a few lines of arithmetic, sharing nothing with
/// llmperf's readers, say about an nsys export: kernels and GPU time per
/// process; instances and total duration per range name; and per top-level
/// push/pop range name, the GPU time of the kernels whose launch call began
/// inside an instance on its thread (one launch per process and correlation
/// id: some exports have two runtime rows per launch; a CUDA graph's kernels
/// share their launch's id).
#[derive(Debug, Default, PartialEq)]
struct Oracle {
    per_process: std::collections::BTreeMap<i64, (usize, i64)>,
    per_name: std::collections::BTreeMap<String, (usize, i64)>,
    top_level_gpu: std::collections::BTreeMap<String, i64>,
}

fn oracle(db: &Path) -> Oracle {
    use std::collections::HashMap;
    let conn = rusqlite::Connection::open_with_flags(db, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let has = |t: &str| {
        conn.query_row("SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?1", [t], |r| {
            r.get::<_, i64>(0)
        })
        .unwrap()
            > 0
    };
    let pid = "(({0} >> 24) & 16777215)";
    let mut o = Oracle::default();
    let mut kernels: HashMap<(i64, i64), i64> = HashMap::new();
    if has("CUPTI_ACTIVITY_KIND_KERNEL") {
        let sql = format!(
            "SELECT {}, correlationId, end - start FROM CUPTI_ACTIVITY_KIND_KERNEL WHERE end >= start",
            pid.replace("{0}", "globalPid")
        );
        let mut stmt = conn.prepare(&sql).unwrap();
        for row in stmt.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?))).unwrap()
        {
            let (p, id, ns) = row.unwrap();
            let e = o.per_process.entry(p).or_default();
            *e = (e.0 + 1, e.1 + ns);
            *kernels.entry((p, id)).or_default() += ns;
        }
    }
    if !has("NVTX_EVENTS") {
        return o;
    }
    let name = "COALESCE(e.text, (SELECT value FROM StringIds WHERE id = e.textId), '')";
    let sql = format!(
        "SELECT e.globalTid, e.start, e.end, e.eventType, {name} FROM NVTX_EVENTS e \
         WHERE e.eventType IN (59, 60) AND e.end IS NOT NULL AND e.end >= e.start"
    );
    let mut stmt = conn.prepare(&sql).unwrap();
    let rows: Vec<(i64, i64, i64, i64, String)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    // Top-level push/pop instances per thread: (start, end, name), in time order.
    let mut by_thread: HashMap<i64, Vec<(i64, i64, String)>> = HashMap::new();
    for (tid, start, end, kind, name) in &rows {
        let e = o.per_name.entry(name.clone()).or_default();
        *e = (e.0 + 1, e.1 + (end - start));
        if *kind == 59 {
            by_thread.entry(*tid).or_default().push((*start, *end, name.clone()));
        }
    }
    let mut top: HashMap<i64, Vec<(i64, i64, String)>> = HashMap::new();
    for (tid, mut ranges) in by_thread {
        ranges.sort_by_key(|(s, e, _)| (*s, -*e));
        let mut open_until = i64::MIN;
        for r in ranges {
            if r.0 >= open_until {
                open_until = r.1;
                top.entry(tid).or_default().push(r);
            }
        }
    }
    if has("CUPTI_ACTIVITY_KIND_RUNTIME") && !kernels.is_empty() {
        let sql = format!(
            "SELECT MIN(globalTid), {}, correlationId, MIN(start) FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY 2, 3",
            pid.replace("{0}", "globalTid")
        );
        let mut stmt = conn.prepare(&sql).unwrap();
        for row in stmt
            .query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?, r.get::<_, i64>(3)?)))
            .unwrap()
        {
            let (tid, p, id, start) = row.unwrap();
            let (Some(ns), Some(ranges)) = (kernels.get(&(p, id)), top.get(&tid)) else { continue };
            // The last top-level instance that starts at or before the call, if the call is before its end.
            let i = ranges.partition_point(|r| r.0 <= start);
            if let Some(r) = i.checked_sub(1).map(|i| &ranges[i]).filter(|r| start < r.1) {
                *o.top_level_gpu.entry(r.2.clone()).or_default() += ns;
            }
        }
    }
    o
}

/// The same three views of llmperf's import (regions.json).
fn as_imported(run: &Path) -> Oracle {
    let regions = crate::common::json(&run.join("nsys/regions.json"));
    let mut o = Oracle::default();
    for p in regions["processes"].as_array().into_iter().flatten() {
        let e = o.per_process.entry(p["process_id"].as_i64().unwrap()).or_default();
        for d in p["devices"].as_array().unwrap() {
            *e = (e.0 + d["kernel_count"].as_u64().unwrap() as usize, e.1 + d["gpu_time_ns"].as_i64().unwrap());
        }
    }
    for r in regions["regions"].as_array().unwrap() {
        let name = r["name"].as_str().unwrap().to_string();
        let e = o.per_name.entry(name.clone()).or_default();
        *e = (e.0 + r["instances"].as_u64().unwrap() as usize, e.1 + r["inclusive_ns"].as_i64().unwrap());
        let gpu = r["gpu_time_ns"].as_i64().unwrap();
        if r["depth"] == 0 && r["style"] == "PushPop" && gpu > 0 {
            *o.top_level_gpu.entry(name).or_default() += gpu;
        }
    }
    o.top_level_gpu.retain(|_, ns| *ns > 0);
    o
}

/// Every nsys SQLite export of the shared corpus (and this project's own
/// capture), imported and checked against [`oracle`], exactly. A file dropped
/// into the corpus is checked without a test of its own.
#[test]
fn every_nsys_export_of_the_corpus_equals_plain_sql() {
    let test = "every_nsys_export_of_the_corpus_equals_plain_sql";
    let mut files = vec![crate::common::own("runs/cpu_llm_tiny/nsys/report.sqlite")];
    match crate::common::corpus_dir() {
        Some(dir) => files.extend(sqlite_files(&dir)),
        None => crate::common::skipped(test, "the shared corpus is not there: only the project's own capture checked"),
    }
    let root = tempfile::tempdir().unwrap();
    let mut judged = Vec::new();
    // How much each view held over all files: a harness that compares empty maps proves nothing.
    let (mut kernels, mut names, mut tops) = (0, 0, 0);
    for (i, db) in files.iter().enumerate() {
        let copy = root.path().join(format!("{i}.sqlite"));
        std::fs::copy(db, &copy).unwrap();
        let run = root.path().join(format!("run{i}"));
        crate::common::import_nsys(&copy, &run, &["report.nvtx_attributes=[]"]);
        let (want, got) = (oracle(&copy), as_imported(&run));
        assert_eq!(got.per_process, want.per_process, "{}: kernels per process", db.display());
        assert_eq!(got.per_name, want.per_name, "{}: instances and ns per range name", db.display());
        let mut want_top = want.top_level_gpu;
        want_top.retain(|_, ns| *ns > 0);
        assert_eq!(got.top_level_gpu, want_top, "{}: GPU time per top-level range name", db.display());
        crate::common::assert_kernel_labels_unique(&run);
        kernels += got.per_process.values().map(|p| p.0).sum::<usize>();
        names += got.per_name.len();
        tops += got.top_level_gpu.len();
        judged.push(db.display().to_string());
    }
    eprintln!("judged against SQL: {}", judged.join(", "));
    assert!(!judged.is_empty());
    if crate::common::corpus_dir().is_some() {
        assert!(
            kernels > 20_000 && names > 100 && tops > 10,
            "{kernels} kernels, {names} names, {tops} top-level names"
        );
    }
}

fn sqlite_files(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(sqlite_files(&p));
        } else if p.extension().is_some_and(|x| x == "sqlite") {
            out.push(p);
        }
    }
    out.sort();
    out
}

/// The page reader (`parse::nsys::pages`) and SQLite alone
/// (`LLMPERF_NSYS_PAGES=0`) write the same artifacts from every SQLite
/// export of the corpus; and from a copy of one whose range name in the
/// middle of the table is a blob, which the pages leave to SQLite from that
/// row on.
#[test]
fn the_page_reader_writes_what_sqlite_alone_writes() {
    let dir = tempfile::tempdir().unwrap();
    let test = this_test!();
    let mut dbs = Vec::new();
    for (i, rel) in [
        MEMFUSION,
        ABACUS,
        "real/nsys-ai/mfu_2gpu_before.sqlite",
        "real/isc25-icon/gpu.sqlite",
        "real/fuser/report1.sqlite",
        "real/uvmtorch/report1.sqlite",
    ]
    .into_iter()
    .enumerate()
    {
        let at = dir.path().join(i.to_string());
        std::fs::create_dir_all(&at).unwrap();
        let Some(db) = crate::common::corpus_copy(&test, rel, &at) else { return };
        dbs.push(db);
    }
    let edited = dir.path().join("blob.sqlite");
    // fuser's capture: one process, whose first pass reads every range.
    std::fs::copy(&dbs[4], &edited).unwrap();
    let conn = rusqlite::Connection::open(&edited).unwrap();
    let changed = conn
        .execute(
            "UPDATE NVTX_EVENTS SET text = CAST(text AS BLOB) WHERE rowid = (SELECT rowid FROM NVTX_EVENTS \
             WHERE eventType = 59 AND text IS NOT NULL ORDER BY rowid LIMIT 1 OFFSET 6000)",
            [],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);
    dbs.push(edited);
    for (i, db) in dbs.iter().enumerate() {
        let import = |pages: &str| {
            // The same run id (the directory's name) both times.
            let out = dir.path().join(format!("pages{pages}")).join(format!("run{i}"));
            let run = crate::common::llmperf()
                .env("LLMPERF_NSYS_PAGES", pages)
                .args(["-vv", "import", "nsys"])
                .arg(db)
                .arg("-o")
                .arg(&out)
                .arg("pipeline.nsys.executable=/nonexistent")
                .assert()
                .success();
            (out, String::from_utf8_lossy(&run.get_output().stderr).into_owned())
        };
        let ((paged, log), (alone, _)) = (import("1"), import("0"));
        let files = |d: &Path| llmperf::run_dir::RunDir::open(d).unwrap().files();
        let written = files(&paged);
        assert_eq!(written, files(&alone), "{}", db.display());
        for f in written.iter().filter(|f| !f.ends_with("manifest.json")) {
            let read = |d: &Path| String::from_utf8_lossy(&std::fs::read(d.join(f)).unwrap()).into_owned();
            assert!(read(&paged) == read(&alone), "{f} of {} differs", db.display());
        }
        let handed_over = log.contains("NVTX_EVENTS: SQLite reads on from rowid");
        assert_eq!(handed_over, i == dbs.len() - 1, "{}", db.display());
        if i != 1 && i != 5 {
            assert!(log.contains("NVTX_EVENTS: read from its pages"), "{}: {log}", db.display());
        }
    }
}
