//! The executable does not link libtorch (starting it costs nothing); the
//! workload plugin next to it finds libtorch by itself and keeps libtorch_cuda
//! (REFERENCE §2).
use std::path::{Path, PathBuf};
use std::process::Command;

fn dynamic_section(file: &Path) -> String {
    let out = Command::new("readelf").arg("-d").arg(file).output().expect("readelf (binutils) is installed");
    assert!(out.status.success(), "readelf -d {}: {}", file.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn needed(dynamic: &str, lib: &str) -> bool {
    dynamic.lines().any(|l| l.contains("(NEEDED)") && l.contains(&format!("[{lib}]")))
}

fn plugin() -> PathBuf {
    Path::new(env!("CARGO_BIN_EXE_llmperf")).with_file_name(llmperf::plugin::FILE_NAME)
}

#[test]
fn executable_does_not_need_libtorch() {
    let dynamic = dynamic_section(Path::new(env!("CARGO_BIN_EXE_llmperf")));
    for lib in ["libtorch_cpu.so", "libtorch.so", "libc10.so", "libtorch_cuda.so"] {
        assert!(!needed(&dynamic, lib), "llmperf needs {lib}:\n{dynamic}");
    }
}

#[test]
fn plugin_has_rpath_to_libtorch_and_keeps_libtorch_cuda() {
    let dynamic = dynamic_section(&plugin());
    let runpath = dynamic
        .lines()
        .find(|l| l.contains("(RUNPATH)") || l.contains("(RPATH)"))
        .unwrap_or_else(|| panic!("no RUNPATH/RPATH:\n{dynamic}"));
    let lib_dir = runpath.split('[').nth(1).and_then(|s| s.split(']').next()).unwrap();
    let lib_dir = lib_dir.split(':').find(|d| Path::new(d).join("libtorch_cpu.so").exists());
    let lib_dir = lib_dir.unwrap_or_else(|| panic!("{runpath} has no directory with libtorch_cpu.so"));
    assert!(needed(&dynamic, "libtorch_cpu.so") && needed(&dynamic, "libc10.so"), "{dynamic}");
    if Path::new(lib_dir).join("libtorch_cuda.so").exists() {
        assert!(needed(&dynamic, "libtorch_cuda.so"), "--as-needed dropped libtorch_cuda.so:\n{dynamic}");
    }
}

#[test]
fn plugin_loads_from_any_directory_without_ld_library_path() {
    let out = Command::new(env!("CARGO_BIN_EXE_llmperf"))
        .arg("doctor")
        .current_dir("/")
        .env_remove("LD_LIBRARY_PATH")
        .env_remove(llmperf::plugin::ENV_VAR)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("OK    libtorch"), "{text}\n{}", String::from_utf8_lossy(&out.stderr));
}

/// Without the plugin, built-in workloads fail with the fix; nothing else needs it.
#[test]
fn missing_or_foreign_plugin_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let run = |plugin: &Path| {
        Command::new(env!("CARGO_BIN_EXE_llmperf"))
            .args(["workload", "-o"])
            .arg(dir.path())
            .env(llmperf::plugin::ENV_VAR, plugin)
            .output()
            .unwrap()
    };
    let out = run(&dir.path().join("absent.so"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{err}");
    assert!(err.contains("cannot load the workload plugin") && err.contains("no such file"), "{err}");
    assert!(err.contains("hint:") && err.contains("make build"), "{err}");

    // A shared object that is not the plugin: libc has neither symbol.
    let libc = Path::new("/lib/x86_64-linux-gnu/libc.so.6");
    if libc.exists() {
        let out = run(libc);
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("no symbol llmperf_torch_contract"), "{err}");
    }
    // A plugin built from other sources: a stand-in that only knows its contract.
    let src = dir.path().join("stale.c");
    std::fs::write(
        &src,
        "#include <stddef.h>\nconst char *llmperf_torch_contract(size_t *n) { *n = 11; return \"0.0.0+stale\"; }\n",
    )
    .unwrap();
    let stale = dir.path().join("stale.so");
    let cc = Command::new("cc").args(["-shared", "-fPIC", "-o"]).arg(&stale).arg(&src).status().unwrap();
    assert!(cc.success());
    let out = run(&stale);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("was built from other sources (0.0.0+stale)"), "{err}");
    assert!(err.contains("hint: rebuild both together"), "{err}");

    let out = Command::new(env!("CARGO_BIN_EXE_llmperf"))
        .arg("--version")
        .env(llmperf::plugin::ENV_VAR, dir.path().join("absent.so"))
        .output()
        .unwrap();
    assert!(out.status.success());
}
