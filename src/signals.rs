//! profile: what llmperf does on SIGINT (Ctrl-C), SIGTERM, SIGHUP (terminal closed,
//! ssh dropped) and SIGQUIT: none of them kills it outright.
//!
//! - The first signal is *pending*: a running profiler is asked to stop and
//!   given time to write its capture (process.rs), and a stage that runs no
//!   child stops at its next check ([`check`]). A run that goes on to analyse a
//!   stopped capture [`answer`]s the signal first; the run still ends
//!   `interrupted`, exit 130.
//! - A second unanswered signal stops llmperf at once: every child that is
//!   still running is killed with its process group and descendants, the run's
//!   manifest is marked `interrupted`, and llmperf exits with 130.
//!
//! Commands that do their work in-process with no checks (the built-in
//! workload) use [`Policy::Immediate`]: the first signal is the second.
use std::sync::atomic::{AtomicI32, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::error::{Error, ErrorKind};

static RECEIVED: AtomicUsize = AtomicUsize::new(0);
static ANSWERED: AtomicUsize = AtomicUsize::new(0);
static LAST: AtomicI32 = AtomicI32::new(0);
/// Unanswered signals that stop llmperf at once.
static FORCE_AT: AtomicUsize = AtomicUsize::new(2);

/// What a forced stop runs before the process ends: process.rs kills the
/// children it started, manifest.rs marks the run `interrupted`.
static ON_FORCED_STOP: Mutex<Vec<fn()>> = Mutex::new(Vec::new());

pub(crate) const HANDLED: [i32; 4] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP, libc::SIGQUIT];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Policy {
    /// The first signal asks for a stop; the second forces it.
    Graceful,
    /// The first signal forces the stop.
    Immediate,
}

/// Count INT, TERM, HUP and QUIT from now on (once per process).
pub(crate) fn install(policy: Policy) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    FORCE_AT.store(if policy == Policy::Immediate { 1 } else { 2 }, Ordering::SeqCst);
    ONCE.call_once(|| {
        let Ok(mut signals) = signal_hook::iterator::Signals::new(HANDLED) else {
            tracing::warn!("cannot install signal handlers: Ctrl-C will kill llmperf without cleaning up");
            return;
        };
        std::thread::spawn(move || {
            for sig in signals.forever() {
                LAST.store(sig, Ordering::SeqCst);
                let received = RECEIVED.fetch_add(1, Ordering::SeqCst) + 1;
                let unanswered = received - ANSWERED.load(Ordering::SeqCst);
                if unanswered >= FORCE_AT.load(Ordering::SeqCst) {
                    force_stop();
                }
                tracing::warn!("{} received: stopping (the capture is kept); send it again to stop at once", name(sig));
            }
        });
    });
}

/// A signal arrived that nobody has answered yet.
pub(crate) fn pending() -> bool {
    RECEIVED.load(Ordering::SeqCst) > ANSWERED.load(Ordering::SeqCst)
}

/// How many signals arrived so far (answered or not).
pub(crate) fn received() -> usize {
    RECEIVED.load(Ordering::SeqCst)
}

/// The run goes on after a stop (to analyse what the stopped profiler wrote):
/// the signals so far are answered, the next one is pending again.
pub(crate) fn answer() {
    ANSWERED.store(RECEIVED.load(Ordering::SeqCst), Ordering::SeqCst);
}

/// `Err(Interrupted)` when a signal is pending: the checkpoint of work that
/// runs no child (ingestion, reports).
pub(crate) fn check() -> Result<(), Error> {
    if pending() {
        return Err(interrupted());
    }
    Ok(())
}

/// The error of a stopped run, naming the signal.
pub(crate) fn interrupted() -> Error {
    let sig = LAST.load(Ordering::SeqCst);
    let which = if sig == 0 { "a signal" } else { name(sig) };
    Error::new(ErrorKind::Interrupted, format!("interrupted by {which}"))
        .with_hint("everything written so far is kept in the run directory")
}

/// Run `hook` on a forced stop (once, however often it is registered).
pub(crate) fn on_forced_stop(hook: fn()) {
    if let Ok(mut hooks) = ON_FORCED_STOP.lock() {
        if !hooks.iter().any(|h| std::ptr::fn_addr_eq(*h, hook)) {
            hooks.push(hook);
        }
    }
}

/// "SIGINT", "SIGTERM", ... for messages.
pub(crate) fn name(sig: i32) -> &'static str {
    match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        _ => "signal",
    }
}

/// Run the hooks (kill every child, mark the manifest), then exit 130. On the
/// signal thread.
fn force_stop() -> ! {
    let hooks = ON_FORCED_STOP.lock().map(|h| h.clone()).unwrap_or_default();
    for hook in hooks {
        hook();
    }
    let said: &[u8] = match FORCE_AT.load(Ordering::SeqCst) {
        1 => b"error: interrupted\n",
        _ => b"error: stopped at once by a second signal\n",
    };
    let _ = std::io::Write::write_all(&mut std::io::stderr(), said);
    // The one exit outside main: the main thread may be deep in a query that
    // has no checkpoint, and the user asked twice. `_exit`, not `exit`: exit's
    // handlers (libtorch's static destructors among them) would run while the
    // main thread still computes, and can deadlock the process.
    // SAFETY: _exit(2) ends the process; nothing runs after it.
    unsafe { libc::_exit(ErrorKind::Interrupted.exit_code()) }
}
