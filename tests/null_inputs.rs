//! NULL where nsys writes an integer: refused like text, naming the table,
//! column and row (exit 6), never read as 0; NULL where nsys's schema allows
//! it (a range's end: still open when the capture stopped) said in its own
//! words. Each case is a copy of a real export of the corpus edited by SQL in
//! the test; the columns are made nullable first (`CREATE TABLE … AS SELECT`
//! drops NOT NULL), as a tool that writes such a file would have them.
use std::path::{Path, PathBuf};

use crate::common::*;

/// A copy of `rel` whose `table` allows NULL in every column, then `sql` run on it.
fn nullable_copy(test: &str, rel: &str, dir: &Path, table: &str, sql: &str) -> Option<PathBuf> {
    let db = corpus_copy(test, rel, dir)?;
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch(&format!(
        "CREATE TABLE t_copy AS SELECT * FROM {table}; DROP TABLE {table}; ALTER TABLE t_copy RENAME TO {table};"
    ))
    .unwrap();
    let changed = conn.execute(sql, []).unwrap();
    assert!(changed >= 1, "{sql}");
    Some(db)
}

/// The import's exit code and stderr.
fn import(db: &Path, out: &Path, cap: Option<&str>) -> (Option<i32>, String) {
    let bin = assert_cmd::cargo::cargo_bin("llmperf");
    let mut cmd = match cap {
        Some(bytes) => {
            let mut c = std::process::Command::new("prlimit");
            c.arg(format!("--as={bytes}")).arg("--").arg(bin);
            c
        }
        None => std::process::Command::new(bin),
    };
    let out = cmd
        .args(["-q", "import", "nsys"])
        .arg(db)
        .arg("-o")
        .arg(out)
        .arg("pipeline.nsys.executable=/nonexistent")
        .output()
        .unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// One NULL kernel start of memfusion's export (was read as 0: 25,785,200 ns
/// of top-kernel time instead of 6,415,244), one of the 4,010 of the FSDP
/// capture (×113), a NULL kernel end and a NULL launch call's start: each
/// exit 6 naming table, column and row.
#[test]
fn a_null_timestamp_or_id_is_refused_naming_its_table_column_and_row() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    for (i, (rel, table, column)) in [
        ("real/memfusion/report1.sqlite", "CUPTI_ACTIVITY_KIND_KERNEL", "start"),
        ("real/nsys-ai/mfu_2gpu_before.sqlite", "CUPTI_ACTIVITY_KIND_KERNEL", "start"),
        ("real/nsys-ai/mfu_2gpu_before.sqlite", "CUPTI_ACTIVITY_KIND_KERNEL", "end"),
        ("real/nsys-ai/mfu_2gpu_before.sqlite", "CUPTI_ACTIVITY_KIND_RUNTIME", "start"),
        ("real/nsys-ai/mfu_2gpu_before.sqlite", "NVTX_EVENTS", "globalTid"),
    ]
    .into_iter()
    .enumerate()
    {
        let dir = root.path().join(i.to_string());
        std::fs::create_dir(&dir).unwrap();
        let pick = match table {
            "NVTX_EVENTS" => "rowid = (SELECT MIN(rowid) FROM NVTX_EVENTS WHERE eventType = 59)",
            _ => "rowid = (SELECT MIN(rowid) FROM TABLE)",
        }
        .replace("TABLE", table);
        let sql = format!("UPDATE {table} SET {column} = NULL WHERE {pick}");
        let Some(db) = nullable_copy(&test, rel, &dir, table, &sql) else { return };
        let (code, err) = import(&db, &dir.join("run"), None);
        assert_eq!(code, Some(6), "{rel} {table}.{column}: {err}");
        assert!(err.contains(&format!("column {column}, row ")), "{err}");
        assert!(err.contains("NULL where an integer belongs"), "{err}");
        assert!(err.contains(table), "{err}");
    }
}

/// Every NVTX range's start NULL (nested into one chain, the import took
/// 22.6 GB before): the first row is refused, under a 2 GiB address-space cap.
#[test]
fn every_range_start_null_ends_at_once_inside_a_memory_cap() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let sql = "UPDATE NVTX_EVENTS SET start = NULL WHERE eventType = 59";
    let Some(db) = nullable_copy(&test, "real/nsys-ai/mfu_2gpu_before.sqlite", root.path(), "NVTX_EVENTS", sql) else {
        return;
    };
    let (code, err) = import(&db, &root.path().join("run"), Some("2147483648"));
    assert_eq!(code, Some(6), "{err}");
    assert!(
        err.contains("table NVTX_EVENTS, column start, row ") && err.contains("NULL where an integer belongs"),
        "{err}"
    );
}

/// A range whose end nsys left NULL (the schema allows it: still open when
/// the capture stopped) is left out and counted in its own words, not as a
/// range that "ends before it starts".
#[test]
fn a_range_without_an_end_is_left_out_and_said_so() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let sql =
        "UPDATE NVTX_EVENTS SET end = NULL WHERE rowid = (SELECT MIN(rowid) FROM NVTX_EVENTS WHERE eventType = 59)";
    let Some(db) = nullable_copy(&test, "real/nsys-ai/mfu_2gpu_before.sqlite", root.path(), "NVTX_EVENTS", sql) else {
        return;
    };
    let run = root.path().join("run");
    let (code, err) = import(&db, &run, None);
    assert_eq!(code, Some(0), "{err}");
    let notes = json(&run.join("nsys/regions.json"))["notes"].to_string();
    assert!(notes.contains("1 NVTX ranges never ended"), "{notes}");
    assert!(!notes.contains("end before they start"), "{notes}");
}

/// A kernel table without `correlationId` (a tool that does not write it):
/// every kernel is unattributed, and regions.json says why.
#[test]
fn a_kernel_table_without_correlation_ids_says_why_nothing_is_attributed() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some(db) = corpus_copy(&test, "real/memfusion/report1.sqlite", root.path()) else { return };
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch("ALTER TABLE CUPTI_ACTIVITY_KIND_KERNEL DROP COLUMN correlationId").unwrap();
    drop(conn);
    let run = root.path().join("run");
    let (code, err) = import(&db, &run, None);
    assert_eq!(code, Some(0), "{err}");
    let regions = json(&run.join("nsys/regions.json"));
    assert!(regions["notes"].to_string().contains("has no correlationId column"), "{}", regions["notes"]);
    assert_eq!(regions["unattributed"]["kernel_count"], 36);
}
