//! Report models rendered for people: Markdown (and text) exporters.
pub mod ncu_regions;
