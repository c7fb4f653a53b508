//! Identifiers. Each is a distinct type so that a task id is never used as a GPU index.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! id_type {
    ($(#[$doc:meta])* $name:ident($inner:ty), $prefix:literal) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub $inner);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, concat!($prefix, "{}"), self.0)
            }
        }
    };
}

id_type!(
    /// A physical (or emulated) GPU of the node, numbered from 0.
    GpuId(u32), "gpu"
);
id_type!(
    /// A spatial partition of one GPU (gpu-lets' gpu-let, an MPS share).
    PartitionId(u32), "part"
);
id_type!(
    /// A tenant: one application with one queue of tasks (Flexy's virtual accelerator).
    TenantId(u64), "tenant"
);
id_type!(
    /// A task: the smallest unit of GPU work the scheduler places (a kernel with its data).
    TaskId(u64), "task"
);
id_type!(
    /// A request for GPU memory (schedGPU's pre-allocation).
    MemRequestId(u64), "mem"
);
