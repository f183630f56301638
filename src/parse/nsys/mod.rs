//! parse::nsys: an Nsight Systems SQLite export, read the way the ncu readers
//! are: readers feed sinks, and name nothing that consumes them.
//! - [`sqlite`]: the database: its tables, strings, ranges, kernels, launch calls;
//! - [`launch_join`]: kernels joined to their launch calls in one streaming pass;
//! - [`sqlite_rows`]: a bare SQLite statement for the hot loops of those readers;
//! - [`pages`]: their plain scans read from the tables' pages, SQLite's fallback kept;
//! - [`batched`]: rows handed from a reader thread to their consumer in batches;
//! - [`ingest`]: the pass itself: two reader threads, each on its own connection,
//!   a [`ingest::Timeline`] fed ranges and launches in time order, a
//!   [`ingest::KernelSink`] fed every kernel, and the read order's retry;
//!   with the time breakdown, the driver of its feed too;
//! - [`beside`]: the senders of that feed, each pass's, on the readers' threads;
//! - [`activity`]: the GPU's activity (kernels, copies, memsets) per device in
//!   time order, and the host's blocking calls, for the time breakdown;
//! - [`calls`]: those blocking calls as the launch reader meets them.
pub mod activity;
pub(crate) mod batched;
pub(crate) mod beside;
pub mod calls;
pub mod ingest;
pub mod launch_join;
pub(crate) mod pages;
pub mod sqlite;
pub(crate) mod sqlite_rows;
