//! NVTX ranges and wall-clock timing around the regions of a workload.
//!
//! `region(name, f)` pushes an NVTX range (in the workload's domain, if any),
//! runs `f`, pops the range and records the wall time under the region's full
//! path (`decode_all::decode_step::layer_0::attn`). On CUDA it synchronizes at
//! both boundaries, so a kernel launched inside a range also finishes inside
//! it and the wall time covers the GPU work.
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::time::Instant;
use tch::Device;

use llmperf::regions;

pub struct Instrument {
    nvtx: bool,
    domain: Option<nvtx::Domain>,
    device: Device,
    path: RefCell<Vec<String>>,
    samples: RefCell<BTreeMap<String, Vec<f64>>>,
    recording: Cell<bool>,
}

/// The NVTX range of a region; popped on drop.
enum Guard<'a> {
    Default(#[allow(dead_code)] nvtx::LocalRange),
    Domain(#[allow(dead_code)] nvtx::domain::LocalRange<'a>),
    Off,
}

impl Instrument {
    /// `domain`: the NVTX domain of every range (None = the default domain).
    pub fn new(nvtx_enabled: bool, domain: Option<&str>, device: Device) -> Self {
        Instrument {
            nvtx: nvtx_enabled,
            domain: domain.filter(|_| nvtx_enabled).map(|d| nvtx::Domain::new(c_string(d))),
            device,
            path: RefCell::new(Vec::new()),
            samples: RefCell::new(BTreeMap::new()),
            recording: Cell::new(true),
        }
    }

    /// Warm-up iterations emit no ranges and record nothing.
    pub fn set_recording(&self, on: bool) {
        self.recording.set(on);
    }

    pub fn region<T>(&self, name: &str, f: impl FnOnce() -> T) -> T {
        if !self.recording.get() {
            return f();
        }
        self.sync();
        let guard = self.push(name);
        self.path.borrow_mut().push(name.to_string());
        let start = Instant::now();
        let out = f();
        self.sync();
        let ms = start.elapsed().as_secs_f64() * 1e3;
        let key = regions::join(self.path.borrow().iter());
        self.samples.borrow_mut().entry(key).or_default().push(ms);
        self.path.borrow_mut().pop();
        drop(guard);
        out
    }

    fn push(&self, name: &str) -> Guard<'_> {
        match (&self.domain, self.nvtx) {
            (_, false) => Guard::Off,
            (Some(d), true) => Guard::Domain(d.local_range(c_string(name))),
            (None, true) => Guard::Default(nvtx::LocalRange::new(c_string(name))),
        }
    }

    fn sync(&self) {
        if let Device::Cuda(index) = self.device {
            tch::Cuda::synchronize(index as i64);
        }
    }

    /// Durations (ms) recorded per region path.
    pub fn into_samples(self) -> BTreeMap<String, Vec<f64>> {
        self.samples.into_inner()
    }
}

/// NVTX takes C strings; region names come from `regions` and hold no NUL.
fn c_string(name: &str) -> std::ffi::CString {
    std::ffi::CString::new(name).unwrap_or_default()
}
