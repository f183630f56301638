//! rank: which rank of which job this process is (`--rank-from-env`), from
//! the variables the launchers set, for a launcher outside the profiler
//! (`srun -n 16 llmperf profile --rank-from-env -- …`, or under mpirun or
//! torchrun): each rank writes `<root>/<job>/ranks/<rank>/`.
use serde::{Deserialize, Serialize};

use crate::error::Error;

/// The rank variables, in the order they are read: torchrun, Open MPI, MPICH/PMI, Slurm.
pub(crate) const RANK_VARS: [&str; 4] = ["RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"];
/// The world size beside each.
const SIZE_VARS: [&str; 4] = ["WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "SLURM_NTASKS"];
/// The job's id: Slurm, torchrun, Open MPI (PMIx).
const JOB_VARS: [&str; 3] = ["SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "PMIX_NAMESPACE"];

/// `ranks/<rank>/rank.json`: who wrote this rank's run directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub(crate) struct RankId {
    pub(crate) rank: u32,
    /// The variable the rank came from (`RANK`, `SLURM_PROCID`, …).
    pub(crate) rank_from: String,
    /// The job's number of ranks, when the launcher said.
    pub(crate) world_size: Option<u32>,
    /// The job directory's name, and where it came from (`--run-id`, `SLURM_JOB_ID`, …).
    pub(crate) job: String,
    pub(crate) job_from: String,
    /// This host's name.
    pub(crate) host: String,
    /// The profilers that ran on this rank (`pipeline.{nsys,ncu}.ranks`); the
    /// others' stages ran the application plainly. Absent in older files.
    #[serde(default)]
    pub(crate) profiled: Vec<String>,
}

/// The rank the launcher gave this process: the first of [`RANK_VARS`] set,
/// the variable, and the world size beside it. `who` names the asker in errors.
pub(crate) fn rank_of(
    get: &impl Fn(&str) -> Option<String>,
    who: &str,
) -> Result<(u32, &'static str, Option<u32>), Error> {
    let hint_rank = "run llmperf under torchrun, mpirun or srun (they set RANK, OMPI_COMM_WORLD_RANK, PMI_RANK or SLURM_PROCID), or drop --rank-from-env";
    let (i, var, value) =
        RANK_VARS.iter().enumerate().find_map(|(i, v)| get(v).map(|value| (i, *v, value))).ok_or_else(|| {
            Error::usage(format!("{who}: none of {} is set", RANK_VARS.join(", "))).with_hint(hint_rank)
        })?;
    let rank: u32 = value.trim().parse().map_err(|_| {
        Error::usage(format!("{who}: {var}={value:?} is not a rank (a number from 0)")).with_hint(hint_rank)
    })?;
    let world_size = get(SIZE_VARS[i]).and_then(|v| v.trim().parse().ok());
    if let Some(n) = world_size.filter(|&n| rank >= n) {
        return Err(Error::usage(format!("{who}: {var}={rank} is not below {}={n}", SIZE_VARS[i]))
            .with_hint("check the launcher's environment: a rank counts from 0 up to the world size"));
    }
    Ok((rank, var, world_size))
}

/// The rank of this process: the first of [`RANK_VARS`] set, its world size,
/// and the job (`run_id`, else the first of the job variables set).
pub(crate) fn from_env(
    get: impl Fn(&str) -> Option<String>,
    run_id: Option<&str>,
    host: &str,
) -> Result<RankId, Error> {
    let (rank, var, world_size) = rank_of(&get, "--rank-from-env")?;
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
    let job = job_name(&job, "--rank-from-env")?;
    Ok(RankId {
        rank,
        rank_from: var.to_string(),
        world_size,
        job,
        job_from,
        host: host.to_string(),
        profiled: Vec::new(),
    })
}

/// Each file's rank: the last number in its name (`report.3.nsys-rep`,
/// `rep_rank12.sqlite`), as `nsys -o report.%q{RANK}` names them.
pub(crate) fn ranks_of_files(files: &[std::path::PathBuf]) -> Result<Vec<(u32, std::path::PathBuf)>, Error> {
    let mut out: Vec<(u32, std::path::PathBuf)> = Vec::new();
    for f in files {
        let name = f.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
        let digits: String = {
            let end = name.rfind(|c: char| c.is_ascii_digit()).map(|i| i + 1);
            let head = &name[..end.unwrap_or(0)];
            let start = head.rfind(|c: char| !c.is_ascii_digit()).map_or(0, |i| i + 1);
            head[start..].to_string()
        };
        let rank: u32 = digits.parse().map_err(|_| {
            Error::usage(format!(
                "{}: no rank number in the file name, and several files are the ranks of one job",
                f.display()
            ))
            .with_hint(
                "name each rank's report by its rank (nsys profile -o report.%q{RANK}), or import one file at a time",
            )
        })?;
        if let Some((_, other)) = out.iter().find(|(r, _)| *r == rank) {
            return Err(Error::usage(format!("{} and {} both name rank {rank}", other.display(), f.display()))
                .with_hint("pass each rank's report once (the rank is the last number in the file name)"));
        }
        out.push((rank, f.clone()));
    }
    out.sort_by_key(|(r, _)| *r);
    Ok(out)
}

/// A job id as one path component: letters, digits, `.`, `_` and `-` kept, the rest `_`.
/// The job directory's name from a job id: [`sanitize`]d, and refused when
/// it would name no directory of its own (empty, `.`, `..`: the artifacts
/// root itself, or its parent). `who` names the asker in the error.
pub(crate) fn job_name(id: &str, who: &str) -> Result<String, Error> {
    let job = sanitize(id);
    if job.is_empty() || job.chars().all(|c| c == '.') {
        return Err(Error::usage(format!("{who}: the job id {id:?} names no directory of its own"))
            .with_hint("pass --run-id NAME with letters, digits, '.', '_' or '-' (not only dots)"));
    }
    Ok(job)
}

pub(crate) fn sanitize(id: &str) -> String {
    id.trim().chars().map(|c| if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') { c } else { '_' }).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    #[test]
    fn a_job_id_that_names_no_directory_of_its_own_is_refused() {
        for bad in ["", " ", ".", "..", "..."] {
            let e = job_name(bad, "--launcher srun").expect_err(bad);
            assert!(e.message.starts_with("--launcher srun: the job id"), "{}", e.message);
        }
        assert_eq!(job_name("../etc", "x").unwrap(), ".._etc");
        assert_eq!(job_name("2026-11-25.infer", "x").unwrap(), "2026-11-25.infer");
    }

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
    fn a_files_rank_is_the_last_number_in_its_name() {
        let files: Vec<std::path::PathBuf> =
            ["run2/report.1.nsys-rep", "rep_rank0.sqlite", "x/report.10.qdrep"].iter().map(Into::into).collect();
        let r = ranks_of_files(&files).unwrap();
        assert_eq!(r.iter().map(|x| x.0).collect::<Vec<_>>(), [0, 1, 10]);
        assert_eq!(r[0].1, std::path::PathBuf::from("rep_rank0.sqlite"));
        let e = ranks_of_files(&["a.1.sqlite".into(), "b.1.sqlite".into()]).unwrap_err();
        assert!(e.message.contains("both name rank 1") && e.hint.is_some(), "{}", e.message);
        let e = ranks_of_files(&["report.sqlite".into()]).unwrap_err();
        assert!(e.message.contains("no rank number"), "{}", e.message);
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
