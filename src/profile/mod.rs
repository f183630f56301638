//! profile: what llmperf knows about the profilers, and nothing else: their
//! command lines (`nsys profile`, `nsys export`/`stats`, `ncu`, `ncu --import`),
//! version and flag checks, where their applications run, and what their logs
//! say. Nothing here spawns a process except the version probe (tools.rs);
//! the stages that run them are in `pipeline/`.
pub mod ncu;
pub(crate) mod nsys;
pub(crate) mod tools;
