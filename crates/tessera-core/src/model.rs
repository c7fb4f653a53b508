//! The model: GPUs, tenants and tasks as the scheduling core sees them.

use crate::ids::{GpuId, PartitionId, TaskId, TenantId};
use crate::units::{Bytes, Nanos, PerMille};
use serde::{Deserialize, Serialize};

/// One GPU of the node.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuSpec {
    /// Its id; GPUs of a node are numbered 0..N.
    pub id: GpuId,
    /// Device memory capacity.
    pub memory: Bytes,
}

impl GpuSpec {
    /// `count` identical GPUs numbered from 0.
    pub fn uniform(count: usize, memory: Bytes) -> Vec<GpuSpec> {
        (0..count).map(|i| GpuSpec { id: GpuId(i as u32), memory }).collect()
    }
}

/// What a tenant's tasks need from the scheduler.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case", tag = "class")]
pub enum ServiceClass {
    /// Latency-critical: each task should complete within `sla` of its submission.
    UserFacing {
        /// The latency target, from submission to completion.
        sla: Nanos,
    },
    /// Throughput work with no latency target, which must still not starve.
    Batch,
}

impl ServiceClass {
    /// True for user-facing tenants.
    pub fn is_user_facing(self) -> bool {
        matches!(self, ServiceClass::UserFacing { .. })
    }
}

/// A tenant (Flexy's virtual accelerator; FairGV's tenant; DCUDA's application).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TenantSpec {
    /// Its id, unique for the driver's lifetime.
    pub id: TenantId,
    /// User-facing with an SLA, or batch.
    pub class: ServiceClass,
    /// Weight for weighted fair sharing (FairGV); 1 when unused.
    pub weight: u32,
    /// Priority for priority policies (schedGPU's priority notification); higher first.
    pub priority: u8,
    /// The GPU memory the tenant expects to hold (schedGPU, DCUDA's feasibility check).
    pub memory: Bytes,
    /// The only GPUs its tasks may run on (a Slurm job's); empty: any.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpus: Vec<crate::GpuId>,
    /// The fair-share group it belongs to (a Slurm job): the group's tenants share its
    /// one weight in fair queuing, however many of them there are.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<u64>,
    /// Its weight among its group's tenants (hierarchical fair queuing: the group's
    /// `weight` against other groups and tenants, then this within the group); 1 when
    /// unused.
    #[serde(default = "one")]
    pub weight_in_group: u32,
}

impl TenantSpec {
    /// A tenant of `class` with weight 1, priority 0 and no declared memory.
    pub fn new(id: TenantId, class: ServiceClass) -> TenantSpec {
        TenantSpec {
            id,
            class,
            weight: 1,
            priority: 0,
            memory: Bytes(0),
            gpus: Vec::new(),
            group: None,
            weight_in_group: 1,
        }
    }
}

/// A task as policies see it. Its true cost is deliberately absent: policies learn
/// durations from [`crate::Event::TaskFinished`], as a real scheduler must.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TaskSpec {
    /// Its id, unique for the driver's lifetime.
    pub id: TaskId,
    /// The tenant whose queue it joins.
    pub tenant: TenantId,
    /// Which kernel it runs (an index into the driver's kernel table), so that
    /// estimators can learn per-kernel durations.
    pub kernel: u32,
    /// Device memory the task needs while it runs.
    pub memory: Bytes,
    /// What a scheduler may know of its kernel before running it, when the driver
    /// knows (the interposer sees launches; the emulated demo does not).
    #[serde(default)]
    pub launch: Option<LaunchInfo>,
    /// Inference requests this task carries (1 for a plain task).
    #[serde(default = "one")]
    pub batch: u32,
}

fn one() -> u32 {
    1
}

/// A kernel launch's shape and what it asks of a GPU (DCUDA §3.2's inputs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchInfo {
    /// Blocks in the grid.
    pub grid_blocks: u64,
    /// Threads per block.
    pub threads_per_block: u32,
    /// The share of the GPU it would occupy alone, from the occupancy arithmetic.
    pub demand: PerMille,
}

/// Where a task runs: a whole GPU, or one spatial partition of it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Placement {
    /// The GPU.
    pub gpu: GpuId,
    /// The partition of that GPU, or `None` for the whole (time-shared) GPU.
    pub partition: Option<PartitionId>,
}

impl Placement {
    /// The whole GPU `gpu`.
    pub fn whole(gpu: GpuId) -> Placement {
        Placement { gpu, partition: None }
    }
}
