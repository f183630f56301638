//! Issue 43's list 7: outcomes that were right with the wrong words or the
//! wrong record. Each case is a copy of a real corpus file (or a run made
//! from one), changed in the test; each assertion names what was wrong.
use std::path::Path;
use std::time::Duration;

use crate::common::*;

fn run(cmd: &mut assert_cmd::Command) -> (Option<i32>, String) {
    let out = cmd.timeout(Duration::from_secs(120)).output().unwrap();
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A corpus copy made writable (the corpus is read-only), for SQL edits.
fn writable(file: &Path) {
    let mut perms = std::fs::metadata(file).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(file, perms).unwrap();
}

fn gzip(from: &Path, to: &Path) {
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("gzip -c '{}' > '{}'", from.display(), to.display()))
        .status()
        .unwrap();
    assert!(status.success());
}

/// A gzip'd CSV or a SQLite given to `import ncu`, a gzip'd SQLite or an
/// .ncu-rep given to `import nsys`: each named for what it is, with the
/// command to use; an extension-less SQLite export is simply read.
#[test]
fn a_file_of_the_wrong_kind_is_named_for_what_it_is() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some(db) = corpus_copy(&test, "real/memfusion/report1.sqlite", root.path()) else { return };
    let Some(csv) = corpus_copy(&test, "real/derived/nsight-training/manual_nvtx.ncu2022.3.details.csv", root.path())
    else {
        return;
    };
    let Some(rep) = corpus_copy(&test, "real/nsight-training/manual_nvtx.ncu-rep", root.path()) else { return };
    let (csv_gz, db_gz) = (root.path().join("details.csv.gz"), root.path().join("report1.sqlite.gz"));
    gzip(&csv, &csv_gz);
    gzip(&db, &db_gz);
    let no_ncu = "pipeline.ncu.executable=/nonexistent/ncu";
    let no_nsys = "pipeline.nsys.executable=/nonexistent/nsys";
    for (importer, file, says) in [
        ("ncu", &csv_gz, "is a gzip-compressed file, which `llmperf import ncu` does not read"),
        ("ncu", &db, "is a SQLite database (an nsys export?), which `llmperf import ncu` does not read"),
        ("nsys", &db_gz, "is a gzip-compressed file, which `llmperf import nsys` does not read"),
        ("nsys", &rep, "is an Nsight Compute report, which `llmperf import nsys` does not read"),
    ] {
        let out = root.path().join(format!("run-{importer}-{}", file.file_name().unwrap().to_string_lossy()));
        let (code, err) =
            run(llmperf().args(["import", importer]).arg(file).arg("-o").arg(&out).args([no_ncu, no_nsys]));
        assert_eq!(code, Some(6), "{err}");
        assert!(err.contains(says) && err.contains("hint:"), "{says}: {err}");
        assert!(!out.exists(), "{}: a run directory for a file that cannot be read", out.display());
    }
    let hint = run(llmperf().args(["import", "ncu"]).arg(&db).arg("-o").arg(root.path().join("x")).arg(no_ncu)).1;
    assert!(hint.contains(&format!("hint: import it with `llmperf import nsys {}`", db.display())), "{hint}");
    // An export without its extension is read as the SQLite it is.
    let bare = root.path().join("capture");
    std::fs::copy(&db, &bare).unwrap();
    let run_dir = root.path().join("bare");
    let (code, err) = run(llmperf().args(["import", "nsys"]).arg(&bare).arg("-o").arg(&run_dir).arg(no_nsys));
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(json(&run_dir.join("nsys/regions.json"))["unattributed"]["kernel_count"], 0);
    // An nsys report named .sqlite is exported as the report it is (was "file is not a database").
    let Some(rep_nsys) = corpus_copy(&test, "real/DD2360-llm.c/report1.nsys-rep", root.path()) else { return };
    let misnamed = root.path().join("report1.sqlite.copy.sqlite");
    std::fs::rename(&rep_nsys, &misnamed).unwrap();
    let (_, err) =
        run(llmperf().args(["import", "nsys"]).arg(&misnamed).arg("-o").arg(root.path().join("m")).arg(no_nsys));
    assert!(err.contains("nsys is needed to export a .nsys-rep/.qdrep to SQLite"), "{err}");
}

/// pipeline.nsys.executable naming a directory, a file that cannot be run,
/// or a path that does not exist: said so, not "not on PATH".
#[test]
fn a_profiler_path_that_cannot_run_says_why() {
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("nsys");
    std::fs::write(&file, "#!/bin/sh\n").unwrap();
    for (path, says) in [
        (root.path().to_path_buf(), "is a directory"),
        (file, "is not executable"),
        (root.path().join("missing/nsys"), "does not exist"),
    ] {
        let out = llmperf()
            .args(["profile", "--no-ncu", "-o"])
            .arg(root.path().join("runs"))
            .arg(format!("pipeline.nsys.executable={}", path.display()))
            .args(["--", "true"])
            .timeout(Duration::from_secs(120))
            .output()
            .unwrap();
        let dir = run_dir(&out.stdout);
        let nsys = stage(&json(&dir.join("manifest.json")), "nsys").clone();
        let reason = nsys["reason"].as_str().unwrap_or_default();
        assert!(reason.contains(&format!("`{}` {says}", path.display())), "{says}: {nsys}");
        assert!(!reason.contains("not on PATH"), "{nsys}");
    }
}

/// A run's files damaged in place: a garbage ncu/plan.json, samples.json of a
/// schema this llmperf does not know, a run whose nsys JSON is gone with no
/// SQLite to rebuild it from: each an error naming the file (each was exit 0).
#[test]
fn damaged_run_files_are_named_not_skipped() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some(run_dir) = import_memfusion(&test, root.path()) else { return };
    let copy = |name: &str| {
        let to = root.path().join(name);
        copy_dir(&run_dir, &to);
        to
    };
    let plan = copy("plan");
    std::fs::create_dir_all(plan.join("ncu")).unwrap();
    std::fs::write(plan.join("ncu/plan.json"), b"{\"passes\": 7}").unwrap();
    let (code, err) = run(llmperf().arg("report").arg(&plan));
    assert_eq!(code, Some(6), "{err}");
    assert!(err.contains("ncu/plan.json"), "{err}");
    let newer = copy("newer");
    let samples = newer.join("nsys/samples.json");
    let text =
        std::fs::read_to_string(&samples).unwrap().replace("llmperf.nsys-samples/v1", "llmperf.nsys-samples/999");
    std::fs::write(&samples, text).unwrap();
    let (code, err) = run(llmperf().arg("diff").arg(&run_dir).arg(&newer));
    assert_eq!(code, Some(6), "{err}");
    assert!(
        err.contains("schema \"llmperf.nsys-samples/999\"") && err.contains("hint: another llmperf version"),
        "{err}"
    );
    // memfusion's import read the user's SQLite where it lay: with the JSON gone, nothing rebuilds it.
    let gone = copy("gone");
    for f in ["regions.json", "samples.json", "top_kernels.json"] {
        std::fs::remove_file(gone.join("nsys").join(f)).unwrap();
    }
    assert!(!gone.join("nsys/report.sqlite").exists());
    let (code, err) = run(llmperf().arg("report").arg(&gone));
    assert_eq!(code, Some(6), "{err}");
    assert!(err.contains("nsys/regions.json: missing, and the run holds no nsys/report.sqlite"), "{err}");
}

/// `--junit` at a symbolic link to a regular file: refused, and neither the
/// link nor its target changes (the link was replaced by a file).
#[test]
fn junit_at_a_link_to_a_file_changes_neither() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some(run_dir) = import_memfusion(&test, root.path()) else { return };
    let target = root.path().join("mine.xml");
    std::fs::write(&target, "mine").unwrap();
    let link = root.path().join("link.xml");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let (code, err) =
        run(llmperf().arg("check").arg(&run_dir).arg("--baseline").arg(&run_dir).arg("--junit").arg(&link));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("is a symbolic link to the file"), "{err}");
    assert!(std::fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
    assert_eq!(std::fs::read_to_string(&target).unwrap(), "mine");
}

/// `infer.iters=0` and a model of no layers time nothing: refused before anything runs (were exit 0).
#[test]
fn a_run_that_would_time_nothing_is_refused() {
    let root = tempfile::tempdir().unwrap();
    for (args, says) in [
        (vec!["--model", "nvtx_regions", "infer.iters=0"], "invalid value `0` for infer.iters"),
        (vec!["--model", "hf", "model.layers=0"], "invalid value `0` for model.layers"),
        (vec!["--model", "llm_tiny", "model.n_layers=0"], "invalid value `0` for model.n_layers"),
    ] {
        let (code, err) = run(llmperf().args(["profile", "--no-nsys", "--no-ncu", "-o"]).arg(root.path()).args(&args));
        assert_eq!(code, Some(3), "{args:?}: {err}");
        assert!(err.contains(says) && err.contains("hint:"), "{args:?}: {err}");
    }
}

/// Budgets whose ignore rules leave out every row: "nothing compared",
/// naming the budgets (the run was blamed: "nothing profiled"); a threshold of
/// 1e400 is a number out of range (was "a string").
#[test]
fn budgets_that_ignore_everything_or_overflow_are_named() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some(run_dir) = import_memfusion(&test, root.path()) else { return };
    // memfusion's region paths are 1 to 4 levels deep ("onnx::Conv_194" is two).
    let levels: String =
        (1..=4).map(|n| format!("  - match: \"TensorRT@{}\"\n    ignore: true\n", vec!["*"; n].join("::"))).collect();
    let all = root.path().join("all.yaml");
    std::fs::write(&all, format!("regions:\n{levels}kernels:\n  - match: \"*\"\n    ignore: true\n")).unwrap();
    let (code, err) =
        run(llmperf().arg("check").arg(&run_dir).arg("--baseline").arg(&run_dir).arg("--budgets").arg(&all));
    assert_eq!(code, Some(7), "{err}");
    assert!(
        err.contains("the ignore rules of") && err.contains("leave out every row of the run and the baseline"),
        "{err}"
    );
    assert!(!err.contains("nothing profiled"), "{err}");
    let check = json(&run_dir.join("check/check.json"));
    assert!(check["ignored"].as_u64().unwrap() > 0, "{check}");
    let big = root.path().join("big.yaml");
    std::fs::write(&big, "defaults:\n  relative_pct: 1e400\n").unwrap();
    let (code, err) =
        run(llmperf().arg("check").arg(&run_dir).arg("--baseline").arg(&run_dir).arg("--budgets").arg(&big));
    assert_eq!(code, Some(3), "{err}");
    assert!(err.contains("big.yaml:2: 1e400 is a number out of the range of a threshold"), "{err}");
}

/// A temporary file that a killed import left in a run directory (a SIGKILLed
/// import left a 6 MB one that every later import kept): removed by the next
/// llmperf that takes the run's lock; a fresh one (a writer may be at it) stays.
#[test]
fn a_killed_imports_temporary_file_is_removed_by_the_next_import() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some(run_dir) = import_memfusion(&test, root.path()) else { return };
    let stale = run_dir.join("nsys/.llmperf-Ab12Cd.tmp");
    let fresh = run_dir.join("nsys/.llmperf-Ef34Gh.tmp");
    std::fs::write(&stale, vec![0u8; 1 << 20]).unwrap();
    std::fs::write(&fresh, b"being written").unwrap();
    let hour_ago = std::time::SystemTime::now() - Duration::from_secs(3600);
    std::fs::File::options().write(true).open(&stale).unwrap().set_modified(hour_ago).unwrap();
    let db = run_dir.parent().unwrap().join("report1.sqlite");
    let (code, err) = run(llmperf()
        .args(["import", "nsys"])
        .arg(&db)
        .arg("-o")
        .arg(&run_dir)
        .arg("pipeline.nsys.executable=/nonexistent"));
    assert_eq!(code, Some(0), "{err}");
    assert!(!stale.exists(), "the stale temporary file was kept");
    assert!(fresh.exists(), "a fresh temporary file was removed");
}

/// An ncu that crashes rendering a report is named as crashing, with its last
/// words, not taken for a report too new for it (the report here is an old
/// one any ncu reads; a stand-in ncu dies of SIGSEGV on `--import`).
#[test]
fn a_crashing_ncu_is_named_not_blamed_on_the_report() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some(rep) = corpus_copy(&test, "real/nsight-training/manual_nvtx.ncu-rep", root.path()) else { return };
    let fake = root.path().join("ncu");
    write_executable(
        &fake,
        "#!/bin/sh\ncase \" $* \" in *\" --import \"*) echo 'Segmentation fault in libReport' >&2; kill -SEGV $$;; esac\nexec ncu \"$@\"\n",
    );
    let out = root.path().join("run");
    let (code, err) = run(llmperf()
        .args(["import", "ncu"])
        .arg(&rep)
        .arg("-o")
        .arg(&out)
        .arg(format!("pipeline.ncu.executable={}", fake.display())));
    assert_eq!(code, Some(5), "{err}");
    let says = format!("failed rendering {} to the raw page", out.join("ncu/import.ncu-rep").display());
    assert!(err.contains(&format!("error: {} ", fake.display())) && err.contains(&says), "{err}");
    assert!(err.contains("killed by signal 11 (SIGSEGV); its last words: Segmentation fault in libReport"), "{err}");
    assert!(err.contains("hint: ncu itself failed"), "{err}");
    assert!(!err.contains("newer"), "a crash blamed on the report's version: {err}");
}

/// A disk that fills during an import: at every size, either the run is a
/// success with all its reports, or it exits non-zero and its manifest ends
/// `failed` with no stage left `running` (or, too full to hold the
/// manifest's reserve, no manifest at all and an error that says so). Before,
/// a disk of 120 KiB left the manifest `running`, and one of 160 KiB exited
/// 0 with `status: ok` and no report.html. The disk is a tmpfs of that size,
/// mounted in a user and mount namespace of the command alone (`unshare -rm`).
#[test]
fn a_disk_that_fills_never_leaves_a_run_running_or_ok() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some(db) = corpus_copy(&test, "real/memfusion/report1.sqlite", root.path()) else { return };
    let disk = root.path().join("disk");
    std::fs::create_dir(&disk).unwrap();
    let probe = std::process::Command::new("unshare")
        .args(["-rm", "sh", "-c", "mount -t tmpfs -o size=64k tmpfs \"$1\"", "sh"])
        .arg(&disk)
        .output();
    if !probe.is_ok_and(|o| o.status.success()) {
        skipped(&test, "cannot mount a tmpfs in a user namespace here (unshare -rm)");
        return;
    }
    let exe = env!("CARGO_BIN_EXE_llmperf");
    let (mut failed_mid_run, mut whole) = (0, 0);
    for kb in (40..=640).step_by(40) {
        let run = disk.join("run");
        // $1 the mount point, $2 and $3 where the manifest and the listing go; then the command.
        let script = format!(
            "d=$1 m=$2 l=$3; shift 3; mount -t tmpfs -o size={kb}k tmpfs \"$d\" || exit 99; \"$@\"; code=$?; cat \"$d\"/run/manifest.json > \"$m\" 2>/dev/null; ls -a \"$d\"/run > \"$l\" 2>/dev/null; exit $code"
        );
        let (manifest, listing) =
            (root.path().join(format!("manifest-{kb}.json")), root.path().join(format!("ls-{kb}")));
        let out = std::process::Command::new("unshare")
            .args(["-rm", "sh", "-c", &script, "sh"])
            .arg(&disk)
            .arg(&manifest)
            .arg(&listing)
            .args([exe, "-q", "import", "nsys"])
            .arg(&db)
            .arg("-o")
            .arg(&run)
            .arg("pipeline.nsys.executable=/nonexistent/nsys")
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_ne!(out.status.code(), Some(99), "{kb} KiB: no tmpfs: {stderr}");
        let files = std::fs::read_to_string(&listing).unwrap_or_default();
        let text = std::fs::read_to_string(&manifest).unwrap_or_default();
        if out.status.success() {
            let m: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(m["status"], "ok", "{kb} KiB: exit 0 with {m}");
            assert!(m["stages"].as_array().unwrap().iter().all(|s| s["status"] == "ok"), "{kb} KiB: exit 0 with {m}");
            assert!(files.lines().any(|f| f == "report.html"), "{kb} KiB: exit 0 without report.html: {files}");
            whole += 1;
        } else if text.is_empty() {
            assert!(
                stderr.contains("cannot reserve 128 KiB for the manifest") && stderr.contains("hint:"),
                "{kb} KiB: {stderr}"
            );
        } else {
            let m: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(m["status"], "failed", "{kb} KiB: {stderr}\n{m}");
            assert!(m["stages"].as_array().unwrap().iter().all(|s| s["status"] != "running"), "{kb} KiB: {m}");
            assert!(stderr.contains("No space left on device") && stderr.contains("hint:"), "{kb} KiB: {stderr}");
            failed_mid_run += 1;
        }
        assert!(!files.lines().any(|f| f == ".llmperf-reserve"), "{kb} KiB: the reserve was left: {files}");
    }
    // Not vacuous: some sizes filled the disk mid-run, and the largest held the whole run.
    assert!(failed_mid_run > 0 && whole > 0, "{failed_mid_run} mid-run failures, {whole} whole runs");
}

/// A temporary directory too small for SQLite's sort of a table stored out of
/// time order is named as that (exit 1, the directory, SQLITE_TMPDIR), not
/// blamed on a truncated export (was exit 6, "the file may be truncated").
/// The copy of a real export has its launch and kernel tables shuffled and
/// repeated 30 times (120,300 kernels), so that the sort spills to disk;
/// TMPDIR is a 64 KiB tmpfs in a user and mount namespace (`unshare -rm`).
#[test]
fn a_full_temporary_directory_is_named_not_blamed_on_the_export() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some(db) = corpus_copy(&test, "real/nsys-ai/mfu_2gpu_before.sqlite", root.path()) else { return };
    writable(&db);
    {
        let c = rusqlite::Connection::open(&db).unwrap();
        for table in ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME"] {
            let create: String =
                c.query_row("SELECT sql FROM sqlite_master WHERE name = ?1", [table], |r| r.get(0)).unwrap();
            c.execute_batch(&format!("ALTER TABLE {table} RENAME TO stored; {create};")).unwrap();
            for _ in 0..30 {
                c.execute_batch(&format!("INSERT INTO {table} SELECT * FROM stored ORDER BY random();")).unwrap();
            }
            c.execute_batch("DROP TABLE stored;").unwrap();
        }
    }
    let tmp = root.path().join("tmp");
    std::fs::create_dir(&tmp).unwrap();
    let script = "t=$1; shift; mount -t tmpfs -o size=64k tmpfs \"$t\" || exit 99; SQLITE_TMPDIR=\"$t\" TMPDIR=\"$t\" exec \"$@\"";
    let out = std::process::Command::new("unshare")
        .args(["-rm", "sh", "-c", script, "sh"])
        .arg(&tmp)
        .args([env!("CARGO_BIN_EXE_llmperf"), "-q", "import", "nsys"])
        .arg(&db)
        .arg("-o")
        .arg(root.path().join("run"))
        .arg("pipeline.nsys.executable=/nonexistent/nsys")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    if out.status.code() == Some(99) || out.status.code().is_none() {
        skipped(&test, "cannot mount a tmpfs in a user namespace here (unshare -rm)");
        return;
    }
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "SQLite's temporary files (it sorts tables nsys stored out of time order) filled {}",
            tmp.display()
        )),
        "{stderr}"
    );
    assert!(stderr.contains("hint: free space in") && stderr.contains("SQLITE_TMPDIR"), "{stderr}");
    assert!(!stderr.contains("truncated"), "{stderr}");
}

/// Memory grows with distinct names, and a program can give every call its
/// own: a copy of a real export whose named NVTX ranges are repeated 4 times
/// (the copies nest inside the originals) and each given a name of its own
/// (`call1234 aten::mm`: 74,624 regions; unbounded it holds 159 MiB after
/// reading and peaks at 505 MB) stops with an error naming the budget, where
/// the unedited export (28 MiB at its peak) imports within the same budget.
const BUDGET_MIB: u64 = 64;

#[test]
fn an_import_past_its_memory_budget_stops_naming_it() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some(db) = corpus_copy(&test, "real/nsys-ai/mfu_2gpu_before.sqlite", root.path()) else { return };
    let unedited = root.path().join("unedited.sqlite");
    std::fs::copy(&db, &unedited).unwrap();
    writable(&db);
    let c = rusqlite::Connection::open(&db).unwrap();
    c.execute_batch(
        "CREATE TABLE named AS SELECT * FROM NVTX_EVENTS WHERE text IS NOT NULL;
         INSERT INTO NVTX_EVENTS SELECT * FROM named;
         INSERT INTO NVTX_EVENTS SELECT * FROM named;
         INSERT INTO NVTX_EVENTS SELECT * FROM named;
         DROP TABLE named;",
    )
    .unwrap();
    let named =
        c.execute("UPDATE NVTX_EVENTS SET text = 'call' || rowid || ' ' || text WHERE text IS NOT NULL", []).unwrap();
    assert_eq!(named, 4 * 18_656);
    drop(c);
    let budget = format!("runner.run.memory_budget_mib={BUDGET_MIB}");
    let import = |file: &Path, out: &str| {
        run(llmperf()
            .args(["import", "nsys"])
            .arg(file)
            .arg("-o")
            .arg(root.path().join(out))
            .args([budget.as_str(), "pipeline.nsys.executable=/nonexistent/nsys"]))
    };
    let (code, err) = import(&unedited, "unedited");
    assert_eq!(code, Some(0), "{err}");
    let (code, err) = import(&db, "named");
    assert_eq!(code, Some(6), "{err}");
    assert!(
        err.contains(&format!("past the memory budget of {BUDGET_MIB} MiB (runner.run.memory_budget_mib); stopped")),
        "{err}"
    );
    assert!(err.contains("hint: memory grows with the distinct NVTX range and kernel names"), "{err}");
    let m = json(&root.path().join("named/manifest.json"));
    assert_eq!(m["status"], "failed", "{m}");
}

/// The summary counts the findings it does not show as the tables number
/// them: "findings 9–10 are in findings.json" beside the 8 it shows (it read
/// "2 more findings", and on a larger capture "41 more findings below the
/// first 50 left out" beside the shown ones, which read as 41 not shown).
#[test]
fn the_findings_not_shown_are_numbered_as_the_tables_number_them() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some(db) = corpus_copy(&test, "real/nsys-ai/mfu_2gpu_before.sqlite", root.path()) else { return };
    let out = root.path().join("run");
    let (code, err) =
        run(llmperf().args(["import", "nsys"]).arg(&db).arg("-o").arg(&out).arg("pipeline.nsys.executable=/no"));
    assert_eq!(code, Some(0), "{err}");
    let n = json(&out.join("findings.json"))["findings"].as_array().unwrap().len();
    let md = std::fs::read_to_string(out.join("stakeholder_summary.md")).unwrap();
    // The rows of the first findings table: `| 1 | ... |` to `| k | ... |`.
    let table = md.split("\n\n").find(|t| t.contains("| # | finding |")).unwrap();
    let shown =
        table.lines().filter(|l| l.split('|').nth(1).is_some_and(|c| c.trim().parse::<usize>().is_ok())).count();
    assert!(n > shown, "{n} findings, {shown} shown: the case needs more");
    assert!(md.contains(&format!("- findings {}–{n} are in [findings.json](findings.json)", shown + 1)), "{md}");
    assert!(!md.contains("more findings"), "{md}");
}
