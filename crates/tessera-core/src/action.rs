//! Actions: what a policy asks its driver to do.

use crate::ids::{GpuId, MemRequestId, TaskId, TenantId};
use crate::model::Placement;
use crate::units::PerMille;
use serde::{Deserialize, Serialize};

/// Why a policy ended a task without running it to completion.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskEndReason {
    /// Its tenant left before the task ran.
    TenantLeft,
    /// The client asked for it.
    CancelledByClient,
    /// It named a tenant the policy does not know.
    UnknownTenant,
    /// It can never run here (e.g. needs more memory than any GPU has).
    Unschedulable(String),
    /// The driver is shutting down.
    Shutdown,
    /// It waited so long it could no longer meet its latency target, and was dropped
    /// (gpu-lets' serving drops such requests and counts them as violations).
    Dropped,
}

/// Why memory was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MemoryDenial {
    /// More than the GPU's total memory: can never be granted.
    ExceedsCapacity,
    /// Not available now and the request would not wait.
    NotAvailableNow,
    /// It waited for its whole timeout.
    TimedOut,
    /// Its tenant left while it waited.
    TenantLeft,
}

/// Something a policy wants done. Drivers execute actions in the order given; one
/// they cannot carry out they answer with [`crate::Event::ActionRefused`], never by
/// dropping it. `#[non_exhaustive]`, so that every driver has that refusal path for
/// actions added later.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "action")]
#[non_exhaustive]
pub enum Action {
    /// Run `task` at `placement`. A task is dispatched at most once at a time; a GPU
    /// or partition that already runs tasks co-runs this one only if the driver shares
    /// GPUs (an exclusive driver treats it as a policy error).
    Dispatch {
        /// The task.
        task: TaskId,
        /// Where.
        placement: Placement,
    },
    /// Run several queued requests of one model as one execution at `placement`
    /// (gpu-lets' and Nexus's batching); each ends with its own `TaskFinished`.
    DispatchBatch {
        /// The tasks, in the order their inputs are batched.
        tasks: Vec<TaskId>,
        /// Where.
        placement: Placement,
    },
    /// Ask the holder of a running quantum (a launch-gate slice) to end it now, at its
    /// next kernel boundary; answered by its `TaskFinished`, charged what it held
    /// (Pegasus's coscheduling preempts the GPU this way). A driver whose quanta cannot
    /// be ended early refuses it.
    EndQuantum {
        /// The running task.
        task: TaskId,
    },
    /// End a task that never ran (or was killed) without completing it.
    EndTask {
        /// The task.
        task: TaskId,
        /// Why: a cancellation or a failure.
        reason: TaskEndReason,
    },
    /// Reset a GPU: kill whatever runs on it; it is unavailable until
    /// [`crate::Event::GpuResetDone`]. The policy has already re-queued `killed`.
    ResetGpu {
        /// The GPU.
        gpu: GpuId,
        /// The tasks that were running and are now killed (all of them, oldest first).
        killed: Vec<TaskId>,
    },
    /// Grant a memory request.
    GrantMemory {
        /// The request.
        request: MemRequestId,
    },
    /// Refuse a memory request.
    DenyMemory {
        /// The request.
        request: MemRequestId,
        /// Why.
        reason: MemoryDenial,
    },
    /// Move a tenant's context to another GPU (DCUDA's live migration).
    Migrate {
        /// The tenant.
        tenant: TenantId,
        /// From.
        from: GpuId,
        /// To.
        to: GpuId,
    },
    /// Change a GPU's spatial partitions (gpu-lets); answered by
    /// [`crate::Event::RepartitionDone`].
    Repartition {
        /// The GPU.
        gpu: GpuId,
        /// The shares of the new partitions, in order; they sum to at most 1000.
        shares: Vec<PerMille>,
    },
    /// Put a GPU into (or out of) a low-power state (DCUDA's energy compaction).
    SetGpuPowered {
        /// The GPU.
        gpu: GpuId,
        /// False to power down an idle GPU.
        powered: bool,
    },
    /// Raise (or restore) the priority of a tenant's streams, for the kernels it launches
    /// from now on (DCUDA §3.3: within a fairness group, low-demand applications get
    /// higher priority, set by re-creating their streams with
    /// `cuStreamCreateWithPriority`). Two levels, as a 1080 Ti's stream priority range
    /// (0 and -1) offers: a raised stream's blocks are dispatched before those of every
    /// stream not raised. A driver that cannot set stream priorities refuses it.
    SetStreamPriority {
        /// The tenant.
        tenant: TenantId,
        /// True to raise it, false to restore its own priority.
        raised: bool,
    },
    /// The policy's split of GPUs into pools changed (Flexy): informational, for
    /// status displays and metrics. The GPUs named are the user-facing pool, in
    /// ascending order, each once; every other GPU serves batch work (not listed, so
    /// that a change costs the pool's size, not the node's).
    SetPools {
        /// GPUs reserved for user-facing tasks.
        user_facing: Vec<GpuId>,
    },
}
