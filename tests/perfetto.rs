//! `llmperf export perfetto`: an nsys capture as Chrome trace events in
//! torch.profiler's dialect, read back by plain JSON and held against SQL on
//! the same export, against llmperf's own `import nsys` (through `import
//! torch`, the round trip) and against Holistic Trace Analysis.
use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use crate::common::{json, llmperf, skipped};

/// Every event of every file `llmperf export perfetto` wrote into `dir`, by
/// file, parsed by serde_json alone.
fn read_traces(dir: &Path) -> BTreeMap<String, serde_json::Value> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        assert!(name.ends_with(".pt.trace.json.gz"), "{name}");
        let mut text = String::new();
        std::io::Read::read_to_string(
            &mut flate2::read::GzDecoder::new(std::fs::File::open(&path).unwrap()),
            &mut text,
        )
        .unwrap();
        out.insert(name, serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display())));
    }
    out
}

fn export(source: &Path, out: &Path) {
    let o = llmperf().args(["export", "perfetto"]).arg(source).arg("-o").arg(out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// µs with three decimals, as written, in ns.
fn ns(v: &serde_json::Value) -> i64 {
    (v.as_f64().unwrap() * 1000.0).round() as i64
}

/// One SQL answer of integers.
fn sql_rows(db: &Path, sql: &str) -> Vec<Vec<i64>> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn.prepare(sql).unwrap();
    let n = stmt.column_count();
    stmt.query_map([], |r| (0..n).map(|i| r.get::<_, i64>(i)).collect::<Result<Vec<_>, _>>())
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn has_table(db: &Path, table: &str) -> bool {
    sql_rows(db, &format!("SELECT COUNT(*) FROM sqlite_master WHERE name = '{table}'"))[0][0] != 0
}

/// The export of `db` against SQL on `db`: per device the count and summed
/// duration of kernels, copies and memsets to the ns; per thread the NVTX
/// ranges that ended; every flow from a call to a GPU operation of the same
/// correlation; no slice crossing its parent on any track.
fn assert_export_equals_sql(db: &Path, traces: &BTreeMap<String, serde_json::Value>) {
    let mut gpu: BTreeMap<(String, i64), (i64, i64)> = BTreeMap::new();
    let mut on_overlap_tracks = 0;
    let mut ranges: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    for (file, t) in traces {
        let events = t["traceEvents"].as_array().unwrap();
        let mut calls: HashMap<i64, i64> = HashMap::new();
        let mut ops: HashMap<(i64, i64, i64), i64> = HashMap::new();
        let mut tracks: BTreeMap<(i64, i64), Vec<(i64, i64)>> = BTreeMap::new();
        for e in events {
            let (ph, cat) = (e["ph"].as_str().unwrap(), e["cat"].as_str().unwrap_or(""));
            let track = (e["pid"].as_i64().unwrap(), e["tid"].as_i64().unwrap());
            match (ph, cat) {
                ("X", "kernel" | "gpu_memcpy" | "gpu_memset") => {
                    let device = e["args"]["device"].as_i64().unwrap();
                    assert_eq!(track.0, device, "{file}: {e}");
                    // A stream's track, or one of its overlap tracks (stream + k << 32).
                    assert_eq!(track.1 & 0xFFFF_FFFF, e["args"]["stream"].as_i64().unwrap(), "{file}: {e}");
                    on_overlap_tracks += usize::from(track.1 >> 32 > 0);
                    let row = gpu.entry((cat.to_string(), device)).or_default();
                    row.0 += 1;
                    row.1 += ns(&e["dur"]);
                    if let Some(c) = e["args"]["correlation"].as_i64() {
                        ops.insert((track.0, track.1, ns(&e["ts"])), c);
                    }
                }
                ("X", "cuda_runtime" | "cuda_driver") => {
                    if let Some(c) = e["args"]["correlation"].as_i64() {
                        calls.insert(c, ns(&e["ts"]));
                    }
                }
                ("X", "user_annotation") | ("b", "user_annotation") => *ranges.entry(track).or_default() += 1,
                _ => {}
            }
            if ph == "X" {
                tracks.entry(track).or_default().push((ns(&e["ts"]), ns(&e["ts"]) + ns(&e["dur"])));
            }
        }
        // Flows: each start on the call of its id, at its start; each end on
        // a GPU operation of the same correlation, at its start.
        let (mut starts, mut ends) = (0, 0);
        for e in events {
            let id = e["id"].as_i64();
            match e["ph"].as_str().unwrap() {
                "s" => {
                    starts += 1;
                    assert_eq!(calls.get(&id.unwrap()), Some(&ns(&e["ts"])), "{file}: a flow from no call: {e}");
                }
                "f" => {
                    ends += 1;
                    let at = (e["pid"].as_i64().unwrap(), e["tid"].as_i64().unwrap(), ns(&e["ts"]));
                    assert_eq!(ops.get(&at), id.as_ref(), "{file}: a flow to no GPU operation: {e}");
                }
                _ => {}
            }
        }
        assert_eq!(starts, ends, "{file}");
        for (track, mut slices) in tracks {
            slices.sort_by_key(|&(s, e)| (s, std::cmp::Reverse(e)));
            let mut open: Vec<i64> = Vec::new();
            for (s, e) in slices {
                while open.last().is_some_and(|&end| end <= s) {
                    open.pop();
                }
                if let Some(&parent_end) = open.last() {
                    assert!(
                        e <= parent_end,
                        "{file}: a slice {s}..{e} on {track:?} crosses its parent's end {parent_end}"
                    );
                }
                open.push(e);
            }
        }
    }
    for (table, cat) in [
        ("CUPTI_ACTIVITY_KIND_KERNEL", "kernel"),
        ("CUPTI_ACTIVITY_KIND_MEMCPY", "gpu_memcpy"),
        ("CUPTI_ACTIVITY_KIND_MEMSET", "gpu_memset"),
    ] {
        let expected: BTreeMap<(String, i64), (i64, i64)> = if has_table(db, table) {
            sql_rows(db, &format!("SELECT deviceId, COUNT(*), SUM(end - start) FROM {table} GROUP BY deviceId"))
                .into_iter()
                .map(|r| ((cat.to_string(), r[0]), (r[1], r[2])))
                .collect()
        } else {
            BTreeMap::new()
        };
        let got: BTreeMap<_, _> = gpu.iter().filter(|((c, _), _)| c == cat).map(|(k, v)| (k.clone(), *v)).collect();
        assert_eq!(got, expected, "{}: {cat}", db.display());
    }
    // Operations that start before an earlier one of their stream ended
    // (by start) are the ones on overlap tracks.
    let mut by_stream: BTreeMap<(i64, i64), Vec<(i64, i64)>> = BTreeMap::new();
    for table in ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"] {
        if has_table(db, table) {
            for r in sql_rows(db, &format!("SELECT globalPid, deviceId, streamId, start, end FROM {table}")) {
                by_stream.entry((r[0], (r[1] << 32) | r[2])).or_default().push((r[3], r[4]));
            }
        }
    }
    let mut overlapping = 0;
    for ops in by_stream.values_mut() {
        ops.sort();
        let mut latest = i64::MIN;
        for &(start, end) in ops.iter() {
            overlapping += usize::from(start < latest);
            latest = latest.max(end);
        }
    }
    assert_eq!(on_overlap_tracks, overlapping, "{}: operations on overlap tracks", db.display());
    let expected: BTreeMap<(i64, i64), i64> = if has_table(db, "NVTX_EVENTS") {
        sql_rows(
            db,
            "SELECT (globalTid >> 24) & 16777215, globalTid & 16777215, COUNT(*) FROM NVTX_EVENTS \
             WHERE eventType IN (59, 60) AND end IS NOT NULL GROUP BY globalTid",
        )
        .into_iter()
        .map(|r| ((r[0], r[1]), r[2]))
        .collect()
    } else {
        BTreeMap::new()
    };
    assert_eq!(ranges, expected, "{}: NVTX ranges per thread", db.display());
}

/// Three real captures (two processes on two GPUs with NCCL, copies and
/// memsets; one process with NVTX; nsys 2022.4 without NVTX, 23,805
/// kernels), exported and read back.
#[test]
fn an_exported_capture_read_back_by_plain_json_equals_sql_on_the_export() {
    let root = tempfile::tempdir().unwrap();
    for (rel, files) in [
        ("real/nsys-ai/mfu_2gpu_before.sqlite", 2),
        ("real/memfusion/report1.sqlite", 1),
        ("real/derived/abacus/report1.nsys2022.4.sqlite", 1),
    ] {
        let Some(db) = corpus!(rel) else { return };
        let out = root.path().join(rel.replace('/', "_"));
        export(&db, &out);
        let traces = read_traces(&out);
        assert_eq!(traces.len(), files, "{rel}");
        assert_export_equals_sql(&db, &traces);
        for t in traces.values() {
            assert_eq!(t["distributedInfo"]["world_size"], files, "{rel}");
        }
    }
}

/// The round trip: `llmperf import torch` of each process's file gives back
/// the regions `llmperf import nsys` gives of that process (paths, threads,
/// instances, inclusive and exclusive ns, kernels and their GPU time), and
/// the same kernels.
#[test]
fn import_torch_of_the_export_gives_back_the_regions_and_kernels_of_import_nsys() {
    let root = tempfile::tempdir().unwrap();
    let Some(db) = corpus!("real/nsys-ai/mfu_2gpu_before.sqlite") else { return };
    let nsys_run = root.path().join("nsys");
    crate::common::import_nsys(&db, &nsys_run, &[]);
    let out = root.path().join("perfetto");
    export(&db, &out);
    let nsys = json(&nsys_run.join("nsys/regions.json"));
    // The range events of each thread are regions.json's instances there.
    let mut events: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    for t in read_traces(&out).values() {
        for e in t["traceEvents"].as_array().unwrap() {
            if e["cat"] == "user_annotation" && (e["ph"] == "X" || e["ph"] == "b") {
                *events.entry((e["pid"].as_i64().unwrap(), e["tid"].as_i64().unwrap())).or_default() += 1;
            }
        }
    }
    let mut instances: BTreeMap<(i64, i64), i64> = BTreeMap::new();
    for r in nsys["regions"].as_array().unwrap() {
        let thread = (r["process_id"].as_i64().unwrap(), r["thread_id"].as_i64().unwrap());
        *instances.entry(thread).or_default() += r["instances"].as_i64().unwrap();
    }
    assert_eq!(events, instances);
    let mut compared = 0;
    for (pid, regions) in [(144, 276), (145, 277)] {
        let run = root.path().join(format!("torch{pid}"));
        let o = llmperf()
            .args(["import", "torch"])
            .arg(out.join(format!("pid{pid}.pt.trace.json.gz")))
            .arg("-o")
            .arg(&run)
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        let torch = json(&run.join("torch/regions.json"));
        let key = |r: &serde_json::Value| (r["path"].as_str().unwrap().to_string(), r["thread_id"].as_i64().unwrap());
        let fields = [
            "instances",
            "inclusive_ns",
            "exclusive_ns",
            "kernel_count",
            "gpu_time_ns",
            "kernel_count_exclusive",
            "gpu_time_exclusive_ns",
        ];
        let pick = |r: &serde_json::Value| fields.map(|f| r[f].as_i64().unwrap());
        let a: BTreeMap<_, _> = nsys["regions"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|r| r["process_id"] == pid)
            .map(|r| (key(r), pick(r)))
            .collect();
        let b: BTreeMap<_, _> = torch["regions"].as_array().unwrap().iter().map(|r| (key(r), pick(r))).collect();
        assert_eq!(a.len(), regions, "process {pid}");
        assert_eq!(a, b, "process {pid}");
        compared += a.len();
        // The process's kernels: count, GPU time and NCCL time.
        let totals = |regions: &serde_json::Value| {
            let p = regions["processes"].as_array().unwrap().iter().find(|p| p["process_id"] == pid).unwrap().clone();
            let d = &p["devices"][0];
            ["kernel_count", "gpu_time_ns", "comm_gpu_time_ns"].map(|k| d[k].as_i64().unwrap())
        };
        assert_eq!(totals(&nsys), totals(&torch), "process {pid}");
    }
    assert_eq!(compared, 553);
}

/// Holistic Trace Analysis reads the export of the two-process FSDP capture,
/// one file per rank, and its temporal breakdown (idle, compute, non-compute,
/// kernel span) equals llmperf's breakdown of each device's span to the ns;
/// its kernel breakdown (communication, computation and memory time) equals
/// regions.json's totals of the process and SQL's copies and memsets.
#[test]
fn hta_reads_the_export_and_its_breakdowns_equal_llmperfs() {
    let test = crate::this_test!();
    let python = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv-hta/bin/python");
    if !python.is_file() {
        skipped(&test, ".venv-hta not found (scripts/setup.sh all makes it)");
        return;
    }
    let root = tempfile::tempdir().unwrap();
    let Some(db) = corpus!("real/nsys-ai/mfu_2gpu_before.sqlite") else { return };
    let run = root.path().join("run");
    crate::common::import_nsys(&db, &run, &[]);
    let out = root.path().join("perfetto");
    export(&db, &out);
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/oracles/hta_ranks.py");
    let o =
        std::process::Command::new(python).arg(script).arg(&out).env("HTA_DISABLE_NS_ROUNDING", "1").output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let hta: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let breakdown = json(&run.join("nsys/breakdown.json"));
    let regions = json(&run.join("nsys/regions.json"));
    let devices = breakdown["devices"].as_array().unwrap();
    assert_eq!(hta.as_array().unwrap().len(), 2, "{hta}");
    for row in hta.as_array().unwrap() {
        // Ranks in pid order: rank 0 is pid 144 (device 0), rank 1 pid 145.
        let rank = row["rank"].as_u64().unwrap() as usize;
        let d = &devices[rank];
        assert_eq!(d["process_id"], [144, 145][rank]);
        let span = &d["span"];
        let us = |v: &serde_json::Value| (v.as_f64().unwrap() * 1000.0).round() as i64;
        let get = |k: &str| span[k].as_i64().unwrap();
        assert_eq!(us(&row["kernel_time_us"]), get("wall_ns"), "rank {rank}: {row}");
        assert_eq!(us(&row["idle_us"]), get("idle_ns"), "rank {rank}: {row}");
        assert_eq!(us(&row["compute_us"]), get("compute_ns"), "rank {rank}: {row}");
        assert_eq!(us(&row["non_compute_us"]), get("busy_ns") - get("compute_ns"), "rank {rank}: {row}");
        // The kernel breakdown: NCCL kernels, every other kernel (summed, not
        // a union), and copies with memsets, against regions.json's totals of
        // the process and SQL.
        let p = regions["processes"].as_array().unwrap().iter().find(|p| p["process_id"] == [144, 145][rank]).unwrap();
        let (gpu, comm) =
            (p["devices"][0]["gpu_time_ns"].as_i64().unwrap(), p["devices"][0]["comm_gpu_time_ns"].as_i64().unwrap());
        let types = &row["kernel_types_us"];
        assert_eq!(us(&types["COMMUNICATION"]), comm, "rank {rank}: {row}");
        assert_eq!(us(&types["COMPUTATION"]), gpu - comm, "rank {rank}: {row}");
        let memory = sql_rows(
            &db,
            &format!(
                "SELECT (SELECT SUM(end - start) FROM CUPTI_ACTIVITY_KIND_MEMCPY WHERE deviceId = {rank}) \
                 + (SELECT SUM(end - start) FROM CUPTI_ACTIVITY_KIND_MEMSET WHERE deviceId = {rank})"
            ),
        )[0][0];
        assert_eq!(us(&types["MEMORY"]), memory, "rank {rank}: {row}");
    }
}

/// Names come from the profiled program: a range named with quotes, a
/// newline, markup and a backslash (a copy of memfusion's export edited by
/// SQL) is one JSON string in the file, and reads back as it was.
#[test]
fn a_hostile_range_name_reads_back_exactly() {
    let root = tempfile::tempdir().unwrap();
    let Some(db) = crate::corpus_copy!("real/memfusion/report1.sqlite", root.path()) else { return };
    let hostile = "a \"quoted\" </script><b>x</b>\n\\ \u{1b}[31m";
    let conn = rusqlite::Connection::open(&db).unwrap();
    let changed = conn
        .execute(
            "UPDATE NVTX_EVENTS SET text = ?1 WHERE rowid = (SELECT MIN(rowid) FROM NVTX_EVENTS WHERE eventType = 59)",
            [hostile],
        )
        .unwrap();
    assert_eq!(changed, 1);
    drop(conn);
    let out = root.path().join("perfetto");
    export(&db, &out);
    let traces = read_traces(&out);
    let names: Vec<&str> = traces
        .values()
        .flat_map(|t| t["traceEvents"].as_array().unwrap())
        .filter(|e| e["cat"] == "user_annotation")
        .map(|e| e["name"].as_str().unwrap())
        .collect();
    assert_eq!(names.iter().filter(|n| **n == hostile).count(), 1, "{names:?}");
}

/// What the exporter cannot read is refused with a hint, and nothing is
/// written beside the user's file.
#[test]
fn an_export_of_what_it_cannot_read_is_refused_with_a_hint() {
    let root = tempfile::tempdir().unwrap();
    let Some(db) = crate::corpus_copy!("real/memfusion/report1.sqlite", root.path()) else { return };
    let import = root.path().join("imported");
    crate::common::import_nsys(&db, &import, &[]);
    let rep = root.path().join("report1.nsys-rep");
    std::fs::write(&rep, b"not SQLite").unwrap();
    let cases: [(Vec<PathBuf>, &str, &str); 4] = [
        (vec![import.clone()], "holds no nsys/report.sqlite", "pass that file with -o DIR"),
        (vec![db.clone()], "where should the traces of", "-o DIR"),
        (vec![root.path().join("missing.sqlite")], "does not exist", "nsys export --type sqlite"),
        (vec![rep], "is not an SQLite export", "llmperf import nsys REPORT.nsys-rep -o RUN"),
    ];
    for (args, says, hint) in cases {
        let o = llmperf().args(["export", "perfetto"]).args(&args).output().unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains(says) && stderr.contains("hint:") && stderr.contains(hint), "{args:?}: {stderr}");
    }
    let beside: Vec<_> = std::fs::read_dir(root.path()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(beside.len(), 3, "{beside:?}");
    // A directory with someone else's file is not written into; one with an
    // earlier export's traces is, and a trace of a process this export does
    // not have is removed.
    let mixed = root.path().join("mixed");
    std::fs::create_dir_all(&mixed).unwrap();
    std::fs::write(mixed.join("notes.txt"), b"mine").unwrap();
    let o = llmperf().args(["export", "perfetto"]).arg(&db).arg("-o").arg(&mixed).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("holds notes.txt") && stderr.contains("hint:"), "{stderr}");
    assert_eq!(std::fs::read_dir(&mixed).unwrap().count(), 1);
    assert_eq!(std::fs::read(mixed.join("notes.txt")).unwrap(), b"mine");
    let again = root.path().join("again");
    export(&db, &again);
    std::fs::write(again.join("pid1.pt.trace.json.gz"), b"an earlier export's").unwrap();
    export(&db, &again);
    let names: Vec<_> = std::fs::read_dir(&again).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(names, ["pid24129.pt.trace.json.gz"]);
    // A capture's run directory exports into RUN/perfetto/ by default.
    let run = root.path().join("run");
    std::fs::create_dir_all(run.join("nsys")).unwrap();
    std::fs::copy(&db, run.join("nsys/report.sqlite")).unwrap();
    let o = llmperf().args(["export", "perfetto"]).arg(&run).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(run.join("perfetto/pid24129.pt.trace.json.gz").is_file());
}

/// `report.perfetto=true`: an import writes the same traces into
/// RUN/perfetto/ as `llmperf export perfetto RUN` does afterwards, the
/// findings drawn included, in a stage of its own after the reports that
/// names them; report.html links them.
#[test]
fn report_perfetto_writes_the_traces_in_a_stage_of_the_run() {
    let root = tempfile::tempdir().unwrap();
    let Some(db) = corpus!("real/nsys-ai/mfu_2gpu_before.sqlite") else { return };
    let run = root.path().join("run");
    crate::common::import_nsys(&db, &run, &["report.perfetto=true"]);
    let manifest = json(&run.join("manifest.json"));
    let stage = crate::common::stage(&manifest, "perfetto_export");
    assert_eq!(stage["status"], "ok", "{stage:#}");
    let traces = ["perfetto/pid144.pt.trace.json.gz", "perfetto/pid145.pt.trace.json.gz"];
    assert_eq!(stage["artifacts"], serde_json::json!(traces));
    let order: Vec<&str> = manifest["stages"].as_array().unwrap().iter().filter_map(|s| s["name"].as_str()).collect();
    let at = |name: &str| order.iter().position(|n| *n == name).unwrap();
    assert!(at("reports") < at("perfetto_export"), "{order:?}");
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    for t in traces {
        assert!(html.contains(&format!("<a href=\"{t}\"")), "report.html does not link {t}");
    }
    // The findings are drawn: the stage ran after findings.json was written.
    let written = read_traces(&run.join("perfetto"));
    let marks: usize = written
        .values()
        .map(|t| t["traceEvents"].as_array().unwrap().iter().filter(|e| e["cat"] == "llmperf_finding").count())
        .sum();
    assert!(marks >= 8, "{marks} findings drawn by the stage");
    std::fs::copy(&db, run.join("nsys/report.sqlite")).unwrap();
    let out = root.path().join("exported");
    export(&run, &out);
    assert_eq!(written, read_traces(&out));
    // Off by default.
    let plain = root.path().join("plain");
    crate::common::import_nsys(&db, &plain, &[]);
    assert!(!plain.join("perfetto").exists());
}

/// A run's findings are drawn where they point: each as an instant event at
/// the earliest instance of the region it names, in its process, with the
/// finding in `args`; the rest (a device span, no such range) are counted.
#[test]
fn a_runs_findings_are_instant_events_on_the_first_instance_of_their_region() {
    let root = tempfile::tempdir().unwrap();
    let Some(db) = corpus!("real/nsys-ai/mfu_2gpu_before.sqlite") else { return };
    let run = root.path().join("run");
    crate::common::import_nsys(&db, &run, &[]);
    std::fs::copy(&db, run.join("nsys/report.sqlite")).unwrap();
    let o = llmperf().args(["export", "perfetto"]).arg(&run).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    let traces = read_traces(&run.join("perfetto"));
    let findings = json(&run.join("findings.json"))["findings"].as_array().unwrap().clone();
    let (mut drawn, mut left_out) = (0, 0);
    for f in &findings {
        let pid = f["process_id"].as_i64().unwrap();
        let region = f["region"].as_str().unwrap();
        let events = traces[&format!("pid{pid}.pt.trace.json.gz")]["traceEvents"].as_array().unwrap();
        let first = events
            .iter()
            .filter(|e| e["ph"] == "X" && e["cat"] == "user_annotation" && e["name"] == region)
            .min_by_key(|e| ns(&e["ts"]));
        let marks: Vec<_> = events.iter().filter(|e| e["cat"] == "llmperf_finding" && e["args"] == *f).collect();
        match first {
            Some(first) => {
                assert_eq!(marks.len(), 1, "{region}");
                assert_eq!(ns(&marks[0]["ts"]), ns(&first["ts"]), "{region}");
                assert_eq!(marks[0]["tid"], first["tid"], "{region}");
                drawn += 1;
            }
            None => {
                assert!(marks.is_empty(), "{region}");
                left_out += 1;
            }
        }
    }
    assert!(drawn >= 8, "{drawn} of {} findings drawn", findings.len());
    if left_out > 0 {
        assert!(stdout.contains(&format!("left out: {left_out} findings")), "{stdout}");
    }
}

/// What the exporter cannot place is not placed: a kernel whose device is
/// not an integer stops the export naming the table (ingestion refuses it
/// too), and
/// one whose end is before its start is left out and counted, not written
/// with a negative duration (SQL-edited copies of memfusion's export).
#[test]
fn a_device_that_is_no_integer_is_refused_and_an_end_before_its_start_is_left_out() {
    let root = tempfile::tempdir().unwrap();
    let Some(db) = crate::corpus_copy!("real/memfusion/report1.sqlite", root.path()) else { return };
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET end = start - 1 WHERE rowid = 1", []).unwrap();
    let o = llmperf().args(["export", "perfetto"]).arg(&db).arg("-o").arg(root.path().join("odd")).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(stdout.contains("left out: 1 GPU operations whose end is before their start"), "{stdout}");
    let kernels: usize = read_traces(&root.path().join("odd"))
        .values()
        .flat_map(|t| t["traceEvents"].as_array().unwrap())
        .filter(|e| e["cat"] == "kernel")
        .inspect(|e| assert!(ns(&e["dur"]) >= 0, "{e}"))
        .count();
    assert_eq!(kernels, 35);
    // The schema says NOT NULL; a value of another type gets in all the same.
    conn.execute("UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET deviceId = 'gpu1' WHERE rowid = 2", []).unwrap();
    drop(conn);
    let o = llmperf().args(["export", "perfetto"]).arg(&db).arg("-o").arg(root.path().join("null")).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(6), "{stderr}");
    assert!(stderr.contains("CUPTI_ACTIVITY_KIND_KERNEL") && stderr.contains("deviceId"), "{stderr}");
}

/// A GPU table without `globalPid` (an older export's layout, made here by
/// dropping the column from a copy): in a one-process capture its
/// operations belong to that process, flows included; in a two-process
/// capture which one ran them is unknown, and the export is refused before
/// it writes. A `TARGET_INFO_GPU` without `cuDevice` gives no device id
/// rather than nsys's own.
#[test]
fn gpu_work_that_names_no_process_goes_to_the_only_one_or_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let Some(db) = crate::corpus_copy!("real/memfusion/report1.sqlite", root.path()) else { return };
    let whole = root.path().join("whole");
    export(&db, &whole);
    let flows = |traces: &BTreeMap<String, serde_json::Value>| -> usize {
        traces.values().flat_map(|t| t["traceEvents"].as_array().unwrap()).filter(|e| e["ph"] == "f").count()
    };
    let before = read_traces(&whole);
    let drop_column = |db: &Path, table: &str, column: &str| {
        let conn = rusqlite::Connection::open(db).unwrap();
        let indexes: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = ?1 AND sql IS NOT NULL")
            .unwrap()
            .query_map([table], |r| r.get(0))
            .unwrap()
            .map(Result::unwrap)
            .collect();
        for i in indexes {
            conn.execute(&format!("DROP INDEX \"{i}\""), []).unwrap();
        }
        conn.execute(&format!("ALTER TABLE {table} DROP COLUMN {column}"), []).unwrap();
    };
    drop_column(&db, "CUPTI_ACTIVITY_KIND_KERNEL", "globalPid");
    drop_column(&db, "TARGET_INFO_GPU", "cuDevice");
    let out = root.path().join("unplaced");
    export(&db, &out);
    let after = read_traces(&out);
    assert_eq!(after.len(), 1, "one process: {:?}", after.keys());
    let trace = after.values().next().unwrap();
    let kernels = trace["traceEvents"].as_array().unwrap().iter().filter(|e| e["cat"] == "kernel").count() as i64;
    assert_eq!(kernels, sql_rows(&db, "SELECT COUNT(*) FROM CUPTI_ACTIVITY_KIND_KERNEL")[0][0]);
    assert!(flows(&before) > 0);
    assert_eq!(flows(&after), flows(&before), "every kernel's flow still ends on it");
    let props = trace["deviceProperties"].as_array().unwrap();
    assert!(!props.is_empty() && props.iter().all(|d| d["id"].is_null()), "{props:?}");
    // Two processes: refused, nothing written.
    let Some(fsdp) = crate::corpus_copy!("real/nsys-ai/mfu_2gpu_before.sqlite", root.path()) else { return };
    drop_column(&fsdp, "CUPTI_ACTIVITY_KIND_KERNEL", "globalPid");
    let out = root.path().join("two");
    let o = llmperf().args(["export", "perfetto"]).arg(&fsdp).arg("-o").arg(&out).output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(6), "{stderr}");
    assert!(
        stderr.contains("CUPTI_ACTIVITY_KIND_KERNEL has GPU operations that name no process (no globalPid) and the capture holds 2 processes (144, 145)")
            && stderr.contains("hint: export the .nsys-rep again"),
        "{stderr}"
    );
    assert!(std::fs::read_dir(&out).map_or(true, |d| d.count() == 0), "nothing written");
}

/// The idle track: per device, the stretches of each kind add up to
/// breakdown.json's span parts to the ns (the run's `report.perfetto`
/// stage cuts them with the run's own launch gap, 10 µs here, not the
/// default), and none overlaps a GPU operation of its device.
#[test]
fn the_idle_track_is_the_breakdowns_idle_time_stretch_by_stretch() {
    let root = tempfile::tempdir().unwrap();
    let Some(db) = crate::corpus_copy!("real/nsys-ai/mfu_2gpu_before.sqlite", root.path()) else { return };
    let run = root.path().join("run");
    crate::common::import_nsys(&db, &run, &["report.launch_gap_us=10", "report.perfetto=true"]);
    let traces = read_traces(&run.join("perfetto"));
    let breakdown = json(&run.join("nsys/breakdown.json"));
    assert_eq!(breakdown["launch_gap_ns"], 10_000);
    let mut kinds_seen = std::collections::BTreeSet::new();
    for d in breakdown["devices"].as_array().unwrap() {
        let (pid, device) = (d["process_id"].as_i64().unwrap(), d["device"].as_i64().unwrap());
        let trace = &traces[&format!("pid{pid}.pt.trace.json.gz")];
        let events = trace["traceEvents"].as_array().unwrap();
        let on_device = |e: &&serde_json::Value| e["ph"] == "X" && e["pid"] == device;
        let mut sums: BTreeMap<String, i64> = BTreeMap::new();
        let mut idle: Vec<(i64, i64)> = Vec::new();
        for e in events.iter().filter(on_device).filter(|e| e["cat"] == "llmperf_idle") {
            let (start, dur) = (ns(&e["ts"]), ns(&e["dur"]));
            assert!(dur > 0, "{e}");
            *sums.entry(e["name"].as_str().unwrap().to_string()).or_default() += dur;
            idle.push((start, start + dur));
        }
        let span = &d["span"];
        for (kind, part) in [
            ("launch gap", "idle_launch_ns"),
            ("sync stall", "idle_sync_ns"),
            ("nothing queued", "idle_nothing_queued_ns"),
        ] {
            assert_eq!(sums.get(kind).copied().unwrap_or(0), span[part].as_i64().unwrap(), "pid {pid}: {kind}");
            if sums.contains_key(kind) {
                kinds_seen.insert(kind);
            }
        }
        // No GPU operation runs inside an idle stretch.
        let mut ops: Vec<(i64, i64)> = events
            .iter()
            .filter(on_device)
            .filter(|e| ["kernel", "gpu_memcpy", "gpu_memset"].contains(&e["cat"].as_str().unwrap()))
            .map(|e| (ns(&e["ts"]), ns(&e["ts"]) + ns(&e["dur"])))
            .collect();
        ops.sort_unstable();
        idle.sort_unstable();
        for (s, e) in &idle {
            let after = ops.partition_point(|o| o.0 < *e);
            assert!(ops[..after].iter().all(|o| o.1 <= *s || o.0 >= *e), "pid {pid}: idle {s}..{e} overlaps work");
        }
        assert!(idle.len() > 100, "pid {pid}: {} stretches", idle.len());
    }
    assert_eq!(kinds_seen.len(), 3, "{kinds_seen:?}");
    // `export perfetto RUN` takes the gap from the run's configuration, not
    // from breakdown.json, which records 0 where no breakdown could be made.
    std::fs::copy(&db, run.join("nsys/report.sqlite")).unwrap();
    let mut edited = breakdown.clone();
    edited["launch_gap_ns"] = 0.into();
    std::fs::write(run.join("nsys/breakdown.json"), edited.to_string()).unwrap();
    let o = llmperf().args(["export", "perfetto"]).arg(&run).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let launch: i64 = read_traces(&run.join("perfetto"))
        .values()
        .flat_map(|t| t["traceEvents"].as_array().unwrap().clone())
        .filter(|e| e["name"] == "launch gap" && e["cat"] == "llmperf_idle")
        .map(|e| ns(&e["dur"]))
        .sum();
    let want: i64 =
        breakdown["devices"].as_array().unwrap().iter().map(|d| d["span"]["idle_launch_ns"].as_i64().unwrap()).sum();
    assert_eq!(launch, want);
    // The runtime's calls stored last first: read sorted, the same stretches.
    let idle_of = |dir: &Path| -> Vec<String> {
        let mut v: Vec<String> = read_traces(dir)
            .values()
            .flat_map(|t| t["traceEvents"].as_array().unwrap().clone())
            .filter(|e| e["cat"] == "llmperf_idle")
            .map(|e| e.to_string())
            .collect();
        v.sort();
        v
    };
    let stored = root.path().join("stored");
    export(&db, &stored);
    let conn = rusqlite::Connection::open(&db).unwrap();
    conn.execute_batch(
        "CREATE TABLE t AS SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start DESC; \
         DELETE FROM CUPTI_ACTIVITY_KIND_RUNTIME; INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME SELECT * FROM t; DROP TABLE t;",
    )
    .unwrap();
    let reversed = root.path().join("reversed");
    export(&db, &reversed);
    let (a, b) = (idle_of(&stored), idle_of(&reversed));
    assert!(a.iter().filter(|e| e.contains("sync stall")).count() > 10);
    assert_eq!(a, b);
    // Kernels stored last first: the sweep cannot follow, and the track is
    // left out whole, with the reason, rather than cut wrong.
    conn.execute_batch(
        "CREATE TABLE t AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL ORDER BY start DESC; \
         DELETE FROM CUPTI_ACTIVITY_KIND_KERNEL; INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL SELECT * FROM t; DROP TABLE t;",
    )
    .unwrap();
    drop(conn);
    let out = root.path().join("unsorted");
    let o = llmperf().args(["export", "perfetto"]).arg(&db).arg("-o").arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let stdout = String::from_utf8_lossy(&o.stdout);
    assert!(
        stdout.contains("left out: the idle track (the breakdown's launch gaps, sync stalls, nothing queued): CUPTI_ACTIVITY_KIND_KERNEL is not stored in time order"),
        "{stdout}"
    );
    let idle = read_traces(&out)
        .values()
        .flat_map(|t| t["traceEvents"].as_array().unwrap().clone())
        .filter(|e| e["cat"] == "llmperf_idle")
        .count();
    assert_eq!(idle, 0);
}

/// `export perfetto RUN` into the run's own perfetto/ writes report.html
/// again, so that its timeline section links the traces it did not know of; an
/// export elsewhere (`-o`) leaves the run's files alone.
#[test]
fn an_export_into_the_run_links_its_traces_from_report_html() {
    let root = tempfile::tempdir().unwrap();
    let Some(db) = crate::corpus_copy!("real/memfusion/report1.sqlite", root.path()) else { return };
    let run = root.path().join("run");
    crate::common::import_nsys(&db, &run, &[]);
    // The layout of a profile run: its export beside the reports.
    std::fs::copy(&db, run.join("nsys/report.sqlite")).unwrap();
    let link = r#"<a href="perfetto/pid24129.pt.trace.json.gz""#;
    let html = || std::fs::read_to_string(run.join("report.html")).unwrap();
    let before = html();
    assert!(!before.contains(link) && before.contains("<code>llmperf export perfetto RUN_DIR</code>"));
    let elsewhere = root.path().join("elsewhere");
    let o = llmperf().args(["export", "perfetto"]).arg(&run).arg("-o").arg(&elsewhere).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(html(), before, "an export elsewhere leaves report.html as it was");
    let o = llmperf().args(["export", "perfetto"]).arg(&run).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(String::from_utf8_lossy(&o.stdout).contains("report.html links them from its timeline"));
    assert!(html().contains(link), "the timeline section links the trace");
}

/// `llmperf import torch TRACE -o RUN`, then `llmperf export perfetto RUN`.
fn import_and_export_torch(trace: &Path, run: &Path) {
    let o = llmperf().args(["import", "torch"]).arg(trace).arg("-o").arg(run).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = llmperf().args(["export", "perfetto"]).arg(run).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

/// Plain JSON of a trace file, gzipped or not.
fn trace_json(path: &Path) -> serde_json::Value {
    let bytes = std::fs::read(path).unwrap();
    let mut text = String::new();
    if bytes.starts_with(&[0x1f, 0x8b]) {
        std::io::Read::read_to_string(&mut flate2::read::GzDecoder::new(&bytes[..]), &mut text).unwrap();
    } else {
        text = String::from_utf8(bytes).unwrap();
    }
    serde_json::from_str(&text).unwrap()
}

/// `llmperf export perfetto` of a torch run: the trace's own document,
/// every member and event as torch.profiler wrote it, then per device the
/// idle track, whose stretches per kind add up to torch/breakdown.json's
/// span parts to the ns, and the findings at the first instance of their
/// region (plain JSON on the corpus trace, ns-resolution, 4,350 kernels).
/// `import torch` of the export gives back the same regions.
#[test]
fn a_torch_runs_export_is_its_trace_with_the_idle_track_and_findings() {
    let root = tempfile::tempdir().unwrap();
    let Some(trace) = corpus!("real/kineto/hta-ns-resolution/rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz") else {
        return;
    };
    let run = root.path().join("run");
    import_and_export_torch(&trace, &run);
    let original = trace_json(&trace);
    let exported = trace_json(&run.join("perfetto/pid1102.pt.trace.json.gz"));
    let (theirs, ours) = (original["traceEvents"].as_array().unwrap(), exported["traceEvents"].as_array().unwrap());
    for (key, value) in original.as_object().unwrap() {
        if key != "traceEvents" {
            assert_eq!(&exported[key], value, "{key}");
        }
    }
    assert_eq!(&ours[..theirs.len()], &theirs[..]);
    let added = &ours[theirs.len()..];
    // The idle track: per device and kind, the span's part.
    let breakdown = json(&run.join("torch/breakdown.json"));
    let mut devices = 0;
    for d in breakdown["devices"].as_array().unwrap() {
        let device = d["device"].as_i64().unwrap();
        for (kind, part) in [
            ("launch gap", "idle_launch_ns"),
            ("sync stall", "idle_sync_ns"),
            ("nothing queued", "idle_nothing_queued_ns"),
        ] {
            let sum: i64 = added
                .iter()
                .filter(|e| e["cat"] == "llmperf_idle" && e["pid"] == device && e["name"] == kind)
                .map(|e| ns(&e["dur"]))
                .sum();
            assert_eq!(sum, d["span"][part].as_i64().unwrap(), "device {device}: {kind}");
        }
        devices += 1;
    }
    assert_eq!(devices, 1);
    assert!(added.iter().filter(|e| e["cat"] == "llmperf_idle").count() > 1000);
    // The findings: at the earliest host range of their name in their process.
    let findings = json(&run.join("findings.json"))["findings"].as_array().unwrap().clone();
    let mut drawn = 0;
    for f in &findings {
        let region = f["region"].as_str().unwrap();
        let first = theirs
            .iter()
            .filter(|e| {
                e["ph"] == "X"
                    && ["user_annotation", "cpu_op", "python_function"].contains(&e["cat"].as_str().unwrap_or(""))
                    && e["name"] == region
                    && e["pid"] == f["process_id"]
            })
            .min_by_key(|e| ns(&e["ts"]));
        let marks: Vec<_> = added.iter().filter(|e| e["cat"] == "llmperf_finding" && e["args"] == *f).collect();
        match first {
            Some(first) => {
                assert_eq!(marks.len(), 1, "{region}");
                assert_eq!((ns(&marks[0]["ts"]), &marks[0]["tid"]), (ns(&first["ts"]), &first["tid"]), "{region}");
                drawn += 1;
            }
            None => assert!(marks.is_empty(), "{region}"),
        }
    }
    assert!(drawn >= 1, "{drawn} of {} findings drawn", findings.len());
    assert_eq!(added.iter().filter(|e| e["cat"] == "llmperf_finding").count(), drawn);
    // Round trip: the export read as a torch trace is the same region model.
    let again = root.path().join("again");
    let o = llmperf()
        .args(["import", "torch"])
        .arg(run.join("perfetto/pid1102.pt.trace.json.gz"))
        .arg("-o")
        .arg(&again)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let regions = |dir: &Path| json(&dir.join("torch/regions.json"))["regions"].clone();
    assert_eq!(regions(&again), regions(&run));
}

/// A trace whose times are relative to `baseTimeNanoseconds` (Kineto since
/// 2024): the idle track is written in the file's own times, inside the span
/// of the device's GPU work there (an edited copy of HTA's AlexNet trace:
/// every ts moved down by a base the document then names).
#[test]
fn a_torch_export_writes_the_idle_track_in_the_files_own_times() {
    let root = tempfile::tempdir().unwrap();
    let Some(trace) = corpus!("real/kineto/hta-alexnet/benchmark_result_2869224_1695835535_trace.json.gz") else {
        return;
    };
    let mut doc = trace_json(&trace);
    let base: i64 = 1_695_835_000_000_000_000;
    for e in doc["traceEvents"].as_array_mut().unwrap() {
        if let Some(ts) = e["ts"].as_f64() {
            let moved = (ts * 1000.0).round() as i64 - base;
            e["ts"] = serde_json::json!(moved as f64 / 1000.0);
        }
    }
    doc["baseTimeNanoseconds"] = serde_json::json!(base);
    let edited = root.path().join("relative.pt.trace.json");
    std::fs::write(&edited, serde_json::to_vec(&doc).unwrap()).unwrap();
    let run = root.path().join("run");
    import_and_export_torch(&edited, &run);
    let exported = read_traces(&run.join("perfetto"));
    assert_eq!(exported.len(), 1);
    let events = exported.values().next().unwrap()["traceEvents"].as_array().unwrap().clone();
    let gpu: Vec<_> = events.iter().filter(|e| e["cat"] == "kernel" || e["cat"] == "gpu_memcpy").collect();
    let from = gpu.iter().map(|e| ns(&e["ts"])).min().unwrap();
    let to = gpu.iter().map(|e| ns(&e["ts"]) + ns(&e["dur"])).max().unwrap();
    let idle: Vec<_> = events.iter().filter(|e| e["cat"] == "llmperf_idle").collect();
    assert!(!idle.is_empty());
    for e in idle {
        let (start, end) = (ns(&e["ts"]), ns(&e["ts"]) + ns(&e["dur"]));
        assert!(from <= start && end <= to, "idle {start}..{end} outside the GPU work's {from}..{to}");
    }
}

/// `report.perfetto=true` on a torch import: the stage writes, after the
/// reports, what `llmperf export perfetto RUN` writes, findings included.
#[test]
fn report_perfetto_on_a_torch_import_writes_the_export_of_its_trace() {
    let root = tempfile::tempdir().unwrap();
    let Some(trace) = corpus!("real/kineto/hta-alexnet/benchmark_result_2869224_1695835535_trace.json.gz") else {
        return;
    };
    let run = root.path().join("run");
    let o = llmperf()
        .args(["import", "torch"])
        .arg(&trace)
        .arg("-o")
        .arg(&run)
        .arg("report.perfetto=true")
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let manifest = json(&run.join("manifest.json"));
    let stage = crate::common::stage(&manifest, "perfetto_export");
    assert_eq!(stage["status"], "ok", "{stage:#}");
    let files = stage["artifacts"].as_array().unwrap();
    assert_eq!(files.len(), 1, "{stage:#}");
    let written = read_traces(&run.join("perfetto"));
    let events = written.values().next().unwrap()["traceEvents"].as_array().unwrap();
    assert!(events.iter().any(|e| e["cat"] == "llmperf_idle"));
    let out = root.path().join("exported");
    let o = llmperf().args(["export", "perfetto"]).arg(&run).arg("-o").arg(&out).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(written, read_traces(&out));
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    let file = files[0].as_str().unwrap();
    assert!(html.contains(&format!("<a href=\"{file}\"")), "report.html does not link {file}");
}

/// A 2021 trace writes host ids as strings (`"pid": "25738"`): a torch
/// export's finding marks sit on the very tracks of the trace's host ranges,
/// the ids written as the trace writes them (kineto's TensorBoard plugin trace).
#[test]
fn a_torch_exports_findings_sit_on_the_traces_own_host_tracks() {
    let root = tempfile::tempdir().unwrap();
    let Some(trace) = corpus!("real/kineto/kineto-tb-plugin/worker0.1623143089861.pt.trace.json.gz") else {
        return;
    };
    let run = root.path().join("run");
    import_and_export_torch(&trace, &run);
    let events = read_traces(&run.join("perfetto")).into_values().next().unwrap()["traceEvents"].clone();
    let events = events.as_array().unwrap();
    let hosts: std::collections::HashSet<String> = events
        .iter()
        .filter(|e| {
            e["ph"] == "X" && ["cpu_op", "Operator", "user_annotation"].contains(&e["cat"].as_str().unwrap_or(""))
        })
        .map(|e| format!("{} {}", e["pid"], e["tid"]))
        .collect();
    let marks: Vec<String> =
        events.iter().filter(|e| e["cat"] == "llmperf_finding").map(|e| format!("{} {}", e["pid"], e["tid"])).collect();
    let findings = json(&run.join("findings.json"))["findings"].as_array().unwrap().len();
    assert_eq!(marks.len(), findings);
    assert!(!marks.is_empty());
    for m in &marks {
        assert!(hosts.contains(m), "a finding on {m}, which no host range of the trace is on");
    }
}

/// A torch trace whose breakdown has two rows for one device (GPU work
/// whose launch is missing, in a trace of two host processes, is process
/// 0's): a track per row, none with crossing slices, each adding up to its
/// row's span (an edited copy of HTA's AlexNet trace: a host range copied
/// into a second process, every other kernel's correlation taken out).
#[test]
fn a_torch_export_draws_a_track_per_breakdown_row_of_a_device() {
    let root = tempfile::tempdir().unwrap();
    let Some(trace) = corpus!("real/kineto/hta-alexnet/benchmark_result_2869224_1695835535_trace.json.gz") else {
        return;
    };
    let mut doc = trace_json(&trace);
    let events = doc["traceEvents"].as_array_mut().unwrap();
    let mut other = events.iter().find(|e| e["cat"] == "cpu_op").unwrap().clone();
    other["pid"] = serde_json::json!(7);
    other["tid"] = serde_json::json!(7);
    events.push(other);
    for (i, e) in events.iter_mut().filter(|e| e["cat"] == "kernel").enumerate() {
        if i % 2 == 1 {
            e["args"].as_object_mut().unwrap().remove("correlation");
        }
    }
    let edited = root.path().join("two.pt.trace.json");
    std::fs::write(&edited, serde_json::to_vec(&doc).unwrap()).unwrap();
    let run = root.path().join("run");
    import_and_export_torch(&edited, &run);
    let rows: Vec<_> = json(&run.join("torch/breakdown.json"))["devices"].as_array().unwrap().clone();
    assert_eq!(rows.len(), 2, "two rows for GPU 0");
    let exported = read_traces(&run.join("perfetto")).into_values().next().unwrap();
    let events = exported["traceEvents"].as_array().unwrap();
    let mut tracks: BTreeMap<String, Vec<(i64, i64, String)>> = BTreeMap::new();
    for e in events.iter().filter(|e| e["cat"] == "llmperf_idle") {
        let start = ns(&e["ts"]);
        tracks.entry(e["tid"].to_string()).or_default().push((
            start,
            start + ns(&e["dur"]),
            e["name"].as_str().unwrap().to_string(),
        ));
    }
    assert_eq!(tracks.len(), 2);
    let names: Vec<String> = events
        .iter()
        .filter(|e| e["name"] == "thread_name" && e["args"]["name"].as_str().unwrap_or("").starts_with("idle"))
        .map(|e| e["args"]["name"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    let mut sums: Vec<[i64; 3]> = Vec::new();
    for slices in tracks.values() {
        assert!(slices.windows(2).all(|w| w[0].1 <= w[1].0), "slices cross on one track");
        let sum = |k: &str| slices.iter().filter(|s| s.2 == k).map(|s| s.1 - s.0).sum::<i64>();
        sums.push([sum("launch gap"), sum("sync stall"), sum("nothing queued")]);
    }
    let mut want: Vec<[i64; 3]> = rows
        .iter()
        .map(|r| {
            let p = |k: &str| r["span"][k].as_i64().unwrap();
            [p("idle_launch_ns"), p("idle_sync_ns"), p("idle_nothing_queued_ns")]
        })
        .collect();
    sums.sort();
    want.sort();
    assert_eq!(sums, want);
}

/// A copy of HTA's AlexNet trace, imported into `root/run`: (the copy, the run).
fn imported_alexnet_copy(root: &Path) -> Option<(PathBuf, PathBuf)> {
    let trace = corpus!("real/kineto/hta-alexnet/benchmark_result_2869224_1695835535_trace.json.gz")?;
    let copy = root.join("t.pt.trace.json");
    std::fs::write(&copy, serde_json::to_vec(&trace_json(&trace)).unwrap()).unwrap();
    let run = root.join("run");
    import_and_export_torch(&copy, &run);
    Some((copy, run))
}

/// `export perfetto RUN` refused (exit 2) with `says` and a hint; nothing written.
fn export_is_refused(root: &Path, run: &Path, says: &str) {
    let o = llmperf().args(["export", "perfetto"]).arg(run).arg("-o").arg(root.join("out")).output().unwrap();
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains(says) && stderr.contains("the file changed since") && stderr.contains("hint:"), "{stderr}");
    assert!(!root.join("out").exists());
}

/// A torch run whose trace changed after the import (`import torch` reads
/// the file where it lies) is refused: its findings and breakdown are of
/// another file (an edited copy of HTA's AlexNet trace, one event removed).
#[test]
fn a_torch_runs_trace_changed_since_the_import_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let Some((copy, run)) = imported_alexnet_copy(root.path()) else { return };
    let mut doc = trace_json(&copy);
    doc["traceEvents"].as_array_mut().unwrap().pop();
    std::fs::write(&copy, serde_json::to_vec(&doc).unwrap()).unwrap();
    export_is_refused(root.path(), &run, "");
}

/// A trace rewritten with as many events as the run read, but not the same
/// file (one kernel's duration changed: a rerun of the same program writes
/// the same count): refused by its size, not drawn beside the run's findings.
#[test]
fn a_torch_runs_trace_rewritten_with_as_many_events_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let Some((copy, run)) = imported_alexnet_copy(root.path()) else { return };
    let mut doc = trace_json(&copy);
    let events = doc["traceEvents"].as_array_mut().unwrap();
    let (n, kernel) = (events.len(), events.iter_mut().find(|e| e["cat"] == "kernel").unwrap());
    kernel["dur"] = serde_json::json!(kernel["dur"].as_f64().unwrap() * 1000.0 + 7.0);
    std::fs::write(&copy, serde_json::to_vec(&doc).unwrap()).unwrap();
    assert_eq!(trace_json(&copy)["traceEvents"].as_array().unwrap().len(), n);
    export_is_refused(root.path(), &run, "bytes now");
}
