//! Link-time facts the plugin needs to load from any directory:
//! - an rpath to libtorch's `lib/` (torch-sys emits `-L` but no rpath, so
//!   without one dlopen only finds libtorch with LD_LIBRARY_PATH);
//! - `libtorch_cuda.so` kept in NEEDED with `--no-as-needed` when the libtorch
//!   has CUDA (the default `--as-needed` drops it and libtorch then silently
//!   reports CUDA unavailable on GPU hosts).
//!
//! Also records the libtorch directory for provenance.
use std::env;
use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=LIBTORCH_USE_PYTORCH");
    let Some(lib) = libtorch_lib_dir() else {
        println!("cargo:warning=libtorch not located; the plugin will need LD_LIBRARY_PATH");
        println!("cargo:rustc-env=LLMPERF_LIBTORCH_DIR=");
        return;
    };
    println!("cargo:rustc-env=LLMPERF_LIBTORCH_DIR={}", lib.display());
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    let cuda = lib.join("libtorch_cuda.so");
    if cuda.exists() {
        println!("cargo:rustc-link-arg=-Wl,--no-as-needed,{},--as-needed", cuda.display());
    }
}

/// The same lookup torch-sys does: `LIBTORCH`, else the `torch` package of the
/// python on PATH when `LIBTORCH_USE_PYTORCH` is set.
fn libtorch_lib_dir() -> Option<PathBuf> {
    if let Some(root) = env::var_os("LIBTORCH") {
        return Some(PathBuf::from(root).join("lib"));
    }
    env::var_os("LIBTORCH_USE_PYTORCH")?;
    let python = env::var("PYTHON_SYS_EXECUTABLE").unwrap_or_else(|_| "python".into());
    let out = Command::new(python)
        .args(["-c", "import os, torch; print(os.path.join(os.path.dirname(torch.__file__), 'lib'))"])
        .output()
        .ok()?;
    let dir = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
    (out.status.success() && dir.is_dir()).then_some(dir)
}
