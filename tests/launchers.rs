//! `llmperf profile --launcher torchrun|mpirun|srun`, and `pipeline.nsys.ranks`
//! / `pipeline.ncu.ranks`, with the real launchers of this machine: the
//! project's torchrun (venv), Open MPI's mpirun and a one-node Slurm cluster
//! started by scripts/slurm-local.sh, around the real nsys and ncu. Every
//! number is checked against the capture's own rows (SQL per process) or
//! against what each rank's own files say.
use crate::common::*;
use std::path::{Path, PathBuf};

const RANK_VARS: [&str; 12] = [
    "RANK",
    "WORLD_SIZE",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "PMI_RANK",
    "PMI_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_JOB_ID",
    "TORCHELASTIC_RUN_ID",
    "PMIX_NAMESPACE",
    "LLMPERF_RANK",
];

/// llmperf with no rank of an outer job in its environment, and the
/// project's venv first on PATH (its torchrun).
fn clean() -> assert_cmd::Command {
    let mut cmd = llmperf();
    for v in RANK_VARS {
        cmd.env_remove(v);
    }
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin");
    let path = std::env::var_os("PATH").unwrap_or_default();
    let mut dirs = vec![venv];
    dirs.extend(std::env::split_paths(&path));
    cmd.env("PATH", std::env::join_paths(dirs).unwrap());
    cmd.timeout(std::time::Duration::from_secs(600));
    cmd
}

fn have(program: &str, test: &str) -> bool {
    let venv = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin").join(program);
    let found = venv.is_file()
        || std::env::var_os("PATH").is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()));
    if !found {
        skipped(test, &format!("{program} not found (scripts/setup.sh installs it)"));
    }
    found
}

/// (process id, instances, summed duration) of the push/pop range `name` in
/// an nsys export, per process: nsys's own rows.
fn sql_per_process(db: &Path, name: &str) -> Vec<(i64, i64, i64)> {
    let conn = rusqlite::Connection::open(db).unwrap();
    let mut stmt = conn
        .prepare(
            "SELECT (globalTid >> 24) & 16777215, count(*), sum(\"end\" - start) FROM NVTX_EVENTS \
             WHERE eventType = 59 AND text = ?1 GROUP BY 1 ORDER BY 1",
        )
        .unwrap();
    stmt.query_map([name], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?))).unwrap().map(Result::unwrap).collect()
}

fn ranks_of(ranks: &serde_json::Value) -> Vec<(u64, i64)> {
    ranks["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            assert_eq!(r["process_ids"].as_array().unwrap().len(), 1, "{r}");
            (r["rank"].as_u64().unwrap(), r["process_ids"][0].as_i64().unwrap())
        })
        .collect()
}

/// The shim's records: (rank, process id) from each `launcher/ranks/<pid>.json`.
fn recorded(run: &Path, var: &str) -> Vec<(u64, i64)> {
    let mut v: Vec<(u64, i64)> = std::fs::read_dir(run.join("launcher/ranks"))
        .unwrap()
        .map(|e| {
            let r = json(&e.unwrap().path());
            assert_eq!((r["rank_from"].as_str(), r["world_size"].as_u64()), (Some(var), Some(2)), "{r}");
            (r["rank"].as_u64().unwrap(), r["process_id"].as_i64().unwrap())
        })
        .collect();
    v.sort();
    v
}

/// (rank, reason) of ranks.json's `missing` or `not_profiled`.
fn listed(ranks: &serde_json::Value, key: &str) -> Vec<(u64, String)> {
    ranks[key]
        .as_array()
        .unwrap_or_else(|| panic!("no {key} in {ranks}"))
        .iter()
        .map(|r| (r["rank"].as_u64().unwrap(), r["reason"].as_str().unwrap().to_string()))
        .collect()
}

/// From an ncu log: the processes ncu attached to, and the ranges it matched
/// (each logged as held no CUDA work on this GPU-less host).
fn ncu_attached_and_matched(log: &Path) -> (usize, usize) {
    let text = std::fs::read_to_string(log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    let matched = text.matches("Skipping invalid capture range (RecordStatusEmpty)").count();
    (text.matches("==PROF== Connected to process").count(), matched)
}

fn iters(timings: &Path) -> u64 {
    json(timings)["iters"].as_u64().unwrap_or_else(|| panic!("{}: no iters", timings.display()))
}

/// One nsys around the launcher, 2 ranks of the built-in workload on CPU:
/// each process of the capture is the rank its launcher's variable gave it
/// (the shim recorded it under the same process id), and each rank's region
/// times and instance counts equal nsys's own rows for that process.
fn one_nsys_around(launcher: &str, var: &str, test: &str) {
    if !have(launcher, test) {
        return;
    }
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let out = clean()
        // mpirun users type `-np 2`; torchrun's `--nproc`.
        .args(["profile", "--launcher", launcher, if launcher == "mpirun" { "-np" } else { "--nproc" }, "2"])
        .args(["--no-ncu", "--model", "nvtx_regions"])
        .args(if launcher == "mpirun" { &["--launcher-arg=--oversubscribe"][..] } else { &[] })
        .args(["infer.iters=5", "-o"])
        .arg(root.path())
        .args(NSYS_HANG)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let run = run_dir(&out);
    let valid = llmperf().arg("validate").arg(&run).assert().success().get_output().stdout.clone();
    assert!(String::from_utf8_lossy(&valid).contains("(launched-rank.schema.json)"));
    let ranks = json(&run.join("ranks.json"));
    assert_eq!(ranks["rank_source"], format!("environment ({var})"));
    let by_rank = ranks_of(&ranks);
    // Each rank's process is one its launcher's rank recorded (a capture tried
    // again after an nsys hang leaves the first try's records beside).
    let recorded = recorded(&run, var);
    assert!(by_rank.iter().all(|r| recorded.contains(r)), "{by_rank:?} recorded as {recorded:?}");
    assert_eq!(by_rank.iter().map(|r| r.0).collect::<Vec<_>>(), [0, 1]);
    // regions.md heads each process's table with the rank its launcher gave it.
    let md = std::fs::read_to_string(run.join("regions.md")).unwrap();
    for (rank, pid) in &by_rank {
        assert!(md.contains(&format!("## rank {rank}, process {pid}\n")), "rank {rank} pid {pid}: {md}");
    }
    // nsys/regions.json names each region's rank beside its process.
    let regions = json(&run.join("nsys/regions.json"));
    for r in regions["regions"].as_array().unwrap() {
        let pid = r["process_id"].as_i64().unwrap();
        let rank = by_rank.iter().find(|x| x.1 == pid).map(|x| x.0);
        assert_eq!(r["rank"].as_u64(), rank, "{r}");
    }
    let db = run.join("nsys/report.sqlite");
    for name in ["A", "B"] {
        let sql = sql_per_process(&db, name);
        let merged = ranks["regions"].as_array().unwrap().iter().find(|r| r["path"] == name).unwrap();
        let got: Vec<(i64, i64, i64)> = by_rank
            .iter()
            .map(|&(rank, pid)| {
                let own = json(&run.join("nsys/regions.json"))["regions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|r| r["path"] == name && r["process_id"] == pid)
                    .cloned()
                    .unwrap();
                let ns = merged["per_rank"][rank.to_string()].as_i64().unwrap();
                assert_eq!(ns, own["inclusive_ns"].as_i64().unwrap(), "{name} on rank {rank}");
                (pid, own["instances"].as_i64().unwrap(), ns)
            })
            .collect();
        assert_eq!(got, sql, "{name}: per rank as nsys's rows per process");
        assert!(got.iter().all(|r| r.1 == 5), "infer.iters=5 on each rank: {got:?}");
    }
    // Each rank wrote its own timings: rank 0 the run's, rank 1 beside it.
    assert_eq!(iters(&run.join("workload/timings.json")), 5);
    assert_eq!(iters(&run.join("workload/timings.rank1.json")), 5);
    for page in ["stakeholder_summary.md", "report.md"] {
        let md = std::fs::read_to_string(run.join(page)).unwrap();
        assert!(md.contains("## Ranks"), "{page}: {md}");
        assert!(md.contains(&format!("each process's rank is the {var} its launcher gave it")), "{page}: {md}");
    }
}

#[test]
fn one_nsys_around_torchrun_gives_each_process_the_rank_torchrun_set() {
    one_nsys_around("torchrun", "RANK", &this_test!());
}

#[test]
fn one_nsys_around_mpirun_gives_each_process_the_rank_open_mpi_set() {
    one_nsys_around("mpirun", "OMPI_COMM_WORLD_RANK", &this_test!());
}

/// Rank 1 of two exits with code 3 (rank 0 with 0): the error names rank 1,
/// its process as its launcher's shim recorded it, and how it ended, not the
/// launcher's last banner line (`-----…` for mpirun, `=====…` for torchrun).
fn a_failing_rank_is_named(launcher: &str, var: &str, test: &str) {
    if !have(launcher, test) {
        return;
    }
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    // nsys 2022.4 now and then fails on its own before the launcher starts
    // (tests/signals.rs): no rank ran, so that attempt says nothing of
    // llmperf; the last attempt is asserted whatever its reason.
    let (out, run) = (1..=3)
        .map(|attempt| {
            let out = clean()
                .args(["profile", "--launcher", launcher, "--nproc", "2", "--no-ncu"])
                .args(if launcher == "mpirun" { &["--launcher-arg=--oversubscribe"][..] } else { &[] })
                .arg("-o")
                .arg(root.path().join(attempt.to_string()))
                .args(NSYS_HANG)
                .args(["--", "sh", "-c", &format!("exit $(( ${var} * 3 ))")])
                .assert()
                .code(5)
                .get_output()
                .clone();
            let run = run_dir(&out.stdout);
            (attempt, out, run)
        })
        .find(|(attempt, _, run)| {
            let nsys = stage(&json(&run.join("manifest.json")), "nsys").clone();
            let own = nsys["reason"].as_str().unwrap_or_default().starts_with("nsys itself failed");
            *attempt == 3 || run.join("launcher/ranks").is_dir() || !own
        })
        .map(|(_, out, run)| (out, run))
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    let error = stderr.lines().find(|l| l.starts_with("error: ")).unwrap_or_default();
    // The process is one the shim recorded for rank 1. An nsys hang retried leaves the first
    // try's records beside: torchrun names the process itself; for mpirun llmperf names
    // none rather than guess.
    let nsys = stage(&json(&run.join("manifest.json")), "nsys").clone();
    assert!(run.join("launcher/ranks").is_dir(), "no rank ran: {nsys:#}\n{stderr}");
    let rank1: Vec<i64> = recorded(&run, var).into_iter().filter(|r| r.0 == 1).map(|r| r.1).collect();
    let named = regex::Regex::new(r"^error: rank 1 \((process (\d+) )?on ").unwrap().captures(error).expect(error);
    match named.get(2).map(|p| p.as_str().parse::<i64>().unwrap()) {
        Some(pid) => assert!(rank1.contains(&pid), "{pid} not in {rank1:?}: {stderr}"),
        None => assert!(launcher == "mpirun" && rank1.len() > 1, "{stderr}"),
    }
    assert!(error.contains(&format!(") exited with code 3 under {launcher}, the first rank to fail; ")), "{stderr}");
    assert!(!error.contains("---") && !error.contains("==="), "{stderr}");
}

#[test]
fn a_failing_rank_under_mpirun_is_named() {
    a_failing_rank_is_named("mpirun", "OMPI_COMM_WORLD_RANK", &this_test!());
}

#[test]
fn a_failing_rank_under_torchrun_is_named() {
    a_failing_rank_is_named("torchrun", "RANK", &this_test!());
}

/// ncu on rank 0 only (the default `pipeline.ncu.ranks: [0]`) goes inside
/// the launcher: ncu attaches to one process and matches rank 0's 5 ranges
/// of B, not 10, while rank 1 runs the workload plainly in the same launch.
#[test]
fn ncu_on_rank_zero_inside_torchrun_matches_that_ranks_ranges_only() {
    if !have("torchrun", &this_test!()) {
        return;
    }
    // One profiler at a time in this file: an ncu beside an nsys is not what these tests ask about.
    let _nsys = nsys_lock();
    let (_root, out) = past_ncu_hangs(&this_test!(), |root| {
        clean()
            .args(["profile", "--launcher", "torchrun", "-n", "2", "--no-nsys", "--replay-mode", "range"])
            .args(["--nvtx-include", "B", "--model", "nvtx_regions", "infer.iters=5", NCU_PASS_DEADLINE, "-o"])
            .arg(root)
            .output()
            .unwrap()
    });
    let run = run_dir(&out.stdout);
    assert_eq!(ncu_attached_and_matched(&run.join("ncu/p0.log")), (1, 5), "one process, its 5 ranges of B");
    let cmd = std::fs::read_to_string(run.join("ncu/cmd.txt")).unwrap();
    assert!(cmd.starts_with("LC_ALL=C torchrun --standalone --nproc-per-node 2 --no-python"), "{cmd}");
    assert!(cmd.contains("launch-rank --wrap-ranks 0 --wrapper-len"), "{cmd}");
    assert_eq!(iters(&run.join("workload/timings.ncu.json")), 5);
    assert_eq!(iters(&run.join("workload/timings.ncu.rank1.json")), 5, "rank 1 ran, without ncu");
}

/// Settings that would leave the ranks out of step are refused before
/// anything runs, with a hint.
#[test]
fn ranks_that_cannot_stay_in_step_are_refused_before_anything_runs() {
    let root = tempfile::tempdir().unwrap();
    // llmperf's words after `profile`: the usage error (exit 2) it prints.
    let refused = |env: &[(&str, &str)], args: &[&str]| {
        let mut cmd = clean();
        cmd.envs(env.iter().copied()).arg("profile").args(args).arg("-o").arg(root.path());
        String::from_utf8(cmd.assert().code(2).get_output().stderr.clone()).unwrap()
    };
    let rank1 = [("RANK", "1"), ("WORLD_SIZE", "2")];
    let e = refused(&rank1, &["--rank-from-env", "--run-id", "j", "--replay-mode", "application"]);
    assert!(e.contains("pipeline.ncu.ranks=[0] profiles some ranks") && e.contains("replay mode application"), "{e}");
    assert!(e.contains("hint: use --replay-mode kernel or --replay-mode range"), "{e}");
    let e = refused(&rank1, &["--rank-from-env", "--run-id", "j", "--replay-mode", "auto"]);
    assert!(e.contains("replay mode auto"), "{e}");
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0, "nothing written");
    if have("mpirun", &this_test!()) {
        let e = refused(&[], &["--launcher", "mpirun", "-n", "2", "pipeline.nsys.ranks=[0]"]);
        assert!(e.contains("with --launcher mpirun one nsys wraps the launcher") && e.contains("hint:"), "{e}");
        let e =
            refused(&[], &["--launcher", "mpirun", "-n", "2", "--replay-mode", "kernel", "pipeline.ncu.ranks=[0,1]"]);
        assert!(e.contains("ncu runs on one rank (below --nproc 2) or on all"), "{e}");
    }
    let e = refused(&[], &["--launcher", "mpirun"]);
    assert!(e.contains("--nproc"), "--launcher needs --nproc: {e}");
}

/// The same under mpirun with the launcher outside: `mpirun -np 2 llmperf
/// profile --rank-from-env` with ncu (range replay) on rank 1 only. Rank 0
/// runs the workload once without ncu (its timings say so, and its stage
/// says why); ncu on rank 1 attached to one process and matched that rank's
/// 5 ranges. (nsys inside an Open MPI rank hangs on this machine every time,
/// so this test profiles with ncu.)
#[test]
fn under_mpirun_each_rank_profiles_itself_and_unprofiled_ranks_still_run() {
    if !have("mpirun", &this_test!()) {
        return;
    }
    // One profiler at a time in this file: an ncu beside an nsys is not what these tests ask about.
    let _nsys = nsys_lock();
    let llmperf_bin = env!("CARGO_BIN_EXE_llmperf");
    let (root, out) = past_ncu_hangs(&this_test!(), |root| {
        let mut mpirun = std::process::Command::new("mpirun");
        for v in RANK_VARS {
            mpirun.env_remove(v);
        }
        mpirun.args(["-np", "2", "--oversubscribe", "--allow-run-as-root", llmperf_bin, "profile", "--rank-from-env"]);
        mpirun.args(["--run-id", "mpi-job", "--no-nsys", "--replay-mode", "range", "--nvtx-include", "B"]);
        mpirun.args(["--model", "nvtx_regions", "infer.iters=5", "pipeline.ncu.ranks=[1]", NCU_PASS_DEADLINE, "-o"]);
        mpirun.arg(root).output().unwrap()
    });
    assert!(out.status.success(), "{}\n{}", out.status, String::from_utf8_lossy(&out.stderr));
    let job = root.path().join("mpi-job");
    let r0 = json(&job.join("ranks/0/rank.json"));
    assert_eq!((r0["rank_from"].as_str(), r0["profiled"].as_array().unwrap().len()), (Some("OMPI_COMM_WORLD_RANK"), 0));
    assert_eq!(json(&job.join("ranks/1/rank.json"))["profiled"], serde_json::json!(["ncu"]));
    let plain = stage(&json(&job.join("ranks/0/manifest.json")), "plain:ncu").clone();
    assert_eq!(plain["status"], "ok", "{plain}");
    assert!(plain["reason"].as_str().unwrap().contains("rank 0 is not in pipeline.ncu.ranks"), "{plain}");
    assert_eq!(iters(&job.join("ranks/0/workload/timings.ncu.json")), 5, "rank 0 ran without ncu");
    assert!(!job.join("ranks/0/ncu").exists());
    assert_eq!(ncu_attached_and_matched(&job.join("ranks/1/ncu/p0.log")), (1, 5), "one process, its 5 ranges of B");
    llmperf().arg("merge").arg(&job).assert().success();
    let ranks = json(&job.join("ranks.json"));
    let plain = listed(&ranks, "not_profiled");
    assert_eq!(plain.len(), 2, "{ranks}");
    assert!(plain[0].1.contains("nsys disabled") && !plain[0].1.contains("profiled by"), "{plain:?}");
    assert!(plain[1].1.contains("profiled by ncu"), "{plain:?}");
    assert!(ranks["missing"].as_array().unwrap().is_empty(), "{ranks}");
}

/// A one-node Slurm cluster for one test, stopped (and its logs kept) after.
struct Slurm {
    dir: PathBuf,
    conf: PathBuf,
}

impl Slurm {
    fn start(test: &str) -> Option<Slurm> {
        if !have("srun", test) {
            return None;
        }
        if unsafe { libc::geteuid() } != 0 {
            skipped(test, "a local slurmd needs root (CI runs as root)");
            return None;
        }
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tmp/slurm-local");
        let _ = std::fs::remove_dir_all(&dir);
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/slurm-local.sh");
        // A port of this test's own: another cluster (or a stale one) on the default is no matter.
        let port = 20000 + std::process::id() % 20000;
        let out = std::process::Command::new("bash")
            .arg(&script)
            .arg("start")
            .arg(&dir)
            .env("SLURM_LOCAL_PORT", port.to_string())
            .output()
            .unwrap();
        assert!(out.status.success(), "slurm-local.sh start: {}", String::from_utf8_lossy(&out.stderr));
        Some(Slurm { conf: dir.join("slurm.conf"), dir })
    }
}

impl Drop for Slurm {
    fn drop(&mut self) {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/slurm-local.sh");
        let _ = std::process::Command::new("bash").arg(&script).arg("stop").arg(&self.dir).status();
    }
}

/// `--launcher srun -n 2` on a one-node Slurm cluster: both steps in one
/// command. Each rank writes ranks/<rank>/ of a new job directory (nsys on
/// rank 0, rank 1 plain), and the merge's numbers are rank 0's capture's own
/// rows. Then two jobs started at once (every rank plain, so no two nsys run
/// together) get two job directories and four rank directories.
#[test]
fn srun_runs_every_rank_then_merges_and_two_jobs_never_collide() {
    let Some(slurm) = Slurm::start(&this_test!()) else { return };
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let srun = |extra: &[&str]| {
        let mut cmd = clean();
        cmd.env("SLURM_CONF", &slurm.conf);
        cmd.args(["profile", "--launcher", "srun", "-n", "2", "--no-ncu", "--model", "nvtx_regions", "infer.iters=5"]);
        cmd.arg("-o").arg(root.path()).args(NSYS_HANG).args(extra);
        cmd
    };
    let out = srun(&["pipeline.nsys.ranks=[0]"]).assert().success().get_output().stdout.clone();
    let job = run_dir(&out);
    assert_eq!(job.parent().unwrap(), root.path());
    for r in [0u64, 1] {
        let id = json(&job.join(format!("ranks/{r}/rank.json")));
        assert_eq!((id["rank"].as_u64(), id["rank_from"].as_str()), (Some(r), Some("SLURM_PROCID")));
        assert_eq!(id["job"].as_str().unwrap(), job.file_name().unwrap().to_str().unwrap());
        assert_eq!(iters(&job.join(format!("ranks/{r}/workload/timings.json"))), 5, "rank {r} ran");
    }
    let ranks = json(&job.join("ranks.json"));
    assert_eq!(ranks["rank_source"], "run_directory");
    assert_eq!(ranks_of(&ranks).iter().map(|r| r.0).collect::<Vec<_>>(), [0]);
    assert_eq!(ranks["not_profiled"][0]["rank"], 1);
    let db = job.join("ranks/0/nsys/report.sqlite");
    for name in ["A", "B"] {
        let sql = sql_per_process(&db, name);
        let region = ranks["regions"].as_array().unwrap().iter().find(|r| r["path"] == name).unwrap();
        assert_eq!(sql.len(), 1, "{name}: one process in rank 0's capture");
        assert_eq!((sql[0].1, region["per_rank"]["0"].as_i64().unwrap()), (5, sql[0].2), "{name}");
    }
    let md = std::fs::read_to_string(job.join("ranks.md")).unwrap();
    assert!(md.contains("| 1 | – | not profiled: not in pipeline.nsys.ranks"), "{md}");
    // `llmperf report` of the job directory merges it again: the same bytes.
    let before = std::fs::read(job.join("ranks.json")).unwrap();
    std::fs::remove_file(job.join("ranks.json")).unwrap();
    llmperf().arg("report").arg(&job).assert().success();
    assert_eq!(std::fs::read(job.join("ranks.json")).unwrap(), before);

    // Two jobs at once, no nsys (pipeline.nsys.ranks=[]): apart, whole.
    let (a, b) = (srun(&["pipeline.nsys.ranks=[]"]), srun(&["pipeline.nsys.ranks=[]"]));
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(move || run_dir(&{ a }.assert().success().get_output().stdout));
        let b = s.spawn(move || run_dir(&{ b }.assert().success().get_output().stdout));
        (a.join().unwrap(), b.join().unwrap())
    });
    assert_ne!(a, b);
    for job in [&a, &b] {
        let ranks = json(&job.join("ranks.json"));
        let plain: Vec<u64> = listed(&ranks, "not_profiled").into_iter().map(|r| r.0).collect();
        assert_eq!(plain, [0, 1], "{}", job.display());
        for r in 0..2 {
            assert_eq!(iters(&job.join(format!("ranks/{r}/workload/timings.json"))), 5);
        }
    }
}

/// A rank of a job in kernel replay: NCCL's kernels are left out of ncu's
/// kernel filter, and this ncu accepts the filter (it refuses a bad regex
/// with exit 255 and "Invalid regex").
#[test]
fn a_ranks_kernel_replay_leaves_nccl_out_and_ncu_accepts_the_filter() {
    // One profiler at a time in this file: an ncu beside an nsys is not what these tests ask about.
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    // Rank 0 of 2 in kernel replay, as job `job`, with `extra` overrides.
    let rank0 = |job: &str, extra: &[&str]| {
        let out = clean()
            .env("RANK", "0")
            .env("WORLD_SIZE", "2")
            .args(["profile", "--rank-from-env", "--run-id", job, "--no-nsys", "--replay-mode", "kernel"])
            .args(["--model", "nvtx_regions", "infer.iters=2"])
            .args(extra)
            .arg("-o")
            .arg(root.path())
            .assert()
            .get_output()
            .stdout
            .clone();
        run_dir(&out)
    };
    let run = rank0("k", &[]);
    let plan = json(&run.join("ncu/plan.json"));
    assert_eq!(plan["kernel_filter"]["expression"], "regex:^(?!nccl)", "{plan}");
    let manifest = json(&run.join("manifest.json"));
    let ncu = stage(&manifest, "ncu:p0");
    let argv: Vec<&str> = ncu["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    let at = argv.iter().position(|a| *a == "--kernel-name").expect("a kernel filter");
    assert_eq!(argv[at + 1], "regex:^(?!nccl)");
    assert_eq!(ncu["exit"]["code"], 0, "{ncu}");
    let log = std::fs::read_to_string(run.join("ncu/p0.log")).unwrap();
    assert!(!log.contains("Invalid regex"), "{log}");
    // With pipeline.ncu.comm_kernels=true, no filter.
    let run = rank0("k2", &["pipeline.ncu.comm_kernels=true"]);
    assert!(json(&run.join("ncu/plan.json"))["kernel_filter"].is_null());
}

/// `--launcher torchrun -- script.py`: torchrun runs a script with its own
/// Python, so does llmperf (the script need not be executable). Each rank
/// writes its rank and its interpreter; ranks.json lists both ranks as
/// missing, by process id, since the script marks no NVTX range.
#[test]
fn a_script_under_torchrun_runs_with_torchruns_python_on_every_rank() {
    if !have("torchrun", &this_test!()) {
        return;
    }
    let _nsys = nsys_lock();
    let root = tempfile::tempdir().unwrap();
    let script = root.path().join("infer.py");
    std::fs::write(
        &script,
        "import os, sys\nopen(os.path.join(sys.argv[1], 'rank-' + os.environ['RANK']), 'w').write(sys.executable)\n",
    )
    .unwrap();
    let out = clean()
        .args(["profile", "--launcher", "torchrun", "-n", "2", "--no-ncu", "-o"])
        .arg(root.path().join("runs"))
        .args(NSYS_HANG)
        .arg("--")
        .arg(&script)
        .arg(root.path())
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let venv_python = Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    for r in 0..2 {
        let exe = std::fs::read_to_string(root.path().join(format!("rank-{r}"))).unwrap();
        assert_eq!(Path::new(&exe), venv_python, "rank {r} ran with torchrun's Python");
    }
    let run = run_dir(&out);
    let ranks = json(&run.join("ranks.json"));
    let missing = listed(&ranks, "missing");
    assert_eq!(missing.iter().map(|m| m.0).collect::<Vec<_>>(), [0, 1], "{ranks}");
    for (rank, pid) in recorded(&run, "RANK") {
        let why = &missing[rank as usize].1;
        assert!(why.contains("left no NVTX range") && why.contains(&pid.to_string()), "{why}");
    }
}

/// An srun that fails before any rank runs (a stand-in that exits 1): the
/// hint points at srun's own output, not at a JOB/ranks.md no merge wrote.
#[test]
fn a_failed_srun_without_ranks_points_at_srun_not_at_a_missing_ranks_md() {
    let root = tempfile::tempdir().unwrap();
    let bin = root.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    write_executable(&bin.join("srun"), "#!/bin/sh\necho 'srun: error: no allocation' >&2\nexit 1\n");
    let path = std::env::join_paths(
        std::iter::once(bin.clone()).chain(std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())),
    )
    .unwrap();
    let out = clean()
        .env("PATH", path)
        .args(["profile", "--launcher", "srun", "-n", "2", "--no-ncu", "-o"])
        .arg(root.path().join("runs"))
        .args(["--", "true"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(5), "{stderr}");
    assert!(stderr.contains("error: srun exit code 1"), "{stderr}");
    assert!(stderr.contains("hint: no rank wrote its run directory: see srun's messages above"), "{stderr}");
    assert!(!stderr.contains("ranks.md"), "{stderr}");
}
