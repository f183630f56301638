//! Readers of profiler outputs, one per tool and format.
pub mod input;
pub mod ncu_csv;
pub mod ncu_fast;
pub mod ncu_raw;
pub mod nsys_csv;
pub mod nsys_sqlite;
