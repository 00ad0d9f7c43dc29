//! sprat's measurement tools: what `sprat bench`, `sprat model` and `sprat gen` run.
//!
//! - [`bench`]: each subsystem alone (read, network memory to memory, write) and end to end,
//!   and the overhead regression over several numbers of files.
//! - [`model`]: `T = N * t0 + B / R` fitted to those runs, the bottleneck stage and the number
//!   of transfer nodes a link needs.
//! - [`plan`]: a data set split into shards of equal predicted time, for copies spread over
//!   several processes or hosts (`sprat plan`, `sprat cp --plan`).
//! - [`dataset`]: reproducible data sets (fixed sizes, the published GridFTP histogram,
//!   log-uniform), for tests and benchmarks.
//!
//! Not transfer code: the engine never depends on this crate; it uses the engine like any
//! client does.
#![forbid(unsafe_code)]

pub mod bench;
pub mod dataset;
pub mod model;
pub mod plan;
