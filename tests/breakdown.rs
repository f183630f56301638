//! The time breakdown (`nsys/breakdown.json`) of the real exports of the
//! shared corpus against SQL written here, which shares no code with
//! llmperf: per top-level region and device, the union of the kernel, copy
//! and memset intervals clipped to the region's instances (gaps and islands
//! with window functions), and the parts by the same unions over subsets.
use rusqlite::{Connection, OpenFlags};
use std::collections::BTreeMap;
use std::path::Path;

use crate::common::{import_nsys, json};

/// (process, device, region name) → ns.
type ByRegion = BTreeMap<(i64, i64, String), i64>;

/// Top-level push/pop ranges of each thread: those that start at or after
/// the end of every earlier range of the thread (push/pop ranges nest), by
/// their name without the attributes PyTorch's emit_nvtx appends
/// (`AllToAll4D, seq = 45440, op_id = 990760`), as report.nvtx_attributes strips them.
const WINDOWS: &str = "named AS (
    SELECT e.rowid AS id, (e.globalTid >> 24) & 16777215 AS pid, e.globalTid AS tid, e.start AS ws, e.end AS we,
           COALESCE(e.text, (SELECT value FROM StringIds WHERE id = e.textId)) AS raw
    FROM NVTX_EVENTS e WHERE e.eventType = 59 AND e.end IS NOT NULL AND e.end >= e.start),
    nested AS (SELECT *, MAX(we) OVER (PARTITION BY tid ORDER BY ws, we DESC, id
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before FROM named),
    win AS (SELECT id, pid, ws, we, CASE
               WHEN instr(raw, ', seq = ') > 0 THEN substr(raw, 1, instr(raw, ', seq = ') - 1)
               WHEN instr(raw, ', op_id = ') > 0 THEN substr(raw, 1, instr(raw, ', op_id = ') - 1)
               ELSE raw END AS name
            FROM nested WHERE before IS NULL OR ws >= before)";

/// Every GPU operation: kind 0 kernel (comm 1 for NCCL), 1 copy, 2 memset.
fn activity(conn: &Connection) -> String {
    format!("act AS ({})", crate::common::gpu_activity_sql(conn, "nccl%"))
}

/// The union of the operations `keep` selects (a condition on `comm` and
/// `kind`), clipped to each top-level instance, summed per (process, device, name).
fn union_by_region(conn: &Connection, keep: &str) -> ByRegion {
    let sql = format!(
        "WITH {WINDOWS}, {act},
        iv AS (SELECT w.id AS wid, a.dev AS dev, MAX(a.s, w.ws) AS s, MIN(a.e, w.we) AS e
               FROM win w JOIN act a ON a.pid = w.pid AND a.s < w.we AND a.e > w.ws WHERE {keep}),
        o AS (SELECT wid, dev, s, e, MAX(e) OVER (PARTITION BY wid, dev ORDER BY s, e
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS pm FROM iv),
        g AS (SELECT wid, dev, s, e, SUM(CASE WHEN pm IS NULL OR s > pm THEN 1 ELSE 0 END)
               OVER (PARTITION BY wid, dev ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS isl FROM o),
        u AS (SELECT wid, dev, MAX(e) - MIN(s) AS len FROM g GROUP BY wid, dev, isl)
        SELECT w.pid, u.dev, w.name, SUM(u.len) FROM u JOIN win w ON w.id = u.wid GROUP BY 1, 2, 3",
        act = activity(conn)
    );
    let mut stmt = conn.prepare(&sql).unwrap();
    let rows = stmt.query_map([], |r| Ok(((r.get(0)?, r.get(1)?, r.get(2)?), r.get(3)?))).unwrap();
    rows.map(Result::unwrap).collect()
}

/// The wall time of each top-level region per process.
fn wall_by_region(conn: &Connection) -> BTreeMap<(i64, String), i64> {
    let sql = format!("WITH {WINDOWS} SELECT pid, name, SUM(we - ws) FROM win GROUP BY 1, 2");
    let mut stmt = conn.prepare(&sql).unwrap();
    let rows = stmt.query_map([], |r| Ok(((r.get(0)?, r.get(1)?), r.get(2)?))).unwrap();
    rows.map(Result::unwrap).collect()
}

fn import(db: &Path, dir: &Path) -> serde_json::Value {
    let out = dir.join("run");
    import_nsys(db, &out, &[]);
    json(&out.join("nsys/breakdown.json"))
}

/// llmperf's rows as (process, device, name) → one part (rows of one name summed over domains).
/// SQL: the export's kernel time, and that of the kernels whose demangled name is `LIKE` the pattern.
fn kernel_ns(db: &Path, like: &str) -> (i64, i64) {
    let conn = Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    conn.query_row(
        "SELECT SUM(k.end - k.start), SUM(CASE WHEN n.value LIKE ?1 THEN k.end - k.start ELSE 0 END)
         FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds n ON n.id = k.demangledName",
        [like],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap()
}

fn parts(report: &serde_json::Value, part: &str) -> ByRegion {
    let mut out = ByRegion::new();
    for d in report["devices"].as_array().unwrap() {
        for r in d["regions"].as_array().unwrap() {
            let key = (
                d["process_id"].as_i64().unwrap(),
                d["device"].as_i64().unwrap(),
                r["name"].as_str().unwrap().to_string(),
            );
            *out.entry(key).or_default() += r["parts"][part].as_i64().unwrap();
        }
    }
    out
}

/// Where SQL has no row, the part is 0.
fn assert_equal(what: &str, llmperf: &ByRegion, sql: &ByRegion) {
    let keys: std::collections::BTreeSet<_> = llmperf.keys().chain(sql.keys()).collect();
    for k in keys {
        let (a, b) = (llmperf.get(k).copied().unwrap_or(0), sql.get(k).copied().unwrap_or(0));
        assert_eq!(a, b, "{what} of {k:?}: llmperf {a}, SQL {b}");
    }
}

/// Every part against SQL, and the sums that make the parts a partition.
fn check_against_sql(rel: &str, test: &str) -> Option<serde_json::Value> {
    let db = crate::common::corpus_file(test, rel)?;
    let dir = tempfile::tempdir().unwrap();
    let report = import(&db, dir.path());
    let conn = Connection::open_with_flags(&db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let busy = union_by_region(&conn, "1");
    let compute = union_by_region(&conn, "a.kind = 0 AND a.comm = 0");
    let kernels = union_by_region(&conn, "a.kind = 0");
    let not_memset = union_by_region(&conn, "a.kind < 2");
    assert!(!busy.is_empty(), "{rel}: SQL finds GPU work inside top-level ranges");
    let minus = |a: &ByRegion, b: &ByRegion| -> ByRegion {
        a.iter().map(|(k, v)| (k.clone(), v - b.get(k).copied().unwrap_or(0))).collect()
    };
    assert_equal("busy_ns", &parts(&report, "busy_ns"), &busy);
    assert_equal("compute_ns", &parts(&report, "compute_ns"), &compute);
    assert_equal("communication_exposed_ns", &parts(&report, "communication_exposed_ns"), &minus(&kernels, &compute));
    assert_equal("copy_ns", &parts(&report, "copy_ns"), &minus(&not_memset, &kernels));
    assert_equal("memset_ns", &parts(&report, "memset_ns"), &minus(&busy, &not_memset));
    let wall = wall_by_region(&conn);
    for d in report["devices"].as_array().unwrap() {
        let pid = d["process_id"].as_i64().unwrap();
        for r in d["regions"].as_array().unwrap() {
            let p = &r["parts"];
            let n = |k: &str| p[k].as_i64().unwrap();
            let name = r["name"].as_str().unwrap().to_string();
            assert_eq!(n("wall_ns"), wall[&(pid, name.clone())], "{rel}: wall of {name}");
            assert_eq!(n("wall_ns"), n("busy_ns") + n("idle_ns"), "{rel}: {name}: {p}");
            assert_eq!(
                n("idle_ns"),
                n("idle_launch_ns") + n("idle_sync_ns") + n("idle_nothing_queued_ns"),
                "{rel}: {name}"
            );
        }
    }
    Some(report)
}

#[test]
fn two_process_fsdp_capture_equals_sql_and_shows_exposed_communication() {
    let Some(report) = check_against_sql("real/nsys-ai/mfu_2gpu_before.sqlite", &crate::this_test!()) else { return };
    let devices = report["devices"].as_array().unwrap();
    assert_eq!(devices.len(), 2, "two processes, one device each");
    for d in devices {
        let span = &d["span"];
        // NCCL never ran beside compute in this capture: all of it exposed.
        assert!(span["communication_exposed_ns"].as_i64().unwrap() > 8_000_000, "{span}");
        assert_eq!(span["communication_overlapped_ns"], 0, "{span}");
        assert_eq!(d["other_share"], 0.0);
    }
}

/// The islands of the union of the operations `keep` selects, per (process, device).
fn islands(conn: &Connection, keep: &str) -> BTreeMap<(i64, i64), Vec<(i64, i64)>> {
    let sql = format!(
        "WITH {act}, k AS (SELECT pid, dev, s, e FROM act a WHERE {keep}),
        o AS (SELECT pid, dev, s, e, MAX(e) OVER (PARTITION BY pid, dev ORDER BY s, e
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS pm FROM k),
        g AS (SELECT pid, dev, s, e, SUM(CASE WHEN pm IS NULL OR s > pm THEN 1 ELSE 0 END)
               OVER (PARTITION BY pid, dev ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS isl FROM o)
        SELECT pid, dev, MIN(s), MAX(e) FROM g GROUP BY pid, dev, isl ORDER BY 1, 2, 3",
        act = activity(conn)
    );
    let mut out: BTreeMap<(i64, i64), Vec<(i64, i64)>> = BTreeMap::new();
    let mut stmt = conn.prepare(&sql).unwrap();
    let rows = stmt.query_map([], |r| Ok(((r.get(0)?, r.get(1)?), (r.get(2)?, r.get(3)?)))).unwrap();
    for (key, iv) in rows.map(Result::unwrap) {
        out.entry(key).or_default().push(iv);
    }
    out
}

/// The time of `intervals` inside [from, to).
fn inside(intervals: &[(i64, i64)], from: i64, to: i64) -> i64 {
    intervals.iter().map(|&(s, e)| (e.min(to) - s.max(from)).max(0)).sum()
}

/// breakdown.json's timeline, bin by bin: its busy and compute time equal
/// SQL's unions clipped to the bin, its bins add up to the span, and the
/// lane names the top-level range (SQL's, by name) that covered most of the
/// bin wherever one covered strictly most.
#[test]
fn the_timeline_of_the_fsdp_capture_equals_sql_bin_by_bin() {
    let Some(db) = corpus!("real/nsys-ai/mfu_2gpu_before.sqlite") else { return };
    let dir = tempfile::tempdir().unwrap();
    let report = import(&db, dir.path());
    let conn = Connection::open_with_flags(&db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let (busy, compute) = (islands(&conn, "1"), islands(&conn, "a.kind = 0 AND a.comm = 0"));
    let mut stmt = conn.prepare(&format!("WITH {WINDOWS} SELECT pid, ws, we, name FROM win")).unwrap();
    let windows: Vec<(i64, i64, i64, String)> =
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?))).unwrap().map(Result::unwrap).collect();
    let (mut bins_seen, mut named) = (0, 0);
    for d in report["devices"].as_array().unwrap() {
        let key = (d["process_id"].as_i64().unwrap(), d["device"].as_i64().unwrap());
        let t = &d["timeline"];
        let (start, width) = (t["start_ns"].as_i64().unwrap(), t["bin_ns"].as_i64().unwrap());
        let bins: Vec<Vec<i64>> = serde_json::from_value(t["bins"].clone()).unwrap();
        assert!(bins.len() > 128 && bins.len() <= 256, "{key:?}: {} bins", bins.len());
        assert_eq!(start, busy[&key][0].0, "{key:?}: the timeline starts at the first operation");
        let span_end = busy[&key].iter().map(|i| i.1).max().unwrap();
        assert!(start + width * bins.len() as i64 >= span_end && start + width * (bins.len() as i64 - 1) < span_end);
        for (k, part) in ["compute_ns", "communication_exposed_ns", "copy_ns", "memset_ns"].iter().enumerate() {
            assert_eq!(bins.iter().map(|b| b[k]).sum::<i64>(), d["span"][part].as_i64().unwrap(), "{key:?}: {part}");
        }
        let names: Vec<&str> = t["regions"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
        for (i, b) in bins.iter().enumerate() {
            let (from, to) = (start + width * i as i64, (start + width * (i as i64 + 1)).min(span_end));
            assert_eq!(b.iter().sum::<i64>(), to - from, "{key:?} bin {i}: the parts add up to its length");
            assert_eq!(b[..4].iter().sum::<i64>(), inside(&busy[&key], from, to), "{key:?} bin {i}: busy");
            assert_eq!(b[0], inside(&compute[&key], from, to), "{key:?} bin {i}: compute");
            let mut cover: BTreeMap<&str, i64> = BTreeMap::new();
            for (_, ws, we, name) in windows.iter().filter(|w| w.0 == key.0) {
                let ns = (we.min(&to) - ws.max(&from)).max(0);
                if ns > 0 {
                    *cover.entry(name.as_str()).or_default() += ns;
                }
            }
            let mut ranked: Vec<(&str, i64)> = cover.into_iter().collect();
            ranked.sort_by_key(|c| std::cmp::Reverse(c.1));
            let lane = &t["lane"][i];
            match ranked.as_slice() {
                [] => assert!(lane.is_null(), "{key:?} bin {i}: {lane}"),
                [only] | [only, ..] if ranked.len() == 1 || ranked[1].1 < only.1 => {
                    assert_eq!(names[lane[0].as_u64().unwrap() as usize], only.0, "{key:?} bin {i}");
                    assert_eq!(lane[1].as_i64().unwrap(), only.1, "{key:?} bin {i}");
                    named += 1;
                }
                _ => {}
            }
            bins_seen += 1;
        }
    }
    assert!(bins_seen > 256 && named > 100, "{bins_seen} bins, {named} with a region");
}

#[test]
fn memfusion_icon_and_fuser_captures_equal_sql() {
    for rel in ["real/memfusion/report1.sqlite", "real/isc25-icon/gpu.sqlite", "real/fuser/report1.sqlite"] {
        if check_against_sql(rel, &crate::this_test!()).is_none() {
            return;
        }
    }
}

/// Without NVTX, the device's span is all there is: its busy time is the
/// union of all its operations, its wall from the first start to the last end.
#[test]
fn abacus_without_nvtx_has_a_span_equal_to_sql() {
    let Some(db) = corpus!("real/derived/abacus/report1.nsys2022.4.sqlite") else { return };
    let dir = tempfile::tempdir().unwrap();
    let report = import(&db, dir.path());
    let conn = Connection::open_with_flags(&db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap();
    let sql = format!(
        "WITH {act},
        o AS (SELECT dev, s, e, MAX(e) OVER (PARTITION BY dev ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS pm FROM act),
        g AS (SELECT dev, s, e, SUM(CASE WHEN pm IS NULL OR s > pm THEN 1 ELSE 0 END) OVER (PARTITION BY dev ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS isl FROM o),
        u AS (SELECT dev, MAX(e) - MIN(s) AS len FROM g GROUP BY dev, isl)
        SELECT dev, SUM(len), (SELECT MAX(e) - MIN(s) FROM act a WHERE a.dev = u.dev) FROM u GROUP BY dev",
        act = activity(&conn)
    );
    let (dev, busy, wall): (i64, i64, i64) =
        conn.query_row(&sql, [], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap();
    let d = &report["devices"][0];
    assert_eq!(report["devices"].as_array().unwrap().len(), 1);
    assert_eq!(d["device"], dev);
    assert_eq!(d["span"]["busy_ns"], busy);
    assert_eq!(d["span"]["wall_ns"], wall);
    assert!(d["regions"].as_array().unwrap().is_empty(), "no NVTX ranges, no regions");
}

/// The category table names ≥ 90% of the kernel time of every corpus capture.
/// ICON's three thrust::for_each kernels (a user's physics lambda, `graupel`)
/// are elementwise, by their primitive: exactly that category's time, by SQL.
#[test]
fn categories_name_the_kernel_time_of_the_corpus_captures() {
    for (rel, max_other) in [
        ("real/nsys-ai/mfu_2gpu_before.sqlite", 0.10),
        ("real/memfusion/report1.sqlite", 0.10),
        ("real/fuser/report1.sqlite", 0.10),
        ("real/derived/abacus/report1.nsys2022.4.sqlite", 0.10),
        ("real/isc25-icon/gpu.sqlite", 0.10),
    ] {
        let Some(db) = corpus!(rel) else { return };
        let dir = tempfile::tempdir().unwrap();
        let report = import(&db, dir.path());
        let (total, agent) = kernel_ns(&db, "%thrust%_kernel_agent%");
        let mut sum = 0;
        let mut other = 0;
        let mut elementwise = 0;
        for d in report["devices"].as_array().unwrap() {
            for c in d["categories"].as_array().unwrap() {
                sum += c["ns"].as_i64().unwrap();
                if c["category"] == "other" {
                    other += c["ns"].as_i64().unwrap();
                }
                if c["category"] == "elementwise" {
                    elementwise += c["ns"].as_i64().unwrap();
                }
            }
        }
        assert_eq!(sum, total, "{rel}: categories partition the kernel time");
        assert!((other as f64) / (total as f64) <= max_other, "{rel}: other {other} of {total}");
        if rel.contains("icon") {
            assert!(agent > 0);
            assert_eq!(elementwise, agent, "{rel}: elementwise is the for_each kernels");
        }
    }
}

/// Rows stored newest first: the range sweep reads its pass again sorted
/// (the breakdown starts over with it) and the activity is read again sorted:
/// the same breakdown as the export as nsys wrote it.
#[test]
fn rows_stored_out_of_time_order_give_the_same_breakdown() {
    let Some(db) = corpus!("real/nsys-ai/mfu_2gpu_before.sqlite") else { return };
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.sqlite");
    std::fs::copy(&db, &copy).unwrap();
    let conn = Connection::open(&copy).unwrap();
    for table in
        ["NVTX_EVENTS", "CUPTI_ACTIVITY_KIND_RUNTIME", "CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY"]
    {
        conn.execute_batch(&format!(
            "CREATE TABLE t AS SELECT * FROM {table} ORDER BY start DESC; DELETE FROM {table}; \
             INSERT INTO {table} SELECT * FROM t; DROP TABLE t;"
        ))
        .unwrap();
    }
    drop(conn);
    let a = import(&db, &dir.path().join("a"));
    let b = import(&copy, &dir.path().join("b"));
    assert!(!a["devices"][0]["regions"].as_array().unwrap().is_empty());
    assert_eq!(a, b);
}

/// A user's category table is tried first: ICON's physics kernels named
/// `other` by it are exactly its `other` (by SQL); a table that cannot be read
/// is an error naming the key.
#[test]
fn a_users_category_table_comes_first_and_a_missing_one_is_named() {
    let Some(db) = corpus!("real/isc25-icon/gpu.sqlite") else { return };
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("mine.yaml");
    std::fs::write(&table, "rules:\n  - {category: other, match: '_kernel_agent.*graupel'}\n").unwrap();
    let out = dir.path().join("run");
    let arg = format!("report.kernel_categories={}", table.display());
    import_nsys(&db, &out, &[&arg]);
    let report = json(&out.join("nsys/breakdown.json"));
    let d = &report["devices"][0];
    let (total, agent) = kernel_ns(&db, "%_kernel_agent%graupel%");
    assert!(agent > 0);
    let other = d["categories"].as_array().unwrap().iter().find(|c| c["category"] == "other").unwrap();
    assert_eq!(other["ns"], agent);
    // serde_json reads a float to within an ulp.
    assert!((d["other_share"].as_f64().unwrap() - agent as f64 / total as f64).abs() < 1e-12, "{d}");
    assert_eq!(report["category_tables"][0], table.display().to_string());
    let failed = crate::common::llmperf()
        .args(["import", "nsys"])
        .arg(&db)
        .arg("-o")
        .arg(dir.path().join("run2"))
        .args(["pipeline.nsys.executable=/nonexistent", "report.kernel_categories=/nonexistent/mine.yaml"])
        .output()
        .unwrap();
    assert_ne!(failed.status.code(), Some(0));
    let stderr = String::from_utf8_lossy(&failed.stderr);
    assert!(stderr.contains("report.kernel_categories: cannot read /nonexistent/mine.yaml"), "{stderr}");
    assert!(stderr.contains("hint:"), "{stderr}");
}

/// A table only the breakdown reads holding a value of the wrong type (a copy's
/// start as text): the region tree stands, breakdown.json says why it is
/// empty, and findings.json ranks nothing instead of guessing from ranges.
#[test]
fn a_breakdown_that_cannot_be_made_leaves_the_regions_and_says_why() {
    let Some(db) = corpus!("real/memfusion/report1.sqlite") else { return };
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("copy.sqlite");
    std::fs::copy(&db, &copy).unwrap();
    let conn = Connection::open(&copy).unwrap();
    conn.execute_batch("UPDATE CUPTI_ACTIVITY_KIND_MEMCPY SET start = 'soon' WHERE rowid = (SELECT MIN(rowid) FROM CUPTI_ACTIVITY_KIND_MEMCPY)")
        .unwrap();
    drop(conn);
    let out = dir.path().join("run");
    import_nsys(&copy, &out, &[]);
    let regions = json(&out.join("nsys/regions.json"));
    assert!(!regions["regions"].as_array().unwrap().is_empty());
    let report = json(&out.join("nsys/breakdown.json"));
    assert!(report["devices"].as_array().unwrap().is_empty(), "{report}");
    let note = report["notes"][0].as_str().unwrap();
    assert!(note.starts_with("time breakdown not computed:") && note.contains("CUPTI_ACTIVITY_KIND_MEMCPY"), "{note}");
    let findings = json(&out.join("findings.json"));
    assert_eq!(findings["source"], "none");
    assert!(findings["findings"].as_array().unwrap().is_empty());
    assert!(
        findings["notes"].as_array().unwrap().iter().any(|n| n.as_str().unwrap().contains("not computed")),
        "{findings}"
    );
}
