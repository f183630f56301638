//! launcher: the command lines of `llmperf profile --launcher …`. Pure:
//! the launcher's facts (where it is, torchrun's Python) are found before
//! the plan (`pipeline::launcher_of`).
//!
//! - torchrun, mpirun: the profiler outside the launcher. nsys (and ncu)
//!   wrap `torchrun … llmperf launch-rank --record DIR -- APP`: every rank is
//!   the shim first, which writes its pid and the rank its launcher gave it,
//!   then becomes the application (exec: the same pid), so each process of
//!   the capture has its rank from the environment. ncu on one rank only goes
//!   inside: `torchrun … llmperf launch-rank --wrap-ranks 0 --wrapper-len K --
//!   ncu … APP`, the other ranks run APP plainly in the same launch.
//! - srun: the launcher outside the profiler. `srun -n N llmperf … profile
//!   --rank-from-env --run-id JOB …` (llmperf's own command line without the
//!   launcher options), then `llmperf merge`.
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

pub(crate) use crate::config::schema::LauncherKind;

/// A launcher and how it is started.
#[derive(Debug, Clone)]
pub(crate) struct Launcher {
    pub(crate) kind: LauncherKind,
    pub(crate) nproc: u32,
    /// `--launcher-arg` options, after llmperf's own.
    pub(crate) extra: Vec<String>,
    /// Open MPI refuses root without `--allow-run-as-root`.
    pub(crate) as_root: bool,
    /// llmperf itself (the shim, or each rank's `llmperf profile`).
    pub(crate) exe: PathBuf,
    /// torchrun runs a `.py` with its own Python; with `--no-python` (the
    /// shim comes first) llmperf puts that Python in front ([`Launcher::command`]).
    pub(crate) python: Option<PathBuf>,
}

impl Launcher {
    /// The launcher's own words: program, rank count, options.
    pub(crate) fn head(&self) -> Vec<OsString> {
        let n = self.nproc.to_string();
        let mut a: Vec<String> = vec![self.kind.program().into()];
        match self.kind {
            LauncherKind::Torchrun => a.extend(["--standalone".into(), "--nproc-per-node".into(), n]),
            LauncherKind::Mpirun => {
                a.extend(["-np".into(), n]);
                if self.as_root {
                    a.push("--allow-run-as-root".into());
                }
            }
            LauncherKind::Srun => a.extend(["-n".into(), n]),
        }
        a.extend(self.extra.iter().cloned());
        if self.kind == LauncherKind::Torchrun {
            a.push("--no-python".into());
        }
        a.into_iter().map(OsString::from).collect()
    }

    /// `LAUNCHER … llmperf launch-rank [--record DIR] [--wrap-ranks R
    /// --wrapper-len K] -- ARGV`: every rank runs ARGV; with `wrap`, ranks
    /// other than R run ARGV without its first K words (the profiler's).
    pub(crate) fn around(&self, record: Option<&Path>, wrap: Option<(u32, usize)>, argv: &[OsString]) -> Vec<OsString> {
        let mut a = self.head();
        a.extend([self.exe.clone().into_os_string(), "launch-rank".into()]);
        if let Some(dir) = record {
            a.extend(["--record".into(), dir.as_os_str().to_owned()]);
        }
        if let Some((rank, k)) = wrap {
            a.extend(["--wrap-ranks".into(), rank.to_string().into(), "--wrapper-len".into(), k.to_string().into()]);
        }
        a.push("--".into());
        a.extend(argv.iter().cloned());
        a
    }

    /// The user's command as each rank runs it: under torchrun a `script.py`
    /// gets torchrun's Python in front (torchrun runs scripts with it, and
    /// the shim comes first, so llmperf passes `--no-python`).
    pub(crate) fn command(&self, command: Vec<OsString>) -> Vec<OsString> {
        match (&self.python, command.first()) {
            (Some(py), Some(script))
                if self.kind == LauncherKind::Torchrun && Path::new(script).extension() == Some(OsStr::new("py")) =>
            {
                std::iter::once(py.clone().into_os_string()).chain(command).collect()
            }
            _ => command,
        }
    }
}

/// Each rank's command line under `--launcher srun`: llmperf's own words
/// after the program, without the launcher options, `--rank-from-env` and
/// the job's `--run-id` added right after `profile`. Only the words before
/// `--` are looked at: the application's are its own.
pub(crate) fn rank_argv(raw: &[OsString], run_id: &str) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut words = raw.iter().skip(1);
    let mut added = false;
    let mut has_run_id = false;
    let takes_value = ["--launcher", "--nproc", "--np", "-n", "--launcher-arg"];
    while let Some(w) = words.next() {
        let s = w.to_string_lossy();
        if s == "--" {
            out.push(w.clone());
            out.extend(words.cloned());
            break;
        }
        if takes_value.contains(&s.as_ref()) {
            words.next();
            continue;
        }
        if takes_value.iter().any(|f| f.starts_with("--") && s.starts_with(&format!("{f}=")))
            || (s.starts_with("-n") && !s.starts_with("--") && s.len() > 2)
        {
            continue;
        }
        has_run_id |= s == "--run-id" || s.starts_with("--run-id=");
        out.push(w.clone());
        if s == "profile" && !added {
            out.push("--rank-from-env".into());
            added = true;
        }
    }
    if !has_run_id {
        let at = out.iter().position(|w| w == "--rank-from-env").map_or(out.len(), |i| i + 1);
        out.splice(at..at, [OsString::from("--run-id"), OsString::from(run_id)]);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(words: &[&str]) -> Vec<OsString> {
        words.iter().map(OsString::from).collect()
    }

    fn launcher(kind: LauncherKind, as_root: bool) -> Launcher {
        Launcher {
            kind,
            nproc: 2,
            extra: vec!["--oversubscribe".into()],
            as_root,
            exe: "/bin/llmperf".into(),
            python: Some("/venv/bin/python".into()),
        }
    }

    #[test]
    fn every_rank_runs_the_shim_then_the_application() {
        let t = launcher(LauncherKind::Torchrun, true);
        let a = t.around(Some(Path::new("/run/launcher/ranks")), None, &t.command(os(&["train.py", "--x"])));
        assert_eq!(
            a,
            os(&[
                "torchrun",
                "--standalone",
                "--nproc-per-node",
                "2",
                "--oversubscribe",
                "--no-python",
                "/bin/llmperf",
                "launch-rank",
                "--record",
                "/run/launcher/ranks",
                "--",
                "/venv/bin/python",
                "train.py",
                "--x"
            ])
        );
        let m = launcher(LauncherKind::Mpirun, true).around(None, None, &os(&["./app"]));
        assert_eq!(
            m,
            os(&[
                "mpirun",
                "-np",
                "2",
                "--allow-run-as-root",
                "--oversubscribe",
                "/bin/llmperf",
                "launch-rank",
                "--",
                "./app"
            ])
        );
        assert!(!launcher(LauncherKind::Mpirun, false).head().contains(&"--allow-run-as-root".into()));
    }

    #[test]
    fn ncu_on_one_rank_is_inside_the_launcher_and_its_words_are_counted() {
        let t = launcher(LauncherKind::Mpirun, false);
        let a = t.around(None, Some((0, 3)), &os(&["ncu", "-o", "rep", "./app"]));
        let tail: Vec<OsString> = a.iter().skip_while(|w| *w != "launch-rank").cloned().collect();
        assert_eq!(
            tail,
            os(&["launch-rank", "--wrap-ranks", "0", "--wrapper-len", "3", "--", "ncu", "-o", "rep", "./app"])
        );
        // torchrun's Python is the application's first word; other commands stay as they are.
        let t = launcher(LauncherKind::Torchrun, false);
        assert_eq!(t.command(os(&["infer.py", "-n", "2"])), os(&["/venv/bin/python", "infer.py", "-n", "2"]));
        assert_eq!(t.command(os(&["./serve", "x.py"])), os(&["./serve", "x.py"]));
        assert_eq!(launcher(LauncherKind::Mpirun, false).command(os(&["a.py"])), os(&["a.py"]));
    }

    #[test]
    fn each_srun_rank_gets_llmperfs_own_words_without_the_launcher() {
        let raw = os(&[
            "/bin/llmperf",
            "-v",
            "profile",
            "--launcher",
            "srun",
            "-n",
            "2",
            "--launcher-arg=--mpi=none",
            "--no-ncu",
            "pipeline.nsys.ranks=[0]",
            "--",
            "python",
            "-n",
            "3",
        ]);
        assert_eq!(
            rank_argv(&raw, "J1"),
            os(&[
                "-v",
                "profile",
                "--rank-from-env",
                "--run-id",
                "J1",
                "--no-ncu",
                "pipeline.nsys.ranks=[0]",
                "--",
                "python",
                "-n",
                "3"
            ])
        );
        let raw = os(&["llmperf", "profile", "--launcher=srun", "-n2", "--nproc=2", "--run-id", "mine"]);
        assert_eq!(rank_argv(&raw, "J1"), os(&["profile", "--rank-from-env", "--run-id", "mine"]));
    }
}
