//! The campaigns that rerun their own test binary as child writers (by
//! test name, `--exact <module>::<test>`, with the child's spec in an
//! environment variable), as one binary: each file is a module here
//! (`cargo test --test campaigns crash::` runs one of them).
//!
//! One binary for the five instead of one each: every test binary links
//! the crate's generic write path for both SQL stores again (about half a
//! CPU-minute each in CI's clean build). They share a process only as
//! parents; each child runs alone in a process of its own.

mod contention;
mod crash;
mod crash_forest;
mod crash_writer;
mod io_faults;
