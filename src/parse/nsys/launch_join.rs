//! parse: kernels joined to their launch calls in one pass over both tables,
//! in the launch calls' order, holding only the kernels read ahead.
//!
//! A kernel and its launch call share a correlation id, which counts the API
//! calls of one process. SQLite can join the two tables only through an index
//! it builds on the kernels for each query: 0.56 s of a 1M-kernel export, more
//! than reading all three tables of an ingestion (issue 18). Two facts make a
//! streaming join exact instead:
//!
//! - *Kernel disorder.* Per process, the kernel table's stored order is almost
//!   correlation order: a kernel can follow a later launch's kernel (another
//!   stream ran first), by at most `D` ids: the largest amount by which a
//!   kernel's id falls below the largest id before it. So once a kernel with
//!   an id above `c + D` has been read, every kernel with id `c` has been
//!   (were one later, that kernel would be more than `D` below an id before
//!   it). The join reads kernels ahead only that far, keeping them by
//!   (process, id) until their launch call comes. `D` is first assumed
//!   ([`ASSUMED_DISORDER`], one process with kernels), which the join checks
//!   on every kernel it reads; where that does not hold it gives up, and the
//!   caller joins again after a pass over the kernels' ids that measures `D`
//!   and the row count per process exactly ([`Bound`]). The pass costs a
//!   sixth of an ingestion's CPU, so it is made only where needed.
//! - *Launch disorder.* The launch calls' order (stored, or by start) is
//!   almost correlation order too, by at most `R` ids (threads of one process
//!   interleave). A kernel read ahead whose id is more than `R` below the
//!   largest launch id seen has no launch call (a driver-API launch, say):
//!   it can never match and is dropped, so such kernels do not pile up.
//!
//! What is held is the kernels read ahead: those queued on the GPU behind
//! their launch, plus up to `D` ids of reordering, plus at most [`HOLD`]
//! kernels before any are dropped (`R` costs a pass over the launch calls,
//! made only once that many are held). [`MAX_DISORDER`] bounds `D`: an export
//! more out of order than that is joined by SQLite instead.
use rustc_hash::FxHashMap;
use std::collections::hash_map::Entry;
use std::collections::VecDeque;

/// Beyond this many ids of disorder, the caller falls back to SQLite's join.
pub const MAX_DISORDER: i64 = 1 << 16;

/// How often (in launch rows) kernels that can no longer match are dropped
/// (often in tests, so that their small traces see it happen).
const SWEEP_EVERY: usize = if cfg!(test) { 16 } else { 4096 };
/// Dropping needs the launch calls' disorder, which costs a pass over them:
/// it is measured only once this many kernels are held.
const HOLD: usize = if cfg!(test) { 8 } else { 1 << 14 };

/// Per process: how many rows, the largest id, and the disorder of the ids
/// in the order they were read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Disorder {
    pub(crate) rows: u64,
    pub(crate) max_id: i64,
    pub(crate) disorder: i64,
}

/// The disorder per process of (process, correlation id) rows in read order.
pub(crate) fn disorder<E>(rows: impl Iterator<Item = Result<(i64, i64), E>>) -> Result<FxHashMap<i64, Disorder>, E> {
    let mut by_pid: FxHashMap<i64, Disorder> = FxHashMap::default();
    for row in rows {
        let (pid, id) = row?;
        note(&mut by_pid, pid, id);
    }
    Ok(by_pid)
}

/// Counts the next row of [`disorder`].
pub(crate) fn note(by_pid: &mut FxHashMap<i64, Disorder>, pid: i64, id: i64) {
    let d = by_pid.entry(pid).or_insert(Disorder { rows: 0, max_id: i64::MIN, disorder: 0 });
    if d.rows > 0 && id < d.max_id {
        d.disorder = d.disorder.max(d.max_id.saturating_sub(id));
    }
    d.max_id = d.max_id.max(id);
    d.rows += 1;
}

/// The largest disorder of any process.
pub(crate) fn worst(by_pid: &FxHashMap<i64, Disorder>) -> i64 {
    by_pid.values().map(|d| d.disorder).max().unwrap_or(0)
}

/// A launch call: process, correlation id, and what the caller carries along.
pub(crate) struct Call<T> {
    pub(crate) pid: i64,
    pub(crate) id: i64,
    pub(crate) row: T,
}

/// A kernel: process, correlation id, and what the join hands on for it
/// (its (start, end), or more).
pub(crate) struct Executed<S> {
    pub(crate) pid: i64,
    pub(crate) id: i64,
    pub(crate) span: S,
}

/// What the join knows of the kernels' order before it starts.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Bound<'a> {
    /// [`disorder`] of the kernels, from a pass over them.
    Measured(&'a FxHashMap<i64, Disorder>),
    /// Assumed without a pass: the kernels (those with an id) are of one
    /// process and stray at most this many ids from id order. The join
    /// checks both on every kernel it reads, and gives up at the first that
    /// breaks them.
    Assumed(i64),
}

/// The bound [`join`] assumes first: 32 times the largest disorder of the
/// corpus's exports and 30 times the generator's, and no slower than an
/// exact bound on the 1M generator export (65,536 would be 1.4× slower: the
/// kernels read ahead outgrow the cache).
pub const ASSUMED_DISORDER: i64 = 4096;

/// Calls each launch call's kernels, in `calls` order (a call's kernels in
/// `kernels` order: a CUDA graph launch has many), as `each(&call, span)`
/// until it returns false; then reads the kernels left (every kernel is read
/// once, unless `each` stopped). `call_order` gives [`disorder`] of `calls`
/// in the same order, asked for only when more than [`HOLD`] kernels are held.
/// Returns the most kernels it held at once (read ahead or not yet dropped),
/// or None when an assumed bound did not hold (a kernel of a second process,
/// or one further out of order): the calls since may have missed kernels, and
/// the caller joins again with a measured bound.
// A function of its own: once inlined into its caller, its own hot calls
// (the held kernels' map) were not (callgrind, docs/internals.md).
#[inline(never)]
pub(crate) fn join<T, S: Copy, E>(
    calls: impl Iterator<Item = Result<Call<T>, E>>,
    kernels: impl Iterator<Item = Result<Executed<S>, E>>,
    bound: Bound<'_>,
    call_order: impl FnOnce() -> Result<FxHashMap<i64, Disorder>, E>,
    mut each: impl FnMut(&T, S) -> bool,
) -> Result<Option<usize>, E> {
    let mut kernels = kernels.fuse();
    let mut call_order = Some(call_order);
    let mut calls_disorder: Option<FxHashMap<i64, Disorder>> = None;
    let mut held = Held::default();
    let mut procs = Procs::new(bound);
    if let Bound::Assumed(_) = bound {
        // The one process with kernels is the first kernel's.
        if let Some(k) = kernels.next().transpose()? {
            match procs.read(k.pid, k.id) {
                Read::Of(p) => held.add(p, k),
                Read::Unknown => {}
                Read::Broken => return Ok(None),
            }
        }
    }
    let mut most = 0;
    for (n, call) in calls.enumerate() {
        let call = call?;
        let Some(p) = procs.index(call.pid) else {
            continue; // a process without kernels
        };
        while procs.all[p].wants(call.id) {
            let Some(k) = kernels.next().transpose()? else { break };
            match procs.read(k.pid, k.id) {
                Read::Of(q) => held.add(q, k),
                Read::Unknown => {}
                Read::Broken => return Ok(None),
            }
        }
        if let Some(span) = held.take(p, call.pid, call.id) {
            if !each(&call.row, span) {
                return Ok(Some(most));
            }
            if !held.more.is_empty() {
                for span in held.more.remove(&(call.pid, call.id)).unwrap_or_default() {
                    held.count -= 1;
                    if !each(&call.row, span) {
                        return Ok(Some(most));
                    }
                }
            }
        }
        let proc = &mut procs.all[p];
        proc.launched = proc.launched.max(call.id);
        if n % SWEEP_EVERY == SWEEP_EVERY - 1 {
            most = most.max(held.count);
            if held.count <= HOLD {
                continue;
            }
            if let Some(measure) = call_order.take() {
                calls_disorder = Some(measure()?);
            }
            let Some(call_order) = calls_disorder.as_ref() else { continue };
            // Below this id, a process's kernels can no longer meet a launch call.
            let matchable: Vec<i64> = procs
                .all
                .iter()
                .map(|p| p.launched.saturating_sub(call_order.get(&p.pid).map_or(0, |d| d.disorder)))
                .collect();
            held.drop_below(&procs, &matchable);
        }
    }
    most = most.max(held.count);
    // The kernels after the last launch call's: an assumed bound must hold for them too.
    for k in kernels {
        let k = k?;
        if let Read::Broken = procs.read(k.pid, k.id) {
            return Ok(None);
        }
    }
    Ok(Some(most))
}

/// Ids a process's window of held kernels may span: past it, the oldest go
/// aside. As wide as the largest disorder the join takes (narrow in tests, so
/// that their traces go aside).
const SPAN: i64 = if cfg!(test) { 32 } else { MAX_DISORDER };

/// Kernels read ahead, the first of each (process, id) in its process's
/// window (or aside, when its id fell below the window), any more (graph
/// launches) in read order in `more`.
///
/// A window, not a map: ids come nearly in order and are met nearly in
/// order, so a kernel's slot is its id's distance from the window's start,
/// and the slots the calls have passed leave its front. A hash map of every
/// held kernel cost 9% of an ingestion's CPU at 1M (perf); the window keeps
/// that map for the stragglers only.
struct Held<S> {
    /// Per process, by the join's index ([`Procs`]).
    windows: Vec<Window<S>>,
    aside: FxHashMap<(i64, i64), S>,
    more: FxHashMap<(i64, i64), Vec<S>>,
    /// Kernels held, all three together.
    count: usize,
}

/// One process's held kernels with ids `base..base + slots.len()`, by id.
struct Window<S> {
    base: i64,
    slots: VecDeque<Option<S>>,
}

impl<S> Default for Held<S> {
    fn default() -> Self {
        Held { windows: Vec::new(), aside: FxHashMap::default(), more: FxHashMap::default(), count: 0 }
    }
}

impl<S> Held<S> {
    /// Holds a kernel of the process the join numbers `p`.
    fn add(&mut self, p: usize, k: Executed<S>) {
        while self.windows.len() <= p {
            self.windows.push(Window { base: i64::MIN, slots: VecDeque::new() });
        }
        self.count += 1;
        let w = &mut self.windows[p];
        if w.slots.is_empty() && k.id > w.base {
            w.base = k.id; // ids below the old start stay aside: the window never moves back
        }
        if k.id < w.base {
            Self::first_or_more(&mut self.aside, &mut self.more, (k.pid, k.id), k.span);
            return;
        }
        // Too far ahead: the oldest go aside until the id fits.
        while k.id.saturating_sub(w.base) >= SPAN {
            match w.slots.pop_front() {
                Some(Some(span)) => {
                    self.aside.insert((k.pid, w.base), span);
                }
                Some(None) => {}
                None => {
                    w.base = k.id;
                    break;
                }
            }
            w.base += 1;
        }
        let at = (k.id - w.base) as usize;
        if at >= w.slots.len() {
            w.slots.resize_with(at + 1, || None);
        }
        match &mut w.slots[at] {
            slot @ None => *slot = Some(k.span),
            Some(_) => self.more.entry((k.pid, k.id)).or_default().push(k.span),
        }
    }

    /// The first kernel held for `(pid, id)` into `first`, a later one into `more`.
    fn first_or_more(
        first: &mut FxHashMap<(i64, i64), S>,
        more: &mut FxHashMap<(i64, i64), Vec<S>>,
        key: (i64, i64),
        span: S,
    ) {
        match first.entry(key) {
            Entry::Vacant(v) => {
                v.insert(span);
            }
            Entry::Occupied(_) => more.entry(key).or_default().push(span),
        }
    }

    /// The first kernel held for the launch call `id` of process `p` (its
    /// pid `pid`); the window's front then moves past the empty slots up to
    /// `id`, whose kernels have all been read (the join's bound).
    fn take(&mut self, p: usize, pid: i64, id: i64) -> Option<S> {
        let w = self.windows.get_mut(p)?;
        let got = match id.checked_sub(w.base) {
            Some(at) if at >= 0 && (at as usize) < w.slots.len() => w.slots[at as usize].take(),
            _ if self.aside.is_empty() => None,
            _ => self.aside.remove(&(pid, id)),
        };
        while w.base <= id && matches!(w.slots.front(), Some(None)) {
            w.slots.pop_front();
            w.base += 1;
        }
        self.count -= usize::from(got.is_some());
        got
    }

    /// Drops the kernels of each process below its id in `matchable`.
    fn drop_below(&mut self, procs: &Procs, matchable: &[i64]) {
        for (p, w) in self.windows.iter_mut().enumerate() {
            let below = matchable[p];
            while w.base < below {
                match w.slots.pop_front() {
                    Some(slot) => self.count -= usize::from(slot.is_some()),
                    None => break,
                }
                w.base += 1;
            }
        }
        let unmatched = |&(pid, id): &(i64, i64)| procs.index_of(pid).is_some_and(|p| id < matchable[p]);
        let before = self.aside.len() + self.more.values().map(Vec::len).sum::<usize>();
        self.aside.retain(|key, _| !unmatched(key));
        self.more.retain(|key, _| !unmatched(key));
        self.count -= before - (self.aside.len() + self.more.values().map(Vec::len).sum::<usize>());
    }
}

/// The join's state per process with kernels.
struct Proc {
    pid: i64,
    order: Disorder,
    /// Kernels read so far, and their largest id.
    read: u64,
    max_read: i64,
    /// The largest launch id seen.
    launched: i64,
}

impl Proc {
    fn new(pid: i64, order: Disorder) -> Proc {
        Proc { pid, order, read: 0, max_read: i64::MIN, launched: i64::MIN }
    }

    /// Whether a kernel with `id` may still be unread.
    fn wants(&self, id: i64) -> bool {
        self.read < self.order.rows && self.max_read <= id.saturating_add(self.order.disorder)
    }
}

/// The processes, found by pid; rows come in runs of one process, so the
/// last one found is tried first.
struct Procs {
    all: Vec<Proc>,
    by_pid: FxHashMap<i64, usize>,
    last: Option<(i64, usize)>,
    /// The assumed bound, which [`Procs::read`] checks.
    assumed: Option<i64>,
}

impl Procs {
    fn new(bound: Bound<'_>) -> Self {
        let (all, assumed): (Vec<Proc>, _) = match bound {
            Bound::Measured(order) => (order.iter().map(|(&pid, &order)| Proc::new(pid, order)).collect(), None),
            Bound::Assumed(d) => (Vec::new(), Some(d)),
        };
        let by_pid = all.iter().enumerate().map(|(i, p)| (p.pid, i)).collect();
        Procs { all, by_pid, last: None, assumed }
    }

    fn index(&mut self, pid: i64) -> Option<usize> {
        match self.last {
            Some((last, i)) if last == pid => Some(i),
            _ => {
                let i = *self.by_pid.get(&pid)?;
                self.last = Some((pid, i));
                Some(i)
            }
        }
    }

    /// The index of `pid`, without remembering it.
    fn index_of(&self, pid: i64) -> Option<usize> {
        self.by_pid.get(&pid).copied()
    }

    /// Counts a kernel read. Under an assumed bound, the first kernel's
    /// process is the one with kernels, all read to the end.
    fn read(&mut self, pid: i64, id: i64) -> Read {
        let i = match (self.index(pid), self.assumed) {
            (Some(i), _) => i,
            (None, Some(d)) if self.all.is_empty() => {
                // Its row count is unknown: its kernels are read to the end of the table.
                self.all.push(Proc::new(pid, Disorder { rows: u64::MAX, max_id: i64::MIN, disorder: d }));
                self.by_pid.insert(pid, 0);
                0
            }
            (None, Some(_)) => return Read::Broken, // a second process
            (None, None) => return Read::Unknown,   // not in the measured pass: the table changed
        };
        let p = &mut self.all[i];
        if self.assumed.is_some_and(|d| id < p.max_read.saturating_sub(d)) {
            return Read::Broken;
        }
        (p.read, p.max_read) = (p.read + 1, p.max_read.max(id));
        Read::Of(i)
    }
}

/// A kernel, as [`Procs::read`] counted it.
enum Read {
    /// Of the process with this index.
    Of(usize),
    /// Of a process the measured pass did not see (the table changed since):
    /// no launch call of the join can meet it.
    Unknown,
    /// It breaks the assumed bound.
    Broken,
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::convert::Infallible;

    type Row = (i64, i64, i64); // pid, id, launch time

    /// The plain nested-loop join the streaming one must equal.
    fn oracle(calls: &[Row], kernels: &[Executed<(i64, i64)>]) -> Vec<(Row, (i64, i64))> {
        let mut out = Vec::new();
        for c in calls {
            for k in kernels.iter().filter(|k| (k.pid, k.id) == (c.0, c.1)) {
                out.push((*c, k.span));
            }
        }
        out
    }

    /// The streamed join with a measured bound.
    fn streamed(calls: &[Row], kernels: &[Executed<(i64, i64)>]) -> Vec<(Row, (i64, i64))> {
        let k_order = disorder(kernels.iter().map(|k| Ok::<_, Infallible>((k.pid, k.id)))).unwrap();
        streamed_with(calls, kernels, Bound::Measured(&k_order)).expect("a measured bound holds")
    }

    /// The streamed join with `bound`; None when the join gave up on it.
    fn streamed_with(calls: &[Row], kernels: &[Executed<(i64, i64)>], bound: Bound) -> Option<Vec<(Row, (i64, i64))>> {
        let c_order = || disorder(calls.iter().map(|c| Ok::<_, Infallible>((c.0, c.1))));
        let mut out = Vec::new();
        join(
            calls.iter().map(|&c| Ok::<_, Infallible>(Call { pid: c.0, id: c.1, row: c })),
            kernels.iter().map(|k| Ok(Executed { pid: k.pid, id: k.id, span: k.span })),
            bound,
            c_order,
            |row, span| {
                out.push((*row, span));
                true
            },
        )
        .unwrap()
        .map(|_| out)
    }

    /// A small deterministic generator (xorshift), so the test needs no crate.
    struct Rng(u64);
    impl Rng {
        fn below(&mut self, n: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % n
        }
    }

    /// Launch calls and kernels of `pids` for ids 0..600 (seeded): calls
    /// without kernels, kernels without calls (driver launches), graph
    /// launches with several kernels, and kernels run up to `spread` ns after
    /// their launch (several streams: out of launch order). Calls by launch
    /// time, kernels by start, as stored.
    fn trace(seed: u64, pids: &[i64], spread: u64) -> (Vec<Row>, Vec<Executed<(i64, i64)>>) {
        let mut rng = Rng(seed * 0x9E37_79B9_7F4A_7C15);
        let mut calls = Vec::new();
        let mut kernels = Vec::new();
        for &pid in pids {
            for id in 0..600i64 {
                // Threads interleave: launch calls up to 4 ids out of id order.
                let launch = id * 10 + rng.below(45) as i64;
                match rng.below(10) {
                    0 => calls.push((pid, id, launch)),          // no kernel (a sync call)
                    1 => kernels.push((launch + 5, pid, id, 1)), // no call (a driver launch)
                    2 => {
                        calls.push((pid, id, launch));
                        for _ in 0..3 {
                            kernels.push((launch + 5 + rng.below(spread) as i64, pid, id, 1));
                            // a graph
                        }
                    }
                    _ => {
                        calls.push((pid, id, launch));
                        kernels.push((launch + 5 + rng.below(spread) as i64, pid, id, 1));
                    }
                }
            }
        }
        calls.sort_by_key(|c| c.2);
        kernels.sort_by_key(|k| k.0);
        let kernels =
            kernels.iter().map(|&(start, pid, id, d)| Executed { pid, id, span: (start, start + d) }).collect();
        (calls, kernels)
    }

    /// Two processes reusing ids, and everything else [`trace`] makes: the
    /// streamed join equals the nested loop, row for row and in order.
    #[test]
    fn equals_the_nested_loop_on_disordered_multi_process_traces() {
        for seed in 1..40u64 {
            let (calls, kernels) = trace(seed, &[1, 2], 400);
            assert_eq!(streamed(&calls, &kernels), oracle(&calls, &kernels), "seed {seed}");
        }
    }

    /// An assumed bound gives the nested loop's rows where it holds, and gives
    /// up (None) where the kernels are of two processes or stray further,
    /// whether the kernel that breaks it is read during the launches or after
    /// the last one.
    #[test]
    fn an_assumed_bound_is_exact_where_it_holds_and_gives_up_where_not() {
        for seed in 1..40u64 {
            let (calls, kernels) = trace(seed, &[7], 400);
            let d = worst(&disorder(kernels.iter().map(|k| Ok::<_, Infallible>((k.pid, k.id)))).unwrap());
            assert!(d > 4, "seed {seed}: the trace is out of order ({d})");
            let exact = streamed_with(&calls, &kernels, Bound::Assumed(d));
            assert_eq!(exact, Some(oracle(&calls, &kernels)), "seed {seed}");
            assert_eq!(streamed_with(&calls, &kernels, Bound::Assumed(d + 100)), exact, "seed {seed}");
            assert_eq!(streamed_with(&calls, &kernels, Bound::Assumed(d - 1)), None, "seed {seed}");
            let (calls, kernels) = trace(seed, &[1, 2], 400);
            assert_eq!(streamed_with(&calls, &kernels, Bound::Assumed(1 << 20)), None, "seed {seed}");
        }
        // Broken only by kernels after the last launch call: of a second
        // process, or far out of order.
        let calls: Vec<Row> = (0..50).map(|i| (1, i, i * 10)).collect();
        let mut kernels: Vec<Executed<(i64, i64)>> =
            (0..60).map(|i| Executed { pid: 1, id: i, span: (i * 10 + 3, i * 10 + 4) }).collect();
        assert_eq!(streamed_with(&calls, &kernels, Bound::Assumed(8)).map(|rows| rows.len()), Some(50));
        kernels.push(Executed { pid: 2, id: 70, span: (800, 801) });
        assert_eq!(streamed_with(&calls, &kernels, Bound::Assumed(8)), None);
        kernels.pop();
        kernels.push(Executed { pid: 1, id: 40, span: (800, 801) });
        assert_eq!(streamed_with(&calls, &kernels, Bound::Assumed(8)), None);
        // Call 40 gets both of its kernels (a graph), the late one included.
        let both = streamed_with(&calls, &kernels, Bound::Assumed(19)).expect("19 ids is the disorder");
        assert_eq!((both.len(), &both), (51, &oracle(&calls, &kernels)));
    }

    /// Kernels far behind the others (read after ids more than the window
    /// ahead), ids that leap past the window (calls without kernels between,
    /// and from one end of i64 to the other): every call still meets its kernels, as
    /// in the nested loop.
    #[test]
    fn stragglers_and_leaps_past_the_window_still_meet_their_calls() {
        let mut ids: Vec<i64> = vec![i64::MIN + 1];
        ids.extend((0..120).chain((0..40).map(|i| 5_000 + 3 * i)).chain([1 << 40, i64::MAX - 1]));
        let calls: Vec<Row> = ids.iter().map(|&id| (1, id, 0)).collect();
        // Every seventh kernel is read 3 * SPAN places late.
        let mut order: Vec<(usize, i64)> = ids.iter().enumerate().map(|(i, &id)| (i, id)).collect();
        for (place, (i, _)) in order.iter_mut().enumerate() {
            if place % 7 == 3 && place < 100 {
                *i += 3 * SPAN as usize;
            }
        }
        order.sort_by_key(|&(i, _)| i);
        let mut kernels: Vec<Executed<(i64, i64)>> =
            order.iter().map(|&(i, id)| Executed { pid: 1, id, span: (i as i64, i as i64 + 1) }).collect();
        kernels.push(Executed { pid: 1, id: 4, span: (-1, 0) }); // a second kernel of call 4 (a graph)
        let joined = streamed(&calls, &kernels);
        assert_eq!(joined.len(), kernels.len());
        assert_eq!(joined, oracle(&calls, &kernels));
    }

    #[test]
    fn disorder_is_how_far_an_id_falls_below_an_earlier_one() {
        let rows = [(1, 5), (1, 3), (1, 9), (1, 4), (2, 7), (2, 8)];
        let d = disorder(rows.iter().map(|&r| Ok::<_, Infallible>(r))).unwrap();
        assert_eq!(d[&1], Disorder { rows: 4, max_id: 9, disorder: 5 });
        assert_eq!(d[&2], Disorder { rows: 2, max_id: 8, disorder: 0 });
        assert_eq!(worst(&d), 5);
        // Ids of a corrupt export a whole i64 apart: more disorder than the
        // streaming join takes (the caller has SQLite join), not a wrapped one.
        let far = disorder([(1, i64::MAX), (1, -5)].into_iter().map(Ok::<_, Infallible>)).unwrap();
        assert_eq!(worst(&far), i64::MAX);
        assert!(worst(&far) > MAX_DISORDER);
    }

    /// Kernels that never match are dropped as the launches pass them: what
    /// is held stays small on a long trace where every other kernel is a
    /// driver launch (without dropping, 50,000 would be held at the end).
    #[test]
    fn kernels_without_launch_calls_do_not_pile_up() {
        let n = 100_000i64;
        let calls: Vec<Row> = (0..n).filter(|i| i % 2 == 0).map(|i| (1, i, i * 10)).collect();
        let kernels: Vec<Executed<(i64, i64)>> =
            (0..n).map(|i| Executed { pid: 1, id: i, span: (i * 10 + 3, i * 10 + 4) }).collect();
        let k_order = disorder(kernels.iter().map(|k| Ok::<_, Infallible>((k.pid, k.id)))).unwrap();
        let c_order = || disorder(calls.iter().map(|c| Ok::<_, Infallible>((c.0, c.1))));
        let mut matched = 0;
        let most = join(
            calls.iter().map(|&c| Ok::<_, Infallible>(Call { pid: c.0, id: c.1, row: c })),
            kernels.iter().map(|k| Ok(Executed { pid: k.pid, id: k.id, span: k.span })),
            Bound::Measured(&k_order),
            c_order,
            |_, _| {
                matched += 1;
                true
            },
        )
        .unwrap()
        .expect("a measured bound holds");
        assert_eq!(matched, n / 2);
        assert!(most <= HOLD + SWEEP_EVERY + 1, "held {most} kernels at once");
    }
}
