//! llmperf: profile deep-learning and LLM inference with Nsight Systems and
//! Nsight Compute, per NVTX region. See docs/internals.md for the data flow.
pub mod aggregate;
pub mod app;
pub mod cli;
pub mod config;
pub mod doctor;
pub mod error;
pub mod flops;
pub mod host;
pub mod libtorch;
pub mod manifest;
pub mod nsys_analysis;
pub mod orchestrate;
pub mod parse;
pub mod process;
pub mod profile;
pub mod provenance;
pub mod regions;
pub mod run_dir;
pub mod stats;
pub mod timings;
pub mod tools;
pub mod units;
#[cfg(feature = "torch")]
pub mod workload;
