//! llmperf: profile deep-learning and LLM inference with Nsight Systems and
//! Nsight Compute, per NVTX region.
//!
//! One direction of data, each stage in its folder or file:
//!
//! ```text
//! cli ─► config ─► plan ─► pipeline ──► profile + process ─► run_dir ─► parse ─► aggregate ─► report
//!  args   conf/    what     the stages   nsys/ncu argv,      raw files,  CSV,     region     model,
//!         layers   runs     in order     spawn and stop      manifest    SQLite   trees      md/json/html
//! ```
//!
//! `pipeline` runs the stages in that order; raw outputs are in the run
//! directory before anything parses them, and `llmperf report` starts again at
//! `parse`. Imports are layered: a module names only modules on floors below
//! its own (app; schemas, doctor; pipeline, compare; export; report; aggregate; parse; plan,
//! provenance; profile; manifest, plugin, cli; process; run_dir, timings,
//! config, signals; stats, flops, regions, kernel_names, markdown, error, units), with no cycle
//! (tests/layout.rs checks both).
//!
//! - [`cli`], [`app`]: clap types, and each command turned into a library call;
//! - [`config`]: the embedded `conf/` tree, YAML layering, override grammar;
//! - [`plan`]: the run's stages and application, the ncu passes (pure);
//! - [`pipeline`]: `profile`, `import nsys`, `import ncu`, `report`, as lists of stages;
//! - [`profile`]: nsys and ncu command lines, version and flag checks, log diagnoses;
//! - [`process`], [`signals`]: the one place that spawns children, and how a run stops;
//! - [`run_dir`], [`manifest`], [`provenance`]: every file name of a run directory,
//!   atomic writes, what each stage did, where the run ran;
//! - [`parse`]: readers of nsys SQLite/CSV and ncu CSV exports (ncu rows go to a sink);
//! - [`aggregate`]: rows → region trees, kernel selection, roofline sums (pure);
//! - [`report`]: the typed report model and its renderers, and the one writer of reports;
//! - [`compare`]: `llmperf diff` and `check`: two runs' samples, verdicts, budgets;
//! - [`export`]: `llmperf export perfetto`: a capture as Chrome trace events (Kineto's dialect);
//! - [`schemas`]: the JSON Schemas of every artifact, and `llmperf validate`;
//! - [`kernel_names`]: one kernel's identity across nsys's and ncu's spellings;
//! - [`markdown`]: names the profiled program chose, made safe for Markdown and terminals;
//! - [`doctor`], [`plugin`]: what works here; the dlopen'ed built-in workloads
//!   (`libllmperf_torch.so`, the `torch/` crate), which share [`regions`],
//!   [`timings`], [`stats`] and [`flops`] with the reports.
//!
//! Modules are public where `torch/`, `tests/` or `fuzz/` use them.
pub mod aggregate;
pub mod app;
pub mod cli;
pub(crate) mod compare;
pub mod config;
pub(crate) mod doctor;
pub mod error;
pub(crate) mod export;
pub mod flops;
pub(crate) mod kernel_names;
pub(crate) mod load;
pub(crate) mod manifest;
pub mod markdown;
pub mod memory;
pub mod parse;
pub(crate) mod pipeline;
pub mod plan;
pub mod plugin;
pub(crate) mod process;
pub mod profile;
pub(crate) mod provenance;
pub mod regions;
pub(crate) mod report;
pub mod run_dir;
pub mod schemas;
pub(crate) mod signals;
pub mod stats;
#[cfg(test)]
mod testdata;
pub mod timings;
pub mod units;
