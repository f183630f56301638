//! parse: a file mapped read-only, for readers that scan big inputs on every
//! core without copying them first (the ncu details fast path).
//!
//! Why a map and not `read`: reading copies every byte once more into buffers
//! that are then cold for the workers, and those buffers are the reader's peak
//! memory (500 MB here: 0.185 s and 66 MiB read, 0.153 s and 25 MiB mapped). With a map the workers read the page
//! cache where it lies, and [`Mapped::release`] drops the pages a worker is done
//! with, so the resident size stays at the blocks in flight.
//!
//! The one hazard of a map: a file cut short while it is mapped turns the next
//! access past its new end into SIGBUS. While any map is open, a SIGBUS handler
//! names the file and exits with the parse-error status instead of dying
//! without a word; outside a map it restores the default action.
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::sync::atomic::{AtomicU8, AtomicUsize, Ordering};
use std::sync::Once;

/// A whole file, mapped read-only.
pub(crate) struct Mapped {
    ptr: *mut libc::c_void,
    len: usize,
}

// SAFETY: the map is read-only and unmapped only in Drop, after every borrow of
// it has ended; `release` only tells the kernel that pages may be dropped (a
// later read maps them again from the file).
unsafe impl Send for Mapped {}
unsafe impl Sync for Mapped {}

impl Mapped {
    /// Map `file` (named `path` in the SIGBUS message). None when it cannot be
    /// mapped (an empty file, a pipe): the caller reads it another way.
    pub(crate) fn open(file: &File, path: &Path) -> Option<Mapped> {
        let meta = file.metadata().ok()?;
        let len = usize::try_from(meta.len()).ok()?;
        if len == 0 || !meta.is_file() {
            return None;
        }
        // SAFETY: a fresh private read-only mapping of a regular file; the
        // result is checked against MAP_FAILED before use.
        let ptr =
            unsafe { libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ, libc::MAP_PRIVATE, file.as_raw_fd(), 0) };
        if ptr == libc::MAP_FAILED {
            return None;
        }
        // SAFETY: advice on the mapping just made; failure is harmless.
        unsafe { libc::madvise(ptr, len, libc::MADV_SEQUENTIAL) };
        guard_bus_errors(path);
        Some(Mapped { ptr, len })
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `len` bytes from `ptr` are mapped readable until Drop.
        unsafe { std::slice::from_raw_parts(self.ptr as *const u8, self.len) }
    }

    /// The whole pages inside `range` are no longer needed: they leave this
    /// process's resident set (they stay in the page cache).
    pub(crate) fn release(&self, range: std::ops::Range<usize>) {
        // SAFETY: sysconf only reads a system constant.
        let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) }).unwrap_or(4096).max(1);
        let (start, end) = (range.start.div_ceil(page) * page, (range.end.min(self.len) / page) * page);
        if end > start {
            // SAFETY: a page-aligned range inside the mapping; MADV_DONTNEED on
            // a private file mapping only drops the page table entries.
            unsafe { libc::madvise(self.ptr.cast::<u8>().add(start).cast(), end - start, libc::MADV_DONTNEED) };
        }
    }
}

impl Drop for Mapped {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `open`, unmapped once.
        unsafe { libc::munmap(self.ptr, self.len) };
        OPEN_MAPS.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Maps open now; the SIGBUS handler acts only while there is one.
static OPEN_MAPS: AtomicUsize = AtomicUsize::new(0);
/// The handler's message for the latest map, in static storage: a signal
/// handler may not allocate, and nothing here is ever freed under it.
const MESSAGE_MAX: usize = 2048;
static MESSAGE: [AtomicU8; MESSAGE_MAX] = [const { AtomicU8::new(0) }; MESSAGE_MAX];
static MESSAGE_LEN: AtomicUsize = AtomicUsize::new(0);

fn guard_bus_errors(path: &Path) {
    let text = format!(
        "error: {} changed size while llmperf was reading it (SIGBUS): it was cut short or rewritten\n\
         hint: let the program that writes it finish, or copy it somewhere stable, and run llmperf again\n",
        path.display()
    );
    let text = text.as_bytes();
    let len = text.len().min(MESSAGE_MAX);
    MESSAGE_LEN.store(0, Ordering::SeqCst);
    for (slot, &b) in MESSAGE.iter().zip(&text[..len]) {
        slot.store(b, Ordering::Relaxed);
    }
    MESSAGE_LEN.store(len, Ordering::SeqCst);
    OPEN_MAPS.fetch_add(1, Ordering::SeqCst);
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        // SAFETY: installs a handler that only calls async-signal-safe
        // functions (write, signal, _exit).
        unsafe {
            let mut action: libc::sigaction = std::mem::zeroed();
            action.sa_sigaction = on_bus_error as *const () as usize;
            action.sa_flags = libc::SA_SIGINFO;
            libc::sigemptyset(&mut action.sa_mask);
            libc::sigaction(libc::SIGBUS, &action, std::ptr::null_mut());
        }
    });
}

extern "C" fn on_bus_error(_: libc::c_int, _: *mut libc::siginfo_t, _: *mut libc::c_void) {
    if OPEN_MAPS.load(Ordering::SeqCst) == 0 {
        // Not ours: the default action, raised again when the access repeats.
        // SAFETY: signal() is async-signal-safe.
        unsafe { libc::signal(libc::SIGBUS, libc::SIG_DFL) };
        return;
    }
    let mut text = [0u8; MESSAGE_MAX];
    let len = MESSAGE_LEN.load(Ordering::SeqCst).min(MESSAGE_MAX);
    for (b, slot) in text.iter_mut().zip(&MESSAGE[..len]) {
        *b = slot.load(Ordering::Relaxed);
    }
    // SAFETY: write and _exit are async-signal-safe; `text` is on this stack.
    unsafe {
        libc::write(2, text.as_ptr().cast(), len);
        libc::_exit(crate::error::ErrorKind::Unparseable.exit_code());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file cut short under its map: the next read past the new end exits
    /// with the parse-error status and names the file (run in a child, since
    /// it ends the process).
    #[test]
    fn a_file_cut_short_under_the_map_is_named_not_a_crash() {
        const CHILD: &str = "LLMPERF_TEST_MAPPED_CHILD";
        if let Some(path) = std::env::var_os(CHILD) {
            let path = std::path::PathBuf::from(path);
            let file = File::open(&path).unwrap();
            let map = Mapped::open(&file, &path).unwrap();
            assert_eq!(map.bytes()[100_000], b'x');
            std::fs::OpenOptions::new().write(true).open(&path).unwrap().set_len(10).unwrap();
            map.release(0..map.bytes().len());
            let past = map.bytes()[100_000];
            panic!("read {past} past the end without SIGBUS");
        }
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("growing.csv");
        std::fs::write(&path, vec![b'x'; 200_000]).unwrap();
        let out = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "parse::mapped::tests::a_file_cut_short_under_the_map_is_named_not_a_crash",
                "--nocapture",
            ])
            .env(CHILD, &path)
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(crate::error::ErrorKind::Unparseable.exit_code()), "{stderr}");
        assert!(
            stderr.contains(&format!("error: {} changed size while llmperf was reading it", path.display())),
            "{stderr}"
        );
        assert!(stderr.contains("hint: "), "{stderr}");
    }

    #[test]
    fn empty_files_and_pipes_are_not_mapped() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty.csv");
        std::fs::write(&empty, b"").unwrap();
        assert!(Mapped::open(&File::open(&empty).unwrap(), &empty).is_none());
        let (reader, _writer) = std::io::pipe().unwrap();
        let fd = std::os::fd::OwnedFd::from(reader);
        assert!(Mapped::open(&File::from(fd), Path::new("pipe")).is_none());
    }
}
