//! gpu-lets' elastic partitioning (Choi et al., "Serving Heterogeneous Machine Learning
//! Models on Multi-GPU Servers with Spatio-Temporal Sharing", §4.3, Algorithm 1): the
//! sizing steps, as pure functions of a model's latency profile L(batch, partition).
//!
//! Built so far: the largest batch meeting an SLO (line 27), the rate a gpu-let of a
//! size can serve, MINREQUIREDPARTITION (line 10), MAXEFFICIENTPARTITION (line 9: the
//! knee of rate against partition size, by maximum curvature), and the whole of
//! ELASTICPARTITIONING with FINDBESTFIT (best fit over free gpu-lets ascending, split
//! of a whole GPU into ideal + remainder, the SLO check with interference, merge into
//! an allocated gpu-let by temporal sharing with the split reverted). The batch rule is
//! the authors' (their public scheduler, casys-kaist/glet): [`batch_meets_slo`], with
//! latencies scheduled at 1.1 times the profile's and every batch 1-32; interference is
//! checked both ways, and lowers a neighbour's batch before a gpu-let is refused.
//! Also: squishy bin packing (Nexus, the baseline), [`GpuletServing`] (serving a fixed
//! schedule: partitions, duty-cycle batching), and rate tracking by EWMA with the
//! reschedule trigger ([`RateTracker`], [`needs_reschedule`]), and the ideal scheduler
//! ([`ideal`], a pruned search of every partitioning and assignment, and
//! [`ideal_gpulets`] to serve its answer), and guided self-tuning (GSLICE's, the other
//! baseline: [`guided_self_tuning`]). A policy that reschedules every period comes next.

mod batch;
mod ideal;
mod schedule;
mod serving;
#[cfg(test)]
mod tests;

pub use batch::*;
pub use ideal::*;
pub use schedule::*;
pub use serving::*;
