//! Events: what a driver tells a policy has happened.
//!
//! The papers built so far use the task life cycle, measured task times (Flexy's
//! estimator), memory requests (schedGPU) and resets (Flexy). For the others the
//! vocabulary has: demand and memory samples, migration success or failure (DCUDA),
//! repartition success or failure (gpu-lets), power-state acknowledgements (DCUDA's
//! energy compaction), whether a task's time was measured or inferred (FairGV's
//! sampled accounting), and — on the action side — batched dispatch (gpu-lets).
//! The simulator's engine carries out batched dispatch, migrations, repartitions
//! and power changes and answers with the events here; demand and memory samples and
//! inferred times have no producer yet (the DCUDA and FairGV issues add them). A driver that cannot carry out an action tells the policy with
//! [`Event::ActionRefused`]; it never drops it silently. The enum is
//! `#[non_exhaustive]`: drivers must handle events they do not know.

use crate::ids::{GpuId, MemRequestId, TaskId, TenantId};

fn yes() -> bool {
    true
}
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
#[non_exhaustive]
pub enum Event {
    /// A tenant registered and may now submit tasks.
    TenantRegistered(TenantSpec),
    /// A tenant left (finished, disconnected or died). The policy must cancel its
    /// queued tasks; its running tasks finish and are reported as usual.
    TenantLeft {
        /// The tenant.
        tenant: TenantId,
    },
    /// A tenant's owner changed its weight (FairGV: weights changeable at run time).
    TenantWeightChanged {
        /// The tenant.
        tenant: TenantId,
        /// Its new weight (at least 1).
        weight: u32,
    },
    /// A tenant used GPU time beyond what its last quantum was charged (FairGV §3.3.2:
    /// a kernel of a launch-gate slice that ran past the slice, reported when measured):
    /// policies that account service charge it now.
    TenantCharged {
        /// The tenant.
        tenant: TenantId,
        /// The GPU time, emulated.
        ran: Nanos,
    },
    /// A task was submitted to its tenant's queue.
    TaskSubmitted(TaskSpec),
    /// The host's CPU scheduler switched a core to a thread (a VM's vCPU) of this
    /// tenant, which has GPU work queued: Pegasus's coscheduling request (FairGV §5.3's
    /// Strict baseline). Only a driver that models the host's CPU sends it.
    CoscheduleRequested {
        /// The tenant.
        tenant: TenantId,
    },
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
        /// Whether `ran_for` was measured (synchronised after the task) or inferred
        /// (FairGV §3.3's sampled accounting measures only some requests of a slice).
        #[serde(default = "yes")]
        measured: bool,
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
    /// A tenant's device memory in use, sampled (DCUDA's monitor, beside demand).
    MemorySampled {
        /// The tenant.
        tenant: TenantId,
        /// The GPU.
        gpu: GpuId,
        /// Bytes in use.
        bytes: Bytes,
    },
    /// A migration the policy asked for failed; the tenant stays where it was.
    MigrationFailed {
        /// The tenant.
        tenant: TenantId,
        /// Why.
        reason: String,
    },
    /// A repartition the policy asked for failed; the old partitions remain.
    RepartitionFailed {
        /// The GPU.
        gpu: GpuId,
        /// Why.
        reason: String,
    },
    /// A power-state change the policy asked for took effect.
    GpuPowerChanged {
        /// The GPU.
        gpu: GpuId,
        /// Its state now.
        powered: bool,
    },
    /// The driver cannot carry out an action the policy asked for (its model or its
    /// executor does not support it); nothing was done.
    ActionRefused {
        /// The action, as the policy asked for it (so that its books can be undone).
        action: Box<crate::action::Action>,
        /// Why.
        reason: String,
    },
    /// Periodic wake-up, at the interval the policy asked for.
    Tick,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages written before the vocabulary grew still read, with the defaults
    /// meaning what they meant then: a measured time, a plain task of one request.
    #[test]
    fn older_messages_read_with_their_old_meaning() {
        let e: Event = serde_json::from_str(
            r#"{"event":"task_finished","task":3,"placement":{"gpu":1,"partition":null},"ran_for":5,"result":{"Ok":null}}"#,
        )
        .unwrap();
        assert!(matches!(e, Event::TaskFinished { measured: true, .. }), "{e:?}");
        let t: TaskSpec =
            serde_json::from_str(r#"{"id":1,"tenant":2,"kernel":0,"memory":0}"#).unwrap();
        assert_eq!((t.batch, t.launch), (1, None));
        let e = Event::MigrationFailed { tenant: TenantId(4), reason: "no memory".into() };
        let back: Event = serde_json::from_str(&serde_json::to_string(&e).unwrap()).unwrap();
        assert_eq!(back, e);
    }
}
