//! parse: readers of profiler outputs, one per tool and format. A reader
//! turns bytes into rows and names nothing that consumes them.
//! - [`input`]: a user's file checked before any reader sees it;
//! - [`ncu`]: Nsight Compute CSV exports (details and raw pages) into a [`ncu::LaunchSink`];
//! - [`nsys`]: an Nsight Systems SQLite export (ranges, kernels, launch calls), read in one
//!   streaming pass into a [`nsys::ingest::Timeline`] and a [`nsys::ingest::KernelSink`];
//! - [`mapped`]: a file mapped read-only for the readers that scan big inputs on every core;
//! - [`nsys_csv`]: an `nsys stats` kernel summary CSV;
//! - [`torch`]: a PyTorch profiler (Kineto) chrome trace, streamed;
//! - [`spill`]: records sorted in bounded memory, for a reader whose input is out of order.
pub(crate) mod input;
pub(crate) mod json_frames;
pub(crate) mod mapped;
pub mod ncu;
pub mod nsys;
pub(crate) mod nsys_csv;
pub(crate) mod spill;
pub(crate) mod torch;
