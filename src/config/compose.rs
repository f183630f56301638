//! config: Hydra-style composition: `config.yaml`'s defaults list picks one option per
//! group; group overrides change the picks; the result is an ordered list of
//! YAML layers, each placed at its package (`pipeline.ncu`, `model`, ...).
use serde_yaml::{Mapping, Value};

use super::tree::{ConfFile, ConfTree};
use crate::error::Error;

const ROOT_FILE: &str = "config.yaml";
const SELF: &str = "_self_";

/// One entry of the defaults list: `group@package: option`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Choice {
    pub(crate) group: String,
    pub(crate) package: String,
    pub(crate) option: String,
}

/// A group choice from the command line (`group[@package]=option`).
#[derive(Debug, Clone)]
pub(crate) struct GroupOverride {
    pub(crate) group: String,
    pub(crate) package: Option<String>,
    pub(crate) option: String,
    pub(crate) raw: String,
}

/// A YAML document placed at the root of the config, with where it came from.
#[derive(Debug, Clone)]
pub(crate) struct Layer {
    pub(crate) label: String,
    pub(crate) value: Value,
}

#[derive(Debug, Clone)]
pub(crate) struct Composition {
    /// What the defaults list chose, group by group: read by the tests; a
    /// run uses the layers.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) choices: Vec<Choice>,
    pub(crate) layers: Vec<Layer>,
}

pub(crate) fn compose(tree: &ConfTree, groups: &[GroupOverride]) -> Result<Composition, Error> {
    let roots = parse_files(tree.read(ROOT_FILE)?)?;
    if roots.is_empty() {
        return Err(Error::config("no config.yaml in the configuration tree")
            .with_hint("a --config-dir must hold config.yaml or rely on the embedded one"));
    }
    let mut entries = None;
    let mut selves = Vec::new();
    for (label, mut map) in roots {
        if let Some(list) = map.remove("defaults") {
            entries = Some(parse_defaults(&label, list)?);
        }
        selves.push(Layer { label, value: Value::Mapping(map) });
    }
    let mut entries = entries.unwrap_or_default();
    if !entries.iter().any(|e| e.is_none()) {
        entries.push(None);
    }
    let mut choices: Vec<Choice> = entries.iter().flatten().cloned().collect();
    for o in groups {
        apply_group_override(tree, &mut choices, o)?;
    }
    let mut layers = Vec::new();
    let mut chosen = choices.iter();
    for entry in &entries {
        match entry {
            None => layers.extend(selves.iter().cloned()),
            Some(_) => {
                let choice = chosen.next().expect("one choice per entry");
                layers.extend(load_choice(tree, choice)?);
            }
        }
    }
    Ok(Composition { choices, layers })
}

/// Parse each layer of a file, reporting YAML errors with file and line.
fn parse_files(files: Vec<ConfFile>) -> Result<Vec<(String, Mapping)>, Error> {
    files
        .into_iter()
        .map(|f| {
            let value: Value = serde_yaml::from_str(&f.text).map_err(|e| yaml_error(&f.label, &e))?;
            match value {
                Value::Mapping(m) => Ok((f.label, m)),
                Value::Null => Ok((f.label, Mapping::new())),
                _ => Err(Error::config(format!("{}: expected a mapping of keys at the top", f.label))),
            }
        })
        .collect()
}

pub(crate) fn yaml_error(label: &str, e: &serde_yaml::Error) -> Error {
    let at = e.location().map(|l| format!(":{}:{}", l.line(), l.column())).unwrap_or_default();
    Error::config(format!("{label}{at}: malformed YAML: {e}"))
        .with_hint("fix the YAML at that line (indentation, a missing `:` or an unclosed quote or bracket)")
}

/// `- group@package: option` entries; `None` stands for `_self_`.
fn parse_defaults(label: &str, list: Value) -> Result<Vec<Option<Choice>>, Error> {
    let bad = |what: String| {
        Error::config(format!("{label}: defaults list: {what}"))
            .with_hint("entries look like `- profiling/ncu@pipeline.ncu: ncu.default` or `- _self_`")
    };
    let Value::Sequence(items) = list else {
        return Err(bad("expected a list".into()));
    };
    items
        .into_iter()
        .map(|item| match item {
            Value::String(s) if s == SELF => Ok(None),
            Value::Mapping(m) if m.len() == 1 => {
                let (k, v) = m.into_iter().next().expect("one entry");
                let (Value::String(k), Value::String(option)) = (k, v) else {
                    return Err(bad("group and option must be strings".into()));
                };
                let (group, package) = match k.split_once('@') {
                    Some((g, p)) => (g.to_string(), p.to_string()),
                    None => (k.clone(), k.replace('/', ".")),
                };
                Ok(Some(Choice { group, package, option }))
            }
            other => Err(bad(format!("unexpected entry {other:?}"))),
        })
        .collect()
}

fn apply_group_override(tree: &ConfTree, choices: &mut [Choice], o: &GroupOverride) -> Result<(), Error> {
    if o.group == "model" && o.package.is_none() {
        return choose_model(tree, choices, &o.option);
    }
    let found = match &o.package {
        Some(p) => choices.iter_mut().find(|c| &c.package == p),
        None => choices.iter_mut().find(|c| c.group == o.group),
    };
    let Some(choice) = found else {
        let known: Vec<String> = choices.iter().map(|c| format!("{}@{}", c.group, c.package)).collect();
        return Err(Error::config(format!("override `{}`: no such entry in the defaults list", o.raw))
            .with_hint(format!("the defaults list has: {}", known.join(", "))));
    };
    check_option(tree, &o.group, &o.option, &o.raw)?;
    choice.group = o.group.clone();
    choice.option = o.option.clone();
    Ok(())
}

/// `model=NAME` (and `--model NAME`) picks `model/NAME/arch@model` and
/// `model/NAME/infer@infer`, both with option `NAME.default`.
fn choose_model(tree: &ConfTree, choices: &mut [Choice], name: &str) -> Result<(), Error> {
    let raw = format!("model={name}");
    for (package, sub) in [("model", "arch"), ("infer", "infer")] {
        let group = format!("model/{name}/{sub}");
        if !tree.is_group(&group) {
            return Err(Error::config(format!("unknown model `{name}`"))
                .with_hint(format!("available models: {}", tree.subgroups("model").join(", "))));
        }
        let option = format!("{name}.default");
        check_option(tree, &group, &option, &raw)?;
        if let Some(c) = choices.iter_mut().find(|c| c.package == package) {
            c.group = group;
            c.option = option;
        }
    }
    Ok(())
}

fn check_option(tree: &ConfTree, group: &str, option: &str, raw: &str) -> Result<(), Error> {
    let options = tree.options(group);
    if options.iter().any(|o| o == option) {
        return Ok(());
    }
    let message = if options.is_empty() {
        format!("override `{raw}`: `{group}` is not a config group")
    } else {
        format!("override `{raw}`: unknown option `{option}` for group `{group}`")
    };
    let hint = if options.is_empty() {
        "config groups are directories under conf/ (see `llmperf config show`)".to_string()
    } else {
        format!("available options: {}", options.join(", "))
    };
    Err(Error::config(message).with_hint(hint))
}

fn load_choice(tree: &ConfTree, choice: &Choice) -> Result<Vec<Layer>, Error> {
    let rel = format!("{}/{}.yaml", choice.group, choice.option);
    let files = parse_files(tree.read(&rel)?)?;
    if files.is_empty() {
        return Err(Error::config(format!("defaults list: no file conf/{rel}"))
            .with_hint(format!("available options: {}", tree.options(&choice.group).join(", "))));
    }
    Ok(files
        .into_iter()
        .map(|(label, map)| Layer { label, value: nest(&choice.package, Value::Mapping(map)) })
        .collect())
}

/// Place `value` at a dotted package path: `nest("a.b", v)` is `{a: {b: v}}`.
pub(crate) fn nest(package: &str, value: Value) -> Value {
    package.rsplit('.').filter(|p| !p.is_empty()).fold(value, |inner, key| {
        let mut m = Mapping::new();
        m.insert(Value::String(key.into()), inner);
        Value::Mapping(m)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn go(raw: &str) -> GroupOverride {
        let (lhs, option) = raw.split_once('=').unwrap();
        let (group, package) = match lhs.split_once('@') {
            Some((g, p)) => (g.to_string(), Some(p.to_string())),
            None => (lhs.to_string(), None),
        };
        GroupOverride { group, package, option: option.into(), raw: raw.into() }
    }

    #[test]
    fn default_composition_has_every_group_then_self() {
        let c = compose(&ConfTree::default(), &[]).unwrap();
        let packages: Vec<_> = c.choices.iter().map(|c| c.package.as_str()).collect();
        assert_eq!(packages, ["model", "infer", "pipeline.nsys", "pipeline.ncu", "runner"]);
        assert!(c.layers.last().unwrap().label.starts_with("conf/config.yaml"));
    }

    #[test]
    fn group_override_by_package_and_by_group() {
        let tree = ConfTree::default();
        let c = compose(&tree, &[go("profiling/ncu@pipeline.ncu=ncu.high"), go("runner=light")]).unwrap();
        assert!(c.choices.iter().any(|c| c.package == "pipeline.ncu" && c.option == "ncu.high"));
        assert!(c.choices.iter().any(|c| c.package == "runner" && c.option == "light"));
        assert!(c.layers.iter().any(|l| l.label == "conf/profiling/ncu/ncu.high.yaml (embedded)"));
    }

    #[test]
    fn unknown_option_lists_available() {
        let err = compose(&ConfTree::default(), &[go("profiling/ncu@pipeline.ncu=ncu.hgh")]).unwrap_err();
        assert!(err.message.contains("unknown option `ncu.hgh`"), "{}", err.message);
        let hint = err.hint.unwrap();
        assert!(hint.contains("ncu.default") && hint.contains("ncu.high") && hint.contains("ncu.light"), "{hint}");
    }

    #[test]
    fn unknown_model_lists_models() {
        let err = compose(&ConfTree::default(), &[go("model=nope")]).unwrap_err();
        assert!(err.message.contains("unknown model `nope`"));
        assert!(err.hint.unwrap().contains("dummy_shallow_resnet"));
    }

    #[test]
    fn malformed_yaml_names_file_and_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("runner")).unwrap();
        std::fs::write(dir.path().join("runner/broken.yaml"), "run:\n  mode: deep\n  top_n: [1,\n").unwrap();
        let tree = ConfTree::new(Some(dir.path().to_path_buf())).unwrap();
        let err = compose(&tree, &[go("runner=broken")]).unwrap_err();
        assert!(err.message.contains("runner/broken.yaml:"), "{}", err.message);
        assert!(err.message.contains("malformed YAML"), "{}", err.message);
    }

    #[test]
    fn nest_places_value_at_package() {
        let v = nest("a.b", Value::from(1));
        assert_eq!(serde_yaml::to_string(&v).unwrap(), "a:\n  b: 1\n");
    }
}
