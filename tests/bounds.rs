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
    // Waited on with wait4 below (for its rusage), not Child::wait.
    #[allow(clippy::zombie_processes)]
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

/// The exit code and stderr of `cmd`, which must end well before a parser bomb would.
fn quick(cmd: &mut assert_cmd::Command) -> (Option<i32>, String) {
    let started = Instant::now();
    let out = cmd.timeout(Duration::from_secs(60)).output().unwrap();
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A budgets file nested 200,000 deep in 400 kB (was > 150 s in the YAML
/// parser, time ~ the cube of the depth), one nested 70 levels in blocks, one
/// of 2 MiB: each refused at once, naming the file, the line and the bound.
#[test]
fn budgets_past_the_nesting_and_size_bounds_are_refused_before_parsing() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some(run) = import_memfusion(&test, root.path()) else { return };
    let deep = root.path().join("deep.yaml");
    std::fs::write(
        &deep,
        format!("defaults:\n  relative_pct: 5\nregions: {}{}\n", "[".repeat(200_000), "]".repeat(200_000)),
    )
    .unwrap();
    let blocks = root.path().join("blocks.yaml");
    std::fs::write(&blocks, (0..70).map(|d| format!("{}k{d}:\n", "  ".repeat(d))).collect::<String>()).unwrap();
    let big = root.path().join("big.yaml");
    std::fs::write(&big, format!("defaults:\n  relative_pct: 5\n{}", "# padding\n".repeat(210_000))).unwrap();
    for (file, says) in [
        (&deep, "deep.yaml:3: YAML nested deeper than 64 levels".to_string()),
        (&blocks, "blocks.yaml:65: YAML nested deeper than 64 levels".to_string()),
        (&big, format!("big.yaml is {} bytes, more than the 1048576 llmperf reads", 10 * 210_000 + 28)),
    ] {
        let (code, err) =
            quick(llmperf().arg("check").arg(&run).arg("--baseline").arg(&run).arg("--budgets").arg(file));
        assert_eq!(code, Some(3), "{err}");
        assert!(err.contains(&says) && err.contains("hint:"), "{says}: {err}");
    }
}

/// A `--config-dir` file nested 50,000 deep (5–10 s before its error), and
/// one that is binary, not text: refused at once, naming the file.
#[test]
fn config_dir_files_past_the_bounds_or_binary_are_refused_with_a_hint() {
    let test = crate::this_test!();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("runner")).unwrap();
    let file = dir.path().join("runner/default.yaml");
    std::fs::write(&file, format!("run: {}1{}\n", "{a: ".repeat(50_000), "}".repeat(50_000))).unwrap();
    let (code, err) = quick(llmperf().arg("--config-dir").arg(dir.path()).args(["config", "show"]));
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("runner/default.yaml:1: YAML nested deeper than 64 levels"), "{err}");
    // A binary file (the start of a real export) in the YAML's place.
    let Some(corpus) = corpus_file(&test, "real/memfusion/report1.sqlite") else { return };
    let bytes = std::fs::read(corpus).unwrap();
    std::fs::write(&file, &bytes[..4096]).unwrap();
    let (code, err) = quick(llmperf().arg("--config-dir").arg(dir.path()).args(["config", "show"]));
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("runner/default.yaml: not UTF-8 text") && err.contains("hint: name a YAML file"), "{err}");
}

/// `report` of a run copied without its config.yaml: the run is called
/// damaged, with the hint to copy it again (was an error with no hint).
#[test]
fn report_of_a_run_without_its_configuration_says_what_is_missing() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some(run) = import_memfusion(&test, root.path()) else { return };
    std::fs::remove_file(run.join("config.yaml")).unwrap();
    let (code, err) = quick(llmperf().arg("report").arg(&run));
    assert_eq!(code, Some(6), "{err}");
    assert!(err.contains("config.yaml: missing") && err.contains("hint: the run directory is damaged"), "{err}");
}
