//! Test-only helpers for sprat's end-to-end tests.
//!
//! What is here: generators of source trees that exercise every kind of entry sprat must copy
//! faithfully ([`tree`]), a strict tree comparison that never follows symlinks ([`compare`]), a
//! fixture that runs the real `sprat serve` binary on loopback ([`server`]), a runner for `sprat`
//! client commands with a hard timeout ([`run`]), a small tmpfs mount for disk-full and read-only
//! tests ([`tmpfs`]), a private sshd on loopback for `HOST:PATH` copies ([`sshd`]), and a parser
//! for the `--json` report ([`report`]).
//!
//! What is not here: anything that knows sprat's internals. These helpers drive the binary from
//! the outside exactly as a user would, so the tests built on them hold for any implementation of
//! the documented command line. The binary's path is always passed in by the caller (an
//! integration test gets it from `env!("CARGO_BIN_EXE_sprat")`).
#![allow(clippy::unwrap_used)]

pub mod compare;
pub mod fusefs;
pub mod loopfs;
pub mod mitm;
pub mod relay;
pub mod report;
pub mod run;
pub mod server;
pub mod sshd;
mod sync;
pub mod tmpfs;
pub mod tree;

#[cfg(test)]
mod selftest;

pub use compare::{
    assert_trees_equal, assert_trees_equal_with, diff_snapshots, format_diffs,
    partial_copy_violations, snapshot, walk_tree, CompareOptions, Entry, EntryKind, TreeSnapshot,
};
pub use fusefs::FuseMirror;
pub use loopfs::LoopFs;
pub use relay::Relay;
pub use report::{parse_json_report, JsonReport};
pub use run::{
    assert_error_line, assert_no_panic, describe, run_sprat, run_sprat_timeout, spawn_sprat,
    spawn_sprat_stdout_closed, SpratChild, TimedOut, DEFAULT_TIMEOUT,
};
pub use server::{Server, ServerOptions, StartFailure, DEFAULT_TOKEN};
pub use sshd::Sshd;
pub use tmpfs::{MountedOn, Tmpfs};
pub use tree::{
    make_char_device, make_fidelity_tree, make_fifo, make_file, make_long_name_tree,
    make_many_files, make_special_mode_tree, random_bytes, set_mtime_nofollow, TreeStats,
    FIDELITY_BIG_FILE,
};
