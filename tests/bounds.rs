//! Bounds that hold whatever the input (issue 43 items 3 and 4): ranges
//! nested 10,000 deep cost what the unedited capture costs, in time and memory;
//! budgets and configuration files nested or sized past the bounds of
//! docs/cli.md are refused before they are parsed.
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;

/// Run `cmd` to its end: exit code, stderr, wall time, and the peak resident
/// memory of that one child (wait4's rusage, not every child of the tests).
fn measured(mut cmd: std::process::Command) -> (Option<i32>, String, Duration, u64) {
    use std::os::unix::process::ExitStatusExt;
    let started = Instant::now();
    let child = cmd.stdout(std::process::Stdio::null()).stderr(std::process::Stdio::piped()).spawn().unwrap();
    let pid = child.id() as libc::pid_t;
    let stderr = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut child.stderr.unwrap(), &mut text).unwrap();
        text
    });
    let (mut status, mut usage) = (0, unsafe { std::mem::zeroed::<libc::rusage>() });
    // SAFETY: wait4 on our own child, with valid pointers.
    assert_eq!(unsafe { libc::wait4(pid, &mut status, 0, &mut usage) }, pid);
    let wall = started.elapsed();
    let code = std::process::ExitStatus::from_raw(status).code();
    (code, stderr.join().unwrap(), wall, usage.ru_maxrss as u64 * 1024)
}

fn import(db: &Path, out: &Path) -> std::process::Command {
    let mut cmd = std::process::Command::new(assert_cmd::cargo::cargo_bin("llmperf"));
    cmd.args(["-q", "import", "nsys"]).arg(db).arg("-o").arg(out).arg("pipeline.nsys.executable=/nonexistent");
    cmd
}

/// The first 10,000 closed ranges of the FSDP capture moved to one thread and
/// one start time nest 10,000 deep (a program that recurses under NVTX). Was
/// N = 3,000: 11.2 s and 792 MiB, growing with the square of N; now the
/// ranges past depth 256 are folded into their ancestor and said so, and the
/// import costs about what the unedited one does.
#[test]
fn ranges_nested_ten_thousand_deep_cost_what_the_capture_costs() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some(db) = corpus_copy(&test, "real/nsys-ai/mfu_2gpu_before.sqlite", root.path()) else { return };
    let conn = rusqlite::Connection::open(&db).unwrap();
    let (tid, start): (i64, i64) = conn
        .query_row(
            "SELECT globalTid, start FROM NVTX_EVENTS WHERE eventType = 59 AND end IS NOT NULL ORDER BY start LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .unwrap();
    let moved = conn
        .execute(
            "UPDATE NVTX_EVENTS SET start = ?1, globalTid = ?2 WHERE rowid IN (SELECT rowid FROM NVTX_EVENTS \
             WHERE eventType = 59 AND end IS NOT NULL ORDER BY start LIMIT 10000)",
            [start, tid],
        )
        .unwrap();
    assert_eq!(moved, 10_000);
    // SQL: the top-level ranges of that thread (none open around them), their
    // time, and the kernels launched from the thread inside them.
    let (wall_ns, kernels, gpu_ns): (i64, i64, i64) = conn
        .query_row(
            "WITH calls AS MATERIALIZED (SELECT correlationId AS cid, (globalTid >> 24) & 16777215 AS pid, \
                                         MIN(globalTid) AS tid, MIN(start) AS t FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY 1, 2), \
                  named AS MATERIALIZED (SELECT rowid AS id, start AS ws, end AS we FROM NVTX_EVENTS \
                                         WHERE eventType = 59 AND end IS NOT NULL AND globalTid = ?1), \
                  nested AS MATERIALIZED (SELECT *, MAX(we) OVER (ORDER BY ws, we DESC, id \
                                          ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before FROM named), \
                  top AS MATERIALIZED (SELECT * FROM nested WHERE before IS NULL OR ws >= before) \
             SELECT (SELECT SUM(we - ws) FROM top), COUNT(*), SUM(k.end - k.start) FROM CUPTI_ACTIVITY_KIND_KERNEL k \
             JOIN calls c ON c.cid = k.correlationId AND c.pid = (k.globalPid >> 24) & 16777215 \
             JOIN top w ON c.tid = ?1 AND w.ws <= c.t AND c.t < w.we",
            [tid],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert!(kernels > 0);
    drop(conn);
    let run = root.path().join("run");
    let (code, err, wall, peak) = measured(import(&db, &run));
    assert_eq!(code, Some(0), "{err}");
    assert!(wall < Duration::from_secs(30), "took {wall:?}");
    assert!(peak < 256 << 20, "peak resident memory {} MiB", peak >> 20);
    let regions = json(&run.join("nsys/regions.json"));
    let rows = regions["regions"].as_array().unwrap();
    assert_eq!(rows.iter().map(|r| r["depth"].as_u64().unwrap()).max(), Some(255));
    let note = regions["notes"].to_string();
    assert!(note.contains("NVTX ranges nested deeper than 256 levels"), "{note}");
    // The thread's top-level regions keep their whole time and every kernel launched inside them.
    let top: Vec<_> = rows
        .iter()
        .filter(|r| r["depth"] == 0 && r["thread_id"] == tid & 0xFF_FFFF && r["process_id"] == (tid >> 24) & 0xFF_FFFF)
        .collect();
    let sum = |key: &str| top.iter().map(|r| r[key].as_i64().unwrap()).sum::<i64>();
    assert_eq!((sum("inclusive_ns"), sum("kernel_count"), sum("gpu_time_ns")), (wall_ns, kernels, gpu_ns));
}
