//! pipeline: a job's launcher. `llmperf launch-rank`, the shim every rank of
//! `profile --launcher torchrun|mpirun` runs first (it records the rank its
//! launcher gave it, then becomes the application); and `profile --launcher
//! srun`, both steps of the launcher outside the profiler: every rank
//! profiles itself (`--rank-from-env`), then the job is merged.
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};

use super::stage::Outcome;
use crate::error::{Error, ErrorKind};
use crate::plan::launcher::Launcher;
use crate::plan::rank;
use crate::plan::SrunJob;
use crate::process::{self, Exit, Sink, Spawn};
use crate::run_dir::{self, LaunchedRank, RunDir};

/// The variable the shim sets for the application: its rank (the built-in
/// workload names its timings file by it).
pub(crate) const RANK_ENV: &str = "LLMPERF_RANK";

/// `llmperf launch-rank`: record this process's rank (`record/<pid>.json`),
/// then exec ARGV (without its first `wrapper_len` words unless this rank is
/// one of `wrap_ranks`). The process id stays the application's, so the
/// capture's process is the rank recorded. Returns only when it cannot exec.
pub(crate) fn launch_rank(record: Option<&Path>, wrap_ranks: &[u32], wrapper_len: usize, argv: &[OsString]) -> Error {
    let get = |k: &str| std::env::var(k).ok();
    let (rank, var, world_size) = match rank::rank_of(&get, "launch-rank") {
        Ok(r) => r,
        Err(e) => return e,
    };
    let process_id = i64::from(std::process::id());
    if let Some(dir) = record {
        let me = LaunchedRank {
            rank,
            rank_from: var.into(),
            world_size,
            process_id,
            host: crate::provenance::host::hostname(),
        };
        let written = std::fs::create_dir_all(dir)
            .map_err(|e| run_dir::io_error(dir, "create", &e))
            .and_then(|_| run_dir::write_json_atomic(&dir.join(format!("{process_id}.json")), &me));
        if let Err(e) = written {
            return e;
        }
    }
    let skip = if wrap_ranks.is_empty() || wrap_ranks.contains(&rank) { 0 } else { wrapper_len };
    let Some((program, args)) = argv.get(skip..).and_then(<[OsString]>::split_first) else {
        return Error::usage("launch-rank: no command after --")
            .with_hint("llmperf profile --launcher starts it; run that");
    };
    let err = std::process::Command::new(program).args(args).env(RANK_ENV, rank.to_string()).exec();
    Error::new(ErrorKind::StageFailed, format!("rank {rank}: cannot run `{}`: {err}", program.to_string_lossy()))
        .with_hint("check that the command after -- exists and is executable on every node")
}

/// `profile --launcher srun -n N …` as the plan has it: the job directory
/// (`--run-id`'s, else a new one with the plan's id: two jobs never share
/// one), srun running `llmperf profile --rank-from-env --run-id JOB …` on
/// every rank, then `llmperf merge` of the job. A failed srun fails the run
/// after the merge of what the ranks wrote.
pub(crate) fn srun(job: &SrunJob) -> Result<Outcome, Error> {
    let job_dir = match job.named {
        true => {
            let dir = job.root.join(&job.job);
            std::fs::create_dir_all(&dir).map_err(|e| run_dir::io_error(&dir, "create the job directory", &e))?;
            dir
        }
        false => RunDir::create_named(&job.root, &job.job)?.path().to_path_buf(),
    };
    let spec = Spawn::new(job.argv.clone()).stdout(Sink::File(job_dir.join("srun.stdout.log"))).stderr(Sink::Inherit);
    run_dir::write_atomic(&job_dir.join("srun.cmd.txt"), format!("{}\n", spec.display()).as_bytes())?;
    tracing::info!("srun: {}", spec.display());
    let done = process::run(&spec)?;
    let merged = super::merge::merge(std::slice::from_ref(&job_dir));
    // JOB/ranks.md is the merge's output: where no rank wrote its directory there is none to point at.
    let hint = match job_dir.join(run_dir::RANKS_MD).is_file() {
        true => format!("see ranks.md in {} for each rank's status", job_dir.display()),
        false => format!(
            "no rank wrote its run directory: see srun's messages above and srun.stdout.log in {}",
            job_dir.display()
        ),
    };
    let failed = match done.exit {
        Exit::Code(0) => None,
        Exit::Interrupted => Some(crate::signals::interrupted()),
        _ => Some(Error::new(ErrorKind::StageFailed, format!("srun {}", done.describe())).with_hint(hint)),
    };
    Ok(Outcome { run_dir: job_dir, error: failed.or(merged.err()) })
}

/// The launcher of `--launcher KIND -n N`, checked before anything runs.
pub(crate) fn launcher_of(
    kind: crate::plan::launcher::LauncherKind,
    nproc: u32,
    extra: Vec<String>,
) -> Result<Launcher, Error> {
    use crate::plan::launcher::LauncherKind;
    if nproc == 0 {
        return Err(Error::usage("--nproc 0: a job has at least one rank").with_hint("pass --nproc N with N ≥ 1"));
    }
    let program = kind.program();
    let found = process::find_executable(program).ok_or_else(|| {
        let hint = match kind {
            LauncherKind::Torchrun => {
                "torchrun comes with PyTorch: activate its venv, or `make setup` for the project's"
            }
            LauncherKind::Mpirun => "install an MPI (Debian: apt-get install openmpi-bin)",
            LauncherKind::Srun => "run on a Slurm cluster's login node, inside an allocation (salloc, sbatch)",
        };
        Error::usage(format!("--launcher {program}: `{program}` is not on PATH")).with_hint(hint)
    })?;
    let exe = std::env::current_exe()
        .map_err(|e| Error::new(ErrorKind::Internal, format!("cannot locate the llmperf executable: {e}")))?;
    // SAFETY: geteuid cannot fail and touches no memory.
    let as_root = unsafe { libc::geteuid() } == 0;
    let python = (kind == LauncherKind::Torchrun).then(|| python_of(Some(&found)));
    Ok(Launcher { kind, nproc, extra, as_root, exe, python })
}

/// The Python that a torchrun script runs with: its `#!` line (a venv's
/// torchrun names the venv's python), else `python3`.
pub(crate) fn python_of(torchrun: Option<&Path>) -> PathBuf {
    let line = torchrun.and_then(|p| std::fs::read(p).ok()).and_then(|b| {
        let first = b.split(|&c| c == b'\n').next()?.to_vec();
        String::from_utf8(first).ok()
    });
    match line.as_deref().and_then(|l| l.strip_prefix("#!")) {
        Some(interp) if !interp.trim().is_empty() && !interp.contains("/env ") => PathBuf::from(interp.trim()),
        _ => PathBuf::from("python3"),
    }
}

/// The first rank that failed, as its launcher reported it on stderr.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RankFailure {
    pub(crate) launcher: &'static str,
    pub(crate) rank: u32,
    /// "exited with code 3", "was killed by signal 9".
    pub(crate) how: String,
    pub(crate) pid: Option<i64>,
    pub(crate) host: Option<String>,
}

/// The launcher's own report of its first failing rank: Open MPI's banner
/// (`Process name: [[J,S],R]` then `Exit code: N`, or `process rank R with PID
/// P on node H exited on signal N`) or torchrun's "Root Cause (first
/// observed failure)" block (`rank : R (local_rank: L)`, `exitcode : N (pid:
/// P)`, a negative code being a signal). None for anything else.
pub(crate) fn first_failed_rank(stderr: &str) -> Option<RankFailure> {
    let lines: Vec<&str> = stderr.lines().collect();
    // torchrun (torch.distributed.elastic), the last block.
    if let Some(start) = lines.iter().rposition(|l| l.starts_with("Root Cause (first observed failure)")) {
        let block = &lines[start..];
        let rank = block.iter().find_map(|l| field(l, "rank"))?.split_whitespace().next()?.parse().ok()?;
        let exit = block.iter().find_map(|l| field(l, "exitcode"))?;
        let code: i32 = exit.split_whitespace().next()?.parse().ok()?;
        let pid = exit.split_once("(pid:").and_then(|(_, p)| p.trim().trim_end_matches(')').trim().parse().ok());
        let host = block.iter().find_map(|l| field(l, "host")).map(str::to_string);
        let how = match code {
            c if c < 0 => format!("was killed by signal {}", -c),
            c => format!("exited with code {c}"),
        };
        return Some(RankFailure { launcher: "torchrun", rank, how, pid, host });
    }
    // Open MPI: a signal.
    let signal = regex::Regex::new(r"process rank (\d+) with PID (\d+) on node (\S+) exited on signal (\d+)").ok()?;
    if let Some(c) = lines.iter().find_map(|l| signal.captures(l)) {
        return Some(RankFailure {
            launcher: "mpirun",
            rank: c[1].parse().ok()?,
            how: format!("was killed by signal {}", &c[4]),
            pid: c[2].parse().ok().filter(|&p: &i64| p > 0),
            host: Some(c[3].to_string()),
        });
    }
    // Open MPI: an exit code.
    let name = regex::Regex::new(r"^\s*Process name:\s*\[\[\d+,\d+\],(\d+)\]").ok()?;
    let at = lines.iter().position(|l| name.is_match(l))?;
    let rank = name.captures(lines[at])?[1].parse().ok()?;
    let code: i32 = lines[at..].iter().find_map(|l| field(l, "Exit code"))?.parse().ok()?;
    Some(RankFailure { launcher: "mpirun", rank, how: format!("exited with code {code}"), pid: None, host: None })
}

/// `key : value` (any spaces around the colon): the value.
fn field<'a>(line: &'a str, key: &str) -> Option<&'a str> {
    line.trim().strip_prefix(key).map(|v| v.trim_start_matches([' ', ':']).trim())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torchruns_python_is_its_shebang() {
        let dir = tempfile::tempdir().unwrap();
        let t = dir.path().join("torchrun");
        std::fs::write(&t, "#!/opt/venv/bin/python3.11\nimport sys\n").unwrap();
        assert_eq!(python_of(Some(&t)), PathBuf::from("/opt/venv/bin/python3.11"));
        std::fs::write(&t, "#!/usr/bin/env python3\n").unwrap();
        assert_eq!(python_of(Some(&t)), PathBuf::from("python3"));
        assert_eq!(python_of(None), PathBuf::from("python3"));
    }

    /// What Open MPI 4.1 and torchrun (PyTorch 2.13) printed here when rank 1
    /// of two exited with code 3 (`sh -c 'exit $((RANK*3))'`).
    #[test]
    fn the_first_failing_rank_is_read_from_each_launchers_report() {
        let mpirun = "--------------------------------------------------------------------------
Primary job  terminated normally, but 1 process returned
a non-zero exit code. Per user-direction, the job has been aborted.
--------------------------------------------------------------------------
--------------------------------------------------------------------------
mpirun detected that one or more processes exited with non-zero status, thus causing
the job to be terminated. The first process to do so was:

  Process name: [[15789,1],1]
  Exit code:    3
--------------------------------------------------------------------------
";
        let f = first_failed_rank(mpirun).unwrap();
        assert_eq!((f.launcher, f.rank, f.how.as_str(), f.pid), ("mpirun", 1, "exited with code 3", None));
        let torchrun = "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: 
============================================================
/work/main/target/release/llmperf FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-11-26_00:29:59
  host      : localhost
  rank      : 1 (local_rank: 1)
  exitcode  : 3 (pid: 20942) 
  error_file: <N/A>
  traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html
============================================================
";
        let f = first_failed_rank(torchrun).unwrap();
        assert_eq!((f.launcher, f.rank, f.how.as_str(), f.pid), ("torchrun", 1, "exited with code 3", Some(20942)));
        assert_eq!(f.host.as_deref(), Some("localhost"));
        let killed = torchrun.replace("exitcode  : 3 (pid: 20942)", "exitcode  : -9 (pid: 20942)");
        assert_eq!(first_failed_rank(&killed).unwrap().how, "was killed by signal 9");
        assert_eq!(first_failed_rank("Traceback (most recent call last):\nboom"), None);
    }
}
