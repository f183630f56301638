//! parse::nsys::activity: what each GPU did, in time order, and when the host
//! blocked on it; the input of the time breakdown (aggregate::nsys::breakdown).
//!
//! - GPU activity: the rows of `CUPTI_ACTIVITY_KIND_KERNEL`, `_MEMCPY` and
//!   `_MEMSET` (start, end, deviceId, globalPid; a copy's bytes, copyKind,
//!   srcKind and dstKind; a kernel's name), merged by start. nsys stores each
//!   table in start order per device in every export we have seen; the reader
//!   reads them as stored and the consumer checks the order, and where it does
//!   not hold the caller reads again with SQLite sorting ([`Order::Sorted`]).
//! - Blocking calls: rows of `CUPTI_ACTIVITY_KIND_RUNTIME` whose function waits
//!   for the GPU ([`calls::BLOCKING`]), per process: met by the ingestion's launch
//!   reader as it reads the table ([`calls::CallBatches`]), else read here.
use rustc_hash::FxHashMap;
use std::cell::RefCell;
use std::path::Path;
use std::sync::mpsc::Receiver;

use super::calls::{self, Call, FedCalls};
use super::sqlite::{NsysDb, Order};
use super::sqlite_rows::Rows;
use crate::error::Error;

/// Which way a copy went.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(crate) enum Direction {
    HostToDevice,
    DeviceToHost,
    DeviceToDevice,
    PeerToPeer,
    Other,
}

/// What the GPU did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum What {
    /// A kernel, with the class the caller's `classify` gave its name.
    Kernel(u8),
    /// A copy; `pageable`: from or to pageable host memory (synchronous for the host).
    Copy {
        direction: Direction,
        bytes: i64,
        pageable: bool,
    },
    Memset {
        bytes: i64,
    },
}

/// One operation on a device.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Activity {
    pub(crate) pid: i64,
    pub(crate) device: i64,
    pub(crate) start: i64,
    pub(crate) end: i64,
    pub(crate) what: What,
    /// A kernel's name: the ingestion's interned id where the kernels were
    /// fed, the export's StringIds id where this reader scanned them
    /// ([`Source`] says which); 0 for a copy or memset.
    pub(crate) name: i64,
}

/// What an activity sink's keys name: a blocking call's function (its
/// StringIds id, [`ActivitySink::blocking`]) or a kernel ([`Activity::name`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Named {
    Call(i64),
    Kernel(i64),
}

/// The name a key stands for, as the reading that made it ([`Source`]) keys
/// it: a fed kernel by the ingestion's interned `names`, the rest by the
/// export's StringIds; a function without its version suffix
/// (`cudaStreamSynchronize_v3020` → `cudaStreamSynchronize`).
pub(crate) fn spell(db: &NsysDb, names: &super::sqlite::Names, source: Source, n: Named) -> String {
    let string = |id: i64| {
        db.conn()
            .query_row("SELECT value FROM StringIds WHERE id = ?1", [id], |r| r.get::<_, String>(0))
            .unwrap_or_else(|_| format!("(StringIds {id})"))
    };
    match (n, source) {
        (Named::Kernel(k), Source::Fed | Source::FedWithCalls) => u32::try_from(k)
            .ok()
            .and_then(|k| names.all().get(k as usize).cloned())
            .unwrap_or_else(|| format!("(name {k})")),
        (Named::Kernel(k), Source::Own(_)) => string(k),
        (Named::Call(id), _) => calls::base_name(&string(id)).to_string(),
    }
}

/// A kernel as the ingestion's kernel reader hands it to the time breakdown
/// (32 bytes): what the breakdown would read of it in its own scan.
#[derive(Debug, Clone, Copy)]
pub(crate) struct FedKernel {
    pub(crate) start: i64,
    pub(crate) end: i64,
    /// The CUDA device (ids are small; one past i32 is read as i32::MAX).
    pub(crate) device: i32,
    pub(crate) pid: u32,
    /// Its name, interned by the ingestion.
    pub(crate) name: u32,
    /// The class `classify` gave its name.
    pub(crate) class: u8,
}

impl FedKernel {
    fn activity(self) -> Activity {
        let Self { start, end, device, pid, name, class } = self;
        Activity {
            pid: i64::from(pid),
            device: i64::from(device),
            start,
            end,
            what: What::Kernel(class),
            name: i64::from(name),
        }
    }
}

/// What the ingestion's pass tells the activity reader. Each message but
/// `End` names the pass it belongs to (0, 1, …): the ingestion reads its
/// pass again where the first did not hold, and a message of a later pass
/// voids what came before it.
#[derive(Debug, Clone)]
pub(crate) enum Feed<W> {
    /// Windows (top-level range instances), from the range sweep, in start order.
    Windows(u32, Vec<W>),
    /// From the range sweep: every window starting at or before this time has come.
    Upto(u32, i64),
    /// Kernels of the kernel table, from the ingestion's kernel reader, in
    /// the order it read them.
    Kernels(u32, Vec<FedKernel>),
    /// The blocking calls, from the ingestion's launch reader ([`calls::CallTap`]).
    Calls(u32, FedCalls),
    /// The pass kept: everything of it has come.
    End,
}

impl<W> Feed<W> {
    /// The pass the message belongs to; None for `End`, which ends every pass.
    pub(crate) fn pass(&self) -> Option<u32> {
        match self {
            Feed::Windows(p, _) | Feed::Upto(p, _) | Feed::Kernels(p, _) | Feed::Calls(p, _) => Some(*p),
            Feed::End => None,
        }
    }
}

/// Kernels held by the reader, received but not yet judged (32 bytes each),
/// for [`read_beside`]: past this (the range sweep far behind the kernel
/// reader: kernels read before the launch calls were, or with none to join),
/// the reader reads the kernel table itself. The ingestion's readers run a
/// few batches ahead of the sweep: at most 49,155 held at 10M ranges + 10M
/// kernels of the generator's export (`llmperf -v import nsys`, its
/// "time breakdown: kernels from the ingestion's reader" line).
pub(crate) const FED_KERNELS_HELD: usize = 1 << 19;

/// Blocking calls held by the reader, received but not yet given to the
/// sink (24 bytes each): past this, the reader reads them itself.
pub(crate) const FED_CALLS_HELD: usize = 1 << 18;

/// Where the activity goes, beside the windows it is cut by.
pub(crate) trait ActivitySink {
    type Window: Send;
    /// One operation. False when it came out of start order on its device:
    /// the activity is then read again, sorted ([`Self::clear_activity`] first).
    fn add(&mut self, a: Activity) -> bool;
    /// One window, in start order; every window starting at or before an
    /// operation's start comes before the operation.
    fn window(&mut self, w: Self::Window);
    fn start_of(w: &Self::Window) -> i64;
    /// A blocking call of process `pid` (`name`: its function's StringIds
    /// id), in start order; every call starting at or before an operation's
    /// start comes before the operation (`now`).
    fn blocking(&mut self, pid: i64, start: i64, end: i64, name: i64, now: i64);
    /// Forget the operations and the blocking calls, keep the windows.
    fn clear_activity(&mut self);
}

/// What the reader has taken from the feed for the pass it reads.
struct Fed<W> {
    pass: u32,
    /// Every window starting before this has come.
    until: i64,
    /// `End` came, or the feed closed (the pass failed).
    ended: bool,
    /// The first message of a later pass: what was read is void.
    later: Option<Feed<W>>,
    /// Whether kernels are taken from the feed (else they are dropped: the
    /// reader scans the kernel table itself).
    taking: bool,
    /// More than [`FED_KERNELS_HELD`] were held at once.
    overflow: bool,
    /// The batches as they came (no copy, no room to spare), the first
    /// one's kernels taken from its front; how many kernels they hold.
    kernels: std::collections::VecDeque<std::vec::IntoIter<FedKernel>>,
    held: usize,
    most: usize,
    held_at_most: usize,
    /// Whether the launch reader sends the blocking calls (None: not said yet).
    calls_coming: Option<bool>,
    /// Every blocking call starting before this has come.
    calls_until: i64,
    /// The launch reader stopped sending them, or more than
    /// [`FED_CALLS_HELD`] were held: those taken are void.
    calls_stopped: bool,
    calls: std::collections::VecDeque<std::vec::IntoIter<Call>>,
    calls_held: usize,
}

impl<W> Fed<W> {
    fn new(pass: u32, held_at_most: usize) -> Self {
        Fed {
            pass,
            held_at_most,
            until: i64::MIN,
            ended: false,
            later: None,
            taking: true,
            overflow: false,
            kernels: Default::default(),
            held: 0,
            most: 0,
            calls_coming: None,
            calls_until: i64::MIN,
            calls_stopped: false,
            calls: Default::default(),
            calls_held: 0,
        }
    }

    /// The next blocking call held, if any.
    fn next_call(&mut self) -> Option<Call> {
        next_held(&mut self.calls, &mut self.calls_held)
    }

    /// The next kernel held, if any.
    fn next_kernel(&mut self) -> Option<FedKernel> {
        next_held(&mut self.kernels, &mut self.held)
    }

    /// Whether this pass's reading stops here: a later pass began, or the
    /// kernels it took overflowed, or the calls it took stopped.
    fn broken(&self) -> bool {
        self.later.is_some() || (self.taking && (self.overflow || self.calls_stopped))
    }

    /// One message (`first`, else the next of `feed`): windows to `sink`,
    /// kernels to the queue.
    fn take<S: ActivitySink<Window = W>>(&mut self, msg: Option<Feed<W>>, sink: &mut S) {
        let Some(msg) = msg else {
            self.ended = true;
            return;
        };
        let Some(pass) = msg.pass() else {
            self.ended = true;
            return;
        };
        if pass > self.pass {
            self.later = Some(msg);
            return;
        }
        if pass < self.pass {
            return;
        }
        match msg {
            Feed::Windows(_, windows) => {
                for w in windows {
                    self.until = self.until.max(S::start_of(&w));
                    sink.window(w);
                }
            }
            Feed::Upto(_, t) => self.until = self.until.max(t.saturating_add(1)),
            Feed::Kernels(_, batch) if self.taking && !self.overflow => {
                self.held += batch.len();
                self.kernels.push_back(batch.into_iter());
                self.most = self.most.max(self.held);
                if self.held > self.held_at_most {
                    self.overflow = true;
                    (self.kernels, self.held) = (Default::default(), 0);
                }
            }
            Feed::Calls(_, FedCalls::Coming(coming)) => self.calls_coming = Some(coming),
            Feed::Calls(_, FedCalls::Calls(batch, upto)) => {
                // How far they came counts even once they are no longer taken.
                self.calls_until = self.calls_until.max(upto);
                if self.taking && !self.calls_stopped {
                    self.calls_held += batch.len();
                    self.calls.push_back(batch.into_iter());
                    if self.calls_held > FED_CALLS_HELD {
                        self.calls_stopped = true;
                    }
                }
            }
            Feed::Calls(_, FedCalls::Stopped) => self.calls_stopped = true,
            Feed::Kernels(..) | Feed::End => {}
        }
        if self.calls_stopped {
            (self.calls, self.calls_held) = (Default::default(), 0);
        }
    }
}

/// The first item of batches held as they came (`held` of them in all).
fn next_held<T>(batches: &mut std::collections::VecDeque<std::vec::IntoIter<T>>, held: &mut usize) -> Option<T> {
    while let Some(batch) = batches.front_mut() {
        if let Some(item) = batch.next() {
            *held -= 1;
            return Some(item);
        }
        batches.pop_front();
    }
    None
}

/// Where a reading of the activity takes its blocking calls from.
enum Calls<'c> {
    /// Fed kernels, and the launch reader has not said yet whether it sends the calls.
    Undecided,
    /// From the launch reader, through the feed.
    Fed,
    /// This reader's own scan of the runtime table (None: no more).
    Own(Option<Rows<'c>>),
}

/// Where a reading of the activity took its kernels from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    /// The ingestion's kernel reader, through the feed (copies and memsets
    /// from this reader's own scan, as stored, and the blocking calls too).
    Fed,
    /// As `Fed`, the blocking calls from the ingestion's launch reader.
    FedWithCalls,
    /// This reader's own scan of the three tables (and of the blocking calls).
    Own(Order),
}

/// The export's activity into a sink `new` makes, beside what `feed` brings
/// from the ingestion's pass running at the same time on other threads: the
/// windows, from the range sweep, the kernels, from its kernel reader, and
/// the blocking calls, from its launch reader where that reads the runtime
/// table whole ([`calls::CallTap`]), so that each table is read once. Copies and
/// memsets are read here, on a statement each, and the blocking calls where
/// the launch reader does not send them. Before each operation, the windows
/// and the calls up to its start. Where what is fed does not hold (kernels out
/// of start order on a device, too many kernels or calls held before their
/// windows came, runtime rows out of start order), the three tables and the
/// calls are read here, as stored, and again sorted by SQLite where the stored
/// order did not hold (of the operations on a device, or of the calls). From
/// the start with a new sink when a message of a later pass comes. A feed that
/// closes without `End` (the pass failed) ends the windows. `classify` gives a
/// kernel name its class (once per name), in this reader's own scan.
/// `held_at_most`: the fed kernels held at once before the kernel table is
/// read here ([`FED_KERNELS_HELD`]). On its own connection. Returns the sink
/// and where its kernels and calls came from.
pub(crate) fn read_beside<S: ActivitySink>(
    path: &Path,
    mut new: impl FnMut() -> S,
    mut classify: impl FnMut(&str) -> u8,
    feed: &Receiver<Feed<S::Window>>,
    held_at_most: usize,
) -> Result<(S, Source), Error> {
    let db = NsysDb::open(path)?;
    // The first message of the pass read, where it came in the reading of an earlier one.
    let (mut pass, mut first) = (0, None);
    'restart: loop {
        let state = RefCell::new((new(), Fed::new(pass, held_at_most)));
        if first.is_some() {
            let mut guard = state.borrow_mut();
            let (sink, fed) = &mut *guard;
            fed.take(first.take(), sink);
        }
        let mut source = Source::Fed;
        loop {
            let (held, stopped) = read_once(&db, source, &state, feed, &mut classify)?;
            let mut guard = state.borrow_mut();
            let (sink, fed) = &mut *guard;
            if held && !stopped {
                // The rest of the pass's messages: a later pass may still begin.
                fed.taking = false;
                while !fed.ended && fed.later.is_none() {
                    fed.take(feed.recv().ok(), sink);
                }
            }
            if let Some(msg) = fed.later.take() {
                (pass, first) = (msg.pass().unwrap_or(u32::MAX), Some(msg));
                continue 'restart;
            }
            // Calls stopped after the last operation count too: rows out of
            // order there may be calls missed before it. So do calls said to
            // come whose last batch (every row read) never came.
            if fed.calls_coming == Some(true) && fed.calls_until != i64::MAX {
                fed.calls_stopped = true;
            }
            if source == Source::Fed && (fed.overflow || fed.calls_stopped) {
                if fed.overflow {
                    tracing::debug!(
                        "{}: more than {} kernels came before their windows: reading the kernel table here",
                        path.display(),
                        fed.held_at_most
                    );
                } else {
                    tracing::debug!(
                        "{}: the launch reader's blocking calls did not hold: reading them here",
                        path.display()
                    );
                }
                sink.clear_activity();
                source = Source::Own(Order::Stored);
                continue;
            }
            if held && !stopped {
                if source == Source::Fed {
                    tracing::debug!(
                        "time breakdown: kernels from the ingestion's reader, at most {} held; blocking calls {}",
                        fed.most,
                        if fed.calls_coming == Some(true) { "from its launch reader" } else { "read here" }
                    );
                    if fed.calls_coming == Some(true) {
                        source = Source::FedWithCalls;
                    }
                }
                drop(guard);
                return Ok((state.into_inner().0, source));
            }
            if source == Source::Own(Order::Sorted) {
                break;
            }
            tracing::debug!("{}: GPU activity out of start order: reading it again, sorted", path.display());
            sink.clear_activity();
            source = Source::Own(Order::Sorted);
        }
        return Err(Error::new(
            crate::error::ErrorKind::Internal,
            format!("{}: GPU activity still out of order after SQLite sorted it", path.display()),
        )
        .with_hint("a bug in llmperf: please report it with the export's nsys version"));
    }
}

/// One reading of the activity from `source` into the sink and the feed's
/// state: whether the activity held its start order, and whether the reading
/// stopped early (the feed broke: a later pass, or too much held).
fn read_once<S: ActivitySink>(
    db: &NsysDb,
    source: Source,
    state: &RefCell<(S, Fed<S::Window>)>,
    feed: &Receiver<Feed<S::Window>>,
    classify: &mut impl FnMut(&str) -> u8,
) -> Result<(bool, bool), Error> {
    let order = match source {
        Source::Fed | Source::FedWithCalls => Order::Stored,
        Source::Own(order) => order,
    };
    state.borrow_mut().1.taking = source == Source::Fed;
    // Scans as stored come back to no page: a small cache (as the
    // ingestion's readers have, NsysDb::for_stored_scans); SQLite's
    // sorter sizes its runs by it, so sorted reads keep the default.
    let cache_kib = if order == Order::Stored { 256 } else { 2000 };
    db.conn().pragma_update(None, "cache_size", -cache_kib).map_err(|e| db.sql_error("PRAGMA cache_size", e))?;
    // Fed kernels come with the blocking calls from the launch reader,
    // where it reads the runtime table whole; it says whether it does.
    let calls = if source == Source::Fed { Calls::Undecided } else { own_calls(db, order)? };
    let mut cursor = Cursor { db, order, feed, calls, call_until: i64::MIN, next_call: None, failed: None };
    let (mut held, mut stopped) = (true, false);
    let mut fed_kernel = || {
        let mut guard = state.borrow_mut();
        let (sink, fed) = &mut *guard;
        loop {
            if let Some(k) = fed.next_kernel() {
                return Some(k.activity());
            }
            if fed.ended || fed.broken() {
                return None;
            }
            fed.take(feed.recv().ok(), sink);
        }
    };
    let fed_kernels = (source == Source::Fed).then_some(&mut fed_kernel as &mut dyn FnMut() -> Option<Activity>);
    db.each_activity(order, classify, fed_kernels, |a| {
        let mut guard = state.borrow_mut();
        let (sink, fed) = &mut *guard;
        match cursor.up_to(a.start, sink, fed) {
            Up::Ready => {
                held = sink.add(a);
                held
            }
            Up::Unordered => {
                held = false;
                false
            }
            Up::Broken => {
                stopped = true;
                false
            }
            Up::Failed => false,
        }
    })?;
    cursor.failed.map_or(Ok((held, stopped)), Err)
}

/// How far a reading's calls and windows came before an operation.
enum Up {
    /// Every call and window up to its start is in the sink.
    Ready,
    /// The runtime rows read here were not in start order: read again, sorted.
    Unordered,
    /// The feed broke ([`Fed::broken`]).
    Broken,
    /// Reading the runtime rows failed ([`Cursor::failed`]).
    Failed,
}

/// A reading's blocking calls, and the feed they and the windows come from.
struct Cursor<'c, W> {
    db: &'c NsysDb,
    order: Order,
    feed: &'c Receiver<Feed<W>>,
    calls: Calls<'c>,
    /// The start of the last call read here.
    call_until: i64,
    /// A call read past the operation at hand, held.
    next_call: Option<Call>,
    failed: Option<Error>,
}

/// The runtime table's blocking calls, read here.
fn own_calls(db: &NsysDb, order: Order) -> Result<Calls<'_>, Error> {
    let query = db.blocking_query(order)?;
    let rows = query.as_deref().map(|q| Rows::query(db.conn(), q)).transpose();
    Ok(Calls::Own(rows.map_err(|e| db.sql_error("CUPTI_ACTIVITY_KIND_RUNTIME", e))?))
}

impl<'c, W> Cursor<'c, W> {
    /// The next message into `fed`; false where the feed broke.
    fn take<S: ActivitySink<Window = W>>(&self, sink: &mut S, fed: &mut Fed<W>) -> bool {
        fed.take(self.feed.recv().ok(), sink);
        !fed.broken()
    }

    /// Every blocking call and every window starting at or before `now` into the sink.
    fn up_to<S: ActivitySink<Window = W>>(&mut self, now: i64, sink: &mut S, fed: &mut Fed<W>) -> Up {
        if fed.broken() {
            return Up::Broken;
        }
        if let Calls::Undecided = self.calls {
            while fed.calls_coming.is_none() && !fed.ended {
                if !self.take(sink, fed) {
                    return Up::Broken;
                }
            }
            self.calls = match fed.calls_coming {
                Some(true) => Calls::Fed,
                _ => match own_calls(self.db, self.order) {
                    Ok(own) => own,
                    Err(e) => {
                        self.failed = Some(e);
                        return Up::Failed;
                    }
                },
            };
        }
        let up = self.calls_up_to(now, sink, fed);
        if !matches!(up, Up::Ready) {
            return up;
        }
        while !fed.ended && fed.until <= now {
            if !self.take(sink, fed) {
                return Up::Broken;
            }
        }
        Up::Ready
    }

    /// Every blocking call starting at or before `now` into the sink.
    fn calls_up_to<S: ActivitySink<Window = W>>(&mut self, now: i64, sink: &mut S, fed: &mut Fed<W>) -> Up {
        loop {
            if let Some((pid, start, end, name)) = self.next_call {
                if start > now {
                    return Up::Ready;
                }
                sink.blocking(pid, start, end, name, now);
                self.next_call = None;
            }
            let rows = match &mut self.calls {
                Calls::Undecided => return Up::Ready,
                Calls::Fed => {
                    // In start order: the launch reader stops sending where they are not.
                    if let Some(call) = fed.next_call() {
                        self.next_call = Some(call);
                        continue;
                    }
                    if fed.calls_until > now || fed.ended {
                        return Up::Ready;
                    }
                    if !self.take(sink, fed) {
                        return Up::Broken;
                    }
                    continue;
                }
                Calls::Own(rows) => rows,
            };
            let Some(own) = rows.as_mut() else { return Up::Ready };
            match own.step() {
                Ok(true) => {
                    let call = (own.int(0), own.int(1), own.int(2), own.int(3));
                    if call.1 < self.call_until {
                        return Up::Unordered;
                    }
                    self.call_until = call.1;
                    self.next_call = Some(call);
                }
                Ok(false) => *rows = None,
                Err(e) => {
                    self.failed = Some(self.db.sql_error("CUPTI_ACTIVITY_KIND_RUNTIME", e));
                    return Up::Failed;
                }
            }
        }
    }
}

const TABLES: [&str; 3] = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_MEMCPY", "CUPTI_ACTIVITY_KIND_MEMSET"];

impl NsysDb {
    /// Every kernel, copy and memset to `each`, the three tables merged by
    /// start (each read as `order` says), until `each` returns false.
    /// `classify` names a kernel's class from its name, once per name.
    /// `fed`: the kernels from elsewhere, in place of the kernel table's
    /// (None: no more).
    pub(crate) fn each_activity(
        &self,
        order: Order,
        mut classify: impl FnMut(&str) -> u8,
        mut fed: Option<&mut dyn FnMut() -> Option<Activity>>,
        mut each: impl FnMut(Activity) -> bool,
    ) -> Result<(), Error> {
        let enums = Enums::read(self);
        let what = "CUPTI_ACTIVITY_KIND_KERNEL, _MEMCPY and _MEMSET";
        let sql = |e| self.sql_error(what, e);
        let mut streams = Vec::new();
        for (i, table) in TABLES.iter().enumerate() {
            if !self.has_table(table) || (i == 0 && fed.is_some()) {
                continue;
            }
            let cols = self.columns(table);
            let has = |c: &'static str| if cols.contains(c) { c } else { "NULL" };
            let pid = if cols.contains("globalPid") { "(globalPid >> 24) & 16777215" } else { "0" };
            let extra = match i {
                0 => format!(
                    "{}, NULL, NULL",
                    if cols.contains("demangledName") { "demangledName" } else { has("shortName") }
                ),
                1 => format!("bytes, copyKind, {} * 256 + {}", has("srcKind"), has("dstKind")),
                _ => "bytes, NULL, NULL".to_string(),
            };
            let order_by = if order == Order::Sorted { "ORDER BY start" } else { "" };
            // A missing deviceId column is device 0; a NULL in it is refused, as in start and end.
            let device = if cols.contains("deviceId") { "deviceId" } else { "0" };
            let q = format!("SELECT {pid}, {device}, start, end, {extra} FROM {table} {order_by}");
            streams.push((i, Rows::query(self.conn(), &q).map_err(sql)?));
        }
        let mut classes: FxHashMap<i64, u8> = FxHashMap::default();
        let mut name = |id: i64, classify: &mut dyn FnMut(&str) -> u8| -> Result<u8, Error> {
            if let Some(c) = classes.get(&id) {
                return Ok(*c);
            }
            let text: String = self
                .conn()
                .query_row("SELECT value FROM StringIds WHERE id = ?1", [id], |r| r.get(0))
                .unwrap_or_default();
            let c = classify(&text);
            classes.insert(id, c);
            Ok(c)
        };
        // The head row of each stream, merged by start; the fed kernels' last.
        let fed_at = streams.len();
        let mut heads: Vec<Option<Activity>> = vec![None; streams.len() + 1];
        let mut read = |k: usize,
                        streams: &mut Vec<(usize, Rows)>,
                        classify: &mut dyn FnMut(&str) -> u8,
                        fed: &mut Option<&mut dyn FnMut() -> Option<Activity>>| {
            if k == fed_at {
                return Ok::<_, Error>(fed.as_mut().and_then(|f| f()));
            }
            let (table, rows) = &mut streams[k];
            if !rows.step().map_err(sql)? {
                return Ok(None);
            }
            let what = match table {
                // A kernel's name id may be missing (no name column): then "" (other).
                0 => What::Kernel(name(rows.opt_int(4).unwrap_or(0), classify)?),
                1 => {
                    // srcKind and dstKind may be missing: then no copy is pageable.
                    let kinds = rows.opt_int(6);
                    let (src, dst) = kinds.map_or((-1, -1), |k| (k / 256, k % 256));
                    let direction = enums.direction(rows.int(5));
                    let pageable = match direction {
                        Direction::HostToDevice => src == enums.pageable,
                        Direction::DeviceToHost => dst == enums.pageable,
                        _ => false,
                    } && kinds.is_some();
                    What::Copy { direction, bytes: rows.int(4), pageable }
                }
                _ => What::Memset { bytes: rows.int(4) },
            };
            let name = if *table == 0 { rows.opt_int(4).unwrap_or(0) } else { 0 };
            Ok(Some(Activity {
                pid: rows.int(0),
                device: rows.int(1),
                start: rows.int(2),
                end: rows.int(3),
                what,
                name,
            }))
        };
        for (k, head) in heads.iter_mut().enumerate() {
            *head = read(k, &mut streams, &mut classify, &mut fed)?;
        }
        loop {
            let next = heads.iter().enumerate().filter_map(|(k, h)| h.map(|a| (a.start, k))).min();
            let Some((_, k)) = next else { return Ok(()) };
            let a = heads[k].take().expect("the head chosen");
            if !each(a) {
                return Ok(());
            }
            heads[k] = read(k, &mut streams, &mut classify, &mut fed)?;
        }
    }

    /// The query of the blocking calls ([`calls::is_blocking`]): (process, start,
    /// end, function), read as `order` says; None when the export names no such function.
    pub(crate) fn blocking_query(&self, order: Order) -> Result<Option<String>, Error> {
        if !self.has_table("CUPTI_ACTIVITY_KIND_RUNTIME") || !self.has_table("StringIds") {
            return Ok(None);
        }
        let cols = self.columns("CUPTI_ACTIVITY_KIND_RUNTIME");
        if !["nameId", "globalTid", "start", "end"].iter().all(|c| cols.contains(*c)) {
            return Ok(None);
        }
        let ids = calls::blocking_ids(self.conn()).map_err(|e| self.sql_error("StringIds", e))?;
        if ids.is_empty() {
            return Ok(None);
        }
        let ids: Vec<String> = ids.iter().map(i64::to_string).collect();
        let order_by = if order == Order::Sorted { "ORDER BY start" } else { "" };
        Ok(Some(format!(
            "SELECT (globalTid >> 24) & 16777215, start, end, nameId FROM CUPTI_ACTIVITY_KIND_RUNTIME WHERE nameId IN ({}) {order_by}",
            ids.join(", ")
        )))
    }
}

/// The export's numbering of copy kinds and memory kinds (its ENUM tables;
/// the numbers of the exports we have seen where it has none).
struct Enums {
    by_kind: FxHashMap<i64, Direction>,
    pageable: i64,
}

impl Enums {
    fn read(db: &NsysDb) -> Enums {
        let named = |table: &str| -> Vec<(i64, String)> {
            if !db.has_table(table) {
                return Vec::new();
            }
            db.conn()
                .prepare(&format!("SELECT id, name FROM {table}"))
                .and_then(|mut s| s.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect())
                .unwrap_or_default()
        };
        let mut by_kind: FxHashMap<i64, Direction> = FxHashMap::default();
        for (id, name) in named("ENUM_CUDA_MEMCPY_OPER") {
            let d = match name.rsplit('_').next().unwrap_or("") {
                "HTOD" => Direction::HostToDevice,
                "DTOH" => Direction::DeviceToHost,
                "DTOD" => Direction::DeviceToDevice,
                "PTOP" => Direction::PeerToPeer,
                _ => Direction::Other,
            };
            by_kind.insert(id, d);
        }
        if by_kind.is_empty() {
            by_kind.extend([
                (1, Direction::HostToDevice),
                (2, Direction::DeviceToHost),
                (8, Direction::DeviceToDevice),
                (10, Direction::PeerToPeer),
            ]);
        }
        let pageable =
            named("ENUM_CUDA_MEM_KIND").into_iter().find(|(_, n)| n.ends_with("_PAGEABLE")).map_or(0, |(id, _)| id);
        Enums { by_kind, pageable }
    }

    fn direction(&self, kind: i64) -> Direction {
        self.by_kind.get(&kind).copied().unwrap_or(Direction::Other)
    }
}
