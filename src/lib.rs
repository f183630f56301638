//! llmperf: profile deep-learning and LLM inference with Nsight Systems and
//! Nsight Compute, per NVTX region. See docs/internals.md for the data flow.
pub mod config;
pub mod error;
