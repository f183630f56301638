//! The built binary finds libtorch by itself and keeps libtorch_cuda (REFERENCE §2).
#![cfg(feature = "torch")]
use std::path::Path;
use std::process::Command;

#[test]
fn binary_has_rpath_to_libtorch_and_keeps_libtorch_cuda() {
    let bin = env!("CARGO_BIN_EXE_llmperf");
    let lib_dir = env!("LLMPERF_LIBTORCH_DIR");
    assert!(!lib_dir.is_empty(), "build.rs did not locate libtorch");
    let out = Command::new("readelf").args(["-d", bin]).output().expect("readelf (binutils) is installed");
    let dynamic = String::from_utf8_lossy(&out.stdout);
    let runpath = dynamic
        .lines()
        .find(|l| l.contains("(RUNPATH)") || l.contains("(RPATH)"))
        .unwrap_or_else(|| panic!("no RUNPATH/RPATH:\n{dynamic}"));
    assert!(runpath.contains(lib_dir), "{runpath} does not point at {lib_dir}");
    let needed = |lib: &str| dynamic.lines().any(|l| l.contains("(NEEDED)") && l.contains(&format!("[{lib}]")));
    assert!(needed("libtorch_cpu.so") && needed("libc10.so"), "{dynamic}");
    if Path::new(lib_dir).join("libtorch_cuda.so").exists() {
        assert!(needed("libtorch_cuda.so"), "--as-needed dropped libtorch_cuda.so:\n{dynamic}");
    }
}

#[test]
fn binary_runs_from_any_directory_without_ld_library_path() {
    let out = Command::new(env!("CARGO_BIN_EXE_llmperf"))
        .arg("doctor")
        .current_dir("/")
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("OK    libtorch"), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
}
