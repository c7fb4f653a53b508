//! One module per policy family, each cited to the paper section it implements.
//!
//! - [`round_robin`]: Flexy §II-A baseline.
//! - [`priority`]: Flexy §II-B, with minimum reservation and reset (§II-D).
//! - [`flexy`]: Flexy §II-C, Algorithm 1, with minimum reservation and reset.
//! - [`pid`]: Flexy with K adapted by a PID controller (Flexy §II-C2, future work).
//! - [`memsafe`]: schedGPU's memory admission with four notification policies.
//! - [`least_loaded`]: co-location on the least-loaded GPU (DCUDA §5's baseline).
//! - [`dcuda`]: DCUDA's placement, monitor, balancing, compaction and fair slicing.
//! - [`credit`]: FairGV's baselines (Xen's credit scheduler, Pegasus's coscheduling
//!   condition) and its interactivity classification.
//! - [`fair`]: FairGV's fair queuing (start-time fair queuing by weight).
//! - [`gpulets`]: gpu-lets' elastic partitioning, its sizing steps so far (§4.3).
//! - [`node`]: the composed node policy (Flexy's pool, fair queuing, DCUDA's
//!   balancer, memory-safe homes) for a node with every kind of tenant.

pub mod credit;
pub mod dcuda;
pub mod fair;
pub mod flexy;
pub mod gpulets;
pub mod least_loaded;
pub mod memsafe;
pub mod node;
pub mod pid;
pub mod priority;
mod queued;
pub mod round_robin;

use crate::board::Board;
use crate::ids::GpuId;
use crate::units::Nanos;

/// GPUs running a batch task that a reset may preempt, longest expected remaining
/// time first. Flexy §II-C3: resetting only pays when the batch task would hold the
/// GPU for longer than the reset itself, so a task expected to end within `latency`
/// is left alone. A task whose kernel has no history yet counts as long.
pub(crate) fn resettable_batch_gpus(
    board: &Board,
    now: Nanos,
    latency: Nanos,
    among: impl Fn(GpuId) -> bool,
) -> Vec<GpuId> {
    let mut candidates: Vec<(Nanos, GpuId)> = board
        .gpu_ids()
        .filter(|g| among(*g))
        .filter_map(|g| {
            // exclusive boards: the one task; co-located: the batch task ending last
            let batch: Vec<_> = board.state(g).running().iter().collect();
            if batch.is_empty() || batch.iter().any(|r| r.class.is_user_facing()) {
                return None;
            }
            let remaining = batch
                .iter()
                .map(|r| board.predicted_end(r).map_or(Nanos::MAX, |end| end - now))
                .max()?;
            (remaining > latency).then_some((remaining, g))
        })
        .collect();
    candidates.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
    candidates.into_iter().map(|(_, g)| g).collect()
}

/// GPUs among `among` that can serve user-facing work without a reset: idle,
/// already resetting, or running a user-facing task.
pub(crate) fn user_facing_capable(board: &Board, among: impl Fn(GpuId) -> bool) -> usize {
    board
        .gpu_ids()
        .filter(|g| among(*g))
        .filter(|g| {
            let state = board.state(*g);
            state.is_powered()
                && (state.resetting_until().is_some()
                    || state.running().iter().all(|r| r.class.is_user_facing()))
        })
        .count()
}
