//! Profiler command lines and the stages that run them.
pub mod ncu;
pub mod nsys;
