//! What to fix first, from the device down (findings.json), against SQL on
//! the corpus's exports written here: each device's span cut into parts that
//! never overlap, the findings those parts at or above 2% of the span, in the
//! order of their size; GPU work charged to the top-level range whose launch
//! calls (correlation id, launching thread) hold its kernels, wherever on the
//! timeline they ran; and a device's recoverable time never more than its span.
use rusqlite::{Connection, OpenFlags};
use std::collections::BTreeMap;
use std::path::Path;

use crate::common::{corpus_copy, corpus_dir, corpus_file, import_nsys, json, skipped};

/// Top-level push/pop ranges per thread (those that start at or after the end
/// of every earlier range of the thread), named without PyTorch's per-call
/// attributes, as report.nvtx_attributes strips them (tests/breakdown.rs).
const WINDOWS: &str = "named AS (
    SELECT e.rowid AS id, (e.globalTid >> 24) & 16777215 AS pid, e.globalTid AS tid, e.start AS ws, e.end AS we,
           COALESCE(e.text, (SELECT value FROM StringIds WHERE id = e.textId)) AS raw
    FROM NVTX_EVENTS e WHERE e.eventType = 59 AND e.end IS NOT NULL AND e.end >= e.start),
    nested AS (SELECT *, MAX(we) OVER (PARTITION BY tid ORDER BY ws, we DESC, id
               ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS before FROM named),
    win AS MATERIALIZED (SELECT id, pid, tid, ws, we, CASE
               WHEN instr(raw, ', seq = ') > 0 THEN substr(raw, 1, instr(raw, ', seq = ') - 1)
               WHEN instr(raw, ', op_id = ') > 0 THEN substr(raw, 1, instr(raw, ', op_id = ') - 1)
               ELSE raw END AS name
            FROM nested WHERE before IS NULL OR ws >= before)";

/// Each kernel with the top-level range its launch call was made in (on the
/// launching thread, the call's start inside the range; one call per
/// correlation id: the first), or NULL.
const LAUNCHED_IN: &str = "calls AS MATERIALIZED (SELECT correlationId AS cid, (globalTid >> 24) & 16777215 AS pid,
               MIN(globalTid) AS tid, MIN(start) AS t FROM CUPTI_ACTIVITY_KIND_RUNTIME GROUP BY 1, 2),
    launched AS (SELECT k.rowid AS kid, (k.globalPid >> 24) & 16777215 AS pid, k.deviceId AS dev,
               k.start AS s, k.end AS e, n.value AS kname, w.name AS region
        FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds n ON n.id = k.demangledName
        LEFT JOIN calls c ON c.cid = k.correlationId AND c.pid = (k.globalPid >> 24) & 16777215
        LEFT JOIN win w ON w.tid = c.tid AND w.ws <= c.t AND c.t < w.we)";

fn open(db: &Path) -> Connection {
    Connection::open_with_flags(db, OpenFlags::SQLITE_OPEN_READ_ONLY).unwrap()
}

fn import(db: &Path, dir: &Path) -> (serde_json::Value, serde_json::Value) {
    let out = dir.join("run");
    import_nsys(db, &out, &[]);
    (json(&out.join("findings.json")), json(&out.join("nsys/breakdown.json")))
}

/// One device's parts by SQL: (pid, dev) → span, union of everything,
/// union of kernels, union of compute kernels, and the idle gaps inside the
/// span by cause (sync, launch, nothing queued).
#[derive(Debug, Default)]
struct DeviceSql {
    span: i64,
    kernels_union: i64,
    compute_union: i64,
    sync: i64,
    launch: i64,
    nothing: i64,
}

/// The blocking runtime functions, by CUDA's documented behaviour: the
/// synchronizations and the copies that are not `Async` (nsys appends a
/// version, `_v3020`); not cudaMemset.
const BLOCKING: &str = "(n.value LIKE 'cudaDeviceSynchronize%' OR n.value LIKE 'cudaStreamSynchronize%'
    OR n.value LIKE 'cudaEventSynchronize%' OR n.value LIKE 'cudaThreadSynchronize%'
    OR n.value LIKE 'cuCtxSynchronize%' OR n.value LIKE 'cuStreamSynchronize%' OR n.value LIKE 'cuEventSynchronize%'
    OR ((n.value LIKE 'cudaMemcpy%' OR n.value LIKE 'cuMemcpy%') AND n.value NOT LIKE '%Async%'
        AND n.value NOT LIKE '%Peer%' AND n.value NOT LIKE '%Array%'))";

fn device_sql(conn: &Connection, launch_gap_ns: i64) -> BTreeMap<(i64, i64), DeviceSql> {
    let act = crate::common::gpu_activity_sql(conn, "%nccl%");
    let union = |keep: &str| -> String {
        format!(
            "WITH act AS ({}), iv AS (SELECT pid, dev, s, e FROM act WHERE {keep}),
             o AS (SELECT *, MAX(e) OVER (PARTITION BY pid, dev ORDER BY s, e ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS pm FROM iv),
             g AS (SELECT *, SUM(CASE WHEN pm IS NULL OR s > pm THEN 1 ELSE 0 END) OVER (PARTITION BY pid, dev ORDER BY s, e ROWS UNBOUNDED PRECEDING) AS isl FROM o),
             islands AS (SELECT pid, dev, isl, MIN(s) AS s, MAX(e) AS e FROM g GROUP BY 1, 2, 3)",
            act
        )
    };
    let mut out: BTreeMap<(i64, i64), DeviceSql> = BTreeMap::new();
    let query = |sql: &str| -> Vec<(i64, i64, i64)> {
        let mut st = conn.prepare(sql).unwrap();
        st.query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().map(Result::unwrap).collect()
    };
    for (pid, dev, v) in query(&format!("{} SELECT pid, dev, MAX(e) - MIN(s) FROM islands GROUP BY 1, 2", union("1"))) {
        out.entry((pid, dev)).or_default().span = v;
    }
    for (keep, field) in [("kind = 0", 0), ("kind = 0 AND comm = 0", 1)] {
        for (pid, dev, v) in query(&format!("{} SELECT pid, dev, SUM(e - s) FROM islands GROUP BY 1, 2", union(keep))) {
            let d = out.entry((pid, dev)).or_default();
            if field == 0 {
                d.kernels_union = v;
            } else {
                d.compute_union = v;
            }
        }
    }
    // The gaps between the islands of all activity, each judged by its start.
    let gaps = format!(
        "{}, gaps AS (SELECT pid, dev, e AS gs, LEAD(s) OVER (PARTITION BY pid, dev ORDER BY s) AS ge FROM islands),
         blocking AS MATERIALIZED (SELECT (r.globalTid >> 24) & 16777215 AS pid, r.start AS s, r.end AS e
                      FROM CUPTI_ACTIVITY_KIND_RUNTIME r JOIN StringIds n ON n.id = r.nameId WHERE {BLOCKING})
         SELECT g.pid, g.dev, g.ge - g.gs,
                EXISTS (SELECT 1 FROM blocking b WHERE b.pid = g.pid AND b.s <= g.gs AND g.gs <= b.e)
         FROM gaps g WHERE g.ge IS NOT NULL AND g.ge > g.gs",
        union("1")
    );
    let mut st = conn.prepare(&gaps).unwrap();
    let rows =
        st.query_map([], |r| Ok((r.get::<_, i64>(0)?, r.get::<_, i64>(1)?, r.get::<_, i64>(2)?, r.get::<_, bool>(3)?)));
    for (pid, dev, len, sync) in rows.unwrap().map(Result::unwrap) {
        let d = out.entry((pid, dev)).or_default();
        match (sync, len <= launch_gap_ns) {
            (true, _) => d.sync += len,
            (false, true) => d.launch += len,
            (false, false) => d.nothing += len,
        }
    }
    out
}

/// The findings of one device: (kind, recoverable ns), in ranking order.
fn device_findings(report: &serde_json::Value, pid: i64, dev: i64) -> Vec<(String, i64)> {
    report["findings"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["process_id"] == pid && f["device"] == dev)
        .map(|f| (f["kind"].as_str().unwrap().to_string(), f["recoverable_ns"].as_i64().unwrap()))
        .collect()
}

/// The FSDP capture (two processes, one H100 each): per device the flash
/// attention family, then the dtype and layout copies, idle time and the
/// exposed NCCL time, in the order of their share of the device, each equal
/// to SQL; nothing under 2% of the span ranks above them (nothing under 2%
/// is a finding). The attention family's finding carries the ncu command
/// around the command nsys recorded; the exposed communication is charged
/// to `AllToAll4D`, whose launch calls hold the NCCL kernels (SQL), and
/// stands beside the ranges whose wall time it ran in.
#[test]
fn fsdp_findings_rank_each_devices_parts_by_their_share_as_sql_does() {
    let test = crate::this_test!();
    let Some(db) = corpus_file(&test, "real/nsys-ai/mfu_2gpu_before.sqlite") else { return };
    let dir = tempfile::tempdir().unwrap();
    let (report, breakdown) = import(&db, dir.path());
    assert_eq!(report["source"], "nsys breakdown");
    let conn = open(&db);
    let devices = device_sql(&conn, breakdown["launch_gap_ns"].as_i64().unwrap());
    assert_eq!(devices.len(), 2);
    // No attention or copy kernel overlaps another compute kernel on its
    // device (one pair of others does, by 12 us): each is charged whole.
    let family = |like: &str| -> BTreeMap<(i64, i64), i64> {
        let sql = format!(
            "WITH k AS MATERIALIZED (SELECT (k.globalPid >> 24) & 16777215 AS pid, k.deviceId AS dev, k.rowid AS id, k.start AS s, k.end AS e, n.value AS v
                        FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds n ON n.id = k.demangledName WHERE n.value NOT LIKE '%nccl%')
             SELECT a.pid, a.dev, SUM(a.e - a.s),
                    SUM((SELECT COUNT(*) FROM k b WHERE b.pid = a.pid AND b.dev = a.dev AND b.id != a.id AND b.s < a.e AND a.s < b.e))
             FROM k a WHERE {like} GROUP BY 1, 2"
        );
        let mut st = conn.prepare(&sql).unwrap();
        st.query_map([], |r| Ok(((r.get(0)?, r.get(1)?), (r.get::<_, i64>(2)?, r.get::<_, i64>(3)?))))
            .unwrap()
            .map(Result::unwrap)
            .map(|(k, (ns, overlaps))| {
                assert_eq!(overlaps, 0, "{like} on {k:?}");
                (k, ns)
            })
            .collect()
    };
    let attention = family("a.v LIKE '%flash%'");
    let copies = family("(a.v LIKE '%copy_kernel%' OR a.v LIKE '%CatArray%')");
    for ((pid, dev), d) in &devices {
        let mut want = vec![
            ("kernel_family".to_string(), attention[&(*pid, *dev)]),
            ("copy_cast".to_string(), copies[&(*pid, *dev)]),
            ("exposed_communication".to_string(), d.kernels_union - d.compute_union),
            ("sync_stall".to_string(), d.sync),
            ("launch_bound".to_string(), d.launch),
            ("idle_gpu".to_string(), d.nothing),
        ];
        want.retain(|(_, ns)| *ns as f64 >= 0.02 * d.span as f64 && *ns >= 100_000);
        want.sort_by_key(|w| std::cmp::Reverse(w.1));
        let got = device_findings(&report, *pid, *dev);
        assert_eq!(got, want, "pid {pid}, GPU {dev}: {report}");
        assert_eq!(
            breakdown["devices"].as_array().unwrap().iter().find(|b| b["process_id"] == *pid).unwrap()["span"]
                ["wall_ns"],
            d.span
        );
        let first = report["findings"].as_array().unwrap().iter().find(|f| f["process_id"] == *pid).unwrap();
        assert_eq!(first["kind"], "kernel_family");
        assert!((first["share"].as_f64().unwrap() - attention[&(*pid, *dev)] as f64 / d.span as f64).abs() < 1e-12);
        let ncu = first["ncu_command"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect::<Vec<_>>();
        assert_eq!(ncu[0], "ncu");
        assert!(ncu.iter().any(|a| a.contains("flash_fwd_kernel")), "{ncu:?}");
        assert_eq!(
            &ncu[ncu.len() - 5..],
            ["torchrun", "--nnodes=1", "--nproc_per_node=2", "--master_port=29506", "/tmp/fv_mfu_training.py"]
        );
    }
    // The NCCL kernels by the range their launch calls were made in.
    let sql = format!(
        "WITH {WINDOWS}, {LAUNCHED_IN} SELECT pid, dev, region, COUNT(*), SUM(e - s) FROM launched
         WHERE kname LIKE '%nccl%' GROUP BY 1, 2, 3 ORDER BY 5 DESC"
    );
    let mut st = conn.prepare(&sql).unwrap();
    let nccl: Vec<(i64, i64, Option<String>, i64, i64)> = st
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    for (pid, dev) in devices.keys() {
        let mine: Vec<_> = nccl.iter().filter(|n| n.0 == *pid && n.1 == *dev && n.2.is_some()).collect();
        assert_eq!(mine[0].2.as_deref(), Some("AllToAll4D"), "{nccl:?}");
        let f = report["findings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["kind"] == "exposed_communication" && f["process_id"] == *pid)
            .unwrap();
        assert_eq!(f["region"], "AllToAll4D");
        assert_eq!(f["attribution"], "issued");
        assert_eq!(f["issued_in"][0]["ns"].as_i64(), Some(mine[0].4), "{f}");
        assert_eq!(f["issued_in"][0]["kernels"].as_i64(), Some(mine[0].3), "{f}");
        // Where it ran: the range whose wall time holds the most of it (breakdown.json, checked against SQL in tests/breakdown.rs).
        let d = breakdown["devices"].as_array().unwrap().iter().find(|b| b["process_id"] == *pid).unwrap();
        let most = d["regions"]
            .as_array()
            .unwrap()
            .iter()
            .max_by_key(|r| r["parts"]["communication_exposed_ns"].as_i64().unwrap())
            .unwrap();
        assert_eq!(f["ran_in"][0]["region"], most["name"]);
    }
    let summary = std::fs::read_to_string(dir.path().join("run/stakeholder_summary.md")).unwrap();
    assert!(summary.contains("| 1 | largest kernel family |"), "{summary}");
    assert!(summary.contains("issued in AllToAll4D"), "{summary}");
}

/// The shipped category table (conf/analysis/kernel_categories.yaml), applied
/// here with the regex crate as its header says: names without their unnamed
/// namespaces and a leading `std::enable_if<…>::type`, first rule that matches.
fn classifier() -> impl Fn(&str) -> String {
    let table: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("conf/analysis/kernel_categories.yaml"))
            .unwrap(),
    )
    .unwrap();
    let rules: Vec<(String, regex::Regex)> = table["rules"]
        .as_sequence()
        .unwrap()
        .iter()
        .map(|r| {
            let re = regex::RegexBuilder::new(r["match"].as_str().unwrap()).case_insensitive(true).build().unwrap();
            (r["category"].as_str().unwrap().to_string(), re)
        })
        .collect();
    let strip = regex::Regex::new(r"<unnamed>::|\(anonymous namespace\)::").unwrap();
    let enable_if = regex::Regex::new(r"^std::enable_if<.*?>::type ").unwrap();
    move |name: &str| {
        let n = strip.replace_all(name, "");
        let n = enable_if.replace(&n, "");
        rules.iter().find(|(_, re)| re.is_match(&n)).map_or("other".to_string(), |(c, _)| c.clone())
    }
}

/// Per top-level range, the (kernels, ns) of a category it launched.
type Issuers = BTreeMap<String, (i64, i64)>;

/// Every GPU-work finding of every nsys export of the corpus names, first,
/// the top-level range whose launch calls hold the most GPU time of its
/// kernels (SQL: the runtime row with the kernel's correlation id inside the
/// range on the launching thread), with that time and count.
#[test]
fn gpu_work_findings_name_the_region_that_issued_their_kernels() {
    let test = crate::this_test!();
    let Some(corpus) = corpus_dir() else { return skipped(&test, "the shared corpus is not there") };
    let classify = classifier();
    let mut checked = 0;
    for rel in [
        "real/nsys-ai/mfu_2gpu_before.sqlite",
        "real/memfusion/report1.sqlite",
        "real/isc25-icon/gpu.sqlite",
        "real/fuser/report1.sqlite",
    ] {
        // (uvmtorch has no kernels, abacus no NVTX ranges: nothing is issued by a range there.)
        let db = corpus.join(rel);
        let dir = tempfile::tempdir().unwrap();
        let (report, _) = import(&db, dir.path());
        let conn = open(&db);
        let sql = format!("WITH {WINDOWS}, {LAUNCHED_IN} SELECT pid, dev, region, kname, e - s FROM launched");
        let mut st = conn.prepare(&sql).unwrap();
        // (pid, dev, category) → region → (kernels, ns).
        let mut by: BTreeMap<(i64, i64, String), Issuers> = BTreeMap::new();
        let rows = st.query_map([], |r| {
            Ok((
                r.get::<_, i64>(0)?,
                r.get::<_, i64>(1)?,
                r.get::<_, Option<String>>(2)?,
                r.get::<_, String>(3)?,
                r.get::<_, i64>(4)?,
            ))
        });
        for (pid, dev, region, name, ns) in rows.unwrap().map(Result::unwrap) {
            let Some(region) = region else { continue };
            let e = by.entry((pid, dev, classify(&name))).or_default().entry(region).or_default();
            (e.0, e.1) = (e.0 + 1, e.1 + ns);
        }
        for f in report["findings"].as_array().unwrap().iter().filter(|f| f["attribution"] == "issued") {
            let category = match f["kind"].as_str().unwrap() {
                "exposed_communication" => "communication".to_string(),
                "copy_cast" => "copy_cast".to_string(),
                "elementwise_fusion" => "elementwise".to_string(),
                _ => classify(f["kernels"][0].as_str().unwrap()),
            };
            let key = (f["process_id"].as_i64().unwrap(), f["device"].as_i64().unwrap(), category);
            let regions = &by[&key];
            let (region, (kernels, ns)) =
                regions.iter().max_by_key(|(r, v)| (v.1, std::cmp::Reverse(r.as_str()))).unwrap();
            assert_eq!(f["region"].as_str(), Some(region.as_str()), "{rel}: {key:?}: {f}");
            assert_eq!(f["issued_in"][0]["ns"].as_i64(), Some(*ns), "{rel}: {f}");
            assert_eq!(f["issued_in"][0]["kernels"].as_i64(), Some(*kernels), "{rel}: {f}");
            checked += 1;
        }
    }
    assert!(checked >= 6, "{checked} GPU-work findings checked");
}

/// A copy of the FSDP export whose NCCL kernels run later: each moved by
/// SQL into the wall window of the top-level range that follows the one it
/// ran in on its process (start and end shifted alike, nothing else). The
/// wall windows that hold the exposed communication change; the region that
/// issued it does not: still `AllToAll4D`.
#[test]
fn nccl_kernels_that_run_later_are_still_charged_to_the_range_that_launched_them() {
    let test = crate::this_test!();
    let dir = tempfile::tempdir().unwrap();
    let Some(db) = corpus_copy(&test, "real/nsys-ai/mfu_2gpu_before.sqlite", dir.path()) else { return };
    let (before, _) = import(&db, &dir.path().join("before"));
    let conn = Connection::open(&db).unwrap();
    // Per NCCL kernel: the first top-level range of its process that starts
    // after every range holding the kernel's start has ended.
    let shifts: Vec<(i64, i64)> = conn
        .prepare(&format!(
            "WITH {WINDOWS}, nccl AS (SELECT k.rowid AS id, (k.globalPid >> 24) & 16777215 AS pid, k.start AS s
                          FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds n ON n.id = k.demangledName WHERE n.value LIKE '%nccl%'),
                 held AS (SELECT nccl.id, nccl.pid, nccl.s, MAX(w.we) AS until FROM nccl JOIN win w ON w.pid = nccl.pid AND w.ws <= nccl.s GROUP BY 1, 2, 3)
             SELECT held.id, MIN(w.ws) + 1 - held.s FROM held JOIN win w ON w.pid = held.pid AND w.ws >= held.until GROUP BY held.id"
        ))
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let mut moved = 0;
    for (id, by) in &shifts {
        moved += conn
            .execute(
                "UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET start = start + ?2, end = end + ?2 WHERE rowid = ?1",
                [id, by],
            )
            .unwrap();
    }
    assert!(moved >= 60, "{moved} NCCL kernels moved");
    drop(conn);
    let (after, breakdown) = import(&db, &dir.path().join("after"));
    let exposed = |r: &serde_json::Value| -> Vec<serde_json::Value> {
        r["findings"].as_array().unwrap().iter().filter(|f| f["kind"] == "exposed_communication").cloned().collect()
    };
    for (b, a) in exposed(&before).iter().zip(exposed(&after)) {
        assert_eq!(a["region"], "AllToAll4D", "{a}");
        assert_eq!(a["issued_in"][0], b["issued_in"][0], "issued: the same launches");
        assert_ne!(a["ran_in"], b["ran_in"], "ran: other wall windows");
    }
    assert!(!exposed(&after).is_empty(), "{after}");
    assert!(!breakdown["devices"].as_array().unwrap().is_empty());
}

/// The same milliseconds are never in two findings: on every export of the
/// corpus, and on a copy of the FSDP export whose kernels all run a second
/// time on another stream at the same times, each device's recoverable time
/// adds up to at most its span, and no finding's share passes 1.
#[test]
fn a_devices_findings_add_up_to_at_most_its_span() {
    let test = crate::this_test!();
    let Some(corpus) = corpus_dir() else { return skipped(&test, "the shared corpus is not there") };
    let check = |report: &serde_json::Value, breakdown: &serde_json::Value, what: &str| {
        for d in breakdown["devices"].as_array().unwrap() {
            let span = d["span"]["wall_ns"].as_i64().unwrap();
            let mine: Vec<&serde_json::Value> = report["findings"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|f| f["process_id"] == d["process_id"] && f["device"] == d["device"])
                .collect();
            let sum: i64 = mine.iter().map(|f| f["recoverable_ns"].as_i64().unwrap()).sum();
            assert!(sum <= span, "{what}: pid {} GPU {}: {sum} > {span}", d["process_id"], d["device"]);
            for f in mine {
                assert!(f["share"].as_f64().unwrap() <= 1.0, "{what}: {f}");
            }
        }
    };
    let dir = tempfile::tempdir().unwrap();
    for rel in [
        "real/nsys-ai/mfu_2gpu_before.sqlite",
        "real/memfusion/report1.sqlite",
        "real/isc25-icon/gpu.sqlite",
        "real/fuser/report1.sqlite",
        "real/uvmtorch/report1.sqlite",
        "real/derived/abacus/report1.nsys2022.4.sqlite",
    ] {
        let (report, breakdown) = import(&corpus.join(rel), &dir.path().join(rel.replace('/', "_")));
        check(&report, &breakdown, rel);
    }
    let db = corpus_copy(&test, "real/nsys-ai/mfu_2gpu_before.sqlite", dir.path()).unwrap();
    let conn = Connection::open(&db).unwrap();
    // Every column as it is but the stream (one past the largest) and the correlation id (no launch: unattributed).
    let cols: Vec<String> = conn
        .prepare("SELECT name FROM pragma_table_info('CUPTI_ACTIVITY_KIND_KERNEL')")
        .unwrap()
        .query_map([], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let select: Vec<String> = cols
        .iter()
        .map(|c| match c.as_str() {
            "streamId" => "streamId + 1000".to_string(),
            "correlationId" => "correlationId + 100000000".to_string(),
            c => c.to_string(),
        })
        .collect();
    let n = conn
        .execute(
            &format!(
                "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL ({}) SELECT {} FROM CUPTI_ACTIVITY_KIND_KERNEL",
                cols.join(", "),
                select.join(", ")
            ),
            [],
        )
        .unwrap();
    assert!(n > 4000, "{n}");
    drop(conn);
    let (report, breakdown) = import(&db, &dir.path().join("doubled"));
    check(&report, &breakdown, "kernels doubled onto a second stream");
    assert!(!report["findings"].as_array().unwrap().is_empty());
}
