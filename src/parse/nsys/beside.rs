//! parse::nsys::beside: the pass's side of the time breakdown's feed. The
//! ingestion driver ([`super::ingest`]) makes one channel per ingestion and,
//! per pass, these three senders on it, each stamped with the pass's number
//! (its own retry loop's count): the range sweep's windows ([`WindowFeed`],
//! behind the [`Windows`] handle a [`super::ingest::Timeline`] is given), the
//! kernel reader's kernels ([`KernelFeed`], a tee in front of the
//! [`super::ingest::KernelSink`]) and the launch reader's blocking calls
//! ([`CallFeed`]). The receiving side, and the messages, are
//! [`super::activity`]'s. A sender whose receiver is gone stops sending; the
//! pass goes on.
use std::sync::mpsc::SyncSender;

use super::activity::{FedKernel, Feed};
use super::calls::{CallTap, FedCalls};
use super::sqlite::{Kernel, Names};

/// Where a timeline hands the windows it meets (its top-level push/pop
/// range instances) as it sweeps: the time breakdown cuts the GPU's activity
/// by them.
pub trait Windows<W> {
    /// One window, in start order.
    fn window(&mut self, w: W);
    /// Every window starting at or before `t` has been handed over.
    fn upto(&mut self, t: i64);
}

/// How often (in launches) a timeline says how far its windows have come
/// ([`Windows::upto`]), so that the breakdown judges the kernels it holds
/// between two windows far apart (one range around a whole run).
pub(crate) const UPTO_EVERY: usize = 1024;

/// Windows sent at once (and those met before each `Upto`): one message each
/// woke the breakdown's thread 64,518 times at 10M ranges.
const WINDOWS_BATCH: usize = 256;

/// Kernels sent at once.
const KERNELS_BATCH: usize = 1024;

/// One pass's sender: the channel, and the pass's number on every message.
struct Sender<W> {
    /// None once the receiver is gone.
    tx: Option<SyncSender<Feed<W>>>,
    pass: u32,
}

impl<W> Sender<W> {
    fn send(&mut self, msg: impl FnOnce(u32) -> Feed<W>) {
        if self.tx.as_ref().is_some_and(|tx| tx.send(msg(self.pass)).is_err()) {
            self.tx = None;
        }
    }
}

/// The range sweep's windows, in batches.
pub(crate) struct WindowFeed<W> {
    to: Sender<W>,
    batch: Vec<W>,
}

impl<W> WindowFeed<W> {
    pub(crate) fn new(tx: SyncSender<Feed<W>>, pass: u32) -> Self {
        WindowFeed { to: Sender { tx: Some(tx), pass }, batch: Vec::with_capacity(WINDOWS_BATCH) }
    }

    /// The windows met since the last batch.
    pub(crate) fn flush(&mut self) {
        if self.to.tx.is_some() && !self.batch.is_empty() {
            let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(WINDOWS_BATCH));
            self.to.send(|pass| Feed::Windows(pass, batch));
        }
    }
}

impl<W> Windows<W> for WindowFeed<W> {
    fn window(&mut self, w: W) {
        if self.to.tx.is_some() {
            self.batch.push(w);
            if self.batch.len() == WINDOWS_BATCH {
                self.flush();
            }
        }
    }

    fn upto(&mut self, t: i64) {
        self.flush();
        self.to.send(|pass| Feed::Upto(pass, t));
    }
}

/// The kernel reader's kernels, each with the class `classify` gives its
/// name (asked once per name), in batches: the kernel table read once for
/// the region tree and the breakdown.
pub(crate) struct KernelFeed<'c, W> {
    to: Sender<W>,
    batch: Vec<FedKernel>,
    /// Each name's class by id ([`NOT_CLASSED`]: not asked yet).
    classes: Vec<u8>,
    classify: &'c (dyn Fn(&str) -> u8 + Sync),
}

const NOT_CLASSED: u8 = u8::MAX;

impl<'c, W> KernelFeed<'c, W> {
    pub(crate) fn new(
        tx: SyncSender<Feed<W>>,
        pass: u32,
        names: &Names,
        classify: &'c (dyn Fn(&str) -> u8 + Sync),
    ) -> Self {
        KernelFeed {
            to: Sender { tx: Some(tx), pass },
            batch: Vec::with_capacity(KERNELS_BATCH),
            classes: vec![NOT_CLASSED; names.all().len()],
            classify,
        }
    }

    #[inline] // per kernel, in the kernel reader's loop
    pub(crate) fn add(&mut self, k: &Kernel, names: &Names) {
        if self.to.tx.is_none() {
            return;
        }
        let i = k.name as usize;
        if i >= self.classes.len() {
            self.classes.resize(i + 1, NOT_CLASSED);
        }
        if self.classes[i] == NOT_CLASSED {
            self.classes[i] = (self.classify)(names.all().get(i).map_or("", String::as_str));
        }
        // The process id is 24 bits (`globalPid >> 24 & 0xFFFFFF`).
        let pid = k.pid as u32;
        let device = i32::try_from(k.gpu).unwrap_or(i32::MAX);
        let (start, end, name, class) = (k.start, k.end, k.name, self.classes[i]);
        self.batch.push(FedKernel { start, end, device, pid, name, class });
        if self.batch.len() == KERNELS_BATCH {
            self.flush();
        }
    }

    /// The kernels not sent yet.
    pub(crate) fn flush(&mut self) {
        if self.batch.is_empty() {
            return;
        }
        let batch = std::mem::replace(&mut self.batch, Vec::with_capacity(KERNELS_BATCH));
        self.to.send(|pass| Feed::Kernels(pass, batch));
    }
}

/// The launch reader's blocking calls.
pub(crate) struct CallFeed<W> {
    to: Sender<W>,
}

impl<W> CallFeed<W> {
    pub(crate) fn new(tx: SyncSender<Feed<W>>, pass: u32) -> Self {
        CallFeed { to: Sender { tx: Some(tx), pass } }
    }
}

impl<W> CallTap for CallFeed<W> {
    fn tell(&mut self, what: FedCalls) {
        self.to.send(|pass| Feed::Calls(pass, what));
    }
}
