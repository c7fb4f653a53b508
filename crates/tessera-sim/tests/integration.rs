//! The integration tests of this crate, one module per file, in one test binary:
//! the modules' tests run side by side on the test threads (most of them wait on
//! processes they started), and the suite links one binary instead of one per file.

mod blocks;
mod dcuda;
mod fairgv;
mod flexy_packing;
mod golden;
mod invariants;
mod node;
mod node_experiment;
mod node_resets;
mod node_ticks;
mod shared;
