//! parse: readers of profiler outputs, one per tool and format. A reader
//! turns bytes into rows and names nothing that consumes them.
//! - [`input`]: a user's file checked before any reader sees it;
//! - [`ncu`]: Nsight Compute CSV exports (details and raw pages) into a [`ncu::LaunchSink`];
//! - [`nsys_sqlite`]: an Nsight Systems SQLite export (ranges, kernels, launch calls);
//! - [`mapped`]: a file mapped read-only for the readers that scan big inputs on every core;
//! - [`launch_join`]: kernels joined to their launch calls in one streaming pass;
//! - [`nsys_csv`]: an `nsys stats` kernel summary CSV;
//! - [`sqlite_rows`]: a bare SQLite statement for the hot loops of those readers;
//! - [`batched`]: rows handed from a reader thread to their consumer in batches.
pub mod batched;
pub mod input;
pub mod launch_join;
pub mod mapped;
pub mod ncu;
pub mod nsys_csv;
pub mod nsys_sqlite;
pub mod sqlite_rows;
