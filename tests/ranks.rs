//! Ranks of one job side by side (ranks.json), on the real two-process
//! torchrun capture of the corpus (nsys-ai `mfu_2gpu_before.sqlite`: two
//! H100s, nsys 2026.2), checked against plain SQL per process.
use crate::common::*;
use std::collections::BTreeMap;

/// Each rank is one process, given its rank by its CUDA device; its kernel
/// count and GPU time, and the share of NCCL kernels, equal SQL sums over
/// that process's kernels; a region's time is per rank, never summed.
#[test]
fn per_rank_totals_of_a_torchrun_capture_equal_sql_sums_per_process() {
    let root = tempfile::tempdir().unwrap();
    let Some(db) = corpus_copy!("real/nsys-ai/mfu_2gpu_before.sqlite", root.path()) else { return };
    let run = root.path().join("run");
    llmperf().args(["import", "nsys"]).arg(&db).arg("-o").arg(&run).assert().success();
    llmperf().args(["validate"]).arg(&run).assert().success();
    let ranks = json(&run.join("ranks.json"));
    assert_eq!(ranks["rank_source"], "cuda_device");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT (k.globalPid >> 24) & 16777215, k.deviceId, count(*), sum(k.end - k.start), \
             sum(CASE WHEN s.value LIKE 'nccl%' THEN k.end - k.start ELSE 0 END) \
             FROM CUPTI_ACTIVITY_KIND_KERNEL k JOIN StringIds s ON s.id = k.shortName GROUP BY 1, 2 ORDER BY 2",
        )
        .unwrap();
    let sql: Vec<(i64, i64, i64, i64, i64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(sql.len(), 2, "two processes, one device each");
    let got: Vec<(i64, i64, i64, i64, i64)> = ranks["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .enumerate()
        .map(|(i, r)| {
            assert_eq!(r["rank"], i as u64, "ranks in device order");
            assert_eq!(r["process_ids"].as_array().unwrap().len(), 1);
            (
                r["process_ids"][0].as_i64().unwrap(),
                r["devices"][0].as_i64().unwrap(),
                r["kernels"].as_i64().unwrap(),
                r["gpu_time_ns"].as_i64().unwrap(),
                r["comm_gpu_time_ns"].as_i64().unwrap(),
            )
        })
        .collect();
    assert_eq!(got, sql);
    assert!(sql.iter().all(|r| r.4 > 0), "both ranks ran NCCL kernels");
    // A region's time per rank is that process's regions.json entries, apart.
    let regions = json(&run.join("nsys/regions.json"));
    let rank_of: BTreeMap<i64, u64> = got.iter().enumerate().map(|(i, r)| (r.0, i as u64)).collect();
    let mut want: BTreeMap<(String, u64), i64> = BTreeMap::new();
    for r in regions["regions"].as_array().unwrap() {
        let key = (r["path"].as_str().unwrap().to_string(), rank_of[&r["process_id"].as_i64().unwrap()]);
        *want.entry(key).or_default() += r["inclusive_ns"].as_i64().unwrap();
    }
    let mut seen = 0;
    for r in ranks["regions"].as_array().unwrap() {
        for (rank, ns) in r["per_rank"].as_object().unwrap() {
            let key = (r["path"].as_str().unwrap().to_string(), rank.parse().unwrap());
            assert_eq!(ns.as_i64().unwrap(), want[&key], "{key:?}");
            seen += 1;
        }
        let per: Vec<i64> = r["per_rank"].as_object().unwrap().values().map(|v| v.as_i64().unwrap()).collect();
        assert_eq!(r["max_ns"].as_i64().unwrap(), *per.iter().max().unwrap());
        if per.len() == 2 && per[0] != per[1] {
            let slow = if per[0] > per[1] { 0 } else { 1 };
            assert_eq!(r["straggler_rank"], slow, "{}", r["path"]);
        }
    }
    assert_eq!(seen, want.len());
    let summary = std::fs::read_to_string(run.join("stakeholder_summary.md")).unwrap();
    assert!(summary.contains("## Ranks"), "{summary}");
}

/// One process: no ranks.json.
#[test]
fn a_one_process_capture_has_no_ranks_report() {
    let root = tempfile::tempdir().unwrap();
    let Some(db) = corpus_copy!("real/memfusion/report1.sqlite", root.path()) else { return };
    let run = root.path().join("run");
    llmperf().args(["import", "nsys"]).arg(&db).arg("-o").arg(&run).assert().success();
    assert!(!run.join("ranks.json").exists());
    assert!(run.join("nsys/regions.json").is_file());
}

/// The launcher outside the profiler, as srun/mpirun/torchrun run it: each
/// rank a `llmperf profile --rank-from-env` of its own under the real nsys
/// (one after another: two nsys sessions at once hang here). Ranks 0 and 1
/// run, rank 2's command fails with status 3, rank 3 never starts, and a
/// second rank 0 of the job is refused. `merge` keeps every rank's data,
/// reports rank 2's failure with its exit status and rank 3 as missing, and
/// gives each region's time per rank as the rank's own regions.json has it.
#[test]
fn ranks_under_a_launcher_write_apart_and_merge_with_failures_reported() {
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let rank = |r: &str, args: &[&str]| {
        let mut cmd = llmperf();
        for v in ["RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID"] {
            cmd.env_remove(v);
        }
        cmd.env("RANK", r).env("WORLD_SIZE", "4").env("TORCHELASTIC_RUN_ID", "job-7");
        cmd.args(["profile", "--rank-from-env", "--no-ncu", "-o"]).arg(root.path()).args(NSYS_HANG).args(args);
        cmd.timeout(std::time::Duration::from_secs(600)).assert()
    };
    for r in ["0", "1"] {
        rank(r, &["--model", "nvtx_regions", "infer.iters=5"]).success();
    }
    rank("2", &["--", "sh", "-c", "exit 3"]).failure();
    let again = rank("0", &["--model", "nvtx_regions"]).code(2);
    let stderr = String::from_utf8_lossy(&again.get_output().stderr).into_owned();
    assert!(stderr.contains("rank 0 of job job-7 already has a run directory") && stderr.contains("hint:"), "{stderr}");
    let job = root.path().join("job-7");
    for r in 0..3 {
        let id = json(&job.join(format!("ranks/{r}/rank.json")));
        assert_eq!(
            (id["rank"].as_u64(), id["rank_from"].as_str(), id["world_size"].as_u64()),
            (Some(r), Some("RANK"), Some(4))
        );
        assert_eq!(id["job_from"], "TORCHELASTIC_RUN_ID");
    }
    llmperf().arg("merge").arg(&job).assert().success();
    let ranks = json(&job.join("ranks.json"));
    assert_eq!(ranks["rank_source"], "run_directory");
    let listed: Vec<u64> = ranks["ranks"].as_array().unwrap().iter().map(|r| r["rank"].as_u64().unwrap()).collect();
    assert_eq!(listed, [0, 1, 2]);
    let failed = &ranks["ranks"][2];
    assert_eq!(failed["status"], "failed");
    assert!(failed["failure"].as_str().unwrap().contains("exit status 3"), "{failed}");
    let missing = ranks["missing"].as_array().unwrap();
    assert_eq!(missing.len(), 1);
    assert_eq!(missing[0]["rank"], 3);
    for r in [0u64, 1] {
        let own = json(&job.join(format!("ranks/{r}/nsys/regions.json")));
        let mut seen = 0;
        for region in own["regions"].as_array().unwrap() {
            let merged = ranks["regions"].as_array().unwrap().iter().find(|x| x["path"] == region["path"]).unwrap();
            assert_eq!(merged["per_rank"][r.to_string()], region["inclusive_ns"], "{}", region["path"]);
            seen += 1;
        }
        assert!(seen >= 3, "A, A::A1 and B on rank {r}");
    }
    let md = std::fs::read_to_string(job.join("ranks.md")).unwrap();
    assert!(md.contains("| 3 | – | missing: no run directory"), "{md}");
    // ranks.html: the merged job's heat map, every cell as ranks.json has it.
    let html = std::fs::read_to_string(job.join("ranks.html")).unwrap();
    let cell = regex::Regex::new(r#"data-region="([^"]*)" data-rank="(\d+)" data-ns="(\d+)""#).unwrap();
    let mut cells = 0;
    for c in cell.captures_iter(&html) {
        let region = ranks["regions"].as_array().unwrap().iter().find(|r| r["path"] == c[1]).unwrap();
        assert_eq!(region["per_rank"][&c[2]].as_i64().unwrap(), c[3].parse::<i64>().unwrap(), "{}", &c[1]);
        cells += 1;
    }
    assert!(cells >= 6, "A, A::A1 and B on ranks 0 and 1: {cells} cells");

    // A rank directory of another job, a disagreeing world size, a rank in
    // another rank's directory: refused by name, never merged without a word.
    let edited = |name: &str, edit: &dyn Fn(&mut serde_json::Value), to: Option<&str>| {
        let copy = root.path().join(name);
        crate::common::copy_dir(&job, &copy);
        let file = copy.join("ranks/1/rank.json");
        let mut id = json(&file);
        edit(&mut id);
        std::fs::write(&file, serde_json::to_string_pretty(&id).unwrap()).unwrap();
        if let Some(to) = to {
            std::fs::rename(copy.join("ranks/1"), copy.join(format!("ranks/{to}"))).unwrap();
        }
        let a = llmperf().arg("merge").arg(&copy).assert().code(2);
        String::from_utf8_lossy(&a.get_output().stderr).into_owned()
    };
    let e = edited("other-job", &|id| id["job"] = "job-8".into(), None);
    assert!(e.contains("the ranks disagree on their job: rank 0") && e.contains("says \"job-8\""), "{e}");
    let e = edited("other-world", &|id| id["world_size"] = 8.into(), None);
    assert!(e.contains("the ranks disagree on their world size") && e.contains("says 8"), "{e}");
    let e = edited("moved", &|_| {}, Some("5"));
    assert!(e.contains("holds rank 1's rank.json, not rank 5's") && e.contains("hint:"), "{e}");

    // The same captures as per-rank files (`nsys -o report.%q{RANK}`), imported into one job.
    let files = root.path().join("files");
    std::fs::create_dir(&files).unwrap();
    for r in 0..2 {
        std::fs::copy(job.join(format!("ranks/{r}/nsys/report.sqlite")), files.join(format!("report.{r}.sqlite")))
            .unwrap();
    }
    let imported = root.path().join("imported");
    let (f0, f1) = (files.join("report.0.sqlite"), files.join("report.1.sqlite"));
    llmperf().args(["import", "nsys"]).arg(&f1).arg(&f0).arg("-o").arg(&imported).assert().success();
    let again = json(&imported.join("ranks.json"));
    assert_eq!(again["rank_source"], "run_directory");
    assert_eq!(json(&imported.join("ranks/1/rank.json"))["rank_from"], "file name (report.1.sqlite)");
    for region in ranks["regions"].as_array().unwrap() {
        let other = again["regions"].as_array().unwrap().iter().find(|x| x["path"] == region["path"]).unwrap();
        for r in ["0", "1"] {
            assert_eq!(other["per_rank"][r], region["per_rank"][r], "{} on rank {r}", region["path"]);
        }
    }
    let dup = files.join("copy.1.sqlite");
    std::fs::copy(&f1, &dup).unwrap();
    let e =
        llmperf().args(["import", "nsys"]).arg(&f1).arg(&dup).arg("-o").arg(root.path().join("dup")).assert().code(2);
    let e = String::from_utf8_lossy(&e.get_output().stderr).into_owned();
    assert!(e.contains("both name rank 1") && e.contains("hint:"), "{e}");
}

/// Without a rank variable, or without a job id, `--rank-from-env` stops
/// before anything runs, with a hint.
#[test]
fn rank_from_env_without_a_launcher_is_refused_with_a_hint() {
    let root = tempfile::tempdir().unwrap();
    let mut cmd = llmperf();
    for v in ["RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"] {
        cmd.env_remove(v);
    }
    let out = cmd.args(["profile", "--rank-from-env", "-o"]).arg(root.path()).assert().code(2);
    let stderr = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(stderr.contains("none of RANK, OMPI_COMM_WORLD_RANK, PMI_RANK, SLURM_PROCID is set"), "{stderr}");
    assert!(stderr.contains("hint: run llmperf under torchrun, mpirun or srun"), "{stderr}");
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0, "nothing written");
}

/// The profiler outside the launcher, on this machine: one nsys around
/// torchrun (the project's venv, 2 processes on CPU) running the built-in
/// workload in each. The capture holds both processes: ranks.json gives each
/// its rank (no kernels without a GPU: by process id, and it says so), and
/// each region its time per rank, equal to that process's regions.json entries.
#[test]
fn one_nsys_around_torchrun_reports_each_process_as_a_rank() {
    let torchrun = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/torchrun");
    if !torchrun.is_file() {
        skipped(&this_test!(), ".venv/bin/torchrun not found (make setup installs it)");
        return;
    }
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let llmperf_bin = env!("CARGO_BIN_EXE_llmperf");
    let out = llmperf()
        .args(["profile", "--no-ncu", "-o"])
        .arg(root.path())
        .args(NSYS_HANG)
        .arg("--")
        .arg(&torchrun)
        .args(["--standalone", "--nproc-per-node", "2", "--no-python"])
        .arg(llmperf_bin)
        .args(["-q", "workload", "--model", "nvtx_regions", "infer.iters=5", "-o"])
        .arg(root.path().join("workloads"))
        .timeout(std::time::Duration::from_secs(600))
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let run = run_dir(&out);
    let ranks = json(&run.join("ranks.json"));
    assert_eq!(ranks["rank_source"], "process");
    let listed = ranks["ranks"].as_array().unwrap();
    assert_eq!(listed.len(), 2, "{ranks}");
    let regions = json(&run.join("nsys/regions.json"));
    let pids: Vec<i64> = listed.iter().map(|r| r["process_ids"][0].as_i64().unwrap()).collect();
    assert!(pids[0] < pids[1], "ranks in process-id order");
    for name in ["A", "A::A1", "B"] {
        let merged = ranks["regions"].as_array().unwrap().iter().find(|r| r["path"] == name).unwrap();
        for (rank, pid) in pids.iter().enumerate() {
            let own: Vec<&serde_json::Value> = regions["regions"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|r| r["path"] == name && r["process_id"] == *pid)
                .collect();
            assert_eq!(own.len(), 1, "{name} once in process {pid}");
            assert_eq!(own[0]["instances"], 5, "{name}: infer.iters=5 in process {pid}");
            assert_eq!(merged["per_rank"][rank.to_string()], own[0]["inclusive_ns"], "{name} on rank {rank}");
        }
    }
}

/// report.html's ranks × regions heat map: every cell is a region's time on
/// a rank as ranks.json has it; report.md links ranks.json.
#[test]
fn the_heat_map_cells_equal_ranks_json() {
    let root = tempfile::tempdir().unwrap();
    let Some(db) = corpus_copy!("real/nsys-ai/mfu_2gpu_before.sqlite", root.path()) else { return };
    let run = root.path().join("run");
    llmperf().args(["import", "nsys"]).arg(&db).arg("-o").arg(&run).assert().success();
    let ranks = json(&run.join("ranks.json"));
    let html = std::fs::read_to_string(run.join("report.html")).unwrap();
    let cell = regex::Regex::new(r#"data-region="([^"]*)" data-rank="(\d+)" data-ns="(\d+)""#).unwrap();
    let unescape = |s: &str| s.replace("&lt;", "<").replace("&gt;", ">").replace("&quot;", "\"").replace("&amp;", "&");
    let mut cells = 0;
    for c in cell.captures_iter(&html) {
        let shown = unescape(&c[1]);
        let region = ranks["regions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| {
                let names: Vec<&str> =
                    r["path_names"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
                let sep = if names.iter().any(|n| n.contains("::")) { " › " } else { "::" };
                names.join(sep) == shown
            })
            .unwrap_or_else(|| panic!("{shown} is a region of ranks.json"));
        assert_eq!(region["per_rank"][&c[2]].as_i64().unwrap(), c[3].parse::<i64>().unwrap(), "{shown} rank {}", &c[2]);
        cells += 1;
    }
    assert_eq!(cells, 40, "the 20 regions with the most time, on both ranks");
    let index = std::fs::read_to_string(run.join("report.md")).unwrap();
    assert!(index.contains("- [ranks.json](ranks.json): ranks side by side"), "{index}");
}
