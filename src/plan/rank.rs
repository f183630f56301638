//! rank: which rank of which job this process is (`--rank-from-env`), from
//! the variables the launchers set, for a launcher outside the profiler
//! (`srun -n 16 llmperf profile --rank-from-env -- …`, or under mpirun or
//! torchrun): each rank writes `<root>/<job>/ranks/<rank>/`.
use serde::{Deserialize, Serialize};

use crate::error::Error;

/// The rank variables, in the order they are read: torchrun, Open MPI, MPICH/PMI, Slurm.
pub const RANK_VARS: [&str; 4] = ["RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"];
/// The world size beside each.
const SIZE_VARS: [&str; 4] = ["WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"];
/// The job's id: Slurm, torchrun, Open MPI (PMIx).
const JOB_VARS: [&str; 3] = ["SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "PMIX_NAMESPACE"];

/// `ranks/<rank>/rank.json`: who wrote this rank's run directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RankId {
    pub rank: u32,
    /// The variable the rank came from (`RANK`, `SLURM_PROCID`, …).
    pub rank_from: String,
    /// The job's number of ranks, when the launcher said.
    pub world_size: Option<u32>,
    /// The job directory's name, and where it came from (`--run-id`, `SLURM_JOB_ID`, …).
    pub job: String,
    pub job_from: String,
    /// This host's name.
    pub host: String,
}

/// The rank of this process: the first of [`RANK_VARS`] set, its world size,
/// and the job (`run_id`, else the first of the job variables set).
pub fn from_env(get: impl Fn(&str) -> Option<String>, run_id: Option<&str>, host: &str) -> Result<RankId, Error> {
    let hint_rank = "run llmperf under torchrun, mpirun or srun (they set RANK, OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID), or drop --rank-from-env";
    let (i, var, value) =
        RANK_VARS.iter().enumerate().find_map(|(i, v)| get(v).map(|value| (i, *v, value))).ok_or_else(|| {
            Error::usage(format!("--rank-from-env: none of {} is set", RANK_VARS.join(", "))).with_hint(hint_rank)
        })?;
    let rank: u32 = value.trim().parse().map_err(|_| {
        Error::usage(format!("--rank-from-env: {var}={value:?} is not a rank (a number from 0)")).with_hint(hint_rank)
    })?;
    let world_size = get(SIZE_VARS[i]).and_then(|v| v.trim().parse().ok());
    if let Some(n) = world_size.filter(|&n| rank >= n) {
        return Err(Error::usage(format!("--rank-from-env: {var}={rank} is not below {}={n}", SIZE_VARS[i]))
            .with_hint("check the launcher's environment: a rank counts from 0 up to the world size"));
    }
    let (job, job_from) = match run_id {
        Some(id) => (id.to_string(), "--run-id".to_string()),
        None => JOB_VARS.iter().find_map(|v| get(v).map(|id| (id, v.to_string()))).ok_or_else(|| {
            Error::usage(format!(
                "--rank-from-env: no job id to name the run directory ({} unset)",
                JOB_VARS.join(", ")
            ))
            .with_hint("pass --run-id NAME, the same for every rank of the job (e.g. --run-id $(date +%Y%m%d)-infer)")
        })?,
    };
    let job = sanitize(&job);
    if job.is_empty() || job == "." || job == ".." {
        return Err(Error::usage(format!("--rank-from-env: the job id {job:?} names no directory"))
            .with_hint("pass --run-id NAME with letters, digits, '.', '_' or '-'"));
    }
    Ok(RankId { rank, rank_from: var.to_string(), world_size, job, job_from, host: host.to_string() })
}

/// A job id as one path component: letters, digits, `.`, `_` and `-` kept, the rest `_`.
fn sanitize(id: &str) -> String {
    id.trim().chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn each_launcher_names_the_rank_and_the_job() {
        let slurm =
            from_env(env(&[("SLURM_PROCID", "3"), ("SLURM_NTASKS", "16"), ("SLURM_JOB_ID", "4711")]), None, "n1");
        let r = slurm.unwrap();
        assert_eq!((r.rank, r.rank_from.as_str(), r.world_size, r.job.as_str()), (3, "SLURM_PROCID", Some(16), "4711"));
        // torchrun's RANK wins over Slurm's when both are set (torchrun inside an allocation).
        let both = env(&[("RANK", "1"), ("WORLD_SIZE", "2"), ("SLURM_PROCID", "0"), ("TORCHELASTIC_RUN_ID", "a/b")]);
        let r = from_env(both, None, "n1").unwrap();
        assert_eq!(
            (r.rank, r.rank_from.as_str(), r.job.as_str(), r.job_from.as_str()),
            (1, "RANK", "a_b", "TORCHELASTIC_RUN_ID")
        );
        let r = from_env(env(&[("OMPI_COMM_WORLD_RANK", "0")]), Some("run-1"), "n1").unwrap();
        assert_eq!((r.job.as_str(), r.job_from.as_str(), r.world_size), ("run-1", "--run-id", None));
    }

    #[test]
    fn missing_or_bad_variables_are_errors_with_hints() {
        for (pairs, run_id, says) in [
            (&[][..], Some("x"), "none of RANK"),
            (&[("RANK", "one")][..], Some("x"), "is not a rank"),
            (&[("RANK", "4"), ("WORLD_SIZE", "4")][..], Some("x"), "is not below WORLD_SIZE=4"),
            (&[("RANK", "0")][..], None, "no job id"),
            (&[("RANK", "0")][..], Some(".."), "names no directory"),
        ] {
            let e = from_env(env(pairs), run_id, "h").unwrap_err();
            assert!(e.message.contains(says), "{}", e.message);
            assert!(e.hint.is_some());
        }
    }
}
