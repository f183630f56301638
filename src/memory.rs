//! The memory an ingestion may hold: a counting allocator (installed by the
//! binary) and a budget the readers check as they go.
//!
//! Regions, kernels and samples are bounded by the number of distinct names
//! and by the nesting bound, not by the rows; but names come from the
//! profiled program, and a program that gives every call its own NVTX name
//! makes a region per call. Whatever the input, an ingestion stops with an
//! error naming the budget (`runner.run.memory_budget_mib`) rather than
//! growing until the machine kills it. The counter sees what llmperf
//! allocates, not SQLite's page cache (a few MiB, SQLite's own allocator).
use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::error::{Error, ErrorKind};

/// Bytes allocated and not yet freed.
static IN_USE: AtomicUsize = AtomicUsize::new(0);
/// The budget in bytes; the default is `runner.run.memory_budget_mib`'s.
static BUDGET: AtomicUsize = AtomicUsize::new(DEFAULT_MIB << 20);

pub(crate) const DEFAULT_MIB: usize = 1024;

/// The system allocator, counting. Install it with
/// `#[global_allocator] static A: llmperf::memory::Counting = llmperf::memory::Counting;`.
pub struct Counting;

// SAFETY: every call goes to the system allocator with the same arguments;
// the counter is only arithmetic beside it.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: the caller's contract, passed on.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            IN_USE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            IN_USE.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) };
        IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: as above.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            IN_USE.fetch_add(new_size, Ordering::Relaxed);
            IN_USE.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }
}

/// The readers' signal that the budget is spent (carried inside a SQLite
/// error out of a row loop, and turned into [`exceeded`]).
#[derive(Debug)]
pub(crate) struct OverBudget;

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "past the memory budget")
    }
}

impl std::error::Error for OverBudget {}

/// Set the budget (MiB; at least 1).
pub(crate) fn set_budget_mib(mib: u64) {
    BUDGET.store((mib.max(1) as usize).saturating_mul(1 << 20), Ordering::Relaxed);
}

/// Whether llmperf holds more than its budget (always false where the
/// counting allocator is not installed: nothing is counted).
#[inline]
pub(crate) fn over_budget() -> bool {
    IN_USE.load(Ordering::Relaxed) > BUDGET.load(Ordering::Relaxed)
}

/// Bytes held now (0 where the counting allocator is not installed).
pub(crate) fn in_use() -> usize {
    IN_USE.load(Ordering::Relaxed)
}

/// `Err` once past the budget: what an ingestion checks every so many rows.
pub(crate) fn check(reading: &std::path::Path) -> Result<(), Error> {
    if over_budget() {
        return Err(exceeded(reading));
    }
    Ok(())
}

/// The error of an ingestion past its budget, naming the file it read.
pub(crate) fn exceeded(reading: &std::path::Path) -> Error {
    let (used, budget) = (IN_USE.load(Ordering::Relaxed) >> 20, BUDGET.load(Ordering::Relaxed) >> 20);
    Error::new(
        ErrorKind::Unparseable,
        format!("{}: reading it took {used} MiB, past the memory budget of {budget} MiB (runner.run.memory_budget_mib); stopped", reading.display()),
    )
    .with_hint("memory grows with the distinct NVTX range and kernel names (a name per call makes a region per call: give calls one name and the step in a payload), not with rows; if the names are right, raise runner.run.memory_budget_mib=MIB")
}
