//! aggregate: parsed rows → the region models the reports render. Pure: no
//! file is read or written here.
//! - [`nsys`]: the NVTX region tree of an nsys capture, kernels attributed, top kernels;
//! - [`ncu`]: ncu results → per-region reports (scopes, roll-ups), a [`crate::parse::ncu::LaunchSink`];
//! - [`roofline`]: per-kernel FLOP, byte and time sums for `roofline.json`;
//! - [`select`]: which kernels a report keeps.
pub mod ncu;
pub mod nsys;
pub(crate) mod ranks;
pub mod roofline;
pub(crate) mod runs;
pub(crate) mod select;

/// For `skip_serializing_if`: a count or a time of 0 is left out of a report.
pub(crate) fn is_zero<T: Default + PartialEq>(n: &T) -> bool {
    *n == T::default()
}
