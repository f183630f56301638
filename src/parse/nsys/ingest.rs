//! parse::nsys::ingest: one streaming pass over an export, the way the ncu
//! readers feed a `LaunchSink`. Two readers run at once, each on its own
//! connection: the NVTX ranges, and the kernels joined to their launch calls
//! ([`super::launch_join`]; both in time order), which on the way gives every
//! kernel to a [`KernelSink`]. The calling thread hands both streams to a
//! [`Timeline`], which merges them by time.
//!
//! The first pass assumes what holds in the exports we have seen, and the
//! sinks check it on every row: rows stored in time order, and kernels of one
//! process stored nearly in correlation order. Where either does not hold, the
//! pass starts again, with fresh sinks, with SQLite sorting (`ORDER BY`), or
//! with the kernels' order measured first.
//!
//! With the time breakdown ([`ingest_beside`]), this driver owns its fan-out:
//! it makes the feed's channel, numbers the passes from its retry loop, hands
//! each pass the senders of [`super::beside`] (the timeline's windows, a tee
//! of the kernels, the launch reader's blocking calls), says `End` of the
//! pass it keeps, and runs the breakdown's reader ([`activity::read_beside`])
//! on a thread and a connection of its own. The sinks hold no sender.
use rustc_hash::FxHashMap as HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};

use super::activity::{self, ActivitySink, Feed, Source};
use super::batched::{self, Stream};
use super::beside::{CallFeed, KernelFeed, WindowFeed, Windows};
use super::calls::CallTap;
use super::sqlite::{Kernel, KernelOrder, Launched, Names, NsysDb, NvtxRange, Order};
use crate::error::{Error, ErrorKind};
use crate::regions;

/// Where the ranges and the launches go, merged by time: the region sweep.
pub trait Timeline {
    /// What it hands the time breakdown: a top-level range instance.
    type Window: Send;
    /// Both streams to their end, each in the order read; the windows met to
    /// `windows`, where the breakdown reads beside the pass. False when a
    /// stream was not in time order: the pass is then read again, sorted.
    fn run(
        &mut self,
        ranges: Stream<NvtxRange>,
        launches: Stream<Launched>,
        windows: Option<&mut dyn Windows<Self::Window>>,
    ) -> Result<bool, Error>;
}

/// Where every kernel of the kernel table goes, on the launch reader's thread.
pub trait KernelSink: Send {
    /// `strings`: the export's string ids, interned (a kernel's short name)
    /// into `names` (a kernel's name).
    fn add(&mut self, kernel: Kernel, strings: &HashMap<i64, u32>, names: &Names);
    /// The first error the sink met (writing its durations to disk), if any.
    fn take_error(&mut self) -> Option<Error>;
}

/// Steps of the reports that do not depend on each other (the sorts of
/// their runs of durations), handed to whoever owns the threads: the sinks
/// start none. The driver runs them at once ([`Threads`]).
pub trait Fork: Sync {
    /// Every step, each to its end, before returning.
    fn all<'a>(&self, steps: Vec<Box<dyn FnOnce() + Send + 'a>>);
}

/// Each step on a thread of its own (scoped: all joined before `all` returns).
pub struct Threads;

impl Fork for Threads {
    fn all<'a>(&self, steps: Vec<Box<dyn FnOnce() + Send + 'a>>) {
        std::thread::scope(|s| {
            for step in steps {
                s.spawn(step);
            }
        });
    }
}

/// What the range reader's renaming did: ranges that PyTorch named with
/// per-call attributes, renamed to their operator.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Renamed {
    /// Distinct raw names renamed.
    pub(crate) raw_names: usize,
    /// Distinct operators they became.
    pub(crate) operators: usize,
    /// Range instances renamed.
    pub(crate) instances: usize,
}

/// A finished pass: the sinks, the names interned by the range reader, what
/// its renaming did (None when it renamed nothing), and the time breakdown
/// read beside it (`()` where none was).
pub struct Ingest<T, K, B = ()> {
    pub timeline: T,
    pub kernels: K,
    pub names: Names,
    pub renamed: Option<Renamed>,
    pub breakdown: B,
}

impl<T, K, B> Ingest<T, K, B> {
    /// The pass, and the breakdown read beside it.
    pub(crate) fn split(self) -> (Ingest<T, K>, B) {
        let Ingest { timeline, kernels, names, renamed, breakdown } = self;
        (Ingest { timeline, kernels, names, renamed, breakdown: () }, breakdown)
    }
}

/// Read `db` in one streaming pass into a new `T` and the sink `new_kernels`
/// makes from the export's interned names. `strip`: the PyTorch attribute
/// keys stripped from range names (`report.nvtx_attributes`; empty strips
/// nothing).
pub fn ingest<T: Timeline + Default, K: KernelSink>(
    db: &NsysDb,
    strip: &[String],
    new_kernels: impl Fn(&Names) -> K + Sync,
) -> Result<Ingest<T, K>, Error> {
    passes(db, strip, &T::default, &new_kernels, None)
}

/// The time breakdown, read beside a pass ([`ingest_beside`]).
pub(crate) struct Beside<'c, N> {
    /// A new sink: one per reading of the activity.
    pub(crate) new: N,
    /// A kernel name's class (asked once per name).
    pub(crate) classify: &'c (dyn Fn(&str) -> u8 + Sync),
    /// Fed kernels held at once before the reader reads the kernel table
    /// itself ([`activity::FED_KERNELS_HELD`]).
    pub(crate) held: usize,
}

/// The breakdown's sink, and where its kernels and calls came from; or why
/// it could not be read (the region tree stands without it).
pub(crate) type BreakdownRead<S> = Result<(S, Source), Error>;

/// Messages (a window, or a batch of kernels) the pass may send ahead of the
/// breakdown reader.
const FEED_IN_FLIGHT: usize = 16;

/// What stands between the pass and the breakdown's reader: a test's relay,
/// which may hold, drop or change the messages.
pub(crate) type Relay<W> = Box<dyn FnOnce(Receiver<Feed<W>>, SyncSender<Feed<W>>) + Send>;

/// [`ingest`] into the timelines `new_timeline` makes (one per pass), with
/// the time breakdown read beside the pass into the sink `beside` makes;
/// every message of the feed goes through `relay` where there is one (a
/// test's).
pub(crate) fn ingest_beside<T, K, S, N>(
    db: &NsysDb,
    strip: &[String],
    new_timeline: impl Fn() -> T,
    new_kernels: impl Fn(&Names) -> K + Sync,
    beside: Beside<'_, N>,
    relay: Option<Relay<S::Window>>,
) -> Result<Ingest<T, K, BreakdownRead<S>>, Error>
where
    T: Timeline<Window = S::Window>,
    K: KernelSink,
    S: ActivitySink + Send,
    N: FnMut() -> S + Send,
{
    let Beside { new, classify, held } = beside;
    let path = db.path();
    std::thread::scope(|s| {
        let (tx, from_pass) = sync_channel(FEED_IN_FLIGHT);
        let from_pass = match relay {
            None => from_pass,
            Some(relay) => {
                let (relayed, from_relay) = sync_channel(FEED_IN_FLIGHT);
                s.spawn(move || relay(from_pass, relayed));
                from_relay
            }
        };
        let reader = s.spawn(move || activity::read_beside(path, new, classify, &from_pass, held));
        let pass = passes(db, strip, &new_timeline, &new_kernels, Some(Tee { tx: &tx, classify }));
        // The pass kept: its windows and kernels were all sent. One that
        // failed says nothing more: the breakdown's feed closes.
        if pass.is_ok() {
            let _ = tx.send(Feed::End);
        }
        drop(tx);
        let breakdown = reader.join().expect("the breakdown reader does not panic");
        let Ingest { timeline, kernels, names, renamed, breakdown: () } = pass?;
        Ok(Ingest { timeline, kernels, names, renamed, breakdown })
    })
}

/// The breakdown's feed, as each pass is handed it.
struct Tee<'f, W> {
    tx: &'f SyncSender<Feed<W>>,
    classify: &'f (dyn Fn(&str) -> u8 + Sync),
}

impl<W> Clone for Tee<'_, W> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<W> Copy for Tee<'_, W> {}

/// Passes until one holds, each read as the one before says it should be,
/// and numbered (0, 1, …) on what they send `tee`.
fn passes<T: Timeline, K: KernelSink>(
    db: &NsysDb,
    strip: &[String],
    new_timeline: &impl Fn() -> T,
    new_kernels: &(impl Fn(&Names) -> K + Sync),
    tee: Option<Tee<'_, T::Window>>,
) -> Result<Ingest<T, K>, Error> {
    let mut names = Names::default();
    let strings = db.string_ids(&mut names)?;
    let path = db.path();
    let mut plan = ReadPlan { order: Order::Stored, kernels: KernelOrder::Assumed };
    for number in 0.. {
        let read = Read { path, names: &names, strings: &strings, strip, plan, number };
        match pass(read, new_timeline, new_kernels, tee)? {
            Ok(done) => return Ok(done),
            Err(next) if next != plan => {
                tracing::debug!("{}: {plan:?} did not hold: reading again with {next:?}", path.display());
                plan = next;
            }
            Err(_) => break,
        }
    }
    Err(Error::new(
        ErrorKind::Internal,
        format!("{}: rows still out of order after SQLite sorted them", path.display()),
    )
    .with_hint("a bug in llmperf: please report it with the export's nsys version"))
}

/// How a pass's readers read: rows as stored or sorted by SQLite, and the
/// kernels' disorder assumed or measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReadPlan {
    order: Order,
    kernels: KernelOrder,
}

/// What one pass reads, and how.
#[derive(Clone, Copy)]
struct Read<'a> {
    path: &'a Path,
    names: &'a Names,
    strings: &'a HashMap<i64, u32>,
    strip: &'a [String],
    plan: ReadPlan,
    /// Its number, on what it sends the breakdown.
    number: u32,
}

/// One pass read as `read.plan` says; or, where this one did not hold (rows
/// out of time order, or kernels not as assumed), the plan that would mend
/// it (the same plan when nothing can).
fn pass<T: Timeline, K: KernelSink>(
    read: Read<'_>,
    new_timeline: &impl Fn() -> T,
    new_kernels: &(impl Fn(&Names) -> K + Sync),
    tee: Option<Tee<'_, T::Window>>,
) -> Result<Result<Ingest<T, K>, ReadPlan>, Error> {
    let Read { path, names, strings, strip, plan, number } = read;
    // Set when the launch reader gives up, so that the range reader stops too.
    let given_up = AtomicBool::new(false);
    // Each reader opens its own connection. The first plan only scans; the
    // others may have SQLite sort or join.
    let open = || match plan {
        ReadPlan { order: Order::Stored, kernels: KernelOrder::Assumed } => NsysDb::open(path)?.for_stored_scans(),
        _ => NsysDb::open(path),
    };
    std::thread::scope(|s| {
        let given_up = &given_up;
        let (mut range_out, range_in) = batched::channel();
        let (mut launch_out, launch_in) = batched::channel();
        let mut range_names = names.clone();
        let ranges = s.spawn(move || {
            let db = open()?;
            let mut renamer = Renamer::new(strip);
            db.each_range(&mut range_names, strings, plan.order, |mut r, names| {
                r.name = renamer.rename(names, r.name);
                range_out.push(r) && !given_up.load(Ordering::Relaxed)
            })?;
            range_out.flush();
            Ok::<_, Error>((range_names, renamer.finish()))
        });
        let launches = s.spawn(move || {
            // Made on the thread that fills it, as its memory is.
            let mut kernels = new_kernels(names);
            let mut tee_kernels = tee.map(|t| KernelFeed::new(t.tx.clone(), number, names, t.classify));
            let mut calls = tee.map(|t| CallFeed::new(t.tx.clone(), number));
            let db = open()?;
            let held = db.each_launched(
                plan.order,
                plan.kernels,
                strings,
                calls.as_mut().map(|c| c as &mut dyn CallTap),
                |k| {
                    if let Some(tee) = tee_kernels.as_mut() {
                        tee.add(&k, names);
                    }
                    kernels.add(k, strings, names)
                },
                |l| launch_out.push(l),
            )?;
            if held {
                launch_out.flush();
            } else {
                given_up.store(true, Ordering::Relaxed);
            }
            if let Some(tee) = tee_kernels.as_mut() {
                tee.flush();
            }
            kernels.take_error().map_or(Ok((kernels, held)), Err)
        });
        let mut timeline = new_timeline();
        let mut windows = tee.map(|t| WindowFeed::new(t.tx.clone(), number));
        let in_order = timeline.run(range_in, launch_in, windows.as_mut().map(|w| w as &mut dyn Windows<_>));
        if let (Some(windows), Ok(true)) = (windows.as_mut(), &in_order) {
            windows.flush();
        }
        // The readers end when their streams end or the timeline drops them.
        let (names, renamed) = ranges.join().expect("the range reader does not panic")?;
        let (kernels, held) = launches.join().expect("the launch reader does not panic")?;
        let in_order = in_order?;
        if in_order && held {
            return Ok(Ok(Ingest { timeline, kernels, names, renamed, breakdown: () }));
        }
        Ok(Err(ReadPlan {
            order: if in_order { plan.order } else { Order::Sorted },
            kernels: if held { plan.kernels } else { KernelOrder::Measured },
        }))
    })
}

/// Renames ranges that PyTorch named with per-call attributes
/// (`aten::mul, op_id = 317177`) to their operator (`aten::mul`), so that an
/// operator is one region with many instances instead of thousands of
/// one-instance regions. Names without such attributes are untouched; the
/// raw names stay in the SQLite export. No keys: nothing changes.
struct Renamer<'a> {
    keys: &'a [String],
    renamed: HashMap<u32, u32>,
    instances: usize,
}

impl<'a> Renamer<'a> {
    fn new(keys: &'a [String]) -> Self {
        Renamer { keys, renamed: HashMap::default(), instances: 0 }
    }

    fn rename(&mut self, names: &mut Names, name: u32) -> u32 {
        if self.keys.is_empty() {
            return name;
        }
        let keys = self.keys;
        let to = *self.renamed.entry(name).or_insert_with(|| {
            let head = regions::strip_attributes(names.get(name), keys).map(|(h, _)| h.to_string());
            head.map_or(name, |h| names.intern(&h))
        });
        self.instances += usize::from(to != name);
        to
    }

    fn finish(self) -> Option<Renamed> {
        let raw: Vec<u32> = self.renamed.iter().filter(|(from, to)| from != to).map(|(_, to)| *to).collect();
        let operators: std::collections::HashSet<u32> = raw.iter().copied().collect();
        (!raw.is_empty()).then_some(Renamed {
            raw_names: raw.len(),
            operators: operators.len(),
            instances: self.instances,
        })
    }
}
