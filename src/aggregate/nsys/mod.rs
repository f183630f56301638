//! aggregate: the NVTX region tree of an nsys capture, with GPU kernel
//! attribution, and its top kernels. The sinks of one streaming pass over the
//! SQLite export ([`crate::parse::nsys::ingest`]), a [`Sweep`] and
//! [`KernelTotals`], become the `nsys/regions.json`, `nsys/top_kernels.json`
//! and `nsys/samples.json` models ([`model`]; [`reports`]), in memory that
//! does not grow with the capture (docs/internals.md, "NVTX regions from nsys").
//!
//! - Push/pop ranges nest per thread. A range's parent is the innermost range
//!   still open on its thread when it starts (push/pop ranges are a stack, so
//!   on one thread they nest properly). Regions are named by their path,
//!   outermost first, joined by `::` (`decode_all::decode_step`).
//! - Start/end ranges cannot be put on a thread's stack: each is a depth-0
//!   region of its own name, with times and instances but no kernels.
//! - A kernel belongs to the push/pop ranges open on the thread that launched
//!   it, at the time of the launch call (CUDA runtime row with the kernel's
//!   correlation id): exclusively to the innermost, inclusively to it and all
//!   its ancestors. Kernels launched outside every range (or whose launch call
//!   was not traced) are `unattributed`.
use rustc_hash::FxHashMap as HashMap;

pub mod breakdown;
mod groups;
pub(crate) mod issued;
mod model;
pub(crate) use groups::{shape_of, shown};
pub use model::*;

use super::runs::{self, Runs};
use crate::error::Error;
use crate::parse::nsys::batched::Stream;
use crate::parse::nsys::beside::{Windows, UPTO_EVERY};
use crate::parse::nsys::ingest::{Fork, Ingest, KernelSink, Timeline};
use crate::parse::nsys::sqlite::{odd_note, pid_of, plausible, tid_of, Kernel, Launched, Names, NvtxRange};
use crate::regions;
use crate::regions::RangeStyle;

/// What one pass over an export gives: the three reports, and the number
/// of kernels read.
pub struct Ingested {
    pub regions: RegionsReport,
    pub top: Vec<TopKernel>,
    pub(crate) samples: Samples,
    pub kernels: usize,
    /// The names of the depth-0 push/pop regions, for the time breakdown ([`breakdown`]).
    pub window_names: breakdown::WindowNames,
    /// The pass's interned names (the breakdown's fed kernels name theirs by id).
    pub(crate) names: Names,
}

/// The three reports of one pass over an export
/// ([`crate::parse::nsys::ingest::ingest`] into a [`Sweep`] and
/// [`KernelTotals`]): the region tree with kernel attribution, the top `top_n`
/// kernels (all when 0) and the samples behind both. `strip`: the attribute
/// keys the range reader stripped (`report.nvtx_attributes`), for the note.
///
/// The sweep holds per thread only the ranges open at the moment, plus one
/// accumulator per region; instance durations go to sorted runs on disk
/// ([`super::runs`]) for the medians and samples.
///
/// `fork` runs the independent steps (the sorts): at once where the caller
/// owns threads ([`crate::parse::nsys::ingest::Threads`]).
pub fn reports(
    read: Ingest<Sweep, KernelTotals>,
    strip: &[String],
    top_n: usize,
    fork: &dyn Fork,
) -> Result<Ingested, Error> {
    let normalized = read.renamed.map(|r| Normalized {
        keys: strip.to_vec(),
        raw_names: r.raw_names,
        operators: r.operators,
        instances: r.instances,
    });
    read.timeline.finish(read.names, normalized, read.kernels, (top_n, fork))
}

/// The repeated-module groups of `report` again, with the module classes
/// `--annotate` recorded: members of one group must be of one class.
pub(crate) fn regroup_modules(report: &mut RegionsReport, classes: &groups::Classes) {
    let total = report.module_groups.as_ref().and_then(|g| g.coverage.as_ref()).map_or(0, |c| c.total_gpu_time_ns);
    report.module_groups = groups::module_groups(&report.regions, total, Some(classes));
}

pub(crate) use groups::Classes;

/// A process id and a CUDA device (None when not read).
type ProcessDevice = (i64, Option<i64>);

/// The kernel table's per-name (calls, total, min, max) ns and durations:
/// the [`KernelSink`] of a pass.
pub struct KernelTotals {
    by_name: HashMap<u32, (usize, i64, i64, i64)>,
    /// CUDA graph nodes: count and ns.
    graph: (usize, i64),
    /// Per (process, device): kernels, ns, communication ns; the last one
    /// used first (rows come in runs of one process and device).
    by_process: Vec<(ProcessDevice, usize, i64, i64)>,
    last_process: usize,
    /// Which name ids are communication kernels (NCCL), by id.
    comm: std::sync::Arc<Vec<bool>>,
    /// Each name's short name, as first seen.
    short: HashMap<u32, u32>,
    durations: Runs,
    odd: usize,
    /// The first error of writing `durations` to disk.
    failed: Option<Error>,
}

impl KernelTotals {
    /// Totals for an export whose strings are `names` (kernel names are among
    /// them, interned before the readers start).
    pub fn new(names: &Names) -> Self {
        let comm = std::sync::Arc::new(names.all().iter().map(|n| crate::kernel_names::is_comm(n)).collect());
        KernelTotals {
            by_name: HashMap::default(),
            graph: (0, 0),
            by_process: Vec::new(),
            last_process: 0,
            comm,
            short: HashMap::default(),
            durations: Runs::new(runs::DEFAULT_CAP),
            odd: 0,
            failed: None,
        }
    }
}

impl KernelSink for KernelTotals {
    fn take_error(&mut self) -> Option<Error> {
        self.failed.take()
    }

    // Called once per kernel from the reader's generic pass, in another
    // module: without the hint it was a call per kernel there (callgrind).
    #[inline]
    fn add(&mut self, k: Kernel, strings: &HashMap<i64, u32>, _names: &Names) {
        if !plausible(k.start, k.end) {
            self.odd += 1;
            return;
        }
        let ns = k.end - k.start;
        let e = self.by_name.entry(k.name).or_insert((0, 0, i64::MAX, i64::MIN));
        if let (0, Some(short)) = (e.0, k.short_id.and_then(|id| strings.get(&id))) {
            self.short.insert(k.name, *short); // once per name, not per kernel
        }
        *e = (e.0 + 1, e.1.saturating_add(ns), e.2.min(ns), e.3.max(ns));
        if k.graph {
            self.graph = (self.graph.0 + 1, self.graph.1.saturating_add(ns));
        }
        let key = (k.pid, k.device);
        if self.by_process.get(self.last_process).is_none_or(|p| p.0 != key) {
            self.last_process = match self.by_process.iter().position(|p| p.0 == key) {
                Some(i) => i,
                None => {
                    self.by_process.push((key, 0, 0, 0));
                    self.by_process.len() - 1
                }
            };
        }
        let comm = self.comm.get(k.name as usize).copied().unwrap_or(false);
        let p = &mut self.by_process[self.last_process];
        (p.1, p.2) = (p.1 + 1, p.2.saturating_add(ns));
        if comm {
            p.3 = p.3.saturating_add(ns);
        }
        if self.failed.is_none() {
            self.failed = self.durations.push(k.name, ns).err();
        }
    }
}

/// A region being built: identity plus accumulators (no per-instance data:
/// durations go to the sweep's sorted runs).
struct Acc {
    parent: Option<u32>,
    name: u32,
    domain: u32,
    style: RangeStyle,
    global_tid: i64,
    depth: usize,
    instances: usize,
    inclusive_ns: i64,
    min_ns: i64,
    max_ns: i64,
    child_ns: i64,
    kernels: usize,
    gpu_ns: i64,
    kernels_excl: usize,
    gpu_excl_ns: i64,
    span_ns: i64,
    graph_kernels: usize,
    graph_ns: i64,
    /// Kernels launched while this region was the innermost open one, by
    /// name: (name, calls, ns), sorted by name (few per region: a binary
    /// search is cheaper than hashing each launch).
    exclusive_kernels: Vec<(u32, usize, i64)>,
}

/// A push/pop range instance still open on its thread, with the kernels
/// launched while it was open (its own and its children's, handed up when a
/// child closes: a launch touches only the innermost instance, so the cost
/// does not grow with the depth).
struct Open {
    end: i64,
    region: u32,
    first_kernel: i64,
    last_kernel: i64,
    kernels: usize,
    /// GPU time of the kernels launched while this instance was open.
    gpu_ns: i64,
    graph_kernels: usize,
    graph_ns: i64,
}

impl Open {
    fn new(end: i64, region: u32) -> Open {
        Open {
            end,
            region,
            first_kernel: i64::MAX,
            last_kernel: i64::MIN,
            kernels: 0,
            gpu_ns: 0,
            graph_kernels: 0,
            graph_ns: 0,
        }
    }

    /// A closed child's kernels, now this instance's too.
    fn take(&mut self, child: &Open) {
        self.first_kernel = self.first_kernel.min(child.first_kernel);
        self.last_kernel = self.last_kernel.max(child.last_kernel);
        self.kernels += child.kernels;
        self.gpu_ns = self.gpu_ns.saturating_add(child.gpu_ns);
        self.graph_kernels += child.graph_kernels;
        self.graph_ns = self.graph_ns.saturating_add(child.graph_ns);
    }
}

/// How deep push/pop ranges nest on one thread before the deeper ones are
/// folded into their ancestor at this depth (and counted in a note): each
/// region's path names every level above it, so paths cost the square of the
/// depth. PyTorch's `emit_nvtx` operators nest a few dozen deep.
pub(crate) const MAX_DEPTH: usize = 256;

/// The time sweep: per thread the stack of open ranges, per region its
/// accumulator; the [`Timeline`] of a pass.
pub struct Sweep {
    regions: Vec<Acc>,
    ids: HashMap<(i64, Option<u32>, RangeStyle, u32, u32), u32>,
    stacks: HashMap<i64, Vec<Open>>,
    durations: Runs,
    /// Each push/pop instance's GPU time, keyed by region.
    gpu_durations: Runs,
    /// The first error of writing `gpu_durations` to disk.
    failed: Option<Error>,
    ranges: usize,
    odd_ranges: usize,
    /// Ranges nsys left without an end (open when the capture stopped).
    unended: usize,
    /// Ranges nested deeper than [`MAX_DEPTH`]: folded into their ancestor.
    folded: usize,
    attributed: (usize, i64),
    attributed_graph: (usize, i64),
    /// Whether a range holds what happens at its end instant.
    ends: Ends,
}

/// Where a range's end falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Ends {
    /// `[start, end)`: nsys's ns. A range ends before what starts at its end.
    Exclusive,
    /// `[start, end]`: a PyTorch profiler trace's times, rounded to µs in
    /// most, where a call made in a range's last µs often has the range's end
    /// as its start. A range holds a launch at its end and a range that ends
    /// by its end (as Holistic Trace Analysis and the corpus's expect.py
    /// nest them); a range that ends later is not its child, and closes it.
    Inclusive,
}

impl Sweep {
    /// A sweep of ranges whose ends are `ends`.
    pub(crate) fn with_ends(ends: Ends) -> Sweep {
        Sweep { ends, ..Sweep::default() }
    }
}

impl Default for Sweep {
    fn default() -> Self {
        Sweep {
            regions: Vec::new(),
            ids: HashMap::default(),
            stacks: HashMap::default(),
            durations: Runs::new(runs::DEFAULT_CAP),
            gpu_durations: Runs::new(runs::DEFAULT_CAP),
            failed: None,
            ranges: 0,
            odd_ranges: 0,
            unended: 0,
            folded: 0,
            attributed: (0, 0),
            attributed_graph: (0, 0),
            ends: Ends::Exclusive,
        }
    }
}

impl Timeline for Sweep {
    type Window = breakdown::Window;

    /// Ranges and launches merged by time (a range before a launch at the
    /// same time: a range contains the calls made from its start), the
    /// depth-0 push/pop instances to `windows` as they start. False when a
    /// stream was not in time order.
    fn run(
        &mut self,
        mut ranges: Stream<NvtxRange>,
        mut launches: Stream<Launched>,
        mut windows: Option<&mut dyn Windows<breakdown::Window>>,
    ) -> Result<bool, Error> {
        let mut r = ranges.next();
        let mut l = launches.next();
        let (mut last_start, mut last_launch) = (i64::MIN, i64::MIN);
        let mut last_on_thread: HashMap<i64, (i64, i64)> = HashMap::default();
        let mut launched_n = 0usize;
        loop {
            let take_range = match (&r, &l) {
                (None, None) => break,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some(a), Some(b)) => a.start <= b.launch,
            };
            if take_range {
                let range = r.take().expect("a range is next");
                r = ranges.next();
                if !range.ended {
                    self.unended += 1;
                    continue;
                }
                if !plausible(range.start, range.end) {
                    self.odd_ranges += 1;
                    continue;
                }
                // Starts never decrease; on one thread, the outer range comes
                // first when two start together.
                let on_thread = last_on_thread.entry(range.global_tid).or_insert((i64::MIN, 0));
                if range.start < last_start || (range.start, -range.end) < *on_thread {
                    return Ok(false);
                }
                (last_start, *on_thread) = (range.start, (range.start, -range.end));
                self.range(range, windows.as_deref_mut())?;
            } else {
                let launched = l.take().expect("a launch is next");
                l = launches.next();
                if launched.launch < last_launch {
                    return Ok(false);
                }
                last_launch = launched.launch;
                launched_n += 1;
                if let Some(windows) = windows.as_deref_mut().filter(|_| launched_n % UPTO_EVERY == 0) {
                    // Every range starting by the launch came before it.
                    windows.upto(launched.launch);
                }
                if plausible(launched.start, launched.end) {
                    self.launch(launched);
                }
            }
        }
        Ok(true)
    }
}

impl Sweep {
    /// Close the ranges of a thread that ended by `t`; each instance's GPU
    /// time goes to `gpu` (the first error of writing it to `failed`).
    fn close(
        stack: &mut Vec<Open>,
        regions: &mut [Acc],
        gpu: &mut Runs,
        failed: &mut Option<Error>,
        over: impl Fn(i64) -> bool,
    ) {
        while stack.last().is_some_and(|o| over(o.end)) {
            let o = stack.pop().expect("checked above");
            let acc = &mut regions[o.region as usize];
            if o.first_kernel <= o.last_kernel {
                acc.span_ns += o.last_kernel - o.first_kernel;
            }
            acc.kernels += o.kernels;
            acc.gpu_ns = acc.gpu_ns.saturating_add(o.gpu_ns);
            acc.graph_kernels += o.graph_kernels;
            acc.graph_ns = acc.graph_ns.saturating_add(o.graph_ns);
            if let Some(parent) = stack.last_mut() {
                parent.take(&o);
            }
            if failed.is_none() {
                *failed = gpu.push(o.region, o.gpu_ns).err();
            }
        }
    }

    fn range(
        &mut self,
        r: NvtxRange,
        windows: Option<&mut (dyn Windows<breakdown::Window> + '_)>,
    ) -> Result<(), Error> {
        self.ranges += 1;
        let stack = self.stacks.entry(r.global_tid).or_default();
        let parent = if r.style == RangeStyle::PushPop {
            let ends = self.ends;
            let over = |end| match ends {
                Ends::Exclusive => end <= r.start,
                Ends::Inclusive => end < r.end,
            };
            Self::close(stack, &mut self.regions, &mut self.gpu_durations, &mut self.failed, over);
            if stack.len() >= MAX_DEPTH {
                // Its time stays in the ancestor's own time; its kernels go to that ancestor.
                self.folded += 1;
                return Ok(());
            }
            stack.last().map(|o| o.region)
        } else {
            // Start/end ranges cannot be put on a thread's stack.
            None
        };
        let key = (r.global_tid, parent, r.style, r.domain, r.name);
        let regions = &mut self.regions;
        let region = *self.ids.entry(key).or_insert_with(|| {
            regions.push(Acc {
                parent,
                name: r.name,
                domain: r.domain,
                style: r.style,
                global_tid: r.global_tid,
                depth: parent.map_or(0, |p| regions[p as usize].depth + 1),
                instances: 0,
                inclusive_ns: 0,
                min_ns: i64::MAX,
                max_ns: i64::MIN,
                child_ns: 0,
                kernels: 0,
                gpu_ns: 0,
                kernels_excl: 0,
                gpu_excl_ns: 0,
                span_ns: 0,
                graph_kernels: 0,
                graph_ns: 0,
                exclusive_kernels: Vec::new(),
            });
            (regions.len() - 1) as u32
        });
        let ns = r.end - r.start;
        let acc = &mut self.regions[region as usize];
        acc.instances += 1;
        // Sums saturate: a corrupt export must not wrap around to a negative time.
        acc.inclusive_ns = acc.inclusive_ns.saturating_add(ns);
        acc.min_ns = acc.min_ns.min(ns);
        acc.max_ns = acc.max_ns.max(ns);
        if let Some(p) = parent {
            let p = &mut self.regions[p as usize];
            p.child_ns = p.child_ns.saturating_add(ns);
        }
        if r.style == RangeStyle::PushPop {
            stack.push(Open::new(r.end, region));
            if let Some(windows) = windows.filter(|_| parent.is_none()) {
                let pid = pid_of(r.global_tid);
                windows.window(breakdown::Window { start: r.start, end: r.end, region, pid });
            }
        }
        self.durations.push(region, ns)
    }

    /// A kernel belongs to the ranges open on its launching thread when the launch call began.
    fn launch(&mut self, k: Launched) {
        let Some(stack) = self.stacks.get_mut(&k.global_tid) else { return };
        let ends = self.ends;
        let over = |end| match ends {
            Ends::Exclusive => end <= k.launch,
            Ends::Inclusive => end < k.launch,
        };
        Self::close(stack, &mut self.regions, &mut self.gpu_durations, &mut self.failed, over);
        let Some(inner) = stack.last() else { return };
        let ns = k.end - k.start;
        let acc = &mut self.regions[inner.region as usize];
        acc.kernels_excl += 1;
        acc.gpu_excl_ns = acc.gpu_excl_ns.saturating_add(ns);
        match acc.exclusive_kernels.binary_search_by_key(&k.name, |e| e.0) {
            Ok(i) => {
                let e = &mut acc.exclusive_kernels[i];
                (e.1, e.2) = (e.1 + 1, e.2.saturating_add(ns));
            }
            Err(i) => acc.exclusive_kernels.insert(i, (k.name, 1, ns)),
        }
        let graph = usize::from(k.graph);
        let o = stack.last_mut().expect("checked above");
        o.kernels += 1;
        o.gpu_ns = o.gpu_ns.saturating_add(ns);
        o.graph_kernels += graph;
        o.graph_ns = o.graph_ns.saturating_add(ns * graph as i64);
        o.first_kernel = o.first_kernel.min(k.start);
        o.last_kernel = o.last_kernel.max(k.end);
        self.attributed = (self.attributed.0 + 1, self.attributed.1.saturating_add(ns));
        if k.graph {
            self.attributed_graph = (self.attributed_graph.0 + 1, self.attributed_graph.1.saturating_add(ns));
        }
    }

    /// The reports, from the accumulators and the sorted runs: the steps
    /// below, in order.
    fn finish(
        mut self,
        names: Names,
        normalized: Option<Normalized>,
        kernels: KernelTotals,
        (top_n, fork): (usize, &dyn Fork),
    ) -> Result<Ingested, Error> {
        self.close_every_range()?;
        let notes = self.notes(&kernels);
        let (inclusive, attributed_by_name) = self.kernels_rolled_up();
        let unattributed = self.unattributed(&kernels, &attributed_by_name, &names);
        let (top, slot) = top_with_short_names(&kernels, &names, top_n);
        let mut window_names = breakdown::WindowNames::default();
        for (id, a) in self.regions.iter().enumerate() {
            if a.parent.is_none() && a.style == RangeStyle::PushPop {
                window_names.insert(id as u32, (names.get(a.domain).to_string(), names.get(a.name).to_string()));
            }
        }
        let Sweep { regions, durations, gpu_durations, .. } = self;
        let runs = (durations, gpu_durations, kernels.durations);
        let sorted = sorted_durations(&regions, runs, &kernels.by_name, &slot, top.len(), fork)?;
        let kernel_samples = top
            .iter()
            .zip(sorted.kernels)
            .map(|(k, samples_ns)| KernelSamples { name: k.name.clone(), calls: k.calls, samples_ns })
            .collect();
        let (regions, region_samples) = region_rows(&regions, &names, &inclusive, sorted.regions);
        let total_gpu_ns = kernels.by_process.iter().map(|p| p.2).sum();
        let module_groups = groups::module_groups(&regions, total_gpu_ns, None);
        Ok(Ingested {
            regions: RegionsReport {
                schema: REGIONS_SCHEMA.into(),
                regions,
                unattributed,
                notes,
                normalized,
                processes: processes(kernels.by_process),
                module_groups,
            },
            top,
            samples: Samples::new(region_samples, kernel_samples),
            kernels: kernels.by_name.values().map(|k| k.0).sum(),
            window_names,
            names,
        })
    }

    /// Close every range still open, as at the end of time.
    fn close_every_range(&mut self) -> Result<(), Error> {
        for stack in self.stacks.values_mut() {
            Self::close(stack, &mut self.regions, &mut self.gpu_durations, &mut self.failed, |_| true);
        }
        self.failed.take().map_or(Ok(()), Err)
    }

    /// What regions.json says of the capture as a whole: rows out of range,
    /// no ranges, no kernels.
    fn notes(&self, kernels: &KernelTotals) -> Vec<String> {
        let mut notes = Vec::new();
        for (count, what) in [(self.odd_ranges, "NVTX ranges"), (kernels.odd, "kernels")] {
            if count > 0 {
                let note = odd_note(count, what);
                tracing::warn!("{note}");
                notes.push(note);
            }
        }
        if self.folded > 0 {
            notes.push(format!(
                "{} NVTX ranges nested deeper than {MAX_DEPTH} levels on their thread: not regions of their own; their time is in the own (exclusive) time of their ancestor at depth {}, and their kernels are its kernels",
                self.folded,
                MAX_DEPTH - 1
            ));
        }
        if self.unended > 0 {
            notes.push(format!(
                "{} NVTX ranges never ended (nsys left their end empty: still open when the capture stopped): left out",
                self.unended
            ));
        }
        if self.ranges == 0 && self.unended == 0 {
            notes.push("no NVTX ranges in the capture (not traced, or the application emitted none)".into());
        } else if self.ranges == 0 {
            notes.push("no NVTX range of the capture ended: no regions".into());
        }
        if kernels.by_name.is_empty() {
            notes.push("no CUDA kernels in the capture (CUDA not traced, or nothing ran on a GPU)".into());
        }
        notes
    }

    /// Each region's kernels, inclusive: the exclusive ones rolled up the
    /// tree; and every name's attributed (calls, ns).
    #[allow(clippy::type_complexity)]
    fn kernels_rolled_up(&self) -> (Vec<HashMap<u32, (usize, i64)>>, HashMap<u32, (usize, i64)>) {
        let mut inclusive: Vec<HashMap<u32, (usize, i64)>> = vec![HashMap::default(); self.regions.len()];
        let mut attributed_by_name: HashMap<u32, (usize, i64)> = HashMap::default();
        let add = |map: &mut HashMap<u32, (usize, i64)>, name: u32, calls: usize, ns: i64| {
            let e = map.entry(name).or_insert((0, 0));
            *e = (e.0 + calls, e.1.saturating_add(ns));
        };
        for (r, a) in self.regions.iter().enumerate() {
            for &(name, calls, ns) in &a.exclusive_kernels {
                add(&mut inclusive[r], name, calls, ns);
                add(&mut attributed_by_name, name, calls, ns);
            }
        }
        // A parent is created before its children: from the last region up,
        // each hands its whole subtree to its parent once (not a walk to the
        // root per kernel name, which costs the square of the depth).
        for r in (1..self.regions.len()).rev() {
            if let Some(p) = self.regions[r].parent {
                let (lower, upper) = inclusive.split_at_mut(r);
                for (&name, &(calls, ns)) in &upper[0] {
                    add(&mut lower[p as usize], name, calls, ns);
                }
            }
        }
        (inclusive, attributed_by_name)
    }

    /// The kernels outside every range: each name's total less what the
    /// ranges hold.
    fn unattributed(
        &self,
        kernels: &KernelTotals,
        attributed_by_name: &HashMap<u32, (usize, i64)>,
        names: &Names,
    ) -> Unattributed {
        let (count, ns) = kernels.by_name.values().fold((0usize, 0i64), |(c, t), k| (c + k.0, t.saturating_add(k.1)));
        let outside = kernels.by_name.iter().filter_map(|(name, &(calls, ns, _, _))| {
            let (c, t) = attributed_by_name.get(name).copied().unwrap_or((0, 0));
            (calls > c).then(|| (names.get(*name).to_string(), (calls - c, ns.saturating_sub(t))))
        });
        Unattributed {
            kernel_count: count.saturating_sub(self.attributed.0),
            gpu_time_ns: ns.saturating_sub(self.attributed.1),
            graph_kernel_count: kernels.graph.0.saturating_sub(self.attributed_graph.0),
            graph_gpu_time_ns: kernels.graph.1.saturating_sub(self.attributed_graph.1),
            kernels: kernel_rows(outside),
        }
    }
}

/// The top `top_n` kernels (all when 0), each with its short name where it
/// differs, and each listed kernel's place in the list by name id.
fn top_with_short_names(kernels: &KernelTotals, names: &Names, top_n: usize) -> (Vec<TopKernel>, HashMap<u32, usize>) {
    let mut top = top_kernel_rows(kernels.by_name.iter().map(|(id, sums)| (names.get(*id).to_string(), *sums)), top_n);
    let slot: HashMap<u32, usize> = {
        let wanted: HashMap<&str, usize> = top.iter().enumerate().map(|(i, k)| (k.name.as_str(), i)).collect();
        kernels.by_name.keys().filter_map(|id| wanted.get(names.get(*id)).map(|&i| (*id, i))).collect()
    };
    for (id, short) in &kernels.short {
        let (Some(&i), short) = (slot.get(id), names.get(*short)) else { continue };
        if !short.is_empty() && short != top[i].name {
            top[i].short_name = Some(short.to_string());
        }
    }
    (top, slot)
}

/// Per region: its median duration, and bounded samples of its durations and
/// of its instances' GPU times.
struct RegionSorted {
    medians: Vec<i64>,
    samples: Vec<Vec<i64>>,
    gpu_samples: Vec<Vec<i64>>,
}

/// What the sorted runs give: per region, and per listed kernel its bounded
/// launch durations.
struct Sorted {
    regions: RegionSorted,
    kernels: Vec<Vec<i64>>,
}

/// The runs of region durations, of instance GPU times and of kernel
/// durations, each sorted and walked once: three steps for `fork`, which
/// may run them at once (the pass's tail, which nothing else runs beside).
fn sorted_durations(
    regions: &[Acc],
    (durations, gpu_durations, kernel_runs): (Runs, Runs, Runs),
    by_name: &HashMap<u32, (usize, i64, i64, i64)>,
    slot: &HashMap<u32, usize>,
    listed: usize,
    fork: &dyn Fork,
) -> Result<Sorted, Error> {
    let mut kernels: Vec<Vec<i64>> = vec![Vec::new(); listed];
    let mut out = RegionSorted {
        medians: vec![0; regions.len()],
        samples: vec![Vec::new(); regions.len()],
        gpu_samples: vec![Vec::new(); regions.len()],
    };
    let RegionSorted { medians, samples, gpu_samples } = &mut out;
    let (mut walked_kernels, mut walked, mut walked_gpu) = (Ok(()), Ok(()), Ok(()));
    fork.all(vec![
        Box::new(|| {
            walked_kernels = each_sorted(
                kernel_runs,
                |id| by_name[&id].0,
                |id, _, samples| {
                    if let Some(&i) = slot.get(&id) {
                        kernels[i] = samples;
                    }
                },
            )
        }),
        Box::new(|| {
            walked = each_sorted(
                durations,
                |region| regions[region as usize].instances,
                |region, median, series| {
                    medians[region as usize] = median;
                    samples[region as usize] = series;
                },
            )
        }),
        // Every push/pop instance has a GPU time; only those of regions that
        // ran kernels are kept.
        Box::new(|| {
            walked_gpu = each_sorted(
                gpu_durations,
                |region| regions[region as usize].instances,
                |region, _, samples| {
                    if regions[region as usize].kernels > 0 {
                        gpu_samples[region as usize] = samples;
                    }
                },
            )
        }),
    ]);
    walked_kernels.and(walked).and(walked_gpu)?;
    Ok(Sorted { regions: out, kernels })
}

/// regions.json's rows and samples.json's region series, in the same order:
/// by process, thread, path and domain.
fn region_rows(
    regions: &[Acc],
    names: &Names,
    inclusive: &[HashMap<u32, (usize, i64)>],
    sorted: RegionSorted,
) -> (Vec<Region>, Vec<RegionSamples>) {
    let path_names = region_names(regions, names);
    let paths: Vec<String> = path_names.iter().map(regions::join).collect();
    let RegionSorted { medians, samples, gpu_samples } = sorted;
    // Each region with its samples: durations, and GPU times per instance.
    type Sampled = (Region, (Vec<i64>, Vec<i64>));
    let mut rows: Vec<Sampled> = regions
        .iter()
        .zip(samples.into_iter().zip(gpu_samples))
        .enumerate()
        .map(|(i, (a, samples))| {
            let region = Region {
                path: paths[i].clone(),
                path_names: path_names[i].clone(),
                name: names.get(a.name).to_string(),
                parent: a.parent.map(|p| paths[p as usize].clone()),
                depth: a.depth,
                domain: names.get(a.domain).to_string(),
                style: a.style,
                process_id: pid_of(a.global_tid),
                thread_id: tid_of(a.global_tid),
                instances: a.instances,
                inclusive_ns: a.inclusive_ns,
                exclusive_ns: a.inclusive_ns.saturating_sub(a.child_ns),
                min_ns: a.min_ns,
                median_ns: medians[i],
                max_ns: a.max_ns,
                kernel_count: a.kernels,
                gpu_time_ns: a.gpu_ns,
                kernel_count_exclusive: a.kernels_excl,
                gpu_time_exclusive_ns: a.gpu_excl_ns,
                gpu_span_ns: a.span_ns,
                graph_kernel_count: a.graph_kernels,
                graph_gpu_time_ns: a.graph_ns,
                kernels: kernel_rows(inclusive[i].iter().map(|(n, &v)| (names.get(*n).to_string(), v))),
                rank: None,
            };
            (region, samples)
        })
        .collect();
    rows.sort_by(|(a, _), (b, _)| {
        (a.process_id, a.thread_id, &a.path, &a.domain).cmp(&(b.process_id, b.thread_id, &b.path, &b.domain))
    });
    rows.into_iter()
        .map(|(r, (samples_ns, gpu_samples_ns))| {
            let s = RegionSamples {
                path: r.path.clone(),
                domain: r.domain.clone(),
                process_id: r.process_id,
                thread_id: r.thread_id,
                instances: r.instances,
                samples_ns,
                gpu_samples_ns,
            };
            (r, s)
        })
        .unzip()
}

/// Kernel totals per process and device, processes in order.
fn processes(mut by_process: Vec<(ProcessDevice, usize, i64, i64)>) -> Vec<ProcessKernels> {
    let mut processes: Vec<ProcessKernels> = Vec::new();
    by_process.sort_by_key(|p| p.0);
    for ((pid, device), kernel_count, gpu_time_ns, comm_gpu_time_ns) in by_process {
        let d = DeviceKernels { device, kernel_count, gpu_time_ns, comm_gpu_time_ns };
        match processes.last_mut().filter(|p| p.process_id == pid) {
            Some(p) => p.devices.push(d),
            None => processes.push(ProcessKernels { process_id: pid, devices: vec![d], rank: None }),
        }
    }
    processes
}

/// Each region's names, outermost first: its parent's and its own.
fn region_names(regions: &[Acc], names: &Names) -> Vec<Vec<String>> {
    let mut out: Vec<Vec<String>> = Vec::with_capacity(regions.len());
    // A parent is created before its children: its names are ready.
    for a in regions {
        let mut path = a.parent.map_or_else(Vec::new, |p| out[p as usize].clone());
        path.push(names.get(a.name).to_string());
        out.push(path);
    }
    out
}

/// Walk the sorted (key, value) pairs key by key; `count(key)` says how many
/// each key has. Calls `each(key, median, bounded samples)` per key present.
fn each_sorted(
    runs: Runs,
    count: impl Fn(u32) -> usize,
    mut each: impl FnMut(u32, i64, Vec<i64>),
) -> Result<(), Error> {
    let mut sorted = runs.sorted()?;
    let mut next = sorted.pop()?;
    while let Some((key, _)) = next {
        let n = count(key);
        let (lower, upper) = ((n - 1) / 2, n / 2);
        let mut ranks = runs::bounded_ranks(n, crate::timings::MAX_SAMPLES).peekable();
        let (mut median, mut samples, mut rank) = (0i128, Vec::new(), 0usize);
        while let Some((_, v)) = next.filter(|(k, _)| *k == key) {
            if rank == lower {
                median += i128::from(v);
            }
            if rank == upper {
                median += i128::from(v);
            }
            while ranks.peek() == Some(&rank) {
                samples.push(v);
                ranks.next();
            }
            rank += 1;
            next = sorted.pop()?;
        }
        each(key, (median / 2) as i64, samples);
    }
    Ok(())
}

/// Kernels by name with their (calls, total, min, max) ns → rows sorted by
/// total time (longest first, then by name), with mean and share of all kernels'
/// time; the first `n` (all when 0). Shared by the SQLite and the CSV readers.
pub(crate) fn top_kernel_rows(
    by_name: impl Iterator<Item = (String, (usize, i64, i64, i64))>,
    n: usize,
) -> Vec<TopKernel> {
    let by_name: Vec<_> = by_name.collect();
    let all: i64 = by_name.iter().map(|(_, v)| v.1).sum();
    let mut rows: Vec<TopKernel> = by_name
        .into_iter()
        .map(|(name, (calls, total, min, max))| TopKernel {
            name,
            short_name: None,
            calls,
            total_ns: total,
            mean_ns: if calls > 0 { total as f64 / calls as f64 } else { 0.0 },
            min_ns: min,
            max_ns: max,
            share_pct: if all > 0 { total as f64 * 100.0 / all as f64 } else { 0.0 },
        })
        .collect();
    rows.sort_by(|a, b| b.total_ns.cmp(&a.total_ns).then_with(|| a.name.cmp(&b.name)));
    if n > 0 {
        rows.truncate(n);
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse::nsys::batched;

    /// The steps one after the other, on this thread.
    struct InTurn;

    impl Fork for InTurn {
        fn all<'a>(&self, steps: Vec<Box<dyn FnOnce() + Send + 'a>>) {
            steps.into_iter().for_each(|step| step());
        }
    }

    /// Streams fed from vectors, as the readers would send them.
    fn stream<T: Send>(rows: Vec<T>) -> Stream<T> {
        let (mut out, stream) = batched::channel();
        for row in rows {
            out.push(row);
        }
        out.flush();
        stream
    }

    /// A CUDA graph launched inside `decode::step` runs three kernels under one
    /// launch call: all three belong to `step` and `decode`, counted as graph
    /// time; a graph launched outside every range is unattributed graph time.
    #[test]
    fn graph_kernels_belong_to_the_range_around_the_graph_launch() {
        let mut names = Names::default();
        let (decode, step, g1, g2, k) =
            (names.intern("decode"), names.intern("step"), names.intern("g1"), names.intern("g2"), names.intern("k"));
        let tid = (7 << 24) | 7;
        let range = |start, end, name| NvtxRange {
            start,
            end,
            name,
            domain: 0,
            style: RangeStyle::PushPop,
            ended: true,
            global_tid: tid,
        };
        let launched =
            |launch, start, name, graph| Launched { global_tid: tid, launch, start, end: start + 10, name, graph };
        let launches = vec![
            launched(20, 100, g1, true),
            launched(20, 110, g2, true),
            launched(20, 120, g2, true),
            launched(60, 130, k, false),
            launched(300, 310, g1, true),
        ];
        let mut totals = KernelTotals::new(&names);
        for l in &launches {
            let k = Kernel {
                start: l.start,
                end: l.end,
                name: l.name,
                short_id: None,
                graph: l.graph,
                pid: 7,
                device: Some(0),
                gpu: 0,
            };
            totals.add(k, &HashMap::default(), &names);
        }
        let mut sweep = Sweep::default();
        assert!(sweep.run(stream(vec![range(0, 100, decode), range(10, 50, step)]), stream(launches), None).unwrap());
        let out = sweep.finish(names, None, totals, (0, &InTurn)).unwrap();
        let region = |path: &str| out.regions.regions.iter().find(|r| r.path == path).unwrap().clone();
        let (d, s) = (region("decode"), region("decode::step"));
        assert_eq!((s.kernel_count, s.gpu_time_ns, s.graph_kernel_count, s.graph_gpu_time_ns), (3, 30, 3, 30));
        assert_eq!((d.kernel_count, d.gpu_time_ns, d.graph_kernel_count, d.graph_gpu_time_ns), (4, 40, 3, 30));
        let row = |name: &str, calls, gpu_time_ns| RegionKernel { name: name.into(), calls, gpu_time_ns };
        assert_eq!(s.kernels, [row("g2", 2, 20), row("g1", 1, 10)]);
        assert_eq!(d.kernels, [row("g2", 2, 20), row("g1", 1, 10), row("k", 1, 10)]);
        let u = &out.regions.unattributed;
        assert_eq!((u.kernel_count, u.gpu_time_ns, u.graph_kernel_count, u.graph_gpu_time_ns), (1, 10, 1, 10));
        assert_eq!(u.kernels, [row("g1", 1, 10)]);
    }

    #[test]
    fn top_kernel_rows_have_means_and_shares() {
        let rows = top_kernel_rows(
            [("k".to_string(), (4, 1000, 100, 400)), ("j".into(), (1, 1000, 1000, 1000))].into_iter(),
            0,
        );
        let k: Vec<_> = rows.iter().map(|r| (r.name.as_str(), r.mean_ns, r.share_pct)).collect();
        // Ties by name.
        assert_eq!(k, [("j", 1000.0, 50.0), ("k", 250.0, 50.0)]);
        assert_eq!(
            top_kernel_rows(rows.iter().map(|r| (r.name.clone(), (r.calls, r.total_ns, r.min_ns, r.max_ns))), 1).len(),
            1
        );
    }
}

/// The time breakdown's feed: what the ingestion's pass sends it, and how the
/// reader copes when that is not as it assumes. Each reading is compared
/// with the one fed as the pipeline feeds it (whose numbers tests/breakdown.rs
/// checks against SQL).
#[cfg(test)]
mod feed_tests {
    use std::sync::mpsc::{Receiver, SyncSender};

    use super::breakdown::{Breakdown, BreakdownReport, Window};
    use super::{KernelTotals, Sweep};
    use crate::aggregate::categories::Categories;
    use crate::parse::nsys::activity::{Feed, Source};
    use crate::parse::nsys::calls::FedCalls;
    use crate::parse::nsys::ingest::{ingest_beside, Beside};
    use crate::parse::nsys::sqlite::NsysDb;

    const EXPORT: &str = "real/nsys-ai/mfu_2gpu_before.sqlite";

    type Msg = Feed<Window>;

    /// The breakdown of `path` as the pipeline makes it, every message of the
    /// pass going through `relay` (which sends on what it will), at most
    /// `held` fed kernels held; and where the kernels came from.
    fn through(
        path: &std::path::Path,
        held: usize,
        relay: impl FnOnce(Receiver<Msg>, SyncSender<Msg>) + Send + 'static,
    ) -> (BreakdownReport, Source) {
        let db = NsysDb::open(path).expect("the export opens");
        let categories = Categories::load(None).expect("the shipped table");
        let classify = |name: &str| categories.of(name) as u8;
        let beside = Beside { new: || Breakdown::new(50_000), classify: &classify, held };
        let pass = ingest_beside(&db, &[], Sweep::default, KernelTotals::new, beside, Some(Box::new(relay)))
            .expect("the pass");
        let (b, source) = pass.breakdown.expect("the breakdown");
        let spell = |n| crate::parse::nsys::activity::spell(&db, &pass.names, source, n);
        (b.finish(&Default::default(), Vec::new(), &spell), source)
    }

    fn forward(from: Receiver<Msg>, to: SyncSender<Msg>) {
        for m in from {
            let _ = to.send(m);
        }
    }

    #[test]
    fn fed_kernels_give_what_the_kernel_table_gives_however_they_come() {
        let Some(real) = crate::testdata::corpus("fed_kernels_give_what_the_kernel_table_gives", EXPORT) else {
            return;
        };
        // A copy whose runtime rows are stored in start order (5 of the
        // export's are not, so its blocking calls are read sorted): the
        // two-process run with NCCL, read as the pipeline reads most exports.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("sorted_calls.sqlite");
        std::fs::copy(&real, &path).unwrap();
        rusqlite::Connection::open(&path)
            .unwrap()
            .execute_batch(
                "CREATE TABLE r AS SELECT * FROM CUPTI_ACTIVITY_KIND_RUNTIME ORDER BY start;
                 DROP TABLE CUPTI_ACTIVITY_KIND_RUNTIME;
                 ALTER TABLE r RENAME TO CUPTI_ACTIVITY_KIND_RUNTIME;",
            )
            .unwrap();
        // As the pipeline feeds it: the kernels from the ingestion's reader.
        // Two processes ran kernels, so the ingestion gives up its first
        // pass (it assumes one) and reads again: what the first sent is void.
        let (fed, source) = through(&path, usize::MAX, forward);
        assert_eq!(source, Source::FedWithCalls);
        assert_eq!(fed.devices.len(), 2, "two processes, a GPU each");
        // Its cudaStreamSynchronize calls make sync stalls: the calls count.
        assert!(fed.devices.iter().all(|d| d.span.idle_sync_ns > 0), "{:?}", fed.devices[0].span);
        let kernels: usize = fed.devices.iter().flat_map(|d| &d.categories).map(|c| c.kernels).sum();
        let sql = "SELECT count(*) FROM CUPTI_ACTIVITY_KIND_KERNEL";
        let count: i64 = rusqlite::Connection::open(&path).unwrap().query_row(sql, [], |r| r.get(0)).unwrap();
        assert_eq!(kernels as i64, count, "every kernel of the table, once");
        assert!(fed.devices.iter().all(|d| !d.regions.is_empty()), "regions were cut");

        // Every kernel before any window: more held than allowed, so the
        // reader reads the kernel table itself.
        let kernels_first = |from: Receiver<Msg>, to: SyncSender<Msg>| {
            let mut rest = Vec::new();
            for m in from {
                match m {
                    Feed::Kernels(..) => to.send(m).unwrap(),
                    Feed::End => break,
                    _ => rest.push(m),
                }
            }
            rest.into_iter().chain([Feed::End]).for_each(|m| to.send(m).unwrap());
        };
        let (own, source) = through(&path, 1000, kernels_first);
        assert_eq!(source, Source::Own(crate::parse::nsys::sqlite::Order::Stored));
        assert_eq!(own, fed);

        // Kernels out of start order on their device: read again, sorted.
        let reversed = |from: Receiver<Msg>, to: SyncSender<Msg>| {
            for m in from {
                let m = match m {
                    Feed::Kernels(p, mut batch) => {
                        batch.reverse();
                        Feed::Kernels(p, batch)
                    }
                    m => m,
                };
                let _ = to.send(m);
            }
        };
        let (sorted, source) = through(&path, usize::MAX, reversed);
        assert_eq!(source, Source::Own(crate::parse::nsys::sqlite::Order::Sorted));
        assert_eq!(sorted, fed);

        // The kept pass sent twice more, as passes 7 and 8: the first
        // reading is void, not added to the second.
        let twice = |from: Receiver<Msg>, to: SyncSender<Msg>| {
            let all: Vec<Msg> = from.iter().take_while(|m| !matches!(m, Feed::End)).collect();
            let kept = all.iter().filter_map(Msg::pass).max().unwrap();
            let all: Vec<Msg> = all.into_iter().filter(|m| m.pass() == Some(kept)).collect();
            for pass in [7, 8] {
                for m in all.iter().cloned() {
                    let m = match m {
                        Feed::Windows(_, w) => Feed::Windows(pass, w),
                        Feed::Upto(_, t) => Feed::Upto(pass, t),
                        Feed::Kernels(_, k) => Feed::Kernels(pass, k),
                        Feed::Calls(_, c) => Feed::Calls(pass, c),
                        Feed::End => Feed::End,
                    };
                    to.send(m).unwrap();
                }
            }
            to.send(Feed::End).unwrap();
        };
        let (again, source) = through(&path, usize::MAX, twice);
        assert_eq!(source, Source::FedWithCalls);
        assert_eq!(again, fed);

        // The launch reader stops sending calls (its rows out of start
        // order): the calls taken are void, and the reader reads them itself.
        let stopped = |from: Receiver<Msg>, to: SyncSender<Msg>| {
            let mut stopped = false;
            for m in from {
                let m = match m {
                    Feed::Calls(p, FedCalls::Calls(batch, _)) if !stopped && !batch.is_empty() => {
                        stopped = true;
                        Feed::Calls(p, FedCalls::Stopped)
                    }
                    m => m,
                };
                let _ = to.send(m);
            }
        };
        let (own_calls, source) = through(&path, usize::MAX, stopped);
        assert_eq!(source, Source::Own(crate::parse::nsys::sqlite::Order::Stored));
        assert_eq!(own_calls, fed);

        // Calls said to come whose last batch (every row read) never came:
        // not known to be all of them, so read here, the same.
        let unfinished = |from: Receiver<Msg>, to: SyncSender<Msg>| {
            for m in from {
                if !matches!(m, Feed::Calls(_, FedCalls::Calls(_, i64::MAX))) {
                    let _ = to.send(m);
                }
            }
        };
        let (unfinished_calls, source) = through(&path, usize::MAX, unfinished);
        assert_eq!(source, Source::Own(crate::parse::nsys::sqlite::Order::Stored));
        assert_eq!(unfinished_calls, fed);

        // Calls that never come, or that say so: read here, the same.
        let no_calls = |from: Receiver<Msg>, to: SyncSender<Msg>| {
            for m in from {
                let m = match m {
                    Feed::Calls(p, FedCalls::Coming(_)) => Feed::Calls(p, FedCalls::Coming(false)),
                    Feed::Calls(..) => continue,
                    m => m,
                };
                let _ = to.send(m);
            }
        };
        let (read_here, source) = through(&path, usize::MAX, no_calls);
        assert_eq!(source, Source::Fed);
        assert_eq!(read_here, fed);

        // The export as nsys stored it, 5 runtime rows out of start order:
        // the ingestion reads its pass again sorted, the calls then hold.
        let (as_stored, source) = through(&real, usize::MAX, forward);
        assert_eq!(source, Source::FedWithCalls);
        assert_eq!(as_stored, fed);
    }
}
