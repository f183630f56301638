//! What libtorch this binary was linked against, and whether it sees CUDA.
use serde::Serialize;
use std::path::PathBuf;

/// The libtorch `lib/` directory recorded by build.rs (also the binary's rpath).
const LIB_DIR: &str = env!("LLMPERF_LIBTORCH_DIR");

#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct Libtorch {
    /// Built with the `torch` feature (the built-in workloads).
    pub linked: bool,
    pub lib_dir: Option<String>,
    pub version: Option<String>,
    /// The CUDA version libtorch was built with (None for CPU-only builds).
    pub cuda_build: Option<String>,
    pub cuda_available: Option<bool>,
    pub cuda_device_count: Option<i64>,
}

pub fn info() -> Libtorch {
    let lib_dir = (!LIB_DIR.is_empty()).then(|| PathBuf::from(LIB_DIR));
    let (version, cuda_build) = lib_dir.as_ref().map(|d| read_version(d)).unwrap_or((None, None));
    let (cuda_available, cuda_device_count) = runtime_cuda();
    Libtorch {
        linked: cfg!(feature = "torch"),
        lib_dir: lib_dir.map(|d| d.display().to_string()),
        version,
        cuda_build,
        cuda_available,
        cuda_device_count,
    }
}

#[cfg(feature = "torch")]
fn runtime_cuda() -> (Option<bool>, Option<i64>) {
    let count = tch::Cuda::device_count();
    (Some(tch::Cuda::is_available()), Some(count))
}

#[cfg(not(feature = "torch"))]
fn runtime_cuda() -> (Option<bool>, Option<i64>) {
    (None, None)
}

/// The PyPI wheel has `torch/version.py` next to `torch/lib`; a standalone
/// libtorch has `build-version` (and `build-hash`) in its root.
fn read_version(lib_dir: &std::path::Path) -> (Option<String>, Option<String>) {
    let root = lib_dir.parent().unwrap_or(lib_dir);
    if let Ok(py) = std::fs::read_to_string(root.join("version.py")) {
        let field = |name: &str| {
            py.lines().find(|l| l.starts_with(name)).and_then(|l| l.split('\'').nth(1)).map(str::to_string)
        };
        return (field("__version__ "), field("cuda:"));
    }
    let version = std::fs::read_to_string(root.join("build-version")).ok().map(|s| s.trim().to_string());
    let cuda = version.as_deref().and_then(|v| v.split_once("+cu")).map(|(_, c)| c.to_string());
    (version, cuda)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_wheel_version_file() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("lib")).unwrap();
        std::fs::write(
            dir.path().join("version.py"),
            "__version__ = '2.13.0+cu130'\ndebug = False\ncuda: Optional[str] = '13.0'\n",
        )
        .unwrap();
        let (v, c) = read_version(&dir.path().join("lib"));
        assert_eq!((v.as_deref(), c.as_deref()), (Some("2.13.0+cu130"), Some("13.0")));
    }
}
