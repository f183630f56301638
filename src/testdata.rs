//! Test data, for the unit tests and (included by path from tests/common) the
//! integration tests alike. Files of other projects stay in the shared corpus
//! (`LLMPERF_CORPUS`, else `../shared/fixtures` beside the checkout) and are
//! read there; a test whose corpus file is missing records itself as skipped
//! in `target/tmp/skipped-tests.txt` (`make test` counts the records and says
//! how many were skipped, and why). The project's own data is under
//! `tests/fixtures/` (see its README.md).
use std::path::{Path, PathBuf};

/// The shared corpus of other projects' public profiler outputs (never copied
/// into this repository). None when it is not there.
pub fn corpus_dir() -> Option<PathBuf> {
    let dir = match std::env::var_os("LLMPERF_CORPUS") {
        Some(d) => PathBuf::from(d),
        None => Path::new(env!("CARGO_MANIFEST_DIR")).join("../shared/fixtures"),
    };
    dir.is_dir().then_some(dir)
}

/// A file of the corpus, or None after recording `test` as skipped.
pub fn corpus_file(test: &str, rel: &str) -> Option<PathBuf> {
    let found = corpus_dir().map(|d| d.join(rel)).filter(|p| p.is_file());
    if found.is_none() {
        skipped(test, &format!("corpus file {rel} not found (LLMPERF_CORPUS or ../shared/fixtures)"));
    }
    found
}

/// [`corpus_file`] for a unit test, recorded under the name the test harness
/// gives its thread (`aggregate::ncu::tests::...`), else `test`.
pub fn corpus(test: &str, rel: &str) -> Option<PathBuf> {
    let name = std::thread::current().name().filter(|n| *n != "main").map_or(test.to_string(), String::from);
    corpus_file(&format!("llmperf::{name}"), rel)
}

/// Record a skipped test: one line in target/tmp/skipped-tests.txt, and on stderr.
pub fn skipped(test: &str, why: &str) {
    eprintln!("SKIPPED {test}: {why}");
    let log = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tmp/skipped-tests.txt");
    let _ = std::fs::create_dir_all(log.parent().expect("a parent"));
    if let Ok(mut f) = std::fs::OpenOptions::new().create(true).append(true).open(log) {
        let _ = std::io::Write::write_all(&mut f, format!("{test}\t{why}\n").as_bytes());
    }
}

/// A file the project made itself (`tests/fixtures/...`: its own captures).
pub fn own(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures").join(rel)
}
