//! The performance model of a shared GPU, used by the simulator and (in real time) by
//! the daemon's emulated executor. Pure: no clock, no I/O — time comes in as an
//! argument, in nanoseconds, and data files come in as strings.
//!
//! Module map:
//! - [`occupancy`]: how much of a GPU a kernel would occupy alone (its demand), by the
//!   occupancy arithmetic of NVIDIA's occupancy calculator (DCUDA §3.2).
//! - [`sharing`]: the work running on one GPU — exclusive, co-running with processor
//!   sharing (all slow in proportion once their summed demand passes capacity), or
//!   time-sliced contexts — with finish times kept by a virtual clock per GPU.
//! - [`exclusive`]: its one-piece case alone, for exclusive runs (the same arithmetic,
//!   without the general model's cost per task).
//! - [`concurrent`]: kernels at their own rates — thread blocks placed on SMs by a
//!   greedy in-order dispatcher, contexts co-running (MPS) or time-sliced with a switch
//!   cost, and a named contention parameter.
//! - [`partition`]: spatial partitions (MPS shares): latency profiles L(batch, share)
//!   and the linear interference model of gpu-lets §4.4, both loaded from data.
//! - [`migration`]: what moving a tenant's context between GPUs costs.
//! - [`power`]: power states and energy.
//! - [`rounding`]: non-negative times rounded to whole numbers without a library call.
//!
//! Status: the simulator's task engine runs its exclusive GPUs on
//! [`exclusive::ExclusiveGpu`] and its shared ones on [`sharing::SharedGpu`], the
//! daemon's emulated executor in processor-sharing mode; the core's vocabulary and
//! shared dispatch do not use the rest yet (issue 10's item 2).
#![forbid(unsafe_code)]

pub mod concurrent;
pub mod exclusive;
pub mod migration;
pub mod occupancy;
pub mod partition;
pub mod power;
pub mod rounding;
pub mod sharing;
