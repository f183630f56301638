//! Helpers shared by the integration tests.
#![allow(dead_code)]
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Two nsys sessions at once hang on these machines (REFERENCE §1): every test
/// that starts nsys holds this lock. Cargo runs test binaries one at a time,
/// and all nsys tests live in one binary per file, so this serializes them.
pub static NSYS: Mutex<()> = Mutex::new(());

pub fn nsys_lock() -> std::sync::MutexGuard<'static, ()> {
    NSYS.lock().unwrap_or_else(|e| e.into_inner())
}

pub fn llmperf() -> assert_cmd::Command {
    let mut cmd = assert_cmd::Command::cargo_bin("llmperf").unwrap();
    cmd.env_remove("LLMPERF_LOG");
    cmd
}

/// The run directory printed on stdout.
pub fn run_dir(stdout: &[u8]) -> PathBuf {
    let text = String::from_utf8_lossy(stdout);
    PathBuf::from(text.lines().last().expect("a run directory on stdout").trim())
}

pub fn json(path: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap()
}

pub fn stage<'a>(manifest: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    manifest["stages"].as_array().unwrap().iter().find(|s| s["name"] == name).unwrap()
}

/// Write an executable script (a fake profiler for orchestration tests).
pub fn write_executable(path: &Path, text: &str) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
}
