//! report: peak throughput for MFU and MBU: the GPU table in
//! conf/hardware/gpu_peaks.yaml (NVIDIA's data sheets), a user's override
//! (`hardware.peak_tflops`, `peak_gbps`), or on
//! CPU the workload's own calibration. An unknown GPU gets no MFU, never a
//! made-up default.
use serde::{Deserialize, Serialize};

use crate::config::schema::Hardware;
use crate::error::Error;
use crate::timings::Calibration;

pub(crate) const TABLE: &str = "conf/hardware/gpu_peaks.yaml";

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct Table {
    gpus: Vec<GpuPeak>,
}

/// One row of the table, TFLOPS and GB/s, dense.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub(crate) struct GpuPeak {
    pub(crate) name: String,
    #[serde(rename = "match")]
    pub(crate) tokens: Vec<String>,
    #[serde(default)]
    pub(crate) unless: Vec<String>,
    pub(crate) fp16_bf16: f64,
    pub(crate) tf32: f64,
    pub(crate) fp32: f64,
    pub(crate) memory_gbps: f64,
}

/// The embedded table.
pub(crate) fn table() -> Result<Vec<GpuPeak>, Error> {
    let text = crate::config::tree::ConfTree::embedded_data("hardware/gpu_peaks.yaml").unwrap_or_default();
    serde_yaml::from_str::<Table>(text)
        .map(|t| t.gpus)
        .map_err(|e| Error::config(format!("{TABLE}: {e}")).with_hint("this file ships with llmperf: rebuild it"))
}

fn tokens(name: &str) -> Vec<String> {
    name.to_lowercase()
        .split(|c: char| !c.is_ascii_alphanumeric())
        .filter(|t| !t.is_empty())
        .map(String::from)
        .collect()
}

/// The most specific row whose tokens all appear in `gpu_name` (and none of its `unless`).
pub(crate) fn lookup<'t>(table: &'t [GpuPeak], gpu_name: &str) -> Option<&'t GpuPeak> {
    let have = tokens(gpu_name);
    let has = |t: &String| have.iter().any(|h| h == &t.to_lowercase());
    table.iter().filter(|g| g.tokens.iter().all(has) && !g.unless.iter().any(has)).max_by_key(|g| g.tokens.len())
}

/// The peaks an MFU/MBU computation used, and where they came from.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Peak {
    /// FLOP/s for the workload's dtype.
    pub(crate) flops: Option<f64>,
    /// Bytes/s.
    pub(crate) bytes_per_s: Option<f64>,
    /// "H100 SXM5, FP16/BF16 tensor (conf/hardware/gpu_peaks.yaml)", "hardware.peak_tflops", ...
    pub(crate) source: String,
    /// Why a peak is missing (then MFU/MBU are not computed), with a hint.
    pub(crate) missing: Option<String>,
}

/// Pick the peak: the user's override first, then the GPU table (by the
/// device's name), then on CPU the calibration measured by the workload.
pub(crate) fn choose(
    hw: &Hardware,
    device: &str,
    gpu_name: Option<&str>,
    dtype: &str,
    calibration: Option<&Calibration>,
) -> Result<Peak, Error> {
    if let Some(tflops) = hw.peak_tflops {
        let gbps = hw.peak_gbps;
        let source = "hardware.peak_tflops / hardware.peak_gbps (user override)".to_string();
        return Ok(Peak { flops: Some(tflops * 1e12), bytes_per_s: gbps.map(|g| g * 1e9), source, missing: None });
    }
    if device == "cpu" {
        return Ok(match calibration {
            Some(c) => Peak {
                flops: Some(c.matmul_flops_per_s),
                bytes_per_s: Some(c.copy_bytes_per_s),
                source: format!("measured on this CPU by the workload: {} (not a datasheet peak)", c.method),
                missing: None,
            },
            None => Peak {
                flops: None,
                bytes_per_s: None,
                source: String::new(),
                missing: Some(
                    "MFU not computed: a CPU run without a calibration (hint: set hardware.peak_tflops)".into(),
                ),
            },
        });
    }
    let Some(name) = gpu_name else {
        return Ok(Peak {
            flops: None,
            bytes_per_s: None,
            source: String::new(),
            missing: Some(format!("MFU not computed: no GPU name known for {} (hint: name it, hardware.gpu=H100-SXM, or set hardware.peak_tflops and hardware.peak_gbps)", if device == "cuda" { "this run's GPU" } else { device })),
        });
    };
    let table = table()?;
    Ok(match lookup(&table, name) {
        Some(g) => {
            let (tflops, column) = match dtype {
                "f16" | "bf16" | "float16" | "bfloat16" => (g.fp16_bf16, "FP16/BF16 tensor, FP32 accumulate, dense"),
                _ => (g.fp32, "FP32 (no TF32), dense"),
            };
            Peak {
                flops: Some(tflops * 1e12),
                bytes_per_s: Some(hw.peak_gbps.unwrap_or(g.memory_gbps) * 1e9),
                source: format!("{}, {column}, {} GB/s ({TABLE})", g.name, g.memory_gbps),
                missing: None,
            }
        }
        None => Peak {
            flops: None,
            bytes_per_s: hw.peak_gbps.map(|g| g * 1e9),
            source: String::new(),
            missing: Some(format!(
                "MFU not computed: unknown peak for {name} (hint: set hardware.peak_tflops and hardware.peak_gbps, or add it to {TABLE})"
            )),
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn name_of(gpu: &str) -> Option<String> {
        lookup(&table().unwrap(), gpu).map(|g| g.name.clone())
    }

    #[test]
    fn gpu_names_as_nvidia_smi_prints_them() {
        assert_eq!(name_of("NVIDIA H100 80GB HBM3").as_deref(), Some("H100 SXM5"));
        assert_eq!(name_of("NVIDIA H100 PCIe").as_deref(), Some("H100 PCIe"));
        assert_eq!(name_of("NVIDIA H100 NVL").as_deref(), Some("H100 NVL"));
        assert_eq!(name_of("NVIDIA L40S").as_deref(), Some("L40S"));
        assert_eq!(name_of("NVIDIA GeForce RTX 4090").as_deref(), Some("RTX 4090"));
        assert_eq!(name_of("NVIDIA A100-SXM4-80GB").as_deref(), Some("A100 SXM4 80GB"));
        assert_eq!(name_of("NVIDIA A100-PCIE-40GB").as_deref(), Some("A100 PCIe 40GB"));
        assert_eq!(name_of("NVIDIA A100 80GB PCIe").as_deref(), Some("A100 PCIe 80GB"));
        assert_eq!(name_of("NVIDIA GeForce RTX 3090 Ti"), None, "a Ti is not a 3090");
        assert_eq!(name_of("NVIDIA GeForce RTX 5090"), None);
        assert_eq!(name_of("Tesla T4"), None);
    }

    fn hw(tflops: Option<f64>, gbps: Option<f64>) -> Hardware {
        Hardware { peak_tflops: tflops, peak_gbps: gbps, gpu: None }
    }

    #[test]
    fn the_peak_follows_dtype_override_and_device() {
        let p = choose(&hw(None, None), "cuda:0", Some("NVIDIA H100 80GB HBM3"), "bf16", None).unwrap();
        assert_eq!((p.flops, p.bytes_per_s), (Some(989e12), Some(3350e9)));
        assert!(p.source.starts_with("H100 SXM5, FP16/BF16 tensor"), "{}", p.source);
        let p = choose(&hw(None, None), "cuda:0", Some("NVIDIA H100 80GB HBM3"), "f32", None).unwrap();
        assert_eq!(p.flops, Some(67e12));
        let p = choose(&hw(Some(100.0), Some(1000.0)), "cuda:0", Some("NVIDIA H100 PCIe"), "f16", None).unwrap();
        assert_eq!((p.flops, p.bytes_per_s), (Some(100e12), Some(1000e9)));
        assert!(p.source.contains("user override"));
        let p = choose(&hw(None, None), "cuda:0", Some("NVIDIA GeForce RTX 5090"), "f16", None).unwrap();
        assert_eq!(p.flops, None);
        assert_eq!(
            p.missing.as_deref(),
            Some("MFU not computed: unknown peak for NVIDIA GeForce RTX 5090 (hint: set hardware.peak_tflops and hardware.peak_gbps, or add it to conf/hardware/gpu_peaks.yaml)")
        );
        let cal = Calibration { method: "m".into(), matmul_flops_per_s: 5e10, copy_bytes_per_s: 2e10 };
        let p = choose(&hw(None, None), "cpu", None, "f32", Some(&cal)).unwrap();
        assert_eq!((p.flops, p.bytes_per_s), (Some(5e10), Some(2e10)));
        assert!(p.source.contains("measured on this CPU"));
        assert!(choose(&hw(None, None), "cpu", None, "f32", None).unwrap().missing.is_some());
    }
}
