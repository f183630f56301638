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
use rustc_hash::FxHashMap as HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

use super::batched::{self, Stream};
use super::calls::CallTap;
use super::sqlite::{Kernel, KernelOrder, Launched, Names, NsysDb, NvtxRange, Order};
use crate::error::{Error, ErrorKind};
use crate::regions;

/// Where the ranges and the launches go, merged by time: the region sweep.
pub trait Timeline {
    /// Both streams to their end, each in the order read. False when a
    /// stream was not in time order: the pass is then read again, sorted.
    fn run(&mut self, ranges: Stream<NvtxRange>, launches: Stream<Launched>) -> Result<bool, Error>;
}

/// Where every kernel of the kernel table goes, on the launch reader's thread.
pub trait KernelSink: Send {
    /// `strings`: the export's string ids, interned (a kernel's short name)
    /// into `names` (a kernel's name).
    fn add(&mut self, kernel: Kernel, strings: &HashMap<i64, u32>, names: &Names);
    /// The first error the sink met (writing its durations to disk), if any.
    fn take_error(&mut self) -> Option<Error>;
    /// Where the launch reader sends the blocking calls of the runtime
    /// table as it reads it (on the launch reader's thread), if anywhere.
    fn call_tap(&self) -> Option<Box<dyn CallTap>> {
        None
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

/// A finished pass: the sinks, the names interned by the range reader, and
/// what its renaming did (None when it renamed nothing).
pub struct Ingest<T, K> {
    pub timeline: T,
    pub kernels: K,
    pub names: Names,
    pub renamed: Option<Renamed>,
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
    ingest_with(db, strip, T::default, new_kernels)
}

/// [`ingest`] into the timelines `new_timeline` makes (one per pass).
pub fn ingest_with<T: Timeline, K: KernelSink>(
    db: &NsysDb,
    strip: &[String],
    new_timeline: impl Fn() -> T,
    new_kernels: impl Fn(&Names) -> K + Sync,
) -> Result<Ingest<T, K>, Error> {
    let mut names = Names::default();
    let strings = db.string_ids(&mut names)?;
    let path = db.path();
    let mut plan = ReadPlan { order: Order::Stored, kernels: KernelOrder::Assumed };
    loop {
        match pass::<T, K>(path, &names, &strings, strip, &new_timeline, &new_kernels, plan)? {
            Ok(done) => return Ok(done),
            Err(next) if next != plan => {
                tracing::debug!("{}: {plan:?} did not hold: reading again with {next:?}", path.display());
                plan = next;
            }
            Err(_) => {
                return Err(Error::new(
                    ErrorKind::Internal,
                    format!("{}: rows still out of order after SQLite sorted them", path.display()),
                )
                .with_hint("a bug in llmperf: please report it with the export's nsys version"))
            }
        }
    }
}

/// How a pass's readers read: rows as stored or sorted by SQLite, and the
/// kernels' disorder assumed or measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ReadPlan {
    order: Order,
    kernels: KernelOrder,
}

/// One pass read as `plan` says; or, where this one did not hold (rows out of
/// time order, or kernels not as assumed), the plan that would mend it (the
/// same plan when nothing can).
fn pass<T: Timeline, K: KernelSink>(
    path: &Path,
    names: &Names,
    strings: &HashMap<i64, u32>,
    strip: &[String],
    new_timeline: &impl Fn() -> T,
    new_kernels: &(impl Fn(&Names) -> K + Sync),
    plan: ReadPlan,
) -> Result<Result<Ingest<T, K>, ReadPlan>, Error> {
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
            let mut calls = kernels.call_tap();
            let db = open()?;
            let held = db.each_launched(
                plan.order,
                plan.kernels,
                strings,
                calls.as_mut().map(|c| &mut **c as &mut dyn CallTap),
                |k| kernels.add(k, strings, names),
                |l| launch_out.push(l),
            )?;
            if held {
                launch_out.flush();
            } else {
                given_up.store(true, Ordering::Relaxed);
            }
            kernels.take_error().map_or(Ok((kernels, held)), Err)
        });
        let mut timeline = new_timeline();
        let in_order = timeline.run(range_in, launch_in);
        // The readers end when their streams end or the timeline drops them.
        let (names, renamed) = ranges.join().expect("the range reader does not panic")?;
        let (kernels, held) = launches.join().expect("the launch reader does not panic")?;
        let in_order = in_order?;
        if in_order && held {
            return Ok(Ok(Ingest { timeline, kernels, names, renamed }));
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
