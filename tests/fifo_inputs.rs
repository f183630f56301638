//! A FIFO where a run directory's file belongs (or where $GITHUB_STEP_SUMMARY
//! points, with nobody reading) is an error naming it, never a read or a write
//! that waits for ever. Each run is an import of a corpus export; every command
//! has a timeout that a hang would reach.
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::common::*;

/// `path` replaced by a FIFO nobody writes.
fn fifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: mkfifo with a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o644) }, 0, "mkfifo {}", path.display());
}

/// Two imports of memfusion's export: a run and its baseline.
fn runs(test: &str, root: &Path) -> Option<(PathBuf, PathBuf)> {
    let db = corpus_copy(test, "real/memfusion/report1.sqlite", root)?;
    let (a, b) = (root.join("base"), root.join("run"));
    import_nsys(&db, &a, &[]);
    import_nsys(&db, &b, &[]);
    Some((a, b))
}

fn run(cmd: &mut assert_cmd::Command) -> (Option<i32>, String) {
    let out = cmd.timeout(Duration::from_secs(60)).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!stderr.contains("timed out") && out.status.code().is_some(), "waited: {stderr}");
    (out.status.code(), stderr)
}

#[test]
fn a_fifo_in_a_run_or_its_baseline_is_named_not_waited_on() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some((base, new)) = runs(&test, root.path()) else { return };
    for (rel, args) in [
        ("nsys/samples.json", ["check", "--baseline"]),
        ("nsys/breakdown.json", ["diff", ""]),
        ("manifest.json", ["check", "--baseline"]),
    ] {
        let broken = root.path().join(format!("fifo-{}", rel.replace('/', "-")));
        copy_dir(&base, &broken);
        fifo(&broken.join(rel));
        let mut cmd = llmperf();
        match args {
            ["check", flag] => cmd.arg("check").arg(&new).arg(flag).arg(&broken),
            _ => cmd.arg("diff").arg(&broken).arg(&new),
        };
        let (code, err) = run(&mut cmd);
        assert_eq!(code, Some(6), "{rel}: {err}");
        assert!(err.contains(rel) && err.contains("FIFO"), "{rel}: {err}");
    }
    // validate names the file; report rebuilds without waiting.
    fifo(&new.join("nsys/regions.json"));
    let (code, out) = {
        let o = llmperf().arg("validate").arg(&new).timeout(Duration::from_secs(60)).output().unwrap();
        (o.status.code(), String::from_utf8_lossy(&o.stdout).into_owned() + &String::from_utf8_lossy(&o.stderr))
    };
    assert_ne!(code, Some(0), "{out}");
    assert!(out.contains("nsys/regions.json") && out.contains("FIFO"), "{out}");
    let (code, err) = run(llmperf().arg("report").arg(&new));
    assert_eq!(code, Some(0), "{err}");
}

/// $GITHUB_STEP_SUMMARY naming a FIFO nobody reads: refused at once, as `--junit` is.
#[test]
fn a_step_summary_fifo_with_no_reader_is_refused() {
    let test = crate::this_test!();
    let root = tempfile::tempdir().unwrap();
    let Some((base, new)) = runs(&test, root.path()) else { return };
    let summary = root.path().join("summary");
    fifo(&summary);
    let (code, err) =
        run(llmperf().env("GITHUB_STEP_SUMMARY", &summary).arg("check").arg(&new).arg("--baseline").arg(&base));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("is a FIFO that no one reads"), "{err}");
}
