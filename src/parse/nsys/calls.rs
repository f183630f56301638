//! parse::nsys::calls: the host's calls that wait for the GPU, as the
//! ingestion's launch reader meets them in the runtime table and hands them
//! on ([`CallTap`]) to the time breakdown (`parse::nsys::activity`), so that
//! the table is read once. Reads no table itself but StringIds.
use rusqlite::Connection;

/// Runtime and driver API functions that return only when the GPU has done
/// the work they wait for: synchronizations and the copies that are not
/// `Async` (nsys appends the version, `cudaStreamSynchronize_v3020`). Not
/// `cudaMemset`: CUDA's "API synchronization behavior" has the synchronous
/// memsets asynchronous with respect to the host (unless the target is
/// pinned host memory or managed memory), so its call waits for nothing.
pub const BLOCKING: &[&str] = &[
    "cudaDeviceSynchronize",
    "cudaStreamSynchronize",
    "cudaEventSynchronize",
    "cudaThreadSynchronize",
    "cudaMemcpy",
    "cudaMemcpy2D",
    "cudaMemcpy3D",
    "cudaMemcpyToSymbol",
    "cudaMemcpyFromSymbol",
    "cuCtxSynchronize",
    "cuStreamSynchronize",
    "cuEventSynchronize",
    "cuMemcpyDtoH",
    "cuMemcpyHtoD",
    "cuMemcpyDtoD",
    "cuMemcpy",
];

/// Whether a runtime function name (`cudaStreamSynchronize_v3020`) waits for the GPU.
pub(crate) fn is_blocking(function: &str) -> bool {
    BLOCKING.contains(&base_name(function))
}

/// A runtime function's name without nsys's version suffix and the
/// per-thread stream suffixes (`cudaMemcpy_ptds_v7000` → `cudaMemcpy`).
pub(crate) fn base_name(function: &str) -> &str {
    let base =
        function
            .split_once("_v")
            .map_or(function, |(b, v)| if v.chars().all(|c| c.is_ascii_digit()) { b } else { function });
    base.strip_suffix("_ptsz").or_else(|| base.strip_suffix("_ptds")).unwrap_or(base)
}

/// The ids (StringIds, which the caller has checked is there) of the
/// functions that block ([`is_blocking`]).
pub(crate) fn blocking_ids(conn: &Connection) -> Result<Vec<i64>, rusqlite::Error> {
    let mut stmt =
        conn.prepare("SELECT id, value FROM StringIds WHERE value LIKE 'cu%Synchronize%' OR value LIKE 'cu%Memcpy%'")?;
    let mut rows = stmt.query([])?;
    let mut ids = Vec::new();
    while let Some(r) = rows.next()? {
        let (id, name): (i64, String) = (r.get(0)?, r.get(1)?);
        if is_blocking(&name) {
            ids.push(id);
        }
    }
    Ok(ids)
}

/// A blocking call: (process, start, end, its function's StringIds id).
pub(crate) type Call = (i64, i64, i64, i64);

/// What the launch reader says of the blocking calls ([`CallTap`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum FedCalls {
    /// Whether they will come: the launch reader reads the runtime table
    /// whole, row by row (else it has SQLite join, or reads none).
    Coming(bool),
    /// Blocking calls in start order; every blocking call that starts
    /// before `upto` has come (`i64::MAX`: all).
    Calls(Vec<Call>, i64),
    /// The runtime rows were not in start order (or a blocking call's start
    /// or end was not an integer): no more come, the reader reads them itself.
    Stopped,
}

/// Where the ingestion's launch reader, reading every row of the runtime
/// table for the launch calls, hands on the blocking calls ([`BLOCKING`]) it
/// meets: the time breakdown's, so that the table is read once.
pub(crate) trait CallTap {
    /// What [`FedCalls`] says, sent on.
    fn tell(&mut self, what: FedCalls);
}

/// The launch reader's side of a [`CallTap`]: the blocking calls of the runtime
/// rows as they are read, in batches, each with how far the rows have come.
pub(crate) struct CallBatches<'t> {
    tap: &'t mut dyn CallTap,
    /// The names that block (StringIds ids).
    blocking: Vec<i64>,
    batch: Vec<Call>,
    /// The start of the last row read.
    last: i64,
    rows: usize,
    stopped: bool,
}

/// Runtime rows between two batches of blocking calls.
const CALL_ROWS_PER_BATCH: usize = 4096;

impl<'t> CallBatches<'t> {
    /// `blocking`: the names that block ([`NsysDb::blocking_ids`]).
    pub(crate) fn new(tap: &'t mut dyn CallTap, blocking: Vec<i64>) -> Self {
        tap.tell(FedCalls::Coming(true));
        CallBatches { tap, blocking, batch: Vec::new(), last: i64::MIN, rows: 0, stopped: false }
    }
    /// Whether a runtime row without a correlation id is read: a call to a
    /// blocking function (`name`, its StringIds id, where it is an integer).
    #[inline]
    pub(crate) fn wants(&self, name: Option<i64>) -> bool {
        name.is_some_and(|n| self.blocking.contains(&n))
    }

    /// One runtime row: its start, its name's id (read unchecked: see
    /// [`Rows::raw`]), and, asked only for a blocking one, its process,
    /// start and end as integers (None where one is not).
    #[inline]
    pub(crate) fn row(&mut self, start: i64, name: i64, call: impl FnOnce() -> Option<(i64, i64, i64)>) {
        if self.stopped {
            return;
        }
        if start < self.last {
            return self.stop();
        }
        self.last = start;
        if self.blocking.contains(&name) {
            match call() {
                Some((pid, start, end)) => self.batch.push((pid, start, end, name)),
                None => return self.stop(),
            }
        }
        self.rows += 1;
        if self.rows % CALL_ROWS_PER_BATCH == 0 {
            // Every call starting before this row's start has been read.
            let batch = std::mem::take(&mut self.batch);
            self.tap.tell(FedCalls::Calls(batch, start));
        }
    }

    fn stop(&mut self) {
        self.stopped = true;
        self.batch = Vec::new();
        self.tap.tell(FedCalls::Stopped);
    }

    /// Every row has been read.
    pub(crate) fn all_read(mut self) {
        if !self.stopped {
            let batch = std::mem::take(&mut self.batch);
            self.tap.tell(FedCalls::Calls(batch, i64::MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    impl CallTap for Vec<FedCalls> {
        fn tell(&mut self, what: FedCalls) {
            self.push(what);
        }
    }

    /// The launch reader's side: blocking calls only, each batch saying how
    /// far the rows came; rows out of start order, or a blocking call whose
    /// values are not integers, stop it.
    #[test]
    fn call_batches_say_how_far_the_rows_came_and_stop_where_they_do_not_hold() {
        let rows = CALL_ROWS_PER_BATCH as i64;
        let mut told = Vec::new();
        let mut b = CallBatches::new(&mut told, vec![7]);
        for start in 0..rows + 2 {
            let name = if start % 1000 == 0 { 7 } else { 3 };
            b.row(start, name, || Some((1, start, start + 5)));
        }
        b.all_read();
        let first: Vec<_> = (0..rows).step_by(1000).map(|t| (1, t, t + 5, 7)).collect();
        assert_eq!(
            told,
            [FedCalls::Coming(true), FedCalls::Calls(first, rows - 1), FedCalls::Calls(Vec::new(), i64::MAX),]
        );

        let mut told = Vec::new();
        let mut b = CallBatches::new(&mut told, vec![7]);
        b.row(10, 7, || Some((1, 10, 12)));
        b.row(9, 3, || None);
        b.row(11, 7, || Some((1, 11, 12)));
        b.all_read();
        assert_eq!(told, [FedCalls::Coming(true), FedCalls::Stopped]);

        let mut told = Vec::new();
        let mut b = CallBatches::new(&mut told, vec![7]);
        b.row(10, 3, || None);
        b.row(11, 7, || None);
        b.all_read();
        assert_eq!(told, [FedCalls::Coming(true), FedCalls::Stopped]);
    }

    #[test]
    fn blocking_functions_are_known_with_their_version_suffix() {
        for f in ["cudaStreamSynchronize_v3020", "cudaDeviceSynchronize", "cudaMemcpy_v3020", "cuCtxSynchronize"] {
            assert!(is_blocking(f), "{f}");
        }
        for f in [
            "cudaMemcpyAsync_v3020",
            "cudaLaunchKernel_v7000",
            "cudaStreamWaitEvent_v3020",
            "cudaMemsetAsync",
            "cudaMemset_v3020",
        ] {
            assert!(!is_blocking(f), "{f}");
        }
    }
}
