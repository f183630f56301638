//! profile: the only place that spawns a child process.
//!
//! Children get an argv vector (never a shell string), their own process
//! group, an optional timeout, and are killed with all their descendants when
//! the timeout passes or a signal stops llmperf (signals.rs). A profiler's
//! application is stopped first ([`Spawn::stop_gracefully`]), so that the
//! profiler sees it end and writes its capture; whatever is left is killed
//! after the grace. A timed-out nsys must die with its agent, which may have
//! left the group, so descendants are found through /proc as well. Should
//! llmperf itself be killed (SIGKILL), each child gets SIGTERM from the kernel.
use std::ffi::OsString;
use std::fs::File;
use std::io::Read;
use std::os::unix::process::{CommandExt, ExitStatusExt};
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use crate::error::{Error, ErrorKind};
use crate::signals;

const POLL: Duration = Duration::from_millis(20);
const GRACE: Duration = Duration::from_secs(3);

/// Finds the processes that belong to a child without descending from it.
type Companions = Option<fn(i32) -> Vec<i32>>;

/// Running children, by pid, for a forced stop (signals.rs) to kill.
static CHILDREN: std::sync::Mutex<Vec<(i32, Companions)>> = std::sync::Mutex::new(Vec::new());

/// The forced stop's hook: SIGKILL every running child with its group,
/// descendants and companions, without waiting.
fn kill_children() {
    let children = CHILDREN.lock().map(|c| c.clone()).unwrap_or_default();
    for (pid, companions) in children {
        signal_all(pid, &family(pid, companions), libc::SIGKILL);
    }
}

/// Where a child's output goes.
#[derive(Debug, Clone)]
pub(crate) enum Sink {
    Inherit,
    Null,
    /// Write to this file (created or truncated).
    File(PathBuf),
    /// Keep it in memory, for short outputs such as `--version`.
    Capture,
}

#[derive(Debug, Clone)]
pub(crate) struct Spawn {
    pub(crate) argv: Vec<OsString>,
    pub(crate) env: Vec<(String, String)>,
    pub(crate) stdout: Sink,
    pub(crate) stderr: Sink,
    pub(crate) timeout: Option<Duration>,
    /// Processes that belong to the child but are not its descendants (the
    /// nsys agent is reparented to init): found from the child's pid, killed with it.
    pub(crate) companions: Companions,
    /// Kill the child if it is still running this long after all of its
    /// descendants have exited (see [`Spawn::linger_limit`]).
    pub(crate) linger: Option<Duration>,
    /// On a signal or the timeout, stop the application first and give the
    /// profiler time to write its capture (see [`Spawn::stop_gracefully`]).
    pub(crate) stop: Option<Stop>,
    /// Stop the child (and everything it started) once this is set: a
    /// server llmperf started and is done with.
    pub(crate) stop_when: Option<std::sync::Arc<std::sync::atomic::AtomicBool>>,
}

/// How a profiler is stopped so that it keeps its capture.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Stop {
    /// How long the profiler gets, from the stop, to write its capture and exit.
    pub(crate) grace: Duration,
    /// The application's own processes under the profiler (not the profiler's helpers).
    pub(crate) application: fn(i32) -> Vec<i32>,
}

impl Spawn {
    pub(crate) fn new<I, S>(argv: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<OsString>,
    {
        Spawn {
            argv: argv.into_iter().map(Into::into).collect(),
            env: Vec::new(),
            stdout: Sink::Inherit,
            stderr: Sink::Inherit,
            timeout: None,
            companions: None,
            linger: None,
            stop: None,
            stop_when: None,
        }
    }

    /// A profiler writes its capture when its application ends. On a signal
    /// or the timeout, Ctrl-C the application (SIGINT; SIGTERM after
    /// [`APP_GRACE`] if it is still there), allow the profiler `grace` from
    /// then on to finish, and kill what is left. Another signal cuts it short.
    /// (SIGINT to nsys 2022.4 itself was ignored in 4 of 16 tries here; the
    /// application's end made it write its report in 16 of 16:
    /// bench/nsys_stop_probe.sh, docs/internals.md.)
    pub(crate) fn stop_gracefully(mut self, grace: Duration, application: fn(i32) -> Vec<i32>) -> Self {
        self.stop = Some(Stop { grace, application });
        self
    }

    /// A profiler that runs the application as a descendant is done with it
    /// once every descendant has exited; it then only converts its capture.
    /// Allow it `limit` for that, independently of the overall timeout (nsys
    /// 2022.4 sometimes hangs there forever).
    /// Stop the child, its group and its descendants (SIGTERM, then SIGKILL
    /// after a grace) once `flag` is set, from another thread.
    pub(crate) fn stop_when(mut self, flag: std::sync::Arc<std::sync::atomic::AtomicBool>) -> Self {
        self.stop_when = Some(flag);
        self
    }

    pub(crate) fn linger_limit(mut self, limit: Duration) -> Self {
        self.linger = Some(limit);
        self
    }

    pub(crate) fn companions(mut self, find: fn(i32) -> Vec<i32>) -> Self {
        self.companions = Some(find);
        self
    }

    pub(crate) fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.into(), value.into()));
        self
    }

    pub(crate) fn stdout(mut self, sink: Sink) -> Self {
        self.stdout = sink;
        self
    }

    pub(crate) fn stderr(mut self, sink: Sink) -> Self {
        self.stderr = sink;
        self
    }

    pub(crate) fn timeout(mut self, timeout: Option<Duration>) -> Self {
        self.timeout = timeout;
        self
    }

    /// The command line, quoted so it can be pasted into a shell.
    pub(crate) fn display(&self) -> String {
        let env = self.env.iter().map(|(k, v)| format!("{k}={}", shell_quote(v)));
        let argv = self.argv.iter().map(|a| shell_quote(&a.to_string_lossy()));
        env.chain(argv).collect::<Vec<_>>().join(" ")
    }

    pub(crate) fn argv_strings(&self) -> Vec<String> {
        self.argv.iter().map(|a| a.to_string_lossy().into_owned()).collect()
    }
}

/// How a child ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Exit {
    Code(i32),
    Signal(i32),
    TimedOut,
    /// Still running longer than allowed after its descendants exited.
    Stalled,
    Interrupted,
    /// Stopped by llmperf once done with it ([`Spawn::stop_when`]).
    Stopped,
}

#[derive(Debug)]
pub(crate) struct Finished {
    pub(crate) exit: Exit,
    pub(crate) elapsed: Duration,
    pub(crate) stdout: Vec<u8>,
    pub(crate) stderr: Vec<u8>,
}

impl Finished {
    pub(crate) fn success(&self) -> bool {
        self.exit == Exit::Code(0)
    }

    /// "exit code 3", "killed by signal 9 (SIGKILL)", ...
    pub(crate) fn describe(&self) -> String {
        match self.exit {
            Exit::Code(c) => format!("exit code {c}"),
            Exit::Signal(s) => format!("killed by signal {s} ({})", signals::name(s)),
            Exit::TimedOut => format!("timed out after {:.0} s and was killed", self.elapsed.as_secs_f64()),
            Exit::Stalled => {
                format!("stalled after its last phase began and was killed at {:.0} s", self.elapsed.as_secs_f64())
            }
            Exit::Interrupted => "interrupted".into(),
            Exit::Stopped => format!("was stopped by llmperf after {:.0} s", self.elapsed.as_secs_f64()),
        }
    }
}

/// Run a child to completion (or timeout / interrupt).
pub(crate) fn run(spec: &Spawn) -> Result<Finished, Error> {
    let (program, args) =
        spec.argv.split_first().ok_or_else(|| Error::new(ErrorKind::Internal, "empty command line"))?;
    tracing::debug!("running: {}", spec.display());
    let (stdout, mut out_cap) = open_sink(&spec.stdout)?;
    let (stderr, mut err_cap) = open_sink(&spec.stderr)?;
    let mut cmd = Command::new(program);
    cmd.args(args).stdin(Stdio::null()).stdout(stdout).stderr(stderr).process_group(0);
    for (k, v) in &spec.env {
        cmd.env(k, v);
    }
    // SAFETY: prctl(2) is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM);
            Ok(())
        });
    }
    let start = Instant::now();
    let child = cmd.spawn().map_err(|e| spawn_error(program, &e))?;
    let pid = child.id() as i32;
    signals::on_forced_stop(kill_children);
    if let Ok(mut c) = CHILDREN.lock() {
        c.push((pid, spec.companions));
    }
    let exit = wait(child, spec, start);
    if let Ok(mut c) = CHILDREN.lock() {
        c.retain(|(p, _)| *p != pid);
    }
    let exit = exit?;
    Ok(Finished {
        exit,
        elapsed: start.elapsed(),
        stdout: read_capture(out_cap.as_mut()),
        stderr: read_capture(err_cap.as_mut()),
    })
}

fn open_sink(sink: &Sink) -> Result<(Stdio, Option<File>), Error> {
    let io = |e: std::io::Error, what: &str| Error::new(ErrorKind::Internal, format!("{what}: {e}"));
    Ok(match sink {
        Sink::Inherit => (Stdio::inherit(), None),
        Sink::Null => (Stdio::null(), None),
        Sink::File(path) => {
            let f = File::create(path).map_err(|e| io(e, &format!("cannot create {}", path.display())))?;
            (Stdio::from(f), None)
        }
        Sink::Capture => {
            let f = tempfile::tempfile().map_err(|e| io(e, "cannot create a temporary file"))?;
            let reader = f.try_clone().map_err(|e| io(e, "cannot clone a file handle"))?;
            (Stdio::from(f), Some(reader))
        }
    })
}

fn read_capture(file: Option<&mut File>) -> Vec<u8> {
    use std::io::Seek;
    let mut buf = Vec::new();
    if let Some(f) = file {
        let _ = f.rewind();
        let _ = f.read_to_end(&mut buf);
    }
    buf
}

/// Where `program` would be run from, as execvp looks: the path itself when it
/// holds a `/`, else the first executable of that name on PATH.
pub(crate) fn find_executable(program: impl AsRef<std::ffi::OsStr>) -> Option<PathBuf> {
    let program = program.as_ref();
    let runnable = |p: &std::path::Path| {
        use std::os::unix::fs::PermissionsExt;
        p.metadata().is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if program.as_encoded_bytes().contains(&b'/') {
        let p = PathBuf::from(program);
        return runnable(&p).then_some(p);
    }
    std::env::split_paths(&std::env::var_os("PATH")?).map(|dir| dir.join(program)).find(|p| runnable(p))
}

fn spawn_error(program: &OsString, e: &std::io::Error) -> Error {
    let name = program.to_string_lossy();
    match e.kind() {
        std::io::ErrorKind::NotFound => Error::new(ErrorKind::StageFailed, format!("cannot run `{name}`: not found"))
            .with_hint(format!("install `{name}` or give its full path")),
        std::io::ErrorKind::PermissionDenied => {
            Error::new(ErrorKind::StageFailed, format!("cannot run `{name}`: permission denied"))
                .with_hint(format!("make it executable: chmod +x {name}"))
        }
        _ => Error::new(ErrorKind::StageFailed, format!("cannot run `{name}`: {e}")),
    }
}

fn wait(mut child: Child, spec: &Spawn, start: Instant) -> Result<Exit, Error> {
    let mut linger = spec.linger.map(Linger::new);
    let exit = ExitWatch::new(child.id() as i32);
    loop {
        match child.try_wait() {
            Ok(Some(status)) => {
                stop_leftovers(child.id() as i32, spec.companions);
                return Ok(exit_of(status));
            }
            Ok(None) => {}
            Err(e) => return Err(Error::new(ErrorKind::Internal, format!("waiting for a child: {e}"))),
        }
        let verdict = if signals::pending() {
            Some(Exit::Interrupted)
        } else if spec.timeout.is_some_and(|t| start.elapsed() >= t) {
            Some(Exit::TimedOut)
        } else if linger.as_mut().is_some_and(|l| l.overdue(child.id() as i32)) {
            Some(Exit::Stalled)
        } else if spec.stop_when.as_ref().is_some_and(|f| f.load(std::sync::atomic::Ordering::SeqCst)) {
            Some(Exit::Stopped)
        } else {
            None
        };
        if let Some(exit) = verdict {
            if let (Some(stop), false) = (&spec.stop, exit == Exit::Stalled) {
                stop_application(&mut child, stop);
            }
            kill_tree(&mut child, spec.companions);
            return Ok(exit);
        }
        exit.pause();
    }
}

/// Waits up to [`POLL`] between looks at a child, but wakes the moment it
/// exits: through a pidfd (Linux 5.3+), else it sleeps. A plain sleep cost
/// half a poll per child on average, ~50 ms of a profile run's five children
/// (bench/profile_overhead.sh).
struct ExitWatch(Option<std::os::fd::OwnedFd>);

impl ExitWatch {
    fn new(pid: i32) -> Self {
        use std::os::fd::FromRawFd;
        // SAFETY: pidfd_open takes a pid and flags and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        // SAFETY: a non-negative result is a descriptor that nothing else owns.
        ExitWatch((fd >= 0).then(|| unsafe { std::os::fd::OwnedFd::from_raw_fd(fd as i32) }))
    }

    fn pause(&self) {
        use std::os::fd::AsRawFd;
        match &self.0 {
            Some(fd) => {
                let mut p = libc::pollfd { fd: fd.as_raw_fd(), events: libc::POLLIN, revents: 0 };
                // SAFETY: one valid pollfd; an interrupted or failed poll only shortens the pause.
                unsafe { libc::poll(&mut p, 1, POLL.as_millis() as i32) };
            }
            None => std::thread::sleep(POLL),
        }
    }
}

/// How long an application gets to end after SIGINT before it gets SIGTERM
/// (an application may ignore SIGINT: a background job of a shell does).
pub(crate) const APP_GRACE: Duration = Duration::from_secs(5);

/// Stop the application under a profiler, then wait up to `stop.grace` for
/// the profiler to write its capture and exit (a signal arriving meanwhile
/// ends the wait). When the application has already ended, the profiler is
/// writing its capture: it is only waited for. No application found (another
/// version's process layout): the profiler itself gets the SIGINT.
fn stop_application(child: &mut Child, stop: &Stop) {
    let seen = signals::received();
    let pid = child.id() as i32;
    let running = |pids: Vec<i32>| -> Vec<i32> { pids.into_iter().filter(|p| !is_zombie(*p)).collect() };
    let mut app = running((stop.application)(pid));
    if app.is_empty() && !running(descendants(pid)).is_empty() {
        app = vec![pid];
    }
    if app.is_empty() {
        tracing::info!(
            "waiting for the profiler to finish writing its capture (up to {:.0} s)",
            stop.grace.as_secs_f64()
        );
    } else {
        signal_each(&app, libc::SIGINT);
        tracing::info!(
            "stopped the application; the profiler has {:.0} s to write its capture",
            stop.grace.as_secs_f64()
        );
    }
    let started = Instant::now();
    let mut escalated = false;
    while started.elapsed() < stop.grace && signals::received() == seen {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        if !escalated && started.elapsed() >= APP_GRACE {
            signal_each(&running(app.clone()), libc::SIGTERM);
            escalated = true;
        }
        std::thread::sleep(POLL);
    }
}

/// Processes whose parent's name (`/proc/PID/comm`) is `parent`, under `root`:
/// what a profiler's launcher process started.
pub(crate) fn started_by_launcher(root: i32, parent: &str) -> Vec<i32> {
    descendants(root)
        .into_iter()
        .filter(|p| parent_of(*p).and_then(comm).is_some_and(|c| c.starts_with(parent)))
        .collect()
}

fn comm(pid: i32) -> Option<String> {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).ok().map(|c| c.trim_end().to_string())
}

/// Times how long a child runs on after all its descendants have exited.
struct Linger {
    limit: Duration,
    had_descendants: bool,
    alone_since: Option<Instant>,
    next_check: Instant,
}

impl Linger {
    fn new(limit: Duration) -> Self {
        Linger { limit, had_descendants: false, alone_since: None, next_check: Instant::now() }
    }

    fn overdue(&mut self, pid: i32) -> bool {
        if Instant::now() >= self.next_check {
            self.next_check = Instant::now() + Duration::from_millis(250);
            let family = descendants(pid);
            let alive = family.iter().any(|p| !is_zombie(*p));
            // An unreaped zombie proves a descendant existed, even one that
            // exited before the first look (nsys's launcher of a fast application).
            self.had_descendants |= !family.is_empty();
            self.alone_since = match (alive, self.alone_since) {
                (true, _) => None,
                (false, since) if self.had_descendants => since.or_else(|| Some(Instant::now())),
                (false, _) => None,
            };
        }
        self.alone_since.is_some_and(|t| t.elapsed() >= self.limit)
    }
}

fn is_zombie(pid: i32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| s[s.rfind(')')? + 1..].split_whitespace().next().map(|st| st == "Z"))
        .unwrap_or(true)
}

fn exit_of(status: ExitStatus) -> Exit {
    match (status.code(), status.signal()) {
        (Some(c), _) => Exit::Code(c),
        (None, Some(s)) => Exit::Signal(s),
        (None, None) => Exit::Code(-1),
    }
}

/// SIGTERM the child's group and descendants, give them a moment, then
/// SIGKILL; then its companions once more: nsys names its agent's session
/// after its own pid, so an agent started while nsys was being stopped is
/// found after nsys is gone.
fn kill_tree(child: &mut Child, companions: Companions) {
    let pid = child.id() as i32;
    let family = family(pid, companions);
    signal_all(pid, &family, libc::SIGTERM);
    let deadline = Instant::now() + GRACE;
    let mut stopped = false;
    while Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) && family.iter().all(|p| !alive(*p)) {
            stopped = true;
            break;
        }
        std::thread::sleep(POLL);
    }
    if !stopped {
        signal_all(pid, &family, libc::SIGKILL);
        let _ = child.wait();
    }
    let late: Vec<i32> =
        companions.map(|find| find(pid)).unwrap_or_default().into_iter().filter(|p| alive(*p)).collect();
    if !late.is_empty() {
        tracing::warn!("stopping {} process(es) started by the child {pid} while it was stopped: {late:?}", late.len());
        stop_each(late);
    }
}

/// After a child exited by itself: what it left running, its companions
/// (nsys's agent, reparented to init) and the members of its process group
/// with their descendants (an nsys that failed writing to a full TMPDIR left
/// `nsys-launcher` and `nsys-tee` waiting for most of a minute), get [`GRACE`]
/// to follow it, then SIGTERM, then SIGKILL. An nsys agent of a finished run
/// once kept spinning for 16 minutes, holding the files its parent had open;
/// nothing outlives the command that started it.
fn stop_leftovers(pid: i32, companions: Companions) {
    let mut left = group_members(pid);
    left.extend(left.clone().into_iter().flat_map(descendants).collect::<Vec<_>>());
    left.extend(companions.map(|find| find(pid)).unwrap_or_default());
    left.sort_unstable();
    left.dedup();
    let deadline = Instant::now() + GRACE;
    while !left.is_empty() && Instant::now() < deadline {
        std::thread::sleep(POLL);
        left.retain(|p| alive(*p));
    }
    if left.is_empty() {
        return;
    }
    tracing::warn!("stopping {} process(es) the finished child {pid} left behind: {left:?}", left.len());
    stop_each(left);
    // One started as the others stopped (an agent of a finishing nsys).
    let late: Vec<i32> =
        companions.map(|find| find(pid)).unwrap_or_default().into_iter().filter(|p| alive(*p)).collect();
    stop_each(late);
}

/// SIGTERM each of `pids`, give them [`GRACE`], then SIGKILL those left.
pub(crate) fn stop_each(mut pids: Vec<i32>) {
    if pids.is_empty() {
        return;
    }
    signal_each(&pids, libc::SIGTERM);
    let deadline = Instant::now() + GRACE;
    while Instant::now() < deadline && !pids.is_empty() {
        std::thread::sleep(POLL);
        pids.retain(|p| alive(*p));
    }
    signal_each(&pids, libc::SIGKILL);
}

/// A child's descendants and its companions: what is stopped with it.
fn family(pid: i32, companions: Companions) -> Vec<i32> {
    let mut family = descendants(pid);
    if let Some(find) = companions {
        family.extend(find(pid));
    }
    family
}

/// `sig` to the process group `pgid` and to each of `pids`.
fn signal_all(pgid: i32, pids: &[i32], sig: i32) {
    signal_each(&[-pgid], sig);
    signal_each(pids, sig);
}

fn signal_each(pids: &[i32], sig: i32) {
    for p in pids {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe {
            libc::kill(*p, sig);
        }
    }
}

/// Whether `pid` runs as this process's user (signals reach it).
pub(crate) fn owned_by_us(pid: i32) -> bool {
    use std::os::unix::fs::MetadataExt;
    // SAFETY: getuid(2) has no preconditions.
    std::fs::metadata(format!("/proc/{pid}")).is_ok_and(|m| m.uid() == unsafe { libc::getuid() })
}

pub(crate) fn alive(pid: i32) -> bool {
    // SAFETY: signal 0 only checks that the process exists.
    unsafe { libc::kill(pid, 0) == 0 }
}

/// The live (not zombie) processes of process group `pgid`, from /proc/<pid>/stat.
fn group_members(pgid: i32) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter(|pid| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else { return false };
            // "pid (comm) state ppid pgrp ...": comm may hold spaces and parentheses.
            let Some(after) = stat.rfind(')').map(|i| &stat[i + 1..]) else { return false };
            let fields: Vec<&str> = after.split_whitespace().take(3).collect();
            fields.len() == 3 && fields[0] != "Z" && fields[2].parse() == Ok(pgid)
        })
        .collect()
}

/// All processes below `root`, from /proc/<pid>/stat parent links.
fn descendants(root: i32) -> Vec<i32> {
    let parents: Vec<(i32, i32)> = std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<i32>().ok())
        .filter_map(|pid| Some((pid, parent_of(pid)?)))
        .collect();
    let mut found = vec![root];
    let mut i = 0;
    while i < found.len() {
        let p = found[i];
        found.extend(parents.iter().filter(|(_, pp)| *pp == p).map(|(c, _)| *c));
        i += 1;
    }
    found.remove(0);
    found
}

/// Pids whose command line (arguments joined by spaces) satisfies `pred`.
pub(crate) fn find_processes(pred: impl Fn(&str) -> bool) -> Vec<i32> {
    std::fs::read_dir("/proc")
        .into_iter()
        .flatten()
        .filter_map(|e| {
            let e = e.ok()?;
            let pid: i32 = e.file_name().to_str()?.parse().ok()?;
            let raw = std::fs::read(e.path().join("cmdline")).ok()?;
            let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
            pred(cmdline.trim_end()).then_some(pid)
        })
        .collect()
}

fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses.
    let after = &stat[stat.rfind(')')? + 1..];
    after.split_whitespace().nth(1)?.parse().ok()
}

/// POSIX shell quoting: bare when safe, single quotes otherwise.
pub(crate) fn shell_quote(arg: &str) -> String {
    let safe = !arg.is_empty() && arg.chars().all(|c| c.is_ascii_alphanumeric() || "-_./=:,@%+".contains(c));
    if safe {
        arg.to_string()
    } else {
        format!("'{}'", arg.replace('\'', r"'\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exit_codes_and_signals_are_reported() {
        let ok = run(&Spawn::new(["true"])).unwrap();
        assert!(ok.success());
        let failed = run(&Spawn::new(["sh", "-c", "exit 3"])).unwrap();
        assert_eq!(failed.exit, Exit::Code(3));
        let killed = run(&Spawn::new(["sh", "-c", "kill -SEGV $$"])).unwrap();
        assert_eq!(killed.exit, Exit::Signal(libc::SIGSEGV));
        assert_eq!(killed.describe(), "killed by signal 11 (SIGSEGV)");
    }

    #[test]
    fn timeout_kills_the_child_and_its_descendants() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild.pid");
        // The grandchild leaves the process group (setsid) as the nsys agent can.
        let script = format!("setsid sleep 30 & echo $! > {}; wait", pidfile.display());
        let spec = Spawn::new(["sh", "-c", &script]).timeout(Some(Duration::from_millis(500)));
        let done = run(&spec).unwrap();
        assert_eq!(done.exit, Exit::TimedOut);
        let grandchild: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let state = std::fs::read_to_string(format!("/proc/{grandchild}/stat")).unwrap_or_default();
        assert!(state.is_empty() || state.contains(") Z"), "grandchild still running: {state}");
    }

    #[test]
    fn what_a_child_leaves_in_its_group_is_stopped_when_it_exits() {
        // As nsys failing on a full TMPDIR: it exits, its launcher runs on in its group.
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("left.pid");
        let script = format!("sleep 30 & echo $! > {}", pidfile.display());
        let done = run(&Spawn::new(["sh", "-c", &script])).unwrap();
        assert_eq!(done.exit, Exit::Code(0));
        let left: i32 = std::fs::read_to_string(&pidfile).unwrap().trim().parse().unwrap();
        std::thread::sleep(Duration::from_millis(100));
        let state = std::fs::read_to_string(format!("/proc/{left}/stat")).unwrap_or_default();
        assert!(state.is_empty() || state.contains(") Z"), "left running: {state}");
    }

    #[test]
    fn a_child_lingering_after_its_descendants_exit_is_killed() {
        // Runs an "application" (a child), then hangs on alone: killed after the limit.
        let spec = Spawn::new(["sh", "-c", "sleep 0.3; exec sleep 30"])
            .timeout(Some(Duration::from_secs(60)))
            .linger_limit(Duration::from_millis(700));
        let done = run(&spec).unwrap();
        assert_eq!(done.exit, Exit::Stalled);
        assert!(done.elapsed < Duration::from_secs(10), "{:?}", done.elapsed);
        // An application that exits before the first look, left unreaped
        // (a zombie, as nsys leaves its launcher when it hangs), counts too.
        let spec = Spawn::new(["sh", "-c", "true & exec sleep 30"])
            .timeout(Some(Duration::from_secs(60)))
            .linger_limit(Duration::from_millis(700));
        let done = run(&spec).unwrap();
        assert_eq!(done.exit, Exit::Stalled);
        assert!(done.elapsed < Duration::from_secs(10), "{:?}", done.elapsed);
        // While a descendant is alive, there is no lingering.
        let spec = Spawn::new(["sh", "-c", "sleep 1.5; true"]).linger_limit(Duration::from_millis(300));
        assert_eq!(run(&spec).unwrap().exit, Exit::Code(0));
        // A child that never had descendants is not judged by this rule.
        let spec = Spawn::new(["sleep", "1"]).linger_limit(Duration::from_millis(100));
        assert_eq!(run(&spec).unwrap().exit, Exit::Code(0));
    }

    #[test]
    fn captures_output_and_quotes_command_lines() {
        let done = run(&Spawn::new(["echo", "hi there"]).stdout(Sink::Capture)).unwrap();
        assert_eq!(done.stdout, b"hi there\n");
        let spec = Spawn::new(["nsys", "profile", "--trace=cuda,nvtx", "it's"]).env("A", "b c");
        assert_eq!(spec.display(), r"A='b c' nsys profile --trace=cuda,nvtx 'it'\''s'");
    }

    #[test]
    fn missing_program_is_a_clear_error() {
        let err = run(&Spawn::new(["llmperf-no-such-program"])).unwrap_err();
        assert_eq!(err.message, "cannot run `llmperf-no-such-program`: not found");
        assert!(err.hint.is_some());
    }
}
