//! provenance: `env.json` (machine, tools, libraries) and
//! `inputs.yaml` (what was profiled). Written at the start of a run, so even a
//! run that dies early says where it ran; inputs.yaml gains the model metadata
//! once a built-in workload has run.
use serde::{Deserialize, Serialize};
use std::ffi::OsString;

use crate::config::Config;
use crate::error::Error;
pub(crate) mod capture;
pub(crate) mod host;
pub(crate) mod libtorch;

use crate::profile::tools::{Probed, Tool};
use crate::run_dir::utc_now;
use host::{CounterAccess, Cpu, Gpus, Os};
use libtorch::Libtorch;

pub(crate) const ENV_SCHEMA: &str = "llmperf.env/v1";

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Env {
    pub(crate) schema: String,
    pub(crate) collected_at: String,
    pub(crate) os: Os,
    pub(crate) cpu: Cpu,
    pub(crate) gpus: Gpus,
    pub(crate) gpu_counter_access: CounterAccess,
    pub(crate) tools: Tools,
    pub(crate) libtorch: Libtorch,
    pub(crate) llmperf: Llmperf,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Tools {
    pub(crate) nsys: ToolFact,
    pub(crate) ncu: ToolFact,
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct ToolFact {
    pub(crate) path: Option<String>,
    pub(crate) version: Option<String>,
    pub(crate) version_text: Option<String>,
    pub(crate) error: Option<String>,
}

impl ToolFact {
    fn of(probe: &Result<Tool, Error>) -> Self {
        match probe {
            Ok(t) => ToolFact {
                path: Some(t.path.display().to_string()),
                version: Some(t.version.to_string()),
                version_text: Some(t.version_text.clone()),
                error: None,
            },
            Err(e) => ToolFact { path: None, version: None, version_text: None, error: Some(e.message.clone()) },
        }
    }
}

#[derive(Debug, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Llmperf {
    pub(crate) version: String,
    pub(crate) git_revision: String,
}

pub(crate) fn llmperf() -> Llmperf {
    Llmperf { version: env!("CARGO_PKG_VERSION").into(), git_revision: env!("LLMPERF_GIT_REV").into() }
}

/// `builtin`: the run's workload is a built-in one, whose own process
/// describes libtorch ([`add_libtorch`]); this process never loads it: that
/// costs ~0.5 s at start and exit, and a user's command does not use
/// llmperf's libtorch at all.
pub(crate) fn collect_env(tools: &Probed, builtin: bool) -> Env {
    Env {
        schema: ENV_SCHEMA.into(),
        collected_at: utc_now(),
        os: host::os(),
        cpu: host::cpu(),
        gpus: host::gpus(),
        gpu_counter_access: host::counter_access(),
        tools: Tools { nsys: ToolFact::of(&tools.nsys), ncu: ToolFact::of(&tools.ncu) },
        libtorch: if builtin {
            Libtorch::not_loaded(NOT_DESCRIBED)
        } else {
            Libtorch::not_loaded("not loaded: the workload is a user command")
        },
        llmperf: llmperf(),
    }
}

/// A run's provenance, before any stage runs: `config.yaml` (the resolved
/// configuration), `inputs.yaml` (what is profiled) and `env.json`.
pub(crate) fn write(
    run: &crate::run_dir::RunDir,
    resolved: &crate::config::Resolved,
    app: &[OsString],
    builtin: bool,
    tools: &Probed,
) -> Result<(), Error> {
    use crate::run_dir::{CONFIG_YAML, ENV_JSON, INPUTS_YAML};
    run.write(CONFIG_YAML, resolved.to_yaml().as_bytes())?;
    run.write_yaml(INPUTS_YAML, &inputs(&resolved.config, app, builtin))?;
    run.write_json(ENV_JSON, &collect_env(tools, builtin))?;
    Ok(())
}

/// `inputs.yaml`: the profiled command and, for built-in workloads, the model.
#[derive(Debug, Serialize)]
pub(crate) struct Inputs {
    pub(crate) schema: &'static str,
    pub(crate) workload: Workload,
    pub(crate) device: String,
    /// What the built-in workload reported about its model (parameter count,
    /// layers, hidden size, heads, vocab, dtype, input shapes), once it has run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) model_metadata: Option<crate::timings::ModelMeta>,
}

#[derive(Debug, Serialize)]
pub(crate) struct Workload {
    /// `command` (a user's command after `--`) or `builtin`.
    pub(crate) kind: &'static str,
    pub(crate) argv: Vec<String>,
    /// The model configuration, for built-in workloads.
    pub(crate) model: Option<serde_yaml::Value>,
}

pub(crate) fn inputs(cfg: &Config, argv: &[OsString], builtin: bool) -> Inputs {
    let model = builtin.then(|| serde_yaml::to_value(&cfg.model).unwrap_or(serde_yaml::Value::Null));
    Inputs {
        schema: "llmperf.inputs/v1",
        workload: Workload {
            kind: if builtin { "builtin" } else { "command" },
            argv: argv.iter().map(|a| a.to_string_lossy().into_owned()).collect(),
            model,
        },
        device: cfg.device.to_string(),
        model_metadata: None,
    }
}

const NOT_DESCRIBED: &str = "not described: the built-in workload did not start (see the stage logs)";

/// Complete `env.json` with libtorch as the built-in workload's process saw it
/// (`workload/libtorch.json`), once a workload process has run.
pub(crate) fn add_libtorch(run: &crate::run_dir::RunDir) -> Result<(), crate::error::Error> {
    use crate::run_dir::{ENV_JSON, LIBTORCH_JSON};
    let (Some(lt), Some(mut env)) = (run.read_json::<Libtorch>(LIBTORCH_JSON), run.read_json::<Env>(ENV_JSON)) else {
        return Ok(());
    };
    env.libtorch = lt;
    run.write_json(ENV_JSON, &env)?;
    Ok(())
}

/// Complete `inputs.yaml` with the model metadata from `workload/timings.json`, if the workload wrote it.
pub(crate) fn add_model_metadata(run: &crate::run_dir::RunDir, mut inputs: Inputs) -> Result<(), crate::error::Error> {
    if let Some(t) = run.read_json::<crate::timings::Timings>(crate::run_dir::TIMINGS_JSON) {
        inputs.model_metadata = Some(t.model);
        run.write_yaml(crate::run_dir::INPUTS_YAML, &inputs)?;
    }
    Ok(())
}
