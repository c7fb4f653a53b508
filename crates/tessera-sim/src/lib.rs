//! tessera's discrete-event simulator: a performance model of a multi-GPU server,
//! an engine that drives any core [`tessera_core::Policy`] through simulated time,
//! workload generators, metrics, and the experiments that reproduce each paper.
//!
//! Module map:
//! - [`perf`]: the performance model (shared with the daemon's emulated executor).
//! - [`workload`]: what the engine replays: jobs of tasks with their true costs.
//! - [`workloads`]: generators, one per paper.
//! - [`engine`]: the event loop over tasks; checks the core's invariants as it runs.
//! - [`programs`]: the event loop over programs (CPU work on a modelled CPU,
//!   asynchronous and synchronous GPU calls, memory allocation and release, sleeps):
//!   GPU quanta or memory handed out by a core policy (FairGV's and schedGPU's
//!   experiments).
//! - [`metrics`]: what a run measured.
//! - [`experiments`]: one module per paper, writing JSON, SVG and Markdown.
//! - [`plot`]: SVG figures.
#![forbid(unsafe_code)]

pub mod engine;
pub mod experiments;
mod gpu_meter;
pub mod metrics;
pub mod min_heap;
pub mod perf;
pub mod plot;
pub mod programs;
pub mod slot_model;
pub mod workload;
pub mod workloads;
pub mod world;

pub use engine::{SimError, Simulation};
pub use metrics::RunMetrics;
pub use perf::PerfModel;
pub use workload::{Job, Workload};
