//! The built-in workloads live in `libllmperf_torch.so` (the `torch/` crate),
//! which `llmperf` loads with dlopen only when a built-in workload runs or
//! libtorch is asked about (env.json, doctor). Linking libtorch into the
//! executable made every start pay ~0.5 s of libtorch loading and static
//! initializers, including `llmperf report` and `import`.
//!
//! The two sides exchange one JSON request and one JSON reply through
//! [`CALL_SYMBOL`]; both are compiled from this crate's types, and the plugin
//! is refused unless it was built from the same sources ([`CONTRACT`]).
use serde::{Deserialize, Serialize};
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use crate::config::Config;
use crate::error::{Error, ErrorKind};
use crate::timings::Timings;

/// The plugin's file name, looked up next to the `llmperf` executable.
pub const FILE_NAME: &str = "libllmperf_torch.so";
/// Overrides where the plugin is loaded from.
pub const ENV_VAR: &str = "LLMPERF_TORCH_PLUGIN";
/// Version and source fingerprint both sides must share.
pub const CONTRACT: &str = concat!(env!("CARGO_PKG_VERSION"), "+", env!("LLMPERF_SOURCE_HASH"));
/// `fn(len: *mut usize) -> *const u8`: the plugin's [`CONTRACT`].
pub(crate) const CONTRACT_SYMBOL: &str = "llmperf_torch_contract";
/// `fn(request, request_len, reply, ctx) -> c_int`, see [`ReplyFn`].
pub(crate) const CALL_SYMBOL: &str = "llmperf_torch_call";

/// Called by the plugin exactly once per call with the reply's JSON bytes.
pub type ReplyFn = unsafe extern "C" fn(ctx: *mut c_void, bytes: *const u8, len: usize);
type ContractFn = unsafe extern "C" fn(len: *mut usize) -> *const u8;
type CallFn = unsafe extern "C" fn(request: *const u8, len: usize, reply: ReplyFn, ctx: *mut c_void) -> c_int;

#[derive(Debug, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "snake_case")]
pub enum Request {
    /// Run the configured workload; `log` is the plugin's tracing filter.
    Workload { config: Box<Config>, nvtx: bool, log: String },
    /// What libtorch the plugin links and whether it sees CUDA.
    Info,
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    Timings(Box<Timings>),
    Info(Runtime),
    Error { kind: ErrorKind, message: String, hint: Option<String> },
}

impl Reply {
    pub fn error(e: Error) -> Self {
        Reply::Error { kind: e.kind, message: e.message, hint: e.hint }
    }
}

/// libtorch as the plugin sees it at run time.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Runtime {
    /// The libtorch `lib/` directory the plugin was linked against (its rpath).
    pub lib_dir: Option<String>,
    pub cuda_available: bool,
    pub cuda_device_count: i64,
}

/// A loaded plugin. Never unloaded: libtorch does not survive dlclose.
pub(crate) struct Plugin {
    pub(crate) path: PathBuf,
    call: CallFn,
}

/// Load the plugin once per process; later calls get the same result.
pub(crate) fn load() -> Result<&'static Plugin, Error> {
    static PLUGIN: OnceLock<Result<Plugin, Error>> = OnceLock::new();
    PLUGIN.get_or_init(|| locate().and_then(|p| open(&p))).as_ref().map_err(Clone::clone)
}

/// Run the built-in workload in the plugin.
pub(crate) fn run_workload(cfg: &Config, nvtx: bool) -> Result<Timings, Error> {
    let log = std::env::var("LLMPERF_LOG")
        .unwrap_or_else(|_| format!("llmperf_torch={}", tracing::level_filters::LevelFilter::current()));
    match load()?.call(&Request::Workload { config: Box::new(cfg.clone()), nvtx, log })? {
        Reply::Timings(t) => Ok(*t),
        other => Err(unexpected(other)),
    }
}

/// libtorch's directory and CUDA view, from the plugin.
pub(crate) fn runtime() -> Result<(&'static Plugin, Runtime), Error> {
    let plugin = load()?;
    match plugin.call(&Request::Info)? {
        Reply::Info(rt) => Ok((plugin, rt)),
        other => Err(unexpected(other)),
    }
}

fn unexpected(reply: Reply) -> Error {
    match reply {
        Reply::Error { kind, message, hint } => Error { kind, message, hint },
        other => Error::new(ErrorKind::Internal, format!("the workload plugin replied out of turn: {other:?}")),
    }
}

/// `LLMPERF_TORCH_PLUGIN`, else `libllmperf_torch.so` next to the executable.
fn locate() -> Result<PathBuf, Error> {
    if let Some(p) = std::env::var_os(ENV_VAR) {
        return Ok(PathBuf::from(p));
    }
    let exe = std::env::current_exe()
        .map_err(|e| Error::new(ErrorKind::Internal, format!("cannot locate the llmperf executable: {e}")))?;
    Ok(exe.parent().unwrap_or(Path::new(".")).join(FILE_NAME))
}

fn open(path: &Path) -> Result<Plugin, Error> {
    let unavailable = |what: String| {
        Error::new(
            ErrorKind::ProfilerUnavailable,
            format!("cannot load the workload plugin {}: {what}", path.display()),
        )
        .with_hint(format!(
            "built-in workloads need {FILE_NAME} next to llmperf: `make build` (cargo build --release) builds both, \
                 or set {ENV_VAR}=PATH; your own command needs no plugin: llmperf profile -- CMD"
        ))
    };
    if !path.is_file() {
        return Err(unavailable("no such file".into()));
    }
    let c_path = CString::new(path.as_os_str().as_encoded_bytes()).map_err(|_| unavailable("NUL in path".into()))?;
    // SAFETY: dlopen/dlsym with valid C strings; the handle is never closed, so
    // the symbols stay valid for the life of the process.
    unsafe {
        let handle = libc::dlopen(c_path.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if handle.is_null() {
            return Err(unavailable(dl_error()));
        }
        let contract: ContractFn = std::mem::transmute(symbol(handle, CONTRACT_SYMBOL).map_err(&unavailable)?);
        let mut len = 0usize;
        let ptr = contract(&mut len);
        let theirs = String::from_utf8_lossy(std::slice::from_raw_parts(ptr, len)).into_owned();
        if theirs != CONTRACT {
            return Err(Error::new(
                ErrorKind::ProfilerUnavailable,
                format!(
                    "the workload plugin {} was built from other sources ({theirs}) than this llmperf ({CONTRACT})",
                    path.display()
                ),
            )
            .with_hint("rebuild both together: `make build` (cargo build --release)"));
        }
        let call: CallFn = std::mem::transmute(symbol(handle, CALL_SYMBOL).map_err(&unavailable)?);
        Ok(Plugin { path: path.to_path_buf(), call })
    }
}

unsafe fn symbol(handle: *mut c_void, name: &str) -> Result<*mut c_void, String> {
    let c_name = CString::new(name).expect("symbol names have no NUL");
    let sym = libc::dlsym(handle, c_name.as_ptr());
    if sym.is_null() {
        Err(format!("no symbol {name}: {}", dl_error()))
    } else {
        Ok(sym)
    }
}

unsafe fn dl_error() -> String {
    let e: *const c_char = libc::dlerror();
    if e.is_null() {
        "unknown dlopen error".into()
    } else {
        CStr::from_ptr(e).to_string_lossy().into_owned()
    }
}

impl Plugin {
    fn call(&self, request: &Request) -> Result<Reply, Error> {
        unsafe extern "C" fn collect(ctx: *mut c_void, bytes: *const u8, len: usize) {
            let out = &mut *(ctx as *mut Vec<u8>);
            out.extend_from_slice(std::slice::from_raw_parts(bytes, len));
        }
        let bytes = serde_json::to_vec(request).expect("requests serialize");
        let mut out: Vec<u8> = Vec::new();
        // SAFETY: the plugin reads `bytes` and calls `collect` with a valid
        // slice before returning; `out` outlives the call.
        let rc = unsafe { (self.call)(bytes.as_ptr(), bytes.len(), collect, &mut out as *mut Vec<u8> as *mut c_void) };
        if rc != 0 {
            return Err(Error::new(ErrorKind::Internal, format!("the workload plugin failed (code {rc})")));
        }
        serde_json::from_slice(&out).map_err(|e| {
            Error::new(ErrorKind::Internal, format!("the workload plugin's reply is not understood: {e}"))
                .with_hint("rebuild both together: `make build` (cargo build --release)")
        })
    }
}
