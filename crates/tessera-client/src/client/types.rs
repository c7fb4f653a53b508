//! What a client asks of the daemon and is answered: a tenant's registration and its
//! placement, a task and its completion, a status request's filter.

use crate::proto::TenantClass;
use std::time::Duration;

/// A tenant's registration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TenantOptions {
    /// Class.
    pub class: TenantClass,
    /// SLA (user-facing).
    pub sla: Duration,
    /// Weight.
    pub weight: u32,
    /// Priority.
    pub priority: u8,
    /// Expected GPU memory, bytes.
    pub memory: u64,
    /// The Slurm job to register under (see `Request::Register`'s `job`); a job's
    /// tenant gets the job's GPUs, weight, class and memory entitlement.
    pub job: Option<u64>,
    /// The Kubernetes allocation to register under, by its token (see
    /// `Request::Register`'s `token`).
    pub token: Option<crate::pod::Token>,
}

/// Where the daemon placed a tenant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    /// The tenant.
    pub tenant: u64,
    /// The node's GPUs it was placed on (their indices).
    pub gpus: Vec<u32>,
    /// Those GPUs' UUIDs, in the same order, when the daemon knows them (empty for
    /// emulated GPUs).
    pub uuids: Vec<String>,
    /// This process's pid as the daemon sees it (0 if it does not say).
    pub pid: u32,
}

impl TenantOptions {
    /// A batch tenant with weight 1, priority 0 and no declared memory.
    pub fn batch() -> TenantOptions {
        TenantOptions {
            class: TenantClass::Batch,
            sla: Duration::ZERO,
            weight: 1,
            priority: 0,
            memory: 0,
            job: None,
            token: None,
        }
    }

    /// A user-facing tenant with this SLA, weight 1, priority 0 and no declared memory.
    pub fn user_facing(sla: Duration) -> TenantOptions {
        TenantOptions { class: TenantClass::UserFacing, sla, ..TenantOptions::batch() }
    }
}

/// A task to run.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TaskRequest {
    /// Kernel id.
    pub kernel: u32,
    /// Emulation: the kernel's work on the reference GPU.
    pub cost: Duration,
    /// Device memory it needs, bytes.
    pub memory: u64,
    /// Input bytes.
    pub input: Vec<u8>,
    /// Output bytes wanted.
    pub output_len: u32,
}

/// How a task ended.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Completed.
    Done,
    /// Failed, with one of [`crate::region::reason`].
    Failed(u32),
    /// Cancelled, with one of [`crate::region::reason`].
    Cancelled(u32),
    /// An echo answered (benchmark).
    Echo,
}

/// A finished task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The handle `submit` returned.
    pub handle: u64,
    /// How it ended.
    pub outcome: Outcome,
    /// Time queued in the daemon (daemon's clock, emulated time).
    pub queued: Duration,
    /// Time running.
    pub ran: Duration,
    /// GPU it ran on.
    pub gpu: Option<u32>,
    /// Its output.
    pub output: Vec<u8>,
}

/// Which tenants a status report lists (all of them, as far as this client may see,
/// by default).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StatusFilter {
    /// Only this tenant.
    pub tenant: Option<u64>,
    /// Only tenants of this uid.
    pub uid: Option<u32>,
    /// Only this GPU, and tenants with a task running on it.
    pub gpu: Option<u32>,
    /// The most recent events to include (0: none; at most `proto::STATUS_EVENTS`).
    pub events: u32,
}
