use super::schema::{Device, ReplayMode, RunMode};
use super::*;
use crate::error::ErrorKind;

thread_local! {
    /// Full merges of every layer (`merged`), counted for the test below.
    pub(super) static MERGES: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Each override is checked against the merge of the layers before it. That
/// merge is kept up to date, never recomputed from every layer: N overrides
/// cost N, not N² (bench/overrides.sh: 4,000 took 8.2 s when it was recomputed).
#[test]
fn overrides_do_not_merge_every_layer_again() {
    let overrides: Vec<String> = (0..2000).map(|i| format!("runner.run.top_n_kernels={i}")).collect();
    let refs: Vec<&str> = overrides.iter().map(String::as_str).collect();
    MERGES.with(|m| m.set(0));
    let r = load_with(&refs).unwrap();
    assert_eq!(r.config.runner.run.top_n_kernels, 1999);
    assert!(MERGES.with(|m| m.get()) <= 2, "{} full merges for 2000 overrides", MERGES.with(|m| m.get()));
    // The kept merge sees what earlier overrides did: a deleted key is gone, a set one is there.
    let e = load_with(&["~pipeline.nsys.extra_args", "pipeline.nsys.extra_args=[]"]).unwrap_err();
    assert!(e.message.contains("unknown key pipeline.nsys.extra_args"), "{}", e.message);
    let r = load_with(&["+runner.run.extra_key=1", "runner.run.top_n_kernels=3"]);
    assert!(r.is_err_and(|e| e.message.contains("extra_key")), "an added key is checked by the schema");
}

fn load_with(overrides: &[&str]) -> Result<Resolved, Error> {
    load(&LoadOptions { overrides: overrides.iter().map(|s| s.to_string()).collect(), ..Default::default() })
}

fn origin_of(r: &Resolved, key: &str) -> String {
    r.origins().into_iter().find(|(k, _, _)| k == key).map(|(_, _, o)| o).unwrap()
}

#[test]
fn embedded_defaults_resolve() {
    let r = load_with(&[]).unwrap();
    assert_eq!(r.config.device, Device::Auto);
    assert_eq!(r.config.pipeline.ncu.ncu_cli.replay_mode, ReplayMode::Kernel);
    assert!(r.config.pipeline.nsys.enable);
    assert!(!r.config.pipeline.ncu.enable);
    assert_eq!(r.config.runner.run.mode, RunMode::Deep);
    assert_eq!(r.config.model.name(), "dummy_shallow_resnet");
    assert_eq!(origin_of(&r, "pipeline.ncu.ncu_cli.replay_mode"), "conf/profiling/ncu/ncu.default.yaml (embedded)");
}

#[test]
fn set_override_changes_value_and_origin() {
    let r = load_with(&["pipeline.ncu.ncu_cli.replay_mode=range", "runner.run.top_n_kernels=7"]).unwrap();
    assert_eq!(r.config.pipeline.ncu.ncu_cli.replay_mode, ReplayMode::Range);
    assert_eq!(r.config.runner.run.top_n_kernels, 7);
    assert_eq!(
        origin_of(&r, "pipeline.ncu.ncu_cli.replay_mode"),
        "command line `pipeline.ncu.ncu_cli.replay_mode=range`"
    );
}

#[test]
fn list_null_and_quoted_values() {
    let r = load_with(&[
        "pipeline.ncu.ncu_cli.nvtx.include=[A,B]",
        "pipeline.ncu.ncu_cli.set=null",
        "pipeline.ncu.ncu_cli.kernel_name=\"regex:gemm.*\"",
    ])
    .unwrap();
    let cli = &r.config.pipeline.ncu.ncu_cli;
    assert_eq!(cli.nvtx.include, ["A", "B"]);
    assert_eq!(cli.set, None);
    assert_eq!(cli.kernel_name.as_deref(), Some("regex:gemm.*"));
}

#[test]
fn unknown_key_suggests_the_close_one() {
    let err = load_with(&["pipeline.ncu.ncu_cli.replay_mod=range"]).unwrap_err();
    assert_eq!(err.kind, ErrorKind::Config);
    assert_eq!(err.message, "unknown key pipeline.ncu.ncu_cli.replay_mod");
    assert_eq!(err.hint.as_deref(), Some("did you mean replay_mode?"));
}

#[test]
fn add_rejects_existing_and_accepts_new_keys() {
    let err = load_with(&["+device=cpu"]).unwrap_err();
    assert!(err.message.contains("already exists"), "{}", err.message);
    // A new key under a struct that denies unknown keys is still refused, by the schema.
    let err = load_with(&["+runner.run.extra=1"]).unwrap_err();
    assert_eq!(err.message.split(" (from").next().unwrap(), "unknown key runner.run.extra");
    // A new key where the schema has an optional slot is accepted.
    let r = load_with(&["+infer.prompt_len=16"]).unwrap();
    assert_eq!(r.config.infer.prompt_len, Some(16));
}

#[test]
fn delete_removes_optional_keys_and_refuses_unknown_ones() {
    let r = load_with(&["~pipeline.ncu.description"]).unwrap();
    assert_eq!(r.config.pipeline.ncu.description, None);
    let err = load_with(&["~pipeline.ncu.descriptio"]).unwrap_err();
    assert_eq!(err.message, "unknown key pipeline.ncu.descriptio");
    // Deleting a required key is reported as missing, not silently defaulted.
    let err = load_with(&["~pipeline.ncu.ncu_cli.replay_mode"]).unwrap_err();
    assert!(err.message.contains("missing key pipeline.ncu.ncu_cli.replay_mode"), "{}", err.message);
}

#[test]
fn group_overrides_select_presets() {
    let r = load_with(&["profiling/ncu@pipeline.ncu=ncu.light"]).unwrap();
    assert_eq!(r.config.pipeline.ncu.ncu_cli.launch_count, Some(200));
    let r = load_with(&["model/dummy_shallow_resnet/arch@model=dummy_shallow_resnet.default"]).unwrap();
    assert_eq!(r.config.model.name(), "dummy_shallow_resnet");
    let r = load_with(&["runner=light"]).unwrap();
    assert_eq!(r.config.runner.run.mode, RunMode::Light);
}

#[test]
fn light_mode_selects_the_light_ncu_preset_unless_one_is_chosen() {
    let r = load_with(&["runner.run.mode=light", "pipeline.ncu.ncu_cli.launch_count=7"]).unwrap();
    assert_eq!(r.config.pipeline.ncu.ncu_cli.sections, ["SpeedOfLight"]);
    assert_eq!(r.config.pipeline.ncu.ncu_cli.launch_count, Some(7), "the user's keys still win");
    let r = load_with(&["runner=light"]).unwrap();
    assert_eq!(r.config.pipeline.ncu.ncu_cli.launch_count, Some(200));
    let r = load_with(&["runner.run.mode=light", "profiling/ncu@pipeline.ncu=ncu.high"]).unwrap();
    assert_ne!(r.config.pipeline.ncu.ncu_cli.launch_count, Some(200));
    let r = load_with(&[]).unwrap();
    assert_eq!(r.config.pipeline.ncu.ncu_cli.launch_count, None);
}

/// Region selectors as users write them: a scalar is a one-element list, and
/// globs are strings (`*` alone was a YAML alias error, `decode*` "expected a sequence").
#[test]
fn region_lists_take_scalars_and_globs() {
    let include = |o: &str| load_with(&[o]).unwrap().config.pipeline.ncu.ncu_cli.nvtx.include;
    assert_eq!(include("pipeline.ncu.ncu_cli.nvtx.include=decode*"), ["decode*"]);
    assert_eq!(include("pipeline.ncu.ncu_cli.nvtx.include=*"), ["*"]);
    assert_eq!(include("pipeline.ncu.ncu_cli.nvtx.include=[*, LLM@decode*]"), ["*", "LLM@decode*"]);
    assert_eq!(include("pipeline.ncu.ncu_cli.nvtx.include=A::A1"), ["A::A1"]);
    assert_eq!(include("pipeline.ncu.ncu_cli.nvtx.include=null"), Vec::<String>::new());
    let err = load_with(&["pipeline.ncu.ncu_cli.nvtx.include={a: 1}"]).unwrap_err();
    assert!(err.message.contains("a string or a list of strings"), "{}", err.message);
}

#[test]
fn invalid_values_name_key_and_choices() {
    let err = load_with(&["pipeline.ncu.ncu_cli.replay_mode=rang"]).unwrap_err();
    assert!(err.message.contains("`rang`"), "{}", err.message);
    assert!(err.message.contains("pipeline.ncu.ncu_cli.replay_mode"), "{}", err.message);
    assert!(err.message.contains("command line"), "{}", err.message);
    assert_eq!(err.hint.as_deref(), Some("expected one of: kernel, application, range, app-range, auto"));

    let err = load_with(&["device=gpu0"]).unwrap_err();
    assert!(err.message.contains("not a device"), "{}", err.message);

    let err = load_with(&["runner.run.top_n_kernels=many"]).unwrap_err();
    assert!(err.message.contains("runner.run.top_n_kernels"), "{}", err.message);
}

fn write(dir: &std::path::Path, rel: &str, text: &str) {
    let path = dir.join(rel);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, text).unwrap();
}

/// embedded < --config-dir < environment < command line, each shown by --origin.
#[test]
fn four_layers_take_precedence_in_order() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "runner/default.yaml", "run:\n  top_n_kernels: 11\n  baseline: true\n");
    write(dir.path(), "config.yaml", "device: cpu\n");
    let opts = |env: Vec<(&str, &str)>, overrides: Vec<&str>| LoadOptions {
        config_dir: Some(dir.path().to_path_buf()),
        env: env.into_iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
        overrides: overrides.into_iter().map(str::to_string).collect(),
    };

    let r = load(&opts(vec![], vec![])).unwrap();
    assert_eq!(r.config.runner.run.top_n_kernels, 11);
    assert!(origin_of(&r, "runner.run.top_n_kernels").ends_with("runner/default.yaml"));
    // Keys the user file does not set still come from the embedded file.
    assert_eq!(origin_of(&r, "runner.run.mode"), "conf/runner/default.yaml (embedded)");
    assert_eq!(r.config.device, Device::Cpu);

    let env = vec![("LLMPERF_RUNNER__RUN__TOP_N_KERNELS", "12"), ("LLMPERF_LOG", "debug")];
    let r = load(&opts(env.clone(), vec![])).unwrap();
    assert_eq!(r.config.runner.run.top_n_kernels, 12);
    assert_eq!(origin_of(&r, "runner.run.top_n_kernels"), "environment LLMPERF_RUNNER__RUN__TOP_N_KERNELS");

    let r = load(&opts(env, vec!["runner.run.top_n_kernels=13"])).unwrap();
    assert_eq!(r.config.runner.run.top_n_kernels, 13);
    assert!(origin_of(&r, "runner.run.top_n_kernels").starts_with("command line"));
}

#[test]
fn unknown_environment_key_is_an_error() {
    let err = load(&LoadOptions { env: vec![("LLMPERF_RUNNER__RUN__TOP_N".into(), "3".into())], ..Default::default() })
        .unwrap_err();
    assert_eq!(err.message, "unknown key runner.run.top_n");
    assert_eq!(err.hint.as_deref(), Some("did you mean top_n_kernels?"));
}

#[test]
fn typo_in_a_user_file_names_the_file() {
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "runner/default.yaml", "run:\n  top_n_kernel: 3\n");
    let err = load(&LoadOptions { config_dir: Some(dir.path().to_path_buf()), ..Default::default() }).unwrap_err();
    assert!(err.message.starts_with("unknown key runner.run.top_n_kernel"), "{}", err.message);
    assert!(err.message.contains("runner/default.yaml"), "{}", err.message);
    assert_eq!(err.hint.as_deref(), Some("did you mean top_n_kernels?"));
}

#[test]
fn show_yaml_round_trips() {
    let r = load_with(&["device=cuda:1"]).unwrap();
    let yaml = r.to_yaml();
    assert!(yaml.contains("device: cuda:1"), "{yaml}");
    let back: Config = serde_yaml::from_str(&yaml).unwrap();
    assert_eq!(back.device, Device::Cuda(1));
}
