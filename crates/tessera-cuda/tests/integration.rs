//! The integration tests of this crate, one module per file, in one test binary:
//! the modules' tests run side by side on the test threads (most of them wait on
//! processes they started), and the suite links one binary instead of one per file.

mod common;

mod cuda13;
mod fair_gate;
mod fatbin;
mod getproc;
mod interposer;
mod memory_semantics;
mod nvml;
mod per_thread_stream;
mod shared_node;
