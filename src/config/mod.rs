//! config: configuration: the embedded `conf/` tree (or a user's `--config-dir` over
//! it), composed Hydra-style, layered with figment:
//!
//! embedded files < `--config-dir` files < `LLMPERF_*` environment < command-line overrides
//!
//! Each layer is a named figment provider, so `config show --origin` can say
//! where every value came from.
pub(crate) mod bounded;
mod compose;
mod overrides;
pub mod schema;
pub(crate) mod tree;

use figment::value::{Dict, Map, Value};
use figment::{Figment, Metadata, Profile, Provider};
use std::path::PathBuf;

use compose::{GroupOverride, Layer};
pub(crate) use overrides::Override;
pub use schema::Config;
use tree::ConfTree;

use crate::error::{did_you_mean, Error};

const ENV_PREFIX: &str = "LLMPERF_";

/// What to load: a user tree, `LLMPERF_*` variables, overrides in order.
#[derive(Debug, Clone, Default)]
pub struct LoadOptions {
    pub config_dir: Option<PathBuf>,
    pub env: Vec<(String, String)>,
    pub overrides: Vec<String>,
}

impl LoadOptions {
    /// Options with this process's `LLMPERF_*` environment.
    pub(crate) fn from_process_env(config_dir: Option<PathBuf>, overrides: Vec<String>) -> Self {
        let env = std::env::vars().filter(|(k, _)| k.starts_with(ENV_PREFIX)).collect();
        LoadOptions { config_dir, env, overrides }
    }
}

/// The resolved configuration and the layers it came from.
#[derive(Debug)]
pub struct Resolved {
    pub config: Config,
    figment: Figment,
}

impl Resolved {
    /// The resolved configuration as YAML (what `config show` prints and runs record).
    pub(crate) fn to_yaml(&self) -> String {
        serde_yaml::to_string(&self.config).expect("config serializes")
    }

    /// Every leaf key with its value (as JSON) and the layer that set it, sorted by key.
    pub(crate) fn origins(&self) -> Vec<(String, String, String)> {
        let merged: Value = self.figment.extract().unwrap_or(Value::from(Dict::new()));
        let mut out = Vec::new();
        leaves("", &merged, &mut out);
        out.into_iter()
            .map(|(key, value)| {
                let origin =
                    self.figment.find_metadata(&key).map_or_else(|| "unknown".to_string(), |m| m.name.to_string());
                let shown = serde_json::to_string(&value).unwrap_or_default();
                (key, shown, origin)
            })
            .collect()
    }
}

/// One named figment provider.
#[derive(Debug, Clone)]
struct NamedLayer {
    label: String,
    dict: Dict,
}

impl Provider for NamedLayer {
    fn metadata(&self) -> Metadata {
        Metadata::named(self.label.clone())
    }

    fn data(&self) -> Result<Map<Profile, Dict>, figment::Error> {
        Ok(Profile::Default.collect(self.dict.clone()))
    }
}

const NCU_GROUP: &str = "profiling/ncu";
const LIGHT_NCU_PRESET: &str = "ncu.light";

pub fn load(opts: &LoadOptions) -> Result<Resolved, Error> {
    let tree = ConfTree::new(opts.config_dir.clone())?;
    let parsed =
        opts.overrides.iter().map(|o| overrides::parse(o, |g| tree.is_group(g))).collect::<Result<Vec<_>, _>>()?;
    let groups: Vec<GroupOverride> = parsed.iter().filter_map(as_group).collect();
    let composition = compose::compose(&tree, &groups)?;
    let layers = composition.layers.into_iter().map(to_named).collect::<Result<Vec<_>, _>>()?;
    let mut layers = Layers::new(layers);
    for (name, value) in &opts.env {
        apply_env(&mut layers, name, value)?;
    }
    for o in parsed.iter().filter(|o| !matches!(o, Override::Group { .. })) {
        apply(&mut layers, o, &format!("command line `{}`", o.raw()))?;
    }
    let figment = layers.layers.into_iter().fold(Figment::new(), |f, l| f.merge(l));
    let config: Config = figment.extract().map_err(|e| figment_error(&e))?;
    if config.infer.iters == 0 {
        return Err(Error::config("invalid value `0` for infer.iters: nothing would be timed")
            .with_hint("infer.iters=1 times one iteration; the default preset times more"));
    }
    let layers = match &config.model {
        schema::ModelConfig::Hf(h) => h.layers.map(|l| ("model.layers", l)),
        schema::ModelConfig::DecoderLlm(l) => Some(("model.n_layers", l.n_layers)),
        _ => None,
    };
    if let Some((key, n)) = layers.filter(|(_, n)| *n < 1) {
        return Err(Error::config(format!("invalid value `{n}` for {key}: a model needs at least one layer"))
            .with_hint(format!("{key}=1 builds the smallest model of this architecture")));
    }
    if config.runner.run.memory_budget_mib == 0 {
        return Err(Error::config("invalid value `0` for runner.run.memory_budget_mib: an ingestion needs memory")
            .with_hint("the default is runner.run.memory_budget_mib=1024"));
    }
    if config.runner.run.repeat == 0 {
        return Err(Error::config("invalid value `0` for runner.run.repeat: the measured loop must run at least once")
            .with_hint("runner.run.repeat=1 runs it once; runner.run.repeat=5 gives five times the samples"));
    }
    // Light mode means the light ncu preset, unless the user picked one.
    if config.runner.run.mode == schema::RunMode::Light && !groups.iter().any(|g| g.group == NCU_GROUP) {
        let mut light = opts.clone();
        light.overrides.insert(0, format!("{NCU_GROUP}@pipeline.ncu={LIGHT_NCU_PRESET}"));
        return load(&light);
    }
    Ok(Resolved { config, figment })
}

/// A configuration already resolved and written by llmperf (a run's
/// `config.yaml`), read as is: no composition, no layers.
pub(crate) fn load_resolved(path: &std::path::Path) -> Result<Config, Error> {
    let text = bounded::read_yaml(path, "the resolved configuration")?;
    serde_yaml::from_str(&text).map_err(|e| compose::yaml_error(&path.display().to_string(), &e))
}

fn as_group(o: &Override) -> Option<GroupOverride> {
    match o {
        Override::Group { group, package, option, raw } => Some(GroupOverride {
            group: group.clone(),
            package: package.clone(),
            option: option.clone(),
            raw: raw.clone(),
        }),
        _ => None,
    }
}

fn to_named(layer: Layer) -> Result<NamedLayer, Error> {
    Ok(NamedLayer { dict: yaml_to_dict(&layer.value, &layer.label)?, label: layer.label })
}

fn yaml_to_dict(value: &serde_yaml::Value, label: &str) -> Result<Dict, Error> {
    Value::serialize(value)
        .ok()
        .and_then(Value::into_dict)
        .ok_or_else(|| Error::config(format!("{label}: expected a mapping of keys")))
}

/// The layers so far and their merge, kept up to date as layers are added:
/// each override is checked against the merge, so recomputing it from every
/// layer would make N overrides cost N² (4,000 took 8.2 s; bench/overrides.sh).
struct Layers {
    layers: Vec<NamedLayer>,
    current: Value,
}

impl Layers {
    fn new(layers: Vec<NamedLayer>) -> Self {
        let current = merged(&layers);
        Layers { layers, current }
    }

    fn push(&mut self, layer: NamedLayer) {
        if let Value::Dict(_, current) = &mut self.current {
            merge_into(current, &layer.dict);
        }
        self.layers.push(layer);
    }

    fn delete(&mut self, key: &str) {
        for layer in self.layers.iter_mut() {
            remove_path(&mut layer.dict, key);
        }
        if let Value::Dict(_, current) = &mut self.current {
            remove_path(current, key);
        }
    }
}

/// Figment's `merge`: dictionaries merge key by key, anything else is replaced.
fn merge_into(into: &mut Dict, from: &Dict) {
    for (key, value) in from {
        match (into.get_mut(key), value) {
            (Some(Value::Dict(_, inner)), Value::Dict(_, incoming)) => merge_into(inner, incoming),
            _ => {
                into.insert(key.clone(), value.clone());
            }
        }
    }
}

/// `LLMPERF_PIPELINE__NCU__ENABLE=true` sets `pipeline.ncu.enable`. Variables
/// whose first segment is not a top-level key (e.g. `LLMPERF_LOG`) are not config.
fn apply_env(layers: &mut Layers, name: &str, value: &str) -> Result<(), Error> {
    let Some(rest) = name.strip_prefix(ENV_PREFIX) else {
        return Ok(());
    };
    let key = rest.to_lowercase().split("__").collect::<Vec<_>>().join(".");
    let top = key.split('.').next().unwrap_or_default().to_string();
    if layers.current.find_ref(&top).is_none() {
        tracing::debug!("ignoring {name}: `{top}` is not a top-level configuration key");
        return Ok(());
    }
    let raw = format!("{name}={value}");
    let o = overrides::parse(&format!("{key}={value}"), |_| false).map_err(|e| {
        Error::config(format!("environment variable {name}: {}", e.message))
            .with_hint("write LLMPERF_<KEY>__<SUBKEY>=<yaml value>, e.g. LLMPERF_PIPELINE__NCU__ENABLE=true")
    })?;
    let Override::Set { key, value, .. } = o else { unreachable!("parsed as a key") };
    let o = Override::Set { key, value, add: false, raw: raw.clone() };
    apply(layers, &o, &format!("environment {name}"))
}

fn apply(layers: &mut Layers, o: &Override, label: &str) -> Result<(), Error> {
    let current = &layers.current;
    match o {
        Override::Set { key, value, add, raw } => {
            let exists = current.find_ref(key).is_some();
            if !add && !exists {
                return Err(unknown_key(current, key));
            }
            if *add && exists {
                return Err(Error::config(format!("`{raw}`: key {key} already exists"))
                    .with_hint(format!("drop the `+` to change it: {}", raw.trim_start_matches('+'))));
            }
            let dict = yaml_to_dict(&compose::nest(key, value.clone()), label)?;
            layers.push(NamedLayer { label: label.to_string(), dict });
        }
        Override::Delete { key, .. } => {
            if current.find_ref(key).is_none() {
                return Err(unknown_key(current, key));
            }
            layers.delete(key);
        }
        Override::Group { .. } => {}
    }
    Ok(())
}

fn merged(layers: &[NamedLayer]) -> Value {
    #[cfg(test)]
    tests::MERGES.with(|m| m.set(m.get() + 1));
    let figment = layers.iter().cloned().fold(Figment::new(), |f, l| f.merge(l));
    figment.extract().unwrap_or(Value::from(Dict::new()))
}

fn unknown_key(current: &Value, key: &str) -> Error {
    let (parent, last) = key.rsplit_once('.').unwrap_or(("", key));
    let siblings: Vec<String> = match if parent.is_empty() { Some(current) } else { current.find_ref(parent) } {
        Some(Value::Dict(_, d)) => d.keys().cloned().collect(),
        _ => Vec::new(),
    };
    let hint = did_you_mean(last, siblings.iter().map(String::as_str))
        .or_else(|| (!siblings.is_empty()).then(|| format!("keys here: {}", siblings.join(", "))))
        .unwrap_or_else(|| format!("use +{key}=VALUE to add a new key"));
    Error::config(format!("unknown key {key}")).with_hint(hint)
}

fn remove_path(dict: &mut Dict, key: &str) {
    match key.split_once('.') {
        None => {
            dict.remove(key);
        }
        Some((head, rest)) => {
            if let Some(Value::Dict(_, inner)) = dict.get_mut(head) {
                remove_path(inner, rest);
            }
        }
    }
}

fn leaves(prefix: &str, value: &Value, out: &mut Vec<(String, Value)>) {
    match value {
        Value::Dict(_, d) if !d.is_empty() => {
            for (k, v) in d {
                let key = if prefix.is_empty() { k.clone() } else { format!("{prefix}.{k}") };
                leaves(&key, v, out);
            }
        }
        _ => out.push((prefix.to_string(), value.clone())),
    }
}

/// A figment extraction error in our terms: the key, the layer that set it, a hint.
fn figment_error(e: &figment::Error) -> Error {
    use figment::error::Kind;
    let path = e.path.join(".");
    let from = e.metadata.as_ref().map(|m| format!(" (from {})", m.name)).unwrap_or_default();
    // figment's path sometimes already ends in the offending field.
    let join = |p: &str, f: &str| match p {
        "" => f.to_string(),
        p if p == f || p.ends_with(&format!(".{f}")) => p.to_string(),
        p => format!("{p}.{f}"),
    };
    match &e.kind {
        Kind::UnknownField(field, expected) => {
            let hint = did_you_mean(field, expected.iter().copied())
                .unwrap_or_else(|| format!("keys here: {}", expected.join(", ")));
            Error::config(format!("unknown key {}{from}", join(&path, field))).with_hint(hint)
        }
        Kind::MissingField(field) => Error::config(format!("missing key {}", join(&path, field)))
            .with_hint("every configuration needs this key; was it deleted with `~`?"),
        Kind::UnknownVariant(value, expected) => Error::config(format!("invalid value `{value}` for {path}{from}"))
            .with_hint(format!("expected one of: {}", expected.join(", "))),
        other => Error::config(format!("invalid value for {path}{from}: {other}"))
            .with_hint("see docs/configuration.md for the keys and their types"),
    }
}

#[cfg(test)]
mod tests;
