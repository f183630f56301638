//! provenance: `nsys/capture.json`, the machine an nsys capture was taken on,
//! as its SQLite export records it (parse::nsys::sqlite reads it). For an
//! imported capture this, not env.json, is the machine that was profiled.
/// `nsys/capture.json`: the machine a capture was taken on, from its export.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CaptureHost {
    /// The nsys that wrote the SQLite export (`EXPORT_PRODUCT_VERSION`).
    pub exported_by: Option<String>,
    pub hostname: Option<String>,
    pub os: Option<String>,
    pub cpu: Option<String>,
    pub cpu_cores: Option<i64>,
    /// As recorded (`NvDriverVersion`; older captures encode 450.51.05 as 4505105).
    pub driver_version: Option<String>,
    /// Where the capturing nsys was installed (its version is in the path).
    pub nsys_target_dir: Option<String>,
    pub gpus: Vec<CaptureGpu>,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CaptureGpu {
    pub id: Option<i64>,
    pub name: Option<String>,
    pub chip: Option<String>,
    pub sm_count: Option<i64>,
    pub memory_bytes: Option<i64>,
    pub memory_bandwidth_bytes_per_s: Option<i64>,
    pub bus: Option<String>,
}
