//! pipeline: a job's launcher. `llmperf launch-rank`, the shim every rank of
//! `profile --launcher torchrun|mpirun` runs first (it records the rank its
//! launcher gave it, then becomes the application); and `profile --launcher
//! srun`, both steps of the launcher outside the profiler: every rank
//! profiles itself (`--rank-from-env`), then the job is merged.
use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::Path;

use super::stage::Outcome;
use crate::error::{Error, ErrorKind};
use crate::plan::launcher::{rank_argv, Launcher};
use crate::plan::rank::{self, LaunchedRank};
use crate::process::{self, Exit, Sink, Spawn};
use crate::run_dir::{self, RunDir};

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

/// `profile --launcher srun -n N …`: a new job directory under `root`
/// (named by `run_id`, else a fresh run id: two jobs never share one), srun
/// running `llmperf profile --rank-from-env --run-id JOB …` on every rank,
/// then `llmperf merge` of the job. A failed srun fails the run after the
/// merge of what the ranks wrote.
pub(crate) fn srun(
    launcher: &Launcher,
    raw_argv: &[OsString],
    root: &Path,
    run_id: Option<&str>,
) -> Result<Outcome, Error> {
    let (job_dir, job) = match run_id {
        Some(id) => {
            // Before srun starts any rank: `--run-id ..` would write beside the root.
            let job = rank::job_name(id, "--launcher srun --run-id")?;
            let dir = root.join(&job);
            std::fs::create_dir_all(&dir).map_err(|e| run_dir::io_error(&dir, "create the job directory", &e))?;
            (dir, job)
        }
        None => {
            let run = RunDir::create(root)?;
            (run.path().to_path_buf(), run.run_id().to_string())
        }
    };
    let mut argv = launcher.head();
    argv.push(launcher.exe.clone().into_os_string());
    argv.extend(rank_argv(raw_argv, &job));
    let spec = Spawn::new(argv).stdout(Sink::File(job_dir.join("srun.stdout.log"))).stderr(Sink::Inherit);
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
    use crate::plan::launcher::{python_of, LauncherKind};
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
