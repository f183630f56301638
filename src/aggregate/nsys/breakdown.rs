//! aggregate::nsys::breakdown: where each top-level region's wall time went on
//! each GPU of its process (`nsys/breakdown.json`).
//!
//! A region instance is a window of time on the host (a depth-0 push/pop
//! range). On each device of its process the window is cut into segments at
//! every start and end of a kernel, copy or memset, and each segment is one of:
//! - **busy**: something ran. Split by priority, so that the parts add up:
//!   compute (a kernel other than communication ran), else exposed
//!   communication (an NCCL kernel and no compute), else a copy, else a memset.
//!   Communication and copies that ran beside compute are counted as
//!   `*_overlapped_ns`, outside the sum.
//! - **idle**: nothing ran. Each idle gap is one of: a sync stall (a blocking
//!   call of the process, [`crate::parse::nsys::calls::BLOCKING`], was
//!   waiting when the GPU went idle), a launch gap (no more than
//!   `launch_gap_ns` between two operations: the host was launching), or
//!   nothing queued (longer, or before the first and after the last operation).
//!
//! So per region and device: wall = busy + idle, busy = compute + exposed
//! communication + copy + memset, idle = launch + sync + nothing queued,
//! exactly (tests/breakdown.rs checks them, and busy against SQL's union of
//! intervals). The pass holds per device only the operations running at the
//! moment and the windows open at the moment; the windows themselves (a few
//! per step of a workload) are kept from the range sweep, up to
//! [`MAX_WINDOWS`].
use std::cmp::Reverse;
use std::collections::{BinaryHeap, VecDeque};

use rustc_hash::FxHashMap as HashMap;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::aggregate::categories::Category;
use crate::parse::nsys::activity::{Activity, ActivitySink, Direction, Named, What};

pub(crate) const BREAKDOWN_SCHEMA: &str = "llmperf.nsys-breakdown/v1";

/// Top-level instances held for the breakdown (24 bytes each): past this, the
/// per-region breakdown is not computed (the device totals still are).
pub(crate) const MAX_WINDOWS: usize = 1 << 20;

/// One depth-0 push/pop range instance: a window of host time.
#[derive(Debug, Clone, Copy)]
pub struct Window {
    pub(crate) start: i64,
    pub(crate) end: i64,
    /// The region (the range sweep's id).
    pub(crate) region: u32,
    pub(crate) pid: i64,
}

/// The names of the windows' regions: (domain, name) by the range sweep's region id.
pub(crate) type WindowNames = HashMap<u32, (String, String)>;

/// The parts of a stretch of wall time on one device (ns). wall = busy +
/// idle; busy = compute + communication_exposed + copy + memset; idle =
/// idle_launch + idle_sync + idle_nothing_queued.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Parts {
    pub(crate) wall_ns: i64,
    pub(crate) busy_ns: i64,
    pub(crate) compute_ns: i64,
    pub(crate) communication_exposed_ns: i64,
    /// NCCL kernels running while a compute kernel ran (not in busy's sum).
    pub(crate) communication_overlapped_ns: i64,
    /// Copies with no kernel running.
    pub(crate) copy_ns: i64,
    /// Copies running beside a kernel (not in busy's sum).
    pub(crate) copy_overlapped_ns: i64,
    pub(crate) memset_ns: i64,
    pub(crate) idle_ns: i64,
    /// Gaps of at most `launch_gap_ns` between two operations.
    pub(crate) idle_launch_ns: i64,
    /// Gaps that began while a blocking call of the process was waiting.
    pub(crate) idle_sync_ns: i64,
    /// Longer gaps, and the time before the device's first and after its last operation.
    pub(crate) idle_nothing_queued_ns: i64,
}

/// Kernels of one category: how many started, and their time (in a region:
/// clipped to its instances, and summed, so kernels on several streams at once count each).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct CategoryTime {
    pub(crate) category: Category,
    pub(crate) kernels: usize,
    pub(crate) ns: i64,
    /// The busy time charged to the category, a partition of `compute_ns` +
    /// `communication_exposed_ns` (never more than the wall time): a compute
    /// segment where one category's kernels ran counts whole, one shared by
    /// several categories is split by their numbers of kernels running; the
    /// exposed communication is `communication`'s; communication beside
    /// compute is charged nothing.
    #[serde(default)]
    pub(crate) charged_ns: i64,
}

/// Copies one way: their count, bytes and time; those from or to pageable host memory apart.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct CopyTime {
    /// h2d, d2h, d2d, p2p or other.
    pub(crate) direction: String,
    pub(crate) count: usize,
    pub(crate) bytes: i64,
    pub(crate) ns: i64,
    /// bytes / ns (GB/s); null for no time.
    pub(crate) gbps: Option<f64>,
    pub(crate) pageable_count: usize,
    pub(crate) pageable_bytes: i64,
    pub(crate) pageable_ns: i64,
}

/// One top-level region on one device.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct RegionBreakdown {
    pub(crate) name: String,
    pub(crate) domain: String,
    pub(crate) instances: usize,
    pub(crate) parts: Parts,
    /// Kernel time by category inside the region's instances (categories with none left out).
    pub(crate) categories: Vec<CategoryTime>,
    /// Time of copies from or to pageable memory inside the instances.
    pub(crate) pageable_copy_ns: i64,
    /// Of `copy_ns`, the share charged to the pageable copies (copies with
    /// no kernel running, split by the number of copies running).
    #[serde(default)]
    pub(crate) pageable_copy_exposed_ns: i64,
}

/// Sync-stall gaps of a device's span by the blocking call that was waiting
/// and the operation whose end left the GPU idle (the work it waited for).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct SyncStall {
    /// The blocking function (`cudaStreamSynchronize`; of overlapping calls, the one that ended last).
    pub(crate) call: String,
    /// The kernel (by name) or the copy or memset that ended before the gap.
    pub(crate) waited_for: String,
    pub(crate) gaps: usize,
    pub(crate) ns: i64,
}

/// Sync-stall rows kept per device, most time first.
const SYNC_STALL_ROWS: usize = 10;

/// One device of one process.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct DeviceBreakdown {
    pub(crate) process_id: i64,
    /// The launcher's rank of the process (`profile --launcher`), else null.
    pub(crate) rank: Option<u32>,
    pub(crate) device: i64,
    /// From the device's first operation to its last.
    pub(crate) span: Parts,
    /// Every kernel of the device by category (every category listed).
    pub(crate) categories: Vec<CategoryTime>,
    /// The share of kernel time no rule named (`other`), 0..1; null without kernels.
    pub(crate) other_share: Option<f64>,
    pub(crate) copies: Vec<CopyTime>,
    /// Of the span's `copy_ns`, the share charged to the pageable copies.
    #[serde(default)]
    pub(crate) pageable_copy_exposed_ns: i64,
    /// The span's sync-stall time by blocking call and what it waited for,
    /// most first (at most 10 rows).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) sync_stalls: Vec<SyncStall>,
    /// The device's top-level regions, by wall time (empty when not computed: see notes).
    pub(crate) regions: Vec<RegionBreakdown>,
    /// The kernels each top-level region issued on this device (launched
    /// while it was open on the launching thread), wherever they ran; most
    /// GPU time first ([`super::issued`]).
    #[serde(default)]
    pub(crate) issued: Vec<IssuedRegion>,
    /// Kernels of the device no top-level region issued.
    #[serde(default)]
    pub(crate) issued_outside: IssuedOutside,
    /// Why there is no issuing view, where there is none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) issued_note: Option<String>,
    /// The span along time, in equal bins (absent in a breakdown.json of
    /// an older llmperf).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) timeline: Option<Timeline>,
}

/// Bins of a device's timeline, at most.
pub(crate) const TIMELINE_BINS: usize = 256;

/// The parts of a timeline bin, in the order of its numbers.
pub(crate) const TIMELINE_PARTS: [&str; 7] = [
    "compute_ns",
    "communication_exposed_ns",
    "copy_ns",
    "memset_ns",
    "idle_launch_ns",
    "idle_sync_ns",
    "idle_nothing_queued_ns",
];

/// A device's span along time: equal bins from its first operation, each
/// cut into the span's parts, so that a bin's numbers add up to its length
/// (the last bin's ends with the span) and each part's bins add up to the
/// span's. The bin width is a power of two ns: the least that fits the span
/// into [`TIMELINE_BINS`] bins.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct Timeline {
    /// The device's first operation (the capture's clock, ns).
    pub(crate) start_ns: i64,
    pub(crate) bin_ns: i64,
    /// The names of each bin's numbers ([`TIMELINE_PARTS`]).
    pub(crate) parts: Vec<String>,
    pub(crate) bins: Vec<[i64; 7]>,
    /// The top-level regions of the process (every thread, by domain and
    /// name) that the lane names.
    pub(crate) regions: Vec<TimelineRegion>,
    /// Per bin, the top-level region whose instances covered most of the
    /// bin (the last bin up to the span's end), with the time they covered
    /// (ns; instances of several threads at once count each): null where
    /// none was open.
    /// Empty where the per-region breakdown was not computed (see notes).
    pub(crate) lane: Vec<Option<(u32, i64)>>,
}

impl Timeline {
    /// Where the span ends: inside the last bin.
    pub(crate) fn end_ns(&self) -> i64 {
        self.edge(self.bins.len().saturating_sub(1)) + self.bins.last().map_or(0, |b| b.iter().sum::<i64>())
    }

    /// Where bin `i` begins (bin `bins.len()` begins where the span ends).
    pub(crate) fn edge_ns(&self, i: usize) -> i64 {
        self.edge(i).min(self.end_ns())
    }

    fn edge(&self, i: usize) -> i64 {
        self.start_ns + self.bin_ns * i as i64
    }

    /// Bin `i` as the parts of a stretch (the overlapped times, which the
    /// bins do not keep, are 0).
    pub(crate) fn bin_parts(&self, i: usize) -> Parts {
        let b = self.bins[i];
        Parts {
            wall_ns: b.iter().sum(),
            busy_ns: b[..4].iter().sum(),
            compute_ns: b[0],
            communication_exposed_ns: b[1],
            copy_ns: b[2],
            memset_ns: b[3],
            idle_ns: b[4..].iter().sum(),
            idle_launch_ns: b[4],
            idle_sync_ns: b[5],
            idle_nothing_queued_ns: b[6],
            ..Parts::default()
        }
    }
}

/// A region of a timeline's lane.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct TimelineRegion {
    pub(crate) name: String,
    pub(crate) domain: String,
}

/// A timeline being filled: bins from `start`, `width` ns each, doubled
/// (neighbours merged) whenever the span outgrows [`TIMELINE_BINS`].
#[derive(Clone, Default)]
struct Bins {
    start: i64,
    width: i64,
    bins: Vec<[i64; 7]>,
}

impl Bins {
    /// The time from `from` to `to` in `part` ([`TIMELINE_PARTS`]).
    fn add(&mut self, from: i64, to: i64, part: usize) {
        if self.width == 0 {
            (self.start, self.width) = (from, 1);
        }
        while to - self.start > self.width.saturating_mul(TIMELINE_BINS as i64) {
            self.width *= 2;
            let merged: Vec<[i64; 7]> =
                self.bins.chunks(2).map(|pair| std::array::from_fn(|k| pair.iter().map(|b| b[k]).sum())).collect();
            self.bins = merged;
        }
        let (mut i, mut t) = (((from - self.start) / self.width) as usize, from);
        while t < to {
            let edge = (self.start + (i as i64 + 1) * self.width).min(to);
            if self.bins.len() <= i {
                self.bins.resize(i + 1, [0; 7]);
            }
            self.bins[i][part] += edge - t;
            (t, i) = (edge, i + 1);
        }
    }
}

/// One category of the kernels a region issued: their number and GPU time (summed).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct IssuedCategory {
    pub(crate) category: Category,
    pub(crate) kernels: usize,
    pub(crate) ns: i64,
}

/// The kernels one top-level region launched on a device (every thread of
/// the process that opened a range of that name, as the wall-window rows).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct IssuedRegion {
    pub(crate) name: String,
    pub(crate) domain: String,
    pub(crate) kernels: usize,
    /// Their GPU time, summed over kernels (kernels on several streams at once count each).
    pub(crate) gpu_time_ns: i64,
    /// By category, most time first.
    pub(crate) categories: Vec<IssuedCategory>,
}

/// Kernels of a device launched outside every top-level range (or whose
/// launch call was not traced).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct IssuedOutside {
    pub(crate) kernels: usize,
    pub(crate) gpu_time_ns: i64,
}

/// `nsys/breakdown.json`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub(crate) struct BreakdownReport {
    pub(crate) schema: String,
    /// The longest idle gap counted as launch latency (ns).
    pub(crate) launch_gap_ns: i64,
    /// The kernel category tables, in the order tried.
    pub(crate) category_tables: Vec<String>,
    pub(crate) devices: Vec<DeviceBreakdown>,
    pub(crate) notes: Vec<String>,
}

const KINDS: usize = 9;
const COPY: usize = KINDS; // + direction (5)
const MEMSET: usize = COPY + 5;
const PAGEABLE: usize = MEMSET + 1;
// + direction (5): the pageable copies of each direction, apart.
const SLOTS: usize = PAGEABLE + 5;
// A bit per slot in `DeviceSweep::mask`.
const _: () = assert!(SLOTS <= 32);
const COMM: usize = Category::Communication as usize;

fn direction_index(d: Direction) -> usize {
    match d {
        Direction::HostToDevice => 0,
        Direction::DeviceToHost => 1,
        Direction::DeviceToDevice => 2,
        Direction::PeerToPeer => 3,
        Direction::Other => 4,
    }
}

const DIRECTIONS: [&str; 5] = ["h2d", "d2h", "d2d", "p2p", "other"];

/// What a segment adds: its busy part and per slot the operations running.
#[derive(Clone, Copy)]
enum Seg {
    Busy(Busy),
    Idle(IdleKind),
}

/// A busy segment, judged once for the span and every window it falls in.
#[derive(Clone, Copy)]
struct Busy {
    part: BusyPart,
    /// The compute slot, where exactly one runs (the common case: charged whole).
    single: Option<u8>,
    /// NCCL kernels beside compute; copies beside a kernel.
    comm_overlapped: bool,
    copy_overlapped: bool,
    /// The slots with operations running (bit per slot), and their counts.
    mask: u32,
    n: [u32; SLOTS],
}

#[derive(Clone, Copy, PartialEq)]
enum BusyPart {
    Compute,
    Communication,
    Copy,
    Memset,
}

impl Busy {
    /// The segment of the operations `n` (`mask`: the slots of `n` not 0), by priority.
    fn of(n: &[u32; SLOTS], mask: u32) -> Busy {
        let comm = mask & (1 << COMM) != 0;
        let copy = mask & COPIES != 0;
        let (part, comm_overlapped, copy_overlapped) = if mask & COMPUTE != 0 {
            (BusyPart::Compute, comm, copy)
        } else if comm {
            (BusyPart::Communication, false, copy)
        } else if copy {
            (BusyPart::Copy, false, false)
        } else {
            (BusyPart::Memset, false, false)
        };
        let compute = mask & COMPUTE;
        let single = (compute.count_ones() == 1).then(|| compute.trailing_zeros() as u8);
        Busy { part, single, comm_overlapped, copy_overlapped, mask, n: *n }
    }
}

/// `len × part / whole`, rounded down, in i64 where the product fits (a
/// segment's length times a count of running operations always has).
fn share_of(len: i64, part: i64, whole: i64) -> i64 {
    match len.checked_mul(part) {
        Some(p) => p / whole,
        None => (i128::from(len) * i128::from(part) / i128::from(whole)) as i64,
    }
}

/// The slots of a mask, lowest first.
fn bits(mut mask: u32) -> impl Iterator<Item = usize> {
    std::iter::from_fn(move || {
        (mask != 0).then(|| {
            let s = mask.trailing_zeros() as usize;
            mask &= mask - 1;
            s
        })
    })
}

impl Seg {
    /// The segment's index in [`TIMELINE_PARTS`].
    fn part(&self) -> usize {
        match self {
            Seg::Busy(b) => match b.part {
                BusyPart::Compute => 0,
                BusyPart::Communication => 1,
                BusyPart::Copy => 2,
                BusyPart::Memset => 3,
            },
            Seg::Idle(IdleKind::Launch) => 4,
            Seg::Idle(IdleKind::Sync) => 5,
            Seg::Idle(IdleKind::Nothing) => 6,
        }
    }
}

#[derive(Clone, Copy, PartialEq)]
enum IdleKind {
    Launch = 0,
    Sync = 1,
    Nothing = 2,
}

/// The kinds of idle stretch, by [`Breakdown::take_idle`]'s index.
pub(crate) const IDLE_KINDS: [&str; 3] = ["launch gap", "sync stall", "nothing queued"];

/// Accumulated over a stretch: its parts, per slot the summed time, and the
/// busy time charged per kernel category and to pageable copies.
#[derive(Clone, Default)]
struct Acc {
    parts: Parts,
    slot_ns: [i64; SLOTS],
    kernels: [usize; KINDS],
    charged: [i64; KINDS],
    /// Of `copy_ns` (copies with no kernel running), the share of the pageable copies.
    pageable_charged: i64,
    instances: usize,
}

/// The kernel slots but communication: what makes a segment compute.
const COMPUTE: u32 = ((1 << KINDS) - 1) & !(1 << COMM);
const COPIES: u32 = ((1 << MEMSET) - 1) & !((1 << KINDS) - 1);
const PAGEABLES: u32 = ((1 << SLOTS) - 1) & !((1 << PAGEABLE) - 1);

impl Acc {
    fn add(&mut self, seg: &Seg, len: i64) {
        let p = &mut self.parts;
        p.wall_ns += len;
        match seg {
            Seg::Idle(kind) => {
                p.idle_ns += len;
                match kind {
                    IdleKind::Launch => p.idle_launch_ns += len,
                    IdleKind::Sync => p.idle_sync_ns += len,
                    IdleKind::Nothing => p.idle_nothing_queued_ns += len,
                }
            }
            Seg::Busy(b) => {
                p.busy_ns += len;
                match b.part {
                    BusyPart::Compute => p.compute_ns += len,
                    BusyPart::Communication => p.communication_exposed_ns += len,
                    BusyPart::Copy => p.copy_ns += len,
                    BusyPart::Memset => p.memset_ns += len,
                }
                p.communication_overlapped_ns += len * i64::from(b.comm_overlapped);
                p.copy_overlapped_ns += len * i64::from(b.copy_overlapped);
                self.charge(b, len);
                let mut mask = b.mask;
                while mask != 0 {
                    let s = mask.trailing_zeros() as usize;
                    self.slot_ns[s] += len * i64::from(b.n[s]);
                    mask &= mask - 1;
                }
            }
        }
    }

    /// A busy segment's time, charged: a compute segment to the categories
    /// running (split by their numbers of kernels, the remainder of the
    /// division to the first), exposed communication to communication, a copy
    /// segment's pageable share to the pageable copies.
    fn charge(&mut self, b: &Busy, len: i64) {
        match b.part {
            BusyPart::Compute => {
                if let Some(s) = b.single {
                    self.charged[s as usize] += len;
                    return;
                }
                let mask = b.mask & COMPUTE;
                let total: i64 = bits(mask).map(|s| i64::from(b.n[s])).sum();
                let mut given = 0;
                for s in bits(mask) {
                    let share = share_of(len, i64::from(b.n[s]), total);
                    self.charged[s] += share;
                    given += share;
                }
                self.charged[mask.trailing_zeros() as usize] += len - given;
            }
            BusyPart::Communication => self.charged[COMM] += len,
            BusyPart::Copy => {
                let count = |m: u32| bits(b.mask & m).map(|s| i64::from(b.n[s])).sum::<i64>();
                let (pageable, all) = (count(PAGEABLES), count(COPIES));
                if pageable > 0 {
                    self.pageable_charged += share_of(len, pageable, all);
                }
            }
            BusyPart::Memset => {}
        }
    }

    fn categories(&self, every: bool) -> Vec<CategoryTime> {
        Category::ALL
            .iter()
            .map(|&c| CategoryTime {
                category: c,
                kernels: self.kernels[c.index()],
                ns: self.slot_ns[c.index()],
                charged_ns: self.charged[c.index()],
            })
            .filter(|c| every || c.ns > 0 || c.kernels > 0)
            .collect()
    }
}

/// One (process, device): the operations running, the windows open, and the sums.
struct DeviceSweep {
    /// All before `t` has been cut into segments.
    t: i64,
    /// Ends of the running operations, with their slot and whether a pageable copy.
    running: BinaryHeap<Reverse<(i64, u8, bool)>>,
    /// The running operation that ends last, and what it is
    /// ([`Activity::name`]; a copy or memset by its slot): when nothing runs
    /// any more, the one whose end left the GPU idle.
    latest: (i64, i64),
    n: [u32; SLOTS],
    /// The slots of `n` not 0, a bit each.
    mask: u32,
    /// Where the current idle gap began (None before the first operation),
    /// and what ended then (the key of the last operation to end).
    idle_since: Option<i64>,
    last_ended: i64,
    /// Sync-stall gaps of the span by (blocking call's function, what ended
    /// before the gap): (gaps, ns).
    sync_by: HashMap<(i64, i64), (usize, i64)>,
    first_start: Option<i64>,
    last_start: i64,
    /// The next window of the process not yet open, and the open ones.
    next: usize,
    open: Vec<usize>,
    span: Acc,
    /// Per region slot ([`Breakdown::new`] numbers the windows' regions densely).
    by_region: Vec<Acc>,
    /// The process's windows and blocking calls ([`Breakdown::pids`]).
    pid: usize,
    copies: [(usize, i64, usize, i64); 5],
    bins: Bins,
    /// The span's idle stretches not yet taken ([`Breakdown::take_idle`]):
    /// (start, end, [`IDLE_KINDS`] index); kept only when asked for.
    idle_log: Option<Vec<(i64, i64, u8)>>,
}

impl DeviceSweep {
    fn new(pid: usize, regions: usize) -> Self {
        DeviceSweep {
            t: i64::MIN,
            running: BinaryHeap::new(),
            n: [0; SLOTS],
            mask: 0,
            idle_since: None,
            last_ended: NOTHING,
            latest: (i64::MIN, NOTHING),
            sync_by: HashMap::default(),
            first_start: None,
            last_start: i64::MIN,
            next: 0,
            open: Vec::new(),
            span: Acc::default(),
            by_region: vec![Acc::default(); regions],
            pid,
            copies: [(0, 0, 0, 0); 5],
            bins: Bins::default(),
            idle_log: None,
        }
    }
}

/// A process's windows (their `region` a dense slot), and the time its
/// blocking calls were waiting: the union of the calls read so far, as
/// disjoint intervals by start (calls of several threads may overlap), those
/// that ended before any gap still to be judged dropped.
struct Process {
    windows: Vec<Window>,
    /// (start, end, function) of the union's pieces: a piece keeps the
    /// function of the call that ended last in it.
    calls: VecDeque<(i64, i64, i64)>,
    /// Calls that ended before this were dropped.
    dropped_before: i64,
}

/// The breakdown of a capture, fed its GPU activity in start order per
/// device, and the windows up to each operation's start.
pub(crate) struct Breakdown {
    pids: Vec<Process>,
    pid_index: HashMap<i64, usize>,
    /// The windows' regions (the range sweep's ids) by dense slot, and back.
    slots: HashMap<u32, u32>,
    regions: Vec<u32>,
    /// Windows held, and those past [`MAX_WINDOWS`].
    held: usize,
    dropped: usize,
    launch_gap_ns: i64,
    devices: Vec<((i64, i64), DeviceSweep)>,
    device_index: HashMap<(i64, i64), usize>,
    /// The device of the previous operation (rows come in runs of one device).
    last: Option<((i64, i64), usize)>,
    odd: usize,
    /// Whether the devices keep their idle stretches ([`Breakdown::logging_idle`]).
    log_idle: bool,
}

impl Breakdown {
    /// A breakdown whose windows come one by one ([`ActivitySink::window`]).
    pub(crate) fn new(launch_gap_ns: i64) -> Breakdown {
        Breakdown {
            pids: Vec::new(),
            pid_index: HashMap::default(),
            slots: HashMap::default(),
            regions: Vec::new(),
            held: 0,
            dropped: 0,
            launch_gap_ns,
            devices: Vec::new(),
            device_index: HashMap::default(),
            last: None,
            odd: 0,
            log_idle: false,
        }
    }

    /// A breakdown whose devices keep each idle stretch of their spans (a
    /// launch gap, a sync stall, nothing queued) until [`Breakdown::take_idle`].
    pub(crate) fn logging_idle(mut self) -> Breakdown {
        self.log_idle = true;
        self
    }

    /// The idle stretches met since the last call: ((process, device),
    /// start, end, [`IDLE_KINDS`] index), each device's in time order. A
    /// stretch is met when the operation after it is added.
    pub(crate) fn take_idle(&mut self, mut each: impl FnMut((i64, i64), i64, i64, u8)) {
        for (key, d) in &mut self.devices {
            for (start, end, kind) in d.idle_log.iter_mut().flat_map(|log| log.drain(..)) {
                each(*key, start, end, kind);
            }
        }
    }

    /// The windows and blocking calls of a process, made on first use.
    fn process(&mut self, pid: i64) -> usize {
        let pids = &mut self.pids;
        *self.pid_index.entry(pid).or_insert_with(|| {
            pids.push(Process { windows: Vec::new(), calls: VecDeque::new(), dropped_before: i64::MIN });
            pids.len() - 1
        })
    }

    /// The sweep of a device, made on its first operation.
    fn device(&mut self, key: (i64, i64)) -> usize {
        if let Some((k, i)) = self.last {
            if k == key {
                return i;
            }
        }
        let i = match self.device_index.get(&key) {
            Some(&i) => i,
            None => {
                let pid = self.process(key.0);
                let mut d = DeviceSweep::new(pid, self.regions.len());
                d.idle_log = self.log_idle.then(Vec::new);
                self.devices.push((key, d));
                self.device_index.insert(key, self.devices.len() - 1);
                self.devices.len() - 1
            }
        };
        self.last = Some((key, i));
        i
    }
}

impl ActivitySink for Breakdown {
    type Window = Window;

    fn window(&mut self, mut w: Window) {
        if self.held == MAX_WINDOWS {
            self.dropped += 1;
            return;
        }
        self.held += 1;
        let regions = &mut self.regions;
        w.region = *self.slots.entry(w.region).or_insert_with(|| {
            regions.push(w.region);
            (regions.len() - 1) as u32
        });
        let p = self.process(w.pid);
        self.pids[p].windows.push(w);
    }

    fn start_of(w: &Window) -> i64 {
        w.start
    }

    fn blocking(&mut self, pid: i64, start: i64, end: i64, name: i64, now: i64) {
        let p = self.process(pid);
        if self.pids[p].calls.len() >= 64 {
            // No gap still to be judged on a device of the process began
            // before this: an idle device's gap began when it went idle, a
            // busy one's begins after its sweep time, a device not met yet
            // begins after `now`.
            let horizon = self
                .devices
                .iter()
                .filter(|(_, d)| d.pid == p)
                .map(|(_, d)| if d.running.is_empty() { d.idle_since.unwrap_or(i64::MIN) } else { d.t })
                .fold(now, i64::min);
            let proc = &mut self.pids[p];
            while proc.calls.front().is_some_and(|c| c.1 < horizon) {
                proc.calls.pop_front();
                proc.dropped_before = proc.dropped_before.max(horizon);
            }
        }
        let calls = &mut self.pids[p].calls;
        match calls.back_mut() {
            Some(last) if start <= last.1 => {
                if end > last.1 {
                    (last.1, last.2) = (end, name);
                }
            }
            _ => calls.push_back((start, end, name)),
        }
    }

    fn clear_activity(&mut self) {
        for p in &mut self.pids {
            p.calls.clear();
            p.dropped_before = i64::MIN;
        }
        self.devices.clear();
        self.device_index.clear();
        self.last = None;
        self.odd = 0;
    }

    /// One operation. False when it came before the previous one on its
    /// device: the activity must then be read again, sorted.
    fn add(&mut self, a: Activity) -> bool {
        if !crate::parse::nsys::sqlite::plausible(a.start, a.end) {
            self.odd += 1;
            return true;
        }
        let key = (a.pid, a.device);
        let known = self.last.is_some_and(|(k, _)| k == key) || self.device_index.contains_key(&key);
        let i = self.device(key);
        if !known && a.start < self.pids[self.devices[i].1.pid].dropped_before {
            // A device met late, before calls its gaps may need were dropped:
            // only a read sorted across devices holds every start in order.
            return false;
        }
        let d = &mut self.devices[i].1;
        if a.start < d.last_start {
            return false;
        }
        d.last_start = a.start;
        let p = &self.pids[d.pid];
        let (windows, blocking) = (&p.windows[..], Some(&p.calls));
        let gap = self.launch_gap_ns;
        advance(d, windows, blocking, gap, a.start);
        d.first_start.get_or_insert(a.start);
        let (slot, pageable) = match a.what {
            What::Kernel(c) => (usize::from(c).min(KINDS - 1), false),
            What::Copy { direction, bytes, pageable } => {
                let i = direction_index(direction);
                let c = &mut d.copies[i];
                c.0 += 1;
                c.1 += bytes;
                if pageable {
                    c.2 += 1;
                    c.3 += bytes;
                }
                (COPY + i, pageable)
            }
            What::Memset { .. } => (MEMSET, false),
        };
        if slot < KINDS {
            d.span.kernels[slot] += 1;
            open_windows(d, windows, a.start.saturating_add(1));
            for &w in &d.open {
                let w = windows[w];
                if w.start <= a.start && a.start < w.end {
                    d.by_region[w.region as usize].kernels[slot] += 1;
                }
            }
        }
        d.n[slot] += 1;
        d.mask |= 1 << slot;
        if pageable {
            d.n[PAGEABLE + slot - COPY] += 1;
            d.mask |= 1 << (PAGEABLE + slot - COPY);
        }
        if a.end >= d.latest.0 || d.running.is_empty() {
            d.latest = (a.end, if slot < KINDS { a.name } else { -1 - slot as i64 });
        }
        d.running.push(Reverse((a.end, slot as u8, pageable)));
        true
    }
}

impl Breakdown {
    /// The report: per device, its span and regions (by wall time), by process and device.
    /// `names`: (domain, name) by the range sweep's region id.
    /// `name_of` spells the blocking calls' functions and the kernels.
    pub(crate) fn finish(
        mut self,
        names: &WindowNames,
        category_tables: Vec<String>,
        name_of: &dyn Fn(Named) -> String,
    ) -> BreakdownReport {
        let gap = self.launch_gap_ns;
        let mut devices = Vec::new();
        self.devices.sort_unstable_by_key(|(key, _)| *key);
        for (key, mut d) in std::mem::take(&mut self.devices) {
            let p = &self.pids[d.pid];
            advance(&mut d, &p.windows, Some(&p.calls), gap, i64::MAX);
            let mut regions: Vec<RegionBreakdown> = Vec::new();
            let mut by_name: HashMap<(String, String), usize> = HashMap::default();
            let accs = d.by_region.into_iter().enumerate().filter(|(_, a)| a.instances > 0);
            for (slot, acc) in accs.filter(|_| self.dropped == 0) {
                let (domain, name) = names.get(&self.regions[slot]).cloned().unwrap_or_default();
                let row = RegionBreakdown {
                    name: name.clone(),
                    domain: domain.clone(),
                    instances: acc.instances,
                    parts: acc.parts,
                    categories: acc.categories(false),
                    pageable_copy_ns: acc.slot_ns[PAGEABLE..].iter().sum(),
                    pageable_copy_exposed_ns: acc.pageable_charged,
                };
                match by_name.get(&(domain.clone(), name.clone())) {
                    Some(&i) => merge(&mut regions[i], row),
                    None => {
                        by_name.insert((domain, name), regions.len());
                        regions.push(row);
                    }
                }
            }
            regions.sort_by(|a, b| b.parts.wall_ns.cmp(&a.parts.wall_ns).then_with(|| a.name.cmp(&b.name)));
            let kernel_ns: i64 = d.span.slot_ns[..KINDS].iter().sum();
            let other = d.span.slot_ns[Category::Other.index()];
            let copies = d
                .copies
                .iter()
                .enumerate()
                .filter(|(_, c)| c.0 > 0)
                .map(|(i, c)| {
                    let ns = d.span.slot_ns[COPY + i];
                    CopyTime {
                        direction: DIRECTIONS[i].to_string(),
                        count: c.0,
                        bytes: c.1,
                        ns,
                        gbps: (ns > 0).then(|| c.1 as f64 / ns as f64),
                        pageable_count: c.2,
                        pageable_bytes: c.3,
                        pageable_ns: d.span.slot_ns[PAGEABLE + i],
                    }
                })
                .collect::<Vec<_>>();
            devices.push(DeviceBreakdown {
                process_id: key.0,
                rank: None,
                device: key.1,
                span: d.span.parts,
                categories: d.span.categories(true),
                other_share: (kernel_ns > 0).then(|| other as f64 / kernel_ns as f64),
                copies,
                pageable_copy_exposed_ns: d.span.pageable_charged,
                sync_stalls: sync_stalls(&d.sync_by, name_of),
                regions,
                issued: Vec::new(),
                issued_outside: Default::default(),
                issued_note: None,
                timeline: timeline(d.bins, (self.dropped == 0).then_some(&p.windows[..]), &self.regions, names),
            });
        }
        let mut notes = Vec::new();
        if self.dropped > 0 {
            notes.push(format!(
                "per-region breakdown not computed: the capture has more than {MAX_WINDOWS} top-level range instances ({} more); the device totals are complete",
                self.dropped
            ));
        }
        if self.odd > 0 {
            notes.push(crate::parse::nsys::sqlite::odd_note(self.odd, "GPU operations"));
        }
        if devices.is_empty() {
            notes.push("no kernels, copies or memsets in the capture: nothing ran on a GPU".to_string());
        }
        BreakdownReport { schema: BREAKDOWN_SCHEMA.into(), launch_gap_ns: gap, category_tables, devices, notes }
    }
}

impl BreakdownReport {
    /// A breakdown that could not be made: no devices, and the error with its hint.
    pub(crate) fn not_computed(e: &crate::error::Error, category_tables: Vec<String>) -> BreakdownReport {
        let hint = e.hint.as_deref().map(|h| format!(" (hint: {h})")).unwrap_or_default();
        BreakdownReport {
            schema: BREAKDOWN_SCHEMA.into(),
            launch_gap_ns: 0,
            category_tables,
            devices: Vec::new(),
            notes: vec![format!("time breakdown not computed: {}{hint}", e.message)],
        }
    }
}

/// A device's timeline: its bins, and per bin the top-level region of the
/// process whose `windows` covered most of it (none without windows).
fn timeline(bins: Bins, windows: Option<&[Window]>, slots: &[u32], names: &WindowNames) -> Option<Timeline> {
    if bins.bins.is_empty() {
        return None;
    }
    let mut t = Timeline {
        start_ns: bins.start,
        bin_ns: bins.width,
        parts: TIMELINE_PARTS.iter().map(|p| p.to_string()).collect(),
        bins: bins.bins,
        regions: Vec::new(),
        lane: Vec::new(),
    };
    let Some(windows) = windows else { return Some(t) };
    let (start, end) = (t.start_ns, t.end_ns());
    // Regions by (domain, name), numbered as first met.
    let mut index: HashMap<(String, String), u32> = HashMap::default();
    let mut of_slot: HashMap<u32, u32> = HashMap::default();
    // Per bin, (region, ns covered): the few regions open in it.
    let mut covered: Vec<Vec<(u32, i64)>> = vec![Vec::new(); t.bins.len()];
    for w in windows {
        let (from, to) = (w.start.max(start), w.end.min(end));
        if from >= to {
            continue;
        }
        let region = *of_slot.entry(w.region).or_insert_with(|| {
            let (domain, name) = names.get(&slots[w.region as usize]).cloned().unwrap_or_default();
            *index.entry((domain.clone(), name.clone())).or_insert_with(|| {
                t.regions.push(TimelineRegion { name, domain });
                (t.regions.len() - 1) as u32
            })
        });
        let (mut i, mut at) = (((from - start) / t.bin_ns) as usize, from);
        while at < to {
            let edge = t.edge_ns(i + 1).min(to);
            match covered[i].iter_mut().find(|c| c.0 == region) {
                Some(c) => c.1 += edge - at,
                None => covered[i].push((region, edge - at)),
            }
            (at, i) = (edge, i + 1);
        }
    }
    // The most time, the region first met on a tie.
    t.lane = covered.iter().map(|c| c.iter().copied().reduce(|a, b| if b.1 > a.1 { b } else { a })).collect();
    Some(t)
}

/// The sync-stall rows of a device, spelled, most time first.
fn sync_stalls(by: &HashMap<(i64, i64), (usize, i64)>, name_of: &dyn Fn(Named) -> String) -> Vec<SyncStall> {
    let what = |key: i64| match key {
        NOTHING => "(nothing ran before)".to_string(),
        k if k >= 0 => name_of(Named::Kernel(k)),
        k => match (-1 - k) as usize {
            MEMSET => "memset".to_string(),
            slot if (COPY..MEMSET).contains(&slot) => format!("copy {}", DIRECTIONS[slot - COPY]),
            _ => "(an operation)".to_string(),
        },
    };
    // Keys spelled alike (one function under several ids) are one row.
    let mut spelled: std::collections::BTreeMap<(String, String), (usize, i64)> = Default::default();
    for (&(call, key), &(gaps, ns)) in by {
        let e = spelled.entry((name_of(Named::Call(call)), what(key))).or_default();
        (e.0, e.1) = (e.0 + gaps, e.1 + ns);
    }
    let mut rows: Vec<SyncStall> =
        spelled.into_iter().map(|((call, waited_for), (gaps, ns))| SyncStall { call, waited_for, gaps, ns }).collect();
    rows.sort_by(|a, b| {
        b.ns.cmp(&a.ns).then_with(|| a.call.cmp(&b.call)).then_with(|| a.waited_for.cmp(&b.waited_for))
    });
    rows.truncate(SYNC_STALL_ROWS);
    rows
}

/// Rows of one region name from several threads of a process: summed.
fn merge(into: &mut RegionBreakdown, row: RegionBreakdown) {
    into.instances += row.instances;
    let (a, b) = (&mut into.parts, row.parts);
    for (x, y) in [
        (&mut a.wall_ns, b.wall_ns),
        (&mut a.busy_ns, b.busy_ns),
        (&mut a.compute_ns, b.compute_ns),
        (&mut a.communication_exposed_ns, b.communication_exposed_ns),
        (&mut a.communication_overlapped_ns, b.communication_overlapped_ns),
        (&mut a.copy_ns, b.copy_ns),
        (&mut a.copy_overlapped_ns, b.copy_overlapped_ns),
        (&mut a.memset_ns, b.memset_ns),
        (&mut a.idle_ns, b.idle_ns),
        (&mut a.idle_launch_ns, b.idle_launch_ns),
        (&mut a.idle_sync_ns, b.idle_sync_ns),
        (&mut a.idle_nothing_queued_ns, b.idle_nothing_queued_ns),
    ] {
        *x += y;
    }
    for c in row.categories {
        match into.categories.iter_mut().find(|x| x.category == c.category) {
            Some(x) => {
                (x.kernels, x.ns, x.charged_ns) = (x.kernels + c.kernels, x.ns + c.ns, x.charged_ns + c.charged_ns)
            }
            None => into.categories.push(c),
        }
    }
    into.categories.sort_by_key(|c| c.category);
    into.pageable_copy_ns += row.pageable_copy_ns;
    into.pageable_copy_exposed_ns += row.pageable_copy_exposed_ns;
}

/// The key of "nothing ended yet" ([`DeviceSweep::last_ended`]).
const NOTHING: i64 = i64::MIN;

/// Open the windows that start before `before`.
fn open_windows(d: &mut DeviceSweep, windows: &[Window], before: i64) {
    while d.next < windows.len() && windows[d.next].start < before {
        let slot = windows[d.next].region as usize;
        if slot >= d.by_region.len() {
            d.by_region.resize(slot + 1, Acc::default());
        }
        d.by_region[slot].instances += 1;
        d.open.push(d.next);
        d.next += 1;
    }
}

/// Cut the time from `d.t` to `to` into segments: the running operations
/// ending on the way, then idle time up to `to` when nothing runs.
fn advance(d: &mut DeviceSweep, windows: &[Window], blocking: Option<&VecDeque<(i64, i64, i64)>>, gap: i64, to: i64) {
    while let Some(&Reverse((end, slot, pageable))) = d.running.peek() {
        if end > to {
            break;
        }
        if end > d.t {
            emit(d, windows, Seg::Busy(Busy::of(&d.n, d.mask)), d.t, end);
            d.t = end;
        }
        d.running.pop();
        let slot = slot as usize;
        d.n[slot] -= 1;
        if d.n[slot] == 0 {
            d.mask &= !(1 << slot);
        }
        if pageable {
            let p = PAGEABLE + slot - COPY;
            d.n[p] -= 1;
            if d.n[p] == 0 {
                d.mask &= !(1 << p);
            }
        }
        if d.running.is_empty() {
            d.idle_since = Some(d.t);
            d.last_ended = d.latest.1;
        }
    }
    if to <= d.t {
        return;
    }
    if !d.running.is_empty() {
        emit(d, windows, Seg::Busy(Busy::of(&d.n, d.mask)), d.t, to);
    } else {
        let call = d.idle_since.and_then(|since| blocked(blocking, since));
        let kind = match d.idle_since {
            None => IdleKind::Nothing,
            Some(_) if to == i64::MAX => IdleKind::Nothing,
            Some(_) if call.is_some() => {
                let e = d.sync_by.entry((call.unwrap_or_default(), d.last_ended)).or_default();
                (e.0, e.1) = (e.0 + 1, e.1 + (to - d.t));
                IdleKind::Sync
            }
            Some(since) if to - since <= gap => IdleKind::Launch,
            Some(_) => IdleKind::Nothing,
        };
        emit(d, windows, Seg::Idle(kind), d.t, to);
    }
    d.t = to;
}

/// The blocking call of the process (its function) that was waiting at
/// `t`, if one was: of calls that overlapped, the one that ended last.
fn blocked(blocking: Option<&VecDeque<(i64, i64, i64)>>, t: i64) -> Option<i64> {
    let calls = blocking?;
    let started = calls.partition_point(|c| c.0 <= t);
    (started > 0 && calls[started - 1].1 >= t).then(|| calls[started - 1].2)
}

/// Add a segment to the device's span (between its first and last operation)
/// and to the windows it overlaps.
fn emit(d: &mut DeviceSweep, windows: &[Window], seg: Seg, from: i64, to: i64) {
    if d.first_start.is_some() && to != i64::MAX {
        d.span.add(&seg, to - from);
        d.bins.add(from, to, seg.part());
        if let (Some(log), Seg::Idle(kind)) = (&mut d.idle_log, seg) {
            log.push((from, to, kind as u8));
        }
    }
    open_windows(d, windows, to);
    for &w in &d.open {
        let w = windows[w];
        let len = to.min(w.end) - from.max(w.start);
        if len > 0 {
            d.by_region[w.region as usize].add(&seg, len);
        }
    }
    d.open.retain(|&w| windows[w].end > to);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kernel(start: i64, end: i64, c: Category) -> Activity {
        Activity { pid: 1, device: 0, start, end, what: What::Kernel(c as u8), name: c as i64 }
    }

    /// A breakdown of process 1 with windows of region 0 (`step`) at `spans`.
    fn with_windows(spans: &[(i64, i64)], gap: i64) -> Breakdown {
        let mut b = Breakdown::new(gap);
        for &(start, end) in spans {
            b.window(Window { start, end, region: 0, pid: 1 });
        }
        b
    }

    fn names() -> WindowNames {
        let mut n = WindowNames::default();
        n.insert(0, (String::new(), "step".into()));
        n.insert(1, (String::new(), "step".into()));
        n
    }

    fn one(report: &BreakdownReport) -> (&Parts, &Parts) {
        let d = &report.devices[0];
        (&d.span, &d.regions[0].parts)
    }

    fn sums_hold(p: &Parts) {
        assert_eq!(p.wall_ns, p.busy_ns + p.idle_ns, "{p:?}");
        assert_eq!(p.busy_ns, p.compute_ns + p.communication_exposed_ns + p.copy_ns + p.memset_ns, "{p:?}");
        assert_eq!(p.idle_ns, p.idle_launch_ns + p.idle_sync_ns + p.idle_nothing_queued_ns, "{p:?}");
    }

    #[test]
    fn overlapping_kernels_count_once_and_communication_beside_compute_is_overlapped() {
        let mut b = with_windows(&[(0, 1000)], 50);
        for a in [
            kernel(100, 300, Category::Gemm),
            kernel(200, 500, Category::Communication),
            kernel(250, 260, Category::Elementwise),
            kernel(600, 700, Category::Communication),
        ] {
            assert!(b.add(a));
        }
        let r = b.finish(&names(), vec![], &|n| format!("{n:?}"));
        let (span, region) = one(&r);
        sums_hold(span);
        sums_hold(region);
        assert_eq!(region.wall_ns, 1000);
        assert_eq!(region.busy_ns, 400 + 100);
        assert_eq!(region.compute_ns, 200);
        assert_eq!(region.communication_overlapped_ns, 100);
        assert_eq!(region.communication_exposed_ns, 200 + 100);
        // 100 before the first kernel and 300 after the last: nothing queued; 500..600 is a long gap.
        assert_eq!(region.idle_nothing_queued_ns, 100 + 100 + 300);
        assert_eq!(span.wall_ns, 600);
        let cats = &r.devices[0].regions[0].categories;
        assert_eq!(cats.iter().find(|c| c.category == Category::Communication).unwrap().ns, 400);
        assert_eq!(cats.iter().find(|c| c.category == Category::Gemm).unwrap().kernels, 1);
        // Charged: 250..260 shared by the GEMM and the elementwise kernel (5 each),
        // the rest of the GEMM's whole; the exposed NCCL time to communication.
        let charged = |c: Category| cats.iter().find(|x| x.category == c).unwrap().charged_ns;
        assert_eq!(charged(Category::Gemm), 150 + 5 + 40);
        assert_eq!(charged(Category::Elementwise), 5);
        assert_eq!(charged(Category::Communication), 300);
        assert_eq!(cats.iter().map(|c| c.charged_ns).sum::<i64>(), region.compute_ns + region.communication_exposed_ns);
    }

    #[test]
    fn the_timeline_cuts_the_span_into_bins_that_add_up_and_names_the_region_of_each() {
        // Two regions; the span 100..1100 needs bins of 4 ns (1000 / 256 rounded
        // up to a power of two): 250 bins.
        let mut b = Breakdown::new(50);
        b.window(Window { start: 0, end: 600, region: 0, pid: 1 });
        b.window(Window { start: 600, end: 1200, region: 1, pid: 1 });
        for a in [kernel(100, 300, Category::Gemm), kernel(310, 500, Category::Gemm), kernel(900, 1100, Category::Gemm)]
        {
            assert!(b.add(a));
        }
        let mut names = WindowNames::default();
        names.insert(0, (String::new(), "prefill".into()));
        names.insert(1, (String::new(), "decode".into()));
        let r = b.finish(&names, vec![], &|n| format!("{n:?}"));
        let d = &r.devices[0];
        let t = d.timeline.as_ref().unwrap();
        assert_eq!((t.start_ns, t.bin_ns, t.bins.len()), (100, 4, 250));
        let sum = |k: usize| t.bins.iter().map(|b| b[k]).sum::<i64>();
        assert_eq!(sum(0), d.span.compute_ns);
        assert_eq!(sum(4), d.span.idle_launch_ns);
        assert_eq!(sum(6), d.span.idle_nothing_queued_ns);
        assert_eq!((sum(0), sum(4), sum(6)), (590, 10, 400));
        assert!(t.bins.iter().all(|b| b.iter().sum::<i64>() == 4));
        // The bin 500..504 is idle, in prefill; 600..604 in decode.
        assert_eq!(t.bins[100], [0, 0, 0, 0, 0, 0, 4]);
        let lane = |i: usize| t.lane[i].map(|(r, ns)| (t.regions[r as usize].name.as_str(), ns));
        assert_eq!((lane(100), lane(125)), (Some(("prefill", 4)), Some(("decode", 4))));
        assert_eq!(t.parts[0], "compute_ns");
        // The span ends at 1100, where the last bin ends; a bin as parts.
        assert_eq!((t.end_ns(), t.edge_ns(1), t.edge_ns(250)), (1100, 104, 1100));
        let p = t.bin_parts(100);
        assert_eq!((p.wall_ns, p.busy_ns, p.idle_ns, p.idle_nothing_queued_ns), (4, 0, 4, 4));
    }

    #[test]
    fn a_segment_shared_unevenly_is_charged_by_the_kernels_running_and_adds_up() {
        let mut b = with_windows(&[(0, 100)], 50);
        // 0..7: two GEMMs and one elementwise kernel: 7 split 2:1, the remainder to the GEMM.
        for a in [kernel(0, 7, Category::Gemm), kernel(0, 7, Category::Gemm), kernel(0, 7, Category::Elementwise)] {
            assert!(b.add(a));
        }
        let r = b.finish(&names(), vec![], &|n| format!("{n:?}"));
        let cats = &r.devices[0].categories;
        let charged = |c: Category| cats.iter().find(|x| x.category == c).unwrap().charged_ns;
        assert_eq!((charged(Category::Gemm), charged(Category::Elementwise)), (5, 2));
        assert_eq!(cats.iter().map(|c| c.charged_ns).sum::<i64>(), r.devices[0].span.compute_ns);
    }

    #[test]
    fn gaps_are_launch_gaps_when_short_and_sync_stalls_after_a_blocking_call() {
        let mut b = with_windows(&[(0, 400)], 20);
        for a in [kernel(0, 100, Category::Gemm), kernel(110, 200, Category::Gemm), kernel(300, 400, Category::Gemm)] {
            // The call is read before the first operation that starts after it began.
            if a.start == 300 {
                b.blocking(1, 150, 205, 9, a.start);
            }
            assert!(b.add(a));
        }
        let r = b.finish(&names(), vec![], &|n| format!("{n:?}"));
        let (_, region) = one(&r);
        sums_hold(region);
        assert_eq!(region.idle_launch_ns, 10);
        assert_eq!(region.idle_sync_ns, 100);
        assert_eq!(region.idle_nothing_queued_ns, 0);
        // The sync stall: the call that waited (function 9), after the GEMM that ended at 200.
        let s = &r.devices[0].sync_stalls;
        assert_eq!(s.len(), 1);
        assert_eq!(
            (s[0].call.as_str(), s[0].waited_for.as_str(), s[0].gaps, s[0].ns),
            ("Call(9)", "Kernel(0)", 1, 100)
        );
    }

    #[test]
    fn pageable_copies_keep_their_direction() {
        let mut b = with_windows(&[(0, 100)], 20);
        let copy = |start, end, direction| Activity {
            pid: 1,
            device: 0,
            start,
            end,
            what: What::Copy { direction, bytes: 8, pageable: true },
            name: 0,
        };
        assert!(b.add(copy(0, 10, Direction::HostToDevice)));
        assert!(b.add(copy(20, 50, Direction::DeviceToHost)));
        let r = b.finish(&names(), vec![], &|n| format!("{n:?}"));
        let c = &r.devices[0].copies;
        assert_eq!((c[0].direction.as_str(), c[0].pageable_ns), ("h2d", 10));
        assert_eq!((c[1].direction.as_str(), c[1].pageable_ns), ("d2h", 30));
        assert_eq!(r.devices[0].regions[0].pageable_copy_ns, 40);
    }

    #[test]
    fn an_operation_before_the_previous_one_on_its_device_asks_for_a_sorted_read() {
        let mut b = with_windows(&[], 20);
        assert!(b.add(kernel(100, 200, Category::Gemm)));
        assert!(!b.add(kernel(50, 60, Category::Gemm)));
    }

    #[test]
    fn windows_of_several_threads_with_one_name_are_one_row() {
        let mut b = with_windows(&[(0, 100)], 20);
        b.window(Window { start: 50, end: 150, region: 1, pid: 1 });
        assert!(b.add(kernel(0, 150, Category::Gemm)));
        let r = b.finish(&names(), vec![], &|n| format!("{n:?}"));
        assert_eq!(r.devices[0].regions.len(), 1);
        assert_eq!(r.devices[0].regions[0].instances, 2);
        assert_eq!(r.devices[0].regions[0].parts.compute_ns, 200);
    }
}
