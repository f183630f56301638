//! provenance: `nsys/capture.json`, the machine an nsys capture was taken on,
//! as its SQLite export records it (parse::nsys::sqlite reads it). For an
//! imported capture this, not env.json, is the machine that was profiled.
/// `nsys/capture.json`: the machine a capture was taken on, from its export.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CaptureHost {
    /// The nsys that wrote the SQLite export (`EXPORT_PRODUCT_VERSION`).
    pub(crate) exported_by: Option<String>,
    pub(crate) hostname: Option<String>,
    pub(crate) os: Option<String>,
    pub(crate) cpu: Option<String>,
    pub(crate) cpu_cores: Option<i64>,
    /// As recorded (`NvDriverVersion`; older captures encode 450.51.05 as 4505105).
    pub(crate) driver_version: Option<String>,
    /// Where the capturing nsys was installed (its version is in the path).
    pub(crate) nsys_target_dir: Option<String>,
    pub(crate) gpus: Vec<CaptureGpu>,
    /// The command nsys launched, as its argv (`META_DATA_CAPTURE`'s
    /// `PROCESS_0:COMMAND` and `ARGUMENT_n`); empty when the export does not say.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) command: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct CaptureGpu {
    pub(crate) id: Option<i64>,
    pub(crate) name: Option<String>,
    pub(crate) chip: Option<String>,
    pub(crate) sm_count: Option<i64>,
    pub(crate) memory_bytes: Option<i64>,
    pub(crate) memory_bandwidth_bytes_per_s: Option<i64>,
    pub(crate) bus: Option<String>,
}
