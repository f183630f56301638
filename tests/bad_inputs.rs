//! Nothing lost, every odd byte answered: the command line end to end on bad
//! inputs, odd output directories and concurrent use. Broken files are made
//! here by cutting, corrupting, renaming or joining real files (the shared
//! corpus, or the project's own CPU capture in tests/fixtures/runs); no row is
//! invented.
use crate::common::*;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

const DETAILS: &str = "real/derived/nsight-training/manual_nvtx.ncu2022.3.details.csv";
const RAW: &str = "real/derived/nsight-training/manual_nvtx.ncu2022.3.raw.csv";
const KERNEL_SUMMARY: &str = "real/derived/abacus/report1.nsys2022.4_gpukernsum.csv";

/// A copy of a corpus file in `dir`: llmperf is handed copies, so that no
/// version of it (an old one under test, say) can ever change the shared corpus.
fn copy_of(src: &Path, dir: &Path) -> PathBuf {
    let to = dir.join(src.file_name().unwrap());
    std::fs::copy(src, &to).unwrap();
    to
}

fn import_ncu(file: &Path, out: &Path) -> assert_cmd::assert::Assert {
    llmperf().args(["-q", "import", "ncu"]).arg(file).arg("-o").arg(out).assert()
}

fn stderr(a: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&a.get_output().stderr).into_owned()
}

fn inode(p: &Path) -> u64 {
    std::os::unix::fs::MetadataExt::ino(&std::fs::metadata(p).unwrap())
}

/// Per scope 0: (name, unattributed, calls).
fn ncu_regions(dir: &Path) -> Vec<(String, bool, u64)> {
    ncu_scope_regions(dir)
        .iter()
        .map(|r| {
            let bucket = r.get("unattributed").and_then(|b| b.as_bool()).unwrap_or(false);
            (r["name"].as_str().unwrap().to_string(), bucket, r["inclusive"]["calls"].as_u64().unwrap())
        })
        .collect()
}

#[test]
fn a_second_import_into_the_same_directory_leaves_the_users_files_alone() {
    let Some(src) = corpus!(DETAILS) else { return };
    let Some(other) = corpus!(RAW) else { return };
    let root = tempfile::tempdir().unwrap();
    let (x, y) = (root.path().join("x.csv"), root.path().join("y.csv"));
    std::fs::copy(&src, &x).unwrap();
    std::fs::copy(&other, &y).unwrap();
    let (want_x, want_y) = (std::fs::read(&x).unwrap(), std::fs::read(&y).unwrap());
    let run = root.path().join("r1");
    import_ncu(&x, &run).success();
    import_ncu(&x, &run).success();
    import_ncu(&y, &run).success();
    assert_eq!(std::fs::read(&x).unwrap(), want_x, "the first input was written through");
    assert_eq!(std::fs::read(&y).unwrap(), want_y, "the second input was written through");
    // Each import is a pass with its own copy, sharing no inode with the user's files.
    let plan = json(&run.join("ncu/plan.json"));
    let passes: Vec<&str> = plan["passes"].as_array().unwrap().iter().map(|p| p["name"].as_str().unwrap()).collect();
    assert_eq!(passes, ["import", "import01", "import02"]);
    for (pass, want) in [("import", &want_x), ("import01", &want_x), ("import02", &want_y)] {
        let copy = run.join(format!("ncu/{pass}.csv"));
        assert_eq!(&std::fs::read(&copy).unwrap(), want, "{pass}");
        assert!(inode(&copy) != inode(&x) && inode(&copy) != inode(&y), "{pass} aliases a user file");
    }
    // The report holds all three: 3 kernels each.
    let regions = ncu_regions(&run);
    assert_eq!(regions[0], ("run_test".to_string(), false, 9), "{regions:?}");
}

#[test]
fn an_existing_directory_that_is_not_a_run_directory_is_refused() {
    let Some(src) = corpus!(DETAILS) else { return };
    let inputs = tempfile::tempdir().unwrap();
    let src = copy_of(&src, inputs.path());
    let project = tempfile::tempdir().unwrap();
    let mine = [("config.yaml", "mine: 1\n"), ("report.md", "# my notes\n"), ("report.html", "<p>mine</p>\n")];
    for (name, text) in mine {
        std::fs::write(project.path().join(name), text).unwrap();
    }
    let a = llmperf().args(["import", "ncu"]).arg(&src).arg("-o").arg(project.path()).assert().code(2);
    let err = stderr(&a);
    assert!(err.contains("exists and is not a run directory") && err.contains("hint: "), "{err}");
    for (name, text) in mine {
        assert_eq!(std::fs::read_to_string(project.path().join(name)).unwrap(), text, "{name} was overwritten");
    }
    assert_eq!(std::fs::read_dir(project.path()).unwrap().count(), 3, "something was added");
    // The same for nsys; an empty directory is fine.
    let db = copy_of(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/runs/cpu_llm_tiny/nsys/report.sqlite"),
        inputs.path(),
    );
    llmperf().args(["import", "nsys"]).arg(&db).arg("-o").arg(project.path()).assert().code(2);
    let empty = tempfile::tempdir().unwrap();
    llmperf().args(["-q", "import", "nsys"]).arg(&db).arg("-o").arg(empty.path()).assert().success();
}

/// An advisory lock on the run directory: an import waits while another
/// process holds it, and concurrent imports all land in the manifest.
#[test]
fn imports_into_one_directory_take_turns() {
    use std::os::fd::AsRawFd;
    let Some(src) = corpus!(DETAILS) else { return };
    let root = tempfile::tempdir().unwrap();
    let src = copy_of(&src, root.path());
    let run = root.path().join("run");
    import_ncu(&src, &run).success();
    let before = std::fs::read(run.join("manifest.json")).unwrap();
    let lock =
        std::fs::OpenOptions::new().create(true).truncate(false).write(true).open(run.join(".llmperf-lock")).unwrap();
    assert_eq!(unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX) }, 0);
    let spawn_into = |dir: &Path| {
        std::process::Command::new(env!("CARGO_BIN_EXE_llmperf"))
            .args(["-q", "import", "ncu"])
            .arg(&src)
            .arg("-o")
            .arg(dir)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let spawn_import = || spawn_into(&run);
    let mut waiting = spawn_import();
    std::thread::sleep(Duration::from_millis(1500));
    assert!(waiting.try_wait().unwrap().is_none(), "the import did not wait for the lock");
    assert_eq!(std::fs::read(run.join("manifest.json")).unwrap(), before, "the manifest changed under the lock");
    drop(lock);
    assert!(waiting.wait().unwrap().success());
    // Four at once: every one is recorded.
    let children: Vec<_> = (0..4).map(|_| spawn_import()).collect();
    for mut c in children {
        assert!(c.wait().unwrap().success());
    }
    let manifest = json(&run.join("manifest.json"));
    let imports = manifest["stages"].as_array().unwrap().iter().filter(|s| s["name"] == "import").count();
    // The first import started the manifest; the other five each added an `import` stage.
    assert_eq!(imports, 5, "{manifest}");
    assert_eq!(json(&run.join("ncu/plan.json"))["passes"].as_array().unwrap().len(), 6);
    // Four at once into a directory none of them finds: the first creates it, the others wait
    // (they refused with "exists and is not a run directory" when they met its lock file).
    for round in 0..3 {
        let new = root.path().join(format!("new{round}"));
        let children: Vec<_> = (0..4).map(|_| spawn_into(&new)).collect();
        for c in children {
            let out = c.wait_with_output().unwrap();
            assert!(out.status.success(), "round {round}: {}", String::from_utf8_lossy(&out.stderr));
        }
        assert_eq!(json(&new.join("ncu/plan.json"))["passes"].as_array().unwrap().len(), 4, "round {round}");
    }
}

#[test]
fn arguments_that_are_not_utf8_work_or_are_named() {
    let Some(src) = corpus!(DETAILS) else { return };
    let root = tempfile::tempdir().unwrap();
    let latin1 = root.path().join(OsStr::from_bytes(b"caf\xe9.csv"));
    std::fs::copy(&src, &latin1).unwrap();
    let run = root.path().join("run");
    llmperf().args(["-q", "import", "ncu"]).arg(&latin1).arg("-o").arg(&run).assert().success();
    assert_eq!(ncu_regions(&run)[0].2, 3);
    let manifest = json(&run.join("manifest.json"));
    assert!(manifest["argv"].to_string().contains("caf\u{fffd}.csv"), "{}", manifest["argv"]);
    // An override is text: named, with a hint.
    let a = llmperf().arg("config").arg("show").arg(OsStr::from_bytes(b"device=caf\xe9")).assert().code(2);
    let err = stderr(&a);
    assert!(err.contains("is not valid UTF-8") && err.contains("hint: "), "{err}");
    // After `--`, arguments go to the program as they are.
    let a = llmperf()
        .args(["-q", "profile", "--no-nsys", "-o"])
        .arg(root.path())
        .args(["--", "/bin/echo"])
        .arg(OsStr::from_bytes(b"\xe9"))
        .assert()
        .success();
    assert!(run_dir(&a.get_output().stdout).join("manifest.json").is_file());
}

#[test]
fn a_stderr_that_cannot_be_written_is_no_panic() {
    for (args, code) in
        [(&["import", "ncu", "/nonexistent.csv"][..], 2), (&["config", "show", "runner.run.no_such_key=1"][..], 3)]
    {
        let full = std::fs::OpenOptions::new().write(true).open("/dev/full").unwrap();
        let status = std::process::Command::new(env!("CARGO_BIN_EXE_llmperf"))
            .args(args)
            .stdout(std::process::Stdio::null())
            .stderr(full)
            .status()
            .unwrap();
        assert_eq!(status.code(), Some(code), "{args:?}");
    }
}

#[test]
fn a_truncated_kernel_summary_is_refused_naming_the_line() {
    let Some(src) = corpus!(KERNEL_SUMMARY) else { return };
    let text = std::fs::read(&src).unwrap();
    let root = tempfile::tempdir().unwrap();
    // Cuts at 20 places that are not line ends: each must be an error naming the cut line.
    let cuts: Vec<usize> = (1..=20).map(|i| text.len() * i / 21).filter(|&at| text[at - 1] != b'\n').collect();
    assert!(cuts.len() >= 15, "only {} cuts fall inside a line", cuts.len());
    for (i, at) in cuts.iter().enumerate() {
        let cut = root.path().join(format!("cut{i}.csv"));
        std::fs::write(&cut, &text[..*at]).unwrap();
        let a = llmperf()
            .args(["-q", "import", "nsys"])
            .arg(&cut)
            .arg("-o")
            .arg(root.path().join(format!("r{i}")))
            .assert();
        let err = stderr(&a);
        assert_eq!(a.get_output().status.code(), Some(6), "cut at {at}: {err}");
        let line = text[..*at].iter().filter(|b| **b == b'\n').count() + 1;
        assert!(err.contains(&format!("cut{i}.csv:{line}: the file ends in the middle of a row")), "{err}");
        assert!(err.contains("hint: "), "{err}");
    }
}

/// A copy of the project's own CPU capture with one NVTX row changed by SQL.
fn edited_capture(dir: &Path, sql: &str) -> PathBuf {
    let db = dir.join("edited.sqlite");
    std::fs::copy(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/runs/cpu_llm_tiny/nsys/report.sqlite"),
        &db,
    )
    .unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    assert_eq!(conn.execute(sql, []).unwrap(), 1, "{sql}");
    db
}

#[test]
fn impossible_nvtx_times_are_left_out_and_counted() {
    let root = tempfile::tempdir().unwrap();
    let pick = "rowid = (SELECT MIN(rowid) FROM NVTX_EVENTS WHERE eventType = 59 AND end IS NOT NULL)";
    for (name, set) in [
        ("backwards", "end = start - 1000000"),
        ("overflow", "start = -9223372036854775000, end = 9223372036854775000"),
    ] {
        let dir = root.path().join(name);
        std::fs::create_dir(&dir).unwrap();
        let db = edited_capture(&dir, &format!("UPDATE NVTX_EVENTS SET {set} WHERE {pick}"));
        let run = dir.join("run");
        llmperf().args(["-q", "import", "nsys"]).arg(&db).arg("-o").arg(&run).assert().success();
        let regions = json(&run.join("nsys/regions.json"));
        for r in regions["regions"].as_array().unwrap() {
            for key in ["inclusive_ns", "exclusive_ns", "min_ns", "median_ns", "max_ns"] {
                assert!(r[key].as_i64().unwrap() >= 0, "{name}: {key} of {}: {}", r["path"], r[key]);
            }
        }
        let notes = regions["notes"].to_string();
        assert!(notes.contains("1 NVTX ranges end before they start"), "{name}: {notes}");
        llmperf().arg("validate").arg(&run).assert().success();
    }
}

#[test]
fn infinite_ncu_values_stay_text_and_the_import_validates() {
    let Some(src) = corpus!(DETAILS) else { return };
    let text = std::fs::read_to_string(&src).unwrap();
    let edited = text
        .replacen(r#""DRAM Frequency","cycle/nsecond","6.68""#, r#""DRAM Frequency","cycle/nsecond","inf""#, 1)
        .replacen(r#""Duration","usecond","84.48""#, r#""Duration","usecond","1e400""#, 1);
    assert_ne!(edited, text);
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("inf.csv");
    std::fs::write(&file, edited).unwrap();
    let run = root.path().join("run");
    import_ncu(&file, &run).success();
    llmperf().arg("validate").arg(&run).assert().success();
    let report = json(&run.join("ncu/regions/report.json"));
    let totals = &report["scopes"][0]["totals"];
    assert_eq!((totals["calls"].as_u64(), totals["untimed_calls"].as_u64()), (Some(3), Some(1)), "{totals}");
    assert!(totals["gpu_time_ms"].as_f64().unwrap().is_finite());
    // report.md says the untimed result is there, not a GPU time of 0.
    let md = std::fs::read_to_string(run.join("ncu/regions/report.md")).unwrap();
    assert!(md.contains("(1 results without a finite GPU time (no duration, or inf/nan)"), "{md}");
    assert!(md.contains(" untimed)"), "{md}");
}

#[test]
fn a_header_in_the_middle_is_two_files_joined() {
    for rel in [DETAILS, RAW] {
        let Some(src) = corpus!(rel) else { return };
        let text = std::fs::read(&src).unwrap();
        let root = tempfile::tempdir().unwrap();
        let joined = root.path().join("joined.csv");
        std::fs::write(&joined, [text.as_slice(), text.as_slice()].concat()).unwrap();
        let a = import_ncu(&joined, &root.path().join("run")).code(6);
        let header_line = String::from_utf8_lossy(&text).matches('\n').count() + 1;
        let err = stderr(&a);
        assert!(err.contains(&format!("joined.csv:{header_line}: the header line again")), "{rel}: {err}");
        assert!(err.contains("hint: import each export as a file of its own"), "{err}");
    }
}

#[test]
fn a_range_named_unattributed_is_not_the_bucket() {
    let Some(src) = corpus!(DETAILS) else { return };
    let mut reader = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_path(&src).unwrap();
    let mut out = csv::WriterBuilder::new().flexible(true).quote_style(csv::QuoteStyle::Always).from_writer(Vec::new());
    for (i, row) in reader.records().enumerate() {
        let row = row.unwrap();
        let cells: Vec<String> = row
            .iter()
            .enumerate()
            .map(|(c, cell)| match (i, c, &row[0]) {
                // The check_results launch: outside every range.
                (1.., 4, "2") => String::new(),
                // The others: the outer range renamed.
                (1.., 4, _) => cell.replace("run_test", "(unattributed)"),
                _ => cell.to_string(),
            })
            .collect();
        out.write_record(&cells).unwrap();
    }
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("named.csv");
    std::fs::write(&file, out.into_inner().unwrap()).unwrap();
    let run = root.path().join("run");
    import_ncu(&file, &run).success();
    let top: Vec<(String, bool, u64)> =
        ncu_regions(&run).into_iter().filter(|(n, _, _)| n == "(unattributed)").collect();
    assert_eq!(top, [("(unattributed)".to_string(), false, 2), ("(unattributed)".to_string(), true, 1)]);
}

#[test]
fn what_is_not_a_readable_file_is_named_before_a_run_directory_exists() {
    let root = tempfile::tempdir().unwrap();
    let fifo = root.path().join("pipe.csv");
    let c = std::ffi::CString::new(fifo.as_os_str().as_bytes()).unwrap();
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0);
    let dir = root.path().join("dir.csv");
    std::fs::create_dir(&dir).unwrap();
    let out = root.path().join("out");
    for (what, file, said) in [
        ("ncu", dir.as_path(), "is a directory, not a file"),
        ("ncu", fifo.as_path(), "is a named pipe (FIFO), not a file"),
        ("ncu", Path::new("/dev/null"), "is a device, not a file"),
        ("nsys", dir.as_path(), "is a directory, not a file"),
        ("nsys", fifo.as_path(), "is a named pipe (FIFO), not a file"),
        ("nsys", Path::new("/dev/null"), "is a device, not a file"),
    ] {
        let a =
            llmperf().args(["import", what]).arg(file).arg("-o").arg(&out).timeout(Duration::from_secs(60)).assert();
        let err = stderr(&a);
        assert_eq!(a.get_output().status.code(), Some(2), "{what} {}: {err}", file.display());
        assert!(err.contains(said) && err.contains("hint: "), "{err}");
        assert!(!out.exists(), "a run directory was made for a bad input");
    }
}

/// As root, another user is needed to be refused a read: setpriv drops to nobody.
#[test]
fn an_unreadable_input_blames_the_input() {
    let Some(src) = corpus!(DETAILS) else { return };
    let root = tempfile::tempdir().unwrap();
    std::fs::set_permissions(root.path(), std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    let file = root.path().join("secret.csv");
    std::fs::copy(&src, &file).unwrap();
    std::fs::set_permissions(&file, std::os::unix::fs::PermissionsExt::from_mode(0o000)).unwrap();
    let out = root.path().join("out");
    let mut cmd = if unsafe { libc::geteuid() } == 0 {
        if std::process::Command::new("setpriv").arg("--version").output().is_err() {
            return skipped("an_unreadable_input_blames_the_input", "running as root without setpriv");
        }
        let mut c = assert_cmd::Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups", env!("CARGO_BIN_EXE_llmperf")]);
        c
    } else {
        assert_cmd::Command::new(env!("CARGO_BIN_EXE_llmperf"))
    };
    let a = cmd.args(["import", "ncu"]).arg(&file).arg("-o").arg(&out).assert().code(2);
    let err = stderr(&a);
    assert!(err.contains("secret.csv: cannot read it: Permission denied"), "{err}");
    assert!(err.contains("hint: check the file's permissions"), "{err}");
    assert!(!out.exists(), "a run directory was made (its manifest would say running)");
}

#[test]
fn encodings_a_bom_is_read_utf16_and_cr_only_are_named() {
    let Some(src) = corpus!(DETAILS) else { return };
    let text = std::fs::read_to_string(&src).unwrap();
    let root = tempfile::tempdir().unwrap();
    let src = copy_of(&src, root.path());
    let plain = root.path().join("plain");
    import_ncu(&src, &plain).success();
    let bom = root.path().join("bom.csv");
    std::fs::write(&bom, format!("\u{feff}{text}")).unwrap();
    let with_bom = root.path().join("with_bom");
    import_ncu(&bom, &with_bom).success();
    assert_eq!(ncu_regions(&with_bom), ncu_regions(&plain));
    let utf16 = root.path().join("utf16.csv");
    let bytes: Vec<u8> = [0xFF, 0xFE].into_iter().chain(text.encode_utf16().flat_map(u16::to_le_bytes)).collect();
    std::fs::write(&utf16, bytes).unwrap();
    let err = stderr(&import_ncu(&utf16, &root.path().join("u")).code(6));
    assert!(err.contains("utf16.csv is UTF-16 text") && err.contains("hint: convert it: iconv"), "{err}");
    let cr = root.path().join("cr.csv");
    std::fs::write(&cr, text.replace('\n', "\r")).unwrap();
    let err = stderr(&import_ncu(&cr, &root.path().join("c")).code(6));
    assert!(err.contains("cr.csv ends its lines with CR only") && err.contains("hint: convert it: tr"), "{err}");
}

#[test]
fn error_text_is_bounded_escaped_and_names_the_users_file() {
    let root = tempfile::tempdir().unwrap();
    // A 20 MB file of one line: the message quotes it, but not all of it.
    let huge = root.path().join("huge.csv");
    std::fs::write(&huge, "x".repeat(20 << 20)).unwrap();
    let err = stderr(&import_ncu(&huge, &root.path().join("h")).code(6));
    assert!(err.len() < 4096, "{} bytes of error", err.len());
    assert!(err.contains("huge.csv"), "{err}");
    // Terminal escapes in a file are not sent to the terminal.
    let evil = root.path().join("evil.csv");
    std::fs::write(&evil, "==ERROR== \x1b]0;owned\x07\x1b[2J\u{9b}31m boom\n").unwrap();
    let a = import_ncu(&evil, &root.path().join("e")).code(6);
    let raw = &a.get_output().stderr;
    assert!(!raw.contains(&0x1b) && !raw.contains(&0x07), "{}", String::from_utf8_lossy(raw));
    assert!(stderr(&a).contains(r"\u{1b}]0;owned"), "{}", stderr(&a));
    // A parse error names the file the user passed, not the run directory's copy.
    let Some(src) = corpus!(DETAILS) else { return };
    let text = std::fs::read(&src).unwrap();
    let cut = root.path().join("cut.csv");
    std::fs::write(&cut, &text[..text.len() * 2 / 3 + 5]).unwrap();
    let err = stderr(&import_ncu(&cut, &root.path().join("c")).code(6));
    assert!(err.contains(&format!("error: {}:", cut.display())), "{err}");
    assert!(!err.contains("ncu/import.csv"), "{err}");
}

#[test]
fn a_program_that_does_not_exist_is_named_before_nsys_starts() {
    let root = tempfile::tempdir().unwrap();
    for (program, said) in
        [("/nonexistent", "cannot run `/nonexistent`: no such file"), ("no-such-program-llmperf", "not found on PATH")]
    {
        let a = llmperf().args(["profile", "-o"]).arg(root.path()).args(["--", program]).assert().code(2);
        let err = stderr(&a);
        assert!(err.contains(said) && err.contains("hint: "), "{err}");
    }
    assert_eq!(std::fs::read_dir(root.path()).unwrap().count(), 0, "no run directory for a command that cannot run");
}

#[test]
fn a_damaged_nsys_report_is_not_called_too_new() {
    let Some(src) = corpus!("real/abacus/report1.qdrep") else { return };
    let root = tempfile::tempdir().unwrap();
    let cut = root.path().join("cut.qdrep");
    std::fs::write(&cut, &std::fs::read(&src).unwrap()[..20_000]).unwrap();
    let _nsys = nsys_lock();
    let a = llmperf()
        .args(["import", "nsys"])
        .arg(&cut)
        .arg("-o")
        .arg(root.path().join("run"))
        .timeout(Duration::from_secs(300))
        .assert();
    let err = stderr(&a);
    assert_eq!(a.get_output().status.code(), Some(6), "{err}");
    assert!(err.contains("magic number mismatch") && err.contains("hint: the file is damaged"), "{err}");
    assert!(!err.contains("newer nsys"), "{err}");
}

/// The name the hostile-name tests give a range: a comment opener, a
/// backtick, a pipe, a newline, an OSC title sequence, a link's `]`.
pub const HOSTILE: &str = "<!-- x`|y\n\u{1b}]0;pwned\u{7}";

/// An ncu app-range export (corpus, cfregly-ai-perf) whose range is renamed
/// to [`HOSTILE`] by a text edit of a copy: every Markdown the import writes
/// (report.md, the summary, ncu/regions/report.md) keeps it inside a code
/// span or escaped, each table row keeps its columns, and neither they nor
/// sections.txt carry a control character.
#[test]
fn hostile_range_names_stay_inside_their_markdown_and_text() {
    let Some(src) = corpus!("real/cfregly-ai-perf/ncu_app_range_details.csv") else { return };
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("details.csv");
    let text = std::fs::read_to_string(&src).unwrap();
    assert!(text.contains(":compute_kernel:"));
    std::fs::write(&csv, text.replace("compute_kernel", HOSTILE)).unwrap();
    let run = dir.path().join("run");
    import_ncu(&csv, &run).success();
    let sections = std::fs::read_dir(run.join("ncu/regions"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("sections.txt"))
        .find(|p| p.is_file())
        .unwrap();
    let text = std::fs::read_to_string(&sections).unwrap();
    assert!(text.contains("pwned") && !text.chars().any(|c| c.is_control() && c != '\n'), "{text}");
    let mut seen = 0;
    for file in ["report.md", "stakeholder_summary.md", "ncu/regions/report.md"] {
        let md = std::fs::read_to_string(run.join(file)).unwrap();
        seen += md.matches("pwned").count();
        assert!(!md.chars().any(|c| c.is_control() && c != '\n'), "{file}: a control character");
        for line in md.lines() {
            assert!(!outside_code_spans(line).contains("<!--"), "{file}: {line}");
        }
        let mut header = None;
        for line in md.lines() {
            if !line.starts_with('|') {
                header = None;
                continue;
            }
            let cells = line.replace("\\\\", "").replace("\\|", "").matches('|').count();
            assert_eq!(cells, *header.get_or_insert(cells), "{file}: {line}");
        }
        // A region's link: its text ends at the first unescaped `]`, then `(`.
        for line in md.lines().filter(|l| l.starts_with("| [")) {
            let rest = line[3..].replace("\\\\", "").replace("\\]", "");
            assert!(rest.split_once(']').is_some_and(|(_, after)| after.starts_with('(')), "{file}: {line}");
        }
    }
    assert!(seen >= 3, "the name reached the Markdown ({seen} times)");
}

/// A value of the wrong type where an integer belongs (text, a fraction, a
/// blob), set by SQL on a copy of the corpus's memfusion export: SQLite
/// reads such a value as 0, which made a kernel run from time 0 to its end
/// (GPU time 125× too high, exit 0). Now exit 6, naming the file, table,
/// column and row, with a hint.
#[test]
fn a_value_of_the_wrong_type_in_an_nsys_export_is_named_never_read_as_zero() {
    let Some(src) = corpus!("real/memfusion/report1.sqlite") else { return };
    let root = tempfile::tempdir().unwrap();
    for (i, (table, column, value)) in [
        ("CUPTI_ACTIVITY_KIND_KERNEL", "start", "'soon'"),
        ("CUPTI_ACTIVITY_KIND_KERNEL", "end", "x'00'"),
        ("NVTX_EVENTS", "start", "0.5"),
        ("CUPTI_ACTIVITY_KIND_RUNTIME", "correlationId", "'id'"),
    ]
    .into_iter()
    .enumerate()
    {
        let dir = root.path().join(i.to_string());
        std::fs::create_dir(&dir).unwrap();
        let db = copy_of(&src, &dir);
        let conn = rusqlite::Connection::open(&db).unwrap();
        // A row the readers read: a range with an end, for NVTX_EVENTS.
        let which = if table == "NVTX_EVENTS" { " WHERE end IS NOT NULL" } else { "" };
        let sql =
            format!("UPDATE {table} SET {column} = {value} WHERE rowid = (SELECT MIN(rowid) FROM {table}{which})");
        assert_eq!(conn.execute(&sql, []).unwrap(), 1);
        drop(conn);
        let a = llmperf().args(["-q", "import", "nsys"]).arg(&db).arg("-o").arg(dir.join("run")).assert().code(6);
        let err = stderr(&a);
        assert!(err.contains(&format!("error: {}: reading ", db.display())), "{err}");
        assert!(err.contains(&format!("table {table}, column {column}, row ")), "{err}");
        assert!(err.contains("where an integer belongs"), "{err}");
        assert!(err.contains("hint: a value of the wrong type"), "{err}");
    }
}

/// Reports from a newer nsys or ncu than the local one (corpus; each
/// version is written in the file): exit 5,
/// naming both versions and the command that renders the report. A newer
/// report the local tool still reads (ncu 2022.3 reads 2022.4.1) imports;
/// a `.ncu-repz` (zstd) is named as such.
#[test]
fn reports_newer_than_the_local_tool_name_both_versions() {
    let root = tempfile::tempdir().unwrap();
    let cases = [
        ("nsys", "real/memfusion/report1.nsys-rep", "2023.1.2"),
        ("nsys", "real/cs336-halfemptydrum/report1.nsys-rep", "2026.1.2"),
        ("ncu", "real/GPU_Power_Model/profile.ncu-rep", "2025.1.0"),
        ("ncu", "real/sglang-fork/profile.ncu-rep", "2023.3.0"),
    ];
    for (i, (tool, rel, version)) in cases.into_iter().enumerate() {
        let Some(src) = corpus!(rel) else { return };
        let dir = root.path().join(i.to_string());
        std::fs::create_dir(&dir).unwrap();
        let file = copy_of(&src, &dir);
        let _nsys = nsys_lock();
        let a = llmperf()
            .args(["import", tool])
            .arg(&file)
            .arg("-o")
            .arg(dir.join("run"))
            .timeout(Duration::from_secs(300))
            .assert()
            .code(5);
        let err = stderr(&a);
        assert!(
            err.contains(&format!("error: {} was written by {tool} {version}; this {tool} is ", file.display())),
            "{rel}: {err}"
        );
        assert!(err.contains(&format!("hint: render it with {tool} {version} or newer")), "{rel}: {err}");
        assert!(!err.contains("damaged"), "{rel}: {err}");
    }
    let Some(older) = corpus!("real/parallel_programming_ex3/profile.ncu-rep") else { return };
    let file = copy_of(&older, root.path());
    import_ncu(&file, &root.path().join("older")).success();
    let repz = root.path().join("report.ncu-repz");
    std::fs::copy(&file, &repz).unwrap();
    let err = stderr(&import_ncu(&repz, &root.path().join("repz")).code(5));
    assert!(err.contains("is a zstd-compressed Nsight Compute report (.ncu-repz)"), "{err}");
    assert!(
        err.contains(&format!("hint: render it with the ncu that wrote it: `ncu --import {}", repz.display())),
        "{err}"
    );
}

/// What an ncu that does not know the report's chip renders, made by a text edit of the corpus's 2024.1 renderings of one report:
/// every unit emptied, and `==WARNING== Failed to detect compute capability`
/// lines before the header and between rows. The import's kernels (calls and
/// GPU time, both pages) equal those of the unedited files, and the region
/// report says which units were inferred from the metric name.
#[test]
fn ncu_renderings_without_units_and_with_log_lines_give_the_same_numbers() {
    const W: &str = "==WARNING== Failed to detect compute capability, assuming 50";
    let root = tempfile::tempdir().unwrap();
    for page in ["raw", "details"] {
        let Some(src) = corpus!(&format!("real/derived/gpu-ray-tracer/report.ncu2024.1.{page}.csv")) else { return };
        let text = std::fs::read_to_string(&src).unwrap();
        let mut rows = csv::ReaderBuilder::new().has_headers(false).flexible(true).from_reader(text.as_bytes());
        let records: Vec<csv::StringRecord> = rows.records().map(Result::unwrap).collect();
        let unit = records[0].iter().position(|h| h == "Metric Unit");
        let mut edited = format!("{W}\n").into_bytes();
        for (i, r) in records.iter().enumerate() {
            let cells: Vec<&str> = match (page, i, unit) {
                ("raw", 1, _) => r.iter().map(|_| "").collect(),
                (_, i, Some(u)) if i > 0 => r.iter().enumerate().map(|(j, c)| if j == u { "" } else { c }).collect(),
                _ => r.iter().collect(),
            };
            let mut out = csv::WriterBuilder::new().quote_style(csv::QuoteStyle::Always).from_writer(Vec::new());
            out.write_record(&cells).unwrap();
            edited.extend(out.into_inner().unwrap());
            if i % 5 == 0 {
                edited.extend(format!("{W}\n").as_bytes());
            }
        }
        let file = root.path().join(format!("{page}.csv"));
        std::fs::write(&file, &edited).unwrap();
        let kernels = |csv: &Path, out: &str| {
            import_ncu(csv, &root.path().join(out)).success();
            let k = json(&root.path().join(out).join("kernels.json"));
            k["kernels"]
                .as_array()
                .unwrap()
                .iter()
                .map(|k| (k["calls"].clone(), k["total_ms"].clone()))
                .collect::<Vec<_>>()
        };
        let (want, got) = (kernels(&src, &format!("{page}-orig")), kernels(&file, &format!("{page}-edited")));
        assert!(want.iter().any(|(_, ms)| ms.as_f64().unwrap() > 0.0), "{want:?}");
        assert_eq!(got, want, "{page}");
        let report = json(&root.path().join(format!("{page}-edited/ncu/regions/report.json")));
        let metric = report["scopes"][0]["regions"][0]["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == if page == "raw" { "gpu__time_duration.sum" } else { "dram__bytes.sum.per_second" })
            .cloned()
            .unwrap();
        let unit = if page == "raw" { "ns" } else { "byte/second" };
        assert_eq!(metric["unit"], format!("{unit} (inferred from the metric name)"), "{page}");
    }
}

/// `--launcher srun --run-id ..` named the artifacts root's parent as the job
/// directory: srun.cmd.txt and srun.stdout.log went there, and srun started
/// every rank before each refused the id. Now refused before srun starts:
/// exit 2, nothing written beside the root or in it.
#[test]
fn a_job_id_of_dots_is_refused_before_srun_starts() {
    let parent = tempfile::tempdir().unwrap();
    let root = parent.path().join("runs");
    for id in ["..", "."] {
        let a = llmperf()
            .args(["profile", "--launcher", "srun", "-n", "2", "--no-ncu", "--run-id", id, "-o"])
            .arg(&root)
            .args(["--", "true"])
            .timeout(Duration::from_secs(120))
            .assert()
            .code(2);
        let err = stderr(&a);
        assert!(
            err.contains(&format!("--launcher srun --run-id: the job id {id:?} names no directory of its own")),
            "{err}"
        );
        assert!(err.contains("hint: "), "{err}");
        let beside: Vec<_> = std::fs::read_dir(parent.path()).unwrap().flatten().map(|e| e.file_name()).collect();
        assert!(beside.iter().all(|n| n == "runs"), "{beside:?}");
        assert!(!root.join("srun.cmd.txt").exists());
    }
}

/// A capture in which nsys recorded no NVTX range (the corpus's abacus
/// export: 23,805 kernels, no NVTX table) imports, and says loudly on stderr
/// that there is no per-region report, not only in regions.json's notes.
#[test]
fn a_capture_without_any_nvtx_range_is_a_loud_warning() {
    let Some(db) = corpus!("real/derived/abacus/report1.nsys2022.4.sqlite") else { return };
    let root = tempfile::tempdir().unwrap();
    let db = copy_of(&db, root.path());
    let a = llmperf().args(["import", "nsys"]).arg(&db).arg("-o").arg(root.path().join("run")).assert().success();
    let err = stderr(&a);
    assert!(err.contains("WARN") && err.contains("nsys recorded no NVTX range: no per-region report"), "{err}");
    let regions = json(&root.path().join("run/nsys/regions.json"));
    assert_eq!(regions["regions"].as_array().unwrap().len(), 0);
    assert_eq!(regions["unattributed"]["kernel_count"], 23805);
}
