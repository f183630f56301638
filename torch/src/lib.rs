//! libllmperf_torch.so: llmperf's built-in workloads on libtorch, loaded by the
//! `llmperf` executable with dlopen (see `llmperf::plugin` for the protocol and
//! why this is not linked into the executable).
mod workload;

use std::ffi::{c_int, c_void};
use std::sync::Once;

use llmperf::error::{Error, ErrorKind};
use llmperf::plugin::{Reply, ReplyFn, Request, Runtime, CONTRACT};

/// The libtorch `lib/` directory recorded by build.rs (also the plugin's rpath).
const LIB_DIR: &str = env!("LLMPERF_LIBTORCH_DIR");

/// # Safety
/// `len` must be valid for a write.
#[no_mangle]
pub unsafe extern "C" fn llmperf_torch_contract(len: *mut usize) -> *const u8 {
    *len = CONTRACT.len();
    CONTRACT.as_ptr()
}

/// Handle one JSON [`Request`] and hand the JSON [`Reply`] to `reply`. Panics
/// become error replies; they never unwind into the caller.
///
/// # Safety
/// `request` must point to `len` readable bytes; `reply` is called once, with
/// `ctx`, before this returns.
#[no_mangle]
pub unsafe extern "C" fn llmperf_torch_call(request: *const u8, len: usize, reply: ReplyFn, ctx: *mut c_void) -> c_int {
    let input = std::slice::from_raw_parts(request, len);
    let answer = std::panic::catch_unwind(|| handle(input)).unwrap_or_else(|panic| {
        let what = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "a panic".into());
        Reply::error(Error::new(ErrorKind::Internal, format!("the workload plugin panicked: {what}")))
    });
    match serde_json::to_vec(&answer) {
        Ok(bytes) => {
            reply(ctx, bytes.as_ptr(), bytes.len());
            0
        }
        Err(_) => 1,
    }
}

fn handle(input: &[u8]) -> Reply {
    match serde_json::from_slice::<Request>(input) {
        Err(e) => Reply::error(Error::new(
            ErrorKind::Internal,
            format!("the workload plugin got a request it cannot read: {e}"),
        )),
        Ok(Request::Info) => Reply::Info(Runtime {
            lib_dir: (!LIB_DIR.is_empty()).then(|| LIB_DIR.to_string()),
            cuda_available: tch::Cuda::is_available(),
            cuda_device_count: tch::Cuda::device_count(),
        }),
        Ok(Request::Workload { config, nvtx, log }) => {
            init_tracing(&log);
            match workload::run(&config, nvtx) {
                Ok(t) => Reply::Timings(Box::new(t)),
                Err(e) => Reply::error(e),
            }
        }
    }
}

/// The plugin has its own tracing dispatcher; it logs like the executable does.
fn init_tracing(filter: &str) {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let filter = tracing_subscriber::EnvFilter::try_new(filter)
            .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("llmperf_torch=info"));
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(std::io::stderr)
            .with_target(false)
            .without_time()
            .try_init();
    });
}
