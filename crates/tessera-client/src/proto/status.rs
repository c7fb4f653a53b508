//! The daemon's status report ([`super::Reply::Status`]): its GPUs, tenants, jobs and
//! totals, recent events, and the balancer's migrations.

use super::*;

/// One GPU in a status report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuReport {
    /// Index.
    pub gpu: u32,
    /// `user_facing`, `batch`, or `shared` when the policy has no pools.
    pub pool: String,
    /// What it runs: `idle`, `resetting`, the task's tenant, `busy` (another uid's
    /// task) or `N tasks` when several co-run.
    pub busy: String,
    /// The tasks running on it and the share of the GPU each holds now.
    #[serde(default)]
    pub running: Vec<RunningReport>,
    /// Memory granted on it (ledger), bytes.
    pub memory_used: u64,
    /// Its capacity, bytes.
    pub memory_total: u64,
    /// Fraction of time busy since the daemon started.
    pub utilization: f64,
    /// Its partitions' sizes, % of the GPU (empty: whole, unpartitioned).
    #[serde(default)]
    pub partitions: Vec<u32>,
    /// Under a balancer: the summed demand of the tenants placed on it (fraction of
    /// the GPU) and its state (`underloaded`, `normal`, `overloaded`), as of the
    /// balancer's last sample.
    #[serde(default)]
    pub load: Option<(f64, String)>,
}

/// A task running on a GPU, in a status report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunningReport {
    /// Its tenant, or `None` when it belongs to another uid than the viewer's.
    pub tenant: Option<u64>,
    /// The share of the GPU it holds now (0-1: its demand times the rate the
    /// shared-GPU model gives it), when the executor models shares (the emulated one).
    pub share: Option<f64>,
}

/// What Slurm gave a job on this node, as its Prolog read it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct JobGrant {
    /// The job id.
    pub job: u64,
    /// The job's user.
    pub uid: u32,
    /// Its GPUs, by Slurm's index on this node (`SLURM_JOB_GPUS`).
    pub gpus: Vec<u32>,
    /// Its shards on this node; 0 for a job of whole GPUs.
    pub shards: u32,
    /// Its partition.
    #[serde(default)]
    pub partition: String,
    /// Its QOS.
    #[serde(default)]
    pub qos: String,
    /// Its comment (`--comment`): `tessera:user-facing[:SLA_MS]` asks for a
    /// user-facing tenant.
    #[serde(default)]
    pub comment: String,
}

/// A Slurm job as the daemon holds it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct JobReport {
    /// The job id.
    pub job: u64,
    /// The job's user.
    pub uid: u32,
    /// Its GPUs.
    pub gpus: Vec<u32>,
    /// Its shards (whole GPUs count as every shard of each).
    pub shards: u32,
    /// The class its tenants get.
    pub class: TenantClass,
    /// Their SLA, ms (user-facing).
    pub sla_ms: u64,
    /// The weight its tenants get: its shards.
    pub weight: u32,
    /// GPU memory its shards entitle it to, bytes, all its tenants together.
    pub memory_entitled: u64,
    /// Memory its open tenants declared, bytes.
    pub memory_declared: u64,
    /// Its open tenants.
    pub tenants: Vec<u64>,
    /// Registrations waiting for memory (`over_entitlement = "wait"`).
    pub waiting: u32,
}

/// One tenant in a status report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TenantReport {
    /// Id.
    pub tenant: u64,
    /// Owner's pid (from `SO_PEERCRED`).
    pub pid: u32,
    /// Owner's uid.
    pub uid: u32,
    /// Class.
    pub class: TenantClass,
    /// SLA, ms (user-facing).
    pub sla_ms: u64,
    /// Tasks waiting.
    pub queued: u64,
    /// Tasks completed.
    pub done: u64,
    /// Tasks failed or cancelled.
    pub not_done: u64,
    /// Fraction of completed tasks within the SLA (user-facing).
    pub sla_met: Option<f64>,
    /// Memory the tenant holds now, bytes: its running tasks' and what its program
    /// reserved through the daemon (leases and contexts included), as the ledger says.
    pub memory_held: u64,
    /// Its latest kernel's demand (share of the GPU's block slots it fills alone, 0-1,
    /// by the occupancy arithmetic), when its program runs under the interposer.
    #[serde(default)]
    pub demand: Option<f64>,
    /// GPU time charged to it so far, ms of the daemon's time: its tasks' run times,
    /// and for programs under the interposer the GPU time their launch gate accounted
    /// in each slice (not the time they held it).
    #[serde(default)]
    pub gpu_ms: f64,
    /// The inference model it serves, if any.
    #[serde(default)]
    pub model: Option<ModelReport>,
    /// Its weight for fair sharing.
    #[serde(default = "one")]
    pub weight: u32,
    /// Its weight over the summed weights of the tenants with work now (what fair
    /// sharing entitles it to), when it has work.
    #[serde(default)]
    pub entitled_share: Option<f64>,
    /// Its share of the GPU time the daemon charged over the last 10 s, when any was.
    #[serde(default)]
    pub received_share: Option<f64>,
    /// Time its tasks spent queued, in all, ms.
    #[serde(default)]
    pub waiting_ms: f64,
    /// The Slurm job it belongs to.
    #[serde(default)]
    pub job: Option<u64>,
    /// The GPUs it was placed on (programs under the interposer, a Slurm job's
    /// tenants; empty: any, as the policy dispatches).
    #[serde(default)]
    pub gpus: Vec<u32>,
    /// Per GPU it was charged time on over the last [`BUSY_WINDOW_MS`]: the fraction
    /// of that window the GPU spent on its work (0-1), as the daemon charged it (a
    /// task or slice is charged when it ends). What NVML's utilization shows the
    /// tenant's programs under the interposer.
    #[serde(default)]
    pub gpu_busy: Vec<GpuBusy>,
}

/// The window of [`TenantReport::gpu_busy`], ms of the daemon's (emulated) time.
pub const BUSY_WINDOW_MS: u64 = 1000;

/// A tenant's recent use of one GPU.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GpuBusy {
    /// The node's GPU index.
    pub gpu: u32,
    /// The fraction of the last [`BUSY_WINDOW_MS`] the GPU ran the tenant's work, 0-1.
    pub busy: f64,
}

/// Counts since the daemon started, over all tenants past and present.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    /// User-facing tasks completed.
    pub uf_done: u64,
    /// Of those, within their SLA.
    pub uf_met: u64,
    /// Batch tasks completed.
    pub batch_done: u64,
    /// Tasks failed.
    pub failed: u64,
    /// Tasks cancelled.
    pub cancelled: u64,
    /// GPU resets.
    pub resets: u64,
    /// Tenant migrations between GPUs (`balance = "dcuda"`).
    #[serde(default)]
    pub migrations: u64,
    /// Slices of CPU-GPU interactive tenants started with their threads raised
    /// (`coscheduling`, FairGV §3.2.3).
    #[serde(default)]
    pub coscheduled: u64,
}

/// The node's state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatusReport {
    /// Policy label.
    pub policy: String,
    /// The daemon's memory ledger (its path).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ledger: Option<String>,
    /// Executor (`emulated` or `cuda`).
    pub executor: String,
    /// Seconds since start.
    pub uptime_s: f64,
    /// Per GPU.
    pub gpus: Vec<GpuReport>,
    /// Per tenant: one page of those the query matches.
    pub tenants: Vec<TenantReport>,
    /// Tenants the query matches, in all pages.
    #[serde(default)]
    pub tenants_total: u64,
    /// Inference serving (`policy = "gpulets"`): new schedules made, and checks that
    /// found the tracked rates not schedulable (the schedule in force kept serving).
    #[serde(default)]
    pub serving: Option<ServingSummary>,
    /// The balancer (`balance = "dcuda"`): its recent migrations.
    #[serde(default)]
    pub balance: Option<BalanceSummary>,
    /// The Slurm jobs this viewer may see (root and the daemon's user: all), at most
    /// 64 (lowest job ids first).
    #[serde(default)]
    pub jobs: Vec<JobReport>,
    /// How many Slurm jobs this viewer may see, all told.
    #[serde(default)]
    pub jobs_total: u64,
    /// Shards per GPU the daemon's `[slurm]` settings advertise.
    #[serde(default)]
    pub slurm_shards_per_gpu: u32,
    /// Counts since start.
    pub totals: Totals,
    /// The most recent events this viewer may see, oldest first (as many as asked).
    #[serde(default)]
    pub events: Vec<EventReport>,
}

/// A decision of the daemon, in a status report (the event log's line, for a person).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EventReport {
    /// When, seconds since the daemon started.
    pub at_s: f64,
    /// Its kind, as in the event log (`admitted`, `memory_wait`, ...).
    pub kind: String,
    /// What happened.
    pub text: String,
}

/// What a balancer decided.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct BalanceSummary {
    /// Migrations decided since start.
    pub migrations: u64,
    /// The most recent ones, oldest first.
    pub recent: Vec<MigrationReport>,
}

/// One migration, in a status report.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MigrationReport {
    /// When it was decided, seconds since the daemon started.
    pub at_s: f64,
    /// The tenant, or `None` when it belongs to another uid than the viewer's.
    pub tenant: Option<u64>,
    /// From this GPU.
    pub from: u32,
    /// To this GPU.
    pub to: u32,
    /// `balance` (off an overloaded GPU) or `energy` (compaction).
    pub reason: String,
}
