//! Readers of profiler outputs, one per tool and format.
pub mod nsys_sqlite;
