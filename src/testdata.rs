//! Test data for unit tests. Files of other projects stay in the shared corpus
//! (`LLMPERF_CORPUS`, else `../shared/fixtures` beside the checkout) and are
//! read there; a test whose corpus file is missing records itself as skipped
//! (`make test` counts the records and says how many were skipped, and why).
//! The project's own data is under `tests/fixtures/` (see its README.md).
use std::path::{Path, PathBuf};

/// A file of the shared corpus, or None with `test` recorded as skipped.
pub(crate) fn corpus(test: &str, rel: &str) -> Option<PathBuf> {
    let dir = match std::env::var_os("LLMPERF_CORPUS") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures"),
    };
    let path = dir.join(rel);
    if path.is_file() {
        return Some(path);
    }
    let why = format!("corpus file {rel} not found (LLMPERF_CORPUS or ../shared/fixtures)");
    // The test harness names each test's thread after the test.
    let test = std::thread::current().name().filter(|n| *n != "main").map_or(test.to_string(), String::from);
    eprintln!("SKIPPED {test}: {why}");
    let log = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tmp/skipped-tests.txt");
    let _ = std::fs::create_dir_all(log.parent().expect("a parent"));
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(log) {
        let _ = std::io::Write::write_all(&mut f, format!("llmperf::{test}\t{why}\n").as_bytes());
    }
    None
}

/// A file the project made itself (`tests/fixtures/...`).
pub(crate) fn own(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(rel)
}
