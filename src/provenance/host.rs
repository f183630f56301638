//! provenance: facts about the machine, for provenance (`env.json`) and `llmperf doctor`.
//! Every probe is allowed to fail: a missing fact is recorded with the reason.
use serde::{Deserialize, Serialize};
use std::time::Duration;

use crate::process::{self, Sink, Spawn};

const SMI_TIMEOUT: Duration = Duration::from_secs(20);
const NVIDIA_PARAMS: &str = "/proc/driver/nvidia/params";

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Cpu {
    pub(crate) model: String,
    pub(crate) logical_cores: usize,
    pub(crate) memory_gib: f64,
}

pub(crate) fn cpu() -> Cpu {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let model = cpuinfo
        .lines()
        .find_map(|l| l.strip_prefix("model name").and_then(|r| r.split_once(':')).map(|(_, v)| v.trim().to_string()))
        .unwrap_or_else(|| "unknown".into());
    let logical_cores = std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1);
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let kib: f64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|r| r.split_whitespace().next()?.parse().ok())
        .unwrap_or(0.0);
    Cpu { model, logical_cores, memory_gib: (kib / 1048576.0 * 10.0).round() / 10.0 }
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Os {
    pub(crate) hostname: String,
    pub(crate) name: String,
    pub(crate) kernel: String,
}

fn read(path: &str) -> String {
    std::fs::read_to_string(path).map(|s| s.trim().to_string()).unwrap_or_default()
}

/// This host's name, as the kernel has it (empty when unreadable).
pub(crate) fn hostname() -> String {
    read("/proc/sys/kernel/hostname")
}

pub(crate) fn os() -> Os {
    let name = read("/etc/os-release")
        .lines()
        .find_map(|l| l.strip_prefix("PRETTY_NAME="))
        .map(|v| v.trim_matches('"').to_string())
        .unwrap_or_else(|| "unknown".into());
    Os { hostname: hostname(), name, kernel: read("/proc/sys/kernel/osrelease") }
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Gpu {
    pub(crate) index: u32,
    pub(crate) name: String,
    pub(crate) driver_version: String,
    pub(crate) memory_mib: Option<u64>,
}

#[derive(Debug, Clone, Serialize, Deserialize, schemars::JsonSchema)]
pub(crate) struct Gpus {
    pub(crate) devices: Vec<Gpu>,
    /// The CUDA version the driver supports (nvidia-smi's banner).
    pub(crate) driver_cuda_version: Option<String>,
    /// Why there are no devices, when there are none.
    pub(crate) note: Option<String>,
}

/// GPUs from nvidia-smi. Being on PATH proves nothing (Debian's Nsight packages
/// bring nvidia-smi to machines without a GPU): its exit status decides.
pub(crate) fn gpus() -> Gpus {
    let none = |note: String| Gpus { devices: Vec::new(), driver_cuda_version: None, note: Some(note) };
    let Some(smi) = crate::process::find_executable("nvidia-smi") else {
        return none("nvidia-smi not found".into());
    };
    let query = ["--query-gpu=index,name,driver_version,memory.total", "--format=csv,noheader,nounits"];
    let done = match smi_run(&smi, &query) {
        Ok(out) => out,
        Err(why) => return none(why),
    };
    let devices = done.lines().filter_map(parse_gpu_line).collect();
    let driver_cuda_version = smi_run(&smi, &[]).ok().and_then(|banner| {
        let re = regex::Regex::new(r"CUDA Version:\s*([0-9.]+)").expect("valid regex");
        Some(re.captures(&banner)?[1].to_string())
    });
    Gpus { devices, driver_cuda_version, note: None }
}

fn smi_run(smi: &std::path::Path, args: &[&str]) -> Result<String, String> {
    let argv = std::iter::once(smi.as_os_str().to_owned()).chain(args.iter().map(Into::into));
    let spec = Spawn::new(argv).stdout(Sink::Capture).stderr(Sink::Capture).timeout(Some(SMI_TIMEOUT));
    let done = process::run(&spec).map_err(|e| e.message)?;
    let out = String::from_utf8_lossy(&done.stdout).trim().to_string();
    if done.success() {
        Ok(out)
    } else {
        let err = String::from_utf8_lossy(&done.stderr);
        let first = out.lines().chain(err.lines()).next().unwrap_or("").trim().to_string();
        Err(format!("nvidia-smi failed ({}): {first}", done.describe()))
    }
}

/// `0, NVIDIA H100 80GB HBM3, 550.54.15, 81559`
fn parse_gpu_line(line: &str) -> Option<Gpu> {
    let f: Vec<&str> = line.split(',').map(str::trim).collect();
    Some(Gpu {
        index: f.first()?.parse().ok()?,
        name: f.get(1)?.to_string(),
        driver_version: f.get(2)?.to_string(),
        memory_mib: f.get(3).and_then(|m| m.parse().ok()),
    })
}

/// Who may read GPU performance counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CounterAccess {
    NoDriver,
    Everyone,
    AdminOnly { is_root: bool },
}

pub(crate) fn counter_access() -> CounterAccess {
    match std::fs::read_to_string(NVIDIA_PARAMS) {
        Err(_) => CounterAccess::NoDriver,
        Ok(text) => parse_counter_access(&text, unsafe { libc::geteuid() } == 0),
    }
}

/// `RmProfilingAdminOnly: 1` in /proc/driver/nvidia/params restricts counters to root.
fn parse_counter_access(params: &str, is_root: bool) -> CounterAccess {
    let admin_only =
        params.lines().find_map(|l| l.strip_prefix("RmProfilingAdminOnly:")).is_some_and(|v| v.trim() == "1");
    if admin_only {
        CounterAccess::AdminOnly { is_root }
    } else {
        CounterAccess::Everyone
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nvidia_smi_csv() {
        let g = parse_gpu_line("0, NVIDIA H100 80GB HBM3, 550.54.15, 81559").unwrap();
        assert_eq!((g.index, g.name.as_str(), g.memory_mib), (0, "NVIDIA H100 80GB HBM3", Some(81559)));
        assert!(parse_gpu_line("No devices were found").is_none());
    }

    #[test]
    fn counter_permission_from_params() {
        let params = "ResmanDebugLevel: 4294967295\nRmProfilingAdminOnly: 1\nEnableMSI: 1\n";
        assert_eq!(parse_counter_access(params, false), CounterAccess::AdminOnly { is_root: false });
        assert_eq!(parse_counter_access("RmProfilingAdminOnly: 0\n", false), CounterAccess::Everyone);
    }

    #[test]
    fn cpu_facts_are_read() {
        let c = cpu();
        assert!(c.logical_cores >= 1 && c.memory_gib > 0.0, "{c:?}");
    }
}
