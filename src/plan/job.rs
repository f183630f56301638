//! plan: a run that is (part of) a job of several ranks, and the rules that
//! decide, per rank, which profilers run and how the ranks stay in step.
use super::launcher::Launcher;
use super::rank::RankId;
use crate::config::Config;
use crate::error::Error;

/// A run that is (part of) a job of several ranks: which profilers run on
/// this rank, and whether the ranks must run the application in step.
#[derive(Debug, Clone)]
pub(crate) struct Job {
    pub(crate) rank: Option<u32>,
    /// nsys, ncu run on this rank (enabled, and this rank in their `ranks`).
    pub(crate) nsys: bool,
    pub(crate) ncu: bool,
    /// ncu runs on some ranks only: the others run the application once per
    /// ncu pass, plainly, so every pass is one run of the application whose
    /// count is known before it starts.
    pub(crate) ncu_in_step: bool,
    /// Leave NCCL's kernels out of kernel and application replay.
    pub(crate) exclude_comm: bool,
    /// `--launcher torchrun|mpirun`: the one rank ncu runs on inside the
    /// launcher (None: ncu wraps the launcher, all ranks).
    pub(crate) ncu_rank: Option<u32>,
}

impl Job {
    /// One rank of a job (`--rank-from-env`): its profilers from
    /// `pipeline.{nsys,ncu}.ranks`. Refused before anything runs when the
    /// ranks could not stay in step.
    pub(crate) fn of_rank(cfg: &Config, r: &RankId) -> Result<Job, Error> {
        let ncu = &cfg.pipeline.ncu;
        let ncu_in_step = ncu.enable && !ncu.ranks.covers(r.world_size);
        if ncu_in_step {
            check_in_step(cfg)?;
        }
        Ok(Job {
            rank: Some(r.rank),
            nsys: cfg.pipeline.nsys.enable && cfg.pipeline.nsys.ranks.contains(r.rank),
            ncu: ncu.enable && ncu.ranks.contains(r.rank),
            ncu_in_step,
            exclude_comm: !ncu.comm_kernels,
            ncu_rank: None,
        })
    }

    /// The profiler outside the launcher (`--launcher torchrun|mpirun`): nsys
    /// wraps it and sees every rank; ncu wraps it (`pipeline.ncu.ranks=all`)
    /// or runs inside it on one rank while the others run plainly.
    pub(crate) fn of_launch(cfg: &Config, l: &Launcher) -> Result<Job, Error> {
        use crate::config::schema::RankSet;
        let (nsys, ncu) = (&cfg.pipeline.nsys, &cfg.pipeline.ncu);
        let program = l.kind.program();
        if nsys.enable && nsys.ranks != RankSet::All {
            return Err(Error::usage(format!(
                "pipeline.nsys.ranks={}: with --launcher {program} one nsys wraps the launcher and sees every rank",
                nsys.ranks
            ))
            .with_hint("drop pipeline.nsys.ranks, or run each rank under its own nsys: --launcher srun, or --rank-from-env under the launcher"));
        }
        let ncu_rank = match &ncu.ranks {
            _ if !ncu.enable => None,
            RankSet::All => None,
            RankSet::Only(v) if v.len() == 1 && v[0] < l.nproc => {
                check_in_step(cfg)?;
                Some(v[0])
            }
            RankSet::Only(_) => {
                return Err(Error::usage(format!(
                "pipeline.ncu.ranks={}: with --launcher {program}, ncu runs on one rank (below --nproc {}) or on all",
                ncu.ranks, l.nproc
            ))
                .with_hint("set pipeline.ncu.ranks=[0] (or another single rank), or pipeline.ncu.ranks=all"))
            }
        };
        Ok(Job {
            rank: None,
            nsys: nsys.enable,
            ncu: ncu.enable,
            ncu_in_step: false,
            exclude_comm: !ncu.comm_kernels,
            ncu_rank,
        })
    }

    pub(crate) fn why_plain(&self, profiler: &str) -> String {
        let rank = self.rank.map(|r| format!("rank {r}")).unwrap_or_else(|| "this rank".into());
        format!(
            "{rank} is not in pipeline.{profiler}.ranks: it ran the application without {profiler}, in step with the ranks that did"
        )
    }
}

/// With ncu on some ranks only, every rank must run the application the same
/// number of times: replay modes that run it again and again (application,
/// app-range) or climb a ladder (auto) cannot be matched by the other ranks.
fn check_in_step(cfg: &Config) -> Result<(), Error> {
    use crate::config::schema::ReplayMode;
    let ncu = &cfg.pipeline.ncu;
    let mode = ncu.ncu_cli.replay_mode;
    if matches!(mode, ReplayMode::Kernel | ReplayMode::Range) {
        return Ok(());
    }
    Err(Error::usage(format!(
        "pipeline.ncu.ranks={} profiles some ranks of the job with ncu, and replay mode {} runs the application a number of times only ncu knows, so the other ranks cannot run in step with it",
        ncu.ranks,
        mode.as_str()
    ))
    .with_hint("use --replay-mode kernel or --replay-mode range (one run per pass), or pipeline.ncu.ranks=all"))
}
