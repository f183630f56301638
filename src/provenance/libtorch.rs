//! provenance: what libtorch the workload plugin (src/plugin.rs) links, and whether it sees CUDA.
use serde::{Deserialize, Serialize};
use std::path::Path;

use crate::plugin;

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Libtorch {
    /// The workload plugin loaded (so the built-in workloads can run).
    pub(crate) linked: bool,
    /// Where the plugin (libllmperf_torch.so) was loaded from.
    pub(crate) plugin: Option<String>,
    /// Why the plugin did not load.
    pub(crate) error: Option<String>,
    pub(crate) lib_dir: Option<String>,
    pub(crate) version: Option<String>,
    /// The CUDA version libtorch was built with (None for CPU-only builds).
    pub(crate) cuda_build: Option<String>,
    pub(crate) cuda_available: Option<bool>,
    pub(crate) cuda_device_count: Option<i64>,
}

impl Libtorch {
    /// Not described, with the reason in `error`.
    pub(crate) fn not_loaded(why: &str) -> Self {
        Libtorch {
            linked: false,
            plugin: None,
            error: Some(why.to_string()),
            lib_dir: None,
            version: None,
            cuda_build: None,
            cuda_available: None,
            cuda_device_count: None,
        }
    }

    /// The load failure's hint, when the plugin did not load.
    pub(crate) fn hint() -> Option<String> {
        plugin::load().err().and_then(|e| e.hint)
    }
}

/// Loads the plugin (and so libtorch) if this process has not yet.
pub(crate) fn info() -> Libtorch {
    match plugin::runtime() {
        Ok((p, rt)) => {
            let (version, cuda_build) = rt.lib_dir.as_deref().map(|d| read_version(Path::new(d))).unwrap_or_default();
            Libtorch {
                linked: true,
                plugin: Some(p.path.display().to_string()),
                error: None,
                lib_dir: rt.lib_dir,
                version,
                cuda_build,
                cuda_available: Some(rt.cuda_available),
                cuda_device_count: Some(rt.cuda_device_count),
            }
        }
        Err(e) => Libtorch::not_loaded(&e.message),
    }
}

/// The PyPI wheel has `torch/version.py` next to `torch/lib`; a standalone
/// libtorch has `build-version` (and `build-hash`) in its root.
fn read_version(lib_dir: &Path) -> (Option<String>, Option<String>) {
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
