//! Events: what a driver tells a policy has happened.
//!
//! The set covers all five papers, so that adding a policy never reshapes the
//! interface: task life cycle (every paper), measured task times (Flexy's estimator,
//! FairGV's accounting), memory requests (schedGPU), demand samples and migration
//! completion (DCUDA), repartition completion (gpu-lets), resets (Flexy).

use crate::ids::{GpuId, MemRequestId, TaskId, TenantId};
use crate::model::{Placement, TaskSpec, TenantSpec};
use crate::units::{Bytes, Nanos, PerMille};
use serde::{Deserialize, Serialize};

/// How a memory request wants to wait when memory is not available now (schedGPU §4).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryWait {
    /// Answer at once: grant or deny.
    NoWait,
    /// Queue, and deny if not granted within this long.
    Timeout(Nanos),
    /// Queue until granted.
    Forever,
}

/// Why a task failed on its executor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ExecutionFailure {
    /// Human-readable reason from the executor.
    pub reason: String,
}

/// Something that happened, reported to a policy together with the current time.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "event")]
pub enum Event {
    /// A tenant registered and may now submit tasks.
    TenantRegistered(TenantSpec),
    /// A tenant left (finished, disconnected or died). The policy must cancel its
    /// queued tasks; its running tasks finish and are reported as usual.
    TenantLeft {
        /// The tenant.
        tenant: TenantId,
    },
    /// A task was submitted to its tenant's queue.
    TaskSubmitted(TaskSpec),
    /// The client withdrew a task. If it is still queued the policy cancels it.
    TaskCancelRequested {
        /// The task.
        task: TaskId,
    },
    /// A dispatched task stopped running.
    TaskFinished {
        /// The task.
        task: TaskId,
        /// Where it ran.
        placement: Placement,
        /// How long it ran, measured by the driver (the accounting signal).
        ran_for: Nanos,
        /// `Ok` when it completed, `Err` when its executor failed it.
        result: Result<(), ExecutionFailure>,
    },
    /// A GPU finished resetting and is available again.
    GpuResetDone {
        /// The GPU.
        gpu: GpuId,
    },
    /// A tenant asks for GPU memory before allocating it (schedGPU's pre-allocation).
    MemoryRequested {
        /// Request id, answered by grant or deny.
        request: MemRequestId,
        /// The tenant.
        tenant: TenantId,
        /// The GPU.
        gpu: GpuId,
        /// How much.
        bytes: Bytes,
        /// How the request waits when memory is short.
        wait: MemoryWait,
    },
    /// A tenant returned memory (schedGPU's post-free).
    MemoryFreed {
        /// The tenant.
        tenant: TenantId,
        /// The GPU.
        gpu: GpuId,
        /// How much.
        bytes: Bytes,
    },
    /// A monitor sampled a tenant's compute demand on its GPU (DCUDA's monitor).
    DemandSampled {
        /// The tenant.
        tenant: TenantId,
        /// The GPU it runs on.
        gpu: GpuId,
        /// The share of the GPU it would use if alone.
        demand: PerMille,
    },
    /// A migration the policy asked for completed.
    MigrationDone {
        /// The tenant that moved.
        tenant: TenantId,
        /// The GPU it now runs on.
        to: GpuId,
    },
    /// A repartition the policy asked for completed; the new partitions are usable.
    RepartitionDone {
        /// The GPU.
        gpu: GpuId,
    },
    /// Periodic wake-up, at the interval the policy asked for.
    Tick,
}
