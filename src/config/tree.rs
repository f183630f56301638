//! config: the configuration file tree: the `conf/` directory embedded in the binary,
//! optionally overlaid by a user's `--config-dir`.
//!
//! A file in the user's directory is layered over the embedded file of the same
//! relative path (both are read, the user's wins key by key); a file only the
//! user has adds a new option.
use include_dir::{include_dir, Dir};
use std::path::{Path, PathBuf};

use crate::error::Error;

static EMBEDDED: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/conf");

/// One YAML file found in the tree.
#[derive(Debug, Clone)]
pub(crate) struct ConfFile {
    /// Shown in `config show --origin` and error messages.
    pub(crate) label: String,
    pub(crate) text: String,
}

#[derive(Debug, Clone, Default)]
pub(crate) struct ConfTree {
    user_dir: Option<PathBuf>,
}

impl ConfTree {
    pub(crate) fn new(user_dir: Option<PathBuf>) -> Result<Self, Error> {
        if let Some(dir) = &user_dir {
            if !dir.is_dir() {
                return Err(Error::config(format!("--config-dir {}: not a directory", dir.display()))
                    .with_hint("pass a directory laid out like llmperf's conf/ (see docs/configuration.md)"));
            }
        }
        Ok(ConfTree { user_dir })
    }

    /// Every layer of `rel` (e.g. `profiling/ncu/ncu.high.yaml`): embedded first, then the user's.
    pub(crate) fn read(&self, rel: &str) -> Result<Vec<ConfFile>, Error> {
        let mut files = Vec::new();
        if let Some(file) = EMBEDDED.get_file(rel) {
            let text = file.contents_utf8().unwrap_or_default().to_string();
            files.push(ConfFile { label: format!("conf/{rel} (embedded)"), text });
        }
        if let Some(path) = self.user_path(rel).filter(|p| p.is_file()) {
            let text = super::bounded::read_yaml(&path, "--config-dir")?;
            files.push(ConfFile { label: path.display().to_string(), text });
        }
        Ok(files)
    }

    /// Every YAML file of the embedded tree.
    #[cfg(test)]
    pub(crate) fn embedded_files() -> Vec<ConfFile> {
        fn walk(dir: &'static Dir<'static>, out: &mut Vec<ConfFile>) {
            for f in dir.files().filter(|f| f.path().extension().is_some_and(|e| e == "yaml")) {
                let text = f.contents_utf8().unwrap_or_default().to_string();
                out.push(ConfFile { label: format!("conf/{}", f.path().display()), text });
            }
            for d in dir.dirs() {
                walk(d, out);
            }
        }
        let mut out = Vec::new();
        walk(&EMBEDDED, &mut out);
        out
    }

    /// An embedded data file (not a configuration layer), e.g. `hardware/gpu_peaks.yaml`.
    pub(crate) fn embedded_data(rel: &str) -> Option<&'static str> {
        EMBEDDED.get_file(rel).and_then(|f| f.contents_utf8())
    }

    /// Whether `group` names a directory of the tree.
    pub(crate) fn is_group(&self, group: &str) -> bool {
        EMBEDDED.get_dir(group).is_some() || self.user_path(group).is_some_and(|p| p.is_dir())
    }

    /// The options of a group: the stems of its `*.yaml` files, sorted.
    pub(crate) fn options(&self, group: &str) -> Vec<String> {
        let mut names: Vec<String> = EMBEDDED
            .get_dir(group)
            .map(|d| d.files().map(|f| f.path().to_path_buf()).collect::<Vec<PathBuf>>())
            .unwrap_or_default()
            .into_iter()
            .chain(self.user_files(group))
            .filter_map(|p| yaml_stem(&p))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// The sub-directories of a group (e.g. the models under `model/`), sorted.
    pub(crate) fn subgroups(&self, group: &str) -> Vec<String> {
        let mut names: Vec<String> = EMBEDDED
            .get_dir(group)
            .map(|d| d.dirs().map(|d| d.path().to_path_buf()).collect::<Vec<PathBuf>>())
            .unwrap_or_default()
            .into_iter()
            .chain(self.user_files(group).into_iter().filter(|p| p.is_dir()))
            .filter_map(|p| p.file_name()?.to_str().map(str::to_string))
            .collect();
        names.sort();
        names.dedup();
        names
    }

    fn user_path(&self, rel: &str) -> Option<PathBuf> {
        self.user_dir.as_ref().map(|d| d.join(rel))
    }

    fn user_files(&self, group: &str) -> Vec<PathBuf> {
        let Some(dir) = self.user_path(group) else {
            return Vec::new();
        };
        std::fs::read_dir(dir).map(|rd| rd.filter_map(|e| e.ok().map(|e| e.path())).collect()).unwrap_or_default()
    }
}

fn yaml_stem(path: &Path) -> Option<String> {
    let name = path.file_name()?.to_str()?;
    name.strip_suffix(".yaml").map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn embedded_tree_lists_ncu_presets() {
        let tree = ConfTree::default();
        let options = tree.options("profiling/ncu");
        for preset in ["ncu.default", "ncu.high", "ncu.light"] {
            assert!(options.contains(&preset.to_string()), "{options:?}");
        }
        assert!(tree.is_group("model/dummy_shallow_resnet/arch"));
        assert!(!tree.is_group("device"));
    }

    #[test]
    fn user_file_is_layered_after_embedded() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("runner")).unwrap();
        std::fs::write(dir.path().join("runner/default.yaml"), "run: {top_n_kernels: 5}\n").unwrap();
        std::fs::write(dir.path().join("runner/mine.yaml"), "run: {}\n").unwrap();
        let tree = ConfTree::new(Some(dir.path().to_path_buf())).unwrap();
        let layers = tree.read("runner/default.yaml").unwrap();
        assert_eq!(layers.len(), 2);
        assert!(layers[0].label.ends_with("(embedded)"));
        assert!(layers[1].text.contains("top_n_kernels: 5"));
        assert!(tree.options("runner").contains(&"mine".to_string()));
    }
}
