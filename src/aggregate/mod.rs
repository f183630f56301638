//! aggregate: parsed rows → the region models the reports render. Pure: no
//! file is read or written here.
//! - [`nsys`]: the NVTX region tree of an nsys capture, kernels attributed, top kernels;
//! - [`ncu`]: ncu results → per-region reports (scopes, roll-ups), a [`crate::parse::ncu::LaunchSink`];
//! - [`roofline`]: per-kernel FLOP, byte and time sums for `roofline.json`;
//! - [`categories`]: kernel categories from kernel names (a table in conf/analysis/);
//! - [`rules`]: ncu's own advice (rule results) by kernel;
//! - [`select`]: which kernels a report keeps;
//! - [`skip`]: what the report models leave out when they are written.
pub mod categories;
pub mod ncu;
pub mod nsys;
pub(crate) mod ranks;
pub mod roofline;
pub(crate) mod rules;
pub(crate) mod runs;
pub(crate) mod select;
pub(crate) mod skip;
pub(crate) mod steps;
