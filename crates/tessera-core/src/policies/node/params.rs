//! The node policy's parameters (each part's switch, for `tessera sim node`'s
//! ablations) and what it publishes for status displays and experiments.

use super::*;

/// The node policy's parameters.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct NodeParams {
    /// Flexy's pool: K, reset, the SLA it plans for, k, the order.
    pub flexy: FlexyParams,
    /// Fair queuing's spin budget: how long a batch GPU waits for the tenant whose
    /// turn it is to submit its next task.
    pub spin: Nanos,
    /// DCUDA's period: the monitor's sample and the balancer's run.
    pub interval: Nanos,
    /// Overloaded above this share of a GPU's time (DCUDA's 100%).
    pub thresh_over: f64,
    /// Underloaded below this (DCUDA's 90%); step 2 merges two GPUs up to it.
    pub thresh_under: f64,
    /// Step 2, compaction of two light GPUs onto one.
    pub energy: bool,
    /// A moved tenant stays at least this long.
    pub min_stay: Nanos,
    /// DCUDA's steps 1 and 2 (2 when `energy`) among the GPUs outside the pool. Off for
    /// an ablation, which keeps step 1's moves off the pool's GPUs.
    #[serde(default = "yes")]
    pub balance: bool,
    /// The node policy's own step after DCUDA's: even out weighted fair shares across
    /// the GPUs outside the pool. Off for an ablation.
    #[serde(default = "yes")]
    pub even_shares: bool,
    /// The node policy's own move that frees one GPU's memory for a tenant waiting
    /// unplaced. Off for an ablation.
    #[serde(default = "yes")]
    pub make_room: bool,
    /// schedGPU's rule for homes: a batch tenant is homed and moved only where its
    /// declared memory fits. Off for an ablation only (tenants then crash each other
    /// out of memory, as under every single policy but schedGPU's).
    #[serde(default = "yes")]
    pub memory_homes: bool,
    /// The pool keeps its GPUs and grows onto GPUs where no batch tenant lives before
    /// others, in Flexy's order within each; off for an ablation: the pool then takes
    /// whichever GPUs Flexy's order says (idle ones first), and roams over the batch
    /// tenants' homes, which the balancer and the share step then move out of its way.
    #[serde(default = "yes")]
    pub steady_pool: bool,
    /// Whether tenants may be moved at all. Off on real GPUs, whose programs cannot be
    /// moved yet: tenants are then homed and never moved (no balancer, share step or
    /// room step), and one that fits nowhere waits for memory to free.
    #[serde(default = "yes")]
    pub migrate: bool,
    /// Flexy's minimum reservation (`flexy.reserve`) holds only while a user-facing
    /// tenant is registered; with none, every GPU is the batch tenants'. Off for an
    /// ablation: the reserved GPUs then stay idle with no service to use them.
    #[serde(default = "yes")]
    pub reserve_only_with_services: bool,
    /// A user-facing request about to miss its SLA in the pool's queue runs on the next
    /// GPU outside the pool to free, before batch work. Off for an ablation: Flexy's
    /// pool alone.
    #[serde(default = "yes")]
    pub overflow: bool,
    /// With the steady pool, among the GPUs where contending batch tenants live the
    /// pool takes the one whose tenants are furthest ahead of their fair share (by
    /// fair queuing's start tags, at each sample): where the tenants' memory keeps
    /// them from moving off, the pool's stop rotates among them instead of falling on
    /// the same ones. Off for an ablation: Flexy's order among those GPUs.
    #[serde(default = "yes")]
    pub fair_pool: bool,
}

fn yes() -> bool {
    true
}

impl NodeParams {
    /// The defaults: each paper's values (Flexy's k = 10, FairGV's quanta with a 2 ms
    /// spin, DCUDA's 100 ms, 100% and 90%), with the daemon's 1 s stay after a move.
    pub fn new(flexy: FlexyParams) -> NodeParams {
        NodeParams {
            flexy,
            spin: Nanos::from_millis(2),
            interval: Nanos::from_millis(100),
            thresh_over: 1.0,
            thresh_under: 0.9,
            energy: true,
            min_stay: Nanos::from_secs(1),
            balance: true,
            even_shares: true,
            make_room: true,
            memory_homes: true,
            steady_pool: true,
            migrate: true,
            reserve_only_with_services: true,
            overflow: true,
            fair_pool: true,
        }
    }
}

/// What the node policy publishes for status displays and experiments.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeReport {
    /// The user-facing pool's GPUs.
    pub pool: Vec<GpuId>,
    /// Each GPU's batch load at the last sample (its homed tenants' share of its time).
    pub load: Vec<f64>,
    /// Batch tenants homed on each GPU.
    pub homed: Vec<usize>,
    /// Batch tenants waiting for memory to be homed.
    pub unplaced: usize,
    /// Migrations decided, in all.
    pub migrations: u64,
    /// The most recent migrations (at most [`dcuda::DcudaReport::RECENT`]).
    pub recent: Vec<dcuda::MigrationRecord>,
}
