//! NVTX ranges and wall-clock timing around the regions of a workload.
//!
//! `region(name, f)` pushes an NVTX range (in the workload's domain, if any),
//! runs `f`, pops the range and records the wall time under the region's full
//! path (`decode_all::decode_step::layer_0::attn`). On CUDA it synchronizes at
//! both boundaries, so a kernel launched inside a range also finishes inside
//! it and the wall time covers the GPU work.
//!
//! Ranges in a named domain carry their name as an ASCII message, not as a
//! registered string (what the `nvtx` crate's `Domain::local_range` makes):
//! ncu 2022.3 sees a registered-string range with an empty name, so no region
//! name matches it (`LLM@decode_all/` matched 0 ranges, the same with ASCII
//! messages 1 per instance; docs/internals.md, "Region selectors").
//!
//! `infer.cuda_probe` makes a CUDA driver call (`cuDeviceGetCount`) where a
//! CUDA device would synchronize: before the push and before the pop. On a
//! host without a GPU, ncu 2022.3 defines a range of a named domain only at a
//! CUDA call inside it, and ends a range only at a CUDA call outside it; the
//! probe makes every matched range visible in ncu's log there, and the tests
//! count them. Off by default; it changes no measured work.
use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::time::Instant;
use tch::Device;

use llmperf::regions;

/// Durations (ms) per region path.
pub type Samples = BTreeMap<String, Vec<f64>>;

/// Per region path, its durations split by repeat of the measured loop.
pub type RepeatSamples = BTreeMap<String, Vec<Vec<f64>>>;

pub struct Instrument {
    nvtx: bool,
    domain: Option<nvtx_sys::DomainHandle>,
    device: Device,
    path: RefCell<Vec<String>>,
    samples: RefCell<BTreeMap<String, Vec<f64>>>,
    recording: Cell<bool>,
    cuda_probe: bool,
    /// Per repeat of the measured loop, how many samples each region had when it began.
    repeats: RefCell<Vec<BTreeMap<String, usize>>>,
}

/// The NVTX range of a region; popped on drop.
enum Guard {
    Default(#[allow(dead_code)] nvtx::LocalRange),
    Domain(nvtx_sys::DomainHandle),
    Off,
}

impl Drop for Guard {
    fn drop(&mut self) {
        if let Guard::Domain(d) = self {
            nvtx_sys::domain_range_pop(*d);
        }
    }
}

impl Instrument {
    /// `domain`: the NVTX domain of every range (None = the default domain).
    pub fn new(nvtx_enabled: bool, domain: Option<&str>, device: Device) -> Self {
        Instrument {
            nvtx: nvtx_enabled,
            domain: domain.filter(|_| nvtx_enabled).map(|d| nvtx_sys::domain_create_ascii(&c_string(d))),
            device,
            path: RefCell::new(Vec::new()),
            samples: RefCell::new(BTreeMap::new()),
            recording: Cell::new(true),
            cuda_probe: false,
            repeats: RefCell::new(Vec::new()),
        }
    }

    /// A CUDA driver call at each region boundary (`infer.cuda_probe`).
    pub fn with_cuda_probe(mut self, on: bool) -> Self {
        self.cuda_probe = on;
        self
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

    fn push(&self, name: &str) -> Guard {
        match (self.domain, self.nvtx) {
            (_, false) => Guard::Off,
            (Some(d), true) => {
                let name = c_string(name);
                nvtx_sys::domain_range_push_ex(d, &ascii_attributes(&name));
                Guard::Domain(d)
            }
            (None, true) => Guard::Default(nvtx::LocalRange::new(c_string(name))),
        }
    }

    /// A region boundary outside every range (after the measured loop).
    pub fn boundary(&self) {
        self.sync();
    }

    /// At both boundaries of a region: on CUDA, wait for its kernels; with
    /// the probe, a CUDA call where the synchronization would be (ncu ends a
    /// range at the next CUDA call outside it, so back-to-back ranges stay apart).
    fn sync(&self) {
        match self.device {
            Device::Cuda(index) => tch::Cuda::synchronize(index as i64),
            _ if self.cuda_probe => cuda_probe(),
            _ => {}
        }
    }

    /// A repeat of the measured loop begins here.
    pub fn begin_repeat(&self) {
        let counts = self.samples.borrow().iter().map(|(k, v)| (k.clone(), v.len())).collect();
        self.repeats.borrow_mut().push(counts);
    }

    /// Durations (ms) recorded per region path, and with more than one
    /// repeat, each region's samples split by repeat.
    pub fn into_samples(self) -> (Samples, RepeatSamples) {
        let samples = self.samples.into_inner();
        let starts = self.repeats.into_inner();
        let mut per_repeat = BTreeMap::new();
        if starts.len() > 1 {
            for (key, values) in &samples {
                let at = |i: usize| starts.get(i).map_or(values.len(), |c| c.get(key).copied().unwrap_or(0));
                let parts = (0..starts.len()).map(|i| values[at(i)..at(i + 1)].to_vec()).collect();
                per_repeat.insert(key.clone(), parts);
            }
        }
        (samples, per_repeat)
    }
}

/// `cuDeviceGetCount` through the loaded CUDA driver, if there is one; its
/// result does not matter (without a GPU it is an error code).
fn cuda_probe() {
    type DeviceGetCount = unsafe extern "C" fn(*mut libc::c_int) -> libc::c_int;
    static CALL: std::sync::OnceLock<Option<DeviceGetCount>> = std::sync::OnceLock::new();
    let call = CALL.get_or_init(|| {
        // SAFETY: dlopen/dlsym with NUL-terminated names; the symbol has cuDeviceGetCount's C signature.
        unsafe {
            let lib = libc::dlopen(c"libcuda.so.1".as_ptr(), libc::RTLD_NOW);
            if lib.is_null() {
                return None;
            }
            let f = libc::dlsym(lib, c"cuDeviceGetCount".as_ptr());
            (!f.is_null()).then(|| std::mem::transmute::<*mut libc::c_void, DeviceGetCount>(f))
        }
    });
    if let Some(f) = call {
        let mut n: libc::c_int = 0;
        // SAFETY: `n` is a valid out pointer for the call.
        let _ = unsafe { f(&mut n) };
    }
}

/// Event attributes with `name` as an ASCII message (NVTX copies it during the call).
fn ascii_attributes(name: &std::ffi::CStr) -> nvtx_sys::EventAttributes {
    // SAFETY: nvtxEventAttributes_t is plain data (integers, unions of integers and pointers): all zeros is valid.
    let mut a: nvtx_sys::EventAttributes = unsafe { std::mem::zeroed() };
    a.version = nvtx_sys::NVTX_VERSION as u16;
    a.size = nvtx_sys::NVTX_EVENT_ATTRIBUTES_SIZE as u16;
    a.messageType = nvtx_sys::ffi::nvtxMessageType_t::NVTX_MESSAGE_TYPE_ASCII as i32;
    a.message.ascii = name.as_ptr();
    a
}

/// NVTX takes C strings; region names come from `regions` and hold no NUL.
fn c_string(name: &str) -> std::ffi::CString {
    std::ffi::CString::new(name).unwrap_or_default()
}
