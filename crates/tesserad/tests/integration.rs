//! The integration tests of this crate, one module per file, in one test binary:
//! the modules' tests run side by side on the test threads (most of them wait on
//! processes they started), and the suite links one binary instead of one per file.

mod common;

mod busy_host;
mod config_reference;
mod cuda_fake;
mod daemon;
mod dcuda;
mod events;
mod inference;
mod ledger_held;
mod memory_desk;
mod node;
mod pods;
mod slurm_jobs;
