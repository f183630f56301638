//! Every integration test in one binary, one module per file (ripgrep's
//! `tests/tests.rs`): the library and its dependencies are linked once, not
//! once per file, and the nsys lock (`common::NSYS`) covers every test that
//! starts nsys. One file's tests: `cargo test --release --test tests compare::`.
#[macro_use]
mod common;
mod annotate;
mod bad_inputs;
mod bounds;
mod breakdown;
mod cli;
mod compare;
mod device_findings;
mod fifo_inputs;
mod findings;
mod gpu_fixtures;
mod hf;
mod html;
mod launchers;
mod layout;
mod link;
mod narrative;
mod ncu_bad_inputs;
mod ncu_csv;
mod ncu_fast;
mod ncu_import;
mod ncu_live;
mod ncu_matching;
mod nsys_live;
mod nsys_regions;
mod null_inputs;
mod perfetto;
mod pytorch_names;
mod ranks;
mod readme;
mod region_join;
mod reports;
mod serve;
mod signals;
mod snapshots;
mod specs;
mod torch;
mod user_mfu;
mod weak_words;
mod workflows;
mod workload;
